#!/usr/bin/env python3
"""tests/numeric/run.py — every op and fused chain, compiled by modelc, vs tools/refinterp.py.

For each case tests/numeric/cases/NAME.model (+ optional NAME.json spec, format below):
  1. write the params to a .safetensors file and the inputs to .npy files (NumPy only);
  2. compile:  $MODELC NAME.model -o PROG [--max-batch N] $MODELC_FLAGS
  3. for every batch size: run  PROG [--weights W] --input k=k.npy ... --output y=y.npy ...
     and compare every output with the reference interpreter (float64, cast to float32):
       |out - ref| <= atol + rtol * |ref|  (llm.c validate_result style), NaN where the reference
       has NaN, the same infinities; `bits` outputs compare bit patterns (any NaN matches any NaN);
       literal `expected` values are checked against both the executable and the reference;
  4. run-twice check (field case B05): inputs A, then B, then A again in separate processes, and
     A once more with --repeat 3 in one process: all A outputs must be bit-identical;
     then in ONE process on one model object (tests/numeric/run_aba.c linked with the C from
     `modelc --emit-c`): A, then B (at batch max_batch), then A, each output buffer pre-filled
     with a different garbage pattern; both A runs bit-identical, every run vs the reference;
     B has other inputs but the same params;
  5. when every input and output has the batch as its leading axis, one more run at
     batch = 2*max_batch+1, which mrt_main runs in chunks of max_batch (spec "oversize");
  6. with --vs-cpu and a --device other than the CPU: for every batch, the same executable run
     on the A inputs with --device cpu, each output compared with the device's A1 run (NaN and
     infinities in the same places, |dev - cpu| <= atol + rtol*|cpu| with the case's tolerance,
     bit-exact where the case asks for bits): one build per case serves both comparisons
     (make gpu-check).
Output: one line per case, `PASS: numeric/NAME (maxdiff 3.1e-07, tol 1e-05)` (with --vs-cpu
also `; vs cpu maxdiff 0, tol 1e-05`) or `FAIL: numeric/NAME: output y: maxdiff ... > tol ...
at index ...`; exit status 1 if any failed.

Usage: python3 tests/numeric/run.py [-k SUBSTR ...] [-j N] [--device D] [--keep] [-v]
                                    [--ref-only] [--no-repeat] [--no-inprocess] [--vs-cpu]
                                    [--cuda-every K] [--cases FILE]
Environment: MODELC (default build/bin/modelc), MODELC_FLAGS (extra compiler flags, e.g.
--no-fuse to switch a pass off), MODELC_HOME (include/ and lib/ of the runtime; default: next to
modelc), CC and MODELC_CFLAGS (for run_aba.c, as modelc uses them), NUMERIC_TIMEOUT (seconds per
process, default 120). Models without params are run without --weights.
--ref-only checks only the reference against the literal expected values (no compiler needed).

Spec (NAME.json, every key optional):
  "inputs": {NAME: VALUE}, "params": {NAME: VALUE}   VALUE is a literal (nested lists; NaN,
      Infinity, -0.0 allowed) or {"dist": D, "seed": S, ...} with D one of
      normal (mean, scale), uniform (low, high), positive (uniform low=0.1 high=2 by default),
      arange (start, step), fill (value), antidiag (a square permutation matrix), randint
      (low, high; for integer tensors). Unlisted tensors: normal, seed from the name.
  "batches": [1, 3]   batch sizes to run (models with a batch dimension; default [1, 3])
  "max_batch": 4      passed as --max-batch (default 4 for models with a batch; null: none)
  "dims": {"seq": [3, 7]}   sizes of the other symbolic dimensions, one per entry of "batches"
                      (cycled); "max_dims": {"seq": 16} passed as --max-dim seq=16 (default 16)
  "atol": 1e-5, "rtol": 1e-5, "tol": {OUTPUT: {"atol": .., "rtol": ..}}
  "tol_of_max": 0.03125   adds that fraction of the output's max |ref| (over its finite values)
                      to atol: a tolerance on the scale of the output (bf16 cases: the metric of
                      bench/run.py, max |out - ref| / max |ref|)
  "expected": {OUTPUT: literal}   checked for the A inputs; a scalar fills the output,
                                  {"arange": START} is START, START+1, ... in C order
  "bits": true | [OUTPUT, ...]    bit-exact comparison for these outputs (A inputs)
  "oversize": "correct" (default) | "correct_or_error" | "skip"   the chunked run at 2*max_batch+1
  "flags": ["--no-fold-bn"]        extra modelc flags for this case (after $MODELC_FLAGS)
  "expect_error": "text"          the executable must exit with status 1 on the A inputs, with
                                  "text" in its stderr, and the reference must reject them too
                                  (nothing else is run)
  "same_as": "OTHER"              also compile cases/OTHER.model and require that its outputs on
                                  the same inputs and params are BIT-identical to this case's
                                  (e.g. a model with 'on DEVICE' regions vs the same model without;
                                  OTHER is built without this case's "precision")
  "simd_paths": true               run the A inputs once more with MODELRT_SIMD=portable (the
                                  portable paths of rt_rows.c and of the generated kernels'
                                  x86-64-v4 / v3 copies), and on an AVX-512 CPU with x86-64-v3
                                  once more with MODELRT_SIMD=avx2 (the v3 copies): checked against
                                  the reference, and bit for bit against the default run
  "precision": "bf16"             compile with --precision bf16; the PASS line says which ran: bf16,
                                  or the f32 fallback of a CPU without avx512_bf16 (the executable
                                  says so at load); the case's tolerance holds for either
  "env": {"NAME": "VALUE"}        environment for every run of the case (e.g. DNNL_MAX_CPU_ISA)
  "stderr": "text"                the first run (A1) must print "text" on stderr
  "threads": [1, 2, 3]            on the CPU, run the A inputs once more at each of these thread
                                  counts (--threads N): vs the reference, and bit for bit vs A1
                                  (results must not depend on the thread count)
  "note": "why this case exists"
"""

