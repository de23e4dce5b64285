"""spark-submit shim: the job is ``cdc_reconcile.jobs.snapshot_source``, found through the installed package."""

import sys

from cdc_reconcile.jobs.snapshot_source import main

if __name__ == "__main__":
    sys.exit(main())
