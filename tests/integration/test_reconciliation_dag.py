"""The reconciliation DAG end to end (``airflow dags test``) on the real stack, with real faults.

* a clean run passes the suite, repairs nothing and sends no alert;
* after an injected snapshot re-run (Connect's source offsets reset twice: Debezium snapshots the
  tables again), the suite fails, the repair drops the duplicates, the suite passes again and exactly
  one warning alert names the counts, which equal a count taken straight from Kafka;
* after lost events (changes made while the table was out of the publication), a dry run cannot
  repair: the run fails and one critical alert names missing, stale and extra rows;
* a Spark job that hangs (its snapshot waits on a lock the test holds on the source table) is
  stopped at its execution timeout, its ``spark-submit`` and driver are gone, and one critical alert
  says so;
* with the lake root on HDFS, a run reconciles the lake there, and the table equals PostgreSQL;
* on the stack's Spark standalone cluster (``spark://``, executors on its worker) with the lake on HDFS,
  a run taken while the loader writes, then one after it stopped, leave a table equal to PostgreSQL.

The clean run and the hung job use the default launcher (``spark-submit``, a driver per task); the
redelivery and the lost events run on one Spark Connect server (``CDC_SPARK_CONNECT=on``), started
once for the module: that launcher's whole path (snapshot to publication, a repair, a failed run).

It runs after ``test_engine`` (file order) on ``public.order_lines``, whose topic the engine tests
never damaged, so the first run can rebuild its lake from the whole topic (full rescan) whatever
earlier tests sealed.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psutil
import psycopg
import pytest
import requests

from cdc_dev.faults.checks import consume, duplicates
from cdc_dev.loader import run_loader
from cdc_dev.stack import StackConfig
from cdc_dev.stack.airflow import spark_connection
from cdc_dev.stack.connect import Connect
from cdc_dev.stack.dag_runs import DagRunResult, run_dag
from cdc_dev.stack.hdfs import hadoop_java
from cdc_dev.stack.spark_cluster import cluster_session_conf
from cdc_dev.stack.spark_connect import SparkConnectServer
from cdc_dev.stack.topics import write_again
from cdc_reconcile import kafka_offsets, run_state, state_store
from cdc_reconcile.offline_docs import external_resources
from cdc_reconcile.orchestration.limits import SPARK_TASK_SWITCH
from cdc_reconcile.phase import Phase
from cdc_reconcile.progress import INTERVAL_SWITCH as PROGRESS_SWITCH
from tests.support.kafka import read_topic
from tests.support.lake import delta_rows
from tests.support.polling import eventually
from tests.support.spark import EXECUTOR_PYTHON_STARTS

# every DAG run of the module: executors with nothing installed (conftest's dag_executor_python)
pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("dag_executor_python")]

TABLE = "public.order_lines"
TOPIC = "cdc.public.order_lines"
GROUP = "reconcile_table"


class AlertReceiver:
    """A local webhook that keeps every alert posted to it."""

    def __init__(self) -> None:
        received: list[dict] = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                received.append({"path": self.path, **json.loads(body)})
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.received = received
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def connection(self) -> str:
        host, port = self.server.server_address
        return json.dumps(
            {"conn_type": "http", "host": host, "port": port, "schema": "http", "extra": {"endpoint": "/alerts"}}
        )


@pytest.fixture(scope="module")
def alerts() -> Iterator[AlertReceiver]:
    receiver = AlertReceiver()
    receiver.thread.start()
    yield receiver
    receiver.server.shutdown()


@pytest.fixture(scope="module")
def spark_connect(stack, config) -> Iterator[StackConfig]:
    """A Spark Connect server for the module's runs that ask for it; the configuration naming it."""
    on_connect = replace(config, spark_connect_enabled=True)
    server = SparkConnectServer(on_connect, stack.hdfs.conf_dir)
    server.start()
    try:
        yield on_connect
    finally:
        server.stop()


def on_spark_connect(on_connect: StackConfig) -> dict[str, str]:
    """A run's environment: ``spark_default`` is the server, and the jobs log their progress."""
    return {PROGRESS_SWITCH: "1", "AIRFLOW_CONN_SPARK_DEFAULT": spark_connection(on_connect)}


