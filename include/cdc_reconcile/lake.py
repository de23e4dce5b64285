"""Where one table's datasets live in the lake, and how a run reads what earlier steps wrote.

Layout per table (``<lake_root>/<schema.table>/``):

* ``events/range=<run>``: bronze, every Kafka record of the run's offset range, parsed;
* ``quarantine/range=<run>``: records that could not be parsed or decoded, with the reason;
* ``changelog/range=<run>``: typed changes as Kafka delivered them, duplicates flagged until repair;
* ``duplicates/range=<run>``: every duplicate event of the range, by class (the audit's source);
* ``repairs/range=<run>``: repair events written by ``reconcile``;
* ``audit/range=<run>``: one row per repair (or would-be repair in a dry run);
* ``table/v=<run>``: the lake copy, the fold of the changelog (manifest-switched);
* ``snapshot/v=<run>``: the source snapshot and its metadata (written by ``snapshot_source``).

Runs name their partitions and versions by a path-safe form of the Airflow run id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import storage
from .errors import InputError
from .visibility import PgSnapshot

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

HISTORY_COLUMNS = ("partition", "op", "source_txid", "origin")


class PipelineError(InputError):
    """A step cannot run; the message names what is missing and which step produces it."""


def version_name(run_id: str) -> str:
    """Airflow run ids hold ':' and '+'; datasets name versions and ranges by a path-safe form."""
    return storage.safe_name(run_id)


@dataclass(frozen=True)
class TableLake:
    """Where one table's datasets live."""

    root: Path | str
    name: str

    @property
    def base(self) -> Path:
        return Path(self.root) / self.name

    @property
    def events(self) -> Path:
        return self.base / "events"

    @property
    def quarantine(self) -> Path:
        return self.base / "quarantine"

    @property
    def changelog(self) -> Path:
        return self.base / "changelog"

    @property
    def duplicates(self) -> Path:
        return self.base / "duplicates"

    @property
    def repairs(self) -> Path:
        return self.base / "repairs"

    @property
    def table(self) -> Path:
        return self.base / "table"

    @property
    def snapshot(self) -> Path:
        return self.base / "snapshot"

    @property
    def audit(self) -> Path:
        return self.base / "audit"


@dataclass(frozen=True)
class SnapshotInfo:
    """The run's snapshot: its visibility rule, the source's column type spec, and all its metadata."""

    visibility: PgSnapshot
    spec: dict[str, str]
    metadata: dict[str, Any]


def snapshot_info(lake: TableLake, run_id: str) -> SnapshotInfo:
    metadata = storage.read_metadata(lake.snapshot, version_name(run_id))
    if metadata is None:
        raise PipelineError(f"{lake.name}: no snapshot for run {run_id!r} under {lake.snapshot}; run snapshot_source")
    visibility = PgSnapshot(int(metadata["xmin"]), int(metadata["xmax"]), tuple(int(x) for x in metadata["xip"]))
    return SnapshotInfo(visibility, {c["name"]: c["type"] for c in metadata["columns"]}, metadata)


def is_full_rescan(lake: TableLake, run_id: str) -> bool:
    """Whether this run rebuilt the table from the whole topic (recorded with its table version)."""
    return bool((storage.read_metadata(lake.table, version_name(run_id)) or {}).get("full_rescan"))


def previous_table(spark: SparkSession, lake: TableLake, run_id: str) -> tuple[DataFrame | None, str | None]:
    """The lake table as the previous run left it, also when this run already published once.

    A full rescan starts from nothing: its range holds the whole topic.
    """
    if is_full_rescan(lake, run_id):
        return None, None
    current = storage.current_version(lake.table)
    if current == version_name(run_id):
        previous = (storage.read_metadata(lake.table, version_name(run_id)) or {}).get("previous_version")
    else:
        previous = current
    if previous is None:
        return None, None
    return storage.read_version(spark, lake.table, previous), previous


def history(
    spark: SparkSession, path: Path, run_id: str, columns: Sequence[str], *, full_rescan: bool = False
) -> DataFrame | None:
    """What earlier runs wrote to a partitioned dataset (all ranges but this run's; none for a rescan)."""
    if full_rescan:
        return None
    others = [p for p in storage.list_partitions(path) if p != version_name(run_id)]
    if not others:
        return None
    return storage.read_partitions(spark, path, others).select(*columns)


def run_changelog(spark: SparkSession, lake: TableLake, run_id: str, *, with_repairs: bool) -> DataFrame:
    """The run's changelog range, with the repair events ``reconcile`` wrote when asked."""
    changelog = storage.read_partitions(spark, lake.changelog, [version_name(run_id)])
    if changelog is None:
        raise PipelineError(f"{lake.name}: no changelog for run {run_id!r}; run compact_cdc first")
    if with_repairs and version_name(run_id) in storage.list_partitions(lake.repairs):
        changelog = changelog.unionByName(storage.read_partitions(spark, lake.repairs, [version_name(run_id)]))
    return changelog


def source_rows(spark: SparkSession, lake: TableLake, run_id: str) -> DataFrame:
    """The source table as the run's snapshot saw it."""
    source = storage.read_version(spark, lake.snapshot, version_name(run_id))
    if source is None:
        raise PipelineError(f"{lake.name}: snapshot data for run {run_id!r} missing under {lake.snapshot}")
    return source


def run_partition(spark: SparkSession, path: Path, run_id: str) -> DataFrame | None:
    """What this run wrote to a partitioned dataset, or None."""
    return storage.read_partitions(spark, path, [version_name(run_id)])
