#!/usr/bin/env bash
# bench/failover.sh — what a failover loses under load, with a synchronous
# standby and with an asynchronous one (docs/operations.md, "Failover").
# Each round: a durable primary (fsync on) and a streaming standby
# (scripts/pg.sh standby), which the primary names in
# synchronous_standby_names or not; one opsrun on the multi-host URL
# (target_session_attrs=read-write); CLIENTS HTTP clients submitting no-op
# demo runs as fast as they are answered, each with a run_id of its own,
# every answer recorded (bench/loadgen.c, mode answers); halfway through,
# the primary stopped "immediate" and the standby promoted. Then, on the new
# primary: the acknowledged runs that are not there (lost), the runs that
# ran twice (two "run finished" lines in opsrun's log: the new primary had
# forgotten that they had been claimed or had finished), the refused
# submissions that were stored all the same, and the time from the
# promotion to the first acknowledgement. The modes alternate, ROUNDS each.
#
# With DELAY_MS above 0 the standby streams through bench/delay_proxy.py,
# which delays every byte by DELAY_MS each way: a standby in another zone
# (about 0.5-1 ms) or region (10-50 ms). Then the failure is of the
# primary's whole zone: the link is cut (what was still on its way to the
# standby is dropped) as the primary stops; with PARTITION_MS above 0 the
# link is cut that long before the primary stops, as when the network
# fails first and the primary serves on until it is fenced. Without
# DELAY_MS both clusters share this host, the failure is of the primary's
# processes alone (this kernel still delivers what they had sent), and the
# standby is microseconds behind.
#
# Usage: bench/failover.sh [ROUNDS] [SECONDS] [CLIENTS]   (defaults 3, 8, 8)
#   MODES="sync async" (the default); DELAY_MS=N (default 0); PARTITION_MS=N
#   (default 0); WORKERS=N
#   (default 8); PORT=N (default 18292; the proxy listens on PORT+1)
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."
. bench/lib.sh
ROUNDS=${1:-3}
SECONDS_=${2:-8}
CLIENTS=${3:-8}
MODES=${MODES:-sync async}
WORKERS=${WORKERS:-8}
PORT=${PORT:-18292}
DELAY_MS=${DELAY_MS:-0}
PARTITION_MS=${PARTITION_MS:-0}
if [ "$PARTITION_MS" != 0 ] && [ "$DELAY_MS" = 0 ]; then
    echo "failover.sh: PARTITION_MS needs the proxy: set DELAY_MS too" >&2
    exit 2
fi
OUT=bench/out
mkdir -p "$OUT"

bench_build -- opsrun opsrun_loadgen

DATA=$(mktemp -d /tmp/opsrun-failover.XXXXXX)
chmod 755 "$DATA"
PID=""
PROXY=""
DIR=""
cleanup() {
    local p
    # Under set -e a wait that returns the signal's status would end the
    # trap here and leave the clusters running.
    for p in $PID $PROXY; do
        { kill "$p" && wait "$p"; } 2>/dev/null || true
    done
    if [ -n "$DIR" ]; then
        scripts/pg.sh destroy "$DIR/primary" >/dev/null 2>&1 || true
        scripts/pg.sh destroy "$DIR/standby" >/dev/null 2>&1 || true
    fi
    rm -rf "$DATA"
}
trap cleanup EXIT

ms() { date +%s%3N; }
host_of() { sed 's/.*[?&]host=\([^&]*\).*/\1/' <<<"$1"; }
port_of() { sed 's/.*[?&]port=\([^&]*\).*/\1/' <<<"$1"; }
q() { psql -qAtX -v ON_ERROR_STOP=1 "$@"; }

# Polls SQL on URL until it prints 1, at most 20 s.
wait_for() {
    local i
    for ((i = 0; i < 200; i++)); do
        [ "$(q "$1" -c "$2")" = 1 ] && return 0
        sleep 0.1
    done
    echo "failover.sh: timed out waiting for: $2" >&2
    return 1
}

