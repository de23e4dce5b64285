"""Retention: how long runs stay re-runnable, and what the lake keeps.

After each compaction, runs beyond the newest ``keep_runs`` (ordered by their first commit to
``events``) lose their per-run partitions in one commit per dataset, and ``VACUUM`` deletes files no
version younger than ``vacuum_hours`` needs (old table versions included). Each pruned run is
recorded in the state database, so re-running one fails at its first step with a message that says
so, instead of reading what is gone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import storage
from .config import Retention
from .errors import InputError
from .lake import TableLake, version_name

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PER_RUN_DATASETS = (
    "events",
    "quarantine",
    "transactions",
    "changelog",
    "duplicates",
    "repairs",
    "audit",
    "findings",
    "snapshot",
)


class RunExpired(InputError):
    """The run's datasets were removed by retention; it cannot be re-run."""


def runs_oldest_first(spark: SparkSession, location: str) -> list[str]:
    """The runs that wrote a per-run dataset, by their first commit, oldest first."""
    first: dict[str, int] = {}
    for commit in storage.commits(spark, location):  # newest first: the last one seen is the first commit
        run = commit.metadata.get("run")
        if run:
            first[run] = commit.version
    return sorted(first, key=first.__getitem__)


def expired_runs(spark: SparkSession, lake: TableLake, keep_runs: int, current_run: str) -> list[str]:
    """Runs beyond the newest ``keep_runs``, never the current one."""
    runs = runs_oldest_first(spark, lake.events)
    keep = set(runs[-keep_runs:]) | {version_name(current_run)}
    return [run for run in runs if run not in keep]


def runs_with_rows(spark: SparkSession, lake: TableLake) -> dict[str, set[str]]:
    """For each per-run dataset, the runs with rows left in it.

    Not the datasets' history: a pruned run's commits stay in it (for Delta's log retention, 30 days by
    default), so an expired run found there may have been pruned long ago. A prune interrupted between
    two datasets leaves rows in the later ones, which the next prune removes.
    """
    return {dataset: set(storage.list_partitions(spark, getattr(lake, dataset))) for dataset in PER_RUN_DATASETS}


def apply_retention(spark: SparkSession, lake: TableLake, retention: Retention, current_run: str) -> dict[str, Any]:
    """Prune expired runs from every per-run dataset, then vacuum every dataset; returns what was done."""
    expired = expired_runs(spark, lake, retention.keep_runs, current_run)
    with_rows = runs_with_rows(spark, lake) if expired else {}
    present = set(expired) & set().union(*with_rows.values())
    if not present:
        return {"pruned_runs": [], "vacuumed": []}
    for dataset, runs in with_rows.items():  # a dataset without the runs' rows gets no (empty) commit
        storage.delete_partitions(spark, getattr(lake, dataset), sorted(present & runs))
    vacuumed = [
        dataset
        for dataset in (*PER_RUN_DATASETS, "table")
        if storage.vacuum(spark, getattr(lake, dataset), retention.vacuum_hours)
    ]
    return {"pruned_runs": sorted(present), "vacuumed": vacuumed}


def expired_message(table: str, run_id: str, pruned_at: Any, retention: Retention) -> str:
    return (
        f"{table}: run {run_id!r} is older than the retention (the newest {retention.keep_runs} runs are kept; "
        f"see retention.keep_runs in the table configuration): its lake datasets were removed at {pruned_at}, "
        "so it can no longer be re-run. Trigger a new run instead (with full_rescan to rebuild the table)."
    )
