#!/usr/bin/env python3
"""Run GPT-2 in PyTorch on make_weights.py's weights and token ids; write the reference logits.

    python3 reference.py [--config config.json]     # needs torch (not the transformers package)

Writes ref_b1.npy [1, seq, vocab] and ref_b4.npy [4, seq, vocab] (float32, CPU) next to this
script (or --out DIR). It was run once, for config.json, to produce the committed files;
`make test` only reads them, so the test needs NumPy but not PyTorch. The module below is a plain GPT-2 with
Hugging Face GPT2Model's parameter names (Conv1D weights [in, out]), GELU in its tanh form,
causal scaled-dot-product attention and the head tied to wte. It also prints how far float32
is from a float64 run of the same network.
"""
import argparse
import math
import os

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import make_weights

HERE = os.path.dirname(os.path.abspath(__file__))


class Conv1D(nn.Module):
    """transformers' Conv1D: y = x @ weight + bias, weight [in, out]."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        self.bias = nn.Parameter(torch.empty(n_out))

    def forward(self, x):
        return x @ self.weight + self.bias


class Attention(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.c_attn = Conv1D(C, 3 * C)
        self.c_proj = Conv1D(C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.c_fc = Conv1D(C, 4 * C)
        self.c_proj = Conv1D(4 * C, C)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.attn = Attention(C, H)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.mlp = MLP(C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C = cfg["n_embd"]
        self.wte = nn.Embedding(cfg["vocab"], C)
        self.wpe = nn.Embedding(cfg["n_ctx"], C)
        self.h = nn.ModuleList(Block(C, cfg["n_head"]) for _ in range(cfg["n_layer"]))
        self.ln_f = nn.LayerNorm(C, eps=1e-5)

    def forward(self, ids):
        T = ids.shape[1]
        x = self.wte(ids) + self.wpe(torch.arange(T))
        for block in self.h:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)  # tied head


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default=os.path.join(HERE, "config.json"))
    ap.add_argument("--out", default=HERE, help="where to write ref_*.npy (default: here)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    cfg = make_weights.load_config(a.config)
    model = GPT2(cfg).eval()
    state = {k: torch.from_numpy(v) for k, v in make_weights.make_weights(cfg).items()}
    model.load_state_dict(state, strict=True)
    for name, ids in make_weights.make_inputs(cfg).items():
        with torch.no_grad():
            y = model(torch.from_numpy(ids)).numpy()
            y64 = model.double()(torch.from_numpy(ids)).numpy()
            model.float()
        d = np.max(np.abs(y - y64))
        print(f"{name}: logits {list(y.shape)}, max|logit| {np.max(np.abs(y)):.3f}, "
              f"std {y.std():.3f}; float32 vs float64: max abs {d:.2e}, "
              f"relative to max|ref| {d / np.max(np.abs(y64)):.2e}")
        np.save(os.path.join(a.out, f"ref_{name}.npy"), np.ascontiguousarray(y, dtype=np.float32))
    print(f"wrote ref_b1.npy ref_b4.npy in {a.out}")


if __name__ == "__main__":
    main()
