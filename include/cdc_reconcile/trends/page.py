"""The trend report: per table and run, what the suite found, what was repaired, how long it took.

:func:`render` is a pure function, run points in and one static HTML page out: inline CSS and SVG,
no script and no external resource, so the page reads the same from a file, offline, or from a mail.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from html import escape
from itertools import groupby

from .charts import lines, series_of, stacked_bars

# Differences the suite counts, by class, as the alerts name them.
FOUND = {
    "redelivery": "#4e79a7",
    "snapshot_rerun": "#76b7b2",
    "missing": "#e15759",
    "extra": "#f28e2b",
    "stale": "#edc948",
    "quarantined": "#b07aa1",
    "incomplete_transactions": "#9c755f",
}
DUPLICATES = {"redelivery": FOUND["redelivery"], "snapshot_rerun": FOUND["snapshot_rerun"]}
REPAIRS = {k: FOUND[k] for k in ("redelivery", "snapshot_rerun", "missing", "extra", "stale")}
TIMINGS = {"duration": "#59a14f", "lag": "#9c755f"}

REPORT_NAME = "cdc_trends.html"
PASSED, REPAIRED, FAILED, DRY_RUN, UNREPAIRED = "passed", "repaired", "failed after repair", "dry run", "not repaired"


@dataclass(frozen=True)
class RunPoint:
    """One table in one run, as the state database recorded it.

    ``found`` are the suite's counts before repair, ``remaining`` after it (None: no repair ran),
    ``repaired`` the audit's rows by kind. ``started_at`` is when the run opened the table's offset
    range, ``finished_at`` its last suite result, ``snapshot_at`` when the source was read.
    """

    table: str
    run_id: str
    started_at: datetime | None
    finished_at: datetime | None
    snapshot_at: datetime | None
    passed: bool
    found: Mapping[str, int] = field(default_factory=dict)
    remaining: Mapping[str, int] | None = None
    passed_after_repair: bool | None = None
    repaired: Mapping[str, int] = field(default_factory=dict)
    dry_run: bool = False
    offsets: int | None = None

    @property
    def duration_seconds(self) -> float | None:
        """From opening the range to the last suite verdict."""
        if self.started_at is None or self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds()

    @property
    def lag_seconds(self) -> float | None:
        """How old the source state the lake was proven equal to is when the verdict lands."""
        if self.snapshot_at is None or self.finished_at is None:
            return None
        return (self.finished_at - self.snapshot_at).total_seconds()

    @property
    def verdict(self) -> str:
        if self.passed:
            return PASSED
        if self.dry_run:
            return DRY_RUN
        if self.passed_after_repair is None:
            return UNREPAIRED
        return REPAIRED if self.passed_after_repair else FAILED

    @property
    def sort_key(self) -> tuple:
        moment = self.started_at or self.finished_at or self.snapshot_at
        return (self.table, moment is None, moment or datetime.min, self.run_id)


def table_anchor(table: str) -> str:
    """The page fragment of a table's section (alerts link straight to it)."""
    return "table-" + "".join(c if c.isalnum() or c in "._-" else "-" for c in table)


def report_link(data_docs: str | None, table: str | None = None) -> str | None:
    """The trend report beside a Data Docs index (path or URL), at the table's section if named."""
    if not data_docs:
        return None
    base = data_docs.rsplit("/", 1)[0] if "/" in data_docs else ""
    link = f"{base}/{REPORT_NAME}" if base else REPORT_NAME
    return f"{link}#{table_anchor(table)}" if table else link


def _short(moment: datetime | None, run_id: str) -> str:
    return moment.strftime("%m-%d %H:%M") if moment else run_id[-12:]


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def _counts(counts: Mapping[str, int] | None, names: Sequence[str]) -> str:
    if counts is None:
        return "-"
    shown = [f"{k} {counts[k]}" for k in names if counts.get(k)]
    return ", ".join(shown) or "none"


def _charts(points: Sequence[RunPoint]) -> str:
    runs = [p.run_id for p in points]
    labels = [_short(p.started_at or p.finished_at, p.run_id) for p in points]
    found = [dict(p.found) for p in points]
    repaired = [{} if p.dry_run else dict(p.repaired) for p in points]
    timings = series_of(TIMINGS, [{"duration": p.duration_seconds, "lag": p.lag_seconds} for p in points])
    charts = [
        stacked_bars("found", "Differences found, by class", runs, labels, series_of(FOUND, found)),
        stacked_bars("duplicates", "Duplicates, by cause", runs, labels, series_of(DUPLICATES, found), "events"),
        stacked_bars("repairs", "Repairs, by kind", runs, labels, series_of(REPAIRS, repaired)),
        lines("timings", "Run duration and lag", runs, labels, timings, "seconds"),
    ]
    return '<div class="charts">' + "".join(f"<figure>{c}</figure>" for c in charts) + "</div>"


