"""``cdc-stack up|status|down|airflow|airflow-env``: the embedded stack from the command line."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys

from . import Stack, StackError
from .airflow import airflow_environment, venv_bin
from .config import StackConfig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cdc-stack", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start PostgreSQL, Kafka, Connect and register Debezium (idempotent)")
    up.add_argument("--no-register", action="store_true", help="start the services but register no connector")
    up.add_argument(
        "--with-airflow",
        action="store_true",
        help="also start Airflow (API server + UI, scheduler, DAG processor) on the stack's PostgreSQL",
    )
    up.add_argument(
        "--with-cluster",
        action="store_true",
        help="also start HDFS (NameNode + DataNode) and a Spark standalone cluster (master + worker)",
    )
    up.add_argument(
        "--eos-disabled",
        action="store_true",
        help="run the Connect worker with exactly.once.source.support=disabled (at-least-once)",
    )
    status = sub.add_parser("status", help="per-component state and the connector's task states")
    status.add_argument("--json", action="store_true")
    down = sub.add_parser("down", help="stop everything the stack started, Airflow, Spark and HDFS included")
    down.add_argument("--destroy", action="store_true", help="also delete the run folder (data and logs)")
    airflow = sub.add_parser(
        "airflow",
        help="run the Airflow CLI against the stack's Airflow: cdc-stack airflow -- tasks test cdc_reconciliation ...",
    )
    airflow.add_argument("arguments", nargs=argparse.REMAINDER, help="the airflow command's arguments, after --")
    sub.add_parser("airflow-env", help="print the stack's Airflow environment as export lines (for eval)")
    args = parser.parse_args(argv)

    if args.command == "airflow":
        return run_airflow(args.arguments)
    if args.command == "airflow-env":
        print(export_lines(airflow_environment(StackConfig())))
        return 0
    starting = args.command == "up"
    stack = Stack(airflow=starting and args.with_airflow, cluster=starting and args.with_cluster)
    try:
        if args.command == "up":
            timings = stack.up(register=not args.no_register, exactly_once=not args.eos_disabled)
            print("stack up: " + ", ".join(f"{name} {secs}s" for name, secs in timings.items()))
            if stack.connector_outcome:
                print(f"connector {stack.config.connector_name}: {stack.connector_outcome}")
            _print_status(stack, as_json=False)
            cfg = stack.config
            if stack.with_cluster:
                print(f"HDFS: {cfg.hdfs_url} (lake {cfg.hdfs_lake_uri}), NameNode {cfg.hdfs_namenode_ui_url}/")
                print(f"Spark: {cfg.spark_master_url}, master UI {cfg.spark_master_ui_url}/")
            if stack.with_airflow:
                print(
                    f"Airflow UI: {cfg.airflow_url}/  (user {cfg.airflow_user!r}, password from CDC_AIRFLOW_PASSWORD)"
                )
        elif args.command == "status":
            return _print_status(stack, as_json=args.json)
        else:
            stopped = stack.down(destroy=args.destroy)
            print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
            leftovers = stack.leftover_pids()
            if leftovers:
                print(f"still alive: {leftovers}", file=sys.stderr)
                return 1
    except StackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def export_lines(environment: dict[str, str]) -> str:
    """``export NAME=value`` lines a POSIX shell reads back unchanged (``eval "$(cdc-stack airflow-env)"``)."""
    return "\n".join(f"export {name}={shlex.quote(value)}" for name, value in sorted(environment.items()))


def run_airflow(arguments: list[str]) -> int:
    """The virtualenv's ``airflow`` with the stack's environment (the one its services use); its exit code."""
    if arguments[:1] == ["--"]:
        arguments = arguments[1:]
    config = StackConfig()
    env = {**os.environ, **airflow_environment(config)}
    return subprocess.run([str(venv_bin() / "airflow"), *arguments], env=env, check=False).returncode


def _print_status(stack: Stack, *, as_json: bool) -> int:
    rows = stack.status()
    if as_json:
        print(json.dumps([row.__dict__ for row in rows], indent=2))
    else:
        for row in rows:
            state = "healthy" if row.healthy else ("running" if row.running else "stopped")
            pid = f"pid {row.pid}" if row.pid else ""
            print(f"{row.name:<21} {state:<8} {pid:<11} {row.detail}")
    return 0 if all(row.healthy for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
