"""
### CDC reconciliation

Every hour, and on demand from the trigger form, for each configured table:

1. **checkpoint_offsets**: open this run's Kafka offset range at the previous run's end (a cleared
   task reuses its run's range; a full rescan opens it at the topic's beginning);
2. **snapshot_source** (Spark, JDBC): a consistent snapshot of the source table to Parquet;
3. **seal_offsets**: record the snapshot, write a watermark row, wait until it is committed in Kafka,
   and seal the range's end offsets;
4. **compact_cdc** (Spark, Kafka): exactly the sealed range into events, changelog and lake table;
5. **validate** (Great Expectations on Spark): row-count parity as of the snapshot, key uniqueness,
   event uniqueness, row-level equality, schema; results stored and Data Docs built;
6. **decide_repair**: skips the repair when the suite passed; fails in check-only mode;
7. **reconcile** (Spark): drops duplicate events, writes repair events for missing, extra and stale
   rows, records the audit; then **validate_repaired** runs the suite again;
8. **confirm_repair**: a warning alert names what was found and repaired, or the run fails with a
   critical alert when the suite still fails;
9. **publish_lake_table**: an Asset event for the validated lake table (alias `cdc_lake_tables`).

Connections: `cdc_state`, `cdc_source` (postgres), `cdc_kafka` (kafka: the extra is the client config,
`bootstrap.servers` plus librdkafka properties such as `security.protocol`, `sasl.mechanism`,
`sasl.username`, `sasl.password`, `ssl.ca.location`; a generic connection whose host is the bootstrap
servers still works), `spark_default`, optional `cdc_alerts` (slackwebhook, http webhook or smtp).
Sealing reads Kafka through confluent-kafka and **compact_cdc** through Spark's Kafka source, with the
same settings. `spark_default` says where the Spark tasks run (`CdcSparkJobOperator`): a `spark_connect`
connection runs each job in its task as a client of that long-lived Spark Connect server (no JVM per task),
handing it the connections it reads in memory; a `spark` connection spark-submits a driver per task, with
those connections as Spark configuration (`spark.cdc.*`) in a private properties file, never on its command
line or in its environment, so client and cluster deploy modes work alike. Variables: `cdc_lake_root`,
optional `cdc_gx_root`. Every task has an execution timeout, and a run not finished in time sends a
critical alert (both in `cdc_reconcile.orchestration.limits`). The logic lives in
`cdc_reconcile.orchestration`; this file only wires tasks.
"""

from __future__ import annotations

import datetime as dt

from airflow.sdk import AssetAlias, Param, TriggerRule, dag, task, task_group

from cdc_reconcile.orchestration import limits
from cdc_reconcile.orchestration import tasks as steps
from cdc_reconcile.orchestration.alerts import CRITICAL, WARNING, ReconciliationNotifier, run_deadline
from cdc_reconcile.orchestration.spark_job import KAFKA, SOURCE, STATE, CdcSparkJobOperator

LAKE_TABLES = AssetAlias("cdc_lake_tables")
RUN_ARGS = ["--run-id", "{{ run_id }}", "--lake-root", "{{ var.value.cdc_lake_root }}"]
# The cluster's Python: Spark configuration, not an environment variable, so it reaches a driver in cluster
# mode too. The driver's (the task's own in client mode) is set by the operator from the deploy mode.
PYTHON_CONF = {"spark.pyspark.python": "{{ cluster_python() }}"}
GX_ROOT = "{{ var.value.get('cdc_gx_root', var.value.cdc_lake_root ~ '/../great_expectations') }}"


def spark_job(task_id: str, job: str, arguments: list, connections: tuple[str, ...] = (STATE,)) -> CdcSparkJobOperator:
    """A Spark task; ``connections`` are the ones its job reads (only compact_cdc gets the Kafka config)."""
    return CdcSparkJobOperator(
        task_id=task_id,
        application=steps.job(job),
        application_args=arguments,
        connections=connections,
        conn_id=steps.SPARK_CONN,
        jars="{{ spark_jars() }}",
        name=f"cdc_{task_id}",
        conf={"spark.sql.shuffle.partitions": "8", "spark.ui.showConsoleProgress": "false", **PYTHON_CONF},
        driver_memory="2g",
        execution_timeout=limits.spark_task_timeout(),
    )


