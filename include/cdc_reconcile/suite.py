"""The expectation suite, as Great Expectations code run on Spark DataFrames.

Eight datasets of one run are validated, each by its own suite:

* ``lake_as_of``: the lake table as of the run's snapshot. Row-count parity with the snapshot. GX's
  ``ExpectTableRowCountToEqualOtherTable`` cannot compare two Spark DataFrames, so the snapshot's row
  count, measured in the same run, is bound to the suite parameter ``snapshot_row_count``;
* ``lake_table``: the published lake table. No NULL key column, and the schema: exactly the source's
  columns plus the CDC metadata columns;
* ``lake_keys``: the published table's keys, one JSON text per row (so duplicates are sample keys, and
  GX's compound-column check, which misreads names holding a dot, is not needed). Primary-key uniqueness;
* ``changelog``: this range's changelog. Event uniqueness: no change delivered twice, one
  expectation per cause (a ``<cause>_key`` column holds the key of each duplicate, so the unexpected
  values are sample keys), and the change identity ``(key, op, txId, lsn)`` unique;
* ``differences``: the keys whose rows differ by typed row hash, one column per kind, so each kind is
  one expectation whose unexpected values are sample keys (missing, extra, stale rows = 0), and one
  column per stage where the differences arose (:mod:`attribution`: ``source->topic``,
  ``topic->lake``, ``lake``), each an expectation of its own, so the Data Docs name the stage;
* ``source_values``: one row per source value that its lake type cannot hold (a numeric NaN or
  Infinity, too many digits), named by its column. Debezium and the snapshot both turn such a value
  into null, so the diff cannot see it; the snapshot counts them in PostgreSQL (expected: none);
* ``transactions``: the transactions the run checked against their END records
  (:mod:`transaction_completeness`), one JSON text per transaction that did not arrive whole
  (expected: none). The diff sees only the rows that differ as of the snapshot; a cut transaction
  says the topic lost events even where a later change hid it;
* ``quarantine``: the run's quarantined records (not valid JSON, not an event of the table, not
  decodable), one JSON text each with partition, offset and reason. Their changes are not in the lake,
  so the diff may not see them either (expected: none).

The four datasets of the run's findings (``differences``, ``source_values``, ``transactions``,
``quarantine``) hold a few rows when nothing is wrong: up to :data:`IN_MEMORY_ROWS` rows, their checked
columns are collected in one Spark query and validated by GX on pandas, instead of two Spark jobs per
expectation and its aggregates. Larger ones stay on Spark.

Results go to the GX project's validation store and Data Docs
(``<gx_root>/gx/uncommitted/data_docs/local_site/index.html``, made to read offline by
:mod:`offline_docs` when the deployment names its assets folder); the run's summary goes to the state
database through the caller. A local ``gx_root`` is GX's file context; a URL (``webhdfs://``,
``s3://``, ``file://``) is the same layout on shared storage (:mod:`gx_storage`), which validate
tasks on every host write.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import tempfile
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .offline_docs import check_assets, finish_site
from .shared_storage import check_reachable, is_url, join, normalize_url, storable_name

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

SUITE = "cdc_reconciliation"
DATASETS = (
    "lake_as_of",
    "lake_table",
    "lake_keys",
    "changelog",
    "differences",
    "source_values",
    "transactions",
    "quarantine",
)
UNREPRESENTABLE_COLUMN = "unrepresentable_column"
LAKE_KEY_COLUMN = "key"
QUARANTINED_COLUMN = "quarantined_record"
INCOMPLETE_TRANSACTION_COLUMN = "incomplete_transaction"
DIFFERENCE_COLUMNS = {"missing": "missing_key", "extra": "extra_key", "stale": "stale_key"}
# where a difference arose (``attribution.STAGES``) -> its column in the ``differences`` dataset
STAGE_COLUMNS = {"source->topic": "source_to_topic_key", "topic->lake": "topic_to_lake_key", "lake": "in_lake_key"}
STAGE_CHECKS = {
    "source->topic": "attribution: no difference arose between the source and the topic",
    "topic->lake": "attribution: no difference arose between the topic and the lake",
    "lake": "attribution: the published table equals the lake as of the snapshot",
}
DUPLICATE_COLUMNS = {"redelivery": "redelivery_key", "snapshot_rerun": "snapshot_rerun_key"}
CHANGE_IDENTITY = ["key", "op", "source_txid", "source_lsn"]
SAMPLE_SIZE = 5
# the run's findings: each expectation is a NULL check on one of these columns
FINDING_COLUMNS = {
    "differences": [*DIFFERENCE_COLUMNS.values(), *STAGE_COLUMNS.values()],
    "source_values": [UNREPRESENTABLE_COLUMN],
    "transactions": [INCOMPLETE_TRANSACTION_COLUMN],
    "quarantine": [QUARANTINED_COLUMN],
}
# a finding dataset of at most this many rows is validated in memory (a row is a few key texts)
IN_MEMORY_ROWS = 10_000
# validation results the Data Docs index links, newest first (about 30 validations of 7 datasets; the
# trend report keeps the whole history). The index loads each result it links.
INDEX_LIMIT = 200
SITE_PARTS = ("gx", "uncommitted", "data_docs", "local_site")


@dataclass
class SuiteOutcome:
    """What the suite found for one table in one run: the verdict, counts by class, and every check."""

    table: str
    run_id: str
    phase: str
    success: bool
    counts: dict[str, int]
    checks: list[dict[str, Any]] = field(default_factory=list)
    data_docs: str | None = None

    @property
    def failed_checks(self) -> list[dict[str, Any]]:
        return [c for c in self.checks if not c["success"]]

    def as_dict(self) -> dict[str, Any]:
        return {
            "suite": SUITE,
            "table": self.table,
            "run_id": self.run_id,
            "phase": self.phase,
            "success": self.success,
            "counts": self.counts,
            "checks": self.checks,
            "data_docs": self.data_docs,
        }


def data_docs_index(gx_root: str | Path) -> Path | str:
    """Where the Data Docs site of a GX root is written: a path under a local root, a URL under a URL root."""
    if is_url(gx_root):
        return join(normalize_url(str(gx_root)), *SITE_PARTS, "index.html")
    return Path(gx_root).joinpath(*SITE_PARTS, "index.html")


def _expectations(key: Sequence[str]) -> dict[str, list[Any]]:
    import great_expectations as gx

    ge = gx.expectations
    return {
        "lake_as_of": [
            ge.ExpectTableRowCountToEqual(
                value={"$PARAMETER": "snapshot_row_count"}, meta={"check": "row-count parity as of the snapshot"}
            ),
        ],
        "lake_table": [
            *(
                ge.ExpectColumnValuesToNotBeNull(column=gx_column(k), meta={"check": "primary key present"})
                for k in key
            ),
            ge.ExpectTableColumnsToMatchSet(
                column_set={"$PARAMETER": "lake_columns"}, exact_match=True, meta={"check": "schema"}
            ),
        ],
        "lake_keys": [
            ge.ExpectColumnValuesToBeUnique(column=LAKE_KEY_COLUMN, meta={"check": "primary-key uniqueness"})
        ],
        "changelog": [
            *(
                ge.ExpectColumnValuesToBeNull(column=column, meta={"check": f"event uniqueness: no {cause} events"})
                for cause, column in DUPLICATE_COLUMNS.items()
            ),
            ge.ExpectCompoundColumnsToBeUnique(
                column_list=CHANGE_IDENTITY, meta={"check": "event uniqueness: change identity"}
            ),
        ],
        "differences": [
            *(
                ge.ExpectColumnValuesToBeNull(column=column, meta={"check": f"row-level equality: no {kind} rows"})
                for kind, column in DIFFERENCE_COLUMNS.items()
            ),
            *(
                ge.ExpectColumnValuesToBeNull(column=column, meta={"check": STAGE_CHECKS[stage]})
                for stage, column in STAGE_COLUMNS.items()
            ),
        ],
        "source_values": [
            ge.ExpectColumnValuesToBeNull(
                column=UNREPRESENTABLE_COLUMN, meta={"check": "every source value fits its lake type"}
            )
        ],
        "transactions": [
            ge.ExpectColumnValuesToBeNull(
                column=INCOMPLETE_TRANSACTION_COLUMN,
                meta={"check": "transaction completeness: every committed transaction arrived whole"},
            )
        ],
        "quarantine": [
            ge.ExpectColumnValuesToBeNull(column=QUARANTINED_COLUMN, meta={"check": "no quarantined records"})
        ],
    }


def gx_column(name: str) -> str:
    """A column name as GX on Spark spells it: a name holding a dot in backticks (else GX reads a path)."""
    return f"`{name}`" if "." in name else name


@contextlib.contextmanager
def file_lock(root: str | Path) -> Iterator[None]:
    """The GX project's lock without a state database: a file lock, which holds on one host only.

    A URL root's lock file is in this host's temporary folder, named after the URL.
    """
    if is_url(root):
        digest = hashlib.sha256(normalize_url(str(root)).encode()).hexdigest()[:16]
        path = Path(tempfile.gettempdir()) / f"cdc-reconcile-gx-{digest}.lock"
    else:
        Path(root).mkdir(parents=True, exist_ok=True)
        path = Path(root) / ".cdc-reconcile.lock"
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_run_pages(context: Any, run_name: str, suite_names: Sequence[str]) -> list[Any]:
    """Render this validation's pages, its suites' pages and the index; leave every earlier page as it is.

    A full build renders every result ever stored, so each validation would cost more than the last
    (about 0.1 s per stored result). The index links the newest :data:`INDEX_LIMIT` results, so it
    does not load every stored result either; older pages stay on disk. Returns the identifiers of
    the pages rendered besides the index.
    """
    from great_expectations.data_context.types.resource_identifiers import ExpectationSuiteIdentifier

    for name, site in context.list_data_docs_sites().items():
        index = dict(site.get("site_index_builder") or {"class_name": "DefaultSiteIndexBuilder"})
        if index.get("validation_results_limit") != INDEX_LIMIT:
            context.update_data_docs_site(
                name, {**site, "site_index_builder": {**index, "validation_results_limit": INDEX_LIMIT}}
            )
    results = [key for key in context.validation_results_store.list_keys() if key.run_id.run_name == run_name]
    suites = [ExpectationSuiteIdentifier(name=name) for name in suite_names]
    context.build_data_docs(resource_identifiers=[*suites, *results])
    return [*suites, *results]


def _site_pages(context: Any, site: str, identifiers: Sequence[Any]) -> list[str]:
    """The rendered pages of ``identifiers`` and the index, relative to the site's URL, as GX names them."""
    from urllib.parse import unquote

    pages = ["index.html"]
    for identifier in identifiers:
        for found in context.get_docs_sites_urls(resource_identifier=identifier, only_if_exists=False):
            url = found.get("site_url") or ""
            if url.startswith(site + "/"):
                pages.append(unquote(url[len(site) + 1 :]))
    return pages


