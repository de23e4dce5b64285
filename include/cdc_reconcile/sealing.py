"""The watermark that seals a run's offset range once Kafka holds everything its snapshot saw.

The range is opened at the previous run's sealed end (``checkpoint_offsets``) and sealed after the
source snapshot (``seal_offsets``):

1. ``write_watermark`` inserts a row into a small captured table and commits, *after* the snapshot;
2. ``wait_for_watermark`` waits until that row's change event is readable by a ``read_committed``
   consumer. Logical decoding emits transactions in commit order and the watermark committed after
   every transaction the snapshot saw, so Debezium has by then handed all of them to Kafka;
3. ``end_offsets`` then reads the data topic's end offsets, waiting until its last stable offset
   has caught up (see there: Kafka makes a transaction visible partition by partition), for every
   partition the topic has now: one added since the open joins the range from offset 0;
4. ``state_store.seal_range`` records them, with the watermark's transaction id.

A snapshot taken again after the seal sees the watermark's transaction; the range then lacks
changes the snapshot saw, so ``seal_offsets`` seals it again (see there).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, IsolationLevel, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition
from psycopg import sql

from .errors import InputError, UnreachableError
from .kafka_client import as_client
from .kafka_offsets import (
    KafkaTarget,
    kafka_error,
    list_offsets,
    list_partitions,
    new_admin,
    new_consumer,
    reported_errors,
    topic_partitions,
)
from .range_continuity import later_run_opened
from .state_store import OffsetRange, RangeNotOpen, get_range, get_snapshot, runs_opened_after, seal_range

log = logging.getLogger(__name__)

_WHAT_TO_CHECK = (
    "Check the Debezium connector's status (GET /connectors/<name>/status on the Kafka Connect REST API, "
    "or `cdc-stack status`), the Connect worker log for task failures, that the watermark table is captured "
    "(table.include.list and the publication) and that the replication slot is active "
    "(SELECT slot_name, active FROM pg_replication_slots)"
)


class SealTimeout(UnreachableError):
    """The deadline passed before Kafka showed what sealing needs to see: the watermark never arrived."""


class WatermarkBeforeSnapshot(InputError):
    """The watermark's transaction is visible in the snapshot, so it cannot prove the snapshot delivered."""


def write_watermark(conn: psycopg.Connection, run_id: str, watermark_table: str) -> tuple[int, int]:
    """Insert and commit a watermark row; return its id and its 64-bit transaction id.

    It must commit here and now: its position in the commit order is what proves delivery. So the
    connection must not be inside a transaction the caller opened.
    """
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise InputError(
            "write_watermark needs a connection with no open transaction (use autocommit or commit first): "
            "the watermark must commit now, after the snapshot"
        )
    schema, _, name = watermark_table.partition(".")
    if not schema or not name:
        raise ValueError(f"watermark table {watermark_table!r} must be 'schema.table'")
    try:
        with conn.transaction():
            row = conn.execute(
                sql.SQL("INSERT INTO {} (run_id) VALUES (%s) RETURNING id, pg_current_xact_id()::text::bigint").format(
                    sql.Identifier(schema, name)
                ),
                (run_id,),
            ).fetchone()
    except psycopg.errors.UndefinedTable as exc:
        raise InputError(
            f"watermark table {watermark_table} does not exist: {str(exc).strip()}. Apply the demo schema "
            "(sql/demo_schema.sql) or create it with columns (id bigserial primary key, run_id text, created_at) "
            "and add it to the connector's table.include.list"
        ) from exc
    assert row is not None
    watermark_id, txid = int(row[0]), int(row[1])
    log.info("run %s: wrote watermark %s (txid %s) into %s", run_id, watermark_id, txid, watermark_table)
    return watermark_id, txid


def end_offsets(kafka: KafkaTarget, topic: str, partitions: Iterable[int], *, timeout: float = 60.0) -> dict[int, int]:
    """End offsets of a sealed range: a last stable offset that covers everything already written.

    Call it after the watermark was seen. The LSO alone is not enough: a Kafka transaction becomes
    visible partition by partition, as the coordinator writes its commit markers, so the watermark's
    partition can be readable while the same Debezium transaction's records in this topic are still
    behind an unmarked commit. So this reads the high watermark H first (which already covers every
    record Debezium wrote before the watermark, committed or not), then waits until the LSO is at
    least H, i.e. every transaction that had records below H has resolved, and returns that LSO.
    Debezium commits every poll batch, so the wait is short; a transaction that never resolves ends
    in ``SealTimeout``.
    """
    wanted = sorted({int(p) for p in partitions})
    deadline = time.monotonic() + timeout
    admin = new_admin(kafka, "end-offsets")
    high = list_offsets(admin, kafka, topic, wanted, IsolationLevel.READ_UNCOMMITTED, timeout)
    while True:
        remaining = deadline - time.monotonic()
        stable = list_offsets(admin, kafka, topic, wanted, IsolationLevel.READ_COMMITTED, max(remaining, 1.0))
        behind = {p: (stable[p], high[p]) for p in wanted if stable[p] < high[p]}
        if not behind:
            return stable
        if time.monotonic() >= deadline:
            raise SealTimeout(
                f"end offsets of {topic!r} on {as_client(kafka).bootstrap}: the last stable offset did not reach the "
                f"high watermark within {timeout:.0f}s (partition: (LSO, high watermark) {behind}): a transaction "
                f"on the topic stays open. {_WHAT_TO_CHECK}; Kafka aborts a hung transaction after "
                "transaction.timeout.ms"
            )
        time.sleep(min(0.2, max(deadline - time.monotonic(), 0)))


