"""tests/dp/pipe.py: pipelined model parallelism (`PROG --micro-batches N`, runtime/rt_pipe.c),
called by tests/dp/run.py.

A model split by 'on' regions over two CPU devices (cpu:0, cpu:1), or over two simulated GPUs
(the cudasim suite: --device cuda:0 --device-map cpu:1=cuda:1), run in micro-batches, against
  - each micro-batch run alone without --micro-batches, concatenated: bit for bit (the hand-over of
    the stages, the concurrent runs and the gather lose nothing),
  - the whole batch in one sequential run: within 1e-5 of the largest magnitude (a GEMM library may
    round a row differently at another number of rows), and
  - NumPy in float64 (an independent reference): within 1e-4.
Then the bad input: 0 micro-batches, more micro-batches than items (a notice, then clamped), a
model without 'on' regions (a notice, runs as usual), a split model whose ops mix batch items
(refused), --micro-batches with --devices, and a micro-batch that fails (its error names it).
"""
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import safetensors_np  # noqa: E402

ATOL = 1e-5
REF_TOL = 1e-4

MLP = """# two halves of an MLP, one per device (tests/dp/pipe.py)
model mlp2 {
  input x: f32[batch, 48]
  param w1: f32[64, 48]
  param b1: f32[64]
  param w2: f32[32, 64]
  param w3: f32[64, 32]
  param w4: f32[10, 64]
  h = relu(linear(relu(linear(x, w1, b1)), w2))
  on cpu:1 {
    output y = linear(tanh(linear(h, w3)), w4)
  }
}
"""

CNN = """# a CNN: convolutions on the first device, the classifier on the second (tests/dp/pipe.py)
model cnn2 {
  input x: f32[batch, 2, 8, 8]
  param c1: f32[4, 2, 3, 3]
  param c2: f32[4, 4, 3, 3]
  param fc: f32[5, 64]
  h = max_pool2d(relu(conv2d(relu(conv2d(x, c1, padding=1)), c2, padding=1)), kernel=2)
  on cpu:1 {
    output y = softmax(linear(reshape(h, [-1, 64]), fc), axis=1)
    output z = sum(h, axis=1)
  }
}
"""

# the first stage's values feed the second stage and, later, the first stage again
BACK = """# stages that come back: cpu:0, cpu:1, cpu:0 (tests/dp/pipe.py)
model back {
  input x: f32[batch, 16]
  param w: f32[16, 16]
  a = relu(x @ w)
  on cpu:1 { b = tanh(a @ w) }
  output y = a + b * 2
}
"""

MIXED = """# a split model whose batch items interact (tests/dp/pipe.py)
model mixed2 {
  input x: f32[batch, 4]
  h = x * 2
  on cpu:1 { output y = h - mean(h, axis=0, keepdim=true) }
}
"""

EMB = """# an embedding on the second device: a bad id fails its micro-batch (tests/dp/pipe.py)
model emb2 {
  input ids: i64[batch, 3]
  param e: f32[10, 4]
  j = ids + 1
  on cpu:1 { output y = embedding(j, e) }
}
"""


# outputs whose leading axis is 2*batch (two rows per batch item) on the second device: each
# micro-batch's rows start at 2*first
ROWS = """# outputs of batch*2 rows (tests/dp/pipe.py)
model rows2 {
  input x: f32[batch, 64]
  param w1: f32[10, 64]
  h = relu(linear(x, w1))
  on cpu:1 {
    output y = reshape(h, [batch*2, 5])
    output r = repeat_interleave(h, 2, dim=0)
  }
}
"""


def rows_ref(x, w1):
    """NumPy in float64: the reference of ROWS (and of run.py's ROWS)."""
    h = np.maximum(x.astype(np.float64) @ w1.astype(np.float64).T, 0)
    return {"y": h.reshape(2 * len(x), 5), "r": np.repeat(h, 2, axis=0)}


def check_rows(modelc, d, kind, dev, report):
    prog, err = build(modelc, d, "rows2", ROWS, 8, kind == "cuda")
    if err:
        report("pipe_rows", err)
        return
    rng = np.random.default_rng(11)
    w1 = rng.standard_normal((10, 64)).astype(np.float32) / 8
    w = os.path.join(d, "rows2.safetensors")
    safetensors_np.write(w, {"w1": w1})
    for b, n in ((13, 2), (16, 3)):
        x = rng.standard_normal((b, 64)).astype(np.float32)
        report("pipe_rows_b%d_mb%d" % (b, n), check(prog, w, {"x": x}, ["y", "r"], n, dev, d, "rows_b%d_mb%d" % (b, n),
                                                    rows_ref(x, w1), 8))


