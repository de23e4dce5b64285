"""DAG integrity: the DAG imports, wires what the design says, and touches nothing at parse time."""

from __future__ import annotations

import datetime as dt
import inspect
import itertools
from pathlib import Path
from types import SimpleNamespace

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
    spark_tasks = [t for t in dag.tasks if type(t).__name__ == "CdcSparkJobOperator"]
    assert {t.task_id.split(".")[-1] for t in spark_tasks} == {
        "snapshot_source",
        "compact_cdc",
        "validate",
        "reconcile",
        "validate_repaired",
    }
    assert all(t._conn_id == "spark_default" for t in spark_tasks)
    assert all(Path(t.application).is_file() for t in spark_tasks)


def test_the_trigger_form_takes_table_names_and_known_modes(dagbag):
    """The form lists no tables (the configuration is a file, not read at parse time): it takes any
    ``schema.table`` name, and ``plan_tables`` checks it against the configuration when the run starts."""
    from airflow.sdk.definitions.param import ParamValidationError

    dag = dagbag.dags["cdc_reconciliation"]
    params = dag.params
    assert params["tables"] == []
    assert params["mode"] == "repair"
    assert params["dry_run"] is False
    assert params["full_rescan"] is False
    tables = params.get_param("tables")
    assert tables.resolve(["public.order_lines"]) == ["public.order_lines"]
    assert tables.resolve(["sales.only_in_the_yaml"]) == ["sales.only_in_the_yaml"]
    for bad in (["public.customers; DROP TABLE x"], ["customers"], ["public.customers", "public.customers"], "x.y"):
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
    """Nothing environment-specific is frozen into the DAG: the lake root is a template over the variable,
    and the connections a job reads are named, to be resolved when its task runs (into Spark configuration,
    not environment variables: ``env_vars`` would not reach a driver in cluster mode)."""
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    dag = dagbag.dags["cdc_reconciliation"]
    spark_tasks = [t for t in dag.tasks if isinstance(t, SparkSubmitOperator)]
    assert spark_tasks and all(type(t).__name__ == "CdcSparkJobOperator" for t in spark_tasks)
    for task in spark_tasks:
        assert {"application_args", "conf"} <= set(task.template_fields), task.task_id
        args = " ".join(map(str, task.application_args))
        assert "{{ var.value.cdc_lake_root }}" in args, f"{task.task_id}: lake root is not the variable"
        assert "{{ run_id }}" in args, f"{task.task_id}: run id is not templated"
        assert not task.env_vars, f"{task.task_id}: settings go as Spark configuration, not environment variables"
        assert task.properties_file is None, "the properties file is made when the task runs"
        assert "state" in task.connections, task.task_id
        assert task.conf["spark.pyspark.python"] == "{{ cluster_python() }}"
        assert "spark.pyspark.driver.python" not in task.conf, "the operator sets it from the deploy mode"
        assert not any("conn." in str(value) for value in task.conf.values()), "no secret on the command line"
    by_job = {t.task_id.split(".")[-1]: set(t.connections) for t in spark_tasks}
    assert by_job["snapshot_source"] == {"state", "source"}


def test_only_compact_cdc_gets_the_kafka_client_config_and_never_on_its_command_line(dagbag):
    """SASL/TLS settings reach the Spark job in its properties file from the ``cdc_kafka`` connection;
    the bootstrap servers included, so nothing of the connection shows in the spark-submit command."""
    dag = dagbag.dags["cdc_reconciliation"]
    spark_tasks = {t.task_id: t for t in dag.tasks if type(t).__name__ == "CdcSparkJobOperator"}
    compact = spark_tasks.pop("reconcile_table.compact_cdc")
    assert set(compact.connections) == {"state", "kafka"}
    args = list(map(str, compact.application_args))
    assert not any("kafka" in a or "bootstrap" in a or "password" in a for a in args)
    for task in spark_tasks.values():
        assert "kafka" not in task.connections, f"{task.task_id} does not read Kafka"


