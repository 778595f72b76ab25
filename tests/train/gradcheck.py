#!/usr/bin/env python3
"""tests/train/gradcheck.py: every VJP rule of compiler/grad.c against central finite differences
of the NumPy reference interpreter in float64, and against PyTorch autograd's gradient of the same
case (expected_autograd.safetensors, which autograd_ref.py made with torch; committed).

    python3 tests/train/gradcheck.py [-k NAME] [--cuda-every K]     (MODELC: the compiler)

Each case is a small model whose scalar loss is sum(f(params, x) * r) over every axis (r a random
input, so that every element of f's result matters). modelc's gradient is read off one step of
`optimizer sgd(lr=1)`: g = w_before - w_after (exact up to the f32 rounding of the subtraction).
The reference's is (L(w + h e_i) - L(w - h e_i)) / 2h for every element i, with h = 2^-10 (a step that is exact on the f32 params), on the
same model with the loss as an output, computed in float64. Inputs avoid the kinks (relu at 0,
abs at 0, clamp's bounds, max pooling's ties), where a derivative is a convention: the EXACT
cases hit them on purpose and compare with PyTorch's rule, computed in NumPy (pass: within
1e-6 * max |g| + 1e-6). A batch_norm case (training mode) is compared with the batch statistics
written out in the reference model, since the interpreter's batch_norm is the inference form.
Pass: max |g - g_fd| <= 1e-4 * max |g_fd| + 1e-6 for each param; the error is printed.
Integer inputs (embedding ids, gather indices) are drawn from a small range so that ids repeat
and their adjoints must be summed. TIES sets the params to tie exactly (maximum/minimum of equal
operands, max along an axis with two equal maxima), where finite differences do not apply, and
compares with PyTorch's rules computed in NumPy (half to each equal operand; all to the first
maximum), at 1e-5 relative.
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
    "moments": ("input x: f32[batch, 5]\n  param w: f32[5]",
                "var(x * w, axis=1, keepdim=true) + std(x + w, axis=1, keepdim=true) + x * w", [5], {"w": [5]}),
    # convolution and pooling (issue 14): v scales the input, so that its gradient checks the
    # data gradient (conv_transpose2d) and the pooling gradients element by element
    "conv2d": ("input x: f32[batch, 4, 6, 5]\n  param v: f32[4, 6, 5]\n  param w: f32[6, 2, 3, 3]\n  param b: f32[6]",
               "conv2d(x * v, w, b, stride=2, padding=[1, 0, 2, 1], groups=2)", [6, 4, 2], {"v": [4, 6, 5], "w": [6, 2, 3, 3],
                                                                                          "b": [6]}),
    "conv2d_dilated": ("input x: f32[batch, 2, 7, 6]\n  param v: f32[2, 7, 6]\n  param w: f32[3, 2, 3, 2]",
                       "conv2d(x * v, w, stride=[1, 2], padding=2, dilation=[2, 1])", [3, 7, 5], {"v": [2, 7, 6],
                                                                                              "w": [3, 2, 3, 2]}),
    "depthwise": ("input x: f32[batch, 3, 5, 5]\n  param v: f32[3, 5, 5]\n  param w: f32[6, 1, 3, 3]\n  param b: f32[6]",
                  "conv2d(x * v, w, b, padding=1, groups=3)", [6, 5, 5], {"v": [3, 5, 5], "w": [6, 1, 3, 3], "b": [6]}),
    "conv1x1": ("input x: f32[batch, 3, 4, 4]\n  param v: f32[3, 4, 4]\n  param w: f32[5, 3, 1, 1]",
                "conv2d(x * v, w) + reshape(conv1d(reshape(x * v, [-1, 3, 16]), reshape(w, [5, 3, 1])), [-1, 5, 4, 4])",
                [5, 4, 4], {"v": [3, 4, 4], "w": [5, 3, 1, 1]}),
    "max_pool2d": ("input x: f32[batch, 2, 6, 7]\n  param v: f32[2, 6, 7]",
                   "max_pool2d(x * v, 3, stride=2, padding=1)", [2, 3, 4], {"v": [2, 6, 7]}),
    "max_pool2d_dilated": ("input x: f32[batch, 2, 6, 7]\n  param v: f32[2, 6, 7]",
                           "max_pool2d(x * v, 2, stride=2, dilation=2, ceil_mode=true)", [2, 3, 3], {"v": [2, 6, 7]}),
    "avg_pool2d": ("input x: f32[batch, 2, 6, 6]\n  param v: f32[2, 6, 6]",
                   "avg_pool2d(x * v, 3, stride=2, padding=1, ceil_mode=true) "
                   "+ avg_pool2d(x * v, 3, stride=2, padding=1, ceil_mode=true, count_include_pad=false)",
                   [2, 4, 4], {"v": [2, 6, 6]}),
    "avg_pool2d_asym": ("input x: f32[batch, 2, 6, 6]\n  param v: f32[2, 6, 6]",
                        "avg_pool2d(x * v, [3, 2], stride=[2, 1], padding=[1, 0, 1, 1], count_include_pad=false) "
                        "+ avg_pool2d(x * v, [3, 2], stride=[2, 1], padding=[1, 0, 1, 1])", [2, 3, 6], {"v": [2, 6, 6]}),
    "adaptive_avg_pool2d": ("input x: f32[batch, 2, 5, 7]\n  param v: f32[2, 5, 7]",
                            "adaptive_avg_pool2d(x * v, [3, 4])", [2, 3, 4], {"v": [2, 5, 7]}),
    # batch_norm of a training build: batch statistics; the reference spells them out
    "batch_norm": ("input x: f32[batch, 3, 4, 4]\n  param v: f32[3, 4, 4]\n  param g: f32[3]\n  param b: f32[3]\n"
                   "  param rm: f32[3]\n  param rv: f32[3]",
                   "batch_norm(x * v, g, b, rm, rv, eps=0.001) * (x + 1.0)", [3, 4, 4], {"v": [3, 4, 4], "g": [3], "b": [3]},
                   {"ref": "z = x * v\n  mu = mean(z, axis=[0, 2, 3], keepdim=true)\n"
                   "  var = mean((z - mu) * (z - mu), axis=[0, 2, 3], keepdim=true)\n"
                   "  y = ((z - mu) / sqrt(var + 0.001) * reshape(g, [3, 1, 1]) + reshape(b, [3, 1, 1])) * (x + 1.0)",
                   "buffers": {"rm": [3], "rv": [3]}}),
    "batch_norm_2d": ("input x: f32[batch, 4]\n  param g: f32[4]\n  param b: f32[4]\n  param rm: f32[4]\n  param rv: f32[4]",
                      "batch_norm(x * g + b, g, b, rm, rv)", [4], {"g": [4], "b": [4]},
                      {"ref": "z = x * g + b\n  mu = mean(z, axis=0, keepdim=true)\n  var = mean((z - mu) * (z - mu), axis=0, keepdim=true)\n"
                      "  y = (z - mu) / sqrt(var + 0.00001) * g + b", "buffers": {"rm": [4], "rv": [4]}}),
    # issue 14, the transformer half
    "transformer_unary": ("input x: f32[batch, 8]\n  param w: f32[8]",
                          "gelu(x * w, approximate=tanh) + erf(x * w) + sin(x * w) + cos(x + w) "
                          "+ leaky_relu(x * w, negative_slope=0.1) + elu(x * w, alpha=0.7) + hardswish(x * w * 2.5) "
                          "+ hardsigmoid(x * w * 2.5)", [8], {"w": [8]}),
    "pow": ("input x: f32[batch, 4]\n  param w: f32[4]\n  param v: f32[1, 4]",
            "pow(w * w + 0.5, x) + (x * x + 0.5) ** v + (x * w) ** 2.0", [4], {"w": [4], "v": [1, 4]}),
    "minmax": ("input x: f32[batch, 4]\n  param w: f32[4]\n  param v: f32[4]",
               "minimum(x, w) + maximum(x * w, v) + unsqueeze(max(x * w, axis=1), 1) + unsqueeze(min(x + v, axis=1), 1) "
               "+ x * max(x * w, axis=0) + x * min(x * v, axis=[0, 1])",
               [4], {"w": [4], "v": [4]}),
    "layer_norm": ("input x: f32[batch, 2, 3]\n  param u: f32[2, 3]\n  param w: f32[3]\n  param b: f32[3]\n"
                   "  param w2: f32[2, 3]\n  param b2: f32[2, 3]",
                   "layer_norm(x * u, w, b, eps=1e-5) + layer_norm(x * u, w2, b2, eps=1e-5, normalized_shape=[2, 3]) "
                   "+ layer_norm(x + u)", [2, 3], {"u": [2, 3], "w": [3], "b": [3], "w2": [2, 3], "b2": [2, 3]}),
    "group_norm": ("input x: f32[batch, 4, 3]\n  param u: f32[4, 3]\n  param w: f32[4]\n  param b: f32[4]",
                   "group_norm(x * u, w, b, num_groups=2) + instance_norm(x + u)", [4, 3],
                   {"u": [4, 3], "w": [4], "b": [4]}),
    "embedding": ("input ids: i64[batch, 5]\n  param w: f32[4, 3]",   # 15 ids in [0, 4): duplicates summed
                  "embedding(ids, w) * embedding(ids, w)", [5, 3], {"w": [4, 3]}, {"ints": {"ids": 4}}),
    "gather": ("input x: f32[batch, 4]\n  input idx: i64[batch, 3]\n  param w: f32[4]\n  param v: f32[5]",
               "gather(x * w, 1, idx) + index_select(v, 0, tensor([4, 0, 4], dtype=i64)) * gather(x, 1, idx)", [3],
               {"w": [4], "v": [5]}, {"ints": {"idx": 4}}),
    "concat_cumsum": ("input x: f32[batch, 4]\n  param w: f32[4]\n  param v: f32[4]",
                      "cumsum(concat(x * w, x * x * v, axis=1), dim=1) + concat(flip(x * v, dims=[1]), x * w, axis=1) "
                      "+ reshape(stack(w, v * v, axis=0), [8])", [8], {"w": [4], "v": [4]}),
    "logsumexp": ("input x: f32[batch, 5]\n  param w: f32[5]",
                  "x * unsqueeze(logsumexp(x * w, axis=1), 1) + std(x * w, axis=1, keepdim=true) + var(x + w, axis=1, unbiased=false, keepdim=true)",
                  [5], {"w": [5]}),
    "movement": ("input x: f32[batch, 6]\n  param w: f32[6]",
                 "pad(x * w, [2, 1], mode=reflect) + pad(x * w * w, [1, 2], mode=replicate) + pad(x * w, [3, 0]) "
                 "+ repeat(slice(x * w, 1, 0, 3), [1, 3]) + repeat_interleave(slice(flip(x * w * w, dims=[1]), 1, 1, 6, 2), 3, dim=1)",
                 [9], {"w": [6]}),
    "attention": ("input x: f32[batch, 4, 6]\n  param wq: f32[6, 6]\n  param wk: f32[6, 6]\n  param wv: f32[6, 6]\n"
                  "  param g: f32[6]",
                  "scaled_dot_product_attention(x @ wq, x @ wk, x @ wv, causal=true) + rms_norm(x * g, g)", [4, 6],
                  {"wq": [6, 6], "wk": [6, 6], "wv": [6, 6], "g": [6]}),
    # issue 14, the last rules: conv_transpose2d (its input's gradient a conv2d, its weight's a
    # conv2d_weight_grad with the operands' roles swapped); v scales the input as in conv2d's
    # cases; 2 input channels per group here take the forward's direct path, 3 below its GEMM
    "conv_transpose2d": ("input x: f32[batch, 4, 3, 4]\n  param v: f32[4, 3, 4]\n  param w: f32[4, 3, 3, 3]\n  param b: f32[6]",
                         "conv_transpose2d(x * v, w, b, stride=2, padding=1, output_padding=1, groups=2)", [6, 6, 8],
                         {"v": [4, 3, 4], "w": [4, 3, 3, 3], "b": [6]}),
    # output_padding 1 > padding 0 on the rows (dilation 2 allows it): the last row of the result
    # is reached by no input, and the input gradient's conv has bottom padding -1
    "conv_transpose2d_dilated": ("input x: f32[batch, 3, 4, 3]\n  param v: f32[3, 4, 3]\n  param w: f32[3, 2, 2, 3]",
                                 "conv_transpose2d(x * v, w, stride=[1, 2], padding=[0, 1], output_padding=[1, 0], "
                                 "dilation=[2, 1])", [2, 7, 5], {"v": [3, 4, 3], "w": [3, 2, 2, 3]}),
    # interpolate's input gradient (v scales the input: d/d v checks it element by element)
    "interpolate_nearest": ("input x: f32[batch, 2, 3, 4]\n  param v: f32[2, 3, 4]",
                            "interpolate(x * v, scale_factor=2) * 0.5 + interpolate(x * v * v, size=[6, 8])", [2, 6, 8],
                            {"v": [2, 3, 4]}),
    "interpolate_nearest_size": ("input x: f32[batch, 2, 5, 4]\n  param v: f32[2, 5, 4]",
                                 "interpolate(x * v, size=[7, 3])", [2, 7, 3], {"v": [2, 5, 4]}),
    "interpolate_nearest_scale": ("input x: f32[batch, 2, 4, 5]\n  param v: f32[2, 4, 5]",
                                  "upsample(x * v, scale_factor=[1.5, 0.7])", [2, 6, 3], {"v": [2, 4, 5]}),
    "interpolate_bilinear": ("input x: f32[batch, 2, 3, 4]\n  param v: f32[2, 3, 4]",
                             "interpolate(x * v, scale_factor=[2.5, 1.5], mode=bilinear)", [2, 7, 6], {"v": [2, 3, 4]}),
    "interpolate_bilinear_align": ("input x: f32[batch, 2, 3, 4]\n  param v: f32[2, 3, 4]",
                                   "interpolate(x * v, size=[5, 7], mode=bilinear, align_corners=true)", [2, 5, 7],
                                   {"v": [2, 3, 4]}),
    "interpolate_bilinear_down": ("input x: f32[batch, 2, 6, 5]\n  param v: f32[2, 6, 5]",
                                  "interpolate(x * v, size=[4, 3], mode=bilinear) "
                                  "+ interpolate(x * v * v, size=[4, 3], mode=bilinear, align_corners=true)", [2, 4, 3],
                                  {"v": [2, 6, 5]}),
    # concat and cumsum along a symbolic axis (the batch, leading or moved inside by a permute)
    "concat_batch": ("input x: f32[batch, 4]\n  param w: f32[4]\n  param v: f32[4]",
                     "reshape(concat(x * w, x * x * v, axis=0), [-1, 8]) "
                     "+ reshape(permute(concat(permute(x * v, [1, 0]), permute(x * w * w, [1, 0]), axis=1), [1, 0]), [-1, 8])",
                     [8], {"w": [4], "v": [4]}),
    "cumsum_batch": ("input x: f32[batch, 4]\n  param w: f32[4]\n  param v: f32[4]",
                     "cumsum(x * w, dim=0) + permute(cumsum(permute(x * x * v, [1, 0]), dim=1), [1, 0]) + cumsum(x * v, dim=1)",
                     [4], {"w": [4], "v": [4]}),
    # slices of a symbolic axis: fixed parts of the batch axis (steps 1 and 2, as BERT's [CLS]
    # row of the seq axis) and a param sliced to the batch's length (as slice(wpe, 0, 0, seq))
    "slice_batch": ("input x: f32[batch, 4]\n  param w: f32[4]\n  param v: f32[4]\n  param p: f32[5, 4]",
                    "x * sum(slice(x * w, 0, 1, 3), axis=[0]) + x * sum(slice(x * v * v, 0, 0, 3, 2), axis=[0]) "
                    "+ x * slice(p, 0, 0, batch)",
                    [4], {"w": [4], "v": [4], "p": [5, 4]}),
    # matmul with broadcast batch axes: [B, H, T, D] @ [D, E], [B, H, ..] @ [1, H, ..], rank 4 @
    # rank 3, rank 2 @ rank 4, and [1, H, ..] @ [B, H, ..]
    "matmul_broadcast": ("input x: f32[batch, 2, 3, 4]\n  param w: f32[4, 5]\n  param u: f32[1, 2, 5, 3]\n"
                         "  param q: f32[2, 3, 3]\n  param p: f32[3, 3]\n  param u1: f32[1, 2, 3, 3]",
                         "p @ (((x @ w) @ u) @ q) + u1 @ ((x @ w) @ u)", [2, 3, 3],
                         {"w": [4, 5], "u": [1, 2, 5, 3], "q": [2, 3, 3], "p": [3, 3], "u1": [1, 2, 3, 3]}),
}

# Ties, where a derivative is PyTorch's convention and finite differences do not apply: the
# params are set to tie exactly, and the expected gradient is PyTorch's rule computed here.
# maximum/minimum send half the adjoint to each of two equal operands; max along an axis sends
# all of it to the first maximum (torch.max(x, dim)'s index). loss = sum(y * r) as above.
TIES = {
    "ties": ("input x: f32[batch, 4]\n  param w: f32[4]\n  param v: f32[4]",
             "maximum(w, v) * x + minimum(w, v) * x * x + max(w, axis=0) * x + unsqueeze(max(x * 0.0 + w, axis=1), 1)",
             [4], {"w": np.array([0.5, 0.75, 0.75, -0.25], np.float32), "v": np.array([0.5, 0.25, 1.0, -0.25], np.float32)}),
}


def ties_expected(w, v, x, r):
    """PyTorch's gradient of the TIES loss, from its rules (derivatives.yaml)."""
    R1 = (x * r).sum(0)          # d/d maximum(w, v) per column
    R2 = (x * x * r).sum(0)      # d/d minimum(w, v)
    Rm = float((x * r).sum())    # d/d max(w)
    Rrow = float(r.sum())        # d/d max(w) per row (the second max), summed over rows
    gw, gv = np.zeros(4), np.zeros(4)
    for i in range(4):
        if w[i] == v[i]:
            gw[i] += 0.5 * R1[i] + 0.5 * R2[i]
            gv[i] += 0.5 * R1[i] + 0.5 * R2[i]
        elif w[i] > v[i]:
            gw[i] += R1[i]
            gv[i] += R2[i]
        else:
            gv[i] += R1[i]
            gw[i] += R2[i]
    first = int(np.argmax(w))    # the first maximum
    gw[first] += Rm + Rrow
    return {"w": gw, "v": gv}


