#!/usr/bin/env bash
# bench/soak.sh — a steady load for minutes with retention running, and
# what retention does meanwhile: the soak of bench/all.sh on its own, with
# run_events partitions of one minute (queue.event_partition_s 60) so that
# whole partitions are dropped during it, and the tables sampled every
# 10 s. On a private durable cluster, with pg_stat_statements:
#   - loadgen soak: no-op demo runs at RATE runs/s from 8 clients for
#     MINUTES; per minute the runs completed, pickup p50/p99, rows in runs,
#     table sizes and the server's RSS (bench/loadgen.c);
#   - every 10 s: rows in runs and in run_events, the partitions of
#     run_events and the bytes of both tables with their indexes
#     (soak-tables.tsv);
#   - at the end, what each retention statement cost (calls, total and
#     per call, and per deleted run), and the server's partition counter;
#   - every 10 s, into tables of the soak's own database (soak_*), the
#     cumulative figures of every statement (pg_stat_statements), the
#     statistics of every table (live and dead rows, vacuums, sizes) and
#     the vacuums in progress; at the end, per minute, the mean execution
#     time of the busiest statements, the dead rows and vacuums of runs,
#     what was vacuumed when, and a CPU probe with the machine's busy and
#     steal time ($TAG-minutes.txt): where a growing p99 comes from, and
#     whether the data or the machine changed.
# OPSRUN_BIN runs another binary (for instance one built from an older
# commit, for a before/after in the same session); a binary without
# queue.event_partition_s gets the same configuration without it.
# TRACE=1 also records what could slow the pickups down, to find why they
# do (bench/soaktrace.py reads it at the end): PostgreSQL logs every
# autovacuum and autoanalyze, lock waits over 100 ms, statements over
# 100 ms and checkpoints; every 10 s the sampler keeps every run's pickup
# (soak-pickups.tsv), the dead rows, vacuums and index bytes of runs, and
# the calls and time of the engine's statements (soak-trace.tsv), and the
# bytes of each index of runs (soak-indexes.tsv). FROM_MINUTE=N leaves the
# minutes before N out of soaktrace.py's attribution (the warm-up).
# Usage: bench/soak.sh [MINUTES [RATE]]      (default 10 minutes, 500 runs/s)
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."
. bench/lib.sh

MINUTES=${1:-10}
RATE=${2:-500}
[[ "$MINUTES" =~ ^[0-9]+$ && "$RATE" =~ ^[0-9]+$ ]] || {
    sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}
OUT=bench/out
mkdir -p "$OUT"
BIN=${OPSRUN_BIN:-build/opsrun}
TAG=${SOAK_TAG:-soak}
PORT=$((20000 + RANDOM % 10000))

