#!/usr/bin/env python3
"""examples/import/gen.py — real PyTorch models through torch.onnx.export, onnx2model and modelc.

    /work/venv-torch/bin/python examples/import/gen.py [NAME ...] [--write] [--modelc build/bin/modelc]

Needs torch, torchvision, transformers, onnx and onnxscript (not installed by tools/setup.sh).
For each model: build it (torchvision or a small Hugging Face config, random init), replace every
state_dict float tensor with make_weights.weight(name, shape, seed) (NumPy, seeded; running
statistics random too, so batch norms are not the identity), export it to ONNX with
torch.onnx.export (unoptimized, so the initializers are the state_dict), import it with
tools/onnx2model.py, compile with modelc, run on a seeded input and compare with PyTorch's
output: max |modelc - torch| / max |torch| <= 1e-4.

The transformers models (BERT, GPT-2, LLaMA) are exported with dynamic batch and sequence axes
(traced at ids [2, 8]; `input_ids: i64[batch, seq]`, --max-dim seq=64) and the one compiled
program is compared with PyTorch at several shapes (SEQ_CASES: sequence lengths 8, 5 and 13).

--write stores what `make -C examples/import test` checks without torch: NAME.model, the
importer's folded constants (NAME.consts.safetensors, small), input_*.npy and expected_*.npy
(and caseN_input_*.npy, caseN_expected_*.npy for each further shape); the weights are
regenerated there by make_weights.py.
"""
import argparse
import os
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, HERE)

try:
    import torch
except ImportError:
    sys.exit("gen.py: needs PyTorch (torch, torchvision, transformers, onnx, onnxscript); run it with a Python that has them")

import make_weights  # noqa: E402
import onnx2model  # noqa: E402
import safetensors_np  # noqa: E402


def tv(name, **kw):
    def build():
        import torchvision
        return getattr(torchvision.models, name)(**kw)
    return build


def hf(kind):
    def build():
        import transformers as T
        if kind == "bert":
            cfg = T.BertConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                               intermediate_size=128, max_position_embeddings=64, attn_implementation="eager")
            return T.BertModel(cfg, add_pooling_layer=False)
        if kind == "gpt2":
            cfg = T.GPT2Config(vocab_size=512, n_embd=64, n_layer=2, n_head=4, n_positions=64,
                               tie_word_embeddings=False, attn_implementation="eager")
            return T.GPT2LMHeadModel(cfg)
        if kind == "llama":
            cfg = T.LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                tie_word_embeddings=False, attn_implementation="eager")
            return T.LlamaForCausalLM(cfg)
    return build


