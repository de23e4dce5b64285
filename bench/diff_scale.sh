#!/usr/bin/env bash
# The diff at 10M rows against DuckDB, on a bench run's own diff input scaled N times (no stack needed):
#   bash bench/diff_scale.sh --copies 10 --repeats 3
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$ROOT/bench/install.sh"
export PYARROW_IGNORE_TIMEZONE=1
cd "$ROOT"
"$ROOT/.venv/bin/python" -m bench.diff_scale "$@"
