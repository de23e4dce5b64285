"""Data Docs offline: every CDN link of GX's templates has a copy in the assets folder, and pages are
rewritten to it; without the folder configured they keep their links, with a folder lacking a file they fail."""

from __future__ import annotations

import base64
import hashlib
import logging
import re
import shutil
from pathlib import Path

import great_expectations
import pytest

from cdc_reconcile.errors import InputError
from cdc_reconcile.offline_docs import (
    ASSETS,
    ASSETS_ENV,
    FONT_AWESOME_FONTS,
    configured_assets_dir,
    external_resources,
    finish_site,
    make_offline,
)

TEMPLATES = Path(great_expectations.__file__).parent / "render" / "view" / "templates"
POPPER = "https://cdnjs.cloudflare.com/ajax/libs/popper.js/1.12.9/umd/popper.min.js"
BOOTSTRAP_JS = "https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js"
GX_WEB_ASSETS = "https://great-expectations-web-assets.s3.us-east-2.amazonaws.com"
PAGE = f"""<html><head>
<link rel="stylesheet" href="https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css"/>
<script src="{POPPER}" integrity="sha384-x" crossorigin="anonymous"></script>
<style>.navbar-brand a {{ background: url('{GX_WEB_ASSETS}/full_logo_dark.png') }}</style>
</head><body>
<img src="{GX_WEB_ASSETS}/logo-long.png?d=1&dataContextId=abc"/>
<a href="https://greatexpectations.io">Great Expectations</a>
</body></html>"""


def template_links() -> set[str]:
    """The external stylesheets and scripts of the installed GX's page templates."""
    links = set()
    for template in TEMPLATES.glob("*.j2"):
        for tag in re.findall(r"<(?:script|link)\b[^>]*>", template.read_text()):
            links.update(re.findall(r"""(?:src|href)=["'](https?://[^"']+)""", tag))
    return links


def test_every_cdn_link_of_the_installed_gx_templates_is_vendored():
    links = template_links()
    assert links, f"no CDN links found in {TEMPLATES}: the templates moved"
    assert links <= set(ASSETS), f"not vendored: {sorted(links - set(ASSETS))}"


def test_the_vendored_files_are_there_and_equal_the_cdns(data_docs_assets: Path):
    for asset in ASSETS.values():
        assert (data_docs_assets / asset.vendored).stat().st_size > 0, asset
    for font in FONT_AWESOME_FONTS:
        assert (data_docs_assets / "fortawesome-fontawesome-free@6.6.0" / font).exists()
    # GX pins these two by subresource integrity: the npm files are the CDN's bytes
    for url, integrity in {
        POPPER: "ApNbgh9B+Y1QKtv3Rn7W3mgPxhU9K/ScQsAP7hUibX39j7fakFPskvXusvfa0b4Q",
        BOOTSTRAP_JS: "JjSmVgyd0p3pXB1rRibZUAYoIIy6OrQ6VrjIEaFf/nJGzIxFDsf4x0xIM+B07jRM",
    }.items():
        data = (data_docs_assets / ASSETS[url].vendored).read_bytes()
        assert base64.b64encode(hashlib.sha384(data).digest()).decode() == integrity


def built_site(tmp_path: Path) -> Path:
    """A site as GX builds it: a deep page and the index, both with CDN links, and GX's logo copy."""
    site = tmp_path / "local_site"
    page = site / "validations" / "suite" / "run" / "page.html"
    page.parent.mkdir(parents=True)
    page.write_text(PAGE)
    (site / "index.html").write_text(PAGE)
    (site / "static" / "images").mkdir(parents=True)
    (site / "static" / "images" / "logo-long.png").write_bytes(b"GX copies its logo here")
    return site


def test_a_page_is_pointed_at_the_site_copies_relative_to_its_folder(tmp_path, data_docs_assets: Path):
    site = built_site(tmp_path)
    page = site / "validations" / "suite" / "run" / "page.html"

    assert make_offline(site, data_docs_assets) == 2
    deep, index = page.read_text(), (site / "index.html").read_text()
    assert external_resources(PAGE) and external_resources(deep) == [] and external_resources(index) == []
    assert 'src="../../../static/vendor/popper.js@1.12.9/dist/umd/popper.min.js"></script>' in deep
    assert "integrity" not in deep and "crossorigin" not in deep, "a crossorigin script is refused from file://"
    assert 'href="./static/vendor/bootstrap@4.3.1/dist/css/bootstrap.min.css"' in index
    assert "url('./static/images/logo-long.png')" in index and 'src="./static/images/logo-long.png"' in index
    assert '<a href="https://greatexpectations.io">' in index, "plain links stay"
    for href in re.findall(r'(?:src|href)="(\.[^"]+)"', deep):
        assert (page.parent / href).resolve().is_file(), href

    assert make_offline(site, data_docs_assets) == 0, "a rewritten site is left as it is"


def test_without_an_assets_folder_the_pages_keep_their_cdn_links_and_the_log_says_how(tmp_path, caplog):
    site = built_site(tmp_path)

    assert configured_assets_dir({}) is None and configured_assets_dir({ASSETS_ENV: " "}) is None
    with caplog.at_level(logging.WARNING, logger="cdc_reconcile.offline_docs"):
        assert finish_site(site, configured_assets_dir({})) == 0
    assert (site / "index.html").read_text() == PAGE and not (site / "static" / "vendor").exists()
    [line] = caplog.messages
    assert ASSETS_ENV in line and "python -m cdc_dev.vendor_assets --target DIR" in line


def test_an_assets_folder_lacking_a_file_fails_naming_the_file_and_the_command(tmp_path, data_docs_assets: Path):
    partial = tmp_path / "assets"
    shutil.copytree(data_docs_assets, partial)
    (partial / ASSETS[POPPER].vendored).unlink()
    site = built_site(tmp_path)

    assert configured_assets_dir({ASSETS_ENV: str(partial)}) == partial
    with pytest.raises(InputError) as error:
        finish_site(site, configured_assets_dir({ASSETS_ENV: str(partial)}))
    assert ASSETS[POPPER].vendored in str(error.value)
    assert f"python -m cdc_dev.vendor_assets --target {partial}" in str(error.value)
    assert (site / "index.html").read_text() == PAGE


def test_the_vendoring_tool_packs_each_package_version_once_with_every_file_it_needs(data_docs_assets: Path):
    from cdc_dev.vendor_assets import STAMP, assets_stamp, files_by_package

    packages = files_by_package()
    assert len({(a.package, a.version) for a in packages}) == len(packages)
    kept = {f"{asset.folder}/{name}" for asset, names in packages.items() for name in names}
    assert {asset.vendored for asset in ASSETS.values()} <= kept
    assert {f"fortawesome-fontawesome-free@6.6.0/{font}" for font in FONT_AWESOME_FONTS} <= kept
    on_disk = {p.relative_to(data_docs_assets).as_posix() for p in data_docs_assets.rglob("*") if p.is_file()}
    assert kept <= on_disk and not {
        p for p in on_disk - kept if not p.endswith(("LICENSE", "LICENSE.txt", "README.md", STAMP))
    }
    assert (data_docs_assets / STAMP).read_text().strip() == assets_stamp(), "the cache predates the asset list"
