"""Source column names holding a dot, a space or a backtick: taken as names through fold, diff, repair and storage."""

from __future__ import annotations

import json

from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual

from cdc_reconcile import names, storage
from cdc_reconcile.compaction import fold_table, mark_duplicates
from cdc_reconcile.debezium.pgtypes import table_schema
from cdc_reconcile.diff import EXTRA, MISSING, STALE, diff_rows, duplicate_keys, lake_as_of, summarise, visible_changes
from cdc_reconcile.repair import audit_rows, repair_events, resolve_duplicates
from cdc_reconcile.visibility import PgSnapshot
from tests.support.frames import ITEMS_TOPIC as TOPIC
from tests.support.frames import item_changes as parsed
from tests.support.frames import typed_changelog

SPEC = {"order.id": "bigint", "line no": "integer", "unit price": "double precision", "note`s.text": "text"}
KEY = ("order.id", "line no")
COLUMNS = list(SPEC)
SNAPSHOT = PgSnapshot(100, 110, ())


def change(offset, op, order_id, line_no, price=None, note=None, txid=90):
    """One Debezium record (schemas off) of a table whose column names need quoting."""
    image = {"order.id": order_id, "line no": line_no, "unit price": price, "note`s.text": note}
    value = {
        "before": image if op == "d" else None,
        "after": None if op == "d" else image,
        "op": op,
        "ts_ms": 1,
        "source": {"txId": txid, "lsn": offset, "snapshot": "false", "table": "items", "schema": "public", "ts_ms": 1},
    }
    key = {"order.id": order_id, "line no": line_no}
    return (TOPIC, 0, offset, json.dumps(key).encode(), json.dumps(value).encode())


def rows(spark, values):
    return spark.createDataFrame(values, table_schema(SPEC))


def changelog_of(spark, records):
    changelog, quarantined = typed_changelog(mark_duplicates(parsed(spark, records)), SPEC, KEY)
    assert quarantined.count() == 0
    return changelog


def test_fold_diff_and_repair_take_dotted_and_spaced_names_as_names(spark):
    changelog = changelog_of(
        spark,
        [
            change(0, "c", 1, 1, 1.5, "a"),
            change(1, "c", 1, 2, 2.0, "b"),
            change(2, "u", 1, 1, 3.25, "a2"),
            change(3, "c", 2, 1, 9.0, "ghost"),
            change(4, "d", 1, 2),
        ],
    )
    table = fold_table(changelog, SPEC, KEY)
    assertDataFrameEqual(table.select(*names.columns(COLUMNS)), rows(spark, [(1, 1, 3.25, "a2"), (2, 1, 9.0, "ghost")]))
    assert duplicate_keys(table, KEY).count() == 0

    source = rows(spark, [(1, 1, 3.25, "fixed"), (3, 1, 1.0, "lost")])
    as_of = lake_as_of(changelog, SNAPSHOT, SPEC, KEY)
    diff = diff_rows(as_of, source, KEY, COLUMNS)
    assertDataFrameEqual(
        diff.select(*names.columns(KEY), "kind"),
        [
            Row(**{"order.id": 1, "line no": 1, "kind": STALE}),
            Row(**{"order.id": 2, "line no": 1, "kind": EXTRA}),
            Row(**{"order.id": 3, "line no": 1, "kind": MISSING}),
        ],
    )
    report = summarise(diff, as_of, source, KEY)
    assert report.samples[MISSING] == [{"order.id": 3, "line no": 1}]

    repairs = repair_events(diff, source, visible_changes(changelog, SNAPSHOT), SPEC, KEY)
    repaired = changelog.unionByName(repairs)
    assert diff_rows(lake_as_of(repaired, SNAPSHOT, SPEC, KEY), source, KEY, COLUMNS).count() == 0
    audit = audit_rows(diff, None, KEY, run_id="run-1", table_name="public.items", dry_run=False)
    assert sorted(json.loads(r["key"])["order.id"] for r in audit.collect()) == [1, 2, 3]
    assert {r["key"] for r in repairs.collect()} >= {'{"order.id":1,"line no":1}'}
    assertDataFrameEqual(resolve_duplicates(changelog), changelog)


def test_incremental_fold_and_storage_keep_the_names(spark, tmp_path):
    first = changelog_of(spark, [change(0, "c", 1, 1, 1.5, "a"), change(1, "c", 1, 2, 2.0, "b")])
    previous = fold_table(first, SPEC, KEY)
    storage.publish(previous, tmp_path / "table", "v1", sort_by=list(KEY))
    published = storage.read(spark, tmp_path / "table")
    assert published.columns == [*COLUMNS, *previous.columns[len(COLUMNS) :]]

    second = changelog_of(spark, [change(2, "u", 1, 2, 2.5, None, txid=95)])
    table = fold_table(second, SPEC, KEY, previous=published).select(*names.columns(COLUMNS))
    assertDataFrameEqual(table, rows(spark, [(1, 1, 1.5, "a"), (1, 2, 2.5, None)]))


def test_a_merge_publication_takes_the_names_as_names(spark, tmp_path):
    from cdc_reconcile.compaction import snapshot_resets
    from cdc_reconcile.publication import FoldInputs, publish_fold

    location = str(tmp_path / "table")
    first = changelog_of(spark, [change(0, "c", 1, 1, 1.5, "a"), change(1, "c", 1, 2, 2.0, "b")])
    publish_fold(
        FoldInputs(first, SPEC, KEY, None, None, None, snapshot_resets(first)), location, "r1", full_rescan=False
    )
    second = changelog_of(spark, [change(2, "u", 1, 2, 2.5, None, txid=95), change(3, "d", 1, 1, txid=96)])
    previous = storage.read(spark, location, 0)
    inputs = FoldInputs(second, SPEC, KEY, previous, 0, 0, snapshot_resets(second))
    commit, how = publish_fold(inputs, location, "r2", full_rescan=False)
    assert how == "merge" and commit.version == 1
    assertDataFrameEqual(
        storage.read(spark, location).select(*names.columns(COLUMNS)), rows(spark, [(1, 2, 2.5, None)])
    )
