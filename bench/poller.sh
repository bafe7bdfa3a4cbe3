#!/usr/bin/env bash
# bench/poller.sh — the poller with 5,000 waiting rest_job runs against a fake
# remote jobs API (bench/pollbench.c), on a Release build and a durable
# cluster, each figure beside a baseline measured in the same run:
#   1. poller capacity: checks/s at poller.concurrency 32, --workers 2, when
#      the schedule (a check every 50 ms per run) asks far more than it can do;
#   2. demo runs/s and pickup latency while the poller works through the
#      5,000 runs (b), against the same load on a server without a poller
#      (a0), on this server with no waiting run (a), and again at the end
#      (a2); and the idle server's transactions/s and CPU;
#   3. the same with the default schedule (2 s doubling to 30 s, +-20 %),
#      started in its steady state (every run checked about every 30 s);
#   4. paired rounds: one demo load without waiting runs, then one beside
#      the 5,000 runs due every 50 ms, ROUNDS times: the ratio of each pair,
#      measured seconds apart, and their median (the figure for the issue's
#      ">= 0.7 of its runs/s beside an overloaded poller").
# The fake's own capacity is measured first, and its CPU time in every step.
# Usage: bench/poller.sh [WINDOW_S] [RUNS] [CLIENTS] [LOOPS] [SAMPLES]
#        (defaults 20, 2000, 4, 3, 100); CONCURRENCY=N sets poller.concurrency
#        (default 32), ROUNDS=N the paired rounds of step 4 (default 5)
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."
. bench/lib.sh
WINDOW=${1:-20}
RUNS=${2:-2000}
CLIENTS=${3:-4}
LOOPS=${4:-3}
SAMPLES=${5:-100}
CONCURRENCY=${CONCURRENCY:-32}
ROUNDS=${ROUNDS:-5}
WAITING=5000
RAMP=5
PORT=${PORT:-18183}
FAKE_PORT=${FAKE_PORT:-18190}
URL=http://127.0.0.1:$PORT
FAKE=http://127.0.0.1:$FAKE_PORT
OUT=bench/out
mkdir -p "$OUT"
rm -f "$OUT"/poller-*

bench_build -- opsrun opsrun_loadgen opsrun_pollbench

DATA=$(mktemp -d /tmp/opsrun-poller.XXXXXX)
chmod 755 "$DATA"
PID=""
FAKE_PID=""
SAMPLER=""
stop() {
    if [ -n "$1" ] && kill "$1" 2>/dev/null; then wait "$1" 2>/dev/null || true; fi
}
cleanup() {
    stop "$SAMPLER"
    stop "$PID"
    stop "$FAKE_PID"
    bench_cluster_destroy "$DATA"
    rm -rf "$DATA"
}
trap cleanup EXIT
die() {
    echo "poller.sh: $*" >&2
    exit 1
}

bench_cluster "$DATA"
sql() { psql -qAtX -v ON_ERROR_STOP=1 "$DB" -c "$1"; }
PG_PID=$(head -n 1 "$(sql 'SHOW data_directory')/postmaster.pid")

# ---- the fake jobs API, and its own capacity before anything else runs
build/opsrun_pollbench fake "$FAKE_PORT" 2 >"$OUT/poller-fake.txt" 2>"$OUT/poller-fake.log" &
FAKE_PID=$!
for _ in $(seq 50); do curl -sf "$FAKE/stats" >/dev/null && break; sleep 0.1; done
curl -sf "$FAKE/stats" >/dev/null || die "the fake jobs API did not start"
echo "== the fake's own capacity: 4 client threads, a new connection per request, 3 s"
build/opsrun_pollbench hammer "$FAKE_PORT" 3 4 | tee "$OUT/poller-fake-capacity.txt"

# ---- opsrun: the tight schedule (job) and the default one (job_real)
cat >"$DATA/config.json" <<EOF
{"poller": {"concurrency": $CONCURRENCY, "interval_ms": 200},
 "limits": {"submit_rate_per_s": 0},
 "run_types": {
$(bench_poller_types "$FAKE")}}
EOF
cp "$DATA/config.json" "$OUT/poller-config.json"
# The same server settings without a run type that can wait: no poller at all.
# (loadgen submits from 127.0.0.1: no per-caller rate limit in either.)
echo "{\"poller\": {\"concurrency\": $CONCURRENCY, \"interval_ms\": 200}," \
    "\"limits\": {\"submit_rate_per_s\": 0}}" >"$DATA/config0.json"
