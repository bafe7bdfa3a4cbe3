#!/usr/bin/env bash
# check-deploy.sh — checks the deployment files of deploy/ with the tools
# this machine has, offline, in a few seconds. Exits non-zero on any failure;
# a check whose tool is missing is skipped and said so.
#
#   scripts/check-deploy.sh
#
# Needs python3 with the yaml module (python3-yaml). Uses, when present:
#   kubectl           `kubectl kustomize deploy/kubernetes` (no cluster)
#   docker-compose    `docker-compose config -q` (Debian's docker-compose,
#                     or `docker compose` where the plugin is installed)
#   systemd-analyze   `systemd-analyze verify` on a copy of the unit whose
#                     ExecStart is /bin/true, as the binary is not installed
#   OPSRUN_BIN        an opsrun binary (default build/opsrun) to check the
#                     example configurations with `opsrun config check`
# Not checked: the manifests against the Kubernetes API schemas (needs a
# cluster or kubeconform), and anything that runs the containers.
set -euo pipefail

readonly ME="check-deploy.sh"
say() { printf '%s: %s\n' "$ME" "$*" >&2; }

ROOT="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd -- "$ROOT"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/opsrun-check-deploy.XXXXXX")"
trap 'rm -rf -- "$TMP"' EXIT

failures=()
fail() {
    say "FAIL: $*"
    failures+=("$1")
}

python3 -c 'import yaml' 2>/dev/null || {
    say "error: python3 with the yaml module is needed (apt-get install python3-yaml)"
    exit 1
}

# ------------------------------------------------------------ kustomize
if command -v kubectl >/dev/null; then
    if kubectl kustomize deploy/kubernetes >"$TMP/kubernetes.yaml" 2>"$TMP/kustomize.err"; then
        say "kustomize: deploy/kubernetes builds"
    else
        cat "$TMP/kustomize.err" >&2
        fail "kustomize"
    fi
else
    say "skipped: kubectl kustomize (no kubectl); the manifests are checked one by one"
fi

# ------------------------------------------------------------ compose
compose=()
if docker compose version >/dev/null 2>&1; then
    compose=(docker compose)
elif command -v docker-compose >/dev/null; then
    compose=(docker-compose)
