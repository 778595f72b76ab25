#!/usr/bin/env python3
"""tests/plan/run.py — the memory planner, checked from the outside.

For every random program (tools/randgraph.py, seeds 0..N-1) and every handwritten hazard case
(tests/plan/cases/*.model, optional NAME.json), and for each compiler variant tried on it:
  1. `modelc F --dump=memplan` and `--dump=fused` (same flags); the plan is checked here from the
     dump text alone, with liveness recomputed from the kernels' operands and the schedule (the
     compiler's own check_plan is not trusted):
       - every kernel writes an `arena` or `output` value, never an input or a param; the dump's
         def step is the kernel's step and its live range covers every read (through views);
       - two arena values whose closed live ranges intersect have disjoint bytes
         [offset, offset+bytes), unless the later is `in place of` the earlier, is defined at the
         earlier's last step, at the same offset with the same size, by an elementwise kernel
         that reads the earlier (and everything sharing its bytes) only with the identity index
         map (field cases B02, B06);
       - every arena value lies inside the arena total and its offset is a multiple of 64;
       - every declared output is `output` storage #K (K its declaration index), and no other
         value is written into an output buffer (B05);
       - `view of %M` lines have %M's storage, offset/index and byte size;
       - lower bound <= arena <= naive, and naive is the sum of the aligned arena values;
  2. compile the executable with the same flags, run it on random inputs A, then B (another
     batch size when the model has one), then A again, plus A with --repeat 3; compare with
     tools/refinterp.py (|got - ref| <= atol + rtol*|ref|; an argmax/argmin output may pick any
     element within that tolerance of its row's best in the reference's input, a near-tie) and
     require the A runs bit-identical.

Variants: every program is checked with the default flags; seeds also get one of --no-inplace,
--no-fuse, --no-reorder (seed % 3), and handwritten cases get all of them.
Output: `PASS: plan/seed-N` or `FAIL: plan/seed-N: why (repro: ...)`, `PASS: plan/case-NAME`;
exit status 1 if any failed.

Usage: python3 tests/plan/run.py [--count N] [--seed N] [--case NAME] [--start N] [--size small|medium|mixed]
                                 [--cases-only] [--no-cases] [-j N] [--keep] [--no-cuda] [--cuda-every K] [-v]
Environment: MODELC (default build/bin/modelc), PLAN_TIMEOUT (seconds per process, default 60).
"""

import argparse
import json
import os
import re
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import harness  # noqa: E402  (puts tools/ on sys.path)
import randgraph  # noqa: E402
import refinterp  # noqa: E402
from harness import NP_DT  # noqa: E402
from harness import CaseFail as Fail  # noqa: E402

CASES = os.path.join(HERE, "cases")
ALIGN = 64
ATOL = 1e-4
RTOL = 1e-4
MAX_BATCH = 4
VARIANT_FLAGS = [[], ["--no-inplace"], ["--no-fuse"], ["--no-reorder"]]


# ------------------------------------------------------------------------------ dump parsing

LINE_RE = re.compile(
    r"^\s+%(\d+)\s+(input|param|arena|output|const|init)\s+(\d+) bytes\s+live \[(-?\d+),(-?\d+)\]"
    r"(?:\s+offset (\d+)( \(load-only\))?)?(?:\s+#(\d+))?(?:\s+view of %(\d+))?(?:\s+in place of %(\d+))?"
    r"\s+(\w+\[[^\]]*\])(?:\s+; (\S+))?\s*$")
BOUND_RE = re.compile(r"^\s+lower bound (\d+) bytes \(ratio [\d.]+\), naive (\d+) \(ratio [\d.]+\) on slot 0\s*$")
SLOT_RE = re.compile(r"^\s+slot (\d+) ([^:]*): arena (\d+) bytes \(CPU, align 64\)(?:, \d+ bytes \(CUDA, align 256\))?, "
                     r"weights (\d+) bytes, load-only (\d+) bytes\s*$")
KERNEL_RE = re.compile(r"^\s+(k|init)(\d+) (\w+) (.*) -> %(\d+) : (\S+)\s+; nodes (.*)$")
OUTPUT_RE = re.compile(r"^\s+output (\S+) = %(\d+)\s*$")


