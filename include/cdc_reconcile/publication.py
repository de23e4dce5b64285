"""Publishing a run's fold to the lake table: one commit, onto the version the run's predecessor published.

The common hour changes a small share of the keys, so the fold is a MERGE of just those keys: the
keys the run's changelog (and repairs) touch, folded from their rows at the base version, upserted or
deleted. The table has deletion vectors, so a MERGE writes the changed rows, not the files that held
their old versions, and a change data feed, so a run publishing again (reconcile, a retried task)
also restores the keys its own earlier commits changed. What a MERGE of some keys cannot express is
written as one overwrite from the base: the first run, a full rescan, a snapshot round (a complete
table image), a truncate, and a change of the table's columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import names, storage
from .column_lineage import ColumnLineage, with_column_metadata
from .compaction import CDC_COLUMNS, TRUNCATE, fold_table, without_redeliveries
from .debezium.pgtypes import DEFAULT_OPTIONS, DecodeOptions
from .spark import kept

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# Set when the first commit creates the table.
TABLE_PROPERTIES = {"delta.enableDeletionVectors": "true", "delta.enableChangeDataFeed": "true"}


@dataclass(frozen=True)
class FoldInputs:
    """What a run folds: its changelog (repairs included), and the table as its predecessor published it."""

    changelog: DataFrame
    spec: dict[str, str]
    key: Sequence[str]
    previous: DataFrame | None  # the base version's rows; None: fold from nothing
    base: int | None  # the base version
    latest: int | None  # the table's newest version (this run's own earlier commit, or the base)
    resets: DataFrame
    # The stored base's columns are not the run's (``previous`` is then conformed to the run's).
    columns_changed: bool = False
    lineage: ColumnLineage | None = None  # gives the written table its column identities and descriptions
    decode_options: DecodeOptions = DEFAULT_OPTIONS  # how the columns were decoded: their descriptions say so


def overwrite_reason(inputs: FoldInputs) -> str | None:
    """Why the fold must overwrite the table instead of merging its changed keys, or None."""
    if inputs.previous is None:
        return "no base table (first run or full rescan)"
    if inputs.columns_changed or list(inputs.previous.columns) != [*inputs.spec, *CDC_COLUMNS]:
        return "the table's columns changed"
    if inputs.resets.limit(1).count():
        return "a snapshot round images the whole table"
    if inputs.changelog.filter(names.column("op") == TRUNCATE).limit(1).count():
        return "a truncate empties the table"
    return None


def touched_keys(inputs: FoldInputs, location: str) -> DataFrame | None:
    """Keys the fold must rewrite: its changes' keys and those this run's earlier commits changed.

    None when the change feed of those commits cannot be read (the caller overwrites instead).
    """
    key_columns = names.columns(inputs.key)
    changes = without_redeliveries(inputs.changelog).filter(names.column("op") != TRUNCATE).select(*key_columns)
    if inputs.latest is not None and inputs.base is not None and inputs.latest > inputs.base:
        earlier = storage.changed_keys(changes.sparkSession, location, inputs.key, inputs.base + 1, inputs.latest)
        if earlier is None:
            return None
        changes = changes.unionByName(earlier)
    return changes.distinct()


def merge_source(inputs: FoldInputs, keys: DataFrame, previous: DataFrame) -> DataFrame:
    """Each touched key's folded row, or a delete flag for a key the fold removes.

    ``previous``: the base version's rows of the touched ``keys`` (see :func:`touched_rows`).
    """
    from pyspark.sql import functions as F

    key_columns = names.columns(inputs.key)
    upserts = fold_table(inputs.changelog, inputs.spec, inputs.key, previous=previous).withColumn(
        storage.DELETE_FLAG, F.lit(False)
    )
    deletes = keys.join(upserts.select(*key_columns), [*inputs.key], "left_anti").withColumn(
        storage.DELETE_FLAG, F.lit(True)
    )
    return upserts.unionByName(deletes, allowMissingColumns=True)


def touched_rows(inputs: FoldInputs, keys: DataFrame) -> DataFrame:
    """The base version's rows of the touched keys."""
    assert inputs.previous is not None
    return inputs.previous.join(keys, [*inputs.key], "left_semi")


def publish_fold(inputs: FoldInputs, location: str, run: str, *, full_rescan: bool) -> tuple[storage.Commit, str]:
    """Fold and publish in one commit; returns it and how it was written (``merge`` or ``overwrite: why``)."""
    metadata = {"base_version": inputs.base, "full_rescan": full_rescan}
    reason = overwrite_reason(inputs)
    keys = None if reason else touched_keys(inputs, location)
    if reason is None and keys is None:
        reason = "the change feed of this run's earlier commit is unreadable"
    if reason is None and keys is not None:
        metadata["written_as"] = "merge"
        # Kept: the fold reads the base rows in several branches, and on Spark Connect each branch
        # lists the base version's files again when the query is planned.
        keys = kept(keys)
        previous = kept(touched_rows(inputs, keys))
        commit = storage.merge(merge_source(inputs, keys, previous), location, run, inputs.key, metadata=metadata)
        previous.unpersist()
        keys.unpersist()
        return commit, "merge"
    table = fold_table(inputs.changelog, inputs.spec, inputs.key, previous=inputs.previous, resets=inputs.resets)
    if inputs.lineage is not None:
        table = with_column_metadata(table, inputs.lineage, inputs.decode_options)
    metadata["written_as"] = f"overwrite: {reason}"
    properties = dict(TABLE_PROPERTIES)
    if storage.needs_column_mapping(table.columns):
        # Delta refuses overwrites of a column-mapped table with a change data feed: such a table has
        # none, and a run publishing again overwrites it from its base instead of merging.
        properties.pop("delta.enableChangeDataFeed")
    commit = storage.publish(table, location, run, sort_by=list(inputs.key), metadata=metadata, properties=properties)
    return commit, f"overwrite: {reason}"
