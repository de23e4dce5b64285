"""The generated tables of docs/: rendered from result files between markers, the rest of the file kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cdc_dev import docs_tables
from cdc_dev.faults.result import ScenarioResult

REPO = Path(__file__).resolve().parents[2]

FAULTS = {
    "results": [
        {
            "scenario": "lost_events",
            "title": "5. Lost events",
            "repetition": repetition,
            "injected": {"lost_inserts": 4},
            "detected": {"missing": missing},
            "independent": {"missing": 4},
            "repaired": {"missing": missing},
            "repaired_ok": True,
            "rows_lost": 0,
            "lake_mismatches": 0,
            "false_alarms": 0,
            "missed": 4 - missing,
            "second_run_clean": True,
            "seconds": seconds,
        }
        for repetition, missing, seconds in ((1, 4, 100.0), (2, 3, 300.0), (3, 4, 200.0))
    ]
}

BENCH = {
    "measurements": [
        {
            "size": 1000,
            "step": "compaction (initial load)",
            "unit": "events",
            "work": 1000,
            "samples": [4.0, 2.0, 3.0],
            "baseline_name": "raw confluent-kafka consumer",
            "baseline_samples": [0.5],
        },
        {
            "size": 1000,
            "step": "snapshot",
            "unit": "rows",
            "work": 1000,
            "samples": [0.5, 0.4, 0.6],
            "baseline_name": "COPY TO STDOUT",
            "baseline_samples": [0.1, 0.1, 0.2],
        },
        {"size": 1000, "workload": {"rows": 1000}},
    ]
}


def document(name: str, body: str) -> str:
    """A document with prose around the generated block ``name``, which holds ``body``."""
    block = f"{docs_tables.begin_marker(name)}\n{body}{docs_tables.END_MARKER}"
    return f"# Title\n\nProse before.\n\n{block}\n\nProse after.\n"


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    (tmp_path / "docs" / "results").mkdir(parents=True)
    (tmp_path / "docs" / "results" / "fault-matrix.json").write_text(json.dumps(FAULTS))
    (tmp_path / "docs" / "results" / "bench.json").write_text(json.dumps(BENCH))
    (tmp_path / "docs" / "results" / "bench-delta.json").write_text(json.dumps(BENCH))
    (tmp_path / "docs" / "results" / "fault-matrix-cluster.json").write_text(json.dumps(FAULTS))
    (tmp_path / "docs" / "results" / "fault-matrix-spark-connect.json").write_text(json.dumps(FAULTS))
    cluster_block = f"{docs_tables.begin_marker('fault-matrix-cluster')}\n{docs_tables.END_MARKER}"
    connect_block = f"{docs_tables.begin_marker('fault-matrix-spark-connect')}\n{docs_tables.END_MARKER}"
    (tmp_path / "docs" / "fault-matrix.md").write_text(
        document("fault-matrix", "| stale | table |\n") + f"\n{cluster_block}\n\n{connect_block}\n"
    )
    delta_block = f"{docs_tables.begin_marker('performance-delta')}\n{docs_tables.END_MARKER}"
    (tmp_path / "docs" / "performance.md").write_text(document("performance", "") + f"\n{delta_block}\n")
    return tmp_path


def test_the_tables_replace_only_what_is_between_the_markers(checkout: Path):
    assert docs_tables.main(["--root", str(checkout)]) == 0

    faults = (checkout / "docs" / "fault-matrix.md").read_text()
    before, rest = faults.split(docs_tables.begin_marker("fault-matrix") + "\n")
    table, after = rest.split(docs_tables.END_MARKER, 1)
    assert before == "# Title\n\nProse before.\n\n"
    assert after.startswith("\n\nProse after.\n\n" + docs_tables.begin_marker("fault-matrix-cluster"))
    assert "| stale | table |" not in table
    rows = table.strip().splitlines()
    assert len(rows) == 3  # header, rule, one line for the scenario's three repetitions
    assert rows[2].startswith("| 5. Lost events | 2 of 3 | lost_inserts 4 | missing 4 / missing 3 ❌ / missing 4 |")
    assert rows[2].endswith("| 200 |")  # the median of the repetitions' seconds

    performance = (checkout / "docs" / "performance.md").read_text()
    assert performance.startswith("# Title\n\nProse before.\n\n")
    assert "\n\nProse after.\n\n" + docs_tables.begin_marker("performance-delta") in performance
    rows = performance.split(docs_tables.begin_marker("performance") + "\n")[1].split("\n")
    assert rows[2] == (
        "| 1,000 | snapshot | 1,000 rows | 0.50 s (0.40-0.60) | 2,000 rows/s | `COPY TO STDOUT` "
        "| 0.10 s (0.10-0.20) | 5.0x time | - |"
    )
    assert rows[3] == (
        "| 1,000 | compaction (initial load) | 1,000 events | 3.00 s (2.00-4.00) | 333 events/s | raw consumer "
        "| 0.50 s, 2,000 events/s | 0.17x rate ❌ | >= 0.25x |"
    )
    assert rows[4] == docs_tables.END_MARKER


def test_compaction_of_payload_only_messages_is_judged_on_its_own_target():
    with_schemas, payload_only = (
        {**BENCH["measurements"][0], "samples": [2.0]} | extra for extra in ({}, {"converter_schemas": "off"})
    )
    table = docs_tables.bench_table({"measurements": [with_schemas]}).splitlines()[2]
    assert table.endswith("| raw consumer | 0.50 s, 2,000 events/s | 0.25x rate ✅ | >= 0.25x |")
    table = docs_tables.bench_table({"measurements": [payload_only]}).splitlines()[2]
    assert table.endswith("| raw consumer (payload only) | 0.50 s, 2,000 events/s | 0.25x rate ❌ | >= 0.5x |")


def test_the_diff_is_judged_on_3x_duckdb_below_10m_rows_and_on_1_5x_from_there():
    def diff(size: int) -> dict:
        return {
            "size": size,
            "step": "diff (snapshot vs lake table)",
            "unit": "rows",
            "work": size,
            "samples": [2.0],
            "baseline_name": "DuckDB",
            "baseline_samples": [1.0],
        }

    rows = docs_tables.bench_table({"measurements": [diff(1_000_000), diff(10_000_000)]}).splitlines()[2:]
    assert rows[0].endswith("| DuckDB | 1.00 s | 2.0x time ✅ | <= 3x |")
    assert rows[1].endswith("| DuckDB | 1.00 s | 2.0x time ❌ | <= 1.5x |")


def test_rendering_twice_changes_nothing_and_check_reports_a_stale_document(checkout: Path):
    docs_tables.main(["--root", str(checkout)])
    rendered = (checkout / "docs" / "performance.md").read_text()
    assert docs_tables.main(["--root", str(checkout), "--check"]) == 0
    assert docs_tables.main(["--root", str(checkout)]) == 0
    assert (checkout / "docs" / "performance.md").read_text() == rendered

    (checkout / "docs" / "performance.md").write_text(rendered.replace("0.17x", "0.90x"))
    assert docs_tables.main(["--root", str(checkout), "--check"]) == 1
    assert "0.90x" in (checkout / "docs" / "performance.md").read_text()  # --check writes nothing


def test_a_document_without_its_markers_is_refused():
    with pytest.raises(ValueError, match="no <!-- BEGIN generated: performance --> marker"):
        docs_tables.replace_generated("# no markers\n", "performance", "| a |\n", where="docs/performance.md")
    with pytest.raises(ValueError, match="has no <!-- END generated -->"):
        docs_tables.replace_generated(docs_tables.begin_marker("performance") + "\n", "performance", "| a |\n")


def test_the_committed_docs_are_up_to_date_with_the_committed_results():
    rendered = docs_tables.render(REPO)
    assert set(rendered) == {REPO / "docs" / "fault-matrix.md", REPO / "docs" / "performance.md"}
    for path, text in rendered.items():
        assert path.read_text() == text, f"{path} is out of date: run python -m cdc_dev.docs_tables"


def test_the_committed_results_load_in_the_writers_formats():
    faults = json.loads((REPO / "docs" / "results" / "fault-matrix.json").read_text())
    bench = json.loads((REPO / "docs" / "results" / "bench.json").read_text())
    assert "bash scripts/faults.sh" in faults["source"]
    assert "bash bench/run.sh" in bench["source"]
    fields = set(ScenarioResult.__dataclass_fields__)
    assert all(set(record) - {"passed"} <= fields for record in faults["results"])
    assert {m["size"] for m in bench["measurements"]} == {30_000, 100_000, 1_000_000}


def test_the_delta_lake_results_hold_both_sizes_and_say_where_they_come_from():
    delta = json.loads((REPO / "docs" / "results" / "bench-delta.json").read_text())
    assert "bash bench/run.sh" in delta["command"]
    assert {m["size"] for m in delta["measurements"]} == {100_000, 1_000_000}
    assert not [m for m in delta["measurements"] if "error" in m]
