"""Exactness on the real stack: keys the comparison cannot match, names Spark would misread, rows the hash
could confuse, and records the lake never received.

Three tables of their own, captured by a connector of their own (the demo tables stay untouched):

* ``public.exact_names``: a compound key and columns whose names hold a dot and a space;
* ``public.exact_hashes``: arrays and texts whose old text-form hash collided;
* ``public.exact_poison``: a table whose topic also receives a malformed record and an unknown op;
* ``public.exact_stages``: a table whose lake loses a change compaction had and is written by another
  writer, to tell where each difference arose.

Every expectation is checked against PostgreSQL read directly, not through the pipeline.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import Producer

from cdc_dev.stack import Stack, StackConfig
from cdc_dev.stack.config import MAX_MESSAGE_BYTES
from cdc_dev.stack.topics import read_topic
from cdc_reconcile.config import TableConfig, load_config
from cdc_reconcile.diff import EXTRA, MISSING, STALE
from cdc_reconcile.lake import TableLake
from cdc_reconcile.orchestration.alerts import CRITICAL, alert_message
from cdc_reconcile.phase import Phase
from cdc_reconcile.run import TableRun
from cdc_reconcile.source_snapshot import SnapshotError
from cdc_reconcile.suite import describe
from tests.support.lake import delta_rows, is_delta, spark_rows

from .conftest import eventually, own_connector, run_once, table_run, take_snapshot

pytestmark = pytest.mark.integration

PREFIX = "exact"
SLOT = "cdc_exact"
NAMES = "public.exact_names"
HASHES = "public.exact_hashes"
POISON = "public.exact_poison"
NULLABLE = "public.exact_nullable"
STAGED = "public.exact_stages"
CREATE = (
    'CREATE TABLE public.exact_names ("order.id" bigint, "line no" integer, "unit price" numeric(10, 2), '
    '"note text" text, "tags.list" text[], PRIMARY KEY ("order.id", "line no"))',
    "CREATE TABLE public.exact_hashes (id bigint PRIMARY KEY, tags text[], first text, second text)",
    "CREATE TABLE public.exact_poison (id bigint PRIMARY KEY, label text)",
    "CREATE TABLE public.exact_stages (id bigint PRIMARY KEY, label text)",
)
CAPTURED = (NAMES, HASHES, POISON, STAGED)


def watermark_topic() -> str:
    return f"{PREFIX}.{load_config().watermark_table}"


@pytest.fixture(scope="module")
def exact_connector(stack: Stack, config: StackConfig) -> Iterator[None]:
    with own_connector(stack, config, prefix=PREFIX, slot=SLOT, tables=CAPTURED, create=CREATE):
        yield


def validating_run(spark, config: StackConfig, table: TableConfig, lake: Path, run_id: str) -> TableRun:
    """The run object with a Great Expectations project, as the validate task builds it."""
    run = table_run(spark, config, table, lake, run_id)
    return TableRun(table, run_id, replace(run.settings, gx_root=str(lake / "gx")), spark=spark)


def lost_while_unpublished(pg: psycopg.Connection, table: str, *statements: str) -> None:
    """Run ``statements`` while ``table`` is out of the connector's publication: their changes never reach Kafka."""
    pg.execute(f"ALTER PUBLICATION {SLOT} DROP TABLE {table}")
    try:
        with pg.transaction():
            for statement in statements:
                pg.execute(statement)
    finally:
        pg.execute(f"ALTER PUBLICATION {SLOT} ADD TABLE {table}")


def names_in_lake(spark, lake: Path) -> dict[tuple[int, int], tuple]:
    """The published table, read by plain Spark (delta-rs reads a column-mapped table as nulls)."""
    table = spark_rows(spark, TableLake(lake, NAMES).table)
    picked = table.select(*(f"`{c}`" for c in ("order.id", "line no", "unit price", "note text", "tags.list")))
    return {(r[0], r[1]): (r[2], r[3], r[4]) for r in picked.collect()}


def names_in_source(pg: psycopg.Connection) -> dict[tuple[int, int], tuple]:
    found = pg.execute('SELECT "order.id", "line no", "unit price", "note text", "tags.list" FROM public.exact_names')
    return {(r[0], r[1]): (r[2], r[3], r[4]) for r in found.fetchall()}


