"""Data Docs that read offline: the styles and scripts Great Expectations links from public CDNs,
served from copies inside the built site instead.

GX's page templates load Bootstrap, bootstrap-table, jQuery, Font Awesome and Vega from CDNs. On a
machine without internet the pages render unstyled and the index's lists stay empty (bootstrap-table
fills them from script). The same files, byte for byte, come from the npm registry into a folder the
deployment names with ``CDC_DATA_DOCS_ASSETS`` (filled by ``python -m cdc_dev.vendor_assets --target
DIR``; the dev set-up fills ``.cache/data-docs-assets``); after each build :func:`make_offline`
copies them to ``<site>/static/vendor/`` and points every page at them. Without the setting the
pages keep their CDN links. A site on shared storage (a URL, :mod:`shared_storage`) gets the same
files through fsspec, and only the pages the build rendered are read and rewritten.
"""

from __future__ import annotations

import hashlib
import logging
import os
import posixpath
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .errors import InputError
from .shared_storage import is_url, open_url

ASSETS_ENV = "CDC_DATA_DOCS_ASSETS"
FILL_COMMAND = "python -m cdc_dev.vendor_assets --target DIR"
VENDOR = "static/vendor"
STAMP = ".cdc-vendored"


@dataclass(frozen=True)
class Asset:
    """One CDN link of GX's templates and the npm package file that is the same content."""

    url: str
    package: str
    version: str
    path: str

    @property
    def folder(self) -> str:
        """The package's folder in the assets folder: ``name@version``, a scope's ``@`` and ``/`` flattened."""
        return f"{self.package.lstrip('@').replace('/', '-')}@{self.version}"

    @property
    def vendored(self) -> str:
        return f"{self.folder}/{self.path}"


def _assets(*rows: tuple[str, str, str, str]) -> dict[str, Asset]:
    return {url: Asset(url, package, version, path) for url, package, version, path in rows}


BOOTSTRAP_TABLE = "https://unpkg.com/bootstrap-table@{}/dist/"
FILTER_CONTROL = "extensions/filter-control/bootstrap-table-filter-control"
DATEPICKER = "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/"
# Every external stylesheet and script of great_expectations 1.x's render/view/templates. A floating
# CDN version (vega@5) is pinned to the newest release of that major version.
ASSETS = _assets(
    (BOOTSTRAP_TABLE.format("1.19.1") + "bootstrap-table.min.css", "bootstrap-table", "1.19.1",
     "dist/bootstrap-table.min.css"),
    (BOOTSTRAP_TABLE.format("1.19.1") + "bootstrap-table.min.js", "bootstrap-table", "1.19.1",
     "dist/bootstrap-table.min.js"),
    (BOOTSTRAP_TABLE.format("1.19.1") + FILTER_CONTROL + ".min.js", "bootstrap-table", "1.19.1",
     f"dist/{FILTER_CONTROL}.min.js"),
    (BOOTSTRAP_TABLE.format("1.19.0") + FILTER_CONTROL + ".min.css", "bootstrap-table", "1.19.0",
     f"dist/{FILTER_CONTROL}.min.css"),
    (BOOTSTRAP_TABLE.format("1.19.0") + FILTER_CONTROL + ".css", "bootstrap-table", "1.19.0",
     f"dist/{FILTER_CONTROL}.css"),
    ("https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css", "bootstrap", "4.3.1",
     "dist/css/bootstrap.min.css"),
    ("https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js", "bootstrap", "4.3.1",
     "dist/js/bootstrap.min.js"),
    (DATEPICKER + "css/bootstrap-datepicker.min.css", "bootstrap-datepicker", "1.9.0",
     "dist/css/bootstrap-datepicker.min.css"),
    (DATEPICKER + "js/bootstrap-datepicker.min.js", "bootstrap-datepicker", "1.9.0",
     "dist/js/bootstrap-datepicker.min.js"),
    # the same stylesheet, minified by its package
    ("https://cdn.jsdelivr.net/npm/@forevolve/bootstrap-dark@1.1.0/dist/css/bootstrap-prefers-dark.css",
     "@forevolve/bootstrap-dark", "1.1.0", "dist/css/bootstrap-prefers-dark.min.css"),
    ("https://cdn.jsdelivr.net/npm/vega@5", "vega", "5.33.1", "build/vega.min.js"),
    ("https://cdn.jsdelivr.net/npm/vega-lite@5", "vega-lite", "5.23.0", "build/vega-lite.min.js"),
    ("https://cdn.jsdelivr.net/npm/vega-embed@6", "vega-embed", "6.29.0", "build/vega-embed.min.js"),
    ("https://cdnjs.cloudflare.com/ajax/libs/font-awesome/6.6.0/css/all.min.css", "@fortawesome/fontawesome-free",
     "6.6.0", "css/all.min.css"),
    ("https://code.jquery.com/jquery-3.7.1.min.js", "jquery", "3.7.1", "dist/jquery.min.js"),
    ("https://cdnjs.cloudflare.com/ajax/libs/popper.js/1.12.9/umd/popper.min.js", "popper.js", "1.12.9",
     "dist/umd/popper.min.js"),
)  # fmt: skip
FONT_AWESOME = "@fortawesome/fontawesome-free"
# Files the stylesheets above load by relative path (browsers take the first format they read: woff2).
FONT_AWESOME_FONTS = tuple(
    f"webfonts/{name}.woff2" for name in ("fa-brands-400", "fa-regular-400", "fa-solid-900", "fa-v4compatibility")
)
# GX's logo, linked from its web assets bucket; GX copies its own logo into the site's static/images.
LOGO = re.compile(r"https://great-expectations-web-assets\.s3\.us-east-2\.amazonaws\.com/(?:logo-long|full_logo_dark)"
                  r"\.png(?:\?[^\"')\s]*)?")  # fmt: skip