class Value:
    def __init__(self, m):
        self.id = int(m.group(1))
        self.kind = m.group(2)
        self.bytes = int(m.group(3))
        self.first, self.last = int(m.group(4)), int(m.group(5))
        self.offset = int(m.group(6)) if m.group(6) is not None else None
        self.load_only = m.group(7) is not None
        self.index = int(m.group(8)) if m.group(8) is not None else None
        self.view_of = int(m.group(9)) if m.group(9) is not None else None
        self.inplace_of = int(m.group(10)) if m.group(10) is not None else None
        self.type = m.group(11)
        self.name = m.group(12)


def parse_memplan(text):
    vals, sched, totals, bound = {}, None, None, (0, 0)
    for line in text.splitlines():
        if line.startswith("memplan "):
            continue
        s = line.strip()
        if s.startswith("schedule:"):
            sched = [int(x) for x in re.findall(r"k\d+\(%(\d+)\)", s)]
            if len(sched) != len(s.split()) - 1:
                raise Fail("memplan: cannot parse schedule line: %r" % s)
            continue
        m = LINE_RE.match(line)
        if m:
            v = Value(m)
            if v.id in vals:
                raise Fail("memplan: %%%d listed twice" % v.id)
            vals[v.id] = v
            continue
        m = BOUND_RE.match(line)
        if m:
            bound = (int(m.group(1)), int(m.group(2)))
            continue
        m = SLOT_RE.match(line)
        if m and m.group(1) == "0":
            totals = {"arena": int(m.group(3)), "lower": bound[0], "naive": bound[1],
                      "weights": int(m.group(4)), "load_only": int(m.group(5))}
            continue
        if s:
            raise Fail("memplan: cannot parse line: %r" % line)
    if sched is None or totals is None:
        raise Fail("memplan: no schedule or totals line")
    return vals, sched, totals


class Kernel:
    def __init__(self, m):
        self.load_time = m.group(1) == "init"
        self.kind = m.group(3)
        self.body = m.group(4)
        self.root = int(m.group(5))
        # every operand occurrence: (node id, index map text or None for the identity map)
        self.reads = [(int(a), b if b != "" else None)
                      for a, b in re.findall(r"%(\d+)(\[[^\]]*\]|\^T|)", self.body)]


def parse_fused(text):
    kernels, outputs = [], []
    for line in text.splitlines():
        if line.startswith("fused ") or re.match(r"^\s+at load time: \d+ kernels?\s*$", line):
            continue
        m = KERNEL_RE.match(line)
        if m:
            kernels.append(Kernel(m))
            continue
        m = OUTPUT_RE.match(line)
        if m:
            outputs.append((m.group(1), int(m.group(2))))
            continue
        if line.strip():
            raise Fail("fused: cannot parse line: %r" % line)
    return kernels, outputs


# ------------------------------------------------------------------------------ the plan check

def align(x):
    return (x + ALIGN - 1) // ALIGN * ALIGN