bench_build -- opsrun opsrun_loadgen
DATA=$(mktemp -d /tmp/opsrun-soak.XXXXXX)
chmod 755 "$DATA"
SERVER=
SAMPLER=
TRACER=
cleanup() {
    [ -z "$SAMPLER" ] || kill $SAMPLER 2>/dev/null || true
    [ -z "$TRACER" ] || kill "$TRACER" 2>/dev/null || true
    if [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null; then wait "$SERVER" 2>/dev/null || true; fi
    bench_cluster_destroy "$DATA"
    rm -rf "$DATA"
}
trap cleanup EXIT

export OPSRUN_PG_OPTS="-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all"
if [ "${TRACE:-0}" = 1 ]; then
    # One line: pg_ctl hands the options to a shell, where a newline ends
    # the command (and its redirection to the log).
    OPSRUN_PG_OPTS+=" -c log_autovacuum_min_duration=0 -c log_lock_waits=on -c deadlock_timeout=100ms"
    OPSRUN_PG_OPTS+=" -c log_min_duration_statement=100 -c log_checkpoints=on -c log_timezone=UTC"
fi
bench_cluster "$DATA"
sql() { psql -qAtX -v ON_ERROR_STOP=1 "$DB" -c "$1"; }
sql "CREATE EXTENSION pg_stat_statements"

CONFIG='{"limits": {"submit_rate_per_s": 0}, "queue": {"retention_s": 60, "event_partition_s": 60}}'
if ! "$BIN" serve --print-config 2>/dev/null | grep event_partition_s >/dev/null; then
    CONFIG='{"limits": {"submit_rate_per_s": 0}, "queue": {"retention_s": 60}}'
fi
echo "$CONFIG" >"$DATA/soak.json"
"$BIN" serve --config "$DATA/soak.json" --database-url "$DB" --listen "127.0.0.1:$PORT" \
    --workers 8 --log-level info 2>"$OUT/$TAG-serve.log" &
SERVER=$!
bench_wait_ready "http://127.0.0.1:$PORT" 150
sleep 2
sql "SELECT pg_stat_statements_reset()" >/dev/null

{
    echo "binary=$BIN"
    echo "commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo '+dirty')"
    echo "config=$CONFIG"
    echo "loadavg_start=$(cut -d' ' -f1-3 /proc/loadavg)"
} >"$OUT/$TAG-env.txt"

# The sampler: every 10 s, one line of the tables.
sample() {
    local t0=$SECONDS parts
    echo -e "s\truns\tevents\tpartitions\truns_mib\tevents_mib\trss_mib"
    # Rows in run_events as the statistics count them (a count(*) would
    # hold every partition for its length, in the way of partition DDL).
    while :; do
        if sql "SELECT to_regprocedure('opsrun_event_partitions()') IS NOT NULL" | grep t >/dev/null; then
            parts=$(sql "SELECT count(*) FROM opsrun_event_partitions()")
        else
            parts=-
        fi
        echo -e "$((SECONDS - t0))\t$(sql "SELECT count(*) FROM runs")\t$(sql "SELECT sum(n_live_tup) FROM pg_stat_user_tables WHERE relid = 'run_events'::regclass OR relid IN (SELECT relid FROM pg_partition_tree('run_events'))")\t$parts\t$(sql "SELECT round(pg_total_relation_size('runs') / 1048576.0, 1)")\t$(sql "SELECT round(coalesce((SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree('run_events')), pg_total_relation_size('run_events')) / 1048576.0, 1)")\t$(awk '/VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$SERVER/status")"
        sleep 10
    done
}
# With TRACE=1, every 10 s: the pickups of the runs created since the last
# sample and 10 s ago at the latest (all of them started by then, and
# retention is a minute away), then one line of what runs and the engine's
# statements did so far (cumulative: soaktrace.py takes the differences).
trace() {
    local from to
    from=$(sql "SELECT extract(epoch FROM now())")
    echo -e "t\tdead\tlive\tvacuums\tanalyzes\tindex_mib\theap_mib\tstatement\tcalls\tms" \
        >"$OUT/$TAG-trace.tsv"
    : >"$OUT/$TAG-pickups.tsv"
    : >"$OUT/$TAG-indexes.tsv"
    while :; do
        sleep 10
        to=$(sql "SELECT extract(epoch FROM now() - interval '10 s')")
        sql "COPY (SELECT extract(epoch FROM created_at), extract(epoch FROM started_at - created_at) * 1000
                     FROM runs WHERE created_at >= to_timestamp($from) AND created_at < to_timestamp($to)
                      AND started_at IS NOT NULL) TO STDOUT" >>"$OUT/$TAG-pickups.tsv"
        from=$to
        sql "COPY (SELECT extract(epoch FROM now()), t.n_dead_tup, t.n_live_tup,
                          t.autovacuum_count + t.vacuum_count, t.autoanalyze_count + t.analyze_count,
                          round(pg_indexes_size('runs') / 1048576.0, 1),
                          round(pg_relation_size('runs') / 1048576.0, 1), s.name, s.calls, s.ms
                     FROM pg_stat_user_tables t,
                          LATERAL (SELECT CASE WHEN query ~ 'opsrun_claim\(' THEN 'claim'
                                               WHEN query ~ 'INSERT INTO runs AS r' THEN 'submit'
                                               WHEN query ~ 'jsonb_to_recordset.*attempt' THEN 'finish'
                                               WHEN query ~ 'DELETE FROM runs r USING d' THEN 'prune'
                                               WHEN query ~ 'opsrun_event_partitions_' THEN 'partitions'
                                          END AS name, sum(calls) AS calls,
                                          round(sum(total_exec_time)::numeric, 1) AS ms
                                     FROM pg_stat_statements WHERE toplevel
                                    GROUP BY 1) s
                    WHERE t.relname = 'runs' AND s.name IS NOT NULL) TO STDOUT" >>"$OUT/$TAG-trace.tsv"
        sql "COPY (SELECT extract(epoch FROM now()), indexrelname, pg_relation_size(indexrelid)
                     FROM pg_stat_user_indexes WHERE relname = 'runs') TO STDOUT" \
            >>"$OUT/$TAG-indexes.tsv"
    done
}
# The database's side, kept in tables of its own (a few hundred rows every
# 10 s) and read at the end.
#
# The probe is the baseline of the same run: a fixed piece of CPU work in
# a PostgreSQL backend (a sum over 300,000 numbers, 20 to 40 ms), timed
# every 10 s, which touches no table. When the engine's statements take
# longer a call and the probe does too, the machine gave the soak less CPU
# (another tenant of the host, a slower clock); when the probe stays level,
# the cause is in the data. Beside it, the whole machine's CPU from
# /proc/stat: busy (not idle, not iowait) and steal, in clock ticks, and
# how many of the busy ticks were the server's, PostgreSQL's (the
# postmaster, its live children, and the children it reaped) and the load
# generator's: the rest is everything else on the machine.
sql "CREATE TABLE soak_stmts (at timestamptz, queryid bigint, calls bigint, exec_ms float8, query text);
     CREATE TABLE soak_rels (at timestamptz, rel text, live bigint, dead bigint, vacuums bigint,
                             analyzes bigint, heap_kib bigint, index_kib bigint);
     CREATE TABLE soak_vacuums (at timestamptz, rel text, phase text);
     CREATE TABLE soak_probe (at timestamptz, ms float8);
     CREATE TABLE soak_cpu (at timestamptz, busy bigint, idle bigint, steal bigint,
                            server bigint, postgres bigint, loadgen bigint)"
