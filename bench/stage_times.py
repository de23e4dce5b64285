"""Where a Spark application spent its time, stage by stage, from its event log.

``profile_compact`` times whole writes; this answers the next question: which stages inside them
took the time, with how many tasks (a single-task stage uses one of the two cores), and how much they
read, shuffled and spilled. Enable the event log for a run without touching the code, e.g.

    mkdir -p /tmp/spark-conf /tmp/spark-events
    printf 'spark.eventLog.enabled true\\nspark.eventLog.dir file:///tmp/spark-events\\n' \\
        > /tmp/spark-conf/spark-defaults.conf
    SPARK_CONF_DIR=/tmp/spark-conf bash bench/run.sh --sizes 100000 --repeats 1

then ``.venv/bin/python -m bench.stage_times /tmp/spark-events/<application> [--top 25]``.
"""

from __future__ import annotations

import argparse
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

METRICS = {
    "internal.metrics.executorRunTime": "run_ms",
    "internal.metrics.input.bytesRead": "input",
    "internal.metrics.shuffle.read.remoteBytesRead": "shuffle_read",
    "internal.metrics.shuffle.read.localBytesRead": "shuffle_read",
    "internal.metrics.shuffle.write.bytesWritten": "shuffle_write",
    "internal.metrics.output.bytesWritten": "output",
    "internal.metrics.diskBytesSpilled": "spilled",
}


@dataclass
class Stage:
    stage_id: int
    name: str
    tasks: int
    wall_ms: int
    totals: dict[str, int]
    job: int | None = None
    description: str = ""


def _accumulated(info: dict[str, Any]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for acc in info.get("Accumulables", []):
        name = METRICS.get(acc.get("Name", ""))
        if name:
            totals[name] = totals.get(name, 0) + int(acc.get("Value", 0) or 0)
    return totals


ROLLING_PREFIX = "eventlog_v2_"
"""Spark 4's rolling event log: a folder of parts per application."""


def event_logs(folder: Path) -> list[Path]:
    """The event logs in Spark's event log folder: one file per application, or one rolling folder each."""
    return sorted(p for p in folder.iterdir() if p.is_file() or p.name.startswith(ROLLING_PREFIX))


def event_lines(event_log: Path) -> Iterator[str]:
    """The JSON lines of an event log: one file, or Spark 4's rolling folder; zstd files decompressed."""
    files = (
        sorted(event_log.glob("events_*"), key=lambda p: int(p.name.split("_")[1]))
        if event_log.is_dir()
        else [event_log]
    )
    for path in files:
        if path.suffix == ".zstd":
            import zstandard  # only for compressed logs (Spark 4's default)

            with path.open("rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True) as z:
                yield from io.TextIOWrapper(z, encoding="utf-8")
        else:
            with path.open(encoding="utf-8") as text:
                yield from text


def read_stages(event_log: Path) -> tuple[list[Stage], int]:
    """Completed stages in completion order, and the application's wall time in ms."""
    stages: list[Stage] = []
    job_of: dict[int, int] = {}
    description_of: dict[int, str] = {}
    started = ended = 0
    for line in event_lines(event_log):
        try:
            event = json.loads(line)
        except json.JSONDecodeError:  # the last line of a log still being written
            continue
        kind = event.get("Event")
        if kind == "SparkListenerApplicationStart":
            started = event["Timestamp"]
        elif kind == "SparkListenerApplicationEnd":
            ended = event["Timestamp"]
        elif kind == "SparkListenerJobStart":
            props = event.get("Properties") or {}
            for stage_id in event.get("Stage IDs", []):
                job_of[stage_id] = event["Job ID"]
                description_of[stage_id] = props.get("spark.job.description") or props.get("callSite.short", "")
        elif kind == "SparkListenerStageCompleted":
            info = event["Stage Info"]
            if "Completion Time" not in info:
                continue
            stages.append(
                Stage(
                    stage_id=info["Stage ID"],
                    name=info["Stage Name"],
                    tasks=info["Number of Tasks"],
                    wall_ms=info["Completion Time"] - info["Submission Time"],
                    totals=_accumulated(info),
                    job=job_of.get(info["Stage ID"]),
                    description=description_of.get(info["Stage ID"], ""),
                )
            )
    return stages, (ended - started) if ended else 0


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f}" if n else "-"


def report(stages: list[Stage], app_ms: int, top: int) -> str:
    wall = sum(s.wall_ms for s in stages)
    single = sum(s.wall_ms for s in stages if s.tasks == 1)
    lines = [
        f"{len(stages)} stages, {wall / 1000:,.1f} s of stage wall time"
        + (f" in an application of {app_ms / 1000:,.1f} s" if app_ms else "")
        + f"; single-task stages {single / 1000:,.1f} s ({single / max(wall, 1):.0%})",
    ]
    by_what: dict[str, list[Stage]] = {}
    for s in stages:
        by_what.setdefault(s.description or s.name, []).append(s)
    lines += ["", "| what | jobs | stages | wall s | task run s |", "| --- | ---: | ---: | ---: | ---: |"]
    for what, group in sorted(by_what.items(), key=lambda kv: -sum(s.wall_ms for s in kv[1])):
        jobs = len({s.job for s in group})
        run = sum(s.totals.get("run_ms", 0) for s in group)
        lines.append(
            f"| {what} | {jobs} | {len(group)} | {sum(s.wall_ms for s in group) / 1000:,.2f} | {run / 1000:,.2f} |"
        )
    lines += [
        "",
        "| stage | job | tasks | wall s | task run s | input MiB | shuffle write MiB | shuffle read MiB "
        "| spilled MiB | what |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for s in sorted(stages, key=lambda s: s.wall_ms, reverse=True)[:top]:
        t = s.totals
        lines.append(
            f"| {s.stage_id} | {s.job if s.job is not None else '-'} | {s.tasks} | {s.wall_ms / 1000:,.2f} "
            f"| {t.get('run_ms', 0) / 1000:,.2f} | {_mib(t.get('input', 0))} | {_mib(t.get('shuffle_write', 0))} "
            f"| {_mib(t.get('shuffle_read', 0))} | {_mib(t.get('spilled', 0))} | {s.description or s.name} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("event_log", type=Path)
    parser.add_argument("--top", type=int, default=25, help="the slowest stages to list")
    args = parser.parse_args(argv)
    stages, app_ms = read_stages(args.event_log)
    print(report(stages, app_ms, args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
