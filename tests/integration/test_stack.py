"""The embedded stack is real: PostgreSQL changes reach Kafka through Debezium, in transactions."""

from __future__ import annotations

import base64
import itertools
import json
import subprocess
import sys
import threading
import time
from collections import Counter
from decimal import Decimal

import psycopg
import pytest
import requests

from cdc_dev.loader import run_loader
from cdc_dev.stack.process import pid_alive
from tests.support.kafka import consumer_end_offsets, read_topic, unwrap
from tests.support.polling import eventually

pytestmark = pytest.mark.integration


def decimal_from_debezium(encoded: str, scale: int) -> Decimal:
    """Debezium's precise decimal: base64 of the big-endian two's-complement unscaled value."""
    unscaled = int.from_bytes(base64.b64decode(encoded), "big", signed=True)
    return Decimal(unscaled).scaleb(-scale)


def events_for(config, table: str, predicate) -> list:
    return [r for r in read_topic(config.bootstrap_servers, config.topic_for(table)) if predicate(r)]


def test_insert_update_delete_arrive_as_c_u_d_and_tombstone(stack, config, pg):
    with pg.transaction():
        customer_id = pg.execute(
            "INSERT INTO public.customers (name, email, balance, attrs) VALUES (%s, %s, %s, %s) RETURNING id",
            ("Zoë Ünïcode 李", None, Decimal("-1234.56"), json.dumps({"vip": True})),
        ).fetchone()[0]
    pg.execute("UPDATE public.customers SET balance = 99999999.99 WHERE id = %s", (customer_id,))
    pg.execute("DELETE FROM public.customers WHERE id = %s", (customer_id,))

    def mine(record) -> bool:
        return unwrap(record.key) == {"id": customer_id}

    records = eventually(
        lambda: (found := events_for(config, "public.customers", mine)) and len(found) >= 4 and found,
        timeout=60,
        what=f"4 records for customer {customer_id}",
    )
    assert [r.payload["op"] if r.payload else None for r in records] == ["c", "u", "d", None]
    created, updated, deleted, tombstone = records
    assert created.payload["before"] is None
    assert created.payload["after"]["name"] == "Zoë Ünïcode 李"
    assert created.payload["after"]["email"] is None
    assert decimal_from_debezium(created.payload["after"]["balance"], 2) == Decimal("-1234.56")
    assert json.loads(created.payload["after"]["attrs"]) == {"vip": True}
    assert decimal_from_debezium(updated.payload["before"]["balance"], 2) == Decimal("-1234.56")
    assert decimal_from_debezium(updated.payload["after"]["balance"], 2) == Decimal("99999999.99")
    assert deleted.payload["after"] is None
    assert deleted.payload["before"]["id"] == customer_id
    assert tombstone.value is None
    assert created.payload["source"]["table"] == "customers"
    assert created.payload["source"]["snapshot"] == "false"
    assert created.payload["source"]["txId"] != updated.payload["source"]["txId"]


def test_compound_key_reaches_kafka(stack, config, pg):
    order_id = 10_000_000 + int(time.time()) % 1_000_000
    pg.execute(
        "INSERT INTO public.order_lines (order_id, line_no, sku, quantity, unit_price) VALUES (%s, 1, 'A', 2, 1.5),"
        " (%s, 2, 'B', 3, 0.0001)",
        (order_id, order_id),
    )
    records = eventually(
        lambda: (
            (
                found := events_for(
                    config, "public.order_lines", lambda r: (unwrap(r.key) or {}).get("order_id") == order_id
                )
            )
            and len(found) == 2
            and found
        ),
        timeout=60,
        what=f"2 order lines of order {order_id}",
    )
    assert sorted(unwrap(r.key)["line_no"] for r in records) == [1, 2]
    assert {decimal_from_debezium(r.payload["after"]["unit_price"], 4) for r in records} == {
        Decimal("1.5"),
        Decimal("0.0001"),
    }


def test_connector_runs_exactly_once_and_writes_in_transactions(stack, config, pg):
    status = stack.connect.connector_status(config.connector_name)
    assert status["connector"]["state"] == "RUNNING"
    assert [t["state"] for t in status["tasks"]] == ["RUNNING"]
    registered = requests.get(f"{config.connect_url}/connectors/{config.connector_name}/config", timeout=10).json()
    assert registered["exactly.once.support"] == "required"
    assert registered["plugin.name"] == "pgoutput"
    assert registered["provide.transaction.metadata"] == "true"
    worker = stack.connect.properties_file.read_text()
    assert "exactly.once.source.support=enabled" in worker

    topic = config.topic_for("public.order_lines")
    marker = 20_000_000 + int(time.time()) % 1_000_000
    for line_no in range(1, 6):
        pg.execute(
            "INSERT INTO public.order_lines (order_id, line_no, sku, quantity, unit_price) VALUES (%s, %s, 'T', 1, 1)",
            (marker, line_no),
        )
        eventually(
            lambda n=line_no: any(
                unwrap(r.key) == {"order_id": marker, "line_no": n} for r in read_topic(config.bootstrap_servers, topic)
            ),
            timeout=60,
            what=f"order line {marker}/{line_no} in Kafka",
        )

    committed = read_topic(config.bootstrap_servers, topic, isolation="read_committed")
    uncommitted = read_topic(config.bootstrap_servers, topic, isolation="read_uncommitted")
    end = consumer_end_offsets(config.bootstrap_servers, topic)[0]
    offsets = [r.offset for r in committed]
    gaps = [b - a for a, b in itertools.pairwise(offsets) if b - a > 1]
    assert len(gaps) >= 4, f"five separately committed changes must leave transaction markers, gaps={gaps}"
    assert end - len(committed) >= 5, "offsets taken by markers: end offset exceeds the record count"
    assert [r.offset for r in uncommitted] == offsets, "no aborted transaction here: both isolations agree"
    with pg.cursor() as cur:
        in_source = cur.execute("SELECT count(*) FROM public.order_lines WHERE order_id = %s", (marker,)).fetchone()[0]
    mine = [r for r in committed if (unwrap(r.key) or {}).get("order_id") == marker]
    assert len(mine) == in_source == 5


