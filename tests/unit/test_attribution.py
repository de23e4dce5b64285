"""Where each difference arose: the lake's row against the topic's last word on the key, and the
published table against the lake as of the snapshot."""

from __future__ import annotations

from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from cdc_reconcile.attribution import (
    IN_LAKE,
    SOURCE_TO_TOPIC,
    STAGES,
    TOPIC_TO_LAKE,
    attribute,
    changed_after_snapshot,
    lake_drift,
    reset_lsn,
    topic_changes,
    topic_words,
)
from cdc_reconcile.compaction import fold_table, mark_duplicates
from cdc_reconcile.debezium.envelope import split_envelopes, tag_envelopes
from cdc_reconcile.diff import EXTRA, MISSING, STALE, diff_rows, lake_as_of
from cdc_reconcile.repair import audit_rows
from cdc_reconcile.suite import STAGE_COLUMNS
from cdc_reconcile.visibility import PgSnapshot
from tests.support.frames import (
    ITEMS_KEY,
    ITEMS_SPEC,
    back_in_an_earlier_partition,
    item_changes,
    item_event,
    item_truncate,
    items,
    raw_records,
    redelivered_to_a_lower_partition,
    typed_changelog,
)

COLUMNS = list(ITEMS_SPEC)
SNAPSHOT = PgSnapshot(200, 210, ())
KEY_SPEC = {"id": "bigint"}


def item(key: int, qty: int) -> dict:
    return {"id": key, "name": f"n{key}", "qty": qty}


def changelog_of(spark, records):
    changelog, quarantined = typed_changelog(mark_duplicates(item_changes(spark, records)), ITEMS_SPEC, ITEMS_KEY)
    assert quarantined.count() == 0
    return changelog


def bronze(spark, records):
    """The range's ``events`` as compaction stores them: every parsed record, duplicates included."""
    parsed, bad = split_envelopes(tag_envelopes(raw_records(spark, records), schemas=False))
    assert bad.count() == 0
    return parsed


def stages_of(spark, earlier, records, lake_records, source_rows):
    """(key, kind, stage) of the differences when the lake folded ``lake_records`` of the range ``records``."""
    previous = fold_table(changelog_of(spark, earlier), ITEMS_SPEC, ITEMS_KEY)
    as_of = lake_as_of(changelog_of(spark, lake_records), SNAPSHOT, ITEMS_SPEC, ITEMS_KEY, previous=previous)
    source = items(spark, source_rows)
    changes = topic_changes(bronze(spark, records), "public.items", ITEMS_KEY, KEY_SPEC)
    words = topic_words(changes, SNAPSHOT, ITEMS_KEY)
    diff = diff_rows(as_of, source, ITEMS_KEY, COLUMNS)
    attributed = attribute(diff, as_of, previous, words, ITEMS_KEY, reset=reset_lsn(changes, SNAPSHOT))
    return attributed.select("id", "kind", "stage")


def test_a_lost_event_is_the_sources_and_a_change_the_lake_dropped_is_the_lakes(spark):
    earlier = [
        item_event(0, "c", 1, item(1, 1), txid=150, lsn=10),
        item_event(1, "c", 3, item(3, 3), txid=151, lsn=11),
        item_event(2, "c", 4, item(4, 4), txid=152, lsn=12),
    ]
    updated_1 = item_event(10, "u", 1, item(1, 2), {"id": 1}, txid=201, lsn=20)
    updated_1_again = item_event(11, "u", 1, item(1, 7), {"id": 1}, txid=204, lsn=24)
    updated_3 = item_event(12, "u", 3, item(3, 9), {"id": 3}, txid=203, lsn=22)
    redelivered_1 = (*updated_1[:2], 13, *updated_1[3:])  # the first update again, at a later offset
    records = [updated_1, updated_1_again, updated_3, redelivered_1]
    # the lake lost two changes it had: key 1's second update and key 3's update
    lake_records = [updated_1, redelivered_1]
    # the source changed key 4 and inserted key 5, and neither change reached the topic
    source = [(1, "n1", 7), (3, "n3", 9), (4, "n4", 40), (5, "n5", 5)]
    found = stages_of(spark, earlier, records, lake_records, source)
    expected = [
        Row(id=1, kind=STALE, stage=TOPIC_TO_LAKE),  # the redelivered copy is not the topic's last word
        Row(id=3, kind=STALE, stage=TOPIC_TO_LAKE),
        Row(id=4, kind=STALE, stage=SOURCE_TO_TOPIC),
        Row(id=5, kind=MISSING, stage=SOURCE_TO_TOPIC),
    ]
    assertDataFrameEqual(found, expected)


def test_deletes_and_truncates_are_the_topics_word_that_a_key_is_gone(spark):
    earlier = [item_event(0, "c", 6, item(6, 6), txid=150, lsn=10), item_event(1, "c", 7, item(7, 7), txid=151, lsn=11)]
    deleted_6 = item_event(10, "d", 6, None, {"id": 6}, txid=201, lsn=20)
    truncated = item_truncate(11, txid=202, lsn=21)
    inserted_8 = item_event(12, "c", 8, item(8, 8), txid=203, lsn=22)
    records = [deleted_6, truncated, inserted_8]
    # the source has 6 and 7 again (their inserts never reached the topic): the lake followed the topic
    followed = stages_of(spark, earlier, records, records, [(6, "n6", 6), (7, "n7", 7), (8, "n8", 8)])
    assertDataFrameEqual(
        followed, [Row(id=6, kind=MISSING, stage=SOURCE_TO_TOPIC), Row(id=7, kind=MISSING, stage=SOURCE_TO_TOPIC)]
    )
    # the lake lost the truncate: key 7 stayed though the topic said the table was emptied
    kept_7 = stages_of(spark, earlier, records, [deleted_6, inserted_8], [(8, "n8", 8)])
    assertDataFrameEqual(kept_7, [Row(id=7, kind=EXTRA, stage=TOPIC_TO_LAKE)])


