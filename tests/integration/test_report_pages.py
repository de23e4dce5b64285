"""The pages a person opens after a run, in a real browser with no network: the trend report and the
Data Docs.

* The trend report is written by the validate job's code (``trends.history.write_report``) from a
  real state database holding a day's runs of two tables, and shows its charts and tables.
* Great Expectations' own Data Docs load Bootstrap, jQuery and bootstrap-table from CDNs: built as
  GX builds them, the index is unstyled and its list of validations empty without network; after
  ``offline_docs.make_offline`` (which the suite runs after every build) both work.

Screenshots go to ``test-artifacts/``.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from cdc_dev.stack.postgres import SUPERUSER
from cdc_reconcile import run_state, state_store
from cdc_reconcile.offline_docs import make_offline
from cdc_reconcile.phase import Phase
from cdc_reconcile.suite import SUITE, data_docs_index
from cdc_reconcile.trends.history import report_path, write_report
from cdc_reconcile.trends.page import table_anchor
from tests.support.browser import chromium
from tests.support.polling import eventually

pytestmark = [pytest.mark.integration, pytest.mark.browser]

START = datetime(2026, 3, 2, 0, 0, tzinfo=UTC)
RUNS = 12
# What went wrong in which hourly run (the other runs pass): counts found before repair.
FOUND = {
    "public.customers": {
        2: {"redelivery": 14},
        5: {"snapshot_rerun": 500, "redelivery": 3},
        9: {"missing": 3, "stale": 2, "extra": 1},
    },
    "public.orders": {4: {"missing": 4, "extra": 2}, 10: {"quarantined": 2}},
}
DRY_RUNS = {("public.orders", 4)}
LEFT_AFTER_REPAIR = {("public.orders", 10): {"quarantined": 2}}


@pytest.fixture
def state_dsn(config) -> Iterator[str]:
    """A database of its own on the stack's PostgreSQL: the report shows exactly the runs seeded here."""
    name = f"cdc_trends_{uuid.uuid4().hex[:8]}"
    superuser = make_conninfo(host=config.host, port=config.pg_port, dbname="postgres", user=SUPERUSER)
    with psycopg.connect(superuser, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name} OWNER {config.pg_user}")
    try:
        yield make_conninfo(config.pg_dsn, dbname=name)
    finally:
        with psycopg.connect(superuser, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def outcome(table: str, run_id: str, phase: Phase, counts: dict[str, int]) -> dict:
    return {
        "suite": SUITE,
        "table": table,
        "run_id": run_id,
        "phase": phase.value,
        "success": not any(counts.values()),
        "counts": {"missing": 0, "extra": 0, "stale": 0, "redelivery": 0, "snapshot_rerun": 0, **counts},
        "checks": [],
    }


def seed_run(conn: psycopg.Connection, table: str, hour: int) -> None:
    """One table's run as the DAG records it, through the writers the jobs use; the timestamps are then
    moved to the run's hour (the writers stamp now())."""
    run_id = f"scheduled__{(START + timedelta(hours=hour)).isoformat()}"
    opened = START + timedelta(hours=hour, seconds=5)
    found = FOUND[table].get(hour, {})
    conn.execute(
        "INSERT INTO cdc_reconcile.offset_ranges (run_id, table_name, topic, partition, start_offset, end_offset, "
        "opened_at, sealed_at, compacted_at) VALUES (%s, %s, %s, 0, %s, %s, %s, %s, %s)",
        (run_id, table, f"cdc.{table}", hour * 400, (hour + 1) * 400 + 3 * hour, opened, opened, opened),
    )
    state_store.record_snapshot(
        conn, run_id, table, {"xmin": 1000 + hour, "xmax": 1001 + hour, "taken_at": opened + timedelta(seconds=25)}
    )
    seconds = 70 + 6 * hour + (60 if found else 0)
    run_state.record_suite_outcome(conn, outcome(table, run_id, Phase.BEFORE_REPAIR, found), Phase.BEFORE_REPAIR)
    if found:
        dry_run = (table, hour) in DRY_RUNS
        audit = [
            {"key": json.dumps({"id": i}), "kind": kind, "before_hash": None, "after_hash": "h", "dry_run": dry_run}
            for kind, n in found.items()
            if kind != "quarantined"
            for i in range(n)
        ]
        run_state.replace_repair_audit(conn, run_id, table, audit)
        if not dry_run:
            left = LEFT_AFTER_REPAIR.get((table, hour), {})
            run_state.record_suite_outcome(conn, outcome(table, run_id, Phase.AFTER_REPAIR, left), Phase.AFTER_REPAIR)
    conn.execute(
        "UPDATE cdc_reconcile.expectation_results SET created_at = %s + (id %% 2) * interval '20 seconds' "
        "WHERE run_id = %s AND table_name = %s",
        (opened + timedelta(seconds=seconds - 20), run_id, table),
    )


def test_the_trend_report_shows_each_tables_runs_in_charts(state_dsn, tmp_path, artifacts: Path):
    with state_store.open_state(state_dsn) as conn:
        for table in FOUND:
            for hour in range(RUNS):
                seed_run(conn, table, hour)
        page = write_report(conn, report_path(tmp_path / "great_expectations"))
    assert page == data_docs_index(tmp_path / "great_expectations").with_name("cdc_trends.html")

    with chromium(offline=True, window="1300,1700") as driver:
        driver.get(page.as_uri())
        charts = driver.execute_script(
            """return [...document.querySelectorAll('section[data-table]')].map(s => ({
                table: s.dataset.table, title: s.querySelector('h2').innerText, visible: s.offsetHeight > 0,
                rows: s.querySelectorAll('tbody tr').length,
                charts: [...s.querySelectorAll('svg[data-chart]')].map(svg => {
                    const box = svg.getBoundingClientRect();
                    return {name: svg.dataset.chart, width: box.width, height: box.height,
                            marks: [...svg.querySelectorAll('.mark')].map(m => {
                                const b = m.getBoundingClientRect();
                                return [m.dataset.run, m.dataset.series, Number(m.dataset.value), b.width * b.height];
                            })};
                })}))"""
        )
        driver.save_screenshot(str(artifacts / "trend_report.png"))
        driver.get(f"{page.as_uri()}#{table_anchor('public.orders')}")
        scrolled = driver.execute_script("return window.scrollY")

    assert [c["table"] for c in charts] == ["public.customers", "public.orders"]
    for section in charts:
        assert section["visible"] and section["title"] == section["table"] and section["rows"] == RUNS
        assert [c["name"] for c in section["charts"]] == ["found", "duplicates", "repairs", "timings"]
        for chart in section["charts"]:
            assert chart["width"] > 300 and chart["height"] > 150, chart["name"]
            assert all(area > 0 for *_, area in chart["marks"]), f"{chart['name']}: a mark drawn with no size"
    customers = {c["name"]: c["marks"] for c in charts[0]["charts"]}
    snapshot_rerun_run = f"scheduled__{(START + timedelta(hours=5)).isoformat()}"
    assert [snapshot_rerun_run, "snapshot_rerun", 500] in [m[:3] for m in customers["found"]]
    assert [snapshot_rerun_run, "snapshot_rerun", 500] in [m[:3] for m in customers["duplicates"]]
    assert [snapshot_rerun_run, "snapshot_rerun", 500] in [m[:3] for m in customers["repairs"]]
    assert len([m for m in customers["timings"] if m[1] == "duration"]) == RUNS
    orders = {c["name"]: c["marks"] for c in charts[1]["charts"]}
    assert {m[1] for m in orders["found"]} == {"missing", "extra", "quarantined"}
    assert orders["repairs"] == [], "the dry run repaired nothing and quarantined records are not repaired"
    assert scrolled > 0, "the alert's link opens the page at the table's section"


def build_data_docs(root: Path) -> Path:
    """A real GX project with one validation stored (pandas: no Spark needed), its Data Docs built."""
    import great_expectations as gx
    import pandas as pd

    context = gx.get_context(mode="file", project_root_dir=str(root))
    batch = (
        context.data_sources.add_pandas("shop")
        .add_dataframe_asset("orders")
        .add_batch_definition_whole_dataframe("all")
    )
    suite = context.suites.add(
        gx.ExpectationSuite(
            name="orders",
            expectations=[
                gx.expectations.ExpectColumnValuesToNotBeNull(column="id"),
                gx.expectations.ExpectColumnValuesToBeUnique(column="id"),
            ],
        )
    )
    validation = context.validation_definitions.add(gx.ValidationDefinition(name="orders", data=batch, suite=suite))
    validation.run(batch_parameters={"dataframe": pd.DataFrame({"id": [1, 2, 2, 4]})})
    context.build_data_docs()
    return data_docs_index(root)


INDEX_STATE = """
const table = document.querySelector('table[id$="-body-table"]');
const navbar = document.querySelector('nav.navbar');
const icon = document.querySelector('.fas, .fa');
return {
    navbar: navbar && getComputedStyle(navbar).display,
    rows: table ? [...table.querySelectorAll('tbody tr')].map(r => r.innerText.trim()) : null,
    icon: icon ? icon.getBoundingClientRect().width : null,
    iconFont: document.fonts.check('900 16px "Font Awesome 6 Free"'),
};
"""


def test_data_docs_are_styled_and_list_their_validations_without_network(tmp_path, artifacts: Path, stack_env):
    index = build_data_docs(tmp_path / "gx_project")
    as_built = tmp_path / "as_built"
    shutil.copytree(index.parent, as_built)
    make_offline(index.parent, stack_env["CDC_DATA_DOCS_ASSETS"])

    with chromium(offline=True) as driver:
        driver.get((as_built / "index.html").as_uri())
        before = driver.execute_script(INDEX_STATE)
        driver.save_screenshot(str(artifacts / "data_docs_as_built_offline.png"))
        driver.get(index.as_uri())
        after = eventually(
            lambda: (state := driver.execute_script(INDEX_STATE))["rows"] and state["iconFont"] and state,
            timeout=30,
            what="the offline index's list and icons",
        )
        driver.save_screenshot(str(artifacts / "data_docs_offline.png"))
        validation = next(index.parent.glob("validations/**/*.html"))
        driver.get(validation.as_uri())
        page = driver.execute_script(
            "return {navbar: getComputedStyle(document.querySelector('nav.navbar')).display,"
            " failed: document.querySelectorAll('.fa-times, .text-danger').length}"
        )

    assert before["navbar"] != "flex" and not before["rows"], f"GX's page read offline as built: {before}"
    assert after["navbar"] == "flex", "Bootstrap's styles applied"
    assert len(after["rows"]) == 1 and "orders" in after["rows"][0], after["rows"]
    assert after["icon"] and after["icon"] > 0, "Font Awesome icons drawn"
    assert page["navbar"] == "flex" and page["failed"] > 0, f"the validation page, styled, shows the failure: {page}"
