"""Scenario 2: the Connect worker ``kill -9``-ed during the initial snapshot, so the snapshot runs again."""

from __future__ import annotations

from collections import Counter

from ...stack import StackError
from ...stack.connect import connector_config
from ...stack.process import wait_until
from ...stack.topics import unwrap
from ..checks import TABLE, consume, topic_offsets
from ..harness import FaultRunner
from ..result import ScenarioResult


def snapshot_kill(runner: FaultRunner, rows: int = 30_000) -> ScenarioResult:
    """Worker ``kill -9`` once part of the snapshot of ``rows`` rows is committed; needs a fresh stack."""
    result = ScenarioResult("snapshot_kill", "2. Worker kill -9 during the initial snapshot")
    if runner.registered:
        raise StackError("snapshot_kill needs a fresh stack (no connector yet); run it first after start()")
    config = runner.config
    with runner.pg() as conn:
        conn.execute(
            f"INSERT INTO {TABLE} (name, email, balance, attrs) SELECT 'customer ' || g, 'c' || g || "
            "'@example.com', (g %% 100000) / 100.0, jsonb_build_object('g', g, 'city', 'Zürich') "
            "FROM generate_series(1, %s) g",
            (rows,),
        )
    runner.stack.connect.put_connector(config.connector_name, connector_config(config))
    runner.registered = True

    def under_way() -> bool:
        # Under EOS the snapshot's records only count once their Kafka transaction commits: kill
        # after some have, or the whole killed round is aborted and nothing is duplicated.
        try:
            stable = topic_offsets(config.bootstrap_servers, runner.topic)["stable"]
        except Exception:  # the topic does not exist until the first record
            return False
        return sum(stable.values()) >= min(2000, rows // 10)

    wait_until(under_way, timeout=300, what="the initial snapshot under way", interval=0.05)
    runner.stack.connect.kill()
    offsets = topic_offsets(config.bootstrap_servers, runner.topic)
    emitted, committed = sum(offsets["high"].values()), sum(offsets["stable"].values())
    runner.stack.connect.start()
    runner.stack.connect.wait_connector_running(config.connector_name, timeout=180)

    def rounds() -> Counter | None:
        found = Counter(
            unwrap(r.value)["source"]["txId"]
            for r in consume(config.bootstrap_servers, runner.topic)
            if unwrap(r.value) and unwrap(r.value).get("op") == "r"
        )
        return found if found and max(found.values()) >= rows else None

    found = wait_until(rounds, timeout=900, what=f"a complete snapshot of {rows} rows", interval=2)
    first, *later = sorted(found)
    result.injected = {
        "worker_kills": 1,
        "records_before_kill": emitted,
        "committed_before_kill": committed,
        "snapshot_rounds": len(found),
        "committed_reads_of_killed_round": found[first] if later else 0,
    }
    if not later:
        result.notes.append("no committed record of the killed round (all aborted, or the snapshot was done)")
    runner.wait_streaming()
    runner.measure(result, independent_of=runner.independent_from({}, {}), full_rescan=True)
    return result
