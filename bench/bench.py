"""Benchmark of the reconciliation engine on the real embedded stack (issue 6).

For each table size N: a fresh stack on the bench's own ports, a source table of N rows bulk-loaded
in SQL, the real Debezium connector's initial snapshot (N ``r`` events), a share of updates, deletes
and inserts run in PostgreSQL (streamed by Debezium), and a share of exact redeliveries produced
again to the topic by a plain producer (what at-least-once delivery does). Then every measured step
runs ``--repeats`` times next to its baseline on the same input, in the same process and run:

* snapshot (PostgreSQL -> Parquet) against ``COPY ... TO STDOUT`` of the same table;
* compaction (Kafka range -> events/changelog/table) against a raw confluent-kafka consumer that only
  reads and counts the same range (the connector's JSON converter with each message's schema, or
  payload only with ``--converter-schemas off``);
* diff (snapshot vs lake table Parquet) against DuckDB and datacompy's Spark comparison;
* the pipeline steps of one hourly run (checkpoint, snapshot, seal, compact, check), wall time and
  peak RSS of the Spark driver JVM (no Airflow scheduling overhead).

Results go to ``bench/results/<timestamp>.json`` and ``.md``. Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import json
import logging
import os
import platform
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import psycopg
from confluent_kafka import Consumer, Producer, TopicPartition

from bench import stats
from cdc_dev import bench_targets
from cdc_dev.stack import Stack, StackConfig
from cdc_reconcile import kafka_offsets, state_store, storage
from cdc_reconcile.config import PipelineConfig, TableConfig
from cdc_reconcile.errors import ReconcileError
from cdc_reconcile.kafka_client import KafkaClient
from cdc_reconcile.lake import TableLake
from cdc_reconcile.run import RunSettings, SourceDatabase, TableRun

log = logging.getLogger("bench")

BENCH_TABLE = "public.bench_rows"
WATERMARK_TABLE = "public.cdc_watermark"
KEY = ("id",)
ROOT = Path(__file__).resolve().parent

# Realistic column types: every special decoding path of the engine is exercised (NUMERIC as base64
# two's complement, dates as epoch days, timestamps as epoch micros, timestamptz as ISO text, jsonb,
# booleans, smallint/int/bigint, nullable text).
SCHEMA_SQL = f"""
DROP TABLE IF EXISTS {BENCH_TABLE};
CREATE TABLE {BENCH_TABLE} (
    id          bigint PRIMARY KEY,
    name        text NOT NULL,
    email       text,
    balance     numeric(12, 2) NOT NULL,
    quantity    integer NOT NULL,
    rating      smallint,
    active      boolean NOT NULL,
    born        date,
    attrs       jsonb,
    created_at  timestamp NOT NULL,
    updated_at  timestamptz NOT NULL
);
ALTER TABLE {BENCH_TABLE} REPLICA IDENTITY FULL;
"""


def _row_values(ids: str) -> str:
    """The SELECT list that makes one deterministic row per id ``g`` of ``ids`` (a generate_series)."""
    return f"""
SELECT g, 'customer ' || g, CASE WHEN g % 7 = 0 THEN NULL ELSE 'user' || g || '@example.com' END,
       ((g::bigint * 7919) % 10000000) / 100.0 - 50000, (g % 1000)::int,
       CASE WHEN g % 5 = 0 THEN NULL ELSE (g % 5)::smallint END,
       g % 2 = 0, DATE '1950-01-01' + (g % 20000)::int,
       jsonb_build_object('tier', g % 4, 'tags', jsonb_build_array('a' || (g % 10), 'b')),
       TIMESTAMP '2020-01-01 00:00:00' + (g % 100000) * INTERVAL '1 minute',
       TIMESTAMPTZ '2024-01-01 00:00:00+00' + (g % 100000) * INTERVAL '1 second'
