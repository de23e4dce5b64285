"""Kafka offsets a run's range is made of: partitions, earliest, last stable and log end offsets.

Also the one place the product builds its confluent-kafka clients (:func:`new_consumer`,
:func:`new_admin`) from a :class:`~cdc_reconcile.kafka_client.KafkaClient` (bootstrap servers plus
the connection's client properties: SASL, TLS), and turns their errors into
:class:`BrokerUnavailable` / :class:`TopicNotFound` / :class:`KafkaAuthenticationFailed`.
Every function takes a ``KafkaClient`` or a bare bootstrap string (plaintext, no properties).
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from .config import ConfigError
from .errors import InputError, UnreachableError
from .kafka_client import KafkaClient, as_client

log = logging.getLogger(__name__)

KafkaTarget = KafkaClient | str

_UNREACHABLE = {
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._TIMED_OUT,
    KafkaError._RESOLVE,
    KafkaError._WAIT_COORD,
}
# A partition just added, or whose leader is being elected, answers these until its leader is known.
LEADER_MOVING = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.OFFSET_NOT_AVAILABLE,
    KafkaError.FENCED_LEADER_EPOCH,
    KafkaError.UNKNOWN_LEADER_EPOCH,
}
_AUTHENTICATION = {
    KafkaError._AUTHENTICATION,
    KafkaError.SASL_AUTHENTICATION_FAILED,
    KafkaError.UNSUPPORTED_SASL_MECHANISM,
    KafkaError.ILLEGAL_SASL_STATE,
    KafkaError._SSL,
}
_AUTHORIZATION = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
}
_CONNECTION_SETTINGS = (
    "the Kafka connection's security.protocol, sasl.mechanism, sasl.username and sasl.password "
    "(ssl.ca.location for TLS) in the cdc_kafka connection's extra, or $CDC_KAFKA_CONFIG for a job"
)


class BrokerUnavailable(UnreachableError):
    """Kafka cannot be reached."""


class TopicNotFound(InputError):
    """The topic does not exist (yet)."""


class KafkaAuthenticationFailed(InputError):
    """The broker refused the client's credentials or its TLS handshake: a configuration to fix, not to retry."""


class _Consumer(Consumer):
    """A consumer that keeps what its ``error_cb`` reported (librdkafka reports authentication only there)."""

    reported: list[KafkaError]


class _Admin(AdminClient):
    """An admin client that keeps what its ``error_cb`` reported."""

    reported: list[KafkaError]


def reported_errors(client: Any) -> Sequence[KafkaError]:
    """The errors a client built here reported through its ``error_cb`` so far (none for other clients).

    confluent-kafka calls ``error_cb`` only while the client is polled, so this polls once (no wait)
    to hand over what librdkafka queued: call it only when the client's call already failed.
    """
    if not hasattr(client, "reported"):
        return ()
    with contextlib.suppress(Exception):
        client.poll(0)
    return tuple(client.reported)


def _code(error: Any) -> int | None:
    return error.code() if isinstance(error, KafkaError) else None


def kafka_error(
    exc: KafkaException,
    kafka: KafkaTarget,
    topic: str,
    doing: str,
    reported: Sequence[KafkaError] = (),
) -> InputError | UnreachableError:
    """The error to raise for a failed Kafka call: it names the broker, the topic and what to check.

    ``reported``: what the client's ``error_cb`` saw (see :func:`reported_errors`). A refused login
    shows there, while the call itself only times out.
    """
    bootstrap = as_client(kafka).bootstrap
    error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    code = _code(error)
    refused = next((e for e in (error, *reported) if _code(e) in _AUTHENTICATION), None)
    if refused is not None:
        return authentication_failed(refused, kafka, doing)
    if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION):
        return TopicNotFound(
            f"{doing}: topic {topic!r} (or one of its partitions) does not exist on {bootstrap}. Debezium creates "
            "a table's topic with its first event; check the table is in the connector's table.include.list"
        )
    if code in _AUTHORIZATION:
        return InputError(
            f"{doing}: Kafka at {bootstrap} does not allow this client's user to read {topic!r} ({exc}). Grant the "
            "user DESCRIBE and READ on the topic (and DESCRIBE on the cluster), or check sasl.username"
        )
    if code in _UNREACHABLE or code is None:
        last = f"; the client last reported: {reported[-1]}" if reported else ""
        return BrokerUnavailable(
            f"{doing}: Kafka at {bootstrap} did not answer ({exc}{last}). Check that the broker is running "
            "(`cdc-stack status` for the embedded stack) and that bootstrap.servers points at it"
        )
    return InputError(f"{doing}: Kafka at {bootstrap} refused the request for {topic!r}: {exc}")


def authentication_failed(error: KafkaError, kafka: KafkaTarget, doing: str) -> KafkaAuthenticationFailed:
    """A refused login or TLS handshake, naming the broker and the settings to check."""
    bootstrap = as_client(kafka).bootstrap
    what = "the TLS handshake" if _code(error) == KafkaError._SSL else "the client's authentication"
    return KafkaAuthenticationFailed(
        f"{doing}: Kafka at {bootstrap} refused {what} ({error.str()}). Check {_CONNECTION_SETTINGS}"
    )


