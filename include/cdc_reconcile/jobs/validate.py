"""spark-submit entry point: run the expectation suite on one table's datasets of one run.

Exits 0 when the suite ran, whether it passed or not: the verdict goes to the state database
(``--state-dsn``) and to stdout as JSON, and the DAG decides from it. A suite that cannot run
(missing dataset, unreachable state database) exits non-zero with a message.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from cdc_reconcile import run_state, state_store
from cdc_reconcile.config import ConfigError, load_config
from cdc_reconcile.phase import Phase
from cdc_reconcile.pipeline import PipelineError, TableLake, validate
from cdc_reconcile.spark import build_session


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="validate", description=__doc__.splitlines()[0])
    parser.add_argument("--table", required=True, help="schema.table, as in the table configuration")
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--lake-root", required=True)
    parser.add_argument("--gx-root", required=True, help="Great Expectations project folder (stores, Data Docs)")
    parser.add_argument("--phase", type=Phase, choices=list(Phase), default=Phase.BEFORE_REPAIR)
    parser.add_argument("--state-dsn", default=os.environ.get("CDC_STATE_DSN"), help="where results are recorded")
    parser.add_argument("--tables-config", default=None)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        table = load_config(args.tables_config).table(args.table)
    except ConfigError as exc:
        print(f"validate: error: {exc}", file=sys.stderr)
        return 2
    spark = build_session(f"validate:{table.name}")
    try:
        outcome = validate(
            spark,
            lake=TableLake(args.lake_root, table.name),
            run_id=args.run_id,
            key=table.key,
            gx_root=os.path.realpath(args.gx_root),
            phase=args.phase,
        )
    except PipelineError as exc:
        print(f"validate: error: {exc}", file=sys.stderr)
        return 2
    finally:
        spark.stop()
    if args.state_dsn:
        with state_store.connect(args.state_dsn) as conn:
            run_state.record_suite_outcome(conn, outcome.as_dict(), args.phase)
    print(json.dumps(outcome.as_dict(), default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