# The CPU ticks of the processes named (utime + stime, and with -c the
# reaped children's too), from /proc/PID/stat; fields counted after the
# command's closing parenthesis, which may hold spaces.
ticks() {
    local children=0 pid total=0
    [ "$1" = -c ] && children=1 && shift
    for pid in "$@"; do
        total=$((total + $(awk -v c=$children '{ sub(/.*\) /, ""); print $12 + $13 + c * ($14 + $15) }' \
            "/proc/$pid/stat" 2>/dev/null || echo 0)))
    done
    echo $total
}
sample_db() {
    local cpu pm loadgen
    pm=$(head -1 "$DATA/pg/postmaster.pid")
    while :; do
        loadgen=$(pgrep -f "opsrun_loadgen soak http://127.0.0.1:$PORT" || true)
        # cpu user nice system idle iowait irq softirq steal
        cpu=$(awk '$1 == "cpu" {print $2 + $3 + $4 + $7 + $8 ", " $5 + $6 ", " $9}' /proc/stat)
        # shellcheck disable=SC2046 # one PID a word
        cpu+=", $(ticks "$SERVER"), $(($(ticks -c "$pm") + $(ticks $(cat "/proc/$pm/task/$pm/children")))), $(ticks $loadgen)"
        sql "DO \$\$ DECLARE t0 timestamptz := clock_timestamp(); BEGIN
                 PERFORM sum(g) FROM generate_series(1, 300000) g;
                 INSERT INTO soak_probe VALUES (now(), extract(epoch FROM clock_timestamp() - t0) * 1000);
             END \$\$;
             INSERT INTO soak_cpu VALUES (now(), $cpu);
             INSERT INTO soak_stmts SELECT now(), queryid, calls, total_exec_time,
                    left(regexp_replace(query, '\s+', ' ', 'g'), 90)
               FROM pg_stat_statements WHERE query !~ 'soak_|pg_stat';
             INSERT INTO soak_rels SELECT now(), relname, n_live_tup, n_dead_tup, autovacuum_count,
                    autoanalyze_count, pg_relation_size(relid) / 1024, pg_indexes_size(relid) / 1024
               FROM pg_stat_user_tables WHERE relname !~ '^soak_';
             INSERT INTO soak_vacuums SELECT now(), relid::regclass::text, phase
               FROM pg_stat_progress_vacuum WHERE datname = current_database()" || true
        sleep 10
    done
}
sample >"$OUT/$TAG-tables.tsv" &
SAMPLER=$!
sample_db &
SAMPLER="$SAMPLER $!"
if [ "${TRACE:-0}" = 1 ]; then
    trace &
    TRACER=$!
fi

echo "== soak: $MINUTES min at $RATE runs/s, retention 60 s ($BIN)"
build/opsrun_loadgen soak "http://127.0.0.1:$PORT" "$DB" "$MINUTES" "$RATE" 8 "$SERVER" \
    | tee "$OUT/$TAG.txt" | grep -E '^minute=|ratio|last_over_first' || true
kill $SAMPLER 2>/dev/null || true
SAMPLER=
if [ -n "$TRACER" ]; then
    kill "$TRACER" 2>/dev/null || true
    TRACER=
fi

echo "loadavg_end=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/$TAG-env.txt"
curl -s "http://127.0.0.1:$PORT/metrics" | grep -E '^opsrun_(runs_pruned|event_partitions_dropped)_total' \
    | tee -a "$OUT/$TAG-env.txt" || true
psql -X "$DB" -c "SELECT calls, round(total_exec_time::numeric) AS total_ms,
       round((total_exec_time / calls)::numeric, 2) AS ms_per_call, round(max_exec_time::numeric, 1) AS max_ms,
       rows, round((total_exec_time * 1000 / greatest(rows, 1))::numeric, 1) AS us_per_row,
       left(regexp_replace(query, '\s+', ' ', 'g'), 70) AS statement
  FROM pg_stat_statements
 WHERE query ~ '(DELETE FROM runs r USING d|opsrun_event_partitions_(drop|ensure))'
 ORDER BY total_exec_time DESC" | tee "$OUT/$TAG-retention.txt"
