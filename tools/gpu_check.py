#!/usr/bin/env python3
"""tools/gpu_check.py — every GPU check of modelc in one script (or: make gpu-check).

    python3 tools/gpu_check.py [--time-limit S] [-j N] [--gencode FLAGS] [--cpu-dry-run] [--dry-run]

For a machine with a CUDA GPU, nvcc and PyTorch; it fetches nothing from the network. Steps,
each printed with a timestamp:
  build      make -jN all NVCC_GENCODE=<this GPU> with nvcc (the runtime's CUDA kernels,
             CUDA-enabled modelc), for the GPU's own architecture alone (nvidia-smi's
             compute_cap, else -arch=native); MODELC_GENCODE is set to the same for every modelc
             below, so each generated .cu is compiled for one architecture, not three
  runtime    bash tests/runtime/run.sh (its runtime/cuda/* checks run the kernels on the GPU)
  numeric    tests/numeric/run.py --device cuda --vs-cpu: every case built ONCE, checked against
             the reference interpreter (run-twice, chunked runs), and for every batch its A inputs
             run by the same executable with --device cpu, each output compared between the two
             (NaN and infinities in the same places; |cuda - cpu| <= atol + rtol*|cpu| with the
             case's tolerance; bit-exact where the case asks for bits)
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
then ONE summary table (check, status, max error, tolerance, time) and the phase table (phase,
seconds, budget). The numeric run goes in the background while the examples, B09 and B12 run;
the bench runs last, alone. Exit status: 0 when every correctness check passed (skips allowed),
1 when one failed, 2 when there is no CUDA GPU here (said plainly, within seconds) or on a usage
error.

--time-limit (default 420 s) is the whole script's budget, shared out by PLAN below: each phase
has a share and runs until its planned end (time an earlier phase leaves flows to the later
ones; none eats into the shares after it); a check that cannot start in what its phase has left
is reported as SKIP. --dry-run prints that plan for --time-limit, checks that it is consistent
(the phases fill the limit, numeric ends with the phases beside it, every phase gets its minimum
at the default limit) and runs nothing (tests/runtime/run.sh runs it). --cpu-dry-run runs the
same steps with --device cpu in place of cuda, without looking for a GPU (to test this script
on a machine without one; B12 is then skipped).

What the shares rest on. Measured on the 2-core development VM (no GPU; load average about 6
from other builds, so wall times are inflated; CPU seconds = user + sys), 2026-12-01:
  make all, fresh build/, three targets: `time make -j2 all`: 69.6 s wall, 28.4 CPU-s; its
      longest job, `nvcc -O3 ... -c runtime/rt_cuda_kernels.cu`: 7.4 CPU-s for sm_80+sm_90+
      compute_90, 4.6 CPU-s for sm_90 alone. On the GPU machine's 16 cores: ~15 s expected.
  one numeric case, `modelc tests/numeric/cases/NAME.model -o P --max-batch 4`: 2.0-2.3 CPU-s
      with three targets (--no-cuda: 0.3 CPU-s), nvcc being most of it: `nvcc -O3 -c
      attention.cu` 1.9 CPU-s for three targets, 1.27 CPU-s for one (1.6 CPU-s per case in all).
      172 cases. Before, gpu_check built each twice (tests/numeric/run.py and a second,
      cuda-vs-cpu pass): 344 builds, ~790 CPU-s; now 172 builds of one target, ~275 CPU-s, or
      ~25 s on 12 parallel jobs.
  numeric cases on the CPU, everything (build, the reference interpreter, A1/B/A2/A3 per
      batch, the chunked run, the in-process driver): `time tests/numeric/run.py -j 1 -v` on 30
      cases (every 7th name): 162.6 s wall, 80.3 CPU-s, i.e. 2.7 CPU-s a case (3.1-9.7 s wall
      each, median 5.2 s under load); one target saves ~0.6 of it: ~360 CPU-s for all 172.
  the examples' builds, `modelc EXAMPLE.model -o P --max-batch 8`, three targets / sm_90 alone:
      digits 2.0 / 1.6, resnet18 14.3 / 10.5, gpt2 4.5 / 3.6, minilm 10.4 / 7.8 CPU-s (nvcc on
      resnet18.cu, 133 KB, is most of it; --no-cuda 0.7 CPU-s).
  bash tests/runtime/run.sh (CPU only here): 9.6 s wall.
  `tools/gpu_check.py --cpu-dry-run -k conv2d_grouped --no-bench -j 2` (build already done):
      runtime 10.5 s, numeric (one case) 12.5 s, examples 60.3 s (digits 7.9, resnet18 29.3,
      gpt2 7.8, minilm 15.3: each a one-target modelc build and CPU runs), B09 3.3 s; 74 s in all.
Measured on a GPU (an NVIDIA H200, 16 cores, driver 580, nvcc 13.0; 2026-12-04, the whole
check with --time-limit 420, its phase table): build 8.4 s, runtime 14.2 s, numeric 251 s (173
cases on 14 jobs: the GPU processes' starts dominate), examples 44.7 s (digits 2.7, resnet18
25.3, gpt2 16.3; minilm skipped: its package was not installed), B09 4.7 s, B12 26.2 s (8.8 s
of it the softmax's run, 16 GiB on the device), bench 112.9 s (--quick with torch.compile): 386
s in all. PLAN's shares below come from it: numeric runs the whole middle, the fg phases beside
it are shorter, and the default limit is 420 s. Before that run, the estimates were these:
Not measurable here: each GPU executable's start (CUDA context, and cuBLAS/cuBLASLt loaded on
first use; 0.5 to 1 s per process assumed), the GPU runs themselves, and B12's 8.6 GB of input
and output. A numeric case starts 9 GPU processes (A1, B, A2, A3 for each of 2 batches, and the
chunked run) and 2 CPU ones (--vs-cpu): 172 cases on 14 jobs are ~26 s of CPU work and 55 to
110 s of GPU starts, against the numeric share of 150 s; the examples' 26 CPU-s of builds and
their runs, against 70 s. The phase table printed at the end of a GPU run gives the real
seconds: resize PLAN's shares from it.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

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


# ------------------------------------------------------------------------------ numeric

def numeric_run(dev, jobs, timeout, res, ks):
    """tests/numeric/run.py --device DEV --vs-cpu: every case built once, checked against the
    reference interpreter on DEV, and its A inputs run on the CPU by the same executable and
    compared with DEV's outputs (two rows: vs reference, vs cpu)."""
    t0 = time.time()
    cmd = [sys.executable, "tests/numeric/run.py", "-j", str(jobs), "--device", dev]
    if not dev.startswith("cpu"):
        cmd.append("--vs-cpu")
    for k in ks:
        cmd += ["-k", k]
    rc, out = sh(cmd, timeout)
    lines = out.splitlines()
    fails = [l for l in lines if l.startswith("FAIL:")]
    npass = sum(l.startswith("PASS:") for l in lines)
    worst = {"ref": None, "cpu": None}   # (ratio to tol, maxdiff, tol, case)
    for l in lines:
        if not l.startswith("PASS:"):
            continue
        case = l.split()[1]
        for key, pat in (("ref", r"\(maxdiff ([0-9.eE+-]+), tol ([0-9.eE+-]+)"),
                         ("cpu", r"vs cpu maxdiff ([0-9.eE+-]+), tol ([0-9.eE+-]+)")):
            m = re.search(pat, l)
            if m:
                md, tl = float(m.group(1)), float(m.group(2))
                r = md / tl if tl else md
                if worst[key] is None or r > worst[key][0]:
                    worst[key] = (r, md, tl, case)
    for l in fails:
        log("  " + l)
    ok = rc == 0 and not fails and npass > 0
    why = "" if ok or fails else "; exit %d: %s" % (rc, tail(out, 2))
    secs = time.time() - t0
    w = worst["ref"]
    res.add("numeric --device %s vs reference" % dev, "PASS" if ok else "FAIL",
            err=fmt_e(w and w[1]), tol=fmt_e(w and w[2]), secs=secs,
            detail="%d passed, %d failed%s" % (npass, len(fails), why))
    if not dev.startswith("cpu"):
        # judged on its own comparisons: a case that failed against the reference first was
        # not compared with the CPU (counted, not charged to this row)
        w = worst["cpu"]
        cpu_fails = [l for l in fails if " vs cpu" in l or "run on cpu" in l]
        ncmp = sum(l.startswith("PASS:") and "vs cpu maxdiff" in l for l in lines)
        cpu_ok = (rc == 0 or fails) and not cpu_fails and ncmp > 0
        res.add("numeric %s vs cpu (same executables)" % dev, "PASS" if cpu_ok else "FAIL",
                err=fmt_e(w and w[1]), tol=fmt_e(w and w[2]), secs=None,
                detail=("%d compared, %d failed%s; worst %s (maxdiff %.2g, tol %.2g)"
                        % (ncmp, len(cpu_fails), ", %d not compared (failed vs reference first)"
                           % (len(fails) - len(cpu_fails)) if len(fails) > len(cpu_fails) else "",
                           w[3], w[1], w[2])) if w else "no case compared" + why)


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


