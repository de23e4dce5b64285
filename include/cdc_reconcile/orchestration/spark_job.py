"""The DAG's Spark tasks: spark-submit of one job, its connections handed over as Spark configuration.

:class:`CdcSparkSubmitOperator` resolves the connections a job needs when the task runs, writes them as
``spark.cdc.*`` properties (:mod:`cdc_reconcile.jobs.job_conf`) to a file only the task's user can read
(0600, in a private temporary folder removed when the task ends, failed or not), and passes it with
spark-submit's ``--properties-file``. spark-submit hands those properties to the driver in client and
cluster mode (YARN, Kubernetes) alike, where the provider's ``env_vars`` are refused (standalone cluster
mode) or do not reach the driver. No secret is on the spark-submit command line the task logs, nor in an
environment variable.

``--properties-file`` alone would replace the deployment's ``conf/spark-defaults.conf``; the task also
passes ``--load-spark-defaults`` (Spark 4), so the deployment's defaults still apply, under the job's
properties and the task's ``--conf`` settings.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from ..jobs import job_conf
from . import tasks

STATE = "state"
SOURCE = "source"
KAFKA = "kafka"
CONNECTIONS = (STATE, SOURCE, KAFKA)
LOAD_DEFAULTS = "--load-spark-defaults"


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


class CdcSparkSubmitOperator(SparkSubmitOperator):
    """``SparkSubmitOperator`` for a cdc_reconcile job; ``connections`` name what the job reads.

    The job's settings go in a private properties file made for this try and removed after it. The
    operator's own ``properties_file`` is not taken: put deployment settings in ``spark-defaults.conf``.
    """

    def __init__(self, *, connections: Iterable[str] = (STATE,), **kwargs: Any) -> None:
        if kwargs.get("properties_file"):
            raise ValueError(
                "CdcSparkSubmitOperator writes its own properties file; put deployment settings in "
                "spark-defaults.conf (still loaded) or in conf"
            )
        super().__init__(**kwargs)
        self.connections = tuple(connections)
        unknown = sorted(set(self.connections) - set(CONNECTIONS))
        if unknown:
            raise ValueError(f"unknown connections {unknown}: choose from {list(CONNECTIONS)}")

    def execute(self, context: Any) -> None:
        settings = job_settings(self.connections)
        folder = tempfile.mkdtemp(prefix="cdc-spark-job-")  # 0700: the task's user only
        try:
            self.properties_file = str(job_conf.write_properties(Path(folder) / "cdc-job.properties", settings))
            self._hook = None  # a hook made before this try does not know the file
            return super().execute(context)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
            self.properties_file = None

    def _get_hook(self) -> SparkSubmitHook:
        hook = super()._get_hook()
        hook.__class__ = _DefaultsKeepingHook  # the same hook, one method more: no argument to copy
        return hook
