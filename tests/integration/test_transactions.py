"""Transaction completeness against the transaction topic's END records (issue 14 item 10).

The test's connector drops events on the way to Kafka, as a user's transformation would: Kafka
Connect's ``Filter`` with a ``HasHeaderKey`` predicate drops every record carrying Debezium's
``__debezium.oldkey`` header, which is the create half of a primary-key change. Two transactions are
cut while a writer keeps committing whole ones:

* one moves five keys: the lake lacks the five new keys, which the diff sees too;
* one moves a key whose new row a later transaction deletes: the lake ends equal to the source, so
  the diff sees nothing, and only the END record's count tells that the transaction did not arrive whole.

The counts the pipeline records are checked against what a plain consumer reads from both topics.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator

import psycopg
import pytest

from cdc_dev.stack import Stack, StackConfig
from cdc_reconcile.config import TableConfig, load_config
from cdc_reconcile.lake import TableLake, version_name
from cdc_reconcile.phase import Phase
from cdc_reconcile.run import TableRun
from tests.support.kafka import read_topic
from tests.support.lake import delta_rows
from tests.support.writer import Writer

from .conftest import eventually, own_connector, run_once, table_run

pytestmark = pytest.mark.integration

PREFIX = "txcut"
SLOT = "cdc_txcut"
TABLE = "public.tx_accounts"
CREATE = (f"CREATE TABLE {TABLE} (id bigint PRIMARY KEY, n integer NOT NULL)",)
DROP_KEY_MOVES = {
    "transforms": "dropmoved",
    "transforms.dropmoved.type": "org.apache.kafka.connect.transforms.Filter",
    "transforms.dropmoved.predicate": "moved",
    "predicates": "moved",
    "predicates.moved.type": "org.apache.kafka.connect.transforms.predicates.HasHeaderKey",
    "predicates.moved.name": "__debezium.oldkey",
}


@pytest.fixture(scope="module")
def cut_table(stack: Stack, config: StackConfig) -> Iterator[TableConfig]:
    with own_connector(stack, config, prefix=PREFIX, slot=SLOT, tables=(TABLE,), create=CREATE, extra=DROP_KEY_MOVES):
        yield TableConfig(name=TABLE, key=("id",), topic_prefix=PREFIX)


def update_and_insert(pg: psycopg.Connection, n: int) -> None:
    """A whole transaction of two events of the table: an update and an insert."""
    pg.execute(f"UPDATE {TABLE} SET n = n + 1 WHERE id = %s", (50 + n % 50,))
    pg.execute(f"INSERT INTO {TABLE} VALUES (%s, 0)", (10_000 + n,))


def committed_xid(pg: psycopg.Connection, *statements: str) -> int:
    """Run ``statements`` in one transaction; its 32-bit xid, as Debezium names it."""
    with pg.transaction():
        xid = pg.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()[0]
        for statement in statements:
            pg.execute(statement)
    return xid & 0xFFFF_FFFF


def topic_counts(config: StackConfig, xid: int) -> tuple[int, int]:
    """What a plain consumer reads of one transaction: its END's count for the table, its events that arrived."""
    records = read_topic(config.bootstrap_servers, f"{PREFIX}.transaction")
    ends = [r.payload for r in records if r.payload and r.payload.get("status") == "END"]
    [end] = [e for e in ends if e["id"].split(":")[0] == str(xid)]
    [expected] = [c["event_count"] for c in end["data_collections"] if c["data_collection"] == TABLE]
    events = [r.payload for r in read_topic(config.bootstrap_servers, f"{PREFIX}.{TABLE}") if r.payload]
    arrived = [e for e in events if (e.get("transaction") or {}).get("id", "").split(":")[0] == str(xid)]
    return expected, len(arrived)


def test_transactions_cut_on_the_way_to_kafka_fail_the_suite_even_where_the_diff_cannot_see_them(
    spark, config, pg, cut_table, tmp_path
):
    pg.execute(f"INSERT INTO {TABLE} SELECT g, 0 FROM generate_series(1, 100) g")
    watermark = f"{PREFIX}.{load_config().watermark_table}"
    _, report, _ = run_once(spark, config, cut_table, tmp_path, "txcut-1", watermark_topic=watermark)
    assert report.clean, report.as_dict()
    lake = TableLake(tmp_path, TABLE)
    first = delta_rows(lake.transactions, run=version_name("txcut-1"))
    assert first and {r["status"] for r in first} == {"complete"}, first

    with Writer(config.pg_dsn, update_and_insert) as writer:
        eventually(lambda: writer.wrote_at_least(20), timeout=120, what="the writer's first transactions")
        moved = committed_xid(pg, f"UPDATE {TABLE} SET id = id + 1000 WHERE id BETWEEN 1 AND 5")
        hidden = committed_xid(pg, f"UPDATE {TABLE} SET id = 2006 WHERE id = 6")
        committed_xid(pg, f"DELETE FROM {TABLE} WHERE id = 2006")
        at = writer.transactions
        eventually(lambda: writer.wrote_at_least(at + 20), timeout=120, what="writes after the cut transactions")
        _, report, _ = run_once(
            spark, config, cut_table, tmp_path, "txcut-2", watermark_topic=watermark, whole_transactions=False
        )

    # the diff sees the five moved keys that never arrived, not the one a later delete hid
    assert report.counts == {"missing": 5, "extra": 0, "stale": 0}, report.as_dict()
    checked = delta_rows(lake.transactions, run=version_name("txcut-2"))
    failed = {r["txid"]: (r["expected"], r["arrived"], r["status"]) for r in checked if r["status"] != "complete"}
    assert failed == {moved: (10, 5, "incomplete"), hidden: (2, 1, "incomplete")}
    assert topic_counts(config, moved) == (10, 5)
    assert topic_counts(config, hidden) == (2, 1)
    assert sum(r["status"] == "complete" for r in checked) >= 20, "the writer's whole transactions are checked too"

    run = table_run(spark, config, cut_table, tmp_path, "txcut-2")
    run = TableRun(cut_table, "txcut-2", dataclasses.replace(run.settings, gx_root=str(tmp_path / "gx")), spark=spark)
    outcome = run.validate(Phase.BEFORE_REPAIR)
    assert outcome.counts["incomplete_transactions"] == 2
    [cut] = [c for c in outcome.failed_checks if c["dataset"] == "transactions"]
    assert cut["unexpected_count"] == 2
    assert {json.loads(s)["txid"] for s in cut["samples"]} == {moved, hidden}
