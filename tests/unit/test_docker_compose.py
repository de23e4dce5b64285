"""docker-compose.yaml describes the same stack as the embedded one.

No Docker and no network: the file is parsed with PyYAML and checked the way Compose and the
images would read it (``${VAR:-default}`` resolved to its default, ``$$`` to ``$``, the images'
environment-variable-to-property rules applied).
"""

from __future__ import annotations

import itertools
import json
import re
import shlex
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yaml"
POM_FILE = ROOT / "stack" / "pom.xml"
REQUIREMENTS_FILE = ROOT / "requirements.txt"

LONG_RUNNING = {"postgres", "kafka", "connect", "airflow", "spark-master", "spark-worker"}
ONE_SHOT = {"init"}
CONNECTOR_NAME = "cdc-demo"

_VARIABLE = re.compile(r"\$\$|\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::?-(?P<default>[^}]*))?\}")


def interpolate(text: str) -> str:
    """Resolve Compose interpolation as on a host with none of the variables set."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return match.group("default") or ""

    return _VARIABLE.sub(replace, text)


def variables(text: str) -> list[tuple[str, str | None]]:
    """Every ``${NAME[:-default]}`` in ``text``, in order."""
    return [(m.group("name"), m.group("default")) for m in _VARIABLE.finditer(text) if m.group(0) != "$$"]


@pytest.fixture(scope="module")
def raw() -> str:
    return COMPOSE_FILE.read_text()


@pytest.fixture(scope="module")
def compose(raw: str) -> dict[str, Any]:
    data = yaml.safe_load(raw)
    assert isinstance(data, dict), "docker-compose.yaml must be a mapping"
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


@pytest.fixture(scope="module")
def pom_properties() -> dict[str, str]:
    root = ET.parse(POM_FILE).getroot()
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    props = root.find("m:properties", ns)
    assert props is not None, "stack/pom.xml has no <properties>"
    return {child.tag.split("}", 1)[1]: (child.text or "").strip() for child in props}


@pytest.fixture(scope="module")
def connector_payload(compose: dict[str, Any]) -> dict[str, str]:
    content = compose["configs"]["cdc-demo-connector"]["content"]
    return json.loads(interpolate(content))


def env(service: dict[str, Any]) -> dict[str, str]:
    """A service's environment as strings, defaults resolved (list or mapping form)."""
    raw_env = service.get("environment") or {}
    if isinstance(raw_env, list):
        raw_env = dict(item.split("=", 1) for item in raw_env)
    return {key: interpolate(str(value)) for key, value in raw_env.items()}


def image_tag(image: str) -> str:
    resolved = interpolate(image)
    assert ":" in resolved, f"image {resolved!r} has no tag"
    return resolved.rsplit(":", 1)[1]


def command_args(service: dict[str, Any]) -> list[str]:
    command = service.get("command") or []
    return shlex.split(command) if isinstance(command, str) else [str(part) for part in command]


def kafka_properties(environment: dict[str, str]) -> dict[str, str]:
    """apache/kafka's rule: KAFKA_ prefix off, ``___`` -> ``-``, ``__`` -> ``_``, ``_`` -> ``.``."""
    props = {}
    for key, value in environment.items():
        if not key.startswith("KAFKA_") or key in {"KAFKA_HEAP_OPTS", "KAFKA_OPTS", "KAFKA_JMX_OPTS"}:
            continue
        name = key[len("KAFKA_") :].replace("___", "\0").replace("__", "\1").replace("_", ".")
        props[name.replace("\0", "-").replace("\1", "_").lower()] = value
    return props


def connect_worker_properties(environment: dict[str, str]) -> dict[str, str]:
    """Debezium connect image's entrypoint: named variables, then CONNECT_<NAME> -> <name>."""
    named = {
        "BOOTSTRAP_SERVERS": "bootstrap.servers",
        "GROUP_ID": "group.id",
        "CONFIG_STORAGE_TOPIC": "config.storage.topic",
        "OFFSET_STORAGE_TOPIC": "offset.storage.topic",
        "STATUS_STORAGE_TOPIC": "status.storage.topic",
    }
    props = {prop: environment[var] for var, prop in named.items() if var in environment}
    for key, value in environment.items():
        if key.startswith("CONNECT_") and not key.startswith("CONNECT_LOG4J"):
            props[key[len("CONNECT_") :].lower().replace("_", ".")] = value
    return props


def postgres_settings(service: dict[str, Any]) -> dict[str, str]:
    args = command_args(service)
    settings = {}
    for flag, value in itertools.pairwise(args):
        if flag == "-c":
            key, _, setting = value.partition("=")
            settings[key] = setting
    return settings