# The kinks, where a derivative is a convention: inputs that hit it exactly, and modelc's gradient
# against PyTorch's rule computed here in NumPy (float64). name: (declarations, f, r's shape after
# batch, the params' values, the inputs' values (batch B) but r, d l / d params (w, x, r)).
def _maxpool_first_max(z, r, k, pad):
    """d sum(max_pool2d(z, k, stride=1, padding=pad) * r) / d z for z [B, C, H, W]: each window's
    r to the first maximum in row-major order (a strictly greater value replaces it), padding
    never a candidate (PyTorch's CPU kernel)."""
    g = np.zeros_like(z)
    Bn, C, H, W = z.shape
    for b, c, oh, ow in np.ndindex(Bn, C, r.shape[2], r.shape[3]):
        best, m = None, -np.inf
        for i in range(k):
            for j in range(k):
                ih, iw = oh - pad + i, ow - pad + j
                if 0 <= ih < H and 0 <= iw < W and (best is None or z[b, c, ih, iw] > m):
                    best, m = (ih, iw), z[b, c, ih, iw]
        g[b, c, best[0], best[1]] += r[b, c, oh, ow]
    return g


_TIES = np.array([[0, 1, 1, 0], [2, 2, 1, 2], [0, 2, 2, 0], [1, 1, 0, 1]], dtype=np.float32)
EXACT = {
    # ties in every window (0, 1, 2 only), overlapping windows and padding
    "max_pool2d_ties": ("input x: f32[batch, 2, 4, 4]\n  param v: f32[2, 4, 4]", "max_pool2d(x * v, 3, stride=1, padding=1)",
                        [2, 4, 4], {"v": np.ones((2, 4, 4), np.float32)},
                        {"x": np.stack([np.stack([_TIES, _TIES.T]), np.stack([_TIES[::-1], _TIES * 0 + 1])]
                                       + [np.stack([_TIES, _TIES[:, ::-1]])] * (B - 2))},
                        lambda w, d: {"v": np.sum(d["x"] * _maxpool_first_max(d["x"] * w["v"], d["r"], 3, 1), axis=0)}),
    # relu at 0 (x * 0 and w - 0.5 at w = 0.5): gradient 0 there, as PyTorch's threshold_backward
    "relu_at_zero": ("input x: f32[batch, 4]\n  param w: f32[4]", "relu(x * w) + relu(w - 0.5) * x", [4],
                     {"w": np.array([0.0, 0.5, -0.5, 0.75], np.float32)},
                     {"x": np.array([[1.0, -2.0, 0.5, 1.5], [-1.0, 1.0, -0.5, 0.0], [2.0, 0.5, -1.5, -1.0]], np.float32)},
                     lambda w, d: {"w": np.sum(d["r"] * d["x"] * ((d["x"] * w["w"] > 0).astype(float) + (w["w"] - 0.5 > 0)), axis=0)}),
}


