#!/usr/bin/env bash
# bench/all.sh — every figure of the performance issue in one run and one
# table, each beside a baseline measured in the same run on the same durable
# cluster (the machines are shared and noisy, so only the ratios compare
# across runs):
#   - the ceilings, with pgbench: single-row INSERTs (16 clients, one per
#     transaction) and "claim 50, complete those 50" (4 clients);
#   - HTTP submit (single runs, 64 connections, distinct bodies): requests/s
#     and p50/p99; end to end through single submissions (16 and 64
#     clients) and through bulk submissions (50,000 no-op runs); pickup p50/p99; how late delayed runs
#     and retries start; SSE delivery at 1,000 subscribers; RSS idle and at
#     2,000 streams; poller checks/s at capacity;
#   - graphile-worker's own perf test (pinned, installed with npm into
#     .cache/) on another database of the same cluster: the peer;
#   - with --soak MINUTES, a steady load at half the measured capacity with
#     retention running (and run_events partitions of a minute, so whole
#     partitions are dropped during it), minute by minute.
# Figures that need a feature this build lacks print "n/a (not built)".
# Usage: bench/all.sh [--soak MINUTES] [--no-peer]
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."
. bench/lib.sh

SOAK=0
PEER=1
usage() {
    sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}
while (($#)); do
    case "$1" in
    --soak)
        [ $# -ge 2 ] || usage
        SOAK=$2
        shift 2
        ;;
    --soak=*)
        SOAK=${1#--soak=}
        shift
        ;;
    --no-peer)
        PEER=0
        shift
        ;;
    -h | --help) usage ;;
    *) usage ;;
    esac
done
[[ "$SOAK" =~ ^[0-9]+$ ]] || usage

# Sizes of the steps (defaults keep the whole run under about 10 minutes).
CEIL_S=${CEIL_S:-15}          # each pgbench ceiling
SUBMIT_S=${SUBMIT_S:-10}      # the wrk-style HTTP submit load
SINGLE_RUNS=${SINGLE_RUNS:-6400} # a multiple of its 16 clients
SINGLE64_RUNS=${SINGLE64_RUNS:-12800} # a multiple of its 64 clients
BULK_RUNS=${BULK_RUNS:-50000}
BULK_BATCH=${BULK_BATCH:-1000}
PICKUPS=${PICKUPS:-200}
LATE_DELAYED=${LATE_DELAYED:-200}
LATE_RETRIES=${LATE_RETRIES:-100}
SSE_EVENTS=${SSE_EVENTS:-300}
POLL_WINDOW_S=${POLL_WINDOW_S:-15}
GW_VERSION=0.17.3 # graphile-worker, the peer
GW_DIR=.cache/graphile-worker

# Free ports, picked at random (other benchmarks and tests may share the
# machine): one for the server, one for the poller's server, the soak's and
# the fake jobs API.
free_port() {
    local p
    while :; do
        p=$((20000 + RANDOM % 10000))
        ss -Htln "sport = :$p" 2>/dev/null | grep . >/dev/null || { echo "$p"; return; }
    done
}
PORT=$(free_port)
POLL_PORT=$(free_port)
SOAK_PORT=$(free_port)
FAKE_PORT=$(free_port)
URL=http://127.0.0.1:$PORT
OUT=bench/out
mkdir -p "$OUT"
rm -f "$OUT"/all-*
LOG=$OUT/all-run.log
say() { echo "== $*" | tee -a "$LOG"; }
die() {
    echo "all.sh: $*" >&2
    exit 1
}
get() { if [ -f "$OUT/$1" ]; then awk -F= -v k="$2" '$1 == k {v = $2} END {print v}' "$OUT/$1"; fi; }

# Every stream is a socket in the client and in the server.
HARD=$(ulimit -Hn)
if [ "$HARD" = unlimited ] || [ "$HARD" -gt 20000 ]; then ulimit -n 20000; else ulimit -n "$HARD"; fi
[ "$(ulimit -n)" -ge 2200 ] || die "ulimit -n is $(ulimit -n), too low for 2,000 streams"

T_START=$SECONDS
say "dependencies and a Release build"
DEPS=()
[ "$PEER" = 1 ] && DEPS=(nodejs npm)
bench_build "${DEPS[@]}" -- opsrun opsrun_loadgen opsrun_ssebench opsrun_pollbench
PGBENCH=$(find /usr/lib/postgresql -path '*/bin/pgbench' | sort -V | tail -n 1)
[ -x "$PGBENCH" ] || die "pgbench not found (scripts/deps.sh installs postgresql)"

