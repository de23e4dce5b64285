"""Adding a table to the running pipeline in one step, while the loader writes.

The table already holds rows when it is added: a running connector never snapshots a table added to
its capture list, so without the incremental snapshot ``cdc-tables add`` asks for, those rows would
never reach Kafka and the first run would find every one of them missing. The new table is changed
while Debezium snapshots it, in more rows than one snapshot chunk (1024 by default), so reads and
streamed changes of the same keys interleave in the topic.

Debezium's incremental snapshot can emit a read older than a change it streamed before it: a chunk's
SELECT may not yet see a transaction whose commit is already in the WAL before the chunk's low
watermark, and the window only drops reads of keys changed inside it. The lake follows the topic (a
read after a change wins, as Debezium means it to), so such a key is stale until the run's check finds
it and the repair fixes it. The test counts those reads in the topic itself and holds the check to them.
"""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest
import requests
import yaml

from cdc_dev.loader import run_loader
from cdc_reconcile.config import load_config
from tests.support.kafka import read_topic
from tests.support.polling import eventually

from .conftest import run_once, table_run

pytestmark = pytest.mark.integration

TABLE = "public.orders_added"
ROWS = 3000


def cdc_tables_add(config, tables_yaml: Path, *extra: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "cdc_reconcile.tables_cli", "add", TABLE, "--key", "id", "--config", str(tables_yaml)]
    argv += ["--connect-url", config.connect_url, "--connector", config.connector_name, "--source-dsn", config.pg_dsn]
    return subprocess.run([*argv, *extra], capture_output=True, text=True, timeout=600, check=False)


def connector_config(config) -> dict[str, str]:
    response = requests.get(f"{config.connect_url}/connectors/{config.connector_name}/config", timeout=10)
    response.raise_for_status()
    return response.json()


def write_orders(dsn: str, stop: threading.Event, seed: int = 5) -> None:
    """Updates, inserts and deletes on the new table, one transaction each, until ``stop``."""
    rng = random.Random(seed)
    next_id = ROWS + 1
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.is_set():
            choice = rng.random()
            if choice < 0.6:
                conn.execute(
                    f"UPDATE {TABLE} SET status = %s, amount = amount + 1, updated_at = now() WHERE id = %s",
                    (rng.choice(["paid", "shipped", "returned"]), rng.randint(1, next_id - 1)),
                )
            elif choice < 0.85:
                conn.execute(f"INSERT INTO {TABLE} (id, status, amount) VALUES (%s, 'new', 1.25)", (next_id,))
                next_id += 1
            else:
                conn.execute(f"DELETE FROM {TABLE} WHERE id = %s", (rng.randint(1, next_id - 1),))
            time.sleep(0.02)


def table_topic(config) -> str:
    return f"{config.topic_prefix}.{TABLE}"


def keys_in_kafka(config) -> set[int]:
    records = read_topic(config.bootstrap_servers, table_topic(config))
    return {record.key_payload["id"] for record in records if record.key}


def stale_reads(envelopes: list[dict]) -> set[int]:
    """Keys whose last event is an incremental read whose row differs from a change streamed before it."""
    streamed: dict[int, dict | None] = {}
    stale: dict[int, bool] = {}
    for envelope in envelopes:
        key = (envelope["after"] or envelope["before"])["id"]
        if envelope["op"] == "r":
            stale[key] = key in streamed and streamed[key] != envelope["after"]
        else:
            streamed[key] = envelope["after"]
            stale[key] = False
    return {key for key, is_stale in stale.items() if is_stale}


def rows_in_source(pg) -> set[int]:
    return {row[0] for row in pg.execute(f"SELECT id FROM {TABLE}")}


