"""Transaction completeness: END counts against the events that reached the topic (issue 14 item 10)."""

from __future__ import annotations

import json

from pyspark.testing import assertDataFrameEqual

from cdc_reconcile.transaction_completeness import (
    arrived_events,
    check_transactions,
    expected_counts,
    first_transactions,
)
from cdc_reconcile.visibility import PgSnapshot

TABLE = "public.accounts"
CHANGES = (
    "partition int, offset long, key string, op string, source_txid long, source_lsn long, "
    "transaction_id string, transaction_data_collection_order long"
)
CHECKED = "txid long, first_lsn long, end_lsn long, expected long, arrived long, status string"
SNAPSHOT = PgSnapshot(100, 200, (150,))  # saw every xid below 200 but 150
PREDECESSOR = PgSnapshot(50, 60, ())  # saw every xid below 60


def end(offset: int, txid: int, lsn: int, counts: dict[str, int]) -> tuple:
    """An END record as Debezium writes it: its id is the xid and an LSN after the transaction's events."""
    document = {
        "status": "END",
        "id": f"{txid}:{lsn}",
        "ts_ms": 1,
        "event_count": sum(counts.values()),
        "data_collections": [{"data_collection": t, "event_count": n} for t, n in counts.items()],
    }
    return (offset, json.dumps({"id": document["id"]}), json.dumps(document))


def records(spark, rows):
    return spark.createDataFrame(
        [("pg.transaction", 0, o, bytearray(k.encode()), bytearray(v.encode())) for o, k, v in rows],
        "topic string, partition int, offset long, key binary, value binary",
    )


def ends(spark, rows):
    return expected_counts(records(spark, rows), TABLE)


def changes(spark, rows):
    return spark.createDataFrame(rows, CHANGES)


def event(offset, txid, lsn, order, op="u", key='{"id":1}', partition=0):
    """A change event: ``transaction.id`` is the xid and the event's own LSN, as Debezium writes it."""
    return (partition, offset, key, op, txid, lsn, f"{txid}:{lsn}", order)


def arrived(spark, rows):
    return arrived_events(changes(spark, rows))


def test_end_records_are_read_in_both_converter_forms_and_begin_records_and_other_tables_are_skipped(spark):
    schema = {
        "type": "struct",
        "fields": [],
        "optional": False,
        "name": "io.debezium.connector.common.TransactionMetadataValue",
    }
    _, key, value = end(1, 71, 2_900, {TABLE: 2, "public.orders": 1})
    with_schema = json.dumps({"schema": schema, "payload": json.loads(value)})
    begin = json.dumps({"status": "BEGIN", "id": "70:1000", "event_count": None, "data_collections": None})
    rows = [
        (0, '{"id":"70:1000"}', begin),
        end(1, 70, 1_900, {TABLE: 3}),
        (2, key, with_schema),
        end(3, 72, 3_900, {"public.orders": 4}),
        end(4, 70, 1_900, {TABLE: 3}),  # redelivered
        (5, '{"id":"73:1"}', '{"status":"END","id":"73:oops","data_collections":[]}'),
    ]
    assertDataFrameEqual(
        ends(spark, rows),
        spark.createDataFrame([(70, 1_900, 3), (71, 2_900, 2)], "txid long, end_lsn long, expected long"),
    )


def test_a_transaction_is_complete_when_every_event_it_counted_arrived_once_or_more(spark):
    expected = ends(spark, [end(0, 70, 1_900, {TABLE: 2, "public.orders": 5})])
    events = arrived(spark, [event(1, 70, 1_000, 1), event(2, 70, 1_100, 2, op="d"), event(7, 70, 1_100, 2, op="d")])
    checked = check_transactions(expected, events, SNAPSHOT, PREDECESSOR)
    assertDataFrameEqual(checked, spark.createDataFrame([(70, 1_000, 1_900, 2, 2, "complete")], CHECKED))


