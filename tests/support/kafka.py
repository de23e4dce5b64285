"""Reading a topic in tests: a plain confluent-kafka consumer, ``read_committed`` unless asked otherwise.

Tests judge the pipeline by what Kafka holds, so they never read through the pipeline's own code; the
reader is the dev stack's (:mod:`cdc_dev.stack.topics`), the one the demo and the fault runner use.
"""

from __future__ import annotations

from collections.abc import Mapping

from cdc_dev.stack.topics import Record, high_watermarks, read_topic, unwrap

__all__ = ["Record", "consumer_end_offsets", "read_range", "read_topic", "unwrap"]


def read_range(
    bootstrap: str,
    topic: str,
    start: Mapping[int, int],
    end: Mapping[int, int],
    *,
    isolation: str = "read_committed",
    timeout: float = 60.0,
) -> list[Record]:
    """The records ``read_topic`` returns whose offsets lie in ``[start, end)`` of their partition."""
    return [
        record
        for record in read_topic(bootstrap, topic, isolation=isolation, timeout=timeout)
        if start.get(record.partition, 0) <= record.offset < end.get(record.partition, 0)
    ]


def consumer_end_offsets(bootstrap: str, topic: str, *, isolation: str = "read_committed") -> dict[int, int]:
    """End offset per partition as a consumer of ``isolation`` sees it.

    ``read_committed`` gives the last stable offset (where such a reader stops while a transaction is
    open); ``read_uncommitted`` the high watermark. Both count transaction markers.
    """
    return high_watermarks(bootstrap, topic, isolation=isolation)