serve() { # serve CONFIG LOG
    build/opsrun serve --config "$1" --database-url "$DB" --listen 127.0.0.1:$PORT \
        --workers 2 --log-level warn 2>"$2" &
    PID=$!
    bench_wait_ready "$URL" || die "the server did not get ready (see $2)"
    sleep 2
}

# ---- snapshots: counters and CPU time, and the difference of two
TCK=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
pg_ticks() { # the postmaster (with its reaped children) and its live children
    local t c
    t=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$PG_PID/stat")
    for c in $(pgrep -P "$PG_PID"); do t=$((t + $(ticks "$c"))); done
    echo "$t"
}
num() {
    local v
    v=$(grep -o "\"$1\": *[0-9]*" | head -n 1 | grep -o '[0-9]*$' || true)
    echo "${v:-0}"
}
snap() { # snap NAME: one key=value file
    local h
    h=$(curl -sf --max-time 5 "$URL/healthz" || true)
    {
        echo "t=$(date +%s.%N)"
        echo "fake_checks=$(curl -sf --max-time 5 "$FAKE/stats" | num checks)"
        echo "checks_total=$(num checks_total <<<"$h")"
        echo "check_failures_total=$(num check_failures_total <<<"$h")"
        echo "in_flight=$(num in_flight <<<"$h")"
        echo "opsrun_ticks=$(ticks "$PID")"
        echo "pg_ticks=$(pg_ticks)"
        echo "fake_ticks=$(ticks "$FAKE_PID")"
        echo "opsrun_threads=$(awk '/^Threads/ {print $2}' "/proc/$PID/status")"
        echo "opsrun_rss_kib=$(awk '/^VmRSS/ {print $2}' "/proc/$PID/status")"
        awk '$1 == "cpu" {print "cpu_busy=" $2 + $3 + $4 + $7 + $8 + $9; print "cpu_idle=" $5;
            print "cpu_iowait=" $6}' /proc/stat
        sql "SELECT 'xact_commit=' || xact_commit || E'\nwal_sync=' || wal_sync
               || E'\nruns_kib=' || pg_total_relation_size('runs') / 1024
               || E'\nruns_live=' || n_live_tup || E'\nruns_dead=' || n_dead_tup
               || E'\nruns_upd=' || n_tup_upd || E'\nruns_hot_upd=' || n_tup_hot_upd
               || E'\nruns_autovacuums=' || autovacuum_count
             FROM pg_stat_database, pg_stat_wal, pg_stat_user_tables
             WHERE datname = current_database() AND relname = 'runs'"
        # Checks that are due and not made yet: how far the poller is behind
        # (the schedule is run_polls since migration 012; the runs row before,
        # for a build older than it).
        if [ "$(sql "SELECT to_regclass('run_polls') IS NOT NULL")" = t ]; then
            sql "SELECT 'overdue=' || count(*) || E'\noverdue_p50_ms=' || coalesce(round(1000 *
                   extract(epoch FROM percentile_cont(0.5) WITHIN GROUP (ORDER BY now() - p.next_poll_at))), 0)
                   || E'\noverdue_max_ms=' || coalesce(round(1000 * extract(epoch FROM max(now() - p.next_poll_at))), 0)
                 FROM run_polls p JOIN runs r ON r.tenant = p.tenant AND r.id = p.run_id
                 WHERE r.status = 'waiting' AND p.next_poll_at <= now()"
            sql "SELECT 'run_polls_kib=' || pg_total_relation_size('run_polls') / 1024
                   || E'\nrun_polls_upd=' || n_tup_upd || E'\nrun_polls_dead=' || n_dead_tup
                 FROM pg_stat_user_tables WHERE relname = 'run_polls'"
        else
            sql "SELECT 'overdue=' || count(*) || E'\noverdue_p50_ms=' || coalesce(round(1000 *
                   extract(epoch FROM percentile_cont(0.5) WITHIN GROUP (ORDER BY now() - next_poll_at))), 0)
                   || E'\noverdue_max_ms=' || coalesce(round(1000 * extract(epoch FROM max(now() - next_poll_at))), 0)
                 FROM runs WHERE status = 'waiting' AND next_poll_at <= now()"
        fi
    } >"$OUT/poller-snap-$1.txt"
}
sv() { awk -F= -v k="$2" '$1 == k {print $2}' "$OUT/poller-snap-$1.txt"; }
get() { awk -F= -v k="$2" '$1 == k {print $2}' "$OUT/$1"; }
window() { # window FROM TO: rates and CPU over the interval, key=value
    local a=$1 b=$2 k
    local -A d
    for k in fake_checks checks_total check_failures_total opsrun_ticks pg_ticks fake_ticks \
        xact_commit wal_sync runs_upd runs_hot_upd runs_autovacuums cpu_busy cpu_idle cpu_iowait; do
        d[$k]=$(($(sv "$b" "$k") - $(sv "$a" "$k")))
    done
    awk -v dt="$(awk -v x="$(sv "$a" t)" -v y="$(sv "$b" t)" 'BEGIN {print y - x}')" \
        -v fc="${d[fake_checks]}" -v hc="${d[checks_total]}" -v hf="${d[check_failures_total]}" \
        -v oc="${d[opsrun_ticks]}" -v pc="${d[pg_ticks]}" -v kc="${d[fake_ticks]}" \
        -v xc="${d[xact_commit]}" -v ws="${d[wal_sync]}" -v cb="${d[cpu_busy]}" \
        -v ci="${d[cpu_idle]}" -v cw="${d[cpu_iowait]}" -v tck="$TCK" 'BEGIN {
        printf "window_s=%.2f\nfake_checks=%d\nfake_checks_per_s=%.0f\n", dt, fc, fc / dt
        printf "healthz_checks=%d\nhealthz_checks_per_s=%.0f\ncheck_failures=%d\n", hc, hc / dt, hf
        printf "opsrun_cpu_s=%.2f\nopsrun_cores=%.2f\n", oc / tck, oc / tck / dt
        printf "postgres_cpu_s=%.2f\npostgres_cores=%.2f\n", pc / tck, pc / tck / dt
        printf "fake_cpu_s=%.2f\nfake_cores=%.2f\n", kc / tck, kc / tck / dt
        printf "machine_busy_cores=%.2f\nmachine_idle_cores=%.2f\nmachine_iowait_cores=%.2f\n",
            cb / tck / dt, ci / tck / dt, cw / tck / dt
        printf "commits_per_s=%.0f\nwal_syncs_per_s=%.0f\n", xc / dt, ws / dt
        if (fc > 0)
            printf "opsrun_us_per_check=%.0f\npostgres_us_per_check=%.0f\nfake_us_per_check=%.0f\ncommits_per_check=%.2f\n",
                oc / tck / fc * 1e6, pc / tck / fc * 1e6, kc / tck / fc * 1e6, xc / fc
    }'
    echo "runs_updates_per_s=$(awk -v u="${d[runs_upd]}" -v x="$(sv "$a" t)" -v y="$(sv "$b" t)" \
        'BEGIN {printf "%.0f", u / (y - x)}')"
    echo "runs_hot_updates=${d[runs_hot_upd]}"
    echo "runs_autovacuums=${d[runs_autovacuums]}"
    echo "runs_kib_end=$(sv "$b" runs_kib)"
    echo "runs_live_end=$(sv "$b" runs_live)"
    echo "runs_dead_end=$(sv "$b" runs_dead)"
    echo "run_polls_kib_end=$(sv "$b" run_polls_kib)"
    echo "run_polls_dead_end=$(sv "$b" run_polls_dead)"
    echo "overdue_end=$(sv "$b" overdue)"
    echo "overdue_p50_ms_end=$(sv "$b" overdue_p50_ms)"
    echo "overdue_max_ms_end=$(sv "$b" overdue_max_ms)"
    echo "in_flight_end=$(sv "$b" in_flight)"
    echo "opsrun_threads_end=$(sv "$b" opsrun_threads)"
    echo "opsrun_rss_kib_end=$(sv "$b" opsrun_rss_kib)"
}
# sampler NAME: /healthz in_flight every 0.5 s until killed (its mean is
# how many of the checkers were busy)
sampler_start() {
    (while :; do
        curl -sf --max-time 2 "$URL/healthz" | num in_flight || true
        sleep 0.5
    done) >"$OUT/poller-inflight-$1.txt" 2>/dev/null &
    SAMPLER=$!
}
sampler_stop() { # prints in_flight_mean= and in_flight_samples=
    stop "$SAMPLER"
    SAMPLER=""
    awk '/^[0-9]+$/ {s += $1; n++} END {printf "in_flight_mean=%.1f\nin_flight_samples=%d\n",
        n ? s / n : 0, n}' "$OUT/poller-inflight-$1.txt"
}
# The cost of loadgen's completion check (every 20 ms once its submits are
# done: a count of the runs it created, through the runs_completed index), at
# the end of the last invocation (SINCE: its start), and of the count of all
# completed runs that it used before, which reads every completed run with its
# dead versions. Median of 5, ms. count_cost SINCE
median_ms() {
    for _ in 1 2 3 4 5; do
        sql "EXPLAIN (ANALYZE, TIMING OFF) $1" | awk '/Execution Time/ {print $3}'
    done | sort -n | awk '{v[NR] = $1} END {print v[3]}'
}
count_cost() {
    echo "loadgen_count_ms=$(median_ms "SELECT count(*) FROM runs WHERE status = 'completed'
        AND completed_at >= '$1'::timestamptz AND created_at >= '$1'::timestamptz")"
    echo "full_count_ms=$(median_ms "SELECT count(*) FROM runs WHERE status = 'completed'")"
}
alive() { kill -0 "$PID" 2>/dev/null || die "the server exited (see $OUT/poller-serve.log)"; }
# demo PHASE: LOOPS loadgen throughput runs back to back (the same work in
# every phase, so the runs table grows alike), then loadgen pickup, each with
# the counters around it
demo() {
    local f="$OUT/poller-$1-throughput.txt" n since
    : >"$f.raw"
    snap "$1-tp0"
    sampler_start "$1-tp"
    for n in $(seq "$LOOPS"); do
        since=$(sql "SELECT now()")
        build/opsrun_loadgen throughput "$URL" "$DB" "$RUNS" "$CLIENTS" >>"$f.raw" ||
            FAILED+=("$1 throughput $n")
    done
    snap "$1-tp1"
    {
        awk -F= -v dt="$(awk -v x="$(sv "$1-tp0" t)" -v y="$(sv "$1-tp1" t)" 'BEGIN {print y - x}')" '
            /^runs=/ {split($0, w, /[= ]/); runs += w[2]; failed += w[6]}
            /^runs_per_s=/ {v = $2 + 0; if (!n || v < lo) lo = v; if (v > hi) hi = v; n++}
            END {printf "loadgen_runs=%d\nloadgen_invocations=%d\nfailed_submits=%d\n", runs, n, failed
                 printf "runs_per_s=%.0f\nruns_per_s_min=%.0f\nruns_per_s_max=%.0f\n", runs / dt, lo, hi}' "$f.raw"
        window "$1-tp0" "$1-tp1"
        sampler_stop "$1-tp"
        count_cost "$since"
    } >"$f"
    snap "$1-pk0"
    sampler_start "$1-pk"
    build/opsrun_loadgen pickup "$URL" "$DB" "$SAMPLES" >"$OUT/poller-$1-pickup.txt" ||
        FAILED+=("$1 pickup")
    snap "$1-pk1"
    {
        window "$1-pk0" "$1-pk1"
        sampler_stop "$1-pk"
    } >>"$OUT/poller-$1-pickup.txt"
    alive
    echo "   runs/s $(get "poller-$1-throughput.txt" runs_per_s)" \
        "($(get "poller-$1-throughput.txt" loadgen_invocations) x $RUNS runs)," \
        "checks/s beside it $(get "poller-$1-throughput.txt" fake_checks_per_s);" \
        "pickup p50/p99 $(get "poller-$1-pickup.txt" pickup_p50_ms)/$(get "poller-$1-pickup.txt" pickup_p99_ms) ms"
}
# end_waiting TYPE: the waiting runs of TYPE end cancelled, by SQL. One
# UPDATE of thousands of rows can deadlock with the poller's batches, which
# lock some of the same rows in another order: with run_polls (migration
# 012) their schedule goes first, so the poller lets go of them; and the
# UPDATE is tried again if it still fails.
end_waiting() {
    local i
    if [ "$(sql "SELECT to_regclass('run_polls') IS NOT NULL")" = t ]; then
        sql "DELETE FROM run_polls WHERE type = '$1'"
        sleep 0.5
    fi
    for i in 1 2 3 4 5; do
        sql "UPDATE runs SET status = 'completed', outcome = 'cancelled', completed_at = now(),
               next_poll_at = NULL WHERE type = '$1' AND status = 'waiting'" 2>>"$OUT/poller-sql.log" && return
        sleep 0.2
    done
    die "could not end the waiting $1 runs (see $OUT/poller-sql.log)"
}
# insert TYPE PREFIX POLL_COUNT SPREAD: WAITING runs in 'waiting', first
# checks due uniformly within SPREAD, then ANALYZE
insert() {
    bench_insert_waiting "$DB" "$1" "$2" "$WAITING" "$3" "$4"
    # As autovacuum would within a minute: the statistics of a table that
    # just got 5,000 waiting rows at once say there are none, and the
    # poller's plans (either build's) depend on them.
    sql "ANALYZE runs"
}
# idle NAME: 5 s of the server with nothing to do
idle() {
    snap "$1-0"
    sleep 5
    snap "$1-1"
    window "$1-0" "$1-1" >"$OUT/poller-$1.txt"
    echo "   idle 5 s: $(get "poller-$1.txt" commits_per_s) transactions/s; CPU (cores):" \
        "opsrun $(get "poller-$1.txt" opsrun_cores), postgres $(get "poller-$1.txt" postgres_cores)"
}
FAILED=()

