"""Envelope parsing and value decoding of Debezium PostgreSQL records (JSON converter)."""

from __future__ import annotations

import base64
import datetime as dt
import json
from decimal import Context, Decimal, localcontext

import pytest
from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.testing import assertDataFrameEqual

from cdc_reconcile.debezium import (
    DECODE_ERRORS_FIELD,
    PARSED_COLUMNS,
    QUARANTINE_COLUMNS,
    UNAVAILABLE_FIELD,
    UNAVAILABLE_VALUE,
    DecodeOptions,
    PgType,
    decode_events,
    decode_image,
    fill_unavailable,
    is_unavailable,
    parse_envelopes,
    parse_transactions,
    spark_type,
    table_schema,
    twos_complement_to_unscaled,
)

TOPIC = "pg.public.accounts"


def assert_exactly_equal(actual, expected, **kwargs) -> None:
    """assertDataFrameEqual without tolerance: the default one would let a wrong 38-digit decimal pass."""
    assertDataFrameEqual(actual, expected, rtol=0, atol=0, **kwargs)


RAW_SCHEMA = "topic string, partition int, offset long, key binary, value binary"


def _b(text: str | None) -> bytearray | None:
    return None if text is None else bytearray(text.encode("utf-8"))


def unscaled_b64(value: int) -> str:
    """What Kafka Connect's Decimal writes: BigInteger.toByteArray() (minimal two's complement), base64."""
    length = ((~value if value < 0 else value).bit_length() // 8) + 1
    return base64.b64encode(value.to_bytes(length, "big", signed=True)).decode("ascii")


def decimal_b64(value: str, scale: int) -> str:
    with localcontext(Context(prec=100)):
        unscaled = Decimal(value).scaleb(scale)
    assert unscaled == unscaled.to_integral_value(), f"{value} has more than {scale} decimals"
    return unscaled_b64(int(unscaled))


def source(lsn: int = 1000, txid: int = 500, snapshot: str = "false", table: str = "accounts", **extra) -> dict:
    src = {
        "version": "3.6.0.Final",
        "connector": "postgresql",
        "name": "pg",
        "ts_ms": 1709288130000,
        "snapshot": snapshot,
        "db": "app",
        "sequence": json.dumps([str(lsn - 8), str(lsn)]),
        "ts_us": 1709288130000000,
        "ts_ns": 1709288130000000000,
        "schema": "public",
        "table": table,
        "txId": txid,
        "lsn": lsn,
        "xmin": None,
    }
    src.update(extra)
    return src


def envelope(op: str, before: dict | None, after: dict | None, **src) -> dict:
    return {
        "before": before,
        "after": after,
        "source": source(**src),
        "transaction": None,
        "op": op,
        "ts_ms": 1709288130500,
        "ts_us": 1709288130500000,
        "ts_ns": 1709288130500000000,
    }


ROW_SCHEMA = {
    "type": "struct",
    "optional": True,
    "name": "pg.public.accounts.Value",
    "fields": [
        {"type": "int64", "optional": False, "field": "id"},
        {"type": "string", "optional": True, "field": "note"},
    ],
}


def with_schema(payload: dict | None, schema: dict | None = None) -> dict:
    return {"schema": schema or {"type": "struct", "fields": [], "optional": False}, "payload": payload}


def key_doc(id_: int, schemas: bool = False) -> str:
    payload = {"id": id_}
    if schemas:
        return json.dumps(
            {
                "schema": {
                    "type": "struct",
                    "fields": [{"type": "int64", "optional": False, "field": "id"}],
                    "optional": False,
                    "name": "pg.public.accounts.Key",
                },
                "payload": payload,
            }
        )
    return json.dumps(payload)


def records(spark, rows: list[tuple]):
    """rows: (offset, key text, value text) on partition 0 of TOPIC."""
    return spark.createDataFrame([(TOPIC, 0, off, _b(k), _b(v)) for off, k, v in rows], RAW_SCHEMA)


def op_events(schemas: bool) -> list[tuple]:
    wrap = (lambda e: with_schema(e, ROW_SCHEMA)) if schemas else (lambda e: e)
    return [
        (
            10,
            key_doc(1, schemas),
            json.dumps(wrap(envelope("r", None, {"id": 1, "note": "a"}, lsn=900, txid=490, snapshot="last"))),
        ),
        (
            11,
            key_doc(2, schemas),
            json.dumps(wrap(envelope("c", None, {"id": 2, "note": "b"}, lsn=1000, txid=500))),
        ),
        (
            12,
            key_doc(2, schemas),
            json.dumps(wrap(envelope("u", {"id": 2, "note": "b"}, {"id": 2, "note": "c"}, lsn=1100, txid=501))),
        ),
        (
            13,
            key_doc(1, schemas),
            json.dumps(wrap(envelope("d", {"id": 1, "note": "a"}, None, lsn=1200, txid=502))),
        ),
        (14, key_doc(1, schemas), None),
    ]


EXPECTED_OPS = [
    Row(
        offset=10,
        key='{"id":1}',
        op="r",
        is_tombstone=False,
        before=None,
        after='{"id":1,"note":"a"}',
        source_lsn=900,
        source_txid=490,
        source_snapshot="last",
    ),
    Row(
        offset=11,
        key='{"id":2}',
        op="c",
        is_tombstone=False,
        before=None,
        after='{"id":2,"note":"b"}',
        source_lsn=1000,
        source_txid=500,
        source_snapshot="false",
    ),
    Row(
        offset=12,
        key='{"id":2}',
        op="u",
        is_tombstone=False,
        before='{"id":2,"note":"b"}',
        after='{"id":2,"note":"c"}',
        source_lsn=1100,
        source_txid=501,
        source_snapshot="false",
    ),
    Row(
        offset=13,
        key='{"id":1}',
        op="d",
        is_tombstone=False,
        before='{"id":1,"note":"a"}',
        after=None,
        source_lsn=1200,
        source_txid=502,
        source_snapshot="false",
    ),
    Row(
        offset=14,
        key='{"id":1}',
        op=None,
        is_tombstone=True,
        before=None,
        after=None,
        source_lsn=None,
        source_txid=None,
        source_snapshot=None,
    ),
]
OPS_SCHEMA = (
    "offset long, key string, op string, is_tombstone boolean, before string, after string, "
    "source_lsn long, source_txid long, source_snapshot string"
)


@pytest.mark.parametrize("schemas", [False, True], ids=["schemaless", "with-schemas"])
def test_every_op_and_tombstone(spark, schemas):
    parsed, quarantined = parse_envelopes(records(spark, op_events(schemas)))
    assert quarantined.count() == 0
    actual = parsed.select(*[f.split()[0] for f in OPS_SCHEMA.split(", ")])
    assert_exactly_equal(actual, spark.createDataFrame(EXPECTED_OPS, OPS_SCHEMA))
    assert list(parsed.columns) == list(PARSED_COLUMNS)
    flags = {r.offset: r.with_schema for r in parsed.select("offset", "with_schema").collect()}
    assert flags == {10: schemas, 11: schemas, 12: schemas, 13: schemas, 14: None}


def test_schemas_on_and_off_give_the_same_events(spark):
    plain, _ = parse_envelopes(records(spark, op_events(False)), schemas=False)
    wrapped, _ = parse_envelopes(records(spark, op_events(True)), schemas=True)
    cols = [c for c in PARSED_COLUMNS if c not in ("raw_value", "with_schema")]
    assert_exactly_equal(wrapped.select(*cols), plain.select(*cols))


def test_source_and_envelope_fields(spark):
    env = envelope("u", {"id": 7, "note": None}, {"id": 7, "note": "x"}, lsn=24023128, txid=555, xmin=77)
    env["transaction"] = {"id": "555:24023128", "total_order": 2, "data_collection_order": 1}
    parsed, quarantined = parse_envelopes(records(spark, [(5, key_doc(7), json.dumps(env))]))
    assert quarantined.count() == 0
    cols = [
        "source_lsn",
        "source_txid",
        "source_xmin",
        "source_ts_ms",
        "source_ts_us",
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
        "before",
    ]
    expected = Row(
        source_lsn=24023128,
        source_txid=555,
        source_xmin=77,
        source_ts_ms=1709288130000,
        source_ts_us=1709288130000000,
        source_sequence='["24023120", "24023128"]',
        source_db="app",
        source_schema="public",
        source_table="accounts",
        source_name="pg",
        source_connector="postgresql",
        source_version="3.6.0.Final",
        ts_ms=1709288130500,
        ts_us=1709288130500000,
        transaction_id="555:24023128",
        transaction_total_order=2,
        transaction_data_collection_order=1,
        before='{"id":7,"note":null}',
    )
    assert_exactly_equal(parsed.select(*cols), [expected])
    raw = parsed.select("raw_value").first().raw_value
    assert json.loads(raw) == env


def test_truncate_event(spark):
    env = envelope("t", None, None, lsn=3000, txid=600)
    parsed, quarantined = parse_envelopes(records(spark, [(1, None, json.dumps(env))]))
    assert quarantined.count() == 0
    assert_exactly_equal(
        parsed.select("key", "op", "before", "after", "source_table", "source_txid"),
        [Row(key=None, op="t", before=None, after=None, source_table="accounts", source_txid=600)],
    )


def test_tombstone_forms(spark):
    rows = [
        (1, key_doc(3), None),
        (2, key_doc(3, schemas=True), json.dumps({"schema": None, "payload": None})),
    ]
    parsed, quarantined = parse_envelopes(records(spark, rows))
    assert quarantined.count() == 0
    assert_exactly_equal(
        parsed.select("offset", "key", "op", "is_tombstone"),
        [
            Row(offset=1, key='{"id":3}', op=None, is_tombstone=True),
            Row(offset=2, key='{"id":3}', op=None, is_tombstone=True),
        ],
    )


def test_malformed_records_are_quarantined_with_reasons(spark):
    good = json.dumps(envelope("c", None, {"id": 1, "note": "ok"}))
    no_op = envelope("c", None, {"id": 1})
    del no_op["op"]
    bad_lsn = envelope("c", None, {"id": 1})
    bad_lsn["source"]["lsn"] = "not-a-number"
    bad_after = envelope("u", None, None)
    bad_after["after"] = "oops"
    rows = [
        (1, key_doc(1), good),
        (2, key_doc(1), "this is not json {"),
        (3, key_doc(1), json.dumps(no_op)),
        (4, key_doc(1), json.dumps({**envelope("c", None, {"id": 1}), "op": "x"})),
        (
            5,
            key_doc(1),
            json.dumps({k: v for k, v in envelope("c", None, {"id": 1}).items() if k != "source"}),
        ),
        (6, key_doc(1), json.dumps({**envelope("c", None, {"id": 1}), "source": "pg"})),
        (7, key_doc(1), json.dumps(bad_lsn)),
        (8, key_doc(1), json.dumps(envelope("c", None, None))),
        (9, key_doc(1), json.dumps(bad_after)),
        (10, key_doc(1), "[1, 2, 3]"),
        (11, None, None),
        (12, "{not json", good),
        (13, key_doc(1), good + " trailing"),
        (14, key_doc(1), json.dumps({"before": None, "after": None, "source": None, "ts_ms": 1})),
    ]
    df = records(spark, rows)
    parsed, quarantined = parse_envelopes(df)
    expected = [
        (2, "value is not valid JSON"),
        (3, "missing op"),
        (4, "unknown op 'x'"),
        (5, "missing source"),
        (6, "source is not a JSON object"),
        (7, "source.lsn is not an integer"),
        (8, "missing after for op 'c'"),
        (9, "after is not a JSON object"),
        (10, "value is not a JSON object"),
        (11, "null value without a key"),
        (12, "key is not valid JSON"),
        (13, "value is not valid JSON"),
        (14, "missing op; missing source"),
    ]
    assert_exactly_equal(
        quarantined.select("offset", "reason"), spark.createDataFrame(expected, "offset long, reason string")
    )
    assert list(quarantined.columns) == list(QUARANTINE_COLUMNS)
    assert parsed.count() == 1
    assert parsed.count() + quarantined.count() == df.count()
    counts = {r.reason: r["count"] for r in quarantined.groupBy("reason").count().collect()}
    assert counts["value is not valid JSON"] == 2
    raw = {r.offset: r.raw_value for r in quarantined.select("offset", "raw_value").collect()}
    assert raw[2] == "this is not json {"


def test_forced_converter_form_mismatch_is_quarantined(spark):
    plain = json.dumps(envelope("c", None, {"id": 1}))
    wrapped = json.dumps(with_schema(envelope("c", None, {"id": 1})))
    _, q1 = parse_envelopes(records(spark, [(1, key_doc(1), plain)]), schemas=True)
    _, q2 = parse_envelopes(records(spark, [(1, key_doc(1), wrapped)]), schemas=False)
    assert [r.reason for r in q1.collect()] == ["expected a schema/payload envelope"]
    assert [r.reason for r in q2.collect()] == ["unexpected schema/payload envelope"]


def test_string_columns_as_input(spark):
    df = spark.createDataFrame(
        [(TOPIC, 0, 1, key_doc(9), json.dumps(envelope("c", None, {"id": 9})))],
        "topic string, partition int, offset long, key string, value string",
    )
    parsed, _ = parse_envelopes(df)
    assert_exactly_equal(parsed.select("key", "op", "after"), [Row(key='{"id":9}', op="c", after='{"id":9}')])


# ------------------------------------------------------------------------------------------------
# Transaction metadata

TX_TOPIC = "pg.transaction"


def tx_records(spark, rows):
    return spark.createDataFrame([(TX_TOPIC, 0, off, _b(k), _b(v)) for off, k, v in rows], RAW_SCHEMA)


def test_transaction_metadata_begin_end(spark):
    begin = {
        "status": "BEGIN",
        "id": "571:53879920",
        "ts_ms": 1709288130000,
        "event_count": None,
        "data_collections": None,
    }
    end = {
        "status": "END",
        "id": "571:53879920",
        "ts_ms": 1709288130001,
        "event_count": 3,
        "data_collections": [
            {"data_collection": "public.accounts", "event_count": 2},
            {"data_collection": "public.orders", "event_count": 1},
        ],
    }
    rows = [
        (0, json.dumps({"id": "571:53879920"}), json.dumps(begin)),
        (1, json.dumps({"id": "571:53879920"}), json.dumps(with_schema(end))),
        (
            2,
            None,
            json.dumps({"status": "END", "id": "572:1", "event_count": "many", "data_collections": []}),
        ),
        (3, None, json.dumps({"status": "ROLLBACK", "id": "573:1"})),
    ]
    parsed, quarantined = parse_transactions(tx_records(spark, rows))
    schema = (
        "offset long, key string, status string, transaction_id string, txid long, lsn long, "
        "event_count long, data_collections array<struct<data_collection:string,event_count:bigint>>, "
        "ts_ms long"
    )
    expected = [
        (0, '{"id":"571:53879920"}', "BEGIN", "571:53879920", 571, 53879920, None, None, 1709288130000),
        (
            1,
            '{"id":"571:53879920"}',
            "END",
            "571:53879920",
            571,
            53879920,
            3,
            [("public.accounts", 2), ("public.orders", 1)],
            1709288130001,
        ),
    ]
    cols = [
        "offset",
        "key",
        "status",
        "transaction_id",
        "txid",
        "lsn",
        "event_count",
        "data_collections",
        "ts_ms",
    ]
    assert_exactly_equal(parsed.select(*cols), spark.createDataFrame(expected, schema))
    assert_exactly_equal(
        quarantined.select("offset", "reason"),
        [
            Row(offset=2, reason="event_count is not an integer; END without event_count/data_collections"),
            Row(offset=3, reason="unknown status 'ROLLBACK'"),
        ],
    )


# ------------------------------------------------------------------------------------------------
# Type spec


def test_pg_type_parsing():
    assert PgType.parse("numeric(12, 2)") == PgType("numeric", (12, 2))
    assert PgType.parse("timestamp(3) with time zone") == PgType("timestamptz", (3,))
    assert PgType.parse("TIMESTAMP WITHOUT TIME ZONE") == PgType("timestamp")
    assert PgType.parse("character varying(20)") == PgType("character varying", (20,))
    assert PgType.parse("integer[]") == PgType("integer", (), True)
    assert PgType.parse("_int4") == PgType("integer", (), True)
    assert PgType.parse("double precision") == PgType("double precision")
    with pytest.raises(ValueError):
        PgType.parse("numeric(12,2")


def test_spark_types():
    assert spark_type("numeric(12,2)") == T.DecimalType(12, 2)
    assert spark_type("numeric") == T.DecimalType(38, 18)
    assert spark_type("numeric(50,4)") == T.DecimalType(38, 4)
    assert spark_type("money") == T.DecimalType(19, 2)
    assert spark_type("timestamptz") == T.TimestampType()
    assert spark_type("timestamp(3)") == T.TimestampNTZType()
    assert spark_type("jsonb") == T.StringType()
    assert spark_type("bytea") == T.BinaryType()
    assert spark_type("text[]") == T.ArrayType(T.StringType())
    assert spark_type("uuid") == T.StringType()
    with pytest.raises(ValueError):
        DecodeOptions(decimal_handling_mode="exact")


# ------------------------------------------------------------------------------------------------
# Decimal decoding

MAX38 = "9" * 38


def test_known_connect_decimal_vectors(spark):
    df = spark.createDataFrame([("ZA==",), ("/w==",), ("AA==",), ("gA==",), ("AP8=",), ("",), ("%%",)], "b string")
    got = [r.u for r in df.select(twos_complement_to_unscaled(F.col("b")).alias("u")).collect()]
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
    assert df.select(twos_complement_to_unscaled(F.col("b")).alias("u")).first().u == Decimal(value)


def test_twos_complement_out_of_range_is_null(spark):
    too_big = [10**38, -(10**38), 2**127 - 1, -(2**127), 2**130]
    df = spark.createDataFrame([(unscaled_b64(v),) for v in too_big], "b string")
    assert [r.u for r in df.select(twos_complement_to_unscaled(F.col("b")).alias("u")).collect()] == [None] * 5


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


def test_decode_events_quarantines_undecodable_rows(spark):
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
    parsed, _ = parse_envelopes(records(spark, rows))
    ok, bad = decode_events(parsed, spec)
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


def test_integer_source_field_overflow_is_quarantined(spark):
    env = envelope("c", None, {"id": 1})
    env["source"]["lsn"] = 2**70
    parsed, quarantined = parse_envelopes(records(spark, [(1, key_doc(1), json.dumps(env))]))
    assert parsed.count() == 0
    assert [r.reason for r in quarantined.collect()] == ["source.lsn is not an integer"]


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
