"""Where a DAG run's Spark time goes, per task: its SQL queries and Spark jobs from the event log.

``bench/dag_runs.py`` writes each measured run's task windows (``timeline``) to its JSON and leaves
the Spark event logs under the bench stack's run folder (``.run/bench-dag-stack/spark-events``; the
next bench start removes them, so copy them first). This cuts one run's events into its tasks: every
Spark job and SQL query carries the name of the session that ran it (``<job>:<table>``, from the job's
``build_session``), and the run's task windows tell ``validate`` from ``validate_repaired``. Per task
instance it prints the root queries (a query and the sub-queries it started, e.g. the file listings
of a Delta scan, count as one), their jobs and job seconds, the seconds inside root queries against the
task's wall time (the rest is Python, round trips and start-up), and the longest root queries::

    python -m bench.task_profile bench/results/dag-runs-<stamp>.json <spark-events> --scenario demo --run -1
"""

from __future__ import annotations

import argparse
import ast
import collections
import dataclasses
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from bench.stage_times import ROLLING_PREFIX, event_lines, event_logs


@dataclasses.dataclass
class RootQuery:
    execution_id: int
    session: str
    start: float  # epoch seconds
    end: float
    first_node: str
    sub_executions: int = 1
    jobs: int = 0
    job_seconds: float = 0.0

    @property
    def seconds(self) -> float:
        return self.end - self.start


def _session(event: dict[str, Any]) -> str:
    """The session's app name from a SQL execution's modified configuration (a Python-literal dict)."""
    configs = event.get("modifiedConfigs") or "{}"
    try:
        parsed = ast.literal_eval(configs) if isinstance(configs, str) else configs
    except (ValueError, SyntaxError):
        return ""
    return str(parsed.get("spark.app.name", ""))


def _first_node(plan: str) -> str:
    lines = [line.strip() for line in plan.splitlines() if line.strip()]
    return lines[1][:80] if len(lines) > 1 else ""


def root_queries(logs: list[Path], start: float, end: float) -> list[RootQuery]:
    """Root SQL executions that started in ``[start, end]`` (epoch seconds), with their sub-executions'
    jobs folded in."""
    executions: dict[tuple[str, int], dict[str, Any]] = {}
    job_execution: dict[tuple[str, int], tuple[tuple[str, int], float]] = {}
    jobs: collections.Counter[tuple[str, int]] = collections.Counter()
    job_ms: collections.Counter[tuple[str, int]] = collections.Counter()
    for log in logs:
        app = log.name  # execution and job ids are per application (one per spark-submit)
        app_name = ""
        for line in event_lines(log):
            if '"Event"' not in line:
                continue
            event = json.loads(line)
            kind = event["Event"]
            if kind == "SparkListenerApplicationStart":
                app_name = event.get("App Name", "")
            elif kind.endswith("SQLExecutionStart"):
                at = event["time"] / 1000
                if start <= at <= end:
                    executions[(app, event["executionId"])] = {
                        "start": at,
                        "root": event.get("rootExecutionId", event["executionId"]),
                        "session": _session(event) or app_name,
                        "node": _first_node(event.get("physicalPlanDescription", "")),
                    }
            elif kind.endswith("SQLExecutionEnd"):
                execution = executions.get((app, event["executionId"]))
                if execution is not None:
                    execution["end"] = event["time"] / 1000
            elif kind == "SparkListenerJobStart":
                execution_id = event.get("Properties", {}).get("spark.sql.execution.id")
                if execution_id is not None:
                    key = (app, int(execution_id))
                    jobs[key] += 1
                    job_execution[(app, event["Job ID"])] = (key, event["Submission Time"])
            elif kind == "SparkListenerJobEnd":
                started = job_execution.pop((app, event["Job ID"]), None)
                if started is not None:
                    job_ms[started[0]] += event["Completion Time"] - started[1]
    roots: dict[tuple[str, int], RootQuery] = {}
    for (app, execution_id), execution in sorted(executions.items(), key=lambda item: item[1]["start"]):
        root_key = (app, execution["root"])
        root = roots.get(root_key)
        if root is None:
            if root_key not in executions:  # a sub-execution of a root that started before the window
                continue
            top = executions[root_key]
            root = roots[root_key] = RootQuery(
                execution["root"], top["session"], top["start"], top.get("end", top["start"]), top["node"], 0
            )
        root.sub_executions += 1
        root.jobs += jobs[(app, execution_id)]
        root.job_seconds += job_ms[(app, execution_id)] / 1000
    return sorted(roots.values(), key=lambda root: root.start)


