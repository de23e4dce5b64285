"""Alerts through Airflow's provider notifiers: a warning when the suite failed and repair fixed it,
critical otherwise, and critical when a run misses its deadline.

The target is the Airflow connection ``cdc_alerts``; its type picks the provider's notifier:

* ``slackwebhook`` (Slack provider): a Slack incoming webhook; the webhook URL (or its token) is the
  connection's password;
* ``http`` (HTTP provider): the alert as JSON, POSTed to the connection's URL (``schema://host:port``,
  or a full URL as host) plus ``extra.endpoint``;
* ``smtp`` (SMTP provider): a mail to ``extra.to``, from ``extra.from_email``.

Every target carries the same content (:func:`alert_message`). Without the connection the alert is
only logged, with a line that says how to configure one.
"""

from __future__ import annotations

import html
import json
import logging
import os
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any
from urllib.parse import quote

from airflow.sdk import BaseNotifier

from ..phase import Phase
from ..suite import describe
from ..trends.page import report_link
from . import limits

log = logging.getLogger(__name__)

WARNING = "warning"
CRITICAL = "critical"
OUTCOME_KEY = "outcome"
ALERTS_CONN = "cdc_alerts"
# where the Data Docs site folder (<gx root>/gx/uncommitted/data_docs/local_site/, a path or a URL) is served
DOCS_URL_VAR = "cdc_data_docs_url"
DOCS_SITE = "/gx/uncommitted/data_docs/local_site/"
BROWSABLE = ("http", "https", "file")
CLASSES = ("redelivery", "snapshot_rerun", "missing", "extra", "stale", "quarantined", "incomplete_transactions")
SLACK, HTTP, SMTP = "slackwebhook", "http", "smtp"
WEBHOOK_TIMEOUT = 15
SAMPLE_KEYS = 3
STAGE_PREFIX = "stage "  # ``attribution.stage_count``


def ui_url(dag_id: str, run_id: str, task_id: str | None = None, map_index: int | None = None) -> str:
    """The Airflow UI page of a run (or of one of its task instances), under ``[api] base_url``."""
    from airflow.sdk.configuration import conf

    base = (conf.get("api", "base_url", fallback=None) or "http://localhost:8080/").rstrip("/")
    url = f"{base}/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}"
    if task_id:
        url += f"/tasks/{quote(task_id, safe='')}"
        if map_index is not None and map_index >= 0:
            url += f"/mapped/{map_index}"
    return url


def sample_keys(outcome: Mapping[str, Any]) -> dict[str, list[Any]]:
    """A few keys per failed check, by phase and check, as the suite recorded them."""
    samples: dict[str, list[Any]] = {}
    for phase in Phase:
        for check in (outcome.get(phase.value) or {}).get("checks") or []:
            if not check.get("success", True) and check.get("samples"):
                samples[f"{phase.label}: {check['dataset']}: {check['check']}"] = check["samples"][:SAMPLE_KEYS]
    return samples


def alert_message(
    severity: str,
    *,
    dag_id: str,
    run_id: str,
    task_id: str,
    outcome: Mapping[str, Any] | None,
    error: str | None = None,
    run_url: str | None = None,
    docs_url: str | None = None,
) -> dict[str, Any]:
    """The alert's content: a title, counts by class, failed checks with sample keys, and where to look.

    ``docs_url``: where the Data Docs site is served (the ``cdc_data_docs_url`` variable); the links to
    its pages then point there instead of at the worker's disk.
    """
    outcome = dict(outcome or {})
    if docs_url and outcome.get("data_docs"):
        outcome["data_docs"] = served_page(outcome["data_docs"], docs_url)
    report = report_link(outcome.get("data_docs"), outcome.get("table"))
    table = outcome.get("table", "?")
    found = {k: int(v) for k, v in (outcome.get("found") or {}).items() if k in CLASSES and v}
    # where the differences arose (``attribution``): the suite's counts ``stage <stage>``
    arose = {
        k.removeprefix(STAGE_PREFIX): int(v)
        for k, v in (outcome.get("found") or {}).items()
        if k.startswith(STAGE_PREFIX) and v
    }
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
    if arose:
        lines.append("where the differences arose: " + ", ".join(f"{k} {v}" for k, v in arose.items()))
    if repaired:
        lines.append("repaired: " + ", ".join(f"{k} {v}" for k, v in repaired.items()))
    for phase in Phase:
        checks = outcome.get(phase.value)
        if checks and not checks.get("success", True):
            lines.append(f"failed checks ({phase.label}):")
            lines.extend(f"  {line}" for line in describe(checks).splitlines())
    if error:
        lines.append(f"error: {error}")
    if run_url:
        lines.append(f"Airflow: {run_url}")
    if report:
        lines.append(f"Trend report: {report}")
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
        "arose": arose,
        "repaired": repaired,
        "sample_keys": sample_keys(outcome),
        "run_url": run_url,
        "report": report,
        "data_docs": outcome.get("data_docs"),
    }


