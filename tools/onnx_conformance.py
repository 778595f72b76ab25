#!/usr/bin/env python3
"""tools/onnx_conformance.py — the ONNX backend node tests, run through modelc.

    python3 tools/onnx_conformance.py [--quick] [-k SUBSTRING] [-j 2] [--modelc build/bin/modelc]

Each case of onnx.backend.test.case.node.collect_testcases() (a one-op model with its inputs and
expected outputs, written by the ONNX project) is imported by tools/onnx2model.py, compiled by
modelc for the CPU, run by the generated executable on the case's inputs (.npy), and its
outputs compared with the expected ones at the case's tolerance (rtol 1e-3, atol 1e-7 unless
the case sets others), dtype and shape included, as onnx's backend test runner does.

A case is *passed*, *unsupported* (the importer refused it; its reason is shown) or *failed*
(wrong values, wrong shape or dtype, a compile error or a crash). The report is one table per op
type and the line `N of M ONNX node tests pass, K unsupported, F failed`.

Compiled cases are cached under build/onnx-conformance/ (keyed by the .model text, the weights
and the modelc binary), so a second run only re-runs the executables. Cases run in -j worker
processes under nice.

--quick runs a fixed subset (every 6th case, and those in QUICK_EXTRA) and prints PASS/FAIL lines for tests/run_tests.sh;
with --expect FILE, a case listed there (one that passed when the file was written) that no
longer passes is a FAIL. --write-expect FILE records the passing cases.
"""
import argparse
import hashlib
import multiprocessing as mp
import os
import re
import shutil
import subprocess
import sys
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

MODELC = os.path.join(ROOT, "build", "bin", "modelc")
CACHE = os.path.join(ROOT, "build", "onnx-conformance")


def load_cases():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import io
        import contextlib
        with contextlib.redirect_stderr(io.StringIO()):
            from onnx.backend.test.case.node import collect_testcases
            cases = collect_testcases()
    return [c for c in cases if c.kind == "node"]


_OPS = None


def op_type_of(case):
    """The op type a case tests: its one node's, or the op whose name starts the test's name."""
    global _OPS
    nodes = case.model.graph.node
    types = sorted({n.op_type for n in nodes})
    if len(nodes) == 1:
        return nodes[0].op_type
    if _OPS is None:
        from onnx import defs
        _OPS = sorted({s.name for s in defs.get_all_schemas_with_history()}, key=len, reverse=True)
    key = case.name[len("test_"):].replace("_", "").lower()
    for pre, op in (("nllloss", "NegativeLogLikelihoodLoss"), ("sce", "SoftmaxCrossEntropyLoss")):
        if key.startswith(pre):
            return op
    for op in _OPS:
        if key.startswith(op.lower()):
            return op
    return types[0] if types else "?"


def case_key(src, params_blob):
    h = hashlib.sha256()
    h.update(src.encode())
    h.update(params_blob)
    h.update(TOOLS_KEY.encode())
    return h.hexdigest()[:16]


TOOLS_KEY = ""


def tools_key(modelc):
    """The contents of modelc and the runtime library it links: a rebuild that changes
    neither keeps the cache."""
    h = hashlib.sha256()
    lib = os.path.join(os.path.dirname(os.path.dirname(modelc)), "lib", "libmodelrt.a")
    for p in (modelc, lib):
        if os.path.exists(p):
            with open(p, "rb") as f:
                h.update(f.read())
    return h.hexdigest()


def compare(name, got, want, rtol, atol):
    if got.shape != want.shape:
        return "output %s: shape %s, expected %s" % (name, list(got.shape), list(want.shape))
    if got.dtype != want.dtype:
        return "output %s: dtype %s, expected %s" % (name, got.dtype, want.dtype)
    if want.dtype.kind in "fc":
        g, w = np.atleast_1d(got.astype(np.float64)), np.atleast_1d(want.astype(np.float64))
        nan_g, nan_w = np.isnan(g), np.isnan(w)
        if not np.array_equal(nan_g, nan_w):
            return "output %s: NaN where expected %s" % (name, "none" if nan_g.any() else "some")
        ok = ~nan_w
        eq_inf = (g == w) & ok
        with np.errstate(invalid="ignore"):
            diff = np.abs(g - w)
        diff[eq_inf | ~ok] = 0
        bad = diff > atol + rtol * np.abs(w)
        bad &= ok & ~eq_inf
        if bad.any():
            k = np.argmax(np.where(bad, diff, -1))
            idx = tuple(int(t) for t in np.unravel_index(k, g.shape))
            return "output %s: %d of %d values off, max |diff| %.3g at %s (got %r, expected %r; rtol %g atol %g)" % (
                name, int(bad.sum()), g.size, float(diff.max()), list(idx), float(g[idx]), float(w[idx]), rtol, atol)
        return None
    if not np.array_equal(got, want):
        return "output %s: %d of %d values differ" % (name, int((got != want).sum()), got.size)
    return None