TAG = re.compile(r"<(?:script|link)\b[^>]*>", re.IGNORECASE)
LINK = re.compile(r"""\b(src|href)=(["'])(https?://[^"']+)\2""", re.IGNORECASE)
# Subresource integrity names the CDN's bytes (the vendored ones are equal), but a crossorigin script
# read from file:// is refused by browsers; both attributes go with the CDN link.
CORS_ATTRIBUTES = re.compile(r"""\s+(?:integrity|crossorigin)=(["'])[^"']*\1""", re.IGNORECASE)
EXTERNAL = re.compile(
    r"""<(?:script|link|img)\b[^>]*\b(?:src|href)=["'](https?://[^"']+)|url\(\s*["']?(https?://[^"')\s]+)""",
    re.IGNORECASE,
)


def external_resources(page: str) -> list[str]:
    """What a page would load from the network: scripts, stylesheets, images, CSS ``url()`` (not plain links)."""
    return [a or b for a, b in EXTERNAL.findall(page)]


def rewrite_page(page: str, root: str) -> str:
    """``page`` with every vendored CDN link pointing at ``<root>/static/vendor`` (root: the site, relative)."""

    def tag(match: re.Match[str]) -> str:
        text = match.group(0)
        found = [m for m in LINK.finditer(text) if m.group(3) in ASSETS]
        if not found:
            return text
        for m in found:
            local = f"{root}/{VENDOR}/{ASSETS[m.group(3)].vendored}"
            text = text.replace(m.group(0), f"{m.group(1)}={m.group(2)}{local}{m.group(2)}")
        return CORS_ATTRIBUTES.sub("", text)

    return LOGO.sub(f"{root}/static/images/logo-long.png", TAG.sub(tag, page))


