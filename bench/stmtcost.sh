#!/usr/bin/env bash
# bench/stmtcost.sh — what the completion batch (STMT=claim: the claim) costs
# PostgreSQL, counted in instructions: a figure that does not move with the
# machine's load.
#
# For each build (this tree's, and with BASE=REV a Release build of REV):
# a database migrated by that build's server, which then runs one no-op
# demo run with log_statement on, so that its completion batch is captured
# word for word as the server sends it, parameters included. RUNS running
# runs are inserted, and a single-user backend (postgres --single) under
# valgrind's callgrind executes the captured statement, prepared, over
# them in batches of BATCH, each with the run's log lines as captured. It
# prints the instructions a run (callgrind's Ir, startup included, so
# compare builds at the same RUNS), and keeps each profile in
# bench/out/stmtcost-<tree or REV>.out for callgrind_annotate. The count
# includes the harness's own work, the same for every build: the backend
# reads each EXECUTE line from its input a character at a time and parses
# the literals (about 16,000 instructions a run without lines, 29,000 with
# them, at 160 runs), which the server's parameters do not cost.
#
# Usage: bench/stmtcost.sh [RUNS] [BATCH]      (defaults 4000 and 16)
#   BASE=REV   also measures a Release build of git revision REV
#   LINES=0    the batches carry no log lines (a build that sends them)
#   NOTIFY=1   the demo type notifies a webhook of every success, so each
#              run of the batch owes a delivery (its outbox row is written
#              by the batch; nothing is delivered); a BASE must have
#              notifications (migration 017 on)
#   XSQL=SQL   run on each build's database after its runs are inserted,
#              before the batches: to price a part of the schema by what
#              leaving it out saves (XSQL="DROP TRIGGER runs_react ON runs")
#   STMT=claim the claim instead: RUNS queued runs, claimed BATCH a call by
#              the build's claim statement as its server sent it, after a
#              first claim not counted (the function's compile and plans);
#              each batch is then completed by an UPDATE, and only what
#              runs inside opsrun_claim is counted (callgrind's
#              --toggle-collect on the call of a function in FROM: the
#              function's statements and the triggers they fire). Nothing
#              vacuums: keep RUNS small (each claim steps over the dead
#              index entries of those before it)
# Needs root (the single-user backend runs as the cluster's owner, postgres)
# and valgrind (installed when missing).
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."
. bench/lib.sh
RUNS=${1:-4000}
BATCH=${2:-16}
LINES=${LINES:-1}
NOTIFY=${NOTIFY:-0}
STMT=${STMT:-finish}
case "$STMT" in finish | claim) ;; *) echo "stmtcost.sh: STMT is finish or claim, not $STMT" >&2; exit 2 ;; esac
if [ "$STMT" = claim ] && [ "$LINES$NOTIFY" != 10 ]; then
    echo "stmtcost.sh: LINES and NOTIFY are the completion batch's; STMT=claim takes neither" >&2
    exit 2
fi
OUT=bench/out
PORT=${PORT:-18187}
mkdir -p "$OUT"
[ "$(id -u)" = 0 ] || { echo "stmtcost.sh: run it as root (the single-user backend runs as postgres)" >&2; exit 1; }

bench_build valgrind -- opsrun
BUILDS=(new)
declare -A BIN=([new]=build/opsrun) NAME=([new]=tree)
if [ -n "${BASE:-}" ]; then
    BUILDS=(base new)
    BIN[base]=$(bench_base_build "$BASE")
    NAME[base]=$(git rev-parse --short "$BASE^{commit}")
