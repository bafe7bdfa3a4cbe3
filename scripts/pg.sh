#!/usr/bin/env bash
# pg.sh — a private PostgreSQL cluster for development and tests.
#
#   scripts/pg.sh start    DATADIR [--fast|--durable]   initdb on first use, start, wait until ready
#   scripts/pg.sh stop     DATADIR [--immediate]        fast shutdown (immediate if that times out);
#                                                       --immediate: at once, as a crash would
#   scripts/pg.sh restart  DATADIR [--fast|--durable]   stop + start, keeping the cluster's mode
#   scripts/pg.sh status   DATADIR                      exit 0 when running, 3 when not
#   scripts/pg.sh url      DATADIR [DBNAME]             print a libpq URI (default DBNAME: postgres)
#   scripts/pg.sh createdb DATADIR NAME                 create database NAME unless it exists
#   scripts/pg.sh log      DATADIR                      print the log file's path
#   scripts/pg.sh destroy  DATADIR                      stop, then delete the cluster and its files
#   scripts/pg.sh standby  DATADIR PRIMARY_DATADIR      a streaming standby of the running cluster
#                                                       PRIMARY_DATADIR (pg_basebackup -R), started
#   scripts/pg.sh promote  DATADIR                      promote a standby, wait until it takes writes
#
# The cluster listens on a unix socket only (listen_addresses=''), so any
# number of clusters coexist: the socket lives in the data directory when its
# path is short and plain, else in /tmp/opsrun-pg-<hash of the data dir>.
# Superuser "opsrun", trust authentication, UTF8, locale C.
#
# Modes: --fast (or OPSRUN_PG_FAST=1) is for throwaway test clusters
# (fsync/synchronous_commit/full_page_writes off, max_connections=300);
# --durable is the default (max_connections=200). The mode is remembered in
# the data directory, so `restart` and a later `start` without a flag keep it.
# OPSRUN_PG_OPTS adds further server options ("-c name=value ...").
#
# A standby is a copy of the primary's data directory, mode file included,
# that streams its WAL (initdb's pg_hba.conf already lets the superuser
# replicate over the socket). It is asynchronous until the primary names it
# in synchronous_standby_names: set that on the primary (ALTER SYSTEM and
# pg_reload_conf()) after `standby`, so the standby's copy does not carry it
# and, promoted, does not wait for a standby of its own. A --fast cluster's
# synchronous_commit=off lets commits skip that wait too: give both
# OPSRUN_PG_OPTS="-c synchronous_commit=on".
#
# As root, PostgreSQL runs as the "postgres" system user (it refuses root). If
# that user cannot reach DATADIR (e.g. a checkout under /root), the cluster
# lives in /var/tmp/opsrun-<hash>/data instead; `start` says so.
#
# Environment: OPSRUN_PG_PORT (default 5432), OPSRUN_PG_TIMEOUT (seconds to
# wait for start/stop, default 60), OPSRUN_PG_BINDIR (server binaries; default
# the highest /usr/lib/postgresql/*/bin).
set -euo pipefail

readonly ME="pg.sh"
PORT="${OPSRUN_PG_PORT:-5432}"
TIMEOUT="${OPSRUN_PG_TIMEOUT:-60}"
readonly SUPERUSER="opsrun"
readonly FAST_OPTS="-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300"
readonly DURABLE_OPTS="-c max_connections=200"
readonly MODE_FILE_NAME="opsrun-pg.mode"

say() { printf '%s: %s\n' "$ME" "$*" >&2; }
die() {
    say "error: $*"
    exit 1
}

