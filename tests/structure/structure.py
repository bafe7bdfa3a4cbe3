#!/usr/bin/env python3
# tests/structure/structure.py — the structure of the code, read from the
# object files of a build: which file uses which.
#
# Usage: structure.py --source DIR [--nm NM] OBJECT...
#
# The objects are those of opsrun's libraries and of server/main.c (ctest
# passes them, tests/CMakeLists.txt). A file A uses a file B when A's object
# has an undefined symbol that B's object defines: a function A calls, or an
# object A reads (nm's U against T, D, B, R). A room is a folder (engine/ and
# engine/actions/ are two). Two checks, each listing everything it finds:
#
# 1. No circle. A strongly connected component of more than one file (A uses
#    B, and B, through any path, uses A) fails, and so does one of more than
#    one room, unless it is named, with its reason, in a comment of a header
#    of its room (of one of its rooms, for rooms):
#
#        circle: a.c b.c — why these two call each other
#        circle: engine/ live/ — why these two rooms call each other
#
#    Files are named relative to their room, rooms by their path with a
#    final "/". The names must be exactly the component's, so a circle that
#    grows is reported again; the reason after "—" (or "--") may not be
#    empty. A named circle that no longer exists fails too, so the headers
#    stay true.
#
# 2. A header is named after its source. Every symbol a source defines and
#    a header declares must be declared in the header of the same name
#    (foo.h or foo_internal.h for foo.c), or in a header whose first comment
#    names the source (foo_bar.c): a module split into several sources keeps
#    one header and says there which source holds what.
#
# 3. Third-party headers stay behind their walls (WALLS below): microhttpd.h
#    only in server/http_mhd.c, OpenSSL's only in common/digest.c,
#    libpq-fe.h only in store/, libcurl's and libxml2's only where they are
#    linked.
#
# Exit status 0 when all hold, 1 when one fails, 2 on a usage error.
import argparse
import os
import re
import subprocess
import sys
from collections import defaultdict

# Folders of the product's code, longest first so engine/actions/ wins.
ROOMS = ["engine/actions", "common", "config", "store", "live", "engine", "handlers", "server",
         "client"]
# Symbols of the toolchain, never ours.
FOREIGN = re.compile(r"^(__asan|__odr_asan|__ubsan|__sanitizer|__gcov|__llvm|_GLOBAL_)")
# A third-party header (a prefix of what #include <...> names) and the only
# paths (a file, or a folder ending in "/") that may include it.
WALLS = {
    "microhttpd.h": ("server/http_mhd.c",),
    "openssl/": ("common/digest.c",),
    "libpq-fe.h": ("store/",),
    "curl/": ("engine/", "client/api.c", "server/main.c"),
    "libxml/": ("engine/actions/", "server/main.c"),
}
# "circle: a.c b.c — reason" at the start of a line of a comment.
CIRCLE = re.compile(r"^[ \t]*circle:[ \t]*(?P<names>[^\n—]*?)[ \t]*(?:—|--)[ \t]*(?P<why>[^\n]*)",
                    flags=re.M)


def room_of(path):
    """The room of a source path ("engine/actions/http.c"), or None."""
    for room in ROOMS:
        if path.startswith(room + "/") and "/" not in path[len(room) + 1:]:
            return room
    return None


def source_of(obj, rooms_by_dir):
    """The source an object was built from, relative to the source root:
    CMake puts it at CMakeFiles/<target>.dir/<source path>.o. A generated
    source (at the build tree's root) is given the room of its target's
    other objects: store/migrations_gen.c."""
    m = re.search(r"/CMakeFiles/([^/]+)\.dir/(.+)\.o$", obj)
    if not m:
        sys.exit(f"structure.py: {obj}: not an object of a CMake target")
    target_dir, rel = obj[: m.start(2)], m.group(2)
    if room_of(rel) is None and "/" not in rel:
        room = rooms_by_dir.get(target_dir)
        if room:
            return f"{room}/{rel}"
    return rel


