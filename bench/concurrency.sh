#!/usr/bin/env bash
# bench/concurrency.sh — what concurrency keys and fair claims cost and
# give (docs/concurrency.md), each figure beside a baseline measured in the
# same run on the same durable cluster:
#   - keys: RUNS due no-op runs (simulate, 0 ms) inserted at once and
#     drained by one server with 32 workers, runs/s from the first start to
#     the last end, for runs of a type without concurrency ("none"), of a
#     type whose key is {{input:/host}} with max_running 1 and every run's
#     host its own ("keys": RUNS distinct keys), and the same without keys
#     but 100 more runs queued on one key ("onekey": the runs/s of the
#     others while those wait their turn); alternated ROUNDS times on fresh
#     databases; the ratios of the medians to "none";
#   - fairness: tenant b's pickup (started_at - created_at), 100 runs
#     submitted one every 50 ms, alone and while tenant a has BACKLOG
#     (default 20,000) runs of A_MS (default 20) ms queued at a higher
#     priority, p50/p99; on this tree's build and on BASE (default: the
#     merge base with main, or pass BASE=REV; a build without fair claims),
#     each on its own database; TENANT_CAP=N sets queue.tenant_max_running.
# Usage: bench/concurrency.sh [ROUNDS]   (RUNS=N, default 10000; BACKLOG=N;
#        A_MS=N; TENANT_CAP=N; BASE=REV; MEASURES="keys fair"; BUILDS="new base")
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."
. bench/lib.sh
ROUNDS=${1:-3}
RUNS=${RUNS:-10000}
BACKLOG=${BACKLOG:-20000}
A_MS=${A_MS:-20}
TENANT_CAP=${TENANT_CAP:-}
MEASURES=${MEASURES:-keys fair}
BUILDS=${BUILDS:-new base}
BASE=${BASE:-$(git merge-base HEAD main)}
OUT=bench/out
PORT=${PORT:-18196}
URL=http://127.0.0.1:$PORT
mkdir -p "$OUT"

bench_build -- opsrun
BASE_BIN=
case " $BUILDS " in *" base "*) BASE_BIN=$(bench_base_build "$BASE") ;; esac

DATA=$(mktemp -d /tmp/opsrun-bench-conc.XXXXXX)
chmod 755 "$DATA"
PID=""
stop() {
    if [ -n "$PID" ]; then
        kill "$PID" 2>/dev/null || true
        wait "$PID" 2>/dev/null || true
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

# A poll far longer than the set-up: nothing is claimed before the NOTIFY
# that starts the clock.
cat >"$DATA/keys.json" <<'EOF'
{"queue": {"poll_interval_ms": 120000},
 "run_types": {"plain": {"action": "simulate"},
               "keyed": {"action": "simulate",
                         "concurrency": {"key": "{{input:/host}}", "max_running": 1}}}}
EOF
echo "{\"queue\": {\"max_running\": 32${TENANT_CAP:+, \"tenant_max_running\": $TENANT_CAP}}}" >"$DATA/fair.json"

serve() { # serve BINARY DB CONFIG
    "$1" serve --config "$3" --database-url "$2" --listen "127.0.0.1:$PORT" \
        --workers 32 --log-level warn 2>>"$OUT/concurrency-serve.log" &
    PID=$!
    bench_wait_ready "$URL" 200
}

# median FILE NAME: the median of NAME's values in "round=R NAME key=V" lines.
median() {
    awk -v n="$2" '$2 == n {split($3, x, "="); v[++k] = x[2]}
     END { for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
           print k % 2 ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2 }' "$1"
}

# drain MODE ROUND: RUNS runs of MODE inserted, drained; prints runs/s.
drain() {
    local db type=plain one=0
    db=$(bench_db "$DATA" "keys_$1_$2")
    serve build/opsrun "$db" "$DATA/keys.json"
    [ "$1" = keys ] && type=keyed
    [ "$1" = onekey ] && one=100
    psql -qAtX -v ON_ERROR_STOP=1 "$db" >/dev/null <<EOF
INSERT INTO runs (tenant, id, type, max_attempts, timeout_s, input, identity_hash, request_hash)
SELECT 'default', 'r-' || i, '$type', 1, 900,
       jsonb_build_object('host', 'h-' || i, 'duration_ms', 0), 'r-' || i, 'x'
FROM generate_series(1, $RUNS) AS i;
INSERT INTO runs (tenant, id, type, max_attempts, timeout_s, input, identity_hash, request_hash)
SELECT 'default', 'one-' || i, 'keyed', 1, 900,
       jsonb_build_object('host', 'one', 'duration_ms', 0), 'one-' || i, 'x'
FROM generate_series(1, $one) AS i;
ANALYZE runs;
SELECT pg_notify('opsrun_queue', '');
EOF
    local i
    for ((i = 0; i < 1200; i++)); do
        [ "$(psql -qAtX "$db" -c "SELECT count(*) FROM runs WHERE id LIKE 'r-%' AND status = 'completed'")" = "$RUNS" ] && break
        sleep 0.1
    done
    psql -qAtX "$db" -c "SELECT round(count(*) / extract(epoch FROM max(completed_at) - min(started_at)))
                         FROM runs WHERE id LIKE 'r-%' AND status = 'completed'"
    stop
}

case " $MEASURES " in *" keys "*)
echo "== keys: $RUNS runs drained by 32 workers, $ROUNDS rounds (none, $RUNS keys, 100 on one key)"
: >"$OUT/concurrency-keys.txt"
for ((r = 1; r <= ROUNDS; r++)); do
    for mode in none keys onekey; do
        echo "round=$r $mode runs_per_s=$(drain "$mode" "$r")" | tee -a "$OUT/concurrency-keys.txt"
    done
