# bench/lib.sh — what the benchmark scripts share; sourced by run.sh,
# streams.sh, poller.sh, all.sh, drain.sh, pgcost.sh, lateness.sh, bulk.sh,
# replicas.sh, profile.sh, lifecycle.sh, workflows.sh and the others from
# the repository's root.
#
#   bench_build [DEPS...] -- TARGETS...   installs missing packages (scripts/deps.sh,
#                                         plus DEPS) and builds TARGETS in build/ (Release)
#   bench_base_build REV                  builds opsrun (Release) of git revision REV once into
#                                         bench/out/base-<hash>/ and prints its path
#   bench_cluster DIR                     starts a private durable cluster in DIR/pg with
#                                         database bench; sets DB to its URL
#   bench_cluster_destroy DIR             stops and deletes it
#   bench_wait_ready URL [TRIES]          waits (0.1 s a try, default 100) for URL/readyz
#   bench_poller_types FAKE_URL           the rest_job run types of the poller benchmarks,
#                                         a JSON object's members ("job", "job_real")
#   bench_insert_waiting DB TYPE PREFIX COUNT POLL_COUNT SPREAD
#                                         COUNT runs of TYPE in 'waiting' (ids PREFIX-N), their
#                                         first checks due uniformly within SPREAD
# shellcheck shell=bash

bench_build() {
    local deps=()
    while (($#)) && [ "$1" != -- ]; do
        deps+=("$1")
        shift
    done
    [ "${1:-}" = -- ] && shift
    bash scripts/deps.sh "${deps[@]}"
    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DOPSRUN_TESTS=OFF >/dev/null
    cmake --build build -j2 --target "$@" >/dev/null
}

# The baseline of an alternated measurement: made from `git archive REV`,
# kept across runs.
bench_base_build() {
    local rev dir
    rev=$(git rev-parse --short "$1^{commit}")
    dir=bench/out/base-$rev
    if [ ! -x "$dir/opsrun" ]; then
        echo "== building $rev into $dir" >&2
        rm -rf "$dir"
        mkdir -p "$dir/src"
        git archive "$rev" | tar -x -C "$dir/src"
        cmake -S "$dir/src" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release -DOPSRUN_TESTS=OFF \
            -DOPSRUN_COMMIT="$rev" >/dev/null
        cmake --build "$dir/build" -j2 --target opsrun >/dev/null
        cp "$dir/build/opsrun" "$dir/opsrun"
        rm -rf "$dir/src" "$dir/build"
    fi
    echo "$dir/opsrun"
}

# A durable cluster (fsync on), as a user would run it.
# shellcheck disable=SC2034 # DB is for the caller
bench_cluster() {
    scripts/pg.sh start "$1/pg" --durable >/dev/null
    DB=$(bench_db "$1" bench)
}

# bench_db DIR NAME: a new database NAME in the cluster of bench_cluster
# DIR; prints its URL.
bench_db() {
    scripts/pg.sh createdb "$1/pg" "$2" >/dev/null
    scripts/pg.sh url "$1/pg" "$2"
}

bench_cluster_destroy() {
    scripts/pg.sh destroy "$1/pg" >/dev/null 2>&1 || true
}

bench_wait_ready() {
    local i
    for ((i = 0; i < ${2:-100}; i++)); do
        curl -sf "$1/readyz" >/dev/null && return 0
        sleep 0.1
    done
    curl -sf "$1/readyz" >/dev/null
}

# "job", checked every 50 ms (far more than any poller can do: its capacity),
# and "job_real", the default schedule (2 s doubling to 30 s, +-20 %); both
# submit to and check FAKE_URL (bench/pollbench.c).
bench_poller_types() {
    local reqs='"submit": {"method": "POST", "url": "'$1'/jobs"}, "id_pointer": "/id",
      "status": {"url": "'$1'/jobs/{{external_id}}", "timeout_ms": 5000},
      "state_pointer": "/state", "state_map": {"RUNNING": "running", "DONE": "succeeded"}'
    cat <<EOF
  "job": {"action": "rest_job",
   "poll": {"initial_delay_ms": 50, "max_delay_ms": 50, "jitter_pct": 0, "max_checks": 1000000,
            "max_duration_s": 86400, "check_timeout_s": 10},
   "params": {$reqs}},
  "job_real": {"action": "rest_job",
   "poll": {"initial_delay_ms": 2000, "multiplier": 2, "max_delay_ms": 30000, "jitter_pct": 20,
            "check_timeout_s": 10},
   "params": {$reqs}}
EOF
}

# Inserted with SQL once the server has migrated the database.
bench_insert_waiting() {
    psql -qAtX -v ON_ERROR_STOP=1 "$1" -c "INSERT INTO runs (tenant, id, type, status, attempt,
           max_attempts, timeout_s, input, identity_hash, request_hash, external_id, poll_state,
           poll_count, next_poll_at, poll_started_at, started_at)
         SELECT 'default', '$3-' || g, '$2', 'waiting', 1, 2, 900, '{}', '$3-ident-' || g, 'req',
           'job-' || g, '{}', $5, now() + random() * interval '$6', now(), now()
         FROM generate_series(1, $4) g"
}
