"""HDFS's site files, the Spark daemons' command lines and the cluster's ports, as the stack renders them."""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from cdc_dev.stack import cli
from cdc_dev.stack.config import REPO_ROOT, StackConfig
from cdc_dev.stack.hdfs import Hdfs, core_site, hdfs_site, site_xml
from cdc_dev.stack.spark_cluster import SparkCluster, cluster_session_conf, daemon_environment, spark_home

PORTS = {
    "CDC_HDFS_NAMENODE_PORT": "51020",
    "CDC_HDFS_NAMENODE_HTTP_PORT": "51870",
    "CDC_HDFS_DATANODE_PORT": "51866",
    "CDC_HDFS_DATANODE_HTTP_PORT": "51864",
    "CDC_HDFS_DATANODE_IPC_PORT": "51867",
    "CDC_SPARK_MASTER_PORT": "51077",
    "CDC_SPARK_MASTER_UI_PORT": "51080",
    "CDC_SPARK_WORKER_UI_PORT": "51081",
}


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StackConfig:
    monkeypatch.setenv("CDC_RUN_DIR", str(tmp_path))
    for name, value in PORTS.items():
        monkeypatch.setenv(name, value)
    return StackConfig()


def parse_site(text: str) -> list[tuple[str, str]]:
    root = ET.fromstring(text)
    assert root.tag == "configuration"
    return [(p.findtext("name"), p.findtext("value")) for p in root.findall("property")]


def test_site_xml_keeps_order_and_escapes_values() -> None:
    rendered = site_xml({"b.first": "x & <y>", "a.second": "/path/with space"})
    assert rendered.startswith('<?xml version="1.0" encoding="UTF-8"?>\n<configuration>\n')
    assert parse_site(rendered) == [("b.first", "x & <y>"), ("a.second", "/path/with space")]


def test_hdfs_site_binds_everything_to_the_stack_host_on_its_ports(config: StackConfig) -> None:
    site = dict(parse_site(site_xml(hdfs_site(config))))
    assert site["dfs.namenode.rpc-address"] == "127.0.0.1:51020"
    assert site["dfs.namenode.http-address"] == "127.0.0.1:51870"
    assert site["dfs.datanode.address"] == "127.0.0.1:51866"
    assert site["dfs.datanode.http.address"] == "127.0.0.1:51864"
    assert site["dfs.datanode.ipc.address"] == "127.0.0.1:51867"
    addresses = [value for name, value in site.items() if name.endswith(("address", "-address"))]
    assert addresses and all(value.startswith("127.0.0.1:") for value in addresses)
    assert site["dfs.datanode.hostname"] == "127.0.0.1"
    assert site["dfs.client.use.datanode.hostname"] == "true"
    assert site["dfs.replication"] == "1"
    assert site["dfs.permissions.enabled"] == "false"
    assert site["dfs.namenode.name.dir"] == str(config.run_dir / "hdfs" / "name")
    assert site["dfs.datanode.data.dir"] == str(config.run_dir / "hdfs" / "data")


def test_core_site_and_lake_uri_name_the_namenode(config: StackConfig) -> None:
    assert dict(parse_site(site_xml(core_site(config))))["fs.defaultFS"] == "hdfs://127.0.0.1:51020"
    assert config.hdfs_lake_uri == "hdfs://127.0.0.1:51020/lake"
    assert config.hdfs_namenode_ui_url == "http://127.0.0.1:51870"


def test_write_config_puts_site_files_log4j_and_webapp_stand_ins_in_the_run_folder(config: StackConfig) -> None:
    hdfs = Hdfs(config)
    hdfs.write_config()
    conf = config.run_dir / "hdfs" / "conf"
    assert hdfs.conf_dir == conf
    assert {p.name for p in conf.iterdir()} == {"core-site.xml", "hdfs-site.xml", "log4j.properties", "webapps"}
    assert {p.name for p in (conf / "webapps").iterdir()} == {"hdfs", "datanode", "static"}
    assert "log4j.rootLogger=INFO, console" in (conf / "log4j.properties").read_text()
    assert not hdfs.formatted()


def test_hadoop_version_equals_pysparks_bundled_client() -> None:
    pom = (REPO_ROOT / "stack" / "hdfs" / "pom.xml").read_text()
    wanted = re.search(r"<hadoop.version>(.+)</hadoop.version>", pom).group(1)
    bundled = [p.name for p in (spark_home() / "jars").glob("hadoop-client-api-*.jar")]
    assert bundled == [f"hadoop-client-api-{wanted}.jar"]


