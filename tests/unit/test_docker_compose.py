"""docker-compose.yaml and the runtime image's Dockerfile describe the same stack as the embedded one.

No Docker and no network: the compose file is parsed with PyYAML and checked the way Compose and the
images would read it (``${VAR:-default}`` resolved to its default, ``$$`` to ``$``, the images'
environment-variable-to-property rules applied, Airflow's environment over its airflow.cfg); the
Dockerfile is read instruction by instruction. What the DAG and the Spark jobs need (connections,
variables, jars) is derived from the code and stack/pom.xml, not copied here.
"""

from __future__ import annotations

import ast
import configparser
import fnmatch
import itertools
import json
import re
import shlex
import shutil
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yaml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
POM_FILE = ROOT / "stack" / "pom.xml"
REQUIREMENTS_FILE = ROOT / "requirements.txt"
DEV_REQUIREMENTS_FILE = ROOT / "requirements-dev.txt"
AIRFLOW_CFG = ROOT / "airflow.cfg"
PRELOADING_EXECUTOR = "cdc_reconcile.orchestration.executor.PreloadingLocalExecutor"
DAG_FILE = ROOT / "dags" / "cdc_reconciliation.py"
PRODUCT = ROOT / "include" / "cdc_reconcile"

AIRFLOW_SERVICES = {"airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-worker"}
LONG_RUNNING = {"postgres", "kafka", "connect", "redis", "spark-master", "spark-worker"} | AIRFLOW_SERVICES
ONE_SHOT = {"init", "airflow-init"}
CONNECTOR_NAME = "cdc-demo"
# Distributions that are test or lint tools wherever they appear: never in the runtime requirements.
TEST_TOOLS = re.compile(r"^(pytest(-.+)?|selenium|ruff|import-linter|aiosmtpd|mypy|coverage|hypothesis|tox)$")
# The Spark data sources the product's code names, and the jar of stack/pom.xml's spark-jars that
# provides each (groupId, artifactId pattern): without it the job fails with "Failed to find data
# source: kafka", "ClassNotFoundException: org.postgresql.Driver" or a missing Delta class.
DATA_SOURCE_JARS = {
    'format("kafka")': ("org.apache.spark", r"spark-sql-kafka-0-10_2\.13"),
    "org.postgresql.Driver": ("org.postgresql", r"postgresql"),
    "io.delta.sql.DeltaSparkSessionExtension": ("io.delta", r"delta-spark_\d+\.\d+_2\.13"),
}

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
def pom() -> ET.Element:
    return ET.parse(POM_FILE).getroot()


@pytest.fixture(scope="module")
def pom_properties(pom: ET.Element) -> dict[str, str]:
    props = pom.find("m:properties", POM_NS)
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


def requirements(path: Path) -> dict[str, str]:
    """A requirements file's own pins, ``{normalized name: version}`` (``-r`` lines are not followed)."""
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==(\S+)", line)
        assert match, f"{path.name}: {line!r} is not pinned with =="
        pins[re.sub(r"[-_.]+", "-", match.group(1)).lower()] = match.group(3)
    return pins


def requirement_pin(name: str) -> str:
    pin = requirements(REQUIREMENTS_FILE).get(re.sub(r"[-_.]+", "-", name).lower())
    assert pin, f"{name} is not pinned in requirements.txt"
    return pin


# -- the Dockerfile -------------------------------------------------------------------------------


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [argument for instruction, argument in self.instructions if instruction == keyword]


@dataclass
class Dockerfile:
    global_args: dict[str, str | None]
    stages: list[Stage]

    def stage(self, name: str) -> Stage:
        return next(stage for stage in self.stages if stage.name == name)

    @property
    def final(self) -> Stage:
        return self.stages[-1]