echo "== (a0) baseline without a poller (no run type that can wait): $LOOPS x $RUNS demo runs" \
    "from $CLIENTS clients, then $SAMPLES pickups"
serve "$DATA/config0.json" "$OUT/poller-serve0.log"
curl -sf "$URL/healthz" | grep '"poller": *{[^}]*"running": *false' >/dev/null || die "a poller runs in (a0)"
idle idle0
demo a0
stop "$PID"
PID=""

echo "== (a) baseline, the server with the rest_job types, no waiting run"
serve "$DATA/config.json" "$OUT/poller-serve.log"
poller_running() { curl -sf "$URL/healthz" | grep '"poller": *{[^}]*"running": *true' >/dev/null; }
poller_running || die "the poller is not running"
idle idle
demo a

echo "== $WAITING waiting runs, a check every 50 ms each (asks $((WAITING * 20)) checks/s)"
insert job w 0 '2 s'
sleep "$RAMP"
snap ramp0
sleep 2
snap ramp1
window ramp0 ramp1 >"$OUT/poller-ramp.txt"
[ "$(get poller-ramp.txt fake_checks)" -gt 0 ] || die "the waiting runs are not being checked"
echo "   polled: $(get poller-ramp.txt fake_checks_per_s) checks/s after ${RAMP} s"
echo "== 1. the poller alone, ${WINDOW} s"
snap w0
sampler_start alone
sleep "$WINDOW"
snap w1
{
    window w0 w1
    sampler_stop alone
} | tee "$OUT/poller-alone.txt"
alive
echo "== (b) the same demo load while the poller works"
demo b
sql "SELECT status || ':' || outcome || '=' || count(*) FROM runs WHERE type = 'job'
     GROUP BY status, outcome ORDER BY 1" >"$OUT/poller-job-status.txt"
