#!/usr/bin/env python3
# tests/docs/config_examples.py — every configuration example of README.md
# and docs/**/*.md, validated by `opsrun config check` as serve would.
#
# Which fenced code blocks are configuration examples:
#
#   ```json         Whole JSON, always: a block that does not parse fails.
#                   A JSON object whose top-level keys are all keys of the
#                   configuration file (those `opsrun --print-config` shows,
#                   but config_path and sources) is a configuration example:
#                   `opsrun config check` must accept it with no error and
#                   no warning. Anything else (a request, a response, a log
#                   line) is not checked further.
#   ```json excerpt A shortened example ("...", members left out) that is
#                   not JSON; it fails when it parses, and when its
#                   top-level keys (read leniently) are all configuration
#                   keys: a configuration example is whole, never an excerpt.
#   ```json not-config
#                   JSON that has only configuration keys at its top but is
#                   no configuration (GET /schedules' answer).
#   any other       Fails when it parses as a JSON object of configuration
#                   keys: a configuration example belongs in a json block.
#
# Each example's {{env:NAME}} references get NAME set (to
# https://example.invalid/NAME, which is valid wherever a placeholder may
# stand); every other OPSRUN_* variable is removed, so that the file alone
# decides. Failures are listed as file:line (the line of the opening
# fence) with check's messages; the exit status is 1 when any.
#
#   config_examples.py OPSRUN_BIN ROOT            README.md and docs/ of ROOT
#   config_examples.py OPSRUN_BIN --expect FILE.md
#       the checker's self-test: every block of FILE.md must fail, each
#       for the reason its preceding <!-- expect: TEXT --> line names.
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*(.*)$")
ENV_REF = re.compile(r"\{\{env:([A-Za-z_][A-Za-z0-9_]*)\}\}")
EXPECT = re.compile(r"^<!--\s*expect:\s*(.*?)\s*-->\s*$")
MARKERS = ("excerpt", "not-config")


def blocks(path):
    """(line of the opening fence, info string, body, expect) for each
    fenced block of path; expect is the text of an <!-- expect: --> line
    just above the fence, or None."""
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info, start = m.group(2), m.group(3).strip(), i
        prev = EXPECT.match(lines[i - 1]) if i > 0 else None
        j = i + 1
        while j < len(lines):
            c = FENCE.match(lines[j])
            if c and c.group(2)[0] == fence[0] and len(c.group(2)) >= len(fence) and not c.group(3).strip():
                break
            j += 1
        yield start + 1, info, "\n".join(lines[i + 1 : j]), prev.group(1) if prev else None
        i = j + 1


def lenient_keys(text):
    """The top-level keys of a JSON object that may be shortened ("...",
    {...}) or be its members without the braces ("run_types": {...})."""
    s = text.strip()
    depth = 0 if s.startswith("{") else 1
    keys, i = [], 0
    while i < len(s):
        ch = s[i]
        if ch == '"':
            j = i + 1
            while j < len(s) and s[j] != '"':
                j += 2 if s[j] == "\\" else 1
            word = s[i + 1 : j]
            k = j + 1
            while k < len(s) and s[k] in " \t\n":
                k += 1
            if depth == 1 and k < len(s) and s[k] == ":":
                keys.append(word)
            i = j + 1
            continue
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        i += 1
    return keys


def config_keys(binary):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPSRUN_")}
    out = subprocess.run([binary, "--print-config"], env=env, capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout)) - {"sources", "config_path"}


def is_config(value, keys):
    return isinstance(value, dict) and value and set(value) <= keys


def check(binary, text):
    """`opsrun config check` on text: its messages, "" when it is valid
    and warns of nothing."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPSRUN_")}
    for name in ENV_REF.findall(text):
        env[name] = "https://example.invalid/" + name
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        f.write(text)
    try:
        r = subprocess.run([binary, "config", "check", f.name], env=env, capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    if r.returncode == 0 and not r.stderr:
        return ""
    return (r.stderr.strip() or "exit status %d" % r.returncode).replace(f.name, "<example>")


def judge(binary, keys, info, body):
    """(is a configuration example, the failure or "") of one block."""
    words = info.split()
    lang, marks = (words[0] if words else ""), words[1:]
    try:
        value, parse_error = json.loads(body), None
    except ValueError as e:
        value, parse_error = None, str(e)
    if lang != "json":
        if parse_error is None and is_config(value, keys):
            return False, "a configuration outside a ```json block"
        return False, ""
    if any(m not in MARKERS for m in marks) or len(marks) > 1:
        return False, "unknown marker %r (```json, ```json excerpt or ```json not-config)" % info
    if marks == ["not-config"]:
        return False, ""
    if marks == ["excerpt"]:
        if parse_error is None:
            return False, "an excerpt that is whole JSON: drop the marker excerpt"
        found = lenient_keys(body)
        if found and set(found) <= keys:
            return False, "a configuration example shortened (%s): make it whole" % ", ".join(found)
        return False, ""
    if parse_error is not None:
        return False, "not valid JSON (%s): make it whole, or mark it ```json excerpt" % parse_error
    if not is_config(value, keys):
        return False, ""
    return True, check(binary, body)


def run_docs(binary, root):
    keys = config_keys(binary)
    files = [os.path.join(root, "README.md")]
    files += sorted(glob.glob(os.path.join(root, "docs", "**", "*.md"), recursive=True))
    checked, failures = 0, []
    for path in files:
        rel = os.path.relpath(path, root)
        for line, info, body, _ in blocks(path):
            is_cfg, why = judge(binary, keys, info, body)
            checked += is_cfg
            if why:
                failures.append("%s:%d: %s" % (rel, line, why.replace("\n", "\n    ")))
    for f in failures:
        print(f)
    print("config examples: %d configuration examples in %d files checked, %d failed"
          % (checked, len(files), len(failures)))
    return 1 if failures or checked == 0 else 0


def run_expect(binary, path):
    """Every block of path must fail for the reason its <!-- expect: -->
    line names."""
    keys, wrong, n = config_keys(binary), [], 0
    for line, info, body, expect in blocks(path):
        n += 1
        _, why = judge(binary, keys, info, body)
        if expect is None:
            wrong.append("%s:%d: no <!-- expect: --> line above the block" % (path, line))
        elif not why:
            wrong.append("%s:%d: passed; expected a failure with %r" % (path, line, expect))
        elif expect not in why:
            wrong.append("%s:%d: failed with %r; expected %r" % (path, line, why, expect))
    for w in wrong:
        print(w)
    print("config examples self-test: %d blocks, %d not rejected as expected" % (n, len(wrong)))
    return 1 if wrong or n == 0 else 0


def main(argv):
    if len(argv) == 3:
        return run_docs(argv[1], argv[2])
    if len(argv) == 4 and argv[2] == "--expect":
        return run_expect(argv[1], argv[3])
    print("usage: config_examples.py OPSRUN_BIN ROOT | OPSRUN_BIN --expect FILE.md", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
