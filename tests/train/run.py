#!/usr/bin/env python3
"""tests/train: modelc's training step against PyTorch, step for step.

    python3 tests/train/run.py [-k NAME]     (MODELC: the compiler, default build/bin/modelc)

For each model: make_data.py's initial weights and samples, `modelc NAME.model --train`, then
`PROG train --batch 8 --epochs 2 --log LOG --save OUT` (file order, 10 steps); the loss of every
step (from the log) and the final weights are compared with PyTorch's (expected_NAME.safetensors,
made by reference.py) at RTOL relative to the largest magnitude of each tensor, and printed
with the error. The models: three MLPs (AdamW, SGD with Nesterov momentum, Adam with a frozen
param) and gpt2_adamw, a 2-layer GPT-2 with tied embeddings (examples/gpt2's text) trained on
next-token cross_entropy with AdamW, whose reference is PyTorch in float64 (reference.py's
FLOAT64) and whose key biases are left out of the comparison (NULL_GRAD says why). Then eval,
cli (the command line's refusals), seq (a symbolic seq axis from the data files, against NumPy),
embed (the C API) and resume. Prints PASS/FAIL lines.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tools"))
import make_data  # noqa: E402
import safetensors_np  # noqa: E402

MODELS = ["mlp_adamw", "mlp_sgd", "mlp_adam", "mlp_sched", "cnn_adamw", "gpt2_adamw"]
RTOL = 1e-5
# Parts of params whose true gradient is exactly 0: GPT-2's key bias (the middle third of each
# c_attn.bias) adds q . b_k to every score of a row, which softmax ignores. Both PyTorch and
# modelc compute a rounding-noise gradient there (~1e-9), which Adam divides by its own
# root-mean-square and turns into steps of up to lr: the two runs' values are noise, not
# comparable. These parts are printed, not compared; each must stay within STEPS * lr of its
# initial value (Adam's step bound), and the rest of the tensor is compared at RTOL.
NULL_GRAD = {"gpt2_adamw": [(re.compile(r"h\.\d+\.attn\.c_attn\.bias$"), slice(32, 64), 10 * 0.01)]}
# Parts computed by cancellation: the query and key projections' columns of each c_attn.weight.
# The scores of a query row ignore what the keys have in common, so the component of each key
# along the sequence's mean input gets a gradient that cancels to rounding noise; and a query's
# gradient, sum_j dscore_j k_j with sum_j dscore_j = 0, is a difference of keys dominated by that
# common part. Adam turns the noise into weight differences above 1e-5 in any float32 run:
# PyTorch's own float32 run is 1.5e-5 (relative) from its float64 run on h.0's. Which columns
# the noise lands on moves with each rounding (with libm's tanhf in gelu, modelc's h.0 keys were
# 2.0e-5 off and its queries 1.8e-6; with mrt_tanhf 1.3e-5 and 1.0e-5). These parts are compared
# at twice the largest of PyTorch's own float32 errors on them (f32_error.NAME.part in the
# reference, written by reference.py), and at least at RTOL; the rest of each tensor at RTOL.
ILL_COND = {"gpt2_adamw": (re.compile(r"h\.\d+\.attn\.c_attn\.weight$"), (slice(None), slice(0, 64)))}


def again():
    """Extra flags for another build of a model that check() builds too: on the CPU, without its
    CUDA half (check() has compiled that .cu with nvcc; nvcc is most of a build's time and the CPU
    path is what runs here). On a GPU (TRAIN_DEVICE=cuda) the same build as check()'s."""
    return ["--no-cuda"] if os.environ.get("TRAIN_DEVICE", "cpu").startswith("cpu") else []


