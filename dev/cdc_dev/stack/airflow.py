"""Airflow 3 on the embedded stack: metadata database in the stack's PostgreSQL, UI on localhost.

Three long-running services (``api-server``, ``scheduler``, ``dag-processor``), each in its own
process group: the scheduler's LocalExecutor workers and the API server's workers are children
that a SIGTERM to the parent alone would orphan, so ``stop`` signals the group and waits until the
whole group is gone. Settings shared by every checkout live in the repo's ``airflow.cfg``; what
differs per checkout (paths, ports, the database URL, secrets) is set through the environment built
by :func:`airflow_environment`, which in-process ``dag.test()`` runs use too.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import psycopg
import requests
from psycopg import sql

from .config import REPO_ROOT, StackConfig
from .postgres import SUPERUSER
from .process import ManagedProcess, StackError, _log_hint, pid_alive

AIRFLOW_CFG = REPO_ROOT / "airflow.cfg"
# Started in this order; stopped in reverse, so task workers can still reach the execution API
# (served by the API server) while the scheduler winds them down.
SERVICES = ("api-server", "dag-processor", "scheduler")
# The part of /api/v2/monitor/health that must say "healthy" for each service.
HEALTH_KEY = {"api-server": "metadatabase", "dag-processor": "dag_processor", "scheduler": "scheduler"}
# The scheduler would also serve task logs on 0.0.0.0:8793, a port every checkout would fight over;
# LocalExecutor writes them under AIRFLOW_HOME/logs where the API server reads them directly.
ARGS = {
    "api-server": ["api-server"],
    "dag-processor": ["dag-processor"],
    "scheduler": ["scheduler", "--skip-serve-logs"],
}
UI_ROLE = "admin"


def venv_bin() -> Path:
    """The folder of this interpreter's console scripts: ``airflow`` and pyspark's ``spark-submit``."""
    return Path(sys.executable).parent


def sql_alchemy_conn(config: StackConfig) -> str:
    """Airflow's metadata database. psycopg2 is the driver Airflow's PostgreSQL support is tested with
    and is already installed (the postgres provider requires ``psycopg2-binary``)."""
    return (
        f"postgresql+psycopg2://{config.airflow_db_user}:{config.airflow_db_password}"
        f"@{config.host}:{config.pg_port}/{config.airflow_db}"
    )


def _postgres_connection(config: StackConfig, description: str, database: str) -> str:
    return json.dumps(
        {
            "conn_type": "postgres",
            "description": description,
            "host": config.host,
            "port": config.pg_port,
            "schema": database,
            "login": config.pg_user,
            "password": config.pg_password,
        }
    )


def spark_connection(config: StackConfig) -> str:
    """``spark_default``: the stack's Spark Connect server, or with ``CDC_SPARK_CONNECT=off`` spark-submit in
    local mode (each Spark task starts a driver of its own)."""
    if config.spark_connect_enabled:
        return json.dumps(
            {
                "conn_type": "spark_connect",
                "description": "the stack's Spark Connect server: every Spark task runs on it as a client",
                "host": config.host,
                "port": config.spark_connect_port,
            }
        )
    return json.dumps(
        {
            "conn_type": "spark",
            "description": "Spark in local mode; point host at spark://HOST:PORT for a cluster",
            "host": "local[*]",
            "extra": {"spark-binary": "spark-submit", "deploy-mode": "client"},
        }
    )


def connections(config: StackConfig) -> dict[str, str]:
    """The Airflow connections of the pipeline as ``AIRFLOW_CONN_*`` JSON environment variables."""
    found = {
        "AIRFLOW_CONN_SPARK_DEFAULT": spark_connection(config),
        "AIRFLOW_CONN_CDC_SOURCE": _postgres_connection(config, "the captured PostgreSQL database", config.pg_database),
        "AIRFLOW_CONN_CDC_STATE": _postgres_connection(
            config, "run state (schema cdc_reconcile), a database of its own", config.state_database
        ),
        # the Apache Kafka provider's type: the extra is the client config dict (librdkafka names)
        "AIRFLOW_CONN_CDC_KAFKA": json.dumps(
            {
                "conn_type": "kafka",
                "description": (
                    f"the stack's Kafka, plaintext listener (Debezium's topic prefix {config.topic_prefix!r}). "
                    f"Its SASL listener: bootstrap.servers {config.kafka_sasl_bootstrap}, security.protocol "
                    f"SASL_PLAINTEXT, sasl.mechanism PLAIN or SCRAM-SHA-256, sasl.username {config.kafka_sasl_user}"
                ),
                "extra": {"bootstrap.servers": config.bootstrap_servers},
            }
        ),
    }
    webhook = os.environ.get("CDC_ALERTS_WEBHOOK")
    if webhook:
        found["AIRFLOW_CONN_CDC_ALERTS"] = json.dumps(
            {"conn_type": "http", "description": "alert webhook: alerts are POSTed here as JSON", "host": webhook}
        )
    return found


def _secrets(config: StackConfig) -> dict[str, str]:
    """Keys every Airflow process must share (a JWT signed by the scheduler is checked by the API
    server); Airflow would draw new random ones in each process when its config file does not name
    them, so they are drawn once per run folder and kept there."""
    path = config.airflow_home / "secrets.json"
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        pass
    values = {
        "fernet_key": base64.urlsafe_b64encode(os.urandom(32)).decode(),
        "jwt_secret": secrets.token_urlsafe(32),
        "api_secret_key": secrets.token_urlsafe(32),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as handle:
        json.dump(values, handle)
    return values


def passwords_file(config: StackConfig) -> Path:
    return config.airflow_home / "simple_auth_manager_passwords.json"


def airflow_environment(config: StackConfig) -> dict[str, str]:
    """Every environment variable the Airflow services and an in-process ``dag.test()`` need."""
    keys = _secrets(config)
    path = os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")
    return {
        "AIRFLOW_HOME": str(config.airflow_home),
        "AIRFLOW_CONFIG": str(AIRFLOW_CFG),
        "AIRFLOW__CORE__DAGS_FOLDER": str(config.airflow_dags_folder),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": sql_alchemy_conn(config),
        "AIRFLOW__API__HOST": config.host,
        "AIRFLOW__API__PORT": str(config.airflow_port),
        "AIRFLOW__API__BASE_URL": f"{config.airflow_url}/",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{config.airflow_url}/execution/",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{config.airflow_user}:{UI_ROLE}",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords_file(config)),
        "AIRFLOW__CORE__FERNET_KEY": keys["fernet_key"],
        "AIRFLOW__API_AUTH__JWT_SECRET": keys["jwt_secret"],
        "AIRFLOW__API__SECRET_KEY": keys["api_secret_key"],
        "AIRFLOW_VAR_CDC_LAKE_ROOT": str(config.lake_root),
        "AIRFLOW_VAR_CDC_GX_ROOT": str(config.gx_root),
        # the stack serves that root's Data Docs there (``data_docs``); a run given another GX root
        # sets this to "" too, or its alerts would link pages of this one
        "AIRFLOW_VAR_CDC_DATA_DOCS_URL": config.data_docs_url,
        "CDC_SPARK_JARS": str(config.spark_jars_dir),
        # the table configuration the tasks and, through them, the Spark jobs read (empty: the built-in one)
        "CDC_TABLES_CONFIG": os.environ.get("CDC_TABLES_CONFIG", ""),
        "CDC_DATA_DOCS_ASSETS": str(config.data_docs_assets_dir),
        # CDC_AIRFLOW_SCHEDULES=off: only triggered runs (the demo and the tests inject a fault first)
        "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": str(os.environ.get("CDC_AIRFLOW_SCHEDULES", "on") != "off"),
        # spark_default names ``spark-submit``; the venv's (from pyspark) must be the one found.
        "PATH": f"{venv_bin()}{os.pathsep}{path}",
        **connections(config),
    }


# -- metadata database ----------------------------------------------------------------------------


def _superuser_dsn(config: StackConfig, dbname: str = "postgres") -> str:
    return f"host={config.host} port={config.pg_port} dbname={dbname} user={SUPERUSER}"


def ensure_database(config: StackConfig) -> None:
    """Role and database ``airflow`` in the stack's PostgreSQL; idempotent."""
    try:
        with psycopg.connect(_superuser_dsn(config), autocommit=True, connect_timeout=5) as conn:
            if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (config.airflow_db_user,)).fetchone() is None:
                conn.execute(
                    sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                        sql.Identifier(config.airflow_db_user), sql.Literal(config.airflow_db_password)
                    )
                )
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (config.airflow_db,)).fetchone() is None:
                conn.execute(
                    sql.SQL("CREATE DATABASE {} OWNER {}").format(
                        sql.Identifier(config.airflow_db), sql.Identifier(config.airflow_db_user)
                    )
                )
    except psycopg.OperationalError as exc:
        raise StackError(
            f"airflow: cannot reach the stack's PostgreSQL on port {config.pg_port} to create database "
            f"{config.airflow_db!r} ({exc}); start the stack first (cdc-stack up)"
        ) from exc


