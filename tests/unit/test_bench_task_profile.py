from __future__ import annotations

import datetime as dt
import io
import json

from bench import task_profile

T0 = dt.datetime(2026, 1, 1, 10, 0, tzinfo=dt.UTC)


def at(seconds: float) -> str:
    return (T0 + dt.timedelta(seconds=seconds)).isoformat()


def ms(seconds: float) -> int:
    return int((T0 + dt.timedelta(seconds=seconds)).timestamp() * 1000)


def execution(execution_id: int, root: int, session: str, start: float, end: float, node: str) -> list[dict]:
    return [
        {
            "Event": "org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionStart",
            "executionId": execution_id,
            "rootExecutionId": root,
            "physicalPlanDescription": f"== Physical Plan ==\n{node}\n+- Scan",
            "time": ms(start),
            "modifiedConfigs": str({"spark.app.name": session, "spark.sql.shuffle.partitions": "8"}),
        },
        {
            "Event": "org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionEnd",
            "executionId": execution_id,
            "time": ms(end),
        },
    ]


def job(job_id: int, execution_id: int, start: float, end: float) -> list[dict]:
    return [
        {
            "Event": "SparkListenerJobStart",
            "Job ID": job_id,
            "Submission Time": ms(start),
            "Properties": {"spark.sql.execution.id": str(execution_id)},
        },
        {"Event": "SparkListenerJobEnd", "Job ID": job_id, "Completion Time": ms(end)},
    ]


def test_queries_fold_into_their_root_and_belong_to_the_task_whose_window_and_session_they_match(tmp_path) -> None:
    """Two sessions share one server; the same job's session runs in two tasks (``validate`` and
    ``validate_repaired``); a sub-execution (a Delta file listing) counts under its root query."""
    events = [
        *execution(0, 0, "validate:public.a", 1.0, 3.0, "AdaptiveSparkPlan (384)"),
        *execution(1, 0, "validate:public.a", 1.5, 2.0, "Filter (2)"),
        *job(0, 1, 1.5, 1.9),
        *job(1, 0, 2.0, 2.9),
        *execution(2, 2, "compact_cdc:public.b", 2.0, 2.5, "Execute MergeIntoCommand (1)"),
        *job(2, 2, 2.0, 2.4),
        *execution(3, 3, "validate:public.a", 21.0, 21.5, "LocalTableScan (1)"),
        *execution(4, 4, "validate:public.a", 99.0, 99.5, "after the run"),
    ]
    log = tmp_path / "app-1"
    log.write_text("\n".join(json.dumps(event) for event in events) + "\n")
    timeline = [
        ["validate", 0, at(0), at(10)],
        ["compact_cdc", 1, at(0), at(5)],
        ["validate_repaired", 0, at(20), at(30)],
    ]
    queries = task_profile.root_queries([log], task_profile._epoch(at(0)), task_profile._epoch(at(30)))
    assert [(q.execution_id, q.sub_executions, q.jobs) for q in queries] == [(0, 2, 2), (2, 1, 1), (3, 1, 0)]

    out = io.StringIO()
    figures = task_profile.profile(timeline, queries, top=1, out=out)
    assert figures["validate:public.a"] == {
        "root_queries": 1,
        "sub_executions": 2,
        "jobs": 2,
        "job_seconds": 1.3,
        "seconds_in_queries": 2.0,
        "first_to_last_query": 2.0,
    }
    assert figures["compact_cdc:public.b"]["jobs"] == 1
    assert figures["validate_repaired:public.a"]["root_queries"] == 1
    assert "AdaptiveSparkPlan (384)" in out.getvalue()


def test_a_query_goes_to_its_own_tables_window_when_tasks_of_two_tables_overlap(tmp_path) -> None:
    """Ten tables: ``validate`` of one table and ``validate_repaired`` of another run at once under the
    same job's sessions; the windows' tables (recorded by the bench) keep them apart."""
    events = execution(0, 0, "validate:public.b", 5.0, 6.0, "AdaptiveSparkPlan (384)")
    log = tmp_path / "app-1"
    log.write_text("\n".join(json.dumps(event) for event in events) + "\n")
    timeline = [
        ["validate", 0, at(0), at(10), "public.a"],
        ["validate_repaired", 1, at(2), at(12), "public.b"],
    ]
    queries = task_profile.root_queries([log], task_profile._epoch(at(0)), task_profile._epoch(at(12)))
    assert task_profile.task_of(queries[0], timeline) == "validate_repaired:public.b"
    assert task_profile.task_of(queries[0], [entry[:4] for entry in timeline]) == "validate:public.b"  # older JSON
