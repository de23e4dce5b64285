"""Where each difference arose: before the topic, between the topic and the lake, or in the lake.

A difference says that the lake as of the snapshot is not the source; it does not say whose fault
that is. Three points are compared as of the run's snapshot:

* the **topic**: the range's records as Kafka holds them (the bronze ``events``, one row per record,
  not the changelog that compaction derived from them), each key's last distinct change the snapshot
  saw (a redelivered copy counts where it was first emitted); a key the range never mentions keeps the word
  of the previous table, which the previous run verified; a truncate or a complete snapshot round
  after a key's last change says the key is gone;
* the **lake as of the snapshot**: its row's change identity (``_cdc_op``, ``_cdc_txid``, ``_cdc_lsn``);
* the **published table**: the version this run committed.

``source->topic``: the lake holds exactly the topic's last word on the key, so the topic itself
disagrees with the source (an event that never reached Kafka, or reached it wrong). ``topic->lake``:
the lake does not hold the topic's last word (compaction lost, misordered or mis-folded a change it
had). ``lake``: the lake as of the snapshot equals the source, but the published table does not
equal it, on a key no later change touched: introduced after the fold (another writer, a lost file,
a wrong commit); the check of the fold alone cannot see these, so they are differences of their own.

Decoding is shared by the topic side and the lake side: a value decoded wrongly from a record the
lake took reads as ``source->topic``.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from . import names
from .compaction import (
    COMPLETING_MARKS,
    ORIGIN_RECONCILE,
    SEGMENT,
    TRUNCATE,
    change_events,
    copy_order,
    key_columns,
    of_table,
    table_image_event,
    with_first_emitted,
    with_key_segments,
    without_raw_values,
    without_redeliveries,
)
from .debezium.decoding import tag_decode_errors
from .debezium.pgtypes import DEFAULT_OPTIONS, DecodeOptions, TableSpec
from .diff import conform, diff_rows, seen_in_snapshot
from .visibility import PgSnapshot

SOURCE_TO_TOPIC = "source->topic"
TOPIC_TO_LAKE = "topic->lake"
IN_LAKE = "lake"
STAGES = (SOURCE_TO_TOPIC, TOPIC_TO_LAKE, IN_LAKE)
# a change's identity in the changelog and in the events, and as the lake table keeps it
_IDENTITY = ("op", "source_txid", "source_lsn")
_LAKE_IDENTITY = ("_cdc_op", "_cdc_txid", "_cdc_lsn")


def stage_count(stage: str) -> str:
    """The name of a stage's count among the suite's counts (``stage source->topic``)."""
    return f"stage {stage}"


def topic_changes(
    events: DataFrame, table: str, key: Sequence[str], key_spec: TableSpec, options: DecodeOptions = DEFAULT_OPTIONS
) -> DataFrame:
    """The change records of ``table`` among a range's ``events`` (bronze), with typed key columns.

    Only the key columns (``key_spec``) are decoded: a change's key and identity are all that
    :func:`topic_words` needs. A truncate has no key (null key columns).
    """
    changes = without_raw_values(change_events(of_table(events, table)))
    decoded = tag_decode_errors(changes, key_spec, options)
    return decoded.select(
        *key_columns(key, "after_row", "before_row"),
        "partition",
        "offset",
        "op",
        "source_txid",
        "source_lsn",
        "source_ts_ms",
        "source_snapshot",
        "ts_ms",
        "ts_us",
    )


def topic_words(changes: DataFrame, snapshot: PgSnapshot, key: Sequence[str]) -> DataFrame:
    """Per key, the topic's last word in the range: ``word`` (op, txid, LSN of its last distinct change).

    ``changes``: the range's change records from the bronze ``events`` with typed key columns. A key's
    changes stay in one partition until partitions are added; across partitions the first LSN of each
    run of the key's changes in one partition orders them (``compaction.with_key_segments``, as for the fold).
    """
    keyed = [names.column(k) for k in key]
    seen = changes.filter(seen_in_snapshot(changes, snapshot) & (F.col("op") != TRUNCATE))
    first_copy = Window.partitionBy(*keyed, *_IDENTITY).orderBy(*copy_order())
    distinct = (
        with_first_emitted(seen, [*keyed, *_IDENTITY])
        .withColumn("_copy", F.row_number().over(first_copy))
        .filter(F.col("_copy") == 1)
    )
    last = Window.partitionBy(*keyed).orderBy(F.col(SEGMENT).desc(), F.col("offset").desc())
    return (
        with_key_segments(distinct, keyed, applied=F.lit(True))  # copies are gone already
        .withColumn("_n", F.row_number().over(last))
        .filter(F.col("_n") == 1)
        .select(*keyed, F.struct(*(F.col(c) for c in _IDENTITY)).alias("word"))
    )


def reset_lsn(changes: DataFrame, snapshot: PgSnapshot) -> int | None:
    """The LSN of the range's newest truncate or complete snapshot round the snapshot saw, or None.

    Every key whose last word precedes it is gone as far as the topic says (one small action)."""
    seen = changes.filter(seen_in_snapshot(changes, snapshot))
    resets = seen.filter(
        (F.col("op") == TRUNCATE) | (table_image_event() & F.col("source_snapshot").isin(*COMPLETING_MARKS))
    )
    row = resets.agg(F.max("source_lsn").alias("lsn")).first()
    return None if row is None else row["lsn"]


def attribute(
    diff: DataFrame,
    as_of: DataFrame,
    previous: DataFrame | None,
    words: DataFrame,
    key: Sequence[str],
    *,
    reset: int | None = None,
    few: bool = True,
) -> DataFrame:
    """``diff`` with ``stage``: ``source->topic`` where the lake holds the topic's last word, else ``topic->lake``.

    ``previous``: the table the run folded onto (its word stands for keys the range never mentions);
    ``reset``: :func:`reset_lsn`. The tables are cut to the differing keys first, sent to every task
    when they are ``few``, so a handful of differences does not shuffle the whole table.
    """
    keys = list(key)
    keyed = [names.column(k) for k in key]
    wanted = diff.select(*keyed)
    wanted = F.broadcast(wanted) if few else wanted
    identity = F.struct(*(F.col(c).alias(i) for c, i in zip(_LAKE_IDENTITY, _IDENTITY, strict=True)))

    def of_wanted(df: DataFrame, name: str) -> DataFrame:
        return df.join(wanted, keys, "left_semi").select(*keyed, identity.alias(name))

    rows = diff.join(of_wanted(as_of, "_lake"), keys, "left").join(words.join(wanted, keys, "left_semi"), keys, "left")
    if previous is not None:
        rows = rows.join(of_wanted(previous, "_previous"), keys, "left")
    else:
        rows = rows.withColumn("_previous", F.lit(None).cast(rows.schema["_lake"].dataType))
    gone = F.lit(False) if reset is None else F.col("word.source_lsn") < F.lit(reset)
    topic = (
        F.when(F.col("word").isNull(), F.lit(None) if reset is not None else F.col("_previous"))
        .when(gone | (F.col("word.op") == "d"), F.lit(None))
        .otherwise(F.col("word"))
    )
    holds_word = F.coalesce(topic.eqNullSafe(F.col("_lake")), F.lit(False))
    stage = F.when(holds_word, F.lit(SOURCE_TO_TOPIC)).otherwise(F.lit(TOPIC_TO_LAKE))
    return rows.withColumn("stage", stage).select(*names.columns(diff.columns), "stage")


def changed_after_snapshot(changelog: DataFrame, snapshot: PgSnapshot, key: Sequence[str]) -> DataFrame | None:
    """Keys the range changed after the snapshot: the published table may differ there. None when a
    truncate did (it changed every key)."""
    later = without_redeliveries(changelog).filter(
        ~(seen_in_snapshot(changelog, snapshot) | (F.col("origin") == ORIGIN_RECONCILE))
    )
    if later.filter(F.col("op") == TRUNCATE).limit(1).count():
        return None
    return later.select(*names.columns(key)).distinct()


def lake_drift(
    published: DataFrame,
    as_of: DataFrame,
    source: DataFrame,
    key: Sequence[str],
    columns: Sequence[str],
    *,
    changed_after: DataFrame,
    differing: DataFrame,
) -> DataFrame:
    """Differences of the ``lake`` stage: keys where the published table is not the lake as of the
    snapshot, other than keys changed after it (``changed_after``) or already ``differing`` from the source.

    Kinds as :func:`diff.diff_rows` gives them against the lake as of the snapshot, which equals the
    source on these keys: ``missing`` (the published table lacks the row), ``extra``, ``stale``. It is
    that comparison, the published table against the lake as of the snapshot in the source's types.
    """
    keys = list(key)
    drift = (
        diff_rows(published, conform(as_of, source, columns), key, columns)
        .join(changed_after, keys, "left_anti")
        .join(differing.select(*names.columns(key)), keys, "left_anti")
    )
    return drift.withColumn("stage", F.lit(IN_LAKE))
