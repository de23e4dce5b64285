"""The fault matrix as tests: each scenario of ``cdc_dev.faults`` on a real stack of its own.

Every test asserts what the project asks of a fault: the suite's counts equal an independent count
taken straight from PostgreSQL and Kafka (by class), the repair fixed it, the next run is clean, no
committed source row is missing from the lake table, and no false alarm. Each of these must have been
computed: a figure the runner never filled in fails like a wrong one. All are ``slow`` (each runs
two DAG runs, 4-10 minutes on 2 cores); ``bash scripts/faults.sh`` runs them 3 times as a command.

The module runs its own stack (run folder ``.run/faults-test``, ports below, each overridable by
``CDC_TEST_FAULTS_*``), because the runner starts from empty data and must not destroy the session
stack the other integration modules share. Scenarios run in file order on that one stack: the
initial-snapshot kill needs the fresh stack, the task re-run needs a finished clean run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import asdict

import pytest

from cdc_dev.faults.harness import FaultRunner
from cdc_dev.faults.result import ScenarioResult
from cdc_dev.faults.scenarios import run_scenarios
from cdc_dev.stack import StackConfig
from cdc_dev.stack.config import REPO_ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FAULTS_TEST_ENV = {
    "CDC_RUN_DIR": os.environ.get("CDC_TEST_FAULTS_RUN_DIR", str(REPO_ROOT / ".run" / "faults-test")),
    "CDC_PG_PORT": os.environ.get("CDC_TEST_FAULTS_PG_PORT", "25512"),
    "CDC_KAFKA_PORT": os.environ.get("CDC_TEST_FAULTS_KAFKA_PORT", "29172"),
    "CDC_KAFKA_CONTROLLER_PORT": os.environ.get("CDC_TEST_FAULTS_KAFKA_CONTROLLER_PORT", "29173"),
    "CDC_KAFKA_SASL_PORT": os.environ.get("CDC_TEST_FAULTS_KAFKA_SASL_PORT", "29174"),
    "CDC_CONNECT_PORT": os.environ.get("CDC_TEST_FAULTS_CONNECT_PORT", "28163"),
    "CDC_AIRFLOW_PORT": os.environ.get("CDC_TEST_FAULTS_AIRFLOW_PORT", "28197"),
    "CDC_DATA_DOCS_PORT": os.environ.get("CDC_TEST_FAULTS_DATA_DOCS_PORT", "28652"),
    "CDC_AIRFLOW_SCHEDULES": "off",
}


@pytest.fixture(scope="module")
def runner() -> Iterator[FaultRunner]:
    yield from runner_in(FAULTS_TEST_ENV)


def runner_in(env: dict[str, str], *, cluster: bool = False) -> Iterator[FaultRunner]:
    """A fault runner on a fresh stack in ``env`` (ports, run folder), stopped and ``env`` undone after."""
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    fault_runner = FaultRunner(StackConfig(), cluster=cluster)
    try:
        fault_runner.start()
        yield fault_runner
    finally:
        try:
            fault_runner.stop()
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def run(runner: FaultRunner, name: str, artifacts) -> ScenarioResult:
    """Run one scenario (after the baseline run it needs, if any) and keep its record as an artifact."""
    results = run_scenarios(runner, [name])
    folder = artifacts / "faults"
    folder.mkdir(exist_ok=True)
    (folder / f"pytest-{name}.json").write_text(json.dumps([asdict(r) for r in results], indent=2, default=str))
    for earlier in results[:-1]:  # a baseline run: nothing injected, so nothing may be found
        assert_outcome(earlier)
    return results[-1]


def assert_outcome(result: ScenarioResult, *, second_run: bool = True) -> None:
    """What the project asks of one fault; ``second_run`` says whether the scenario runs the DAG twice."""
    assert result.error is None, result.error
    assert result.detected == result.independent, (result.detected, result.independent)
    assert result.false_alarms == 0 and result.missed == 0, result
    assert result.repaired_ok is True, (result.repaired_ok, result.repaired, result.detected)
    assert result.has_second_run is second_run, result
    if second_run:
        assert result.second_run_clean is True, (result.second_run_clean, result.run_states)
    else:
        assert result.second_run_clean is None, result.run_states
    assert result.rows_lost == 0, f"{result.rows_lost} committed source rows missing from the lake table"
    assert result.lake_mismatches == 0, f"{result.lake_mismatches} lake rows differ from the source"
    assert all(result.checks.values()), (result.checks, result.notes)
    assert result.passed, result.failures()


def test_worker_killed_during_the_initial_snapshot(runner, artifacts):
    result = run(runner, "snapshot_kill", artifacts)
    assert result.injected["snapshot_rounds"] >= 2, result.injected
    assert result.independent["snapshot_rerun"] == result.injected["committed_reads_of_killed_round"] > 0
    assert_outcome(result)


def test_lost_events_are_found_by_class_and_repaired(runner, artifacts):
    result = run(runner, "lost_events", artifacts)
    assert {c: result.independent[c] for c in ("missing", "stale", "extra")} == {"missing": 4, "stale": 3, "extra": 2}
    assert_outcome(result)


def test_worker_killed_while_streaming_without_exactly_once(runner, artifacts):
    result = run(runner, "redelivery_eos_off", artifacts)
    assert_outcome(result)


def test_compact_task_rerun_for_the_same_run_changes_nothing(runner, artifacts):
    result = run(runner, "task_rerun", artifacts)
    assert result.detected == {"changed_files": 0}, result.notes
    assert result.repaired == {}, result.repaired  # the re-run repaired nothing: the run's audit is still empty
    assert_outcome(result, second_run=False)


def test_spark_job_killed_mid_write_then_retried(runner, artifacts):
    result = run(runner, "spark_kill", artifacts)
    assert result.injected["redelivered_records"] == result.independent["redelivery"] > 0, result.injected
    assert result.checks and all(result.checks.values()), result.notes
    assert_outcome(result)


def test_broker_restarted_while_streaming_and_during_compaction(runner, artifacts):
    result = run(runner, "broker_restart", artifacts)
    assert result.injected["broker_restarts"] == 2, result.notes
    assert result.checks and all(result.checks.values()), result.notes
    assert_outcome(result)


def test_replication_connection_killed_under_load_with_exactly_once(runner, artifacts):
    result = run(runner, "replication_kill", artifacts)
    assert result.injected["replication_connections_killed"] >= 2, result.injected
    assert_outcome(result)


def test_worker_killed_mid_transaction_with_exactly_once(runner, artifacts):
    result = run(runner, "aborted_eos_on", artifacts)
    # aborted records sit in the log but a read_committed pipeline never sees them: nothing to find
    assert result.independent["redelivery"] == 0, result.independent
    assert_outcome(result)
