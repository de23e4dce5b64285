"""Offset ranges and run state in PostgreSQL, and the watermark that seals a run's range.

Each DAG run reads one half-open Kafka offset range ``[start, end)`` per table and partition. The
range is opened at the previous run's sealed end (``checkpoint_offsets``) and sealed after the
source snapshot (``seal_offsets``, DESIGN.md sections 5 and 6):

1. ``write_watermark`` inserts a row into a small captured table and commits, *after* the snapshot;
2. ``wait_for_watermark`` waits until that row's change event is readable by a ``read_committed``
   consumer. Logical decoding emits transactions in commit order and the watermark committed after
   every transaction the snapshot saw, so Debezium has by then handed all of them to Kafka;
3. ``end_offsets`` then reads the data topic's end offsets, waiting until its last stable offset
   has caught up (see there: Kafka makes a transaction visible partition by partition);
4. ``seal_range`` records them.

Everything is keyed by DAG run id, so a cleared task gets the range it had before, never a new one.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Any

import psycopg
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, IsolationLevel, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

log = logging.getLogger(__name__)

STATE_SCHEMA = "cdc_reconcile"
SNAPSHOT_FIELDS = frozenset({"snapshot", "snapshot_id", "xmin", "xmax", "xip", "wal_lsn", "taken_at", "row_count"})
_UNREACHABLE = {
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._TIMED_OUT,
    KafkaError._RESOLVE,
    KafkaError._WAIT_COORD,
}
_WHAT_TO_CHECK = (
    "Check the Debezium connector's status (GET /connectors/<name>/status on the Kafka Connect REST API, "
    "or `cdc-stack status`), the Connect worker log for task failures, that the watermark table is captured "
    "(table.include.list and the publication) and that the replication slot is active "
    "(SELECT slot_name, active FROM pg_replication_slots)"
)


class CheckpointError(RuntimeError):
    """A checkpoint step cannot go on; the message says what is wrong and what to do."""


class StateStoreUnavailable(CheckpointError):
    """The state database cannot be reached."""


class StateSchemaMissing(CheckpointError):
    """The ``cdc_reconcile`` state tables do not exist yet."""


class BrokerUnavailable(CheckpointError):
    """Kafka cannot be reached."""


class TopicNotFound(CheckpointError):
    """The topic does not exist (yet)."""


class SealTimeout(CheckpointError):
    """The deadline passed before Kafka showed what sealing needs to see."""


class RangeNotOpen(CheckpointError):
    """Sealing or reading a range that ``open_range`` never opened."""


class RangeConflict(CheckpointError):
    """The range is already sealed with other end offsets; pass ``force=True`` to overwrite."""


class WatermarkBeforeSnapshot(CheckpointError):
    """The watermark's transaction is visible in the snapshot, so it cannot prove the snapshot delivered."""


@dataclass(frozen=True)
class OffsetRange:
    """One run's offsets for one table: ``[start[p], end[p])`` per partition; ``end`` is None until sealed."""

    run_id: str
    table_name: str
    topic: str
    start: Mapping[int, int]
    end: Mapping[int, int] | None = None
    watermark_id: int | None = None
    opened_at: datetime | None = None
    sealed_at: datetime | None = None

    @property
    def sealed(self) -> bool:
        return self.end is not None

    @property
    def partitions(self) -> list[int]:
        return sorted(self.start)

    def as_spark_json(self) -> tuple[str, str]:
        """``(startingOffsets, endingOffsets)`` for Spark's Kafka batch source, e.g. ``{"t":{"0":5}}``.

        Ends are exclusive in Spark as here. Only a sealed range can be read: reading to "latest"
        would make a rerun of the same DAG run read a different range.
        """
        if self.end is None:
            raise RangeNotOpen(
                f"offset range of run {self.run_id!r}, table {self.table_name!r} is not sealed yet; "
                "run seal_offsets for this run before compacting"
            )
        starting = {self.topic: {str(p): self.start[p] for p in self.partitions}}
        ending = {self.topic: {str(p): self.end[p] for p in self.partitions}}
        return json.dumps(starting, separators=(",", ":")), json.dumps(ending, separators=(",", ":"))


# -- PostgreSQL ---------------------------------------------------------------------------------------


