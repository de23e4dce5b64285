"""The source side of a snapshot: the table's catalog, the exported PostgreSQL snapshot, checks in it.

A psycopg connection opens a REPEATABLE READ transaction, exports its snapshot
(``pg_export_snapshot()``) and stays open while Spark's JDBC partitions import it; the snapshot's
``xmin:xmax:xip`` and WAL LSN are what the CDC side is folded against.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from pyspark.sql import types as T

from .config import TableConfig
from .debezium.pgtypes import DEFAULT_OPTIONS, DecodeOptions, PgType, not_carried, spark_type
from .errors import InputError, UnreachableError
from .state_store import describe_dsn
from .visibility import PgSnapshot

log = logging.getLogger(__name__)

INTEGER_KEY_TYPES = frozenset({"smallint", "integer", "bigint"})
READABLE_RELKINDS = {
    "r": "table",
    "p": "partitioned table",
    "v": "view",
    "m": "materialized view",
    "f": "foreign table",
}
APPLICATION_NAME = "cdc-reconcile-snapshot"  # how the exporting session shows in pg_stat_activity


class SnapshotError(InputError):
    """The snapshot cannot be taken for a reason the user can fix; the message says which."""


class SourceUnavailable(SnapshotError, UnreachableError):
    """The source database did not answer."""


@dataclass(frozen=True)
class SourceColumn:
    """One column as the catalog describes it (``format_type`` text, e.g. ``numeric(12,2)``)."""

    name: str
    type: str
    not_null: bool
    attnum: int | None = None  # the column's identity: it survives a rename, a re-added name gets a new one
    # The value rows that existed when the column was added hold (PostgreSQL fills it without a change
    # event), in the text form ``ColumnLineage.missing_value`` types; None: NULL or unknown.
    missing_value: str | None = None


@dataclass(frozen=True)
class SourceSnapshot:
    """An exported PostgreSQL snapshot of one table, valid while its exporting transaction is open."""

    table: str
    key: tuple[str, ...]
    snapshot_id: str
    snapshot: PgSnapshot
    snapshot_text: str
    lsn: str
    taken_at: dt.datetime
    columns: tuple[SourceColumn, ...]
    key_range: tuple[int, int] | None = None

    @property
    def lsn_int(self) -> int:
        return parse_lsn(self.lsn)

    @property
    def spec(self) -> dict[str, str]:
        """Column name -> PostgreSQL type, in ordinal order (the table spec the decoder takes)."""
        return {c.name: c.type for c in self.columns}

    def metadata(self, **extra: Any) -> dict[str, Any]:
        """What the snapshot saw, as stored in the dataset version's JSON sidecar."""
        return {
            "table": self.table,
            "key": list(self.key),
            "snapshot_id": self.snapshot_id,
            "snapshot": self.snapshot_text,
            "xmin": self.snapshot.xmin,
            "xmax": self.snapshot.xmax,
            "xip": list(self.snapshot.xip),
            "lsn": self.lsn,
            "lsn_int": self.lsn_int,
            "taken_at": self.taken_at.astimezone(dt.UTC).isoformat(),
            "columns": [
                {
                    "name": c.name,
                    "type": c.type,
                    "not_null": c.not_null,
                    "attnum": c.attnum,
                    "missing_value": c.missing_value,
                }
                for c in self.columns
            ],
            "key_range": list(self.key_range) if self.key_range else None,
            **extra,
        }


def parse_lsn(text: str) -> int:
    """``'16/B374D848'`` -> ``(0x16 << 32) | 0xB374D848``: comparable with Debezium's ``source.lsn``."""
    hi, sep, lo = text.strip().partition("/")
    if not sep:
        raise ValueError(f"not a pg_lsn: {text!r}")
    try:
        return (int(hi, 16) << 32) | int(lo, 16)
    except ValueError as exc:
        raise ValueError(f"not a pg_lsn: {text!r}") from exc


def sql_identifier(*names: str) -> str:
    """A quoted SQL identifier (``schema.table`` as two names)."""
    return sql.Identifier(*names).as_string()


# --------------------------------------------------------------------------------------------------
# extract: the exported snapshot


_SNAPSHOT_SQL = """
SELECT pg_export_snapshot(),
       pg_current_snapshot()::text,
       (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END)::text,
       now()
"""