usage() {
    sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

hash_of() { printf '%s' "$1" | sha1sum | cut -c1-12; }

# ---------------------------------------------------------------- setup

find_bindir() {
    if [[ -n "${OPSRUN_PG_BINDIR:-}" ]]; then
        BINDIR="$OPSRUN_PG_BINDIR"
    else
        BINDIR="$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin -type d 2>/dev/null |
            sort -V | tail -n 1)"
    fi
    [[ -n "$BINDIR" && -x "$BINDIR/pg_ctl" && -x "$BINDIR/initdb" ]] ||
        die "PostgreSQL server binaries not found in /usr/lib/postgresql/*/bin (run scripts/deps.sh)"
}

# The client tools: the server's own bin dir has them on Debian; else PATH.
client() {
    local tool="$1"
    shift
    if [[ -x "$BINDIR/$tool" ]]; then
        "$BINDIR/$tool" "$@"
    else
        command -v "$tool" >/dev/null || die "$tool not found (run scripts/deps.sh)"
        "$tool" "$@"
    fi
}

# Runs a server-side command as the cluster's owner (postgres when we are root),
# from / so that a cwd the owner cannot read does no harm.
as_owner() {
    if [[ "$AS_ROOT" == 1 ]]; then
        (cd / && runuser -u postgres -- "$@")
    else
        "$@"
    fi
}