class HFWrap(torch.nn.Module):
    """The logits (or last hidden state) of a transformers model called with input_ids."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids):
        out = self.m(input_ids=input_ids, use_cache=False, return_dict=True)
        return out.logits if hasattr(out, "logits") else out.last_hidden_state


# name: (builder, input name, input maker, wrap for HF)
IMG = 64
MODELS = {
    "mobilenet_v3_small": (tv("mobilenet_v3_small"), "x", "image", False),
    "efficientnet_b0": (tv("efficientnet_b0"), "x", "image", False),
    "resnet50": (tv("resnet50"), "x", "image", False),
    "convnext_tiny": (tv("convnext_tiny"), "x", "image", False),
    "vit_b_16": (tv("vit_b_16", image_size=IMG), "x", "image", False),
    "bert": (hf("bert"), "input_ids", "ids", True),
    "gpt2": (hf("gpt2"), "input_ids", "ids", True),
    "llama": (hf("llama"), "input_ids", "ids", True),
}


# the transformers models: symbolic batch and seq; the shapes the compiled program is checked at
SEQ_MAX = 64
SEQ_CASES = [(2, 8), (1, 5), (3, 13)]


def make_input(kind, seed=0, shape=None):
    rng = np.random.default_rng(seed)
    if kind == "image":
        return rng.standard_normal((1, 3, IMG, IMG)).astype(np.float32)
    return rng.integers(0, 512, shape or (1, 8)).astype(np.int64)


def seeded(model, seed=0):
    sd = model.state_dict()
    new = {}
    for k, v in sd.items():
        if v.dtype.is_floating_point:
            new[k] = torch.from_numpy(make_weights.weight(k, list(v.shape), seed))
        else:
            new[k] = v
    model.load_state_dict(new)
    return model


def run(name, args):
    build, iname, kind, wrap = MODELS[name]
    work = os.path.join(ROOT, "build", "import", name)
    os.makedirs(work, exist_ok=True)
    torch.manual_seed(0)
    m = build().eval()
    if wrap:
        m = HFWrap(m).eval()
    m = seeded(m)
    dynamic = kind == "ids"
    # the shapes checked: one for the images; for ids (batch and seq symbolic) several, on
    # one compiled program (seeds 0, 1, 2 ...)
    xs = [make_input(kind, k, shape) for k, shape in enumerate(SEQ_CASES if dynamic else [None])]
    refs = []
    for x in xs:
        with torch.no_grad():
            refs.append(m(torch.from_numpy(x)).float().numpy())
    onnx_path = os.path.join(work, name + ".onnx")
    t = time.time()
    kw = {}
    if dynamic:
        kw["dynamic_shapes"] = ({0: torch.export.Dim("batch", min=1), 1: torch.export.Dim("seq", min=1, max=SEQ_MAX)},)
    with torch.no_grad():
        torch.onnx.export(m, (torch.from_numpy(xs[0]),), onnx_path, input_names=[iname], output_names=["y"],
                          dynamo=True, optimize=False, external_data=False, verbose=False, **kw)
    model = onnx2model.load(onnx_path)
    conv = onnx2model.convert(model, name, {"seq": SEQ_MAX} if dynamic else None)
    base = os.path.join(work, name)
    onnx2model.write_outputs(conv, base, onnx_path)
    # the weights the test regenerates: state_dict tensors from make_weights, folded constants kept
    sd_names = set(m.state_dict().keys())
    consts = {k: v for k, v in conv.params.items() if k not in sd_names or conv.params[k].dtype != np.float32}
    for k, v in conv.params.items():
        if k in sd_names and v.dtype == np.float32:
            w = make_weights.weight(k, list(v.shape), 0)
            if not np.array_equal(w, v):
                raise SystemExit("gen.py: %s: param %s in the ONNX file differs from the seeded state_dict" % (name, k))
    safetensors_np.write(base + ".consts.safetensors", consts)
    exe = base
    cargs = conv.compile_args()[4:]           # the bounds: --max-dim seq=64
    p = subprocess.run([args.modelc, base + ".model", "-o", exe, "--no-cuda"] + cargs, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit("gen.py: %s: modelc failed: %s" % (name, p.stderr.strip()))
    mname = conv.inputs[0][1]
    oname = conv.outputs[0][1]
    ok, rels = True, []
    for x, ref in zip(xs, refs):
        np.save(base + "_input.npy", x)
        r = subprocess.run([exe, "--weights", base + ".safetensors", "--input", "%s=%s_input.npy" % (mname, base),
                            "--output", "%s=%s_out.npy" % (oname, base), "--device", "cpu"], capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit("gen.py: %s: run failed at %s: %s" % (name, list(x.shape), r.stderr.strip()))
        got = np.load(base + "_out.npy")
        rel = float(np.abs(got.astype(np.float64) - ref).max() / np.abs(ref).max())
        ok &= rel <= 1e-4 and got.shape == ref.shape
        rels.append("%.2e at %s" % (rel, list(x.shape)))
    status = "PASS" if ok else "FAIL"
    print("%s: %s: max relative error %s (%s, %d params, %d consts, %.0f s)" % (
        status, name, ", ".join(rels), " ".join(cargs) or "static shapes", len(conv.params), len(consts),
        time.time() - t))
    if args.write:
        d = os.path.join(HERE, name)
        os.makedirs(d, exist_ok=True)
        for f in os.listdir(d):
            if f.endswith(".npy"):
                os.unlink(os.path.join(d, f))
        shutil.copy(base + ".model", os.path.join(d, name + ".model"))
        if consts:
            shutil.copy(base + ".consts.safetensors", os.path.join(d, name + ".consts.safetensors"))
        for k, (x, ref) in enumerate(zip(xs, refs)):
            pre = "case%d_" % k if k else ""
            np.save(os.path.join(d, "%sinput_%s.npy" % (pre, mname)), x)
            np.save(os.path.join(d, "%sexpected_%s.npy" % (pre, oname)), ref.astype(np.float32))
    return status == "PASS"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="*", default=list(MODELS))
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--modelc", default=os.path.join(ROOT, "build", "bin", "modelc"))
    args = ap.parse_args()
    ok = True
    for n in args.names:
        try:
            ok &= run(n, args)
        except (onnx2model.OnnxImportError, SystemExit) as e:
            print("FAIL: %s: %s" % (n, e))
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