def _describe_dsn(dsn: str) -> str:
    """Host, port, database and user of a DSN, never its password."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparseable DSN>"
    host = params.get("host") or params.get("hostaddr") or "localhost"
    return f"{params.get('user', '?')}@{host}:{params.get('port', 5432)}/{params.get('dbname', '?')}"


def connect(dsn: str, *, connect_timeout: int = 10, autocommit: bool = True) -> psycopg.Connection:
    """Connect to the state database, turning a failure into a message that names it and the fix."""
    try:
        return psycopg.connect(dsn, connect_timeout=connect_timeout, autocommit=autocommit)
    except psycopg.OperationalError as exc:
        raise StateStoreUnavailable(
            f"cannot connect to the state database {_describe_dsn(dsn)} ({' '.join(str(exc).split())}); "
            "check that PostgreSQL is running (`cdc-stack status` for the embedded stack) and that the "
            "Airflow connection / DSN points at it with the right credentials"
        ) from exc


def ensure_state_schema(conn: psycopg.Connection) -> None:
    """Create the ``cdc_reconcile`` schema and tables if missing (safe to call concurrently)."""
    ddl = resources.files("cdc_reconcile").joinpath("sql/state_schema.sql").read_text()
    try:
        with conn.transaction():
            conn.execute(ddl)
    except psycopg.errors.InsufficientPrivilege as exc:
        raise CheckpointError(
            f"creating schema {STATE_SCHEMA} failed: {exc}. Grant the pipeline's role CREATE on the database "
            f"(GRANT CREATE ON DATABASE ... TO ...) or create the schema once as its owner"
        ) from exc


def _state_error(exc: psycopg.errors.UndefinedTable) -> StateSchemaMissing:
    return StateSchemaMissing(
        f"state tables missing ({str(exc).strip()}); call checkpoints.ensure_state_schema(conn) first"
    )


def _advisory_key(*parts: str) -> str:
    return "\x1f".join(("cdc_reconcile.offset_ranges", *parts))


def _ensure_run(conn: psycopg.Connection, run_id: str) -> None:
    conn.execute(
        "INSERT INTO cdc_reconcile.runs (run_id) VALUES (%s) ON CONFLICT (run_id) DO NOTHING",
        (run_id,),
    )


def set_run_status(conn: psycopg.Connection, run_id: str, status: str) -> None:
    """Record a run's status (``running``, ``success``, ``failed``, ...), creating the run row if needed."""
    try:
        with conn.transaction():
            conn.execute(
                "INSERT INTO cdc_reconcile.runs (run_id, status) VALUES (%s, %s) "
                "ON CONFLICT (run_id) DO UPDATE SET status = EXCLUDED.status",
                (run_id, status),
            )
    except psycopg.errors.UndefinedTable as exc:
        raise _state_error(exc) from exc


def open_range(
    conn: psycopg.Connection,
    run_id: str,
    table: str,
    topic: str,
    partitions: Iterable[int],
    *,
    start_offsets: Mapping[int, int] | None = None,
) -> dict[int, int]:
    """Open this run's range at the previous run's sealed end offsets; return the start per partition.

    ``start_offsets`` (a full rescan: the topic's earliest offsets) replaces the previous ends.

    The previous end is, per partition, the end of the most recently sealed range of another run for
    the same table and topic (0 when there is none). If this run already opened a range for the
    table, that range is returned unchanged, whatever has been sealed since: a cleared task must
    read the same offsets again. A transaction-scoped advisory lock on (run, table) makes concurrent
    openers take turns, and the primary key backs it up.
    """
    wanted = sorted({int(p) for p in partitions})
    if not wanted:
        raise ValueError(f"open_range({run_id!r}, {table!r}): no partitions given for topic {topic!r}")
    if any(p < 0 for p in wanted):
        raise ValueError(f"open_range: partitions must be >= 0, got {wanted}")
    try:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (_advisory_key(run_id, table),))
            existing = conn.execute(
                "SELECT partition, start_offset, topic FROM cdc_reconcile.offset_ranges "
                "WHERE run_id = %s AND table_name = %s ORDER BY partition",
                (run_id, table),
            ).fetchall()
            if existing:
                stored = {p: start for p, start, _ in existing}
                stored_topic = existing[0][2]
                if stored_topic != topic or sorted(stored) != wanted:
                    log.warning(
                        "run %s, table %s: keeping the range opened earlier (topic %s, partitions %s); "
                        "this call asked for topic %s, partitions %s",
                        run_id,
                        table,
                        stored_topic,
                        sorted(stored),
                        topic,
                        wanted,
                    )
                return stored
            previous = dict(
                conn.execute(
                    "SELECT DISTINCT ON (partition) partition, end_offset FROM cdc_reconcile.offset_ranges "
                    "WHERE table_name = %s AND topic = %s AND run_id <> %s AND sealed_at IS NOT NULL "
                    "AND partition = ANY(%s) "
                    "ORDER BY partition, sealed_at DESC, end_offset DESC",
                    (table, topic, run_id, wanted),
                ).fetchall()
            )
            starts = {p: int(previous.get(p, 0)) for p in wanted}
            if start_offsets is not None:
                starts = {p: int(start_offsets.get(p, 0)) for p in wanted}
            _ensure_run(conn, run_id)
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO cdc_reconcile.offset_ranges (run_id, table_name, topic, partition, start_offset) "
                    "VALUES (%s, %s, %s, %s, %s)",
                    [(run_id, table, topic, p, starts[p]) for p in wanted],
                )
    except psycopg.errors.UndefinedTable as exc:
        raise _state_error(exc) from exc
    log.info("run %s, table %s: opened %s at %s", run_id, table, topic, starts)
    return starts