def check_plan(plan_text, fused_text, out_names):
    """Raise Fail on the first violation; return the totals."""
    vals, sched, totals = parse_memplan(plan_text)
    kernels, outs = parse_fused(fused_text)
    init_kernels = [k for k in kernels if k.load_time]
    kernels = [k for k in kernels if not k.load_time]
    # Load-time values (init) and params: the weight region, all alive for the whole run.
    for k in init_kernels:
        v = vals.get(k.root)
        if v is None or v.kind != "init":
            raise Fail("load-time kernel writes %%%d, which is %s" % (k.root, "not listed" if v is None else
                                                                     "%s storage, not init" % v.kind))
    # Two weight regions: the resident one (what run() reads) and the load-only one (read only by
    # load-time kernels, freed after loading). A value run() reads must be resident.
    for region, size in (("weight", totals["weights"]), ("load-only", totals["load_only"])):
        weights = sorted((v for v in vals.values() if v.kind in ("param", "init") and v.view_of is None
                          and v.load_only == (region == "load-only")), key=lambda v: (v.offset, v.id))
        for i, v in enumerate(weights):
            if v.offset is None or v.offset % ALIGN or v.offset + v.bytes > size:
                raise Fail("%s %%%d at offset %s (%d bytes) is unaligned or outside the %s region of %d bytes"
                           % (v.kind, v.id, v.offset, v.bytes, region, size))
            if i and weights[i - 1].offset + weights[i - 1].bytes > v.offset and v.bytes and weights[i - 1].bytes:
                raise Fail("%s %%%d and %s %%%d overlap in the %s region" % (weights[i - 1].kind, weights[i - 1].id,
                                                                          v.kind, v.id, region))
            if region == "load-only" and v.last >= 0:
                raise Fail("%s %%%d is read at run time (live to step %d) but lives in the load-only region"
                           % (v.kind, v.id, v.last))
    by_root = {}
    for k in kernels:
        if k.root in by_root:
            raise Fail("fused: two kernels write %%%d" % k.root)
        by_root[k.root] = k
    if sorted(sched) != sorted(by_root):
        raise Fail("memplan schedule %s is not a permutation of the fused kernels' roots %s"
                   % (sched, sorted(by_root)))

    def base(i):
        seen = 0
        while i in vals and vals[i].view_of is not None:
            i = vals[i].view_of
            seen += 1
            if seen > 100:
                raise Fail("memplan: view cycle at %%%d" % i)
        return i

    # Views: same storage as their base, same bytes; a base is not itself a view.
    for v in vals.values():
        if v.view_of is None:
            continue
        b = vals.get(v.view_of)
        if b is None:
            raise Fail("%%%d is a view of %%%d, which has no memplan line" % (v.id, v.view_of))
        if b.view_of is not None:
            raise Fail("%%%d is a view of %%%d, itself a view (want the base)" % (v.id, b.id))
        if (v.kind, v.offset, v.index, v.bytes) != (b.kind, b.offset, b.index, b.bytes):
            raise Fail("view %%%d (%s offset %s #%s %d bytes) disagrees with its base %%%d (%s offset %s #%s %d bytes)"
                       % (v.id, v.kind, v.offset, v.index, v.bytes, b.id, b.kind, b.offset, b.index, b.bytes))
        if v.inplace_of is not None:
            raise Fail("view %%%d is also 'in place of %%%d'" % (v.id, v.inplace_of))

    # Liveness, recomputed from the schedule and each kernel's operands.
    defs, last = {}, {}
    for step, root in enumerate(sched):
        k = by_root[root]
        if root not in vals:
            raise Fail("kernel k%d writes %%%d, which has no memplan line" % (step, root))
        if vals[root].view_of is not None:
            raise Fail("kernel k%d writes %%%d, a view" % (step, root))
        defs[root] = step
        for r, _ in k.reads:
            if r not in vals:
                raise Fail("kernel writing %%%d reads %%%d, which has no memplan line" % (root, r))
            b = base(r)
            if b in defs and defs[b] > step:
                raise Fail("kernel k%d reads %%%d before k%d writes it" % (step, b, defs[b]))
            if b not in defs and vals[b].kind not in ("input", "param", "const", "init"):
                raise Fail("kernel k%d reads %%%d (%s) before any kernel writes it" % (step, b, vals[b].kind))
            last[b] = max(last.get(b, -1), step)
    live = {}
    for i, d in defs.items():
        live[i] = (d, max(d, last.get(i, d)))
        v = vals[i]
        if v.kind not in ("arena", "output"):
            raise Fail("kernel k%d writes %%%d into %s storage" % (d, i, v.kind))
        if v.first != d:
            raise Fail("%%%d: memplan says defined at step %d, the schedule writes it at step %d" % (i, v.first, d))
        if v.last < live[i][1]:
            raise Fail("%%%d: memplan live range [%d,%d] ends before its last read at step %d"
                       % (i, v.first, v.last, live[i][1]))
    for v in vals.values():
        if v.kind == "arena" and v.view_of is None and v.id not in defs:
            raise Fail("arena value %%%d is written by no kernel" % v.id)
        if v.kind == "arena" and v.offset is None:
            raise Fail("arena value %%%d has no offset" % v.id)
        if v.kind == "output" and v.index is None:
            raise Fail("output value %%%d has no #index" % v.id)
        if v.inplace_of is not None and v.kind != "arena":
            raise Fail("%%%d is %s storage but says 'in place of %%%d'" % (v.id, v.kind, v.inplace_of))

    # Outputs: declared order, output storage #K, and nothing else in an output buffer.
    if [n for n, _ in outs] != list(out_names):
        raise Fail("fused dump lists outputs %s, the model declares %s" % ([n for n, _ in outs], list(out_names)))
    owner = {}
    for k, (name, nid) in enumerate(outs):
        b = base(nid)
        v = vals.get(b)
        if v is None:
            raise Fail("output %s = %%%d has no memplan line" % (name, b))
        if v.kind != "output" or v.index != k:
            raise Fail("output %s (#%d) = %%%d is %s storage%s" % (name, k, b, v.kind,
                                                                  "" if v.index is None else " #%d" % v.index))
        if b not in defs:
            raise Fail("output %s = %%%d is written by no kernel" % (name, b))
        owner[k] = b
    for v in vals.values():
        if v.kind == "output" and v.view_of is None:
            if owner.get(v.index) != v.id:
                raise Fail("%%%d is written into output buffer #%s, which belongs to %s"
                           % (v.id, v.index, "%%%d" % owner[v.index] if v.index in owner else "no output"))

    # Arena: bounds, alignment, pairwise overlap.
    arena = [vals[i] for i in sorted(defs) if vals[i].kind == "arena"]
    for v in arena:
        if v.offset % ALIGN:
            raise Fail("%%%d at offset %d is not %d-aligned" % (v.id, v.offset, ALIGN))
        if v.offset + v.bytes > totals["arena"]:
            raise Fail("%%%d [%d,%d) lies outside the arena of %d bytes" % (v.id, v.offset, v.offset + v.bytes,
                                                                             totals["arena"]))
    for ai, a in enumerate(arena):
        a0, a1 = a.offset, a.offset + a.bytes
        la = live[a.id]
        for b in arena[ai + 1:]:
            b0, b1 = b.offset, b.offset + b.bytes
            if a1 <= b0 or b1 <= a0:
                continue
            lb = live[b.id]
            if la[1] < lb[0] or lb[1] < la[0]:
                continue
            early, late = (a, b) if la[0] <= lb[0] else (b, a)
            le, ll = live[early.id], live[late.id]
            why = None
            if late.inplace_of != early.id:
                why = "not marked in place"
            elif ll[0] != le[1]:
                why = "%%%d is defined at step %d but %%%d is still read at step %d" % (late.id, ll[0], early.id, le[1])
            elif late.offset != early.offset or late.bytes != early.bytes:
                why = "in place at a different offset or size (partial overlap, B06)"
            else:
                k = by_root[late.id]
                if k.kind != "elementwise":
                    why = "in place in a %s kernel" % k.kind
                else:
                    for r, mp in k.reads:
                        rb = base(r)
                        rv = vals[rb]
                        shares = rv.kind == "arena" and rb in live and not (
                            rv.offset + rv.bytes <= late.offset or late.offset + late.bytes <= rv.offset)
                        if shares and mp is not None:
                            why = ("the in-place kernel reads %%%d (sharing its bytes) with index map %s, "
                                   "not the identity (B02)" % (r, mp))
                            break
            if why:
                raise Fail("%%%d [%d,%d) live [%d,%d] overlaps %%%d [%d,%d) live [%d,%d]: %s"
                           % (early.id, early.offset, early.offset + early.bytes, le[0], le[1],
                              late.id, late.offset, late.offset + late.bytes, ll[0], ll[1], why))
    # Totals.
    naive = sum(align(v.bytes) for v in arena)
    if totals["naive"] != naive:
        raise Fail("naive %d != sum of aligned arena values %d" % (totals["naive"], naive))
    if not totals["lower"] <= totals["arena"] <= totals["naive"]:
        raise Fail("want lower bound <= arena <= naive, got %d, %d, %d" % (totals["lower"], totals["arena"],
                                                                           totals["naive"]))
    biggest = max((align(v.bytes) for v in arena), default=0)
    if totals["lower"] < biggest:
        raise Fail("lower bound %d is below the largest arena value %d" % (totals["lower"], biggest))
    # The lower bound is the peak, over steps, of the aligned bytes of the arena values live at
    # that step, an in-place pair counted once at the step where one becomes the other.
    peak = 0
    for step in range(len(sched)):
        at = [v for v in arena if live[v.id][0] <= step <= live[v.id][1]]
        gone = {v.inplace_of for v in at if v.inplace_of is not None and live[v.id][0] == step}
        peak = max(peak, sum(align(v.bytes) for v in at if v.id not in gone))
    if totals["lower"] != peak:
        raise Fail("lower bound %d, but the peak of live arena bytes is %d" % (totals["lower"], peak))
    return totals