def test_a_key_change_is_two_events_and_a_transaction_that_lost_one_is_incomplete(spark):
    expected = ends(spark, [end(0, 70, 1_900, {TABLE: 3}), end(1, 71, 2_900, {TABLE: 1})])
    # an insert, then a key change (delete and create at one LSN) whose create was dropped
    events = arrived(spark, [event(1, 70, 1_000, 1, op="c"), event(2, 70, 1_100, 2, op="d")])
    checked = check_transactions(expected, events, SNAPSHOT, PREDECESSOR)
    assertDataFrameEqual(
        checked,
        spark.createDataFrame([(70, 1_000, 1_900, 3, 2, "incomplete"), (71, None, 2_900, 1, 0, "incomplete")], CHECKED),
    )


def test_only_transactions_the_snapshot_saw_and_its_predecessor_did_not_are_checked(spark):
    expected = ends(
        spark,
        [
            end(0, 55, 500, {TABLE: 4}),  # the predecessor saw it: checked by the run before
            end(1, 150, 1_500, {TABLE: 4}),  # in progress at the snapshot: the next run's
            end(2, 250, 2_500, {TABLE: 4}),  # after the snapshot: the next run's
            end(3, 80, 800, {"public.orders": 4}),  # did not change this table
            end(4, 90, 900, {TABLE: 1}),
        ],
    )
    events = arrived(spark, [event(1, 55, 400, 1), event(2, 90, 850, 1), event(3, 150, 1_400, 1)])
    checked = check_transactions(expected, events, SNAPSHOT, PREDECESSOR)
    assertDataFrameEqual(checked, spark.createDataFrame([(90, 850, 900, 1, 1, "complete")], CHECKED))
    without_predecessor = check_transactions(expected, events, SNAPSHOT, None)
    assert {r.txid: r.status for r in without_predecessor.collect()} == {55: "incomplete", 90: "complete"}


def test_events_of_a_checked_transaction_without_its_end_record_fail_and_snapshot_reads_are_not_counted(spark):
    expected = ends(spark, [end(0, 90, 900, {TABLE: 1})])
    events = arrived(
        spark,
        [
            event(1, 90, 850, 1),
            event(2, 91, 950, 1),
            event(3, 92, 990, 1, op="r"),  # a snapshot read names no streamed transaction
        ],
    )
    checked = check_transactions(expected, events, SNAPSHOT, PREDECESSOR)
    assertDataFrameEqual(
        checked,
        spark.createDataFrame([(90, 850, 900, 1, 1, "complete"), (91, 950, None, None, 1, "no END record")], CHECKED),
    )


def test_an_event_belongs_to_the_first_end_of_its_xid_at_or_after_it(spark):
    """After 2^32 transactions an xid comes back: the LSNs tell the two transactions apart."""
    expected = ends(spark, [end(0, 90, 900, {TABLE: 1}), end(1, 90, 5_900, {TABLE: 2})])
    events = arrived(spark, [event(1, 90, 850, 1), event(2, 90, 5_000, 1), event(3, 90, 5_100, 2)])
    checked = check_transactions(expected, events, SNAPSHOT, PREDECESSOR)
    assertDataFrameEqual(
        checked,
        spark.createDataFrame([(90, 850, 900, 1, 1, "complete"), (90, 5_000, 5_900, 2, 2, "complete")], CHECKED),
    )


def test_after_retention_the_first_transaction_of_a_partition_and_ones_without_events_are_unprovable(spark):
    expected = ends(
        spark,
        [end(0, 70, 1_900, {TABLE: 3}), end(1, 71, 2_900, {TABLE: 1}), end(2, 72, 3_900, {TABLE: 2})],
    )
    rows = changes(spark, [event(40, 70, 1_200, 3), event(41, 72, 3_000, 1), event(42, 72, 3_100, 2)])
    first = first_transactions(rows, {0: 40})
    assertDataFrameEqual(first.select("txid"), spark.createDataFrame([(70,)], "txid long"))
    checked = check_transactions(expected, arrived_events(rows), SNAPSHOT, None, unprovable=first)
    assert {r.txid: r.status for r in checked.collect()} == {70: "unprovable", 71: "unprovable", 72: "complete"}
    assert first_transactions(rows, {0: 0}) is None
