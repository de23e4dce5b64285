"""The real embedded stack for integration tests, started and stopped through the project's code.

The tests run their own stack (own run folder and ports) so a developer's stack is left alone.
It starts from empty data once per session and is taken down at the end.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from cdc_dev.stack import Stack, StackConfig
from cdc_dev.stack.config import REPO_ROOT
from cdc_dev.stack.connect import connector_config
from cdc_reconcile import kafka_offsets, state_store
from cdc_reconcile.config import PipelineConfig, TableConfig, load_config
from cdc_reconcile.errors import ReconcileError
from cdc_reconcile.kafka_client import KafkaClient
from cdc_reconcile.lake import version_name
from cdc_reconcile.orchestration.tasks import SPARK_PYTHON_ENV
from cdc_reconcile.run import RunSettings, SourceDatabase, TableRun
from tests.support.lake import delta_rows, is_delta
from tests.support.polling import eventually
from tests.support.spark import executor_python_without_the_package, integration_session

TEST_ENV = {
    "CDC_RUN_DIR": os.environ.get("CDC_TEST_RUN_DIR", str(REPO_ROOT / ".run" / "test-stack")),
    "CDC_PG_PORT": os.environ.get("CDC_TEST_PG_PORT", "25442"),
    "CDC_KAFKA_PORT": os.environ.get("CDC_TEST_KAFKA_PORT", "29102"),
    "CDC_KAFKA_CONTROLLER_PORT": os.environ.get("CDC_TEST_KAFKA_CONTROLLER_PORT", "29103"),
    "CDC_KAFKA_SASL_PORT": os.environ.get("CDC_TEST_KAFKA_SASL_PORT", "29104"),
    # the SASL listener's password: a quote, a backslash, spaces and a non-ASCII letter, so the broker's
    # JAAS file and the Spark side's sasl.jaas.config must quote it right for both clients to log in
    "CDC_KAFKA_SASL_PASSWORD": os.environ.get("CDC_TEST_KAFKA_SASL_PASSWORD", 'te"st \\ sé cret'),
    "CDC_CONNECT_PORT": os.environ.get("CDC_TEST_CONNECT_PORT", "28093"),
    "CDC_AIRFLOW_PORT": os.environ.get("CDC_TEST_AIRFLOW_PORT", "28190"),
    # DAG runs spark-submit each Spark task unless a test runs them on a Spark Connect server of its own
    "CDC_SPARK_CONNECT": "off",
    "CDC_SPARK_CONNECT_PORT": os.environ.get("CDC_TEST_SPARK_CONNECT_PORT", "28512"),
    "CDC_SPARK_CONNECT_UI_PORT": os.environ.get("CDC_TEST_SPARK_CONNECT_UI_PORT", "28551"),
    "CDC_DATA_DOCS_PORT": os.environ.get("CDC_TEST_DATA_DOCS_PORT", "28600"),
    # HDFS for the tests that put the lake on hdfs:// (the developer's ports + 20; the cluster module's are + 10)
    "CDC_HDFS_NAMENODE_PORT": os.environ.get("CDC_TEST_STACK_HDFS_NAMENODE_PORT", "29040"),
    "CDC_HDFS_NAMENODE_HTTP_PORT": os.environ.get("CDC_TEST_STACK_HDFS_NAMENODE_HTTP_PORT", "29890"),
    "CDC_HDFS_DATANODE_PORT": os.environ.get("CDC_TEST_STACK_HDFS_DATANODE_PORT", "29886"),
    "CDC_HDFS_DATANODE_HTTP_PORT": os.environ.get("CDC_TEST_STACK_HDFS_DATANODE_HTTP_PORT", "29884"),
    "CDC_HDFS_DATANODE_IPC_PORT": os.environ.get("CDC_TEST_STACK_HDFS_DATANODE_IPC_PORT", "29887"),
    # the Spark standalone cluster for the DAG run on spark:// (the developer's ports + 20, as HDFS's)
    "CDC_SPARK_MASTER_PORT": os.environ.get("CDC_TEST_STACK_SPARK_MASTER_PORT", "27097"),
    "CDC_SPARK_MASTER_UI_PORT": os.environ.get("CDC_TEST_STACK_SPARK_MASTER_UI_PORT", "28500"),
    "CDC_SPARK_WORKER_UI_PORT": os.environ.get("CDC_TEST_STACK_SPARK_WORKER_UI_PORT", "28501"),
    # the jobs' jars (Kafka source, JDBC driver) as a deployment names them; here the set-up's cache
    "CDC_SPARK_JARS": os.environ.get("CDC_SPARK_JARS") or str(StackConfig().spark_jars_dir),
    # the folder the Data Docs' CDN files are served from; here the set-up's cache
    "CDC_DATA_DOCS_ASSETS": os.environ.get("CDC_DATA_DOCS_ASSETS") or str(StackConfig().data_docs_assets_dir),
}
# A DAG folder other than the repo's dags/ (a stand-in DAG while the real one is being written).
if os.environ.get("CDC_TEST_AIRFLOW_DAGS_FOLDER"):
    TEST_ENV["CDC_AIRFLOW_DAGS_FOLDER"] = os.environ["CDC_TEST_AIRFLOW_DAGS_FOLDER"]

ARTIFACTS = REPO_ROOT / "test-artifacts"


@pytest.fixture(scope="session")
def stack_env() -> Iterator[dict[str, str]]:
    saved = {key: os.environ.get(key) for key in TEST_ENV}
    os.environ.update(TEST_ENV)
    yield dict(TEST_ENV)
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def stack(stack_env: dict[str, str]) -> Iterator[Stack]:
    stack = Stack(StackConfig())
    stack.down(destroy=True)
    try:
        stack.up()
        yield stack
    finally:
        stack.down()


@pytest.fixture(scope="session")
def executor_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The executors' Python of every job the integration tests run: nothing installed, no ``cdc_reconcile``."""
    return executor_python_without_the_package(tmp_path_factory.mktemp("executor-python"))


