"""Row images (compact JSON text) decoded to Spark columns typed by a table spec.

A value that would be stored wrong (a decimal that does not fit, a bad base64) is a decode error that
quarantines the whole event rather than a silently different row. Values Debezium could not provide
(unchanged TOAST) are flagged, kept null, and filled from the previous state of the key.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ._json import INT_RE, is_object_text, json_map, let
from .pgtypes import DEFAULT_OPTIONS, DecodeOptions, PgType, TableSpec, canonical_text, spark_type

UNAVAILABLE_FIELD = "__unavailable"
DECODE_ERRORS_FIELD = "__decode_errors"


_TWO_POW_64 = "18446744073709551616"


def _twos_complement_parts(hexed: Column) -> tuple[Column, Column]:
    """(negative, magnitude) of a big-endian two's-complement integer given as hex digits.

    The bytes are sign-extended to 128 bits; for negatives the hex digits are complemented
    (|v| = ~v + 1) so both halves are unsigned, each half goes through `conv` (64-bit unsigned), and
    |v| = hi * 2^64 + (lo + 1) is summed with try_ arithmetic into decimal(38,0), null beyond 38
    digits. The magnitude is only meaningful for 1 to 16 bytes: see `_fits_128_bits`. ``hexed`` must
    be bound (a column or a lambda variable): it is read several times.
    """
    negative = hexed >= F.lit("8")  # a first hex digit of 8-F (upper case)
    bits = F.when(negative, F.translate(F.lpad(hexed, 32, "F"), "0123456789ABCDEF", "FEDCBA9876543210")).otherwise(
        F.lpad(hexed, 32, "0")
    )
    hi = F.conv(F.substring(bits, 1, 16), 16, 10).cast(T.DecimalType(20, 0))
    lo = F.conv(F.substring(bits, 17, 16), 16, 10).cast(T.DecimalType(20, 0))
    carry = F.when(negative, F.lit(1)).otherwise(F.lit(0)).cast(T.DecimalType(1, 0))
    magnitude = F.try_add(F.try_multiply(hi, F.lit(_TWO_POW_64).cast(T.DecimalType(20, 0))), F.try_add(lo, carry))
    return negative, magnitude


def _fits_128_bits(hexed: Column) -> Column:
    return F.length(hexed).between(2, 32)


def _base64_hex(b64: Column) -> Column:
    return F.hex(F.try_to_binary(b64, F.lit("base64")))


def _placed_decimal(digits: Column, negative: Column, scale: Column, dt: T.DecimalType, valid: Column) -> Column:
    """``digits`` (a magnitude's plain digits) * 10^-``scale`` with its sign, cast to ``dt``; null unless
    ``valid``, and when that would round away non-zero digits or overflow.

    The point is placed in the text, exact for any scale, because decimal arithmetic in Spark rounds
    beyond 34 digits. ``digits`` must be bound; ``negative`` and ``scale`` are read several times.
    """
    whole = (
        F.when(scale <= 0, F.concat(digits, F.repeat(F.lit("0"), -scale)))
        .when(F.length(digits) > scale, F.left(digits, F.length(digits) - scale))
        .otherwise(F.lit("0"))
    )
    fraction = F.when(scale > 0, F.concat(F.lit("."), F.lpad(F.right(digits, scale), scale, F.lit("0"))))
    signed = F.concat(F.when(negative, F.lit("-")).otherwise(F.lit("")), whole, F.coalesce(fraction, F.lit("")))
    kept_exactly = F.right(digits, scale - dt.scale).rlike("^0*$")
    return F.when(valid & kept_exactly, signed.try_cast(dt))


def decimal_of_twos_complement(b64: Column, scale: Column, dt: T.DecimalType) -> Column:
    """A Kafka Connect Decimal (base64 big-endian two's-complement unscaled value) at ``scale``, as ``dt``.

    Exact for every value of up to 38 digits, negative ones included; null for more than 16 bytes,
    beyond 38 digits, a value ``dt`` cannot hold without rounding, or bad base64. Two bindings deep, so
    the expression stays shallow enough for a Spark Connect client's protobuf.
    """

    def placed(hexed: Column) -> Column:
        negative, magnitude = _twos_complement_parts(hexed)
        return let(
            magnitude.cast(T.StringType()),
            lambda digits: _placed_decimal(digits, negative, scale, dt, _fits_128_bits(hexed) & scale.isNotNull()),
        )

    return let(_base64_hex(b64), placed)


def _exact_decimal(text: Column, dt: T.DecimalType) -> Column:
    """Cast decimal text to `dt`, or null when that would round away non-zero digits or overflow."""

    def cast(t: Column) -> Column:
        dropped = F.regexp_extract(t, r"\.([0-9]+)$", 1).substr(F.lit(dt.scale + 1), F.lit(1 << 20))
        return F.when(dropped.rlike("^0*$"), t.try_cast(dt))

    return let(text, cast)


def _decode_decimal(
    raw: Column, t: PgType, dt: T.DecimalType, options: DecodeOptions, event_scale: Column | None = None
) -> Column:
    def variable(raw_struct: Column) -> Column:
        vs = F.from_json(raw_struct, "scale int, value string")
        return let(vs, lambda v: decimal_of_twos_complement(v.getField("value"), v.getField("scale"), dt))

    mode = options.decimal_handling_mode
    if mode == "precise":
        if t.name == "money":
            known_scale = options.money_fraction_digits
        else:
            known_scale = max(t.args[1], 0) if len(t.args) > 1 else 0
        scale = F.lit(known_scale) if event_scale is None else F.coalesce(event_scale, F.lit(known_scale))
        fixed = decimal_of_twos_complement(raw, scale, dt)
    elif mode == "string":
        fixed = _exact_decimal(raw, dt)
    else:
        fixed = raw.try_cast(dt)
    return F.when(is_object_text(raw), variable(raw)).otherwise(fixed)


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


def _decode_bits(raw: Column, t: PgType) -> Column:
    """A bit string as PostgreSQL prints it (``0101``) from Debezium's form of it.

    ``bit(1)`` comes as a boolean. Longer ones come as ``io.debezium.data.Bits``: the string's value
    as a little-endian byte array with its high zero bytes dropped, base64 in JSON. A ``bit(n)`` gets
    its leading zeros back from ``n``; a ``bit varying`` cannot (``0011`` and ``11`` are one event),
    so it keeps none, and the snapshot counts a value with leading zeros as unrepresentable.
    """
    width = (t.args[0] if t.args else 1) if t.name == "bit" else None
    if width == 1:
        return F.when(raw == "true", F.lit("1")).when(raw == "false", F.lit("0"))
    raw_bytes = F.try_to_binary(raw, F.lit("base64"))
    pairs = F.reverse(F.regexp_extract_all(F.hex(raw_bytes), F.lit("(..)"), 1))
    bits = F.array_join(F.transform(pairs, lambda h: F.lpad(F.conv(h, 16, 2), 8, "0")), "")
    significant = F.regexp_replace(bits, "^0+", "")
    if width is None:
        return F.when(raw_bytes.isNotNull(), significant)
    return F.when(raw_bytes.isNotNull() & (F.length(significant) <= width), F.lpad(significant, width, "0"))


def _decode_scalar(raw: Column, t: PgType, options: DecodeOptions, event_scale: Column | None = None) -> Column:
    """One Debezium-encoded value (as text) to its Spark type; null when absent or undecodable.

    ``raw`` must be bound (a lambda variable or a column): it is read several times.
    """
    dt = spark_type(t, options)
    is_int = raw.rlike(INT_RE)
    if isinstance(dt, T.DecimalType):
        return _decode_decimal(raw, t, dt, options, event_scale)
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
    canonical = canonical_text(t, options)
    if canonical is not None:
        return canonical(raw)
    if t.name in ("bit", "bit varying"):
        return _decode_bits(raw, t)
    if isinstance(dt, T.StringType):
        return raw
    if isinstance(dt, (T.ShortType, T.IntegerType, T.LongType)):
        return F.when(is_int, raw.try_cast(dt))
    return raw.try_cast(dt)


def _decode_value(raw: Column, t: PgType, options: DecodeOptions, event_scale: Column | None = None) -> Column:
    if not t.is_array:
        return _decode_scalar(raw, t, options, event_scale)
    elem = t.element()

    def check(items: Column, decoded: Column) -> Column:
        complete = F.forall(F.zip_with(items, decoded, lambda a, d: a.isNull() | d.isNotNull()), lambda ok: ok)
        return F.when(complete, decoded)

    return let(
        F.from_json(raw, T.ArrayType(T.StringType())),
        lambda items: let(F.transform(items, lambda e: _decode_scalar(e, elem, options)), lambda d: check(items, d)),
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


def _decode_column(
    raw: Column, name: str, t: PgType, options: DecodeOptions, event_scale: Column | None = None
) -> Column:
    """struct(value, unavailable, error) for one column of an image."""

    def classify(r: Column) -> Column:
        unavailable = F.coalesce(r.isin(*_placeholder_texts(t, options)), F.lit(False))
        decoded = F.when(~unavailable, _decode_value(r, t, options, event_scale)).cast(spark_type(t, options))
        return let(
            decoded,
            lambda d: F.struct(
                d.alias("v"),
                F.when(unavailable, F.lit(name)).alias("u"),
                F.when(~unavailable & r.isNotNull() & d.isNull(), F.lit(name)).alias("e"),
            ),
        )

    return let(raw, classify)


def _column_of_image(
    m: Column,
    name: str,
    t: PgType,
    options: DecodeOptions,
    fill: tuple[str | None, Column] | None,
    scales: Column | None,
) -> Column:
    """struct(value, unavailable, error) for one column, from an image that may predate the column."""
    event_scale = None if scales is None else scales.getItem(name)
    if fill is None:
        return _decode_column(m.getItem(name), name, t, options, event_scale)
    old_name, missing_value = fill
    present = F.map_contains_key(m, name)
    raw = m.getItem(name)
    if old_name is not None:
        raw = F.when(present, raw).otherwise(m.getItem(old_name))
        present = present | F.map_contains_key(m, old_name)
    absent = F.struct(
        missing_value.cast(spark_type(t, options)).alias("v"),
        F.lit(None).cast("string").alias("u"),
        F.lit(None).cast("string").alias("e"),
    )
    return F.when(present, _decode_column(raw, name, t, options, event_scale)).otherwise(absent)


def decode_image(
    image: Column | str,
    spec: TableSpec,
    options: DecodeOptions = DEFAULT_OPTIONS,
    fills: Mapping[str, tuple[str | None, Column]] | None = None,
    scales: Column | None = None,
) -> Column:
    """Decode a row image (compact JSON text) into a struct typed by `spec`.

    The struct has one field per spec column, plus `__unavailable` (columns whose value Debezium
    could not provide: unchanged TOAST, kept null here and to be filled from the previous state) and
    `__decode_errors` (columns present in the image that could not be decoded exactly). A null image
    gives a null struct. A column missing from the image (the event predates it) is null, or as
    `fills` says: name -> (its earlier name to read instead, else this typed value). `scales` is
    the event's own decimal scales (:func:`with_decimal_scales`), used before the spec's.
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
                _column_of_image(m, name, t, options, (fills or {}).get(name), scales).alias(f)
                for f, (name, t) in zip(fields, types.items(), strict=True)
            ]
        )
        return F.when(m.isNotNull(), let(decoded, assemble))

    return let(json_map(text), per_column)


