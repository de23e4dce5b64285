"""Duplicates by cause, and the fold from events to the lake table."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from cdc_reconcile.compaction import (
    REDELIVERY,
    SNAPSHOT_RERUN,
    change_events,
    duplicate_counts,
    fold_table,
    foreign_events,
    mark_duplicates,
    of_table,
    snapshot_resets,
    with_raw_values,
    without_raw_values,
)
from cdc_reconcile.debezium.envelope import split_envelopes, tag_envelopes
from cdc_reconcile.debezium.pgtypes import UNAVAILABLE_VALUE
from cdc_reconcile.repair import resolve_duplicates
from tests.support.frames import (
    ITEMS_KEY,
    ITEMS_SPEC,
    ITEMS_TOPIC,
    back_in_an_earlier_partition,
    item_changes,
    item_event,
    item_truncate,
    items,
    raw_records,
    redelivered_to_a_lower_partition,
    typed_changelog,
)


def fold(spark, rows, previous=None, history=None):
    events = item_changes(spark, rows)
    marked = mark_duplicates(events, history)
    changelog, quarantined = typed_changelog(marked, ITEMS_SPEC, ITEMS_KEY)
    assert quarantined.count() == 0
    resets = snapshot_resets(changelog)
    return fold_table(changelog, ITEMS_SPEC, ITEMS_KEY, previous=previous, resets=resets), marked


def state(df):
    return df.select(*ITEMS_SPEC)


def test_every_op_code_folds_to_the_latest_state_and_deletes_disappear(spark):
    rows = [
        item_event(0, "r", 1, {"id": 1, "name": "a", "qty": 1}, snapshot="first", txid=50, lsn=900),
        item_event(1, "r", 2, {"id": 2, "name": "b", "qty": 2}, snapshot="last", txid=50, lsn=900),
        item_event(2, "c", 3, {"id": 3, "name": "c", "qty": 3}, txid=101, lsn=1001),
        item_event(3, "u", 1, {"id": 1, "name": "a2", "qty": 10}, {"id": 1, "name": "a", "qty": 1}, txid=102, lsn=1002),
        item_event(4, "d", 2, None, {"id": 2, "name": "b", "qty": 2}, txid=103, lsn=1003),
        item_event(5, None, 2),
    ]
    result, _ = fold(spark, rows)
    assertDataFrameEqual(state(result), items(spark, [(1, "a2", 10), (3, "c", 3)]))
    assert {r["_cdc_op"] for r in result.collect()} == {"u", "c"}


def test_redeliveries_out_of_order_are_dropped_and_counted(spark):
    rows = [
        item_event(0, "c", 1, {"id": 1, "name": "a", "qty": 1}, txid=101, lsn=1001),
        item_event(1, "u", 1, {"id": 1, "name": "b", "qty": 2}, {"id": 1}, txid=102, lsn=1002),
        # after a worker crash without EOS, Connect resends from the last committed offset
        item_event(2, "c", 1, {"id": 1, "name": "a", "qty": 1}, txid=101, lsn=1001),
        item_event(3, "u", 1, {"id": 1, "name": "b", "qty": 2}, {"id": 1}, txid=102, lsn=1002),
        item_event(4, "u", 1, {"id": 1, "name": "c", "qty": 3}, {"id": 1}, txid=104, lsn=1004),
    ]
    result, marked = fold(spark, rows)
    assert duplicate_counts(marked) == {REDELIVERY: 2, SNAPSHOT_RERUN: 0}
    dupes = marked.filter(F.col("duplicate_class").isNotNull()).select("offset", "duplicate_class")
    assertDataFrameEqual(dupes, [Row(offset=2, duplicate_class=REDELIVERY), Row(offset=3, duplicate_class=REDELIVERY)])
    assertDataFrameEqual(state(result), items(spark, [(1, "c", 3)]))


def test_the_changelog_keeps_duplicates_flagged_until_repair_drops_them(spark):
    rows = [
        item_event(0, "r", 1, {"id": 1, "name": "old", "qty": 1}, snapshot="first", txid=50, lsn=900),
        item_event(1, "r", 2, {"id": 2, "name": "b", "qty": 2}, snapshot="true", txid=50, lsn=900),
        item_event(2, "r", 1, {"id": 1, "name": "new", "qty": 5}, snapshot="last", txid=60, lsn=950),
        item_event(3, "u", 2, {"id": 2, "name": "b2", "qty": 3}, {"id": 2}, txid=61, lsn=960),
        item_event(4, "u", 2, {"id": 2, "name": "b2", "qty": 3}, {"id": 2}, txid=61, lsn=960),
    ]
    changelog, _ = typed_changelog(mark_duplicates(item_changes(spark, rows)), ITEMS_SPEC, ITEMS_KEY)
    flagged = changelog.select("offset", "duplicate_class")
    assertDataFrameEqual(
        flagged,
        [
            Row(offset=0, duplicate_class=None),
            Row(offset=1, duplicate_class=None),
            Row(offset=2, duplicate_class=SNAPSHOT_RERUN),
            Row(offset=3, duplicate_class=None),
            Row(offset=4, duplicate_class=REDELIVERY),
        ],
    )
    resolved = resolve_duplicates(changelog)
    # the superseded read of key 1 (older round) and the redelivery go; nothing stays flagged
    assertDataFrameEqual(
        resolved.select("offset", "duplicate_class"),
        [Row(offset=o, duplicate_class=None) for o in (1, 2, 3)],
    )
    before = fold_table(changelog, ITEMS_SPEC, ITEMS_KEY, resets=snapshot_resets(changelog))
    after = fold_table(resolved, ITEMS_SPEC, ITEMS_KEY, resets=snapshot_resets(resolved))
    assertDataFrameEqual(state(after), state(before))
    assertDataFrameEqual(state(after), items(spark, [(1, "new", 5), (2, "b2", 3)]))
    assertDataFrameEqual(resolve_duplicates(resolved), resolved)


def test_a_redelivery_of_an_event_from_an_earlier_range_is_recognised(spark):
    first = item_changes(spark, [item_event(0, "c", 1, {"id": 1, "name": "a", "qty": 1}, txid=101, lsn=1001)])
    history = mark_duplicates(first)
    again = item_changes(spark, [item_event(7, "c", 1, {"id": 1, "name": "a", "qty": 1}, txid=101, lsn=1001)])
    assert duplicate_counts(mark_duplicates(again, history)) == {REDELIVERY: 1, SNAPSHOT_RERUN: 0}


def test_snapshot_rerun_is_counted_and_its_newer_state_wins(spark):
    rows = [
        # first snapshot round (txid 50) interrupted by a crash after two rows
        item_event(0, "r", 1, {"id": 1, "name": "old", "qty": 1}, snapshot="first", txid=50, lsn=900),
        item_event(1, "r", 2, {"id": 2, "name": "gone", "qty": 2}, snapshot="true", txid=50, lsn=900),
        # row 2 deleted and row 1 updated while the connector was down; the snapshot starts again
        item_event(2, "r", 1, {"id": 1, "name": "new", "qty": 5}, snapshot="first", txid=60, lsn=950),
        item_event(3, "r", 3, {"id": 3, "name": "x", "qty": 3}, snapshot="last", txid=60, lsn=950),
        item_event(4, "c", 4, {"id": 4, "name": "y", "qty": 4}, txid=61, lsn=960),
    ]
    result, marked = fold(spark, rows)
    assert duplicate_counts(marked) == {REDELIVERY: 0, SNAPSHOT_RERUN: 1}
    assert marked.filter(F.col("duplicate_class") == SNAPSHOT_RERUN).select("offset").first()[0] == 2
    assertDataFrameEqual(state(result), items(spark, [(1, "new", 5), (3, "x", 3), (4, "y", 4)]))


def test_a_round_after_a_complete_round_is_a_new_image_not_a_rerun(spark):
    rows = [
        # a complete round (its last record is marked), then the connector snapshots the table again
        # (offsets reset, a slot re-created): a new image of the table, with row 2 deleted meanwhile
        item_event(0, "r", 1, {"id": 1, "name": "a", "qty": 1}, snapshot="first", txid=50, lsn=900),
        item_event(1, "r", 2, {"id": 2, "name": "b", "qty": 2}, snapshot="last_in_data_collection", txid=50, lsn=900),
        item_event(2, "r", 1, {"id": 1, "name": "a", "qty": 7}, snapshot="first", txid=60, lsn=950),
        item_event(3, "r", 3, {"id": 3, "name": "c", "qty": 3}, snapshot="last", txid=60, lsn=950),
    ]
    result, marked = fold(spark, rows)
    assert duplicate_counts(marked) == {REDELIVERY: 0, SNAPSHOT_RERUN: 0}
    assertDataFrameEqual(state(result), items(spark, [(1, "a", 7), (3, "c", 3)]))


def test_a_snapshot_round_in_a_new_range_resets_the_previous_lake_table(spark):
    first, _ = fold(
        spark,
        [
            item_event(0, "r", 1, {"id": 1, "name": "a", "qty": 1}, snapshot="first", txid=50, lsn=900),
            item_event(1, "r", 2, {"id": 2, "name": "b", "qty": 2}, snapshot="true", txid=50, lsn=900),
        ],
    )
    second, _ = fold(
        spark,
        [item_event(5, "r", 1, {"id": 1, "name": "a", "qty": 9}, snapshot="last", txid=70, lsn=990)],
        previous=first,
    )
    assertDataFrameEqual(state(second), items(spark, [(1, "a", 9)]))


def test_an_incremental_snapshot_resets_nothing_its_reads_are_upserts(spark):
    """Debezium's incremental snapshot (``cdc-tables add`` starts one for a new table) emits a chunk's
    reads after the changes streamed during the chunk's window, leaving out the keys they changed;
    its reads carry no txId or LSN. Taken as a table image, its first read would drop those changes."""
    previous, _ = fold(spark, [item_event(0, "c", 9, {"id": 9, "name": "kept", "qty": 9}, txid=90, lsn=800)])
    rows = [
        item_event(1, "c", 1, {"id": 1, "name": "a", "qty": 1}, txid=101, lsn=1001),
        # in the first chunk's window: row 2 (there before the capture) updated, so its read is left out
        item_event(2, "u", 2, {"id": 2, "name": "b", "qty": 5}, {"id": 2, "name": "b", "qty": 2}, txid=102, lsn=1002),
        item_event(3, "r", 1, {"id": 1, "name": "a", "qty": 1}, snapshot="incremental", txid=None, lsn=None),
        item_event(4, "r", 3, {"id": 3, "name": "c", "qty": 3}, snapshot="incremental", txid=None, lsn=None),
        item_event(5, "c", 4, {"id": 4, "name": "d", "qty": 4}, txid=103, lsn=1003),
        item_event(6, "r", 5, {"id": 5, "name": "e", "qty": 5}, snapshot="incremental", txid=None, lsn=None),
    ]
    result, marked = fold(spark, rows, previous=previous)
    assert duplicate_counts(marked) == {REDELIVERY: 0, SNAPSHOT_RERUN: 0}
    expected = [(1, "a", 1), (2, "b", 5), (3, "c", 3), (4, "d", 4), (5, "e", 5), (9, "kept", 9)]
    assertDataFrameEqual(state(result), items(spark, expected))


def test_incremental_fold_equals_a_full_fold(spark):
    rows = [
        item_event(0, "c", 1, {"id": 1, "name": "a", "qty": 1}, txid=101, lsn=1001),
        item_event(1, "c", 2, {"id": 2, "name": "b", "qty": 2}, txid=102, lsn=1002),
        item_event(2, "u", 1, {"id": 1, "name": "a", "qty": 5}, {"id": 1}, txid=103, lsn=1003),
        item_event(3, "d", 2, None, {"id": 2, "name": "b", "qty": 2}, txid=104, lsn=1004),
        item_event(4, "c", 2, {"id": 2, "name": "b2", "qty": 7}, txid=105, lsn=1005),
    ]
    full, _ = fold(spark, rows)
    head, _ = fold(spark, rows[:3])
    tail, _ = fold(spark, rows[3:], previous=head)
    assertDataFrameEqual(tail, full)


def test_unchanged_toast_column_is_filled_from_the_previous_state(spark):
    rows = [
        item_event(0, "c", 1, {"id": 1, "name": "x" * 5000, "qty": 1}, txid=101, lsn=1001),
        item_event(1, "u", 1, {"id": 1, "name": UNAVAILABLE_VALUE, "qty": 2}, {"id": 1}, txid=102, lsn=1002),
    ]
    full, _ = fold(spark, rows)
    assertDataFrameEqual(state(full), items(spark, [(1, "x" * 5000, 2)]))
    head, _ = fold(spark, rows[:1])
    tail, _ = fold(spark, rows[1:], previous=head)
    assertDataFrameEqual(state(tail), items(spark, [(1, "x" * 5000, 2)]))


def test_a_key_change_carries_the_old_keys_unchanged_toast_values(spark):
    """Debezium's delete of the old key and create of the new one share the UPDATE's LSN and txid."""
    body = "x" * 5000
    rows = [
        item_event(0, "c", 1, {"id": 1, "name": body, "qty": 1}, txid=101, lsn=1001),
        item_event(1, "c", 2, {"id": 2, "name": "y" * 5000, "qty": 1}, txid=101, lsn=1002),
        # the key of row 1 moves to 10; row 2 keeps its key and loses nothing
        item_event(2, "d", 1, None, {"id": 1}, txid=102, lsn=1003),
        item_event(3, None, 1),
        item_event(4, "c", 10, {"id": 10, "name": UNAVAILABLE_VALUE, "qty": 1}, txid=102, lsn=1003),
        item_event(5, "u", 10, {"id": 10, "name": UNAVAILABLE_VALUE, "qty": 5}, {"id": 10}, txid=103, lsn=1004),
        # a create with no delete of the same change is a new row whose value is not known
        item_event(6, "c", 20, {"id": 20, "name": UNAVAILABLE_VALUE, "qty": 1}, txid=104, lsn=1005),
    ]
    expected = items(spark, [(2, "y" * 5000, 1), (10, body, 5), (20, None, 1)])
    full, _ = fold(spark, rows)
    assertDataFrameEqual(state(full), expected)
    head, _ = fold(spark, rows[:2])
    tail, _ = fold(spark, rows[2:], previous=head)
    assertDataFrameEqual(state(tail), expected)


def test_ordering_trap_emission_order_wins_over_lsn(spark):
    """A transaction that began before the snapshot point commits after it with lower change LSNs."""
    rows = [
        item_event(0, "r", 1, {"id": 1, "name": "snap", "qty": 1}, snapshot="last", txid=50, lsn=5000),
        # txid 49 began earlier; its change LSN 4000 is below the snapshot's, but it committed later
        item_event(1, "u", 1, {"id": 1, "name": "late-commit", "qty": 2}, {"id": 1}, txid=49, lsn=4000),
    ]
    result, _ = fold(spark, rows)
    assertDataFrameEqual(state(result), items(spark, [(1, "late-commit", 2)]))


@pytest.mark.parametrize("partitions", [(0, 0), (0, 1)])
def test_compound_keys_fold_per_key(spark, partitions):
    spec = {"order_id": "bigint", "line_no": "integer", "sku": "text"}
    key = ("order_id", "line_no")

    def line(offset, op, order_id, line_no, sku, txid, partition):
        after = None if op == "d" else {"order_id": order_id, "line_no": line_no, "sku": sku}
        before = {"order_id": order_id, "line_no": line_no, "sku": sku} if op != "c" else None
        value = json.dumps(
            {
                "before": before,
                "after": after,
                "op": op,
                "ts_ms": 1,
                "source": {
                    "txId": txid,
                    "lsn": txid * 10,
                    "snapshot": "false",
                    "table": "lines",
                    "schema": "public",
                    "ts_ms": 1,
                },
            }
        ).encode()
        return (ITEMS_TOPIC, partition, offset, json.dumps({"order_id": order_id, "line_no": line_no}).encode(), value)

    p, q = partitions
    rows = [
        line(0, "c", 1, 1, "a", 10, p),
        line(1 if p == q else 0, "c", 1, 2, "b", 11, q),
        line(2, "u", 1, 1, "a2", 12, p),
        line(3 if p == q else 1, "d", 1, 2, "b", 13, q),
    ]
    events = item_changes(spark, rows)
    changelog, _ = typed_changelog(mark_duplicates(events), spec, key)
    result = fold_table(changelog, spec, key).select(*spec)
    assertDataFrameEqual(result, spark.createDataFrame([(1, 1, "a2")], "order_id long, line_no int, sku string"))


def test_decoding_without_raw_values_gives_the_same_changelog_and_quarantine(spark):
    rows = [
        item_event(0, "c", 1, {"id": 1, "name": "a", "qty": 1}, txid=101, lsn=1001),
        item_event(1, "u", 2, {"id": 2, "name": "b", "qty": "not a number"}, {"id": 2}, txid=102, lsn=1002),
        item_event(2, "c", 1, {"id": 1, "name": "a", "qty": 1}, txid=101, lsn=1001),
        item_event(3, "d", 3, None, {"id": "x"}, txid=103, lsn=1003),
    ]
    good, _ = split_envelopes(tag_envelopes(raw_records(spark, rows), schemas=False))
    events = change_events(good)
    changelog, quarantined = typed_changelog(mark_duplicates(events), ITEMS_SPEC, ITEMS_KEY)
    lean_changelog, lean_quarantined = typed_changelog(
        mark_duplicates(without_raw_values(events)), ITEMS_SPEC, ITEMS_KEY
    )
    assert quarantined.count() == 2
    assertDataFrameEqual(lean_changelog, changelog)
    assertDataFrameEqual(with_raw_values(lean_quarantined, good), quarantined)
    assert with_raw_values(lean_quarantined, good).columns == quarantined.columns


def test_a_truncate_empties_the_table_and_later_changes_count(spark):
    rows = [
        item_event(0, "c", 1, {"id": 1, "name": "a", "qty": 1}, txid=101, lsn=1001),
        item_event(1, "c", 2, {"id": 2, "name": "b", "qty": 2}, txid=102, lsn=1002),
        item_truncate(2, txid=103, lsn=1003),
        item_event(3, "c", 2, {"id": 2, "name": "b2", "qty": 5}, txid=104, lsn=1004),
        item_event(4, "c", 3, {"id": 3, "name": "c", "qty": 3}, txid=105, lsn=1005),
    ]
    result, marked = fold(spark, rows)
    assertDataFrameEqual(state(result), items(spark, [(2, "b2", 5), (3, "c", 3)]))
    # the truncate is a change of the range, kept in the changelog, and the fold of the changelog applies it
    changelog, _ = typed_changelog(marked, ITEMS_SPEC, ITEMS_KEY)
    assert [(r["op"], r["key"]) for r in changelog.filter("op = 't'").collect()] == [("t", None)]

    # incrementally: the previous lake table's rows are older than the truncate
    head, _ = fold(spark, rows[:2])
    tail, _ = fold(spark, rows[2:], previous=head)
    assertDataFrameEqual(state(tail), state(result))


def test_a_truncate_on_another_partition_is_ordered_by_lsn(spark):
    rows = [
        item_event(0, "c", 1, {"id": 1, "name": "a", "qty": 1}, txid=101, lsn=1001, partition=1),
        item_truncate(0, txid=103, lsn=1003, partition=0),
        item_event(1, "c", 2, {"id": 2, "name": "b", "qty": 2}, txid=104, lsn=1004, partition=1),
    ]
    result, _ = fold(spark, rows)
    assertDataFrameEqual(state(result), items(spark, [(2, "b", 2)]))


def test_a_redelivered_truncate_is_a_counted_duplicate_and_changes_nothing_else(spark):
    rows = [
        item_event(0, "c", 1, {"id": 1, "name": "a", "qty": 1}, txid=101, lsn=1001),
        item_truncate(1, txid=102, lsn=1002),
        item_event(2, "c", 2, {"id": 2, "name": "b", "qty": 2}, txid=103, lsn=1003),
        item_truncate(3, txid=102, lsn=1002),  # redelivered after a worker crash: it must not empty key 2
    ]
    result, marked = fold(spark, rows)
    assert duplicate_counts(marked) == {REDELIVERY: 1, SNAPSHOT_RERUN: 0}
    assertDataFrameEqual(state(result), items(spark, [(2, "b", 2)]))


def test_an_event_of_another_table_in_the_topic_is_quarantined_not_folded(spark):
    stray = item_event(1, "c", 1, {"id": 1, "name": "not ours", "qty": 9}, txid=102, lsn=1002)
    value = json.loads(stray[4])
    value["source"]["table"] = "invoices"
    rows = [
        item_event(0, "c", 2, {"id": 2, "name": "ours", "qty": 1}, txid=101, lsn=1001),
        (*stray[:4], json.dumps(value).encode()),
        item_event(2, None, 2),
    ]
    good, bad = split_envelopes(tag_envelopes(raw_records(spark, rows), schemas=False))
    assert bad.count() == 0
    assertDataFrameEqual(of_table(good, "public.items").select("offset"), [Row(offset=0), Row(offset=2)])
    assertDataFrameEqual(
        foreign_events(good, "public.items").select("offset", "reason"),
        [Row(offset=1, reason="event of public.invoices in the topic of public.items")],
    )


def test_changes_after_partitions_were_added_win_over_the_previous_table_at_larger_offsets(spark):
    # key 1's last change before the add sits at offset 40 of partition 0; after the topic grew, its
    # changes go to partition 2, whose offsets start at 0
    first = [item_event(40, "c", 1, {"id": 1, "name": "a", "qty": 1}, txid=101, lsn=1001, partition=0)]
    previous, _ = fold(spark, first)
    later = [
        item_event(0, "u", 1, {"id": 1, "name": "a2", "qty": 2}, txid=102, lsn=1002, partition=2),
        item_event(1, "c", 2, {"id": 2, "name": "b", "qty": 1}, txid=103, lsn=1003, partition=2),
    ]
    result, _ = fold(spark, later, previous=previous)
    assertDataFrameEqual(state(result), items(spark, [(1, "a2", 2), (2, "b", 1)]))


def test_a_redelivery_to_a_lower_numbered_partition_is_the_copy_emitted_later(spark):
    # by partition and offset alone, partition 1's copy of the update at LSN 1002 came first: the original
    # in partition 2 was named the duplicate and the copy, after offset 3's later change, won the fold
    result, marked = fold(spark, redelivered_to_a_lower_partition())
    assertDataFrameEqual(state(result), items(spark, [(1, "b", 3)]))
    assertDataFrameEqual(
        marked.filter(F.col("duplicate_class").isNotNull()).select("partition", "offset", "duplicate_class"),
        [Row(partition=1, offset=o, duplicate_class=REDELIVERY) for o in (4, 5)],
    )


def test_copies_in_one_partition_keep_offset_order_whatever_their_envelope_times(spark):
    # a restarted connector on a host whose clock is behind: the redelivered copy at offset 9 is dated
    # earlier than its original at offset 1, and is still the duplicate
    rows = [
        item_event(1, "c", 1, {"id": 1, "name": "a", "qty": 1}, txid=101, lsn=1001, emitted_ms=50),
        item_event(2, "u", 1, {"id": 1, "name": "b", "qty": 2}, txid=102, lsn=1002, emitted_ms=51),
        item_event(9, "c", 1, {"id": 1, "name": "a", "qty": 1}, txid=101, lsn=1001, emitted_ms=5),
    ]
    result, marked = fold(spark, rows)
    assertDataFrameEqual(state(result), items(spark, [(1, "b", 2)]))
    assertDataFrameEqual(
        marked.filter(F.col("duplicate_class").isNotNull()).select("offset"),
        [Row(offset=9)],
    )


def test_a_key_back_in_a_partition_it_left_folds_its_runs_in_lsn_order(spark):
    # by the first LSN per partition, partition 0's later changes sorted before partition 3's: key 1
    # ended at "b" and key 2, deleted in partition 3, ended deleted although re-inserted after
    result, _ = fold(spark, back_in_an_earlier_partition())
    assertDataFrameEqual(state(result), items(spark, [(1, "c", 3), (2, "y", 2)]))


def test_a_key_that_moved_partitions_inside_the_range_folds_in_lsn_order_of_its_runs(spark):
    # the topic grew during the range: key 1's first changes at offsets 50-51 of partition 1, its later
    # ones at offsets 3-4 of partition 4; each partition's run of the key is ordered by its first LSN
    rows = [
        item_event(50, "c", 1, {"id": 1, "name": "a", "qty": 1}, txid=101, lsn=1001, partition=1),
        item_event(51, "u", 1, {"id": 1, "name": "a2", "qty": 2}, txid=102, lsn=1002, partition=1),
        item_event(3, "u", 1, {"id": 1, "name": "a3", "qty": 3}, txid=105, lsn=1005, partition=4),
        item_event(4, "d", 1, None, {"id": 1, "name": "a3", "qty": 3}, txid=106, lsn=1006, partition=4),
        item_event(52, "c", 2, {"id": 2, "name": "b", "qty": 1}, txid=103, lsn=1003, partition=1),
        item_event(2, "u", 2, {"id": 2, "name": "b2", "qty": 2}, txid=104, lsn=1004, partition=4),
    ]
    result, _ = fold(spark, rows)
    assertDataFrameEqual(state(result), items(spark, [(2, "b2", 2)]))
    # and the same range on top of a previous table holding both keys at larger offsets
    previous = items(spark, [(1, "old", 0), (2, "old", 0)]).select(
        "*",
        F.lit("u").alias("_cdc_op"),
        F.lit(0).alias("_cdc_partition"),
        F.lit(900).cast("long").alias("_cdc_offset"),
        F.lit(0).alias("_cdc_sub"),
        F.lit(90).cast("long").alias("_cdc_txid"),
        F.lit(900).cast("long").alias("_cdc_lsn"),
        F.lit("debezium").alias("_cdc_origin"),
    )
    result, _ = fold(spark, rows, previous=previous)
    assertDataFrameEqual(state(result), items(spark, [(2, "b2", 2)]))
