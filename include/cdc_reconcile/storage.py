"""Atomic, idempotent Parquet datasets on the local filesystem .

Two shapes of dataset:

* **Versioned** (`snapshot`, `changelog`, `table`): a folder of immutable version folders
  ``v=<version>/`` and a manifest ``_CURRENT.json`` naming the live one. A version is written under
  ``_staging/``, renamed into place, and only then made live by replacing the manifest (temp file +
  ``os.replace``), so a reader sees the old version or the new one, never a half-written one.
* **Partitioned** (`events`): one folder ``range=<id>/`` per Kafka offset range. Re-running a range
  stages it and swaps it in by rename, so it replaces the earlier attempt and is never appended twice.

Output is deterministic: rows are hash-partitioned on the sort keys (or on every hashable column),
sorted within each file, and the part files are renamed to ``part-00000.parquet``..., so re-running
a task on the same input rewrites byte-identical files.

Names starting with ``_`` or ``.`` are invisible to Spark's file listing; every internal file uses
them. One writer per dataset at a time (the DAG runs one task per table); readers may run any time.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

MANIFEST = "_CURRENT.json"
STAGING = "_staging"
SIDECAR = "_SIDECAR.json"
VERSION_PREFIX = "v="
PARTITION_PREFIX = "range="
MANIFEST_FORMAT = 1
HISTORY_LIMIT = 200

_BACKUP = ".replaced-"
_DELETING = ".deleting-"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:+-]{0,199}$")
_PART = re.compile(r"^part-\d{5}(\.parquet)?$")


class StorageError(RuntimeError):
    """A dataset folder is not in a state this module wrote; the message names the folder."""


# --------------------------------------------------------------------------------------------------
# names


def check_name(name: str, what: str = "version") -> str:
    """Refuse names that could escape the dataset folder or confuse Spark's path handling."""
    if not isinstance(name, str) or not _NAME.match(name) or ".." in name:
        raise ValueError(
            f"{what} {name!r}: use 1-200 letters, digits and '_.:+-', starting with a letter or digit "
            "(safe_name() turns any run id into one)"
        )
    return name


def safe_name(text: str) -> str:
    """A stable version name for any run id: disallowed characters become ``_`` plus a short hash."""
    cleaned = re.sub(r"[^A-Za-z0-9_.:+-]", "_", text).strip("._:+-")[:180]
    cleaned = cleaned.replace("..", "__")
    if cleaned == text and _NAME.match(cleaned):
        return cleaned
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    return f"{cleaned or 'run'}-{digest}"


# --------------------------------------------------------------------------------------------------
# filesystem helpers


