#!/usr/bin/env python3
"""examples/import/make_weights.py — the seeded random weights of an imported model, with NumPy.

    python3 make_weights.py NAME.model OUT.safetensors [--consts NAME.consts.safetensors] [--seed 0]

Every `param NAME: DTYPE[SHAPE]` of the .model file that is a state_dict tensor gets values from
weight(name, shape, seed) below, a function of its name, shape and the seed alone, so gen.py
(which loads the same values into the PyTorch module before exporting it) and this script agree
without torch. Params the importer made from folded constants are read from --consts. A param
declared inside a `block` (as tools/onnx2model.py writes a repeated layer) is one per call
`... = BLOCK(...) as PREFIX`, named PREFIX.NAME, its state_dict name; its shape may use the
block's integer arguments (`f32[4 * n0, n0, 1, 1]`), bound by the call's integers.
"""
import argparse
import os
import re
import sys
import zlib

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import safetensors_np  # noqa: E402


def weight(name, shape, seed=0):
    """A float32 array for the state_dict tensor `name`: kaiming-like for weights (std
    1/sqrt(fan_in)), near 1 for norm weights, small for biases and running means, in [0.5, 1.5]
    for running variances."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    shape = tuple(int(d) for d in shape)
    leaf = name.rsplit(".", 1)[-1]
    if leaf == "running_var":
        return rng.uniform(0.5, 1.5, shape).astype(np.float32)
    if leaf in ("running_mean", "bias") or leaf.endswith("_bias"):
        return (0.1 * rng.standard_normal(shape)).astype(np.float32)
    if len(shape) <= 1:
        return (1 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
    fan_in = int(np.prod(shape[1:]))
    if "embed" in name or "wte" in name or "wpe" in name or "token" in name or "position" in name:
        fan_in = shape[-1]
    return (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)


PARAM = re.compile(r"^\s*param\s+(\S+)\s*:\s*(\w+)\[([^\]]*)\]")
BLOCK = re.compile(r"^block\s+(\w+)\s*\(([^)]*)\)")
CALL = re.compile(r"^\s*[^#]*=\s*(\w+)\((.*)\)\s+as\s+(\S+)\s*$")


def size(expr, env):
    """A dimension: an integer, or an integer expression of a block's integer arguments
    (`n0`, `4 * n0`, `n0 // 4`) given their values in env."""
    if not re.match(r"^[\w\s*/+%()-]+$", expr):
        sys.exit("make_weights.py: dimension '%s' is not an integer expression" % expr)
    return int(eval(expr, {"__builtins__": {}}, env))  # noqa: S307 (checked above: names, digits, + - * // %)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--consts")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    consts = safetensors_np.read(a.consts) if a.consts and os.path.exists(a.consts) else {}
    tensors = {}
    block_params, block, decls = {}, None, []   # block -> [(name, dtype, [dimension text])]
    block_args = {}                               # block -> its argument names
    for line in open(a.model):
        b = BLOCK.match(line)
        if b:
            block = b.group(1)
            block_params[block] = []
            block_args[block] = [x.strip() for x in b.group(2).split(",")]
            continue
        if block is not None and line.startswith("}"):
            block = None
            continue
        m = PARAM.match(line)
        if m:
            shape = [d.strip() for d in m.group(3).split(",")] if m.group(3).strip() else []
            if block is not None:
                block_params[block].append((m.group(1), m.group(2), shape))
            else:
                decls.append((m.group(1), m.group(2), [size(d, {}) for d in shape]))
            continue
        c = CALL.match(line)
        if c and block is None and c.group(1) in block_params:
            # the call's integer arguments bind the block's: a param's shape may use them
            env = {k: int(v) for k, v in zip(block_args[c.group(1)], [x.strip() for x in c.group(2).split(",")])
                   if re.match(r"^\d+$", v)}
            decls += [(c.group(3) + "." + n, dt, [size(d, env) for d in shape])
                      for n, dt, shape in block_params[c.group(1)]]
    for name, dt, shape in decls:
        if name in consts:
            tensors[name] = consts[name]
        elif dt == "f32":
            tensors[name] = weight(name, shape, a.seed)
        else:
            sys.exit("make_weights.py: param %s (%s) is neither a state_dict float tensor nor in %s" % (name, dt, a.consts))
    safetensors_np.write(a.out, tensors)


if __name__ == "__main__":
    main()
