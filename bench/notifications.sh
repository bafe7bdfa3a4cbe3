#!/usr/bin/env bash
# bench/notifications.sh — the figures of notifications, each beside a
# baseline measured in the same run on the same durable cluster:
#   - delivery lateness: RATE (default 100) no-op demo runs a second, each
#     notifying a webhook on success, for SECONDS (default 30): for every
#     delivery, its arrival at the receiver minus the run's completed_at
#     (the transition's commit), p50/p99/max in ms, and whether each came
#     once. The receiver is bench/hooksink.c (C, cheap, so it takes little
#     of the machine opsrun and PostgreSQL share). Baselines: the same
#     receiver's round trip for a direct POST (bench/notify_client.py
#     post), and the pickup latency of a plain submission on the same idle
#     server (loadgen pickup);
#   - a slow receiver's effect on other run types: end-to-end runs/s of the
#     demo type while another type's notifications hang on a receiver that
#     answers after 15 s (every slot of its notifier busy, 10 s timeouts,
#     hundreds waiting), against the same server with none, alternated
#     ROUNDS times (default 3) on fresh databases; the ratio of the medians;
#   - what notifying costs the run path: runs/s of the demo type notifying
#     a fast receiver of every success, against the demo type without
#     rules, alternated the same way.
# Usage: bench/notifications.sh [SECONDS] [ROUNDS]   (RATE=N, RUNS=N runs per round, default 6400)
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."
. bench/lib.sh
SECS=${1:-30}
ROUNDS=${2:-3}
RATE=${RATE:-100}
RUNS=${RUNS:-6400}
OUT=bench/out
PORT=18193
RPORT=18194
URL=http://127.0.0.1:$PORT
HOOK=http://127.0.0.1:$RPORT
mkdir -p "$OUT"

bench_build python3 -- opsrun opsrun_loadgen opsrun_hooksink

DATA=$(mktemp -d /tmp/opsrun-bench-notify.XXXXXX)
chmod 755 "$DATA"
PID=""
RPID=""
stop() {
    if [ -n "$PID" ]; then
        kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true
        PID=""
    fi
}
cleanup() {
    stop
    [ -z "$RPID" ] || kill "$RPID" 2>/dev/null || true
    bench_cluster_destroy "$DATA"
    rm -rf "$DATA"
}
trap cleanup EXIT
bench_cluster "$DATA"

: >"$DATA/received.txt"
build/opsrun_hooksink "$RPORT" "$DATA/received.txt" &
RPID=$!
for _ in $(seq 50); do
    python3 bench/notify_client.py post "$RPORT" 1 >/dev/null 2>&1 && break
    sleep 0.1
done
if ! kill -0 "$RPID" 2>/dev/null; then
    echo "notifications.sh: the receiver did not start (port $RPORT taken?)" >&2
    exit 1
fi

# serve DB CONFIG: opsrun on PORT, in the background.
serve() {
    build/opsrun serve --config "$2" --database-url "$1" --listen "127.0.0.1:$PORT" \
        --workers 16 --log-level warn 2>>"$OUT/notifications-serve.log" &
    PID=$!
    bench_wait_ready "$URL" 200
}

# median over the "round=R NAME runs_per_s=V" lines of FILE, for NAMES A and B.
medians() {
    awk -v a="$2" -v b="$3" '{split($3, x, "="); v[$2] = v[$2] " " x[2]}
     function median(s,  n, x, i, j, t) { n = split(s, x, " ");
         for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (x[j] < x[i]) { t = x[i]; x[i] = x[j]; x[j] = t }
         return n % 2 ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2 }
     END { p = median(v[a]); q = median(v[b]);
           printf "median_%s_runs_per_s=%d\nmedian_%s_runs_per_s=%d\n%s_over_%s=%.2f\n", a, p, b, q, b, a, q / p }' "$1"
}

echo "== delivery lateness: $RATE runs/s notifying a webhook, for $SECS s"
cat >"$DATA/hooked.json" <<EOF
{"limits": {"submit_rate_per_s": 0},
 "notifiers": {"hook": {"kind": "webhook", "url": "$HOOK/hook", "max_in_flight": 8}},
 "run_types": {"demo": {"notify": [{"on": ["succeeded"], "to": "hook"}]}}}
