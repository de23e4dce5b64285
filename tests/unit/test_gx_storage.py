"""The GX root as a URL on shared storage: the fsspec store backend, and the suite's stores and Data Docs through it.

Two validations with two separate GX contexts on one root must both land in its validation store,
and the Data Docs index either one builds must link both: that is what several hosts sharing one
root rely on. The index is read with fsspec, not through GX.
"""

from __future__ import annotations

import re
import socket
import time
import uuid
from urllib.parse import quote

import fsspec
import pytest
from great_expectations.exceptions import InvalidKeyError, StoreBackendError

from cdc_reconcile.errors import InputError, UnreachableError
from cdc_reconcile.gx_storage import FsspecStoreBackend
from cdc_reconcile.offline_docs import STAMP, VENDOR, external_resources
from cdc_reconcile.shared_storage import check_reachable, is_url, normalize_url, storable_name
from cdc_reconcile.suite import SUITE, data_docs_index, describe
from cdc_reconcile.trends.history import report_path, write_report

from .test_suite import datasets, validate_at

FIRST, SECOND = "manual__2026-12-01T01:00:00+00:00", "manual__2026-12-01T02:00:00+00:00"
RUN_TIME = re.compile(r"\d{8}T\d{6}\.\d{6}Z")


def validate(spark, gx_root, assets, data, *, snapshot_rows, run_id=FIRST, table="public.order_lines"):
    return validate_at(gx_root, assets, data, snapshot_rows, table=table, run_id=run_id)


def memory_url() -> str:
    return f"memory://gx-{uuid.uuid4().hex[:8]}"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- the store backend --------------------------------------------------------------------------------


def test_the_backend_sets_gets_lists_and_removes_keys_as_files_under_its_url():
    url = memory_url()
    backend = FsspecStoreBackend(url, filepath_prefix="validations", filepath_suffix=".json")
    fs = fsspec.filesystem("memory")
    key = ("cdc_reconciliation.public.t.lake_as_of", "run 1", "20261201T010000.000000Z", "batch")

    assert not backend.has_key(key)
    with pytest.raises(InvalidKeyError):
        backend.get(key)
    backend.set(key, '{"success": true}\n')
    assert backend.has_key(key)
    assert backend.get(key) == '{"success": true}'
    assert fs.cat_file(f"{url}/validations/{'/'.join(key)}.json") == b'{"success": true}\n'
    assert backend.list_keys() == [key]  # the store id file is GX's own key, outside the prefix
    assert backend.store_backend_id is not None
    assert fs.isfile(f"{url}/validations/.ge_store_backend_id")

    assert backend.get_url_for_key(key) == f"{url}/validations/{quote('/'.join(key))}.json"
    with pytest.raises(StoreBackendError, match="base_public_path"):
        backend.get_public_url_for_key(key)
    public = FsspecStoreBackend(url, filepath_suffix=".html", base_public_path="https://dq.example.com/site/")
    assert public.get_public_url_for_key(("index",)) == "https://dq.example.com/site/index.html"

    moved = (*key[:3], "other")
    assert backend.move(key, moved) == moved
    assert not backend.has_key(key) and backend.get(moved) == '{"success": true}'
    assert backend.remove_key(moved) is True
    assert backend.remove_key(moved) is False
    assert backend.list_keys() == []


def test_an_html_page_takes_its_content_type_and_a_template_key_maps_to_one_file():
    url = memory_url()
    index = FsspecStoreBackend(url, filepath_template="index.html", suppress_store_backend_id=True)
    index.set((), "<html></html>", content_encoding="utf-8", content_type="text/html; charset=utf-8")
    assert fsspec.filesystem("memory").cat_file(f"{url}/index.html") == b"<html></html>"
    assert index.has_key(())
    assert index.list_keys() == [], "an empty key is not listed, as by GX's own filesystem backend"
    assert not fsspec.filesystem("memory").exists(f"{url}/.ge_store_backend_id"), "suppressed, as GX's site asks"


def test_removing_a_key_removes_its_emptied_folders_on_a_filesystem_that_has_folders(tmp_path):
    backend = FsspecStoreBackend(f"file://{tmp_path}/site", suppress_store_backend_id=True, filepath_suffix=".html")
    backend.set(("validations", "a", "b"), "x")
    backend.set(("validations", "c"), "y")
    assert sorted(backend.list_keys()) == [("validations", "a", "b"), ("validations", "c")]
    backend.remove_key(("validations", "a", "b"))
    assert not (tmp_path / "site" / "validations" / "a").exists()
    assert (tmp_path / "site" / "validations" / "c.html").read_text() == "y"


# -- URLs and their errors ------------------------------------------------------------------------------


def test_a_url_root_keeps_its_url_and_a_path_stays_a_path(tmp_path):
    assert is_url("webhdfs://nn:9870/cdc/gx") and is_url("memory://gx")
    assert not is_url(str(tmp_path)) and not is_url(tmp_path)
    assert (
        normalize_url("webhdfs://nn:9870/cdc/lake/../great_expectations/") == "webhdfs://nn:9870/cdc/great_expectations"
    )
    assert data_docs_index("s3://bucket/gx/") == "s3://bucket/gx/gx/uncommitted/data_docs/local_site/index.html"
    assert report_path("s3://bucket/gx") == "s3://bucket/gx/gx/uncommitted/data_docs/local_site/cdc_trends.html"
    assert data_docs_index(tmp_path) == tmp_path / "gx" / "uncommitted" / "data_docs" / "local_site" / "index.html"


