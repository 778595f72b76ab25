"""run_parts.py DIR — for run-parts.test: writes DIR/parts.model (300 GEMM kernels, more than
emit_c.c's RUN_PART, so run() is emitted in parts), its weights and inputs, and DIR/ref_*.npy,
the NumPy reference; `check DIR` compares the program's outputs with it."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "tools"))
import safetensors_np  # noqa: E402

N = 300
d = sys.argv[-1]
if sys.argv[1] == "check":
    worst = 0.0
    for name in ("y", "u"):
        got, ref = np.load(os.path.join(d, name + ".npy")), np.load(os.path.join(d, "ref_" + name + ".npy"))
        assert got.shape == ref.shape, (name, got.shape, ref.shape)
        worst = max(worst, float(np.max(np.abs(got - ref) / (1e-5 + np.abs(ref)))))
    print("maxdiff (relative) %.3g tol 1e-4" % worst)
    assert worst <= 1e-4
    sys.exit(0)
lines = ["model parts {", "  input x: f32[batch, 4]", "  input z: f32[4]"]
lines += ["  param w%d: f32[4, 4]" % (i % 3) for i in range(3)]
prev = "x"
for i in range(N):
    lines.append("  t%d = relu(matmul(%s, w%d))" % (i, prev, i % 3))
    prev = "t%d" % i
lines += ["  output y = %s + z" % prev, "  output u = x * 2.0", "}"]
with open(os.path.join(d, "parts.model"), "w") as f:
    f.write("\n".join(lines) + "\n")
r = np.random.default_rng(0)
w = [(np.eye(4) + 0.01 * r.standard_normal((4, 4))).astype(np.float32) for _ in range(3)]
safetensors_np.write(os.path.join(d, "w.safetensors"), {"w%d" % i: w[i] for i in range(3)})
x = np.abs(r.standard_normal((3, 4))).astype(np.float32)
z = r.standard_normal(4).astype(np.float32)
np.save(os.path.join(d, "x.npy"), x)
np.save(os.path.join(d, "z.npy"), z)
t = x.astype(np.float64)
for i in range(N):
    t = np.maximum(t @ w[i % 3].astype(np.float64), 0)
np.save(os.path.join(d, "ref_y.npy"), (t + z).astype(np.float32))
np.save(os.path.join(d, "ref_u.npy"), x * 2)
