"""The expectation suite on inline DataFrames: it passes on a faithful copy and fails, with counts, otherwise."""

from __future__ import annotations

import pytest

from cdc_reconcile.compaction import CDC_COLUMNS
from cdc_reconcile.suite import data_docs_index, describe, run_suite, source_values_dataset

KEY = ["order_id", "line_no"]
COLUMNS = ["order_id", "line_no", "qty"]
TABLE_SCHEMA = ", ".join(
    [
        "order_id long",
        "line_no int",
        "qty int",
        "_cdc_op string",
        "_cdc_partition int",
        "_cdc_offset long",
        "_cdc_sub int",
        "_cdc_txid long",
        "_cdc_lsn long",
        "_cdc_origin string",
    ]
)
CHANGELOG_SCHEMA = (
    "key string, op string, source_txid long, source_lsn long, redelivery_key string, snapshot_rerun_key string"
)
DIFF_SCHEMA = "order_id long, line_no int, missing_key string, extra_key string, stale_key string"


def lake_rows(rows):
    return [(*row, "c", 0, i, 0, 100 + i, 1000 + i, "debezium") for i, row in enumerate(rows)]


def datasets(spark, table_rows, changelog_rows, diff_rows, unrepresentable=None):
    table = spark.createDataFrame(lake_rows(table_rows), TABLE_SCHEMA)
    return {
        "lake_as_of": table,
        "lake_table": table,
        "changelog": spark.createDataFrame(changelog_rows, CHANGELOG_SCHEMA),
        "differences": spark.createDataFrame(diff_rows, DIFF_SCHEMA),
        "source_values": source_values_dataset(spark, unrepresentable or {}),
    }


def run(spark, tmp_path, data, snapshot_rows, counts=None):
    return run_suite(
        data,
        table="public.order_lines",
        run_id="manual__2026-11-22T00:00:00+00:00",
        phase="before_repair",
        key=KEY,
        parameters={"snapshot_row_count": snapshot_rows, "lake_columns": [*COLUMNS, *CDC_COLUMNS]},
        counts=counts or {},
        gx_root=tmp_path / "gx-project",
    )


@pytest.fixture(scope="module")
def gx_root(tmp_path_factory):
    return tmp_path_factory.mktemp("suite")


def test_a_faithful_copy_passes_every_check_and_docs_are_built(spark, gx_root):
    data = datasets(
        spark,
        [(1, 1, 5), (1, 2, 6), (2, 1, 7)],
        [
            ('{"order_id":1,"line_no":1}', "c", 100, 1000, None, None),
            ('{"order_id":1,"line_no":2}', "c", 101, 1001, None, None),
        ],
        [],
    )
    outcome = run(spark, gx_root, data, snapshot_rows=3)
    assert outcome.success, describe(outcome)
    assert {c["dataset"] for c in outcome.checks} == {
        "lake_as_of",
        "lake_table",
        "changelog",
        "differences",
        "source_values",
    }
    assert len(outcome.checks) == 12
    assert data_docs_index(gx_root / "gx-project").is_file()


def test_every_kind_of_fault_fails_its_own_check_with_counts_and_sample_keys(spark, gx_root):
    data = datasets(
        spark,
        [(1, 1, 5), (1, 1, 6), (2, 1, 7)],  # a doubled compound key
        [
            ('{"order_id":1,"line_no":1}', "c", 100, 1000, None, None),
            ('{"order_id":1,"line_no":1}', "c", 100, 1000, '{"order_id":1,"line_no":1}', None),
            ('{"order_id":2,"line_no":1}', "r", 90, 900, None, '{"order_id":2,"line_no":1}'),
        ],
        [
            (3, 1, '{"order_id":3,"line_no":1}', None, None),
            (4, 1, '{"order_id":4,"line_no":1}', None, None),
            (2, 1, None, None, '{"order_id":2,"line_no":1}'),
        ],
        unrepresentable={"unit_price": 2, "discount": 1},
    )
    outcome = run(spark, gx_root, data, snapshot_rows=4)
    assert not outcome.success
    failed = {(c["dataset"], c["check"]): c for c in outcome.failed_checks}
    assert set(failed) == {
        ("lake_as_of", "row-count parity as of the snapshot"),
        ("lake_table", "primary-key uniqueness"),
        ("changelog", "event uniqueness: no redelivery events"),
        ("changelog", "event uniqueness: no snapshot_rerun events"),
        ("changelog", "event uniqueness: change identity"),
        ("differences", "row-level equality: no missing rows"),
        ("differences", "row-level equality: no stale rows"),
        ("source_values", "every source value fits its lake type"),
    }
    unfit = failed[("source_values", "every source value fits its lake type")]
    assert unfit["unexpected_count"] == 3 and set(unfit["samples"]) == {"unit_price", "discount"}
    assert failed[("lake_as_of", "row-count parity as of the snapshot")]["observed_value"] == 3
    assert failed[("differences", "row-level equality: no missing rows")]["unexpected_count"] == 2
    assert failed[("differences", "row-level equality: no missing rows")]["samples"] == [
        '{"order_id":3,"line_no":1}',
        '{"order_id":4,"line_no":1}',
    ]
    assert failed[("changelog", "event uniqueness: no redelivery events")]["unexpected_count"] == 1
    assert failed[("changelog", "event uniqueness: no snapshot_rerun events")]["samples"] == [
        '{"order_id":2,"line_no":1}'
    ]
    assert "no missing rows: 2 unexpected" in describe(outcome)


def test_a_schema_drift_fails_the_schema_check(spark, gx_root):
    data = datasets(spark, [(1, 1, 5)], [], [])
    data["lake_table"] = data["lake_table"].drop("qty")
    outcome = run(spark, gx_root, data, snapshot_rows=1)
    assert [c["check"] for c in outcome.failed_checks] == ["schema"]