def read_symbols(nm, objs):
    """defined[file], used[file]: the global symbols of each object."""
    defined, used = defaultdict(set), defaultdict(set)
    rooms_by_dir = {}
    for obj in objs:
        m = re.search(r"^(.*/CMakeFiles/[^/]+\.dir/)(.+)\.o$", obj)
        if m and room_of(m.group(2)):
            rooms_by_dir[m.group(1)] = room_of(m.group(2))
    sources = {obj: source_of(obj, rooms_by_dir) for obj in objs}
    out = subprocess.run([nm, "-A", "-P", "--no-sort"] + objs, check=True, capture_output=True,
                         text=True).stdout
    for line in out.splitlines():
        obj, _, rest = line.partition(": ")
        parts = rest.split()
        if obj not in sources or len(parts) < 2 or FOREIGN.match(parts[0]):
            continue
        name, kind = parts[0], parts[1]
        if kind == "U":
            used[sources[obj]].add(name)
        elif kind in "TDBRGSCVWui":  # lower case: local, but for u and i
            defined[sources[obj]].add(name)
    return defined, used


def edges_of(defined, used):
    """edges[a][b]: the symbols file a uses that file b defines."""
    owner = {}
    for f, syms in defined.items():
        for s in syms:
            owner[s] = f
    edges = defaultdict(lambda: defaultdict(set))
    for f, syms in used.items():
        for s in syms:
            g = owner.get(s)
            if g and g != f:
                edges[f][g].add(s)
    return edges


def components(nodes, succ):
    """Strongly connected components (Tarjan, iterative), of more than one
    node, each sorted, in a stable order."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = 0
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(succ.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(succ.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return sorted(out)


def strip_comments(text):
    return re.sub(r"/\*.*?\*/|//[^\n]*", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text,
                  flags=re.S)


def first_comment(text):
    m = re.match(r"\s*/\*(.*?)\*/", text, flags=re.S)
    return m.group(1) if m else ""


def headers_of(source):
    """Every header of the rooms: path -> text."""
    out = {}
    for room in ROOMS:
        d = os.path.join(source, room)
        for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            if name.endswith(".h"):
                with open(os.path.join(d, name), encoding="utf-8") as f:
                    out[f"{room}/{name}"] = f.read()
    return out


def named_circles(headers):
    """frozenset of names -> (header, reason): the circles the headers name,
    and the malformed ones. A name is a file of the header's room ("a.c"),
    a file by its path ("store/b.c"), or a room ("engine/")."""
    named, bad = {}, []
    for path, text in headers.items():
        room = os.path.dirname(path)
        for body in re.findall(r"/\*(.*?)\*/", text, flags=re.S):
            body = re.sub(r"(?m)^[ \t]*/?\*+/?", "", body)
            for m in CIRCLE.finditer(body):
                names = m.group("names").split()
                why = m.group("why").strip()
                if len(names) < 2 or not why:
                    bad.append(f"{path}: a circle needs two names or more and a reason: "
                               f"\"{m.group(0).strip()}\"")
                    continue
                full = frozenset(n if "/" in n else f"{room}/{n}" for n in names)
                named[full] = (path, why)
    return named, bad


def declarations(text):
    """The header's text without comments, preprocessor lines (macro bodies
    call functions they do not declare) and the bodies of inline
    functions."""
    text = strip_comments(text)
    text = re.sub(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", "", text, flags=re.M)
    out, depth, i = [], 0, 0
    while i < len(text):
        c = text[i]
        if c == "{" and (depth or re.search(r"\)\s*$", "".join(out[-200:]))):
            depth += 1
        elif c == "}" and depth:
            depth -= 1
        elif not depth:
            out.append(c)
        i += 1
    return "".join(out)


def check_circles(edges, files, headers):
    named, failures = named_circles(headers)
    seen = set()
    succ = {f: set(edges[f]) for f in files}
    rooms = {f: (room_of(f) or os.path.dirname(f)) for f in files}
    for comp in components(files, succ):
        key = frozenset(comp)
        seen.add(key)
        in_rooms = sorted({rooms[f] for f in comp})
        if key in named and os.path.dirname(named[key][0]) in in_rooms:
            continue
        where = " ".join(r + "/" for r in in_rooms)
        lines = [f"a circle of {len(comp)} files in {where}, named in no header of "
                 f"{'its' if len(in_rooms) == 1 else 'their'} room:"]
        for a in comp:
            for b in sorted(edges[a]):
                if b in key:
                    lines.append(f"    {a} -> {b}: {', '.join(sorted(edges[a][b]))}")
        failures.append("\n".join(lines))

    rsucc, rwhy = defaultdict(set), defaultdict(lambda: defaultdict(set))
    for a in files:
        for b in edges[a]:
            if rooms[a] != rooms[b]:
                rsucc[rooms[a]].add(rooms[b])
                rwhy[rooms[a]][rooms[b]].add(f"{a} -> {b}")
    for comp in components(set(rooms.values()), rsucc):
        key = frozenset(r + "/" for r in comp)
        seen.add(key)
        if key in named and os.path.dirname(named[key][0]) in comp:
            continue
        lines = [f"a circle of rooms {' '.join(r + '/' for r in comp)}, named in no header of "
                 "theirs:"]
        for a in comp:
            for b in sorted(rsucc[a]):
                if b in comp:
                    lines.append(f"    {a}/ -> {b}/: {', '.join(sorted(rwhy[a][b]))}")
        failures.append("\n".join(lines))

    for key, (path, why) in sorted(named.items(), key=lambda kv: kv[1][0]):
        if key not in seen:
            failures.append(f"{path} names a circle that is not there (any more): "
                            f"{' '.join(sorted(key))} — {why}")
    return failures


def declared_names(text):
    """The functions (name followed by "(") and the objects (extern ...
    name;) a header's declarations name."""
    text = declarations(text)
    # A name before "(" that follows enum, struct or union is a return type
    # ("enum sse_read (*read)(...)"), not what is declared.
    names = set(re.findall(r"(?<![\w.>])(?<!enum )(?<!struct )(?<!union )([A-Za-z_]\w*)\s*\(",
                           text))
    for decl in re.findall(r"\bextern\b[^;{}]*;", text):
        names.update(re.findall(r"([A-Za-z_]\w*)\s*(?:\[[^\]]*\])?\s*(?:,|;)", decl))
    return names


