"""Where compaction spends its time: envelope parsing vs image decoding, per column type.

Reads the bronze ``events`` of a bench lake (real Debezium records), replicates them to ``--rows``,
caches them, and times each transform with Spark's ``noop`` sink, so only the expressions are measured.
Usage: ``.venv/bin/python -m bench.profile_decode <events-dir> [--rows 200000]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections.abc import Callable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from cdc_reconcile.debezium import decoding, envelope
from cdc_reconcile.spark import build_session

SPEC = {
    "id": "bigint",
    "name": "text",
    "email": "text",
    "balance": "numeric(12,2)",
    "quantity": "integer",
    "rating": "smallint",
    "active": "boolean",
    "born": "date",
    "attrs": "jsonb",
    "created_at": "timestamp",
    "updated_at": "timestamptz",
}


def _time(label: str, make: Callable[[], DataFrame], rows: int, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        began = time.perf_counter()
        make().write.format("noop").mode("overwrite").save()
        best = min(best, time.perf_counter() - began)
    print(f"{label:40s} {best:7.2f} s  {rows / best:10,.0f} rows/s", flush=True)
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("events")
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--decoder", help="path of an older single-file debezium.py to compare")
    parser.add_argument("--per-column", action="store_true")
    args = parser.parse_args()
    tag_envelopes, tag_decode_errors = envelope.tag_envelopes, decoding.tag_decode_errors
    if args.decoder:
        spec_ = importlib.util.spec_from_file_location("debezium_other", args.decoder)
        module = importlib.util.module_from_spec(spec_)
        sys.modules["debezium_other"] = module
        spec_.loader.exec_module(module)
        tag_envelopes, tag_decode_errors = module.tag_envelopes, module.tag_decode_errors
    spark = build_session("profile-decode", master="local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    events = spark.read.parquet(args.events).filter("op is not null")
    n = events.count()
    copies = max(args.rows // n, 1)
    base = (
        events.crossJoin(spark.range(copies).withColumnRenamed("id", "_copy"))
        .select("topic", "partition", "offset", "key", "raw_value", "before", "after")
        .repartition(2)
        .cache()
    )
    rows = base.count()
    print(f"{rows:,} events ({n:,} distinct)")
    raw = base.select("topic", "partition", "offset", "key", F.col("raw_value").alias("value"))
    _time("read cached input", lambda: base, rows)
    _time("tag_envelopes (parse)", lambda: tag_envelopes(raw), rows)
    _time("tag_decode_errors (both images)", lambda: tag_decode_errors(base, SPEC), rows)
    if args.per_column:
        for name, pg in SPEC.items():
            _time(f"decode [{name} {pg}]", lambda s={name: pg}: tag_decode_errors(base, s), rows)
    spark.stop()


if __name__ == "__main__":
    main()
