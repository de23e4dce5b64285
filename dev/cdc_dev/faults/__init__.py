"""Fault scenarios on the embedded stack, each checked against counts the pipeline did not take.

Per scenario the runner starts from a known state (the previous run was clean, or a fresh stack),
injects one real fault (a killed Connect worker, Spark job or broker, a killed replication connection,
changes Debezium never saw, a re-run task), lets the stack recover, runs the reconciliation DAG
(``airflow dags test``) and compares what the suite found with an *independent* count: PostgreSQL read
with psycopg, Kafka read with a plain consumer, the lake table read with pyarrow. No pipeline code takes
part in the independent side, so a bug shared by the pipeline and its checker cannot hide.

* :mod:`.checks`: the independent side (reads and counts without pipeline code);
* :mod:`.harness`: :class:`~.harness.FaultRunner`, the stack, the loader, DAG runs and the two-run measurement;
* :mod:`.scenarios`: one module per scenario, and :func:`~.scenarios.run_scenarios`;
* :mod:`.result` and :mod:`.report`: a scenario's record, what makes it pass, the Markdown matrix;
* :mod:`.cli`: the ``cdc-faults`` command (``python -m cdc_dev.faults``).

Used by ``tests/integration/test_faults.py`` and by ``scripts/faults.sh``.
"""

from .cli import main

__all__ = ["main"]
