#!/usr/bin/env python3
"""tests/dp: data-parallel inference (`PROG --devices LIST`, runtime/rt_dp.c).

    python3 tests/dp/run.py [--device-kind cpu|cuda] [--quick]     (MODELC: the compiler)

For each model and batch: the run on two (or three) replicas against
  - each replica's shard run alone on one device and concatenated: bit for bit (the split, the
    concurrent runs and the gather lose nothing), and
  - the whole batch on one device: within 1e-5 of the largest magnitude (a GEMM library may round a
    row differently when it multiplies another number of rows; the error is printed).
Then the errors: a device twice, an absent device, 'all' without a GPU, --devices with --device,
a model whose batch items interact. Outputs of batch*2 rows (reshape, repeat_interleave) against
NumPy, on replicas and in micro-batches (--only rows runs that group alone). With --device-kind cuda (the cudasim suite, two simulated
GPUs) the replicas are cuda:0,cuda:1. Then pipelined model parallelism (--micro-batches, pipe.py;
--pipe-only runs that part alone). Prints PASS/FAIL lines.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DIGITS = os.path.join(ROOT, "examples", "digits")
sys.path.insert(0, os.path.join(ROOT, "tools"))
import safetensors_np  # noqa: E402
sys.path.insert(0, HERE)
import pipe  # noqa: E402

ATOL = 1e-5

CONV = """# a small CNN, batch-separable (tests/dp)
model cnn {
  input x: f32[batch, 2, 6, 6]
  param c.weight: f32[4, 2, 3, 3]
  param c.bias: f32[4]
  param fc.weight: f32[3, 36]
  h = relu(conv2d(x, c.weight, c.bias, padding=1))
  p = max_pool2d(h, kernel=2)
  output y = softmax(linear(reshape(p, [-1, 36]), fc.weight), axis=1)
}
"""

# a one-row product at batch 1 (a GEMV), large enough to be split over threads (tests/dp threads)
GEMV = """# x @ w at batch 1 (tests/dp)
model gemv {
  input x: f32[batch, 4608]
  param w: f32[4608, 64]
  output y = x @ w
}
"""

MIXED = """# batch items interact: a mean over the batch (tests/dp)
model mixed {
  input x: f32[batch, 4]
  output y = x - mean(x, axis=0, keepdim=true)
}
"""


# outputs of 2*batch rows (two per batch item): each replica's rows start at 2*first
ROWS = """# outputs of batch*2 rows (tests/dp)
model rows {
  input x: f32[batch, 64]
  param w1: f32[10, 64]
  h = relu(linear(x, w1))
  output y = reshape(h, [batch*2, 5])
  output r = repeat_interleave(h, 2, dim=0)
}
"""


def build(modelc, d, name, text, max_batch, devs, report, tag):
    """Write TEXT as D/NAME.model and compile it to D/NAME at --max-batch MAX_BATCH (--no-cuda
    unless the devices are GPUs): the executable's path, or None after reporting TAG failed."""
    src, prog = os.path.join(d, name + ".model"), os.path.join(d, name)
    with open(src, "w") as f:
        f.write(text)
    p = sh([modelc, src, "--max-batch", str(max_batch), "-o", prog] + ([] if devs[0].startswith("cuda") else ["--no-cuda"]))
    if p.returncode:
        report(tag, "modelc failed: " + p.stderr[-300:])
        return None
    return prog


def check_rows(modelc, d, devs, report):
    """--devices on a model whose outputs have batch*2 rows: vs the shards run alone (check), and
    both outputs vs NumPy (pipe.rows_ref, 1e-5); batch 13 over --max-batch 8 also runs the plain
    chunking's cut of the same buffers."""
    prog = build(modelc, d, "rows", ROWS, 8, devs, report, "rows")
    if not prog:
        return
    rng = np.random.default_rng(3)
    w1 = rng.standard_normal((10, 64)).astype(np.float32) / 8
    w = os.path.join(d, "rows.safetensors")
    safetensors_np.write(w, {"w1": w1})
    for b, dv in ((13, devs), (5, devs), (9, devs + (["cpu:2"] if devs[0].startswith("cpu") else []))):
        x = rng.standard_normal((b, 64)).astype(np.float32)
        tag = "rows_b%d_%ddev" % (b, len(dv))
        why = None
        for out in ("y", "r"):
            why = why or check(prog, w, x, "x", out, dv, d, "%s_%s" % (tag, out))
        if why is None:
            ref = pipe.rows_ref(x, w1)
            errs = {o: float(np.max(np.abs(np.load(os.path.join(d, "dp_%s_%s.npy" % (tag, o))) - ref[o])) /
                         np.max(np.abs(ref[o]))) for o in ("y", "r")}
            print("  %s: vs NumPy: y %.1e, r %.1e (tolerance %.0e)" % (tag, errs["y"], errs["r"], ATOL))
            if max(errs.values()) > ATOL:
                why = "the data-parallel run differs from NumPy by %.1e" % max(errs.values())
        report(tag, why)


def check_load_only(modelc, d, devs, report):
    """--devices on a model with a param that only a load-time kernel reads (w1, read by w1 * 0.5,
    computed once at load; GPT-2's position table and a batch norm folded into a conv are the
    same): its region is gone after the first replica loads, so the others read the file too
    (mrt_dp_load_weights) instead of copying. vs the shards alone (check) and NumPy (1e-5)."""
    prog = build(modelc, d, "lo", "model lo {\n  input x: f32[batch, 64]\n  param w1: f32[10, 64]\n"
                 "  output y = linear(x, w1 * 0.5)\n}\n", 8, devs, report, "load_only")
    if not prog:
        return
    rng = np.random.default_rng(5)
    w1 = rng.standard_normal((10, 64)).astype(np.float32)
    w = os.path.join(d, "lo.safetensors")
    safetensors_np.write(w, {"w1": w1})
    x = rng.standard_normal((7, 64)).astype(np.float32)
    why = check(prog, w, x, "x", "y", devs, d, "load_only")
    if why is None:
        ref = x.astype(np.float64) @ (w1.astype(np.float64) * 0.5).T
        err = float(np.max(np.abs(np.load(os.path.join(d, "dp_load_only.npy")) - ref)) / np.max(np.abs(ref)))
        print("  load_only: vs NumPy %.1e (tolerance %.0e)" % (err, ATOL))
        if err > ATOL:
            why = "the data-parallel run differs from NumPy by %.1e" % err
    report("load_only", why)


# training builds whose ops mix batch items outside the loss's reduction: data-parallel training
# would change the step, so --devices and mpirun refuse them (modelc's graph_dp_trainable)
MIX_TRAIN = {
    "mix_center": """# logits centered over the batch (tests/dp)
model mix_center {
  input x: f32[batch, 8]
  target y: i64[batch]
  param w: f32[4, 8]
  z = linear(x, w)
  logits = z - mean(z, axis=0, keepdim=true) * 3
  loss l = cross_entropy(logits, y)
  optimizer sgd(lr=0.1)
}
""",
    "mix_concat": """# a loss over the batch concatenated with itself (tests/dp)
model mix_concat {
  input x: f32[batch, 8]
  target y: i64[batch]
  param w: f32[4, 8]
  c = linear(x, w)
  loss l = sum(sum(concat(c, c * 2, axis=0), axis=0) * sum(c, axis=0), axis=0)
  optimizer sgd(lr=0.1)
}
""",
}

# losses data parallelism keeps: one summed over the batch (reduction=sum: the shards' losses and
# gradients add up, not averaged) and a mean plus a batch-independent penalty
SUM_TRAIN = {
    "loss_sum": """# mse_loss(reduction=sum) (tests/dp)
model loss_sum {
  input x: f32[batch, 8]
  target y: f32[batch, 2]
  param fc1.weight: f32[16, 8]
  param fc2.weight: f32[2, 16]
  pred = linear(tanh(linear(x, fc1.weight)), fc2.weight)
  loss l = mse_loss(pred, y, reduction=sum)
  optimizer sgd(lr=0.01, momentum=0.9)
}
""",
    "loss_mean_reg": """# a mean loss plus a weight penalty (tests/dp)
model loss_mean_reg {
  input x: f32[batch, 8]
  target y: f32[batch, 2]
  param fc1.weight: f32[16, 8]
  param fc2.weight: f32[2, 16]
  pred = linear(tanh(linear(x, fc1.weight)), fc2.weight)
  loss l = mse_loss(pred, y) + 0.01 * sum(sum(fc1.weight * fc1.weight, axis=1), axis=0)
  optimizer sgd(lr=0.05)
}
""",
}