def _airflow_version() -> str:
    try:
        return version("apache-airflow-core")
    except PackageNotFoundError as exc:
        raise StackError("airflow: apache-airflow is not installed in this Python; run scripts/setup.sh") from exc


def _schema_revision(config: StackConfig) -> str | None:
    """The metadata database's Alembic revision, or None before the first migration."""
    dsn = (
        f"host={config.host} port={config.pg_port} dbname={config.airflow_db} "
        f"user={config.airflow_db_user} password={config.airflow_db_password}"
    )
    with psycopg.connect(dsn, connect_timeout=5) as conn:
        if conn.execute("SELECT to_regclass('public.alembic_version')").fetchone()[0] is None:
            return None
        row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        return row[0] if row else None


def _migration_stamp(config: StackConfig) -> Path:
    return config.airflow_home / "migrated"


def migration_needed(config: StackConfig) -> bool:
    """True unless this Airflow version already migrated this database to the revision it has now.

    ``airflow db migrate`` costs half a minute even when there is nothing to do, so a stamp under the
    run folder records ``<airflow version> <revision>`` after each migration."""
    revision = _schema_revision(config)
    if revision is None:
        return True
    stamp = _migration_stamp(config)
    return not stamp.exists() or stamp.read_text().strip() != f"{_airflow_version()} {revision}"


