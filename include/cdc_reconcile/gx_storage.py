"""Great Expectations' stores and Data Docs on shared storage, through fsspec.

A GX root given as a URL (``webhdfs://namenode:9870/cdc/gx``, ``s3://bucket/gx``,
``file:///shared/gx``, ``memory://gx``) is read and written with fsspec, so validate tasks on
several hosts share one validation store and one Data Docs site. The layout below the root is the
one GX's file context writes under a local path: ``<root>/gx/expectations/``,
``<root>/gx/uncommitted/validations/``, ``<root>/gx/uncommitted/data_docs/local_site/``. Suites are
kept there too, not in memory: the index builder removes every suite page whose suite its context
does not hold, so a context holding only its own table's suites would delete the other tables'
pages from the shared site. Validation definitions and the data source stay in memory: they are
code, added again on every run.

A plain local path does not come here: it keeps GX's file context.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from great_expectations.data_context.store.store_backend import StoreBackend
from great_expectations.data_context.store.tuple_store_backend import TupleStoreBackend
from great_expectations.exceptions import InvalidKeyError, StoreBackendError
from great_expectations.util import filter_properties_dict

from .shared_storage import join, open_url

if TYPE_CHECKING:
    from great_expectations.data_context import AbstractDataContext

# the keyword argument a filesystem's write takes for a content type (object stores serve it back)
CONTENT_TYPE_ARGUMENT = {"s3": "ContentType", "s3a": "ContentType", "gs": "content_type", "gcs": "content_type"}


class FsspecStoreBackend(TupleStoreBackend):
    """A GX store backend keeping each key as one file under a base URL, through fsspec.

    The counterpart of GX's ``TupleFilesystemStoreBackend`` for any filesystem fsspec implements: the
    same key-to-path mapping (``/``-separated on every platform), so a store written through it has
    the layout GX's file context writes locally.
    """

    def __init__(
        self,
        base_url: str,
        filepath_template: str | None = None,
        filepath_prefix: str | None = None,
        filepath_suffix: str | None = None,
        forbidden_substrings: list[str] | None = None,
        platform_specific_separator: bool = False,
        fixed_length_key: bool = False,
        suppress_store_backend_id: bool = False,
        manually_initialize_store_backend_id: str = "",
        base_public_path: str | None = None,
        store_name: str | None = None,
    ) -> None:
        super().__init__(
            filepath_template=filepath_template,
            filepath_prefix=filepath_prefix,
            filepath_suffix=filepath_suffix,
            forbidden_substrings=forbidden_substrings,
            platform_specific_separator=False,
            fixed_length_key=fixed_length_key,
            suppress_store_backend_id=suppress_store_backend_id,
            manually_initialize_store_backend_id=manually_initialize_store_backend_id,
            base_public_path=base_public_path,
            store_name=store_name,
        )
        self.base_url = base_url.rstrip("/")
        self._fs, self._root = open_url(self.base_url)
        self._root = self._root.rstrip("/")
        self._protocol = self.base_url.split("://", 1)[0]
        self._made: set[str] = set()
        if not self._suppress_store_backend_id:
            _ = self.store_backend_id
        self._config = {
            "base_url": base_url,
            "filepath_template": filepath_template,
            "filepath_prefix": filepath_prefix,
            "filepath_suffix": filepath_suffix,
            "forbidden_substrings": forbidden_substrings,
            "platform_specific_separator": platform_specific_separator,
            "fixed_length_key": fixed_length_key,
            "suppress_store_backend_id": suppress_store_backend_id,
            "manually_initialize_store_backend_id": manually_initialize_store_backend_id,
            "base_public_path": base_public_path,
            "store_name": store_name,
            "module_name": self.__class__.__module__,
            "class_name": self.__class__.__name__,
        }
        filter_properties_dict(properties=self._config, clean_falsy=True, inplace=True)

    def _path(self, key: tuple[str, ...]) -> str:
        return f"{self._root}/{self._convert_key_to_filepath(key)}"

    def _makedirs(self, folder: str) -> None:
        if folder not in self._made:
            self._fs.makedirs(folder, exist_ok=True)
            self._made.add(folder)

    def _get(self, key: tuple[str, ...]) -> str:
        path = self._path(key)
        try:
            data = self._fs.cat_file(path)
        except FileNotFoundError as exc:
            raise InvalidKeyError(f"Unable to retrieve object from {type(self).__name__} with the key {path}") from exc
        return data.decode("utf-8").rstrip("\n")

    def _get_all(self) -> list[Any]:
        return [self._get(key) for key in self.list_keys() if key != StoreBackend.STORE_BACKEND_ID_KEY]

    def _set(
        self,
        key: Any,
        value: str | bytes,
        content_encoding: str | None = None,
        content_type: str | None = None,
        **kwargs: Any,
    ) -> str:
        """Write one key's file; an object store also gets its content type, so a static website serves HTML as HTML."""
        if not isinstance(key, tuple):
            key = key.to_tuple()
        path = self._path(key)
        data = value.encode(content_encoding or "utf-8") if isinstance(value, str) else value
        options = {}
        if content_type and self._protocol in CONTENT_TYPE_ARGUMENT:
            options[CONTENT_TYPE_ARGUMENT[self._protocol]] = content_type
        if self._holds(path, data):
            return path
        self._makedirs(posixpath.dirname(path))
        self._fs.pipe_file(path, data, **options)
        return path

    def _holds(self, path: str, data: bytes) -> bool:
        """Whether ``path`` already holds ``data``: every build writes GX's static files (4 MB) again, and a
        file written costs a round trip to the storage's writer (on HDFS about 0.2 s), a size query far less."""
        try:
            return self._fs.size(path) == len(data) and self._fs.cat_file(path) == data
        except FileNotFoundError:
            return False

    def _move(self, source_key: tuple[str, ...], dest_key: tuple[str, ...], **kwargs: Any) -> tuple[str, ...] | bool:
        source, dest = self._path(source_key), self._path(dest_key)
        if not self._fs.exists(source):
            return False
        self._makedirs(posixpath.dirname(dest))
        self._fs.mv(source, dest)
        return dest_key

    def _files(self, folder: str) -> Iterable[str]:
        self._fs.invalidate_cache(folder)  # another host may have written since this process listed
        try:
            return self._fs.find(folder, on_error="raise")
        except FileNotFoundError:
            return []

    def list_keys(self, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
        keys = []
        for path in self._files("/".join([self._root, *prefix])):
            relative = path[len(self._root) + 1 :] if path.startswith(self._root + "/") else path.lstrip("/")
            if self._is_missing_prefix_or_suffix(
                filepath_prefix=self.filepath_prefix, filepath_suffix=self.filepath_suffix, key=relative
            ):
                continue
            key = self._convert_filepath_to_key(relative)
            if key and not self.is_ignored_key(key):
                keys.append(key)
        return keys

    def _has_key(self, key: tuple[str, ...]) -> bool:
        return self._fs.isfile(self._path(key))

    def rrmdir(self, mroot: str, curpath: str) -> None:
        """Remove the empty folders from ``curpath`` up to, not including, ``mroot`` (object stores have none)."""
        while curpath != mroot and curpath.startswith(mroot + "/"):
            try:
                if not self._fs.isdir(curpath) or self._fs.ls(curpath):
                    return
                self._fs.rmdir(curpath)
            except OSError:
                return
            self._made.discard(curpath)
            curpath = posixpath.dirname(curpath)

    def remove_key(self, key: Any) -> bool:
        if not isinstance(key, tuple):
            key = key.to_tuple()
        path = self._path(key)
        if not self._fs.exists(path):
            return False
        self._fs.rm_file(path)
        self.rrmdir(self._root, posixpath.dirname(path))
        return True

    def get_url_for_key(self, key: tuple[str, ...], protocol: str | None = None) -> str:
        """The key's file as a URL of its storage (``webhdfs://namenode:9870/...``); ``protocol`` is ignored."""
        return f"{self.base_url}/{self._url_path_escape_special_characters(self._convert_key_to_filepath(key))}"

    def get_public_url_for_key(self, key: tuple[str, ...], protocol: str | None = None) -> str:
        if not self.base_public_path:
            raise StoreBackendError(f"{type(self).__name__} at {self.base_url}: no base_public_path is configured")
        return self.base_public_path + self._convert_key_to_filepath(key)

    @property
    def config(self) -> dict[str, Any]:
        return self._config


def _backend(url: str, **options: Any) -> dict[str, Any]:
    return {"module_name": __name__, "class_name": FsspecStoreBackend.__name__, "base_url": url, **options}


def shared_context(root: str, index_limit: int) -> AbstractDataContext:
    """An ephemeral GX context whose suites, validation results and Data Docs live under the URL ``root``.

    The paths below ``root`` are GX's defaults for a file context (``gx/expectations``,
    ``gx/uncommitted/validations``, ``gx/uncommitted/data_docs/local_site``). ``index_limit``: how
    many validation results the Data Docs index links (and loads), newest first.
    """
    import great_expectations as gx
    from great_expectations.data_context.data_context.file_data_context import FileDataContext
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        DataContextConfigDefaults,
        InMemoryStoreBackendDefaults,
    )

    project = join(root, FileDataContext.GX_DIR)
    defaults = InMemoryStoreBackendDefaults()
    stores = dict(defaults.stores)
    stores[defaults.expectations_store_name] = {
        "class_name": "ExpectationsStore",
        "store_backend": _backend(join(project, DataContextConfigDefaults.EXPECTATIONS_BASE_DIRECTORY.value)),
    }
    stores[defaults.validation_results_store_name] = {
        "class_name": "ValidationResultsStore",
        "store_backend": _backend(
            join(project, DataContextConfigDefaults.DEFAULT_VALIDATIONS_STORE_BASE_DIRECTORY_RELATIVE_NAME.value)
        ),
    }
    site = DataContextConfigDefaults.DEFAULT_DATA_DOCS_SITE_NAME.value
    sites = {
        site: {
            "class_name": "SiteBuilder",
            "show_how_to_buttons": True,
            "store_backend": _backend(
                join(project, DataContextConfigDefaults.DEFAULT_DATA_DOCS_BASE_DIRECTORY_RELATIVE_NAME.value, site)
            ),
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder", "validation_results_limit": index_limit},
            # renders nothing here (no profiling results) but lists the whole validation store on every build
            "site_section_builders": {"profiling": "None"},
        }
    }
    config = DataContextConfig(
        stores=stores,
        expectations_store_name=defaults.expectations_store_name,
        validation_results_store_name=defaults.validation_results_store_name,
        checkpoint_store_name=defaults.checkpoint_store_name,
        data_docs_sites=sites,
    )
    return gx.get_context(mode="ephemeral", project_config=config)