# ------------------------------------------------------------------------------ numerics

def dims_at(dims, batch):
    return tuple(batch if isinstance(d, str) else d for d in dims)


def make_io(model, batch, seed, spec):
    rng = np.random.default_rng(seed)
    inputs, params = {}, {}
    for decls, key, out in ((model.inputs, "inputs", inputs), (model.params, "params", params)):
        for d in decls:
            shape = dims_at(d.dims, batch)
            lit = spec.get(key, {}).get(d.name)
            if lit is not None:
                a = np.array(lit, dtype=np.float64).reshape(shape) if np.size(lit) > 1 else np.full(shape, lit)
                if seed % 2:   # the B run: other values
                    a = a * 1.5 + 0.25
            elif d.dtype == "f32":
                a = rng.uniform(-1.0, 1.0, shape)
            else:
                a = rng.integers(0, 5, shape)
            out[d.name] = np.array(a, dtype=NP_DT[d.dtype], order="C")
    return inputs, params


def compare(name, got, ref, what):
    if got.shape != ref.shape:
        raise Fail("output %s%s: shape %s, reference %s" % (name, what, list(got.shape), list(ref.shape)))
    if np.issubdtype(ref.dtype, np.integer) or ref.dtype == np.bool_:
        bad = np.argwhere(got != ref)
        if bad.size:
            i = tuple(bad[0])
            raise Fail("output %s%s: %d wrong elements, first at %s: got %s, ref %s"
                       % (name, what, len(bad), list(i), got[i], ref[i]))
        return
    if got.dtype != np.float32:
        raise Fail("output %s%s: dtype %s, want float32" % (name, what, got.dtype))
    g, r = got.astype(np.float64), ref.astype(np.float64)
    gn, rn = np.isnan(g), np.isnan(r)
    if (gn != rn).any():
        i = tuple(np.argwhere(gn != rn)[0])
        raise Fail("output %s%s: NaN mismatch at %s: got %r, ref %r" % (name, what, list(i), g[i], r[i]))
    ok = ~rn
    diff = np.where(ok, np.abs(np.where(ok, g, 0) - np.where(ok, r, 0)), 0.0)
    inf = np.isinf(r) | np.isinf(g)
    if (inf & (g != r)).any():
        i = tuple(np.argwhere(inf & (g != r))[0])
        raise Fail("output %s%s: infinity mismatch at %s: got %r, ref %r" % (name, what, list(i), g[i], r[i]))
    diff = np.where(inf, 0.0, diff)
    tol = ATOL + RTOL * np.abs(np.where(ok & ~inf, r, 0.0))
    if diff.size and (diff > tol).any():
        i = np.unravel_index(int(np.argmax(diff - tol)), diff.shape)
        raise Fail("output %s%s: |got - ref| = %.3g > tol %.3g at %s: got %.9g, ref %.9g"
                   % (name, what, diff[i], tol[i], list(i), g[i], r[i]))