def _fingerprint(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def configured_assets_dir(environ: Mapping[str, str] = os.environ) -> Path | None:
    """The assets folder ``$CDC_DATA_DOCS_ASSETS`` names, or None when the deployment sets none."""
    value = environ.get(ASSETS_ENV, "").strip()
    return Path(value) if value else None


def required_files() -> list[str]:
    """Every file the rewritten pages load, relative to the assets folder."""
    files = {asset.vendored for asset in ASSETS.values()}
    for asset in ASSETS.values():
        if asset.package == FONT_AWESOME:
            files.update(f"{asset.folder}/{font}" for font in FONT_AWESOME_FONTS)
    return sorted(files)


def check_assets(assets_dir: str | Path) -> Path:
    """``assets_dir`` as a path, or an :class:`InputError` naming the first file it lacks and how to fill it."""
    folder = Path(assets_dir)
    for name in required_files():
        if not (folder / name).is_file():
            raise InputError(
                f"{ASSETS_ENV}={folder} lacks {name}: fill the folder with `{FILL_COMMAND.replace('DIR', str(folder))}`"
            )
    return folder


def copy_assets(site: Path, assets_dir: str | Path) -> Path:
    """The assets in ``<site>/static/vendor``, copied again only when they changed."""
    source = check_assets(assets_dir)
    target = site / VENDOR
    fingerprint = _fingerprint(source)
    stamp = target / STAMP
    if not (stamp.exists() and stamp.read_text() == fingerprint):
        shutil.copytree(source, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".*"))
        stamp.write_text(fingerprint)
    return target


def make_offline(site: str | Path, assets_dir: str | Path) -> int:
    """Copy the assets from ``assets_dir`` into a built Data Docs site and rewrite its pages.

    Returns how many pages changed. Idempotent: a page already rewritten has no CDN link left and is
    not written again.
    """
    root = Path(site)
    copy_assets(root, assets_dir)
    changed = 0
    for page in root.rglob("*.html"):
        if VENDOR in page.relative_to(root).as_posix():
            continue
        text = page.read_text(encoding="utf-8")
        if "https://" not in text:
            continue
        relative = Path(os.path.relpath(root, page.parent)).as_posix()
        rewritten = rewrite_page(text, relative)
        if rewritten != text:
            page.write_text(rewritten, encoding="utf-8")
            changed += 1
    return changed


def make_offline_shared(site: str, assets_dir: str | Path, pages: Sequence[str] | None = None) -> int:
    """:func:`make_offline` for a site on shared storage (a URL), through fsspec.

    ``pages``: the site's pages to rewrite, relative to it (the ones a build just rendered); None
    reads every page, one request each on remote storage. Returns how many pages changed.
    """
    source = check_assets(assets_dir)
    fs, root = open_url(site)
    root = root.rstrip("/")
    target = f"{root}/{VENDOR}"
    fingerprint = _fingerprint(source)
    try:
        current = fs.cat_file(f"{target}/{STAMP}").decode()
    except FileNotFoundError:
        current = None
    if current != fingerprint:
        folders: set[str] = set()
        for path in sorted(p for p in source.rglob("*") if p.is_file()):
            relative = path.relative_to(source).as_posix()
            if any(part.startswith(".") for part in relative.split("/")):
                continue
            folder = posixpath.dirname(f"{target}/{relative}")
            if folder not in folders:
                fs.makedirs(folder, exist_ok=True)
                folders.add(folder)
            fs.pipe_file(f"{target}/{relative}", path.read_bytes())
        fs.pipe_file(f"{target}/{STAMP}", fingerprint.encode())
    if pages is None:
        fs.invalidate_cache(root)
        pages = [p[len(root) + 1 :] for p in fs.find(root) if p.endswith(".html")]
    changed = 0
    for page in dict.fromkeys(pages):
        if page.startswith(VENDOR + "/"):
            continue
        text = fs.cat_file(f"{root}/{page}").decode("utf-8")
        if "https://" not in text:
            continue
        rewritten = rewrite_page(text, "/".join([".."] * page.count("/")) or ".")
        if rewritten != text:
            fs.pipe_file(f"{root}/{page}", rewritten.encode("utf-8"))
            changed += 1
    return changed


def finish_site(site: str | Path, assets_dir: str | Path | None, pages: Sequence[str] | None = None) -> int:
    """:func:`make_offline` with the configured assets; without them the pages keep their CDN links (logged).

    A site named by URL goes to :func:`make_offline_shared` with ``pages``.
    """
    if assets_dir is None:
        logging.getLogger(__name__).warning(
            "Data Docs keep their CDN links (they need network to render): set %s to a folder filled by `%s`, "
            "or serve the CDN files",
            ASSETS_ENV,
            FILL_COMMAND,
        )
        return 0
    if is_url(site):
        return make_offline_shared(str(site), assets_dir, pages)
    return make_offline(site, assets_dir)