# Resolves DATA (data dir), SOCK (socket dir), LOG (log file), MODE_FILE.
resolve() {
    local requested="$1"
    [[ -n "$requested" ]] || die "DATADIR is required"
    local abs
    abs="$(realpath -m -- "$requested")"
    [[ "$abs" != "/" ]] || die "refusing to use / as a data directory"

    AS_ROOT=0
    RELOCATED=0
    DATA="$abs"
    if [[ "$(id -u)" == 0 ]]; then
        AS_ROOT=1
        getent passwd postgres >/dev/null ||
            die "running as root needs the 'postgres' system user (install the postgresql package: scripts/deps.sh)"
        command -v runuser >/dev/null || die "runuser not found (util-linux)"
        # postgres must be able to traverse to the data dir's parent.
        local parent
        parent="$(dirname -- "$abs")"
        if [[ ! -d "$abs/global" ]]; then
            mkdir -p -- "$parent" 2>/dev/null || true
        fi
        if ! (cd / && runuser -u postgres -- test -x "$parent" -a -d "$parent") 2>/dev/null; then
            DATA="/var/tmp/opsrun-$(hash_of "$abs")/data"
            RELOCATED=1
        fi
    fi

    # Unix socket paths are limited to ~107 bytes ("<dir>/.s.PGSQL.<port>").
    if ((${#DATA} <= 80)) && [[ "$DATA" =~ ^[A-Za-z0-9._/+-]+$ ]]; then
        SOCK="$DATA"
    else
        SOCK="/tmp/opsrun-pg-$(hash_of "$DATA")"
    fi
    LOG="$(dirname -- "$DATA")/$(basename -- "$DATA").log"
    MODE_FILE="$DATA/$MODE_FILE_NAME"
}

is_initialized() { [[ -f "$DATA/PG_VERSION" ]]; }

# True when process $1 is a PostgreSQL process of this cluster: every
# postgres process (postmaster and children) has the data dir as its cwd.
# This does not trust a recycled pid the way pg_ctl's kill(pid, 0) does.
is_cluster_process() {
    local pid="$1" comm="" cwd
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    { read -r comm <"/proc/$pid/comm"; } 2>/dev/null || return 1
    [[ "$comm" == postgres || "$comm" == postmaster ]] || return 1
    cwd="$(readlink "/proc/$pid/cwd" 2>/dev/null)" || return 1
    [[ "$cwd" == "$DATA" ]]
}

postmaster_pid() { head -n 1 -- "$DATA/postmaster.pid" 2>/dev/null || true; }

server_running() {
    is_initialized || return 1
    [[ -f "$DATA/postmaster.pid" ]] || return 1
    is_cluster_process "$(postmaster_pid)"
}

# Leftover children of a postmaster that died (kill -9, OOM): they notice and
# exit within moments, but the new postmaster refuses to start while they
# still hold the old shared memory.
leftover_pids() {
    local d pid
    for d in /proc/[0-9]*; do
        pid="${d#/proc/}"
        is_cluster_process "$pid" && printf '%s\n' "$pid"
    done
    return 0
}

show_log_tail() {
    if [[ -f "$LOG" ]]; then
        say "last lines of $LOG:"
        tail -n 40 -- "$LOG" | sed 's/^/    /' >&2
    fi
}

# Removes a postmaster.pid whose postmaster is gone (crash, kill -9) and its
# socket lock, and waits (bounded) for orphaned children to exit, killing any
# that linger: they belong to a dead server of this very data directory.
clear_stale_pid() {
    local pidfile="$DATA/postmaster.pid" i pids
    [[ -f "$pidfile" ]] || return 0
    server_running && return 0
    say "removing stale postmaster.pid (pid $(postmaster_pid) is not this cluster's postmaster)"
    rm -f -- "$pidfile" "$SOCK/.s.PGSQL.$PORT.lock" "$SOCK/.s.PGSQL.$PORT"
    for ((i = 0; i < 50; i++)); do
        pids="$(leftover_pids)"
        [[ -z "$pids" ]] && return 0
        sleep 0.1
    done
    say "killing leftover server processes: ${pids//$'\n'/ }"
    # shellcheck disable=SC2086 # word splitting of the pid list is intended
    kill -KILL $pids 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
        [[ -z "$(leftover_pids)" ]] && return 0
        sleep 0.1
    done
    die "server processes of $DATA are still alive: ${pids//$'\n'/ }"
}

# ---------------------------------------------------------------- commands

wait_ready() {
    local deadline=$((SECONDS + TIMEOUT))
    while ((SECONDS < deadline)); do
        if client pg_isready -q -h "$SOCK" -p "$PORT" -U "$SUPERUSER" -d postgres 2>/dev/null; then
            return 0
        fi
        sleep 0.2
    done
    return 1
}

# DATA, made for the cluster's owner (postgres when we are root).
make_data_dir() {
    mkdir -p -- "$DATA"
    if [[ "$AS_ROOT" == 1 ]]; then
        # The relocated dir's parent is ours; make it traversable.
        [[ "$RELOCATED" == 1 ]] && chmod 0755 -- "$(dirname -- "$DATA")"
        chown postgres: -- "$DATA"
    fi
    chmod 0700 -- "$DATA"
}

do_initdb() {
    say "initialising a new cluster in $DATA"
    make_data_dir
    local out
    if ! out="$(as_owner "$BINDIR/initdb" -D "$DATA" -U "$SUPERUSER" -A trust \
        -E UTF8 --locale=C --no-sync 2>&1)"; then
        printf '%s\n' "$out" | sed 's/^/    /' >&2
        die "initdb failed for $DATA"
    fi
}

cmd_start() {
    local mode_arg="" mode opts
    while (($#)); do
        case "$1" in
        --fast) mode_arg=fast ;;
        --durable) mode_arg=durable ;;
        *) die "start: unknown option '$1'" ;;
        esac
        shift
    done
    [[ -z "$mode_arg" && "${OPSRUN_PG_FAST:-0}" == 1 ]] && mode_arg=fast

    [[ "$RELOCATED" == 1 ]] &&
        say "the postgres user cannot reach $(dirname -- "$(realpath -m -- "$REQUESTED")"); using $DATA instead"

    if ! is_initialized; then
        if [[ -d "$DATA" ]] && [[ -n "$(ls -A -- "$DATA" 2>/dev/null)" ]]; then
            die "$DATA exists, is not empty and is not a PostgreSQL data directory"
        fi
        do_initdb
    fi

    if [[ -n "$mode_arg" ]]; then
        mode="$mode_arg"
    elif [[ -f "$MODE_FILE" ]]; then
        mode="$(cat -- "$MODE_FILE")"
    else
        mode=durable
    fi
    case "$mode" in
    fast) opts="$FAST_OPTS" ;;
    durable) opts="$DURABLE_OPTS" ;;
    *) die "unknown mode '$mode' in $MODE_FILE" ;;
    esac
    printf '%s\n' "$mode" >"$MODE_FILE"

    if server_running; then
        if wait_ready; then
            say "already running ($DATA, socket $SOCK)"
            return 0
        fi
        show_log_tail
        die "a server is running on $DATA but did not become ready within ${TIMEOUT}s"
    fi
    clear_stale_pid

    if [[ "$SOCK" != "$DATA" ]]; then
        local sock_owner want_owner
        mkdir -p -- "$SOCK"
        [[ "$AS_ROOT" == 1 ]] && chown postgres: -- "$SOCK"
        want_owner="$(if [[ "$AS_ROOT" == 1 ]]; then echo postgres; else id -un; fi)"
        sock_owner="$(stat -c %U -- "$SOCK")"
        [[ "$sock_owner" == "$want_owner" ]] ||
            die "socket directory $SOCK belongs to $sock_owner, not $want_owner"
        chmod 0755 -- "$SOCK"
    fi
    touch -- "$LOG"
    [[ "$AS_ROOT" == 1 ]] && chown postgres: -- "$LOG"

    # pg_ctl hands -o to a shell; SOCK is restricted to plain characters above.
    opts="-c listen_addresses='' -c unix_socket_directories='$SOCK' -c port=$PORT $opts ${OPSRUN_PG_OPTS:-}"
    say "starting PostgreSQL ($mode) on $DATA, socket $SOCK, log $LOG"
    if ! as_owner "$BINDIR/pg_ctl" start -D "$DATA" -l "$LOG" -w -t "$TIMEOUT" -o "$opts" >/dev/null 2>&1; then
        show_log_tail
        die "PostgreSQL did not start within ${TIMEOUT}s (log: $LOG)"
    fi
    if ! wait_ready; then
        show_log_tail
        die "PostgreSQL started but does not accept connections on $SOCK (log: $LOG)"
    fi
    say "ready: $(url_for postgres)"
}

