#!/usr/bin/env python3
"""Compare modelc's digits logits with PyTorch's.

    python3 check.py LOGITS.npy

Prints the accuracy on the 360 test images, how many predictions agree with PyTorch, and the
largest absolute logit difference. Exits 1 if any prediction differs or the difference exceeds
the tolerance, 2 on a usage or file error.
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TOL = 1e-4


def main(argv):
    if len(argv) != 2:
        print("usage: check.py LOGITS.npy", file=sys.stderr)
        return 2
    try:
        got = np.load(argv[1])
    except (OSError, ValueError) as e:
        print(f"check.py: error: cannot read {argv[1]}: {e}", file=sys.stderr)
        return 2
    ref = np.load(os.path.join(HERE, "torch_logits.npy"))
    y = np.load(os.path.join(HERE, "test_y.npy"))
    if got.shape != ref.shape or got.dtype != np.float32:
        print(f"check.py: error: {argv[1]} is {got.dtype}{list(got.shape)}, "
              f"expected float32{list(ref.shape)}", file=sys.stderr)
        return 1

    n = len(y)
    pred, ref_pred = got.argmax(1), ref.argmax(1)
    correct = int((pred == y).sum())
    agree = int((pred == ref_pred).sum())
    diff = float(np.max(np.abs(got.astype(np.float64) - ref.astype(np.float64))))
    if not np.all(np.isfinite(got)):
        diff = float("inf")

    print(f"accuracy: {correct / n:.3f} ({correct}/{n})")
    print(f"agree with PyTorch: {agree}/{n} predictions")
    print(f"max |logit - torch| = {diff:.1e} (tolerance 1e-4)")
    ok = agree == n and diff <= TOL
    if not ok:
        bad = np.nonzero(pred != ref_pred)[0]
        if len(bad):
            print(f"FAIL: predictions differ at test images {bad[:10].tolist()}"
                  f"{' ...' if len(bad) > 10 else ''}")
        else:
            print("FAIL: logits differ from PyTorch by more than the tolerance")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
