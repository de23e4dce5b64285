"""Offset ranges across runs on the real stack, while the loader writes: no change is lost between runs.

* A run whose ``compact_cdc`` failed must not leave a hole: its events reach the lake before the next
  range is read, and are never reported as differences of the source.
* A snapshot taken again after the seal (``snapshot_source`` and everything downstream cleared) must
  be checked against a range that holds every change it saw.

Rows the tests write themselves (a marker name, inserted after the loader started, which only
touches its own rows) are compared with PostgreSQL directly, not through the pipeline's diff.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from pyspark.sql import functions as F

from cdc_dev.loader import run_loader
from cdc_reconcile import storage
from cdc_reconcile.config import load_config
from cdc_reconcile.errors import InputError
from cdc_reconcile.lake import TableLake, run_partition

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
    table = storage.read_current(spark, TableLake(lake, TABLE.name).table)
    landed = {r["id"]: r["balance"] for r in table.filter(F.col("name") == marker).select("id", "balance").collect()}
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
