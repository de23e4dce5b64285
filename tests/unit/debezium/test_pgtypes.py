"""The PostgreSQL type map and the connector settings that shape it."""

from __future__ import annotations

import pytest
from pyspark.sql import types as T

from cdc_reconcile.debezium.pgtypes import DecodeOptions, PgType, spark_type


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
