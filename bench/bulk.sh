#!/usr/bin/env bash
# bench/bulk.sh — what a bulk cancel of 10,000 runs costs submissions and
# claims (POST /runs/cancel, docs/api.md "Acting on many runs"): under a
# steady load of RATE no-op demo runs/s (default 200, from 8 clients), the
# p50/p99/max of a submission's round trip, of the pickup (started_at -
# created_at, by PostgreSQL's clock: the claim side) and the claim
# statement's p99 bucket, in the windows while a bulk cancel of HELD runs
# (default 10,000, inserted straight into the table) runs, beside the same
# figures in a window of the load alone just before each (the baseline, in
# the same run); ROUNDS rounds (default 5). A Release build on a private
# durable cluster (bench/lib.sh).
# Usage: bench/bulk.sh [ROUNDS] [HELD] [RATE]   (raw figures: bench/out/bulk.txt)
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."
. bench/lib.sh
ROUNDS=${1:-5}
HELD=${2:-10000}
RATE=${3:-200}
OUT=bench/out
# A port nothing listens on (other benchmarks may run on this machine).
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
URL=http://127.0.0.1:$PORT
mkdir -p "$OUT"

bench_build -- opsrun opsrun_bulkbench

DATA=$(mktemp -d /tmp/opsrun-bench-bulk.XXXXXX)
chmod 755 "$DATA"
PID=""
cleanup() {
    if [ -n "$PID" ]; then
        kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true
    fi
    bench_cluster_destroy "$DATA"
    rm -rf "$DATA"
}
trap cleanup EXIT
bench_cluster "$DATA"

cat >"$DATA/config.json" <<JSON
{"limits": {"submit_rate_per_s": 0},
 "run_types": {"held": {"action": "simulate"}}}
JSON
build/opsrun serve --config "$DATA/config.json" --database-url "$DB" --listen "127.0.0.1:$PORT" \
    --log-level warn 2>>"$OUT/bulk-serve.log" &
PID=$!
bench_wait_ready "$URL" 200
kill -0 "$PID" 2>/dev/null || { echo "bulk.sh: opsrun did not start (bench/out/bulk-serve.log)" >&2; exit 1; }

echo "== $ROUNDS rounds: $HELD runs cancelled in bulk beside $RATE runs/s" >&2
build/opsrun_bulkbench "$URL" "$DB" "$ROUNDS" "$HELD" "$RATE" 8 3 | tee "$OUT/bulk.txt"

# The table: each figure with and without the bulk cancel.
fig() { sed -n "s/^$1=//p" "$OUT/bulk.txt"; }
printf '\n| %-28s | %10s | %10s | %6s |\n' "figure (ms)" baseline "bulk" ratio
printf '|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..30})" "$(printf -- '-%.0s' {1..12})" \
    "$(printf -- '-%.0s' {1..12})" "$(printf -- '-%.0s' {1..8})"
for f in submit_p50_ms submit_p99_ms submit_max_ms pickup_p50_ms pickup_p99_ms pickup_max_ms \
    claim_p99_le_ms; do
    b=$(fig "baseline_$f")
    k=$(fig "bulk_$f")
    r=$(awk -v b="$b" -v k="$k" 'BEGIN { if (b > 0) printf "%.2f", k / b; else print "-" }')
    printf '| %-28s | %10s | %10s | %6s |\n' "$f" "$b" "$k" "$r"
done
printf '\nbulk cancel of %s runs, per round (s): %s\n' "$HELD" "$(fig 'round[0-9]*_bulk_s' | tr '\n' ' ')"
