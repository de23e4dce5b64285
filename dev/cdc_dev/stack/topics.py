"""Read a Debezium topic to its end with a plain Kafka consumer, for the demo and the stack's tests.

``isolation.level=read_committed`` stops at the last stable offset and hides records of aborted
transactions; transaction markers occupy offsets but are never returned, so offsets have gaps.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from cdc_reconcile.kafka_offsets import LEADER_MOVING

# The engine's codes for a partition whose leader is not known yet; a consumer's metadata can also name a
# partition just added before the broker answers for it.
_LEADER_MOVING = {*LEADER_MOVING, KafkaError.UNKNOWN_TOPIC_OR_PART}


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: Any
    value: Any

    @property
    def payload(self) -> dict[str, Any] | None:
        """The Debezium envelope, with or without the JSON converter's schema wrapper."""
        return unwrap(self.value)

    @property
    def key_payload(self) -> dict[str, Any] | None:
        return unwrap(self.key)


def unwrap(document: Any) -> Any:
    """Drop the JSON converter's ``{"schema": ..., "payload": ...}`` wrapper when there is one."""
    if isinstance(document, dict) and set(document) == {"schema", "payload"}:
        return document["payload"]
    return document


def _decode(raw: bytes | None) -> Any:
    return None if raw is None else json.loads(raw)


def read_topic(
    bootstrap: str,
    topic: str,
    *,
    isolation: str = "read_committed",
    timeout: float = 60.0,
) -> list[Record]:
    """Every record of ``topic`` from the beginning to its current end, in partition-offset order."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"cdc-reconcile-reader-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
            "auto.offset.reset": "earliest",
            "log_level": 0,
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        partitions = sorted(metadata.topics[topic].partitions) if topic in metadata.topics else []
        if not partitions or metadata.topics[topic].error is not None:
            return []
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        pending = set(partitions)
        records: list[Record] = []
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"reading {topic} from {bootstrap}: partitions {sorted(pending)} not at end after {timeout:.0f}s"
                )
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                if message.error().code() == KafkaError._PARTITION_EOF:
                    pending.discard(message.partition())
                    continue
                raise RuntimeError(f"reading {topic}: {message.error()}")
            records.append(
                Record(topic, message.partition(), message.offset(), _decode(message.key()), _decode(message.value()))
            )
        return sorted(records, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()


def high_watermarks(bootstrap: str, topic: str, *, isolation: str = "read_committed") -> dict[int, int]:
    """End offset per partition as a consumer of ``isolation`` sees it (transaction markers count).

    ``read_committed`` (librdkafka's default) gives the last stable offset, which equals the high
    watermark when no transaction is open; ``read_uncommitted`` gives the high watermark.
    """
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"wm-{uuid.uuid4()}", "isolation.level": isolation, "log_level": 0}
    )
    deadline = time.monotonic() + 30
    try:
        while True:
            metadata = consumer.list_topics(topic, timeout=10)
            try:
                return {
                    p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                    for p in metadata.topics[topic].partitions
                }
            except KafkaException as exc:  # a partition just added has no leader the client knows yet
                if exc.args[0].code() not in _LEADER_MOVING or time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)
    finally:
        consumer.close()


def write_again(bootstrap: str, topic: str, count: int) -> int:
    """Write the topic's last ``count`` committed change events again (same key, value and partition).

    What a producer retry or a task restarted without exactly-once does: a redelivery. Tombstones are
    left out: they carry no change, so no count would include them. Returns how many were written.
    """
    changes = [r for r in read_topic(bootstrap, topic) if r.payload]
    return len(_produce(bootstrap, topic, [(r, r.partition) for r in changes[-count:]], dated_now=False))


def emit_again(bootstrap: str, topic: str, placed: Sequence[tuple[Record, int]]) -> list[tuple[int, int]]:
    """Write each record again to the partition given with it, its envelope dated now.

    What a connector restarted from an older offset does after partitions were added: it makes the
    events again (so ``ts_ms``/``ts_us``/``ts_ns`` are new) and routes each by the key's hash over the
    topic's partitions as they are now, which may be another partition than the original's. Returns
    where the copies landed, (partition, offset) each.
    """
    return _produce(bootstrap, topic, placed, dated_now=True)


def _produce(
    bootstrap: str, topic: str, placed: Sequence[tuple[Record, int]], *, dated_now: bool
) -> list[tuple[int, int]]:
    """Write each record's key and value to the partition given with it; where each landed, once acknowledged."""
    landed: list[tuple[int, int]] = []
    failed: list[str] = []

    def delivered(error: Any, message: Any) -> None:
        if error is not None:
            failed.append(str(error))
        else:
            landed.append((message.partition(), message.offset()))

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 0})
    for record, partition in placed:
        value = record.value
        if dated_now and value is not None:
            value = json.loads(json.dumps(value))
            envelope = unwrap(value)
            now_ns = time.time_ns()
            for field, divisor in (("ts_ms", 1_000_000), ("ts_us", 1_000), ("ts_ns", 1)):
                if field in envelope:
                    envelope[field] = now_ns // divisor
        producer.produce(
            topic,
            key=None if record.key is None else json.dumps(record.key).encode(),
            value=None if value is None else json.dumps(value).encode(),
            partition=partition,
            on_delivery=delivered,
        )
    if producer.flush(60) or failed:
        raise RuntimeError(f"writing {len(placed)} records to {topic} again: not all acknowledged ({failed})")
    return landed