def parse_dockerfile(text: str) -> Dockerfile:
    """Instructions (continuation lines joined, comments dropped) grouped by stage."""
    lines, pending = [], ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        lines.append(pending + line)
        pending = ""
    global_args: dict[str, str | None] = {}
    stages: list[Stage] = []
    for line in lines:
        keyword, _, argument = line.strip().partition(" ")
        keyword, argument = keyword.upper(), " ".join(argument.split())
        if keyword == "FROM":
            parts = argument.split()
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(base=parts[0], name=name))
        elif not stages:
            assert keyword == "ARG", f"only ARG may come before the first FROM, not {keyword}"
            arg, _, default = argument.partition("=")
            global_args[arg] = default or None
        else:
            stages[-1].instructions.append((keyword, argument))
    return Dockerfile(global_args, stages)


@pytest.fixture(scope="module")
def dockerfile() -> Dockerfile:
    return parse_dockerfile(DOCKERFILE.read_text())


def copies(stage: Stage) -> list[tuple[str | None, list[str], str]]:
    """Each COPY of ``stage`` as (source stage or None for the build context, sources, destination)."""
    found = []
    for argument in stage.all("COPY"):
        words = shlex.split(argument)
        flags = dict(word[2:].split("=", 1) for word in words if word.startswith("--"))
        paths = [word for word in words if not word.startswith("--")]
        found.append((flags.get("from"), paths[:-1], paths[-1]))
    return found


def image_env(stage: Stage) -> dict[str, str]:
    """The ENV settings of a stage (``ENV K=V [K=V ...]`` form)."""
    settings = {}
    for argument in stage.all("ENV"):
        for word in shlex.split(argument):
            key, _, value = word.partition("=")
            settings[key] = value
    return settings


def dockerignored(path: str) -> bool:
    """Whether .dockerignore keeps ``path`` (relative to the context) out of the build context.

    Docker's rule: patterns in order, the last one that matches the path or one of its parent folders
    wins, ``!`` re-includes.
    """
    parts = Path(path).parts
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for line in DOCKERIGNORE.read_text().splitlines():
        pattern = line.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negated = pattern.startswith("!")
        pattern = pattern.lstrip("!").strip("/")
        if any(fnmatch.fnmatchcase(prefix, pattern) for prefix in prefixes):
            excluded = not negated
    return excluded


# -- stack/pom.xml --------------------------------------------------------------------------------

POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def pom_execution(pom: ET.Element, execution_id: str) -> ET.Element:
    for execution in pom.iterfind(".//m:execution", POM_NS):
        if execution.findtext("m:id", namespaces=POM_NS) == execution_id:
            return execution
    raise AssertionError(f"stack/pom.xml has no execution {execution_id!r}")


def spark_jar_artifacts(pom: ET.Element, properties: dict[str, str]) -> list[tuple[str, str, str]]:
    """(groupId, artifactId, version) of every jar the spark-jars execution copies."""

    def text(item: ET.Element, tag: str) -> str:
        value = item.findtext(f"m:{tag}", namespaces=POM_NS) or ""
        return re.sub(r"\$\{([^}]+)\}", lambda m: properties[m.group(1)], value.strip())

    items = pom_execution(pom, "spark-jars").iterfind(".//m:artifactItem", POM_NS)
    return [(text(item, "groupId"), text(item, "artifactId"), text(item, "version")) for item in items]


# -- Airflow's configuration ----------------------------------------------------------------------


def airflow_setting(service: dict[str, Any], section: str, key: str) -> str | None:
    """What Airflow in ``service`` reads for ``[section] key``: AIRFLOW__SECTION__KEY from the
    environment first, else the airflow.cfg the image holds (the repo's, see test_image_holds_the_dag_and_cfg)."""
    environment = env(service)
    name = f"AIRFLOW__{section.upper()}__{key.upper()}"
    if name in environment:
        return environment[name]
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(AIRFLOW_CFG)
    return cfg.get(section, key, fallback=None)


def airflow_command(service: dict[str, Any]) -> list[str]:
    """The Airflow sub-command a service runs (the image's entrypoint prepends ``airflow``)."""
    args = command_args(service)
    return args[1:] if args[:1] == ["airflow"] else args


