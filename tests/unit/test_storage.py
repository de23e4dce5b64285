"""Atomic, idempotent Parquet datasets: what a reader sees across publishes, re-runs and crashes."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from decimal import Decimal
from pathlib import Path

import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.testing import assertDataFrameEqual

from cdc_reconcile import storage

SCHEMA = T.StructType(
    [
        T.StructField("order_id", T.LongType(), False),
        T.StructField("line_no", T.IntegerType(), False),
        T.StructField("sku", T.StringType(), True),
        T.StructField("price", T.DecimalType(10, 4), True),
        T.StructField("created_at", T.TimestampType(), True),
        T.StructField("tags", T.MapType(T.StringType(), T.StringType()), True),
    ]
)
KEY = ["order_id", "line_no"]


def rows(n: int, *, price_shift: int = 0) -> list[tuple]:
    base = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    return [
        (
            i // 3,
            i % 3,
            None if i % 7 == 0 else f"sku-{i}-ü",
            Decimal(i + price_shift).scaleb(-4),
            base + dt.timedelta(seconds=i),
            {"i": str(i)},
        )
        for i in range(n)
    ]


def frame(spark, data: list[tuple], slices: int = 1):
    return spark.createDataFrame(spark.sparkContext.parallelize(data, slices), SCHEMA)


def file_digests(folder: str | Path) -> dict[str, str]:
    """Every file of a folder (hidden ones too) -> sha256."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(Path(folder).iterdir()) if p.is_file()}


def test_publish_then_read_current(spark, tmp_path):
    path = tmp_path / "snapshot"
    assert storage.read_current(spark, path) is None
    assert storage.current_version(path) is None

    folder = storage.publish(frame(spark, rows(50), 3), path, "run-1", sort_by=KEY, metadata={"table": "t"})

    assert folder == str(path.absolute() / "v=run-1")
    assert storage.current_version(path) == "run-1"
    assert storage.list_versions(path) == ["run-1"]
    assertDataFrameEqual(storage.read_current(spark, path), frame(spark, rows(50)))
    assert sorted(p.name for p in Path(folder).iterdir()) == ["_SIDECAR.json", "part-00000.parquet"]
    meta = storage.read_metadata(path)
    assert meta == {"table": "t", "version": "run-1", "rows": 50, "files": ["part-00000.parquet"]}
    manifest = json.loads((path / "_CURRENT.json").read_text())
    assert manifest["version"] == "run-1" and manifest["folder"] == "v=run-1" and manifest["rows"] == 50


def test_second_version_becomes_live_and_old_one_stays_readable(spark, tmp_path):
    path = tmp_path / "table"
    storage.publish(frame(spark, rows(10)), path, "a", sort_by=KEY)
    storage.publish(frame(spark, rows(20, price_shift=5)), path, "b", sort_by=KEY)
    assert storage.current_version(path) == "b"
    assert storage.list_versions(path) == ["a", "b"]
    assertDataFrameEqual(storage.read_current(spark, path), frame(spark, rows(20, price_shift=5)))
    assertDataFrameEqual(storage.read_version(spark, path, "a"), frame(spark, rows(10)))


