"""Transaction completeness: every committed transaction of a run arrived whole (issue 14 item 10).

With ``provide.transaction.metadata=true`` Debezium writes a BEGIN and an END record per transaction to
``<topic.prefix>.transaction``; the END counts the events it emitted per table (``data_collections``),
and every change event names its transaction (``source.txId``; ``transaction.id`` is the xid and the
event's own LSN) and its place among the table's events of it (``data_collection_order``). A
transaction whose END counts more of the table's events than reached the topic lost some on the way
(a transformation that drops records, ``errors.tolerance=all`` skipping a record the broker refused,
a record deleted from the topic), and the lake holds only part of it. The diff sees the rows that
differ as of the snapshot; this check says which transactions were cut, even when a later change
hid the loss.

Which transactions a run checks: those its snapshot saw and its predecessor's snapshot did not. Each
committed before this run's watermark, so its END and all its events precede the seal; each
committed after the predecessor's snapshot was taken, so its events lie in the predecessor's range
or this one. They are counted over both ranges, each event once (a redelivered copy has the same
place in its transaction). A run without a predecessor (the first, or a full rescan) checks every
transaction its snapshot saw; when the topic no longer starts at offset 0, retention may have removed
the first events of a transaction, so transactions with an event at a partition's first offset, or
with none left, are ``unprovable`` rather than incomplete.
"""

from __future__ import annotations

import json

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from .compaction import TRUNCATE
from .debezium._json import int_text
from .visibility import PgSnapshot, visible_in_snapshot

COMPLETE = "complete"
INCOMPLETE = "incomplete"
NO_END = "no END record"
UNPROVABLE = "unprovable"
NO_END_OR_INCOMPLETE = (INCOMPLETE, NO_END)
STREAMED_OPS = ("c", "u", "d", TRUNCATE)  # snapshot reads (`r`) belong to no transaction of the stream
TRANSACTION_COLUMNS = ("txid", "first_lsn", "end_lsn", "expected", "arrived", "status")
_END_FIELDS = "status string, id string, data_collections array<struct<data_collection: string, event_count: long>>"
# an END record with the JSON converter's schema (the payload field) or without it (the fields themselves)
_END_DOCUMENT = f"payload struct<{_END_FIELDS}>, {_END_FIELDS}"


def expected_counts(records: DataFrame, table: str) -> DataFrame:
    """Per END record of the transaction topic, how many of ``table``'s events the transaction emitted.

    ``records`` are the topic's Kafka records (``value`` as bytes), in either converter form. Only
    END records that name the table are parsed, and only their status, id and counts: the topic holds
    every captured table's BEGIN and END records, and the JSON converter's schema (most of each
    record) is skipped, never copied. A redelivered END counts once. ``end_lsn`` is the END's LSN, at
    or after every event of its transaction. A record that does not parse counts nothing, so the
    events of its transaction show as ``no END record``, never as complete.
    """
    text = F.col("value").cast("string")
    named = records.filter(text.contains('"END"') & text.contains(json.dumps(table)))
    document = F.from_json(text, _END_DOCUMENT)

    def field(name: str) -> Column:
        return F.coalesce(document.getField("payload").getField(name), document.getField(name))

    parts = F.split(field("id"), ":")
    ends = named.select(
        field("status").alias("status"),
        int_text(F.try_element_at(parts, F.lit(1))).alias("txid"),
        int_text(F.try_element_at(parts, F.lit(2))).alias("end_lsn"),
        F.explode_outer(field("data_collections")).alias("dc"),
    )
    return (
        ends.filter((F.col("status") == F.lit("END")) & (F.col("dc.data_collection") == F.lit(table)))
        .select("txid", "end_lsn", F.col("dc.event_count").alias("expected"))
        .filter(F.col("txid").isNotNull() & F.col("end_lsn").isNotNull() & F.col("expected").isNotNull())
        .dropDuplicates(["txid", "end_lsn"])
    )


def arrived_events(changes: DataFrame) -> DataFrame:
    """The table's streamed change events that reached the topic, copies included: txid, lsn, place.

    ``changes`` are parsed change events of one table (``compaction.change_events``). An event
    without transaction metadata (emitted while the connector's was off) is not counted.
    """
    streamed = changes.filter(F.col("op").isin(*STREAMED_OPS) & F.col("transaction_id").isNotNull())
    return streamed.select(
        F.col("source_txid").alias("txid"), F.col("source_lsn").alias("lsn"), _place().alias("place")
    )