sql "SELECT 'poll_count_min=' || min(poll_count) || E'\npoll_count_avg=' || round(avg(poll_count))
     || E'\npoll_count_max=' || max(poll_count) FROM runs WHERE type = 'job'" \
    >>"$OUT/poller-job-status.txt"
sql "SELECT 'demo_not_succeeded=' || count(*) FROM runs WHERE type = 'demo'
     AND NOT (status = 'completed' AND outcome = 'succeeded')" >>"$OUT/poller-job-status.txt"
WAITING_LEFT=$(sql "SELECT count(*) FROM runs WHERE type = 'job' AND status = 'waiting'")
cp "$OUT/poller-serve.log" "$OUT/poller-serve-after-b.log"

echo "== 3. the default schedule: $WAITING runs in its steady state (every ~30 s, +-20 %)"
# The tight runs end here (by SQL: a check in flight finds its fence gone).
end_waiting job
sleep 1
insert job_real r 10 '30 s' # check 11 onwards: 30 s apart
sleep 3
snap r0
sampler_start real
sleep "$WINDOW"
snap r1
{
    window r0 r1
    sampler_stop real
} | tee "$OUT/poller-real.txt"
demo c
REAL_LEFT=$(sql "SELECT count(*) FROM runs WHERE type = 'job_real' AND status = 'waiting'")

