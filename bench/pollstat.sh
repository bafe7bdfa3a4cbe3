#!/usr/bin/env bash
# bench/pollstat.sh — where a check's cost goes: the poller alone at
# capacity (5,000 rest_job runs due every 50 ms against the fake jobs API,
# poller.concurrency 32, --workers 2, as bench/poller.sh step 1) on a durable
# cluster with pg_stat_statements. After RAMP_S it resets the statistics and
# counts WINDOW_S seconds, then prints checks/s; CPU microseconds per check
# of opsrun, of PostgreSQL (all its processes) and of the fake; opsrun's
# context switches and commits per check; updates of runs (HOT) and
# run_polls; and PostgreSQL's execution time per check by statement.
# Usage: bench/pollstat.sh [WINDOW_S]   (default 20)
#        ANALYZE=1 runs ANALYZE after inserting the waiting runs (as
#        autovacuum would a minute later; the plans of a fresh database's
#        statements depend on it); PERF=FILE records opsrun with perf into
#        FILE; PORT and FAKE_PORT (18283, 18290) the ports; PRELOAD=N runs
#        N no-op demo runs through HTTP first (loadgen throughput, 4
#        clients), so that runs and run_events hold what bench/poller.sh's
#        earlier steps leave there. OPSRUN=path serves with another opsrun
#        binary (e.g. one bench_base_build made; migrations are its own).
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."
. bench/lib.sh
WINDOW=${1:-20}
RAMP=${RAMP_S:-5}
PORT=${PORT:-18283}
FAKE_PORT=${FAKE_PORT:-18290}
URL=http://127.0.0.1:$PORT
FAKE=http://127.0.0.1:$FAKE_PORT

bench_build -- opsrun opsrun_pollbench opsrun_loadgen
DATA=$(mktemp -d /tmp/opsrun-pollstat.XXXXXX)
chmod 755 "$DATA"
PID=""
FAKE_PID=""
cleanup() {
    for p in $PID $FAKE_PID; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
    bench_cluster_destroy "$DATA"
    rm -rf "$DATA"
}
trap cleanup EXIT
export OPSRUN_PG_OPTS="-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all"
bench_cluster "$DATA"
sql() { psql -qAtX -v ON_ERROR_STOP=1 "$DB" -c "$1"; }
sql "CREATE EXTENSION pg_stat_statements"
PG_PID=$(head -n 1 "$(sql 'SHOW data_directory')/postmaster.pid")

build/opsrun_pollbench fake "$FAKE_PORT" 2 >/dev/null 2>"$DATA/fake.log" &
FAKE_PID=$!
for _ in $(seq 50); do curl -sf "$FAKE/stats" >/dev/null && break; sleep 0.1; done
cat >"$DATA/config.json" <<EOF
{"poller": {"concurrency": 32, "interval_ms": 200},
 "limits": {"submit_rate_per_s": 0},
 "run_types": {
$(bench_poller_types "$FAKE")}}
EOF
"${OPSRUN:-build/opsrun}" serve --config "$DATA/config.json" --database-url "$DB" --listen "127.0.0.1:$PORT" \
    --workers 2 --log-level warn 2>"$DATA/serve.log" &
PID=$!
bench_wait_ready "$URL"
[ -n "${PRELOAD:-}" ] && build/opsrun_loadgen throughput "$URL" "$DB" "$PRELOAD" 4 >/dev/null
bench_insert_waiting "$DB" job w 5000 0 '2 s'
[ -n "${ANALYZE:-}" ] && sql "ANALYZE runs; ANALYZE"
sleep "$RAMP"

ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
pg_ticks() {
    local t c
    t=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$PG_PID/stat")
    for c in $(pgrep -P "$PG_PID"); do t=$((t + $(ticks "$c"))); done
    echo "$t"
}
switches() { cat /proc/"$PID"/task/*/status 2>/dev/null | awk '/ctxt_switches/ {s += $2} END {print s}'; }
checks() { curl -sf "$FAKE/stats" | grep -o '"checks": *[0-9]*' | grep -o '[0-9]*$'; }
commits() { sql "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"; }

sql "SELECT pg_stat_statements_reset()" >/dev/null
t0=$(date +%s.%N) c0=$(checks) o0=$(ticks "$PID") p0=$(pg_ticks) f0=$(ticks "$FAKE_PID")
s0=$(switches) x0=$(commits)
PERF_PID=""
if [ -n "${PERF:-}" ]; then
    perf record -F 499 -g -p "$PID" -o "$PERF" 2>/dev/null &
    PERF_PID=$!
fi
sleep "$WINDOW"
t1=$(date +%s.%N) c1=$(checks) o1=$(ticks "$PID") p1=$(pg_ticks) f1=$(ticks "$FAKE_PID")
s1=$(switches) x1=$(commits)
[ -n "$PERF_PID" ] && { kill -INT "$PERF_PID"; wait "$PERF_PID" || true; }
N=$((c1 - c0))
awk -v n="$N" -v dt="$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')" -v tck="$(getconf CLK_TCK)" \
    -v o=$((o1 - o0)) -v p=$((p1 - p0)) -v f=$((f1 - f0)) -v s=$((s1 - s0)) -v x=$((x1 - x0)) 'BEGIN {
    printf "checks=%d\nchecks_per_s=%.0f\n", n, n / dt
    printf "opsrun_us_per_check=%.0f\npostgres_us_per_check=%.0f\nfake_us_per_check=%.0f\n",
        o / tck * 1e6 / n, p / tck * 1e6 / n, f / tck * 1e6 / n
    printf "opsrun_context_switches_per_check=%.2f\ncommits_per_check=%.3f\n", s / n, x / n}'
sql "SELECT relname || '_updates=' || n_tup_upd || E'\n' || relname || '_hot_updates=' || n_tup_hot_upd
     FROM pg_stat_user_tables WHERE relname IN ('runs', 'run_polls') ORDER BY relname"
echo "== PostgreSQL execution time per check, by statement (pg_stat_statements)"
psql -X "$DB" -c "SELECT calls, rows, round(rows::numeric / greatest(calls, 1), 1) AS rows_per_call,
       round((total_exec_time / $N * 1000)::numeric, 1) AS us_per_check,
       left(regexp_replace(query, '\s+', ' ', 'g'), 90) AS statement
     FROM pg_stat_statements WHERE calls > 0 ORDER BY total_exec_time DESC LIMIT 8"
[ -s "$DATA/serve.log" ] && sed 's/^/serve.log: /' "$DATA/serve.log" | awk 'NR <= 5'
exit 0
