#!/usr/bin/env python3
"""tools/torch2model.py — a PyTorch nn.Module to a .model file and its weights, through ONNX.

    python3 tools/torch2model.py torchvision.models:resnet18 --input x=f32[batch,3,224,224] -o r18
    build/bin/modelc r18.model -o r18

MODULE is `package.module:callable` (a class or a function that returns an nn.Module, called with
--kwargs, a JSON object), a TorchScript file (.pt, torch.jit.load) or an ExportedProgram file
(.pt2, torch.export.load). Each --input is NAME=DTYPE[DIMS]; a dimension that is a name is
symbolic (exported as a dynamic axis; the first is the batch), traced at --example-dim NAME=N
(default 2) and bounded by --max-dim NAME=N for every symbolic name but the first.

The module is put in eval mode and exported with torch.onnx.export (the torch.export-based
exporter; --legacy uses the TorchScript one), then imported by tools/onnx2model.py: OUT.model and
OUT.safetensors. --keep-onnx keeps OUT.onnx; --check also writes OUT.in.NAME.npy random inputs
(--seed) and OUT.ref.NAME.npy, PyTorch's outputs on them, for comparing with the compiled model.

Needs torch (and onnx; onnxscript for the default exporter). Without them it says so and exits 1.
"""
import argparse
import importlib
import json
import os
import re
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

DT = {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "i32": "int32", "i64": "int64", "bool": "bool"}


class Fail(Exception):
    pass


def parse_input(spec):
    m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)=(f32|f16|bf16|i32|i64|bool)\[([^\]]*)\]$", spec.replace(" ", ""))
    if not m:
        raise Fail("--input %s: expected NAME=DTYPE[d0,d1,...], e.g. x=f32[batch,3,224,224]" % spec)
    dims = []
    for d in m.group(3).split(",") if m.group(3) else []:
        if re.match(r"^\d+$", d):
            if int(d) < 1:
                raise Fail("--input %s: dimension %s" % (spec, d))
            dims.append(int(d))
        elif re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", d):
            dims.append(d)
        else:
            raise Fail("--input %s: dimension '%s' is neither a size nor a name" % (spec, d))
    return m.group(1), m.group(2), dims


def load_module(torch, spec, kwargs):
    if os.path.isfile(spec):
        if spec.endswith(".pt2"):
            return torch.export.load(spec)
        return torch.jit.load(spec, map_location="cpu")
    if ":" not in spec:
        raise Fail("%s: expected package.module:callable or a .pt/.pt2 file" % spec)
    modname, attr = spec.split(":", 1)
    try:
        mod = importlib.import_module(modname)
    except ImportError as e:
        raise Fail("cannot import %s: %s" % (modname, e))
    obj = mod
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise Fail("%s has no attribute %s" % (modname, attr))
        obj = getattr(obj, part)
    m = obj(**kwargs) if callable(obj) else obj
    if not isinstance(m, torch.nn.Module):
        raise Fail("%s(...) gave a %s, not an nn.Module" % (spec, type(m).__name__))
    return m


def make_example(torch, dtype, dims, example):
    shape = [d if isinstance(d, int) else example.get(d, 2) for d in dims]
    g = torch.Generator().manual_seed(0)
    if dtype in ("i32", "i64"):
        return torch.randint(0, 10, shape, generator=g, dtype=getattr(torch, DT[dtype]))
    if dtype == "bool":
        return torch.randint(0, 2, shape, generator=g).bool()
    return torch.randn(shape, generator=g).to(getattr(torch, DT[dtype]))


