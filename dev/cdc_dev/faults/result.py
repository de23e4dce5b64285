"""One fault scenario's record, and what makes it a pass.

A figure the runner never computed (``None``) fails the scenario exactly as a bad figure does: a
record can only pass by showing that the repair and the second run were checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .checks import CLASSES


@dataclass
class ScenarioResult:
    """One scenario's record: what was injected, what the suite found, what an independent count says.

    ``has_second_run`` is False only for a scenario that runs no second DAG run (the task re-run):
    there ``second_run_clean`` stays ``None``; everywhere else it must be True.
    """

    scenario: str
    title: str
    repetition: int = 1
    injected: dict[str, Any] = field(default_factory=dict)
    detected: dict[str, int] = field(default_factory=dict)
    independent: dict[str, int] = field(default_factory=dict)
    repaired: dict[str, int] = field(default_factory=dict)
    repaired_ok: bool | None = None
    rows_lost: int | None = None
    lake_mismatches: int | None = None
    false_alarms: int | None = None
    missed: int | None = None
    second_run_clean: bool | None = None
    has_second_run: bool = True
    checks: dict[str, bool] = field(default_factory=dict)
    run_ids: list[str] = field(default_factory=list)
    run_states: list[str] = field(default_factory=list)
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    error: str | None = None

    def failures(self) -> list[str]:
        """What keeps the scenario from passing, one line each; empty when it passed."""
        found = [f"error: {self.error}"] if self.error is not None else []
        found += [f"failed check: {name}" for name, ok in self.checks.items() if not ok]
        if self.detected != self.independent:
            found.append(f"detected {self.detected} differs from the independent count {self.independent}")
        if self.repaired_ok is not True:
            state = "never checked" if self.repaired_ok is None else "failed"
            found.append(f"repair {state} (audit {self.repaired}, detected {self.detected})")
        if self.second_run_clean is False or (self.has_second_run and self.second_run_clean is None):
            state = "never run" if self.second_run_clean is None else "not clean"
            found.append(f"second run {state} (run states {self.run_states})")
        for count, what in (
            (self.rows_lost, "committed source rows missing from the lake table"),
            (self.lake_mismatches, "lake rows that differ from the source"),
            (self.false_alarms, "false alarms"),
            (self.missed, "misses"),
        ):
            if count is None:
                found.append(f"{what}: never counted")
            elif count:
                found.append(f"{count} {what}")
        return found

    @property
    def passed(self) -> bool:
        """Detected equals the independent count, repaired, clean afterwards, nothing lost, no false alarm."""
        return not self.failures()


def compare(detected: Mapping[str, int], independent: Mapping[str, int]) -> tuple[int, int]:
    """(false alarms, misses): reported beyond the independent count, and not reported though there."""
    false_alarms = sum(max(0, detected.get(c, 0) - independent.get(c, 0)) for c in CLASSES)
    missed = sum(max(0, independent.get(c, 0) - detected.get(c, 0)) for c in CLASSES)
    return false_alarms, missed
