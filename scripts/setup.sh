#!/usr/bin/env bash
# Install everything the two README commands need, from package registries only:
# Debian's PostgreSQL 15, Chromium and npm, a Python 3.11 virtualenv from PyPI, the Kafka/Connect/
# Debezium and HDFS jars from Maven Central and the Data Docs' CDN files from the npm registry (both
# cached under .cache/). Safe to run twice: each step checks before it works.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${CDC_CACHE_DIR:-$ROOT/.cache}
VENV=$ROOT/.venv
PG_BIN=${CDC_PG_BIN:-/usr/lib/postgresql/15/bin}
mkdir -p "$CACHE"

say() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else die "need root for: $*"; fi; }
stamp_ok() { [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; }

# 1. Debian packages: PostgreSQL 15 server (no system cluster: the stack makes its own), and Chromium
#    with its WebDriver for the browser test of the Airflow UI (a test tool's own browser download
#    cannot be fetched here; Debian's can). npm packs the Data Docs' stylesheets and scripts (step 4).
apt_missing=()
[ -x "$PG_BIN/postgres" ] || apt_missing+=(postgresql-15)
command -v mvn >/dev/null || apt_missing+=(maven)
command -v runuser >/dev/null || apt_missing+=(util-linux)
[ -x /usr/bin/chromium ] || apt_missing+=(chromium)
[ -x /usr/bin/chromedriver ] || apt_missing+=(chromium-driver)
command -v node >/dev/null || apt_missing+=(nodejs)
command -v npm >/dev/null || apt_missing+=(npm)
if [ ${#apt_missing[@]} -gt 0 ]; then
  say "installing Debian packages: ${apt_missing[*]}"
  as_root mkdir -p /etc/postgresql-common
  grep -qs '^create_main_cluster' /etc/postgresql-common/createcluster.conf \
    || echo 'create_main_cluster = false' | as_root tee -a /etc/postgresql-common/createcluster.conf >/dev/null
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${apt_missing[@]}"
fi
java_major=$(java -XshowSettings:properties -version 2>&1 | sed -n 's/.*java.specification.version = //p')
[ -n "$java_major" ] && [ "${java_major%%.*}" -ge 17 ] || die "Java 17 or newer is required (found: ${java_major:-none})"

# 2. Python virtualenv with pinned packages (requirements-dev.txt, which includes requirements.txt) and the
#    project and its development package in editable mode.
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || die "Python 3.11 is required ($PY not found; set PYTHON=/path/to/python3.11)"
[ -x "$VENV/bin/python" ] || { say "creating virtualenv $VENV"; "$PY" -m venv "$VENV"; }
py_stamp=$(cat "$ROOT/requirements.txt" "$ROOT/requirements-dev.txt" "$ROOT/constraints.txt" "$ROOT/pyproject.toml" \
  "$ROOT/dev/pyproject.toml" | sha256sum | cut -d' ' -f1)
if ! stamp_ok "$VENV/.cdc-stamp" "$py_stamp" || [ ! -x "$VENV/bin/cdc-stack" ]; then
  say "installing Python packages (requirements-dev.txt: the runtime requirements and the test tools; constraints.txt)"
  "$VENV/bin/python" -m pip install -q --upgrade pip setuptools wheel
  "$VENV/bin/python" -m pip install -q -r "$ROOT/requirements-dev.txt" -c "$ROOT/constraints.txt"
  "$VENV/bin/python" -m pip install -q --no-deps -e "$ROOT" -e "$ROOT/dev"
  echo "$py_stamp" > "$VENV/.cdc-stamp"
fi

# 3. Kafka, Kafka Connect, Log4j2 and the Debezium connector plugin from Maven Central.
mvn_stamp=$(sha256sum "$ROOT/stack/pom.xml" | cut -d' ' -f1)
if ! stamp_ok "$CACHE/stack/.cdc-stamp" "$mvn_stamp" || [ ! -d "$CACHE/stack/connect-plugins/debezium-connector-postgres" ]; then
  say "fetching Kafka and Debezium from Maven Central"
  mvn -q -B -f "$ROOT/stack/pom.xml" generate-resources -Dstack.cache="$CACHE/stack"
  echo "$mvn_stamp" > "$CACHE/stack/.cdc-stamp"
fi
# 3b. HDFS (NameNode, DataNode) from Maven Central: Hadoop at the version of pyspark's bundled client.
#     Its own pom and stamp, so changing it does not fetch Kafka again.
hadoop_pom=$(sed -n 's:.*<hadoop.version>\(.*\)</hadoop.version>.*:\1:p' "$ROOT/stack/hdfs/pom.xml")
hadoop_pyspark=$("$VENV/bin/python" -c 'import pathlib, pyspark
print(*[p.name[18:-4] for p in (pathlib.Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar")])')
[ "$hadoop_pom" = "$hadoop_pyspark" ] \
  || die "stack/hdfs/pom.xml has hadoop.version $hadoop_pom but pyspark bundles Hadoop $hadoop_pyspark: make them equal"
hdfs_stamp=$(sha256sum "$ROOT/stack/hdfs/pom.xml" | cut -d' ' -f1)
if ! stamp_ok "$CACHE/stack/hdfs-libs/.cdc-stamp" "$hdfs_stamp"; then
  say "fetching Hadoop HDFS from Maven Central"
  mvn -q -B -f "$ROOT/stack/hdfs/pom.xml" generate-resources -Dstack.cache="$CACHE/stack"
  echo "$hdfs_stamp" > "$CACHE/stack/hdfs-libs/.cdc-stamp"
fi
# 4. The files Great Expectations' Data Docs load from CDNs, from the npm registry (CDC_DATA_DOCS_ASSETS
#    names this folder for the stack and the tests); fetched again when the asset list changes.
assets_stamp=$(PYTHONPATH="$ROOT/include:$ROOT/dev" "$VENV/bin/python" -m cdc_dev.vendor_assets --print-stamp)
if ! stamp_ok "$CACHE/data-docs-assets/.cdc-stamp" "$assets_stamp"; then
  say "fetching the Data Docs assets from the npm registry"
  PYTHONPATH="$ROOT/include:$ROOT/dev" "$VENV/bin/python" -m cdc_dev.vendor_assets --target "$CACHE/data-docs-assets" >/dev/null
fi
say "ready: $("$VENV/bin/python" --version), PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}'), Java $java_major"
