#!/usr/bin/env bash
# bench/lifecycle.sh — what a run costs the database at the least, in the
# schema of this build: pgbench runs bench/lifecycle.sql (50 no-op runs
# inserted, claimed by opsrun_claim and completed, each step with its event
# rows, three transactions) with CLIENTS clients for SECONDS, on a durable
# cluster, and reports runs/s. No opsrun process runs: the schema and its
# indexes alone are measured.
#
# Usage: bench/lifecycle.sh [SECONDS] [CLIENTS]   (defaults 20, 4)
#   BASE=REV   also the schema git revision REV's build migrates to
#              (bench_base_build), alternated with this one
#   NARROW=1   also this schema with the claim's state in a narrow table
#              (bench/narrow.sql, bench/lifecycle-narrow.sql)
#   REPS=N     rounds (default 3); each measurement starts from empty tables
#   E2E=1      also, in each round, this build end to end beside its floor:
#              its server (--workers 32, no per-caller limits) on a fresh
#              database, E2E_RUNS (default 32000) no-op demo runs submitted
#              singly from 64 clients and as arrays of 1,000 from 4
#              connections (opsrun_loadgen throughput and bulk, as
#              bench/ab.sh), first submit to last completed_at; prints each
#              ÷ the floor of the same round, and their medians
# The summary goes to bench/out/lifecycle.txt.
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."
. bench/lib.sh
SECONDS_EACH=${1:-20}
CLIENTS=${2:-4}
REPS=${REPS:-3}
OUT=bench/out
mkdir -p "$OUT"

E2E_RUNS=${E2E_RUNS:-32000}
if [ -n "${E2E:-}" ]; then
    bench_build -- opsrun opsrun_loadgen
else
    bench_build -- opsrun
fi
VARIANTS=(new)
declare -A BIN=([new]=build/opsrun) SCRIPT=([new]=bench/lifecycle.sql)
if [ -n "${BASE:-}" ]; then
    VARIANTS=(base "${VARIANTS[@]}")
    BIN[base]=$(bench_base_build "$BASE")
    SCRIPT[base]=bench/lifecycle.sql
fi
if [ -n "${NARROW:-}" ]; then
    VARIANTS+=(narrow)
    BIN[narrow]=build/opsrun
    SCRIPT[narrow]=bench/lifecycle-narrow.sql
fi

DATA=$(mktemp -d /tmp/opsrun-lifecycle.XXXXXX)
chmod 755 "$DATA"
SERVER=""
trap '[ -z "$SERVER" ] || kill "$SERVER" 2>/dev/null; bench_cluster_destroy "$DATA"; rm -rf "$DATA"' EXIT
bench_cluster "$DATA"
PGBENCH=$(ls -d /usr/lib/postgresql/*/bin/pgbench | sort -V | tail -n 1)

declare -A URL
for v in "${VARIANTS[@]}"; do
    scripts/pg.sh createdb "$DATA/pg" "lc_$v" >/dev/null
    URL[$v]=$(scripts/pg.sh url "$DATA/pg" "lc_$v")
    "${BIN[$v]}" migrate --database-url "${URL[$v]}" --log-level warn
    psql -qX -v ON_ERROR_STOP=1 "${URL[$v]}" -c "CREATE SEQUENCE lifecycle_seq"
    [ "$v" = narrow ] && psql -qX -v ON_ERROR_STOP=1 "${URL[$v]}" -f bench/narrow.sql
done

# e2e MODE REP: this build's server on a fresh database, MODE's load
# (single or bulk); prints runs/s, or nothing when it failed.
echo '{"http": {"max_connections_per_ip": 0}, "limits": {"submit_rate_per_s": 0}}' >"$DATA/e2e.json"
e2e() {
    local url port=18195 out
    url=$(bench_db "$DATA" "e2e_$1_$2")
    build/opsrun serve --config "$DATA/e2e.json" --database-url "$url" --listen "127.0.0.1:$port" \
        --workers 32 --log-level warn 2>>"$OUT/lifecycle-serve.log" &
    SERVER=$!
    if bench_wait_ready "http://127.0.0.1:$port" 300; then
        if [ "$1" = single ]; then
            out=$(build/opsrun_loadgen throughput "http://127.0.0.1:$port" "$url" "$E2E_RUNS" 64)
        else
            out=$(build/opsrun_loadgen bulk "http://127.0.0.1:$port" "$url" "$E2E_RUNS" 4 1000)
        fi
        echo "$out" | sed -n 's/^\(bulk_\)\{0,1\}runs_per_s=\([0-9]*\).*/\2/p'
    fi
    kill "$SERVER" 2>/dev/null && wait "$SERVER" 2>/dev/null || true
    SERVER=""
    psql -qX "$(scripts/pg.sh url "$DATA/pg" postgres)" -c "DROP DATABASE \"e2e_$1_$2\"" -c CHECKPOINT >/dev/null
}

