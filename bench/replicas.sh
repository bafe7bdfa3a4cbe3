#!/usr/bin/env bash
# bench/replicas.sh — one database, one process or three: RUNS due no-op
# demo runs inserted in one statement (no HTTP: bench/loadgen.c, mode
# drain), then runs/s until the last one completed, first with one opsrun
# process of WORKERS workers, then with three processes of WORKERS workers
# each (the same cluster, a fresh database each time). On one machine the
# three processes share its cores with PostgreSQL, so the figure says what
# the database lets replicas do together, not what three machines would.
# Usage: bench/replicas.sh [RUNS] [WORKERS]   (defaults 20000, 16)
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."
. bench/lib.sh
RUNS=${1:-20000}
WORKERS=${2:-16}
OUT=bench/out
mkdir -p "$OUT"

bench_build -- opsrun opsrun_loadgen

DATA=$(mktemp -d /tmp/opsrun-replicas.XXXXXX)
chmod 755 "$DATA"
PIDS=()
stop_all() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
    PIDS=()
}
cleanup() {
    stop_all
    bench_cluster_destroy "$DATA"
    rm -rf "$DATA"
}
trap cleanup EXIT
bench_cluster "$DATA"
# A poll far longer than a drain's set-up: no process claims before the
# NOTIFY that starts the clock (bench/loadgen.c, mode drain).
echo '{"queue": {"poll_interval_ms": 120000}}' >"$DATA/config.json"

# drain N: N processes on a fresh database, then the drain.
drain() {
    local n=$1 i port url
    scripts/pg.sh createdb "$DATA/pg" "rep$n" >/dev/null
    url=$(scripts/pg.sh url "$DATA/pg" "rep$n")
    build/opsrun migrate --database-url "$url" 2>/dev/null
    for ((i = 0; i < n; i++)); do
        port=$((18190 + i))
        build/opsrun serve --config "$DATA/config.json" --database-url "$url" \
            --listen "127.0.0.1:$port" --workers "$WORKERS" \
            --log-level warn 2>"$OUT/replicas-$n-$i.log" &
        PIDS+=($!)
        bench_wait_ready "http://127.0.0.1:$port"
    done
    sleep 1
    echo "== drain: $RUNS runs, $n process(es) x $WORKERS workers"
    build/opsrun_loadgen drain http://127.0.0.1:18190 "$url" "$RUNS" | tee "$OUT/replicas-$n.txt"
    stop_all
}

drain 1
drain 3
ONE=$(awk -F= '/^drain_runs_per_s=/ {print $2}' "$OUT/replicas-1.txt")
THREE=$(awk -F= '/^drain_runs_per_s=/ {print $2}' "$OUT/replicas-3.txt")
echo
echo "== summary"
echo "1 process:    $ONE runs/s"
echo "3 processes:  $THREE runs/s"
awk -v a="$THREE" -v b="$ONE" 'BEGIN {printf "ratio 3/1:    %.2f\n", a / b}'
