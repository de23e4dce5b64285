"""The DAG-run benchmark's own arithmetic: task seconds, Spark jobs per task, the summary."""

from __future__ import annotations

import datetime as dt
import json

import pytest

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


def test_idle_seconds_are_the_run_time_in_which_no_task_ran() -> None:
    def at(second: float) -> str:
        return (dt.datetime(2026, 1, 1, 10, tzinfo=dt.UTC) + dt.timedelta(seconds=second)).isoformat()

    instances = [
        {"task_id": "plan_tables", "start_date": at(3), "end_date": at(5)},
        {"task_id": "reconcile_table.compact_cdc", "map_index": 0, "start_date": at(6), "end_date": at(20)},
        {"task_id": "reconcile_table.compact_cdc", "map_index": 1, "start_date": at(8), "end_date": at(12)},
        {"task_id": "reconcile_table.validate", "map_index": 0, "start_date": at(21.5), "end_date": at(30)},
        {"task_id": "reconcile_table.reconcile", "start_date": None, "end_date": None},
    ]
    # queued at 0: 3 s before the first task, 1 s and 1.5 s between tasks, 2 s after the last
    assert dag_runs.idle_seconds(at(0), at(32), instances) == 7.5
    assert dag_runs.idle_seconds(None, at(32), instances) == 0.0


def test_spark_jobs_belong_to_the_task_running_when_they_were_submitted(tmp_path) -> None:
    def ms(at: str) -> int:
        return int(dt.datetime.fromisoformat(at).timestamp() * 1000)

    def event_log(folder, name: str, started: str, submitted: list[str]) -> None:
        folder.mkdir(exist_ok=True)
        lines = [{"Event": "SparkListenerApplicationStart", "App Name": name, "Timestamp": ms(started)}]
        lines += [
            {"Event": "SparkListenerJobStart", "Job ID": i, "Submission Time": ms(at)} for i, at in enumerate(submitted)
        ]
        lines += [{"Event": "SparkListenerJobEnd", "Job ID": i} for i in range(len(submitted))]
        (folder / name).write_text("\n".join(json.dumps(line) for line in lines) + "\n")

    def instance(task: str, start: str, end: str) -> dict:
        return {"task_id": f"reconcile_table.{task}", "start_date": start, "end_date": end}

    tasks = [
        instance("validate", "2026-01-01T10:01:00+00:00", "2026-01-01T10:02:00+00:00"),
        instance("validate_repaired", "2026-01-01T10:03:00+00:00", "2026-01-01T10:04:00+00:00"),
    ]
    submit = tmp_path / "spark-submit"  # an application per task
    event_log(submit, "local-1", "2026-01-01T10:01:05+00:00", ["2026-01-01T10:01:10+00:00"] * 5)
    event_log(submit, "local-2", "2026-01-01T10:03:05+00:00", ["2026-01-01T10:03:10+00:00"] * 4)
    assert dag_runs.spark_jobs_by_task(tasks, dag_runs.spark_job_times(submit)) == {
        "validate": 5,
        "validate_repaired": 4,
    }
    server = tmp_path / "connect"  # one application, started before the run, with jobs of both tasks and of none
    submitted = ["2026-01-01T09:30:00+00:00", "2026-01-01T10:01:30+00:00", "2026-01-01T10:03:59+00:00"]
    event_log(server, "app-1", "2026-01-01T09:00:00+00:00", [*submitted, "2026-01-01T11:00:00+00:00"])
    assert dag_runs.spark_jobs_by_task(tasks, dag_runs.spark_job_times(server)) == {
        "validate": 1,
        "validate_repaired": 1,
    }
    rolling = tmp_path / "rolling" / "eventlog_v2_app-2"  # Spark 4's rolling log: a folder of parts
    rolling.parent.mkdir()
    event_log(rolling, "events_1_app-2", "2026-01-01T09:00:00+00:00", submitted[:2])
    (rolling / "appstatus_app-2").write_text("")
    assert dag_runs.spark_jobs_by_task(tasks, dag_runs.spark_job_times(rolling.parent)) == {"validate": 1}