echo "== (a2) baseline again, no waiting run"
end_waiting job_real
sleep 1
idle idle2
demo a2
alive

echo "== 4. paired rounds: $RUNS demo runs without waiting runs, and beside $WAITING due every 50 ms"
# Each round's two halves are seconds apart, so a change in the machine's
# other load (it is shared) moves both; the median of the ratios is the
# figure. One loadgen invocation per half.
rps() { build/opsrun_loadgen throughput "$URL" "$DB" "$RUNS" "$CLIENTS" | awk -F= '$1 == "runs_per_s" {print $2}'; }
: >"$OUT/poller-rounds.txt"
# Odd rounds measure without first, even rounds beside first (ABBA), so
# that a drift of the machine's other load does not favour either side.
beside_round() { # beside_round I: sets rb, the runs/s beside the overloaded poller
    insert job "p$1" 0 '2 s'
    sleep "$RAMP"
    snap "p$1-0"
    rb=$(rps) || FAILED+=("round $1 beside")
    snap "p$1-1"
    window "p$1-0" "p$1-1" >"$OUT/poller-round-$1.txt"
    end_waiting job
    sleep 1
}
for i in $(seq "$ROUNDS"); do
    if ((i % 2)); then
        ra=$(rps) || FAILED+=("round $i without")
        beside_round "$i"
    else
        beside_round "$i"
        ra=$(rps) || FAILED+=("round $i without")
    fi
    echo "round=$i without=$ra beside=$rb ratio=$(awk -v a="$ra" -v b="$rb" 'BEGIN {printf "%.2f", (a > 0 ? b / a : 0)}')" \
        "checks_per_s=$(get "poller-round-$i.txt" fake_checks_per_s)" \
        "machine_busy_cores=$(get "poller-round-$i.txt" machine_busy_cores)" | tee -a "$OUT/poller-rounds.txt"
