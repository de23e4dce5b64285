"""Unit-test fixtures: one small local SparkSession for the whole test session."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator:
    """A local[2] session (the CI machine has 2 cores): one shuffle partition, no UI, UTC."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("cdc-reconcile-unit-tests")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
        .config("spark.executor.extraJavaOptions", "-Duser.timezone=UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
