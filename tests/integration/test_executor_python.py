"""Executors need a Python and nothing installed: every job of the integration tests runs with executors
whose Python has no site-packages (only the pyspark and py4j that Spark puts on its workers' path) and
cannot import ``cdc_reconcile`` (the ``spark`` fixture; ``CDC_SPARK_PYTHON`` for the DAG runs). This
checks that the guard is in place, so those passing tests mean something."""

from __future__ import annotations

import importlib.util

import pytest
from pyspark.sql import functions as F

from cdc_reconcile.config import parse_flag
from tests.support.spark import EXECUTOR_IMPORTED_THE_PACKAGE

pytestmark = pytest.mark.integration

REQUIREMENTS = ("great_expectations", "pandas", "numpy", "pyarrow", "psycopg", "confluent_kafka", "deltalake")


def test_the_executors_run_python_with_nothing_installed_and_a_function_of_the_package_fails_on_them(spark):
    assert spark.sparkContext.parallelize([1, 2], 2).map(lambda x: x + 1).collect() == [2, 3]
    found = spark.sparkContext.parallelize([0], 1).map(
        lambda _: [name for name in REQUIREMENTS if importlib.util.find_spec(name) is not None]
    )
    assert found.collect() == [[]]
    assert all(importlib.util.find_spec(name) is not None for name in REQUIREMENTS), "the driver has them all"
    # the lambda refers to parse_flag by reference: the executor must import cdc_reconcile.config
    as_flag = F.udf(lambda text: parse_flag(text), "boolean")
    with pytest.raises(Exception, match=EXECUTOR_IMPORTED_THE_PACKAGE):
        spark.range(1).select(as_flag(F.lit("true"))).collect()