def timeout():
    return float(os.environ.get("PLAN_TIMEOUT", "60"))


def run(cmd, what):
    return harness.run_cmd(cmd, what, timeout())


tail = harness.tail
write_io = harness.write_io


def execute(d, prog, tag, model, w, ips, extra=()):
    """The outputs of one run; Fail when it exits non-zero."""
    outs, p = harness.execute(d, prog, tag, model, w, ips, extra, timeout=timeout())
    if outs is None:
        raise Fail("run %s failed (exit %d): %s" % (tag, p.returncode, tail(p.stderr + p.stdout)))
    return outs


def check_train_plan(path, flags, modelc):
    """A training case (cases/train_*.model): the plan of its --train build, forward and backward
    kernels together, checked from the dumps as any other (a value the backward pass reads keeps
    its bytes until then: in-place reuse may not take them). Its numbers are tests/train's; here
    the default variant must also reuse some buffer in place, so that the check has teeth."""
    with open(path) as f:
        loss = re.search(r"^\s*loss\s+([A-Za-z_]\w*)", f.read(), re.M).group(1)
    fl = " ".join(flags) or "default flags"
    dumps = {}
    for what in ("memplan", "fused"):
        p = run([modelc, path, "--train", "--dump=" + what, "--max-batch", str(MAX_BATCH)] + flags, "dump " + what)
        if p.returncode != 0:
            raise Fail("[%s] --train --dump=%s failed (exit %d): %s" % (fl, what, p.returncode, tail(p.stderr + p.stdout)))
        dumps[what] = p.stdout
    try:
        totals = check_plan(dumps["memplan"], dumps["fused"], [loss])
    except Fail as e:
        raise Fail("[%s] plan: %s" % (fl, e))
    if not flags and "in place of" not in dumps["memplan"]:
        raise Fail("[default flags] the training plan reuses no buffer in place: the case tests nothing")
    return totals


