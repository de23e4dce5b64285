"""The main job on the embedded stack, end to end, with a real fault caught and repaired.

1. The stack comes up from empty data (PostgreSQL, Kafka, Kafka Connect + Debezium, Airflow).
2. ``public.customers`` gets ``--rows`` rows, then the connector is registered and its worker is
   killed (``kill -9``) while the initial snapshot runs: after the restart Debezium snapshots again,
   so Kafka holds every row read before the kill twice (a snapshot re-run).
3. The loader writes changes for ``--duration`` seconds (streamed by Debezium).
4. One run of the ``cdc_reconciliation`` DAG is triggered through Airflow's REST API, as the UI's
   trigger form does, and followed task by task until it ends.
5. It prints the run's outcome, what the suite found before and after repair, the repair audit, the
   alert the run sent (to a local webhook), and where to look: the UI, the Data Docs, the lake.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import psycopg
import requests

from cdc_reconcile import errors, kafka_offsets, run_state, state_store
from cdc_reconcile.phase import Phase

from .loader import run_loader
from .stack import Stack, StackConfig, StackError
from .stack.process import wait_until
from .stack.topics import read_topic

DAG_ID = "cdc_reconciliation"
TABLE = "public.customers"
DONE = ("success", "failed")


def _alert_receiver() -> tuple[ThreadingHTTPServer, list[dict[str, Any]]]:
    """A local webhook standing where a team's chat or pager endpoint would be."""
    received: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0)))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, received


def _snapshot_rounds(config: StackConfig) -> dict[int, set[str]]:
    """The keys each snapshot transaction read, from committed records straight from Kafka."""
    rounds: dict[int, set[str]] = {}
    for record in read_topic(config.bootstrap_servers, config.topic_for(TABLE), timeout=60):
        if record.payload and record.payload.get("op") == "r":
            rounds.setdefault(record.payload["source"]["txId"], set()).add(json.dumps(record.key, sort_keys=True))
    return rounds


def inject_snapshot_rerun(stack: Stack, rows: int) -> dict[str, Any]:
    """Load ``rows`` rows, start the connector, and kill its worker in the middle of the snapshot."""
    config = stack.config
    with psycopg.connect(config.pg_dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO public.customers (name, email, balance, attrs) "
            "SELECT 'customer ' || g, 'c' || g || '@example.com', (g %% 100000) / 100.0, "
            "jsonb_build_object('g', g, 'city', 'Zürich') FROM generate_series(1, %s) g",
            (rows,),
        )
    topic = config.topic_for(TABLE)
    stack.register_connector()

    def under_way() -> int:
        try:
            ends = kafka_offsets.log_end_offsets(
                config.bootstrap_servers,
                topic,
                kafka_offsets.list_partitions(config.bootstrap_servers, topic, timeout=2),
            )
        except errors.ReconcileError:
            return 0
        return sum(ends.values()) >= rows // 10

    wait_until(under_way, timeout=300, what="the initial snapshot under way", interval=0.1)
    stack.connect.kill()
    print("   Connect worker killed (kill -9) during the initial snapshot; restarting it")
    stack.connect.start()
    stack.connect.wait_connector_running(config.connector_name, timeout=180)

    def second_round_done() -> dict[int, set[str]] | None:
        rounds = _snapshot_rounds(config)
        return rounds if len(rounds) >= 2 and max(len(keys) for keys in rounds.values()) >= rows else None

    rounds = wait_until(second_round_done, timeout=900, what="the repeated snapshot", interval=2)
    seen: set[str] = set()
    read_again = 0
    for txid in sorted(rounds):
        read_again += len(rounds[txid] & seen)
        seen |= rounds[txid]
    return {"rounds": {txid: len(keys) for txid, keys in sorted(rounds.items())}, "read_again": read_again}


TASK_PAGE = 100  # task instances per API call (Airflow's maximum_page_limit default)


class AirflowApi:
    """The few REST calls the demo makes, authenticated like the UI's user."""

    def __init__(self, config: StackConfig) -> None:
        self.base = f"{config.airflow_url}/api/v2"
        token = requests.post(
            f"{config.airflow_url}/auth/token",
            json={"username": config.airflow_user, "password": config.airflow_password},
            timeout=30,
        )
        token.raise_for_status()
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {token.json()['access_token']}"

    def get(self, path: str) -> Any:
        response = self.session.get(f"{self.base}{path}", timeout=30)
        response.raise_for_status()
        return response.json()

    def task_instances(self, run_id: str) -> list[dict[str, Any]]:
        """Every task instance of a run: the API returns a page of 50 unless asked (a run over ten
        tables has over 100), so this pages through them."""
        path, found = f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances", []
        while True:
            page = self.get(f"{path}?limit={TASK_PAGE}&offset={len(found)}")
            found += page["task_instances"]
            if not page["task_instances"] or len(found) >= page["total_entries"]:
                return found

    def trigger(self, conf: dict[str, Any]) -> str:
        response = self.session.post(
            f"{self.base}/dags/{DAG_ID}/dagRuns", json={"logical_date": None, "conf": conf}, timeout=30
        )
        response.raise_for_status()
        return response.json()["dag_run_id"]


