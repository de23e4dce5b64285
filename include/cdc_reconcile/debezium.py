"""Debezium PostgreSQL change events: envelope parsing and decoding of row images to source types.

Records arrive from Kafka as the JSON converter wrote them, with or without schemas. Parsing keeps
the row images as compact JSON text so that the bronze `events` dataset does not depend on a table's
column types; decoding to typed Spark columns is a second step driven by a table spec
(column name -> PostgreSQL type), because the JSON alone is ambiguous (a base64 decimal and a string
decimal can look the same) and schema-less records carry no scale.

Nothing is dropped: every input record ends up either in the parsed output or in a quarantine output
with a `reason`.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

UNAVAILABLE_VALUE = "__debezium_unavailable_value"
OPS = ("c", "u", "d", "r", "t")
TRANSACTION_STATUSES = ("BEGIN", "END")

UNAVAILABLE_FIELD = "__unavailable"
DECODE_ERRORS_FIELD = "__decode_errors"

_STR_MAP = T.MapType(T.StringType(), T.StringType())
_INT_RE = r"^-?[0-9]+$"

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

TableSpec = Mapping[str, str]


# --------------------------------------------------------------------------------------------------
# JSON helpers


def _as_text(c: Column) -> Column:
    return c.cast(T.StringType())


def _compact_json(text: Column) -> Column:
    """Any JSON document re-serialised compactly by Jackson; null when the text is not one JSON document.

    Wrapping the text as a field value makes Spark copy the parsed structure into a string, which
    normalises whitespace and rejects trailing garbage that a top-level parse would ignore.
    """
    return F.from_json(F.concat(F.lit('{"j":'), text, F.lit("}")), "j string").getField("j")


def _not_one_document(text: Column, top: Column) -> Column:
    """True when ``text`` is not exactly one JSON document (trailing garbage included).

    ``top`` is ``text`` parsed as an object. An object only needs its syntax checked to the end,
    which an empty struct does by tokenising without copying anything; re-serialising it (the
    general check) would copy every message once more, about a third of the envelope parse. Texts
    that are not objects are rare and take the general check.
    """
    wrapped = F.concat(F.lit('{"j":'), text, F.lit("}"))
    return F.when(top.isNotNull(), F.from_json(wrapped, "j struct<>").getField("j").isNull()).otherwise(
        _compact_json(text).isNull()
    )


def _json_map(text: Column) -> Column:
    """A JSON object as map<string,string>: strings unquoted, everything else as compact JSON text."""
    return F.from_json(text, _STR_MAP)


def _is_object_text(text: Column) -> Column:
    return text.startswith("{")


def _let(value: Column, body: Callable[[Column], Column]) -> Column:
    """Evaluate `value` once and hand it to `body` as a lambda variable.

    Decoders use a value many times; without the binding each use copies the whole expression tree
    (JSON parse included), which grows multiplicatively and exhausts the driver while planning.
    """
    return F.element_at(F.transform(F.array(value), body), 1)


def _int_text(text: Column) -> Column:
    return F.when(text.rlike(_INT_RE), text.try_cast(T.LongType()))


def _int_field(m: Column, name: str) -> tuple[Column, Column]:
    """A long field of a JSON map and a flag that is true when present but not an integer."""
    raw = m.getItem(name)
    value = _int_text(raw)
    return value, raw.isNotNull() & value.isNull()


def _reasons(*checks: Column) -> Column:
    """Join the messages of the checks that fired; empty string when none did."""
    return F.concat_ws("; ", F.filter(F.array(*checks), lambda x: x.isNotNull()))


def _check(condition: Column, message: str | Column) -> Column:
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


def _schema_mismatch(top: Column, with_schema: Column, schemas: bool | None) -> Column:
    """A reason when the caller insisted on one converter form and the record has the other."""
    if schemas is None:
        return F.lit(None).cast(T.StringType())
    if schemas:
        return _check(top.isNotNull() & ~with_schema, "expected a schema/payload envelope")
    return _check(with_schema, "unexpected schema/payload envelope")


# --------------------------------------------------------------------------------------------------
# Envelope parsing


def _with_raw_columns(df: DataFrame) -> DataFrame:
    """Stage 1: Kafka coordinates, key and value as text, both parsed once."""
    key_text = _as_text(F.col("key"))
    value = _as_text(F.col("value"))
    return df.select(
        F.col("topic").cast(T.StringType()).alias("topic"),
        F.col("partition").cast(T.IntegerType()).alias("partition"),
        F.col("offset").cast(T.LongType()).alias("offset"),
        key_text.alias("_raw_key"),
        value.alias("raw_value"),
        _json_map(key_text).alias("_key_top"),
        _compact_json(key_text).alias("_key_compact"),
        _json_map(value).alias("_top"),
    )


def _with_envelope(df: DataFrame) -> DataFrame:
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
    ).withColumn("_env", F.when(F.col("with_schema"), _json_map(top.getItem("payload"))).otherwise(top))


def parse_envelopes(df: DataFrame, *, schemas: bool | None = None) -> tuple[DataFrame, DataFrame]:
    """Split raw Kafka records of a table topic into parsed change events and quarantined records.

    Both outputs filter one tagged plan (:func:`tag_envelopes`); a caller that consumes both should
    persist the tagged frame and split it with :func:`split_envelopes`, or the optimizer pushes the
    filter below the parse and parses every JSON document once per check.
    """
    return split_envelopes(tag_envelopes(df, schemas=schemas))


def split_envelopes(tagged: DataFrame) -> tuple[DataFrame, DataFrame]:
    """Parsed events and quarantine rows of a frame made by :func:`tag_envelopes`."""
    return _split(tagged, PARSED_COLUMNS)


def tag_envelopes(df: DataFrame, *, schemas: bool | None = None) -> DataFrame:
    """Every record parsed, with ``_reason`` (empty when the record is a valid change event).

    `df` needs `topic`, `partition`, `offset`, `key` and `value` (binary or string), as the Kafka
    source gives them. `schemas=None` detects per record whether the JSON converter wrote
    `{"schema": ..., "payload": ...}`; pass True/False to insist on one form. Tombstones (null value,
    or a null payload) are parsed rows with `is_tombstone=true` and a null `op`.
    """
    staged = _with_envelope(_with_raw_columns(df))
    env = F.col("_env")
    staged = staged.withColumns(
        {
            "is_tombstone": F.col("raw_value").isNull()
            | (F.col("with_schema") & F.col("_top").getItem("payload").isNull()),
            "_src_text": env.getItem("source"),
            "_src": _json_map(env.getItem("source")),
            "_trx": _json_map(env.getItem("transaction")),
            "_op": env.getItem("op"),
            "_before": env.getItem("before"),
            "_after": env.getItem("after"),
        }
    )

    top, src, trx = F.col("_top"), F.col("_src"), F.col("_trx")
    op, before, after = F.col("_op"), F.col("_before"), F.col("_after")
    tombstone, with_schema = F.col("is_tombstone"), F.col("with_schema")
    lsn, lsn_bad = _int_field(src, "lsn")
    txid, txid_bad = _int_field(src, "txId")
    xmin, xmin_bad = _int_field(src, "xmin")
    src_ts_ms, src_ts_ms_bad = _int_field(src, "ts_ms")
    src_ts_us, src_ts_us_bad = _int_field(src, "ts_us")
    ts_ms, ts_ms_bad = _int_field(env, "ts_ms")
    ts_us, ts_us_bad = _int_field(env, "ts_us")
    total_order, total_order_bad = _int_field(trx, "total_order")
    dc_order, dc_order_bad = _int_field(trx, "data_collection_order")

    value_present = F.col("raw_value").isNotNull()
    parsed_ok = ~tombstone & top.isNotNull() & env.isNotNull()
    reason = _reasons(
        _check(F.col("_key_bad"), "key is not valid JSON"),
        _check(tombstone & F.col("_raw_key").isNull(), "null value without a key"),
        _check(F.col("_not_json"), "value is not valid JSON"),
        _check(value_present & ~F.col("_not_json") & top.isNull(), "value is not a JSON object"),
        _check(~tombstone & top.isNotNull() & with_schema & env.isNull(), "payload is not a JSON object"),
        _schema_mismatch(top, with_schema, schemas),
        _check(parsed_ok & op.isNull(), "missing op"),
        _check(parsed_ok & op.isNotNull() & ~op.isin(*OPS), F.concat(F.lit("unknown op '"), op, F.lit("'"))),
        _check(parsed_ok & F.col("_src_text").isNull(), "missing source"),
        _check(parsed_ok & F.col("_src_text").isNotNull() & src.isNull(), "source is not a JSON object"),
        _check(parsed_ok & lsn_bad, "source.lsn is not an integer"),
        _check(parsed_ok & txid_bad, "source.txId is not an integer"),
        _check(parsed_ok & xmin_bad, "source.xmin is not an integer"),
        _check(parsed_ok & (src_ts_ms_bad | src_ts_us_bad), "source timestamp is not an integer"),
        _check(parsed_ok & (ts_ms_bad | ts_us_bad), "ts_ms/ts_us is not an integer"),
        _check(parsed_ok & (total_order_bad | dc_order_bad), "transaction order is not an integer"),
        _check(
            parsed_ok & op.isin("c", "u", "r") & after.isNull(),
            F.concat(F.lit("missing after for op '"), op, F.lit("'")),
        ),
        _check(parsed_ok & after.isNotNull() & ~_is_object_text(after), "after is not a JSON object"),
        _check(parsed_ok & before.isNotNull() & ~_is_object_text(before), "before is not a JSON object"),
    )

    tagged = staged.select(
        "topic",
        "partition",
        "offset",
        "key",
        "_raw_key",
        F.when(~tombstone, op).alias("op"),
        "is_tombstone",
        F.when(~tombstone, before).alias("before"),
        F.when(~tombstone, after).alias("after"),
        lsn.alias("source_lsn"),
        txid.alias("source_txid"),
        xmin.alias("source_xmin"),
        src_ts_ms.alias("source_ts_ms"),
        src_ts_us.alias("source_ts_us"),
        src.getItem("snapshot").alias("source_snapshot"),
        src.getItem("sequence").alias("source_sequence"),
        src.getItem("db").alias("source_db"),
        src.getItem("schema").alias("source_schema"),
        src.getItem("table").alias("source_table"),
        src.getItem("name").alias("source_name"),
        src.getItem("connector").alias("source_connector"),
        src.getItem("version").alias("source_version"),
        ts_ms.alias("ts_ms"),
        ts_us.alias("ts_us"),
        trx.getItem("id").alias("transaction_id"),
        total_order.alias("transaction_total_order"),
        dc_order.alias("transaction_data_collection_order"),
        F.when(value_present, with_schema).alias("with_schema"),
        "raw_value",
        reason.alias("_reason"),
    )
    return tagged


def _split(tagged: DataFrame, columns: tuple[str, ...]) -> tuple[DataFrame, DataFrame]:
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
    staged = _with_envelope(_with_raw_columns(df))
    env = F.col("_env")
    staged = staged.withColumns(
        {
            "_dc_text": env.getItem("data_collections"),
            "_dc_raw": F.from_json(env.getItem("data_collections"), T.ArrayType(_STR_MAP)),
            "_id_parts": F.split(env.getItem("id"), ":"),
        }
    )
    top, dc_text, dc_raw = F.col("_top"), F.col("_dc_text"), F.col("_dc_raw")
    status = env.getItem("status")
    txn_id = env.getItem("id")
    event_count, event_count_bad = _int_field(env, "event_count")
    ts_ms, ts_ms_bad = _int_field(env, "ts_ms")
    dc = F.transform(
        dc_raw,
        lambda e: F.struct(
            e.getItem("data_collection").alias("data_collection"),
            F.when(e.getItem("event_count").rlike(_INT_RE), e.getItem("event_count").try_cast(T.LongType())).alias(
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
                & F.coalesce(e.getItem("event_count").rlike(_INT_RE), F.lit(False))
            ),
        )
    )
    id_parts = F.col("_id_parts")
    value_present = F.col("raw_value").isNotNull()
    ok = top.isNotNull() & env.isNotNull()
    reason = _reasons(
        _check(F.col("_key_bad"), "key is not valid JSON"),
        _schema_mismatch(top, F.col("with_schema"), schemas),
        _check(~value_present, "null value"),
        _check(F.col("_not_json"), "value is not valid JSON"),
        _check(value_present & ~F.col("_not_json") & ~ok, "value is not a JSON object"),
        _check(ok & status.isNull(), "missing status"),
        _check(
            ok & status.isNotNull() & ~status.isin(*TRANSACTION_STATUSES),
            F.concat(F.lit("unknown status '"), status, F.lit("'")),
        ),
        _check(ok & txn_id.isNull(), "missing id"),
        _check(ok & event_count_bad, "event_count is not an integer"),
        _check(ok & ts_ms_bad, "ts_ms is not an integer"),
        _check(ok & dc_bad, "data_collections is not a list of {data_collection, event_count}"),
        _check(
            ok & (status == F.lit("END")) & (event_count.isNull() | dc_text.isNull()),
            "END without event_count/data_collections",
        ),
    )
    tagged = staged.select(
        "topic",
        "partition",
        "offset",
        "key",
        "_raw_key",
        status.alias("status"),
        txn_id.alias("transaction_id"),
        _int_text(F.try_element_at(id_parts, F.lit(1))).alias("txid"),
        _int_text(F.try_element_at(id_parts, F.lit(2))).alias("lsn"),
        event_count.alias("event_count"),
        F.when(~dc_bad, dc).alias("data_collections"),
        ts_ms.alias("ts_ms"),
        "raw_value",
        reason.alias("_reason"),
    )
    return _split(tagged, TRANSACTION_COLUMNS)


# --------------------------------------------------------------------------------------------------
# Type spec


@dataclass(frozen=True)
class DecodeOptions:
    """The connector settings that decide how values were encoded (names as in the connector config)."""

    decimal_handling_mode: str = "precise"
    binary_handling_mode: str = "bytes"
    time_precision_mode: str = "adaptive"
    interval_handling_mode: str = "numeric"
    unavailable_value_placeholder: str = UNAVAILABLE_VALUE
    money_fraction_digits: int = 2
    unconstrained_numeric: T.DecimalType = field(default_factory=lambda: T.DecimalType(38, 18))

    def __post_init__(self) -> None:
        allowed = {
            "decimal_handling_mode": ("precise", "string", "double"),
            "binary_handling_mode": ("bytes", "base64", "base64-url-safe", "hex"),
            "time_precision_mode": ("adaptive", "adaptive_time_microseconds", "connect"),
            "interval_handling_mode": ("numeric", "string"),
        }
        for name, values in allowed.items():
            if getattr(self, name) not in values:
                raise ValueError(f"{name}={getattr(self, name)!r}: expected one of {values}")


DEFAULT_OPTIONS = DecodeOptions()

_ALIASES = {
    "int2": "smallint",
    "smallserial": "smallint",
    "serial2": "smallint",
    "int": "integer",
    "int4": "integer",
    "serial": "integer",
    "serial4": "integer",
    "int8": "bigint",
    "bigserial": "bigint",
    "serial8": "bigint",
    "oid": "bigint",
    "float4": "real",
    "float8": "double precision",
    "float": "double precision",
    "decimal": "numeric",
    "bool": "boolean",
    "jsonb": "json",
    "timestamp without time zone": "timestamp",
    "timestamp with time zone": "timestamptz",
    "time without time zone": "time",
    "time with time zone": "timetz",
}
_TYPE_RE = re.compile(
    r"^(?P<name>[a-z_][a-z0-9_ ]*?)\s*(?:\((?P<args>[^)]*)\))?\s*(?P<zone>with(?:out)? time zone)?"
    r"\s*(?P<array>(?:\[\d*\])+)?$"
)


@dataclass(frozen=True)
class PgType:
    """A parsed PostgreSQL column type: canonical name, modifiers, and whether it is an array."""

    name: str
    args: tuple[int, ...] = ()
    is_array: bool = False

    @classmethod
    def parse(cls, text: str) -> PgType:
        cleaned = " ".join(text.strip().lower().split())
        m = _TYPE_RE.match(cleaned)
        if not m:
            raise ValueError(f"cannot parse PostgreSQL type {text!r}")
        name = m.group("name").strip()
        if m.group("zone"):
            name = f"{name} {m.group('zone')}"
        is_array = bool(m.group("array"))
        if name.startswith("_") and not is_array:
            name, is_array = name[1:], True
        args = tuple(int(a) for a in (m.group("args") or "").replace(" ", "").split(",") if a)
        if name == "float" and args:
            name, args = ("real" if args[0] <= 24 else "double precision"), ()
        return cls(_ALIASES.get(name, name), args, is_array)

    def element(self) -> PgType:
        return PgType(self.name, self.args, False)


def _decimal_type(t: PgType, options: DecodeOptions) -> T.DecimalType:
    if t.name == "money":
        return T.DecimalType(19, options.money_fraction_digits)
    if not t.args:
        return options.unconstrained_numeric
    precision = t.args[0]
    scale = max(t.args[1], 0) if len(t.args) > 1 else 0
    scale = min(scale, 38)
    return T.DecimalType(min(max(precision, scale, 1), 38), scale)


_SCALARS: dict[str, T.DataType] = {
    "smallint": T.ShortType(),
    "integer": T.IntegerType(),
    "bigint": T.LongType(),
    "real": T.FloatType(),
    "double precision": T.DoubleType(),
    "boolean": T.BooleanType(),
    "bytea": T.BinaryType(),
    "date": T.DateType(),
    "time": T.LongType(),
    "timestamp": T.TimestampNTZType(),
    "timestamptz": T.TimestampType(),
}


def spark_type(pg_type: str | PgType, options: DecodeOptions = DEFAULT_OPTIONS) -> T.DataType:
    """The Spark type a PostgreSQL column decodes to; the snapshot side must use the same mapping.

    `timestamp` maps to TIMESTAMP_NTZ (wall clock), `timestamptz` to TIMESTAMP (instant), `time` to
    microseconds since midnight (long), `interval` to microseconds (long) unless
    interval.handling.mode=string. Types without a typed mapping (text, uuid, json, enums, ...) stay
    strings, as Debezium sends them.
    """
    t = PgType.parse(pg_type) if isinstance(pg_type, str) else pg_type
    if t.is_array:
        return T.ArrayType(spark_type(t.element(), options))
    if t.name in ("numeric", "money"):
        return _decimal_type(t, options)
    if t.name == "interval":
        return T.LongType() if options.interval_handling_mode == "numeric" else T.StringType()
    return _SCALARS.get(t.name, T.StringType())


def table_schema(spec: TableSpec, options: DecodeOptions = DEFAULT_OPTIONS) -> T.StructType:
    """The typed row schema of a table spec, in spec order."""
    return T.StructType([T.StructField(name, spark_type(pg, options), True) for name, pg in spec.items()])


# --------------------------------------------------------------------------------------------------
# Value decoding


_TWO_POW_64 = "18446744073709551616"


def twos_complement_to_unscaled(b64: Column) -> Column:
    """Decode a base64 big-endian two's-complement integer (Kafka Connect Decimal) to decimal(38,0).

    Exact for every value of up to 38 digits, negative ones included, using built-ins only: the
    bytes are sign-extended to 128 bits as hex; for negatives the hex digits are complemented
    (|v| = ~v + 1) so both halves are unsigned, each half goes through `conv` (64-bit unsigned),
    and |v| = hi * 2^64 + lo (+1) is summed with try_ arithmetic. Values longer than 16 bytes or
    beyond 38 digits give null instead of an overflow. Negation is a subtraction from zero: Spark's
    unary minus on decimals rounds to 34 digits.
    """

    def from_hex(hexed: Column) -> Column:
        negative = F.substring(hexed, 1, 1).isin(*"89ABCDEF")
        padded = F.when(negative, F.lpad(hexed, 32, "F")).otherwise(F.lpad(hexed, 32, "0"))
        bits = F.when(negative, F.translate(padded, "0123456789ABCDEF", "FEDCBA9876543210")).otherwise(padded)
        return _let(bits, lambda b: magnitude(b, negative))

    def magnitude(bits: Column, negative: Column) -> Column:
        hi = F.conv(F.substring(bits, 1, 16), 16, 10).cast(T.DecimalType(20, 0))
        lo = F.conv(F.substring(bits, 17, 16), 16, 10).cast(T.DecimalType(20, 0))
        carry = F.when(negative, F.lit(1)).otherwise(F.lit(0)).cast(T.DecimalType(1, 0))
        mag = F.try_add(F.try_add(F.try_multiply(hi, F.lit(_TWO_POW_64).cast(T.DecimalType(20, 0))), lo), carry)
        zero = F.lit(0).cast(T.DecimalType(1, 0))
        return _let(mag, lambda m: F.when(negative, F.try_subtract(zero, m)).otherwise(m))

    def from_bytes(raw: Column) -> Column:
        n_bytes = F.length(raw)
        return F.when((n_bytes >= 1) & (n_bytes <= 16), _let(F.hex(raw), from_hex))

    return _let(F.try_to_binary(b64, F.lit("base64")), from_bytes)


def _scaled_string(unscaled: Column, scale: Column) -> Column:
    """Plain decimal text of unscaled * 10^-scale, exact for any scale (string placement of the point).

    Works on the digits as text because decimal abs/negation in Spark round beyond 34 digits.
    """

    def place(text: Column, s: Column) -> Column:
        negative = text.startswith("-")
        digits = F.regexp_replace(text, "^-", "")
        pos_scale = F.greatest(s, F.lit(0))
        digits = F.when(s < 0, F.concat(digits, F.repeat(F.lit("0"), -s))).otherwise(digits)
        width = F.greatest(F.length(digits), pos_scale + 1)
        return _let(F.lpad(digits, width, F.lit("0")), lambda padded: point(padded, pos_scale, negative))

    def point(padded: Column, pos_scale: Column, negative: Column) -> Column:
        n = F.length(padded)
        int_part = padded.substr(F.lit(1), n - pos_scale)
        frac_part = padded.substr(n - pos_scale + 1, pos_scale)
        sign = F.when(negative, F.lit("-")).otherwise(F.lit(""))
        body = F.when(pos_scale > 0, F.concat(int_part, F.lit("."), frac_part)).otherwise(int_part)
        return F.concat(sign, body)

    return _let(
        F.struct(unscaled.cast(T.StringType()).alias("t"), scale.cast(T.IntegerType()).alias("s")),
        lambda v: F.when(
            v.getField("t").isNotNull() & v.getField("s").isNotNull(), place(v.getField("t"), v.getField("s"))
        ),
    )


def _exact_decimal(text: Column, dt: T.DecimalType) -> Column:
    """Cast decimal text to `dt`, or null when that would round away non-zero digits or overflow."""

    def cast(t: Column) -> Column:
        dropped = F.regexp_extract(t, r"\.([0-9]+)$", 1).substr(F.lit(dt.scale + 1), F.lit(1 << 20))
        return F.when(dropped.rlike("^0*$"), t.try_cast(dt))

    return _let(text, cast)


def _decode_decimal(raw: Column, t: PgType, dt: T.DecimalType, options: DecodeOptions) -> Column:
    def variable(raw_struct: Column) -> Column:
        vs = F.from_json(raw_struct, "scale int, value string")
        return _let(
            vs,
            lambda v: _exact_decimal(
                _scaled_string(twos_complement_to_unscaled(v.getField("value")), v.getField("scale")), dt
            ),
        )

    mode = options.decimal_handling_mode
    if mode == "precise":
        if t.name == "money":
            known_scale = options.money_fraction_digits
        else:
            known_scale = max(t.args[1], 0) if len(t.args) > 1 else 0
        fixed = _exact_decimal(_scaled_string(twos_complement_to_unscaled(raw), F.lit(known_scale)), dt)
    elif mode == "string":
        fixed = _exact_decimal(raw, dt)
    else:
        fixed = raw.try_cast(dt)
    return F.when(_is_object_text(raw), variable(raw)).otherwise(fixed)


_MAX_EPOCH_MILLIS = (1 << 63) // 1000 - 1


def _epoch_to_ntz(amount: Column, millis: bool) -> Column:
    """Epoch millis/micros as a wall-clock TIMESTAMP_NTZ, independent of the session time zone."""
    epoch = F.lit("1970-01-01 00:00:00").cast(T.TimestampNTZType())
    if not millis:
        return F.timestamp_add("MICROSECOND", amount, epoch)
    in_range = amount.between(-_MAX_EPOCH_MILLIS, _MAX_EPOCH_MILLIS)
    return F.when(in_range, F.timestamp_add("MILLISECOND", amount, epoch))


def _temporal_precision(t: PgType) -> int:
    return t.args[0] if t.args else 6


def _decode_binary(raw: Column, options: DecodeOptions) -> Column:
    mode = options.binary_handling_mode
    if mode == "hex":
        return F.try_to_binary(raw, F.lit("hex"))
    if mode == "base64-url-safe":
        raw = F.translate(raw, "-_", "+/")
    return F.try_to_binary(raw, F.lit("base64"))


def _decode_scalar(raw: Column, t: PgType, options: DecodeOptions) -> Column:
    """One Debezium-encoded value (as text) to its Spark type; null when absent or undecodable."""
    return _let(raw, lambda r: _decode_bound(r, t, options))


def _decode_bound(raw: Column, t: PgType, options: DecodeOptions) -> Column:
    dt = spark_type(t, options)
    is_int = raw.rlike(_INT_RE)
    if isinstance(dt, T.DecimalType):
        return _decode_decimal(raw, t, dt, options)
    if t.name == "bytea":
        return _decode_binary(raw, options)
    if t.name == "date":
        return F.when(is_int, F.date_from_unix_date(raw.try_cast(T.IntegerType()))).otherwise(raw.try_cast(dt))
    if t.name == "timestamp":
        millis = options.time_precision_mode == "connect" or _temporal_precision(t) <= 3
        return F.when(is_int, _epoch_to_ntz(raw.try_cast(T.LongType()), millis)).otherwise(raw.try_cast(dt))
    if t.name == "time":
        millis = options.time_precision_mode == "connect" or (
            options.time_precision_mode == "adaptive" and _temporal_precision(t) <= 3
        )
        factor = 1000 if millis else 1
        return F.when(is_int, F.try_multiply(raw.try_cast(T.LongType()), F.lit(factor)))
    if isinstance(dt, T.StringType):
        return raw
    if isinstance(dt, (T.ShortType, T.IntegerType, T.LongType)):
        return F.when(is_int, raw.try_cast(dt))
    return raw.try_cast(dt)


def _decode_value(raw: Column, t: PgType, options: DecodeOptions) -> Column:
    if not t.is_array:
        return _decode_scalar(raw, t, options)
    elem = t.element()

    def check(items: Column, decoded: Column) -> Column:
        complete = F.forall(F.zip_with(items, decoded, lambda a, d: a.isNull() | d.isNotNull()), lambda ok: ok)
        return F.when(complete, decoded)

    return _let(
        F.from_json(raw, T.ArrayType(T.StringType())),
        lambda items: _let(F.transform(items, lambda e: _decode_scalar(e, elem, options)), lambda d: check(items, d)),
    )


def _placeholder_texts(t: PgType, options: DecodeOptions) -> list[str]:
    """Every text form the unavailable-value placeholder takes for a column of this type."""
    p = options.unavailable_value_placeholder
    raw = p.encode("utf-8")
    forms = [p]
    if t.name == "bytea":
        forms += [
            base64.b64encode(raw).decode("ascii"),
            base64.urlsafe_b64encode(raw).decode("ascii"),
            raw.hex(),
            raw.hex().upper(),
        ]
    if t.is_array:
        dump = lambda v: json.dumps(v, separators=(",", ":"), ensure_ascii=False)  # noqa: E731
        forms += [
            dump([p]),
            dump(list(raw)),
            dump([base64.b64encode(raw).decode("ascii")]),
        ]
    return forms


def _decode_column(raw: Column, name: str, t: PgType, options: DecodeOptions) -> Column:
    """struct(value, unavailable, error) for one column of an image."""

    def classify(r: Column) -> Column:
        unavailable = F.coalesce(r.isin(*_placeholder_texts(t, options)), F.lit(False))
        decoded = F.when(~unavailable, _decode_value(r, t, options)).cast(spark_type(t, options))
        return _let(
            decoded,
            lambda d: F.struct(
                d.alias("v"),
                F.when(unavailable, F.lit(name)).alias("u"),
                F.when(~unavailable & r.isNotNull() & d.isNull(), F.lit(name)).alias("e"),
            ),
        )

    return _let(raw, classify)


def decode_image(image: Column | str, spec: TableSpec, options: DecodeOptions = DEFAULT_OPTIONS) -> Column:
    """Decode a row image (compact JSON text) into a struct typed by `spec`.

    The struct has one field per spec column, plus `__unavailable` (columns whose value Debezium
    could not provide: unchanged TOAST, kept null here and to be filled from the previous state) and
    `__decode_errors` (columns present in the image that could not be decoded exactly). A null image
    gives a null struct. Columns missing from the image (added later) are null, not errors.
    """
    reserved = {UNAVAILABLE_FIELD, DECODE_ERRORS_FIELD} & set(spec)
    if reserved:
        raise ValueError(f"column names clash with decode metadata: {sorted(reserved)}")
    types = {name: PgType.parse(pg) for name, pg in spec.items()}
    text = F.col(image) if isinstance(image, str) else image
    fields = [f"c{i}" for i in range(len(types))]

    def assemble(cols: Column) -> Column:
        parts = [cols.getField(f) for f in fields]
        return F.struct(
            *[p.getField("v").alias(name) for p, name in zip(parts, types, strict=True)],
            F.filter(F.array(*[p.getField("u") for p in parts]), lambda x: x.isNotNull()).alias(UNAVAILABLE_FIELD),
            F.filter(F.array(*[p.getField("e") for p in parts]), lambda x: x.isNotNull()).alias(DECODE_ERRORS_FIELD),
        )

    def per_column(m: Column) -> Column:
        decoded = F.struct(
            *[
                _decode_column(m.getItem(name), name, t, options).alias(f)
                for f, (name, t) in zip(fields, types.items(), strict=True)
            ]
        )
        return F.when(m.isNotNull(), _let(decoded, assemble))

    return _let(_json_map(text), per_column)


def tag_decode_errors(events: DataFrame, spec: TableSpec, options: DecodeOptions = DEFAULT_OPTIONS) -> DataFrame:
    """Add typed `before_row` / `after_row` and `decode_errors` (empty when the event decoded exactly).

    Decoding is the costly step of compaction: persist this result when both the decoded rows and
    the quarantine are consumed (see :func:`split_decoded`), or the optimizer evaluates it per use.
    """
    decoded = events.withColumn("before_row", decode_image("before", spec, options)).withColumn(
        "after_row", decode_image("after", spec, options)
    )
    errs = F.concat(
        F.transform(
            F.coalesce(F.col(f"before_row.{DECODE_ERRORS_FIELD}"), F.array().cast("array<string>")),
            lambda c: F.concat(F.lit("before."), c),
        ),
        F.transform(
            F.coalesce(F.col(f"after_row.{DECODE_ERRORS_FIELD}"), F.array().cast("array<string>")),
            lambda c: F.concat(F.lit("after."), c),
        ),
    )
    return decoded.withColumn("decode_errors", errs)


def split_decoded(tagged: DataFrame) -> tuple[DataFrame, DataFrame]:
    """Decoded events, and the ones that could not be decoded exactly as quarantine rows."""
    bad = F.size("decode_errors") > 0
    ok = tagged.filter(~bad).drop("decode_errors")
    quarantined = tagged.filter(bad).select(
        "topic",
        "partition",
        "offset",
        "key",
        "raw_value",
        F.concat(F.lit("cannot decode "), F.concat_ws(", ", "decode_errors")).alias("reason"),
    )
    return ok, quarantined


def decode_events(
    events: DataFrame, spec: TableSpec, options: DecodeOptions = DEFAULT_OPTIONS
) -> tuple[DataFrame, DataFrame]:
    """Add typed `before_row` and `after_row` to parsed events; undecodable events go to quarantine.

    A value that would be stored wrong (a decimal that does not fit, a bad base64) makes the whole
    event a quarantined record rather than a silently different row.
    """
    return split_decoded(tag_decode_errors(events, spec, options))


def is_unavailable(row: Column | str, column: str) -> Column:
    """True when `column` of a decoded row was Debezium's unavailable-value placeholder."""
    r = F.col(row) if isinstance(row, str) else row
    return F.coalesce(F.array_contains(r.getField(UNAVAILABLE_FIELD), column), F.lit(False))


def fill_unavailable(current: Column | str, previous: Column | str, spec: TableSpec) -> Column:
    """Fill unavailable (unchanged TOAST) columns of a decoded row from the previous state of the key.

    With no previous row (null struct) the column stays null and stays listed in `__unavailable`.
    """
    cur_col = F.col(current) if isinstance(current, str) else current
    prev_col = F.col(previous) if isinstance(previous, str) else previous

    def fill(pair: Column) -> Column:
        cur, prev = pair.getField("cur"), pair.getField("prev")
        has_prev = prev.isNotNull()
        fields = [
            F.when(is_unavailable(cur, name) & has_prev, prev.getField(name)).otherwise(cur.getField(name)).alias(name)
            for name in spec
        ]
        still = F.filter(cur.getField(UNAVAILABLE_FIELD), lambda c: ~has_prev)
        row = F.struct(
            *fields,
            still.alias(UNAVAILABLE_FIELD),
            cur.getField(DECODE_ERRORS_FIELD).alias(DECODE_ERRORS_FIELD),
        )
        return F.when(cur.isNotNull(), row)

    return _let(F.struct(cur_col.alias("cur"), prev_col.alias("prev")), fill)
