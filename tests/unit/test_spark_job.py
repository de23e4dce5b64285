"""The Spark tasks hand their jobs the connections as Spark configuration, in a private properties file.

The connections are Airflow's own, defined as ``AIRFLOW_CONN_*`` variables the way a deployment would;
the spark-submit command is the provider hook's own. The last test runs a real spark-submit through
the operator, with nothing to connect to: the job's error names the host it read from its Spark conf.
"""

from __future__ import annotations

import json
import os
import re
import socket
import stat
import sys
from pathlib import Path

import pytest

from cdc_reconcile.errors import UnreachableError
from cdc_reconcile.jobs import job_conf
from cdc_reconcile.orchestration import spark_job, tasks

SOURCE_PASSWORD = "s0urce pa$$ 'q' \\ é"
STATE_PASSWORD = "st@te-secret"
KAFKA_PASSWORD = 'ka"fka-secret'
# Spark's default spark.redaction.regex (core/src/main/scala/org/apache/spark/internal/config/package.scala)
SPARK_DEFAULT_REDACTION = "(?i)secret|password|token|access[.]?key"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def connections(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """cdc_state, cdc_source, cdc_kafka and spark_default (local[1]); nothing listens on their ports."""
    ports = {"state": closed_port(), "source": closed_port(), "kafka": closed_port()}
    postgres = {"conn_type": "postgres", "host": "127.0.0.1", "login": "cdc"}
    monkeypatch.setenv(
        "AIRFLOW_CONN_CDC_STATE",
        json.dumps({**postgres, "port": ports["state"], "schema": "cdc_state", "password": STATE_PASSWORD}),
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_CDC_SOURCE",
        json.dumps({**postgres, "port": ports["source"], "schema": "cdc_demo", "password": SOURCE_PASSWORD}),
    )
    kafka_extra = {
        "bootstrap.servers": f"127.0.0.1:{ports['kafka']}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "cdc",
        "sasl.password": KAFKA_PASSWORD,
    }
    monkeypatch.setenv("AIRFLOW_CONN_CDC_KAFKA", json.dumps({"conn_type": "kafka", "extra": kafka_extra}))
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_DEFAULT",
        json.dumps({"conn_type": "spark", "host": "local[1]", "extra": {"spark-binary": "spark-submit"}}),
    )
    return ports


def operator(connections_read: tuple[str, ...], job: str = "compact_cdc", **kwargs) -> spark_job.CdcSparkJobOperator:
    return spark_job.CdcSparkJobOperator(
        task_id=f"t_{job}",
        application=tasks.job(job),
        application_args=["--table", "public.customers", "--run-id", "r1", "--lake-root", "/nonexistent"],
        connections=connections_read,
        conn_id=tasks.SPARK_CONN,
        conf={"spark.pyspark.python": "{{ cluster_python() }}"},
        **kwargs,
    )


def read_properties(path: Path) -> dict[str, str]:
    """What java.util.Properties reads back (one ``key=value`` a line, as write_properties writes them)."""
    escapes = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}

    def unescape(text: str) -> str:
        def one(match: re.Match) -> str:
            code = match.group(1)
            return chr(int(code[1:], 16)) if code[0] == "u" and len(code) == 5 else escapes.get(code, code)

        raw = re.sub(r"\\(u[0-9a-fA-F]{4}|.)", one, text)
        return raw.encode("utf-16", "surrogatepass").decode("utf-16")

    out = {}
    for line in path.read_text(encoding="ascii").splitlines():
        key, value = re.match(r"((?:[^\\=]|\\.)*)=(.*)", line).groups()
        out[unescape(key)] = unescape(value)
    return out


def test_the_properties_file_is_private_holds_what_the_job_reads_and_is_gone_after_the_task(connections, monkeypatch):
    seen: dict = {}

    def submit(hook, application: str = "", **kwargs) -> None:
        path = Path(hook._properties_file)
        seen["mode"] = stat.S_IMODE(path.stat().st_mode)
        seen["folder_mode"] = stat.S_IMODE(path.parent.stat().st_mode)
        seen["settings"] = read_properties(path)
        seen["path"] = path
        seen["command"] = hook._build_spark_submit_command(application)

    monkeypatch.setattr(spark_job.SparkSubmitHook, "submit", submit)
    operator(("state", "source", "kafka")).execute({})

    assert seen["mode"] == 0o600 and seen["folder_mode"] == 0o700
    assert not seen["path"].exists() and not seen["path"].parent.exists()
    settings = seen["settings"]
    assert set(settings) == {
        job_conf.STATE_DSN,
        job_conf.SOURCE_DSN,
        job_conf.SOURCE_JDBC_URL,
        job_conf.SOURCE_USER,
        job_conf.SOURCE_PASSWORD,
        job_conf.KAFKA_CONFIG,
    }
    state = settings[job_conf.STATE_DSN]
    assert f"port={connections['state']}" in state and STATE_PASSWORD in state
    assert settings[job_conf.SOURCE_PASSWORD] == SOURCE_PASSWORD
    assert settings[job_conf.SOURCE_JDBC_URL] == f"jdbc:postgresql://127.0.0.1:{connections['source']}/cdc_demo"
    assert settings[job_conf.SOURCE_USER] == "cdc"
    assert json.loads(settings[job_conf.KAFKA_CONFIG])["sasl.password"] == KAFKA_PASSWORD

    command = seen["command"]
    at = command.index("--properties-file")
    assert command[at + 1] == str(seen["path"]) and command[at + 2] == "--load-spark-defaults"
    assert f"spark.pyspark.driver.python={sys.executable}" in command
    text = " ".join(command)
    for secret in (STATE_PASSWORD, SOURCE_PASSWORD, KAFKA_PASSWORD, "sasl", "dsn"):
        assert secret not in text


