"""The load-only region's pages go as soon as their last load-time reader is done.

bigfold.model folds batch norms into 8 convs of 9 MiB of weights each: the raw weights live in the
load-only region, the folded ones in the weight region. Held together they would take 144 MiB;
modelc releases each raw weight's pages right after its fold kernel (mrt_cpu_release), so the
peak is about one copy and one layer (81 MiB). The test compares the process's measured peak
(--memory) with that of a model without weights built the same way (what the runtime and libc
cost alone), and checks the output against NumPy (max error over max |y| within 1e-4: f32 through 8 layers of
4608-term dot products).

usage: load_release.py EXE_BIG EXE_EMPTY WORKDIR"""
import os
import re
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "tools"))
import refinterp  # noqa: E402

big, empty, wd = sys.argv[1:4]
rng = np.random.default_rng(0)
L, C = 8, 512
t = {}
for i in range(L):
    t["w%d" % i] = (rng.standard_normal((C, C, 3, 3), dtype=np.float32) * 0.05).astype(np.float32)
    t["g%d" % i] = rng.uniform(0.5, 1.5, C).astype(np.float32)
    t["b%d" % i] = rng.standard_normal(C).astype(np.float32) * 0.1
    t["rm%d" % i] = rng.standard_normal(C).astype(np.float32) * 0.1
    t["rv%d" % i] = rng.uniform(0.5, 2.0, C).astype(np.float32)
x = rng.standard_normal((1, C, 1, 1)).astype(np.float32)
refinterp.write_safetensors(os.path.join(wd, "w.safetensors"), t)
np.save(os.path.join(wd, "x.npy"), x)
np.save(os.path.join(wd, "x4.npy"), np.ones(4, np.float32))


def peak(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("FAIL: %s exited %d: %s" % (cmd[0], p.returncode, p.stderr.strip()[-400:]))
    m = re.search(r"measured: peak resident memory of the process ([0-9.]+) MiB", p.stdout + p.stderr)
    if not m:
        sys.exit("FAIL: no measured peak in the output of %s:\n%s" % (cmd[0], p.stdout + p.stderr))
    return float(m.group(1))


base = peak([empty, "--input", "x=" + os.path.join(wd, "x4.npy"), "--memory"])
got = peak([big, "--weights", os.path.join(wd, "w.safetensors"), "--input", os.path.join(wd, "x.npy"),
            "--output", os.path.join(wd, "y.npy"), "--memory", "--threads", "1"])
one = sum(t["w%d" % i].nbytes for i in range(L)) / 2**20
# each conv sees a 1x1 input with padding 1: only its center tap counts
h = x.reshape(C).astype(np.float64)
for i in range(L):
    h = t["w%d" % i][:, :, 1, 1].astype(np.float64) @ h
    h = (h - t["rm%d" % i]) / np.sqrt(t["rv%d" % i].astype(np.float64) + 1e-5) * t["g%d" % i] + t["b%d" % i]
    if i < L - 1:
        h = np.maximum(h, 0)
ref = h
y = np.load(os.path.join(wd, "y.npy")).reshape(-1).astype(np.float64)
err = float(np.max(np.abs(y - ref)) / np.max(np.abs(ref)))
print("output vs NumPy: max error relative to max |y| %.3g (tolerance 1e-4)" % err)
print("peak %.1f MiB, runtime alone %.1f MiB, one copy of the weights %.1f MiB; the peak over the "
      "runtime must stay under 1.5 copies (both copies held: 2)" % (got, base, one))
if err > 1e-4:
    sys.exit("FAIL: output differs from NumPy")
if got - base > 1.5 * one:
    sys.exit("FAIL: the raw and folded weights were resident together (%.1f MiB over the runtime's %.1f)"
             % (got - base, base))
print("PASS")
