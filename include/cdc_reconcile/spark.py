"""One way to build a SparkSession for every job and test: UTC, the configured jars, no global state."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

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


def build_session(
    app_name: str,
    *,
    master: str | None = None,
    conf: dict[str, str] | None = None,
    jars: Sequence[str] | None = None,
    ui: bool = False,
) -> SparkSession:
    """A session for ``app_name``; ``master`` defaults to ``local[*]`` unless spark-submit set one.

    ``jars`` defaults to :func:`spark_jars` (``$CDC_SPARK_JARS``). ``ui`` starts the Spark UI (the jobs
    do, for a person following a long step; tests and benchmarks do not pay for it).
    """
    from pyspark.sql import SparkSession

    jars = spark_jars() if jars is None else list(jars)
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    elif "spark.master" not in (conf or {}) and not os.environ.get("SPARK_ENV_LOADED"):
        builder = builder.master(os.environ.get("CDC_SPARK_MASTER", "local[*]"))
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
    if jars:
        settings["spark.jars"] = ",".join(jars)
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