GW_NOTE=""
if [ "$PEER" = 1 ]; then
    have=$(node -p "require('./$GW_DIR/node_modules/graphile-worker/package.json').version" 2>/dev/null || true)
    if [ "$have" != "$GW_VERSION" ]; then
        say "installing graphile-worker $GW_VERSION into $GW_DIR"
        mkdir -p "$GW_DIR"
        [ -f "$GW_DIR/package.json" ] || echo '{"private": true}' >"$GW_DIR/package.json"
        npm install --prefix "$GW_DIR" --no-audit --no-fund --loglevel=error \
            "graphile-worker@$GW_VERSION" >>"$LOG" 2>&1 || GW_NOTE="n/a (npm install failed)"
    fi
else
    GW_NOTE="n/a (--no-peer)"
fi

DATA=$(mktemp -d /tmp/opsrun-all.XXXXXX)
chmod 755 "$DATA"
PIDS=()
# PIDS: the processes this script started and has not stopped yet (only
# those: a stopped one's id may be reused by another process).
stop() { # stop PID: SIGTERM, wait for it, forget it
    local p keep=()
    [ -n "${1:-}" ] || return 0
    for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
    PIDS=("${keep[@]}")
    if kill "$1" 2>/dev/null; then wait "$1" 2>/dev/null || true; fi
}
cleanup() {
    local p
    for p in "${PIDS[@]}"; do stop "$p"; done
    bench_cluster_destroy "$DATA"
    rm -rf "$DATA"
}
trap cleanup EXIT

say "a private durable PostgreSQL cluster"
bench_cluster "$DATA" 2>>"$LOG"
scripts/pg.sh createdb "$DATA/pg" peer >>"$LOG" 2>&1
PEER_DB=$(scripts/pg.sh url "$DATA/pg" peer)
sql() { psql -qAtX -v ON_ERROR_STOP=1 "$DB" -c "$1"; }
{
    echo "fsync=$(sql 'SHOW fsync')"
    echo "synchronous_commit=$(sql 'SHOW synchronous_commit')"
    echo "server_version=$(sql 'SHOW server_version')"
    echo "cores=$(nproc)"
    echo "loadavg_start=$(cut -d' ' -f1-3 /proc/loadavg)"
    echo "commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo '+dirty')"
} >"$OUT/all-env.txt"

# ---------------------------------------------------------------- ceilings
# p50/p99 in ms of pgbench's per-transaction logs (field 3, microseconds)
log_pcts() {
    cat "$@" | awk '{print $3}' | sort -n | awk '{v[NR] = $1}
        END {if (NR) printf "p50_ms=%.2f\np99_ms=%.2f\n", v[int(0.5 * (NR - 1)) + 1] / 1000,
             v[int(0.99 * (NR - 1)) + 1] / 1000}'
}
say "ceiling: single-row INSERTs, pgbench, 16 clients, ${CEIL_S} s"
sql "CREATE TABLE bench_insert (id bigserial PRIMARY KEY, body text)"
sql "CHECKPOINT"
if "$PGBENCH" -n -f bench/insert.sql -c 16 -j 2 -T "$CEIL_S" -l --log-prefix="$DATA/insert" "$DB" \
    >"$OUT/all-pgbench-insert.raw" 2>&1; then
    {
        awk '/^tps/ {printf "tps=%.0f\n", $3}' "$OUT/all-pgbench-insert.raw"
        log_pcts "$DATA"/insert.*
    } >"$OUT/all-ceiling-insert.txt"
fi
rm -f "$DATA"/insert.*
sql "DROP TABLE bench_insert"
echo "   $(tr '\n' ' ' <"$OUT/all-ceiling-insert.txt" 2>/dev/null)" | tee -a "$LOG"

say "ceiling: claim 50, complete those 50, pgbench, 4 clients, ${CEIL_S} s"
sql "CREATE TABLE bench_jobs (id bigserial PRIMARY KEY, status text NOT NULL, worker int,
       payload jsonb NOT NULL, started_at timestamptz, completed_at timestamptz)"
sql "INSERT INTO bench_jobs (status, payload)
     SELECT 'queued', json_build_object('id', g)::jsonb FROM generate_series(1, 600000) g"
