"""The trend report's page from run points: each figure in the chart and the table it belongs to."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta

import pytest

from cdc_reconcile.trends.charts import BOTTOM, HEIGHT, MIN_BAR, TOP, nice_ceiling
from cdc_reconcile.trends.page import DRY_RUN, FAILED, PASSED, REPAIRED, RunPoint, render, report_link, table_anchor

T0 = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)
GENERATED = datetime(2026, 3, 1, 14, 0, tzinfo=UTC)


def point(table: str, hour: int, **fields) -> RunPoint:
    started = T0 + timedelta(hours=hour)
    return RunPoint(
        table=table,
        run_id=f"scheduled__2026-03-01T{10 + hour:02d}:00:00+00:00",
        started_at=started,
        finished_at=started + timedelta(seconds=fields.pop("seconds", 90)),
        snapshot_at=started + timedelta(seconds=fields.pop("snapshot_after", 20)),
        **{"passed": True, **fields},
    )


CUSTOMERS = [
    point("public.customers", 0, found={"missing": 0, "snapshot_rows": 500}, offsets=120),
    point(
        "public.customers",
        1,
        passed=False,
        found={"redelivery": 3, "missing": 2, "stale": 1, "snapshot_rows": 500},
        remaining={"missing": 0},
        passed_after_repair=True,
        repaired={"redelivery": 3, "missing": 2, "stale": 1},
        seconds=150,
        offsets=340,
    ),
    point(
        "public.customers",
        2,
        passed=False,
        found={"snapshot_rerun": 500, "quarantined": 4},
        remaining={"snapshot_rerun": 0, "quarantined": 4},
        passed_after_repair=False,
        repaired={"snapshot_rerun": 500},
        seconds=200,
        snapshot_after=30,
    ),
]
ORDERS = [
    point(
        "public.orders",
        0,
        passed=False,
        found={"extra": 2, "missing": 4},
        repaired={"extra": 2, "missing": 4},
        dry_run=True,
        seconds=60,
    ),
]


def parse(page: str) -> ET.Element:
    """The page as XML: it is written well-formed (void tags closed, no named entities but XML's)."""
    assert page.startswith("<!DOCTYPE html>\n")
    return ET.fromstring(page.split("\n", 1)[1])


def section(root: ET.Element, table: str) -> ET.Element:
    found = root.findall(f".//section[@data-table='{table}']")
    assert len(found) == 1, f"one section for {table}"
    return found[0]


def marks(chart: ET.Element) -> dict[tuple[str, str], float]:
    """(run, series) -> value of every bar or point of a chart."""
    return {
        (m.get("data-run"), m.get("data-series")): float(m.get("data-value"))
        for m in chart.iter()
        if m.get("class") == "mark"
    }


@pytest.fixture(scope="module")
def page() -> ET.Element:
    return parse(render([*ORDERS, *reversed(CUSTOMERS)], generated_at=GENERATED))


def test_each_table_has_a_section_with_its_anchor_and_four_charts(page):
    sections = page.findall(".//section")
    assert [s.get("data-table") for s in sections] == ["public.customers", "public.orders"]
    for s in sections:
        assert s.get("id") == table_anchor(s.get("data-table"))
        assert [svg.get("data-chart") for svg in s.iter("svg")] == ["found", "duplicates", "repairs", "timings"]
    nav = [a.get("href") for a in page.find(".//nav")]
    assert nav == ["#table-public.customers", "#table-public.orders"]


def test_differences_found_are_stacked_by_class_per_run(page):
    chart = section(page, "public.customers").find(".//svg[@data-chart='found']")
    run1, run2 = CUSTOMERS[1].run_id, CUSTOMERS[2].run_id
    assert marks(chart) == {
        (run1, "redelivery"): 3,
        (run1, "missing"): 2,
        (run1, "stale"): 1,
        (run2, "snapshot_rerun"): 500,
        (run2, "quarantined"): 4,
    }, "zero counts draw nothing; snapshot_rows is not a class of difference"
    bars = {m.get("data-series"): m for m in chart.iter("rect") if m.get("data-run") == run2}
    heights = {k: float(v.get("height")) for k, v in bars.items()}
    assert heights["snapshot_rerun"] == pytest.approx((HEIGHT - TOP - BOTTOM) * 500 / 1000, abs=0.1), "axis to 1000"
    assert heights["quarantined"] == MIN_BAR, "4 of 1000 stays visible"
    assert float(bars["quarantined"].get("y")) + MIN_BAR == pytest.approx(float(bars["snapshot_rerun"].get("y")))
    assert bars["quarantined"].find("title").text == f"{run2} · quarantined: 4"


def test_duplicates_chart_holds_only_the_two_causes(page):
    chart = section(page, "public.customers").find(".//svg[@data-chart='duplicates']")
    assert marks(chart) == {(CUSTOMERS[1].run_id, "redelivery"): 3, (CUSTOMERS[2].run_id, "snapshot_rerun"): 500}


def test_repairs_count_the_audit_and_a_dry_run_repairs_nothing(page):
    customers = section(page, "public.customers").find(".//svg[@data-chart='repairs']")
    assert marks(customers)[(CUSTOMERS[2].run_id, "snapshot_rerun")] == 500
    orders = section(page, "public.orders").find(".//svg[@data-chart='repairs']")
    assert marks(orders) == {}
    assert any(t.text == "none in these runs" for t in orders.iter("text"))


def test_duration_and_lag_are_plotted_in_seconds(page):
    chart = section(page, "public.customers").find(".//svg[@data-chart='timings']")
    values = marks(chart)
    assert values[(CUSTOMERS[0].run_id, "duration")] == 90
    assert values[(CUSTOMERS[1].run_id, "duration")] == 150
    assert values[(CUSTOMERS[2].run_id, "lag")] == 170  # finished 200 s after start, snapshot at 30 s
    assert len(chart.findall("polyline")) == 2


def test_the_run_table_lists_runs_newest_first_with_their_verdicts(page):
    rows = section(page, "public.customers").findall(".//table/tbody/tr")
    assert [r.get("data-run") for r in rows] == [p.run_id for p in reversed(CUSTOMERS)]
    cells = [[("".join(td.itertext())) for td in r] for r in rows]
    assert cells[0][2] == FAILED and cells[1][2] == REPAIRED and cells[2][2] == PASSED
    assert cells[1][3] == "redelivery 3, missing 2, stale 1"
    assert cells[1][6:] == ["340", "150.0 s", "130.0 s"]
    assert cells[0][5] == "quarantined 4"
    orders = ["".join(td.itertext()) for td in section(page, "public.orders").find(".//tbody/tr")]
    assert orders[2] == DRY_RUN and orders[4] == "missing 4, extra 2 (dry run: audit only)"


def test_the_page_needs_nothing_from_the_network():
    page = render(CUSTOMERS, generated_at=GENERATED)
    assert "<script" not in page
    assert not re.search(r"""(?:src|href)=["']?(?:https?:)?//""", page)
    assert "url(" not in page


def test_missing_timings_and_no_runs_still_render():
    unknown = RunPoint("public.t", "manual__x", None, None, None, passed=True)
    root = parse(render([unknown], generated_at=GENERATED))
    chart = section(root, "public.t").find(".//svg[@data-chart='timings']")
    assert marks(chart) == {} and any(t.text == "no timings recorded" for t in chart.iter("text"))
    empty = parse(render([], generated_at=GENERATED))
    assert empty.find(".//section") is None
    assert "No run has recorded a suite result yet." in "".join(empty.itertext())


def test_names_are_escaped():
    hostile = point('public."a<b>&c"', 0, found={"missing": 1}, passed=False)
    root = parse(render([hostile], generated_at=GENERATED))
    assert section(root, 'public."a<b>&c"').find("h2").text == 'public."a<b>&c"'


def test_the_report_link_sits_beside_the_data_docs_at_the_table():
    docs = "/gx/uncommitted/data_docs/local_site/index.html"
    assert (
        report_link(docs, "public.orders") == "/gx/uncommitted/data_docs/local_site/cdc_trends.html#table-public.orders"
    )
    assert report_link("https://docs.example/site/index.html") == "https://docs.example/site/cdc_trends.html"
    assert report_link(None, "public.orders") is None


@pytest.mark.parametrize(("value", "top"), [(0, 1), (1, 1), (3, 5), (7, 10), (12, 20), (240, 250), (500, 500)])
def test_axis_tops_are_round(value, top):
    assert nice_ceiling(value) == top
