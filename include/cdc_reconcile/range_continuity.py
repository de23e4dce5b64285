"""Where a run's offset range may start and when a sealed one may grow, so each change is read once.

Ranges of consecutive runs must chain: each starts where the last range that ``compact_cdc``
finished ends, with no gap (changes that never reach the lake, which the next diff would blame on
the source) and no overlap (changes read twice, which the next run would count as redeliveries).
These rules decide that from the state database's rows; :mod:`cdc_reconcile.state_store` applies them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from .errors import InputError


class RangeNotCompacted(InputError):
    """An earlier run sealed a range that ``compact_cdc`` never finished; a new range would skip or repeat it."""


class LaterRunOpened(InputError):
    """A sealed range cannot grow: a later run already opened its range at this one's end."""


@dataclass(frozen=True)
class SealedPart:
    """One partition of another run's sealed range, as ``open_range`` weighs it."""

    run_id: str
    partition: int
    end_offset: int
    sealed_at: datetime
    compacted: bool


def next_starts(sealed: Iterable[SealedPart], partitions: Iterable[int]) -> tuple[dict[int, int], list[str]]:
    """Where a new range starts per partition, and the runs whose uncompacted range stands in its way.

    A partition starts at the end of its newest compacted range (0 without one). A run that sealed a
    range after that one and never compacted it stands in the way; such runs come oldest first. Older
    uncompacted ranges (read again by a full rescan since) do not.
    """
    by_partition: dict[int, list[SealedPart]] = {}
    for part in sealed:
        by_partition.setdefault(part.partition, []).append(part)
    starts: dict[int, int] = {}
    blocking: dict[str, datetime] = {}
    for p in sorted(set(partitions)):
        parts = by_partition.get(p, [])
        newest = max((x for x in parts if x.compacted), key=lambda x: (x.sealed_at, x.end_offset), default=None)
        starts[p] = newest.end_offset if newest else 0
        for x in parts:
            if not x.compacted and (newest is None or x.sealed_at > newest.sealed_at):
                blocking[x.run_id] = min(blocking.get(x.run_id, x.sealed_at), x.sealed_at)
    return starts, sorted(blocking, key=lambda run: (blocking[run], run))


def not_compacted(table: str, topic: str, runs: Sequence[str]) -> RangeNotCompacted:
    """The refusal to open a range after ``runs``, naming them and what to clear."""
    named = ", ".join(repr(run) for run in runs)
    return RangeNotCompacted(
        f"{table}: run {named} sealed an offset range of {topic} but its compact_cdc never finished. A new range "
        "after it would leave its changes out of the lake (the next diff would blame the source), one before it "
        "would read them twice. Clear compact_cdc and the tasks after it in that run (it reads the same sealed "
        "range again), then clear this run's checkpoint_offsets; or trigger a full rescan"
    )


def later_run_opened(run_id: str, table: str, later: Sequence[str]) -> LaterRunOpened:
    """The refusal to re-seal a range that ``later`` runs continue from."""
    return LaterRunOpened(
        f"run {run_id!r}, table {table!r}: the range cannot be sealed again, because run "
        f"{', '.join(repr(run) for run in later)} already opened its range at this one's end and the two would "
        "overlap. The changes since this seal belong to those runs; to check the table now, trigger a new run"
    )
