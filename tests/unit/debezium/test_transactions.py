"""The Debezium transaction-metadata topic."""

from __future__ import annotations

import json

from pyspark.sql import Row

from cdc_reconcile.debezium.transactions import parse_transactions

from .helpers import RAW_SCHEMA, assert_exactly_equal, utf8, with_schema

TX_TOPIC = "pg.transaction"


def tx_records(spark, rows):
    return spark.createDataFrame([(TX_TOPIC, 0, off, utf8(k), utf8(v)) for off, k, v in rows], RAW_SCHEMA)


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
