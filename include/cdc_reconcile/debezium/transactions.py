"""The transaction-metadata topic (``<topic.prefix>.transaction``, provide.transaction.metadata=true)."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ._json import INT_RE, STR_MAP, int_text
from ._records import check, int_field, reasons, schema_mismatch, split_tagged, with_envelope, with_raw_columns

TRANSACTION_STATUSES = ("BEGIN", "END")

TRANSACTION_COLUMNS = (
    "topic",
    "partition",
    "offset",
    "key",
    "status",
    "transaction_id",
    "txid",
    "lsn",
    "event_count",
    "data_collections",
    "ts_ms",
    "raw_value",
)


def parse_transactions(df: DataFrame, *, schemas: bool | None = None) -> tuple[DataFrame, DataFrame]:
    """Parse the `<topic.prefix>.transaction` topic (provide.transaction.metadata=true).

    END records carry `event_count` and per-table counts in `data_collections`, which prove a
    transaction complete without asking the database. For PostgreSQL the transaction id is
    `"<txId>:<lsn>"`; its parts are split out as `txid` and `lsn` when they are integers.
    """
    staged = _with_transaction_fields(with_envelope(with_raw_columns(df)))
    env = F.col("_env")
    event_count, event_count_bad = int_field(env, "event_count")
    ts_ms, ts_ms_bad = int_field(env, "ts_ms")
    dc, dc_bad = _data_collections(F.col("_dc_text"), F.col("_dc_raw"))
    id_parts = F.col("_id_parts")
    reason = _transaction_reason(event_count, event_count_bad, ts_ms_bad, dc_bad, schemas)
    tagged = staged.select(
        "topic",
        "partition",
        "offset",
        "key",
        "_raw_key",
        env.getItem("status").alias("status"),
        env.getItem("id").alias("transaction_id"),
        int_text(F.try_element_at(id_parts, F.lit(1))).alias("txid"),
        int_text(F.try_element_at(id_parts, F.lit(2))).alias("lsn"),
        event_count.alias("event_count"),
        F.when(~dc_bad, dc).alias("data_collections"),
        ts_ms.alias("ts_ms"),
        "raw_value",
        reason.alias("_reason"),
    )
    return split_tagged(tagged, TRANSACTION_COLUMNS)


def _with_transaction_fields(staged: DataFrame) -> DataFrame:
    """Stage 3: `data_collections` as text and parsed once, and the id split at ':'."""
    env = F.col("_env")
    return staged.withColumns(
        {
            "_dc_text": env.getItem("data_collections"),
            "_dc_raw": F.from_json(env.getItem("data_collections"), T.ArrayType(STR_MAP)),
            "_id_parts": F.split(env.getItem("id"), ":"),
        }
    )


def _data_collections(dc_text: Column, dc_raw: Column) -> tuple[Column, Column]:
    """The per-table counts as structs, and a flag that is true when present but not well formed."""
    dc = F.transform(
        dc_raw,
        lambda e: F.struct(
            e.getItem("data_collection").alias("data_collection"),
            F.when(e.getItem("event_count").rlike(INT_RE), e.getItem("event_count").try_cast(T.LongType())).alias(
                "event_count"
            ),
        ),
    )
    dc_bad = dc_text.isNotNull() & (
        dc_raw.isNull()
        | ~F.forall(
            dc_raw,
            lambda e: (
                e.isNotNull()
                & e.getItem("data_collection").isNotNull()
                & F.coalesce(e.getItem("event_count").rlike(INT_RE), F.lit(False))
            ),
        )
    )
    return dc, dc_bad


def _transaction_reason(
    event_count: Column, event_count_bad: Column, ts_ms_bad: Column, dc_bad: Column, schemas: bool | None
) -> Column:
    """Why a staged record is not a valid transaction record; empty string when it is."""
    env, top, dc_text = F.col("_env"), F.col("_top"), F.col("_dc_text")
    status = env.getItem("status")
    txn_id = env.getItem("id")
    value_present = F.col("raw_value").isNotNull()
    ok = top.isNotNull() & env.isNotNull()
    return reasons(
        check(F.col("_key_bad"), "key is not valid JSON"),
        schema_mismatch(top, F.col("with_schema"), schemas),
        check(~value_present, "null value"),
        check(F.col("_not_json"), "value is not valid JSON"),
        check(value_present & ~F.col("_not_json") & ~ok, "value is not a JSON object"),
        check(ok & status.isNull(), "missing status"),
        check(
            ok & status.isNotNull() & ~status.isin(*TRANSACTION_STATUSES),
            F.concat(F.lit("unknown status '"), status, F.lit("'")),
        ),
        check(ok & txn_id.isNull(), "missing id"),
        check(ok & event_count_bad, "event_count is not an integer"),
        check(ok & ts_ms_bad, "ts_ms is not an integer"),
        check(ok & dc_bad, "data_collections is not a list of {data_collection, event_count}"),
        check(
            ok & (status == F.lit("END")) & (event_count.isNull() | dc_text.isNull()),
            "END without event_count/data_collections",
        ),
    )
