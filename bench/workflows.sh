#!/usr/bin/env bash
# bench/workflows.sh — what workflows cost (docs/workflows.md), on one
# durable cluster with pg_stat_statements (track = all, so that the
# statements of triggers and functions count), each measurement on a fresh
# database and a fresh server:
#
#   wide    one workflow of 50 no-op steps, 5 levels of 10, each step of a
#           level needing every step of the level before (fan-out 10 wide,
#           joins of 10): from its submission to its end, and the database
#           statements per step;
#   chain   50 no-op runs chained as follow-ups (then), the same figures;
#   many    N workflows of 5 no-op steps (a; b, c, d after a; e after all
#           three) submitted at once, in arrays of 1,000: steps per second
#           from the first submission to the last end;
#   plain   5 x N no-op runs submitted the same way: runs per second.
#
# many and plain run in databases where pg_stat_statements counts nothing
# (track = none): counting each statement costs microseconds, and the
# workflows' triggers run many more nested statements than plain runs, so
# the count would lower the very ratio it is not there to measure.
#
# PAIRS alternated rounds (default 3): wide, chain, many, plain. Prints each
# round's figures, then the medians and the ratios (chain ÷ wide wall time;
# many ÷ plain per second, one per round, with its median).
# Usage: bench/workflows.sh            N=1000 PAIRS=3 WORKERS=32
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."
. bench/lib.sh
PAIRS=${PAIRS:-3}
N=${N:-1000}
WORKERS=${WORKERS:-32}
OUT=bench/out
PORT=18194
URL=http://127.0.0.1:$PORT
mkdir -p "$OUT"

bench_build -- opsrun

DATA=$(mktemp -d /tmp/opsrun-bench-wf.XXXXXX)
chmod 755 "$DATA"
PID=""
cleanup() {
    if [ -n "$PID" ]; then
        kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true
    fi
    bench_cluster_destroy "$DATA"
    rm -rf "$DATA"
}
trap cleanup EXIT
OPSRUN_PG_OPTS="-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all -c pg_stat_statements.max=10000" \
    bench_cluster "$DATA"

python3 - "$DATA/c.json" <<'EOF'
import json, sys
nop = {"action": "simulate", "params": {"duration_ms": 0, "steps": 0}}
types = {"nop": nop}
steps = {}
for lv in range(5):
    for i in range(10):
        s = {"run_type": "nop"}
        if lv:
            s["needs"] = [f"l{lv - 1}_{j}" for j in range(10)]
        steps[f"l{lv}_{i}"] = s
types["wide"] = {"action": "workflow", "params": {"steps": steps}}
for k in range(1, 51):
    t = dict(nop)
    if k < 50:
        t = dict(nop, then=[{"on": ["succeeded"], "run_type": f"chain{k + 1}"}])
    types[f"chain{k}"] = t
types["five"] = {"action": "workflow", "params": {"steps": {
    "a": {"run_type": "nop"}, "b": {"run_type": "nop", "needs": ["a"]},
    "c": {"run_type": "nop", "needs": ["a"]}, "d": {"run_type": "nop", "needs": ["a"]},
    "e": {"run_type": "nop", "needs": ["b", "c", "d"]}}}}
json.dump({"run_types": types, "queue": {"max_chain_depth": 60, "max_running": 400},
           "limits": {"submit_rate_per_s": 0}}, open(sys.argv[1], "w"))
EOF

