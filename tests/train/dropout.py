#!/usr/bin/env python3
"""tests/train/dropout.py: dropout in training builds against an independent Philox4x32-10.

    python3 tests/train/dropout.py      (MODELC: the compiler; TRAIN_DEVICE: cpu (default) or cuda)

A training build's dropout keeps element i of its input where the uniform number of
(seed, step, site, i) is >= p and scales it by 1 / (1 - p); the number is word i % 4 of
Philox4x32-10 (Salmon et al., SC 2011) under the key (seed low, seed high) at the counter
(i / 4 low, i / 4 high, step, site), its top 24 bits over 2^24 (runtime/mrt_kernels.h). This file
implements that generator again in NumPy, checks it against Random123's known-answer vectors,
and predicts modelc's training exactly:
  philox_kat   the NumPy generator gives Random123's philox4x32_10 test vectors;
  masks        a model with two dropouts (sites 0 and 1) trained 3 steps with sgd(lr=1): the loss
               of every step (the forward's masks) and the final weights (the backward's masks,
               step by step) against the NumPy prediction at 1e-5 relative; run on the CPU and
               on CUDA (TRAIN_DEVICE=cuda, the simulator in tests/cudasim/run.sh) it is the same
               prediction, so both devices draw the same masks;
  statistics   the mask of 16384 elements read off a gradient: the kept fraction within 5
               sigma of 1 - p, the kept values exactly 1 / (1 - p) (float), two seeds agreeing on
               about p^2 + (1 - p)^2 of the elements (independent masks), and the generator's
               uniform numbers spread evenly over 16 buckets (chi-square, 15 dof, below 40);
  inference    an inference build of dropout(x, p=0.5) returns x unchanged;
  devices      (TRAIN_DEVICE=cuda with MODELC_CPU, a CPU build's modelc; else skipped) GPT-2 with
               dropout at its three places trained 10 steps (SGD) on the CPU and on CUDA: the
               same losses and weights at 1e-5, and losses unlike those without dropout.
PyTorch's own dropout draws its masks from other generators (mt19937 on the CPU, Philox with
its own counter layout on CUDA), so the PyTorch comparisons of tests/train use p = 0 or
compare only mask-agnostic statistics; this test is the exact one. Prints PASS/FAIL lines.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import safetensors_np  # noqa: E402

MASK32 = np.uint64(0xFFFFFFFF)
RTOL = 1e-5


def philox4x32_10(c, k0, k1):
    """Philox4x32-10 of counters c (4 arrays of uint32 values, as uint64) under key (k0, k1)."""
    x0, x1, x2, x3 = (np.asarray(v, dtype=np.uint64) for v in c)
    k0, k1 = np.uint64(k0), np.uint64(k1)
    for r in range(10):
        if r:
            k0 = (k0 + np.uint64(0x9E3779B9)) & MASK32
            k1 = (k1 + np.uint64(0xBB67AE85)) & MASK32
        p0 = np.uint64(0xD2511F53) * x0  # < 2^64: no wrap
        p1 = np.uint64(0xCD9E8D57) * x2
        x0, x1, x2, x3 = (p1 >> np.uint64(32)) ^ x1 ^ k0, p1 & MASK32, (p0 >> np.uint64(32)) ^ x3 ^ k1, p0 & MASK32
    return x0, x1, x2, x3


def uniform(seed, step, site, n):
    """The uniform numbers of elements 0 .. n-1 (float32 in [0, 1))."""
    i = np.arange(n, dtype=np.uint64)
    q = i >> np.uint64(2)
    words = philox4x32_10((q & MASK32, q >> np.uint64(32), np.full(n, step & 0xFFFFFFFF, np.uint64),
                           np.full(n, site, np.uint64)), seed & 0xFFFFFFFF, seed >> 32)
    w = np.choose((i & np.uint64(3)).astype(np.int64), words)
    return ((w >> np.uint64(8)).astype(np.float64) * 2.0 ** -24).astype(np.float32)


def keep_scale(seed, step, site, shape, p):
    """The mask times the scale, as modelc's dropout multiplies its input (float32)."""
    u = uniform(seed, step, site, int(np.prod(shape))).reshape(shape)
    scale = np.float32(1.0) / np.float32(1.0 - p)
    return np.where(u >= np.float32(p), scale, np.float32(0)).astype(np.float32)


