"""Bad inputs on the real stack: each gives a clear, counted outcome and never stops the rest of the batch.

One table of every column type the decoder handles (``public.edge_cases``), captured by a connector of
its own so the demo tables stay untouched. Into one offset range go: a row of NULLs, unicode, numeric
edge values (38 digits, scale 0, scale 36, negative, NaN), a TOASTed value left unchanged by an
update, a 10 MB value, a column added and then used, and two records written straight to the topic:
malformed JSON, and a well-formed event of a table the topic does not belong to. Every expectation is
checked against PostgreSQL read directly, not through the pipeline.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import Producer
from psycopg.rows import dict_row
from pyspark.sql import functions as F

from cdc_dev.stack import Stack, StackConfig
from cdc_dev.stack.config import MAX_MESSAGE_BYTES
from cdc_reconcile.config import TableConfig
from cdc_reconcile.lake import TableLake
from tests.support.kafka import read_topic
from tests.support.lake import commit_metadata, delta_rows, spark_rows
from tests.support.polling import eventually

from .conftest import own_connector, run_once

pytestmark = pytest.mark.integration

TABLE = "public.edge_cases"
PREFIX = "edge"
TOPIC = f"{PREFIX}.{TABLE}"
SLOT = "cdc_edge"
TEN_MB = 10 * 1024 * 1024

CREATE = """
CREATE TABLE public.edge_cases (
    id bigint PRIMARY KEY, label text, flag boolean, small smallint, whole integer, big bigint,
    single real, twice double precision, digits38 numeric(38, 0), scale0 numeric(10, 0),
    scale36 numeric(38, 36), amount numeric(12, 2), free numeric, day date, at timestamp,
    at_tz timestamptz, clock time, raw bytea, doc jsonb, tags text[], uid uuid, body text
)
"""
UNICODE = "Zürich — 東京 — עברית — 🚀 — e\u0301 — \u200b"


@pytest.fixture(scope="module")
def edge_table(stack: Stack, config: StackConfig) -> Iterator[TableConfig]:
    # REPLICA IDENTITY DEFAULT, not FULL: an update leaves an unchanged TOASTed value out of the event
    create = (CREATE, "ALTER TABLE public.edge_cases REPLICA IDENTITY DEFAULT")
    with own_connector(stack, config, prefix=PREFIX, slot=SLOT, tables=(TABLE,), create=create):
        yield TableConfig(name=TABLE, key=("id",), topic_prefix=PREFIX)


def write_source_rows(pg: psycopg.Connection) -> None:
    pg.execute("INSERT INTO public.edge_cases (id) VALUES (1)")  # NULL in every other column
    pg.execute(
        "INSERT INTO public.edge_cases (id, label, doc, tags) VALUES (2, %s, %s, %s)",
        (UNICODE, json.dumps({"ü": "ß", "emoji": "🚀", "quote": "\"'\\"}), ["ß", "🚀", None]),
    )
    pg.execute(
        "INSERT INTO public.edge_cases (id, label, flag, small, whole, big, single, twice, digits38, scale0, "
        "scale36, amount, free, day, at, at_tz, clock, raw, uid) VALUES (3, 'numeric edges', true, -32768, "
        "2147483647, -9223372036854775808, 3.4028235e38, -1.7976931348623157e308, %s, %s, %s, %s, 'NaN', "
        "'4713-01-01 BC'::date + 1, '0001-01-01 00:00:00.000001', '2262-04-11 23:47:16.854775+14', "
        "'24:00:00', '\\x00ff', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11')",
        (
            Decimal("9" * 38),
            Decimal("-9999999999"),
            Decimal("-99." + "9" * 36),
            Decimal("-9999999999.99"),
        ),
    )
    # a value stored out of line (TOAST): 224 KB of hex digits, then an update of another column only
    pg.execute(
        "INSERT INTO public.edge_cases (id, label, body) "
        "SELECT 4, 'toasted', string_agg(md5(g::text), '') FROM generate_series(1, 7000) g"
    )
    pg.execute("UPDATE public.edge_cases SET label = 'toasted, label changed' WHERE id = 4")
    pg.execute(
        "INSERT INTO public.edge_cases (id, label, body) "
        "SELECT 5, 'ten megabytes', left(string_agg(md5(g::text), ''), %s) FROM generate_series(1, 330000) g",
        (TEN_MB,),
    )
    # schema change: a column added, then used by an update and an insert
    pg.execute("ALTER TABLE public.edge_cases ADD COLUMN added_later integer")
    pg.execute("UPDATE public.edge_cases SET added_later = 42 WHERE id = 2")
    pg.execute("INSERT INTO public.edge_cases (id, label, added_later) VALUES (6, 'after the change', 7)")


def write_bad_records(config: StackConfig) -> tuple[str, str]:
    """Straight to the topic, as a broken or misrouted producer would; returns the malformed and foreign values."""
    sample = next(r for r in read_topic(config.bootstrap_servers, TOPIC, timeout=60) if r.payload)
    foreign = copy.deepcopy(sample.value)
    envelope = foreign.get("payload", foreign)
    envelope["source"]["table"] = "not_captured"
    envelope["after"] = {"id": 77, "unrelated": "column"}
    producer = Producer({"bootstrap.servers": config.bootstrap_servers, "message.max.bytes": MAX_MESSAGE_BYTES})
    malformed, misrouted = '{"op": "c", "after": {"id": 99', json.dumps(foreign)
    producer.produce(TOPIC, key=b'{"id": 99}', value=malformed.encode())
    producer.produce(TOPIC, key=b'{"id": 77}', value=misrouted.encode())
    assert producer.flush(30) == 0, "the bad records were not delivered"
    return malformed, misrouted


def source_rows(pg: psycopg.Connection) -> dict[int, dict]:
    """PostgreSQL's rows, as text where the lake and the source type values differently."""
    with pg.cursor(row_factory=dict_row) as cursor:
        rows = cursor.execute(
            "SELECT id, label, flag, small, whole, big, digits38, scale0, scale36, amount, free::text AS free, "
            "day::text AS day, md5(body) AS body_md5, length(body) AS body_length, doc::text AS doc, tags, added_later "
            "FROM public.edge_cases ORDER BY id"
        ).fetchall()
    return {row["id"]: row for row in rows}