EOF
DB=$(bench_db "$DATA" lateness)
serve "$DB" "$DATA/hooked.json"
: >"$DATA/received.txt" # the sink appends: truncating keeps its descriptor valid
python3 bench/notify_client.py pace "$URL" "$RATE" "$SECS" | tee "$OUT/notifications-pace.txt"
want=$(sed -n 's/^submitted=//p' "$OUT/notifications-pace.txt")
for _ in $(seq 300); do
    [ "$(wc -l <"$DATA/received.txt")" -ge "$want" ] && break
    sleep 0.1
done
sleep 1
stop
python3 bench/notify_client.py stats "$DATA/received.txt" | tee "$OUT/notifications-lateness.txt"
echo "expected_deliveries=$want" | tee -a "$OUT/notifications-lateness.txt"
echo "-- baselines: a direct POST to the receiver; pickup of a plain submission, idle"
python3 bench/notify_client.py post "$RPORT" 500 | tee "$OUT/notifications-post.txt"
echo '{"limits": {"submit_rate_per_s": 0}}' >"$DATA/plain.json"
DB=$(bench_db "$DATA" pickup)
serve "$DB" "$DATA/plain.json"
build/opsrun_loadgen pickup "$URL" "$DB" 200 | tee "$OUT/notifications-pickup.txt"
stop

echo "== a slow receiver beside: $RUNS demo runs, 16 clients, $ROUNDS rounds"
cat >"$DATA/slow.json" <<EOF
{"limits": {"submit_rate_per_s": 0},
 "notifiers": {"slow": {"kind": "webhook", "url": "$HOOK/sleep/15000/slow", "timeout_ms": 10000}},
 "run_types": {"noisy": {"action": "simulate", "notify": [{"on": ["*"], "to": "slow"}]}}}
EOF
: >"$OUT/notifications-slow.txt"
for ((r = 1; r <= ROUNDS; r++)); do
    for conf in plain slow; do
        DB=$(bench_db "$DATA" "slow_${conf}_$r")
        serve "$DB" "$DATA/$conf.json"
        if [ "$conf" = slow ]; then
            body=$(python3 -c 'import json; print(json.dumps([{"alert_type": "noisy", "data":
                {"duration_ms": 0, "steps": 0, "i": i}} for i in range(300)]))')
            curl -sf -H 'Content-Type: application/json' -d "$body" "$URL/alerts" >/dev/null
            sleep 2 # the noisy runs end; their notifications hang or wait
        fi
        v=$(build/opsrun_loadgen throughput "$URL" "$DB" "$RUNS" 16 | sed -n 's/^runs_per_s=//p')
        echo "round=$r $conf runs_per_s=$v" | tee -a "$OUT/notifications-slow.txt"
        if [ "$conf" = slow ]; then
            psql -qAt "$DB" -c "SELECT 'notifications_waiting=' || count(*) FROM notifications" |
                tee -a "$OUT/notifications-slow-waiting.txt"
        fi
        stop
    done
done
medians "$OUT/notifications-slow.txt" plain slow | tee "$OUT/notifications-slow-summary.txt"

echo "== what notifying costs: $RUNS demo runs notifying a fast receiver vs none, $ROUNDS rounds"
: >"$OUT/notifications-cost.txt"
for ((r = 1; r <= ROUNDS; r++)); do
    for conf in plain hooked; do
        DB=$(bench_db "$DATA" "cost_${conf}_$r")
        serve "$DB" "$DATA/$conf.json"
        v=$(build/opsrun_loadgen throughput "$URL" "$DB" "$RUNS" 16 | sed -n 's/^runs_per_s=//p')
        echo "round=$r $conf runs_per_s=$v" | tee -a "$OUT/notifications-cost.txt"
        stop
    done
done
medians "$OUT/notifications-cost.txt" plain hooked | tee "$OUT/notifications-cost-summary.txt"
