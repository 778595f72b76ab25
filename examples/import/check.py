#!/usr/bin/env python3
"""examples/import/check.py NAME EXE WEIGHTS: run EXE on NAME/input_*.npy and compare each
output with NAME/expected_*.npy (max |got - torch| <= 1e-4 max |torch|); PASS/FAIL line."""
import glob
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
from check_logits import check  # noqa: E402


def main():
    name, exe, weights = sys.argv[1:4]
    d = os.path.join(HERE, name)
    out = os.path.dirname(os.path.abspath(exe))
    cmd = [exe, "--weights", weights, "--device", "cpu"]
    for p in sorted(glob.glob(os.path.join(d, "input_*.npy"))):
        cmd += ["--input", "%s=%s" % (os.path.basename(p)[len("input_"):-4], p)]
    exp = sorted(glob.glob(os.path.join(d, "expected_*.npy")))
    for p in exp:
        o = os.path.basename(p)[len("expected_"):-4]
        cmd += ["--output", "%s=%s" % (o, os.path.join(out, "got_%s.npy" % o))]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print("FAIL: examples/import/%s: the program failed: %s" % (name, r.stderr.strip()))
        return 1
    rc = 0
    for p in exp:
        o = os.path.basename(p)[len("expected_"):-4]
        rc |= check("examples/import/%s" % name, p, os.path.join(out, "got_%s.npy" % o), rtol=1e-4)
    return rc


if __name__ == "__main__":
    sys.exit(main())