def check(name, modelc, d):
    prog = os.path.join(d, name)
    p = subprocess.run([modelc, os.path.join(HERE, name + ".model"), "--train", "--max-batch", "8", "-o", prog],
                       capture_output=True, text=True)
    if p.returncode:
        return "modelc --train failed: " + (p.stderr or p.stdout).strip()[-400:]
    subprocess.run([sys.executable, os.path.join(HERE, "make_data.py"), d, name], check=True)
    w, data = make_data.make(name)
    cmd = [prog, "train", "--weights", os.path.join(d, name + ".init.safetensors"), "--batch", "8", "--epochs", "2",
           "--log", os.path.join(d, name + ".log"), "--save", os.path.join(d, name + ".out.safetensors"), "--quiet"]
    for k in data:
        cmd += ["--data", "%s=%s" % (k, os.path.join(d, "%s.%s.npy" % (name, k)))]
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, MODELRT_DEVICE=os.environ.get("TRAIN_DEVICE", "cpu")))
    if p.returncode:
        return "train failed (exit %d): %s" % (p.returncode, (p.stderr or p.stdout).strip()[-400:])
    with open(os.path.join(d, name + ".log")) as f:
        rows = [line.split() for line in f]
    losses = np.array([float(r[5]) for r in rows], dtype=np.float64)
    norms = np.array([float(r[9]) for r in rows], dtype=np.float64)
    want = safetensors_np.read(os.path.join(HERE, "expected_%s.safetensors" % name))
    got = safetensors_np.read(os.path.join(d, name + ".out.safetensors"))
    bad = []
    ref = want["losses"].astype(np.float64)
    if losses.shape != ref.shape:
        return "%d losses in the log, PyTorch has %d" % (losses.size, ref.size)
    err = float(np.max(np.abs(losses - ref) / np.abs(ref)))
    print("  %s: losses per step vs PyTorch: max relative error %.2e (tolerance %.0e)" % (name, err, RTOL))
    print("    modelc  " + " ".join("%.6f" % v for v in losses))
    print("    PyTorch " + " ".join("%.6f" % v for v in ref))
    if err > RTOL:
        bad.append("losses differ by %.2e relative" % err)
    ref = want["grad_norms"].astype(np.float64)
    if norms.shape != ref.shape:
        return "%d gradient norms in the log, PyTorch has %d" % (norms.size, ref.size)
    err = float(np.max(np.abs(norms - ref) / np.abs(ref)))
    print("  %s: gradient norms (before clipping) vs PyTorch: max relative error %.2e (tolerance %.0e)" % (name, err, RTOL))
    if err > RTOL:
        bad.append("gradient norms differ by %.2e relative" % err)
    for k, v in want.items():
        if k in ("losses", "grad_norms") or k.startswith("f32_error."):
            continue
        if k not in got:
            bad.append("the saved weights lack '%s'" % k)
            continue
        gk = got[k].astype(np.float64)
        v = v.astype(np.float64)
        scale = max(float(np.max(np.abs(v))), 1e-30)
        keep = np.ones(v.shape, dtype=bool)
        for pat, part, bound in NULL_GRAD.get(name, []):
            if not pat.match(k):
                continue
            keep[part] = False
            moved = float(np.max(np.abs(gk[part] - w[k][part])))
            print("  %s: final %s[%d:%d] (true gradient 0: not compared) |modelc - torch| / max|torch| = %.2e; "
                  "moved %.2e from its init (bound %.2e)" % (name, k, part.start, part.stop,
                                                             float(np.max(np.abs(gk[part] - v[part]))) / scale,
                                                             moved, bound))
            if not moved <= bound:
                bad.append("final %s[%d:%d] moved %.2e, more than Adam's bound %.2e" % (k, part.start, part.stop,
                                                                                      moved, bound))
        if name in ILL_COND and ILL_COND[name][0].match(k):
            part = ILL_COND[name][1]
            floors = [float(x[0]) for n, x in want.items() if n.startswith("f32_error.") and n.endswith(".part")]
            tol = max(RTOL, 2 * max(floors)) if floors else RTOL
            ep = float(np.max(np.abs(gk[part] - v[part]))) / scale
            print("  %s: final %s[:, %d:%d] (the queries' and keys' columns) |modelc - torch| / max|torch| = %.2e (tolerance %.2e: "
                  "twice PyTorch float32's own %.2e)" % (name, k, part[1].start, part[1].stop, ep, tol,
                                                        max(floors) if floors else float("nan")))
            if not ep <= tol:
                bad.append("final %s's query and key columns differ by %.2e relative" % (k, ep))
            keep[part] = False
        e = float(np.max(np.abs(gk - v)[keep])) / scale
        print("  %s: final %-12s max |modelc - torch| / max|torch| = %.2e" % (name, k, e))
        if not e <= RTOL:
            bad.append("final %s differs by %.2e relative" % (k, e))
    extra = set(got) - set(want)
    if extra:
        bad.append("the saved weights hold %s, which the model's params do not" % sorted(extra))
    return "; ".join(bad) or None


def _train(prog, d, name, *args):
    cmd = [prog, "train", "--batch", "8", "--quiet"]
    for k in make_data.make(name)[1]:
        cmd += ["--data", "%s=%s" % (k, os.path.join(d, "%s.%s.npy" % (name, k)))]
    return subprocess.run(cmd + list(args), capture_output=True, text=True,
                          env=dict(os.environ, MODELRT_DEVICE=os.environ.get("TRAIN_DEVICE", "cpu")))