@pytest.fixture(scope="module")
def dag_executor_python(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """For a module's DAG runs: the Spark tasks' executors get a Python with nothing installed
    (``CDC_SPARK_PYTHON``); the folder records each start of it."""
    folder = tmp_path_factory.mktemp("dag-executor-python")
    os.environ[SPARK_PYTHON_ENV] = executor_python_without_the_package(folder)
    yield folder
    os.environ.pop(SPARK_PYTHON_ENV, None)


@pytest.fixture(scope="module")
def airflow_stack(stack: Stack, dag_executor_python: Path) -> Iterator[Stack]:
    """The session's stack, reset to empty data, plus Airflow (API server + UI, scheduler, DAG
    processor), for one test module: a gigabyte and a scheduler loop that the other tests on 2 cores
    should not pay for.

    The reset gives the module a known start: earlier modules leave lost events (rows deleted while a
    table was out of the publication), unrepaired dry-run lakes and sealed ranges in the shared
    topics and state, which a DAG run in check-only mode would rightly report.
    """
    stack.down(destroy=True)
    stack.up()
    stack.with_airflow = True
    os.environ["CDC_AIRFLOW_SCHEDULES"] = "off"  # only the test's own runs; no hourly run in between
    try:
        stack.start_airflow()
        yield stack
    finally:
        stack.with_airflow = False
        os.environ.pop("CDC_AIRFLOW_SCHEDULES", None)
        stack.stop_airflow()
        assert not stack.airflow.leftover_pids(), "airflow processes survived stop"
        assert not stack.spark_connect.pids(), "the spark connect server survived stop"


@pytest.fixture(scope="session")
def config(stack: Stack) -> StackConfig:
    return stack.config


@pytest.fixture
def pg(config: StackConfig) -> Iterator[psycopg.Connection]:
    with psycopg.connect(config.pg_dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture
def state_db(config: StackConfig) -> Iterator[psycopg.Connection]:
    """The run-state database (not the captured one), with its ``cdc_reconcile`` schema."""
    with state_store.connect(config.state_dsn) as conn:
        state_store.ensure_state_schema(conn)
        yield conn


@pytest.fixture(scope="session")
def spark(stack, executor_python: str) -> Iterator:
    """One local Spark session for all integration tests (starting one costs seconds on 2 cores); its
    executors' Python cannot import the package, as on a cluster that was not given it."""
    session = integration_session(TEST_ENV["CDC_SPARK_JARS"], executor_python=executor_python)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


def table_run(
    spark,
    config: StackConfig,
    table: TableConfig,
    lake: Path,
    run_id: str,
    *,
    pipeline: PipelineConfig | None = None,
    kafka: KafkaClient | None = None,
) -> TableRun:
    """The run object against the test stack's services, as the DAG's tasks and jobs build it.

    ``kafka``: the Kafka connection (default: the stack's plaintext listener).
    """
    settings = RunSettings(
        lake_root=str(lake),
        state_dsn=config.state_dsn,
        kafka=kafka or KafkaClient(config.bootstrap_servers),
        source=SourceDatabase(
            dsn=config.pg_dsn, jdbc_url=config.pg_jdbc_url, user=config.pg_user, password=config.pg_password
        ),
        pipeline=pipeline or load_config(),
        data_docs_assets=Path(TEST_ENV["CDC_DATA_DOCS_ASSETS"]),
    )
    return TableRun(table, run_id, settings, spark=spark)


def take_snapshot(spark, config: StackConfig, table, lake: Path, run_id: str, partitions: int = 4):
    """The snapshot step against the test stack's database."""
    return table_run(spark, config, table, lake, run_id).snapshot(partitions=partitions)


def run_once(
    spark,
    config,
    table: TableConfig,
    lake: Path,
    run_id: str,
    *,
    watermark_topic: str | None = None,
    pipeline: PipelineConfig | None = None,
    kafka: KafkaClient | None = None,
    whole_transactions: bool = True,
    after_open: Callable[[], None] | None = None,
):
    """open -> snapshot -> seal -> compact -> check, the steps of the DAG's run, through the run object.

    The first run into an empty lake is a full rescan (the DAG's ``full_rescan``): other test modules
    may have sealed ranges of the same table for their own lakes. ``kafka``: see :func:`table_run`.
    ``whole_transactions``: every transaction the run checked arrived whole (read with delta-rs), so
    each test's range also tries the completeness check against false alarms. ``after_open``: what
    happens between the range's open and the snapshot.
    """
    run = table_run(spark, config, table, lake, run_id, pipeline=pipeline, kafka=kafka)
    full_rescan = not is_delta(run.lake.table)
    eventually(lambda: _topic_exists(config.bootstrap_servers, table.topic), timeout=60, what=f"topic {table.topic}")
    run.open(full_rescan=full_rescan)
    if after_open is not None:
        after_open()
    run.snapshot(partitions=2)
    sealed = run.seal(timeout=180, watermark_topic=watermark_topic)
    summary = run.compact(full_rescan=full_rescan)
    if whole_transactions and is_delta(run.lake.transactions):
        checked = delta_rows(run.lake.transactions, run=version_name(run_id))
        assert not [r for r in checked if r["status"] in ("incomplete", "no END record")], checked
    report, diff = run.check()
    diff.unpersist()
    return summary, report, sealed


def _topic_exists(bootstrap: str, topic: str) -> bool:
    try:
        return bool(kafka_offsets.list_partitions(bootstrap, topic, timeout=5))
    except ReconcileError:
        return False


@contextmanager
def own_connector(
    stack: Stack,
    config: StackConfig,
    *,
    prefix: str,
    slot: str,
    tables: Sequence[str],
    create: Sequence[str],
    extra: Mapping[str, str] | None = None,
) -> Iterator[str]:
    """Tables of a test's own, captured by a connector of its own (own topics, slot and publication).

    ``create`` makes the tables (dropped first and again at the end); the watermark table is captured
    too, so the run's seal works on the test's topics. ``extra``: connector settings on top of the
    stack's. Yields the connector's name.
    """
    name = f"cdc-{prefix}"
    with psycopg.connect(config.pg_dsn, autocommit=True) as pg:
        for table in tables:
            pg.execute(f"DROP TABLE IF EXISTS {table}")
        for statement in create:
            pg.execute(statement)
    stack.connect.put_connector(
        name,
        {
            **connector_config(config),
            "topic.prefix": prefix,
            "slot.name": slot,
            "publication.name": slot,
            "table.include.list": ",".join([*tables, load_config().watermark_table]),
            **(extra or {}),
        },
    )
    stack.connect.wait_connector_running(name, timeout=180)
    try:
        yield name
    finally:
        stack.connect.delete_connector(name)
        with psycopg.connect(config.pg_dsn, autocommit=True) as pg:
            eventually(
                lambda: (
                    not pg.execute(
                        "SELECT 1 FROM pg_replication_slots WHERE slot_name = %s AND active", (slot,)
                    ).fetchone()
                ),
                timeout=60,
                what=f"slot {slot} released by the deleted connector",
            )
            pg.execute(
                "SELECT pg_drop_replication_slot(%s) WHERE EXISTS (SELECT 1 FROM pg_replication_slots "
                "WHERE slot_name = %s)",
                (slot, slot),
            )
            pg.execute(f"DROP PUBLICATION IF EXISTS {slot}")
            for table in tables:
                pg.execute(f"DROP TABLE IF EXISTS {table}")
