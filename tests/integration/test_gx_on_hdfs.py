"""Great Expectations' stores and Data Docs on the stack's HDFS, through WebHDFS (``webhdfs://``, no native client).

HDFS is started on its own (the stack's own ``Hdfs``, a run folder and ports of this module's own);
the validations run on the integration tests' Spark session (stopping a session of its own would stop
that shared one). Two validations with two separate GX contexts write
one store and one index, which is then read with plain WebHDFS requests, not through the backend.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from unittest import mock
from urllib.parse import quote

import pytest
import requests

from cdc_dev.stack import StackConfig
from cdc_dev.stack.hdfs import Hdfs
from cdc_reconcile.compaction import CDC_COLUMNS
from cdc_reconcile.offline_docs import external_resources
from cdc_reconcile.suite import describe, run_suite
from tests.unit.test_suite import COLUMNS, KEY, datasets

pytestmark = pytest.mark.integration

# The developer's HDFS ports + 30 (the session stack's are + 20, the cluster module's + 10).
GX_HDFS_ENV = {
    "CDC_HDFS_NAMENODE_PORT": os.environ.get("CDC_TEST_GX_HDFS_NAMENODE_PORT", "29050"),
    "CDC_HDFS_NAMENODE_HTTP_PORT": os.environ.get("CDC_TEST_GX_HDFS_NAMENODE_HTTP_PORT", "29900"),
    "CDC_HDFS_DATANODE_PORT": os.environ.get("CDC_TEST_GX_HDFS_DATANODE_PORT", "29896"),
    "CDC_HDFS_DATANODE_HTTP_PORT": os.environ.get("CDC_TEST_GX_HDFS_DATANODE_HTTP_PORT", "29894"),
    "CDC_HDFS_DATANODE_IPC_PORT": os.environ.get("CDC_TEST_GX_HDFS_DATANODE_IPC_PORT", "29897"),
}
FIRST, SECOND = "manual__2026-12-01T01:00:00+00:00", "manual__2026-12-01T02:00:00+00:00"
SITE = "/cdc/gx/gx/uncommitted/data_docs/local_site"


@pytest.fixture(scope="module")
def hdfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackConfig]:
    with mock.patch.dict(os.environ, {**GX_HDFS_ENV, "CDC_RUN_DIR": str(tmp_path_factory.mktemp("gx-hdfs"))}):
        config = StackConfig()
    node = Hdfs(config)
    try:
        began = time.monotonic()
        node.start()
        print(f"\nhdfs up in {time.monotonic() - began:.1f} s")
        yield config
    finally:
        node.stop()


def webhdfs(config: StackConfig, path: str, op: str) -> requests.Response:
    response = requests.get(f"{config.hdfs_namenode_ui_url}/webhdfs/v1{path}", params={"op": op}, timeout=30)
    response.raise_for_status()
    return response


def test_two_validations_share_one_store_and_one_data_docs_index_on_hdfs(hdfs: StackConfig, spark) -> None:
    root = f"webhdfs://{hdfs.host}:{hdfs.hdfs_namenode_http_port}/cdc/gx"
    data = datasets(spark, [(1, 1, 5)], [('{"order_id":1,"line_no":1}', "c", 100, 1000, None, None)], [])
    outcomes, seconds = [], []
    for run_id, table, rows in ((FIRST, "public.order_lines", 1), (SECOND, "public.other", 2)):
        began = time.monotonic()
        outcomes.append(
            run_suite(
                data,
                table=table,
                run_id=run_id,
                phase="before_repair",
                key=KEY,
                parameters={"snapshot_row_count": rows, "lake_columns": [*COLUMNS, *CDC_COLUMNS]},
                counts={},
                gx_root=root,
                data_docs_assets=StackConfig().data_docs_assets_dir,
            )
        )
        seconds.append(time.monotonic() - began)
    print(f"validations on webhdfs://: {', '.join(f'{s:.1f} s' for s in seconds)}")
    first, second = outcomes
    assert first.success, describe(first)
    assert not second.success and [c["check"] for c in second.failed_checks] == ["row-count parity as of the snapshot"]
    assert first.data_docs == second.data_docs == f"{root}/gx/uncommitted/data_docs/local_site/index.html"

    results = webhdfs(hdfs, "/cdc/gx/gx/uncommitted/validations", "GETCONTENTSUMMARY").json()["ContentSummary"]
    assert results["fileCount"] == 16 + 1, "8 results per run, and GX's store id"
    pages = webhdfs(hdfs, f"{SITE}/validations", "GETCONTENTSUMMARY").json()["ContentSummary"]
    assert pages["fileCount"] == 16
    index = webhdfs(hdfs, f"{SITE}/index.html", "OPEN").text
    for run_id, table in ((FIRST, "public.order_lines"), (SECOND, "public.other")):
        run_name = f"{run_id} {table} before_repair".replace(":", "-")  # HDFS refuses ':' in a name
        assert index.count(quote(run_name)) >= 8, f"the index does not link {run_id}"
    assert "./static/vendor/" in index and external_resources(index) == [], "the index reads the vendored assets"
    assert webhdfs(hdfs, f"{SITE}/static/vendor/.cdc-vendored", "GETFILESTATUS").ok
