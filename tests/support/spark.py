"""The one SparkSession factory for tests: the project's own ``build_session``, small and local.

Tests get the session a job gets (UTC, microsecond Parquet timestamps, the jars named explicitly),
sized for a 2-core machine.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from pyspark.sql import SparkSession

from cdc_reconcile.spark import build_session, spark_jars

# The tests' frames hold tens to thousands of rows, so compiling each query's generated code costs more
# than it saves: interpreted expressions took a unit test of a merge publication from 91 s to 65 s, and the
# truncate integration test from 328 s to 222 s. The jobs themselves keep code generation.
INTERPRETED_CONF = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}
# Tiny frames: one shuffle partition, and no adaptive re-planning, so plans and partition counts hold.
UNIT_CONF = {
    **INTERPRETED_CONF,
    "spark.sql.shuffle.partitions": "1",
    "spark.default.parallelism": "2",
    # 2g as the integration session: a test that folds a fold of repairs plans a deep tree, and 1g
    # ran out of heap late in a full unit run (the heap then holds every earlier test's leftovers)
    "spark.driver.memory": "2g",
    "spark.sql.adaptive.enabled": "false",
    "spark.driver.extraJavaOptions": "-Duser.timezone=UTC",
    "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
}
EXECUTOR_IMPORTED_THE_PACKAGE = "an executor imported cdc_reconcile"
EXECUTOR_PYTHON_STARTS = "starts"
INTEGRATION_CONF = {**INTERPRETED_CONF, "spark.sql.shuffle.partitions": "2", "spark.driver.memory": "2g"}


def executor_python_without_the_package(folder: Path) -> str:
    """An executors' Python with nothing installed, whose ``import cdc_reconcile`` fails, written into ``folder``.

    The test's interpreter without its site-packages (``-S``): only the standard library, and the
    ``pyspark.zip`` and py4j that Spark itself puts on its Python workers' ``PYTHONPATH``. The package is
    not shipped to executors (no wheel or zip), and neither are its requirements (Great Expectations,
    pandas, ...): the jobs run no Python function there. A session whose executors use this interpreter
    fails any job that would need more on them, so the tests that run jobs on it prove that, instead of
    a deployment on another host finding out. Each start appends its arguments to ``folder/starts`` (a
    test can see its executors really used it).
    """
    site = folder / "site" / "cdc_reconcile"
    site.mkdir(parents=True, exist_ok=True)
    (site / "__init__.py").write_text(
        f"raise ImportError({EXECUTOR_IMPORTED_THE_PACKAGE!r} + ': cdc_reconcile is not shipped to executors')\n"
    )
    wrapper = folder / "python"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> "{folder / EXECUTOR_PYTHON_STARTS}"\n'
        f'PYTHONPATH="{site.parent}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" -S "$@"\n'
    )
    wrapper.chmod(0o755)
    return str(wrapper)


def local_session(
    app_name: str,
    *,
    cores: int = 2,
    conf: Mapping[str, str] | None = None,
    jars: Sequence[str] = (),
    executor_python: str | None = None,
) -> SparkSession:
    """A ``local[cores]`` session from :func:`cdc_reconcile.spark.build_session`, quiet logs.

    ``executor_python`` is the interpreter of the executors' Python workers: pyspark reads it from
    ``PYSPARK_PYTHON`` when the context starts, and the variable is put back after (processes the
    tests start, spark-submit among them, keep the test's own interpreter).
    """
    os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    saved = os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYSPARK_PYTHON"] = executor_python or saved
    try:
        session = build_session(app_name, master=f"local[{cores}]", conf=dict(conf or {}), jars=list(jars))
    finally:
        os.environ["PYSPARK_PYTHON"] = saved
    session.sparkContext.setLogLevel("ERROR")
    # py4j logs "Closing down clientserver connection" from __del__ after an xdist worker closed its stdout
    logging.getLogger("py4j").setLevel(logging.WARNING)
    return session


def _stack_jars() -> str:
    from cdc_dev.stack import StackConfig

    return str(StackConfig().spark_jars_dir)


REMOTE_ENV = "CDC_TEST_SPARK_REMOTE"


def unit_session() -> SparkSession:
    """For unit tests: the jobs' jars (Delta Lake for the lake; no service is reached), one shuffle partition.

    With ``$CDC_TEST_SPARK_REMOTE`` (an ``sc://`` URL) the tests run on that Spark Connect server instead.
    """
    if os.environ.get(REMOTE_ENV):
        conf = {"spark.sql.shuffle.partitions": "1"}
        return build_session("cdc-reconcile-unit-tests", conf=conf, remote=os.environ[REMOTE_ENV])
    return local_session("cdc-reconcile-unit-tests", conf=UNIT_CONF, jars=spark_jars(_stack_jars()))


def integration_session(jars_spec: str | None = None, *, executor_python: str | None = None) -> SparkSession:
    """For integration tests: the jobs' jars (Delta Lake, Kafka source, JDBC driver).

    ``jars_spec`` is a ``CDC_SPARK_JARS`` value; by default the jars the dev stack's set-up fetched.
    """
    return local_session(
        "integration-tests",
        conf=INTEGRATION_CONF,
        jars=spark_jars(jars_spec or _stack_jars()),
        executor_python=executor_python,
    )
