"""Spark job ``validate``: run the expectation suite on one table's datasets of one run.

Exits 0 when the suite ran, whether it passed or not: the verdict goes to the state database
(``--state-dsn``) and to stdout as JSON, and the DAG decides from it. With the state database the
trend report beside the Data Docs is rendered again, this run included. A suite that cannot run
(missing dataset, unreachable state database) exits 2 or 3 with a message.
"""

from __future__ import annotations

import os
import sys

from cdc_reconcile.config import TableConfig
from cdc_reconcile.jobs.job_cli import EXIT_DONE, job_parser, run_job, spark_run, summary_line
from cdc_reconcile.phase import Phase
from cdc_reconcile.run import RunSettings
from cdc_reconcile.shared_storage import is_url, normalize_url
from cdc_reconcile.state_store import open_state
from cdc_reconcile.trends.history import report_path, write_report

PROG = "validate"


def parse_args(argv: list[str] | None = None):
    parser = job_parser(PROG, __doc__.splitlines()[0])
    parser.add_argument(
        "--gx-root",
        required=True,
        help="Great Expectations project (stores, Data Docs): a local folder, or a URL on shared storage "
        "(webhdfs://namenode:9870/path, s3://bucket/path, file:///shared/path)",
    )
    parser.add_argument("--phase", type=Phase, choices=list(Phase), default=Phase.BEFORE_REPAIR)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    def validate(table: TableConfig) -> int:
        gx_root = normalize_url(args.gx_root) if is_url(args.gx_root) else os.path.realpath(args.gx_root)
        settings = RunSettings(lake_root=args.lake_root, state_dsn=args.state_dsn, gx_root=gx_root)
        with spark_run(PROG, table, args, settings) as run:
            outcome = run.validate(args.phase)
        summary = outcome.as_dict()
        if args.state_dsn:
            with open_state(args.state_dsn) as conn:
                summary["trend_report"] = str(write_report(conn, report_path(settings.gx_root)))
        print(summary_line(summary))
        return EXIT_DONE

    return run_job(PROG, args, validate)


if __name__ == "__main__":
    sys.exit(main())
