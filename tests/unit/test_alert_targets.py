"""Alerts reach Slack, a JSON webhook and a mail server through the providers' notifiers.

Each target is a real local server (an HTTP receiver in a thread, an SMTP server from aiosmtpd); the
``cdc_alerts`` connection is defined the way an operator would, as an ``AIRFLOW_CONN_*`` variable.
"""

from __future__ import annotations

import email
import json
import socket
import threading
from collections.abc import Iterator
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from cdc_reconcile.orchestration import alerts
from cdc_reconcile.phase import Phase

BASE_URL = "http://airflow.example:8080/"
FAILED_BEFORE = {
    "success": False,
    "counts": {"snapshot_rerun": 7, "missing": 2},
    "checks": [
        {
            "dataset": "differences",
            "check": "no missing rows",
            "success": False,
            "unexpected_count": 2,
            "samples": [{"id": 11}, {"id": 12}, {"id": 13}, {"id": 14}],
        },
        {"dataset": "events", "check": "event uniqueness", "success": True},
    ],
}
OUTCOME = {
    "table": "public.customers",
    "found": {"snapshot_rerun": 7, "missing": 2, "redelivery": 0},
    "repaired": {"snapshot_rerun": 7, "missing": 2},
    Phase.BEFORE_REPAIR.value: FAILED_BEFORE,
    Phase.AFTER_REPAIR.value: {"success": True, "counts": {}, "checks": []},
    "data_docs": "/srv/cdc/lake/../great_expectations/gx/uncommitted/data_docs/local_site/index.html",
}


class Receiver:
    """A local HTTP endpoint that keeps every request posted to it and answers like Slack does."""

    def __init__(self, status: int = 200) -> None:
        self.received: list[dict[str, Any]] = []
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                received.append({"path": self.path, "headers": dict(self.headers), "body": json.loads(body or b"null")})
                self.send_response(status)
                self.end_headers()
                self.wfile.write(b"ok" if status == 200 else b"invalid_payload")

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address
        return f"http://{host}:{port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()


