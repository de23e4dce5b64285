"""Development tools of cdc-reconcile: the embedded stack, the demo loader and demo, the fault runner.

Nothing in the product package (``cdc_reconcile``) imports this package; a deployment installs the
product alone.
"""