def _fsync_dir(path: Path) -> None:
    """Make renames inside ``path`` durable; a no-op where directories cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_json_atomic(path: Path, document: dict[str, Any]) -> None:
    """Replace ``path`` by a complete JSON file in one rename (readers never see a partial file)."""
    text = json.dumps(document, sort_keys=True, indent=2, default=str) + "\n"
    tmp = path.parent / f".{path.name}.tmp-{uuid.uuid4().hex}"
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    _fsync_dir(path.parent)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StorageError(f"{path}: not valid JSON ({exc}); it was not written by cdc_reconcile.storage") from exc
    if not isinstance(document, dict):
        raise StorageError(f"{path}: expected a JSON object")
    return document


def _remove_tree(path: Path, root: Path) -> None:
    """Delete a folder by first renaming it under ``_staging`` so it never looks half-deleted."""
    if not path.exists():
        return
    doomed = root / STAGING / f"{path.name}{_DELETING}{uuid.uuid4().hex}"
    doomed.parent.mkdir(parents=True, exist_ok=True)
    os.rename(path, doomed)
    _fsync_dir(path.parent)
    shutil.rmtree(doomed, ignore_errors=True)


def _backups(root: Path, name: str) -> list[Path]:
    staging = root / STAGING
    if not staging.is_dir():
        return []
    return sorted(p for p in staging.iterdir() if p.name.startswith(f"{name}{_BACKUP}"))


def _resolve(root: Path, name: str) -> Path | None:
    """The folder holding ``name``: itself, or the earlier copy set aside by a swap that crashed."""
    folder = root / name
    if folder.is_dir():
        return folder
    backups = _backups(root, name)
    return backups[-1] if backups else None


def _recover(root: Path) -> None:
    """Finish what a killed writer left, before the next write of the dataset.

    A set-aside copy goes back if nothing replaced it, else it is dropped; a half-written stage is
    dropped (a ``kill -9`` skips the writer's own clean-up, and with one writer per dataset no other
    write can be using it).
    """
    staging = root / STAGING
    if not staging.is_dir():
        return
    for entry in sorted(staging.iterdir()):
        if _BACKUP in entry.name and _DELETING not in entry.name:
            target = root / entry.name.split(_BACKUP, 1)[0]
            if target.exists():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                os.rename(entry, target)
                _fsync_dir(root)
        elif entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def _swap_in(stage: Path, target: Path, root: Path) -> None:
    """Move a complete staged folder to ``target``, replacing an earlier attempt of the same name.

    POSIX cannot rename a folder over a non-empty one, so the old one is first set aside under
    ``_staging``; a crash between the two renames is undone by ``_recover`` and bridged by ``_resolve``.
    """
    backup = None
    if target.exists():
        backup = root / STAGING / f"{target.name}{_BACKUP}{uuid.uuid4().hex}"
        os.rename(target, backup)
    os.rename(stage, target)
    _fsync_dir(root)
    if backup is not None:
        shutil.rmtree(backup, ignore_errors=True)


# --------------------------------------------------------------------------------------------------
# deterministic Parquet output


def _uri(path: Path) -> str:
    """A local path as Hadoop wants it: ``Path.as_uri()`` percent-encodes ``=``, which Hadoop keeps verbatim."""
    return "file://" + str(path)


def _quoted(name: str) -> Column:
    """A column by its exact name, even when it contains dots or spaces."""
    return F.col("`" + name.replace("`", "``") + "`")


def _comparable(data_type: T.DataType) -> bool:
    """Whether Spark can hash and sort the type (maps and variants cannot)."""
    if isinstance(data_type, T.MapType | T.VariantType):
        return False
    if isinstance(data_type, T.ArrayType):
        return _comparable(data_type.elementType)
    if isinstance(data_type, T.StructType):
        return all(_comparable(f.dataType) for f in data_type.fields)
    return True


def deterministic(df: DataFrame, sort_by: Sequence[str] | None = None, partitions: int = 1) -> DataFrame:
    """Arrange rows so the same rows always land in the same file in the same order.

    Rows are hash-partitioned on ``sort_by`` (or on every comparable column), which depends only on
    the values, not on how the input was split; within a file they are sorted by ``sort_by`` and then
    by the remaining comparable columns, so ties between equal keys are ordered too.
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


def _write_staged(df: DataFrame, stage: Path, sort_by: Sequence[str] | None, partitions: int) -> list[str]:
    """Write ``df`` to ``stage`` and leave exactly ``part-NNNNN.parquet`` files there, fsynced."""
    deterministic(df, sort_by, partitions).write.mode("errorifexists").option("compression", "snappy").parquet(
        _uri(stage)
    )
    written = sorted(p for p in stage.iterdir() if p.name.startswith("part-") and p.name.endswith(".parquet"))
    for extra in stage.iterdir():
        if extra.name.endswith(".crc") or extra.name == "_SUCCESS":
            extra.unlink()
    names = []
    for index, source in enumerate(written):
        name = f"part-{index:05d}.parquet"
        with open(source, "rb") as handle:
            os.fsync(handle.fileno())
        os.rename(source, stage / name)
        names.append(name)
    leftovers = sorted(p.name for p in stage.iterdir() if p.name not in names)
    if leftovers:
        raise StorageError(f"{stage}: unexpected files after writing: {leftovers}")
    _fsync_dir(stage)
    return names


