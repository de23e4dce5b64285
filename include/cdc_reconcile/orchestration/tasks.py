"""What the reconciliation DAG's Python tasks do, and the Jinja macros its Spark tasks render.

The DAG file only wires these together. Everything here runs at task run time: connections are
resolved through the Postgres provider's hook and Airflow's connection store, never at parse time.

Airflow objects used (names are fixed; the embedded stack defines all of them):

* ``cdc_state`` (postgres): the state database with the ``cdc_reconcile`` schema;
* ``cdc_source`` (postgres): the captured database the snapshot reads and the watermark is written to
  (the same database as ``cdc_state`` or another one);
* ``cdc_kafka`` (kafka, the Apache Kafka provider's type): its extra is the client config dict
  (``bootstrap.servers`` plus librdkafka properties such as ``security.protocol``, ``sasl.*``,
  ``ssl.ca.location``); a generic connection whose ``host`` is the bootstrap servers still works;
* ``cdc_alerts`` (slackwebhook, http or smtp, optional): where alerts go;
* ``spark_default`` (spark): the master for the Spark jobs (``local[*]`` by default);
* variables ``cdc_lake_root`` (required) and ``cdc_gx_root`` (a folder or a URL on shared storage;
  default: ``<lake root>/../great_expectations``, rendered by the DAG's validate tasks).
"""

from __future__ import annotations

import inspect
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..config import TABLE_NAME_PATTERN as TABLE_NAME_PATTERN  # the trigger form's check of a name
from ..config import ConfigError, load_config
from ..kafka_client import KafkaClient
from ..phase import Phase
from . import limits
from .alerts import OUTCOME_KEY

if TYPE_CHECKING:
    from ..run import SourceDatabase, TableRun

log = logging.getLogger(__name__)

STATE_CONN = "cdc_state"
SOURCE_CONN = "cdc_source"
KAFKA_CONN = "cdc_kafka"
ALERTS_CONN = "cdc_alerts"
SPARK_CONN = "spark_default"
LAKE_ROOT_VAR = "cdc_lake_root"
GX_ROOT_VAR = "cdc_gx_root"
MODES = ("repair", "check_only")


