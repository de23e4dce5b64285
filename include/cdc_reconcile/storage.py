"""The lake's datasets as Delta Lake tables, on any Hadoop filesystem.

Two shapes of dataset, both plain Delta tables that Spark, delta-rs and DuckDB read:

* **Per run** (``events``, ``quarantine``, ``changelog``, ``duplicates``, ``repairs``, ``audit``,
  ``snapshot``): partitioned by :data:`RUN_COLUMN`. A run's write replaces its own partition in one
  commit (``replaceWhere``), so a retried or cleared task leaves the old rows or the new ones, never
  both.
* **One table** (the lake copy): every publication overwrites it in one commit.

Delta's commit log is the only publication step: a writer killed mid-write leaves files no commit
names, which readers never see and ``VACUUM`` removes. Each commit carries a JSON ``userMetadata``
naming the run that made it (and what it read), so "which version did run N publish, from which
base" is answered by the table itself, atomically with the data. Empty writes still commit
(``skipRecordingEmptyCommits`` off), so a run that wrote no rows is distinguishable from one that
never ran.

Lake locations are URIs (``file://``, ``hdfs://``, ``s3a://``, ...); only Spark touches them.
A bare local path is taken as ``file://``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import re
from collections.abc import Iterable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql import types as T

RUN_COLUMN = "_cdc_run"
# What every session needs to read and write the lake (spark.build_session sets it).
SESSION_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.databricks.delta.skipRecordingEmptyCommits": "false",
}
# Characters Delta refuses in column names unless the table maps columns by name.
_UNMAPPABLE = re.compile(r"[ ,;{}()\n\t=]")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:+-]{0,199}$")


log = logging.getLogger(__name__)


class StorageError(RuntimeError):
    """A dataset is not in a state this module wrote; the message names it."""


@dataclass(frozen=True)
class Commit:
    """One Delta commit: its version, the metadata its writer attached, and Delta's operation metrics."""

    version: int
    metadata: dict[str, Any]
    metrics: dict[str, str]

    @property
    def bytes_written(self) -> int:
        """Data bytes the commit added (a write's output; a MERGE's new target files and change files)."""
        if "numTargetBytesAdded" in self.metrics:
            return int(self.metrics["numTargetBytesAdded"]) + int(self.metrics.get("numTargetChangeFileBytes") or 0)
        return int(self.metrics.get("numOutputBytes") or self.metrics.get("numAddedBytes") or 0)

    @property
    def rows_written(self) -> int:
        """Rows the commit wrote (a MERGE: rows inserted, updated and copied)."""
        if "numTargetRowsInserted" in self.metrics:
            return sum(
                int(self.metrics.get(m) or 0)
                for m in ("numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsCopied")
            )
        return int(self.metrics.get("numOutputRows") or 0)


# --------------------------------------------------------------------------------------------------
# names and locations


def check_name(name: str, what: str = "run") -> str:
    """Refuse run names that could not serve as a partition value everywhere."""
    if not isinstance(name, str) or not _NAME.match(name) or ".." in name:
        raise ValueError(
            f"{what} {name!r}: use 1-200 letters, digits and '_.:+-', starting with a letter or digit "
            "(safe_name() turns any run id into one)"
        )
    return name


def safe_name(text: str) -> str:
    """A stable name for any run id: disallowed characters become ``_`` plus a short hash."""
    cleaned = re.sub(r"[^A-Za-z0-9_.:+-]", "_", text).strip("._:+-")[:180]
    cleaned = cleaned.replace("..", "__")
    if cleaned == text and _NAME.match(cleaned):
        return cleaned
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    return f"{cleaned or 'run'}-{digest}"


def uri(location: str | Path) -> str:
    """A lake location as a URI: URIs stay as they are, a local path becomes ``file://<absolute path>``."""
    text = str(location)
    if "://" in text:
        return text.rstrip("/")
    return "file://" + str(Path(text).absolute())


