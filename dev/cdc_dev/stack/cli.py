"""``cdc-stack up|status|down``: the embedded stack from the command line."""

from __future__ import annotations

import argparse
import json
import sys

from . import Stack, StackError


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
        "--eos-disabled",
        action="store_true",
        help="run the Connect worker with exactly.once.source.support=disabled (at-least-once)",
    )
    status = sub.add_parser("status", help="per-component state and the connector's task states")
    status.add_argument("--json", action="store_true")
    down = sub.add_parser("down", help="stop everything the stack started, Airflow included")
    down.add_argument("--destroy", action="store_true", help="also delete the run folder (data and logs)")
    args = parser.parse_args(argv)

    stack = Stack(airflow=args.command == "up" and args.with_airflow)
    try:
        if args.command == "up":
            timings = stack.up(register=not args.no_register, exactly_once=not args.eos_disabled)
            print("stack up: " + ", ".join(f"{name} {secs}s" for name, secs in timings.items()))
            _print_status(stack, as_json=False)
            if stack.with_airflow:
                cfg = stack.config
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