def _epoch(at: str) -> float:
    return dt.datetime.fromisoformat(at).timestamp()


def task_of(query: RootQuery, timeline: list[list[Any]]) -> str:
    """The task instance a query belongs to: its session names the job and table, the run's task windows
    (with their tables, where the bench recorded them) name the task (``validate`` and
    ``validate_repaired`` run the same job)."""
    job, _, table = query.session.partition(":")
    for task, _map_index, start, end, *mapped in timeline:
        same_table = not table or not mapped or mapped[0] in (None, table)
        if _epoch(start) <= query.start <= _epoch(end) and task.startswith(job) and same_table:
            return f"{task}:{table}" if table else task
    return query.session or "(no session)"


def profile(
    timeline: list[list[Any]], queries: list[RootQuery], top: int, out: TextIO = sys.stdout
) -> dict[str, dict[str, float]]:
    """Print each task instance's figures and longest queries; return the figures per task instance."""
    walls = {}
    for task, _map_index, start, end, *_table in timeline:
        walls.setdefault(task, []).append(_epoch(end) - _epoch(start))
    by_task: dict[str, list[RootQuery]] = collections.defaultdict(list)
    for query in queries:
        by_task[task_of(query, timeline)].append(query)
    figures = {}
    for name, group in sorted(by_task.items(), key=lambda item: item[1][0].start):
        figures[name] = {
            "root_queries": len(group),
            "sub_executions": sum(q.sub_executions for q in group),
            "jobs": sum(q.jobs for q in group),
            "job_seconds": round(sum(q.job_seconds for q in group), 2),
            "seconds_in_queries": round(sum(q.seconds for q in group), 2),
            "first_to_last_query": round(max(q.end for q in group) - group[0].start, 2),
        }
        f = figures[name]
        print(
            f"\n{name}: {f['root_queries']} root queries ({f['sub_executions']} executions), {f['jobs']} jobs, "
            f"{f['job_seconds']:.2f} s in jobs, {f['seconds_in_queries']:.2f} s in queries, "
            f"{f['first_to_last_query']:.2f} s from the first query's start to the last's end",
            file=out,
        )
        for query in sorted(group, key=lambda q: q.seconds, reverse=True)[:top]:
            print(
                f"  {query.seconds:6.2f} s  {query.sub_executions:3d} executions {query.jobs:3d} jobs  "
                f"{query.first_node}",
                file=out,
            )
    task_walls = {task: round(sum(seconds), 1) for task, seconds in walls.items()}
    print(f"\ntask wall seconds (mapped instances summed): {task_walls}", file=out)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="a bench/results/dag-runs-<stamp>.json")
    parser.add_argument(
        "events", type=Path, help="the run's Spark event log folder, or one log (a file or a rolling folder)"
    )
    parser.add_argument("--scenario", help="the scenario's name; default: the file's first")
    parser.add_argument("--run", type=int, default=-1, help="which measured run (0-based; default the last)")
    parser.add_argument("--top", type=int, default=5, help="longest root queries shown per task instance")
    args = parser.parse_args(argv)
    payload = json.loads(args.results.read_text())
    results = [s for s in payload["scenarios"] if args.scenario in (None, s["scenario"]["name"])]
    if not results:
        parser.error(f"no scenario {args.scenario!r} in {args.results}")
    runs = results[0].get("runs", [])
    if not runs or "timeline" not in runs[args.run]:
        parser.error(f"{args.results} has no task timeline for run {args.run} (bench/dag_runs.py before 2026-11-28)")
    timeline = runs[args.run]["timeline"]
    rolling = args.events.name.startswith(ROLLING_PREFIX)
    logs = event_logs(args.events) if args.events.is_dir() and not rolling else [args.events]
    if not logs:
        parser.error(f"no event log in {args.events}")
    start = min(_epoch(entry[2]) for entry in timeline)
    end = max(_epoch(entry[3]) for entry in timeline)
    print(
        f"{results[0]['scenario']['name']}, run {runs[args.run]['run_id']}: {runs[args.run]['seconds']} s queued to end"
    )
    profile(timeline, root_queries(logs, start, end), args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