fi
DIR=$(mktemp -d /tmp/opsrun-stmtcost.XXXXXX)
chmod 755 "$DIR"
SERVER=""
cleanup() {
    [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null && wait "$SERVER" 2>/dev/null || true
    bench_cluster_destroy "$DIR"
    rm -rf "$DIR"
}
trap cleanup EXIT
bench_cluster "$DIR"
# The server's configuration: none, or a notifier nobody listens on (port
# 9, discard) told of every success of demo; and with it each inserted run
# told of as the server's submission makes it (reacts, from the rules).
# Without NOTIFY the column is left out (builds before migration 017 have
# none).
CONF=()
REACTS_COL=""
REACTS_VAL=""
if [ "$NOTIFY" = 1 ]; then
    cat >"$DIR/notify.json" <<'EOF'
{"notifiers": {"hook": {"kind": "webhook", "url": "http://127.0.0.1:9/hook"}},
 "run_types": {"demo": {"notify": [{"on": ["succeeded"], "to": "hook"}]}}}
EOF
    CONF=(--config "$DIR/notify.json")
    REACTS_COL=", reacts"
    REACTS_VAL=", (SELECT t.reacts FROM run_type_rules t WHERE t.type = 'demo')"
fi
psqlx() { psql -qAtX -v ON_ERROR_STOP=1 "$@"; }
PGDATA_DIR=$(psqlx "$DB" -c "SHOW data_directory")
LOG=$DIR/pg.log # scripts/pg.sh's server log
# The single-user backend is the cluster's own binary.
PGBIN=$(readlink -f "/proc/$(head -n 1 "$PGDATA_DIR/postmaster.pid")/exe")

# The batches: the captured statement, prepared, and its parameters made
# for RUNS runs, BATCH a statement.
cat >"$DIR/batches.py" <<'PY'
import json, re, sys
runs, batch, lines, stmt_kind = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4]
text = sys.stdin.read()
if stmt_kind == "claim":
    # The claim as sent, its limit BATCH and its room for running runs
    # more than there are; after each, its runs completed (not counted), so
    # that the claim finds none running, as with runs that finish; not with
    # triggers off: setting session_replication_role drops every cached
    # plan. First one claim not counted (the function in the select list,
    # not in FROM), which compiles the function and plans its statements.
    # No VACUUM between claims: it updates the table's statistics, which
    # makes every claim after it plan its statements again.
    m = re.search(r"execute (runs_claim\w*): (.*)\n.*DETAIL:  parameters: (.*)\n", text)
    if not m:
        sys.exit("the server's claim was not in the log")
    vals = re.findall(r"\$(\d+) = (NULL|'(?:[^']|'')*')", m.group(3))
    args = [v for _, v in sorted(vals, key=lambda kv: int(kv[0]))]
    args[0], args[1], args[2] = "'w'", "'%d'" % batch, "'%d'" % (runs + batch)
    done = "UPDATE runs SET status = 'completed', outcome = 'succeeded', completed_at = now() WHERE status = 'running'"
    print("PREPARE cl AS %s" % m.group(2))
    print("SELECT count(*) FROM (SELECT opsrun_claim(%s)) w" % ", ".join(args))
    print(done)
    for _ in range(0, runs, batch):
        print("EXECUTE cl(%s)" % ", ".join(args))
        print(done)
    sys.exit(0)
m = re.search(r"execute runs_finish_batch: (.*)\n.*DETAIL:  parameters: (.*)\n", text)
if not m:
    sys.exit("the server's completion batch was not in the log")
stmt, params = m.group(1), m.group(2)
vals = re.findall(r"\$(\d+) = (NULL|'(?:[^']|'')*')", params)
val = {int(k): (None if v == "NULL" else v[1:-1].replace("''", "'")) for k, v in vals}
item = json.loads(val[2])[0]
logs = val.get(3)
n = len(vals)
print("PREPARE fb(%s) AS %s" % (", ".join(["text", "jsonb", "text[]"][:n]), stmt))
def q(s):
    return "'" + s.replace("'", "''") + "'"
for s in range(0, runs, batch):
    items = []
    for k, rid in enumerate(range(s, min(runs, s + batch))):
        it = dict(item, id="r%d" % rid, tenant="default", attempt=1)
        if "i" in it:
            it["i"] = k + 1
        if not lines:
            it.pop("log_n", None)
            it.pop("log_dropped", None)
        items.append(it)
    args = ["'w'", q(json.dumps(items))]
    if n == 3:  # each run the captured lines, or NULL as the server sends for none
        elems = re.match(r"^\{(.*)\}$", logs).group(1) if lines else "NULL"
        args.append(q("{" + ",".join([elems] * len(items)) + "}"))
    print("EXECUTE fb(%s)" % ", ".join(args))
PY

