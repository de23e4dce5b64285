"""The expectation suite on inline DataFrames: it passes on a faithful copy and fails, with counts, otherwise."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest
import yaml

from cdc_reconcile.compaction import CDC_COLUMNS
from cdc_reconcile.offline_docs import external_resources
from cdc_reconcile.suite import (
    DATASETS,
    FINDING_COLUMNS,
    INDEX_LIMIT,
    collect_findings,
    data_docs_index,
    describe,
    lake_keys_dataset,
    quarantine_dataset,
    run_suite,
    source_values_dataset,
    transactions_dataset,
)

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
DIFF_SCHEMA = (
    "order_id long, line_no int, missing_key string, extra_key string, stale_key string, "
    "source_to_topic_key string, topic_to_lake_key string, in_lake_key string"
)
QUARANTINE_SCHEMA = "topic string, partition int, offset long, key string, raw_value string, reason string"
CHECKED_SCHEMA = "txid long, first_lsn long, end_lsn long, expected long, arrived long, status string"


def lake_rows(rows):
    return [(*row, "c", 0, i, 0, 100 + i, 1000 + i, "debezium") for i, row in enumerate(rows)]


def datasets(spark, table_rows, changelog_rows, diff_rows, unrepresentable=None, quarantined=None, checked=None):
    table = spark.createDataFrame(lake_rows(table_rows), TABLE_SCHEMA)
    quarantine = spark.createDataFrame(quarantined, QUARANTINE_SCHEMA) if quarantined is not None else None
    transactions = spark.createDataFrame(checked or [], CHECKED_SCHEMA)
    return {
        "lake_as_of": table,
        "lake_table": table,
        "lake_keys": lake_keys_dataset(table, KEY),
        "changelog": spark.createDataFrame(changelog_rows, CHANGELOG_SCHEMA),
        "differences": spark.createDataFrame([(*r, *[None] * (8 - len(r))) for r in diff_rows], DIFF_SCHEMA),
        "source_values": source_values_dataset(spark, unrepresentable or {}),
        "transactions": transactions_dataset(spark, transactions),
        "quarantine": quarantine_dataset(spark, quarantine),
    }


def validate_at(
    gx_root,
    data_docs_assets,
    data,
    snapshot_rows,
    counts=None,
    key=KEY,
    columns=COLUMNS,
    table="public.order_lines",
    run_id="manual__2026-11-22T00:00:00+00:00",
    **options,
):
    """The suite on ``data`` with its results and Data Docs under ``gx_root`` (a path or a URL)."""
    return run_suite(
        data,
        table=table,
        run_id=run_id,
        phase="before_repair",
        key=key,
        parameters={"snapshot_row_count": snapshot_rows, "lake_columns": [*columns, *CDC_COLUMNS]},
        counts=counts or {},
        gx_root=gx_root,
        data_docs_assets=data_docs_assets,
        **options,
    )


@pytest.fixture(scope="module")
def gx_root(tmp_path_factory):
    """One GX project for the module's validations (each runs under its own table or run id)."""
    return tmp_path_factory.mktemp("suite") / "gx-project"


def test_a_faithful_copy_passes_every_check_and_docs_are_built(spark, gx_root, data_docs_assets):
    data = datasets(
        spark,
        [(1, 1, 5), (1, 2, 6), (2, 1, 7)],
        [
            ('{"order_id":1,"line_no":1}', "c", 100, 1000, None, None),
            ('{"order_id":1,"line_no":2}', "c", 101, 1001, None, None),
        ],
        [],
    )
    outcome = validate_at(gx_root, data_docs_assets, data, snapshot_rows=3)
    assert outcome.success, describe(outcome)
    assert {c["dataset"] for c in outcome.checks} == set(DATASETS) == set(data)
    assert len(outcome.checks) == 17
    index = data_docs_index(gx_root)
    assert index.is_file()
    assert external_resources(index.read_text()) == [], "the suite points the Data Docs at the assets folder"
    assert not any(df.is_cached for df in data.values()), "a dataset left cached would hide a later rewrite"