def lake_rows(spark, lake: Path) -> dict[int, dict]:
    table = spark_rows(spark, TableLake(lake, TABLE).table)
    result = {}
    # BC dates do not fit Python's date: Spark renders them as text
    for row in table.withColumn("day", F.col("day").cast("string")).collect():
        body = row["body"]
        result[row["id"]] = {
            "id": row["id"],
            "label": row["label"],
            "flag": row["flag"],
            "small": row["small"],
            "whole": row["whole"],
            "big": row["big"],
            "digits38": row["digits38"],
            "scale0": row["scale0"],
            "scale36": row["scale36"],
            "amount": row["amount"],
            "free": row["free"],
            "day": row["day"],
            "body_md5": hashlib.md5(body.encode()).hexdigest() if body is not None else None,
            "body_length": len(body) if body is not None else None,
            "doc": row["doc"],
            "tags": list(row["tags"]) if row["tags"] is not None else None,
            "added_later": row["added_later"],
        }
    return result


def test_each_bad_input_has_a_counted_outcome_and_the_rest_of_the_batch_lands(
    spark, config, pg, edge_table: TableConfig, tmp_path: Path
):
    write_source_rows(pg)
    eventually(
        lambda: sum(1 for r in read_topic(config.bootstrap_servers, TOPIC, timeout=60) if r.payload) >= 7,
        timeout=180,
        what="the edge rows' events in Kafka",
    )
    malformed, misrouted = write_bad_records(config)

    summary, report, _ = run_once(
        spark, config, edge_table, tmp_path, "edge-1", watermark_topic=f"{PREFIX}.public.cdc_watermark"
    )

    quarantine = delta_rows(TableLake(tmp_path, TABLE).quarantine, run="edge-1")
    reasons = sorted(r["reason"] for r in quarantine)
    print(f"\nsummary {summary}\nreport {report.as_dict()}\nquarantine {reasons}")
    assert summary["quarantined"] == len(reasons)
    assert any(r.startswith("value is not valid JSON") for r in reasons), reasons
    assert f"event of public.not_captured in the topic of {TABLE}" in reasons, reasons
    # each quarantined record keeps its message as Kafka held it
    messages = {r["reason"]: r["raw_value"] for r in quarantine}
    assert messages[f"event of public.not_captured in the topic of {TABLE}"] == misrouted
    assert [m for reason, m in messages.items() if reason.startswith("value is not valid JSON")] == [malformed]

    source = source_rows(pg)
    lake = lake_rows(spark, tmp_path)
    assert report.clean, report.as_dict()
    assert sorted(lake) == sorted(source) == [1, 2, 3, 4, 5, 6]
    assert lake[1] == {**{k: None for k in source[1]}, "id": 1}
    assert lake[2]["label"] == UNICODE and json.loads(lake[2]["doc"]) == json.loads(source[2]["doc"])
    assert lake[2]["tags"] == ["ß", "🚀", None] and lake[2]["added_later"] == 42
    for column in ("small", "whole", "big", "digits38", "scale0", "scale36", "amount", "flag"):
        assert lake[3][column] == source[3][column], column
    assert (source[3]["day"], lake[3]["day"]) == ("4713-01-02 BC", "-4712-01-02")  # astronomical year numbering
    # Debezium sends a numeric NaN as null (precise mode) and the snapshot types it as null: the diff
    # cannot see it, so the snapshot counts it in PostgreSQL, and the suite fails on that count.
    assert (source[3]["free"], lake[3]["free"]) == ("NaN", None)
    snapshot = commit_metadata(TableLake(tmp_path, TABLE).snapshot, "edge-1")
    assert snapshot["unrepresentable"] == {"free": 1}
    assert lake[4]["label"] == "toasted, label changed"
    assert (lake[4]["body_md5"], lake[4]["body_length"]) == (source[4]["body_md5"], source[4]["body_length"])
    assert (lake[5]["body_md5"], lake[5]["body_length"]) == (source[5]["body_md5"], TEN_MB)
    assert lake[6]["added_later"] == 7 and lake[1]["added_later"] is None
