"""Decoding of Debezium row images to typed Spark columns."""

from __future__ import annotations

import base64
import datetime as dt
import json
from decimal import Decimal

import pytest
from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.sql import types as T

from cdc_reconcile.debezium.decoding import (
    DECODE_ERRORS_FIELD,
    UNAVAILABLE_FIELD,
    decimal_of_twos_complement,
    decode_image,
    fill_unavailable,
    is_unavailable,
    split_decoded,
    tag_decode_errors,
)
from cdc_reconcile.debezium.envelope import split_envelopes, tag_envelopes
from cdc_reconcile.debezium.pgtypes import UNAVAILABLE_VALUE, DecodeOptions, spark_type, table_schema

from .helpers import assert_exactly_equal, decimal_b64, envelope, key_doc, records, unscaled_b64

# ------------------------------------------------------------------------------------------------
# Decimal decoding

MAX38 = "9" * 38


def unscaled(b64):
    """The integer a Kafka Connect Decimal holds: read at scale 0 into decimal(38,0)."""
    return decimal_of_twos_complement(b64, F.lit(0), T.DecimalType(38, 0))


def test_known_connect_decimal_vectors(spark):
    df = spark.createDataFrame([("ZA==",), ("/w==",), ("AA==",), ("gA==",), ("AP8=",), ("",), ("%%",)], "b string")
    got = [r.u for r in df.select(unscaled(F.col("b")).alias("u")).collect()]
    assert got == [Decimal(100), Decimal(-1), Decimal(0), Decimal(-128), Decimal(255), None, None]


@pytest.mark.parametrize(
    "value",
    [
        0,
        1,
        -1,
        127,
        128,
        -128,
        -129,
        255,
        256,
        2**63 - 1,
        2**63,
        -(2**63),
        -(2**63) - 1,
        2**64,
        -(2**64),
        2**64 + 1,
        10**37,
        -(10**37),
        int(MAX38),
        -int(MAX38),
        12345678901234567890123456789,
        -98765432109876543210,
    ],
)
def test_twos_complement_exact(spark, value):
    df = spark.createDataFrame([(unscaled_b64(value),)], "b string")
    assert df.select(unscaled(F.col("b")).alias("u")).first().u == Decimal(value)


def test_twos_complement_out_of_range_is_null(spark):
    too_big = [10**38, -(10**38), 2**127 - 1, -(2**127), 2**130]
    df = spark.createDataFrame([(unscaled_b64(v),) for v in too_big], "b string")
    assert [r.u for r in df.select(unscaled(F.col("b")).alias("u")).collect()] == [None] * 5


def with_meta(schema: T.StructType) -> T.StructType:
    strings = T.ArrayType(T.StringType())
    return T.StructType(
        [
            *schema.fields,
            T.StructField(UNAVAILABLE_FIELD, strings),
            T.StructField(DECODE_ERRORS_FIELD, strings),
        ]
    )


def decode_one(spark, spec: dict, after: dict, options: DecodeOptions | None = None):
    df = spark.createDataFrame([(json.dumps(after),)], "after string")
    return df.select(decode_image("after", spec, options or DecodeOptions()).alias("row")).select("row.*")


def test_precise_decimals(spark):
    spec = {
        "pos": "numeric(12,2)",
        "neg": "numeric(12,2)",
        "max38": "numeric(38,0)",
        "min38": "numeric(38,0)",
        "scale0": "numeric(10)",
        "high": "numeric(38,30)",
        "high_neg": "numeric(38,30)",
        "frac_only": "numeric(5,5)",
        "cash": "money",
    }
    after = {
        "pos": decimal_b64("1234567890.12", 2),
        "neg": decimal_b64("-0.05", 2),
        "max38": unscaled_b64(int(MAX38)),
        "min38": unscaled_b64(-int(MAX38)),
        "scale0": decimal_b64("-42", 0),
        "high": decimal_b64("12345678.123456789012345678901234567890", 30),
        "high_neg": decimal_b64("-0.000000000000000000000000000001", 30),
        "frac_only": decimal_b64("0.00001", 5),
        "cash": decimal_b64("-1234.56", 2),
    }
    actual = decode_one(spark, spec, after)
    expected = spark.createDataFrame(
        [
            (
                Decimal("1234567890.12"),
                Decimal("-0.05"),
                Decimal(MAX38),
                Decimal("-" + MAX38),
                Decimal(-42),
                Decimal("12345678.123456789012345678901234567890"),
                Decimal("-0.000000000000000000000000000001"),
                Decimal("0.00001"),
                Decimal("-1234.56"),
                [],
                [],
            )
        ],
        with_meta(table_schema(spec)),
    )
    assert_exactly_equal(actual, expected)


