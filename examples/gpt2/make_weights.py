#!/usr/bin/env python3
"""Write random GPT-2 weights and token ids for a configuration, with NumPy only (seeded).

    python3 make_weights.py --config config.json OUTDIR

Writes into OUTDIR:
  gpt2.safetensors  every parameter of the generated .model under Hugging Face GPT2Model's
                    state_dict names (wte.weight, wpe.weight, h.N.ln_1.weight, h.N.attn.c_attn.weight
                    [C, 3C], ..., ln_f.bias); no attn.bias mask buffer (the model declares none)
  ids_b1.npy        [1, seq] int64 token ids in 0..vocab-1
  ids_b4.npy        [4, seq] int64 token ids

Weights come from np.random.default_rng(0), sized so activations stay O(1) and attention is
far from uniform: wte and wpe N(0, 0.1^2); c_attn and c_fc N(0, 1/in); both c_proj
N(0, 0.25/in); every bias N(0, 0.1^2); layer-norm weight 1 + N(0, 0.1^2), bias N(0, 0.1^2).
Token ids come from np.random.default_rng(1). reference.py reads the same functions.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import safetensors_np  # noqa: E402  (tools/safetensors_np.py)


def load_config(path):
    with open(path) as f:
        cfg = json.load(f)
    return {k: int(cfg[k]) for k in ("n_layer", "n_head", "n_embd", "vocab", "n_ctx", "seq")}


def make_weights(cfg):
    """The state_dict (name -> float32 array) of the generated gpt2 .model."""
    rng = np.random.default_rng(0)
    C, V, N = cfg["n_embd"], cfg["vocab"], cfg["n_ctx"]
    w = {}

    def normal(shape, std):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def ln(name):
        w[name + ".weight"] = 1 + normal(C, 0.1)
        w[name + ".bias"] = normal(C, 0.1)

    def conv1d(name, n_in, n_out, gain=1.0):
        w[name + ".weight"] = normal((n_in, n_out), gain / np.sqrt(n_in))
        w[name + ".bias"] = normal(n_out, 0.1)

    w["wte.weight"] = normal((V, C), 0.1)
    w["wpe.weight"] = normal((N, C), 0.1)
    for i in range(cfg["n_layer"]):
        p = f"h.{i}"
        ln(p + ".ln_1")
        conv1d(p + ".attn.c_attn", C, 3 * C)
        conv1d(p + ".attn.c_proj", C, C, 0.5)
        ln(p + ".ln_2")
        conv1d(p + ".mlp.c_fc", C, 4 * C)
        conv1d(p + ".mlp.c_proj", 4 * C, C, 0.5)
    ln("ln_f")
    return w


def make_inputs(cfg):
    """{'b1': int64 [1, seq], 'b4': int64 [4, seq]} token ids."""
    rng = np.random.default_rng(1)
    T, V = cfg["seq"], cfg["vocab"]
    return {"b1": rng.integers(0, V, (1, T), dtype=np.int64),
            "b4": rng.integers(0, V, (4, T), dtype=np.int64)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                     "config.json"))
    ap.add_argument("outdir")
    a = ap.parse_args()
    cfg = load_config(a.config)
    os.makedirs(a.outdir, exist_ok=True)
    safetensors_np.write(os.path.join(a.outdir, "gpt2.safetensors"), make_weights(cfg))
    for name, ids in make_inputs(cfg).items():
        np.save(os.path.join(a.outdir, f"ids_{name}.npy"), ids)
    return 0


if __name__ == "__main__":
    sys.exit(main())
