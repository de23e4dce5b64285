#!/usr/bin/env bash
# The project's set-up and the benchmark's own packages (DuckDB, datacompy), installed once per
# bench/requirements.txt: called by bench/run.sh and bench/diff_scale.sh.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$ROOT/scripts/setup.sh"
stamp=$(sha256sum "$ROOT/bench/requirements.txt" | cut -d' ' -f1)
if [ "$(cat "$ROOT/.venv/.cdc-bench-stamp" 2>/dev/null)" != "$stamp" ]; then
  "$ROOT/.venv/bin/python" -m pip install -q -r "$ROOT/bench/requirements.txt" -c "$ROOT/constraints.txt"
  echo "$stamp" > "$ROOT/.venv/.cdc-bench-stamp"
fi