sql "CREATE INDEX bench_jobs_queued ON bench_jobs (id) WHERE status = 'queued'"
sql "CREATE INDEX bench_jobs_running ON bench_jobs (worker) WHERE status = 'running'"
sql "VACUUM ANALYZE bench_jobs"
sql "CHECKPOINT"
if "$PGBENCH" -n -f bench/claim50.sql -c 4 -j 2 -T "$CEIL_S" "$DB" >"$OUT/all-pgbench-claim50.raw" 2>&1; then
    sql "SELECT 'jobs=' || count(*) || E'\njobs_per_s=' ||
            round(count(*) / extract(epoch FROM max(completed_at) - min(started_at)))
            || E'\nqueued_left=' || (SELECT count(*) FROM bench_jobs WHERE status = 'queued')
         FROM bench_jobs WHERE status = 'completed'" >"$OUT/all-ceiling-claim50.txt"
fi
sql "DROP TABLE bench_jobs"
sql "CHECKPOINT"
echo "   $(tr '\n' ' ' <"$OUT/all-ceiling-claim50.txt" 2>/dev/null)" | tee -a "$LOG"

# ---------------------------------------------------------------- opsrun
SERVER=""
serve() { # serve PORT CONFIG LOG [ARGS...]: starts build/opsrun, sets SERVER; 1 if not ready
    local port=$1 config=$2 log=$3
    shift 3
    build/opsrun serve --config "$config" --database-url "${SERVE_DB:-$DB}" \
        --listen "127.0.0.1:$port" --log-level warn "$@" 2>"$log" &
    SERVER=$!
    PIDS+=("$SERVER")
    if ! bench_wait_ready "http://127.0.0.1:$port" 150; then
        echo "   the server did not get ready (see $log)" | tee -a "$LOG"
        stop "$SERVER"
        return 1
    fi
    sleep 2
}
rss() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
FAILED=()
step() { # step NAME OUTFILE COMMAND...: runs it, keeps its output, notes a failure
    local name=$1 file=$2
    shift 2
    if ! "$@" >"$OUT/$file" 2>>"$LOG"; then
        FAILED+=("$name")
        echo "   $name failed (see $OUT/$file and $LOG)" | tee -a "$LOG"
    fi
}

# Every client comes from 127.0.0.1 and the one tenant: no per-caller limits.
echo '{"http": {"max_connections_per_ip": 0},
 "limits": {"submit_rate_per_s": 0, "streams_per_tenant": 0}}' >"$DATA/config.json"
# 32 workers, as in the issue's own measurements of opsrun.
say "opsrun: --workers 32; idle RSS, then 2,000 idle streams"
serve "$PORT" "$DATA/config.json" "$OUT/all-serve.log" --workers 32 || die "opsrun did not start"
MAIN=$SERVER
echo "rss_idle_kib=$(rss "$MAIN")" >"$OUT/all-rss.txt"
step "streams rss" all-streams-rss.txt build/opsrun_ssebench rss "$URL" "$MAIN" 2000
say "SSE delivery at 1,000 subscribers ($SSE_EVENTS events, one every 20 ms)"
step "streams latency" all-streams-latency.txt \
    build/opsrun_ssebench latency "$URL" "$DB" 1000 "$SSE_EVENTS" 20
say "pickup latency ($PICKUPS runs, one at a time)"
step pickup all-pickup.txt build/opsrun_loadgen pickup "$URL" "$DB" "$PICKUPS"
say "start lateness: $LATE_DELAYED delayed runs, $LATE_RETRIES retried runs"
step lateness all-lateness.txt build/opsrun_loadgen lateness "$URL" "$DB" "$LATE_DELAYED" "$LATE_RETRIES"
say "HTTP submit: 64 connections, distinct bodies, ${SUBMIT_S} s"
step submit all-submit.txt build/opsrun_loadgen wrk "$URL" "$DB" "$SUBMIT_S" 64
say "end to end, single submissions: $SINGLE_RUNS runs from 16 clients"
step single all-single.txt build/opsrun_loadgen throughput "$URL" "$DB" "$SINGLE_RUNS" 16
say "end to end, single submissions: $SINGLE64_RUNS runs from 64 clients"
step single64 all-single64.txt build/opsrun_loadgen throughput "$URL" "$DB" "$SINGLE64_RUNS" 64
# Bulk submission: an array of one must answer 200 {"runs": [...]}.
BULK=0
code=$(curl -s -o "$DATA/probe.json" -w '%{http_code}' -H 'Content-Type: application/json' \
    -d '[{"alert_type": "demo", "data": {"duration_ms": 0, "steps": 0}}]' "$URL/alerts" || true)