def run_case(case):
    """(name, op type, status, reason); status is pass, unsupported or fail."""
    try:
        return _run_case(case)
    except Exception as e:  # noqa: BLE001  (a runner bug fails the case, never the run)
        return case.name, op_type_of(case), "fail", "runner crashed: %s: %s" % (type(e).__name__, e)


def _run_case(case):
    import onnx2model
    name = case.name
    op = op_type_of(case)
    try:
        os.nice(10)
    except OSError:
        pass
    import onnx
    inputs, outputs = case.data_sets[0]
    inputs = [onnx.numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else v for v in inputs]
    outputs = [onnx.numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else v for v in outputs]
    # An input the importer needs as a constant (a shape, axes, pads, scales ... that the
    # case feeds as a graph input) is bound to the case's value and becomes an initializer,
    # as a runtime that specializes on such inputs would; such a case is counted as
    # passed "with bound inputs" (the status pass-bound).
    model = case.model
    bound = []
    while True:
        try:
            import contextlib
            import io
            with contextlib.redirect_stderr(io.StringIO()):  # the importer's warnings
                conv = onnx2model.convert(model, name="m", keep_unused=True, widen=True)
            break
        except onnx2model.OnnxImportError as e:
            need = getattr(e, "needs_input", None)
            names = [vi.name for vi in model.graph.input]
            if need and need in names and len(bound) < 4:
                orig = [vi.name for vi in case.model.graph.input]
                model = bind_input(model, need, inputs[orig.index(need)] if len(orig) == len(inputs) else None)
                if model is None:
                    return name, op, "unsupported", str(e)
                bound.append(need)
                continue
            return name, op, "unsupported", str(e)
        except Exception as e:  # noqa: BLE001  (an importer bug is a failure, never a refusal)
            return name, op, "fail", "importer crashed: %s: %s" % (type(e).__name__, e)
    # an empty input that only gives a dtype (CastLike's `like`) is left out of the program
    if bound or conv.omitted_inputs:
        keep = [k for k, vi in enumerate(case.model.graph.input)
                if vi.name not in bound and vi.name not in conv.omitted_inputs]
        inputs = [inputs[k] for k in keep]
    if conv.folded_outputs == len(conv.outputs):
        return name, op, "unsupported", ("every output folded at import time%s: nothing left for modelc to compute"
                                         % (" after binding " + ", ".join(bound) if bound else ""))
    d = os.path.join(CACHE, name)
    os.makedirs(d, exist_ok=True)
    src = conv.source()
    import safetensors_np
    wpath = os.path.join(d, "m.safetensors")
    safetensors_np.write(wpath, conv.params)
    with open(wpath, "rb") as f:
        key = case_key(src, f.read())
    exe = os.path.join(d, "m")
    stamp = os.path.join(d, "key")
    if not (os.path.exists(exe) and os.path.exists(stamp) and open(stamp).read() == key):
        with open(os.path.join(d, "m.model"), "w") as f:
            f.write(src)
        if os.path.exists(stamp):
            os.unlink(stamp)
        try:
            p = subprocess.run([MODELC, os.path.join(d, "m.model"), "-o", exe, "--no-cuda", "-O1"],
                               capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            return name, op, "fail", "modelc timed out"
        if p.returncode != 0:
            msg = (p.stderr or p.stdout).strip().splitlines()
            return name, op, "fail", "modelc: " + (" | ".join(msg[:3]) if msg else "exit %d" % p.returncode)
        with open(stamp, "w") as f:
            f.write(key)
    if len(inputs) != len(conv.inputs):
        return name, op, "fail", "%d inputs in the data, %d in the model" % (len(inputs), len(conv.inputs))
    cmd = [exe, "--weights", wpath, "--device", "cpu", "--threads", "1"]
    for k, ((oname, mname, dt, shape), arr) in enumerate(zip(conv.inputs, inputs)):
        p = os.path.join(d, "in%d.npy" % k)
        np.save(p, to_modelc(np.asarray(arr), dt))
        cmd += ["--input", "%s=%s" % (mname, p)]
    outs = []
    for k, (oname, mname, dt, shape) in enumerate(conv.outputs):
        p = os.path.join(d, "out%d.npy" % k)
        if os.path.exists(p):
            os.unlink(p)
        outs.append(p)
        cmd += ["--output", "%s=%s" % (mname, p)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return name, op, "fail", "the program timed out"
    if r.returncode != 0:
        msg = (r.stderr or "").strip().splitlines()
        return name, op, "fail", "run failed (%d): %s" % (r.returncode, " | ".join(msg[-2:]))
    if len(outputs) != len(outs):
        return name, op, "fail", "%d expected outputs, %d in the model" % (len(outputs), len(outs))
    for (oname, mname, dt, shape), p, want in zip(conv.outputs, outs, outputs):
        got = np.load(p)
        want = np.asarray(want)
        if dt == "bf16":
            if want.dtype.name != "bfloat16":
                return name, op, "fail", "output %s: bf16, expected %s" % (oname, want.dtype)
            got = (got.astype(np.uint32) << 16).view(np.float32)
            want = want.astype(np.float32)
        elif want.dtype == object:
            want = want.astype(got.dtype)
        elif mname in conv.output_narrow:
            nd = conv.output_narrow[mname]
            import ml_dtypes  # its iinfo knows NumPy's integers and the sub-byte ones (int4 ...)
            info = ml_dtypes.iinfo(nd)
            if got.size and (got.min() < info.min or got.max() > info.max):
                return name, op, "fail", "output %s: widened %s values outside %s" % (oname, got.dtype, nd)
            got = got.astype(nd)
        why = compare(oname, got, want, case.rtol, case.atol)
        if why:
            return name, op, "fail", why
    return name, op, "pass-bound" if bound else "pass", ("bound: " + ", ".join(bound)) if bound else ""


# cases --quick runs on top of every 6th: one of each lowering the 6th would miss (issue 11:
# widened sub-byte and float8 Casts, CastLike's empty `like`, linear maps, the decomposed ops)
QUICK_EXTRA = ("test_cast_INT4_to_INT8", "test_cast_FLOAT8E5M2_to_FLOAT16", "test_castlike_UINT2_to_FLOAT",
               "test_resize_upsample_scales_cubic", "test_resize_tf_crop_and_resize_extrapolation_value",
               "test_dft_rfft", "test_affine_grid_2d", "test_col2im_pads", "test_rotary_embedding_interleaved",
               "test_rotary_embedding_with_rotary_dim", "test_lppool_2d_pads", "test_lrn", "test_swiglu_alpha",
               "test_reduce_max_bool_inputs", "test_bitshift_left_int32_overflow",
               "test_bitshift_right_int8_negative_shift", "test_attention_4d_causal_nonpad_batch_prefill")


def bind_input(model, name, value):
    """The model with graph input `name` turned into an initializer holding `value`."""
    import onnx
    if value is None:
        return None
    m = onnx.ModelProto()
    m.CopyFrom(model)
    value = np.asarray(value)
    if value.dtype == object:
        return None
    m.graph.initializer.append(onnx.numpy_helper.from_array(value, name))
    keep = [vi for vi in m.graph.input if vi.name != name]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    return m


def to_modelc(a, dt):
    """A case's input as the .npy modelc reads for dtype dt (bf16: the '<u2' bits)."""
    if dt == "bf16":
        f = a.astype(np.float32).view(np.uint32).astype(np.uint64)
        f = (f + 0x7FFF + ((f >> 16) & 1)) >> 16
        return f.astype(np.uint16)
    want = {"f32": np.float32, "f16": np.float16, "i32": np.int32, "i64": np.int64, "bool": np.bool_}[dt]
    if a.dtype != want:
        a = a.astype(want)
    return a


def main(argv=None):
    global MODELC, CACHE
    ap = argparse.ArgumentParser(description="Run the ONNX backend node tests through onnx2model and modelc.")
    ap.add_argument("--quick", action="store_true", help="a fixed subset (every 6th case and QUICK_EXTRA), PASS/FAIL lines")
    ap.add_argument("-k", action="append", default=[], help="only cases whose name contains this (repeatable)")
    ap.add_argument("-j", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--modelc", default=MODELC)
    ap.add_argument("--cache", default=CACHE, help="where compiled cases are kept (default build/onnx-conformance)")
    ap.add_argument("--expect", help="cases that must pass (one name a line)")
    ap.add_argument("--write-expect", help="write the names of the passing cases here")
    ap.add_argument("-v", action="store_true", help="print every case")
    args = ap.parse_args(argv)
    MODELC = os.path.abspath(args.modelc)
    CACHE = os.path.abspath(args.cache)
    if not os.path.exists(MODELC):
        print("FAIL: onnx: %s not found (run make first)" % MODELC)
        return 1
    try:
        import onnx  # noqa: F401
    except ImportError:
        print("FAIL: onnx: the 'onnx' Python package is not installed (tools/setup.sh installs it)")
        return 1
    cases = load_cases()
    cases.sort(key=lambda c: c.name)
    if args.quick:
        extra = set(QUICK_EXTRA)
        cases = [c for k, c in enumerate(cases) if k % 6 == 0 or c.name in extra]
    if args.k:
        cases = [c for c in cases if any(k in c.name for k in args.k)]
    os.makedirs(CACHE, exist_ok=True)
    ctx = mp.get_context("fork")
    with ctx.Pool(max(1, args.j), initializer=_init_worker, initargs=(MODELC, CACHE, tools_key(MODELC))) as pool:
        results = []
        for k, r in enumerate(pool.imap_unordered(run_case, cases, chunksize=2)):
            results.append(r)
            if sys.stderr.isatty() and not args.quick:
                sys.stderr.write("\r%d/%d" % (k + 1, len(cases)))
        if sys.stderr.isatty() and not args.quick:
            sys.stderr.write("\n")
    results.sort()
    by_op = {}
    for name, op, st, why in results:
        by_op.setdefault(op, []).append((name, st, why))
    M = len(results)
    N = sum(1 for r in results if r[2] in ("pass", "pass-bound"))
    NB = sum(1 for r in results if r[2] == "pass-bound")
    K = sum(1 for r in results if r[2] == "unsupported")
    F = sum(1 for r in results if r[2] == "fail")
    expect = set()
    if args.expect and os.path.exists(args.expect):
        expect = {l.strip() for l in open(args.expect) if l.strip() and not l.startswith("#")}
    if args.quick:
        for name, op, st, why in results:
            if st in ("pass", "pass-bound"):
                print("PASS: onnx/%s%s" % (name, " (%s)" % why if why else ""))
            elif st == "fail":
                print("FAIL: onnx/%s: %s" % (name, why))
            elif name in expect:
                print("FAIL: onnx/%s: passed before (%s), now refused: %s" % (name, args.expect, why))
            elif args.v:
                print("unsupported: onnx/%s: %s" % (name, why))
        print("%d of %d ONNX node tests pass, %d unsupported, %d failed (quick subset)" % (N, M, K, F))
    else:
        w = max(len(op) for op in by_op) if by_op else 10
        print("%-*s %6s %6s %6s   reasons" % (w, "op type", "pass", "unsup", "fail"))
        for op in sorted(by_op):
            rs = by_op[op]
            p = sum(1 for r in rs if r[1] in ("pass", "pass-bound"))
            u = sum(1 for r in rs if r[1] == "unsupported")
            f = sum(1 for r in rs if r[1] == "fail")
            reasons = sorted({short_reason(r[2]) for r in rs if r[1] not in ("pass", "pass-bound")})
            print("%-*s %6d %6d %6d   %s" % (w, op, p, u, f, "; ".join(reasons)[:200]))
            if args.v or f:
                for name, st, why in rs:
                    if st == "fail" or (args.v and st not in ("pass", "pass-bound")):
                        print("    %s %s: %s" % (st.upper(), name, why))
        print()
        top = sorted(by_op.items(), key=lambda kv: -sum(1 for r in kv[1] if r[1] == "unsupported"))[:20]
        print("most unsupported: " + ", ".join("%s %d" % (op, sum(1 for r in rs if r[1] == "unsupported"))
                                                for op, rs in top if any(r[1] == "unsupported" for r in rs)))
        print("(%d of the passes bind a shape-like input, such as Reshape's shape or Resize's scales, to the "
              "case's value at import time)" % NB)
        print("%d of %d ONNX node tests pass, %d unsupported, %d failed (%.1f%% pass)" % (N, M, K, F, 100.0 * N / max(M, 1)))
    if args.write_expect:
        with open(args.write_expect, "w") as f:
            f.write("# ONNX node test cases that pass (tools/onnx_conformance.py --write-expect)\n")
            for name, op, st, why in results:
                if st in ("pass", "pass-bound"):
                    f.write(name + "\n")
    lost = [r for r in results if r[0] in expect and r[2] not in ("pass", "pass-bound")]
    return 1 if F or lost else 0


def short_reason(why):
    why = re.sub(r"^unsupported node \S+ '[^']*' \(opset \d+\): ", "", why)
    why = re.sub(r"'[^']*'", "'…'", why)
    return why[:80]


def _init_worker(modelc, cache, key):
    global MODELC, CACHE, TOOLS_KEY
    MODELC, CACHE, TOOLS_KEY = modelc, cache, key


if __name__ == "__main__":
    sys.exit(main())