def test_every_kind_of_fault_fails_its_own_check_with_counts_and_sample_keys(spark, gx_root, data_docs_assets):
    data = datasets(
        spark,
        [(1, 1, 5), (1, 1, 6), (2, 1, 7)],  # a doubled compound key
        [
            ('{"order_id":1,"line_no":1}', "c", 100, 1000, None, None),
            ('{"order_id":1,"line_no":1}', "c", 100, 1000, '{"order_id":1,"line_no":1}', None),
            ('{"order_id":2,"line_no":1}', "r", 90, 900, None, '{"order_id":2,"line_no":1}'),
        ],
        [
            (3, 1, '{"order_id":3,"line_no":1}', None, None, '{"order_id":3,"line_no":1}'),
            (4, 1, '{"order_id":4,"line_no":1}', None, None, '{"order_id":4,"line_no":1}'),
            (2, 1, None, None, '{"order_id":2,"line_no":1}', None, '{"order_id":2,"line_no":1}'),
        ],
        unrepresentable={"unit_price": 2, "discount": 1},
    )
    outcome = validate_at(gx_root, data_docs_assets, data, snapshot_rows=4)
    assert not outcome.success
    failed = {(c["dataset"], c["check"]): c for c in outcome.failed_checks}
    assert set(failed) == {
        ("lake_as_of", "row-count parity as of the snapshot"),
        ("lake_keys", "primary-key uniqueness"),
        ("changelog", "event uniqueness: no redelivery events"),
        ("changelog", "event uniqueness: no snapshot_rerun events"),
        ("changelog", "event uniqueness: change identity"),
        ("differences", "row-level equality: no missing rows"),
        ("differences", "row-level equality: no stale rows"),
        ("differences", "attribution: no difference arose between the source and the topic"),
        ("differences", "attribution: no difference arose between the topic and the lake"),
        ("source_values", "every source value fits its lake type"),
    }
    arose = failed[("differences", "attribution: no difference arose between the topic and the lake")]
    assert (arose["unexpected_count"], arose["samples"]) == (1, ['{"order_id":2,"line_no":1}'])
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


def faulty_data(spark):
    """Every kind of fault at once: a doubled key, duplicate events, differences, unfit source values."""
    return datasets(
        spark,
        [(1, 1, 5), (1, 1, 6), (2, 1, 7)],
        [
            ('{"order_id":1,"line_no":1}', "c", 100, 1000, None, None),
            ('{"order_id":1,"line_no":1}', "c", 100, 1000, '{"order_id":1,"line_no":1}', None),
        ],
        [
            (3, 1, '{"order_id":3,"line_no":1}', None, None, '{"order_id":3,"line_no":1}'),
            (2, 1, None, None, '{"order_id":2,"line_no":1}', None, '{"order_id":2,"line_no":1}'),
        ],
        unrepresentable={"unit_price": 2},
        quarantined=[("cdc.public.order_lines", 0, 41, None, "{oops", "value is not valid JSON")],
        checked=[(70, 1_000, 1_900, 3, 2, "incomplete"), (71, 2_000, 2_900, 1, 1, "complete")],
    )


def spark_jobs(spark, validate):
    """How many Spark jobs ``validate()`` ran, and what it returned."""
    tracker = spark.sparkContext.statusTracker()
    before = set(tracker.getJobIdsForGroup())
    outcome = validate()
    return len(set(tracker.getJobIdsForGroup()) - before), outcome


def test_small_findings_are_validated_in_memory_with_the_same_checks_and_fewer_spark_jobs(
    spark, gx_root, data_docs_assets
):
    data = faulty_data(spark)
    on_spark_jobs, on_spark = spark_jobs(
        spark,
        lambda: validate_at(gx_root, data_docs_assets, data, 4, table="public.on_spark", in_memory_rows=0),
    )
    in_memory_jobs, in_memory = spark_jobs(
        spark, lambda: validate_at(gx_root, data_docs_assets, data, 4, table="public.in_memory")
    )
    assert in_memory.checks == on_spark.checks
    assert {c["dataset"] for c in in_memory.failed_checks} == set(DATASETS) - {"lake_table"}
    # nine NULL checks, each two Spark jobs on Spark, become one query per finding dataset
    assert in_memory_jobs <= on_spark_jobs - 2 * 9 + len(FINDING_COLUMNS), (in_memory_jobs, on_spark_jobs)
    stored = [
        json.loads(path.read_text())
        for path in (gx_root / "gx" / "uncommitted" / "validations").rglob("*.json")
        if "public.in_memory." in str(path)
    ]
    sources = {r["meta"]["active_batch_definition"]["data_asset_name"].split(".")[-1]: r for r in stored}
    assert {dataset: r["meta"]["active_batch_definition"]["datasource_name"] for dataset, r in sources.items()} == {
        dataset: "cdc_run_findings" if dataset in FINDING_COLUMNS else "cdc_lake" for dataset in DATASETS
    }


