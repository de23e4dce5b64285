"""A writer thread for integration tests: short transactions against PostgreSQL until stopped."""

from __future__ import annotations

import threading
from collections.abc import Callable

import psycopg


class Writer:
    """Runs ``write(connection, n)`` in its own transaction, n = 0, 1, ..., until the block ends.

    ``wrote_at_least`` is the condition to wait on (with ``eventually``); it raises what the thread
    raised, so a writer that failed fails the test instead of leaving it waiting.
    """

    def __init__(self, dsn: str, write: Callable[[psycopg.Connection, int], None], *, pause: float = 0.005) -> None:
        self.dsn = dsn
        self.write = write
        self.pause = pause
        self.stop = threading.Event()
        self.transactions = 0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="test-writer", daemon=True)

    def _run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as pg:
                while not self.stop.is_set():
                    with pg.transaction():
                        self.write(pg, self.transactions)
                    self.transactions += 1
                    self.stop.wait(self.pause)  # pacing between transactions, not a wait for a condition
        except BaseException as exc:  # surfaced by wrote_at_least
            self.error = exc

    def __enter__(self) -> Writer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=60)

    def wrote_at_least(self, transactions: int) -> bool:
        if self.error is not None:
            raise AssertionError(f"the writer failed: {self.error!r}")
        return self.transactions >= transactions
