#!/usr/bin/env python3
"""PyTorch's training of the tests/train models, step for step: writes expected_NAME.safetensors
(the loss of every step as `losses`, and the final weights under their names).

    /path/venv-torch/bin/python reference.py      (torch, NumPy; run once, the outputs are committed)

Each model is the .model file's computation written with torch.nn.functional (batch_norm in
training mode, its running statistics updated in place and num_batches_tracked counted as
nn.BatchNorm2d does), from make_data's
weights, trained on make_data's samples in file order at batch 8 for two epochs (10 steps) with
the optimizer of the .model file (torch.optim, its default single-tensor implementation), in
float32 on the CPU.
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

BATCH, EPOCHS = 8, 2


def forward(name, p, d):
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
    if name == "mlp_sgd":
        return torch.optim.SGD(params, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.001)
    if name == "cnn_adamw":
        return torch.optim.AdamW(params, lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    return torch.optim.Adam(params, lr=0.005, weight_decay=0.01)


def train(name):
    w, data = make_data.make(name)
    # buffers (batch norm's running statistics, num_batches_tracked) take no gradient
    buffers = ("emb.weight", "running_mean", "running_var", "num_batches_tracked")
    p = {k: torch.tensor(v, requires_grad=not any(k.endswith(b) for b in buffers)) for k, v in w.items()}
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
    out = {k: t.detach().numpy() for k, t in p.items()}
    out["losses"] = np.array(losses, dtype=np.float32)
    out["grad_norms"] = np.array(norms, dtype=np.float32)
    safetensors_np.write(os.path.join(HERE, "expected_%s.safetensors" % name), out)
    print(name, "losses", " ".join("%.6f" % v for v in losses))


if __name__ == "__main__":
    torch.manual_seed(0)
    for name in sys.argv[1:] or ["mlp_adamw", "mlp_sgd", "mlp_adam", "mlp_sched", "cnn_adamw"]:
        train(name)
