"""``cdc-stack airflow-env`` and ``cdc-stack airflow``: the Airflow CLI with the stack's environment."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from cdc_dev.stack import cli
from cdc_dev.stack.airflow import airflow_environment
from cdc_dev.stack.config import StackConfig


@pytest.fixture
def stack_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StackConfig:
    monkeypatch.setenv("CDC_RUN_DIR", str(tmp_path))
    monkeypatch.setenv("CDC_PG_PORT", "25999")
    monkeypatch.setenv("CDC_AIRFLOW_PORT", "28999")
    monkeypatch.setenv("CDC_ALERTS_WEBHOOK", "http://127.0.0.1:9/alerts?team=data&x='y'")
    return StackConfig()


def test_airflow_env_prints_the_stack_environment_as_export_lines(stack_settings, capsys) -> None:
    assert cli.main(["airflow-env"]) == 0
    printed = capsys.readouterr().out

    exported = {}
    for line in printed.splitlines():
        keyword, assignment = shlex.split(line)
        assert keyword == "export"
        name, _, value = assignment.partition("=")
        exported[name] = value
    assert exported == airflow_environment(stack_settings)
    assert exported["AIRFLOW_HOME"] == str(stack_settings.airflow_home)
    assert exported["AIRFLOW__API__BASE_URL"] == "http://127.0.0.1:28999/"
    assert "@127.0.0.1:25999/airflow" in exported["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]


def test_a_shell_reads_the_exports_back_unchanged(stack_settings, capsys) -> None:
    cli.main(["airflow-env"])
    printed = capsys.readouterr().out
    shell = subprocess.run(
        ["bash", "-c", printed + '\nprintf "%s" "$AIRFLOW_CONN_CDC_ALERTS"'],
        capture_output=True,
        text=True,
        check=True,
    )
    assert shell.stdout == airflow_environment(stack_settings)["AIRFLOW_CONN_CDC_ALERTS"]


def test_airflow_runs_the_venvs_airflow_with_that_environment(stack_settings, capfd) -> None:
    code = cli.main(["airflow", "--", "config", "get-value", "api", "base_url"])
    assert code == 0, capfd.readouterr().err
    assert capfd.readouterr().out.strip().splitlines()[-1] == "http://127.0.0.1:28999/"
