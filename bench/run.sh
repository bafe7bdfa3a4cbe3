#!/usr/bin/env bash
# bench/run.sh — end-to-end figures for issue 2, each beside a baseline
# measured in the same run on the same machine (the machines are noisy, so
# only the ratios compare across runs):
#   - no-op demo runs per second through HTTP, against pgbench running the
#     three single-row transactions a durable queue needs per run;
#   - pickup latency (submit -> started, stamped by PostgreSQL) p50/p99 on an
#     idle service, against a bare GET /livez round trip;
#   - idle RSS of the process.
#   - the single-row INSERT transactions/s pgbench reaches at 16 clients,
#     the ceiling of submitting runs one transaction at a time.
# Usage: bench/run.sh [RUNS] [CLIENTS]   (defaults 5000, 8)
#   WORKERS=N (default 8) engine workers; BATCH=N (default 1) submissions
#   per request (N > 1: a JSON array); OPSRUN=path serves with another
#   opsrun binary (e.g. the base build bench/pgcost.sh BASE=REV keeps).
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."
. bench/lib.sh
RUNS=${1:-5000}
CLIENTS=${2:-8}
WORKERS=${WORKERS:-8}
BATCH=${BATCH:-1}
OUT=bench/out
mkdir -p "$OUT"

bench_build -- opsrun opsrun_loadgen

DATA=$(mktemp -d /tmp/opsrun-bench.XXXXXX)
chmod 755 "$DATA"
PID=""
cleanup() {
    [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true
    bench_cluster_destroy "$DATA"
    rm -rf "$DATA"
}
trap cleanup EXIT

bench_cluster "$DATA"
PGBENCH=$(ls -d /usr/lib/postgresql/*/bin/pgbench | sort -V | tail -n 1)

# Every loadgen client submits from 127.0.0.1: no per-caller rate limit.
echo '{"limits": {"submit_rate_per_s": 0}}' >"$DATA/config.json"
"${OPSRUN:-build/opsrun}" serve --config "$DATA/config.json" --database-url "$DB" --listen 127.0.0.1:18181 \
    --workers "$WORKERS" --log-level warn 2>"$OUT/serve.log" &
PID=$!
bench_wait_ready http://127.0.0.1:18181 || true
sleep 2
RSS_IDLE=$(awk '/VmRSS/ {print $2}' "/proc/$PID/status")

echo "== pickup latency (idle service, 200 samples)"
build/opsrun_loadgen pickup http://127.0.0.1:18181 "$DB" 200 | tee "$OUT/pickup.txt"
echo "== throughput ($RUNS no-op demo runs, $CLIENTS HTTP clients, $WORKERS workers, batch $BATCH)"
build/opsrun_loadgen throughput http://127.0.0.1:18181 "$DB" "$RUNS" "$CLIENTS" "$BATCH" | tee "$OUT/throughput.txt"
RSS_AFTER=$(awk '/VmRSS/ {print $2}' "/proc/$PID/status")

echo "== baseline: pgbench, 3 single-row transactions per run, $CLIENTS clients, 20 s"
psql -q "$DB" -c "CREATE TABLE bench_runs (id bigint PRIMARY KEY, status text, started_at timestamptz, completed_at timestamptz)"
"$PGBENCH" -n -f bench/baseline.sql -c "$CLIENTS" -j 2 -T 20 "$DB" 2>/dev/null | tee "$OUT/pgbench.txt" | grep -E '^tps'

echo "== baseline: pgbench, single-row INSERT transactions, 16 clients, 20 s"
psql -q "$DB" -c "CREATE TABLE bench_insert (id bigserial PRIMARY KEY, body text)"
"$PGBENCH" -n -f bench/insert.sql -c 16 -j 2 -T 20 "$DB" 2>/dev/null | tee "$OUT/pgbench_insert.txt" | grep -E '^tps'

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
INS_S=$(awk '/^tps/ {print int($3)}' "$OUT/pgbench_insert.txt")
SUB_S=$(awk -F= '/^submit_per_s=/ {print $2}' "$OUT/throughput.txt")
S50=$(awk -F= '/^submit_p50_ms=/ {print $2}' "$OUT/throughput.txt")
S99=$(awk -F= '/^submit_p99_ms=/ {print $2}' "$OUT/throughput.txt")
echo "submissions/s (HTTP):        $SUB_S (request p50 / p99 ms: $S50 / $S99)"
echo "single-row INSERT tx/s:      $INS_S"
awk -v a="$RUNS_S" -v b="$INS_S" 'BEGIN {printf "ratio runs/s / INSERT tx/s:  %.2f\n", a / b}'
echo "pickup p50 / p99 (ms):       $P50 / $P99"
awk -v a="$P50" -v b="$R50" 'BEGIN {printf "pickup p50 / livez rtt p50:  %.1f (rtt %.2f ms)\n", a / b, b}'
echo "idle RSS (KiB):              $RSS_IDLE (after the load: $RSS_AFTER)"
