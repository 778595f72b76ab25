#!/usr/bin/env python3
"""The initial weights and the training data of the tests/train models, from NumPy seeds.

    python3 make_data.py OUTDIR NAME...     writes OUTDIR/NAME.init.safetensors and OUTDIR/NAME.<data>.npy

reference.py (PyTorch) imports make() so that both sides start from the same bytes; the test
(run.py) needs NumPy only.
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import safetensors_np  # noqa: E402

N = 40  # samples; the tests train at batch 8 for two epochs (10 steps)


def _w(rng, out, inp):
    bound = 1.0 / np.sqrt(inp)   # nn.Linear's default init range
    return rng.uniform(-bound, bound, (out, inp)).astype(np.float32)


def _conv(rng, o, c, k):
    bound = 1.0 / np.sqrt(c * k * k)  # nn.Conv2d's default init range
    return rng.uniform(-bound, bound, (o, c, k, k)).astype(np.float32)


def _cnn(rng):
    """cnn_adamw: NCHW images [N, 3, 8, 8] in 4 classes; batch norms with perturbed affine
    params and running statistics (so that their update is visible), num_batches_tracked 3."""
    def bn(c):
        return {"weight": rng.uniform(0.5, 1.5, c).astype(np.float32),
                "bias": rng.uniform(-0.2, 0.2, c).astype(np.float32),
                "running_mean": rng.uniform(-0.1, 0.1, c).astype(np.float32),
                "running_var": rng.uniform(0.8, 1.2, c).astype(np.float32)}
    w = {"conv1.weight": _conv(rng, 8, 3, 3)}
    w.update({"bn1." + k: v for k, v in bn(8).items()})
    w["bn1.num_batches_tracked"] = np.array(3, dtype=np.int64)
    w["conv2.weight"] = _conv(rng, 8, 1, 3)
    w["conv2.bias"] = rng.uniform(-0.3, 0.3, 8).astype(np.float32)
    w["conv3.weight"] = _conv(rng, 12, 8, 3)
    w.update({"bn2." + k: v for k, v in bn(12).items()})
    w["fc.weight"] = _w(rng, 4, 12)
    w["fc.bias"] = _w(rng, 1, 4)[0] * 0.5
    d = {"x": rng.standard_normal((N, 3, 8, 8)).astype(np.float32), "labels": rng.integers(0, 4, N).astype(np.int64)}
    return w, d


GPT2 = {"n_layer": 2, "n_head": 2, "n_embd": 32, "vocab": 64, "n_ctx": 16, "seq": 16}  # gpt2_adamw.model


def make_gpt2(rng):
    """GPT-2 weights (Hugging Face names, Conv1D [in, out]) in the spirit of GPT-2's init, made
    larger and uneven (every LayerNorm weight and bias off 1 and 0) so that every gradient
    matters, and 40 windows of 16 tokens of a random stream with the next token as target."""
    L, C, V, T = GPT2["n_layer"], GPT2["n_embd"], GPT2["vocab"], GPT2["seq"]
    f = np.float32

    def nrm(*s, std=0.08):
        return (rng.standard_normal(s) * std).astype(f)

    w = {"wte.weight": nrm(V, C, std=0.1), "wpe.weight": nrm(GPT2["n_ctx"], C, std=0.05),
         "ln_f.weight": 1 + nrm(C, std=0.1), "ln_f.bias": nrm(C, std=0.05)}
    for i in range(L):
        p = "h.%d." % i
        w.update({p + "ln_1.weight": 1 + nrm(C, std=0.1), p + "ln_1.bias": nrm(C, std=0.05),
                  p + "attn.c_attn.weight": nrm(C, 3 * C), p + "attn.c_attn.bias": nrm(3 * C, std=0.02),
                  p + "attn.c_proj.weight": nrm(C, C), p + "attn.c_proj.bias": nrm(C, std=0.02),
                  p + "ln_2.weight": 1 + nrm(C, std=0.1), p + "ln_2.bias": nrm(C, std=0.05),
                  p + "mlp.c_fc.weight": nrm(C, 4 * C), p + "mlp.c_fc.bias": nrm(4 * C, std=0.02),
                  p + "mlp.c_proj.weight": nrm(4 * C, C), p + "mlp.c_proj.bias": nrm(C, std=0.02)})
    stream = rng.integers(0, V, N * (T + 1)).astype(np.int64).reshape(N, T + 1)
    return w, {"ids": stream[:, :T].copy(), "next": stream[:, 1:].copy()}


def make(name):
    """(weights, data): dicts of float32 / int64 arrays under the model's names."""
    rng = np.random.default_rng({"mlp_adamw": 1, "mlp_sgd": 2, "mlp_adam": 3, "mlp_sched": 4, "cnn_adamw": 4,
                                 "gpt2_adamw": 4}[name])
    if name == "cnn_adamw":
        return _cnn(rng)
    if name == "gpt2_adamw":
        return make_gpt2(rng)
    x = rng.standard_normal((N, 8)).astype(np.float32)
    if name in ("mlp_adamw", "mlp_sched"):
        w = {"fc1.weight": _w(rng, 16, 8), "fc1.bias": _w(rng, 1, 16)[0] * 0.5,
             "fc2.weight": _w(rng, 3, 16), "fc2.bias": _w(rng, 1, 3)[0] * 0.5}
        d = {"x": x, "labels": rng.integers(0, 3, N).astype(np.int64)}
    elif name == "mlp_sgd":
        w = {"fc1.weight": _w(rng, 16, 8), "fc1.bias": _w(rng, 1, 16)[0] * 0.5,
             "fc2.weight": _w(rng, 2, 16), "fc2.bias": _w(rng, 1, 2)[0] * 0.5}
        d = {"x": x, "y": rng.standard_normal((N, 2)).astype(np.float32)}
    else:
        w = {"emb.weight": _w(rng, 8, 8), "fc1.weight": _w(rng, 16, 8), "fc1.bias": _w(rng, 1, 16)[0] * 0.5,
             "fc2.weight": _w(rng, 5, 16)}
        d = {"x": x, "flags": rng.integers(0, 2, (N, 2)).astype(np.float32),
             "labels": rng.integers(0, 3, N).astype(np.int64)}
    return w, d


def main(argv):
    out = argv[1]
    os.makedirs(out, exist_ok=True)
    for name in argv[2:]:
        w, d = make(name)
        safetensors_np.write(os.path.join(out, name + ".init.safetensors"), w)
        for k, v in d.items():
            np.save(os.path.join(out, "%s.%s.npy" % (name, k)), v)


if __name__ == "__main__":
    main(sys.argv)
