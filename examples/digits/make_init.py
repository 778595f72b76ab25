#!/usr/bin/env python3
"""The digits MLP's initial weights for training from scratch, from a NumPy seed with nn.Linear's
default ranges (uniform in +-1/sqrt(fan_in)).

    python3 make_init.py OUT.safetensors
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import safetensors_np  # noqa: E402


def weights():
    rng = np.random.default_rng(0)
    w = {}
    for name, out, inp in (("fc1", 128, 64), ("fc2", 10, 128)):
        b = 1.0 / np.sqrt(inp)
        w[name + ".weight"] = rng.uniform(-b, b, (out, inp)).astype(np.float32)
        w[name + ".bias"] = rng.uniform(-b, b, out).astype(np.float32)
    return w


if __name__ == "__main__":
    safetensors_np.write(sys.argv[1], weights())