def get_range(conn: psycopg.Connection, run_id: str, table: str) -> OffsetRange | None:
    """This run's range for ``table``, or None if ``open_range`` never ran for it."""
    try:
        with conn.transaction():
            rows = conn.execute(
                "SELECT topic, partition, start_offset, end_offset, watermark_id, opened_at, sealed_at "
                "FROM cdc_reconcile.offset_ranges WHERE run_id = %s AND table_name = %s ORDER BY partition",
                (run_id, table),
            ).fetchall()
    except psycopg.errors.UndefinedTable as exc:
        raise _state_error(exc) from exc
    if not rows:
        return None
    sealed = all(row[3] is not None for row in rows)
    return OffsetRange(
        run_id=run_id,
        table_name=table,
        topic=rows[0][0],
        start={row[1]: row[2] for row in rows},
        end={row[1]: row[3] for row in rows} if sealed else None,
        watermark_id=rows[0][4] if sealed else None,
        opened_at=min(row[5] for row in rows),
        sealed_at=max(row[6] for row in rows) if sealed else None,
    )


def seal_range(
    conn: psycopg.Connection,
    run_id: str,
    table: str,
    end_offsets: Mapping[int, int],
    watermark_id: int | None,
    *,
    force: bool = False,
) -> OffsetRange:
    """Record this run's end offsets (exclusive) for every partition of its range, atomically.

    Sealing again with the same ends and watermark is a no-op; other values raise ``RangeConflict``
    unless ``force`` (for a deliberate re-seal after a new snapshot).
    """
    ends = {int(p): int(o) for p, o in end_offsets.items()}
    try:
        with conn.transaction():
            rows = conn.execute(
                "SELECT partition, start_offset, end_offset, watermark_id FROM cdc_reconcile.offset_ranges "
                "WHERE run_id = %s AND table_name = %s ORDER BY partition FOR UPDATE",
                (run_id, table),
            ).fetchall()
            if not rows:
                raise RangeNotOpen(f"run {run_id!r} has no offset range for {table!r}; call open_range first")
            starts = {p: start for p, start, _, _ in rows}
            if set(ends) != set(starts):
                raise ValueError(
                    f"seal_range({run_id!r}, {table!r}): end offsets for partitions {sorted(ends)} "
                    f"but the range was opened for partitions {sorted(starts)}"
                )
            below = {p: (starts[p], ends[p]) for p in starts if ends[p] < starts[p]}
            if below:
                raise ValueError(
                    f"seal_range({run_id!r}, {table!r}): end offset below start (start, end) {below}; "
                    "was the topic deleted and re-created, or its offsets reset?"
                )
            stored_ends = {p: end for p, _, end, _ in rows}
            if all(end is not None for end in stored_ends.values()):
                stored_watermark = rows[0][3]
                if stored_ends == ends and stored_watermark == watermark_id:
                    log.info("run %s, table %s: already sealed at %s", run_id, table, ends)
                    return _range_in(conn, run_id, table)
                if not force:
                    raise RangeConflict(
                        f"run {run_id!r}, table {table!r} is already sealed at {stored_ends} (watermark "
                        f"{stored_watermark}); refusing to re-seal at {ends} (watermark {watermark_id}). "
                        "Pass force=True only if this run's snapshot was taken again"
                    )
                log.warning("run %s, table %s: re-sealing %s -> %s", run_id, table, stored_ends, ends)
            with conn.cursor() as cur:
                cur.executemany(
                    "UPDATE cdc_reconcile.offset_ranges SET end_offset = %s, watermark_id = %s, sealed_at = now() "
                    "WHERE run_id = %s AND table_name = %s AND partition = %s",
                    [(ends[p], watermark_id, run_id, table, p) for p in sorted(ends)],
                )
            sealed = _range_in(conn, run_id, table)
    except psycopg.errors.UndefinedTable as exc:
        raise _state_error(exc) from exc
    log.info("run %s, table %s: sealed %s at %s (watermark %s)", run_id, table, sealed.topic, ends, watermark_id)
    return sealed


