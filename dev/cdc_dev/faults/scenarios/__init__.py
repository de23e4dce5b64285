"""The fault scenarios, one module each (the cluster's three in ``cluster_faults``), and
:func:`run_scenarios`, which runs them in order on one runner's stack."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict
from typing import NamedTuple

from ..harness import FaultRunner
from ..result import ScenarioResult
from .aborted_eos_on import aborted_eos_on
from .broker_restart import broker_restart
from .cluster_faults import datanode_kill, master_restart, worker_kill
from .lost_events import lost_events
from .redelivery_eos_off import redelivery_eos_off
from .replication_kill import replication_kill
from .snapshot_kill import snapshot_kill
from .spark_kill import spark_kill
from .task_rerun import task_rerun


class Scenario(NamedTuple):
    number: int
    run: Callable[[FaultRunner], ScenarioResult]
    cluster: bool = False  # runs on a stack with HDFS and the Spark cluster (``FaultRunner(cluster=True)``)
    # kills or watches a Spark task's own driver process, so it needs a spark-submit per task (not Spark Connect)
    own_driver: bool = False


# Run order (the cluster's after the others, on a stack of their own): the initial-snapshot kill needs
# the fresh stack; the task re-run needs a clean run.
SCENARIOS: dict[str, Scenario] = {
    "snapshot_kill": Scenario(2, snapshot_kill),
    "lost_events": Scenario(5, lost_events),
    "redelivery_eos_off": Scenario(3, redelivery_eos_off),
    "task_rerun": Scenario(7, task_rerun),
    "spark_kill": Scenario(6, spark_kill, own_driver=True),
    "broker_restart": Scenario(8, broker_restart, own_driver=True),
    "replication_kill": Scenario(1, replication_kill),
    "aborted_eos_on": Scenario(4, aborted_eos_on),
    "worker_kill": Scenario(9, worker_kill, cluster=True, own_driver=True),
    "datanode_kill": Scenario(10, datanode_kill, cluster=True, own_driver=True),
    "master_restart": Scenario(11, master_restart, cluster=True, own_driver=True),
}
# ``--scenario`` groups besides single names and ``all``
GROUPS = {
    "local": [name for name, s in SCENARIOS.items() if not s.cluster],
    "cluster": [name for name, s in SCENARIOS.items() if s.cluster],
}


def run_scenarios(
    runner: FaultRunner,
    names: Iterable[str],
    repetition: int = 1,
    on_result: Callable[[ScenarioResult], None] | None = None,
) -> list[ScenarioResult]:
    """Run ``names`` in order on ``runner``'s stack; a failing scenario is recorded, the rest still run.

    ``on_result`` sees each record as soon as it exists, so an interrupted run keeps what it measured.
    """
    results: list[ScenarioResult] = []
    for name in names:
        began = time.monotonic()
        runner.log(f"scenario {name} (repetition {repetition})")
        try:
            if SCENARIOS[name].cluster != runner.cluster:
                raise ValueError(f"scenario {name} needs a runner with cluster={SCENARIOS[name].cluster}")
            if SCENARIOS[name].own_driver and runner.config.spark_connect_enabled:
                raise ValueError(f"scenario {name} needs a Spark task's own driver: a runner without spark_connect")
            if name != "snapshot_kill" and runner.last_clean_run is None:
                baseline = runner.ensure_baseline()
                if baseline is not None:
                    baseline.repetition = repetition
                    results.append(baseline)
                    if on_result:
                        on_result(baseline)
            result = SCENARIOS[name].run(runner)
        except Exception as exc:  # one broken scenario must not hide the others' figures
            result = ScenarioResult(name, name, error=f"{type(exc).__name__}: {exc}")
        result.repetition = repetition
        result.seconds = round(time.monotonic() - began, 1)
        runner.log(f"scenario {name}: {'PASS' if result.passed else 'FAIL'} {json.dumps(asdict(result), default=str)}")
        results.append(result)
        if on_result:
            on_result(result)
    return results


__all__ = ["GROUPS", "SCENARIOS", "Scenario", "run_scenarios"]