def _count_rows(spark: SparkSession, folder: Path) -> int:
    """Rows in a folder of Parquet files (Spark answers from the footers alone)."""
    return spark.read.parquet(_uri(folder)).count()


# --------------------------------------------------------------------------------------------------
# versioned datasets


def _manifest(root: Path) -> dict[str, Any] | None:
    document = _read_json(root / MANIFEST)
    if document is not None and not isinstance(document.get("version"), str):
        raise StorageError(f"{root / MANIFEST}: has no 'version'")
    return document


def publish(
    df: DataFrame,
    path: str | os.PathLike[str],
    version: str,
    *,
    sort_by: Sequence[str] | None = None,
    partitions: int = 1,
    metadata: dict[str, Any] | None = None,
) -> str:
    """Write ``df`` as ``version`` of the dataset at ``path`` and make it the live version.

    Steps: write to ``_staging/<version>-<uuid>``, rename part files, write the sidecar (``metadata``
    plus ``version``, ``rows`` and ``files``), rename the folder to ``v=<version>`` (replacing an
    earlier attempt), then switch the manifest. A crash before the switch leaves the previous live
    version readable; re-running completes. Returns the version folder.
    """
    check_name(version)
    root = Path(path).absolute()
    (root / STAGING).mkdir(parents=True, exist_ok=True)
    _recover(root)
    stage = root / STAGING / f"{version}-{uuid.uuid4().hex}"
    try:
        files = _write_staged(df, stage, sort_by, partitions)
        rows = _count_rows(df.sparkSession, stage)
        _write_json_atomic(stage / SIDECAR, {**(metadata or {}), "version": version, "rows": rows, "files": files})
        target = root / f"{VERSION_PREFIX}{version}"
        _swap_in(stage, target, root)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    _switch_manifest(root, version, rows, files)
    return str(target)


def _switch_manifest(root: Path, version: str, rows: int, files: list[str]) -> None:
    """Make ``version`` live: one atomic replace of ``_CURRENT.json``."""
    previous = _manifest(root) or {}
    history = [v for v in previous.get("history", []) if v != version] + [version]
    _write_json_atomic(
        root / MANIFEST,
        {
            "format": MANIFEST_FORMAT,
            "version": version,
            "folder": f"{VERSION_PREFIX}{version}",
            "rows": rows,
            "files": files,
            "history": history[-HISTORY_LIMIT:],
        },
    )


def current_version(path: str | os.PathLike[str]) -> str | None:
    """The live version, or None before the first successful publish."""
    manifest = _manifest(Path(path).absolute())
    return manifest["version"] if manifest else None


def version_path(path: str | os.PathLike[str], version: str | None = None) -> str | None:
    """The folder holding ``version`` (default: the live one), or None when there is none."""
    root = Path(path).absolute()
    version = version or current_version(root)
    if version is None:
        return None
    folder = _resolve(root, f"{VERSION_PREFIX}{check_name(version)}")
    return str(folder) if folder else None


def read_current(spark: SparkSession, path: str | os.PathLike[str]) -> DataFrame | None:
    """The live version as a DataFrame, or None when nothing was published yet."""
    return read_version(spark, path, None)


def read_version(spark: SparkSession, path: str | os.PathLike[str], version: str | None) -> DataFrame | None:
    """One version (default: the live one); None when it does not exist."""
    folder = version_path(path, version)
    if folder is None:
        if version is None and current_version(path) is not None:
            raise StorageError(f"{path}: the manifest names {current_version(path)!r} but its folder is gone")
        return None
    return spark.read.parquet(_uri(Path(folder)))