def test_variable_scale_numeric_struct(spark):
    spec = {"a": "numeric", "b": "numeric", "c": "numeric", "d": "numeric"}
    after = {
        "a": {"scale": 3, "value": unscaled_b64(-12345)},
        "b": {"scale": 0, "value": unscaled_b64(10**19)},
        "c": {"scale": 18, "value": unscaled_b64(1)},
        "d": {"scale": 20, "value": unscaled_b64(123)},
    }
    row = decode_one(spark, spec, after).first()
    assert row.a == Decimal("-12.345")
    assert row.b == Decimal(10**19)
    assert row.c == Decimal("0.000000000000000001")
    assert row.d is None
    assert row[DECODE_ERRORS_FIELD] == ["d"]


def test_string_and_double_decimal_modes(spark):
    spec = {"a": "numeric(12,2)", "b": "numeric(12,2)", "c": "numeric", "d": "numeric(12,2)"}
    row = decode_one(
        spark,
        spec,
        {"a": "1234.50", "b": "-0.01", "c": "3.14159", "d": "1.005"},
        DecodeOptions(decimal_handling_mode="string"),
    ).first()
    assert (row.a, row.b, row.c, row.d) == (Decimal("1234.50"), Decimal("-0.01"), Decimal("3.14159"), None)
    assert row[DECODE_ERRORS_FIELD] == ["d"]
    row = decode_one(spark, {"a": "numeric(12,2)"}, {"a": 1234.5}, DecodeOptions(decimal_handling_mode="double"))
    assert row.first().a == Decimal("1234.50")


# ------------------------------------------------------------------------------------------------
# Other encodings

FULL_SPEC = {
    "id": "bigint",
    "qty": "integer",
    "small": "smallint",
    "flag": "boolean",
    "ratio": "double precision",
    "balance": "numeric(12,2)",
    "created": "timestamptz",
    "updated": "timestamp",
    "updated_ms": "timestamp(3)",
    "day": "date",
    "at": "time",
    "at_ms": "time(3)",
    "attrs": "jsonb",
    "blob": "bytea",
    "note": "text",
    "tags": "text[]",
    "nums": "int[]",
    "uid": "uuid",
}


def test_each_encoding(spark):
    after = {
        "id": 9007199254740993,
        "qty": -7,
        "small": 12,
        "flag": True,
        "ratio": 0.25,
        "balance": decimal_b64("-99.99", 2),
        "created": "2024-03-01T10:15:30.123456Z",
        "updated": 1709288130123456,
        "updated_ms": 1709288130123,
        "day": 19783,
        "at": 37230123456,
        "at_ms": 37230123,
        "attrs": '{"a": [1, 2], "b": "é"}',
        "blob": base64.b64encode(b"\x00\xffabc").decode(),
        "note": 'Grüße, 日本, 🚀 "quoted"\n',
        "tags": ["x", None, "ü"],
        "nums": [1, -2],
        "uid": "b7e2b0a2-0c7e-4c55-9a57-2f4d3c9e9d11",
    }
    actual = decode_one(spark, FULL_SPEC, after).withColumn("created", F.unix_micros("created"))
    schema = table_schema(FULL_SPEC)
    schema["created"].dataType = T.LongType()
    expected = spark.createDataFrame(
        [
            (
                9007199254740993,
                -7,
                12,
                True,
                0.25,
                Decimal("-99.99"),
                1709288130123456,
                dt.datetime(2024, 3, 1, 10, 15, 30, 123456),
                dt.datetime(2024, 3, 1, 10, 15, 30, 123000),
                dt.date(2024, 3, 1),
                37230123456,
                37230123000,
                '{"a": [1, 2], "b": "é"}',
                bytearray(b"\x00\xffabc"),
                'Grüße, 日本, 🚀 "quoted"\n',
                ["x", None, "ü"],
                [1, -2],
                "b7e2b0a2-0c7e-4c55-9a57-2f4d3c9e9d11",
                [],
                [],
            )
        ],
        with_meta(schema),
    )
    assert_exactly_equal(actual, expected)