@pytest.mark.slow  # about 6 minutes: `-m slow`; tests/unit/test_column_names.py folds, diffs and merges such names
def test_a_key_and_columns_named_with_a_dot_and_a_space_are_compared_and_repaired(
    spark, config, pg, exact_connector, tmp_path
):
    """Item 9: every step takes source column names as names (a dot is not a struct path)."""
    table = TableConfig(name=NAMES, key=("order.id", "line no"), topic_prefix=PREFIX)
    pg.execute(
        "INSERT INTO public.exact_names SELECT o, l, o * 1.25 + l, 'note ' || o || '.' || l, ARRAY['x.' || o, 'y z'] "
        "FROM generate_series(1, 10) o, generate_series(1, 2) l"
    )
    pg.execute('UPDATE public.exact_names SET "unit price" = "unit price" + 100 WHERE "order.id" <= 3')
    pg.execute('DELETE FROM public.exact_names WHERE "order.id" = 10')

    summary, report, _ = run_once(spark, config, table, tmp_path, "names-1", watermark_topic=watermark_topic())
    assert report.clean and summary["quarantined"] == 0, (summary, report.as_dict())
    assert names_in_lake(spark, tmp_path) == names_in_source(pg)
    outcome = validating_run(spark, config, table, tmp_path, "names-1").validate(Phase.BEFORE_REPAIR)
    assert outcome.success, describe(outcome)

    lost_while_unpublished(
        pg,
        NAMES,
        """UPDATE public.exact_names SET "note text" = 'changed' WHERE "order.id" = 1""",
        "INSERT INTO public.exact_names VALUES (11, 1, 1.5, 'lost', NULL), (11, 2, 2.5, 'lost', '{}')",
        'DELETE FROM public.exact_names WHERE "order.id" = 9',
    )
    _, report, _ = run_once(spark, config, table, tmp_path, "names-2", watermark_topic=watermark_topic())
    assert report.counts == {MISSING: 2, STALE: 2, EXTRA: 2}, report.as_dict()
    assert report.samples[MISSING] == [{"order.id": 11, "line no": 1}, {"order.id": 11, "line no": 2}]

    run = validating_run(spark, config, table, tmp_path, "names-2")
    assert not run.validate(Phase.BEFORE_REPAIR).success
    repaired = run.reconcile()
    assert repaired["findings"] == "validate's", "the findings kept under the dotted key are read back by name"
    assert repaired["repair_events"] == 6
    assert run.check()[0].clean
    repaired = run.validate(Phase.AFTER_REPAIR)
    assert repaired.success, describe(repaired)
    assert names_in_lake(spark, tmp_path) == names_in_source(pg)


def test_a_unique_index_on_a_nullable_column_is_refused_as_the_key(spark, config, pg, tmp_path):
    """Item 9: rows with a NULL key cannot be matched; the snapshot step refuses the key and names the fix."""
    pg.execute(f"DROP TABLE IF EXISTS {NULLABLE}")
    pg.execute(f"CREATE TABLE {NULLABLE} (code text UNIQUE, v integer)")
    try:
        pg.execute(f"INSERT INTO {NULLABLE} VALUES ('a', 1), (NULL, 2), (NULL, 3)")
        table = TableConfig(name=NULLABLE, key=("code",), topic_prefix=PREFIX)
        fix = 'ALTER TABLE "public"."exact_nullable" ALTER COLUMN "code" SET NOT NULL'
        with pytest.raises(SnapshotError, match=rf"{NULLABLE} has nullable column\(s\) \['code'\].*{fix}"):
            take_snapshot(spark, config, table, tmp_path, "nullable-1", partitions=1)
        assert not is_delta(TableLake(tmp_path, NULLABLE).snapshot)

        pg.execute(f"DELETE FROM {NULLABLE} WHERE code IS NULL")
        pg.execute(fix)
        assert take_snapshot(spark, config, table, tmp_path, "nullable-2", partitions=1).rows == 1
    finally:
        pg.execute(f"DROP TABLE IF EXISTS {NULLABLE}")


