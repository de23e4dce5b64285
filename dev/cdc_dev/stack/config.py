"""Where the embedded stack lives and which ports it uses.

Every value comes from the environment (``CDC_*``) with a default, so two checkouts can run side by
side and a user can move any port that is already taken.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
# The largest Kafka record the stack accepts (broker and Connect producer): a row with a 10 MB value
# is one Debezium record of over 10 MB, which Kafka's 1 MB default would refuse and stop the connector.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ValueError(f"{name}={raw!r} is not a port number; set it to an integer such as {default}") from exc
    if not 1 <= value <= 65535:
        raise ValueError(f"{name}={value} is outside 1..65535; choose a free TCP port")
    return value


def _env_count(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"{name}={raw!r} is not a positive whole number; set it to one such as {default}")
    return int(raw)


def _env_path(name: str, default: Path) -> Path:
    raw = os.environ.get(name)
    return Path(raw).resolve() if raw else default


@dataclass(frozen=True)
class StackConfig:
    """Ports, folders and names of one embedded stack."""

    run_dir: Path = field(default_factory=lambda: _env_path("CDC_RUN_DIR", REPO_ROOT / ".run"))
    cache_dir: Path = field(default_factory=lambda: _env_path("CDC_CACHE_DIR", REPO_ROOT / ".cache"))
    pg_port: int = field(default_factory=lambda: _env_int("CDC_PG_PORT", 25432))
    kafka_port: int = field(default_factory=lambda: _env_int("CDC_KAFKA_PORT", 29092))
    kafka_controller_port: int = field(default_factory=lambda: _env_int("CDC_KAFKA_CONTROLLER_PORT", 29093))
    # a second client listener, SASL_PLAINTEXT (PLAIN and SCRAM-SHA-256), for the pipeline's SASL path;
    # Debezium, Connect and the dev tools keep the plaintext one
    kafka_sasl_port: int = field(default_factory=lambda: _env_int("CDC_KAFKA_SASL_PORT", 29094))
    connect_port: int = field(default_factory=lambda: _env_int("CDC_CONNECT_PORT", 28083))
    airflow_port: int = field(default_factory=lambda: _env_int("CDC_AIRFLOW_PORT", 28080))
    airflow_dags_folder: Path = field(default_factory=lambda: _env_path("CDC_AIRFLOW_DAGS_FOLDER", REPO_ROOT / "dags"))
    airflow_password: str = field(default_factory=lambda: os.environ.get("CDC_AIRFLOW_PASSWORD") or "admin")
    # HDFS and the Spark standalone cluster (``up --with-cluster``): Hadoop's and Spark's default ports
    # moved into the stack's ranges, so a system HDFS or Spark on 8020/9870/7077/8080 is left alone
    hdfs_namenode_port: int = field(default_factory=lambda: _env_int("CDC_HDFS_NAMENODE_PORT", 29020))
    hdfs_namenode_http_port: int = field(default_factory=lambda: _env_int("CDC_HDFS_NAMENODE_HTTP_PORT", 29870))
    hdfs_datanode_port: int = field(default_factory=lambda: _env_int("CDC_HDFS_DATANODE_PORT", 29866))
    hdfs_datanode_http_port: int = field(default_factory=lambda: _env_int("CDC_HDFS_DATANODE_HTTP_PORT", 29864))
    hdfs_datanode_ipc_port: int = field(default_factory=lambda: _env_int("CDC_HDFS_DATANODE_IPC_PORT", 29867))
    spark_master_port: int = field(default_factory=lambda: _env_int("CDC_SPARK_MASTER_PORT", 27077))
    spark_master_ui_port: int = field(default_factory=lambda: _env_int("CDC_SPARK_MASTER_UI_PORT", 28480))
    spark_worker_ui_port: int = field(default_factory=lambda: _env_int("CDC_SPARK_WORKER_UI_PORT", 28481))
    # the worker offers both cores and 4 GiB to executors: on 2 cores / 24 GiB that leaves room for the
    # other services, a driver and Airflow
    spark_worker_cores: int = field(default_factory=lambda: _env_count("CDC_SPARK_WORKER_CORES", 2))
    spark_worker_memory: str = field(default_factory=lambda: os.environ.get("CDC_SPARK_WORKER_MEMORY") or "4g")
    # A Spark Connect server, started with Airflow, that the DAG's Spark tasks run on (spark_default is a
    # spark_connect connection); gRPC and its Spark UI. CDC_SPARK_CONNECT=off: each Spark task
    # spark-submits a driver of its own (a JVM per task: a demo-size run took 3-4x as long)
    spark_connect_port: int = field(default_factory=lambda: _env_int("CDC_SPARK_CONNECT_PORT", 28502))
    spark_connect_ui_port: int = field(default_factory=lambda: _env_int("CDC_SPARK_CONNECT_UI_PORT", 28540))
    # the stack's Data Docs site over HTTP (alerts link its pages there)
    data_docs_port: int = field(default_factory=lambda: _env_int("CDC_DATA_DOCS_PORT", 28590))
    spark_connect_enabled: bool = field(default_factory=lambda: os.environ.get("CDC_SPARK_CONNECT", "on") != "off")
    # the server's heap: its resident size is the heap plus about 1 GiB (JIT code, metaspace, buffers); a 3g
    # heap put the 1M-row hourly run at 4,161 MiB, over the 4 GiB the run's JVMs may take
    spark_connect_memory: str = field(default_factory=lambda: os.environ.get("CDC_SPARK_CONNECT_MEMORY") or "2560m")
    host: str = "127.0.0.1"
    pg_database: str = "cdc_demo"
    # the pipeline's run state lives in a database of its own, as it may on users' hosts
    state_database: str = "cdc_state"
    pg_user: str = "cdc"
    pg_password: str = "cdc"
    # the SASL listener's one user (PLAIN and SCRAM-SHA-256); the name must be a JAAS word (letters,
    # digits, '_', '-', '$'), the password may hold anything
    kafka_sasl_user: str = "cdc"
    kafka_sasl_password: str = field(default_factory=lambda: os.environ.get("CDC_KAFKA_SASL_PASSWORD") or "cdc-kafka")
    connector_name: str = "cdc-demo"
    topic_prefix: str = "cdc"
    slot_name: str = "cdc_reconcile"
    publication_name: str = "cdc_reconcile"
    captured_tables: tuple[str, ...] = ("public.customers", "public.order_lines", "public.cdc_watermark")
    # Debezium's signal table (``signal.data.collection``), captured with the tables: ``cdc-tables add``
    # asks for an incremental snapshot of a new table by inserting a row into it
    signal_table: str = "public.debezium_signal"
    airflow_user: str = "admin"
    airflow_db: str = "airflow"
    airflow_db_user: str = "airflow"
    airflow_db_password: str = "airflow"

    @property
    def logs_dir(self) -> Path:
        return self.run_dir / "logs"

    @property
    def spark_jars_dir(self) -> Path:
        """The Spark Kafka source and JDBC driver jars scripts/setup.sh fetched (``CDC_SPARK_JARS`` for the jobs)."""
        return self.cache_dir / "stack" / "spark-jars"

    @property
    def data_docs_assets_dir(self) -> Path:
        """The Data Docs' CDN files scripts/setup.sh fetched (``CDC_DATA_DOCS_ASSETS`` for the jobs)."""
        return self.cache_dir / "data-docs-assets"

    @property
    def kafka_libs(self) -> Path:
        return self.cache_dir / "stack" / "kafka-libs"

    @property
    def hdfs_libs(self) -> Path:
        """Hadoop's NameNode and DataNode jars scripts/setup.sh fetched (``stack/hdfs/pom.xml``)."""
        return self.cache_dir / "stack" / "hdfs-libs"

    @property
    def connect_plugins(self) -> Path:
        return self.cache_dir / "stack" / "connect-plugins"

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.kafka_port}"

    @property
    def kafka_sasl_bootstrap(self) -> str:
        """The SASL_PLAINTEXT listener's address."""
        return f"{self.host}:{self.kafka_sasl_port}"

    def kafka_sasl_config(self, mechanism: str = "PLAIN", *, password: str | None = None) -> dict[str, str]:
        """The client config dict (the Apache Kafka provider's, librdkafka names) for the SASL listener."""
        return {
            "bootstrap.servers": self.kafka_sasl_bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism,
            "sasl.username": self.kafka_sasl_user,
            "sasl.password": self.kafka_sasl_password if password is None else password,
        }

    @property
    def connect_url(self) -> str:
        return f"http://{self.host}:{self.connect_port}"

    @property
    def pg_dsn(self) -> str:
        return (
            f"host={self.host} port={self.pg_port} dbname={self.pg_database} "
            f"user={self.pg_user} password={self.pg_password}"
        )

    @property
    def state_dsn(self) -> str:
        """The run-state database (``cdc_state``): same server and role, not the captured database."""
        return (
            f"host={self.host} port={self.pg_port} dbname={self.state_database} "
            f"user={self.pg_user} password={self.pg_password}"
        )

    @property
    def airflow_home(self) -> Path:
        return self.run_dir / "airflow"

    @property
    def airflow_url(self) -> str:
        return f"http://{self.host}:{self.airflow_port}"

    @property
    def hdfs_url(self) -> str:
        """The NameNode's file system URI (``fs.defaultFS``)."""
        return f"hdfs://{self.host}:{self.hdfs_namenode_port}"

    @property
    def hdfs_lake_uri(self) -> str:
        """The lake root on the stack's HDFS, for jobs whose executors must share it."""
        return f"{self.hdfs_url}/lake"

    @property
    def hdfs_namenode_ui_url(self) -> str:
        return f"http://{self.host}:{self.hdfs_namenode_http_port}"

    @property
    def spark_master_url(self) -> str:
        return f"spark://{self.host}:{self.spark_master_port}"

    @property
    def spark_connect_url(self) -> str:
        return f"sc://{self.host}:{self.spark_connect_port}"

    @property
    def spark_connect_ui_url(self) -> str:
        return f"http://{self.host}:{self.spark_connect_ui_port}"

    @property
    def spark_master_ui_url(self) -> str:
        return f"http://{self.host}:{self.spark_master_ui_port}"

    @property
    def spark_worker_ui_url(self) -> str:
        return f"http://{self.host}:{self.spark_worker_ui_port}"

    @property
    def lake_root(self) -> Path:
        return self.run_dir / "lake"

    @property
    def gx_root(self) -> Path:
        """The DAG's Great Expectations project (``cdc_gx_root``): beside the lake, its default."""
        return self.run_dir / "great_expectations"

    @property
    def data_docs_site(self) -> Path:
        return self.gx_root / "gx" / "uncommitted" / "data_docs" / "local_site"

    @property
    def data_docs_url(self) -> str:
        """Where the stack serves the Data Docs site (``cdc_data_docs_url``)."""
        return f"http://{self.host}:{self.data_docs_port}/"

    @property
    def pg_jdbc_url(self) -> str:
        return f"jdbc:postgresql://{self.host}:{self.pg_port}/{self.pg_database}"

    def topic_for(self, table: str) -> str:
        """Debezium's topic for ``schema.table``: ``<prefix>.<schema>.<table>``."""
        return f"{self.topic_prefix}.{table}"

    @property
    def transaction_topic(self) -> str:
        return f"{self.topic_prefix}.transaction"