: >"$DATA/summary.tsv"
for ((rep = 1; rep <= REPS; rep++)); do
    for v in "${VARIANTS[@]}"; do
        # The outbox by name (no foreign key ties it to runs since
        # migration 030); CASCADE: any table that references runs.
        psql -qX -v ON_ERROR_STOP=1 "${URL[$v]}" -c "SET client_min_messages = warning" \
            -c "TRUNCATE runs, run_polls, run_events, notifications CASCADE" \
            -c "DO \$\$BEGIN IF to_regclass('run_active') IS NOT NULL THEN
                  TRUNCATE run_active; END IF; END\$\$" -c CHECKPOINT -c VACUUM
        tps=$("$PGBENCH" -n -c "$CLIENTS" -j 2 -T "$SECONDS_EACH" -f "${SCRIPT[$v]}" "${URL[$v]}" |
            sed -n 's/^tps = \([0-9.]*\).*/\1/p')
        runs=$(awk -v t="$tps" 'BEGIN {printf "%d", t * 50}')
        echo "$v rep $rep: $runs runs/s"
        printf '%s\t%s\t%s\n' "$v" "$rep" "$runs" >>"$DATA/summary.tsv"
    done
    if [ -n "${E2E:-}" ]; then
        for mode in single bulk; do
            runs=$(e2e "$mode" "$rep")
            if [ -z "$runs" ]; then
                echo "lifecycle.sh: end to end ($mode) failed in round $rep" >&2
                exit 1
            fi
            echo "e2e_$mode rep $rep: $runs runs/s"
            printf '%s\t%s\t%s\n' "e2e_$mode" "$rep" "$runs" >>"$DATA/summary.tsv"
        done
    fi
done

{
    echo "== lifecycle: 50 runs a transaction triple, $CLIENTS clients, ${SECONDS_EACH} s each," \
        "load average $(cut -d' ' -f1-3 /proc/loadavg)"
    median() { # the median of the numbers on stdin, printed with format $1
        sort -n | awk -v f="$1" '{a[NR] = $1}
            END {printf f, NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'
    }
    median_of() { # the median runs/s of variant $1
        awk -F'\t' -v v="$1" '$1 == v {print $3}' "$DATA/summary.tsv" | median '%d\n'
    }
    new=$(median_of new)
    for v in "${VARIANTS[@]}"; do
        m=$(median_of "$v")
        printf '%-7s runs/s:%s  median %s' "$v" \
            "$(awk -F'\t' -v v="$v" '$1 == v {printf " %s", $3}' "$DATA/summary.tsv")" "$m"
        [ "$v" != new ] && awk -v a="$new" -v b="$m" 'BEGIN {printf "  new/%s %.2f", "'"$v"'", a / b}'
        echo
    done
    if [ -n "${E2E:-}" ]; then # each round's end to end over its floor, and their median
        for mode in single bulk; do
            ratios=$(awk -F'\t' -v m="e2e_$mode" '$1 == "new" {f[$2] = $3} $1 == m {e[$2] = $3}
                END {for (r in e) printf "%d %.2f\n", r, e[r] / f[r]}' "$DATA/summary.tsv" | sort -n)
            med=$(echo "$ratios" | awk '{print $2}' | median '%.2f')
            printf '%-7s runs/s:%s  median %s  over the floor by round:%s  median %s\n' "e2e_$mode" \
                "$(awk -F'\t' -v v="e2e_$mode" '$1 == v {printf " %s", $3}' "$DATA/summary.tsv")" \
                "$(median_of "e2e_$mode")" "$(echo "$ratios" | awk '{printf " %s", $2}')" "$med"
        done
    fi
} | tee "$OUT/lifecycle.txt"
