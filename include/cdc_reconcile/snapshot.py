"""A consistent snapshot of one source table, read over JDBC in parallel, published as Parquet.

Why it is built this way (DESIGN.md sections 5 and 6):

* Parallel JDBC partitions are separate connections. They describe one point in time only if they
  all import the same snapshot: a psycopg connection opens a REPEATABLE READ transaction, exports its
  snapshot (``pg_export_snapshot()``) and stays open while Spark reads; every partition runs
  ``SET TRANSACTION SNAPSHOT`` in its ``sessionInitStatement``.
* Spark's PostgreSQL dialect turns autocommit off only when ``fetchsize > 0`` and runs the session
  init statement after that. With ``fetchsize=0`` the import runs in its own implicit transaction and
  the SELECT silently reads the *current* data at READ COMMITTED. So the fetch size must be
  positive, and every partition's predicate carries a guard that compares the snapshot the partition
  actually reads with the exported one and fails the query when they differ.
* The snapshot's ``xmin:xmax:xip`` and WAL LSN are recorded so the CDC side can be folded over
  exactly the transactions this snapshot saw.
* Columns are read in the types the Debezium decoder produces (``debezium.pgtypes.spark_type``), so the two
  sides compare like with like; the column type spec from the catalog is stored with the snapshot.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import math
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from . import storage
from .config import TableConfig, load_config
from .debezium.pgtypes import DEFAULT_OPTIONS, DecodeOptions, PgType, spark_type
from .visibility import PgSnapshot

DEFAULT_FETCH_SIZE = 10_000
DEFAULT_PARTITIONS = 4
INTEGER_KEY_TYPES = frozenset({"smallint", "integer", "bigint"})
READABLE_RELKINDS = {
    "r": "table",
    "p": "partitioned table",
    "v": "view",
    "m": "materialized view",
    "f": "foreign table",
}
DATASET = "snapshot"
APPLICATION_NAME = "cdc-reconcile-snapshot"  # how the exporting session shows in pg_stat_activity


class SnapshotError(RuntimeError):
    """The snapshot cannot be taken for a reason the user can fix; the message says which."""


@dataclass(frozen=True)
class SourceColumn:
    """One column as the catalog describes it (``format_type`` text, e.g. ``numeric(12,2)``)."""

    name: str
    type: str
    not_null: bool


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
            "columns": [{"name": c.name, "type": c.type, "not_null": c.not_null} for c in self.columns],
            "key_range": list(self.key_range) if self.key_range else None,
            **extra,
        }


@dataclass(frozen=True)
class SnapshotResult:
    """What one run of the snapshot job produced."""

    snapshot: SourceSnapshot
    version: str
    path: str
    rows: int
    seconds: float
    partitions: int
    metadata: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """The one-line JSON summary the Spark job prints."""
        return {
            "table": self.snapshot.table,
            "version": self.version,
            "path": self.path,
            "rows": self.rows,
            "seconds": round(self.seconds, 2),
            "partitions": self.partitions,
            "xmin": self.snapshot.snapshot.xmin,
            "xmax": self.snapshot.snapshot.xmax,
            "xip": list(self.snapshot.snapshot.xip),
            "lsn": self.snapshot.lsn,
            "lsn_int": self.snapshot.lsn_int,
        }


# --------------------------------------------------------------------------------------------------
# small pure helpers


def parse_lsn(text: str) -> int:
    """``'16/B374D848'`` -> ``(0x16 << 32) | 0xB374D848``: comparable with Debezium's ``source.lsn``."""
    hi, sep, lo = text.strip().partition("/")
    if not sep:
        raise ValueError(f"not a pg_lsn: {text!r}")
    try:
        return (int(hi, 16) << 32) | int(lo, 16)
    except ValueError as exc:
        raise ValueError(f"not a pg_lsn: {text!r}") from exc


def resolve_table(name: str, tables_config: str | Path | None = None) -> TableConfig:
    """The configured table called ``name``; unknown names never reach SQL (ConfigError names the known ones)."""
    return load_config(tables_config).table(name)


def dataset_path(lake_root: str | Path, table: str) -> str:
    """Where a table's snapshot dataset lives: ``<lake_root>/<schema.table>/snapshot``."""
    return str(Path(lake_root) / table / DATASET)


def _ident(*names: str) -> str:
    return sql.Identifier(*names).as_string()


def _describe_dsn(dsn: str) -> str:
    """host:port/dbname of a libpq string, without the password, for error messages."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparsable dsn>"
    return f"{params.get('host', 'localhost')}:{params.get('port', 5432)}/{params.get('dbname', '?')}"


# --------------------------------------------------------------------------------------------------
# extract: the exported snapshot


_SNAPSHOT_SQL = """
SELECT pg_export_snapshot(),
       pg_current_snapshot()::text,
       (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END)::text,
       now()
