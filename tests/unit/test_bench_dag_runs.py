"""The DAG-run benchmark's own arithmetic: task seconds, Spark jobs per application, the summary."""

from __future__ import annotations

import datetime as dt
import json

from bench import dag_runs


def test_task_seconds_sum_mapped_instances_under_their_short_name() -> None:
    instances = [
        {"task_id": "plan_tables", "start_date": "2026-01-01T10:00:00+00:00", "end_date": "2026-01-01T10:00:02+00:00"},
        {
            "task_id": "reconcile_table.compact_cdc",
            "map_index": 0,
            "start_date": "2026-01-01T10:00:10+00:00",
            "end_date": "2026-01-01T10:00:40.5+00:00",
        },
        {
            "task_id": "reconcile_table.compact_cdc",
            "map_index": 1,
            "start_date": "2026-01-01T10:00:10+00:00",
            "end_date": "2026-01-01T10:00:20+00:00",
        },
        {"task_id": "reconcile_table.reconcile", "start_date": None, "end_date": None},
    ]
    assert dag_runs.task_seconds(instances) == {"plan_tables": 2.0, "compact_cdc": 40.5, "reconcile": 0.0}


def test_spark_jobs_belong_to_the_task_running_when_the_application_started(tmp_path) -> None:
    def event_log(name: str, app: str, started: str, jobs: int) -> None:
        ms = int(dt.datetime.fromisoformat(started).timestamp() * 1000)
        lines = [{"Event": "SparkListenerApplicationStart", "App Name": app, "Timestamp": ms}]
        lines += [{"Event": "SparkListenerJobStart", "Job ID": i} for i in range(jobs)]
        lines += [{"Event": "SparkListenerJobEnd", "Job ID": i} for i in range(jobs)]
        (tmp_path / name).write_text("\n".join(json.dumps(line) for line in lines) + "\n")

    def instance(task: str, start: str, end: str) -> dict:
        return {"task_id": f"reconcile_table.{task}", "start_date": start, "end_date": end}

    tasks = [
        instance("validate", "2026-01-01T10:01:00+00:00", "2026-01-01T10:02:00+00:00"),
        instance("validate_repaired", "2026-01-01T10:03:00+00:00", "2026-01-01T10:04:00+00:00"),
    ]
    seen: set[str] = set()
    event_log("local-1", "validate:public.t", "2026-01-01T10:01:05+00:00", 5)
    event_log("local-2", "validate:public.t", "2026-01-01T10:03:05+00:00", 4)
    applications = dag_runs.spark_applications(tmp_path, seen)
    assert [a["jobs"] for a in applications] == [5, 4]
    assert dag_runs.spark_jobs_by_task(tasks, applications) == {"validate": 5, "validate_repaired": 4}
    event_log("local-3", "validate:public.t", "2026-01-01T11:00:00+00:00", 7)
    later = dag_runs.spark_applications(tmp_path, seen)
    assert [a["jobs"] for a in later] == [7]
    assert dag_runs.spark_jobs_by_task(tasks, later) == {}


def test_the_summary_gives_medians_and_judges_the_target() -> None:
    def run(seconds: float, compact: float) -> dict:
        return {
            "state": "success",
            "seconds": seconds,
            "tasks": {"compact_cdc": compact},
            "spark_jobs": {"compact_cdc": 9},
            "peak_rss_mib": 3000,
            "peak_jvm_rss_mib": 2500,
        }

    result = {
        "scenario": {"name": "demo", "rows": 60_000, "changes": 1_000, "redelivered": 0.05},
        "first_run": {"seconds": 200.0},
        "runs": [run(100.0, 40.0), run(80.0, 30.0), run(90.0, 50.0), {**run(10.0, 1.0), "state": "failed"}],
    }
    text = "\n".join(dag_runs.summary_lines(result))
    assert "median 90.0 s (min 80.0, max 100.0, n=3) (target <= 60 s: missed)" in text
    assert "| compact_cdc | 40.0 | 9 |" in text
    assert "median 3,000 MiB (JVMs 2,500 MiB)" in text
