"""What the ``lake`` stage's check costs next to the comparison it joins, in one local Spark session.

Every check, validation and repair compares the lake as of the snapshot with the snapshot (the diff
the suite has always run) and, since attribution, the published table with the lake as of the
snapshot (``attribution.lake_drift``). Both are hash joins over the whole table; this prints the
median seconds of each at ``--rows`` and their ratio. Synthetic rows on Delta tables written
first (read back as a run reads them), no services; it asserts nothing.

    python -m bench.attribution_cost --rows 1000000 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from cdc_reconcile import storage
from cdc_reconcile.attribution import lake_drift
from cdc_reconcile.compaction import CDC_COLUMNS
from cdc_reconcile.diff import diff_rows

KEY = ("id",)
COLUMNS = ["id", "name", "amount", "updated_at"]


def table(spark: SparkSession, rows: int) -> DataFrame:
    base = spark.range(rows).select(
        F.col("id"),
        F.concat(F.lit("name "), F.col("id").cast("string")).alias("name"),
        (F.col("id") % 100000 / 100).cast("decimal(12,2)").alias("amount"),
        F.timestamp_seconds(F.lit(1_790_000_000) + F.col("id")).alias("updated_at"),
    )
    cdc = {
        "_cdc_op": F.lit("u"),
        "_cdc_partition": F.lit(0),
        "_cdc_offset": F.col("id"),
        "_cdc_sub": F.lit(0),
        "_cdc_txid": F.col("id") + 1000,
        "_cdc_lsn": F.col("id") * 8,
        "_cdc_origin": F.lit("debezium"),
    }
    return base.withColumns({c: cdc[c] for c in CDC_COLUMNS})


def seconds(action: Callable[[], object], repeats: int) -> float:
    taken = []
    for _ in range(repeats):
        began = time.perf_counter()
        action()
        taken.append(time.perf_counter() - began)
    return statistics.median(taken)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.attribution_cost", description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    from cdc_dev.stack import StackConfig
    from cdc_reconcile.spark import build_session, spark_jars

    jars = spark_jars(str(StackConfig().spark_jars_dir))
    spark = build_session("bench-attribution-cost", master="local[2]", jars=jars)
    with tempfile.TemporaryDirectory() as folder:
        storage.publish(table(spark, args.rows), f"{folder}/table", "bench", sort_by=list(KEY), metadata={})
        source = table(spark, args.rows).select(*COLUMNS)
        storage.publish(source, f"{folder}/snapshot", "bench", sort_by=list(KEY), metadata={})
        published = storage.read(spark, f"{folder}/table")
        as_of = storage.read(spark, f"{folder}/table").persist()
        snapshot = storage.read(spark, f"{folder}/snapshot").persist()
        as_of.count(), snapshot.count()
        empty = spark.createDataFrame([], "id long")
        diff = seconds(lambda: diff_rows(as_of, snapshot, KEY, COLUMNS).count(), args.repeats)
        found = diff_rows(as_of, snapshot, KEY, COLUMNS)
        drift = seconds(
            lambda: lake_drift(published, as_of, snapshot, KEY, COLUMNS, changed_after=empty, differing=found).count(),
            args.repeats,
        )
    figures = {
        "rows": args.rows,
        "repeats": args.repeats,
        "diff_s_median": round(diff, 2),
        "lake_stage_s_median": round(drift, 2),
        "lake_stage_over_diff": round(drift / diff, 2),
    }
    print(json.dumps(figures))
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