def _definitions(context: Any, table: str, key: Sequence[str], in_memory: Collection[str] = ()) -> dict[str, Any]:
    """Data sources, assets, suites and validation definitions for one table, added or updated.

    The datasets in ``in_memory`` are bound to the pandas source ``cdc_run_findings``, the others to
    the Spark source ``cdc_lake``.
    """
    import great_expectations as gx

    # GX would persist every batch and never release it: a later read of the same path in this session
    # (the table republished by reconcile, then validated again) would see the cached rows
    spark_source = context.data_sources.add_or_update_spark(name="cdc_lake", persist=False)
    pandas_source = context.data_sources.add_or_update_pandas(name="cdc_run_findings") if in_memory else None
    definitions = {}
    for dataset, expectations in _expectations(key).items():
        name = f"{table}.{dataset}"
        source = pandas_source if dataset in in_memory else spark_source
        try:
            asset = source.get_asset(name)
        except LookupError:
            asset = source.add_dataframe_asset(name=name)
        try:
            batch = asset.get_batch_definition("run")
        except KeyError:
            batch = asset.add_batch_definition_whole_dataframe("run")
        suite = context.suites.add_or_update(gx.ExpectationSuite(name=f"{SUITE}.{name}", expectations=expectations))
        definitions[dataset] = context.validation_definitions.add_or_update(
            gx.ValidationDefinition(name=f"{SUITE}.{name}", data=batch, suite=suite)
        )
    return definitions


