#!/usr/bin/env bash
# bench/drain.sh — the engine's own throughput, without HTTP submission:
# RUNS due no-op demo runs inserted in one statement, then runs/s until the
# last one completed, on a Release build with WORKERS workers against a
# durable cluster (bench/loadgen.c, mode drain).
# Usage: bench/drain.sh [RUNS] [WORKERS]   (defaults 20000, 32); CONFIG='{...}'
#        adds a configuration file (e.g. '{"queue": {"claim_batch": 32}}');
#        OPSRUN=path runs another opsrun binary (e.g. one bench/pgcost.sh
#        built with BASE=REV) against this tree's loadgen; PORT=N listens
#        elsewhere (default 18185)
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."
. bench/lib.sh
RUNS=${1:-20000}
WORKERS=${2:-32}
OUT=bench/out
mkdir -p "$OUT"

bench_build -- opsrun opsrun_loadgen

DATA=$(mktemp -d /tmp/opsrun-drain.XXXXXX)
chmod 755 "$DATA"
PID=""
cleanup() {
    [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true
    bench_cluster_destroy "$DATA"
    rm -rf "$DATA"
}
trap cleanup EXIT

bench_cluster "$DATA"

# By default a poll far longer than the set-up: nothing is claimed before
# the NOTIFY that starts the clock.
LONG_POLL='{"queue": {"poll_interval_ms": 120000}}'
echo "${CONFIG:-$LONG_POLL}" >"$DATA/config.json"
OPSRUN=${OPSRUN:-build/opsrun}
"$OPSRUN" serve --config "$DATA/config.json" --database-url "$DB" --listen "127.0.0.1:${PORT:-18185}" --workers "$WORKERS" \
    --log-level warn 2>"$OUT/drain-serve.log" &
PID=$!
bench_wait_ready "http://127.0.0.1:${PORT:-18185}"
sleep 1

echo "== drain ($RUNS due no-op demo runs, $WORKERS workers)"
build/opsrun_loadgen drain "http://127.0.0.1:${PORT:-18185}" "$DB" "$RUNS" | tee "$OUT/drain.txt"
