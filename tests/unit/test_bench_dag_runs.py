"""The DAG-run benchmark's own arithmetic: task seconds, Spark jobs per application, the summary."""

from __future__ import annotations

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


def test_spark_jobs_are_counted_per_application_once(tmp_path) -> None:
    def event_log(name: str, app: str, jobs: int) -> None:
        lines = [{"Event": "SparkListenerApplicationStart", "App Name": app}]
        lines += [{"Event": "SparkListenerJobStart", "Job ID": i} for i in range(jobs)]
        lines += [{"Event": "SparkListenerJobEnd", "Job ID": i} for i in range(jobs)]
        (tmp_path / name).write_text("\n".join(json.dumps(line) for line in lines) + "\n")

    seen: set[str] = set()
    event_log("local-1", "cdc_compact_cdc", 12)
    event_log("local-2", "cdc_validate", 5)
    assert dag_runs.spark_jobs_by_app(tmp_path, seen) == {"cdc_compact_cdc": 12, "cdc_validate": 5}
    event_log("local-3", "cdc_compact_cdc", 7)
    assert dag_runs.spark_jobs_by_app(tmp_path, seen) == {"cdc_compact_cdc": 7}


def test_the_summary_gives_medians_and_judges_the_target() -> None:
    def run(seconds: float, compact: float) -> dict:
        return {
            "state": "success",
            "seconds": seconds,
            "tasks": {"compact_cdc": compact},
            "spark_jobs": {"cdc_compact_cdc": 9},
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
