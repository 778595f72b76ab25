#!/usr/bin/env python3
"""PyTorch's training of the tests/train models, step for step: writes expected_NAME.safetensors
(the loss of every step as `losses`, and the final weights under their names).

    /path/venv-torch/bin/python reference.py      (torch, NumPy; run once, the outputs are committed)

Each model is the .model file's computation written with torch.nn.functional (batch_norm in
training mode, its running statistics updated in place and num_batches_tracked counted as
nn.BatchNorm2d does), from make_data's
weights, trained on make_data's samples in file order at batch 8 for two epochs (10 steps) with
the optimizer of the .model file (torch.optim, its default single-tensor implementation), in
float32 on the CPU (gpt2_adamw in float64: see FLOAT64).
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
import make_data  # noqa: E402
import safetensors_np  # noqa: E402
from run import ILL_COND  # noqa: E402

BATCH, EPOCHS = 8, 2


def gpt2_forward(p, ids, cfg=None):
    """GPT-2 as examples/gpt2 (and its reference.py) computes it: pre-norm layers, causal
    attention, GELU (tanh), the head tied to wte; logits [B, T, V]. cfg: gen_model.py's
    configuration keys (default: gpt2_adamw's, make_data.GPT2)."""
    cfg = cfg or make_data.GPT2
    C, H = cfg["n_embd"], cfg["n_head"]
    B, T = ids.shape
    x = F.embedding(ids, p["wte.weight"]) + p["wpe.weight"][:T]
    for i in range(cfg["n_layer"]):
        q_ = "h.%d." % i
        a = F.layer_norm(x, (C,), p[q_ + "ln_1.weight"], p[q_ + "ln_1.bias"], eps=1e-5)
        qkv = a @ p[q_ + "attn.c_attn.weight"] + p[q_ + "attn.c_attn.bias"]
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in qkv.split(C, dim=-1))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + (y @ p[q_ + "attn.c_proj.weight"] + p[q_ + "attn.c_proj.bias"])
        m = F.gelu(F.layer_norm(x, (C,), p[q_ + "ln_2.weight"], p[q_ + "ln_2.bias"], eps=1e-5) @ p[q_ + "mlp.c_fc.weight"]
                   + p[q_ + "mlp.c_fc.bias"], approximate="tanh")
        x = x + (m @ p[q_ + "mlp.c_proj.weight"] + p[q_ + "mlp.c_proj.bias"])
    hf = F.layer_norm(x, (C,), p["ln_f.weight"], p["ln_f.bias"], eps=1e-5)
    return F.linear(hf, p["wte.weight"])


def forward(name, p, d):
    if name == "gpt2_adamw":
        logits = gpt2_forward(p, d["ids"])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), d["next"].reshape(-1))
    x = d["x"]
    if name in ("mlp_adamw", "mlp_sched"):
        h = F.relu(F.linear(x, p["fc1.weight"], p["fc1.bias"]))
        return F.cross_entropy(F.linear(h, p["fc2.weight"], p["fc2.bias"]), d["labels"])
    if name == "mlp_sgd":
        h = torch.tanh(F.linear(x, p["fc1.weight"], p["fc1.bias"]))
        return F.mse_loss(F.linear(h, p["fc2.weight"], p["fc2.bias"]), d["y"])
    if name == "cnn_adamw":
        h = F.conv2d(x, p["conv1.weight"], padding=1)
        h = F.relu(F.batch_norm(h, p["bn1.running_mean"], p["bn1.running_var"], p["bn1.weight"], p["bn1.bias"],
                                training=True, momentum=0.1, eps=1e-5))
        p["bn1.num_batches_tracked"] += 1  # as nn.BatchNorm2d does in training mode
        h = F.max_pool2d(h, 2)
        h = F.relu(F.conv2d(h, p["conv2.weight"], p["conv2.bias"], padding=1, groups=8))
        h = F.avg_pool2d(h, 3, stride=1, padding=1, count_include_pad=False)
        h = F.conv2d(h, p["conv3.weight"], stride=2, padding=1)
        h = F.relu(F.batch_norm(h, p["bn2.running_mean"], p["bn2.running_var"], p["bn2.weight"], p["bn2.bias"],
                                training=True, momentum=0.2, eps=1e-5))
        h = torch.flatten(F.adaptive_avg_pool2d(h, 1), 1)
        return F.cross_entropy(F.linear(h, p["fc.weight"], p["fc.bias"]), d["labels"])
    e = F.linear(x, p["emb.weight"])
    h = F.gelu(F.linear(e, p["fc1.weight"], p["fc1.bias"])) * torch.sigmoid(e.mean(1, keepdim=True))
    out = F.linear(h, p["fc2.weight"])
    return (F.cross_entropy(out[:, 0:3], d["labels"], ignore_index=1, label_smoothing=0.1)
            + 0.5 * F.binary_cross_entropy_with_logits(out[:, 3:5], d["flags"]))