FROM {ids} AS g"""


# --------------------------------------------------------------------------------------------------
# machine and sampling


def machine() -> dict[str, Any]:
    """What the figures were measured on; the load average says how shared the machine was."""
    model = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "cpu_model": model,
        "cpus": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "loadavg": os.getloadavg(),
    }


class PeakRss:
    """Peak resident memory of the Spark driver JVM (the java children of this process), sampled."""

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.peak_jvm = 0
        self.peak_python = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _sample(self) -> None:
        me = psutil.Process()
        jvm = 0
        for child in me.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if "java" in child.name():
                    jvm += child.memory_info().rss
        self.peak_jvm = max(self.peak_jvm, jvm)
        self.peak_python = max(self.peak_python, me.memory_info().rss)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    began = time.perf_counter()
    result = fn()
    return time.perf_counter() - began, result


# --------------------------------------------------------------------------------------------------
# data generation


@dataclasses.dataclass
class Workload:
    rows: int
    updates: int
    deletes: int
    inserts: int
    duplicates: int = 0
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)


def load_source(conn: psycopg.Connection, rows: int) -> float:
    """Bulk-load N rows in one INSERT ... SELECT over generate_series (no row-by-row Python)."""
    began = time.perf_counter()
    conn.execute(SCHEMA_SQL)
    conn.execute(f"INSERT INTO {BENCH_TABLE} {_row_values(f'generate_series(1, {rows})')}")
    conn.execute(f"ANALYZE {BENCH_TABLE}")
    return time.perf_counter() - began


def apply_changes(conn: psycopg.Connection, w: Workload, batch: int = 5000) -> float:
    """Updates, deletes and inserts in transactions of ``batch`` rows, spread over the key space."""
    began = time.perf_counter()
    n = w.rows
    stride_u = max(n // max(w.updates, 1), 1)
    stride_d = max(n // max(w.deletes, 1), 1)
    # updated ids: id % stride_u == 0; deleted ids: id % stride_d == 1 (disjoint unless a stride is 1)
    for lo in range(1, n + 1, batch * stride_u):
        hi = lo + batch * stride_u - 1
        conn.execute(
            f"UPDATE {BENCH_TABLE} SET balance = balance + 1.25, quantity = quantity + 1, active = NOT active, "
            f"attrs = attrs || jsonb_build_object('v', id % 97), updated_at = updated_at + INTERVAL '1 hour' "
            f"WHERE id BETWEEN {lo} AND {hi} AND id % {stride_u} = 0 AND id <= {stride_u * w.updates}"
        )
    for lo in range(1, n + 1, batch * stride_d):
        hi = lo + batch * stride_d - 1
        conn.execute(
            f"DELETE FROM {BENCH_TABLE} WHERE id BETWEEN {lo} AND {hi} AND id % {stride_d} = 1 "
            f"AND id <= {stride_d * w.deletes} AND id % {stride_u} <> 0"
        )
    for lo in range(n + 1, n + w.inserts + 1, batch):
        hi = min(lo + batch - 1, n + w.inserts)
        conn.execute(f"INSERT INTO {BENCH_TABLE} {_row_values(f'generate_series({lo}, {hi})')}")
    return time.perf_counter() - began


def _consumer(bootstrap: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{time.time_ns()}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "fetch.max.bytes": 64 * 1024 * 1024,
            "max.partition.fetch.bytes": 16 * 1024 * 1024,
        }
    )


def raw_count(bootstrap: str, topic: str, start: dict[int, int], end: dict[int, int]) -> int:
    """The baseline: read the range ``read_committed`` and count records; no parsing at all."""
    consumer = _consumer(bootstrap)
    try:
        consumer.assign([TopicPartition(topic, p, o) for p, o in start.items() if end[p] > o])
        pending = {p for p in start if end[p] > start[p]}
        count = 0
        while pending:
            for msg in consumer.consume(num_messages=10000, timeout=1.0):
                err = msg.error()
                p = msg.partition()
                if err is not None:
                    if err.code() == -191:  # _PARTITION_EOF
                        pending.discard(p)
                        continue
                    raise RuntimeError(f"consumer error: {err}")
                if msg.offset() < end[p]:
                    count += 1
                if msg.offset() >= end[p] - 1:
                    pending.discard(p)
            if pending:
                positions = consumer.position([TopicPartition(topic, p) for p in pending])
                for tp in positions:
                    if tp.offset >= end[tp.partition]:
                        pending.discard(tp.partition)
        return count
    finally:
        consumer.close()


def redeliver(bootstrap: str, topic: str, start: dict[int, int], share: float, expected: int, timeout: float) -> int:
    """Produce a share of the change records after ``start`` again, byte for byte (exact redeliveries).

    Waits until ``expected`` records are readable first, so the copies land after their originals.
    """
    consumer = _consumer(bootstrap)
    records: list[tuple[bytes | None, bytes]] = []
    deadline = time.monotonic() + timeout
    try:
        consumer.assign([TopicPartition(topic, p, o) for p, o in start.items()])
        seen = 0
        while seen < expected:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {seen} of {expected} change records reached {topic}")
            for msg in consumer.consume(num_messages=10000, timeout=1.0):
                if msg.error() is not None:
                    continue
                seen += 1
                if msg.value() is not None:
                    records.append((msg.key(), msg.value()))
    finally:
        consumer.close()
    step = max(round(1 / share), 1) if share > 0 else 0
    chosen = records[::step] if step else []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20})
    for key, value in chosen:
        producer.produce(topic, key=key, value=value)
        producer.poll(0)
    producer.flush(60)
    return len(chosen)


def copy_out(dsn: str) -> int:
    """The snapshot baseline: ``COPY table TO STDOUT`` (text format), bytes counted and discarded."""
    total = 0
    with psycopg.connect(dsn) as conn, conn.cursor() as cur, cur.copy(f"COPY {BENCH_TABLE} TO STDOUT") as copy:
        for block in copy:
            total += len(block)
    return total


# --------------------------------------------------------------------------------------------------
# diff baselines


def duckdb_diff(snapshot_dir: str, table_dir: str, columns: list[str]) -> dict[str, int]:
    """Missing/extra/changed by key in DuckDB over the same Parquet files the engine compares."""
    import duckdb

    others = [c for c in columns if c not in KEY]
    changed = " OR ".join(f's."{c}" IS DISTINCT FROM l."{c}"' for c in others)
    key_join = " AND ".join(f's."{k}" = l."{k}"' for k in KEY)
    sql = f"""
        WITH s AS (SELECT {", ".join(f'"{c}"' for c in columns)} FROM read_parquet('{snapshot_dir}/*.parquet')),
             l AS (SELECT {", ".join(f'"{c}"' for c in columns)} FROM read_parquet('{table_dir}/*.parquet'))
        SELECT kind, count(*) FROM (
            SELECT CASE WHEN l."{KEY[0]}" IS NULL THEN 'missing'
                        WHEN s."{KEY[0]}" IS NULL THEN 'extra'
                        WHEN {changed} THEN 'stale' END AS kind
            FROM s FULL OUTER JOIN l ON {key_join}
        ) WHERE kind IS NOT NULL GROUP BY kind
    """
    with duckdb.connect() as con:
        con.execute("SET threads TO 2")
        return {k: int(v) for k, v in con.execute(sql).fetchall()}


def spark_diff(spark: Any, snapshot_dir: str, table_dir: str, columns: list[str]) -> dict[str, int]:
    """The engine's comparison (``diff.diff_rows``: a full outer join, values compared in the source's
    types) over the same files."""
    from cdc_reconcile.diff import diff_rows

    source = spark.read.parquet(snapshot_dir)
    lake = spark.read.parquet(table_dir)
    diff = diff_rows(lake, source, list(KEY), columns)
    return {r["kind"]: int(r["count"]) for r in diff.groupBy("kind").count().collect()}


def datacompy_diff(spark: Any, snapshot_dir: str, table_dir: str, columns: list[str]) -> dict[str, int]:
    """datacompy's Spark comparison over the same files: rows only in one side, rows with any mismatch."""
    from datacompy.spark import SparkSQLCompare
    from pyspark.sql import functions as F

    def prepared(path: str) -> Any:
        # datacompy 1.1.0 try_casts every non-string column to double, which PySpark 4.1 (ANSI) refuses
        # for DATE and TIMESTAMP_NTZ: compare those as their text, which is exact for both.
        df = spark.read.parquet(path).select(*columns)
        text = {f.name for f in df.schema.fields if f.dataType.typeName() in ("date", "timestamp_ntz")}
        return df.select(*(F.col(c).cast("string").alias(c) if c in text else F.col(c) for c in columns))

    source = prepared(snapshot_dir)
    lake = prepared(table_dir)
    compare = SparkSQLCompare(spark, source, lake, join_columns=list(KEY), df1_name="source", df2_name="lake")
    return {
        "missing": compare.df1_unq_rows.count(),
        "extra": compare.df2_unq_rows.count(),
        "stale": compare.intersect_rows.count() - compare.count_matching_rows(),
    }


