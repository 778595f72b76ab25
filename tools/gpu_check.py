#!/usr/bin/env python3
"""tools/gpu_check.py — every GPU check of modelc in one script (or: make gpu-check).

    python3 tools/gpu_check.py [--time-limit S] [-j N] [--cpu-dry-run]

For a machine with a CUDA GPU, nvcc and PyTorch; it fetches nothing from the network. Steps,
each printed with a timestamp:
  build      make -jN all with nvcc (the runtime's CUDA kernels, CUDA-enabled modelc)
  runtime    bash tests/runtime/run.sh (its runtime/cuda/* checks run the kernels on the GPU)
  numeric    tests/numeric/run.py --device cuda (every case against the reference interpreter,
             run-twice, in-process and chunked runs), and, for every case, one executable run
             with --device cuda and with --device cpu on the same inputs: each output compared
             between the two (NaN and infinities in the same places; |cuda - cpu| <= atol +
             rtol*|cpu| with the case's tolerance; bit-exact where the case asks for bits)
  examples   the example tests (digits, resnet18, gpt2, minilm) with MODELRT_DEVICE=cuda
             against their committed PyTorch references
  B09        softmax of [2000, 2001, 1999], of [[800,1,1],[-1000,-1000,-1001]] and of
             matmul(q,k)+bias with |bias| up to 2000, through a tiny model on cuda
  B12        X [131073, 16384] f32 (2^31 + 16384 elements), X[i,0] = ln(i+1), Y = softmax(X,
             axis=1) on cuda: Y[131072,0] = 0.8888957, Y[131072,1:] = 6.781684e-06, the first
             row 6.1035156e-05, the whole last row written, sampled rows by formula (rel. tol.
             1e-4); needs 20 GB
             of free GPU memory and 20 GB of free disk (skipped with the reason otherwise)
  bench      bench/run.py --device cuda --quick --compile (timings, with torch.compile)
then ONE summary table (check, status, max error, tolerance, time). The numeric runs go in the
background while the examples, B09 and B12 run; the bench runs last, alone. Exit status: 0 when
every correctness check passed (skips allowed), 1 when one failed, 2 when there is no CUDA GPU
here (said plainly, within seconds) or on a usage error.

--time-limit (default 285 s) is the whole script's budget: a step that cannot start in what is
left is reported as SKIP (no time left), and the bench gets what remains. --cpu-dry-run runs the
same steps with --device cpu in place of cuda, without looking for a GPU (to test this script on
a machine without one; B12 is then skipped).
"""
import argparse
import concurrent.futures as cf
import multiprocessing as mp
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import types

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T0 = time.time()
PRINT_LOCK = threading.Lock()


def log(msg):
    with PRINT_LOCK:
        print("[%s +%6.1fs] %s" % (time.strftime("%H:%M:%S"), time.time() - T0, msg), flush=True)


def ncores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def sh(cmd, timeout, env=None, cwd=ROOT):
    """Run a command; (exit status, stdout+stderr). 124 on timeout."""
    e = dict(os.environ)
    e.update(env or {})
    try:
        p = subprocess.run(cmd, cwd=cwd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=max(1, timeout), shell=isinstance(cmd, str))
        return p.returncode, p.stdout
    except subprocess.TimeoutExpired as ex:
        out = ex.stdout.decode(errors="replace") if isinstance(ex.stdout, bytes) else (ex.stdout or "")
        return 124, out + "\n(timed out after %ds)" % timeout
    except OSError as ex:
        return 127, str(ex)


def tail(s, n=4):
    lines = [l for l in s.strip().splitlines() if l.strip()]
    return " | ".join(lines[-n:])


class Results:
    def __init__(self):
        self.rows = []
        self.lock = threading.Lock()

    def add(self, check, status, err="-", tol="-", secs=None, detail=""):
        with self.lock:
            self.rows.append(dict(check=check, status=status, err=err, tol=tol, secs=secs,
                                  detail=detail))
        log("%s: %s%s" % (check, status, " — " + detail if detail else ""))


def fmt_e(v):
    return "-" if v is None else "%.2g" % v


# ------------------------------------------------------------------------------ the GPU

