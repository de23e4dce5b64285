"""The Spark steps of one run for one table: compact, diff as of the snapshot, reconcile.

Each step reads its inputs from the lake and Kafka, calls the pure transforms of ``compaction``,
``diff`` and ``repair``, and publishes atomically through ``storage``. Every step is keyed by the
run id, so running it again for the same run replaces what it wrote before and never adds to it.

Lake layout per table (``<lake_root>/<schema.table>/``):

* ``events/range=<run>``: bronze, every Kafka record of the run's offset range, parsed;
* ``quarantine/range=<run>``: records that could not be parsed or decoded, with the reason;
* ``changelog/range=<run>``: typed changes as Kafka delivered them, duplicates flagged until repair;
* ``duplicates/range=<run>``: every duplicate event of the range, by class (the audit's source);
* ``repairs/range=<run>``: repair events written by ``reconcile``;
* ``table/v=<run>``: the lake copy, the fold of the changelog (manifest-switched);
* ``snapshot/v=<run>``: the source snapshot and its metadata (written by ``snapshot``).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from . import storage
from .compaction import (
    CDC_COLUMNS,
    IDENTITY,
    TRUNCATE_KEY,
    change_events,
    changelog_rows,
    decode_changes,
    duplicate_counts,
    fold_table,
    foreign_events,
    mark_duplicates,
    of_table,
    snapshot_resets,
    with_raw_values,
    without_raw_values,
)
from .debezium.envelope import split_envelopes, tag_envelopes
from .debezium.pgtypes import DecodeOptions
from .diff import EXTRA, MISSING, STALE, DiffReport, diff_rows, lake_as_of, summarise, visible_changes
from .repair import audit_rows, repair_events, resolve_duplicates
from .suite import (
    CHANGE_IDENTITY,
    DIFFERENCE_COLUMNS,
    DUPLICATE_COLUMNS,
    UNREPRESENTABLE_COLUMN,
    SuiteOutcome,
    run_suite,
)
from .visibility import PgSnapshot


def _version(run_id: str) -> str:
    """Airflow run ids hold ':' and '+'; datasets name versions and ranges by a path-safe form."""
    return storage.safe_name(run_id)


class PipelineError(RuntimeError):
    """A step cannot run; the message names what is missing and which step produces it."""


@dataclass(frozen=True)
class TableLake:
    """Where one table's datasets live."""

    root: Path
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


def read_kafka_range(
    spark: SparkSession, bootstrap: str, starting: str, ending: str, *, min_partitions: int | None = None
) -> DataFrame:
    """Exactly the sealed offset range, ``read_committed``: aborted records never enter the lake.

    ``min_partitions`` (default: all cores) splits each topic partition's range into several read
    tasks: a CDC topic often has one partition, and its envelope parse would otherwise run as one
    task on one core.
    """
    return (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("assign", _assign_json(starting))
        .option("startingOffsets", starting)
        .option("endingOffsets", ending)
        .option("kafka.isolation.level", "read_committed")
        .option("failOnDataLoss", "true")
        .option("minPartitions", str(min_partitions or spark.sparkContext.defaultParallelism))
        .load()
        .select("topic", "partition", "offset", "key", "value")
    )


def _assign_json(starting: str) -> str:
    offsets = json.loads(starting)
    return json.dumps({topic: sorted(int(p) for p in parts) for topic, parts in offsets.items()})


def snapshot_of(lake: TableLake, run_id: str) -> tuple[PgSnapshot, dict[str, str], dict[str, Any]]:
    """The run's snapshot as a visibility rule, the column type spec, and all its metadata."""
    metadata = storage.read_metadata(lake.snapshot, _version(run_id))
    if metadata is None:
        raise PipelineError(f"{lake.name}: no snapshot for run {run_id!r} under {lake.snapshot}; run snapshot_source")
    snapshot = PgSnapshot(int(metadata["xmin"]), int(metadata["xmax"]), tuple(int(x) for x in metadata["xip"]))
    spec = {column["name"]: column["type"] for column in metadata["columns"]}
    return snapshot, spec, metadata


def is_full_rescan(lake: TableLake, run_id: str) -> bool:
    """Whether this run rebuilt the table from the whole topic (recorded with its table version)."""
    return bool((storage.read_metadata(lake.table, _version(run_id)) or {}).get("full_rescan"))


