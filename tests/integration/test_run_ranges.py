"""Offset ranges across runs on the real stack, while the loader writes: no change is lost between runs.

* A run whose ``compact_cdc`` failed must not leave a hole: its events reach the lake before the next
  range is read, and are never reported as differences of the source.
* A snapshot taken again after the seal (``snapshot_source`` and everything downstream cleared) must
  be checked against a range that holds every change it saw.

Rows the tests write themselves (a marker name, inserted after the loader started, which only
touches its own rows) are compared with PostgreSQL directly, not through the pipeline's diff.
"""

from __future__ import annotations

import dataclasses
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from pyspark.sql import functions as F

from cdc_dev.loader import run_loader
from cdc_reconcile import state_store
from cdc_reconcile.config import Retention, load_config
from cdc_reconcile.errors import InputError
from cdc_reconcile.lake import TableLake, run_partition
from cdc_reconcile.retention import RunExpired
from tests.support.lake import delta_rows, versions

from .conftest import run_once, table_run

pytestmark = pytest.mark.integration

TABLE = load_config().table("public.customers")


@pytest.fixture(scope="module")
def loader(stack, config) -> Iterator[None]:
    """The demo loader, writing to customers all through the module."""
    stop, failure = threading.Event(), []

    def load() -> None:
        try:
            run_loader(config.pg_dsn, rate=20, stop=stop, tables=("customers",), seed=23)
        except Exception as exc:  # reported by the fixture, not lost in the thread
            failure.append(exc)

    thread = threading.Thread(target=load, name="loader", daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(timeout=60)
    assert not failure, f"the loader failed: {failure[0]!r}"


def write_marked_rows(pg: psycopg.Connection, count: int = 30) -> str:
    """Insert ``count`` rows under a new marker name and update a third of them; return the marker."""
    marker = f"ranges-{uuid.uuid4().hex[:8]}"
    with pg.transaction():
        ids = [
            r[0]
            for r in pg.execute(
                "INSERT INTO public.customers (name, balance) SELECT %s, g FROM generate_series(1, %s) g RETURNING id",
                (marker, count),
            )
        ]
    pg.execute("UPDATE public.customers SET balance = balance + 1000 WHERE id = ANY(%s)", (ids[: count // 3],))
    return marker


def assert_lake_holds(spark, lake: Path, pg: psycopg.Connection, marker: str) -> None:
    """The lake table holds the marked rows with the values PostgreSQL has now (nothing else touches them)."""
    source = dict(pg.execute("SELECT id, balance FROM public.customers WHERE name = %s", (marker,)).fetchall())
    table = delta_rows(TableLake(lake, TABLE.name).table, columns=["id", "name", "balance"])
    landed = {r["id"]: r["balance"] for r in table if r["name"] == marker}
    assert landed == source, f"marked rows: {len(source)} in PostgreSQL, {len(landed)} in the lake, or other values"


def test_a_failed_compaction_leaves_no_hole(stack, config, spark, tmp_path, pg, loader, monkeypatch):
    lake = tmp_path / "lake"
    _, report, _ = run_once(spark, config, TABLE, lake, "hole-0")
    assert report.clean, report.as_dict()

    failed = table_run(spark, config, TABLE, lake, "hole-1")
    failed.open()
    marker = write_marked_rows(pg)
    failed.snapshot(partitions=2)
    failed.seal(timeout=180)

    def fold_fails(*args, **kwargs):
        raise RuntimeError("injected: the fold of compact_cdc crashed")

    # after events and changelog were written, as a crash in the fold leaves them
    monkeypatch.setattr(failed, "_publish_fold", fold_fails)
    with pytest.raises(RuntimeError, match="injected"):
        failed.compact()

    # the next hourly run; where the pipeline refuses, the operator does what the message says
    following = table_run(spark, config, TABLE, lake, "hole-2")
    try:
        following.open()
        refusal = None
    except InputError as refused:
        refusal = str(refused)
        cleared = table_run(spark, config, TABLE, lake, "hole-1")
        cleared.compact()
        report, diff = cleared.check()
        diff.unpersist()
        assert report.clean, f"hole-1 after its compact_cdc was cleared: {report.as_dict()}"
        following.open()
    following.snapshot(partitions=2)
    following.seal(timeout=180)
    following.compact()
    report, diff = following.check()
    diff.unpersist()
    assert report.clean, f"hole-1's events, never compacted, reported as source differences: {report.as_dict()}"
    assert_lake_holds(spark, lake, pg, marker)
    assert refusal is not None and "hole-1" in refusal and "compact_cdc" in refusal, refusal


@pytest.mark.slow  # ~3 min; its state-store twin is test_checkpoints' re-seal test: `-m slow` (docs/testing.md)
def test_a_snapshot_taken_again_after_the_seal_is_sealed_again(stack, config, spark, tmp_path, pg, loader):
    lake = tmp_path / "lake"
    _, report, _ = run_once(spark, config, TABLE, lake, "again-0")
    assert report.clean, report.as_dict()

    run = table_run(spark, config, TABLE, lake, "again-1")
    run.open()
    run.snapshot(partitions=2)
    first = run.seal(timeout=180)

    # snapshot_source and everything downstream cleared; the source changed since the seal
    marker = write_marked_rows(pg)
    cleared = table_run(spark, config, TABLE, lake, "again-1")
    cleared.snapshot(partitions=2)
    resealed = cleared.seal(timeout=180)
    cleared.compact()
    report, diff = cleared.check()
    diff.unpersist()
    assert report.clean, f"checked against the range sealed before the snapshot: {report.as_dict()}"
    assert resealed.start == first.start and resealed.watermark_id != first.watermark_id
    assert all(resealed.end[p] >= first.end[p] for p in first.end) and resealed.end != first.end

    events = run_partition(spark, TableLake(lake, TABLE.name).events, "again-1")
    read = {r["partition"]: r["last"] for r in events.groupBy("partition").agg(F.max("offset").alias("last")).collect()}
    assert any(read.get(p, -1) >= first.end[p] for p in first.end), "compaction read only the first seal's range"
    assert all(last < resealed.end[p] for p, last in read.items())
    assert_lake_holds(spark, lake, pg, marker)

    _, report, sealed = run_once(spark, config, TABLE, lake, "again-2")
    assert report.clean, report.as_dict()
    assert sealed.start == resealed.end

    # once a later run opened at its end, the range cannot grow: refused, naming that run
    late = table_run(spark, config, TABLE, lake, "again-1")
    late.snapshot(partitions=2)
    with pytest.raises(InputError, match="again-2"):
        late.seal(timeout=60)


def test_an_older_run_taken_again_reproduces_itself_and_never_moves_the_live_table_back(
    stack, config, spark, tmp_path, pg, loader
):
    """Run N's compact_cdc cleared after run N+1 published: N folds onto its own base, the live table stays N+1's."""
    lake = tmp_path / "lake"
    table = TableLake(lake, TABLE.name).table
    _, report, _ = run_once(spark, config, TABLE, lake, "pin-0")
    assert report.clean, report.as_dict()
    marker = write_marked_rows(pg, count=60)
    _, report, _ = run_once(spark, config, TABLE, lake, "pin-1")
    assert report.clean, report.as_dict()
    pin_1_version = max(v for v, m in versions(table) if m.get("run") == "pin-1")

    ids = [r[0] for r in pg.execute("SELECT id FROM public.customers WHERE name = %s ORDER BY id", (marker,))]
    deleted, updated = ids[:15], ids[15:35]
    pg.execute("DELETE FROM public.customers WHERE id = ANY(%s)", (deleted,))
    pg.execute("UPDATE public.customers SET balance = balance + 7 WHERE id = ANY(%s)", (updated,))
    _, report, _ = run_once(spark, config, TABLE, lake, "pin-2")
    assert report.clean, report.as_dict()
    live_version, live_rows = versions(table)[-1][0], delta_rows(table)

    again = table_run(spark, config, TABLE, lake, "pin-1")
    again.compact()
    report, diff = again.check()
    diff.unpersist()
    assert report.clean, f"pin-1 taken again, checked against its own snapshot: {report.as_dict()}"
    assert versions(table)[-1][0] == live_version, "re-running pin-1 committed to the live table"
    assert sorted(map(repr, delta_rows(table))) == sorted(map(repr, live_rows))
    landed = {r["id"] for r in delta_rows(table, columns=["id"])}
    assert not landed & set(deleted), "rows deleted after pin-1 came back"
    reproduced = {r["id"]: r["balance"] for r in delta_rows(table, columns=["id", "balance"], version=pin_1_version)}
    assert set(deleted) <= set(reproduced), "pin-1's own version lost rows it held"
    assert_lake_holds(spark, lake, pg, marker)


def test_a_full_rescan_stays_one_through_reconcile(stack, config, spark, tmp_path, pg, loader):
    """Reconcile of a full-rescan run re-folds the whole topic alone, never on top of the run's own table."""
    lake = tmp_path / "lake"
    _, report, _ = run_once(spark, config, TABLE, lake, "rescan-0")
    assert report.clean, report.as_dict()
    marker = write_marked_rows(pg)
    run = table_run(spark, config, TABLE, lake, "rescan-1")
    run.open(full_rescan=True)
    run.snapshot(partitions=2)
    run.seal(timeout=180)
    run.compact(full_rescan=True)
    repaired = table_run(spark, config, TABLE, lake, "rescan-1").reconcile()
    assert repaired["repair_events"] == 0, repaired
    report, diff = table_run(spark, config, TABLE, lake, "rescan-1").check()
    diff.unpersist()
    assert report.clean, f"the repaired full rescan folded onto its own table: {report.as_dict()}"
    rescan_commits = [m for _, m in versions(TableLake(lake, TABLE.name).table) if m.get("run") == "rescan-1"]
    assert len(rescan_commits) == 2 and all(m["full_rescan"] for m in rescan_commits), rescan_commits
    assert_lake_holds(spark, lake, pg, marker)


@pytest.mark.slow  # three runs, ~3 min: `-m slow`, to keep the test command under CI's limit
def test_a_run_older_than_the_retention_is_pruned_and_refused_by_name(stack, config, spark, tmp_path, state_db, loader):
    """keep_runs=2: the third run prunes the first from every per-run dataset; re-running it is refused."""
    lake = tmp_path / "lake"
    pipeline = dataclasses.replace(load_config(), retention=Retention(keep_runs=2))
    for run_id in ("keep-0", "keep-1"):
        _, report, _ = run_once(spark, config, TABLE, lake, run_id, pipeline=pipeline)
        assert report.clean, report.as_dict()
    summary, report, _ = run_once(spark, config, TABLE, lake, "keep-2", pipeline=pipeline)
    assert report.clean, report.as_dict()
    assert summary["retention"]["pruned_runs"] == ["keep-0"], summary["retention"]

    datasets = TableLake(lake, TABLE.name)
    for dataset in ("events", "changelog", "snapshot"):
        runs = {r["_cdc_run"] for r in delta_rows(getattr(datasets, dataset), columns=["_cdc_run"])}
        assert runs == {"keep-1", "keep-2"}, (dataset, runs)
    with pytest.raises(RunExpired, match=r"'keep-0' is older than the retention .*keep_runs.* can no longer be re-run"):
        table_run(spark, config, TABLE, lake, "keep-0", pipeline=pipeline).open()
    with state_db.cursor() as cur:
        assert cur.execute(
            "SELECT count(*) FROM cdc_reconcile.pruned_runs WHERE run_name = 'keep-0' AND table_name = %s",
            (TABLE.name,),
        ).fetchone() == (1,)


def test_the_state_has_a_database_of_its_own_and_the_watermark_goes_to_the_source(
    config, spark, tmp_path, pg, state_db, loader
):
    """The stack keeps the run state in ``cdc_state``, apart from the captured ``cdc_demo``, as users may.

    The range and snapshot are recorded in the state database; the watermark row, which must commit
    in the captured database to prove anything about its snapshot, is written there; the captured
    database never gets the ``cdc_reconcile`` schema.
    """
    _, report, sealed = run_once(spark, config, TABLE, tmp_path / "lake", "apart-0")
    assert report.clean, report.as_dict()
    databases = [conn.execute("SELECT current_database()").fetchone()[0] for conn in (pg, state_db)]
    assert databases == ["cdc_demo", "cdc_state"]
    recorded = state_store.get_range(state_db, "apart-0", TABLE.name)
    assert recorded is not None and recorded.end == sealed.end
    assert state_store.get_snapshot(state_db, "apart-0", TABLE.name) is not None
    watermark_table = load_config().watermark_table
    row = pg.execute(f"SELECT run_id, xmin::text::bigint FROM {watermark_table} WHERE id = %s", (sealed.watermark_id,))
    assert row.fetchone() == ("apart-0", sealed.watermark_txid % 2**32)  # written by the sealed transaction
    assert pg.execute("SELECT 1 FROM pg_namespace WHERE nspname = 'cdc_reconcile'").fetchone() is None
