"""A key change keeps the row's unchanged TOASTed values (issue 14 item 13).

With ``REPLICA IDENTITY DEFAULT`` an ``UPDATE`` that changes the primary key and leaves a TOASTed
column alone reaches Debezium without that column's value: the connector emits a delete of the old
key and a create of the new key whose TOASTed column holds ``__debezium_unavailable_value``. The
lake must carry the value over from the old key, whether the old key's state was published by an
earlier run or created in the same range, and keep it through later updates that leave it alone
again. A writer updates other rows and inserts new ones throughout.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from cdc_dev.stack import Stack, StackConfig
from cdc_reconcile.config import TableConfig, load_config
from cdc_reconcile.lake import TableLake
from tests.support.lake import rows_by_key as lake_by_key
from tests.support.source import rows_by_key as source_by_key
from tests.support.writer import Writer

from .conftest import eventually, own_connector, run_once

pytestmark = pytest.mark.integration

PREFIX = "toastkey"
SLOT = "cdc_toastkey"
TABLE = "public.toast_docs"
COLUMNS = ["id", "body", "n"]  # the key first
CREATE = (
    f"CREATE TABLE {TABLE} (id bigint PRIMARY KEY, body text NOT NULL, n integer NOT NULL)",
    # stored out of line uncompressed: every body below is TOASTed, not inlined
    f"ALTER TABLE {TABLE} ALTER COLUMN body SET STORAGE EXTERNAL",
)
BODY = "repeat(md5(%s::text), 100)"  # 3,200 characters, above the 2 kB TOAST threshold
MOVED = 100_000


@pytest.fixture(scope="module")
def toast_table(stack: Stack, config: StackConfig) -> Iterator[TableConfig]:
    with own_connector(stack, config, prefix=PREFIX, slot=SLOT, tables=(TABLE,), create=CREATE):
        yield TableConfig(name=TABLE, key=("id",), topic_prefix=PREFIX)


def touch_and_insert(pg: psycopg.Connection, n: int) -> None:
    """An update of a row that keeps its key (its body is not sent either), and one new row."""
    pg.execute(f"UPDATE {TABLE} SET n = n + 1 WHERE id = %s", (60 + n % 100,))
    pg.execute(f"INSERT INTO {TABLE} VALUES (%s, {BODY}, 0)", (10_000 + n, 10_000 + n))


def moved_body_count(lake: Path) -> int:
    return sum(
        1 for key, (body, _) in lake_by_key(TableLake(lake, TABLE).table, COLUMNS).items() if key >= MOVED and body
    )


@pytest.mark.slow  # about 3 minutes: `-m slow`; tests/unit/test_compaction.py folds the same key changes
def test_a_key_change_keeps_the_unchanged_toasted_value_within_and_across_ranges(
    spark, config, pg, toast_table, tmp_path
):
    pg.execute(f"INSERT INTO {TABLE} SELECT g, {BODY.replace('%s', 'g')}, 0 FROM generate_series(1, 200) g")
    assert pg.execute(f"SELECT count(*) FROM {TABLE} WHERE pg_column_size(body) < 3200").fetchone() == (0,)
    watermark = f"{PREFIX}.{load_config().watermark_table}"
    _, report, _ = run_once(spark, config, toast_table, tmp_path, "toast-1", watermark_topic=watermark)
    assert report.clean, report.as_dict()
    assert lake_by_key(TableLake(tmp_path, TABLE).table, COLUMNS) == source_by_key(pg, TABLE, COLUMNS)

    with Writer(config.pg_dsn, touch_and_insert) as writer:
        eventually(lambda: writer.wrote_at_least(20), timeout=120, what="the writer's first transactions")
        # old state published by run 1: 50 keys move in one statement, half of them are updated again
        pg.execute(f"UPDATE {TABLE} SET id = id + {MOVED} WHERE id <= 50")
        pg.execute(f"UPDATE {TABLE} SET n = n + 7 WHERE id BETWEEN {MOVED + 1} AND {MOVED + 25}")
        # old state created in this same range
        pg.execute(f"INSERT INTO {TABLE} SELECT g, {BODY.replace('%s', 'g')}, 1 FROM generate_series(201, 220) g")
        pg.execute(f"UPDATE {TABLE} SET id = id + {MOVED} WHERE id BETWEEN 201 AND 220")
        moved_at = writer.transactions
        eventually(lambda: writer.wrote_at_least(moved_at + 20), timeout=120, what="writes after the key changes")
        _, report, _ = run_once(spark, config, toast_table, tmp_path, "toast-2", watermark_topic=watermark)

    assert report.clean, report.as_dict()  # the lake as of run 2's snapshot equals it; the writer went on
    assert moved_body_count(tmp_path) == 70

    # a second move of rows whose body the lake only has from run 2's carried-over values
    pg.execute(f"UPDATE {TABLE} SET id = id + {MOVED} WHERE id BETWEEN {MOVED + 1} AND {MOVED + 10}")
    _, report, _ = run_once(spark, config, toast_table, tmp_path, "toast-3", watermark_topic=watermark)
    assert report.clean, report.as_dict()
    assert lake_by_key(TableLake(tmp_path, TABLE).table, COLUMNS) == source_by_key(pg, TABLE, COLUMNS)