def _check(dataset: str, result: Any) -> dict[str, Any]:
    config = result.expectation_config
    outcome = result.result or {}
    check = {
        "dataset": dataset,
        "check": (config.meta or {}).get("check", config.type),
        "expectation": config.type,
        "kwargs": {k: v for k, v in config.kwargs.items() if k not in ("batch_id", "result_format")},
        "success": bool(result.success),
    }
    for name in ("observed_value", "element_count", "unexpected_count"):
        if name in outcome:
            check[name] = outcome[name]
    if outcome.get("partial_unexpected_list"):
        check["samples"] = outcome["partial_unexpected_list"][:SAMPLE_SIZE]
    if result.exception_info and result.exception_info.get("raised_exception"):
        check["error"] = result.exception_info.get("exception_message")
    return check


def collect_findings(datasets: Mapping[str, DataFrame], limit: int) -> dict[str, Any]:
    """The finding datasets of at most ``limit`` rows, their checked columns as pandas DataFrames.

    One Spark query each (``limit + 1`` rows, in the dataset's order); a larger dataset is left out.
    """
    collected = {}
    if limit <= 0:
        return collected
    for dataset, columns in FINDING_COLUMNS.items():
        rows = datasets[dataset].select(*columns).limit(limit + 1).toPandas()
        if len(rows) <= limit:
            collected[dataset] = rows
    return collected