import argparse
import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import harness  # noqa: E402  (puts tools/ on sys.path)
import refinterp  # noqa: E402
from harness import NP_DT, CaseFail  # noqa: E402,F401

CASES = os.path.join(HERE, "cases")
SPEC_KEYS = {"inputs", "params", "batches", "max_batch", "dims", "max_dims", "atol", "rtol", "tol", "expected", "bits",
             "oversize", "note", "flags", "expect_error", "same_as", "simd_paths", "precision", "env", "stderr",
             "tol_of_max", "threads"}
# What an executable of a --precision bf16 build says at load on a CPU without bf16 instructions
# (runtime/rt_matmul.c, rt_precision_notice): it then runs in f32.
BF16_FALLBACK = "compiled with --precision bf16, but this CPU has no bf16 instructions"
BF16_GPU = "which applies to the CPU's oneDNN convolutions and matmuls only"   # and on a GPU


# ---------------------------------------------------------------------------------- inputs

def make_tensor(name, decl, spec, shape, variant):
    """The array for input/param `name` of `shape`; variant 'A' or 'B' (the run-twice pair)."""
    dt = NP_DT[decl.dtype]
    floating = decl.dtype in ("f32", "f16", "bf16")
    if spec is None:
        spec = ({"dist": "randint", "low": 0, "high": 2} if decl.dtype == "bool" else
                {"dist": "randint", "low": 0, "high": 5} if not floating else {"dist": "normal"})
    if isinstance(spec, dict) and "values" in spec:
        spec = spec["values"]
    if not isinstance(spec, dict):            # a literal
        a = np.array(spec, dtype=np.float64)
        if a.shape != tuple(shape):
            a = np.broadcast_to(a, shape) if a.ndim == 0 else a
        if a.shape != tuple(shape):
            raise CaseFail("literal for '%s' has shape %s, want %s" % (name, list(a.shape), list(shape)))
        if variant == "B":
            a = a[::-1].copy() + 1 if not floating else a * 1.5 + 0.25
        return as_dtype(a, decl.dtype)
    dist = spec.get("dist", "normal")
    seed = spec.get("seed", zlib.crc32(name.encode()) % 100000)
    if variant == "B":
        seed += 1000
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape, dtype=np.int64))
    if dist == "normal":
        a = rng.standard_normal(shape) * spec.get("scale", 1.0) + spec.get("mean", 0.0)
    elif dist == "uniform":
        a = rng.uniform(spec.get("low", -1.0), spec.get("high", 1.0), shape)
    elif dist == "positive":
        a = rng.uniform(spec.get("low", 0.1), spec.get("high", 2.0), shape)
    elif dist == "randint":
        a = rng.integers(spec.get("low", 0), spec.get("high", 5), shape)
    elif dist == "arange":
        a = (spec.get("start", 0) + spec.get("step", 1) * np.arange(n)).reshape(shape)
        if variant == "B":
            a = a * 1.5 + 0.25
    elif dist == "fill":
        a = np.full(shape, float(spec["value"]))
        if variant == "B":
            a = a * 1.5 + 0.25
    elif dist == "antidiag":
        if len(shape) != 2 or shape[0] != shape[1]:
            raise CaseFail("antidiag needs a square shape, got %s" % list(shape))
        a = np.eye(shape[0])[::-1]
    else:
        raise CaseFail("unknown dist %r for '%s'" % (dist, name))
    return as_dtype(a, decl.dtype)


def as_dtype(a, dtype):
    """The values a (float64) as an array of the model dtype: NP_DT's, f16 and bf16 rounded to
    nearest even (bf16 as its bits, refinterp.half_encode)."""
    if dtype in ("f16", "bf16"):
        return np.array(refinterp.half_encode(dtype, a), order="C")
    return np.array(a, dtype=NP_DT[dtype], order="C")  # (ascontiguousarray would make 0-d 1-d)


def literal_batch(model, spec):
    """The batch fixed by a literal input with a batch dimension, or None."""
    for d in model.inputs:
        v = spec.get("inputs", {}).get(d.name)
        if isinstance(v, dict) and "values" in v:
            v = v["values"]
        if v is not None and not isinstance(v, dict):
            a = np.array(v)
            for i, dim in enumerate(d.dims):
                if isinstance(dim, str) and a.ndim == len(d.dims):
                    return a.shape[i]
    return None


def sizes_of(model, spec, batch):
    """The symbolic sizes of one run: `batch` is the batch, or already a dict name -> size; the
    other symbols take the first of their spec "dims" sizes."""
    if isinstance(batch, dict):
        return batch
    sizes = {n: spec.get("dims", {}).get(n, [5])[0] for n in model.sym_names}
    if model.batch_name is not None:
        sizes[model.batch_name] = batch
    return sizes


def sizes_str(model, b):
    """" (batch 3)", " (batch 3, seq 7)", or "" for a model without symbols."""
    if b is None:
        return ""
    if not isinstance(b, dict):
        return " (batch %d)" % b
    return " (" + ", ".join("%s %d" % (n, b[n]) for n in model.sym_names) + ")"


def btag(b):
    """A file-name tag for the sizes of a run: "3", "3_7"."""
    return "_".join(str(v) for v in b.values()) if isinstance(b, dict) else str(b)


