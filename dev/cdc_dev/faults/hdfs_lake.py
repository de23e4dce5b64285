"""What a writer left in the lake on the stack's HDFS, seen through WebHDFS (HDFS's own REST API).

The cluster scenarios wait until ``compact_cdc`` has data files on HDFS that no Delta commit names yet
(a write in progress) to inject their fault there. The rows themselves are read with delta-rs, which
has its own HDFS client (:func:`.checks.lake_rows`): neither goes through Spark or project code.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlparse

import requests

from ..stack import StackConfig
from .checks import added_files


class HdfsLake:
    """One lake root on the stack's HDFS (``hdfs://host:port/path``), listed through WebHDFS."""

    def __init__(self, config: StackConfig, uri: str) -> None:
        self.config = config
        self.uri = uri
        self.path = urlparse(uri).path.rstrip("/")
        self._added: dict[str, set[str]] = {}  # a commit file never changes once written

    def _get(self, path: str, op: str) -> requests.Response:
        return requests.get(
            f"{self.config.hdfs_namenode_ui_url}/webhdfs/v1{path}",
            params={"op": op, "user.name": os.environ.get("USER", "root")},
            timeout=10,
        )

    def listing(self, path: str) -> list[dict[str, Any]]:
        """``path``'s entries (``pathSuffix``, ``type``); none when it does not exist."""
        response = self._get(path, "LISTSTATUS")
        if response.status_code == 404:
            return []
        response.raise_for_status()
        return response.json()["FileStatuses"]["FileStatus"]

    def files(self, path: str) -> list[str]:
        """Every file under ``path``, relative to it."""
        found = []
        for entry in self.listing(path):
            name = entry["pathSuffix"]
            if entry["type"] == "DIRECTORY":
                found += [f"{name}/{f}" for f in self.files(f"{path}/{name}")]
            else:
                found.append(name)
        return found

    def _commit_adds(self, path: str) -> set[str]:
        if path not in self._added:
            response = self._get(path, "OPEN")  # redirected to the DataNode that holds the block
            response.raise_for_status()
            self._added[path] = added_files([response.text])
        return self._added[path]

    def uncommitted_files(self, table: str) -> list[str]:
        """Data files of ``table``'s datasets that no commit added (``<dataset>/<file>``): a write in progress."""
        base = f"{self.path}/{table}"
        found = []
        for dataset in self.listing(base):
            if dataset["type"] != "DIRECTORY":
                continue
            root = f"{base}/{dataset['pathSuffix']}"
            # data files first, the log after: a commit landing in between then counts its files as added
            data = [f for f in self.files(root) if f.endswith(".parquet") and not f.startswith("_delta_log/")]
            added: set[str] = set()
            for entry in self.listing(f"{root}/_delta_log"):
                if entry["pathSuffix"].endswith(".json"):
                    added |= self._commit_adds(f"{root}/_delta_log/{entry['pathSuffix']}")
            found += [f"{dataset['pathSuffix']}/{name}" for name in data if name not in added]
        return sorted(found)
