"""Fault scenarios on the embedded stack, each checked against counts the pipeline did not take.

Per scenario the runner starts from a known state (the previous run was clean, or a fresh stack),
injects one real fault (a killed Connect worker, Spark job or broker, a killed replication connection,
changes Debezium never saw, a re-run task), lets the stack recover, runs the reconciliation DAG
(``airflow dags test``) and compares what the suite found with an *independent* count: PostgreSQL read
with psycopg, Kafka read with a plain consumer, the lake table read with pyarrow. No pipeline code takes part
in the independent side, so a bug shared by the pipeline and its checker cannot hide.

Used by ``tests/integration/test_faults.py`` and by the ``cdc-faults`` command (``scripts/faults.sh``).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg

from cdc_reconcile import run_state, state_store
from cdc_reconcile.phase import Phase

from .loader import run_loader
from .stack import Stack, StackConfig, StackError
from .stack.airflow import airflow_environment, venv_bin
from .stack.config import REPO_ROOT
from .stack.connect import connector_config
from .stack.dag_runs import DAG_ID, DagRunResult, run_dag
from .stack.topics import read_topic, unwrap

TABLE = "public.customers"
COLUMNS = ("id", "name", "email", "balance")
CLASSES = ("missing", "extra", "stale", "redelivery", "snapshot_rerun")
GROUP = "reconcile_table"

# The runner's own stack, apart from a developer's (55432...) and the tests' (55442...).
RUNNER_ENV = {
    "CDC_PG_PORT": "55492",
    "CDC_KAFKA_PORT": "59152",
    "CDC_KAFKA_CONTROLLER_PORT": "59153",
    "CDC_CONNECT_PORT": "58143",
    "CDC_AIRFLOW_PORT": "58195",
}

Row = tuple[Any, ...]


# -- independent reads: PostgreSQL, Kafka, the lake ---------------------------------------------


@dataclass(frozen=True)
class RawRecord:
    """One Kafka record as a plain consumer sees it (JSON decoded, schema wrapper dropped)."""

    partition: int
    offset: int
    key: Any
    value: Any


def consume(bootstrap: str, topic: str, *, isolation: str = "read_committed", timeout: float = 120) -> list[RawRecord]:
    """Every record of ``topic`` to its current end, read by a plain consumer (``stack.topics``, no Spark)."""
    try:
        records = read_topic(bootstrap, topic, isolation=isolation, timeout=timeout)
    except (TimeoutError, RuntimeError) as exc:
        raise StackError(str(exc)) from exc
    return [RawRecord(r.partition, r.offset, r.key_payload, r.value) for r in records]


def topic_offsets(bootstrap: str, topic: str) -> dict[str, dict[int, int]]:
    """Per partition: the log end (``high``, uncommitted records included) and the last stable offset."""
    from confluent_kafka import Consumer, TopicPartition

    found: dict[str, dict[int, int]] = {}
    for isolation, name in (("read_uncommitted", "high"), ("read_committed", "stable")):
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"cdc-faults-wm-{uuid.uuid4()}",
                "isolation.level": isolation,
                "log_level": 0,
            }
        )
        try:
            metadata = consumer.list_topics(topic, timeout=15)
            partitions = metadata.topics[topic].partitions if topic in metadata.topics else {}
            found[name] = {
                p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15, cached=False)[1]
                for p in partitions
            }
        finally:
            consumer.close()
    return found


def decode_decimal(value: Any, scale: int) -> Decimal | None:
    """Debezium's ``precise`` NUMERIC: base64 two's complement, unscaled."""
    if value is None:
        return None
    if isinstance(value, int | float):
        return Decimal(str(value))
    unscaled = int.from_bytes(base64.b64decode(value), "big", signed=True)
    return Decimal(unscaled).scaleb(-scale)


def _image(after: Mapping[str, Any]) -> Row:
    return (after.get("name"), after.get("email"), decode_decimal(after.get("balance"), 2))


def fold(
    records: Iterable[RawRecord],
    start: Mapping[Any, Row],
    *,
    from_offsets: Mapping[int, int],
    to_offsets: Mapping[int, int],
) -> dict[Any, Row]:
    """The table Kafka describes: ``start`` with every change in ``[from, to)`` applied in offset order."""
    state = dict(start)
    for record in records:
        payload = unwrap(record.value)
        if (
            not payload
            or payload.get("op") not in ("c", "u", "d", "r")
            or record.offset < from_offsets.get(record.partition, 0)
            or record.offset >= to_offsets.get(record.partition, 0)
        ):
            continue
        key = record.key["id"]
        if payload["op"] == "d":
            state.pop(key, None)
        else:
            state[key] = _image(payload["after"])
    return state


def differences(expected: Mapping[Any, Row], actual: Mapping[Any, Row]) -> dict[str, int]:
    """Rows the lake would lack (missing), hold wrongly (extra) or hold with other values (stale)."""
    return {
        "missing": sum(1 for k in actual if k not in expected),
        "extra": sum(1 for k in expected if k not in actual),
        "stale": sum(1 for k, row in actual.items() if k in expected and expected[k] != row),
    }


def duplicates(records: Iterable[RawRecord], start: Mapping[int, int], end: Mapping[int, int]) -> dict[str, int]:
    """Duplicates by cause in ``[start, end)``, each record judged against every earlier record.

    Redelivery: same key, op, ``txId`` and ``lsn`` seen before. Snapshot re-run: an ``r`` event for a
    key whose first ``r`` came from another snapshot transaction (DESIGN.md section 5).
    """
    seen: set[tuple] = set()
    first_round: dict[str, Any] = {}
    counts = {"redelivery": 0, "snapshot_rerun": 0}
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        payload = unwrap(record.value)
        if (
            record.offset >= end.get(record.partition, 0)
            or not payload
            or payload.get("op") not in ("c", "u", "d", "r")
        ):
            continue
        in_range = record.offset >= start.get(record.partition, 0)
        key = json.dumps(record.key, sort_keys=True)
        identity = (key, payload["op"], payload["source"]["txId"], payload["source"]["lsn"])
        if identity in seen:
            counts["redelivery"] += in_range
            continue
        seen.add(identity)
        if payload["op"] == "r" and first_round.setdefault(key, payload["source"]["txId"]) != payload["source"]["txId"]:
            counts["snapshot_rerun"] += in_range
    return counts


def source_rows(dsn: str) -> dict[Any, Row]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return {r[0]: tuple(r[1:]) for r in conn.execute(f"SELECT {', '.join(COLUMNS)} FROM {TABLE}")}


def lake_rows(lake_root: Path, table: str = TABLE) -> dict[Any, Row] | None:
    """The live lake table, read with pyarrow from the manifest (no Spark, no pipeline code)."""
    import pyarrow.parquet as pq

    root = lake_root / table / "table"
    manifest = root / "_CURRENT.json"
    if not manifest.exists():
        return None
    folder = root / json.loads(manifest.read_text())["folder"]
    data = pq.read_table(folder, columns=list(COLUMNS)).to_pydict()
    rows: dict[Any, Row] = {}
    for i, key in enumerate(data["id"]):
        balance = data["balance"][i]
        rows[key] = (
            data["name"][i],
            data["email"][i],
            None if balance is None else Decimal(balance).quantize(Decimal("0.01")),
        )
    return rows


def event_positions(events_root: Path) -> list[tuple[int, int]]:
    """(partition, offset) of every row in every published ``range=`` folder of an events dataset."""
    import pyarrow.parquet as pq

    positions: list[tuple[int, int]] = []
    for folder in sorted(events_root.glob("range=*")):
        data = pq.read_table(folder, columns=["partition", "offset"]).to_pydict()
        positions.extend(zip(data["partition"], data["offset"], strict=True))
    return positions


def parquet_digest(path: Path) -> str:
    """sha256 of a Parquet file's bytes up to the footer, and of its footer with encoding lists sorted.

    parquet-mr keeps a column chunk's encodings in a HashSet of enums, iterated in the order of
    per-JVM identity hashes: two Spark jobs writing byte-identical data pages write footers that
    differ only in that order (fault scenario 7 found it). Everything else is compared as written.
    """
    import pyarrow.parquet as pq

    data = path.read_bytes()
    footer_length = int.from_bytes(data[-8:-4], "little")
    metadata = pq.ParquetFile(path).metadata
    footer = metadata.to_dict()
    for row_group in footer["row_groups"]:
        for column in row_group["columns"]:
            column["encodings"] = sorted(column["encodings"])
    digest = hashlib.sha256(data[: len(data) - 8 - footer_length])
    digest.update(json.dumps(footer, sort_keys=True, default=str).encode())
    digest.update(repr(sorted((metadata.metadata or {}).items())).encode())
    digest.update("".join(str(metadata.schema.column(i)) for i in range(metadata.num_columns)).encode())
    return digest.hexdigest()


def tree_hashes(base: Path) -> dict[str, str]:
    """A digest of every file under ``base`` (relative path -> digest): Parquet by :func:`parquet_digest`."""
    return {
        str(p.relative_to(base)): parquet_digest(p)
        if p.suffix == ".parquet"
        else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(base.rglob("*"))
        if p.is_file()
    }


# -- results ------------------------------------------------------------------------------------


@dataclass
class ScenarioResult:
    """One scenario's record: what was injected, what the suite found, what an independent count says."""

    scenario: str
    title: str
    repetition: int = 1
    injected: dict[str, Any] = field(default_factory=dict)
    detected: dict[str, int] = field(default_factory=dict)
    independent: dict[str, int] = field(default_factory=dict)
    repaired: dict[str, int] = field(default_factory=dict)
    repaired_ok: bool | None = None
    rows_lost: int | None = None
    lake_mismatches: int | None = None
    false_alarms: int | None = None
    missed: int | None = None
    second_run_clean: bool | None = None
    checks: dict[str, bool] = field(default_factory=dict)
    run_ids: list[str] = field(default_factory=list)
    run_states: list[str] = field(default_factory=list)
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def passed(self) -> bool:
        """Detected equals the independent count, repaired, clean afterwards, nothing lost, no false alarm."""
        return (
            self.error is None
            and all(self.checks.values())
            and self.detected == self.independent
            and self.repaired_ok is not False
            and self.second_run_clean is not False
            and self.rows_lost == 0
            and self.lake_mismatches == 0
            and self.false_alarms == 0
        )


