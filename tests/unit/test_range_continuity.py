"""Where a run's range starts: after the newest compacted range, never past one that was not compacted."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cdc_reconcile.errors import InputError
from cdc_reconcile.range_continuity import (
    LaterRunOpened,
    RangeNotCompacted,
    SealedPart,
    later_run_opened,
    next_starts,
    not_compacted,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def part(run: str, partition: int, end: int, minute: int, *, compacted: bool = True) -> SealedPart:
    return SealedPart(run, partition, end, T0 + timedelta(minutes=minute), compacted)


def test_a_first_range_starts_at_zero():
    assert next_starts([], [1, 0]) == ({0: 0, 1: 0}, [])


def test_a_range_starts_at_the_newest_compacted_end_per_partition():
    sealed = [part("a", 0, 10, 1), part("a", 1, 7, 1), part("b", 0, 15, 2), part("b", 1, 7, 2)]
    assert next_starts(sealed, [0, 1, 2]) == ({0: 15, 1: 7, 2: 0}, [])


def test_a_newer_range_never_compacted_stands_in_the_way():
    sealed = [part("a", 0, 10, 1), part("failed", 0, 25, 2, compacted=False), part("failed", 1, 4, 2, compacted=False)]
    starts, blocking = next_starts(sealed, [0, 1])
    assert starts == {0: 10, 1: 0}
    assert blocking == ["failed"]


def test_several_uncompacted_runs_come_oldest_first():
    sealed = [part("z", 0, 30, 5, compacted=False), part("a", 0, 10, 1), part("y", 0, 20, 3, compacted=False)]
    assert next_starts(sealed, [0])[1] == ["y", "z"]


def test_an_uncompacted_range_older_than_a_compacted_one_is_passed_over():
    """A full rescan (or a later compaction) read those offsets since: they are in the lake."""
    sealed = [part("abandoned", 0, 10, 1, compacted=False), part("rescan", 0, 40, 2)]
    assert next_starts(sealed, [0]) == ({0: 40}, [])


def test_a_partition_without_ranges_ignores_other_partitions_blockers():
    sealed = [part("a", 0, 10, 1), part("failed", 0, 25, 2, compacted=False)]
    assert next_starts(sealed, [1]) == ({1: 0}, [])


def test_refusals_name_the_runs_and_what_to_do():
    refused = not_compacted("public.customers", "cdc.public.customers", ["hole-1"])
    assert isinstance(refused, RangeNotCompacted) and isinstance(refused, InputError)
    text = str(refused)
    assert "'hole-1'" in text and "compact_cdc" in text and "full rescan" in text
    later = later_run_opened("again-1", "public.customers", ["again-2", "again-3"])
    assert isinstance(later, LaterRunOpened) and isinstance(later, InputError)
    assert "'again-2', 'again-3'" in str(later) and "new run" in str(later)
