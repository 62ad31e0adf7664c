#!/usr/bin/env bash
# The library's non-test lines: every line of src/ (blank and comment lines included) less the
# test code, the figure the house rules count when code is removed or moved.
#
#   scripts/src-lines.sh [REVISION]
#
# Without a revision it counts the working tree's src/; with one, that revision's src/ (read
# through git, nothing checked out). Test code is what the compiler leaves out of the library:
# files named tests.rs, files declared by a `#[cfg(test)] mod name;`, and every item marked
# `#[cfg(test)]` wherever it stands (a `mod tests { .. }` block, a helper, a `use` line), cut
# from its attribute to the item's closing brace or semicolon with brackets in strings,
# characters and comments not counted. Prints the lines and, beside them, the lines that are
# neither blank nor only a comment.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
rev=${1:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -n "$rev" ]; then
    git -C "$here" archive "$rev" src | tar -x -C "$tmp"
else
    cp -r "$here/src" "$tmp/src"
fi

python3 - "$tmp/src" <<'EOF'
import os
import re
import sys

ATTR = "#[cfg(test)]"


def item_len(code):
    """Length of the item that starts `code` (after its #[cfg(test)]): up to the `;` or the
    closing bracket at its own depth, skipping strings, raw strings, characters and comments;
    it also ends before a bracket it did not open (an attribute on a struct's last field)."""
    i, depth, n = 0, 0, len(code)
    while i < n:
        c = code[i]
        if code.startswith("//", i):
            j = code.find("\n", i)
            i = n if j < 0 else j
            continue
        if code.startswith("/*", i):
            j = code.find("*/", i + 2)
            i = n if j < 0 else j + 2
            continue
        m = re.match(r'b?r(#*)"', code[i:]) if c in "br" else None
        if m and (i == 0 or not (code[i - 1].isalnum() or code[i - 1] == "_")):
            close = '"' + m.group(1)
            j = code.find(close, i + m.end())
            i = n if j < 0 else j + len(close)
            continue
        if c == '"':
            i += 1
            while i < n and code[i] != '"':
                i += 2 if code[i] == "\\" else 1
            i += 1
            continue
        if c == "'":
            m = re.match(r"'(\\(x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]*\}|.)|[^\\'])'", code[i:])
            if m:
                i += m.end()
                continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                return i
            depth -= 1
            if depth == 0 and c == "}":
                return i + 1
        elif c == ";" and depth == 0:
            return i + 1
        i += 1
    return n


def library_code(text):
    """The text with every #[cfg(test)] item cut, and the files its `mod name;` items name."""
    kept, rest, test_mods = [], text, []
    while True:
        i = rest.find(ATTR)
        if i < 0:
            break
        kept.append(rest[:i])
        rest = rest[i + len(ATTR):]
        so_far = "".join(kept)
        line = so_far[so_far.rfind("\n") + 1:]
        if line.strip():
            kept.append(ATTR)
            continue
        n = item_len(rest)
        item = rest[:n]
        m = re.search(r"^\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", item)
        if m and "#[path" not in item:
            test_mods.append(m.group(1))
        rest = rest[n:]
    kept.append(rest)
    return "".join(kept), test_mods


def child_dir(path):
    base = os.path.basename(path)
    if base in ("mod.rs", "lib.rs", "main.rs"):
        return os.path.dirname(path)
    return path[:-3]


root = sys.argv[1]
files = []
for d, _, names in os.walk(root):
    files += [os.path.join(d, f) for f in names if f.endswith(".rs")]
test_files = {f for f in files if os.path.basename(f) == "tests.rs"}
code = {}
for f in sorted(files):
    with open(f, encoding="utf-8") as fh:
        text, mods = library_code(fh.read())
    code[f] = text
    for m in mods:
        for cand in (os.path.join(child_dir(f), m + ".rs"), os.path.join(child_dir(f), m, "mod.rs")):
            test_files.add(cand)
lines = nonblank = 0
for f, text in code.items():
    if f in test_files:
        continue
    for line in text.splitlines():
        lines += 1
        s = line.strip()
        if s and not s.startswith("//"):
            nonblank += 1
print(f"src/: {lines} non-test lines ({nonblank} neither blank nor only a comment) "
      f"in {len(code) - len(test_files & set(code))} files")
EOF
