"""How long the reconciliation DAG's tasks and runs may take before Airflow stops or reports them.

Sized from measured run times (docs/performance.md): an idle DAG run of 60,000 rows takes about
80-95 s in all, each Spark task well under a minute; at 1M rows compaction alone takes under three
minutes. The limits leave an order of magnitude of headroom for a loaded machine and still stop a
hung ``spark-submit`` (Airflow calls the operator's ``on_kill``, which kills it) long before it blocks
a day of hourly runs (``max_active_runs=1``).
"""

from __future__ import annotations

import os
from datetime import timedelta

# Spark tasks: a fresh JVM, the Kafka read or the JDBC snapshot, the Great Expectations suite.
SPARK_TASK = timedelta(minutes=30)
# CDC_SPARK_TASK_TIMEOUT (minutes, decimals allowed) replaces SPARK_TASK where tables are much larger
# than the measured ones, or where a test wants a hung job stopped sooner. Read when the DAG is parsed.
SPARK_TASK_SWITCH = "CDC_SPARK_TASK_TIMEOUT"
# Python tasks: a few PostgreSQL queries and Kafka metadata calls each.
PYTHON_TASK = timedelta(minutes=10)
# seal_offsets waits for the watermark row to be committed in Kafka; the wait gives up first, with an
# error that says what it waited for, before the task's own timeout would kill it without one.
WATERMARK_WAIT = timedelta(minutes=5)
SEAL_TASK = PYTHON_TASK
# A run not finished this long after it was queued gets a critical alert: the next hourly run is due
# soon and would wait behind it.
RUN_DEADLINE = timedelta(minutes=45)
# CDC_RUN_DEADLINE=off leaves the deadline out of the DAG: Airflow 3.3's `airflow dags test` fails at
# the end of a successful run of a DAG that has one (apache/airflow#73428).
DEADLINE_SWITCH = "CDC_RUN_DEADLINE"


def spark_task_timeout() -> timedelta:
    """Each Spark task's ``execution_timeout``: :data:`SPARK_TASK`, or ``$CDC_SPARK_TASK_TIMEOUT`` minutes."""
    value = os.environ.get(SPARK_TASK_SWITCH, "").strip()
    if not value:
        return SPARK_TASK
    try:
        minutes = float(value)
    except ValueError:
        minutes = -1.0
    if not 0 < minutes < 24 * 60:
        raise ValueError(
            f"{SPARK_TASK_SWITCH}={value!r} is not a number of minutes between 0 and 1440; "
            f"unset it for the default of {SPARK_TASK.total_seconds() / 60:.0f} minutes"
        )
    return timedelta(minutes=minutes)
