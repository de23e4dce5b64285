"""The stack's HDFS and Spark standalone cluster are real: a session on ``spark://`` runs its executors
on the stack's worker, with the virtualenv's Python, and writes and reads Parquet on ``hdfs://``.

A stack of this module's own (a temporary run folder, ports of its own), with only HDFS and Spark:
the session's stack (PostgreSQL, Kafka, Connect) is neither needed nor touched.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from unittest import mock

import pytest
import requests

from cdc_dev.stack import Stack, StackConfig
from cdc_dev.stack.config import REPO_ROOT
from cdc_dev.stack.process import pid_alive
from tests.support.cluster_app import ROWS
from tests.support.polling import eventually

pytestmark = pytest.mark.integration

# The developer's cluster ports + 10, as the session stack's are (conftest.TEST_ENV).
CLUSTER_TEST_ENV = {
    "CDC_HDFS_NAMENODE_PORT": os.environ.get("CDC_TEST_HDFS_NAMENODE_PORT", "29030"),
    "CDC_HDFS_NAMENODE_HTTP_PORT": os.environ.get("CDC_TEST_HDFS_NAMENODE_HTTP_PORT", "29880"),
    "CDC_HDFS_DATANODE_PORT": os.environ.get("CDC_TEST_HDFS_DATANODE_PORT", "29876"),
    "CDC_HDFS_DATANODE_HTTP_PORT": os.environ.get("CDC_TEST_HDFS_DATANODE_HTTP_PORT", "29874"),
    "CDC_HDFS_DATANODE_IPC_PORT": os.environ.get("CDC_TEST_HDFS_DATANODE_IPC_PORT", "29877"),
    "CDC_SPARK_MASTER_PORT": os.environ.get("CDC_TEST_SPARK_MASTER_PORT", "27087"),
    "CDC_SPARK_MASTER_UI_PORT": os.environ.get("CDC_TEST_SPARK_MASTER_UI_PORT", "28490"),
    "CDC_SPARK_WORKER_UI_PORT": os.environ.get("CDC_TEST_SPARK_WORKER_UI_PORT", "28491"),
}
CLUSTER_ROWS = ("hdfs namenode", "hdfs datanode", "spark master", "spark worker")


@pytest.fixture(scope="module")
def cluster_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of this module's stack, for the stack object and for the processes it runs."""
    return {**CLUSTER_TEST_ENV, "CDC_RUN_DIR": str(tmp_path_factory.mktemp("cluster-stack"))}


@pytest.fixture(scope="module")
def cluster(cluster_env: dict[str, str]) -> Iterator[Stack]:
    with mock.patch.dict(os.environ, cluster_env):
        stack = Stack(StackConfig(), cluster=True)
    try:
        timings = stack.start_cluster()
        print(f"\ncluster up: {timings}")
        yield stack
    finally:
        stack.stop_cluster()


