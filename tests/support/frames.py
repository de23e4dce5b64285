"""Small DataFrames the unit tests share: raw Kafka records and the ``items`` table's Debezium events.

``items`` (``id`` key, ``name``, ``qty``) is the table the compaction, diff and repair tests fold and
compare; its events are built as the JSON converter (schemas off) writes them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from cdc_reconcile.compaction import change_events, changelog_rows, decode_changes
from cdc_reconcile.debezium.envelope import split_envelopes, tag_envelopes

RAW_SCHEMA = "topic string, partition int, offset long, key binary, value binary"
ITEMS_TOPIC = "cdc.public.items"
ITEMS_SPEC = {"id": "bigint", "name": "text", "qty": "integer"}
ITEMS_KEY = ("id",)
ITEMS_SCHEMA = "id long, name string, qty int"

RawRecord = tuple[str, int, int, bytes | None, bytes | None]


def raw_records(spark: SparkSession, rows: Sequence[RawRecord]) -> DataFrame:
    """Kafka records as the Spark Kafka source returns them: topic, partition, offset, key, value."""
    return spark.createDataFrame(list(rows), RAW_SCHEMA)


def items(spark: SparkSession, rows: Sequence[tuple[Any, ...]]) -> DataFrame:
    """Rows of the ``items`` table (a source snapshot or the expected lake table)."""
    return spark.createDataFrame(list(rows), ITEMS_SCHEMA)


def item_event(
    offset: int,
    op: str | None,
    key: int,
    after: dict[str, Any] | None = None,
    before: dict[str, Any] | None = None,
    txid: int = 100,
    lsn: int = 1000,
    snapshot: str = "false",
    partition: int = 0,
    commit_ms: int = 1,
    emitted_ms: int = 2,
) -> RawRecord:
    """One Kafka record of an ``items`` change; ``op=None`` is the tombstone after a delete.

    ``commit_ms``: the transaction's commit time, Debezium's ``source.ts_ms``; ``emitted_ms``: when the
    connector made the record, the envelope's ``ts_ms``."""
    if op is None:
        value = None
    else:
        value = json.dumps(
            {
                "before": before,
                "after": after,
                "source": {
                    "version": "3.6.3.Final",
                    "connector": "postgresql",
                    "name": "cdc",
                    "ts_ms": commit_ms,
                    "snapshot": snapshot,
                    "db": "d",
                    "schema": "public",
                    "table": "items",
                    "txId": txid,
                    "lsn": lsn,
                    "sequence": None,
                    "xmin": None,
                },
                "op": op,
                "ts_ms": emitted_ms,
            }
        ).encode()
    return (ITEMS_TOPIC, partition, offset, json.dumps({"id": key}).encode(), value)


def item_truncate(offset: int, txid: int, lsn: int, partition: int = 0) -> RawRecord:
    """A TRUNCATE of ``items`` as Debezium sends it: no key, no row images."""
    _, _, _, _, value = item_event(offset, "t", 0, txid=txid, lsn=lsn, partition=partition)
    return (ITEMS_TOPIC, partition, offset, None, value)


def item_changes(spark: SparkSession, rows: Sequence[RawRecord]) -> DataFrame:
    """The change events of ``rows``; every record must parse (nothing quarantined)."""
    good, bad = split_envelopes(tag_envelopes(raw_records(spark, rows), schemas=False))
    assert bad.count() == 0, bad.collect()
    return change_events(good)


def typed_changelog(marked: DataFrame, spec: Mapping[str, str], key: Sequence[str]) -> tuple[DataFrame, DataFrame]:
    """Typed changelog rows and the events that could not be decoded, as compaction derives them.

    The rows are materialized, as compaction stores them before anything folds them: a fold over the
    decode's plan would inline the decoding expressions once per use of the changelog.
    """
    changelog, quarantined = changelog_rows(decode_changes(marked, spec, key), key)
    return changelog.localCheckpoint(), quarantined


def redelivered_to_a_lower_partition() -> list[RawRecord]:
    """Key 1 in partition 2; the topic grows and the key's next change goes to partition 1; then the
    connector restarts and redelivers from its update at offset 8 onwards, to partition 1."""
    z = {"id": 1, "name": "z", "qty": 1}
    a = {"id": 1, "name": "a", "qty": 2}
    b = {"id": 1, "name": "b", "qty": 3}
    return [
        item_event(7, "c", 1, z, txid=101, lsn=1001, partition=2, emitted_ms=10),
        item_event(8, "u", 1, a, z, txid=102, lsn=1002, partition=2, emitted_ms=20),
        item_event(3, "u", 1, b, a, txid=103, lsn=1003, partition=1, emitted_ms=30),
        item_event(4, "u", 1, a, z, txid=102, lsn=1002, partition=1, emitted_ms=40),
        item_event(5, "u", 1, b, a, txid=103, lsn=1003, partition=1, emitted_ms=41),
    ]


def back_in_an_earlier_partition() -> list[RawRecord]:
    """Key 1 in partition 0; the topic grows 3 -> 5 and the key goes to partition 3; it grows to 7 and
    the key goes back to partition 0, whose offsets go on from where its first run ended."""
    return [
        item_event(10, "c", 1, {"id": 1, "name": "a", "qty": 1}, txid=101, lsn=1001, partition=0),
        item_event(0, "u", 1, {"id": 1, "name": "b", "qty": 2}, txid=102, lsn=1002, partition=3),
        item_event(11, "u", 1, {"id": 1, "name": "c", "qty": 3}, txid=103, lsn=1003, partition=0),
        item_event(12, "c", 2, {"id": 2, "name": "x", "qty": 1}, txid=104, lsn=1004, partition=0),
        item_event(1, "d", 2, None, {"id": 2, "name": "x", "qty": 1}, txid=105, lsn=1005, partition=3),
        item_event(13, "c", 2, {"id": 2, "name": "y", "qty": 2}, txid=106, lsn=1006, partition=0),
    ]
