#!/usr/bin/env bash
# bench/lateness.sh — how late due runs start (issue 14): delayed
# submissions (run_at ahead) and retries after their backoff, on an
# otherwise idle Release build with the default poll interval (1 s) against a
# durable cluster. The start of the attempt that was due minus its run_at,
# both stamped by PostgreSQL, p50/p99/max. The figure to compare it with is
# the poll interval: a run found only by the periodic claim is up to that
# late.
# Usage: bench/lateness.sh [SAMPLES] [WORKERS]   (defaults 200, 8)
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."
. bench/lib.sh
SAMPLES=${1:-200}
WORKERS=${2:-8}
OUT=bench/out
mkdir -p "$OUT"

bench_build -- opsrun opsrun_loadgen

DATA=$(mktemp -d /tmp/opsrun-lateness.XXXXXX)
chmod 755 "$DATA"
PID=""
cleanup() {
    [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true
    bench_cluster_destroy "$DATA"
    rm -rf "$DATA"
}
trap cleanup EXIT

bench_cluster "$DATA"

echo '{"limits": {"submit_rate_per_s": 0}}' >"$DATA/config.json"
build/opsrun serve --config "$DATA/config.json" --database-url "$DB" --listen 127.0.0.1:18184 \
    --workers "$WORKERS" --log-level warn 2>"$OUT/lateness-serve.log" &
PID=$!
bench_wait_ready http://127.0.0.1:18184
sleep 1

echo "== lateness ($SAMPLES delayed runs, $SAMPLES retries, $WORKERS workers, poll 1 s)"
build/opsrun_loadgen lateness http://127.0.0.1:18184 "$DB" "$SAMPLES" "$SAMPLES" | tee "$OUT/lateness.txt"