def run_suite(
    datasets: Mapping[str, DataFrame],
    *,
    table: str,
    run_id: str,
    phase: str,
    key: Sequence[str],
    parameters: Mapping[str, Any],
    counts: Mapping[str, int],
    gx_root: str | Path,
    data_docs_assets: str | Path | None,
    lock: contextlib.AbstractContextManager[Any] | None = None,
    in_memory_rows: int = IN_MEMORY_ROWS,
) -> SuiteOutcome:
    """Validate the run's datasets, store the results, render their Data Docs pages, and summarise.

    The expectations run in an in-memory GX context, outside ``lock``: their metrics are Spark queries,
    and mapped validate tasks of a run compute them side by side. ``lock`` (by default :func:`file_lock`)
    is held only while the GX project is written: suites, validation definitions, the results and the
    pages, which the mapped tasks share. ``data_docs_assets``: the folder the Data Docs' CDN files are
    served from (``$CDC_DATA_DOCS_ASSETS``); None keeps the CDN links. An expectation that raises counts
    as failed: a suite that cannot run must never pass. Finding datasets of at most ``in_memory_rows``
    rows are validated on pandas (:func:`collect_findings`; 0 keeps every dataset on Spark).
    """
    if data_docs_assets is not None:
        check_assets(data_docs_assets)
    import great_expectations as gx
    from great_expectations.core.run_identifier import RunIdentifier

    shared = is_url(gx_root)
    root: str | Path = normalize_url(str(gx_root)) if shared else Path(gx_root)
    if shared:
        check_reachable(str(root))
    index = data_docs_index(root)
    # GX stores results and pages under the run name: HDFS refuses the ':' of an Airflow run id
    run = RunIdentifier(run_name=storable_name(root, f"{run_id} {table} {phase}"))
    expectation_parameters = dict(parameters)
    if "lake_columns" in expectation_parameters:
        expectation_parameters["lake_columns"] = [gx_column(c) for c in expectation_parameters["lake_columns"]]
    findings = collect_findings(datasets, in_memory_rows)
    scratch = gx.get_context(mode="ephemeral")
    computing = _definitions(scratch, table, key, findings)
    checks: list[dict[str, Any]] = []
    results = {}
    for dataset in DATASETS:
        results[dataset] = computing[dataset].run(
            batch_parameters={"dataframe": findings.get(dataset, datasets[dataset])},
            expectation_parameters=expectation_parameters,
            result_format={"result_format": "SUMMARY", "partial_unexpected_count": SAMPLE_SIZE},
            run_id=run,
        )
        checks.extend(_check(dataset, r) for r in results[dataset].results)
    stored = scratch.validation_results_store.list_keys()
    computed = {identifier.expectation_suite_identifier.name: identifier for identifier in stored}
    waited = time.monotonic()
    with lock if lock is not None else file_lock(root):
        held = time.monotonic()
        if shared:
            from .gx_storage import shared_context

            context = shared_context(str(root), INDEX_LIMIT)
        else:
            context = gx.get_context(mode="file", project_root_dir=str(root))
        definitions = _definitions(context, table, key, findings)
        for dataset, result in results.items():
            result.meta["validation_id"] = definitions[dataset].id
            context.validation_results_store.store_validation_results(
                suite_validation_result=result,
                suite_validation_result_identifier=computed[definitions[dataset].suite.name],
            )
        rendered = build_run_pages(context, run.run_name, [d.suite.name for d in definitions.values()])
        if shared:
            site = str(index).rsplit("/", 1)[0]
            finish_site(site, data_docs_assets, pages=_site_pages(context, site, rendered))
        else:
            finish_site(Path(index).parent, data_docs_assets)
        log.info(
            "%s: Great Expectations project written in %.2f s, after %.2f s waiting for its lock",
            table,
            time.monotonic() - held,
            held - waited,
        )
    return SuiteOutcome(
        table=table,
        run_id=run_id,
        phase=phase,
        success=all(c["success"] for c in checks) and len(checks) > 0,
        counts=dict(counts),
        checks=checks,
        data_docs=str(index),
    )