# -- what each provider sends -------------------------------------------------------------------------


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items()) or "none"


def served_page(path: str, docs_url: str) -> str:
    """A page of the Data Docs site (under a local GX root or a URL one) as a URL under ``docs_url``.

    A page outside the site, or a link already under ``docs_url``, stays as it is.
    """
    if DOCS_SITE not in path or path.startswith(docs_url.rstrip("/") + "/"):
        return path
    return f"{docs_url.rstrip('/')}/{path.split(DOCS_SITE, 1)[1]}"


def data_docs_url(path: str | None) -> str | None:
    """A link for the Data Docs page: an http(s) or file URL as it is, an absolute path as a ``file://`` URI.

    A page on storage a browser cannot open (``webhdfs://``, ``s3://``) has no link: set ``cdc_data_docs_url``.
    """
    if not path:
        return None
    if "://" in path:
        return path if path.split("://", 1)[0].lower() in BROWSABLE else None
    return f"file://{quote(os.path.normpath(path))}" if os.path.isabs(path) else None


def report_url(link: str | None) -> str | None:
    """The trend report's link as a URL (see :func:`data_docs_url`), its table's fragment kept."""
    if not link:
        return None
    path, _, fragment = link.partition("#")
    url = data_docs_url(path)
    return f"{url}#{fragment}" if url and fragment else url


def _links(
    message: Mapping[str, Any], link: Callable[[str, str], str], literal: Callable[[str, str], str]
) -> list[str]:
    """The run, the trend report and the Data Docs, each as ``link(url, label)`` or, without a URL, a literal."""
    links = [link(message["run_url"], "Airflow run")] if message.get("run_url") else []
    for label, where, url in (
        ("Trend report", message.get("report"), report_url(message.get("report"))),
        ("Data Docs", message.get("data_docs"), data_docs_url(message.get("data_docs"))),
    ):
        if where:
            links.append(link(url, label) if url else literal(label, where))
    return links


