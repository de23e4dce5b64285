"""``cdc-faults`` (``python -m cdc_dev.faults``): run the scenarios on the runner's own stack, list them, report.

Repetitions run one after the other on a fresh stack each, or several at once (``--parallel``), each
in a child process on its own stack with ports shifted by 1000 per repetition.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ..stack import StackConfig
from ..stack.config import REPO_ROOT
from .harness import FaultRunner
from .report import load_results, markdown, matrix, save_results
from .result import ScenarioResult
from .scenarios import GROUPS, SCENARIOS, run_scenarios

# The runner's own stack, apart from a developer's (25432...) and the tests' (25442...).
RUNNER_ENV = {
    "CDC_PG_PORT": "25492",
    "CDC_KAFKA_PORT": "29152",
    "CDC_KAFKA_CONTROLLER_PORT": "29153",
    "CDC_KAFKA_SASL_PORT": "29154",
    "CDC_CONNECT_PORT": "28143",
    "CDC_AIRFLOW_PORT": "28195",
    "CDC_DATA_DOCS_PORT": "28650",
    # HDFS and the Spark cluster, for scenarios that start them (Stack(cluster=True)): the dev ports + 60
    "CDC_HDFS_NAMENODE_PORT": "29080",
    "CDC_HDFS_NAMENODE_HTTP_PORT": "29930",
    "CDC_HDFS_DATANODE_PORT": "29926",
    "CDC_HDFS_DATANODE_HTTP_PORT": "29924",
    "CDC_HDFS_DATANODE_IPC_PORT": "29927",
    "CDC_SPARK_MASTER_PORT": "27137",
    "CDC_SPARK_MASTER_UI_PORT": "28570",
    "CDC_SPARK_WORKER_UI_PORT": "28571",
    # the Spark Connect server, for ``run --spark-connect``
    "CDC_SPARK_CONNECT_PORT": "28562",
    "CDC_SPARK_CONNECT_UI_PORT": "28582",
}
SPARK_TASKS = {False: "spark-submit per task", True: "Spark Connect server"}


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "report":
        loaded = [r for f in args.files for r in load_results(f)]
        print(matrix(loaded) + "\n" + markdown(loaded))
        return 0
    if args.command == "list":
        for name, scenario in SCENARIOS.items():
            print(f"{scenario.number}  {name}{'  (cluster: HDFS and the Spark cluster)' * scenario.cluster}")
        print("bad inputs: tests/integration/test_bad_inputs.py (one table, its own connector)")
        return 0
    try:
        names = scenario_names(args.scenario)
    except ValueError as exc:
        parser.error(str(exc))
    if args.repeat < 1 or args.parallel < 1:
        parser.error("--repeat and --parallel must be at least 1")
    if args.spark_connect:
        refused = [name for name in names if SCENARIOS[name].own_driver]
        if refused:
            parser.error(
                f"--spark-connect: {', '.join(refused)} kill or watch a Spark task's own driver, which a task on "
                "the Spark Connect server does not have; run them without --spark-connect"
            )
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = args.stamp or time.strftime("%Y%m%dT%H%M%S")
    if args.parallel > 1 and args.repeat > 1:
        return _run_in_parallel(names, args.repeat, args.parallel, args.out, stamp, spark_connect=args.spark_connect)
    repetitions = range(args.first_repetition, args.first_repetition + args.repeat)
    return _run_here(names, repetitions, args.out, stamp, spark_connect=args.spark_connect)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cdc-faults",
        description="Fault scenarios on the embedded stack, each checked against counts the pipeline did not take.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run scenarios on the runner's own fresh stack, then stop it")
    run.add_argument(
        "--scenario",
        default="all",
        help=f"all, local (the first eight), cluster (9-11), or a comma-separated subset of {', '.join(SCENARIOS)}",
    )
    run.add_argument("--repeat", type=int, default=1, help="repetitions, each on a fresh stack")
    run.add_argument("--out", type=Path, default=Path("test-artifacts/faults"), help="folder for JSON and Markdown")
    run.add_argument(
        "--parallel",
        type=int,
        default=1,
        help="repetitions run at once, each on its own stack: ports shifted by 1000 per repetition, "
        "run folder .run/faults-<n>, log <out>/<stamp>-rep<n>.log",
    )
    run.add_argument(
        "--spark-connect",
        action="store_true",
        help="the DAG's Spark tasks run on the stack's Spark Connect server (the stack's default for users) "
        "instead of a spark-submit each; refused for the scenarios that kill or watch a task's own driver",
    )
    run.add_argument("--first-repetition", type=int, default=1, help=argparse.SUPPRESS)
    run.add_argument("--stamp", default=None, help=argparse.SUPPRESS)
    sub.add_parser("list", help="the scenarios")
    report = sub.add_parser("report", help="the Markdown matrix from a run's JSON file or its printed log")
    report.add_argument("files", nargs="+", type=Path)
    return parser


def scenario_names(selection: str) -> list[str]:
    """The scenarios ``--scenario`` names (``all``, a group, or names, comma-separated), in run order."""
    wanted: set[str] = set()
    for part in (p.strip() for p in selection.split(",")):
        if part == "all":
            wanted |= set(SCENARIOS)
        elif part in GROUPS:
            wanted |= set(GROUPS[part])
        elif part in SCENARIOS:
            wanted.add(part)
        else:
            raise ValueError(f"unknown scenario {part!r}; choose from {', '.join(SCENARIOS)}, local, cluster or all")
    return [name for name in SCENARIOS if name in wanted]  # the order the scenarios need


def _log(message: str) -> None:
    print(f"[faults {time.strftime('%H:%M:%S')}] {message}", flush=True)


def _run_here(names: list[str], repetitions: range, out: Path, stamp: str, *, spark_connect: bool = False) -> int:
    """Each repetition in this process on the runner's own fresh stack, stopped afterwards."""
    for key, value in RUNNER_ENV.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("CDC_RUN_DIR", str(REPO_ROOT / ".run" / "faults"))
    os.environ["CDC_AIRFLOW_SCHEDULES"] = "off"
    results: list[ScenarioResult] = []

    def save() -> None:
        save_results(out, stamp, results, machine=machine_info(), spark_tasks=SPARK_TASKS[spark_connect])

    # the cluster's scenarios after the others, on a fresh stack that also runs HDFS and the Spark cluster
    groups = [[n for n in names if SCENARIOS[n].cluster == cluster] for cluster in (False, True)]
    for repetition in repetitions:
        for group, cluster in zip(groups, (False, True), strict=True):
            if not group:
                continue
            runner = FaultRunner(StackConfig(), log=_log, cluster=cluster, spark_connect=spark_connect)
            try:
                runner.start()
                run_scenarios(runner, group, repetition, on_result=lambda r: (results.append(r), save()))
            except Exception as exc:
                stack = "cluster stack" if cluster else "stack"
                results.append(
                    ScenarioResult(stack, stack, repetition=repetition, error=f"{type(exc).__name__}: {exc}")
                )
            finally:
                save()
                runner.stop()
    save()
    print(matrix(results) + "\n" + markdown(results))
    print(f"results: {out / (stamp + '.json')}")
    return 0 if all(r.passed for r in results) else 1


