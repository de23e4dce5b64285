"""Summary statistics and the Markdown table of a benchmark run.

Kept free of Spark and the stack so that a unit test can check the arithmetic and the table: the
figures in the README come from here, and a wrong median or ratio would mislead silently.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any


def summarise(samples: Sequence[float]) -> dict[str, float]:
    """Median, min, max and relative spread ((max - min) / median) of repeated timings, in seconds.

    Medians, not means: the machine is shared, and one repeat slowed by a neighbour's test run must
    not move the figure.
    """
    if not samples:
        raise ValueError("no samples")
    values = sorted(float(s) for s in samples)
    median = statistics.median(values)
    spread = (values[-1] - values[0]) / median if median > 0 else 0.0
    return {"median": median, "min": values[0], "max": values[-1], "spread": spread, "n": len(values)}


def rate(work: float, seconds: float) -> float:
    """Units of work per second; 0 when nothing was timed (a step that did not run)."""
    return work / seconds if seconds > 0 else 0.0


def ratio(product_seconds: float, baseline_seconds: float, *, higher_is_better: bool = False) -> float:
    """How the product compares with its baseline on the same work.

    ``higher_is_better=False`` gives time ratio product/baseline (1.5 = 1.5x the baseline's time);
    ``True`` gives a throughput ratio baseline-time/product-time (0.5 = half the baseline's rate).
    """
    if product_seconds <= 0 or baseline_seconds <= 0:
        return 0.0
    return baseline_seconds / product_seconds if higher_is_better else product_seconds / baseline_seconds


def _num(value: float, digits: int = 0) -> str:
    if value >= 100 or digits == 0:
        return f"{value:,.0f}"
    return f"{value:,.{digits}f}"


def fmt_seconds(summary: Mapping[str, float]) -> str:
    """``12.3 s (11.9-13.0)``: the median with the range of the repeats."""
    return f"{summary['median']:.2f} s ({summary['min']:.2f}-{summary['max']:.2f})"


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """One Markdown row per measured figure.

    Each row: size, step, work (e.g. ``1,100,000 events``), product (seconds summary), product rate,
    baseline name, baseline (seconds summary), ratio text and target text.
    """
    header = (
        "| N rows | step | work | ours: median (min-max) | ours: rate | baseline | baseline: median (min-max) "
        "| baseline: rate | ratio | target |"
    )
    lines = [header, "| " + " | ".join(["---"] * 10) + " |"]
    for r in rows:
        baseline = r.get("baseline")
        lines.append(
            "| "
            + " | ".join(
                [
                    f"{r['size']:,}",
                    r["step"],
                    f"{_num(r['work'])} {r['unit']}",
                    fmt_seconds(r["ours"]),
                    f"{_num(rate(r['work'], r['ours']['median']))} {r['unit']}/s",
                    r.get("baseline_name", "-") if baseline else "-",
                    fmt_seconds(baseline) if baseline else "-",
                    f"{_num(rate(r['work'], baseline['median']))} {r['unit']}/s" if baseline else "-",
                    r.get("ratio_text", "-"),
                    r.get("target_text", "-"),
                ]
            )
            + " |"
        )
    return "\n".join(lines) + "\n"
