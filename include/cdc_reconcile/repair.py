"""Repair as events, never as edits.

Each difference found against the snapshot becomes one changelog row with origin ``reconcile``: the
snapshot's row (op ``r``) for a missing or stale key, a delete (op ``d``) for an extra one. It is
placed right after the key's last event that the snapshot saw (sub-position 1 at that offset, with
that event's segment and LSN; before the range's events when the snapshot saw none), and never
before a truncate the snapshot saw, so events the snapshot did not see yet still come after it and
win. A repair has no transaction of its own: its ``source_lsn`` is that of the change it follows.
The lake table stays the fold of the changelog. Duplicates are dropped from the changelog
(``resolve_duplicates``); ``events`` and ``duplicates`` keep them for the audit. Every repaired key
and every duplicate is one audit row.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from . import names
from .attribution import SOURCE_TO_TOPIC
from .compaction import (
    ORIGIN_DEBEZIUM,
    ORIGIN_RECONCILE,
    REDELIVERY,
    SEGMENT,
    SNAPSHOT_RERUN,
    TRUNCATE,
    TRUNCATE_KEY,
    newest_truncate,
    table_image_event,
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
    """Per key, the partition, offset and LSN of its last change that the snapshot saw, in fold order."""
    return (
        visible.filter(F.col("op") != TRUNCATE)
        .groupBy(*names.columns(key))
        .agg(F.max(F.struct(SEGMENT, "offset", "partition", "source_lsn")).alias("_pos"))
        .select(
            *names.columns(key),
            F.col("_pos.partition").alias("partition"),
            F.col("_pos.offset").alias("offset"),
            F.col("_pos.source_lsn").alias("lsn"),
            F.col(f"_pos.{SEGMENT}").alias("_placed_segment"),
        )
    )


def newest_round_start(visible: DataFrame) -> DataFrame:
    """The first read (``r_partition``, ``r_offset``, ``r_lsn``) of the newest table-image round the snapshot saw.

    One row, or none when the range holds no such round.
    """
    reads = visible.filter(table_image_event() & (F.col("origin") == ORIGIN_DEBEZIUM))
    # a round's reads share its LSN: the newest round's (largest LSN), then its first (partition, offset)
    first = reads.agg(
        F.min_by(
            F.struct("partition", "offset", "source_lsn"), F.struct(-F.col("source_lsn"), "partition", "offset")
        ).alias("_r")
    ).filter(F.col("_r").isNotNull())
    return first.select(
        F.col("_r.partition").alias("r_partition"),
        F.col("_r.offset").alias("r_offset"),
        F.col("_r.source_lsn").alias("r_lsn"),
    )


def repair_events(
    diff: DataFrame,
    source: DataFrame,
    visible: DataFrame,
    spec: TableSpec,
    key: Sequence[str],
) -> DataFrame:
    """Changelog rows that make the lake equal to the snapshot, placed at the snapshot.

    ``visible`` are this range's changelog rows the snapshot saw. A key with none of them is repaired
    before every change of the range (partition -1), after the previous table's row, which every
    range change follows whatever its offset (see ``compaction.fold_order``); when the snapshot saw a
    table-image round in the range, at that round's first read instead, so that the round's reset
    (which empties what precedes it) leaves the repair.
    """
    positions = last_visible_positions(visible, key)
    columns = list(spec)
    snapshot_rows = conform(source, source, columns)
    after = F.struct(
        *(names.column(c).alias(c) for c in columns),
        F.array().cast("array<string>").alias(UNAVAILABLE_FIELD),
        F.array().cast("array<string>").alias(DECODE_ERRORS_FIELD),
    )
    wanted = diff.filter(F.col("kind").isin(MISSING, STALE, EXTRA)).select(*names.columns(key), "kind")
    rows = wanted.join(snapshot_rows, list(key), "left").join(positions, list(key), "left")
    rows = rows.join(F.broadcast(newest_round_start(visible)), F.lit(True), "left")
    # withColumns reads every expression against the frame before it: the old position, not the new
    unplaced = F.col("partition").isNull()
    rows = rows.withColumns(
        {
            "_unplaced": unplaced,
            "partition": F.when(unplaced, F.col("r_partition")).otherwise(F.col("partition")),
            "offset": F.when(unplaced, F.col("r_offset")).otherwise(F.col("offset")),
            "lsn": F.when(unplaced, F.col("r_lsn")).otherwise(F.col("lsn")),
        }
    )
    # a key last seen before a truncate the snapshot saw is repaired after that truncate, not before
    rows = rows.join(F.broadcast(newest_truncate(visible)), F.lit(True), "left")
    same_partition = F.col("partition") == F.col("t_partition")
    before_it = (same_partition & (F.col("offset") < F.col("t_offset"))) | (
        ~same_partition & F.coalesce(F.col("lsn") < F.col("t_lsn"), F.lit(False))
    )
    emptied = F.col("t_partition").isNotNull() & (F.col("partition").isNull() | before_it)
    rows = rows.withColumns(
        {
            "partition": F.when(emptied, F.col("t_partition")).otherwise(F.col("partition")),
            "offset": F.when(emptied, F.col("t_offset")).otherwise(F.col("offset")),
            # after the key's last seen change: in that change's segment; elsewhere (a round's start,
            # after a truncate, -1): before the key's other changes in the range
            SEGMENT: F.when(~emptied & ~F.col("_unplaced"), F.col("_placed_segment")),
            # the LSN of the change (or round) it follows, which orders it against a truncate elsewhere
            "placed_lsn": F.when(~emptied, F.col("lsn")),
        }
    )
    return rows.select(
        *names.columns(key),
        _key_json(key).alias("key"),
        F.when(F.col("kind") == EXTRA, F.lit("d")).otherwise(F.lit("r")).alias("op"),
        F.coalesce(F.col("partition"), F.lit(-1)).cast("int").alias("partition"),
        F.coalesce(F.col("offset"), F.lit(-1)).cast("long").alias("offset"),
        F.lit(1).alias("sub"),
        F.col(SEGMENT).cast("long").alias(SEGMENT),
        F.lit(None).cast("long").alias("source_txid"),
        F.col("placed_lsn").cast("long").alias("source_lsn"),
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
    """One row per repaired key (missing, extra, stale) and per duplicate event (by class), each with
    the ``stage`` where it arose: a difference's from :mod:`attribution`; a duplicate's ``source->topic``
    (the connector delivered it twice)."""
    repaired = diff.select(
        _key_json(key).alias("key"),
        "kind",
        F.col("lake_hash").alias("before_hash"),
        F.col("source_hash").alias("after_hash"),
        (F.col("stage") if "stage" in diff.columns else F.lit(None).cast("string")).alias("stage"),
    )
    if duplicates is not None:
        dupes = duplicates.filter(F.col("duplicate_class").isin(REDELIVERY, SNAPSHOT_RERUN)).select(
            F.coalesce(F.col("key"), F.lit(TRUNCATE_KEY)).alias("key"),
            F.col("duplicate_class").alias("kind"),
            F.lit(None).cast("string").alias("before_hash"),
            F.lit(None).cast("string").alias("after_hash"),
            F.lit(SOURCE_TO_TOPIC).alias("stage"),
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
        "stage",
    )
