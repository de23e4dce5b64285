"""Offset checkpoints against the real stack: ranges in PostgreSQL, the watermark through Debezium and Kafka."""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from psycopg.conninfo import make_conninfo

from cdc_dev.stack.postgres import SUPERUSER
from cdc_reconcile import kafka_offsets, sealing, state_store
from cdc_reconcile.range_continuity import LaterRunOpened, RangeNotCompacted
from tests.support.kafka import consumer_end_offsets, read_range
from tests.support.polling import eventually

pytestmark = pytest.mark.integration

WATERMARK_TABLE = "public.cdc_watermark"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def state(config) -> Iterator[psycopg.Connection]:
    with state_store.connect(config.state_dsn) as conn:
        state_store.ensure_state_schema(conn)
        yield conn


def created_ids(records) -> set[int]:
    return {r.payload["after"]["id"] for r in records if r.payload and r.payload.get("op") == "c"}


def insert_customers(pg: psycopg.Connection, marker: str, count: int) -> list[int]:
    with pg.transaction():
        rows = pg.execute(
            "INSERT INTO public.customers (name) SELECT %s FROM generate_series(1, %s) RETURNING id", (marker, count)
        ).fetchall()
    return [row[0] for row in rows]


def customers_partitions(config, pg) -> list[int]:
    """Partitions of the customers topic; the topic exists once Debezium emitted its first event."""
    insert_customers(pg, unique("topic-bootstrap"), 1)
    return eventually(
        lambda: _partitions_or_none(config.bootstrap_servers, config.topic_for("public.customers")),
        timeout=60,
        what="topic cdc.public.customers exists",
    )


def compacted(state: psycopg.Connection, run: str, table: str) -> None:
    """What compact_cdc records once it finished with the run's sealed range."""
    offsets = state_store.get_range(state, run, table).as_spark_json()
    assert state_store.record_compaction(state, run, table, offsets)


def _partitions_or_none(bootstrap: str, topic: str) -> list[int] | None:
    try:
        return kafka_offsets.list_partitions(bootstrap, topic, timeout=5)
    except kafka_offsets.TopicNotFound:
        return None


# -- ranges in PostgreSQL --------------------------------------------------------------------------------------


def test_state_schema_is_idempotent(state):
    state_store.ensure_state_schema(state)
    state_store.ensure_state_schema(state)
    tables = {
        row[0]
        for row in state.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'cdc_reconcile'"
        ).fetchall()
    }
    assert {"offset_ranges", "runs", "snapshots", "expectation_results", "repair_audit"} <= tables


def test_first_run_opens_at_zero_and_next_run_at_previous_compacted_end(state):
    table, topic = unique("public.t"), "cdc.public.customers"
    first, second, third = unique("run"), unique("run"), unique("run")

    assert state_store.open_range(state, first, table, topic, [0, 1]) == {0: 0, 1: 0}
    assert state_store.get_range(state, first, table).sealed is False
    state_store.seal_range(state, first, table, {0: 10, 1: 7}, watermark_id=1)
    compacted(state, first, table)

    assert state_store.open_range(state, second, table, topic, [1, 0]) == {0: 10, 1: 7}
    # An unsealed run does not move the next run's start: it opens at the last compacted end.
    assert state_store.open_range(state, third, table, topic, [0, 1]) == {0: 10, 1: 7}
    state_store.seal_range(state, second, table, {0: 15, 1: 7}, watermark_id=2)
    compacted(state, second, table)
    assert state_store.open_range(state, unique("run"), table, topic, [0, 1, 2]) == {0: 15, 1: 7, 2: 0}

    # Another topic for the same table (a changed prefix) does not inherit offsets.
    assert state_store.open_range(state, unique("run"), table, "other.prefix.topic", [0]) == {0: 0}
    status = state.execute("SELECT status FROM cdc_reconcile.runs WHERE run_id = %s", (first,)).fetchone()
    assert status == ("running",)


