#!/usr/bin/env bash
# The benchmark of issue 6: set up, start the bench's own stack (own ports and run folder), measure,
# write bench/results/<timestamp>.json and .md, stop the stack. Options go to bench/bench.py, e.g.
#   bash bench/run.sh --sizes 100000,1000000 --repeats 3
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$ROOT/bench/install.sh"
export CDC_RUN_DIR=${CDC_BENCH_RUN_DIR:-$ROOT/.run/bench-stack}
export CDC_PG_PORT=${CDC_BENCH_PG_PORT:-25452}
export CDC_KAFKA_PORT=${CDC_BENCH_KAFKA_PORT:-29112}
export CDC_KAFKA_CONTROLLER_PORT=${CDC_BENCH_KAFKA_CONTROLLER_PORT:-29113}
export CDC_KAFKA_SASL_PORT=${CDC_BENCH_KAFKA_SASL_PORT:-29114}
export CDC_CONNECT_PORT=${CDC_BENCH_CONNECT_PORT:-28103}
export PYARROW_IGNORE_TIMEZONE=1
export CDC_SPARK_JARS=${CDC_SPARK_JARS:-$ROOT/.cache/stack/spark-jars}
cd "$ROOT"
stop_stack() { "$ROOT/.venv/bin/python" -c 'from cdc_dev.stack import Stack, StackConfig; Stack(StackConfig()).down()' || true; }
trap stop_stack EXIT
"$ROOT/.venv/bin/python" -m bench.bench "$@"
