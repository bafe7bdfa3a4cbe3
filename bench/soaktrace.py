#!/usr/bin/env python3
"""bench/soaktrace.py — what happened while the pickups of a soak grew, from
the files `TRACE=1 bash bench/soak.sh` leaves in bench/out (PREFIX is
bench/out/soak, or the SOAK_TAG given):

  PREFIX-pickups.tsv  every run: created (epoch s), pickup (ms)
  PREFIX-trace.tsv    every 10 s: dead and live rows of runs, its vacuums and
                      analyzes so far, its index and heap MiB, and per engine
                      statement its calls and milliseconds so far
  PREFIX-pg.log       PostgreSQL's log: autovacuum and autoanalyze, lock
                      waits, statements over 100 ms, checkpoints
  PREFIX-serve.log    opsrun's: retention passes and partition steps
  PREFIX-indexes.tsv  every 10 s: the bytes of each index of runs

It prints, per minute of the soak, the pickups (p50, p99, max) beside what
the database did in that minute, and then which happenings the slowest
pickups fell into: for each kind of happening, the p99 of the pickups of
runs created while one was under way (or up to 2 s before it ended) and of
the others, from minute FROM_MINUTE on (default 1: leave the warm-up out
with a later one); and how each index of runs grew. Measured, not
guessed: a kind whose runs' p99 is no higher than the others' is not why
the p99 grows.

Usage: bench/soaktrace.py PREFIX [FROM_MINUTE]
"""
import bisect
import collections
import datetime
import re
import sys

SLACK_S = 2.0  # a run created this long before a happening may wait on it


def pct(v, p):
    if not v:
        return float("nan")
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))]


def epoch(stamp):
    """'2026-11-27 15:10:31.257 UTC' or '2026-11-27T15:10:31.257Z'."""
    stamp = stamp.replace(" UTC", "").replace("T", " ").replace("Z", "")
    return datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def pg_entries(path):
    """The log's entries (a line and its continuation lines): (time, text)."""
    head = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ UTC) \[\d+\] (.*)")
    cur = None
    with open(path, errors="replace") as f:
        for line in f:
            m = head.match(line)
            if m:
                if cur:
                    yield cur
                cur = [epoch(m.group(1)), m.group(2)]
            elif cur:
                cur[1] += " " + line.strip()
    if cur:
        yield cur


def happenings(prefix):
    """(kind, start, end) of every happening the logs name."""
    out = []
    for t, text in pg_entries(prefix + "-pg.log"):
        el = re.search(r"elapsed: ([\d.]+) s", text)
        elapsed = float(el.group(1)) if el else 0.0
        m = re.search(r"automatic (vacuum|analyze) of table \"[^\"]*\.([^\".]+)\"", text)
        if m:
            table = re.sub(r"^run_events_p\d.*", "run_events partition", m.group(2))
            table = "catalog" if table.startswith("pg_") else table
            out.append((f"auto{m.group(1)} {table}", t - elapsed, t))
            continue
        m = re.search(r"checkpoint complete:.*total=([\d.]+) s", text)
        if m:
            out.append(("checkpoint", t - float(m.group(1)), t))
            continue
        m = re.search(r"duration: ([\d.]+) ms\s+(?:statement|execute [^:]*):\s*(.*)", text)
        if m:
            stmt = re.sub(r"\s+", " ", m.group(2))[:40]
            out.append((f"slow: {stmt}", t - float(m.group(1)) / 1000, t))
            continue
        m = re.search(r"still waiting for (\w+) on (relation \d+|[a-z ]+)", text)
        if m:
            out.append((f"lock wait: {m.group(1)}", t - 0.1, t))
    with open(prefix + "-serve.log", errors="replace") as f:
        for line in f:
            m = re.match(r"(\S+) \w+\s+retention (deleted_runs|dropped|created)", line)
            if m:
                t = epoch(m.group(1))
                kind = {"deleted_runs": "retention pass", "dropped": "partition dropped",
                        "created": "partition created"}[m.group(2)]
                out.append((kind, t - 0.5, t))
    return out


def read_trace(prefix):
    """Per sample time: runs' figures, and per statement (calls, ms)."""
    rows = collections.OrderedDict()
    with open(prefix + "-trace.tsv") as f:
        next(f)
        for line in f:
            t, dead, live, vac, ana, idx, heap, name, calls, ms = line.split("\t")
            r = rows.setdefault(float(t), {"dead": int(dead), "live": int(live),
                                           "vacuums": int(vac), "analyzes": int(ana),
                                           "index_mib": float(idx), "heap_mib": float(heap)})
            r[name] = (int(calls), float(ms))
    return rows