def _error_logger(kafka: KafkaClient, purpose: str, reported: list[KafkaError]) -> Callable[[KafkaError], None]:
    """An ``error_cb``: librdkafka reports an unreachable broker only there, many times a second.

    Logs each kind of error once per client (fatal ones every time), so a task log shows why a call
    is waiting without a line per reconnect attempt; keeps each kind's latest in ``reported``.
    """
    seen: set[int] = set()

    def log_error(error: KafkaError) -> None:
        reported[:] = [e for e in reported if e.code() != error.code()] + [error]
        if error.code() in seen and not error.fatal():
            return
        seen.add(error.code())
        log.warning("Kafka %s client for %s: %s", purpose, kafka.bootstrap, error)

    return log_error


def consumer_config(kafka: KafkaTarget, purpose: str, reported: list[KafkaError] | None = None) -> dict[str, Any]:
    """The configuration of every consumer the product builds (see :func:`new_consumer`).

    The connection's properties (SASL, TLS, tuning), then the product's settings over them: a group
    of its own, ``read_committed``, no offset commits (``KafkaClient.confluent_config``).
    """
    client = as_client(kafka)
    return {
        **client.confluent_config(consumer=True),
        "group.id": f"cdc-reconcile-{purpose}-{uuid.uuid4().hex}",
        "error_cb": _error_logger(client, purpose, [] if reported is None else reported),
    }


def _built(factory: Callable[[dict[str, Any]], Any], config: dict[str, Any], client: KafkaClient) -> Any:
    try:
        return factory(config)
    except (KafkaException, ValueError, TypeError) as exc:
        raise ConfigError(
            f"the Kafka client configuration for {client.bootstrap} ({client!r}) is refused by confluent-kafka: "
            f"{exc}. Fix the client properties (the cdc_kafka connection's extra, or $CDC_KAFKA_CONFIG)"
        ) from None


def new_consumer(kafka: KafkaTarget, purpose: str) -> Consumer:
    """A consumer that reads only committed records and never commits offsets.

    Its group id is unique, so no two readers share a group's assignment or committed offsets;
    readers ``assign`` the partitions and offsets they want. ``purpose`` names it in logs.
    """
    client = as_client(kafka)
    reported: list[KafkaError] = []
    consumer = _built(_Consumer, consumer_config(client, purpose, reported), client)
    consumer.reported = reported
    return consumer


def new_admin(kafka: KafkaTarget, purpose: str) -> AdminClient:
    """An admin client with the consumers' properties, logging and error reporting."""
    client = as_client(kafka)
    reported: list[KafkaError] = []
    config = {**client.confluent_config(consumer=False), "error_cb": _error_logger(client, purpose, reported)}
    admin = _built(_Admin, config, client)
    admin.reported = reported
    return admin


def _raise_if_refused(client: Any, kafka: KafkaTarget, doing: str) -> None:
    """Raise the authentication error a client reported, if any (a call may return empty instead of failing)."""
    refused = next((e for e in reported_errors(client) if _code(e) in _AUTHENTICATION), None)  # polls it once
    if refused is not None:
        raise authentication_failed(refused, kafka, doing)


def topic_partitions(consumer: Consumer, kafka: KafkaTarget, topic: str, timeout: float) -> list[int] | None:
    """Partitions of ``topic``; None if it does not exist; BrokerUnavailable if Kafka does not answer.

    Asks in steps of a second, so a refused login (which librdkafka reports beside the call, while
    the call itself only times out) ends the wait at once as :class:`KafkaAuthenticationFailed`.
    """
    bootstrap = as_client(kafka).bootstrap
    deadline = time.monotonic() + max(timeout, 0.5)
    while True:
        try:
            metadata = consumer.list_topics(topic, timeout=max(min(deadline - time.monotonic(), 1.0), 0.1))
            break
        except KafkaException as exc:
            reported = reported_errors(consumer)
            code = _code(exc.args[0]) if exc.args else None
            refused = any(_code(e) in _AUTHENTICATION for e in reported)
            if refused or time.monotonic() >= deadline or code not in _UNREACHABLE:
                raise kafka_error(exc, kafka, topic, "reading topic metadata", reported) from exc
    found = metadata.topics.get(topic)
    if found is None or found.error is not None or not found.partitions:
        _raise_if_refused(consumer, kafka, "reading topic metadata")
        if found is not None and found.error is not None:
            code = found.error.code()
            if code in _AUTHORIZATION:
                raise kafka_error(KafkaException(found.error), kafka, topic, "reading topic metadata")
            if code not in (
                KafkaError.UNKNOWN_TOPIC_OR_PART,
                KafkaError._UNKNOWN_TOPIC,
                KafkaError.LEADER_NOT_AVAILABLE,
            ):
                raise InputError(f"reading metadata of {topic!r} on {bootstrap}: {found.error}")
        return None
    return sorted(found.partitions)


