#!/usr/bin/env python3
# tests/structure/selftest.py — structure.py's own test: each of its checks,
# on small made-up trees, finds what it must and passes what it may, so that
# the structure test of the real tree (which passes) cannot pass because a
# check finds nothing at all.
#
# Usage: selftest.py. Exit status 0 when every case holds.
import importlib.util
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("structure", os.path.join(HERE, "structure.py"))
st = importlib.util.module_from_spec(spec)
spec.loader.exec_module(st)

failed = []


def expect(name, cond, got):
    if not cond:
        failed.append(f"{name}: got {got!r}")


def circles(defined, used, headers):
    files = sorted(set(defined) | set(used))
    return st.check_circles(st.edges_of(defined, used), files, headers)


# Two files of engine/ that call each other; store/ beside them.
DEF = {"engine/a.c": {"a1"}, "engine/b.c": {"b1"}, "store/s.c": {"s1"}}
USE = {"engine/a.c": {"b1", "s1"}, "engine/b.c": {"a1"}}

got = circles(DEF, USE, {"engine/a.h": "/* engine/a.h — a. */\n"})
expect("an unnamed circle of files fails", len(got) == 1 and "engine/a.c -> engine/b.c: b1" in got[0]
       and "engine/b.c -> engine/a.c: a1" in got[0], got)

named = "/* engine/a.h — a.\n *\n * circle: a.c b.c — b hands a its callbacks\n */\n"
got = circles(DEF, USE, {"engine/a.h": named})
expect("a circle named with its reason passes", got == [], got)

got = circles(DEF, USE, {"store/s.h": named.replace("engine/a.h", "store/s.h")})
expect("a circle named in another room's header fails", len(got) == 2, got)

got = circles(DEF, USE, {"engine/a.h": named.replace(" — b hands a its callbacks", " —")})
expect("a circle without a reason fails", len(got) == 2 and "needs" in got[0], got)

got = circles(DEF, {"engine/a.c": {"b1"}}, {"engine/a.h": named})
expect("a named circle that is not there fails", len(got) == 1 and "not there" in got[0], got)

DEF3 = dict(DEF, **{"engine/c.c": {"c1"}})
USE3 = {"engine/a.c": {"b1"}, "engine/b.c": {"c1"}, "engine/c.c": {"a1"}}
got = circles(DEF3, USE3, {"engine/a.h": named})
expect("a named circle that grew fails", len(got) == 2 and "3 files" in got[0], got)

# Rooms: engine/ uses store/ and store/ uses engine/, through other files.
USE_R = {"engine/a.c": {"s1"}, "store/s.c": {"b1"}}
got = circles(DEF, USE_R, {})
expect("an unnamed circle of rooms fails", len(got) == 1 and "rooms engine/ store/" in got[0]
       and "engine/a.c -> store/s.c" in got[0] and "store/s.c -> engine/b.c" in got[0], got)

got = circles(DEF, USE_R, {"store/s.h": "/* store/s.h\n * circle: engine/ store/ -- why */\n"})
expect("a circle of rooms named in one of them passes", got == [], got)

# A file circle across rooms is a circle of rooms too.
USE_X = {"engine/a.c": {"s1"}, "store/s.c": {"a1"}}
got = circles(DEF, USE_X, {})
expect("a file circle across rooms fails twice", len(got) == 2, got)

# Headers named after their sources.
HDR = {
    "engine/a.h": "/* engine/a.h — a. */\nint a1(void);\nint b1(void);\n",
}
got = st.check_headers({"engine/a.c": {"a1"}, "engine/b.c": {"b1"}}, HDR)
expect("a header declaring another source's function fails",
       len(got) == 1 and "engine/a.h declares b1, which engine/b.c defines" in got[0], got)

HDR_OK = {"engine/a.h": "/* engine/a.h — a (a.c), and b1 (engine/b.c). */\nint a1(void);\n"
                        "int b1(void);\n"}
got = st.check_headers({"engine/a.c": {"a1"}, "engine/b.c": {"b1"}}, HDR_OK)
expect("a header whose first comment names the source passes", got == [], got)

HDR_INT = {"engine/a_internal.h": "/* engine/a_internal.h */\nextern const int a_table[];\n"}
got = st.check_headers({"engine/a.c": {"a_table"}}, HDR_INT)
expect("foo_internal.h may declare foo.c's objects", got == [], got)
got = st.check_headers({"engine/b.c": {"a_table"}}, HDR_INT)
expect("an extern object of another source is found", len(got) == 1, got)

HDR_FP = {"engine/a.h": "/* engine/a.h */\nstruct t { enum sse_read (*read)(void); };\n"
                        "static inline int a2(void) { return b1(); }\n"
                        "#define A3(x) b2(x)\nint a1(void); /* b3() */\n"}
got = st.check_headers({"engine/a.c": {"a1"}, "live/sse.c": {"sse_read"},
                        "engine/b.c": {"b1", "b2", "b3"}}, HDR_FP)
expect("return types, inline bodies, macros and comments declare nothing", got == [], got)

# Walls.
with tempfile.TemporaryDirectory() as root:
    for path, text in {"server/http_mhd.c": "#include <microhttpd.h>\n",
                       "server/http.c": "#include <microhttpd.h>\n",
                       "store/db.c": "#include <libpq-fe.h>\n",
                       "common/log.c": "#  include <openssl/evp.h>\n"}.items():
        os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
        with open(os.path.join(root, path), "w", encoding="utf-8") as f:
            f.write(text)
    got = st.check_walls(root)
expect("third-party headers outside their walls fail",
       len(got) == 2 and any("server/http.c includes <microhttpd.h>" in g for g in got)
       and any("common/log.c includes <openssl/evp.h>" in g for g in got), got)

for f in failed:
    print(f"selftest: FAILED {f}")
print(f"selftest: {len(failed)} failed")
sys.exit(1 if failed else 0)