def detect_gpu():
    """(found, description, why-not)."""
    why = []
    smi = shutil.which("nvidia-smi")
    if smi:
        rc, out = sh([smi, "--query-gpu=name,memory.total,memory.free", "--format=csv,noheader"], 20)
        if rc == 0 and out.strip():
            return True, "nvidia-smi: " + "; ".join(out.strip().splitlines()), None
        why.append("nvidia-smi: %s" % (tail(out, 1) or "exit %d" % rc))
    else:
        why.append("nvidia-smi: not found")
    for exe in ("build/digits/digits", "build/bench/digits/digits", "build/resnet18/resnet18"):
        p = os.path.join(ROOT, exe)
        if os.access(p, os.X_OK):
            rc, out = sh([p, "--list-devices"], 20)
            cuda = [l for l in out.splitlines() if l.startswith("cuda:")]
            if cuda:
                return True, "%s --list-devices: %s" % (exe, "; ".join(cuda)), None
            why.append("%s --list-devices: %s" % (exe, tail(out, 1)))
            if "no CUDA devices" in out:   # a CUDA build asked the driver: conclusive
                return False, None, "; ".join(why)
            break
    rc, out = sh([sys.executable, "-c", "import torch; print(torch.cuda.is_available() and "
                  "torch.cuda.get_device_name(0))"], 60)
    if rc == 0 and out.strip().splitlines()[-1] not in ("False", ""):
        return True, "torch: " + out.strip().splitlines()[-1], None
    why.append("torch.cuda.is_available(): %s" % (out.strip().splitlines()[-1] if rc == 0 and out.strip()
                                                  else "torch not importable"))
    return False, None, "; ".join(why)


def gpu_free_bytes(dev):
    """Free memory on the GPU, by nvidia-smi or torch; None if unknown."""
    idx = int(dev.split(":")[1]) if ":" in dev else 0
    smi = shutil.which("nvidia-smi")
    if smi:
        rc, out = sh([smi, "--query-gpu=memory.free", "--format=csv,noheader,nounits",
                      "-i", str(idx)], 20)
        if rc == 0:
            try:
                return int(out.strip().splitlines()[0]) * 2**20
            except (ValueError, IndexError):
                pass
    rc, out = sh([sys.executable, "-c", "import torch; print(torch.cuda.mem_get_info(%d)[0])" % idx], 60)
    try:
        return int(out.strip().splitlines()[-1]) if rc == 0 else None
    except (ValueError, IndexError):
        return None


# ------------------------------------------------------------------------------ numeric: cuda vs cpu

def numeric_module():
    d = os.path.join(ROOT, "tests", "numeric")
    if d not in sys.path:
        sys.path.insert(0, d)
    import importlib
    return importlib.import_module("run")


def xdev_case(args):
    """Run one numeric case's A inputs on `dev` and on the CPU with one executable; compare.
    Returns (name, status, maxdiff, tol at it, rel, message)."""
    name, dev, modelc = args
    np.seterr(all="ignore")
    try:
        num = numeric_module()
        opts = types.SimpleNamespace(device=dev, modelc=modelc, build_env=None, keep=False,
                                     verbose=False, ref_only=False, no_repeat=True, no_inprocess=True)
        r = num.Runner(name, opts)
        worst = (0.0, 0.0, 0.0)       # maxdiff, its tol, maxdiff / max|cpu|
        with tempfile.TemporaryDirectory(prefix="gpucheck_%s_" % name) as d:
            prog = os.path.join(d, name)
            cmd = [modelc, r.model_path, "-o", prog]
            if r.max_batch is not None:
                cmd += ["--max-batch", str(r.max_batch)]
            p = num.run_cmd(cmd, "compile")
            if p.returncode != 0:
                return name, "FAIL", None, None, None, "compile failed: " + tail(p.stderr + p.stdout, 2)
            for b in r.batches():
                bw = "" if b is None else " (batch %d)" % b
                inputs, params = num.make_io(r.model, r.spec, b, "A")
                wpath, ipaths = r.write_io(d, "A%s" % b, inputs, params)
                outs = {}
                for tag, device in (("gpu", dev), ("cpu", "cpu")):
                    opts.device = device
                    o, p = r.execute(d, prog, tag, wpath, ipaths)
                    if o is None:
                        return (name, "FAIL", None, None, None, "run on %s%s failed (exit %d): %s"
                                % (device, bw, p.returncode, tail(p.stderr + p.stdout, 2)))
                    outs[tag] = o
                for k in r.model.outputs:
                    atol, rtol = r.tol(k)
                    md, tol = num.compare(k, outs["gpu"][k], outs["cpu"][k], atol, rtol,
                                          k in r.bits, "%s: %s vs cpu" % (bw, dev))
                    c = np.asarray(outs["cpu"][k], dtype=np.float64)
                    fin = np.isfinite(c)
                    scale = float(np.max(np.abs(c[fin]), initial=0.0)) if c.size else 0.0
                    if md >= worst[0]:
                        worst = (md, tol, md / scale if scale else 0.0)
        return name, "PASS", worst[0], worst[1], worst[2], ""
    except Exception as e:  # noqa: BLE001  (CaseFail and anything else)
        return name, "FAIL", None, None, None, "%s%s" % ("" if type(e).__name__ == "CaseFail"
                                                         else type(e).__name__ + ": ", e)


