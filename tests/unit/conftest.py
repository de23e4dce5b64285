"""Unit-test fixtures: one small local SparkSession for the whole test session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.spark import unit_session


@pytest.fixture(scope="session")
def spark() -> Iterator:
    """A local[2] session (the CI machine has 2 cores): one shuffle partition, no UI, UTC."""
    session = unit_session()
    yield session
    session.stop()