# mlp_sched: clip_grad_norm_ and a schedule, as its optimizer statement declares them
CLIP = {"mlp_sched": 0.5}
WARMUP, DECAY, MIN_LR = 3, 5, 0.002


def schedule(t, lr):
    """The learning rate of step t (1, 2, ...): linear warmup, then cosine decay (mrt_train_lr)."""
    if t <= WARMUP:
        return lr * t / WARMUP
    k = min(t - WARMUP, DECAY)
    return MIN_LR + (lr - MIN_LR) * (1 + math.cos(math.pi * k / DECAY)) / 2


def optimizer(name, params):
    if name == "mlp_sched":
        return torch.optim.AdamW(params, lr=0.02, weight_decay=0.01)
    if name == "mlp_adamw":
        return torch.optim.AdamW(params, lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    if name == "gpt2_adamw":
        return torch.optim.AdamW(params, lr=0.01, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    if name == "mlp_sgd":
        return torch.optim.SGD(params, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.001)
    if name == "cnn_adamw":
        return torch.optim.AdamW(params, lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    return torch.optim.Adam(params, lr=0.005, weight_decay=0.01)


# Models trained in float64: PyTorch's own float32 run of gpt2_adamw is 1.5e-5 (relative) away
# from its float64 run on h.0.attn.c_attn.weight, above the test's tolerance, so the reference is
# the float64 one (rounded to float32 when written) and the error printed is modelc's alone.
FLOAT64 = {"gpt2_adamw"}


def train(name, dt=None):
    """Train `name` as tests/train/run.py does; returns {tensor: final value} and the per-step
    losses and gradient norms. dt: the float dtype (default: float64 for FLOAT64, else float32)."""
    w, data = make_data.make(name)
    # buffers (batch norm's running statistics, num_batches_tracked) take no gradient
    buffers = ("emb.weight", "running_mean", "running_var", "num_batches_tracked")
    if dt is None:
        dt = torch.float64 if name in FLOAT64 else torch.float32
    p = {k: torch.tensor(v, dtype=dt if v.dtype == np.float32 else None,
                         requires_grad=not any(k.endswith(b) for b in buffers)) for k, v in w.items()}
    trained = [t for k, t in p.items() if t.requires_grad]
    opt = optimizer(name, trained)
    sched = None
    if name in CLIP:  # LambdaLR calls the lambda with 0 before step 1
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: schedule(i + 1, 0.02) / 0.02)
    n = next(iter(data.values())).shape[0]
    losses, norms = [], []
    for _ in range(EPOCHS):
        for b0 in range(0, n, BATCH):
            d = {k: torch.tensor(v[b0:b0 + BATCH]) for k, v in data.items()}
            opt.zero_grad()
            loss = forward(name, p, d)
            loss.backward()
            if name in CLIP:
                norm = torch.nn.utils.clip_grad_norm_(trained, CLIP[name])
            else:
                norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(t.grad) for t in trained]))
            opt.step()
            if sched:
                sched.step()
            losses.append(loss.item())
            norms.append(norm.item())
    return {k: t.detach().numpy() for k, t in p.items()}, losses, norms


def write_reference(name):
    """expected_NAME.safetensors: the final weights, "losses" and "grad_norms"; for a FLOAT64
    model also "f32_error.TENSOR", PyTorch's own float32 run's max |f32 - f64| / max |f64| on
    each tensor (float32's own noise there: run.py's tolerance is the larger of 1e-5 and twice it)."""
    final, losses, norms = train(name)
    out = {k: v.astype(np.float32) for k, v in final.items()}
    if name in FLOAT64:
        f32, _, _ = train(name, torch.float32)
        for k, v in final.items():
            if v.dtype == np.float64:
                err = np.max(np.abs(f32[k].astype(np.float64) - v)) / max(np.max(np.abs(v)), 1e-30)
                out["f32_error." + k] = np.array([err], dtype=np.float32)
                if name in ILL_COND and ILL_COND[name][0].match(k):
                    part = ILL_COND[name][1]
                    err = np.max(np.abs(f32[k][part].astype(np.float64) - v[part])) / max(np.max(np.abs(v)), 1e-30)
                    out["f32_error." + k + ".part"] = np.array([err], dtype=np.float32)
    out["losses"] = np.array(losses, dtype=np.float32)
    out["grad_norms"] = np.array(norms, dtype=np.float32)
    safetensors_np.write(os.path.join(HERE, "expected_%s.safetensors" % name), out)
    print(name, "losses", " ".join("%.6f" % v for v in losses))


if __name__ == "__main__":
    torch.manual_seed(0)
    for name in sys.argv[1:] or ["mlp_adamw", "mlp_sgd", "mlp_adam", "mlp_sched", "cnn_adamw", "gpt2_adamw"]:
        write_reference(name)
