"""Types whose text differs between Debezium's events and PostgreSQL compare equal, or fail loudly (issue 14 item 6).

Also bit strings (Debezium sends ``bit(1)`` as a boolean and longer ones as a little-endian byte
array), ``hstore`` (a JSON object in its map's order), ``char(n)`` (Debezium keeps the padding),
an ``interval`` (Debezium's microseconds come from double arithmetic), ``citext`` and arrays. A
``bit varying`` with leading zeros cannot be told from the same value without them, so the snapshot
counts it as unrepresentable.

Debezium sends a ``timetz`` in UTC (``10:15:30.25Z``) where PostgreSQL prints its offset
(``11:15:30.25+01``), an ``inet`` host without its netmask where ``::text`` always adds it, and a
``point`` as a struct where PostgreSQL prints ``(x,y)``: each row changed with such a column was
stale on every run. The snapshot now projects Debezium's forms (a point as its two doubles on both
sides). Values no lake type holds are counted by the snapshot and fail the suite's source check,
naming the column: a date or timestamp at +-infinity (the JDBC read crashed on them before) and an
unconstrained numeric with more fractional digits than the lake's scale.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from cdc_reconcile.config import DEFAULT_VALUE_MODES, TableConfig, load_config
from cdc_reconcile.lake import TableLake
from tests.support.lake import commit_metadata, delta_rows

from .conftest import own_connector, run_once

pytestmark = pytest.mark.integration

PREFIX, SLOT, TABLE = "forms", "cdc_forms", "public.value_forms"
COLUMNS = {
    "at_tz": "time with time zone",
    "host": "inet",
    "net": "cidr",
    "spot": "point",
    "mood": "forms_mood",
    "span": "tstzrange",
    "doc": "jsonb",
    "day": "date",
    "at": "timestamp",
    "amount": "numeric",
    "flag": "bit(1)",
    "nibble": "bit(4)",
    "wide": "bit(12)",
    "free": "bit varying",
    "tags": "hstore",
    "label": "char(5)",
    "ci": "citext",
    "nums": "integer[]",
    "words": "text[]",
    "took": "interval",
}
# the values of COLUMNS, as SQL literals
ROWS = {
    1: (
        "'11:15:30.25+01'",
        "'192.168.0.1/24'",
        "'10.0.0.0/8'",
        "'(1.5,2)'",
        "'happy'",
        "'[2024-01-01 00:00+00,2024-02-01 00:00+00)'",
        '\'{"b": 1, "a": [1, 2]}\'',
        "'2024-02-29'",
        "'2024-02-29 12:00:00.5'",
        "1.5",
        "'1'",
        "'0001'",
        "'000100000011'",
        "'1011'",
        "'b=>2, a=>NULL'",
        "'ab'",
        "'MiXeD'",
        "'{1,NULL,3}'",
        "'{\"a b\",c}'",
        "'3 days 04:05:00.29'",
    ),
    2: (
        "'23:59:59-05'",
        "'::1'",
        "'2001:db8::/32'",
        "'(-0.1,1e-5)'",
        "'sad'",
        "'empty'",
        "'{}'",
        "'2000-01-01'",
        "'2000-01-01 00:00:00'",
        "'-12.000001'",
        "'0'",
        "'1000'",
        "'000000000000'",
        "'1'",
        "''",
        "'abcde'",
        "'x'",
        "'{}'",
        "'{}'",
        "'-1 year -2 mons +3 days -04:05:06.123457'",
    ),
}
LAKE_COLUMNS = ("at_tz", "host", "net", "spot", "flag", "nibble", "wide", "free", "tags", "label", "nums", "took")
LAKE = {
    1: (
        "10:15:30.25Z",
        "192.168.0.1/24",
        "10.0.0.0/8",
        '{"x":1.5,"y":2.0}',
        "1",
        "0001",
        "000100000011",
        "1011",
        '{"a":null,"b":"2"}',
        "ab   ",
        [1, None, 3],
        273900289999,  # Debezium's double arithmetic: exactly, 273900290000
    ),
    2: (
        "04:59:59Z",
        "::1",
        "2001:db8::/32",
        '{"x":-0.1,"y":1.0E-5}',
        "0",
        "1000",
        "000000000000",
        "1",
        "{}",
        "abcde",
        [],
        -36572706123457,
    ),
}
PLAIN = ("'00:00:00+00'", "'::1'", "'::/0'", "'(0,0)'", "'sad'", "'empty'", "'{}'")
FORMS = ("'1'", "'0000'", "'000000000000'")
FILLER = ("''", "'abcde'", "'x'", "'{}'", "'{}'", "'1 second'")
UNREPRESENTABLE = {
    3: (*PLAIN, "'infinity'", "'-infinity'", "1", *FORMS, "'0011'", *FILLER),
    4: (*PLAIN, "'2000-01-01'", "'2000-01-01'", "1.1234567890123456789012345", *FORMS, "'11'", *FILLER),
}


@pytest.fixture(scope="module")
def forms_table(stack, config):
    create = (
        "DROP TYPE IF EXISTS forms_mood CASCADE",
        "CREATE TYPE forms_mood AS ENUM ('happy', 'sad')",
        "CREATE EXTENSION IF NOT EXISTS hstore",
        "CREATE EXTENSION IF NOT EXISTS citext",
        f"CREATE TABLE {TABLE} (id integer PRIMARY KEY, " + ", ".join(f"{c} {t}" for c, t in COLUMNS.items()) + ")",
    )
    with own_connector(stack, config, prefix=PREFIX, slot=SLOT, tables=(TABLE,), create=create):
        yield TableConfig(name=TABLE, key=("id",), topic_prefix=PREFIX)


def insert(pg, rows) -> None:
    for key, values in rows.items():
        pg.execute(f"INSERT INTO {TABLE} VALUES ({key}, {', '.join(values)})")


def test_debezium_and_snapshot_forms_meet_and_unrepresentable_values_are_named(
    spark, config, pg, forms_table, tmp_path
):
    watermark = f"{PREFIX}.{load_config().watermark_table}"
    insert(pg, ROWS)
    _, report, _ = run_once(spark, config, forms_table, tmp_path, "forms-1", watermark_topic=watermark)
    assert report.clean, report.as_dict()

    pg.execute(f"UPDATE {TABLE} SET id = id + 10")  # every row a delete and a create: all values from events
    _, report, _ = run_once(spark, config, forms_table, tmp_path, "forms-2", watermark_topic=watermark)
    assert report.clean, report.as_dict()
    lake = {r["id"]: tuple(r[c] for c in LAKE_COLUMNS) for r in delta_rows(TableLake(tmp_path, TABLE).table)}
    assert lake == {key + 10: forms for key, forms in LAKE.items()}

    insert(pg, UNREPRESENTABLE)
    _, report, _ = run_once(spark, config, forms_table, tmp_path, "forms-3", watermark_topic=watermark)
    snapshot = commit_metadata(TableLake(tmp_path, TABLE).snapshot, "forms-3")
    assert snapshot["unrepresentable"] == {"day": 1, "at": 1, "amount": 1, "free": 1}


# Arrays of the types above, multiranges, and intervals in Debezium's string mode (issue 14 item 6).
MORE_PREFIX, MORE_SLOT, MORE_TABLE = "forms2", "cdc_forms2", "public.value_forms_more"
MORE_COLUMNS = {  # column: (type, value of row 1, value of row 2)
    "took": ("interval", "'-1 year -2 mons +3 days -04:05:06.123457'", "'3 days 04:05:00.29'"),
    "at_tzs": ("timetz[]", "ARRAY['11:15:30+01'::timetz, NULL]", "'{}'"),
    "tag_sets": ("hstore[]", "ARRAY['b=>2, a=>NULL'::hstore, '']", "ARRAY[NULL::hstore]"),
    "spans": ("tstzrange[]", "ARRAY['[2024-01-01 01:00+01,2024-02-01 00:00+00)'::tstzrange, 'empty']", "'{}'"),
    "labels": ("char(3)[]", "ARRAY['ab'::char(3), 'abc']", "ARRAY[NULL::char(3)]"),
    "hosts": ("inet[]", "ARRAY['192.168.0.1/24'::inet, '10.0.0.1', '::1']", "'{}'"),
    "nets": ("cidr[]", "ARRAY['10.0.0.0/8'::cidr]", "'{}'"),
    "amounts": ("numeric[]", "ARRAY[1.5, -0.000000000000000001, 12345678901234567890.5]", "ARRAY[0]::numeric[]"),
    "prices": ("numeric(5,2)[]", "ARRAY[1.5, -999.99]", "ARRAY[NULL::numeric]"),
    "days": ("date[]", "ARRAY['2024-02-29'::date, NULL]", "'{}'"),
    "stamps": ("timestamp[]", "ARRAY['2024-02-29 12:00:00.123456'::timestamp]", "'{}'"),
    "instants": ("timestamptz[]", "ARRAY['2024-02-29 12:00:00.123456+01'::timestamptz]", "'{}'"),
    "times": ("time[]", "ARRAY['12:00:00.5'::time, '23:59:59.999']", "'{}'"),
    "blobs": ("bytea[]", "ARRAY['\\x0102'::bytea]", "'{}'"),
    "ratios": ("float8[]", "ARRAY[1.5::float8, 'NaN', '-Infinity']", "'{}'"),
    "ids": ("uuid[]", "ARRAY['a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid]", "'{}'"),
    "docs": ("jsonb[]", 'ARRAY[\'{"b": 1, "a": 2}\'::jsonb]', "'{}'"),
    "moods": ("forms_more_mood[]", "ARRAY['happy'::forms_more_mood]", "'{}'"),
    "macs": ("macaddr[]", "ARRAY['08:00:2b:01:02:03'::macaddr]", "'{}'"),
    "ranges": ("int8range[]", "ARRAY['[1,5]'::int8range]", "'{}'"),
    "num_span": ("numrange", "'[1.5,2.5]'", "'empty'"),
    "ts_span": ("tsrange", "'[2024-01-01 00:00,2024-02-01 00:00)'", "NULL"),
}
# types Debezium leaves out of its events (or sends as null): NULL in rows 1 and 2, a value in row 3
NOT_CARRIED = {
    "int_spans": ("int4multirange", "'{[1,3), [5,7)}'"),
    "spots": ("point[]", "ARRAY['(1.5,2)'::point]"),
    "tooks": ("interval[]", "ARRAY['1 day'::interval]"),
    "nibbles": ("bit(4)[]", "ARRAY['0101'::bit(4)]"),
    "frees": ("varbit[]", "ARRAY['0011'::varbit]"),
    "cash": ("money[]", "ARRAY[12.34::money]"),
    "pages": ("xml[]", "ARRAY['<a>x</a>'::xml]"),
}
# row 3's values of MORE_COLUMNS: elements no lake value holds in three arrays, the rest plain
UNFIT = {
    "at_tzs": "ARRAY['11:15:30.25+01'::timetz]",  # Debezium drops an array element's fraction of a second
    "days": "ARRAY['2024-02-29'::date, 'infinity']",
    "amounts": "ARRAY[1.5, 'NaN']::numeric[]",
    "times": "ARRAY['23:59:59.999999'::time]",  # and of a time's below the millisecond
}
MORE_LAKE = {  # row 1's lake values of some columns, after the key change (every value from an event)
    "took": "P-1Y-2M3DT-4H-5M-6.123457S",
    "at_tzs": ["10:15:30Z", None],
    "tag_sets": ['{"a":null,"b":"2"}', "{}"],
    "spans": ['["2024-01-01 00:00:00+00","2024-02-01 00:00:00+00")', "empty"],
    "labels": ["ab ", "abc"],
    "hosts": ["192.168.0.1/24", "10.0.0.1", "::1"],
    "times": [43200500000, 86399999000],
    "spots": None,
}


@pytest.fixture(scope="module")
def more_forms_table(stack, config):
    columns = {**{c: t for c, (t, _, _) in MORE_COLUMNS.items()}, **{c: t for c, (t, _) in NOT_CARRIED.items()}}
    create = (
        "CREATE EXTENSION IF NOT EXISTS hstore",
        "DROP TYPE IF EXISTS forms_more_mood CASCADE",
        "CREATE TYPE forms_more_mood AS ENUM ('happy', 'sad')",
        f"CREATE TABLE {MORE_TABLE} (id integer PRIMARY KEY, {', '.join(f'{c} {t}' for c, t in columns.items())})",
    )
    with own_connector(
        stack,
        config,
        prefix=MORE_PREFIX,
        slot=MORE_SLOT,
        tables=(MORE_TABLE,),
        create=create,
        extra={"interval.handling.mode": "string"},
    ):
        yield TableConfig(name=MORE_TABLE, key=("id",), topic_prefix=MORE_PREFIX)


def test_arrays_multiranges_and_string_intervals_meet_or_are_named(spark, config, pg, more_forms_table, tmp_path):
    pipeline = replace(load_config(), value_modes={**DEFAULT_VALUE_MODES, "interval.handling.mode": "string"})
    watermark = f"{MORE_PREFIX}.{pipeline.watermark_table}"

    def run(run_id: str):
        return run_once(spark, config, more_forms_table, tmp_path, run_id, watermark_topic=watermark, pipeline=pipeline)

    names = [*MORE_COLUMNS, *NOT_CARRIED]
    for key, index in ((1, 1), (2, 2)):
        values = [MORE_COLUMNS[c][index] for c in MORE_COLUMNS] + ["NULL"] * len(NOT_CARRIED)
        pg.execute(f"INSERT INTO {MORE_TABLE} (id, {', '.join(names)}) VALUES ({key}, {', '.join(values)})")
    _, report, _ = run("more-1")
    assert report.clean, report.as_dict()

    pg.execute(f"UPDATE {MORE_TABLE} SET id = id + 10")  # every row a delete and a create: all values from events
    _, report, _ = run("more-2")
    assert report.clean, report.as_dict()
    lake = {r["id"]: r for r in delta_rows(TableLake(tmp_path, MORE_TABLE).table)}
    assert {c: lake[11][c] for c in MORE_LAKE} == MORE_LAKE

    values = [UNFIT.get(c, MORE_COLUMNS[c][1]) for c in MORE_COLUMNS] + [v for _, v in NOT_CARRIED.values()]
    pg.execute(f"INSERT INTO {MORE_TABLE} (id, {', '.join(names)}) VALUES (3, {', '.join(values)})")
    run("more-3")
    snapshot = commit_metadata(TableLake(tmp_path, MORE_TABLE).snapshot, "more-3")
    assert snapshot["unrepresentable"] == {**dict.fromkeys(NOT_CARRIED, 1), **dict.fromkeys(UNFIT, 1)}
