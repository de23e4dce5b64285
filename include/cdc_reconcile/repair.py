"""Repair as events, never as edits.

Each difference found against the snapshot becomes one changelog row with origin ``reconcile``: the
snapshot's row (op ``r``) for a missing or stale key, a delete (op ``d``) for an extra one. It is
placed right after the key's last event that the snapshot saw (sub-position 1 at that offset), and
never before a truncate the snapshot saw, so events the snapshot did not see yet still come after it
and win. The lake table stays the fold of
the changelog. Duplicates are dropped from the changelog (``resolve_duplicates``); ``events`` and
``duplicates`` keep them for the audit. Every repaired key and every duplicate is one audit row.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from . import names
from .compaction import (
    ORIGIN_DEBEZIUM,
    ORIGIN_RECONCILE,
    REDELIVERY,
    SNAPSHOT_RERUN,
    TRUNCATE,
    TRUNCATE_KEY,
    newest_truncate,
    without_redeliveries,
)
from .debezium.decoding import DECODE_ERRORS_FIELD, UNAVAILABLE_FIELD
from .debezium.pgtypes import TableSpec
from .diff import EXTRA, MISSING, STALE, conform

AUDIT_COLUMNS = ("run_id", "table_name", "key", "kind", "before_hash", "after_hash", "dry_run")


def resolve_duplicates(changelog: DataFrame) -> DataFrame:
    """The changelog with every change once: redeliveries dropped, re-read keys keep only the newest round.

    A key read by two snapshot rounds keeps the read of the round it was read by last (the newer
    state); the older round's read is the duplicate. The fold gives the same table before and after,
    because a newer round already resets its partition; what changes is that a reader of the changelog
    no longer sees a change twice.
    """
    kept = without_redeliveries(changelog)
    snapshot_read = (F.col("op") == "r") & (F.col("origin") == ORIGIN_DEBEZIUM)
    per_key = Window.partitionBy("key")
    newest_round = F.max_by(F.when(snapshot_read, F.col("source_txid")), F.when(snapshot_read, F.col("offset")))
    kept = kept.withColumn("_newest_round", newest_round.over(per_key))
    superseded = snapshot_read & (F.col("source_txid") != F.col("_newest_round"))
    return (
        kept.filter(~superseded)
        .drop("_newest_round")
        .withColumn("duplicate_class", F.lit(None).cast("string"))
        .select(*names.columns(changelog.columns))
    )


def last_visible_positions(visible: DataFrame, key: Sequence[str]) -> DataFrame:
    """Per key, the partition and offset of its last change that the snapshot saw."""
    return (
        visible.filter(F.col("op") != TRUNCATE)
        .groupBy(*names.columns(key))
        .agg(
            F.max(F.struct("offset", "partition")).alias("_pos"),
        )
        .select(*names.columns(key), F.col("_pos.partition").alias("partition"), F.col("_pos.offset").alias("offset"))
    )


def repair_events(
    diff: DataFrame,
    source: DataFrame,
    visible: DataFrame,
    spec: TableSpec,
    key: Sequence[str],
    *,
    previous: DataFrame | None = None,
) -> DataFrame:
    """Changelog rows that make the lake equal to the snapshot, placed at the snapshot.

    ``visible`` are this range's changelog rows the snapshot saw; ``previous`` the last run's table
    (its keys' positions count too when this range has no event for them).
    """
    positions = last_visible_positions(visible, key)
    if previous is not None:
        earlier = previous.select(
            *names.columns(key), F.col("_cdc_partition").alias("partition"), F.col("_cdc_offset").alias("offset")
        )
        positions = (
            positions.unionByName(earlier)
            .groupBy(*names.columns(key))
            .agg(F.max(F.struct("offset", "partition")).alias("_pos"))
            .select(
                *names.columns(key), F.col("_pos.partition").alias("partition"), F.col("_pos.offset").alias("offset")
            )
        )
    columns = list(spec)
    snapshot_rows = conform(source, source, columns)
    after = F.struct(
        *(names.column(c).alias(c) for c in columns),
        F.array().cast("array<string>").alias(UNAVAILABLE_FIELD),
        F.array().cast("array<string>").alias(DECODE_ERRORS_FIELD),
    )
    wanted = diff.filter(F.col("kind").isin(MISSING, STALE, EXTRA)).select(*names.columns(key), "kind")
    rows = wanted.join(snapshot_rows, list(key), "left").join(positions, list(key), "left")
    # a key last seen before a truncate the snapshot saw is repaired after that truncate, not before
    rows = rows.join(F.broadcast(newest_truncate(visible)), F.lit(True), "left")
    before_it = (F.col("partition") == F.col("t_partition")) & (F.col("offset") < F.col("t_offset"))
    emptied = F.col("t_partition").isNotNull() & (F.col("partition").isNull() | before_it)
    rows = rows.withColumn("partition", F.when(emptied, F.col("t_partition")).otherwise(F.col("partition")))
    rows = rows.withColumn("offset", F.when(emptied, F.col("t_offset")).otherwise(F.col("offset")))
    return rows.select(
        *names.columns(key),
        _key_json(key).alias("key"),
        F.when(F.col("kind") == EXTRA, F.lit("d")).otherwise(F.lit("r")).alias("op"),
        F.coalesce(F.col("partition"), F.lit(-1)).cast("int").alias("partition"),
        F.coalesce(F.col("offset"), F.lit(-1)).cast("long").alias("offset"),
        F.lit(1).alias("sub"),
        F.lit(None).cast("long").alias("source_txid"),
        F.lit(None).cast("long").alias("source_lsn"),
        F.lit(None).cast("long").alias("source_ts_ms"),
        F.lit(None).cast("string").alias("source_snapshot"),
        F.lit(None).cast("string").alias("duplicate_class"),
        F.lit(ORIGIN_RECONCILE).alias("origin"),
        F.when(F.col("kind") == EXTRA, F.lit(None)).otherwise(after).alias("after_row"),
    )


def _key_json(key: Sequence[str]) -> Column:
    return F.to_json(F.struct(*names.columns(key)))


def audit_rows(
    diff: DataFrame,
    duplicates: DataFrame | None,
    key: Sequence[str],
    *,
    run_id: str,
    table_name: str,
    dry_run: bool,
) -> DataFrame:
    """One row per repaired key (missing, extra, stale) and per duplicate event (by class)."""
    repaired = diff.select(
        _key_json(key).alias("key"),
        "kind",
        F.col("lake_hash").alias("before_hash"),
        F.col("source_hash").alias("after_hash"),
    )
    if duplicates is not None:
        dupes = duplicates.filter(F.col("duplicate_class").isin(REDELIVERY, SNAPSHOT_RERUN)).select(
            F.coalesce(F.col("key"), F.lit(TRUNCATE_KEY)).alias("key"),
            F.col("duplicate_class").alias("kind"),
            F.lit(None).cast("string").alias("before_hash"),
            F.lit(None).cast("string").alias("after_hash"),
        )
        repaired = repaired.unionByName(dupes)
    return repaired.select(
        F.lit(run_id).alias("run_id"),
        F.lit(table_name).alias("table_name"),
        "key",
        "kind",
        "before_hash",
        "after_hash",
        F.lit(dry_run).alias("dry_run"),
    )
