"""Debezium PostgreSQL change events read from Kafka (JSON converter), one module per job.

* :mod:`.envelope`: change-event records of a table topic, parsed into events with the row images
  kept as compact JSON text, so that the bronze ``events`` dataset does not depend on a table's
  column types.
* :mod:`.transactions`: the transaction-metadata topic (BEGIN/END records).
* :mod:`.pgtypes`: the PostgreSQL type map and the connector settings that shape it, shared with the
  snapshot side so that both read a column in the same Spark type.
* :mod:`.decoding`: row images decoded to typed Spark columns. This is a second step driven by a
  table spec (column name -> PostgreSQL type), because the JSON alone is ambiguous (a base64 decimal
  and a string decimal can look the same) and schema-less records carry no scale.

Nothing is dropped: every input record ends up either in the parsed output or in a quarantine output
with a ``reason``. Callers import from the module that owns a name; this package re-exports nothing.
"""