[ "$code" = 200 ] && grep -q '"runs"' "$DATA/probe.json" && BULK=1
echo "bulk_probe_http=$code" >"$OUT/all-bulk-probe.txt"
if [ "$BULK" = 1 ]; then
    sleep 1
    say "end to end, bulk submissions: $BULK_RUNS runs in arrays of $BULK_BATCH from 4 connections"
    step bulk all-bulk.txt build/opsrun_loadgen bulk "$URL" "$DB" "$BULK_RUNS" 4 "$BULK_BATCH"
else
    say "bulk submission: not built (an array of one got HTTP $code)"
fi
echo "rss_after_load_kib=$(rss "$MAIN")" >>"$OUT/all-rss.txt"
kill -0 "$MAIN" 2>/dev/null || FAILED+=("server exited")
stop "$MAIN"

# ---------------------------------------------------------------- poller
FAKE=http://127.0.0.1:$FAKE_PORT
checks() { curl -sf "$FAKE/stats" | grep -o '"checks": *[0-9]*' | grep -o '[0-9]*$'; }
poller_step() {
    local c0 c1 t0 t1
    build/opsrun_pollbench hammer "$FAKE_PORT" 3 4 >"$OUT/all-poller-fake.txt" 2>>"$LOG" || return 1
    cat >"$DATA/poll.json" <<EOF
{"poller": {"concurrency": 32, "interval_ms": 200},
 "limits": {"submit_rate_per_s": 0},
 "run_types": {
$(bench_poller_types "$FAKE")}}
EOF
    serve "$POLL_PORT" "$DATA/poll.json" "$OUT/all-poller-serve.log" --workers 2 || return 1
    bench_insert_waiting "$DB" job w 5000 0 '2 s' || return 1
    sleep 5
    c0=$(checks) || return 1
    t0=$(date +%s.%N)
    sleep "$POLL_WINDOW_S"
    c1=$(checks) || return 1
    t1=$(date +%s.%N)
    {
        echo "checks=$((c1 - c0))"
        awk -v c="$((c1 - c0))" -v a="$t0" -v b="$t1" 'BEGIN {printf "checks_per_s=%.0f\nwindow_s=%.1f\n", c / (b - a), b - a}'
        echo "check_failures=$(curl -sf "http://127.0.0.1:$POLL_PORT/healthz" |
            grep -o '"check_failures_total": *[0-9]*' | grep -o '[0-9]*$')"
        echo "still_waiting=$(sql "SELECT count(*) FROM runs WHERE type = 'job' AND status = 'waiting'")"
    } >"$OUT/all-poller.txt"
    kill -0 "$SERVER" 2>/dev/null || return 1
    stop "$SERVER"
    sql "DELETE FROM runs WHERE type IN ('job', 'job_real')"
}
say "poller at capacity: 5,000 waiting rest_job runs due every 50 ms, ${POLL_WINDOW_S} s"
build/opsrun_pollbench fake "$FAKE_PORT" 2 >"$DATA/fake.txt" 2>"$DATA/fake.log" &
FAKE_PID=$!
PIDS+=("$FAKE_PID")
for _ in $(seq 50); do checks >/dev/null && break; sleep 0.1; done
if ! poller_step; then
    FAILED+=(poller)
    rm -f "$OUT/all-poller.txt"
    stop "$SERVER"
fi
stop "$FAKE_PID"

