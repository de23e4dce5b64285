"""A run's columns against the previous lake table's: added, renamed, dropped, retyped, re-added."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.testing import assertDataFrameEqual

from cdc_reconcile.column_lineage import (
    ATTNUM_KEY,
    COMMENT_KEY,
    PG_TYPE_KEY,
    ColumnLineage,
    column_ids,
    columns_changed,
    conform,
    with_column_metadata,
)
from cdc_reconcile.debezium.decoding import decode_image, has_fixed_scales, with_decimal_scales

from .debezium.helpers import decimal_b64

KEEP = ("_cdc_op",)


def stored_table(spark):
    """The previous lake table: id (1), label (2), qty int (3), note (4), attnums and types in the metadata."""
    schema = T.StructType(
        [
            T.StructField(name, data_type, True, {ATTNUM_KEY: attnum, PG_TYPE_KEY: pg_type})
            for name, data_type, attnum, pg_type in (
                ("id", T.LongType(), 1, "bigint"),
                ("label", T.StringType(), 2, "text"),
                ("qty", T.IntegerType(), 3, "integer"),
                ("note", T.StringType(), 4, "text"),
            )
        ]
        + [T.StructField("_cdc_op", T.StringType(), True)]
    )
    return spark.createDataFrame([(1, "a", 5, "n1", "c"), (2, "b", 7, "n2", "u")], schema)


def run_columns(**missing):
    """id, title (label renamed), qty widened to bigint, note dropped and added again, tier and since added."""
    columns = [
        {"name": "id", "type": "bigint", "attnum": 1},
        {"name": "title", "type": "text", "attnum": 2},
        {"name": "qty", "type": "bigint", "attnum": 3},
        {"name": "note", "type": "text", "attnum": 7},
        {"name": "tier", "type": "text", "attnum": 5},
        {"name": "since", "type": "date", "attnum": 6},
    ]
    for column in columns:
        column["missing_value"] = missing.get(column["name"])
    return columns


def test_the_previous_table_takes_the_runs_columns(spark):
    previous = stored_table(spark)
    lineage = ColumnLineage.of(run_columns(tier="std", note="fresh"), previous.schema)
    assert lineage.renamed_from == {"title": "label"}
    assert lineage.retyped == {"qty"}
    expected = spark.createDataFrame(
        [(1, "a", 5, "fresh", "std", None, "c"), (2, "b", 7, "fresh", "std", None, "u")],
        "id bigint, title string, qty bigint, note string, tier string, since date, _cdc_op string",
    )
    assertDataFrameEqual(conform(previous, lineage, KEEP), expected, checkRowOrder=False)


def test_without_stored_column_identities_columns_match_by_name(spark):
    previous = spark.createDataFrame([(1, "a", "c")], "id bigint, label string, _cdc_op string")
    columns = [{"name": "id", "type": "bigint", "attnum": 1}, {"name": "label", "type": "text", "attnum": 2}]
    lineage = ColumnLineage.of(columns, previous.schema)
    assertDataFrameEqual(conform(previous, lineage, KEEP), previous)
    assert columns_changed(previous.schema, lineage, KEEP), "a table without identities is rewritten once with them"


def test_columns_changed_only_when_the_stored_layout_differs(spark):
    previous = stored_table(spark)
    same = [
        {"name": "id", "type": "bigint", "attnum": 1},
        {"name": "label", "type": "text", "attnum": 2},
        {"name": "qty", "type": "integer", "attnum": 3},
        {"name": "note", "type": "text", "attnum": 4},
    ]
    assert not columns_changed(previous.schema, ColumnLineage.of(same, previous.schema), KEEP)
    widened = [dict(c, type="bigint") if c["name"] == "qty" else c for c in same]
    assert columns_changed(previous.schema, ColumnLineage.of(widened, previous.schema), KEEP)
    re_added = [dict(c, attnum=9) if c["name"] == "note" else c for c in same]
    assert columns_changed(previous.schema, ColumnLineage.of(re_added, previous.schema), KEEP)
    # stored alike, described differently: the table is rewritten so its column metadata stays true
    retyped_alike = [dict(c, type="character varying(20)") if c["name"] == "note" else c for c in same]
    assert columns_changed(previous.schema, ColumnLineage.of(retyped_alike, previous.schema), KEEP)


def test_the_written_table_describes_each_column_and_its_encoding(spark):
    """attnum, PostgreSQL type, and a comment where the value is an encoding (a time as microseconds)."""
    columns = [
        {"name": "id", "type": "bigint", "attnum": 1},
        {"name": "opens", "type": "time without time zone", "attnum": 2},
        {"name": "note", "type": "text"},  # no attnum known: the stored one is kept
    ]
    lineage = ColumnLineage.of(columns)
    table = spark.createDataFrame(
        [(1, 3_600_000_000, "n", "c")],
        T.StructType(
            [
                T.StructField("id", T.LongType()),
                T.StructField("opens", T.LongType(), True, {COMMENT_KEY: "an earlier description"}),
                T.StructField("note", T.StringType(), True, {ATTNUM_KEY: 3}),
                T.StructField("_cdc_op", T.StringType(), True, {"kept": "as is"}),
            ]
        ),
    )

    written = with_column_metadata(table, lineage)

    assert {f.name: f.metadata for f in written.schema.fields} == {
        "id": {ATTNUM_KEY: 1, PG_TYPE_KEY: "bigint"},
        "opens": {
            ATTNUM_KEY: 2,
            PG_TYPE_KEY: "time without time zone",
            COMMENT_KEY: "int64 microseconds since midnight (Delta has no TIME type)",
        },
        "note": {ATTNUM_KEY: 3, PG_TYPE_KEY: "text"},
        "_cdc_op": {"kept": "as is"},
    }
    assertDataFrameEqual(written, table)
    assert not columns_changed(written.schema, ColumnLineage.of(columns, written.schema), KEEP)
    assert columns_changed(table.schema, ColumnLineage.of(columns, table.schema), KEEP), "undescribed: rewritten"


def test_missing_values_are_typed_as_the_lake_stores_them(spark):
    columns = [
        {"name": "amount", "type": "numeric(12,2)", "missing_value": "12.50"},
        {"name": "day", "type": "date", "missing_value": "2024-02-29"},
        {"name": "at", "type": "timestamp with time zone", "missing_value": "2024-01-01 10:00:00+00:00"},
        {"name": "flag", "type": "boolean", "missing_value": "true"},
        {"name": "blob", "type": "bytea", "missing_value": "AAEC"},
        {"name": "spot", "type": "point", "missing_value": '{"x" : 1.5, "y" : 2}'},
        {"name": "plain", "type": "text"},
    ]
    lineage = ColumnLineage.of(columns)
    row = spark.range(1).select(*(lineage.missing_value(c["name"]).alias(c["name"]) for c in columns)).first()
    assert row == Row(
        amount=Decimal("12.50"),
        day=dt.date(2024, 2, 29),
        at=dt.datetime(2024, 1, 1, 10, 0),
        flag=True,
        blob=bytearray(b"\x00\x01\x02"),
        spot='{"x":1.5,"y":2.0}',
        plain=None,
    )


def test_images_older_than_a_column_take_its_old_name_or_missing_value(spark):
    previous = stored_table(spark)
    lineage = ColumnLineage.of(run_columns(tier="std"), previous.schema)
    images = [
        ('{"id":1,"label":"before rename","qty":5,"note":"n"}',),  # predates the rename and the additions
        ('{"id":2,"title":"after","qty":6,"note":"x","tier":null,"since":null}',),  # has every column
    ]
    df = spark.createDataFrame(images, "after string")
    spec = lineage.spec
    decoded = df.select(decode_image("after", spec, fills=lineage.image_fills()).alias("row")).select(
        *(F.col("row").getField(c).alias(c) for c in spec)
    )
    expected = spark.createDataFrame(
        [(1, "before rename", 5, "n", "std", None), (2, "after", 6, "x", None, None)],
        "id bigint, title string, qty bigint, note string, tier string, since date",
    )
    assertDataFrameEqual(decoded, expected, checkRowOrder=False)


def message(price_b64: str, scale: int) -> str:
    """A Kafka message with the JSON converter's schema: price is a Connect Decimal of ``scale``."""
    value_schema = {
        "type": "struct",
        "fields": [
            {"type": "int64", "field": "id"},
            {
                "type": "bytes",
                "field": "price",
                "name": "org.apache.kafka.connect.data.Decimal",
                "parameters": {"scale": str(scale), "connect.decimal.precision": "14"},
            },
        ],
    }
    schema = {"type": "struct", "fields": [dict(value_schema, field="before"), dict(value_schema, field="after")]}
    return json.dumps({"schema": schema, "payload": {"after": {"id": 1, "price": price_b64}}})


def test_each_event_decodes_its_decimals_at_its_own_scale(spark):
    spec = {"id": "bigint", "price": "numeric(14,4)"}
    assert has_fixed_scales(spec)
    events = spark.createDataFrame(
        [
            (message(decimal_b64("1.33", 2), 2), '{"id":1,"price":"' + decimal_b64("1.33", 2) + '"}'),
            (message(decimal_b64("1.3312", 4), 4), '{"id":1,"price":"' + decimal_b64("1.3312", 4) + '"}'),
            (None, '{"id":1,"price":"' + decimal_b64("2.5", 4) + '"}'),  # no schema: the spec's scale
        ],
        "raw_value string, after string",
    )
    scaled = with_decimal_scales(events)
    prices = [
        r.p
        for r in scaled.select(decode_image("after", spec, scales=F.col("decimal_scales")).price.alias("p")).collect()
    ]
    assert prices == [Decimal("1.3300"), Decimal("1.3312"), Decimal("2.5000")]


def test_column_ids_read_the_stored_metadata(spark):
    assert column_ids(stored_table(spark).schema) == {"id": 1, "label": 2, "qty": 3, "note": 4}
