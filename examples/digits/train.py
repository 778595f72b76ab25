#!/usr/bin/env python3
"""Train the digits MLP with PyTorch and write the files the example runs on.

    python3 train.py            # needs torch, scikit-learn, safetensors, numpy

Writes, next to this script:
  digits.safetensors  fc1.weight [128,64], fc1.bias [128], fc2.weight [10,128], fc2.bias [10]
  test_x.npy          [360, 64] float32, pixel values / 16 (in [0, 1])
  test_y.npy          [360] int64 labels
  torch_logits.npy    [360, 10] float32, the trained model's eval output on test_x

The data is scikit-learn's 8x8 digits (1797 images, shipped with scikit-learn, no download),
split 80/20 with train_test_split(test_size=0.2, random_state=0, stratify=y).
Everything is seeded, and training runs on the CPU, so a rerun gives the same files up to
floating-point differences between PyTorch versions and CPUs.
"""
import os
import random

import numpy as np
import torch
from safetensors.torch import save_file
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 300
BATCH = 64
LR = 1e-2


class Digits(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(64, 128)
        self.fc2 = torch.nn.Linear(128, 10)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def main():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    y = y.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.2, random_state=0, stratify=y)

    model = Digits()
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    xt, yt = torch.from_numpy(x_train), torch.from_numpy(y_train)
    gen = torch.Generator().manual_seed(0)
    model.train()
    for step in range(STEPS):
        idx = torch.randint(0, len(xt), (BATCH,), generator=gen)
        loss = torch.nn.functional.cross_entropy(model(xt[idx]), yt[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0 or step == STEPS - 1:
            print(f"step {step:3d}  loss {loss.item():.4f}")

    model.eval()
    with torch.no_grad():
        logits = model(torch.from_numpy(x_test)).numpy().astype(np.float32)
        train_acc = (model(xt).argmax(1) == yt).float().mean().item()
    test_acc = float((logits.argmax(1) == y_test).mean())
    print(f"train accuracy {train_acc:.4f}, test accuracy {test_acc:.4f} "
          f"({int((logits.argmax(1) == y_test).sum())}/{len(y_test)})")

    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(state, os.path.join(HERE, "digits.safetensors"))
    np.save(os.path.join(HERE, "test_x.npy"), np.ascontiguousarray(x_test, dtype=np.float32))
    np.save(os.path.join(HERE, "test_y.npy"), np.ascontiguousarray(y_test, dtype=np.int64))
    np.save(os.path.join(HERE, "torch_logits.npy"), np.ascontiguousarray(logits))
    print("wrote digits.safetensors test_x.npy test_y.npy torch_logits.npy")


if __name__ == "__main__":
    main()