def test_reopening_the_same_run_returns_its_stored_range(state):
    """A cleared checkpoint task must read the offsets it read before, even after later runs sealed."""
    table, topic = unique("public.t"), "cdc.public.customers"
    earlier, run, later = unique("run"), unique("run"), unique("run")
    state_store.open_range(state, earlier, table, topic, [0])
    state_store.seal_range(state, earlier, table, {0: 40}, watermark_id=1)
    compacted(state, earlier, table)

    opened = state_store.open_range(state, run, table, topic, [0])
    assert opened == {0: 40}
    state_store.open_range(state, later, table, topic, [0])
    state_store.seal_range(state, later, table, {0: 99}, watermark_id=2)

    assert state_store.open_range(state, run, table, topic, [0]) == opened
    assert state_store.open_range(state, run, table, topic, [0, 1]) == opened
    count = state.execute(
        "SELECT count(*) FROM cdc_reconcile.offset_ranges WHERE run_id = %s AND table_name = %s", (run, table)
    ).fetchone()[0]
    assert count == 1


def test_seal_is_idempotent_and_refuses_other_values(state):
    table, topic, run = unique("public.t"), "cdc.public.customers", unique("run")
    with pytest.raises(state_store.RangeNotOpen, match="open_range"):
        state_store.seal_range(state, run, table, {0: 1}, watermark_id=1)
    state_store.open_range(state, run, table, topic, [0, 1])
    with pytest.raises(ValueError, match="partitions"):
        state_store.seal_range(state, run, table, {0: 5}, watermark_id=1)

    sealed = state_store.seal_range(state, run, table, {0: 5, 1: 3}, watermark_id=7)
    assert (sealed.end, sealed.watermark_id) == ({0: 5, 1: 3}, 7)
    again = state_store.seal_range(state, run, table, {0: 5, 1: 3}, watermark_id=7)
    assert again == sealed  # same sealed_at: nothing was written

    with pytest.raises(state_store.RangeConflict, match="already sealed"):
        state_store.seal_range(state, run, table, {0: 6, 1: 3}, watermark_id=8)
    assert state_store.get_range(state, run, table).end == {0: 5, 1: 3}
    resealed = state_store.seal_range(state, run, table, {0: 6, 1: 3}, watermark_id=8, force=True)
    assert (resealed.end, resealed.watermark_id) == ({0: 6, 1: 3}, 8)
    compacted(state, run, table)

    later = unique("run")
    state_store.open_range(state, later, table, topic, [0, 1])
    with pytest.raises(ValueError, match="below start"):
        state_store.seal_range(state, later, table, {0: 2, 1: 3}, watermark_id=9)


def test_partitions_added_after_the_open_join_the_range_from_offset_zero(state):
    table, topic, run, following = unique("public.t"), "cdc.public.customers", unique("run"), unique("run")
    state_store.open_range(state, run, table, topic, [0, 1])
    sealed = state_store.seal_range(state, run, table, {0: 9, 1: 4, 2: 6, 3: 0}, watermark_id=1)
    assert (sealed.start, sealed.end) == ({0: 0, 1: 0, 2: 0, 3: 0}, {0: 9, 1: 4, 2: 6, 3: 0})
    assert state_store.seal_range(state, run, table, {0: 9, 1: 4, 2: 6, 3: 0}, watermark_id=1) == sealed
    compacted(state, run, table)
    assert state_store.open_range(state, following, table, topic, [0, 1, 2, 3]) == {0: 9, 1: 4, 2: 6, 3: 0}