def sh(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def mbs(b, n, maxb=None):
    """The runtime's cut: min(n, b) micro-batches, more when one would exceed the maximum batch."""
    n = min(n, b)
    if maxb and -(-b // n) > maxb:
        n = -(-b // maxb)
    out, first = [], 0
    for i in range(n):
        c = b // n + (i < b % n)
        out.append((first, c))
        first += c
    return out


def relmax(a, b):
    return float(np.max(np.abs(a.astype(np.float64) - b)) / max(float(np.max(np.abs(b))), 1e-30))


def run(prog, weights, inputs, outs, d, tag, extra):
    """Run prog; returns ({output: array}, stderr) or (None, message)."""
    cmd = [prog]
    if weights:
        cmd += ["--weights", weights]
    for k, v in inputs.items():
        f = os.path.join(d, "%s_%s.npy" % (tag, k))
        np.save(f, v)
        cmd += ["--input", "%s=%s" % (k, f)]
    files = {o: os.path.join(d, "%s_out_%s.npy" % (tag, o)) for o in outs}
    for o, f in files.items():
        cmd += ["--output", "%s=%s" % (o, f)]
    p = sh(cmd + extra)
    if p.returncode:
        return None, "%s %s: exit %d: %s" % (os.path.basename(prog), " ".join(extra), p.returncode, p.stderr.strip()[-300:])
    return {o: np.load(f) for o, f in files.items()}, p.stderr


def check(prog, weights, inputs, outs, nmb, dev, d, tag, ref=None, maxb=None):
    """--micro-batches nmb vs each micro-batch alone (exact), the whole batch (ATOL), NumPy (REF_TOL)."""
    b = len(next(iter(inputs.values())))
    got, err = run(prog, weights, inputs, outs, d, tag + "_pipe", dev + ["--micro-batches", str(nmb)])
    if got is None:
        return err
    notice = "notice" in err and "exceeds the batch" in err
    parts = {o: [] for o in outs}
    cut = mbs(b, nmb, maxb)
    for k, (first, c) in enumerate(cut):
        one, e = run(prog, weights, {n: v[first:first + c] for n, v in inputs.items()}, outs, d, "%s_mb%d" % (tag, k),
                     dev + ["--threads", "1"])
        if one is None:
            return "micro-batch %d alone: %s" % (k, e)
        for o in outs:
            parts[o].append(one[o])
    whole, e = run(prog, weights, inputs, outs, d, tag + "_whole", dev)
    if whole is None:
        return "the sequential run: " + e
    exact = all(got[o].tobytes() == np.concatenate(parts[o]).tobytes() for o in outs)
    werr = max(relmax(got[o], whole[o]) for o in outs)
    rerr = max(relmax(got[o], ref[o]) for o in outs) if ref else None
    print("  pipe %s: batch %d, --micro-batches %d: cut %s, %s; vs each micro-batch alone: %s; vs the sequential run: "
          "max error %.1e (tolerance %.0e)%s%s" % (
              tag, b, nmb, [c for _, c in cut], " ".join(dev), "bit-identical" if exact else "DIFFERENT", werr,
              ATOL, "" if rerr is None else "; vs NumPy: %.1e (tolerance %.0e)" % (rerr, REF_TOL),
              "; notice printed" if notice else ""))
    if not exact:
        return "the pipelined run differs from its micro-batches run alone"
    if werr > ATOL:
        return "the pipelined run differs from the sequential run by %.1e" % werr
    if rerr is not None and rerr > REF_TOL:
        return "the pipelined run differs from NumPy by %.1e" % rerr
    if nmb > b and not notice:
        return "more micro-batches than batch items, and no notice"
    if maxb and -(-b // min(nmb, b)) > maxb and "exceed the compiled maximum batch" not in err:
        return "micro-batches over the compiled maximum batch, and no notice"
    return None


def build(modelc, d, name, src, maxb, cuda):
    f = os.path.join(d, name + ".model")
    with open(f, "w") as fh:
        fh.write(src)
    prog = os.path.join(d, name)
    p = sh([modelc, f, "--max-batch", str(maxb), "-o", prog] + ([] if cuda else ["--no-cuda"]))
    return (prog, None) if p.returncode == 0 else (None, "modelc failed: " + p.stderr[-300:])


def check_embed(modelc, d, w, x, want):
    """The same through the C API (mrt_pipe_create / mrt_pipe_run, tests/dp/embed_pipe.c)."""
    gen = os.path.join(d, "gen_pipe")
    p = sh([modelc, os.path.join(d, "mlp2.model"), "--max-batch", "16", "--emit-c", "-o", gen])
    if p.returncode:
        return "modelc --emit-c failed: " + p.stderr[-300:]
    flags = lambda f: sh([modelc, f], check=True).stdout.split()  # noqa: E731
    exe = os.path.join(d, "embed_pipe")
    p = sh([os.environ.get("CC", "cc"), "-O1", "-Wall", "-Werror"] + os.environ.get("MODELC_CFLAGS", "").split() +
           flags("--print-cflags") + ["-I" + gen,
           os.path.join(HERE, "embed_pipe.c"), os.path.join(gen, "mlp2.c")] + flags("--print-libs") + ["-o", exe])
    if p.returncode:
        return "compiling embed_pipe.c failed: " + p.stderr[-400:]
    xin, out = os.path.join(d, "x_embed_pipe.npy"), os.path.join(d, "embed_pipe_out.npy")
    np.save(xin, x)
    p = sh([exe, w, xin, out, "3"])
    if p.returncode:
        return "embed_pipe failed: " + (p.stderr or p.stdout).strip()[-300:]
    same = np.load(out).tobytes() == want.tobytes()
    errs = [s for s in p.stdout.splitlines() if s.startswith("error")]
    print("  pipe embed: %s; y %s the CLI's --micro-batches 3 run" % ("; ".join(p.stdout.strip().splitlines()),
                                                                     "bit-identical to" if same else "DIFFERS from"))
    if not same:
        return "mrt_pipe_run's y differs from PROG --micro-batches'"
    if len(errs) != 1 or "micro-batches 0: expected a count from 1" not in errs[0]:
        return "expected embed_pipe to print the refusal of 0 micro-batches"
    return None


def main(modelc, d, kind, report, only=None):
    cuda = kind == "cuda"
    dev = ["--device", "cuda:0", "--device-map", "cpu:1=cuda:1"] if cuda else ["--device", "cpu"]
    check_rows(modelc, d, kind, dev, report)
    if only == "rows":
        return
    rng = np.random.default_rng(5)
    # the MLP: batches that divide and that do not, micro-batches of one item, a batch over max-batch
    prog, err = build(modelc, d, "mlp2", MLP, 16, cuda)
    if err:
        report("pipe_build", err)
        return
    wt = {"w1": rng.standard_normal((64, 48)) / 7, "b1": rng.standard_normal(64) / 10, "w2": rng.standard_normal((32, 64)) / 8,
          "w3": rng.standard_normal((64, 32)) / 6, "w4": rng.standard_normal((10, 64)) / 8}
    wt = {k: v.astype(np.float32) for k, v in wt.items()}
    w = os.path.join(d, "mlp2.safetensors")
    safetensors_np.write(w, wt)

    def mlp_ref(x):
        W = {k: v.astype(np.float64) for k, v in wt.items()}
        h = np.maximum(np.maximum(x @ W["w1"].T + W["b1"], 0) @ W["w2"].T, 0)
        return {"y": np.tanh(h @ W["w3"].T) @ W["w4"].T}
    for b, n in ((16, 4), (13, 3), (5, 5), (40, 2), (7, 20)):
        x = rng.standard_normal((b, 48)).astype(np.float32)
        report("pipe_mlp_b%d_mb%d" % (b, n), check(prog, w, {"x": x}, ["y"], n, dev, d, "mlp_b%d_mb%d" % (b, n),
                                                   mlp_ref(x.astype(np.float64)), 16))
    if not cuda:
        x = rng.standard_normal((11, 48)).astype(np.float32)
        got, e = run(prog, w, {"x": x}, ["y"], d, "embed_ref", dev + ["--micro-batches", "3"])
        report("pipe_embed", e if got is None else check_embed(modelc, d, w, x, got["y"]))
    # the CNN, two outputs
    prog, err = build(modelc, d, "cnn2", CNN, 8, cuda)
    if err:
        report("pipe_cnn", err)
    else:
        cw = os.path.join(d, "cnn2.safetensors")
        safetensors_np.write(cw, {"c1": (rng.standard_normal((4, 2, 3, 3)) * 0.4).astype(np.float32),
                                  "c2": (rng.standard_normal((4, 4, 3, 3)) * 0.3).astype(np.float32),
                                  "fc": (rng.standard_normal((5, 64)) * 0.2).astype(np.float32)})
        report("pipe_cnn_b11_mb4", check(prog, cw, {"x": rng.standard_normal((11, 2, 8, 8)).astype(np.float32)},
                                         ["y", "z"], 4, dev, d, "cnn_b11_mb4"))
    # stages that come back to the first device
    prog, err = build(modelc, d, "back", BACK, 8, cuda)
    if err:
        report("pipe_back", err)
    else:
        bw = os.path.join(d, "back.safetensors")
        W = (rng.standard_normal((16, 16)) / 4).astype(np.float32)
        safetensors_np.write(bw, {"w": W})
        x = rng.standard_normal((9, 16)).astype(np.float32)
        a = np.maximum(x.astype(np.float64) @ W, 0)
        report("pipe_back_b9_mb3", check(prog, bw, {"x": x}, ["y"], 3, dev, d, "back_b9_mb3",
                                         {"y": a + np.tanh(a @ W) * 2}))

    # bad input
    prog = os.path.join(d, "mlp2")
    x = rng.standard_normal((6, 48)).astype(np.float32)
    xin = os.path.join(d, "x_bad.npy")
    np.save(xin, x)
    base = [prog, "--weights", w, "--input", "x=" + xin]
    for name, extra, rc, want in (
            ("zero", ["--micro-batches", "0"], 2, "--micro-batches '0': expected a count from 1 to 4096"),
            ("negative", ["--micro-batches", "-2"], 2, "--micro-batches '-2': expected a count"),
            ("junk", ["--micro-batches", "2x"], 2, "--micro-batches '2x': expected a count"),
            ("twice", ["--micro-batches", "2", "--micro-batches", "3"], 2, "--micro-batches given twice"),
            ("with_devices", ["--micro-batches", "2", "--devices", "cpu:0,cpu:1"], 2, "give one of them")):
        p = sh(base + extra)
        print("  pipe %s: exit %d: %s" % (name, p.returncode, p.stderr.strip().splitlines()[0] if p.stderr.strip() else ""))
        report("pipe_error_" + name, None if p.returncode == rc and want in p.stderr else
               "expected exit %d and '%s', got exit %d: %s" % (rc, want, p.returncode, p.stderr.strip()[-200:]))
    # no 'on' regions: a notice, then the usual run (the same bits)
    dprog, err = build(modelc, d, "plain", "model plain {\n  input x: f32[batch, 48]\n  param w1: f32[64, 48]\n"
                       "  output y = relu(linear(x, w1))\n}\n", 16, cuda)
    if err:
        report("pipe_no_regions", err)
    else:
        pw = os.path.join(d, "plain.safetensors")
        safetensors_np.write(pw, {"w1": wt["w1"]})
        a, ea = run(dprog, pw, {"x": x}, ["y"], d, "plain_mb", dev[:2] + ["--micro-batches", "3"])
        b_, eb = run(dprog, pw, {"x": x}, ["y"], d, "plain_seq", dev[:2])
        ok = a is not None and b_ is not None and a["y"].tobytes() == b_["y"].tobytes() and "nothing to pipeline" in ea
        print("  pipe no regions: %s" % ([s for s in (ea or "").splitlines() if "notice" in s] or ea))
        report("pipe_no_regions", None if ok else "expected the notice 'nothing to pipeline' and the usual result")
    # a split model whose ops mix batch items: refused, naming why
    mprog, err = build(modelc, d, "mixed2", MIXED, 8, cuda)
    if err:
        report("pipe_error_batch_mixing", err)
    else:
        np.save(os.path.join(d, "m.npy"), np.ones((4, 4), np.float32))
        p = sh([mprog, "--input", "x=" + os.path.join(d, "m.npy"), "--micro-batches", "2"] + dev)
        print("  pipe mixed: exit %d: %s" % (p.returncode, p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""))
        report("pipe_error_batch_mixing", None if p.returncode == 1 and "cannot run in micro-batches: an operation mixes "
               "batch items" in p.stderr else "expected exit 1 and 'cannot run in micro-batches'")
    # a micro-batch that fails (an id out of range in item 9): the run stops, its error names it
    eprog, err = build(modelc, d, "emb2", EMB, 8, cuda)
    if err:
        report("pipe_error_failing_mb", err)
    else:
        ew = os.path.join(d, "emb2.safetensors")
        safetensors_np.write(ew, {"e": rng.standard_normal((10, 4)).astype(np.float32)})
        ids = rng.integers(0, 9, size=(12, 3)).astype(np.int64)
        ids[9, 1] = 9  # + 1 = 10: out of range
        out = os.path.join(d, "emb_out.npy")
        np.save(os.path.join(d, "ids.npy"), ids)
        p = sh([eprog, "--weights", ew, "--input", "ids=" + os.path.join(d, "ids.npy"), "--output", "y=" + out,
                "--micro-batches", "4"] + dev)
        line = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
        print("  pipe failing micro-batch: exit %d: %s" % (p.returncode, line))
        report("pipe_error_failing_mb", None if p.returncode == 1 and "micro-batch 4 of 4 (batch items 9..11)" in line
               and "10" in line and "at position 1 " in line and "positions count from batch item 9" in line
               and not os.path.exists(out) else
               "expected exit 1, the error naming micro-batch 4 of 4 (items 9..11), the id, its position 1 and the "
               "item its positions count from (9), and no output")
