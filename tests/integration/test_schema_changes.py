"""Schema changes while a writer writes: the lake follows the source exactly, with nothing to repair.

PostgreSQL changes a table's columns without a change event per row: an added column's default is
given to every existing row at once, a rename keeps every value, a retyped column is rewritten. Each
change below is made while a writer inserts and updates the table, so the run's range holds events
from before and after it; the run after it must be clean and its lake table equal to PostgreSQL read
directly (delta-rs, not the pipeline's reader).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from decimal import Decimal

import psycopg
import pytest

from cdc_dev.stack import Stack, StackConfig
from cdc_reconcile.config import TableConfig, load_config
from cdc_reconcile.lake import TableLake
from tests.support.lake import delta_rows
from tests.support.writer import Writer

from .conftest import eventually, own_connector, run_once

pytestmark = pytest.mark.integration

PREFIX = "schemachg"
SLOT = "cdc_schemachg"
TABLE = "public.schema_items"
CREATE = (
    f"CREATE TABLE {TABLE} (id bigint PRIMARY KEY, label text NOT NULL DEFAULT 'new', qty integer NOT NULL,"
    " price numeric(12,2), note text)",
)


@pytest.fixture(scope="module")
def changing_table(stack: Stack, config: StackConfig) -> Iterator[TableConfig]:
    with own_connector(stack, config, prefix=PREFIX, slot=SLOT, tables=(TABLE,), create=CREATE):
        yield TableConfig(name=TABLE, key=("id",), topic_prefix=PREFIX)


NEW_IDS = itertools.count(10_000)


def insert_and_update(pg: psycopg.Connection, n: int) -> None:
    """A new row and a change to an existing one, touching only columns no step renames or drops."""
    pg.execute(f"INSERT INTO {TABLE} (id, qty, price) VALUES (%s, 1, 2.5)", (next(NEW_IDS),))
    pg.execute(f"UPDATE {TABLE} SET qty = qty + 1, price = price + 0.01 WHERE id = %s", (1 + (n * 37) % 300,))


def source_columns(pg: psycopg.Connection) -> list[str]:
    return [
        r[0]
        for r in pg.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = 'public' "
            "AND table_name = 'schema_items' ORDER BY ordinal_position"
        ).fetchall()
    ]


def normalised(value):
    return value.normalize() if isinstance(value, Decimal) else value


def lake_and_source(lake, pg: psycopg.Connection) -> tuple[set[tuple], set[tuple], list[str]]:
    columns = source_columns(pg)
    rows = delta_rows(TableLake(lake, TABLE).table, columns=columns)
    in_lake = {tuple(normalised(r[c]) for c in columns) for r in rows}
    in_source = {tuple(normalised(v) for v in r) for r in pg.execute(f"SELECT {', '.join(columns)} FROM {TABLE}")}
    return in_lake, in_source, columns


def run_through(spark, config, pg, table, lake, run_id: str, *changes: str) -> None:
    """``changes`` made while the writer writes, then one run over a range holding events from before and
    after them: clean, and the lake equals the source (the writer stops first, so the source stays put)."""
    watermark = f"{PREFIX}.{load_config().watermark_table}"
    with Writer(config.pg_dsn, insert_and_update) as writer:
        eventually(lambda: writer.wrote_at_least(30), timeout=120, what="writes before the change")
        for statement in changes:
            pg.execute(statement)
        done = writer.transactions
        eventually(lambda: writer.wrote_at_least(done + 30), timeout=120, what="writes after the change")
    _, report, _ = run_once(spark, config, table, lake, run_id, watermark_topic=watermark)
    assert report.clean, report.as_dict()
    in_lake, in_source, columns = lake_and_source(lake, pg)
    assert len(in_source) > 300
    assert in_lake == in_source, (columns, sorted(in_lake ^ in_source)[:10])


# Each step's statements run while the writer writes; one run follows each step.
STEPS = (
    ("schema-1", ()),
    (
        "schema-2-added",
        (
            f"ALTER TABLE {TABLE} ADD COLUMN tier text DEFAULT 'std'",
            f"ALTER TABLE {TABLE} ADD COLUMN since date",
            f"UPDATE {TABLE} SET tier = 'gold' WHERE id BETWEEN 10 AND 30",
        ),
    ),
    (
        "schema-3-renamed-dropped",
        (
            f"ALTER TABLE {TABLE} RENAME COLUMN label TO title",
            f"ALTER TABLE {TABLE} DROP COLUMN note",
            f"UPDATE {TABLE} SET title = 'retitled' WHERE id BETWEEN 40 AND 50",
        ),
    ),
    (
        "schema-4-retyped",
        (
            f"ALTER TABLE {TABLE} ALTER COLUMN qty TYPE bigint",
            f"ALTER TABLE {TABLE} ALTER COLUMN price TYPE numeric(14,4)",
        ),
    ),
)


def test_columns_added_renamed_dropped_and_retyped_under_load(spark, config, pg, changing_table, tmp_path):
    pg.execute(f"INSERT INTO {TABLE} SELECT g, 'row ' || g, g % 7, g * 1.25, 'n' FROM generate_series(1, 300) g")
    for run_id, changes in STEPS:
        run_through(spark, config, pg, changing_table, tmp_path, run_id, *changes)
