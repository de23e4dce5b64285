"""The independent side of a fault scenario: PostgreSQL, Kafka and the lake read without pipeline code.

PostgreSQL is read with psycopg, Kafka with a plain ``read_committed`` consumer (``stack.topics``), the
lake table and events with pyarrow, and the counts by class are folded here from those reads, so a bug
shared by the pipeline and its checker cannot hide.
"""

from __future__ import annotations

import base64
import hashlib
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

    Redelivery: same key, op, ``txId`` and ``lsn`` seen before. Snapshot re-run: an ``r`` event for a
    key whose first ``r`` came from another snapshot transaction.
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
    """The source table's rows by key, read with psycopg."""
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