def numeric_cross(dev, jobs, timeout, res, ks):
    t0 = time.time()
    modelc = os.path.join(ROOT, "build", "bin", "modelc")
    try:
        num = numeric_module()
        names = sorted(f[:-6] for f in os.listdir(num.CASES) if f.endswith(".model"))
        if ks:
            names = [n for n in names if any(k in n for k in ks)]
    except Exception as e:  # noqa: BLE001
        res.add("numeric %s vs cpu" % dev, "FAIL", secs=time.time() - t0,
                detail="cannot load tests/numeric/run.py: %s: %s" % (type(e).__name__, e))
        return
    log("numeric %s vs cpu: %d cases, %d at a time" % (dev, len(names), jobs))
    results, fails = [], []
    # forkserver: this process has threads (a fork could copy a held lock)
    with cf.ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("forkserver")) as pool:
        futs = [pool.submit(xdev_case, (n, dev, modelc)) for n in names]
        try:
            for f in cf.as_completed(futs, timeout=timeout):
                results.append(f.result())
        except cf.TimeoutError:
            for f in futs:
                f.cancel()
            fails.append("timed out after %ds with %d of %d cases done" % (timeout, len(results), len(names)))
    worst = max((r for r in results if r[2] is not None), key=lambda r: (r[2] / r[3]) if r[3] else r[2],
                default=None)
    for n, st, md, tol, rel, msg in sorted(results):
        if st != "PASS":
            fails.append("%s: %s" % (n, msg))
            res.add("numeric %s vs cpu: %s" % (dev, n), "FAIL", secs=None, detail=msg)
    npass = sum(r[1] == "PASS" for r in results)
    res.add("numeric %s vs cpu (%d cases)" % (dev, len(names)), "FAIL" if fails else "PASS",
            err=fmt_e(worst[2]) if worst else "-", tol=fmt_e(worst[3]) if worst else "-",
            secs=time.time() - t0,
            detail="%d passed, %d failed%s" % (npass, len(names) - npass,
                                              "; worst %s (maxdiff %.2g, %.2g of max|cpu|)"
                                              % (worst[0], worst[2], worst[4]) if worst else ""))


def numeric_harness(dev, jobs, timeout, res, ks):
    t0 = time.time()
    cmd = [sys.executable, "tests/numeric/run.py", "-j", str(jobs), "--device", dev]
    for k in ks:
        cmd += ["-k", k]
    rc, out = sh(cmd, timeout)
    lines = out.splitlines()
    fails = [l for l in lines if l.startswith("FAIL:")]
    npass = sum(l.startswith("PASS:") for l in lines)
    worst, worst_tol = None, None
    for l in lines:
        m = re.search(r"maxdiff ([0-9.eE+-]+), tol ([0-9.eE+-]+)", l)
        if l.startswith("PASS:") and m:
            md, tl = float(m.group(1)), float(m.group(2))
            if worst is None or (md / tl if tl else md) > (worst / worst_tol if worst_tol else worst):
                worst, worst_tol = md, tl
    for l in fails:
        log("  " + l)
    ok = rc == 0 and not fails and npass > 0
    res.add("numeric --device %s vs reference" % dev, "PASS" if ok else "FAIL", err=fmt_e(worst),
            tol=fmt_e(worst_tol), secs=time.time() - t0,
            detail="%d passed, %d failed%s" % (npass, len(fails),
                                              "" if ok or fails else "; exit %d: %s" % (rc, tail(out, 2))))


