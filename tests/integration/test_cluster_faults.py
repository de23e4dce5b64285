"""The fault matrix's scenarios 9-11 as tests: faults of the Spark standalone cluster and HDFS.

A stack of the module's own that also runs HDFS and the Spark cluster (``FaultRunner(cluster=True)``):
the DAG's Spark tasks submit to ``spark://`` and the lake is on ``hdfs://``. Each test asserts what
``test_faults.py`` asserts of a fault, plus the scenario's own checks (the crash came while
``compact_cdc`` wrote, each Kafka record of the range once in ``events``, no application left
running). All are ``slow`` (15-25 minutes each on 2 cores); ``bash scripts/faults.sh --scenario
cluster`` runs them 3 times as a command.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from cdc_dev.faults.harness import FaultRunner
from cdc_dev.stack.config import REPO_ROOT

from .test_faults import FAULTS_TEST_ENV, assert_outcome, run, runner_in

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# test_faults.py's ports (its stack is down once its module ends), HDFS and Spark at the developer's + 80
CLUSTER_FAULTS_TEST_ENV = {
    **FAULTS_TEST_ENV,
    "CDC_RUN_DIR": os.environ.get("CDC_TEST_CLUSTER_FAULTS_RUN_DIR", str(REPO_ROOT / ".run" / "faults-test-cluster")),
    "CDC_HDFS_NAMENODE_PORT": "29100",
    "CDC_HDFS_NAMENODE_HTTP_PORT": "29950",
    "CDC_HDFS_DATANODE_PORT": "29946",
    "CDC_HDFS_DATANODE_HTTP_PORT": "29944",
    "CDC_HDFS_DATANODE_IPC_PORT": "29947",
    "CDC_SPARK_MASTER_PORT": "27157",
    "CDC_SPARK_MASTER_UI_PORT": "28560",
    "CDC_SPARK_WORKER_UI_PORT": "28561",
}


@pytest.fixture(scope="module")
def runner() -> Iterator[FaultRunner]:
    yield from runner_in(CLUSTER_FAULTS_TEST_ENV, cluster=True)


def test_a_spark_worker_killed_while_compaction_writes(runner, artifacts):
    result = run(runner, "worker_kill", artifacts)
    assert result.injected == {"spark_workers_killed": 1, "redelivered_records": 40}, result.injected
    assert result.independent["redelivery"] == 40, result.independent
    assert_outcome(result)


def test_the_hdfs_datanode_killed_while_compaction_writes(runner, artifacts):
    result = run(runner, "datanode_kill", artifacts)
    assert result.injected == {"datanodes_killed": 1, "redelivered_records": 40}, result.injected
    assert_outcome(result)


def test_the_spark_master_restarted_between_two_tasks(runner, artifacts):
    result = run(runner, "master_restart", artifacts)
    assert result.injected == {"spark_masters_restarted": 1}, result.injected
    assert_outcome(result)