def test_a_range_never_compacted_stops_the_next_run_until_its_compaction_finishes(state):
    table, topic = unique("public.t"), "cdc.public.customers"
    done, failed, following = unique("run"), unique("run"), unique("run")
    state_store.open_range(state, done, table, topic, [0, 1])
    state_store.seal_range(state, done, table, {0: 10, 1: 4}, watermark_id=1)
    compacted(state, done, table)
    assert state_store.open_range(state, failed, table, topic, [0, 1]) == {0: 10, 1: 4}
    state_store.seal_range(state, failed, table, {0: 25, 1: 9}, watermark_id=2)

    with pytest.raises(RangeNotCompacted, match=re.escape(repr(failed))) as refused:
        state_store.open_range(state, following, table, topic, [0, 1])
    assert "compact_cdc" in str(refused.value) and "full rescan" in str(refused.value)
    assert state_store.get_range(state, following, table) is None
    # a full rescan reads the whole topic, so it opens anyway
    rescan = unique("run")
    assert state_store.open_range(state, rescan, table, topic, [0, 1], start_offsets={0: 2, 1: 0}) == {0: 2, 1: 0}

    # offsets other than the sealed range (given by hand) do not make it compacted
    by_hand = (json.dumps({topic: {"0": 10, "1": 4}}), json.dumps({topic: {"0": 12, "1": 4}}))
    assert not state_store.record_compaction(state, failed, table, by_hand)
    assert not state_store.get_range(state, failed, table).compacted
    compacted(state, failed, table)
    assert state_store.open_range(state, following, table, topic, [0, 1]) == {0: 25, 1: 9}


def test_a_re_seal_clears_the_compaction_and_never_overlaps_a_later_run(state):
    table, topic = unique("public.t"), "cdc.public.customers"
    run, later = unique("run"), unique("run")
    state_store.open_range(state, run, table, topic, [0])
    state_store.seal_range(state, run, table, {0: 10}, watermark_id=1, watermark_txid=501)
    compacted(state, run, table)
    assert state_store.get_range(state, run, table).watermark_txid == 501

    resealed = state_store.seal_range(state, run, table, {0: 14}, watermark_id=2, watermark_txid=502, force=True)
    assert (resealed.end, resealed.watermark_txid, resealed.compacted) == ({0: 14}, 502, False)
    compacted(state, run, table)
    assert state_store.runs_opened_after(state, run, table) == []
    assert state_store.open_range(state, later, table, topic, [0]) == {0: 14}
    assert state_store.runs_opened_after(state, run, table) == [later]
    with pytest.raises(LaterRunOpened, match=re.escape(repr(later))):
        state_store.seal_range(state, run, table, {0: 20}, watermark_id=3, watermark_txid=503, force=True)
    assert state_store.get_range(state, run, table).end == {0: 14}


