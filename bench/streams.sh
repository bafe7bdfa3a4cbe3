#!/usr/bin/env bash
# bench/streams.sh — figures for the server-sent-event streams (GET /stream),
# each beside a baseline measured in the same run on the same machine (the
# machines are noisy, so only the ratios compare across runs):
#   - event delivery latency, commit -> client, p50/p99, at 1 and at MANY
#     subscribers, against PostgreSQL's own LISTEN/NOTIFY delivery of the same
#     commits to a plain libpq connection in the same client process;
#   - RSS and thread count of the server with IDLE idle subscribers.
# Usage: bench/streams.sh [EVENTS] [INTERVAL_MS] [MANY] [IDLE]
#        (defaults 300, 20, 1000, 2000)
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."
. bench/lib.sh
EVENTS=${1:-300}
INTERVAL=${2:-20}
MANY=${3:-1000}
IDLE=${4:-2000}
PORT=18182
URL=http://127.0.0.1:$PORT
OUT=bench/out
mkdir -p "$OUT"

# Every stream is a socket in this script's client and in the server (which
# raises its own soft limit to the hard one): lift the soft limit.
HARD=$(ulimit -Hn)
if [ "$HARD" = unlimited ] || [ "$HARD" -gt 20000 ]; then ulimit -n 20000; else ulimit -n "$HARD"; fi
if [ "$(ulimit -n)" -lt $((IDLE + 100)) ]; then
    echo "streams.sh: ulimit -n is $(ulimit -n), too low for $IDLE streams" >&2
    exit 1
fi

bench_build -- opsrun opsrun_ssebench

DATA=$(mktemp -d /tmp/opsrun-streams.XXXXXX)
chmod 755 "$DATA"
PID=""
cleanup() {
    if [ -n "$PID" ] && kill "$PID" 2>/dev/null; then wait "$PID" 2>/dev/null || true; fi
    bench_cluster_destroy "$DATA"
    rm -rf "$DATA"
}
trap cleanup EXIT

bench_cluster "$DATA"

# Every stream comes from 127.0.0.1 and the one tenant: no per-client limits.
echo '{"http": {"max_connections_per_ip": 0}, "limits": {"streams_per_tenant": 0}}' \
    >"$DATA/config.json"
build/opsrun serve --config "$DATA/config.json" --database-url "$DB" --listen 127.0.0.1:$PORT \
    --log-level warn 2>"$OUT/streams-serve.log" &
PID=$!
bench_wait_ready "$URL" || { echo "streams.sh: the server did not get ready" >&2; exit 1; }
sleep 2

FAILED=()
echo "== idle streams: RSS and threads of the server at 0 and $IDLE subscribers"
build/opsrun_ssebench rss "$URL" "$PID" "$IDLE" | tee "$OUT/streams-rss.txt" || FAILED+=(rss)
for N in 1 "$MANY"; do
    echo "== delivery latency, $N subscriber(s): $EVENTS events, one every $INTERVAL ms"
    build/opsrun_ssebench latency "$URL" "$DB" "$N" "$EVENTS" "$INTERVAL" |
        tee "$OUT/streams-latency-$N.txt" || FAILED+=("latency-$N")
done
kill -0 "$PID" 2>/dev/null || FAILED+=("server exited")

get() { awk -F= -v k="$2" '$1 == k {print $2}' "$OUT/$1"; }
row() {
    local f=streams-latency-$1.txt
    printf '%-26s %9s %9s %9s %9s\n' "$2 subscriber(s), SSE" "$(get "$f" sse_p50_ms)" \
        "$(get "$f" sse_p99_ms)" "$(get "$f" sse_max_ms)" "$(get "$f" sse_missing)"
    printf '%-26s %9s %9s %9s %9s\n' "  same run, NOTIFY" "$(get "$f" notify_p50_ms)" \
        "$(get "$f" notify_p99_ms)" "$(get "$f" notify_max_ms)" "$(get "$f" notify_missing)"
    if [ "$1" != 1 ]; then
        printf '%-26s %9s %9s %9s\n' "  first stream per event" "$(get "$f" sse_first_p50_ms)" \
            "$(get "$f" sse_first_p99_ms)" "$(get "$f" sse_first_max_ms)"
        printf '%-26s %9s %9s %9s\n' "  last stream per event" "$(get "$f" sse_last_p50_ms)" \
            "$(get "$f" sse_last_p99_ms)" "$(get "$f" sse_last_max_ms)"
    fi
    printf '%-26s %9s %9s\n' "  ratio SSE/NOTIFY" "$(get "$f" ratio_p50)" "$(get "$f" ratio_p99)"
    printf '%-26s %9s\n' "  SSE - NOTIFY" "$(get "$f" sse_minus_notify_p50_ms)"
}
echo
echo "== summary (latency from commit to client, ms; $EVENTS events every $INTERVAL ms)"
printf '%-26s %9s %9s %9s %9s\n' "" p50 p99 max missing
row 1 1
row "$MANY" "$MANY"
R=streams-rss.txt
echo "server RSS, 0 -> $IDLE idle streams (KiB): $(get $R rss_before_kib) -> $(get $R rss_after_kib)" \
    "($(get $R rss_per_subscriber_kib) KiB per stream;" \
    "$(get $R rss_marginal_per_subscriber_kib) KiB per stream from $((IDLE / 2)) to $IDLE)"
echo "server threads, 0 -> $IDLE idle streams:   $(get $R threads_before) -> $(get $R threads_after)"
echo "server log lines at warn and above:        $(wc -l <"$OUT/streams-serve.log") ($OUT/streams-serve.log)"
sed -E 's/^[0-9T:.Z-]+ +//' "$OUT/streams-serve.log" | sort | uniq -c | sort -rn | awk 'NR <= 5'
if [ ${#FAILED[@]} -gt 0 ]; then
    echo "FAILED: ${FAILED[*]} (see $OUT/)" >&2
    exit 1
fi
