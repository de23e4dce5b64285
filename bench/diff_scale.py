"""The point-in-time diff at 10M rows against DuckDB, on inputs scaled from a bench run's own.

Issue 16 judges the diff at 10M rows at 1.5x DuckDB's time. Loading 10M rows through the connector
and compacting them takes the stack longer than a session has, so this bench takes the Parquet pair
a ``bench/run.sh`` run exported (``<work-dir>/diff-input``: that run's snapshot and its previous lake
table, the hour's changes between them) and writes it ``--copies`` times over with the keys moved
past each other's range: the same columns, types, values and share of differences, N times the rows.
The engine (``diff.diff_rows``) and DuckDB then compare the scaled pair in turn, in one process, and
must find the same counts: ``--copies`` times the input's. Results go where ``bench/run.sh``'s go,
in the same form, so the diff's target (1.5x from 10M rows) judges them.

    bash bench/diff_scale.sh --copies 10 --repeats 3
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from bench.bench import KEY, ROOT, duckdb_diff, machine, spark_diff, write_results

log = logging.getLogger("bench.diff_scale")
STEP = "diff (snapshot vs lake table)"


def scaled(df: DataFrame, key: str, copies: int, stride: int) -> DataFrame:
    """``df`` ``copies`` times, copy ``i``'s ``key`` moved by ``i * stride`` (more than the keys' span)."""
    shifted = [df.withColumn(key, F.col(key) + F.lit(i * stride).cast(df.schema[key].dataType)) for i in range(copies)]
    out = shifted[0]
    for copy in shifted[1:]:
        out = out.unionByName(copy)
    return out


def scale_input(spark: Any, source_dir: Path, out_dir: Path, copies: int) -> int:
    """Write ``source_dir``'s snapshot/table pair ``copies`` times over into ``out_dir``; the snapshot's rows."""
    key = KEY[0]
    sides = {side: spark.read.parquet(str(source_dir / side)) for side in ("snapshot", "table")}
    span = max(df.agg(F.max(key)).first()[0] or 0 for df in sides.values()) + 1
    for side, df in sides.items():
        scaled(df, key, copies, span).write.mode("overwrite").parquet(str(out_dir / side))
    return spark.read.parquet(str(out_dir / "snapshot")).count()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--input",
        default=str(ROOT.parent / ".run" / "bench-lake" / "diff-input"),
        help="a bench run's exported diff input (snapshot/ and table/ Parquet)",
    )
    parser.add_argument("--copies", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "results"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    source_dir = Path(args.input)
    if not (source_dir / "snapshot").is_dir() or not (source_dir / "table").is_dir():
        parser.error(f"{source_dir} has no snapshot/ and table/ Parquet: run bash bench/run.sh first, it exports them")

    from cdc_dev.stack import StackConfig
    from cdc_reconcile.spark import build_session, spark_jars

    driver_memory = os.environ.get("CDC_SPARK_DRIVER_MEMORY", "2g")
    # the session bench/run.sh measures the diff in: its settings and jars
    spark = build_session("cdc-bench", master="local[2]", jars=spark_jars(str(StackConfig().spark_jars_dir)))
    spark.sparkContext.setLogLevel("ERROR")
    out_dir = source_dir.parent / f"{source_dir.name}-x{args.copies}"
    began = time.perf_counter()
    rows = scale_input(spark, source_dir, out_dir, args.copies)
    log.info(
        "scaled %s x%d into %s: %s rows a side, %.1f s",
        source_dir,
        args.copies,
        out_dir,
        f"{rows:,}",
        time.perf_counter() - began,
    )
    snapshot_dir, table_dir = str(out_dir / "snapshot"), str(out_dir / "table")
    columns = [f.name for f in spark.read.parquet(snapshot_dir).schema.fields]
    expected = {
        k: v * args.copies
        for k, v in spark_diff(spark, str(source_dir / "snapshot"), str(source_dir / "table"), columns).items()
    }

    ours, duck, counts = [], [], {}
    for _ in range(args.repeats):
        for name, fn, samples in (
            ("spark", lambda: spark_diff(spark, snapshot_dir, table_dir, columns), ours),
            ("duckdb", lambda: duckdb_diff(snapshot_dir, table_dir, columns), duck),
        ):
            t = time.perf_counter()
            counts[name] = fn()
            samples.append(time.perf_counter() - t)
            log.info("%s: %.2f s %s", name, samples[-1], counts[name])
            if counts[name] != expected:
                raise SystemExit(f"{name} found {counts[name]}, not {expected} ({args.copies} times the input's)")
    payload = {
        "started": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H-%M-%SZ"),
        "command": "bash bench/diff_scale.sh " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": machine(),
        "settings": {
            **vars(args),
            "driver_memory": driver_memory,
            "spark": spark.version,
            "scaled_from": str(source_dir),
        },
        "measurements": [
            {
                "size": rows,
                "step": STEP,
                "unit": "rows",
                "work": rows,
                "samples": ours,
                "baseline_name": "DuckDB",
                "baseline_samples": duck,
                "counts": counts,
                "scaled_copies": args.copies,
                "loadavg": os.getloadavg(),
            }
        ],
    }
    json_path, md_path = write_results(Path(args.out), payload)
    print(md_path.read_text())
    print(f"results: {json_path}")
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