def check_kat():
    vectors = [((0, 0, 0, 0), (0, 0), (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)),
               ((0xffffffff,) * 4, (0xffffffff,) * 2, (0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)),
               ((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0),
                (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1))]
    for c, k, want in vectors:
        got = tuple(int(np.asarray(v).ravel()[0]) for v in philox4x32_10([[v] for v in c], *k))
        print("  philox4x32_10 ctr %s key %s: %s (Random123: %s)" % (["%08x" % v for v in c], ["%08x" % v for v in k],
                                                                   ["%08x" % v for v in got], ["%08x" % v for v in want]))
        if got != want:
            return "the NumPy Philox4x32-10 is not Random123's"
    return None


def build(modelc, d, name, text, train=True, extra=()):
    src = os.path.join(d, name + ".model")
    with open(src, "w") as f:
        f.write(text)
    prog = os.path.join(d, name)
    cmd = [modelc, src, "--max-batch", "8", "-o", prog] + (["--train"] if train else []) + list(extra)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError("modelc failed: " + (p.stderr or p.stdout).strip()[-400:])
    return prog


def env():
    return dict(os.environ, MODELRT_DEVICE=os.environ.get("TRAIN_DEVICE", "cpu"))


def train(prog, d, w0, data, batch, epochs, seed):
    wf = os.path.join(d, "w0.safetensors")
    safetensors_np.write(wf, w0)
    out, log = os.path.join(d, "w1.safetensors"), os.path.join(d, "log")
    if os.path.exists(log):
        os.remove(log)
    cmd = [prog, "train", "--weights", wf, "--batch", str(batch), "--epochs", str(epochs), "--seed", str(seed),
           "--save", out, "--log", log, "--quiet"]
    for k, v in data.items():
        np.save(os.path.join(d, k + ".npy"), v)
        cmd += ["--data", "%s=%s" % (k, os.path.join(d, k + ".npy"))]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env())
    if p.returncode:
        raise RuntimeError("train failed: " + (p.stderr or p.stdout).strip()[-400:])
    with open(log) as f:
        losses = np.array([float(line.split()[5]) for line in f])
    return safetensors_np.read(out), losses


MASKS_MODEL = """model dr {
  input x: f32[batch, 64]
  input r: f32[batch, 64]
  param w: f32[64]
  h = dropout(x * w, p=0.3)
  y = dropout(h * 2.0, p=0.5)
  loss l = sum(y * r, axis=[0, 1])
  optimizer sgd(lr=1.0)
}
"""


def check_masks(modelc, d):
    rng = np.random.default_rng(14)
    B, seed, steps = 8, 12345678901, 3
    x = rng.standard_normal((B, 64)).astype(np.float32)
    r = rng.standard_normal((B, 64)).astype(np.float32)
    w = rng.standard_normal(64).astype(np.float32)
    prog = build(modelc, d, "dr", MASKS_MODEL)
    got, losses = train(prog, d, {"w": w}, {"x": x, "r": r}, B, steps, seed)
    # the prediction, in float64 from the float32 masks
    x64, r64, wp = x.astype(np.float64), r.astype(np.float64), w.astype(np.float64)
    want_losses = []
    for s in range(steps):
        m = keep_scale(seed, s, 0, (B, 64), 0.3).astype(np.float64) * 2.0 * keep_scale(seed, s, 1, (B, 64), 0.5)
        want_losses.append(float(np.sum(x64 * wp * m * r64)))
        wp = wp - np.sum(x64 * m * r64, axis=0)
    want_losses = np.array(want_losses)
    el = float(np.max(np.abs(losses - want_losses) / np.maximum(np.abs(want_losses), 1e-30)))
    ew = float(np.max(np.abs(got["w"].astype(np.float64) - wp)) / np.max(np.abs(wp)))
    print("  masks: losses of %d steps vs NumPy's Philox: max relative error %.2e (tolerance %.0e)" % (steps, el, RTOL))
    print("    modelc " + " ".join("%.6f" % v for v in losses))
    print("    numpy  " + " ".join("%.6f" % v for v in want_losses))
    print("  masks: final w (the backward's masks): max |modelc - numpy| / max|numpy| = %.2e (tolerance %.0e)" % (ew, RTOL))
    # a wrong step, site or seed would give another prediction: say how far those are
    wrong = keep_scale(seed, 0, 0, (B, 64), 0.3) * 2.0 * keep_scale(seed, 0, 0, (B, 64), 0.5)
    print("  masks: (with site 0 for both dropouts the first loss would be %.6f)" % float(np.sum(x64 * w * wrong * r64)))
    bad = []
    if not el <= RTOL:
        bad.append("losses differ by %.2e relative" % el)
    if not ew <= RTOL:
        bad.append("final w differs by %.2e relative" % ew)
    return "; ".join(bad) or None


