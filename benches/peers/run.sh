#!/usr/bin/env bash
# Peer comparison: DuckDB and DataFusion run the tumbling count+sum of
# pipeline (c) over the same Parquet files, single-threaded.
#   cargo bench -p weir-benches --bench throughput   # writes the files once
#   bash benches/peers/run.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
data="${1:-$here/../../target/weir-bench/events}"
venv="$here/../../target/peers-venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet duckdb datafusion pyarrow
fi
"$venv/bin/python" "$here/peers.py" "$data"