def _unwrap(document: Any) -> Any:
    if isinstance(document, dict) and set(document) == {"schema", "payload"}:
        return document["payload"]
    return document


def _watermark_id_of(raw: bytes | None) -> int | None:
    """``after.id`` of a Debezium insert/read event, or None for anything else (tombstones, junk)."""
    if raw is None:
        return None
    try:
        payload = _unwrap(json.loads(raw))
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(payload, dict) or payload.get("op") not in ("c", "r", "u"):
        return None
    after = payload.get("after")
    if not isinstance(after, dict):
        return None
    value = after.get("id")
    return value if isinstance(value, int) else None


def wait_for_watermark(
    kafka: KafkaTarget,
    watermark_topic: str,
    watermark_id: int,
    *,
    timeout: float,
    since_ms: int | None = None,
) -> None:
    """Return once the watermark row's event is committed in Kafka; raise ``SealTimeout`` at the deadline.

    Reads the watermark topic with ``isolation.level=read_committed``, so the event is returned only
    after Debezium's Kafka transaction that carries it has committed. ``since_ms`` (epoch millis,
    compared with record timestamps) skips older watermarks; leave a margin for clock skew between
    this host and the Connect worker. Without it the topic is read from the beginning.
    """
    deadline = time.monotonic() + timeout
    deadline_at = datetime.now(UTC) + timedelta(seconds=timeout)
    bootstrap = as_client(kafka).bootstrap
    consumer = new_consumer(kafka, "watermark")
    seen_max: int | None = None
    last_error: str | None = None
    try:
        partitions = topic_partitions(consumer, kafka, watermark_topic, min(timeout, 15.0))
        while partitions is None:
            if time.monotonic() >= deadline:
                raise SealTimeout(
                    f"watermark {watermark_id} did not arrive: topic {watermark_topic!r} does not exist on "
                    f"{bootstrap} (deadline {deadline_at:%Y-%m-%d %H:%M:%S} UTC, {timeout:.0f}s). "
                    f"Debezium has not emitted any watermark event yet. {_WHAT_TO_CHECK}"
                )
            time.sleep(min(1.0, max(deadline - time.monotonic(), 0)))
            partitions = topic_partitions(consumer, kafka, watermark_topic, min(timeout, 15.0))
        starts = _watermark_starts(consumer, kafka, watermark_topic, partitions, since_ms, deadline)
        consumer.assign([KafkaTopicPartition(watermark_topic, p, starts[p]) for p in partitions])
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                seen = "no watermark event read" if seen_max is None else f"latest watermark id read: {seen_max}"
                error = f"; last consumer error: {last_error}" if last_error else ""
                raise SealTimeout(
                    f"watermark {watermark_id} was not seen committed in Kafka topic {watermark_topic!r} on "
                    f"{bootstrap} by the deadline {deadline_at:%Y-%m-%d %H:%M:%S} UTC ({timeout:.0f}s; "
                    f"{seen}{error}). Debezium is behind or stopped. {_WHAT_TO_CHECK}"
                )
            message = consumer.poll(min(remaining, 1.0))
            if message is None:
                continue
            if message.error():
                last_error = str(message.error())
                if message.error().fatal():
                    raise kafka_error(
                        KafkaException(message.error()), kafka, watermark_topic, "reading", reported_errors(consumer)
                    )
                continue
            found = _watermark_id_of(message.value())
            if found is None:
                continue
            seen_max = found if seen_max is None else max(seen_max, found)
            if found == watermark_id:
                log.info(
                    "watermark %s committed in %s [%s] at offset %s",
                    watermark_id,
                    watermark_topic,
                    message.partition(),
                    message.offset(),
                )
                return
    finally:
        consumer.close()


