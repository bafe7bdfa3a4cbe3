#!/usr/bin/env bash
# bench/pgcost.sh — what one run costs the database and the server: the drain
# of bench/drain.sh (RUNS due no-op demo runs inserted in one statement, then
# WORKERS workers run them), with pg_stat_statements on. Counted from the
# wake-up to the last completion (the insert is left out): PostgreSQL's
# execution time per run by statement (total_exec_time / RUNS, nested
# statements of SQL functions listed too), the CPU time per run of every
# PostgreSQL process of the cluster and of the opsrun process (from
# /proc/PID/stat), and runs/s.
#
# Usage: bench/pgcost.sh [RUNS] [WORKERS]   (defaults 50000, 32)
#   BASE=REV        also measures a Release build of git revision REV (made
#                   from `git archive REV`, kept in bench/out/base-<hash>/),
#                   alternating with this tree's build: the baseline
#   REPS=N          measurements of each build (default 1)
#   CONFIG='{...}'  the configuration file (default: a 120 s poll interval)
#   PORT=N          the server's port (default 18186)
#   TOP=N           statements listed per measurement (default 15)
# Each measurement uses a fresh database of one durable cluster; the raw
# figures go to bench/out/pgcost-<build>-<rep>.txt, the summary to
# bench/out/pgcost.txt.
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."

# The hook bench/loadgen.c runs between the insert and the wake-up: the
# counters start here. Arguments: the mark file, the cluster's data
# directory, the server's pid, the database URL.
if [ "${1:-}" = --mark ]; then
    psql -qAtX "$5" -c "SELECT pg_stat_statements_reset()" >/dev/null
    bash "$0" --ticks "$3" "$4" >"$2"
    exit 0