def _range_in(conn: psycopg.Connection, run_id: str, table: str) -> OffsetRange:
    found = get_range(conn, run_id, table)
    assert found is not None
    return found


def write_watermark(conn: psycopg.Connection, run_id: str, watermark_table: str) -> tuple[int, int]:
    """Insert and commit a watermark row; return its id and its 64-bit transaction id.

    It must commit here and now: its position in the commit order is what proves delivery. So the
    connection must not be inside a transaction the caller opened.
    """
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise CheckpointError(
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
        raise CheckpointError(
            f"watermark table {watermark_table} does not exist: {str(exc).strip()}. Apply the demo schema "
            "(sql/demo_schema.sql) or create it with columns (id bigserial primary key, run_id text, created_at) "
            "and add it to the connector's table.include.list"
        ) from exc
    assert row is not None
    watermark_id, txid = int(row[0]), int(row[1])
    log.info("run %s: wrote watermark %s (txid %s) into %s", run_id, watermark_id, txid, watermark_table)
    return watermark_id, txid


def snapshot_fields(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The :func:`record_snapshot` fields of a snapshot dataset version's metadata sidecar."""
    return {
        "xmin": metadata["xmin"],
        "xmax": metadata["xmax"],
        "xip": metadata["xip"],
        "snapshot_id": metadata.get("snapshot_id"),
        "wal_lsn": metadata.get("lsn"),
        "taken_at": metadata.get("taken_at"),
        "row_count": metadata.get("rows"),
    }


def record_snapshot(conn: psycopg.Connection, run_id: str, table: str, metadata: Mapping[str, Any]) -> None:
    """Store (or replace) the snapshot metadata of this run and table.

    ``metadata`` holds ``xmin``, ``xmax``, ``xip`` (64-bit ids) or ``snapshot`` as the text of
    ``pg_current_snapshot()``, and optionally ``snapshot_id`` (exported snapshot), ``wal_lsn``,
    ``taken_at``, ``row_count``. A rerun of the snapshot task replaces the row: the metadata must
    describe the snapshot the dataset now holds. The columns are ``snapshot_xmin`` / ``snapshot_xmax``
    (``xmin`` and ``xmax`` are PostgreSQL system column names).
    """
    unknown = set(metadata) - SNAPSHOT_FIELDS
    if unknown:
        raise ValueError(f"record_snapshot: unknown fields {sorted(unknown)}; known: {sorted(SNAPSHOT_FIELDS)}")
    if "snapshot" in metadata:
        xmin, xmax, xip = _parse_pg_snapshot(str(metadata["snapshot"]))
    else:
        missing = {"xmin", "xmax"} - set(metadata)
        if missing:
            raise ValueError(f"record_snapshot: needs 'snapshot' or xmin and xmax (missing {sorted(missing)})")
        xmin, xmax, xip = int(metadata["xmin"]), int(metadata["xmax"]), sorted(int(x) for x in metadata.get("xip", ()))
    if not 0 <= xmin <= xmax or any(not xmin <= x < xmax for x in xip):
        raise ValueError(f"record_snapshot: inconsistent snapshot xmin={xmin} xmax={xmax} xip={xip}")
    row_count = metadata.get("row_count")
    try:
        with conn.transaction():
            conn.execute(
                "INSERT INTO cdc_reconcile.snapshots "
                "(run_id, table_name, snapshot_id, snapshot_xmin, snapshot_xmax, xip, wal_lsn, taken_at, row_count) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s::pg_lsn, coalesce(%s, now()), %s) "
                "ON CONFLICT (run_id, table_name) DO UPDATE SET snapshot_id = EXCLUDED.snapshot_id, "
                "snapshot_xmin = EXCLUDED.snapshot_xmin, snapshot_xmax = EXCLUDED.snapshot_xmax, xip = EXCLUDED.xip, "
                "wal_lsn = EXCLUDED.wal_lsn, "
                "taken_at = EXCLUDED.taken_at, row_count = EXCLUDED.row_count",
                (
                    run_id,
                    table,
                    metadata.get("snapshot_id"),
                    xmin,
                    xmax,
                    xip,
                    metadata.get("wal_lsn"),
                    metadata.get("taken_at"),
                    None if row_count is None else int(row_count),
                ),
            )
    except psycopg.errors.UndefinedTable as exc:
        raise _state_error(exc) from exc


def get_snapshot(conn: psycopg.Connection, run_id: str, table: str) -> dict[str, Any] | None:
    """The snapshot metadata recorded for this run and table, or None."""
    try:
        with conn.transaction():
            row = conn.execute(
                "SELECT snapshot_id, snapshot_xmin, snapshot_xmax, xip, wal_lsn::text, taken_at, row_count "
                "FROM cdc_reconcile.snapshots WHERE run_id = %s AND table_name = %s",
                (run_id, table),
            ).fetchone()
    except psycopg.errors.UndefinedTable as exc:
        raise _state_error(exc) from exc
    if row is None:
        return None
    keys = ("snapshot_id", "xmin", "xmax", "xip", "wal_lsn", "taken_at", "row_count")
    result = dict(zip(keys, row, strict=True))
    result["xip"] = list(result["xip"] or [])
    return result


def _parse_pg_snapshot(text: str) -> tuple[int, int, list[int]]:
    parts = text.strip().split(":")
    if len(parts) != 3:
        raise ValueError(f"not a pg_snapshot: {text!r} (expected 'xmin:xmax:xip,...')")
    try:
        return int(parts[0]), int(parts[1]), sorted(int(x) for x in parts[2].split(",") if x.strip())
    except ValueError as exc:
        raise ValueError(f"not a pg_snapshot: {text!r}") from exc


def _visible_in(txid: int, snapshot: Mapping[str, Any]) -> bool:
    """Whether a 64-bit transaction id had finished when the snapshot was taken."""
    return txid < snapshot["xmin"] or (txid < snapshot["xmax"] and txid not in set(snapshot["xip"]))


# -- Kafka ----------------------------------------------------------------------------------------------


def _kafka_error(exc: KafkaException, bootstrap: str, topic: str, doing: str) -> CheckpointError:
    error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    code = error.code() if error is not None else None
    if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION):
        return TopicNotFound(
            f"{doing}: topic {topic!r} (or one of its partitions) does not exist on {bootstrap}. Debezium creates "
            "a table's topic with its first event; check the table is in the connector's table.include.list"
        )
    if code in _UNREACHABLE or code is None:
        return BrokerUnavailable(
            f"{doing}: Kafka at {bootstrap} did not answer ({exc}). Check that the broker is running "
            "(`cdc-stack status` for the embedded stack) and that bootstrap.servers points at it"
        )
    return CheckpointError(f"{doing}: Kafka at {bootstrap} refused the request for {topic!r}: {exc}")


def _consumer(bootstrap: str, purpose: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"cdc-reconcile-{purpose}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            "allow.auto.create.topics": False,
            "log_level": 3,
        }
    )


