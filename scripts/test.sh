#!/usr/bin/env bash
# README command (b): install what is missing, lint, then run every test. The integration tests
# start their own embedded stack (own ports and run folder) and stop it when they finish.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not integration"`.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$ROOT/scripts/setup.sh"
cd "$ROOT"
.venv/bin/ruff check .
.venv/bin/lint-imports --no-logo
# Fault scenarios marked `slow` run with `bash scripts/faults.sh` (or `-m slow`). A later -m in "$@"
# overrides this one. Two xdist workers: the integration tests are one group on one worker (they share
# the stack), the unit tests run on both (tests/conftest.py); CDC_TEST_WORKERS=0 runs everything in
# this process. The 30 slowest tests are listed at the end: CI gives the command 90 minutes.
exec .venv/bin/python -m pytest -n "${CDC_TEST_WORKERS:-2}" --dist loadgroup --timeout=1800 --durations=30 \
  -m "not slow" "$@"
