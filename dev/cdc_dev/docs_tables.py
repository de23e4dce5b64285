"""Rewrite the generated tables in ``docs/`` from the result files, so no figure is edited by hand.

Each generated table sits between ``<!-- BEGIN generated: <name> -->`` and ``<!-- END generated -->``;
everything outside the markers is left as it is. The inputs are the files the measuring commands
write, committed under ``docs/results/``:

* ``fault-matrix.json``: what ``bash scripts/faults.sh`` saves (``test-artifacts/faults/<stamp>.json``),
  rendered by the fault runner's own ``matrix``; ``fault-matrix-cluster.json``: the same for the
  cluster's scenarios (``--scenario cluster``); ``fault-matrix-spark-connect.json``: for the scenarios
  run with ``--spark-connect``;
* ``bench.json``: what ``bash bench/run.sh`` saves (``bench/results/<stamp>.json``), on the lake as
  it was before Delta Lake (Parquet under a manifest), kept as the "before" of that change;
* ``bench-delta.json``: the same benchmark on the Delta Lake lake.

Copy a new result file over the committed one, then run ``python -m cdc_dev.docs_tables``;
``--check`` only reports whether the docs are up to date (exit 1 when they are not).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdc_dev.bench_targets import (
    DIFF_STEP,
    DUCKDB,
    HOURLY_RUN,
    HOURLY_TARGET_SIZE,
    POINT_IN_TIME_STEP,
    RAW_CONSUMER,
    target,
)
from cdc_dev.faults.report import load_results, matrix

END_MARKER = "<!-- END generated -->"
DEFAULT_ROOT = Path(__file__).resolve().parents[2]


def begin_marker(name: str) -> str:
    return f"<!-- BEGIN generated: {name} -->"


def replace_generated(text: str, name: str, table: str, *, where: str = "the document") -> str:
    """``text`` with the block ``name`` between its markers replaced by ``table``; the rest unchanged."""
    begin = begin_marker(name)
    start = text.find(begin)
    if start < 0:
        raise ValueError(f"{where}: no {begin} marker; add it and {END_MARKER} around the generated table")
    body = start + len(begin)
    end = text.find(END_MARKER, body)
    if end < 0:
        raise ValueError(f"{where}: {begin} has no {END_MARKER} after it")
    return text[:body] + "\n" + table.rstrip("\n") + "\n" + text[end:]


# -- the benchmark table ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """How one measured figure is shown: its place, the baseline's label, and whether its ratio is of rates."""

    step: str
    baseline: str | None
    label: str = "-"
    throughput: bool = False


# Table order: by step, then by size. A figure of a step not listed here follows, in file order.
STEPS = (
    Step("snapshot", "COPY TO STDOUT", "`COPY TO STDOUT`"),
    Step("compaction (initial load)", RAW_CONSUMER, "raw consumer", throughput=True),
    Step("compaction (hourly range)", RAW_CONSUMER, "raw consumer", throughput=True),
    Step(DIFF_STEP, DUCKDB, DUCKDB),
    Step(DIFF_STEP, "datacompy SparkSQLCompare", "datacompy `SparkSQLCompare`"),
    Step(POINT_IN_TIME_STEP, "DuckDB (plain diff)", "DuckDB (plain diff)"),
    Step(HOURLY_RUN, None),
)

BENCH_HEADER = (
    "| N rows | step | work | ours: median (min-max) | ours: rate | baseline | baseline: median (min-max) "
    "| ratio | target |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
)


def _ratio_text(ratio: float) -> str:
    return f"{ratio:.1f}x" if ratio >= 1 else f"{ratio:.2f}x"


def _rate(work: float, seconds: float, unit: str) -> str:
    return f"{work / seconds:,.0f} {unit}/s" if seconds > 0 else "-"


class _Seconds:
    """Timings as the table shows them: the median with the range of the repeats, the first time only.

    A figure shown once (the same samples already in an earlier row of the same size, such as the
    DuckDB timing that is the baseline of two rows) and a single sample are shown as the median alone.
    """

    def __init__(self) -> None:
        self.shown: set[tuple[int, tuple[float, ...]]] = set()

    def __call__(self, size: int, samples: Sequence[float]) -> tuple[float, str]:
        values = sorted(float(s) for s in samples)
        median = statistics.median(values)
        seen = (size, tuple(values))
        if len(values) == 1 or seen in self.shown:
            return median, f"{median:.2f} s"
        self.shown.add(seen)
        return median, f"{median:.2f} s ({values[0]:.2f}-{values[-1]:.2f})"