fi
# "PG_TICKS OPSRUN_TICKS": CPU clock ticks (utime + stime, and those of
# reaped children) of the cluster's processes and of the server.
if [ "${1:-}" = --ticks ]; then
    ticks() { awk '{ print $14 + $15 + $16 + $17 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
    pm=$(head -n 1 "$2/pg/postmaster.pid")
    pg=0
    for c in $(pgrep -P "$pm") "$pm"; do pg=$((pg + $(ticks "$c"))); done
    echo "$pg $(ticks "$3")"
    exit 0
fi

. bench/lib.sh
RUNS=${1:-50000}
WORKERS=${2:-32}
REPS=${REPS:-1}
PORT=${PORT:-18186}
TOP=${TOP:-15}
OUT=bench/out
mkdir -p "$OUT"
rm -f "$OUT/pgcost.txt"
HZ=$(getconf CLK_TCK)

bench_build -- opsrun opsrun_loadgen
BUILDS=(new)
declare -A BIN=([new]=build/opsrun)
if [ -n "${BASE:-}" ]; then
    BUILDS=(base new)
    BIN[base]=$(bench_base_build "$BASE")
fi

DATA=$(mktemp -d /tmp/opsrun-pgcost.XXXXXX)
chmod 755 "$DATA"
PID=""
cleanup() {
    [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true
    bench_cluster_destroy "$DATA"
    rm -rf "$DATA"
}
trap cleanup EXIT

export OPSRUN_PG_OPTS="${OPSRUN_PG_OPTS:-} -c shared_preload_libraries=pg_stat_statements \
-c pg_stat_statements.track=all -c pg_stat_statements.max=1000"
bench_cluster "$DATA"
echo "${CONFIG:-{\"queue\": {\"poll_interval_ms\": 120000\}\}}" >"$DATA/config.json"

# The statements of bench/loadgen.c itself (its progress polls and its
# rate), left out of the totals.
LOADGEN="(query LIKE '%id LIKE%' OR query LIKE '%clock_timestamp()%' OR query LIKE '%pg_stat_statements%')"

# measure LABEL REP: one drain on a fresh database; appends a summary line.
measure() {
    local label=$1 rep=$2 db url raw=$OUT/pgcost-$1-$2.txt t0 t1 rate
    db="pgcost_${label}_$rep"
    scripts/pg.sh createdb "$DATA/pg" "$db" >/dev/null
    url=$(scripts/pg.sh url "$DATA/pg" "$db")
    psql -qAtX "$url" -c "CREATE EXTENSION pg_stat_statements"
    "${BIN[$label]}" serve --config "$DATA/config.json" --database-url "$url" \
        --listen "127.0.0.1:$PORT" --workers "$WORKERS" --log-level warn 2>"$OUT/pgcost-serve.log" &
    PID=$!
    bench_wait_ready "http://127.0.0.1:$PORT"
    sleep 1
    rate=$(build/opsrun_loadgen drain "http://127.0.0.1:$PORT" "$url" "$RUNS" \
        "bash bench/pgcost.sh --mark $DATA/mark $DATA $PID '$url'" |
        sed -n 's/^drain_runs_per_s=//p')
    t1=$(bash bench/pgcost.sh --ticks "$DATA" "$PID")
    t0=$(cat "$DATA/mark")
    kill "$PID"
    wait "$PID" 2>/dev/null || true
    PID=""
    {
        echo "== $label (${BIN[$label]}), rep $rep: $RUNS runs, $WORKERS workers"
        echo "drain_runs_per_s=$rate"
        # shellcheck disable=SC2086 # two numbers each
        set -- $t0 $t1
        awk -v a="$1" -v b="$2" -v c="$3" -v d="$4" -v hz="$HZ" -v n="$RUNS" 'BEGIN {
            printf "pg_cpu_us_per_run=%.1f\nopsrun_cpu_us_per_run=%.1f\n",
                   (c - a) * 1e6 / hz / n, (d - b) * 1e6 / hz / n }'
        psql -qAtX "$url" -c "SELECT 'pg_exec_us_per_run=' || round((sum(total_exec_time) / $RUNS
            * 1000)::numeric, 1) FROM pg_stat_statements WHERE toplevel AND NOT $LOADGEN
            AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
        psql -X "$url" -P footer=off -c "SELECT round((total_exec_time / $RUNS * 1000)::numeric, 1)
            AS us_per_run, calls, round(rows::numeric / greatest(calls, 1), 1) AS rows_per_call,
            CASE WHEN $LOADGEN THEN '(loadgen) ' WHEN NOT toplevel THEN '(nested) ' ELSE '' END
            || left(regexp_replace(query, '\s+', ' ', 'g'), 110) AS statement
            FROM pg_stat_statements
            WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
            ORDER BY total_exec_time DESC LIMIT $TOP"
    } >"$raw"
    cat "$raw"
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$label" "$rep" \
        "$(sed -n 's/^drain_runs_per_s=//p' "$raw")" \
        "$(sed -n 's/^pg_exec_us_per_run=//p' "$raw")" \
        "$(sed -n 's/^pg_cpu_us_per_run=//p' "$raw")" \
        "$(sed -n 's/^opsrun_cpu_us_per_run=//p' "$raw")" >>"$DATA/summary.tsv"
}

for ((rep = 1; rep <= REPS; rep++)); do
    for label in "${BUILDS[@]}"; do
        measure "$label" "$rep"
    done
done

{
    echo "== summary: $RUNS runs, $WORKERS workers, load average $(cut -d' ' -f1-3 /proc/loadavg)"
    printf '%-6s %4s %10s %18s %17s %21s\n' build rep "runs/s" "pg exec us/run" "pg CPU us/run" \
        "opsrun CPU us/run"
    while IFS=$'\t' read -r b r x e p o; do
        printf '%-6s %4s %10s %18s %17s %21s\n' "$b" "$r" "$x" "$e" "$p" "$o"
    done <"$DATA/summary.tsv"
    if [ -n "${BASE:-}" ]; then
        # Ratios new / base of the medians.
        awk -F'\t' '
            { v[$1, 3, ++n[$1]] = $3; v[$1, 4, n[$1]] = $4; v[$1, 5, n[$1]] = $5; v[$1, 6, n[$1]] = $6 }
            function med(b, k,   i, j, t, a, m) {
                m = n[b]
                for (i = 1; i <= m; i++) a[i] = v[b, k, i]
                for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++)
                    if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
                return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
            }
            END {
                split("runs/s,pg exec us/run,pg CPU us/run,opsrun CPU us/run", name, ",")
                for (k = 3; k <= 6; k++) {
                    b = med("base", k)
                    printf "%-18s base %8.1f  new %8.1f  new/base %.2f\n", name[k - 2], b,
                           med("new", k), b ? med("new", k) / b : 0
                }
            }' "$DATA/summary.tsv"
    fi
} | tee "$OUT/pgcost.txt"