def make_io(model, spec, batch, variant):
    inputs, params = {}, {}
    sizes = sizes_of(model, spec, batch)
    for decls, key, out in ((model.inputs, "inputs", inputs), (model.params, "params", params)):
        for d in decls:
            shape = [sizes[x] if isinstance(x, str) else x for x in d.dims]
            # B (the run-twice pair) has other inputs but the same params: one loaded model.
            v = "A" if key == "params" else variant
            out[d.name] = make_tensor(d.name, d, spec.get(key, {}).get(d.name), shape, v)
    return inputs, params


# ---------------------------------------------------------------------------------- compare

def fmt_index(idx):
    return "(" + ", ".join(str(int(i)) for i in idx) + ")" if len(idx) != 1 else "(%d)" % idx[0]


def compare(name, got, ref, atol, rtol, bits, what):
    """Return maxdiff; raise CaseFail describing the worst violation."""
    if got.shape != ref.shape:
        raise CaseFail("output %s: shape %s, reference %s%s" % (name, list(got.shape), list(ref.shape), what))
    if ref.dtype in (np.float16, np.uint16):   # f16, bf16 (its bits): compared as the float32 values
        if got.dtype != ref.dtype:
            raise CaseFail("output %s: dtype %s, reference %s%s" % (name, got.dtype, ref.dtype, what))
        got, ref = (refinterp.half_decode(a).astype(np.float32) for a in (got, ref))
    if np.issubdtype(ref.dtype, np.integer) or ref.dtype == np.bool_:   # exact
        if got.dtype != ref.dtype:
            raise CaseFail("output %s: dtype %s, reference %s%s" % (name, got.dtype, ref.dtype, what))
        bad = np.argwhere(got != ref)
        if bad.size:
            i = tuple(bad[0])
            raise CaseFail("output %s: %d wrong elements, first at index %s: got %s, ref %s%s"
                           % (name, len(bad), fmt_index(i), got[i], ref[i], what))
        return 0.0, 0.0
    if got.dtype != np.float32:
        raise CaseFail("output %s: dtype %s, want float32%s" % (name, got.dtype, what))
    g = got.astype(np.float64)
    r = ref.astype(np.float64)
    gn, rn = np.isnan(g), np.isnan(r)
    if bits:
        gb, rb = got.view(np.uint32), ref.astype(np.float32).view(np.uint32)
        bad = np.argwhere((gb != rb) & ~(gn & rn))
        if bad.size:
            i = tuple(bad[0])
            raise CaseFail("output %s: bit pattern 0x%08x (%r) != reference 0x%08x (%r) at index %s"
                           " (%d elements differ)%s" % (name, gb[i], float(g[i]), rb[i], float(r[i]),
                                                       fmt_index(i), len(bad), what))
        fin = np.isfinite(r) & np.isfinite(g)
        return float(np.max(np.abs(g - r)[fin], initial=0.0)), 0.0
    bad = np.argwhere(gn != rn)
    if bad.size:
        i = tuple(bad[0])
        raise CaseFail("output %s: NaN mismatch at index %s: got %r, ref %r (%d elements)%s"
                       % (name, fmt_index(i), float(g[i]), float(r[i]), len(bad), what))
    inf = np.isinf(r) | np.isinf(g)
    bad = np.argwhere(inf & (g != r))
    if bad.size:
        i = tuple(bad[0])
        raise CaseFail("output %s: infinity mismatch at index %s: got %r, ref %r (%d elements)%s"
                       % (name, fmt_index(i), float(g[i]), float(r[i]), len(bad), what))
    ok = ~rn & ~inf
    diff = np.where(ok, np.abs(g - r), 0.0)
    tol = atol + rtol * np.abs(np.where(ok, r, 0.0))
    excess = diff - tol
    if excess.size and excess.max() > 0:
        i = np.unravel_index(int(np.argmax(excess)), excess.shape)
        raise CaseFail("output %s: maxdiff %.3g > tol %.3g at index %s: got %.9g, ref %.9g%s"
                       % (name, diff[i], tol[i], fmt_index(i), g[i], r[i], what))
    if not diff.size:
        return 0.0, atol
    i = np.unravel_index(int(np.argmax(diff)), diff.shape)
    return float(diff[i]), float(tol[i])


# ---------------------------------------------------------------------------------- running

def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            return next((l.split(":", 1)[1].split() for l in f if l.startswith("flags")), [])
    except OSError:
        return []


def default_simd_path():
    """The path the CPU kernels take by default here: 'AVX-512' where the CPU has AVX-512 F, BW,
    CD, DQ and VL (mrt_cpu_simd_avx512's test), else 'AVX2' where it has x86-64-v3
    (mrt_cpu_simd_avx2's), else 'portable'."""
    flags = cpu_flags()
    need = ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl")
    return "AVX-512" if all(x in flags for x in need) else "AVX2" if has_v3() else "portable"


def has_v3():
    """Whether the CPU has x86-64-v3 (AVX2, FMA, BMI1/2, F16C, LZCNT (abm), MOVBE)."""
    flags = cpu_flags()
    return all(x in flags for x in ("avx2", "fma", "bmi1", "bmi2", "f16c", "abm", "movbe"))


def timeout_s():
    return float(os.environ.get("NUMERIC_TIMEOUT", "120"))


def run_cmd(cmd, what):
    return harness.run_cmd(cmd, what, timeout_s())


last_lines = harness.tail


def same_bits(x_outs, y_outs, names, xtag, ytag, bw):
    """Require bit-identical outputs of two runs on the same inputs."""
    for k in names:
        x, y = x_outs[k], y_outs[k]
        if x.shape != y.shape or x.dtype != y.dtype:
            raise CaseFail("run-twice: output %s%s: shape/dtype %s %s in run %s, %s %s in %s"
                           % (k, bw, list(x.shape), x.dtype, xtag, list(y.shape), y.dtype, ytag))
        if x.tobytes() != y.tobytes():
            xi = x.view({1: np.uint8, 2: np.uint16, 4: np.uint32}.get(x.dtype.itemsize, np.uint64))
            bad = np.argwhere(xi != y.view(xi.dtype))
            i = tuple(bad[0])
            raise CaseFail("run-twice: output %s%s differs between run %s and %s: %d elements,"
                           " first at index %s: %r vs %r"
                           % (k, bw, xtag, ytag, len(bad), fmt_index(i), x[i].item(), y[i].item()))


