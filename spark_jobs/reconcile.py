"""spark-submit entry point: diff one table's lake copy against the run's snapshot, and repair it.

``--check-only`` prints the point-in-time diff and exits 1 when it is not clean; otherwise repair
events are written for every difference (``--dry-run``: the audit only) and the table re-folded.
"""

from __future__ import annotations

import argparse
import json
import sys

from cdc_reconcile.config import load_config
from cdc_reconcile.pipeline import TableLake, check, reconcile
from cdc_reconcile.spark import build_session


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--table", required=True, help="schema.table, as in the table configuration")
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--lake-root", required=True)
    parser.add_argument("--tables-config", default=None)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check-only", action="store_true")
    mode.add_argument("--dry-run", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    table = load_config(args.tables_config).table(args.table)
    lake = TableLake(args.lake_root, table.name)
    spark = build_session(f"reconcile:{table.name}")
    try:
        if args.check_only:
            report, _ = check(spark, lake=lake, run_id=args.run_id, key=table.key)
            print(json.dumps(report.as_dict()))
            return 0 if report.clean else 1
        summary = reconcile(spark, lake=lake, run_id=args.run_id, key=table.key, dry_run=args.dry_run)
    finally:
        spark.stop()
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