# --------------------------------------------------------------------------------------------------
# one size


@dataclasses.dataclass
class Bench:
    args: argparse.Namespace
    config: StackConfig
    spark: Any
    lake: Path
    table: TableConfig = dataclasses.field(default_factory=lambda: TableConfig(name=BENCH_TABLE, key=KEY))
    measurements: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    saved: Callable[[], Any] = lambda: None  # called after every figure: a run stopped midway keeps its figures

    def record(self, **fields: Any) -> None:
        fields["loadavg"] = os.getloadavg()
        self.measurements.append(fields)
        log.info("%s", {k: v for k, v in fields.items() if k not in ("samples", "baseline_samples")})
        self.saved()

    def run(self, run_id: str) -> TableRun:
        """The run object of the bench table, as the DAG's tasks and jobs build it."""
        cfg = self.config
        settings = RunSettings(
            lake_root=str(self.lake),
            state_dsn=cfg.state_dsn,
            kafka=KafkaClient(cfg.bootstrap_servers),
            source=SourceDatabase(dsn=cfg.pg_dsn, jdbc_url=cfg.pg_jdbc_url, user=cfg.pg_user, password=cfg.pg_password),
            pipeline=PipelineConfig(tables=(self.table,), topic_prefix="cdc", watermark_table=WATERMARK_TABLE),
        )
        return TableRun(self.table, run_id, settings, spark=self.spark)

    def snapshot(self, run_id: str) -> int:
        """snapshot_source alone: the measured step (rows written)."""
        return self.run(run_id).snapshot(partitions=self.args.jdbc_partitions).rows

    def hourly_run(self, run_id: str, timeout: float) -> dict[str, Any]:
        """open -> snapshot -> seal -> compact -> check, the DAG run's steps in one warm session."""
        run = self.run(run_id)
        steps: dict[str, float] = {}
        began = time.perf_counter()
        t, _ = timed(run.open)
        steps["checkpoint"] = t
        t, snapshot = timed(lambda: run.snapshot(partitions=self.args.jdbc_partitions))
        steps["snapshot"] = t
        t, _ = timed(lambda: run.seal(timeout=timeout))
        steps["seal"] = t
        t, summary = timed(run.compact)
        steps["compact"] = t
        t, (report, diff) = timed(run.check)
        diff.unpersist()
        steps["check"] = t
        return {
            "wall": time.perf_counter() - began,
            "steps": steps,
            "rows": snapshot.rows,
            "summary": summary,
            "report": report.as_dict(),
        }


