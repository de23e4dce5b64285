"""HDFS as one NameNode and one DataNode, each its own JVM on Hadoop's Maven Central jars.

The lake that executors on other hosts can share (``hdfs://``); ``file://`` stays the light default.
The Hadoop version equals the client pyspark bundles (``stack/hdfs/pom.xml``), so Spark speaks the
servers' protocol. Everything binds to 127.0.0.1: a development stack, not a cluster to expose.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

import requests

from .config import StackConfig
from .process import ManagedProcess, StackError, answers, wait_until

# Hadoop 3.4 logs through reload4j (the Log4j 1.2 API); without a configuration it logs nothing.
# To stderr, which the stack's process wrapper writes to the component's log file.
LOG4J_PROPERTIES = """\
log4j.rootLogger=INFO, console
log4j.appender.console=org.apache.log4j.ConsoleAppender
log4j.appender.console.target=System.err
log4j.appender.console.layout=org.apache.log4j.PatternLayout
log4j.appender.console.layout.ConversionPattern=%d{ISO8601} %p %c{2}: %m%n
log4j.logger.org.apache.hadoop.util.NativeCodeLoader=ERROR
log4j.logger.org.apache.hadoop.hdfs.StateChange=WARN
log4j.logger.BlockStateChange=WARN
"""
# The HTTP servers look their web application up on the class path; Maven Central's hadoop-hdfs jar
# ships none (the tarball has them as files), so empty folders stand in: /jmx and WebHDFS still answer.
WEBAPPS = ("hdfs", "datanode", "static")
FS_STATE_BEAN = "Hadoop:service=NameNode,name=FSNamesystemState"
DATANODE_BEAN = "Hadoop:service=DataNode,name=DataNodeInfo"


def site_xml(properties: Mapping[str, str]) -> str:
    """A Hadoop ``*-site.xml`` with ``properties`` in order, values escaped."""
    rows = "".join(
        f"  <property>\n    <name>{escape(name)}</name>\n    <value>{escape(value)}</value>\n  </property>\n"
        for name, value in properties.items()
    )
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<configuration>\n{rows}</configuration>\n'


def core_site(config: StackConfig) -> dict[str, str]:
    return {"fs.defaultFS": config.hdfs_url, "hadoop.tmp.dir": str(config.run_dir / "hdfs" / "tmp")}


def hdfs_site(config: StackConfig) -> dict[str, str]:
    """One NameNode, one DataNode, replication 1, no permission checks, every address on the stack's host."""
    home, host = config.run_dir / "hdfs", config.host
    return {
        "dfs.namenode.name.dir": str(home / "name"),
        "dfs.datanode.data.dir": str(home / "data"),
        "dfs.namenode.rpc-address": f"{host}:{config.hdfs_namenode_port}",
        "dfs.namenode.http-address": f"{host}:{config.hdfs_namenode_http_port}",
        # not run; its default 0.0.0.0:9868 would only be reserved in the configuration
        "dfs.namenode.secondary.http-address": f"{host}:0",
        "dfs.datanode.address": f"{host}:{config.hdfs_datanode_port}",
        "dfs.datanode.http.address": f"{host}:{config.hdfs_datanode_http_port}",
        "dfs.datanode.ipc.address": f"{host}:{config.hdfs_datanode_ipc_port}",
        # the DataNode registers under, and clients dial it by, 127.0.0.1 rather than whatever the
        # machine's name resolves to
        "dfs.datanode.hostname": host,
        "dfs.datanode.use.datanode.hostname": "true",
        "dfs.client.use.datanode.hostname": "true",
        "dfs.namenode.datanode.registration.ip-hostname-check": "false",
        "dfs.replication": "1",
        "dfs.permissions.enabled": "false",
        # leave safe mode as soon as the DataNode reported its blocks, not 30 s later
        "dfs.namenode.safemode.extension": "0",
        "dfs.namenode.safemode.min.datanodes": "1",
    }


def hadoop_java(config: StackConfig, conf_dir: Path, main_class: str, *args: str, heap: str) -> list[str]:
    """A JVM on the jars ``stack/hdfs/pom.xml`` fetched, with ``conf_dir`` (site files, Log4j) first."""
    if not config.hdfs_libs.is_dir():
        raise StackError(
            f"hdfs: jars not found in {config.hdfs_libs}; run scripts/setup.sh "
            "(mvn -f stack/hdfs/pom.xml generate-resources) first"
        )
    java = os.environ.get("JAVA_HOME")
    return [
        str(Path(java) / "bin" / "java") if java else "java",
        f"-Xmx{heap}",
        "-XX:+UseG1GC",
        "-Djava.awt.headless=true",
        "-Djava.net.preferIPv4Stack=true",
        # Hadoop 3.4 reflects into java.lang (Java 17 denies it unless opened)
        "--add-opens=java.base/java.lang=ALL-UNNAMED",
        "-cp",
        f"{conf_dir}:{config.hdfs_libs}/*",
        main_class,
        *args,
    ]


