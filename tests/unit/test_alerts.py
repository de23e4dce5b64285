"""What an alert says: its title by severity, counts by class, failed checks per phase, where to look."""

from __future__ import annotations

import pytest

from cdc_reconcile.orchestration.alerts import CRITICAL, WARNING, ReconciliationNotifier, alert_message
from cdc_reconcile.phase import Phase
from cdc_reconcile.suite import SuiteOutcome

DAG_ID = "cdc_reconciliation"
RUN_ID = "manual__2026-01-01T00:00:00+00:00"
TABLE = "public.customers"
DOCS = "/lake/great_expectations/gx/uncommitted/data_docs/local_site/index.html"
# the suite's counts: every class, zeroes included, plus figures that are not a class of difference
COUNTS = {
    "missing": 2,
    "extra": 0,
    "stale": 1,
    "redelivery": 3,
    "snapshot_rerun": 0,
    "snapshot_rows": 1000,
    "unrepresentable": 0,
}
MISSING_ROWS = {
    "dataset": "differences",
    "check": "row-level equality: no missing rows",
    "expectation": "expect_column_values_to_be_null",
    "kwargs": {"column": "missing_key"},
    "success": False,
    "element_count": 3,
    "unexpected_count": 2,
    "samples": ['{"id":7}', '{"id":9}'],
}
ROW_COUNT = {
    "dataset": "lake_as_of",
    "check": "row-count parity as of the snapshot",
    "expectation": "expect_table_row_count_to_equal",
    "kwargs": {"value": 1000},
    "success": False,
    "observed_value": 998,
}
KEY_UNIQUE = {
    "dataset": "lake_table",
    "check": "primary-key uniqueness",
    "expectation": "expect_column_values_to_be_unique",
    "kwargs": {"column": "id"},
    "success": True,
    "element_count": 998,
    "unexpected_count": 0,
}


def suite_outcome(phase: Phase, checks: list[dict], counts: dict[str, int] | None = None) -> dict:
    """A suite outcome as the validate job stores it and the DAG's tasks read it back."""
    return SuiteOutcome(
        table=TABLE,
        run_id=RUN_ID,
        phase=phase.value,
        success=all(c["success"] for c in checks),
        counts=dict(counts or COUNTS),
        checks=checks,
        data_docs=DOCS,
    ).as_dict()


def message(severity: str, outcome: dict | None, error: str | None = None) -> dict:
    return alert_message(
        severity, dag_id=DAG_ID, run_id=RUN_ID, task_id="reconcile_table.confirm_repair", outcome=outcome, error=error
    )


def repaired_outcome() -> dict:
    """What confirm_repair pushes when the suite failed and the repair fixed it."""
    before = suite_outcome(Phase.BEFORE_REPAIR, [ROW_COUNT, MISSING_ROWS, KEY_UNIQUE])
    after = suite_outcome(Phase.AFTER_REPAIR, [{**MISSING_ROWS, "success": True, "unexpected_count": 0}])
    return {
        "table": TABLE,
        "found": before["counts"],
        "repaired": {"missing": 2, "stale": 1, "redelivery": 3, "extra": 0},
        "audit": {"missing": 2, "stale": 1, "redelivery": 3},
        Phase.BEFORE_REPAIR.value: before,
        Phase.AFTER_REPAIR.value: after,
        "data_docs": DOCS,
    }


def test_a_repaired_run_is_a_warning_with_counts_by_class_and_no_zeroes():
    alert = message(WARNING, repaired_outcome())
    assert alert["severity"] == WARNING
    assert alert["title"] == f"[WARNING] {DAG_ID} {TABLE}: the suite failed and repair fixed it"
    assert alert["found"] == {"missing": 2, "stale": 1, "redelivery": 3}
    assert alert["repaired"] == {"missing": 2, "stale": 1, "redelivery": 3}
    lines = alert["text"].splitlines()
    assert lines[:4] == [
        alert["title"],
        f"run: {RUN_ID}",
        "found: missing 2, stale 1, redelivery 3",
        "repaired: missing 2, stale 1, redelivery 3",
    ]
    assert (alert["table"], alert["dag_id"], alert["run_id"]) == (TABLE, DAG_ID, RUN_ID)


