#!/usr/bin/env bash
# bench/schedules.sh — the figures of schedules and rate limits, each beside
# a baseline measured in the same run on the same durable cluster:
#   - firing lateness: 1,000 schedules "@every 1s" on one database and one
#     server for SECONDS (default 30, after 5 s of warm-up): for each slot's
#     run, created_at - slot (the scheduler) and started_at - slot (slot to
#     running), p50/p99/max in ms, by the database's clock; and how many
#     slots made no run. Baseline: the pickup latency of a plain submission
#     on the same idle server (loadgen pickup);
#   - the scheduler's idle cost: the server's CPU time over 60 s with 1,000
#     schedules none of which is due (@yearly), against the same server
#     without schedules;
#   - the rate limiter's cost: end-to-end runs/s of the demo type naming a
#     limit far above the load (1,000,000 per second), against the demo type
#     without a limit, alternated ROUNDS times (default 3) on fresh
#     databases of one cluster; the ratio of the medians.
# Usage: bench/schedules.sh [SECONDS] [ROUNDS]   (RUNS=N runs per round, default 6400;
#        IDLE_S=N the idle cost's window, default 60)
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."
. bench/lib.sh
SECS=${1:-30}
ROUNDS=${2:-3}
RUNS=${RUNS:-6400}
IDLE_S=${IDLE_S:-60}
OUT=bench/out
PORT=18191
URL=http://127.0.0.1:$PORT
mkdir -p "$OUT"

bench_build -- opsrun opsrun_loadgen

DATA=$(mktemp -d /tmp/opsrun-bench-sched.XXXXXX)
chmod 755 "$DATA"
PID=""
stop() {
    if [ -n "$PID" ]; then
        kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true
        PID=""
    fi
}
cleanup() {
    stop
    bench_cluster_destroy "$DATA"
    rm -rf "$DATA"
}
trap cleanup EXIT
bench_cluster "$DATA"

# serve DB CONFIG: opsrun on PORT, in the background.
serve() {
    build/opsrun serve --config "$2" --database-url "$1" --listen "127.0.0.1:$PORT" \
        --workers 16 --log-level warn 2>>"$OUT/schedules-serve.log" &
    PID=$!
    bench_wait_ready "$URL" 200
}

# schedules N CRON: the configuration of N schedules of no-op demo runs.
schedules() {
    local i sep=""
    printf '{"limits": {"submit_rate_per_s": 0}, "queue": {"max_running": 400}, "schedules": {'
    for ((i = 0; i < $1; i++)); do
        printf '%s"s%04d": {"cron": "%s", "run_type": "demo", "overlap": "allow",' "$sep" "$i" "$2"
        printf ' "data": {"duration_ms": 0, "steps": 0}}'
        sep=", "
    done
    printf '}}\n'
}

cpu_ticks() {
    awk '{print $14 + $15}' "/proc/$1/stat"
}

echo "== firing lateness: 1,000 schedules @every 1s for $SECS s (after 5 s of warm-up)"
schedules 1000 '@every 1s' >"$DATA/every.json"
DB=$(bench_db "$DATA" lateness)
serve "$DB" "$DATA/every.json"
sleep 5
T0=$(psql -qAt "$DB" -c "SELECT extract(epoch FROM now())::bigint")
sleep "$SECS"
T1=$((T0 + SECS))
curl -s "$URL/metrics" | grep -E '^opsrun_schedule_runs_total\{[^}]*result="missed"' |
    awk '{s += $2} END {print "missed_slots=" s + 0}' >"$OUT/schedules-missed.txt"
stop
psql -qAt "$DB" >"$OUT/schedules-lateness.txt" <<SQL
WITH w AS (SELECT extract(epoch FROM created_at - schedule_slot) * 1000 AS made,
                  extract(epoch FROM started_at - schedule_slot) * 1000 AS started
             FROM runs WHERE schedule_slot >= to_timestamp($T0) AND schedule_slot < to_timestamp($T1))
SELECT 'slots=' || count(*) || E'\nexpected_slots=' || 1000 * $SECS ||
       E'\nmade_p50_ms=' || round(percentile_cont(0.5) WITHIN GROUP (ORDER BY made)::numeric, 1) ||
       E'\nmade_p99_ms=' || round(percentile_cont(0.99) WITHIN GROUP (ORDER BY made)::numeric, 1) ||
       E'\nmade_max_ms=' || round(max(made)::numeric, 1) ||
       E'\nrunning_p50_ms=' || round(percentile_cont(0.5) WITHIN GROUP (ORDER BY started)::numeric, 1) ||
       E'\nrunning_p99_ms=' || round(percentile_cont(0.99) WITHIN GROUP (ORDER BY started)::numeric, 1) ||
       E'\nrunning_max_ms=' || round(max(started)::numeric, 1) FROM w;
SQL
cat "$OUT/schedules-lateness.txt" "$OUT/schedules-missed.txt"
echo "-- baseline: pickup of a plain submission on the same server, idle"
echo '{"limits": {"submit_rate_per_s": 0}}' >"$DATA/plain.json"
DB=$(bench_db "$DATA" pickup)
serve "$DB" "$DATA/plain.json"
build/opsrun_loadgen pickup "$URL" "$DB" 200 | tee "$OUT/schedules-pickup.txt"
stop

echo "== the scheduler's idle cost: CPU over $IDLE_S s, 1,000 schedules @yearly vs none"
schedules 1000 '@yearly' >"$DATA/yearly.json"
for conf in plain yearly; do
    DB=$(bench_db "$DATA" "idle_$conf")
    serve "$DB" "$DATA/$conf.json"
    sleep 5
    a=$(cpu_ticks "$PID")
    sleep "$IDLE_S"
    b=$(cpu_ticks "$PID")
    echo "idle_cpu_ms_${conf}=$(((b - a) * 1000 / $(getconf CLK_TCK)))" | tee -a "$OUT/schedules-idle.txt"
    stop
done

echo "== the rate limiter's cost: $RUNS no-op runs, 16 clients, demo limited (1,000,000/s) vs not, $ROUNDS rounds"
echo '{"limits": {"submit_rate_per_s": 0}, "rate_limits": {"big": {"limit": 1000000, "per_s": 1}},
       "run_types": {"demo": {"rate_limit": "big"}}}' >"$DATA/limited.json"
: >"$OUT/schedules-limiter.txt"
for ((r = 1; r <= ROUNDS; r++)); do
    for conf in plain limited; do
        DB=$(bench_db "$DATA" "limiter_${conf}_$r")
        serve "$DB" "$DATA/$conf.json"
        v=$(build/opsrun_loadgen throughput "$URL" "$DB" "$RUNS" 16 | sed -n 's/^runs_per_s=//p')
        echo "round=$r $conf runs_per_s=$v" | tee -a "$OUT/schedules-limiter.txt"
        stop
    done
done
awk '{split($3, a, "="); v[$2] = v[$2] " " a[2]}
     function median(s,  n, x, i, j, t) { n = split(s, x, " ");
         for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (x[j] < x[i]) { t = x[i]; x[i] = x[j]; x[j] = t }
         return n % 2 ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2 }
     END { p = median(v["plain"]); l = median(v["limited"]);
           printf "median_plain_runs_per_s=%d\nmedian_limited_runs_per_s=%d\nlimited_over_plain=%.2f\n", p, l, l / p }' \
    "$OUT/schedules-limiter.txt" | tee "$OUT/schedules-limiter-summary.txt"
