"""The one polling helper as the fault runner uses it: it hands back what it waited for, and a DAG run
that ends first stops the wait at once instead of at the deadline."""

from __future__ import annotations

import threading
import time

import pytest

from cdc_dev.faults.harness import FaultRunner
from cdc_dev.stack import StackConfig, StackError
from cdc_dev.stack.process import wait_until


def test_wait_until_returns_the_first_true_value_of_the_condition():
    answers = iter([None, (), ([4242], ["events/_staging/range=1"])])
    assert wait_until(lambda: next(answers), timeout=5, what="a value", interval=0.01) == (
        [4242],
        ["events/_staging/range=1"],
    )


def test_wait_until_names_what_it_waited_for_when_time_runs_out():
    with pytest.raises(StackError, match="the moment: not ready after 0s"):
        wait_until(lambda: 0, timeout=0.05, what="the moment", interval=0.01)


def test_wait_during_a_dag_run_gives_the_value_while_the_run_lasts(tmp_path, monkeypatch):
    monkeypatch.setenv("CDC_RUN_DIR", str(tmp_path))
    runner = FaultRunner(StackConfig(), log=lambda _: None)
    release = threading.Event()
    dag = threading.Thread(target=release.wait, daemon=True)
    dag.start()
    try:
        found = runner.wait_during(dag, lambda: [101, 102], what="compact_cdc started", timeout=5, interval=0.01)
    finally:
        release.set()
        dag.join()
    assert found == [101, 102]


def test_wait_during_stops_as_soon_as_the_dag_run_ends(tmp_path, monkeypatch):
    monkeypatch.setenv("CDC_RUN_DIR", str(tmp_path))
    runner = FaultRunner(StackConfig(), log=lambda _: None)
    dag = threading.Thread(target=lambda: None)
    dag.start()
    dag.join()
    began = time.monotonic()
    with pytest.raises(StackError, match="the DAG run ended before compact_cdc started"):
        runner.wait_during(dag, lambda: [], what="compact_cdc started", timeout=60, interval=0.01)
    assert time.monotonic() - began < 5
