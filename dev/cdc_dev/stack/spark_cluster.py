"""A Spark standalone cluster: one master and one worker, each its own JVM from pyspark's distribution.

pyspark's pip package carries ``bin/spark-class`` but no ``sbin`` start scripts, so the stack runs the
two daemons itself with ``spark-class``. Executors inherit the stack's HDFS configuration
(``HADOOP_CONF_DIR``), so a session on ``spark://`` reads and writes ``hdfs://``; their Python is the
one the driver names (:func:`cluster_session_conf`).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import requests

from .config import StackConfig
from .process import ManagedProcess, StackError, answers, wait_until


def spark_home() -> Path:
    """pyspark's installed package folder: its ``bin/``, ``jars/`` are a Spark distribution."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise StackError("spark: pyspark is not installed in this interpreter; run scripts/setup.sh")
    return Path(spec.origin).parent


def daemon_environment(config: StackConfig, hadoop_conf_dir: Path) -> dict[str, str]:
    """What the master and worker (and, inherited, the executors' JVMs) run with."""
    return {
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": config.host,
        # the daemons only schedule; executors get their memory from the application
        "SPARK_DAEMON_MEMORY": "512m",
        "HADOOP_CONF_DIR": str(hadoop_conf_dir),
        # keep no application folders from runs older than a day in the worker's folder
        "SPARK_WORKER_OPTS": "-Dspark.worker.cleanup.enabled=true -Dspark.worker.cleanup.appDataTtl=86400",
    }


def cluster_session_conf(config: StackConfig) -> dict[str, str]:
    """Spark settings for an application on the stack's cluster whose executors use its HDFS.

    The driver binds to the stack's host (executors dial it back there); one executor takes the
    worker's cores. ``spark.pyspark.python`` names the virtualenv's Python for ``spark-submit``; a
    driver started from Python (``SparkSession.builder``) reads only its ``PYSPARK_PYTHON``
    environment variable, so set that too, or executors run whatever ``python3`` is on their PATH.
    """
    return {
        "spark.master": config.spark_master_url,
        "spark.driver.host": config.host,
        "spark.driver.bindAddress": config.host,
        "spark.pyspark.python": sys.executable,
        "spark.executor.cores": str(config.spark_worker_cores),
        "spark.executor.memory": "1g",
        "spark.hadoop.dfs.client.use.datanode.hostname": "true",
    }


class SparkCluster:
    name = "spark"

    def __init__(self, config: StackConfig, hadoop_conf_dir: Path) -> None:
        self.config = config
        self.hadoop_conf_dir = hadoop_conf_dir
        pids = config.run_dir / "pids"
        self.master = ManagedProcess("spark-master", pids / "spark-master.pid", config.logs_dir / "spark-master.log")
        self.worker = ManagedProcess("spark-worker", pids / "spark-worker.pid", config.logs_dir / "spark-worker.log")

    @property
    def work_dir(self) -> Path:
        """The worker's folder: one sub-folder per application, with each executor's stdout and stderr."""
        return self.config.logs_dir / "spark-work"

    def master_argv(self) -> list[str]:
        cfg = self.config
        return [
            str(spark_home() / "bin" / "spark-class"),
            "org.apache.spark.deploy.master.Master",
            "--host",
            cfg.host,
            "--port",
            str(cfg.spark_master_port),
            "--webui-port",
            str(cfg.spark_master_ui_port),
        ]

    def worker_argv(self) -> list[str]:
        cfg = self.config
        return [
            str(spark_home() / "bin" / "spark-class"),
            "org.apache.spark.deploy.worker.Worker",
            "--host",
            cfg.host,
            "--webui-port",
            str(cfg.spark_worker_ui_port),
            "--cores",
            str(cfg.spark_worker_cores),
            "--memory",
            cfg.spark_worker_memory,
            "--work-dir",
            str(self.work_dir),
            cfg.spark_master_url,
        ]

    def master_state(self) -> dict[str, Any]:
        """The master web UI's JSON: ``status`` and the registered ``workers`` with their ``state``."""
        return _json(f"{self.config.spark_master_ui_url}/json/")

    def master_healthy(self) -> bool:
        return self.master_state().get("status") == "ALIVE"

    def worker_healthy(self) -> bool:
        """Our worker (by the id its own UI reports) is ALIVE at the master.

        Not just any ALIVE worker: one killed a moment ago can still be listed, and a restarted one
        registers under a new id.
        """
        if not self.worker.running():
            return False
        worker_id = _json(f"{self.config.spark_worker_ui_url}/json/").get("id")
        workers = self.master_state().get("workers", [])
        return any(w.get("id") == worker_id and w.get("state") == "ALIVE" for w in workers)

    def healthy(self) -> bool:
        """The master ALIVE with our worker ALIVE: applications get executors."""
        return self.master_healthy() and self.worker_healthy()

    def start(self, timeout: float = 90) -> None:
        if self.master.running() and self.worker.running() and answers(self.healthy):
            return
        self.config.logs_dir.mkdir(parents=True, exist_ok=True)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        env = daemon_environment(self.config, self.hadoop_conf_dir)
        if not self.master.running():
            self.master.start(self.master_argv(), env=env, cwd=self.config.run_dir)
        wait_until(
            self.master_healthy,
            timeout=timeout,
            what="spark master",
            log=self.master.log_file,
            interval=0.5,
            alive=self.master.running,
        )
        if not self.worker.running():
            self.worker.start(self.worker_argv(), env=env, cwd=self.config.run_dir)
        wait_until(
            self.healthy,
            timeout=timeout,
            what="spark worker (ALIVE at the master)",
            log=self.worker.log_file,
            interval=0.5,
            alive=lambda: self.master.running() and self.worker.running(),
        )

    def stop(self, timeout: float = 60) -> bool:
        """Worker first (its process group holds the executors), then the master."""
        worker = self.worker.stop(timeout=timeout)
        master = self.master.stop(timeout=timeout)
        return worker or master

    def pids(self) -> list[int]:
        return [pid for pid in (self.master.pid(), self.worker.pid()) if pid is not None]


def _json(url: str) -> dict[str, Any]:
    response = requests.get(url, timeout=5)
    response.raise_for_status()
    return response.json()
