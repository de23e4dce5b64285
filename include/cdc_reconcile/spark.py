"""One way to build a SparkSession for every job and test: UTC, the project's jars, no global state."""

from __future__ import annotations

import os
from pathlib import Path

from pyspark.sql import SparkSession

from .stack.config import REPO_ROOT


def spark_jars_dir() -> Path:
    """Spark's Kafka source and the PostgreSQL JDBC driver, fetched by scripts/setup.sh."""
    cache = Path(os.environ.get("CDC_CACHE_DIR", REPO_ROOT / ".cache"))
    return Path(os.environ.get("CDC_SPARK_JARS", cache / "stack" / "spark-jars"))


def build_session(app_name: str, *, master: str | None = None, conf: dict[str, str] | None = None) -> SparkSession:
    """A session for ``app_name``; ``master`` defaults to ``local[*]`` unless spark-submit set one."""
    jars_dir = spark_jars_dir()
    jars = sorted(str(p) for p in jars_dir.glob("*.jar")) if jars_dir.is_dir() else []
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    elif "spark.master" not in (conf or {}) and not os.environ.get("SPARK_ENV_LOADED"):
        builder = builder.master(os.environ.get("CDC_SPARK_MASTER", "local[*]"))
    settings = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": os.environ.get("CDC_SPARK_SHUFFLE_PARTITIONS", "8"),
        "spark.ui.enabled": "false",
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
