"""What one hourly run costs the lake, on Delta: bytes written per run, and cost against history.

Runs the engine's lake steps on synthetic changelogs in one local Spark session (no Kafka, no
PostgreSQL: this measures the lake, not the services), and prints figures; it asserts nothing.

* **Bytes written per run.** A table of ``--rows`` rows, then an hour of ``--change-share`` changes
  (updates, deletes, inserts): the fold published as a MERGE (what a run does) next to the same fold
  written as a full overwrite (what every run did before), in the same session, with the table's
  size for scale. Medians of ``--repeats``.
* **Cost against history.** The per-run steps that used to read every earlier range (duplicate
  marking against earlier runs, the key state's update, the fold's publication) for run 2 and for
  run ``--history`` of the same size: the earlier runs' datasets are created in bulk (one commit per
  dataset) and the key state as they would have left it, so building 200 runs costs one.
* **Retention at steady state** (``--retention-runs``, ``--keep-runs``): after ``--retention-runs`` runs
  with one commit each to ``events`` and ``snapshot`` (Delta keeps their commits in the history for
  30 days, pruned runs' too) and a first prune, each further run's retention, which prunes one run.

    python -m bench.lake_costs --rows 1000000 --change-share 0.01 --history 200
    python -m bench.lake_costs --only retention --retention-runs 120 --keep-runs 20
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from cdc_reconcile import key_state, storage
from cdc_reconcile.compaction import CDC_FIELDS, mark_duplicates
from cdc_reconcile.debezium.decoding import DECODE_ERRORS_FIELD, UNAVAILABLE_FIELD
from cdc_reconcile.publication import FoldInputs, publish_fold

SPEC = {"id": "bigint", "name": "text", "amount": "numeric(12,2)", "updated_at": "timestamp"}
KEY = ("id",)


def after_row(spark: SparkSession) -> Any:
    return F.struct(
        F.col("id"),
        F.concat(F.lit("name-"), F.col("id").cast("string"), F.lit("-"), F.col("_v").cast("string")).alias("name"),
        (F.col("id") % 100000 / 100 + F.col("_v")).cast("decimal(12,2)").alias("amount"),
        F.timestamp_micros(F.lit(1_700_000_000_000_000) + F.col("id")).alias("updated_at"),
        F.array().cast("array<string>").alias(UNAVAILABLE_FIELD),
        F.array().cast("array<string>").alias(DECODE_ERRORS_FIELD),
    )


def changelog(spark: SparkSession, ids: DataFrame, *, op: Any, first_offset: int, version: int) -> DataFrame:
    """Typed changelog rows (the shape compaction writes) for the ids, in id order from ``first_offset``."""
    return (
        ids.select(
            F.col("id"),
            F.to_json(F.struct("id")).alias("key"),
            op.alias("op"),
            F.lit(0).alias("partition"),
            (F.lit(first_offset).cast("long") + F.col("id")).alias("offset"),
            F.lit(0).alias("sub"),
            F.lit(None).cast("long").alias("segment"),
            (F.lit(first_offset).cast("long") + F.col("id")).alias("source_txid"),
            (F.lit(first_offset).cast("long") * 10 + F.col("id")).alias("source_lsn"),
            F.lit(1).cast("long").alias("source_ts_ms"),
            F.lit("false").alias("source_snapshot"),
            F.lit(None).cast("string").alias("duplicate_class"),
            F.lit("debezium").alias("origin"),
            F.lit(version).alias("_v"),
        )
        .withColumn("after_row", F.when(F.col("op") != "d", after_row(spark)))
        .drop("_v")
    )


def hour_of_changes(spark: SparkSession, rows: int, share: float, first_offset: int, version: int) -> DataFrame:
    """``share`` of the keys changed: 80 % updates, 10 % deletes, 10 % inserts beyond the table."""
    changed = max(1, int(rows * share))
    step = max(1, rows // changed)
    ids = spark.range(0, rows, step).limit(changed)
    ops = F.when(F.floor(F.col("id") / step) % 10 == 0, F.lit("d")).otherwise(F.lit("u"))
    existing = changelog(spark, ids, op=ops, first_offset=first_offset, version=version)
    inserts = changelog(
        spark, spark.range(rows, rows + changed // 10), op=F.lit("c"), first_offset=first_offset, version=version
    )
    return existing.unionByName(inserts)


def median_of(repeats: int, measure: Callable[[], dict[str, float]]) -> dict[str, float]:
    runs = [measure() for _ in range(repeats)]
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def bytes_per_run(spark: SparkSession, work: Path, rows: int, share: float, repeats: int) -> dict[str, Any]:
    def measure() -> dict[str, float]:
        base = str(work / f"table-{time.monotonic_ns()}")
        initial = changelog(spark, spark.range(rows), op=F.lit("c"), first_offset=0, version=0)
        first, _ = publish_fold(
            FoldInputs(
                initial, SPEC, KEY, None, None, None, spark.createDataFrame([], "partition int, reset_offset long")
            ),
            base,
            "run-1",
            full_rescan=False,
        )
        hour = hour_of_changes(spark, rows, share, rows, 1).persist()
        inputs = FoldInputs(
            hour,
            SPEC,
            KEY,
            storage.read(spark, base, 0),
            0,
            0,
            spark.createDataFrame([], "partition int, reset_offset long"),
        )
        began = time.monotonic()
        merged, how = publish_fold(inputs, base, "run-2", full_rescan=False)
        merge_seconds = time.monotonic() - began
        assert how == "merge", how
        began = time.monotonic()
        overwritten = storage.publish(
            storage.read(spark, base, merged.version), base + "-overwrite", "run-2", sort_by=list(KEY)
        )
        overwrite_seconds = time.monotonic() - began
        hour.unpersist()
        written = storage.commit_bytes(spark, base, merged.version)
        return {
            "table_bytes": first.bytes_written,
            "merge_bytes": float(sum(written.values())),
            "merge_data_bytes": written["data"],
            "merge_change_data_bytes": written["change_data"],
            "merge_deletion_vector_bytes": written["deletion_vectors"],
            "overwrite_bytes": overwritten.bytes_written,
            "merge_seconds": merge_seconds,
            "overwrite_seconds": overwrite_seconds,
        }

    figures = median_of(repeats, measure)
    figures["merge_share_of_table"] = figures["merge_bytes"] / figures["table_bytes"]
    return figures


def history_cost(spark: SparkSession, work: Path, rows: int, share: float, runs: int, repeats: int) -> dict[str, Any]:
    """Seconds of one run's history-dependent steps after 1 and after ``runs - 1`` earlier runs."""
    figures: dict[str, Any] = {}
    for earlier in (1, runs - 1):
        lake = work / f"history-{earlier}"
        state_at, table_at = str(lake / "key_state"), str(lake / "table")
        # the earlier runs' key state and table, in one commit each (what they would have left)
        past = hour_of_changes(spark, rows, share, 0, 2)
        runs_events = past.crossJoin(spark.range(earlier).select(F.col("id").alias("_r"))).select(
            *[c for c in past.columns if c not in ("offset", "source_lsn", "source_txid")],
            (F.col("offset") + F.col("_r") * rows * 2).alias("offset"),
            (F.col("source_lsn") + F.col("_r") * rows * 20).alias("source_lsn"),
            (F.col("source_txid") + F.col("_r") * rows * 2).alias("source_txid"),
        )
        key_state.commit(spark, state_at, "earlier", runs_events, base=None, rebuild=True)
        storage.publish(
            changelog(spark, spark.range(rows), op=F.lit("c"), first_offset=0, version=0).select(
                *KEY,
                *(F.col("after_row").getField(c).alias(c) for c in SPEC if c not in KEY),
                *(F.col(v).alias(k) for k, v in CDC_FIELDS.items()),
            ),
            table_at,
            "earlier",
        )

        def measure(lake: Path = lake, earlier: int = earlier) -> dict[str, float]:
            hour = hour_of_changes(spark, rows, share, (earlier + 1) * rows * 2, time.monotonic_ns() % 1000)
            began = time.monotonic()
            base = storage.latest_version(spark, str(lake / "key_state"))
            state = storage.read(spark, str(lake / "key_state"), base)
            marked = mark_duplicates(hour.drop("duplicate_class"), state=state).persist()
            marked.count()
            run = f"r{time.monotonic_ns()}"
            key_state.commit(spark, str(lake / "key_state"), run, marked, base=base, rebuild=False)
            table_base = storage.latest_version(spark, str(lake / "table"))
            publish_fold(
                FoldInputs(
                    marked.drop("source_snapshot").withColumn("source_snapshot", F.lit("false")),
                    SPEC,
                    KEY,
                    storage.read(spark, str(lake / "table"), table_base),
                    table_base,
                    table_base,
                    spark.createDataFrame([], "partition int, reset_offset long"),
                ),
                str(lake / "table"),
                run,
                full_rescan=False,
            )
            marked.unpersist()
            return {"seconds": time.monotonic() - began}

        figures[f"run_{earlier + 1}_seconds"] = median_of(repeats, measure)["seconds"]
    figures["ratio"] = figures[f"run_{runs}_seconds"] / figures["run_2_seconds"]
    return figures


