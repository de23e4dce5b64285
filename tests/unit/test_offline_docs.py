"""Data Docs offline: every CDN link of GX's templates has a vendored copy, and pages are rewritten to it."""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

import great_expectations

from cdc_reconcile.offline_docs import ASSETS, ASSETS_DIR, FONT_AWESOME_FONTS, external_resources, make_offline

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


def test_the_vendored_files_are_there_and_equal_the_cdns():
    for asset in ASSETS.values():
        assert (ASSETS_DIR / asset.vendored).stat().st_size > 0, asset
    for font in FONT_AWESOME_FONTS:
        assert (ASSETS_DIR / "fortawesome-fontawesome-free@6.6.0" / font).exists()
    # GX pins these two by subresource integrity: the npm files are the CDN's bytes
    for url, integrity in {
        POPPER: "ApNbgh9B+Y1QKtv3Rn7W3mgPxhU9K/ScQsAP7hUibX39j7fakFPskvXusvfa0b4Q",
        BOOTSTRAP_JS: "JjSmVgyd0p3pXB1rRibZUAYoIIy6OrQ6VrjIEaFf/nJGzIxFDsf4x0xIM+B07jRM",
    }.items():
        data = (ASSETS_DIR / ASSETS[url].vendored).read_bytes()
        assert base64.b64encode(hashlib.sha384(data).digest()).decode() == integrity


def test_a_page_is_pointed_at_the_site_copies_relative_to_its_folder(tmp_path):
    site = tmp_path / "local_site"
    page = site / "validations" / "suite" / "run" / "page.html"
    page.parent.mkdir(parents=True)
    page.write_text(PAGE)
    (site / "index.html").write_text(PAGE)
    (site / "static" / "images").mkdir(parents=True)
    (site / "static" / "images" / "logo-long.png").write_bytes(b"GX copies its logo here")

    assert make_offline(site) == 2
    deep, index = page.read_text(), (site / "index.html").read_text()
    assert external_resources(PAGE) and external_resources(deep) == [] and external_resources(index) == []
    assert 'src="../../../static/vendor/popper.js@1.12.9/dist/umd/popper.min.js"></script>' in deep
    assert "integrity" not in deep and "crossorigin" not in deep, "a crossorigin script is refused from file://"
    assert 'href="./static/vendor/bootstrap@4.3.1/dist/css/bootstrap.min.css"' in index
    assert "url('./static/images/logo-long.png')" in index and 'src="./static/images/logo-long.png"' in index
    assert '<a href="https://greatexpectations.io">' in index, "plain links stay"
    for href in re.findall(r'(?:src|href)="(\.[^"]+)"', deep):
        assert (page.parent / href).resolve().is_file(), href

    assert make_offline(site) == 0, "a rewritten site is left as it is"


def test_the_vendoring_tool_packs_each_package_version_once_with_every_file_it_needs():
    from cdc_dev.vendor_assets import files_by_package

    packages = files_by_package()
    assert len({(a.package, a.version) for a in packages}) == len(packages)
    kept = {f"{asset.folder}/{name}" for asset, names in packages.items() for name in names}
    assert {asset.vendored for asset in ASSETS.values()} <= kept
    assert {f"fortawesome-fontawesome-free@6.6.0/{font}" for font in FONT_AWESOME_FONTS} <= kept
    on_disk = {p.relative_to(ASSETS_DIR).as_posix() for p in ASSETS_DIR.rglob("*") if p.is_file()}
    assert kept <= on_disk and not {
        p for p in on_disk - kept if not p.endswith(("LICENSE", "LICENSE.txt", "README.md"))
    }
