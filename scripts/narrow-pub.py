#!/usr/bin/env python3
"""The library's public surface narrowed to what the binary, the benchmarks and the integration
tests use: every `pub` of src/ (but main.rs) becomes `pub(crate)`, then `cargo check
--all-targets` is run again and again and each item the compiler names as private where it is
used from outside the library (a module, item, method, field or re-export) is made `pub`
again, until the build has no such error left.

    scripts/narrow-pub.py            # narrow everything, then restore what is needed
    scripts/narrow-pub.py --restore  # only the second half: restore what is needed

Run it on a clean working tree from the repository root (it edits src/ in place), then
`cargo fmt --all` and read the diff. An item used only by tests or benchmarks ends `pub`, one
used only inside the library ends `pub(crate)`, and `unreachable_pub` (on in src/lib.rs) keeps
new code so. A `pub use a::{B, C}` of which only B is needed outside is split into `pub use
a::{B}` and `pub(crate) use a::{C}`, and B's own definition made `pub`.
"""

import json
import os
import re
import subprocess
import sys

SRC = "src"
PRIVATE = re.compile(r"^(\s*)pub\(crate\) ")


def rust_files():
    for d, _, names in os.walk(SRC):
        for n in sorted(names):
            p = os.path.join(d, n)
            if n.endswith(".rs") and p != os.path.join(SRC, "main.rs"):
                yield p


def narrow():
    count = 0
    for p in rust_files():
        with open(p, encoding="utf-8") as f:
            text = f.read()
        new, a = re.subn(r"(?m)^(\s*)pub (?=\S)", r"\1pub(crate) ", text)
        new, b = re.subn(r"\(pub (?=\S)", "(pub(crate) ", new)
        count += a + b
        if new != text:
            with open(p, "w", encoding="utf-8") as f:
                f.write(new)
    print(f"narrowed {count} items and fields to pub(crate)")


def check():
    out = subprocess.run(
        ["cargo", "check", "--all-targets", "--keep-going", "--message-format=json"],
        capture_output=True,
        text=True,
    ).stdout
    msgs = []
    for line in out.splitlines():
        if line.startswith("{"):
            m = json.loads(line)
            if m.get("reason") == "compiler-message":
                msgs.append(m["message"])
    return msgs


def spans(msg):
    for s in msg["spans"]:
        yield msg, s
    for child in msg.get("children", []):
        yield from spans(child)


def in_src(span):
    f = span["file_name"]
    return f.startswith(SRC + "/") and f != os.path.join(SRC, "main.rs")


def read(p):
    with open(p, encoding="utf-8") as f:
        return f.read().split("\n")


