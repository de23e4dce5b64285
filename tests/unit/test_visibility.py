"""Snapshot visibility of transaction ids, including 32-bit xid widening across wraparound."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from cdc_reconcile.visibility import PgSnapshot, parse_snapshot, visible_in_snapshot, widen_xid

EPOCH = 1 << 32


def test_parse_snapshot_text():
    snap = parse_snapshot("100:105:103,101")
    assert snap == PgSnapshot(100, 105, (101, 103))
    assert str(snap) == "100:105:101,103"
    assert parse_snapshot(" 748:748: ") == PgSnapshot(748, 748, ())
    assert str(parse_snapshot("748:748:")) == "748:748:"
    assert parse_snapshot(f"{EPOCH + 5}:{EPOCH + 9}:{EPOCH + 6}").epoch == 1


@pytest.mark.parametrize("text", ["", "1:2", "a:b:", "10:5:", "100:105:99", "100:105:105", "1:2:3:4"])
def test_parse_snapshot_rejects_invalid(text):
    with pytest.raises(ValueError):
        parse_snapshot(text)


def visibility_frame(spark, rows, snapshot, with_op=False):
    df = spark.createDataFrame(rows, "txid long, op string")
    op = F.col("op") if with_op else None
    return df.select("txid", "op", visible_in_snapshot(F.col("txid"), snapshot, op).alias("visible"))


def test_visibility_rules(spark):
    snap = parse_snapshot("100:105:101,103")
    rows = [
        (50, "u"),  # committed before xmin
        (99, "c"),
        (100, "u"),  # xmin itself, not in progress
        (101, "u"),  # in progress at snapshot time
        (102, "d"),  # between xmin and xmax, finished
        (103, "c"),  # in progress
        (104, "u"),
        (105, "c"),  # xmax: not yet started
        (200, "u"),  # later
        (None, "u"),
    ]
    expected = [
        (50, "u", True),
        (99, "c", True),
        (100, "u", True),
        (101, "u", False),
        (102, "d", True),
        (103, "c", False),
        (104, "u", True),
        (105, "c", False),
        (200, "u", False),
        (None, "u", None),
    ]
    assertDataFrameEqual(
        visibility_frame(spark, rows, snap),
        spark.createDataFrame(expected, "txid long, op string, visible boolean"),
    )
    for txid, _, visible in expected:
        if txid is not None:
            assert snap.is_visible(txid) is visible


def test_snapshot_reads_are_always_visible(spark):
    snap = parse_snapshot("100:105:101")
    rows = [(101, "r"), (500, "r"), (None, "r"), (101, "u"), (500, "c"), (102, None)]
    expected = [
        (101, "r", True),
        (500, "r", True),
        (None, "r", True),
        (101, "u", False),
        (500, "c", False),
        (102, None, True),
    ]
    assertDataFrameEqual(
        visibility_frame(spark, rows, snap, with_op=True),
        spark.createDataFrame(expected, "txid long, op string, visible boolean"),
    )


def test_empty_xip(spark):
    snap = parse_snapshot("748:748:")
    assertDataFrameEqual(
        visibility_frame(spark, [(747, "u"), (748, "u")], snap),
        spark.createDataFrame([(747, "u", True), (748, "u", False)], "txid long, op string, visible boolean"),
    )


def test_widening_across_wraparound(spark):
    # The counter has wrapped once: xmax is in epoch 1.
    snap = PgSnapshot(EPOCH + 50, EPOCH + 100, (EPOCH + 60,))
    cases = [
        (4294967000, 4294967000, True),  # 32-bit id from just before the wrap: previous epoch
        (40, EPOCH + 40, True),  # after the wrap, below xmin
        (60, EPOCH + 60, False),  # in progress
        (70, EPOCH + 70, True),
        (100, EPOCH + 100, False),  # xmax
        (150, EPOCH + 150, False),  # started after the snapshot: stays after xmax
        (EPOCH + 70, EPOCH + 70, True),  # already 64-bit (snapshot-phase txId)
        (EPOCH + 60, EPOCH + 60, False),
    ]
    df = spark.createDataFrame([(c[0],) for c in cases], "txid long")
    actual = df.select(
        "txid",
        widen_xid(F.col("txid"), snap).alias("full"),
        visible_in_snapshot("txid", snap).alias("visible"),
    )
    assertDataFrameEqual(actual, spark.createDataFrame(cases, "txid long, full long, visible boolean"))
    for xid, full, visible in cases:
        assert snap.widen(xid) == full
        assert snap.is_visible(xid) is visible


def test_widening_just_before_a_wrap(spark):
    # xmax near the top of epoch 0; a transaction started after the snapshot already wrapped to epoch 1.
    snap = PgSnapshot(EPOCH - 20, EPOCH - 10, (EPOCH - 15,))
    cases = [
        (EPOCH - 30, EPOCH - 30, True),
        (EPOCH - 15, EPOCH - 15, False),
        (EPOCH - 12, EPOCH - 12, True),
        (EPOCH - 5, EPOCH - 5, False),
        (5, EPOCH + 5, False),  # 32-bit id after the wrap: next epoch, not a very old transaction
    ]
    df = spark.createDataFrame([(c[0],) for c in cases], "txid long")
    actual = df.select(
        "txid",
        widen_xid(F.col("txid"), snap).alias("full"),
        visible_in_snapshot("txid", snap).alias("visible"),
    )
    assertDataFrameEqual(actual, spark.createDataFrame(cases, "txid long, full long, visible boolean"))
    for xid, full, visible in cases:
        assert snap.widen(xid) == full
        assert snap.is_visible(xid) is visible


def test_widening_in_epoch_zero_never_goes_negative():
    snap = PgSnapshot(1000, 1010, ())
    assert snap.widen(4294967000) == 4294967000
    assert not snap.is_visible(4294967000)
    assert snap.widen(999) == 999
    assert snap.is_visible(999)


DAY_MS = 24 * 3600 * 1000


def test_a_streamed_xid_of_an_earlier_epoch_is_placed_by_its_commit_time(spark):
    # xmax in epoch 2; the topic still holds events of epochs 0 and 1 (a full rescan of a compacted
    # topic). Their low 32 bits alone read as running or later transactions; their commit times, days
    # before the snapshot, place them in an earlier epoch. Transactions that committed after the
    # snapshot's start keep their reading.
    taken = 1_790_000_000_000
    snap = PgSnapshot(2 * EPOCH + 900, 2 * EPOCH + 1000, (2 * EPOCH + 950,), taken_at_ms=taken)
    cases = [
        (1500, taken - 3 * DAY_MS, True),  # 1 * 2^32 + 1500: an earlier epoch, committed days before
        (1500, taken + 5_000, False),  # started after the snapshot (2 * 2^32 + 1500)
        (1500, taken - 60_000, False),  # a minute before: within the margin, judged by its bits
        (950, taken - 2 * DAY_MS, True),  # the low bits of a running transaction, days before it
        (950, taken + 1_000, False),  # the running transaction itself, committed after the snapshot
        (800, taken - 2 * DAY_MS, True),  # visible either way
        (1500, None, False),  # no commit time: the low bits alone
        (2 * EPOCH + 1500, taken - 3 * DAY_MS, False),  # a 64-bit id is exact
    ]
    df = spark.createDataFrame([c[:2] for c in cases], "txid long, committed long")
    actual = df.select("txid", "committed", visible_in_snapshot("txid", snap, commit_ms="committed").alias("visible"))
    assertDataFrameEqual(actual, spark.createDataFrame(cases, "txid long, committed long, visible boolean"))
    for xid, committed, visible in cases:
        assert snap.is_visible(xid, committed) is visible
    # without the snapshot's start time nothing changes
    assert not PgSnapshot(snap.xmin, snap.xmax, snap.xip).is_visible(1500, taken - 3 * DAY_MS)


def test_the_snapshot_start_is_read_with_the_snapshot():
    from datetime import UTC, datetime

    taken = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
    snap = parse_snapshot("100:105:101", taken)
    assert snap.taken_at_ms == round(taken.timestamp() * 1000)
    assert (snap.xmin, snap.xmax, snap.xip) == (100, 105, (101,))