def assert_ran_on_spark_connect(on_connect: StackConfig, result: DagRunResult) -> None:
    """Every Spark task was a client of the server: no driver of its own, the server's UI named."""
    log = result.log.read_text()
    for job in ("snapshot_source", "compact_cdc", "validate"):
        assert f"{job} on the Spark Connect server {on_connect.spark_connect_url}/" in log, job
        ui = rf"\[progress\] {job} {TABLE}: Spark UI: {on_connect.spark_connect_ui_url} \(the Spark Connect server's"
        assert re.search(ui, log), f"{job}: no line naming the server's Spark UI"
    assert not re.search("spark-submit cmd", log, re.I), "a Spark task spark-submitted a driver of its own"


def dag_run(
    config, alerts: AlertReceiver, artifacts, label: str, env: dict[str, str] | None = None, **params
) -> DagRunResult:
    result = run_dag(
        config,
        {"tables": [TABLE], **params},
        extra_env={"AIRFLOW_CONN_CDC_ALERTS": alerts.connection, **(env or {})},
        label=label,
    )
    (artifacts / f"dag_run_{label}.json").write_text(
        json.dumps({"run_id": result.run_id, "state": result.state, "seconds": result.seconds, "tasks": result.tasks})
    )
    return result


def task(result: DagRunResult, name: str) -> str | None:
    return result.task_state(f"{GROUP}.{name}")


def outcome(config, run_id: str, phase: Phase) -> dict:
    with state_store.connect(config.state_dsn) as conn:
        return run_state.latest_suite_outcome(conn, run_id, TABLE, phase)


def independent_duplicates(config, run_id: str) -> dict[str, int]:
    """Duplicates in the run's offset range, by cause, counted from the raw topic with a plain consumer."""
    with state_store.connect(config.state_dsn) as conn:
        sealed = state_store.get_range(conn, run_id, TABLE)
    return duplicates(consume(config.bootstrap_servers, TOPIC, timeout=30), sealed.start, sealed.end)


def lake_rows(spark, config) -> set[tuple]:
    table = delta_rows(config.lake_root / TABLE / "table", columns=["order_id", "line_no", "quantity"])
    return {(r["order_id"], r["line_no"], r["quantity"]) for r in table}


def source_rows(pg: psycopg.Connection) -> set[tuple]:
    return set(pg.execute(f"SELECT order_id, line_no, quantity FROM {TABLE}").fetchall())


def ensure_topic(config, pg: psycopg.Connection, order_id: int, sku: str) -> None:
    """A run opens its range on the table's topic first: a test run alone writes a row, so Debezium
    creates the topic, and waits for it."""
    pg.execute(
        f"INSERT INTO {TABLE} (order_id, line_no, sku, quantity, unit_price) VALUES (%s, 1, %s, 1, 1.0) "
        "ON CONFLICT DO NOTHING",
        (order_id, sku),
    )
    eventually(
        lambda: kafka_offsets.list_partitions(config.bootstrap_servers, TOPIC, timeout=5),
        timeout=120,
        what=f"topic {TOPIC}",
        retry_on=(kafka_offsets.TopicNotFound,),
    )