def _topic_partitions(consumer: Consumer, bootstrap: str, topic: str, timeout: float) -> list[int] | None:
    """Partitions of ``topic``; None if it does not exist; BrokerUnavailable if Kafka does not answer."""
    try:
        metadata = consumer.list_topics(topic, timeout=max(timeout, 0.5))
    except KafkaException as exc:
        raise _kafka_error(exc, bootstrap, topic, "reading topic metadata") from exc
    found = metadata.topics.get(topic)
    if found is None or found.error is not None or not found.partitions:
        if found is not None and found.error is not None:
            code = found.error.code()
            if code not in (
                KafkaError.UNKNOWN_TOPIC_OR_PART,
                KafkaError._UNKNOWN_TOPIC,
                KafkaError.LEADER_NOT_AVAILABLE,
            ):
                raise CheckpointError(f"reading metadata of {topic!r} on {bootstrap}: {found.error}")
        return None
    return sorted(found.partitions)


def list_partitions(bootstrap: str, topic: str, *, timeout: float = 15.0) -> list[int]:
    """The partition ids of ``topic`` (the input of ``open_range``)."""
    consumer = _consumer(bootstrap, "metadata")
    try:
        partitions = _topic_partitions(consumer, bootstrap, topic, timeout)
    finally:
        consumer.close()
    if partitions is None:
        raise TopicNotFound(
            f"topic {topic!r} does not exist on {bootstrap}. Debezium creates a table's topic with its first "
            "event (the initial snapshot of a non-empty table, or the first change); check the table is in the "
            "connector's table.include.list and the connector is RUNNING"
        )
    return partitions


