#!/usr/bin/env python3
"""bench/train_bench.py — the training step: modelc's `PROG train` against PyTorch eager and
torch.compile on the CPU, same initial weights, batches, optimizer and thread count.

    make bench [BENCH=quick]                  (runs this after bench/run.py)
    python3 bench/train_bench.py [--quick] [-k NAME ...] [--threads N]

Cases: the digits MLP at batch 64 (examples/digits, Adam), and every tests/train model whose
PyTorch definition tests/train/reference.py holds (the MLPs, and the CNN and the GPT-2 small
config where they exist; not those whose reference loop adds clipping or a schedule), at the
batch their test uses, and GPT-2 small itself (124M params, 2 x 64 tokens a step, random
weights). --quick: digits alone, without torch.compile. Each case:
  1. modelc --train builds the step; the initial weights and data are the examples' / the tests'
     own (NumPy, seeded);
  2. agreement before timing: the losses of the first 5 steps (file order) from modelc's log and
     from PyTorch eager must agree within 1e-4 relative, else the case is not timed;
  3. modelc: `PROG train --time` (the median step time, its first step left out) over about
     1.5 s of steps (0.3 s with --quick); PyTorch eager: zero_grad, forward, loss, backward,
     optimizer step, the median over as long; torch.compile: the forward and loss compiled (its
     compilation not counted), backward and the step as eager.
Threads: modelc --threads N, torch.set_num_threads(N), OMP_NUM_THREADS=N for the child.
Output: a table (ms per step, torch/modelc ratios: > 1 means modelc is faster) and
bench/results/train-cpu[-quick].json. Needs torch (build/bench-venv, which make bench makes);
without it modelc is timed alone and the peers are marked skipped. A timing never fails
anything: exit 1 only when modelc fails or disagrees with PyTorch.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
VENV = os.path.join(ROOT, "build", "bench-venv")
TRAIN = os.path.join(ROOT, "tests", "train")
DIGITS = os.path.join(ROOT, "examples", "digits")
sys.path[:0] = [os.path.join(ROOT, "tools"), TRAIN, DIGITS]

import numpy as np  # noqa: E402
import safetensors_np  # noqa: E402

CHECK_STEPS, RTOL = 5, 1e-4


def log(msg):
    print("train bench: " + msg, file=sys.stderr, flush=True)


def digits_case():
    import make_init
    data = {"x": np.load(os.path.join(DIGITS, "train_x.npy")), "labels": np.load(os.path.join(DIGITS, "train_y.npy"))}

    def loss(F, p, d):
        h = F.relu(F.linear(d["x"], p["fc1.weight"], p["fc1.bias"]))
        return F.cross_entropy(F.linear(h, p["fc2.weight"], p["fc2.bias"]), d["labels"])

    return dict(name="digits_b64", model=os.path.join(DIGITS, "digits.model"), batch=64, weights=make_init.weights(),
                data=data, loss=loss, opt=lambda torch, ps: torch.optim.Adam(ps, lr=1e-2), frozen=set())


# GPT-2 small (124M params: 12 layers, width 768, GPT-2's vocabulary) for the training row at
# the size people train; 2 x 64 tokens a step keeps the full bench's run short.
GPT2_124M = {"n_layer": 12, "n_head": 12, "n_embd": 768, "vocab": 50257, "n_ctx": 1024, "seq": 64}


def gpt2_124m_case(work):
    """examples/gpt2/gen_model.py's text for GPT2_124M with next-token cross_entropy and AdamW
    (lr 1e-4, betas 0.9/0.95, weight decay 0.1) added, GPT-2's init (std 0.02, LayerNorms at 1
    and 0; NumPy, seeded) and 32 windows of random tokens; PyTorch: tests/train/reference.py's
    gpt2_forward at this config, the same AdamW."""
    sys.path.insert(0, os.path.join(ROOT, "examples", "gpt2"))
    import gen_model
    cfg, T = GPT2_124M, GPT2_124M["seq"]
    text = gen_model.generate(cfg, "gpt2_124m")
    text = text.replace("  input  ids: i64[batch, %d]\n" % T,
                        "  input  ids: i64[batch, %d]\n  target next: i64[batch, %d]\n" % (T, T))
    head = "  output logits = linear(hf, wte.weight)"
    i = text.index(head)
    j = text.index("\n", i)
    text = text[:j + 1] + ("  loss l = cross_entropy(reshape(logits, [-1, %d]), reshape(next, [-1]))\n"
                           "  optimizer adamw(lr=0.0001, betas=[0.9, 0.95], eps=1e-8, weight_decay=0.1)\n"
                           % cfg["vocab"]) + text[j + 1:]
    path = os.path.join(work, "gpt2_124m.model")
    with open(path, "w") as f:
        f.write(text)
    rng = np.random.default_rng(124)
    L, C, V = cfg["n_layer"], cfg["n_embd"], cfg["vocab"]

    def nrm(*s):
        return (rng.standard_normal(s, dtype=np.float32) * 0.02).astype(np.float32)

    w = {"wte.weight": nrm(V, C), "wpe.weight": nrm(cfg["n_ctx"], C), "ln_f.weight": np.ones(C, np.float32),
         "ln_f.bias": np.zeros(C, np.float32)}
    for li in range(L):
        q = "h.%d." % li
        w.update({q + "ln_1.weight": np.ones(C, np.float32), q + "ln_1.bias": np.zeros(C, np.float32),
                  q + "attn.c_attn.weight": nrm(C, 3 * C), q + "attn.c_attn.bias": np.zeros(3 * C, np.float32),
                  q + "attn.c_proj.weight": nrm(C, C), q + "attn.c_proj.bias": np.zeros(C, np.float32),
                  q + "ln_2.weight": np.ones(C, np.float32), q + "ln_2.bias": np.zeros(C, np.float32),
                  q + "mlp.c_fc.weight": nrm(C, 4 * C), q + "mlp.c_fc.bias": np.zeros(4 * C, np.float32),
                  q + "mlp.c_proj.weight": nrm(4 * C, C), q + "mlp.c_proj.bias": np.zeros(C, np.float32)})
    stream = rng.integers(0, V, 32 * (T + 1)).astype(np.int64).reshape(32, T + 1)
    data = {"ids": stream[:, :T].copy(), "next": stream[:, 1:].copy()}
    try:
        import reference
    except ImportError:
        reference = None

    def loss(F, p, d):
        logits = reference.gpt2_forward(p, d["ids"], cfg)
        return F.cross_entropy(logits.reshape(-1, V), d["next"].reshape(-1))

    return dict(name="gpt2_124m", model=path, batch=2, weights=w, data=data, frozen=set(), min_steps=6,
                loss=loss if reference else None,
                opt=lambda torch, ps: torch.optim.AdamW(ps, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1))


def test_cases():
    """The tests/train models, with reference.py's PyTorch forward and optimizer."""
    import make_data
    try:
        import reference
    except ImportError:  # no torch: modelc alone
        reference = None
    out = []
    import run as train_run
    for name in train_run.MODELS:
        if reference and name in getattr(reference, "CLIP", {}):
            continue  # its PyTorch loop adds clipping and a schedule: reference.py's own
        w, d = make_data.make(name)
        # what reference.py trains: every float param but the frozen embedding and batch norm's buffers
        buffers = ("emb.weight", "running_mean", "running_var", "num_batches_tracked")
        frozen = {k for k in w if any(k.endswith(b) for b in buffers)}
        out.append(dict(name=name, model=os.path.join(TRAIN, name + ".model"), batch=getattr(train_run, "BATCH", 8),
                        weights=w, data=d, frozen=frozen,
                        loss=(lambda F, p, dd, n=name: reference.forward(n, p, dd)) if reference else None,
                        opt=(lambda torch, ps, n=name: reference.optimizer(n, ps)) if reference else None))
    return out


