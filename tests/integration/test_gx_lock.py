"""The Great Expectations project's lock is the state database's, so it holds across hosts (issue 15 item 3).

Mapped validate tasks of one run write the same GX stores and Data Docs. A file lock serialised them
on one host only; the lock is now a session advisory lock in the state database, which every
Airflow worker and Spark driver of a deployment reaches.
"""

from __future__ import annotations

import threading

import psycopg
import pytest

from cdc_reconcile import state_store
from cdc_reconcile.run import GX_LOCK
from tests.support.polling import eventually

pytestmark = pytest.mark.integration


def free(dsn: str) -> bool:
    """Whether another session could take the GX lock now (taken and given back at once)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        taken = conn.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (GX_LOCK,)).fetchone()[0]
        if taken:
            conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (GX_LOCK,))
        return taken


def test_a_second_holder_waits_for_the_first_and_every_session_sees_the_lock(stack, config):
    dsn = config.state_dsn
    assert free(dsn)
    order: list[str] = []
    second_waiting = threading.Event()

    def second() -> None:
        second_waiting.set()
        with state_store.held_lock(dsn, GX_LOCK):
            order.append("second")

    with state_store.held_lock(dsn, GX_LOCK):
        order.append("first")
        assert not free(dsn)
        waiter = threading.Thread(target=second)
        waiter.start()
        second_waiting.wait(timeout=30)
        with psycopg.connect(dsn, autocommit=True) as conn:  # the second holder is blocked on the lock
            eventually(
                lambda: (
                    conn.execute(
                        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                    ).fetchone()[0]
                    >= 1
                ),
                timeout=30,
                what="the second holder waiting on the advisory lock",
            )
        assert order == ["first"]
    waiter.join(timeout=30)
    assert order == ["first", "second"]
    assert free(dsn)
