"""The embedded stack: PostgreSQL, Kafka (KRaft), Kafka Connect + Debezium, optionally Airflow, on one
machine, no Docker.

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
from .kafka import Kafka
from .postgres import Postgres
from .process import StackError, pid_alive, wait_until


@dataclass
class ComponentStatus:
    name: str
    running: bool
    healthy: bool
    pid: int | None
    detail: str = ""


class Stack:
    """Bring the stack up in dependency order, report on it, and take it down in reverse."""

    def __init__(self, config: StackConfig | None = None, *, airflow: bool = False) -> None:
        self.config = config or StackConfig()
        self.postgres = Postgres(self.config)
        self.kafka = Kafka(self.config)
        self.connect = Connect(self.config)
        self.airflow = Airflow(self.config)
        # Airflow costs a minute and a gigabyte, so ``up`` starts it only when asked; ``down`` and
        # ``status`` always cover it, so nothing it left running goes unnoticed.
        self.with_airflow = airflow
        self.connector_outcome: str | None = None

    def up(self, *, register: bool = True, exactly_once: bool = True) -> dict[str, float]:
        """Start what is not already healthy; returns seconds spent per component."""
        timings: dict[str, float] = {}
        for name, step in (
            ("postgres", self.postgres.start),
            ("kafka", self.kafka.start),
            ("connect", lambda: self.connect.start(exactly_once=exactly_once)),
        ):
            began = time.monotonic()
            step()
            timings[name] = round(time.monotonic() - began, 2)
        if register:
            began = time.monotonic()
            self.connector_outcome = self.register_connector(exactly_once="required" if exactly_once else "requested")
            timings["connector"] = round(time.monotonic() - began, 2)
        if self.with_airflow:
            began = time.monotonic()
            self.airflow.start()
            timings["airflow"] = round(time.monotonic() - began, 2)
        return timings

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
        """Stop Airflow, Connect, Kafka, PostgreSQL in that order; ``destroy`` also removes their data."""
        stopped = []
        if self.airflow.stop():
            stopped.append("airflow")
        if self.connect.stop():
            stopped.append("connect")
        if self.kafka.stop():
            stopped.append("kafka")
        if self.postgres.stop():
            stopped.append("postgres")
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
            (self.kafka, f"bootstrap {self.config.bootstrap_servers}"),
            (self.connect, f"REST {self.config.connect_url}"),
        ):
            running = component.process.running()
            result.append(
                ComponentStatus(
                    component.name, running, running and _safe(component.healthy), component.process.pid(), detail
                )
            )
        connector = _safe(lambda: self.connect.connector_status(self.config.connector_name), default=None)
        if connector is None:
            result.append(ComponentStatus("connector", False, False, None, "not registered"))
        else:
            tasks = ", ".join(f"task {t['id']} {t['state']}" for t in connector.get("tasks", [])) or "no tasks"
            state = connector["connector"]["state"]
            ok = state == "RUNNING" and "FAILED" not in tasks and tasks != "no tasks"
            result.append(ComponentStatus("connector", state == "RUNNING", ok, None, f"{state}; {tasks}"))
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


def _safe(check, default: Any = False) -> Any:
    try:
        return check()
    except Exception:  # status must report a broken component, not crash on it
        return default


__all__ = ["ComponentStatus", "Stack", "StackConfig", "StackError", "airflow_environment", "migrate", "wait_until"]
