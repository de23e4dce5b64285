"""Where ``TableRun.compact`` spends its time, action by action, on real Debezium records without Kafka.

Takes the bronze ``events`` of a bench lake (real records: ``raw_value`` is the message as the JSON
converter wrote it) and the run's ``snapshot`` folder, rebuilds the Kafka records (key re-wrapped in
its schema envelope when the value has one), and runs ``compact`` with the Kafka read replaced by
those records, so only Spark's work is timed. Each write, count and re-read is timed separately, and
the Spark jobs started by each are counted.
Usage: ``.venv/bin/python -m bench.profile_compact <events-dir> <snapshot-dir> [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import functools
import shutil
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import functions as F

from cdc_reconcile import run as run_module
from cdc_reconcile import storage
from cdc_reconcile.config import TableConfig
from cdc_reconcile.kafka_client import KafkaClient
from cdc_reconcile.run import RunSettings, TableRun
from cdc_reconcile.spark import build_session

KEY_SCHEMA = (
    '{"type":"struct","fields":[{"type":"int64","optional":false,"field":"id"}],'
    '"optional":false,"name":"bench.public.bench_rows.Key"}'
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("events")
    parser.add_argument("snapshot")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work", default=None)
    args = parser.parse_args()
    spark = build_session("profile-compact", master="local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    work = Path(args.work or tempfile.mkdtemp(prefix="profile-compact-"))
    records_dir = work / "records"
    if not records_dir.exists():
        events = spark.read.parquet(args.events)
        key = F.when(
            F.col("with_schema"), F.concat(F.lit('{"schema":' + KEY_SCHEMA + ',"payload":'), F.col("key"), F.lit("}"))
        ).otherwise(F.col("key"))
        events.select(
            "topic",
            "partition",
            "offset",
            key.cast("binary").alias("key"),
            F.col("raw_value").cast("binary").alias("value"),
        ).repartition(1).sortWithinPartitions("partition", "offset").write.parquet(str(records_dir))
    records = spark.read.parquet(str(records_dir)).cache()
    n = records.count()
    print(f"{n:,} records", flush=True)
    run_module.read_kafka_range = lambda *_a, **_k: records  # type: ignore[assignment]

    timings: dict[str, list[float]] = defaultdict(list)
    jobs: dict[str, int] = defaultdict(int)
    tracker = spark.sparkContext.statusTracker()

    def timed(label: str | Callable[..., str], fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*a: Any, **k: Any) -> Any:
            name = label(*a, **k) if callable(label) else label
            before = len(tracker.getJobIdsForGroup("compact"))
            began = time.perf_counter()
            result = fn(*a, **k)
            timings[name].append(time.perf_counter() - began)
            jobs[name] = len(tracker.getJobIdsForGroup("compact")) - before
            return result

        return wrapper

    storage.replace_partition = timed(lambda df, path, *a, **k: f"write {Path(path).name}", storage.replace_partition)
    storage.publish = timed(lambda df, path, *a, **k: f"publish {Path(path).name}", storage.publish)
    totals = []
    for attempt in range(args.repeats):
        lake_root = work / f"lake-{attempt}"
        shutil.rmtree(lake_root, ignore_errors=True)
        run = TableRun(
            TableConfig("public.bench_rows", ("id",)),
            "r0",
            # the Kafka read is replaced by the recorded records above: this broker is never reached
            RunSettings(lake_root=str(lake_root), kafka=KafkaClient("unused:9092")),
            spark=spark,
        )
        shutil.copytree(args.snapshot, run.lake.snapshot.removeprefix("file://"))
        spark.sparkContext.setJobGroup("compact", "compact")
        before = len(tracker.getJobIdsForGroup("compact"))
        began = time.perf_counter()
        summary = run.compact(offsets=("{}", "{}"))
        total = time.perf_counter() - began
        totals.append(total)
        print(
            f"attempt {attempt}: {total:.2f} s, {n / total:,.0f} events/s, "
            f"{len(tracker.getJobIdsForGroup('compact')) - before} Spark jobs; {summary}",
            flush=True,
        )
    for name, values in timings.items():
        spread = f"({min(values):.2f}-{max(values):.2f})"
        print(f"  {name:30s} median {statistics.median(values):7.2f} s  {spread}, {jobs[name]} jobs")
    print(f"compact median {statistics.median(totals):.2f} s, {n / statistics.median(totals):,.0f} events/s")
    spark.stop()


if __name__ == "__main__":
    main()
