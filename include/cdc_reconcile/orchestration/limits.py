"""How long the reconciliation DAG's tasks and runs may take before Airflow stops or reports them.

Sized from measured run times (docs/performance.md): an idle DAG run of 60,000 rows takes about
80-95 s in all, each Spark task well under a minute; at 1M rows compaction alone takes under three
minutes. The limits leave an order of magnitude of headroom for a loaded machine and still stop a
hung ``spark-submit`` (Airflow calls the operator's ``on_kill``, which kills it) long before it blocks
a day of hourly runs (``max_active_runs=1``).
"""

from __future__ import annotations

from datetime import timedelta

# Spark tasks: a fresh JVM, the Kafka read or the JDBC snapshot, the Great Expectations suite.
SPARK_TASK = timedelta(minutes=30)
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
