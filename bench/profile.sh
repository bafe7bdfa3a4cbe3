#!/usr/bin/env bash
# bench/profile.sh — where the server's own CPU goes under load: perf
# samples (999 Hz, call graphs) of the opsrun process only, while RUNS no-op
# demo runs are submitted over HTTP from 64 connections and executed by 32
# workers (bench/loadgen.c, mode throughput), on a Release build against a
# durable cluster. Prints perf's report by library and by symbol; the data
# stays in bench/out/perf.data for `perf report -i`.
# With WHOLE=1 it samples every process on the machine instead (perf -a;
# needs root or kernel.perf_event_paranoid <= 0) and prints the shares by
# command (opsrun, the PostgreSQL backends, loadgen, the rest) and the
# hottest symbols of PostgreSQL: the database's side of the same load.
# Usage: bench/profile.sh [RUNS]   (default 20000; installs linux-perf for perf)
#        WHOLE=1 bench/profile.sh [RUNS]
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."
. bench/lib.sh
RUNS=${1:-20000}
OUT=bench/out
mkdir -p "$OUT"
# perf comes with linux-perf; awk, not head, takes the first lines of its
# reports, so that perf never writes into a closed pipe (pipefail).
bench_build linux-perf -- opsrun opsrun_loadgen
DATA=$(mktemp -d /tmp/opsrun-profile.XXXXXX)
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
build/opsrun serve --config "$DATA/config.json" --database-url "$DB" --listen 127.0.0.1:18199 \
    --workers 32 --log-level warn 2>"$OUT/profile-serve.log" &
PID=$!
bench_wait_ready http://127.0.0.1:18199
if [ -n "${WHOLE:-}" ]; then
    perf record -F 999 -g -a -o "$OUT/perf.data" 2>/dev/null &
else
    perf record -F 999 -g -p "$PID" -o "$OUT/perf.data" 2>/dev/null &
fi
PERF=$!
sleep 1
build/opsrun_loadgen throughput http://127.0.0.1:18199 "$DB" "$RUNS" 64 | tee "$OUT/profile-load.txt"
kill -INT "$PERF"
wait "$PERF" || true
if [ -n "${WHOLE:-}" ]; then
    echo "== by command (every process on the machine)"
    perf report -i "$OUT/perf.data" --no-children --sort comm --stdio -g none 2>/dev/null |
        awk -v n=8 '/%/ && n-- > 0'
    echo "== PostgreSQL, by symbol"
    perf report -i "$OUT/perf.data" --no-children --comm postgres --percentage relative \
        --sort dso,symbol --stdio -g none 2>/dev/null | awk -v n=25 '/%/ && n-- > 0'
    exit 0
fi
echo "== by library"
perf report -i "$OUT/perf.data" --no-children --sort dso --stdio -g none 2>/dev/null | awk -v n=8 '/%/ && n-- > 0'
echo "== by symbol"
perf report -i "$OUT/perf.data" --no-children --sort dso,symbol --stdio -g none 2>/dev/null | awk -v n=20 '/%/ && n-- > 0'