def test_timestamptz_offsets_and_connect_mode(spark):
    spec = {"a": "timestamptz", "b": "timestamptz", "c": "timestamp", "d": "date", "e": "time"}
    row = (
        decode_one(
            spark,
            spec,
            {
                "a": "2024-03-01T10:15:30Z",
                "b": "2024-03-01T12:15:30.5+02:00",
                "c": 1709288130123,
                "d": -1,
                "e": 1500,
            },
            DecodeOptions(time_precision_mode="connect"),
        )
        .select(F.unix_micros("a").alias("a"), F.unix_micros("b").alias("b"), "c", "d", "e")
        .first()
    )
    assert row.a == 1709288130000000
    assert row.b == 1709288130500000
    assert row.c == dt.datetime(2024, 3, 1, 10, 15, 30, 123000)
    assert row.d == dt.date(1969, 12, 31)
    assert row.e == 1_500_000


def test_nulls_and_missing_columns(spark):
    after = {name: None for name in FULL_SPEC if name != "note"}
    row = decode_one(spark, FULL_SPEC, after).first()
    assert all(row[name] is None for name in FULL_SPEC)
    assert row[UNAVAILABLE_FIELD] == []
    assert row[DECODE_ERRORS_FIELD] == []


def test_null_image_gives_null_row(spark):
    df = spark.createDataFrame([(None,)], "after string")
    assert df.select(decode_image("after", FULL_SPEC).alias("r")).first().r is None


def test_unavailable_toast_values_are_flagged_not_stored(spark):
    spec = {
        "id": "bigint",
        "note": "text",
        "blob": "bytea",
        "attrs": "jsonb",
        "tags": "text[]",
        "qty": "integer",
    }
    after = {
        "id": 1,
        "note": UNAVAILABLE_VALUE,
        "blob": base64.b64encode(UNAVAILABLE_VALUE.encode()).decode(),
        "attrs": UNAVAILABLE_VALUE,
        "tags": [UNAVAILABLE_VALUE],
        "qty": 5,
    }
    decoded = decode_one(spark, spec, after)
    assert_exactly_equal(
        decoded,
        spark.createDataFrame(
            [(1, None, None, None, None, 5, ["note", "blob", "attrs", "tags"], [])],
            with_meta(table_schema(spec)),
        ),
    )


def test_fill_unavailable_from_previous_state(spark):
    spec = {"id": "bigint", "note": "text", "qty": "integer"}
    df = spark.createDataFrame(
        [
            (
                json.dumps({"id": 1, "note": UNAVAILABLE_VALUE, "qty": 6}),
                json.dumps({"id": 1, "note": "big", "qty": 5}),
            ),
            (json.dumps({"id": 2, "note": UNAVAILABLE_VALUE, "qty": 1}), None),
        ],
        "cur string, prev string",
    )
    rows = (
        df.select(decode_image("cur", spec).alias("cur"), decode_image("prev", spec).alias("prev"))
        .select(
            is_unavailable("cur", "note").alias("flag"),
            fill_unavailable("cur", "prev", spec).alias("filled"),
        )
        .select("flag", "filled.*")
    )
    assert_exactly_equal(
        rows,
        [
            Row(flag=True, id=1, note="big", qty=6, __unavailable=[], __decode_errors=[]),
            Row(flag=True, id=2, note=None, qty=1, __unavailable=["note"], __decode_errors=[]),
        ],
    )


