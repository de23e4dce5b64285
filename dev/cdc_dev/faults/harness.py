"""What every fault scenario shares: its own stack, the loader, DAG runs, outcomes, the two-run measurement.

A scenario starts from a known state (the previous run was clean, or a fresh stack), injects one
fault, and calls :meth:`FaultRunner.measure`: the DAG runs (detect, repair), the suite's counts are
set beside an independent count (:mod:`.checks`), the lake is compared with the source, and a second
DAG run must find nothing.
"""

from __future__ import annotations

import contextlib
import functools
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import psycopg

from cdc_reconcile import run_state, state_store
from cdc_reconcile.phase import Phase

from ..loader import run_loader
from ..stack import Stack, StackConfig, StackError, cluster_session_conf
from ..stack.dag_runs import DagRunResult, run_dag
from ..stack.process import wait_until
from .checks import (
    CLASSES,
    TABLE,
    Row,
    consume,
    differences,
    duplicates,
    event_positions,
    fold,
    lake_rows,
    source_rows,
    topic_offsets,
    uncommitted_files,
)
from .hdfs_lake import HdfsLake
from .result import ScenarioResult, compare

GROUP = "reconcile_table"
T = TypeVar("T")


class FaultRunner:
    """One embedded stack, scenarios run on it one after the other; always stopped by :meth:`stop`."""

    def __init__(
        self,
        config: StackConfig | None = None,
        *,
        log: Callable[[str], None] = print,
        cluster: bool = False,
        spark_connect: bool = False,
    ) -> None:
        # Some scenarios kill or watch a Spark task's own driver (spark_kill): by default every task
        # spark-submits one. ``spark_connect``: the tasks run on the stack's Spark Connect server, as the
        # stack runs them for its users, for the scenarios that need no driver of their own.
        if spark_connect and cluster:
            raise ValueError("the cluster's scenarios watch a task's own driver: they cannot run on Spark Connect")
        self.config = replace(config or StackConfig(), spark_connect_enabled=spark_connect)
        self.cluster = cluster
        self.stack = Stack(self.config, airflow=False, cluster=cluster)
        self.log = log
        self.registered = False
        self.last_clean_run: str | None = None

    # lifecycle

    def start(self) -> None:
        """A fresh stack from empty data, connector not yet registered (a scenario may kill its snapshot).

        With ``cluster``, HDFS and the Spark standalone cluster too: the DAG's Spark tasks then submit to
        ``spark://`` (client mode) and the lake is on ``hdfs://`` (:meth:`dag_environment`).
        """
        spark_tasks = (
            f"on the Spark Connect server {self.config.spark_connect_url}"
            if self.config.spark_connect_enabled
            else "a spark-submit each"
        )
        self.log(
            f"stack: fresh start under {self.config.run_dir}{' with HDFS and the Spark cluster' * self.cluster}; "
            f"the DAG's Spark tasks: {spark_tasks}"
        )
        self.stack.down(destroy=True)
        self.stack.up(register=False)
        self.registered = False
        self.last_clean_run = None

    def stop(self) -> None:
        self.stack.down()
        left = self.stack.leftover_pids()
        if left:
            raise StackError(f"fault runner: stack processes survived down: {left}; stop them by pid")

    def __enter__(self) -> FaultRunner:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # the stack's state

    @property
    def topic(self) -> str:
        return self.config.topic_for(TABLE)

    @property
    def lake_location(self) -> str:
        """The DAG's lake root: the stack's local lake, or a folder of its HDFS on the cluster."""
        return f"{self.config.hdfs_lake_uri}/faults" if self.cluster else str(self.config.lake_root)

    def dag_environment(self) -> dict[str, str]:
        """What a DAG run on the cluster is given, as a deployment would: the lake root, the ``spark_default``
        connection naming the master, and the Spark configuration folder (``spark-defaults.conf``)."""
        if not self.cluster:
            return {}
        conf_dir = self.config.run_dir / "spark-conf"
        conf_dir.mkdir(parents=True, exist_ok=True)
        defaults = cluster_session_conf(self.config)
        (conf_dir / "spark-defaults.conf").write_text("".join(f"{k} {v}\n" for k, v in defaults.items()))
        spark_default = {
            "conn_type": "spark",
            "host": self.config.spark_master_url,
            "extra": {"spark-binary": "spark-submit", "deploy-mode": "client"},
        }
        return {
            "AIRFLOW_VAR_CDC_LAKE_ROOT": self.lake_location,
            # Great Expectations' file stores need a local path (issue 15: not yet on the lake filesystem)
            "AIRFLOW_VAR_CDC_GX_ROOT": str(self.config.run_dir / "great_expectations-cluster"),
            "AIRFLOW_VAR_CDC_DATA_DOCS_URL": "",  # the stack serves the other root's site
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(spark_default),
            "SPARK_CONF_DIR": str(conf_dir),
        }

    def pg(self) -> psycopg.Connection:
        return psycopg.connect(self.config.pg_dsn, autocommit=True)

    def dag(self, label: str, **params: Any) -> DagRunResult:
        self.log(f"  DAG run {label} {params or ''}")
        result = run_dag(
            self.config, {"tables": [TABLE], **params}, label=f"faults-{label}", extra_env=self.dag_environment()
        )
        self.log(f"  DAG run {result.run_id}: {result.state} in {result.seconds:.0f}s")
        return result

    def outcome(self, run_id: str, phase: Phase) -> dict[str, Any] | None:
        with state_store.connect(self.config.state_dsn) as conn:
            return run_state.latest_suite_outcome(conn, run_id, TABLE, phase)

    def audit(self, run_id: str) -> dict[str, int]:
        """The repair's audit rows of ``run_id`` by kind."""
        with state_store.connect(self.config.state_dsn) as conn:
            return run_state.audit_counts(conn, run_id, TABLE)

    def range_of(self, run_id: str) -> tuple[dict[int, int], dict[int, int]]:
        with state_store.connect(self.config.state_dsn) as conn:
            rng = state_store.get_range(conn, run_id, TABLE)
        if rng is None or rng.end is None:
            raise StackError(f"fault runner: run {run_id} has no sealed offset range for {TABLE}; see its DAG log")
        return dict(rng.start), dict(rng.end)

    def connector_ready(self, *, exactly_once: bool = True) -> None:
        self.stack.register_connector(exactly_once="required" if exactly_once else "requested")
        self.registered = True

    def wait_streaming(self) -> None:
        """Debezium's replication connection is up (it streams, the snapshot is over)."""
        with self.pg() as conn:
            wait_until(
                lambda: conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'START_REPLICATION SLOT%%'"
                ).fetchone()[0],
                timeout=180,
                what="Debezium's replication connection established",
                interval=0.5,
            )

    def settle(self, quiet: float = 5.0, timeout: float = 180) -> None:
        """Wait until the topic stops growing for ``quiet`` seconds (Debezium has sent what it had)."""
        last: dict[str, Any] = {"high": None, "since": time.monotonic()}

        def quiet_now() -> bool:
            high = topic_offsets(self.config.bootstrap_servers, self.topic)["high"]
            if high != last["high"]:
                last.update(high=high, since=time.monotonic())
            return time.monotonic() - last["since"] >= quiet

        wait_until(quiet_now, timeout=timeout, what=f"{self.topic} quiet for {quiet:.0f}s", interval=1)

    # the known state and the load

    def begin(self) -> tuple[dict[Any, Row], dict[int, int]]:
        """The known state a scenario starts from: the source's rows and the topic's committed end."""
        records = consume(self.config.bootstrap_servers, self.topic)
        ends: dict[int, int] = {}
        for r in records:
            ends[r.partition] = max(ends.get(r.partition, 0), r.offset + 1)
        return source_rows(self.config.pg_dsn), ends

    @contextlib.contextmanager
    def loading(self, **kwargs: Any) -> Iterator[None]:
        """The loader writes ``customers`` (``run_loader`` arguments) for as long as the block runs."""
        stop = threading.Event()

        def load() -> None:
            run_loader(self.config.pg_dsn, tables=("customers",), stop=stop, **kwargs)

        thread = threading.Thread(target=load, name="fault-loader", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=60)

    def max_id(self) -> int:
        with self.pg() as conn:
            return conn.execute(f"SELECT coalesce(max(id), 0) FROM {TABLE}").fetchone()[0]

    def progress(self, rows: int, timeout: float = 120) -> None:
        """Wait until the loader has inserted ``rows`` more rows."""
        before = self.max_id()
        wait_until(
            lambda: self.max_id() >= before + rows,
            timeout=timeout,
            what=f"loader progress of {rows} rows",
            interval=0.5,
        )

    # the two-run measurement

    def ensure_baseline(self) -> ScenarioResult | None:
        """The known state: connector running, some rows, and one clean run whose lake equals the source."""
        if self.last_clean_run is not None:
            return None
        began = time.monotonic()
        if not self.registered:
            with self.pg() as conn:
                conn.execute(
                    f"INSERT INTO {TABLE} (name, email, balance, attrs) SELECT 'base ' || g, 'b' || g || "
                    "'@example.com', g / 100.0, jsonb_build_object('g', g) FROM generate_series(1, 2000) g"
                )
            self.connector_ready()
        self.wait_streaming()
        result = ScenarioResult("baseline", "Clean run, nothing injected")
        result.injected = {"nothing": 0}
        self.measure(result, independent_of=self.independent_from({}, {}), full_rescan=True)
        result.seconds = round(time.monotonic() - began, 1)
        return result

    def independent_from(
        self, start_state: Mapping[Any, Row], start_offsets: Mapping[int, int]
    ) -> Callable[[str], dict[str, int]]:
        """Counts by class of a run from Kafka and PostgreSQL alone, folded on top of ``start_state``."""

        def count(run_id: str) -> dict[str, int]:
            start, end = self.range_of(run_id)
            records = consume(self.config.bootstrap_servers, self.topic)
            expected_lake = fold(records, start_state, from_offsets=start_offsets, to_offsets=end)
            return {**differences(expected_lake, source_rows(self.config.pg_dsn)), **duplicates(records, start, end)}

        return count

    def measure(
        self,
        result: ScenarioResult,
        *,
        independent_of: Callable[[str], dict[str, int]],
        during: Callable[[threading.Thread], None] | None = None,
        **params: Any,
    ) -> DagRunResult:
        """Run the DAG (detect, repair), count independently, check the lake, run again (must be clean).

        ``during`` runs beside the first DAG run (which it gets as a thread) to inject a fault into it.
        Returns the first run.
        """
        first = self._dag_during(f"{result.scenario}-1", during, **params)
        result.run_ids.append(first.run_id)
        result.run_states.append(first.state)
        before = self.outcome(first.run_id, Phase.BEFORE_REPAIR)
        if before is None:
            raise StackError(f"run {first.run_id}: no suite outcome recorded; see {first.log}")
        result.detected = {c: int(before["counts"].get(c, 0)) for c in CLASSES}
        result.independent = {c: int(v) for c, v in independent_of(first.run_id).items()}
        result.false_alarms, result.missed = compare(result.detected, result.independent)
        result.repaired = self.audit(first.run_id)
        after = self.outcome(first.run_id, Phase.AFTER_REPAIR)
        if before["success"]:
            result.repaired_ok = first.state == "success" and not result.repaired
        else:
            wanted = {c: n for c, n in result.detected.items() if n}
            result.repaired_ok = (
                first.state == "success" and after is not None and after["success"] and result.repaired == wanted
            )
        self.check_lake(result)
        second = self.dag(f"{result.scenario}-2")
        result.run_ids.append(second.run_id)
        result.run_states.append(second.state)
        again = self.outcome(second.run_id, Phase.BEFORE_REPAIR) or {}
        result.second_run_clean = (
            second.state == "success"
            and bool(again.get("success"))
            and not any(again.get("counts", {}).get(c, 0) for c in CLASSES)
        )
        if result.second_run_clean:
            self.last_clean_run = second.run_id
        self.check_lake(result)
        return first

    def _dag_during(self, label: str, during: Callable[[threading.Thread], None] | None, **params: Any) -> DagRunResult:
        if during is None:
            return self.dag(label, **params)
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["run"] = self.dag(label, **params)
            except BaseException as exc:  # re-raised below, in the runner's thread
                outcome["error"] = exc

        thread = threading.Thread(target=run, name=f"dag-{label}", daemon=True)
        thread.start()
        try:
            during(thread)
        finally:
            thread.join()
        if "error" in outcome:
            raise outcome["error"]
        return outcome["run"]

    def check_lake(self, result: ScenarioResult) -> None:
        """Count committed source rows the lake lacks and lake rows that differ (the worst seen so far)."""
        source = source_rows(self.config.pg_dsn)
        lake = lake_rows(self.lake_location) or {}
        lost = sum(1 for k in source if k not in lake)
        mismatched = sum(1 for k in lake if k not in source or lake[k] != source[k])
        result.rows_lost = max(result.rows_lost or 0, lost)
        result.lake_mismatches = max(result.lake_mismatches or 0, mismatched)

    # watching a DAG run and its Spark jobs

    def wait_during(
        self, dag: threading.Thread, condition: Callable[[], T], *, what: str, timeout: float, interval: float
    ) -> T:
        """``condition``'s first true value while ``dag`` runs; :class:`StackError` if the run ends first."""
        ended = object()
        found = wait_until(
            lambda: condition() if dag.is_alive() else ended, timeout=timeout, what=what, interval=interval
        )
        if found is ended:
            raise StackError(f"the DAG run ended before {what}")
        return found

    def spark_job_pids(self, job: str) -> list[int]:
        """This stack's processes of job ``<job>``: the spark-submit JVM and its Python driver.

        Matched on the job's path and this stack's lake root in the command line, so a Spark job of
        another stack on the same machine is never touched.
        """
        script, lake = f"cdc_reconcile/jobs/{job}.py".encode(), self.lake_location.encode()
        found = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(a.endswith(script) for a in argv) and lake in argv:
                found.append(int(proc.name))
        return found

    def stages(self) -> list[str]:
        """Data files of the table's datasets that no Delta commit names: a write in progress, or killed.

        Paths relative to the table's lake folder; on the cluster listed through WebHDFS.
        """
        if self.cluster:
            return self._hdfs_lake.uncommitted_files(TABLE)
        base = self.config.lake_root / TABLE
        if not base.is_dir():
            return []
        datasets = sorted(p for p in base.iterdir() if p.is_dir())
        return [str(f.relative_to(base)) for dataset in datasets for f in uncommitted_files(dataset)]

    @functools.cached_property
    def _hdfs_lake(self) -> HdfsLake:
        return HdfsLake(self.config, self.lake_location)

    def wait_writing(self, dag: threading.Thread, job: str) -> tuple[list[int], list[str]]:
        """``job``'s processes (:meth:`spark_job_pids`) once it has data files no commit names yet.

        Files no commit names that were there before (earlier runs' left-overs) do not count: call this
        as the DAG run starts, before ``job`` does.
        """
        before = set(self.stages())

        def writing() -> tuple[list[int], list[str]] | None:
            pids = self.spark_job_pids(job)
            stages = [s for s in self.stages() if s not in before] if pids else []
            return (pids, stages) if stages else None

        interval = 0.2 if self.cluster else 0.05  # a WebHDFS listing is a few dozen requests
        return self.wait_during(dag, writing, what=f"{job} was caught writing", timeout=1200, interval=interval)

    def events_match_kafka(self, run_id: str) -> dict[str, int]:
        """The run's bronze events against Kafka: each committed record of the range exactly once.

        Read with delta-rs from the committed ``events`` table, so a second copy appended by a retried
        task, or a record lost by it, shows up.
        """
        start, end = self.range_of(run_id)
        positions = event_positions(f"{self.lake_location}/{TABLE}/events")
        in_range = [(p, o) for p, o in positions if start.get(p, 0) <= o < end.get(p, 0)]
        expected = {
            (r.partition, r.offset)
            for r in consume(self.config.bootstrap_servers, self.topic)
            if start.get(r.partition, 0) <= r.offset < end.get(r.partition, 0)
        }
        copies = Counter(in_range)
        return {
            "kafka_records": len(expected),
            "events_rows": len(in_range),
            "extra_copies": sum(n - 1 for n in copies.values() if n > 1) + sum(1 for k in copies if k not in expected),
            "absent": sum(1 for k in expected if k not in copies),
        }
