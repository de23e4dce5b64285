"""Test-session wiring shared by the unit and the integration tests.

``scripts/test.sh`` runs pytest with two xdist workers (``--dist loadgroup``). The integration tests
share one embedded stack (session fixtures, fixed ports, modules that reset it), so they form one
group that a single worker runs in collection order; the unit tests, which reach no service, spread
over both workers and run while the integration worker waits on Kafka, Debezium and Airflow.
"""

from __future__ import annotations

from pathlib import Path

import pytest

INTEGRATION = Path(__file__).parent / "integration"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if INTEGRATION in item.path.parents:
            item.add_marker(pytest.mark.xdist_group("embedded_stack"))