def repetition_environment(repetition: int) -> dict[str, str]:
    """Ports and run folder of repetition ``repetition`` when several run at once: base + 1000 per repetition."""
    shift = 1000 * (repetition - 1)
    env = {key: str(int(os.environ.get(key, value)) + shift) for key, value in RUNNER_ENV.items()}
    base = Path(os.environ.get("CDC_RUN_DIR", str(REPO_ROOT / ".run" / "faults")))
    env["CDC_RUN_DIR"] = str(base if repetition == 1 else base.with_name(f"{base.name}-{repetition}"))
    env["CDC_AIRFLOW_SCHEDULES"] = "off"
    return env


def _run_in_parallel(
    names: list[str], repeat: int, parallel: int, out: Path, stamp: str, *, spark_connect: bool = False
) -> int:
    """Each repetition in a child ``cdc-faults run`` on its own stack, ``parallel`` at a time; one merged matrix."""
    waiting, running = list(range(1, repeat + 1)), {}
    while waiting or running:
        while waiting and len(running) < parallel:
            repetition = waiting.pop(0)
            part = f"{stamp}-rep{repetition}"
            argv = [sys.executable, "-m", "cdc_dev.faults", "run", "--scenario", ",".join(names)]
            argv += ["--repeat", "1", "--first-repetition", str(repetition), "--out", str(out), "--stamp", part]
            argv += ["--spark-connect"] * spark_connect
            with (out / f"{part}.log").open("w") as child_log:
                child = subprocess.Popen(
                    argv,
                    env={**os.environ, **repetition_environment(repetition)},
                    stdout=child_log,
                    stderr=subprocess.STDOUT,
                )
            running[repetition] = child
            _log(f"repetition {repetition}: pid {child.pid}, log {out / (part + '.log')}")
        for repetition, child in list(running.items()):
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=5)
            if child.returncode is not None:
                _log(f"repetition {repetition}: exit {child.returncode}")
                del running[repetition]
    results: list[ScenarioResult] = []
    for repetition in range(1, repeat + 1):
        part = out / f"{stamp}-rep{repetition}.json"
        if part.exists():
            results.extend(load_results(part))
        else:
            results.append(ScenarioResult("stack", "stack", repetition=repetition, error=f"no results: see {part}"))
    save_results(out, stamp, results, machine=machine_info(), parallel=parallel, spark_tasks=SPARK_TASKS[spark_connect])
    print(matrix(results) + "\n" + markdown(results))
    print(f"results: {out / (stamp + '.json')}")
    return 0 if all(r.passed for r in results) else 1


def machine_info() -> dict[str, Any]:
    """What the figures depend on: cores, load, Python."""
    return {"cpus": os.cpu_count(), "load_average": os.getloadavg(), "python": sys.version.split()[0]}