# Per minute of the soak: each busy statement's mean execution time (the
# ten with the most time overall), then runs' rows, dead rows and vacuums,
# and the vacuums seen running.
psql -X "$DB" >"$OUT/$TAG-minutes.txt" <<'SQL'
\pset footer off
WITH start AS (SELECT min(at) AS t0 FROM soak_stmts),
d AS (
    SELECT queryid, query, floor(extract(epoch FROM at - t0) / 60)::int + 1 AS minute,
           calls - lag(calls) OVER w AS calls, exec_ms - lag(exec_ms) OVER w AS ms
      FROM soak_stmts, start WINDOW w AS (PARTITION BY queryid ORDER BY at)),
top AS (
    SELECT queryid FROM d GROUP BY queryid ORDER BY sum(ms) DESC NULLS LAST LIMIT 10)
SELECT d.minute,
       left(min(query), 60) AS statement, sum(calls) AS calls,
       round((sum(ms) / nullif(sum(calls), 0))::numeric, 3) AS ms_per_call,
       round(sum(ms)::numeric) AS total_ms
  FROM d JOIN top USING (queryid)
 WHERE calls > 0
 GROUP BY 1, d.queryid
 ORDER BY d.queryid, 1;
SELECT floor(extract(epoch FROM at - t0) / 60)::int + 1 AS minute, rel, max(live) AS live, max(dead) AS max_dead, max(vacuums) AS vacuums,
       max(analyzes) AS analyzes, max(heap_kib) AS heap_kib, max(index_kib) AS index_kib
  FROM soak_rels, (SELECT min(at) AS t0 FROM soak_rels) s
 WHERE rel IN ('runs', 'workers', 'run_polls', 'rate_limit_slices', 'run_events_pruned')
 GROUP BY 1, rel ORDER BY rel, 1;
SELECT floor(extract(epoch FROM at - t0) / 60)::int + 1 AS minute, rel, string_agg(DISTINCT phase, ', ') AS phases, count(*) AS samples
  FROM soak_vacuums, (SELECT min(at) AS t0 FROM soak_rels) s
 GROUP BY 1, rel ORDER BY 1, rel;
WITH s AS (SELECT min(at) AS t0 FROM soak_rels),
p AS (SELECT floor(extract(epoch FROM at - t0) / 60)::int + 1 AS minute,
             round(min(ms)::numeric, 1) AS probe_min_ms,
             round((percentile_cont(0.5) WITHIN GROUP (ORDER BY ms))::numeric, 1) AS probe_median_ms
        FROM soak_probe, s GROUP BY 1),
c AS (SELECT floor(extract(epoch FROM at - t0) / 60)::int + 1 AS minute,
             busy - lag(busy) OVER w AS busy, idle - lag(idle) OVER w AS idle,
             steal - lag(steal) OVER w AS steal, server - lag(server) OVER w AS server,
             postgres - lag(postgres) OVER w AS postgres, loadgen - lag(loadgen) OVER w AS loadgen
        FROM soak_cpu, s WINDOW w AS (ORDER BY at))
SELECT p.minute, p.probe_min_ms, p.probe_median_ms,
       round(100.0 * sum(c.busy) / nullif(sum(c.busy + c.idle), 0), 1) AS machine_busy_pct,
       round(100.0 * sum(c.steal) / nullif(sum(c.busy + c.idle), 0), 1) AS steal_pct,
       round(100.0 * sum(c.server) / nullif(sum(c.busy + c.idle), 0), 1) AS server_pct,
       round(100.0 * sum(c.postgres) / nullif(sum(c.busy + c.idle), 0), 1) AS postgres_pct,
       round(100.0 * sum(c.loadgen) / nullif(sum(c.busy + c.idle), 0), 1) AS loadgen_pct,
       round(100.0 * sum(c.busy - c.server - c.postgres - c.loadgen)
             / nullif(sum(c.busy + c.idle), 0), 1) AS other_pct
  FROM p LEFT JOIN c USING (minute)
 GROUP BY 1, 2, 3 ORDER BY 1;
SQL
echo "== tables every 10 s: $OUT/$TAG-tables.tsv; the database per minute: $OUT/$TAG-minutes.txt"
if [ "${TRACE:-0}" = 1 ]; then
    cp "$(scripts/pg.sh log "$DATA/pg")" "$OUT/$TAG-pg.log"
    python3 bench/soaktrace.py "$OUT/$TAG" "${FROM_MINUTE:-1}" | tee "$OUT/$TAG-trace.txt"
fi
