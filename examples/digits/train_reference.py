#!/usr/bin/env python3
"""The digits MLP trained from scratch by PyTorch with the recipe `make train` gives modelc, for
the comparison of test accuracies.

    /path/venv-torch/bin/python train_reference.py     (torch, scikit-learn; run once: its outputs are committed)

Writes next to this script:
  train_x.npy, train_y.npy   the training split (1437 images) that train.py trains on
  torch_train.json           PyTorch's test accuracy (and the last loss) with the recipe below

The recipe, identical on both sides: make_init.py's initial weights (NumPy, seeded, nn.Linear's
default ranges), torch.optim.Adam(lr=1e-2), batch 64, 13 epochs, each epoch's order the one
`PROG train --shuffle --seed 0` computes (splitmix64 and Fisher-Yates, ported below).
"""
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_init  # noqa: E402

BATCH, EPOCHS, LR, SEED = 64, 13, 1e-2, 0
M64 = (1 << 64) - 1


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & M64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return state, z ^ (z >> 31)


def orders(n, epochs, seed):
    """The sample order of each epoch of PROG train --shuffle --seed SEED (rt_train.c)."""
    order, state = list(range(n)), seed
    for _ in range(epochs):
        for i in range(n - 1, 0, -1):
            state, r = splitmix64(state)
            j = r % (i + 1)
            order[i], order[j] = order[j], order[i]
        yield list(order)


def main():
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    y = y.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
    np.save(os.path.join(HERE, "train_x.npy"), np.ascontiguousarray(x_train))
    np.save(os.path.join(HERE, "train_y.npy"), np.ascontiguousarray(y_train))
    p = {k: torch.tensor(v, requires_grad=True) for k, v in make_init.weights().items()}
    opt = torch.optim.Adam(list(p.values()), lr=LR)
    xt, yt = torch.from_numpy(x_train), torch.from_numpy(y_train)
    for order in orders(len(xt), EPOCHS, SEED):
        for b0 in range(0, len(order), BATCH):
            idx = torch.tensor(order[b0:b0 + BATCH])
            h = F.relu(F.linear(xt[idx], p["fc1.weight"], p["fc1.bias"]))
            loss = F.cross_entropy(F.linear(h, p["fc2.weight"], p["fc2.bias"]), yt[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    with torch.no_grad():
        h = F.relu(F.linear(torch.from_numpy(x_test), p["fc1.weight"], p["fc1.bias"]))
        pred = F.linear(h, p["fc2.weight"], p["fc2.bias"]).argmax(1).numpy()
    acc = float((pred == y_test).mean())
    with open(os.path.join(HERE, "torch_train.json"), "w") as f:
        json.dump({"test_accuracy": acc, "last_loss": loss.item(), "recipe": "adam lr=1e-2, batch 64, 13 epochs, "
                   "shuffle seed 0, make_init.py weights"}, f, indent=1)
    print("PyTorch: test accuracy %.4f (%d/%d), last loss %.4f" % (acc, int((pred == y_test).sum()), len(y_test),
                                                                    loss.item()))


if __name__ == "__main__":
    main()