def export(torch, model, inputs, examples, path, legacy, opset):
    names = [n for n, _, _ in inputs]
    if legacy:
        dyn = {}
        for n, _, dims in inputs:
            ax = {i: d for i, d in enumerate(dims) if isinstance(d, str)}
            if ax:
                dyn[n] = ax
        torch.onnx.export(model, tuple(examples), path, input_names=names, dynamic_axes=dyn or None,
                          opset_version=opset or 17, dynamo=False)
        return
    dims = {}
    shapes = []
    for n, _, ds in inputs:
        s = {}
        for i, d in enumerate(ds):
            if isinstance(d, str):
                if d not in dims:
                    dims[d] = torch.export.Dim(d, min=1)
                s[i] = dims[d]
        shapes.append(s or None)
    kw = dict(input_names=names, dynamo=True, external_data=False, verbose=False)
    if dims:
        kw["dynamic_shapes"] = tuple(shapes)
    if opset:
        kw["opset_version"] = opset
    torch.onnx.export(model, tuple(examples), path, **kw)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="torch2model.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Example: python3 tools/torch2model.py torchvision.models:resnet18 "
                                        "--input x=f32[batch,3,224,224] -o r18")
    ap.add_argument("module", help="package.module:callable, or a TorchScript .pt / ExportedProgram .pt2 file")
    ap.add_argument("--input", action="append", required=True, metavar="NAME=DTYPE[DIMS]")
    ap.add_argument("-o", "--output", required=True, help="OUT: writes OUT.model and OUT.safetensors")
    ap.add_argument("--kwargs", default="{}", help="JSON keyword arguments for the callable")
    ap.add_argument("--example-dim", action="append", default=[], metavar="NAME=N",
                    help="the size a symbolic dimension is traced at (default 2)")
    ap.add_argument("--max-dim", action="append", default=[], metavar="NAME=N")
    ap.add_argument("--max-batch", type=int)
    ap.add_argument("--seed", type=int, default=0, help="torch.manual_seed before the module is built")
    ap.add_argument("--opset", type=int, help="ONNX opset (default: the exporter's)")
    ap.add_argument("--legacy", action="store_true", help="the TorchScript-based exporter")
    ap.add_argument("--keep-onnx", action="store_true", help="keep OUT.onnx")
    ap.add_argument("--check", action="store_true", help="write OUT.in.NAME.npy and PyTorch's OUT.ref.NAME.npy")
    args = ap.parse_args(argv)
    try:
        try:
            import torch
        except ImportError:
            raise Fail("PyTorch is not installed in %s; run this script with a Python that has torch "
                       "(pip install torch onnx onnxscript)" % sys.executable)
        try:
            import onnx  # noqa: F401
        except ImportError:
            raise Fail("the 'onnx' package is not installed in %s (pip install onnx onnxscript)" % sys.executable)
        import onnx2model
        inputs = [parse_input(s) for s in args.input]
        example = onnx2model.parse_dims(args.example_dim)
        try:
            kwargs = json.loads(args.kwargs)
        except ValueError as e:
            raise Fail("--kwargs: %s" % e)
        torch.manual_seed(args.seed)
        model = load_module(torch, args.module, kwargs)
        if hasattr(model, "eval"):
            model.eval()
        examples = [make_example(torch, dt, dims, example) for _, dt, dims in inputs]
        d = os.path.dirname(os.path.abspath(args.output))
        os.makedirs(d, exist_ok=True)
        fd, onnx_path = tempfile.mkstemp(dir=d, prefix=".torch2model.", suffix=".onnx")
        os.close(fd)
        try:
            with torch.no_grad():
                try:
                    export(torch, model, inputs, examples, onnx_path, args.legacy, args.opset)
                except Exception as e:  # noqa: BLE001
                    raise Fail("torch.onnx.export failed: %s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else ""))
            m = onnx2model.load(onnx_path)
            name = os.path.basename(args.output)
            conv = onnx2model.convert(m, name, onnx2model.parse_dims(args.max_dim), args.max_batch)
            onnx2model.write_outputs(conv, args.output, args.output + ".onnx")
            if args.keep_onnx:
                os.replace(onnx_path, args.output + ".onnx")
        finally:
            if os.path.exists(onnx_path):
                os.unlink(onnx_path)
        if args.check:
            import numpy as np
            with torch.no_grad():
                out = model(*examples)
            outs = out if isinstance(out, (list, tuple)) else [out]
            for (n, _, _), x in zip(inputs, examples):
                np.save("%s.in.%s.npy" % (args.output, n), x.numpy())
            for (on, mn, _, _), y in zip(conv.outputs, outs):
                np.save("%s.ref.%s.npy" % (args.output, mn), y.detach().float().numpy())
    except (Fail, onnx2model.OnnxImportError if "onnx2model" in sys.modules else Fail) as e:
        sys.stderr.write("torch2model: error: %s\n" % e)
        return 1
    for kind, a, b in conv.renames:
        print("%s %s -> %s" % (kind, a, b))
    print("wrote %s.model and %s.safetensors (%d params)" % (args.output, args.output, len(conv.params)))
    args_c = conv.compile_args()
    args_c[1] = args.output + ".model"
    args_c[3] = args.output
    print("compile: " + " ".join(args_c))
    return 0


if __name__ == "__main__":
    sys.exit(main())
