#!/usr/bin/env python3
"""PyTorch autograd's gradients of tests/train/gradcheck.py's cases: writes
expected_autograd.safetensors (the gradient of each case's loss with respect to each param, under
"CASE/PARAM"), which gradcheck.py compares modelc's gradients with.

    /path/venv-torch/bin/python autograd_ref.py     (torch, NumPy; run once, the output is committed)

Each case's f is the modelc expression itself, evaluated by Python over torch tensors in float64:
the language reads like PyTorch, so the names below map each function it uses to its PyTorch
counterpart (torch.nn.functional, with PyTorch's own conventions at the kinks and ties), with
the same params and inputs as gradcheck.py draws (its own functions, its seeds), and
loss = sum(f * r) as there. batch_norm is PyTorch's training mode (F.batch_norm(training=True)).
"""
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import gradcheck  # noqa: E402
import refinterp  # noqa: E402
import safetensors_np  # noqa: E402


def _axes(axis):
    return list(axis) if isinstance(axis, (list, tuple)) else [axis]


def _reduce_max(x, axis=-1, keepdim=False, sign=1):
    """max/min along each axis in turn, the adjoint to the first extremum (torch.max(x, dim))."""
    axes = sorted(a % x.dim() for a in _axes(axis))
    for a in reversed(axes):
        x = (torch.max(x, dim=a, keepdim=True)[0] if sign > 0 else torch.min(x, dim=a, keepdim=True)[0])
    if not keepdim:
        for a in reversed(axes):
            x = x.squeeze(a)
    return x


def _pad4(p):
    """modelc's padding (an int, [ph, pw] or [top, left, bottom, right]) as (top, left, bottom, right)."""
    if isinstance(p, int):
        return p, p, p, p
    if len(p) == 2:
        return p[0], p[1], p[0], p[1]
    return tuple(p)


def _pair(v):
    return tuple(v) if isinstance(v, (list, tuple)) else (v, v)


def conv2d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    t, l, bo, r = _pad4(padding)
    if (t, l) == (bo, r):
        return F.conv2d(x, w, b, _pair(stride), (t, l), _pair(dilation), groups)
    return F.conv2d(F.pad(x, (l, r, t, bo)), w, b, _pair(stride), 0, _pair(dilation), groups)


def conv1d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    return F.conv1d(x, w, b, stride, padding, dilation, groups)


def max_pool2d(x, kernel, stride=None, padding=0, dilation=1, ceil_mode=False):
    return F.max_pool2d(x, _pair(kernel), _pair(stride if stride is not None else kernel), _pair(padding),
                        _pair(dilation), ceil_mode)


def avg_pool2d(x, kernel, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    k, s = _pair(kernel), _pair(stride if stride is not None else kernel)
    t, l, bo, r = _pad4(padding)
    if (t, l) == (bo, r):
        return F.avg_pool2d(x, k, s, (t, l), ceil_mode, count_include_pad)
    assert not ceil_mode
    xp = F.pad(x, (l, r, t, bo))
    if count_include_pad:
        return F.avg_pool2d(xp, k, s, 0)
    ones = F.pad(torch.ones_like(x), (l, r, t, bo))
    return F.avg_pool2d(xp, k, s, 0) / F.avg_pool2d(ones, k, s, 0)


def layer_norm(x, weight=None, bias=None, eps=1e-5, normalized_shape=None):
    ns = normalized_shape if normalized_shape is not None else (list(weight.shape) if weight is not None else [x.shape[-1]])
    ns = [ns] if isinstance(ns, int) else ns
    return F.layer_norm(x, ns, weight, bias, eps)


def slice_(x, axis, start, end, step=1):
    idx = [slice(None)] * x.dim()
    idx[axis] = slice(start, end, step)
    return x[tuple(idx)]


def reshape(x, shape):
    return x.reshape(shape)


def rms_norm(x, weight=None, eps=1e-6):
    y = x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)
    return y * weight if weight is not None else y