def check_exact(name, modelc):
    decl, f, rshape, w0, data, want = EXACT[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    data = dict(data, r=rng.uniform(0.2, 1.5, [B] + rshape).astype(np.float32))
    lines = [decl, "  input r: f32[batch%s]" % "".join(", %d" % d for d in rshape), "  y = %s" % f,
             "  loss l = sum(y * r, axis=[%s])" % ", ".join(str(i) for i in range(len(rshape) + 1)),
             "  optimizer sgd(lr=1.0)"]
    got = sgd_gradient(name, modelc, w0, data, "model gc_%s {\n  %s\n}\n" % (name, "\n".join(lines)))
    if isinstance(got, str):
        return got
    exp = want({k: v.astype(np.float64) for k, v in w0.items()}, {k: v.astype(np.float64) for k, v in data.items()})
    bad = []
    for k in w0:
        err = float(np.max(np.abs(got[k] - exp[k])))
        tol = 1e-6 * float(np.max(np.abs(exp[k]))) + 1e-6
        print("  %s: d l / d %s %s: max |modelc - PyTorch's rule| %.2e (max |grad| %.3g, tolerance %.2e)"
              % (name, k, list(w0[k].shape), err, float(np.max(np.abs(exp[k]))), tol))
        if not err <= tol:
            bad.append("d/d %s differs by %.2e (tolerance %.2e)" % (k, err, tol))
    return "; ".join(bad) or None


# PyTorch autograd's gradients of the CASES (autograd_ref.py made them; committed)
_AG = os.path.join(HERE, "expected_autograd.safetensors")
AUTOGRAD = safetensors_np.read(_AG) if os.path.exists(_AG) else {}


def options(spec):
    """A case's options, its fifth entry: "ints" (an integer input's range [0, n)), "ref" (the
    reference model's form of f), "buffers" (params the step updates and the check skips)."""
    return spec[4] if len(spec) > 4 else {}


def model_text(name, train):
    """The case's model: the loss as the training step's (train) or as an output (the reference's
    model, whose f is the case's reference form when it has one: batch_norm's batch statistics
    written out, which the interpreter's batch_norm, the inference form, does not compute)."""
    spec = CASES.get(name) or TIES[name]
    decl, f, rshape, params = spec[:4]
    if not train and "ref" in options(spec):
        f = options(spec)["ref"]
    lines = [decl, "  input r: f32[batch%s]" % "".join(", %d" % d for d in rshape)]
    lines.append(("  %s" if "\n" in f else "  y = %s") % f)
    n = len(rshape) + 1
    loss = "sum(y * r, axis=[%s])" % ", ".join(str(i) for i in range(n))
    if train:
        lines += ["  loss l = %s" % loss, "  optimizer sgd(lr=1.0)"]
    else:
        lines += ["  output l = %s" % loss]
    return "model gc_%s {\n  %s\n}\n" % (name, "\n".join(lines))


# the cases whose training build includes its CUDA half (--cuda-every)
NVCC_CASES = set()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-k", action="append", default=[])
    ap.add_argument("--cuda-every", type=int, default=1, metavar="K",
                    help="on the CPU (TRAIN_DEVICE unset or cpu), nvcc compiles the .cu of every K-th case, the "
                         "others are built with --no-cuda: nvcc is most of a build's time and the CPU path is what "
                         "runs (make test: 4; default 1: every case)")
    a = ap.parse_args()
    modelc = os.environ.get("MODELC", os.path.join(ROOT, "build", "bin", "modelc"))
    fails = 0
    names = list(CASES) + list(TIES) + list(EXACT)
    on_cpu = os.environ.get("TRAIN_DEVICE", "cpu").startswith("cpu")
    NVCC_CASES.update(names[::a.cuda_every] if on_cpu and a.cuda_every > 1 else names)
    for name in names:
        if a.k and not any(k in name for k in a.k):
            continue
        why = check(name, modelc) if name in CASES else check_ties(name, modelc) if name in TIES else \
            check_exact(name, modelc)
        print("PASS: gradcheck/%s" % name if why is None else "FAIL: gradcheck/%s: %s" % (name, why))
        fails += why is not None
    return 1 if fails else 0


def make_inputs(name, m, rng):
    """Random inputs: f32 in +-[0.2, 1.5]; an integer input (a case's fifth entry gives its range
    [0, n)) as i64 ids."""
    ints = options(CASES.get(name) or TIES[name]).get("ints", {})
    data = {}
    for dcl in m.inputs:
        shape = [B if isinstance(d, str) else d for d in dcl.dims]
        if dcl.name in ints:
            data[dcl.name] = rng.integers(0, ints[dcl.name], shape).astype(np.int64)
            continue
        v = rng.uniform(0.2, 1.5, shape) * rng.choice([-1, 1], shape)
        data[dcl.name] = v.astype(np.float32)
    return data


def sgd_gradient(name, modelc, w0, data, text=None):
    """modelc's gradient of each param (one step of sgd(lr=1) of the case's model, or of `text`),
    or a string saying why not."""
    with tempfile.TemporaryDirectory(prefix="gradcheck_%s_" % name) as d:
        src = os.path.join(d, "m.model")
        with open(src, "w") as fh:
            fh.write(text or model_text(name, True))
        prog = os.path.join(d, "gc_" + name)  # named after the case (CUDASIM_TRACE lines name the program)
        p = subprocess.run([modelc, src, "--train", "--max-batch", str(B), "-o", prog] +
                           ([] if name in NVCC_CASES else ["--no-cuda"]), capture_output=True, text=True)
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
    return {k: w0[k].astype(np.float64) - w1[k].astype(np.float64) for k in w0}


def check_ties(name, modelc):
    decl, f, rshape, params = TIES[name][:4]
    rng = np.random.default_rng(sum(map(ord, name)))
    m = refinterp.parse_source(model_text(name, False))
    data = make_inputs(name, m, rng)
    got = sgd_gradient(name, modelc, params, data)
    if isinstance(got, str):
        return got
    want = ties_expected(params["w"].astype(np.float64), params["v"].astype(np.float64),
                         data["x"].astype(np.float64), data["r"].astype(np.float64))
    bad = []
    for k in params:
        err = float(np.max(np.abs(got[k] - want[k])))
        tol = 1e-5 * float(np.max(np.abs(want[k]))) + 1e-6
        print("  %s: d l / d %s at ties %s: modelc %s, PyTorch's rule %s: max error %.2e (tolerance %.2e)"
              % (name, k, params[k].tolist(), np.round(got[k], 5).tolist(), np.round(want[k], 5).tolist(), err, tol))
        if not err <= tol:
            bad.append("d/d %s differs by %.2e (tolerance %.2e)" % (k, err, tol))
    return "; ".join(bad) or None


def check(name, modelc):
    decl, f, rshape, params = CASES[name][:4]
    buffers = options(CASES[name]).get("buffers", {})  # loaded, updated by the step, not checked
    rng = np.random.default_rng(sum(map(ord, name)))
    w0 = {k: rng.uniform(0.3, 1.0, s).astype(np.float32) * rng.choice([-1, 1], s).astype(np.float32)
          for k, s in list(params.items()) + list(buffers.items())}
    m = refinterp.parse_source(model_text(name, False))
    data = make_inputs(name, m, rng)
    g_all = sgd_gradient(name, modelc, w0, data)
    if isinstance(g_all, str):
        return g_all
    bad = []
    h = 2.0 ** -10  # exact on f32 params in [0.3, 1] (the reference rounds params to f32 first)
    for k in params:
        g = g_all[k]
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
        # and PyTorch autograd's gradient of the same case (autograd_ref.py), at the same tolerance
        ag = AUTOGRAD.get("%s/%s" % (name, k))
        if ag is None:
            bad.append("no PyTorch reference for d/d %s: run autograd_ref.py (torch) and commit its output" % k)
            continue
        err = float(np.max(np.abs(g - ag)))
        tol = 1e-4 * float(np.max(np.abs(ag))) + 1e-6
        print("  %s: d l / d %s %s: max |modelc - PyTorch autograd| %.2e (tolerance %.2e)" % (name, k, list(w0[k].shape),
                                                                                           err, tol))
        if not err <= tol:
            bad.append("d/d %s differs from PyTorch autograd by %.2e (tolerance %.2e)" % (k, err, tol))
    return "; ".join(bad) or None


if __name__ == "__main__":
    sys.exit(main())