def check_embed_packed(modelc, d):
    """mrt_model_save_weights on inference models with weights packed in place (embed_packed.c):
    a packed load-time value leaves the params plain, so the save succeeds and writes the loaded
    file's bytes (it was once refused: the review of 2026-12-05); a packed param is refused with
    a message, and saved with MODELRT_PACK_WEIGHTS=0."""
    flags = lambda w: subprocess.run([modelc, w], capture_output=True, text=True, check=True).stdout.split()  # noqa: E731
    srcs = []
    for name in ("packed_lt", "packed_pp"):
        p = subprocess.run([modelc, os.path.join(HERE, name + ".model"), "--no-cuda", "--max-batch", "8", "--emit-c",
                            "-o", d], capture_output=True, text=True)
        if p.returncode:
            return "modelc --emit-c %s failed: %s" % (name, p.stderr.strip()[-300:])
        srcs.append(os.path.join(d, name + ".c"))
    exe = os.path.join(d, "embed_packed")
    p = subprocess.run([os.environ.get("CC", "cc"), "-O1", "-Wall", "-Werror"] + flags("--print-cflags") +
                       ["-I" + d, os.path.join(HERE, "embed_packed.c")] + srcs + flags("--print-libs") + ["-o", exe],
                       capture_output=True, text=True)
    if p.returncode:
        return "compiling embed_packed.c failed: " + p.stderr.strip()[-400:]
    w = os.path.join(d, "w.st")
    safetensors_np.write(w, {"s": np.random.default_rng(3).standard_normal((256, 1024)).astype(np.float32)})
    bad = []
    for env in ({}, {"MODELRT_PACK_WEIGHTS": "0"}):
        out = os.path.join(d, "out%d.st" % len(env))
        q = subprocess.run([exe, w, out], capture_output=True, text=True, env=dict(os.environ, MODELRT_DEVICE="cpu", **env))
        for line in q.stdout.strip().splitlines():
            print("  embed_packed%s: %s" % (" (MODELRT_PACK_WEIGHTS=0)" if env else "", line))
        if q.returncode:
            bad.append("embed_packed exit %d%s: %s" % (q.returncode, " with MODELRT_PACK_WEIGHTS=0" if env else "",
                                                         (q.stdout + q.stderr).strip()[-300:]))
            continue
        a, b = safetensors_np.read(w), safetensors_np.read(out)
        if set(a) != set(b) or any(not np.array_equal(a[k], b[k]) for k in a):
            bad.append("the saved weights are not the loaded ones")
    return "; ".join(bad) or None