def run_size(b: Bench, n: int) -> None:
    args, cfg = b.args, b.config
    repeats = args.repeats
    changes = int(n * args.change_share)
    w = Workload(
        rows=n,
        updates=int(changes * args.update_share),
        deletes=int(changes * args.delete_share),
        inserts=changes - int(changes * args.update_share) - int(changes * args.delete_share),
    )
    stack = Stack(cfg)
    stack.down(destroy=True)
    b.lake = Path(args.work_dir) / f"lake-{n}"
    shutil.rmtree(b.lake, ignore_errors=True)
    timeout = 300 + n / 2000
    try:
        w.seconds["stack_up"] = timed(lambda: stack.up(register=False))[0]
        with psycopg.connect(cfg.pg_dsn, autocommit=True) as pg, state_store.connect(cfg.state_dsn) as state:
            w.seconds["load_source"] = load_source(pg, n)
            schemas = args.converter_schemas == "on"
            w.seconds["register_connector"] = timed(lambda: stack.register_connector(schemas=schemas))[0]
            state_store.ensure_state_schema(state)
            deadline = time.monotonic() + 120
            while not _topic_exists(cfg.bootstrap_servers, b.table.topic):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"topic {b.table.topic} never appeared")
                time.sleep(1)

            # run 0: the initial load (N snapshot events). Seal first, so Debezium's own snapshot has
            # finished and does not compete with the measured steps for the two cores.
            t0 = time.perf_counter()
            first = b.run("r0")
            first.open()
            first.snapshot(partitions=args.jdbc_partitions)
            sealed0 = first.seal(timeout=timeout)
            w.seconds["initial_events_landed"] = time.perf_counter() - t0
            snap_t: list[float] = []
            copy_t: list[float] = []
            rows = 0
            for _ in range(repeats):
                copy_t.append(timed(lambda: copy_out(cfg.pg_dsn))[0])
                t, rows = timed(lambda: b.snapshot("r0"))
                snap_t.append(t)
            b.record(
                size=n,
                step="snapshot",
                unit="rows",
                work=rows,
                samples=snap_t,
                baseline_name="COPY TO STDOUT",
                baseline_samples=copy_t,
                jdbc_partitions=args.jdbc_partitions,
            )

            start0, end0 = sealed0.start, sealed0.end
            comp_t: list[float] = []
            raw_t: list[float] = []
            records = 0
            summary0: dict[str, Any] = {}
            for _ in range(repeats):
                t, records = timed(lambda: raw_count(cfg.bootstrap_servers, b.table.topic, start0, end0))
                raw_t.append(t)
                t, summary0 = timed(lambda: b.run("r0").compact())
                comp_t.append(t)
            b.record(
                size=n,
                step="compaction (initial load)",
                unit="events",
                work=records,
                samples=comp_t,
                baseline_name="raw confluent-kafka consumer",
                baseline_samples=raw_t,
                summary=summary0,
                converter_schemas=args.converter_schemas,
            )
            report0, diff0 = b.run("r0").check()
            diff0.unpersist()
            log.info("r0 check: %s", report0.as_dict())

            # the changes of one hour, then exact redeliveries of a share of them
            w.seconds["apply_changes"] = apply_changes(pg, w)
            expected = w.updates + w.inserts + 2 * w.deletes  # a delete is a d event and a tombstone
            w.duplicates = redeliver(
                cfg.bootstrap_servers, b.table.topic, end0, args.dup_share, expected, timeout=timeout
            )

            # run 1: one hourly run, repeated with the same run id (a cleared DAG run redoes the same work)
            runs = []
            for _ in range(repeats):
                with PeakRss() as rss:
                    result = b.hourly_run("r1", timeout)
                result["peak_driver_jvm_rss_mib"] = rss.peak_jvm / 2**20
                result["peak_python_rss_mib"] = rss.peak_python / 2**20
                runs.append(result)
            b.record(
                size=n,
                step="hourly run (pipeline steps)",
                unit="changes",
                work=runs[-1]["summary"]["changes"],
                samples=[r["wall"] for r in runs],
                runs=runs,
                peak_driver_jvm_rss_mib=max(r["peak_driver_jvm_rss_mib"] for r in runs),
            )
            sealed1 = state_store.get_range(state, "r1", b.table.name)
            raw1 = [timed(lambda: raw_count(cfg.bootstrap_servers, b.table.topic, sealed1.start, sealed1.end))]
            b.record(
                size=n,
                step="compaction (hourly range)",
                unit="events",
                work=raw1[0][1],
                samples=[r["steps"]["compact"] for r in runs],
                baseline_name="raw confluent-kafka consumer",
                baseline_samples=[raw1[0][0]],
                converter_schemas=args.converter_schemas,
            )

            # diff: this run's snapshot against the previous run's lake table (the hour's changes
            # are the differences), by the engine, DuckDB and datacompy over the same Parquet files
            # (exported once from the Delta datasets, so every comparison reads plain Parquet)
            lake = TableLake(b.lake, b.table.name)
            exported = Path(b.args.work_dir) / "diff-input"
            snapshot_dir, table_dir = str(exported / "snapshot"), str(exported / "table")
            storage.read_partitions(b.spark, lake.snapshot, ["r1"]).write.mode("overwrite").parquet(snapshot_dir)
            r0 = storage.run_commit(b.spark, lake.table, "r0")
            storage.read(b.spark, lake.table, r0.version).write.mode("overwrite").parquet(table_dir)
            columns = [f.name for f in b.spark.read.parquet(snapshot_dir).schema.fields]
            ours_t, duck_t, dc_t = [], [], []
            counts: dict[str, Any] = {}
            for _ in range(repeats):
                t, counts["spark"] = timed(lambda: spark_diff(b.spark, snapshot_dir, table_dir, columns))
                ours_t.append(t)
                t, counts["duckdb"] = timed(lambda: duckdb_diff(snapshot_dir, table_dir, columns))
                duck_t.append(t)
                if not args.skip_datacompy:
                    try:
                        t, counts["datacompy"] = timed(
                            lambda: datacompy_diff(b.spark, snapshot_dir, table_dir, columns)
                        )
                        dc_t.append(t)
                    except Exception as exc:  # recorded, not fatal: the DuckDB baseline stands alone
                        counts["datacompy_error"] = f"{type(exc).__name__}: {exc}"[:2000]
            source_rows = runs[-1]["rows"]
            b.record(
                size=n,
                step="diff (snapshot vs lake table)",
                unit="rows",
                work=source_rows,
                samples=ours_t,
                baseline_name="DuckDB",
                baseline_samples=duck_t,
                counts=counts,
            )
            if dc_t:
                b.record(
                    size=n,
                    step="diff (snapshot vs lake table)",
                    unit="rows",
                    work=source_rows,
                    samples=ours_t,
                    baseline_name="datacompy SparkSQLCompare",
                    baseline_samples=dc_t,
                )
            b.record(
                size=n,
                step="point-in-time check (fold as of snapshot + diff)",
                unit="rows",
                work=source_rows,
                samples=[r["steps"]["check"] for r in runs],
                baseline_name="DuckDB (plain diff)",
                baseline_samples=duck_t,
            )
        b.measurements.append({"size": n, "workload": dataclasses.asdict(w), "machine_after": machine()})
    finally:
        stack.down()