# ------------------------------------------------------------------------------ the plan

# The phases and their shares of --time-limit, sized from what was measured (the module's
# docstring: commands and numbers). Lanes: "fg" phases run one after another; the "bg" phase
# (numeric) runs beside the fg phases between its "with" marks (examples, B09, B12). A phase's
# deadline is its planned end: time an earlier phase leaves unused flows to the later ones, and
# no phase eats into the shares planned after it. min_s: the least a phase can use; a check
# with less left is skipped (an example, B09; B12's run alone needs 60 s, the bench 40), and
# the plan is inconsistent if the default limit gives a phase less.
#        name       lane  share  min_s  what
PLAN = [("build",    "fg", 0.05, 20, "make -jN all NVCC_GENCODE=<this GPU>"),
        ("runtime",  "fg", 0.05, 15, "bash tests/runtime/run.sh"),
        ("numeric",  "bg", 0.66, 30, "tests/numeric/run.py --device cuda --vs-cpu"),
        ("examples", "fg", 0.25, 10, "make -C examples/{digits,resnet18,gpt2,minilm}"),
        ("B09",      "fg", 0.03, 5, "softmax of large logits"),
        ("B12",      "fg", 0.38, 60, "softmax over 2^31+ elements"),
        ("bench",    "fg", 0.24, 40, "bench/run.py --device cuda --quick --compile")]