def build_env():
    """Compiler settings for the in-process driver, computed once: (cc, cflags, libs, home)."""
    modelc = harness.modelc_path()
    home = os.environ.get("MODELC_HOME") or os.path.dirname(os.path.dirname(os.path.abspath(modelc)))
    # modelc says how to compile and link against the runtime it was built with.
    cflags = shlex.split(subprocess.run([modelc, "--print-cflags"], capture_output=True, text=True).stdout)
    libs = shlex.split(subprocess.run([modelc, "--print-libs"], capture_output=True, text=True).stdout)
    return shlex.split(os.environ.get("CC") or "cc"), cflags, libs, home


class Runner:
    def __init__(self, name, opts):
        self.name, self.opts = name, opts
        self.model_path = os.path.join(CASES, name + ".model")
        spec_path = os.path.join(CASES, name + ".json")
        self.spec = {}
        if os.path.exists(spec_path):
            with open(spec_path) as f:
                self.spec = json.load(f)
        self.model = refinterp.parse_file(self.model_path)
        unknown = set(self.spec) - SPEC_KEYS
        if unknown:
            raise CaseFail("unknown keys in %s.json: %s" % (name, sorted(unknown)))
        for key, decls in (("inputs", self.model.inputs), ("params", self.model.params)):
            extra = set(self.spec.get(key, {})) - {d.name for d in decls}
            if extra:
                raise CaseFail("%s.json: no %s named %s" % (name, key[:-1], sorted(extra)))
        extra = set(self.spec.get("expected", {})) | set(self.spec.get("tol", {}))
        extra |= set(self.spec["bits"]) if isinstance(self.spec.get("bits"), list) else set()
        extra -= set(self.model.outputs)
        if extra:
            raise CaseFail("%s.json: no output named %s" % (name, sorted(extra)))
        self.has_batch = self.model.batch_name is not None and any(
            isinstance(x, str) for d in self.model.inputs for x in d.dims)
        self.max_batch = self.spec.get("max_batch", 4 if self.has_batch else None)
        self.atol = self.spec.get("atol", 1e-5)
        self.rtol = self.spec.get("rtol", 1e-5)
        b = self.spec.get("bits", False)
        self.bits = set(self.model.outputs) if b is True else set(b or [])
        self.maxdiff, self.maxdiff_tol = 0.0, self.atol
        self.cpu_maxdiff, self.cpu_tol = None, None   # --vs-cpu: the device vs the CPU
        self.notes = []
        self.ran = None   # "precision": "bf16": what the runs computed in ("bf16", or the fallback's)
        if self.spec.get("precision", "f32") not in ("f32", "bf16"):
            raise CaseFail("%s.json: precision must be f32 or bf16" % name)

    def tol(self, out):
        t = self.spec.get("tol", {}).get(out, {})
        return t.get("atol", self.atol), t.get("rtol", self.rtol)

    def batches(self):
        if not self.has_batch:
            return [None]
        lb = literal_batch(self.model, self.spec)
        if lb is not None:
            return [lb]
        bs = list(self.spec.get("batches", [1, 3]))
        if len(self.model.sym_names) < 2:
            return bs
        dims = self.spec.get("dims", {})
        return [dict({n: dims.get(n, [5])[i % len(dims.get(n, [5]))] for n in self.model.sym_names[1:]},
                     **{self.model.batch_name: b}) for i, b in enumerate(bs)]

    def max_sizes(self, batch):
        """The sizes at every symbol's bound, with this batch."""
        s = {n: self.spec.get("max_dims", {}).get(n, 16) for n in self.model.sym_names[1:]}
        s[self.model.batch_name] = batch
        return s

    def reference(self, inputs, params):
        try:
            return refinterp.run_model(self.model, params, inputs)
        except Exception as e:  # noqa: BLE001
            raise CaseFail("reference interpreter failed: %s: %s" % (type(e).__name__, e))

    def check_expected(self, outs, who, batch_free_only=False):
        """The literal expected values. With batch_free_only (a batch the literals were not written
        for), an output is checked when its literal has the output's shape (or is a scalar): the
        outputs that do not depend on the batch, such as edge values fed through a fixed input."""
        for k, lit in self.spec.get("expected", {}).items():
            if k not in outs:
                raise CaseFail("expected value for unknown output '%s'" % k)
            if batch_free_only and not isinstance(lit, dict) and np.ndim(lit) and np.shape(lit) != outs[k].shape:
                continue
            shape = outs[k].shape
            if isinstance(lit, dict) and "arange" in lit:   # start + 0, 1, 2, ... in C order
                lit = (lit["arange"] + np.arange(int(np.prod(shape, dtype=np.int64)))).reshape(shape)
            hk = {np.dtype(np.float16): "f16", np.dtype(np.uint16): "bf16"}.get(outs[k].dtype)
            want = refinterp.half_encode(hk, np.asarray(lit, np.float64)) if hk else np.array(lit, dtype=outs[k].dtype)
            if want.ndim == 0 and len(shape):                 # a scalar fills the whole output
                want = np.full(shape, want, dtype=want.dtype)
            atol, rtol = self.tol(k)
            try:
                compare(k, outs[k], want, atol, rtol, k in self.bits, "")
            except CaseFail as e:
                raise CaseFail("%s vs literal expected: %s" % (who, e))

    def write_io(self, d, tag, inputs, params):
        return harness.write_io(d, tag, self.model, inputs, params)

    def execute(self, d, prog, tag, wpath, ipaths, extra=(), env=None):
        """(outputs, process), or (None, process) when the run exits non-zero."""
        return harness.execute(d, prog, tag, self.model, wpath, ipaths, extra,
                               device=self.opts.device, timeout=timeout_s(), env=env)

    def thread_counts(self, d, prog, files, ref, a1, bw):
        """The A inputs at each of the spec's thread counts: vs the reference, and bit for bit vs A1."""
        for t in self.spec["threads"]:
            o, p = self.execute(d, prog, "T%d" % t, *files, extra=("--threads", str(t)))
            if o is None:
                raise CaseFail("run with --threads %d%s failed (exit %d): %s"
                               % (t, bw, p.returncode, last_lines(p.stderr + p.stdout)))
            self.check_outputs(o, ref, "%s, --threads %d" % (bw, t), use_bits=True)
            same_bits(a1, o, self.model.outputs, "A1", "--threads %d" % t, bw)
        note = "bit-identical at --threads %s" % ", ".join(str(t) for t in self.spec["threads"])
        if note not in self.notes:
            self.notes.append(note)

    def simd_paths(self, d, prog, files, ref, a1, bw):
        """The A inputs with MODELRT_SIMD=portable, and with MODELRT_SIMD=avx2 (the x86-64-v3
        copies) where the default is AVX-512 and the CPU has v3: vs the reference, and bit for
        bit vs A1."""
        modes = ["portable"] + (["avx2"] if default_simd_path() == "AVX-512" and has_v3() else [])
        for mode in modes:
            env = dict(os.environ, MODELRT_SIMD=mode)
            o, p = self.execute(d, prog, "P" + mode, *files, env=env)
            if o is None:
                raise CaseFail("run with MODELRT_SIMD=%s%s failed (exit %d): %s"
                               % (mode, bw, p.returncode, last_lines(p.stderr + p.stdout)))
            self.check_outputs(o, ref, "%s, MODELRT_SIMD=%s" % (bw, mode), use_bits=True)
            same_bits(a1, o, self.model.outputs, "A1 (%s path)" % default_simd_path(), "MODELRT_SIMD=" + mode, bw)
        if "portable path" not in " ".join(self.notes):
            self.notes.append("%s bit-identical to the %s one" % (" and ".join(
                {"portable": "portable path", "avx2": "AVX2 (x86-64-v3) path"}[m] for m in modes), default_simd_path()))

    def scaled_atol(self, atol, ref):
        """atol plus "tol_of_max" times max |ref| over ref's finite values."""
        f = self.spec.get("tol_of_max", 0.0)
        if not f:
            return atol
        r = np.asarray(ref, dtype=np.float64)
        return atol + f * float(np.max(np.abs(r[np.isfinite(r)]), initial=0.0))

    def check_outputs(self, outs, ref, what, use_bits):
        for k in self.model.outputs:
            atol, rtol = self.tol(k)
            atol = self.scaled_atol(atol, ref[k])
            md, tol = compare(k, outs[k], ref[k], atol, rtol, use_bits and k in self.bits, what)
            if md >= self.maxdiff:
                self.maxdiff, self.maxdiff_tol = md, tol

    def leading_batch_everywhere(self):
        """True when every input and output has exactly the batch as its leading axis."""
        for d in self.model.inputs:
            if not d.dims or d.dims[0] != self.model.batch_name or self.model.batch_name in d.dims[1:]:
                return False
        shapes = []
        for b in (2, 3):
            inputs, params = make_io(self.model, {}, b, "A")
            shapes.append({k: v.shape for k, v in self.reference(inputs, params).items()})
        for k in self.model.outputs:
            s2, s3 = shapes[0][k], shapes[1][k]
            if not s2 or s2[0] != 2 or s3[0] != 3 or s2[1:] != s3[1:]:
                return False
        return True

    def run(self):
        env = self.spec.get("env", {})
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update({k: str(v) for k, v in env.items()})
        try:
            return self.run_in_env()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def run_in_env(self):
        t0 = time.time()
        if self.opts.ref_only:
            for b in self.batches():
                if "expect_error" in self.spec:
                    try:
                        refinterp.run_model(self.model, *reversed(make_io(self.model, self.spec, b, "A")))
                    except refinterp.ModelError:
                        continue
                    raise CaseFail("expect_error: the reference accepts the inputs (it should reject them)")
                inputs, params = make_io(self.model, self.spec, b, "A")
                ref = self.reference(inputs, params)
                self.check_expected(ref, "reference")
                inputs, params = make_io(self.model, self.spec, b, "B")
                self.reference(inputs, params)
            return "(reference only)"
        modelc = self.opts.modelc
        if self.opts.keep:
            d = tempfile.mkdtemp(prefix="numeric_%s_" % self.name)
            self.notes.append("files in %s" % d)
            ctx = contextlib.nullcontext(d)
        else:
            ctx = tempfile.TemporaryDirectory(prefix="numeric_%s_" % self.name)
        with ctx as d:
            prog = os.path.join(d, self.name)
            cmd = [modelc, self.model_path, "-o", prog]
            if self.max_batch is not None:
                cmd += ["--max-batch", str(self.max_batch)]
            cmd += self.exe_flags()
            p = run_cmd(cmd, "compile")
            if p.returncode != 0 or not os.path.exists(prog):
                raise CaseFail("compile failed (exit %d): %s" % (p.returncode, last_lines(p.stderr + p.stdout)))
            if "expect_error" in self.spec:
                self.expect_error(d, prog)
                self.notes.append("%.1fs" % (time.time() - t0))
                return None
            # the in-process driver links the emitted C only (modelc --print-cflags/--print-libs
            # give no way to build NAME.cu): it has no CUDA, so it runs on the CPU only
            on_cpu = (self.opts.device or "cpu").startswith("cpu")
            driver = None if self.opts.no_inprocess or not on_cpu else self.build_driver(d)
            if not on_cpu and not self.opts.no_inprocess:
                self.notes.append("in-process runs not on %s" % self.opts.device)
            for b in self.batches():
                bw = sizes_str(self.model, b)
                io = {v: make_io(self.model, self.spec, b, v) for v in "AB"}
                refs = {v: self.reference(*io[v]) for v in "AB"}
                fixed = b is None or literal_batch(self.model, self.spec) is not None
                self.check_expected(refs["A"], "reference", batch_free_only=not fixed)
                files = {v: self.write_io(d, "%s%s" % (v, btag(b)), *io[v]) for v in "AB"}
                outs = {}
                for tag, v, extra in (("A1", "A", ()), ("B", "B", ()), ("A2", "A", ()),
                                      ("A3", "A", () if self.opts.no_repeat else ("--repeat", "3"))):
                    o, p = self.execute(d, prog, tag, *files[v], extra=extra)
                    if o is None:
                        raise CaseFail("run %s%s failed (exit %d): %s"
                                       % (tag, bw, p.returncode, last_lines(p.stderr + p.stdout)))
                    outs[tag] = o
                    if tag == "A1":
                        self.check_stderr(p.stderr)
                    if tag in ("A1", "B"):
                        self.check_outputs(o, refs[v], "%s, inputs %s" % (bw, v) if bw else " (inputs %s)" % v,
                                           use_bits=(v == "A"))
                        if v == "A":
                            self.check_expected(o, "executable", batch_free_only=not fixed)
                for tag in ("A2", "A3"):
                    same_bits(outs["A1"], outs[tag], self.model.outputs, "A1",
                              tag + (" (--repeat 3)" if tag == "A3" else ""), bw)
                if self.spec.get("threads") and on_cpu:
                    self.thread_counts(d, prog, files["A"], refs["A"], outs["A1"], bw)
                if self.spec.get("simd_paths") and on_cpu:
                    self.simd_paths(d, prog, files["A"], refs["A"], outs["A1"], bw)
                if getattr(self.opts, "vs_cpu", False) and not on_cpu:
                    self.vs_cpu(d, prog, files["A"], outs["A1"], bw)
                if driver:
                    self.inprocess(d, driver, b, files, refs, bw)
                if "same_as" in self.spec and (self.opts.device or "cpu").startswith("cpu"):
                    self.same_as(d, files["A"], outs["A1"], bw)
                elif "same_as" in self.spec and b == self.batches()[0]:
                    # its regions pinned to cpu:N stay on the CPU while the twin runs on the GPU:
                    # the GEMMs round differently, so bit identity holds on the CPU only
                    self.notes.append("same_as not checked on %s" % self.opts.device)
            self.oversize(d, prog)
        self.notes.append("%.1fs" % (time.time() - t0))
        return None

    def vs_cpu(self, d, prog, files, dev_outs, bw):
        """The same executable on the CPU, inputs A: every output against the device's run."""
        o, p = harness.execute(d, prog, "cpu", self.model, *files, device="cpu", timeout=timeout_s())
        if o is None:
            raise CaseFail("run on cpu%s failed (exit %d): %s" % (bw, p.returncode, last_lines(p.stderr + p.stdout)))
        for k in self.model.outputs:
            atol, rtol = self.tol(k)
            atol = self.scaled_atol(atol, o[k])
            md, tol = compare(k, dev_outs[k], o[k], atol, rtol, k in self.bits,
                              "%s: %s vs cpu" % (bw, self.opts.device))
            if self.cpu_maxdiff is None or md >= self.cpu_maxdiff:
                self.cpu_maxdiff, self.cpu_tol = md, tol

    def check_stderr(self, err):
        want = self.spec.get("stderr")
        # "stderr" names a CPU path (a blocked conv's choice, a notice): a case built with CUDA on a
        # machine with a GPU runs there under the default device (auto), where the outputs are
        # still checked and that CPU line cannot appear
        if want and "auto selected cuda" in err:
            want = None
        if want and want not in err:
            raise CaseFail("stderr of the first run lacks %r: %s" % (want, last_lines(err) or "(empty)"))
        if self.spec.get("precision") == "bf16":
            self.ran = ("bf16 -> f32 fallback: this CPU has no avx512_bf16" if BF16_FALLBACK in err else
                        "bf16 -> f32 on the GPU (bf16 is the CPU's)" if BF16_GPU in err else "bf16")

    def flags(self, precision=True):
        f = self.spec.get("flags", [])
        md = ["--max-dim", ",".join("%s=%d" % (n, v) for n, v in self.max_sizes(0).items() if n != self.model.batch_name)] \
            if len(self.model.sym_names) > 1 else []
        pf = ["--precision", self.spec["precision"]] if precision and "precision" in self.spec else []
        return md + shlex.split(os.environ.get("MODELC_FLAGS", "")) + (shlex.split(f) if isinstance(f, str) else list(f)) + pf

    def exe_flags(self, precision=True):
        """flags() for building an executable: with --cuda-every K on the CPU, the cases left out
        are built without their CUDA half (nvcc is most of a case's compile time, and the CPU path
        is what runs; the cudasim suite compiles and runs every case's .cu)."""
        return self.flags(precision) + ([] if self.name in self.opts.nvcc_cases else ["--no-cuda"])

    def expect_error(self, d, prog):
        """The A inputs must make the executable fail cleanly (exit 1, the message in stderr)."""
        want = self.spec["expect_error"]
        for b in self.batches():
            inputs, params = make_io(self.model, self.spec, b, "A")
            try:
                refinterp.run_model(self.model, params, inputs)
                raise CaseFail("expect_error: the reference accepts the inputs (it should reject them)")
            except refinterp.ModelError:
                pass
            wpath, ipaths = self.write_io(d, "E%s" % btag(b), inputs, params)
            o, p = self.execute(d, prog, "E%s" % btag(b), wpath, ipaths)
            err = (p.stderr or "").strip()
            if o is not None or p.returncode != 1:
                raise CaseFail("expect_error: run exited %d, want 1 with %r in stderr: %s"
                               % (p.returncode, want, last_lines(p.stderr + p.stdout)))
            if want not in err:
                raise CaseFail("expect_error: stderr %r does not contain %r" % (last_lines(err), want))
            self.notes.append("rejected: %s" % last_lines(err, 1))

    def same_as(self, d, files, outs, bw):
        """Compile cases/OTHER.model and require bit-identical outputs on the same inputs/params."""
        other = self.spec["same_as"]
        path = os.path.join(CASES, other + ".model")
        om = refinterp.parse_file(path)
        if om.outputs != self.model.outputs or [i.name for i in om.inputs] != [i.name for i in self.model.inputs] \
                or sorted(x.name for x in om.params) != sorted(x.name for x in self.model.params):
            raise CaseFail("same_as %s: the models differ in inputs, params or outputs" % other)
        prog = os.path.join(d, "same_as_" + other)
        cmd = [self.opts.modelc, path, "-o", prog]
        if self.max_batch is not None:
            cmd += ["--max-batch", str(self.max_batch)]
        cmd += self.exe_flags(precision=False)
        p = run_cmd(cmd, "compile (same_as %s)" % other)
        if p.returncode != 0 or not os.path.exists(prog):
            raise CaseFail("compile of same_as %s failed (exit %d): %s"
                           % (other, p.returncode, last_lines(p.stderr + p.stdout)))
        o, p = self.execute(d, prog, "S", *files)
        if o is None:
            raise CaseFail("run of same_as %s%s failed (exit %d): %s"
                           % (other, bw, p.returncode, last_lines(p.stderr + p.stdout)))
        try:
            same_bits(outs, o, self.model.outputs, self.name, other, bw)
        except CaseFail as e:
            raise CaseFail("same_as %s: not bit-identical: %s" % (other, str(e).replace("run-twice: ", "")))
        self.notes.append("bit-identical to %s" % other)

    def build_driver(self, d):
        """Emit C for the case and link it with run_aba.c (the in-process A, B, A driver)."""
        cc, cflags, libs, home = self.opts.build_env
        ec = os.path.join(d, "emit")
        cmd = [self.opts.modelc, self.model_path, "--emit-c", "-o", ec]
        if self.max_batch is not None:
            cmd += ["--max-batch", str(self.max_batch)]
        cmd += self.flags()
        p = run_cmd(cmd, "modelc --emit-c")
        if p.returncode != 0:
            raise CaseFail("modelc --emit-c failed (exit %d): %s" % (p.returncode, last_lines(p.stderr + p.stdout)))
        srcs = [f for f in os.listdir(ec) if f.endswith(".c")] if os.path.isdir(ec) else []
        info = None
        for f in os.listdir(ec) if os.path.isdir(ec) else []:
            if f.endswith(".h"):
                with open(os.path.join(ec, f)) as fh:
                    m = re.search(r"extern\s+const\s+mrt_model_info\s+(\w+)\s*;", fh.read())
                if m:
                    info = m.group(1)
        if not srcs or not info:
            raise CaseFail("modelc --emit-c wrote no .c file or no mrt_model_info in %s" % os.listdir(ec))
        exe = os.path.join(d, "run_aba")
        cmd = (cc + ["-O2", "-std=c11", "-D_GNU_SOURCE", "-I" + os.path.join(home, "include", "modelc"),
                     "-I" + ec, "-DMODEL_INFO=" + info] + cflags
               + shlex.split(os.environ.get("MODELC_CFLAGS", ""))
               + [os.path.join(HERE, "run_aba.c")] + [os.path.join(ec, f) for f in sorted(srcs)]
               + libs + ["-o", exe])
        p = run_cmd(cmd, "building the in-process driver")
        if p.returncode != 0:
            raise CaseFail("building the in-process driver (tests/numeric/run_aba.c) failed: %s"
                           % last_lines(p.stderr + p.stdout))
        return exe

    def inprocess(self, d, driver, b, files, refs, bw):
        """Inputs A, B, A on one model object; A runs bit-identical, each run vs the reference."""
        wpath = files["A"][0] or "-"
        batch = {"A": b or 1, "B": b or 1}
        if b is not None and literal_batch(self.model, self.spec) is None:
            # B at the largest sizes: the arena is reused at another size between the A runs
            batch["B"] = self.max_batch or 64
            if isinstance(b, dict):
                batch["B"] = self.max_sizes(batch["B"])
            io = make_io(self.model, self.spec, batch["B"], "B")
            refs = dict(refs, B=self.reference(*io))
            files = dict(files, B=self.write_io(d, "Bmax", *io))
        cmd = [driver, wpath, self.opts.device or "-", str(len(self.model.inputs))]
        for v in "AB":
            bv = batch[v]
            cmd.append(",".join(str(bv[n]) for n in self.model.sym_names) if isinstance(bv, dict) else str(bv))
            cmd += [files[v][1][i.name] for i in self.model.inputs]
        prefix = os.path.join(d, "inproc")
        cmd.append(prefix)
        p = run_cmd(cmd, "in-process run")
        if p.returncode != 0:
            raise CaseFail("in-process run A, B, A%s failed (exit %d): %s"
                           % (bw, p.returncode, last_lines(p.stderr + p.stdout)))
        outs = {}
        for tag in ("A1", "B", "A2"):
            outs[tag] = {k: np.load("%s_%s_%d.npy" % (prefix, tag, i))
                         for i, k in enumerate(self.model.outputs)}
        where = "%s, in-process run %%s (A, then B at %s, then A)" % (bw, sizes_str(self.model, batch["B"]).strip(" ()"))
        self.check_outputs(outs["A1"], refs["A"], where % "A1", use_bits=True)
        self.check_outputs(outs["B"], refs["B"], where % "B", use_bits=False)
        same_bits(outs["A1"], outs["A2"], self.model.outputs, "A1", "A2 (in process, after B)", bw)

    def oversize(self, d, prog):
        mode = self.spec.get("oversize", "correct")
        if (mode == "skip" or not self.has_batch or literal_batch(self.model, self.spec) is not None
                or not self.leading_batch_everywhere()):
            return
        b = 2 * (self.max_batch or 64) + 1
        inputs, params = make_io(self.model, self.spec, b, "A")
        ref = self.reference(inputs, params)
        wpath, ipaths = self.write_io(d, "big", inputs, params)
        o, p = self.execute(d, prog, "big", wpath, ipaths)
        if o is None:
            if mode == "correct_or_error" and p.returncode == 1 and p.stderr.strip():
                self.notes.append("batch %d rejected: %s" % (b, last_lines(p.stderr, 1)))
                return
            raise CaseFail("run at batch %d > max-batch %s (chunked) failed (exit %d): %s"
                           % (b, self.max_batch, p.returncode, last_lines(p.stderr + p.stdout)))
        self.check_outputs(o, ref, " (batch %d > max-batch %s, chunked)" % (b, self.max_batch), False)


