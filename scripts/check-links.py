#!/usr/bin/env python3
# scripts/check-links.py — every relative link of the Markdown files
# (README.md, docs/, bench/, deploy/) points at a file that exists and, when
# it names an anchor (#...), at a heading of that file that makes it, the way
# GitHub makes anchors: lower case, punctuation but "-" and "_" dropped,
# spaces to "-", a repeated heading numbered "-1", "-2"... Links to other
# sites are not followed (the tests run offline).
#
#   scripts/check-links.py [ROOT]      exit 1 and one line per broken link
import os
import re
import sys

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def slug(heading):
    """The anchor GitHub makes of a heading's text."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def outside_fences(path):
    """The lines of path that are not inside a fenced code block."""
    fenced = False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if FENCE.match(line):
                fenced = not fenced
                continue
            if not fenced:
                yield line


def anchors(path, cache={}):
    if path not in cache:
        seen, found = {}, set()
        for line in outside_fences(path):
            m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
            if not m:
                continue
            s = slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            found.add(s if n == 0 else f"{s}-{n}")
        for line in outside_fences(path):
            found.update(re.findall(r'<a (?:id|name)="([^"]+)"', line))
        cache[path] = found
    return cache[path]


def markdown_files(root):
    for top in ("README.md", "docs", "bench", "deploy"):
        p = os.path.join(root, top)
        if os.path.isfile(p):
            yield p
        for d, dirs, files in os.walk(p):
            dirs[:] = [x for x in dirs if x not in ("node_modules", "out")]
            yield from (os.path.join(d, f) for f in sorted(files) if f.endswith(".md"))


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    broken, count = [], 0
    for md in markdown_files(root):
        for line in outside_fences(md):
            line = re.sub(r"`[^`]*`", "", line)
            for target in LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                    continue  # http:, https:, mailto:
                count += 1
                path, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(md), path)) if path else md
                where = os.path.relpath(md, root)
                if not os.path.exists(dest):
                    broken.append(f"{where}: {target}: no file {os.path.relpath(dest, root)}")
                elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                    broken.append(f"{where}: {target}: no heading makes #{anchor}")
    for b in broken:
        print(b, file=sys.stderr)
    print(f"links: {count} relative links checked, {len(broken)} broken", file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