@pytest.mark.slow  # about 4 minutes: `-m slow`; tests/unit/test_row_hash.py holds the same collisions
def test_rows_whose_text_forms_collide_are_stale_and_repaired(spark, config, pg, exact_connector, tmp_path):
    """Item 11: an array's text form, a NULL element and a shifted separator no longer hash alike."""
    table = TableConfig(name=HASHES, key=("id",), topic_prefix=PREFIX)
    pg.execute(
        "INSERT INTO public.exact_hashes VALUES (1, ARRAY['a', 'b'], 'p', 'q'), (2, ARRAY[NULL]::text[], NULL, NULL), "
        "(3, NULL, E'x\\x1f', 'y'), (4, ARRAY['same'], 'same', 'same')"
    )
    _, report, _ = run_once(spark, config, table, tmp_path, "hashes-1", watermark_topic=watermark_topic())
    assert report.clean, report.as_dict()

    lost_while_unpublished(
        pg,
        HASHES,
        "UPDATE public.exact_hashes SET tags = ARRAY['a, b'] WHERE id = 1",
        "UPDATE public.exact_hashes SET tags = ARRAY['null'] WHERE id = 2",
        "UPDATE public.exact_hashes SET first = 'x', second = E'\\x1fy' WHERE id = 3",
    )
    _, report, _ = run_once(spark, config, table, tmp_path, "hashes-2", watermark_topic=watermark_topic())
    assert report.counts == {MISSING: 0, EXTRA: 0, STALE: 3}, report.as_dict()
    assert [s["id"] for s in report.samples[STALE]] == [1, 2, 3]

    run = table_run(spark, config, table, tmp_path, "hashes-2")
    assert run.reconcile()["repair_events"] == 3
    assert run.check()[0].clean
    lake = {r["id"]: (r["tags"], r["first"], r["second"]) for r in delta_rows(TableLake(tmp_path, HASHES).table)}
    source = {r[0]: (r[1], r[2], r[3]) for r in pg.execute("SELECT id, tags, first, second FROM public.exact_hashes")}
    assert lake == source
    assert lake[1][0] == ["a, b"] and lake[2][0] == ["null"] and lake[3][1:] == ("x", "\x1fy")


def write_poison(config: StackConfig) -> None:
    """A malformed record and a well-formed event with an unknown op, straight to the table's topic."""
    topic = f"{PREFIX}.{POISON}"
    sample = next(r for r in read_topic(config.bootstrap_servers, topic, timeout=60) if r.payload)
    unknown_op = copy.deepcopy(sample.value)
    unknown_op.get("payload", unknown_op)["op"] = "x"
    producer = Producer({"bootstrap.servers": config.bootstrap_servers, "message.max.bytes": MAX_MESSAGE_BYTES})
    producer.produce(topic, key=b'{"id": 99}', value=b'{"op": "c", "after": {"id": 99')
    producer.produce(topic, key=json.dumps(sample.key).encode(), value=json.dumps(unknown_op).encode())
    assert producer.flush(30) == 0, "the poison records were not delivered"


