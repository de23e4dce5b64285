"""A long Spark step reports its active jobs and their tasks while it runs."""

from __future__ import annotations

import io
import re
import time

import pytest

from cdc_reconcile import progress
from tests.support.polling import eventually


def slow_identity(value: int) -> int:
    time.sleep(0.4)
    return value


def test_progress_lines_name_the_active_job_and_its_tasks_while_it_runs(spark) -> None:
    out = io.StringIO()
    with progress.SparkProgress(spark, "compact_cdc public.t", interval=0.2, out=out):
        assert spark.sparkContext.parallelize(range(8), 4).map(slow_identity).count() == 8
    lines = out.getvalue().splitlines()
    assert lines[0] == "[progress] compact_cdc public.t: Spark UI: off (spark.ui.enabled=false)"
    running = [line for line in lines[1:] if re.fullmatch(r"\[progress\] compact_cdc public\.t: \d+s; .+", line)]
    assert running, lines
    assert any(re.search(r"job \d+ \(stage \d+ [0-4]/4 tasks\)", line) for line in running), running


def test_no_line_while_no_job_runs(spark) -> None:
    # the status tracker learns of a finished job through the listener bus, after the action returned:
    # an earlier test's job can still look active for a moment
    tracker = spark.sparkContext.statusTracker()
    eventually(lambda: not tracker.getActiveJobsIds(), timeout=30, what="no active Spark job", interval=0.1)
    out = io.StringIO()
    reporter = progress.SparkProgress(spark, "validate public.t", interval=0, out=out)
    with reporter:
        assert reporter.report() is None
    assert out.getvalue().splitlines() == ["[progress] validate public.t: Spark UI: off (spark.ui.enabled=false)"]


def test_the_interval_comes_from_the_environment_and_a_bad_one_is_named(monkeypatch) -> None:
    monkeypatch.delenv(progress.INTERVAL_SWITCH, raising=False)
    assert progress.progress_interval() == progress.DEFAULT_INTERVAL <= 30
    monkeypatch.setenv(progress.INTERVAL_SWITCH, "2.5")
    assert progress.progress_interval() == 2.5
    monkeypatch.setenv(progress.INTERVAL_SWITCH, "often")
    with pytest.raises(ValueError, match="CDC_PROGRESS_INTERVAL='often' is not a number of seconds"):
        progress.progress_interval()
