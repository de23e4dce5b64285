"""Spark job ``compact_cdc``: compact one table's sealed Kafka offset range into the lake.

Reads exactly the run's range (from the state database, or given as Spark offset JSON), parses the
Debezium envelopes, and publishes events, quarantine, changelog and the lake table for the run.

The Kafka client properties (SASL, TLS: the Apache Kafka provider's Config Dict, as JSON) come from
the Spark conf ``spark.cdc.secret.kafka.config`` (what the DAG gives the job from the ``cdc_kafka``
connection, in its private properties file), else ``$CDC_KAFKA_CONFIG``, or ``--kafka-config``; so no
secret need be on the command line. By hand::

    CDC_KAFKA_CONFIG='{"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", ...}' \
    python -m cdc_reconcile.jobs.compact_cdc --table public.customers --run-id r1 --bootstrap-servers k1:9093
"""

from __future__ import annotations

import argparse
import sys

from cdc_reconcile import kafka_offsets
from cdc_reconcile.config import TableConfig
from cdc_reconcile.errors import InputError
from cdc_reconcile.jobs import job_conf
from cdc_reconcile.jobs.job_cli import EXIT_DONE, flag, job_parser, run_job, spark_run, summary_line
from cdc_reconcile.kafka_client import KafkaClient
from cdc_reconcile.run import RunSettings, TableRun

PROG = "compact_cdc"


def parse_args(argv: list[str] | None = None):
    conf = job_conf.submitted_conf()
    parser = job_parser(PROG, __doc__.splitlines()[0], conf)
    parser.add_argument(
        "--bootstrap-servers", help="Kafka bootstrap servers (default: bootstrap.servers of the Kafka config)"
    )
    parser.add_argument(
        "--kafka-config",
        default=job_conf.setting(conf, job_conf.KAFKA_CONFIG),
        help=f"the Kafka client properties as JSON in librdkafka names (default: Spark conf {job_conf.KAFKA_CONFIG}, "
        "else $CDC_KAFKA_CONFIG; prefer either for secrets, a command line is visible to every user of the host)",
    )
    parser.add_argument("--starting-offsets", help="Spark offset JSON; instead of the sealed range in --state-dsn")
    parser.add_argument("--ending-offsets", help="Spark offset JSON; instead of the sealed range in --state-dsn")
    flag(parser, "--full-rescan", "the range is the whole topic: fold the table from it alone")
    parser.add_argument(
        "--kafka-timeout", type=float, default=60.0, help="seconds to wait for the broker before giving up"
    )
    return parser.parse_args(argv)


def kafka_client(args: argparse.Namespace) -> KafkaClient:
    """The Kafka connection: ``--bootstrap-servers`` over the config's ``bootstrap.servers``, plus its properties."""
    return KafkaClient.from_json(args.kafka_config or "", bootstrap=args.bootstrap_servers)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    def compact(table: TableConfig) -> int:
        kafka = kafka_client(args)
        settings = RunSettings(
            lake_root=args.lake_root,
            state_dsn=args.state_dsn,
            kafka=kafka,
        )
        run = TableRun(table, args.run_id, settings)
        if args.starting_offsets and args.ending_offsets:
            offsets = (args.starting_offsets, args.ending_offsets)
        elif args.state_dsn:
            offsets = run.sealed_range().as_spark_json()
        else:
            raise InputError("give --state-dsn or both --starting-offsets and --ending-offsets")
        # an unreachable broker gets one line naming it, not Spark's stack trace a minute later
        kafka_offsets.list_partitions(kafka, table.topic, timeout=args.kafka_timeout)
        with spark_run(PROG, table, args, settings) as run:
            summary = run.compact(full_rescan=args.full_rescan, offsets=offsets)
        print(summary_line(summary))
        return EXIT_DONE

    return run_job(PROG, args, compact)


if __name__ == "__main__":
    sys.exit(main())