def batches(data, batch, steps):
    n = next(iter(data.values())).shape[0]
    b0 = 0
    for _ in range(steps):
        if b0 >= n:
            b0 = 0
        yield {k: v[b0:b0 + batch] for k, v in data.items()}
        b0 += batch


def modelc_run(case, work, modelc, threads, steps, check):
    prog = os.path.join(work, case["name"])
    if not os.path.exists(prog):
        p = subprocess.run([modelc, case["model"], "--train", "--max-batch", str(case["batch"]), "-o", prog],
                           capture_output=True, text=True)
        if p.returncode:
            raise RuntimeError("modelc --train: " + p.stderr.strip()[-300:])
        safetensors_np.write(prog + ".init.safetensors", case["weights"])
        for k, v in case["data"].items():
            np.save("%s.%s.npy" % (prog, k), v)
    n = next(iter(case["data"].values())).shape[0]
    per_epoch = (n + case["batch"] - 1) // case["batch"]
    cmd = [prog, "train", "--weights", prog + ".init.safetensors", "--batch", str(case["batch"]), "--quiet",
           "--threads", str(threads), "--steps", str(steps), "--epochs", str((steps + per_epoch - 1) // per_epoch)]
    for k in case["data"]:
        cmd += ["--data", "%s=%s.%s.npy" % (k, prog, k)]
    logf = prog + ".log"
    if os.path.exists(logf):
        os.remove(logf)
    cmd += ["--log", logf] if check else ["--time"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS=str(threads),
                                                                         MODELRT_DEVICE="cpu"))
    if p.returncode:
        raise RuntimeError("PROG train: " + p.stderr.strip()[-300:])
    if check:
        with open(logf) as f:
            return [float(line.split()[5]) for line in f]
    for line in p.stdout.splitlines():
        if line.startswith("time: "):
            return float(line.split()[1])
    raise RuntimeError("PROG train --time printed no time: " + p.stdout[-200:])


def torch_steps(case, torch, compiled, steps, target_s=None):
    """PyTorch's training steps in file order: (losses, median ms per step after 3 warm-ups)."""
    import torch.nn.functional as F
    p = {k: torch.tensor(v, requires_grad=k not in case["frozen"]) for k, v in case["weights"].items()}
    opt = case["opt"](torch, [t for k, t in p.items() if t.requires_grad])
    fn = case["loss"]
    if compiled:
        fn = torch.compile(fn)
    losses, times = [], []
    t_end = None
    for i, b in enumerate(batches(case["data"], case["batch"], steps)):
        d = {k: torch.tensor(v) for k, v in b.items()}
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = fn(F, p, d)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
        if target_s and i == 3:
            t_end = time.perf_counter() + target_s
        if t_end and time.perf_counter() > t_end and len(times) > 8:
            break
    return losses, statistics.median(times[3:]) * 1e3 if len(times) > 3 else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("-k", action="append", default=[])
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--no-venv", action="store_true", help="do not re-run with build/bench-venv's Python")
    a = ap.parse_args()
    vpy = os.path.join(VENV, "bin", "python")
    if not a.no_venv and os.path.exists(vpy) and os.path.realpath(sys.prefix) != os.path.realpath(VENV):
        os.execv(vpy, [vpy] + sys.argv + ["--no-venv"])
    try:
        import torch
        torch.set_num_threads(a.threads)
        why = None
    except ImportError as e:
        torch, why = None, "no torch (%s): make bench installs it into build/bench-venv" % e
    modelc = os.environ.get("MODELC", os.path.join(ROOT, "build", "bin", "modelc"))
    target = 0.3 if a.quick else 1.5
    rows, failed = [], 0
    work = os.path.join(ROOT, "build", "bench", "train")
    os.makedirs(work, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        cases = [digits_case()] + ([] if a.quick else test_cases() + [gpt2_124m_case(tmp)])
        for c in cases:
            if a.k and not any(k in c["name"] for k in a.k):
                continue
            r = {"case": c["name"], "batch": c["batch"]}
            try:
                got = modelc_run(c, tmp, modelc, a.threads, CHECK_STEPS, True)
                if torch and c["loss"]:
                    ref, _ = torch_steps(c, torch, False, CHECK_STEPS)
                    err = max(abs(x - y) / max(abs(y), 1e-30) for x, y in zip(got, ref))
                    r["max_rel_loss_diff"] = err
                    if err > RTOL:
                        raise RuntimeError("losses differ from PyTorch's by %.2e relative (modelc %s, torch %s)" %
                                           (err, got, ref))
                # steps for about target seconds, from a first measurement of 20 steps
                lo = c.get("min_steps", 20)
                ms = modelc_run(c, tmp, modelc, a.threads, lo + 1, False)
                steps = int(min(max(target / (ms / 1e3), lo), 20000)) + 1
                r["modelc_ms"] = modelc_run(c, tmp, modelc, a.threads, steps, False)
            except RuntimeError as e:
                r["error"] = str(e)
                failed = 1
                log("%s: FAIL: %s" % (c["name"], e))
                rows.append(r)
                continue
            for key, compiled in (("torch_ms", False), ("compile_ms", True)):
                if not torch or not c["loss"]:
                    r[key + "_skipped"] = why or "no PyTorch definition"
                    continue
                if compiled and a.quick:
                    r[key + "_skipped"] = "--quick (its compilation alone takes longer than the quick bench)"
                    continue
                try:
                    r[key] = torch_steps(c, torch, compiled, 100000, target)[1]
                except Exception as e:  # torch.compile without a working C++ toolchain, say
                    r[key + "_skipped"] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:120])
            log("%s: modelc %.3f ms per step" % (c["name"], r["modelc_ms"]))
            rows.append(r)
    print("\ntraining step, CPU, %d threads (ms per step, median; ratio = peer / modelc, > 1: modelc faster)" % a.threads)
    print("%-12s %5s %10s %10s %7s %10s %7s %9s" % ("case", "batch", "modelc", "torch", "ratio", "compile", "ratio",
                                                    "loss diff"))
    for r in rows:
        if "error" in r:
            print("%-12s %5d  FAILED: %s" % (r["case"], r["batch"], r["error"][:100]))
            continue
        m = r["modelc_ms"]
        cells = []
        for key in ("torch_ms", "compile_ms"):
            v = r.get(key)
            cells += ["%10.3f" % v, "%7.2f" % (v / m)] if v else ["%10s" % "skipped", "%7s" % "-"]
        print("%-12s %5d %10.3f %s %9s" % (r["case"], r["batch"], m, " ".join(cells),
                                           "%.1e" % r["max_rel_loss_diff"] if "max_rel_loss_diff" in r else "-"))
    for r in rows:
        for key in ("torch_ms_skipped", "compile_ms_skipped"):
            if key in r:
                print("  %s: %s skipped: %s" % (r["case"], key.split("_")[0], r[key]))
    out = os.path.join(HERE, "results", "train-cpu%s.json" % ("-quick" if a.quick else ""))
    doc = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "threads": a.threads, "machine": platform.processor() or
           platform.machine(), "torch": getattr(torch, "__version__", None), "loadavg": os.getloadavg(), "rows": rows}
    tmpf = out + ".tmp"
    with open(tmpf, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmpf, out)
    print("written: %s" % os.path.relpath(out, ROOT))
    return failed


if __name__ == "__main__":
    sys.exit(main())
