"""The kinds of failure a user acts on differently, shared by every module and the jobs' exit codes.

* :class:`InputError`: the input or configuration is wrong (an unknown table, a missing dataset, a
  range that was never sealed); fix it and run again. Jobs exit with 2.
* :class:`UnreachableError`: a dependency did not answer (PostgreSQL, Kafka); check it is running and
  reachable, then retry. Jobs exit with 3.
"""

from __future__ import annotations


class ReconcileError(RuntimeError):
    """Anything cdc-reconcile refuses or cannot do; the message names the thing and what to do."""


class InputError(ReconcileError):
    """Bad input or configuration."""


class UnreachableError(ReconcileError):
    """A service the run depends on (state database, source database, Kafka) did not answer."""
