"""A ``TRUNCATE`` reaches the lake as a truncate, not as every row turned "extra".

Debezium skips truncates unless ``skipped.operations`` says otherwise; the stack's connector (and the
compose file's) captures them. A table of its own, captured by a connector of its own, is truncated
inside one run's range while a writer keeps inserting and updating it before, during and after the
truncate and through the run itself. The run must find nothing to repair, and the lake must equal
PostgreSQL read directly.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from cdc_dev.stack import Stack, StackConfig
from cdc_dev.stack.connect import connector_config
from cdc_reconcile.config import TableConfig, load_config
from cdc_reconcile.lake import TableLake
from tests.support.lake import rows_by_key as lake_by_key
from tests.support.source import rows_by_key as source_by_key
from tests.support.writer import Writer

from .conftest import eventually, own_connector, run_once

pytestmark = pytest.mark.integration

PREFIX = "trunc"
SLOT = "cdc_trunc"
TABLE = "public.trunc_items"
COLUMNS = ["id", "label", "qty"]  # the key first
CREATE = (f"CREATE TABLE {TABLE} (id bigint PRIMARY KEY, label text NOT NULL, qty integer NOT NULL)",)


@pytest.fixture(scope="module")
def truncated_table(stack: Stack, config: StackConfig) -> Iterator[TableConfig]:
    with own_connector(stack, config, prefix=PREFIX, slot=SLOT, tables=(TABLE,), create=CREATE):
        yield TableConfig(name=TABLE, key=("id",), topic_prefix=PREFIX)


def insert_and_update(pg: psycopg.Connection, n: int) -> None:
    """One new row, and one more unit on the newest row."""
    new_id = 1_000 + n
    pg.execute(f"INSERT INTO {TABLE} VALUES (%s, %s, 1)", (new_id, f"row {new_id}"))
    pg.execute(f"UPDATE {TABLE} SET qty = qty + 1 WHERE id = (SELECT max(id) FROM {TABLE})")


def test_the_stack_connector_captures_truncates(config: StackConfig):
    assert connector_config(config)["skipped.operations"] == "none"


def test_a_truncate_under_load_empties_the_lake_table_and_nothing_is_repaired(
    spark, config, pg, truncated_table, tmp_path
):
    pg.execute(f"INSERT INTO {TABLE} SELECT g, 'row ' || g, g % 7 FROM generate_series(1, 300) g")
    watermark = f"{PREFIX}.{load_config().watermark_table}"
    _, report, _ = run_once(spark, config, truncated_table, tmp_path, "trunc-1", watermark_topic=watermark)
    assert report.clean, report.as_dict()
    assert lake_by_key(TableLake(tmp_path, TABLE).table, COLUMNS) == source_by_key(pg, TABLE, COLUMNS)

    with Writer(config.pg_dsn, insert_and_update) as writer:
        eventually(lambda: writer.wrote_at_least(50), timeout=120, what="the writer's first transactions")
        pg.execute(f"TRUNCATE {TABLE}")
        truncated_at = writer.transactions
        eventually(lambda: writer.wrote_at_least(truncated_at + 50), timeout=120, what="writes after the truncate")
        _, report, _ = run_once(spark, config, truncated_table, tmp_path, "trunc-2", watermark_topic=watermark)
        assert writer.wrote_at_least(truncated_at + 51)

    assert report.clean, report.as_dict()
    assert not set(range(1, 301)) & set(lake_by_key(TableLake(tmp_path, TABLE).table, COLUMNS)), (
        "rows from before the truncate are still in the lake"
    )
    _, report, _ = run_once(spark, config, truncated_table, tmp_path, "trunc-3", watermark_topic=watermark)
    assert report.clean, report.as_dict()
    assert lake_by_key(TableLake(tmp_path, TABLE).table, COLUMNS) == source_by_key(pg, TABLE, COLUMNS)
