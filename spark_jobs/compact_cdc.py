"""spark-submit shim: the job is ``cdc_reconcile.jobs.compact_cdc``, found through the installed package."""

import sys

from cdc_reconcile.jobs.compact_cdc import main

if __name__ == "__main__":
    sys.exit(main())