def test_spark_daemons_run_from_pysparks_spark_class_on_the_stack_ports(config: StackConfig) -> None:
    cluster = SparkCluster(config, config.run_dir / "hdfs" / "conf")
    master, worker = cluster.master_argv(), cluster.worker_argv()
    assert Path(master[0]) == spark_home() / "bin" / "spark-class" and Path(master[0]).is_file()
    assert master[1:] == [
        "org.apache.spark.deploy.master.Master",
        "--host",
        "127.0.0.1",
        "--port",
        "51077",
        "--webui-port",
        "51080",
    ]
    assert worker[1] == "org.apache.spark.deploy.worker.Worker"
    assert worker[-1] == "spark://127.0.0.1:51077"
    options = dict(zip(worker[2:-1:2], worker[3:-1:2], strict=True))
    assert options == {
        "--host": "127.0.0.1",
        "--webui-port": "51081",
        "--cores": "2",
        "--memory": "4g",
        "--work-dir": str(config.run_dir / "logs" / "spark-work"),
    }
    assert cluster.master.log_file == config.run_dir / "logs" / "spark-master.log"
    env = daemon_environment(config, config.run_dir / "hdfs" / "conf")
    assert env["HADOOP_CONF_DIR"] == str(config.run_dir / "hdfs" / "conf")
    assert env["SPARK_LOCAL_IP"] == "127.0.0.1"


def test_worker_size_comes_from_the_environment(config: StackConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDC_SPARK_WORKER_CORES", "1")
    monkeypatch.setenv("CDC_SPARK_WORKER_MEMORY", "2g")
    worker = SparkCluster(StackConfig(), Path("conf")).worker_argv()
    assert worker[worker.index("--cores") + 1] == "1" and worker[worker.index("--memory") + 1] == "2g"
    monkeypatch.setenv("CDC_SPARK_WORKER_CORES", "two")
    with pytest.raises(ValueError, match="CDC_SPARK_WORKER_CORES='two' is not a positive whole number"):
        StackConfig()
    monkeypatch.setenv("CDC_SPARK_WORKER_CORES", "2")
    monkeypatch.setenv("CDC_SPARK_MASTER_PORT", "70777")
    with pytest.raises(ValueError, match="CDC_SPARK_MASTER_PORT=70777 is outside"):
        StackConfig()


def test_session_conf_points_at_the_master_with_this_python(config: StackConfig) -> None:
    conf = cluster_session_conf(config)
    assert conf["spark.master"] == "spark://127.0.0.1:51077"
    assert conf["spark.driver.host"] == "127.0.0.1"
    assert conf["spark.pyspark.python"] == sys.executable
    assert conf["spark.hadoop.dfs.client.use.datanode.hostname"] == "true"


def test_default_ports_differ_from_each_other_and_from_the_other_services(monkeypatch: pytest.MonkeyPatch) -> None:
    others = (
        "CDC_PG_PORT",
        "CDC_KAFKA_PORT",
        "CDC_KAFKA_CONTROLLER_PORT",
        "CDC_KAFKA_SASL_PORT",
        "CDC_CONNECT_PORT",
        "CDC_AIRFLOW_PORT",
        "CDC_SPARK_CONNECT_PORT",
        "CDC_SPARK_CONNECT_UI_PORT",
        "CDC_DATA_DOCS_PORT",
    )
    for name in (*PORTS, *others):
        monkeypatch.delenv(name, raising=False)
    ports = [value for name, value in vars(StackConfig()).items() if name.endswith("_port")]
    assert len(ports) == len(set(ports)) == 17


def test_up_with_cluster_asks_the_stack_for_it(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    made: list[dict] = []

    class FakeStack:
        def __init__(self, **kwargs) -> None:
            made.append(kwargs)
            self.with_cluster, self.with_airflow = kwargs["cluster"], kwargs["airflow"]
            self.config, self.connector_outcome = StackConfig(), None

        def up(self, **_) -> dict[str, float]:
            return {"hdfs": 1.0, "spark": 2.0}

        def status(self) -> list:
            return []

    monkeypatch.setattr(cli, "Stack", FakeStack)
    assert cli.main(["up", "--no-register", "--with-cluster"]) == 0
    assert made == [{"airflow": False, "cluster": True}]
    printed = capsys.readouterr().out
    assert "stack up: hdfs 1.0s, spark 2.0s" in printed
    assert "HDFS: hdfs://127.0.0.1:" in printed and "Spark: spark://127.0.0.1:" in printed
    cli.main(["up", "--no-register"])
    assert made[-1] == {"airflow": False, "cluster": False}