# ------------------------------------------------------------------------------ examples

EXAMPLES = [("digits", "demo"), ("resnet18", "test"), ("gpt2", "test"), ("minilm", "test")]


def run_example(name, target, dev, timeout, res):
    t0 = time.time()
    b = os.path.join(ROOT, "build")
    rc, out = sh(["make", "-s", "-C", "examples/" + name, target,
                  "MODELC=" + os.path.join(b, "bin", "modelc"), "B=" + b], timeout,
                 env={"MODELRT_DEVICE": dev})
    secs = time.time() - t0
    if name == "minilm" and "not installed" in out:
        res.add("example %s (%s)" % (name, dev), "SKIP", secs=secs,
                detail=tail([l for l in out.splitlines() if "not installed" in l][0], 1))
        return
    devs = re.findall(r"time: .*device ([a-z]+:?[0-9]*)", out)
    errs = [float(x) for x in re.findall(r"max (?:abs diff|\|logit - torch\| =|\|got - torch\| =) "
                                         r"([0-9.]+e[+-][0-9]+)", out)]
    rels = [float(x) for x in re.findall(r"relative (?:to max\|torch\| \([^)]*\) = )?([0-9.]+e[+-][0-9]+)", out)]
    fails = [l for l in out.splitlines() if l.startswith("FAIL")]
    bad_dev = [d for d in devs if not d.startswith(dev.split(":")[0])]
    ok = rc == 0 and not fails and devs and not bad_dev
    why = "; ".join(fails) or ("ran on %s, not %s" % (", ".join(bad_dev), dev) if bad_dev else
                               "no 'time:' line (did it run?)" if not devs else
                               "exit %d: %s" % (rc, tail(out, 3)) if rc else "")
    for l in out.splitlines():
        if l.startswith("PASS") or l.startswith("FAIL") or l.startswith("accuracy") or \
                l.startswith("agree") or l.startswith("time:"):
            log("  %s: %s" % (name, l))
    tol = {"digits": "1e-4 abs", "minilm": "1e-4 rel"}.get(name, "see check.py")
    if name in ("resnet18", "gpt2"):
        m = re.search(r"<= ([0-9.e+-]+)\)", out)
        tol = (m.group(1) + " rel") if m else tol
    res.add("example %s (%s)" % (name, dev), "PASS" if ok else "FAIL",
            err=fmt_e(max(rels)) + " rel" if rels else fmt_e(max(errs)) if errs else "-",
            tol=tol, secs=secs, detail=why if not ok else "")


# ------------------------------------------------------------------------------ B09, B12

B09_MODEL = """# Field case B09 (gpu_check): softmax must subtract the row maximum.
model b09_check {
  input a: f32[3]
  input b: f32[2, 3]
  input q: f32[8, 16]
  input k: f32[16, 8]
  input bias: f32[8, 8]
  output sa = softmax(a)
  output sb = softmax(b, axis=1)
  output p = softmax(add(matmul(q, k), bias))
}
"""