def check_resume(modelc, d):
    """A run stopped after 6 steps and resumed from its --save/--save-state checkpoint ends bit
    for bit as the run that was never stopped (shuffled, with a schedule and clipping); a resume
    file that does not fit is refused naming the mismatch; a loss that turns inf stops the run
    and keeps the last checkpoint."""
    name = "mlp_sched"
    prog = os.path.join(d, name)
    p = subprocess.run([modelc, os.path.join(HERE, name + ".model"), "--train", "--max-batch", "8", "-o", prog] + again(),
                       capture_output=True, text=True)
    if p.returncode:
        return "modelc --train failed: " + (p.stderr or p.stdout).strip()[-400:]
    subprocess.run([sys.executable, os.path.join(HERE, "make_data.py"), d, name, "mlp_sgd", "mlp_adamw"], check=True)
    f = lambda s: os.path.join(d, s)  # noqa: E731
    init = f(name + ".init.safetensors")
    common = ["--shuffle", "--seed", "7", "--epochs", "2"]
    # hyperparameters other than the model's: the resumed run leaves them out and takes them
    # from the state file (a run that took the model's would not end as the straight one)
    hyper = ["--lr", "0.015", "--clip-grad-norm", "0.7", "--warmup-steps", "2", "--decay-steps", "6", "--min-lr", "0.001"]
    runs = [("straight", ["--weights", init, "--save", f("a.st"), "--log", f("a.log")] + common + hyper),
            ("first 6 steps", ["--weights", init, "--steps", "6", "--save", f("w.st"), "--save-state", f("s.st")] + common + hyper),
            ("first 3 steps", ["--weights", init, "--steps", "3", "--save", f("w3.st"), "--save-state", f("s3.st")] + common + hyper),
            ("resumed", ["--weights", f("w.st"), "--resume", f("s.st"), "--save", f("w.st"), "--save-state", f("s.st"),
                         "--log", f("b.log")] + common)]
    for what, args in runs:
        p = _train(prog, d, name, *args)
        if p.returncode:
            return "the %s run failed: %s" % (what, p.stderr.strip()[-300:])
    a, b = safetensors_np.read(f("a.st")), safetensors_np.read(f("w.st"))
    diff = [k for k in a if not np.array_equal(a[k], b[k])]
    with open(f("a.log")) as fa, open(f("b.log")) as fb:
        la, lb = [r.split()[5] for r in fa][6:], [r.split()[5] for r in fb]
    print("  resume: steps 7-10 resumed: losses %s, the straight run's %s; weights differ in %s" % (lb, la, diff or "none"))
    bad = []
    with open(f("w.st"), "rb") as fh:
        meta = fh.read(8 + int.from_bytes(fh.read(8), "little"))
    want_args = b'"optimizer_args":"lr=0.015 clip_grad_norm=0.7 warmup_steps=2 decay_steps=6 min_lr=0.001 '
    print("  resume: the resumed run's metadata records the hyperparameters used: %s" % (want_args in meta))
    if want_args not in meta:
        bad.append("the saved metadata lacks %s" % want_args.decode())
    if diff:
        bad.append("resumed weights differ from the straight run's in %s" % diff)
    if la != lb:
        bad.append("resumed losses %s differ from %s" % (lb, la))
    # a resume file that does not fit: each refused before the first step, naming the mismatch
    other = f("other.model")
    with open(os.path.join(HERE, name + ".model")) as src, open(other, "w") as dst:
        dst.write(src.read().replace("optimizer adamw(lr=0.02", "optimizer adam(lr=0.02"))
    p = subprocess.run([modelc, other, "--train", "--max-batch", "8", "-o", f("other")] + again(), capture_output=True, text=True)
    if p.returncode:
        return "modelc --train of the adam variant failed: " + p.stderr.strip()[-300:]
    subprocess.run([modelc, os.path.join(HERE, "mlp_adamw.model"), "--train", "--max-batch", "8", "-o", f("mlp_adamw_prog")] + again(),
                   check=True, capture_output=True)
    p = _train(f("mlp_adamw_prog"), d, "mlp_adamw", "--weights", f("mlp_adamw.init.safetensors"), "--steps", "2",
               "--save", f("o.st"), "--save-state", f("os.st"))
    if p.returncode:
        return "the mlp_adamw run failed: " + p.stderr.strip()[-300:]
    cases = [("the weights file as --resume", prog, ["--resume", f("w.st")], "holds weights, not optimizer state"),
             ("another model's state", prog, ["--resume", f("os.st")], "the state of model 'mlp_adamw', not of 'mlp_sched'"),
             ("another optimizer's state", f("other"), ["--resume", f("s.st")],
              "the state of optimizer 'adamw', but model 'mlp_sched' trains with 'adam'"),
             ("a state past the end of the run", prog, ["--resume", f("s.st")] + common, "nothing to train"),
             ("other batches than the saving run's", prog, ["--resume", f("s.st"), "--shuffle", "--seed", "8"],
              "saved by a run with batch=8 shuffle=1 seed=7, this one has batch=8 shuffle=1 seed=8"),
             ("not a safetensors file", prog, ["--resume", f("mlp_sched.x.npy")], "not a safetensors file")]
    cases = [c + (f("w.st"),) for c in cases] + [
             ("another --lr than the saving run's", prog, ["--resume", f("s3.st"), "--lr", "0.02"] + common,
              "--lr 0.02, but --resume %s was saved by a run with lr=0.015" % f("s3.st"), f("w3.st")),
             ("another --warmup-steps than the saving run's", prog, ["--resume", f("s3.st"), "--warmup-steps", "3"] + common,
              "--warmup-steps 3, but --resume %s was saved by a run with warmup_steps=2" % f("s3.st"), f("w3.st")),
             ("weights of another step", prog, ["--resume", f("s3.st")] + common,
              "--weights %s holds step 10, but --resume %s holds step 3" % (f("w.st"), f("s3.st")), f("w.st")),
             ("weights of no step", prog, ["--resume", f("s3.st")] + common, "--weights %s holds no step" % init, init)]
    for what, pr, args, want, wts in cases:
        p = _train(pr, d, name, "--weights", wts, *args)
        ok = p.returncode == 1 and want in p.stderr
        print("  resume: %s: exit %d: %s" % (what, p.returncode, p.stderr.strip()))
        if not ok:
            bad.append("%s: expected exit 1 and '%s'" % (what, want))
    # SGD at a learning rate that diverges: stopped at the first inf loss, the checkpoint of two
    # steps before kept, holding finite weights and its step
    subprocess.run([modelc, os.path.join(HERE, "mlp_sgd.model"), "--train", "--max-batch", "8", "-o", f("sgd")] + again(),
                   check=True, capture_output=True)
    p = _train(f("sgd"), d, "mlp_sgd", "--weights", f("mlp_sgd.init.safetensors"), "--epochs", "50", "--lr", "50",
               "--save-every", "2", "--save", f("c.st"), "--save-state", f("cs.st"))
    print("  diverging: exit %d: %s" % (p.returncode, p.stderr.strip()))
    import re
    m = re.search(r"is (inf|nan|-inf) at step (\d+).*holds step (\d+); it is kept", p.stderr)
    if p.returncode != 1 or not m:
        bad.append("a diverging run: expected exit 1 naming the step and the kept checkpoint")
    else:
        c = safetensors_np.read(f("c.st"))
        with open(f("c.st"), "rb") as fh:
            hdr = fh.read(8 + int.from_bytes(fh.read(8), "little"))
        if not all(np.isfinite(v).all() for v in c.values()) or ('"step":"%s"' % m.group(3)).encode() not in hdr:
            bad.append("the kept checkpoint is not the finite weights of step %s" % m.group(3))
    return "; ".join(bad) or None