def test_quarantined_records_fail_the_suite_and_are_named_in_the_alert(spark, config, pg, exact_connector, tmp_path):
    """Item 14: the diff cannot see a record that never reached the lake; the suite counts and samples it."""
    table = TableConfig(name=POISON, key=("id",), topic_prefix=PREFIX)
    pg.execute("INSERT INTO public.exact_poison SELECT g, 'row ' || g FROM generate_series(1, 5) g")
    eventually(
        lambda: (
            sum(1 for r in read_topic(config.bootstrap_servers, f"{PREFIX}.{POISON}", timeout=30) if r.payload) >= 5
        ),
        timeout=180,
        what="the poison table's events in Kafka",
    )
    write_poison(config)

    summary, report, _ = run_once(spark, config, table, tmp_path, "poison-1", watermark_topic=watermark_topic())
    assert report.clean, report.as_dict()
    assert summary["quarantined"] == 2

    outcome = validating_run(spark, config, table, tmp_path, "poison-1").validate(Phase.BEFORE_REPAIR)
    assert not outcome.success
    assert outcome.counts["quarantined"] == 2
    [failed] = outcome.failed_checks
    assert (failed["dataset"], failed["check"], failed["unexpected_count"]) == (
        "quarantine",
        "no quarantined records",
        2,
    )
    samples = [json.loads(s) for s in failed["samples"]]
    assert all(isinstance(s["offset"], int) and s["partition"] == 0 for s in samples)
    reasons = sorted(s["reason"] for s in samples)
    assert reasons[0] == "unknown op 'x'" and reasons[1].startswith("value is not valid JSON"), reasons

    alert = alert_message(
        CRITICAL,
        dag_id="cdc_reconciliation",
        run_id="poison-1",
        task_id="confirm_repair",
        outcome={
            "table": POISON,
            "reason": "the suite still fails after repair",
            "found": outcome.counts,
            Phase.AFTER_REPAIR.value: outcome.as_dict(),
        },
    )
    assert alert["found"] == {"quarantined": 2}
    assert "found: quarantined 2" in alert["text"] and "no quarantined records: 2 unexpected" in alert["text"]


@pytest.mark.slow  # three runs (~5 minutes): `-m slow`; the DAG test of lost events checks source->topic in CI
def test_a_change_the_lake_lost_and_rows_another_writer_changed_are_named_by_their_stage(
    spark, config, pg, exact_connector, tmp_path
):
    """Issue 14 item 16: the lake's own faults are not blamed on the source.

    A change that reached Kafka but that the lake lost is ``topic->lake``; rows another writer changed
    in the published table after the run's commit are ``lake`` (the check of the fold alone passed
    them); both are repaired, and the table then equals PostgreSQL read directly.
    """
    table = TableConfig(name=STAGED, key=("id",), topic_prefix=PREFIX)
    table_lake = TableLake(tmp_path, STAGED)
    pg.execute("INSERT INTO public.exact_stages SELECT g, 'row ' || g FROM generate_series(1, 20) g")
    _, report, _ = run_once(spark, config, table, tmp_path, "stages-1", watermark_topic=watermark_topic())
    assert report.clean, report.as_dict()

    pg.execute("UPDATE public.exact_stages SET label = 'updated' WHERE id IN (1, 2)")
    run = table_run(spark, config, table, tmp_path, "stages-2")
    run.open()
    run.snapshot(partitions=2)
    run.seal(timeout=180, watermark_topic=watermark_topic())
    run.compact()
    # the run's changelog loses the two updates after compaction: Kafka and the events still hold them
    spark.sql(f"DELETE FROM delta.`{table_lake.changelog}` WHERE id IN (1, 2) AND op = 'u'")
    report, diff = run.check()
    diff.unpersist()
    assert (report.counts, report.stages) == ({MISSING: 0, STALE: 2, EXTRA: 0}, {"topic->lake": 2}), report.as_dict()
    run.reconcile()
    assert run.check()[0].clean

    # another writer removes one row and changes another in the published table
    spark.sql(f"DELETE FROM delta.`{table_lake.table}` WHERE id = 3")
    spark.sql(f"UPDATE delta.`{table_lake.table}` SET label = 'tampered' WHERE id = 4")
    _, report, _ = run_once(spark, config, table, tmp_path, "stages-3", watermark_topic=watermark_topic())
    assert (report.counts, report.stages) == ({MISSING: 1, STALE: 1, EXTRA: 0}, {"lake": 2}), report.as_dict()
    third = table_run(spark, config, table, tmp_path, "stages-3")
    assert third.reconcile()["repair_events"] == 2
    audit = {(json.loads(r["key"])["id"], r["kind"], r["stage"]) for r in delta_rows(table_lake.audit)}
    assert {(1, STALE, "topic->lake"), (2, STALE, "topic->lake"), (3, MISSING, "lake"), (4, STALE, "lake")} <= audit
    assert third.check()[0].clean
    lake = {r["id"]: r["label"] for r in delta_rows(table_lake.table)}
    assert lake == dict(pg.execute("SELECT id, label FROM public.exact_stages").fetchall())