def softmax64(x, axis=-1):
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def check_b09(dev, timeout, res):
    t0 = time.time()
    modelc = os.path.join(ROOT, "build", "bin", "modelc")
    with tempfile.TemporaryDirectory(prefix="gpucheck_b09_") as d:
        mp = os.path.join(d, "b09_check.model")
        with open(mp, "w") as f:
            f.write(B09_MODEL)
        exe = os.path.join(d, "b09_check")
        rc, out = sh([modelc, mp, "-o", exe], timeout)
        if rc != 0:
            res.add("B09 softmax large logits (%s)" % dev, "FAIL", secs=time.time() - t0,
                    detail="modelc failed: " + tail(out, 3))
            return
        rng = np.random.default_rng(1)
        ins = {"a": np.array([2000, 2001, 1999], np.float32),
               "b": np.array([[800, 1, 1], [-1000, -1000, -1001]], np.float32),
               "q": rng.standard_normal((8, 16)).astype(np.float32),
               "k": rng.standard_normal((16, 8)).astype(np.float32),
               "bias": rng.uniform(-2000, 2000, (8, 8)).astype(np.float32)}
        cmd = [exe, "--device", dev, "--time"]
        for k, v in ins.items():
            np.save(os.path.join(d, k + ".npy"), v)
            cmd += ["--input", "%s=%s" % (k, os.path.join(d, k + ".npy"))]
        for k in ("sa", "sb", "p"):
            cmd += ["--output", "%s=%s" % (k, os.path.join(d, "out_" + k + ".npy"))]
        rc, out = sh(cmd, timeout)
        if rc != 0:
            res.add("B09 softmax large logits (%s)" % dev, "FAIL", secs=time.time() - t0,
                    detail="run failed (exit %d): %s" % (rc, tail(out, 3)))
            return
        got = {k: np.load(os.path.join(d, "out_" + k + ".npy")) for k in ("sa", "sb", "p")}
    q, k = ins["q"].astype(np.float64), ins["k"].astype(np.float64)
    want = {"sa": (np.array([0.2447285, 0.6652409, 0.0900306]), 1e-6),
            "sb": (np.array([[1, 0, 0], [0.4223188, 0.4223188, 0.1553624]]), 1e-6),
            "p": (softmax64(q @ k + ins["bias"].astype(np.float64)), 3e-4)}
    bad, errs = [], {}
    for name, (w, atol) in want.items():
        g = got[name].astype(np.float64)
        if g.shape != w.shape:
            bad.append("%s: shape %s, want %s" % (name, list(g.shape), list(w.shape)))
            continue
        if not np.all(np.isfinite(g)):
            bad.append("%s: %d non-finite values (exp overflow?): %s" % (name, int(np.sum(~np.isfinite(g))),
                                                                       np.array2string(g.ravel()[:6])))
            continue
        err = float(np.max(np.abs(g - w)))
        errs[name] = err
        if err > atol:
            bad.append("%s: max|got - want| %.3g > %.0e" % (name, err, atol))
    res.add("B09 softmax large logits (%s)" % dev, "FAIL" if bad else "PASS",
            err="%s / %s" % (fmt_e(max([errs[k] for k in ("sa", "sb") if k in errs], default=None)),
                             fmt_e(errs.get("p"))), tol="1e-6 / 3e-4 abs", secs=time.time() - t0, detail="; ".join(bad))


B12_ROWS, B12_COLS = 131073, 16384
B12_MODEL = """# Field case B12 (gpu_check): a softmax over more than 2^31 elements.
model b12_check {
  input x: f32[%d, %d]
  output y = softmax(x, axis=1)
}
"""


