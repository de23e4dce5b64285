"""The ``compact_cdc`` entry point refuses what it cannot do before it starts Spark, naming the cause."""

from __future__ import annotations

import importlib
import json
import socket


def load_job():
    return importlib.import_module("cdc_reconcile.jobs.compact_cdc")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_broker_is_named_before_spark_starts(capsys):
    bootstrap = f"127.0.0.1:{closed_port()}"
    offsets = '{"cdc.public.customers": {"0": 0}}'
    code = load_job().main(
        [
            *("--table", "public.customers", "--run-id", "r", "--lake-root", "/nonexistent"),
            *("--bootstrap-servers", bootstrap, "--kafka-timeout", "2"),
            *("--starting-offsets", offsets, "--ending-offsets", offsets),
        ]
    )
    err = capsys.readouterr().err
    assert code == 3
    assert "compact_cdc: error: public.customers: " in err and f"Kafka at {bootstrap} did not answer" in err
    assert "Check that the broker is running" in err


def test_the_kafka_client_properties_come_from_the_environment_not_the_command_line(monkeypatch):
    config = {
        "bootstrap.servers": "k1:9094",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "cdc",
        "sasl.password": "secret",
    }
    monkeypatch.setenv("CDC_KAFKA_CONFIG", json.dumps(config))
    job = load_job()
    common = ["--table", "public.customers", "--run-id", "r", "--lake-root", "/lake"]
    kafka = job.kafka_client(job.parse_args(common))
    assert kafka.bootstrap == "k1:9094" and kafka.properties["sasl.password"] == "secret"
    # --bootstrap-servers (by hand) overrides the config's brokers; the properties stay
    kafka = job.kafka_client(job.parse_args([*common, "--bootstrap-servers", "k2:9094"]))
    assert kafka.bootstrap == "k2:9094" and kafka.properties["sasl.username"] == "cdc"
    monkeypatch.delenv("CDC_KAFKA_CONFIG")
    assert job.kafka_client(job.parse_args([*common, "--bootstrap-servers", "k2:9092"])).properties == {}


def test_a_kafka_config_spark_could_not_be_given_is_refused_before_spark_starts(monkeypatch, capsys):
    monkeypatch.setenv(
        "CDC_KAFKA_CONFIG", json.dumps({"security.protocol": "SSL", "ssl.certificate.location": "/etc/client.pem"})
    )
    offsets = '{"cdc.public.customers": {"0": 0}}'
    code = load_job().main(
        [
            *("--table", "public.customers", "--run-id", "r", "--lake-root", "/nonexistent"),
            *("--bootstrap-servers", "k1:9093", "--starting-offsets", offsets, "--ending-offsets", offsets),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "'ssl.certificate.location' (for k1:9093)" in err and "ssl.keystore.location" in err
