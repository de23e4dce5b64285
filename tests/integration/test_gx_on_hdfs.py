"""Great Expectations' stores and Data Docs on the stack's HDFS, through WebHDFS (``webhdfs://``, no native client).

The session stack's HDFS is started for the module (as the DAG's HDFS test does) and the validations
run on the integration tests' Spark session. Two validations with two separate GX contexts write one
store and one index under a folder of this run's own, which is then read with plain WebHDFS requests,
not through the backend.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from urllib.parse import quote

import pytest
import requests

from cdc_dev.stack import Stack, StackConfig
from cdc_reconcile.offline_docs import external_resources
from cdc_reconcile.suite import describe
from tests.unit.test_suite import datasets, validate_at

pytestmark = pytest.mark.integration

FIRST, SECOND = "manual__2026-12-01T01:00:00+00:00", "manual__2026-12-01T02:00:00+00:00"


@pytest.fixture(scope="module")
def hdfs(stack: Stack, config: StackConfig) -> Iterator[StackConfig]:
    began = time.monotonic()
    stack.hdfs.start()
    print(f"\nhdfs up in {time.monotonic() - began:.1f} s")
    try:
        yield config
    finally:
        stack.hdfs.stop()


def webhdfs(config: StackConfig, path: str, op: str) -> requests.Response:
    response = requests.get(f"{config.hdfs_namenode_ui_url}/webhdfs/v1{path}", params={"op": op}, timeout=30)
    response.raise_for_status()
    return response


def test_two_validations_share_one_store_and_one_data_docs_index_on_hdfs(hdfs: StackConfig, spark) -> None:
    folder = f"/gx-{uuid.uuid4().hex[:8]}"  # the HDFS outlives this module: a folder no earlier run wrote
    root = f"webhdfs://{hdfs.host}:{hdfs.hdfs_namenode_http_port}{folder}"
    site = f"{folder}/gx/uncommitted/data_docs/local_site"
    data = datasets(spark, [(1, 1, 5)], [('{"order_id":1,"line_no":1}', "c", 100, 1000, None, None)], [])
    outcomes, seconds = [], []
    for run_id, table, rows in ((FIRST, "public.order_lines", 1), (SECOND, "public.other", 2)):
        began = time.monotonic()
        outcomes.append(validate_at(root, hdfs.data_docs_assets_dir, data, rows, table=table, run_id=run_id))
        seconds.append(time.monotonic() - began)
    print(f"validations on webhdfs://: {', '.join(f'{s:.1f} s' for s in seconds)}")
    first, second = outcomes
    assert first.success, describe(first)
    assert not second.success and [c["check"] for c in second.failed_checks] == ["row-count parity as of the snapshot"]
    assert first.data_docs == second.data_docs == f"{root}/gx/uncommitted/data_docs/local_site/index.html"

    results = webhdfs(hdfs, f"{folder}/gx/uncommitted/validations", "GETCONTENTSUMMARY").json()["ContentSummary"]
    assert results["fileCount"] == 16 + 1, "8 results per run, and GX's store id"
    pages = webhdfs(hdfs, f"{site}/validations", "GETCONTENTSUMMARY").json()["ContentSummary"]
    assert pages["fileCount"] == 16
    index = webhdfs(hdfs, f"{site}/index.html", "OPEN").text
    for run_id, table in ((FIRST, "public.order_lines"), (SECOND, "public.other")):
        run_name = f"{run_id} {table} before_repair".replace(":", "-")  # HDFS refuses ':' in a name
        assert index.count(quote(run_name)) >= 8, f"the index does not link {run_id}"
    assert "./static/vendor/" in index and external_resources(index) == [], "the index reads the vendored assets"
    assert webhdfs(hdfs, f"{site}/static/vendor/.cdc-vendored", "GETFILESTATUS").ok
