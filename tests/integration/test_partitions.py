"""A topic of several partitions, and partitions added between runs and inside a run, under writes.

Debezium's producer routes a key to ``hash(key) % partitions``: a key's changes stay in one partition
until partitions are added, and then its later changes go to another partition, where offsets start
again from small numbers. The table's topic starts with 3 partitions; after the first run it grows to
5 (3 -> 5 moves keys between old partitions too, not only into new ones) while a writer updates,
inserts and deletes rows. The run over the range that spans the change must find nothing to repair,
and the lake must equal PostgreSQL read directly. A plain consumer shows that the range holds keys
whose changes sit in two partitions: without them the test would prove nothing. Then the topic grows
to 7 after a run opened its range and before its snapshot: the seal takes the new partitions in, so
that run too finds nothing to repair. Last, a connector restart that redelivers changes made before
partitions were added: its copies go to the keys' new partitions, some lower-numbered than the
originals, behind the keys' newer changes there; the run names the copies, not the originals, as the
redeliveries and finds nothing to repair.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator

import psycopg
import pytest
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from cdc_dev.stack import Stack, StackConfig
from cdc_dev.stack.topics import Record, emit_again, read_topic
from cdc_reconcile.config import TableConfig, load_config
from cdc_reconcile.lake import TableLake, version_name
from tests.support.kafka import consumer_end_offsets, read_range
from tests.support.lake import delta_rows
from tests.support.lake import rows_by_key as lake_by_key
from tests.support.source import rows_by_key as source_by_key
from tests.support.writer import Writer

from .conftest import eventually, own_connector, run_once

pytestmark = pytest.mark.integration

PREFIX = "parts"
SLOT = "cdc_parts"
TABLE = "public.part_items"
COLUMNS = ["id", "label", "qty"]  # the key first
TOPIC = f"{PREFIX}.{TABLE}"
ROWS = 600
CREATE = (f"CREATE TABLE {TABLE} (id bigint PRIMARY KEY, label text NOT NULL, qty integer NOT NULL)",)
# the connector's producer learns of added partitions at its next metadata refresh (5 minutes by default)
PRODUCER = {"producer.override.metadata.max.age.ms": "1000"}


@pytest.fixture(scope="module")
def partitioned_table(stack: Stack, config: StackConfig) -> Iterator[TableConfig]:
    admin = AdminClient({"bootstrap.servers": config.bootstrap_servers})
    if TOPIC in admin.list_topics(timeout=30).topics:
        admin.delete_topics([TOPIC])[TOPIC].result(timeout=60)
        eventually(lambda: TOPIC not in admin.list_topics(timeout=30).topics, timeout=60, what=f"{TOPIC} deleted")
    eventually(lambda: _created(admin), timeout=60, what=f"{TOPIC} created with 3 partitions")
    with own_connector(stack, config, prefix=PREFIX, slot=SLOT, tables=(TABLE,), create=CREATE, extra=PRODUCER):
        yield TableConfig(name=TABLE, key=("id",), topic_prefix=PREFIX)


def _created(admin: AdminClient) -> bool:
    """Create the topic; False while the broker still finishes deleting an earlier one."""
    try:
        admin.create_topics([NewTopic(TOPIC, 3, 1)])[TOPIC].result(timeout=30)
    except Exception as exc:  # TOPIC_ALREADY_EXISTS while an earlier deletion finishes: try again
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise
        return False
    return True


def change_rows(pg: psycopg.Connection, n: int) -> None:
    """An update on a rotating key; every 7th transaction an insert, every 11th a delete."""
    pg.execute(f"UPDATE {TABLE} SET qty = qty + 1, label = %s WHERE id = %s", (f"u{n}", n * 37 % ROWS + 1))
    if n % 7 == 0:
        pg.execute(f"INSERT INTO {TABLE} VALUES (%s, %s, 0)", (10_000 + n, f"new {n}"))
    if n % 11 == 0:
        pg.execute(f"DELETE FROM {TABLE} WHERE id = %s", (n * 13 % ROWS + 1,))


def later_changes(pg: psycopg.Connection, n: int) -> None:
    """:func:`change_rows` for a second writer: its inserts take keys the first one never used."""
    change_rows(pg, n + 100_000)


def keys_in_two_partitions(bootstrap: str, start: dict[int, int], end: dict[int, int]) -> set[str]:
    """Keys of the range with changes in more than one partition, counted with a plain consumer."""
    partitions: dict[str, set[int]] = defaultdict(set)
    for record in read_range(bootstrap, TOPIC, start, end):
        if record.key is not None and record.payload is not None:
            partitions[json.dumps(record.key_payload, sort_keys=True)].add(record.partition)
    return {key for key, seen in partitions.items() if len(seen) > 1}


def test_partitions_added_between_runs_and_inside_a_run_under_load_leave_nothing_to_repair(
    spark, config, pg, partitioned_table, tmp_path
):
    pg.execute(f"INSERT INTO {TABLE} SELECT g, 'row ' || g, g % 5 FROM generate_series(1, {ROWS}) g")
    watermark = f"{PREFIX}.{load_config().watermark_table}"
    _, report, first = run_once(spark, config, partitioned_table, tmp_path, "parts-1", watermark_topic=watermark)
    assert report.clean, report.as_dict()
    assert lake_by_key(TableLake(tmp_path, TABLE).table, COLUMNS) == source_by_key(pg, TABLE, COLUMNS)
    assert len(first.end) == 3, first

    admin = AdminClient({"bootstrap.servers": config.bootstrap_servers})
    with Writer(config.pg_dsn, change_rows) as writer:
        eventually(lambda: writer.wrote_at_least(100), timeout=120, what="changes before the partitions are added")
        admin.create_partitions([NewPartitions(TOPIC, 5)])[TOPIC].result(timeout=60)
        added_at = writer.transactions
        eventually(
            lambda: any(end > 0 for p, end in consumer_end_offsets(config.bootstrap_servers, TOPIC).items() if p >= 3),
            timeout=120,
            what="the connector writing to the added partitions",
        )
        eventually(lambda: writer.wrote_at_least(added_at + 200), timeout=120, what="changes after the add")
        _, report, second = run_once(spark, config, partitioned_table, tmp_path, "parts-2", watermark_topic=watermark)
        assert writer.wrote_at_least(added_at + 201)

    moved = keys_in_two_partitions(config.bootstrap_servers, dict(first.end), dict(second.end))
    assert moved, "no key of the range has changes in two partitions: the test proves nothing"
    assert len(second.end) == 5, second
    assert report.clean, (len(moved), report.as_dict())

    with Writer(config.pg_dsn, later_changes) as writer:

        def grow_inside_the_range() -> None:
            admin.create_partitions([NewPartitions(TOPIC, 7)])[TOPIC].result(timeout=60)
            eventually(
                lambda: any(
                    end > 0 for p, end in consumer_end_offsets(config.bootstrap_servers, TOPIC).items() if p >= 5
                ),
                timeout=120,
                what="the connector writing to the partitions added inside the range",
            )

        eventually(lambda: writer.wrote_at_least(50), timeout=120, what="changes before the range opens")
        _, report, third = run_once(
            spark,
            config,
            partitioned_table,
            tmp_path,
            "parts-3",
            watermark_topic=watermark,
            after_open=grow_inside_the_range,
        )
    assert len(third.end) == 7 and all(third.start[p] == 0 for p in (5, 6)), third
    assert report.clean, report.as_dict()
    _, report, _ = run_once(spark, config, partitioned_table, tmp_path, "parts-4", watermark_topic=watermark)
    assert report.clean, report.as_dict()
    assert lake_by_key(TableLake(tmp_path, TABLE).table, COLUMNS) == source_by_key(pg, TABLE, COLUMNS)


REDELIVERED = 40  # keys 1..40: the restart's copies


def labelled(bootstrap: str, prefix: str) -> dict[int, Record] | None:
    """Per key, its change record whose new label starts with ``prefix``, once all of keys 1..40 have one."""
    found = {}
    for record in read_topic(bootstrap, TOPIC):
        after = (record.payload or {}).get("after") or {}
        if str(after.get("label", "")).startswith(prefix):
            found[after["id"]] = record
    return found if len(found) == REDELIVERED else None


def other_keys_change(pg: psycopg.Connection, n: int) -> None:
    """Updates of keys above 40 only, so the redelivered keys change only when the test says."""
    pg.execute(f"UPDATE {TABLE} SET qty = qty + 1 WHERE id = %s", (REDELIVERED + 1 + n % (ROWS - REDELIVERED),))


def test_a_restart_redelivering_into_lower_numbered_partitions_after_the_topic_grew_repairs_nothing(
    spark, config, pg, partitioned_table, tmp_path
):
    bootstrap = config.bootstrap_servers
    rows = f"SELECT g, 'row ' || g, g % 5 FROM generate_series(1, {ROWS}) g"
    pg.execute(f"INSERT INTO {TABLE} {rows} ON CONFLICT (id) DO NOTHING")
    watermark = f"{PREFIX}.{load_config().watermark_table}"
    _, report, first = run_once(spark, config, partitioned_table, tmp_path, "moved-1", watermark_topic=watermark)
    assert report.clean, report.as_dict()
    grown = len(first.end) + 2

    pg.execute(f"UPDATE {TABLE} SET label = 'before ' || id WHERE id <= {REDELIVERED}")
    before = eventually(
        lambda: labelled(bootstrap, "before "), timeout=120, what="the changes before the growth", interval=2
    )
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(TOPIC, grown)])[TOPIC].result(timeout=60)
    with Writer(config.pg_dsn, other_keys_change):
        eventually(
            lambda: any(end > 0 for p, end in consumer_end_offsets(bootstrap, TOPIC).items() if p >= grown - 2),
            timeout=120,
            what="the connector writing to the added partitions",
        )
    pg.execute(f"UPDATE {TABLE} SET label = 'after ' || id WHERE id <= {REDELIVERED}")
    after = eventually(
        lambda: labelled(bootstrap, "after "), timeout=120, what="the changes after the growth", interval=2
    )
    lower = [key for key in before if after[key].partition < before[key].partition]
    assert lower, "no redelivered key moved to a lower-numbered partition: the test proves nothing"
    copies = emit_again(bootstrap, TOPIC, [(before[key], after[key].partition) for key in sorted(before)])

    _, report, _ = run_once(spark, config, partitioned_table, tmp_path, "moved-2", watermark_topic=watermark)
    assert report.clean, (lower, report.as_dict())
    changelog = delta_rows(
        TableLake(tmp_path, TABLE).changelog,
        run=version_name("moved-2"),
        columns=["partition", "offset", "duplicate_class"],
    )
    named = {(row["partition"], row["offset"]) for row in changelog if row["duplicate_class"] == "redelivery"}
    assert named == set(copies), (sorted(named), sorted(copies))
    lake = lake_by_key(TableLake(tmp_path, TABLE).table, COLUMNS)
    assert lake == source_by_key(pg, TABLE, COLUMNS)
    assert all(lake[key][0] == f"after {key}" for key in lower), {key: lake[key] for key in lower}