def task_runners(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The services where tasks (and so the Spark drivers) run: the Celery workers, or the scheduler
    with a local executor."""
    executor = airflow_setting(services["airflow-scheduler"], "core", "executor")
    if executor == "CeleryExecutor":
        return {n: s for n, s in services.items() if airflow_command(s)[:2] == ["celery", "worker"]}
    assert executor in ("LocalExecutor", PRELOADING_EXECUTOR), f"unexpected executor {executor!r}"
    return {n: s for n, s in services.items() if airflow_command(s)[:1] == ["scheduler"]}


def spark_workers(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {n: s for n, s in services.items() if "org.apache.spark.deploy.worker.Worker" in command_args(s)}


def volume_mounts(service: dict[str, Any]) -> dict[str, str]:
    """Named-volume mounts of a service, ``{target: volume}`` (short syntax)."""
    mounts = {}
    for volume in service.get("volumes") or []:
        source, target = str(volume).split(":")[:2]
        if not source.startswith((".", "/")):
            mounts[target] = source
    return mounts


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
    for name in sorted(ONE_SHOT):
        assert str(services[name].get("restart", "no")) == "no", name
        assert "healthcheck" not in services[name], name


def test_depends_on_waits_for_health(services: dict[str, dict[str, Any]]) -> None:
    airflow = {
        "postgres": "service_healthy",
        "redis": "service_healthy",
        "airflow-init": "service_completed_successfully",
    }
    expected = {
        "connect": {"kafka": "service_healthy", "postgres": "service_healthy"},
        "init": {"connect": "service_healthy", "postgres": "service_healthy"},
        "airflow-init": {"postgres": "service_healthy"},
        **{name: airflow for name in AIRFLOW_SERVICES},
        "airflow-worker": {
            **airflow,
            "airflow-apiserver": "service_healthy",
            "kafka": "service_healthy",
            "init": "service_completed_successfully",
            "spark-master": "service_healthy",
        },
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
    assert set(images) >= {"postgres", "kafka", "debezium-connect", "airflow", "spark", "redis", "maven"}
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
                assert default not in DOCKERFILE.read_text(), f"version {default} is pinned in the Dockerfile too"


def test_services_use_the_pinned_images(compose: dict[str, Any], services: dict[str, dict[str, Any]]) -> None:
    pinned = set(compose["x-versions"].values())
    runtime = compose["x-runtime"]
    for name, service in services.items():
        image = service["image"]
        if image == runtime["image"]:
            assert service.get("build") == runtime["build"], f"{name}: runtime image without its build"
        else:
            assert image in pinned, f"{name}: image {image!r} is not one of x-versions"
    for arg, value in runtime["build"]["args"].items():
        assert value in pinned, f"build argument {arg}={value!r} is not one of x-versions"


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
    maven = interpolate(images["maven"])
    assert maven.startswith("maven:") and maven.endswith("-eclipse-temurin-17"), maven


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


@pytest.mark.parametrize("name", ["init", "airflow-init"])
def test_one_shot_scripts_are_valid_bash(services: dict[str, dict[str, Any]], name: str) -> None:
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash is not installed")
    service = services[name]
    assert service["entrypoint"][:2] == ["/bin/bash", "-c"]
    script = interpolate("\n".join(command_args(service)))
    result = subprocess.run([bash, "-n", "-c", script], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


# -- airflow ----------------------------------------------------------------------------------------


def test_airflow_runs_as_separate_services(services: dict[str, dict[str, Any]]) -> None:
    """As in Airflow's own compose file: one service per component, none in `standalone` mode."""
    commands = {name: airflow_command(services[name]) for name in AIRFLOW_SERVICES}
    assert commands == {
        "airflow-apiserver": ["api-server"],
        "airflow-scheduler": ["scheduler"],
        "airflow-dag-processor": ["dag-processor"],
        "airflow-worker": ["celery", "worker"],
    }
    for name, service in services.items():
        assert "standalone" not in command_args(service), f"{name} runs Airflow's development mode"
    images = {services[name]["image"] for name in AIRFLOW_SERVICES | {"airflow-init"}}
    assert len(images) == 1, f"the Airflow services run different images: {images}"


def test_airflow_healthchecks(services: dict[str, dict[str, Any]]) -> None:
    check = healthcheck_text(services["airflow-apiserver"])
    assert "/api/v2/monitor/health" in check and ":8080" in check
    scheduler = services["airflow-scheduler"]
    assert airflow_setting(scheduler, "scheduler", "enable_health_check") == "true"
    assert ":8974/health" in healthcheck_text(scheduler)
    assert "--job-type DagProcessorJob" in healthcheck_text(services["airflow-dag-processor"])
    worker = healthcheck_text(services["airflow-worker"])
    assert "celery" in worker and "inspect ping" in worker and "celery@${HOSTNAME}" in interpolate(worker)


def test_airflow_shares_one_configuration(services: dict[str, dict[str, Any]]) -> None:
    """Every Airflow process reads the same database, executor, broker and keys (a task's token, signed
    by the scheduler, is checked by the API server)."""
    shared = [
        ("database", "sql_alchemy_conn"),
        ("core", "executor"),
        ("core", "execution_api_server_url"),
        ("api_auth", "jwt_secret"),
        ("api", "secret_key"),
        ("core", "fernet_key"),
        ("celery", "broker_url"),
    ]
    for section, key in shared:
        values = {airflow_setting(services[name], section, key) for name in AIRFLOW_SERVICES | {"airflow-init"}}
        assert len(values) == 1, f"[{section}] {key} differs between the Airflow services: {values}"
    scheduler = services["airflow-scheduler"]
    conn = airflow_setting(scheduler, "database", "sql_alchemy_conn") or ""
    assert re.fullmatch(r"postgresql(\+\w+)?://airflow:[^@]*@postgres:5432/airflow", conn), conn
    assert airflow_setting(scheduler, "core", "execution_api_server_url") == "http://airflow-apiserver:8080/execution/"
    assert airflow_setting(scheduler, "api_auth", "jwt_secret"), "every process would draw its own JWT secret"
    if airflow_setting(scheduler, "core", "executor") == "CeleryExecutor":
        broker = airflow_setting(scheduler, "celery", "broker_url") or ""
        assert re.fullmatch(r"redis://(:[^@]*@)?redis:6379/\d+", broker), broker


def test_api_server_binds_every_interface(services: dict[str, dict[str, Any]]) -> None:
    """The published port reaches the API server only if it listens on 0.0.0.0 inside its container;
    the repo's airflow.cfg (127.0.0.1, for the embedded stack) must be overridden."""
    api = services["airflow-apiserver"]
    assert airflow_setting(api, "api", "host") == "0.0.0.0"
    args = command_args(api)
    assert not {"-H", "--host"} & set(args), "the command line would override the host"
    port = airflow_setting(api, "api", "port")
    assert any(str(p).endswith(f":{port}") for p in api["ports"]), f"the API server's port {port} is not published"


def test_dags_are_paused_at_creation(services: dict[str, dict[str, Any]]) -> None:
    for name in sorted(AIRFLOW_SERVICES | {"airflow-init"}):
        assert airflow_setting(services[name], "core", "dags_are_paused_at_creation") == "true", name
        assert airflow_setting(services[name], "core", "load_examples") in ("false", "False"), name


def test_admin_user_is_created_by_airflow_init(services: dict[str, dict[str, Any]]) -> None:
    """SimpleAuthManager: the user list in the environment, the password in the file airflow-init writes
    to a volume the API server mounts writable (the manager opens it for writing)."""
    api = services["airflow-apiserver"]
    init = services["airflow-init"]
    assert (airflow_setting(api, "core", "auth_manager") or "").endswith("SimpleAuthManager")
    users = airflow_setting(api, "core", "simple_auth_manager_users") or ""
    assert re.fullmatch(r"[^:,]+:admin", users), users
    passwords = airflow_setting(api, "core", "simple_auth_manager_passwords_file") or ""
    folder = str(Path(passwords).parent)
    assert volume_mounts(api).get(folder), f"the API server does not mount {folder}"
    assert volume_mounts(api).get(folder) == volume_mounts(init).get(folder), (
        f"{folder} is another volume in airflow-init"
    )
    assert not any(str(v).endswith(f"{folder}:ro") for v in api["volumes"])
    script = interpolate("\n".join(command_args(init)))
    assert f"> {passwords}" in script
    assert "airflow db migrate" in script
    assert str(init.get("user")).startswith("0:"), "airflow-init gives the volumes to the Airflow user as root"


def test_a_triggerer_only_where_needed(services: dict[str, dict[str, Any]]) -> None:
    """Airflow runs a deadline's AsyncCallback and deferred tasks in the triggerer, a SyncCallback on the
    executor: the compose file has a triggerer exactly when the DAG needs one."""
    from airflow.sdk import AsyncCallback

    from cdc_reconcile.orchestration import alerts

    deadline = alerts.run_deadline()
    needs = isinstance(getattr(deadline, "callback", None), AsyncCallback) or "deferrable=True" in DAG_FILE.read_text()
    triggerers = [name for name, s in services.items() if airflow_command(s)[:1] == ["triggerer"]]
    assert bool(triggerers) == needs, f"triggerer needed: {needs}, services: {triggerers}"


# -- what the DAG reads ---------------------------------------------------------------------------


def dag_reads() -> tuple[set[str], set[str], set[str], set[str]]:
    """(connections, variables, optional connections, optional variables) the DAG reads, from the
    names cdc_reconcile.orchestration.tasks defines (``*_CONN``, ``*_VAR``) and the DAG file's templates."""
    from cdc_reconcile.orchestration import tasks as orchestration

    constants = {name: value for name, value in vars(orchestration).items() if isinstance(value, str)}
    connections = {value for name, value in constants.items() if name.endswith("_CONN")}
    variables_ = {value for name, value in constants.items() if name.endswith("_VAR")}
    source = DAG_FILE.read_text()
    connections |= set(re.findall(r"\bconn\.(\w+)", source))
    variables_ |= set(re.findall(r"\bvar\.value\.(?!get\b)(\w+)", source))
    optional_variables = set(re.findall(r"\bvar\.value\.get\(\s*['\"](\w+)['\"]", source))
    variables_ |= optional_variables
    # cdc_alerts may be missing: alerts.deliver then logs the alert and says which connection to add.
    optional_connections = {orchestration.ALERTS_CONN}
    assert {orchestration.STATE_CONN, orchestration.SPARK_CONN, orchestration.LAKE_ROOT_VAR} <= connections | variables_
    return connections, variables_, optional_connections, optional_variables


def test_task_runners_define_every_connection_and_variable_the_dag_reads(
    services: dict[str, dict[str, Any]],
) -> None:
    connections, variables_, optional_connections, optional_variables = dag_reads()
    runners = task_runners(services)
    assert runners, "no service runs the tasks"
    for name, service in runners.items():
        environment = env(service)
        for conn_id in sorted(connections):
            key = f"AIRFLOW_CONN_{conn_id.upper()}"
            if key not in environment:
                assert conn_id in optional_connections, f"{name}: connection {conn_id} ({key}) is not defined"
                continue
            document = json.loads(environment[key])
            assert document.get("conn_type"), f"{name}: {key} has no conn_type"
        for variable in sorted(variables_):
            key = f"AIRFLOW_VAR_{variable.upper()}"
            assert key in environment or variable in optional_variables, f"{name}: variable {variable} is not defined"
            if key in environment:
                assert environment[key], f"{name}: {key} is empty"


def test_spark_default_is_the_spark_master(services: dict[str, dict[str, Any]]) -> None:
    """spark:// by default, in client mode (the driver in the task's container), local[*] on request."""
    from cdc_reconcile.orchestration import tasks as orchestration

    master = command_args(services["spark-master"])
    port = master[master.index("--port") + 1]
    for name, service in task_runners(services).items():
        raw_value = str(service["environment"][f"AIRFLOW_CONN_{orchestration.SPARK_CONN.upper()}"])
        document = json.loads(interpolate(raw_value))
        assert document["conn_type"] == "spark"
        assert document["host"] == f"spark://spark-master:{port}", name
        assert document.get("extra", {}).get("deploy-mode", "client") == "client"
        overrides = [(var, default) for var, default in variables(raw_value) if default == document["host"]]
        assert overrides, f"{name}: the master cannot be overridden (e.g. with local[*]) from the environment"


def test_the_lake_is_shared_at_the_same_path(services: dict[str, dict[str, Any]], compose: dict[str, Any]) -> None:
    """Spark drivers (with the tasks) and executors (on the Spark worker) write the same Delta tables."""
    from cdc_reconcile.orchestration import tasks as orchestration

    runners = task_runners(services)
    workers = spark_workers(services)
    assert runners and workers
    for variable in (orchestration.LAKE_ROOT_VAR, orchestration.GX_ROOT_VAR):
        paths = {env(s).get(f"AIRFLOW_VAR_{variable.upper()}") for s in runners.values()}
        assert len(paths) == 1, f"{variable} differs between the task runners: {paths}"
        (path,) = paths
        if path is None:
            continue
        assert path.startswith("/"), f"{variable}={path}: a local path, so a volume must hold it"
        volumes = {name: volume_mounts(s).get(path) for name, s in {**runners, **workers}.items()}
        assert None not in volumes.values(), f"{variable} ({path}) is not mounted in: {volumes}"
        assert len(set(volumes.values())) == 1, f"{path} is a different volume per service: {volumes}"
        assert set(volumes.values()) <= set(compose["volumes"])


def test_spark_master_and_worker(services: dict[str, dict[str, Any]]) -> None:
    master = command_args(services["spark-master"])
    assert "org.apache.spark.deploy.master.Master" in master
    assert master[master.index("--port") + 1] == "7077"
    worker = command_args(services["spark-worker"])
    assert "org.apache.spark.deploy.worker.Worker" in worker
    assert "spark://spark-master:7077" in worker
    assert services["spark-worker"]["image"] == services["airflow-worker"]["image"], (
        "executors and drivers need the same Python and the product"
    )


def test_spark_worker_command_is_valid_bash(services: dict[str, dict[str, Any]]) -> None:
    """`bash -c 'exec "$@"' name args...` after the image's entrypoint runs exactly the worker's args."""
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash is not installed")
    args = [interpolate(arg) for arg in command_args(services["spark-worker"])]
    assert args[:2] == ["bash", "-c"]
    probe = [bash, "-c", args[2].replace("exec ", "printf '%s\\n' "), *args[3:]]
    result = subprocess.run(probe, capture_output=True, text=True, check=True)
    assert result.stdout.splitlines() == args[4:]


# -- the runtime image ----------------------------------------------------------------------------


def test_image_is_built_from_the_pinned_images(dockerfile: Dockerfile, compose: dict[str, Any]) -> None:
    build = compose["x-runtime"]["build"]
    assert (ROOT / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE
    names = set()
    for stage in dockerfile.stages:
        match = re.fullmatch(r"\$\{?(\w+)\}?", stage.base)
        assert match or stage.base in names, f"FROM {stage.base}: neither a build argument nor an earlier stage"
        if match:
            arg = match.group(1)
            assert arg in dockerfile.global_args, f"{arg} is not declared before the first FROM"
            assert dockerfile.global_args[arg] is None, f"{arg} has a default: the pin belongs in x-versions"
            assert arg in build["args"], f"docker-compose.yaml does not pass {arg}"
        if stage.name:
            names.add(stage.name)
    assert interpolate(build["args"]["AIRFLOW_IMAGE"]) == interpolate(compose["x-versions"]["airflow"])
    runtime_base = dockerfile.final.base
    assert runtime_base in ("${AIRFLOW_IMAGE}", "$AIRFLOW_IMAGE"), runtime_base


def test_image_holds_every_jar_the_spark_jobs_need(
    dockerfile: Dockerfile, pom: ET.Element, pom_properties: dict[str, str]
) -> None:
    """The data sources the product's code names have their jars in stack/pom.xml's spark-jars, the
    image build runs that execution and CDC_SPARK_JARS names the folder it copies them to."""
    artifacts = spark_jar_artifacts(pom, pom_properties)
    code = "\n".join(path.read_text() for path in PRODUCT.rglob("*.py"))
    used = [marker for marker in DATA_SOURCE_JARS if marker in code]
    assert len(used) == len(DATA_SOURCE_JARS), f"the code no longer names {set(DATA_SOURCE_JARS) - set(used)}"
    for marker in used:
        group, pattern = DATA_SOURCE_JARS[marker]
        assert any(g == group and re.fullmatch(pattern, a) for g, a, _ in artifacts), f"no jar for {marker}"
    pyspark = requirement_pin("pyspark")
    versions = {artifact: version for _, artifact, version in artifacts}
    assert versions["spark-sql-kafka-0-10_2.13"] == pyspark, "Spark's Kafka source must match pyspark exactly"
    delta = next(a for a in versions if a.startswith("delta-spark_"))
    assert delta.split("_")[1] == ".".join(pyspark.split(".")[:2]), f"{delta} is for another Spark line than {pyspark}"

    # The build: a stage runs the spark-jars execution into -Dstack.cache=DIR ...
    output = pom_execution(pom, "spark-jars").findtext(".//m:outputDirectory", namespaces=POM_NS) or ""
    produced = {}
    for stage in dockerfile.stages:
        for run in stage.all("RUN"):
            if "stack/pom.xml" in run and re.search(r"(dependency:copy@spark-jars|generate-resources)\b", run):
                cache = re.search(r"-Dstack\.cache=(\S+)", run)
                assert cache, f"{run}: no -Dstack.cache"
                produced[stage.name] = output.replace("${stack.cache}", cache.group(1))
        if stage.name in produced:
            pom_copies = [src for origin, sources, _ in copies(stage) if origin is None for src in sources]
            assert "stack/pom.xml" in pom_copies, f"{stage.name} runs Maven without stack/pom.xml"
    assert produced, "no stage of the Dockerfile runs stack/pom.xml's spark-jars"
    # ... and the runtime image copies that folder where CDC_SPARK_JARS points.
    from cdc_reconcile.spark import JARS_ENV

    target = image_env(dockerfile.final).get(JARS_ENV)
    assert target, f"the runtime image does not set {JARS_ENV}"
    copied = [
        destination
        for source_stage, sources, destination in copies(dockerfile.final)
        if source_stage in produced and any(s.rstrip("/") == produced[source_stage] for s in sources)
    ]
    assert [c.rstrip("/") for c in copied] == [target.rstrip("/")], f"{JARS_ENV}={target}, jars copied to {copied}"


def test_image_installs_the_product_and_the_runtime_requirements_only(dockerfile: Dockerfile) -> None:
    final = dockerfile.final
    context_files = {Path(src).name for stage, sources, _ in copies(final) if stage is None for src in sources}
    assert REQUIREMENTS_FILE.name in context_files and "constraints.txt" in context_files
    assert DEV_REQUIREMENTS_FILE.name not in context_files
    installs = [run for run in final.all("RUN") if re.search(r"\bpip install\b", run)]
    requirement_files = [Path(f).name for run in installs for f in re.findall(r"-r\s+(\S+)", run)]
    assert requirement_files == [REQUIREMENTS_FILE.name], requirement_files
    assert all("-c " in run for run in installs if "-r " in run), "the requirements install ignores constraints.txt"
    assert any(re.search(r"--no-deps\s+\S*\.whl", run) for run in installs), "the product's wheel is not installed"
    for stage in dockerfile.stages:
        for run in stage.all("RUN"):
            assert DEV_REQUIREMENTS_FILE.name not in run, f"{stage.name}: {run}"


def test_image_holds_the_dag_and_cfg(dockerfile: Dockerfile) -> None:
    destinations = {
        Path(src).name.rstrip("/") or src: dest
        for stage, sources, dest in copies(dockerfile.final)
        if stage is None
        for src in sources
    }
    assert destinations.get("airflow.cfg") == "/opt/airflow/airflow.cfg"
    assert destinations.get("dags", "").rstrip("/") == "/opt/airflow/dags"


def test_build_context_holds_what_the_dockerfile_copies(dockerfile: Dockerfile) -> None:
    sources = [
        src for stage in dockerfile.stages for origin, paths, _ in copies(stage) if origin is None for src in paths
    ]
    assert sources
    for source in sources:
        assert (ROOT / source).exists(), f"COPY {source}: no such file"
        assert not dockerignored(source.rstrip("/")), f"COPY {source}: .dockerignore leaves it out"
    for heavy in (".venv", ".cache", ".run", ".git", "tests"):
        assert dockerignored(heavy), f".dockerignore sends {heavy} to the build"


# -- requirements ---------------------------------------------------------------------------------


def test_runtime_requirements_hold_no_test_tools() -> None:
    runtime = requirements(REQUIREMENTS_FILE)
    dev = requirements(DEV_REQUIREMENTS_FILE)
    assert not [name for name in runtime if TEST_TOOLS.match(name)], "test tools in requirements.txt"
    assert set(runtime).isdisjoint(dev), "requirements-dev.txt pins again what requirements.txt pins"
    assert {"pytest", "ruff", "selenium", "import-linter"} <= set(dev)
    assert f"-r {REQUIREMENTS_FILE.name}" in DEV_REQUIREMENTS_FILE.read_text().splitlines()
    constraints = requirements(ROOT / "constraints.txt")
    for name, version in {**runtime, **dev}.items():
        assert constraints.get(name) == version, f"{name}=={version} differs from constraints.txt"


def test_the_product_imports_no_development_requirement() -> None:
    """What requirements-dev.txt adds is not needed at run time: neither the product nor the DAG imports it."""
    from importlib.metadata import packages_distributions

    dev_only = set(requirements(DEV_REQUIREMENTS_FILE))
    distributions = packages_distributions()
    for path in [*PRODUCT.rglob("*.py"), DAG_FILE]:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                for dist in distributions.get(module.split(".")[0], []):
                    name = re.sub(r"[-_.]+", "-", dist).lower()
                    assert name not in dev_only, (
                        f"{path.relative_to(ROOT)} imports {module} ({dist}), a dev requirement"
                    )


def test_setup_installs_the_development_requirements() -> None:
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert f'-r "$ROOT/{DEV_REQUIREMENTS_FILE.name}"' in setup
    stamp = setup.split("py_stamp=", 1)[1].split("sha256sum", 1)[0]
    for name in (REQUIREMENTS_FILE.name, DEV_REQUIREMENTS_FILE.name, "constraints.txt"):
        assert name in stamp, f"scripts/setup.sh's stamp does not cover {name}"


# -- ports ----------------------------------------------------------------------------------------


def test_ports_bind_localhost_and_are_configurable(services: dict[str, dict[str, Any]]) -> None:
    published = []
    for name, service in services.items():
        for port in service.get("ports", []):
            match = re.fullmatch(r"127\.0\.0\.1:\$\{(\w+):-(\d+)\}:(\d+)", str(port))
            assert match, f"{name}: {port!r} should be 127.0.0.1:${{VAR:-default}}:port"
            published.append(match.group(2))
    assert len(published) == len(set(published)), f"two services default to one host port: {published}"
    for service in ("postgres", "kafka", "connect", "airflow-apiserver"):
        assert services[service].get("ports"), f"{service} is not reachable from the host"


# -- validity -------------------------------------------------------------------------------------


def test_docker_compose_config_accepts_the_file() -> None:
    """Compose's own loader (schema, interpolation, merge keys), where a Docker client with the compose
    plugin is installed; it needs no engine. Elsewhere the YAML parse above is the check."""
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker client")
    probe = subprocess.run([docker, "compose", "version"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        pytest.skip("the docker client has no compose plugin")
    result = subprocess.run(
        [docker, "compose", "-f", str(COMPOSE_FILE), "config", "--quiet"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
