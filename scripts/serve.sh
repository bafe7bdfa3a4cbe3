#!/usr/bin/env bash
# serve.sh — installs what is missing, builds opsrun (Release, build/opsrun)
# and serves it in the foreground: scripts/serve.sh [opsrun serve flags...]
#
# Without a database (none in the flags, OPSRUN_DATABASE_URL or the config
# file, as `opsrun serve --print-config` reports) a private PostgreSQL cluster is
# started in .data/pg with a database "opsrun", and stopped again when opsrun
# exits. SIGINT/SIGTERM are passed on to opsrun (as SIGTERM: both mean a
# graceful drain); serve.sh exits with opsrun's exit status.
set -euo pipefail

readonly ME="serve.sh"
say() { printf '%s: %s\n' "$ME" "$*" >&2; }
die() {
    say "error: $*"
    exit 1
}

ROOT="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd -- "$ROOT"

bash scripts/deps.sh

JOBS="$(nproc 2>/dev/null || echo 2)"
say "building Release into build/"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DOPSRUN_TESTS=OFF >/dev/null ||
    die "cmake configure failed"
cmake --build build -j "$JOBS" || die "build failed"
[[ -x build/opsrun ]] || die "build/opsrun was not built"

# Ask opsrun itself whether a database is configured (flag, environment or
# config file), so every way of giving one is honoured. A configuration it
# rejects is reported by the serve below, with the key it names.
have_db=0
if effective=$(build/opsrun serve --print-config "$@" 2>/dev/null) &&
    ! grep -q '^  "database_url": null' <<<"$effective"; then
    have_db=1
fi

PGDATA_DIR="$ROOT/.data/pg"
started_pg=0
child=""

# shellcheck disable=SC2317 # invoked by trap
cleanup() {
    local rc=$?
    trap - EXIT INT TERM HUP
    if [[ -n "$child" ]] && kill -0 "$child" 2>/dev/null; then
        kill -TERM "$child" 2>/dev/null || true
        wait "$child" 2>/dev/null || true
    fi
    if [[ "$started_pg" == 1 ]]; then
        bash scripts/pg.sh stop "$PGDATA_DIR" || say "warning: could not stop PostgreSQL in $PGDATA_DIR"
    fi
    exit "$rc"
}
trap cleanup EXIT

if [[ "$have_db" == 0 ]]; then
    mkdir -p .data
    started_pg=1
    bash scripts/pg.sh start "$PGDATA_DIR" --durable
    bash scripts/pg.sh createdb "$PGDATA_DIR" opsrun
    OPSRUN_DATABASE_URL="$(bash scripts/pg.sh url "$PGDATA_DIR" opsrun)"
    export OPSRUN_DATABASE_URL
    say "using the private database $OPSRUN_DATABASE_URL"
fi

# opsrun runs in its own session so that a terminal's Ctrl-C reaches it once,
# through us, not twice; a background job in a non-interactive shell would
# otherwise also start with SIGINT ignored.
# shellcheck disable=SC2317 # invoked by trap
forward() {
    say "received $1; asking opsrun to drain and stop"
    if [[ -n "$child" ]]; then
        kill -TERM "$child" 2>/dev/null || true
    fi
}
trap 'forward SIGINT' INT
trap 'forward SIGTERM' TERM
trap 'forward SIGHUP' HUP

say "starting build/opsrun serve $*"
setsid build/opsrun serve "$@" </dev/null &
child=$!

# `wait` returns early (>128) when a trapped signal arrives; keep waiting
# until opsrun has really exited, then collect its own status.
set +e
while :; do
    wait "$child"
    rc=$?
    kill -0 "$child" 2>/dev/null || break
done
wait "$child" 2>/dev/null
rc2=$?
set -e
# A second wait on a reaped child returns its remembered status (bash >= 5);
# 127 means the first one was already final.
[[ "$rc2" != 127 ]] && rc=$rc2
child=""
say "opsrun exited with status $rc"
exit "$rc"