STATS_MODEL = """model ds {
  input x: f32[batch, 16384]
  param w: f32[16384]
  loss l = sum(dropout(x * w, p=0.25), axis=[0, 1])
  optimizer sgd(lr=1.0)
}
"""


def check_statistics(modelc, d):
    n, p = 16384, 0.25
    prog = build(modelc, d, "ds", STATS_MODEL)
    w0 = np.zeros(n, np.float32)
    x = np.ones((1, n), np.float32)
    masks = []
    for seed in (7, 8):
        got, _ = train(prog, d, {"w": w0}, {"x": x}, 1, 1, seed)
        masks.append(-got["w"])  # w1 = 0 - mask * scale
    scale = np.float32(1.0) / np.float32(1.0 - p)
    bad = []
    for seed, m in zip((7, 8), masks):
        kept = m != 0
        frac = float(np.mean(kept))
        sigma = np.sqrt(p * (1 - p) / n)
        print("  statistics: seed %d: kept %.4f of %d (1 - p = %.2f, 5 sigma = %.4f); kept values %s"
              % (seed, frac, n, 1 - p, 5 * sigma, sorted(set(m[kept].tolist()))))
        if not abs(frac - (1 - p)) <= 5 * sigma:
            bad.append("seed %d keeps %.4f, not within 5 sigma of %.2f" % (seed, frac, 1 - p))
        if not np.all(m[kept] == scale):
            bad.append("kept values are not exactly 1 / (1 - p) = %r" % float(scale))
        if not np.array_equal(m, keep_scale(seed, 0, 0, (n,), p)):
            bad.append("seed %d: the mask is not NumPy's Philox prediction" % seed)
    agree = float(np.mean((masks[0] != 0) == (masks[1] != 0)))
    want = p * p + (1 - p) * (1 - p)
    sigma = np.sqrt(want * (1 - want) / n)
    print("  statistics: seeds 7 and 8 agree on %.4f of the elements (independent: %.4f, 5 sigma = %.4f)"
          % (agree, want, 5 * sigma))
    if not abs(agree - want) <= 5 * sigma:
        bad.append("the masks of two seeds agree on %.4f, not %.4f" % (agree, want))
    u = uniform(7, 0, 0, 1 << 20)
    counts = np.bincount((u * 16).astype(np.int64), minlength=16)
    chi2 = float(np.sum((counts - u.size / 16) ** 2 / (u.size / 16)))
    print("  statistics: 2^20 uniform numbers in 16 buckets: chi-square %.1f (15 dof; 40 is p < 0.001)" % chi2)
    if not chi2 < 40:
        bad.append("uniform numbers are uneven (chi-square %.1f)" % chi2)
    return "; ".join(bad) or None


def check_inference(modelc, d):
    prog = build(modelc, d, "di", "model di {\n  input x: f32[batch, 32]\n  output y = dropout(x, p=0.5)\n}\n",
                 train=False)
    x = np.random.default_rng(3).standard_normal((4, 32)).astype(np.float32)
    np.save(os.path.join(d, "x.npy"), x)
    out = os.path.join(d, "y.npy")
    p = subprocess.run([prog, "--input", "x=" + os.path.join(d, "x.npy"), "--output", "y=" + out], capture_output=True,
                       text=True, env=env())
    if p.returncode:
        return "inference run failed: " + (p.stderr or p.stdout).strip()[-400:]
    y = np.load(out)
    print("  inference: dropout(x, p=0.5) == x: %s (max |y - x| = %.1e)" % (np.array_equal(x, y),
                                                                           float(np.max(np.abs(y - x)))))
    return None if np.array_equal(x, y) else "an inference build's dropout changed its input"


def gpt2_dropout_text():
    """tests/train/gpt2_adamw.model with GPT-2's three dropouts at p = 0.1 (embeddings, attention
    output, MLP output): 5 sites over the 2 layers."""
    with open(os.path.join(HERE, "gpt2_adamw.model")) as f:
        s = f.read()
    for old, new in (("x0  = tok + pos", "x0  = dropout(tok + pos, p=0.1)"),
                     ("x1  = x + (y @ attn.c_proj.weight + attn.c_proj.bias)",
                      "x1  = x + dropout(y @ attn.c_proj.weight + attn.c_proj.bias, p=0.1)"),
                     ("return x1 + (m @ mlp.c_proj.weight + mlp.c_proj.bias)",
                      "return x1 + dropout(m @ mlp.c_proj.weight + mlp.c_proj.bias, p=0.1)")):
        if old not in s:
            raise RuntimeError("gpt2_adamw.model has no '%s'" % old)
        s = s.replace(old, new)
    # SGD: AdamW would turn the last-bit differences of the two devices' GEMMs in a gradient
    # near its eps (1e-8) into visible steps; SGD keeps the comparison one of the gradients
    return s.replace("optimizer adamw(lr=0.01, betas=[0.9, 0.95], eps=1e-8, weight_decay=0.1)",
                     "optimizer sgd(lr=0.1, momentum=0.9)")