def run_in(env: dict[str, str], *argv: str, timeout: float) -> subprocess.CompletedProcess:
    """A child Python of this virtualenv, on this checkout, in the module stack's environment."""
    path = os.pathsep.join(str(REPO_ROOT / p) for p in ("include", "dev", "."))
    return subprocess.run(
        [sys.executable, *argv],
        env={**os.environ, **env, "PYTHONPATH": path},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def webhdfs(config: StackConfig, path: str, op: str) -> dict:
    response = requests.get(f"{config.hdfs_namenode_ui_url}/webhdfs/v1{path}", params={"op": op}, timeout=10)
    response.raise_for_status()
    return response.json()


def test_cluster_is_healthy_and_status_shows_it(cluster: Stack, cluster_env: dict[str, str]) -> None:
    config = cluster.config
    master = requests.get(f"{config.spark_master_ui_url}/json/", timeout=10).json()
    assert master["status"] == "ALIVE"
    assert master["url"] == config.spark_master_url
    alive = [w for w in master["workers"] if w["state"] == "ALIVE"]
    assert len(alive) == 1
    assert alive[0]["host"] == "127.0.0.1"
    assert (alive[0]["cores"], alive[0]["memory"]) == (2, 4096)
    state = cluster.hdfs.fs_state()
    assert (state["FSState"], state["NumLiveDataNodes"]) == ("Operational", 1)
    assert webhdfs(config, "/lake", "GETFILESTATUS")["FileStatus"]["type"] == "DIRECTORY"

    # a ``status`` from another process (cdc-stack, not asked for the cluster) still lists it
    status = run_in(cluster_env, "-m", "cdc_dev.stack", "status", "--json", timeout=120)
    rows = {row["name"]: row for row in json.loads(status.stdout)}
    assert status.returncode == 1, "PostgreSQL, Kafka and Connect are not running here"
    for name, process in zip(
        CLUSTER_ROWS,
        (cluster.hdfs.namenode, cluster.hdfs.datanode, cluster.spark.master, cluster.spark.worker),
        strict=True,
    ):
        assert rows[name]["healthy"], rows[name]
        assert rows[name]["pid"] == process.pid()
        assert str(process.log_file) in rows[name]["detail"]
        assert process.log_file.stat().st_size > 0
    assert config.hdfs_namenode_ui_url in rows["hdfs namenode"]["detail"]
    assert config.spark_master_ui_url in rows["spark master"]["detail"]


def test_a_session_on_the_cluster_writes_and_reads_parquet_on_hdfs(cluster: Stack, cluster_env: dict[str, str]) -> None:
    config = cluster.config
    path = f"{config.hdfs_lake_uri}/x"
    assert path == f"hdfs://127.0.0.1:{CLUSTER_TEST_ENV['CDC_HDFS_NAMENODE_PORT']}/lake/x"
    app = run_in(cluster_env, "-m", "tests.support.cluster_app", path, timeout=240)
    assert app.returncode == 0, app.stderr[-4000:]
    result = json.loads(app.stdout.strip().splitlines()[-1])

    assert result["master"] == config.spark_master_url
    assert [tuple(row) for row in result["rows"]] == sorted(ROWS)
    assert result["files"] and all(f.startswith(f"{path}/part-") for f in result["files"])
    # the executor's Python is this virtualenv's, under an executor JVM the stack's worker launched
    assert result["executor_prefix"] == sys.prefix
    assert cluster.spark.worker.pid() in result["executor_ancestry"]
    assert result["app"]["state"] == "RUNNING" and result["app"]["cores"] == 2

    listed = {s["pathSuffix"] for s in webhdfs(config, "/lake/x", "LISTSTATUS")["FileStatuses"]["FileStatus"]}
    assert "_SUCCESS" in listed and {f.rsplit("/", 1)[1] for f in result["files"]} <= listed
    master = requests.get(f"{config.spark_master_ui_url}/json/", timeout=10).json()
    finished = [a for a in master["completedapps"] if a["id"] == result["app"]["id"]]
    assert [a["state"] for a in finished] == ["FINISHED"]
    # [Python daemon, executor JVM, worker, ...]: the worker ends the first two once the app is done
    executor = result["executor_ancestry"][:2]
    eventually(lambda: not any(map(pid_alive, executor)), timeout=60, what=f"executor processes {executor} gone")


@pytest.mark.slow  # `-m slow`, to keep the test command under CI's limit
def test_start_restarts_a_killed_datanode_and_worker(cluster: Stack) -> None:
    """After ``kill -9`` the NameNode still counts the DataNode live, and the master may still list the
    worker: health asks the DataNode and the worker themselves, so ``start`` really starts them again."""
    kept = (cluster.hdfs.namenode.pid(), cluster.spark.master.pid())
    cluster.hdfs.datanode.kill()
    cluster.spark.worker.kill()
    assert [r.healthy for r in cluster.cluster_status()] == [True, False, True, False]
    cluster.start_cluster()
    assert (cluster.hdfs.namenode.pid(), cluster.spark.master.pid()) == kept
    assert all(r.healthy for r in cluster.cluster_status())
    assert cluster.hdfs.datanode_registered() and cluster.spark.worker_healthy()


def test_start_is_idempotent_and_stop_leaves_nothing(cluster: Stack) -> None:
    pids = {p.name: p.pid() for p in _processes(cluster)}
    timings = cluster.start_cluster()
    assert {p.name: p.pid() for p in _processes(cluster)} == pids, "a healthy cluster is left alone"
    assert all(seconds < 5 for seconds in timings.values()), timings

    assert cluster.stop_cluster() == ["spark", "hdfs"]
    assert cluster.leftover_pids() == []
    assert all(not pid_alive(pid) for pid in pids.values())
    config = cluster.config
    ports = [config.hdfs_namenode_port, config.hdfs_namenode_http_port, config.hdfs_datanode_port]
    ports += [config.spark_master_port, config.spark_master_ui_port, config.spark_worker_ui_port]
    assert [port for port in ports if _listening(port)] == []
    rows = cluster.cluster_status()
    assert [(r.name, r.running, r.pid) for r in rows] == [(name, False, None) for name in CLUSTER_ROWS]
    assert cluster.stop_cluster() == [], "nothing left to stop"


def _processes(stack: Stack) -> list:
    return [stack.hdfs.namenode, stack.hdfs.datanode, stack.spark.master, stack.spark.worker]


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0