def healthcheck_text(service: dict[str, Any]) -> str:
    test = service["healthcheck"]["test"]
    return test if isinstance(test, str) else " ".join(str(part) for part in test)


def requirement_pin(name: str) -> str:
    for line in REQUIREMENTS_FILE.read_text().splitlines():
        match = re.match(rf"^{re.escape(name)}(\[[^\]]*\])?==(\S+)", line.strip())
        if match:
            return match.group(2)
    raise AssertionError(f"{name} is not pinned in requirements.txt")


# -- services -------------------------------------------------------------------------------------


def test_the_stack_has_every_service(services: dict[str, dict[str, Any]]) -> None:
    assert set(services) == LONG_RUNNING | ONE_SHOT


def test_every_long_running_service_has_a_healthcheck(services: dict[str, dict[str, Any]]) -> None:
    for name in sorted(LONG_RUNNING):
        check = services[name].get("healthcheck")
        assert check, f"{name} has no healthcheck"
        assert not check.get("disable"), f"{name}'s healthcheck is disabled"
        test = check["test"]
        assert test and test not in (["NONE"], "NONE"), f"{name}'s healthcheck runs nothing"
        assert services[name].get("restart") in {"unless-stopped", "always"}, f"{name} is not restarted"


def test_init_runs_once(services: dict[str, dict[str, Any]]) -> None:
    init = services["init"]
    assert str(init.get("restart", "no")) == "no"
    assert "healthcheck" not in init


def test_depends_on_waits_for_health(services: dict[str, dict[str, Any]]) -> None:
    expected = {
        "connect": {"kafka": "service_healthy", "postgres": "service_healthy"},
        "init": {"connect": "service_healthy", "postgres": "service_healthy"},
        "airflow": {"postgres": "service_healthy", "init": "service_completed_successfully"},
        "spark-worker": {"spark-master": "service_healthy"},
    }
    for name, wanted in expected.items():
        depends_on = services[name].get("depends_on")
        assert isinstance(depends_on, dict), f"{name}: depends_on must be a mapping with conditions"
        for dependency, condition in wanted.items():
            assert depends_on.get(dependency, {}).get("condition") == condition, (name, dependency)
    for name, service in services.items():
        for dependency, spec in (service.get("depends_on") or {}).items():
            wanted = "service_completed_successfully" if dependency in ONE_SHOT else "service_healthy"
            assert spec.get("condition") == wanted, f"{name} -> {dependency} should wait for {wanted}"


# -- versions -------------------------------------------------------------------------------------


def test_versions_are_pinned_once(raw: str, compose: dict[str, Any]) -> None:
    images = compose["x-versions"]
    assert set(images) >= {"postgres", "kafka", "debezium-connect", "airflow", "spark"}
    all_variables = variables(raw)
    for image in images.values():
        pinned = [(name, default) for name, default in variables(image) if name.endswith("_VERSION")]
        assert pinned, f"{image!r} takes its version from no ${{..._VERSION:-default}}"
        for name, default in pinned:
            assert default, f"{name} has no default in {image!r}"
            uses = [var for var in all_variables if var[0] == name]
            assert len(uses) == 1, f"{name} appears {len(uses)} times; pin it once in x-versions"
            if len(default) > 4:  # distinctive strings such as 4.3.1 or 3.6.3.Final
                assert raw.count(default) == 1, f"version {default} is written more than once"


def test_services_use_the_pinned_images(compose: dict[str, Any], services: dict[str, dict[str, Any]]) -> None:
    pinned = set(compose["x-versions"].values())
    runtime = compose["x-runtime"]
    for name, service in services.items():
        image = service["image"]
        if image == runtime["image"]:
            assert service.get("build") == runtime["build"], f"{name}: runtime image without its build"
            assert runtime["build"]["args"]["AIRFLOW_IMAGE"] in pinned
        else:
            assert image in pinned, f"{name}: image {image!r} is not one of x-versions"


def test_kafka_and_debezium_versions_match_the_embedded_stack(
    compose: dict[str, Any], pom_properties: dict[str, str]
) -> None:
    images = compose["x-versions"]
    assert interpolate(images["kafka"]).startswith("apache/kafka:")
    assert image_tag(images["kafka"]) == pom_properties["kafka.version"]
    assert interpolate(images["debezium-connect"]).startswith("quay.io/debezium/connect:")
    assert image_tag(images["debezium-connect"]) == pom_properties["debezium.version"]


def test_airflow_spark_and_postgres_versions(compose: dict[str, Any]) -> None:
    images = compose["x-versions"]
    airflow = requirement_pin("apache-airflow")
    assert interpolate(images["airflow"]) == f"apache/airflow:{airflow}-python3.11"
    spark = interpolate(images["spark"])
    assert spark.startswith(f"apache/spark:{requirement_pin('pyspark')}-scala2.13-"), spark
    assert interpolate(images["postgres"]) == "postgres:15"