def check_headers(defined, headers):
    failures = []
    declares = defaultdict(list)
    for path, text in headers.items():
        for name in declared_names(text):
            declares[name].append(path)
    firsts = {path: first_comment(text) for path, text in headers.items()}
    for src in sorted(defined):
        stem = os.path.splitext(os.path.basename(src))[0]
        base = os.path.basename(src)
        room = os.path.dirname(src)
        named = re.compile(r"(?:(?<![\w/])|(?<=(?<![\w/])" + re.escape(room) + r"/))" +
                           re.escape(base) + r"\b")
        for sym in sorted(defined[src]):
            for path in sorted(declares.get(sym, ())):
                hstem = re.sub(r"_internal$", "", os.path.splitext(os.path.basename(path))[0])
                if hstem == stem or named.search(firsts[path]):
                    continue
                failures.append(f"{path} declares {sym}, which {src} defines: name the header "
                                f"after its source, or name {base} in the header's first comment")
    return failures


def check_walls(source):
    failures = []
    for room in ROOMS:
        d = os.path.join(source, room)
        for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            if not name.endswith((".c", ".h")):
                continue
            path = f"{room}/{name}"
            with open(os.path.join(d, name), encoding="utf-8") as f:
                included = re.findall(r"^\s*#\s*include\s*<([^>]+)>", f.read(), flags=re.M)
            for inc in included:
                for prefix, allowed in WALLS.items():
                    if inc.startswith(prefix) and not any(
                            path == a or (a.endswith("/") and path.startswith(a))
                            for a in allowed):
                        failures.append(f"{path} includes <{inc}>, which only "
                                        f"{', '.join(allowed)} may include")
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--nm", default="nm")
    ap.add_argument("objects", nargs="+")
    args = ap.parse_args()

    defined, used = read_symbols(args.nm, args.objects)
    files = sorted(set(defined) | set(used))
    edges = edges_of(defined, used)
    headers = headers_of(args.source)

    circles = check_circles(edges, files, headers)
    names = check_headers(defined, headers)
    walls = check_walls(args.source)
    nedges = sum(len(e) for e in edges.values())
    for f in circles + names + walls:
        print(f"structure: {f}")
    print(f"structure: {len(files)} files, {nedges} uses between them; "
          f"{len(circles)} circle problem(s), {len(names)} header problem(s), "
          f"{len(walls)} wall problem(s)")
    return 1 if circles or names or walls else 0


if __name__ == "__main__":
    sys.exit(main())