done
snap end
alive
# Every demo run must have succeeded; and the state of any run the server
# logged about (it runs at warn, so any line is worth a look).
DEMO_BAD=$(sql "SELECT count(*) FROM runs WHERE type = 'demo'
                AND NOT (status = 'completed' AND outcome = 'succeeded')")
DEMO_ALL=$(sql "SELECT count(*) FROM runs WHERE type = 'demo'")
for id in $(cat "$OUT"/poller-serve0.log "$OUT/poller-serve.log" | grep -o 'run=[^ ]*' | cut -d= -f2 |
    sort -u | head -n 20); do
    sql "SELECT 'run=' || id || ' type=' || type || ' status=' || status || ' outcome=' || outcome
           || ' attempt=' || attempt || ' started_at=' || coalesce(started_at::text, '-')
           || ' completed_at=' || coalesce(completed_at::text, '-') FROM runs WHERE id = '$id'"
done >"$OUT/poller-logged-runs.txt"

# ---- summary
r() { get "poller-$1.txt" "$2"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "n/a"}'; }
cpu() {
    echo "opsrun $(r "$1" opsrun_cores), postgres $(r "$1" postgres_cores), fake $(r "$1" fake_cores);" \
        "machine busy $(r "$1" machine_busy_cores), iowait $(r "$1" machine_iowait_cores)"
}
A=$(r a-throughput runs_per_s)
A0=$(r a0-throughput runs_per_s)
echo
echo "== summary ($WAITING waiting runs, poller.concurrency $CONCURRENCY, --workers 2)"
echo "fake API alone (hammer, 4 clients):     $(get poller-fake-capacity.txt hammer_per_s) req/s, a new connection each"
echo "1. poll every 50 ms (asks $((WAITING * 20))/s), the poller alone, $(r alone window_s) s:"
echo "   checks/s (fake / healthz):           $(r alone fake_checks_per_s) / $(r alone healthz_checks_per_s);" \
    "check failures $(r alone check_failures); in flight (of $CONCURRENCY) mean $(r alone in_flight_mean)"
echo "   CPU (cores of 2):                    $(cpu alone)"
echo "   per check:                           opsrun $(r alone opsrun_us_per_check) us CPU," \
    "postgres $(r alone postgres_us_per_check) us, fake $(r alone fake_us_per_check) us CPU, $(r alone commits_per_check) commits" \
    "($(r alone commits_per_s) commits/s, $(r alone wal_syncs_per_s) WAL fsyncs/s)"
echo "   due, not checked yet (at the end):   $(r alone overdue_end) runs, late by p50 $(r alone overdue_p50_ms_end) ms," \
    "max $(r alone overdue_max_ms_end) ms"
echo "   runs table:                          $(r alone runs_updates_per_s) row updates/s ($(r alone runs_hot_updates) HOT)," \
    "$(r alone runs_dead_end) dead rows at the end, $(r alone runs_autovacuums) autovacuums in the window;" \
    "run_polls $(r alone run_polls_kib_end) KiB, $(r alone run_polls_dead_end) dead rows" \
    "(in (b): $(r b-throughput runs_autovacuums); during (b)'s pickups, $(r b-pickup fake_checks_per_s) checks/s)"
echo "   opsrun threads / RSS:                $(r alone opsrun_threads_end) / $(r alone opsrun_rss_kib_end) KiB" \
    "(before the waiting runs: $(sv a-tp0 opsrun_threads) / $(sv a-tp0 opsrun_rss_kib) KiB)"
echo "   idle server, transactions/s and CPU: $(r idle commits_per_s); $(cpu idle)"
echo "   (without a poller, (a0):             $(r idle0 commits_per_s); $(cpu idle0))"
echo "   (idle again before (a2):             $(r idle2 commits_per_s); $(cpu idle2))"
echo "2. demo runs/s ($LOOPS x $RUNS runs, $CLIENTS clients), (a) no waiting run: $A" \
    "(per loadgen $(r a-throughput runs_per_s_min)-$(r a-throughput runs_per_s_max))"
echo "   (a0) no run type that can wait:      $A0 (per loadgen" \
    "$(r a0-throughput runs_per_s_min)-$(r a0-throughput runs_per_s_max)); ratio a/a0 $(ratio "$A" "$A0")"
echo "   (b) beside the poller:               $(r b-throughput runs_per_s)" \
    "(per loadgen $(r b-throughput runs_per_s_min)-$(r b-throughput runs_per_s_max));" \
    "ratio b/a $(ratio "$(r b-throughput runs_per_s)" "$A"), b/a0 $(ratio "$(r b-throughput runs_per_s)" "$A0")"
echo "   (a2) no waiting run, at the end:     $(r a2-throughput runs_per_s); ratio b/a2" \
    "$(ratio "$(r b-throughput runs_per_s)" "$(r a2-throughput runs_per_s)")"
echo "   checks/s during (b), $(r b-throughput window_s) s:        $(r b-throughput fake_checks_per_s) / $(r b-throughput healthz_checks_per_s)" \
    "(fake / healthz); failures $(r b-throughput check_failures); in flight mean $(r b-throughput in_flight_mean)"
echo "   loadgen's completion count (ms):     $(r a-throughput loadgen_count_ms) after (a)," \
    "$(r b-throughput loadgen_count_ms) after (b), $(r a2-throughput loadgen_count_ms) after (a2)" \
    "(a count of all completed runs: $(r a-throughput full_count_ms), $(r b-throughput full_count_ms)," \
    "$(r a2-throughput full_count_ms); runs table $(r a-throughput runs_kib_end)," \
    "$(r b-throughput runs_kib_end), $(r a2-throughput runs_kib_end) KiB)"
echo "   CPU during (a0):                     $(cpu a0-throughput)"
echo "   CPU during (a):                      $(cpu a-throughput)"
echo "   CPU during (b):                      $(cpu b-throughput)"
echo "   pickup p50/p99 ms (a0):              $(r a0-pickup pickup_p50_ms)/$(r a0-pickup pickup_p99_ms)"
echo "   pickup p50/p99 ms (a) / (b) / (a2):  $(r a-pickup pickup_p50_ms)/$(r a-pickup pickup_p99_ms)" \
    "/ $(r b-pickup pickup_p50_ms)/$(r b-pickup pickup_p99_ms) / $(r a2-pickup pickup_p50_ms)/$(r a2-pickup pickup_p99_ms)" \
    "(checks/s during (b) pickups: $(r b-pickup fake_checks_per_s), failures $(r b-pickup check_failures))"
echo "   runs of type job still waiting:      $WAITING_LEFT of $WAITING; $(tr '\n' ' ' <"$OUT/poller-job-status.txt")"
echo "3. default schedule, steady state (every 30 s +-20 %), $(r real window_s) s:"
echo "   checks/s (fake / healthz):           $(r real fake_checks_per_s) / $(r real healthz_checks_per_s)" \
    "(expected about $(((WAITING + 15) / 30))); failures $(r real check_failures); in flight mean $(r real in_flight_mean)"
echo "   CPU (cores of 2):                    $(cpu real)"
echo "   due, not checked yet (at the end):   $(r real overdue_end) runs, late by p50 $(r real overdue_p50_ms_end) ms," \
    "max $(r real overdue_max_ms_end) ms"
echo "   (c) demo runs/s beside it:           $(r c-throughput runs_per_s); ratio c/a0 $(ratio "$(r c-throughput runs_per_s)" "$A0")," \
    "c/a $(ratio "$(r c-throughput runs_per_s)" "$A")," \
    "c/a2 $(ratio "$(r c-throughput runs_per_s)" "$(r a2-throughput runs_per_s)")"
echo "   pickup p50/p99 ms (c):               $(r c-pickup pickup_p50_ms)/$(r c-pickup pickup_p99_ms)"
echo "   runs of type job_real still waiting: $REAL_LEFT of $WAITING"
echo "4. paired rounds ($ROUNDS x $RUNS demo runs without and beside $WAITING runs due every 50 ms, ABBA):"
awk '{for (k = 1; k <= NF; k++) {split($k, kv, "="); v[kv[1]] = kv[2]}
      printf "   round %d: %s runs/s without, %s beside (%s checks/s): ratio %s\n",
          v["round"], v["without"], v["beside"], v["checks_per_s"], v["ratio"]}' "$OUT/poller-rounds.txt"
