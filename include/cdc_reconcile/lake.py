"""Where one table's datasets live in the lake, and how a run reads what earlier steps wrote.

Layout per table (``<lake_root>/<schema.table>/``), every dataset a Delta table:

* ``events``: bronze, every Kafka record of the run's offset range, parsed;
* ``quarantine``: records that could not be parsed or decoded, with the reason;
* ``transactions``: each transaction the run checked, its END's count of the table's events against
  those that arrived (``transaction_completeness``);
* ``changelog``: typed changes as Kafka delivered them, duplicates flagged until repair;
* ``duplicates``: every duplicate event of the range, by class (the audit's source);
* ``repairs``: repair events written by ``reconcile``;
* ``audit``: one row per repair (or would-be repair in a dry run);
* ``snapshot``: the source snapshot; its commit's metadata holds the snapshot's xmin/xmax/xip;
* ``table``: the lake copy, the fold of the changelog, one commit per run;
* ``key_state``: per key, what earlier runs saw (newest change, snapshot rounds), one commit per run.

All but ``table`` are partitioned by run (``storage.RUN_COLUMN``). Each commit to ``table`` names
the run that made it and the version it folded onto, so a run always reads the version its
predecessor published and a re-run of an old run never moves the live table back.

Runs name their partitions by a path-safe form of the Airflow run id.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import storage
from .errors import InputError
from .visibility import PgSnapshot

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class PipelineError(InputError):
    """A step cannot run; the message names what is missing and which step produces it."""


def version_name(run_id: str) -> str:
    """Airflow run ids hold ':' and '+'; datasets name versions and ranges by a path-safe form."""
    return storage.safe_name(run_id)


@dataclass(frozen=True)
class TableLake:
    """Where one table's datasets live."""

    root: str | Path
    name: str

    @property
    def base(self) -> str:
        return storage.join(self.root, self.name)

    @property
    def events(self) -> str:
        return storage.join(self.base, "events")

    @property
    def quarantine(self) -> str:
        return storage.join(self.base, "quarantine")

    @property
    def transactions(self) -> str:
        return storage.join(self.base, "transactions")

    @property
    def changelog(self) -> str:
        return storage.join(self.base, "changelog")

    @property
    def duplicates(self) -> str:
        return storage.join(self.base, "duplicates")

    @property
    def repairs(self) -> str:
        return storage.join(self.base, "repairs")

    @property
    def table(self) -> str:
        return storage.join(self.base, "table")

    @property
    def snapshot(self) -> str:
        return storage.join(self.base, "snapshot")

    @property
    def key_state(self) -> str:
        return storage.join(self.base, "key_state")

    @property
    def audit(self) -> str:
        return storage.join(self.base, "audit")

    @property
    def findings(self) -> str:
        """The differences a failed ``validate`` found before repair, for ``reconcile`` to take up."""
        return storage.join(self.base, "findings")


@dataclass(frozen=True)
class SnapshotInfo:
    """The run's snapshot: its visibility rule, the source's column type spec, and all its metadata."""

    visibility: PgSnapshot
    spec: dict[str, str]
    metadata: dict[str, Any]


def snapshot_info(spark: SparkSession, lake: TableLake, run_id: str) -> SnapshotInfo:
    """The metadata of the run's snapshot, from the commit that wrote it (atomic with its rows)."""
    commit = storage.run_commit(spark, lake.snapshot, version_name(run_id))
    if commit is None:
        raise PipelineError(f"{lake.name}: no snapshot for run {run_id!r} under {lake.snapshot}; run snapshot_source")
    metadata = {**commit.metadata, "delta_version": commit.version}
    taken_at = metadata.get("taken_at")
    visibility = PgSnapshot.parse(
        str(metadata["snapshot"]), None if taken_at is None else datetime.fromisoformat(str(taken_at))
    )
    return SnapshotInfo(visibility, {c["name"]: c["type"] for c in metadata["columns"]}, metadata)


@dataclass(frozen=True)
class TableVersions:
    """Where a run stands against the lake table: its base (and the run that published it), its own
    commit, and the newest version."""

    base: int | None
    own: storage.Commit | None
    latest: int | None
    full_rescan: bool
    base_run: str | None = None

    @property
    def superseded(self) -> bool:
        """A later run published after this run's own commit: this run must not publish again."""
        return self.own is not None and self.latest is not None and self.latest > self.own.version


def table_versions(spark: SparkSession, lake: TableLake, run_id: str) -> TableVersions:
    """The lake table's versions as this run sees them (see :func:`run_versions`)."""
    return run_versions(spark, lake.table, run_id)


def run_versions(spark: SparkSession, location: str, run_id: str) -> TableVersions:
    """A run-published table's versions as this run sees them.

    A run that published before reads again from the base it recorded then (its predecessor's
    version); a run that has not published yet reads the newest version.
    """
    published = [c for c in storage.commits(spark, location) if "run" in c.metadata]  # not VACUUM's or OPTIMIZE's
    latest = published[0].version if published else None
    own = next((c for c in published if c.metadata["run"] == version_name(run_id)), None)
    if own is not None:
        recorded = own.metadata.get("base_version")
        base = None if recorded is None else int(recorded)
        full_rescan = bool(own.metadata.get("full_rescan"))
    else:
        base, full_rescan = latest, False
    base_run = next((c.metadata["run"] for c in published if c.version == base), None)
    return TableVersions(base, own, latest, full_rescan, base_run)


def previous_table(
    spark: SparkSession, lake: TableLake, run_id: str, versions: TableVersions | None = None
) -> tuple[DataFrame | None, int | None]:
    """The lake table as the previous run published it, pinned to that version.

    A full rescan starts from nothing: its range holds the whole topic. ``versions`` (from
    :func:`table_versions`, when the caller has them) saves reading the table's history again.
    """
    versions = versions or table_versions(spark, lake, run_id)
    if versions.full_rescan or versions.base is None:
        return None, None
    return storage.read(spark, lake.table, versions.base), versions.base


def run_table(spark: SparkSession, lake: TableLake, run_id: str) -> DataFrame | None:
    """The table version this run published (not a later run's), or None."""
    own = table_versions(spark, lake, run_id).own
    return None if own is None else storage.read(spark, lake.table, own.version)


def run_changelog(spark: SparkSession, lake: TableLake, run_id: str, *, with_repairs: bool) -> DataFrame:
    """The run's changelog range, with the repair events ``reconcile`` wrote when asked."""
    if storage.run_commit(spark, lake.changelog, version_name(run_id)) is None:
        raise PipelineError(f"{lake.name}: no changelog for run {run_id!r}; run compact_cdc first")
    changelog = storage.read_partitions(spark, lake.changelog, [version_name(run_id)])
    if with_repairs:
        repairs = storage.read_partitions(spark, lake.repairs, [version_name(run_id)])
        if repairs is not None:
            # each dataset's schema is the union of its runs' columns: the two may differ in fields
            changelog = changelog.unionByName(repairs, allowMissingColumns=True)
    return changelog


def source_rows(spark: SparkSession, lake: TableLake, run_id: str) -> DataFrame:
    """The source table as the run's snapshot saw it."""
    source = storage.read_partitions(spark, lake.snapshot, [version_name(run_id)])
    if source is None:
        raise PipelineError(f"{lake.name}: snapshot data for run {run_id!r} missing under {lake.snapshot}")
    return source


def run_partition(spark: SparkSession, path: str, run_id: str) -> DataFrame | None:
    """What this run wrote to a per-run dataset, or None when the dataset does not exist."""
    return storage.read_partitions(spark, path, [version_name(run_id)])
