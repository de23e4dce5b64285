"""Scenarios 9-11, faults of the Spark cluster and HDFS: the DAG's Spark tasks submit to the stack's
standalone cluster (client mode) and the lake is on its HDFS (``FaultRunner(cluster=True)``).

Each injects one crash a platform team sees, then starts the crashed daemon again as a supervisor
(systemd, Kubernetes) would. The run must retry or fail clearly; the lake must never show a half
commit or a second copy of a record (``events`` is compared with Kafka), and the next run is clean.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from ...stack import StackError
from ...stack.process import wait_until
from ..harness import GROUP, FaultRunner
from ..result import ScenarioResult
from .spark_kill import redeliver

COMPACT = f"{GROUP}.compact_cdc[0]"


def worker_kill(runner: FaultRunner) -> ScenarioResult:
    """The Spark worker ``kill -9``-ed with its executors (the machine lost) while ``compact_cdc`` writes."""
    result = ScenarioResult("worker_kill", "9. Spark worker kill -9 while compact_cdc writes (cluster, HDFS)")
    spark = runner.stack.spark

    def kill_worker(dag: threading.Thread) -> dict[str, Any]:
        _, stages = runner.wait_writing(dag, "compact_cdc")
        executors = executor_count(runner)
        began = time.monotonic()
        spark.worker.kill()  # the worker's process group: its executors die with it
        spark.start(timeout=180)
        back = time.monotonic() - began
        runner.log(
            f"  killed the Spark worker ({executors} executors) while compact_cdc wrote {stages}; back {back:.0f}s"
        )
        return {"writing": stages, "executors_killed": executors, "worker_down_s": round(back, 1)}

    return _crash_during_compaction(runner, result, kill_worker, "spark_workers_killed")


def datanode_kill(runner: FaultRunner) -> ScenarioResult:
    """The HDFS DataNode (the only one: every block's only replica) ``kill -9``-ed while ``compact_cdc`` writes."""
    result = ScenarioResult("datanode_kill", "10. HDFS DataNode kill -9 while compact_cdc commits (cluster, HDFS)")
    hdfs = runner.stack.hdfs

    def kill_datanode(dag: threading.Thread) -> dict[str, Any]:
        _, stages = runner.wait_writing(dag, "compact_cdc")
        began = time.monotonic()
        hdfs.datanode.kill()
        hdfs.start(timeout=180)
        back = time.monotonic() - began
        runner.log(f"  killed the HDFS DataNode while compact_cdc wrote {stages}; back {back:.0f}s")
        return {"writing": stages, "datanode_down_s": round(back, 1)}

    return _crash_during_compaction(runner, result, kill_datanode, "datanodes_killed")


def master_restart(runner: FaultRunner) -> ScenarioResult:
    """The Spark master ``kill -9``-ed and started again after ``snapshot_source``, before ``compact_cdc``.

    A master without recovery mode forgets its workers and applications; the worker must register
    again, and the next task's application must find it.
    """
    result = ScenarioResult("master_restart", "11. Spark master restarted between two tasks of a run (cluster, HDFS)")
    spark = runner.stack.spark
    runner.ensure_baseline()
    start_state, start_offsets = runner.begin()
    with runner.loading(rate=150, seed=31):
        runner.progress(600)
    runner.settle()
    before = {app["id"] for app in applications(runner)}
    restarted: dict[str, Any] = {}

    def between_tasks(dag: threading.Thread) -> None:
        def snapshot_done() -> bool:
            new = [a for a in applications(runner) if a["id"] not in before]
            done = any(a["name"].startswith("snapshot_source:") and a.get("state") == "FINISHED" for a in new)
            return done and not any(a["name"].startswith("compact_cdc:") for a in new)

        what = "snapshot_source finished on the cluster"
        runner.wait_during(dag, snapshot_done, what=what, timeout=1200, interval=0.2)
        began = time.monotonic()
        spark.master.kill()
        spark.start(timeout=180)  # the master again, then waits until our worker re-registered
        restarted["down_s"] = round(time.monotonic() - began, 1)
        restarted["compact_started_before_restart"] = bool(runner.spark_job_pids("compact_cdc"))
        runner.log(f"  Spark master killed after snapshot_source; master and worker back after {restarted['down_s']}s")

    first = runner.measure(
        result, independent_of=runner.independent_from(start_state, start_offsets), during=between_tasks
    )
    events = runner.events_match_kafka(first.run_id)
    result.injected = {"spark_masters_restarted": 1 if restarted else 0}
    result.checks = {
        "master restarted between snapshot_source and compact_cdc": bool(restarted),
        "each record of the range once in events": events["extra_copies"] == 0 and events["absent"] == 0,
        "no application left running on the cluster": not active_applications(runner),
    }
    result.notes.append(f"restart {restarted}; compact_cdc tries {first.tries.get(COMPACT)}; events {events}")
    return result


def _crash_during_compaction(runner: FaultRunner, result: ScenarioResult, crash: Any, injected: str) -> ScenarioResult:
    """Load, 40 records redelivered, then ``crash`` (given the DAG run's thread) while compact_cdc writes."""
    runner.ensure_baseline()
    start_state, start_offsets = runner.begin()
    with runner.loading(rate=150, seed=29):
        runner.progress(600)
    runner.settle()
    redelivered = redeliver(runner, 40)
    crashed: dict[str, Any] = {}
    first = runner.measure(
        result,
        independent_of=runner.independent_from(start_state, start_offsets),
        during=lambda dag: crashed.update(crash(dag)),
    )
    events = runner.events_match_kafka(first.run_id)
    result.injected = {injected: 1 if crashed else 0, "redelivered_records": redelivered}
    result.checks = {
        "crashed while compact_cdc wrote": bool(crashed.get("writing")),
        "each record of the range once in events": events["extra_copies"] == 0 and events["absent"] == 0,
        "no application left running on the cluster": not active_applications(runner),
    }
    result.notes.append(
        f"{crashed}; compact_cdc tries {first.tries.get(COMPACT)}; events {events}; "
        f"{len(runner.stages())} uncommitted files left for VACUUM (no commit names them, so no reader sees them)"
    )
    return result


def applications(runner: FaultRunner) -> list[dict[str, Any]]:
    """Every application the master knows (running and completed), from its own status page."""
    try:
        state = runner.stack.spark.master_state()
    except Exception:  # the master is down or starting: it knows none
        return []
    return [*state.get("activeapps", []), *state.get("completedapps", [])]


def active_applications(runner: FaultRunner) -> list[str]:
    """Names of applications still running once the runs ended (a driver that never stopped)."""
    with contextlib.suppress(StackError):
        wait_until(
            lambda: not runner.stack.spark.master_state().get("activeapps"),
            timeout=60,
            what="no active application",
            interval=1,
        )
    return [a["name"] for a in runner.stack.spark.master_state().get("activeapps", [])]


def executor_count(runner: FaultRunner) -> int:
    """Executors the worker runs now, from its own status page."""
    import requests

    worker = requests.get(f"{runner.config.spark_worker_ui_url}/json/", timeout=5).json()
    return len(worker.get("executors", []))