"""

_COLUMNS_SQL = """
SELECT c.oid, c.relkind, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
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


def _connect(dsn: str, user: str | None, password: str | None, connect_timeout: int) -> psycopg.Connection:
    overrides = {k: v for k, v in (("user", user), ("password", password)) if v}
    try:
        return psycopg.connect(
            dsn, autocommit=True, connect_timeout=connect_timeout, application_name=APPLICATION_NAME, **overrides
        )
    except psycopg.OperationalError as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SnapshotError(
            f"cannot connect to PostgreSQL at {_describe_dsn(dsn)}: {detail}. "
            "Is the database running (cdc-stack status), and are --dsn, --user and --password right?"
        ) from exc


def _catalog(conn: psycopg.Connection, table: TableConfig) -> tuple[int, tuple[SourceColumn, ...]]:
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
    columns = tuple(SourceColumn(name, type_, bool(nn)) for _, _, name, type_, nn in found if name is not None)
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
    if not conn.execute("SELECT has_table_privilege(%s, 'SELECT')", (oid,)).fetchone()[0]:
        raise SnapshotError(f"user {conn.info.user} may not SELECT from {table.name}; GRANT SELECT ON {table.name}")
    return oid, columns


@contextlib.contextmanager
def exported_snapshot(
    dsn: str,
    table: TableConfig,
    *,
    user: str | None = None,
    password: str | None = None,
    connect_timeout: int = 10,
) -> Iterator[SourceSnapshot]:
    """Export a REPEATABLE READ snapshot and keep it importable until the block ends.

    The exporting transaction must stay open while anyone imports the snapshot (the JDBC partitions),
    so the caller does all its reading inside the ``with`` block.
    """
    conn = _connect(dsn, user, password, connect_timeout)
    try:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        # This session idles in its transaction while Spark reads; a server-wide timeout must not end it.
        conn.execute("SET LOCAL idle_in_transaction_session_timeout = 0")
        snapshot_id, snapshot_text, lsn, taken_at = conn.execute(_SNAPSHOT_SQL).fetchone()
        _, columns = _catalog(conn, table)
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
            snapshot=PgSnapshot.parse(snapshot_text),
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


def snapshot_guard(snapshot_text: str) -> str:
    """A predicate that is true when the partition reads the snapshot and fails the query otherwise.

    ``snapshot_text`` is ``pg_current_snapshot()::text`` as the exporting transaction saw it; an
    importing transaction reports the same text.

    It is a scalar subquery, evaluated once per partition query. The failing branch casts a message to
    int (the only way to raise from plain SQL); it mentions ``pg_current_snapshot()`` so PostgreSQL
    cannot fold it into an error at plan time.
    """
    expected = sql.Literal(snapshot_text).as_string()
    message = sql.Literal(
        f"cdc-reconcile: this JDBC partition does not read the exported snapshot {snapshot_text} "
        "(is fetchsize > 0?); it reads "
    ).as_string()
    return (
        f"(SELECT CASE WHEN pg_current_snapshot()::text = {expected} THEN true "
        f"ELSE ({message} || pg_current_snapshot()::text)::int IS NULL END)"
    )


def partition_predicates(snapshot: SourceSnapshot, partitions: int) -> list[str]:
    """One WHERE clause per JDBC partition; together they cover every row exactly once.

    An integer first key column is split into ranges over [min, max] (the open ends also catch NULL
    and anything outside); otherwise rows are spread by a hash of the whole key.
    """
    if partitions < 1:
        raise ValueError(f"partitions must be at least 1, got {partitions}")
    guard = snapshot_guard(snapshot.snapshot_text)
    if partitions == 1 or (snapshot.key_range is None and _is_integer_key(snapshot)):
        clauses = ["TRUE"]
    elif snapshot.key_range is not None:
        clauses = range_clauses(_ident(snapshot.key[0]), *snapshot.key_range, partitions)
    else:
        row = ", ".join(_ident(k) for k in snapshot.key)
        clauses = [f"mod(abs(hashtext(ROW({row})::text)::bigint), {partitions}) = {i}" for i in range(partitions)]
    return [f"({clause}) AND {guard}" for clause in clauses]


def _is_integer_key(snapshot: SourceSnapshot) -> bool:
    first = PgType.parse(snapshot.spec[snapshot.key[0]])
    return first.name in INTEGER_KEY_TYPES and not first.is_array


