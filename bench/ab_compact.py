"""A/B of ``TableRun.compact`` on one real Kafka range: one read task per topic partition vs all cores.

Compacts the whole topic (earliest to latest committed offset) into a fresh lake per attempt,
alternating the variants in one Spark session, so machine load hits both alike. ``snapshot`` is the
``snapshot`` dataset of a bench lake (its version ``--run-id`` gives the column types).
Usage: ``.venv/bin/python -m bench.ab_compact <bootstrap> <topic> <snapshot-dataset> [--repeats 3]``
against a running bench stack (``bench/run.sh`` leaves its data in ``.run/bench-stack``; start it with
the same environment and ``cdc-stack up``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from bench import stats
from bench.bench import BENCH_TABLE, KEY
from cdc_dev.stack import StackConfig
from cdc_dev.stack.topics import high_watermarks
from cdc_reconcile.config import TableConfig
from cdc_reconcile.kafka_client import KafkaClient
from cdc_reconcile.run import RunSettings, TableRun
from cdc_reconcile.spark import build_session, spark_jars


def topic_range(bootstrap: str, topic: str) -> tuple[str, str]:
    """The topic's whole range as Spark's starting/ending JSON (-2: each partition's earliest offset)."""
    ends = high_watermarks(bootstrap, topic)
    return json.dumps({topic: {str(p): -2 for p in ends}}), json.dumps({topic: {str(p): e for p, e in ends.items()}})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("bootstrap")
    parser.add_argument("topic")
    parser.add_argument("snapshot")
    parser.add_argument("--run-id", default="r0")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    spark = build_session("ab-compact", master="local[2]", jars=spark_jars(str(StackConfig().spark_jars_dir)))
    spark.sparkContext.setLogLevel("ERROR")
    starting, ending = topic_range(args.bootstrap, args.topic)
    variants = {"one read task per topic partition (before)": 1, "all cores (after)": None}
    times: dict[str, list[float]] = {name: [] for name in variants}
    work = Path(tempfile.mkdtemp(prefix="ab-compact-"))
    try:
        for attempt in range(args.repeats):
            for name, min_partitions in variants.items():
                settings = RunSettings(
                    lake_root=str(work / f"lake-{attempt}-{min_partitions}"), kafka=KafkaClient(args.bootstrap)
                )
                run = TableRun(TableConfig(BENCH_TABLE, tuple(KEY)), args.run_id, settings, spark=spark)
                lake = run.lake
                shutil.copytree(args.snapshot, lake.snapshot.removeprefix("file://"))
                began = time.perf_counter()
                summary = run.compact(offsets=(starting, ending), kafka_min_partitions=min_partitions)
                times[name].append(time.perf_counter() - began)
                print(f"{name}: {times[name][-1]:.2f} s, {summary['records']:,} records", flush=True)
                shutil.rmtree(lake.root, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for name, values in times.items():
        s = stats.summarise(values)
        print(f"{name:45s} median {s['median']:.2f} s ({s['min']:.2f}-{s['max']:.2f})")
    spark.stop()


if __name__ == "__main__":
    main()