for b in "${BUILDS[@]}"; do
    # The statement and one set of parameters, as the build's server sends them.
    url=$(bench_db "$DIR" "cap_$b")
    psqlx "$url" -c "ALTER DATABASE cap_$b SET log_statement = 'all'"
    "${BIN[$b]}" serve "${CONF[@]}" --database-url "$url" --listen "127.0.0.1:$PORT" \
        >"$OUT/stmtcost-${NAME[$b]}-serve.log" 2>&1 &
    SERVER=$!
    bench_wait_ready "http://127.0.0.1:$PORT"
    mark=$(wc -l <"$LOG")
    curl -sf -H 'content-type: application/json' -d '{"alert_type":"demo","data":{"duration_ms":0,"steps":0}}' \
        "http://127.0.0.1:$PORT/alerts" >/dev/null
    for _ in $(seq 1 100); do
        [ "$(psqlx "$url" -c "SELECT count(*) FROM runs WHERE status = 'completed'")" = 1 ] && break
        sleep 0.1
    done
    kill "$SERVER" && wait "$SERVER" 2>/dev/null || true
    SERVER=""
    tail -n "+$((mark + 1))" "$LOG" >"$OUT/stmtcost-${NAME[$b]}-pg.log"
    python3 "$DIR/batches.py" "$RUNS" "$BATCH" "$LINES" "$STMT" <"$OUT/stmtcost-${NAME[$b]}-pg.log" >"$DIR/batches-$b.sql"
    # RUNS running runs (STMT=claim: queued) on a copy of the migrated database.
    psqlx "$DB" -c "DROP DATABASE IF EXISTS run_$b" -c "CREATE DATABASE run_$b TEMPLATE cap_$b"
    rurl=$(scripts/pg.sh url "$DIR/pg" "run_$b")
    if [ "$STMT" = claim ]; then # due a millisecond apart, in the order of their ids
        NEWRUNS="INSERT INTO runs (tenant, id, type, max_attempts, timeout_s, input, identity_hash,
                                   request_hash, run_at$REACTS_COL)
                 SELECT 'default', 'r' || g, 'demo', 3, 300, '{}', 'h' || g, 'q' || g,
                        now() - interval '1 hour' + g * interval '1 ms'$REACTS_VAL
                   FROM generate_series(-$BATCH, $RUNS - 1) g"
    else
        NEWRUNS="INSERT INTO runs (tenant, id, type, status, attempt, max_attempts, timeout_s, input,
                                   identity_hash, request_hash, worker_id, started_at, heartbeat_at,
                                   deadline_at$REACTS_COL)
                 SELECT 'default', 'r' || g, 'demo', 'running', 1, 3, 300, '{}',
                        'h' || g, 'q' || g, 'w', now(), now(), now() + interval '1 hour'$REACTS_VAL
                   FROM generate_series(0, $RUNS - 1) g"
    fi
    psqlx "$rurl" -c "DELETE FROM run_events" \
        -c "DO \$\$BEGIN IF to_regclass('notifications') IS NOT NULL THEN DELETE FROM notifications; END IF; END\$\$" \
        -c "DO \$\$BEGIN IF to_regclass('run_logs') IS NOT NULL THEN DELETE FROM run_logs; END IF; END\$\$" -c "DELETE FROM runs" \
        -c "$NEWRUNS" -c "VACUUM ANALYZE" -c "CHECKPOINT"
    if [ -n "${XSQL:-}" ]; then
        psqlx "$rurl" -c "$XSQL" -c "VACUUM ANALYZE" -c "CHECKPOINT"
    fi
done

# Each build's batches in a single-user backend; the cluster is stopped
# meanwhile. Index paths only: on these tables (every run running, for one
# worker) the generic plan PostgreSQL prefers is a hash join over a scan of
# runs, where the server's, on a table of many workers' runs, looks each
# run up (EXPLAIN on 20,000 runs); both builds are measured alike.
scripts/pg.sh stop "$DIR/pg" >/dev/null
mkdir -p "$DIR/prof"
chown postgres "$DIR/prof"
TOGGLE=()
[ "$STMT" = finish ] || TOGGLE=(--toggle-collect=ExecMakeTableFunctionResult)
for b in "${BUILDS[@]}"; do
    prof=$DIR/prof/stmtcost-${NAME[$b]}.out
    log=$OUT/stmtcost-${NAME[$b]}.log
    if ! (cd / && runuser -u postgres -- valgrind --tool=callgrind "${TOGGLE[@]}" --callgrind-out-file="$prof" \
        "$PGBIN" --single -D "$PGDATA_DIR" -c synchronous_commit=off -c enable_seqscan=off \
        -c enable_hashjoin=off -c enable_mergejoin=off "run_$b") <"$DIR/batches-$b.sql" >"$log" 2>&1 ||
        grep -q ERROR "$log"; then
        echo "stmtcost.sh: the single-user backend of $b failed ($log):" >&2
        grep -m 3 -E 'ERROR|FATAL' "$log" >&2 || tail -n 5 "$log" >&2
        exit 1
    fi
    cp "$prof" "$OUT/stmtcost-${NAME[$b]}.out"
done
scripts/pg.sh start "$DIR/pg" >/dev/null
for b in "${BUILDS[@]}"; do
    done_n=$(psqlx "$(scripts/pg.sh url "$DIR/pg" "run_$b")" \
        -c "SELECT count(*) FROM runs WHERE status = 'completed'")
    want=$RUNS
    [ "$STMT" = finish ] || want=$((RUNS + BATCH)) # and the first claim's, not counted
    [ "$done_n" = "$want" ] || { echo "$b: $done_n of $want runs completed" >&2; exit 1; }
    if [ "$STMT" = claim ]; then
        once=$(psqlx "$(scripts/pg.sh url "$DIR/pg" "run_$b")" -c "SELECT count(*) FROM runs WHERE attempt = 1")
        [ "$once" = "$want" ] || { echo "$b: $once of $want runs claimed once" >&2; exit 1; }
    fi
    if [ "$NOTIFY" = 1 ]; then
        owed=$(psqlx "$(scripts/pg.sh url "$DIR/pg" "run_$b")" \
            -c "SELECT count(*) || ' ' || count(DISTINCT run_id) FROM notifications")
        [ "$owed" = "$RUNS $RUNS" ] || { echo "$b: deliveries and runs owing: $owed, not $RUNS each" >&2; exit 1; }
    fi
    ir=$(awk '/^summary:/ { print $2; exit }' "$OUT/stmtcost-${NAME[$b]}.out")
    echo "$b ${BIN[$b]} stmt=$STMT runs=$RUNS batch=$BATCH lines=$LINES notify=$NOTIFY instructions_per_run=$((ir / RUNS))"
done