def previous_table(spark: SparkSession, lake: TableLake, run_id: str) -> tuple[DataFrame | None, str | None]:
    """The lake table as the previous run left it, also when this run already published once.

    A full rescan starts from nothing: its range holds the whole topic.
    """
    if is_full_rescan(lake, run_id):
        return None, None
    current = storage.current_version(lake.table)
    if current == _version(run_id):
        previous = (storage.read_metadata(lake.table, _version(run_id)) or {}).get("previous_version")
    else:
        previous = current
    if previous is None:
        return None, None
    return storage.read_version(spark, lake.table, previous), previous


def _other_ranges(path: Path, run_id: str) -> list[str]:
    return [p for p in storage.list_partitions(path) if p != _version(run_id)]


def _history(
    spark: SparkSession, path: Path, run_id: str, columns: Sequence[str], *, full_rescan: bool = False
) -> DataFrame | None:
    """What earlier runs wrote to a partitioned dataset (all ranges but this run's; none for a rescan)."""
    if full_rescan:
        return None
    others = _other_ranges(path, run_id)
    if not others:
        return None
    return storage.read_partitions(spark, path, others).select(*columns)


@contextlib.contextmanager
def _described(spark: SparkSession, what: str) -> Iterator[None]:
    """Name the Spark jobs of a block (Spark UI, event log, ``bench.stage_times``)."""
    context = spark.sparkContext
    previous = context.getLocalProperty("spark.job.description")
    context.setJobDescription(what)
    try:
        yield
    finally:
        context.setJobDescription(previous)  # type: ignore[arg-type]


def compact(
    spark: SparkSession,
    *,
    lake: TableLake,
    run_id: str,
    key: Sequence[str],
    bootstrap: str,
    starting: str,
    ending: str,
    options: DecodeOptions | None = None,
    full_rescan: bool = False,
    kafka_min_partitions: int | None = None,
) -> dict[str, Any]:
    """``compact_cdc``: Kafka range -> events, quarantine, changelog, and the new lake table.

    ``full_rescan``: the range is the whole topic, so the table is folded from it alone, and
    duplicates are found within it (earlier ranges hold the same records again).
    ``kafka_min_partitions``: read tasks for the range (see :func:`read_kafka_range`).
    """
    began = time.monotonic()
    # once a run was a rescan it stays one: a re-run must rebuild the same table, whatever it is told
    full_rescan = full_rescan or is_full_rescan(lake, run_id)
    _, spec, _ = snapshot_of(lake, run_id)
    records = read_kafka_range(spark, bootstrap, starting, ending, min_partitions=kafka_min_partitions)
    tagged = tag_envelopes(records).persist()
    parsed, bad_records = split_envelopes(tagged)
    with _described(spark, f"compact_cdc {lake.name}: events"):
        storage.replace_partition(parsed, lake.events, _version(run_id), sort_by=["partition", "offset"])
    events = storage.read_partitions(spark, lake.events, [_version(run_id)])

    history = _history(
        spark,
        lake.events,
        run_id,
        [*IDENTITY, "partition", "offset", "is_tombstone", "source_schema", "source_table"],
        full_rescan=full_rescan,
    )
    if history is not None:
        history = change_events(of_table(history, lake.name)).drop("is_tombstone", "source_schema", "source_table")
    own = of_table(events, lake.name)
    marked = mark_duplicates(without_raw_values(change_events(own)), history).persist()
    decoded = decode_changes(marked, spec, key, options or DecodeOptions()).persist()
    changelog, undecodable = changelog_rows(decoded, key)
    quarantined = bad_records.unionByName(foreign_events(events, lake.name)).unionByName(
        with_raw_values(undecodable, events)
    )
    with _described(spark, f"compact_cdc {lake.name}: quarantine (marks and decodes)"):
        storage.replace_partition(quarantined, lake.quarantine, _version(run_id), sort_by=["partition", "offset"])
    with _described(spark, f"compact_cdc {lake.name}: changelog"):
        storage.replace_partition(changelog, lake.changelog, _version(run_id), sort_by=["partition", "offset"])
    duplicates = marked.filter(F.col("duplicate_class").isNotNull()).select(
        "key", "partition", "offset", "op", "source_txid", "source_lsn", "duplicate_class"
    )
    with _described(spark, f"compact_cdc {lake.name}: duplicates"):
        storage.replace_partition(duplicates, lake.duplicates, _version(run_id), sort_by=["partition", "offset"])

    with _described(spark, f"compact_cdc {lake.name}: fold and publish the table"):
        table, previous_version = _fold_run(spark, lake, run_id, spec, key, full_rescan=full_rescan)
        storage.publish(
            table,
            lake.table,
            _version(run_id),
            sort_by=list(key),
            metadata={"previous_version": previous_version, "full_rescan": full_rescan},
        )
    with _described(spark, f"compact_cdc {lake.name}: summary"):
        summary = {
            "table": lake.name,
            "run_id": run_id,
            "records": tagged.count(),
            "quarantined": storage.read_partitions(spark, lake.quarantine, [_version(run_id)]).count(),
            "changes": marked.count(),
            "duplicates": duplicate_counts(storage.read_partitions(spark, lake.duplicates, [_version(run_id)])),
            "table_rows": storage.read_current(spark, lake.table).count(),
            "seconds": round(time.monotonic() - began, 2),
        }
    tagged.unpersist()
    marked.unpersist()
    decoded.unpersist()
    return summary


