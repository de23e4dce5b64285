"""Scenario 1: Debezium's replication connection killed three times under load, exactly-once on."""

from __future__ import annotations

from ..harness import FaultRunner
from ..result import ScenarioResult


def replication_kill(runner: FaultRunner) -> ScenarioResult:
    """``pg_terminate_backend`` on Debezium's ``START_REPLICATION`` connection, 3 times under load, EOS on."""
    result = ScenarioResult("replication_kill", "1. Replication connection killed 3x under load, EOS on")
    runner.ensure_baseline()
    start_state, start_offsets = runner.begin()
    kills = 0
    with runner.loading(rate=60, seed=11):
        with runner.pg() as conn:
            for _ in range(6):
                if kills >= 3:
                    break
                runner.wait_streaming()
                runner.progress(150)
                kills += conn.execute(
                    "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE pid <> pg_backend_pid() AND query LIKE 'START_REPLICATION SLOT%%'"
                ).fetchone()[0]
        runner.wait_streaming()
        runner.progress(150)
    result.injected = {"replication_connections_killed": kills}
    runner.measure(result, independent_of=runner.independent_from(start_state, start_offsets))
    return result
