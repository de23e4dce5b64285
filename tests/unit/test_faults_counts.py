"""The fault runner's independent counts: folding Debezium records, differences, duplicates by cause."""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pytest

from cdc_dev.faults.checks import (
    RawRecord,
    added_files,
    decode_decimal,
    differences,
    duplicates,
    event_positions,
    fold,
    uncommitted_files,
)
from cdc_dev.faults.cli import RUNNER_ENV, repetition_environment, scenario_names
from cdc_dev.faults.cli import main as cli_main
from cdc_dev.faults.harness import FaultRunner
from cdc_dev.faults.report import markdown, matrix
from cdc_dev.faults.result import ScenarioResult, compare
from cdc_dev.faults.scenarios import GROUPS, SCENARIOS, run_scenarios
from cdc_dev.stack import StackConfig
from cdc_dev.stack.airflow import airflow_environment


def money(value: str) -> str:
    unscaled = int(Decimal(value).scaleb(2))
    return base64.b64encode(unscaled.to_bytes(8, "big", signed=True)).decode()


def event(
    offset: int, key: int, op: str, tx: int, lsn: int, name: str = "n", balance: str = "1.00", snapshot: str = "true"
) -> RawRecord:
    after = None if op == "d" else {"id": key, "name": name, "email": None, "balance": money(balance)}
    source = {"txId": tx, "lsn": lsn, "snapshot": snapshot if op == "r" else "false"}
    value = {"schema": {}, "payload": {"op": op, "after": after, "source": source}}
    return RawRecord(0, offset, {"id": key}, value)


def test_decimal_decoding_is_exact_for_negative_and_zero():
    assert decode_decimal(money("-1234.56"), 2) == Decimal("-1234.56")
    assert decode_decimal(money("0"), 2) == Decimal("0")
    assert decode_decimal(None, 2) is None


def test_fold_applies_changes_in_range_on_top_of_the_start_state_and_skips_tombstones():
    start = {1: ("a", None, Decimal("1.00")), 2: ("b", None, Decimal("2.00"))}
    records = [
        event(0, 9, "c", 1, 10),  # before the range: already in the start state
        event(1, 1, "u", 2, 20, name="a2"),
        event(2, 2, "d", 3, 30),
        RawRecord(0, 3, {"id": 2}, None),  # tombstone
        event(4, 3, "c", 4, 40),
        event(5, 4, "c", 5, 50),  # after the sealed end
    ]
    state = fold(records, start, from_offsets={0: 1}, to_offsets={0: 5})
    assert state == {1: ("a2", None, Decimal("1.00")), 3: ("n", None, Decimal("1.00"))}


def test_differences_by_class():
    lake = {1: ("a", None, Decimal(1)), 2: ("b", None, Decimal(2)), 3: ("c", None, Decimal(3))}
    source = {1: ("a", None, Decimal(1)), 2: ("b!", None, Decimal(2)), 4: ("d", None, Decimal(4))}
    assert differences(lake, source) == {"missing": 1, "extra": 1, "stale": 1}


def test_duplicates_count_redeliveries_and_snapshot_reruns_only_inside_the_range():
    records = [
        event(0, 1, "r", 100, 5),
        event(1, 2, "r", 100, 5),
        event(2, 1, "r", 100, 5),  # same snapshot event again: a redelivery, before the range
        event(3, 1, "r", 200, 9),  # second snapshot round
        event(4, 2, "r", 200, 9),
        event(5, 1, "u", 300, 20),
        event(6, 1, "u", 300, 20),  # redelivery in the range
        event(7, 1, "u", 300, 20),  # past the end
    ]
    assert duplicates(records, {0: 3}, {0: 7}) == {"redelivery": 1, "snapshot_rerun": 2}
    assert duplicates(records, {0: 0}, {0: 8}) == {"redelivery": 3, "snapshot_rerun": 2}


def test_a_round_after_a_complete_round_is_no_snapshot_rerun():
    records = [
        event(0, 1, "r", 100, 5, snapshot="first"),
        event(1, 2, "r", 100, 5, snapshot="last_in_data_collection"),  # the round completed
        event(2, 1, "r", 200, 9, snapshot="first"),  # the connector snapshots the table again
        event(3, 2, "r", 200, 9, snapshot="last"),
    ]
    assert duplicates(records, {0: 0}, {0: 4}) == {"redelivery": 0, "snapshot_rerun": 0}