def range_clauses(column: str, low: int, high: int, partitions: int) -> list[str]:
    """Up to ``partitions`` disjoint ranges of a quoted integer column covering every value and NULL."""
    step = max(1, math.ceil((high - low + 1) / partitions))
    bounds = [low + i * step for i in range(1, partitions) if low + i * step <= high]
    if not bounds:
        return ["TRUE"]
    clauses = [f"{column} < {bounds[0]} OR {column} IS NULL"]
    clauses += [f"{column} >= {a} AND {column} < {b}" for a, b in itertools.pairwise(bounds)]
    clauses.append(f"{column} >= {bounds[-1]}")
    return clauses


def session_init_statement(snapshot_id: str) -> str:
    """Run by each JDBC partition after the dialect opened its transaction (needs fetchsize > 0)."""
    literal = sql.Literal(snapshot_id).as_string()
    return f"SET TRANSACTION ISOLATION LEVEL REPEATABLE READ; SET TRANSACTION SNAPSHOT {literal}"


def jdbc_properties(
    snapshot_id: str, *, user: str, password: str | None, fetch_size: int = DEFAULT_FETCH_SIZE
) -> dict[str, str]:
    """Connection properties for ``spark.read.jdbc`` that make every partition import the snapshot."""
    if fetch_size <= 0:
        raise ValueError(
            f"fetch_size must be positive (got {fetch_size}): Spark's PostgreSQL dialect keeps autocommit on "
            "for fetchsize 0, and the imported snapshot would not apply to the SELECT"
        )
    properties = {
        "user": user,
        "driver": "org.postgresql.Driver",
        "fetchsize": str(fetch_size),
        "sessionInitStatement": session_init_statement(snapshot_id),
        "preferTimestampNTZ": "true",
    }
    if password:
        properties["password"] = password
    return properties


def _projection(name: str, pg_type: str, options: DecodeOptions) -> str:
    """How a column is selected so JDBC can carry it and ``transform`` can type it like the decoder."""
    t = PgType.parse(pg_type)
    target = spark_type(t, options)
    column = _ident(name)
    if t.is_array:
        expr = f"{column}::text[]" if isinstance(target.elementType, T.StringType) else column
    elif t.name in ("numeric", "money"):
        expr = f"{column}::numeric::text"  # NaN/Infinity and unbounded scale survive JDBC as text
    elif t.name == "time":
        expr = f"(EXTRACT(EPOCH FROM {column}) * 1000000)::bigint"
    elif t.name == "interval" and isinstance(target, T.LongType):
        expr = (
            f"trunc(((EXTRACT(YEAR FROM {column}) * 12 + EXTRACT(MONTH FROM {column})) * 30.4375"
            f" + EXTRACT(DAY FROM {column})) * 86400000000 + EXTRACT(HOUR FROM {column}) * 3600000000"
            f" + EXTRACT(MINUTE FROM {column}) * 60000000 + EXTRACT(MICROSECONDS FROM {column}))::bigint"
        )
    elif isinstance(target, T.StringType):
        expr = f"{column}::text"
    else:
        expr = column
    return f"{expr} AS {column}"


def source_query(snapshot: SourceSnapshot, options: DecodeOptions = DEFAULT_OPTIONS) -> str:
    """The JDBC ``dbtable``: the table's columns in ordinal order, projected for transport."""
    projections = ", ".join(_projection(c.name, c.type, options) for c in snapshot.columns)
    schema, table = snapshot.table.split(".", 1)
    return f"(SELECT {projections} FROM {_ident(schema, table)}) AS cdc_snapshot"


def read_snapshot(
    spark: SparkSession,
    snapshot: SourceSnapshot,
    *,
    jdbc_url: str,
    user: str,
    password: str | None,
    partitions: int = DEFAULT_PARTITIONS,
    fetch_size: int = DEFAULT_FETCH_SIZE,
    options: DecodeOptions = DEFAULT_OPTIONS,
) -> DataFrame:
    """The table as of ``snapshot``, read by ``partitions`` parallel JDBC queries (lazy: read inside the block)."""
    return spark.read.jdbc(
        jdbc_url,
        source_query(snapshot, options),
        predicates=partition_predicates(snapshot, partitions),
        properties=jdbc_properties(snapshot.snapshot_id, user=user, password=password, fetch_size=fetch_size),
    )


# --------------------------------------------------------------------------------------------------
# transform and load


