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
exporter, unoptimized so that BatchNorm, Linear and LayerNorm weights stay the state_dict's;
--legacy uses the TorchScript one, without constant folding, and a TorchScript .pt file always
does), then imported by tools/onnx2model.py: OUT.model and OUT.safetensors, whose keys are the
module's state_dict keys. --keep-onnx keeps OUT.onnx; --check also writes OUT.in.NAME.npy random
inputs (--seed) and OUT.ref.NAME.npy, PyTorch's outputs on them (a ModelOutput, dict or tuple
gives its tensors in order, as the exporter does), for comparing with the compiled model.
onnx2model's --keep-unused-inputs, --widen-ints, --no-blocks, --name and -q are passed on.
Every file is written under a temporary name and renamed once all are written: on an error
nothing is left behind.

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
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

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


def exc_text(e, lines=12):
    """An exception's message without ANSI colour codes, at most `lines` non-empty lines."""
    t = [l.rstrip() for l in ANSI.sub("", str(e)).splitlines() if l.strip()]
    if len(t) > lines:
        t = t[:lines] + ["... (%d more lines)" % (len(t) - lines)]
    return "%s: %s" % (type(e).__name__, "\n  ".join(t)) if t else type(e).__name__


def load_module(torch, spec, kwargs):
    """(the module, whether it is TorchScript)."""
    if os.path.isfile(spec):
        try:
            if spec.endswith(".pt2"):
                return torch.export.load(spec), False
            return torch.jit.load(spec, map_location="cpu"), True
        except Exception as e:  # noqa: BLE001
            raise Fail("cannot load %s (%s): %s" % (
                spec, "an ExportedProgram .pt2" if spec.endswith(".pt2") else "a TorchScript .pt", exc_text(e)))
    if ":" not in spec:
        raise Fail("%s: expected package.module:callable or a .pt/.pt2 file" % spec)
    modname, attr = spec.split(":", 1)
    # as `python -m` does: the user's module may be in the current directory
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(1, os.getcwd())
    try:
        mod = importlib.import_module(modname)
    except ImportError as e:
        raise Fail("cannot import %s: %s" % (modname, e))
    except Exception as e:  # noqa: BLE001
        raise Fail("importing %s failed: %s" % (modname, exc_text(e)))
    obj = mod
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise Fail("%s has no attribute %s" % (modname, attr))
        obj = getattr(obj, part)
    if isinstance(obj, torch.nn.Module):
        return obj, False
    if not callable(obj):
        raise Fail("%s is a %s: expected an nn.Module class or a function that returns an nn.Module"
                   % (spec, type(obj).__name__))
    what = "an nn.Module class" if isinstance(obj, type) else "a function"
    try:
        m = obj(**kwargs)
    except Exception as e:  # noqa: BLE001
        raise Fail("%s(%s) failed: %s\n  %s must be an nn.Module class or a function that returns an nn.Module, "
                   "called with --kwargs (a JSON object: --kwargs '{\"in_features\": 4, ...}')"
                   % (spec, ", ".join("%s=%r" % kv for kv in kwargs.items()), exc_text(e, 3), spec))
    if not isinstance(m, torch.nn.Module):
        raise Fail("%s(...) gave a %s, not an nn.Module (%s is %s; it must be an nn.Module class or a function "
                   "that returns an nn.Module)" % (spec, type(m).__name__, spec, what))
    return m, False


def output_tensors(torch, out):
    """The module's outputs as torch.onnx.export takes them: a tensor, or the tensors of a
    tuple, list, dict or ModelOutput (any pytree torch knows), flattened in order."""
    from torch.utils import _pytree
    leaves = _pytree.tree_leaves(out)
    bad = [type(x).__name__ for x in leaves if x is not None and not isinstance(x, torch.Tensor)]
    if bad:
        raise Fail("--check: the module's output holds %s, not only tensors" % ", ".join(sorted(set(bad))))
    return [x for x in leaves if isinstance(x, torch.Tensor)]


