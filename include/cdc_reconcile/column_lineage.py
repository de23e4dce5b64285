"""A run's columns against the lake table's: added, dropped, renamed or retyped since it was published.

PostgreSQL changes a table's columns without a change event per row. ``ADD COLUMN ... DEFAULT``
gives every existing row the default at once (the column's *missing value*, kept in the catalog), a
rename keeps every value under the new name, ``ALTER COLUMN ... TYPE`` rewrites the table. A run
knows its columns from its snapshot's catalog read, each with its ``attnum``: the column's identity,
kept by a rename and new for a name dropped and added again. The lake table stores each column's
attnum in its field metadata, so the run can tell a rename from a drop and an add, and beside it the
column's PostgreSQL type and, for a type Delta cannot hold as such (``time`` as int64 microseconds),
a ``comment`` saying how the value is encoded, for consumers of the lake.

Both inputs of older shape are made to fit the run's columns, so the fold never meets a column it
cannot resolve and never reports rows that merely predate a schema change:

* the previous lake table (:func:`conform`): a renamed column is read under its old name, a widened
  one is cast, a new one holds its missing value (NULL when it was added without a default);
* change events written before the change (:func:`ColumnLineage.image_fills`): an image without the
  column takes it under its old name, or its missing value.

A value PostgreSQL gave existing rows that the catalog does not keep (a volatile default, a table
rewritten since the column was added) is not known here: those rows differ from the snapshot, and the
diff finds them stale and repairs them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from . import names
from .debezium.pgtypes import DEFAULT_OPTIONS, DecodeOptions, PgType, canonical_text, spark_type, stored_encoding

ATTNUM_KEY = "cdc_reconcile.attnum"
PG_TYPE_KEY = "cdc_reconcile.pg_type"
# Spark's column-comment key: DESCRIBE shows it, and other Delta readers (delta-rs) see it as field metadata.
COMMENT_KEY = "comment"
# The keys a run writes from its own columns; a stored table holding other values is rewritten.
DESCRIPTION_KEYS = (PG_TYPE_KEY, COMMENT_KEY)


@dataclass(frozen=True)
class ColumnLineage:
    """The run's columns (from its snapshot) and how each maps onto the previous lake table's."""

    spec: dict[str, str]
    attnums: dict[str, int] = field(default_factory=dict)
    missing_values: dict[str, str] = field(default_factory=dict)
    sources: dict[str, str | None] = field(default_factory=dict)  # run column -> previous column, None: new
    retyped: frozenset[str] = frozenset()  # run columns the previous table stores with another type

    @classmethod
    def of(
        cls,
        columns: Sequence[Mapping[str, Any]],
        previous: T.StructType | None = None,
        options: DecodeOptions = DEFAULT_OPTIONS,
    ) -> ColumnLineage:
        """From the snapshot metadata's ``columns`` and the previous table's schema (None: no previous table)."""
        spec = {c["name"]: c["type"] for c in columns}
        attnums = {c["name"]: int(c["attnum"]) for c in columns if c.get("attnum") is not None}
        missing = {c["name"]: c["missing_value"] for c in columns if c.get("missing_value") is not None}
        lineage = cls(spec, attnums, missing)
        if previous is None:
            return lineage
        sources = _sources(lineage, previous)
        stored = {f.name: f.dataType for f in previous.fields}
        retyped = frozenset(
            name for name, old in sources.items() if old is not None and stored[old] != spark_type(spec[name], options)
        )
        return cls(spec, attnums, missing, sources, retyped)

    @property
    def renamed_from(self) -> dict[str, str]:
        """Run column -> its name in the previous table, for columns renamed since."""
        return {name: old for name, old in self.sources.items() if old is not None and old != name}

    def missing_value(self, name: str, options: DecodeOptions = DEFAULT_OPTIONS) -> Column:
        """The value a row that predates column ``name`` holds in it, typed as the lake stores the column."""
        target = spark_type(self.spec[name], options)
        text = self.missing_values.get(name)
        if text is None:
            return F.lit(None).cast(target)
        if PgType.parse(self.spec[name]).name == "bytea" and isinstance(target, T.BinaryType):
            return F.unbase64(F.lit(text))
        canonical = canonical_text(self.spec[name], options)
        if canonical is not None:
            return canonical(F.lit(text))
        return F.lit(text).try_cast(target)

    def image_fills(self, options: DecodeOptions = DEFAULT_OPTIONS) -> dict[str, tuple[str | None, Column]]:
        """For a change-event image without a run column: the old name to read it under, and the value otherwise.

        Only columns that need something other than NULL are listed.
        """
        renamed = self.renamed_from
        return {
            name: (renamed.get(name), self.missing_value(name, options))
            for name in self.spec
            if name in renamed or name in self.missing_values
        }


def column_ids(schema: T.StructType) -> dict[str, int]:
    """Column name -> source attnum, as stored in the lake table's field metadata."""
    return {f.name: int(f.metadata[ATTNUM_KEY]) for f in schema.fields if ATTNUM_KEY in (f.metadata or {})}