def _hourly_row(m: Mapping[str, Any], ours: str, our_rate: str) -> list[str]:
    bound = target(m)
    text = "-" if bound is None else f"{bound.text} at 1M / 100k"
    if bound is not None and m["size"] == HOURLY_TARGET_SIZE:
        met = "✅" if bound.met(statistics.median(m["samples"])) else "❌"
        text = f"{bound.text} {met} (steps only, see below)"
    peak = f"driver JVM peak RSS {m['peak_driver_jvm_rss_mib']:,.0f} MiB" if "peak_driver_jvm_rss_mib" in m else "-"
    return [ours, our_rate, "-", peak, "-", text]


def _row(m: Mapping[str, Any], step: Step, seconds: _Seconds) -> str:
    size, unit, work = m["size"], m["unit"], m["work"]
    median, ours = seconds(size, m["samples"])
    our_rate = _rate(work, median, unit)
    if step.step == HOURLY_RUN:
        cells = _hourly_row(m, ours, our_rate)
    elif not m.get("baseline_samples"):
        cells = [ours, our_rate, "-", "-", "-", "-"]
    else:
        base_median, base = seconds(size, m["baseline_samples"])
        if step.throughput:
            base += f", {_rate(work, base_median, unit)}"
            ratio = base_median / median
        else:
            ratio = median / base_median
        bound = target(m)
        judged = bound is not None and bound.judged and bound.baseline == m.get("baseline_name")
        verdict = "" if not judged else (" ✅" if bound.met(ratio) else " ❌")
        kind = "rate" if step.throughput else "time"
        label = (
            f"{step.label} (payload only)" if step.throughput and m.get("converter_schemas") == "off" else step.label
        )
        cells = [ours, our_rate, label, base, f"{_ratio_text(ratio)} {kind}{verdict}", bound.text if judged else "-"]
    return "| " + " | ".join([f"{size:,}", m["step"], f"{work:,} {unit}", *cells]) + " |"


def _step_of(m: Mapping[str, Any]) -> tuple[int, Step]:
    """The figure's place in :data:`STEPS` and how it is shown; an unknown step goes last.

    Its target (payload-only compaction's, the diff's below 10M rows) is :func:`bench_targets.target`'s.
    """
    for place, step in enumerate(STEPS):
        if (step.step, step.baseline) == (m["step"], m.get("baseline_name")):
            return place, step
    return len(STEPS), Step(m["step"], m.get("baseline_name"), m.get("baseline_name") or "-")


def bench_table(payload: Mapping[str, Any]) -> str:
    """The benchmark's figures (``bench/bench.py``'s JSON) as one table: each step at every size."""
    measured = [
        (*_step_of(m), m["size"], index, m) for index, m in enumerate(payload["measurements"]) if "samples" in m
    ]
    seconds = _Seconds()
    rows = [_row(m, step, seconds) for _, step, _, _, m in sorted(measured, key=lambda r: (r[0], r[2], r[3]))]
    return "\n".join([BENCH_HEADER, *rows]) + "\n"


# -- the documents ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Generated:
    """One generated table: the document it lives in, its marker name, its result file and renderer."""

    document: str
    name: str
    results: str
    render: Callable[[Path], str]


def _fault_matrix(path: Path) -> str:
    return matrix(load_results(path))


def _bench(path: Path) -> str:
    return bench_table(json.loads(path.read_text()))


TABLES = (
    Generated("docs/fault-matrix.md", "fault-matrix", "docs/results/fault-matrix.json", _fault_matrix),
    Generated("docs/fault-matrix.md", "fault-matrix-cluster", "docs/results/fault-matrix-cluster.json", _fault_matrix),
    Generated(
        "docs/fault-matrix.md",
        "fault-matrix-spark-connect",
        "docs/results/fault-matrix-spark-connect.json",
        _fault_matrix,
    ),
    Generated("docs/performance.md", "performance", "docs/results/bench.json", _bench),
    Generated("docs/performance.md", "performance-delta", "docs/results/bench-delta.json", _bench),
)


def render(root: Path, tables: Iterable[Generated] = TABLES) -> dict[Path, str]:
    """Each document's text with its generated table rendered from its result file (nothing written)."""
    documents: dict[Path, str] = {}
    for table in tables:
        path = root / table.document
        text = documents.get(path, path.read_text())
        documents[path] = replace_generated(text, table.name, table.render(root / table.results), where=str(path))
    return documents


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cdc_dev.docs_tables", description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="the checkout whose docs/ to rewrite")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a document is out of date")
    args = parser.parse_args(argv)
    stale = []
    for path, text in render(args.root).items():
        if path.read_text() == text:
            continue
        stale.append(path)
        if not args.check:
            path.write_text(text)
    for path in stale:
        print(f"{path}: {'out of date' if args.check else 'rewritten'}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