def check_program(path, flags, d, spec, seed, modelc, build_flags=()):
    """Plan check + numeric check for one compiler variant. Returns the memplan totals.
    build_flags only go to the executable's build (e.g. --no-cuda), not to the dumps."""
    if os.path.basename(path).startswith("train_"):
        return check_train_plan(path, flags, modelc)
    model = refinterp.parse_file(path)
    has_batch = model.batch_name is not None and any(isinstance(x, str) for dcl in model.inputs for x in dcl.dims)
    mb = ["--max-batch", str(MAX_BATCH)] if has_batch else []
    fl = " ".join(flags) or "default flags"
    dumps = {}
    for what in ("memplan", "fused"):
        p = run([modelc, path, "--dump=" + what] + mb + flags, "dump " + what)
        if p.returncode != 0:
            raise Fail("[%s] --dump=%s failed (exit %d): %s" % (fl, what, p.returncode, tail(p.stderr + p.stdout)))
        dumps[what] = p.stdout
    try:
        totals = check_plan(dumps["memplan"], dumps["fused"], model.outputs)
    except Fail as e:
        raise Fail("[%s] plan: %s" % (fl, e))
    prog = os.path.join(d, "prog" + "".join(f.replace("-", "_") for f in flags))
    p = run([modelc, path, "-o", prog] + mb + flags + list(build_flags), "compile")
    if p.returncode != 0 or not os.path.exists(prog):
        raise Fail("[%s] compile failed (exit %d): %s" % (fl, p.returncode, tail(p.stderr + p.stdout)))
    batches = {"A": 3, "B": MAX_BATCH} if has_batch else {"A": None, "B": None}
    io = {v: make_io(model, batches[v], seed * 2 + (v == "B"), spec) for v in "AB"}
    refs, ties = {}, {}
    for v in "AB":
        ties[v] = {}
        try:
            refs[v] = refinterp.run_model(model, io[v][1], io[v][0], ties=ties[v])
        except Exception as e:  # noqa: BLE001
            raise Fail("reference interpreter failed: %s: %s" % (type(e).__name__, e))
    for k, lit in spec.get("expected", {}).items():
        want = np.broadcast_to(np.array(lit, dtype=np.float64), refs["A"][k].shape)
        compare(k, refs["A"][k], want.astype(np.float32), " (reference vs expected)")
    files = {v: write_io(d, v, model, *io[v]) for v in "AB"}
    outs = {}
    for tag, v, extra in (("A1", "A", ()), ("B", "B", ()), ("A2", "A", ()), ("A3", "A", ("--repeat", "3"))):
        outs[tag] = execute(d, prog, tag, model, *files[v], extra=extra)
        if tag in ("A1", "B"):
            for k in model.outputs:
                try:
                    compare(k, outs[tag][k], refs[v][k], " (inputs %s)" % v)
                except Fail as e:
                    # an argmax over a near-tie (tanh saturated to 1 in one, 1 - 2^-24 in the
                    # other) may pick another element: accept any index whose reference value is
                    # within the tolerance of the row's best
                    if k not in ties[v]:
                        raise Fail("[%s] %s" % (fl, e))
                    ok, _ = refinterp.argmax_acceptable(ties[v][k], outs[tag][k], ATOL, RTOL)
                    if not ok:
                        raise Fail("[%s] %s (and not a near-tie of the reference's input)" % (fl, e))
    for tag in ("A2", "A3"):
        for k in model.outputs:
            x, y = outs["A1"][k], outs[tag][k]
            if x.shape != y.shape or x.tobytes() != y.tobytes():
                raise Fail("[%s] run-twice: output %s differs between run A1 and %s (after a run on inputs B)"
                           % (fl, k, tag))
    return totals