def follow_run(api: AirflowApi, run_id: str, timeout: float) -> tuple[str, list[dict[str, Any]]]:
    """Print each task's state as it changes; return the run's final state and its task instances."""
    seen: dict[tuple[str, int], str] = {}
    deadline = time.monotonic() + timeout
    while True:
        tasks = api.task_instances(run_id)
        for ti in sorted(tasks, key=lambda t: t.get("start_date") or "~"):
            name = (ti["task_id"], ti.get("map_index", -1))
            if ti.get("state") and seen.get(name) != ti["state"] and ti["state"] not in ("scheduled", "queued"):
                seen[name] = ti["state"]
                print(f"   {time.strftime('%H:%M:%S')}  {ti['task_id']:<36} {ti['state']}")
        state = api.get(f"/dags/{DAG_ID}/dagRuns/{run_id}")["state"]
        if state in DONE:
            return state, tasks
        if time.monotonic() > deadline:
            raise StackError(f"DAG run {run_id} not finished after {timeout:.0f}s (state {state})")
        time.sleep(2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cdc-demo", description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=60_000, help="customers rows before the connector starts")
    parser.add_argument("--duration", type=float, default=15.0, help="seconds the loader writes after recovery")
    parser.add_argument("--rate", type=float, default=40.0, help="loader operations per second")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds to wait for the DAG run")
    args = parser.parse_args(argv)

    server, alerts = _alert_receiver()
    os.environ["CDC_ALERTS_WEBHOOK"] = f"http://127.0.0.1:{server.server_address[1]}/alerts"
    os.environ["CDC_AIRFLOW_SCHEDULES"] = "off"  # this demo's run only; `cdc-stack up` keeps the hourly schedule
    stack = Stack(airflow=True)
    config = stack.config
    began = time.monotonic()
    print("== the embedded stack, from empty data: PostgreSQL, Kafka, Kafka Connect + Debezium, Airflow")
    try:
        stack.down(destroy=True)
        timings = stack.up(register=False)
        print("   " + ", ".join(f"{name} {secs}s" for name, secs in timings.items()))
        print(f"== fault: {args.rows} rows, then the connector's worker killed during its initial snapshot")
        fault = inject_snapshot_rerun(stack, args.rows)
        print(
            f"   snapshot rounds in Kafka (txId: rows read): {fault['rounds']}; "
            f"rows read again by a later round: {fault['read_again']}"
        )
        print(f"== loader: {args.rate:.0f} ops/s for {args.duration:.0f}s")
        stats = run_loader(config.pg_dsn, rate=args.rate, duration=args.duration, seed=int(time.time()))
        print(f"   {stats.summary()}")
        api = AirflowApi(config)
        wait_until(lambda: _dag_parsed(api), timeout=300, what=f"DAG {DAG_ID} parsed by Airflow", interval=2)
        print(f"== one run of {DAG_ID} for {TABLE}, triggered through the REST API")
        run_started = time.monotonic()
        run_id = api.trigger({"tables": [TABLE]})
        state, _ = follow_run(api, run_id, args.timeout)
        run_seconds = time.monotonic() - run_started
    except (StackError, requests.RequestException) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    with state_store.connect(config.state_dsn) as conn:
        before = run_state.latest_suite_outcome(conn, run_id, TABLE, Phase.BEFORE_REPAIR) or {}
        after = run_state.latest_suite_outcome(conn, run_id, TABLE, Phase.AFTER_REPAIR) or {}
        audit = run_state.audit_counts(conn, run_id, TABLE)
    # the source table is in the captured database, the run state in a database of its own
    with psycopg.connect(config.pg_dsn) as conn:
        source_rows = conn.execute(f"SELECT count(*) FROM {TABLE}").fetchone()[0]
    print(
        f"== outcome: run {run_id} {state.upper()} in {run_seconds:.0f}s (whole demo {time.monotonic() - began:.0f}s)"
    )
    print(f"   suite before repair: {'passed' if before.get('success') else 'FAILED'}  counts {before.get('counts')}")
    if after:
        print(f"   suite after repair:  {'passed' if after.get('success') else 'FAILED'}  counts {after.get('counts')}")
    print(f"   repair audit: {audit}  (Kafka showed {fault['read_again']} rows read again)")
    print(f"   source rows now: {source_rows}")
    for alert in alerts:
        print(f"   alert received ({alert['severity']}):")
        print("     " + alert["text"].replace("\n", "\n     "))
    if not alerts:
        print("   no alert was sent")
    print("== where to look")
    login = f"user {config.airflow_user}, password {config.airflow_password}"
    print(f"   Airflow UI:  {config.airflow_url}/dags/{DAG_ID}  ({login})")
    print(f"   Data Docs:   {config.data_docs_url}  (the files: {(before or after).get('data_docs')})")
    print(f"   lake:        {config.lake_root / TABLE}")
    print("   the stack keeps running: `.venv/bin/cdc-stack status`; stop it with `.venv/bin/cdc-stack down`")
    server.shutdown()
    return 0 if state == "success" else 1


def _dag_parsed(api: AirflowApi) -> bool:
    try:
        return not api.get(f"/dags/{DAG_ID}").get("is_paused", False)
    except requests.HTTPError:
        return False


if __name__ == "__main__":
    sys.exit(main())