def test_a_job_gets_only_the_connections_it_names_and_the_file_goes_when_the_task_fails(connections, monkeypatch):
    seen: dict = {}

    def submit(hook, application: str = "", **kwargs) -> None:
        seen["path"] = Path(hook._properties_file)
        seen["settings"] = read_properties(seen["path"])
        raise RuntimeError("spark-submit failed")

    monkeypatch.setattr(spark_job.SparkSubmitHook, "submit", submit)
    task = operator(("state",), job="validate")
    with pytest.raises(RuntimeError, match="spark-submit failed"):
        task.execute({})
    assert set(seen["settings"]) == {job_conf.STATE_DSN}
    assert not seen["path"].parent.exists() and task.properties_file is None
    with pytest.raises(ValueError, match="unknown connections"):
        operator(("state", "vault"))
    with pytest.raises(ValueError, match=r"spark-defaults\.conf"):
        operator(("state",), properties_file="/etc/spark/job.conf")


def test_the_jobs_python_is_the_tasks_unless_the_deployment_names_another(monkeypatch):
    monkeypatch.delenv(tasks.SPARK_PYTHON_ENV, raising=False)
    assert tasks.cluster_python() == sys.executable
    monkeypatch.setenv(tasks.SPARK_PYTHON_ENV, "/opt/cdc/venv/bin/python")
    assert tasks.cluster_python() == "/opt/cdc/venv/bin/python"


@pytest.mark.parametrize(("deploy_mode", "driver"), [(None, sys.executable), ("cluster", "/opt/cluster/bin/python")])
def test_the_driver_runs_the_tasks_python_in_client_mode_and_the_clusters_in_cluster_mode(
    connections, monkeypatch, deploy_mode, driver
):
    """In client mode the driver starts on the Airflow worker, where the cluster's Python may not exist."""
    monkeypatch.setenv(tasks.SPARK_PYTHON_ENV, "/opt/cluster/bin/python")
    seen: dict = {}

    def submit(hook, application: str = "", **kwargs) -> None:
        seen["command"] = hook._build_spark_submit_command(application)

    monkeypatch.setattr(spark_job.SparkSubmitHook, "submit", submit)
    task = operator(("state",), job="validate", deploy_mode=deploy_mode)
    task.conf = {"spark.pyspark.python": tasks.cluster_python()}  # as the DAG's template renders
    task.execute({})
    assert "spark.pyspark.python=/opt/cluster/bin/python" in seen["command"]
    assert f"spark.pyspark.driver.python={driver}" in seen["command"]


def test_sparks_default_redaction_covers_every_secret_key_and_only_those():
    for key in job_conf.SECRET_KEYS:
        assert re.search(SPARK_DEFAULT_REDACTION, key), key
    for key in set(job_conf.ENV_FALLBACK) - set(job_conf.SECRET_KEYS):
        assert not re.search(SPARK_DEFAULT_REDACTION, key), f"{key} is not secret"


def test_the_redaction_regex_is_sparks_default(spark):
    jvm = spark.sparkContext._jvm
    config = getattr(jvm.org.apache.spark.internal.config, "package$").__getattr__("MODULE$")
    assert config.SECRET_REDACTION_PATTERN().defaultValueString() == SPARK_DEFAULT_REDACTION


def test_delta_replays_a_tables_log_in_one_task_unless_configured(spark, monkeypatch):
    """Not Delta's default 50, nor the shuffles' 8: the lake's logs are small, and each partition is a task."""
    from cdc_reconcile.spark import session_settings

    monkeypatch.delenv("CDC_DELTA_LOG_PARTITIONS", raising=False)
    monkeypatch.delenv("CDC_SPARK_SHUFFLE_PARTITIONS", raising=False)
    assert spark.conf.get("spark.databricks.delta.snapshotPartitions") == "1"
    assert session_settings()["spark.databricks.delta.snapshotPartitions"] == "1"
    assert session_settings()["spark.sql.shuffle.partitions"] == "8"
    monkeypatch.setenv("CDC_DELTA_LOG_PARTITIONS", "16")
    assert session_settings()["spark.databricks.delta.snapshotPartitions"] == "16"
    conf = {"spark.databricks.delta.snapshotPartitions": "4"}
    assert session_settings(conf=conf)["spark.databricks.delta.snapshotPartitions"] == "4"