def per_minute(picks, trace, events, t0):
    minutes = collections.defaultdict(list)
    for t, ms in picks:
        minutes[int((t - t0) // 60)].append(ms)
    times = list(trace)
    print("minute  runs  p50_ms  p99_ms  max_ms | claim_ms  submit_ms  finish_ms  prune_ms "
          "(per call) | runs: dead  vacuums  index_MiB  heap_MiB | in the minute")
    for m in sorted(minutes):
        v = minutes[m]
        a, b = t0 + 60 * m, t0 + 60 * (m + 1)
        i = bisect.bisect_left(times, a)
        j = bisect.bisect_left(times, b) - 1
        cells = []
        base = times[max(i - 1, 0)] if j > max(i - 1, 0) else None
        for name in ("claim", "submit", "finish", "prune"):
            if base is not None and name in trace[times[j]]:
                c1, ms1 = trace[times[j]][name]
                c0, ms0 = trace[base].get(name, (0, 0.0))
                cells.append(f"{(ms1 - ms0) / max(c1 - c0, 1):.3f}")
            else:
                cells.append("-")
        last = trace[times[j]] if 0 <= j < len(times) else {}
        kinds = collections.Counter(k.split(":")[0] if k.startswith(("slow", "lock")) else k
                                    for k, s, e in events if a <= e < b)
        print(f"{m + 1:>6} {len(v):>5} {pct(v, .5):7.2f} {pct(v, .99):7.1f} {max(v):7.0f} | "
              f"{cells[0]:>8} {cells[1]:>10} {cells[2]:>10} {cells[3]:>9} | "
              f"{last.get('dead', '-'):>10} {last.get('vacuums', '-'):>8} "
              f"{last.get('index_mib', '-'):>10} {last.get('heap_mib', '-'):>9} | "
              + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())))


def attribution(picks, events):
    by_kind = collections.defaultdict(list)
    for k, s, e in events:
        by_kind[k if not k.startswith("slow") else "slow statement"].append((s - SLACK_S, e))
    print(f"\nPickups of runs created during a happening (or up to {SLACK_S:.0f} s before it "
          "ended) against the others:")
    print("happening                        times  total_s   runs  p99_ms  others_p99_ms  "
          "share_of_worst_1%")
    worst = sorted(ms for _, ms in picks)[int(0.99 * len(picks)):] if picks else []
    cut = worst[0] if worst else float("inf")
    for kind, spans in sorted(by_kind.items()):
        spans.sort()
        starts = [s for s, _ in spans]
        inside, outside = [], []
        for t, ms in picks:
            i = bisect.bisect_right(starts, t) - 1
            hit = any(spans[k][0] <= t <= spans[k][1] for k in range(max(0, i - 3), i + 1))
            (inside if hit else outside).append(ms)
        share = sum(1 for ms in inside if ms >= cut) / max(len(worst), 1)
        total = sum(e - s - SLACK_S for s, e in spans)
        print(f"{kind[:32]:<32} {len(spans):>5} {total:8.1f} {len(inside):>6} "
              f"{pct(inside, .99):7.1f} {pct(outside, .99):14.1f} {100 * share:17.0f} %")


def index_growth(prefix, t0):
    """Each index's MiB at the end of every fifth minute."""
    sizes = collections.defaultdict(dict)
    with open(prefix + "-indexes.tsv") as f:
        for line in f:
            t, name, size = line.split("\t")
            sizes[name][int((float(t) - t0) // 60)] = int(size) / 1048576
    if not sizes:
        return
    last = max(max(v) for v in sizes.values())
    marks = sorted({m for m in range(0, last + 1, 5)} | {last})
    print("\nIndexes of runs, MiB at the end of minute " + ", ".join(str(m + 1) for m in marks))
    for name, v in sorted(sizes.items()):
        print(f"{name:<28} " + " ".join(f"{v.get(m, float('nan')):7.1f}" for m in marks))


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        sys.exit(2)
    prefix = sys.argv[1]
    from_minute = int(sys.argv[2]) if len(sys.argv) == 3 else 1
    with open(prefix + "-pickups.tsv") as f:
        picks = sorted((float(a), float(b)) for a, b in (line.split() for line in f if line.strip()))
    if not picks:
        sys.exit("soaktrace.py: no pickups in " + prefix + "-pickups.tsv")
    events = happenings(prefix)
    t0 = picks[0][0]
    per_minute(picks, read_trace(prefix), events, t0)
    start = t0 + 60 * (from_minute - 1)
    print(f"\nFrom minute {from_minute} on.", end="")
    attribution([p for p in picks if p[0] >= start], [e for e in events if e[2] >= start])
    index_growth(prefix, t0)


if __name__ == "__main__":
    main()