def _slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def slack_blocks(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The alert as Slack Block Kit blocks: a header, the summary as fields, the details, the links.

    Slack caps a header at 150 characters and a section's text at 3,000; longer text is cut.
    """
    run = _slack_escape(message["run_id"])
    fields = {
        "Severity": message["severity"].upper(),
        "Table": _slack_escape(message.get("table") or "-"),
        "Run": f"<{message['run_url']}|{run}>" if message.get("run_url") else run,
        "Found": _counts(message["found"]),
        "Arose": _counts(message.get("arose") or {}),
        "Repaired": _counts(message["repaired"]),
    }
    details = _clip(_slack_escape(message["text"]), 2990)
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _clip(message["title"], 150)}},
        {"type": "section", "fields": [{"type": "mrkdwn", "text": f"*{k}*\n{v}"} for k, v in fields.items()]},
        {"type": "section", "text": {"type": "mrkdwn", "text": f"```{details}```"}},
    ]
    links = _links(message, lambda url, label: f"<{url}|{label}>", lambda label, at: f"{label}: `{_slack_escape(at)}`")
    if links:
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": " · ".join(links)}]})
    return blocks


def email_html(message: Mapping[str, Any]) -> str:
    """The alert as the body of a mail: the summary as a table, the details, the links."""
    esc = html.escape
    run = esc(message["run_id"])
    rows = {
        "Severity": esc(message["severity"].upper()),
        "Table": esc(message.get("table") or "-"),
        "Run": f'<a href="{esc(message["run_url"])}">{run}</a>' if message.get("run_url") else run,
        "Found": esc(_counts(message["found"])),
        "Arose": esc(_counts(message.get("arose") or {})),
        "Repaired": esc(_counts(message["repaired"])),
    }
    table = "".join(f"<tr><th align='left'>{k}</th><td>{v}</td></tr>" for k, v in rows.items())
    links = _links(
        message, lambda url, label: f'<a href="{esc(url)}">{label}</a>', lambda label, at: f"{label}: {esc(at)}"
    )
    return (
        f"<h3>{esc(message['title'])}</h3><table>{table}</table>"
        f"<pre>{esc(message['text'])}</pre><p>{' · '.join(links)}</p>"
    )


def provider_notifier(message: Mapping[str, Any], connection: Any) -> BaseNotifier:
    """The provider's notifier for the connection's type, holding the finished message."""
    conn_id = connection.conn_id
    extra = connection.extra_dejson or {}
    if connection.conn_type == SLACK:
        from airflow.providers.slack.notifications.slack_webhook import SlackWebhookNotifier

        return SlackWebhookNotifier(slack_webhook_conn_id=conn_id, text=message["title"], blocks=slack_blocks(message))
    if connection.conn_type == HTTP:
        from airflow.providers.http.notifications.http import HttpNotifier

        # The HTTP hook waits forever unless told; a timeout in the connection's extra wins.
        options = {} if "timeout" in extra else {"timeout": WEBHOOK_TIMEOUT}
        body = json.loads(json.dumps(message, default=str))
        return HttpNotifier(http_conn_id=conn_id, endpoint=extra.get("endpoint"), json=body, extra_options=options)
    if connection.conn_type == SMTP:
        from airflow.providers.smtp.notifications.smtp import SmtpNotifier

        if not extra.get("to"):
            raise ValueError(f"connection {conn_id!r} (smtp) needs extra {{'to': 'ops@example.com'}}")
        return SmtpNotifier(
            to=extra["to"], smtp_conn_id=conn_id, subject=message["title"], html_content=email_html(message)
        )
    raise ValueError(
        f"connection {conn_id!r} has type {connection.conn_type!r}; alerts go to a connection of type "
        f"{SLACK!r} (Slack incoming webhook), {HTTP!r} (JSON webhook) or {SMTP!r} (mail)"
    )


def deliver(message: Mapping[str, Any], conn_id: str, context: Mapping[str, Any] | None = None) -> str:
    """Send ``message`` through the notifier of connection ``conn_id``'s type; return where it went."""
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        connection = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        log.warning(
            "alert not sent: no Airflow connection %r (add one of type slackwebhook with the webhook URL as "
            "password, http with the webhook URL, or smtp with extra {'to': ...}). The alert was:\n%s",
            conn_id,
            message["text"],
        )
        return "log"
    # notify(), not the notifier's __call__: the message is final, and rendering it as a Jinja template
    # would mangle a sample key that happens to contain "{{".
    provider_notifier(message, connection).notify(dict(context or {}))
    return f"{connection.conn_type}:{conn_id}"


def failure_text(exception: BaseException | None, execution_timeout: timedelta | None) -> str | None:
    """What failed, in words: Airflow's own timeout error only says "Timeout, PID: n"."""
    from airflow.sdk.exceptions import AirflowTaskTimeout

    if exception is None:
        return None
    if isinstance(exception, AirflowTaskTimeout):
        limit = f" of {execution_timeout}" if execution_timeout else ""
        return (
            f"the task was still running at its execution timeout{limit} and was stopped (a Spark task's "
            "spark-submit is killed); look for what it waited on in the task log, for example a lock on the "
            f"source table or an unreachable broker, or raise {limits.SPARK_TASK_SWITCH} for a larger table"
        )
    return str(exception)


class ReconciliationNotifier(BaseNotifier):
    """Airflow notifier for the reconciliation DAG's task callbacks.

    It reads the outcome the task pushed under XCom key ``outcome`` (counts by class, failed checks,
    Data Docs path); for a task that failed without one, the alert names the task and its error.
    """

    template_fields = ("conn_id",)

    def __init__(self, severity: str, conn_id: str = ALERTS_CONN) -> None:
        super().__init__()
        if severity not in (WARNING, CRITICAL):
            raise ValueError(f"severity must be {WARNING!r} or {CRITICAL!r}, got {severity!r}")
        self.severity = severity
        self.conn_id = conn_id

    def notify(self, context: Mapping[str, Any]) -> None:
        ti = context["ti"]
        outcome = ti.xcom_pull(task_ids=ti.task_id, key=OUTCOME_KEY, map_indexes=ti.map_index)
        message = alert_message(
            self.severity,
            dag_id=ti.dag_id,
            run_id=ti.run_id,
            task_id=ti.task_id,
            outcome=outcome,
            error=failure_text(context.get("exception"), getattr(ti.task, "execution_timeout", None)),
            run_url=ui_url(ti.dag_id, ti.run_id, ti.task_id, ti.map_index),
            docs_url=served_docs_url(),
        )
        target = deliver(message, self.conn_id, context)
        log.info("%s alert sent to %s: %s", self.severity, target, message["title"])
        print(json.dumps({"alert": message["title"], "target": target}))


def served_docs_url() -> str | None:
    """The ``cdc_data_docs_url`` variable, read when an alert is sent; None when it is not set."""
    from airflow.sdk import Variable

    return Variable.get(DOCS_URL_VAR, default=None) or None


# -- the run's deadline -----------------------------------------------------------------------------------


def run_deadline_missed(context: Mapping[str, Any], conn_id: str = ALERTS_CONN, minutes: int = 0) -> str:
    """Deadline callback: a critical alert naming the run that has not finished in time.

    Airflow's executor calls it with the run as ``context["dag_run"]`` (the REST API's DAG run fields).
    """
    dag_run = context.get("dag_run") or {}
    dag_id, run_id = dag_run.get("dag_id", "?"), dag_run.get("dag_run_id", "?")
    tables = (dag_run.get("conf") or {}).get("tables")
    reason = (
        f"run {run_id} has not finished {minutes} minutes after it was queued "
        f"(queued at {dag_run.get('queued_at')}, state {dag_run.get('state')}); a task is hung or slow"
    )
    message = alert_message(
        CRITICAL,
        dag_id=dag_id,
        run_id=run_id,
        task_id="",
        outcome={"table": ", ".join(tables) if tables else "all tables", "reason": reason},
        run_url=ui_url(dag_id, run_id),
    )
    target = deliver(message, conn_id, context)
    log.info("deadline alert sent to %s: %s", target, message["title"])
    return target


def run_deadline(interval: timedelta = limits.RUN_DEADLINE, conn_id: str = ALERTS_CONN) -> Any:
    """The DAG's deadline: a critical alert when a run is not finished ``interval`` after it was queued.

    None when ``CDC_RUN_DEADLINE=off`` (see :data:`limits.DEADLINE_SWITCH`).
    """
    from airflow.sdk import DeadlineAlert, DeadlineReference, SyncCallback

    if os.environ.get(limits.DEADLINE_SWITCH, "on").lower() == "off":
        return None
    return DeadlineAlert(
        reference=DeadlineReference.DAGRUN_QUEUED_AT,
        interval=interval,
        callback=SyncCallback(
            run_deadline_missed, kwargs={"conn_id": conn_id, "minutes": int(interval.total_seconds() // 60)}
        ),
        name="run finished in time",
    )