# ---------------------------------------------------------------- the peer
GW_CLI=$PWD/$GW_DIR/node_modules/graphile-worker/dist/cli.js
gw() { (cd bench/graphile && DATABASE_URL=$PEER_DB NO_LOG_SUCCESS=1 node "$GW_CLI" "$@"); }
now() { date +%s.%N; }
peer_step() { # as graphile-worker's perfTest/run.js; prints why when it fails
    local t0 t1 t2 t3 p pids=() ok=1 left
    gw --schema-only >>"$LOG" 2>&1 || { echo "schema install failed"; return 1; }
    t0=$(now)
    gw --once -j 24 -m 25 >>"$LOG" 2>&1 || { echo "worker failed"; return 1; }
    t1=$(now)
    psql -qAtX -v ON_ERROR_STOP=1 "$PEER_DB" -c "SELECT graphile_worker.add_jobs((
        SELECT array_agg(json_populate_record(NULL::graphile_worker.job_spec,
                 json_build_object('identifier', 'log_if_999', 'payload', json_build_object('id', i))))
          FROM generate_series(1, $BULK_RUNS) i))" >/dev/null 2>>"$LOG" || { echo "add_jobs failed"; return 1; }
    t2=$(now)
    for _ in 1 2 3 4; do
        gw --once -j 24 -m 25 >>"$LOG" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || ok=0; done
    t3=$(now)
    left=$(psql -qAtX "$PEER_DB" -c "SELECT count(*) FROM graphile_worker.jobs")
    {
        echo "version=$GW_VERSION"
        echo "jobs=$BULK_RUNS"
        echo "jobs_left=$left"
        echo "exit_ok=$ok"
        awk -v n="$BULK_RUNS" -v a="$t0" -v b="$t1" -v c="$t2" -v d="$t3" 'BEGIN {
            printf "startup_s=%.2f\nadd_s=%.2f\nrun_s=%.2f\n", b - a, c - b, d - c
            printf "jobs_per_s=%.0f\n", n / ((d - c) - (b - a))
            printf "jobs_per_s_with_add=%.0f\n", n / ((d - c) - (b - a) + (c - b))}'
    } >"$OUT/all-peer.txt"
    [ "$ok" = 1 ] || { echo "a worker failed"; return 1; }
    [ "$left" = 0 ] || { echo "$left jobs left"; return 1; }
}
if [ -z "$GW_NOTE" ]; then
    say "peer: graphile-worker $GW_VERSION perf test, $BULK_RUNS no-op jobs, 4 processes x 24"
    if ! why=$(peer_step); then
        GW_NOTE="n/a (failed: $why)"
        FAILED+=(peer)
    fi
fi

# ---------------------------------------------------------------- soak
if [ "$SOAK" -gt 0 ]; then
    CAP=$(get all-single.txt runs_per_s)
    RATE=$(awk -v c="${CAP:-0}" 'BEGIN {r = c / 2; if (r < 10) r = 10; printf "%.0f", r}')
    say "soak: $SOAK minutes at $RATE runs/s (half of $CAP) from 8 clients, retention after 60 s, 60 s event partitions"
    echo '{"limits": {"submit_rate_per_s": 0}, "queue": {"retention_s": 60, "event_partition_s": 60}}' \
        >"$DATA/soak.json"
    # A database of its own: on the one the steps above used, the one-day
    # spans of run_events they created ahead would take every soak run's
    # events, and no span could be dropped during the soak.
    scripts/pg.sh createdb "$DATA/pg" soak >>"$LOG" 2>&1
    SOAK_DB=$(scripts/pg.sh url "$DATA/pg" soak)
    if SERVE_DB=$SOAK_DB serve "$SOAK_PORT" "$DATA/soak.json" "$OUT/all-soak-serve.log" --workers 8; then
        build/opsrun_loadgen soak "http://127.0.0.1:$SOAK_PORT" "$SOAK_DB" "$SOAK" "$RATE" 8 "$SERVER" \
            2>>"$LOG" | tee "$OUT/all-soak.txt" | grep '^minute=' | sed 's/^/   /' || FAILED+=(soak)
        kill -0 "$SERVER" 2>/dev/null || FAILED+=("soak server exited")
        stop "$SERVER"
    else
        FAILED+=(soak)
    fi
fi
echo "loadavg_end=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/all-env.txt"
echo "elapsed_s=$((SECONDS - T_START))" >>"$OUT/all-env.txt"