def _watermark_starts(
    consumer: Consumer, kafka: KafkaTarget, topic: str, partitions: list[int], since_ms: int | None, deadline: float
) -> dict[int, int]:
    if since_ms is None:
        return dict.fromkeys(partitions, OFFSET_BEGINNING)
    query = [KafkaTopicPartition(topic, p, int(since_ms)) for p in partitions]
    try:
        found = consumer.offsets_for_times(query, timeout=max(min(deadline - time.monotonic(), 15.0), 0.5))
    except KafkaException as exc:
        raise kafka_error(exc, kafka, topic, "looking up watermark offsets by time", reported_errors(consumer)) from exc
    # -1: no committed record at or after since_ms yet; the watermark will come after the current end.
    return {tp.partition: tp.offset if tp.offset >= 0 else OFFSET_END for tp in found}


def _visible_in(txid: int, snapshot: Mapping[str, Any]) -> bool:
    """Whether a 64-bit transaction id had finished when the snapshot was taken."""
    return txid < snapshot["xmin"] or (txid < snapshot["xmax"] and txid not in set(snapshot["xip"]))


def seal_predates(offset_range: OffsetRange, snapshot: Mapping[str, Any] | None) -> bool:
    """Whether the range was sealed before the snapshot was taken, so it may lack changes the snapshot saw.

    The seal's watermark committed before the seal was recorded; a snapshot in which the watermark's
    transaction is visible was taken after it. False when that cannot be told: no snapshot recorded,
    or a range sealed without its watermark's transaction id (by hand, or before the id was kept).
    """
    if not offset_range.sealed or offset_range.watermark_txid is None or snapshot is None:
        return False
    return _visible_in(offset_range.watermark_txid, snapshot)


def seal_offsets(
    conn: psycopg.Connection,
    *,
    kafka: KafkaTarget,
    run_id: str,
    table: str,
    watermark_table: str,
    watermark_topic: str,
    timeout: float = 600.0,
    force: bool = False,
    clock_skew: float = 300.0,
    source: psycopg.Connection | None = None,
) -> OffsetRange:
    """The ``seal_offsets`` task: watermark, wait, end offsets, seal.

    ``conn`` is the state database; ``source`` the captured database the watermark is written to
    (None: the same database as the state).

    Checks that the watermark's transaction is not visible in the snapshot recorded for this run
    and table (it would then prove nothing about that snapshot). A sealed range is returned as is
    (a cleared seal task keeps its range), unless the recorded snapshot was taken after the seal
    (``snapshot_source`` cleared and run again): that snapshot saw changes committed after the
    range's end, so the range is sealed again at a watermark after the new snapshot. The start stays,
    the end moves on, and compact_cdc, cleared with it, reads the longer range. Keeping the old range
    would report those changes as missing or stale rows; refusing would leave the run no way to
    check the new snapshot. Once a later run opened its range at this end, growing it would overlap
    that range, so then this refuses with ``LaterRunOpened``. ``force`` re-seals whatever the snapshot.
    """
    current = get_range(conn, run_id, table)
    if current is None:
        raise RangeNotOpen(f"run {run_id!r} has no offset range for {table!r}; run checkpoint_offsets first")
    snapshot = get_snapshot(conn, run_id, table)
    if current.sealed and not force:
        if not seal_predates(current, snapshot):
            log.info("run %s, table %s: already sealed, keeping %s", run_id, table, current.end)
            return current
        later = runs_opened_after(conn, run_id, table)
        if later:
            raise later_run_opened(run_id, table, later)
        log.warning("run %s, table %s: the snapshot was taken after the seal; sealing again", run_id, table)
        force = True
    deadline = time.monotonic() + timeout
    since_ms = int((time.time() - clock_skew) * 1000)
    watermark_id, txid = write_watermark(conn if source is None else source, run_id, watermark_table)
    if snapshot is None:
        log.warning("run %s, table %s: no snapshot recorded; sealing without checking the order", run_id, table)
    elif _visible_in(txid, snapshot):
        raise WatermarkBeforeSnapshot(
            f"run {run_id!r}, table {table!r}: watermark {watermark_id} (txid {txid}) is visible in the recorded "
            f"snapshot (xmin {snapshot['xmin']}, xmax {snapshot['xmax']}): the snapshot was taken after the "
            "watermark. Seal after snapshot_source, or re-run snapshot_source and then seal with force=True"
        )
    wait_for_watermark(kafka, watermark_topic, watermark_id, timeout=timeout, since_ms=since_ms)
    # partitions added since the open hold changes from before the watermark too: the range takes them
    partitions = sorted({*current.partitions, *list_partitions(kafka, current.topic)})
    ends = end_offsets(kafka, current.topic, partitions, timeout=max(deadline - time.monotonic(), 5.0))
    return seal_range(conn, run_id, table, ends, watermark_id, watermark_txid=txid, force=force)


__all__ = [
    "SealTimeout",
    "WatermarkBeforeSnapshot",
    "end_offsets",
    "seal_offsets",
    "seal_predates",
    "wait_for_watermark",
    "write_watermark",
]
