#!/usr/bin/env bash
# The quick-start job (generator -> parse -> key_by(user) -> 1-minute tumbling
# count+sum -> Parquet) run three ways on the same machine:
#   in-process  : `weir run` with one in-process worker (local channels only)
#   2 processes : `weir run --workers 2 --processes` (one slot each; the hash
#                 exchange between them is Arrow Flight over loopback)
# Prints events/s for each and the ratio. Usage: bash benches/cluster.sh [EVENTS]
set -euo pipefail
cd "$(dirname "$0")/.."
events="${1:-50000000}"
target="${CARGO_TARGET_DIR:-target}"
cargo build --release -q -p weir -p orders_per_minute
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$target/release/orders_per_minute" --events "$events" --parallelism 2 \
  --output "$work/out" --emit-job "$work/job.json" >/dev/null
run() {
  rm -rf "$work/out"
  "$target/release/weir" run "$work/job.json" "$@" 2>&1 | sed -n 's/^ran in \([0-9.]*\) s$/\1/p'
}
best() { # best of three
  local b=""
  for _ in 1 2 3; do
    t="$(run "$@")"
    if [ -z "$b" ] || awk "BEGIN{exit !($t < $b)}"; then b="$t"; fi
  done
  echo "$b"
}
local_s="$(best --workers 1 --slots 2)"
procs_s="$(best --workers 2 --slots 1 --processes)"
awk -v n="$events" -v a="$local_s" -v b="$procs_s" 'BEGIN {
  printf "events                 %d, parallelism 2\n", n
  printf "in-process (1 worker)  %.2f s  %.1f M events/s\n", a, n / a / 1e6
  printf "2 worker processes     %.2f s  %.1f M events/s\n", b, n / b / 1e6
  printf "cross-process / in-process throughput: %.0f%%\n", 100 * a / b
}'
