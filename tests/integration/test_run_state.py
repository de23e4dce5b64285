"""Suite outcomes and the repair audit in the real state database, and the ``attempt`` -> ``phase`` migration."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from cdc_reconcile import run_state
from cdc_reconcile.phase import Phase
from cdc_reconcile.state_store import StateSchemaMissing, ensure_state_schema
from cdc_reconcile.suite import SuiteOutcome

pytestmark = pytest.mark.integration

# The results table before the phase vocabulary: an integer attempt, 1 before repair and 2 after.
RESULTS_WITH_ATTEMPT = """
CREATE SCHEMA cdc_reconcile;
CREATE TABLE cdc_reconcile.expectation_results (
    id          bigserial   PRIMARY KEY,
    run_id      text        NOT NULL,
    table_name  text        NOT NULL,
    attempt     integer     NOT NULL DEFAULT 1,
    suite       text        NOT NULL,
    success     boolean     NOT NULL,
    results     jsonb       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX expectation_results_run ON cdc_reconcile.expectation_results (run_id, table_name, attempt);
"""


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def state(state_db: psycopg.Connection) -> psycopg.Connection:
    return state_db


@pytest.fixture
def without_state_schema(state_db: psycopg.Connection) -> Iterator[psycopg.Connection]:
    """No ``cdc_reconcile`` schema during the test; the session's own is moved aside and put back after,
    so the ranges and results other test modules recorded survive."""
    aside = f"cdc_reconcile_aside_{uuid.uuid4().hex[:8]}"
    existed = state_db.execute("SELECT 1 FROM pg_namespace WHERE nspname = 'cdc_reconcile'").fetchone() is not None
    if existed:
        state_db.execute(f"ALTER SCHEMA cdc_reconcile RENAME TO {aside}")
    try:
        yield state_db
    finally:
        state_db.execute("DROP SCHEMA IF EXISTS cdc_reconcile CASCADE")
        if existed:
            state_db.execute(f"ALTER SCHEMA {aside} RENAME TO cdc_reconcile")


def outcome(run_id: str, table: str, phase: Phase, *, missing: int) -> dict:
    """A suite outcome as the validate job records it (plain JSON values, so it reads back equal)."""
    check = {
        "dataset": "differences",
        "check": "row-level equality: no missing rows",
        "expectation": "expect_column_values_to_be_null",
        "kwargs": {"column": "missing_key"},
        "success": missing == 0,
        "unexpected_count": missing,
    }
    return SuiteOutcome(
        table=table,
        run_id=run_id,
        phase=phase.value,
        success=missing == 0,
        counts={"missing": missing, "extra": 0, "stale": 0},
        checks=[check],
    ).as_dict()


def audit_row(key: int, kind: str, *, dry_run: bool = False) -> dict:
    return {"key": json.dumps({"id": key}), "kind": kind, "before_hash": None, "after_hash": "h", "dry_run": dry_run}


def test_the_newest_outcome_of_each_phase_is_read_and_phases_are_kept_apart(state):
    run, table = unique("run"), unique("public.t")
    assert run_state.latest_suite_outcome(state, run, table, Phase.BEFORE_REPAIR) is None

    first = outcome(run, table, Phase.BEFORE_REPAIR, missing=3)
    rerun = outcome(run, table, Phase.BEFORE_REPAIR, missing=2)  # a cleared validate task ran again
    after = outcome(run, table, Phase.AFTER_REPAIR, missing=0)
    run_state.record_suite_outcome(state, first, Phase.BEFORE_REPAIR)
    run_state.record_suite_outcome(state, after, Phase.AFTER_REPAIR)
    run_state.record_suite_outcome(state, rerun, Phase.BEFORE_REPAIR)

    assert run_state.latest_suite_outcome(state, run, table, Phase.BEFORE_REPAIR) == rerun
    assert run_state.latest_suite_outcome(state, run, table, Phase.AFTER_REPAIR) == after
    assert run_state.latest_suite_outcome(state, run, unique("public.other"), Phase.BEFORE_REPAIR) is None
    assert run_state.latest_suite_outcome(state, unique("run"), table, Phase.AFTER_REPAIR) is None
    stored = state.execute(
        "SELECT phase, success FROM cdc_reconcile.expectation_results WHERE run_id = %s ORDER BY id", (run,)
    ).fetchall()
    assert stored == [("before_repair", False), ("after_repair", True), ("before_repair", False)]


def test_a_phase_is_taken_by_its_stored_name_and_an_unknown_one_is_refused(state):
    run, table = unique("run"), unique("public.t")
    recorded = outcome(run, table, Phase.AFTER_REPAIR, missing=0)
    run_state.record_suite_outcome(state, recorded, "after_repair")
    assert run_state.latest_suite_outcome(state, run, table, Phase.AFTER_REPAIR) == recorded
    with pytest.raises(ValueError, match="attempt"):
        run_state.record_suite_outcome(state, outcome(run, table, Phase.BEFORE_REPAIR, missing=1), "attempt")
    count = state.execute("SELECT count(*) FROM cdc_reconcile.expectation_results WHERE run_id = %s", (run,))
    assert count.fetchone() == (1,)


def test_the_repair_audit_of_a_run_is_replaced_not_added_to(state):
    run, table, other = unique("run"), unique("public.t"), unique("public.other")
    first = [audit_row(1, "missing"), audit_row(2, "missing"), audit_row(3, "stale"), audit_row(4, "redelivery")]
    assert run_state.replace_repair_audit(state, run, table, first) == 4
    assert run_state.replace_repair_audit(state, run, other, [audit_row(9, "extra")]) == 1
    assert run_state.audit_counts(state, run, table) == {"missing": 2, "redelivery": 1, "stale": 1}

    # a cleared reconcile task writes its audit again: the new rows stand alone
    again = [audit_row(1, "missing"), audit_row(5, "extra")]
    assert run_state.replace_repair_audit(state, run, table, iter(again)) == 2
    assert run_state.audit_counts(state, run, table) == {"extra": 1, "missing": 1}
    keys = state.execute(
        "SELECT key->>'id' FROM cdc_reconcile.repair_audit WHERE run_id = %s AND table_name = %s ORDER BY 1",
        (run, table),
    ).fetchall()
    assert keys == [("1",), ("5",)]
    assert run_state.audit_counts(state, run, other) == {"extra": 1}, "another table's audit is left alone"

    assert run_state.replace_repair_audit(state, run, table, []) == 0
    assert run_state.audit_counts(state, run, table) == {}
    assert run_state.audit_counts(state, unique("run"), table) == {}


def test_reading_or_writing_without_the_state_schema_says_how_to_create_it(without_state_schema):
    conn, run, table = without_state_schema, unique("run"), unique("public.t")
    with pytest.raises(StateSchemaMissing, match="ensure_state_schema"):
        run_state.latest_suite_outcome(conn, run, table, Phase.BEFORE_REPAIR)
    with pytest.raises(StateSchemaMissing, match="ensure_state_schema"):
        run_state.record_suite_outcome(conn, outcome(run, table, Phase.BEFORE_REPAIR, missing=1), Phase.BEFORE_REPAIR)
    with pytest.raises(StateSchemaMissing, match="ensure_state_schema"):
        run_state.audit_counts(conn, run, table)


def test_results_stored_with_an_attempt_number_are_migrated_to_phases(without_state_schema):
    conn, run, table = without_state_schema, unique("run"), unique("public.t")
    conn.execute(RESULTS_WITH_ATTEMPT)
    before = outcome(run, table, Phase.BEFORE_REPAIR, missing=2)
    after = outcome(run, table, Phase.AFTER_REPAIR, missing=0)
    for attempt, recorded in ((1, before), (2, after)):
        conn.execute(
            "INSERT INTO cdc_reconcile.expectation_results (run_id, table_name, attempt, suite, success, results) "
            "VALUES (%s, %s, %s, %s, %s, %s::jsonb)",
            (run, table, attempt, recorded["suite"], recorded["success"], json.dumps(recorded)),
        )

    ensure_state_schema(conn)
    ensure_state_schema(conn)  # the migration runs once; applying the DDL again changes nothing

    columns = {
        row[0]
        for row in conn.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = 'cdc_reconcile' AND table_name = 'expectation_results'"
        )
    }
    assert "phase" in columns and "attempt" not in columns
    rows = conn.execute(
        "SELECT phase, success FROM cdc_reconcile.expectation_results WHERE run_id = %s ORDER BY id", (run,)
    ).fetchall()
    assert rows == [("before_repair", False), ("after_repair", True)]
    assert run_state.latest_suite_outcome(conn, run, table, Phase.BEFORE_REPAIR) == before
    assert run_state.latest_suite_outcome(conn, run, table, Phase.AFTER_REPAIR) == after
    index = conn.execute(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = 'cdc_reconcile' AND indexname = 'expectation_results_run'"
    ).fetchone()
    assert index is not None and "phase" in index[0] and "attempt" not in index[0]
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute(
            "INSERT INTO cdc_reconcile.expectation_results (run_id, table_name, phase, suite, success, results) "
            "VALUES (%s, %s, '2', 's', true, '{}'::jsonb)",
            (run, table),
        )
    with pytest.raises(psycopg.errors.NotNullViolation):
        conn.execute(
            "INSERT INTO cdc_reconcile.expectation_results (run_id, table_name, suite, success, results) "
            "VALUES (%s, %s, 's', true, '{}'::jsonb)",
            (run, table),
        )