def test_hdfs_gets_run_names_without_the_colon_it_refuses_and_other_storage_keeps_them(tmp_path):
    name = "manual__2026-12-01T01:00:00+00:00 public.t before_repair"
    assert storable_name("webhdfs://nn:9870/gx", name) == "manual__2026-12-01T01-00-00+00-00 public.t before_repair"
    assert storable_name("s3://bucket/gx", name) == storable_name(tmp_path, name) == name


class NoRuns:
    """A state database connection whose history is empty (the report still renders)."""

    def transaction(self):
        import contextlib

        return contextlib.nullcontext()

    def execute(self, *args):
        return self

    def fetchall(self):
        return []


def test_the_trend_report_is_written_beside_the_index_on_a_url_root():
    root = memory_url()
    written = write_report(NoRuns(), report_path(root))
    assert written == f"{root}/gx/uncommitted/data_docs/local_site/cdc_trends.html"
    assert "<html" in fsspec.filesystem("memory").cat_file(written).decode()


def test_an_unknown_or_unreachable_filesystem_fails_naming_the_url_and_what_to_do(spark, data_docs_assets):
    with pytest.raises(InputError, match=r"nosuchfs://x/gx: fsspec knows no filesystem nosuchfs://"):
        check_reachable("nosuchfs://x/gx")
    with pytest.raises(InputError, match=r"hdfs://.*use webhdfs://<namenode>:<its HTTP port"):
        check_reachable("hdfs://127.0.0.1:1/gx")
    url = f"webhdfs://127.0.0.1:{closed_port()}/cdc/gx"
    with pytest.raises(UnreachableError, match=rf"{url}: the storage at .* did not answer.*NameNode's HTTP port"):
        validate(spark, url, data_docs_assets, datasets(spark, [(1, 1, 5)], [], []), snapshot_rows=1)


# -- the suite on a URL root ------------------------------------------------------------------------------


def project_files(fs, root: str) -> set[str]:
    """Every file of a GX root's suites, results and Data Docs, relative, with the run times blanked."""
    base = fs._strip_protocol(root).rstrip("/") + "/gx/"
    found = [*fs.find(base + "expectations"), *fs.find(base + "uncommitted")]
    return {RUN_TIME.sub("<time>", path[len(base) :]) for path in found if not path.endswith(".lock")}


@pytest.mark.parametrize("scheme", ["memory", "file"])
def test_two_validations_with_two_contexts_share_one_store_and_one_index_on_a_url_root(
    spark, tmp_path, data_docs_assets, scheme
):
    root = memory_url() if scheme == "memory" else f"file://{tmp_path}/shared/gx"
    fs, _ = fsspec.core.url_to_fs(root)
    passing = datasets(spark, [(1, 1, 5)], [('{"order_id":1,"line_no":1}', "c", 100, 1000, None, None)], [])
    started = time.monotonic()
    first = validate(spark, root, data_docs_assets, passing, snapshot_rows=1, run_id=FIRST)
    # another table, another context (each run_suite builds its own), and a row count that is wrong
    second = validate(spark, root, data_docs_assets, passing, snapshot_rows=2, run_id=SECOND, table="public.other")
    print(f"two validations on {scheme}://: {time.monotonic() - started:.1f} s")

    assert first.success, describe(first)
    assert not second.success
    assert [c["check"] for c in second.failed_checks] == ["row-count parity as of the snapshot"]
    index_url = f"{root}/gx/uncommitted/data_docs/local_site/index.html"
    assert first.data_docs == second.data_docs == index_url

    results = [p for p in fs.find(f"{root}/gx/uncommitted/validations") if p.endswith(".json")]
    assert len(results) == 16
    for run_id, table in ((FIRST, "public.order_lines"), (SECOND, "public.other")):
        assert sum(f"/{run_id} {table} before_repair/" in p for p in results) == 8

    with fsspec.open(index_url, "rt", encoding="utf-8") as handle:
        index = handle.read()
    site = f"{root}/gx/uncommitted/data_docs/local_site"
    pages = [p for p in fs.find(f"{site}/validations") if p.endswith(".html")]
    assert len(pages) == 16
    site_path = fs._strip_protocol(site).rstrip("/")
    for page in pages:
        assert quote(page[len(site_path) + 1 :]) in index, f"the index does not link {page}"
    for table in ("public.order_lines", "public.other"):
        suite_page = f"{site}/expectations/{SUITE}/{table.replace('.', '/')}/lake_as_of.html"
        assert fs.isfile(suite_page), "another table's suite page was cleaned away"
        assert f"{SUITE}.{table}.lake_as_of" in index
    assert external_resources(index) == [], "the index reads the vendored assets"
    page = next(p for p in pages if quote(SECOND) in p or SECOND in p)
    assert external_resources(fs.cat_file(page).decode()) == []
    assert fs.isfile(f"{site}/{VENDOR}/{STAMP}")
    assert fs.isfile(f"{site}/static/images/logo-long.png"), "GX's own static files are copied too"

    if scheme == "file":
        local = tmp_path / "local"
        validate(spark, local, data_docs_assets, passing, snapshot_rows=1, run_id=FIRST)
        validate(spark, local, data_docs_assets, passing, snapshot_rows=2, run_id=SECOND, table="public.other")
        local_files = project_files(fsspec.filesystem("file"), str(local))
        assert project_files(fs, root) == local_files - {"uncommitted/config_variables.yml"}