@dag(
    dag_id="cdc_reconciliation",
    schedule="@hourly",
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    max_active_runs=1,
    doc_md=__doc__,
    tags=["cdc", "reconciliation", "great-expectations", "spark"],
    user_defined_macros=steps.MACROS,
    deadline=run_deadline(),
    default_args={
        "owner": "data-platform",
        "retries": 1,
        "retry_delay": dt.timedelta(minutes=1),
        "execution_timeout": limits.PYTHON_TASK,
        "on_failure_callback": [ReconciliationNotifier(CRITICAL)],
    },
    params={
        # No enum: the table configuration ($CDC_TABLES_CONFIG) is a file, and the DAG reads none while
        # it is parsed. plan_tables checks the names against it when the run starts.
        "tables": Param(
            [],
            type="array",
            items={"type": "string", "pattern": steps.TABLE_NAME_PATTERN},
            uniqueItems=True,
            title="Tables",
            description=(
                "schema.table names from the table configuration ($CDC_TABLES_CONFIG, else the built-in one); "
                "empty: every configured table. An unconfigured name fails the run's first task."
            ),
        ),
        "mode": Param(
            "repair",
            type="string",
            enum=list(steps.MODES),
            values_display={"repair": "Check and repair", "check_only": "Check only (fail on differences)"},
            title="Mode",
        ),
        "dry_run": Param(
            False,
            type="boolean",
            title="Dry run",
            description="Compute the repair and write only its audit; the run then fails, nothing is changed.",
        ),
        "full_rescan": Param(
            False,
            type="boolean",
            title="Full rescan",
            description="Rebuild the lake tables from the whole topic instead of the previous run's table.",
        ),
    },
)
def cdc_reconciliation():
    @task
    def plan_tables(params=None) -> list[str]:
        return steps.select_tables(params["tables"])

    @task_group(default_args={"map_index_template": steps.TABLE_LABEL})
    def reconcile_table(table: str):
        @task
        def checkpoint_offsets(table: str, run_id=None, params=None) -> dict[str, int]:
            return steps.checkpoint_offsets(table, run_id, params["full_rescan"])

        @task(execution_timeout=limits.SEAL_TASK)
        def seal_offsets(table: str, run_id=None) -> dict:
            return steps.seal_offsets(table, run_id)

        @task(retries=0)
        def decide_repair(table: str, run_id=None, params=None, ti=None) -> dict:
            return steps.decide_repair(table, run_id, params["mode"], ti)

        @task(retries=0, on_success_callback=[ReconciliationNotifier(WARNING)])
        def confirm_repair(table: str, run_id=None, params=None, ti=None) -> dict:
            return steps.confirm_repair(table, run_id, params["dry_run"], ti)

        @task(outlets=[LAKE_TABLES], trigger_rule=TriggerRule.NONE_FAILED)
        def publish_lake_table(table: str, outlet_events=None) -> list[str]:
            return steps.publish_assets([table], outlet_events, LAKE_TABLES)

        table_args = ["--table", table, *RUN_ARGS]
        snapshot = spark_job("snapshot_source", "snapshot_source", table_args, (STATE, SOURCE))
        compact = spark_job(
            "compact_cdc",
            "compact_cdc",
            [
                *table_args,
                "--full-rescan",
                "{{ params.full_rescan }}",
            ],
            (STATE, KAFKA),
        )
        validate = spark_job("validate", "validate", [*table_args, "--gx-root", GX_ROOT, "--phase", "before_repair"])
        reconcile = spark_job("reconcile", "reconcile", [*table_args, "--dry-run", "{{ params.dry_run }}"])
        validate_repaired = spark_job(
            "validate_repaired", "validate", [*table_args, "--gx-root", GX_ROOT, "--phase", "after_repair"]
        )
        (
            checkpoint_offsets(table)
            >> snapshot
            >> seal_offsets(table)
            >> compact
            >> validate
            >> decide_repair(table)
            >> reconcile
            >> validate_repaired
            >> confirm_repair(table)
            >> publish_lake_table(table)
        )

    reconcile_table.expand(table=plan_tables())


cdc_reconciliation()