def _run_changelog(spark: SparkSession, lake: TableLake, run_id: str, *, with_repairs: bool) -> DataFrame:
    changelog = storage.read_partitions(spark, lake.changelog, [_version(run_id)])
    if changelog is None:
        raise PipelineError(f"{lake.name}: no changelog for run {run_id!r}; run compact_cdc first")
    if with_repairs and _version(run_id) in storage.list_partitions(lake.repairs):
        changelog = changelog.unionByName(storage.read_partitions(spark, lake.repairs, [_version(run_id)]))
    return changelog


def _fold_run(
    spark: SparkSession,
    lake: TableLake,
    run_id: str,
    spec: dict[str, str],
    key: Sequence[str],
    *,
    full_rescan: bool | None = None,
) -> tuple[DataFrame, str | None]:
    if full_rescan is None:
        full_rescan = is_full_rescan(lake, run_id)
    changelog = _run_changelog(spark, lake, run_id, with_repairs=True)
    if full_rescan:
        previous, previous_version = None, storage.current_version(lake.table)
    else:
        previous, previous_version = previous_table(spark, lake, run_id)
    history = _history(
        spark, lake.changelog, run_id, ["partition", "op", "source_txid", "origin"], full_rescan=full_rescan
    )
    resets = snapshot_resets(changelog, history)
    return fold_table(changelog, spec, key, previous=previous, resets=resets), previous_version


def _source(spark: SparkSession, lake: TableLake, run_id: str) -> DataFrame:
    source = storage.read_version(spark, lake.snapshot, _version(run_id))
    if source is None:
        raise PipelineError(f"{lake.name}: snapshot data for run {run_id!r} missing under {lake.snapshot}")
    return source


def check(
    spark: SparkSession, *, lake: TableLake, run_id: str, key: Sequence[str], with_repairs: bool = True
) -> tuple[DiffReport, DataFrame]:
    """The point-in-time diff: the lake as of the run's snapshot against the snapshot."""
    snapshot, spec, _ = snapshot_of(lake, run_id)
    changelog = _run_changelog(spark, lake, run_id, with_repairs=with_repairs)
    previous, _ = previous_table(spark, lake, run_id)
    history = _history(
        spark,
        lake.changelog,
        run_id,
        ["partition", "op", "source_txid", "origin"],
        full_rescan=is_full_rescan(lake, run_id),
    )
    source = _source(spark, lake, run_id)
    as_of = lake_as_of(changelog, snapshot, spec, key, previous=previous, history=history).persist()
    diff = diff_rows(as_of, source, key, list(spec)).persist()
    report = summarise(diff, as_of, source, key)
    as_of.unpersist()
    return report, diff


