"""Envelope parsing of Debezium PostgreSQL change-event records (JSON converter)."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import Row

from cdc_reconcile.debezium.envelope import PARSED_COLUMNS, QUARANTINE_COLUMNS, split_envelopes, tag_envelopes

from .helpers import (
    ROW_SCHEMA,
    TOPIC,
    assert_exactly_equal,
    envelope,
    key_doc,
    records,
    with_schema,
)


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
    parsed, quarantined = split_envelopes(tag_envelopes(records(spark, op_events(schemas))))
    assert quarantined.count() == 0
    actual = parsed.select(*[f.split()[0] for f in OPS_SCHEMA.split(", ")])
    assert_exactly_equal(actual, spark.createDataFrame(EXPECTED_OPS, OPS_SCHEMA))
    assert list(parsed.columns) == list(PARSED_COLUMNS)
    flags = {r.offset: r.with_schema for r in parsed.select("offset", "with_schema").collect()}
    assert flags == {10: schemas, 11: schemas, 12: schemas, 13: schemas, 14: None}


def test_schemas_on_and_off_give_the_same_events(spark):
    plain, _ = split_envelopes(tag_envelopes(records(spark, op_events(False)), schemas=False))
    wrapped, _ = split_envelopes(tag_envelopes(records(spark, op_events(True)), schemas=True))
    cols = [c for c in PARSED_COLUMNS if c not in ("raw_value", "with_schema")]
    assert_exactly_equal(wrapped.select(*cols), plain.select(*cols))


def test_source_and_envelope_fields(spark):
    env = envelope("u", {"id": 7, "note": None}, {"id": 7, "note": "x"}, lsn=24023128, txid=555, xmin=77)
    env["transaction"] = {"id": "555:24023128", "total_order": 2, "data_collection_order": 1}
    parsed, quarantined = split_envelopes(tag_envelopes(records(spark, [(5, key_doc(7), json.dumps(env))])))
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
    parsed, quarantined = split_envelopes(tag_envelopes(records(spark, [(1, None, json.dumps(env))])))
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
    parsed, quarantined = split_envelopes(tag_envelopes(records(spark, rows)))
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
    parsed, quarantined = split_envelopes(tag_envelopes(df))
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
    _, q1 = split_envelopes(tag_envelopes(records(spark, [(1, key_doc(1), plain)]), schemas=True))
    _, q2 = split_envelopes(tag_envelopes(records(spark, [(1, key_doc(1), wrapped)]), schemas=False))
    assert [r.reason for r in q1.collect()] == ["expected a schema/payload envelope"]
    assert [r.reason for r in q2.collect()] == ["unexpected schema/payload envelope"]


def test_string_columns_as_input(spark):
    df = spark.createDataFrame(
        [(TOPIC, 0, 1, key_doc(9), json.dumps(envelope("c", None, {"id": 9})))],
        "topic string, partition int, offset long, key string, value string",
    )
    parsed, _ = split_envelopes(tag_envelopes(df))
    assert_exactly_equal(parsed.select("key", "op", "after"), [Row(key='{"id":9}', op="c", after='{"id":9}')])


def test_integer_source_field_overflow_is_quarantined(spark):
    env = envelope("c", None, {"id": 1})
    env["source"]["lsn"] = 2**70
    parsed, quarantined = split_envelopes(tag_envelopes(records(spark, [(1, key_doc(1), json.dumps(env))])))
    assert parsed.count() == 0
    assert [r.reason for r in quarantined.collect()] == ["source.lsn is not an integer"]
