"""The typed row hash: equal exactly when the rows are equal, on both sides of the comparison."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual

from cdc_reconcile.diff import EXTRA, MISSING, STALE, conform, diff_rows, row_hash


def hashes(spark, schema, values):
    df = spark.createDataFrame(values, schema)
    return [r[0] for r in df.select(row_hash(df, df.columns)).collect()]


def distinct(spark, schema, values) -> bool:
    found = hashes(spark, schema, values)
    return len(set(found)) == len(values)


def test_an_array_is_not_hashed_through_its_text(spark):
    assert distinct(spark, "tags array<string>", [(["a, b"],), (["a", "b"],), (["a", " b"],), (["[a, b]"],)])


def test_a_null_element_differs_from_the_text_null_and_from_no_element(spark):
    assert distinct(spark, "tags array<string>", [([None],), (["null"],), ([],), (None,), ([""],), ([None, None],)])


def test_null_differs_from_every_text(spark):
    assert distinct(spark, "note string", [(None,), ("",), ("null",), ("N",), ("\u0000",), ("NULL",)])


@pytest.mark.parametrize(
    ("left", "right"),
    [
        (("x\u001f", "y"), ("x", "\u001fy")),  # the old separator inside a text
        (("ab", "c"), ("a", "bc")),
        (("V1:a", None), ("V1:", "a")),  # texts that look like the encoding itself
        (("", None), (None, "")),
    ],
)
def test_no_text_can_shift_across_columns(spark, left, right):
    assert distinct(spark, "first string, second string", [left, right])


def test_nested_arrays_and_binary_values_keep_their_boundaries(spark):
    assert distinct(spark, "grid array<array<string>>", [([["a", "b"]],), ([["a"], ["b"]],), ([["ab"]],), ([[]],)])
    assert distinct(spark, "raw binary, tags array<binary>", [(b"\x01", [b"\x02\x03"]), (b"\x01\x02", [b"\x03"])])


def test_rows_differing_by_array_boundaries_null_elements_or_a_shifted_separator_are_stale(spark):
    schema = "id long, tags array<string>, first string, second string"
    lake = spark.createDataFrame(
        [(1, ["a", "b"], "x", "y"), (2, [None], None, None), (3, None, "x\u001f", "y")], schema
    )
    source = spark.createDataFrame(
        [(1, ["a, b"], "x", "y"), (2, ["null"], None, None), (3, None, "x", "\u001fy")], schema
    )
    diff = diff_rows(lake, source, ["id"], ["id", "tags", "first", "second"])
    assertDataFrameEqual(
        diff.select("id", "kind"), [Row(id=1, kind=STALE), Row(id=2, kind=STALE), Row(id=3, kind=STALE)]
    )


def test_equal_rows_hash_equal_across_the_conform_step(spark):
    """The lake side is cast to the snapshot's types before hashing, whatever types it was folded in."""
    columns = ["id", "qty", "price", "at", "day", "raw", "tags", "note"]
    source = spark.createDataFrame(
        [
            (1, 7, Decimal("1.50"), dt.datetime(2024, 3, 10, 2, 30), dt.date(2024, 1, 1), b"\x00\xff", ["a", None], ""),
            (2, None, None, None, None, None, None, None),
        ],
        "id long, qty int, price decimal(10,2), at timestamp, day date, raw binary, tags array<string>, note string",
    )
    lake = spark.createDataFrame(
        [
            (1, 7, Decimal("1.5"), dt.datetime(2024, 3, 10, 2, 30), "2024-01-01", b"\x00\xff", ["a", None], ""),
            (2, None, None, None, None, None, None, None),
        ],
        "id long, qty long, price decimal(12,4), at timestamp, day string, raw binary, tags array<string>, note string",
    )
    assert diff_rows(lake, source, ["id"], columns).count() == 0
    conformed = conform(lake, source, columns)
    assertDataFrameEqual(
        conformed.select("id", row_hash(conformed, columns).alias("hash")),
        source.select("id", row_hash(source, columns).alias("hash")),
    )


