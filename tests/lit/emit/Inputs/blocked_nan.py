"""Field case B13 on the blocked path: a NaN must survive relu, relu6 (clamp) and max pooling.

oneDNN's relu and clip post-ops and its max pooling use vmaxps/vminps, which turn a NaN into the
bound; rt_blocked.c applies relu/clamp itself (blk_clamp) and marks a pooled window that holds a
NaN (blk_pool_nan). The model is built blocked (f32: its convs and pooling in nhwc, as
layout_nhwc marks them at 12x12, and with --no-nhwc in nChw16c; and --precision bf16) and with
--no-blocked-conv (the NCHW kernels, which keep NaN: mrt_relu, mrt_clamp, mrt_maxpool2d); the
outputs' NaN positions must be the same, and the other values within 1e-5 (f32) or 2^-5 of
max |y| (bf16).

With --pairs (blocked_nan_pair.model: expand + depthwise pairs, rt_blocked.c's mrt_blk_pair) the
blocked build also runs with MODELRT_BLK_FUSE=1 (each pair as one oneDNN primitive where oneDNN
has it) and =0 (two primitives), whose relu / clamp are oneDNN post-ops only where a check of
the pair's source proves that no NaN or infinity reaches them: a NaN in the input, and a batch
item whose 1e38s overflow in the convs (whose sums may give NaN) run as two NaN-keeping ops,
and a clean input runs fused / with the post-ops; the first pair's choice is printed. The params and the input's shape are read from the model (batch 2).

usage: blocked_nan.py MODELC MODEL WORKDIR [--pairs]"""
import os
import re
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "tools"))
import refinterp  # noqa: E402

modelc, model, wd = sys.argv[1:4]
pairs = "--pairs" in sys.argv[4:]
text = open(model).read()
rng = np.random.default_rng(1)
t = {k: (rng.standard_normal([int(d) for d in s.split(",")]) * 0.2).astype(np.float32)
     for k, s in re.findall(r"param (\w+): f32\[([0-9, ]+)\]", text)}
refinterp.write_safetensors(os.path.join(wd, "w.safetensors"), t)
shape = [int(d) for d in re.search(r"input x: f32\[batch, ([0-9, ]+)\]", text).group(1).split(",")]
x = rng.standard_normal([2] + shape).astype(np.float32)
x[0, 3, 5, 6] = np.nan
if not pairs:
    x[1, 0, 0, 0] = np.nan
    inputs = [("", x)]
else:
    # "big": finite, but the pair's first conv multiplies 1e38 by +-10 (the stem w0 is the
    # identity), so its sums overflow: whether one gives NaN (+inf + -inf of two partial sums)
    # depends on the order of the sums, so the source's bound (not only a NaN check) sends the
    # pairs to their two NaN-keeping ops; the first pair's choice is printed for both inputs
    t["w0"] = np.eye(shape[0], dtype=np.float32).reshape(shape[0], shape[0], 1, 1)
    t["w1"][:, 0], t["w1"][:, 1] = 10, -10
    big = rng.standard_normal([2] + shape).astype(np.float32)
    big[1, 0, 7, 8] = big[1, 1, 7, 8] = 1e38
    clean = rng.standard_normal([2] + shape).astype(np.float32)
    inputs = [("clean ", clean), ("nan ", x), ("big ", big)]
refinterp.write_safetensors(os.path.join(wd, "w.safetensors"), t)
runs = [("nchw", ["--no-blocked-conv"], {}), ("blocked", [], {}), ("nChw16c", ["--no-nhwc"], {}),
        ("bf16", ["--precision", "bf16"], {})]
if pairs:
    runs += [("blocked MODELRT_BLK_FUSE=1", [], {"MODELRT_BLK_FUSE": "1"}),
             ("blocked MODELRT_BLK_FUSE=0", [], {"MODELRT_BLK_FUSE": "0"})]
for tag, flags, env in runs:
    if not env:
        subprocess.run([modelc, model, "--no-cuda", "--max-batch", "2", "-o", os.path.join(wd, tag)] + flags, check=True)
fails = 0
for name, xin in inputs:
    xp = os.path.join(wd, "x.npy")
    np.save(xp, xin)
    outs, paths = {}, {}
    for tag, flags, env in runs:
        y = os.path.join(wd, re.sub(r"[^a-z0-9]+", "_", tag.lower()) + ".npy")
        p = subprocess.run([os.path.join(wd, tag.split()[0]), "--weights", os.path.join(wd, "w.safetensors"), "--input",
                            xp, "--output", y, "--threads", "2"], check=True, capture_output=True, text=True,
                           env=dict(os.environ, MODELRT_BLOCKED_VERBOSE="1", **env))
        outs[tag] = np.load(y)
        first = re.search(r"k1 conv2d .*its first run \(batch \d+\): ([^(\n]*)", p.stderr)
        paths[tag] = first.group(1).strip() if first else "-"
    ref = outs["nchw"]
    for tag, tol in [(r[0], 2 ** -5 if r[0] == "bf16" else 1e-5) for r in runs[1:]]:
        if name != "nan " and tag == "bf16" and pairs:
            continue  # no pairs in bf16
        got = outs[tag]
        inf = np.isinf(ref)
        same_nan = np.array_equal(np.isnan(got), np.isnan(ref)) and np.array_equal(got[inf], ref[inf])
        fin = np.isfinite(ref)
        err = float(np.max(np.abs(got[fin] - ref[fin])) / np.max(np.abs(ref[fin])))
        print("%s%s: %d NaN (--no-blocked-conv: %d), same positions: %s; finite values: max error %.2g (tolerance %.2g)%s"
              % (name, tag, int(np.isnan(got).sum()), int(np.isnan(ref).sum()), same_nan, err, tol,
                 "; the first pair: " + paths[tag] if pairs else ""))
        if not same_nan or err > tol or (name in ("", "nan ") and not np.isnan(ref).any()):
            fails += 1
print("PASS" if not fails else "FAIL")