# From opsrun's log: the runs whose end was committed twice ("run
# finished" is logged once a completion has committed: the new primary had
# forgotten the first), then the runs whose action ran twice: those, and
# those an attempt of which could not be settled ("could not settle",
# "not settling") and which then finished all the same, run again by a
# later claim (the new primary had forgotten the first claim). A run that
# could not be settled and never finished again is one whose completion
# was written and whose answer was lost: it ran once.
ran_again() {
    awk '/ run finished run=/ { sub(/.*run finished run=/, ""); sub(/ .*/, ""); fin[$0]++ }
         / could not settle run=| not settling run=/ {
             sub(/.* (could not settle|not settling) run=/, ""); sub(/ .*/, ""); unsettled[$0] = 1 }
         END { for (r in fin) { twice += fin[r] > 1; again += fin[r] > 1 || r in unsettled }
               print twice + 0, again + 0 }' "$1"
}

# One round in mode $1 (sync or async), number $2; prints one line of
# figures.
round() {
    local mode=$1 n=$2 url_p url_s admin_p ci lag t_stop t_prom answers stats twice again lg
    local acked lost refused other stored first unfinished window
    DIR=$DATA/$mode-$n
    mkdir -p "$DIR"
    scripts/pg.sh start "$DIR/primary" --durable >/dev/null 2>&1
    scripts/pg.sh createdb "$DIR/primary" bench >/dev/null 2>&1
    url_p=$(scripts/pg.sh url "$DIR/primary" bench)
    admin_p=$(scripts/pg.sh url "$DIR/primary" postgres)
    build/opsrun migrate --database-url "$url_p" 2>/dev/null
    scripts/pg.sh standby "$DIR/standby" "$DIR/primary" >/dev/null 2>&1
    url_s=$(scripts/pg.sh url "$DIR/standby" bench)
    if [ "$DELAY_MS" != 0 ]; then
        python3 bench/delay_proxy.py "$((PORT + 1))" "$(host_of "$url_p")" "$(port_of "$url_p")" \
            "$DELAY_MS" &
        PROXY=$!
        q "$(scripts/pg.sh url "$DIR/standby" postgres)" \
            -c "ALTER SYSTEM SET primary_conninfo =
                'host=127.0.0.1 port=$((PORT + 1)) user=opsrun application_name=standby'" \
            -c "SELECT pg_reload_conf()" >/dev/null
        wait_for "$admin_p" "SELECT count(*) FROM pg_stat_replication
                             WHERE application_name = 'standby' AND state = 'streaming'"
    fi
    if [ "$mode" = sync ]; then
        q "$admin_p" -c "ALTER SYSTEM SET synchronous_standby_names = '*'" \
            -c "SELECT pg_reload_conf()" >/dev/null
        wait_for "$admin_p" "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'"
    else
        wait_for "$admin_p" "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'"
    fi
    ci="host=$(host_of "$url_p"),$(host_of "$url_s") port=$(port_of "$url_p"),$(port_of "$url_s")"
    ci="$ci dbname=bench user=opsrun target_session_attrs=read-write"
    printf '%s\n' '{"limits": {"submit_rate_per_s": 0}, "db": {"connect_timeout_s": 2},' \
        ' "queue": {"heartbeat_interval_s": 1, "orphan_after_s": 6,' \
        '  "orphan_scan_interval_s": 1}}' >"$DIR/config.json"
    build/opsrun serve --config "$DIR/config.json" --database-url "$ci" \
        --listen "127.0.0.1:$PORT" --workers "$WORKERS" --log-level info 2>"$DIR/serve.log" &
    PID=$!
    bench_wait_ready "http://127.0.0.1:$PORT" 300

    answers=$DIR/answers.txt
    build/opsrun_loadgen answers "http://127.0.0.1:$PORT" "$ci" "$SECONDS_" "$CLIENTS" \
        "$answers" &
    lg=$!
    sleep "$(awk -v s="$SECONDS_" 'BEGIN {print s / 2}')"
    # The WAL the primary had flushed and the standby not yet, in bytes, a
    # moment before the stop.
    lag=$(q "$admin_p" -c "SELECT coalesce(max(pg_current_wal_flush_lsn() - flush_lsn), 0)
                             FROM pg_stat_replication")
    # The primary's processes and the link to the standby go in the same
    # instant (SIGQUIT to the postmaster is an immediate shutdown, which
    # pg.sh then waits for), or the link PARTITION_MS before the primary.
    t_stop=$(ms)
    if [ "$PARTITION_MS" != 0 ]; then
        kill -USR1 "$PROXY"
        sleep "$(awk -v ms="$PARTITION_MS" 'BEGIN {print ms / 1000}')"
    fi
    kill -QUIT "$(head -n 1 "$DIR/primary/postmaster.pid")"
    [ -z "$PROXY" ] || kill -USR1 "$PROXY"
    scripts/pg.sh stop "$DIR/primary" --immediate >/dev/null 2>&1
    scripts/pg.sh promote "$DIR/standby" >/dev/null 2>&1
    t_prom=$(ms)
    wait "$lg"
    # Everything acknowledged and still there ends; a run the new primary
    # thinks is running waits for the orphan scan (6 s).
    wait_for "$url_s" "SELECT (count(*) = 0)::int FROM runs WHERE status <> 'completed'" || true
    kill "$PID"
    wait "$PID" 2>/dev/null || true
    PID=""
    if [ -n "$PROXY" ]; then
        kill "$PROXY"
        wait "$PROXY" 2>/dev/null || true
        PROXY=""
    fi

    stats=$(q "$url_s" -F ' ' \
        -c "CREATE TEMP TABLE answers (id text, status int, at_ms bigint)" \
        -c "\\copy answers FROM '$answers' (DELIMITER ' ')" \
        -c "SELECT count(*) FILTER (WHERE a.status = 202),
                   count(*) FILTER (WHERE a.status = 202 AND r.id IS NULL),
                   count(*) FILTER (WHERE a.status = 503),
                   count(*) FILTER (WHERE a.status NOT IN (202, 503)),
                   count(*) FILTER (WHERE a.status <> 202 AND r.id IS NOT NULL),
                   coalesce(min(a.at_ms) FILTER (WHERE a.status = 202 AND a.at_ms >= $t_prom)
                            - $t_prom, -1),
                   (SELECT count(*) FROM runs WHERE status <> 'completed'),
                   coalesce($t_stop - min(a.at_ms) FILTER (WHERE a.status = 202 AND r.id IS NULL),
                            0)
              FROM answers a LEFT JOIN runs r ON r.id = a.id")
    read -r twice again <<<"$(ran_again "$DIR/serve.log")"
    read -r acked lost refused other stored first unfinished window <<<"$stats"
    printf '%-5s %2d  %6d acked (%4d/s)  %3d lost (the first acknowledged %4d ms before the stop)  %3d ends lost  %3d ran twice  %3d refused (%d stored)  %d other  first ack %4d ms after promotion (stop+promote %d ms)  standby %6d bytes behind  %d unfinished\n' \
        "$mode" "$n" "$acked" "$((acked / SECONDS_))" "$lost" "$window" "$twice" "$again" \
        "$refused" "$stored" "$other" "$first" "$((t_prom - t_stop))" "$lag" "$unfinished"
    cp "$DIR/serve.log" "$OUT/failover-$mode-$n.log"
    scripts/pg.sh destroy "$DIR/primary" >/dev/null 2>&1
    scripts/pg.sh destroy "$DIR/standby" >/dev/null 2>&1
    DIR=""
}

echo "== $ROUNDS rounds per mode; ${SECONDS_} s of submissions from $CLIENTS clients, the primary"
echo "   stopped halfway; $WORKERS workers; durable clusters (fsync on); $(nproc) cores;"
echo "   replication delayed ${DELAY_MS} ms each way; link cut ${PARTITION_MS} ms before the stop"
for ((i = 1; i <= ROUNDS; i++)); do
    for mode in $MODES; do
        round "$mode" "$i"
    done
done
