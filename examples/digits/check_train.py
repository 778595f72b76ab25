#!/usr/bin/env python3
"""The test accuracy of the digits MLP trained by modelc against PyTorch's with the same recipe.

    python3 check_train.py TRAINED_LOGITS.npy TRAIN.log

Prints both accuracies and the last losses, then `PASS: examples/digits/train` when modelc's
test accuracy is at least PyTorch's (torch_train.json, made by train_reference.py), else FAIL.
"""
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv):
    logits = np.load(argv[1])
    y = np.load(os.path.join(HERE, "test_y.npy"))
    with open(os.path.join(HERE, "torch_train.json")) as f:
        ref = json.load(f)
    with open(argv[2]) as f:
        lines = f.read().split("\n")
    last = [line for line in lines if line.strip()][-1].split()
    acc = float((logits.argmax(1) == y).mean())
    print("modelc:  test accuracy %.4f (%d/%d), %s steps, last loss %s" % (acc, int((logits.argmax(1) == y).sum()),
                                                                          len(y), last[3], last[5]))
    print("PyTorch: test accuracy %.4f, last loss %.4f (%s)" % (ref["test_accuracy"], ref["last_loss"], ref["recipe"]))
    if acc >= ref["test_accuracy"]:
        print("PASS: examples/digits/train (accuracy %.4f >= PyTorch's %.4f)" % (acc, ref["test_accuracy"]))
        return 0
    print("FAIL: examples/digits/train: accuracy %.4f < PyTorch's %.4f" % (acc, ref["test_accuracy"]))
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
