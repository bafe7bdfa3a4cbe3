#!/usr/bin/env bash
# bench/drain.sh — the engine's own throughput, without HTTP submission:
# RUNS due no-op demo runs inserted in one statement, then runs/s until the
# last one completed, on a Release build with WORKERS workers against a
# durable cluster (bench/loadgen.c, mode drain).
# Usage: bench/drain.sh [RUNS] [WORKERS]   (defaults 20000, 32); CONFIG='{...}'
#        adds a configuration file (e.g. '{"queue": {"claim_batch": 32}}')
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."
RUNS=${1:-20000}
WORKERS=${2:-32}
OUT=bench/out
mkdir -p "$OUT"

bash scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DOPSRUN_TESTS=OFF >/dev/null
cmake --build build -j2 --target opsrun opsrun_loadgen >/dev/null

DATA=$(mktemp -d /tmp/opsrun-drain.XXXXXX)
chmod 755 "$DATA"
PID=""
cleanup() {
    [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true
    scripts/pg.sh destroy "$DATA/pg" >/dev/null 2>&1 || true
    rm -rf "$DATA"
}
trap cleanup EXIT

scripts/pg.sh start "$DATA/pg" >/dev/null
scripts/pg.sh createdb "$DATA/pg" bench >/dev/null
DB=$(scripts/pg.sh url "$DATA/pg" bench)

# By default a poll far longer than the set-up: nothing is claimed before
# the NOTIFY that starts the clock.
LONG_POLL='{"queue": {"poll_interval_ms": 120000}}'
echo "${CONFIG:-$LONG_POLL}" >"$DATA/config.json"
build/opsrun serve --config "$DATA/config.json" --database-url "$DB" --listen 127.0.0.1:18185 --workers "$WORKERS" \
    --log-level warn 2>"$OUT/drain-serve.log" &
PID=$!
for _ in $(seq 100); do curl -sf http://127.0.0.1:18185/readyz >/dev/null && break; sleep 0.1; done
sleep 1

echo "== drain ($RUNS due no-op demo runs, $WORKERS workers)"
build/opsrun_loadgen drain http://127.0.0.1:18185 "$DB" "$RUNS" | tee "$OUT/drain.txt"