def source_values_dataset(spark: SparkSession, counts: Mapping[str, int]) -> DataFrame:
    """The ``source_values`` dataset: one row per value the lake cannot hold, named by its column."""
    from pyspark.sql import functions as F

    per_column = spark.createDataFrame(list(counts.items()), f"{UNREPRESENTABLE_COLUMN} string, n long")
    return per_column.select(UNREPRESENTABLE_COLUMN, F.explode(F.sequence(F.lit(1), F.col("n")))).select(
        UNREPRESENTABLE_COLUMN
    )


def lake_keys_dataset(table: DataFrame, key: Sequence[str]) -> DataFrame:
    """The ``lake_keys`` dataset: each lake row's key as one JSON text (how samples name keys everywhere)."""
    from pyspark.sql import functions as F

    from . import names

    return table.select(F.to_json(F.struct(*names.columns(key))).alias(LAKE_KEY_COLUMN))


def quarantine_dataset(spark: SparkSession, quarantine: DataFrame | None) -> DataFrame:
    """The ``quarantine`` dataset: one JSON text (partition, offset, reason) per quarantined record of the run."""
    from pyspark.sql import functions as F

    if quarantine is None:
        return spark.createDataFrame([], f"{QUARANTINED_COLUMN} string")
    record = F.to_json(F.struct("partition", "offset", "reason"))
    return quarantine.orderBy("partition", "offset").select(record.alias(QUARANTINED_COLUMN))


def transactions_dataset(spark: SparkSession, checked: DataFrame | None) -> DataFrame:
    """The ``transactions`` dataset: per checked transaction, one JSON text (id, counts, status) when it failed."""
    from pyspark.sql import functions as F

    from .transaction_completeness import NO_END_OR_INCOMPLETE

    if checked is None:
        return spark.createDataFrame([], f"{INCOMPLETE_TRANSACTION_COLUMN} string")
    failed = F.col("status").isin(*NO_END_OR_INCOMPLETE)
    record = F.to_json(F.struct("txid", "first_lsn", "end_lsn", "expected", "arrived", "status"))
    return checked.orderBy("txid", "end_lsn").select(F.when(failed, record).alias(INCOMPLETE_TRANSACTION_COLUMN))


def describe(outcome: SuiteOutcome | Mapping[str, Any]) -> str:
    """One line per failed check with its counts and sample keys: what an alert says."""
    document = outcome.as_dict() if isinstance(outcome, SuiteOutcome) else outcome
    lines = []
    for check in document["checks"]:
        if check["success"]:
            continue
        detail = []
        if "unexpected_count" in check:
            detail.append(f"{check['unexpected_count']} unexpected")
        if "observed_value" in check:
            detail.append(f"observed {json.dumps(check['observed_value'], default=str)}")
        if check.get("samples"):
            detail.append(f"e.g. {json.dumps(check['samples'][:3], default=str)}")
        if check.get("error"):
            detail.append(f"error: {check['error']}")
        lines.append(f"{check['dataset']}: {check['check']}: {', '.join(detail) or 'failed'}")
    return "\n".join(lines)