def test_undecodable_events_are_quarantined(spark):
    spec = {"id": "bigint", "balance": "numeric(12,2)", "day": "date"}
    rows = [
        (
            1,
            key_doc(1),
            json.dumps(envelope("c", None, {"id": 1, "balance": decimal_b64("10.00", 2), "day": 1})),
        ),
        (2, key_doc(2), json.dumps(envelope("c", None, {"id": 2, "balance": "%%%not-base64", "day": 1}))),
        (
            3,
            key_doc(3),
            json.dumps(
                envelope(
                    "u",
                    {"id": 3, "balance": None, "day": "x"},
                    {"id": 3, "balance": unscaled_b64(10**12), "day": 2},
                )
            ),
        ),
        (4, key_doc(1), None),
    ]
    parsed, _ = split_envelopes(tag_envelopes(records(spark, rows)))
    ok, bad = split_decoded(tag_decode_errors(parsed, spec))
    assert_exactly_equal(
        bad.select("offset", "reason"),
        [
            Row(offset=2, reason="cannot decode after.balance"),
            Row(offset=3, reason="cannot decode before.day, after.balance"),
        ],
    )
    assert_exactly_equal(
        ok.select("offset", "after_row.id", "after_row.balance", "after_row.day", "before_row"),
        [
            Row(offset=1, id=1, balance=Decimal("10.00"), day=dt.date(1970, 1, 2), before_row=None),
            Row(offset=4, id=None, balance=None, day=None, before_row=None),
        ],
    )


def test_out_of_range_values_are_decode_errors_not_failures(spark):
    spec = {"ts": "timestamp(3)", "at": "time(3)", "qty": "integer", "flag": "boolean", "day": "date"}
    after = {"ts": 9223372036854775807, "at": 9223372036854775807, "qty": 2**40, "flag": "maybe", "day": "x"}
    row = decode_one(spark, spec, after).first()
    assert [row[c] for c in spec] == [None] * 5
    assert row[DECODE_ERRORS_FIELD] == list(spec)


def test_hex_binary_mode_and_float_precision(spark):
    assert spark_type("float(10)") == T.FloatType()
    assert spark_type("float(40)") == T.DoubleType()
    row = decode_one(
        spark,
        {"blob": "bytea", "gone": "bytea"},
        {"blob": "00ff61", "gone": UNAVAILABLE_VALUE.encode().hex()},
        DecodeOptions(binary_handling_mode="hex"),
    ).first()
    assert row.blob == bytearray(b"\x00\xffa")
    assert row.gone is None
    assert row[UNAVAILABLE_FIELD] == ["gone"]


def test_wide_decimal_table_plans_and_decodes(spark):
    spec = {f"n{i}": f"numeric(38,{i})" for i in range(24)}
    after = {f"n{i}": unscaled_b64(-(10**37) - i) for i in range(24)}
    row = decode_one(spark, spec, after).first()
    assert [str(row[f"n{i}"]) for i in range(24)] == [str(Decimal(f"{-(10**37) - i}E-{i}")) for i in range(24)]
    assert row[DECODE_ERRORS_FIELD] == []


def test_a_point_reads_the_same_from_debezium_and_from_the_snapshot(spark):
    """Debezium's struct (x, y, wkb, srid) and PostgreSQL's json_build_object text meet in one form."""
    from cdc_reconcile.snapshot import transform

    spec = {"id": "integer", "at": "point"}
    wkb = base64.b64encode(b"\x01\x01\x00\x00\x00" + b"\x00" * 16).decode()
    decoded = decode_one(spark, spec, {"id": 1, "at": {"x": 1.5, "y": 2.0, "wkb": wkb, "srid": None}})
    snapshot_rows = spark.createDataFrame([(1, '{"x" : 1.5, "y" : 2}')], "id int, at string")
    assert decoded.select("at").first()[0] == '{"x":1.5,"y":2.0}'
    assert transform(snapshot_rows, spec).select("at").first()[0] == '{"x":1.5,"y":2.0}'