def test_a_finding_dataset_over_the_limit_stays_on_spark(spark):
    data = faulty_data(spark)
    assert set(collect_findings(data, limit=1)) == {"quarantine"}, "the other three hold 2 rows each"
    collected = collect_findings(data, limit=2)
    assert set(collected) == set(FINDING_COLUMNS)
    assert {dataset: list(rows.columns) for dataset, rows in collected.items()} == FINDING_COLUMNS
    assert collected["differences"]["missing_key"].tolist() == ['{"order_id":3,"line_no":1}', None]
    assert collect_findings(data, limit=0) == {}


def test_a_schema_drift_fails_the_schema_check(spark, gx_root, data_docs_assets):
    data = datasets(spark, [(1, 1, 5)], [], [])
    data["lake_table"] = data["lake_table"].drop("qty")
    outcome = validate_at(gx_root, data_docs_assets, data, snapshot_rows=1)
    assert [c["check"] for c in outcome.failed_checks] == ["schema"]


def test_quarantined_records_fail_their_own_check_with_offsets_and_reasons(spark, gx_root, data_docs_assets):
    data = datasets(
        spark,
        [(1, 1, 5)],
        [],
        [],
        quarantined=[
            ("cdc.public.order_lines", 0, 41, None, "{oops", "value is not valid JSON"),
            ("cdc.public.order_lines", 0, 17, '{"order_id":1}', '{"op":"x"}', "unknown op 'x'"),
        ],
    )
    outcome = validate_at(gx_root, data_docs_assets, data, snapshot_rows=1, counts={"quarantined": 2})
    assert not outcome.success
    [failed] = outcome.failed_checks
    assert (failed["dataset"], failed["check"]) == ("quarantine", "no quarantined records")
    assert failed["unexpected_count"] == 2
    assert [json.loads(s) for s in failed["samples"]] == [
        {"partition": 0, "offset": 17, "reason": "unknown op 'x'"},
        {"partition": 0, "offset": 41, "reason": "value is not valid JSON"},
    ]
    assert outcome.counts == {"quarantined": 2}
    assert "quarantine: no quarantined records: 2 unexpected" in describe(outcome)


def test_transactions_that_did_not_arrive_whole_fail_their_own_check_with_counts(spark, gx_root, data_docs_assets):
    checked = [
        (70, 1_000, 1_900, 3, 2, "incomplete"),
        (71, 2_000, 2_900, 1, 1, "complete"),
        (72, 3_000, None, None, 1, "no END record"),
        (73, None, 4_900, 2, 0, "unprovable"),
    ]
    data = datasets(spark, [(1, 1, 5)], [], [], checked=checked)
    outcome = validate_at(gx_root, data_docs_assets, data, snapshot_rows=1)
    [failed] = outcome.failed_checks
    assert (failed["dataset"], failed["check"]) == (
        "transactions",
        "transaction completeness: every committed transaction arrived whole",
    )
    assert failed["unexpected_count"] == 2
    assert [json.loads(s) for s in failed["samples"]] == [
        {"txid": 70, "first_lsn": 1_000, "end_lsn": 1_900, "expected": 3, "arrived": 2, "status": "incomplete"},
        {"txid": 72, "first_lsn": 3_000, "arrived": 1, "status": "no END record"},
    ]
    assert transactions_dataset(spark, None).count() == 0


def test_the_alert_names_quarantined_records():
    from cdc_reconcile.orchestration.alerts import CRITICAL, alert_message

    counts = {"missing": 0, "extra": 0, "stale": 0, "redelivery": 0, "snapshot_rerun": 0, "quarantined": 2}
    message = alert_message(
        CRITICAL,
        dag_id="cdc_reconciliation",
        run_id="manual__1",
        task_id="confirm_repair",
        outcome={"table": "public.order_lines", "reason": "the suite still fails after repair", "found": counts},
    )
    assert message["found"] == {"quarantined": 2}
    assert "found: quarantined 2" in message["text"]


