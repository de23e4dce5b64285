"""The stack's executor: Airflow's LocalExecutor, its workers forked after the task libraries were imported."""

from __future__ import annotations

import configparser
import subprocess
import sys
from pathlib import Path

from cdc_reconcile.orchestration import executor

ROOT = Path(__file__).resolve().parents[2]


def test_the_repositorys_airflow_configuration_names_the_preloading_executor_and_airflow_loads_it() -> None:
    from airflow.executors.executor_loader import ExecutorLoader
    from airflow.executors.executor_utils import ExecutorName
    from airflow.executors.local_executor import LocalExecutor

    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(ROOT / "airflow.cfg")
    name = cfg.get("core", "executor")
    loaded, _ = ExecutorLoader.import_executor_cls(ExecutorName(module_path=name))
    assert loaded is executor.PreloadingLocalExecutor
    assert issubclass(loaded, LocalExecutor)


def test_the_preloaded_modules_are_the_task_libraries_and_every_module_of_the_package() -> None:
    modules = executor.task_modules()
    assert modules[: len(executor.TASK_LIBRARIES)] == list(executor.TASK_LIBRARIES)
    assert "great_expectations" in modules
    for job in ("compact_cdc", "reconcile", "snapshot_source", "validate"):
        assert f"cdc_reconcile.jobs.{job}" in modules
    assert "cdc_reconcile.suite" in modules and "cdc_reconcile.run" in modules


def test_a_module_that_cannot_be_imported_is_reported_and_the_others_still_load(caplog) -> None:
    failed = executor.preload(["json", "cdc_reconcile.no_such_module", "csv"])
    assert failed == ["cdc_reconcile.no_such_module"]
    assert "could not preload cdc_reconcile.no_such_module" in caplog.text


def test_preloading_leaves_no_thread_behind_so_the_workers_can_fork() -> None:
    """Forking a process with threads running copies their locks mid-use: the preload must start none."""
    code = (
        "import threading\n"
        "from cdc_reconcile.orchestration.executor import preload, task_modules\n"
        "assert preload(task_modules()) == []\n"
        "print(threading.active_count())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "1"