class RunFailed(RuntimeError):
    """The run found a problem it did not (or could not) repair; the alert names what."""

    def __init__(self, message: str, *, outcome: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.outcome = dict(outcome or {})


# -- connection settings for the Spark jobs; the Jinja macros of their templated fields -----------------


def libpq_dsn(connection: Any) -> str:
    """A libpq connection string for an Airflow postgres connection, safely quoted."""
    from psycopg.conninfo import make_conninfo

    parts = {
        "host": connection.host or "localhost",
        "port": str(connection.port or 5432),
        "dbname": connection.schema or "postgres",
        "user": connection.login,
        "password": connection.password,
    }
    return make_conninfo(**{k: v for k, v in parts.items() if v})


def jdbc_url(connection: Any) -> str:
    """The JDBC URL of an Airflow postgres connection (credentials are passed separately)."""
    return f"jdbc:postgresql://{connection.host or 'localhost'}:{connection.port or 5432}/{connection.schema or ''}"


def spark_jars() -> str:
    """The Kafka and JDBC jars for spark-submit's ``--jars``, as ``$CDC_SPARK_JARS`` names them."""
    from ..spark import spark_jars as configured_jars

    return ",".join(configured_jars())


def kafka_client(connection: Any) -> KafkaClient:
    """The Kafka connection the product uses, from the ``cdc_kafka`` Airflow connection.

    A ``kafka`` connection (the Apache Kafka provider's type) carries the client config dict in its
    extra: ``bootstrap.servers`` plus librdkafka properties (SASL, TLS), as the provider's hooks read
    it. Any other type is the older form: ``host`` is the bootstrap servers (a list is fine, with
    ``port`` added when the host has none), and the extra is not client config. A ``kafka`` connection
    without ``bootstrap.servers`` in its extra falls back to its host.
    """
    extra = connection.extra_dejson or {}
    host = connection.host
    servers = f"{host}:{connection.port}" if host and connection.port and ":" not in host else host
    conn_id = getattr(connection, "conn_id", None)
    if getattr(connection, "conn_type", None) == "kafka":
        if not isinstance(extra, dict):
            raise ConfigError(f"connection {conn_id!r}: its extra (Config Dict) must be a JSON object")
        if not extra.get("bootstrap.servers") and not servers:
            raise ConfigError(
                f'connection {conn_id!r} has no "bootstrap.servers" in its extra (Config Dict): set it to the '
                'brokers, e.g. {"bootstrap.servers": "broker:9092"}, with the client properties beside it'
            )
        return KafkaClient.from_config(extra, bootstrap=None if extra.get("bootstrap.servers") else servers)
    if not servers:
        raise ConfigError(
            f"connection {conn_id!r} has no host: make it a kafka connection whose extra holds "
            '{"bootstrap.servers": ...} (or set host to the Kafka bootstrap servers)'
        )
    return KafkaClient(servers)


def mapped_table(task: Any) -> str:
    """The table a task of the mapped ``reconcile_table`` group works on, read from its rendered arguments.

    The UI's name for the mapped instance (``map_index_template``). It never raises: a failed render
    after a successful task would fail the task; without a table the UI shows the index.
    """
    function = getattr(task, "python_callable", None)
    if function is not None:
        try:
            bound = inspect.signature(function).bind_partial(*task.op_args, **task.op_kwargs)
        except (TypeError, ValueError):
            return ""
        table = bound.arguments.get("table")
        return table if isinstance(table, str) else ""
    arguments = list(getattr(task, "application_args", None) or [])
    if "--table" in arguments[:-1]:
        value = arguments[arguments.index("--table") + 1]
        return value if isinstance(value, str) else ""
    return ""


# The map_index_template of every task in the mapped group (rendered after the task's own templates).
TABLE_LABEL = "{{ mapped_table(task) }}"


SPARK_PYTHON_ENV = "CDC_SPARK_PYTHON"


def cluster_python() -> str:
    """The Python of the Spark cluster's nodes (``spark.pyspark.python``: the executors', and the driver's in
    cluster mode): ``$CDC_SPARK_PYTHON`` on the Airflow worker, else the interpreter running the task.

    The executors need a Python of the driver's version and nothing installed: Spark puts its own pyspark
    on their workers' path, and the jobs run no Python function there (the integration tests run every
    job with executors whose Python has no site-packages and cannot import ``cdc_reconcile``).
    """
    return os.environ.get(SPARK_PYTHON_ENV) or sys.executable


def driver_python(deploy_mode: str | None) -> str:
    """``spark.pyspark.driver.python``: in client mode spark-submit starts the driver here, on the Airflow
    worker, so the task's own interpreter; in cluster mode the driver runs on a node, so :func:`cluster_python`."""
    return cluster_python() if deploy_mode == "cluster" else sys.executable


def job(name: str) -> str:
    """The spark-submit application of job ``name``: the job module's file in the installed package."""
    from importlib.util import find_spec

    spec = find_spec(f"cdc_reconcile.jobs.{name}")
    if spec is None or spec.origin is None:
        raise ConfigError(f"no Spark job named {name!r} in cdc_reconcile.jobs")
    return spec.origin


# No macro renders a secret: a rendered field is stored and shown in the UI. The Spark tasks get the
# connections' DSNs and credentials in their properties file (spark_job.CdcSparkJobOperator).
MACROS = {
    "spark_jars": spark_jars,
    "cluster_python": cluster_python,
    "mapped_table": mapped_table,
}


# -- settings resolved at run time ------------------------------------------------------------------------


def connection(conn_id: str) -> Any:
    """An Airflow connection, looked up when a task runs (never while the DAG is parsed)."""
    from airflow.sdk import BaseHook

    return BaseHook.get_connection(conn_id)


def state_dsn() -> str:
    """The state database's libpq string, resolved through the Postgres provider's hook."""
    from airflow.providers.postgres.hooks.postgres import PostgresHook

    return libpq_dsn(PostgresHook(postgres_conn_id=STATE_CONN).get_connection(STATE_CONN))


def source_database() -> SourceDatabase:
    """The captured database from the ``cdc_source`` connection: the watermark is written there."""
    from ..run import SourceDatabase

    source = connection(SOURCE_CONN)
    return SourceDatabase(dsn=libpq_dsn(source), jdbc_url=jdbc_url(source), user=source.login, password=source.password)


def kafka_settings() -> KafkaClient:
    """The ``cdc_kafka`` connection as the product's Kafka client settings (Python tasks and Spark jobs alike)."""
    return kafka_client(connection(KAFKA_CONN))


def lake_root() -> str:
    from airflow.sdk import Variable

    return Variable.get(LAKE_ROOT_VAR)


def table_run(table_name: str, run_id: str) -> TableRun:
    """The run object of one table for the Python tasks (no Spark): state and Kafka from the connections."""
    from ..run import RunSettings, TableRun

    config = load_config()
    settings = RunSettings(
        lake_root=lake_root(),
        state_dsn=state_dsn(),
        kafka=kafka_settings(),
        source=source_database(),
        pipeline=config,
    )
    return TableRun(config.table(table_name), run_id, settings)


def recorded_outcomes(
    table_name: str, run_id: str, phases: Sequence[Phase]
) -> tuple[dict[Phase, dict[str, Any]], dict[str, int]]:
    """The suite outcomes the run's validate tasks recorded (a missing one names its task), and the audit."""
    from .. import run_state, state_store

    found: dict[Phase, dict[str, Any]] = {}
    with state_store.open_state(state_dsn()) as conn:
        for phase in phases:
            outcome = run_state.latest_suite_outcome(conn, run_id, table_name, phase)
            if outcome is None:
                raise RunFailed(
                    f"{table_name}: no suite result {phase.label} for run {run_id!r}; its validate task must run"
                )
            found[phase] = outcome
        audit = run_state.audit_counts(conn, run_id, table_name)
    return found, audit


# -- the Python tasks ----------------------------------------------------------------------------------


def select_tables(requested: Sequence[str] | None) -> list[str]:
    """The tables this run covers: the requested ones (none: all), each checked against the configuration.

    The trigger form cannot list the configured tables (the DAG reads no file while it is parsed), so
    this is where a name the configuration lacks is refused, naming the configuration it was looked up in.
    """
    config = load_config()
    if not requested:
        return config.names
    unknown = [name for name in requested if name not in config.names]
    if unknown:
        source = os.environ.get("CDC_TABLES_CONFIG") or "the built-in configuration (cdc_reconcile/config/tables.py)"
        raise ConfigError(
            f"tables {unknown} are not configured in {source}; configured tables: {config.names}. "
            "Add a table with `cdc-tables add schema.table --key column`"
        )
    return [name for name in config.names if name in requested]


def checkpoint_offsets(table_name: str, run_id: str, full_rescan: bool = False) -> dict[str, int]:
    """Open (or, for a cleared task, reuse) this run's offset range at the previous run's end.

    A full rescan opens it at the topic's earliest offsets instead.
    """
    starts = table_run(table_name, run_id).open(full_rescan=full_rescan)
    return {str(p): o for p, o in starts.items()}


def seal_offsets(
    table_name: str, run_id: str, timeout: float = limits.WATERMARK_WAIT.total_seconds()
) -> dict[str, Any]:
    """Record the snapshot's metadata, then seal the range at a watermark committed after it."""
    sealed = table_run(table_name, run_id).seal(timeout=timeout)
    end = sealed.end or {}
    return {
        "start": {str(p): o for p, o in sealed.start.items()},
        "end": {str(p): o for p, o in end.items()},
        "offsets": sum(end.get(p, o) - o for p, o in sealed.start.items()),
    }


def repair_decision(table_name: str, mode: str, before: Mapping[str, Any]) -> dict[str, Any] | None:
    """What follows the first suite run: None (passed: skip repair), the counts to repair, or RunFailed.

    In check-only mode a failed suite fails the run; the outcome for the critical alert rides on the
    exception.
    """
    if mode not in MODES:
        raise ConfigError(f"mode must be one of {MODES}, got {mode!r}")
    if before["success"]:
        return None
    found = before["counts"]
    if mode == "check_only":
        raise RunFailed(
            f"{table_name}: the suite failed in check-only mode: {found}",
            outcome={
                "table": table_name,
                "reason": "the suite failed; check-only mode, nothing repaired",
                "found": found,
                Phase.BEFORE_REPAIR.value: dict(before),
                "data_docs": before.get("data_docs"),
            },
        )
    return found


def repair_verdict(
    table_name: str, before: Mapping[str, Any], after: Mapping[str, Any], audit: Mapping[str, int], *, dry_run: bool
) -> dict[str, Any]:
    """The outcome after reconcile and the second suite run; it carries a ``reason`` when the run fails."""
    outcome = {
        "table": table_name,
        "found": before["counts"],
        "repaired": {} if dry_run else dict(audit),
        "audit": dict(audit),
        Phase.BEFORE_REPAIR.value: dict(before),
        Phase.AFTER_REPAIR.value: dict(after),
        "data_docs": after.get("data_docs"),
    }
    if dry_run:
        outcome["reason"] = "dry run: nothing repaired; the audit lists what a repair would change"
    elif not after["success"]:
        outcome["reason"] = "the suite still fails after repair"
    return outcome


def decide_repair(table_name: str, run_id: str, mode: str, ti: Any) -> dict[str, Any]:
    """Skip the repair branch when the suite passed; fail (critical alert) in check-only mode."""
    from airflow.sdk.exceptions import AirflowSkipException

    before = recorded_outcomes(table_name, run_id, [Phase.BEFORE_REPAIR])[0][Phase.BEFORE_REPAIR]
    try:
        found = repair_decision(table_name, mode, before)
    except RunFailed as failed:
        ti.xcom_push(key=OUTCOME_KEY, value=failed.outcome)
        raise
    if found is None:
        raise AirflowSkipException(f"{table_name}: the suite passed, nothing to repair")
    return found


def confirm_repair(table_name: str, run_id: str, dry_run: bool, ti: Any) -> dict[str, Any]:
    """After reconcile and the second validate: succeed (warning alert) or fail (critical alert)."""
    recorded, audit = recorded_outcomes(table_name, run_id, [Phase.BEFORE_REPAIR, Phase.AFTER_REPAIR])
    outcome = repair_verdict(
        table_name, recorded[Phase.BEFORE_REPAIR], recorded[Phase.AFTER_REPAIR], audit, dry_run=dry_run
    )
    ti.xcom_push(key=OUTCOME_KEY, value=outcome)
    if "reason" in outcome:
        raise RunFailed(f"{table_name}: {outcome['reason']}: {recorded[Phase.AFTER_REPAIR]['counts']}")
    return {"found": outcome["found"], "repaired": audit}


def lake_table_uri(table_name: str) -> str:
    """The Asset URI of a table's lake copy: the Delta table's URI."""
    from ..storage import join

    return join(lake_root(), table_name, "table")


def publish_assets(tables: Sequence[str], outlet_events: Mapping[Any, Any], alias: Any) -> list[str]:
    """Emit one Asset event per reconciled lake table, through the DAG's asset alias."""
    from airflow.sdk import Asset

    uris = []
    for name in tables:
        uri = lake_table_uri(name)
        outlet_events[alias].add(Asset(name=f"cdc_lake.{name}", uri=uri), extra={"table": name})
        uris.append(uri)
    return uris