class Hdfs:
    name = "hdfs"

    def __init__(self, config: StackConfig) -> None:
        self.config = config
        self.home = config.run_dir / "hdfs"
        pids = config.run_dir / "pids"
        self.namenode = ManagedProcess("hdfs-namenode", pids / "hdfs-namenode.pid", self.namenode_log)
        self.datanode = ManagedProcess("hdfs-datanode", pids / "hdfs-datanode.pid", self.datanode_log)

    @property
    def conf_dir(self) -> Path:
        """``HADOOP_CONF_DIR``: the site files clients (Spark's executors) read too."""
        return self.home / "conf"

    @property
    def namenode_log(self) -> Path:
        return self.config.logs_dir / "hdfs-namenode.log"

    @property
    def datanode_log(self) -> Path:
        return self.config.logs_dir / "hdfs-datanode.log"

    def write_config(self) -> None:
        for app in WEBAPPS:
            (self.conf_dir / "webapps" / app).mkdir(parents=True, exist_ok=True)
        self.config.logs_dir.mkdir(parents=True, exist_ok=True)
        (self.conf_dir / "core-site.xml").write_text(site_xml(core_site(self.config)))
        (self.conf_dir / "hdfs-site.xml").write_text(site_xml(hdfs_site(self.config)))
        (self.conf_dir / "log4j.properties").write_text(LOG4J_PROPERTIES)

    def formatted(self) -> bool:
        return (self.home / "name" / "current" / "VERSION").exists()

    def format_namenode(self) -> None:
        """Format the namespace once; a DataNode folder from an earlier namespace is removed with it
        (it carries the old cluster id, which the new NameNode would refuse)."""
        if self.formatted():
            return
        shutil.rmtree(self.home / "data", ignore_errors=True)
        argv = hadoop_java(
            self.config,
            self.conf_dir,
            "org.apache.hadoop.hdfs.server.namenode.NameNode",
            "-format",
            # reached only without a VERSION file: a folder a failed format left behind is overwritten
            "-force",
            "-nonInteractive",
            "-clusterid",
            "cdc-stack",
            heap="256m",
        )
        result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
        if result.returncode != 0 or not self.formatted():
            raise StackError(
                f"hdfs: formatting the NameNode in {self.home / 'name'} failed (exit {result.returncode}):\n"
                f"{result.stderr[-3000:]}"
            )

    def fs_state(self) -> dict[str, Any]:
        """The NameNode's FSNamesystemState bean from its /jmx: ``FSState`` and ``NumLiveDataNodes``."""
        return _bean(f"{self.config.hdfs_namenode_ui_url}/jmx", FS_STATE_BEAN)

    def datanode_registered(self) -> bool:
        """The DataNode's own view: its connection to the NameNode is RUNNING (registered, reporting).

        The NameNode's live count alone is not enough: it counts a DataNode killed a moment ago as
        live for minutes (until ``dfs.namenode.heartbeat.recheck-interval`` passes).
        """
        info = _bean(f"http://{self.config.host}:{self.config.hdfs_datanode_http_port}/jmx", DATANODE_BEAN)
        actors = json.loads(info.get("BPServiceActorInfo") or "[]")
        return bool(actors) and all(actor.get("ActorState") == "RUNNING" for actor in actors)

    def namenode_healthy(self) -> bool:
        """Out of safe mode: the namespace accepts writes."""
        return self.fs_state().get("FSState") == "Operational"

    def datanode_healthy(self) -> bool:
        """Registered with the NameNode, which counts it live (ours: the only one configured)."""
        return (
            self.datanode.running() and self.datanode_registered() and self.fs_state().get("NumLiveDataNodes", 0) >= 1
        )

    def healthy(self) -> bool:
        """Out of safe mode with one live DataNode: the file system takes reads and writes."""
        return self.namenode_healthy() and self.datanode_healthy()

    def start(self, timeout: float = 120) -> None:
        if self.namenode.running() and self.datanode.running() and answers(self.healthy):
            return
        self.write_config()
        self.format_namenode()
        if not self.namenode.running():
            self._start(self.namenode, "org.apache.hadoop.hdfs.server.namenode.NameNode", "512m")
        wait_until(
            self.fs_state,
            timeout=timeout,
            what="hdfs namenode",
            log=self.namenode_log,
            interval=0.5,
            alive=self.namenode.running,
        )
        if not self.datanode.running():
            self._start(self.datanode, "org.apache.hadoop.hdfs.server.datanode.DataNode", "384m")
        wait_until(
            self.healthy,
            timeout=timeout,
            what="hdfs datanode (live at the NameNode, safe mode off)",
            log=self.datanode_log,
            interval=0.5,
            alive=lambda: self.namenode.running() and self.datanode.running(),
        )
        self.mkdirs("/lake")

    def _start(self, process: ManagedProcess, main_class: str, heap: str) -> None:
        env = {"HADOOP_CONF_DIR": str(self.conf_dir), "HADOOP_LOG_DIR": str(self.config.logs_dir)}
        process.start(hadoop_java(self.config, self.conf_dir, main_class, heap=heap), env=env, cwd=self.home)

    def mkdirs(self, path: str) -> None:
        """Create ``path`` (and parents) through WebHDFS; an existing folder is fine."""
        response = requests.put(
            f"{self.config.hdfs_namenode_ui_url}/webhdfs/v1{path}",
            params={"op": "MKDIRS", "user.name": os.environ.get("USER", "root")},
            timeout=10,
        )
        if response.status_code != 200 or not response.json().get("boolean"):
            raise StackError(f"hdfs: creating {path} failed: HTTP {response.status_code} {response.text[:500]}")

    def stop(self, timeout: float = 60) -> bool:
        """DataNode first, so the NameNode does not spend its shutdown declaring it dead."""
        datanode = self.datanode.stop(timeout=timeout)
        namenode = self.namenode.stop(timeout=timeout)
        return datanode or namenode

    def pids(self) -> list[int]:
        return [pid for pid in (self.namenode.pid(), self.datanode.pid()) if pid is not None]


def _bean(jmx_url: str, name: str) -> dict[str, Any]:
    """One MBean from a Hadoop daemon's /jmx servlet; empty when it does not have it (yet)."""
    response = requests.get(jmx_url, params={"qry": name}, timeout=5)
    response.raise_for_status()
    beans = response.json()["beans"]
    return beans[0] if beans else {}