def _topic_exists(bootstrap: str, topic: str) -> bool:
    try:
        return bool(kafka_offsets.list_partitions(bootstrap, topic, timeout=5))
    except ReconcileError:
        return False


# --------------------------------------------------------------------------------------------------
# report


def target(m: dict[str, Any]) -> tuple[str, float, str, str | None]:
    """The target a measurement is judged on (:mod:`cdc_dev.bench_targets`), with this report's text:
    kind, bound, text, and the baseline it is judged against (None: no judgement against a baseline)."""
    found = bench_targets.target(m)
    if found is None:
        return "", 0.0, "-", None
    if found.kind == "throughput":
        text = f"{found.text} raw consumer"
    elif found.kind == "time":
        text = f"{found.text} DuckDB time" if found.judged else f"({found.text} DuckDB time)"
    else:
        text = f"{found.text} at 1M rows / 100k changes"
    return found.kind, found.bound, text, found.baseline


def table_rows(measurements: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Measurements with samples -> rows for :func:`stats.markdown_table`."""
    rows = []
    for m in measurements:
        if "samples" not in m:
            continue
        ours = stats.summarise(m["samples"])
        row: dict[str, Any] = {k: m[k] for k in ("size", "step", "unit", "work")}
        row["ours"] = ours
        kind, bound, target_text, judged_against = target(m)
        if m.get("baseline_samples"):
            base = stats.summarise(m["baseline_samples"])
            row["baseline"] = base
            row["baseline_name"] = m["baseline_name"]
            judged = m["baseline_name"] == judged_against
            if kind == "throughput":
                r = stats.ratio(ours["median"], base["median"], higher_is_better=True)
                row["ratio_text"] = f"{r:.2f}x rate" + ((" ✅" if r >= bound else " ❌") if judged else "")
            else:
                r = stats.ratio(ours["median"], base["median"])
                row["ratio_text"] = f"{r:.2f}x time" + ((" ✅" if r <= bound else " ❌") if judged else "")
            # another baseline of the same step (datacompy beside DuckDB) is shown, not judged
            row["target_text"] = target_text if judged or judged_against is None else "-"
        elif kind == "wall":
            peak = m.get("peak_driver_jvm_rss_mib", 0)
            met = ""
            if m["size"] == bench_targets.HOURLY_TARGET_SIZE:
                met = " ✅" if ours["median"] < bound else " ❌"
            row["ratio_text"] = f"driver JVM peak RSS {peak:,.0f} MiB{met}"
            row["target_text"] = target_text
        rows.append(row)
    return rows


def write_results(out_dir: Path, payload: dict[str, Any]) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = payload["started"].replace(":", "").replace("-", "")
    json_path = out_dir / f"{stamp}.json"
    md_path = out_dir / f"{stamp}.md"
    json_path.write_text(json.dumps(payload, indent=2, default=str))
    m = payload["machine"]
    lines = [
        f"# cdc-reconcile benchmark {payload['started']}",
        "",
        f"Machine: {m['cpu_model']}, {m['cpus']} CPUs, {m['memory_gib']} GiB RAM, Python {m['python']}, "
        f"Linux {m['kernel']}; load average at start {', '.join(f'{x:.2f}' for x in m['loadavg'])} "
        "(the machine is shared with other test runs). Spark local[2], driver memory "
        f"{payload['settings']['driver_memory']}. JSON converter schemas "
        f"{payload['settings'].get('converter_schemas', 'on')}. {payload['settings']['repeats']} repeats per figure; "
        "medians with (min-max); every ratio is against a baseline measured in the same run on the same input.",
        "",
        f"Command: `{payload['command']}`",
        "",
        stats.markdown_table(table_rows(payload["measurements"])),
    ]
    for m in payload["measurements"]:
        if "workload" in m:
            wl = m["workload"]
            lines.append(
                f"* N={m['size']:,}: {wl['updates']:,} updates, {wl['deletes']:,} deletes, {wl['inserts']:,} inserts, "
                f"{wl['duplicates']:,} redeliveries; generation seconds {json.dumps(wl['seconds'])}"
            )
        if m.get("step") == "hourly run (pipeline steps)":
            steps = {
                k: round(stats.summarise([r["steps"][k] for r in m["runs"]])["median"], 2)
                for k in m["runs"][0]["steps"]
            }
            lines.append(f"* N={m['size']:,} hourly run, median seconds per step: {json.dumps(steps)}")
        if m.get("counts"):
            lines.append(f"* N={m['size']:,} diff counts per engine: {json.dumps(m['counts'])}")
    md_path.write_text("\n".join(lines) + "\n")
    return json_path, md_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,1000000", help="table sizes N, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--change-share", type=float, default=0.1, help="changes per hour as a share of N")
    parser.add_argument("--update-share", type=float, default=0.8)
    parser.add_argument("--delete-share", type=float, default=0.1, help="the rest of the changes are inserts")
    parser.add_argument("--dup-share", type=float, default=0.05, help="share of change records redelivered")
    parser.add_argument("--jdbc-partitions", type=int, default=2)
    parser.add_argument("--skip-datacompy", action="store_true")
    parser.add_argument(
        "--converter-schemas",
        choices=("on", "off"),
        default="on",
        help="the connector's JSON converter: with each message's schema (the stack's default) or payload only",
    )
    parser.add_argument("--work-dir", default=str(ROOT.parent / ".run" / "bench-lake"))
    parser.add_argument("--out", default=str(ROOT / "results"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)

    from cdc_reconcile.spark import build_session, spark_jars

    driver_memory = os.environ.get("CDC_SPARK_DRIVER_MEMORY", "2g")
    spark = build_session("cdc-bench", master="local[2]", jars=spark_jars(str(StackConfig().spark_jars_dir)))
    spark.sparkContext.setLogLevel("ERROR")
    payload: dict[str, Any] = {
        "started": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H-%M-%SZ"),
        "command": "bash bench/run.sh " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": machine(),
        "settings": {**vars(args), "driver_memory": driver_memory, "spark": spark.version},
        "measurements": [],
    }
    b = Bench(args=args, config=StackConfig(captured_tables=(BENCH_TABLE, WATERMARK_TABLE)), spark=spark, lake=Path())
    payload["measurements"] = b.measurements
    b.saved = lambda: write_results(Path(args.out), payload)
    try:
        for n in (int(s) for s in args.sizes.split(",") if s):
            try:
                run_size(b, n)
            except Exception as exc:
                log.exception("size %d failed", n)
                b.measurements.append({"size": n, "error": f"{type(exc).__name__}: {exc}"})
            json_path, md_path = write_results(Path(args.out), payload)
    finally:
        spark.stop()
    print(md_path.read_text())
    print(f"results: {json_path} {md_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
