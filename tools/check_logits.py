"""tools/check_logits.py — compare logits modelc computed with PyTorch's reference logits.

Used by the examples' check.py scripts. check() prints the largest absolute difference, the
largest difference relative to max|ref|, the tolerance and how many argmax positions agree, then
one line `PASS: NAME (...)` or `FAIL: NAME: why`, and returns the exit status: 0 pass, 1 fail,
2 usage or file error.
"""
import sys

import numpy as np


def check(name, ref_path, got_path, rtol=1e-4):
    """Pass when max|got - ref| <= rtol * max|ref| (float64 arithmetic) and got is float32 of
    ref's shape."""
    try:
        ref = np.load(ref_path)
        got = np.load(got_path)
    except (OSError, ValueError) as e:
        print(f"check.py: error: {e}", file=sys.stderr)
        return 2
    if got.shape != ref.shape or got.dtype != np.float32:
        print(f"FAIL: {name}: output is {got.dtype}{list(got.shape)}, expected float32{list(ref.shape)}")
        return 1
    got64, ref64 = got.astype(np.float64), ref.astype(np.float64)
    scale = float(np.max(np.abs(ref64)))
    diff = float(np.max(np.abs(got64 - ref64))) if np.all(np.isfinite(got)) else float("inf")
    rel = diff / scale
    agree = int((got.argmax(-1) == ref.argmax(-1)).sum())
    print(f"{name}: max |got - torch| = {diff:.2e}, relative to max|torch| ({scale:.3g}) = "
          f"{rel:.2e}, tolerance {rtol:.0e}; argmax agrees at {agree}/{ref[..., 0].size} positions")
    if rel <= rtol:
        print(f"PASS: {name} (max abs diff {diff:.1e}, relative {rel:.1e} <= {rtol:.0e})")
        return 0
    print(f"FAIL: {name}: logits differ from PyTorch by {rel:.1e} of max|ref| (> {rtol:.0e})")
    return 1
