"""Spark's side of a run: reading a sealed Kafka range, and naming the Spark jobs of a step."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING

from .kafka_client import KafkaClient, as_client
from .progress import current_step
from .spark import default_parallelism, is_connect

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def read_kafka_range(
    spark: SparkSession,
    kafka: KafkaClient | str,
    starting: str,
    ending: str,
    *,
    min_partitions: int | None = None,
) -> DataFrame:
    """Exactly the sealed offset range, ``read_committed``: aborted records never enter the lake.

    ``kafka``'s client properties reach the Java client translated (``KafkaClient.spark_options``:
    SASL, TLS); the product's own options are set after them, so ``read_committed`` always holds.

    ``min_partitions`` (default: all cores) splits each topic partition's range into several read
    tasks: a CDC topic often has one partition, and its envelope parse would otherwise run as one
    task on one core.
    """
    assign = json.dumps({topic: sorted(int(p) for p in parts) for topic, parts in json.loads(starting).items()})
    return (
        spark.read.format("kafka")
        .options(**as_client(kafka).spark_options())
        .option("assign", assign)
        .option("startingOffsets", starting)
        .option("endingOffsets", ending)
        .option("kafka.isolation.level", "read_committed")
        .option("failOnDataLoss", "true")
        .option("minPartitions", str(min_partitions or default_parallelism(spark)))
        .load()
        .select("topic", "partition", "offset", "key", "value")
    )


@contextlib.contextmanager
def described(spark: SparkSession, what: str) -> Iterator[None]:
    """Name the Spark jobs of a block (Spark UI, event log, the bench's stage profile).

    On Spark Connect the server names the jobs by operation; the block's name goes to the progress lines.
    """
    if is_connect(spark):
        with current_step(what):
            yield
        return
    context = spark.sparkContext
    previous = context.getLocalProperty("spark.job.description")
    context.setJobDescription(what)
    try:
        yield
    finally:
        context.setJobDescription(previous)  # type: ignore[arg-type]
