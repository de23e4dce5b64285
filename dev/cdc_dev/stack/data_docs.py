"""The Data Docs site over HTTP, so that the stack's alerts link pages a person can open.

A deployment serves ``<gx root>/gx/uncommitted/data_docs/local_site/`` with whatever serves its static
files (a bucket's static website, a web server over the shared folder) and sets the Variable
``cdc_data_docs_url`` to it. The stack serves its GX root's site folder with Python's own
``http.server``, started and stopped with the stack, and sets the Variable (``airflow_environment``).
"""

from __future__ import annotations

import sys

import requests

from .config import StackConfig
from .process import ManagedProcess, wait_until


class DataDocsServer:
    name = "data-docs"

    def __init__(self, config: StackConfig) -> None:
        self.config = config
        self.process = ManagedProcess(
            self.name, config.run_dir / "pids" / "data-docs.pid", config.logs_dir / "data-docs.log"
        )

    def argv(self) -> list[str]:
        cfg = self.config
        site = str(cfg.data_docs_site)
        return [sys.executable, "-m", "http.server", str(cfg.data_docs_port), "--bind", cfg.host, "--directory", site]

    def healthy(self) -> bool:
        """The server answers (a 404 before the first validation wrote the index is an answer)."""
        try:
            return requests.get(self.config.data_docs_url, timeout=2).status_code < 500
        except requests.RequestException:
            return False

    def start(self, timeout: float = 30) -> None:
        if self.process.running() and self.healthy():
            return
        # made before the first validation, so the server serves the folder GX will write into
        self.config.data_docs_site.mkdir(parents=True, exist_ok=True)
        if not self.process.running():
            self.process.start(self.argv(), cwd=self.config.run_dir)
        wait_until(
            self.healthy,
            timeout=timeout,
            what=f"Data Docs server on {self.config.data_docs_url}",
            log=self.process.log_file,
            interval=0.2,
            alive=self.process.running,
        )

    def stop(self, timeout: float = 30) -> bool:
        return self.process.stop(timeout=timeout)

    def pids(self) -> list[int]:
        pid = self.process.pid()
        return [] if pid is None else [pid]
