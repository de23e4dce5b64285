"""The pipeline's state in PostgreSQL: the connection, the schema, each run's offset range and snapshot.

A run's offset range per table and partition is half-open, ``[start, end)``: opened at the end of
the previous run's compacted range (``open_range``), sealed once the watermark proved delivery
(``seal_range``, driven by :mod:`cdc_reconcile.sealing`), marked compacted when ``compact_cdc``
finished with it (``record_compaction``). Everything is keyed by DAG run id, so a cleared task gets
the range it had before, never a new one.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from .errors import InputError, UnreachableError
from .range_continuity import SealedPart, later_run_opened, next_starts, not_compacted

log = logging.getLogger(__name__)

STATE_SCHEMA = "cdc_reconcile"
SNAPSHOT_FIELDS = frozenset({"snapshot", "snapshot_id", "xmin", "xmax", "xip", "wal_lsn", "taken_at", "row_count"})


class StateStoreUnavailable(UnreachableError):
    """The state database cannot be reached."""


class StateSchemaMissing(InputError):
    """The ``cdc_reconcile`` state tables do not exist yet."""


class RangeNotOpen(InputError):
    """Sealing or reading a range that ``open_range`` never opened."""


class RangeConflict(InputError):
    """The range is already sealed with other end offsets; pass ``force=True`` to overwrite."""


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
    watermark_txid: int | None = None
    compacted_at: datetime | None = None

    @property
    def sealed(self) -> bool:
        return self.end is not None

    @property
    def compacted(self) -> bool:
        return self.compacted_at is not None

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


def describe_dsn(dsn: str) -> str:
    """Host, port, database and user of a libpq DSN for error messages, never its password."""
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
            f"cannot connect to the state database {describe_dsn(dsn)} ({' '.join(str(exc).split())}); "
            "check that PostgreSQL is running (`cdc-stack status` for the embedded stack) and that the "
            "Airflow connection / DSN points at it with the right credentials"
        ) from exc


@contextlib.contextmanager
def open_state(dsn: str) -> Iterator[psycopg.Connection]:
    """A connection to the state database with its schema ensured, closed after the block."""
    with connect(dsn) as conn:
        ensure_state_schema(conn)
        yield conn


@contextlib.contextmanager
def held_lock(dsn: str, name: str) -> Iterator[None]:
    """A session advisory lock on ``name`` in the state database, held while the block runs.

    Every host of a deployment reaches the state database, so this serialises work across Airflow
    workers and Spark drivers where a file lock holds only on one host (and not reliably on NFS). A
    process that dies drops its session, and with it the lock.
    """
    with connect(dsn) as conn:
        conn.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (name,))
        try:
            yield
        finally:
            conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (name,))


def ensure_state_schema(conn: psycopg.Connection) -> None:
    """Create the ``cdc_reconcile`` schema and tables if missing (safe to call concurrently)."""
    ddl = resources.files("cdc_reconcile").joinpath("sql/state_schema.sql").read_text()
    try:
        with conn.transaction():
            conn.execute(ddl)
    except psycopg.errors.InsufficientPrivilege as exc:
        raise InputError(
            f"creating schema {STATE_SCHEMA} failed: {exc}. Grant the pipeline's role CREATE on the database "
            f"(GRANT CREATE ON DATABASE ... TO ...) or create the schema once as its owner"
        ) from exc


def state_schema_missing(exc: psycopg.errors.UndefinedTable) -> StateSchemaMissing:
    """The error to raise when a statement on the state tables found them missing."""
    return StateSchemaMissing(
        f"state tables missing ({str(exc).strip()}); call state_store.ensure_state_schema(conn) first"
    )


def _lock_table(conn: psycopg.Connection, table: str) -> None:
    """Serialise, until the transaction ends, what decides where ranges of ``table`` start and end."""
    key = "\x1f".join(("cdc_reconcile.offset_ranges", table))
    conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (key,))


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
        raise state_schema_missing(exc) from exc


def open_range(
    conn: psycopg.Connection,
    run_id: str,
    table: str,
    topic: str,
    partitions: Iterable[int],
    *,
    start_offsets: Mapping[int, int] | None = None,
) -> dict[int, int]:
    """Open this run's range at the end of the previous compacted range; return the start per partition.

    ``start_offsets`` (a full rescan: the topic's earliest offsets) replaces the previous ends.

    The previous end is, per partition, that of the newest range of another run for the same table
    and topic that ``compact_cdc`` finished (0 when there is none). A run that sealed a range after
    it and never finished compacting makes this refuse with ``RangeNotCompacted``, naming that run,
    rather than open past its range (a hole) or over it: its partial datasets (events, changelog) are
    history to every later run, so its offsets read again would count as redeliveries, and clearing
    it later would compact them twice. So every offset lands in exactly one compacted range, through
    the failed run's own compact_cdc, cleared. A full rescan reads the whole topic, so it opens anyway.

    If this run already opened a range for the table, that range is returned unchanged, whatever has
    been sealed since: a cleared task must read the same offsets again. A transaction-scoped advisory
    lock on the table makes concurrent openers (and a re-seal) take turns; the primary key backs it up.
    """
    wanted = sorted({int(p) for p in partitions})
    if not wanted:
        raise ValueError(f"open_range({run_id!r}, {table!r}): no partitions given for topic {topic!r}")
    if any(p < 0 for p in wanted):
        raise ValueError(f"open_range: partitions must be >= 0, got {wanted}")
    try:
        with conn.transaction():
            _lock_table(conn, table)
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
            starts, blocking = next_starts(_sealed_parts(conn, run_id, table, topic, wanted), wanted)
            if start_offsets is not None:
                if blocking:
                    log.info("run %s, table %s: full rescan over uncompacted runs %s", run_id, table, blocking)
                starts = {p: int(start_offsets.get(p, 0)) for p in wanted}
            elif blocking:
                raise not_compacted(table, topic, blocking)
            _ensure_run(conn, run_id)
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO cdc_reconcile.offset_ranges (run_id, table_name, topic, partition, start_offset, "
                    "opened_at) VALUES (%s, %s, %s, %s, %s, clock_timestamp())",
                    [(run_id, table, topic, p, starts[p]) for p in wanted],
                )
    except psycopg.errors.UndefinedTable as exc:
        raise state_schema_missing(exc) from exc
    log.info("run %s, table %s: opened %s at %s", run_id, table, topic, starts)
    return starts


def _sealed_parts(
    conn: psycopg.Connection, run_id: str, table: str, topic: str, partitions: list[int]
) -> list[SealedPart]:
    """Other runs' sealed ranges per partition, from the newest compacted one on."""
    rows = conn.execute(
        "SELECT r.run_id, r.partition, r.end_offset, r.sealed_at, r.compacted_at IS NOT NULL "
        "FROM cdc_reconcile.offset_ranges r "
        "WHERE r.table_name = %(table)s AND r.topic = %(topic)s AND r.run_id <> %(run)s "
        "AND r.partition = ANY(%(partitions)s) AND r.sealed_at >= coalesce(("
        "  SELECT max(c.sealed_at) FROM cdc_reconcile.offset_ranges c WHERE c.table_name = r.table_name "
        "  AND c.topic = r.topic AND c.partition = r.partition AND c.run_id <> %(run)s AND c.compacted_at IS NOT NULL"
        "), '-infinity')",
        {"table": table, "topic": topic, "run": run_id, "partitions": partitions},
    ).fetchall()
    return [SealedPart(*row) for row in rows]


_RANGE_COLUMNS = (
    "SELECT topic, partition, start_offset, end_offset, watermark_id, opened_at, sealed_at, watermark_txid, "
    "compacted_at FROM cdc_reconcile.offset_ranges WHERE run_id = %s AND table_name = %s ORDER BY partition"
)


def get_range(conn: psycopg.Connection, run_id: str, table: str) -> OffsetRange | None:
    """This run's range for ``table``, or None if ``open_range`` never ran for it."""
    try:
        with conn.transaction():
            rows = conn.execute(_RANGE_COLUMNS, (run_id, table)).fetchall()
    except psycopg.errors.UndefinedTable as exc:
        raise state_schema_missing(exc) from exc
    return _range_of(run_id, table, rows)


def _range_of(run_id: str, table: str, rows: Sequence[tuple[Any, ...]]) -> OffsetRange | None:
    if not rows:
        return None
    sealed = all(row[3] is not None for row in rows)
    compacted = sealed and all(row[8] is not None for row in rows)
    return OffsetRange(
        run_id=run_id,
        table_name=table,
        topic=rows[0][0],
        start={row[1]: row[2] for row in rows},
        end={row[1]: row[3] for row in rows} if sealed else None,
        watermark_id=rows[0][4] if sealed else None,
        opened_at=min(row[5] for row in rows),
        sealed_at=max(row[6] for row in rows) if sealed else None,
        watermark_txid=rows[0][7] if sealed else None,
        compacted_at=max(row[8] for row in rows) if compacted else None,
    )


def seal_range(
    conn: psycopg.Connection,
    run_id: str,
    table: str,
    end_offsets: Mapping[int, int],
    watermark_id: int | None,
    *,
    watermark_txid: int | None = None,
    force: bool = False,
) -> OffsetRange:
    """Record this run's end offsets (exclusive) for every partition of its range, atomically.

    ``end_offsets`` may name partitions added to the topic after the range was opened: they join the
    range from offset 0 (a partition created after the open has no earlier range), so the changes
    Debezium wrote there before the watermark are in this range, not left to the next.
    ``watermark_txid``, the watermark's 64-bit transaction id, tells later whether a snapshot was
    taken after the seal (it then sees that transaction). Sealing again with the same ends and
    watermark is a no-op; other values raise ``RangeConflict`` unless ``force`` (a re-seal after the
    snapshot was taken again). A re-seal clears the range's compaction mark, since compact_cdc must
    read the new range, and raises ``LaterRunOpened`` once another run opened a range after the
    seal: the two ranges would overlap.
    """
    ends = {int(p): int(o) for p, o in end_offsets.items()}
    try:
        with conn.transaction():
            _lock_table(conn, table)
            rows = conn.execute(
                "SELECT partition, start_offset, end_offset, watermark_id, topic, opened_at "
                "FROM cdc_reconcile.offset_ranges WHERE run_id = %s AND table_name = %s ORDER BY partition FOR UPDATE",
                (run_id, table),
            ).fetchall()
            if not rows:
                raise RangeNotOpen(f"run {run_id!r} has no offset range for {table!r}; call open_range first")
            starts = {p: start for p, start, *_ in rows}
            if not set(starts) <= set(ends):
                raise ValueError(
                    f"seal_range({run_id!r}, {table!r}): end offsets for partitions {sorted(ends)} "
                    f"but the range was opened for partitions {sorted(starts)}"
                )
            added = sorted(set(ends) - set(starts))
            starts.update(dict.fromkeys(added, 0))
            below = {p: (starts[p], ends[p]) for p in starts if ends[p] < starts[p]}
            if below:
                raise ValueError(
                    f"seal_range({run_id!r}, {table!r}): end offset below start (start, end) {below}; "
                    "was the topic deleted and re-created, or its offsets reset?"
                )
            stored_ends = {p: end for p, _, end, *_ in rows}
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
                later = runs_opened_after(conn, run_id, table)
                if later:
                    raise later_run_opened(run_id, table, later)
                log.warning("run %s, table %s: re-sealing %s -> %s", run_id, table, stored_ends, ends)
            with conn.cursor() as cur:
                if added:
                    log.info(
                        "run %s, table %s: partitions %s were added since the open; sealing them too",
                        run_id,
                        table,
                        added,
                    )
                    topic, opened_at = rows[0][4], min(row[5] for row in rows)
                    cur.executemany(
                        "INSERT INTO cdc_reconcile.offset_ranges (run_id, table_name, topic, partition, start_offset, "
                        "opened_at) VALUES (%s, %s, %s, %s, 0, %s)",
                        [(run_id, table, topic, p, opened_at) for p in added],
                    )
                cur.executemany(
                    "UPDATE cdc_reconcile.offset_ranges SET end_offset = %s, watermark_id = %s, watermark_txid = %s, "
                    "sealed_at = clock_timestamp(), compacted_at = NULL "
                    "WHERE run_id = %s AND table_name = %s AND partition = %s",
                    [(ends[p], watermark_id, watermark_txid, run_id, table, p) for p in sorted(ends)],
                )
            sealed = _range_in(conn, run_id, table)
    except psycopg.errors.UndefinedTable as exc:
        raise state_schema_missing(exc) from exc
    log.info("run %s, table %s: sealed %s at %s (watermark %s)", run_id, table, sealed.topic, ends, watermark_id)
    return sealed


def runs_opened_after(conn: psycopg.Connection, run_id: str, table: str) -> list[str]:
    """Other runs that opened a range of the same table and topic after this run's range was sealed."""
    try:
        with conn.transaction():
            rows = conn.execute(
                "WITH this AS (SELECT topic, max(sealed_at) AS sealed_at FROM cdc_reconcile.offset_ranges "
                "WHERE run_id = %(run)s AND table_name = %(table)s GROUP BY topic) "
                "SELECT o.run_id FROM cdc_reconcile.offset_ranges o JOIN this ON o.topic = this.topic "
                "WHERE o.table_name = %(table)s AND o.run_id <> %(run)s AND o.opened_at > this.sealed_at "
                "GROUP BY o.run_id ORDER BY min(o.opened_at), o.run_id",
                {"run": run_id, "table": table},
            ).fetchall()
    except psycopg.errors.UndefinedTable as exc:
        raise state_schema_missing(exc) from exc
    return [row[0] for row in rows]


def record_compaction(conn: psycopg.Connection, run_id: str, table: str, offsets: tuple[str, str]) -> bool:
    """Mark this run's sealed range compacted, if ``offsets`` (Spark offset JSON) are exactly that range.

    ``open_range`` continues only after compacted ranges. Offsets other than the sealed range (given
    by hand, or read before a re-seal) mark nothing: the sealed range's changes are not in the lake.
    Returns whether the range was marked.
    """
    try:
        with conn.transaction():
            rows = conn.execute(f"{_RANGE_COLUMNS} FOR UPDATE", (run_id, table)).fetchall()
            current = _range_of(run_id, table, rows)
            if current is None or not current.sealed:
                log.info("run %s, table %s: no sealed range to mark compacted", run_id, table)
                return False
            if [json.loads(text) for text in current.as_spark_json()] != [json.loads(text) for text in offsets]:
                log.warning(
                    "run %s, table %s: compacted %s, not the sealed range %s; the range stays uncompacted",
                    run_id,
                    table,
                    offsets,
                    current.as_spark_json(),
                )
                return False
            conn.execute(
                "UPDATE cdc_reconcile.offset_ranges SET compacted_at = now() WHERE run_id = %s AND table_name = %s",
                (run_id, table),
            )
    except psycopg.errors.UndefinedTable as exc:
        raise state_schema_missing(exc) from exc
    log.info("run %s, table %s: range compacted", run_id, table)
    return True


def _range_in(conn: psycopg.Connection, run_id: str, table: str) -> OffsetRange:
    found = get_range(conn, run_id, table)
    assert found is not None
    return found


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
        raise state_schema_missing(exc) from exc


def forget_snapshot(conn: psycopg.Connection, run_id: str, table: str) -> None:
    """Drop the run's recorded snapshot before it is taken again, so no step pairs new rows with old metadata."""
    try:
        with conn.transaction():
            conn.execute("DELETE FROM cdc_reconcile.snapshots WHERE run_id = %s AND table_name = %s", (run_id, table))
    except psycopg.errors.UndefinedTable as exc:
        raise state_schema_missing(exc) from exc


def record_commit(conn: psycopg.Connection, run_id: str, table: str, dataset: str, location: str, commit: Any) -> None:
    """Record a Delta commit the run made (a ``storage.Commit``: version, metadata, metrics)."""
    base = commit.metadata.get("base_version")
    try:
        with conn.transaction():
            conn.execute(
                "INSERT INTO cdc_reconcile.lake_commits (run_id, table_name, dataset, location, version, base_version, "
                "rows_written, bytes_written) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (location, version) DO UPDATE SET run_id = EXCLUDED.run_id, "
                "table_name = EXCLUDED.table_name, dataset = EXCLUDED.dataset, base_version = EXCLUDED.base_version, "
                "rows_written = EXCLUDED.rows_written, bytes_written = EXCLUDED.bytes_written",
                (
                    run_id,
                    table,
                    dataset,
                    location,
                    commit.version,
                    None if base is None else int(base),
                    commit.rows_written,
                    commit.bytes_written,
                ),
            )
    except psycopg.errors.UndefinedTable as exc:
        raise state_schema_missing(exc) from exc


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
        raise state_schema_missing(exc) from exc
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


__all__ = [
    "SNAPSHOT_FIELDS",
    "STATE_SCHEMA",
    "OffsetRange",
    "RangeConflict",
    "RangeNotOpen",
    "StateSchemaMissing",
    "StateStoreUnavailable",
    "connect",
    "describe_dsn",
    "ensure_state_schema",
    "forget_snapshot",
    "get_range",
    "get_snapshot",
    "open_range",
    "record_commit",
    "record_compaction",
    "record_snapshot",
    "runs_opened_after",
    "seal_range",
    "set_run_status",
    "snapshot_fields",
    "state_schema_missing",
]
