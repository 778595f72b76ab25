#!/usr/bin/env python3
"""tests/cudasim/numeric_cover.py — which numeric cases the quick cudasim run keeps.

The cudasim suite of `make test` runs the tests/numeric cases listed in
tests/cudasim/numeric_quick.txt on the simulated GPU (`make cudasim-full` runs every case). The
list is chosen so that it still launches every kernel that the whole set launches: each runtime
kernel (by name; templates by their name, e.g. reduce_cols_tiled_kernel<R>), each library call
(cublasSgemm, cublasLtMatmul, ...) and each kind of generated kernel (the grid-stride NAME_kN_g,
the float4 NAME_kN_g4, and their initializer twins NAME_initN_g, NAME_initN_g4), and with EMIT
(a folder of `modelc --emit-c` outputs, one EMIT/CASE per case) each generated kernel's variant
in its .cu: its element type, whether it reports faults (mrt_fault), whether its loop nest has
more than one dimension. The simulator writes what a run launches with CUDASIM_TRACE=FILE
("PROGRAM kernel NAME" and "PROGRAM library WHAT" per line; the numeric harness names each
executable after its case).

    numeric_cover.py suggest TRACE EMIT [TIMES [LIST]]   a greedy cover, most new items per second
                                      first (TIMES: the `-v` output of tests/numeric/run.py, for
                                      each case's seconds), after LIST's '+' lines (kept on purpose)
    numeric_cover.py check TRACE EMIT LIST   PASS if LIST's cases launch every item the others do,
                                      else FAIL naming the items that no listed case has (make
                                      cudasim-full runs it, so that a kernel added later that the
                                      quick list misses fails there)
"""
import glob
import os
import re
import sys

GEN = re.compile(r"_(k|init)\d+_(g4?)$")
GLOBAL = re.compile(r"__global__ void \w+_(k|init)\d+_(g4?)\((\w+) \*out(.*?)\) \{\n(.*?)\n\}\n", re.S)


def emitted_kinds(emit, case):
    """The variants of the generated kernels in EMIT/CASE/*.cu."""
    out = set()
    for cu in glob.glob(os.path.join(emit, case, "*.cu")):
        with open(cu) as f:
            text = f.read()
        for kind, g, t, params, body in GLOBAL.findall(text):
            out.add("generated %s_%s kernel of %s%s%s" % (kind, g, t, ", faults" if "mrt_fault" in params else "",
                                                          ", rank > 1" if "int64_t r = idx" in body else ""))
    return out


def items_by_case(trace, emit):
    """{case: set of items} from a CUDASIM_TRACE file and the emitted .cu files."""
    out = {}
    with open(trace) as f:
        for line in f:
            parts = line.rstrip("\n").split(" ", 2)
            if len(parts) != 3:
                continue
            prog, kind, name = parts
            if prog.startswith("same_as_"):
                continue  # the twin of a same_as case (runs on the CPU only)
            m = GEN.search(name) if kind == "kernel" else None
            item = "generated %s_%s kernel" % m.groups() if m else "%s %s" % (kind, name)
            out.setdefault(prog, set()).add(item)
    for case in out:
        out[case] |= emitted_kinds(emit, case)
    return out


def read_list(path):
    """The case names of numeric_quick.txt (a name per line; '+ NAME' kept on purpose; '#' comments)."""
    names, forced = [], []
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line.startswith("+"):
                forced.append(line[1:].strip())
                names.append(line[1:].strip())
            elif line:
                names.append(line)
    return names, forced


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "suggest":
        cases = items_by_case(sys.argv[2], sys.argv[3])
        secs = {}
        if len(sys.argv) > 4:
            with open(sys.argv[4]) as f:
                for line in f:
                    m = re.match(r"PASS: numeric/(\S+) .*; ([0-9.]+)s\]", line)
                    if m:
                        secs[m.group(1)] = float(m.group(2))
        forced = read_list(sys.argv[5])[1] if len(sys.argv) > 5 else []
        have = set()
        for c in forced:
            have |= cases.get(c, set())
        want = set().union(*cases.values()) - have
        chosen = []
        while want:
            best = max(cases, key=lambda c: (len(cases[c] & want) / secs.get(c, 10.0), c))
            new = cases[best] & want
            chosen.append((best, sorted(new)))
            want -= new
        for c, new in chosen:
            print("%s  # %s" % (c, ", ".join(new)))
        return 0
    if len(sys.argv) == 5 and sys.argv[1] == "check":
        cases = items_by_case(sys.argv[2], sys.argv[3])
        names, _ = read_list(sys.argv[4])
        every = set().union(*cases.values()) if cases else set()
        kept = set().union(*(cases.get(n, set()) for n in names)) if names else set()
        missing = sorted(every - kept)
        if not cases:
            print("FAIL: cudasim/numeric_cover: the trace %s is empty" % sys.argv[2])
            return 1
        if not any(i.startswith("generated ") and " of " in i for i in every):
            print("FAIL: cudasim/numeric_cover: no generated kernel in the .cu files under %s" % sys.argv[3])
            return 1
        if missing:
            print("FAIL: cudasim/numeric_cover: no case of %s launches %s (add a case that does: "
                  "numeric_cover.py suggest)" % (sys.argv[4], "; ".join(missing)))
            return 1
        print("PASS: cudasim/numeric_cover (the %d cases of %s launch all %d kernels, library calls and "
              "generated kernel kinds of the %d cases)" % (len(names), sys.argv[4], len(every), len(cases)))
        return 0
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
