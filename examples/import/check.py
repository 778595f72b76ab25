#!/usr/bin/env python3
"""examples/import/check.py NAME EXE WEIGHTS: run EXE on NAME/input_*.npy and compare each
output with NAME/expected_*.npy (max |got - torch| <= 1e-4 max |torch|); PASS/FAIL line. A model
with symbolic axes has further shapes, caseN_input_*.npy and caseN_expected_*.npy, each run by
the same EXE and checked the same way."""
import glob
import os
import re

import numpy as np
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
from check_logits import check  # noqa: E402


def run_case(name, exe, weights, d, pre, several):
    """Run EXE on d/PRE input_*.npy, compare with d/PRE expected_*.npy; the exit status."""
    out = os.path.dirname(os.path.abspath(exe))
    cmd = [exe, "--weights", weights, "--device", "cpu"]
    shapes = []
    for p in sorted(glob.glob(os.path.join(d, pre + "input_*.npy"))):
        cmd += ["--input", "%s=%s" % (os.path.basename(p)[len(pre + "input_"):-4], p)]
        shapes.append(list(np.load(p, mmap_mode="r").shape))
    label = "examples/import/%s%s" % (name, " %s" % shapes[0] if several else "")
    exp = sorted(glob.glob(os.path.join(d, pre + "expected_*.npy")))
    for p in exp:
        o = os.path.basename(p)[len(pre + "expected_"):-4]
        cmd += ["--output", "%s=%s" % (o, os.path.join(out, "got_%s%s.npy" % (pre, o)))]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print("FAIL: %s: the program failed: %s" % (label, r.stderr.strip()))
        return 1
    rc = 0
    for p in exp:
        o = os.path.basename(p)[len(pre + "expected_"):-4]
        rc |= check(label, p, os.path.join(out, "got_%s%s.npy" % (pre, o)), rtol=1e-4)
    return rc


def main():
    name, exe, weights = sys.argv[1:4]
    d = os.path.join(HERE, name)
    cases = sorted({m.group(1) for f in os.listdir(d) for m in [re.match(r"^(case\d+_)input_", f)] if m})
    rc = 0
    for pre in [""] + cases:
        rc |= run_case(name, exe, weights, d, pre, bool(cases))
    return rc


if __name__ == "__main__":
    sys.exit(main())
