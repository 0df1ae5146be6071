#!/usr/bin/env bash
# Bounded fuzzing of Weir's input surfaces with cargo fuzz (libFuzzer): the
# SQL front end, job-graph JSON with its validation, the Flight control-frame
# codec, and the CSV, JSON and Parquet readers. Each target runs SECONDS (default
# 60) from its seeds (fuzz/seeds/TARGET; the SQL target's are made from the
# golden cases and Nexmark queries) plus the corpus kept under the target
# directory; a crash, a hang (>10 s on one input) or a leak of memory
# past 4 GiB fails the script, and the input is left in fuzz/artifacts/.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift || true
target="${CARGO_TARGET_DIR:-target}"
mkdir -p "$target"
target="$(cd "$target" && pwd)"
# cargo-fuzz from crates.io, installed once into the target directory.
tools="$target/tools"
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  if [ ! -x "$tools/bin/cargo-fuzz" ]; then
    cargo install cargo-fuzz --locked --version 0.13.2 --root "$tools" --quiet
  fi
  export PATH="$tools/bin:$PATH"
fi
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(sql_front_end job_graph_json control_frame csv_reader json_reader parquet_reader)
fi
# Debug build with coverage instrumentation and no sanitizer: Weir is safe
# Rust, so panics, aborts, hangs and runaway memory are what is looked for;
# a debug build compiles in a third of the time and keeps overflow checks.
cargo fuzz build --dev --sanitizer none --target-dir "$target/fuzz"
# The SQL seeds are the golden cases and the Nexmark queries (each with the
# Nexmark DDL in front), made fresh so they follow the suite.
sql_seeds="$target/fuzz-seeds/sql_front_end"
rm -rf "$sql_seeds" && mkdir -p "$sql_seeds"
for f in sql/tests/golden/*.sql; do
  sed -e 's#${OUT}#/tmp/weir-fuzz-out#g' -e 's#${GOLDEN}#sql/tests/golden#g' "$f" \
    >"$sql_seeds/$(basename "$f")"
done
for f in sql/nexmark/q*.sql; do
  cat sql/nexmark/ddl.sql "$f" | sed -e 's#${TPS}#10000#g' -e 's#${EVENTS_NUM}#1000#g' \
    >"$sql_seeds/nexmark_$(basename "$f")"
done
seeds() {
  if [ "$1" = sql_front_end ]; then echo "$sql_seeds"; else echo "fuzz/seeds/$1"; fi
}
summary=()
for t in "${targets[@]}"; do
  corpus="$target/fuzz-corpus/$t"
  mkdir -p "$corpus"
  log="$target/fuzz-$t.log"
  if ! cargo fuzz run --dev --sanitizer none --target-dir "$target/fuzz" "$t" \
      "$corpus" "$(seeds "$t")" -- \
      -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -max_len=65536 \
      -print_final_stats=1 >"$log" 2>&1; then
    tail -n 60 "$log" >&2
    echo "fuzz target $t failed; the input is in fuzz/artifacts/$t/" >&2
    exit 1
  fi
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  summary+=("$t: ${runs:-?} executions in ${seconds} s, no crash")
done
printf '%s\n' "${summary[@]}"