cmd_stop() {
    local how=fast
    case "${1:-}" in
    "") ;;
    --immediate) how=immediate ;;
    *) die "stop: unknown option '$1'" ;;
    esac
    if ! is_initialized; then
        say "no cluster in $DATA; nothing to stop"
        return 0
    fi
    if ! server_running; then
        clear_stale_pid
        say "not running ($DATA)"
        return 0
    fi
    if as_owner "$BINDIR/pg_ctl" stop -D "$DATA" -m "$how" -w -t "$TIMEOUT" >/dev/null 2>&1; then
        say "stopped ($DATA, $how)"
        return 0
    fi
    say "$how shutdown did not finish within ${TIMEOUT}s; shutting down immediately"
    if as_owner "$BINDIR/pg_ctl" stop -D "$DATA" -m immediate -w -t "$TIMEOUT" >/dev/null 2>&1; then
        say "stopped ($DATA)"
        return 0
    fi
    show_log_tail
    die "could not stop the server on $DATA"
}

# standby DATADIR PRIMARY_DATADIR: a base backup of the running primary
# with its WAL streamed along (-X stream) and the standby's settings written
# (-R: standby.signal, primary_conninfo over the primary's socket), then
# started like any cluster.
cmd_standby() {
    local primary="${1:-}" psock out
    [[ -n "$primary" ]] || die "standby: PRIMARY_DATADIR is required"
    resolve "$primary"
    server_running || die "no server running on $DATA (the primary)"
    psock="$SOCK"
    resolve "$REQUESTED"
    is_initialized && die "$DATA is a cluster already"
    if [[ -d "$DATA" ]] && [[ -n "$(ls -A -- "$DATA" 2>/dev/null)" ]]; then
        die "$DATA exists and is not empty"
    fi
    make_data_dir
    say "base backup of $primary into $DATA"
    if ! out="$(as_owner "$BINDIR/pg_basebackup" -D "$DATA" -h "$psock" -p "$PORT" \
        -U "$SUPERUSER" -R -X stream -c fast --no-sync 2>&1)"; then
        printf '%s\n' "$out" | sed 's/^/    /' >&2
        die "pg_basebackup of $primary failed"
    fi
    # A socket in the primary's data directory left its lock file in the copy.
    rm -f -- "$DATA"/.s.PGSQL.*
    cmd_start
}

