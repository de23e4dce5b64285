"""The embedded stack: PostgreSQL, Kafka (KRaft), Kafka Connect + Debezium, optionally HDFS with a Spark
standalone cluster, and Airflow with the Spark Connect server its Spark tasks run on, on one machine, no Docker.

Imported by the command line, the demo and the tests; the pipeline itself never imports it.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from typing import Any

from .airflow import Airflow, airflow_environment, migrate
from .config import StackConfig
from .connect import Connect, connector_config
from .data_docs import DataDocsServer
from .hdfs import Hdfs
from .kafka import Kafka
from .postgres import Postgres
from .process import StackError, pid_alive, wait_until
from .spark_cluster import SparkCluster, cluster_session_conf
from .spark_connect import SparkConnectServer


@dataclass
class ComponentStatus:
    name: str
    running: bool
    healthy: bool
    pid: int | None
    detail: str = ""


class Stack:
    """Bring the stack up in dependency order, report on it, and take it down in reverse."""

    def __init__(self, config: StackConfig | None = None, *, airflow: bool = False, cluster: bool = False) -> None:
        self.config = config or StackConfig()
        self.postgres = Postgres(self.config)
        self.kafka = Kafka(self.config)
        self.connect = Connect(self.config)
        self.airflow = Airflow(self.config)
        self.hdfs = Hdfs(self.config)
        self.spark = SparkCluster(self.config, self.hdfs.conf_dir)
        self.spark_connect = SparkConnectServer(self.config, self.hdfs.conf_dir)
        self.data_docs = DataDocsServer(self.config)
        # Airflow costs a minute and a gigabyte, so ``up`` starts it only when asked; ``down`` and
        # ``status`` always cover it, so nothing it left running goes unnoticed.
        self.with_airflow = airflow
        # HDFS and the Spark cluster (four JVMs) likewise: only for work that needs a shared lake or
        # executors outside the driver
        self.with_cluster = cluster
        self.connector_outcome: str | None = None

    def up(self, *, register: bool = True, exactly_once: bool = True) -> dict[str, float]:
        """Start what is not already healthy; returns seconds spent per component."""
        timings: dict[str, float] = {}
        for name, step in (
            ("postgres", self.postgres.start),
            ("kafka", self.kafka.start),
            ("connect", lambda: self.connect.start(exactly_once=exactly_once)),
            ("data-docs", self.data_docs.start),
        ):
            began = time.monotonic()
            step()
            timings[name] = round(time.monotonic() - began, 2)
        if register:
            began = time.monotonic()
            self.connector_outcome = self.register_connector(exactly_once="required" if exactly_once else "requested")
            timings["connector"] = round(time.monotonic() - began, 2)
        if self.with_cluster:
            timings.update(self.start_cluster())
        if self.with_airflow:
            timings.update(self.start_airflow())
        return timings

    def start_airflow(self) -> dict[str, float]:
        """The Spark Connect server the DAG's Spark tasks run on (unless ``CDC_SPARK_CONNECT=off``), then
        Airflow; seconds each."""
        timings = {}
        steps = [("airflow", self.airflow.start)]
        if self.config.spark_connect_enabled:
            steps.insert(0, ("spark-connect", self.spark_connect.start))
        for name, step in steps:
            began = time.monotonic()
            step()
            timings[name] = round(time.monotonic() - began, 2)
        return timings

    def stop_airflow(self) -> list[str]:
        """Airflow, then the Spark Connect server; the names of those that ran."""
        return [c.name for c in (self.airflow, self.spark_connect) if c.stop()]

    def start_cluster(self) -> dict[str, float]:
        """Start HDFS, then the Spark master and worker (executors need HDFS's configuration); seconds each."""
        timings = {}
        for name, step in (("hdfs", self.hdfs.start), ("spark", self.spark.start)):
            began = time.monotonic()
            step()
            timings[name] = round(time.monotonic() - began, 2)
        return timings

    def stop_cluster(self) -> list[str]:
        """Stop the Spark cluster (its executors with it), then HDFS; the names of those that ran."""
        return [c.name for c in (self.spark, self.hdfs) if c.stop()]

    def register_connector(self, *, schemas: bool = True, exactly_once: str = "required") -> str:
        """Create the Debezium connector if Connect does not have it, and wait until it runs.

        A connector that exists is never reconfigured: its configuration may hold a user's changes
        (tables added to its capture list), and the built-in one would make Debezium drop them from its
        publication. One the user paused or stopped stays so; a failed one is restarted once, as it is.
        Returns what happened, for ``up`` to say.
        """
        name = self.config.connector_name
        config = connector_config(self.config, schemas=schemas, exactly_once=exactly_once)
        if self.connect.create_connector(name, config):
            self.connect.wait_connector_running(name)
            return "created"
        restarted = self.connect.restart_failed(name)
        state = self.connect.wait_connector_running(name, held_ok=True)
        outcome = "exists, configuration left as it is"
        if restarted:
            outcome += ", restarted after a failure"
        return outcome if state == "RUNNING" else f"{outcome}, {state} by its user"

    def down(self, *, destroy: bool = False) -> list[str]:
        """Stop Airflow, Spark Connect, Spark, HDFS, Connect, Kafka, PostgreSQL and the Data Docs server in
        that order; ``destroy`` also removes their data."""
        stopped = self.stop_airflow()
        stopped += self.stop_cluster()
        if self.connect.stop():
            stopped.append("connect")
        if self.kafka.stop():
            stopped.append("kafka")
        if self.postgres.stop():
            stopped.append("postgres")
        if self.data_docs.stop():
            stopped.append("data-docs")
        if destroy:
            self.postgres.destroy()
            shutil.rmtree(self.config.run_dir, ignore_errors=True)
        return stopped

    def leftover_pids(self) -> list[int]:
        """Pids of stack processes still alive; empty after a clean ``down``."""
        pids = [p.process.pid() for p in (self.kafka, self.connect)]
        return (
            [pid for pid in pids if pid is not None]
            + [pid for pid in self.postgres.server_pids() if pid_alive(pid)]
            + self.airflow.leftover_pids()
            + self.spark_connect.pids()
            + self.data_docs.pids()
            + self.spark.pids()
            + self.hdfs.pids()
        )

    def status(self) -> list[ComponentStatus]:
        result = []
        pg_running = self.postgres.running()
        pg_pids = self.postgres.server_pids()
        result.append(
            ComponentStatus(
                "postgres",
                pg_running,
                pg_running and _safe(self.postgres.healthy),
                pg_pids[0] if pg_running and pg_pids else None,
                f"port {self.config.pg_port}",
            )
        )
        for component, detail in (
            (self.kafka, f"bootstrap {self.config.bootstrap_servers}, SASL {self.config.kafka_sasl_bootstrap}"),
            (self.connect, f"REST {self.config.connect_url}"),
        ):
            running = component.process.running()
            result.append(
                ComponentStatus(
                    component.name, running, running and _safe(component.healthy), component.process.pid(), detail
                )
            )
        docs = self.data_docs
        running, pid = docs.process.running(), docs.process.pid()
        detail = f"{self.config.data_docs_url} (serves {self.config.data_docs_site})"
        result.append(ComponentStatus("data-docs", running, running and _safe(docs.healthy), pid, detail))
        connector = _safe(lambda: self.connect.connector_status(self.config.connector_name), default=None)
        if connector is None:
            result.append(ComponentStatus("connector", False, False, None, "not registered"))
        else:
            tasks = ", ".join(f"task {t['id']} {t['state']}" for t in connector.get("tasks", [])) or "no tasks"
            state = connector["connector"]["state"]
            ok = state == "RUNNING" and "FAILED" not in tasks and tasks != "no tasks"
            result.append(ComponentStatus("connector", state == "RUNNING", ok, None, f"{state}; {tasks}"))
        if self.with_cluster or self.hdfs.pids() or self.spark.pids():
            result += self.cluster_status()
        connect = self.spark_connect
        if (self.with_airflow and self.config.spark_connect_enabled) or connect.process.running():
            running, pid = connect.process.running(), connect.process.pid()
            detail = f"{self.config.spark_connect_url}, Spark UI {self.config.spark_connect_ui_url}"
            result.append(ComponentStatus("spark-connect", running, running and _safe(connect.healthy), pid, detail))
        if self.with_airflow or self.airflow.running():
            healthy = self.airflow.service_health()
            details = {
                "api-server": f"UI {self.config.airflow_url}",
                "dag-processor": f"DAGs {self.config.airflow_dags_folder}",
                "scheduler": "LocalExecutor",
            }
            for service, process in self.airflow.processes.items():
                result.append(
                    ComponentStatus(
                        f"airflow {service}", process.running(), healthy[service], process.pid(), details[service]
                    )
                )
        return result

    def cluster_status(self) -> list[ComponentStatus]:
        """HDFS's two nodes and Spark's master and worker: pid, health, address, log."""
        cfg, hdfs, spark = self.config, self.hdfs, self.spark
        namenode = f"{cfg.hdfs_url}, UI {cfg.hdfs_namenode_ui_url}"
        master = f"{cfg.spark_master_url}, UI {cfg.spark_master_ui_url}"
        rows = (
            ("hdfs namenode", hdfs.namenode, hdfs.namenode_healthy, namenode),
            ("hdfs datanode", hdfs.datanode, hdfs.datanode_healthy, f"{cfg.host}:{cfg.hdfs_datanode_port}"),
            ("spark master", spark.master, spark.master_healthy, master),
            ("spark worker", spark.worker, spark.worker_healthy, f"UI {cfg.spark_worker_ui_url}"),
        )
        result = []
        for name, process, healthy, detail in rows:
            running = process.running()
            result.append(
                ComponentStatus(
                    name, running, running and _safe(healthy), process.pid(), f"{detail}, log {process.log_file}"
                )
            )
        return result


def _safe(check, default: Any = False) -> Any:
    try:
        return check()
    except Exception:  # status must report a broken component, not crash on it
        return default


__all__ = [
    "ComponentStatus",
    "Stack",
    "StackConfig",
    "StackError",
    "airflow_environment",
    "cluster_session_conf",
    "migrate",
    "wait_until",
]
