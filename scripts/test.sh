#!/usr/bin/env bash
# The test suite: every Rust test, then the Python Flight client test
# (pyarrow from PyPI into a virtualenv under the target directory).
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
# Python side: pyarrow (Flight client test), moto's S3 server (the s3://
# checkpoint test) and DuckDB (the independent Nexmark check), in a
# virtualenv under the target directory.
venv="$target/py-venv"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import pyarrow.flight, moto, duckdb" 2>/dev/null; then
  if [ ! -x "$venv/bin/python" ] && ! python3 -m venv "$venv" 2>/dev/null; then
    # Debian ships venv separately.
    apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv "$venv"
  fi
  "$venv/bin/pip" install --quiet --no-cache-dir --disable-pip-version-check pyarrow 'moto[server]' duckdb
fi
export WEIR_TEST_MOTO_SERVER="$(cd "$venv/bin" && pwd)/moto_server"
# Flink 2.3 itself (PyFlink from PyPI, on the machine's Java 17), the
# reference the CSV/JSON format test compares Weir's files with; in its
# own virtualenv, as it pins its own pyarrow.
flink_venv="$target/flink-venv"
if [ ! -x "$flink_venv/bin/python" ] || ! "$flink_venv/bin/python" -c "import pyflink" 2>/dev/null; then
  python3 -m venv "$flink_venv"
  "$flink_venv/bin/pip" install --quiet --no-cache-dir --disable-pip-version-check 'apache-flink==2.3.0'
fi
export WEIR_TEST_PYFLINK="$(cd "$flink_venv/bin" && pwd)/python"
# Azurite, Azure Blob Storage's emulator (npm), for the az:// tests.
azurite="$target/tools/azurite"
if [ ! -x "$azurite/node_modules/.bin/azurite-blob" ]; then
  mkdir -p "$azurite"
  npm install --prefix "$azurite" --no-audit --no-fund --silent azurite@3.35.0
fi
export WEIR_TEST_AZURITE="$(cd "$azurite/node_modules/.bin" && pwd)/azurite-blob"

# A real Prometheus server (Debian's package) for the scrape test.
if ! command -v prometheus >/dev/null 2>&1; then
  apt-get install -y -qq prometheus >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq prometheus >/dev/null; }
fi
export WEIR_TEST_PROMETHEUS="$(command -v prometheus)"
# Headless Chromium (Debian's) driven by Playwright (npm's playwright-core,
# no browser download) for the dashboard test.
if [ ! -x /usr/bin/chromium ]; then
  apt-get install -y -qq chromium >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }
fi
playwright="$target/tools/playwright"
if [ ! -f "$playwright/node_modules/playwright-core/index.mjs" ]; then
  mkdir -p "$playwright"
  npm install --prefix "$playwright" --no-audit --no-fund --silent playwright-core@1.64.1
fi
export WEIR_TEST_PLAYWRIGHT="$(cd "$playwright/node_modules/playwright-core" && pwd)"

cargo test --workspace "$@"

cargo build -p flight_sink_demo "$@"
"$venv/bin/python" tests/python/test_flight_sink.py "$target/debug/flight_sink_demo"

# Nexmark queries against DuckDB over the same events written to Parquet,
# and against Flink 2.3 itself in streaming and batch mode (each Flink query
# costs seconds of job start-up: 60,000 events keep the check short; fewer
# leave q23 empty, since a bid's bidder id, 1000 higher as in the Java
# generator, names a person made about 1,000 persons later).
cargo build -p weir "$@"
"$venv/bin/python" tests/python/nexmark_check.py "$target/debug/weir" 60000

# Flight ingestion: a pyarrow client pushes 1 M rows into a running job,
# is killed part-way and resumes from its last acknowledged batch.
"$venv/bin/python" tests/python/test_flight_ingest.py "$target/debug/weir"

# Bounded fuzzing of the input surfaces (SQL, job-graph JSON, control
# frames, CSV, JSON and Parquet readers): WEIR_FUZZ_SECONDS per target (30).
scripts/fuzz.sh "${WEIR_FUZZ_SECONDS:-30}"