# Promotes a standby and waits until it has left recovery (takes writes).
cmd_promote() {
    server_running || die "no server running on $DATA"
    if ! as_owner "$BINDIR/pg_ctl" promote -D "$DATA" -w -t "$TIMEOUT" >/dev/null 2>&1; then
        show_log_tail
        die "could not promote $DATA within ${TIMEOUT}s"
    fi
    say "promoted ($DATA)"
}

cmd_status() {
    if server_running; then
        echo "running: $DATA (socket $SOCK, port $PORT, log $LOG)"
        echo "url: $(url_for postgres)"
        return 0
    fi
    if is_initialized; then
        echo "stopped: $DATA"
    else
        echo "no cluster: $DATA"
    fi
    return 3
}

cmd_destroy() {
    cmd_stop
    local top="$DATA"
    # A relocated cluster's whole /var/tmp/opsrun-<hash> directory goes.
    [[ "$RELOCATED" == 1 ]] && top="$(dirname -- "$DATA")"
    rm -rf -- "$top"
    rm -f -- "$LOG"
    [[ "$SOCK" != "$DATA" ]] && rm -rf -- "$SOCK"
    say "removed $top"
}

# Percent-encodes for a URI query value (keeps unreserved characters and '/').
uri_encode() {
    local s="$1" out="" c i
    for ((i = 0; i < ${#s}; i++)); do
        c="${s:i:1}"
        case "$c" in
        [A-Za-z0-9._~/-]) out+="$c" ;;
        *) out+="$(printf '%%%02X' "'$c")" ;;
        esac
    done
    printf '%s' "$out"
}

url_for() {
    printf 'postgresql://%s@/%s?host=%s&port=%s' \
        "$SUPERUSER" "$(uri_encode "$1")" "$(uri_encode "$SOCK")" "$PORT"
}

cmd_url() {
    local db="${1:-postgres}"
    url_for "$db"
    printf '\n'
}

cmd_createdb() {
    local name="${1:-}"
    [[ -n "$name" ]] || die "createdb: NAME is required"
    server_running || die "no server running on $DATA (run: scripts/pg.sh start $REQUESTED)"
    local lit="${name//\'/\'\'}" exists
    exists="$(client psql -X -q -t -A -v ON_ERROR_STOP=1 -d "$(url_for postgres)" \
        -c "SELECT 1 FROM pg_database WHERE datname = '$lit'")" ||
        die "could not query the server on $SOCK"
    if [[ "$exists" == 1 ]]; then
        say "database $name exists"
        return 0
    fi
    client createdb -h "$SOCK" -p "$PORT" -U "$SUPERUSER" -- "$name" ||
        die "createdb $name failed"
    say "created database $name"
}

# ---------------------------------------------------------------- main

(($# >= 2)) || usage
CMD="$1"
REQUESTED="$2"
shift 2
find_bindir
resolve "$REQUESTED"

case "$CMD" in
start) cmd_start "$@" ;;
stop) cmd_stop "$@" ;;
restart)
    cmd_stop
    cmd_start "$@"
    ;;
status) cmd_status ;;
url) cmd_url "$@" ;;
createdb) cmd_createdb "$@" ;;
log) echo "$LOG" ;;
destroy) cmd_destroy ;;
standby) cmd_standby "$@" ;;
promote) cmd_promote ;;
*) usage ;;
esac
