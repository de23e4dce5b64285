"""The stack's broker configuration: a SASL_PLAINTEXT listener beside the plaintext one, its JAAS quoted."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_dev.stack.config import StackConfig
from cdc_dev.stack.kafka import Kafka, properties_value
from cdc_dev.stack.process import StackError


def test_the_sasl_listener_sits_beside_the_plaintext_one_and_brokers_talk_plaintext(tmp_path: Path) -> None:
    ports = {"kafka_port": 6001, "kafka_sasl_port": 6002, "kafka_controller_port": 6003}
    config = StackConfig(run_dir=tmp_path, kafka_sasl_password="cdc-kafka", **ports)
    props = Kafka(config).server_properties()
    assert props["listeners"] == (
        "PLAINTEXT://127.0.0.1:6001,SASL_PLAINTEXT://127.0.0.1:6002,CONTROLLER://127.0.0.1:6003"
    )
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:6001,SASL_PLAINTEXT://127.0.0.1:6002"
    assert props["inter.broker.listener.name"] == "PLAINTEXT"
    assert "SASL_PLAINTEXT:SASL_PLAINTEXT" in props["listener.security.protocol.map"]
    assert props["listener.name.sasl_plaintext.sasl.enabled.mechanisms"] == "PLAIN,SCRAM-SHA-256"
    assert props["listener.name.sasl_plaintext.plain.sasl.jaas.config"] == (
        'org.apache.kafka.common.security.plain.PlainLoginModule required user_cdc="cdc-kafka";'
    )
    assert config.kafka_sasl_config("SCRAM-SHA-256") == {
        "bootstrap.servers": "127.0.0.1:6002",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "cdc",
        "sasl.password": "cdc-kafka",
    }


def test_the_password_is_quoted_for_jaas_and_escaped_for_the_properties_file(tmp_path: Path) -> None:
    config = StackConfig(run_dir=tmp_path, kafka_sasl_password='a"b\\c é')
    kafka = Kafka(config)
    jaas = kafka.server_properties()["listener.name.sasl_plaintext.plain.sasl.jaas.config"]
    assert jaas.endswith('user_cdc="a\\"b\\\\c é";')
    kafka.write_config()
    line = next(
        line
        for line in kafka.properties_file.read_text().splitlines()
        if line.startswith("listener.name.sasl_plaintext.plain")
    )
    assert line.endswith('user_cdc="a\\\\"b\\\\\\\\c \\u00e9";'), (
        line
    )  # Java's Properties reads \\ as \ and \u00e9 as é
    assert line.isascii()


def test_properties_values_escape_what_javas_properties_reads_specially() -> None:
    assert properties_value("plain/path:9092") == "plain/path:9092"
    assert properties_value(" lead\\back\nnl") == "\\ lead\\\\back\\nnl"
    assert properties_value("😀") == "\\ud83d\\ude00"


def test_a_user_name_that_jaas_cannot_hold_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StackError, match="not a JAAS word"):
        Kafka(StackConfig(run_dir=tmp_path, kafka_sasl_user="cdc user")).server_properties()