DECIMAL_SCALES = "decimal_scales"
_VALUE_SCHEMA = "struct<field: string, fields: array<struct<field: string, parameters: map<string, string>>>>"


def has_fixed_scales(spec: TableSpec, options: DecodeOptions = DEFAULT_OPTIONS) -> bool:
    """Whether the spec has a column Debezium sends as an unscaled decimal whose scale only its schema gives."""
    if options.decimal_handling_mode != "precise":
        return False
    types = (PgType.parse(pg) for pg in spec.values())
    return any(t.name == "numeric" and len(t.args) > 1 and not t.is_array for t in types)


def with_decimal_scales(events: DataFrame) -> DataFrame:
    """Add ``decimal_scales`` (column -> scale) from each event's own schema; needs ``raw_value``.

    A precise decimal carries only its unscaled value; the scale is in the message's schema. A column
    retyped to another scale (``numeric(12,2)`` -> ``numeric(14,4)``) has events of both in one range,
    and each must be read at its own. Null without the converter's schemas (the spec's scale applies).
    Parsing the schema costs, so compaction adds this only where :func:`has_fixed_scales`.
    """

    def scales(after_schema: Column) -> Column:
        fields = F.filter(
            after_schema.getField("fields"), lambda f: f.getField("parameters").getItem("scale").isNotNull()
        )
        entries = F.transform(
            fields,
            lambda f: F.struct(f.getField("field"), f.getField("parameters").getItem("scale").try_cast("int")),
        )
        return F.when(after_schema.getField("field") == "after", F.map_from_entries(entries))

    # Debezium's envelope schema lists before, after, source, ...: `after` is its second field
    after = F.from_json(F.get_json_object(F.col("raw_value").cast("string"), "$.schema.fields[1]"), _VALUE_SCHEMA)
    return events.withColumn(DECIMAL_SCALES, let(after, scales))


def tag_decode_errors(
    events: DataFrame,
    spec: TableSpec,
    options: DecodeOptions = DEFAULT_OPTIONS,
    fills: Mapping[str, tuple[str | None, Column]] | None = None,
) -> DataFrame:
    """Add typed `before_row` / `after_row` and `decode_errors` (empty when the event decoded exactly).

    Decoding is the costly step of compaction: persist this result when both the decoded rows and
    the quarantine are consumed (see :func:`split_decoded`), or the optimizer evaluates it per use.
    `fills` is :func:`decode_image`'s; the events' ``decimal_scales`` (when present) are their scales.
    """
    scales = F.col(DECIMAL_SCALES) if DECIMAL_SCALES in events.columns else None
    decoded = events.withColumn("before_row", decode_image("before", spec, options, fills, scales)).withColumn(
        "after_row", decode_image("after", spec, options, fills, scales)
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

    return let(F.struct(cur_col.alias("cur"), prev_col.alias("prev")), fill)