def state_dict_extras(torch, model, conv, quiet):
    """The state_dict's entries the graph does not read (BatchNorm's num_batches_tracked, an
    unused buffer) become params declared in the .model and written to OUT.safetensors, so that
    the module's own state_dict, saved with safetensors, loads as it is (the runtime refuses a
    tensor the model does not declare). A param the exporter changed is a warning."""
    import numpy as np
    import onnx2model
    try:
        sd = model.state_dict() if callable(getattr(model, "state_dict", None)) else dict(model.state_dict)
    except Exception:  # noqa: BLE001
        return
    renamed = {a for kind, a, b in conv.renames if kind == "param"}
    extra = []
    for k, v in sd.items():
        if not isinstance(v, torch.Tensor) or k in renamed:
            continue
        a = v.detach().cpu()
        dt = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.int32: "i32",
              torch.int64: "i64", torch.bool: "bool"}.get(a.dtype)
        if k in conv.params:
            w = a.view(torch.int16).numpy().view(np.uint16) if a.dtype == torch.bfloat16 else a.numpy()
            if w.shape != conv.params[k].shape or not np.array_equal(w, conv.params[k]):
                sys.stderr.write("torch2model: warning: param %s is not the state_dict's %s (the exporter changed "
                                 "it): the module's state_dict will not load as this model's weights\n" % (k, k))
            continue
        if dt is None or a.numel() == 0 or onnx2model.sanitize(k) != k:
            if not quiet:
                sys.stderr.write("torch2model: warning: state_dict entry %s (%s%s) is not read by the graph and "
                                 "cannot be declared; drop it before loading a state_dict\n"
                                 % (k, a.dtype, list(a.shape)))
            continue
        conv.params[k] = a.view(torch.int16).numpy().view(np.uint16) if dt == "bf16" else np.array(a.numpy(), order="C")
        extra.append("  param %s: %s%s" % (k, dt, onnx2model.shape_str(a.shape)))
    if extra:
        conv.decls.append("  # in the state_dict but not read by the computation (declared so that it loads)")
        conv.decls.extend(extra)


def make_example(torch, dtype, dims, example):
    shape = [d if isinstance(d, int) else example.get(d, 2) for d in dims]
    g = torch.Generator().manual_seed(0)
    if dtype in ("i32", "i64"):
        return torch.randint(0, 10, shape, generator=g, dtype=getattr(torch, DT[dtype]))
    if dtype == "bool":
        return torch.randint(0, 2, shape, generator=g).bool()
    return torch.randn(shape, generator=g).to(getattr(torch, DT[dtype]))


