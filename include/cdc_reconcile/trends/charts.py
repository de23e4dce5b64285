"""Charts as inline SVG, drawn from numbers alone: the trend report must open offline, with no script.

Each chart is an ``<svg data-chart=NAME>`` with one mark per value (``data-series``, ``data-run``,
``data-value``) and a ``<title>`` that a browser shows on hover, so the exact figures are one pointer
away and a test can find a value in the chart it belongs to.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape

WIDTH, HEIGHT = 560, 230
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 34, 44
MAX_X_LABELS = 8
# A non-zero value stays visible beside a run a thousand times larger; its title gives the number.
MIN_BAR = 2.0


@dataclass(frozen=True)
class Series:
    """One named series of a chart: a value per run (None where the run has none)."""

    name: str
    color: str
    values: Sequence[float | None]


def _attr(value: object) -> str:
    return escape(str(value), quote=True)


def _number(value: float) -> str:
    return f"{value:g}" if value != int(value) else str(int(value))


def nice_ceiling(value: float) -> float:
    """The axis top: ``value`` rounded up to 1, 2, 2.5 or 5 times a power of ten (at least 1)."""
    if value <= 1:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * power:
            return step * power
    return 10 * power


def _frame(name: str, title: str, unit: str, top: float, labels: Sequence[str], series: Sequence[Series]) -> list[str]:
    """The chart's opening tag, title, legend, horizontal grid with values, and run labels."""
    plot_h = HEIGHT - TOP - BOTTOM
    parts = [
        f'<svg data-chart="{_attr(name)}" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'role="img" aria-label="{_attr(title)}">',
        f'<text class="chart-title" x="{LEFT}" y="14">{escape(title)}</text>',
    ]
    x = LEFT
    for s in series:
        parts.append(f'<rect x="{x}" y="21" width="10" height="10" fill="{_attr(s.color)}"/>')
        parts.append(f'<text class="legend" x="{x + 14}" y="30">{escape(s.name)}</text>')
        x += 22 + 7 * len(s.name)
    for i in range(5):
        value = top * i / 4
        y = TOP + plot_h - plot_h * i / 4
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>')
        parts.append(f'<text class="axis" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{_number(value)}</text>')
    parts.append(
        f'<text class="axis" x="12" y="{TOP + plot_h / 2:.1f}" transform="rotate(-90 12 {TOP + plot_h / 2:.1f})" '
        f'text-anchor="middle">{escape(unit)}</text>'
    )
    band = (WIDTH - LEFT - RIGHT) / max(len(labels), 1)
    every = max(1, math.ceil(len(labels) / MAX_X_LABELS))
    for i, label in enumerate(labels):
        if (len(labels) - 1 - i) % every == 0:  # evenly spaced, the newest run always named
            cx = LEFT + band * (i + 0.5)
            parts.append(
                f'<text class="axis" x="{cx:.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">'
                f"{escape(label)}</text>"
            )
    return parts


def stacked_bars(
    name: str, title: str, runs: Sequence[str], labels: Sequence[str], series: Sequence[Series], unit: str = "rows"
) -> str:
    """One bar per run, its series stacked; a run with nothing has no bar, and the chart says "none"."""
    totals = [sum(s.values[i] or 0 for s in series) for i in range(len(runs))]
    top = nice_ceiling(max(totals, default=0))
    plot_h = HEIGHT - TOP - BOTTOM
    band = (WIDTH - LEFT - RIGHT) / max(len(runs), 1)
    parts = _frame(name, title, unit, top, labels, series)
    for i, run in enumerate(runs):
        base = TOP + plot_h
        x = LEFT + band * i + band * 0.15
        for s in series:
            value = s.values[i] or 0
            if value <= 0:
                continue
            height = max(plot_h * value / top, MIN_BAR)
            base -= height
            parts.append(
                f'<rect class="mark" data-series="{_attr(s.name)}" data-run="{_attr(run)}" '
                f'data-value="{_number(value)}" '
                f'x="{x:.1f}" y="{base:.1f}" width="{band * 0.7:.1f}" height="{height:.1f}" fill="{_attr(s.color)}">'
                f"<title>{escape(run)} · {escape(s.name)}: {_number(value)}</title></rect>"
            )
    if not any(totals):
        parts.append(
            f'<text class="empty" x="{LEFT + (WIDTH - LEFT - RIGHT) / 2:.1f}" y="{TOP + plot_h / 2:.1f}" '
            f'text-anchor="middle">none in these runs</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def lines(
    name: str, title: str, runs: Sequence[str], labels: Sequence[str], series: Sequence[Series], unit: str
) -> str:
    """One line per series over the runs, a point per known value (a run without one breaks the line)."""
    known = [v for s in series for v in s.values if v is not None]
    top = nice_ceiling(max(known, default=0))
    plot_h = HEIGHT - TOP - BOTTOM
    band = (WIDTH - LEFT - RIGHT) / max(len(runs), 1)
    parts = _frame(name, title, unit, top, labels, series)
    for s in series:
        segment: list[str] = []
        points: list[str] = []
        for i, run in enumerate(runs):
            value = s.values[i]
            if value is None:
                if len(segment) > 1:
                    points.insert(0, _polyline(segment, s.color))
                segment = []
                continue
            cx, cy = LEFT + band * (i + 0.5), TOP + plot_h - plot_h * value / top
            segment.append(f"{cx:.1f},{cy:.1f}")
            points.append(
                f'<circle class="mark" data-series="{_attr(s.name)}" data-run="{_attr(run)}" '
                f'data-value="{_number(round(value, 1))}" cx="{cx:.1f}" cy="{cy:.1f}" r="3.5" fill="{_attr(s.color)}">'
                f"<title>{escape(run)} · {escape(s.name)}: {_number(round(value, 1))} {escape(unit)}</title></circle>"
            )
        if len(segment) > 1:
            points.insert(0, _polyline(segment, s.color))
        parts.extend(points)
    if not known:
        parts.append(
            f'<text class="empty" x="{LEFT + (WIDTH - LEFT - RIGHT) / 2:.1f}" y="{TOP + plot_h / 2:.1f}" '
            f'text-anchor="middle">no timings recorded</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _polyline(points: Sequence[str], color: str) -> str:
    return f'<polyline points="{" ".join(points)}" fill="none" stroke="{_attr(color)}" stroke-width="2"/>'


def series_of(names: Mapping[str, str], rows: Sequence[Mapping[str, float]]) -> list[Series]:
    """Series named by ``names`` (name -> colour), each taking its value from every row's mapping."""
    return [Series(name, color, [row.get(name, 0) for row in rows]) for name, color in names.items()]