def check_train_mix(modelc, d, devs, report):
    """Refusals of models that mix batch items (--devices, and mpirun -np 2 on CPUs); a summed
    and a regularized loss trained data-parallel against one device (losses and weights, 1e-5)."""
    import shutil
    rng = np.random.default_rng(7)
    x = rng.standard_normal((16, 8)).astype(np.float32)
    np.save(os.path.join(d, "tm_x.npy"), x)
    np.save(os.path.join(d, "tm_yc.npy"), rng.integers(0, 4, 16).astype(np.int64))
    np.save(os.path.join(d, "tm_yf.npy"), rng.standard_normal((16, 2)).astype(np.float32))
    cuda = devs[0].startswith("cuda")
    # the refusals are the compiled model's (the same on every device): the CPU suite checks them;
    # the simulated GPUs run the summed losses, through NCCL's pre-multiplied sum
    for name, src in ({} if cuda else MIX_TRAIN).items():
        f = os.path.join(d, name + ".model")
        with open(f, "w") as fh:
            fh.write(src)
        prog = os.path.join(d, name)
        p = sh([modelc, f, "--train", "--max-batch", "8", "-o", prog] + ([] if cuda else ["--no-cuda"]))
        if p.returncode:
            report("train_refuse_" + name, "modelc failed: " + p.stderr[-300:])
            continue
        w = os.path.join(d, name + ".st")
        safetensors_np.write(w, {"w": rng.standard_normal((4, 8)).astype(np.float32) * 0.3})
        base = [prog, "train", "--weights", w, "--data", "x=" + os.path.join(d, "tm_x.npy"), "--data",
                "y=" + os.path.join(d, "tm_yc.npy"), "--batch", "8", "--quiet"]
        runs = [("devices", sh(base + ["--devices", ",".join(devs)]))]
        if not cuda and shutil.which("mpirun"):
            runs.append(("mpirun", mpirun(["-np", "2"] + base + ["--device", "cpu"], timeout=60)))
        one = sh(base + (["--device", devs[0]]))
        for how, p in runs:
            lines = [s for s in p.stderr.splitlines() if "cannot train data-parallel" in s]
            print("  %s %s: exit %d: %s" % (name, how, p.returncode, lines[0] if lines else p.stderr.strip()[-300:]))
            report("train_refuse_%s_%s" % (name, how), None if p.returncode == 2 and lines and "mixes batch items" in lines[0]
                   and ".model:" in lines[0] else "expected exit 2 and 'cannot train data-parallel ... mixes batch items'")
        report("train_one_device_%s" % name, None if one.returncode == 0 else
               "on one device it must train: " + one.stderr.strip()[-300:])
    for name, src in SUM_TRAIN.items():
        f = os.path.join(d, name + ".model")
        with open(f, "w") as fh:
            fh.write(src)
        prog = os.path.join(d, name)
        p = sh([modelc, f, "--train", "--max-batch", "8", "-o", prog] + ([] if cuda else ["--no-cuda"]))
        if p.returncode:
            report("train_" + name, "modelc failed: " + p.stderr[-300:])
            continue
        w = os.path.join(d, name + ".st")
        safetensors_np.write(w, {"fc1.weight": rng.standard_normal((16, 8)).astype(np.float32) * 0.3,
                                 "fc2.weight": rng.standard_normal((2, 16)).astype(np.float32) * 0.3})
        base = [prog, "train", "--weights", w, "--data", "x=" + os.path.join(d, "tm_x.npy"), "--data",
                "y=" + os.path.join(d, "tm_yf.npy"), "--epochs", "2", "--quiet"]
        variants = [("one", ["--device", devs[0]], sh), ("dp", ["--devices", ",".join(devs)], sh)]
        if not cuda and shutil.which("mpirun"):
            variants.append(("mpi", ["--device", "cpu"], lambda c: mpirun(["-np", "2"] + c, timeout=60)))
        res, why = {}, None
        for batch in (8, 7):
            for tag, extra, runner in variants:
                log, out = os.path.join(d, "%s_%s_%d.log" % (name, tag, batch)), os.path.join(d, "%s_%s.out" % (name, tag))
                if os.path.exists(log):
                    os.remove(log)
                p = runner(base + ["--batch", str(batch), "--save", out, "--log", log] + extra)
                if p.returncode:
                    why = why or "%s run failed: %s" % (tag, p.stderr.strip()[-300:])
                    continue
                with open(log) as fh:
                    res[tag] = (np.array([float(r.split()[5]) for r in fh]), safetensors_np.read(out))
            if why:
                break
            l1, w1 = res["one"]
            for tag in [t for t, _, _ in variants if t != "one"]:
                l2, w2 = res[tag]
                lerr = float(np.max(np.abs(l2 - l1) / np.abs(l1))) if len(l1) == len(l2) else float("inf")
                werr = max(float(np.max(np.abs(w2[k].astype(np.float64) - w1[k])) / np.max(np.abs(w1[k]))) for k in w1)
                print("  %s: batch %d, %s vs one device: %d steps, losses max relative error %.1e, weights %.1e "
                      "(tolerance 1e-05)" % (name, batch, tag, len(l1), lerr, werr))
                if lerr > 1e-5 or werr > 1e-5:
                    why = why or "%s (batch %d) differs from one device: losses %.1e, weights %.1e" % (tag, batch, lerr, werr)
        report("train_" + name, why)


AGREE = """# ranks that must agree (tests/dp)
model agree {
  input x: f32[batch, 8]
  target y: f32[batch, 2]
  param fc1.weight: f32[16, 8]
  param fc2.weight: f32[2, 16]
  pred = linear(ACT(linear(x, fc1.weight)), fc2.weight)
  loss l = mse_loss(pred, y)
  optimizer sgd(lr=LR, momentum=0.9)
}
"""


def check_mpi_agree(modelc, d, kind, report):
    """mpirun with ranks that differ in one thing each (MPMD: rank 1's command differs): every
    rank stops before the first step, naming rank 1 and the item; no checkpoint is written."""
    import shutil
    if not shutil.which("mpirun"):
        print("SKIP: dp/mpi_agree: mpirun not found (Debian: apt-get install openmpi-bin)")
        return
    cuda = kind == "cuda"
    f = lambda s: os.path.join(d, s)  # noqa: E731
    progs = {}
    for tag, act, lr in (("a", "tanh", "0.05"), ("relu", "relu", "0.05"), ("lr", "tanh", "0.1")):
        with open(f("agree_%s.model" % tag), "w") as fh:
            fh.write(AGREE.replace("ACT", act).replace("LR", lr))
        progs[tag] = f("agree_%s" % tag)
        sh([modelc, f("agree_%s.model" % tag), "--train", "--max-batch", "8", "-o", progs[tag]] +
           ([] if cuda else ["--no-cuda"]), check=True)
    rng = np.random.default_rng(9)
    for k, shape in (("x", (16, 8)), ("x2", (16, 8)), ("y", (16, 2))):
        np.save(f("ag_%s.npy" % k), rng.standard_normal(shape).astype(np.float32))
    for k in ("w", "w2"):
        safetensors_np.write(f("ag_%s.st" % k), {"fc1.weight": rng.standard_normal((16, 8)).astype(np.float32) * 0.3,
                                                 "fc2.weight": rng.standard_normal((2, 16)).astype(np.float32) * 0.3})
    dev = ["--device", "cuda:0" if cuda else "cpu"]

    def cmd(tag="a", w="ag_w.st", x="ag_x.npy", extra=(), save=True):
        return [progs[tag], "train", "--weights", f(w), "--data", "x=" + f(x), "--data", "y=" + f("ag_y.npy"),
                "--batch", "8", "--epochs", "2", "--quiet"] + (["--save", f("ag_out.st")] if save else []) + list(extra)
    # a state to resume from: 1 step of one process
    p = sh(cmd(save=False) + dev + ["--steps", "1", "--save", f("ag_w1.st"), "--save-state", f("ag_s1.st")])
    if p.returncode:
        report("mpi_agree", "the one-step run failed: " + p.stderr[-300:])
        return
    dev1 = ["--device", "cuda:1"] if cuda else dev
    cases = [("graph", cmd("relu") + dev1, "compiled model"),
             ("model_lr", cmd("lr") + dev1, "optimizer and its hyper-parameters"),
             ("cli_lr", cmd(extra=["--lr", "0.2"]) + dev1, "learning rate"),
             ("clip", cmd(extra=["--clip-grad-norm", "1"]) + dev1, "--clip-grad-norm"),
             ("data", cmd(x="ag_x2.npy") + dev1, "contents of --data x"),
             ("weights", cmd(w="ag_w2.st") + dev1, "initial weights"),
             ("resume", cmd(w="ag_w1.st", extra=["--resume", f("ag_s1.st")]) + dev1, "step it starts from (--resume) (1, "
              "rank 0 has 0)")]
    if cuda:  # the comparison is the host's, the same for every device: on GPUs, one case and the device kind
        cases = cases[:1] + [("device_kind", cmd() + ["--device", "cpu"], "device kind")]
    for name, other, want in cases:
        if os.path.exists(f("ag_out.st")):
            os.remove(f("ag_out.st"))
        try:
            p = mpirun(["-np", "1"] + cmd() + dev + [":", "-np", "1"] + other, timeout=60)
        except subprocess.TimeoutExpired:
            report("mpi_agree_" + name, "the ranks hung (no exit within 60 s)")
            continue
        lines = [s for s in p.stderr.splitlines() if "disagrees" in s]
        ok = (p.returncode != 0 and len(lines) == 2 and all("rank 1 disagrees with rank 0 on the " + want in s for s in lines)
              and any("rank 0 of 2" in s for s in lines) and any("rank 1 of 2" in s for s in lines)
              and not os.path.exists(f("ag_out.st")))
        print("  mpi_agree %s: exit %d: %s" % (name, p.returncode, lines[0] if lines else p.stderr.strip()[-300:]))
        report("mpi_agree_" + name, None if ok else "expected both ranks to stop naming rank 1 and '%s', no checkpoint" % want)
    # the same everything: runs (the check lets agreeing ranks through)
    p = mpirun(["-np", "2"] + cmd() + dev if not cuda else ["-np", "1"] + cmd() + dev + [":", "-np", "1"] + cmd() + dev1,
               timeout=60)
    report("mpi_agree_same", None if p.returncode == 0 and os.path.exists(f("ag_out.st")) else
           "agreeing ranks failed: " + p.stderr.strip()[-300:])


