"""A long-lived Spark Connect server: the driver every Spark task of the DAG runs on.

A task that spark-submits a driver of its own pays 15-20 s on 2 cores before its first row (a JVM, the
jars, Delta Lake's and Kafka's classes, a cold JIT), five times per table per run. This server pays that
once; each task is then a thin Python client in its own session (``sc://``, isolated settings, temp
views and caches). It runs from pyspark's own distribution (``spark-submit --class
SparkConnectServer``, the jar ships in pyspark), with the jobs' jars and the Delta Lake extension, on
``local[*]`` by default or on the stack's standalone cluster (``$CDC_SPARK_CONNECT_MASTER``), and reads
the stack's HDFS like the cluster's executors.
"""

from __future__ import annotations

import os
import socket
import sys

from cdc_reconcile.spark import spark_jars
from cdc_reconcile.storage import SESSION_CONF

from .config import StackConfig
from .process import ManagedProcess, wait_until
from .spark_cluster import spark_home

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


class SparkConnectServer:
    name = "spark-connect"

    def __init__(self, config: StackConfig, hadoop_conf_dir: os.PathLike[str]) -> None:
        self.config = config
        self.hadoop_conf_dir = hadoop_conf_dir
        self.process = ManagedProcess(
            self.name, config.run_dir / "pids" / "spark-connect.pid", config.logs_dir / "spark-connect.log"
        )

    def settings(self) -> dict[str, str]:
        """The server's Spark configuration: what a job's own driver would get from ``build_session``."""
        cfg = self.config
        return {
            **SESSION_CONF,
            "spark.master": os.environ.get("CDC_SPARK_CONNECT_MASTER") or "local[*]",
            "spark.driver.memory": cfg.spark_connect_memory,
            "spark.jars": ",".join(spark_jars(str(cfg.spark_jars_dir))),
            "spark.connect.grpc.binding.address": cfg.host,
            "spark.driver.host": cfg.host,
            "spark.driver.bindAddress": cfg.host,
            "spark.connect.grpc.binding.port": str(cfg.spark_connect_port),
            "spark.ui.port": str(cfg.spark_connect_ui_port),
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.session.timeZone": "UTC",
            "spark.driver.extraJavaOptions": "-Duser.timezone=UTC",
            "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
            "spark.pyspark.python": sys.executable,
        }

    def argv(self) -> list[str]:
        argv = [str(spark_home() / "bin" / "spark-submit"), "--class", SERVER_CLASS, "--name", "cdc-spark-connect"]
        for key, value in self.settings().items():
            argv += ["--conf", f"{key}={value}"]
        return argv

    def healthy(self) -> bool:
        """The gRPC port accepts connections (the server opens it once its SparkContext is up)."""
        try:
            with socket.create_connection((self.config.host, self.config.spark_connect_port), timeout=2):
                return True
        except OSError:
            return False

    def start(self, timeout: float = 180) -> None:
        if self.process.running() and self.healthy():
            return
        self.config.logs_dir.mkdir(parents=True, exist_ok=True)
        if not self.process.running():
            env = {
                "SPARK_HOME": str(spark_home()),
                "HADOOP_CONF_DIR": str(self.hadoop_conf_dir),
                "PYSPARK_PYTHON": sys.executable,
            }
            self.process.start(self.argv(), env=env, cwd=self.config.run_dir)
        wait_until(
            self.healthy,
            timeout=timeout,
            what=f"spark connect server on {self.config.spark_connect_url}",
            log=self.process.log_file,
            interval=0.5,
            alive=self.process.running,
        )

    def stop(self, timeout: float = 60) -> bool:
        return self.process.stop(timeout=timeout)

    def pids(self) -> list[int]:
        pid = self.process.pid()
        return [] if pid is None else [pid]
