"""Scenario 3: the Connect worker ``kill -9``-ed while streaming with exactly-once off: redeliveries."""

from __future__ import annotations

from ...stack.connect import connector_config
from ..harness import FaultRunner
from ..result import ScenarioResult


def redelivery_eos_off(runner: FaultRunner) -> ScenarioResult:
    """Worker ``kill -9`` under load with ``exactly.once.source.support=disabled``; EOS on again afterwards."""
    result = ScenarioResult("redelivery_eos_off", "3. Worker kill -9 while streaming, EOS off")
    runner.ensure_baseline()
    connect, name = runner.stack.connect, runner.config.connector_name
    connect.stop()
    connect.start(exactly_once=False)
    connect.put_connector(name, connector_config(runner.config, exactly_once="requested"))
    connect.wait_connector_running(name, timeout=180)
    runner.wait_streaming()
    start_state, start_offsets = runner.begin()
    with runner.loading(rate=150, seed=13):
        runner.progress(300)
        connect.kill()
        connect.start(exactly_once=False)
        connect.wait_connector_running(name, timeout=180)
        runner.wait_streaming()
        runner.progress(150)
    # back to exactly-once for the next scenario (a graceful restart adds no duplicates)
    runner.settle()
    connect.stop()
    connect.start(exactly_once=True)
    connect.put_connector(name, connector_config(runner.config, exactly_once="required"))
    connect.wait_connector_running(name, timeout=180)
    runner.wait_streaming()
    result.injected = {"worker_kills": 1, "exactly_once": "disabled"}
    runner.measure(result, independent_of=runner.independent_from(start_state, start_offsets))
    return result
