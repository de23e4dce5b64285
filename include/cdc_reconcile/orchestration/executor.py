"""Airflow's LocalExecutor, its workers started with the task libraries already imported.

Every task of a LocalExecutor runs in a process forked from one of the executor's workers, which are
forked from the scheduler. A Spark task on the Spark Connect server then imports pyspark's Connect
client, this package's jobs and, to validate, Great Expectations (with pandas, scipy and altair):
about 3 s for Great Expectations alone on 2 cores, paid again by every validate task of every table and
run. Imported once in the scheduler before it forks the workers, they are in every task process from
its first instruction (shared, copy-on-write, not copied per task).

Nothing here connects, starts a thread or reads a file: importing these modules has no side effect
(``tests/unit/test_executor.py`` checks that no thread is left behind), so forking after them is as
safe as forking after Airflow's own imports. Where processes are spawned, not forked (macOS), the
workers import as before: a slower start, the same result.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
import time

from airflow.executors.local_executor import LocalExecutor

log = logging.getLogger(__name__)

TASK_LIBRARIES = (
    "great_expectations",
    "pyspark.sql.connect.session",
    "pyspark.sql.connect.functions",
)
"""Libraries the tasks import when they run, not when the DAG is parsed."""


def task_modules() -> list[str]:
    """The task libraries, then every module of this package (the jobs import theirs when they run)."""
    import cdc_reconcile

    package = [m.name for m in pkgutil.walk_packages(cdc_reconcile.__path__, prefix="cdc_reconcile.")]
    return [*TASK_LIBRARIES, *sorted(package)]


def preload(modules: list[str]) -> list[str]:
    """Import ``modules``; returns those that failed (logged: a task importing one gets the same error)."""
    failed = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # a module missing here must not stop the scheduler
            log.warning("could not preload %s for the tasks; they import it themselves", name, exc_info=True)
            failed.append(name)
    return failed


class PreloadingLocalExecutor(LocalExecutor):
    """``[core] executor`` of the embedded stack: a LocalExecutor whose task processes start warm."""

    def start(self) -> None:
        began = time.monotonic()
        modules = task_modules()
        failed = preload(modules)
        log.info(
            "preloaded %d task modules in %.1f s before starting the workers (%d failed)",
            len(modules) - len(failed),
            time.monotonic() - began,
            len(failed),
        )
        super().start()
