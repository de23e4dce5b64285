"""Scenario 6: the compaction's Spark job ``kill -9``-ed while it writes a dataset; Airflow retries the task.

The range holds redelivered records too, so the retried compaction must still find each once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Any

from ...stack.process import wait_until
from ...stack.topics import write_again
from ..harness import GROUP, FaultRunner
from ..result import ScenarioResult


def spark_kill(runner: FaultRunner) -> ScenarioResult:
    """40 records redelivered, then ``compact_cdc`` killed mid-write during the first DAG run."""
    result = ScenarioResult("spark_kill", "6. Spark job kill -9 mid-write, task retried")
    runner.ensure_baseline()
    start_state, start_offsets = runner.begin()
    with runner.loading(rate=150, seed=19):
        runner.progress(600)
    runner.settle()
    redelivered = redeliver(runner, 40)
    killed: dict[str, Any] = {}
    first = runner.measure(
        result,
        independent_of=runner.independent_from(start_state, start_offsets),
        during=lambda dag: killed.update(kill_spark_job_mid_write(runner, "compact_cdc", dag)),
    )
    tries = first.tries.get(f"{GROUP}.compact_cdc[0]", 0)
    events = runner.events_match_kafka(first.run_id)
    leftovers = runner.stages()
    result.injected = {"spark_jobs_killed": 1, "redelivered_records": redelivered}
    result.checks = {
        "task retried": tries >= 2,
        "each record of the range once in events": events["extra_copies"] == 0 and events["absent"] == 0,
    }
    result.notes.append(
        f"killed compact_cdc while writing {killed.get('writing')}; tries {tries}; events {events}; "
        f"{len(leftovers)} uncommitted files left for VACUUM (no commit names them, so no reader sees them)"
    )
    return result


def kill_spark_job_mid_write(runner: FaultRunner, job: str, dag: threading.Thread) -> dict[str, Any]:
    """``kill -9`` ``job`` once it has written data files no commit names yet; returns what was killed where."""
    pids, stages = runner.wait_writing(dag, job)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not set(pids) & set(runner.spark_job_pids(job)), timeout=30, what=f"{job} gone", interval=0.5)
    runner.log(f"  killed {job} (pids {pids}) while writing {stages}")
    return {"pids": pids, "writing": stages}


def redeliver(runner: FaultRunner, count: int) -> int:
    """Write the topic's last ``count`` committed change events again: a redelivery."""
    return write_again(runner.config.bootstrap_servers, runner.topic, count)
