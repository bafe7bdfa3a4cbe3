#!/usr/bin/env bash
# bench/reload.sh — what reloading the configuration costs submissions:
# no-op demo runs submitted at a steady RATE/s (default 500) for SECONDS
# (default 30) while the configuration is reloaded 10 times a second
# (POST /admin/reload from one thread of the loadgen, the file switching
# between two valid versions that differ in a run type, so every reload
# swaps the configuration), against
# the same load without reloads, alternated PAIRS times (default 3) on
# one server and one durable cluster. Prints, per step, the requests, those
# not answered 202, the round trip's p50/p99/max, and the acknowledged runs
# never completed (lost), and with reloads the reloads, those not answered
# 200 and their round trip; then the p99 ratio (reloads ÷ none) of each
# pair and their median.
# Usage: bench/reload.sh [SECONDS] [RATE] [PAIRS]
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."
. bench/lib.sh
SECS=${1:-30}
RATE=${2:-500}
PAIRS=${3:-3}
CLIENTS=${CLIENTS:-32}
OUT=bench/out
PORT=18193
URL=http://127.0.0.1:$PORT
mkdir -p "$OUT"

bench_build -- opsrun opsrun_loadgen

DATA=$(mktemp -d /tmp/opsrun-bench-reload.XXXXXX)
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

# config N: the same configuration but for one run type's step count.
config() {
    printf '{"limits": {"submit_rate_per_s": 0}, "queue": {"max_running": 400},'
    printf ' "run_types": {"other": {"action": "simulate", "params": {"steps": %d}}}}\n' "$1"
}
config 1 >"$DATA/c.json"
build/opsrun serve --config "$DATA/c.json" --database-url "$DB" --listen "127.0.0.1:$PORT" \
    --workers 16 --log-level warn 2>>"$OUT/reload-serve.log" &
PID=$!
bench_wait_ready "$URL" 200

# step NAME [reload]: one paced measurement, with the loadgen reloading
# the configuration 10 times a second meanwhile when asked; its lines go
# to $OUT/reload-NAME.txt.
step() {
    if [ "${2:-}" = reload ]; then
        LOADGEN_RELOAD_FILE=$DATA/c.json LOADGEN_RELOAD_A=$(config 2) LOADGEN_RELOAD_B=$(config 1) \
            build/opsrun_loadgen paced "$URL" "$DB" "$SECS" "$RATE" "$CLIENTS" \
            >"$OUT/reload-$1.txt" || true
    else
        build/opsrun_loadgen paced "$URL" "$DB" "$SECS" "$RATE" "$CLIENTS" \
            >"$OUT/reload-$1.txt" || true
    fi
    sed "s/^/  $1 /" "$OUT/reload-$1.txt"
}

val() {
    sed -n "s/^$2=//p" "$OUT/reload-$1.txt"
}

echo "== $RATE submissions/s for $SECS s, without and with 10 reloads/s, $PAIRS pairs"
ratios=()
for ((p = 1; p <= PAIRS; p++)); do
    step "none-$p"
    step "reloads-$p" reload
    ratios+=("$(awk -v a="$(val "reloads-$p" paced_p99_ms)" -v b="$(val "none-$p" paced_p99_ms)" \
        'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')")
done
echo "p99 ratio (reloads / none) per pair: ${ratios[*]}"
printf '%s\n' "${ratios[@]}" | sort -n | awk '{ v[NR] = $1 } END { printf "p99 ratio median: %s\n", v[int((NR + 1) / 2)] }'