def list_versions(path: str | os.PathLike[str]) -> list[str]:
    """Versions on disk, oldest first: in publish order, after any that were written but never made live."""
    root = Path(path).absolute()
    if not root.is_dir():
        return []
    on_disk = {
        p.name[len(VERSION_PREFIX) :] for p in root.iterdir() if p.is_dir() and p.name.startswith(VERSION_PREFIX)
    }
    manifest = _manifest(root)
    history = [v for v in (manifest or {}).get("history", []) if v in on_disk]
    if manifest and manifest["version"] in on_disk and manifest["version"] not in history:
        history.append(manifest["version"])
    return sorted(on_disk - set(history)) + history


def read_metadata(path: str | os.PathLike[str], version: str | None = None) -> dict[str, Any] | None:
    """The version's sidecar (default: the live version), or None when there is none."""
    folder = version_path(path, version)
    return _read_json(Path(folder) / SIDECAR) if folder else None


def prune(path: str | os.PathLike[str], keep: int) -> list[str]:
    """Delete all but the ``keep`` newest versions, never the live one; ``_recover`` clears ``_staging`` first.

    Run it when no publish to the same dataset is in progress (e.g. right after one). Returns the
    versions removed.
    """
    if keep < 1:
        raise ValueError(f"keep must be at least 1 (the live version is never deleted), got {keep}")
    root = Path(path).absolute()
    if not root.is_dir():
        return []
    _recover(root)
    live = current_version(root)
    versions = list_versions(root)
    kept = set(versions[-keep:]) | ({live} if live else set())
    removed = [v for v in versions if v not in kept]
    for version in removed:
        _remove_tree(root / f"{VERSION_PREFIX}{version}", root)
    return removed


# --------------------------------------------------------------------------------------------------
# partitioned datasets (events: one folder per offset range)


def replace_partition(
    df: DataFrame,
    path: str | os.PathLike[str],
    partition: str,
    *,
    sort_by: Sequence[str] | None = None,
    partitions: int = 1,
) -> str:
    """Write ``df`` as partition ``range=<partition>``, replacing an earlier attempt of that range.

    The range is staged and renamed into place, so readers see the old copy or the new one, and a
    re-run of a range never adds a second copy. Returns the partition folder.
    """
    check_name(partition, "partition")
    root = Path(path).absolute()
    (root / STAGING).mkdir(parents=True, exist_ok=True)
    _recover(root)
    name = f"{PARTITION_PREFIX}{partition}"
    stage = root / STAGING / f"{name}-{uuid.uuid4().hex}"
    try:
        _write_staged(df, stage, sort_by, partitions)
        _swap_in(stage, root / name, root)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return str(root / name)


def list_partitions(path: str | os.PathLike[str]) -> list[str]:
    """Published partition ids, sorted; staging folders are never included."""
    root = Path(path).absolute()
    if not root.is_dir():
        return []
    names = {p.name for p in root.iterdir() if p.is_dir() and p.name.startswith(PARTITION_PREFIX)}
    staging = root / STAGING
    if staging.is_dir():
        names |= {p.name.split(_BACKUP, 1)[0] for p in staging.iterdir() if _BACKUP in p.name}
        names = {n for n in names if n.startswith(PARTITION_PREFIX)}
    return sorted(n[len(PARTITION_PREFIX) :] for n in names)


def read_partitions(
    spark: SparkSession, path: str | os.PathLike[str], partitions: Iterable[str] | None = None
) -> DataFrame | None:
    """All published partitions (or the listed ones) as one DataFrame; None when there are none."""
    root = Path(path).absolute()
    wanted = list_partitions(root) if partitions is None else [check_name(p, "partition") for p in partitions]
    folders = []
    for partition in wanted:
        folder = _resolve(root, f"{PARTITION_PREFIX}{partition}")
        if folder is None:
            raise StorageError(f"{root}: partition {partition!r} does not exist")
        folders.append(_uri(folder))
    return spark.read.parquet(*folders) if folders else None
