"""PostgreSQL 15 on a data directory and port of the project's own, with logical decoding on.

PostgreSQL refuses to run as root, so under root the server runs as the ``postgres`` system user
that Debian's package creates. When that user cannot reach the run folder (a checkout in a
private temp directory), the data directory lives under ``/var/tmp/cdc-reconcile/`` and the run
folder holds a symlink to it, so ``.run/postgres`` is still the one place to look.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import subprocess
from importlib import resources
from pathlib import Path

import psycopg
from psycopg import sql

from .config import StackConfig
from .process import StackError, wait_until

PG_BIN = Path(os.environ.get("CDC_PG_BIN", "/usr/lib/postgresql/15/bin"))
SUPERUSER = "postgres"
SERVER_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "unix_socket_directories": "''",
    "wal_level": "logical",
    "max_wal_senders": "10",
    "max_replication_slots": "10",
    "max_connections": "200",
    "shared_buffers": "128MB",
    "log_line_prefix": "'%m [%p] %u@%d '",
}


class Postgres:
    name = "postgres"

    def __init__(self, config: StackConfig) -> None:
        self.config = config
        self.home = config.run_dir / "postgres"

    @property
    def data_dir(self) -> Path:
        """Resolved, so the server account never walks through a folder it may not enter."""
        return self.home.resolve() / "data"

    @property
    def log_file(self) -> Path:
        return self.home.resolve() / "postgres.log"

    def _os_user(self) -> str | None:
        """The account the server runs as: ``postgres`` under root, else the current user."""
        return SUPERUSER if os.geteuid() == 0 else None

    def _run(self, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
        user = self._os_user()
        full = ["runuser", "-u", user, "--", *argv] if user else argv
        return subprocess.run(full, check=False, capture_output=True, text=True, cwd="/", **kwargs)

    def _prepare_home(self) -> None:
        if self.home.is_symlink() and not self.home.exists():
            # the data directory under /var/tmp was removed (tmp cleaning, another checkout's destroy)
            self.home.unlink()
        if self.home.exists():
            return
        self.config.run_dir.mkdir(parents=True, exist_ok=True)
        user = self._os_user()
        if user is None:
            self.home.mkdir()
            return
        try:
            account = pwd.getpwnam(user)
        except KeyError as exc:
            raise StackError(
                "postgres: running as root needs the 'postgres' system user; install Debian's "
                "postgresql-15 package (scripts/setup.sh does) or run the stack as a normal user"
            ) from exc
        reachable = self._run(["test", "-x", str(self.config.run_dir), "-a", "-w", str(self.config.run_dir)])
        if reachable.returncode == 0:
            self.home.mkdir()
            target = self.home
        else:
            digest = hashlib.sha1(str(self.config.run_dir).encode()).hexdigest()[:12]
            target = Path("/var/tmp/cdc-reconcile") / digest / "postgres"
            if target.exists():
                shutil.rmtree(target)
            target.mkdir(parents=True)
            os.chmod(target.parent.parent, 0o755)
            os.chmod(target.parent, 0o755)
            self.home.symlink_to(target)
        os.chown(target, account.pw_uid, account.pw_gid)

    def initialised(self) -> bool:
        return (self.data_dir / "PG_VERSION").exists()

    def init(self) -> None:
        """Create the cluster once; later calls find it and do nothing."""
        if self.initialised():
            return
        if not (PG_BIN / "initdb").exists():
            raise StackError(
                f"postgres: {PG_BIN}/initdb not found. Install PostgreSQL 15 (apt-get install postgresql-15; "
                "scripts/setup.sh does it) or point CDC_PG_BIN at its bin folder"
            )
        self._prepare_home()
        result = self._run(
            [
                str(PG_BIN / "initdb"),
                "-D",
                str(self.data_dir),
                "-U",
                SUPERUSER,
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
                "--auth-local=trust",
                "--auth-host=trust",
            ]
        )
        if result.returncode != 0:
            raise StackError(f"postgres: initdb failed:\n{result.stdout}\n{result.stderr}")
        settings = {**SERVER_SETTINGS, "port": str(self.config.pg_port)}
        conf = "\n".join(f"{key} = {value}" for key, value in settings.items())
        with open(self.data_dir / "postgresql.conf", "a") as handle:
            handle.write(f"\n# cdc-reconcile embedded stack\n{conf}\n")

    def running(self) -> bool:
        if not self.initialised():
            return False
        return self._run([str(PG_BIN / "pg_ctl"), "-D", str(self.data_dir), "status"]).returncode == 0

    def healthy(self) -> bool:
        try:
            with psycopg.connect(self.config.pg_dsn, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.Error:
            return False

    def start(self, timeout: float = 60) -> None:
        self.init()
        if not self.running():
            result = self._run(
                [
                    str(PG_BIN / "pg_ctl"),
                    "-D",
                    str(self.data_dir),
                    "-l",
                    str(self.log_file),
                    "-w",
                    "-t",
                    str(int(timeout)),
                    "start",
                ]
            )
            if result.returncode != 0:
                raise StackError(f"postgres: pg_ctl start failed: {result.stderr.strip()}. See {self.log_file}")
        wait_until(self._superuser_ready, timeout=timeout, what="postgres", log=self.log_file)
        self.bootstrap()

    def _superuser_dsn(self, dbname: str = "postgres") -> str:
        return f"host={self.config.host} port={self.config.pg_port} dbname={dbname} user={SUPERUSER}"

    def _superuser_ready(self) -> bool:
        with psycopg.connect(self._superuser_dsn(), connect_timeout=2) as conn:
            conn.execute("SELECT 1")
        return True

    def bootstrap(self) -> None:
        """Role, the captured and the state databases, and the demo schema; idempotent."""
        cfg = self.config
        with psycopg.connect(self._superuser_dsn(), autocommit=True) as conn:
            role = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (cfg.pg_user,)).fetchone()
            if role is None:
                conn.execute(
                    sql.SQL("CREATE ROLE {} LOGIN REPLICATION PASSWORD {}").format(
                        sql.Identifier(cfg.pg_user), sql.Literal(cfg.pg_password)
                    )
                )
            for database in (cfg.pg_database, cfg.state_database):
                db = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,)).fetchone()
                if db is None:
                    conn.execute(
                        sql.SQL("CREATE DATABASE {} OWNER {}").format(
                            sql.Identifier(database), sql.Identifier(cfg.pg_user)
                        )
                    )
        schema_sql = resources.files("cdc_dev").joinpath("sql/demo_schema.sql").read_text()
        with psycopg.connect(cfg.pg_dsn, autocommit=True) as conn:
            conn.execute(schema_sql)

    def stop(self, timeout: float = 60) -> bool:
        if not self.running():
            return False
        result = self._run(
            [str(PG_BIN / "pg_ctl"), "-D", str(self.data_dir), "-m", "fast", "-w", "-t", str(int(timeout)), "stop"]
        )
        if result.returncode != 0:
            raise StackError(f"postgres: pg_ctl stop failed: {result.stderr.strip()}. See {self.log_file}")
        return True

    def server_pids(self) -> list[int]:
        """The postmaster's pid (from postmaster.pid) when the server runs."""
        pid_file = self.data_dir / "postmaster.pid"
        try:
            return [int(pid_file.read_text().splitlines()[0])]
        except (FileNotFoundError, PermissionError, IndexError, ValueError):
            return []

    def destroy(self) -> None:
        """Remove the cluster's files (after stop): the next ``up`` starts from a new database."""
        target = self.home.resolve() if self.home.is_symlink() else self.home
        if self.home.is_symlink():
            self.home.unlink()
        shutil.rmtree(target, ignore_errors=True)
