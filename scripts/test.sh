#!/usr/bin/env bash
# test.sh — installs what is missing, checks formatting, first lines and links,
# builds with ASan+UBSan (build-asan/), starts two throwaway PostgreSQL
# clusters, migrates a template database in each and runs every test through
# ctest, while it builds the Release tree (build-release/) in the background.
# Prints the ten slowest tests. Exits non-zero on any failure.
#
#   scripts/test.sh [--tsan] [--lint] [extra ctest args...]
#                                             e.g. scripts/test.sh -R unit_
#                                                  scripts/test.sh -L e2e_poller
#
#   --tsan   also builds with ThreadSanitizer (build-tsan/) and runs the
#            concurrency suites (integration_*, e2e_cluster, e2e_lease,
#            e2e_streams, e2e_poller, e2e_shell_query, e2e_limits,
#            e2e_schedules, e2e_rate_limits, e2e_notify, e2e_approvals,
#            e2e_bulk_actions, e2e_reload, e2e_auth) under
#            it, two tests at a time; any report fails them.
#            Adds about 3 minutes.
#   --lint   also runs clang-tidy (.clang-tidy) over the product code; any
#            finding fails. Adds about 3 minutes.
# CI runs neither (it runs this script with no flags).
#
# Unit suites (label "unit") run two at a time. Then every test of the
# integration and e2e suites is a ctest test of its own, <suite>.<test>
# (label: the suite's name), and they run OPSRUN_TEST_JOBS at a time
# (default 10: they mostly wait on timers, servers and PostgreSQL; on 2
# cores 6, 8, 10 and 12 at a time took 93, 81, 71 and 65-85 s), each on
# databases of its own; the few that need a cluster to themselves (they stop
# or restart PostgreSQL) run one at a time on the second cluster
# (tests/CMakeLists.txt, OPSRUN_TESTS_ALONE).
#
# The tests see:
#   OPSRUN_TEST_DATABASE_URL  the migrated template database (opsrun_template);
#                             suites create their own databases from it with
#                             CREATE DATABASE ... TEMPLATE opsrun_template
#   OPSRUN_TEST_ADMIN_URL     the same cluster's "postgres" database, to run
#                             CREATE/DROP DATABASE from (the template must have
#                             no open connection while it is copied)
#   OPSRUN_TEST_ALONE_DATABASE_URL, OPSRUN_TEST_ALONE_ADMIN_URL
#                             the same on the second cluster, the one of the
#                             tests that need a cluster to themselves
#   OPSRUN_TEST_ALONE_PGDATA  its data directory, so such a test can run
#                             "$OPSRUN_TEST_PGCTL" restart DIR (the harness
#                             names it OPSRUN_TEST_PGDATA for those tests only)
#   OPSRUN_TEST_PGCTL         this checkout's scripts/pg.sh (absolute path)
#   OPSRUN_TEST_DBNAMES       a directory where the harness records which test
#                             created which database name (two tests may not
#                             share one)
# ASan/UBSan stop at the first error; tests/lsan.supp, if present, holds
# LeakSanitizer suppressions for third-party libraries.
set -euo pipefail

readonly ME="test.sh"
say() { printf '%s: %s\n' "$ME" "$*" >&2; }
die() {
    say "error: $*"
    exit 1
}

ROOT="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd -- "$ROOT"
PGCTL="$ROOT/scripts/pg.sh"
BUILD="$ROOT/build-asan"

TSAN=0
LINT=0
while (($#)); do
    case "$1" in
    --tsan) TSAN=1 ;;
    --lint) LINT=1 ;;
    *) break ;;
    esac
    shift
done