def check_dp_threads_help(prog, weights, x, d, report):
    """--devices cpu:0,cpu:1 with --threads 4: each replica gets 2 (the --time line says so), the
    logits bit for bit those of --threads 2 (one each); --help's usage lines name --devices and
    --micro-batches."""
    xin = os.path.join(d, "x_dpt.npy")
    np.save(xin, x)
    outs, why = {}, None
    for t, want in ((4, "2 threads per replica"), (2, "1 thread per replica"), (1, "1 thread per replica")):
        o = os.path.join(d, "dpt%d.npy" % t)
        p = sh([prog, "--weights", weights, "--input", "x=" + xin, "--output", "logits=" + o, "--devices", "cpu:0,cpu:1",
                "--threads", str(t), "--time"])
        line = [s for s in p.stderr.splitlines() if s.startswith("time:")]
        print("  dp threads %d: exit %d: %s" % (t, p.returncode, line[0] if line else p.stderr.strip()[-200:]))
        if p.returncode or not line or want not in line[0]:
            why = why or "--threads %d: expected '%s' in the --time line" % (t, want)
        else:
            outs[t] = np.load(o).tobytes()
    if not why and not (outs[4] == outs[2] == outs[1]):
        why = "the logits depend on the threads per replica"
    report("dp_threads", why)
    p = sh([prog, "--help"])
    usage = p.stdout.split("\n\n")[0]
    print("  help: " + " ".join(usage.split()))
    report("help_usage", None if p.returncode == 0 and "--devices LIST" in usage and "--micro-batches N" in usage else
           "the usage lines of --help do not name --devices and --micro-batches")


EMB = """# an embedding: a bad id fails its replica (tests/dp)
model emb {
  input ids: i64[batch, 3]
  param e: f32[10, 4]
  output y = embedding(ids, e)
}
"""


def check_dp_error_position(modelc, d, devs, report):
    """A bad id in item 10 of 12 on two replicas (items 6..11 on the second) at --max-batch 4
    (the replica runs items 6..9, then 10..11): the error names the replica, its items, the id,
    its position 1 and the batch item the positions count from (10); no output is written."""
    prog = build(modelc, d, "emb", EMB, 4, devs, report, "error_position")
    if not prog:
        return
    w = os.path.join(d, "emb.safetensors")
    safetensors_np.write(w, {"e": np.arange(40, dtype=np.float32).reshape(10, 4)})
    ids = (np.arange(36) % 10).reshape(12, 3).astype(np.int64)
    ids[10, 1] = 10
    np.save(os.path.join(d, "emb_ids.npy"), ids)
    out = os.path.join(d, "emb_y.npy")
    p = sh([prog, "--weights", w, "--input", "ids=" + os.path.join(d, "emb_ids.npy"), "--output", "y=" + out,
            "--devices", ",".join(devs)])
    line = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
    print("  error position: exit %d: %s" % (p.returncode, line))
    report("error_position", None if p.returncode == 1 and "replica 2 (%s, batch items 6..11)" % devs[1] in line and
           "id 10 at position 1 " in line and "positions count from batch item 10" in line and not os.path.exists(out)
           else "expected exit 1 naming replica 2 (items 6..11), id 10 at position 1, positions from batch item 10")


