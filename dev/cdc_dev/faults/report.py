"""The fault matrix: results as Markdown (per run and per scenario over its repetitions), saved and loaded."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .result import ScenarioResult
from .scenarios import SCENARIOS


def _figures(values: Mapping[str, Any]) -> str:
    shown = {k: v for k, v in values.items() if v}
    return ", ".join(f"{k} {v}" for k, v in shown.items()) or "none"


def _repaired_cell(r: ScenarioResult) -> str:
    if r.repaired_ok is None:
        return "not checked ❌"
    return _figures(r.repaired) + ("" if r.repaired_ok else " ❌")


def _clean_cell(r: ScenarioResult) -> str:
    if r.second_run_clean is None:
        return "not run ❌" if r.has_second_run else "n/a"
    return "yes" if r.second_run_clean else "no ❌"


def _cells(r: ScenarioResult) -> dict[str, str]:
    """One result's figures as the matrix shows them; a ❌ marks what fails the scenario."""
    return {
        "injected": _figures(r.injected),
        "detected": _figures(r.detected) + ("" if r.detected == r.independent else " ❌"),
        "independent": _figures(r.independent),
        "repaired": _repaired_cell(r),
        "lost": "-" if r.rows_lost is None else str(r.rows_lost),
        "false_alarms": "-" if r.false_alarms is None else str(r.false_alarms),
        "clean": _clean_cell(r),
        "problems": (f" error: {r.error}" if r.error else "")
        + "".join(f" failed check: {name} ❌" for name, ok in r.checks.items() if not ok),
    }


def markdown(results: list[ScenarioResult]) -> str:
    """The fault matrix: one line per scenario and repetition."""
    lines = [
        "| scenario | run | injected | detected (suite) | independent count | repaired (audit) | rows lost "
        "| false alarms | second run clean | s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        c = _cells(r)
        lines.append(
            f"| {r.title} | {r.repetition} | {c['injected']} | {c['detected']} | {c['independent']} | "
            f"{c['repaired']} | {c['lost']} | {c['false_alarms']} | {c['clean']} | {r.seconds:.0f} |{c['problems']}"
        )
    return "\n".join(lines) + "\n"


def matrix(results: list[ScenarioResult]) -> str:
    """One line per scenario over its repetitions: a figure shared by all once, else each one, ``a / b / c``."""
    order = {name: scenario.number for name, scenario in SCENARIOS.items()}
    by_scenario: dict[str, list[ScenarioResult]] = {}
    for r in sorted(results, key=lambda r: (order.get(r.scenario, 0), r.repetition)):
        by_scenario.setdefault(r.scenario, []).append(r)
    lines = [
        "| scenario | passed | injected | detected (suite) | independent count | repaired (audit) | rows lost "
        "| false alarms | second run clean | s (median) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for runs in by_scenario.values():
        cells = [_cells(r) for r in runs]

        def joined(column: str, cells: list[dict[str, str]] = cells) -> str:
            values = [c[column] for c in cells]
            return values[0] if len(set(values)) == 1 else " / ".join(values)

        seconds = sorted(r.seconds for r in runs)
        problems = "".join(c["problems"] for c in cells)
        lines.append(
            f"| {runs[0].title} | {sum(r.passed for r in runs)} of {len(runs)} | {joined('injected')} | "
            f"{joined('detected')} | {joined('independent')} | {joined('repaired')} | {joined('lost')} | "
            f"{joined('false_alarms')} | {joined('clean')} | {seconds[len(seconds) // 2]:.0f} |{problems}"
        )
    return "\n".join(lines) + "\n"


def save_results(out: Path, stamp: str, results: list[ScenarioResult], **about: Any) -> None:
    """``<stamp>.json`` (``about``, e.g. the machine, then the records), ``<stamp>.md`` and ``latest.md``."""
    records = [{**asdict(r), "passed": r.passed} for r in results]
    document = {**about, "results": records}
    (out / f"{stamp}.json").write_text(json.dumps(document, indent=2, default=str))
    report = matrix(results) + "\n" + markdown(results)
    (out / f"{stamp}.md").write_text(report)
    (out / "latest.md").write_text(report)


def load_results(path: Path) -> list[ScenarioResult]:
    """Records from a results JSON file, or from the ``scenario <name>: PASS/FAIL {...}`` lines of a log."""
    text = path.read_text()
    if path.suffix == ".json":
        loaded = json.loads(text)
        documents = loaded["results"] if isinstance(loaded, dict) else loaded  # the tests' artifacts are lists
    else:
        documents = [
            json.loads(line.split(": PASS ", 1)[-1].split(": FAIL ", 1)[-1])
            for line in text.splitlines()
            if "] scenario " in line and (": PASS {" in line or ": FAIL {" in line)
        ]
    fields = set(ScenarioResult.__dataclass_fields__)
    return [ScenarioResult(**{k: v for k, v in d.items() if k in fields}) for d in documents]
