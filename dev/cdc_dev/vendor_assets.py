"""Fill a folder with the Data Docs' CDN files from the npm registry (the folder ``CDC_DATA_DOCS_ASSETS`` names).

``python -m cdc_dev.vendor_assets --target DIR`` packs each package of
:data:`cdc_reconcile.offline_docs.ASSETS` with ``npm pack`` (the registry's tarball, checked by npm
against its integrity), and keeps the files the Data Docs load plus each package's license. After a
complete fetch it writes a stamp, the hash of the asset list, so scripts/setup.sh fetches again only
when that list changed (``--print-stamp`` prints the hash the current list has).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from cdc_dev.stack.config import StackConfig
from cdc_reconcile.offline_docs import ASSETS, FONT_AWESOME, FONT_AWESOME_FONTS, Asset

LICENSE_NAMES = ("LICENSE", "LICENSE.txt", "LICENSE.md")
STAMP = ".cdc-stamp"


def assets_stamp() -> str:
    """The hash of the asset list: what a filled folder was fetched for."""
    rows = sorted((a.url, a.package, a.version, a.path) for a in ASSETS.values())
    return hashlib.sha256(json.dumps([rows, list(FONT_AWESOME_FONTS)]).encode()).hexdigest()


def files_by_package() -> dict[Asset, list[str]]:
    """One representative asset per npm package and version, with every file to keep from it."""
    packages: dict[tuple[str, str], tuple[Asset, list[str]]] = {}
    for asset in ASSETS.values():
        _, files = packages.setdefault((asset.package, asset.version), (asset, []))
        files.append(asset.path)
        if asset.package == FONT_AWESOME:
            files.extend(FONT_AWESOME_FONTS)
    return {asset: files for asset, files in packages.values()}


def unpack(asset: Asset, files: list[str], work: Path, target: Path) -> tuple[str, list[str]]:
    """``npm pack`` the package, copy ``files`` and its license under ``target/<folder>``.

    Returns the package's declared license and the kept files.
    """
    done = subprocess.run(
        ["npm", "pack", "--silent", f"{asset.package}@{asset.version}", "--pack-destination", str(work)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    tarball = work / done.stdout.strip().splitlines()[-1]
    kept = []
    with tarfile.open(tarball) as archive:
        names = set(archive.getnames())
        manifest = archive.extractfile("package/package.json")
        declared = json.load(manifest).get("license", "see the package") if manifest else "see the package"
        license_file = next((n for n in LICENSE_NAMES if f"package/{n}" in names), None)
        for name in [*files, *([license_file] if license_file else [])]:
            member = archive.extractfile(f"package/{name}")
            if member is None:
                raise FileNotFoundError(f"{asset.package}@{asset.version} has no file {name}")
            out = target / asset.folder / name
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(member.read())
            kept.append(f"{asset.folder}/{name}")
    return declared, kept


README = """# Data Docs assets, from the npm registry

The stylesheets, scripts and fonts that Great Expectations' Data Docs link from public CDNs, so the
pages read offline (`cdc_reconcile.offline_docs`, with `CDC_DATA_DOCS_ASSETS` naming this folder).
Written by `python -m cdc_dev.vendor_assets --target DIR`; do not edit by hand. Each folder is one
npm package at one version, with its license file where the package ships one.

| folder | package | license | files |
| --- | --- | --- | --- |
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cdc_dev.vendor_assets", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--target",
        type=Path,
        default=StackConfig().data_docs_assets_dir,
        help="where the files go (replaced; default: the dev set-up's cache, .cache/data-docs-assets)",
    )
    parser.add_argument("--print-stamp", action="store_true", help="print the asset list's hash and exit")
    args = parser.parse_args(argv)
    if args.print_stamp:
        print(assets_stamp())
        return 0
    with tempfile.TemporaryDirectory(prefix="cdc-vendor-") as work:
        staged = Path(work) / "assets"
        rows = []
        for asset, files in files_by_package().items():
            declared, kept = unpack(asset, files, Path(work), staged)
            print("\n".join(kept))
            names = ", ".join(f"`{name.split('/', 1)[1]}`" for name in kept)
            rows.append(f"| `{asset.folder}` | {asset.package} {asset.version} | {declared} | {names} |")
        (staged / "README.md").write_text(README + "\n".join(rows) + "\n")
        shutil.rmtree(args.target, ignore_errors=True)
        shutil.copytree(staged, args.target)
        (args.target / STAMP).write_text(assets_stamp() + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
