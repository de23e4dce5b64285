#!/usr/bin/env bash
# README command (b): install what is missing, lint, then run every test. The integration tests
# start their own embedded stack (own ports and run folder) and stop it when they finish.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not integration"`.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$ROOT/scripts/setup.sh"
cd "$ROOT"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/lint-imports --no-logo
# Fault scenarios marked `slow` run with `bash scripts/faults.sh` (or `-m slow`). A later -m in "$@"
# overrides this one. The 30 slowest tests are listed at the end: CI gives the command 90 minutes.
PYTEST=(.venv/bin/python -m pytest --timeout=1800 --durations=30 -m "not slow")
if [ "$#" -gt 0 ]; then
  exec "${PYTEST[@]}" "$@"
fi
# Everything: the unit tests (no service, one local Spark) run in a second pytest beside the integration
# tests, which share one embedded stack and run in order; on 2 cores the unit tests mostly use the CPU
# the integration tests leave while they wait on Kafka, Debezium and Airflow. The unit run's output is
# printed when both are done (and kept in test-artifacts/unit-tests.log).
mkdir -p test-artifacts
# niced: the integration tests are the longer path, and their waits have deadlines
nice -n 10 "${PYTEST[@]}" tests/unit > test-artifacts/unit-tests.log 2>&1 &
unit=$!
trap 'kill "$unit" 2>/dev/null || true' EXIT
integration_status=0
"${PYTEST[@]}" tests/integration || integration_status=$?
unit_status=0
wait "$unit" || unit_status=$?
trap - EXIT
echo "================================ unit tests ================================"
cat test-artifacts/unit-tests.log
echo "integration tests: exit ${integration_status}; unit tests: exit ${unit_status}"
[ "$integration_status" -eq 0 ] && [ "$unit_status" -eq 0 ]
