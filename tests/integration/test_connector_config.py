"""The stack never undoes a user's connector configuration.

A user adds a table to the connector's capture list through Connect's REST API; after the Connect
worker restarts (a crash, or a clean restart of a connector the user paused), ``cdc-stack up``
(idempotent by its documentation) must leave that configuration, and the pause, as they are.
Overwriting it with the stack's built-in list would make Debezium drop the table from its
publication, and the table's changes from then on would never reach Kafka.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import requests

from .conftest import eventually

pytestmark = pytest.mark.integration

ADDED = "public.user_added"


def connector_config(config) -> dict[str, str]:
    response = requests.get(f"{config.connect_url}/connectors/{config.connector_name}/config", timeout=10)
    response.raise_for_status()
    return response.json()


def put_config(config, body: dict[str, str]) -> None:
    url = f"{config.connect_url}/connectors/{config.connector_name}/config"
    response = requests.put(url, json=body, timeout=30)
    assert response.status_code in (200, 201), response.text


def state(config) -> str | None:
    status = requests.get(f"{config.connect_url}/connectors/{config.connector_name}/status", timeout=10)
    return status.json()["connector"]["state"] if status.status_code == 200 else None


def published(pg, config) -> set[str]:
    rows = pg.execute(
        "SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = %s",
        (config.publication_name,),
    ).fetchall()
    return {row[0] for row in rows}


def cdc_stack_up() -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cdc_dev.stack", "up"], capture_output=True, text=True, timeout=600, check=False
    )


def test_up_after_a_connect_restart_keeps_the_tables_a_user_added(stack, config, pg):
    pg.execute(f"CREATE TABLE IF NOT EXISTS {ADDED} (id bigint PRIMARY KEY, note text)")
    pg.execute(f"ALTER TABLE {ADDED} REPLICA IDENTITY FULL")
    original = connector_config(config)
    assert ADDED not in original["table.include.list"]
    changed = {**original, "table.include.list": f"{original['table.include.list']},{ADDED}"}
    try:
        put_config(config, changed)
        stack.connect.wait_connector_running(config.connector_name)
        eventually(lambda: ADDED in published(pg, config), timeout=120, what=f"{ADDED} in Debezium's publication")

        stack.connect.kill()  # a crashed worker
        up = cdc_stack_up()
        assert connector_config(config) == changed, "up after a crash re-registered the connector"
        assert up.returncode == 0, up.stdout + up.stderr
        stack.connect.wait_connector_running(config.connector_name)
        assert ADDED in published(pg, config)

        # a connector the user paused, and a worker restart: up leaves both the configuration and the pause
        connector_url = f"{config.connect_url}/connectors/{config.connector_name}"
        assert requests.put(f"{connector_url}/pause", timeout=30).status_code == 202
        eventually(lambda: state(config) == "PAUSED", timeout=60, what="connector PAUSED")
        stack.connect.stop()
        up = cdc_stack_up()
        assert connector_config(config) == changed, "up after a restart re-registered the paused connector"
        assert up.returncode == 0, up.stdout + up.stderr
        assert state(config) == "PAUSED"
        assert requests.put(f"{connector_url}/resume", timeout=30).status_code == 202
        stack.connect.wait_connector_running(config.connector_name)
        assert ADDED in published(pg, config)

        up = cdc_stack_up()  # and with everything running
        assert connector_config(config) == changed
        assert up.returncode == 0, up.stdout + up.stderr
    finally:
        requests.put(f"{config.connect_url}/connectors/{config.connector_name}/resume", timeout=30)
        put_config(config, original)
        stack.connect.wait_connector_running(config.connector_name)
