"""DAG integrity: the DAG imports, wires what the design says, and touches nothing at parse time."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dagbag(tmp_path_factory, monkeypatch_module):
    home = tmp_path_factory.mktemp("airflow-home")
    monkeypatch_module.setenv("AIRFLOW_HOME", str(home))
    monkeypatch_module.setenv("AIRFLOW_CONFIG", str(REPO / "airflow.cfg"))
    monkeypatch_module.setenv("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk import BaseHook, Variable

    def forbidden(*args, **kwargs):
        raise AssertionError(f"touched at parse time: {args} {kwargs}")

    monkeypatch_module.setattr(BaseHook, "get_connection", forbidden)
    monkeypatch_module.setattr(Variable, "get", forbidden)
    return DagBag(dag_folder=str(REPO / "dags"))


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def test_every_dag_imports_without_errors(dagbag):
    assert dagbag.import_errors == {}
    assert "cdc_reconciliation" in dagbag.dags
    folders = {Path(dag.fileloc).parent for dag in dagbag.dags.values()}
    assert folders == {REPO / "dags"}, "only the project's DAG files are loaded (no example DAGs)"


def test_a_connection_or_variable_read_at_parse_time_fails_the_parse(dagbag, tmp_path):
    """The guard behind the first test: a DAG file that reads a connection or variable while parsing
    gets an import error, so "imports without errors" means "touches neither"."""
    (tmp_path / "reads_a_variable.py").write_text(
        "from airflow.sdk import DAG, Variable\nVariable.get('cdc_lake_root')\n"
    )
    (tmp_path / "reads_a_connection.py").write_text(
        "from airflow.sdk import DAG, BaseHook\nBaseHook.get_connection('cdc_state')\n"
    )
    from airflow.dag_processing.dagbag import DagBag

    errors = DagBag(dag_folder=str(tmp_path)).import_errors
    assert {Path(path).name for path in errors} == {"reads_a_variable.py", "reads_a_connection.py"}
    assert all("touched at parse time" in error for error in errors.values()), errors


def test_the_reconciliation_dag_is_hourly_tagged_and_retried(dagbag):
    dag = dagbag.dags["cdc_reconciliation"]
    assert str(dag.schedule) in ("@hourly", "0 * * * *") or getattr(dag.timetable, "summary", "") in ("@hourly",)
    assert dag.catchup is False
    assert {"cdc", "reconciliation"} <= set(dag.tags)
    assert dag.doc_md and "checkpoint_offsets" in dag.doc_md
    for task in dag.tasks:
        if task.task_id.endswith(("decide_repair", "confirm_repair")):
            assert task.retries == 0, f"{task.task_id}: a verdict must not be retried"
        else:
            assert task.retries >= 1, f"{task.task_id} has no retries"
        assert task.on_failure_callback, f"{task.task_id} sends no alert when it fails"


def test_tasks_run_in_the_designed_order_per_table(dagbag):
    dag = dagbag.dags["cdc_reconciliation"]
    order = [
        "checkpoint_offsets",
        "snapshot_source",
        "seal_offsets",
        "compact_cdc",
        "validate",
        "decide_repair",
        "reconcile",
        "validate_repaired",
        "confirm_repair",
        "publish_lake_table",
    ]
    for upstream, downstream in itertools.pairwise(order):
        task = dag.get_task(f"reconcile_table.{upstream}")
        assert f"reconcile_table.{downstream}" in task.downstream_task_ids, f"{upstream} -> {downstream}"
    spark_tasks = [t for t in dag.tasks if type(t).__name__ == "SparkSubmitOperator"]
    assert {t.task_id.split(".")[-1] for t in spark_tasks} == {
        "snapshot_source",
        "compact_cdc",
        "validate",
        "reconcile",
        "validate_repaired",
    }
    assert all(t._conn_id == "spark_default" for t in spark_tasks)
    assert all(Path(t.application).is_file() for t in spark_tasks)


def test_the_trigger_form_offers_only_configured_tables_and_known_modes(dagbag):
    from airflow.sdk.definitions.param import ParamValidationError

    dag = dagbag.dags["cdc_reconciliation"]
    params = dag.params
    assert params["tables"] == ["public.customers", "public.order_lines"]
    assert params["mode"] == "repair"
    assert params["dry_run"] is False
    assert params["full_rescan"] is False
    tables = params.get_param("tables")
    assert tables.resolve(["public.order_lines"]) == ["public.order_lines"]
    for bad in (["public.secrets"], ["public.customers; DROP TABLE x"], [], "public.customers"):
        with pytest.raises(ParamValidationError):
            tables.resolve(bad)
    with pytest.raises(ParamValidationError):
        params.get_param("mode").resolve("fix_everything")
    with pytest.raises(ParamValidationError):
        params.get_param("dry_run").resolve("yes")


def test_the_lake_table_is_published_as_an_asset(dagbag):
    dag = dagbag.dags["cdc_reconciliation"]
    publish = dag.get_task("reconcile_table.publish_lake_table")
    assert [getattr(o, "name", None) for o in publish.outlets] == ["cdc_lake_tables"]
    assert type(publish.outlets[0]).__name__ == "AssetAlias", "the tables' assets are attached at run time"


def test_spark_jobs_take_secrets_and_locations_from_connections_and_variables_at_run_time(dagbag):
    """Nothing environment-specific is frozen into the DAG: the jobs' DSNs, credentials and lake root
    are templates over Airflow connections and variables, in fields the operator renders per run."""
    dag = dagbag.dags["cdc_reconciliation"]
    spark_tasks = [t for t in dag.tasks if type(t).__name__ == "SparkSubmitOperator"]
    assert spark_tasks
    for task in spark_tasks:
        assert {"application_args", "env_vars"} <= set(task.template_fields), task.task_id
        args = " ".join(map(str, task.application_args))
        assert "{{ var.value.cdc_lake_root }}" in args, f"{task.task_id}: lake root is not the variable"
        assert "{{ run_id }}" in args, f"{task.task_id}: run id is not templated"
        for name in ("CDC_STATE_DSN", "CDC_PG_DSN", "CDC_PG_JDBC_URL", "CDC_PG_USER", "CDC_PG_PASSWORD"):
            assert "{{" in task.env_vars[name] and "conn.cdc_" in task.env_vars[name], f"{task.task_id}: {name}"
