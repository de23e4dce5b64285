#!/usr/bin/env bash
# Whole DAG runs through the scheduler (bench/dag_runs.py): set up, run each scenario on the bench's own
# stack (own ports and run folder, Airflow included), write bench/results/dag-runs-<timestamp>.json and
# .md, stop the stack. Options go to bench/dag_runs.py, e.g.
#   bash bench/dag_runs.sh --scenarios demo,hourly-1m --repeats 3
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$ROOT/scripts/setup.sh"
export CDC_RUN_DIR=${CDC_BENCH_RUN_DIR:-$ROOT/.run/bench-dag-stack}
export CDC_PG_PORT=${CDC_BENCH_PG_PORT:-25452}
export CDC_KAFKA_PORT=${CDC_BENCH_KAFKA_PORT:-29112}
export CDC_KAFKA_CONTROLLER_PORT=${CDC_BENCH_KAFKA_CONTROLLER_PORT:-29113}
export CDC_KAFKA_SASL_PORT=${CDC_BENCH_KAFKA_SASL_PORT:-29114}
export CDC_CONNECT_PORT=${CDC_BENCH_CONNECT_PORT:-28103}
export CDC_AIRFLOW_PORT=${CDC_BENCH_AIRFLOW_PORT:-28200}
export CDC_DATA_DOCS_PORT=${CDC_BENCH_DATA_DOCS_PORT:-28610}
cd "$ROOT"
stop_stack() { "$ROOT/.venv/bin/python" -c 'from cdc_dev.stack import Stack; Stack().down()' || true; }
trap stop_stack EXIT
"$ROOT/.venv/bin/python" -m bench.dag_runs "$@"
