#!/usr/bin/env python3
"""tests/train/gradcheck.py: every VJP rule of compiler/grad.c against central finite differences
of the NumPy reference interpreter in float64.

    python3 tests/train/gradcheck.py [-k NAME]      (MODELC: the compiler)

Each case is a small model whose scalar loss is sum(f(params, x) * r) over every axis (r a random
input, so that every element of f's result matters). modelc's gradient is read off one step of
`optimizer sgd(lr=1)`: g = w_before - w_after (exact up to the f32 rounding of the subtraction).
The reference's is (L(w + h e_i) - L(w - h e_i)) / 2h for every element i, with h = 2^-10 (a step that is exact on the f32 params), on the
same model with the loss as an output, computed in float64. Inputs avoid the kinks (relu at 0,
abs at 0, clamp's bounds), where a derivative is a convention: tests/train's PyTorch runs cover
those. Pass: max |g - g_fd| <= 1e-4 * max |g_fd| + 1e-6 for each param; the error is printed.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import refinterp  # noqa: E402
import safetensors_np  # noqa: E402

B = 3
# name: (declarations, the value f whose sum(f * r) is the loss, r's shape after batch, param shapes)
CASES = {
    "arith": ("input x: f32[batch, 4]\n  param w: f32[4]\n  param v: f32[1, 4]",
              "(x + w) * v - x / (w * w + 2.0) + neg(v) * 3.0", [4], {"w": [4], "v": [1, 4]}),
    "unary": ("input x: f32[batch, 4]\n  param w: f32[4]",
              "exp(w * 0.5) * x + log(w * w + 1.0) + sqrt(w * w + 0.5) + rsqrt(w * w + 0.5) + sigmoid(x * w) "
              "+ tanh(x - w)", [4], {"w": [4]}),
    "activations": ("input x: f32[batch, 6]\n  param w: f32[6]",
                    "relu(x * w) + gelu(x + w) + silu(x * w) + softplus(x - w) + abs(x * w) "
                    "+ clamp(x * w, min=-0.5, max=0.5)", [6], {"w": [6]}),
    "where": ("input x: f32[batch, 4]\n  param w: f32[4]\n  param v: f32[4]",
              "where(x > 0.0, w * x, v * x * x)", [4], {"w": [4], "v": [4]}),
    "linear": ("input x: f32[batch, 5]\n  param w: f32[3, 5]\n  param b: f32[3]",
               "linear(x, w, b)", [3], {"w": [3, 5], "b": [3]}),
    "matmul": ("input x: f32[batch, 2, 3]\n  param w: f32[3, 4]\n  param u: f32[4, 2]",
               "(x @ w) @ u", [2, 2], {"w": [3, 4], "u": [4, 2]}),
    "batched_matmul": ("input x: f32[batch, 2, 3]\n  param w: f32[3, 3]",
                       "matmul(x, transpose(x @ w, 1, 2))", [2, 2], {"w": [3, 3]}),
    "shapes": ("input x: f32[batch, 3, 4]\n  param w: f32[4, 3]",
               "permute(x, [0, 2, 1]) * w + reshape(x, [-1, 4, 3]) * expand(slice(w, 0, 1, 2), [4, 3]) "
               "+ reshape(permute(reshape(w, [2, 2, 3]), [1, 0, 2]), [4, 3])", [4, 3], {"w": [4, 3]}),
    "reductions": ("input x: f32[batch, 3, 4]\n  param w: f32[3, 4]",
                   "sum(x * w, axis=2) + mean(x * w * w, axis=2) + mean(w, axis=1) + mean(w, axis=[0, 1]) "
                   "+ sum(mean(x * w, axis=0, keepdim=true), axis=2)", [3], {"w": [3, 4]}),
    "losses": ("input x: f32[batch, 4]\n  input y: f32[batch, 4]\n  param w: f32[4]",
               "reshape(mse_loss(x * w, y, reduction=none) + binary_cross_entropy_with_logits(x + w, y * 0.0 + 0.5, "
               "reduction=none), [-1, 4])", [4], {"w": [4]}),
    "softmax": ("input x: f32[batch, 5]\n  param w: f32[5]",
                "softmax(x * w, axis=1) + log_softmax(x + w, axis=-1)", [5], {"w": [5]}),
}


def model_text(name, train):
    decl, f, rshape, params = CASES[name]
    lines = [decl, "  input r: f32[batch%s]" % "".join(", %d" % d for d in rshape)]
    lines.append("  y = %s" % f)
    n = len(rshape) + 1
    loss = "sum(y * r, axis=[%s])" % ", ".join(str(i) for i in range(n))
    if train:
        lines += ["  loss l = %s" % loss, "  optimizer sgd(lr=1.0)"]
    else:
        lines += ["  output l = %s" % loss]
    return "model gc_%s {\n  %s\n}\n" % (name, "\n".join(lines))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-k", action="append", default=[])
    a = ap.parse_args()
    modelc = os.environ.get("MODELC", os.path.join(ROOT, "build", "bin", "modelc"))
    fails = 0
    for name in CASES:
        if a.k and not any(k in name for k in a.k):
            continue
        why = check(name, modelc)
        print("PASS: gradcheck/%s" % name if why is None else "FAIL: gradcheck/%s: %s" % (name, why))
        fails += why is not None
    return 1 if fails else 0


def check(name, modelc):
    decl, f, rshape, params = CASES[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    w0 = {k: rng.uniform(0.3, 1.0, s).astype(np.float32) * rng.choice([-1, 1], s).astype(np.float32)
          for k, s in params.items()}
    m = refinterp.parse_source(model_text(name, False))
    data = {}
    for dcl in m.inputs:
        shape = [B if isinstance(d, str) else d for d in dcl.dims]
        v = rng.uniform(0.2, 1.5, shape) * rng.choice([-1, 1], shape)
        data[dcl.name] = v.astype(np.float32)
    with tempfile.TemporaryDirectory(prefix="gradcheck_%s_" % name) as d:
        src = os.path.join(d, "m.model")
        with open(src, "w") as fh:
            fh.write(model_text(name, True))
        prog = os.path.join(d, "m")
        p = subprocess.run([modelc, src, "--train", "--max-batch", str(B), "-o", prog], capture_output=True, text=True)
        if p.returncode:
            return "modelc --train failed: " + (p.stderr or p.stdout).strip()[-500:]
        safetensors_np.write(os.path.join(d, "w0.safetensors"), w0)
        cmd = [prog, "train", "--weights", os.path.join(d, "w0.safetensors"), "--batch", str(B), "--steps", "1",
               "--save", os.path.join(d, "w1.safetensors"), "--quiet"]
        for k, v in data.items():
            np.save(os.path.join(d, k + ".npy"), v)
            cmd += ["--data", "%s=%s" % (k, os.path.join(d, k + ".npy"))]
        p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, MODELRT_DEVICE=os.environ.get(
            "TRAIN_DEVICE", "cpu")))
        if p.returncode:
            return "train failed: " + (p.stderr or p.stdout).strip()[-500:]
        w1 = safetensors_np.read(os.path.join(d, "w1.safetensors"))
    bad = []
    h = 2.0 ** -10  # exact on f32 params in [0.3, 1] (the reference rounds params to f32 first)
    for k in params:
        g = w0[k].astype(np.float64) - w1[k].astype(np.float64)
        fd = np.zeros(w0[k].shape)
        base = {q: v.astype(np.float64) for q, v in w0.items()}
        for i in np.ndindex(w0[k].shape):
            lo = dict(base)
            hi = dict(base)
            lo[k] = base[k].copy()
            hi[k] = base[k].copy()
            lo[k][i] -= h
            hi[k][i] += h
            L1 = refinterp.run_model(m, hi, data, out_f64=True)["l"]
            L0 = refinterp.run_model(m, lo, data, out_f64=True)["l"]
            fd[i] = (float(L1) - float(L0)) / (2 * h)
        err = float(np.max(np.abs(g - fd)))
        tol = 1e-4 * float(np.max(np.abs(fd))) + 1e-6
        print("  %s: d l / d %s %s: max |modelc - finite differences| %.2e (max |grad| %.3g, tolerance %.2e)"
              % (name, k, list(w0[k].shape), err, float(np.max(np.abs(fd))), tol))
        if not err <= tol:
            bad.append("d/d %s differs by %.2e (tolerance %.2e)" % (k, err, tol))
    return "; ".join(bad) or None


if __name__ == "__main__":
    sys.exit(main())