@pytest.mark.slow  # `-m slow`: fault-matrix scenario 1 (scripts/faults.sh) injects the same fault through a DAG run
def test_replication_connection_killed_under_load_loses_nothing(stack, config, pg, artifacts):
    """The seed's fault test, with a consumer that understands transaction markers."""
    first_id = pg.execute("SELECT coalesce(max(id), 0) FROM public.customers").fetchone()[0]
    stop = threading.Event()
    result: dict = {}

    def load() -> None:
        result["stats"] = run_loader(
            config.pg_dsn, rate=150, mix={"insert": 1}, tables=("customers",), stop=stop, seed=7
        )

    loader = threading.Thread(target=load, name="loader")
    loader.start()
    kills = 0
    try:
        for _ in range(6):
            if kills >= 3:
                break
            eventually(
                lambda: pg.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'START_REPLICATION SLOT%%'"
                ).fetchone()[0],
                timeout=120,
                what="Debezium's replication connection (re)established",
            )
            before = pg.execute("SELECT coalesce(max(id), 0) FROM public.customers").fetchone()[0]
            eventually(
                lambda b=before: (
                    pg.execute("SELECT coalesce(max(id), 0) FROM public.customers").fetchone()[0] >= b + 200
                ),
                timeout=60,
                what="loader progress before the next kill",
            )
            killed = pg.execute(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE pid <> pg_backend_pid() AND query LIKE 'START_REPLICATION SLOT%%'"
            ).fetchone()[0]
            kills += killed
    finally:
        stop.set()
        loader.join(timeout=60)
    assert kills >= 2, f"replication connection killed {kills} times"

    with pg.cursor() as cur:
        written = {row[0] for row in cur.execute("SELECT id FROM public.customers WHERE id > %s", (first_id,))}
    assert len(written) >= 600

    def arrived() -> list:
        records = read_topic(config.bootstrap_servers, config.topic_for("public.customers"))
        created = {r.payload["after"]["id"] for r in records if r.payload and r.payload["op"] == "c"}
        return records if written <= created else []

    records = eventually(arrived, timeout=180, what=f"all {len(written)} inserted rows in Kafka")
    creates = [r for r in records if r.payload and r.payload["op"] == "c" and r.payload["after"]["id"] in written]
    per_key = Counter(r.payload["after"]["id"] for r in creates)
    per_event = Counter((r.payload["source"]["txId"], r.payload["source"]["lsn"]) for r in creates)
    duplicate_events = sum(n - 1 for n in per_key.values())
    report = {
        "rows_written": len(written),
        "create_events": len(creates),
        "duplicate_events": duplicate_events,
        "duplicate_by_txid_lsn": sum(n - 1 for n in per_event.values()),
        "replication_kills": kills,
        "loader": result["stats"].summary(),
    }
    (artifacts / "fault_replication_kill.json").write_text(json.dumps(report, indent=2))
    print(f"\nseed fault test: {report}")
    assert set(per_key) == written, "every committed row reached Kafka"
    assert stack.connect.connector_running(config.connector_name), "the connector recovered on its own"
    assert duplicate_events == report["duplicate_by_txid_lsn"]


def test_up_is_idempotent_and_down_leaves_nothing(stack, config, stack_env):
    pids_before = {"kafka": stack.kafka.process.pid(), "connect": stack.connect.process.pid()}
    cli = [sys.executable, "-m", "cdc_dev.stack"]
    again = subprocess.run([*cli, "up"], capture_output=True, text=True, timeout=300, check=False)
    assert again.returncode == 0, again.stderr
    assert {"kafka": stack.kafka.process.pid(), "connect": stack.connect.process.pid()} == pids_before
    status = subprocess.run([*cli, "status", "--json"], capture_output=True, text=True, timeout=60, check=False)
    assert status.returncode == 0, status.stdout
    rows = {row["name"]: row for row in json.loads(status.stdout)}
    assert all(rows[name]["healthy"] for name in ("postgres", "kafka", "connect", "connector", "data-docs"))
    assert "task 0 RUNNING" in rows["connector"]["detail"]

    postgres_pids = stack.postgres.server_pids()
    down = subprocess.run([*cli, "down"], capture_output=True, text=True, timeout=180, check=False)
    assert down.returncode == 0, down.stderr
    assert stack.leftover_pids() == []
    still_running = subprocess.run(["pgrep", "-f", config.run_dir.as_posix()], capture_output=True, text=True)
    assert still_running.stdout.strip() == "", f"processes left behind: {still_running.stdout}"
    assert all(not pid_alive(pid) for pid in postgres_pids + list(pids_before.values()))
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(config.pg_dsn, connect_timeout=2)

    stack.up()
    # up() returns once the task is RUNNING; a rebalance of the fresh worker may restart it right after
    stack.connect.wait_connector_running(config.connector_name, timeout=120)
