"""What every Spark job shares: its arguments, its settings, and one exit-code contract.

Exit codes (the same for every job; the DAG and the docs rely on them):

* ``0`` done; the job printed one line of JSON;
* ``1`` the check found differences (``reconcile --check-only``); ``validate`` records a failed suite
  in the state database and exits 0, so the DAG decides what follows;
* ``2`` bad input or configuration (an unknown table, a missing dataset, a range never sealed);
* ``3`` a dependency did not answer (PostgreSQL, Kafka).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ..config import TableConfig, load_config, parse_flag
from ..errors import InputError, UnreachableError
from ..run import RunSettings, TableRun
from ..spark import REMOTE_ENV
from . import job_conf

EXIT_DONE = 0
EXIT_DIFFERENCES = 1
EXIT_BAD_INPUT = 2
EXIT_UNREACHABLE = 3
UI_SWITCH = "CDC_SPARK_UI"


def job_parser(prog: str, description: str, conf: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    """The arguments every job takes: which table, which run, where the lake and the state are.

    ``conf`` is the submitted ``spark.cdc.*`` configuration (default: :func:`job_conf.submitted_conf`);
    a setting missing from the command line comes from it, else from its environment variable.
    """
    env = os.environ.get
    conf = job_conf.submitted_conf() if conf is None else conf
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--table", required=True, help="schema.table, as in the table configuration")
    parser.add_argument("--run-id", required=True, help="the DAG run id; datasets are keyed by it")
    parser.add_argument(
        "--lake-root", default=env("CDC_LAKE_ROOT"), required=env("CDC_LAKE_ROOT") is None, help="the lake's root"
    )
    parser.add_argument(
        "--state-dsn",
        default=job_conf.setting(conf, job_conf.STATE_DSN),
        help=f"libpq connection string of the state database (default: Spark conf {job_conf.STATE_DSN}, "
        "else $CDC_STATE_DSN)",
    )
    parser.add_argument(
        "--tables-config",
        default=None,
        help="YAML table configuration (default: $CDC_TABLES_CONFIG, else the packaged tables.py)",
    )
    parser.add_argument("--master", default=None, help="Spark master when not run by spark-submit")
    parser.add_argument(
        "--remote",
        default=env(REMOTE_ENV) or None,
        help=f"a Spark Connect server (sc://host:port) to run on, not a driver of its own (default: ${REMOTE_ENV})",
    )
    return parser


def flag(parser: argparse.ArgumentParser, name: str, help_text: str) -> None:
    """A boolean option that also takes a rendered template's ``True``/``False``."""
    parser.add_argument(name, nargs="?", const=True, default=False, type=parse_flag, help=f"{help_text} (true/false)")


def run_job(prog: str, args: argparse.Namespace, body: Callable[..., int]) -> int:
    """Resolve the table, call ``body(table)``, and turn the errors a user can act on into exit codes.

    The message names the job and the table, whichever step raised it.
    """
    try:
        table = load_config(args.tables_config).table(args.table)
        return body(table)
    except UnreachableError as exc:
        print(f"{prog}: error: {args.table}: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except InputError as exc:
        print(f"{prog}: error: {args.table}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


@contextlib.contextmanager
def spark_run(prog: str, table: TableConfig, args: argparse.Namespace, settings: RunSettings) -> Iterator[TableRun]:
    """The job's run object on its own SparkSession (``--master`` when not run by spark-submit), stopped after.

    With ``--remote`` the session is a Spark Connect client of that server; when the block ends early (an
    error, Airflow's execution timeout) its running operations are interrupted before it is released,
    so nothing of the job goes on running on the server.
    The Spark UI is on unless ``CDC_SPARK_UI=off``; progress lines go to the task log while it runs.
    """
    from ..progress import SparkProgress
    from ..spark import build_session, is_connect

    ui = os.environ.get(UI_SWITCH, "on").lower() != "off"
    spark = build_session(f"{prog}:{table.name}", master=args.master, ui=ui, remote=args.remote)
    run = TableRun(table, args.run_id, settings, spark=spark)
    completed = False
    try:
        with SparkProgress(spark, f"{prog} {table.name}"):
            yield run
        completed = True
    finally:
        if is_connect(spark) and not completed:
            with contextlib.suppress(Exception):  # the server may be the thing that failed
                spark.interruptAll()
        run.spark.stop()


def summary_line(document: Any) -> str:
    """What a job prints when it is done: one line of JSON."""
    return json.dumps(document, default=str, sort_keys=True)
