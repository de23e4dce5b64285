"""The independent side of a fault scenario: PostgreSQL, Kafka and the lake read without pipeline code.

PostgreSQL is read with psycopg, Kafka with a plain ``read_committed`` consumer (``stack.topics``), the
lake table and events with delta-rs, and the counts by class are folded here from those reads, so a bug
shared by the pipeline and its checker cannot hide.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg

from ..stack.process import StackError
from ..stack.topics import read_topic, unwrap

TABLE = "public.customers"
COLUMNS = ("id", "name", "email", "balance")
# The classes the suite reports and the independent count counts.
CLASSES = ("missing", "extra", "stale", "redelivery", "snapshot_rerun")

Row = tuple[Any, ...]


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

    Redelivery: same key, op, ``txId`` and ``lsn`` seen before. Snapshot re-run: a snapshot read (``r``
    with a ``txId``, not an incremental chunk) of a key whose previous read came from another snapshot
    transaction that never wrote its last record (``source.snapshot`` ``last`` or
    ``last_in_data_collection``): an interrupted round read again. A round after a complete one is a
    new image of the table, not a duplicate.
    """
    changes = []
    completed: set[Any] = set()
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        payload = unwrap(record.value)
        if record.offset < end.get(record.partition, 0) and payload and payload.get("op") in ("c", "u", "d", "r"):
            changes.append((record, payload))
            if payload["op"] == "r" and payload["source"].get("snapshot") in ("last", "last_in_data_collection"):
                completed.add(payload["source"]["txId"])
    seen: set[tuple] = set()
    last_round: dict[str, Any] = {}
    counts = {"redelivery": 0, "snapshot_rerun": 0}
    for record, payload in changes:
        in_range = record.offset >= start.get(record.partition, 0)
        key = json.dumps(record.key, sort_keys=True)
        txid = payload["source"]["txId"]
        identity = (key, payload["op"], txid, payload["source"]["lsn"])
        if identity in seen:
            counts["redelivery"] += in_range
            continue
        seen.add(identity)
        if payload["op"] != "r" or txid is None or payload["source"].get("snapshot") == "incremental":
            continue
        previous = last_round.get(key)
        if previous is not None and previous != txid and previous not in completed:
            counts["snapshot_rerun"] += in_range
        last_round[key] = txid
    return counts


def source_rows(dsn: str) -> dict[Any, Row]:
    """The source table's rows by key, read with psycopg."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return {r[0]: tuple(r[1:]) for r in conn.execute(f"SELECT {', '.join(COLUMNS)} FROM {TABLE}")}


def _query(table: Any, sql: str) -> Any:
    """Rows of a Delta table through delta-rs's query engine (it applies deletion vectors) as Arrow."""
    import pyarrow as pa
    from deltalake import QueryBuilder

    return pa.table(QueryBuilder().register("lake", table).execute(sql).read_all())


def lake_rows(lake_root: Path | str, table: str = TABLE) -> dict[Any, Row] | None:
    """The live lake table, read with delta-rs (no Spark, no pipeline code); None before its first commit.

    ``lake_root`` is a folder or a URI delta-rs reads itself (``hdfs://`` through its own HDFS client).
    """
    from deltalake import DeltaTable

    root = f"{str(lake_root).rstrip('/')}/{table}/table"
    if not DeltaTable.is_deltatable(root):
        return None
    data = _query(DeltaTable(root), f"SELECT {', '.join(COLUMNS)} FROM lake").to_pydict()
    rows: dict[Any, Row] = {}
    for i, key in enumerate(data["id"]):
        balance = data["balance"][i]
        rows[key] = (
            data["name"][i],
            data["email"][i],
            None if balance is None else Decimal(balance).quantize(Decimal("0.01")),
        )
    return rows


def event_positions(events_root: Path | str) -> list[tuple[int, int]]:
    """(partition, offset) of every committed row of an events dataset, read with delta-rs."""
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(str(events_root)):
        return []
    data = _query(DeltaTable(str(events_root)), 'SELECT "partition", "offset" FROM lake').to_pydict()
    return list(zip(data["partition"], data["offset"], strict=True))


def added_files(commits: Iterable[str]) -> set[str]:
    """Every file the given Delta commits (each a ``_delta_log/*.json`` text) added, unquoted: data files
    (``add``) and change data files (``cdc``, under ``_change_data/``)."""
    from urllib.parse import unquote

    added: set[str] = set()
    for text in commits:
        for line in text.splitlines():
            action = json.loads(line) if line.strip() else {}
            for kind in ("add", "cdc"):
                if kind in action:
                    added.add(unquote(action[kind]["path"]))
    return added


def committed_files(dataset: Path) -> set[str]:
    """Every data file any commit of a Delta table added, from its log (relative paths, unquoted)."""
    return added_files(entry.read_text() for entry in sorted((dataset / "_delta_log").glob("*.json")))


def uncommitted_files(dataset: Path) -> list[Path]:
    """Data files under a Delta table that no commit added: what a writer killed mid-write leaves, or
    one that wrote a file it then left out of its commit (Delta leaves an empty MERGE output behind)."""
    if not (dataset / "_delta_log").is_dir():
        return sorted(dataset.rglob("*.parquet"))
    added = committed_files(dataset)
    return sorted(p for p in dataset.rglob("*.parquet") if str(p.relative_to(dataset)) not in added)


def table_contents(base: Path) -> dict[str, list[str]]:
    """Every dataset under a table's lake folder as its rows (read with delta-rs), in a stable order."""
    from deltalake import DeltaTable

    contents = {}
    for dataset in sorted(p for p in base.iterdir() if (p / "_delta_log").is_dir()):
        rows = _query(DeltaTable(str(dataset)), "SELECT * FROM lake").to_pylist()
        contents[dataset.name] = sorted(repr(sorted(r.items())) for r in rows)
    return contents
