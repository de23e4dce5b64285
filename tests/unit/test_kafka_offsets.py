"""Kafka clients and errors without a broker: the consumer settings, error translation, an unreachable broker."""

from __future__ import annotations

import logging
import re
import socket
from concurrent.futures import Future
from types import SimpleNamespace

import pytest
from confluent_kafka import IsolationLevel, KafkaError, KafkaException

from cdc_reconcile import kafka_offsets
from cdc_reconcile.errors import InputError, UnreachableError


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_consumers_read_committed_never_commit_and_never_share_a_group():
    first = kafka_offsets.consumer_config("broker:9092", "watermark")
    second = kafka_offsets.consumer_config("broker:9092", "watermark")
    for config in (first, second):
        assert config["isolation.level"] == "read_committed"
        assert config["enable.auto.commit"] is False
        assert config["enable.auto.offset.store"] is False
        assert config["allow.auto.create.topics"] is False
        assert callable(config["error_cb"])
        assert "watermark" in config["group.id"]
    assert first["group.id"] != second["group.id"]


@pytest.mark.parametrize(
    ("code", "expected", "kind"),
    [
        (KafkaError.UNKNOWN_TOPIC_OR_PART, kafka_offsets.TopicNotFound, InputError),
        (KafkaError._UNKNOWN_PARTITION, kafka_offsets.TopicNotFound, InputError),
        (KafkaError._TRANSPORT, kafka_offsets.BrokerUnavailable, UnreachableError),
        (KafkaError._ALL_BROKERS_DOWN, kafka_offsets.BrokerUnavailable, UnreachableError),
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, InputError, InputError),
    ],
)
def test_kafka_errors_are_translated_by_what_the_user_does_next(code, expected, kind):
    error = kafka_offsets.kafka_error(KafkaException(KafkaError(code)), "broker:9092", "cdc.t", "listing offsets")
    assert type(error) is expected
    assert isinstance(error, kind)
    assert "broker:9092" in str(error) and str(error).startswith("listing offsets")


def test_an_exception_without_a_kafka_error_counts_as_unreachable():
    error = kafka_offsets.kafka_error(KafkaException(), "broker:9092", "cdc.t", "reading")
    assert isinstance(error, kafka_offsets.BrokerUnavailable)


def test_unreachable_broker_is_named_and_each_kind_of_error_logged_once(caplog):
    bootstrap = f"127.0.0.1:{closed_port()}"
    with (
        caplog.at_level(logging.WARNING, logger="cdc_reconcile.kafka_offsets"),
        pytest.raises(kafka_offsets.BrokerUnavailable, match=bootstrap),
    ):
        kafka_offsets.list_partitions(bootstrap, "cdc.public.customers", timeout=2)
    logged = [r.getMessage() for r in caplog.records if r.name == "cdc_reconcile.kafka_offsets"]
    assert logged, "the error callback logged nothing"
    assert all(bootstrap in message and "metadata" in message for message in logged)
    codes = [re.search(r"code=(\w+)", message).group(1) for message in logged]
    assert "_TRANSPORT" in codes
    assert len(codes) == len(set(codes)), f"an error kind was logged more than once: {codes}"


class _ElectingAdmin:
    """An admin whose partition answers ``errors`` one after another, then offset 42 (no broker)."""

    def __init__(self, *errors: int) -> None:
        self.errors = list(errors)
        self.calls = 0
        self.reported: list[KafkaError] = []

    def list_offsets(self, request, **_):
        self.calls += 1
        answers = {}
        for tp in request:
            future: Future = Future()
            if self.errors:
                future.set_exception(KafkaException(KafkaError(self.errors.pop(0))))
            else:
                future.set_result(SimpleNamespace(offset=42))
            answers[tp] = future
        return answers


def test_offsets_of_a_partition_whose_leader_is_being_elected_are_asked_again():
    admin = _ElectingAdmin(KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)
    offsets = kafka_offsets.list_offsets(admin, "broker:9092", "cdc.t", [3], IsolationLevel.READ_COMMITTED, 10)
    assert offsets == {3: 42}
    assert admin.calls == 3


def test_offsets_refused_for_another_reason_fail_at_once():
    admin = _ElectingAdmin(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(InputError, match="broker:9092"):
        kafka_offsets.list_offsets(admin, "broker:9092", "cdc.t", [3], IsolationLevel.READ_COMMITTED, 10)
    assert admin.calls == 1