NAMES = {
    "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "sigmoid": torch.sigmoid,
    "tanh": torch.tanh, "relu": torch.relu, "abs": torch.abs, "neg": torch.neg, "erf": torch.erf, "sin": torch.sin,
    "cos": torch.cos, "silu": F.silu, "hardswish": F.hardswish, "hardsigmoid": F.hardsigmoid,
    "gelu": lambda x, approximate="none": F.gelu(x, approximate="tanh" if approximate is torch.tanh else approximate),
    "softplus": lambda x, beta=1, threshold=20: F.softplus(x, beta, threshold),
    "clamp": lambda x, min=None, max=None: torch.clamp(x, min, max),
    "leaky_relu": lambda x, negative_slope=0.01: F.leaky_relu(x, negative_slope),
    "elu": lambda x, alpha=1.0: F.elu(x, alpha),
    "where": torch.where, "linear": lambda x, w, b=None: F.linear(x, w, b), "matmul": torch.matmul,
    "transpose": torch.transpose, "permute": lambda x, d: x.permute(*d), "reshape": reshape,
    "expand": lambda x, s: x.expand(*s), "slice": slice_, "unsqueeze": torch.unsqueeze,
    "sum": lambda x, axis=-1, keepdim=False: x.sum(_axes(axis), keepdim=keepdim),
    "mean": lambda x, axis=-1, keepdim=False: x.mean(_axes(axis), keepdim=keepdim),
    "var": lambda x, axis=-1, unbiased=True, keepdim=False: x.var(_axes(axis), unbiased=unbiased, keepdim=keepdim),
    "std": lambda x, axis=-1, unbiased=True, keepdim=False: x.std(_axes(axis), unbiased=unbiased, keepdim=keepdim),
    "max": lambda x, axis=-1, keepdim=False: _reduce_max(x, axis, keepdim, 1),
    "min": lambda x, axis=-1, keepdim=False: _reduce_max(x, axis, keepdim, -1),
    "minimum": torch.minimum, "maximum": torch.maximum, "pow": torch.pow,
    "logsumexp": lambda x, axis=-1, keepdim=False: torch.logsumexp(x, _axes(axis), keepdim),
    "softmax": lambda x, axis=-1: F.softmax(x, axis), "log_softmax": lambda x, axis=-1: F.log_softmax(x, axis),
    "mse_loss": lambda a, b, reduction="mean": F.mse_loss(a, b, reduction=reduction),
    "binary_cross_entropy_with_logits": lambda a, b, reduction="mean":
        F.binary_cross_entropy_with_logits(a, b, reduction=reduction),
    "conv_transpose2d": lambda x, w, b=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1:
        F.conv_transpose2d(x, w, b, _pair(stride), _pair(padding), _pair(output_padding), groups, _pair(dilation)),
    "interpolate": lambda x, size=None, scale_factor=None, mode="nearest", align_corners=None:
        F.interpolate(x, _pair(size) if size is not None else None,
                      _pair(scale_factor) if scale_factor is not None else None, mode, align_corners),
    "bilinear": "bilinear", "nearest": "nearest",
    "conv2d": conv2d, "conv1d": conv1d, "max_pool2d": max_pool2d, "avg_pool2d": avg_pool2d,
    "adaptive_avg_pool2d": lambda x, s: F.adaptive_avg_pool2d(x, s),
    "batch_norm": lambda x, g, b, rm, rv, eps=1e-5, momentum=0.1:
        F.batch_norm(x, rm.detach().clone(), rv.detach().clone(), g, b, True, momentum, eps),
    "layer_norm": layer_norm, "rms_norm": rms_norm,
    "group_norm": lambda x, w=None, b=None, num_groups=1, eps=1e-5: F.group_norm(x, num_groups, w, b, eps),
    "instance_norm": lambda x, w=None, b=None, eps=1e-5: F.instance_norm(x, weight=w, bias=b, eps=eps),
    "embedding": lambda ids, w: F.embedding(ids, w), "gather": torch.gather,
    "index_select": torch.index_select, "tensor": lambda v, dtype=None: torch.tensor(v, dtype=dtype),
    "cumsum": lambda x, dim: torch.cumsum(x, dim), "concat": lambda *t, axis=0: torch.cat(t, axis),
    "stack": lambda *t, axis=0: torch.stack(t, axis), "flip": lambda x, dims: torch.flip(x, dims),
    "pad": lambda x, p, mode="constant", value=0: F.pad(x, p, mode=mode, value=value) if mode == "constant"
        else F.pad(x.unsqueeze(0), p, mode=mode).squeeze(0),
    "repeat": lambda x, r: x.repeat(*r), "repeat_interleave": lambda x, n, dim=0: torch.repeat_interleave(x, n, dim),
    "scaled_dot_product_attention": lambda q, k, v, causal=False: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
    "true": True, "false": False, "none": "none", "reflect": "reflect", "replicate": "replicate",
    "constant": "constant", "i64": torch.int64, "pi": math.pi,
}
NAMES["upsample"] = NAMES["interpolate"]


def case_gradients(name):
    """gradcheck.py's params and inputs for the case (the same draws), and autograd's gradients."""
    spec = gradcheck.CASES[name]
    decl, f, rshape, params = spec[:4]
    buffers = gradcheck.options(spec).get("buffers", {})
    rng = np.random.default_rng(sum(map(ord, name)))
    w0 = {k: rng.uniform(0.3, 1.0, s).astype(np.float32) * rng.choice([-1, 1], s).astype(np.float32)
          for k, s in list(params.items()) + list(buffers.items())}
    m = refinterp.parse_source(gradcheck.model_text(name, False))
    data = gradcheck.make_inputs(name, m, rng)
    env = dict(NAMES, batch=gradcheck.B)   # the batch's size, for a size written `batch`
    tp = {k: torch.tensor(v.astype(np.float64), requires_grad=k in params) for k, v in w0.items()}
    for k, v in data.items():
        env[k] = torch.tensor(v.astype(np.float64) if v.dtype == np.float32 else v)
    env.update(tp)
    y = eval(f.replace("\n", " "), {"__builtins__": {}}, env)
    loss = (y * env["r"]).sum()
    loss.backward()
    return {k: tp[k].grad.numpy() for k in params}


def main():
    out = {}
    for name, spec in gradcheck.CASES.items():
        if "ref" in gradcheck.options(spec) and "batch_norm" not in spec[1]:
            continue
        g = case_gradients(name)
        for k, v in g.items():
            out["%s/%s" % (name, k)] = v.astype(np.float64)
        print("%-22s %s" % (name, ", ".join("%s %s" % (k, list(v.shape)) for k, v in g.items())))
    safetensors_np.write(os.path.join(HERE, "expected_autograd.safetensors"), out)
    print("%d gradients of %d cases written" % (len(out), len({k.split('/')[0] for k in out})))


if __name__ == "__main__":
    torch.set_default_dtype(torch.float64)
    main()