def _list_offsets(
    admin: AdminClient,
    bootstrap: str,
    topic: str,
    partitions: Iterable[int],
    isolation: IsolationLevel,
    timeout: float,
    spec: OffsetSpec | None = None,
) -> dict[int, int]:
    request = {KafkaTopicPartition(topic, p): spec or OffsetSpec.latest() for p in partitions}
    doing = f"listing {isolation.name.lower()} {'end' if spec is None else 'earliest'} offsets"
    try:
        futures = admin.list_offsets(request, isolation_level=isolation, request_timeout=max(timeout, 0.5))
        return {tp.partition: future.result().offset for tp, future in futures.items()}
    except KafkaException as exc:
        raise _kafka_error(exc, bootstrap, topic, doing) from exc


def last_stable_offsets(
    bootstrap: str, topic: str, partitions: Iterable[int], *, timeout: float = 15.0
) -> dict[int, int]:
    """The last stable offset (LSO) per partition now: where a ``read_committed`` reader stops.

    ListOffsets(latest) with ``isolation_level=READ_COMMITTED`` returns the LSO, the first offset of
    the oldest open transaction or the high watermark when none is open (KIP-98; librdkafka sends the
    isolation level from ListOffsets v2 on). ``Consumer.get_watermark_offsets`` on a consumer with
    ``isolation.level=read_committed`` gives the same value since librdkafka 1.8
    (confluentinc/librdkafka#3428); the admin call states the isolation level explicitly.
    """
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    return _list_offsets(admin, bootstrap, topic, partitions, IsolationLevel.READ_COMMITTED, timeout)


def earliest_offsets(bootstrap: str, topic: str, partitions: Iterable[int], *, timeout: float = 15.0) -> dict[int, int]:
    """The log start offset per partition: where a full rescan begins (older records were deleted)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    return _list_offsets(
        admin, bootstrap, topic, partitions, IsolationLevel.READ_COMMITTED, timeout, OffsetSpec.earliest()
    )


def log_end_offsets(bootstrap: str, topic: str, partitions: Iterable[int], *, timeout: float = 15.0) -> dict[int, int]:
    """The high watermark per partition: includes open transactions' records and transaction markers."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    return _list_offsets(admin, bootstrap, topic, partitions, IsolationLevel.READ_UNCOMMITTED, timeout)