_COLUMNS_SQL = """
SELECT c.oid, c.relkind, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, a.attnum,
       CASE WHEN a.atthasmissing AND t.typcategory <> 'A' THEN (a.attmissingval::text::text[])[1] END
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
LEFT JOIN pg_type t ON t.oid = a.atttypid
WHERE n.nspname = %s AND c.relname = %s
ORDER BY a.attnum
"""

_UNIQUE_KEYS_SQL = """
SELECT array_agg(a.attname::text ORDER BY a.attname)
FROM pg_index i
JOIN LATERAL unnest(i.indkey) AS k(attnum) ON true
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
WHERE i.indrelid = %s AND i.indisunique AND i.indisvalid AND i.indpred IS NULL AND 0 <> ALL (i.indkey)
GROUP BY i.indexrelid
"""


# date and timestamp types whose +-infinity no Spark value holds (JDBC would overflow reading it)
FINITE_TYPES = ("date", "timestamp", "timestamptz")


def interval_micros(column: str) -> str:
    """An interval as Debezium's ``MicroDuration`` computes it: in doubles, truncated to microseconds.

    A month counts 30.4375 days. Computed exactly instead, about 1 % of sub-second values come out
    1 us above Debezium's (``3 days 04:05:00.29`` is 273900289999 there), and every such row is stale.
    PostgreSQL's float8 is the same IEEE double, and the fields are combined in Debezium's order.
    """
    part = lambda field: f"EXTRACT({field} FROM {column})::float8"  # noqa: E731
    days = f"(EXTRACT(YEAR FROM {column}) * 12 + EXTRACT(MONTH FROM {column}))::float8 * 30.4375 + {part('DAY')}"
    seconds = f"((({days}) * 24 + {part('HOUR')}) * 60 + {part('MINUTE')}) * 60 + {part('SECOND')}"
    return f"trunc(({seconds}) * 1000000)::bigint"


def interval_iso(column: str) -> str:
    """An interval as Debezium's string mode writes it: every field, seconds without trailing zeros."""
    field = lambda unit: f"EXTRACT({unit} FROM {column})::bigint"  # noqa: E731
    return (
        f"'P' || {field('YEAR')} || 'Y' || {field('MONTH')} || 'M' || {field('DAY')} || 'DT' || {field('HOUR')}"
        f" || 'H' || {field('MINUTE')} || 'M' || trim_scale(EXTRACT(SECOND FROM {column}))::text || 'S'"
    )


def _element_projection(t: PgType, element: str) -> str | None:
    """How one element of an array of ``t`` is selected to meet Debezium's form of it; None: as the array is."""
    if t.name == "timetz":  # Debezium drops the fraction of an array's element: counted by unrepresentable_values
        return f"to_char(({element} AT TIME ZONE 'UTC')::time, 'HH24:MI:SS') || 'Z'"
    if t.name == "hstore":
        return f"hstore_to_json({element})::text"
    if t.name == "inet":
        return f"abbrev({element})"
    if t.name == "character":
        return f"rpad({element}::text, {t.args[0] if t.args else 1})"
    if t.name == "time":  # Debezium sends an array's times to the millisecond: counted by unrepresentable_values
        return f"floor(EXTRACT(EPOCH FROM {element}) * 1000)::bigint * 1000"
    if t.name in ("numeric", "money"):
        return f"{element}::numeric::text"
    if t.name in FINITE_TYPES:
        return f"CASE WHEN isfinite({element}) THEN {element} END"
    return None


