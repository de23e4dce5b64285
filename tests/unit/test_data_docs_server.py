"""The stack's Data Docs server: the site folder of its GX root over HTTP, started and stopped like a service."""

from __future__ import annotations

import socket
from pathlib import Path

import requests

from cdc_dev.stack import Stack
from cdc_dev.stack.config import StackConfig
from cdc_dev.stack.data_docs import DataDocsServer


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_site_of_the_gx_root_is_served_until_stopped(tmp_path: Path) -> None:
    config = StackConfig(run_dir=tmp_path, data_docs_port=free_port())
    server = DataDocsServer(config)
    server.start()
    try:
        page = config.data_docs_site / "validations" / "run 1.html"
        page.parent.mkdir(parents=True)
        page.write_text("<html>run 1</html>")
        assert requests.get(f"{config.data_docs_url}validations/run%201.html", timeout=10).text == "<html>run 1</html>"
        assert requests.get(f"{config.data_docs_url}index.html", timeout=10).status_code == 404
        server.start()  # already up: nothing started twice
        assert len(server.pids()) == 1
        status = {c.name: c for c in Stack(config).status()}["data-docs"]
        assert status.running and status.healthy and config.data_docs_url in status.detail
    finally:
        assert server.stop()
    assert server.pids() == [] and not server.healthy()