def check_embed(modelc, d):
    """The training API from C (embed_train.c): NAME_train_step for 10 steps, save_weights and
    save_state, a second model resumed with load_state; the weights are PROG train's, bit for bit."""
    name = "mlp_adamw"
    p = subprocess.run([modelc, os.path.join(HERE, name + ".model"), "--train", "--max-batch", "8", "--emit-c", "-o", d],
                       capture_output=True, text=True)
    if p.returncode:
        return "modelc --emit-c failed: " + p.stderr.strip()[-300:]
    flags = lambda w: subprocess.run([modelc, w], capture_output=True, text=True, check=True).stdout.split()  # noqa: E731
    exe = os.path.join(d, "embed_train")
    p = subprocess.run([os.environ.get("CC", "cc"), "-O1", "-Wall", "-Werror"] + flags("--print-cflags") +
                       ["-I" + d, os.path.join(HERE, "embed_train.c"), os.path.join(d, name + ".c")] +
                       flags("--print-libs") + ["-o", exe], capture_output=True, text=True)
    if p.returncode:
        return "compiling embed_train.c failed: " + p.stderr.strip()[-400:]
    subprocess.run([sys.executable, os.path.join(HERE, "make_data.py"), d, name], check=True)
    f = lambda s: os.path.join(d, s)  # noqa: E731
    p = subprocess.run([exe, f(name + ".init.safetensors"), f(name + ".x.npy"), f(name + ".labels.npy"), "10",
                        f("e.st"), f("es.st")], capture_output=True, text=True, env=dict(os.environ, MODELRT_DEVICE="cpu"))
    if p.returncode:
        return "embed_train failed: " + (p.stderr or p.stdout).strip()[-300:]
    for line in p.stdout.strip().splitlines():
        if "before load_weights" in line:
            print("  embed: " + line)
    print("  embed: " + p.stdout.strip().splitlines()[-1])
    subprocess.run([modelc, os.path.join(HERE, name + ".model"), "--train", "--max-batch", "8", "-o", f("prog")] + again(),
                   check=True, capture_output=True)
    q = _train(f("prog"), d, name, "--weights", f(name + ".init.safetensors"), "--epochs", "2", "--save", f("c.st"),
               "--device", "cpu")  # the C program is built for the CPU: so is the comparison
    if q.returncode:
        return "PROG train failed: " + q.stderr.strip()[-300:]
    a, b = safetensors_np.read(f("e.st")), safetensors_np.read(f("c.st"))
    diff = [k for k in b if not np.array_equal(a.get(k), b[k])]
    print("  embed: %s_train_step x 10 vs PROG train: weights differ in %s" % (name, diff or "none"))
    bad = ["the weights differ in %s" % diff] if diff else []
    # a weights file that holds the optimizer state too is refused, pointing to --resume (it was
    # once loaded as the moments of step 0)
    merged = dict(a, **safetensors_np.read(f("es.st")))
    safetensors_np.write(f("merged.st"), merged)
    q = _train(f("prog"), d, name, "--weights", f("merged.st"), "--steps", "1")
    print("  embed: --weights holding the optimizer state: exit %d: %s" % (q.returncode, q.stderr.strip()))
    if q.returncode != 1 or "is optimizer state, not a weight" not in q.stderr or "--resume" not in q.stderr:
        bad.append("a weights file with optimizer state: expected exit 1 naming the tensor and --resume")
    with open(f(name + ".h")) as fh:
        hdr = fh.read()
    doc = hdr[hdr.index("Load the weights"):hdr.index("_load_weights(", hdr.index("Load the weights"))]
    params, state = doc.split("is refused:") if "is refused:" in doc else (doc, "")
    print("  embed: the header's load_weights comment: %d params, %d state tensors listed apart"
          % (params.count("f32["), state.count("f32[")))
    if "exp_avg" in params or state.count("exp_avg") != 8:
        bad.append("the header's load_weights comment lists the optimizer state among the params")
    return "; ".join(bad) or None


def check_eval(modelc, d):
    """--eval: after each epoch the evaluation twin's mean loss over the --eval samples, with the
    weights of that moment; checked against NumPy's cross_entropy of the saved weights."""
    name = "mlp_adamw"
    prog = os.path.join(d, name)
    subprocess.run([modelc, os.path.join(HERE, name + ".model"), "--train", "--max-batch", "8", "-o", prog] + again(),
                   check=True, capture_output=True)
    subprocess.run([sys.executable, os.path.join(HERE, "make_data.py"), d, name], check=True)
    f = lambda s: os.path.join(d, s)  # noqa: E731
    ev = ",".join("%s=%s" % (k, f("%s.%s.npy" % (name, k))) for k in ("x", "labels"))
    p = _train(prog, d, name, "--weights", f(name + ".init.safetensors"), "--epochs", "2", "--eval", ev,
               "--log", f("e.log"), "--save", f("e.st"))
    if p.returncode:
        return "PROG train --eval failed: " + p.stderr.strip()[-300:]
    with open(f("e.log")) as fh:
        evals = [r.split() for r in fh if r.startswith("eval ")]
    if len(evals) != 2:
        return "%d eval lines in the log, expected one per epoch (2)" % len(evals)
    w = safetensors_np.read(f("e.st"))
    x, y = np.load(f(name + ".x.npy")).astype(np.float64), np.load(f(name + ".labels.npy"))
    h = np.maximum(x @ w["fc1.weight"].T + w["fc1.bias"], 0)
    z = h @ w["fc2.weight"].T + w["fc2.bias"]
    z = z - z.max(1, keepdims=True)
    ref = float(np.mean(np.log(np.exp(z).sum(1)) - z[np.arange(len(y)), y]))
    got = float(evals[-1][6])
    err = abs(got - ref) / abs(ref)
    print("  eval: the last epoch's eval loss %.7f, NumPy's on the saved weights %.7f: relative error %.1e (tolerance %.0e)"
          % (got, ref, err, RTOL))
    bad = err > RTOL
    p = _train(prog, d, name, "--weights", f(name + ".init.safetensors"), "--eval", "x=" + f(name + ".x.npy"))
    print("  eval: --eval without the labels: exit %d: %s" % (p.returncode, p.stderr.strip()))
    if p.returncode != 2 or "--eval has no file for labels" not in p.stderr:
        return "--eval without a target's file: expected exit 2 naming it"
    return "eval loss differs by %.1e relative" % err if bad else None


