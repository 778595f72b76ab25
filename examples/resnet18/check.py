#!/usr/bin/env python3
"""Compare modelc's ResNet-18 logits with PyTorch's.

    python3 check.py VARIANT LOGITS.npy       # VARIANT: b1 or b8 (compared with ref_VARIANT.npy)

Prints the largest absolute difference, the largest difference relative to max|ref|, the
tolerance, and how many argmax (top-1) positions agree; then one line `PASS: examples/resnet18/VARIANT
(...)` or `FAIL: examples/resnet18/VARIANT: why`. Exits 1 on failure, 2 on a usage or file error.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
from check_logits import check  # noqa: E402  (tools/check_logits.py)

RTOL = 1e-4  # max|got - ref| <= RTOL * max|ref|


def main(argv):
    if len(argv) != 3:
        print("usage: check.py VARIANT LOGITS.npy", file=sys.stderr)
        return 2
    return check(f"examples/resnet18/{argv[1]}", os.path.join(HERE, f"ref_{argv[1]}.npy"), argv[2], RTOL)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
