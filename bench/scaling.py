#!/usr/bin/env python3
"""bench/scaling.py — modelc on one device against two: data-parallel inference and training over
CPU devices (--devices cpu:0 vs cpu:0,cpu:1) and MPI ranks (mpirun -np 1 vs -np 2, loopback), and a
model split over two CPU devices run in micro-batches (--micro-batches N, GPipe) against the same
split run one stage after the other.

    make bench [BENCH=quick]                  (runs this after bench/train_bench.py)
    python3 bench/scaling.py [--quick] [--cores N]

The models are MLPs whose GEMMs dominate (compute-bound, so the ideal speed-up on two cores is 2x;
for the pipeline of two equal stages in n micro-batches, 2n/(n+1)):
  infer   4 layers 512-1024-512-1024-512 at batch 256 (--quick: 128); the split twin runs layers
          1-2 on cpu:0 and 3-4 'on cpu:1'
  train   3 layers 256-1024-1024-10, cross-entropy, SGD, batch 128 (--quick: 64)
Threads: the one-device rows get one core (--threads 1); two devices share two (one thread each:
rt_dp.c gives CPU replicas one thread, rt_pipe.c gives each CPU stage threads / CPU stages, MPI
ranks get --threads 1); a one-device row with both cores (--threads 2) is printed for comparison.
MPI runs training only (rt_mpi.c: mpirun PROG train), so the MPI inference cells say so.
The pipeline rows also give the share of the run during which two stages worked at once
(PROG --time, mrt_pipe_overlap: at best (n-1)/(n+1) for two equal stages and n micro-batches): on
a machine whose other work leaves this one less than two cores, that is the overlap the schedule
reached even where the time does not drop. Each time is modelc's own --time (the mean of --repeat N inference runs after a warm-up; the median
training step, its first step left out), the median of 3 measurements (1 with --quick). Output:
a table (ms per run or step, items per second, speed-up over one device) and
bench/results/scaling-cpu[-quick].json with the machine's load. A timing never fails anything.
"""
import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tools"))

import numpy as np  # noqa: E402
import safetensors_np  # noqa: E402

INFER = """# scaling bench: a compute-bound MLP (bench/scaling.py)
model scal_infer {
  input x: f32[batch, 512]
  param w1: f32[1024, 512]
  param w2: f32[512, 1024]
  param w3: f32[1024, 512]
  param w4: f32[512, 1024]
  h = relu(linear(relu(linear(x, w1)), w2))
  %s
}
"""
SECOND = "output y = linear(relu(linear(h, w3)), w4)"

TRAIN = """# scaling bench: a compute-bound MLP's training step (bench/scaling.py)
model scal_train {
  input x: f32[batch, 256]
  target labels: i64[batch]
  param w1: f32[1024, 256]
  param w2: f32[1024, 1024]
  param w3: f32[10, 1024]
  h = relu(linear(relu(linear(x, w1)), w2))
  output logits = linear(h, w3)
  loss l = cross_entropy(logits, labels)
  optimizer sgd(lr=0.01)
}
"""

TIME_RE = re.compile(r"time: ([0-9.]+) ms per (?:run|step)")
OVERLAP_RE = re.compile(r"time: the stages worked at once ([0-9]+)%")
MPI_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_btl="self,vader",
               OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_btl_vader_single_copy_mechanism="none")


def log(msg):
    print("scaling bench: " + msg, file=sys.stderr, flush=True)


OVERLAP = {}  # the last timed command's overlap of the stages (--micro-batches), in percent


