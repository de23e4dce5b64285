"""Publishing the fold: a MERGE of the changed keys commits what a full overwrite would, writing less."""

from __future__ import annotations

from deltalake import DeltaTable
from pyspark.testing import assertDataFrameEqual

from cdc_reconcile import storage
from cdc_reconcile.column_lineage import ATTNUM_KEY, COMMENT_KEY, PG_TYPE_KEY, ColumnLineage
from cdc_reconcile.compaction import fold_table, mark_duplicates, snapshot_resets
from cdc_reconcile.debezium.pgtypes import stored_encoding
from cdc_reconcile.publication import FoldInputs, publish_fold
from tests.support.frames import ITEMS_KEY, ITEMS_SPEC, item_changes, item_event, item_truncate, typed_changelog
from tests.support.lake import delta_rows, duckdb_rows

ROWS = 400


def changelog(spark, rows, spec=ITEMS_SPEC):
    marked = mark_duplicates(item_changes(spark, rows))
    typed, quarantined = typed_changelog(marked, spec, ITEMS_KEY)
    assert quarantined.count() == 0
    return typed


def inputs(spark, location, log, *, previous_version, latest=None):
    previous = None if previous_version is None else storage.read(spark, location, previous_version)
    return FoldInputs(
        changelog=log,
        spec=ITEMS_SPEC,
        key=ITEMS_KEY,
        previous=previous,
        base=previous_version,
        latest=previous_version if latest is None else latest,
        resets=snapshot_resets(log),
    )


def seeded(spark, location):
    """A first run: ROWS inserts, published as the table's first commit (an overwrite)."""
    rows = [
        item_event(i, "c", i, {"id": i, "name": f"n{i}", "qty": i}, txid=100 + i, lsn=1000 + i) for i in range(ROWS)
    ]
    commit, how = publish_fold(
        inputs(spark, location, changelog(spark, rows), previous_version=None), location, "r1", full_rescan=False
    )
    assert how.startswith("overwrite") and commit.version == 0
    return commit


def hour(offset=ROWS):
    """The next range: 4 updates, 2 deletes, 2 inserts (2 % of the keys)."""
    return [
        *(
            item_event(offset + i, "u", i, {"id": i, "name": f"u{i}", "qty": -i}, {"id": i}, txid=900 + i, lsn=9000 + i)
            for i in range(4)
        ),
        item_event(offset + 4, "d", 10, None, {"id": 10, "name": "n10", "qty": 10}, txid=910, lsn=9010),
        item_event(offset + 5, "d", 11, None, {"id": 11, "name": "n11", "qty": 11}, txid=911, lsn=9011),
        item_event(offset + 6, "c", 5000, {"id": 5000, "name": "new", "qty": 1}, txid=920, lsn=9020),
        item_event(offset + 7, "c", 5001, {"id": 5001, "name": "new", "qty": 2}, txid=921, lsn=9021),
    ]


def test_a_merge_commits_the_full_fold_and_writes_only_the_changed_rows(spark, tmp_path):
    location = str(tmp_path / "table")
    first = seeded(spark, location)
    log = changelog(spark, hour())
    expected = fold_table(log, ITEMS_SPEC, ITEMS_KEY, previous=storage.read(spark, location, 0))

    commit, how = publish_fold(inputs(spark, location, log, previous_version=0), location, "r2", full_rescan=False)

    assert how == "merge" and commit.metadata["base_version"] == 0
    assertDataFrameEqual(storage.read(spark, location), expected)
    assert commit.rows_written == 6, commit.metrics  # 4 updated, 2 inserted; nothing copied
    assert commit.bytes_written < first.bytes_written, (commit.bytes_written, first.bytes_written)
    # other readers see the same rows through the deletion vectors: delta-rs, and DuckDB's Delta extension
    assert len(delta_rows(location, columns=["id"])) == ROWS - 2 + 2
    spark_rows = {(r.id, r.name, r.qty) for r in spark.read.format("delta").load(location).collect()}
    assert set(duckdb_rows(location, "SELECT id, name, qty FROM lake")) == spark_rows
    assert duckdb_rows(location, "SELECT name, qty FROM lake WHERE id IN (0, 10, 5000) ORDER BY id") == [
        ("u0", 0),
        ("new", 1),
    ]