def join(root: str | Path, *parts: str) -> str:
    """``root``/``parts`` as a URI, without touching any filesystem."""
    return "/".join([uri(root), *(p.strip("/") for p in parts)])


def needs_column_mapping(columns: Sequence[str]) -> bool:
    """Whether Delta needs column mapping for these names (a space, a comma, ...)."""
    return any(_UNMAPPABLE.search(name) for name in columns)


def _sql_path(location: str) -> str:
    return "delta.`" + uri(location).replace("`", "``") + "`"


def _quoted(name: str) -> Column:
    from pyspark.sql import functions as F

    return F.col("`" + name.replace("`", "``") + "`")


# --------------------------------------------------------------------------------------------------
# reading


def exists(spark: SparkSession, location: str | Path) -> bool:
    """Whether a Delta table is at ``location``."""
    return latest_version(spark, location) is not None


def latest_version(spark: SparkSession, location: str | Path) -> int | None:
    """The table's newest version, or None when there is no table."""
    history = commits(spark, location, limit=1)
    return history[0].version if history else None


# Each dataset's history as read within :func:`histories_kept`, by URI, newest commit first.
_KEPT_HISTORIES: ContextVar[dict[str, list[Commit]] | None] = ContextVar("cdc_kept_histories", default=None)


@contextlib.contextmanager
def histories_kept() -> Iterator[None]:
    """Within the block, each dataset's history is read from Delta once (a ``DESCRIBE HISTORY`` per read).

    For one step of one run, which is its datasets' only writer: every commit the block makes goes
    through this module and is added to the history kept (a commit that is not the next version drops
    it, and ``VACUUM`` or a property change drops it too). A compaction read the same histories 17
    times; a writer outside the block would not be seen, so the block must not outlive the step.
    Nested blocks share the outermost one's histories.
    """
    if _KEPT_HISTORIES.get() is not None:
        yield
        return
    token = _KEPT_HISTORIES.set({})
    try:
        yield
    finally:
        _KEPT_HISTORIES.reset(token)


def _committed(location: str | Path, commit: Commit | None) -> None:
    """A commit this module just made: the next entry of the kept history, else the history is read again."""
    kept = _KEPT_HISTORIES.get()
    if kept is None:
        return
    key = uri(location)
    history = kept.pop(key, None)
    if history is not None and commit is not None:
        expected = history[0].version + 1 if history else 0
        if commit.version == expected:
            kept[key] = [commit, *history]


def _forget_history(location: str | Path) -> None:
    kept = _KEPT_HISTORIES.get()
    if kept is not None:
        kept.pop(uri(location), None)


def commits(spark: SparkSession, location: str | Path, *, limit: int | None = None) -> list[Commit]:
    """The table's commits, newest first (``limit``: only the newest ones); empty when there is no table.

    Within :func:`histories_kept`, a history read before is not read again.
    """
    kept = _KEPT_HISTORIES.get()
    key = uri(location)
    if kept is not None and key in kept:
        return kept[key][:limit] if limit else list(kept[key])
    history = _read_commits(spark, location, limit=limit)
    if kept is not None and not limit:
        kept[key] = list(history)
    return history


def _read_commits(spark: SparkSession, location: str | Path, *, limit: int | None = None) -> list[Commit]:
    """``DESCRIBE HISTORY``: the table's commits, newest first; empty when there is no table."""
    from pyspark.errors import AnalysisException

    statement = f"DESCRIBE HISTORY {_sql_path(str(location))}" + (f" LIMIT {int(limit)}" if limit else "")
    try:
        rows = spark.sql(statement).select("version", "userMetadata", "operationMetrics").collect()
    except AnalysisException as exc:
        if _is_missing_table(exc):
            return []
        raise
    return [Commit(int(r["version"]), _metadata(r["userMetadata"]), dict(r["operationMetrics"] or {})) for r in rows]


