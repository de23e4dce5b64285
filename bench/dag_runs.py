"""Whole DAG runs through the scheduler, timed the way a user waits for them.

For each scenario: a fresh embedded stack with Airflow on the bench's own ports, ``public.customers``
loaded with N rows before the connector starts (its initial snapshot is N ``r`` events), one first
DAG run that builds the lake (not measured), then ``--repeats`` measured runs. A scenario of several
tables (``ten-tables``) creates ``public.bench_t01``... of the same shape instead, puts them on the
connector and in a table configuration of its own (``CDC_TABLES_CONFIG``), and triggers each run over
all of them. Before each measured run the scenario's changes are made in PostgreSQL (updates,
deletes, inserts in one transaction per table) and, where the scenario repairs, a share of the new
change records is produced again to the topic by a plain producer (exact redeliveries, what
at-least-once delivery does), so the suite fails and the reconcile and second validation run too.

Each run is triggered through the REST API like the UI's trigger form and timed from ``queued_at`` to
``end_date`` as Airflow recorded them. Per task: wall seconds from the task instances, and the Spark
jobs submitted while it ran, from the Spark event logs (``spark.eventLog.enabled`` through
``SPARK_CONF_DIR``, which the scheduler's ``spark-submit`` and the Spark Connect server inherit). Peak
memory: the sum of the resident memory of every JVM and Python process under the Airflow scheduler,
and of the Spark Connect server when the tasks run on one (the default; ``CDC_SPARK_CONNECT=off``: a
spark-submit per task), sampled every 0.25 s. CPU: how busy the machine's cores were over the run and
the CPU seconds of each service's process tree (:func:`stack_services`); from the scheduler's log, how
long each executor slot stayed taken after its task ended. Beside each run, the same run's changes
counted from Kafka with a plain consumer say what the run had to read.

Results go to ``bench/results/dag-runs-<timestamp>.json`` and ``.md``. Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import json
import os
import re
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import psycopg
import requests
import yaml
from confluent_kafka import Consumer, TopicPartition
from psycopg import sql

from bench import stats
from bench.bench import machine, redeliver
from bench.stage_times import event_lines, event_logs
from cdc_dev import bench_targets
from cdc_dev.demo import AirflowApi, follow_run
from cdc_dev.stack import Stack, StackConfig
from cdc_dev.stack.process import wait_until
from cdc_reconcile import state_store

DAG_ID = "cdc_reconciliation"
TABLE = "public.customers"
ROOT = Path(__file__).resolve().parent
WATERMARK_TABLE = "public.cdc_watermark"


@dataclasses.dataclass(frozen=True)
class Scenario:
    """Tables of ``rows`` rows each, the changes made to each before a measured run, the share redelivered."""

    name: str
    rows: int
    changes: int
    redelivered: float
    tables: int = 1

    @property
    def target_seconds(self) -> float | None:
        return bench_targets.DAG_RUN_SECONDS.get(self.name)

    @property
    def table_names(self) -> list[str]:
        """The demo's ``public.customers`` alone, or ``public.bench_t01``... of its shape."""
        if self.tables == 1:
            return [TABLE]
        return [f"public.bench_t{n:02d}" for n in range(1, self.tables + 1)]


SCENARIOS = {
    "demo": Scenario("demo", rows=60_000, changes=1_000, redelivered=0.05),
    "hourly-1m": Scenario("hourly-1m", rows=1_000_000, changes=100_000, redelivered=0.0),
    "ten-tables": Scenario("ten-tables", rows=100_000, changes=10_000, redelivered=0.0, tables=10),
}


def _name(table: str) -> sql.Identifier:
    schema, _, name = table.partition(".")
    return sql.Identifier(schema, name)


