"""Compaction reads a sealed range in several Spark tasks; every split must still hold exactly the
committed records, also when a split starts or ends inside an aborted transaction or on a marker."""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from cdc_reconcile.spark_steps import read_kafka_range
from tests.support.kafka import consumer_end_offsets, read_topic

pytestmark = pytest.mark.integration


def split_starts(start: int, end: int, parts: int) -> list[int]:
    """Where Spark's KafkaOffsetRangeCalculator starts each split of one partition's range."""
    return [start + (end - start) * part // parts for part in range(parts)]


def test_split_reads_of_a_transactional_range_hold_each_committed_record_once(config, spark):
    bootstrap = config.bootstrap_servers
    topic = f"cdc-test-split-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=60)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-producer"})
    producer.init_transactions(60)
    for batch in range(12):
        producer.begin_transaction()
        for n in range(5):
            producer.produce(topic, key=json.dumps({"batch": batch}), value=json.dumps({"batch": batch, "n": n}))
        producer.flush(60)  # in the log before the abort: an abort would otherwise drop them unsent
        if batch % 3 == 1:
            producer.abort_transaction(60)
        else:
            producer.commit_transaction(60)
    producer.flush(60)

    end = consumer_end_offsets(bootstrap, topic)[0]
    committed = [(r.offset, r.value) for r in read_topic(bootstrap, topic, isolation="read_committed")]
    aborted = [
        r.offset for r in read_topic(bootstrap, topic, isolation="read_uncommitted") if r.value["batch"] % 3 == 1
    ]
    assert len(committed) == 8 * 5 and len(aborted) == 4 * 5
    visible = {offset for offset, _ in committed}
    invisible_starts = {parts: [s for s in split_starts(0, end, parts) if s not in visible] for parts in range(1, 10)}
    assert any(set(starts) & set(aborted) for starts in invisible_starts.values()), "no split starts in an abort"

    starting, ending = json.dumps({topic: {"0": 0}}), json.dumps({topic: {"0": end}})
    for parts in range(1, 10):
        frame = read_kafka_range(spark, bootstrap, starting, ending, min_partitions=parts)
        assert frame.rdd.getNumPartitions() == parts
        rows = sorted((r.offset, json.loads(bytes(r.value))) for r in frame.collect())
        assert rows == committed, f"{parts} splits (starting at {split_starts(0, end, parts)})"
