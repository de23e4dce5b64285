"""Debezium records as the JSON converter writes them, and an exact DataFrame comparison, for these tests."""

from __future__ import annotations

import base64
import json
from decimal import Context, Decimal, localcontext

from pyspark.testing import assertDataFrameEqual

TOPIC = "pg.public.accounts"


def assert_exactly_equal(actual, expected, **kwargs) -> None:
    """assertDataFrameEqual without tolerance: the default one would let a wrong 38-digit decimal pass."""
    assertDataFrameEqual(actual, expected, rtol=0, atol=0, **kwargs)


RAW_SCHEMA = "topic string, partition int, offset long, key binary, value binary"


def utf8(text: str | None) -> bytearray | None:
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
    return spark.createDataFrame([(TOPIC, 0, off, utf8(k), utf8(v)) for off, k, v in rows], RAW_SCHEMA)
