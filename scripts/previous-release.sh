#!/usr/bin/env bash
# previous-release.sh — the binary a rolling upgrade to this checkout
# replaces: opsrun as it was just before the newest migration of this
# checkout was added. Every migration must work with the binary before it
# (docs/operations.md, "Upgrades"); tests/e2e/test_upgrade.c runs that
# binary and this checkout's side by side on one database while the new
# one migrates.
#
#   scripts/previous-release.sh commit           print the previous release's commit, then the
#                                                migrations this checkout adds to it, one a line
#   scripts/previous-release.sh build CACHE_DIR  build it unless CACHE_DIR/<commit>/opsrun is
#                                                there, and print that path
#
# "Previous" is found in the first-parent history of HEAD, which on main is
# main's own line (a merged branch counts as the merge commit): the commit
# that added the newest file of migrations/ (by name, the order migrations
# are applied in), and then its first parent. A newest migration not yet
# committed makes HEAD the previous release. So each new migration is
# checked against the binary that ran just before it, whichever branch
# brought it.
#
# The build is Debug (unoptimised: it compiles fastest, about 15 s on two
# cores) and only of opsrun, from `git archive` of that commit, in a
# temporary directory under CACHE_DIR; only the binary is kept. Builds of
# one commit are serialised by a lock (flock), so tests running at once
# share one.
#
# Exits 77 (a test's "skipped") with the reason on stderr when there is no
# previous release to find: the source is not a git checkout (a tarball, the
# container build), the clone is shallow, or no commit of HEAD's history
# added the newest migration.
set -euo pipefail

readonly ME="previous-release.sh"
say() { printf '%s: %s\n' "$ME" "$*" >&2; }
die() {
    say "error: $*"
    exit 1
}
skip() {
    say "$*"
    exit 77
}

ROOT="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)"

git_here() { git -C "$ROOT" "$@"; }

# The previous release's commit into PREV, the migrations it lacks into NEW.
find_previous() {
    local top newest added
    command -v git >/dev/null || skip "git is not installed: no previous release to build"
    top="$(git_here rev-parse --show-toplevel 2>/dev/null)" ||
        skip "$ROOT is not a git checkout (a source archive?): no history to find the previous release in"
    # A tree extracted inside another checkout (a build tree's copy) is not one.
    [[ "$(cd -- "$top" && pwd -P)" == "$ROOT" ]] ||
        skip "$ROOT is not a git checkout of its own (it lies inside $top)"
    [[ "$(git_here rev-parse --is-shallow-repository)" == false ]] ||
        skip "$ROOT is a shallow clone: fetch its history (git fetch --unshallow) to find the previous release"
    newest="$(cd -- "$ROOT/migrations" && find . -maxdepth 1 -name '*.sql' -printf '%f\n' | sort | tail -n 1)"
    [[ -n "$newest" ]] || die "no migration in $ROOT/migrations"
    if ! git_here cat-file -e "HEAD:migrations/$newest" 2>/dev/null; then
        PREV="$(git_here rev-parse HEAD)"
    else
        # -m: a migration merged in is added by the merge commit (diffed
        # against its first parent); Git before 2.31 needs it said.
        added="$(git_here log --first-parent -m --diff-filter=A --format=%H -1 HEAD -- "migrations/$newest")"
        [[ -n "$added" ]] || skip "no commit of HEAD's history added migrations/$newest"
        PREV="$(git_here rev-parse -q --verify "$added^1")" ||
            skip "migrations/$newest came with the first commit: there is no release before it"
    fi
    NEW="$(comm -13 <(git_here ls-tree --name-only "$PREV" migrations/ | sed 's|^migrations/||' |
        grep '\.sql$' | sort) <(cd -- "$ROOT/migrations" && find . -maxdepth 1 -name '*.sql' \
        -printf '%f\n' | sort))"
}

cmd_build() {
    local cache="$1" dir tmp log
    mkdir -p -- "$cache"
    cache="$(cd -- "$cache" && pwd -P)"
    dir="$cache/$PREV"
    exec 9>"$cache/$PREV.lock"
    flock 9
    if [[ ! -x "$dir/opsrun" ]]; then
        tmp="$(mktemp -d "$cache/build.XXXXXX")"
        # A build stopped half-way (TERM, INT) leaves nothing behind; the
        # path is expanded now, as $tmp is local and gone at exit.
        trap "rm -rf -- '$tmp'" EXIT
        trap 'exit 143' TERM
        trap 'exit 130' INT
        log="$cache/$PREV.build.log"
        say "building opsrun of $PREV (the previous release) into $dir"
        if ! {
            git_here archive "$PREV" | tar -x -C "$tmp" --one-top-level=src &&
                cmake -S "$tmp/src" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Debug -DOPSRUN_TESTS=OFF \
                    -DOPSRUN_COMMIT="$PREV" \
                    -DOPSRUN_BUILD_DATE="$(git_here log -1 --format=%cs "$PREV")" &&
                cmake --build "$tmp/build" -j 2 --target opsrun
        } >"$log" 2>&1; then
            tail -n 30 -- "$log" >&2
            rm -rf -- "$tmp"
            die "could not build $PREV (log: $log)"
        fi
        mkdir -p -- "$dir"
        cp -- "$tmp/build/opsrun" "$dir/opsrun.tmp"
        mv -- "$dir/opsrun.tmp" "$dir/opsrun"
        rm -rf -- "$tmp"
    fi
    printf '%s\n' "$dir/opsrun"
}

case "${1:-}" in
commit)
    find_previous
    printf '%s\n' "$PREV"
    [[ -z "$NEW" ]] || printf '%s\n' "$NEW"
    ;;
build)
    [[ -n "${2:-}" ]] || die "build: CACHE_DIR is required"
    find_previous
    cmd_build "$2"
    ;;
*)
    sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