def test_an_instant_hashes_the_same_in_any_session_time_zone(spark):
    df = spark.createDataFrame([(dt.datetime(2024, 11, 3, 5, 30, tzinfo=dt.UTC),)], "at timestamp")
    zone = spark.conf.get("spark.sql.session.timeZone")
    try:
        in_utc = df.select(row_hash(df, ["at"])).first()[0]
        spark.conf.set("spark.sql.session.timeZone", "America/New_York")
        in_new_york = df.select(row_hash(df, ["at"])).first()[0]
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
    assert in_utc == in_new_york


def test_the_comparison_tells_apart_what_the_hash_does_and_nothing_else(spark):
    """Rows are compared value by value; a floating-point value by its text, so ``-0.0`` is not ``0.0``."""
    schema = "id long, x double, xs array<double>, tags array<string>, at timestamp"
    at = dt.datetime(2024, 3, 10, 2, 30)
    lake = spark.createDataFrame(
        [
            (1, 0.0, [1.0], ["a", None], at),
            (2, float("nan"), [float("nan")], [None], at),
            (3, 1.5, [0.0], [], None),
            (4, None, None, None, None),
        ],
        schema,
    )
    source = spark.createDataFrame(
        [
            (1, -0.0, [1.0], ["a", None], at),
            (2, float("nan"), [float("nan")], [None], at),
            (3, 1.5, [-0.0], [], None),
            (4, None, None, None, at),
        ],
        schema,
    )
    columns = ["id", "x", "xs", "tags", "at"]
    diff = diff_rows(lake, source, ["id"], columns)
    assertDataFrameEqual(
        diff.select("id", "kind"), [Row(id=1, kind=STALE), Row(id=3, kind=STALE), Row(id=4, kind=STALE)]
    )
    expected = {
        r["id"]: (r["lake_hash"], r["source_hash"])
        for r in lake.select("id", row_hash(lake, columns).alias("lake_hash"))
        .join(source.select("id", row_hash(source, columns).alias("source_hash")), "id")
        .collect()
    }
    for row in diff.collect():
        assert (row["lake_hash"], row["source_hash"]) == expected[row["id"]]
        assert row["lake_hash"] != row["source_hash"]


def test_missing_and_extra_rows_carry_one_hash(spark):
    lake = spark.createDataFrame([(1, "a"), (2, "b")], "id long, note string")
    source = spark.createDataFrame([(2, "b"), (3, "c")], "id long, note string")
    rows = {r["id"]: r for r in diff_rows(lake, source, ["id"], ["id", "note"]).collect()}
    assert rows[1]["kind"] == EXTRA and rows[1]["source_hash"] is None and rows[1]["lake_hash"]
    assert rows[3]["kind"] == MISSING and rows[3]["lake_hash"] is None and rows[3]["source_hash"]
    assert set(rows) == {1, 3}


def test_a_map_column_is_refused_with_its_type(spark):
    df = spark.createDataFrame([(1, {"a": "b"})], "id long, attrs map<string,string>")
    with pytest.raises(ValueError, match="map<string,string>"):
        diff_rows(df, df, ["id"], ["id", "attrs"])


def test_a_map_inside_a_struct_is_refused_with_the_columns_whole_type(spark):
    df = spark.createDataFrame([(1, ({"a": "b"},))], "id long, info struct<attrs: map<string,string>>")
    with pytest.raises(ValueError, match=r"struct<attrs:map<string,string>>"):
        diff_rows(df, df, ["id"], ["id", "info"])


def test_a_key_named_like_the_comparisons_own_columns_is_refused(spark):
    df = spark.createDataFrame([(1, "a")], "_lake_0 long, note string")
    with pytest.raises(ValueError, match="'_lake_0' clashes"):
        diff_rows(df, df, ["_lake_0"], ["_lake_0", "note"])
