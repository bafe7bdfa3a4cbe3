#!/usr/bin/env bash
# deps.sh — installs the Debian 12 packages opsrun needs to build, test and
# serve, and any package named as an argument (test.sh: the test-only
# prometheus, for promtool, chromium, nodejs and npm, for the browser tests
# and the OpenAPI lint, prometheus-alertmanager, the receiver of the
# notification tests, pgbouncer, the pooler of the pooler test; test.sh
# --lint: clang-tidy).
# tzdata: the time zones of schedules (opsrun reads /usr/share/zoneinfo).
# Does nothing (quickly) when they are all present. Uses sudo when not
# root. Called by scripts/serve.sh and scripts/test.sh; safe to run by hand.
set -euo pipefail

readonly ME="deps.sh"
say() { printf '%s: %s\n' "$ME" "$*" >&2; }
die() {
    say "error: $*"
    exit 1
}

readonly PACKAGES=(
    build-essential cmake pkg-config
    libmicrohttpd-dev libpq-dev libjansson-dev libcurl4-openssl-dev libxml2-dev libssl-dev
    check valgrind clang-format
    postgresql curl ca-certificates tzdata
)

command -v dpkg-query >/dev/null || die "dpkg-query not found: this script supports Debian 12 (bookworm) only"

# A command already on PATH stands for its package: Node.js from NodeSource
# (one package with npm inside) conflicts with Debian's nodejs and npm.
provided_by_path() {
    case "$1" in
    nodejs) command -v node >/dev/null ;;
    npm) command -v npm >/dev/null ;;
    *) return 1 ;;
    esac
}

missing=()
for pkg in "${PACKAGES[@]}" "$@"; do
    provided_by_path "$pkg" && continue
    status="$(dpkg-query -W -f='${db:Status-Abbrev}' "$pkg" 2>/dev/null || true)"
    [[ "$status" == "ii "* ]] || missing+=("$pkg")
done

if ((${#missing[@]} == 0)); then
    exit 0
fi

say "installing missing packages: ${missing[*]}"
if [[ "$(id -u)" == 0 ]]; then
    SUDO=()
elif command -v sudo >/dev/null; then
    SUDO=(sudo)
else
    die "not root and sudo is not installed; as root run: apt-get update && apt-get install -y ${missing[*]}"
fi

# Wait (bounded) for another apt/dpkg run to release its locks.
APT_OPTS=(-o DPkg::Lock::Timeout=300 -q)
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${APT_OPTS[@]}" update ||
    die "apt-get update failed"
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${APT_OPTS[@]}" install -y \
    --no-install-recommends "${missing[@]}" ||
    die "apt-get install failed for: ${missing[*]}"

still=()
for pkg in "${missing[@]}"; do
    status="$(dpkg-query -W -f='${db:Status-Abbrev}' "$pkg" 2>/dev/null || true)"
    [[ "$status" == "ii "* ]] || still+=("$pkg")
done
((${#still[@]} == 0)) || die "still missing after install: ${still[*]}"
say "all packages installed"