grep -o 'ratio=[0-9.]*' "$OUT/poller-rounds.txt" | cut -d= -f2 | sort -n |
    awk '{r[NR] = $1} END {if (NR) printf "   median ratio beside/without:         %s (of %d rounds; min %s, max %s)\n",
        NR % 2 ? r[(NR + 1) / 2] : sprintf("%.2f", (r[NR / 2] + r[NR / 2 + 1]) / 2), NR, r[1], r[NR]}'
echo "demo runs not completed/succeeded:      $DEMO_BAD of $DEMO_ALL"
echo "server log lines at warn and above:     $(wc -l <"$OUT/poller-serve.log") ($OUT/poller-serve.log;" \
    "$(wc -l <"$OUT/poller-serve-after-b.log") by the end of (b)); $(wc -l <"$OUT/poller-serve0.log") in (a0)"
sed -E 's/^[0-9T:.Z-]+ +//; s/run=[^ ]+/run=.../; s/check=[0-9]+/check=N/' "$OUT"/poller-serve0.log "$OUT/poller-serve.log" |
    sort | uniq -c | sort -rn | awk 'NR <= 5'
[ -s "$OUT/poller-logged-runs.txt" ] && sed 's/^/   now: /' "$OUT/poller-logged-runs.txt"
[ "$WAITING_LEFT" = "$WAITING" ] || FAILED+=("job runs left waiting")
[ "$REAL_LEFT" = "$WAITING" ] || FAILED+=("job_real runs left waiting")
[ "$DEMO_BAD" = 0 ] || FAILED+=("demo runs did not succeed")
for f in alone b-throughput b-pickup real c-throughput c-pickup; do
    [ "$(r "$f" check_failures)" = 0 ] || FAILED+=("check failures in $f")
done
if [ ${#FAILED[@]} -gt 0 ]; then
    echo "FAILED: ${FAILED[*]} (see $OUT/)" >&2
    exit 1
fi
