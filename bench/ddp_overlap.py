#!/usr/bin/env python3
"""bench/ddp_overlap.py — bench/scaling.py's training rows (its scal_train MLP: 256-1024-1024-10,
SGD, batch 128, 40 steps) with two compilers side by side, to measure what a change to
data-parallel training does: one device with one thread, two CPU devices, two MPI ranks, and the
same with --bucket-mb 1 (3 gradient buckets instead of one, so that one is all-reduced while the
backward pass goes on) for the new build. The runs are interleaved (old, new, old, new, ...) so
that a shared machine's load falls on both alike.

    python3 bench/ddp_overlap.py --before OLD/build/bin/modelc [--reps 7]

  (an old build: git archive REV | tar -x -C /tmp/old && make -C /tmp/old all)
Prints, per row and build, PROG train --time's median step (the median over the runs), and the
median wall and CPU seconds of a whole run (the children's rusage: the ranks under mpirun too),
with the data-parallel line's buckets and the buckets reduced during the backward (median step),
and the load average. A timing never fails anything.
"""
import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, HERE)
import safetensors_np  # noqa: E402
import scaling  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="the old build's modelc")
    ap.add_argument("--modelc", default=os.path.join(ROOT, "build", "bin", "modelc"))
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args()
    bt, steps = 128, 40
    rows = [("1 device, 1 thread", ["--device", "cpu", "--threads", "1"], 0, True),
            ("2 devices", ["--devices", "cpu:0,cpu:1"], 0, True),
            ("2 devices, --bucket-mb 1", ["--devices", "cpu:0,cpu:1", "--bucket-mb", "1"], 0, False),
            ("2 MPI ranks", ["--threads", "1"], 2, True),
            ("2 MPI ranks, --bucket-mb 1", ["--threads", "1", "--bucket-mb", "1"], 2, False)]
    if not shutil.which("mpirun"):
        rows = [r for r in rows if not r[2]]
    res = {}
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="ddp_overlap_") as d:
        f = lambda s: os.path.join(d, s)  # noqa: E731
        with open(f("train.model"), "w") as fh:
            fh.write(scaling.TRAIN)
        for tag, mc in (("old", a.before), ("new", a.modelc)):
            subprocess.run([mc, f("train.model"), "--train", "--no-cuda", "--max-batch", str(bt), "-o", f(tag)],
                           check=True)
        rng = np.random.default_rng(0)
        safetensors_np.write(f("tw.st"), {k: (rng.standard_normal(s) / np.sqrt(s[1])).astype(np.float32) for k, s in (
            ("w1", (1024, 256)), ("w2", (1024, 1024)), ("w3", (10, 1024)))})
        np.save(f("tx.npy"), rng.standard_normal((bt * steps, 256)).astype(np.float32))
        np.save(f("ty.npy"), rng.integers(0, 10, size=bt * steps).astype(np.int64))
        for _ in range(a.reps):
            for label, extra, mpi, both in rows:
                for tag in ("old", "new") if both else ("new",):
                    cmd = [f(tag), "train", "--weights", f("tw.st"), "--data", "x=" + f("tx.npy"), "--data",
                           "labels=" + f("ty.npy"), "--batch", str(bt), "--epochs", "1", "--quiet", "--time"] + extra
                    if mpi:
                        cmd = ["mpirun", "--oversubscribe", "-np", str(mpi)] + cmd
                    u0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.time()
                    p = subprocess.run(cmd, capture_output=True, text=True, env=scaling.MPI_ENV)
                    wall, u1 = time.time() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
                    m = re.search(r"time: ([0-9.]+) ms per step", p.stdout)
                    o = re.search(r"ddp: (\d+) gradient buckets; .*: (\d+) per step", p.stdout)
                    if p.returncode or not m:
                        print("%s (%s) failed: %s" % (label, tag, p.stderr.strip()[-300:]))
                        continue
                    res.setdefault((label, tag), []).append(
                        (float(m.group(1)), wall, u1.ru_utime - u0.ru_utime + u1.ru_stime - u0.ru_stime,
                         "%s/%s" % o.groups() if o else "-"))
    load1 = os.getloadavg()
    print("training rows of bench/scaling.py, %d runs each, interleaved; load average %.2f at the start, %.2f at the end"
          % (a.reps, load0[0], load1[0]))
    print("%-28s %-5s %12s %10s %10s  %s" % ("config", "build", "ms per step", "wall s", "CPU s", "buckets/during"))
    for (label, tag), v in res.items():
        print("%-28s %-5s %12.2f %10.2f %10.2f  %s" % (label, tag, statistics.median(x[0] for x in v),
                                                      statistics.median(x[1] for x in v),
                                                      statistics.median(x[2] for x in v), v[-1][3]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