BG_WITH = ("examples", "B09", "B12")   # the fg phases the bg phase runs beside


def make_plan(limit):
    """{phase: dict(lane, budget, start, end, min, what)}: planned seconds from the start.
    fg phases follow each other; numeric spans examples..B12 and must fit in that window."""
    plan, t = {}, 0.0
    for name, lane, share, mn, what in PLAN:
        budget = share * limit
        if lane == "fg":
            plan[name] = dict(lane=lane, budget=budget, start=t, end=t + budget, min=mn, what=what)
            t += budget
        else:
            plan[name] = dict(lane=lane, budget=budget, start=None, end=None, min=mn, what=what)
    for name, p in plan.items():
        if p["lane"] == "bg":
            p["start"] = plan[BG_WITH[0]]["start"]
            p["end"] = p["start"] + p["budget"]
    return plan


def check_plan(plan, limit):
    """The plan's inconsistencies (empty when it is consistent): the fg phases fill exactly the
    limit, the bg phase ends when the last fg phase it runs beside ends, and at the default
    limit every phase gets at least its minimum."""
    errs = []
    fg = [n for n, p in plan.items() if p["lane"] == "fg"]
    end = max(plan[n]["end"] for n in fg)
    if abs(end - limit) > 1e-6:
        errs.append("the fg phases end at %.1fs, not at the limit %.1fs" % (end, limit))
    for n, p in plan.items():
        if p["lane"] == "bg" and abs(p["end"] - plan[BG_WITH[-1]]["end"]) > 1e-6:
            errs.append("%s ends at %.1fs, %s at %.1fs" % (n, p["end"], BG_WITH[-1], plan[BG_WITH[-1]]["end"]))
    default = make_plan(DEFAULT_LIMIT)
    for n, p in default.items():
        if p["budget"] < p["min"]:
            errs.append("at the default %ds, %s gets %.0fs < its minimum %ds" % (DEFAULT_LIMIT, n, p["budget"], p["min"]))
    return errs