def migrate(config: StackConfig, *, timeout: float = 600, force: bool = False) -> bool:
    """Create the metadata database if missing and bring its schema to this Airflow's version.

    Returns True when a migration ran. The stack's PostgreSQL must be up."""
    ensure_database(config)
    if not force and not migration_needed(config):
        return False
    config.logs_dir.mkdir(parents=True, exist_ok=True)
    log = config.logs_dir / "airflow-migrate.log"
    with open(log, "ab") as handle:
        try:
            result = subprocess.run(
                [str(venv_bin() / "airflow"), "db", "migrate"],
                stdout=handle,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **airflow_environment(config)},
                cwd=config.airflow_home,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise StackError(
                f"airflow: 'airflow db migrate' did not finish in {timeout:.0f}s.{_log_hint(log)}"
            ) from exc
    if result.returncode != 0:
        raise StackError(f"airflow: 'airflow db migrate' failed (exit {result.returncode}).{_log_hint(log)}")
    revision = _schema_revision(config)
    _migration_stamp(config).write_text(f"{_airflow_version()} {revision}\n")
    return True


# -- processes ------------------------------------------------------------------------------------


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is ``pgid``."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(") ", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError, PermissionError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


class GroupProcess(ManagedProcess):
    """A service whose children outlive a parent that dies first: stopping waits for the whole group."""

    def pgid(self) -> int | None:
        """The group recorded at start, even when its leader has already exited."""
        try:
            return int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def members(self) -> list[int]:
        pgid = self.pgid()
        return group_members(pgid) if pgid is not None else []

    def stop(self, *, timeout: float = 30.0) -> bool:
        """SIGTERM the group, SIGKILL it after ``timeout``; True if anything of it was running."""
        pgid = self.pgid()
        if pgid is None or not self.members():
            self.pid_file.unlink(missing_ok=True)
            return False
        self._signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self.members() and time.monotonic() < deadline:
            time.sleep(0.2)
        if self.members():
            self._signal_group(pgid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while self.members() and time.monotonic() < deadline:
                time.sleep(0.2)
        self._reap(pgid)
        left = self.members()
        if left:
            raise StackError(f"{self.name}: processes {left} survived SIGKILL of group {pgid}")
        self.pid_file.unlink(missing_ok=True)
        return True

    @staticmethod
    def _signal_group(pgid: int, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)


class Airflow:
    """API server + UI, scheduler (LocalExecutor) and DAG processor of the embedded stack."""

    name = "airflow"

    def __init__(self, config: StackConfig) -> None:
        self.config = config
        self.processes = {
            service: GroupProcess(
                f"airflow {service}",
                config.run_dir / "pids" / f"airflow-{service}.pid",
                config.logs_dir / f"airflow-{service}.log",
            )
            for service in SERVICES
        }

    def health(self) -> dict[str, Any]:
        response = requests.get(f"{self.config.airflow_url}/api/v2/monitor/health", timeout=5)
        response.raise_for_status()
        return response.json()

    def service_health(self, health: dict[str, Any] | None = None) -> dict[str, bool]:
        """Per service: running, and reported healthy by the API server."""
        if health is None:
            try:
                health = self.health()
            except requests.RequestException:
                health = {}
        return {
            service: process.running() and (health.get(HEALTH_KEY[service]) or {}).get("status") == "healthy"
            for service, process in self.processes.items()
        }

    def healthy(self) -> bool:
        return all(self.service_health().values())

    def running(self) -> bool:
        return any(process.members() for process in self.processes.values())

    def prepare(self) -> None:
        """Folders, the UI user's password and the DAG folder, before any Airflow process starts."""
        cfg = self.config
        if not AIRFLOW_CFG.is_file():
            raise StackError(f"airflow: the project's configuration {AIRFLOW_CFG} is missing")
        for folder in (cfg.airflow_home, cfg.logs_dir, cfg.lake_root):
            folder.mkdir(parents=True, exist_ok=True)
        cfg.airflow_dags_folder.mkdir(parents=True, exist_ok=True)
        # The simple auth manager keeps a user's password in this JSON file; writing it ourselves gives
        # a known login instead of a generated one to read back from a log.
        file = passwords_file(cfg)
        with open(os.open(file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as handle:
            json.dump({cfg.airflow_user: cfg.airflow_password}, handle)

    def start(self, timeout: float = 180, migrate_timeout: float = 600) -> None:
        """Idempotent: a healthy Airflow is left alone; a dead service is started again."""
        if all(p.running() for p in self.processes.values()) and _quiet(self.healthy):
            return
        self.prepare()
        migrate(self.config, timeout=migrate_timeout)
        env = airflow_environment(self.config)
        for service, process in self.processes.items():
            if process.running():
                continue
            process.stop()  # children a crashed parent left in its group would hold the port
            process.start([str(venv_bin() / "airflow"), *ARGS[service]], env=env, cwd=self.config.airflow_home)
        self._wait_healthy(timeout)

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        health: dict[str, Any] = {}
        while True:
            for service, process in self.processes.items():
                if not process.running():
                    raise StackError(
                        f"airflow {service}: the process exited while starting.{_log_hint(process.log_file)}"
                    )
            try:
                health = self.health()
            except (requests.RequestException, ValueError):
                health = {}
            states = self.service_health(health)
            if all(states.values()):
                return
            if time.monotonic() >= deadline:
                service = next(s for s, ok in states.items() if not ok) if health else "api-server"
                raise StackError(
                    f"airflow {service}: not healthy after {timeout:.0f}s (health at "
                    f"{self.config.airflow_url}/api/v2/monitor/health: {health or 'unreachable'})."
                    f"{_log_hint(self.processes[service].log_file)}"
                )
            time.sleep(1)

    def stop(self, timeout: float = 60) -> bool:
        """Stop every service's process group, scheduler first; True if any was running."""
        stopped = False
        for service in reversed(SERVICES):
            stopped = self.processes[service].stop(timeout=timeout) or stopped
        return stopped

    def leftover_pids(self) -> list[int]:
        return [pid for process in self.processes.values() for pid in process.members() if pid_alive(pid)]


def _quiet(check) -> bool:
    try:
        return bool(check())
    except Exception:  # a half-started service refuses connections; the caller starts it again
        return False


__all__ = [
    "AIRFLOW_CFG",
    "Airflow",
    "airflow_environment",
    "connections",
    "ensure_database",
    "migrate",
    "migration_needed",
    "sql_alchemy_conn",
]