def column_projection(name: str, pg_type: str, options: DecodeOptions) -> str:
    """How a column is selected so JDBC can carry it and the snapshot's ``transform`` can type it like the decoder."""
    t = PgType.parse(pg_type)
    target = spark_type(t, options)
    column = sql_identifier(name)
    element = _element_projection(t.element(), "e") if t.is_array else None
    if not_carried(t) is not None:  # the lake holds it as null; unrepresentable_values counts its values
        expr = "NULL::text[]" if t.is_array else "NULL::text"
    elif element is not None:
        expr = (
            f"CASE WHEN {column} IS NOT NULL THEN "
            f"ARRAY(SELECT {element} FROM unnest({column}) WITH ORDINALITY AS u(e, n) ORDER BY n) END"
        )
    elif t.is_array:
        expr = f"{column}::text[]" if isinstance(target.elementType, T.StringType) else column
    elif t.name in ("numeric", "money"):
        expr = f"{column}::numeric::text"  # NaN/Infinity and unbounded scale survive JDBC as text
    elif t.name == "time":
        expr = f"(EXTRACT(EPOCH FROM {column}) * 1000000)::bigint"
    elif t.name == "timetz":
        expr = f"(({column} AT TIME ZONE 'UTC')::time)::text || 'Z'"  # Debezium's form: UTC, ISO-8601
    elif t.name == "inet":
        expr = f"abbrev({column})"  # the output function's text; ::text always adds the netmask
    elif t.name == "point":
        expr = f"json_build_object('x', {column}[0], 'y', {column}[1])::text"
    elif t.name == "hstore":
        expr = f"hstore_to_json({column})::text"  # Debezium's hstore.handling.mode=json; keys sorted by both
    elif t.name == "character" and not t.is_array:
        expr = f"rpad({column}::text, {t.args[0] if t.args else 1})"  # ::text drops the padding Debezium keeps
    elif t.name == "bit varying":
        expr = f"ltrim({column}::text, '0')"  # Debezium's form keeps no leading zero: unrepresentable_values
    elif t.name in FINITE_TYPES:
        expr = f"CASE WHEN isfinite({column}) THEN {column} END"  # +-infinity: counted by unrepresentable_values
    elif t.name == "interval" and isinstance(target, T.LongType):
        expr = interval_micros(column)
    elif t.name == "interval":
        expr = interval_iso(column)
    elif isinstance(target, T.StringType):
        expr = f"{column}::text"
    else:
        expr = column
    return f"{expr} AS {column}"


def connect_source(
    dsn: str, *, user: str | None = None, password: str | None = None, connect_timeout: int = 10
) -> psycopg.Connection:
    """An autocommit connection to the captured database; an unreachable one raises ``SourceUnavailable``."""
    overrides = {k: v for k, v in (("user", user), ("password", password)) if v}
    try:
        return psycopg.connect(
            dsn, autocommit=True, connect_timeout=connect_timeout, application_name=APPLICATION_NAME, **overrides
        )
    except psycopg.OperationalError as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SourceUnavailable(
            f"cannot connect to PostgreSQL at {describe_dsn(make_conninfo(dsn, **overrides))}: {detail}. "
            "Is the database running (cdc-stack status), and are --dsn, --user and --password right?"
        ) from exc


def _catalog(
    conn: psycopg.Connection, table: TableConfig, options: DecodeOptions = DEFAULT_OPTIONS
) -> tuple[int, tuple[SourceColumn, ...]]:
    """The table's columns, checked: the table exists, is readable and has the configured key."""
    found = conn.execute(_COLUMNS_SQL, (table.schema, table.table)).fetchall()
    if not found:
        raise SnapshotError(
            f"table {table.name} does not exist in database {conn.info.dbname}; "
            "create it or remove it from the table configuration (cdc_reconcile/config/tables.py)"
        )
    oid, relkind = found[0][0], found[0][1]
    if relkind not in READABLE_RELKINDS:
        raise SnapshotError(f"{table.name} is not a table or view (relkind {relkind!r}); it cannot be snapshotted")
    columns = tuple(
        SourceColumn(name, type_, bool(nn), attnum, _typed_text(conn, name, type_, missing, options))
        for _, _, name, type_, nn, attnum, missing in found
        if name is not None
    )
    names = [c.name for c in columns]
    missing = [k for k in table.key if k not in names]
    if missing:
        raise SnapshotError(
            f"table {table.name} has no column(s) {', '.join(missing)} of the configured key "
            f"{list(table.key)}; its columns are {names}. Fix 'key' for {table.name} in the table configuration"
        )
    if relkind in ("r", "p"):
        unique = {tuple(cols) for (cols,) in conn.execute(_UNIQUE_KEYS_SQL, (oid,)).fetchall()}
        if tuple(sorted(table.key)) not in unique:
            raise SnapshotError(
                f"the configured key {list(table.key)} of {table.name} is not its primary key or a unique "
                f"index, so rows cannot be matched by it; unique keys: {sorted(list(u) for u in unique)}. "
                "Fix 'key' in the table configuration or add the constraint"
            )
        require_not_null_key(table, columns)
    if not conn.execute("SELECT has_table_privilege(%s, 'SELECT')", (oid,)).fetchone()[0]:
        raise SnapshotError(f"user {conn.info.user} may not SELECT from {table.name}; GRANT SELECT ON {table.name}")
    return oid, columns


