"""The DAG's Spark tasks: one job on a Spark Connect server, or spark-submit of it, as ``spark_default`` says.

When ``spark_default`` is a ``spark_connect`` connection (``CDC_SPARK_CONNECT=on`` on the stack), the job
runs in the task's own process as a Spark Connect client of that long-lived server: no JVM starts for the
task, the server's JIT and caches are warm, and the connections it reads are handed over in memory
(:func:`cdc_reconcile.jobs.job_conf.given`). A job that ends early (an error, the execution timeout, the
task killed) has its operations interrupted on the server. The server holds the deployment's Spark
settings (master, jars, memory, the Delta Lake extension); the task's ``conf`` only applies to spark-
submit.

Otherwise (a ``spark`` connection), :class:`CdcSparkJobOperator` resolves the connections a job needs
when the task runs, writes them as ``spark.cdc.*`` properties (:mod:`cdc_reconcile.jobs.job_conf`) to a
file only the task's user can read (0600, in a private temporary folder removed when the task ends,
failed or not), and passes it with spark-submit's ``--properties-file``. spark-submit hands those
properties to the driver in client and cluster mode (YARN, Kubernetes) alike, where the provider's
``env_vars`` are refused (standalone cluster mode) or do not reach the driver. No secret is on the
spark-submit command line the task logs, nor in an environment variable.

``--properties-file`` alone would replace the deployment's ``conf/spark-defaults.conf``; the task also
passes ``--load-spark-defaults`` (Spark 4), so the deployment's defaults still apply, under the job's
properties and the task's ``--conf`` settings.
"""

from __future__ import annotations

import importlib
import shutil
import socket
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from ..errors import UnreachableError
from ..jobs import job_conf
from . import tasks

STATE = "state"
SOURCE = "source"
KAFKA = "kafka"
CONNECTIONS = (STATE, SOURCE, KAFKA)
LOAD_DEFAULTS = "--load-spark-defaults"
SPARK_CONNECT = SparkConnectHook.conn_type
DRIVER_PYTHON = "spark.pyspark.driver.python"


class SparkJobFailed(RuntimeError):
    """A job run on Spark Connect returned a non-zero exit code (:mod:`cdc_reconcile.jobs.job_cli`)."""


def job_settings(connections: Iterable[str]) -> dict[str, str]:
    """The ``spark.cdc.*`` settings for a job reading ``connections`` (``state``, ``source``, ``kafka``).

    Resolved now, through the same helpers as the Python tasks: ``cdc_state``, ``cdc_source``, ``cdc_kafka``.
    """
    wanted = set(connections)
    settings: dict[str, str] = {}
    if STATE in wanted:
        settings[job_conf.STATE_DSN] = tasks.state_dsn()
    if SOURCE in wanted:
        source = tasks.source_database()
        settings[job_conf.SOURCE_DSN] = source.dsn
        settings[job_conf.SOURCE_JDBC_URL] = source.jdbc_url
        if source.user:
            settings[job_conf.SOURCE_USER] = source.user
        if source.password:
            settings[job_conf.SOURCE_PASSWORD] = source.password
    if KAFKA in wanted:
        settings[job_conf.KAFKA_CONFIG] = tasks.kafka_settings().to_json()  # bootstrap.servers included
    return settings


class _DefaultsKeepingHook(SparkSubmitHook):
    """The provider's hook, adding ``--load-spark-defaults`` after ``--properties-file``."""

    def _build_spark_common_args(self) -> list[str]:
        args = super()._build_spark_common_args()
        if self._properties_file and LOAD_DEFAULTS not in args:
            at = args.index("--properties-file") + 2
            args[at:at] = [LOAD_DEFAULTS]
        return args


def server_answers(url: str, conn_id: str, timeout: float = 10.0) -> None:
    """Fail fast, naming the server and the connection, when nothing listens at ``url``'s address.

    pyspark's client would retry a refused connection for minutes before the task learns of it.
    """
    address = urlparse(url.replace("sc://", "http://", 1))
    try:
        with socket.create_connection((address.hostname, address.port or 15002), timeout=timeout):
            return
    except OSError as exc:
        raise UnreachableError(
            f"the Spark Connect server {address.hostname}:{address.port or 15002} (connection {conn_id!r}) does not "
            f"answer ({exc}): start it (CDC_SPARK_CONNECT=on cdc-stack up --with-airflow starts the stack's), "
            f"or point {conn_id!r} at a running one, or make it a 'spark' connection to spark-submit each job"
        ) from exc


class CdcSparkJobOperator(SparkSubmitOperator):
    """A cdc_reconcile job on Spark Connect or through spark-submit; ``connections`` name what the job reads.

    On spark-submit, the job's settings go in a private properties file made for this try and removed
    after it. The operator's own ``properties_file`` is not taken: put deployment settings in
    ``spark-defaults.conf``.
    """

    def __init__(self, *, connections: Iterable[str] = (STATE,), **kwargs: Any) -> None:
        if kwargs.get("properties_file"):
            raise ValueError(
                "CdcSparkJobOperator writes its own properties file; put deployment settings in "
                "spark-defaults.conf (still loaded) or in conf"
            )
        super().__init__(**kwargs)
        self.connections = tuple(connections)
        unknown = sorted(set(self.connections) - set(CONNECTIONS))
        if unknown:
            raise ValueError(f"unknown connections {unknown}: choose from {list(CONNECTIONS)}")

    def execute(self, context: Any) -> None:
        settings = job_settings(self.connections)
        spark = tasks.connection(self._conn_id)
        if spark.conn_type == SPARK_CONNECT:
            return self.run_on_spark_connect(SparkConnectHook(self._conn_id).get_connection_url(), settings)
        # the operator's own deploy mode, else the connection's (as the provider's hook resolves it)
        deploy_mode = self._deploy_mode or spark.extra_dejson.get("deploy-mode")
        folder = tempfile.mkdtemp(prefix="cdc-spark-job-")  # 0700: the task's user only
        try:
            self.conf = {DRIVER_PYTHON: tasks.driver_python(deploy_mode), **(self.conf or {})}
            self.properties_file = str(job_conf.write_properties(Path(folder) / "cdc-job.properties", settings))
            self._hook = None  # a hook made before this try does not know the file
            return super().execute(context)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
            self.properties_file = None

    def run_on_spark_connect(self, url: str, settings: dict[str, str]) -> None:
        """Call the job's ``main`` here, as a client of the server at ``url``; a non-zero exit fails the task."""
        name = Path(self.application).stem
        module = importlib.import_module(f"cdc_reconcile.jobs.{name}")
        server_answers(url, self._conn_id)
        arguments = [str(argument) for argument in self.application_args or []]
        self.log.info("%s on the Spark Connect server %s: %s", name, url.split(";", 1)[0], " ".join(arguments))
        with job_conf.given(settings):
            code = module.main([*arguments, "--remote", url])
        if code != 0:
            raise SparkJobFailed(f"{name} exited with code {code} (the lines above say why; codes: jobs.job_cli)")

    def on_kill(self) -> None:
        """spark-submit's process is killed; a job on Spark Connect is interrupted as its call unwinds."""
        if self._hook is not None:
            super().on_kill()

    def _get_hook(self) -> SparkSubmitHook:
        hook = super()._get_hook()
        hook.__class__ = _DefaultsKeepingHook  # the same hook, one method more: no argument to copy
        return hook