DEFAULT_LIMIT = 420


def print_plan(plan, limit):
    print("gpu_check plan for --time-limit %.0f s (shares measured: see tools/gpu_check.py)" % limit)
    print("  %-9s %-4s %6s %7s %15s  %s" % ("phase", "lane", "share", "budget", "planned", "what"))
    for name, lane, share, mn, what in PLAN:
        p = plan[name]
        note = "" if p["budget"] >= mn else "  (below its %ds minimum)" % mn
        print("  %-9s %-4s %5.1f%% %6.0fs %6.0fs-%6.0fs  %s%s"
              % (name, lane, 100 * share, p["budget"], p["start"], p["end"], what, note))


class Phases:
    """Each phase's deadline from the plan, and what it took (the phase table at the end)."""

    def __init__(self, limit):
        self.plan = make_plan(limit)
        self.took = {}

    def left(self, name):
        """Seconds this phase may still use: to its planned end (not beyond the whole limit)."""
        return int(min(T0 + self.plan[name]["end"], T0 + max(p["end"] for p in self.plan.values()))
                   - time.time())

    def start(self, name):
        self.took[name] = [time.time(), None]

    def stop(self, name):
        if name in self.took and self.took[name][1] is None:
            self.took[name][1] = time.time()

    def table(self):
        lines = ["gpu_check phases (seconds; budget = share of --time-limit)",
                 "  %-9s %8s %8s" % ("phase", "seconds", "budget")]
        for name, *_ in PLAN:
            t = self.took.get(name)
            secs = "-" if not t else "%.1f" % ((t[1] or time.time()) - t[0])
            lines.append("  %-9s %8s %8.0f" % (name, secs, self.plan[name]["budget"]))
        return "\n".join(lines)


def gencode_for(dry):
    """nvcc's target flags for this machine's GPU: its compute capability from nvidia-smi
    (9.0: -gencode arch=compute_90,code=sm_90), else -arch=native; sm_90 in a dry run."""
    if not dry:
        smi = shutil.which("nvidia-smi")
        if smi:
            rc, out = sh([smi, "--query-gpu=compute_cap", "--format=csv,noheader", "-i", "0"], 20)
            m = re.match(r"\s*(\d+)\.(\d+)", out) if rc == 0 else None
            if m:
                cc = m.group(1) + m.group(2)
                return "-gencode arch=compute_%s,code=sm_%s" % (cc, cc)
        return "-arch=native"
    return "-gencode arch=compute_90,code=sm_90"