def list_partitions(kafka: KafkaTarget, topic: str, *, timeout: float = 15.0) -> list[int]:
    """The partition ids of ``topic`` (the input of ``state_store.open_range``)."""
    partitions = existing_partitions(kafka, topic, timeout=timeout)
    if partitions is None:
        raise TopicNotFound(
            f"topic {topic!r} does not exist on {as_client(kafka).bootstrap}. Debezium creates a table's topic with "
            "its first event (the initial snapshot of a non-empty table, or the first change); check the table is "
            "in the connector's table.include.list and the connector is RUNNING"
        )
    return partitions


def list_offsets(
    admin: AdminClient,
    kafka: KafkaTarget,
    topic: str,
    partitions: Iterable[int],
    isolation: IsolationLevel,
    timeout: float,
    spec: OffsetSpec | None = None,
) -> dict[int, int]:
    """One ListOffsets request: ``spec`` (default: latest) per partition, at ``isolation``."""
    request = {KafkaTopicPartition(topic, p): spec or OffsetSpec.latest() for p in partitions}
    doing = f"listing {isolation.name.lower()} {'end' if spec is None else 'start'} offsets"
    deadline = time.monotonic() + max(timeout, 0.5)
    while True:
        try:
            futures = admin.list_offsets(request, isolation_level=isolation, request_timeout=max(timeout, 0.5))
            return {tp.partition: future.result().offset for tp, future in futures.items()}
        except KafkaException as exc:
            moving = exc.args and _code(exc.args[0]) in LEADER_MOVING
            if not moving or time.monotonic() >= deadline:
                raise kafka_error(exc, kafka, topic, doing, reported_errors(admin)) from exc
            time.sleep(0.2)


def last_stable_offsets(
    kafka: KafkaTarget, topic: str, partitions: Iterable[int], *, timeout: float = 15.0
) -> dict[int, int]:
    """The last stable offset (LSO) per partition now: where a ``read_committed`` reader stops.

    ListOffsets(latest) with ``isolation_level=READ_COMMITTED`` returns the LSO, the first offset of
    the oldest open transaction or the high watermark when none is open (KIP-98; librdkafka sends the
    isolation level from ListOffsets v2 on). ``Consumer.get_watermark_offsets`` on a consumer with
    ``isolation.level=read_committed`` gives the same value since librdkafka 1.8
    (confluentinc/librdkafka#3428); the admin call states the isolation level explicitly.
    """
    admin = new_admin(kafka, "offsets")
    return list_offsets(admin, kafka, topic, partitions, IsolationLevel.READ_COMMITTED, timeout)


def earliest_offsets(
    kafka: KafkaTarget, topic: str, partitions: Iterable[int], *, timeout: float = 15.0
) -> dict[int, int]:
    """The log start offset per partition: where a full rescan begins (older records were deleted)."""
    admin = new_admin(kafka, "offsets")
    return list_offsets(admin, kafka, topic, partitions, IsolationLevel.READ_COMMITTED, timeout, OffsetSpec.earliest())


def offsets_since(
    kafka: KafkaTarget, topic: str, partitions: Iterable[int], since_ms: int, *, timeout: float = 15.0
) -> dict[int, int]:
    """Per partition, the first offset whose record's timestamp is at or after ``since_ms``.

    Where no committed record is that recent, the last stable offset: a reader from there reads nothing.
    """
    admin = new_admin(kafka, "offsets")
    wanted = sorted(int(p) for p in partitions)
    at = list_offsets(
        admin, kafka, topic, wanted, IsolationLevel.READ_COMMITTED, timeout, OffsetSpec.for_timestamp(int(since_ms))
    )
    ends = list_offsets(admin, kafka, topic, wanted, IsolationLevel.READ_COMMITTED, timeout)
    return {p: at[p] if at[p] >= 0 else ends[p] for p in wanted}


def existing_partitions(kafka: KafkaTarget, topic: str, *, timeout: float = 15.0) -> list[int] | None:
    """The partition ids of ``topic``, or None when it does not exist."""
    consumer = new_consumer(kafka, "metadata")
    try:
        return topic_partitions(consumer, kafka, topic, timeout)
    finally:
        consumer.close()


def log_end_offsets(
    kafka: KafkaTarget, topic: str, partitions: Iterable[int], *, timeout: float = 15.0
) -> dict[int, int]:
    """The high watermark per partition: includes open transactions' records and transaction markers."""
    admin = new_admin(kafka, "offsets")
    return list_offsets(admin, kafka, topic, partitions, IsolationLevel.READ_UNCOMMITTED, timeout)


__all__ = [
    "LEADER_MOVING",
    "BrokerUnavailable",
    "KafkaAuthenticationFailed",
    "KafkaTarget",
    "TopicNotFound",
    "authentication_failed",
    "consumer_config",
    "earliest_offsets",
    "existing_partitions",
    "kafka_error",
    "last_stable_offsets",
    "list_offsets",
    "list_partitions",
    "log_end_offsets",
    "new_admin",
    "new_consumer",
    "offsets_since",
    "reported_errors",
    "topic_partitions",
]
