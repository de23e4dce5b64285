"""What earlier runs saw, per key, so a run classifies duplicates without reading earlier ranges.

One Delta table per lake table, updated by one MERGE per run, so a run's cost does not grow with the
number of runs before it. Two kinds of row, told apart by ``id``:

* per Kafka key (``k:<key>``; truncates share one row): the newest streamed change seen (its LSN,
  transaction and op) and the newest snapshot read (its round and LSN);
* per snapshot round (``r:<partition>:<txid>``): a table-image round already folded, so a range that
  continues it does not reset the table again;
* per completed round (``c:<txid>``): a table-image round whose final record was seen, so a later
  round's reads are a new image of the table, not a re-run of an interrupted one.

A streamed change (``c``/``u``/``d``/``t``) whose LSN is not newer than the newest one seen for its key
is a redelivery: PostgreSQL serialises the changes of one row, so each later change of a key is
written to the WAL after the earlier one committed and has a larger LSN. A snapshot read equal to
the key's newest read (same round, same LSN) is a redelivery too.

A run reads the state at the version its predecessor committed (never its own or a later run's),
and a run superseded by later ones does not update it, like the lake table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from . import storage
from .compaction import ORIGIN_DEBEZIUM, TRUNCATE, TRUNCATE_KEY, completed_rounds, table_image_event

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

KEY_ROW, ROUND_ROW, COMPLETED_ROW = "key", "round", "completed"
STREAMED = ("c", "u", "d", TRUNCATE)
COLUMNS = (
    "id",
    "kind",
    "key",
    "partition",
    "source_txid",
    "last_lsn",
    "last_txid",
    "last_op",
    "last_read_txid",
    "last_read_lsn",
)


def state_key() -> Column:
    """The key a change's state lives under: its Kafka key, or the one row all truncates share."""
    return F.coalesce(F.col("key"), F.lit(TRUNCATE_KEY))


def key_rows(state: DataFrame) -> DataFrame:
    """The per-key part, shaped for joining with events by :func:`state_key`."""
    return state.filter(F.col("kind") == KEY_ROW).select(
        F.col("key").alias("_state_key"),
        "last_lsn",
        "last_read_txid",
        "last_read_lsn",
    )


def completed_rounds_of(state: DataFrame) -> DataFrame:
    """``source_txid`` of the table-image rounds earlier ranges saw complete."""
    return state.filter(F.col("kind") == COMPLETED_ROW).select("source_txid")


def rounds_history(state: DataFrame) -> DataFrame:
    """The rounds already folded, shaped as the changelog rows ``compaction.snapshot_resets`` reads."""
    return state.filter(F.col("kind") == ROUND_ROW).select(
        "partition",
        F.lit("r").alias("op"),
        "source_txid",
        F.lit(ORIGIN_DEBEZIUM).alias("origin"),
    )


def updates(events: DataFrame) -> DataFrame:
    """This range's contribution to the state: one row per key it touched and per round it read."""
    streamed = F.col("op").isin(*STREAMED)
    by_offset = F.struct("partition", "offset")
    per_key = (
        events.withColumn("_key", state_key())
        .groupBy("_key")
        .agg(
            F.max(F.when(streamed, F.col("source_lsn"))).alias("last_lsn"),
            F.max_by(F.when(streamed, F.struct("source_txid", "op")), F.when(streamed, F.col("source_lsn"))).alias(
                "_last"
            ),
            F.max_by(F.struct("source_txid", "source_lsn"), F.when(F.col("op") == "r", by_offset)).alias("_read"),
        )
        .select(
            F.concat(F.lit("k:"), F.col("_key")).alias("id"),
            F.lit(KEY_ROW).alias("kind"),
            F.col("_key").alias("key"),
            F.lit(None).cast("int").alias("partition"),
            F.lit(None).cast("long").alias("source_txid"),
            "last_lsn",
            F.col("_last.source_txid").alias("last_txid"),
            F.col("_last.op").alias("last_op"),
            F.col("_read.source_txid").alias("last_read_txid"),
            F.col("_read.source_lsn").alias("last_read_lsn"),
        )
    )
    rounds = events.filter(table_image_event()).select("partition", "source_txid").distinct()
    round_rows = _marker_rows(
        rounds,
        F.concat(F.lit("r:"), F.col("partition").cast("string"), F.lit(":"), F.col("source_txid").cast("string")),
        ROUND_ROW,
    )
    completed = completed_rounds(events).distinct().withColumn("partition", F.lit(None).cast("int"))
    completed_rows = _marker_rows(completed, F.concat(F.lit("c:"), F.col("source_txid").cast("string")), COMPLETED_ROW)
    return per_key.unionByName(round_rows).unionByName(completed_rows)


def _marker_rows(rounds: DataFrame, row_id: Column, kind: str) -> DataFrame:
    """State rows of a round (``partition``, ``source_txid``): no key, none of the per-key fields."""
    return rounds.select(
        row_id.alias("id"),
        F.lit(kind).alias("kind"),
        F.lit(None).cast("string").alias("key"),
        "partition",
        "source_txid",
        *(
            F.lit(None).cast(t).alias(c)
            for c, t in (("last_lsn", "long"), ("last_txid", "long"), ("last_op", "string"))
        ),
        *(F.lit(None).cast("long").alias(c) for c in ("last_read_txid", "last_read_lsn")),
    )


# Newer wins, and applying the same range twice changes nothing (a retried task, a re-sealed range).
_NEWER = "s.last_lsn > coalesce(t.last_lsn, -1)"
MERGE_CLAUSES = (
    "ON t.id = s.id WHEN MATCHED THEN UPDATE SET "
    f"t.last_txid = CASE WHEN {_NEWER} THEN s.last_txid ELSE t.last_txid END, "
    f"t.last_op = CASE WHEN {_NEWER} THEN s.last_op ELSE t.last_op END, "
    "t.last_lsn = greatest(t.last_lsn, s.last_lsn), "
    "t.last_read_lsn = CASE WHEN s.last_read_txid IS NOT NULL OR s.last_read_lsn IS NOT NULL "
    "THEN s.last_read_lsn ELSE t.last_read_lsn END, "
    "t.last_read_txid = CASE WHEN s.last_read_txid IS NOT NULL OR s.last_read_lsn IS NOT NULL "
    "THEN s.last_read_txid ELSE t.last_read_txid END "
    f"WHEN NOT MATCHED THEN INSERT ({', '.join(COLUMNS)}) VALUES ({', '.join('s.' + c for c in COLUMNS)})"
)


def commit(
    spark: SparkSession, location: str, run: str, events: DataFrame, *, base: int | None, rebuild: bool
) -> storage.Commit:
    """Fold this range into the state: one MERGE, or an overwrite when ``rebuild`` (a full rescan) or new."""
    rows = updates(events)
    metadata = {"base_version": base, "full_rescan": rebuild}
    if rebuild or not storage.exists(spark, location):
        return storage.publish(rows, location, run, sort_by=["id"], metadata=metadata)
    return storage.merge_sql(rows, location, run, MERGE_CLAUSES, metadata=metadata)
