"""Kafka offsets a run's range is made of: partitions, earliest, last stable and log end offsets.

Also the one place the product builds its confluent-kafka clients (:func:`new_consumer`,
:func:`new_admin`) and turns their errors into :class:`BrokerUnavailable` / :class:`TopicNotFound`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from .errors import InputError, UnreachableError

log = logging.getLogger(__name__)

_UNREACHABLE = {
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._TIMED_OUT,
    KafkaError._RESOLVE,
    KafkaError._WAIT_COORD,
}


class BrokerUnavailable(UnreachableError):
    """Kafka cannot be reached."""


class TopicNotFound(InputError):
    """The topic does not exist (yet)."""


def kafka_error(exc: KafkaException, bootstrap: str, topic: str, doing: str) -> InputError | UnreachableError:
    """The error to raise for a failed Kafka call: it names the broker, the topic and what to check."""
    error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    code = error.code() if error is not None else None
    if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION):
        return TopicNotFound(
            f"{doing}: topic {topic!r} (or one of its partitions) does not exist on {bootstrap}. Debezium creates "
            "a table's topic with its first event; check the table is in the connector's table.include.list"
        )
    if code in _UNREACHABLE or code is None:
        return BrokerUnavailable(
            f"{doing}: Kafka at {bootstrap} did not answer ({exc}). Check that the broker is running "
            "(`cdc-stack status` for the embedded stack) and that bootstrap.servers points at it"
        )
    return InputError(f"{doing}: Kafka at {bootstrap} refused the request for {topic!r}: {exc}")


def _error_logger(bootstrap: str, purpose: str) -> Callable[[KafkaError], None]:
    """An ``error_cb``: librdkafka reports an unreachable broker only there, many times a second.

    Logs each kind of error once per client (fatal ones every time), so a task log shows why a call
    is waiting without a line per reconnect attempt.
    """
    seen: set[int] = set()

    def log_error(error: KafkaError) -> None:
        if error.code() in seen and not error.fatal():
            return
        seen.add(error.code())
        log.warning("Kafka %s client for %s: %s", purpose, bootstrap, error)

    return log_error


def consumer_config(bootstrap: str, purpose: str) -> dict[str, Any]:
    """The configuration of every consumer the product builds (see :func:`new_consumer`)."""
    return {
        "bootstrap.servers": bootstrap,
        "group.id": f"cdc-reconcile-{purpose}-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "isolation.level": "read_committed",
        "allow.auto.create.topics": False,
        "log_level": 3,
        "error_cb": _error_logger(bootstrap, purpose),
    }


def new_consumer(bootstrap: str, purpose: str) -> Consumer:
    """A consumer that reads only committed records and never commits offsets.

    Its group id is unique, so no two readers share a group's assignment or committed offsets;
    readers ``assign`` the partitions and offsets they want. ``purpose`` names it in logs.
    """
    return Consumer(consumer_config(bootstrap, purpose))


def new_admin(bootstrap: str, purpose: str) -> AdminClient:
    """An admin client with the consumers' logging and error reporting."""
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 3, "error_cb": _error_logger(bootstrap, purpose)})


def topic_partitions(consumer: Consumer, bootstrap: str, topic: str, timeout: float) -> list[int] | None:
    """Partitions of ``topic``; None if it does not exist; BrokerUnavailable if Kafka does not answer."""
    try:
        metadata = consumer.list_topics(topic, timeout=max(timeout, 0.5))
    except KafkaException as exc:
        raise kafka_error(exc, bootstrap, topic, "reading topic metadata") from exc
    found = metadata.topics.get(topic)
    if found is None or found.error is not None or not found.partitions:
        if found is not None and found.error is not None:
            code = found.error.code()
            if code not in (
                KafkaError.UNKNOWN_TOPIC_OR_PART,
                KafkaError._UNKNOWN_TOPIC,
                KafkaError.LEADER_NOT_AVAILABLE,
            ):
                raise InputError(f"reading metadata of {topic!r} on {bootstrap}: {found.error}")
        return None
    return sorted(found.partitions)


def list_partitions(bootstrap: str, topic: str, *, timeout: float = 15.0) -> list[int]:
    """The partition ids of ``topic`` (the input of ``state_store.open_range``)."""
    consumer = new_consumer(bootstrap, "metadata")
    try:
        partitions = topic_partitions(consumer, bootstrap, topic, timeout)
    finally:
        consumer.close()
    if partitions is None:
        raise TopicNotFound(
            f"topic {topic!r} does not exist on {bootstrap}. Debezium creates a table's topic with its first "
            "event (the initial snapshot of a non-empty table, or the first change); check the table is in the "
            "connector's table.include.list and the connector is RUNNING"
        )
    return partitions


def list_offsets(
    admin: AdminClient,
    bootstrap: str,
    topic: str,
    partitions: Iterable[int],
    isolation: IsolationLevel,
    timeout: float,
    spec: OffsetSpec | None = None,
) -> dict[int, int]:
    """One ListOffsets request: ``spec`` (default: latest) per partition, at ``isolation``."""
    request = {KafkaTopicPartition(topic, p): spec or OffsetSpec.latest() for p in partitions}
    doing = f"listing {isolation.name.lower()} {'end' if spec is None else 'earliest'} offsets"
    try:
        futures = admin.list_offsets(request, isolation_level=isolation, request_timeout=max(timeout, 0.5))
        return {tp.partition: future.result().offset for tp, future in futures.items()}
    except KafkaException as exc:
        raise kafka_error(exc, bootstrap, topic, doing) from exc


def last_stable_offsets(
    bootstrap: str, topic: str, partitions: Iterable[int], *, timeout: float = 15.0
) -> dict[int, int]:
    """The last stable offset (LSO) per partition now: where a ``read_committed`` reader stops.

    ListOffsets(latest) with ``isolation_level=READ_COMMITTED`` returns the LSO, the first offset of
    the oldest open transaction or the high watermark when none is open (KIP-98; librdkafka sends the
    isolation level from ListOffsets v2 on). ``Consumer.get_watermark_offsets`` on a consumer with
    ``isolation.level=read_committed`` gives the same value since librdkafka 1.8
    (confluentinc/librdkafka#3428); the admin call states the isolation level explicitly.
    """
    admin = new_admin(bootstrap, "offsets")
    return list_offsets(admin, bootstrap, topic, partitions, IsolationLevel.READ_COMMITTED, timeout)


def earliest_offsets(bootstrap: str, topic: str, partitions: Iterable[int], *, timeout: float = 15.0) -> dict[int, int]:
    """The log start offset per partition: where a full rescan begins (older records were deleted)."""
    admin = new_admin(bootstrap, "offsets")
    return list_offsets(
        admin, bootstrap, topic, partitions, IsolationLevel.READ_COMMITTED, timeout, OffsetSpec.earliest()
    )


def log_end_offsets(bootstrap: str, topic: str, partitions: Iterable[int], *, timeout: float = 15.0) -> dict[int, int]:
    """The high watermark per partition: includes open transactions' records and transaction markers."""
    admin = new_admin(bootstrap, "offsets")
    return list_offsets(admin, bootstrap, topic, partitions, IsolationLevel.READ_UNCOMMITTED, timeout)


__all__ = [
    "BrokerUnavailable",
    "TopicNotFound",
    "consumer_config",
    "earliest_offsets",
    "kafka_error",
    "last_stable_offsets",
    "list_offsets",
    "list_partitions",
    "log_end_offsets",
    "new_admin",
    "new_consumer",
    "topic_partitions",
]
