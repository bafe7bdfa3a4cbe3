#!/usr/bin/env bash
# fuzz.sh — builds every libFuzzer driver of tests/fuzz/ with clang into
# build-fuzz/ (-DOPSRUN_FUZZ=ON; clang is installed when missing) and runs
# each for SECONDS (default 60), JOBS at a time, then prints a table:
# driver, seconds, executions, findings. Exits 1 when any driver found
# something (a crash, leak, timeout or out-of-memory input), 2 on a usage
# or build error.
#
#   scripts/fuzz.sh [options] [SECONDS]
#
#   -j, --jobs N          drivers at a time (default 2: one per core here)
#   --only A,B            only these drivers (alerts or fuzz_alerts)
#   --long A,B:SECONDS    these drivers run SECONDS instead; repeatable:
#                         --long rest_job,soap_job,http_answer:1800
#   --keep-going          fuzz past a finding (libFuzzer's -fork=1
#                         -ignore_crashes=1 ...) instead of stopping the
#                         driver at its first
#   --out DIR             where findings and logs go (default
#                         build-fuzz/findings/<date-time>)
#   --list                print the drivers' names and exit
#
# Each driver fuzzes into a scratch corpus, build-fuzz/corpus/<name>/, kept
# between runs so that a later run starts from what an earlier one
# reached, and reads the checked-in inputs of tests/fuzz/corpus/<name>/
# (never written to). Its findings (crash-*, leak-*, timeout-*, oom-*) and
# its log go to OUT/<name>/; the executions are libFuzzer's final stats
# (-print_final_stats=1). What to do with a finding: tests/fuzz/README.md.
#
# Environment: FUZZ_TIMEOUT (seconds one input may take, default 10),
# FUZZ_RSS_MB (memory limit, default 2048), FUZZ_MAX_LEN (default: libFuzzer
# chooses from the corpus), FUZZ_ARGS (more libFuzzer flags).
set -euo pipefail

readonly ME="fuzz.sh"
say() { printf '%s: %s\n' "$ME" "$*" >&2; }
die() {
    say "error: $*"
    exit 2
}
usage() {
    sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0" >&2
    exit 2
}

ROOT="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd -- "$ROOT"
BUILD="$ROOT/build-fuzz"

# ------------------------------------------------------------ options
SECS=60
JOBS=2
ONLY=""
KEEP_GOING=0
OUT=""
LIST=0
declare -A LONG=()
while (($#)); do
    case "$1" in
    -j | --jobs)
        JOBS="${2:-}"
        shift
        ;;
    --only)
        ONLY="${2:-}"
        shift
        ;;
    --long)
        spec="${2:-}"
        [[ "$spec" =~ ^([a-z0-9_,]+):([1-9][0-9]*)$ ]] ||
            die "--long takes NAMES:SECONDS (rest_job,soap_job:1800), not \"$spec\""
        IFS=, read -r -a names <<<"${BASH_REMATCH[1]}"
        for n in "${names[@]}"; do
            LONG["${n#fuzz_}"]="${BASH_REMATCH[2]}"
        done
        shift
        ;;
    --keep-going) KEEP_GOING=1 ;;
    --out)
        OUT="${2:-}"
        shift
        ;;
    --list) LIST=1 ;;
    -h | --help) usage ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) SECS="$1" ;;
    esac
    shift
done
[[ "$SECS" =~ ^[1-9][0-9]*$ ]] || die "SECONDS must be a positive number, not \"$SECS\""
[[ "$JOBS" =~ ^[1-9][0-9]*$ ]] || die "--jobs must be a positive number, not \"$JOBS\""

# Every driver: tests/fuzz/fuzz_<name>.c; --only narrows them.
ALL=()
for f in tests/fuzz/fuzz_*.c; do
    n="${f##*/fuzz_}"
    ALL+=("${n%.c}")
done
if ((LIST)); then
    printf '%s\n' "${ALL[@]}"
    exit 0
fi
DRIVERS=()
if [[ -n "$ONLY" ]]; then
    IFS=, read -r -a wanted <<<"$ONLY"
    for w in "${wanted[@]}"; do
        w="${w#fuzz_}"
        [[ " ${ALL[*]} " == *" $w "* ]] || die "no driver \"$w\" (scripts/fuzz.sh --list)"
        DRIVERS+=("$w")
    done
else
    DRIVERS=("${ALL[@]}")
fi
for n in "${!LONG[@]}"; do
    [[ " ${ALL[*]} " == *" $n "* ]] || die "--long names no driver \"$n\" (scripts/fuzz.sh --list)"
done