def export(torch, model, inputs, examples, path, legacy, opset, bounds):
    names = [n for n, _, _ in inputs]
    if legacy:
        dyn = {}
        for n, _, dims in inputs:
            ax = {i: d for i, d in enumerate(dims) if isinstance(d, str)}
            if ax:
                dyn[n] = ax
        # no constant folding: in eval mode it folds BatchNorm into the conv weights
        torch.onnx.export(model, tuple(examples), path, input_names=names, dynamic_axes=dyn or None,
                          opset_version=opset or 17, dynamo=False, do_constant_folding=False)
        return
    dims = {}
    shapes = []
    for n, _, ds in inputs:
        s = {}
        for i, d in enumerate(ds):
            if isinstance(d, str):
                if d not in dims:
                    dims[d] = torch.export.Dim(d, min=1, max=bounds[d]) if bounds.get(d, 0) > 1 else torch.export.Dim(d, min=1)
                s[i] = dims[d]
        shapes.append(s or None)
    # unoptimized (as examples/import/gen.py): the optimizer folds BatchNorm into the conv
    # weights under the conv's name, renames Linear weights and shares LayerNorm ones, so the
    # initializers would no longer be the state_dict
    kw = dict(input_names=names, dynamo=True, optimize=False, external_data=False, verbose=False)
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
    ap.add_argument("--kwargs", default="{}", help="JSON object: keyword arguments for the callable")
    ap.add_argument("--example-dim", action="append", default=[], metavar="NAME=N",
                    help="the size a symbolic dimension is traced at (default 2)")
    ap.add_argument("--max-dim", action="append", default=[], metavar="NAME=N")
    ap.add_argument("--max-batch", type=int)
    ap.add_argument("--seed", type=int, default=0, help="torch.manual_seed before the module is built")
    ap.add_argument("--opset", type=int, help="ONNX opset (default: the exporter's)")
    ap.add_argument("--legacy", action="store_true", help="the TorchScript-based exporter (always for a .pt file)")
    ap.add_argument("--keep-onnx", action="store_true", help="keep OUT.onnx")
    ap.add_argument("--check", action="store_true", help="write OUT.in.NAME.npy and PyTorch's OUT.ref.NAME.npy")
    g = ap.add_argument_group("passed on to onnx2model.py")
    g.add_argument("--name", help="the model's name in the .model file (default: OUT's base name)")
    g.add_argument("--keep-unused-inputs", action="store_true",
                   help="keep graph inputs no output uses (a warning) instead of refusing the model")
    g.add_argument("--widen-ints", action="store_true",
                   help="carry int8/uint8/int16/uint16/int4/uint4/int2/uint2 in i32 and uint32 in i64 (see onnx2model.py)")
    g.add_argument("--no-blocks", action="store_true", help="write straight-line code only")
    g.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
    args = ap.parse_args(argv)
    import onnx2model
    try:
        # the arguments first: nothing is imported, built or written for a bad one
        inputs = [parse_input(s) for s in args.input]
        example = onnx2model.parse_dims(args.example_dim)
        bounds = onnx2model.parse_dims(args.max_dim)
        if args.max_batch is not None and args.max_batch < 1:
            raise Fail("--max-batch %d: the bound must be at least 1" % args.max_batch)
        try:
            kwargs = json.loads(args.kwargs)
        except ValueError as e:
            raise Fail("--kwargs: not JSON: %s" % e)
        if not isinstance(kwargs, dict):
            raise Fail("--kwargs %s: expected a JSON object of keyword arguments, e.g. --kwargs '{\"num_classes\": 10}'"
                       % args.kwargs)
        onnx2model.check_output(args.output)
        try:
            import torch
        except ImportError:
            raise Fail("PyTorch is not installed in %s; run this script with a Python that has torch "
                       "(pip install torch onnx onnxscript)" % sys.executable)
        try:
            import onnx  # noqa: F401
        except ImportError:
            raise Fail("the 'onnx' package is not installed in %s (pip install onnx onnxscript)" % sys.executable)
        torch.manual_seed(args.seed)
        model, scripted = load_module(torch, args.module, kwargs)
        legacy = args.legacy
        if scripted and not legacy:
            legacy = True
            if not args.quiet:
                print("%s is a TorchScript module: exported with the TorchScript-based exporter (--legacy)" % args.module)
        if hasattr(model, "eval"):
            model.eval()
        examples = [make_example(torch, dt, dims, example) for _, dt, dims in inputs]
        d = os.path.dirname(os.path.abspath(args.output))
        fd, onnx_path = tempfile.mkstemp(dir=d, prefix=".torch2model.", suffix=".onnx")
        os.close(fd)
        try:
            with torch.no_grad():
                try:
                    export(torch, model, inputs, examples, onnx_path, legacy, args.opset, bounds)
                except Exception as e:  # noqa: BLE001
                    raise Fail("torch.onnx.export failed: %s%s" % (
                        exc_text(e), "" if legacy else "\n  (--legacy tries the TorchScript-based exporter)"))
            m = onnx2model.load(onnx_path)
            name = args.name or os.path.basename(args.output)
            conv = onnx2model.convert(m, name, bounds, args.max_batch, args.keep_unused_inputs,
                                      args.widen_ints, not args.no_blocks)
            state_dict_extras(torch, model, conv, args.quiet)
            extra = []
            if args.check:
                import numpy as np
                with torch.no_grad():
                    try:
                        run = model.module() if isinstance(model, torch.export.ExportedProgram) else model
                        outs = output_tensors(torch, run(*examples))
                    except Fail:
                        raise
                    except Exception as e:  # noqa: BLE001
                        raise Fail("--check: running the module failed: %s" % exc_text(e))
                if len(outs) != len(conv.outputs):
                    raise Fail("--check: the module gives %d tensors, the exported graph %d outputs"
                               % (len(outs), len(conv.outputs)))

                def npy(a):
                    def w(tmp):
                        with open(tmp, "wb") as f:  # a file: np.save would add .npy to a name
                            np.save(f, a)
                    return w
                for (n, _, _), x in zip(inputs, examples):
                    extra.append(("%s.in.%s.npy" % (args.output, n), npy(x.numpy())))
                for out_, y in zip(conv.outputs, outs):
                    extra.append(("%s.ref.%s.npy" % (args.output, out_[1]), npy(y.detach().float().numpy())))
            if args.keep_onnx:
                blob = open(onnx_path, "rb").read()

                def onnx_w(tmp):
                    with open(tmp, "wb") as f:
                        f.write(blob)
                extra.append((args.output + ".onnx", onnx_w))
            try:
                onnx2model.write_outputs(conv, args.output, args.output + ".onnx", extra)
            except OSError as e:
                raise Fail("writing %s.*: %s" % (args.output, e))
        finally:
            if os.path.exists(onnx_path):
                os.unlink(onnx_path)
    except (Fail, onnx2model.OnnxImportError) as e:
        sys.stderr.write("torch2model: error: %s\n" % e)
        return 1
    if not args.quiet:
        for kind, a, b in conv.renames:
            print("%s %s -> %s" % (kind, a, b))
        print("wrote %s.model and %s.safetensors (%d params)" % (args.output, args.output, len(conv.params)))
        for bname, insts in conv.block_stats:
            print("block %s: %d instances (%s)" % (bname, len(insts), ", ".join(insts)))
        args_c = conv.compile_args()
        args_c[1] = args.output + ".model"
        args_c[3] = args.output
        print("compile: " + " ".join(args_c))
    return 0


if __name__ == "__main__":
    sys.exit(main())