def transform(df: DataFrame, spec: Mapping[str, str], options: DecodeOptions = DEFAULT_OPTIONS) -> DataFrame:
    """Type the JDBC rows exactly as the Debezium decoder types change events (``debezium.pgtypes.spark_type``).

    Columns come out in spec (ordinal) order. Text carried for exactness (numerics) is parsed with
    ``try_cast``, so a value the target cannot hold (NaN) becomes NULL instead of failing the job.
    """
    missing = [name for name in spec if name not in df.columns]
    if missing:
        raise ValueError(f"columns {missing} of the table spec are not in the DataFrame ({df.columns})")
    source = {f.name: f.dataType for f in df.schema.fields}
    out = []
    for name, pg_type in spec.items():
        target = spark_type(pg_type, options)
        column = F.col("`" + name.replace("`", "``") + "`")
        if source[name] == target:
            typed = column
        elif isinstance(source[name], T.StringType):
            typed = column.try_cast(target)
        else:
            typed = column.cast(target)
        out.append(typed.alias(name))
    return df.select(*out)


def load(
    df: DataFrame,
    snapshot: SourceSnapshot,
    *,
    lake_root: str | Path,
    run_id: str,
    output_files: int = 1,
    extra_metadata: Mapping[str, Any] | None = None,
) -> tuple[str, str]:
    """Publish the typed snapshot as version ``run_id`` (made path-safe) of ``<table>/snapshot``.

    The metadata travels inside the version folder, so it is live exactly when the data is.
    Returns (version, folder).
    """
    version = storage.safe_name(run_id)
    folder = storage.publish(
        df,
        dataset_path(lake_root, snapshot.table),
        version,
        sort_by=list(snapshot.key),
        partitions=output_files,
        metadata=snapshot.metadata(run_id=run_id, **(extra_metadata or {})),
    )
    return version, folder


def unrepresentable_values(
    dsn: str,
    snapshot: SourceSnapshot,
    options: DecodeOptions = DEFAULT_OPTIONS,
    *,
    user: str | None = None,
    password: str | None = None,
    connect_timeout: int = 10,
) -> dict[str, int]:
    """Per numeric column, the snapshot's values that its lake type cannot hold (NaN, +-Infinity, too many digits).

    Debezium sends such a value as null in precise decimal mode and the snapshot types it as null, so
    both sides agree and the diff cannot see it: this count, taken in the same exported snapshot, is
    what reports it. Only columns with a non-zero count are returned.
    """
    checks: list[tuple[str, sql.Composable]] = []
    for column in snapshot.columns:
        pg_type = PgType.parse(column.type)
        target = spark_type(pg_type, options)
        if pg_type.name == "numeric" and not pg_type.is_array and isinstance(target, T.DecimalType):
            # NaN sorts above every number in PostgreSQL: one comparison catches NaN, Infinity and overflow
            limit = sql.SQL(f"1e{target.precision - target.scale}")
            counted = sql.SQL("count(*) FILTER (WHERE abs({}) >= {})").format(sql.Identifier(column.name), limit)
            checks.append((column.name, counted))
    if not checks:
        return {}
    schema, table = snapshot.table.split(".", 1)
    query = sql.SQL("SELECT {} FROM {}").format(
        sql.SQL(", ").join(expr for _, expr in checks), sql.Identifier(schema, table)
    )
    with _connect(dsn, user, password, connect_timeout) as conn:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot.snapshot_id)))
        counts = conn.execute(query).fetchone()
        conn.execute("COMMIT")
    return {name: int(n) for (name, _), n in zip(checks, counts, strict=True) if n}


def snapshot_table(
    spark: SparkSession,
    table: TableConfig,
    *,
    dsn: str,
    jdbc_url: str,
    user: str,
    password: str | None,
    lake_root: str | Path,
    run_id: str,
    partitions: int = DEFAULT_PARTITIONS,
    fetch_size: int = DEFAULT_FETCH_SIZE,
    output_files: int = 1,
    options: DecodeOptions = DEFAULT_OPTIONS,
) -> SnapshotResult:
    """Extract, transform, load: one consistent snapshot of ``table`` published under ``lake_root``."""
    began = time.monotonic()
    with exported_snapshot(dsn, table, user=user, password=password) as snap:
        df = transform(
            read_snapshot(
                spark,
                snap,
                jdbc_url=jdbc_url,
                user=user,
                password=password,
                partitions=partitions,
                fetch_size=fetch_size,
                options=options,
            ),
            snap.spec,
            options,
        )
        version, folder = load(
            df,
            snap,
            lake_root=lake_root,
            run_id=run_id,
            output_files=output_files,
            extra_metadata={
                "jdbc_partitions": partitions,
                "unrepresentable": unrepresentable_values(dsn, snap, options, user=user, password=password),
            },
        )
    metadata = storage.read_metadata(dataset_path(lake_root, table.name), version) or {}
    return SnapshotResult(
        snapshot=snap,
        version=version,
        path=folder,
        rows=int(metadata.get("rows", 0)),
        seconds=time.monotonic() - began,
        partitions=partitions,
        metadata=metadata,
    )