def end_offsets(bootstrap: str, topic: str, partitions: Iterable[int], *, timeout: float = 60.0) -> dict[int, int]:
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
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    high = _list_offsets(admin, bootstrap, topic, wanted, IsolationLevel.READ_UNCOMMITTED, timeout)
    while True:
        remaining = deadline - time.monotonic()
        stable = _list_offsets(admin, bootstrap, topic, wanted, IsolationLevel.READ_COMMITTED, max(remaining, 1.0))
        behind = {p: (stable[p], high[p]) for p in wanted if stable[p] < high[p]}
        if not behind:
            return stable
        if time.monotonic() >= deadline:
            raise SealTimeout(
                f"end offsets of {topic!r} on {bootstrap}: the last stable offset did not reach the high watermark "
                f"within {timeout:.0f}s (partition: (LSO, high watermark) {behind}): a transaction on the topic "
                f"stays open. {_WHAT_TO_CHECK}; Kafka aborts a hung transaction after transaction.timeout.ms"
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
    bootstrap: str,
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
    consumer = _consumer(bootstrap, "watermark")
    seen_max: int | None = None
    last_error: str | None = None
    try:
        partitions = _topic_partitions(consumer, bootstrap, watermark_topic, min(timeout, 15.0))
        while partitions is None:
            if time.monotonic() >= deadline:
                raise SealTimeout(
                    f"watermark {watermark_id} did not arrive: topic {watermark_topic!r} does not exist on "
                    f"{bootstrap} (deadline {deadline_at:%Y-%m-%d %H:%M:%S} UTC, {timeout:.0f}s). "
                    f"Debezium has not emitted any watermark event yet. {_WHAT_TO_CHECK}"
                )
            time.sleep(min(1.0, max(deadline - time.monotonic(), 0)))
            partitions = _topic_partitions(consumer, bootstrap, watermark_topic, min(timeout, 15.0))
        starts = _watermark_starts(consumer, bootstrap, watermark_topic, partitions, since_ms, deadline)
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
                    raise _kafka_error(KafkaException(message.error()), bootstrap, watermark_topic, "reading")
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
    consumer: Consumer, bootstrap: str, topic: str, partitions: list[int], since_ms: int | None, deadline: float
) -> dict[int, int]:
    if since_ms is None:
        return dict.fromkeys(partitions, OFFSET_BEGINNING)
    query = [KafkaTopicPartition(topic, p, int(since_ms)) for p in partitions]
    try:
        found = consumer.offsets_for_times(query, timeout=max(min(deadline - time.monotonic(), 15.0), 0.5))
    except KafkaException as exc:
        raise _kafka_error(exc, bootstrap, topic, "looking up watermark offsets by time") from exc
    # -1: no committed record at or after since_ms yet; the watermark will come after the current end.
    return {tp.partition: tp.offset if tp.offset >= 0 else OFFSET_END for tp in found}


def seal_offsets(
    conn: psycopg.Connection,
    *,
    bootstrap: str,
    run_id: str,
    table: str,
    watermark_table: str,
    watermark_topic: str,
    timeout: float = 600.0,
    force: bool = False,
    clock_skew: float = 300.0,
) -> OffsetRange:
    """The ``seal_offsets`` task: watermark, wait, end offsets, seal; a sealed range is returned as is.

    Checks that the watermark's transaction is not visible in the snapshot recorded for this run
    and table (it would then prove nothing about that snapshot). ``force`` re-seals a sealed range,
    for when the snapshot was taken again.
    """
    current = get_range(conn, run_id, table)
    if current is None:
        raise RangeNotOpen(f"run {run_id!r} has no offset range for {table!r}; run checkpoint_offsets first")
    if current.sealed and not force:
        log.info("run %s, table %s: already sealed, keeping %s", run_id, table, current.end)
        return current
    deadline = time.monotonic() + timeout
    since_ms = int((time.time() - clock_skew) * 1000)
    watermark_id, txid = write_watermark(conn, run_id, watermark_table)
    snapshot = get_snapshot(conn, run_id, table)
    if snapshot is None:
        log.warning("run %s, table %s: no snapshot recorded; sealing without checking the order", run_id, table)
    elif _visible_in(txid, snapshot):
        raise WatermarkBeforeSnapshot(
            f"run {run_id!r}, table {table!r}: watermark {watermark_id} (txid {txid}) is visible in the recorded "
            f"snapshot (xmin {snapshot['xmin']}, xmax {snapshot['xmax']}): the snapshot was taken after the "
            "watermark. Seal after snapshot_source, or re-run snapshot_source and then seal with force=True"
        )
    wait_for_watermark(bootstrap, watermark_topic, watermark_id, timeout=timeout, since_ms=since_ms)
    ends = end_offsets(bootstrap, current.topic, current.partitions, timeout=max(deadline - time.monotonic(), 5.0))
    return seal_range(conn, run_id, table, ends, watermark_id, force=force)


__all__ = [
    "BrokerUnavailable",
    "CheckpointError",
    "OffsetRange",
    "RangeConflict",
    "RangeNotOpen",
    "SealTimeout",
    "StateSchemaMissing",
    "StateStoreUnavailable",
    "TopicNotFound",
    "WatermarkBeforeSnapshot",
    "connect",
    "end_offsets",
    "ensure_state_schema",
    "get_range",
    "get_snapshot",
    "last_stable_offsets",
    "list_partitions",
    "log_end_offsets",
    "open_range",
    "record_snapshot",
    "seal_offsets",
    "seal_range",
    "set_run_status",
    "wait_for_watermark",
    "write_watermark",
]
