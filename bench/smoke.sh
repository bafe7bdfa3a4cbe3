#!/usr/bin/env bash
# bench/smoke.sh — every benchmark of bench/ run once, briefly (a few
# seconds, runs or rounds each, where the script would take minutes), to
# show that each still runs on this tree; then says which did not. A check
# that the scripts work, not a measurement: figures from runs this short
# mean nothing.
#
# Usage: bench/smoke.sh [--fresh] [NAME...]
#   NAME       only these (ab.sh, all.sh, ..., dashboard.mjs); default all
#   --fresh    first clones this checkout's HEAD into a temporary directory
#              and runs there: no build/, no .cache/, no bench/out/, as a
#              fresh clone has them (uncommitted changes are not in it)
#   TIMEOUT_S=N  the most one script may take (default 1200)
# Each script's output goes to bench/out/smoke-NAME.log, the table to
# bench/out/smoke.txt. Exit status 1 when any did not run to the end.
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
TIMEOUT_S=${TIMEOUT_S:-1200}
OUT=bench/out

usage() {
    sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

# The brief form of each benchmark, by its file name. The arguments and
# variables are those of the script's own usage line.
brief() {
    case "$1" in
    ab.sh) PAIRS=1 RUNS=1280 SUBMIT_S=2 PICKUPS=10 bash bench/ab.sh HEAD . ;;
    all.sh)
        CEIL_S=3 SUBMIT_S=3 SINGLE_RUNS=640 SINGLE64_RUNS=1280 BULK_RUNS=2000 BULK_BATCH=500 \
            PICKUPS=20 LATE_DELAYED=20 LATE_RETRIES=10 SSE_EVENTS=30 POLL_WINDOW_S=3 \
            bash bench/all.sh
        ;;
    bulk.sh) bash bench/bulk.sh 1 1000 50 ;;
    concurrency.sh) RUNS=500 BACKLOG=500 bash bench/concurrency.sh 1 ;;
    drain.sh) bash bench/drain.sh 2000 8 ;;
    failover.sh) bash bench/failover.sh 1 4 4 ;;
    lateness.sh) bash bench/lateness.sh 20 4 ;;
    logs.sh) LINES=2000 RUNS=300 FOLLOWERS=5 bash bench/logs.sh 1 ;;
    lifecycle.sh) NARROW=1 E2E=1 E2E_RUNS=2000 REPS=1 bash bench/lifecycle.sh 3 2 ;;
    notifications.sh) RATE=20 RUNS=640 bash bench/notifications.sh 5 1 ;;
    pgcost.sh) bash bench/pgcost.sh 2000 8 ;;
    poller.sh) ROUNDS=1 bash bench/poller.sh 3 200 2 1 10 ;;
    pollstat.sh) RAMP_S=2 bash bench/pollstat.sh 3 ;;
    prepared.sh) bash bench/prepared.sh 400 4 1 ;;
    profile.sh) bash bench/profile.sh 2000 ;;
    reload.sh) bash bench/reload.sh 3 100 1 ;;
    replicas.sh) bash bench/replicas.sh 2000 4 ;;
    run.sh) bash bench/run.sh 500 4 ;;
    schedules.sh) RUNS=640 IDLE_S=5 bash bench/schedules.sh 5 1 ;;
    soak.sh) bash bench/soak.sh 1 50 ;;
    stmtcost.sh) NOTIFY=1 XSQL="DROP INDEX runs_retried" bash bench/stmtcost.sh 160 16 &&
        STMT=claim bash bench/stmtcost.sh 160 4 ;;
    streams.sh) bash bench/streams.sh 30 20 50 100 ;;
    workflows.sh) PAIRS=1 N=20 bash bench/workflows.sh ;;
    dashboard.mjs) dashboard ;;
    *) return 3 ;;
    esac
}

