#!/usr/bin/env bash
# bench/ab.sh — two builds of opsrun against each other: OLD_REV and NEW_REV
# serve in turn, on one durable cluster, the same end-to-end, bulk, HTTP
# submission and pickup measurements, in alternated pairs (OLD NEW, then
# NEW OLD, ...), each measurement on a fresh database and a fresh server.
# Prints, for each figure, the median of each build, the median of the
# per-pair ratios NEW / OLD and their range. The machines are noisy: the
# ratio of alternated pairs is the figure that counts.
#
# Usage: bench/ab.sh OLD_REV NEW_REV
#   REV          a git revision, built once (Release, from `git archive`) into
#                bench/out/base-<hash>/; or `.`: this tree's build/, made
#                from the working tree as it is (uncommitted changes included)
#   PAIRS=N      alternated pairs (default 3)
#   RUNS=N       no-op runs of each end-to-end measurement (default 32000)
#   SUBMIT_S=N   seconds of the HTTP submission load (default 6)
#   PICKUPS=N    runs of the pickup measurement, 100 ms apart (default 100)
#   WORKERS=N    engine workers of both servers (default 32)
#   CONFIG=FILE  a configuration file for both servers, merged over the
#                script's own (no per-caller limits); OLD_CONFIG and
#                NEW_CONFIG give one build a file of its own instead, to
#                compare two configurations of one build (`. .`)
#   MEASURES="single bulk submit pickup"  which measurements (default all)
# Raw figures: bench/out/ab-*.txt (key=value), the table ab-table.md. The
# exit status is non-zero when a build or a measurement failed; the table is
# printed anyway, with n/a for what was not measured.
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."
. bench/lib.sh

usage() {
    sed -n '2,26p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}
[ $# -eq 2 ] || usage
case "$1" in -h | --help) usage ;; esac
OLD_REV=$1
NEW_REV=$2
PAIRS=${PAIRS:-3}
RUNS=${RUNS:-32000}
SUBMIT_S=${SUBMIT_S:-6}
PICKUPS=${PICKUPS:-100}
WORKERS=${WORKERS:-32}
MEASURES=${MEASURES:-single bulk submit pickup}
OLD_CONFIG=${OLD_CONFIG:-${CONFIG:-}}
NEW_CONFIG=${NEW_CONFIG:-${CONFIG:-}}
OUT=bench/out
LOG=$OUT/ab-run.log
for v in PAIRS RUNS SUBMIT_S PICKUPS WORKERS; do
    [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || { echo "ab.sh: $v must be a positive integer" >&2; exit 2; }
done
for m in $MEASURES; do
    case "$m" in single | bulk | submit | pickup) ;; *)
        echo "ab.sh: unknown measurement \"$m\" in MEASURES" >&2
        exit 2
        ;;
    esac
done
for f in "$OLD_CONFIG" "$NEW_CONFIG"; do
    [ -z "$f" ] || [ -r "$f" ] || { echo "ab.sh: cannot read configuration \"$f\"" >&2; exit 2; }
done

mkdir -p "$OUT"
rm -f "$OUT"/ab-*
say() { echo "== $*" | tee -a "$LOG"; }

# ---------------------------------------------------------------- builds
# The loadgen is always this tree's: both builds are measured by one tool.
say "dependencies and this tree's Release build (opsrun_loadgen, and opsrun for \`.\`)"
bench_build jq -- opsrun opsrun_loadgen