# ---------------------------------------------------------------- the table
TSV=$OUT/all-table.tsv
: >"$TSV"
# row MEASURE VALUE UNIT BASELINE BASELINE_LABEL TARGET [BASELINE_UNIT]
#   VALUE may be "n/a (...)"; TARGET is "", "<=N" or ">=N" (in VALUE's unit),
#   or "x>=N" (the ratio to the baseline).
#   ASCII only, so that the columns line up in any terminal and awk.
row() {
    awk -v m="$1" -v v="$2" -v u="$3" -v b="$4" -v bl="$5" -v t="$6" -v bu="${7:-$3}" 'BEGIN {
        OFS = "\t"
        num = "^-?[0-9]+([.][0-9]+)?$"
        vs = v ~ num ? v " " u : (v == "" ? "n/a (failed)" : v)
        bs = b ~ num ? b " " bu : (b == "" ? "n/a" : b)
        if (bl != "") bs = bs " " bl
        if (b == "-") bs = "-"
        r = (v ~ num && b ~ num && b + 0 > 0) ? sprintf("%.2f", v / b) : "-"
        tg = "-"; met = "-"
        x = v; ratio = substr(t, 1, 1) == "x"
        if (ratio) { t = substr(t, 2); x = r }
        if (t != "") {
            op = substr(t, 1, 2); lim = substr(t, 3) + 0
            tg = ratio ? sprintf("ratio %s %.1f", op, lim) : op " " lim " " u
            if (x ~ num) met = ((op == "<=" && x + 0 <= lim) || (op == ">=" && x + 0 >= lim)) ? "yes" : "NO"
        }
        print m, vs, bs, r, tg, met}' >>"$TSV"
}
f1() { awk -v x="$1" 'BEGIN {if (x ~ /^-?[0-9.]+$/) printf "%.1f", x; else print x}'; }
mib() { awk -v x="$1" 'BEGIN {if (x ~ /^[0-9]+$/) printf "%.1f", x / 1024; else print x}'; }
NB="n/a (not built)"
INS_TPS=$(get all-ceiling-insert.txt tps)
CLAIM=$(get all-ceiling-claim50.txt jobs_per_s)
PEER_JPS=${GW_NOTE:-$(get all-peer.txt jobs_per_s)}
LIVEZ50=$(get all-pickup.txt livez_rtt_p50_ms)
LIVEZ99=$(get all-pickup.txt livez_rtt_p99_ms)
row "HTTP submit, single runs, 64 conn. (req/s)" "$(get all-submit.txt submit_per_s)" "req/s" \
    "$INS_TPS" "(INSERT ceiling)" "" "tx/s"
row "HTTP submit p50" "$(get all-submit.txt submit_p50_ms)" ms \
    "$(get all-ceiling-insert.txt p50_ms)" "(INSERT p50, 16 cl.)" ""
row "HTTP submit p99" "$(get all-submit.txt submit_p99_ms)" ms \
    "$(get all-ceiling-insert.txt p99_ms)" "(INSERT p99, 16 cl.)" ""
row "end to end, single submissions ($SINGLE_RUNS, 16 cl.)" "$(get all-single.txt runs_per_s)" "runs/s" \
    "$INS_TPS" "(INSERT ceiling)" "x>=1" "tx/s"
row "end to end, single submissions ($SINGLE64_RUNS, 64 cl.)" "$(get all-single64.txt runs_per_s)" \
    "runs/s" "$INS_TPS" "(INSERT ceiling)" "x>=1" "tx/s"
if [ "$BULK" = 1 ]; then B=$(get all-bulk.txt bulk_runs_per_s); else B=$NB; fi
row "end to end, bulk submissions ($BULK_RUNS)" "$B" "runs/s" "$PEER_JPS" "(graphile-worker $GW_VERSION)" "x>=1" \
    "jobs/s"
row "end to end, bulk submissions ($BULK_RUNS)" "$B" "runs/s" "$CLAIM" "(claim-50 ceiling)" "" "jobs/s"
row "pickup p50" "$(get all-pickup.txt pickup_p50_ms)" ms "$LIVEZ50" "(GET /livez)" "<=1.5"
row "pickup p99" "$(get all-pickup.txt pickup_p99_ms)" ms "$LIVEZ99" "(GET /livez)" "<=5"
row "delayed run start lateness p99 ($LATE_DELAYED)" "$(get all-lateness.txt late_delayed_p99_ms)" ms - "" "<=10"
row "retry start lateness p99 ($LATE_RETRIES)" "$(get all-lateness.txt late_retry_p99_ms)" ms - "" "<=10"
row "poller checks/s at capacity (5,000 runs)" "$(get all-poller.txt checks_per_s)" "checks/s" \
    "$(get all-poller-fake.txt hammer_per_s)" "(fake API alone)" ">=9600" "req/s"
row "SSE delivery p50, 1,000 subscribers" "$(f1 "$(get all-streams-latency.txt sse_p50_ms)")" ms \
    "$(f1 "$(get all-streams-latency.txt notify_p50_ms)")" "(LISTEN/NOTIFY)" ""
