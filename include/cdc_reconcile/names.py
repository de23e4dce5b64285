"""Source column names in Spark, taken literally.

A name given to ``F.col``, ``select``, ``groupBy`` or a window as a plain string is parsed: a dot
reads as struct access (``order.id`` is field ``id`` of column ``order``). Source columns may hold
dots, spaces or backticks in their names, so every column named by the source goes through here.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql import Column
from pyspark.sql import functions as F


def column(name: str) -> Column:
    """The top-level column called exactly ``name``."""
    return F.col("`" + name.replace("`", "``") + "`")


def columns(names: Iterable[str]) -> list[Column]:
    """:func:`column` for each name, in order."""
    return [column(name) for name in names]