# ------------------------------------------------------------ clang and the build
# Debian's clang ships libFuzzer; deps.sh installs it with what the build
# needs.
command -v clang >/dev/null || bash scripts/deps.sh clang || die "could not install clang"
if [[ -f "$BUILD/CMakeCache.txt" ]] &&
    ! grep -q '^CMAKE_C_COMPILER:.*clang' "$BUILD/CMakeCache.txt"; then
    die "$BUILD was configured with another compiler; remove it and run again"
fi
say "building ${#DRIVERS[@]} drivers with clang into build-fuzz/"
CC=clang cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Asan -DOPSRUN_FUZZ=ON -DOPSRUN_TESTS=ON \
    >/dev/null || die "cmake configure failed"
grep -q '^OPSRUN_FUZZ:BOOL=ON' "$BUILD/CMakeCache.txt" || die "OPSRUN_FUZZ is not on in $BUILD"
cmake --build "$BUILD" -j 2 --target "${DRIVERS[@]/#/fuzz_}" >"$BUILD/fuzz-build.log" 2>&1 || {
    grep -E 'error|Error' "$BUILD/fuzz-build.log" | head -n 40 >&2
    die "build failed; its log: build-fuzz/fuzz-build.log"
}

# ------------------------------------------------------------ fuzzing
OUT="${OUT:-$BUILD/findings/$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"
OUT="$(cd -- "$OUT" && pwd -P)"
export ASAN_OPTIONS="detect_leaks=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
if [[ -f "$ROOT/tests/lsan.supp" ]]; then
    export LSAN_OPTIONS="suppressions=$ROOT/tests/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
fi

# fuzz NAME SECONDS: one driver, in its own directory (libFuzzer writes
# findings to the working directory unless told otherwise); records its
# wall time in OUT/NAME/seconds.
fuzz() {
    local name="$1" secs="$2" dir="$OUT/$1" scratch="$BUILD/corpus/$1" t0=$SECONDS
    local args=(-max_total_time="$secs" -timeout="${FUZZ_TIMEOUT:-10}"
        -rss_limit_mb="${FUZZ_RSS_MB:-2048}" -print_final_stats=1 -artifact_prefix="$dir/")
    [[ -z "${FUZZ_MAX_LEN:-}" ]] || args+=(-max_len="$FUZZ_MAX_LEN")
    ((KEEP_GOING == 0)) || args+=(-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
    # shellcheck disable=SC2206 # FUZZ_ARGS is a list of flags
    [[ -z "${FUZZ_ARGS:-}" ]] || args+=(${FUZZ_ARGS})
    mkdir -p "$dir" "$scratch"
    (cd -- "$dir" && "$BUILD/tests/fuzz_$name" "${args[@]}" "$scratch" \
        "$ROOT/tests/fuzz/corpus/$name") >"$dir/log" 2>&1 || true
    echo $((SECONDS - t0)) >"$dir/seconds"
}

# The longest first, so that the pool ends together.
mapfile -t ORDER < <(for n in "${DRIVERS[@]}"; do
    printf '%s %s\n' "${LONG[$n]:-$SECS}" "$n"
done | sort -k1,1nr -k2,2 | awk '{print $2}')

total=0
for n in "${DRIVERS[@]}"; do
    total=$((total + ${LONG[$n]:-$SECS}))
done
say "fuzzing ${#DRIVERS[@]} drivers, $JOBS at a time, about $(((total / JOBS + 59) / 60)) min;" \
    "findings and logs: $OUT"
running=0
for n in "${ORDER[@]}"; do
    if ((running >= JOBS)); then
        wait -n || true
        running=$((running - 1))
    fi
    say "fuzz_$n: ${LONG[$n]:-$SECS} s"
    fuzz "$n" "${LONG[$n]:-$SECS}" &
    running=$((running + 1))
done
wait

# ------------------------------------------------------------ the table
# Executions: the final stats, or in fork mode the last "#N" line.
executions() {
    local log="$1" n
    n="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
    [[ -n "$n" ]] || n="$(sed -n 's/^#\([0-9][0-9]*\)[:[:space:]].*/\1/p' "$log" | tail -n 1)"
    echo "${n:-?}"
}
found_any=0
printf '\n%-22s %8s %14s %8s\n' driver seconds executions found
for n in "${DRIVERS[@]}"; do
    dir="$OUT/$n"
    found="$(find "$dir" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' \
        -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)"
    ((found == 0)) || found_any=1
    printf '%-22s %8s %14s %8s\n' "fuzz_$n" "$(cat "$dir/seconds" 2>/dev/null || echo '?')" \
        "$(executions "$dir/log")" "$found"
done
echo
if ((found_any)); then
    say "FOUND: the files are in $OUT/<driver>/ (crash-*, leak-*, timeout-*, oom-*), with each" \
        "driver's log; replay one with build-fuzz/tests/fuzz_<driver> FILE"
    exit 1
fi
say "nothing found; logs in $OUT"