def test_republishing_same_version_gives_byte_identical_files(spark, tmp_path):
    path = tmp_path / "snapshot"
    data = rows(500)
    storage.publish(frame(spark, data, 1), path, "run-1", sort_by=KEY, partitions=3)
    first = file_digests(path / "v=run-1")
    first_manifest = (path / "_CURRENT.json").read_bytes()

    # Same rows, arriving in another order and split differently.
    shuffled = frame(spark, list(reversed(data)), 7).orderBy(F.rand(seed=3))
    storage.publish(shuffled, path, "run-1", sort_by=KEY, partitions=3)
    second = file_digests(path / "v=run-1")

    assert sorted(first) == ["_SIDECAR.json", "part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    assert first == second
    assert (path / "_CURRENT.json").read_bytes() == first_manifest
    assert storage.list_versions(path) == ["run-1"]
    assert not list((path / "_staging").iterdir())


def test_output_is_deterministic_without_sort_keys_and_with_ties(spark, tmp_path):
    data = [(1, 0, s, Decimal("1.0000"), None, None) for s in ("b", "a", None, "c")] * 3
    one = storage.publish(frame(spark, data, 2), tmp_path / "x", "v1", partitions=2)
    two = storage.publish(frame(spark, list(reversed(data)), 3), tmp_path / "y", "v1", partitions=2)
    assert file_digests(one) == file_digests(two)


def test_crash_before_manifest_switch_leaves_previous_version_live(spark, tmp_path, monkeypatch):
    path = tmp_path / "snapshot"
    storage.publish(frame(spark, rows(10)), path, "run-1", sort_by=KEY)

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("killed before the manifest switch")

    with monkeypatch.context() as patch:
        patch.setattr(storage, "_switch_manifest", crash)
        with pytest.raises(KeyboardInterrupt):
            storage.publish(frame(spark, rows(30, price_shift=1)), path, "run-2", sort_by=KEY)

    assert storage.current_version(path) == "run-1"
    assertDataFrameEqual(storage.read_current(spark, path), frame(spark, rows(10)))

    storage.publish(frame(spark, rows(30, price_shift=1)), path, "run-2", sort_by=KEY)
    assert storage.current_version(path) == "run-2"
    assertDataFrameEqual(storage.read_current(spark, path), frame(spark, rows(30, price_shift=1)))


def test_failing_write_leaves_no_trace(spark, tmp_path):
    path = tmp_path / "snapshot"
    storage.publish(frame(spark, rows(10)), path, "run-1", sort_by=KEY)
    broken = frame(spark, rows(10)).withColumn(
        "sku", F.when(F.col("order_id") == 2, F.raise_error(F.lit("boom"))).otherwise(F.col("sku"))
    )
    with pytest.raises(Exception, match="boom"):
        storage.publish(broken, path, "run-2", sort_by=KEY)
    assert storage.current_version(path) == "run-1"
    assert storage.list_versions(path) == ["run-1"]
    assert not list((path / "_staging").iterdir())
    assertDataFrameEqual(storage.read_current(spark, path), frame(spark, rows(10)))


def test_crash_in_the_middle_of_replacing_the_live_version(spark, tmp_path, monkeypatch):
    """Killed after the live folder was set aside and before the new one took its place."""
    path = tmp_path / "table"
    storage.publish(frame(spark, rows(10)), path, "run-1", sort_by=KEY)
    real_rename = storage.os.rename
    calls = []

    def rename_then_die(src, dst):
        calls.append((src, dst))
        real_rename(src, dst)
        if ".replaced-" in str(dst):
            raise KeyboardInterrupt("killed between the two renames")

    with monkeypatch.context() as patch:
        patch.setattr(storage.os, "rename", rename_then_die)
        with pytest.raises(KeyboardInterrupt):
            storage.publish(frame(spark, rows(12)), path, "run-1", sort_by=KEY)

    assert not (path / "v=run-1").exists()
    assertDataFrameEqual(storage.read_current(spark, path), frame(spark, rows(10)))

    storage.publish(frame(spark, rows(12)), path, "run-1", sort_by=KEY)
    assertDataFrameEqual(storage.read_current(spark, path), frame(spark, rows(12)))
    assert not list((path / "_staging").iterdir())


def test_next_write_removes_the_stage_of_a_killed_writer(spark, tmp_path):
    """``kill -9`` mid-write skips the writer's clean-up; its half-written stage must not pile up."""
    table, events = tmp_path / "table", tmp_path / "events"
    storage.publish(frame(spark, rows(3)), table, "run-1", sort_by=KEY)
    storage.replace_partition(frame(spark, rows(3)), events, "0-3", sort_by=KEY)
    for stage in (table / "_staging" / "run-2-0f0f", events / "_staging" / "range=3-9-0f0f"):
        (stage / "_temporary" / "0").mkdir(parents=True)
        (stage / "_temporary" / "0" / "part-00000-attempt.snappy.parquet").write_bytes(b"PAR1 torn")

    assert storage.list_partitions(events) == ["0-3"]
    storage.publish(frame(spark, rows(5)), table, "run-2", sort_by=KEY)
    storage.replace_partition(frame(spark, rows(5)), events, "3-9", sort_by=KEY)

    assert not list((table / "_staging").iterdir())
    assert not list((events / "_staging").iterdir())
    assertDataFrameEqual(storage.read_current(spark, table), frame(spark, rows(5)))
    assert storage.list_partitions(events) == ["0-3", "3-9"]


def test_replace_partition_twice_keeps_one_copy(spark, tmp_path):
    path = tmp_path / "events"
    assert storage.read_partitions(spark, path) is None
    storage.replace_partition(frame(spark, rows(9)), path, "0-100", sort_by=KEY)
    storage.replace_partition(frame(spark, rows(6, price_shift=100)), path, "100-200", sort_by=KEY)
    first = file_digests(path / "range=0-100")
    storage.replace_partition(frame(spark, list(reversed(rows(9))), 4), path, "0-100", sort_by=KEY)

    assert file_digests(path / "range=0-100") == first
    assert storage.list_partitions(path) == ["0-100", "100-200"]
    (path / "_staging" / "range=junk-123").mkdir()
    everything = storage.read_partitions(spark, path)
    assert everything.columns == SCHEMA.names
    assertDataFrameEqual(everything, frame(spark, rows(9) + rows(6, price_shift=100)))
    assertDataFrameEqual(storage.read_partitions(spark, path, ["100-200"]), frame(spark, rows(6, price_shift=100)))


def test_prune_keeps_the_newest_and_never_the_live_one(spark, tmp_path, monkeypatch):
    path = tmp_path / "table"
    for version in ("a", "b", "c"):
        storage.publish(frame(spark, rows(3)), path, version)
    with monkeypatch.context() as patch:
        patch.setattr(storage, "_switch_manifest", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
        with pytest.raises(KeyboardInterrupt):
            storage.publish(frame(spark, rows(3)), path, "never-live")
    assert storage.list_versions(path) == ["never-live", "a", "b", "c"]

    assert storage.prune(path, keep=2) == ["never-live", "a"]
    assert storage.list_versions(path) == ["b", "c"]

    storage.publish(frame(spark, rows(4)), path, "b")  # "b" is live again, "c" is now the older one
    assert storage.list_versions(path) == ["c", "b"]
    assert storage.prune(path, keep=1) == ["c"]
    assert storage.current_version(path) == "b"
    assertDataFrameEqual(storage.read_current(spark, path), frame(spark, rows(4)))
    with pytest.raises(ValueError, match="keep"):
        storage.prune(path, keep=0)


def test_metadata_sidecar_is_published_with_the_version_and_survives_readers(spark, tmp_path):
    path = tmp_path / "snapshot"
    storage.publish(frame(spark, rows(5)), path, "run-1", metadata={"xmin": 10, "xmax": 12, "xip": [11]})
    assert storage.read_metadata(path, "run-1") == {
        "xmin": 10,
        "xmax": 12,
        "xip": [11],
        "version": "run-1",
        "rows": 5,
        "files": ["part-00000.parquet"],
    }
    assert storage.read_current(spark, path).count() == 5  # the sidecar is not read as data
    assert storage.read_metadata(path, "nope") is None


def test_names_are_checked_and_run_ids_made_safe():
    for bad in ("../x", "a/b", "", "_staging", ".hidden", "a b"):
        with pytest.raises(ValueError):
            storage.check_name(bad)
    assert storage.safe_name("manual__2024-01-01T00:00:00+00:00") == "manual__2024-01-01T00:00:00+00:00"
    odd = storage.safe_name("scheduled run/ü")
    assert storage.check_name(odd) == odd
    assert odd != storage.safe_name("scheduled run/u")
    assert storage.safe_name("scheduled run/ü") == odd


def test_airflow_run_id_is_a_usable_version(spark, tmp_path):
    run_id = "scheduled__2024-01-01T00:00:00+00:00"
    storage.publish(frame(spark, rows(4)), tmp_path / "t", storage.safe_name(run_id), sort_by=KEY)
    assert storage.current_version(tmp_path / "t") == run_id
    assertDataFrameEqual(storage.read_current(spark, tmp_path / "t"), frame(spark, rows(4)))