def test_the_migration_counts_ranges_sealed_before_it_as_compacted(config):
    """A state database of the previous schema: its sealed ranges keep being opened after."""
    database = unique("migration").replace("-", "_")
    superuser = f"host={config.host} port={config.pg_port} dbname=postgres user={SUPERUSER}"
    with psycopg.connect(superuser, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {database} OWNER {config.pg_user}")
    try:
        with state_store.connect(make_conninfo(config.pg_dsn, dbname=database)) as conn:
            conn.execute(PREVIOUS_OFFSET_RANGES)
            conn.execute(
                "INSERT INTO cdc_reconcile.offset_ranges (run_id, table_name, topic, partition, start_offset, "
                "end_offset, sealed_at) VALUES ('old', 'public.t', 'cdc.public.t', 0, 0, 12, now()), "
                "('open', 'public.t', 'cdc.public.t', 1, 0, NULL, NULL)"
            )
            state_store.ensure_state_schema(conn)
            state_store.ensure_state_schema(conn)
            rows = conn.execute(
                "SELECT run_id, compacted_at = sealed_at, watermark_txid FROM cdc_reconcile.offset_ranges "
                "ORDER BY run_id"
            ).fetchall()
            assert rows == [("old", True, None), ("open", None, None)]
            assert state_store.open_range(conn, "next", "public.t", "cdc.public.t", [0]) == {0: 12}
    finally:
        with psycopg.connect(superuser, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {database} WITH (FORCE)")


PREVIOUS_OFFSET_RANGES = """
CREATE SCHEMA cdc_reconcile;
CREATE TABLE cdc_reconcile.offset_ranges (
    run_id        text        NOT NULL,
    table_name    text        NOT NULL,
    topic         text        NOT NULL,
    partition     integer     NOT NULL CHECK (partition >= 0),
    start_offset  bigint      NOT NULL CHECK (start_offset >= 0),
    end_offset    bigint,
    opened_at     timestamptz NOT NULL DEFAULT now(),
    sealed_at     timestamptz,
    watermark_id  bigint,
    PRIMARY KEY (run_id, table_name, partition),
    CHECK (end_offset IS NULL OR end_offset >= start_offset),
    CHECK ((end_offset IS NULL) = (sealed_at IS NULL))
);
"""


def test_range_as_spark_offsets_json(state):
    table, topic, run = unique("public.t"), "cdc.public.customers", unique("run")
    assert state_store.get_range(state, run, table) is None
    state_store.open_range(state, run, table, topic, [1, 0])
    with pytest.raises(state_store.RangeNotOpen, match="not sealed"):
        state_store.get_range(state, run, table).as_spark_json()
    state_store.seal_range(state, run, table, {0: 12, 1: 4}, watermark_id=3)
    starting, ending = state_store.get_range(state, run, table).as_spark_json()
    assert json.loads(starting) == {topic: {"0": 0, "1": 0}}
    assert json.loads(ending) == {topic: {"0": 12, "1": 4}}


def test_concurrent_open_range_creates_one_range(config, state):
    table, topic = unique("public.t"), "cdc.public.customers"
    previous = unique("run")
    state_store.open_range(state, previous, table, topic, [0, 1, 2])
    state_store.seal_range(state, previous, table, {0: 3, 1: 5, 2: 8}, watermark_id=1)
    compacted(state, previous, table)
    threads = 4

    for _ in range(3):
        run = unique("run")
        barrier = threading.Barrier(threads)

        def opener(run: str = run, barrier: threading.Barrier = barrier) -> dict[int, int]:
            with state_store.connect(config.state_dsn) as conn:
                barrier.wait(timeout=30)
                return state_store.open_range(conn, run, table, topic, [0, 1, 2])

        with ThreadPoolExecutor(threads) as pool:
            results = [f.result(timeout=60) for f in [pool.submit(opener) for _ in range(threads)]]
        assert results == [{0: 3, 1: 5, 2: 8}] * threads
        rows = state.execute(
            "SELECT partition, start_offset FROM cdc_reconcile.offset_ranges WHERE run_id = %s AND table_name = %s "
            "ORDER BY partition",
            (run, table),
        ).fetchall()
        assert rows == [(0, 3), (1, 5), (2, 8)]


def test_record_snapshot_upserts(state):
    run, table = unique("run"), unique("public.t")
    state_store.record_snapshot(
        state, run, table, {"snapshot": "100:120:103,110", "wal_lsn": "0/16B3748", "row_count": 5}
    )
    state_store.record_snapshot(
        state, run, table, {"xmin": 130, "xmax": 140, "xip": [135], "snapshot_id": "00000003-0000001B-1"}
    )
    snapshot = state_store.get_snapshot(state, run, table)
    assert {k: snapshot[k] for k in ("xmin", "xmax", "xip", "snapshot_id", "wal_lsn", "row_count")} == {
        "xmin": 130,
        "xmax": 140,
        "xip": [135],
        "snapshot_id": "00000003-0000001B-1",
        "wal_lsn": None,
        "row_count": None,
    }
    count = state.execute(
        "SELECT count(*) FROM cdc_reconcile.snapshots WHERE run_id = %s AND table_name = %s", (run, table)
    ).fetchone()[0]
    assert count == 1
    with pytest.raises(ValueError, match="inconsistent"):
        state_store.record_snapshot(state, run, table, {"xmin": 10, "xmax": 20, "xip": [25]})
    with pytest.raises(ValueError, match="unknown fields"):
        state_store.record_snapshot(state, run, table, {"xmin": 1, "xmax": 2, "xmin_typo": 3})


# -- Kafka ------------------------------------------------------------------------------------------------------


def test_end_offsets_are_the_last_stable_offset_and_wait_for_open_transactions(config):
    bootstrap = config.bootstrap_servers
    topic = unique("checkpoints-lso")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": topic, "log_level": 0})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, json.dumps(f"committed-{i}").encode())
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(2):
        producer.produce(topic, json.dumps(f"later-{i}").encode())
    producer.flush(30)

    # offsets 0-2 committed records, 3 their commit marker, 4-5 records of the open transaction
    eventually(lambda: kafka_offsets.last_stable_offsets(bootstrap, topic, [0]) == {0: 4}, timeout=30, what="LSO at 4")
    assert kafka_offsets.log_end_offsets(bootstrap, topic, [0]) == {0: 6}
    assert consumer_end_offsets(bootstrap, topic) == {0: 4}
    began = time.monotonic()
    with pytest.raises(sealing.SealTimeout, match=topic) as raised:
        sealing.end_offsets(bootstrap, topic, [0], timeout=5)
    assert "stays open" in str(raised.value)
    assert time.monotonic() - began < 60, "the wait must give up near its timeout, not hang"

    producer.commit_transaction(30)
    assert sealing.end_offsets(bootstrap, topic, [0], timeout=30) == {0: 7}
    values = [r.value for r in read_range(bootstrap, topic, {0: 0}, {0: 7})]
    assert values == ["committed-0", "committed-1", "committed-2", "later-0", "later-1"]


def test_sealed_range_holds_every_inserted_row(config, state, pg):
    """Burst, watermark, wait, end offsets: [start, end) read_committed holds every row PostgreSQL has."""
    bootstrap, topic = config.bootstrap_servers, config.topic_for("public.customers")
    watermark_topic = config.topic_for(WATERMARK_TABLE)
    table = unique("public.customers")
    partitions = customers_partitions(config, pg)
    previous = unique("run")
    state_store.open_range(state, previous, table, topic, partitions)
    state_store.seal_range(state, previous, table, sealing.end_offsets(bootstrap, topic, partitions, timeout=60), None)
    compacted(state, previous, table)

    run, marker = unique("run"), unique("burst")
    start = state_store.open_range(state, run, table, topic, partitions)
    for _ in range(20):
        insert_customers(pg, marker, 25)
    inserted = {row[0] for row in pg.execute("SELECT id FROM public.customers WHERE name = %s", (marker,))}
    assert len(inserted) == 500

    watermark_id, txid = sealing.write_watermark(pg, run, WATERMARK_TABLE)
    assert pg.execute("SELECT run_id FROM public.cdc_watermark WHERE id = %s", (watermark_id,)).fetchone() == (run,)
    assert txid > 0
    sealing.wait_for_watermark(bootstrap, watermark_topic, watermark_id, timeout=120)
    ends = sealing.end_offsets(bootstrap, topic, partitions, timeout=60)
    sealed = state_store.seal_range(state, run, table, ends, watermark_id)
    assert sealed.start == start and sealed.end == ends and sealed.watermark_id == watermark_id

    records = read_range(bootstrap, topic, start, ends)
    missing = inserted - created_ids(records)
    before = read_range(bootstrap, topic, dict.fromkeys(partitions, 0), start)
    assert not inserted & created_ids(before), "rows inserted after the range opened lie before its start"
    assert not missing, f"{len(missing)} inserted rows not in the sealed range, e.g. {sorted(missing)[:5]}"


def test_seal_offsets_covers_the_snapshot_while_writers_continue(config, state, pg):
    """DESIGN.md section 5: every transaction the snapshot saw is in the sealed range, under concurrent writes."""
    bootstrap, topic = config.bootstrap_servers, config.topic_for("public.customers")
    watermark_topic = config.topic_for(WATERMARK_TABLE)
    table = unique("public.customers")
    partitions = customers_partitions(config, pg)
    previous = unique("run")
    state_store.open_range(state, previous, table, topic, partitions)
    seal = dict(
        kafka=bootstrap,
        table=table,
        watermark_table=WATERMARK_TABLE,
        watermark_topic=watermark_topic,
        timeout=120,
        source=pg,
    )
    sealing.seal_offsets(state, run_id=previous, **seal)
    compacted(state, previous, table)

    run, marker = unique("run"), unique("writer")
    start = state_store.open_range(state, run, table, topic, partitions)
    stop, written = threading.Event(), []

    def writer() -> None:
        with psycopg.connect(config.pg_dsn, autocommit=True) as conn:
            n = 0
            while not stop.is_set():
                written.extend(insert_customers(conn, marker, 1 + n % 3))
                n += 1

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        eventually(lambda: len(written) >= 300, timeout=60, what="writer inserted 300 rows")
        with psycopg.connect(config.pg_dsn) as snap:
            snap.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            with snap.transaction():
                text, lsn = snap.execute("SELECT pg_current_snapshot()::text, pg_current_wal_lsn()::text").fetchone()
                seen = {r[0] for r in snap.execute("SELECT id FROM public.customers WHERE name = %s", (marker,))}
        state_store.record_snapshot(state, run, table, {"snapshot": text, "wal_lsn": lsn, "row_count": len(seen)})
        sealed = sealing.seal_offsets(state, run_id=run, **seal)
        eventually(lambda: len(written) >= len(seen) + 50, timeout=60, what="writer kept writing after the seal")
    finally:
        stop.set()
        thread.join(timeout=30)

    assert sealed.start == start and sealed.sealed
    assert sealing.seal_offsets(state, run_id=run, **seal) == sealed  # a cleared seal task keeps the range
    records = read_range(bootstrap, topic, sealed.start, sealed.end)
    missing = seen - created_ids(records)
    assert len(seen) >= 300
    assert not missing, f"{len(missing)} rows the snapshot saw are not in the sealed range: {sorted(missing)[:5]}"


def test_watermark_visible_in_the_snapshot_is_refused(config, state, pg):
    run, table, topic = unique("run"), unique("public.customers"), config.topic_for("public.customers")
    state_store.open_range(state, run, table, topic, [0])
    future = pg.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint").fetchone()[0] + 1_000_000
    state_store.record_snapshot(state, run, table, {"xmin": future, "xmax": future})
    with pytest.raises(sealing.WatermarkBeforeSnapshot, match="visible in the recorded snapshot"):
        sealing.seal_offsets(
            state,
            kafka=config.bootstrap_servers,
            run_id=run,
            table=table,
            watermark_table=WATERMARK_TABLE,
            watermark_topic=config.topic_for(WATERMARK_TABLE),
            timeout=30,
            source=pg,
        )
    assert state_store.get_range(state, run, table).sealed is False


def test_watermark_timeout_names_topic_id_and_what_to_check(config):
    watermark_topic = config.topic_for(WATERMARK_TABLE)
    began = time.monotonic()
    with pytest.raises(sealing.SealTimeout) as raised:
        sealing.wait_for_watermark(config.bootstrap_servers, watermark_topic, 10**15, timeout=3)
    message = str(raised.value)
    assert watermark_topic in message
    assert str(10**15) in message
    assert "connector" in message and "deadline" in message
    assert time.monotonic() - began < 20


def test_unreachable_database_and_broker_are_named():
    with pytest.raises(state_store.StateStoreUnavailable) as db:
        state_store.connect("host=127.0.0.1 port=1 dbname=state user=pipeline password=s3cret", connect_timeout=3)
    assert "127.0.0.1:1/state" in str(db.value)
    assert "s3cret" not in str(db.value)
    with pytest.raises(kafka_offsets.BrokerUnavailable, match=re.escape("127.0.0.1:1")):
        sealing.end_offsets("127.0.0.1:1", "cdc.public.customers", [0], timeout=3)
    with pytest.raises(kafka_offsets.BrokerUnavailable, match=re.escape("127.0.0.1:1")):
        sealing.wait_for_watermark("127.0.0.1:1", "cdc.public.cdc_watermark", 1, timeout=3)