def create_tables(dsn: str, tables: list[str]) -> None:
    """Tables of ``public.customers``' shape (its columns, key and defaults), full before-images."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in tables:
            if table == TABLE:
                continue
            like = sql.SQL("CREATE TABLE IF NOT EXISTS {} (LIKE public.customers INCLUDING ALL)")
            conn.execute(like.format(_name(table)))
            conn.execute(sql.SQL("ALTER TABLE {} REPLICA IDENTITY FULL").format(_name(table)))


def tables_config(tables: list[str], topic_prefix: str) -> dict[str, Any]:
    """The table configuration (``CDC_TABLES_CONFIG``'s shape) that names the scenario's tables."""
    return {
        "topic_prefix": topic_prefix,
        "watermark_table": WATERMARK_TABLE,
        "tables": [{"name": table, "key": ["id"]} for table in tables],
    }


def load_rows(dsn: str, rows: int, table: str = TABLE) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (name, email, balance, attrs) "
                "SELECT 'customer ' || g, 'c' || g || '@example.com', (g % 100000) / 100.0, "
                "jsonb_build_object('g', g) FROM generate_series(1, {}) g"
            ).format(_name(table), sql.Literal(rows))
        )


def make_changes(dsn: str, changes: int, seed: int, table: str = TABLE) -> dict[str, int]:
    """80 % updates, 10 % deletes, 10 % inserts of random rows, in one transaction."""
    deletes = inserts = changes // 10
    updates = changes - deletes - inserts
    name = _name(table)
    with psycopg.connect(dsn) as conn:
        conn.execute("SELECT setseed(%s)", (seed / 2**31,))
        conn.execute(
            sql.SQL(
                "UPDATE {0} SET balance = balance + 1 WHERE id IN (SELECT id FROM {0} ORDER BY random() LIMIT {1})"
            ).format(name, sql.Literal(updates))
        )
        conn.execute(
            sql.SQL("DELETE FROM {0} WHERE id IN (SELECT id FROM {0} ORDER BY random() LIMIT {1})").format(
                name, sql.Literal(deletes)
            )
        )
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (name, email, balance, attrs) "
                "SELECT 'new ' || g, 'n' || g || '@example.com', 1.0, '{{}}'::jsonb FROM generate_series(1, {}) g"
            ).format(name, sql.Literal(inserts))
        )
    return {"updates": updates, "deletes": deletes, "inserts": inserts}


def spark_event_logs(run_dir: Path, extra: dict[str, str] | None = None) -> Path:
    """A ``SPARK_CONF_DIR`` whose defaults turn on event logs (and set ``extra``, for an A/B of a Spark
    setting); returns the folder the logs go to."""
    conf_dir = run_dir / "bench-spark-conf"
    events = run_dir / "spark-events"
    conf_dir.mkdir(parents=True, exist_ok=True)
    events.mkdir(parents=True, exist_ok=True)
    # one plain JSON-lines file per application (Spark 4 rolls and compresses event logs by default)
    (conf_dir / "spark-defaults.conf").write_text(
        f"spark.eventLog.enabled true\nspark.eventLog.dir file://{events}\n"
        "spark.eventLog.rolling.enabled false\nspark.eventLog.compress false\n"
        + "".join(f"{key} {value}\n" for key, value in (extra or {}).items())
    )
    os.environ["SPARK_CONF_DIR"] = str(conf_dir)
    return events


def spark_job_times(events: Path) -> list[tuple[int, str | None]]:
    """Every Spark job in the event logs: its submission time (epoch ms) and the name of the session that
    submitted it (``<job>:<table>``, set by the job's ``build_session``), from one log per
    ``spark-submit`` application or the Spark Connect server's one log for all tasks."""
    jobs = []
    for log in event_logs(events):
        for line in event_lines(log):
            if '"SparkListenerJobStart"' in line:
                event = json.loads(line)
                jobs.append((event.get("Submission Time", 0), event.get("Properties", {}).get("spark.app.name")))
    return jobs


def _runs_job(ti: dict[str, Any], session: str | None) -> bool:
    """Whether the task instance can have submitted a job of ``session`` (``<job>:<table>``): its task is
    that job's (``validate`` runs for ``validate`` and ``validate_repaired``) over that table. A job
    without a session name could be any task's."""
    if not session or ":" not in session:
        return True
    job, table = session.split(":", 1)
    mapped_table = ti.get("rendered_map_index")
    return ti["task_id"].rsplit(".", 1)[-1].startswith(job) and (not mapped_table or mapped_table == table)


def spark_jobs_by_task(task_instances: list[dict[str, Any]], jobs: list[tuple[int, str | None]]) -> dict[str, int]:
    """Spark jobs per task: a job belongs to the task instance that was running when it was submitted
    and whose task and table its session names, so tasks running side by side on one server (mapped over
    tables) do not count each other's jobs."""
    counts: dict[str, int] = {}
    for ti in task_instances:
        if not ti.get("start_date") or not ti.get("end_date"):
            continue
        start = dt.datetime.fromisoformat(ti["start_date"]).timestamp() * 1000
        end = dt.datetime.fromisoformat(ti["end_date"]).timestamp() * 1000
        count = sum(1 for submitted, session in jobs if start <= submitted <= end and _runs_job(ti, session))
        if count:
            name = ti["task_id"].rsplit(".", 1)[-1]
            counts[name] = counts.get(name, 0) + count
    return counts


PSS_EVERY = 8  # samples: the proportional set size every 2 s, resident memory every 0.25 s


def process_tree(root: int, *, with_root: Callable[[psutil.Process], bool] = lambda _: True) -> list[psutil.Process]:
    """A process's descendants, and the process itself when ``with_root`` says so (raises psutil.Error
    when it is gone)."""
    top = psutil.Process(root)
    return [top, *top.children(recursive=True)] if with_root(top) else top.children(recursive=True)


class TreeMemory:
    """Peak summed resident memory of process trees: the scheduler's (task runners and their JVMs) and,
    on Spark Connect, the server's."""

    def __init__(self, root_pids: list[int], interval: float = 0.25) -> None:
        self.root_pids = root_pids
        self.interval = interval
        self.peak_total = 0
        self.peak_jvm = 0
        # resident memory summed per process counts pages forked processes share once per process; the
        # proportional set size (PSS) splits them, so the tree's PSS is what it occupies
        self.peak_pss = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tree-rss", daemon=True)

    def _sample(self, proportional_too: bool) -> None:
        total = jvm = proportional = 0
        for root in self.root_pids:
            with contextlib.suppress(psutil.Error):
                for process in process_tree(root, with_root=lambda top: "java" in top.name()):
                    with contextlib.suppress(psutil.Error):
                        rss = process.memory_info().rss
                        total += rss
                        if "java" in process.name():
                            jvm += rss
                    if proportional_too:  # reads /proc/<pid>/smaps: tens of ms for a JVM
                        with contextlib.suppress(psutil.Error, AttributeError):
                            proportional += process.memory_full_info().pss
        self.peak_total = max(self.peak_total, total)
        self.peak_jvm = max(self.peak_jvm, jvm)
        self.peak_pss = max(self.peak_pss, proportional)

    def _run(self) -> None:
        samples = 0
        while not self._stop.is_set():
            self._sample(proportional_too=samples % PSS_EVERY == 0)
            samples += 1
            self._stop.wait(self.interval)

    def __enter__(self) -> TreeMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds of a process and its descendants, with those of the children they have reaped (a task
    process that exited counts in the worker that waited for it)."""
    seconds = 0.0
    with contextlib.suppress(psutil.Error):
        for process in process_tree(root):
            with contextlib.suppress(psutil.Error):
                times = process.cpu_times()
                seconds += times.user + times.system + times.children_user + times.children_system
    return seconds


class CpuUse:
    """CPU over a run: how busy the machine's cores were, and the seconds each service's process tree
    spent (the Spark Connect server, the Airflow scheduler with its task processes, PostgreSQL...). A run
    whose cores were nearly all busy is bound by its work; one with idle cores waits (on round trips, the
    scheduler, a single-threaded step)."""

    def __init__(self, services: dict[str, list[int]]) -> None:
        self.services = services
        self.busy_share = 0.0
        self.seconds: dict[str, float] = {}

    def _per_service(self) -> dict[str, float]:
        return {name: sum(tree_cpu_seconds(pid) for pid in pids) for name, pids in self.services.items()}

    def __enter__(self) -> CpuUse:
        self._machine = psutil.cpu_times()
        self._start = self._per_service()
        return self

    def __exit__(self, *exc: object) -> None:
        after = psutil.cpu_times()
        total = sum(after) - sum(self._machine)
        idle = (after.idle + getattr(after, "iowait", 0.0)) - (
            self._machine.idle + getattr(self._machine, "iowait", 0.0)
        )
        self.busy_share = max(0.0, 1 - idle / total) if total > 0 else 0.0
        end = self._per_service()
        self.seconds = {name: round(max(0.0, end[name] - self._start[name]), 1) for name in end}


def stack_services(stack: Stack) -> dict[str, list[int]]:
    """The process trees of the stack's services, by name, for :class:`CpuUse`."""
    services = {f"airflow {name}": [process.pid()] for name, process in stack.airflow.processes.items()}
    services["spark connect server"] = stack.spark_connect.pids()
    services["postgresql"] = stack.postgres.server_pids()
    services["kafka"] = [stack.kafka.process.pid()]
    services["kafka connect"] = [stack.connect.process.pid()]
    return {name: [pid for pid in pids if pid] for name, pids in services.items()}


def _seconds(start: str | None, end: str | None) -> float:
    if not start or not end:
        return 0.0
    return (dt.datetime.fromisoformat(end) - dt.datetime.fromisoformat(start)).total_seconds()


def task_seconds(task_instances: list[dict[str, Any]]) -> dict[str, float]:
    """Wall seconds per task (mapped instances summed), short names without the group."""
    seconds: dict[str, float] = {}
    for ti in task_instances:
        name = ti["task_id"].rsplit(".", 1)[-1]
        seconds[name] = round(seconds.get(name, 0.0) + _seconds(ti.get("start_date"), ti.get("end_date")), 1)
    return seconds


def idle_seconds(queued_at: str | None, end_date: str | None, task_instances: list[dict[str, Any]]) -> float:
    """Seconds of the run, queued to end, in which none of its tasks ran: the scheduler's and the task
    runners' own share (picking up the run, queueing each task, starting its process), not the work's."""
    if not queued_at or not end_date:
        return 0.0
    spans = sorted(
        (dt.datetime.fromisoformat(ti["start_date"]), dt.datetime.fromisoformat(ti["end_date"]))
        for ti in task_instances
        if ti.get("start_date") and ti.get("end_date")
    )
    idle, covered = 0.0, dt.datetime.fromisoformat(queued_at)
    for start, end in spans:
        if start > covered:
            idle += (start - covered).total_seconds()
        covered = max(covered, end)
    idle += max(0.0, (dt.datetime.fromisoformat(end_date) - covered).total_seconds())
    return round(idle, 1)


FINISHED = re.compile(r"^(\S+) .*TaskInstance Finished: .*?run_id=(\S+), .*?run_end_date=([^,]+),")


def slot_release_delays(scheduler_log: Path, run_id: str) -> list[float]:
    """Per task instance of the run: seconds from its recorded end to the scheduler hearing from the
    executor that it finished, by the scheduler's log. The executor's slot is taken until then, so with
    every slot busy the next task waits that long."""
    delays = []
    with contextlib.suppress(OSError), scheduler_log.open() as lines:
        for line in lines:
            found = FINISHED.match(line) if "TaskInstance Finished" in line else None
            if found and found[2] == run_id and found[3] != "None":
                heard = dt.datetime.fromisoformat(found[1])
                ended = dt.datetime.fromisoformat(found[3])
                delays.append(round((heard - ended).total_seconds(), 2))
    return delays


def range_records(config: StackConfig, run_id: str, tables: list[str]) -> int:
    """Records in the run's sealed ranges of ``tables``, counted from Kafka's offsets (no product reader)."""
    total = 0
    with state_store.connect(config.state_dsn) as conn:
        for table in tables:
            sealed = state_store.get_range(conn, run_id, table)
            total += sum(sealed.end[p] - sealed.start.get(p, 0) for p in sealed.end)
    return total


def topic_records(bootstrap: str, topic: str) -> int:
    """Records in ``topic`` by its partitions' offsets (0 while Debezium has not created it)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-ready-{os.getpid()}"})
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return 0
        total = 0
        for partition in metadata.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            total += high - low
        return total
    finally:
        consumer.close()


def trigger_and_follow(api: AirflowApi, stack: Stack, events: Path, timeout: float, tables: list[str]) -> dict:
    roots = [stack.airflow.processes["scheduler"].pid(), *stack.spark_connect.pids()]
    with TreeMemory([pid for pid in roots if pid]) as memory, CpuUse(stack_services(stack)) as cpu:
        run_id = api.trigger({"tables": tables})
        state, task_instances = follow_run(api, run_id, timeout)
    run = api.get(f"/dags/{DAG_ID}/dagRuns/{run_id}")
    released = slot_release_delays(stack.airflow.processes["scheduler"].log_file, run_id)
    return {
        "run_id": run_id,
        "state": state,
        "seconds": round(_seconds(run.get("queued_at"), run.get("end_date")), 1),
        "tasks": task_seconds(task_instances),
        "idle_seconds": idle_seconds(run.get("queued_at"), run.get("end_date"), task_instances),
        # each task instance's start, end and table, to cut a Spark event log into tasks (bench/task_profile.py)
        "timeline": [
            [
                ti["task_id"].rsplit(".", 1)[-1],
                ti.get("map_index", -1),
                ti["start_date"],
                ti["end_date"],
                ti.get("rendered_map_index"),
            ]
            for ti in sorted(task_instances, key=lambda ti: ti.get("start_date") or "")
            if ti.get("start_date") and ti.get("end_date")
        ],
        "spark_jobs": spark_jobs_by_task(task_instances, spark_job_times(events)),
        "peak_rss_mib": round(memory.peak_total / 2**20),
        "peak_jvm_rss_mib": round(memory.peak_jvm / 2**20),
        "peak_pss_mib": round(memory.peak_pss / 2**20),
        "slot_release_seconds": round(sum(released), 1),
        "slot_release_longest": max(released, default=0.0),
        "cpu_busy_share": round(cpu.busy_share, 3),
        "cpu_seconds": cpu.seconds,
    }


def run_scenario(
    scenario: Scenario, repeats: int, timeout: float, spark_conf: dict[str, str] | None = None
) -> dict[str, Any]:
    os.environ["CDC_AIRFLOW_SCHEDULES"] = "off"
    tables = scenario.table_names
    config = StackConfig()
    if tables != [TABLE]:
        config = dataclasses.replace(config, captured_tables=(*tables, WATERMARK_TABLE))
    stack = Stack(config, airflow=True)
    stack.down(destroy=True)
    events = spark_event_logs(config.run_dir, spark_conf)
    callers_config = os.environ.get("CDC_TABLES_CONFIG")  # restored for the next scenario
    if tables != [TABLE]:
        tables_file = config.run_dir / "bench-tables.yaml"
        tables_file.write_text(yaml.safe_dump(tables_config(tables, config.topic_prefix), sort_keys=False))
        os.environ["CDC_TABLES_CONFIG"] = str(tables_file)  # the stack hands it to Airflow's tasks
    try:
        stack.up(register=False)
        create_tables(config.pg_dsn, tables)
        for table in tables:
            load_rows(config.pg_dsn, scenario.rows, table)
        stack.register_connector()
        for table in tables:
            topic = config.topic_for(table)
            wait_until(
                lambda topic=topic: topic_records(config.bootstrap_servers, topic) >= scenario.rows,
                timeout=900,
                what=f"Debezium's initial snapshot of {scenario.rows:,} rows in {topic}",
                interval=2,
            )
        api = AirflowApi(config)
        wait_until(lambda: _dag_ready(api), timeout=300, what=f"DAG {DAG_ID} parsed", interval=2)
        print(
            f"== {scenario.name}: first run over {len(tables)} x {scenario.rows:,} rows (builds the lake; not measured)"
        )
        first = trigger_and_follow(api, stack, events, timeout, tables)
        print(f"   {first['state']} in {first['seconds']} s")
        if first["state"] != "success":  # a table without its lake would fold its whole topic in a measured run
            raise SystemExit(
                f"{scenario.name}: the first run ended {first['state']}; see the task logs under {config.run_dir}"
            )
        previous = first["run_id"]
        runs = []
        for repeat in range(repeats):
            changes: dict[str, int] = {}
            for table in tables:
                for kind, count in make_changes(config.pg_dsn, scenario.changes, repeat + 1, table).items():
                    changes[kind] = changes.get(kind, 0) + count
            redelivered = 0
            for table in tables if scenario.redelivered else ():
                with state_store.connect(config.state_dsn) as conn:
                    start = state_store.get_range(conn, previous, table).end
                redelivered += redeliver(
                    config.bootstrap_servers,
                    config.topic_for(table),
                    start,
                    scenario.redelivered,
                    scenario.changes,
                    timeout=300,
                )
            run = trigger_and_follow(api, stack, events, timeout, tables)
            run.update(
                changes=changes, redelivered=redelivered, range_records=range_records(config, run["run_id"], tables)
            )
            print(
                f"   run {repeat + 1}: {run['state']} in {run['seconds']} s; tasks {json.dumps(run['tasks'])}; "
                f"peak RSS {run['peak_rss_mib']} MiB"
            )
            runs.append(run)
            previous = run["run_id"]
        return {"scenario": dataclasses.asdict(scenario), "first_run": first, "runs": runs}
    finally:
        stack.down()
        if callers_config is None:
            os.environ.pop("CDC_TABLES_CONFIG", None)
        else:
            os.environ["CDC_TABLES_CONFIG"] = callers_config


def _dag_ready(api: AirflowApi) -> bool:
    try:
        return not api.get(f"/dags/{DAG_ID}").get("is_paused", False)
    except requests.HTTPError:
        return False


def summary_lines(result: dict[str, Any]) -> list[str]:
    """The scenario's medians: run wall time against its target, per task, Spark jobs, peak memory."""
    scenario = result["scenario"]
    if "error" in result:
        return [f"## {scenario['name']}", "", f"failed: {result['error']}"]
    runs = [r for r in result["runs"] if r["state"] == "success"]
    tables = scenario.get("tables", 1)
    per_table = " per table" if tables > 1 else ""
    lines = [
        f"## {scenario['name']}: {tables} table{'s' if tables > 1 else ''}, {scenario['rows']:,} rows, "
        f"{scenario['changes']:,} changes per run{per_table}"
    ]
    if not runs:
        return [*lines, "", "no measured run succeeded"]
    wall = stats.summarise([r["seconds"] for r in runs])
    target = bench_targets.DAG_RUN_SECONDS.get(scenario["name"])
    verdict = ""
    if target is not None:
        verdict = f" (target <= {target:.0f} s: " + ("met)" if wall["median"] <= target else "missed)")
    lines += [
        "",
        f"DAG run, queued to end: median {wall['median']:.1f} s (min {wall['min']:.1f}, max {wall['max']:.1f}, "
        f"n={wall['n']}){verdict}; first run (whole lake) {result['first_run']['seconds']} s",
        "",
        "| task | median s | Spark jobs |",
        "| --- | ---: | ---: |",
    ]
    for name in runs[0]["tasks"]:
        median = stats.summarise([r["tasks"].get(name, 0.0) for r in runs])["median"]
        jobs = runs[0]["spark_jobs"].get(name)
        lines.append(f"| {name} | {median:.1f} | {'-' if jobs is None else jobs} |")
    idle = [r["idle_seconds"] for r in runs if "idle_seconds" in r]
    if idle:
        lines.append(f"| no task running (scheduling, task start-up) | {stats.summarise(idle)['median']:.1f} | - |")
    peak = stats.summarise([r["peak_rss_mib"] for r in runs])["median"]
    peak_jvm = stats.summarise([r["peak_jvm_rss_mib"] for r in runs])["median"]
    lines += ["", f"Peak resident memory of the scheduler's tree: median {peak:,.0f} MiB (JVMs {peak_jvm:,.0f} MiB)"]
    pss = [r["peak_pss_mib"] for r in runs if "peak_pss_mib" in r]
    if pss:
        lines[-1] += f"; proportional (shared pages counted once): {stats.summarise(pss)['median']:,.0f} MiB"
    released = [r for r in runs if "slot_release_seconds" in r]
    if released:
        lines.append(
            "Executor slots held after their task ended: median "
            f"{stats.summarise([r['slot_release_seconds'] for r in released])['median']:.1f} s per run "
            f"(longest single wait {max(r['slot_release_longest'] for r in released):.1f} s)"
        )
    busy = [r for r in runs if "cpu_seconds" in r]
    if busy:
        services = {name for r in busy for name in r["cpu_seconds"]}
        seconds = {
            name: stats.summarise([r["cpu_seconds"].get(name, 0.0) for r in busy])["median"] for name in services
        }
        lines.append(
            f"CPU: the machine's cores {stats.summarise([r['cpu_busy_share'] for r in busy])['median']:.0%} busy over "
            "the run; CPU seconds per service (medians): "
            + ", ".join(f"{name} {value:,.1f}" for name, value in sorted(seconds.items(), key=lambda kv: -kv[1]))
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", default="demo", help=f"comma-separated, of {', '.join(SCENARIOS)}")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=3600, help="seconds one DAG run may take")
    parser.add_argument("--out", default=str(ROOT / "results"))
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting for every task's session (or the Spark Connect server), to compare one; repeatable",
    )
    args = parser.parse_args(argv)
    malformed = [item for item in args.spark_conf if "=" not in item.strip("=")]
    if malformed:
        parser.error(f"--spark-conf takes KEY=VALUE, got {', '.join(map(repr, malformed))}")
    spark_conf = dict(item.split("=", 1) for item in args.spark_conf)
    unknown = [name for name in args.scenarios.split(",") if name not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H-%M-%SZ")
    spark = "a Spark Connect server" if StackConfig().spark_connect_enabled else "spark-submit per task"
    payload: dict[str, Any] = {
        "started": started,
        "machine": machine(),
        "spark": spark,
        "spark_conf": spark_conf,
        "scenarios": [],
    }
    for name in args.scenarios.split(","):
        try:
            payload["scenarios"].append(run_scenario(SCENARIOS[name], args.repeats, args.timeout, spark_conf))
        except Exception as exc:  # the other scenarios' figures still count
            print(f"scenario {name} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            payload["scenarios"].append({"scenario": dataclasses.asdict(SCENARIOS[name]), "error": str(exc)})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = started.replace(":", "").replace("-", "")
    (out / f"dag-runs-{stamp}.json").write_text(json.dumps(payload, indent=2))
    m = payload["machine"]
    lines = [
        f"# DAG runs through the scheduler, {started}",
        "",
        f"{m['cpus']} CPUs, {m['memory_gib']} GiB; load average at start "
        f"{', '.join(f'{x:.2f}' for x in m['loadavg'])}. "
        f"Spark tasks on {spark}. Command: `bash bench/dag_runs.sh {' '.join(argv or sys.argv[1:])}`",
    ]
    for result in payload["scenarios"]:
        lines += ["", *summary_lines(result)]
    (out / f"dag-runs-{stamp}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
