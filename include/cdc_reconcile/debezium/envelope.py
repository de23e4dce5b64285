"""Change-event records of a table topic: Debezium envelopes parsed into events, or quarantined with a reason.

The row images stay compact JSON text, so that the bronze ``events`` dataset does not depend on a
table's column types; :mod:`.decoding` types them in a second step.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ._json import is_object_text, json_map
from ._records import check, int_field, reasons, schema_mismatch, split_tagged, with_envelope, with_raw_columns

OPS = ("c", "u", "d", "r", "t")

PARSED_COLUMNS = (
    "topic",
    "partition",
    "offset",
    "key",
    "op",
    "is_tombstone",
    "before",
    "after",
    "source_lsn",
    "source_txid",
    "source_xmin",
    "source_ts_ms",
    "source_ts_us",
    "source_snapshot",
    "source_sequence",
    "source_db",
    "source_schema",
    "source_table",
    "source_name",
    "source_connector",
    "source_version",
    "ts_ms",
    "ts_us",
    "transaction_id",
    "transaction_total_order",
    "transaction_data_collection_order",
    "with_schema",
    "raw_value",
)
QUARANTINE_COLUMNS = ("topic", "partition", "offset", "key", "raw_value", "reason")


def split_envelopes(tagged: DataFrame) -> tuple[DataFrame, DataFrame]:
    """Parsed events and quarantine rows of a frame made by :func:`tag_envelopes`.

    Both outputs filter one tagged plan; a caller that consumes both should persist the tagged frame
    before splitting it, or the optimizer pushes the filter below the parse and parses every JSON
    document once per check.
    """
    return split_tagged(tagged, PARSED_COLUMNS)


def tag_envelopes(df: DataFrame, *, schemas: bool | None = None) -> DataFrame:
    """Every record parsed, with ``_reason`` (empty when the record is a valid change event).

    `df` needs `topic`, `partition`, `offset`, `key` and `value` (binary or string), as the Kafka
    source gives them. `schemas=None` detects per record whether the JSON converter wrote
    `{"schema": ..., "payload": ...}`; pass True/False to insist on one form. Tombstones (null value,
    or a null payload) are parsed rows with `is_tombstone=true` and a null `op`.
    """
    staged = _with_change_fields(with_envelope(with_raw_columns(df)))
    env, src, trx = F.col("_env"), F.col("_src"), F.col("_trx")
    tombstone = F.col("is_tombstone")
    integers = {
        "source_lsn": int_field(src, "lsn"),
        "source_txid": int_field(src, "txId"),
        "source_xmin": int_field(src, "xmin"),
        "source_ts_ms": int_field(src, "ts_ms"),
        "source_ts_us": int_field(src, "ts_us"),
        "ts_ms": int_field(env, "ts_ms"),
        "ts_us": int_field(env, "ts_us"),
        "transaction_total_order": int_field(trx, "total_order"),
        "transaction_data_collection_order": int_field(trx, "data_collection_order"),
    }

    def integer(name: str) -> Column:
        return integers[name][0].alias(name)

    return staged.select(
        "topic",
        "partition",
        "offset",
        "key",
        "_raw_key",
        F.when(~tombstone, F.col("_op")).alias("op"),
        "is_tombstone",
        F.when(~tombstone, F.col("_before")).alias("before"),
        F.when(~tombstone, F.col("_after")).alias("after"),
        integer("source_lsn"),
        integer("source_txid"),
        integer("source_xmin"),
        integer("source_ts_ms"),
        integer("source_ts_us"),
        src.getItem("snapshot").alias("source_snapshot"),
        src.getItem("sequence").alias("source_sequence"),
        src.getItem("db").alias("source_db"),
        src.getItem("schema").alias("source_schema"),
        src.getItem("table").alias("source_table"),
        src.getItem("name").alias("source_name"),
        src.getItem("connector").alias("source_connector"),
        src.getItem("version").alias("source_version"),
        integer("ts_ms"),
        integer("ts_us"),
        trx.getItem("id").alias("transaction_id"),
        integer("transaction_total_order"),
        integer("transaction_data_collection_order"),
        F.when(F.col("raw_value").isNotNull(), F.col("with_schema")).alias("with_schema"),
        "raw_value",
        _change_event_reason({name: pair[1] for name, pair in integers.items()}, schemas).alias("_reason"),
    )


def _with_change_fields(staged: DataFrame) -> DataFrame:
    """Stage 3: the tombstone flag and the envelope's fields, source and transaction parsed once."""
    env = F.col("_env")
    return staged.withColumns(
        {
            "is_tombstone": F.col("raw_value").isNull()
            | (F.col("with_schema") & F.col("_top").getItem("payload").isNull()),
            "_src_text": env.getItem("source"),
            "_src": json_map(env.getItem("source")),
            "_trx": json_map(env.getItem("transaction")),
            "_op": env.getItem("op"),
            "_before": env.getItem("before"),
            "_after": env.getItem("after"),
        }
    )


def _change_event_reason(bad: dict[str, Column], schemas: bool | None) -> Column:
    """Why a staged record is not a valid change event; `bad` flags the integer fields that are not integers."""
    top, env, src = F.col("_top"), F.col("_env"), F.col("_src")
    op, before, after = F.col("_op"), F.col("_before"), F.col("_after")
    tombstone, with_schema = F.col("is_tombstone"), F.col("with_schema")
    value_present = F.col("raw_value").isNotNull()
    parsed_ok = ~tombstone & top.isNotNull() & env.isNotNull()
    return reasons(
        check(F.col("_key_bad"), "key is not valid JSON"),
        check(tombstone & F.col("_raw_key").isNull(), "null value without a key"),
        check(F.col("_not_json"), "value is not valid JSON"),
        check(value_present & ~F.col("_not_json") & top.isNull(), "value is not a JSON object"),
        check(~tombstone & top.isNotNull() & with_schema & env.isNull(), "payload is not a JSON object"),
        schema_mismatch(top, with_schema, schemas),
        check(parsed_ok & op.isNull(), "missing op"),
        check(parsed_ok & op.isNotNull() & ~op.isin(*OPS), F.concat(F.lit("unknown op '"), op, F.lit("'"))),
        check(parsed_ok & F.col("_src_text").isNull(), "missing source"),
        check(parsed_ok & F.col("_src_text").isNotNull() & src.isNull(), "source is not a JSON object"),
        check(parsed_ok & bad["source_lsn"], "source.lsn is not an integer"),
        check(parsed_ok & bad["source_txid"], "source.txId is not an integer"),
        check(parsed_ok & bad["source_xmin"], "source.xmin is not an integer"),
        check(parsed_ok & (bad["source_ts_ms"] | bad["source_ts_us"]), "source timestamp is not an integer"),
        check(parsed_ok & (bad["ts_ms"] | bad["ts_us"]), "ts_ms/ts_us is not an integer"),
        check(
            parsed_ok & (bad["transaction_total_order"] | bad["transaction_data_collection_order"]),
            "transaction order is not an integer",
        ),
        check(
            parsed_ok & op.isin("c", "u", "r") & after.isNull(),
            F.concat(F.lit("missing after for op '"), op, F.lit("'")),
        ),
        check(parsed_ok & after.isNotNull() & ~is_object_text(after), "after is not a JSON object"),
        check(parsed_ok & before.isNotNull() & ~is_object_text(before), "before is not a JSON object"),
    )