def sh(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def shards(b, n):
    out, first = [], 0
    for i in range(n):
        c = b // n + (i < b % n)
        out.append((first, c))
        first += c
    return out


def check(prog, weights, x, name, out, devs, d, tag):
    """DP run vs per-shard runs (exact) and vs the whole batch on one device (ATOL)."""
    xin = os.path.join(d, "x_%s.npy" % tag)
    np.save(xin, x)
    got = os.path.join(d, "dp_%s.npy" % tag)
    p = sh([prog, "--weights", weights, "--input", "%s=%s" % (name, xin), "--output", "%s=%s" % (out, got),
            "--devices", ",".join(devs)])
    if p.returncode:
        return "--devices %s failed: %s" % (",".join(devs), p.stderr.strip()[-300:])
    notice = "sit out" in p.stderr
    parts = []
    for k, (first, c) in enumerate(shards(len(x), len(devs))):
        if c == 0:
            continue
        si, so = os.path.join(d, "s%d_%s.npy" % (k, tag)), os.path.join(d, "so%d_%s.npy" % (k, tag))
        np.save(si, x[first:first + c])
        q = sh([prog, "--weights", weights, "--input", "%s=%s" % (name, si), "--output", "%s=%s" % (out, so),
                "--device", devs[k], "--threads", "1"])
        if q.returncode:
            return "the shard run on %s failed: %s" % (devs[k], q.stderr.strip()[-300:])
        parts.append(np.load(so))
    whole = os.path.join(d, "whole_%s.npy" % tag)
    q = sh([prog, "--weights", weights, "--input", "%s=%s" % (name, xin), "--output", "%s=%s" % (out, whole),
            "--device", devs[0]])
    if q.returncode:
        return "the single-device run failed: " + q.stderr.strip()[-300:]
    g, ref, w = np.load(got), np.concatenate(parts), np.load(whole)
    exact = g.shape == ref.shape and g.tobytes() == ref.tobytes()
    err = float(np.max(np.abs(g.astype(np.float64) - w)) / max(float(np.max(np.abs(w))), 1e-30))
    print("  %s: batch %d on %s: shards %s; vs each shard alone: %s; vs one device: max error %.1e (tolerance %.0e)%s"
          % (tag, len(x), ",".join(devs), [c for _, c in shards(len(x), len(devs))],
             "bit-identical" if exact else "DIFFERENT", err, ATOL, "; notice printed" if notice else ""))
    if not exact:
        return "the data-parallel run differs from its shards run alone"
    if err > ATOL:
        return "the data-parallel run differs from the single-device run by %.1e" % err
    if len(x) < len(devs) and not notice:
        return "more devices than batch items, and no notice"
    return None


def check_threads(prog, weights, x, name, out, d, tag):
    """The same run on 1, 2 and 3 CPU threads: bit for bit (every split loop and GEMM keeps each
    output's arithmetic in one thread, in one order)."""
    xin = os.path.join(d, "xt_%s.npy" % tag)
    np.save(xin, x)
    outs = []
    for t in (1, 2, 3):
        o = os.path.join(d, "t%d_%s.npy" % (t, tag))
        p = sh([prog, "--weights", weights, "--input", "%s=%s" % (name, xin), "--output", "%s=%s" % (out, o),
                "--device", "cpu", "--threads", str(t)])
        if p.returncode:
            return "--threads %d failed: %s" % (t, p.stderr.strip()[-300:])
        outs.append(np.load(o))
    same = [outs[0].tobytes() == g.tobytes() for g in outs[1:]]
    print("  threads %s: batch %d: 2 threads %s, 3 threads %s 1 thread" % (tag, len(x), *(
        "bit-identical to" if s else "DIFFERENT from" for s in same)))
    return None if all(same) else "the result depends on the thread count"


def check_embed(modelc, d, w, x, want):
    gen = os.path.join(d, "gen")
    p = sh([modelc, os.path.join(DIGITS, "digits.model"), "--max-batch", "64", "--emit-c", "-o", gen])
    if p.returncode:
        return "modelc --emit-c failed: " + p.stderr[-300:]
    flags = lambda f: sh([modelc, f], check=True).stdout.split()  # noqa: E731
    exe = os.path.join(d, "embed_dp")
    p = sh([os.environ.get("CC", "cc"), "-O1", "-Wall", "-Werror"] + flags("--print-cflags") + ["-I" + gen,
           os.path.join(HERE, "embed_dp.c"), os.path.join(gen, "digits.c")] + flags("--print-libs") + ["-o", exe])
    if p.returncode:
        return "compiling embed_dp.c failed: " + p.stderr[-400:]
    xin, out = os.path.join(d, "x_embed.npy"), os.path.join(d, "embed_out.npy")
    np.save(xin, x)
    p = sh([exe, w, "cpu:0,cpu:1", xin, out])
    if p.returncode:
        return "embed_dp failed: " + (p.stderr or p.stdout).strip()[-300:]
    same = np.load(out).tobytes() == np.load(want).tobytes()
    print("  embed: %s; logits %s the CLI's --devices run" % (p.stdout.strip(), "bit-identical to" if same else "DIFFER from"))
    return None if same else "mrt_dp_run's logits differ from PROG --devices'"


def check_train(modelc, d, name, batch, devs):
    """PROG train --devices: the weights and the losses of the full batch on one device, within
    1e-5 (the gradients are averaged over the shards, weighted by their sizes)."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "train"))
    import make_data
    prog = os.path.join(d, name + "_train")
    if not os.path.exists(prog):
        p = sh([modelc, os.path.join(ROOT, "tests", "train", name + ".model"), "--train", "--max-batch", "8", "-o", prog] +
               ([] if any(x.startswith("cuda") for x in devs) else ["--no-cuda"]))
        if p.returncode:
            return "modelc --train failed: " + p.stderr[-300:]
        subprocess.run([sys.executable, os.path.join(ROOT, "tests", "train", "make_data.py"), d, name], check=True)
    runs = {}
    for tag, extra in (("one", ["--device", "cpu"]), ("dp", ["--devices", ",".join(devs)])):
        cmd = [prog, "train", "--weights", os.path.join(d, name + ".init.safetensors"), "--batch", str(batch),
               "--epochs", "2", "--quiet", "--save", os.path.join(d, "%s_%s.st" % (name, tag)),
               "--log", os.path.join(d, "%s_%s_%d.log" % (name, tag, batch))] + extra
        for k in make_data.make(name)[1]:
            cmd += ["--data", "%s=%s" % (k, os.path.join(d, "%s.%s.npy" % (name, k)))]
        log = os.path.join(d, "%s_%s_%d.log" % (name, tag, batch))
        if os.path.exists(log):
            os.remove(log)
        p = sh(cmd)
        if p.returncode:
            return "%s run failed: %s" % (tag, p.stderr.strip()[-300:])
        with open(log) as f:
            losses = np.array([float(r.split()[5]) for r in f])
        runs[tag] = (safetensors_np.read(os.path.join(d, "%s_%s.st" % (name, tag))), losses)
    (w1, l1), (w2, l2) = runs["one"], runs["dp"]
    errs = {k: float(np.max(np.abs(w2[k].astype(np.float64) - w1[k])) / max(float(np.max(np.abs(w1[k]))), 1e-30))
            for k in w1}
    lerr = float(np.max(np.abs(l2 - l1) / np.abs(l1)))
    worst = max(errs.values())
    print("  train %s: batch %d on %s vs one device: %d steps, losses max relative error %.1e, weights %.1e "
          "(tolerance 1e-05)" % (name, batch, ",".join(devs), len(l1), lerr, worst))
    if len(l1) != len(l2) or lerr > 1e-5 or worst > 1e-5:
        return "data-parallel training differs from one device (losses %.1e, weights %.1e)" % (lerr, worst)
    return None


# five layers of 256 at batch 512: a backward pass of tens of milliseconds, a bucket per weight at --bucket-mb 0.25
OVERLAP = """# data-parallel training's buckets overlap the backward pass (tests/dp)
model overlap {
  input x: f32[batch, 256]
  target labels: i64[batch]
  param l1.weight: f32[256, 256]
  param l1.bias: f32[256]
  param l2.weight: f32[256, 256]
  param l2.bias: f32[256]
  param l3.weight: f32[256, 256]
  param l3.bias: f32[256]
  param l4.weight: f32[256, 256]
  param l4.bias: f32[256]
  param out.weight: f32[10, 256]
  h1 = relu(linear(x, l1.weight, l1.bias))
  h2 = relu(linear(h1, l2.weight, l2.bias))
  h3 = relu(linear(h2, l3.weight, l3.bias))
  h4 = relu(linear(h3, l4.weight, l4.bias))
  output logits = linear(h4, out.weight)
  loss l = cross_entropy(logits, labels)
  optimizer sgd(lr=0.05, momentum=0.9)
}
"""


# two params whose gradients are one tensor (the gradient of a + b is one node), a summed loss
TIED = """# one gradient tensor for two params (tests/dp)
model tied {
  input x: f32[batch, 4]
  target labels: i64[batch]
  param a: f32[3, 4]
  param b: f32[3, 4]
  output logits = linear(x, a + b)
  loss l = cross_entropy(logits, labels, reduction=sum)
  optimizer sgd(lr=0.05)
}
"""


def check_train_tied(modelc, d, devs, report):
    """Two params whose gradients are one tensor are all-reduced once (rt_ddp.c's aliases; reduced
    twice, a summed loss's gradient would double): two CPU devices and two MPI ranks against one
    device with the full batch, within 1e-5."""
    import shutil
    f = lambda s: os.path.join(d, s)  # noqa: E731
    with open(f("tied.model"), "w") as fh:
        fh.write(TIED)
    prog = f("tied")
    sh([modelc, f("tied.model"), "--train", "--max-batch", "8", "-o", prog], check=True)
    rng = np.random.default_rng(3)
    np.save(f("td_x.npy"), rng.standard_normal((28, 4)).astype(np.float32))
    np.save(f("td_y.npy"), rng.integers(0, 3, 28).astype(np.int64))
    safetensors_np.write(f("td_w.st"), {k: (rng.standard_normal((3, 4)) * 0.3).astype(np.float32) for k in "ab"})
    base = [prog, "train", "--weights", f("td_w.st"), "--data", "x=" + f("td_x.npy"), "--data", "labels=" + f("td_y.npy"),
            "--batch", "7", "--epochs", "2", "--quiet"]
    cases = [("one", base + ["--device", "cpu"]), ("devices", base + ["--devices", ",".join(devs)])]
    if shutil.which("mpirun"):
        cases.append(("mpi", ["mpirun", "--oversubscribe", "-np", "2"] + base))
    got = {}
    for tag, cmd in cases:
        p = subprocess.run(cmd + ["--save", f("td_%s.st" % tag)], capture_output=True, text=True,
                           env=MPIRUN_ENV if tag == "mpi" else None)
        if p.returncode:
            report("train_tied_sum", "%s run failed: %s" % (tag, p.stderr[-300:]))
            return
        got[tag] = safetensors_np.read(f("td_%s.st" % tag))
    errs = {t: wrel(got["one"], got[t]) for t in got if t != "one"}
    print("  tied gradients (a + b), a summed loss, batch 7: vs one device: %s (tolerance 1e-05)" %
          ", ".join("%s %.1e" % kv for kv in errs.items()))
    report("train_tied_sum", None if max(errs.values()) <= 1e-5 else "differs from one device: %s" % errs)


def ddp_line(out):
    """PROG train --time's data-parallel line: (buckets, median, min, max) of the buckets whose
    all-reduce started before the backward pass made its last gradient final, or None."""
    import re
    m = re.search(r"ddp: (\d+) gradient buckets; started all-reducing before the backward pass ended: (\d+) per step "
                  r"\(median; min (\d+), max (\d+)\)", out)
    return tuple(int(g) for g in m.groups()) if m else None


def check_bucket_values(base, report):
    """The bucket size, from --bucket-mb or $MODELRT_DDP_BUCKET_MB: a plain positive decimal
    (hex, blanks, inf, nan, 0 and negatives refused, by the flag with exit 2 before the first
    step, by the environment naming the variable); one too large for a size_t in bytes is one
    bucket (before: (size_t)(2e13 MiB) overflowed into a bucket per gradient, and a bad
    environment value fell back to 25 MiB silently). A new user's trial found both."""
    bad = []
    for v in ("0x10", " 5", "inf", "nan", "0", "-1", "5x", "1e400"):
        p = sh(base + ["--bucket-mb", v])
        if p.returncode != 2 or "--bucket-mb takes a positive number" not in p.stderr:
            bad.append("--bucket-mb %r: exit %d, %s" % (v, p.returncode, p.stderr.strip()[-120:]))
    for v in ("abc", "inf", "1e400", "0", "-1", "0x10"):
        p = sh(base, env=dict(os.environ, MODELRT_DDP_BUCKET_MB=v))
        if p.returncode == 0 or "MODELRT_DDP_BUCKET_MB='%s'" % v not in p.stderr:
            bad.append("MODELRT_DDP_BUCKET_MB=%r: exit %d, %s" % (v, p.returncode, p.stderr.strip()[-120:]))
    for how, extra, env in (("--bucket-mb 2e13", ["--bucket-mb", "2e13"], None),
                            ("--bucket-mb 1e300", ["--bucket-mb", "1e300"], None),
                            ("MODELRT_DDP_BUCKET_MB=2e13", [], dict(os.environ, MODELRT_DDP_BUCKET_MB="2e13"))):
        p = sh(base + extra, env=env)
        got = ddp_line(p.stdout)
        if p.returncode or not got or got[0] != 1:
            bad.append("%s: exit %d, buckets %s (want 1)" % (how, p.returncode, got and got[0]))
    print("  bucket sizes: 8 bad --bucket-mb values, 6 bad MODELRT_DDP_BUCKET_MB values refused; 2e13 and 1e300 MiB "
          "one bucket%s" % ("" if not bad else ": " + "; ".join(bad)))
    report("bucket_mb_values", "; ".join(bad) or None)


def check_overlap(modelc, d, devs, report):
    """The gradient buckets are all-reduced while the backward pass goes on (rt_ddp.c, PyTorch
    DDP's Reducer): on a model of five layers with a bucket per weight (--bucket-mb 0.25), PROG
    train --time counts, per step, the buckets whose reduction started before the backward pass
    made its last gradient final: on CPU devices (the reducer's thread) at least one in some step
    (the reducer's thread needs a core while the replicas compute: on a loaded 2-core machine some
    steps get none, so the median is printed, not required), and on two MPI ranks, where run()'s
    announcements post MPI_Iallreduce themselves, at least one in the median step. The buckets
    change when the sums are taken, not what they are: the weights equal those of one bucket
    (--bucket-mb 1000, the reduction after the backward) bit for bit, and those of one device
    with the full batch within 1e-5."""
    import shutil
    f = lambda s: os.path.join(d, s)  # noqa: E731
    with open(f("overlap.model"), "w") as fh:
        fh.write(OVERLAP)
    prog = f("overlap")
    p = sh([modelc, f("overlap.model"), "--train", "--max-batch", "512", "-o", prog])
    if p.returncode:
        report("overlap_build", "modelc --train failed: " + p.stderr[-300:])
        return
    rng = np.random.default_rng(7)
    np.save(f("ov_x.npy"), rng.standard_normal((4096, 256)).astype(np.float32))
    np.save(f("ov_y.npy"), rng.integers(0, 10, 4096).astype(np.int64))
    w = {}
    for k in range(1, 5):
        w["l%d.weight" % k] = (rng.standard_normal((256, 256)) / 16).astype(np.float32)
        w["l%d.bias" % k] = np.zeros(256, np.float32)
    w["out.weight"] = (rng.standard_normal((10, 256)) / 16).astype(np.float32)
    safetensors_np.write(f("ov_init.st"), w)
    base = [prog, "train", "--weights", f("ov_init.st"), "--data", "x=" + f("ov_x.npy"), "--data",
            "labels=" + f("ov_y.npy"), "--batch", "512", "--epochs", "1", "--quiet", "--time"]
    runs = {}
    for tag, extra in (("buckets", ["--devices", ",".join(devs), "--bucket-mb", "0.25"]),
                       ("one_bucket", ["--devices", ",".join(devs), "--bucket-mb", "1000"]),
                       ("one_device", ["--device", "cpu"])):
        p = sh(base + extra + ["--save", f("ov_%s.st" % tag)])
        if p.returncode:
            report("overlap_threads", "%s run failed: %s" % (tag, p.stderr[-300:]))
            return
        runs[tag] = (safetensors_np.read(f("ov_%s.st" % tag)), ddp_line(p.stdout))
    (wb, lb), (w1, l1), (wd, _) = runs["buckets"], runs["one_bucket"], runs["one_device"]
    same = all(np.array_equal(wb[k], w1[k]) for k in wb)
    err = wrel(wd, wb)
    print("  overlap on %s: %s buckets of 0.25 MiB, started before the backward's last gradient: median %s per step "
          "(min %s, max %s); one bucket: %s; weights vs one bucket %s, vs one device %.1e (tolerance 1e-05)"
          % ((",".join(devs),) + (lb or ("?",) * 4) + (l1 and l1[0], "identical" if same else "DIFFERENT", err)))
    report("overlap_threads", None if lb and lb[0] >= 4 and lb[3] >= 1 and l1 == (1, 0, 0, 0) and same and err <= 1e-5
           else "expected >= 4 buckets, >= 1 of them reduced during the backward, the one-bucket weights bit for bit")
    check_bucket_values(base + ["--devices", ",".join(devs), "--steps", "2"], report)
    if not shutil.which("mpirun"):
        print("SKIP: dp/overlap_mpi: mpirun not found (Debian: apt-get install openmpi-bin)")
        return
    mb = {}
    for tag, cap in (("buckets", "0.25"), ("one_bucket", "1000")):
        p = mpirun(["-np", "2"] + base + ["--threads", "1", "--bucket-mb", cap, "--save", f("ovm_%s.st" % tag)])
        if p.returncode:
            report("overlap_mpi", "mpirun failed: " + p.stderr[-300:])
            return
        mb[tag] = (safetensors_np.read(f("ovm_%s.st" % tag)), ddp_line(p.stdout))
        ranks_said = "rank 0 of 2, data-parallel over the ranks" in p.stdout  # --time's line (was "on cpu:0")
    (mw, ml), (mw1, ml1) = mb["buckets"], mb["one_bucket"]
    same = all(np.array_equal(mw[k], mw1[k]) for k in mw)
    err = wrel(wd, mw)
    print("  overlap on 2 MPI ranks: %s buckets, posted (MPI_Iallreduce) before the backward's last gradient: median %s "
          "per step (min %s, max %s); weights vs one bucket %s, vs one process %.1e (tolerance 1e-05)"
          % ((ml or ("?",) * 4) + ("identical" if same else "DIFFERENT", err)))
    report("overlap_mpi", None if ml and ml[0] >= 4 and ml[1] >= 1 and ml1 == (1, 0, 0, 0) and same and err <= 1e-5
           and ranks_said else "expected >= 4 buckets, >= 1 posted during the backward, the one-bucket weights bit "
           "for bit, and --time's line naming the rank of 2")


MPIRUN_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_btl="self,vader",
                  OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_btl_vader_single_copy_mechanism="none")


def mpirun(args, timeout=120):
    return subprocess.run(["mpirun", "--oversubscribe"] + args, capture_output=True, text=True, env=MPIRUN_ENV,
                          timeout=timeout)


def check_mpi(modelc, d, report):
    """mpirun -np 2 PROG train: the weights of one process with the full batch (1e-5); ranks that
    disagree, a rank that cannot start, a rank that fails in a step: every rank stops, naming it."""
    import shutil
    if not shutil.which("mpirun"):
        print("SKIP: dp/mpi: mpirun not found (Debian: apt-get install openmpi-bin; tools/setup.sh installs it)")
        return
    sys.path.insert(0, os.path.join(ROOT, "tests", "train"))
    import make_data
    name = "mlp_sched"
    prog = os.path.join(d, name + "_mpi")
    sh([modelc, os.path.join(ROOT, "tests", "train", name + ".model"), "--train", "--max-batch", "8", "-o", prog,
        "--no-cuda"], check=True)
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "train", "make_data.py"), d, name], check=True)
    f = lambda s: os.path.join(d, s)  # noqa: E731
    data = []
    for k in make_data.make(name)[1]:
        data += ["--data", "%s=%s" % (k, f("%s.%s.npy" % (name, k)))]
    base = [prog, "train", "--weights", f(name + ".init.safetensors"), "--epochs", "2", "--shuffle", "--seed", "3"] + data
    for batch in (8, 7):
        one = sh(base + ["--batch", str(batch), "--quiet", "--save", f("one.st"), "--log", f("one%d.log" % batch)])
        two = mpirun(["-np", "2"] + base + ["--batch", str(batch), "--save", f("two.st"), "--log", f("two%d.log" % batch)])
        if one.returncode or two.returncode:
            report("mpi_train_b%d" % batch, "a run failed: %s %s" % (one.stderr[-200:], two.stderr[-300:]))
            continue
        a, b = safetensors_np.read(f("one.st")), safetensors_np.read(f("two.st"))
        err = max(float(np.max(np.abs(b[k].astype(np.float64) - a[k])) / max(float(np.max(np.abs(a[k]))), 1e-30))
                  for k in a)
        with open(f("one%d.log" % batch)) as x, open(f("two%d.log" % batch)) as y:
            l1, l2 = [float(r.split()[5]) for r in x], [float(r.split()[5]) for r in y]
        lerr = max(abs(p - q) / abs(p) for p, q in zip(l1, l2)) if len(l1) == len(l2) else float("inf")
        print("  mpi: 2 ranks, batch %d (shards %s), shuffled, clipped, scheduled: %d steps logged by rank 0; losses "
              "max relative error %.1e, weights %.1e vs one process (tolerance 1e-05)"
              % (batch, [c for _, c in shards(batch, 2)], len(l2), lerr, err))
        report("mpi_train_b%d" % batch, None if err <= 1e-5 and lerr <= 1e-5 else
               "2 MPI ranks differ from one process (losses %.1e, weights %.1e)" % (lerr, err))
    # ranks that disagree (MPMD: rank 1 gets another --batch): refused before the first step
    p = mpirun(["-np", "1"] + base + ["--batch", "8", "--save", f("x.st")] + [":", "-np", "1"] + base + ["--batch", "4"])
    line = [s for s in p.stderr.splitlines() if "disagrees" in s]
    print("  mpi: ranks disagree: exit %d: %s" % (p.returncode, line[0] if line else p.stderr.strip()[-200:]))
    report("mpi_error_disagree", None if p.returncode != 0 and line and "rank 1 disagrees with rank 0 on the --batch"
           in line[0] and not os.path.exists(f("x.st")) else "expected every rank to stop naming rank 1 and --batch")
    # a rank that cannot start (its data file is missing): the others are stopped, within the timeout
    bad = [a if not a.startswith("x=") else "x=" + f("missing.npy") for a in base]
    try:
        p = mpirun(["-np", "1"] + base + ["--batch", "8", "--save", f("y.st")] + [":", "-np", "1"] + bad +
                   ["--batch", "8"], timeout=60)
        ok = p.returncode != 0 and "missing.npy" in p.stderr and not os.path.exists(f("y.st"))
        print("  mpi: a rank that cannot start: exit %d, %s" % (p.returncode, [s for s in p.stderr.splitlines()
                                                                               if "missing.npy" in s][:1]))
        report("mpi_error_rank_dies", None if ok else "expected every rank stopped, the missing file named, no checkpoint")
    except subprocess.TimeoutExpired:
        report("mpi_error_rank_dies", "the other rank hung (no exit within 60 s)")
    # a rank that fails in a step (a class id out of range in its labels): every rank stops there
    y = np.load(f(name + ".labels.npy"))
    y[5] = 99
    np.save(f("badlabels.npy"), y)
    bad = [a if not a.startswith("labels=") else "labels=" + f("badlabels.npy") for a in base]
    p = mpirun(["-np", "2"] + bad + ["--batch", "8", "--save", f("z.st")], timeout=60)
    lines = [s for s in p.stderr.splitlines() if "rank" in s and "error" in s]
    print("  mpi: a step fails on one rank: exit %d: %s" % (p.returncode, lines[:2]))
    report("mpi_error_step", None if p.returncode != 0 and any("99" in s for s in lines) and
           any("rank 0 of 2" in s for s in lines) and not os.path.exists(f("z.st")) else
           "expected both ranks to stop at the step, the bad class id named, no checkpoint")
    check_mpi_stalled(base, f, report)