# start NAME [untracked]: a fresh database NAME and a server on it;
# untracked, with pg_stat_statements counting nothing in it.
start() {
    CUR=$(bench_db "$DATA" "$1")
    if [ "${2:-}" = untracked ]; then
        sql "ALTER DATABASE $1 SET pg_stat_statements.track = none" >/dev/null
    fi
    build/opsrun serve --config "$DATA/c.json" --database-url "$CUR" --listen "127.0.0.1:$PORT" \
        --workers "$WORKERS" --log-level warn 2>>"$OUT/workflows-serve.log" &
    PID=$!
    bench_wait_ready "$URL" 200
    sql "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null
}
stop() {
    kill "$PID" && wait "$PID" 2>/dev/null || true
    PID=""
}
sql() {
    psql -qAtX -v ON_ERROR_STOP=1 "$CUR" -c "$1"
}
calls() {
    sql "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements"
}
# wait_done N: until N runs exist and every one has completed.
wait_done() {
    local i
    for ((i = 0; i < 6000; i++)); do
        [ "$(sql "SELECT count(*) FILTER (WHERE status = 'completed') = $1 AND count(*) = $1
                  FROM runs")" = t ] && return 0
        sleep 0.05
    done
    echo "timed out waiting for $1 completed runs" >&2
    return 1
}
# post BODY: POST /alerts.
post() {
    curl -sf -o /dev/null -H 'content-type: application/json' --data-binary @- "$URL/alerts"
}
# arrays TYPE COUNT: COUNT submissions of TYPE, in arrays of 1,000.
arrays() {
    python3 - "$1" "$2" <<'EOF' | while IFS= read -r line; do printf '%s' "$line" | post; done
import json, sys
t, n = sys.argv[1], int(sys.argv[2])
for s in range(0, n, 1000):
    print(json.dumps([{"alert_type": t, "data": {"i": i}} for i in range(s, min(n, s + 1000))]))
EOF
}
span_ms() {
    sql "SELECT round(extract(epoch FROM max(completed_at) - min(created_at)) * 1000) FROM runs"
}

declare -A FIG
round() {
    local p=$1 c0
    start "wide$p"
    sql "SELECT pg_stat_statements_reset()" >/dev/null
    c0=$(calls)
    echo '{"alert_type": "wide"}' | post
    wait_done 51
    FIG[wide_ms_$p]=$(span_ms)
    FIG[wide_stmts_$p]=$(($(calls) - c0))
    stop
    start "chain$p"
    sql "SELECT pg_stat_statements_reset()" >/dev/null
    c0=$(calls)
    echo '{"alert_type": "chain1"}' | post
    wait_done 50
    FIG[chain_ms_$p]=$(span_ms)
    FIG[chain_stmts_$p]=$(($(calls) - c0))
    stop
    start "many$p" untracked
    arrays five "$N"
    wait_done $((6 * N))
    FIG[many_ms_$p]=$(span_ms)
    stop
    start "plain$p" untracked
    arrays nop $((5 * N))
    wait_done $((5 * N))
    FIG[plain_ms_$p]=$(span_ms)
    stop
    echo "round $p: wide ${FIG[wide_ms_$p]} ms, $(awk -v s="${FIG[wide_stmts_$p]}" 'BEGIN { printf "%.1f", s / 50 }') statements/step;" \
        "chain ${FIG[chain_ms_$p]} ms, $(awk -v s="${FIG[chain_stmts_$p]}" 'BEGIN { printf "%.1f", s / 50 }') statements/step;" \
        "many $(awk -v n="$N" -v ms="${FIG[many_ms_$p]}" 'BEGIN { printf "%.0f", 5 * n * 1000 / ms }') steps/s;" \
        "plain $(awk -v n="$N" -v ms="${FIG[plain_ms_$p]}" 'BEGIN { printf "%.0f", 5 * n * 1000 / ms }') runs/s"
}

median() {
    sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

echo "== bench/workflows.sh: PAIRS=$PAIRS, N=$N, $WORKERS workers; $(nproc) cores"
for ((p = 1; p <= PAIRS; p++)); do
    round "$p"
done
for k in wide_ms chain_ms wide_stmts chain_stmts; do
    for ((p = 1; p <= PAIRS; p++)); do echo "${FIG[${k}_$p]}"; done | median >"$DATA/$k"
done
ratios=$(for ((p = 1; p <= PAIRS; p++)); do
    awk -v a="${FIG[plain_ms_$p]}" -v b="${FIG[many_ms_$p]}" 'BEGIN { printf "%.2f\n", a / b }'
done)
echo "median wall time: wide (50 steps) $(cat "$DATA/wide_ms") ms, chain (50 follow-ups) $(cat "$DATA/chain_ms") ms"
echo "median statements per step (all of the database's, background included): wide" \
    "$(awk -v s="$(cat "$DATA/wide_stmts")" 'BEGIN { printf "%.1f", s / 50 }'), chain" \
    "$(awk -v s="$(cat "$DATA/chain_stmts")" 'BEGIN { printf "%.1f", s / 50 }')"
echo "steps/s of $N five-step workflows ÷ runs/s of $((5 * N)) plain runs, per round: $(echo "$ratios" | tr '\n' ' ')"
echo "median ratio: $(echo "$ratios" | median)"
