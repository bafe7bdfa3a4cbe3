#!/usr/bin/env bash
# bench/logs.sh — the figures of runs' logs (docs/logs.md), each beside a
# baseline measured in the same run on the same durable cluster:
#   - a chatty run: one exec run whose command writes LINES (default
#     100,000) lines to stderr as fast as it can: the lines stored (all of
#     them, or up to logs.max_bytes_per_attempt with the dropped count
#     exact), the run's wall time (started_at to completed_at) and the
#     command's own (its log's "started" line to its "exited" line: is it
#     ever held up by its output?), against the same command writing to
#     /dev/null, alternated ROUNDS times
#     (default 3); and the pickup p50/p99 of plain runs while chatty runs
#     run back to back, against the same pickup with none;
#   - what lines cost the run path: end-to-end runs/s of no-op demo runs
#     with 10 steps (12 lines a run: a line a step, and opsrun's own two)
#     and without (opsrun's two lines), each against the same runs on the
#     build BASE (default: the merge base with main, a binary without
#     logs), alternated ROUNDS times on fresh databases; the ratios of the
#     medians (the steps' progress costs both builds alike);
#   - a follower's latency: a run whose command writes a line every 20 ms,
#     500 of them, followed by 100 streams (GET /runs/{id}/logs/stream):
#     from when opsrun read a line to its arrival at each follower,
#     p50/p99/max (bench/ssebench.c loglatency), at logs.flush_ms 200 (the
#     default) and 20.
# Usage: bench/logs.sh [ROUNDS]   (LINES=N, RUNS=N runs per round, default
#        6400; BASE=REV; FOLLOWERS=N, default 100)
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."
. bench/lib.sh
ROUNDS=${1:-3}
LINES=${LINES:-100000}
RUNS=${RUNS:-6400}
FOLLOWERS=${FOLLOWERS:-100}
BASE=${BASE:-$(git merge-base HEAD main 2>/dev/null || echo HEAD~1)}
OUT=bench/out
PORT=18195
URL=http://127.0.0.1:$PORT
mkdir -p "$OUT"

bench_build -- opsrun opsrun_loadgen opsrun_ssebench
BASE_BIN=$(bench_base_build "$BASE")

DATA=$(mktemp -d /tmp/opsrun-bench-logs.XXXXXX)
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

# serve BIN DB CONFIG: opsrun on PORT, in the background.
serve() {
    "$1" serve --config "$3" --database-url "$2" --listen "127.0.0.1:$PORT" \
        --workers 16 --log-level warn 2>>"$OUT/logs-serve.log" &
    PID=$!
    bench_wait_ready "$URL" 200
}

# median of the values of NAME in FILE's "round=R NAME key=V" lines.
median() {
    awk -v n="$2" '$2 == n {split($3, x, "="); v[++k] = x[2]}
     END { for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
           print k % 2 ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2 }' "$1"
}

