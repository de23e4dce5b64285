"""One way to build a SparkSession for every job and test: UTC, the configured jars, no global state."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

JARS_ENV = "CDC_SPARK_JARS"


def spark_jars(spec: str | None = None) -> list[str]:
    """The jars the jobs need (Kafka source, JDBC driver), from ``spec`` or ``$CDC_SPARK_JARS``.

    ``spec`` is comma-separated; each entry is a jar (a path or a URI the cluster can read) or a local
    folder, which stands for the jars in it. Nothing is looked up relative to a checkout: the
    deployment says where its jars are.
    """
    spec = os.environ.get(JARS_ENV, "") if spec is None else spec
    jars: list[str] = []
    for entry in filter(None, (part.strip() for part in spec.split(","))):
        folder = Path(entry)
        if "://" not in entry and folder.is_dir():
            jars.extend(sorted(str(p) for p in folder.glob("*.jar")))
        else:
            jars.append(entry)
    return jars


# Set per session, so a Spark Connect client can set them too; the rest of a job's settings (the
# Delta Lake extension, jars, memory) belong to the server it connects to.
SESSION_SETTINGS = (
    "spark.sql.session.timeZone",
    "spark.sql.shuffle.partitions",
    "spark.sql.parquet.outputTimestampType",
    "spark.databricks.delta.skipRecordingEmptyCommits",
    "spark.databricks.delta.snapshotPartitions",
)
REMOTE_ENV = "CDC_SPARK_REMOTE"


def build_session(
    app_name: str,
    *,
    master: str | None = None,
    conf: dict[str, str] | None = None,
    jars: Sequence[str] | None = None,
    ui: bool = False,
    remote: str | None = None,
) -> SparkSession:
    """A session for ``app_name``; ``master`` defaults to ``local[*]`` unless spark-submit set one.

    ``jars`` defaults to :func:`spark_jars` (``$CDC_SPARK_JARS``). ``ui`` starts the Spark UI (the jobs
    do, for a person following a long step; tests and benchmarks do not pay for it). ``remote`` (an
    ``sc://`` URL) makes it a Spark Connect session on a running server instead of a driver of its own:
    only the per-session settings are sent, the server holds the rest (``CDC_SPARK_CONNECT=on cdc-stack up
    --with-airflow`` starts one).
    """
    from pyspark.sql import SparkSession

    settings = session_settings(ui=ui, conf=conf)
    if remote:
        builder = SparkSession.builder.remote(remote).appName(app_name)
        for key in SESSION_SETTINGS:
            builder = builder.config(key, settings[key])
        return builder.create()  # a session of its own, never one another task of this process holds
    jars = spark_jars() if jars is None else list(jars)
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    elif "spark.master" not in (conf or {}) and not os.environ.get("SPARK_ENV_LOADED"):
        builder = builder.master(os.environ.get("CDC_SPARK_MASTER", "local[*]"))
    if jars:
        settings["spark.jars"] = ",".join(jars)
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def session_settings(*, ui: bool = False, conf: dict[str, str] | None = None) -> dict[str, str]:
    """Every setting :func:`build_session` gives a session: the product's, then ``conf`` over them."""
    from .storage import SESSION_CONF

    settings = {
        **SESSION_CONF,
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": os.environ.get("CDC_SPARK_SHUFFLE_PARTITIONS", "8"),
        "spark.ui.enabled": "true" if ui else "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.driver.memory": os.environ.get("CDC_SPARK_DRIVER_MEMORY", "2g"),
    }
    settings.update(conf or {})
    # Delta replays a table's log in 50 tasks unless told, for every new version a session reads, and
    # lists a query's files with a job over those partitions. The lake's logs are small (a few files per
    # run, checkpointed every 10 commits), so one task: with eight, a demo DAG run took 335 s, not 266 s.
    settings.setdefault("spark.databricks.delta.snapshotPartitions", os.environ.get("CDC_DELTA_LOG_PARTITIONS", "1"))
    return settings


def is_connect(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect client session (no SparkContext in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def default_parallelism(spark: SparkSession) -> int:
    """How many tasks the session runs at once: ``defaultParallelism``, or on Spark Connect the server's
    ``spark.default.parallelism``, else the cores of its ``local[N]`` master, else 2."""
    if not is_connect(spark):
        return spark.sparkContext.defaultParallelism
    configured = spark.conf.get("spark.default.parallelism", None)
    if configured:
        return int(configured)
    master = spark.conf.get("spark.master", None) or ""
    cores = master.removeprefix("local[").rstrip("]") if master.startswith("local[") else ""
    if cores.isdigit():
        return int(cores)
    return (os.cpu_count() or 2) if cores == "*" else 2


def kept(frame: DataFrame) -> DataFrame:
    """``frame`` kept for the steps that reuse it: ``persist()``, or on Spark Connect a local checkpoint.

    A Spark Connect client sends a query's whole plan with every action. The decoded changes and the
    as-of fold carry deep expression trees, and sending them again for each of a step's dozens of
    actions (a validation's metrics) cost minutes of protobuf building; a checkpointed frame is sent
    as a reference to the server's copy. The checkpoint is computed here (eagerly), as ``persist``
    would be on first use.
    """
    if is_connect(frame.sparkSession):
        return frame.localCheckpoint(eager=True)
    return frame.persist()
