#!/usr/bin/env bash
# bench/reload.sh — what reloading the configuration costs submissions:
# no-op demo runs submitted at a steady RATE/s (default 500) for SECONDS
# (default 30) while the configuration is reloaded 10 times a second
# (POST /admin/reload, the file switching between two valid versions that
# differ in a run type, so every reload swaps the configuration), against
# the same load without reloads, alternated PAIRS times (default 3) on
# one server and one durable cluster. Prints, per step, the requests, those
# not answered 202, the round trip's p50/p99/max, and the acknowledged runs
# never completed (lost); then the p99 ratio (reloads ÷ none) of each pair
# and their median.
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
RELOADER=""
cleanup() {
    [ -n "$RELOADER" ] && kill "$RELOADER" 2>/dev/null || true
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

# Reloads 10 times a second until killed, each over a file that differs
# from the last; counts what was not answered 200 in $DATA/reload-failed.
reloader() {
    local i=0 code t0 left
    : >"$DATA/reload-failed"
    t0=$(date +%s%N)
    while :; do
        config $((i % 2 + 1)) >"$DATA/c.json.tmp" && mv "$DATA/c.json.tmp" "$DATA/c.json"
        code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$URL/admin/reload" || true)
        [ "$code" = 200 ] || echo "$code" >>"$DATA/reload-failed"
        i=$((i + 1))
        # the next at t0 + i/10 s, however long this one took
        left=$(((t0 + i * 100000000 - $(date +%s%N)) / 1000))
        [ "$left" -gt 0 ] && sleep "$(printf '0.%06d' "$left")"
    done
}

# step NAME: one paced measurement; its lines go to $OUT/reload-NAME.txt.
step() {
    build/opsrun_loadgen paced "$URL" "$DB" "$SECS" "$RATE" "$CLIENTS" \
        >"$OUT/reload-$1.txt" || true
    sed "s/^/  $1 /" "$OUT/reload-$1.txt"
}

val() {
    sed -n "s/^$2=//p" "$OUT/reload-$1.txt"
}

echo "== $RATE submissions/s for $SECS s, without and with 10 reloads/s, $PAIRS pairs"
ratios=()
for ((p = 1; p <= PAIRS; p++)); do
    step "none-$p"
    before=$(curl -s "$URL/metrics" | sed -n 's/^opsrun_config_reloads_total{result="success"} //p')
    reloader &
    RELOADER=$!
    step "reloads-$p"
    kill "$RELOADER" 2>/dev/null || true
    wait "$RELOADER" 2>/dev/null || true
    RELOADER=""
    echo "  reloads-$p reloads_not_200=$(wc -l <"$DATA/reload-failed")"
    total=$(curl -s "$URL/metrics" | sed -n 's/^opsrun_config_reloads_total{result="success"} //p')
    echo "  reloads-$p server_reloads=$((total - before)) (per s: $(((total - before) / SECS)))"
    ratios+=("$(awk -v a="$(val "reloads-$p" paced_p99_ms)" -v b="$(val "none-$p" paced_p99_ms)" \
        'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')")
done
echo "p99 ratio (reloads / none) per pair: ${ratios[*]}"
printf '%s\n' "${ratios[@]}" | sort -n | awk '{ v[NR] = $1 } END { printf "p99 ratio median: %s\n", v[int((NR + 1) / 2)] }'