def _metadata(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        document = json.loads(text)
    except json.JSONDecodeError:
        return {}
    return document if isinstance(document, dict) else {}


def _is_missing_table(exc: Exception) -> bool:
    text = str(exc)
    return any(
        marker in text
        for marker in ("DELTA_MISSING_DELTA_TABLE", "is not a Delta table", "PATH_NOT_FOUND", "DELTA_TABLE_NOT_FOUND")
    )


def run_commit(spark: SparkSession, location: str | Path, run: str, **match: Any) -> Commit | None:
    """The newest commit ``run`` made to the table (whose metadata also holds ``match``), or None."""
    for commit in commits(spark, location):
        if commit.metadata.get("run") == run and all(commit.metadata.get(k) == v for k, v in match.items()):
            return commit
    return None


def read(spark: SparkSession, location: str | Path, version: int | None = None) -> DataFrame | None:
    """The table (at ``version``; default the newest), or None when there is none."""
    from pyspark.errors import AnalysisException

    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", int(version))
    try:
        df = reader.load(uri(location))
        df.schema  # noqa: B018 - resolve now, so a missing table is reported here
    except AnalysisException as exc:
        if _is_missing_table(exc):
            return None
        raise
    return df


# --------------------------------------------------------------------------------------------------
# writing


def leaf_types(data_type: T.DataType) -> Iterator[T.DataType]:
    """The types a value of ``data_type`` is made of: arrays and structs opened, every other type as is."""
    from pyspark.sql import types as T

    if isinstance(data_type, T.ArrayType):
        yield from leaf_types(data_type.elementType)
    elif isinstance(data_type, T.StructType):
        for f in data_type.fields:
            yield from leaf_types(f.dataType)
    else:
        yield data_type


def _comparable(data_type: T.DataType) -> bool:
    """Whether Spark can hash and sort the type (maps and variants cannot)."""
    from pyspark.sql import types as T

    return not any(isinstance(t, T.MapType | T.VariantType) for t in leaf_types(data_type))


def deterministic(df: DataFrame, sort_by: Sequence[str] | None = None, partitions: int = 1) -> DataFrame:
    """Arrange rows so the same rows always land in the same file in the same order.

    Rows are hash-partitioned on ``sort_by`` (or on every comparable column); within a file they are
    sorted by ``sort_by`` and then by the remaining comparable columns.
    """
    if partitions < 1:
        raise ValueError(f"partitions must be at least 1, got {partitions}")
    keys = list(sort_by or [])
    missing = [k for k in keys if k not in df.columns]
    if missing:
        raise ValueError(f"sort_by columns {missing} are not in the DataFrame (columns: {df.columns})")
    comparable = [f.name for f in df.schema.fields if _comparable(f.dataType)]
    tiebreak = [c for c in comparable if c not in keys]
    hash_columns = keys or comparable
    if partitions == 1:
        arranged = df.repartition(1)
    elif hash_columns:
        arranged = df.repartition(partitions, *[_quoted(c) for c in hash_columns])
    else:
        arranged = df.repartition(partitions)
    order = [_quoted(c) for c in (*keys, *tiebreak)]
    return arranged.sortWithinPartitions(*order) if order else arranged


def _write(
    df: DataFrame,
    location: str | Path,
    *,
    run: str,
    metadata: dict[str, Any] | None,
    replace_where: str | None = None,
    partition_by: str | None = None,
    properties: dict[str, str] | None = None,
) -> Commit:
    """One overwrite commit (of the whole table, or of the rows ``replace_where`` selects)."""
    if RUN_COLUMN in df.columns and partition_by is None:
        raise StorageError(f"{location}: the column name {RUN_COLUMN} is reserved for the lake's run partitions")
    document = json.dumps({**(metadata or {}), "run": run}, sort_keys=True, default=str)
    writer = df.write.format("delta").mode("overwrite").option("userMetadata", document)
    if replace_where is None:
        writer = writer.option("overwriteSchema", "true")
    else:
        writer = writer.option("replaceWhere", replace_where).option("mergeSchema", "true")
    if partition_by:
        writer = writer.partitionBy(partition_by)
    for name, value in (properties or {}).items():
        writer = writer.option(name, value)
    if needs_column_mapping(df.columns):
        # Delta needs column mapping for such names; plain names keep the table readable by every reader.
        writer = writer.option("delta.columnMapping.mode", "name")
    try:
        writer.save(uri(location))
    except Exception as exc:
        _forget_history(location)  # a failed write may still have committed
        if replace_where is None or "DELTA_FAILED_TO_MERGE_FIELDS" not in str(exc):
            raise
        _widen_or_refuse(df.sparkSession, location, exc)
        writer.save(uri(location))
    return _own_newest_commit(df.sparkSession, location, run)


def _widen_or_refuse(spark: SparkSession, location: str | Path, exc: Exception) -> None:
    """A run's rows have a column of a wider type than the dataset's earlier runs (``ALTER COLUMN ... TYPE``).

    Delta's type widening takes int -> bigint, float -> double and decimals gaining precision at least
    as fast as scale, without rewriting the earlier runs' files. It changes the table's protocol, so it
    is switched on only when a write needs it. Any other change cannot be merged into the earlier runs'
    rows: the error names it.
    """
    properties = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {_sql_path(str(location))}").collect()}
    if properties.get("delta.enableTypeWidening") == "true":
        first_line = str(exc).strip().splitlines()[0]
        raise StorageError(
            f"{location}: a column's type changed in a way Delta cannot widen in place ({first_line}). Earlier runs' "
            "rows keep the old type, so this dataset cannot hold both: move the dataset folder aside (it holds "
            "only past runs' records) and run again, or take a full rescan into a new lake root"
        ) from exc
    log.info("%s: a column was widened at the source; enabling Delta type widening on the dataset", location)
    spark.sql(f"ALTER TABLE {_sql_path(str(location))} SET TBLPROPERTIES ('delta.enableTypeWidening' = 'true')")
    _forget_history(location)


def _own_newest_commit(spark: SparkSession, location: str | Path, run: str) -> Commit:
    """The commit ``run`` just made: the table's newest, since each dataset has one writer at a time."""
    newest = _read_commits(spark, location, limit=1)
    if not newest or newest[0].metadata.get("run") != run:
        _forget_history(location)
        raise StorageError(f"{location}: the commit of run {run!r} is not the table's newest")
    _committed(location, newest[0])
    return newest[0]


def publish(
    df: DataFrame,
    location: str | Path,
    run: str,
    *,
    sort_by: Sequence[str] | None = None,
    partitions: int = 1,
    metadata: dict[str, Any] | None = None,
    properties: dict[str, str] | None = None,
) -> Commit:
    """Overwrite the table with ``df`` in one commit made by ``run``; returns the commit.

    ``properties`` (``delta.*`` table properties) take effect when the commit creates the table.
    """
    check_name(run)
    return _write(deterministic(df, sort_by, partitions), location, run=run, metadata=metadata, properties=properties)


DELETE_FLAG = "_cdc_delete"


def merge(
    changes: DataFrame,
    location: str | Path,
    run: str,
    key: Sequence[str],
    *,
    metadata: dict[str, Any] | None = None,
) -> Commit:
    """One MERGE commit made by ``run``: each row of ``changes`` replaces its key's row, or deletes it.

    ``changes`` holds the table's columns plus a boolean :data:`DELETE_FLAG`; a flagged row's key is
    deleted, the others are upserted. Only the rows of changed keys are written (with deletion
    vectors, the files holding their old rows are not rewritten), so the cost follows the changes.
    """
    columns = [c for c in changes.columns if c != DELETE_FLAG]
    quote = _quote_name
    on = " AND ".join(f"t.{quote(k)} = s.{quote(k)}" for k in key)
    assignments = ", ".join(f"t.{quote(c)} = s.{quote(c)}" for c in columns)
    names = ", ".join(quote(c) for c in columns)
    values = ", ".join(f"s.{quote(c)}" for c in columns)
    clauses = (
        f"ON {on} WHEN MATCHED AND s.{DELETE_FLAG} THEN DELETE "
        f"WHEN MATCHED THEN UPDATE SET {assignments} "
        f"WHEN NOT MATCHED AND NOT s.{DELETE_FLAG} THEN INSERT ({names}) VALUES ({values})"
    )
    return merge_sql(changes, location, run, clauses, metadata=metadata)


def merge_sql(
    source: DataFrame, location: str | Path, run: str, clauses: str, *, metadata: dict[str, Any] | None = None
) -> Commit:
    """``MERGE INTO <location> t USING <source> s <clauses>`` as one commit made by ``run``."""
    check_name(run)
    spark = source.sparkSession
    view = f"cdc_merge_{hashlib.sha256((str(location) + run).encode()).hexdigest()[:12]}"
    source.createOrReplaceTempView(view)
    document = json.dumps({**(metadata or {}), "run": run}, sort_keys=True, default=str)
    conf_key = "spark.databricks.delta.commitInfo.userMetadata"
    spark.conf.set(conf_key, document)
    try:
        spark.sql(f"MERGE INTO {_sql_path(str(location))} t USING {view} s {clauses}")
    except Exception:
        _forget_history(location)  # a failed MERGE may still have committed
        raise
    finally:
        spark.conf.unset(conf_key)
        spark.catalog.dropTempView(view)
    return _own_newest_commit(spark, location, run)


def changed_keys(
    spark: SparkSession, location: str | Path, key: Sequence[str], first: int, last: int
) -> DataFrame | None:
    """The keys whose rows versions ``first``..``last`` changed (the table's change feed).

    None when the table keeps no change feed or it does not cover those versions; the keys are
    computed here (checkpointed), so a feed that cannot be read fails now, not inside the caller's MERGE.
    """
    from pyspark.errors import PySparkException

    properties = spark.sql(f"DESCRIBE DETAIL {_sql_path(str(location))}").first()["properties"] or {}
    if properties.get("delta.enableChangeDataFeed") != "true":
        return None
    try:
        feed = (
            spark.read.format("delta")
            .option("readChangeFeed", "true")
            .option("startingVersion", int(first))
            .option("endingVersion", int(last))
            .load(uri(location))
        )
        return feed.select(*(_quoted(k) for k in key)).distinct().localCheckpoint()
    except PySparkException:
        return None


def _quote_name(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def replace_partition(
    df: DataFrame,
    location: str | Path,
    partition: str,
    *,
    sort_by: Sequence[str] | None = None,
    partitions: int = 1,
    metadata: dict[str, Any] | None = None,
) -> Commit:
    """Replace run ``partition``'s rows of a per-run dataset with ``df``, in one commit."""
    from pyspark.sql import functions as F

    check_name(partition)
    if RUN_COLUMN in df.columns:
        raise StorageError(f"{location}: the column name {RUN_COLUMN} is reserved for the lake's run partitions")
    rows = deterministic(df, sort_by, partitions).withColumn(RUN_COLUMN, F.lit(partition))
    condition = f"{RUN_COLUMN} = '{partition}'"
    return _write(rows, location, run=partition, metadata=metadata, replace_where=condition, partition_by=RUN_COLUMN)


def list_partitions(spark: SparkSession, location: str | Path) -> list[str]:
    """The runs with a partition in a per-run dataset, sorted (a run that wrote no rows is not listed)."""
    df = read(spark, location)
    if df is None:
        return []
    return sorted(r[0] for r in df.select(RUN_COLUMN).distinct().collect())


def read_partitions(
    spark: SparkSession, location: str | Path, partitions: Iterable[str] | None = None, *, exclude: Iterable[str] = ()
) -> DataFrame | None:
    """The rows of the listed runs (default: all but ``exclude``), without the run column; None: no table."""
    from pyspark.sql import functions as F

    df = read(spark, location)
    if df is None:
        return None
    if partitions is not None:
        df = df.filter(F.col(RUN_COLUMN).isin([check_name(p) for p in partitions]))
    excluded = list(exclude)
    if excluded:
        df = df.filter(~F.col(RUN_COLUMN).isin(excluded))
    return df.drop(RUN_COLUMN)


def delete_partitions(spark: SparkSession, location: str | Path, partitions: Sequence[str]) -> Commit | None:
    """Delete the listed runs' rows in one commit (retention); None when there was nothing to delete."""
    if not partitions or not exists(spark, location):
        return None
    names = ", ".join("'" + check_name(p) + "'" for p in partitions)
    spark.sql(f"DELETE FROM {_sql_path(str(location))} WHERE {RUN_COLUMN} IN ({names})")
    newest = _read_commits(spark, location, limit=1)
    _committed(location, newest[0] if newest else None)
    return newest[0] if newest else None


LISTING_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"


def vacuum(spark: SparkSession, location: str | Path, retain_hours: float) -> bool:
    """Remove files no version within ``retain_hours`` needs (Delta refuses less than a week by default);
    False when there is no table.

    Delta lists the table's folders in as many tasks as Spark's partition discovery parallelism, 10,000
    unless set: 14-20 s for a dataset of 60 run folders on two local cores, where two tasks took 1.5 s.
    The session's shuffle partitions, the deployment's parallelism, are used instead.
    """
    if not exists(spark, location):
        return False
    listing = spark.conf.get("spark.sql.shuffle.partitions", None) or "8"
    spark.conf.set(LISTING_PARALLELISM, listing)
    try:
        spark.sql(f"VACUUM {_sql_path(str(location))} RETAIN {float(retain_hours)} HOURS")
    finally:
        spark.conf.unset(LISTING_PARALLELISM)
        _forget_history(location)  # Delta may log the VACUUM as commits
    return True


def runs_newest_first(spark: SparkSession, location: str | Path) -> list[str]:
    """The runs that wrote a per-run dataset, by their newest commit, newest first."""
    seen: list[str] = []
    for commit in commits(spark, location):
        run = commit.metadata.get("run")
        if run and run not in seen:
            seen.append(run)
    return seen


def prune(spark: SparkSession, location: str | Path, keep: int) -> list[str]:
    """Delete every run's partition but the ``keep`` newest (one commit); returns the runs removed."""
    if keep < 1:
        raise ValueError(f"keep must be at least 1 (the newest run is never deleted), got {keep}")
    present = set(list_partitions(spark, location))
    removed = [run for run in runs_newest_first(spark, location)[keep:] if run in present]
    delete_partitions(spark, location, removed)
    return removed


def commit_bytes(spark: SparkSession, location: str | Path, version: int) -> dict[str, int]:
    """Bytes a commit added, by kind (data files, change-data files, deletion vectors), from its log entry."""
    from pyspark.sql import functions as F

    entry = spark.read.json(f"{uri(location)}/_delta_log/{int(version):020d}.json")
    sizes = {"data": 0, "change_data": 0, "deletion_vectors": 0}
    if "add" in entry.columns:
        add = entry.select("add.*").filter(F.col("path").isNotNull())
        if "remove" in entry.columns:  # a file re-added with a deletion vector was not written again
            removed = entry.select("remove.path").filter(F.col("path").isNotNull())
            new_files = add.join(removed, "path", "left_anti")
        else:
            new_files = add
        sizes["data"] = int(new_files.agg(F.sum("size")).first()[0] or 0)
        if "deletionVector" in add.columns:
            vectors = add.select("deletionVector.*").filter(F.col("storageType") == "u")
            sizes["deletion_vectors"] = int(vectors.agg(F.sum("sizeInBytes")).first()[0] or 0)
    if "cdc" in entry.columns:
        sizes["change_data"] = int(entry.select("cdc.size").agg(F.sum("size")).first()[0] or 0)
    return sizes