def run_case(args):
    name, opts = args
    np.seterr(all="ignore")
    try:
        r = Runner(name, opts)
    except Exception as e:  # noqa: BLE001
        return False, "FAIL: numeric/%s: bad case: %s: %s" % (name, type(e).__name__, e)
    try:
        extra = r.run()
    except CaseFail as e:
        return False, "FAIL: numeric/%s: %s" % (name, e)
    except Exception as e:  # noqa: BLE001
        return False, "FAIL: numeric/%s: runner error: %s: %s" % (name, type(e).__name__, e)
    # maxdiff: the largest |out - ref| over all outputs and runs; tol: the tolerance
    # (atol + rtol*|ref|, or 0 for a bit-exact output) at that element.
    line = "PASS: numeric/%s (%smaxdiff %.2g, tol %.2g%s)" % (
        name, r.ran + ": " if r.ran else "", r.maxdiff, r.maxdiff_tol,
        "" if r.cpu_maxdiff is None else "; vs cpu maxdiff %.2g, tol %.2g" % (r.cpu_maxdiff, r.cpu_tol))
    if "expect_error" in r.spec and not extra:
        line = "PASS: numeric/%s (run rejected as expected)" % name
    if extra:
        line = "PASS: numeric/%s %s" % (name, extra)
    if opts.verbose and r.notes:
        line += "  [" + "; ".join(r.notes) + "]"
    return True, line


