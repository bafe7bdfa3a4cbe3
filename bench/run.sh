#!/usr/bin/env bash
# bench/run.sh — end-to-end figures for issue 2, each beside a baseline
# measured in the same run on the same machine (the machines are noisy, so
# only the ratios compare across runs):
#   - no-op demo runs per second through HTTP, against pgbench running the
#     three single-row transactions a durable queue needs per run;
#   - pickup latency (submit -> started, stamped by PostgreSQL) p50/p99 on an
#     idle service, against a bare GET /livez round trip;
#   - idle RSS of the process.
# Usage: bench/run.sh [RUNS] [CLIENTS]   (defaults 5000, 8); WORKERS=N sets
#        the server's --workers (default 8)
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."
RUNS=${1:-5000}
CLIENTS=${2:-8}
WORKERS=${WORKERS:-8}
OUT=bench/out
mkdir -p "$OUT"

bash scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DOPSRUN_TESTS=OFF >/dev/null
cmake --build build -j2 --target opsrun opsrun_loadgen >/dev/null

DATA=$(mktemp -d /tmp/opsrun-bench.XXXXXX)
chmod 755 "$DATA"
PID=""
cleanup() {
    [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true
    scripts/pg.sh destroy "$DATA/pg" >/dev/null 2>&1 || true
    rm -rf "$DATA"
}
trap cleanup EXIT

# A durable cluster (fsync on), as a user would run it.
scripts/pg.sh start "$DATA/pg" >/dev/null
scripts/pg.sh createdb "$DATA/pg" bench >/dev/null
DB=$(scripts/pg.sh url "$DATA/pg" bench)
PGBENCH=$(ls -d /usr/lib/postgresql/*/bin/pgbench | sort -V | tail -n 1)

# Every loadgen client submits from 127.0.0.1: no per-caller rate limit.
echo '{"limits": {"submit_rate_per_s": 0}}' >"$DATA/config.json"
build/opsrun serve --config "$DATA/config.json" --database-url "$DB" --listen 127.0.0.1:18181 \
    --workers "$WORKERS" --log-level warn 2>"$OUT/serve.log" &
PID=$!
for _ in $(seq 100); do curl -sf http://127.0.0.1:18181/readyz >/dev/null && break; sleep 0.1; done
sleep 2
RSS_IDLE=$(awk '/VmRSS/ {print $2}' "/proc/$PID/status")

echo "== pickup latency (idle service, 200 samples)"
build/opsrun_loadgen pickup http://127.0.0.1:18181 "$DB" 200 | tee "$OUT/pickup.txt"
echo "== throughput ($RUNS no-op demo runs, $CLIENTS HTTP clients, $WORKERS workers)"
build/opsrun_loadgen throughput http://127.0.0.1:18181 "$DB" "$RUNS" "$CLIENTS" | tee "$OUT/throughput.txt"
RSS_AFTER=$(awk '/VmRSS/ {print $2}' "/proc/$PID/status")

echo "== baseline: pgbench, 3 single-row transactions per run, $CLIENTS clients, 20 s"
psql -q "$DB" -c "CREATE TABLE bench_runs (id bigint PRIMARY KEY, status text, started_at timestamptz, completed_at timestamptz)"
"$PGBENCH" -n -f bench/baseline.sql -c "$CLIENTS" -j 2 -T 20 "$DB" 2>/dev/null | tee "$OUT/pgbench.txt" | grep -E '^tps'

RUNS_S=$(awk -F= '/^runs_per_s=/ {print $2}' "$OUT/throughput.txt")
BASE_S=$(awk '/^tps/ {print int($3)}' "$OUT/pgbench.txt")
P50=$(awk -F= '/^pickup_p50_ms=/ {print $2}' "$OUT/pickup.txt")
P99=$(awk -F= '/^pickup_p99_ms=/ {print $2}' "$OUT/pickup.txt")
R50=$(awk -F= '/^livez_rtt_p50_ms=/ {print $2}' "$OUT/pickup.txt")
echo
echo "== summary"
echo "demo runs/s end to end:      $RUNS_S"
echo "baseline runs/s (pgbench):   $BASE_S"
awk -v a="$RUNS_S" -v b="$BASE_S" 'BEGIN {printf "ratio opsrun/baseline:       %.2f\n", a / b}'
echo "pickup p50 / p99 (ms):       $P50 / $P99"
awk -v a="$P50" -v b="$R50" 'BEGIN {printf "pickup p50 / livez rtt p50:  %.1f (rtt %.2f ms)\n", a / b, b}'
echo "idle RSS (KiB):              $RSS_IDLE (after the load: $RSS_AFTER)"
