"""Read the lake without the pipeline's reader: delta-rs (no JVM) for rows and commit metadata, or plain
``spark.read.format("delta")`` where a test compares Spark types (delta-rs reads column-mapped tables,
the ones with names Delta refuses, as nulls).

Rows go through delta-rs's query engine (``QueryBuilder``), which applies the lake table's deletion
vectors; its plain ``to_pyarrow_table`` refuses tables that have them. :func:`duckdb_rows` reads
with a third engine, DuckDB's own Delta extension (``delta_scan``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder

RUN_COLUMN = "_cdc_run"  # stated here, not imported: the check must not go through the code it checks


def _local(location: str | Path) -> str:
    text = str(location)
    return text[len("file://") :] if text.startswith("file://") else text


def is_delta(location: str | Path) -> bool:
    return DeltaTable.is_deltatable(_local(location))


def delta_rows(
    location: str | Path, *, columns: list[str] | None = None, version: int | None = None, run: str | None = None
) -> list[dict[str, Any]]:
    """The rows of a Delta table (at ``version``; of one run's partition), read with delta-rs."""
    return delta_table(location, columns=columns, version=version, run=run).to_pylist()


def delta_table(
    location: str | Path, *, columns: list[str] | None = None, version: int | None = None, run: str | None = None
) -> pa.Table:
    """:func:`delta_rows` as an Arrow table."""
    table = DeltaTable(_local(location), version=version)
    picked = ", ".join('"' + c.replace('"', '""') + '"' for c in columns) if columns else "*"
    where = f" WHERE \"{RUN_COLUMN}\" = '{run}'" if run is not None else ""
    result = QueryBuilder().register("lake", table).execute(f"SELECT {picked} FROM lake{where}").read_all()
    return pa.table(result)


def commit_metadata(location: str | Path, run: str) -> dict[str, Any] | None:
    """The ``userMetadata`` of the newest commit that names ``run``, read from the log with delta-rs."""
    for commit in DeltaTable(_local(location)).history():
        text = commit.get("userMetadata")
        if text and json.loads(text).get("run") == run:
            return json.loads(text)
    return None


def versions(location: str | Path) -> list[tuple[int, dict[str, Any]]]:
    """(version, userMetadata) of every commit, oldest first."""
    found = []
    for commit in DeltaTable(_local(location)).history():
        text = commit.get("userMetadata")
        found.append((int(commit["version"]), json.loads(text) if text else {}))
    return sorted(found, key=lambda item: item[0])


def spark_rows(spark, location: str | Path, run: str | None = None):
    """The table as plain Spark reads it (no pipeline code), one run's partition when asked."""
    from pyspark.sql import functions as F

    df = spark.read.format("delta").load(str(location))
    if run is not None:
        df = df.filter(F.col(RUN_COLUMN) == run).drop(RUN_COLUMN)
    return df


def duckdb_rows(location: str | Path, query: str = "SELECT * FROM lake") -> list[tuple[Any, ...]]:
    """``query`` over the Delta table as ``lake``, run by DuckDB's Delta extension (delta-kernel-rs).

    The extension comes from PyPI (``duckdb-extension-delta``) and is loaded from its file, so
    nothing is fetched from DuckDB's extension site.
    """
    import duckdb
    import duckdb_extension_delta

    extension = next(Path(duckdb_extension_delta.__path__[0]).rglob("delta.duckdb_extension"))
    settings = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}
    with duckdb.connect(config=settings) as con:
        con.execute(f"LOAD '{extension}'")
        path = _local(location).replace("'", "''")
        return con.execute(f"WITH lake AS (SELECT * FROM delta_scan('{path}')) {query}").fetchall()


def rows_by_key(location: str | Path, columns: list[str]) -> dict[Any, tuple[Any, ...]]:
    """A Delta table read with delta-rs as ``{first column: (the other columns)}``: a one-column key's rows."""
    return {r[columns[0]]: tuple(r[c] for c in columns[1:]) for r in delta_rows(location, columns=columns)}