def test_compare_separates_false_alarms_from_misses():
    assert compare({"missing": 3, "stale": 1}, {"missing": 2, "extra": 4}) == (2, 4)
    assert compare({"redelivery": 5}, {"redelivery": 5}) == (0, 0)


def test_markdown_marks_a_detection_that_differs_from_the_independent_count():
    good = ScenarioResult("x", "X", injected={"kills": 1}, detected={"redelivery": 2}, independent={"redelivery": 2})
    good.repaired, good.repaired_ok, good.rows_lost, good.false_alarms, good.second_run_clean = (
        {"redelivery": 2},
        True,
        0,
        0,
        True,
    )
    bad = ScenarioResult("y", "Y", detected={"missing": 1}, independent={"missing": 2}, error="boom")
    good.lake_mismatches, good.missed = 0, 0
    table = markdown([good, bad])
    assert "| X | 1 | kills 1 | redelivery 2 | redelivery 2 | redelivery 2 | 0 | 0 | yes |" in table
    assert "missing 1 ❌" in table and "error: boom" in table
    assert good.passed and not bad.passed


def test_a_failed_check_fails_the_scenario_and_is_named_in_the_matrix():
    result = ScenarioResult("spark_kill", "6. S", detected={"redelivery": 4}, independent={"redelivery": 4})
    result.repaired, result.repaired_ok, result.rows_lost, result.lake_mismatches = {"redelivery": 4}, True, 0, 0
    result.false_alarms, result.missed, result.second_run_clean = 0, 0, True
    result.checks = {"task retried": True, "no half-written folder left": True}
    assert result.passed
    result.checks["no half-written folder left"] = False
    assert not result.passed
    assert "failed check: no half-written folder left ❌" in markdown([result])
    assert "task retried" not in markdown([result])


def test_event_positions_read_committed_rows_only(tmp_path):
    import pyarrow as pa
    from deltalake import write_deltalake

    def rows(pairs):
        return pa.table(
            {"partition": [p for p, _ in pairs], "offset": [o for _, o in pairs], "run": ["a"] * len(pairs)}
        )

    write_deltalake(str(tmp_path), rows([(0, 5), (0, 6)]))
    write_deltalake(str(tmp_path), rows([(0, 7), (1, 0)]), mode="append")
    (tmp_path / "part-killed-writer.parquet").write_bytes(b"PAR1 never committed")
    assert sorted(event_positions(tmp_path)) == [(0, 5), (0, 6), (0, 7), (1, 0)]
    assert uncommitted_files(tmp_path) == [tmp_path / "part-killed-writer.parquet"]
    assert event_positions(tmp_path / "absent") == []


def test_parallel_repetitions_get_their_own_ports_and_run_folders(monkeypatch):
    for key in (*RUNNER_ENV, "CDC_RUN_DIR"):
        monkeypatch.delenv(key, raising=False)
    first, third = repetition_environment(1), repetition_environment(3)
    assert {k: first[k] for k in RUNNER_ENV} == RUNNER_ENV
    assert third["CDC_PG_PORT"] == "27492" and third["CDC_KAFKA_PORT"] == "31152"
    assert first["CDC_RUN_DIR"].endswith("/.run/faults") and third["CDC_RUN_DIR"].endswith("/.run/faults-3")
    ports = [int(env[k]) for env in (first, repetition_environment(2), third) for k in RUNNER_ENV]
    assert len(set(ports)) == len(ports)


def test_matrix_has_one_line_per_scenario_over_its_repetitions():
    def result(scenario: str, title: str, repetition: int, found: int, seconds: float) -> ScenarioResult:
        r = ScenarioResult(scenario, title, repetition, injected={"kills": 1}, seconds=seconds)
        r.detected = r.independent = {"redelivery": found}
        r.repaired, r.repaired_ok, r.rows_lost, r.lake_mismatches = {"redelivery": found}, True, 0, 0
        r.false_alarms, r.missed, r.second_run_clean = 0, 0, True
        return r

    figures = ((1, 204, 90), (2, 204, 70), (3, 9, 80))
    runs = [result("redelivery_eos_off", "3. R", n, found, s) for n, found, s in figures]
    runs.insert(0, result("replication_kill", "1. K", 1, 0, 50))
    runs[-1].second_run_clean = False
    table = matrix(runs).splitlines()
    assert [line.split(" | ")[0] for line in table[2:]] == ["| 1. K", "| 3. R"]
    assert "| 3. R | 2 of 3 | kills 1 | redelivery 204 / redelivery 204 / redelivery 9 |" in table[3]
    assert "| yes / yes / no ❌ | 80 |" in table[3]