def bits_b64(text: str) -> str:
    """Debezium's Bits: the string's value as a little-endian byte array without high zero bytes."""
    value = int(text, 2)
    return base64.b64encode(value.to_bytes((value.bit_length() + 7) // 8, "little")).decode()


def test_bit_strings_read_as_postgresql_prints_them(spark):
    """bit(1) comes as a boolean, longer ones as Bits bytes; bit(n) gets its leading zeros back from n."""
    spec = {"flag": "bit(1)", "nibble": "bit(4)", "wide": "bit(12)", "zero": "bit(3)", "free": "bit varying(16)"}
    assert bits_b64("000100000011") == base64.b64encode(bytes([0x03, 0x01])).decode()
    after = {
        "flag": True,
        "nibble": bits_b64("0001"),
        "wide": bits_b64("000100000011"),
        "zero": bits_b64("000"),
        "free": bits_b64("1011"),
    }
    row = decode_one(spark, spec, after).first().asDict()
    assert {name: row[name] for name in spec} == {
        "flag": "1",
        "nibble": "0001",
        "wide": "000100000011",
        "zero": "000",
        "free": "1011",
    }
    assert row[DECODE_ERRORS_FIELD] == []
    too_wide = decode_one(spark, {"nibble": "bit(4)"}, {"nibble": bits_b64("10000")}).first()
    assert too_wide.nibble is None
    assert too_wide[DECODE_ERRORS_FIELD] == ["nibble"]  # more bits than the column holds: quarantined


def test_an_hstore_reads_the_same_from_debezium_and_from_the_snapshot(spark):
    """Debezium's JSON object in its map's order and PostgreSQL's hstore_to_json meet in one form."""
    from cdc_reconcile.snapshot import transform

    spec = {"id": "integer", "tags": "extensions.hstore"}
    decoded = decode_one(spark, spec, {"id": 1, "tags": json.dumps({"b": "2", "a": None})})
    snapshot_rows = spark.createDataFrame([(1, '{"a": null, "b": "2"}')], "id int, tags string")
    assert decoded.select("tags").first()[0] == '{"a":null,"b":"2"}'
    assert transform(snapshot_rows, spec).select("tags").first()[0] == '{"a":null,"b":"2"}'


def test_a_tstzrange_reads_in_utc_whatever_zone_printed_it(spark):
    """Debezium prints a bound in the Connect worker's zone, the snapshot in the executor's: both become UTC."""
    from cdc_reconcile.snapshot import transform

    spec = {"id": "integer", "span": "tstzrange"}
    printed = {
        1: (
            '["2024-01-01 01:00:00+01","2024-02-01 06:30:00.25+05:30")',
            '["2024-01-01 00:00:00+00","2024-02-01 01:00:00.25+00")',
        ),
        2: ('("2023-12-31 16:00:00-08",]', '("2024-01-01 00:00:00+00",]'),
        3: ("[-infinity,infinity)", "[-infinity,infinity)"),
        4: ("empty", "empty"),
        5: ('[,"2024-01-01 00:00:00.000001+00")', '[,"2024-01-01 00:00:00.000001+00")'),
    }
    for key, (text, utc) in printed.items():
        decoded = decode_one(spark, spec, {"id": key, "span": text})
        assert decoded.select("span").first()[0] == utc, key
    snapshot_rows = spark.createDataFrame([(k, t) for k, (t, _) in printed.items()], "id int, span string")
    assert {r.id: r.span for r in transform(snapshot_rows, spec).collect()} == {k: u for k, (_, u) in printed.items()}


def test_an_interval_in_string_mode_reads_the_same_from_debezium_and_from_the_snapshot(spark):
    """Debezium writes every field and seconds from a double; the snapshot writes PostgreSQL's microseconds."""
    from cdc_reconcile.snapshot import transform

    options = DecodeOptions(interval_handling_mode="string")
    spec = {"id": "integer", "took": "interval"}
    printed = {  # Debezium's text, the snapshot's (source_snapshot.interval_iso), the one form both become
        1: ("P-1Y-2M3DT-4H-5M-6.123457S", "P-1Y-2M3DT-4H-5M-6.123457S", "P-1Y-2M3DT-4H-5M-6.123457S"),
        2: ("P0Y0M3DT4H5M0.29S", "P0Y0M3DT4H5M0.29S", "P0Y0M3DT4H5M0.29S"),
        3: ("P0Y0M0DT0H0M6.1234570000000005S", "P0Y0M0DT0H0M6.123457S", "P0Y0M0DT0H0M6.123457S"),
        4: ("P0Y0M0DT0H0M0S", "P0Y0M0DT0H0M0S", "P0Y0M0DT0H0M0S"),
        5: ("P0Y0M0DT100H0M59.999999S", "P0Y0M0DT100H0M59.999999S", "P0Y0M0DT100H0M59.999999S"),
        6: ("P0Y0M0DT0H0M-0.000001S", "P0Y0M0DT0H0M-0.000001S", "P0Y0M0DT0H0M-0.000001S"),
    }
    for key, (event, _, canonical) in printed.items():
        assert decode_one(spark, spec, {"id": key, "took": event}, options).first()["took"] == canonical, key
    rows = spark.createDataFrame([(k, projected) for k, (_, projected, _) in printed.items()], "id int, took string")
    snapshot_forms = {r.id: r.took for r in transform(rows, spec, options).collect()}
    assert snapshot_forms == {k: canonical for k, (_, _, canonical) in printed.items()}
    # numeric mode is unchanged: microseconds
    assert decode_one(spark, spec, {"id": 1, "took": 1_000_000}).first()["took"] == 1_000_000


def test_arrays_of_types_with_one_form_meet_element_by_element(spark):
    """hstore and tstzrange elements take the scalar's form on both sides; nulls and order are kept."""
    from cdc_reconcile.snapshot import transform

    spec = {"id": "integer", "tags": "hstore[]", "spans": "tstzrange[]"}
    event = {
        "id": 1,
        "tags": [json.dumps({"b": "2", "a": "1"}), None],
        "spans": ['["2024-01-01 01:00:00+01","2024-02-01 00:00:00+00")'],
    }
    expected = Row(
        id=1, tags=['{"a":"1","b":"2"}', None], spans=['["2024-01-01 00:00:00+00","2024-02-01 00:00:00+00")']
    )
    assert decode_one(spark, spec, event).select(*spec).first() == expected
    projected = spark.createDataFrame(
        [(1, ['{"a": "1", "b": "2"}', None], ['["2024-01-01 00:00:00+00","2024-02-01 00:00:00+00")'])],
        "id int, tags array<string>, spans array<string>",
    )
    assert transform(projected, spec).first() == expected


# Every column type the decoders know, as scalars and arrays, with the options that change the decoder.
_EVERY_TYPE = [
    *(
        f"{t}{array}"
        for t in (
            "smallint",
            "integer",
            "bigint",
            "numeric(12,2)",
            "numeric",
            "money",
            "real",
            "double precision",
            "boolean",
            "text",
            "uuid",
            "json",
            "bytea",
            "date",
            "time",
            "timetz",
            "timestamp(3)",
            "timestamp",
            "timestamptz",
            "interval",
            "bit(1)",
            "bit(8)",
            "bit varying",
            "point",
            "hstore",
            "tstzrange",
        )
        for array in ("", "[]")
    )
]
# A Spark Connect client copies each column of a projection into the plan as one protobuf message, and
# protobuf's C implementation (upb, pyspark's default) refuses to copy one nested deeper than 100 levels.
_UPB_MAX_DEPTH = 100


def _message_depth(message) -> int:
    from google.protobuf.message import Message

    deepest = 0
    for field, value in message.ListFields():
        if field.type != field.TYPE_MESSAGE or field.message_type.GetOptions().map_entry:
            continue
        for item in value if not isinstance(value, Message) else [value]:
            deepest = max(deepest, _message_depth(item))
    return deepest + 1


@pytest.mark.parametrize("options", [DecodeOptions(), DecodeOptions(decimal_handling_mode="string")])
def test_every_types_decoder_is_shallow_enough_for_a_spark_connect_client(monkeypatch, options):
    """Built as a Spark Connect plan (no server is needed to build one), the decoded image of every type,
    with a renamed-column fill and the events' own decimal scales, stays within the C implementation's
    limit; under that implementation the column is also copied into a projection for real."""
    from google.protobuf.internal import api_implementation
    from pyspark.sql.connect.proto import relations_pb2

    monkeypatch.setenv("SPARK_CONNECT_MODE_ENABLED", "1")  # pyspark.sql.functions builds Connect columns
    depths = {}
    for pg_type in _EVERY_TYPE:
        image = decode_image(
            F.col("after"),
            {"id": "bigint", "c": pg_type},
            options,
            fills={"c": ("c_before_rename", F.lit(None))},
            scales=F.col("decimal_scales"),
        )
        plan = image.alias("after_row")._expr.to_plan(None)
        depths[pg_type] = _message_depth(plan)
        if api_implementation.Type() == "upb":
            relations_pb2.Project().expressions.append(plan)
    too_deep = {t: d for t, d in depths.items() if d > _UPB_MAX_DEPTH}
    assert not too_deep, too_deep
    assert max(depths.values()) > 50, depths  # the measure sees the nesting at all