def compare(detected: Mapping[str, int], independent: Mapping[str, int]) -> tuple[int, int]:
    """(false alarms, misses): reported beyond the independent count, and not reported though there."""
    false_alarms = sum(max(0, detected.get(c, 0) - independent.get(c, 0)) for c in CLASSES)
    missed = sum(max(0, independent.get(c, 0) - detected.get(c, 0)) for c in CLASSES)
    return false_alarms, missed


# -- the runner ---------------------------------------------------------------------------------


class FaultRunner:
    """One embedded stack, scenarios run on it one after the other; always stopped by :meth:`stop`."""

    def __init__(self, config: StackConfig | None = None, *, log: Callable[[str], None] = print) -> None:
        self.config = config or StackConfig()
        self.stack = Stack(self.config, airflow=False)
        self.log = log
        self.registered = False
        self.last_clean_run: str | None = None

    # lifecycle

    def start(self) -> None:
        """A fresh stack from empty data, connector not yet registered (a scenario may kill its snapshot)."""
        self.log(f"stack: fresh start under {self.config.run_dir}")
        self.stack.down(destroy=True)
        self.stack.up(register=False)
        self.registered = False
        self.last_clean_run = None

    def stop(self) -> None:
        self.stack.down()
        left = self.stack.leftover_pids()
        if left:
            raise StackError(f"fault runner: stack processes survived down: {left}; stop them by pid")

    def __enter__(self) -> FaultRunner:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # helpers

    @property
    def topic(self) -> str:
        return self.config.topic_for(TABLE)

    def pg(self) -> psycopg.Connection:
        return psycopg.connect(self.config.pg_dsn, autocommit=True)

    def wait(self, check: Callable[[], Any], *, timeout: float, what: str, interval: float = 0.5) -> Any:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = check()
            if last:
                return last
            time.sleep(interval)
        raise StackError(f"fault runner: {what}: not reached within {timeout:.0f}s (last: {last!r})")

    def dag(self, label: str, **params: Any) -> DagRunResult:
        self.log(f"  DAG run {label} {params or ''}")
        result = run_dag(self.config, {"tables": [TABLE], **params}, label=f"faults-{label}")
        self.log(f"  DAG run {result.run_id}: {result.state} in {result.seconds:.0f}s")
        return result

    def outcome(self, run_id: str, phase: Phase) -> dict[str, Any] | None:
        with state_store.connect(self.config.pg_dsn) as conn:
            return run_state.latest_suite_outcome(conn, run_id, TABLE, phase)

    def range_of(self, run_id: str) -> tuple[dict[int, int], dict[int, int]]:
        with state_store.connect(self.config.pg_dsn) as conn:
            rng = state_store.get_range(conn, run_id, TABLE)
        if rng is None or rng.end is None:
            raise StackError(f"fault runner: run {run_id} has no sealed offset range for {TABLE}; see its DAG log")
        return dict(rng.start), dict(rng.end)

    def connector_ready(self, *, exactly_once: bool = True) -> None:
        self.stack.register_connector(exactly_once="required" if exactly_once else "requested")
        self.registered = True

    def wait_streaming(self) -> None:
        """Debezium's replication connection is up (it streams, the snapshot is over)."""
        with self.pg() as conn:
            self.wait(
                lambda: conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'START_REPLICATION SLOT%%'"
                ).fetchone()[0],
                timeout=180,
                what="Debezium's replication connection established",
            )

    def ensure_baseline(self) -> ScenarioResult | None:
        """The known state: connector running, some rows, and one clean run whose lake equals the source."""
        if self.last_clean_run is not None:
            return None
        began = time.monotonic()
        if not self.registered:
            with self.pg() as conn:
                conn.execute(
                    f"INSERT INTO {TABLE} (name, email, balance, attrs) SELECT 'base ' || g, 'b' || g || "
                    "'@example.com', g / 100.0, jsonb_build_object('g', g) FROM generate_series(1, 2000) g"
                )
            self.connector_ready()
        self.wait_streaming()
        result = ScenarioResult("baseline", "Clean run, nothing injected")
        result.injected = {"nothing": 0}
        self._measure(result, independent_of=lambda run_id: self._independent(run_id, {}, {}), full_rescan=True)
        result.seconds = round(time.monotonic() - began, 1)
        return result

    def _independent(self, run_id: str, start_state: Mapping[Any, Row], start_offsets: Mapping[int, int]) -> dict:
        """Counts by class from Kafka and PostgreSQL alone, for the run's sealed range."""
        start, end = self.range_of(run_id)
        records = consume(self.config.bootstrap_servers, self.topic)
        expected_lake = fold(records, start_state, from_offsets=start_offsets, to_offsets=end)
        return {**differences(expected_lake, source_rows(self.config.pg_dsn)), **duplicates(records, start, end)}

    def _measure(
        self,
        result: ScenarioResult,
        *,
        independent_of: Callable[[str], dict[str, int]],
        during: Callable[[threading.Thread], None] | None = None,
        **params: Any,
    ) -> DagRunResult:
        """Run the DAG (detect, repair), count independently, check the lake, run again (must be clean).

        ``during`` runs beside the first DAG run (which it gets as a thread) to inject a fault into it.
        Returns the first run.
        """
        first = self._dag_during(f"{result.scenario}-1", during, **params)
        result.run_ids.append(first.run_id)
        result.run_states.append(first.state)
        before = self.outcome(first.run_id, Phase.BEFORE_REPAIR)
        if before is None:
            raise StackError(f"run {first.run_id}: no suite outcome recorded; see {first.log}")
        result.detected = {c: int(before["counts"].get(c, 0)) for c in CLASSES}
        result.independent = {c: int(v) for c, v in independent_of(first.run_id).items()}
        result.false_alarms, result.missed = compare(result.detected, result.independent)
        with state_store.connect(self.config.pg_dsn) as conn:
            result.repaired = run_state.audit_counts(conn, first.run_id, TABLE)
        after = self.outcome(first.run_id, Phase.AFTER_REPAIR)
        if before["success"]:
            result.repaired_ok = first.state == "success" and not result.repaired
        else:
            wanted = {c: n for c, n in result.detected.items() if n}
            result.repaired_ok = (
                first.state == "success" and after is not None and after["success"] and result.repaired == wanted
            )
        self._check_lake(result)
        second = self.dag(f"{result.scenario}-2")
        result.run_ids.append(second.run_id)
        result.run_states.append(second.state)
        again = self.outcome(second.run_id, Phase.BEFORE_REPAIR) or {}
        result.second_run_clean = (
            second.state == "success"
            and bool(again.get("success"))
            and not any(again.get("counts", {}).get(c, 0) for c in CLASSES)
        )
        if result.second_run_clean:
            self.last_clean_run = second.run_id
        self._check_lake(result)
        return first

    def _dag_during(self, label: str, during: Callable[[threading.Thread], None] | None, **params: Any) -> DagRunResult:
        if during is None:
            return self.dag(label, **params)
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["run"] = self.dag(label, **params)
            except BaseException as exc:  # re-raised below, in the runner's thread
                outcome["error"] = exc

        thread = threading.Thread(target=run, name=f"dag-{label}", daemon=True)
        thread.start()
        try:
            during(thread)
        finally:
            thread.join()
        if "error" in outcome:
            raise outcome["error"]
        return outcome["run"]

    def _check_lake(self, result: ScenarioResult) -> None:
        source = source_rows(self.config.pg_dsn)
        lake = lake_rows(self.config.lake_root) or {}
        lost = sum(1 for k in source if k not in lake)
        mismatched = sum(1 for k in lake if k not in source or lake[k] != source[k])
        result.rows_lost = max(result.rows_lost or 0, lost)
        result.lake_mismatches = max(result.lake_mismatches or 0, mismatched)

    def _begin(self) -> tuple[dict[Any, Row], dict[int, int]]:
        """The known state a scenario starts from: the source's rows and the topic's committed end."""
        records = consume(self.config.bootstrap_servers, self.topic)
        ends: dict[int, int] = {}
        for r in records:
            ends[r.partition] = max(ends.get(r.partition, 0), r.offset + 1)
        return source_rows(self.config.pg_dsn), ends

    @contextlib.contextmanager
    def _loading(self, **kwargs: Any) -> Iterator[None]:
        """The loader writes ``customers`` (``run_loader`` arguments) for as long as the block runs."""
        stop = threading.Event()

        def load() -> None:
            run_loader(self.config.pg_dsn, tables=("customers",), stop=stop, **kwargs)

        thread = threading.Thread(target=load, name="fault-loader", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=60)

    def _max_id(self) -> int:
        with self.pg() as conn:
            return conn.execute(f"SELECT coalesce(max(id), 0) FROM {TABLE}").fetchone()[0]

    def _progress(self, rows: int, timeout: float = 120) -> None:
        before = self._max_id()
        self.wait(lambda: self._max_id() >= before + rows, timeout=timeout, what=f"loader progress of {rows} rows")

    def _spark_job_pids(self, job: str) -> list[int]:
        """This stack's processes of job ``<job>``: the spark-submit JVM and its Python driver.

        Matched on the job's path and this stack's lake root in the command line, so a Spark job of
        another stack on the same machine is never touched.
        """
        script, lake = f"cdc_reconcile/jobs/{job}.py".encode(), str(self.config.lake_root).encode()
        found = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(a.endswith(script) for a in argv) and lake in argv:
                found.append(int(proc.name))
        return found

    def _stages(self) -> list[Path]:
        """Half-written dataset folders of the table: what a killed writer leaves under ``_staging``."""
        base = self.config.lake_root / TABLE
        return sorted(p for p in base.glob("*/_staging/*") if ".replaced-" not in p.name)

    def _kill_spark_job_mid_write(self, job: str, dag: threading.Thread) -> dict[str, Any]:
        """``kill -9`` ``job`` once it has a dataset folder half-written; returns what was killed where."""

        def writing() -> tuple[list[int], list[Path]] | None:
            if not dag.is_alive():
                raise StackError(f"the DAG run ended before {job} was caught writing")
            pids = self._spark_job_pids(job)
            stages = [p for p in self._stages() if any(p.rglob("*"))] if pids else []
            return (pids, stages) if stages else None

        pids, stages = self.wait(writing, timeout=1200, what=f"{job} writing a dataset", interval=0.05)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.wait(lambda: not set(pids) & set(self._spark_job_pids(job)), timeout=30, what=f"{job} gone")
        written = [str(p.relative_to(self.config.lake_root)) for p in stages]
        self.log(f"  killed {job} (pids {pids}) while writing {written}")
        return {"pids": pids, "writing": written}

    def _restart_broker(self, until: Callable[[], bool] | None = None, *, longest: float = 60) -> float:
        """``kill -9`` the Kafka broker, start it again once ``until()`` holds (or ``longest`` s have passed).

        Returns the seconds it was down.
        """
        began = time.monotonic()
        self.stack.kafka.kill()
        if until is not None:
            with contextlib.suppress(StackError):
                self.wait(until, timeout=longest, what="the moment to start the broker again", interval=0.5)
        self.stack.kafka.start(timeout=180)
        down = time.monotonic() - began
        self.log(f"  broker killed and back after {down:.0f}s")
        return down

    def _redeliver(self, count: int) -> int:
        """Write the topic's last ``count`` committed change events again (same key and value): a redelivery.

        Tombstones are left out: they carry no change, so no count would include them.
        """
        from confluent_kafka import Producer

        changes = [r for r in read_topic(self.config.bootstrap_servers, self.topic) if r.payload]
        records = changes[-count:]
        producer = Producer({"bootstrap.servers": self.config.bootstrap_servers, "acks": "all", "log_level": 0})
        for record in records:
            producer.produce(
                self.topic,
                key=None if record.key is None else json.dumps(record.key).encode(),
                value=None if record.value is None else json.dumps(record.value).encode(),
                partition=record.partition,
            )
        if producer.flush(60):
            raise StackError(f"redelivering {count} records to {self.topic}: not all acknowledged within 60s")
        return len(records)

    def _events_match_kafka(self, run_id: str) -> dict[str, int]:
        """The run's bronze events against Kafka: each committed record of the range exactly once.

        Read with pyarrow from the ``events`` partitions (any attempt's leftovers included), so a
        second copy appended by a retried task, or a record lost by it, shows up.
        """
        start, end = self.range_of(run_id)
        positions = event_positions(self.config.lake_root / TABLE / "events")
        in_range = [(p, o) for p, o in positions if start.get(p, 0) <= o < end.get(p, 0)]
        expected = {
            (r.partition, r.offset)
            for r in consume(self.config.bootstrap_servers, self.topic)
            if start.get(r.partition, 0) <= r.offset < end.get(r.partition, 0)
        }
        copies = Counter(in_range)
        return {
            "kafka_records": len(expected),
            "events_rows": len(in_range),
            "extra_copies": sum(n - 1 for n in copies.values() if n > 1) + sum(1 for k in copies if k not in expected),
            "absent": sum(1 for k in expected if k not in copies),
        }

    # scenarios

    def replication_kill(self) -> ScenarioResult:
        """1: ``pg_terminate_backend`` on Debezium's ``START_REPLICATION`` connection, 3 times under load, EOS on."""
        result = ScenarioResult("replication_kill", "1. Replication connection killed 3x under load, EOS on")
        self.ensure_baseline()
        start_state, start_offsets = self._begin()
        kills = 0
        with self._loading(rate=60, seed=11):
            with self.pg() as conn:
                for _ in range(6):
                    if kills >= 3:
                        break
                    self.wait_streaming()
                    self._progress(150)
                    kills += conn.execute(
                        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
                        "WHERE pid <> pg_backend_pid() AND query LIKE 'START_REPLICATION SLOT%%'"
                    ).fetchone()[0]
            self.wait_streaming()
            self._progress(150)
        result.injected = {"replication_connections_killed": kills}
        self._measure(result, independent_of=lambda run_id: self._independent(run_id, start_state, start_offsets))
        return result

    def snapshot_kill(self, rows: int = 30_000) -> ScenarioResult:
        """2: the Connect worker ``kill -9``ed during the initial snapshot: the snapshot runs again."""
        result = ScenarioResult("snapshot_kill", "2. Worker kill -9 during the initial snapshot")
        if self.registered:
            raise StackError("snapshot_kill needs a fresh stack (no connector yet); run it first after start()")
        with self.pg() as conn:
            conn.execute(
                f"INSERT INTO {TABLE} (name, email, balance, attrs) SELECT 'customer ' || g, 'c' || g || "
                "'@example.com', (g %% 100000) / 100.0, jsonb_build_object('g', g, 'city', 'Zürich') "
                "FROM generate_series(1, %s) g",
                (rows,),
            )
        self.stack.connect.put_connector(self.config.connector_name, connector_config(self.config))
        self.registered = True

        def under_way() -> bool:
            # Under EOS the snapshot's records only count once their Kafka transaction commits: kill
            # after some have, or the whole killed round is aborted and nothing is duplicated.
            try:
                stable = topic_offsets(self.config.bootstrap_servers, self.topic)["stable"]
            except Exception:  # the topic does not exist until the first record
                return False
            return sum(stable.values()) >= min(2000, rows // 10)

        self.wait(under_way, timeout=300, what="the initial snapshot under way", interval=0.05)
        self.stack.connect.kill()
        offsets = topic_offsets(self.config.bootstrap_servers, self.topic)
        emitted, committed = sum(offsets["high"].values()), sum(offsets["stable"].values())
        self.stack.connect.start()
        self.stack.connect.wait_connector_running(self.config.connector_name, timeout=180)

        def rounds() -> Counter | None:
            found = Counter(
                unwrap(r.value)["source"]["txId"]
                for r in consume(self.config.bootstrap_servers, self.topic)
                if unwrap(r.value) and unwrap(r.value).get("op") == "r"
            )
            return found if found and max(found.values()) >= rows else None

        found = self.wait(rounds, timeout=900, what=f"a complete snapshot of {rows} rows", interval=2)
        first, *later = sorted(found)
        result.injected = {
            "worker_kills": 1,
            "records_before_kill": emitted,
            "committed_before_kill": committed,
            "snapshot_rounds": len(found),
            "committed_reads_of_killed_round": found[first] if later else 0,
        }
        if not later:
            result.notes.append("no committed record of the killed round (all aborted, or the snapshot was done)")
        self.wait_streaming()
        self._measure(result, independent_of=lambda run_id: self._independent(run_id, {}, {}), full_rescan=True)
        return result

    def redelivery_eos_off(self) -> ScenarioResult:
        """3: worker ``kill -9`` while streaming with ``exactly.once.source.support=disabled``: redeliveries."""
        result = ScenarioResult("redelivery_eos_off", "3. Worker kill -9 while streaming, EOS off")
        self.ensure_baseline()
        connect, name = self.stack.connect, self.config.connector_name
        connect.stop()
        connect.start(exactly_once=False)
        connect.put_connector(name, connector_config(self.config, exactly_once="requested"))
        connect.wait_connector_running(name, timeout=180)
        self.wait_streaming()
        start_state, start_offsets = self._begin()
        with self._loading(rate=150, seed=13):
            self._progress(300)
            connect.kill()
            connect.start(exactly_once=False)
            connect.wait_connector_running(name, timeout=180)
            self.wait_streaming()
            self._progress(150)
        # back to exactly-once for the next scenario (a graceful restart adds no duplicates)
        self._settle()
        connect.stop()
        connect.start(exactly_once=True)
        connect.put_connector(name, connector_config(self.config, exactly_once="required"))
        connect.wait_connector_running(name, timeout=180)
        self.wait_streaming()
        result.injected = {"worker_kills": 1, "exactly_once": "disabled"}
        self._measure(result, independent_of=lambda run_id: self._independent(run_id, start_state, start_offsets))
        return result

    def _settle(self, quiet: float = 5.0, timeout: float = 180) -> None:
        """Wait until the topic stops growing for ``quiet`` seconds (Debezium has sent what it had)."""
        last: dict[str, Any] = {"high": None, "since": time.monotonic()}

        def quiet_now() -> bool:
            high = topic_offsets(self.config.bootstrap_servers, self.topic)["high"]
            if high != last["high"]:
                last.update(high=high, since=time.monotonic())
            return time.monotonic() - last["since"] >= quiet

        self.wait(quiet_now, timeout=timeout, what=f"{self.topic} quiet for {quiet:.0f}s", interval=1)

    def aborted_eos_on(self) -> ScenarioResult:
        """4: worker ``kill -9`` while a transaction is open, EOS on: aborted records stay in the log."""
        result = ScenarioResult("aborted_eos_on", "4. Worker kill -9 mid-transaction, EOS on")
        self.ensure_baseline()
        connect, name = self.stack.connect, self.config.connector_name
        start_state, start_offsets = self._begin()
        open_records = 0
        with self._loading(rate=800, batch=400, seed=17):
            self._progress(1000)

            def in_flight() -> int:
                offsets = topic_offsets(self.config.bootstrap_servers, self.topic)
                return sum(offsets["high"][p] - offsets["stable"].get(p, 0) for p in offsets["high"]) > 0

            try:
                self.wait(in_flight, timeout=60, what="an open Kafka transaction", interval=0.02)
            except StackError:
                result.notes.append("no open transaction seen within 60 s; killed anyway")
            connect.kill()
            offsets = topic_offsets(self.config.bootstrap_servers, self.topic)
            open_records = sum(offsets["high"][p] - offsets["stable"].get(p, 0) for p in offsets["high"])
            connect.start(exactly_once=True)
            connect.wait_connector_running(name, timeout=180)
            self.wait_streaming()
            self._progress(500)
        self._settle()
        committed = [r for r in consume(self.config.bootstrap_servers, self.topic) if _in(r, start_offsets)]
        everything = [
            r
            for r in consume(self.config.bootstrap_servers, self.topic, isolation="read_uncommitted")
            if _in(r, start_offsets)
        ]
        result.injected = {
            "worker_kills": 1,
            "uncommitted_at_kill": open_records,
            "aborted_records_in_log": len(everything) - len(committed),
        }
        self._measure(result, independent_of=lambda run_id: self._independent(run_id, start_state, start_offsets))
        return result

    def lost_events(self) -> ScenarioResult:
        """5: changes made while the table is out of the publication never reach Kafka."""
        result = ScenarioResult("lost_events", "5. Lost events (table out of the publication)")
        self.ensure_baseline()
        start_state, start_offsets = self._begin()
        publication = self.config.publication_name
        with self.pg() as conn:
            keys = [r[0] for r in conn.execute(f"SELECT id FROM {TABLE} ORDER BY id LIMIT 5").fetchall()]
            stale, extra = keys[:3], keys[3:]
            conn.execute(f"ALTER PUBLICATION {publication} DROP TABLE {TABLE}")
            try:
                with conn.transaction():
                    conn.execute(
                        f"INSERT INTO {TABLE} (name, email, balance) "
                        "SELECT 'lost ' || g, NULL, -g - 0.25 FROM generate_series(1, 4) g"
                    )
                    conn.execute(
                        f"UPDATE {TABLE} SET name = name || ' (changed unseen)', balance = balance + 1000 "
                        "WHERE id = ANY(%s)",
                        (stale,),
                    )
                    conn.execute(f"DELETE FROM {TABLE} WHERE id = ANY(%s)", (extra,))
            finally:
                conn.execute(f"ALTER PUBLICATION {publication} ADD TABLE {TABLE}")
        result.injected = {"lost_inserts": 4, "lost_updates": len(stale), "lost_deletes": len(extra)}
        self._measure(result, independent_of=lambda run_id: self._independent(run_id, start_state, start_offsets))
        return result

    def task_rerun(self) -> ScenarioResult:
        """7: ``compact_cdc`` run again for a finished DAG run: the lake must not change (no double append)."""
        result = ScenarioResult("task_rerun", "7. compact_cdc re-run for the same DAG run")
        began = time.monotonic()
        self.ensure_baseline()
        run_id = self.last_clean_run
        if run_id is None:
            raise StackError("task_rerun needs a finished clean DAG run; the baseline run was not clean")
        base = self.config.lake_root / TABLE
        before = tree_hashes(base)
        env = {**os.environ, **airflow_environment(self.config)}
        task_id = f"{GROUP}.compact_cdc"
        log = self.config.logs_dir / f"faults-task-rerun-{time.strftime('%Y%m%dT%H%M%S')}.log"
        with log.open("w") as out:
            done = subprocess.run(
                [str(venv_bin() / "airflow"), "tasks", "test", DAG_ID, task_id, run_id, "--map-index", "0"],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=1800,
                check=False,
                cwd=str(self.config.run_dir),
            )
        after = tree_hashes(base)
        changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
        result.run_ids = [run_id]
        result.run_states = [f"tasks test exit {done.returncode}"]
        result.injected = {"task_reruns": 1, "task": task_id}
        result.detected = {"changed_files": len(changed)}
        result.independent = {"changed_files": 0}
        result.notes.append(f"{len(before)} files compared (Parquet by data pages and footer); log {log}")
        if changed:
            result.notes.append(f"changed: {changed[:10]}")
        if done.returncode != 0:
            result.error = f"airflow tasks test exited {done.returncode}; see {log}"
        result.false_alarms, result.missed = 0, 0
        result.repaired_ok = None
        self._check_lake(result)
        result.seconds = round(time.monotonic() - began, 1)
        return result

    def spark_kill(self) -> ScenarioResult:
        """6: the compaction's Spark job ``kill -9``-ed while it writes a dataset; Airflow retries the task.

        The range holds redelivered records too, so the retried compaction must still find each once.
        """
        result = ScenarioResult("spark_kill", "6. Spark job kill -9 mid-write, task retried")
        self.ensure_baseline()
        start_state, start_offsets = self._begin()
        with self._loading(rate=150, seed=19):
            self._progress(600)
        self._settle()
        redelivered = self._redeliver(40)
        killed: dict[str, Any] = {}
        first = self._measure(
            result,
            independent_of=lambda run_id: self._independent(run_id, start_state, start_offsets),
            during=lambda dag: killed.update(self._kill_spark_job_mid_write("compact_cdc", dag)),
        )
        tries = first.tries.get(f"{GROUP}.compact_cdc[0]", 0)
        events = self._events_match_kafka(first.run_id)
        leftovers = self._stages()
        result.injected = {"spark_jobs_killed": 1, "redelivered_records": redelivered}
        result.checks = {
            "task retried": tries >= 2,
            "each record of the range once in events": events["extra_copies"] == 0 and events["absent"] == 0,
            "no half-written folder left": not leftovers,
        }
        result.notes.append(
            f"killed compact_cdc while writing {killed.get('writing')}; tries {tries}; events {events}; "
            f"staging leftovers {[str(p) for p in leftovers]}"
        )
        return result

    def broker_restart(self) -> ScenarioResult:
        """8: the Kafka broker ``kill -9``-ed and started again, while Debezium streams and during compaction."""
        result = ScenarioResult("broker_restart", "8. Kafka broker restarted while streaming and mid-run")
        self.ensure_baseline()
        connect, name = self.stack.connect, self.config.connector_name
        start_state, start_offsets = self._begin()
        downtime: list[float] = []
        with self._loading(rate=150, seed=23):
            self._progress(300)
            downtime.append(self._restart_broker())
            connect.wait_connector_running(name, timeout=300)
            self._progress(300, timeout=300)
        self._settle(timeout=300)

        def restart_during_compaction(dag: threading.Thread) -> None:
            def compacting() -> bool:
                if not dag.is_alive():
                    raise StackError("the DAG run ended before compact_cdc started")
                return bool(self._spark_job_pids("compact_cdc"))

            self.wait(compacting, timeout=1200, what="compact_cdc started", interval=0.2)
            # down while the job connects and reads: until it gives up (then Airflow retries it) or 60 s
            downtime.append(self._restart_broker(until=lambda: not self._spark_job_pids("compact_cdc")))

        first = self._measure(
            result,
            independent_of=lambda run_id: self._independent(run_id, start_state, start_offsets),
            during=restart_during_compaction,
        )
        events = self._events_match_kafka(first.run_id)
        status = connect.connector_status(name) or {}
        tasks = [t.get("state") for t in status.get("tasks", [])]
        result.injected = {"broker_restarts": len(downtime)}
        result.checks = {
            "each record of the range once in events": events["extra_copies"] == 0 and events["absent"] == 0,
            "connector still running": status.get("connector", {}).get("state") == "RUNNING" and tasks == ["RUNNING"],
        }
        result.notes.append(
            f"broker down {[round(d) for d in downtime]} s; compact_cdc tries "
            f"{first.tries.get(f'{GROUP}.compact_cdc[0]')}; events {events}; connector tasks {tasks}"
        )
        return result


def _in(record: RawRecord, start: Mapping[int, int]) -> bool:
    return record.offset >= start.get(record.partition, 0)


# Run order of ``all``: the initial-snapshot kill needs the fresh stack; the task re-run needs a clean run.
SCENARIOS: dict[str, str] = {
    "snapshot_kill": "2",
    "lost_events": "5",
    "redelivery_eos_off": "3",
    "task_rerun": "7",
    "spark_kill": "6",
    "broker_restart": "8",
    "replication_kill": "1",
    "aborted_eos_on": "4",
}


def run_scenarios(
    runner: FaultRunner,
    names: Iterable[str],
    repetition: int = 1,
    on_result: Callable[[ScenarioResult], None] | None = None,
) -> list[ScenarioResult]:
    """Run ``names`` in order on ``runner``'s stack; a failing scenario is recorded, the rest still run.

    ``on_result`` sees each record as soon as it exists, so an interrupted run keeps what it measured.
    """
    results: list[ScenarioResult] = []
    for name in names:
        began = time.monotonic()
        runner.log(f"scenario {name} (repetition {repetition})")
        try:
            if name != "snapshot_kill" and runner.last_clean_run is None:
                baseline = runner.ensure_baseline()
                if baseline is not None:
                    baseline.repetition = repetition
                    results.append(baseline)
                    if on_result:
                        on_result(baseline)
            result = getattr(runner, name)()
        except Exception as exc:  # one broken scenario must not hide the others' figures
            result = ScenarioResult(name, name, error=f"{type(exc).__name__}: {exc}")
        result.repetition = repetition
        result.seconds = round(time.monotonic() - began, 1)
        runner.log(f"scenario {name}: {'PASS' if result.passed else 'FAIL'} {json.dumps(asdict(result), default=str)}")
        results.append(result)
        if on_result:
            on_result(result)
    return results


def _figures(values: Mapping[str, Any]) -> str:
    shown = {k: v for k, v in values.items() if v}
    return ", ".join(f"{k} {v}" for k, v in shown.items()) or "none"


def _cells(r: ScenarioResult) -> dict[str, str]:
    """One result's figures as the matrix shows them; a ❌ marks what fails the scenario."""
    repaired = _figures(r.repaired) if r.repaired_ok is not None else "n/a"
    if r.repaired_ok is False:
        repaired += " ❌"
    return {
        "injected": _figures(r.injected),
        "detected": _figures(r.detected) + ("" if r.detected == r.independent else " ❌"),
        "independent": _figures(r.independent),
        "repaired": repaired,
        "lost": "-" if r.rows_lost is None else str(r.rows_lost),
        "false_alarms": "-" if r.false_alarms is None else str(r.false_alarms),
        "clean": {True: "yes", False: "no ❌", None: "n/a"}[r.second_run_clean],
        "problems": (f" error: {r.error}" if r.error else "")
        + "".join(f" failed check: {name} ❌" for name, ok in r.checks.items() if not ok),
    }


def markdown(results: list[ScenarioResult]) -> str:
    """The fault matrix: one line per scenario and repetition."""
    lines = [
        "| scenario | run | injected | detected (suite) | independent count | repaired (audit) | rows lost "
        "| false alarms | second run clean | s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        c = _cells(r)
        lines.append(
            f"| {r.title} | {r.repetition} | {c['injected']} | {c['detected']} | {c['independent']} | "
            f"{c['repaired']} | {c['lost']} | {c['false_alarms']} | {c['clean']} | {r.seconds:.0f} |{c['problems']}"
        )
    return "\n".join(lines) + "\n"


def matrix(results: list[ScenarioResult]) -> str:
    """One line per scenario over its repetitions: a figure shared by all once, else each one, ``a / b / c``."""
    order = {name: int(number) for name, number in SCENARIOS.items()}
    by_scenario: dict[str, list[ScenarioResult]] = {}
    for r in sorted(results, key=lambda r: (order.get(r.scenario, 0), r.repetition)):
        by_scenario.setdefault(r.scenario, []).append(r)
    lines = [
        "| scenario | passed | injected | detected (suite) | independent count | repaired (audit) | rows lost "
        "| false alarms | second run clean | s (median) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for runs in by_scenario.values():
        cells = [_cells(r) for r in runs]

        def joined(column: str, cells: list[dict[str, str]] = cells) -> str:
            values = [c[column] for c in cells]
            return values[0] if len(set(values)) == 1 else " / ".join(values)

        seconds = sorted(r.seconds for r in runs)
        problems = "".join(c["problems"] for c in cells)
        lines.append(
            f"| {runs[0].title} | {sum(r.passed for r in runs)} of {len(runs)} | {joined('injected')} | "
            f"{joined('detected')} | {joined('independent')} | {joined('repaired')} | {joined('lost')} | "
            f"{joined('false_alarms')} | {joined('clean')} | {seconds[len(seconds) // 2]:.0f} |{problems}"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cdc-faults", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run scenarios on the runner's own fresh stack, then stop it")
    run.add_argument("--scenario", default="all", help=f"all, or a comma-separated subset of {', '.join(SCENARIOS)}")
    run.add_argument("--repeat", type=int, default=1, help="repetitions, each on a fresh stack")
    run.add_argument("--out", type=Path, default=Path("test-artifacts/faults"), help="folder for JSON and Markdown")
    run.add_argument(
        "--parallel",
        type=int,
        default=1,
        help="repetitions run at once, each on its own stack: ports shifted by 1000 per repetition, "
        "run folder .run/faults-<n>, log <out>/<stamp>-rep<n>.log",
    )
    run.add_argument("--first-repetition", type=int, default=1, help=argparse.SUPPRESS)
    run.add_argument("--stamp", default=None, help=argparse.SUPPRESS)
    sub.add_parser("list", help="the scenarios")
    report = sub.add_parser("report", help="the Markdown matrix from a run's JSON file or its printed log")
    report.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args(argv)
    if args.command == "report":
        loaded = [r for f in args.files for r in load_results(f)]
        print(matrix(loaded) + "\n" + markdown(loaded))
        return 0
    if args.command == "list":
        for name, number in SCENARIOS.items():
            print(f"{number}  {name}")
        print("bad inputs: tests/integration/test_bad_inputs.py (one table, its own connector)")
        return 0
    names = list(SCENARIOS) if args.scenario == "all" else [n.strip() for n in args.scenario.split(",")]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {unknown}; choose from {', '.join(SCENARIOS)} or all")
    names = [n for n in SCENARIOS if n in names]  # the order the scenarios need
    if args.repeat < 1 or args.parallel < 1:
        parser.error("--repeat and --parallel must be at least 1")
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = args.stamp or time.strftime("%Y%m%dT%H%M%S")
    if args.parallel > 1 and args.repeat > 1:
        return _run_in_parallel(names, args.repeat, args.parallel, args.out, stamp)
    for key, value in RUNNER_ENV.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("CDC_RUN_DIR", str(REPO_ROOT / ".run" / "faults"))
    os.environ["CDC_AIRFLOW_SCHEDULES"] = "off"
    results: list[ScenarioResult] = []

    def save() -> None:
        save_results(args.out, stamp, results)

    for repetition in range(args.first_repetition, args.first_repetition + args.repeat):
        runner = FaultRunner(
            StackConfig(), log=lambda m: print(f"[faults {time.strftime('%H:%M:%S')}] {m}", flush=True)
        )
        try:
            runner.start()
            run_scenarios(runner, names, repetition, on_result=lambda r: (results.append(r), save()))
        except Exception as exc:
            results.append(
                ScenarioResult("stack", "stack", repetition=repetition, error=f"{type(exc).__name__}: {exc}")
            )
        finally:
            save()
            runner.stop()
    save()
    print(matrix(results) + "\n" + markdown(results))
    print(f"results: {args.out / (stamp + '.json')}")
    return 0 if all(r.passed for r in results) else 1


def save_results(out: Path, stamp: str, results: list[ScenarioResult], **about: Any) -> None:
    """``<stamp>.json`` (records, the machine, ``about``), ``<stamp>.md`` and ``latest.md`` (the matrix)."""
    records = [{**asdict(r), "passed": r.passed} for r in results]
    document = {"machine": _machine(), **about, "results": records}
    (out / f"{stamp}.json").write_text(json.dumps(document, indent=2, default=str))
    report = matrix(results) + "\n" + markdown(results)
    (out / f"{stamp}.md").write_text(report)
    (out / "latest.md").write_text(report)


def repetition_environment(repetition: int) -> dict[str, str]:
    """Ports and run folder of repetition ``repetition`` when several run at once: base + 1000 per repetition."""
    shift = 1000 * (repetition - 1)
    env = {key: str(int(os.environ.get(key, value)) + shift) for key, value in RUNNER_ENV.items()}
    base = Path(os.environ.get("CDC_RUN_DIR", str(REPO_ROOT / ".run" / "faults")))
    env["CDC_RUN_DIR"] = str(base if repetition == 1 else base.with_name(f"{base.name}-{repetition}"))
    env["CDC_AIRFLOW_SCHEDULES"] = "off"
    return env


def _run_in_parallel(names: list[str], repeat: int, parallel: int, out: Path, stamp: str) -> int:
    """Each repetition in a child ``cdc-faults run`` on its own stack, ``parallel`` at a time; one merged matrix."""
    log = lambda m: print(f"[faults {time.strftime('%H:%M:%S')}] {m}", flush=True)  # noqa: E731
    waiting, running = list(range(1, repeat + 1)), {}
    while waiting or running:
        while waiting and len(running) < parallel:
            repetition = waiting.pop(0)
            part = f"{stamp}-rep{repetition}"
            argv = [sys.executable, "-m", "cdc_dev.faults", "run", "--scenario", ",".join(names)]
            argv += ["--repeat", "1", "--first-repetition", str(repetition), "--out", str(out), "--stamp", part]
            with (out / f"{part}.log").open("w") as child_log:
                child = subprocess.Popen(
                    argv,
                    env={**os.environ, **repetition_environment(repetition)},
                    stdout=child_log,
                    stderr=subprocess.STDOUT,
                )
            running[repetition] = child
            log(f"repetition {repetition}: pid {child.pid}, log {out / (part + '.log')}")
        for repetition, child in list(running.items()):
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=5)
            if child.returncode is not None:
                log(f"repetition {repetition}: exit {child.returncode}")
                del running[repetition]
    results: list[ScenarioResult] = []
    for repetition in range(1, repeat + 1):
        part = out / f"{stamp}-rep{repetition}.json"
        if part.exists():
            results.extend(load_results(part))
        else:
            results.append(ScenarioResult("stack", "stack", repetition=repetition, error=f"no results: see {part}"))
    save_results(out, stamp, results, parallel=parallel)
    print(matrix(results) + "\n" + markdown(results))
    print(f"results: {out / (stamp + '.json')}")
    return 0 if all(r.passed for r in results) else 1


def load_results(path: Path) -> list[ScenarioResult]:
    """Records from a results JSON file, or from the ``scenario <name>: PASS/FAIL {...}`` lines of a log."""
    text = path.read_text()
    if path.suffix == ".json":
        loaded = json.loads(text)
        documents = loaded["results"] if isinstance(loaded, dict) else loaded  # the tests' artifacts are lists
    else:
        documents = [
            json.loads(line.split(": PASS ", 1)[-1].split(": FAIL ", 1)[-1])
            for line in text.splitlines()
            if "] scenario " in line and (": PASS {" in line or ": FAIL {" in line)
        ]
    fields = set(ScenarioResult.__dataclass_fields__)
    return [ScenarioResult(**{k: v for k, v in d.items() if k in fields}) for d in documents]


def _machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "load_average": os.getloadavg(), "python": sys.version.split()[0]}


if __name__ == "__main__":
    sys.exit(main())