done
none=$(median "$OUT/concurrency-keys.txt" none)
for mode in keys onekey; do
    m=$(median "$OUT/concurrency-keys.txt" "$mode")
    echo "median_${mode}_runs_per_s=$m median_none_runs_per_s=$none ${mode}_over_none=$(awk -v a="$m" -v b="$none" 'BEGIN { printf "%.2f", a / b }')"
done | tee "$OUT/concurrency-keys-summary.txt"
;;
esac

# pickup BINARY NAME BACKLOG: b's pickup p50/p99 (ms) over 100 runs.
pickup() {
    local db i
    db=$(bench_db "$DATA" "fair_$2")
    serve "$1" "$db" "$DATA/fair.json"
    if (($3 > 0)); then
        psql -qAtX -v ON_ERROR_STOP=1 "$db" >/dev/null <<EOF
INSERT INTO runs (tenant, id, type, max_attempts, timeout_s, input, identity_hash, request_hash, priority)
SELECT 'a', 'a-' || i, 'demo', 1, 900, '{"duration_ms": $A_MS}', 'a-' || i, 'x', 5
FROM generate_series(1, $3) AS i;
ANALYZE runs;
SELECT pg_notify('opsrun_queue', '');
EOF
        sleep 1
    fi
    for ((i = 1; i <= 100; i++)); do
        psql -qAtX -v ON_ERROR_STOP=1 "$db" >/dev/null -c "BEGIN" -c \
            "INSERT INTO runs (tenant, id, type, max_attempts, timeout_s, input, identity_hash, request_hash)
             VALUES ('b', 'b-$i', 'demo', 1, 900, '{\"duration_ms\": 0}', 'b-$i', 'x')" \
            -c "SELECT pg_notify('opsrun_queue', '')" -c "COMMIT"
        sleep 0.05
    done
    for ((i = 0; i < 600; i++)); do
        [ "$(psql -qAtX "$db" -c "SELECT count(*) FROM runs WHERE tenant = 'b' AND status = 'completed'")" = 100 ] && break
        sleep 0.1
    done
    psql -qAtX "$db" -c "SELECT 'a_queued_at_the_end=' || count(*) FROM runs WHERE tenant = 'a' AND status = 'queued'"
    psql -qAtX "$db" -c "SELECT 'pickup_p50_ms=' || round((percentile_cont(0.5) WITHIN GROUP (ORDER BY x) * 1000)::numeric, 1),
                                'pickup_p99_ms=' || round((percentile_cont(0.99) WITHIN GROUP (ORDER BY x) * 1000)::numeric, 1)
                         FROM (SELECT extract(epoch FROM started_at - created_at) AS x FROM runs WHERE tenant = 'b') p" |
        tr '|' '\n'
    stop
}

case " $MEASURES " in *" fair "*) ;; *) exit 0 ;; esac
echo "== fairness: tenant b's pickup, alone and behind tenant a's $BACKLOG runs of $A_MS ms${TENANT_CAP:+, tenant_max_running $TENANT_CAP}"
for bin in $BUILDS; do
    b=build/opsrun
    [ "$bin" = base ] && b=$BASE_BIN
    echo "-- $bin: b alone"
    pickup "$b" "${bin}_alone" 0 | tee "$OUT/concurrency-fair-$bin-alone.txt"
    echo "-- $bin: b behind a's backlog"
    pickup "$b" "${bin}_backlog" "$BACKLOG" | tee "$OUT/concurrency-fair-$bin-backlog.txt"
done
for bin in $BUILDS; do
    a=$(sed -n 's/^pickup_p99_ms=//p' "$OUT/concurrency-fair-$bin-alone.txt")
    k=$(sed -n 's/^pickup_p99_ms=//p' "$OUT/concurrency-fair-$bin-backlog.txt")
    echo "${bin}_p99_alone_ms=$a ${bin}_p99_backlog_ms=$k ${bin}_backlog_over_alone=$(awk -v a="$a" -v k="$k" 'BEGIN { printf "%.2f", k / a }')"
done | tee "$OUT/concurrency-fair-summary.txt"
