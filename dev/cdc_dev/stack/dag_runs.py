"""Run the reconciliation DAG once, in-process (``airflow dags test``), against an embedded stack.

Used by the demo, the integration tests and the fault runner: one DAG run with the given Params,
its metadata in the stack's Airflow database, and its outcome read back from there.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from cdc_reconcile.orchestration.limits import DEADLINE_SWITCH

from .airflow import airflow_environment, migrate, sql_alchemy_conn, venv_bin
from .config import StackConfig
from .process import StackError

DAG_ID = "cdc_reconciliation"


@dataclass
class DagRunResult:
    """One finished DAG run: its id and state, each task's state and tries, and where its log is."""

    run_id: str
    state: str
    tasks: dict[str, str] = field(default_factory=dict)
    tries: dict[str, int] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)  # mapped instances' names (map_index_template)
    seconds: float = 0.0
    log: Path | None = None

    def task_state(self, task_id: str, map_index: int = 0) -> str | None:
        return self.tasks.get(f"{task_id}[{map_index}]") or self.tasks.get(task_id)


def _metadata_dsn(config: StackConfig) -> str:
    return sql_alchemy_conn(config).replace("postgresql+psycopg2://", "postgresql://", 1)


def run_dag(
    config: StackConfig,
    params: dict[str, Any],
    *,
    extra_env: dict[str, str] | None = None,
    timeout: float = 1800,
    label: str = "dag-test",
) -> DagRunResult:
    """One run of the DAG with ``params``; its output goes to ``<run dir>/logs/<label>-<n>.log``.

    Unless ``CDC_SPARK_CONNECT=off``, the Spark Connect server its Spark tasks run on is started first when it
    is not running; ``Stack.down`` stops it.
    """
    migrate(config)
    if config.spark_connect_enabled:
        from .hdfs import Hdfs
        from .spark_connect import SparkConnectServer

        SparkConnectServer(config, Hdfs(config).conf_dir).start()
    # Airflow 3.3's `dags test` fails after a successful run of a DAG with a deadline (apache/airflow#73428)
    env = {**os.environ, **airflow_environment(config), DEADLINE_SWITCH: "off", **(extra_env or {})}
    config.logs_dir.mkdir(parents=True, exist_ok=True)
    log = config.logs_dir / f"{label}-{time.strftime('%Y%m%dT%H%M%S')}.log"
    began = time.monotonic()
    with log.open("w") as out:
        try:
            subprocess.run(
                [str(venv_bin() / "airflow"), "dags", "test", DAG_ID, "-c", json.dumps(params)],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                check=False,
                cwd=str(config.run_dir),
            )
        except subprocess.TimeoutExpired as exc:
            raise StackError(f"DAG run did not finish within {timeout:.0f}s; see {log}") from exc
    seconds = time.monotonic() - began
    with psycopg.connect(_metadata_dsn(config), autocommit=True) as conn:
        row = conn.execute(
            "SELECT run_id, state FROM dag_run WHERE dag_id = %s ORDER BY id DESC LIMIT 1", (DAG_ID,)
        ).fetchone()
        if row is None:
            raise StackError(f"no run of {DAG_ID} was recorded; see {log}")
        run_id, state = row
        instances = conn.execute(
            "SELECT task_id, map_index, state, try_number, rendered_map_index FROM task_instance "
            "WHERE dag_id = %s AND run_id = %s",
            (DAG_ID, run_id),
        ).fetchall()
    name = {(t, i): t if i < 0 else f"{t}[{i}]" for t, i, *_ in instances}
    return DagRunResult(
        run_id=run_id,
        state=state,
        tasks={name[t, i]: task_state for t, i, task_state, *_ in instances},
        tries={name[t, i]: tries for t, i, _, tries, _ in instances},
        labels={name[t, i]: label for t, i, *_, label in instances if label},
        seconds=round(seconds, 1),
        log=log,
    )
