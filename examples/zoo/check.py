#!/usr/bin/env python3
"""Compare a zoo model's outputs from modelc with PyTorch's (the committed NAME_expected_*.npy).

    python3 check.py NAME OUTDIR            # reads OUTDIR/NAME_<output>.npy for each expected output
    python3 check.py NAME OUTDIR --seq N    # the run on the first N tokens of the inputs: compared
                                            # with the first N positions of the expected outputs
                                            # (a causal model's outputs for a prefix are the prefix
                                            # of its outputs: llama at another sequence length)
    python3 check.py NAME OUTDIR --f16      # the model compiled with f16 weights, inputs and
                                            # outputs, against the same float32 PyTorch outputs at
                                            # RTOL_F16

For each output prints the largest absolute difference, the largest difference relative to
max|ref| (the pass criterion: at most RTOL), the largest per-element relative difference
|got - ref| / |ref| over the elements where |ref| >= TINY * max|ref| (for information: it shows
whether small values are also right), and the tolerance; then one line
`PASS: examples/zoo/NAME (...)` or `FAIL: examples/zoo/NAME: why`. Exits 1 on failure, 2 on a
usage or file error.
"""
import glob
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
RTOL = 1e-4   # max|got - ref| <= RTOL * max|ref|, per output
RTOL_F16 = 4e-3   # the same for an f16 run: f16's epsilon is 9.8e-4, and PyTorch's own f16 run
                  # of convnext is 7.3e-4 of max|ref| from its float32 run
TINY = 1e-2   # per-element relative error only where |ref| >= TINY * max|ref|


def main(argv):
    seq, f16, rtol = None, False, RTOL
    if len(argv) == 5 and argv[3] == "--seq" and argv[4].isdigit():
        seq = int(argv[4])
    elif len(argv) == 4 and argv[3] == "--f16":
        f16, rtol = True, RTOL_F16
    elif len(argv) != 3:
        print("usage: check.py NAME OUTDIR [--seq N | --f16]", file=sys.stderr)
        return 2
    name, outdir = argv[1], argv[2]
    test = f"examples/zoo/{name}" + (f"@seq{seq}" if seq else "") + ("@f16" if f16 else "")
    want = np.float16 if f16 else np.float32
    prefix = os.path.join(HERE, f"{name}_expected_")
    refs = sorted(glob.glob(prefix + "*.npy"))
    if not refs:
        print(f"check.py: error: no {prefix}*.npy (run reference.py)", file=sys.stderr)
        return 2
    bad, worst = [], 0.0
    for ref_path in refs:
        out = ref_path[len(prefix):-len(".npy")]
        try:
            ref = np.load(ref_path)
            if seq is not None:
                ref = ref[:, :seq]
            got = np.load(os.path.join(outdir, f"{name}_{out}.npy"))
        except (OSError, ValueError) as e:
            print(f"check.py: error: {e}", file=sys.stderr)
            return 2
        if got.shape != ref.shape or got.dtype != want:
            bad.append(f"{out} is {got.dtype}{list(got.shape)}, expected "
                       f"{np.dtype(want).name}{list(ref.shape)}")
            continue
        if not np.all(np.isfinite(got)):
            bad.append(f"{out} has non-finite values")
            continue
        g, r = got.astype(np.float64), ref.astype(np.float64)
        scale = float(np.max(np.abs(r)))
        diff = np.abs(g - r)
        rel = float(diff.max()) / scale
        big = np.abs(r) >= TINY * scale
        elem = float(np.max(diff[big] / np.abs(r[big])))
        worst = max(worst, rel)
        print(f"{test}.{out} {list(ref.shape)}: max abs diff {diff.max():.2e}, relative to "
              f"max|ref| ({scale:.3g}) {rel:.2e}; per element (|ref| >= {TINY:g} max|ref|) "
              f"{elem:.2e}; tolerance {rtol:.0e} of max|ref|")
        if rel > rtol:
            bad.append(f"{out} differs from PyTorch by {rel:.1e} of max|ref| (> {rtol:.0e})")
    if bad:
        print(f"FAIL: {test}: " + "; ".join(bad))
        return 1
    print(f"PASS: {test} (max relative diff {worst:.1e} <= {rtol:.0e})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
