"""Read the captured table straight from PostgreSQL, the side the lake is checked against."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql


def rows_by_key(pg: psycopg.Connection, table: str, columns: list[str]) -> dict[Any, tuple[Any, ...]]:
    """``table``'s rows as ``{first column: (the other columns)}``, the shape of ``lake.rows_by_key``."""
    schema, _, name = table.rpartition(".")
    query = sql.SQL("SELECT {} FROM {}").format(
        sql.SQL(", ").join(map(sql.Identifier, columns)), sql.Identifier(schema or "public", name)
    )
    return {row[0]: tuple(row[1:]) for row in pg.execute(query).fetchall()}
