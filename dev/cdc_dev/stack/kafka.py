"""Apache Kafka 4.x as one KRaft node (broker and controller), run from its Maven Central jars."""

from __future__ import annotations

import base64
import os
import subprocess
import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient

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
        return {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": controller,
            "listeners": f"PLAINTEXT://{cfg.bootstrap_servers},CONTROLLER://{controller}",
            "advertised.listeners": f"PLAINTEXT://{cfg.bootstrap_servers}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
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
        body = "".join(f"{key}={value}\n" for key, value in self.server_properties().items())
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

    def start(self, timeout: float = 90) -> None:
        if self.process.running() and self.healthy():
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

    def stop(self, timeout: float = 60) -> bool:
        return self.process.stop(timeout=timeout)

    def kill(self) -> None:
        """``kill -9`` the broker: the crash fault scenario 8 injects."""
        self.process.kill()