def _typed_text(
    conn: psycopg.Connection, name: str, pg_type: str, text: str | None, options: DecodeOptions
) -> str | None:
    """A column's missing value (PostgreSQL's text form) as the snapshot projects it, in a Spark-castable text.

    Evaluated in the exported snapshot's transaction (inside a savepoint: a value this cannot carry
    leaves it NULL, and rows holding it are then found stale by the diff and repaired, never hidden).
    """
    if text is None:
        return None
    query = sql.SQL("SELECT {} FROM (SELECT CAST({} AS {}) AS v) AS s").format(
        sql.SQL(column_projection("v", pg_type, options)), sql.Literal(text), sql.SQL(pg_type)
    )
    conn.execute("SAVEPOINT cdc_missing_value")
    try:
        (value,) = conn.execute(query).fetchone()
    except psycopg.Error as exc:
        conn.execute("ROLLBACK TO SAVEPOINT cdc_missing_value")
        log.warning(
            "column %s: the value its existing rows got when it was added (%r) cannot be carried (%s); "
            "rows holding it will be found stale and repaired",
            name,
            text,
            exc,
        )
        return None
    conn.execute("RELEASE SAVEPOINT cdc_missing_value")
    return _castable_text(value)


def _castable_text(value: Any) -> str | None:
    """A projected value as text Spark's cast reads back exactly (binary as base64)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, (dt.date, Decimal, int)):
        return str(value)
    return None


def require_not_null_key(table: TableConfig, columns: tuple[SourceColumn, ...]) -> None:
    """A unique index allows any number of rows with a NULL key column; such rows cannot be matched."""
    nullable = [c.name for c in columns if c.name in table.key and not c.not_null]
    if not nullable:
        return
    fixes = "; ".join(
        f"ALTER TABLE {sql_identifier(table.schema, table.table)} ALTER COLUMN {sql_identifier(c)} SET NOT NULL"
        for c in nullable
    )
    raise SnapshotError(
        f"the configured key {list(table.key)} of {table.name} has nullable column(s) {nullable}: a unique index "
        "lets any number of rows have a NULL key, and such rows cannot be told apart, folded or compared. "
        f"Make the key NOT NULL ({fixes}) or configure the primary key as 'key' for {table.name}"
    )


@contextlib.contextmanager
def exported_snapshot(
    dsn: str,
    table: TableConfig,
    *,
    user: str | None = None,
    password: str | None = None,
    connect_timeout: int = 10,
    options: DecodeOptions = DEFAULT_OPTIONS,
) -> Iterator[SourceSnapshot]:
    """Export a REPEATABLE READ snapshot and keep it importable until the block ends.

    The exporting transaction must stay open while anyone imports the snapshot (the JDBC partitions),
    so the caller does all its reading inside the ``with`` block.
    """
    conn = connect_source(dsn, user=user, password=password, connect_timeout=connect_timeout)
    try:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        # This session idles in its transaction while Spark reads; a server-wide timeout must not end it.
        conn.execute("SET LOCAL idle_in_transaction_session_timeout = 0")
        snapshot_id, snapshot_text, lsn, taken_at = conn.execute(_SNAPSHOT_SQL).fetchone()
        _, columns = _catalog(conn, table, options)
        key_range = None
        first = next(c for c in columns if c.name == table.key[0])
        if PgType.parse(first.type).name in INTEGER_KEY_TYPES and not PgType.parse(first.type).is_array:
            query = sql.SQL("SELECT min({k}), max({k}) FROM {t}").format(
                k=sql.Identifier(first.name), t=sql.Identifier(table.schema, table.table)
            )
            low, high = conn.execute(query).fetchone()
            key_range = (low, high) if low is not None else None
        yield SourceSnapshot(
            table=table.name,
            key=table.key,
            snapshot_id=snapshot_id,
            snapshot=PgSnapshot.parse(snapshot_text, taken_at),
            snapshot_text=snapshot_text,
            lsn=lsn,
            taken_at=taken_at,
            columns=columns,
            key_range=key_range,
        )
    finally:
        with contextlib.suppress(psycopg.Error):
            conn.execute("ROLLBACK")
        conn.close()


# --------------------------------------------------------------------------------------------------
# the JDBC read


def _unfit_value(name: str, pg_type: PgType, options: DecodeOptions) -> sql.Composable | None:
    """The condition on a row whose value of column ``name`` the lake cannot hold; None: every value fits.

    For an array, a row is unfit when one of its elements is.
    """
    if not_carried(pg_type) is not None:
        return sql.SQL("{} IS NOT NULL").format(sql.Identifier(name))
    if pg_type.is_array:
        element = _unfit_value("e", pg_type.element(), options)
        if pg_type.name == "timetz":  # Debezium sends an array's elements to the whole second
            element = sql.SQL("mod(EXTRACT(MICROSECONDS FROM e)::bigint, 1000000) <> 0")
        elif pg_type.name == "time":  # and an array's times to the millisecond
            element = sql.SQL("mod(EXTRACT(MICROSECONDS FROM e)::bigint, 1000) <> 0")
        if element is None:
            return None
        return sql.SQL("EXISTS (SELECT 1 FROM unnest({}) AS u(e) WHERE {})").format(sql.Identifier(name), element)
    target = spark_type(pg_type, options)
    column = sql.Identifier(name)
    if pg_type.name == "numeric" and isinstance(target, T.DecimalType):
        # NaN sorts above every number in PostgreSQL: one comparison catches NaN, Infinity and overflow
        unfit = sql.SQL("abs({c}) >= {limit}").format(c=column, limit=sql.SQL(f"1e{target.precision - target.scale}"))
        if not pg_type.args:
            # unconstrained numeric: more fractional digits than the lake's scale would be rounded
            unfit = sql.SQL("{unfit} OR scale({c}) > {s}").format(unfit=unfit, c=column, s=sql.Literal(target.scale))
        return unfit
    if pg_type.name in FINITE_TYPES:
        return sql.SQL("NOT isfinite({})").format(column)
    if pg_type.name == "bit varying":
        # Debezium sends the string's value: 0011, 011 and 11 are one event, so the length is lost
        return sql.SQL("{}::text LIKE '0%%'").format(column)
    return None


def unrepresentable_values(
    dsn: str,
    snapshot: SourceSnapshot,
    options: DecodeOptions = DEFAULT_OPTIONS,
    *,
    user: str | None = None,
    password: str | None = None,
    connect_timeout: int = 10,
) -> dict[str, int]:
    """Per column, the snapshot's values that its lake type cannot hold: numeric NaN, +-Infinity and too many
    digits, date and timestamp +-infinity, a bit varying with leading zeros, any value of a type Debezium
    does not carry (``not_carried``), and the same inside arrays, where Debezium also drops a
    ``timetz`` element's fraction of a second and a ``time`` element's digits below the millisecond.

    An unconstrained ``numeric`` value with more fractional digits than the lake's scale counts too:
    the snapshot would round it while its change event is quarantined.

    Debezium sends such a value as null in precise decimal mode and the snapshot types it as null, so
    both sides agree and the diff cannot see it: this count, taken in the same exported snapshot, is
    what reports it. Only columns with a non-zero count are returned.
    """
    checks: list[tuple[str, sql.Composable]] = []
    for column in snapshot.columns:
        unfit = _unfit_value(column.name, PgType.parse(column.type), options)
        if unfit is not None:
            checks.append((column.name, sql.SQL("count(*) FILTER (WHERE {})").format(unfit)))
    if not checks:
        return {}
    schema, table = snapshot.table.split(".", 1)
    query = sql.SQL("SELECT {} FROM {}").format(
        sql.SQL(", ").join(expr for _, expr in checks), sql.Identifier(schema, table)
    )
    with connect_source(dsn, user=user, password=password, connect_timeout=connect_timeout) as conn:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot.snapshot_id)))
        counts = conn.execute(query).fetchone()
        conn.execute("COMMIT")
    return {name: int(n) for (name, _), n in zip(checks, counts, strict=True) if n}