# Test-only packages; opsrun never needs them to serve, so deps.sh does not
# install them by default.
#   prometheus: for promtool only, which checks GET /metrics and the rules
#     of deploy/prometheus (tests/e2e/test_metrics.c).
#   chromium: the headless browser of tests/browser/ (CORS as a browser
#     enforces it), driven by playwright-core from npm (below).
#   nodejs, npm: for the Redocly lint and the browser tests.
#   python3-yaml: scripts/check-deploy.sh reads the manifests of deploy/.
#   prometheus-alertmanager: the real Alertmanager that tests/e2e/test_notify.c
#     starts (its own port, configuration and storage; the Debian service,
#     if it runs, is left alone) to receive opsrun's alerts.
#   pgbouncer: tests/e2e/test_pooler.c runs opsrun through PgBouncer in
#     transaction mode (db.prepared_statements false); the test starts its
#     own, the package's service is not used.
TEST_PACKAGES=(prometheus chromium nodejs npm python3-yaml prometheus-alertmanager pgbouncer)
if ((LINT)); then
    bash scripts/deps.sh "${TEST_PACKAGES[@]}" clang-tidy
else
    bash scripts/deps.sh "${TEST_PACKAGES[@]}"
fi

failures=()

# ------------------------------------------------------------ source files
# The C sources and headers of our folders (build trees left out), sorted,
# into SOURCES.
SOURCE_DIRS=(common config store live engine handlers server client tests bench)
SOURCES=()
list_sources() {
    local dirs=() d f
    for d in "${SOURCE_DIRS[@]}"; do
        [[ -d "$d" ]] && dirs+=("$d")
    done
    ((${#dirs[@]})) || return 0
    while IFS= read -r -d '' f; do
        SOURCES+=("$f")
    done < <(find "${dirs[@]}" \( -type d -name 'build*' -prune \) -o \
        \( -type f \( -name '*.c' -o -name '*.h' \) -print0 \) | sort -z)
}
list_sources

# ------------------------------------------------------------ formatting
format_check() {
    command -v clang-format >/dev/null || die "clang-format not found (scripts/deps.sh installs it)"
    local out
    ((${#SOURCES[@]})) || return 0
    if out="$(clang-format --dry-run --Werror "${SOURCES[@]}" 2>&1)"; then
        say "formatting: ${#SOURCES[@]} files OK"
        return 0
    fi
    printf '%s\n' "$out" | sed -n '1,60p' >&2
    say "formatting: these files need clang-format (fix: clang-format -i FILE...):"
    printf '%s\n' "$out" | sed -n 's/^\([^: ]*\.[ch]\):[0-9]*:[0-9]*: .*/\1/p' | sort -u | sed 's/^/    /' >&2
    failures+=("formatting")
}
format_check

# ------------------------------------------------------------ first lines
# A file's first line names the file ("/* engine/poller.c — ..."); a file
# that moved and kept its old name there misleads every reader. A first-line
# comment whose first word is a .c or .h path must be the file's own path.
first_line_check() {
    local f line named wrong=()
    for f in "${SOURCES[@]}"; do
        IFS= read -r line <"$f" || [[ -n "$line" ]] || continue
        [[ "$line" =~ ^/\*[[:space:]]+([^[:space:]]+\.[ch])([[:space:]]|$) ]] || continue
        named="${BASH_REMATCH[1]}"
        [[ "$named" == "$f" ]] || wrong+=("$f: its first line names $named")
    done
    if ((${#wrong[@]} == 0)); then
        say "first lines: ${#SOURCES[@]} files name themselves"
        return 0
    fi
    say "first lines: these files name another path in their first line:"
    printf '    %s\n' "${wrong[@]}" >&2
    failures+=("first lines")
}
first_line_check

# ------------------------------------------------------------ API description
# openapi.yaml is linted with Redocly's recommended rules; any error fails.
# The CLI is installed from the npm registry into .cache/ (pinned), once.
REDOCLY_VERSION=2.77.0
openapi_lint() {
    local dir="$ROOT/.cache/redocly-$REDOCLY_VERSION" out
    command -v npm >/dev/null || die "npm not found (scripts/deps.sh installs nodejs and npm)"
    if [[ ! -x "$dir/node_modules/.bin/redocly" ]]; then
        mkdir -p "$dir"
        (cd "$dir" && npm install --silent --no-audit --no-fund --no-save \
            "@redocly/cli@$REDOCLY_VERSION" >/dev/null 2>&1) ||
            die "could not install @redocly/cli $REDOCLY_VERSION from the npm registry"
    fi
    if out="$("$dir/node_modules/.bin/redocly" lint --format=summary openapi.yaml 2>&1)"; then
        say "openapi.yaml: lint OK ($(printf '%s\n' "$out" | grep -c '^warning') kinds of warnings)"
        return 0
    fi
    "$dir/node_modules/.bin/redocly" lint openapi.yaml 2>&1 | grep -v '^\s*[║╔╚]' | tail -n 80 >&2
    failures+=("openapi lint")
}
openapi_lint

# ------------------------------------------------------------ browser tests
# tests/browser/*.mjs drive the system's chromium with playwright-core
# (the library only: it downloads no browser), installed from the npm
# registry into .cache/ (pinned), once. They find it through
# OPSRUN_PLAYWRIGHT_DIR.
PLAYWRIGHT_VERSION=1.65.1
playwright_install() {
    local dir="$ROOT/.cache/playwright-core-$PLAYWRIGHT_VERSION"
    if [[ ! -f "$dir/node_modules/playwright-core/package.json" ]]; then
        mkdir -p "$dir"
        (cd "$dir" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --silent --no-audit --no-fund \
            --no-save "playwright-core@$PLAYWRIGHT_VERSION" >/dev/null 2>&1) ||
            die "could not install playwright-core $PLAYWRIGHT_VERSION from the npm registry"
    fi
    export OPSRUN_PLAYWRIGHT_DIR="$dir"
}
playwright_install

# ------------------------------------------------------------ response validation
# tests/openapi/validate.mjs checks every HTTP exchange the integration and
# end-to-end suites record against openapi.yaml (ctest: openapi_exchanges).
# It needs ajv (JSON Schema 2020-12), ajv-formats and yaml, installed from the
# npm registry into .cache/ (pinned), once; it finds them through
# OPSRUN_OPENAPI_DEPS.
AJV_VERSION=8.20.0
AJV_FORMATS_VERSION=3.0.1
YAML_VERSION=2.9.1
openapi_deps_install() {
    local dir="$ROOT/.cache/openapi-ajv-$AJV_VERSION-formats-$AJV_FORMATS_VERSION-yaml-$YAML_VERSION"
    if [[ ! -f "$dir/node_modules/ajv-formats/package.json" || ! -f "$dir/node_modules/yaml/package.json" ]]; then
        mkdir -p "$dir"
        (cd "$dir" && npm install --silent --no-audit --no-fund --no-save "ajv@$AJV_VERSION" \
            "ajv-formats@$AJV_FORMATS_VERSION" "yaml@$YAML_VERSION" >/dev/null 2>&1) ||
            die "could not install ajv, ajv-formats and yaml from the npm registry"
    fi
    export OPSRUN_OPENAPI_DEPS="$dir"
}
openapi_deps_install

# ------------------------------------------------------------ build
say "building with ASan+UBSan into build-asan/"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Asan -DOPSRUN_TESTS=ON >/dev/null ||
    die "cmake configure failed"
cmake --build "$BUILD" -j 2 || die "build failed"
[[ -x "$BUILD/opsrun" ]] || die "build-asan/opsrun was not built"

# The Release tree, the build type users get by default, tests included: it
# builds with -O2, whose warnings -O1 does not give, so it must build here
# too. Only built, not run: in the background at the lowest CPU priority
# while the suites run (they leave the CPU idle most of the time), in a
# process group of its own so that an early exit can stop it; waited for
# before the summary.
RELEASE="$ROOT/build-release"
RELEASE_PID=""
release_build_start() {
    mkdir -p "$RELEASE"
    # shellcheck disable=SC2016 # $1 and $2 are the inner shell's arguments
    setsid nice -n 19 bash -c 'cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release \
        -DOPSRUN_TESTS=ON >/dev/null && cmake --build "$2" -j 2' \
        release-build "$ROOT" "$RELEASE" >"$RELEASE/test-build.log" 2>&1 &
    RELEASE_PID=$!
}
release_build_wait() {
    local t0=$SECONDS
    if wait "$RELEASE_PID"; then
        say "Release build (build-release/): OK (waited $((SECONDS - t0)) s for it)"
    else
        grep -E 'error|warning' "$RELEASE/test-build.log" | head -n 40 >&2 || true
        say "Release build failed; its log: build-release/test-build.log"
        failures+=("Release build")
    fi
    RELEASE_PID=""
}
say "building the Release tree into build-release/ in the background"
release_build_start

# ------------------------------------------------------------ lint
lint_check() {
    local out="$TMP/clang-tidy.out" srcs
    mapfile -t srcs < <(find common config store live engine handlers server client -name '*.c' | sort)
    say "clang-tidy: ${#srcs[@]} files (.clang-tidy)"
    if run-clang-tidy -p "$BUILD" -j 2 -quiet "${srcs[@]/#/$ROOT/}" >"$out" 2>&1 &&
        ! grep -q 'error:' "$out"; then
        say "clang-tidy: no findings"
        return 0
    fi
    grep -E '(warning|error):' "$out" | sed 's/\x1b\[[0-9;]*m//g' | sort -u >&2
    failures+=("clang-tidy")
}

# ------------------------------------------------------------ sanitizers
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
if [[ -f "$ROOT/tests/lsan.supp" ]]; then
    export LSAN_OPTIONS="suppressions=$ROOT/tests/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
fi

# ------------------------------------------------------------ deployment files
# deploy/compose, deploy/kubernetes and deploy/systemd: syntax, the example
# configurations loaded by this build, and the grace periods they must share.
# Offline, under a second; checks whose tool is missing are skipped.
OPSRUN_BIN="$BUILD/opsrun" bash scripts/check-deploy.sh || failures+=("deployment files")

# ------------------------------------------------------------ links
# Every relative link of README.md, docs/, bench/ and deploy/ reaches a file,
# and a heading when it names an anchor. Offline, under a second.
python3 scripts/check-links.py . || failures+=("documentation links")

# ------------------------------------------------------------ PostgreSQL
TMP="$(mktemp -d "${TMPDIR:-/tmp}/opsrun-test.XXXXXX")"
# As root, PostgreSQL runs as "postgres", which must be able to enter TMP.
chmod 0755 "$TMP"
# The cluster of every test but those that need one to themselves, and the
# cluster of those, one at a time (a restart would end the connections of
# every test beside it).
PGDATA_DIR="$TMP/pg"
PGDATA_ALONE="$TMP/pg-alone"
# Ten tests at a time, some with three servers of 20-odd connections each
# (sixteen at a time peaked at 110 connections).
export OPSRUN_PG_OPTS="-c max_connections=600${OPSRUN_PG_OPTS:+ $OPSRUN_PG_OPTS}"

cleanup() {
    local rc=$? log dir
    trap - EXIT INT TERM
    [[ -z "$RELEASE_PID" ]] || kill -- "-$RELEASE_PID" 2>/dev/null || true
    for dir in "$PGDATA_DIR" "$PGDATA_ALONE"; do
        if [[ "$rc" == 0 ]]; then
            bash "$PGCTL" destroy "$dir" >/dev/null 2>&1 ||
                say "warning: could not stop and remove the test cluster in $dir"
            continue
        fi
        bash "$PGCTL" stop "$dir" >/dev/null 2>&1 ||
            say "warning: could not stop the test cluster in $dir"
        log="$(bash "$PGCTL" log "$dir" 2>/dev/null || true)"
        if [[ -n "$log" && -s "$log" ]]; then
            say "PostgreSQL log kept at $log; its last lines:"
            tail -n 30 -- "$log" | sed 's/^/    /' >&2
        fi
    done
    if [[ "$rc" == 0 ]]; then
        rm -rf -- "$TMP"
    else
        say "kept $TMP for inspection"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start_cluster DIR: starts it, creates and migrates its template database.
start_cluster() {
    bash "$PGCTL" start "$1" --fast &&
        bash "$PGCTL" createdb "$1" opsrun_template &&
        "$BUILD/opsrun" migrate --database-url "$(bash "$PGCTL" url "$1" opsrun_template)"
}
say "starting two PostgreSQL clusters and migrating their template databases"
start_cluster "$PGDATA_DIR" >"$TMP/pg.start.log" 2>&1 &
pg_main=$!
start_cluster "$PGDATA_ALONE" >"$TMP/pg-alone.start.log" 2>&1 &
pg_alone=$!
wait "$pg_main" || {
    cat "$TMP/pg.start.log" >&2
    die "could not start and migrate the test cluster"
}
wait "$pg_alone" || {
    cat "$TMP/pg-alone.start.log" >&2
    die "could not start and migrate the second test cluster"
}
grep '^pg.sh: ready' "$TMP/pg.start.log" "$TMP/pg-alone.start.log" | sed 's/^[^:]*://' >&2 || true

OPSRUN_TEST_DATABASE_URL="$(bash "$PGCTL" url "$PGDATA_DIR" opsrun_template)"
OPSRUN_TEST_ADMIN_URL="$(bash "$PGCTL" url "$PGDATA_DIR" postgres)"
OPSRUN_TEST_ALONE_DATABASE_URL="$(bash "$PGCTL" url "$PGDATA_ALONE" opsrun_template)"
OPSRUN_TEST_ALONE_ADMIN_URL="$(bash "$PGCTL" url "$PGDATA_ALONE" postgres)"
export OPSRUN_TEST_DATABASE_URL OPSRUN_TEST_ADMIN_URL OPSRUN_TEST_ALONE_DATABASE_URL \
    OPSRUN_TEST_ALONE_ADMIN_URL
export OPSRUN_TEST_ALONE_PGDATA="$PGDATA_ALONE"
export OPSRUN_TEST_PGCTL="$PGCTL"
export OPSRUN_TEST_DBNAMES="$TMP/dbnames"
unset OPSRUN_TEST_PGDATA

((LINT == 0)) || lint_check

# ------------------------------------------------------------ tests
total_passed=0
total_failed=0
ctest_failed=0

JOBS="${OPSRUN_TEST_JOBS:-10}"
# What the tests share besides the cores: three browsers at a time (each
# browser test asks for one, tests/CMakeLists.txt). Nine Chromiums started
# together beside the other tests took 77 to more than 120 s each on a
# 2-core machine, against 15 to 30 s alone, and three ran out of time.
cat >"$TMP/resources.json" <<'JSON'
{"version": {"major": 1, "minor": 0}, "local": [{"browsers": [{"id": "0", "slots": 3}]}]}
JSON
[[ "$JOBS" =~ ^[1-9][0-9]*$ ]] || die "OPSRUN_TEST_JOBS must be a positive number, not \"$JOBS\""
runs=0

# run_ctest JOBS LABEL-SELECTION... ; extra args from the command line follow.
run_ctest() {
    local jobs="$1" count out rc summary failed total
    shift
    count="$(cd "$BUILD" && ctest -N "$@" "${EXTRA[@]}" | sed -n 's/^Total Tests: *//p')"
    [[ "${count:-0}" != 0 ]] || return 0
    runs=$((runs + 1))
    out="$TMP/ctest-$runs.out"
    set +e
    (cd "$BUILD" && ctest --output-on-failure --no-tests=ignore -j "$jobs" \
        --resource-spec-file "$TMP/resources.json" "$@" "${EXTRA[@]}") 2>&1 |
        tee "$out"
    rc=${PIPESTATUS[0]}
    set -e
    summary="$(sed -n 's/.*tests passed, \([0-9]*\) tests\{0,1\} failed out of \([0-9]*\).*/\1 \2/p' "$out" | tail -n 1)"
    if [[ -n "$summary" ]]; then
        read -r failed total <<<"$summary"
        total_failed=$((total_failed + failed))
        total_passed=$((total_passed + total - failed))
    fi
    if [[ "$rc" != 0 ]]; then
        ctest_failed=1
        # A crash of ctest itself, or a failure not in the summary.
        [[ -n "$summary" && "$failed" != 0 ]] || total_failed=$((total_failed + 1))
    fi
}

# The ten slowest tests of this run's ctest outputs, with their seconds.
slowest_tests() {
    local outs=("$TMP"/ctest-*.out)
    [[ -e "${outs[0]}" ]] || return 0
    say "the ten slowest tests (seconds):"
    # awk reads all of sort's output: head would leave sort to die of
    # SIGPIPE, and pipefail would make that the script's exit code (141).
    sed -n 's/^ *[0-9]*\/[0-9]* *Test *#[0-9]*: \([^ ]*\) .* \([0-9][0-9]*\.[0-9]*\) sec$/\2 \1/p' \
        "${outs[@]}" | sort -rn | awk 'NR <= 10 { printf "    %7.2f  %s\n", $1, $2 }' >&2
}

EXTRA=("$@")
t_ctest=$SECONDS
# The previous release's binary (e2e_upgrade) is built beside the unit
# tests, before the suites that load the machine: built by the test itself
# in a fresh clone, with the whole suite running on 2 cores, it took more
# than the test's 240 s. Only when the tests asked for include it; a
# failure here is the test's to report (or its skip, without history).
prev_pid=""
if (cd "$BUILD" && ctest -N "${EXTRA[@]}") | grep 'e2e_upgrade[.]' >/dev/null; then
    bash "$ROOT/scripts/previous-release.sh" build "$BUILD/previous-release" \
        >"$TMP/previous-release.log" 2>&1 &
    prev_pid=$!
fi
run_ctest 2 -L '^unit$'
if [[ -n "$prev_pid" ]] && ! wait "$prev_pid"; then
    say "the previous release was not built beforehand ($TMP/previous-release.log)"
fi
run_ctest "$JOBS" -LE '^unit$'
say "ctest: $((SECONDS - t_ctest)) s"

# ThreadSanitizer: the suites where threads and processes race, against a
# TSan build of the server and the suites. halt_on_error makes a report a
# failure of the process that had it (the server's exit code fails its
# suite). Two tests at a time: TSan makes every process several times
# slower, and four at a time (92 s) already failed a timing assertion
# that two at a time (157 s) and one alone pass.
if ((TSAN)); then
    say "building with ThreadSanitizer into build-tsan/"
    cmake -S . -B "$ROOT/build-tsan" -DCMAKE_BUILD_TYPE=Tsan -DOPSRUN_TESTS=ON >/dev/null ||
        die "cmake configure (tsan) failed"
    cmake --build "$ROOT/build-tsan" -j 2 || die "tsan build failed"
    BUILD_ASAN="$BUILD"
    BUILD="$ROOT/build-tsan"
    TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1${TSAN_OPTIONS:+:$TSAN_OPTIONS}" \
        run_ctest 2 -R '^(integration_[a-z_]*|e2e_cluster|e2e_lease|e2e_streams|e2e_poller|e2e_shell_query|e2e_limits|e2e_schedules|e2e_rate_limits|e2e_notify|e2e_approvals|e2e_bulk_actions|e2e_reload|e2e_auth)[.]'
    BUILD="$BUILD_ASAN"
fi

[[ -z "$RELEASE_PID" ]] || release_build_wait
slowest_tests
if ((total_passed + total_failed == 0)); then
    say "warning: no tests matched"
fi
((ctest_failed == 0)) || failures+=("tests")

echo "${ME%.sh}: ${total_passed} passed, ${total_failed} failed"
if ((${#failures[@]})); then
    say "FAILED: ${failures[*]}"
    exit 1
fi
say "all checks passed"
