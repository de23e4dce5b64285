"""Expectation results and the repair audit in the state database, keyed by run and table.

The Airflow tasks decide from these rows (repair or not, alert or not), so a cleared task reads what
its run recorded instead of recomputing it. Each suite outcome is stored with its :class:`Phase`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import psycopg

from .phase import Phase
from .state_store import state_schema_missing


def record_suite_outcome(conn: psycopg.Connection, outcome: Mapping[str, Any], phase: Phase) -> None:
    """Append one suite outcome (a re-run of the validate task appends again; readers take the newest)."""
    try:
        with conn.transaction():
            conn.execute(
                "INSERT INTO cdc_reconcile.expectation_results (run_id, table_name, phase, suite, success, results) "
                "VALUES (%s, %s, %s, %s, %s, %s::jsonb)",
                (
                    outcome["run_id"],
                    outcome["table"],
                    Phase(phase).value,
                    outcome["suite"],
                    bool(outcome["success"]),
                    json.dumps(outcome, default=str),
                ),
            )
    except psycopg.errors.UndefinedTable as exc:
        raise state_schema_missing(exc) from exc


def latest_suite_outcome(conn: psycopg.Connection, run_id: str, table: str, phase: Phase) -> dict[str, Any] | None:
    """The newest outcome recorded for this run, table and phase, or None."""
    try:
        with conn.transaction():
            row = conn.execute(
                "SELECT results FROM cdc_reconcile.expectation_results "
                "WHERE run_id = %s AND table_name = %s AND phase = %s ORDER BY id DESC LIMIT 1",
                (run_id, table, Phase(phase).value),
            ).fetchone()
    except psycopg.errors.UndefinedTable as exc:
        raise state_schema_missing(exc) from exc
    return None if row is None else row[0]


def replace_repair_audit(conn: psycopg.Connection, run_id: str, table: str, rows: Iterable[Mapping[str, Any]]) -> int:
    """Make the run's audit rows for ``table`` exactly ``rows`` (a repeated reconcile replaces, never adds)."""
    written = 0
    try:
        with conn.transaction():
            conn.execute(
                "DELETE FROM cdc_reconcile.repair_audit WHERE run_id = %s AND table_name = %s", (run_id, table)
            )
            with conn.cursor().copy(
                "COPY cdc_reconcile.repair_audit (run_id, table_name, key, kind, before_hash, after_hash, dry_run, "
                "stage) FROM STDIN"
            ) as copy:
                for row in rows:
                    copy.write_row(
                        (
                            run_id,
                            table,
                            row["key"],
                            row["kind"],
                            row["before_hash"],
                            row["after_hash"],
                            row["dry_run"],
                            row.get("stage"),
                        )
                    )
                    written += 1
    except psycopg.errors.UndefinedTable as exc:
        raise state_schema_missing(exc) from exc
    return written


def audit_counts(conn: psycopg.Connection, run_id: str, table: str) -> dict[str, int]:
    """Audit rows of the run by kind (redelivery, snapshot_rerun, missing, extra, stale)."""
    return {kind: sum(stages.values()) for kind, stages in audit_stages(conn, run_id, table).items()}


def audit_stages(conn: psycopg.Connection, run_id: str, table: str) -> dict[str, dict[str, int]]:
    """Audit rows of the run by kind, then by the stage where each arose (``attribution``)."""
    try:
        with conn.transaction():
            rows = conn.execute(
                "SELECT kind, coalesce(stage, 'unknown'), count(*) FROM cdc_reconcile.repair_audit "
                "WHERE run_id = %s AND table_name = %s GROUP BY 1, 2 ORDER BY 1, 2",
                (run_id, table),
            ).fetchall()
    except psycopg.errors.UndefinedTable as exc:
        raise state_schema_missing(exc) from exc
    found: dict[str, dict[str, int]] = {}
    for kind, stage, count in rows:
        found.setdefault(kind, {})[stage] = count
    return found


def record_pruned(conn: psycopg.Connection, runs: Iterable[str], table: str) -> None:
    """Record runs whose lake datasets retention removed (by their lake names; idempotent)."""
    try:
        with conn.transaction():
            for run in runs:
                conn.execute(
                    "INSERT INTO cdc_reconcile.pruned_runs (run_name, table_name) VALUES (%s, %s) "
                    "ON CONFLICT (run_name, table_name) DO NOTHING",
                    (run, table),
                )
    except psycopg.errors.UndefinedTable as exc:
        raise state_schema_missing(exc) from exc


def pruned_at(conn: psycopg.Connection, run: str, table: str) -> Any:
    """When retention removed the run's datasets (its lake name), or None."""
    try:
        with conn.transaction():
            row = conn.execute(
                "SELECT pruned_at FROM cdc_reconcile.pruned_runs WHERE run_name = %s AND table_name = %s",
                (run, table),
            ).fetchone()
    except psycopg.errors.UndefinedTable as exc:
        raise state_schema_missing(exc) from exc
    return row[0] if row else None
