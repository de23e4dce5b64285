"""Before or after repair: the one vocabulary for the two suite runs of a table's run."""

from __future__ import annotations

from enum import StrEnum


class Phase(StrEnum):
    """Which suite run of a DAG run a result belongs to (stored as this text in the state database)."""

    BEFORE_REPAIR = "before_repair"
    AFTER_REPAIR = "after_repair"

    @property
    def label(self) -> str:
        """Words for messages: ``before repair`` / ``after repair``."""
        return self.value.replace("_", " ")