declare -A BIN LABEL CONF_IN
build_of() { # build_of REV: the path of its binary
    if [ "$1" = . ]; then
        echo build/opsrun
    else
        bench_base_build "$1"
    fi
}
label_of() { # label_of REV: short hash, or "<HEAD>+tree" for `.`
    if [ "$1" = . ]; then
        echo "$(git rev-parse --short HEAD)+tree$(git diff --quiet HEAD 2>/dev/null || echo '(dirty)')"
    else
        git rev-parse --short "$1^{commit}"
    fi
}
for side in old new; do
    rev=$OLD_REV
    [ "$side" = new ] && rev=$NEW_REV
    LABEL[$side]=$(label_of "$rev" 2>/dev/null) || {
        echo "ab.sh: \"$rev\" is not a revision of this repository" >&2
        exit 2
    }
    say "$side: $rev (${LABEL[$side]})"
    BIN[$side]=$(build_of "$rev") || BIN[$side]=""
    if [ ! -x "${BIN[$side]}" ]; then
        echo "ab.sh: could not build $rev" >&2
        exit 1
    fi
done
CONF_IN[old]=$OLD_CONFIG
CONF_IN[new]=$NEW_CONFIG

# ---------------------------------------------------------------- cluster
DATA=$(mktemp -d /tmp/opsrun-ab.XXXXXX)
chmod 755 "$DATA"
PID=""
stop() { # the server this script started, if any
    if [ -n "$PID" ]; then
        if kill "$PID" 2>/dev/null; then wait "$PID" 2>/dev/null || true; fi
        PID=""
    fi
}
cleanup() {
    stop
    bench_cluster_destroy "$DATA"
    rm -rf "$DATA"
}
trap cleanup EXIT
say "a private durable PostgreSQL cluster"
bench_cluster "$DATA"
ADMIN=$(scripts/pg.sh url "$DATA/pg")
sql() { psql -qAtX -v ON_ERROR_STOP=1 "$ADMIN" -c "$1"; }

# Every client comes from 127.0.0.1 and the one tenant: no per-caller limits.
echo '{"http": {"max_connections_per_ip": 0}, "limits": {"submit_rate_per_s": 0}}' >"$DATA/base.json"
for side in old new; do
    if [ -n "${CONF_IN[$side]}" ]; then
        jq -s '.[0] * .[1]' "$DATA/base.json" "${CONF_IN[$side]}" >"$DATA/$side.json"
    else
        cp "$DATA/base.json" "$DATA/$side.json"
    fi
done
{
    echo "old_rev=$OLD_REV"
    echo "old=${LABEL[old]}"
    echo "old_config=${CONF_IN[old]:--}"
    echo "new_rev=$NEW_REV"
    echo "new=${LABEL[new]}"
    echo "new_config=${CONF_IN[new]:--}"
    echo "pairs=$PAIRS"
    echo "runs=$RUNS"
    echo "submit_s=$SUBMIT_S"
    echo "pickups=$PICKUPS"
    echo "workers=$WORKERS"
    echo "fsync=$(sql 'SHOW fsync')"
    echo "synchronous_commit=$(sql 'SHOW synchronous_commit')"
    echo "server_version=$(sql 'SHOW server_version')"
    echo "cores=$(nproc)"
    echo "loadavg_start=$(cut -d' ' -f1-3 /proc/loadavg)"
} >"$OUT/ab-env.txt"

free_port() {
    local p
    while :; do
        p=$((20000 + RANDOM % 10000))
        ss -Htln "sport = :$p" 2>/dev/null | grep . >/dev/null || { echo "$p"; return; }
    done
}

# The loadgen command of a measurement: NAME URL DB.
loadgen() {
    case "$1" in
    single) build/opsrun_loadgen throughput "$2" "$3" "$RUNS" 64 ;;
    bulk) build/opsrun_loadgen bulk "$2" "$3" "$RUNS" 4 1000 ;;
    submit) build/opsrun_loadgen wrk "$2" "$3" "$SUBMIT_S" 64 ;;
    pickup) build/opsrun_loadgen pickup "$2" "$3" "$PICKUPS" ;;
    esac
}