def check_devices(modelc, d):
    """GPT-2 with dropout trained 10 steps (SGD with momentum) on the CPU (MODELC_CPU's build) and
    on CUDA (this run's): the same masks make the same losses and weights (1e-5 relative; the
    key thirds of c_attn.bias, whose true gradient is 0, excepted as in run.py)."""
    import make_data  # noqa: E402  (tests/train)
    cpu = os.environ.get("MODELC_CPU")
    if os.environ.get("TRAIN_DEVICE", "cpu") != "cuda" or not cpu:
        return "skip: needs TRAIN_DEVICE=cuda and MODELC_CPU (a CPU build's modelc), as tests/cudasim/run.sh gives"
    text = gpt2_dropout_text()
    w, data = make_data.make("gpt2_adamw")
    runs = {}
    # the CPU's builds without their CUDA half (they run on the CPU), the run without dropout there
    # too (whether the dropouts change the losses does not depend on the device)
    no_dropout = text.replace("p=0.1", "p=0")
    for dev, mc, name, txt in (("cpu", cpu, "gpt2_dropout", text), ("cuda", modelc, "gpt2_dropout", text),
                               ("plain", cpu, "gpt2_plain", no_dropout)):
        sub = os.path.join(d, dev)
        os.makedirs(sub)
        prog = build(mc, sub, name, txt, extra=["--no-cuda"] if dev != "cuda" else [])
        os.environ["TRAIN_DEVICE"], saved = "cuda" if dev == "cuda" else "cpu", os.environ["TRAIN_DEVICE"]
        try:
            runs[dev] = train(prog, sub, w, data, 8, 2, 5)
        finally:
            os.environ["TRAIN_DEVICE"] = saved
    plain_losses = runs.pop("plain")[1]
    (wc, lc), (wg, lg) = runs["cpu"], runs["cuda"]
    el = float(np.max(np.abs(lg - lc) / np.abs(lc)))
    moved = float(np.max(np.abs(lc - plain_losses)))
    print("  devices: GPT-2 with 5 dropouts, losses CPU vs CUDA: max relative difference %.2e (tolerance %.0e); "
          "they differ from the run without dropout by up to %.3f" % (el, RTOL, moved))
    print("    cpu  " + " ".join("%.6f" % v for v in lc))
    print("    cuda " + " ".join("%.6f" % v for v in lg))
    bad = [] if el <= RTOL else ["losses differ by %.2e relative" % el]
    if not moved > 1e-3:
        bad.append("the dropouts changed no loss (by %.1e)" % moved)
    worst = (0.0, "")
    for k in wc:
        a, b = wc[k].astype(np.float64), wg[k].astype(np.float64)
        keep = np.ones(a.shape, dtype=bool)
        if k.endswith("attn.c_attn.bias"):
            keep[32:64] = False
        e = float(np.max(np.abs(a - b)[keep]) / np.max(np.abs(a)))
        worst = max(worst, (e, k))
    print("  devices: final weights CPU vs CUDA: max relative difference %.2e in %s (tolerance %.0e)" % (worst + (RTOL,)))
    if not worst[0] <= RTOL:
        bad.append("final %s differs by %.2e relative" % (worst[1], worst[0]))
    return "; ".join(bad) or None


def main():
    modelc = os.environ.get("MODELC", os.path.join(ROOT, "build", "bin", "modelc"))
    sys.path.insert(0, HERE)
    fails = 0
    for name, fn in (("philox_kat", lambda d: check_kat()), ("masks", lambda d: check_masks(modelc, d)),
                     ("statistics", lambda d: check_statistics(modelc, d)),
                     ("inference", lambda d: check_inference(modelc, d)),
                     ("devices", lambda d: check_devices(modelc, d))):
        with tempfile.TemporaryDirectory(prefix="dropout_%s_" % name) as d:
            try:
                why = fn(d)
            except RuntimeError as e:
                why = str(e)
        if why and why.startswith("skip: "):
            print("SKIP: dropout/%s: %s" % (name, why[6:]))
            continue
        print("PASS: dropout/%s" % name if why is None else "FAIL: dropout/%s: %s" % (name, why))
        fails += why is not None
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