# -- postgres -------------------------------------------------------------------------------------


def test_postgres_decodes_logically(services: dict[str, dict[str, Any]]) -> None:
    postgres = services["postgres"]
    settings = postgres_settings(postgres)
    assert settings.get("wal_level") == "logical"
    assert int(settings.get("max_wal_senders", "0")) >= 4
    assert int(settings.get("max_replication_slots", "0")) >= 4
    assert "pg_isready" in healthcheck_text(postgres)
    assert any(str(volume).endswith(":/var/lib/postgresql/data") for volume in postgres["volumes"])


def test_postgres_creates_the_pipeline_and_airflow_databases(compose: dict[str, Any]) -> None:
    mounted = {c["source"]: c["target"] for c in compose["services"]["postgres"]["configs"]}
    assert mounted["postgres-init"].startswith("/docker-entrypoint-initdb.d/")
    sql = interpolate(compose["configs"]["postgres-init"]["content"])
    assert re.search(r"CREATE ROLE cdc\b[^;]*\bREPLICATION\b", sql)
    assert re.search(r"CREATE DATABASE cdc_demo OWNER cdc;", sql)
    assert re.search(r"CREATE DATABASE airflow OWNER airflow;", sql)


# -- kafka and connect ----------------------------------------------------------------------------


def test_kafka_is_one_kraft_node(services: dict[str, dict[str, Any]]) -> None:
    kafka = services["kafka"]
    environment = env(kafka)
    props = kafka_properties(environment)
    assert environment.get("CLUSTER_ID"), "KRaft in apache/kafka needs CLUSTER_ID"
    assert set(props["process.roles"].split(",")) == {"broker", "controller"}
    assert props["node.id"] == "1"
    for prop in (
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
        "share.coordinator.state.topic.replication.factor",
        "share.coordinator.state.topic.min.isr",
    ):
        assert props.get(prop) == "1", f"{prop} must be 1 on a single node"
    controller = props["controller.listener.names"]
    assert f"{controller}://" in props["listeners"]
    assert "kafka-broker-api-versions" in healthcheck_text(kafka)


def test_connect_runs_exactly_once_source_support(services: dict[str, dict[str, Any]]) -> None:
    connect = services["connect"]
    props = connect_worker_properties(env(connect))
    assert props["exactly.once.source.support"] == "enabled"
    for prop in (
        "config.storage.replication.factor",
        "offset.storage.replication.factor",
        "status.storage.replication.factor",
    ):
        assert props.get(prop) == "1", prop
    for prop in ("group.id", "config.storage.topic", "offset.storage.topic", "status.storage.topic"):
        assert props.get(prop), f"the distributed worker needs {prop}"
    advertised = kafka_properties(env(services["kafka"]))["advertised.listeners"]
    endpoints = {entry.split("://", 1)[1] for entry in advertised.split(",")}
    assert props["bootstrap.servers"] in endpoints, "Connect must bootstrap from a listener Kafka advertises"
    assert "8083" in healthcheck_text(connect)


def test_records_as_large_as_the_embedded_stack_allows(services: dict[str, dict[str, Any]]) -> None:
    from cdc_dev.stack.config import MAX_MESSAGE_BYTES

    assert kafka_properties(env(services["kafka"]))["message.max.bytes"] == str(MAX_MESSAGE_BYTES)
    assert connect_worker_properties(env(services["connect"]))["producer.max.request.size"] == str(MAX_MESSAGE_BYTES)


# -- the connector --------------------------------------------------------------------------------


def test_connector_payload(connector_payload: dict[str, str]) -> None:
    expected = {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "plugin.name": "pgoutput",
        "exactly.once.support": "required",
        "heartbeat.interval.ms": "5000",
        "provide.transaction.metadata": "true",
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "topic.prefix": "cdc",
        "slot.name": "cdc_reconcile",
        "snapshot.mode": "initial",
        "database.hostname": "postgres",
        "signal.data.collection": "public.debezium_signal",
    }
    for key, value in expected.items():
        assert connector_payload.get(key) == value, key
    tables = connector_payload["table.include.list"].split(",")
    assert tables == ["public.customers", "public.order_lines", "public.cdc_watermark", "public.debezium_signal"]
    assert all(isinstance(value, str) for value in connector_payload.values()), "Connect wants strings"


def test_connector_payload_matches_the_embedded_stack(connector_payload: dict[str, str]) -> None:
    connect = pytest.importorskip("cdc_dev.stack.connect")
    config = pytest.importorskip("cdc_dev.stack.config")
    embedded = connect.connector_config(config.StackConfig())
    host_specific = {"database.hostname", "database.port"}
    assert set(embedded) == set(connector_payload)
    for key in set(embedded) - host_specific:
        assert connector_payload[key] == embedded[key], key


