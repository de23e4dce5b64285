"""Spark job ``reconcile``: diff one table's lake copy against the run's snapshot, and repair it.

``--check-only`` prints the point-in-time diff and exits 1 when it is not clean; otherwise repair
events are written for every difference, duplicates dropped from the changelog (``--dry-run``: the
audit only) and the table re-folded. With ``--state-dsn`` the audit rows also go to the state
database's ``cdc_reconcile.repair_audit``, replacing what an earlier try of the same run wrote.
"""

from __future__ import annotations

import sys

from cdc_reconcile.config import TableConfig
from cdc_reconcile.jobs.job_cli import EXIT_DIFFERENCES, EXIT_DONE, flag, job_parser, run_job, spark_run, summary_line
from cdc_reconcile.run import RunSettings

PROG = "reconcile"


def parse_args(argv: list[str] | None = None):
    parser = job_parser(PROG, __doc__.splitlines()[0])
    parser.add_argument("--check-only", action="store_true", help="print the diff; exit 1 when it is not clean")
    flag(parser, "--dry-run", "write only the audit")
    args = parser.parse_args(argv)
    if args.check_only and args.dry_run:
        parser.error("--check-only and --dry-run exclude each other")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    def reconcile(table: TableConfig) -> int:
        settings = RunSettings(lake_root=args.lake_root, state_dsn=args.state_dsn)
        with spark_run(PROG, table, args, settings) as run:
            if args.check_only:
                report, diff = run.check()
                diff.unpersist()
                print(summary_line(report.as_dict()))
                return EXIT_DONE if report.clean else EXIT_DIFFERENCES
            summary = run.reconcile(dry_run=args.dry_run)
        print(summary_line(summary))
        return EXIT_DONE

    return run_job(PROG, args, reconcile)


if __name__ == "__main__":
    sys.exit(main())
