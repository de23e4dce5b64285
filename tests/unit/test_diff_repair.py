"""Point-in-time diff against a snapshot, and repair as events."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual

from cdc_reconcile.compaction import fold_table, mark_duplicates
from cdc_reconcile.diff import EXTRA, MISSING, STALE, DiffReport, diff_rows, lake_as_of, summarise, visible_changes
from cdc_reconcile.repair import audit_rows, repair_events
from cdc_reconcile.visibility import PgSnapshot
from tests.support.frames import ITEMS_KEY, ITEMS_SPEC, item_changes, item_event, item_truncate, items, typed_changelog

COLUMNS = list(ITEMS_SPEC)
# xmin 100, xmax 110, transaction 105 still in progress when the snapshot was taken
SNAPSHOT = PgSnapshot(100, 110, (105,))


def changelog_of(spark, rows):
    changelog, quarantined = typed_changelog(mark_duplicates(item_changes(spark, rows)), ITEMS_SPEC, ITEMS_KEY)
    assert quarantined.count() == 0
    return changelog


def test_lake_as_of_the_snapshot_ignores_invisible_transactions(spark):
    changelog = changelog_of(
        spark,
        [
            item_event(0, "c", 1, {"id": 1, "name": "a", "qty": 1}, txid=90, lsn=10),
            item_event(1, "c", 2, {"id": 2, "name": "b", "qty": 2}, txid=101, lsn=11),
            item_event(2, "u", 1, {"id": 1, "name": "a", "qty": 7}, {"id": 1}, txid=112, lsn=12),  # after xmax
            item_event(3, "c", 3, {"id": 3, "name": "c", "qty": 3}, txid=105, lsn=13),  # in progress (xip)
        ],
    )
    as_of = lake_as_of(changelog, SNAPSHOT, ITEMS_SPEC, ITEMS_KEY).select(*COLUMNS)
    assertDataFrameEqual(as_of, items(spark, [(1, "a", 1), (2, "b", 2)]))
    snapshot = items(spark, [(1, "a", 1), (2, "b", 2)])
    assert diff_rows(as_of, snapshot, ITEMS_KEY, COLUMNS).count() == 0


def test_a_full_rescan_folds_a_streamed_xid_of_an_earlier_epoch_by_its_commit_time(spark):
    # Epoch 3 now; the topic still holds a row written 2^32 transactions ago (its low bits read as a
    # transaction after xmax) and a change that really committed after the snapshot.
    epoch, taken = 3 << 32, 1_790_000_000_000
    snapshot = PgSnapshot(epoch + 100, epoch + 110, (), taken_at_ms=taken)
    changelog = changelog_of(
        spark,
        [
            item_event(0, "c", 1, {"id": 1, "name": "a", "qty": 1}, txid=150, lsn=10, commit_ms=taken - 86_400_000),
            item_event(1, "u", 1, {"id": 1, "name": "a", "qty": 5}, {"id": 1}, txid=151, lsn=90, commit_ms=taken + 50),
        ],
    )
    as_of = lake_as_of(changelog, snapshot, ITEMS_SPEC, ITEMS_KEY).select(*COLUMNS)
    assertDataFrameEqual(as_of, items(spark, [(1, "a", 1)]))
    without_start = PgSnapshot(snapshot.xmin, snapshot.xmax, snapshot.xip)
    assert lake_as_of(changelog, without_start, ITEMS_SPEC, ITEMS_KEY).count() == 0, "the low bits alone miss it"


def test_32_bit_streamed_xids_are_compared_after_widening(spark):
    epoch = 3 << 32
    snapshot = PgSnapshot(epoch + 100, epoch + 110, ())
    changelog = changelog_of(
        spark,
        [
            item_event(0, "c", 1, {"id": 1, "name": "a", "qty": 1}, txid=99, lsn=10),  # 32-bit, before xmin
            item_event(1, "c", 2, {"id": 2, "name": "b", "qty": 2}, txid=111, lsn=11),  # 32-bit, after xmax
        ],
    )
    as_of = lake_as_of(changelog, snapshot, ITEMS_SPEC, ITEMS_KEY).select(*COLUMNS)
    assertDataFrameEqual(as_of, items(spark, [(1, "a", 1)]))


def test_diff_names_missing_extra_and_stale_keys(spark):
    lake = items(spark, [(1, "a", 1), (2, "b", 2), (4, None, 4)])
    snapshot = items(spark, [(1, "a", 1), (2, "b", 3), (3, "c", 3), (4, "", 4)])
    diff = diff_rows(lake, snapshot, ITEMS_KEY, COLUMNS)
    assertDataFrameEqual(
        diff.select("id", "kind"),
        [Row(id=2, kind=STALE), Row(id=3, kind=MISSING), Row(id=4, kind=STALE)],
    )
    report = summarise(diff, lake, snapshot, ITEMS_KEY)
    assert report.counts == {MISSING: 1, EXTRA: 0, STALE: 2}
    assert report.samples[MISSING] == [{"id": 3}]
    assert not report.clean
    kept = DiffReport.from_dict(json.loads(json.dumps(report.as_dict())))  # as validate's findings keep it
    assert kept == report and not kept.clean
    extra = diff_rows(snapshot, lake, ITEMS_KEY, COLUMNS)
    assert {r["kind"] for r in extra.collect()} == {EXTRA, STALE}


def test_a_report_of_date_and_decimal_keys_reads_the_same_computed_taken_or_given_its_counts(spark):
    schema = "day date, amount decimal(10,2), note string"
    key = ["day", "amount"]
    lake = spark.createDataFrame(
        [(dt.date(2026, 1, 1), Decimal("1.50"), "a"), (dt.date(2026, 1, 2), Decimal("2.00"), "b")], schema
    )
    source = spark.createDataFrame(
        [(dt.date(2026, 1, 1), Decimal("1.50"), "x"), (dt.date(2026, 1, 3), Decimal("3.25"), "c")], schema
    )
    diff = diff_rows(lake, source, key, ["day", "amount", "note"])
    report = summarise(diff, lake, source, key)
    assert report.samples == {
        EXTRA: [{"day": "2026-01-02", "amount": "2.00"}],
        MISSING: [{"day": "2026-01-03", "amount": "3.25"}],
        STALE: [{"day": "2026-01-01", "amount": "1.50"}],
    }
    assert DiffReport.from_dict(json.loads(json.dumps(report.as_dict()))) == report
    given = summarise(diff, lake, source, key, counted=({MISSING: 1, EXTRA: 1, STALE: 1}, {}, 2))
    assert given == report


def test_repair_events_make_the_lake_equal_the_snapshot_and_later_events_still_win(spark):
    changelog = changelog_of(
        spark,
        [
            item_event(0, "c", 1, {"id": 1, "name": "lost-update", "qty": 1}, txid=90, lsn=10),
            item_event(1, "c", 9, {"id": 9, "name": "ghost", "qty": 9}, txid=91, lsn=11),
            # after the snapshot: a real change to key 1 that must win over the repair
            item_event(2, "u", 1, {"id": 1, "name": "later", "qty": 5}, {"id": 1}, txid=120, lsn=20),
        ],
    )
    snapshot = items(spark, [(1, "fixed", 2), (3, "never-arrived", 3)])
    as_of = lake_as_of(changelog, SNAPSHOT, ITEMS_SPEC, ITEMS_KEY)
    diff = diff_rows(as_of, snapshot, ITEMS_KEY, COLUMNS)
    assert sorted((r["id"], r["kind"]) for r in diff.collect()) == [(1, STALE), (3, MISSING), (9, EXTRA)]

    repairs = repair_events(diff, snapshot, visible_changes(changelog, SNAPSHOT), ITEMS_SPEC, ITEMS_KEY)
    repaired = changelog.unionByName(repairs)
    assert diff_rows(lake_as_of(repaired, SNAPSHOT, ITEMS_SPEC, ITEMS_KEY), snapshot, ITEMS_KEY, COLUMNS).count() == 0
    table = fold_table(repaired, ITEMS_SPEC, ITEMS_KEY).select(*COLUMNS)
    assertDataFrameEqual(table, items(spark, [(1, "later", 5), (3, "never-arrived", 3)]))

    again = diff_rows(lake_as_of(repaired, SNAPSHOT, ITEMS_SPEC, ITEMS_KEY), snapshot, ITEMS_KEY, COLUMNS)
    assert repair_events(again, snapshot, visible_changes(repaired, SNAPSHOT), ITEMS_SPEC, ITEMS_KEY).count() == 0

    audit = audit_rows(diff, None, ITEMS_KEY, run_id="run-1", table_name="public.items", dry_run=False)
    assert sorted((r["key"], r["kind"]) for r in audit.collect()) == [
        ('{"id":1}', STALE),
        ('{"id":3}', MISSING),
        ('{"id":9}', EXTRA),
    ]
    assert all(r["after_hash"] is None for r in audit.collect() if r["kind"] == EXTRA)


def test_repair_of_a_key_known_only_from_the_previous_table_comes_before_the_range(spark):
    first = changelog_of(spark, [item_event(0, "c", 1, {"id": 1, "name": "a", "qty": 1}, txid=90, lsn=10)])
    previous = fold_table(first, ITEMS_SPEC, ITEMS_KEY)
    empty_range = first.limit(0)
    snapshot = items(spark, [(1, "b", 2)])
    as_of = lake_as_of(empty_range, SNAPSHOT, ITEMS_SPEC, ITEMS_KEY, previous=previous)
    diff = diff_rows(as_of, snapshot, ITEMS_KEY, COLUMNS)
    repairs = repair_events(diff, snapshot, visible_changes(empty_range, SNAPSHOT), ITEMS_SPEC, ITEMS_KEY)
    assert [(r["partition"], r["offset"], r["sub"]) for r in repairs.collect()] == [(-1, -1, 1)]
    table = fold_table(repairs, ITEMS_SPEC, ITEMS_KEY, previous=previous).select(*COLUMNS)
    assertDataFrameEqual(table, snapshot)


def test_repair_events_never_reset_other_keys_like_a_snapshot_round(spark):
    changelog = changelog_of(
        spark,
        [
            item_event(0, "c", 1, {"id": 1, "name": "a", "qty": 1}, txid=90, lsn=10),
            item_event(1, "c", 2, {"id": 2, "name": "b", "qty": 2}, txid=91, lsn=11),
            item_event(2, "c", 3, {"id": 3, "name": "c", "qty": 3}, txid=92, lsn=12),
        ],
    )
    snapshot = items(spark, [(1, "a", 1), (2, "b", 2), (3, "c", 30)])
    diff = diff_rows(lake_as_of(changelog, SNAPSHOT, ITEMS_SPEC, ITEMS_KEY), snapshot, ITEMS_KEY, COLUMNS)
    repairs = repair_events(diff, snapshot, visible_changes(changelog, SNAPSHOT), ITEMS_SPEC, ITEMS_KEY)
    assert [(r["id"], r["op"], r["offset"]) for r in repairs.collect()] == [(3, "r", 2)]
    repaired = lake_as_of(changelog.unionByName(repairs), SNAPSHOT, ITEMS_SPEC, ITEMS_KEY).select(*COLUMNS)
    assertDataFrameEqual(repaired, snapshot)


def test_a_truncate_the_snapshot_did_not_see_is_not_applied_as_of_the_snapshot(spark):
    changelog = changelog_of(
        spark,
        [
            item_event(0, "c", 1, {"id": 1, "name": "a", "qty": 1}, txid=90, lsn=10),
            item_truncate(1, txid=112, lsn=11),  # committed after the snapshot (xmax 110)
        ],
    )
    snapshot = items(spark, [(1, "a", 1)])
    as_of = lake_as_of(changelog, SNAPSHOT, ITEMS_SPEC, ITEMS_KEY)
    assert diff_rows(as_of, snapshot, ITEMS_KEY, COLUMNS).count() == 0
    assert fold_table(changelog, ITEMS_SPEC, ITEMS_KEY).count() == 0


def test_a_row_lost_after_a_truncate_is_repaired_after_the_truncate(spark):
    changelog = changelog_of(
        spark,
        [
            item_event(0, "c", 1, {"id": 1, "name": "a", "qty": 1}, txid=90, lsn=10),
            item_event(1, "c", 2, {"id": 2, "name": "b", "qty": 2}, txid=91, lsn=11),
            item_truncate(2, txid=92, lsn=12),
            # key 1 inserted again after the truncate, but that event never arrived
            item_event(3, "c", 3, {"id": 3, "name": "c", "qty": 3}, txid=94, lsn=14),
        ],
    )
    snapshot = items(spark, [(1, "again", 7), (3, "c", 3)])
    diff = diff_rows(lake_as_of(changelog, SNAPSHOT, ITEMS_SPEC, ITEMS_KEY), snapshot, ITEMS_KEY, COLUMNS)
    assert sorted((r["id"], r["kind"]) for r in diff.collect()) == [(1, MISSING)]
    repairs = repair_events(diff, snapshot, visible_changes(changelog, SNAPSHOT), ITEMS_SPEC, ITEMS_KEY)
    assert [(r["partition"], r["offset"], r["sub"]) for r in repairs.collect()] == [(0, 2, 1)]
    repaired = changelog.unionByName(repairs)
    assert diff_rows(lake_as_of(repaired, SNAPSHOT, ITEMS_SPEC, ITEMS_KEY), snapshot, ITEMS_KEY, COLUMNS).count() == 0
    assertDataFrameEqual(fold_table(repaired, ITEMS_SPEC, ITEMS_KEY).select(*COLUMNS), snapshot)


def test_a_later_truncate_empties_a_row_repaired_without_a_known_position(spark):
    first = changelog_of(spark, [item_event(0, "c", 1, {"id": 1, "name": "a", "qty": 1}, txid=90, lsn=10)])
    snapshot = items(spark, [(1, "a", 1), (2, "never-arrived", 2)])
    diff = diff_rows(lake_as_of(first, SNAPSHOT, ITEMS_SPEC, ITEMS_KEY), snapshot, ITEMS_KEY, COLUMNS)
    # materialized, as reconcile stores the repairs and the next run reads the table it published
    repairs = repair_events(diff, snapshot, visible_changes(first, SNAPSHOT), ITEMS_SPEC, ITEMS_KEY).localCheckpoint()
    assert [(r["id"], r["partition"], r["offset"]) for r in repairs.collect()] == [(2, -1, -1)]
    previous = fold_table(first.unionByName(repairs), ITEMS_SPEC, ITEMS_KEY).localCheckpoint()
    assert previous.count() == 2
    second = changelog_of(spark, [item_truncate(5, txid=95, lsn=50)])
    assert fold_table(second, ITEMS_SPEC, ITEMS_KEY, previous=previous).count() == 0


def test_a_repair_placed_after_a_change_in_another_partition_is_emptied_by_a_later_truncate(spark):
    # key 1's last change the snapshot saw is in partition 1; a truncate the snapshot did not see
    # (txid 112) follows in partition 0: the repair, at key 1's position, must not outlive it
    changelog = changelog_of(
        spark,
        [
            item_event(7, "c", 1, {"id": 1, "name": "a", "qty": 1}, txid=90, lsn=10, partition=1),
            item_truncate(3, txid=112, lsn=20, partition=0),
        ],
    )
    snapshot = items(spark, [(1, "b", 2)])
    diff = diff_rows(lake_as_of(changelog, SNAPSHOT, ITEMS_SPEC, ITEMS_KEY), snapshot, ITEMS_KEY, COLUMNS)
    assert [(r["id"], r["kind"]) for r in diff.collect()] == [(1, STALE)]
    repairs = repair_events(diff, snapshot, visible_changes(changelog, SNAPSHOT), ITEMS_SPEC, ITEMS_KEY)
    assert [(r["partition"], r["offset"], r["sub"]) for r in repairs.collect()] == [(1, 7, 1)]
    repaired = changelog.unionByName(repairs)
    assert diff_rows(lake_as_of(repaired, SNAPSHOT, ITEMS_SPEC, ITEMS_KEY), snapshot, ITEMS_KEY, COLUMNS).count() == 0
    assert fold_table(repaired, ITEMS_SPEC, ITEMS_KEY).count() == 0


def test_a_repair_after_a_visible_truncate_in_another_partition_moves_after_it(spark):
    changelog = changelog_of(
        spark,
        [
            item_event(7, "c", 1, {"id": 1, "name": "a", "qty": 1}, txid=90, lsn=10, partition=1),
            item_truncate(3, txid=92, lsn=20, partition=0),
        ],
    )
    # key 1 was inserted again after the truncate, and that event never arrived
    snapshot = items(spark, [(1, "again", 5)])
    diff = diff_rows(lake_as_of(changelog, SNAPSHOT, ITEMS_SPEC, ITEMS_KEY), snapshot, ITEMS_KEY, COLUMNS)
    assert [(r["id"], r["kind"]) for r in diff.collect()] == [(1, MISSING)]
    repairs = repair_events(diff, snapshot, visible_changes(changelog, SNAPSHOT), ITEMS_SPEC, ITEMS_KEY)
    assert [(r["partition"], r["offset"], r["sub"]) for r in repairs.collect()] == [(0, 3, 1)]
    repaired = changelog.unionByName(repairs)
    assertDataFrameEqual(fold_table(repaired, ITEMS_SPEC, ITEMS_KEY).select(*COLUMNS), snapshot)


def test_a_key_without_a_visible_change_is_repaired_at_the_start_of_a_visible_snapshot_round(spark):
    # a snapshot round the snapshot saw resets the table; key 2's read of it never arrived
    changelog = changelog_of(
        spark,
        [
            item_event(0, "c", 1, {"id": 1, "name": "a", "qty": 1}, txid=90, lsn=10),
            item_event(4, "r", 1, {"id": 1, "name": "a", "qty": 1}, txid=95, lsn=50, snapshot="true", partition=1),
            item_event(5, "r", 3, {"id": 3, "name": "c", "qty": 3}, txid=95, lsn=50, snapshot="last", partition=1),
        ],
    )
    snapshot = items(spark, [(1, "a", 1), (2, "b", 2), (3, "c", 3)])
    diff = diff_rows(lake_as_of(changelog, SNAPSHOT, ITEMS_SPEC, ITEMS_KEY), snapshot, ITEMS_KEY, COLUMNS)
    assert [(r["id"], r["kind"]) for r in diff.collect()] == [(2, MISSING)]
    repairs = repair_events(diff, snapshot, visible_changes(changelog, SNAPSHOT), ITEMS_SPEC, ITEMS_KEY)
    assert [(r["partition"], r["offset"], r["sub"]) for r in repairs.collect()] == [(1, 4, 1)]
    repaired = changelog.unionByName(repairs)
    assert diff_rows(lake_as_of(repaired, SNAPSHOT, ITEMS_SPEC, ITEMS_KEY), snapshot, ITEMS_KEY, COLUMNS).count() == 0


def test_a_repair_after_a_key_change_that_follows_a_visible_truncate_in_another_partition_survives_it(spark):
    # key 1 changed in partition 1 before (lsn 10) and after (lsn 30) a truncate in partition 0 (lsn 20):
    # its repair follows the change at lsn 30, so the truncate must not empty it
    changelog = changelog_of(
        spark,
        [
            item_event(7, "c", 1, {"id": 1, "name": "a", "qty": 1}, txid=90, lsn=10, partition=1),
            item_truncate(3, txid=92, lsn=20, partition=0),
            item_event(8, "c", 1, {"id": 1, "name": "again", "qty": 2}, txid=93, lsn=30, partition=1),
        ],
    )
    snapshot = items(spark, [(1, "fixed", 5)])
    diff = diff_rows(lake_as_of(changelog, SNAPSHOT, ITEMS_SPEC, ITEMS_KEY), snapshot, ITEMS_KEY, COLUMNS)
    repairs = repair_events(diff, snapshot, visible_changes(changelog, SNAPSHOT), ITEMS_SPEC, ITEMS_KEY)
    assert [(r["partition"], r["offset"], r["sub"], r["source_lsn"]) for r in repairs.collect()] == [(1, 8, 1, 30)]
    repaired = changelog.unionByName(repairs)
    assertDataFrameEqual(fold_table(repaired, ITEMS_SPEC, ITEMS_KEY).select(*COLUMNS), snapshot)
