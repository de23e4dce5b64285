"""spark-submit entry point: a consistent JDBC snapshot of one configured table, published as Parquet.

Thin on purpose: parse arguments, build the session, call ``cdc_reconcile.snapshot``, print one line
of JSON. Everything else (exported snapshot, partitioning, typing, atomic publish) is library code.

    spark-submit spark_jobs/snapshot_source.py --table public.customers --run-id <dag run id> \\
        --lake-root /data/lake --jdbc-url jdbc:postgresql://host:5432/db --dsn "host=... dbname=..." \\
        --user cdc   # password from CDC_PG_PASSWORD
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from cdc_reconcile import storage
from cdc_reconcile.config import ConfigError
from cdc_reconcile.snapshot import (
    DEFAULT_FETCH_SIZE,
    DEFAULT_PARTITIONS,
    SnapshotError,
    dataset_path,
    resolve_table,
    snapshot_table,
)
from cdc_reconcile.spark import build_session


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Arguments, with connection settings also taken from the environment (never from code)."""
    env = os.environ.get
    parser = argparse.ArgumentParser(prog="snapshot_source", description=__doc__.splitlines()[0])
    parser.add_argument("--table", required=True, help="schema.table, as listed in the table configuration")
    parser.add_argument("--run-id", required=True, help="the DAG run id; the snapshot version is derived from it")
    parser.add_argument("--lake-root", default=env("CDC_LAKE_ROOT"), required=env("CDC_LAKE_ROOT") is None)
    parser.add_argument("--jdbc-url", default=env("CDC_PG_JDBC_URL"), required=env("CDC_PG_JDBC_URL") is None)
    parser.add_argument(
        "--dsn",
        default=env("CDC_PG_DSN"),
        required=env("CDC_PG_DSN") is None,
        help="libpq connection string for the connection that exports the snapshot",
    )
    parser.add_argument("--user", default=env("CDC_PG_USER"), required=env("CDC_PG_USER") is None)
    parser.add_argument("--password", default=env("CDC_PG_PASSWORD"), help="default: $CDC_PG_PASSWORD")
    parser.add_argument("--partitions", type=_positive, default=DEFAULT_PARTITIONS, help="parallel JDBC reads")
    parser.add_argument("--fetch-size", type=_positive, default=DEFAULT_FETCH_SIZE, help="JDBC fetchsize (> 0)")
    parser.add_argument("--output-files", type=_positive, default=1, help="Parquet files per snapshot version")
    parser.add_argument("--keep", type=_positive, default=None, help="prune to this many snapshot versions")
    parser.add_argument(
        "--tables-config",
        default=None,
        help="YAML table configuration (default: $CDC_TABLES_CONFIG, else the packaged tables.py)",
    )
    parser.add_argument("--master", default=None, help="Spark master when not run by spark-submit")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        table = resolve_table(args.table, args.tables_config)
    except ConfigError as exc:
        print(f"snapshot_source: error: {exc}", file=sys.stderr)
        return 2
    spark = build_session(f"snapshot_source[{table.name}]", master=args.master)
    try:
        result = snapshot_table(
            spark,
            table,
            dsn=args.dsn,
            jdbc_url=args.jdbc_url,
            user=args.user,
            password=args.password,
            lake_root=args.lake_root,
            run_id=args.run_id,
            partitions=args.partitions,
            fetch_size=args.fetch_size,
            output_files=args.output_files,
        )
        if args.keep:
            storage.prune(dataset_path(args.lake_root, table.name), args.keep)
    except SnapshotError as exc:
        print(f"snapshot_source: error: {exc}", file=sys.stderr)
        return 2
    finally:
        spark.stop()
    print(json.dumps(result.summary(), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
