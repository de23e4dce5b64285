"""The reconciliation engine on the real stack: exact under load, and it catches and repairs real faults.

Every count the pipeline reports is checked against one taken independently: straight from
PostgreSQL, or from Kafka with a plain ``read_committed`` consumer.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest

from cdc_dev.loader import run_loader
from cdc_dev.stack.connect import connector_config
from cdc_reconcile import errors, kafka_offsets
from cdc_reconcile.config import TableConfig, load_config
from cdc_reconcile.diff import EXTRA, MISSING, STALE
from cdc_reconcile.lake import TableLake
from cdc_reconcile.phase import Phase
from cdc_reconcile.run import TableRun
from tests.support.kafka import read_topic, unwrap
from tests.support.lake import delta_rows, versions
from tests.support.polling import eventually

from .conftest import run_once, table_run

pytestmark = pytest.mark.integration

BIG_ROWS = 150_000


@pytest.fixture(scope="module")
def lake(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("lake")


def test_zero_differences_as_of_the_snapshot_while_the_loader_writes(stack, config, spark, lake, artifacts):
    tables = load_config().tables
    stop = threading.Event()
    loader = threading.Thread(
        target=run_loader, kwargs={"dsn": config.pg_dsn, "rate": 40, "stop": stop, "seed": 11}, name="loader"
    )
    loader.start()
    figures = []
    try:
        # the first run covers both tables (single and compound keys); the second proves the
        # incremental fold from the first run's table under the same load
        for run_id, run_tables in (("load-1", tables), ("load-2", tables[:1])):
            for table in run_tables:
                began = time.monotonic()
                summary, report, _ = run_once(spark, config, table, lake, run_id)
                figures.append({"run": run_id, **summary, "report": report.as_dict(), "wall": time.monotonic() - began})
                assert report.clean, f"{table.name} {run_id}: {report.as_dict()}"
                assert summary["quarantined"] == 0
    finally:
        stop.set()
        loader.join(timeout=60)
    (artifacts / "engine_under_load.json").write_text(json.dumps(figures, indent=2, default=str))
    assert any(f["changes"] > 0 for f in figures if f["run"] == "load-2"), "the second run saw new changes"


@pytest.mark.slow  # about 5 minutes; fault-matrix scenario lost_events repairs the same fault through a DAG run,
# and test_reconciliation_dag.py's dry run counts it exactly in the test command
def test_lost_events_are_detected_exactly_and_repaired(stack, config, spark, lake, pg):
    """Changes made while the table was out of the publication never reach Kafka: missing, stale, extra."""
    table = load_config().table("public.customers")
    pg.execute("INSERT INTO public.customers (name, balance) SELECT 'seed ' || g, g FROM generate_series(1, 20) g")
    _, report, sealed = run_once(spark, config, table, lake, "lost-0")
    assert report.clean, report.as_dict()
    table_lake = TableLake(lake, table.name)
    written = _datasets(table_lake, "lost-0")
    # not told whether lost-0 was a full rescan: the run's recorded choice holds
    table_run(spark, config, table, lake, "lost-0").compact(offsets=sealed.as_spark_json())
    assert _datasets(table_lake, "lost-0") == written, "compacting the same range again commits the same rows"
    rescans = [m["full_rescan"] for _, m in versions(table_lake.table) if m.get("run") == "lost-0"]
    assert len(rescans) == 2 and rescans[1] == rescans[0], rescans
    with pg.transaction():
        stale_ids = [r[0] for r in pg.execute("SELECT id FROM public.customers ORDER BY id LIMIT 3")]
        extra_ids = [r[0] for r in pg.execute("SELECT id FROM public.customers ORDER BY id DESC LIMIT 2")]
    pg.execute(f"ALTER PUBLICATION {config.publication_name} DROP TABLE public.customers")
    try:
        with pg.transaction():
            missing_ids = [
                r[0]
                for r in pg.execute(
                    "INSERT INTO public.customers (name, balance) SELECT 'lost ' || g, g FROM generate_series(1, 4) g "
                    "RETURNING id"
                )
            ]
            pg.execute("UPDATE public.customers SET balance = balance + 1000 WHERE id = ANY(%s)", (stale_ids,))
            pg.execute("DELETE FROM public.customers WHERE id = ANY(%s)", (extra_ids,))
    finally:
        pg.execute(f"ALTER PUBLICATION {config.publication_name} ADD TABLE public.customers")

    _, report, _ = run_once(spark, config, table, lake, "lost-1")
    assert report.counts == {MISSING: 4, STALE: 3, EXTRA: 2}, report.as_dict()
    assert sorted(s["id"] for s in report.samples[MISSING]) == sorted(missing_ids)

    lost_1 = table_run(spark, config, table, lake, "lost-1")
    lost_1 = TableRun(table, "lost-1", replace(lost_1.settings, gx_root=str(lake / "gx")), spark=spark)
    assert not lost_1.validate(Phase.BEFORE_REPAIR).success  # keeps its findings for reconcile
    dry = lost_1.reconcile(dry_run=True)
    assert dry["findings"] == "validate's"
    assert dry["audit"] == {MISSING: 4, STALE: 3, EXTRA: 2} and dry["repair_events"] == 0
    assert not lost_1.check()[0].clean

    # compact_cdc again (a cleared task): the changelog has a new version, so the findings are computed again
    lost_1.compact()
    repaired = lost_1.reconcile()
    assert repaired["findings"] == "computed"
    assert repaired["found"]["counts"] == dry["found"]["counts"] == {MISSING: 4, STALE: 3, EXTRA: 2}
    assert repaired["repair_events"] == 9
    audit = delta_rows(table_lake.audit, run="lost-1")
    named = {(json.loads(r["key"])["id"], r["kind"]) for r in audit}
    assert named == {(i, MISSING) for i in missing_ids} | {(i, STALE) for i in stale_ids} | {
        (i, EXTRA) for i in extra_ids
    }
    assert lost_1.check()[0].clean

    again = lost_1.reconcile()
    assert again["findings"] == "computed", "the range holds this run's repairs: validate's findings do not stand"
    assert again["repair_events"] == 9, "reconcile is idempotent: the same repairs, not doubled and not lost"
    lake_rows = {r["id"]: r for r in delta_rows(table_lake.table)}
    with pg.cursor() as cur:
        source = {r[0]: r for r in cur.execute("SELECT id, balance FROM public.customers")}
    assert set(lake_rows) == set(source)
    assert all(lake_rows[i]["balance"] == source[i][1] for i in stale_ids)

    _, next_report, _ = run_once(spark, config, table, lake, "lost-2")
    assert next_report.clean, next_report.as_dict()


@pytest.mark.slow  # about 4 minutes; fault-matrix scenario 2 (scripts/faults.sh) injects the same fault
def test_worker_killed_during_initial_snapshot_yields_counted_snapshot_reruns(stack, config, spark, lake, pg):
    """kill -9 of the Connect worker mid-snapshot: the snapshot runs again, re-emitting rows already sent."""
    pg.execute(
        "CREATE TABLE IF NOT EXISTS public.big_items (id bigint PRIMARY KEY, label text NOT NULL, "
        "amount numeric(14,4) NOT NULL, doc jsonb, created timestamptz NOT NULL DEFAULT now())"
    )
    pg.execute("TRUNCATE public.big_items")
    pg.execute(
        "INSERT INTO public.big_items (id, label, amount, doc) SELECT g, repeat('x', 200) || g, g / 7.0, "
        "jsonb_build_object('g', g) FROM generate_series(1, %s) g",
        (BIG_ROWS,),
    )
    name, prefix = "cdc-big", "big"
    big = {
        **connector_config(config),
        "topic.prefix": prefix,
        "slot.name": "cdc_big",
        "publication.name": "cdc_big",
        "table.include.list": "public.big_items,public.cdc_watermark",
        "snapshot.fetch.size": "2000",
        "max.batch.size": "2048",
    }
    topic = f"{prefix}.public.big_items"
    stack.connect.put_connector(name, big)
    try:
        eventually(
            lambda: _high_watermark(config.bootstrap_servers, topic) >= BIG_ROWS // 10,
            timeout=180,
            interval=0.1,
            what="the initial snapshot under way",
        )
        stack.connect.kill()
        emitted_before_kill = _high_watermark(config.bootstrap_servers, topic)
        assert emitted_before_kill < BIG_ROWS, "the worker must die before the snapshot finishes"
        stack.connect.start()
        stack.connect.wait_connector_running(name, timeout=180)

        def snapshot_finished() -> list:
            records = read_topic(config.bootstrap_servers, topic, timeout=300)
            snapshot = [r for r in records if r.payload and r.payload["op"] == "r"]
            per_round = Counter(r.payload["source"]["txId"] for r in snapshot)
            return snapshot if len(per_round) >= 2 and max(per_round.values()) >= BIG_ROWS else []

        snapshot_records = eventually(snapshot_finished, timeout=600, interval=2, what="the repeated snapshot")
        first_round: dict[int, int] = {}
        rerun = 0
        seen: set = set()
        for record in snapshot_records:
            round_id = record.payload["source"]["txId"]
            key = unwrap(record.key)["id"]
            first_round.setdefault(key, round_id)
            if key in seen and first_round[key] != round_id:
                rerun += 1
            seen.add(key)
        rounds = Counter(r.payload["source"]["txId"] for r in snapshot_records)
        assert len(rounds) >= 2 and rerun > 0, f"snapshot rounds {dict(rounds)}"

        table = TableConfig(name="public.big_items", key=("id",), topic_prefix=prefix)
        summary, report, _ = run_once(
            spark, config, table, lake, "big-1", watermark_topic=f"{prefix}.public.cdc_watermark"
        )
        assert summary["duplicates"]["snapshot_rerun"] == rerun, (summary, rerun, dict(rounds))
        assert report.clean, report.as_dict()
        result = table_run(spark, config, table, lake, "big-1").reconcile()
        assert result["audit"].get("snapshot_rerun") == rerun
        assert result["repair_events"] == 0
        lake_ids = len(delta_rows(TableLake(lake, table.name).table, columns=["id"]))
        assert lake_ids == BIG_ROWS
        print(
            f"\nsnapshot re-run: rounds {dict(rounds)}, re-emitted {rerun}, emitted before kill {emitted_before_kill}"
        )
    finally:
        stack.connect.delete_connector(name)
        with psycopg.connect(config.pg_dsn, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_drop_replication_slot('cdc_big') WHERE EXISTS "
                "(SELECT 1 FROM pg_replication_slots WHERE slot_name = 'cdc_big' AND NOT active)"
            )


def _datasets(lake: TableLake, run: str) -> dict[str, list[str]]:
    """The run's rows of every dataset it wrote and the lake table's rows, read with delta-rs, in a stable order."""
    found = {
        name: sorted(repr(sorted(r.items())) for r in delta_rows(getattr(lake, name), run=run))
        for name in ("events", "quarantine", "changelog", "duplicates")
    }
    found["table"] = sorted(repr(sorted(r.items())) for r in delta_rows(lake.table))
    return found


def _high_watermark(bootstrap: str, topic: str) -> int:
    try:
        return sum(
            kafka_offsets.log_end_offsets(bootstrap, topic, kafka_offsets.list_partitions(bootstrap, topic)).values()
        )
    except errors.ReconcileError:
        return 0
