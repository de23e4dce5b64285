"""The real embedded stack for integration tests, started and stopped through the project's code.

The tests run their own stack (own run folder and ports) so a developer's stack is left alone.
It starts from empty data once per session and is taken down at the end.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from cdc_dev.stack import Stack, StackConfig
from cdc_dev.stack.config import REPO_ROOT
from cdc_reconcile import checkpoints, storage
from cdc_reconcile.config import TableConfig, load_config
from cdc_reconcile.pipeline import TableLake, check, compact
from tests.support.polling import eventually
from tests.support.spark import integration_session

TEST_ENV = {
    "CDC_RUN_DIR": os.environ.get("CDC_TEST_RUN_DIR", str(REPO_ROOT / ".run" / "test-stack")),
    "CDC_PG_PORT": os.environ.get("CDC_TEST_PG_PORT", "55442"),
    "CDC_KAFKA_PORT": os.environ.get("CDC_TEST_KAFKA_PORT", "59102"),
    "CDC_KAFKA_CONTROLLER_PORT": os.environ.get("CDC_TEST_KAFKA_CONTROLLER_PORT", "59103"),
    "CDC_CONNECT_PORT": os.environ.get("CDC_TEST_CONNECT_PORT", "58093"),
    "CDC_AIRFLOW_PORT": os.environ.get("CDC_TEST_AIRFLOW_PORT", "58190"),
    # the jobs' jars (Kafka source, JDBC driver) as a deployment names them; here the set-up's cache
    "CDC_SPARK_JARS": os.environ.get("CDC_SPARK_JARS") or str(StackConfig().spark_jars_dir),
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


@pytest.fixture(scope="module")
def airflow_stack(stack: Stack) -> Iterator[Stack]:
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
        stack.airflow.start()
        yield stack
    finally:
        stack.with_airflow = False
        os.environ.pop("CDC_AIRFLOW_SCHEDULES", None)
        stack.airflow.stop()
        assert not stack.airflow.leftover_pids(), "airflow processes survived stop"


@pytest.fixture(scope="session")
def config(stack: Stack) -> StackConfig:
    return stack.config


@pytest.fixture
def pg(config: StackConfig) -> Iterator[psycopg.Connection]:
    with psycopg.connect(config.pg_dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture(scope="session")
def spark(stack) -> Iterator:
    """One local Spark session for all integration tests (starting one costs seconds on 2 cores)."""
    session = integration_session(TEST_ENV["CDC_SPARK_JARS"])
    yield session
    session.stop()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


def take_snapshot(spark, config: StackConfig, table, lake: Path, run_id: str, partitions: int = 4):
    """The snapshot job's library call against the test stack's database."""
    from cdc_reconcile.snapshot import snapshot_table

    return snapshot_table(
        spark,
        table,
        dsn=config.pg_dsn,
        jdbc_url=config.pg_jdbc_url,
        user=config.pg_user,
        password=config.pg_password,
        lake_root=lake,
        run_id=run_id,
        partitions=partitions,
    )


def run_once(spark, config, table: TableConfig, lake: Path, run_id: str, *, watermark_topic: str | None = None):
    """checkpoint_offsets -> snapshot_source -> seal_offsets -> compact_cdc -> diff, as the DAG runs them.

    The first run into an empty lake is a full rescan (the DAG's ``full_rescan``): other test modules
    may have sealed ranges of the same table for their own lakes.
    """
    pipeline = load_config()
    bootstrap = config.bootstrap_servers
    table_lake = TableLake(lake, table.name)
    full_rescan = storage.current_version(table_lake.table) is None
    with checkpoints.connect(config.pg_dsn) as conn:
        checkpoints.ensure_state_schema(conn)
        eventually(lambda: _topic_exists(bootstrap, table.topic), timeout=60, what=f"topic {table.topic}")
        partitions = checkpoints.list_partitions(bootstrap, table.topic)
        earliest = checkpoints.earliest_offsets(bootstrap, table.topic, partitions) if full_rescan else None
        checkpoints.open_range(conn, run_id, table.name, table.topic, partitions, start_offsets=earliest)
        result = take_snapshot(spark, config, table, lake, run_id, partitions=2)
        meta = result.metadata
        checkpoints.record_snapshot(conn, run_id, table.name, checkpoints.snapshot_fields(meta))
        sealed = checkpoints.seal_offsets(
            conn,
            bootstrap=bootstrap,
            run_id=run_id,
            table=table.name,
            watermark_table=pipeline.watermark_table,
            watermark_topic=watermark_topic or f"{table.topic_prefix}.{pipeline.watermark_table}",
            timeout=180,
        )
    starting, ending = sealed.as_spark_json()
    summary = compact(
        spark,
        lake=table_lake,
        run_id=run_id,
        key=table.key,
        bootstrap=bootstrap,
        starting=starting,
        ending=ending,
        full_rescan=full_rescan,
    )
    report, _ = check(spark, lake=table_lake, run_id=run_id, key=table.key)
    return summary, report, sealed


def _topic_exists(bootstrap: str, topic: str) -> bool:
    try:
        return bool(checkpoints.list_partitions(bootstrap, topic, timeout=5))
    except checkpoints.CheckpointError:
        return False