def check_mpi_stalled(base, f, report):
    """A rank that is stopped (SIGSTOP: alive, so mpirun does not end the job) stops the others
    within MODELRT_MPI_TIMEOUT seconds (3 here), naming the wait; before, they waited forever,
    spinning a core (a new user's trial). A bad MODELRT_MPI_TIMEOUT is an error naming it."""
    import signal
    import time
    p = subprocess.run(["mpirun", "--oversubscribe", "-x", "MODELRT_MPI_TIMEOUT", "-np", "2"] + base +
                       ["--batch", "8", "--quiet", "--device", "cpu"], capture_output=True, text=True, timeout=60,
                       env=dict(MPIRUN_ENV, MODELRT_MPI_TIMEOUT="abc"))
    bad_env = p.returncode != 0 and "MODELRT_MPI_TIMEOUT='abc'" in p.stderr
    i = base.index("--epochs")
    # far longer than the test waits; CPU ranks on any machine (GPU ranks would reduce through
    # NCCL, whose own timeout is MODELRT_NCCL_TIMEOUT's)
    long_run = base[:i + 1] + ["100000"] + base[i + 2:] + ["--device", "cpu"]
    q = subprocess.Popen(["mpirun", "--oversubscribe", "-x", "MODELRT_MPI_TIMEOUT", "-np", "2"] + long_run +
                         ["--batch", "8", "--quiet", "--save", f("stall.st")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(MPIRUN_ENV, MODELRT_MPI_TIMEOUT="3"))

    def rank1():
        for pid in os.listdir("/proc"):
            try:
                with open("/proc/%s/environ" % pid, "rb") as e:
                    env = e.read().split(b"\0")
            except (OSError, ValueError):
                continue
            if pid.isdigit() and b"OMPI_COMM_WORLD_RANK=1" in env and \
                    any(v.startswith(b"MODELRT_MPI_TIMEOUT=3") for v in env) and int(pid) != q.pid:
                return int(pid)
        return None
    pid, t_end = None, time.time() + 30
    while pid is None and q.poll() is None and time.time() < t_end:
        time.sleep(0.2)
        pid = rank1()
    why, took = None, None
    if pid is None:
        why = "rank 1 not found (mpirun %s)" % ("exited %d" % q.returncode if q.poll() is not None else "running")
    else:
        time.sleep(1.0)  # some steps first
        os.kill(pid, signal.SIGSTOP)
        t0 = time.time()
        try:
            out, err = q.communicate(timeout=60)
            took = time.time() - t0
            if q.returncode == 0 or "did not finish within 3 s (MODELRT_MPI_TIMEOUT" not in err:
                why = "exit %d: %s" % (q.returncode, err.strip()[-300:])
        except subprocess.TimeoutExpired:
            why = "still running 60 s after rank 1 stopped"
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except OSError:
                pass
    if q.poll() is None:
        q.kill()
        q.wait()
    print("  mpi: rank 1 stopped (SIGSTOP): every rank stopped %s; MODELRT_MPI_TIMEOUT=abc refused: %s"
          % ("after %.1f s (timeout 3 s)" % took if took is not None else "- " + str(why), bad_env))
    report("mpi_error_rank_stalled", why or (None if bad_env else "MODELRT_MPI_TIMEOUT=abc was not refused"))


def train_data(d, name):
    """The tests/train data of model `name` in d: the --data arguments."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "train"))
    import make_data
    if not os.path.exists(os.path.join(d, name + ".init.safetensors")):
        subprocess.run([sys.executable, os.path.join(ROOT, "tests", "train", "make_data.py"), d, name], check=True)
    out = []
    for k in make_data.make(name)[1]:
        out += ["--data", "%s=%s" % (k, os.path.join(d, "%s.%s.npy" % (name, k)))]
    return out


def train_prog(modelc, d, name, cuda=True):
    prog = os.path.join(d, name + "_train")
    if not os.path.exists(prog):
        sh([modelc, os.path.join(ROOT, "tests", "train", name + ".model"), "--train", "--max-batch", "8", "-o", prog] +
           ([] if cuda else ["--no-cuda"]), check=True)
    return prog


def read_log(path):
    """A --log file's losses and gradient norms (one per step)."""
    with open(path) as f:
        rows = [r.split() for r in f if r.startswith("epoch")]
    return np.array([float(r[5]) for r in rows]), np.array([float(r[9]) for r in rows])


def rel(a, b):
    """The largest relative difference of b from the reference a (an inf when the lengths differ)."""
    if a.shape != b.shape:
        return float("inf")
    return float(np.max(np.abs(b.astype(np.float64) - a) / np.maximum(np.abs(a.astype(np.float64)), 1e-30)))


def wrel(a, b):
    """The largest difference of the weights b from a, relative to each tensor's largest magnitude."""
    return max(float(np.max(np.abs(b[k].astype(np.float64) - a[k])) / max(float(np.max(np.abs(a[k]))), 1e-30))
               for k in a)


TORCHRUN_BASE = 29500 + os.getpid() % 2000  # a MASTER_PORT of its own per test run (the stand-in's key)


def torchrun(cmds, extra_env, timeout=120):
    """Start one process per command with torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK,
    MASTER_ADDR, MASTER_PORT), as torchrun --nproc-per-node N would; wait for all. Returns
    [(returncode, stderr)], or None when one did not end within `timeout` seconds."""
    global TORCHRUN_BASE
    TORCHRUN_BASE += 1
    procs = []
    for r, c in enumerate(cmds):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(len(cmds)), LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(TORCHRUN_BASE), **(extra_env[r] if isinstance(extra_env, list) else extra_env))
        procs.append(subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    out = []
    try:
        for p in procs:
            _, err = p.communicate(timeout=timeout)
            out.append((p.returncode, err))
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
            p.communicate()
        return None
    return out


def check_overlap_gpu(modelc, d, report):
    """The cudasim suite: two simulated GPUs post each bucket's ncclAllReduce on their
    communication streams while the backward pass goes on (mlp_adamw, a bucket per gradient:
    --bucket-mb 0.0001): PROG train --time counts 3 of the 4 buckets queued before the backward's
    last gradient (the stand-in runs a collective on the host when it is called, so this shows
    when the calls are made, not a GPU's concurrency); the weights equal those of one bucket
    bit for bit and one GPU's within 1e-5."""
    f = lambda s: os.path.join(d, s)  # noqa: E731
    name = "mlp_adamw"
    prog = train_prog(modelc, d, name)
    base = [prog, "train", "--weights", f(name + ".init.safetensors"), "--batch", "8", "--epochs", "2", "--quiet",
            "--time"] + train_data(d, name)
    runs = {}
    for tag, extra in (("buckets", ["--devices", "cuda:0,cuda:1", "--bucket-mb", "0.0001"]),
                       ("one_bucket", ["--devices", "cuda:0,cuda:1"]), ("one", ["--device", "cuda:0"])):
        p = sh(base + extra + ["--save", f("gov_%s.st" % tag)])
        if p.returncode:
            report("overlap_gpu", "%s run failed: %s" % (tag, p.stderr[-300:]))
            return
        runs[tag] = (safetensors_np.read(f("gov_%s.st" % tag)), ddp_line(p.stdout))
    (wb, lb), (w1, l1), (wo, _) = runs["buckets"], runs["one_bucket"], runs["one"]
    same = all(np.array_equal(wb[k], w1[k]) for k in wb)
    err = wrel(wo, wb)
    print("  overlap on cuda:0,cuda:1: %s buckets, queued before the backward's last gradient: median %s per step (min "
          "%s, max %s); one bucket: %s; weights vs one bucket %s, vs one GPU %.1e (tolerance 1e-05)"
          % ((lb or ("?",) * 4) + (l1, "identical" if same else "DIFFERENT", err)))
    report("overlap_gpu", None if lb == (4, 3, 3, 3) and l1 == (1, 0, 0, 0) and same and err <= 1e-5 else
           "expected 4 buckets, 3 queued during the backward in every step, the one-bucket weights bit for bit")


def check_torchrun_env(modelc, d, report):
    """torchrun's variables on the CPU side: malformed or inconsistent RANK/WORLD_SIZE, a missing
    MASTER_ADDR/MASTER_PORT, and CPU ranks, which need mpirun: each refused before any step."""
    name = "mlp_adamw"
    prog = train_prog(modelc, d, name, cuda=False)
    base = [prog, "train", "--weights", os.path.join(d, name + ".init.safetensors"), "--batch", "8"] + train_data(d, name)
    m = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29400"}
    for tag, env, extra, rc, want in (
            ("rank_not_below", dict(m, RANK="2", WORLD_SIZE="2"), [], 2, "RANK=2 is not below WORLD_SIZE=2"),
            ("rank_malformed", dict(m, RANK="1x", WORLD_SIZE="2"), [], 2, "RANK='1x' is not a non-negative integer"),
            ("rank_negative", dict(m, RANK="-1", WORLD_SIZE="2"), [], 2, "RANK='-1' is not a non-negative integer"),
            ("world_malformed", dict(m, RANK="0", WORLD_SIZE="two"), [], 2, "WORLD_SIZE='two' is not a positive"),
            ("world_zero", dict(m, RANK="0", WORLD_SIZE="0"), [], 2, "WORLD_SIZE='0' is not a positive"),
            ("rank_alone", dict(m, RANK="0"), [], 2, "RANK is set but WORLD_SIZE is not"),
            ("local_rank_malformed", dict(m, RANK="0", WORLD_SIZE="2", LOCAL_RANK="a"), [], 2,
             "LOCAL_RANK='a' is not a non-negative integer"),
            ("no_master_addr", {"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "1"}, [], 2, "MASTER_ADDR is not set"),
            ("bad_master_port", dict(m, RANK="0", WORLD_SIZE="2", MASTER_PORT="65536"), [], 2,
             "MASTER_PORT='65536' is not a port"),
            ("cpu_rank", dict(m, RANK="0", WORLD_SIZE="2"), ["--device", "cpu"], 2, "start them with mpirun -np 2"),
            ("cpu_rank_auto", dict(m, RANK="1", WORLD_SIZE="2", CUDA_VISIBLE_DEVICES=""), [], 1,
             "rank 1 of 2 (torchrun's RANK and WORLD_SIZE) runs on cpu:0: ranks on CPUs reduce their gradients with "
             "MPI, so start them with mpirun -np 2"),
            ("devices", dict(m, RANK="0", WORLD_SIZE="2"), ["--devices", "cpu:0,cpu:1"], 2, "not --devices")):
        clean = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                                    "MASTER_PORT", "NCCL_COMM_ID")}
        p = sh(base + extra + ["--save", os.path.join(d, "env.st")], env=dict(clean, **env))
        line = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
        print("  torchrun %s: exit %d: %s" % (tag, p.returncode, line))
        report("torchrun_env_" + tag, None if p.returncode == rc and want in p.stderr and not os.path.exists(
            os.path.join(d, "env.st")) else "expected exit %d and '%s', got exit %d: %s" % (rc, want, p.returncode, line))


def check_train_gpu(modelc, d, report, full=True):
    """The cudasim suite (two simulated GPUs, the NCCL stand-in): PROG train --devices cuda:0,cuda:1
    against cuda:0 alone with the full batch and against the CPU (losses, gradient norms and
    weights within 1e-5); two torchrun processes (no MPI) and two mpirun ranks on GPUs against one
    GPU; then the errors: NCCL missing, a NCCL error mid-run (in one process, and on one torchrun
    rank: every rank stops, no checkpoint half-written), a step that fails on one torchrun rank,
    and replicas of two kinds."""
    tol = 1e-5
    f = lambda s: os.path.join(d, s)  # noqa: E731

    def run(prog, name, tag, batch, extra, env=None):
        log = f("g_%s_%s.log" % (name, tag))
        if os.path.exists(log):
            os.remove(log)
        p = sh([prog, "train", "--weights", f(name + ".init.safetensors"), "--batch", str(batch), "--epochs", "2",
                "--quiet", "--save", f("g_%s_%s.st" % (name, tag)), "--log", log] + train_data(d, name) + extra,
               env=dict(os.environ, **(env or {})))
        if p.returncode:
            return None, p.stderr.strip()[-300:]
        return (safetensors_np.read(f("g_%s_%s.st" % (name, tag))),) + read_log(log), None

    # the even shards (batch 8) with --full only (make cudasim-full): batch 7's uneven shards and
    # batch 3's empty one take the same path with more to get wrong
    for name, batch, why in ((("mlp_adamw", 8, "shards 4,4"),) if full else ()) + (
                             ("mlp_adamw", 7, "shards 4,3 and a last batch of 5"),
                             ("mlp_adamw", 3, "a last batch of 1: cuda:1's shard is empty"),
                             ("mlp_sched", 8, "clip_grad_norm_: the norm of the reduced gradients")):
        prog = train_prog(modelc, d, name)
        runs, err = {}, None
        for tag, extra in (("one", ["--device", "cuda:0"]), ("cpu", ["--device", "cpu"]),
                           ("dp", ["--devices", "cuda:0,cuda:1"])):
            runs[tag], e = run(prog, name, tag, batch, extra)
            err = err or (e and "%s run failed: %s" % (tag, e))
        if err:
            report("train_%s_b%d" % (name, batch), err)
            continue
        errs = []
        for ref in ("one", "cpu"):
            (w1, l1, g1), (w2, l2, g2) = runs[ref], runs["dp"]
            errs.append((rel(l1, l2), rel(g1, g2), wrel(w1, w2)))
        print("  train %s batch %d (%s) on cuda:0,cuda:1: vs cuda:0 alone: losses %.1e, grad norms %.1e, weights %.1e; "
              "vs the CPU: %.1e, %.1e, %.1e (tolerance %.0e)" % ((name, batch, why) + errs[0] + errs[1] + (tol,)))
        report("train_%s_b%d" % (name, batch), None if max(max(e) for e in errs) <= tol else
               "two GPUs differ from one GPU or the CPU (%s)" % errs)
    # torchrun: two processes on two simulated GPUs each, LOCAL_RANK picking cuda:0 and cuda:1
    name, batch = "mlp_sched", 7
    prog = train_prog(modelc, d, name)
    base = [prog, "train", "--weights", f(name + ".init.safetensors"), "--batch", str(batch), "--epochs", "2",
            "--shuffle", "--seed", "5"] + train_data(d, name)
    one, e = run(prog, name, "one7s", batch, ["--device", "cuda:0", "--shuffle", "--seed", "5"])
    for r in ("tr.st", "tr.log"):
        if os.path.exists(f(r)):
            os.remove(f(r))
    res = torchrun([base + ["--save", f("tr.st"), "--log", f("tr.log")]] * 2, {"CUDASIM_DEVICES": "2:16384:9.0"})
    if res is None or any(rc for rc, _ in res) or one is None:
        report("torchrun_train", "a run failed or hung: %s %s" % (e, res and [err[-300:] for _, err in res]))
    else:
        l2, g2 = read_log(f("tr.log"))
        errs = (rel(one[1], l2), rel(one[2], g2), wrel(one[0], safetensors_np.read(f("tr.st"))))
        on = [ln for ln in res[0][1].splitlines() if "torchrun" in ln]
        print("  torchrun: 2 processes (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR:MASTER_PORT, no MPI), batch %d, "
              "shuffled, clipped: vs one GPU: losses %.1e, grad norms %.1e, weights %.1e (tolerance %.0e); rank 0 says: "
              "%s" % ((batch,) + errs + (tol, on[0] if on else "?")))
        report("torchrun_train", None if max(errs) <= tol and on and "on cuda:0" in on[0] and not res[1][1].strip()
               else "torchrun's two ranks differ from one GPU (%s), or rank 1 printed: %s" % (errs, res[1][1][-200:]))
    # mpirun: two ranks, a simulated GPU each, the NCCL id sent by MPI_Bcast
    import shutil
    if shutil.which("mpirun"):
        p = subprocess.run(["mpirun", "--oversubscribe", "-np", "2"] + base + ["--device", "cuda:0", "--save",
                           f("mp.st"), "--log", f("mp.log")], capture_output=True, text=True, timeout=120,
                           env=dict(MPIRUN_ENV, CUDASIM_DEVICES="1"))
        if p.returncode:
            report("mpi_nccl_train", "mpirun failed: " + p.stderr[-300:])
        else:
            l2, g2 = read_log(f("mp.log"))
            errs = (rel(one[1], l2), rel(one[2], g2), wrel(one[0], safetensors_np.read(f("mp.st"))))
            print("  mpirun -np 2 on GPUs (NCCL, id by MPI_Bcast): vs one GPU: losses %.1e, grad norms %.1e, weights "
                  "%.1e (tolerance %.0e)" % (errs + (tol,)))
            report("mpi_nccl_train", None if max(errs) <= tol and "NCCL" in p.stderr else
                   "2 MPI ranks on GPUs differ from one GPU (%s)" % (errs,))
    else:
        print("SKIP: cudasim/dp/mpi_nccl_train: mpirun not found (Debian: apt-get install openmpi-bin)")
    # errors
    two = base + ["--devices", "cuda:0,cuda:1"]
    p = sh(two, env=dict(os.environ, MODELRT_NCCL_LIB="/nonexistent/libnccl.so.2"))
    line = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
    print("  NCCL missing: exit %d: %s" % (p.returncode, line[:200]))
    report("error_nccl_missing", None if p.returncode == 1 and "/nonexistent/libnccl.so.2 cannot be loaded" in line and
           "install NCCL" in line else "expected exit 1 naming the library and how to install it")
    for fn in ("ck.st", "ck.state"):
        if os.path.exists(f(fn)):
            os.remove(f(fn))
    # a NCCL error at the 9th collective (step 3: a bucket per step): checkpoints of steps 1 and 2 written whole
    p = sh(two + ["--save", f("ck.st"), "--save-state", f("ck.state"), "--save-every", "1"],
           env=dict(os.environ, CUDASIM_NCCL_FAIL="9"), timeout=120)
    line = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
    kept = os.path.exists(f("ck.st")) and safetensors_np.read(f("ck.st")) is not None
    print("  a NCCL error mid-run (two GPUs, one process): exit %d: %s" % (p.returncode, line[:300]))
    report("error_nccl_midrun", None if p.returncode == 1 and "NCCL error 2" in line and "step 3" in line and
           "holds step 2" in line and kept else "expected exit 1 at step 3, the NCCL error, the step-2 checkpoint kept")
    # the same on rank 1 of two torchrun processes: both stop, at once, and nothing is saved
    if os.path.exists(f("tf.st")):
        os.remove(f("tf.st"))
    res = torchrun([base + ["--save", f("tf.st")]] * 2, {"CUDASIM_DEVICES": "2:16384:9.0", "CUDASIM_NCCL_FAIL": "9:1",
                                                          "CUDASIM_NCCL_TIMEOUT": "100"}, timeout=60)
    if res is None:
        report("error_torchrun_nccl_midrun", "a rank hung (no exit within 60 s)")
    else:
        print("  a NCCL error on torchrun's rank 1: exits %s: %s" % ([rc for rc, _ in res], [
            [ln for ln in err.splitlines() if "error:" in ln][-1:] for _, err in res]))
        report("error_torchrun_nccl_midrun", None if all(rc == 1 for rc, _ in res) and "rank 1 failed" in res[0][1] and
               "NCCL error 2" in res[1][1] and "on cuda:1 (rank 1 of 2)" in res[1][1] and not os.path.exists(f("tf.st"))
               else "expected both ranks to stop (rank 0 naming rank 1; rank 1 on cuda:1, its LOCAL_RANK), no checkpoint")
    # a step that fails on rank 1 (a class id out of range in its shard): both stop at that step
    y = np.load(f(name + ".labels.npy"))
    y[5] = 99
    np.save(f("badlabels.npy"), y)
    bad = [a if not a.startswith("labels=") else "labels=" + f("badlabels.npy") for a in base]
    bad = [a for a in bad if a not in ("--shuffle",)]
    bad[bad.index("--seed"):bad.index("--seed") + 2] = []
    res = torchrun([bad + ["--save", f("tb.st")]] * 2, {"CUDASIM_DEVICES": "2:16384:9.0"}, timeout=60)
    if res is None:
        report("error_torchrun_step", "a rank hung (no exit within 60 s)")
    else:
        lines = [[ln for ln in err.splitlines() if "error:" in ln][-1:] for _, err in res]
        print("  a step fails on torchrun's rank 1: exits %s: %s" % ([rc for rc, _ in res], lines))
        report("error_torchrun_step", None if all(rc == 1 for rc, _ in res) and "rank 1 failed at step 1" in res[0][1] and
               "99" in res[1][1] and not os.path.exists(f("tb.st")) else
               "expected both ranks to stop at step 1, rank 1 naming the class id, no checkpoint")
    p = sh(base + ["--devices", "cpu:0,cuda:0"])
    print("  mixed kinds: exit %d: %s" % (p.returncode, p.stderr.strip()[-200:]))
    report("error_train_mixed_kinds", None if p.returncode == 1 and "not both" in p.stderr else
           "expected exit 1 and 'not both'")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device-kind", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--pipe-only", action="store_true", help="only the micro-batch pipeline's tests (pipe.py)")
    ap.add_argument("--quick", dest="full", action="store_false",
                    help="on GPUs, leave out GPU training at batch 8 (even shards; the cudasim suite of make test)")
    ap.add_argument("--only", choices=["rows", "train_mix", "mpi", "overlap"],  # mpi: rank agreement
                    help="only one group: outputs of batch*2 rows (--devices and --micro-batches), DP training of "
                    "models that mix batch items, mpirun rank agreement, the gradient buckets overlapping the backward pass")
    a = ap.parse_args()
    modelc = os.environ.get("MODELC", os.path.join(ROOT, "build", "bin", "modelc"))
    devs = ["%s:0" % a.device_kind, "%s:1" % a.device_kind]
    pfx = "dp" if a.device_kind == "cpu" else "cudasim/dp"
    fails = 0

    def report(name, why):
        nonlocal fails
        print("PASS: %s/%s" % (pfx, name) if why is None else "FAIL: %s/%s: %s" % (pfx, name, why))
        fails += why is not None

    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(prefix="dp_") as d:
        if a.pipe_only:
            pipe.main(modelc, d, a.device_kind, report)
            return 1 if fails else 0
        if a.only in (None, "rows"):
            check_rows(modelc, d, devs, report)
            check_load_only(modelc, d, devs, report)
            check_dp_error_position(modelc, d, devs, report)
        if a.only == "rows":
            pipe.main(modelc, d, a.device_kind, report, only="rows")
            return 1 if fails else 0
        if a.only in (None, "train_mix"):
            check_train_mix(modelc, d, devs, report)
        if a.only == "train_mix":
            return 1 if fails else 0
        if a.only == "overlap":
            if a.device_kind == "cpu":
                check_overlap(modelc, d, devs, report)
                check_train_tied(modelc, d, devs, report)
            else:
                check_overlap_gpu(modelc, d, report)
            return 1 if fails else 0
        if a.only in (None, "mpi"):
            check_mpi_agree(modelc, d, a.device_kind, report)
        if a.only == "mpi":
            return 1 if fails else 0
        # digits: batch 360 over max-batch 64 (chunks of 128 split in two), an odd batch, batch 1
        prog = os.path.join(d, "digits")
        p = sh([modelc, os.path.join(DIGITS, "digits.model"), "--max-batch", "64", "-o", prog])
        if p.returncode:
            report("build", "modelc failed: " + p.stderr[-300:])
            return 1
        x = np.load(os.path.join(DIGITS, "test_x.npy"))
        w = os.path.join(DIGITS, "digits.safetensors")
        for tag, xs, dv in (("digits_b360", x, devs), ("digits_b7", x[:7], devs), ("digits_b1", x[:1], devs)):
            report(tag, check(prog, w, xs, "x", "logits", dv, d, tag))
        # the same from C, through the runtime's mrt_dp_* API (CPU replicas: the C file is built
        # without the CUDA objects)
        if a.device_kind == "cpu":
            report("embed", check_embed(modelc, d, w, x, os.path.join(d, "dp_digits_b360.npy")))
        if a.device_kind == "cpu":
            for tag, xs in (("digits_b1", x[:1]), ("digits_b360", x)):
                report("threads_" + tag, check_threads(prog, w, xs, "x", "logits", d, tag))
            report("digits_b10_3dev", check(prog, w, x[:10], "x", "logits", devs + ["cpu:2"], d, "digits_b10_3dev"))
            check_dp_threads_help(prog, w, x[:40], d, report)
        # a CNN (conv, pooling, softmax) with random weights
        src = os.path.join(d, "cnn.model")
        with open(src, "w") as f:
            f.write(CONV)
        prog = os.path.join(d, "cnn")
        p = sh([modelc, src, "--max-batch", "8", "-o", prog] + ([] if a.device_kind == "cuda" else ["--no-cuda"]))
        if p.returncode:
            report("cnn", "modelc failed: " + p.stderr[-300:])
        else:
            cw = os.path.join(d, "cnn.safetensors")
            safetensors_np.write(cw, {"c.weight": rng.standard_normal((4, 2, 3, 3)).astype(np.float32) * 0.3,
                                      "c.bias": rng.standard_normal(4).astype(np.float32) * 0.1,
                                      "fc.weight": rng.standard_normal((3, 36)).astype(np.float32) * 0.2})
            report("cnn_b11", check(prog, cw, rng.standard_normal((11, 2, 6, 6)).astype(np.float32), "x", "y", devs, d,
                                    "cnn_b11"))
            if a.device_kind == "cpu":
                src = os.path.join(d, "gemv.model")
                with open(src, "w") as f:
                    f.write(GEMV)
                gp = os.path.join(d, "gemv")
                sh([modelc, src, "--max-batch", "4", "--no-cuda", "-o", gp], check=True)
                gw = os.path.join(d, "gemv.safetensors")
                safetensors_np.write(gw, {"w": rng.standard_normal((4608, 64)).astype(np.float32)})
                for b in (1, 3):
                    report("threads_gemv_b%d" % b, check_threads(gp, gw, rng.standard_normal((b, 4608)).astype(
                        np.float32), "x", "y", d, "gemv_b%d" % b))
                for b in (1, 8):
                    report("threads_cnn_b%d" % b, check_threads(prog, cw, rng.standard_normal((b, 2, 6, 6)).astype(
                        np.float32), "x", "y", d, "cnn_b%d" % b))
        # data-parallel training on CPU devices (one process, threads): the full batch's steps
        if a.device_kind == "cpu":
            for name, batch, dv in (("mlp_adamw", 8, devs), ("mlp_adamw", 7, devs), ("mlp_sched", 8, devs),
                                    ("mlp_adamw", 5, devs + ["cpu:2"]), ("mlp_sgd", 8, devs)):
                report("train_%s_b%d_%ddev" % (name, batch, len(dv)), check_train(modelc, d, name, batch, dv))
            tp = os.path.join(d, "mlp_adamw_train")
            tbase = [tp, "train", "--weights", os.path.join(d, "mlp_adamw.init.safetensors"), "--data",
                     "x=" + os.path.join(d, "mlp_adamw.x.npy"), "--data", "labels=" + os.path.join(d, "mlp_adamw.labels.npy")]
            for name, extra, rc, want in (
                    ("train_gpu", ["--devices", "cpu:0,cuda:0"], 1, "not present"),
                    ("train_batch", ["--devices", "cpu:0,cpu:1", "--batch", "17"], 2, "more than 2 devices take: 8 each"),
                    ("train_with_device", ["--devices", "cpu:0,cpu:1", "--device", "cpu"], 2, "without --device")):
                p = sh(tbase + extra)
                print("  %s: exit %d: %s" % (name, p.returncode, p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""))
                report("error_" + name, None if p.returncode == rc and want in p.stderr else
                       "expected exit %d and '%s', got exit %d: %s" % (rc, want, p.returncode, p.stderr.strip()[-200:]))
            check_mpi(modelc, d, report)
            check_overlap(modelc, d, devs, report)
            check_train_tied(modelc, d, devs, report)
            check_torchrun_env(modelc, d, report)
        else:
            check_train_gpu(modelc, d, report, a.full)
            check_overlap_gpu(modelc, d, report)
        # errors: each refused before anything runs, naming what is wrong
        prog = os.path.join(d, "digits")
        xin = os.path.join(d, "x_digits_b7.npy")
        base = [prog, "--weights", w, "--input", "x=" + xin]
        cases = [("duplicate", ["--devices", "%s,%s" % (devs[0], devs[0])], 1, "names %s twice" % devs[0]),
                 ("absent", ["--devices", "%s,cuda:9" % devs[0]], 1, "cuda:9 is not present (present: cpu:0"),
                 ("malformed", ["--devices", "cpu:0,gpu"], 1, "unknown device 'gpu'"),
                 ("with_device", ["--devices", ",".join(devs), "--device", "cpu"], 2, "give it without --device")]
        if a.device_kind == "cpu":
            cases.append(("all_without_gpu", ["--devices", "all"], 1, "no CUDA device is present"))
        for name, extra, rc, want in cases:
            p = sh(base + extra, env=dict(os.environ, CUDA_VISIBLE_DEVICES="") if name == "all_without_gpu" else None)
            print("  %s: exit %d: %s" % (name, p.returncode, p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""))
            report("error_" + name, None if p.returncode == rc and want in p.stderr else
                   "expected exit %d and '%s', got exit %d: %s" % (rc, want, p.returncode, p.stderr.strip()[-200:]))
        src = os.path.join(d, "mixed.model")
        with open(src, "w") as f:
            f.write(MIXED)
        prog = os.path.join(d, "mixed")
        sh([modelc, src, "-o", prog], check=True)
        np.save(os.path.join(d, "m.npy"), np.ones((4, 4), np.float32))
        p = sh([prog, "--input", "x=" + os.path.join(d, "m.npy"), "--devices", ",".join(devs)])
        print("  mixed: exit %d: %s" % (p.returncode, p.stderr.strip()))
        report("error_batch_mixing", None if p.returncode == 1 and "cannot run data-parallel" in p.stderr else
               "a model that mixes batch items: expected exit 1 and 'cannot run data-parallel'")
        # pipelined model parallelism: a model split by 'on' regions in micro-batches (pipe.py)
        pipe.main(modelc, d, a.device_kind, report)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