def check_b12(dev, timeout, res, dry_run):
    name = "B12 softmax 2^31+ elements (%s)" % dev
    t0 = time.time()
    R, C = B12_ROWS, B12_COLS
    small = os.environ.get("GPU_CHECK_B12_SHAPE")   # R,C: only to test this code with --cpu-dry-run
    if dry_run and small:
        R, C = (int(v) for v in small.split(","))
    nbytes = R * C * 4
    if dry_run and not small:
        res.add(name, "SKIP", detail="--cpu-dry-run: needs a GPU with 20 GB free")
        return
    free = None if dry_run else gpu_free_bytes(dev)
    if not dry_run and (free is None or free < 20e9):
        res.add(name, "SKIP", detail="needs 20 GB of free GPU memory; %s" %
                ("free memory unknown" if free is None else "%.1f GB free" % (free / 1e9)))
        return
    if timeout < 60:
        res.add(name, "SKIP", detail="no time left (%ds)" % timeout)
        return
    d = None
    for base in ("/dev/shm", tempfile.gettempdir(), os.path.join(ROOT, "build")):
        try:
            if os.path.isdir(base) and shutil.disk_usage(base).free > 2.3 * nbytes:
                d = tempfile.mkdtemp(prefix="gpucheck_b12_", dir=base)
                break
        except OSError:
            continue
    if d is None:
        res.add(name, "SKIP", detail="needs %.0f GB of free disk (or /dev/shm) for X and Y"
                % (2.3 * nbytes / 1e9))
        return
    try:
        modelc = os.path.join(ROOT, "build", "bin", "modelc")
        mp = os.path.join(d, "b12_check.model")
        with open(mp, "w") as f:
            f.write(B12_MODEL % (R, C))
        exe = os.path.join(d, "b12_check")
        rc, out = sh([modelc, mp, "-o", exe], min(timeout, 120))
        if rc != 0:
            res.add(name, "FAIL", secs=time.time() - t0, detail="modelc failed: " + tail(out, 3))
            return
        # X: a sparse file of zeros with column 0 written (one page per row).
        xp, yp = os.path.join(d, "x.npy"), os.path.join(d, "y.npy")
        x = np.lib.format.open_memmap(xp, mode="w+", dtype=np.float32, shape=(R, C))
        x[:, 0] = np.log(np.arange(1, R + 1, dtype=np.float64)).astype(np.float32)
        x.flush()
        del x
        log("B12: wrote X %s (%.1f GB, sparse) in %.1fs; running softmax on %s"
            % (xp, nbytes / 1e9, time.time() - t0, dev))
        rc, out = sh([exe, "--input", "x=" + xp, "--output", "y=" + yp, "--device", dev, "--time",
                      "--memory"], max(30, timeout - (time.time() - t0) - 15))
        for l in out.splitlines():
            if l.startswith("time:") or l.startswith("memory:"):
                log("  B12: " + l)
        os.unlink(xp)
        if rc != 0:
            res.add(name, "FAIL", secs=time.time() - t0,
                    detail="run failed (exit %d): %s" % (rc, tail(out, 3)))
            return
        y = np.load(yp, mmap_mode="r")
        bad = []
        if y.shape != (R, C) or y.dtype != np.float32:
            res.add(name, "FAIL", secs=time.time() - t0,
                    detail="Y is %s%s" % (y.dtype, list(y.shape)))
            return
        # f32 row sums of 16384 terms: ~1e-6 expected; an index bug is off by far more (the
        # runtime's own b12 check in tests/runtime/cuda_check.c uses 1e-4 too)
        rtol = 1e-4
        last = np.array(y[R - 1], dtype=np.float64)
        first = np.array(y[0], dtype=np.float64)
        # Y[i,0] = (i+1)/(i+C), Y[i,j>0] = 1/(i+C): at the field case's shape the last row is
        # 0.8888957 and 6.781684e-06, the first row 1/16384 = 6.1035156e-05
        checks = [("Y[%d,0]" % (R - 1), last[:1], R / (R - 1 + C)),
                  ("Y[%d,1:]" % (R - 1), last[1:], 1 / (R - 1 + C)),
                  ("Y[0,:]", first, 1 / C)]
        # sampled rows by formula: Y[i,0] = (i+1)/(i+16384), Y[i,j>0] = 1/(i+16384); the last 64
        # rows (around element 2^31) in full
        rows = np.unique(np.concatenate([np.arange(0, R, 257), np.arange(max(0, R - 64), R)]))
        worst = 0.0
        for name_, g, w in checks:
            if not np.all(np.isfinite(g)):
                bad.append("%s: %d non-finite (unwritten?)" % (name_, int(np.sum(~np.isfinite(g)))))
                continue
            e = float(np.max(np.abs(g - w) / w))
            worst = max(worst, e)
            if e > rtol:
                i = int(np.argmax(np.abs(g - w)))
                bad.append("%s: got %.9g at [%d], want %.7g (rel %.2g)" % (name_, g[i], i, w, e))
        sample = np.array(y[rows], dtype=np.float64)
        i = rows.astype(np.float64)
        w0, w1 = (i + 1) / (i + C), 1 / (i + C)
        e0 = np.abs(sample[:, 0] - w0) / w0
        e1 = np.abs(sample[:, 1:] - w1[:, None]) / w1[:, None]
        if not np.all(np.isfinite(sample)):
            bad.append("sampled rows: %d non-finite values" % int(np.sum(~np.isfinite(sample))))
        else:
            es = max(float(e0.max()), float(e1.max()))
            worst = max(worst, es)
            if es > rtol:
                r = int(rows[np.argmax(np.maximum(e0, e1.max(axis=1)))])
                bad.append("sampled rows: rel error %.2g at row %d" % (es, r))
        res.add(name, "FAIL" if bad else "PASS", err="%.2g rel" % worst, tol="%.0e rel" % rtol,
                secs=time.time() - t0, detail="; ".join(bad) or "%d rows checked, the last in full"
                % (len(rows) + 1))
    finally:
        shutil.rmtree(d, ignore_errors=True)


