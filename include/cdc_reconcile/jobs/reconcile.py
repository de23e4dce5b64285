"""spark-submit entry point: diff one table's lake copy against the run's snapshot, and repair it.

``--check-only`` prints the point-in-time diff and exits 1 when it is not clean; otherwise repair
events are written for every difference, duplicates dropped from the changelog (``--dry-run``: the
audit only) and the table re-folded. With ``--state-dsn`` the audit rows also go to the state
database's ``cdc_reconcile.repair_audit``, replacing what an earlier attempt of the same run wrote.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from cdc_reconcile import run_state, state_store, storage
from cdc_reconcile.config import load_config, parse_flag
from cdc_reconcile.pipeline import TableLake, check, reconcile
from cdc_reconcile.spark import build_session


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--table", required=True, help="schema.table, as in the table configuration")
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--lake-root", required=True)
    parser.add_argument("--tables-config", default=None)
    parser.add_argument("--state-dsn", default=os.environ.get("CDC_STATE_DSN"), help="where the audit is recorded")
    parser.add_argument("--check-only", action="store_true", help="print the diff; exit 1 when it is not clean")
    parser.add_argument(
        "--dry-run", nargs="?", const=True, default=False, type=parse_flag, help="write only the audit (true/false)"
    )
    args = parser.parse_args(argv)
    if args.check_only and args.dry_run:
        parser.error("--check-only and --dry-run exclude each other")
    return args


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
        if args.state_dsn:
            audit = storage.read_partitions(spark, lake.audit, [storage.safe_name(args.run_id)])
            with state_store.connect(args.state_dsn) as conn:
                summary["audit_rows_recorded"] = run_state.replace_repair_audit(
                    conn, args.run_id, table.name, (row.asDict() for row in audit.toLocalIterator())
                )
    finally:
        spark.stop()
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