def timed(cmd, reps, env=None, timeout=600):
    """The median of reps runs of cmd's 'time:' figure (ms), or an error string."""
    out, ov = [], []
    for _ in range(reps):
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
        m = TIME_RE.search(p.stdout + p.stderr)
        if p.returncode or not m:
            return "exit %d: %s" % (p.returncode, (p.stderr + p.stdout).strip()[-200:])
        out.append(float(m.group(1)))
        o = OVERLAP_RE.search(p.stderr)
        if o:
            ov.append(int(o.group(1)))
    OVERLAP["last"] = statistics.median(ov) if ov else None
    return statistics.median(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--modelc", default=os.environ.get("MODELC", os.path.join(ROOT, "build", "bin", "modelc")))
    a = ap.parse_args()
    t0 = time.time()
    reps = 1 if a.quick else 3
    bi, bt = (128, 64) if a.quick else (256, 128)
    target_s = 0.3 if a.quick else 1.5
    load0 = os.getloadavg()
    rows = []
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(prefix="scaling_") as d:
        f = lambda s: os.path.join(d, s)  # noqa: E731
        for name, src in (("plain", INFER % SECOND), ("split", INFER % ("on cpu:1 { %s }" % SECOND))):
            with open(f(name + ".model"), "w") as fh:
                fh.write(src)
            subprocess.run([a.modelc, f(name + ".model"), "--no-cuda", "--max-batch", str(bi), "-o", f(name)], check=True)
        with open(f("train.model"), "w") as fh:
            fh.write(TRAIN)
        subprocess.run([a.modelc, f("train.model"), "--train", "--no-cuda", "--max-batch", str(bt), "-o", f("train")],
                       check=True)
        safetensors_np.write(f("w.st"), {k: (rng.standard_normal(s) / np.sqrt(s[1])).astype(np.float32) for k, s in (
            ("w1", (1024, 512)), ("w2", (512, 1024)), ("w3", (1024, 512)), ("w4", (512, 1024)))})
        np.save(f("x.npy"), rng.standard_normal((bi, 512)).astype(np.float32))
        safetensors_np.write(f("tw.st"), {k: (rng.standard_normal(s) / np.sqrt(s[1])).astype(np.float32) for k, s in (
            ("w1", (1024, 256)), ("w2", (1024, 1024)), ("w3", (10, 1024)))})
        steps = 12 if a.quick else 40
        np.save(f("tx.npy"), rng.standard_normal((bt * steps, 256)).astype(np.float32))
        np.save(f("ty.npy"), rng.integers(0, 10, size=bt * steps).astype(np.int64))
        log("built the models (%.1fs)" % (time.time() - t0))

        def infer(prog, extra, label, group):
            base = [f(prog), "--weights", f("w.st"), "--input", "x=" + f("x.npy"), "--time"] + extra
            one = timed(base, 1)
            n = 1 if isinstance(one, str) else max(2, int(target_s / reps / max(one, 1e-3) * 1e3))
            ms = one if isinstance(one, str) else timed(base + ["--repeat", str(n)], reps)
            rows.append({"kind": "inference", "group": group, "config": label, "batch": bi, "cmd": " ".join(
                [prog] + extra), **({"error": ms} if isinstance(ms, str) else {"ms": ms, "items_per_s": bi / ms * 1e3})})
            if OVERLAP.get("last") is not None and not isinstance(ms, str):
                rows[-1]["stages_at_once_pct"] = OVERLAP["last"]

        def train(extra, label, group, mpi=0):
            cmd = [f("train"), "train", "--weights", f("tw.st"), "--data", "x=" + f("tx.npy"), "--data",
                   "labels=" + f("ty.npy"), "--batch", str(bt), "--epochs", "1", "--quiet", "--time"] + extra
            if mpi:
                if not shutil.which("mpirun"):
                    rows.append({"kind": "training", "group": group, "config": label, "batch": bt,
                                 "error": "mpirun not found (tools/setup.sh installs openmpi-bin)"})
                    return
                cmd = ["mpirun", "--oversubscribe", "-np", str(mpi)] + cmd
            ms = timed(cmd, reps, env=MPI_ENV if mpi else None)
            rows.append({"kind": "training", "group": group, "config": label, "batch": bt, "cmd": " ".join(
                (["mpirun", "-np", str(mpi)] if mpi else []) + ["train"] + extra),
                **({"error": ms} if isinstance(ms, str) else {"ms": ms, "items_per_s": bt / ms * 1e3})})

        infer("plain", ["--device", "cpu", "--threads", "1"], "1 device, 1 thread", "devices")
        infer("plain", ["--device", "cpu", "--threads", "2"], "1 device, 2 threads", "devices")
        infer("plain", ["--devices", "cpu:0,cpu:1"], "2 devices (cpu:0,cpu:1), 1 thread each", "devices")
        rows.append({"kind": "inference", "group": "mpi", "config": "1 and 2 MPI ranks", "batch": bi,
                     "error": "n/a: MPI runs training only (mpirun PROG train)"})
        infer("split", ["--device", "cpu", "--threads", "1"], "split, stages in turn, 1 thread", "pipeline")
        for n in (2, 4, 8):
            infer("split", ["--device", "cpu", "--threads", "2", "--micro-batches", str(n)],
                  "split, %d micro-batches, 1 thread per stage" % n, "pipeline")
        log("inference done (%.1fs)" % (time.time() - t0))
        train(["--device", "cpu", "--threads", "1"], "1 device, 1 thread", "devices")
        train(["--device", "cpu", "--threads", "2"], "1 device, 2 threads", "devices")
        train(["--devices", "cpu:0,cpu:1"], "2 devices (cpu:0,cpu:1), 1 thread each", "devices")
        train(["--threads", "1"], "1 MPI rank, 1 thread", "mpi", mpi=1)
        train(["--threads", "1"], "2 MPI ranks (loopback), 1 thread each", "mpi", mpi=2)
        log("training done (%.1fs)" % (time.time() - t0))

    # speed-up: over the group's first row (one device or rank, one thread)
    base = {}
    for r in rows:
        key = (r["kind"], r["group"])
        if "ms" in r and key not in base:
            base[key] = r["ms"]
        if "ms" in r:
            r["speedup"] = base[key] / r["ms"]
    print("\nscaling on the CPU, %d cores (ms per run / step; speed-up over the group's first row; ideal 2x on two "
          "cores)" % os.cpu_count())
    print("%-10s %-9s %-45s %5s %10s %10s %8s  %s" % ("kind", "group", "config", "batch", "ms", "items/s", "speedup",
                                                       "stages at once"))
    for r in rows:
        if "ms" in r:
            print("%-10s %-9s %-45s %5d %10.3f %10.0f %7.2fx  %s" % (
                r["kind"], r["group"], r["config"], r["batch"], r["ms"], r["items_per_s"], r["speedup"],
                "%d%% of the run" % r["stages_at_once_pct"] if "stages_at_once_pct" in r else ""))
        else:
            print("%-10s %-9s %-45s %5d  %s" % (r["kind"], r["group"], r["config"], r["batch"], r["error"]))
    load1 = os.getloadavg()
    print("load average %.2f at the start, %.2f at the end (a shared machine's other work slows every row)"
          % (load0[0], load1[0]))
    doc = {"what": "scaling over CPU devices, MPI ranks and micro-batches (bench/scaling.py)", "quick": a.quick,
           "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                       "loadavg_start": load0[0], "loadavg_end": load1[0]},
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "seconds": round(time.time() - t0, 1), "rows": rows}
    out = os.path.join(HERE, "results", "scaling-cpu%s.json" % ("-quick" if a.quick else ""))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out + ".tmp", "w") as fh:
        json.dump(doc, fh, indent=1)
    os.replace(out + ".tmp", out)
    print("written: %s (%.0fs)" % (os.path.relpath(out, ROOT), time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
