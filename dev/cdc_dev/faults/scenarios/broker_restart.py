"""Scenario 8: the Kafka broker ``kill -9``-ed and started again, while Debezium streams and during compaction."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

from ...stack import StackError
from ...stack.process import wait_until
from ..harness import GROUP, FaultRunner
from ..result import ScenarioResult


def broker_restart(runner: FaultRunner) -> ScenarioResult:
    """One restart under load, one while ``compact_cdc`` reads its range; the connector must still run."""
    result = ScenarioResult("broker_restart", "8. Kafka broker restarted while streaming and mid-run")
    runner.ensure_baseline()
    connect, name = runner.stack.connect, runner.config.connector_name
    start_state, start_offsets = runner.begin()
    downtime: list[float] = []
    with runner.loading(rate=150, seed=23):
        runner.progress(300)
        downtime.append(restart_broker(runner))
        connect.wait_connector_running(name, timeout=300)
        runner.progress(300, timeout=300)
    runner.settle(timeout=300)

    def restart_during_compaction(dag: threading.Thread) -> None:
        def compacting() -> bool:
            return bool(runner.spark_job_pids("compact_cdc"))

        runner.wait_during(dag, compacting, what="compact_cdc started", timeout=1200, interval=0.2)
        # down while the job connects and reads: until it gives up (then Airflow retries it) or 60 s
        downtime.append(restart_broker(runner, until=lambda: not runner.spark_job_pids("compact_cdc")))

    first = runner.measure(
        result,
        independent_of=runner.independent_from(start_state, start_offsets),
        during=restart_during_compaction,
    )
    events = runner.events_match_kafka(first.run_id)
    status = connect.connector_status(name) or {}
    tasks = [t.get("state") for t in status.get("tasks", [])]
    result.injected = {"broker_restarts": len(downtime)}
    result.checks = {
        "each record of the range once in events": events["extra_copies"] == 0 and events["absent"] == 0,
        "connector still running": status.get("connector", {}).get("state") == "RUNNING" and tasks == ["RUNNING"],
    }
    result.notes.append(
        f"broker down {[round(d) for d in downtime]} s; compact_cdc tries "
        f"{first.tries.get(f'{GROUP}.compact_cdc[0]')}; events {events}; connector tasks {tasks}"
    )
    return result


def restart_broker(runner: FaultRunner, until: Callable[[], bool] | None = None, *, longest: float = 60) -> float:
    """``kill -9`` the Kafka broker, start it again once ``until()`` holds (or ``longest`` s have passed).

    Returns the seconds it was down.
    """
    began = time.monotonic()
    runner.stack.kafka.kill()
    if until is not None:
        with contextlib.suppress(StackError):
            wait_until(until, timeout=longest, what="the moment to start the broker again", interval=0.5)
    runner.stack.kafka.start(timeout=180)
    down = time.monotonic() - began
    runner.log(f"  broker killed and back after {down:.0f}s")
    return down