def test_scenario_selection_expands_groups_in_run_order():
    assert scenario_names("all") == list(SCENARIOS)
    assert scenario_names("cluster") == ["worker_kill", "datanode_kill", "master_restart"]
    assert scenario_names("master_restart, lost_events") == ["lost_events", "master_restart"]
    assert scenario_names("local") == [n for n in SCENARIOS if n not in GROUPS["cluster"]]
    with pytest.raises(ValueError, match="unknown scenario 'worker'"):
        scenario_names("lost_events,worker")


def test_added_files_are_the_adds_of_every_commit_unquoted():
    commits = [
        '{"commitInfo":{"operation":"WRITE"}}\n{"add":{"path":"run=r%201/part-0.parquet","size":1}}\n',
        '{"remove":{"path":"run=r%201/part-0.parquet"}}\n{"add":{"path":"part-1.parquet","size":2}}\n\n',
    ]
    assert added_files(commits) == {"run=r 1/part-0.parquet", "part-1.parquet"}


def test_a_cluster_scenario_is_refused_on_a_runner_without_the_cluster(tmp_path, monkeypatch):
    monkeypatch.setenv("CDC_RUN_DIR", str(tmp_path))
    runner = FaultRunner(StackConfig(), log=lambda _: None)
    [result] = run_scenarios(runner, ["worker_kill"])
    assert not result.passed and "needs a runner with cluster=True" in result.error


def test_dag_runs_of_the_cluster_runner_submit_to_the_master_and_write_to_hdfs(tmp_path, monkeypatch):
    monkeypatch.setenv("CDC_RUN_DIR", str(tmp_path))
    config = StackConfig()
    assert FaultRunner(config).dag_environment() == {}
    env = FaultRunner(config, cluster=True).dag_environment()
    assert env["AIRFLOW_VAR_CDC_LAKE_ROOT"] == f"{config.hdfs_lake_uri}/faults"
    assert json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])["host"] == config.spark_master_url
    defaults = (Path(env["SPARK_CONF_DIR"]) / "spark-defaults.conf").read_text().splitlines()
    assert f"spark.master {config.spark_master_url}" in defaults
    assert not env["AIRFLOW_VAR_CDC_GX_ROOT"].startswith("hdfs:")


def test_change_data_files_of_a_commit_count_as_committed(tmp_path):
    log = tmp_path / "_delta_log"
    log.mkdir()
    (log / "00000000000000000000.json").write_text(
        '{"add":{"path":"part-1.parquet"}}\n{"cdc":{"path":"_change_data/cdc-1.parquet"}}\n'
    )
    for name in ("part-1.parquet", "_change_data/cdc-1.parquet", "part-2.parquet"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(b"PAR1")
    assert uncommitted_files(tmp_path) == [tmp_path / "part-2.parquet"]


def test_on_spark_connect_the_dag_runs_on_the_server_and_driver_scenarios_are_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CDC_RUN_DIR", str(tmp_path))
    config = replace(StackConfig(), spark_connect_enabled=True)
    assert not FaultRunner(config).config.spark_connect_enabled, "by default every task spark-submits a driver"
    runner = FaultRunner(config, log=lambda _: None, spark_connect=True)
    connection = json.loads(airflow_environment(runner.config)["AIRFLOW_CONN_SPARK_DEFAULT"])
    assert (connection["conn_type"], connection["port"]) == ("spark_connect", config.spark_connect_port)
    [result] = run_scenarios(runner, ["spark_kill"])
    assert not result.passed and "needs a Spark task's own driver" in result.error
    with pytest.raises(ValueError, match="cannot run on Spark Connect"):
        FaultRunner(config, cluster=True, spark_connect=True)
    with pytest.raises(SystemExit):
        cli_main(["run", "--scenario", "lost_events,broker_restart", "--spark-connect", "--out", str(tmp_path)])
    assert "--spark-connect: broker_restart kill or watch a Spark task's own driver" in capsys.readouterr().err