def write(p, lines):
    with open(p, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


def child_dir(path):
    base = os.path.basename(path)
    if base in ("mod.rs", "lib.rs"):
        return os.path.dirname(path)
    return path[:-3]


def module_file(path):
    """The file of the module at `path` (a list of names below the crate), or None."""
    cur = os.path.join(SRC, "lib.rs")
    for seg in path:
        cur = child_file(cur, seg)
        if cur is None:
            return None
    return cur


def child_file(cur, seg):
    for cand in (os.path.join(child_dir(cur), seg + ".rs"), os.path.join(child_dir(cur), seg, "mod.rs")):
        if os.path.exists(cand):
            return cand
    return None


def module_path_of(p):
    rel = os.path.relpath(p, SRC)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib"):
        rel = rel[:-1]
    return rel


def use_statement(lines, ln):
    """(first, last) line indexes of the `use` statement holding line index `ln`."""
    first = ln
    while not re.match(r"\s*(pub(\([^)]*\))?\s+)?use\b", lines[first]):
        first -= 1
    last = first
    while ";" not in lines[last]:
        last += 1
    return first, last


def in_use(lines, ln):
    """Whether line index `ln` is inside a `use` statement (before its `;`)."""
    k = ln
    while k >= 0:
        if re.match(r"\s*(pub(\([^)]*\))?\s+)?use\b", lines[k]):
            return ";" not in "".join(lines[k:ln])
        if ";" in lines[k] or "}" in lines[k] and k < ln:
            return False
        k -= 1
    return False


def split_use(p, lines, ln, names):
    """Moves `names` out of the `pub use` statement at line index `ln` into a pub(crate) one."""
    first, last = use_statement(lines, ln)
    text = " ".join(l.strip() for l in lines[first:last + 1])
    m = re.match(r"(pub(?:\([^)]*\))?)\s+use\s+(.*?)(\{(.*)\}|(\w+))\s*;$", text)
    if not m:
        print(f"  cannot split {p}:{ln + 1}: {text}")
        return
    prefix = m.group(2)
    items = [i.strip() for i in (m.group(4) or m.group(5)).split(",") if i.strip()]
    keep = [i for i in items if i.split(" as ")[-1].strip() not in names]
    moved = [i for i in items if i not in keep]
    out = []
    if keep:
        out.append(f"pub use {prefix}{{{', '.join(keep)}}};")
    if moved:
        out.append(f"pub(crate) use {prefix}{{{', '.join(moved)}}};")
    lines[first:last + 1] = out


def def_line(p, lines, name):
    """The line index of the definition (or re-export) of `name` in the file `p`."""
    item = re.compile(
        r"^\s*pub(?:\(crate\))?\s+(?:(?:unsafe|const|async|extern \"C\")\s+)*"
        r"(?:fn|struct|enum|const|static|type|trait|mod|union)\s+" + re.escape(name) + r"\b"
    )
    for i, l in enumerate(lines):
        if item.match(l):
            return i, None
    for i, l in enumerate(lines):
        if re.match(r"\s*(pub(\([^)]*\))?\s+)?use\b", l):
            first, last = use_statement(lines, i)
            text = " ".join(x.strip() for x in lines[first:last + 1])
            if re.search(r"\b" + re.escape(name) + r"\b", text):
                return first, text
    return None, None


def resolve_use(p, text, name):
    """The file that defines `name` which a `use` statement in `p` imports."""
    m = re.match(r"(?:pub(?:\([^)]*\))?\s+)?use\s+(.*);", text)
    body = m.group(1)
    # the prefix before the brace group, or the path without its last name
    if "{" in body:
        prefix = body[: body.index("{")].rstrip(":")
    else:
        prefix = body.rsplit("::", 1)[0]
    segs = [s for s in prefix.split("::") if s]
    here = module_path_of(p)
    if segs and segs[0] == "crate":
        path = segs[1:]
    elif segs and segs[0] in ("super", "self"):
        path = list(here)
        for s in segs:
            if s == "super":
                path = path[:-1]
            elif s != "self":
                path.append(s)
    else:
        path = here + segs
    return module_file(path)


def make_pub(p, name, seen):
    """Makes the definition of `name` reached from the file `p` pub, following re-exports."""
    if (p, name) in seen or p is None:
        return 0
    seen.add((p, name))
    lines = read(p)
    i, text = def_line(p, lines, name)
    if i is None:
        print(f"  no definition of {name} in {p}")
        return 0
    changed = 0
    if PRIVATE.match(lines[i]):
        lines[i] = lines[i].replace("pub(crate) ", "pub ", 1)
        write(p, lines)
        changed += 1
    if text is not None:
        changed += make_pub(resolve_use(p, text, name), name, seen)
    return changed


def struct_fields(lines, i, fields):
    """The line indexes of `fields` in the struct whose declaration is at line index `i` (a
    tuple struct's field 0 is its own line), or None if one is missing."""
    found = []
    for field in fields:
        if field.isdigit():
            found.append(i)
            continue
        depth, at = 0, None
        for k in range(i, len(lines)):
            if depth == 1 and re.match(r"\s*pub(\(crate\))?\s+" + field + r"\s*:", lines[k]):
                at = k
                break
            depth += lines[k].count("{") - lines[k].count("}")
            if depth <= 0 and k > i:
                break
        if at is None:
            return None
        found.append(at)
    return found


def struct_decl(p, name):
    """(file, line index) of the struct `name` that module file `p` defines or re-exports."""
    seen = set()
    while p is not None and p not in seen:
        seen.add(p)
        lines = read(p)
        i, text = def_line(p, lines, name)
        if i is None:
            return None
        if text is None:
            return p, i
        p = resolve_use(p, text, name)
    return None


def field_fix(msg):
    """`field `x` of struct `a::b::T` is private` (or `fields `x`, `y` and `z` of ... are
    private`): makes the fields pub. The struct is found by its path (from the crate or from
    some module), else as the one struct of that name that has those fields."""
    m = re.match(r"fields? (.*) of (?:struct|union) `(?:verifybench::)?([\w:]+?)(?:<.*>)?` (?:is|are) private", msg)
    if not m:
        return False
    fields, path = re.findall(r"`(\w+)`", m.group(1)), m.group(2).split("::")
    name = path[-1]
    decl = struct_decl(module_file(path[:-1]), name) if len(path) > 1 else None
    if decl is None or struct_fields(read(decl[0]), decl[1], fields) is None:
        struct = re.compile(r"\s*pub(?:\(crate\))?\s+struct\s+" + name + r"\b")
        candidates = []
        for q in rust_files():
            lines = read(q)
            for i, l in enumerate(lines):
                if struct.match(l) and struct_fields(lines, i, fields) is not None:
                    candidates.append((q, i))
        if len(candidates) != 1:
            return False
        decl = candidates[0]
    p, i = decl
    lines = read(p)
    for k in struct_fields(lines, i, fields):
        if k == i and "(pub(crate) " in lines[k]:
            lines[k] = lines[k].replace("(pub(crate) ", "(pub ", 1)
        elif k != i:
            lines[k] = lines[k].replace("pub(crate) ", "pub ", 1)
    write(p, lines)
    return True


def glob_modules(test_file):
    """The library modules a test or benchmark file imports with `use verifybench::a::b::*;`."""
    out = []
    for l in read(test_file):
        m = re.match(r"\s*use verifybench::([\w:]+)::\*;", l)
        if m:
            out.append(module_file(m.group(1).split("::")))
    return [p for p in out if p]


def restore():
    needed = set()  # (file, name) of re-exports the outside uses
    for round_ in range(1, 60):
        msgs = check()
        errors = sum(1 for m in msgs if m["level"] == "error")
        defs = {}  # file -> set of line indexes to make pub
        splits = {}  # (file, statement line) -> names to move out
        publish = []  # (file, name): definitions behind needed re-exports
        unresolved = []
        fields = 0
        for msg in msgs:
            code = (msg.get("code") or {}).get("code")
            text = msg["message"]
            if code == "E0603":
                name = re.search(r"`([^`]+)` is private", text).group(1)
                for parent, s in spans(msg):
                    if in_src(s) and "defined here" in parent["message"] + (s["label"] or ""):
                        defs.setdefault(s["file_name"], set()).add(s["line_start"] - 1)
                        needed.add((s["file_name"], name))
            elif code == "E0624":
                for _, s in spans(msg):
                    if in_src(s) and "defined here" in (s["label"] or ""):
                        defs.setdefault(s["file_name"], set()).add(s["line_start"] - 1)
            elif code in ("E0616", "E0451"):
                if field_fix(text):
                    fields += 1
                else:
                    unresolved.append(text)
            elif code in ("E0364", "E0365"):
                name = re.search(r"`([^`]+)` is only public within the crate", text).group(1)
                s = msg["spans"][0]
                if (s["file_name"], name) in needed:
                    publish.append((s["file_name"], name))
                else:
                    splits.setdefault((s["file_name"], s["line_start"] - 1), set()).add(name)
            elif code in ("E0425", "E0422", "E0433", "E0412", "E0531"):
                # a name a glob import (`use verifybench::a::*;`) did not bring: private there
                m = re.search(r"cannot find (?:[\w ,]+) `(\w+)` in this scope", text)
                s = msg["spans"][0] if msg["spans"] else None
                if m and s and not in_src(s):
                    for p in glob_modules(s["file_name"]):
                        if def_line(p, read(p), m.group(1))[0] is not None:
                            publish.append((p, m.group(1)))
            elif code in ("private_interfaces", "private_bounds"):
                for parent, s in spans(msg):
                    if in_src(s) and "only usable at visibility" in parent["message"] + (s["label"] or ""):
                        defs.setdefault(s["file_name"], set()).add(s["line_start"] - 1)
        changed = fields
        for p, lns in defs.items():
            lines = read(p)
            for ln in lns:
                if not PRIVATE.match(lines[ln]) and "(pub(crate) " not in lines[ln]:
                    # a name inside a `use` statement that spans several lines
                    ln = use_statement(lines, ln)[0] if in_use(lines, ln) else ln
                if PRIVATE.match(lines[ln]):
                    lines[ln] = lines[ln].replace("pub(crate) ", "pub ", 1)
                    changed += 1
                elif "(pub(crate) " in lines[ln]:
                    lines[ln] = lines[ln].replace("(pub(crate) ", "(pub ", 1)
                    changed += 1
            write(p, lines)
        seen = set()
        for p, name in publish:
            changed += make_pub(p, name, seen) or 0
            lines = read(p)
        by_file = {}
        for (p, ln), names in splits.items():
            by_file.setdefault(p, []).append((ln, names))
        for p, items in by_file.items():
            lines = read(p)
            done = set()
            for ln, names in sorted(items, reverse=True):
                first, _ = use_statement(lines, ln)
                if first in done:
                    continue
                allnames = set()
                for l2, n2 in items:
                    if use_statement(lines, l2)[0] == first:
                        allnames |= n2
                done.add(first)
                split_use(p, lines, ln, allnames)
                changed += 1
            write(p, lines)
        print(f"round {round_}: {errors} errors, {changed} changes", flush=True)
        for u in sorted(set(unresolved)):
            print("  unresolved:", u)
        if changed == 0:
            break
    left = [m for m in check() if m["level"] == "error"]
    for m in left[:20]:
        print(m["rendered"])
    return 1 if left else 0


if __name__ == "__main__":
    if "--restore" not in sys.argv[1:]:
        narrow()
    sys.exit(restore())
