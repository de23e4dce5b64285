"""The main job on the embedded stack: stack up, the loader writes, Debezium's events arrive in Kafka.

Prints the first events as they arrive (op, key, transaction id, LSN), then a summary per table of
what PostgreSQL committed and what a ``read_committed`` consumer found in Kafka.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import uuid
from collections import Counter

import psycopg
from confluent_kafka import Consumer, KafkaError

from .loader import LoadStats, run_loader
from .stack import Stack, StackError
from .stack.topics import read_topic, unwrap


def _tail(
    bootstrap: str, topics: list[str], ready: threading.Event, stop: threading.Event, show: int, seen: Counter
) -> None:
    """Print the first ``show`` events as they arrive; count all of them until ``stop``."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"cdc-demo-{uuid.uuid4()}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "latest",
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    consumer.subscribe(topics, on_assign=lambda _consumer, _partitions: ready.set())
    printed = 0
    try:
        while not stop.is_set():
            message = consumer.poll(0.5)
            if message is None or (message.error() and message.error().code() == KafkaError._PARTITION_EOF):
                continue
            if message.error():
                print(f"  consumer error: {message.error()}", file=sys.stderr)
                continue
            seen[message.topic()] += 1
            if printed < show and message.value() is not None:
                payload = unwrap(json.loads(message.value()))
                key = unwrap(json.loads(message.key())) if message.key() else None
                source = payload.get("source", {})
                print(
                    f"  {message.topic():<24} offset {message.offset():>6}  op={payload.get('op')}  key={key}  "
                    f"txId={source.get('txId')}  lsn={source.get('lsn')}"
                )
                printed += 1
    finally:
        consumer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cdc-demo", description=__doc__)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds the loader writes")
    parser.add_argument("--rate", type=float, default=50.0, help="loader operations per second")
    parser.add_argument("--show", type=int, default=15, help="events to print as they arrive")
    args = parser.parse_args(argv)

    stack = Stack()
    config = stack.config
    print("== bringing the embedded stack up (PostgreSQL, Kafka KRaft, Kafka Connect + Debezium)")
    try:
        timings = stack.up()
    except StackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("   " + ", ".join(f"{name} {secs}s" for name, secs in timings.items()))
    for row in stack.status():
        print(f"   {row.name:<10} {'healthy' if row.healthy else 'NOT healthy'}  {row.detail}")

    tables = ("public.customers", "public.order_lines")
    topics = [config.topic_for(t) for t in tables]
    ready, stop = threading.Event(), threading.Event()
    seen: Counter = Counter()
    tail = threading.Thread(target=_tail, args=(config.bootstrap_servers, topics, ready, stop, args.show, seen))
    tail.start()
    if not ready.wait(timeout=60):  # the tail starts at the latest offset: writes before it joins are not shown
        print("warning: the live consumer got no partitions within 60 s; events will still be counted below")
    print(f"== loader: {args.rate:.0f} ops/s for {args.duration:.0f}s; events as they arrive in Kafka:")
    stats: LoadStats = run_loader(config.pg_dsn, rate=args.rate, duration=args.duration, seed=int(time.time()))
    print(f"   loader committed {stats.summary()}")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and sum(seen.values()) < stats.total():
        time.sleep(0.2)  # polling the live consumer's progress, bounded by the deadline
    stop.set()
    tail.join()

    print("== PostgreSQL vs Kafka (read_committed, whole topic)")
    with psycopg.connect(config.pg_dsn) as conn:
        for table, topic in zip(tables, topics, strict=True):
            rows = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            records = read_topic(config.bootstrap_servers, topic)
            ops = Counter(r.payload["op"] if r.payload else "tombstone" for r in records)
            print(
                f"   {table:<20} rows={rows:<6} events={len(records):<6} "
                + " ".join(f"{op}={n}" for op, n in sorted(ops.items()))
            )
    print(f"   events seen live during the load: {dict(seen)}")
    print("== the stack keeps running: `.venv/bin/cdc-stack status`, stop it with `.venv/bin/cdc-stack down`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