def test_a_published_table_another_writer_changed_differs_in_the_lake_stage(spark):
    earlier = [item_event(0, "c", k, item(k, k), txid=150, lsn=10 + k) for k in (1, 2, 3, 4)]
    previous = fold_table(changelog_of(spark, earlier), ITEMS_SPEC, ITEMS_KEY)
    range_records = [
        item_event(10, "u", 1, item(1, 10), {"id": 1}, txid=201, lsn=20),
        item_event(11, "u", 4, item(4, 40), {"id": 4}, txid=215, lsn=30),  # after the snapshot
    ]
    changelog = changelog_of(spark, range_records)
    as_of = lake_as_of(changelog, SNAPSHOT, ITEMS_SPEC, ITEMS_KEY, previous=previous)
    source = items(spark, [(1, "n1", 10), (2, "n2", 2), (3, "n3", 3), (4, "n4", 4)])
    published = fold_table(changelog, ITEMS_SPEC, ITEMS_KEY, previous=previous)
    # another writer deleted key 2 and changed key 3 after the run's commit
    tampered = published.filter(F.col("id") != 2).withColumn(
        "qty", F.when(F.col("id") == 3, F.lit(33)).otherwise(F.col("qty"))
    )
    later = changed_after_snapshot(changelog, SNAPSHOT, ITEMS_KEY)
    assertDataFrameEqual(later, [Row(id=4)])
    differing = diff_rows(as_of, source, ITEMS_KEY, COLUMNS)
    assert differing.count() == 0, "the fold the check sees is right: only the published table is not"
    drift = lake_drift(tampered, as_of, source, ITEMS_KEY, COLUMNS, changed_after=later, differing=differing)
    assertDataFrameEqual(
        drift.select("id", "kind", "stage"),
        [Row(id=2, kind=MISSING, stage=IN_LAKE), Row(id=3, kind=STALE, stage=IN_LAKE)],
    )
    untouched = lake_drift(published, as_of, source, ITEMS_KEY, COLUMNS, changed_after=later, differing=differing)
    assert untouched.count() == 0, "key 4 changed after the snapshot: the published table may differ there"
    audit = audit_rows(drift, None, ITEMS_KEY, run_id="r", table_name="public.items", dry_run=True)
    assert sorted((r["key"], r["stage"]) for r in audit.collect()) == [('{"id":2}', IN_LAKE), ('{"id":3}', IN_LAKE)]


def test_a_truncate_after_the_snapshot_leaves_no_key_to_compare(spark):
    changelog = changelog_of(spark, [item_truncate(5, txid=230, lsn=50)])
    assert changed_after_snapshot(changelog, SNAPSHOT, ITEMS_KEY) is None


def test_every_stage_has_its_expectation_column():
    assert set(STAGE_COLUMNS) == set(STAGES)


def test_a_redelivery_to_a_lower_numbered_partition_is_not_the_topics_last_word(spark):
    changes = topic_changes(bronze(spark, redelivered_to_a_lower_partition()), "public.items", ITEMS_KEY, KEY_SPEC)
    words = topic_words(changes, PgSnapshot(1100, 1110, ()), ITEMS_KEY)
    assertDataFrameEqual(
        words.select("id", "word.op", "word.source_txid", "word.source_lsn"),
        [Row(id=1, op="u", source_txid=103, source_lsn=1003)],
    )


def test_the_topics_last_word_on_a_key_back_in_a_partition_it_left_is_its_newest_run(spark):
    changes = topic_changes(bronze(spark, back_in_an_earlier_partition()), "public.items", ITEMS_KEY, KEY_SPEC)
    words = topic_words(changes, PgSnapshot(1100, 1110, ()), ITEMS_KEY)
    assertDataFrameEqual(
        words.select("id", "word.op", "word.source_lsn"),
        [Row(id=1, op="u", source_lsn=1003), Row(id=2, op="c", source_lsn=1006)],
    )


def test_a_key_named_with_a_dot_is_attributed_by_its_exact_name(spark):
    """``order.id`` is one column, not the field ``id`` of a struct ``order``."""
    key = ["order.id"]
    diff = spark.createDataFrame(
        [(1, STALE, "a", "b")], "`order.id` bigint, kind string, lake_hash string, source_hash string"
    )
    as_of = spark.createDataFrame(
        [(1, "u", 201, 20)], "`order.id` bigint, _cdc_op string, _cdc_txid bigint, _cdc_lsn bigint"
    )
    words = spark.createDataFrame(
        [(1, ("u", 201, 20))], "`order.id` bigint, word struct<op:string,source_txid:bigint,source_lsn:bigint>"
    )
    attributed = attribute(diff, as_of, None, words, key)
    assert attributed.columns == ["order.id", "kind", "lake_hash", "source_hash", "stage"]
    assertDataFrameEqual(attributed.select("`order.id`", "stage"), [Row(**{"order.id": 1, "stage": SOURCE_TO_TOPIC})])