def test_a_job_reads_its_settings_from_the_spark_conf_the_command_line_and_the_environment_override(spark, monkeypatch):
    from cdc_reconcile.jobs import compact_cdc, snapshot_source

    common = ["--table", "public.customers", "--run-id", "r1", "--lake-root", "/lake"]
    for name in job_conf.ENV_FALLBACK.values():
        monkeypatch.delenv(name, raising=False)
    submitted = {
        job_conf.STATE_DSN: "host=conf-state dbname=cdc_state",
        job_conf.SOURCE_DSN: "host=conf-source dbname=cdc_demo",
        job_conf.SOURCE_JDBC_URL: "jdbc:postgresql://conf-source:5432/cdc_demo",
        job_conf.SOURCE_USER: "cdc",
        job_conf.SOURCE_PASSWORD: "conf-pw",
        job_conf.KAFKA_CONFIG: json.dumps(
            {
                "bootstrap.servers": "conf-kafka:9092",
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "PLAIN",
                "sasl.username": "cdc",
                "sasl.password": "k-secret",
            }
        ),
    }
    live = spark.sparkContext._conf  # the running context's SparkConf, as spark-submit would have filled it
    try:
        for key, value in submitted.items():
            live.set(key, value)
        assert job_conf.submitted_conf() == submitted
        args = snapshot_source.parse_args(common)
        assert (args.state_dsn, args.dsn, args.jdbc_url, args.user, args.password) == (
            "host=conf-state dbname=cdc_state",
            "host=conf-source dbname=cdc_demo",
            "jdbc:postgresql://conf-source:5432/cdc_demo",
            "cdc",
            "conf-pw",
        )
        kafka = compact_cdc.kafka_client(compact_cdc.parse_args(common))
        assert kafka.bootstrap == "conf-kafka:9092" and kafka.properties["sasl.password"] == "k-secret"
        # the command line overrides the conf
        args = snapshot_source.parse_args([*common, "--state-dsn", "host=cli", "--user", "other"])
        assert (args.state_dsn, args.user) == ("host=cli", "other")
    finally:
        for key in submitted:
            live._jconf.remove(key)
    assert job_conf.submitted_conf() == {}
    # without the conf, the environment variables still work (running a job by hand)
    monkeypatch.setenv("CDC_STATE_DSN", "host=env-state")
    monkeypatch.setenv("CDC_PG_PASSWORD", "env-pw")
    args = snapshot_source.parse_args([*common, "--jdbc-url", "jdbc:x", "--dsn", "host=x", "--user", "u"])
    assert (args.state_dsn, args.password) == ("host=env-state", "env-pw")
    with pytest.raises(SystemExit):
        snapshot_source.parse_args(common)  # no --dsn anywhere


def test_a_real_spark_submit_hands_the_job_its_connections_and_logs_no_secret(
    connections, monkeypatch, capsys, tmp_path
):
    """The operator runs spark-submit (local[1]) with its properties file; compact_cdc reads the state DSN
    from its Spark conf before Spark starts a session and names the host and port it could not reach."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(sys.path))
    (tmp_path / "spark-defaults.conf").write_text("spark.cdcTest.fromDefaults kept\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))  # a deployment's defaults: still loaded
    task = operator(("state", "kafka"), verbose=True)
    with pytest.raises(Exception, match="Error code is: 3") as failure:
        task.execute({})
    captured = capsys.readouterr()
    log = captured.out + captured.err + str(failure.value)  # the task log: the hook logs spark-submit's output
    assert "compact_cdc: error: public.customers:" in log
    assert f"cdc@127.0.0.1:{connections['state']}/cdc_state" in log, log[-3000:]
    assert "spark.cdcTest.fromDefaults" in log and "kept" in log
    # spark-submit --verbose lists the properties it got, the secret ones redacted
    assert f"{job_conf.STATE_DSN}=*********(redacted)" in log or f"({job_conf.STATE_DSN},*********(redacted))" in log
    for secret in (STATE_PASSWORD, KAFKA_PASSWORD, "SASL_PLAINTEXT"):
        assert secret not in log


def test_a_spark_connect_server_that_does_not_answer_is_named_at_once(connections, monkeypatch):
    port = closed_port()
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark_connect", "host": "127.0.0.1", "port": port})
    )
    named = rf"Spark Connect server 127\.0\.0\.1:{port} \(connection 'spark_default'\) does not answer"
    with pytest.raises(UnreachableError, match=named):
        operator(("state",), job="validate").execute({})


def test_a_job_called_in_the_task_reads_the_settings_it_was_handed_and_not_the_environment(monkeypatch):
    monkeypatch.setenv("CDC_STATE_DSN", "host=from-the-environment")
    with job_conf.given({job_conf.STATE_DSN: "host=handed-over"}):
        assert job_conf.setting(job_conf.submitted_conf(), job_conf.STATE_DSN) == "host=handed-over"
    assert job_conf.submitted_conf() == {}
    assert job_conf.setting(job_conf.submitted_conf(), job_conf.STATE_DSN) == "host=from-the-environment"
