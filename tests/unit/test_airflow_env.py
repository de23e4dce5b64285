"""The environment Airflow and dag.test() get: the connection ids and variable the DAG reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cdc_dev.stack.airflow import AIRFLOW_CFG, airflow_environment, venv_bin
from cdc_dev.stack.config import StackConfig


def test_connections_variable_and_per_checkout_settings(tmp_path: Path) -> None:
    config = StackConfig(
        run_dir=tmp_path, pg_port=5555, kafka_port=6666, airflow_port=7777, spark_connect_enabled=False
    )
    env = airflow_environment(config)

    spark = json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])
    assert (spark["conn_type"], spark["host"], spark["extra"]["spark-binary"]) == ("spark", "local[*]", "spark-submit")
    assert (venv_bin() / "spark-submit").exists(), "pyspark's spark-submit must be in the venv"
    assert env["PATH"].split(":")[0] == str(venv_bin())
    for conn_id, database in (("CDC_SOURCE", "cdc_demo"), ("CDC_STATE", "cdc_state")):
        conn = json.loads(env[f"AIRFLOW_CONN_{conn_id}"])
        assert (conn["conn_type"], conn["host"], conn["port"], conn["schema"]) == (
            "postgres",
            "127.0.0.1",
            5555,
            database,
        )
    kafka = json.loads(env["AIRFLOW_CONN_CDC_KAFKA"])
    assert (kafka["conn_type"], kafka["extra"]) == ("kafka", {"bootstrap.servers": "127.0.0.1:6666"})
    assert env["AIRFLOW_VAR_CDC_LAKE_ROOT"] == str(tmp_path / "lake")
    assert env["AIRFLOW_VAR_CDC_GX_ROOT"] == str(tmp_path / "great_expectations")
    assert env["AIRFLOW_VAR_CDC_DATA_DOCS_URL"] == f"http://127.0.0.1:{config.data_docs_port}/"

    assert env["AIRFLOW_CONFIG"] == str(AIRFLOW_CFG)
    assert env["AIRFLOW_HOME"] == str(tmp_path / "airflow")
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == "postgresql+psycopg2://airflow:airflow@127.0.0.1:5555/airflow"
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://127.0.0.1:7777/execution/"


def test_with_spark_connect_the_spark_tasks_are_its_clients(tmp_path: Path) -> None:
    env = airflow_environment(StackConfig(run_dir=tmp_path, spark_connect_enabled=True, spark_connect_port=8888))
    spark = json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])
    assert (spark["conn_type"], spark["host"], spark["port"]) == ("spark_connect", "127.0.0.1", 8888)


@pytest.mark.parametrize(("setting", "on_server"), [(None, True), ("on", True), ("off", False)])
def test_the_stack_runs_spark_tasks_on_its_spark_connect_server_unless_switched_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setting: str | None, on_server: bool
) -> None:
    if setting is None:
        monkeypatch.delenv("CDC_SPARK_CONNECT", raising=False)
    else:
        monkeypatch.setenv("CDC_SPARK_CONNECT", setting)
    spark = json.loads(airflow_environment(StackConfig(run_dir=tmp_path))["AIRFLOW_CONN_SPARK_DEFAULT"])
    assert spark["conn_type"] == ("spark_connect" if on_server else "spark")


def test_shared_keys_are_drawn_once_per_run_folder(tmp_path: Path) -> None:
    config = StackConfig(run_dir=tmp_path)
    first, second = airflow_environment(config), airflow_environment(config)
    for key in ("AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__CORE__FERNET_KEY", "AIRFLOW__API__SECRET_KEY"):
        assert first[key] == second[key] and len(first[key]) >= 32
    assert (tmp_path / "airflow" / "secrets.json").stat().st_mode & 0o077 == 0