# ready URL: waits (0.1 s a try, at most 30 s) for URL/readyz of the server
# PID; 1 at once when the server has exited.
ready() {
    local i
    for ((i = 0; i < 300; i++)); do
        curl -sf "$1/readyz" >/dev/null && return 0
        kill -0 "$PID" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

# measure NAME SIDE TAG: a fresh database, SIDE's server on it, NAME's load;
# the figures go to bench/out/ab-TAG-SIDE-NAME.txt. 1 when it failed.
measure() {
    local name=$1 side=$2 tag=$3 db url port out rc=0
    out=$OUT/ab-$tag-$side-$name.txt
    db=$(bench_db "$DATA" "ab_${tag}_${side}_$name" 2>>"$LOG") || return 1
    port=$(free_port)
    url=http://127.0.0.1:$port
    echo "-- $tag $side $name" >>"$OUT/ab-serve.log"
    "${BIN[$side]}" serve --config "$DATA/$side.json" --database-url "$db" \
        --listen "127.0.0.1:$port" --workers "$WORKERS" --log-level warn 2>>"$OUT/ab-serve.log" &
    PID=$!
    if ! ready "$url"; then
        echo "   $side: the server did not get ready (see $OUT/ab-serve.log)" | tee -a "$LOG"
        rc=1
    else
        sleep 1
        loadgen "$name" "$url" "$db" >"$out" 2>>"$LOG" || rc=1
        kill -0 "$PID" 2>/dev/null || rc=1
        echo "loadavg=$(cut -d' ' -f1 /proc/loadavg)" >>"$out"
    fi
    stop
    sql "DROP DATABASE \"ab_${tag}_${side}_$name\" WITH (FORCE)"
    sql "CHECKPOINT"
    return "$rc"
}

# The figures of the table: measurement, key in its output, what it is.
FIGURES=(
    "single runs_per_s end to end, single submissions ($RUNS runs, 64 clients), runs/s"
    "bulk bulk_runs_per_s end to end, arrays of 1,000 ($RUNS runs, 4 connections), runs/s"
    "submit submit_per_s HTTP submissions (64 connections, $SUBMIT_S s), requests/s"
    "submit submit_p50_ms HTTP submission p50, ms"
    "submit submit_p99_ms HTTP submission p99, ms"
    "pickup pickup_p50_ms pickup p50 (started_at - created_at, $PICKUPS runs), ms"
    "pickup pickup_p99_ms pickup p99, ms"
)

get() { if [ -f "$1" ]; then awk -F= -v k="$2" '$1 == k {v = $2} END {print v}' "$1"; fi; }
# figures NAME FILE: the table's figures of measurement NAME in FILE, on one line.
figures() {
    local f m key
    for f in "${FIGURES[@]}"; do
        read -r m key _ <<<"$f"
        if [ "$m" = "$1" ]; then printf '%s=%s ' "$key" "$(get "$2" "$key")"; fi
    done
}

# ---------------------------------------------------------------- pairs
FAILED=()
# A short load on each build first, not counted: the binaries and the
# cluster's caches are warm before the first pair.
say "warm-up: 1,280 runs on each build, not counted"
for side in old new; do
    RUNS=1280 measure single "$side" warmup || FAILED+=("warm-up $side")
done
for ((p = 1; p <= PAIRS; p++)); do
    order=(old new)
    ((p % 2)) || order=(new old)
    for m in $MEASURES; do
        say "pair $p: $m (${order[0]}, then ${order[1]})"
        for side in "${order[@]}"; do
            t0=$SECONDS
            if measure "$m" "$side" "p$p"; then
                echo "   $side: $(figures "$m" "$OUT/ab-p$p-$side-$m.txt")($((SECONDS - t0)) s," \
                    "load $(get "$OUT/ab-p$p-$side-$m.txt" loadavg))" |
                    tee -a "$LOG"
            else
                FAILED+=("pair $p $side $m")
                echo "   $side: $m failed (see $OUT/ab-p$p-$side-$m.txt and $LOG)" | tee -a "$LOG"
            fi
        done
    done
done
echo "loadavg_end=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/ab-env.txt"

# ---------------------------------------------------------------- table
# stats VALUES...: "median min max" (n/a when there is none)
stats() {
    printf '%s\n' "$@" | awk 'NF' | sort -g | awk '{v[NR] = $1}
        END { if (!NR) { print "n/a n/a n/a"; exit }
              m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
              print m, v[1], v[NR] }'
}
fmt() { awk -v v="$1" 'BEGIN { if (v == "n/a") print v; else if (v >= 100) printf "%.0f", v; else printf "%.2f", v }'; }
TABLE=$OUT/ab-table.md
{
    echo "| measure | OLD ${LABEL[old]} | NEW ${LABEL[new]} | NEW ÷ OLD | range of the pairs |"
    echo "|---|---:|---:|---:|---|"
} >"$TABLE"
for f in "${FIGURES[@]}"; do
    read -r m key what <<<"$f"
    [[ " $MEASURES " == *" $m "* ]] || continue
    olds=() news=() ratios=()
    for ((p = 1; p <= PAIRS; p++)); do
        o="" n=""
        [[ " ${FAILED[*]} " == *" pair $p old $m "* ]] || o=$(get "$OUT/ab-p$p-old-$m.txt" "$key")
        [[ " ${FAILED[*]} " == *" pair $p new $m "* ]] || n=$(get "$OUT/ab-p$p-new-$m.txt" "$key")
        olds+=("$o")
        news+=("$n")
        if [ -n "$o" ] && [ -n "$n" ]; then
            ratios+=("$(awk -v o="$o" -v n="$n" 'BEGIN { if (o > 0) printf "%.4f", n / o }')")
        fi
    done
    read -r om _ _ <<<"$(stats "${olds[@]}")"
    read -r nm _ _ <<<"$(stats "${news[@]}")"
    read -r rmed rlo rhi <<<"$(stats "${ratios[@]}")"
    {
        echo "${key}_old_median=$om"
        echo "${key}_new_median=$nm"
        echo "${key}_ratio_median=$rmed"
        echo "${key}_ratio_min=$rlo"
        echo "${key}_ratio_max=$rhi"
        echo "${key}_pairs=$(printf '%s\n' "${ratios[@]}" | awk 'NF' | wc -l)"
    } >>"$OUT/ab-summary.txt"
    range=n/a
    [ "$rlo" = n/a ] || range="$(awk -v v="$rlo" 'BEGIN { printf "%.2f", v }')–$(awk -v v="$rhi" 'BEGIN { printf "%.2f", v }')"
    ratio=$rmed
    [ "$rmed" = n/a ] || ratio=$(awk -v v="$rmed" 'BEGIN { printf "%.2f", v }')
    echo "| $what | $(fmt "$om") | $(fmt "$nm") | $ratio | $range |" >>"$TABLE"
done

# The 1-minute load average at the end of each measurement: its range.
read -r _ llo lhi <<<"$(stats "$(cat "$OUT"/ab-p[0-9]*-*.txt 2>/dev/null | sed -n 's/^loadavg=//p')")"
echo "loadavg_measurements=$llo-$lhi" >>"$OUT/ab-env.txt"
echo
echo "== bench/ab.sh ${LABEL[old]} ${LABEL[new]}: PAIRS=$PAIRS, $WORKERS workers; $(nproc) cores," \
    "load average $llo to $lhi (1 min, at the end of each measurement); fsync $(get "$OUT/ab-env.txt" fsync)"
[ -z "${CONF_IN[old]}${CONF_IN[new]}" ] ||
    echo "   configuration: OLD ${CONF_IN[old]:-none}, NEW ${CONF_IN[new]:-none} (merged over the script's)"
cat "$TABLE"
echo "(NEW ÷ OLD is the median of the per-pair ratios: above 1 is better for /s, worse for ms)"
if ((${#FAILED[@]})); then
    echo "ab.sh: failed: $(printf '%s, ' "${FAILED[@]}" | sed 's/, $//')" >&2
    exit 1
fi