def test_init_registers_the_connector_and_the_schema(services: dict[str, dict[str, Any]]) -> None:
    init = services["init"]
    script = interpolate("\n".join(command_args(init)))
    mounted = {c["source"]: c["target"] for c in init["configs"]}
    payload_path = mounted["cdc-demo-connector"]
    assert f"--data @{payload_path}" in script
    assert "-X PUT" in script
    assert "/connectors/${CONNECTOR_NAME}" in script or f"/connectors/{CONNECTOR_NAME}/config" in script
    assert env(init).get("CONNECTOR_NAME", CONNECTOR_NAME) == CONNECTOR_NAME
    assert env(init)["CONNECT_URL"].endswith(":8083")
    assert "/config" in script
    schema_mounts = [v for v in init["volumes"] if "dev/cdc_dev/sql/demo_schema.sql" in str(v)]
    assert len(schema_mounts) == 1
    source, target, mode = str(schema_mounts[0]).split(":")
    assert source == "./dev/cdc_dev/sql/demo_schema.sql"
    assert mode == "ro"
    assert f"-f {target}" in script


def test_init_script_is_valid_bash(services: dict[str, dict[str, Any]]) -> None:
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash is not installed")
    init = services["init"]
    assert init["entrypoint"][:2] == ["/bin/bash", "-c"]
    script = interpolate("\n".join(command_args(init)))
    result = subprocess.run([bash, "-n", "-c", script], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


# -- airflow and spark ----------------------------------------------------------------------------


def test_airflow(services: dict[str, dict[str, Any]]) -> None:
    airflow = services["airflow"]
    args = command_args(airflow)
    assert args == ["standalone"] or {"api-server", "scheduler", "dag-processor"} <= set(args)
    conn = env(airflow)["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert re.fullmatch(r"postgresql(\+\w+)?://airflow:[^@]*@postgres:5432/airflow", conn), conn
    targets = {str(v).split(":")[1] for v in airflow["volumes"] if str(v).startswith("./")}
    assert targets >= {
        "/opt/airflow/dags",
        "/opt/airflow/include",
        "/opt/airflow/spark_jobs",
        "/opt/airflow/airflow.cfg",
    }
    check = healthcheck_text(airflow)
    assert "/api/v2/monitor/health" in check and ":8080" in check


def test_spark_master_and_worker(services: dict[str, dict[str, Any]]) -> None:
    master = command_args(services["spark-master"])
    assert "org.apache.spark.deploy.master.Master" in master
    assert master[master.index("--port") + 1] == "7077"
    worker = command_args(services["spark-worker"])
    assert "org.apache.spark.deploy.worker.Worker" in worker
    assert "spark://spark-master:7077" in worker


# -- ports ----------------------------------------------------------------------------------------


def test_ports_bind_localhost_and_are_configurable(services: dict[str, dict[str, Any]]) -> None:
    published = []
    for name, service in services.items():
        for port in service.get("ports", []):
            match = re.fullmatch(r"127\.0\.0\.1:\$\{(\w+):-(\d+)\}:(\d+)", str(port))
            assert match, f"{name}: {port!r} should be 127.0.0.1:${{VAR:-default}}:port"
            published.append(match.group(2))
    assert len(published) == len(set(published)), f"two services default to one host port: {published}"
    for service in ("postgres", "kafka", "connect", "airflow"):
        assert services[service].get("ports"), f"{service} is not reachable from the host"


def test_airflow_defines_what_the_dag_reads(services: dict[str, dict[str, Any]]) -> None:
    """The connection ids and variable names in cdc_reconcile.orchestration.tasks, each defined once."""
    import json

    from cdc_reconcile.orchestration import tasks as orchestration

    environment = env(services["airflow"])
    for conn_id in (orchestration.STATE_CONN, orchestration.SOURCE_CONN, orchestration.KAFKA_CONN, "spark_default"):
        document = json.loads(interpolate(environment[f"AIRFLOW_CONN_{conn_id.upper()}"]))
        assert document["conn_type"] in ("postgres", "kafka", "spark"), conn_id
    kafka = json.loads(interpolate(environment[f"AIRFLOW_CONN_{orchestration.KAFKA_CONN.upper()}"]))
    assert kafka == {"conn_type": "kafka", "extra": {"bootstrap.servers": "kafka:19092"}}
    assert environment[f"AIRFLOW_VAR_{orchestration.LAKE_ROOT_VAR.upper()}"] == "/opt/airflow/lake"