# ------------------------------------------------------------------------------ main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--time-limit", type=float, default=285, help="seconds for everything (default 285)")
    ap.add_argument("-j", type=int, default=0, help="parallel numeric cases (default: cores / 2 each)")
    ap.add_argument("--device", default="cuda", help="the GPU to check (default cuda, i.e. cuda:0)")
    ap.add_argument("-k", action="append", default=[],
                    help="only the numeric cases whose name contains this (default: all)")
    ap.add_argument("--no-bench", action="store_true", help="skip the bench step")
    ap.add_argument("--cpu-dry-run", action="store_true",
                    help="use --device cpu in place of the GPU, without looking for one")
    a = ap.parse_args()
    deadline = T0 + a.time_limit

    def left():
        return int(deadline - time.time())

    dry = a.cpu_dry_run
    dev = "cpu" if dry else a.device
    log("gpu_check: %s, %d cores, python %s" % (ROOT, ncores(), sys.version.split()[0]))
    if not dry:
        found, desc, why = detect_gpu()
        if not found:
            print("gpu_check: no CUDA GPU on this machine (%s); these checks need one: nothing "
                  "was run. Run `make gpu-check` on a machine with an NVIDIA GPU, nvcc and "
                  "PyTorch." % why, flush=True)
            return 2
        log("GPU: " + desc)
    else:
        log("--cpu-dry-run: every 'cuda' step runs with --device cpu")
    res = Results()
    # two numeric runs share the cores; much of their time is nvcc, process and CUDA start-up
    jobs = a.j or max(1, ncores() * 3 // 4)

    # 1. build
    t0 = time.time()
    nvcc = shutil.which("nvcc") or next((p for p in ("/usr/local/cuda/bin/nvcc",)
                                         if os.access(p, os.X_OK)), None)
    env = {"NVCC": nvcc} if nvcc else {}
    if not nvcc and not dry:
        res.add("build (make all, nvcc)", "FAIL", detail="nvcc not found (PATH, /usr/local/cuda/bin): "
                "the CUDA build needs it")
    else:
        log("build: make -j%d all%s" % (ncores(), " NVCC=" + nvcc if nvcc else ""))
        rc, out = sh(["make", "-j%d" % ncores(), "all"] + (["NVCC=" + nvcc] if nvcc else []),
                     min(left(), 240), env=env)
        cfg = ""
        try:
            with open(os.path.join(ROOT, "build", "obj", "runtime.cfg")) as f:
                cfg = f.read()
        except OSError:
            pass
        cuda_built = cfg.startswith("nvcc=") and not cfg.startswith("nvcc= ")
        if rc != 0:
            res.add("build (make all, nvcc)", "FAIL", secs=time.time() - t0,
                    detail="exit %d: %s" % (rc, tail(out, 6)))
        elif not cuda_built and not dry:
            res.add("build (make all, nvcc)", "FAIL", secs=time.time() - t0,
                    detail="built without CUDA (build/obj/runtime.cfg: %s)" % cfg.strip()[:80])
        else:
            res.add("build (make all, nvcc)", "PASS", secs=time.time() - t0,
                    detail="" if cuda_built else "without CUDA (dry run)")
    built = res.rows[-1]["status"] == "PASS"

    if built:
        # 2. runtime unit tests (+ their CUDA kernel checks)
        t0 = time.time()
        rc, out = sh(["bash", "tests/runtime/run.sh"], min(left(), 120), env={"B": "build"})
        lines = out.splitlines()
        fails = [l for l in lines if l.startswith("FAIL")]
        cuda_pass = [l for l in lines if l.startswith("PASS: runtime/cuda/") and "/start" not in l]
        for l in fails + [l for l in lines if "runtime/cuda/start" in l or "b12" in l or l.startswith("SKIP")]:
            log("  " + l)
        worst = None
        for l in cuda_pass:
            m = re.search(r"maxdiff ([0-9.eE+-]+) tolerance ([0-9.eE+-]+)", l)
            if m and float(m.group(2)) > 0:
                r = float(m.group(1)) / float(m.group(2))
                worst = r if worst is None else max(worst, r)
        no_cuda = not cuda_pass and not dry
        ok = rc == 0 and not fails and not no_cuda
        res.add("runtime tests (tests/runtime/run.sh)", "PASS" if ok else "FAIL",
                err="%.2g of tol" % worst if worst is not None else "-", tol="per kernel",
                secs=time.time() - t0,
                detail="%d passed (%d CUDA kernel checks), %d failed%s" % (
                    sum(l.startswith("PASS") for l in lines), len(cuda_pass), len(fails),
                    "; the CUDA kernel checks did not run" if no_cuda else
                    "; exit %d: %s" % (rc, tail(out, 2)) if rc and not fails else ""))

        # 3. numeric in the background: the harness on the GPU, and GPU vs CPU case by case
        bg = []
        ntime = max(30, left() - 75)
        for fn, args in ((numeric_harness, (dev, jobs, ntime, res, a.k)),
                         (numeric_cross, (dev, jobs, ntime, res, a.k))):
            t = threading.Thread(target=fn, args=args, daemon=True, name=fn.__name__)
            t.start()
            bg.append(t)
        log("numeric: harness --device %s and %s-vs-cpu comparison started (-j %d each)" % (dev, dev, jobs))

        # 4. examples, B09, B12 in the foreground
        for name, target in EXAMPLES:
            if left() < 40:
                res.add("example %s (%s)" % (name, dev), "SKIP", detail="no time left")
                continue
            log("example %s: MODELRT_DEVICE=%s make -C examples/%s %s" % (name, dev, name, target))
            run_example(name, target, dev, min(left() - 30, 150), res)
        if left() > 30:
            check_b09(dev, min(60, left()), res)
        else:
            res.add("B09 softmax large logits (%s)" % dev, "SKIP", detail="no time left")
        check_b12(dev, left() - 60, res, dry)

        for t in bg:
            t.join(timeout=max(1, left() - 40))
            if t.is_alive():
                res.add("numeric (%s)" % t.name, "FAIL", detail="still running at the time limit")

        # 5. bench, last and alone
        t0 = time.time()
        budget = left() - 15
        if a.no_bench:
            res.add("bench/run.py --device %s --quick" % dev, "SKIP", detail="--no-bench")
        elif budget < 40:
            res.add("bench/run.py --device %s --quick" % dev, "SKIP", detail="no time left (%ds)" % budget)
        else:
            cmd = [sys.executable, "bench/run.py", "--device", dev, "--quick", "--compile",
                   "--budget", str(max(10, budget - 60))]
            log("bench: " + " ".join(cmd[1:]))
            rc, out = sh(cmd, budget, env={"PYTHONUNBUFFERED": "1"})
            table = out[out.find("\nmodelc vs PyTorch"):] if "\nmodelc vs PyTorch" in out else tail(out, 20)
            with PRINT_LOCK:
                print(table.rstrip(), flush=True)
            diffs = re.findall(r"\s([0-9.]+e[+-][0-9]+)\s+([0-9.]+e[+-][0-9]+|-)\s*$", out, re.M)
            rel = max((float(r) for _, r in diffs if r != "-"), default=None)
            res.add("bench/run.py --device %s --quick --compile" % dev,
                    "INFO" if rc == 0 else "ERROR", err=("%.2g rel vs torch" % rel) if rel is not None else "-",
                    tol="(timing only)", secs=time.time() - t0,
                    detail="" if rc == 0 else "exit %d: %s" % (rc, tail(out, 3)))

    # summary
    rows = res.rows
    hdr = ("check", "status", "max error", "tolerance", "time")
    cells = [(r["check"], r["status"], r["err"], r["tol"], "-" if r["secs"] is None else "%.1fs" % r["secs"])
             for r in rows]
    w = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(hdr)]
    print()
    print("gpu_check summary (%s, %.0fs)" % ("cpu dry run" if dry else dev, time.time() - T0))
    print("  ".join(h.ljust(x) for h, x in zip(hdr, w)))
    for c in cells:
        print("  ".join(v.ljust(x) for v, x in zip(c, w)))
    for r in rows:
        if r["status"] in ("FAIL", "SKIP", "ERROR") and r["detail"]:
            print("%s: %s: %s" % (r["status"], r["check"], r["detail"]))
    failed = [r for r in rows if r["status"] == "FAIL"]
    print("gpu_check: %d checks, %d failed, %d skipped" % (
        len(rows), len(failed), sum(r["status"] == "SKIP" for r in rows)), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