# ------------------------------------------------------------------------------ main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--time-limit", type=float, default=DEFAULT_LIMIT,
                    help="seconds for everything (default %d)" % DEFAULT_LIMIT)
    ap.add_argument("-j", type=int, default=0, help="parallel numeric cases (default: the cores less 2)")
    ap.add_argument("--device", default="cuda", help="the GPU to check (default cuda, i.e. cuda:0)")
    ap.add_argument("-k", action="append", default=[],
                    help="only the numeric cases whose name contains this (default: all)")
    ap.add_argument("--no-bench", action="store_true", help="skip the bench step")
    ap.add_argument("--gencode", help="nvcc targets for the runtime and every generated .cu (default: "
                    "this GPU's alone, from nvidia-smi; MODELC_GENCODE and make's NVCC_GENCODE)")
    ap.add_argument("--cpu-dry-run", action="store_true",
                    help="use --device cpu in place of the GPU, without looking for one")
    ap.add_argument("--dry-run", action="store_true",
                    help="print the phase plan (budgets) for --time-limit, check it, run nothing")
    a = ap.parse_args()
    if a.dry_run:
        plan = make_plan(a.time_limit)
        print_plan(plan, a.time_limit)
        errs = check_plan(plan, a.time_limit)
        for e in errs:
            print("gpu_check: plan inconsistent: " + e)
        print("gpu_check: plan %s" % ("inconsistent" if errs else "consistent"))
        return 1 if errs else 0
    ph = Phases(a.time_limit)
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
    # numeric takes every core but the two the foreground lane (one example, B09 or B12 at a
    # time) needs; much of a case's time is waiting on GPU process start-up
    jobs = a.j or max(1, ncores() - 2)
    gencode = a.gencode or gencode_for(dry)
    os.environ["MODELC_GENCODE"] = gencode    # every modelc below (numeric, examples, B09, B12)
    print_plan(ph.plan, a.time_limit)

    # 1. build
    ph.start("build")
    t0 = time.time()
    nvcc = shutil.which("nvcc") or next((p for p in ("/usr/local/cuda/bin/nvcc",)
                                         if os.access(p, os.X_OK)), None)
    env = {"NVCC": nvcc} if nvcc else {}
    if not nvcc and not dry:
        res.add("build (make all, nvcc)", "FAIL", detail="nvcc not found (PATH, /usr/local/cuda/bin): "
                "the CUDA build needs it")
    else:
        make = ["make", "-j%d" % ncores(), "all"] + (["NVCC=" + nvcc, "NVCC_GENCODE=" + gencode] if nvcc else [])
        # without a build nothing runs: it may overrun into the runtime tests' share
        log("build: %s (budget %ds, at most %ds)" % (" ".join(make), ph.left("build"), ph.left("runtime")))
        rc, out = sh(make, ph.left("runtime"), env=env)
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
    ph.stop("build")
    built = res.rows[-1]["status"] == "PASS"

    if built:
        # 2. runtime unit tests (+ their CUDA kernel checks)
        ph.start("runtime")
        t0 = time.time()
        rc, out = sh(["bash", "tests/runtime/run.sh"], ph.left("runtime"), env={"B": "build"})
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
        ph.stop("runtime")

        # 3. numeric in the background: one build per case, checked against the reference on
        # the GPU and against the CPU run of the same executable
        def numeric():
            ph.start("numeric")
            numeric_run(dev, jobs, ph.left("numeric"), res, a.k)
            ph.stop("numeric")
        bg = threading.Thread(target=numeric, daemon=True, name="numeric")
        bg.start()
        log("numeric: tests/numeric/run.py --device %s%s -j %d started (budget %ds)"
            % (dev, "" if dry else " --vs-cpu", jobs, ph.left("numeric")))

        # 4. examples, B09, B12 in the foreground
        ph.start("examples")
        for name, target in EXAMPLES:
            if ph.left("examples") < ph.plan["examples"]["min"]:
                res.add("example %s (%s)" % (name, dev), "SKIP", detail="no time left in its share")
                continue
            log("example %s: MODELRT_DEVICE=%s make -C examples/%s %s" % (name, dev, name, target))
            run_example(name, target, dev, ph.left("examples"), res)
        ph.stop("examples")
        ph.start("B09")
        if ph.left("B09") >= ph.plan["B09"]["min"]:
            check_b09(dev, ph.left("B09"), res)
        else:
            res.add("B09 softmax large logits (%s)" % dev, "SKIP", detail="no time left")
        ph.stop("B09")
        ph.start("B12")
        check_b12(dev, ph.left("B12"), res, dry)
        ph.stop("B12")

        bg.join(timeout=max(1, ph.left("numeric")))
        if bg.is_alive():
            res.add("numeric (%s)" % dev, "FAIL", detail="still running at the end of its share")
            ph.stop("numeric")

        # 5. bench, last and alone
        ph.start("bench")
        t0 = time.time()
        budget = ph.left("bench") - 5
        if a.no_bench:
            res.add("bench/run.py --device %s --quick" % dev, "SKIP", detail="--no-bench")
        elif budget < ph.plan["bench"]["min"]:
            res.add("bench/run.py --device %s --quick" % dev, "SKIP", detail="no time left (%ds)" % budget)
        else:
            cmd = [sys.executable, "bench/run.py", "--device", dev, "--quick", "--compile",
                   "--budget", str(max(10, budget - 30))]
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
        ph.stop("bench")

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
    print()
    print(ph.table())
    failed = [r for r in rows if r["status"] == "FAIL"]
    print("gpu_check: %d checks, %d failed, %d skipped" % (
        len(rows), len(failed), sum(r["status"] == "SKIP" for r in rows)), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