def test_key_and_column_names_with_dots_and_spaces_are_checked_as_names(spark, gx_root, data_docs_assets):
    key = ["order.id", "line no"]
    schema = TABLE_SCHEMA.replace("order_id long", "`order.id` long").replace("line_no int", "`line no` int")
    table = spark.createDataFrame(lake_rows([(1, 1, 5), (1, 2, 6)]), schema)
    data = datasets(spark, [], [], [])
    data.update(lake_as_of=table, lake_table=table, lake_keys=lake_keys_dataset(table, key))
    columns = ["order.id", "line no", "qty"]
    passed = validate_at(
        gx_root, data_docs_assets, data, snapshot_rows=2, key=key, columns=columns, table="public.dotted"
    )
    assert passed.success, describe(passed)

    doubled = spark.createDataFrame(lake_rows([(1, 1, 5), (1, 1, 6)]), schema)
    data.update(lake_as_of=doubled, lake_table=doubled, lake_keys=lake_keys_dataset(doubled, key))
    failed = validate_at(
        gx_root, data_docs_assets, data, snapshot_rows=2, key=key, columns=columns, table="public.dotted"
    )
    [unique] = failed.failed_checks
    assert unique["check"] == "primary-key uniqueness"
    assert unique["samples"] == ['{"order.id":1,"line no":1}', '{"order.id":1,"line no":1}']


def test_each_validation_renders_only_its_own_pages_and_the_index_links_every_run(spark, tmp_path, data_docs_assets):
    data = datasets(spark, [(1, 1, 5)], [('{"order_id":1,"line_no":1}', "c", 100, 1000, None, None)], [])
    first, second = "manual__2026-11-22T01:00:00+00:00", "manual__2026-11-22T02:00:00+00:00"
    validate_at(tmp_path / "gx-project", data_docs_assets, data, snapshot_rows=1, run_id=first)
    site = data_docs_index(tmp_path / "gx-project").parent
    first_pages = {page: page.stat().st_mtime_ns for page in (site / "validations").rglob("*.html")}
    assert len(first_pages) == 8 and all(first in str(page) for page in first_pages)

    validate_at(tmp_path / "gx-project", data_docs_assets, data, snapshot_rows=1, run_id=second)
    pages = list((site / "validations").rglob("*.html"))
    assert len(pages) == 16
    assert {page: page.stat().st_mtime_ns for page in pages if first in str(page)} == first_pages, "re-rendered"
    index = (site / "index.html").read_text()
    assert all(quote(page.relative_to(site).as_posix()) in index for page in pages), "the index links both runs"
    assert external_resources(index) == []

    config = yaml.safe_load((tmp_path / "gx-project" / "gx" / "great_expectations.yml").read_text())
    assert config["data_docs_sites"]["local_site"]["site_index_builder"]["validation_results_limit"] == INDEX_LIMIT


def test_the_expectations_compute_before_the_project_lock_and_no_spark_job_runs_while_it_is_held(
    spark, tmp_path, data_docs_assets
):
    """Mapped validate tasks share the GX project's lock; their metrics are Spark queries, so they run
    before it is taken (side by side across tables), and only the project's writes run under it."""
    tracker = spark.sparkContext.statusTracker()

    class RecordingLock:
        def __enter__(self):
            self.jobs_at_entry = set(tracker.getJobIdsForGroup())
            return self

        def __exit__(self, *exc):
            self.jobs_at_exit = set(tracker.getJobIdsForGroup())
            return False

    lock = RecordingLock()
    before = set(tracker.getJobIdsForGroup())
    data = datasets(spark, [(1, 1, 5), (2, 1, 7)], [('{"order_id":1,"line_no":1}', "c", 100, 1000, None, None)], [])
    outcome = run_suite(
        data,
        table="public.order_lines",
        run_id="manual__2026-11-28T00:00:00+00:00",
        phase="before_repair",
        key=KEY,
        parameters={"snapshot_row_count": 2, "lake_columns": [*COLUMNS, *CDC_COLUMNS]},
        counts={},
        gx_root=tmp_path / "gx-project",
        data_docs_assets=data_docs_assets,
        lock=lock,
    )
    assert outcome.success, describe(outcome)
    assert lock.jobs_at_entry - before, "the expectations' metrics ran as Spark jobs before the lock"
    assert lock.jobs_at_exit == lock.jobs_at_entry, "no Spark job ran while the project's lock was held"
    stored = list((tmp_path / "gx-project" / "gx" / "uncommitted" / "validations").rglob("*.json"))
    assert len(stored) == len(DATASETS), "every dataset's result is stored in the project, not only computed"