def seq_reference(w, ids, t, batch, steps, lr):
    """NumPy's SGD on seq_sgd.model: embedding, linear, mean cross_entropy over batch*seq, in float64."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    losses = []
    for s in range(steps):
        b = slice(s * batch, (s + 1) * batch)
        i, y = ids[b].reshape(-1), t[b].reshape(-1)
        e = w["emb.weight"][i]
        z = e @ w["fc.weight"].T + w["fc.bias"]
        z = z - z.max(1, keepdims=True)
        p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
        losses.append(float(np.mean(-np.log(p[np.arange(len(y)), y]))))
        dz = p.copy()
        dz[np.arange(len(y)), y] -= 1
        dz /= len(y)
        g = {"fc.weight": dz.T @ e, "fc.bias": dz.sum(0), "emb.weight": np.zeros_like(w["emb.weight"])}
        np.add.at(g["emb.weight"], i, dz @ w["fc.weight"])
        for k in w:
            w[k] -= lr * g[k]
    return losses, w


def check_seq(modelc, d):
    """A symbolic axis other than the batch (ids: i64[batch, seq], --max-dim seq=8): PROG train
    takes seq from the files (5 here; seq was once held to 1) and trains 3 steps as NumPy's SGD
    does; files that disagree on seq, and a seq above the compiled bound, are refused naming the
    file and the axis."""
    name = "seq_sgd"
    prog = os.path.join(d, name)
    p = subprocess.run([modelc, os.path.join(HERE, name + ".model"), "--train", "--max-batch", "4", "--max-dim", "seq=8",
                        "-o", prog], capture_output=True, text=True)
    if p.returncode:
        return "modelc --train failed: " + (p.stderr or p.stdout).strip()[-400:]
    f = lambda s: os.path.join(d, s)  # noqa: E731
    r = np.random.default_rng(3)
    w = {"emb.weight": r.standard_normal((11, 6)).astype(np.float32),
         "fc.weight": (0.4 * r.standard_normal((5, 6))).astype(np.float32),
         "fc.bias": (0.1 * r.standard_normal(5)).astype(np.float32)}
    safetensors_np.write(f("init.st"), w)
    ids, t = r.integers(0, 11, (12, 5)), r.integers(0, 5, (12, 5))
    np.save(f("ids.npy"), ids)
    np.save(f("t.npy"), t)
    np.save(f("ids3.npy"), ids[:, :3])
    np.save(f("ids9.npy"), r.integers(0, 11, (12, 9)))
    np.save(f("t9.npy"), r.integers(0, 5, (12, 9)))
    env = dict(os.environ, MODELRT_DEVICE=os.environ.get("TRAIN_DEVICE", "cpu"))
    run = lambda *a: subprocess.run([prog, "train", "--weights", f("init.st"), "--batch", "4", "--quiet"] + list(a),  # noqa: E731
                                    capture_output=True, text=True, env=env)
    p = run("--data", "ids=" + f("ids.npy"), "--data", "t=" + f("t.npy"), "--log", f("l.log"), "--save", f("o.st"))
    if p.returncode:
        return "train with seq = 5 failed: " + p.stderr.strip()[-300:]
    with open(f("l.log")) as fh:
        losses = np.array([float(row.split()[5]) for row in fh])
    ref, rw = seq_reference(w, ids, t, 4, 3, 0.5)
    got = safetensors_np.read(f("o.st"))
    bad = []
    err = float(np.max(np.abs(losses - ref) / np.abs(ref))) if losses.shape == (3,) else float("inf")
    print("  seq: seq = 5, 3 steps: losses %s, NumPy's %s: max relative error %.2e (tolerance %.0e)"
          % (" ".join("%.6f" % v for v in losses), " ".join("%.6f" % v for v in ref), err, RTOL))
    if not err <= RTOL:
        bad.append("losses differ by %.2e relative" % err)
    for k in rw:
        e = float(np.max(np.abs(got[k] - rw[k]))) / float(np.max(np.abs(rw[k])))
        print("  seq: final %-10s max |modelc - NumPy| / max|NumPy| = %.2e" % (k, e))
        if not e <= RTOL:
            bad.append("final %s differs by %.2e relative" % (k, e))
    cases = [("files that disagree on seq", ["ids=" + f("ids3.npy"), "t=" + f("t.npy")],
              "gives seq = 5 (axis 1), but --data ids=%s has seq = 3 (axis 1)" % f("ids3.npy")),
             ("seq above --max-dim", ["ids=" + f("ids9.npy"), "t=" + f("t9.npy")],
              "--data ids=%s: i64[12,9] gives seq = 9 (axis 1), more than the compiled maximum 8" % f("ids9.npy"))]
    for what, data, want in cases:
        p = run(*sum([["--data", x] for x in data], []))
        print("  seq: %s: exit %d: %s" % (what, p.returncode, p.stderr.strip()))
        if p.returncode != 1 or want not in p.stderr:
            bad.append("%s: expected exit 1 and '%s'" % (what, want))
    return "; ".join(bad) or None


def check_cli(modelc, d):
    """PROG train's command line, refused before the first step (exit 2 for the usage, 1 for a
    file): each single-valued flag given twice (as the inference CLI refuses it); --save and
    --save-state that are empty, or under a parent that is a file, or a directory (which once
    passed, so the run trained and lost its result at the end). And the program's plain --help
    names the train subcommand."""
    name = "mlp_adamw"
    prog = os.path.join(d, name)
    subprocess.run([modelc, os.path.join(HERE, name + ".model"), "--train", "--max-batch", "8", "-o", prog] + again(),
                   check=True, capture_output=True)
    subprocess.run([sys.executable, os.path.join(HERE, "make_data.py"), d, name], check=True)
    f = lambda s: os.path.join(d, s)  # noqa: E731
    init = f(name + ".init.safetensors")
    open(f("afile"), "w").close()
    bad = []
    twice = [("--batch", "8", "4"), ("--lr", "0.1", "0.2"), ("--weights", init, init), ("--save", f("a.st"), f("b.st")),
             ("--seed", "1", "2"), ("--log", f("a.log"), f("b.log")), ("--device", "cpu", "cpu"), ("--steps", "1", "2"),
             ("--save-state", f("s.st"), f("t.st")), ("--epochs", "1", "3"), ("--resume", f("s.st"), f("s.st"))]
    for flag, v1, v2 in twice:
        extra = [] if flag == "--weights" else ["--weights", init]
        first = [] if flag == "--batch" else [flag, v1]  # _train gives --batch 8
        p = _train(prog, d, name, *(extra + first + [flag, v2]))
        want = "%s given twice ('%s' and '%s'); give it once" % (flag, v1, v2)
        ok = p.returncode == 2 and want in p.stderr
        print("  cli: %s twice: exit %d: %s" % (flag, p.returncode, p.stderr.strip()))
        if not ok:
            bad.append("%s twice: expected exit 2 and '%s'" % (flag, want))
    outs = [(["--save", ""], "cannot write --save: its file name is empty"),
            (["--save", f("w.st"), "--save-state", ""], "cannot write --save-state: its file name is empty"),
            (["--save", f("afile/a.safetensors")], "cannot write --save to %s: its parent is not a directory"
             % f("afile/a.safetensors")),
            (["--save", f("w.st"), "--save-state", f("afile/s.st")], "cannot write --save-state to %s: its parent is "
             "not a directory" % f("afile/s.st")),
            (["--save", d + "/"], "it is a directory")]
    for args, want in outs:
        p = _train(prog, d, name, "--weights", init, "--log", f("o.log"), *args)
        ran = os.path.exists(f("o.log")) and os.path.getsize(f("o.log")) > 0
        print("  cli: %s: exit %d: %s" % (" ".join(repr(a) for a in args), p.returncode, p.stderr.strip()))
        if p.returncode != 1 or want not in p.stderr or ran:
            bad.append("%s: expected exit 1 and '%s' before the first step" % (args, want))
    # --time with one step: a line for it (there was none: the median leaves the cold first step
    # out); --log's samples/s is that step's own (a running average from the start rose with
    # every step, a new user's trial found)
    p = _train(prog, d, name, "--weights", init, "--steps", "1", "--time")
    print("  cli: --steps 1 --time: %s" % p.stdout.strip())
    if p.returncode or "ms for the only step (cold" not in p.stdout:
        bad.append("--steps 1 --time: expected 'time: ... ms for the only step (cold ...'")
    p = _train(prog, d, name, "--weights", init, "--steps", "6", "--log", f("r.log"))
    rates = [float(l.split("samples/s ")[1].split()[0]) for l in open(f("r.log")) if "samples/s" in l] \
        if p.returncode == 0 else []
    print("  cli: --log's samples/s over 6 steps: %s" % rates)
    if len(rates) != 6 or not all(r > 0 for r in rates):
        bad.append("--log: expected 6 lines with a positive samples/s, got %s" % rates)
    # a SIGINT or SIGTERM during a save removes its temporary file and kills the run as the
    # signal does (a new user's trial found PATH.tmp.XXXXXX left behind); the save is held open
    # half-written by MODELRT_TEST_WRITE_PAUSE_MS so the signal lands inside it
    import glob
    import signal
    import time
    for sig in (signal.SIGINT, signal.SIGTERM):
        sd = f("sig%d" % sig)
        os.makedirs(sd)
        cmd = [prog, "train", "--batch", "8", "--quiet", "--weights", init, "--steps", "50", "--save-every", "1",
               "--save", os.path.join(sd, "w.safetensors")]
        for k in make_data.make(name)[1]:
            cmd += ["--data", "%s=%s" % (k, f("%s.%s.npy" % (name, k)))]
        # the signal at its default in the child: a test run in the background of a script
        # (`bash .ci/run &`, nohup) inherits SIGINT ignored, and the program keeps an ignored signal so
        q = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             env=dict(os.environ, MODELRT_DEVICE="cpu", MODELRT_TEST_WRITE_PAUSE_MS="3000"),
                             preexec_fn=lambda s=sig: signal.signal(s, signal.SIG_DFL))
        tmp, t_end = [], time.time() + 60
        while not tmp and q.poll() is None and time.time() < t_end:
            time.sleep(0.05)
            tmp = glob.glob(os.path.join(sd, "w.safetensors.tmp.*"))
        q.send_signal(sig)
        try:
            q.wait(timeout=30)
        except subprocess.TimeoutExpired:
            q.kill()
            q.wait()
        left = glob.glob(os.path.join(sd, "*.tmp.*"))
        print("  cli: %s during a save: temporary %s seen, exit %s, left behind: %s"
              % (signal.Signals(sig).name, bool(tmp), q.returncode, left))
        if not tmp or q.returncode != -sig or left:
            bad.append("%s during a save: expected death by the signal and no temporary file left (saw %s, exit %s, "
                       "left %s)" % (signal.Signals(sig).name, tmp, q.returncode, left))
    p = subprocess.run([prog, "--help"], capture_output=True, text=True)
    want = "%s train --weights INIT.safetensors --data NAME=FILE.npy" % os.path.basename(prog)
    print("  cli: the plain --help names the train subcommand: %s" % (want in p.stdout))
    if p.returncode or want not in p.stdout or "train --help" not in p.stdout:
        bad.append("the plain --help does not name '%s' and 'train --help'" % want)
    return "; ".join(bad) or None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-k", action="append", default=[])
    a = ap.parse_args()
    modelc = os.environ.get("MODELC", os.path.join(ROOT, "build", "bin", "modelc"))
    fails = 0
    for name in MODELS:
        if a.k and not any(k in name for k in a.k):
            continue
        with tempfile.TemporaryDirectory(prefix="train_%s_" % name) as d:
            why = check(name, modelc, d)
        print("PASS: train/%s" % name if why is None else "FAIL: train/%s: %s" % (name, why))
        fails += why is not None
    if not a.k or any(k in "eval" for k in a.k):
        with tempfile.TemporaryDirectory(prefix="train_eval_") as d:
            why = check_eval(modelc, d)
        print("PASS: train/eval" if why is None else "FAIL: train/eval: %s" % why)
        fails += why is not None
    if not a.k or any(k in "cli" for k in a.k):
        with tempfile.TemporaryDirectory(prefix="train_cli_") as d:
            why = check_cli(modelc, d)
        print("PASS: train/cli" if why is None else "FAIL: train/cli: %s" % why)
        fails += why is not None
    if not a.k or any(k in "seq" for k in a.k):
        with tempfile.TemporaryDirectory(prefix="train_seq_") as d:
            why = check_seq(modelc, d)
        print("PASS: train/seq" if why is None else "FAIL: train/seq: %s" % why)
        fails += why is not None
    if not a.k or any(k in "embed" for k in a.k):
        with tempfile.TemporaryDirectory(prefix="train_embed_") as d:
            why = check_embed(modelc, d)
        print("PASS: train/embed" if why is None else "FAIL: train/embed: %s" % why)
        fails += why is not None
    if not a.k or any(k in "embed_packed" for k in a.k):
        with tempfile.TemporaryDirectory(prefix="train_embed_packed_") as d:
            why = check_embed_packed(modelc, d)
        print("PASS: train/embed_packed" if why is None else "FAIL: train/embed_packed: %s" % why)
        fails += why is not None
    if not a.k or any(k in "resume" for k in a.k):
        with tempfile.TemporaryDirectory(prefix="train_resume_") as d:
            why = check_resume(modelc, d)
        print("PASS: train/resume" if why is None else "FAIL: train/resume: %s" % why)
        fails += why is not None
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
