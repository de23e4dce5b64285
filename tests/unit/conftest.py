"""Unit-test fixtures: one small local SparkSession for the whole test session, the Data Docs assets."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdc_dev.stack import StackConfig
from cdc_reconcile.offline_docs import ASSETS_ENV, required_files
from tests.support.spark import unit_session


@pytest.fixture(scope="session")
def spark() -> Iterator:
    """A local[2] session (the CI machine has 2 cores): one shuffle partition, no UI, UTC."""
    session = unit_session()
    yield session
    session.stop()


@pytest.fixture(scope="session")
def data_docs_assets() -> Path:
    """The folder of the Data Docs' CDN files: ``$CDC_DATA_DOCS_ASSETS``, else the set-up's cache."""
    folder = Path(os.environ.get(ASSETS_ENV) or StackConfig().data_docs_assets_dir)
    missing = [name for name in required_files() if not (folder / name).is_file()]
    if missing:
        pytest.fail(f"{folder} lacks {missing[0]} (and {len(missing) - 1} more): run scripts/setup.sh", pytrace=False)
    return folder