def test_a_table_added_while_the_loader_writes_reconciles_with_zero_differences(
    stack, config, spark, pg, tmp_path, monkeypatch
):
    pg.execute(f"DROP TABLE IF EXISTS {TABLE}")
    pg.execute(
        f"CREATE TABLE {TABLE} (id bigint PRIMARY KEY, status text NOT NULL, amount numeric(12, 2) NOT NULL, "
        "updated_at timestamptz NOT NULL DEFAULT now())"
    )
    pg.execute(f"ALTER TABLE {TABLE} REPLICA IDENTITY FULL")
    pg.execute(f"INSERT INTO {TABLE} (id, status, amount) SELECT g, 'new', g * 1.5 FROM generate_series(1, {ROWS}) g")
    tables_yaml = tmp_path / "tables.yaml"
    monkeypatch.setenv("CDC_TABLES_CONFIG", str(tables_yaml))

    stop = threading.Event()
    writers = [
        threading.Thread(target=run_loader, kwargs={"dsn": config.pg_dsn, "rate": 40, "stop": stop, "seed": 17}),
        threading.Thread(target=write_orders, args=(config.pg_dsn, stop)),
    ]
    for writer in writers:
        writer.start()
    try:
        added = cdc_tables_add(config, tables_yaml)
        assert added.returncode == 0, added.stdout + added.stderr
        assert f"added {TABLE} with key ['id']" in added.stdout
        assert f"table.include.list += {TABLE}" in added.stdout
        assert f"incremental snapshot of {TABLE} requested" in added.stdout
        # the snapshot has reached Kafka when every row the table holds has an event there
        eventually(
            lambda: rows_in_source(pg) <= keys_in_kafka(config), timeout=300, interval=3, what="snapshot in Kafka"
        )
    finally:
        stop.set()
        for writer in writers:
            writer.join(timeout=60)
    eventually(lambda: rows_in_source(pg) <= keys_in_kafka(config), timeout=120, interval=3, what="changes in Kafka")
    envelopes = [r.payload for r in read_topic(config.bootstrap_servers, table_topic(config)) if r.value]
    reads = [e for e in envelopes if e["op"] == "r"]
    assert {e["source"]["snapshot"] for e in reads} == {"incremental"} and len(reads) >= ROWS // 2
    assert sum(e["op"] == "u" for e in envelopes) > 0, "the table's changes were streamed too"

    table = load_config().table(TABLE)
    assert table.key == ("id",) and table.topic == f"{config.topic_prefix}.{TABLE}"
    assert load_config().names[:2] == ["public.customers", "public.order_lines"], "the built-in tables stay"

    connector_before = connector_config(config)
    yaml_before = tables_yaml.read_text()
    again = cdc_tables_add(config, tables_yaml)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "nothing changed" in again.stdout, again.stdout
    assert connector_config(config) == connector_before and tables_yaml.read_text() == yaml_before

    summary, report, _ = run_once(spark, config, table, tmp_path / "lake", "added-1")
    assert summary["quarantined"] == 0
    stale = stale_reads(envelopes)
    found = report.as_dict()
    assert report.counts.get("missing", 0) == 0 and report.duplicate_keys == 0, found
    assert report.differences == len(stale), (found, sorted(stale))
    assert {sample["id"] for samples in report.samples.values() for sample in samples} <= stale, (found, stale)
    if stale:  # the repair makes the lake equal the source again
        run = table_run(spark, config, table, tmp_path / "lake", "added-1")
        run.reconcile()
        repaired, diff = run.check()
        diff.unpersist()
        assert repaired.clean, repaired.as_dict()
    assert yaml.safe_load(yaml_before)["tables"][-1] == {"name": TABLE, "key": ["id"]}


def test_a_table_without_a_usable_key_is_refused_and_nothing_changes(stack, config, pg, tmp_path):
    pg.execute("DROP TABLE IF EXISTS public.no_identity")
    pg.execute("CREATE TABLE public.no_identity (id bigint, note text)")
    tables_yaml = tmp_path / "tables.yaml"
    before = connector_config(config)
    argv = [sys.executable, "-m", "cdc_reconcile.tables_cli", "add", "public.no_identity", "--key", "id"]
    argv += ["--config", str(tables_yaml), "--connect-url", config.connect_url, "--source-dsn", config.pg_dsn]
    refused = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "REPLICA IDENTITY DEFAULT and no primary key" in refused.stderr
    assert "ALTER TABLE public.no_identity REPLICA IDENTITY FULL" in refused.stderr
    assert not tables_yaml.exists() and connector_config(config) == before
