"""The lake's Delta datasets: what a reader sees across publishes, re-runs and failed writes."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.testing import assertDataFrameEqual

from cdc_reconcile import storage
from tests.support.lake import delta_rows

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


def test_publish_commits_once_per_write_with_the_runs_metadata(spark, tmp_path):
    path = tmp_path / "table"
    assert storage.read(spark, path) is None
    assert storage.latest_version(spark, path) is None

    first = storage.publish(frame(spark, rows(50), 3), path, "run-1", sort_by=KEY, metadata={"base_version": None})
    second = storage.publish(frame(spark, rows(20, price_shift=5)), path, "run-2", metadata={"base_version": 0})

    assert (first.version, second.version) == (0, 1)
    assert first.metadata == {"base_version": None, "run": "run-1"}
    assert first.rows_written == 50 and first.bytes_written > 0
    assertDataFrameEqual(storage.read(spark, path), frame(spark, rows(20, price_shift=5)))
    assertDataFrameEqual(storage.read(spark, path, first.version), frame(spark, rows(50)))
    assert storage.run_commit(spark, path, "run-1") == first
    assert storage.run_commit(spark, path, "run-3") is None


def test_a_write_that_fails_leaves_the_previous_version(spark, tmp_path):
    path = tmp_path / "table"
    storage.publish(frame(spark, rows(10)), path, "run-1", sort_by=KEY)
    broken = frame(spark, rows(30)).withColumn(
        "price", F.when(F.col("order_id") == 5, F.raise_error(F.lit("boom"))).otherwise(F.col("price"))
    )
    with pytest.raises(Exception, match="boom"):
        storage.publish(broken, path, "run-2", sort_by=KEY)
    assert storage.latest_version(spark, path) == 0
    assertDataFrameEqual(storage.read(spark, path), frame(spark, rows(10)))
    assert storage.run_commit(spark, path, "run-2") is None


def test_replacing_a_runs_partition_never_adds_a_second_copy(spark, tmp_path):
    path = tmp_path / "events"
    assert storage.read_partitions(spark, path) is None
    storage.replace_partition(frame(spark, rows(9)), path, "r1", sort_by=KEY)
    storage.replace_partition(frame(spark, rows(6, price_shift=100)), path, "r2", sort_by=KEY)
    storage.replace_partition(frame(spark, list(reversed(rows(9))), 4), path, "r1", sort_by=KEY, partitions=2)

    assert storage.list_partitions(spark, path) == ["r1", "r2"]
    assert storage.read_partitions(spark, path).count() == 15
    assertDataFrameEqual(storage.read_partitions(spark, path, ["r1"]), frame(spark, rows(9)))
    assertDataFrameEqual(storage.read_partitions(spark, path, exclude=["r1"]), frame(spark, rows(6, price_shift=100)))
    assert storage.runs_newest_first(spark, path) == ["r1", "r2"]


def test_an_empty_write_still_commits_so_a_run_that_wrote_nothing_is_known(spark, tmp_path):
    path = tmp_path / "quarantine"
    storage.replace_partition(frame(spark, rows(3)), path, "r1")
    empty = storage.replace_partition(frame(spark, []), path, "r2", metadata={"reason": "none"})
    assert storage.run_commit(spark, path, "r2") == empty
    assert storage.read_partitions(spark, path, ["r2"]).count() == 0
    assert storage.list_partitions(spark, path) == ["r1"]


def test_other_readers_see_exactly_the_committed_rows(spark, tmp_path):
    """delta-rs, without a JVM, reads the table the run published and the per-run partitions."""
    table, events = tmp_path / "table", tmp_path / "events"
    storage.publish(frame(spark, rows(10)), table, "run-1", sort_by=KEY)
    storage.publish(frame(spark, rows(4)), table, "run-2", sort_by=KEY)
    storage.replace_partition(frame(spark, rows(7)), events, "run-1")
    storage.replace_partition(frame(spark, rows(5)), events, "run-1")

    assert len(delta_rows(table)) == 4
    assert len(delta_rows(table, version=0)) == 10
    assert len(delta_rows(events, run="run-1")) == 5


def test_column_names_delta_refuses_are_mapped(spark, tmp_path):
    odd = spark.createDataFrame([(1, "a")], "`line no` int, `sku,1` string")
    storage.publish(odd, tmp_path / "t", "run-1")
    assertDataFrameEqual(storage.read(spark, tmp_path / "t"), odd)


def test_prune_keeps_the_newest_runs(spark, tmp_path):
    path = tmp_path / "snapshot"
    for run in ("a", "b", "c"):
        storage.replace_partition(frame(spark, rows(3)), path, run)
    storage.replace_partition(frame(spark, rows(4)), path, "a")  # "a" is the newest again
    assert storage.prune(spark, path, keep=2) == ["b"]
    assert storage.list_partitions(spark, path) == ["a", "c"]
    with pytest.raises(ValueError):
        storage.prune(spark, path, keep=0)


def test_the_run_column_is_reserved(spark, tmp_path):
    clash = frame(spark, rows(2)).withColumn(storage.RUN_COLUMN, F.lit("x"))
    with pytest.raises(storage.StorageError, match=storage.RUN_COLUMN):
        storage.replace_partition(clash, tmp_path / "e", "r1")


def test_names_and_locations():
    for bad in ("", "../x", "a/b", "-x", "a" * 201):
        with pytest.raises(ValueError):
            storage.check_name(bad)
    assert storage.safe_name("manual__2024-01-01T00:00:00+00:00") == "manual__2024-01-01T00:00:00+00:00"
    odd = storage.safe_name("scheduled run/ü")
    assert storage.check_name(odd) == odd
    assert odd != storage.safe_name("scheduled run/u")
    assert storage.uri("hdfs://nn:8020/lake/") == "hdfs://nn:8020/lake"
    assert storage.uri("/data/lake") == "file:///data/lake"
    assert storage.join("s3a://bucket/lake", "public.orders", "table") == "s3a://bucket/lake/public.orders/table"


def counted_history_reads(monkeypatch) -> list[str]:
    """Every ``DESCRIBE HISTORY`` the module issues (each still runs on Spark), by location."""
    reads: list[str] = []
    read = storage._read_commits

    def counting(spark, location, *, limit=None):
        reads.append(storage.uri(location))
        return read(spark, location, limit=limit)

    monkeypatch.setattr(storage, "_read_commits", counting)
    return reads


def test_within_a_step_a_history_is_read_once_and_its_own_commits_are_added(spark, tmp_path, monkeypatch):
    table, events = tmp_path / "table", tmp_path / "events"
    storage.publish(frame(spark, rows(3)), table, "r0")
    reads = counted_history_reads(monkeypatch)
    with storage.histories_kept():
        assert storage.run_commit(spark, table, "r0").version == 0
        assert storage.latest_version(spark, table) == 0 and storage.exists(spark, table)
        assert reads == [storage.uri(table)], "one DESCRIBE HISTORY for three questions"
        storage.publish(frame(spark, rows(4)), table, "r1")
        storage.replace_partition(frame(spark, rows(2)), events, "r1")
        kept = {p: storage.commits(spark, p) for p in (table, events)}
        assert [c.version for c in kept[table]] == [1, 0]
        assert storage.commits(spark, table, limit=1) == kept[table][:1]
        storage.replace_partition(frame(spark, rows(5)), events, "r2")
        kept[events] = storage.commits(spark, events)
        reads_in_step = len(reads)
    for path, history in kept.items():
        assert history == storage.commits(spark, path), f"{path}: the kept history is the table's"
    assert len(reads) == reads_in_step + 2, "outside a step every question reads the history"
    # in the step: the first read, one newest commit per write, and events' history read once after its first write
    assert reads_in_step == 1 + 3 + 1


def test_a_step_reads_the_history_again_after_a_vacuum_or_a_failed_write(spark, tmp_path, monkeypatch):
    table = tmp_path / "table"
    storage.publish(frame(spark, rows(3)), table, "r0")
    reads = counted_history_reads(monkeypatch)
    with storage.histories_kept():
        storage.commits(spark, table)
        storage.vacuum(spark, table, retain_hours=168)
        after_vacuum = storage.commits(spark, table)
        assert reads.count(storage.uri(table)) == 2
        with pytest.raises(storage.StorageError, match="reserved"):
            storage.publish(frame(spark, rows(3)).withColumn(storage.RUN_COLUMN, F.lit("x")), table, "r1")
        storage.commits(spark, table)
        assert reads.count(storage.uri(table)) == 2, "a write refused before Spark ran keeps what was read"
        failing = frame(spark, rows(3)).withColumn("sku", F.raise_error(F.lit("boom")))
        with pytest.raises(Exception, match="boom"):
            storage.publish(failing, table, "r1")
        assert storage.commits(spark, table) == after_vacuum
        assert reads.count(storage.uri(table)) == 3, "a write that failed in Spark may have committed: read again"
    assert after_vacuum == storage.commits(spark, table)