def test_publishing_again_restores_what_the_runs_earlier_commit_changed(spark, tmp_path):
    """A re-run whose changelog lost a change (a resolved duplicate) still ends at the full fold of its base."""
    location = str(tmp_path / "table")
    seeded(spark, location)
    full = changelog(spark, hour())
    publish_fold(inputs(spark, location, full, previous_version=0), location, "r2", full_rescan=False)
    fewer = full.filter("offset != 404")  # the delete of key 10 is no longer in the changelog

    commit, how = publish_fold(
        inputs(spark, location, fewer, previous_version=0, latest=1), location, "r2", full_rescan=False
    )

    assert how == "merge" and commit.version == 2
    assertDataFrameEqual(
        storage.read(spark, location),
        fold_table(fewer, ITEMS_SPEC, ITEMS_KEY, previous=storage.read(spark, location, 0)),
    )
    assert 10 in {r["id"] for r in delta_rows(location, columns=["id"])}


def test_a_truncate_is_written_as_an_overwrite(spark, tmp_path):
    location = str(tmp_path / "table")
    seeded(spark, location)
    log = changelog(
        spark,
        [
            item_truncate(ROWS, txid=950, lsn=9500),
            item_event(ROWS + 1, "c", 7, {"id": 7, "name": "x", "qty": 1}, txid=951, lsn=9501),
        ],
    )
    _, how = publish_fold(inputs(spark, location, log, previous_version=0), location, "r2", full_rescan=False)
    assert how == "overwrite: a truncate empties the table"
    assert [r["id"] for r in storage.read(spark, location).collect()] == [7]


def test_the_table_describes_a_time_column_to_other_readers(spark, tmp_path):
    """A time lands as int64 microseconds; delta-rs (no Spark) reads its PostgreSQL type and encoding."""
    location = str(tmp_path / "table")
    spec = {**ITEMS_SPEC, "opens": "time without time zone"}
    lineage = ColumnLineage.of([{"name": n, "type": t, "attnum": i} for i, (n, t) in enumerate(spec.items(), 1)])
    first = changelog(spark, [item_event(0, "c", 1, {"id": 1, "name": "a", "qty": 1, "opens": 34_200_000_000})], spec)
    commit, how = publish_fold(
        FoldInputs(first, spec, ITEMS_KEY, None, None, None, snapshot_resets(first), lineage=lineage),
        location,
        "r1",
        full_rescan=False,
    )
    assert how.startswith("overwrite") and commit.version == 0
    update = {"id": 1, "name": "b", "qty": 2, "opens": 34_200_500_000}
    second = changelog(spark, [item_event(1, "u", 1, update, txid=101, lsn=1001)], spec)
    previous = storage.read(spark, location, 0)
    _, how = publish_fold(
        FoldInputs(second, spec, ITEMS_KEY, previous, 0, 0, snapshot_resets(second), lineage=lineage),
        location,
        "r2",
        full_rescan=False,
    )
    assert how == "merge"  # a merge keeps the descriptions the overwrite wrote

    fields = {f.name: f.metadata for f in DeltaTable(location).schema().fields}
    assert fields["opens"] == {
        ATTNUM_KEY: 4,
        PG_TYPE_KEY: "time without time zone",
        COMMENT_KEY: stored_encoding("time"),
    }
    assert fields["name"] == {ATTNUM_KEY: 2, PG_TYPE_KEY: "text"}
    assert delta_rows(location, columns=["id", "opens"]) == [{"id": 1, "opens": 34_200_500_000}]  # 09:30:00.5
    assertDataFrameEqual(
        storage.read(spark, location).select("id", "name", "opens"),
        spark.createDataFrame([(1, "b", 34_200_500_000)], "id long, name string, opens long"),
    )