# dashboard.mjs drives Chromium with playwright-core, which scripts/test.sh
# installs (pinned) into .cache/, and serves build/opsrun: both are made
# here first, as test.sh and bench_build would.
dashboard() {
    local version dir
    # shellcheck source=bench/lib.sh
    . bench/lib.sh
    bench_build chromium nodejs npm -- opsrun
    version=$(sed -n 's/^PLAYWRIGHT_VERSION=//p' scripts/test.sh)
    dir=$ROOT/.cache/playwright-core-$version
    if [[ ! -f "$dir/node_modules/playwright-core/package.json" ]]; then
        mkdir -p "$dir"
        (cd "$dir" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --silent --no-audit --no-fund \
            --no-save "playwright-core@$version")
    fi
    OPSRUN_PLAYWRIGHT_DIR=$dir node bench/dashboard.mjs 200 20 3
}

# Every benchmark: the scripts a person runs (lib.sh is sourced by them).
all_names() {
    local f
    for f in bench/*.sh bench/*.mjs; do
        f=${f#bench/}
        [[ "$f" == lib.sh || "$f" == smoke.sh ]] || echo "$f"
    done
}

FRESH=0
NAMES=()
while (($#)); do
    case "$1" in
    --fresh) FRESH=1 ;;
    -h | --help) usage ;;
    -*) usage ;;
    *) NAMES+=("$1") ;;
    esac
    shift
done
((${#NAMES[@]})) || mapfile -t NAMES < <(all_names)

if ((FRESH)); then
    CLONE=$(mktemp -d /tmp/opsrun-smoke.XXXXXX)
    chmod 755 "$CLONE"
    trap 'rm -rf "$CLONE"' EXIT
    echo "== a fresh clone of $(git rev-parse --short HEAD) in $CLONE"
    git clone -q --no-checkout "$ROOT" "$CLONE/opsrun"
    git -C "$CLONE/opsrun" checkout -q "$(git rev-parse HEAD)"
    rc=0
    TIMEOUT_S=$TIMEOUT_S bash "$CLONE/opsrun/bench/smoke.sh" "${NAMES[@]}" || rc=$?
    mkdir -p "$OUT"
    cp "$CLONE"/opsrun/bench/out/smoke* "$OUT/" 2>/dev/null || true
    exit "$rc"
fi

mkdir -p "$OUT"
TABLE=$OUT/smoke.txt
printf '%-18s %-28s %6s  %s\n' script result seconds log >"$TABLE.tmp"
failed=()
for name in "${NAMES[@]}"; do
    log=$OUT/smoke-$name.log
    echo "== $name (at most $TIMEOUT_S s; log $log)"
    t0=$SECONDS
    rc=0
    if [[ ! -f "bench/$name" ]]; then
        echo "smoke.sh: bench/$name: no such benchmark" >"$log"
        rc=3
    else
        # timeout runs it in a process group of its own and signals the
        # whole group: the script, its servers and its clients.
        export -f brief dashboard
        export ROOT
        # shellcheck disable=SC2016 # $1 is the inner shell's argument
        timeout -k 30 "$TIMEOUT_S" bash -c 'brief "$1"' smoke "$name" </dev/null >"$log" 2>&1 ||
            rc=$?
    fi
    case "$rc" in
    0) result="ran" ;;
    3) result="no such benchmark" ;;
    124 | 137) result="timed out after $TIMEOUT_S s" ;;
    *) result="failed (exit $rc)" ;;
    esac
    ((rc == 0)) || failed+=("$name")
    printf '%-18s %-28s %6d  %s\n' "$name" "$result" "$((SECONDS - t0))" "$log" >>"$TABLE.tmp"
    if ((rc != 0)); then
        echo "   $result; its last lines:"
        tail -n 12 "$log" | sed 's/^/     | /' || true
    fi
done
mv "$TABLE.tmp" "$TABLE"
echo
echo "== bench/smoke.sh: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo '+dirty'), $(nproc) cores"
cat "$TABLE"
if ((${#failed[@]})); then
    echo "did not run: ${failed[*]}"
    exit 1
fi
echo "every benchmark ran"