def _run_table(points: Sequence[RunPoint]) -> str:
    head = ("Run", "Started", "Verdict", "Found", "Repaired", "Left after repair", "Offsets", "Duration", "Lag")
    rows = []
    for p in reversed(points):
        cells = (
            escape(p.run_id),
            escape(p.started_at.isoformat(sep=" ", timespec="seconds") if p.started_at else "-"),
            f'<span class="verdict {escape(p.verdict.replace(" ", "-"))}">{escape(p.verdict)}</span>',
            escape(_counts(p.found, list(FOUND))),
            escape(_counts(p.repaired, list(REPAIRS)) + (" (dry run: audit only)" if p.dry_run else "")),
            escape(_counts(p.remaining, list(FOUND))),
            "-" if p.offsets is None else str(p.offsets),
            _seconds(p.duration_seconds),
            _seconds(p.lag_seconds),
        )
        rows.append(
            f'<tr data-run="{escape(p.run_id, quote=True)}">' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"
        )
    return (
        '<table class="runs"><thead><tr>'
        + "".join(f"<th>{h}</th>" for h in head)
        + "</tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )


def _section(table: str, points: Sequence[RunPoint]) -> str:
    latest = points[-1]
    return (
        f'<section class="table" id="{escape(table_anchor(table), quote=True)}" '
        f'data-table="{escape(table, quote=True)}">'
        f"<h2>{escape(table)}</h2>"
        f'<p class="summary">{len(points)} runs shown; latest: {escape(latest.run_id)}, '
        f'<span class="verdict {escape(latest.verdict.replace(" ", "-"))}">{escape(latest.verdict)}</span></p>'
        f"{_charts(points)}{_run_table(points)}</section>"
    )


STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 18px; margin: 28px 0 6px; }
nav a { margin-right: 12px; } .meta { color: #666; font-size: 13px; }
.charts { display: flex; flex-wrap: wrap; gap: 8px 16px; } figure { margin: 0; }
svg .chart-title { font-size: 13px; font-weight: 600; fill: #222; }
svg .legend, svg .axis { font-size: 11px; fill: #555; } svg .empty { font-size: 12px; fill: #999; }
svg .grid { stroke: #e5e5e5; stroke-width: 1; }
table.runs { border-collapse: collapse; font-size: 12px; margin-top: 10px; }
table.runs th, table.runs td { border-bottom: 1px solid #e5e5e5; padding: 3px 8px; text-align: left; }
.verdict { padding: 0 6px; border-radius: 3px; } .passed { background: #dff0d8; } .repaired { background: #fcf3cf; }
.failed-after-repair, .not-repaired { background: #f8d7da; } .dry-run { background: #e2e3e5; }
"""


def render(points: Sequence[RunPoint], *, generated_at: datetime, data_docs_href: str | None = "index.html") -> str:
    """The whole page: a section per table (alphabetical), runs oldest to newest in the charts."""
    ordered = sorted(points, key=lambda p: p.sort_key)
    tables = [(table, list(group)) for table, group in groupby(ordered, key=lambda p: p.table)]
    nav = "".join(f'<a href="#{escape(table_anchor(t), quote=True)}">{escape(t)}</a>' for t, _ in tables)
    docs = f'<a href="{escape(data_docs_href, quote=True)}">Data Docs</a> · ' if data_docs_href else ""
    body = "".join(_section(t, group) for t, group in tables) or (
        '<p class="empty">No run has recorded a suite result yet.</p>'
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"/>'
        '<meta name="viewport" content="width=device-width, initial-scale=1"/>'
        f"<title>CDC reconciliation trends</title><style>{STYLE}</style></head><body>"
        "<h1>CDC reconciliation trends</h1>"
        f'<p class="meta">{docs}generated {escape(generated_at.isoformat(sep=" ", timespec="seconds"))}; '
        "lag is the time from the source snapshot to the run's last verdict</p>"
        f"<nav>{nav}</nav>{body}</body></html>\n"
    )
