"""The Spark jobs, one module each: ``main()`` parses arguments, builds the session, runs one step.

Each module is also a spark-submit application (``python -m cdc_reconcile.jobs.<name>`` or the
module's file); :func:`cdc_reconcile.orchestration.tasks.job` finds the file through the installed package.
"""