def test_failed_checks_are_listed_under_their_phase_with_counts_and_sample_keys():
    text = message(WARNING, repaired_outcome())["text"]
    assert "failed checks (before repair):" in text
    assert "failed checks (after repair):" not in text, "the suite passed after repair"
    listed = text.split("failed checks (before repair):\n", 1)[1].splitlines()[:2]
    assert listed == [
        "  lake_as_of: row-count parity as of the snapshot: observed 998",
        '  differences: row-level equality: no missing rows: 2 unexpected, e.g. ["{\\"id\\":7}", "{\\"id\\":9}"]',
    ]
    assert "primary-key uniqueness" not in text, "a passed check is not listed"


def test_a_suite_still_failing_after_repair_is_critical_and_lists_both_phases_in_order():
    outcome = repaired_outcome()
    outcome[Phase.AFTER_REPAIR.value] = suite_outcome(Phase.AFTER_REPAIR, [ROW_COUNT, KEY_UNIQUE])
    outcome["reason"] = "the suite still fails after repair"
    alert = message(CRITICAL, outcome, error="public.customers: the suite still fails after repair")
    assert alert["title"] == f"[CRITICAL] {DAG_ID} {TABLE}: the suite still fails after repair"
    lines = alert["text"].splitlines()
    before, after = lines.index("failed checks (before repair):"), lines.index("failed checks (after repair):")
    assert before < after
    assert lines[after + 1 :] == [
        "  lake_as_of: row-count parity as of the snapshot: observed 998",
        "error: public.customers: the suite still fails after repair",
        f"Trend report: {DOCS.replace('index.html', 'cdc_trends.html')}#table-{TABLE}",
        f"Data Docs: {DOCS}",
    ]


def test_a_check_only_failure_names_its_reason_and_has_nothing_repaired():
    before = suite_outcome(Phase.BEFORE_REPAIR, [MISSING_ROWS])
    outcome = {
        "table": TABLE,
        "reason": "the suite failed; check-only mode, nothing repaired",
        "found": before["counts"],
        Phase.BEFORE_REPAIR.value: before,
        "data_docs": DOCS,
    }
    alert = message(CRITICAL, outcome)
    assert alert["title"] == f"[CRITICAL] {DAG_ID} {TABLE}: the suite failed; check-only mode, nothing repaired"
    assert alert["repaired"] == {}
    assert not any(line.startswith("repaired:") for line in alert["text"].splitlines())
    assert not any(line.startswith("error:") for line in alert["text"].splitlines())
    assert alert["text"].splitlines()[-1] == f"Data Docs: {DOCS}"


def test_a_task_that_failed_without_an_outcome_names_the_task_and_its_error():
    alert = message(CRITICAL, None, error="cannot connect to the state database 127.0.0.1:5432/state")
    assert alert["title"] == f"[CRITICAL] {DAG_ID}: task reconcile_table.confirm_repair failed"
    assert alert["text"].splitlines() == [
        alert["title"],
        f"run: {RUN_ID}",
        "error: cannot connect to the state database 127.0.0.1:5432/state",
    ]
    assert (alert["table"], alert["found"], alert["repaired"], alert["data_docs"], alert["report"]) == (
        None,
        {},
        {},
        None,
        None,
    )


def test_a_failure_outside_the_classes_lists_its_check_but_no_counts():
    schema = {**KEY_UNIQUE, "check": "schema", "expectation": "expect_table_columns_to_match_set", "success": False}
    del schema["unexpected_count"], schema["element_count"]
    zeroes = {"missing": 0, "extra": 0, "stale": 0, "redelivery": 0, "snapshot_rerun": 0, "snapshot_rows": 5}
    before = suite_outcome(Phase.BEFORE_REPAIR, [schema], counts=zeroes)
    alert = message(CRITICAL, {"table": TABLE, "found": before["counts"], Phase.BEFORE_REPAIR.value: before})
    assert alert["found"] == {}
    assert alert["text"].splitlines() == [
        f"[CRITICAL] {DAG_ID}: task reconcile_table.confirm_repair failed",
        f"run: {RUN_ID}",
        "failed checks (before repair):",
        "  lake_table: schema: failed",
    ]


def test_the_notifier_refuses_a_severity_it_has_no_title_for():
    with pytest.raises(ValueError, match="severity must be 'warning' or 'critical', got 'info'"):
        ReconciliationNotifier("info")
