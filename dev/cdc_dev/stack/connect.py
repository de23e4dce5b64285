"""Kafka Connect in distributed mode with exactly-once source support, and the Debezium connector."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import requests

from .config import MAX_MESSAGE_BYTES, StackConfig
from .kafka import LOG4J2_PROPERTIES, java_command
from .process import ManagedProcess, StackError, wait_until

POSTGRES_CONNECTOR = "io.debezium.connector.postgresql.PostgresConnector"
# States a user puts a connector in through the REST API (pause, stop); the stack leaves them so.
HELD_STATES = ("PAUSED", "STOPPED")


def connector_config(config: StackConfig, *, schemas: bool = True, exactly_once: str = "required") -> dict[str, str]:
    """The Debezium PostgreSQL connector as this project runs it."""
    schemas_flag = "true" if schemas else "false"
    captured = list(dict.fromkeys([*config.captured_tables, config.signal_table]))
    return {
        "connector.class": POSTGRES_CONNECTOR,
        "tasks.max": "1",
        "database.hostname": config.host,
        "database.port": str(config.pg_port),
        "database.user": config.pg_user,
        "database.password": config.pg_password,
        "database.dbname": config.pg_database,
        "topic.prefix": config.topic_prefix,
        "table.include.list": ",".join(captured),
        "signal.data.collection": config.signal_table,
        "plugin.name": "pgoutput",
        "slot.name": config.slot_name,
        "publication.name": config.publication_name,
        "publication.autocreate.mode": "filtered",
        "snapshot.mode": "initial",
        "skipped.operations": "none",  # Debezium skips truncates by default; the lake must see them
        "heartbeat.interval.ms": "5000",
        "provide.transaction.metadata": "true",
        "exactly.once.support": exactly_once,
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "key.converter.schemas.enable": schemas_flag,
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": schemas_flag,
        "topic.creation.default.replication.factor": "1",
        "topic.creation.default.partitions": "1",
    }


class Connect:
    name = "connect"

    def __init__(self, config: StackConfig) -> None:
        self.config = config
        self.home = config.run_dir / "connect"
        self.process = ManagedProcess(
            "connect", config.run_dir / "pids" / "connect.pid", config.logs_dir / "connect.out"
        )

    @property
    def properties_file(self) -> Path:
        return self.home / "worker.properties"

    @property
    def log_file(self) -> Path:
        return self.config.logs_dir / "connect.log"

    def worker_properties(self, *, exactly_once: bool = True) -> dict[str, str]:
        cfg = self.config
        return {
            "bootstrap.servers": cfg.bootstrap_servers,
            "group.id": "cdc-reconcile-connect",
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "config.storage.topic": "_connect_configs",
            "offset.storage.topic": "_connect_offsets",
            "status.storage.topic": "_connect_status",
            "config.storage.replication.factor": "1",
            "offset.storage.replication.factor": "1",
            "offset.storage.partitions": "1",
            "status.storage.replication.factor": "1",
            "status.storage.partitions": "1",
            "offset.flush.interval.ms": "1000",
            "listeners": f"http://{cfg.host}:{cfg.connect_port}",
            "rest.advertised.host.name": cfg.host,
            "rest.advertised.port": str(cfg.connect_port),
            "plugin.path": str(cfg.connect_plugins),
            "plugin.discovery": "hybrid_warn",
            "exactly.once.source.support": "enabled" if exactly_once else "disabled",
            "scheduled.rebalance.max.delay.ms": "0",
            "producer.max.request.size": str(MAX_MESSAGE_BYTES),
        }

    def write_config(self, *, exactly_once: bool = True) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self.config.logs_dir.mkdir(parents=True, exist_ok=True)
        body = "".join(f"{k}={v}\n" for k, v in self.worker_properties(exactly_once=exactly_once).items())
        self.properties_file.write_text(body)
        (self.home / "log4j2.properties").write_text(LOG4J2_PROPERTIES.format(log=self.log_file))

    def _get(self, path: str, timeout: float = 5) -> requests.Response:
        return requests.get(f"{self.config.connect_url}{path}", timeout=timeout)

    def healthy(self) -> bool:
        """The REST API answers and the Debezium plugin was found on ``plugin.path``."""
        response = self._get("/connector-plugins", timeout=2)
        response.raise_for_status()
        return any(plugin.get("class") == POSTGRES_CONNECTOR for plugin in response.json())

    def start(self, timeout: float = 120, *, exactly_once: bool = True) -> None:
        if self.process.running() and self.healthy():
            return
        if not self.config.connect_plugins.is_dir():
            raise StackError(
                f"connect: Debezium plugin not found in {self.config.connect_plugins}; run scripts/setup.sh"
            )
        self.write_config(exactly_once=exactly_once)
        if not self.process.running():
            argv = java_command(
                self.config,
                "org.apache.kafka.connect.cli.ConnectDistributed",
                str(self.properties_file),
                heap=os.environ.get("CDC_CONNECT_HEAP", "768m"),
                log4j=self.home / "log4j2.properties",
            )
            self.process.start(argv)
        wait_until(
            self.healthy,
            timeout=timeout,
            what="connect",
            log=self.log_file,
            interval=0.5,
            alive=self.process.running,
        )

    def stop(self, timeout: float = 60) -> bool:
        return self.process.stop(timeout=timeout)

    def kill(self) -> None:
        self.process.kill()

    # -- connectors -------------------------------------------------------------------------------

    def create_connector(self, name: str, config: dict[str, Any], timeout: float = 120) -> bool:
        """Create connector ``name`` unless Connect already has one by that name; True if it was created.

        ``POST /connectors`` never replaces a connector (Connect answers 409 "already exists"), where
        ``PUT .../config`` would: an existing connector's configuration is left exactly as it is.
        """
        deadline = time.monotonic() + timeout
        while True:
            response = requests.post(
                f"{self.config.connect_url}/connectors", json={"name": name, "config": config}, timeout=30
            )
            if response.status_code in (200, 201):
                return True
            if response.status_code == 409 and "already exists" in response.text:
                return False
            # 409 while the worker rebalances, 5xx while it is still starting: ask again
            if response.status_code not in (409, 500, 503) or time.monotonic() > deadline:
                raise StackError(
                    f"connect: creating connector {name!r} failed ({response.status_code}): {response.text}. "
                    f"See {self.log_file}"
                )
            time.sleep(1)

    def restart_failed(self, name: str) -> bool:
        """Restart the connector's FAILED parts (its configuration unchanged); True if any had failed."""
        status = self.connector_status(name) or {}
        failed = status.get("connector", {}).get("state") == "FAILED" or any(
            task["state"] == "FAILED" for task in status.get("tasks", [])
        )
        if failed:
            response = requests.post(
                f"{self.config.connect_url}/connectors/{name}/restart",
                params={"includeTasks": "true", "onlyFailed": "true"},
                timeout=30,
            )
            if response.status_code >= 400:
                raise StackError(f"connect: restarting {name!r} failed ({response.status_code}): {response.text}")
        return failed

    def put_connector(self, name: str, config: dict[str, Any]) -> None:
        response = requests.put(f"{self.config.connect_url}/connectors/{name}/config", json=config, timeout=30)
        if response.status_code >= 400:
            raise StackError(
                f"connect: registering connector {name!r} failed ({response.status_code}): {response.text}. "
                f"See {self.log_file}"
            )

    def connector_status(self, name: str) -> dict[str, Any] | None:
        response = self._get(f"/connectors/{name}/status")
        if response.status_code == 404:
            return None
        response.raise_for_status()
        return response.json()

    def connector_running(self, name: str) -> bool:
        status = self.connector_status(name)
        if not status or status["connector"]["state"] != "RUNNING":
            return False
        tasks = status.get("tasks", [])
        return bool(tasks) and all(task["state"] == "RUNNING" for task in tasks)

    def wait_connector_running(self, name: str, timeout: float = 120, *, held_ok: bool = False) -> str:
        """Wait until the connector and its tasks are RUNNING; return the connector's state.

        With ``held_ok``, a connector a user paused or stopped (``PAUSED``, ``STOPPED``) is settled too.
        """

        def settled() -> str | None:
            status = self.connector_status(name) or {}
            failed = [t for t in status.get("tasks", []) if t["state"] == "FAILED"]
            if failed:
                raise StackError(f"connect: task of {name!r} FAILED:\n{failed[0].get('trace', '')[:2000]}")
            state = status.get("connector", {}).get("state")
            if held_ok and state in HELD_STATES:
                return state
            return "RUNNING" if self.connector_running(name) else None

        deadline = time.monotonic() + timeout
        while True:
            try:
                state = settled()
                if state:
                    return state
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise StackError(
                    f"connect: connector {name!r} not RUNNING after {timeout:.0f}s "
                    f"(status: {self._safe_status(name)}). See {self.log_file}"
                )
            time.sleep(0.5)

    def _safe_status(self, name: str) -> Any:
        try:
            return self.connector_status(name)
        except requests.RequestException as exc:
            return f"unreachable: {exc}"

    def reset_offsets(self, name: str, timeout: float = 120) -> None:
        """Stop the connector, delete its source offsets, resume it: Debezium then snapshots again.

        What an operator's offset reset (or a lost offsets topic) does; Connect's REST API (KIP-875)
        only allows it while the connector is STOPPED.
        """
        url = f"{self.config.connect_url}/connectors/{name}"
        response = requests.put(f"{url}/stop", timeout=30)
        if response.status_code >= 400:
            raise StackError(f"connect: stopping {name!r} failed ({response.status_code}): {response.text}")

        def stopped() -> bool:
            status = self.connector_status(name) or {}
            return status.get("connector", {}).get("state") == "STOPPED"

        wait_until(stopped, timeout=timeout, what=f"connector {name} STOPPED")
        response = requests.delete(f"{url}/offsets", timeout=60)
        if response.status_code >= 400:
            raise StackError(f"connect: deleting offsets of {name!r} failed ({response.status_code}): {response.text}")
        response = requests.put(f"{url}/resume", timeout=30)
        if response.status_code >= 400:
            raise StackError(f"connect: resuming {name!r} failed ({response.status_code}): {response.text}")
        self.wait_connector_running(name, timeout=timeout)

    def delete_connector(self, name: str) -> None:
        response = requests.delete(f"{self.config.connect_url}/connectors/{name}", timeout=30)
        if response.status_code not in (204, 404):
            raise StackError(f"connect: deleting connector {name!r} failed: {response.text}")
        wait_until(lambda: self.connector_status(name) is None, timeout=30, what=f"connector {name} delete")


__all__ = ["Connect", "connector_config", "wait_until"]
