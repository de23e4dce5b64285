"""A fault scenario's record passes only on figures that were computed: never-computed fails like wrong."""

from __future__ import annotations

import json

import pytest

from cdc_dev.faults.report import load_results, markdown, save_results
from cdc_dev.faults.result import ScenarioResult


def complete(**changes) -> ScenarioResult:
    """A record of a scenario that found two redeliveries, repaired them and ran clean the second time."""
    result = ScenarioResult("redelivery_eos_off", "3. R", injected={"worker_kills": 1})
    result.detected = result.independent = result.repaired = {"redelivery": 2}
    result.repaired_ok, result.second_run_clean = True, True
    result.rows_lost = result.lake_mismatches = result.false_alarms = result.missed = 0
    for name, value in changes.items():
        setattr(result, name, value)
    return result


def test_a_complete_record_passes():
    assert complete().failures() == []
    assert complete().passed


@pytest.mark.parametrize(
    ("never_computed", "named"),
    [
        ("repaired_ok", "repair never checked"),
        ("second_run_clean", "second run never run"),
        ("rows_lost", "committed source rows missing from the lake table: never counted"),
        ("lake_mismatches", "lake rows that differ from the source: never counted"),
        ("false_alarms", "false alarms: never counted"),
        ("missed", "misses: never counted"),
    ],
)
def test_a_figure_never_computed_fails_the_scenario(never_computed, named):
    result = complete(**{never_computed: None})
    assert not result.passed
    assert [f for f in result.failures() if f.startswith(named)], result.failures()


def test_a_failed_repair_or_second_run_fails_the_scenario():
    assert "repair failed" in complete(repaired_ok=False).failures()[0]
    assert "second run not clean" in complete(second_run_clean=False).failures()[0]
    assert complete(rows_lost=3).failures() == ["3 committed source rows missing from the lake table"]


def test_a_scenario_without_a_second_run_passes_only_if_it_says_so():
    rerun = complete(has_second_run=False, second_run_clean=None)
    assert rerun.passed
    assert not complete(has_second_run=False, second_run_clean=False).passed
    assert not complete(has_second_run=False, repaired_ok=None).passed  # nothing to repair is still checked


def test_a_record_made_from_an_exception_fails_and_shows_what_is_missing():
    broken = ScenarioResult("lost_events", "lost_events", error="StackError: kafka: not ready after 180s.")
    assert not broken.passed
    assert broken.failures()[0] == "error: StackError: kafka: not ready after 180s."
    line = markdown([broken]).splitlines()[-1]
    assert "not checked ❌" in line and "not run ❌" in line and "error: StackError" in line


def test_the_matrix_shows_computed_figures_plainly_and_marks_the_missing_ones():
    table = markdown([complete(), complete(has_second_run=False, second_run_clean=None), complete(repaired_ok=None)])
    lines = table.splitlines()[2:]
    assert "| redelivery 2 | 0 | 0 | yes |" in lines[0]
    assert "| redelivery 2 | 0 | 0 | n/a |" in lines[1]
    assert "| not checked ❌ | 0 | 0 | yes |" in lines[2]


def test_saved_results_load_back_with_the_same_verdict(tmp_path):
    results = [complete(), complete(has_second_run=False, second_run_clean=None), complete(second_run_clean=None)]
    save_results(tmp_path, "stamp", results, machine={"cpus": 2})
    document = json.loads((tmp_path / "stamp.json").read_text())
    assert document["machine"] == {"cpus": 2}
    assert [r["passed"] for r in document["results"]] == [True, True, False]
    assert [r.passed for r in load_results(tmp_path / "stamp.json")] == [True, True, False]
    assert (tmp_path / "latest.md").read_text() == (tmp_path / "stamp.md").read_text()
