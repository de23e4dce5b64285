"""Spark job ``snapshot_source``: a consistent JDBC snapshot of one configured table, published to the lake (Delta).

    spark-submit .../cdc_reconcile/jobs/snapshot_source.py --table public.customers --run-id <dag run id> \\
        --lake-root /data/lake --jdbc-url jdbc:postgresql://host:5432/db --dsn "host=... dbname=..." \\
        --user cdc   # password from the Spark conf spark.cdc.secret.source.password, else $CDC_PG_PASSWORD

Run by the DAG, the connection settings come as Spark configuration (``spark.cdc.*``, see
:mod:`cdc_reconcile.jobs.job_conf`) and the command line carries none of them.
"""

from __future__ import annotations

import argparse
import sys

from cdc_reconcile import storage
from cdc_reconcile.config import TableConfig
from cdc_reconcile.jobs import job_conf
from cdc_reconcile.jobs.job_cli import EXIT_DONE, job_parser, run_job, spark_run, summary_line
from cdc_reconcile.run import RunSettings, SourceDatabase
from cdc_reconcile.snapshot import DEFAULT_FETCH_SIZE, DEFAULT_PARTITIONS

PROG = "snapshot_source"


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Arguments; connection settings missing from them come from the Spark conf, else the environment."""
    conf = job_conf.submitted_conf()
    parser = job_parser(PROG, __doc__.splitlines()[0], conf)

    def connection_option(name: str, key: str, required: bool, help_text: str) -> None:
        value = job_conf.setting(conf, key)
        default_text = f"default: Spark conf {key}, else ${job_conf.ENV_FALLBACK[key]}"
        parser.add_argument(
            name, default=value, required=required and value is None, help=f"{help_text} ({default_text})"
        )

    connection_option("--jdbc-url", job_conf.SOURCE_JDBC_URL, True, "JDBC URL of the source database")
    connection_option(
        "--dsn", job_conf.SOURCE_DSN, True, "libpq connection string for the connection that exports the snapshot"
    )
    connection_option("--user", job_conf.SOURCE_USER, True, "the JDBC reads' user")
    connection_option("--password", job_conf.SOURCE_PASSWORD, False, "the JDBC reads' password")
    parser.add_argument("--partitions", type=_positive, default=DEFAULT_PARTITIONS, help="parallel JDBC reads")
    parser.add_argument("--fetch-size", type=_positive, default=DEFAULT_FETCH_SIZE, help="JDBC fetchsize (> 0)")
    parser.add_argument("--output-files", type=_positive, default=1, help="Parquet files per snapshot version")
    parser.add_argument("--keep", type=_positive, default=None, help="prune to this many snapshot versions")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    def snapshot(table: TableConfig) -> int:
        source = SourceDatabase(dsn=args.dsn, jdbc_url=args.jdbc_url, user=args.user, password=args.password)
        settings = RunSettings(lake_root=args.lake_root, state_dsn=args.state_dsn, source=source)
        with spark_run(PROG, table, args, settings) as run:
            result = run.snapshot(
                partitions=args.partitions, fetch_size=args.fetch_size, output_files=args.output_files
            )
            if args.keep:
                storage.prune(run.spark, run.lake.snapshot, args.keep)
        print(summary_line(result.summary()))
        return EXIT_DONE

    return run_job(PROG, args, snapshot)


if __name__ == "__main__":
    sys.exit(main())
