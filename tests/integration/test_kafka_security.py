"""A run through Kafka's SASL listener: sealing over confluent-kafka, compaction over Spark's Kafka source.

The stack's broker has a SASL_PLAINTEXT listener (PLAIN and SCRAM-SHA-256) beside the plaintext one
Debezium writes through. The test's password holds a quote, a backslash, spaces and a non-ASCII
letter (``TEST_ENV``), so the translation to the Java client's ``sasl.jaas.config`` must quote it
right for the Spark read to log in, while librdkafka takes it as it is. The run's steps use the
SASL listener only; compaction's connection is the one compact_cdc builds from its Kafka config alone,
bootstrap servers included (here from ``CDC_KAFKA_CONFIG``; the DAG gives the same JSON as Spark conf,
see ``test_spark_job.py``), in this process: a second JVM would double the test's time. Kafka is
counted with a plain consumer on the plaintext listener, the lake read with delta-rs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdc_dev.stack import Stack, StackConfig
from cdc_reconcile import kafka_offsets
from cdc_reconcile.config import TableConfig, load_config
from cdc_reconcile.jobs import compact_cdc
from cdc_reconcile.kafka_client import KafkaClient
from cdc_reconcile.lake import TableLake, version_name
from cdc_reconcile.spark_steps import read_kafka_range
from tests.support.kafka import read_range
from tests.support.lake import delta_rows
from tests.support.lake import rows_by_key as lake_by_key
from tests.support.source import rows_by_key as source_by_key

from .conftest import eventually, own_connector, table_run

pytestmark = pytest.mark.integration

PREFIX = "sasl"
SLOT = "cdc_sasl"
TABLE = "public.sasl_items"
COLUMNS = ["id", "label", "qty"]  # the key first
CREATE = (f"CREATE TABLE {TABLE} (id bigint PRIMARY KEY, label text NOT NULL, qty integer NOT NULL)",)
RUN = "sasl-1"


@pytest.fixture(scope="module")
def sasl_table(stack: Stack, config: StackConfig) -> Iterator[TableConfig]:
    with own_connector(stack, config, prefix=PREFIX, slot=SLOT, tables=(TABLE,), create=CREATE):
        yield TableConfig(name=TABLE, key=("id",), topic_prefix=PREFIX)


def sasl(config: StackConfig, mechanism: str = "PLAIN", *, password: str | None = None) -> KafkaClient:
    """The SASL listener as a deployment's ``cdc_kafka`` connection would describe it (the provider's dict)."""
    return KafkaClient.from_config(config.kafka_sasl_config(mechanism, password=password))


def job_kafka_client(kafka: KafkaClient, monkeypatch: pytest.MonkeyPatch) -> KafkaClient:
    """The Kafka connection compact_cdc builds from its config alone, as the DAG starts it: nothing of the
    connection is on its command line."""
    monkeypatch.setenv("CDC_KAFKA_CONFIG", kafka.to_json())
    argv = ["--table", TABLE, "--run-id", RUN, "--lake-root", "/lake"]
    assert not any(kafka.properties["sasl.password"] in a for a in argv)
    return compact_cdc.kafka_client(compact_cdc.parse_args(argv))


def test_a_run_on_the_sasl_listener_is_clean_and_a_wrong_password_is_named(
    spark, config: StackConfig, pg, sasl_table: TableConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    pg.execute(f"INSERT INTO {TABLE} SELECT g, 'row ' || g, g % 7 FROM generate_series(1, 200) g")
    pg.execute(f"UPDATE {TABLE} SET qty = qty + 100 WHERE id % 10 = 0")
    pg.execute(f"DELETE FROM {TABLE} WHERE id % 25 = 0")
    seconds: dict[str, float] = {}
    clock = [time.monotonic()]

    def lap(step: str) -> None:
        now = time.monotonic()
        seconds[step], clock[0] = round(now - clock[0], 1), now

    kafka = sasl(config)
    assert kafka.bootstrap == config.kafka_sasl_bootstrap != config.bootstrap_servers
    eventually(
        lambda: bool(kafka_offsets.list_partitions(kafka, sasl_table.topic, timeout=5)),
        timeout=60,
        what=f"topic {sasl_table.topic} through the SASL listener",
        retry_on=(kafka_offsets.TopicNotFound,),
    )
    lap("topic")
    lake = tmp_path / "lake"
    watermark = f"{PREFIX}.{load_config().watermark_table}"

    run = table_run(spark, config, sasl_table, lake, RUN, kafka=kafka)
    run.open(full_rescan=True)
    lap("open")
    run.snapshot(partitions=2)
    lap("snapshot")
    sealed = run.seal(timeout=120, watermark_topic=watermark)
    lap("seal")
    compaction = table_run(spark, config, sasl_table, lake, RUN, kafka=job_kafka_client(kafka, monkeypatch))
    assert compaction.kafka == kafka
    summary = compaction.compact(full_rescan=True)  # Spark's Kafka source, with the translated options
    lap("compact")
    report, diff = compaction.check()
    diff.unpersist()
    lap("check")

    assert report.clean, report.as_dict()
    in_range = read_range(config.bootstrap_servers, sasl_table.topic, sealed.start, sealed.end or {})
    assert summary["records"] == len(in_range) >= 200 + 20 + 8
    events = delta_rows(TableLake(lake, TABLE).events, columns=["offset"], run=version_name(RUN))
    assert sorted(r["offset"] for r in events) == [r.offset for r in in_range]
    source = source_by_key(pg, TABLE, COLUMNS)
    assert lake_by_key(TableLake(lake, TABLE).table, COLUMNS) == source and len(source) == 192

    # SCRAM-SHA-256 on the same listener, through both clients: the range as the Spark source reads it
    scram = sasl(config, "SCRAM-SHA-256")
    assert kafka_offsets.list_partitions(scram, sasl_table.topic, timeout=15) == sorted(sealed.start)
    assert read_kafka_range(spark, scram, *sealed.as_spark_json(), min_partitions=1).count() == len(in_range)
    lap("scram")

    wrong = table_run(spark, config, sasl_table, lake, "sasl-2", kafka=sasl(config, password="not the password"))
    began = time.monotonic()
    with pytest.raises(kafka_offsets.KafkaAuthenticationFailed, match=config.kafka_sasl_bootstrap) as refused:
        wrong.open()
    assert time.monotonic() - began < 10, "a refused login must end the step, not wait out its timeout"
    assert "sasl.password" in str(refused.value) and "not the password" not in str(refused.value)
    lap("wrong password")
    print(f"\nSASL run, seconds per step: {seconds}")
