"""Apache Kafka 4.x as one KRaft node (broker and controller), run from its Maven Central jars.

Two client listeners: PLAINTEXT (Debezium, Connect, the dev tools) and SASL_PLAINTEXT with PLAIN and
SCRAM-SHA-256 for one user (``StackConfig.kafka_sasl_user``), where the pipeline's SASL path is tested.
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
import time
import uuid
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from cdc_reconcile.kafka_client import LOGIN_MODULES, jaas_quoted

from .config import MAX_MESSAGE_BYTES, StackConfig
from .process import ManagedProcess, StackError, wait_until

LOG4J2_PROPERTIES = """\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.raft.name = org.apache.kafka.raft
logger.raft.level = WARN
logger.reflections.name = org.reflections
logger.reflections.level = ERROR
"""


def properties_value(value: str) -> str:
    """``value`` escaped for a Java ``.properties`` file (read as ISO 8859-1; backslash escapes)."""
    out = []
    for index, char in enumerate(value):
        if char == "\\":
            out.append("\\\\")
        elif char == "\n":
            out.append("\\n")
        elif char == "\r":
            out.append("\\r")
        elif char == " " and index == 0:
            out.append("\\ ")
        elif not 32 <= ord(char) <= 126:
            encoded = char.encode("utf-16-be")
            out.extend(f"\\u{encoded[i : i + 2].hex()}" for i in range(0, len(encoded), 2))
        else:
            out.append(char)
    return "".join(out)


def java_command(config: StackConfig, main_class: str, *args: str, heap: str, log4j: Path) -> list[str]:
    """A JVM on the jars fetched by ``stack/pom.xml``, logging through Log4j2 to a file."""
    if not config.kafka_libs.is_dir():
        raise StackError(
            f"kafka: jars not found in {config.kafka_libs}; run scripts/setup.sh "
            "(mvn -f stack/pom.xml generate-resources) first"
        )
    java = os.environ.get("JAVA_HOME")
    java_bin = str(Path(java) / "bin" / "java") if java else "java"
    return [
        java_bin,
        f"-Xmx{heap}",
        f"-Xms{heap}",
        "-XX:+UseG1GC",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp",
        f"{config.kafka_libs}/*",
        main_class,
        *args,
    ]


class Kafka:
    name = "kafka"

    def __init__(self, config: StackConfig) -> None:
        self.config = config
        self.home = config.run_dir / "kafka"
        self.process = ManagedProcess("kafka", config.run_dir / "pids" / "kafka.pid", config.logs_dir / "kafka.out")

    @property
    def properties_file(self) -> Path:
        return self.home / "server.properties"

    @property
    def log_file(self) -> Path:
        return self.config.logs_dir / "kafka.log"

    def server_properties(self) -> dict[str, str]:
        cfg = self.config
        controller = f"{cfg.host}:{cfg.kafka_controller_port}"
        if not re.fullmatch(r"[A-Za-z0-9_$-]+", cfg.kafka_sasl_user):
            raise StackError(
                f"kafka: SASL user {cfg.kafka_sasl_user!r} is not a JAAS word; use letters, digits, '_', '-' or '$'"
            )
        sasl = f"SASL_PLAINTEXT://{cfg.kafka_sasl_bootstrap}"
        return {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": controller,
            "listeners": f"PLAINTEXT://{cfg.bootstrap_servers},{sasl},CONTROLLER://{controller}",
            "advertised.listeners": f"PLAINTEXT://{cfg.bootstrap_servers},{sasl}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
            # the SASL listener: PLAIN checks the password in its JAAS options; SCRAM's credentials live in
            # the cluster metadata (``ensure_scram_user`` after start)
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
                f"{LOGIN_MODULES['PLAIN']} required user_{cfg.kafka_sasl_user}={jaas_quoted(cfg.kafka_sasl_password)};"
            ),
            "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": (
                f"{LOGIN_MODULES['SCRAM-SHA-256']} required;"
            ),
            "log.dirs": str(self.home / "data"),
            "num.partitions": "1",
            "auto.create.topics.enable": "true",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "5",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "5",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "log.retention.hours": "-1",
            # a row with a 10 MB value is one Debezium record of over 10 MB (Kafka's default is 1 MB)
            "message.max.bytes": str(MAX_MESSAGE_BYTES),
        }

    def write_config(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self.config.logs_dir.mkdir(parents=True, exist_ok=True)
        body = "".join(f"{key}={properties_value(value)}\n" for key, value in self.server_properties().items())
        self.properties_file.write_text(body)
        (self.home / "log4j2.properties").write_text(LOG4J2_PROPERTIES.format(log=self.log_file))

    def formatted(self) -> bool:
        return (self.home / "data" / "meta.properties").exists()

    def format_storage(self) -> None:
        if self.formatted():
            return
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        argv = java_command(
            self.config,
            "kafka.tools.StorageTool",
            "format",
            "--standalone",
            # '=' form: a URL-safe base64 id may start with '-', which argparse would read as an option
            f"--cluster-id={cluster_id}",
            "-c",
            str(self.properties_file),
            heap="256m",
            log4j=self.home / "log4j2.properties",
        )
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise StackError(f"kafka: storage format failed:\n{result.stdout}\n{result.stderr}")

    def healthy(self) -> bool:
        admin = AdminClient(
            {"bootstrap.servers": self.config.bootstrap_servers, "socket.timeout.ms": 2000, "log_level": 0}
        )
        metadata = admin.list_topics(timeout=2)
        return bool(metadata.brokers)

    def ensure_scram_user(self, timeout: float = 30) -> None:
        """Create or update the SASL user's SCRAM-SHA-256 credential (idempotent; over the plaintext listener)."""
        cfg = self.config
        admin = AdminClient({"bootstrap.servers": cfg.bootstrap_servers, "log_level": 0})
        upsert = UserScramCredentialUpsertion(
            cfg.kafka_sasl_user,
            ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
            cfg.kafka_sasl_password.encode(),
        )
        deadline = time.monotonic() + timeout
        while True:
            try:
                for future in admin.alter_user_scram_credentials([upsert], request_timeout=10).values():
                    future.result()
                return
            except KafkaException as exc:  # the metadata quorum may still be settling right after start
                if time.monotonic() >= deadline:
                    raise StackError(
                        f"kafka: could not set the SCRAM credential of {cfg.kafka_sasl_user!r}: {exc}"
                    ) from exc
                time.sleep(0.5)

    def start(self, timeout: float = 90) -> None:
        if self.process.running() and self.healthy():
            self.ensure_scram_user()
            return
        self.write_config()
        self.format_storage()
        if not self.process.running():
            argv = java_command(
                self.config,
                "kafka.Kafka",
                str(self.properties_file),
                heap=os.environ.get("CDC_KAFKA_HEAP", "512m"),
                log4j=self.home / "log4j2.properties",
            )
            self.process.start(argv)
        wait_until(
            self.healthy,
            timeout=timeout,
            what="kafka",
            log=self.log_file,
            interval=0.5,
            alive=self.process.running,
        )
        self.ensure_scram_user()

    def stop(self, timeout: float = 60) -> bool:
        return self.process.stop(timeout=timeout)

    def kill(self) -> None:
        """``kill -9`` the broker: the crash fault scenario 8 injects."""
        self.process.kill()