cat >"$DATA/chatty.sh" <<EOF
#!/bin/sh
seq 1 $LINES >&2
echo '{}'
EOF
cat >"$DATA/quiet.sh" <<EOF
#!/bin/sh
seq 1 $LINES >/dev/null
echo '{}'
EOF
cat >"$DATA/ticker.sh" <<'EOF'
#!/bin/sh
i=0
while [ $i -lt 500 ]; do echo "tick $i" >&2; sleep 0.02; i=$((i + 1)); done
echo '{}'
EOF
chmod 755 "$DATA"/*.sh
conf() { # conf NAME EXTRA: a config with the three exec types
    cat >"$DATA/$1.json" <<EOF
{"limits": {"submit_rate_per_s": 0}, $2
 "run_types": {"chatty": {"action": "exec", "params": {"argv": ["$DATA/chatty.sh"]}},
               "quiet": {"action": "exec", "params": {"argv": ["$DATA/quiet.sh"]}},
               "ticker": {"action": "exec", "params": {"argv": ["$DATA/ticker.sh"]}}}}
EOF
}
conf plain ""
conf fast '"logs": {"flush_ms": 20},'

# wall TYPE ID: submit a run of TYPE, wait for its end; its wall time in ms.
wall() {
    curl -sf -H 'Content-Type: application/json' -d "{\"alert_type\": \"$1\", \"run_id\": \"$2\"}" \
        "$URL/alerts?wait=60" >/dev/null
    psql -qAt "$DB" -c "SELECT round(extract(epoch FROM completed_at - started_at) * 1000)
                        FROM runs WHERE id = '$2' AND outcome = 'succeeded'"
}

# cmdms ID: the command's time in ms, from the line saying opsrun started
# it to the line saying it exited (when opsrun read each).
cmdms() {
    psql -qAt "$DB" -c "SELECT round((max((x.v->>0)::bigint) FILTER (WHERE x.v->>2 LIKE 'the command exited%')
                                     - max((x.v->>0)::bigint) FILTER (WHERE x.v->>2 LIKE 'started %')) / 1000.0)
                        FROM run_logs l, json_array_elements(l.lines) x(v) WHERE l.run_id = '$1'"
}

echo "== a chatty run: $LINES lines to stderr, against /dev/null, $ROUNDS rounds"
: >"$OUT/logs-chatty.txt"
DB=$(bench_db "$DATA" chatty)
serve build/opsrun "$DB" "$DATA/plain.json"
for ((r = 1; r <= ROUNDS; r++)); do
    echo "round=$r quiet ms=$(wall quiet "quiet-$r")" | tee -a "$OUT/logs-chatty.txt"
    echo "round=$r chatty ms=$(wall chatty "chatty-$r")" | tee -a "$OUT/logs-chatty.txt"
    echo "round=$r quiet_cmd ms=$(cmdms "quiet-$r")" | tee -a "$OUT/logs-chatty.txt"
    echo "round=$r chatty_cmd ms=$(cmdms "chatty-$r")" | tee -a "$OUT/logs-chatty.txt"
done
psql -qAt "$DB" -c "SELECT 'stored_lines=' || count(*) FILTER (WHERE x.v->>1 = 'stderr'),
                           'dropped_bytes=' || (SELECT sum(dropped) FROM run_logs WHERE run_id = 'chatty-1')
                    FROM run_logs l, json_array_elements(l.lines) x(v) WHERE l.run_id = 'chatty-1'" |
    tr '|' '\n' | tee "$OUT/logs-chatty-stored.txt"
q=$(median "$OUT/logs-chatty.txt" quiet)
c=$(median "$OUT/logs-chatty.txt" chatty)
echo "quiet_over_chatty=$(awk -v q="$q" -v c="$c" 'BEGIN { printf "%.2f", q / c }')" |
    tee -a "$OUT/logs-chatty-stored.txt"
q=$(median "$OUT/logs-chatty.txt" quiet_cmd)
c=$(median "$OUT/logs-chatty.txt" chatty_cmd)
echo "quiet_cmd_ms=$q chatty_cmd_ms=$c quiet_cmd_over_chatty_cmd=$(awk -v q="$q" -v c="$c" 'BEGIN { printf "%.2f", c ? q / c : 0 }')" |
    tee -a "$OUT/logs-chatty-stored.txt"

echo "-- pickup of plain runs: alone, then beside chatty runs back to back"
build/opsrun_loadgen pickup "$URL" "$DB" 200 | tee "$OUT/logs-pickup-alone.txt"
(for i in $(seq 1000); do wall chatty "bg-$i" >/dev/null || break; done) &
BG=$!
sleep 1
build/opsrun_loadgen pickup "$URL" "$DB" 200 | tee "$OUT/logs-pickup-chatty.txt"
kill "$BG" 2>/dev/null || true
wait "$BG" 2>/dev/null || true
stop

echo "== runs/s against $BASE (no logs): the same runs, with 10 steps and without; $RUNS runs, 16 clients, $ROUNDS rounds"
: >"$OUT/logs-cost.txt"
for ((r = 1; r <= ROUNDS; r++)); do
    for conf in base_quiet new_quiet base_talky new_talky; do
        DB=$(bench_db "$DATA" "cost_${conf}_$r")
        bin=build/opsrun
        [ "${conf%%_*}" = base ] && bin=$BASE_BIN
        serve "$bin" "$DB" "$DATA/plain.json"
        steps=0
        [ "${conf#*_}" = talky ] && steps=10
        v=$(LOADGEN_STEPS=$steps build/opsrun_loadgen throughput "$URL" "$DB" "$RUNS" 16 |
            sed -n 's/^runs_per_s=//p')
        echo "round=$r $conf runs_per_s=$v" | tee -a "$OUT/logs-cost.txt"
        stop
    done
done
{
    for conf in base_quiet new_quiet base_talky new_talky; do
        eval "m_$conf=$(median "$OUT/logs-cost.txt" "$conf")"
        echo "median_${conf}_runs_per_s=$(median "$OUT/logs-cost.txt" "$conf")"
    done
    # shellcheck disable=SC2154 # set by the eval above
    awk -v bq="$m_base_quiet" -v nq="$m_new_quiet" -v bt="$m_base_talky" -v nt="$m_new_talky" \
        'BEGIN { printf "quiet_new_over_base=%.2f\ntalky_new_over_base=%.2f\n", nq / bq, nt / bt }'
} | tee "$OUT/logs-cost-summary.txt"

for conf in plain fast; do
    echo "== $FOLLOWERS followers of a run writing a line every 20 ms ($conf)"
    DB=$(bench_db "$DATA" "follow_$conf")
    serve build/opsrun "$DB" "$DATA/$conf.json"
    due=$(date -u -d '+4 seconds' +%Y-%m-%dT%H:%M:%S.%NZ)
    curl -sf -H 'Content-Type: application/json' \
        -d "{\"alert_type\": \"ticker\", \"run_id\": \"tick\", \"run_at\": \"$due\"}" "$URL/alerts" >/dev/null
    build/opsrun_ssebench loglatency "$URL" "$DB" tick "$FOLLOWERS" | tee "$OUT/logs-follow-$conf.txt"
    stop
done
