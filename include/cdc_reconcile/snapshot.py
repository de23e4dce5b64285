"""A consistent snapshot of one source table, read over JDBC in parallel, published as Parquet.

Why it is built this way:

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

import itertools
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from psycopg import sql
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from . import storage
from .config import TableConfig
from .debezium.pgtypes import DEFAULT_OPTIONS, DecodeOptions, PgType, canonical_array, canonical_text, spark_type
from .source_snapshot import (
    INTEGER_KEY_TYPES,
    SourceSnapshot,
    column_projection,
    exported_snapshot,
    sql_identifier,
    unrepresentable_values,
)

DEFAULT_FETCH_SIZE = 10_000
DEFAULT_PARTITIONS = 4
DATASET = "snapshot"


@dataclass(frozen=True)
class SnapshotResult:
    """What one run of the snapshot job produced."""

    snapshot: SourceSnapshot
    version: str
    path: str
    commit: storage.Commit
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


def dataset_path(lake_root: str | Path, table: str) -> str:
    """Where a table's snapshot dataset lives: ``<lake_root>/<schema.table>/snapshot`` (a URI)."""
    return storage.join(lake_root, table, DATASET)


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
        clauses = range_clauses(sql_identifier(snapshot.key[0]), *snapshot.key_range, partitions)
    else:
        row = ", ".join(sql_identifier(k) for k in snapshot.key)
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


def source_query(snapshot: SourceSnapshot, options: DecodeOptions = DEFAULT_OPTIONS) -> str:
    """The JDBC ``dbtable``: the table's columns in ordinal order, projected for transport."""
    projections = ", ".join(column_projection(c.name, c.type, options) for c in snapshot.columns)
    schema, table = snapshot.table.split(".", 1)
    return f"(SELECT {projections} FROM {sql_identifier(schema, table)}) AS cdc_snapshot"


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
        canonical = canonical_text(pg_type, options) or canonical_array(pg_type, options)
        if canonical is not None:
            typed = canonical(column)
        elif source[name] == target:
            typed = column
        elif isinstance(source[name], T.StringType) or (
            isinstance(source[name], T.ArrayType) and isinstance(source[name].elementType, T.StringType)
        ):
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
) -> storage.Commit:
    """Replace run ``run_id``'s partition (its path-safe name) of ``<table>/snapshot`` in one commit.

    The snapshot's metadata is the commit's own metadata, so it is live exactly when the rows are.
    """
    return storage.replace_partition(
        df,
        dataset_path(lake_root, snapshot.table),
        storage.safe_name(run_id),
        sort_by=list(snapshot.key),
        partitions=output_files,
        metadata=snapshot.metadata(run_id=run_id, **(extra_metadata or {})),
    )


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
    with exported_snapshot(dsn, table, user=user, password=password, options=options) as snap:
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
        commit = load(
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
    metadata = {**commit.metadata, "rows": commit.rows_written, "delta_version": commit.version}
    return SnapshotResult(
        snapshot=snap,
        version=commit.metadata["run"],
        path=dataset_path(lake_root, table.name),
        commit=commit,
        rows=commit.rows_written,
        seconds=time.monotonic() - began,
        partitions=partitions,
        metadata=metadata,
    )
