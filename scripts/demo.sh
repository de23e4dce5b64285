#!/usr/bin/env bash
# README command (a): install what is missing, bring the embedded stack up, write changes with the
# loader and show Debezium's events arriving in Kafka. The stack keeps running afterwards:
# `.venv/bin/cdc-stack status` reports on it, `.venv/bin/cdc-stack down` stops it.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$ROOT/scripts/setup.sh"
cd "$ROOT"
exec .venv/bin/python -m cdc_dev.demo "$@"