row "SSE delivery p99, 1,000 subscribers" "$(f1 "$(get all-streams-latency.txt sse_p99_ms)")" ms \
    "$(f1 "$(get all-streams-latency.txt notify_p99_ms)")" "(LISTEN/NOTIFY)" "<=50"
row "RSS idle" "$(mib "$(get all-rss.txt rss_idle_kib)")" MiB - "" "<=20"
row "RSS at 2,000 idle streams" "$(mib "$(get all-streams-rss.txt rss_after_kib)")" MiB \
    "$(mib "$(get all-streams-rss.txt rss_before_kib)")" "(0 streams)" ""
row "memory per idle stream" "$(get all-streams-rss.txt rss_per_subscriber_kib)" KiB - "" "<=16"
if [ "$SOAK" -gt 0 ]; then
    row "soak ${SOAK} min: completed/s, last minute" "$(get all-soak.txt soak_last_completed_per_s)" \
        "runs/s" "$(get all-soak.txt soak_first_completed_per_s)" "(first minute)" ""
    row "soak ${SOAK} min: pickup p99, last minute" "$(get all-soak.txt soak_last_pickup_p99_ms)" ms \
        "$(get all-soak.txt soak_first_pickup_p99_ms)" "(first minute)" ""
    row "soak ${SOAK} min: rows in runs, last minute" "$(get all-soak.txt soak_last_runs_rows)" rows \
        "$(get all-soak.txt soak_first_runs_rows)" "(first minute)" ""
    row "soak ${SOAK} min: runs and run_events, last minute" \
        "$(mib "$(get all-soak.txt soak_last_tables_kib)")" MiB \
        "$(mib "$(get all-soak.txt soak_first_tables_kib)")" "(first minute)" ""
    row "soak ${SOAK} min: server RSS, last minute" "$(mib "$(get all-soak.txt soak_last_rss_kib)")" MiB \
        "$(mib "$(get all-soak.txt soak_first_rss_kib)")" "(first minute)" ""
else
    row "soak" "n/a (off: --soak MINUTES)" "" - "" ""
fi

# Printed as one aligned table, and kept as Markdown.
{
    printf 'measure\topsrun\tbaseline\tratio\ttarget\tmet?\n'
    cat "$TSV"
} >"$TSV.tmp"
mv "$TSV.tmp" "$TSV"
awk -F'\t' '{printf "| %s |\n", $1 " | " $2 " | " $3 " | " $4 " | " $5 " | " $6}
    NR == 1 {print "|---|---:|---:|---:|---:|:---:|"}' "$TSV" >"$OUT/all-table.md"
echo
echo "== bench/all.sh: one run, durable cluster (fsync $(get all-env.txt fsync)," \
    "synchronous_commit $(get all-env.txt synchronous_commit)), $(nproc) cores," \
    "load average $(get all-env.txt loadavg_start) -> $(get all-env.txt loadavg_end), $(get all-env.txt elapsed_s) s"
awk -F'\t' '
    {for (i = 1; i <= NF; i++) {c[NR, i] = $i; l = length($i); if (l > w[i]) w[i] = l}; n = NR}
    END {for (r = 1; r <= n; r++) {
            line = ""
            for (i = 1; i <= 6; i++) line = line sprintf(i == 1 ? "%-*s" : "  %-*s", w[i], c[r, i])
            print line
            if (r == 1) {s = ""; for (i = 1; i <= 6; i++) {for (k = 0; k < w[i] + (i > 1 ? 2 : 0); k++) s = s "-"}; print s}
         }}' "$TSV"
echo
echo "Ceilings and peer, same cluster, same run: single-row INSERT ${INS_TPS:-n/a} tx/s" \
    "(p50/p99 $(get all-ceiling-insert.txt p50_ms)/$(get all-ceiling-insert.txt p99_ms) ms);" \
    "claim-50 ${CLAIM:-n/a} jobs/s; graphile-worker ${PEER_JPS:-n/a} jobs/s" \
    "($(get all-peer.txt jobs_per_s_with_add) counting its add_jobs)."
echo "Raw figures: $OUT/all-*.txt; this table: $OUT/all-table.md."
if [ ${#FAILED[@]} -gt 0 ]; then
    echo "FAILED: ${FAILED[*]} (see $LOG)" >&2
    exit 1
fi
