"""``cdc-tables add schema.table --key column``: add a table to a running deployment in one step.

Checks first, changes nothing until every check passed: the connector's value modes match the decoder,
the connector has a signal table, the source table exists with its key columns and a replica identity
that carries the key. Then, each only when needed: adds the entry to the table configuration (the YAML
file in ``--config`` / ``$CDC_TABLES_CONFIG``, started from the built-in one), puts the table (and the
signal table) on the connector's ``table.include.list`` through Connect's REST API keeping every other
setting, waits until Debezium publishes it, and asks for an incremental snapshot of it through the signal
table: a table added to a running connector is otherwise never snapshotted, and its existing rows never
reach Kafka. Says what it changed; a second run finds everything in place and changes nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import requests
import yaml
from psycopg import sql

from . import table_admin
from .config import IDENTIFIER, load_config, parse_value_modes
from .errors import InputError, ReconcileError, UnreachableError
from .state_store import describe_dsn

EXIT_DONE, EXIT_BAD_INPUT, EXIT_UNREACHABLE = 0, 2, 3


class Connect:
    """The connector's configuration through Kafka Connect's REST API."""

    def __init__(self, url: str, connector: str) -> None:
        self.url = url.rstrip("/")
        self.connector = connector

    def _call(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        try:
            return requests.request(method, f"{self.url}/connectors/{self.connector}{path}", timeout=30, **kwargs)
        except requests.RequestException as exc:
            raise UnreachableError(
                f"Kafka Connect at {self.url} did not answer ({exc.__class__.__name__}); check it runs and "
                "that --connect-url / $CDC_CONNECT_URL points at its REST API"
            ) from exc

    def config(self) -> dict[str, str]:
        response = self._call("GET", "/config")
        if response.status_code == 404:
            raise InputError(f"Kafka Connect at {self.url} has no connector {self.connector!r}; check --connector")
        if response.status_code >= 400:
            raise UnreachableError(
                f"Kafka Connect at {self.url} answered {response.status_code} for {self.connector!r}: {response.text}"
            )
        return response.json()

    def put_config(self, config: dict[str, str]) -> None:
        response = self._call("PUT", "/config", json=config)
        if response.status_code >= 400:
            raise InputError(f"Connect refused the configuration of {self.connector!r}: {response.text}")

    def running(self) -> bool:
        response = self._call("GET", "/status")
        if response.status_code != 200:
            return False
        status = response.json()
        tasks = status.get("tasks", [])
        failed = [t for t in tasks if t.get("state") == "FAILED"]
        if failed:
            raise InputError(f"connector {self.connector!r} FAILED: {failed[0].get('trace', '')[:1500]}")
        return status["connector"]["state"] == "RUNNING" and bool(tasks) and all(t["state"] == "RUNNING" for t in tasks)


def source_table(conn: psycopg.Connection, name: str) -> table_admin.SourceTable:
    schema, table = name.split(".", 1)
    row = conn.execute(
        """
        SELECT c.relreplident,
               coalesce((SELECT array_agg(a.attname::text ORDER BY array_position(i.indkey::int2[], a.attnum))
                         FROM pg_index i
                         JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
                         WHERE i.indrelid = c.oid AND i.indisprimary), '{}'),
               (SELECT array_agg(a.attname::text ORDER BY a.attnum) FROM pg_attribute a
                WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')
        """,
        (schema, table),
    ).fetchone()
    if row is None:
        return table_admin.SourceTable(name, None, (), ())
    return table_admin.SourceTable(name, row[0], tuple(row[1]), tuple(row[2] or ()))


def published(conn: psycopg.Connection, publication: str, table: str) -> bool:
    schema, name = table.split(".", 1)
    row = conn.execute(
        "SELECT 1 FROM pg_publication_tables WHERE pubname = %s AND schemaname = %s AND tablename = %s",
        (publication, schema, name),
    ).fetchone()
    return row is not None


def read_document(path: Path) -> dict | None:
    """The YAML configuration's document, or None when the file does not exist yet."""
    if not path.exists():
        return None
    load_config(path)  # refuses a broken file with its own message before anything changes
    return yaml.safe_load(path.read_text())


def write_document(path: Path, document: dict) -> None:
    """Replace the file whole (a reader never sees half of it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(yaml.safe_dump(document, sort_keys=False))
    partial.replace(path)


def wait_until_published(conn, connect: Connect, publication: str, table: str, timeout: float) -> None:
    """The connector restarted with the new include list: Debezium put the table in its publication."""
    deadline = time.monotonic() + timeout
    while not (connect.running() and published(conn, publication, table)):
        if time.monotonic() > deadline:
            raise UnreachableError(
                f"{table} is not in publication {publication!r} {timeout:.0f}s after the connector was reconfigured; "
                f"check the connector's status (GET {connect.url}/connectors/{connect.connector}/status)"
            )
        time.sleep(1)


def signal_snapshot(conn: psycopg.Connection, table: str, signal_table: str, key: str | None) -> str | None:
    """Insert the table's snapshot signal unless it is there; the signal's id if it was inserted."""
    signal = table_admin.snapshot_signal(table, key)
    target = sql.Identifier(*signal_table.split(".", 1))
    inserted = conn.execute(
        sql.SQL("INSERT INTO {} (id, type, data) VALUES (%s, %s, %s) ON CONFLICT (id) DO NOTHING").format(target),
        (signal.id, signal.type, signal.data),
    ).rowcount
    return signal.id if inserted else None


def add(args: argparse.Namespace) -> list[str]:
    """Check everything, then change what is missing; returns one line per change."""
    name, key = args.table, args.key
    connect = Connect(args.connect_url, args.connector)
    connector = connect.config()
    current = read_document(args.config)
    modes = parse_value_modes((current or {}).get("value_modes") or {}, f"{args.config}: value_modes")
    problems = table_admin.mode_mismatches(connector, modes)
    if problems:
        raise table_admin.Refused("; ".join(problems))
    signals = table_admin.signal_table(connector)
    document, config_changed = table_admin.with_table(current, name, key, connector.get("topic.prefix", "cdc"))
    updated, captured = table_admin.with_captured(connector, [signals, name])
    publication = connector.get("publication.name", "dbz_publication")
    changes = []
    try:
        conn = psycopg.connect(args.source_dsn, autocommit=True, connect_timeout=10)
    except psycopg.OperationalError as exc:
        raise UnreachableError(f"cannot connect to the source database {describe_dsn(args.source_dsn)}: {exc}") from exc
    with conn:
        snapshot_key = table_admin.surrogate_key(source_table(conn, name), key)
        if connector.get("publication.autocreate.mode", "all_tables") == "disabled":
            for table in (signals, name):
                if not published(conn, publication, table):
                    raise table_admin.Refused(
                        f"publication.autocreate.mode=disabled and {table} is not in publication {publication!r}: "
                        f"run ALTER PUBLICATION {publication} ADD TABLE {table}"
                    )
        if config_changed:
            write_document(args.config, document)
            changes.append(f"table configuration {args.config}: added {name} with key {list(key)}")
        if captured:
            connect.put_config(updated)
            changes.append(f"connector {args.connector}: table.include.list += {', '.join(captured)}")
        for table in (signals, name):
            wait_until_published(conn, connect, publication, table, args.timeout)
        signal_id = signal_snapshot(conn, name, signals, snapshot_key)
        if signal_id:
            changes.append(f"incremental snapshot of {name} requested in {signals} (signal id {signal_id})")
    return changes


def _table_name(text: str) -> str:
    parts = text.split(".")
    if len(parts) != 2 or not all(IDENTIFIER.match(p) for p in parts):
        raise argparse.ArgumentTypeError(f"{text!r}: give schema.table, letters, digits and underscores")
    return text


def _key_columns(text: str) -> list[str]:
    columns = [c.strip() for c in text.split(",")]
    if not all(IDENTIFIER.match(c) for c in columns):
        raise argparse.ArgumentTypeError(f"{text!r}: give the key columns, comma-separated (order_id,line_no)")
    return columns


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="cdc-tables", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    adding = commands.add_parser("add", help="add a table to the configuration, the connector and Kafka")
    adding.add_argument("table", type=_table_name, help="schema.table")
    adding.add_argument("--key", required=True, type=_key_columns, help="key columns in order, comma-separated")
    env = os.environ.get
    adding.add_argument(
        "--config", type=Path, default=env("CDC_TABLES_CONFIG") or None, help="table configuration YAML file"
    )
    adding.add_argument("--connect-url", default=env("CDC_CONNECT_URL"), help="Kafka Connect's REST API")
    adding.add_argument("--connector", default=env("CDC_CONNECTOR", "cdc-demo"), help="the Debezium connector")
    adding.add_argument("--source-dsn", default=env("CDC_PG_DSN"), help="libpq DSN of the source database")
    adding.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for the connector")
    args = parser.parse_args(argv)
    for option, value, variable in (
        ("--config", args.config, "CDC_TABLES_CONFIG"),
        ("--connect-url", args.connect_url, "CDC_CONNECT_URL"),
        ("--source-dsn", args.source_dsn, "CDC_PG_DSN"),
    ):
        if not value:
            parser.error(f"{option} (or ${variable}) is required")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        changes = add(args)
    except ReconcileError as exc:
        print(f"cdc-tables: {args.table} not added: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE if isinstance(exc, UnreachableError) else EXIT_BAD_INPUT
    if not changes:
        print(f"{args.table}: already configured, captured and snapshot requested; nothing changed")
    for line in changes:
        print(line)
    if Path(os.environ.get("CDC_TABLES_CONFIG") or "").resolve() != args.config.resolve():
        print(f"the DAG's tasks and the jobs read {args.config} once CDC_TABLES_CONFIG={args.config.resolve()} is set")
    return EXIT_DONE


if __name__ == "__main__":
    sys.exit(main())
