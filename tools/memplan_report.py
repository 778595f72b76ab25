#!/usr/bin/env python3
"""memplan_report.py — a markdown table of modelc's memory plans.

    python3 tools/memplan_report.py [--modelc PATH] [--max-batch N] [-j N] [FLAGS...] [-- FILES...]

For every .model under examples/, tests/numeric/cases/ and tests/plan/cases/ (or the FILES
given), runs `modelc F --dump=memplan` (plus any extra compiler FLAGS such as --no-inplace) and
parses slot 0's lines

    lower bound L bytes (ratio ...), naive N (ratio ...) on slot 0
    slot 0 the model's device: arena A bytes (CPU, align 64)..., weights W bytes, load-only X bytes

into one row: model, arena bytes, lower bound, arena/lower bound, naive bytes, arena/naive,
weight bytes. A model that does not compile gets a row saying so. The last line counts how many
models meet arena/lower bound <= 1.05 (an empty arena counts as ratio 1).
Exit status 0 when every model compiled, 1 otherwise.
"""

import argparse
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIRS = ["examples", "tests/numeric/cases", "tests/plan/cases"]
BOUND_RE = re.compile(r"^\s*lower bound (\d+) bytes \(ratio [\d.]+\), naive (\d+) \(ratio [\d.]+\) on slot 0\s*$", re.M)
SLOT0_RE = re.compile(r"^\s*slot 0 [^:]*: arena (\d+) bytes \(CPU[^\n]*, weights (\d+) bytes, load-only \d+ bytes\s*$", re.M)
TARGET = 1.05


def find_models():
    out = []
    for d in DIRS:
        for dirpath, _, files in os.walk(os.path.join(ROOT, d)):
            for f in files:
                if f.endswith(".model"):
                    out.append(os.path.join(dirpath, f))
    return sorted(out, key=lambda p: os.path.relpath(p, ROOT))


def plan(modelc, path, flags):
    try:
        p = subprocess.run([modelc, path, "--dump=memplan"] + flags, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return None, "timed out"
    b, s0 = BOUND_RE.search(p.stdout), SLOT0_RE.search(p.stdout)
    if p.returncode != 0 or not b or not s0:
        err = [l for l in (p.stderr + p.stdout).splitlines() if "error" in l] or (p.stderr + p.stdout).splitlines()
        return None, (err[0].strip() if err else "exit %d" % p.returncode)
    # the lower bound and the naive sum are slot 0's (the model's device), as is the arena
    lb, nv = int(b.group(1)), int(b.group(2))
    a, w = int(s0.group(1)), int(s0.group(2))
    return (a, lb, nv, w), None


def ratio(x, y):
    if y == 0:
        return 1.0 if x == 0 else float("inf")
    return x / y


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--modelc", default=os.environ.get("MODELC", os.path.join(ROOT, "build", "bin", "modelc")))
    ap.add_argument("--max-batch", type=int, help="passed to modelc (default: the compiler's own, 64)")
    ap.add_argument("-j", type=int, default=4)
    ap.add_argument("rest", nargs="*", help="extra compiler flags (e.g. --no-inplace), then -- and model files")
    args, unknown = ap.parse_known_args()
    flags = [a for a in unknown + args.rest if a.startswith("-")]
    files = [a for a in args.rest if not a.startswith("-")]
    if args.max_batch:
        flags += ["--max-batch", str(args.max_batch)]
    models = [os.path.abspath(f) for f in files] or find_models()
    with ThreadPoolExecutor(max_workers=max(1, args.j)) as ex:
        results = list(ex.map(lambda p: plan(args.modelc, p, flags), models))

    print("| model | arena bytes | lower bound | arena/lower bound | naive bytes | arena/naive | weight bytes |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    ok = met = failed = 0
    worst = []
    for path, (tot, err) in zip(models, results):
        name = os.path.relpath(path, ROOT)
        if tot is None:
            failed += 1
            print("| %s | error: %s | | | | | |" % (name, err.replace("|", "\\|")))
            continue
        a, lb, nv, w = tot
        rl, rn = ratio(a, lb), ratio(a, nv)
        ok += 1
        if rl <= TARGET:
            met += 1
        else:
            worst.append((rl, name))
        print("| %s | %d | %d | %.3f | %d | %.3f | %d |" % (name, a, lb, rl, nv, rn, w))
    print()
    line = "%d of %d models meet arena/lower bound <= %.2f" % (met, ok, TARGET)
    if failed:
        line += "; %d did not compile" % failed
    if worst:
        worst.sort(reverse=True)
        line += "; above it: " + ", ".join("%s (%.3f)" % (n, r) for r, n in worst[:5])
        if len(worst) > 5:
            line += ", ..."
    if flags:
        line += " (flags: %s)" % " ".join(flags)
    print(line + ".")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
