"""The ``compact_cdc`` entry point refuses what it cannot do before it starts Spark, naming the cause."""

from __future__ import annotations

import importlib
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