def job(args):
    kind, key, opts = args
    np.seterr(all="ignore")
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="plan_") as d:
        try:
            if kind == "seed":
                size = opts.size if opts.size != "mixed" else ("medium" if key % 4 == 3 else "small")
                src = randgraph.generate(key, size)
                path = os.path.join(d, "seed%d.model" % key)
                with open(path, "w") as f:
                    f.write(src)
                if opts.keep:
                    keep = os.path.join(opts.keep, "seed%d.model" % key)
                    with open(keep, "w") as f:
                        f.write(src)
                variants = [[], VARIANT_FLAGS[1 + key % 3]]
                spec = {}
                name = "plan/seed-%d" % key
                repro = "python3 tests/plan/run.py --seed %d%s" % (key, "" if opts.size == "mixed" else
                                                                   " --size " + opts.size)
                seed = key
            else:
                path = os.path.join(CASES, key + ".model")
                sp = os.path.join(CASES, key + ".json")
                spec = json.load(open(sp)) if os.path.exists(sp) else {}
                variants = VARIANT_FLAGS
                name = "plan/case-%s" % key
                repro = "python3 tests/plan/run.py --case %s" % key
                seed = 7
            for i, flags in enumerate(variants):
                # --cuda-every K: nvcc compiles the default variant of each case and of every
                # K-th seed; the other builds are CPU-only (the CPU path is what runs either way)
                cpu_only = opts.cuda_every > 1 and (i > 0 or (kind == "seed" and key % opts.cuda_every))
                check_program(path, flags, d, spec, seed, opts.modelc,
                              opts.build_flags or (["--no-cuda"] if cpu_only else []))
        except Fail as e:
            return False, "FAIL: %s: %s (repro: %s)" % (name, e, repro)
        except Exception as e:  # noqa: BLE001
            return False, "FAIL: %s: harness error: %s: %s (repro: %s)" % (name, type(e).__name__, e, repro)
    line = "PASS: %s" % name
    if opts.verbose:
        line += "  [%.1fs]" % (time.time() - t0)
    return True, line


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=40, help="random programs (seeds start..start+count-1)")
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--seed", type=int, action="append", help="run only this seed (repeatable)")
    ap.add_argument("--case", action="append", help="run only this handwritten case (repeatable)")
    ap.add_argument("--size", choices=["small", "medium", "mixed"], default="mixed",
                    help="program size (mixed: every 4th seed medium)")
    ap.add_argument("--cases-only", action="store_true")
    ap.add_argument("--no-cases", action="store_true")
    ap.add_argument("-j", type=int, default=2)
    ap.add_argument("--keep", metavar="DIR", help="also write each generated program to DIR")
    ap.add_argument("--no-cuda", action="store_true",
                    help="build the executables with --no-cuda (the CPU path is what runs either way; "
                         "skips nvcc, about 10x faster: make fuzz-graphs uses it)")
    ap.add_argument("--cuda-every", type=int, default=1, metavar="K",
                    help="build with CUDA only the default-flags executable of each case and of every K-th "
                         "seed, the rest with --no-cuda (make test: 4; default 1: every build)")
    ap.add_argument("-v", "--verbose", action="store_true")
    opts = ap.parse_args()
    opts.build_flags = ["--no-cuda"] if opts.no_cuda else []
    opts.modelc = harness.modelc_path()
    if opts.keep:
        os.makedirs(opts.keep, exist_ok=True)
    jobs = []
    cases = sorted(f[:-6] for f in os.listdir(CASES) if f.endswith(".model"))
    if opts.case:
        jobs += [("case", c, opts) for c in opts.case]
    elif opts.seed:
        jobs += [("seed", s, opts) for s in opts.seed]
    else:
        if not opts.no_cases:
            jobs += [("case", c, opts) for c in cases]
        if not opts.cases_only:
            jobs += [("seed", s, opts) for s in range(opts.start, opts.start + opts.count)]
    if harness.compiler_missing(opts.modelc, ["plan/%s-%s" % (kind, key) for kind, key, _ in jobs]):
        return 1
    t0 = time.time()
    fails = harness.run_jobs(job, jobs, opts.j)
    if opts.verbose:
        print("plan: %d programs, %d failed, %.1fs" % (len(jobs), fails, time.time() - t0))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
