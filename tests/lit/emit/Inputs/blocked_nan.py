"""Field case B13 on the blocked path: a NaN must survive relu, relu6 (clamp) and max pooling.

oneDNN's relu and clip post-ops and its max pooling use vmaxps/vminps, which turn a NaN into the
bound; rt_blocked.c applies relu/clamp itself (blk_clamp) and marks a pooled window that holds a
NaN (blk_pool_nan). The model is built blocked (f32: its convs and pooling in nhwc, as
layout_nhwc marks them at 12x12, and with --no-nhwc in nChw16c; and --precision bf16) and with
--no-blocked-conv (the NCHW kernels, which keep NaN: mrt_relu, mrt_clamp, mrt_maxpool2d); the
outputs' NaN positions must be the same, and the other values within 1e-5 (f32) or 2^-5 of
max |y| (bf16).

usage: blocked_nan.py MODELC MODEL WORKDIR"""
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "tools"))
import refinterp  # noqa: E402

modelc, model, wd = sys.argv[1:4]
rng = np.random.default_rng(1)
t = {k: (rng.standard_normal(s) * 0.2).astype(np.float32) for k, s in
     (("w1", (32, 16, 3, 3)), ("w2", (32, 32, 3, 3)), ("w3", (32, 32, 1, 1)))}
refinterp.write_safetensors(os.path.join(wd, "w.safetensors"), t)
x = rng.standard_normal((2, 16, 12, 12)).astype(np.float32)
x[0, 3, 5, 6] = np.nan
x[1, 0, 0, 0] = np.nan
np.save(os.path.join(wd, "x.npy"), x)
outs = {}
for tag, flags in (("nchw", ["--no-blocked-conv"]), ("blocked", []), ("nChw16c", ["--no-nhwc"]),
                   ("bf16", ["--precision", "bf16"])):
    exe = os.path.join(wd, tag)
    subprocess.run([modelc, model, "--no-cuda", "--max-batch", "2", "-o", exe] + flags, check=True)
    y = os.path.join(wd, tag + ".npy")
    subprocess.run([exe, "--weights", os.path.join(wd, "w.safetensors"), "--input", os.path.join(wd, "x.npy"),
                    "--output", y, "--threads", "2"], check=True, capture_output=True)
    outs[tag] = np.load(y)
ref = outs["nchw"]
fails = 0
for tag, tol in (("blocked", 1e-5), ("nChw16c", 1e-5), ("bf16", 2 ** -5)):
    got = outs[tag]
    same_nan = np.array_equal(np.isnan(got), np.isnan(ref))
    fin = ~np.isnan(ref)
    err = float(np.max(np.abs(got[fin] - ref[fin])) / np.max(np.abs(ref[fin])))
    print("%s: %d NaN (--no-blocked-conv: %d), same positions: %s; other values: max error %.2g (tolerance %.2g)"
          % (tag, int(np.isnan(got).sum()), int(np.isnan(ref).sum()), same_nan, err, tol))
    if not same_nan or err > tol or not np.isnan(ref).any():
        fails += 1
print("PASS" if not fails else "FAIL")