def retention_cost(spark: SparkSession, work: Path, runs: int, keep: int, repeats: int) -> dict[str, Any]:
    """Seconds of one run's retention with ``runs`` runs in the history, ``keep`` of them kept."""
    from cdc_reconcile.config import Retention
    from cdc_reconcile.lake import TableLake
    from cdc_reconcile.retention import apply_retention

    lake = TableLake(work / "retention", "public.t")
    retention = Retention(keep_runs=keep)
    written = 0

    def write_run() -> str:
        nonlocal written
        run = f"r{written:05d}"
        storage.replace_partition(spark.range(10).withColumn("name", F.lit(run)), lake.snapshot, run)
        storage.replace_partition(spark.range(3).withColumnRenamed("id", "offset"), lake.events, run)
        written += 1
        return run

    for _ in range(runs):
        current = write_run()
    first = apply_retention(spark, lake, retention, current)
    pruned: list[int] = []

    def measure() -> dict[str, float]:
        run = write_run()
        began = time.monotonic()
        done = apply_retention(spark, lake, retention, run)
        pruned.append(len(done["pruned_runs"]))
        return {"seconds": time.monotonic() - began}

    return {
        "runs_in_history": runs,
        "keep_runs": keep,
        "first_prune_runs": len(first["pruned_runs"]),
        "seconds": median_of(repeats, measure)["seconds"],
        "runs_pruned_per_run": pruned,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--change-share", type=float, default=0.01)
    parser.add_argument("--history", type=int, default=200, help="the later run measured against run 2")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--retention-runs", type=int, default=120, help="runs in the history before retention")
    parser.add_argument("--keep-runs", type=int, default=20, help="retention's keep_runs for that measurement")
    parser.add_argument(
        "--only", choices=("bytes", "history", "retention"), help="one measurement (default: all three)"
    )
    parser.add_argument("--out", default=None, help="also write the figures as JSON here")
    args = parser.parse_args(argv)

    from cdc_dev.stack import StackConfig
    from cdc_reconcile.spark import build_session, spark_jars

    spark = build_session("bench-lake-costs", master="local[2]", jars=spark_jars(str(StackConfig().spark_jars_dir)))
    spark.sparkContext.setLogLevel("ERROR")
    with tempfile.TemporaryDirectory(prefix="bench-lake-") as folder:
        work = Path(folder)
        wanted = {args.only} if args.only else {"bytes", "history", "retention"}
        result: dict[str, Any] = {"rows": args.rows, "change_share": args.change_share, "repeats": args.repeats}
        if "bytes" in wanted:
            result["bytes_per_run"] = bytes_per_run(spark, work, args.rows, args.change_share, args.repeats)
        if "history" in wanted:
            result["history"] = history_cost(spark, work, args.rows, args.change_share, args.history, args.repeats)
        if "retention" in wanted:
            result["retention"] = retention_cost(spark, work, args.retention_runs, args.keep_runs, args.repeats)
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
