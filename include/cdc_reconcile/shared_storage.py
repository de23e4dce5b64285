"""Files on shared storage named by URL (``webhdfs://``, ``s3://``, ``file://``, ``memory://``), through fsspec.

The GX root (``cdc_gx_root``) may be such a URL, so that validate tasks on several hosts write one
validation store, one Data Docs site and one trend report (:mod:`gx_storage` holds GX's side). A
plain path stays a local folder, read and written as before.
"""

from __future__ import annotations

import os
import posixpath
import re
from typing import TYPE_CHECKING

from .errors import InputError, UnreachableError

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://([^/?#]*)([^?#]*)(.*)$")
# characters a filesystem refuses in a file name, each with what stands in for it: HDFS refuses ':'
# (an Airflow run id's time has three)
REFUSED_IN_NAMES = {scheme: {":": "-"} for scheme in ("hdfs", "webhdfs", "swebhdfs", "viewfs")}
NATIVE_HDFS_HINT = (
    "hdfs:// needs Hadoop's native client (libhdfs): use webhdfs://<namenode>:<its HTTP port, "
    "dfs.namenode.http-address>/<path> instead"
)


def _said(exc: BaseException, limit: int = 300) -> str:
    """An exception as one short line (pyarrow's HDFS error lists every JVM path it tried)."""
    line = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {line if len(line) <= limit else line[: limit - 1] + '…'}"


def is_url(root: str | os.PathLike[str]) -> bool:
    """Whether a root names shared storage (a URL) rather than a local folder (a path)."""
    return isinstance(root, str) and URL.match(root) is not None


def normalize_url(url: str) -> str:
    """``url`` with ``.`` and ``..`` resolved in its path and no trailing slash: ``<lake root>/../x`` as a place."""
    match = URL.match(url)
    if match is None:
        raise ValueError(f"not a URL: {url!r}")
    scheme, netloc, path, rest = match.groups()
    path = posixpath.normpath(path) if path else ""
    return f"{scheme}://{netloc}{'' if path in ('.', '/') else path}{rest}"


def storable_name(root: str | os.PathLike[str], name: str) -> str:
    """``name`` as a file name the storage of ``root`` accepts; unchanged on a local path and most storage."""
    if not is_url(root):
        return name
    for refused, stand_in in REFUSED_IN_NAMES.get(str(root).split("://", 1)[0].lower(), {}).items():
        name = name.replace(refused, stand_in)
    return name


def join(url: str, *parts: str) -> str:
    """``url`` with path segments appended."""
    return "/".join([url.rstrip("/"), *(p.strip("/") for p in parts if p.strip("/"))])


def open_url(url: str) -> tuple[AbstractFileSystem, str]:
    """The fsspec filesystem of ``url`` and the path in it; an :class:`InputError` naming the URL and the fix."""
    import fsspec

    scheme = url.split("://", 1)[0]
    hint = f"; {NATIVE_HDFS_HINT}" if scheme == "hdfs" else ""
    try:
        return fsspec.core.url_to_fs(url)
    except ValueError as exc:
        raise InputError(
            f"{url}: fsspec knows no filesystem {scheme}:// ({_said(exc)}); use a local path or a URL of a filesystem "
            f"fsspec implements (webhdfs://, s3://, gs://, file://, memory://){hint}"
        ) from exc
    except ImportError as exc:
        raise InputError(f"{url}: {scheme}:// needs a package that is not installed ({_said(exc)}){hint}") from exc
    except Exception as exc:
        raise InputError(f"{url}: cannot open its filesystem ({_said(exc)}){hint}") from exc


def check_reachable(url: str) -> None:
    """Ask the storage of ``url`` about it once, so that storage that is down fails the task before any work.

    :class:`UnreachableError` when it does not answer (retry once it is back), :class:`InputError`
    when it refuses this user.
    """
    fs, path = open_url(url)
    try:
        fs.info(path)
    except FileNotFoundError:
        pass  # made on the first write
    except PermissionError as exc:
        raise InputError(f"{url}: access denied ({_said(exc)}): give this host's user write access there") from exc
    except Exception as exc:
        where = URL.match(url).group(2) or url  # type: ignore[union-attr]
        webhdfs = (
            "; for webhdfs:// the port is the NameNode's HTTP port (dfs.namenode.http-address, 9870 by default), "
            "not its RPC port"
            if url.startswith("webhdfs://")
            else ""
        )
        raise UnreachableError(
            f"{url}: the storage at {where} did not answer ({_said(exc)}): is it up and reachable "
            f"from this host?{webhdfs}"
        ) from exc


def write_text(url: str, text: str) -> str:
    """Write ``text`` (UTF-8) to the file ``url`` names, its folder made first; returns ``url``.

    One write: an object store replaces the object at once, HDFS and local files may be read half-written.
    """
    fs, path = open_url(url)
    fs.makedirs(posixpath.dirname(path), exist_ok=True)
    fs.pipe_file(path, text.encode("utf-8"))
    return url


def read_text(url: str) -> str:
    """The UTF-8 text of the file ``url`` names."""
    fs, path = open_url(url)
    return fs.cat_file(path).decode("utf-8")