@pytest.fixture(autouse=True)
def airflow_ui(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", BASE_URL)


def connect_alerts(monkeypatch: pytest.MonkeyPatch, **connection: Any) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_CDC_ALERTS", json.dumps(connection))


def warning_message() -> dict[str, Any]:
    return alerts.alert_message(
        alerts.WARNING,
        dag_id="cdc_reconciliation",
        run_id="manual__2026-01-01T10:00:00+00:00",
        task_id="reconcile_table.confirm_repair",
        outcome=OUTCOME,
        run_url=alerts.ui_url(
            "cdc_reconciliation", "manual__2026-01-01T10:00:00+00:00", "reconcile_table.confirm_repair", 1
        ),
    )


def test_the_message_carries_counts_sample_keys_and_links() -> None:
    message = warning_message()
    assert message["found"] == {"snapshot_rerun": 7, "missing": 2}
    assert message["sample_keys"] == {
        "before repair: differences: no missing rows": [{"id": 11}, {"id": 12}, {"id": 13}]
    }
    assert message["run_url"] == (
        "http://airflow.example:8080/dags/cdc_reconciliation/runs/manual__2026-01-01T10%3A00%3A00%2B00%3A00"
        "/tasks/reconcile_table.confirm_repair/mapped/1"
    )
    assert f"Airflow: {message['run_url']}" in message["text"]
    assert alerts.data_docs_url(message["data_docs"]) == (
        "file:///srv/cdc/great_expectations/gx/uncommitted/data_docs/local_site/index.html"
    )
    assert message["report"] == (
        "/srv/cdc/lake/../great_expectations/gx/uncommitted/data_docs/local_site/cdc_trends.html#table-public.customers"
    )
    assert f"Airflow: {message['run_url']}\nTrend report: {message['report']}" in message["text"]
    assert alerts.report_url(message["report"]) == (
        "file:///srv/cdc/great_expectations/gx/uncommitted/data_docs/local_site/cdc_trends.html#table-public.customers"
    )


def test_links_point_at_the_served_data_docs_when_the_site_has_a_url(monkeypatch) -> None:
    monkeypatch.setenv("AIRFLOW_VAR_CDC_DATA_DOCS_URL", "https://dq.example.com/cdc/")
    message = alerts.alert_message(
        alerts.WARNING,
        dag_id="cdc_reconciliation",
        run_id="manual__2026-01-01T10:00:00+00:00",
        task_id="reconcile_table.confirm_repair",
        outcome=OUTCOME,
        docs_url=alerts.served_docs_url(),
    )
    assert message["data_docs"] == "https://dq.example.com/cdc/index.html"
    assert message["report"] == "https://dq.example.com/cdc/cdc_trends.html#table-public.customers"
    assert "Data Docs: https://dq.example.com/cdc/index.html" in message["text"]
    assert alerts.data_docs_url(message["data_docs"]) == message["data_docs"]
    assert OUTCOME["data_docs"].startswith("/srv/cdc/")  # the task's outcome is left as it was
    # a page outside the site, and no URL set: the path as before
    assert alerts.served_page("/elsewhere/index.html", "https://dq.example.com/cdc") == "/elsewhere/index.html"
    monkeypatch.delenv("AIRFLOW_VAR_CDC_DATA_DOCS_URL")
    assert alerts.served_docs_url() is None


def test_a_url_gx_root_maps_to_the_served_data_docs_as_a_path_does() -> None:
    root_page = "webhdfs://namenode:9870/cdc/gx/gx/uncommitted/data_docs/local_site/validations/a%20b/x.html"
    outcome = {**OUTCOME, "data_docs": "s3://dq/gx/gx/uncommitted/data_docs/local_site/index.html"}
    message = alerts.alert_message(
        alerts.WARNING,
        dag_id="cdc_reconciliation",
        run_id="manual__2026-01-01T10:00:00+00:00",
        task_id="reconcile_table.confirm_repair",
        outcome=outcome,
        docs_url="https://dq.example.com/cdc/",
    )
    assert message["data_docs"] == "https://dq.example.com/cdc/index.html"
    assert message["report"] == "https://dq.example.com/cdc/cdc_trends.html#table-public.customers"
    assert alerts.served_page(root_page, "https://dq.example.com/cdc") == (
        "https://dq.example.com/cdc/validations/a%20b/x.html"
    )
    assert alerts.served_page(message["data_docs"], "https://dq.example.com/cdc/") == message["data_docs"]
    # not served: the storage URL is named, but no link a browser cannot open is made of it
    unserved = alerts.alert_message(alerts.WARNING, dag_id="d", run_id="r", task_id="t", outcome=outcome, docs_url=None)
    assert unserved["data_docs"] == outcome["data_docs"]
    assert alerts.data_docs_url(unserved["data_docs"]) is None
    assert alerts.report_url(unserved["report"]) is None
    assert f"Data Docs: {outcome['data_docs']}" in unserved["text"]


def test_a_slack_webhook_connection_posts_block_kit_through_the_slack_provider(monkeypatch, receiver) -> None:
    connect_alerts(monkeypatch, conn_type="slackwebhook", password=f"{receiver.url}/services/T0/B0/secret")
    message = warning_message()

    assert alerts.deliver(message, "cdc_alerts") == "slackwebhook:cdc_alerts"

    [request] = receiver.received
    assert request["path"] == "/services/T0/B0/secret"
    assert request["headers"]["Content-Type"].startswith("application/json")
    payload = request["body"]
    assert payload["text"] == message["title"]
    blocks = payload["blocks"]
    assert [b["type"] for b in blocks] == ["header", "section", "section", "context"]
    header, summary, details, links = blocks
    assert header["text"]["type"] == "plain_text" and len(header["text"]["text"]) <= 150
    assert all(field["type"] == "mrkdwn" for field in summary["fields"]) and len(summary["fields"]) <= 10
    fields = "\n".join(field["text"] for field in summary["fields"])
    assert "*Table*\npublic.customers" in fields
    assert "*Found*\nsnapshot_rerun 7, missing 2" in fields
    assert "*Repaired*\nsnapshot_rerun 7, missing 2" in fields
    assert f"<{message['run_url']}|manual__2026-01-01T10:00:00+00:00>" in fields
    assert details["text"]["type"] == "mrkdwn" and len(details["text"]["text"]) <= 3000
    assert '[{"id": 11}, {"id": 12}, {"id": 13}]' in details["text"]["text"]
    assert f"<{message['run_url']}|Airflow run>" in links["elements"][0]["text"]
    assert "/local_site/cdc_trends.html#table-public.customers|Trend report> · <file://" in links["elements"][0]["text"]
    assert "|Data Docs>" in links["elements"][0]["text"]


def test_slack_refusing_the_message_fails_the_delivery(monkeypatch) -> None:
    refusing = Receiver(status=400)
    try:
        connect_alerts(monkeypatch, conn_type="slackwebhook", password=f"{refusing.url}/services/T0/B0/secret")
        with pytest.raises(Exception, match="Status Code: 400"):
            alerts.deliver(warning_message(), "cdc_alerts")
    finally:
        refusing.close()


def test_an_http_connection_posts_the_message_as_json_through_the_http_provider(monkeypatch, receiver) -> None:
    host, port = receiver.server.server_address
    connect_alerts(monkeypatch, conn_type="http", host=host, port=port, schema="http", extra={"endpoint": "/alerts"})
    message = warning_message()

    assert alerts.deliver(message, "cdc_alerts") == "http:cdc_alerts"

    [request] = receiver.received
    assert request["path"] == "/alerts"
    body = request["body"]
    assert body == json.loads(json.dumps(message))
    assert (body["severity"], body["table"]) == ("warning", "public.customers")
    assert body["repaired"] == {"snapshot_rerun": 7, "missing": 2}
    assert body["run_url"].startswith(BASE_URL + "dags/cdc_reconciliation/runs/")


def test_an_http_connection_may_hold_the_whole_url_in_its_host(monkeypatch, receiver) -> None:
    connect_alerts(monkeypatch, conn_type="http", host=f"{receiver.url}/hooks/cdc")
    alerts.deliver(warning_message(), "cdc_alerts")
    assert [r["path"] for r in receiver.received] == ["/hooks/cdc"]


class Mailbox:
    """What the local SMTP server accepted."""

    def __init__(self) -> None:
        self.envelopes: list[tuple[str, list[str], Message]] = []

    async def handle_DATA(self, server, session, envelope) -> str:
        self.envelopes.append(
            (envelope.mail_from, list(envelope.rcpt_tos), email.message_from_bytes(envelope.original_content))
        )
        return "250 OK"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def mailbox() -> Iterator[tuple[Mailbox, int]]:
    from aiosmtpd.controller import Controller

    box, port = Mailbox(), free_port()
    controller = Controller(box, hostname="127.0.0.1", port=port)
    controller.start()
    yield box, port
    controller.stop()


def test_an_smtp_connection_mails_the_alert_through_the_smtp_provider(monkeypatch, mailbox) -> None:
    box, port = mailbox
    connect_alerts(
        monkeypatch,
        conn_type="smtp",
        host="127.0.0.1",
        port=port,
        extra={
            "to": "oncall@example.com, data@example.com",
            "from_email": "cdc@example.com",
            "disable_ssl": True,
            "disable_tls": True,
            "timeout": 10,
        },
    )
    message = warning_message()

    assert alerts.deliver(message, "cdc_alerts") == "smtp:cdc_alerts"

    [(sender, recipients, mail)] = box.envelopes
    assert sender == "cdc@example.com"
    assert recipients == ["oncall@example.com", "data@example.com"]
    assert mail["Subject"] == message["title"]
    [body] = [part.get_payload(decode=True).decode() for part in mail.walk() if part.get_content_type() == "text/html"]
    assert "<th align='left'>Table</th><td>public.customers</td>" in body
    assert "snapshot_rerun 7, missing 2" in body
    assert f'<a href="{message["run_url"]}">Airflow run</a>' in body
    assert 'local_site/cdc_trends.html#table-public.customers">Trend report</a>' in body
    assert 'data_docs/local_site/index.html">Data Docs</a>' in body
    assert "e.g. [{&quot;id&quot;: 11}" in body


def test_an_smtp_connection_without_recipients_says_what_to_add(monkeypatch) -> None:
    connect_alerts(monkeypatch, conn_type="smtp", host="127.0.0.1", port=25)
    with pytest.raises(ValueError, match="needs extra"):
        alerts.deliver(warning_message(), "cdc_alerts")


def test_a_connection_of_another_type_names_the_supported_ones(monkeypatch) -> None:
    connect_alerts(monkeypatch, conn_type="generic", host="http://127.0.0.1:1/alerts")
    with pytest.raises(ValueError, match=r"slackwebhook.*http.*smtp"):
        alerts.deliver(warning_message(), "cdc_alerts")


def test_without_the_connection_the_alert_is_only_logged(monkeypatch, caplog) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_CDC_ALERTS", raising=False)
    assert alerts.deliver(warning_message(), "cdc_alerts") == "log"
    assert "no Airflow connection 'cdc_alerts'" in caplog.text


def test_the_deadline_callback_sends_a_critical_alert_naming_the_run(monkeypatch, receiver) -> None:
    connect_alerts(monkeypatch, conn_type="http", host=f"{receiver.url}/alerts")
    dag_run = {
        "dag_id": "cdc_reconciliation",
        "dag_run_id": "scheduled__2026-01-01T10:00:00+00:00",
        "queued_at": "2026-01-01T10:00:02Z",
        "state": "running",
        "conf": {"tables": ["public.order_lines"]},
    }
    context = {"dag_run": dag_run, "deadline": {"id": "d1", "deadline_time": "2026-01-01T10:45:02Z"}}

    alerts.run_deadline_missed(context, conn_id="cdc_alerts", minutes=45)

    [request] = receiver.received
    body = request["body"]
    assert body["severity"] == "critical"
    assert body["table"] == "public.order_lines"
    assert "scheduled__2026-01-01T10:00:00+00:00 has not finished 45 minutes after it was queued" in body["title"]
    assert body["run_url"] == (BASE_URL + "dags/cdc_reconciliation/runs/scheduled__2026-01-01T10%3A00%3A00%2B00%3A00")


def test_a_timed_out_task_is_described_in_words_and_other_errors_as_they_are() -> None:
    from datetime import timedelta

    from airflow.sdk.exceptions import AirflowTaskTimeout

    text = alerts.failure_text(AirflowTaskTimeout("Timeout, PID: 4242"), timedelta(minutes=30))
    assert "still running at its execution timeout of 0:30:00 and was stopped" in text
    assert "CDC_SPARK_TASK_TIMEOUT" in text and "PID" not in text
    assert alerts.failure_text(ValueError("bad offsets"), timedelta(minutes=30)) == "bad offsets"
    assert alerts.failure_text(None, None) is None