def reconcile(
    spark: SparkSession,
    *,
    lake: TableLake,
    run_id: str,
    key: Sequence[str],
    dry_run: bool = False,
) -> dict[str, Any]:
    """Repair events for every difference, duplicates dropped from the changelog, the table re-folded.

    The diff is taken without this run's earlier repairs, so running reconcile again writes the same
    repairs, not none. ``dry_run`` computes and returns the audit but writes no repair.
    """
    began = time.monotonic()
    snapshot, spec, _ = snapshot_of(lake, run_id)
    report, diff = check(spark, lake=lake, run_id=run_id, key=key, with_repairs=False)
    base = _run_changelog(spark, lake, run_id, with_repairs=False)
    previous, _ = previous_table(spark, lake, run_id)
    source = _source(spark, lake, run_id)
    repairs = repair_events(diff, source, visible_changes(base, snapshot), spec, key, previous=previous)
    duplicates = storage.read_partitions(spark, lake.duplicates, [_version(run_id)])
    audit = audit_rows(diff, duplicates, key, run_id=run_id, table_name=lake.name, dry_run=dry_run)
    storage.replace_partition(audit, lake.audit, _version(run_id), sort_by=["kind", "key"])
    if not dry_run:
        storage.replace_partition(repairs, lake.repairs, _version(run_id), sort_by=list(key))
        resolved = resolve_duplicates(base)
        storage.replace_partition(resolved, lake.changelog, _version(run_id), sort_by=["partition", "offset"])
        table, previous_version = _fold_run(spark, lake, run_id, spec, key)
        storage.publish(
            table, lake.table, _version(run_id), sort_by=list(key), metadata={"previous_version": previous_version}
        )
    diff.unpersist()
    audit_written = storage.read_partitions(spark, lake.audit, [_version(run_id)])
    by_kind = {r["kind"]: r["count"] for r in audit_written.groupBy("kind").count().collect()}
    return {
        "table": lake.name,
        "run_id": run_id,
        "dry_run": dry_run,
        "found": report.as_dict(),
        "audit": by_kind,
        "repair_events": 0 if dry_run else storage.read_partitions(spark, lake.repairs, [_version(run_id)]).count(),
        "seconds": round(time.monotonic() - began, 2),
    }


def _key_text(key: Sequence[str]):
    return F.to_json(F.struct(*(F.col(k) for k in key)))


def source_values_dataset(spark: SparkSession, counts: dict[str, int]) -> DataFrame:
    """The suite's ``source_values`` dataset: one row per value the lake cannot hold, named by its column."""
    per_column = spark.createDataFrame(list(counts.items()), f"{UNREPRESENTABLE_COLUMN} string, n long")
    return per_column.select(UNREPRESENTABLE_COLUMN, F.explode(F.sequence(F.lit(1), F.col("n")))).select(
        UNREPRESENTABLE_COLUMN
    )


def validate(
    spark: SparkSession, *, lake: TableLake, run_id: str, key: Sequence[str], gx_root: str | Path, phase: str
) -> SuiteOutcome:
    """``validate``: the expectation suite on this run's datasets (repairs included once written)."""
    snapshot, spec, metadata = snapshot_of(lake, run_id)
    changelog = _run_changelog(spark, lake, run_id, with_repairs=True)
    previous, _ = previous_table(spark, lake, run_id)
    history = _history(
        spark,
        lake.changelog,
        run_id,
        ["partition", "op", "source_txid", "origin"],
        full_rescan=is_full_rescan(lake, run_id),
    )
    source = _source(spark, lake, run_id)
    table = storage.read_version(spark, lake.table, _version(run_id))
    if table is None:
        raise PipelineError(f"{lake.name}: no lake table for run {run_id!r}; run compact_cdc first")
    as_of = lake_as_of(changelog, snapshot, spec, key, previous=previous, history=history).persist()
    diff = diff_rows(as_of, source, key, list(spec)).persist()
    differences = diff.select(
        *key,
        *(F.when(F.col("kind") == kind, _key_text(key)).alias(column) for kind, column in DIFFERENCE_COLUMNS.items()),
    )
    range_changelog = storage.read_partitions(spark, lake.changelog, [_version(run_id)])
    changes = range_changelog.select(
        *CHANGE_IDENTITY,
        *(
            F.when(F.col("duplicate_class") == cause, F.coalesce(F.col("key"), F.lit(TRUNCATE_KEY))).alias(column)
            for cause, column in DUPLICATE_COLUMNS.items()
        ),
    )
    counts = {MISSING: 0, EXTRA: 0, STALE: 0}
    counts.update({r["kind"]: r["count"] for r in diff.groupBy("kind").count().collect()})
    counts.update(duplicate_counts(range_changelog))
    counts["snapshot_rows"] = source.count()
    unrepresentable = metadata.get("unrepresentable") or {}
    counts["unrepresentable"] = sum(unrepresentable.values())
    outcome = run_suite(
        {
            "lake_as_of": as_of,
            "lake_table": table,
            "changelog": changes,
            "differences": differences,
            "source_values": source_values_dataset(spark, unrepresentable),
        },
        table=lake.name,
        run_id=run_id,
        phase=phase,
        key=key,
        parameters={"snapshot_row_count": counts["snapshot_rows"], "lake_columns": [*spec, *CDC_COLUMNS]},
        counts=counts,
        gx_root=gx_root,
    )
    as_of.unpersist()
    diff.unpersist()
    return outcome
