"""Alerts as an Airflow notifier: a warning when the suite failed and repair fixed it, critical otherwise.

The target is the Airflow connection ``cdc_alerts``: conn type ``http`` posts the alert as JSON to
the connection's URL (``schema://host:port`` plus ``extra.endpoint``, or ``extra.url``); conn type
``smtp`` mails it to ``extra.to`` through the SMTP provider's hook. Without the connection the alert
is only logged, with a line that says how to configure one.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from airflow.sdk import BaseNotifier

from ..phase import Phase
from ..suite import describe

log = logging.getLogger(__name__)

WARNING = "warning"
CRITICAL = "critical"
OUTCOME_KEY = "outcome"
CLASSES = ("redelivery", "snapshot_rerun", "missing", "extra", "stale", "quarantined")


def alert_message(
    severity: str,
    *,
    dag_id: str,
    run_id: str,
    task_id: str,
    outcome: Mapping[str, Any] | None,
    error: str | None = None,
) -> dict[str, Any]:
    """The alert's content: a title, counts by class, failed checks with sample keys, and where to look."""
    outcome = outcome or {}
    table = outcome.get("table", "?")
    found = {k: int(v) for k, v in (outcome.get("found") or {}).items() if k in CLASSES and v}
    repaired = {k: int(v) for k, v in (outcome.get("repaired") or {}).items() if v}
    if severity == WARNING:
        title = f"[WARNING] {dag_id} {table}: the suite failed and repair fixed it"
    elif outcome.get("reason"):
        title = f"[CRITICAL] {dag_id} {table}: {outcome['reason']}"
    else:
        title = f"[CRITICAL] {dag_id}: task {task_id} failed"
    lines = [title, f"run: {run_id}"]
    if found:
        lines.append("found: " + ", ".join(f"{k} {v}" for k, v in found.items()))
    if repaired:
        lines.append("repaired: " + ", ".join(f"{k} {v}" for k, v in repaired.items()))
    for phase in Phase:
        checks = outcome.get(phase.value)
        if checks and not checks.get("success", True):
            lines.append(f"failed checks ({phase.label}):")
            lines.extend(f"  {line}" for line in describe(checks).splitlines())
    if error:
        lines.append(f"error: {error}")
    if outcome.get("data_docs"):
        lines.append(f"Data Docs: {outcome['data_docs']}")
    return {
        "severity": severity,
        "title": title,
        "text": "\n".join(lines),
        "dag_id": dag_id,
        "run_id": run_id,
        "task_id": task_id,
        "table": outcome.get("table"),
        "found": found,
        "repaired": repaired,
        "data_docs": outcome.get("data_docs"),
    }


def _webhook_url(connection: Any) -> str:
    extra = connection.extra_dejson or {}
    if extra.get("url"):
        return str(extra["url"])
    host = connection.host or ""
    if "://" not in host:
        host = f"{connection.schema or 'http'}://{host}"
    if connection.port:
        host = f"{host.rstrip('/')}:{connection.port}"
    endpoint = str(extra.get("endpoint", ""))
    return host.rstrip("/") + ("/" + endpoint.lstrip("/") if endpoint else "")


def deliver(message: Mapping[str, Any], conn_id: str) -> str:
    """Send ``message`` to the target configured in connection ``conn_id``; return where it went."""
    import requests
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        connection = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        log.warning(
            "alert not sent: no Airflow connection %r (add one of type http with the webhook URL, or smtp "
            "with extra {'to': ...}). The alert was:\n%s",
            conn_id,
            message["text"],
        )
        return "log"
    if connection.conn_type == "smtp":
        from airflow.providers.smtp.hooks.smtp import SmtpHook

        recipients = (connection.extra_dejson or {}).get("to")
        if not recipients:
            raise ValueError(f"connection {conn_id!r} (smtp) needs extra {{'to': 'ops@example.com'}}")
        with SmtpHook(smtp_conn_id=conn_id) as smtp:
            smtp.send_email_smtp(to=recipients, subject=message["title"], html_content=f"<pre>{message['text']}</pre>")
        return f"smtp:{recipients}"
    url = _webhook_url(connection)
    response = requests.post(url, json=message, timeout=15)
    if response.status_code >= 300:
        raise RuntimeError(f"alert webhook {url} (connection {conn_id!r}) answered {response.status_code}")
    return url


class ReconciliationNotifier(BaseNotifier):
    """Airflow notifier for the reconciliation DAG's callbacks.

    It reads the outcome the task pushed under XCom key ``outcome`` (counts by class, failed checks,
    Data Docs path); for a task that failed without one, the alert names the task and its error.
    """

    template_fields = ("conn_id",)

    def __init__(self, severity: str, conn_id: str = "cdc_alerts") -> None:
        super().__init__()
        if severity not in (WARNING, CRITICAL):
            raise ValueError(f"severity must be {WARNING!r} or {CRITICAL!r}, got {severity!r}")
        self.severity = severity
        self.conn_id = conn_id

    def notify(self, context: Mapping[str, Any]) -> None:
        ti = context["ti"]
        outcome = ti.xcom_pull(task_ids=ti.task_id, key=OUTCOME_KEY, map_indexes=ti.map_index)
        exception = context.get("exception")
        message = alert_message(
            self.severity,
            dag_id=ti.dag_id,
            run_id=ti.run_id,
            task_id=ti.task_id,
            outcome=outcome,
            error=None if exception is None else str(exception),
        )
        target = deliver(message, self.conn_id)
        log.info("%s alert sent to %s: %s", self.severity, target, message["title"])
        print(json.dumps({"alert": message["title"], "target": target}))
