"""Waiting in tests: poll a condition until it holds or a deadline passes, never a fixed sleep."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pytest

from cdc_dev.stack.process import StackError, wait_until

T = TypeVar("T")


def eventually(
    check: Callable[[], T],
    *,
    timeout: float,
    what: str,
    interval: float = 0.5,
    retry_on: tuple[type[BaseException], ...] = (),
) -> T:
    """Return ``check()``'s first truthy result; fail the test naming ``what`` and the last result.

    An exception of a type in ``retry_on`` counts as "not yet" (a page still rendering); any other
    exception ends the wait and is raised, so a broken check fails at once instead of timing out.
    The loop is the dev stack's :func:`~cdc_dev.stack.process.wait_until`.
    """
    last: object = None
    error: Exception | None = None

    def holds() -> bool:
        nonlocal last, error
        try:
            last = check()
        except retry_on as exc:
            last = exc
            return False
        except Exception as exc:
            error = exc
            return True
        return bool(last)

    try:
        wait_until(holds, timeout=timeout, what=what, interval=interval)
        timed_out = False
    except StackError:
        timed_out = True
    if timed_out:
        pytest.fail(f"{what}: not true after {timeout:.0f}s (last: {last!r})")
    if error is not None:
        raise error
    return last  # type: ignore[return-value]
