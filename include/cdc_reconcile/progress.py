"""Progress of a Spark job in its task log, so a person watching a long step sees it move.

A job's driver writes a line every ``interval`` seconds (``$CDC_PROGRESS_INTERVAL``, default 20)
while Spark jobs are active: how long the step has run, each active job's description (the run's
steps name them, for example ``compact_cdc public.orders: events``), its stages' finished and total
tasks, and the input records read so far by the application, from the driver's own status REST API
when the Spark UI is on. The first line names the Spark UI's address. Lines go to standard error,
which ``spark-submit`` hands to the Airflow task log.

On Spark Connect (no SparkContext in the process) the server streams each operation's progress to the
client: the line then names the step (:func:`current_step`), its stages' finished and total tasks, the
bytes they read, and the input records of the session's own jobs (the server's REST API, by the job tags
naming the session); the Spark UI is the server's.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
import urllib.request
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

DEFAULT_INTERVAL = 20.0
INTERVAL_SWITCH = "CDC_PROGRESS_INTERVAL"


def progress_interval() -> float:
    """Seconds between progress lines: ``$CDC_PROGRESS_INTERVAL``, else 20; 0 turns the lines off."""
    value = os.environ.get(INTERVAL_SWITCH, "").strip()
    try:
        return float(value) if value else DEFAULT_INTERVAL
    except ValueError as exc:
        raise ValueError(
            f"{INTERVAL_SWITCH}={value!r} is not a number of seconds (0 turns progress lines off)"
        ) from exc


_STEP: list[str] = []


@contextlib.contextmanager
def current_step(what: str) -> Iterator[None]:
    """Name the step a Spark Connect session is running, for its progress lines."""
    _STEP.append(what)
    try:
        yield
    finally:
        _STEP.pop()


class _ConnectProgress:
    """The latest progress of the session's running operation, as the Spark Connect server reports it."""

    def __init__(self) -> None:
        self.stages: dict[int, Any] = {}
        self.running = False
        self.lock = threading.Lock()

    def __call__(self, stages: Iterable[Any] | None, inflight_tasks: int, operation_id: str | None, done: bool) -> None:
        with self.lock:
            self.running = not done
            if done:
                self.stages = {}
            for stage in stages or ():
                self.stages[stage.stage_id] = stage

    def report(self) -> str | None:
        with self.lock:
            if not self.running:
                return None
            stages = sorted(self.stages.values(), key=lambda stage: stage.stage_id)
        step = _STEP[-1] if _STEP else "a Spark operation"
        done = ", ".join(f"stage {s.stage_id} {s.num_completed_tasks}/{s.num_tasks} tasks" for s in stages)
        read = sum(s.num_bytes_read for s in stages)
        return f"{step} ({done or 'waiting'}); {read:,} bytes read by its stages so far"


class SparkProgress:
    """A daemon thread that reports the session's active Spark jobs until the context ends."""

    def __init__(self, spark: Any, label: str, *, interval: float | None = None, out: TextIO | None = None) -> None:
        from .spark import is_connect

        self.spark = spark
        self.connect = _ConnectProgress() if is_connect(spark) else None
        self.context = None if self.connect else spark.sparkContext
        self.ui_url, self.app_id = self._ui(spark)
        self.label = label
        self.interval = progress_interval() if interval is None else interval
        self.out = out or sys.stderr
        self.began = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="spark-progress", daemon=True)

    def _ui(self, spark: Any) -> tuple[str | None, str | None]:
        """The Spark UI's address and the application's id: this driver's, or the Spark Connect server's."""
        if self.context is not None:
            return self.context.uiWebUrl, self.context.applicationId
        conf = spark.conf
        if (conf.get("spark.ui.enabled", "true") or "").lower() == "false":
            return None, None
        host = conf.get("spark.driver.host", None)
        url = f"http://{host}:{conf.get('spark.ui.port', '4040')}" if host else None
        return url, conf.get("spark.app.id", None)

    def __enter__(self) -> SparkProgress:
        where = " (the Spark Connect server's; this job's jobs are tagged with its session)" if self.connect else ""
        self._say(f"Spark UI: {self.ui_url}{where}" if self.ui_url else "Spark UI: off (spark.ui.enabled=false)")
        if self.connect is not None:
            self.spark.registerProgressHandler(self.connect)
        if self.interval > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.connect is not None:
            self.spark.removeProgressHandler(self.connect)
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _say(self, text: str) -> None:
        print(f"[progress] {self.label}: {text}", file=self.out, flush=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                line = self.report()
            except Exception as exc:  # a report must never fail the job it watches
                line = f"no progress report ({type(exc).__name__}: {exc})"
            if line:
                self._say(line)

    def report(self) -> str | None:
        """One line on the active jobs, or None when no job is running."""
        if self.connect is not None:
            line = self.connect.report()
            if line is None:
                return None
            records = self._records_read()
            read = "" if records is None else f"; {records:,} input records read by its stages so far"
            return f"{time.monotonic() - self.began:.0f}s; {line}{read}"
        tracker = self.context.statusTracker()
        jobs = []
        for job_id in sorted(tracker.getActiveJobsIds()):
            job = tracker.getJobInfo(job_id)
            if job is None:
                continue
            stages = []
            for stage_id in job.stageIds:
                stage = tracker.getStageInfo(stage_id)
                if stage is not None and stage.numActiveTasks + stage.numCompletedTasks > 0:
                    stages.append(f"stage {stage_id} {stage.numCompletedTasks}/{stage.numTasks} tasks")
            description = self._descriptions().get(job_id) or f"job {job_id}"
            jobs.append(f"{description} ({', '.join(stages) or 'waiting'})")
        if not jobs:
            return None
        elapsed = time.monotonic() - self.began
        records = self._records_read()
        read = "" if records is None else f"; {records:,} input records read by its stages so far"
        return f"{elapsed:.0f}s; " + "; ".join(jobs) + read

    def _rest(self, path: str) -> Any:
        if not self.ui_url or not self.app_id:
            return None
        with urllib.request.urlopen(f"{self.ui_url}/api/v1/applications/{self.app_id}/{path}", timeout=5) as r:
            return json.loads(r.read())

    def _descriptions(self) -> dict[int, str]:
        try:
            jobs = self._rest("jobs?status=running") or []
        except OSError:
            return {}
        return {job["jobId"]: job.get("description") or job.get("name", "") for job in jobs}

    def _records_read(self) -> int | None:
        """Input records of the application's stages; on a Spark Connect server, of this session's jobs only."""
        try:
            stages = self._rest("stages")
            mine = self._session_stages() if self.connect is not None else None
        except OSError:
            return None
        if stages is None:
            return None
        return sum(int(stage.get("inputRecords", 0)) for stage in stages if mine is None or stage["stageId"] in mine)

    def _session_stages(self) -> set[int]:
        """The stages of the jobs the server ran for this session (Spark Connect tags each with its id)."""
        session = self.spark.session_id
        jobs = self._rest("jobs") or []
        return {
            stage
            for job in jobs
            if any(session in tag for tag in job.get("jobTags", []))
            for stage in job.get("stageIds", [])
        }
