"""A/B on real events: duplicate marking + decoding as ``compact`` runs them, with and without ``raw_value``.

Alternates the two variants in one Spark session on the same bronze events (persist marked and
decoded, as ``pipeline.compact`` does, then count), so machine load hits both alike.
Usage: ``.venv/bin/python -m bench.ab_marking <events-dir> <snapshot-sidecar> [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from cdc_reconcile.compaction import change_events, decode_changes, mark_duplicates, without_raw_values
from cdc_reconcile.spark import build_session


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("events")
    parser.add_argument("sidecar")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    spec = {c["name"]: c["type"] for c in json.loads(Path(args.sidecar).read_text())["columns"]}
    spark = build_session("ab-marking", master="local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    events = spark.read.parquet(args.events)
    variants = {"with raw_value (before)": lambda e: e, "without raw_value (after)": without_raw_values}
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.repeats):
        for name, lean in variants.items():
            began = time.perf_counter()
            marked = mark_duplicates(lean(change_events(events))).persist()
            decoded = decode_changes(marked, spec, ["id"]).persist()
            decoded.count()
            times[name].append(time.perf_counter() - began)
            decoded.unpersist()
            marked.unpersist()
            print(f"{name}: {times[name][-1]:.2f} s", flush=True)
    for name, values in times.items():
        print(f"{name:28s} median {statistics.median(values):.2f} s ({min(values):.2f}-{max(values):.2f})")
    spark.stop()


if __name__ == "__main__":
    main()