def _place() -> Column:
    """An event's place in its transaction; Debezium's order when present, else its change identity.

    A copy of an event has the same place, so counting places counts each event once.
    """
    identity = F.concat_ws("/", F.col("source_lsn").cast("string"), F.col("op"), F.col("key"))
    return F.coalesce(F.col("transaction_data_collection_order").cast("string"), identity)


def check_transactions(
    expected: DataFrame,
    arrived: DataFrame,
    snapshot: PgSnapshot,
    predecessor: PgSnapshot | None,
    *,
    unprovable: DataFrame | None = None,
) -> DataFrame:
    """One row per transaction the run checks (see the module), with its status.

    ``expected``: :func:`expected_counts`; ``arrived``: :func:`arrived_events` of the predecessor's
    range and this one. An event belongs to the first END of its xid at or after its LSN (an xid alone
    comes back after 2^32 transactions). Events of a checked transaction that no END covers are
    ``no END record``. ``unprovable``: xids (column ``txid``) whose events may lie where the run cannot
    read them (a run without a predecessor on a topic whose first records were deleted: the transaction
    at a partition's first offset); with it, a failing transaction among them, or with no event left,
    is ``unprovable`` instead.
    """
    ends = expected.filter(_saw(F.col("txid"), snapshot, predecessor))
    events = arrived.filter(_saw(F.col("txid"), snapshot, predecessor))
    candidates = events.join(
        ends.select(F.col("txid").alias("_txid"), "end_lsn"),
        (F.col("_txid") == F.col("txid")) & (F.col("lsn") <= F.col("end_lsn")),
        "left",
    )
    first_end = Window.partitionBy("txid", "lsn", "place").orderBy(F.col("end_lsn").asc_nulls_last())
    counted = (
        candidates.withColumn("_n", F.row_number().over(first_end))
        .filter(F.col("_n") == 1)
        .groupBy("txid", "end_lsn")
        .agg(F.min("lsn").alias("first_lsn"), F.count_distinct("place").alias("arrived"))
    )
    paired = ends.join(counted.filter(F.col("end_lsn").isNotNull()), ["txid", "end_lsn"], "left").select(
        "txid", "first_lsn", "end_lsn", "expected", F.coalesce("arrived", F.lit(0)).alias("arrived")
    )
    unended = counted.filter(F.col("end_lsn").isNull()).select(
        "txid", "first_lsn", "end_lsn", F.lit(None).cast("long").alias("expected"), "arrived"
    )
    checked = paired.unionByName(unended)
    status = (
        F.when(F.col("expected").isNull(), F.lit(NO_END))
        .when(F.col("arrived") == F.col("expected"), F.lit(COMPLETE))
        .otherwise(F.lit(INCOMPLETE))
    )
    if unprovable is not None:
        checked = checked.join(unprovable.select("txid", F.lit(True).alias("_cut")).distinct(), "txid", "left")
        cut = F.col("_cut").isNotNull() | (F.col("arrived") == F.lit(0))
        status = F.when(status.isin(*NO_END_OR_INCOMPLETE) & cut, F.lit(UNPROVABLE)).otherwise(status)
    return checked.select(*TRANSACTION_COLUMNS[:-1], status.alias("status"))


def _saw(txid: Column, snapshot: PgSnapshot, predecessor: PgSnapshot | None) -> Column:
    """Committed when ``snapshot`` was taken and not yet when ``predecessor`` was."""
    seen = visible_in_snapshot(txid, snapshot)
    return seen if predecessor is None else seen & ~visible_in_snapshot(txid, predecessor)


def first_transactions(changes: DataFrame, starts: dict[int, int]) -> DataFrame | None:
    """The xid of each partition's first streamed event, where the partition no longer starts at 0.

    Retention removes a prefix of a partition, so only that transaction can have lost events to it.
    None when every partition still starts at 0.
    """
    removed = sorted(p for p, offset in starts.items() if offset > 0)
    if not removed:
        return None
    streamed = changes.filter(
        F.col("partition").isin(removed) & F.col("op").isin(*STREAMED_OPS) & F.col("transaction_id").isNotNull()
    )
    return streamed.groupBy("partition").agg(F.min_by("source_txid", "offset").alias("txid"))


def transaction_counts(checked: DataFrame | None) -> dict[str, int]:
    """How many checked transactions have each status."""
    if checked is None:
        return {}
    return {r["status"]: r["count"] for r in checked.groupBy("status").count().collect()}
