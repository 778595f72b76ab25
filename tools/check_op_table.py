#!/usr/bin/env python3
"""check_op_table.py — the op table (compiler/ops.def, printed by `modelc --list-ops`) against
the two places that must agree with it and cannot include it: the operation tables of
docs/language.md and the NumPy reference interpreter tools/refinterp.py.

    python3 tools/check_op_table.py [--modelc PATH]

Checks, each failure printed as "FAIL: op-table/WHAT: why":
  - every function of the table has a row in docs/language.md, and every function a row names
    is in the table;
  - docs: every `name=default` a row writes is the table's default for that attribute;
  - refinterp: the same functions, the same tensor arity (min..max), the same attributes in the
    same order, and the same defaults (a default the table leaves to the lowering, such as
    stride=kernel, and a required attribute are None in refinterp);
  - randgraph: every unary function tools/randgraph.py draws is in the table.
Prints "PASS: op-table/docs" and "PASS: op-table/refinterp" when they agree. Exit status 1 on
any failure.
"""

import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FN_RE = re.compile(r"^  (\S+)\s+tensors (\d+)(?:\.\.(\d+))?  attrs (.*?)  op (\S+) \((.*?)\)  ; (.*)$")


def table(modelc):
    out = subprocess.run([modelc, "--list-ops"], capture_output=True, text=True, check=True).stdout
    fns = {}
    for line in out.splitlines():
        m = FN_RE.match(line)
        if not m:
            continue
        attrs = []
        if m.group(4) != "-":
            for a in m.group(4).split():
                name, rest = a.split(":", 1)
                kind, _, default = rest.partition("=")
                attrs.append((name, kind, default if "=" in rest else None))
        lo = int(m.group(2))
        fns[m.group(1)] = {"arity": (lo, int(m.group(3)) if m.group(3) else lo), "attrs": attrs}
    if not fns:
        raise SystemExit("FAIL: op-table/parse: modelc --list-ops printed no functions")
    return fns


def literal(kind, text):
    """The Python value of a table default, or None when the lowering computes it."""
    if text is None:
        return None
    if kind == "bool":
        return {"true": True, "false": False}.get(text)
    if kind.startswith("enum"):
        return text
    try:
        return float(text) if kind == "float" else int(text)
    except ValueError:
        return None


def check_docs(fns):
    path = os.path.join(ROOT, "docs", "language.md")
    rows = {}
    for line in open(path, encoding="utf-8"):
        m = re.match(r"^\| `([a-z_0-9 ]+)`[^|]*\| ([^|]*)\|", line)
        if not m:
            continue
        for name in m.group(1).split():
            rows[name] = m.group(2)
    fails = []
    for name in sorted(set(fns) - set(rows)):
        fails.append("function '%s' of the op table has no row in docs/language.md" % name)
    for name in sorted(set(rows) - set(fns)):
        fails.append("docs/language.md has a row for '%s', which the op table does not have" % name)
    for name in sorted(set(rows) & set(fns)):
        # every attribute appears in the row, in the table's order (attributes may be given
        # by position, so the order the docs show is part of the language)
        pos = -1
        for a, _, _ in fns[name]["attrs"]:
            m = re.search(r"\b%s\b" % re.escape(a), rows[name][pos + 1:])
            if not m:
                fails.append("'%s': docs/language.md does not show attribute '%s' (or shows it out of order)" % (name, a))
                break
            pos += 1 + m.start()
        defaults = {a: d for a, _, d in fns[name]["attrs"]}
        for a, d in re.findall(r"\b([a-z_]+)=([^,`\s]+)", rows[name]):
            if d == "[...]":  # a placeholder: the attribute is required
                d = None
            if a in defaults and defaults[a] != d:
                fails.append("'%s': docs/language.md says %s=%s, the op table %s=%s" % (name, a, d, a, defaults[a]))
            if a not in defaults:
                fails.append("'%s': docs/language.md gives attribute '%s', which the op table does not have"
                             % (name, a))
    return fails


def check_refinterp(fns):
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import refinterp  # noqa: E402
    ops = refinterp.OPS
    fails = []
    for name in sorted(set(fns) - set(ops)):
        fails.append("function '%s' of the op table is missing from tools/refinterp.py" % name)
    for name in sorted(set(ops) - set(fns)):
        fails.append("tools/refinterp.py has '%s', which the op table does not have" % name)
    for name in sorted(set(ops) & set(fns)):
        arity, _, rattrs, _ = ops[name]
        if tuple(arity) != fns[name]["arity"]:
            fails.append("'%s': refinterp takes %s tensors, the op table %s" % (name, arity, fns[name]["arity"]))
        tattrs = [(a, literal(k, d)) for a, k, d in fns[name]["attrs"]]
        if [a for a, _ in rattrs] != [a for a, _ in tattrs]:
            fails.append("'%s': refinterp's attributes %s, the op table's %s"
                         % (name, [a for a, _ in rattrs], [a for a, _ in tattrs]))
            continue
        for (a, rd), (_, td) in zip(rattrs, tattrs):
            if rd != td:
                fails.append("'%s': attribute '%s' defaults to %r in refinterp, %r in the op table" % (name, a, rd, td))
    return fails


def check_randgraph(fns):
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import randgraph  # noqa: E402
    return ["tools/randgraph.py draws '%s', which the op table does not have" % u for u in randgraph.UNARY
            if u not in fns]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--modelc", default=os.path.join(ROOT, os.environ.get("B", "build"), "bin", "modelc"))
    args = ap.parse_args()
    fns = table(args.modelc)
    bad = False
    for what, fails in (("docs", check_docs(fns)), ("refinterp", check_refinterp(fns)),
                        ("randgraph", check_randgraph(fns))):
        for f in fails:
            print("FAIL: op-table/%s: %s" % (what, f))
        if not fails:
            print("PASS: op-table/%s (%d functions agree)" % (what, len(fns)))
        bad = bad or bool(fails)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
