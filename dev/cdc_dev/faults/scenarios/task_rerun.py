"""Scenario 7: ``compact_cdc`` run again for a finished DAG run: the lake must not change (no double append).

No DAG runs here, so nothing is detected or repaired and there is no second run: the figures are the
lake's changed files (none expected), and the run's repair audit, which must still be empty.
"""

from __future__ import annotations

import os
import subprocess
import time

from ...stack import StackError
from ...stack.airflow import airflow_environment, venv_bin
from ...stack.dag_runs import DAG_ID
from ..checks import TABLE, table_contents
from ..harness import GROUP, FaultRunner
from ..result import ScenarioResult


def task_rerun(runner: FaultRunner) -> ScenarioResult:
    """``airflow tasks test`` of ``compact_cdc`` for the last clean run; each dataset compared by rows."""
    result = ScenarioResult("task_rerun", "7. compact_cdc re-run for the same DAG run", has_second_run=False)
    began = time.monotonic()
    runner.ensure_baseline()
    run_id = runner.last_clean_run
    if run_id is None:
        raise StackError("task_rerun needs a finished clean DAG run; the baseline run was not clean")
    config = runner.config
    base = config.lake_root / TABLE
    before = table_contents(base)
    task_id = f"{GROUP}.compact_cdc"
    log = config.logs_dir / f"faults-task-rerun-{time.strftime('%Y%m%dT%H%M%S')}.log"
    with log.open("w") as out:
        done = subprocess.run(
            [str(venv_bin() / "airflow"), "tasks", "test", DAG_ID, task_id, run_id, "--map-index", "0"],
            env={**os.environ, **airflow_environment(config)},
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=1800,
            check=False,
            cwd=str(config.run_dir),
        )
    after = table_contents(base)
    changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
    result.run_ids = [run_id]
    result.run_states = [f"tasks test exit {done.returncode}"]
    result.injected = {"task_reruns": 1, "task": task_id}
    result.detected = {"changed_datasets": len(changed)}
    result.independent = {"changed_datasets": 0}
    result.notes.append(f"{len(before)} datasets compared row by row (delta-rs); log {log}")
    if changed:
        result.notes.append(f"changed: {changed[:10]}")
    if done.returncode != 0:
        result.error = f"airflow tasks test exited {done.returncode}; see {log}"
    result.false_alarms, result.missed = 0, 0
    # nothing to repair: confirmed by the run's audit, which the re-run must have left empty
    result.repaired = runner.audit(run_id)
    result.repaired_ok = not result.repaired
    runner.check_lake(result)
    result.seconds = round(time.monotonic() - began, 1)
    return result
