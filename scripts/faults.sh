#!/usr/bin/env bash
# The fault matrix: install what is missing, then run every fault scenario on the runner's own fresh
# embedded stack (ports 25492 / 29152 / 29153 / 28143, run folder .run/faults), 3 times by default,
# stopping the stack after each repetition; scenarios 9-11 (the Spark cluster's and HDFS's faults) run
# after the others on a fresh stack that also runs HDFS and the Spark standalone cluster
# (`--scenario local` or `--scenario cluster` runs one group). Results: test-artifacts/faults/<timestamp>.json and .md,
# and test-artifacts/faults/latest.md. Extra arguments go to `cdc-faults run` (`python -m cdc_dev.faults run`), e.g.
# `bash scripts/faults.sh --scenario lost_events --repeat 1`.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$ROOT/scripts/setup.sh"
cd "$ROOT"
exec .venv/bin/python -m cdc_dev.faults run --scenario all --repeat 3 --out "$ROOT/test-artifacts/faults" "$@"
