"""spark-submit entry point: compact one table's sealed Kafka offset range into the lake.

Reads exactly the run's range (from the state database, or given as Spark offset JSON), parses the
Debezium envelopes, and publishes events, quarantine, changelog and the lake table for the run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from cdc_reconcile import checkpoints
from cdc_reconcile.config import load_config, parse_flag
from cdc_reconcile.debezium.pgtypes import DecodeOptions
from cdc_reconcile.pipeline import TableLake, compact
from cdc_reconcile.spark import build_session


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--table", required=True, help="schema.table, as in the table configuration")
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--lake-root", required=True)
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--state-dsn", default=os.environ.get("CDC_STATE_DSN"), help="where the sealed range is")
    parser.add_argument("--starting-offsets", help="Spark offset JSON; instead of --state-dsn")
    parser.add_argument("--ending-offsets", help="Spark offset JSON; instead of --state-dsn")
    parser.add_argument("--tables-config", default=None)
    parser.add_argument(
        "--full-rescan",
        nargs="?",
        const=True,
        default=False,
        type=parse_flag,
        help="the range is the whole topic: fold the table from it alone (true/false)",
    )
    parser.add_argument("--decimal-handling-mode", default="precise", choices=["precise", "string", "double"])
    parser.add_argument(
        "--kafka-timeout", type=float, default=60.0, help="seconds to wait for the broker before giving up"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    table = load_config(args.tables_config).table(args.table)
    if args.starting_offsets and args.ending_offsets:
        starting, ending = args.starting_offsets, args.ending_offsets
    elif args.state_dsn:
        with checkpoints.connect(args.state_dsn) as conn:
            offset_range = checkpoints.get_range(conn, args.run_id, table.name)
        if offset_range is None or not offset_range.sealed:
            print(f"error: run {args.run_id!r} has no sealed range for {table.name}; run seal_offsets", file=sys.stderr)
            return 2
        starting, ending = offset_range.as_spark_json()
    else:
        print("error: give --state-dsn or both --starting-offsets and --ending-offsets", file=sys.stderr)
        return 2
    try:  # an unreachable broker gets one line naming it, not Spark's stack trace a minute later
        checkpoints.list_partitions(args.bootstrap_servers, table.topic, timeout=args.kafka_timeout)
    except checkpoints.CheckpointError as exc:
        print(f"error: compact_cdc for {table.name}: {exc}", file=sys.stderr)
        return 3
    spark = build_session(f"compact_cdc:{table.name}")
    try:
        summary = compact(
            spark,
            lake=TableLake(args.lake_root, table.name),
            run_id=args.run_id,
            key=table.key,
            bootstrap=args.bootstrap_servers,
            starting=starting,
            ending=ending,
            options=DecodeOptions(decimal_handling_mode=args.decimal_handling_mode),
            full_rescan=args.full_rescan,
        )
    finally:
        spark.stop()
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
