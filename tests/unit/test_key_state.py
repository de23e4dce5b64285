"""The per-key state classifies duplicates across ranges as reading every earlier range would."""

from __future__ import annotations

from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from cdc_reconcile import key_state, storage
from cdc_reconcile.compaction import REDELIVERY, SNAPSHOT_RERUN, mark_duplicates, snapshot_resets
from tests.support.frames import ITEMS_KEY, ITEMS_SPEC, item_changes, item_event, item_truncate, typed_changelog

RANGES = [
    [  # an initial snapshot round (txid 50) interrupted before its last record, then streaming
        item_event(0, "r", 1, {"id": 1, "name": "a", "qty": 1}, snapshot="first", txid=50, lsn=900),
        item_event(1, "r", 2, {"id": 2, "name": "b", "qty": 2}, snapshot="true", txid=50, lsn=900),
        item_event(2, "u", 1, {"id": 1, "name": "a1", "qty": 1}, {"id": 1}, txid=101, lsn=1001),
        item_event(3, "u", 1, {"id": 1, "name": "a2", "qty": 1}, {"id": 1}, txid=102, lsn=1002),
        item_event(4, "c", 3, {"id": 3, "name": "c", "qty": 3}, txid=103, lsn=1003),
    ],
    [  # a crash without EOS: the last three changes come again, then new ones; a truncate
        item_event(5, "u", 1, {"id": 1, "name": "a1", "qty": 1}, {"id": 1}, txid=101, lsn=1001),
        item_event(6, "u", 1, {"id": 1, "name": "a2", "qty": 1}, {"id": 1}, txid=102, lsn=1002),
        item_event(7, "c", 3, {"id": 3, "name": "c", "qty": 3}, txid=103, lsn=1003),
        item_event(8, "d", 2, None, {"id": 2, "name": "b", "qty": 2}, txid=104, lsn=1004),
        item_truncate(9, txid=105, lsn=1005),
        item_event(10, "c", 4, {"id": 4, "name": "d", "qty": 4}, txid=106, lsn=1006),
    ],
    [  # the truncate redelivered; a snapshot round re-run (txid 60) for keys 1 and 4, and a read redelivered
        item_truncate(11, txid=105, lsn=1005),
        item_event(12, "r", 1, {"id": 1, "name": "a2", "qty": 1}, snapshot="first", txid=60, lsn=2000),
        item_event(13, "r", 4, {"id": 4, "name": "d", "qty": 4}, snapshot="last", txid=60, lsn=2000),
        item_event(14, "r", 4, {"id": 4, "name": "d", "qty": 4}, snapshot="last", txid=60, lsn=2000),
        item_event(15, "u", 4, {"id": 4, "name": "d2", "qty": 4}, {"id": 4}, txid=107, lsn=1007),
    ],
]


def classes(marked):
    return marked.select("offset", "duplicate_class").orderBy("offset")


def test_the_state_classifies_each_range_as_the_whole_history_does(spark, tmp_path):
    location = str(tmp_path / "key_state")
    seen = None
    for number, rows in enumerate(RANGES):
        events = item_changes(spark, rows)
        version = storage.latest_version(spark, location)  # pinned, as a run reads its predecessor's state
        state = None if version is None else storage.read(spark, location, version)
        by_state = mark_duplicates(events, state=state)
        by_history = mark_duplicates(events, seen)
        assert classes(by_state).collect() == classes(by_history).collect(), number
        key_state.commit(spark, location, f"run-{number}", by_state, base=None, rebuild=False)
        seen = events if seen is None else seen.unionByName(events)
    last = {r["offset"]: r["duplicate_class"] for r in classes(by_state).collect()}
    # key 4 was never read by the first round: 60 is its first round, and its second read a redelivery
    assert last == {11: REDELIVERY, 12: SNAPSHOT_RERUN, 13: None, 14: REDELIVERY, 15: None}


def test_a_round_after_a_round_completed_in_an_earlier_range_is_no_rerun(spark, tmp_path):
    location = str(tmp_path / "key_state")
    complete = [
        item_event(0, "r", 1, {"id": 1, "name": "a", "qty": 1}, snapshot="first", txid=50, lsn=900),
        item_event(1, "r", 2, {"id": 2, "name": "b", "qty": 2}, snapshot="last_in_data_collection", txid=50, lsn=900),
    ]
    again = [
        item_event(2, "r", 1, {"id": 1, "name": "a", "qty": 1}, snapshot="first", txid=60, lsn=950),
        item_event(3, "r", 2, {"id": 2, "name": "b", "qty": 2}, snapshot="last", txid=60, lsn=950),
    ]
    key_state.commit(spark, location, "run-0", mark_duplicates(item_changes(spark, complete)), base=None, rebuild=False)
    state = storage.read(spark, location, storage.latest_version(spark, location))
    marked = mark_duplicates(item_changes(spark, again), state=state)
    assert [r["duplicate_class"] for r in classes(marked).collect()] == [None, None]


def test_applying_a_range_twice_changes_nothing(spark, tmp_path):
    location = str(tmp_path / "key_state")
    once = mark_duplicates(item_changes(spark, RANGES[0]))
    key_state.commit(spark, location, "run-0", once, base=None, rebuild=False)
    first = storage.read(spark, location).collect()
    key_state.commit(spark, location, "run-0", once, base=0, rebuild=False)
    assertDataFrameEqual(storage.read(spark, location), first)


def test_rounds_already_folded_reset_nothing_again(spark, tmp_path):
    location = str(tmp_path / "key_state")
    marked = mark_duplicates(item_changes(spark, RANGES[0]))
    key_state.commit(spark, location, "run-0", marked, base=None, rebuild=False)
    rounds = key_state.rounds_history(storage.read(spark, location))
    assert [(r["partition"], r["source_txid"]) for r in rounds.collect()] == [(0, 50)]
    continued = mark_duplicates(
        item_changes(
            spark, [item_event(20, "r", 9, {"id": 9, "name": "z", "qty": 9}, snapshot="last", txid=50, lsn=900)]
        )
    )
    changelog, _ = typed_changelog(continued, ITEMS_SPEC, ITEMS_KEY)
    assert snapshot_resets(changelog, rounds).count() == 0
    assert snapshot_resets(changelog).filter(F.col("reset_offset") == 20).count() == 1
