"""Issue 16's targets for the benchmark's figures, written once.

``bench/bench.py`` judges a run's results with them and :mod:`cdc_dev.docs_tables` the committed
results it renders into ``docs/performance.md``; before, each had its own copy of the bounds and of
the rules that pick one (payload-only compaction, the diff below 10M rows).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

COMPACTION_STEPS = ("compaction (initial load)", "compaction (hourly range)")
DIFF_STEP = "diff (snapshot vs lake table)"
POINT_IN_TIME_STEP = "point-in-time check (fold as of snapshot + diff)"
HOURLY_RUN = "hourly run (pipeline steps)"
RAW_CONSUMER = "raw confluent-kafka consumer"
DUCKDB = "DuckDB"
HOURLY_TARGET_SIZE = 1_000_000  # the hourly run's target is judged at this size only
DIFF_AT_SCALE = 10_000_000  # the diff within 1.5x DuckDB's time from 10M rows on, 3x below
# ``bench/dag_runs.py``'s scenarios: a DAG run through the scheduler, queued to end, in seconds
DAG_RUN_SECONDS = {"demo": 60.0, "hourly-1m": 120.0, "ten-tables": 240.0}


@dataclass(frozen=True)
class Target:
    """A bound on one figure.

    ``kind``: ``throughput`` (our rate over the baseline's, higher is better), ``time`` (our time over
    the baseline's) or ``wall`` (our seconds, no baseline). ``baseline``: the only baseline the ratio
    is judged against (another baseline of the same step is shown, not judged). ``judged``: False for a
    bound shown for reference only.
    """

    kind: str
    bound: float
    baseline: str | None
    judged: bool = True

    def met(self, value: float) -> bool:
        if self.kind == "throughput":
            return value >= self.bound
        if self.kind == "time":
            return value <= self.bound
        return value < self.bound

    @property
    def text(self) -> str:
        """The bound alone: ``>= 0.25x``, ``<= 1.5x``, ``< 120 s``."""
        if self.kind == "wall":
            return f"< {self.bound:g} s"
        return f"{'>=' if self.kind == 'throughput' else '<='} {self.bound:g}x"


def target(measurement: Mapping[str, Any]) -> Target | None:
    """The target a benchmark figure (``step``, ``size``, ``converter_schemas``) is judged on, or None."""
    step = measurement["step"]
    if step in COMPACTION_STEPS:
        payload_only = measurement.get("converter_schemas") == "off"
        return Target("throughput", 0.5 if payload_only else 0.25, RAW_CONSUMER)
    if step == DIFF_STEP:
        return Target("time", 1.5 if measurement["size"] >= DIFF_AT_SCALE else 3.0, DUCKDB)
    if step == POINT_IN_TIME_STEP:
        return Target("time", 1.5, None, judged=False)
    if step == HOURLY_RUN:
        return Target("wall", 120.0, None)
    return None
