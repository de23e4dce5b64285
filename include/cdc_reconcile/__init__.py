"""cdc-reconcile: prove, every hour, that a Debezium lake copy equals its PostgreSQL source."""

__version__ = "0.1.0"