def main():
    np.seterr(all="ignore")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-k", action="append", default=[], help="run cases whose name contains this")
    ap.add_argument("-j", type=int, default=2, help="parallel cases (default 2)")
    ap.add_argument("--device", help="passed to the executables as --device")
    ap.add_argument("--keep", action="store_true", help="keep the temporary files")
    ap.add_argument("--ref-only", action="store_true", help="check the reference only")
    ap.add_argument("--no-repeat", action="store_true", help="skip the --repeat 3 run")
    ap.add_argument("--no-inprocess", action="store_true",
                    help="skip the in-process A, B, A run (tests/numeric/run_aba.c)")
    ap.add_argument("--vs-cpu", action="store_true",
                    help="also run each executable on the CPU and compare with the --device run")
    ap.add_argument("--cases", metavar="FILE",
                    help="run only the cases named in FILE (a name per line, '+ NAME' too; '#' starts a comment)")
    ap.add_argument("--cuda-every", type=int, default=1, metavar="K",
                    help="on the CPU, nvcc compiles the .cu of every K-th case (in name order), the others are "
                         "built with --no-cuda (make test: 4; default 1: every case)")
    ap.add_argument("-v", "--verbose", action="store_true")
    opts = ap.parse_args()
    opts.modelc = harness.modelc_path()
    names = sorted(f[:-6] for f in os.listdir(CASES) if f.endswith(".model"))
    on_cpu = (opts.device or "cpu").startswith("cpu")
    opts.nvcc_cases = set(names[::opts.cuda_every] if on_cpu and opts.cuda_every > 1 else names)
    if opts.cases:
        with open(opts.cases) as f:
            listed = [ln.split("#", 1)[0].strip().lstrip("+").strip() for ln in f]
        listed = [n for n in listed if n]
        unknown = sorted(set(listed) - set(names))
        if unknown:
            print("FAIL: numeric/cases: %s names no case: %s" % (opts.cases, ", ".join(unknown)))
            return 1
        names = [n for n in names if n in listed]
    if opts.k:
        names = [n for n in names if any(k in n for k in opts.k)]
    if not opts.ref_only and harness.compiler_missing(opts.modelc, ["numeric/" + n for n in names]):
        return 1
    opts.build_env = None if opts.ref_only else build_env()
    t0 = time.time()
    fails = harness.run_jobs(run_case, [(n, opts) for n in names], opts.j)
    if opts.verbose:
        print("numeric: %d cases, %d failed, %.1fs" % (len(names), fails, time.time() - t0))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