def test_every_task_has_a_finite_execution_timeout_and_seal_gives_up_first(dagbag):
    from cdc_reconcile.orchestration import limits, tasks

    dag = dagbag.dags["cdc_reconciliation"]
    for task in dag.tasks:
        assert task.execution_timeout is not None, f"{task.task_id} may run forever"
        if type(task).__name__ == "CdcSparkJobOperator":
            assert task.execution_timeout == limits.spark_task_timeout(), task.task_id
        else:
            assert task.execution_timeout <= limits.PYTHON_TASK, task.task_id
    watermark_wait = inspect.signature(tasks.seal_offsets).parameters["timeout"].default
    seal = dag.get_task("reconcile_table.seal_offsets")
    assert watermark_wait < seal.execution_timeout.total_seconds()
    assert dt.timedelta(hours=1) > limits.RUN_DEADLINE, "a late run must be reported before the next hourly run"


def test_a_run_past_its_deadline_sends_a_critical_alert(dagbag):
    from airflow.sdk import DeadlineReference, SyncCallback

    from cdc_reconcile.orchestration import alerts, limits

    dag = dagbag.dags["cdc_reconciliation"]
    [deadline] = dag.deadline
    assert deadline.reference == DeadlineReference.DAGRUN_QUEUED_AT
    assert deadline.interval == limits.RUN_DEADLINE
    assert isinstance(deadline.callback, SyncCallback)
    assert deadline.callback.path == "cdc_reconcile.orchestration.alerts.run_deadline_missed"
    assert deadline.callback.kwargs == {"conn_id": "cdc_alerts", "minutes": 45}
    assert alerts.run_deadline_missed.__module__ + ".run_deadline_missed" == deadline.callback.path


def test_each_mapped_instance_is_named_by_its_table(dagbag):
    """The UI names a mapped instance by rendering map_index_template with the task's rendered arguments.

    Airflow resolves the group's mapped argument (the table) while it renders the task; here the
    argument is replaced by a table, where the task holds it, and the template is rendered as Airflow does.
    """
    from airflow.sdk.definitions._internal.expandinput import MappedArgument

    def resolved(values):
        return [table if isinstance(v, MappedArgument) else v for v in values]

    table = "public.order_lines"
    dag = dagbag.dags["cdc_reconciliation"]
    env = dag.get_template_env()
    group = [t for t in dag.tasks if t.task_id.startswith("reconcile_table.")]
    assert len(group) == 10
    for task in group:
        assert task.map_index_template, f"{task.task_id} has no map_index_template"
        if hasattr(task, "python_callable"):
            rendered = SimpleNamespace(
                python_callable=task.python_callable,
                op_args=resolved(task.op_args),
                op_kwargs=dict(zip(task.op_kwargs, resolved(task.op_kwargs.values()), strict=True)),
            )
        else:
            rendered = SimpleNamespace(application_args=resolved(task.application_args))
        assert env.from_string(task.map_index_template).render(task=rendered) == table, task.task_id
    assert dag.get_task("plan_tables").map_index_template is None


def test_the_deadline_can_be_left_out_for_airflow_dags_test(monkeypatch):
    from cdc_reconcile.orchestration import alerts, limits

    monkeypatch.setenv(limits.DEADLINE_SWITCH, "off")
    assert alerts.run_deadline() is None
    monkeypatch.setenv(limits.DEADLINE_SWITCH, "on")
    assert alerts.run_deadline().interval == limits.RUN_DEADLINE


def test_the_spark_task_timeout_can_be_set_in_minutes_and_a_bad_value_is_named(monkeypatch):
    from cdc_reconcile.orchestration import limits

    monkeypatch.delenv(limits.SPARK_TASK_SWITCH, raising=False)
    assert limits.spark_task_timeout() == limits.SPARK_TASK
    monkeypatch.setenv(limits.SPARK_TASK_SWITCH, "0.75")
    assert limits.spark_task_timeout() == dt.timedelta(seconds=45)
    for bad in ("soon", "0", "-3", "2000"):
        monkeypatch.setenv(limits.SPARK_TASK_SWITCH, bad)
        with pytest.raises(ValueError, match=r"CDC_SPARK_TASK_TIMEOUT=.* is not a number of minutes"):
            limits.spark_task_timeout()
