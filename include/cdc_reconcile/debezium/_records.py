"""Kafka records written by the JSON converter: the staging, checks and split that both Debezium topics share.

A table topic (:mod:`.envelope`) and the transaction topic (:mod:`.transactions`) arrive in the same
converter form, with or without ``{"schema", "payload"}``; each record is parsed once, tagged with a
``_reason`` (empty when valid), and the tagged frame is split into parsed rows and quarantine rows.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ._json import as_text, compact_json, int_text, json_map


def _not_one_document(text: Column, top: Column) -> Column:
    """True when ``text`` is not exactly one JSON document (trailing garbage included).

    ``top`` is ``text`` parsed as an object. An object only needs its syntax checked to the end,
    which an empty struct does by tokenising without copying anything; re-serialising it (the
    general check) would copy every message once more, about a third of the envelope parse. Texts
    that are not objects are rare and take the general check.
    """
    wrapped = F.concat(F.lit('{"j":'), text, F.lit("}"))
    return F.when(top.isNotNull(), F.from_json(wrapped, "j struct<>").getField("j").isNull()).otherwise(
        compact_json(text).isNull()
    )


def int_field(m: Column, name: str) -> tuple[Column, Column]:
    """A long field of a JSON map and a flag that is true when present but not an integer."""
    raw = m.getItem(name)
    value = int_text(raw)
    return value, raw.isNotNull() & value.isNull()


def reasons(*checks: Column) -> Column:
    """Join the messages of the checks that fired; empty string when none did."""
    return F.concat_ws("; ", F.filter(F.array(*checks), lambda x: x.isNotNull()))


def check(condition: Column, message: str | Column) -> Column:
    msg = F.lit(message) if isinstance(message, str) else message
    return F.when(F.coalesce(condition, F.lit(False)), msg)


def _has_schema_envelope(top: Column) -> Column:
    """Whether a converter document is `{"schema": ..., "payload": ...}` (schemas.enable=true)."""
    detected = (
        F.map_contains_key(top, "schema")
        & F.map_contains_key(top, "payload")
        & ~F.map_contains_key(top, "op")
        & ~F.map_contains_key(top, "status")
    )
    return F.coalesce(detected, F.lit(False))


def schema_mismatch(top: Column, with_schema: Column, schemas: bool | None) -> Column:
    """A reason when the caller insisted on one converter form and the record has the other."""
    if schemas is None:
        return F.lit(None).cast(T.StringType())
    if schemas:
        return check(top.isNotNull() & ~with_schema, "expected a schema/payload envelope")
    return check(with_schema, "unexpected schema/payload envelope")


def with_raw_columns(df: DataFrame) -> DataFrame:
    """Stage 1: Kafka coordinates, key and value as text, both parsed once."""
    key_text = as_text(F.col("key"))
    value = as_text(F.col("value"))
    return df.select(
        F.col("topic").cast(T.StringType()).alias("topic"),
        F.col("partition").cast(T.IntegerType()).alias("partition"),
        F.col("offset").cast(T.LongType()).alias("offset"),
        key_text.alias("_raw_key"),
        value.alias("raw_value"),
        json_map(key_text).alias("_key_top"),
        compact_json(key_text).alias("_key_compact"),
        json_map(value).alias("_top"),
    )


def with_envelope(df: DataFrame) -> DataFrame:
    """Stage 2: is the value one JSON document; unwrap `{"schema", "payload"}` where present; canonical key."""
    top = F.col("_top")
    key_top = F.col("_key_top")
    key_with_schema = F.coalesce(
        (F.size(key_top) == 2) & F.map_contains_key(key_top, "schema") & F.map_contains_key(key_top, "payload"),
        F.lit(False),
    )
    return df.withColumns(
        {
            "_not_json": F.col("raw_value").isNotNull() & _not_one_document(F.col("raw_value"), top),
            "key": F.when(key_with_schema, key_top.getItem("payload")).otherwise(F.col("_key_compact")),
            "_key_bad": F.col("_raw_key").isNotNull()
            & F.col("_key_compact").isNull()
            & (F.trim(F.col("_raw_key")) != F.lit("null")),
            "with_schema": _has_schema_envelope(top),
        }
    ).withColumn("_env", F.when(F.col("with_schema"), json_map(top.getItem("payload"))).otherwise(top))


def split_tagged(tagged: DataFrame, columns: tuple[str, ...]) -> tuple[DataFrame, DataFrame]:
    """The rows whose ``_reason`` is empty, as `columns`; the others as quarantine rows."""
    good = F.col("_reason") == F.lit("")
    parsed = tagged.filter(good).select(*columns)
    quarantined = tagged.filter(~good).select(
        "topic",
        "partition",
        "offset",
        F.col("_raw_key").alias("key"),
        "raw_value",
        F.col("_reason").alias("reason"),
    )
    return parsed, quarantined
