"""The Airflow adapter's decisions: skip, repair, or fail the run, and what the alert then carries."""

from __future__ import annotations

import json
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowSkipException

from cdc_reconcile.config import ConfigError
from cdc_reconcile.orchestration import tasks
from cdc_reconcile.orchestration.alerts import OUTCOME_KEY
from cdc_reconcile.phase import Phase

TABLE = "public.customers"
PASSED = {"success": True, "counts": {"missing": 0}, "checks": [], "data_docs": "docs/before.html"}
FAILED = {"success": False, "counts": {"missing": 4, "stale": 3}, "checks": [], "data_docs": "docs/before.html"}
REPAIRED = {"success": True, "counts": {"missing": 0, "stale": 0}, "checks": [], "data_docs": "docs/after.html"}


class FakeTaskInstance:
    """Records what a task pushes to XCom, as Airflow's task instance would store it."""

    def __init__(self) -> None:
        self.pushed: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What the state database holds for the run: suite outcomes by phase and the audit."""
    state: dict[str, Any] = {"outcomes": {}, "audit": {}}

    def recorded_outcomes(table_name: str, run_id: str, phases):
        assert table_name == TABLE and run_id == "run-1"
        missing = [p for p in phases if p not in state["outcomes"]]
        if missing:
            raise tasks.RunFailed(f"no suite result {missing[0].label}")
        return {p: state["outcomes"][p] for p in phases}, dict(state["audit"])

    monkeypatch.setattr(tasks, "recorded_outcomes", recorded_outcomes)
    return state


def test_a_passed_suite_skips_the_repair_branch(recorded):
    recorded["outcomes"][Phase.BEFORE_REPAIR] = PASSED
    ti = FakeTaskInstance()
    with pytest.raises(AirflowSkipException, match="the suite passed"):
        tasks.decide_repair(TABLE, "run-1", "repair", ti)
    assert ti.pushed == {}


def test_a_failed_suite_in_repair_mode_returns_what_to_repair(recorded):
    recorded["outcomes"][Phase.BEFORE_REPAIR] = FAILED
    ti = FakeTaskInstance()
    assert tasks.decide_repair(TABLE, "run-1", "repair", ti) == {"missing": 4, "stale": 3}
    assert ti.pushed == {}


def test_a_failed_suite_in_check_only_mode_fails_and_hands_the_alert_its_outcome(recorded):
    recorded["outcomes"][Phase.BEFORE_REPAIR] = FAILED
    ti = FakeTaskInstance()
    with pytest.raises(tasks.RunFailed, match="check-only mode"):
        tasks.decide_repair(TABLE, "run-1", "check_only", ti)
    outcome = ti.pushed[OUTCOME_KEY]
    assert outcome["found"] == {"missing": 4, "stale": 3}
    assert outcome[Phase.BEFORE_REPAIR.value] == FAILED
    assert outcome["reason"] == "the suite failed; check-only mode, nothing repaired"
    assert outcome["data_docs"] == "docs/before.html"


def test_an_unknown_mode_is_a_configuration_error():
    with pytest.raises(ConfigError, match="mode must be one of"):
        tasks.repair_decision(TABLE, "repair_everything", FAILED)


def test_a_missing_suite_result_names_the_task_to_run(recorded):
    with pytest.raises(tasks.RunFailed, match="no suite result before repair"):
        tasks.decide_repair(TABLE, "run-1", "repair", FakeTaskInstance())


def test_a_successful_repair_succeeds_with_the_audit_as_what_was_repaired(recorded):
    recorded["outcomes"].update({Phase.BEFORE_REPAIR: FAILED, Phase.AFTER_REPAIR: REPAIRED})
    recorded["audit"] = {"missing": 4, "stale": 3}
    ti = FakeTaskInstance()
    assert tasks.confirm_repair(TABLE, "run-1", False, ti) == {
        "found": {"missing": 4, "stale": 3},
        "repaired": {"missing": 4, "stale": 3},
    }
    outcome = ti.pushed[OUTCOME_KEY]
    assert "reason" not in outcome
    assert outcome[Phase.AFTER_REPAIR.value] == REPAIRED and outcome["data_docs"] == "docs/after.html"


def test_a_suite_still_failing_after_repair_fails_the_run(recorded):
    still = {**FAILED, "counts": {"missing": 1}}
    recorded["outcomes"].update({Phase.BEFORE_REPAIR: FAILED, Phase.AFTER_REPAIR: still})
    recorded["audit"] = {"missing": 4, "stale": 3}
    ti = FakeTaskInstance()
    with pytest.raises(tasks.RunFailed, match=r"still fails after repair: \{'missing': 1\}"):
        tasks.confirm_repair(TABLE, "run-1", False, ti)
    assert ti.pushed[OUTCOME_KEY]["reason"] == "the suite still fails after repair"


def test_a_dry_run_fails_and_reports_nothing_repaired(recorded):
    recorded["outcomes"].update({Phase.BEFORE_REPAIR: FAILED, Phase.AFTER_REPAIR: FAILED})
    recorded["audit"] = {"missing": 4, "stale": 3}
    ti = FakeTaskInstance()
    with pytest.raises(tasks.RunFailed, match="dry run"):
        tasks.confirm_repair(TABLE, "run-1", True, ti)
    outcome = ti.pushed[OUTCOME_KEY]
    assert outcome["repaired"] == {} and outcome["audit"] == {"missing": 4, "stale": 3}


def test_select_tables_keeps_the_configured_order_and_refuses_unknown_tables():
    assert tasks.select_tables(None) == ["public.customers", "public.order_lines"]
    assert tasks.select_tables(["public.order_lines", "public.customers"]) == [
        "public.customers",
        "public.order_lines",
    ]
    with pytest.raises(ConfigError, match=r"\['public.nope'\] are not configured in the built-in configuration"):
        tasks.select_tables(["public.nope"])


def test_select_tables_reads_the_yaml_configuration_the_jobs_read(tmp_path, monkeypatch):
    path = tmp_path / "tables.yaml"
    path.write_text("tables:\n  - name: public.customers\n    key: [id]\n  - name: sales.orders\n    key: [id]\n")
    monkeypatch.setenv("CDC_TABLES_CONFIG", str(path))
    assert tasks.select_tables(["sales.orders"]) == ["sales.orders"]
    assert tasks.select_tables([]) == ["public.customers", "sales.orders"]
    with pytest.raises(ConfigError, match=rf"\['public.order_lines'\] are not configured in {path}.*cdc-tables add"):
        tasks.select_tables(["public.order_lines"])


class Connection:
    def __init__(self, **fields: Any) -> None:
        self.conn_id = fields.pop("conn_id", "c")
        self.conn_type = fields.pop("conn_type", "generic")
        self.extra_dejson = fields.pop("extra_dejson", {})
        for name in ("host", "port", "schema", "login", "password"):
            setattr(self, name, fields.get(name))


def test_macros_render_connections():
    pg = Connection(host="db", port=6432, schema="app", login="cdc", password="p w'd")
    assert tasks.jdbc_url(pg) == "jdbc:postgresql://db:6432/app"
    assert tasks.libpq_dsn(pg) == "host=db port=6432 dbname=app user=cdc password='p w\\'d'"
    assert tasks.kafka_client(Connection(host="k1:9092,k2:9092")).bootstrap == "k1:9092,k2:9092"
    assert tasks.kafka_client(Connection(host="k1", port=9092)).bootstrap == "k1:9092"
    with pytest.raises(ConfigError, match="has no host"):
        tasks.kafka_client(Connection(conn_id="cdc_kafka"))


SASL_EXTRA = {
    "bootstrap.servers": "k1:9094,k2:9094",
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "cdc",
    "sasl.password": 'pa"ss',
    "ssl.ca.location": "/etc/kafka/ca.pem",
}


def test_a_kafka_connections_extra_is_the_client_config():
    connection = Connection(conn_id="cdc_kafka", conn_type="kafka", extra_dejson=dict(SASL_EXTRA))
    kafka = tasks.kafka_client(connection)
    assert kafka.bootstrap == "k1:9094,k2:9094"
    assert kafka.properties == {k: v for k, v in SASL_EXTRA.items() if k != "bootstrap.servers"}
    assert kafka.spark_options()["kafka.sasl.jaas.config"].endswith('username="cdc" password="pa\\"ss";')
    assert json.loads(kafka.to_json()) == SASL_EXTRA
    # the provider requires bootstrap.servers in the extra; the host is a fallback
    assert tasks.kafka_client(Connection(conn_type="kafka", host="k3", port=9092)).bootstrap == "k3:9092"
    with pytest.raises(ConfigError, match=r"'cdc_kafka' has no \"bootstrap.servers\" in its extra"):
        tasks.kafka_client(
            Connection(conn_id="cdc_kafka", conn_type="kafka", extra_dejson={"security.protocol": "SSL"})
        )
    with pytest.raises(ConfigError, match=r"'sasl\.oauthbearer\.method'"):
        tasks.kafka_client(
            Connection(conn_type="kafka", extra_dejson={**SASL_EXTRA, "sasl.oauthbearer.method": "oidc"})
        )


def test_an_older_generic_connection_is_bootstrap_servers_in_its_host_and_its_extra_is_not_client_config():
    connection = Connection(host="k1:9092", extra_dejson={"topic_prefix": "cdc", "connect_url": "http://c:8083"})
    kafka = tasks.kafka_client(connection)
    assert (kafka.bootstrap, dict(kafka.properties)) == ("k1:9092", {})
    assert json.loads(kafka.to_json()) == {"bootstrap.servers": "k1:9092"}


def test_the_python_tasks_run_object_gets_the_kafka_connection(monkeypatch):
    connections = {
        tasks.KAFKA_CONN: Connection(conn_type="kafka", extra_dejson=dict(SASL_EXTRA)),
        tasks.SOURCE_CONN: Connection(host="db", schema="app", login="cdc", password="pw"),
    }
    monkeypatch.setattr(tasks, "connection", connections.__getitem__)
    monkeypatch.setattr(tasks, "state_dsn", lambda: "host=db dbname=state")
    monkeypatch.setattr(tasks, "lake_root", lambda: "/lake")
    run = tasks.table_run(TABLE, "run-1")
    assert run.kafka.bootstrap == "k1:9094,k2:9094" and run.kafka.properties["sasl.mechanism"] == "SCRAM-SHA-512"
    assert 'pa"ss' not in repr(run.kafka)


def test_jobs_are_found_through_the_installed_package():
    assert tasks.job("compact_cdc").endswith("cdc_reconcile/jobs/compact_cdc.py")
    with pytest.raises(ConfigError, match="no Spark job named 'nope'"):
        tasks.job("nope")


def test_airflows_own_connection_objects_in_the_json_form_the_stack_and_compose_define():
    from airflow.sdk import Connection as AirflowConnection

    kafka = AirflowConnection.from_json(json.dumps({"conn_type": "kafka", "extra": SASL_EXTRA}), conn_id="cdc_kafka")
    assert tasks.kafka_client(kafka) == tasks.kafka_client(Connection(conn_type="kafka", extra_dejson=SASL_EXTRA))
    generic = AirflowConnection.from_json(json.dumps({"conn_type": "generic", "host": "k1:9092"}), conn_id="cdc_kafka")
    assert tasks.kafka_client(generic).bootstrap == "k1:9092"
