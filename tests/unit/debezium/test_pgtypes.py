"""The PostgreSQL type map and the connector settings that shape it."""

from __future__ import annotations

import pytest
from pyspark.sql import types as T

from cdc_reconcile.debezium.pgtypes import DecodeOptions, PgType, not_carried, spark_type, stored_encoding


def test_pg_type_parsing():
    assert PgType.parse("numeric(12, 2)") == PgType("numeric", (12, 2))
    assert PgType.parse("timestamp(3) with time zone") == PgType("timestamptz", (3,))
    assert PgType.parse("TIMESTAMP WITHOUT TIME ZONE") == PgType("timestamp")
    assert PgType.parse("character varying(20)") == PgType("character varying", (20,))
    assert PgType.parse("integer[]") == PgType("integer", (), True)
    assert PgType.parse("_int4") == PgType("integer", (), True)
    assert PgType.parse("double precision") == PgType("double precision")
    assert PgType.parse("varbit(8)") == PgType("bit varying", (8,))
    with pytest.raises(ValueError):
        PgType.parse("numeric(12,2")


def test_a_type_outside_the_search_path_parses_without_its_schema():
    """``format_type`` qualifies a type whose schema is not on the search path (an extension's, an enum's)."""
    assert PgType.parse("extensions.hstore") == PgType("hstore")
    assert PgType.parse("sales.mood[]") == PgType("mood", (), True)
    assert PgType.parse('"Sales"."Mood"') == PgType("Mood")
    assert PgType.parse('"Odd ""Name"""[]') == PgType('Odd "Name"', (), True)
    assert spark_type('sales."Mood"') == T.StringType()


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


def test_stored_encoding_describes_the_values_delta_cannot_type():
    """time and interval land as int64 microseconds, timetz and point as text, money as a plain decimal."""
    time = "int64 microseconds since midnight (Delta has no TIME type)"
    assert stored_encoding("time") == time
    assert stored_encoding("time(3) without time zone") == time  # the decoder scales milliseconds up
    assert stored_encoding(PgType("time")) == time
    assert stored_encoding("interval").startswith("int64 microseconds, a month counted as 30.4375 days")
    timetz = stored_encoding("time with time zone")
    assert timetz == stored_encoding("timetz(6)")
    assert timetz.startswith("string time of day in UTC") and "10:15:30.25Z" in timetz
    assert stored_encoding("point") == 'string JSON {"x": double, "y": double} (Delta has no geometric type)'
    assert stored_encoding("money") == "decimal(19,2) amount without currency symbol (money.fraction.digits=2)"
    assert stored_encoding("money", DecodeOptions(money_fraction_digits=4)).startswith("decimal(19,4) amount")
    assert stored_encoding("time[]").startswith("array of int64 microseconds since midnight, to the millisecond")
    assert stored_encoding("_money").startswith("always null: Debezium has no converter for arrays of money")


def test_stored_encoding_is_none_for_values_stored_as_their_own_type():
    for pg_type in ("integer", "text", "numeric(12,2)", "timestamp", "timestamptz", "date", "bytea", "uuid", "text[]"):
        assert stored_encoding(pg_type) is None, pg_type


@pytest.mark.parametrize(
    ("pg_type", "carried"),
    [
        ("int4multirange", False),
        ("tstzmultirange", False),
        ("point[]", False),
        ("interval[]", False),
        ("varbit[]", False),
        ("money[]", False),
        ("xml[]", False),
        ("bit(4)[]", False),
        ("point", True),
        ("interval", True),
        ("int4range", True),
        ("timetz[]", True),
        ("hstore[]", True),
        ("numeric[]", True),
    ],
)
def test_types_debezium_leaves_out_are_named_and_described_as_always_null(pg_type, carried):
    reason = not_carried(pg_type)
    assert (reason is None) == carried
    if not carried:
        assert stored_encoding(pg_type).startswith(f"always null: {reason}")


def test_an_interval_in_string_mode_is_stored_as_text_and_described_so():
    options = DecodeOptions(interval_handling_mode="string")
    assert spark_type("interval", options) == T.StringType()
    assert "interval.handling.mode=string" in stored_encoding("interval", options)
    assert stored_encoding("timetz[]").startswith("array of string time of day in UTC to the whole second")