def test_side_by_side_tasks_on_one_server_count_only_their_own_sessions_jobs(tmp_path) -> None:
    """Mapped tasks over two tables overlap on the server; each job names its session (``<job>:<table>``),
    so a task instance counts its own table's jobs of its own job, not its neighbours'."""

    def ms(at: str) -> int:
        return int(dt.datetime.fromisoformat(at).timestamp() * 1000)

    def job(i: int, at: str, session: str) -> dict:
        return {
            "Event": "SparkListenerJobStart",
            "Job ID": i,
            "Submission Time": ms(at),
            "Properties": {"spark.app.name": session},
        }

    at = "2026-01-01T10:01:30+00:00"
    lines = [
        job(0, at, "compact_cdc:public.a"),
        job(1, at, "compact_cdc:public.a"),
        job(2, at, "compact_cdc:public.b"),
        job(3, at, "validate:public.a"),
        {"Event": "SparkListenerJobStart", "Job ID": 4, "Submission Time": ms(at), "Properties": {}},
    ]
    (tmp_path / "app-1").write_text("\n".join(json.dumps(line) for line in lines) + "\n")

    def instance(task: str, table: str) -> dict:
        return {
            "task_id": f"reconcile_table.{task}",
            "rendered_map_index": table,
            "start_date": "2026-01-01T10:01:00+00:00",
            "end_date": "2026-01-01T10:02:00+00:00",
        }

    tasks = [
        instance("compact_cdc", "public.a"),
        instance("compact_cdc", "public.b"),
        instance("decide_repair", "public.b"),
    ]
    # compact_cdc: a's two, b's one, and the unnamed job once for each instance; decide_repair: only the unnamed job
    assert dag_runs.spark_jobs_by_task(tasks, dag_runs.spark_job_times(tmp_path)) == {
        "compact_cdc": 5,
        "decide_repair": 1,
    }


def test_the_summary_gives_medians_and_judges_the_target() -> None:
    def run(seconds: float, compact: float) -> dict:
        return {
            "state": "success",
            "seconds": seconds,
            "tasks": {"compact_cdc": compact},
            "spark_jobs": {"compact_cdc": 9},
            "idle_seconds": seconds / 10,
            "peak_rss_mib": 3000,
            "peak_jvm_rss_mib": 2500,
            "peak_pss_mib": 2000,
            "slot_release_seconds": seconds / 20,
            "slot_release_longest": 5.1,
            "cpu_busy_share": seconds / 100,
            "cpu_seconds": {"spark connect server": seconds, "airflow scheduler": seconds / 2},
        }

    result = {
        "scenario": {"name": "demo", "rows": 60_000, "changes": 1_000, "redelivered": 0.05},
        "first_run": {"seconds": 200.0},
        "runs": [run(100.0, 40.0), run(80.0, 30.0), run(90.0, 50.0), {**run(10.0, 1.0), "state": "failed"}],
    }
    text = "\n".join(dag_runs.summary_lines(result))
    assert "median 90.0 s (min 80.0, max 100.0, n=3) (target <= 60 s: missed)" in text
    assert "| compact_cdc | 40.0 | 9 |" in text
    assert "| no task running (scheduling, task start-up) | 9.0 | - |" in text
    assert "median 3,000 MiB (JVMs 2,500 MiB); proportional (shared pages counted once): 2,000 MiB" in text
    assert "Executor slots held after their task ended: median 4.5 s per run (longest single wait 5.1 s)" in text
    assert (
        "cores 90% busy over the run; CPU seconds per service (medians): "
        "spark connect server 90.0, airflow scheduler 45.0" in text
    )


def test_cpu_use_counts_each_services_tree_with_its_reaped_children_and_the_machines_busy_share() -> None:
    """The meter reads the kernel's counters: a child that spins and exits while the run goes on is
    counted in the service whose process reaped it, and the machine was busy at least that long."""
    import os
    import subprocess
    import sys

    spin = "import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass"
    with dag_runs.CpuUse({"bench": [os.getpid()], "gone": [2**22 + 7]}) as cpu:
        subprocess.run([sys.executable, "-c", spin], check=True)  # exits and is reaped before the run ends
    assert cpu.seconds["bench"] >= 0.45
    assert cpu.seconds["gone"] == 0.0  # no such process: nothing counted, nothing raised
    assert 0.0 < cpu.busy_share <= 1.0


