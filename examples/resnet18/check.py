#!/usr/bin/env python3
"""Compare modelc's ResNet-18 logits with PyTorch's.

    python3 check.py VARIANT LOGITS.npy       # VARIANT: b1 or b8 (compared with ref_VARIANT.npy)

Prints the largest absolute difference, the largest difference relative to max|ref|, the
tolerance, and whether the top-1 classes agree; then one line `PASS: examples/resnet18/VARIANT
(...)` or `FAIL: examples/resnet18/VARIANT: why`. Exits 1 on failure, 2 on a usage or file error.
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
RTOL = 1e-4  # max|got - ref| <= RTOL * max|ref|


def main(argv):
    if len(argv) != 3:
        print("usage: check.py VARIANT LOGITS.npy", file=sys.stderr)
        return 2
    name = f"examples/resnet18/{argv[1]}"
    try:
        ref = np.load(os.path.join(HERE, f"ref_{argv[1]}.npy"))
        got = np.load(argv[2])
    except (OSError, ValueError) as e:
        print(f"check.py: error: {e}", file=sys.stderr)
        return 2
    if got.shape != ref.shape or got.dtype != np.float32:
        print(f"FAIL: {name}: output is {got.dtype}{list(got.shape)}, "
              f"expected float32{list(ref.shape)}")
        return 1
    got64, ref64 = got.astype(np.float64), ref.astype(np.float64)
    scale = float(np.max(np.abs(ref64)))
    diff = float(np.max(np.abs(got64 - ref64))) if np.all(np.isfinite(got)) else float("inf")
    rel = diff / scale
    agree = int((got.argmax(-1) == ref.argmax(-1)).sum())
    print(f"{name}: max |got - torch| = {diff:.2e}, relative to max|torch| ({scale:.3g}) = "
          f"{rel:.2e}, tolerance {RTOL:.0e}; top-1 agrees {agree}/{len(ref)}")
    if rel <= RTOL:
        print(f"PASS: {name} (max abs diff {diff:.1e}, relative {rel:.1e} <= {RTOL:.0e})")
        return 0
    print(f"FAIL: {name}: logits differ from PyTorch by {rel:.1e} of max|ref| (> {RTOL:.0e})")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
