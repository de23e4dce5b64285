"""A PySpark application on the stack's standalone cluster, run as its own process by the cluster test.

Its own process because a Python process holds one SparkContext: inside pytest, ``getOrCreate`` would
hand back the integration tests' ``local[2]`` session and the cluster would never be used.

``python -m tests.support.cluster_app PATH`` writes a small DataFrame as Parquet to ``PATH`` (an
``hdfs://`` URI), reads it back and prints one JSON object: the rows read, the files Spark listed,
the Python the executors ran and the process ancestry of that Python (the executor JVM and the
worker that launched it), and the application as the master's JSON lists it while it runs.
"""

from __future__ import annotations

import json
import os
import sys

import requests

from cdc_dev.stack import StackConfig, cluster_session_conf
from cdc_reconcile.spark import build_session

ROWS = [(1, "alpha", 1.5), (2, "beta", None), (3, "Zoë 李", -2.25)]


def ancestry(_: object) -> list[object]:
    """Runs in an executor's Python: its interpreter (virtualenv) and the pids above it, up to init."""
    pids, pid = [], os.getpid()
    while pid > 1:
        with open(f"/proc/{pid}/stat") as stat:
            pid = int(stat.read().rsplit(") ", 1)[1].split()[1])
        pids.append(pid)
    return [sys.prefix, pids]


def main(path: str) -> dict[str, object]:
    config = StackConfig()
    # pyspark names the executors' Python from this variable only (not from spark.pyspark.python)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    conf = {**cluster_session_conf(config), "spark.sql.shuffle.partitions": "2", "spark.driver.memory": "1g"}
    spark = build_session("cdc-stack-cluster-test", conf=conf, jars=[])
    spark.sparkContext.setLogLevel("ERROR")
    try:
        frame = spark.createDataFrame(ROWS, "id long, name string, amount double")
        frame.repartition(2).write.mode("overwrite").parquet(path)
        back = spark.read.parquet(path)
        rows = sorted((r.id, r.name, r.amount) for r in back.collect())
        prefix, parents = spark.sparkContext.parallelize([0], 1).map(ancestry).collect()[0]
        app_id = spark.sparkContext.applicationId
        master = requests.get(f"{config.spark_master_ui_url}/json/", timeout=10).json()
        apps = [a for a in master.get("activeapps", []) if a.get("id") == app_id]
        return {
            "master": spark.sparkContext.master,
            "rows": rows,
            "files": sorted(back.inputFiles()),
            "executor_prefix": prefix,
            "executor_ancestry": parents,
            "app": apps[0] if apps else None,
        }
    finally:
        spark.stop()


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