def _sources(lineage: ColumnLineage, previous: T.StructType) -> dict[str, str | None]:
    """Which previous column holds each run column's values: same attnum where both know it, else same name.

    A name whose attnum changed was dropped and added again: its old values are not its values.
    """
    stored_ids = column_ids(previous)
    by_id = {attnum: name for name, attnum in stored_ids.items()}
    stored_names = set(previous.fieldNames())
    sources: dict[str, str | None] = {}
    for name in lineage.spec:
        attnum = lineage.attnums.get(name)
        if attnum is not None and stored_ids:
            sources[name] = by_id.get(attnum)
        else:
            sources[name] = name if name in stored_names else None
    return sources


def conform(
    previous: DataFrame, lineage: ColumnLineage, keep: Sequence[str], options: DecodeOptions = DEFAULT_OPTIONS
) -> DataFrame:
    """The previous table with the run's columns, in spec order, then the ``keep`` columns unchanged."""
    columns = []
    stored = {f.name: f.dataType for f in previous.schema.fields}
    for name, pg_type in lineage.spec.items():
        target = spark_type(pg_type, options)
        source = lineage.sources.get(name, name if name in stored else None)
        if source is None:
            value = lineage.missing_value(name, options)
        elif stored[source] != target:
            value = names.column(source).try_cast(target)
        else:
            value = names.column(source)
        columns.append(value.alias(name))
    return previous.select(*columns, *names.columns(keep))


def columns_changed(
    previous: T.StructType, lineage: ColumnLineage, keep: Sequence[str], options: DecodeOptions = DEFAULT_OPTIONS
) -> bool:
    """The stored table's layout is not the run's: names, order, types, column identities, or descriptions differ.

    A description (PostgreSQL type, encoding comment) the table lacks or holds stale, as after a retype
    to a type stored alike (``varchar(10)`` to ``text``), is written by rewriting the table once.
    """
    if previous.fieldNames() != [*lineage.spec, *keep]:
        return True
    stored = {f.name: f.dataType for f in previous.fields}
    if any(stored[name] != spark_type(pg_type, options) for name, pg_type in lineage.spec.items()):
        return True
    stored_ids = column_ids(previous)
    if any(stored_ids.get(name) != attnum for name, attnum in lineage.attnums.items()):
        return True
    stored_metadata = {f.name: f.metadata or {} for f in previous.fields}
    for name, pg_type in lineage.spec.items():
        description = column_description(pg_type, options)
        if any(stored_metadata[name].get(k) != description.get(k) for k in DESCRIPTION_KEYS):
            return True
    return False


def column_description(pg_type: str, options: DecodeOptions = DEFAULT_OPTIONS) -> dict[str, str]:
    """A column's PostgreSQL type and, when the lake encodes its values, how: its field metadata besides the attnum."""
    description = {PG_TYPE_KEY: pg_type}
    encoding = stored_encoding(pg_type, options)
    if encoding is not None:
        description[COMMENT_KEY] = encoding
    return description


def with_column_metadata(
    table: DataFrame, lineage: ColumnLineage, options: DecodeOptions = DEFAULT_OPTIONS
) -> DataFrame:
    """The table with each run column's field metadata: its attnum (what :func:`conform` matches on next run),
    PostgreSQL type and encoding comment (what a consumer reads the value by).

    A run column's metadata is replaced, so no description of an earlier type survives; an attnum the
    run does not know is kept. Other columns are left as they are.
    """
    fields = {f.name: f.metadata or {} for f in table.schema.fields}

    def metadata(c: str) -> dict[str, Any]:
        found: dict[str, Any] = {}
        if c in lineage.attnums:
            found[ATTNUM_KEY] = lineage.attnums[c]
        elif ATTNUM_KEY in fields[c]:
            found[ATTNUM_KEY] = fields[c][ATTNUM_KEY]
        if c in lineage.spec:
            found.update(column_description(lineage.spec[c], options))
        return found

    described = set(lineage.spec) | set(lineage.attnums)
    return table.select(
        *(names.column(c).alias(c, metadata=metadata(c)) if c in described else names.column(c) for c in table.columns)
    )
