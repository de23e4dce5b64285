"""Retention prunes each expired run once, however long its commits stay in the datasets' history."""

from __future__ import annotations

from deltalake import DeltaTable

from cdc_reconcile import storage
from cdc_reconcile.config import Retention
from cdc_reconcile.lake import TableLake
from cdc_reconcile.retention import apply_retention
from tests.support.lake import delta_rows

RETENTION = Retention(keep_runs=2, vacuum_hours=168.0)


def write_run(spark, lake: TableLake, run: str, *, events: bool = True) -> None:
    """A run's per-run datasets: its snapshot always, its events unless its range was empty."""
    storage.replace_partition(spark.createDataFrame([(1, run)], "id long, name string"), lake.snapshot, run)
    if events:
        storage.replace_partition(spark.createDataFrame([(0, 7)], "partition int, offset long"), lake.events, run)
    else:  # an empty range: the run's commit to events holds no rows
        storage.replace_partition(spark.createDataFrame([], "partition int, offset long"), lake.events, run)


def runs_in(location: str) -> set[str]:
    return {row[storage.RUN_COLUMN] for row in delta_rows(location, columns=[storage.RUN_COLUMN])}


def test_a_pruned_run_is_not_pruned_again_in_later_runs(spark, tmp_path):
    lake = TableLake(tmp_path / "lake", "public.t")
    for run in ("r0", "r1", "r2"):
        write_run(spark, lake, run)
    assert apply_retention(spark, lake, RETENTION, "r2")["pruned_runs"] == ["r0"]

    write_run(spark, lake, "r3")
    done = apply_retention(spark, lake, RETENTION, "r3")
    assert done["pruned_runs"] == ["r1"], "r0's commits are still in the history, its rows are gone"
    assert runs_in(lake.events) == runs_in(lake.snapshot) == {"r2", "r3"}

    again = apply_retention(spark, lake, RETENTION, "r3")  # a retried compaction of the same run
    assert again == {"pruned_runs": [], "vacuumed": []}


def test_an_expired_run_with_an_empty_range_still_loses_its_snapshot(spark, tmp_path):
    lake = TableLake(tmp_path / "lake", "public.t")
    write_run(spark, lake, "quiet", events=False)
    for run in ("r1", "r2"):
        write_run(spark, lake, run)
    done = apply_retention(spark, lake, RETENTION, "r2")
    assert done["pruned_runs"] == ["quiet"] and "snapshot" in done["vacuumed"], done
    assert runs_in(lake.snapshot) == {"r1", "r2"}
    operations = [commit["operation"] for commit in DeltaTable(lake.events).history()]
    assert "DELETE" not in operations, f"no empty DELETE where the run had no rows: {operations}"


def test_vacuum_lists_folders_in_the_sessions_parallelism_and_leaves_the_session_as_it_was(spark, tmp_path):
    location = str(tmp_path / "events")
    for run in ("r0", "r1", "r2"):
        storage.replace_partition(spark.createDataFrame([(0, 7)], "partition int, offset long"), location, run)
    context, group = spark.sparkContext, "test-vacuum-listing"
    context.setJobGroup(group, "VACUUM")
    try:
        storage.vacuum(spark, location, 168.0)
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)
    tracker = context.statusTracker()
    stages = [s for job in tracker.getJobIdsForGroup(group) for s in tracker.getJobInfo(job).stageIds]
    tasks = [tracker.getStageInfo(s).numTasks for s in stages if tracker.getStageInfo(s) is not None]
    assert tasks and max(tasks) < 50, tasks  # Spark's default lists each folder level in 10,000 tasks
    setting = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
    assert spark.conf.get(setting) == "10000", "the session's own setting is back"
