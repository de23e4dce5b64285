"""Scenario 4: the Connect worker ``kill -9``-ed while a Kafka transaction is open, exactly-once on."""

from __future__ import annotations

from collections.abc import Mapping

from ...stack import StackError
from ...stack.process import wait_until
from ..checks import RawRecord, consume, topic_offsets
from ..harness import FaultRunner
from ..result import ScenarioResult


def aborted_eos_on(runner: FaultRunner) -> ScenarioResult:
    """The aborted records stay in the log; a ``read_committed`` pipeline must never see them."""
    result = ScenarioResult("aborted_eos_on", "4. Worker kill -9 mid-transaction, EOS on")
    runner.ensure_baseline()
    connect, name, bootstrap = runner.stack.connect, runner.config.connector_name, runner.config.bootstrap_servers
    start_state, start_offsets = runner.begin()
    with runner.loading(rate=800, batch=400, seed=17):
        runner.progress(1000)
        try:
            wait_until(
                lambda: _uncommitted(bootstrap, runner.topic) > 0,
                timeout=60,
                what="an open Kafka transaction",
                interval=0.02,
            )
        except StackError:
            result.notes.append("no open transaction seen within 60 s; killed anyway")
        connect.kill()
        open_records = _uncommitted(bootstrap, runner.topic)
        connect.start(exactly_once=True)
        connect.wait_connector_running(name, timeout=180)
        runner.wait_streaming()
        runner.progress(500)
    runner.settle()
    committed = [r for r in consume(bootstrap, runner.topic) if _since(r, start_offsets)]
    everything = [r for r in consume(bootstrap, runner.topic, isolation="read_uncommitted") if _since(r, start_offsets)]
    result.injected = {
        "worker_kills": 1,
        "uncommitted_at_kill": open_records,
        "aborted_records_in_log": len(everything) - len(committed),
    }
    runner.measure(result, independent_of=runner.independent_from(start_state, start_offsets))
    return result


def _uncommitted(bootstrap: str, topic: str) -> int:
    """Records past the last stable offset: written inside a Kafka transaction still open."""
    offsets = topic_offsets(bootstrap, topic)
    return sum(offsets["high"][p] - offsets["stable"].get(p, 0) for p in offsets["high"])


def _since(record: RawRecord, start: Mapping[int, int]) -> bool:
    return record.offset >= start.get(record.partition, 0)