def hdfs_table_rows(config, stack, location: str, into) -> set[tuple]:
    """The lake table on HDFS, copied out with Hadoop's own shell and read with delta-rs (no project code)."""
    done = subprocess.run(
        hadoop_java(
            config, stack.hdfs.conf_dir, "org.apache.hadoop.fs.FsShell", "-get", location, str(into), heap="256m"
        ),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return {
        (r["order_id"], r["line_no"], r["quantity"])
        for r in delta_rows(into, columns=["order_id", "line_no", "quantity"])
    }


def spark_cluster_apps(stack) -> list[dict]:
    """Every application the stack's Spark master ran or runs, from its own status page."""
    master = stack.spark.master_state()
    return [*master.get("activeapps", []), *master.get("completedapps", [])]


def test_a_clean_run_passes_the_suite_and_sends_no_alert(
    stack, config, pg, alerts, artifacts, spark, dag_executor_python
):
    stats = run_loader(config.pg_dsn, rate=0, count=400, tables=("order_lines",), seed=41)
    assert stats.total() == 400
    result = dag_run(config, alerts, artifacts, "clean", env={PROGRESS_SWITCH: "1"}, full_rescan=True)
    assert result.state == "success", result
    log = result.log.read_text()
    for job in ("snapshot_source", "compact_cdc", "validate"):
        assert re.search(rf"\[progress\] {job} {TABLE}: Spark UI: http://\S+:\d+", log), f"{job}: no Spark UI line"
    # spark-submit's lines reach the log through the hook's logger (" [airflow..." after them); a job on
    # Spark Connect prints them in the task's own process
    progress = re.findall(r"\[progress\] compact_cdc public\.order_lines: \d+s; (.+?)(?: \[airflow|$)", log, re.M)
    assert any(re.search(r"stage \d+ \d+/\d+ tasks", line) for line in progress), progress
    assert any(re.search(r"[\d,]+ input records read", line) for line in progress), progress
    assert task(result, "validate") == "success"
    assert task(result, "decide_repair") == "skipped"
    assert task(result, "reconcile") == "skipped"
    assert task(result, "publish_lake_table") == "success"
    mapped = [name for name, state in result.tasks.items() if name.startswith(f"{GROUP}.") and state == "success"]
    assert {name: result.labels.get(name) for name in mapped} == dict.fromkeys(mapped, TABLE), "UI names by table"
    initial = outcome(config, result.run_id, Phase.BEFORE_REPAIR)
    assert initial["success"] and initial["counts"]["snapshot_rows"] == len(source_rows(pg))
    assert alerts.received == []
    assert lake_rows(spark, config) == source_rows(pg)
    # the jobs' executors ran Python workers through CDC_SPARK_PYTHON, which cannot import the package
    starts = (dag_executor_python / EXECUTOR_PYTHON_STARTS).read_text().splitlines()
    assert any("pyspark.daemon" in line or "pyspark.worker" in line for line in starts), starts


def test_a_new_snapshot_round_is_no_alarm_and_a_redelivery_is_repaired_with_one_warning(
    stack, config, pg, alerts, artifacts, spark, spark_connect
):
    rows = len(source_rows(pg))
    connect = Connect(config)
    before = sum(
        1 for r in read_topic(config.bootstrap_servers, TOPIC, timeout=30) if (r.payload or {}).get("op") == "r"
    )
    # The connector's offsets reset: Debezium snapshots the whole table again, a complete round
    connect.reset_offsets(config.connector_name)
    eventually(
        lambda: (
            sum(
                1 for r in read_topic(config.bootstrap_servers, TOPIC, timeout=10) if (r.payload or {}).get("op") == "r"
            )
            >= before + rows
        ),
        timeout=120,
        what=f"a snapshot round of {rows} rows in {TOPIC}",
    )
    redelivered = write_again(config.bootstrap_servers, TOPIC, 40)
    assert redelivered == 40
    result = dag_run(config, alerts, artifacts, "redelivery", env=on_spark_connect(spark_connect))
    assert result.state == "success", result
    assert_ran_on_spark_connect(spark_connect, result)
    progress = re.findall(r"\[progress\] compact_cdc public\.order_lines: \d+s; (.+)$", result.log.read_text(), re.M)
    assert any(re.search(r"stage \d+ \d+/\d+ tasks", line) for line in progress), progress
    expected = independent_duplicates(config, result.run_id)
    assert expected == {"redelivery": 40, "snapshot_rerun": 0}, expected

    initial = outcome(config, result.run_id, Phase.BEFORE_REPAIR)
    assert not initial["success"]
    assert {k: initial["counts"][k] for k in expected} == expected
    failed = {c["check"] for c in initial["checks"] if not c["success"]}
    assert "event uniqueness: no redelivery events" in failed
    assert "event uniqueness: no snapshot_rerun events" not in failed, "a complete new round is no re-run"
    assert not any(c["dataset"] == "differences" and not c["success"] for c in initial["checks"]), initial
    assert outcome(config, result.run_id, Phase.AFTER_REPAIR)["success"]
    for name in ("decide_repair", "reconcile", "validate_repaired", "confirm_repair", "publish_lake_table"):
        assert task(result, name) == "success", (name, result.tasks)

    assert len(alerts.received) == 1, alerts.received
    alert = alerts.received[0]
    assert alert["severity"] == "warning" and alert["path"] == "/alerts"
    assert alert["found"] == {k: v for k, v in expected.items() if v}
    assert alert["repaired"] == {k: v for k, v in expected.items() if v}
    assert "redelivery 40" in alert["text"]
    # the pages the alert links, opened as a person would: over HTTP, from the stack's Data Docs server
    assert alert["data_docs"].startswith(config.data_docs_url), alert["data_docs"]
    page = requests.get(alert["data_docs"], timeout=30)
    assert page.ok and result.run_id in page.text, (page.status_code, alert["data_docs"])
    assert external_resources(page.text) == [], "Data Docs read offline"
    report, _, anchor = alert["report"].partition("#")
    assert anchor == f"table-{TABLE}" and f"Trend report: {alert['report']}" in alert["text"]
    assert report.startswith(config.data_docs_url), report
    trends = requests.get(report, timeout=30).text
    assert f'data-table="{TABLE}"' in trends and f'data-run="{result.run_id}"' in trends, "this run in the report"
    assert alert["run_url"].startswith(f"{config.airflow_url}/dags/cdc_reconciliation/runs/")
    assert lake_rows(spark, config) == source_rows(pg), "no committed source row is missing from the lake"


def test_lost_events_that_a_dry_run_cannot_repair_fail_the_run_with_a_critical_alert(
    stack, config, pg, alerts, artifacts, spark_connect
):
    already = len(alerts.received)
    with pg.transaction():
        keys = pg.execute(f"SELECT order_id, line_no FROM {TABLE} ORDER BY order_id, line_no LIMIT 5").fetchall()
    stale, extra = keys[:3], keys[3:]
    pg.execute(f"ALTER PUBLICATION {config.publication_name} DROP TABLE {TABLE}")
    try:
        with pg.transaction():
            pg.execute(
                f"INSERT INTO {TABLE} (order_id, line_no, sku, quantity, unit_price) "
                "SELECT 900000 + g, 1, 'LOST-' || g, g, 1.5 FROM generate_series(1, 4) g"
            )
            for order_id, line_no in stale:
                pg.execute(
                    f"UPDATE {TABLE} SET quantity = quantity + 1000 WHERE order_id = %s AND line_no = %s",
                    (order_id, line_no),
                )
            for order_id, line_no in extra:
                pg.execute(f"DELETE FROM {TABLE} WHERE order_id = %s AND line_no = %s", (order_id, line_no))
    finally:
        pg.execute(f"ALTER PUBLICATION {config.publication_name} ADD TABLE {TABLE}")

    result = dag_run(config, alerts, artifacts, "lost-dry-run", env=on_spark_connect(spark_connect), dry_run=True)
    assert result.state == "failed", result
    assert_ran_on_spark_connect(spark_connect, result)
    assert task(result, "reconcile") == "success"
    assert '"findings": "validate\'s"' in result.log.read_text(), "reconcile took validate's findings"
    assert task(result, "confirm_repair") == "failed"
    assert task(result, "publish_lake_table") in ("upstream_failed", "skipped")
    counts = outcome(config, result.run_id, Phase.BEFORE_REPAIR)["counts"]
    assert (counts["missing"], counts["stale"], counts["extra"]) == (4, 3, 2), counts
    # the changes never reached Kafka: each difference arose between the source and the topic
    arose = {stage: counts[f"stage {stage}"] for stage in ("source->topic", "topic->lake", "lake")}
    assert arose == {"source->topic": 9, "topic->lake": 0, "lake": 0}, counts
    with state_store.connect(config.state_dsn) as conn:
        assert run_state.audit_counts(conn, result.run_id, TABLE) == {"extra": 2, "missing": 4, "stale": 3}
        assert run_state.audit_stages(conn, result.run_id, TABLE) == {
            "extra": {"source->topic": 2},
            "missing": {"source->topic": 4},
            "stale": {"source->topic": 3},
        }

    new = alerts.received[already:]
    assert len(new) == 1, new
    alert = new[0]
    assert alert["severity"] == "critical"
    assert alert["found"] == {"missing": 4, "extra": 2, "stale": 3}
    assert alert["arose"] == {"source->topic": 9}
    assert "where the differences arose: source->topic 9" in alert["text"]
    assert alert["repaired"] == {}
    assert "dry run" in alert["title"]
    assert "no missing rows: 4 unexpected" in alert["text"]


def processes_of_run(run_id: str) -> list[str]:
    """Command lines of live processes started for ``run_id`` (Spark jobs get it as ``--run-id``)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if run_id in cmdline and any("spark" in part for part in cmdline):
            found.append(" ".join(cmdline))
    return found


def test_a_hung_spark_job_is_stopped_at_its_timeout_and_alerted(stack, config, pg, alerts, artifacts):
    ensure_topic(config, pg, 990001, "HUNG")
    already = len(alerts.received)
    with psycopg.connect(config.pg_dsn) as holder:
        holder.execute(f"LOCK TABLE {TABLE} IN ACCESS EXCLUSIVE MODE")
        # 45 s per try: the JVM starts well within it and then waits on the lock until it is stopped.
        result = dag_run(config, alerts, artifacts, "hung-snapshot", env={SPARK_TASK_SWITCH: "0.75"})
        waiting = holder.execute(
            "SELECT count(*) FROM pg_locks WHERE relation = %s::regclass AND NOT granted", (TABLE,)
        ).fetchone()[0]
    assert result.state == "failed", result
    assert task(result, "snapshot_source") == "failed"
    assert result.tries[f"{GROUP}.snapshot_source[0]"] == 2, result.tries
    assert task(result, "seal_offsets") == "upstream_failed"
    assert task(result, "compact_cdc") == "upstream_failed"
    assert waiting >= 1, "the snapshot never reached the source table: nothing hung on the lock"
    log = result.log.read_text()
    assert log.count("Sending kill signal to") == 2, "on_kill did not kill spark-submit on each try"
    assert eventually(
        lambda: not processes_of_run(result.run_id), timeout=60, what=f"no Spark process of {result.run_id} left"
    )

    new = alerts.received[already:]
    assert len(new) == 1, new
    alert = new[0]
    assert alert["severity"] == "critical"
    assert alert["run_id"] == result.run_id
    assert alert["task_id"] == f"{GROUP}.snapshot_source"
    assert "execution timeout of 0:00:45" in alert["text"]


@pytest.mark.slow  # a DAG run on HDFS (~5 min) runs with `-m slow`, keeping the test command under CI's limit
def test_a_run_with_the_lake_on_hdfs_reconciles_it_there(stack, config, pg, alerts, artifacts, tmp_path):
    """One DAG run end to end with the lake root on the stack's HDFS (NameNode + DataNode).

    The lake table is then copied out with Hadoop's own shell and read with delta-rs: no project code.
    """
    ensure_topic(config, pg, 990002, "HDFS")
    stack.hdfs.start()
    try:
        lake_root = f"{config.hdfs_lake_uri}/dag-run"
        gx_path = f"/dag-run-gx-{tmp_path.name}"  # Great Expectations' project on HDFS too, through WebHDFS
        gx_root = f"webhdfs://{config.host}:{config.hdfs_namenode_http_port}{gx_path}"
        result = dag_run(
            config,
            alerts,
            artifacts,
            "hdfs",
            env={
                "AIRFLOW_VAR_CDC_LAKE_ROOT": lake_root,
                "AIRFLOW_VAR_CDC_GX_ROOT": gx_root,
                "AIRFLOW_VAR_CDC_DATA_DOCS_URL": "",  # the stack serves its own GX root's site
            },
            full_rescan=True,
        )
        assert result.state == "success", result
        assert task(result, "publish_lake_table") == "success"
        assert hdfs_table_rows(config, stack, f"{lake_root}/{TABLE}/table", tmp_path / "table") == source_rows(pg)
        assert not (config.lake_root / "dag-run").exists(), "the lake went to the local filesystem"
        # the run's Data Docs and trend report, read with plain WebHDFS requests
        site = f"{config.hdfs_namenode_ui_url}/webhdfs/v1{gx_path}/gx/uncommitted/data_docs/local_site"
        index = requests.get(f"{site}/index.html", params={"op": "OPEN"}, timeout=30)
        assert index.ok, index.text
        assert result.run_id.replace(":", "-") in index.text, "the run's validation is not in the index"
        trends = requests.get(f"{site}/cdc_trends.html", params={"op": "OPEN"}, timeout=30)
        assert trends.ok and f'data-run="{result.run_id}"' in trends.text
    finally:
        stack.hdfs.stop()


@pytest.mark.slow  # two DAG runs on the cluster (~15 min): `-m slow`, keeping the test command under CI's limit
def test_runs_on_the_spark_cluster_with_the_lake_on_hdfs_keep_the_table_equal_to_postgres(
    stack, config, pg, alerts, artifacts, tmp_path
):
    """Issue 15's deployment shape: spark-submit to ``spark://`` (client mode: the driver in the task, the
    executors on the worker), the lake on ``hdfs://``.

    The first run (a full rescan) is taken while the loader writes; the second after it stopped, so its
    table must equal PostgreSQL. The table is read with Hadoop's shell and delta-rs, the applications
    from the master's own status page.
    """
    ensure_topic(config, pg, 990003, "CLUSTER")
    stack.start_cluster()
    alerts_before = list(alerts.received)
    try:
        before = {app["id"] for app in spark_cluster_apps(stack)}
        conf_dir = tmp_path / "spark-conf"
        conf_dir.mkdir()
        # the deployment's spark-defaults.conf (the tasks load it with --load-spark-defaults)
        (conf_dir / "spark-defaults.conf").write_text(
            "".join(f"{key} {value}\n" for key, value in cluster_session_conf(config).items())
        )
        lake_root = f"{config.hdfs_lake_uri}/cluster-run"
        spark_default = {
            "conn_type": "spark",
            "host": config.spark_master_url,
            "extra": {"spark-binary": "spark-submit", "deploy-mode": "client"},
        }
        env = {
            "AIRFLOW_VAR_CDC_LAKE_ROOT": lake_root,
            "AIRFLOW_VAR_CDC_GX_ROOT": str(tmp_path / "gx"),  # Great Expectations' project stays local
            "AIRFLOW_VAR_CDC_DATA_DOCS_URL": "",
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(spark_default),
            "SPARK_CONF_DIR": str(conf_dir),
        }
        stop = threading.Event()
        loaded: list = []
        loader = threading.Thread(
            target=lambda: loaded.append(
                run_loader(config.pg_dsn, rate=20, stop=stop, tables=("order_lines",), seed=151)
            ),
            daemon=True,
        )
        loader.start()
        try:
            first = dag_run(config, alerts, artifacts, "cluster-under-load", env=env, full_rescan=True)
        finally:
            stop.set()
            loader.join(timeout=60)
        assert loaded and loaded[0].total() > 0, "the loader wrote nothing while the run ran"
        assert first.state == "success", first
        second = dag_run(config, alerts, artifacts, "cluster", env=env)
        assert second.state == "success", second
        for run in (first, second):  # exact as of each snapshot, under load or not: nothing to repair
            assert (task(run, "validate"), task(run, "reconcile")) == ("success", "skipped"), run
            assert task(run, "publish_lake_table") == "success"
        assert alerts.received == alerts_before

        assert hdfs_table_rows(config, stack, f"{lake_root}/{TABLE}/table", tmp_path / "table") == source_rows(pg)
        assert not (config.lake_root / "cluster-run").exists(), "the lake went to the local filesystem"
        apps = [app for app in spark_cluster_apps(stack) if app["id"] not in before]
        names = sorted(app["name"] for app in apps)  # "<job>:<table>", one application per Spark task
        for job in ("snapshot_source", "compact_cdc", "validate"):
            assert sum(name.startswith(f"{job}:") for name in names) >= 2, (job, names)  # both runs
        assert all(app["state"] == "FINISHED" for app in apps), [(a["name"], a["state"]) for a in apps]
        for run in (first, second):
            log = run.log.read_text()
            assert f"--master {config.spark_master_url}" in log, "a Spark task did not submit to the cluster"
            assert "--master local" not in log
    finally:
        stack.stop_cluster()
