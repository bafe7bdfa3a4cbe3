#!/usr/bin/env bash
# bench/prepared.sh — what db.prepared_statements: false costs: no-op demo
# runs/s end to end through HTTP (bench/loadgen.c, mode throughput) with
# named prepared statements (the default) and with unnamed ones (what a
# transaction-pooling proxy needs), alternated ROUNDS times on one durable
# cluster, a fresh server and database per round; prints the median of
# each and their ratio. Both talk to PostgreSQL directly: the figure is the
# option's own cost, not a pooler's.
# Usage: bench/prepared.sh [RUNS] [CLIENTS] [ROUNDS]   (defaults 4000, 8, 3)
#   WORKERS=N (default 8) engine workers; PORT=N (default 18191)
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."
. bench/lib.sh
RUNS=${1:-4000}
CLIENTS=${2:-8}
ROUNDS=${3:-3}
WORKERS=${WORKERS:-8}
PORT=${PORT:-18191}
OUT=bench/out
mkdir -p "$OUT"

bench_build -- opsrun opsrun_loadgen

DATA=$(mktemp -d /tmp/opsrun-prepared.XXXXXX)
chmod 755 "$DATA"
PID=""
cleanup() {
    [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true
    bench_cluster_destroy "$DATA"
    rm -rf "$DATA"
}
trap cleanup EXIT

bench_cluster "$DATA"
ADMIN=${DB%/bench*}/postgres${DB#*/bench}

# One round: a fresh database, a server with prepared_statements $1, RUNS
# runs; prints runs/s.
round() {
    local db
    psql -qAtX "$ADMIN" -c "DROP DATABASE IF EXISTS prep WITH (FORCE)" -c "CREATE DATABASE prep"
    db=${DB/\/bench/\/prep}
    printf '{"limits": {"submit_rate_per_s": 0}, "db": {"prepared_statements": %s}}\n' "$1" \
        >"$DATA/config.json"
    build/opsrun serve --config "$DATA/config.json" --database-url "$db" \
        --listen "127.0.0.1:$PORT" --workers "$WORKERS" --log-level warn \
        2>>"$OUT/prepared-serve.log" &
    PID=$!
    bench_wait_ready "http://127.0.0.1:$PORT" 300
    sleep 1
    build/opsrun_loadgen throughput "http://127.0.0.1:$PORT" "$db" "$RUNS" "$CLIENTS" 1 \
        >"$OUT/prepared-$1-$2.txt"
    kill "$PID"
    wait "$PID" 2>/dev/null || true
    PID=""
    awk -F= '/^runs_per_s=/ {print $2}' "$OUT/prepared-$1-$2.txt"
}

median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

: >"$OUT/prepared-serve.log"
NAMED=()
UNNAMED=()
echo "== $ROUNDS rounds of $RUNS no-op demo runs, $CLIENTS HTTP clients, $WORKERS workers"
for ((i = 1; i <= ROUNDS; i++)); do
    NAMED+=("$(round true "$i")")
    UNNAMED+=("$(round false "$i")")
    echo "round $i: prepared_statements true ${NAMED[-1]} runs/s, false ${UNNAMED[-1]} runs/s"
done
N=$(printf '%s\n' "${NAMED[@]}" | median)
U=$(printf '%s\n' "${UNNAMED[@]}" | median)
echo
echo "== summary (medians)"
echo "runs/s, db.prepared_statements true:   $N"
echo "runs/s, db.prepared_statements false:  $U"
awk -v u="$U" -v n="$N" 'BEGIN {printf "ratio false/true:                      %.2f\n", u / n}'