fi
if ((${#compose[@]})); then
    if OPSRUN_DB_PASSWORD=check "${compose[@]}" -f deploy/compose/docker-compose.yml config -q; then
        say "compose: ${compose[*]} config accepts deploy/compose/docker-compose.yml"
    else
        fail "compose config"
    fi
else
    say "skipped: compose config (neither docker compose nor docker-compose)"
fi

# ------------------------------------------------------------ systemd
if command -v systemd-analyze >/dev/null; then
    sed -e 's|^ExecStart=[^ ]*|ExecStart=/bin/true|' \
        -e 's|^EnvironmentFile=|EnvironmentFile=-|' \
        deploy/systemd/opsrun.service >"$TMP/opsrun.service"
    if systemd-analyze verify "$TMP/opsrun.service"; then
        say "systemd: opsrun.service verifies (ExecStart replaced by /bin/true)"
    else
        fail "systemd-analyze verify"
    fi
else
    say "skipped: systemd-analyze verify (no systemd-analyze)"
fi

# ------------------------------------------------------------ example configurations
BIN="${OPSRUN_BIN:-$ROOT/build/opsrun}"
if [[ -x "$BIN" ]]; then
    for f in deploy/compose/opsrun.example.json deploy/kubernetes/opsrun.json; do
        if env -u OPSRUN_CONFIG -u OPSRUN_LISTEN -u OPSRUN_WORKERS -u OPSRUN_LOG_LEVEL \
            -u OPSRUN_LOG_FORMAT -u OPSRUN_INSECURE_NO_AUTH \
            "$BIN" config check "$f" >/dev/null; then
            say "config: $f passes opsrun config check"
        else
            fail "config $f"
        fi
    done
else
    say "skipped: loading the example configurations (no $BIN; set OPSRUN_BIN)"
fi

# ------------------------------------------------------------ syntax and consistency
if python3 - "$TMP/kubernetes.yaml" <<'PY'; then
import glob, json, re, sys, yaml

errors = []
def check(cond, msg):
    if not cond:
        errors.append(msg)

docs = {}
for path in sorted(glob.glob("deploy/**/*.y*ml", recursive=True)):
    try:
        with open(path) as f:
            docs[path] = [d for d in yaml.safe_load_all(f) if d is not None]
    except yaml.YAMLError as e:
        errors.append(f"{path}: {e}")
for path in sorted(glob.glob("deploy/**/*.json", recursive=True)):
    try:
        with open(path) as f:
            json.load(f)
    except ValueError as e:
        errors.append(f"{path}: {e}")

def seconds(text):
    m = re.fullmatch(r"(\d+)(s?)", str(text))
    return int(m.group(1)) if m else None

with open("deploy/kubernetes/opsrun.json") as f:
    grace = json.load(f).get("queue", {}).get("shutdown_grace_s", 900)
with open("deploy/compose/opsrun.example.json") as f:
    check(json.load(f).get("queue", {}).get("shutdown_grace_s", 900) == grace,
          "the two example configurations differ in queue.shutdown_grace_s")

compose = docs.get("deploy/compose/docker-compose.yml", [{}])[0]
svc = compose.get("services", {})
db, op = svc.get("db", {}), svc.get("opsrun", {})
check(re.fullmatch(r"postgres:15(\.\d+)?-\w+", str(db.get("image", ""))),
      "compose: db is not a postgres:15.x image pinned by tag")
check("pg_isready" in " ".join(db.get("healthcheck", {}).get("test", [])),
      "compose: db has no pg_isready healthcheck")
check(any(v.endswith(":/var/lib/postgresql/data") and not v.startswith(("/", "."))
          for v in db.get("volumes", [])), "compose: the database is not on a named volume")
check(op.get("healthcheck", {}).get("test") == ["CMD", "opsrun", "health"],
      "compose: opsrun's healthcheck is not `opsrun health`")
check(op.get("depends_on", {}).get("db", {}).get("condition") == "service_healthy",
      "compose: opsrun does not wait for a healthy db")
env = op.get("environment", {})
check("OPSRUN_DATABASE_URL" in env and "OPSRUN_CONFIG" in env,
      "compose: OPSRUN_DATABASE_URL or OPSRUN_CONFIG missing")
stop = seconds(op.get("stop_grace_period"))
check(stop is not None and stop > grace,
      f"compose: stop_grace_period {op.get('stop_grace_period')} not above shutdown_grace_s {grace}")

k8s = yaml.safe_load_all(open(sys.argv[1])) if glob.glob(sys.argv[1]) else []
objs = [o for o in k8s if o] or [d for p, ds in docs.items() if p.startswith("deploy/kubernetes/")
                                 for d in ds if "kind" in d and d["kind"] != "Kustomization"]
kinds = {o["kind"]: o for o in objs}
for kind in ("Deployment", "Service", "PodDisruptionBudget", "Secret", "ConfigMap"):
    check(kind in kinds or kind == "ConfigMap" and not glob.glob(sys.argv[1]),
          f"kubernetes: no {kind}")
dep = kinds.get("Deployment", {})
spec = dep.get("spec", {})
pod = spec.get("template", {}).get("spec", {})
c = (pod.get("containers") or [{}])[0]
check(spec.get("replicas") == 3, "kubernetes: replicas is not 3")
check(c.get("livenessProbe", {}).get("httpGet", {}).get("path") == "/livez",
      "kubernetes: liveness probe not on /livez")
check(c.get("readinessProbe", {}).get("httpGet", {}).get("path") == "/readyz",
      "kubernetes: readiness probe not on /readyz")
tgp = pod.get("terminationGracePeriodSeconds", 0)
check(tgp > grace, f"kubernetes: terminationGracePeriodSeconds {tgp} not above {grace}")
with open("Dockerfile") as f:
    dockerfile = f.read()
uid = re.search(r"^USER (\d+)", dockerfile, re.M).group(1)
# The Dockerfile: every base image pinned by a digest (directly, or through
# an ARG whose default is), and tini as process 1 in front of opsrun.
args = dict(re.findall(r"^ARG (\w+)=(\S+)", dockerfile, re.M))
for image in re.findall(r"^FROM (?:--\S+ )*(\S+)", dockerfile, re.M):
    image = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), image)
    check(re.search(r"@sha256:[0-9a-f]{64}$", image),
          f"Dockerfile: base image {image} is not pinned by digest")
entry = re.search(r"^ENTRYPOINT (.*)$", dockerfile, re.M)
check(entry and entry.group(1).replace(" ", "") == '["/usr/bin/tini","--","opsrun"]',
      "Dockerfile: the entry point is not tini -- opsrun")
check(re.search(r"apt-get install[^\n]*(?:\\\n[^\n]*)*\btini\b", dockerfile),
      "Dockerfile: tini is not installed")
check(str(pod.get("securityContext", {}).get("runAsUser")) == uid,
      f"kubernetes: runAsUser is not the Dockerfile's {uid}")
check(c.get("securityContext", {}).get("readOnlyRootFilesystem") is True,
      "kubernetes: the root filesystem is writable")
check(c.get("resources", {}).get("requests"), "kubernetes: no resource requests")
pdb = kinds.get("PodDisruptionBudget", {}).get("spec", {})
check(pdb.get("minAvailable") == 2, "kubernetes: PodDisruptionBudget minAvailable is not 2")
labels = spec.get("template", {}).get("metadata", {}).get("labels", {})
for kind in ("Service", "PodDisruptionBudget"):
    sel = kinds.get(kind, {}).get("spec", {}).get("selector", {})
    sel = sel.get("matchLabels", sel)
    check(sel and all(labels.get(k) == v for k, v in sel.items()),
          f"kubernetes: the {kind}'s selector does not match the pods")

with open("deploy/systemd/opsrun.service") as f:
    unit = dict(l.split("=", 1) for l in f.read().splitlines() if "=" in l and not l.startswith("#"))
stop = seconds(unit.get("TimeoutStopSec", ""))
check(stop is not None and stop > grace,
      f"systemd: TimeoutStopSec {unit.get('TimeoutStopSec')} not above shutdown_grace_s {grace}")
check(unit.get("KillSignal") == "SIGTERM", "systemd: KillSignal is not SIGTERM")

for e in errors:
    print(f"check-deploy.sh: FAIL: {e}", file=sys.stderr)
if errors:
    sys.exit(1)
print(f"check-deploy.sh: {sum(map(len, docs.values()))} YAML documents in "
      f"{len(docs)} files parse; compose, kubernetes and systemd agree with "
      f"a {grace} s grace period", file=sys.stderr)
PY
    :
else
    failures+=("syntax and consistency")
fi

if ((${#failures[@]})); then
    say "FAILED: ${failures[*]}"
    exit 1
fi
say "all checks passed"