def test_a_compared_spark_setting_reaches_the_spark_defaults_beside_the_event_log(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    events = dag_runs.spark_event_logs(tmp_path, {"spark.sql.adaptive.enabled": "false"})
    defaults = (tmp_path / "bench-spark-conf" / "spark-defaults.conf").read_text().splitlines()
    assert f"spark.eventLog.dir file://{events}" in defaults
    assert defaults[-1] == "spark.sql.adaptive.enabled false"


def test_a_spark_setting_without_a_value_is_refused_before_anything_starts(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        dag_runs.main(["--spark-conf", "spark.sql.adaptive.enabled"])
    assert exit_.value.code == 2
    assert "--spark-conf takes KEY=VALUE" in capsys.readouterr().err


def test_the_ten_table_scenario_names_its_tables_in_a_configuration_the_jobs_accept(tmp_path) -> None:
    import yaml

    from cdc_reconcile.config import load_config

    scenario = dag_runs.SCENARIOS["ten-tables"]
    assert scenario.table_names[0] == "public.bench_t01" and scenario.table_names[-1] == "public.bench_t10"
    assert dag_runs.SCENARIOS["demo"].table_names == [dag_runs.TABLE]
    path = tmp_path / "tables.yaml"
    path.write_text(yaml.safe_dump(dag_runs.tables_config(scenario.table_names, "cdc")))
    config = load_config(path)
    assert [t.name for t in config.tables] == scenario.table_names
    assert {tuple(t.key) for t in config.tables} == {("id",)}


def test_the_summary_of_several_tables_says_the_sizes_are_per_table() -> None:
    result = {
        "scenario": {"name": "ten-tables", "rows": 100_000, "changes": 10_000, "redelivered": 0.0, "tables": 10},
        "first_run": {"seconds": 900.0},
        "runs": [],
    }
    assert dag_runs.summary_lines(result)[0] == (
        "## ten-tables: 10 tables, 100,000 rows, 10,000 changes per run per table"
    )


def test_every_task_instance_of_a_run_is_read_past_the_apis_first_page() -> None:
    """Airflow's REST API gives 50 task instances unless asked; a ten-table run has 111."""
    from urllib.parse import parse_qs, urlparse

    from cdc_dev.demo import AirflowApi

    instances = [{"task_id": "reconcile_table.compact_cdc", "map_index": i} for i in range(111)]
    asked = []

    class Pages(AirflowApi):
        def __init__(self) -> None:  # no server: the pages below are what Airflow answers
            pass

        def get(self, path: str) -> dict:
            query = parse_qs(urlparse(path).query)
            limit, offset = min(int(query["limit"][0]), 100), int(query["offset"][0])
            asked.append((limit, offset))
            return {"task_instances": instances[offset : offset + limit], "total_entries": len(instances)}

    assert Pages().task_instances("manual__1") == instances
    assert asked == [(100, 0), (100, 100)]


def test_slot_release_delays_are_read_from_the_schedulers_log_for_one_run(tmp_path) -> None:
    run = "manual__2026-11-28T12:26:31.953330+00:00"
    other = "manual__2026-11-28T12:28:04.870213+00:00"

    def finished(heard: str, task: str, run_id: str, end: str) -> str:
        return (
            f"{heard} [info     ] TaskInstance Finished: dag_id=cdc_reconciliation, task_id={task}, run_id={run_id}, "
            f"map_index=0, ti_id=01a2, run_start_date=2026-11-28 12:26:46.089534+00:00, run_end_date={end}, "
            "run_duration=46.79, state=success, executor=PreloadingLocalExecutor(parallelism=4)"
        )

    log = tmp_path / "airflow-scheduler.log"
    log.write_text(
        "\n".join(
            [
                "2026-11-28T12:27:38.005313Z [info     ] Received executor event with state success",
                finished("2026-11-28T12:27:38.010294Z", "compact_cdc", run, "2026-11-28 12:27:32.885387+00:00"),
                finished("2026-11-28T12:27:57.418626Z", "validate", run, "2026-11-28 12:27:57.124245+00:00"),
                finished("2026-11-28T12:28:05.347015Z", "plan_tables", other, "2026-11-28 12:28:05.059122+00:00"),
                finished("2026-11-28T12:28:06.000000Z", "reconcile", run, "None"),
            ]
        )
        + "\n"
    )
    assert dag_runs.slot_release_delays(log, run) == [5.12, 0.29]
    assert dag_runs.slot_release_delays(tmp_path / "missing.log", run) == []


def test_tree_memory_counts_a_python_roots_children_but_not_the_root() -> None:
    """The scheduler's own memory is not the run's: its tree's descendants count, a non-JVM root does not."""
    import subprocess
    import sys

    import psutil

    hold = "import time\nblock = b'x' * (64 * 2**20)\nprint('ready', flush=True)\ntime.sleep(60)"
    parent = (  # a root of its own: this test's process may have a JVM child (the unit tests' Spark)
        "import subprocess, sys\n"
        f"child = subprocess.Popen([sys.executable, '-c', {hold!r}], stdout=subprocess.PIPE, text=True)\n"
        "print(child.pid, child.stdout.readline().strip(), flush=True)\n"
        "child.wait()"
    )
    root = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    try:
        child_pid, ready = root.stdout.readline().split()
        assert ready == "ready"
        meter = dag_runs.TreeMemory([root.pid])
        meter._sample(proportional_too=True)
        child_rss = psutil.Process(int(child_pid)).memory_info().rss
        root_rss = psutil.Process(root.pid).memory_info().rss
    finally:
        for process in psutil.Process(root.pid).children(recursive=True):
            process.kill()
        root.kill()
        root.wait()
    assert meter.peak_total >= 64 * 2**20 and meter.peak_pss > 0 and meter.peak_jvm == 0
    assert abs(meter.peak_total - child_rss) < root_rss / 2, "the root is not counted"
