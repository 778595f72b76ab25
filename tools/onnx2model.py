#!/usr/bin/env python3
"""tools/onnx2model.py — import an ONNX model: a readable .model file plus a .safetensors.

    python3 tools/onnx2model.py model.onnx -o out/net [--max-dim seq=128] [--name net]

writes out/net.model and out/net.safetensors (the initializers, under their ONNX names, which are
the PyTorch state_dict keys when torch.onnx.export wrote the file), then prints the name mapping
and the modelc command line that compiles the result.

How it works. The graph is walked in topological order; every value is either a *constant*
(a NumPy array known at import time: initializers that are not weights, Constant nodes, and
everything computed from constants alone, including the shape subgraphs exporters emit: Shape,
Gather, Unsqueeze, Concat, ConstantOfShape, Range, Expand ...) or a *tensor* computed at run time,
with a modelc dtype and a shape whose entries are integers or symbolic sizes ("batch", "seq",
"batch*seq"). A node whose inputs are all constants is evaluated at import time by ONNX's own
reference implementation (onnx.reference); shape values that hold symbolic sizes are folded by
hand (Shape, Gather, Concat, Unsqueeze, Squeeze, Slice, Cast, Mul ...). Every other node is
lowered to one or a few modelc statements, with the ONNX node name in a comment. A node that is
an affine map of its one run-time input (a Resize modelc's interpolate has no mode for, an
AveragePool avg_pool2d cannot do, DFT,
AffineGrid, Col2Im, CenterCropPad, ReverseSequence, STFT) becomes one matmul by the matrix that
onnx.reference gives on the basis vectors, checked on a random input (Converter.linear_map).

Never a wrong result: a node the importer cannot lower exactly (an op type it does not know, an
attribute value it does not handle, a dtype modelc lacks, a size only the run knows) is an error
naming the op type, the node and the reason, and nothing is written. Outputs are written to
temporary files and renamed, so a failed import leaves no half-written files.

Symbolic dimensions. An input dimension that ONNX names (dim_param, e.g. torch.onnx.export's
dynamic_axes) becomes a symbolic dimension of the same (sanitized) name. The first one is the
batch (modelc's --max-batch bounds it); each other needs a bound, --max-dim NAME=N, which is
checked here and written into the printed modelc command line. --max-batch N is passed through.

Values computed from the sizes alone. A value that reads no input's values and no param,
only the symbolic sizes (a causal mask built from arange(seq), position ids), is lowered as
usual where it can be. Where a step of it cannot be written (transformers' packed-sequence check
builds a [batch, seq + 1] tensor, and modelc has no size seq + 1), the value is computed when a
node reading data needs it (Converter.materialize): onnx.reference evaluates its subgraph at
every size of the symbolic dimensions other than the batch up to their bounds, at batch 1, 2
and 3, and the value is written as the one form it has at all of them (a constant broadcast
along symbolic axes, an arange along one, a mask that switches at a diagonal over two), or the
step's error is raised. The statements the materialized value made unneeded are dropped.

Names. ONNX names that are not valid modelc names are sanitized (invalid characters become '_',
a leading digit gets a 'v_' prefix unless the name is a state_dict key such as '0.weight', and
keywords, function names, inf and nan get a trailing '_'); every renamed input, output and param
is printed as `onnx name -> modelc name` (and is in the result of convert() for tools).

Errors: a truncated or corrupt file, an opset older than 7, external data that is missing, a
graph with a cycle, an input no output depends on (unless --keep-unused-inputs: then it is kept,
with a warning, so the program still takes it), and an unsupported node are each one line
`onnx2model: error: ...` and exit status 1.
"""
import argparse
import os
import re
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_blocks  # noqa: E402
import safetensors_np  # noqa: E402

MIN_OPSET = 7


class OnnxImportError(Exception):
    """A model the importer refuses; the message says why."""


class Unsupported(OnnxImportError):
    """A node modelc cannot run exactly; the message names op type, node and reason."""


# ---------------------------------------------------------------- dtypes

def _onnx():
    import onnx
    return onnx


ONNX_DTYPE = {}   # TensorProto enum -> modelc dtype
NP_DTYPE = {"f32": np.float32, "f16": np.float16, "i32": np.int32, "i64": np.int64, "bool": np.bool_}
FLOATS = ("f32", "f16", "bf16")
INTS = ("i32", "i64")


def _init_dtypes():
    if ONNX_DTYPE:
        return
    P = _onnx().TensorProto
    ONNX_DTYPE.update({P.FLOAT: "f32", P.FLOAT16: "f16", P.BFLOAT16: "bf16", P.INT32: "i32",
                       P.INT64: "i64", P.BOOL: "bool"})


def onnx_dtype_name(t):
    P = _onnx().TensorProto
    try:
        return P.DataType.Name(t)
    except ValueError:
        return "dtype %d" % t


def np_to_dtype(a):
    """modelc dtype of a NumPy array, or None."""
    return {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16", np.dtype(np.int32): "i32",
            np.dtype(np.int64): "i64", np.dtype(np.bool_): "bool"}.get(a.dtype)


# ---------------------------------------------------------------- names

KEYWORDS = set("model block return as on input param output true false and or not target loss "
               "optimizer freeze f32 f16 bf16 i32 i64 bool inf nan size".split())
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$")
DIGNAME_RE = re.compile(r"^[0-9]+(\.[0-9]+)*\.[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$")


def function_names():
    return FUNCS


FUNCS = set("""add sub mul div neg exp log sqrt relu sigmoid tanh silu hardtanh clamp relu6 leaky_relu
elu softplus hardswish hardsigmoid erf abs rsqrt sin cos pow minimum maximum dropout gelu matmul
linear softmax log_softmax sum mean max argmax min argmin var std logsumexp rms_norm unsqueeze
squeeze flip expand broadcast_to stack zeros ones full tensor reshape transpose permute conv2d
conv1d pixel_shuffle interpolate upsample conv_transpose2d max_pool2d avg_pool2d
adaptive_avg_pool2d batch_norm layer_norm group_norm instance_norm flatten concat split chunk
slice embedding scaled_dot_product_attention where lt le gt ge eq ne logical_and logical_or
logical_xor logical_not cast floor_divide remainder repeat repeat_interleave pad cumsum arange
triu tril gather index_select one_hot cross_entropy nll_loss mse_loss
binary_cross_entropy_with_logits""".split())


def sanitize(name, keep_dots=True, allow_funcs=False):
    """A valid modelc name for an ONNX name (maybe the same). A function's name (relu, linear)
    is renamed unless allow_funcs (outputs: bound last, after every call)."""
    if keep_dots and (NAME_RE.match(name) or DIGNAME_RE.match(name)) and name not in KEYWORDS \
            and (allow_funcs or name not in FUNCS):
        return name
    s = name.strip("/")
    if s.endswith("_output_0"):
        s = s[:-len("_output_0")]
    s = re.sub(r"[^A-Za-z0-9_.]", "_", s)
    if not keep_dots:
        s = s.replace(".", "_")
    s = re.sub(r"\.+", ".", s).strip(".")
    parts = [p for p in s.split(".") if p]
    s = ".".join(parts) if parts else "v"
    if not (NAME_RE.match(s) or DIGNAME_RE.match(s)):
        s = "v_" + s
        if not NAME_RE.match(s):
            s = "v_" + re.sub(r"[^A-Za-z0-9_]", "_", name)
    if s in KEYWORDS or s in FUNCS:
        s += "_"
    return s


# ---------------------------------------------------------------- values

class T:
    """A tensor computed at run time (or a param): its modelc name, dtype and shape (ints or
    symbolic sizes, strings such as 'batch' or 'batch*seq')."""

    def __init__(self, name, dtype, shape, param=False):
        self.name, self.dtype, self.shape, self.param = name, dtype, list(shape), param

    def __repr__(self):
        return "T(%s %s%s)" % (self.name, self.dtype, self.shape)


class Seq(list):
    """An ONNX sequence whose length is known at import time: a list of values."""


class Lazy:
    """A value computed from the symbolic sizes alone (it reads no input's values and no param)
    through a step modelc has no expression for, such as a [1, seq + 1] intermediate: left
    unwritten until a node that reads data needs it (Converter.materialize). err is the error
    the step gave, raised if the value fits none of the forms materialize writes."""

    def __init__(self, err):
        self.err = err


def is_const(v):
    return isinstance(v, np.ndarray)


def is_symbolic(a):
    return isinstance(a, np.ndarray) and a.dtype == object


def dim_str(d):
    return str(d)


def shape_str(shape):
    return "[" + ", ".join(dim_str(d) for d in shape) + "]"


def dim_mul(a, b):
    if isinstance(a, (int, np.integer)) and isinstance(b, (int, np.integer)):
        return int(a) * int(b)
    if a == 1:
        return b
    if b == 1:
        return a
    return "%s*%s" % (a, b)


def numel(shape):
    n = 1
    for d in shape:
        n = dim_mul(n, d)
    return n


def all_static(shape):
    return all(isinstance(d, (int, np.integer)) for d in shape)


def broadcast(a, b, what):
    ra, rb = list(a), list(b)
    n = max(len(ra), len(rb))
    ra = [1] * (n - len(ra)) + ra
    rb = [1] * (n - len(rb)) + rb
    out = []
    for x, y in zip(ra, rb):
        if x == y:
            out.append(x)
        elif x == 1:
            out.append(y)
        elif y == 1:
            out.append(x)
        else:
            raise Unsupported("%s: shapes %s and %s do not broadcast" % (what, a, b))
    return out


def fmt_num(v, dtype):
    """A scalar as a modelc literal of the given dtype."""
    if dtype in FLOATS:
        f = float(v)
        if np.isnan(f):
            return "nan"
        if np.isinf(f):
            return "inf" if f > 0 else "(-inf)"
        r = repr(float(np.float32(f))) if dtype == "f32" else repr(f)
        return "(%s)" % r if r.startswith("-") else r
    if dtype == "bool":
        return "1" if bool(v) else "0"
    i = int(v)
    return "(%d)" % i if i < 0 else "%d" % i


# ---------------------------------------------------------------- the converter

class Converter:
    def __init__(self, model, name="net", max_dims=None, max_batch=None, keep_unused=False, widen=False,
                 blocks=True):
        _init_dtypes()
        self.blocks = blocks    # write repeated layers as blocks (tools/model_blocks.py)
        self.block_stats = []   # (block name, [instance prefixes]) once source() ran
        self.model = model
        self.graph = model.graph
        self.mname = sanitize(name, keep_dots=False)
        self.max_dims = dict(max_dims or {})
        self.max_batch = max_batch
        self.keep_unused = keep_unused
        self.widen = widen
        self.opset = 0
        for imp in model.opset_import:
            if imp.domain in ("", "ai.onnx"):
                self.opset = imp.version
            elif imp.domain not in ("ai.onnx.ml",):
                pass
        self.vals = {}          # ONNX value name -> T or np.ndarray
        self.lines = []         # body statements
        self.decls = []         # input / param declarations
        self.params = {}        # modelc param name -> array
        self.used = set()       # modelc names taken
        self.renames = []       # (kind, onnx name, modelc name)
        self.inputs = []        # (onnx name, modelc name, dtype, shape)
        self.outputs = []       # (onnx name, modelc name)
        self.symbols = []       # symbolic dims in order of appearance
        self.node = None
        self.ntmp = 0
        self.const_names = {}   # id(array) -> the ONNX name of a constant value
        self.const_params = {}  # id(array) -> (the array, its T), once emitted; holding the array
                                # keeps its id from being reused by a later temporary
        self.folded_outputs = 0  # graph outputs known at import time
        self.init_arrays = {}    # param name -> its initializer's values
        self.output_narrow = {}  # output -> the ONNX integer dtype it was widened from
        self.size_checked = False  # a value computed from the sizes alone was checked up to the bounds
        self.omitted_inputs = []  # empty graph inputs only read for their dtype, not in the program

    # ---- names
    def fresh(self, base, keep_dots=False, allow_funcs=False):
        s = sanitize(base, keep_dots=keep_dots, allow_funcs=allow_funcs)
        if s in self.used:
            i = 2
            while "%s_%d" % (s, i) in self.used:
                i += 1
            s = "%s_%d" % (s, i)
        self.used.add(s)
        return s

    def tmp(self, base=None):
        self.ntmp += 1
        if base is None and self.node is not None and getattr(self.node, "output", None) and self.node.output[0]:
            base = self.node.output[0]
        return self.fresh(base or ("t%d" % self.ntmp))

    # ---- errors
    def unsupported(self, why):
        n = self.node
        e = Unsupported("unsupported node %s '%s' (opset %d): %s" % (n.op_type, n.name or "?", self.opset, why))
        e.reason = why
        raise e

    # ---- emitting
    def emit(self, expr, dtype, shape, base=None):
        """Bind expr to a new name; returns its T."""
        name = self.tmp(base)
        self.lines.append("  %s = %s" % (name, expr))
        return T(name, dtype, shape)

    def emit_multi(self, expr, results, base=None):
        names = [self.tmp(base) for _ in results]
        self.lines.append("  %s = %s" % (", ".join(names), expr))
        return [T(n, d, s) for n, (d, s) in zip(names, results)]

    def const_tensor(self, a, base="const"):
        """A constant as a modelc tensor: a param holding it, named after the ONNX value it
        came from (once per constant)."""
        key, a_orig = id(a), a
        if key in self.const_params and self.const_params[key][0] is a:
            return self.const_params[key][1]
        base = self.const_names.get(key, base)
        if is_symbolic(a):
            self.unsupported("a shape with symbolic sizes %s is used as a tensor" % list(a))
        dt = np_to_dtype(a)
        narrow = None
        if dt is None and self.widen and a.dtype.type in WIDEN_NP + WIDEN_FLOAT_NP:
            narrow = a.dtype.type
            dt = wide_of(narrow)
            a = a.astype({"f32": np.float32, "i32": np.int32, "i64": np.int64}[dt])
        if dt is None:
            self.unsupported("constant of dtype %s (modelc has f32, f16, bf16, i32, i64, bool)" % a.dtype)
        if a.size == 0:
            self.unsupported("empty constant of shape %s (modelc has no empty tensors)" % list(a.shape))
        name = self.fresh(base)
        self.params[name] = np.array(a, order="C")
        self.decls.append("  param %s: %s%s" % (name, dt, shape_str(a.shape)))
        t = T(name, dt, list(a.shape), param=True)
        t.narrow = narrow
        self.const_params[key] = (a_orig, t)
        return t

    def tensor(self, v, base="const"):
        return v if isinstance(v, T) else self.const_tensor(v, base)

    def operand(self, v, other_dtype=None, other_rank=None):
        """A value as an expression operand: a tensor's name, or a literal for a 0-d constant
        meeting a tensor of rank >= its own."""
        if isinstance(v, T):
            return v.name
        if (not is_symbolic(v) and v.ndim == 0 and other_dtype is not None and
                np_to_dtype(v) == other_dtype):
            return fmt_num(v.item(), other_dtype)
        return self.tensor(v).name

    # ---- attribute helpers
    def attrs(self, node):
        onnx = _onnx()
        out = {}
        for a in node.attribute:
            if a.ref_attr_name:
                self.unsupported("attribute '%s' refers to a function attribute" % a.name)
            out[a.name] = onnx.helper.get_attribute_value(a)
        return out

    # ---- the walk
    def run(self):
        onnx = _onnx()
        g = self.graph
        if self.opset and self.opset < MIN_OPSET:
            raise OnnxImportError("opset %d is older than the oldest this importer supports (%d); "
                                  "convert it with onnx.version_converter first" % (self.opset, MIN_OPSET))
        for imp in self.model.opset_import:
            if imp.domain not in ("", "ai.onnx"):
                pass  # nodes of other domains are refused one by one
        inits = {}
        for t in g.initializer:
            if t.data_location == onnx.TensorProto.EXTERNAL:
                raise OnnxImportError("initializer '%s' keeps its data in an external file that was "
                                      "not loaded (missing next to the model?)" % t.name)
            try:
                inits[t.name] = onnx.numpy_helper.to_array(t)
            except Exception as e:  # noqa: BLE001
                raise OnnxImportError("initializer '%s': %s" % (t.name, e))
        for t in g.sparse_initializer:
            raise OnnxImportError("sparse initializer '%s' is not supported" % t.values.name)
        # initializers: float tensors with more than one element are params (weights, kept by
        # name); the rest (shapes, axes, scalars) are constants the import may fold.
        for name, a in inits.items():
            dt = np_to_dtype(a)
            if dt in FLOATS and a.size > 1:
                pname = self.fresh(name, keep_dots=True)
                if pname != name:
                    self.renames.append(("param", name, pname))
                self.params[pname] = np.array(a, order="C")
                self.init_arrays[pname] = a
                self.decls.append("  param %s: %s%s" % (pname, dt, shape_str(a.shape)))
                self.vals[name] = T(pname, dt, list(a.shape), param=True)
            else:
                self.set_val(name, a)
        dtype_only = self.dtype_only_inputs()
        for vi in g.input:
            if vi.name in inits:
                continue
            if vi.name in dtype_only and self.omit_empty_input(vi):
                continue
            self.declare_input(vi)
        self.check_bounds()
        # graph outputs keep their names: reserved before any intermediate takes one
        out_names = {}
        for vi in g.output:
            if vi.name not in out_names:
                out_names[vi.name] = self.fresh(vi.name, keep_dots=True, allow_funcs=True)
        order = self.toposort()
        self.order = order
        size_only = self.size_only_values(order) if self.symbols else set()
        for node in order:
            self.node = node
            outs = [o for o in node.output if o]
            lazy = [x for x in node.input if x and isinstance(self.vals.get(x), Lazy)]
            if lazy and all(o in size_only for o in outs):
                for o in outs:
                    self.vals[o] = self.vals[lazy[0]]
                continue
            for x in lazy:
                self.vals[x] = self.materialize(x, node)
                self.node = node
            start = len(self.lines)
            try:
                self.convert_node(node)
            except Unsupported as e:
                # a step of a size-only computation modelc cannot write (a size such as
                # seq + 1): left for materialize, which writes the value a data node reads
                if not (outs and all(o in size_only for o in outs)):
                    raise
                del self.lines[start:]
                for o in outs:
                    self.vals[o] = Lazy(e)
        self.node = None
        for vi in g.output:
            if vi.name not in self.vals:
                raise OnnxImportError("graph output '%s' is not computed by any node" % vi.name)
            if isinstance(self.vals[vi.name], Lazy):
                self.vals[vi.name] = self.materialize(vi.name, None)
            v = self.vals[vi.name]
            oname = out_names.pop(vi.name, None) or self.fresh(vi.name, keep_dots=True)
            if oname != vi.name:
                self.renames.append(("output", vi.name, oname))
            if isinstance(v, Seq):
                raise Unsupported("graph output '%s' is a sequence (modelc outputs are tensors)" % vi.name)
            if is_const(v):
                self.folded_outputs += 1
                self.node = type("N", (), {"op_type": "output", "name": vi.name})()
                v = self.const_tensor(v, base="const_" + oname)
            self.lines.append("  output %s = %s" % (oname, v.name))
            self.outputs.append((vi.name, oname, v.dtype, v.shape))
            if is_narrow_float(getattr(v, "narrow", None)):
                raise Unsupported("graph output '%s': dtype %s (modelc has no %s; only a Cast from it is "
                                  "carried, in f32)" % (vi.name, np.dtype(v.narrow).name, np.dtype(v.narrow).name))
            if getattr(v, "narrow", None) is not None:
                self.output_narrow[oname] = np.dtype(v.narrow)
        self.check_unused_inputs(order)
        if any(isinstance(v, Lazy) for v in self.vals.values()):
            self.drop_dead_statements()
        self.drop_unused_params()
        return self

    def drop_dead_statements(self):
        """Statements whose values nothing reads: the steps of a size-only computation that a
        materialized value replaced (see materialize), with their node comments."""
        tok = re.compile(r"[A-Za-z0-9_.]+")
        stmt = re.compile(r"^  (output )?([A-Za-z0-9_., ]+?) = (.*)$")
        live, keep = set(), []
        for line in reversed(self.lines):
            m = stmt.match(line)
            if m is None:
                if line.startswith("  #") and (not keep or keep[-1].startswith("  #")):
                    continue             # the comment of statements all dropped
                keep.append(line)
                continue
            defs = [d.strip() for d in m.group(2).split(",")]
            if m.group(1) or any(d in live for d in defs):
                live.update(tok.findall(m.group(3)))
                keep.append(line)
        self.lines = keep[::-1]

    def drop_unused_params(self):
        """Params no statement reads (initializers only used as shapes, scales ...)."""
        body = "\n".join(self.lines)
        used = set(re.findall(r"[A-Za-z0-9_.]+", body))
        keep = []
        for d in self.decls:
            m = re.match(r"  param (\S+):", d)
            if m and m.group(1) not in used:
                self.params.pop(m.group(1), None)
                continue
            keep.append(d)
        self.decls = keep

    def declare_input(self, vi):
        tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        if tt is None:
            raise Unsupported("input '%s': only tensor inputs are supported (not %s)"
                              % (vi.name, vi.type.WhichOneof("value")))
        narrow = None
        if tt.elem_type not in ONNX_DTYPE:
            if self.widen and tt.elem_type in widen_table():
                narrow = widen_table()[tt.elem_type]
            else:
                raise Unsupported("input '%s': dtype %s (modelc has f32, f16, bf16, i32, i64, bool%s)"
                                  % (vi.name, onnx_dtype_name(tt.elem_type),
                                     "" if self.widen else "; --widen-ints takes int8, uint8, int16, uint16, uint32, "
                                     "int4, uint4, int2, uint2 and, for a Cast, float8 and float4"))
        if not tt.HasField("shape"):
            raise Unsupported("input '%s' has no shape" % vi.name)
        shape = []
        for i, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value"):
                if d.dim_value <= 0:
                    raise Unsupported("input '%s': axis %d has size %d (modelc has no empty tensors)"
                                      % (vi.name, i, d.dim_value))
                shape.append(int(d.dim_value))
            elif d.HasField("dim_param"):
                s = sanitize(d.dim_param, keep_dots=False)
                if s not in self.symbols:
                    self.symbols.append(s)
                    self.used.add(s)
                shape.append(s)
            else:
                raise Unsupported("input '%s': axis %d has no size and no name; give it one "
                                  "(dynamic_axes in torch.onnx.export)" % (vi.name, i))
        dt = ONNX_DTYPE[tt.elem_type] if narrow is None else wide_of(narrow)
        name = self.fresh(vi.name, keep_dots=True)
        if name != vi.name:
            self.renames.append(("input", vi.name, name))
        self.decls.append("  input %s: %s%s%s" % (name, dt, shape_str(shape),
                                                 "   # %s in ONNX, widened" % np.dtype(narrow).name if narrow else ""))
        self.vals[vi.name] = T(name, dt, shape)
        self.vals[vi.name].narrow = narrow
        self.inputs.append((vi.name, name, dt, shape))

    def dtype_only_inputs(self):
        """Graph inputs whose values no node reads: used only as CastLike's `like` (its dtype)
        or not at all, and no graph output."""
        data = {vi.name for vi in self.graph.output}
        for n in self.graph.node:
            for k, x in enumerate(n.input):
                if not (n.op_type == "CastLike" and k == 1):
                    data.add(x)
            if any(a.type in (a.GRAPH, a.GRAPHS) for a in n.attribute):
                return set()  # a subgraph may read any outer value
        return {vi.name for vi in self.graph.input} - data

    def omit_empty_input(self, vi):
        """An empty input (an axis of size 0) whose values nothing reads is left out of the
        program (modelc has no empty tensors) and stands for its dtype alone; True if so."""
        tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        if tt is None or not tt.HasField("shape"):
            return False
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        if 0 not in dims or None in dims:
            return False
        try:
            npdt = _onnx().helper.tensor_dtype_to_np_dtype(tt.elem_type)
        except Exception:  # noqa: BLE001  (strings, undefined: keep the usual error)
            return False
        self.set_val(vi.name, np.zeros(dims, dtype=npdt))
        self.omitted_inputs.append(vi.name)
        sys.stderr.write("onnx2model: warning: input '%s' is empty (shape %s) and only its dtype is used; "
                         "the program does not take it\n" % (vi.name, dims))
        return True

    def check_bounds(self):
        if len(self.symbols) > 4:
            raise OnnxImportError("%d symbolic dimensions (%s); modelc takes at most 4"
                                  % (len(self.symbols), ", ".join(self.symbols)))
        for s in self.symbols[1:]:
            if s not in self.max_dims:
                raise OnnxImportError("symbolic dimension '%s' needs a bound: --max-dim %s=N" % (s, s))
        for s in self.max_dims:
            if s not in self.symbols[1:] and not (self.symbols and s == self.symbols[0]):
                raise OnnxImportError("--max-dim %s: the model has no symbolic dimension '%s' (it has: %s)"
                                      % (s, s, ", ".join(self.symbols) or "none"))

    def toposort(self):
        g = self.graph
        produced = {}
        for i, n in enumerate(g.node):
            for o in n.output:
                if o:
                    if o in produced or o in self.vals:
                        raise OnnxImportError("value '%s' is produced twice (node '%s')" % (o, n.name))
                    produced[o] = i
        # Kahn's algorithm; a node left over is on a cycle (or reads a value nobody makes).
        deps = []
        users = [[] for _ in g.node]
        for i, n in enumerate(g.node):
            d = set()
            for x in self.node_inputs(n):
                if x in produced:
                    d.add(produced[x])
                elif x not in self.vals:
                    raise OnnxImportError("node %s '%s' reads '%s', which no node, input or "
                                          "initializer provides" % (n.op_type, n.name, x))
            deps.append(len(d))
            for j in d:
                users[j].append(i)
        ready = [i for i, c in enumerate(deps) if c == 0]
        order = []
        while ready:
            i = ready.pop(0)
            order.append(g.node[i])
            for u in users[i]:
                deps[u] -= 1
                if deps[u] == 0:
                    ready.append(u)
        if len(order) != len(g.node):
            left = [g.node[i] for i, c in enumerate(deps) if c > 0]
            raise OnnxImportError("the graph has a cycle through %s" %
                                  ", ".join("%s '%s'" % (n.op_type, n.name) for n in left[:4]))
        return order

    def node_inputs(self, n):
        """The values a node reads, including those its subgraphs read from outside."""
        return [x for x in n.input if x]

    def check_unused_inputs(self, order):
        """An input that no output depends on is an error (or kept, with --keep-unused-inputs)."""
        prod = {}
        for n in order:
            for o in n.output:
                prod[o] = n
        seen, stack = set(), [vi.name for vi in self.graph.output]
        while stack:
            v = stack.pop()
            if v in seen:
                continue
            seen.add(v)
            if v in prod:
                stack.extend(self.node_inputs(prod[v]))
        for oname, mname, _, _ in self.inputs:
            if oname not in seen:
                if not self.keep_unused:
                    raise OnnxImportError("input '%s' is not used by any output (--keep-unused-inputs "
                                          "keeps it, so the program still takes it)" % oname)
                sys.stderr.write("onnx2model: warning: input '%s' is not used by any output; kept\n" % oname)

    # ---- values computed from the sizes alone
    def size_only_values(self, order):
        """The values that depend on no input's values and no param, only on constants and on
        the sizes of inputs (Shape, Size; CastLike's `like`, which gives only a dtype)."""
        dep = {vi.name for vi in self.graph.input}
        dep |= {k for k, v in self.vals.items() if isinstance(v, T)}
        out = set()
        for n in order:
            if n.op_type in ("Shape", "Size"):
                out.update(o for o in n.output if o)
                continue
            reads = [x for k, x in enumerate(n.input) if x and not (n.op_type == "CastLike" and k == 1)]
            if any(a.type in (a.GRAPH, a.GRAPHS) for a in n.attribute) or any(x in dep for x in reads):
                dep.update(n.output)
            else:
                out.update(o for o in n.output if o)
        return out

    def materialize(self, name, reader):
        """The size-only value `name` (a Lazy) as modelc statements, for the node `reader`.

        The value's ONNX subgraph is evaluated by onnx.reference at every size of each symbolic
        dimension other than the batch up to its bound (all combinations, at most 4,096), each
        at batch 1, 2 and 3. Each axis must have a fixed size or one symbolic size throughout,
        and the values must be one of: the same constant array at every size, broadcast along
        the symbolic axes (a mask of ones); an arithmetic progression along one symbolic axis
        (`arange(seq) * a + b`: position ids); or a function of `col - row` over two symbolic
        axes taking one value up to a threshold and another after it (a causal mask: `where(c
        - r <= k, A, B)`). Anything else is the error of the step that could not be written."""
        lz = self.vals[name]
        what = "the value '%s'%s depends only on the sizes but" % (
            name, " (read by %s '%s')" % (reader.op_type, reader.name) if reader is not None else "")

        def fail(why):
            e = Unsupported("%s; %s %s" % (lz.err, what, why))
            e.reason = getattr(lz.err, "reason", str(lz.err))
            raise e
        onnx = _onnx()
        from onnx.reference import ReferenceEvaluator
        h = onnx.helper
        prod = {o: n for n in self.order for o in n.output if o}
        need, stack, seen = [], [name], set()
        while stack:
            v = stack.pop()
            if v in seen or v not in prod:
                continue
            seen.add(v)
            n = prod[v]
            if n not in need:
                need.append(n)
            stack.extend(x for x in n.input if x)
        nodes = [n for n in self.order if n in need]
        reads = {x for n in nodes for x in n.input if x}
        ins = [vi for vi in self.graph.input if vi.name in reads]
        inits = [t for t in self.graph.initializer if t.name in reads]
        gr = h.make_graph(nodes, "size_only", ins, [h.make_empty_tensor_value_info(name)], initializer=inits)
        m = h.make_model(gr, opset_imports=list(self.model.opset_import), functions=list(self.model.functions))
        m.ir_version = self.model.ir_version
        try:
            ev = ReferenceEvaluator(m)
        except Exception as e:  # noqa: BLE001
            fail("onnx.reference cannot evaluate it (%s)" % str(e).splitlines()[0])
        # the sizes to check at
        batch = self.symbols[0] if self.symbols else None
        others = [s for s in self.symbols[1:]]
        grid = [{}]
        for s in others:
            grid = [dict(p, **{s: k}) for p in grid for k in range(1, self.max_dims[s] + 1)]
        if len(grid) > 4096:
            fail("checking it at every size takes %d evaluations (at most 4,096)" % len(grid))
        points = [dict(p, **({batch: b} if batch else {})) for p in grid for b in (1, 2, 3)]
        results = []
        for p in points:
            feeds = {}
            for vi in ins:
                tt = vi.type.tensor_type
                shp = [d.dim_value if d.HasField("dim_value") else p[sanitize(d.dim_param, keep_dots=False)]
                       for d in tt.shape.dim]
                feeds[vi.name] = np.zeros(shp, dtype=h.tensor_dtype_to_np_dtype(tt.elem_type))
            try:
                results.append(np.asarray(ev.run(None, feeds)[0]))
            except Exception as e:  # noqa: BLE001
                fail("onnx.reference fails on it at %s (%s)" % (p, str(e).splitlines()[0]))
        # each axis: a fixed size or one symbolic size
        r0 = results[0]
        if any(r.ndim != r0.ndim or r.dtype != r0.dtype for r in results):
            fail("its rank or dtype changes with the sizes")
        dims = []
        for ax in range(r0.ndim):
            got = [r.shape[ax] for r in results]
            if all(g_ == got[0] for g_ in got) and not any(all(g_ == p[s] for g_, p in zip(got, points))
                                                           for s in self.symbols if got[0] != 1):
                dims.append(int(got[0]))
                continue
            sym = [s for s in self.symbols if all(g_ == p[s] for g_, p in zip(got, points))]
            if not sym:
                at = [(g_, p) for g_, p in zip(got, points) if not batch or p[batch] == 1][:3]
                fail("its axis %d has size %s, not one symbolic size" % (ax, ", ".join(
                    "%d at %s" % (g_, " ".join("%s=%d" % kv for kv in p.items())) for g_, p in at)))
            dims.append(sym[0])
        dt = np_to_dtype(r0)
        if dt is None:
            fail("its dtype %s is not a modelc dtype" % r0.dtype)
        # the axes along which the values vary
        vary = [ax for ax in range(r0.ndim)
                if any(r.shape[ax] > 1 and not np.array_equal(r, np.take(r, [0], axis=ax).repeat(r.shape[ax], axis=ax))
                       for r in results)]
        svary = [ax for ax in vary if isinstance(dims[ax], str)]
        core_shape = [dims[ax] if ax in vary else 1 for ax in range(r0.ndim)]

        def core_of(r):
            return r[tuple(slice(None) if ax in vary else slice(0, 1) for ax in range(r.ndim))]
        checked = ", ".join(["%s = 1..%d" % (q, self.max_dims[q]) for q in others] +
                            (["%s = 1, 2, 3" % batch] if batch else []))
        self.lines.append("  # %s: computed from the sizes alone (checked at %s)" % (name, checked))
        self.size_checked = True
        base = sanitize(name, keep_dots=False)
        if not svary:
            c = core_of(results[0])
            if any(not np.array_equal(core_of(r), c) for r in results):
                fail("its values change with the sizes")
            t = self.const_tensor(np.ascontiguousarray(c), base=name)
        elif len(svary) == 1 and len(vary) == 1 and dt in INTS + ["f32"]:
            ax = svary[0]
            seqs = [core_of(r).reshape(-1) for r in results]
            long = max(seqs, key=len)
            b0 = long[0]
            a0 = long[1] - long[0] if len(long) > 1 else 0
            if a0 != int(a0) or b0 != int(b0) or any(
                    not np.array_equal(q, b0 + a0 * np.arange(len(q), dtype=np.int64)) for q in seqs):
                fail("along axis %d it is not an arithmetic progression of integers" % ax)
            expr = "arange(%s)" % dims[ax]
            if a0 != 1:
                expr = "%s * %s" % (expr, fmt_num(int(a0), "i64"))
            if b0 != 0:
                expr = "%s + %s" % (expr, fmt_num(int(b0), "i64"))
            t = self.emit(expr, "i64", [dims[ax]], base=base)
            if dt != "i64":
                t = self.emit("cast(%s, dtype=%s)" % (t.name, dt), dt, t.shape, base=base)
        elif len(svary) == 2 and len(vary) == 2 and dt in ("bool", "f32"):
            ra, cb = svary
            f = {}
            for r in results:
                c = core_of(r).reshape(r.shape[ra], r.shape[cb])
                for i in range(c.shape[0]):
                    for j in range(c.shape[1]):
                        v = c[i, j].item()
                        if f.setdefault(j - i, v) != v and not (v != v and f[j - i] != f[j - i]):
                            fail("over axes %d and %d it is not a function of col - row" % (ra, cb))
            ds = sorted(f)
            vals = [f[d] for d in ds]
            switch = [k for k in range(1, len(ds)) if not (vals[k] == vals[k - 1] or vals[k] != vals[k] and vals[k - 1] != vals[k - 1])]
            if len(switch) != 1:
                fail("over axes %d and %d it is not one value up to a diagonal and another after it" % (ra, cb))
            k = ds[switch[0] - 1]
            lo, hi = vals[0], vals[-1]
            ri = self.emit("reshape(arange(%s), [%s, 1])" % (dims[ra], dims[ra]), "i64", [dims[ra], 1], base="row")
            ci = self.emit("reshape(arange(%s), [1, %s])" % (dims[cb], dims[cb]), "i64", [1, dims[cb]], base="col")
            cond = self.emit("%s - %s <= %s" % (ci.name, ri.name, fmt_num(k, "i64")), "bool", [dims[ra], dims[cb]],
                             base=base + "_cond")
            if dt == "bool":
                t = cond if lo else self.emit("not %s" % cond.name, "bool", cond.shape, base=base)
            else:
                t = self.emit("where(%s, %s, %s)" % (cond.name, fmt_num(lo, "f32"), fmt_num(hi, "f32")), "f32",
                              cond.shape, base=base)
        else:
            fail("varies along axes %s, which is none of the forms the importer writes (a constant, "
                 "arange along one symbolic axis, a mask over two)" % vary)
        if list(t.shape) != core_shape:
            t = self.emit("reshape(%s, %s)" % (t.name, self.reshape_list(core_shape)), t.dtype, core_shape, base=base)
        if core_shape != dims:
            t = self.emit("expand(%s, %s)" % (t.name, self.reshape_list(dims)), t.dtype, dims, base=base)
        return t

    # ---- nodes
    def convert_node(self, node):
        if node.domain not in ("", "ai.onnx"):
            self.unsupported("domain '%s' is not supported" % node.domain)
        ins = []
        for x in node.input:
            ins.append(self.vals[x] if x else None)
        attrs = self.attrs(node)
        outs_wanted = list(node.output)
        handler = getattr(self, "op_" + node.op_type, None)
        if handler is None and node.op_type in UNARY_OPS:  # ONNX op type -> the modelc function of one float input
            handler = lambda i, a, n, fn=UNARY_OPS[node.op_type]: self.unary(fn, i[0])  # noqa: E731
        # constant folding: every input known at import time
        known = [v for v in ins if v is not None]
        if all(is_const(v) for v in known) and node.op_type not in NO_FOLD:
            if not any(is_symbolic(v) for v in known):
                res = self.fold(node, ins)
            elif node.op_type in SYMBOLIC_FOLD:
                res = self.fold_symbolic(node, ins, attrs)
                if res is not None:
                    res = [None if r is None else sym_array(r) for r in res]
            else:
                res = None
            if res is not None:
                for o, r in zip(outs_wanted, res):
                    if o:
                        self.set_val(o, r)
                return
        if handler is None:
            self.unsupported("op type %s is not supported by the importer" % node.op_type)
        if node.op_type not in ("Cast", "CastLike"):
            for x, v in zip(node.input, ins):
                nv = getattr(v, "narrow", None) if isinstance(v, T) else (
                    v.dtype.type if is_const(v) and not is_symbolic(v) else None)
                if is_narrow_float(nv):
                    self.unsupported("input '%s' is %s (carried in f32 by --widen-ints): only a Cast from it is "
                                     "exact, other ops would round to %s after every step"
                                     % (x, np.dtype(nv).name, np.dtype(nv).name))
        start = len(self.lines)
        res = handler(ins, attrs, node)
        if not isinstance(res, (list, tuple)):
            res = [res]
        used_outs = [o for o in outs_wanted if o]
        if len(res) < len([o for o in outs_wanted[:len(res)] if o]) or \
                any(o for o in outs_wanted[len(res):]):
            self.unsupported("output %d (%s) is not supported" % (len(res), outs_wanted[len(res)]))
        comment = "  # %s%s" % (node.op_type, (" " + node.name) if node.name else "")
        if len(self.lines) > start:
            self.lines.insert(start, comment)
        narrow = [v.narrow for v in ins if isinstance(v, T) and getattr(v, "narrow", None) is not None]
        narrow += [v.dtype.type for v in ins if is_const(v) and not is_symbolic(v) and v.dtype.type in WIDEN_NP]
        if narrow:
            res = [self.wrap(r, narrow[0], node.op_type) if isinstance(r, T) else r for r in res]
        for o, r in zip(outs_wanted, res):
            if o:
                self.set_val(o, r)
        del used_outs

    def wrap(self, r, narrow, op):
        """A result of widened integers: reduced back to the range of the ONNX dtype (modular,
        as the narrow type's arithmetic wraps)."""
        if r.dtype in ("bool",) or r.dtype in FLOATS:
            return r
        if getattr(r, "narrow", None) is not None or op in ("Cast", "CastLike"):
            return r
        if op in NO_WRAP:
            r = T(r.name, r.dtype, r.shape, r.param)
            r.narrow = narrow
            return r
        bits, lo, _ = narrow_range(narrow)
        if lo == 0:
            w = self.emit("%s %% %d" % (r.name, 1 << bits), r.dtype, r.shape)
        else:
            h = 1 << (bits - 1)
            w = self.emit("(%s + %d) %% %d - %d" % (r.name, h, 1 << bits, h), r.dtype, r.shape)
        w.narrow = narrow
        return w

    def set_val(self, name, v):
        self.vals[name] = v
        if is_const(v):
            self.const_names.setdefault(id(v), name)

    def fold(self, node, ins):
        if node.op_type == "GatherElements":
            # onnx.reference's GatherElements mishandles indices smaller than the data
            a = self.attrs(node)
            x, idx = ins
            ax = a.get("axis", 0) % x.ndim
            idx = np.where(idx < 0, idx + x.shape[ax], idx).astype(np.int64)
            sl = tuple(slice(0, d) if k != ax else slice(None) for k, d in enumerate(idx.shape))
            return [np.take_along_axis(x[sl], idx, axis=ax)]
        onnx = _onnx()
        from onnx.reference import ReferenceEvaluator
        h = onnx.helper
        feeds, vis = {}, []
        names = []
        for i, (x, v) in enumerate(zip(node.input, ins)):
            if not x:
                names.append("")
                continue
            nm = "in%d" % i
            names.append(nm)
            feeds[nm] = v
            vis.append(h.make_tensor_value_info(nm, h.np_dtype_to_tensor_dtype(v.dtype), v.shape))
        n2 = onnx.NodeProto()
        n2.CopyFrom(node)
        del n2.input[:]
        n2.input.extend(names)
        outs = ["out%d" % i if o else "" for i, o in enumerate(node.output)]
        del n2.output[:]
        n2.output.extend(outs)
        g = h.make_graph([n2], "fold", vis, [h.make_empty_tensor_value_info(o) for o in outs if o])
        m = h.make_model(g, opset_imports=list(self.model.opset_import))
        m.ir_version = self.model.ir_version or 8
        try:
            res = ReferenceEvaluator(m).run(None, feeds)
        except Exception as e:  # noqa: BLE001
            self.unsupported("folding a node of constant inputs failed: %s" % str(e).splitlines()[0][:200])
        out, k = [], 0
        for o in node.output:
            if o:
                r = res[k]
                k += 1
                if not isinstance(r, np.ndarray):
                    if isinstance(r, (np.generic, int, float, bool)):
                        r = np.array(r)
                    else:
                        self.unsupported("folding gave a %s, not a tensor" % type(r).__name__)
                out.append(r)
            else:
                out.append(None)
        return out

    def reference_fn(self, node, ins, k):
        """The node as a function of its input k (onnx.reference), the other inputs fixed to
        their constant values; returns f(array) -> its first output."""
        onnx = _onnx()
        from onnx.reference import ReferenceEvaluator
        h = onnx.helper
        feeds, vis, names = {}, [], []
        for j, (x, v) in enumerate(zip(node.input, ins)):
            if not x:
                names.append("")
                continue
            nm = "in%d" % j
            names.append(nm)
            if j == k:
                dt = {"f32": onnx.TensorProto.FLOAT, "f16": onnx.TensorProto.FLOAT16,
                      "bf16": onnx.TensorProto.BFLOAT16}[v.dtype]
                vis.append(h.make_tensor_value_info(nm, dt, v.shape))
            else:
                feeds[nm] = v
                vis.append(h.make_tensor_value_info(nm, h.np_dtype_to_tensor_dtype(v.dtype), v.shape))
        n2 = onnx.NodeProto()
        n2.CopyFrom(node)
        del n2.input[:]
        n2.input.extend(names)
        outs = ["out%d" % j if o else "" for j, o in enumerate(node.output)]
        del n2.output[:]
        n2.output.extend(outs)
        g = h.make_graph([n2], "linear", vis, [h.make_empty_tensor_value_info(o) for o in outs if o])
        m = h.make_model(g, opset_imports=list(self.model.opset_import))
        m.ir_version = self.model.ir_version or 8
        try:
            ev = ReferenceEvaluator(m)
        except Exception as e:  # noqa: BLE001
            self.unsupported("onnx.reference cannot evaluate it: %s" % str(e).splitlines()[0][:200])

        def f(x):
            return np.asarray(ev.run(None, dict(feeds, **{"in%d" % k: x}))[0])
        return f

    # the most elements a linear map's matrix may have (a float32 param of 16 MiB)
    LINEAR_MAP_MAX = 1 << 22

    def linear_map(self, node, ins, k, why):
        """A node that is an affine function of its input k (the other inputs constants: a
        Resize of any mode, a DFT, an AffineGrid of theta ...), lowered as one matmul by the
        matrix M and offset c that ONNX's reference implementation gives on the basis vectors:
        c = f(0), M[:, j] = f(e_j) - c. It is checked on a random input (f(r) = M r + c at
        1e-5), so an op that is not affine is refused, never approximated. The map runs in f32:
        f16 and bf16 inputs only where M selects (one 1 per row), which is exact. As for any
        matmul, a NaN or an infinity in the input makes every output NaN (0 * inf), where the op
        itself keeps it to the outputs that read it; a pure selection is a gather instead,
        exact for every value. `why` is the reason the op's own lowering
        gave, reported when this one fails too."""
        x = ins[k]
        if not isinstance(x, T) or x.dtype not in FLOATS:
            self.unsupported(why)
        ins = list(ins)
        for j, v in enumerate(ins):
            if j != k and v is not None:
                ins[j] = v = self.const_input(v, "input %d (%s)" % (j, node.input[j]))
                if is_symbolic(v):
                    self.unsupported(why)
        if not all_static(x.shape):
            self.unsupported(why + "; symbolic axes")
        nin = int(np.prod(x.shape)) if x.shape else 1
        npdt = {"f32": np.float32, "f16": np.float16, "bf16": _ml_dtypes().bfloat16}[x.dtype]
        if nin > 4096:
            self.unsupported(why + "; %d input elements are too many for a linear map" % nin)
        f = self.reference_fn(node, ins, k)
        try:
            c = f(np.zeros(x.shape, npdt))
            if c.dtype != np.dtype(npdt) or c.size == 0:
                self.unsupported(why)
            if c.size * nin > self.LINEAR_MAP_MAX:
                self.unsupported(why + "; a linear map of %d by %d elements is too large" % (c.size, nin))
            cols = []
            for j in range(nin):
                e = np.zeros(nin, npdt)
                e[j] = 1
                cols.append(f(e.reshape(x.shape)).astype(np.float64).reshape(-1))
            r = np.random.RandomState(0).standard_normal(nin).astype(npdt)
            fr = f(r.reshape(x.shape)).astype(np.float64).reshape(-1)
        except Unsupported:
            raise
        except Exception as e:  # noqa: BLE001
            self.unsupported(why + "; onnx.reference failed: %s" % str(e).splitlines()[0][:120])
        c64 = c.astype(np.float64).reshape(-1)
        M = np.stack(cols, axis=1) - c64[:, None]       # [nout, nin]
        if not (np.isfinite(M).all() and np.isfinite(c64).all()):
            self.unsupported(why)
        select = np.isin(M, (0.0, 1.0)).all() and (np.count_nonzero(M, axis=1) <= 1).all() and not c64.any()
        if x.dtype != "f32" and not select:
            self.unsupported(why + "; a %s input (the map runs in f32)" % x.dtype)
        pred = M @ r.astype(np.float64) + c64
        if np.abs(pred - fr).max(initial=0) > 1e-5 * max(1.0, np.abs(fr).max(initial=0)):
            self.unsupported(why + " (and it is not an affine map of its input %d)" % k)
        nout = c.size
        xf = x if x.dtype == "f32" else self.emit("cast(%s, dtype=f32)" % x.name, "f32", x.shape)
        if select:
            # a pure selection (nearest Resize, crops, reversals): a gather, exact for any value
            xf = self.do_reshape(xf, [nin])
            idx = self.const_tensor(np.argmax(M, axis=1).astype(np.int64), base="linear_map_index")
            y = self.emit("index_select(%s, 0, %s)" % (xf.name, idx.name), "f32", [nout])
            hit = M.any(axis=1)
            if not hit.all():
                ht = self.const_tensor(hit, base="linear_map_hit")
                y = self.emit("where(%s, %s, 0.0)" % (ht.name, y.name), "f32", [nout])
            y = self.do_reshape(y, list(c.shape))
            if x.dtype != "f32":
                y = self.emit("cast(%s, dtype=%s)" % (y.name, x.dtype), x.dtype, y.shape)
            return y
        xf = self.do_reshape(xf, [1, nin])
        mt = self.const_tensor(np.ascontiguousarray(M.T.astype(np.float32)), base="linear_map")
        y = self.emit("%s @ %s" % (xf.name, mt.name), "f32", [1, nout])
        if c64.any():
            ct = self.const_tensor(c64.astype(np.float32).reshape(1, nout), base="linear_offset")
            y = self.emit("%s + %s" % (y.name, ct.name), "f32", [1, nout])
        y = self.do_reshape(y, list(c.shape))
        if x.dtype != "f32":
            y = self.emit("cast(%s, dtype=%s)" % (y.name, x.dtype), x.dtype, y.shape)
        return y

    # symbolic shape vectors (object arrays of ints and symbolic sizes)
    def fold_symbolic(self, node, ins, a):
        op = node.op_type
        x = ins[0]
        if op in ("Identity", "Cast", "CastLike"):
            if op == "Cast" and a.get("to") not in (_onnx().TensorProto.INT64, _onnx().TensorProto.INT32):
                self.unsupported("a cast of a shape with symbolic sizes to %s" % onnx_dtype_name(a.get("to")))
            return [x]
        if op == "Gather":
            idx = ins[1]
            if is_symbolic(idx):
                self.unsupported("gather with symbolic indices")
            return [np.take(x, idx.astype(np.int64), axis=a.get("axis", 0))]
        if op == "Concat":
            return [np.concatenate([v.astype(object) for v in ins], axis=a.get("axis", 0))]
        if op == "Unsqueeze":
            axes = a.get("axes") if "axes" in a else list(ins[1])
            r = x
            for ax in sorted(int(i) % (x.ndim + len(axes)) for i in axes):
                r = np.expand_dims(r, ax)
            return [r]
        if op == "Squeeze":
            axes = a.get("axes") if "axes" in a else (list(ins[1]) if len(ins) > 1 and ins[1] is not None else None)
            return [np.squeeze(x, axis=tuple(int(i) for i in axes) if axes is not None else None)]
        if op == "Reshape":
            shp = [int(i) for i in ins[1]]
            return [x.reshape(shp)]
        if op == "Slice":
            starts, ends = ins[1], ins[2]
            if not is_symbolic(x):
                return None   # a slice of a constant up to a symbolic size: done at run time
            axes = ins[3] if len(ins) > 3 and ins[3] is not None else range(len(starts))
            steps = ins[4] if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
            sl = [slice(None)] * x.ndim
            for s, e, ax, st in zip(starts, ends, axes, steps):
                sl[int(ax)] = slice(int(s), int(min(e, 2**62)) if e > -2**62 else None, int(st))
            return [x[tuple(sl)]]
        if op in ("Mul", "Add", "Sub", "Div", "Equal"):
            b = ins[1]
            r = np.empty(np.broadcast(x, b).shape, dtype=object)
            xb, bb = np.broadcast_arrays(x, b)
            for i in np.ndindex(r.shape):
                p, q = xb[i], bb[i]
                if isinstance(p, (int, np.integer)) and isinstance(q, (int, np.integer)):
                    r[i] = {"Mul": lambda: p * q, "Add": lambda: p + q, "Sub": lambda: p - q,
                            "Div": lambda: p // q, "Equal": lambda: p == q}[op]()
                elif op == "Mul":
                    r[i] = dim_mul(p, q)
                elif op == "Div" and isinstance(q, (int, np.integer)) and q == 1:
                    r[i] = p
                elif op == "Equal":
                    if p == q:
                        r[i] = True
                    else:
                        self.unsupported("comparing symbolic size %s with %s" % (p, q))
                else:
                    self.unsupported("%s of symbolic sizes %s and %s" % (op, p, q))
            if op == "Equal":
                r = r.astype(bool)
            return [r]
        if op == "Shape":
            return self.op_Shape([x], a, node)
        self.unsupported("folding %s of a shape with symbolic sizes" % op)

    # ================================================================ op handlers
    # Each takes (ins, attrs, node) and returns its outputs (T or np.ndarray).

    def need(self, v, i, what="input"):
        if v is None:
            self.unsupported("%s %d is missing" % (what, i))
        return v

    def dtype_of(self, v):
        return v.dtype if isinstance(v, T) else np_to_dtype(v)

    def shape_of(self, v):
        return list(v.shape)

    def want_dtype(self, v, allowed, what="input"):
        dt = self.dtype_of(v)
        if dt not in allowed:
            self.unsupported("%s dtype %s (supported: %s)" % (what, dt or v.dtype, ", ".join(allowed)))
        return dt

    def const_input(self, v, what):
        if v is None:
            return None
        if isinstance(v, T) and v.param and v.name in self.init_arrays:
            return self.init_arrays[v.name]   # a float initializer used as scales, pads ...
        if not is_const(v):
            src = [o for o, m, _, _ in self.inputs if isinstance(v, T) and m == v.name]
            try:
                self.unsupported("%s is computed at run time; modelc needs it known when compiling" % what)
            except Unsupported as e:
                e.needs_input = src[0] if src else None
                raise
        if is_symbolic(v):
            return v
        return v

    # ---- elementwise
    def unary(self, fn, x, allowed=FLOATS, **kw):
        dt = self.want_dtype(x, allowed)
        x = self.tensor(x)
        args = "".join(", %s=%s" % (k, v) for k, v in kw.items())
        return self.emit("%s(%s%s)" % (fn, x.name, args), dt, x.shape)

    def expr1(self, template, x, allowed=FLOATS, dtype=None, single=False):
        """A lowering of one or more modelc operations; with several, f16/bf16 would round
        between them where ONNX rounds once, so those are refused for half types."""
        dt = self.want_dtype(x, allowed)
        if dt in ("f16", "bf16") and not single:
            self.unsupported("a %s lowering of several operations (rounding to %s between them)" % (dt, dt))
        x = self.tensor(x)
        return self.emit(template.format(x=x.name), dtype or dt, x.shape)

    def binary(self, op, a, b, allowed, out_dtype=None, fn=False):
        da, db = self.dtype_of(a), self.dtype_of(b)
        if da != db:
            self.unsupported("operands of dtypes %s and %s" % (da, db))
        if da not in allowed:
            self.unsupported("dtype %s (supported: %s)" % (da, ", ".join(allowed)))
        shape = broadcast(a.shape, b.shape, self.node.op_type)
        if isinstance(a, T) or isinstance(b, T):
            sa = self.operand(a, db if isinstance(b, T) else None)
            sb = self.operand(b, da if isinstance(a, T) else None)
        else:
            sa, sb = self.tensor(a).name, self.tensor(b).name
        if fn:
            expr = "%s(%s, %s)" % (op, sa, sb)
        else:
            expr = "%s %s %s" % (sa, op, sb)
        r = self.emit(expr, out_dtype or da, shape)
        return r

    ARITH = ("f32", "f16", "bf16", "i32", "i64")

    def op_Add(self, i, a, n):
        return self.binary("+", i[0], i[1], self.ARITH)

    def op_Sub(self, i, a, n):
        return self.binary("-", i[0], i[1], self.ARITH)

    def op_Mul(self, i, a, n):
        return self.binary("*", i[0], i[1], self.ARITH)

    def op_Div(self, i, a, n):
        if self.dtype_of(i[0]) in INTS:
            # ONNX integer division truncates toward zero; modelc's // floors.
            q = self.binary("//", i[0], i[1], INTS)
            r = self.binary("%", i[0], i[1], INTS)
            sa, sb = self.tensor(i[0]).name, self.tensor(i[1]).name
            return self.emit("where((%s != 0) and ((%s < 0) != (%s < 0)), %s + 1, %s)"
                             % (r.name, sa, sb, q.name, q.name), q.dtype, q.shape)
        return self.binary("/", i[0], i[1], FLOATS)

    def op_Mod(self, i, a, n):
        dt = self.dtype_of(i[0])
        if a.get("fmod", 0) == 0:
            if dt in FLOATS:
                self.unsupported("Mod of floats needs fmod=1")
            return self.binary("%", i[0], i[1], INTS)
        # C's fmod takes the sign of the dividend; modelc's % (Python's) that of the divisor
        if dt in ("f16", "bf16"):
            self.unsupported("fmod of %s (lowered to several operations, rounding between them)" % dt)
        r = self.binary("%", i[0], i[1], self.ARITH)
        sa = self.tensor(i[0]).name
        sb = self.tensor(i[1]).name
        z = "0" if dt in INTS else "0.0"
        return self.emit("where((%s != %s) and ((%s < %s) != (%s < %s)), %s - %s, %s)"
                         % (r.name, z, r.name, z, sa, z, r.name, sb, r.name), r.dtype, r.shape)

    def op_Pow(self, i, a, n):
        x, y = i
        dx, dy = self.dtype_of(x), self.dtype_of(y)
        if dx not in FLOATS:
            self.unsupported("Pow of base dtype %s (modelc's pow is for floats)" % dx)
        if dy != dx:
            if is_const(y):
                y = y.astype(NP_DTYPE.get(dx, np.float32)) if dx in NP_DTYPE else self.unsupported("exponent")
                if dy in INTS and np.any(np.abs(y) > 2**24):
                    self.unsupported("integer exponent too large for f32")
            else:
                y = self.emit("cast(%s, dtype=%s)" % (y.name, dx), dx, y.shape)
        return self.binary("pow", x, y, FLOATS, fn=True)

    def variadic(self, fn, ins, allowed):
        ins = [v for v in ins if v is not None]
        if len(ins) == 1:
            self.want_dtype(ins[0], allowed)
            return self.tensor(ins[0])
        r = ins[0]
        for v in ins[1:]:
            r = self.binary(fn, r, v, allowed, fn=fn not in "+")
        return r

    def op_Max(self, i, a, n):
        return self.variadic("maximum", i, self.ARITH)

    def op_Min(self, i, a, n):
        return self.variadic("minimum", i, self.ARITH)

    def op_Sum(self, i, a, n):
        return self.variadic("+", i, self.ARITH)

    def op_Mean(self, i, a, n):
        ins = [v for v in i if v is not None]
        if len(ins) > 1 and self.dtype_of(ins[0]) in ("f16", "bf16"):
            self.unsupported("Mean of %s (several operations, rounding between them)" % self.dtype_of(ins[0]))
        r = self.variadic("+", ins, FLOATS)
        return self.emit("%s / %s" % (r.name, fmt_num(len(ins), r.dtype)), r.dtype, r.shape)

    def compare(self, op, i):
        return self.binary(op, i[0], i[1], self.ARITH + ("bool",) if op in ("==",) else self.ARITH, out_dtype="bool")

    def op_Equal(self, i, a, n):
        return self.compare("==", i)

    def op_Less(self, i, a, n):
        return self.compare("<", i)

    def op_Greater(self, i, a, n):
        return self.compare(">", i)

    def op_LessOrEqual(self, i, a, n):
        return self.compare("<=", i)

    def op_GreaterOrEqual(self, i, a, n):
        return self.compare(">=", i)

    def op_And(self, i, a, n):
        return self.binary("and", i[0], i[1], ("bool",))

    def op_Or(self, i, a, n):
        return self.binary("or", i[0], i[1], ("bool",))

    def op_Xor(self, i, a, n):
        return self.binary("logical_xor", i[0], i[1], ("bool",), fn=True)

    def op_Not(self, i, a, n):
        return self.expr1("not {x}", i[0], ("bool",))

    def op_Where(self, i, a, n):
        c, x, y = i
        self.want_dtype(c, ("bool",), "condition")
        dx, dy = self.dtype_of(x), self.dtype_of(y)
        if dx != dy:
            self.unsupported("branches of dtypes %s and %s" % (dx, dy))
        shape = broadcast(broadcast(c.shape, x.shape, "Where"), y.shape, "Where")
        c = self.tensor(c)
        sx = self.operand(x, dx) if isinstance(y, T) or isinstance(x, T) else self.tensor(x).name
        if not isinstance(x, T) and not isinstance(y, T):
            sx, sy = self.tensor(x).name, self.tensor(y).name
        else:
            sx = self.operand(x, dx) if isinstance(y, T) else self.tensor(x).name
            sy = self.operand(y, dy) if isinstance(x, T) else self.tensor(y).name
        if not isinstance(x, T) and not isinstance(y, T):
            pass
        return self.emit("where(%s, %s, %s)" % (c.name, sx, sy), dx, shape)

    def op_Relu(self, i, a, n):
        return self.unary("relu", i[0], FLOATS)

    def op_Abs(self, i, a, n):
        return self.unary("abs", i[0], self.ARITH)

    def op_Neg(self, i, a, n):
        return self.expr1("-{x}", i[0], self.ARITH, single=True)

    def op_Reciprocal(self, i, a, n):
        return self.expr1("1 / {x}", i[0], single=True)

    def op_Softsign(self, i, a, n):
        return self.expr1("{x} / (1 + abs({x}))", i[0])

    def op_HardSigmoid(self, i, a, n):
        al, be = a.get("alpha", 0.2), a.get("beta", 0.5)
        return self.expr1("clamp({x} * %s + %s, min=0, max=1)" % (fmt_num(al, "f32"), fmt_num(be, "f32")), i[0])

    def op_LeakyRelu(self, i, a, n):
        return self.unary("leaky_relu", i[0], negative_slope=fmt_num(a.get("alpha", 0.01), "f32"))

    def op_Elu(self, i, a, n):
        return self.unary("elu", i[0], alpha=fmt_num(a.get("alpha", 1.0), "f32"))

    def op_Selu(self, i, a, n):
        al, ga = a.get("alpha", 1.67326319217681884765625), a.get("gamma", 1.05070102214813232421875)
        return self.expr1("%s * elu({x}, alpha=%s)" % (fmt_num(ga, "f32"), fmt_num(al, "f32")), i[0])

    def op_Celu(self, i, a, n):
        al = fmt_num(a.get("alpha", 1.0), "f32")
        return self.expr1("relu({x}) + minimum(%s * (exp({x} / %s) - 1), 0)" % (al, al), i[0])

    def op_ThresholdedRelu(self, i, a, n):
        return self.expr1("where({x} > %s, {x}, 0)" % fmt_num(a.get("alpha", 1.0), "f32"), i[0])

    def op_Mish(self, i, a, n):
        return self.expr1("{x} * tanh(softplus({x}))", i[0])

    def op_Gelu(self, i, a, n):
        ap = a.get("approximate", b"none")
        ap = ap.decode() if isinstance(ap, bytes) else ap
        return self.unary("gelu", i[0], approximate=ap)

    def op_PRelu(self, i, a, n):
        x, s = i
        self.want_dtype(x, FLOATS)
        if self.dtype_of(s) != self.dtype_of(x):
            self.unsupported("slope dtype differs")
        shape = broadcast(x.shape, s.shape, "PRelu")
        x = self.tensor(x)
        return self.emit("where(%s < 0, %s * %s, %s)" % (x.name, x.name, self.operand(s, x.dtype), x.name), x.dtype, shape)

    def op_Sign(self, i, a, n):
        dt = self.want_dtype(i[0], self.ARITH)
        z = "0" if dt in INTS else "0.0"
        o = "1" if dt in INTS else "1.0"
        return self.expr1("where({x} > %s, %s, where({x} < %s, -%s, %s))" % (z, o, z, o, z), i[0], self.ARITH)

    def op_Floor(self, i, a, n):
        return self.expr1("where(abs({x}) == inf, {x}, {x} - {x} % 1)", i[0], ("f32",))

    def op_Round(self, i, a, n):
        """Round half to even: x - x % 1 and one more where the fraction is above one half, or
        is one half and the floor odd; |x| >= 2**23 (and infinities) are integers already."""
        t = ("where(abs({x}) >= 8388608.0, {x}, where({x} % 1 > 0.5, FL + 1.0, "
             "where({x} % 1 < 0.5, FL, FL + FL % 2)))").replace("FL", "({x} - {x} % 1)")
        return self.expr1(t, i[0], ("f32",))

    def op_DynamicQuantizeLinear(self, i, a, n):
        """uint8 quantization (onnx.reference's op_dynamic_quantize_linear): scale (max(x, 0) -
        min(x, 0)) / 255 (1/255 where they are equal), zero point rint(clip(-min / scale, 0, 255)),
        y = clip(rint(x / scale) + zero point, 0, 255); y and the zero point are uint8, carried
        in i32 as --widen-ints does. Every value is in range, so the casts are exact."""
        if not self.widen:
            self.unsupported("uint8 outputs (--widen-ints carries them in i32)")
        x = self.tensor(i[0])
        self.want_dtype(x, ("f32",))
        nx = numel(x.shape)
        if not isinstance(nx, int):
            self.unsupported("symbolic axes")
        flat = self.do_reshape(x, [nx])
        mx = self.emit("maximum(max(%s, axis=0, keepdim=false), 0.0)" % flat.name, "f32", [])
        mn = self.emit("minimum(min(%s, axis=0, keepdim=false), 0.0)" % flat.name, "f32", [])
        scale = self.emit("where(%s == %s, 1.0, %s - %s) / 255.0" % (mx.name, mn.name, mx.name, mn.name), "f32", [])
        rnd = lambda t: self.op_Round([t], {}, n)  # noqa: E731
        zp = rnd(self.emit("clamp(0.0 - %s / %s, min=0, max=255)" % (mn.name, scale.name), "f32", []))
        q = rnd(self.emit("%s / %s" % (x.name, scale.name), "f32", x.shape))
        y = self.emit("cast(clamp(%s + %s, min=0, max=255), dtype=i32)" % (q.name, zp.name), "i32", x.shape)
        zpi = self.emit("cast(%s, dtype=i32)" % zp.name, "i32", [])
        y.narrow = zpi.narrow = np.uint8
        return [y, scale, zpi]

    def op_MeanVarianceNormalization(self, i, a, n):
        """(X - E[X]) / (sqrt(E[X^2] - E[X]^2) + 1e-9) over axes (ONNX's function body)."""
        x = self.tensor(i[0])
        self.want_dtype(x, ("f32",))
        axes = [int(v) % len(x.shape) for v in a.get("axes", [0, 2, 3])]
        ax = "[%s]" % ", ".join(map(str, axes)) if len(axes) > 1 else str(axes[0])
        sh = [1 if k in axes else d for k, d in enumerate(x.shape)]
        m = self.emit("mean(%s, axis=%s, keepdim=true)" % (x.name, ax), "f32", sh)
        m2 = self.emit("mean(%s * %s, axis=%s, keepdim=true)" % (x.name, x.name, ax), "f32", sh)
        sd = self.emit("sqrt(%s - %s * %s) + 1e-09" % (m2.name, m.name, m.name), "f32", sh)
        return self.emit("(%s - %s) / %s" % (x.name, m.name, sd.name), "f32", x.shape)

    def op_Ceil(self, i, a, n):
        return self.expr1("where(abs({x}) == inf, {x}, {x} + (-{x}) % 1)", i[0], ("f32",))

    def op_IsNaN(self, i, a, n):
        return self.expr1("{x} != {x}", i[0], FLOATS, dtype="bool", single=True)

    def op_IsInf(self, i, a, n):
        pos, neg = a.get("detect_positive", 1), a.get("detect_negative", 1)
        if pos and neg:
            return self.expr1("abs({x}) == inf", i[0], FLOATS, dtype="bool")
        if pos:
            return self.expr1("{x} == inf", i[0], FLOATS, dtype="bool")
        if neg:
            return self.expr1("{x} == -inf", i[0], FLOATS, dtype="bool")
        return self.expr1("{x} != {x} and {x} == {x}", i[0], FLOATS, dtype="bool")

    def op_Clip(self, i, a, n):
        x = i[0]
        dt = self.want_dtype(x, self.ARITH)
        lo = i[1] if len(i) > 1 else None
        hi = i[2] if len(i) > 2 else None
        if self.opset < 11:
            lo = np.array(a.get("min", -np.inf), np.float32)
            hi = np.array(a.get("max", np.inf), np.float32)
        x = self.tensor(x)
        r = x
        if dt == "f32" and (lo is None or (is_const(lo) and lo.size == 1)) and (hi is None or (is_const(hi) and hi.size == 1)):
            kw = []
            if lo is not None:
                kw.append("min=%s" % fmt_num(lo.reshape(()).item(), "f32"))
            if hi is not None:
                kw.append("max=%s" % fmt_num(hi.reshape(()).item(), "f32"))
            if not kw:
                return x
            if lo is not None and hi is not None and lo.reshape(()) > hi.reshape(()):
                # ONNX: min > max gives max everywhere
                return self.emit("minimum(maximum(%s, %s), %s)" % (x.name, fmt_num(lo.item(), dt), fmt_num(hi.item(), dt)), dt, x.shape)
            return self.emit("clamp(%s, %s)" % (x.name, ", ".join(kw)), dt, x.shape)
        if lo is not None:
            r = self.binary("maximum", r, lo, self.ARITH, fn=True)
        if hi is not None:
            r = self.binary("minimum", r, hi, self.ARITH, fn=True)
        return r

    def op_Cast(self, i, a, n):
        to = a["to"]
        if to not in ONNX_DTYPE:
            narrow_to = widen_table().get(to) if self.widen else None
            if narrow_to is not None and not is_narrow_float(narrow_to):
                return self.cast_to_narrow(i[0], narrow_to, to)
            self.unsupported("cast to %s (modelc has f32, f16, bf16, i32, i64, bool%s)"
                             % (onnx_dtype_name(to), "; --widen-ints carries int8, uint8, int16, uint16, "
                                "uint32, int4, uint4, int2, uint2" if not self.widen and to in widen_table() else ""))
        dt = ONNX_DTYPE[to]
        src = self.dtype_of(i[0])
        if src is None:
            self.unsupported("cast from %s" % i[0].dtype)
        if a.get("saturate", 1) == 0 and dt not in FLOATS + INTS + ("bool",):
            self.unsupported("saturate=0")
        if is_const(i[0]) and dt in NP_DTYPE:
            return i[0].astype(NP_DTYPE[dt]) if dt != "bool" else (i[0] != 0)
        x = self.tensor(i[0])
        if getattr(x, "narrow", None) is not None:
            # a widened value (int4 ... in i32, float8 ... in f32) holds its exact value: casting
            # it is casting the wide value, and the result is no longer narrow
            x = T(x.name, x.dtype, x.shape, x.param)
        if src == dt:
            return x
        if src in FLOATS and dt in INTS:
            # ONNX leaves out-of-range and NaN undefined; modelc saturates. Fine.
            pass
        return self.emit("cast(%s, dtype=%s)" % (x.name, dt), dt, x.shape)

    def cast_to_narrow(self, v, narrow, to):
        """Cast to an integer dtype --widen-ints carries wider (int8 ... uint2): from an integer,
        the wide value wrapped to the narrow range (two's complement, as ONNX's Cast of integers
        does); from a float or a bool only where no value can leave the range."""
        bits, lo, hi = narrow_range(narrow)
        name = onnx_dtype_name(to)
        if is_const(v):
            if is_symbolic(v) or v.dtype.kind not in "iub":
                self.unsupported("cast of a constant of dtype %s to %s" % (v.dtype, name))
            w = v.astype(np.int64)
            w = (w - lo) % (1 << bits) + lo
            return w.astype(narrow)
        src = v.dtype
        sn = getattr(v, "narrow", None)
        if src == "bool":
            x = self.emit("cast(%s, dtype=%s)" % (v.name, wide_of(narrow)), wide_of(narrow), v.shape)
        elif src in INTS and not is_narrow_float(sn):
            x = v
            if src != wide_of(narrow):
                x = self.emit("cast(%s, dtype=%s)" % (v.name, wide_of(narrow)), wide_of(narrow), v.shape)
            if sn is None or narrow_range(sn)[1] < lo or narrow_range(sn)[2] > hi:
                r = T(x.name, x.dtype, x.shape, x.param)
                return self.wrap(r, narrow, "Wrap")
        else:
            self.unsupported("cast of %s to %s (ONNX leaves values outside %s's range undefined)"
                             % (np.dtype(sn).name if sn is not None else src, name, name))
        r = T(x.name, x.dtype, x.shape, x.param)
        r.narrow = narrow
        return r

    def op_CastLike(self, i, a, n):
        nl = getattr(i[1], "narrow", None) if isinstance(i[1], T) else None
        if nl is not None:  # the target is a dtype --widen-ints carries wider
            return self.op_Cast([i[0]], {"to": onnx_of_narrow(nl), "saturate": a.get("saturate", 1)}, n)
        if is_const(i[1]) and not is_symbolic(i[1]) and i[1].dtype.type in WIDEN_NP + WIDEN_FLOAT_NP:
            return self.op_Cast([i[0]], {"to": onnx_of_narrow(i[1].dtype.type), "saturate": a.get("saturate", 1)}, n)
        dt = self.dtype_of(i[1])
        inv = {v: k for k, v in ONNX_DTYPE.items()}
        if dt not in inv:
            self.unsupported("cast to %s" % i[1].dtype)
        return self.op_Cast([i[0]], {"to": inv[dt], "saturate": a.get("saturate", 1)}, n)

    def op_Identity(self, i, a, n):
        return i[0]

    def op_Dropout(self, i, a, n):
        if len(i) > 2 and i[2] is not None:
            if not is_const(i[2]) or bool(i[2]):
                self.unsupported("training_mode is on (or computed at run time)")
        if len(n.output) > 1 and n.output[1]:
            self.unsupported("the mask output is not supported")
        return i[0]

    # ---- matmul family
    def op_MatMul(self, i, a, n):
        x, y = i
        dt = self.want_dtype(x, ("f32",))
        if self.dtype_of(y) != dt:
            self.unsupported("operands of dtypes %s and %s" % (dt, self.dtype_of(y)))
        x, y = self.tensor(x), self.tensor(y)
        sx, sy = x.shape, y.shape
        if len(sx) == 0 or len(sy) == 0:
            self.unsupported("MatMul of a scalar")
        xe = x.name
        ye = y.name
        if len(sx) == 1:
            xe = "unsqueeze(%s, 0)" % xe
            sx = [1] + sx
        if len(sy) == 1:
            ye = "unsqueeze(%s, 1)" % ye
            sy = sy + [1]
        if sx[-1] != sy[-2]:
            self.unsupported("MatMul of shapes %s and %s" % (x.shape, y.shape))
        lead = broadcast(sx[:-2], sy[:-2], "MatMul")
        out = lead + [sx[-2], sy[-1]]
        r = self.emit("%s @ %s" % (xe, ye), dt, out)
        final = list(out)
        if len(x.shape) == 1:
            final.pop(-2)
        if len(y.shape) == 1:
            final.pop(-1)
        if final != out:
            r = self.emit("reshape(%s, %s)" % (r.name, self.reshape_list(final)), dt, final)
        return r

    def op_Gemm(self, i, a, n):
        A, B = i[0], i[1]
        C = i[2] if len(i) > 2 else None
        al, be = a.get("alpha", 1.0), a.get("beta", 1.0)
        ta, tb = a.get("transA", 0), a.get("transB", 0)
        dt = self.want_dtype(A, ("f32",))
        if self.dtype_of(B) != dt or (C is not None and self.dtype_of(C) != dt):
            self.unsupported("operands of different dtypes")
        A, B = self.tensor(A), self.tensor(B)
        if len(A.shape) != 2 or len(B.shape) != 2:
            self.unsupported("Gemm of ranks %d and %d" % (len(A.shape), len(B.shape)))
        M = A.shape[1] if ta else A.shape[0]
        N = B.shape[0] if tb else B.shape[1]
        if tb and not ta and al == 1.0 and (C is None or (be == 1.0 and len(C.shape) == 1 and C.shape[0] == N)):
            if C is None:
                return self.emit("linear(%s, %s)" % (A.name, B.name), dt, [M, N])
            return self.emit("linear(%s, %s, %s)" % (A.name, B.name, self.tensor(C).name), dt, [M, N])
        ea = "transpose(%s)" % A.name if ta else A.name
        eb = "transpose(%s)" % B.name if tb else B.name
        e = "%s @ %s" % (ea, eb)
        if al != 1.0:
            e = "(%s) * %s" % (e, fmt_num(al, "f32"))
        if C is not None and be != 0.0:
            broadcast([M, N], C.shape, "Gemm")
            ce = self.operand(C, dt, 2)
            if be != 1.0:
                ce = "%s * %s" % (ce, fmt_num(be, "f32"))
            e = "%s + %s" % (e, ce)
        return self.emit(e, dt, [M, N])

    # ---- reductions
    def reduce_axes(self, i, a, n, axes_input_opset):
        x = i[0]
        r = len(x.shape)
        if self.opset >= axes_input_opset:
            axes = i[1] if len(i) > 1 else None
            if axes is not None:
                axes = self.const_input(axes, "axes")
                axes = [int(v) for v in axes.reshape(-1)]
        else:
            axes = a.get("axes")
        if axes is None or len(axes) == 0:
            if a.get("noop_with_empty_axes", 0):
                return None
            axes = list(range(r))
        axes = sorted(set(int(v) % r for v in axes)) if r else []
        return axes

    def reduce(self, fn, i, a, n, axes_opset=18, pre=None, post=None, allowed=("f32",)):
        x = i[0]
        self.want_dtype(x, allowed)
        x = self.tensor(x)
        axes = self.reduce_axes(i, a, n, axes_opset)
        keep = bool(a.get("keepdims", 1))
        if axes is None:
            e = x.name
            if pre:
                e = pre.format(x=e)
            if post:
                e = post.format(x=e)
            return self.emit(e, x.dtype, x.shape) if e != x.name else x
        if len(x.shape) == 0:
            self.unsupported("reduction of a scalar")
        out = [1 if k in axes else d for k, d in enumerate(x.shape)] if keep else \
            [d for k, d in enumerate(x.shape) if k not in axes]
        e = pre.format(x=x.name) if pre else x.name
        ax = "[%s]" % ", ".join(str(v) for v in axes) if len(axes) > 1 else str(axes[0])
        e = "%s(%s, axis=%s, keepdim=%s)" % (fn, e, ax, "true" if keep else "false")
        if post:
            e = post.format(x=e)
        if not out and not keep:
            pass
        return self.emit(e, x.dtype, out)

    def op_ReduceSum(self, i, a, n):
        return self.reduce("sum", i, a, n, axes_opset=13)

    def op_ReduceMean(self, i, a, n):
        return self.reduce("mean", i, a, n)

    def op_ReduceMax(self, i, a, n):
        if self.dtype_of(i[0]) == "bool":
            return self.reduce_bool("max", i, a, n)
        return self.reduce("max", i, a, n)

    def op_ReduceMin(self, i, a, n):
        if self.dtype_of(i[0]) == "bool":
            return self.reduce_bool("min", i, a, n)
        return self.reduce("min", i, a, n)

    def reduce_bool(self, fn, i, a, n):
        """ReduceMax (any) or ReduceMin (all) of bools: reduced as 0.0 and 1.0, exactly."""
        x = self.tensor(i[0])
        xf = self.emit("cast(%s, dtype=f32)" % x.name, "f32", x.shape)
        r = self.reduce(fn, [xf] + list(i[1:]), a, n)
        return self.emit("cast(%s, dtype=bool)" % r.name, "bool", r.shape)

    def op_ReduceL1(self, i, a, n):
        return self.reduce("sum", i, a, n, pre="abs({x})")

    def op_ReduceL2(self, i, a, n):
        return self.reduce("sum", i, a, n, pre="{x} * {x}", post="sqrt({x})")

    def op_ReduceSumSquare(self, i, a, n):
        return self.reduce("sum", i, a, n, pre="{x} * {x}")

    def op_ReduceLogSum(self, i, a, n):
        return self.reduce("sum", i, a, n, post="log({x})")

    def op_ReduceLogSumExp(self, i, a, n):
        return self.reduce("logsumexp", i, a, n)

    def arg(self, fn, i, a, n):
        x = i[0]
        self.want_dtype(x, ("f32",))
        x = self.tensor(x)
        r = len(x.shape)
        ax = a.get("axis", 0) % r
        keep = bool(a.get("keepdims", 1))
        out = [1 if k == ax else d for k, d in enumerate(x.shape)] if keep else \
            [d for k, d in enumerate(x.shape) if k != ax]
        kd = "true" if keep else "false"
        if a.get("select_last_index", 0):
            L = x.shape[ax]
            if not isinstance(L, int):
                self.unsupported("select_last_index over a symbolic axis")
            return self.emit("%d - %s(flip(%s, %d), axis=%d, keepdim=%s)" % (L - 1, fn, x.name, ax, ax, kd), "i64", out)
        return self.emit("%s(%s, axis=%d, keepdim=%s)" % (fn, x.name, ax, kd), "i64", out)

    def op_ArgMax(self, i, a, n):
        return self.arg("argmax", i, a, n)

    def op_ArgMin(self, i, a, n):
        return self.arg("argmin", i, a, n)

    def softmax(self, fn, i, a, n):
        x = i[0]
        self.want_dtype(x, ("f32",))
        x = self.tensor(x)
        r = len(x.shape)
        if r == 0:
            self.unsupported("softmax of a scalar")
        if self.opset >= 13:
            ax = a.get("axis", -1) % r
            return self.emit("%s(%s, axis=%d)" % (fn, x.name, ax), x.dtype, x.shape)
        ax = a.get("axis", 1) % r
        if ax == r - 1:
            return self.emit("%s(%s, axis=-1)" % (fn, x.name), x.dtype, x.shape)
        # opset < 13: the input is seen as 2-D [prod(:axis), prod(axis:)]
        flat = [numel(x.shape[:ax]), numel(x.shape[ax:])]
        if not all_static(flat):
            self.unsupported("softmax (opset < 13) over symbolic axes")
        f = self.emit("%s(reshape(%s, %s), axis=-1)" % (fn, x.name, self.reshape_list(flat)), x.dtype, flat)
        return self.emit("reshape(%s, %s)" % (f.name, self.reshape_list(x.shape)), x.dtype, x.shape)

    def op_Softmax(self, i, a, n):
        return self.softmax("softmax", i, a, n)

    def op_LogSoftmax(self, i, a, n):
        return self.softmax("log_softmax", i, a, n)

    # ---- shapes
    def reshape_list(self, shape):
        """A shape for reshape(): ints and symbolic sizes; with several symbolic entries that are
        products, one is left to -1 when that is unambiguous."""
        return "[" + ", ".join(dim_str(d) for d in shape) + "]"

    def do_reshape(self, x, shape):
        x = self.tensor(x)
        if list(shape) == list(x.shape):
            return x
        return self.emit("reshape(%s, %s)" % (x.name, self.reshape_list(shape)), x.dtype, shape)

    def op_Shape(self, i, a, n):
        x = i[0]
        s = list(x.shape)
        r = len(s)
        st = a.get("start", 0)
        en = a.get("end", r)
        st = max(0, min(r, st + r if st < 0 else st))
        en = max(0, min(r, en + r if en < 0 else en))
        s = s[st:en]
        if all_static(s):
            return np.array(s, dtype=np.int64)
        return np.array(s, dtype=object)

    def op_Size(self, i, a, n):
        s = numel(i[0].shape)
        if not isinstance(s, int):
            self.unsupported("Size of a tensor with symbolic axes")
        return np.array(s, dtype=np.int64)

    def op_Reshape(self, i, a, n):
        x, shp = i
        shp = self.const_input(shp, "the target shape")
        shp = list(shp.reshape(-1))
        out = []
        for k, d in enumerate(shp):
            if isinstance(d, str):
                out.append(d)
            elif int(d) == 0 and not a.get("allowzero", 0):
                if k >= len(x.shape):
                    self.unsupported("shape entry 0 at axis %d beyond the input's rank" % k)
                out.append(x.shape[k])
            elif int(d) == 0:
                self.unsupported("allowzero=1 with a 0 in the shape (empty tensors)")
            else:
                out.append(int(d))
        if out.count(-1) > 1:
            self.unsupported("more than one -1 in the shape")
        if -1 in out:
            known = [d for d in out if d != -1]
            tot = numel(x.shape)
            kn = numel(known)
            if isinstance(tot, int) and isinstance(kn, int):
                if kn == 0 or tot % kn:
                    self.unsupported("cannot reshape %s to %s" % (x.shape, shp))
                out[out.index(-1)] = tot // kn
            else:
                r = self.sym_div(tot, kn)
                if r is None:
                    # leave -1 to modelc, which checks it
                    t = self.tensor(x)
                    res = self.emit("reshape(%s, %s)" % (t.name, self.reshape_list(out)), t.dtype, out)
                    res.shape = [d if d != -1 else "?" for d in out]
                    self.unsupported("reshape %s to %s: the -1 axis is a symbolic size the importer cannot "
                                     "derive" % (x.shape, shp))
                out[out.index(-1)] = r
        return self.do_reshape(x, out)

    def sym_div(self, tot, kn):
        """tot / kn for products of symbols and ints, or None."""
        def factors(d):
            c, syms = 1, []
            for p in str(d).split("*"):
                if p.lstrip("-").isdigit():
                    c *= int(p)
                else:
                    syms.append(p)
            return c, syms
        ct, st = factors(tot)
        ck, sk = factors(kn)
        st = list(st)
        for s in sk:
            if s not in st:
                return None
            st.remove(s)
        if ck == 0 or ct % ck:
            return None
        c = ct // ck
        parts = ([str(c)] if c != 1 or not st else []) + st
        r = "*".join(parts)
        return int(r) if r.isdigit() else r

    def op_Flatten(self, i, a, n):
        x = i[0]
        r = len(x.shape)
        ax = a.get("axis", 1)
        ax = ax + r if ax < 0 else ax
        out = [numel(x.shape[:ax]), numel(x.shape[ax:])]
        return self.do_reshape(x, out)

    def axes_arg(self, i, a, key="axes"):
        if key in a:
            return list(a[key])
        if len(i) > 1 and i[1] is not None:
            return [int(v) for v in self.const_input(i[1], "axes").reshape(-1)]
        return None

    def op_Squeeze(self, i, a, n):
        x = i[0]
        axes = self.axes_arg(i, a)
        r = len(x.shape)
        if axes is None:
            axes = [k for k, d in enumerate(x.shape) if d == 1]
        axes = [v % r for v in axes]
        for v in axes:
            if x.shape[v] != 1:
                self.unsupported("squeeze of axis %d of size %s" % (v, x.shape[v]))
        return self.do_reshape(x, [d for k, d in enumerate(x.shape) if k not in axes])

    def op_Unsqueeze(self, i, a, n):
        x = i[0]
        axes = self.axes_arg(i, a)
        r = len(x.shape) + len(axes)
        axes = sorted(v % r for v in axes)
        out = list(x.shape)
        for v in axes:
            out.insert(v, 1)
        return self.do_reshape(x, out)

    def op_Transpose(self, i, a, n):
        x = self.tensor(i[0])
        r = len(x.shape)
        perm = list(a.get("perm", range(r - 1, -1, -1)))
        if perm == list(range(r)):
            return x
        return self.emit("permute(%s, dims=[%s])" % (x.name, ", ".join(str(p) for p in perm)), x.dtype,
                         [x.shape[p] for p in perm])

    def op_Concat(self, i, a, n):
        ins = [v for v in i if v is not None]
        # empty constants (an empty split piece) add nothing
        full = [v for v in ins if not (is_const(v) and not is_symbolic(v) and v.size == 0)]
        if full and len(full) < len(ins):
            ins = full
        dt = self.dtype_of(ins[0])
        for v in ins:
            if self.dtype_of(v) != dt:
                self.unsupported("inputs of dtypes %s and %s" % (dt, self.dtype_of(v)))
        r = len(ins[0].shape)
        ax = a["axis"] % r
        out = list(ins[0].shape)
        tot = 0
        for v in ins[1:]:
            if len(v.shape) != r:
                self.unsupported("inputs of different ranks")
        sizes = [v.shape[ax] for v in ins]
        if all(isinstance(s, int) for s in sizes):
            tot = sum(sizes)
        elif len(set(sizes)) == 1:
            tot = dim_mul(len(sizes), sizes[0])
        else:
            self.unsupported("concat of sizes %s along a symbolic axis" % sizes)
        out[ax] = tot
        if len(ins) == 1:
            return self.tensor(ins[0])
        if len(ins) > 16:
            self.unsupported("more than 16 inputs")
        names = [self.tensor(v).name for v in ins]
        return self.emit("concat(%s, axis=%d)" % (", ".join(names), ax), dt, out)

    def op_Split(self, i, a, n):
        x = i[0]
        r = len(x.shape)
        ax = a.get("axis", 0) % r
        L = x.shape[ax]
        if not isinstance(L, int):
            self.unsupported("split of a symbolic axis")
        nout = len(n.output)
        if "split" in a:
            sizes = list(a["split"])
        elif len(i) > 1 and i[1] is not None:
            sizes = [int(v) for v in self.const_input(i[1], "split").reshape(-1)]
        else:
            k = a.get("num_outputs", nout)
            c = -(-L // k)
            sizes = [c] * (L // c) + ([L % c] if L % c else [])
            if len(sizes) != nout:
                self.unsupported("num_outputs=%d of an axis of %d" % (k, L))
        if sum(sizes) != L or any(s < 0 for s in sizes) or not any(sizes):
            self.unsupported("split sizes %s of an axis of %d" % (sizes, L))
        if 0 in sizes:
            # an empty piece (RotaryEmbedding's function body splits off a pass-through part
            # that may be empty): an empty constant, which Concat drops and every other
            # consumer refuses (modelc has no empty tensors)
            npdt = NP_DTYPE.get(self.dtype_of(x)) or (_ml_dtypes().bfloat16 if self.dtype_of(x) == "bf16" else None)
            if npdt is None:
                self.unsupported("an empty split piece of dtype %s" % self.dtype_of(x))
            nz = [s for s in sizes if s]
            pieces = iter(self.op_Split([x], dict(a, split=nz), n) if len(nz) > 1 else [self.tensor(x)])
            res = []
            for s in sizes:
                if s:
                    res.append(next(pieces))
                else:
                    sh = list(x.shape)
                    sh[ax] = 0
                    res.append(np.zeros(sh, npdt))
            return res
        if len(sizes) == 1:
            return [self.tensor(x)]
        x = self.tensor(x)
        res = []
        for s in sizes:
            sh = list(x.shape)
            sh[ax] = s
            res.append((x.dtype, sh))
        return self.emit_multi("split(%s, [%s], dim=%d)" % (x.name, ", ".join(map(str, sizes)), ax), res)

    def op_Slice(self, i, a, n):
        x = i[0]
        if self.opset < 10:
            starts, ends = a["starts"], a["ends"]
            axes = a.get("axes", list(range(len(starts))))
            steps = [1] * len(starts)
        else:
            starts = [int(v) for v in self.const_input(i[1], "starts").reshape(-1)]
            ends = [v if isinstance(v, str) else int(v) for v in self.const_input(i[2], "ends").reshape(-1)]
            axes = [int(v) for v in self.const_input(i[3], "axes").reshape(-1)] if len(i) > 3 and i[3] is not None else list(range(len(starts)))
            steps = [int(v) for v in self.const_input(i[4], "steps").reshape(-1)] if len(i) > 4 and i[4] is not None else [1] * len(starts)
        x = self.tensor(x)
        r = len(x.shape)
        cur = x
        shape = list(x.shape)
        for s, e, ax, st in zip(starts, ends, axes, steps):
            ax = ax % r
            L = shape[ax]
            if st == 0:
                self.unsupported("step 0")
            if isinstance(e, str):
                if e == L and s == 0 and st == 1:
                    continue
                if s != 0 or st != 1 or not isinstance(L, int):
                    self.unsupported("slice to symbolic end %s from %d step %d" % (e, s, st))
                cur = self.emit("slice(%s, %d, 0, %s)" % (cur.name, ax, e), cur.dtype, shape[:ax] + [e] + shape[ax + 1:])
                shape = list(cur.shape)
                continue
            if not isinstance(L, int):
                if st == 1 and s >= 0 and e >= 2**31 - 1:
                    if s == 0:
                        continue
                    self.unsupported("slice of a symbolic axis from %d" % s)
                self.unsupported("slice of a symbolic axis")
            if st > 0:
                s = s + L if s < 0 else s
                e = e + L if e < 0 else e
                s, e = max(0, min(L, s)), max(0, min(L, e))
            else:
                s = s + L if s < 0 else s
                e = e + L if e < 0 else e
                s, e = max(0, min(L - 1, s)), max(-1, min(L - 1, e))
            cnt = len(range(s, e, st))
            if cnt == 0:
                self.unsupported("an empty slice (modelc has no empty tensors)")
            if cnt == L and st == 1:
                continue
            if st > 0:
                cur = self.emit("slice(%s, %d, %d, %d, %d)" % (cur.name, ax, s, s + (cnt - 1) * st + 1, st),
                                cur.dtype, shape[:ax] + [cnt] + shape[ax + 1:])
            else:
                f = self.emit("flip(%s, %d)" % (cur.name, ax), cur.dtype, shape)
                s2 = L - 1 - s
                if cnt == L and st == -1:
                    cur = f
                else:
                    cur = self.emit("slice(%s, %d, %d, %d, %d)" % (f.name, ax, s2, s2 + (cnt - 1) * (-st) + 1, -st),
                                    cur.dtype, shape[:ax] + [cnt] + shape[ax + 1:])
            shape = list(cur.shape)
        return cur

    def op_Gather(self, i, a, n):
        x, idx = i
        r = len(x.shape)
        ax = a.get("axis", 0) % r
        L = x.shape[ax]
        if is_const(idx):
            if is_symbolic(idx):
                self.unsupported("symbolic indices")
            if not isinstance(L, int):
                self.unsupported("gather along a symbolic axis")
            iv = idx.astype(np.int64)
            if np.any(iv < -L) or np.any(iv >= L):
                self.unsupported("index out of range [%d, %d)" % (-L, L))
            iv = np.where(iv < 0, iv + L, iv)
            out = x.shape[:ax] + list(iv.shape) + x.shape[ax + 1:]
            x = self.tensor(x)
            flat = iv.reshape(-1)
            if flat.size == 1:
                s = int(flat[0])
                t = self.emit("slice(%s, %d, %d, %d)" % (x.name, ax, s, s + 1), x.dtype,
                              x.shape[:ax] + [1] + x.shape[ax + 1:])
            elif np.array_equal(flat, np.arange(flat[0], flat[0] + flat.size)):
                s = int(flat[0])
                t = self.emit("slice(%s, %d, %d, %d)" % (x.name, ax, s, s + flat.size), x.dtype,
                              x.shape[:ax] + [flat.size] + x.shape[ax + 1:])
            else:
                if x.dtype != "f32":
                    self.unsupported("gathering %s values at scattered indices (modelc's index_select reads f32)" % x.dtype)
                it = self.const_tensor(flat, base="index")
                t = self.emit("index_select(%s, %d, %s)" % (x.name, ax, it.name), x.dtype,
                              x.shape[:ax] + [flat.size] + x.shape[ax + 1:])
            return self.do_reshape(t, out)
        self.want_dtype(idx, INTS, "indices")
        if not isinstance(L, int):
            self.unsupported("gather along a symbolic axis")
        x = self.tensor(x)
        if ax == 0 and r == 2 and x.dtype == "f32" and x.param:
            # an embedding table; ids out of range fail the run. Negative ids wrap first.
            ids = self.emit("where(%s < 0, %s + %d, %s)" % (idx.name, idx.name, L, idx.name), idx.dtype, idx.shape)
            return self.emit("embedding(%s, %s)" % (ids.name, x.name), x.dtype, list(idx.shape) + x.shape[1:])
        if x.dtype != "f32":
            self.unsupported("gathering %s values at run-time indices (modelc's index_select reads f32)" % x.dtype)
        ids = self.emit("where(%s < 0, %s + %d, %s)" % (idx.name, idx.name, L, idx.name), idx.dtype, idx.shape)
        nidx = numel(idx.shape)
        if not isinstance(nidx, int):
            self.unsupported("indices with symbolic axes along a non-embedding gather")
        flat = self.do_reshape(ids, [nidx])
        t = self.emit("index_select(%s, %d, %s)" % (x.name, ax, flat.name), x.dtype,
                      x.shape[:ax] + [nidx] + x.shape[ax + 1:])
        return self.do_reshape(t, x.shape[:ax] + list(idx.shape) + x.shape[ax + 1:])

    def op_GatherElements(self, i, a, n):
        x, idx = i
        if is_const(x) and not is_symbolic(x) and self.dtype_of(x) in INTS and x.size and np.abs(x).max() < 2 ** 24:
            # integers exact in f32: gathered as floats, cast back
            dt = self.dtype_of(x)
            r = self.op_GatherElements([x.astype(np.float32), idx], a, n)
            return self.emit("cast(%s, dtype=%s)" % (r.name, dt), dt, r.shape)
        self.want_dtype(x, ("f32",))
        r = len(x.shape)
        ax = a.get("axis", 0) % r
        L = x.shape[ax]
        if not isinstance(L, int) or len(idx.shape) != r:
            self.unsupported("indices of another rank, or a symbolic axis")
        for k in range(r):
            if k != ax and idx.shape[k] != x.shape[k] and not (isinstance(idx.shape[k], int) and isinstance(x.shape[k], int) and idx.shape[k] <= x.shape[k]):
                self.unsupported("index shape %s larger than data %s" % (idx.shape, x.shape))
        x = self.tensor(x)
        if is_const(idx):
            iv = idx.astype(np.int64)
            iv = np.where(iv < 0, iv + L, iv)
            it = self.const_tensor(iv, base="index")
        else:
            self.want_dtype(idx, ("i64",), "indices")
            it = self.emit("where(%s < 0, %s + %d, %s)" % (idx.name, idx.name, L, idx.name), "i64", idx.shape)
        return self.emit("gather(%s, %d, %s)" % (x.name, ax, it.name), x.dtype, list(idx.shape))

    def op_Expand(self, i, a, n):
        x, shp = i
        shp = self.const_input(shp, "the shape")
        shp = list(shp.reshape(-1))
        out = broadcast(x.shape, shp, "Expand")
        x = self.tensor(x)
        if out == x.shape:
            return x
        return self.emit("expand(%s, shape=%s)" % (x.name, self.reshape_list(out)), x.dtype, out)

    def op_Tile(self, i, a, n):
        x, reps = i
        reps = [int(v) for v in self.const_input(reps, "repeats").reshape(-1)]
        if any(r <= 0 for r in reps):
            self.unsupported("repeat counts %s" % reps)
        x = self.tensor(x)
        if all(r == 1 for r in reps):
            return x
        if not all_static(x.shape):
            self.unsupported("tile of symbolic axes")
        out = [d * r for d, r in zip(x.shape, reps)]
        return self.emit("repeat(%s, reps=[%s])" % (x.name, ", ".join(map(str, reps))), x.dtype, out)

    def op_ConstantOfShape(self, i, a, n):
        shp = list(self.const_input(i[0], "shape").reshape(-1))
        v = a.get("value")
        val = _onnx().numpy_helper.to_array(v).reshape(-1)[0] if v is not None else np.float32(0)
        dt = np_to_dtype(np.asarray(val))
        if dt is None:
            self.unsupported("value of dtype %s" % np.asarray(val).dtype)
        e = "full(%s, %s)" % (self.reshape_list(shp), fmt_num(float(val), "f32"))
        if dt != "f32":
            e = "cast(%s, dtype=%s)" % (e, dt)
        return self.emit(e, dt, shp)

    def op_Pad(self, i, a, n):
        x = i[0]
        mode = a.get("mode", b"constant")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        self.want_dtype(x, ("f32",))
        r = len(x.shape)
        if self.opset < 11:
            pads = list(a["pads"])
            val = a.get("value", 0.0)
            axes = list(range(r))
        else:
            pads = [int(v) for v in self.const_input(i[1], "pads").reshape(-1)]
            val = 0.0
            if len(i) > 2 and i[2] is not None:
                val = float(self.const_input(i[2], "constant_value").reshape(-1)[0])
            axes = list(range(r))
            if len(i) > 3 and i[3] is not None:
                axes = [int(v) % r for v in self.const_input(i[3], "axes").reshape(-1)]
        k = len(axes)
        per = {ax: (pads[j], pads[j + k]) for j, ax in enumerate(axes)}
        mm = {"constant": "constant", "reflect": "reflect", "edge": "replicate"}
        if mode not in mm:
            self.unsupported("mode '%s'" % mode)
        x = self.tensor(x)
        out = list(x.shape)
        for ax, (b, e) in per.items():
            if (b or e) and not isinstance(out[ax], int):
                self.unsupported("pad of a symbolic axis")
            if b or e:
                out[ax] = out[ax] + b + e
                if out[ax] <= 0:
                    self.unsupported("padding leaves an empty axis")
        padded = [ax for ax in range(r) if per.get(ax, (0, 0)) != (0, 0)]
        if not padded:
            return x
        first = min(padded)
        if mode != "constant":
            if r - first > 3 or any(b < 0 or e < 0 for b, e in per.values()):
                self.unsupported("mode '%s' on axis %d of %d (modelc pads the last 1 to 3 axes) or negative pads" % (mode, first, r))
            for ax in padded:
                b, e = per[ax]
                if mode == "reflect" and (b >= x.shape[ax] or e >= x.shape[ax]):
                    self.unsupported("reflect pad of %d on an axis of %d" % (max(b, e), x.shape[ax]))
            if r - first + 2 > r + 0 and r - first >= r - 1 and r < r - first + 1:
                pass
        lst = []
        for ax in range(r - 1, first - 1, -1):
            b, e = per.get(ax, (0, 0))
            lst += [b, e]
        kw = ", mode=%s" % mm[mode] if mode != "constant" else (", value=%s" % fmt_num(val, "f32") if val != 0 else "")
        return self.emit("pad(%s, pad=[%s]%s)" % (x.name, ", ".join(map(str, lst)), kw), x.dtype, out)

    def op_Trilu(self, i, a, n):
        x = i[0]
        dt = self.want_dtype(x, self.ARITH + ("bool",))
        k = 0
        if len(i) > 1 and i[1] is not None:
            k = int(self.const_input(i[1], "k").reshape(-1)[0])
        if len(x.shape) < 2:
            self.unsupported("rank below 2")
        fn = "triu" if a.get("upper", 1) else "tril"
        if dt != "f32":
            R, C = x.shape[-2:]
            if not all_static([R, C]):
                self.unsupported("symbolic matrix axes")
            one = np.ones((R, C), bool)
            mask = np.triu(one, k) if fn == "triu" else np.tril(one, k)
            x = self.tensor(x)
            mt = self.const_tensor(mask, base="trilu_mask")
            z = {"bool": "0", "i32": "0", "i64": "0"}.get(dt, "0.0")
            return self.emit("where(%s, %s, %s)" % (mt.name, x.name, z), dt, x.shape)
        return self.unary(fn, x, ("f32",), diagonal=str(k))

    def op_CumSum(self, i, a, n):
        x, axis = i
        self.want_dtype(x, ("f32",))
        ax = int(self.const_input(axis, "axis").reshape(-1)[0]) % len(x.shape)
        x = self.tensor(x)
        L = x.shape[ax]
        if not isinstance(L, int):
            self.unsupported("cumsum over a symbolic axis")
        src = x
        if a.get("reverse", 0):
            src = self.emit("flip(%s, %d)" % (x.name, ax), x.dtype, x.shape)
        c = self.emit("cumsum(%s, %d)" % (src.name, ax), x.dtype, x.shape)
        if a.get("exclusive", 0):
            zs = list(x.shape)
            zs[ax] = 1
            if L == 1:
                c = self.emit("full(%s, 0)" % self.reshape_list(zs), x.dtype, x.shape)
            else:
                c = self.emit("concat(full(%s, 0), slice(%s, %d, 0, %d), axis=%d)" % (self.reshape_list(zs), c.name, ax, L - 1, ax), x.dtype, x.shape)
        if a.get("reverse", 0):
            c = self.emit("flip(%s, %d)" % (c.name, ax), x.dtype, x.shape)
        return c

    def op_DepthToSpace(self, i, a, n):
        x = self.tensor(i[0])
        self.want_dtype(x, self.ARITH + ("bool",))
        if len(x.shape) != 4 or not all_static(x.shape):
            self.unsupported("input of shape %s" % x.shape)
        b = a["blocksize"]
        N, C, H, W = x.shape
        mode = a.get("mode", b"DCR")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        if mode == "DCR":
            t = self.emit("reshape(%s, [%d, %d, %d, %d, %d, %d])" % (x.name, N, b, b, C // (b * b), H, W), x.dtype, [])
            t = self.emit("permute(%s, dims=[0, 3, 4, 1, 5, 2])" % t.name, x.dtype, [])
        else:
            t = self.emit("reshape(%s, [%d, %d, %d, %d, %d, %d])" % (x.name, N, C // (b * b), b, b, H, W), x.dtype, [])
            t = self.emit("permute(%s, dims=[0, 1, 4, 2, 5, 3])" % t.name, x.dtype, [])
        out = [N, C // (b * b), H * b, W * b]
        return self.emit("reshape(%s, %s)" % (t.name, self.reshape_list(out)), x.dtype, out)

    def op_SpaceToDepth(self, i, a, n):
        x = self.tensor(i[0])
        if len(x.shape) != 4 or not all_static(x.shape):
            self.unsupported("input of shape %s" % x.shape)
        b = a["blocksize"]
        N, C, H, W = x.shape
        mode = a.get("mode", b"DCR")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        if mode not in ("DCR", "CRD"):
            self.unsupported("mode %s" % mode)
        t = self.emit("reshape(%s, [%d, %d, %d, %d, %d, %d])" % (x.name, N, C, H // b, b, W // b, b), x.dtype, [])
        perm = "0, 3, 5, 1, 2, 4" if mode == "DCR" else "0, 1, 3, 5, 2, 4"
        t = self.emit("permute(%s, dims=[%s])" % (t.name, perm), x.dtype, [])
        out = [N, C * b * b, H // b, W // b]
        return self.emit("reshape(%s, %s)" % (t.name, self.reshape_list(out)), x.dtype, out)

    # ---- neural network
    def spatial(self, x, w_shape, a, kind):
        """(kernel, stride, dilation, pads [b0, b1, ..., e0, e1, ...]) of a conv or pool."""
        nsp = len(x.shape) - 2
        ks = list(a.get("kernel_shape", w_shape[2:] if w_shape else []))
        if len(ks) != nsp:
            self.unsupported("kernel_shape %s for a %d-D input" % (ks, len(x.shape)))
        st = list(a.get("strides", [1] * nsp))
        dil = list(a.get("dilations", [1] * nsp))
        auto = a.get("auto_pad", b"NOTSET")
        auto = auto.decode() if isinstance(auto, bytes) else auto
        pads = list(a.get("pads", [0] * (2 * nsp)))
        sp = x.shape[2:]
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            if not all_static(sp):
                self.unsupported("auto_pad over symbolic axes")
            pads = [0] * (2 * nsp)
            for d in range(nsp):
                out = -(-sp[d] // st[d])
                tot = max(0, (out - 1) * st[d] + (ks[d] - 1) * dil[d] + 1 - sp[d])
                lo = tot // 2 if auto == "SAME_UPPER" else tot - tot // 2
                pads[d], pads[d + nsp] = lo, tot - lo
        elif auto == "VALID":
            pads = [0] * (2 * nsp)
        elif auto != "NOTSET":
            self.unsupported("auto_pad %s" % auto)
        return ks, st, dil, pads

    def pair(self, v):
        return "[%s]" % ", ".join(str(int(t)) for t in v) if len(set(v)) > 1 else str(int(v[0]))

    def pad4(self, pads):
        # ONNX [t, l, b, r] = modelc's [top, left, bottom, right]
        if pads[0] == pads[2] and pads[1] == pads[3]:
            return self.pair(pads[:2])
        return "[%s]" % ", ".join(str(int(p)) for p in pads)

    def to2d(self, x):
        """[N, C, L] as [N, C, 1, L] (1-D conv and pooling run as 2-D)."""
        return self.emit("unsqueeze(%s, 2)" % x.name, x.dtype, x.shape[:2] + [1] + x.shape[2:])

    def op_Conv(self, i, a, n):
        x, w = i[0], i[1]
        b = i[2] if len(i) > 2 else None
        self.want_dtype(x, ("f32",))
        if self.dtype_of(w) != "f32":
            self.unsupported("weight dtype")
        x, w = self.tensor(x), self.tensor(w)
        if len(x.shape) not in (3, 4):
            self.unsupported("a %d-D convolution (modelc has 1-D and 2-D)" % (len(x.shape) - 2))
        ks, st, dil, pads = self.spatial(x, w.shape, a, "conv")
        g = a.get("group", 1)
        if w.shape[1] * g != x.shape[1]:
            self.unsupported("weight %s with group %d for %s" % (w.shape, g, x.shape))
        one_d = len(x.shape) == 3
        if one_d:
            x = self.to2d(x)
            w = self.emit("unsqueeze(%s, 2)" % w.name, w.dtype, w.shape[:2] + [1] + w.shape[2:])
            ks, st, dil, pads = [1] + ks, [1] + st, [1] + dil, [0, pads[0], 0, pads[1]]
        outsp = []
        for d in range(2):
            L = x.shape[2 + d]
            if not isinstance(L, int):
                self.unsupported("convolution over a symbolic spatial axis")
            o = (L + pads[d] + pads[d + 2] - dil[d] * (ks[d] - 1) - 1) // st[d] + 1
            if o < 1:
                self.unsupported("output size below 1")
            outsp.append(o)
        # a zero bias the exporter made up for a conv without one (torch.onnx.export's val_6
        # for resnet18's bias=False convs) is left out: it is no state_dict entry, and a
        # state_dict loaded as the weights would lack it. One named ...bias is the model's own.
        bv = b if isinstance(b, np.ndarray) else self.init_arrays.get(getattr(b, "name", None))
        if b is not None and not n.input[2].endswith("bias") and bv is not None and not is_symbolic(bv) \
                and not np.any(bv):
            b = None
        args = [x.name, w.name] + ([self.tensor(b).name] if b is not None else [])
        kw = []
        if st != [1, 1]:
            kw.append("stride=%s" % self.pair(st))
        if any(pads):
            kw.append("padding=%s" % self.pad4(pads))
        if dil != [1, 1]:
            kw.append("dilation=%s" % self.pair(dil))
        if g != 1:
            kw.append("groups=%d" % g)
        out = [x.shape[0], w.shape[0]] + outsp
        r = self.emit("conv2d(%s)" % ", ".join(args + kw), "f32", out)
        if one_d:
            r = self.do_reshape(r, [out[0], out[1], out[3]])
        return r

    def op_ConvTranspose(self, i, a, n):
        x, w = i[0], i[1]
        b = i[2] if len(i) > 2 else None
        self.want_dtype(x, ("f32",))
        x, w = self.tensor(x), self.tensor(w)
        if len(x.shape) != 4:
            self.unsupported("a %d-D transposed convolution (modelc has 2-D)" % (len(x.shape) - 2))
        g = a.get("group", 1)
        ks = list(a.get("kernel_shape", w.shape[2:]))
        st = list(a.get("strides", [1, 1]))
        dil = list(a.get("dilations", [1, 1]))
        op = list(a.get("output_padding", [0, 0]))
        auto = a.get("auto_pad", b"NOTSET")
        auto = auto.decode() if isinstance(auto, bytes) else auto
        pads = list(a.get("pads", [0, 0, 0, 0]))
        H, W = x.shape[2], x.shape[3]
        if not all_static([H, W]):
            self.unsupported("symbolic spatial axes")
        if "output_shape" in a or auto in ("SAME_UPPER", "SAME_LOWER"):
            if "output_shape" in a:
                osz = list(a["output_shape"])[-2:]
            else:
                osz = [H * st[0], W * st[1]]
            pads = [0, 0, 0, 0]
            for d, L in enumerate([H, W]):
                tot = st[d] * (L - 1) + op[d] + ((ks[d] - 1) * dil[d] + 1) - osz[d]
                if tot < 0:
                    self.unsupported("output_shape larger than the full output")
                if auto == "SAME_UPPER" or ("output_shape" in a and auto != "SAME_LOWER"):
                    pads[d], pads[d + 2] = tot // 2, tot - tot // 2
                else:
                    pads[d], pads[d + 2] = tot - tot // 2, tot // 2
        elif auto == "VALID":
            pads = [0, 0, 0, 0]
        # modelc's padding is symmetric; an asymmetric pad is a symmetric one plus a crop or output_padding
        sym = [min(pads[0], pads[2]), min(pads[1], pads[3])]
        extra = [pads[2] - sym[0], pads[3] - sym[1]]   # more at the end: output_padding cannot remove
        pre = [pads[0] - sym[0], pads[1] - sym[1]]
        full = [(L - 1) * st[d] - 2 * sym[d] + dil[d] * (ks[d] - 1) + op[d] + 1 for d, L in enumerate([H, W])]
        outsz = [full[d] - pre[d] - extra[d] for d in range(2)]
        if any(o < 1 for o in outsz):
            self.unsupported("output size below 1")
        if any(o >= max(s, dd) for o, s, dd in zip(op, st, dil)):
            self.unsupported("output_padding %s not below stride %s or dilation %s" % (op, st, dil))
        args = [x.name, w.name] + ([self.tensor(b).name] if b is not None else [])
        kw = []
        if st != [1, 1]:
            kw.append("stride=%s" % self.pair(st))
        if any(sym):
            kw.append("padding=%s" % self.pair(sym))
        if any(op):
            kw.append("output_padding=%s" % self.pair(op))
        if dil != [1, 1]:
            kw.append("dilation=%s" % self.pair(dil))
        if g != 1:
            kw.append("groups=%d" % g)
        O = w.shape[1] * g
        r = self.emit("conv_transpose2d(%s)" % ", ".join(args + kw), "f32", [x.shape[0], O] + full)
        for d in range(2):
            if pre[d] or extra[d]:
                sh = list(r.shape)
                sh[2 + d] = outsz[d]
                r = self.emit("slice(%s, %d, %d, %d)" % (r.name, 2 + d, pre[d], pre[d] + outsz[d]), "f32", sh)
        return r

    def pool(self, fn, i, a, n):
        x = i[0]
        self.want_dtype(x, ("f32",))
        x = self.tensor(x)
        if len(n.output) > 1 and n.output[1]:
            self.unsupported("the Indices output")
        if len(x.shape) not in (3, 4):
            self.unsupported("%d-D pooling (modelc has 2-D)" % (len(x.shape) - 2))
        ks, st, dil, pads = self.spatial(x, None, a, "pool")
        ceil = a.get("ceil_mode", 0)
        one_d = len(x.shape) == 3
        if one_d:
            x = self.to2d(x)
            ks, st, dil, pads = [1] + ks, [1] + st, [1] + dil, [0, pads[0], 0, pads[1]]
        outsp = []
        for d in range(2):
            L = x.shape[2 + d]
            if not isinstance(L, int):
                self.unsupported("pooling over a symbolic axis")
            eff = dil[d] * (ks[d] - 1) + 1
            num = L + pads[d] + pads[d + 2] - eff
            if ceil:
                o = -(-num // st[d]) + 1
                if (o - 1) * st[d] >= L + pads[d]:
                    o -= 1
            else:
                o = num // st[d] + 1
            if o < 1:
                self.unsupported("output size below 1")
            # ONNX's own output size rule must agree with modelc's (PyTorch's)
            onnx_o = (-(-num // st[d]) if ceil else num // st[d]) + 1
            if onnx_o != o:
                if self.opset < 19:
                    self.unsupported("ceil_mode output size %d where modelc (PyTorch) gives %d" % (onnx_o, o))
            outsp.append(o)
        for d in range(2):
            eff = dil[d] * (ks[d] - 1) + 1
            if max(pads[d], pads[d + 2]) > eff // 2:
                self.unsupported("padding %d above half the kernel %d (modelc, as PyTorch, refuses windows "
                                 "that may lie entirely in the padding)" % (max(pads[d], pads[d + 2]), eff))
        kw = ["kernel=%s" % self.pair(ks)]
        kw.append("stride=%s" % self.pair(st))
        if any(pads):
            kw.append("padding=%s" % self.pad4(pads))
        if fn == "max_pool2d":
            if dil != [1, 1]:
                kw.append("dilation=%s" % self.pair(dil))
        else:
            if dil != [1, 1]:
                self.unsupported("dilated average pooling")
            cip = a.get("count_include_pad", 0)
            if ceil and cip:
                self.unsupported("ceil_mode with count_include_pad")
            kw.append("count_include_pad=%s" % ("true" if cip else "false"))
        if ceil:
            kw.append("ceil_mode=true")
        out = x.shape[:2] + outsp
        r = self.emit("%s(%s, %s)" % (fn, x.name, ", ".join(kw)), "f32", out)
        if one_d:
            r = self.do_reshape(r, [out[0], out[1], out[3]])
        return r

    def op_MaxPool(self, i, a, n):
        if a.get("storage_order", 0) and len(n.output) > 1:
            self.unsupported("storage_order")
        return self.pool("max_pool2d", i, a, n)

    def op_AveragePool(self, i, a, n):
        """avg_pool2d where modelc's pooling matches; otherwise (3-D, dilation, pads above half
        the kernel, ceil_mode with count_include_pad) the linear map it is (linear_map)."""
        start = len(self.lines)
        try:
            return self.pool("avg_pool2d", i, a, n)
        except Unsupported as e:
            if getattr(e, "needs_input", None) or not hasattr(e, "reason"):
                raise
            why = e.reason
        del self.lines[start:]
        return self.linear_map(n, i, 0, why)

    def op_GlobalAveragePool(self, i, a, n):
        x = self.tensor(i[0])
        self.want_dtype(x, ("f32",))
        r = len(x.shape)
        if r < 3:
            self.unsupported("rank %d" % r)
        axes = list(range(2, r))
        ax = "[%s]" % ", ".join(map(str, axes)) if len(axes) > 1 else str(axes[0])
        return self.emit("mean(%s, axis=%s, keepdim=true)" % (x.name, ax), "f32", x.shape[:2] + [1] * (r - 2))

    def op_GlobalMaxPool(self, i, a, n):
        x = self.tensor(i[0])
        self.want_dtype(x, ("f32",))
        r = len(x.shape)
        if r < 3:
            self.unsupported("rank %d" % r)
        axes = list(range(2, r))
        ax = "[%s]" % ", ".join(map(str, axes)) if len(axes) > 1 else str(axes[0])
        return self.emit("max(%s, axis=%s, keepdim=true)" % (x.name, ax), "f32", x.shape[:2] + [1] * (r - 2))

    def op_BatchNormalization(self, i, a, n):
        if a.get("training_mode", 0) or any(o for o in n.output[1:]):
            self.unsupported("training mode (running statistics outputs)")
        if self.opset < 9 and a.get("spatial", 1) == 0:
            self.unsupported("spatial=0")
        x = self.tensor(i[0])
        self.want_dtype(x, ("f32",))
        for k in range(1, 5):
            if self.dtype_of(i[k]) != "f32":
                self.unsupported("input %d of dtype %s" % (k, self.dtype_of(i[k])))
        if len(x.shape) < 2:
            self.unsupported("rank %d" % len(x.shape))
        C = x.shape[1]
        for k in range(1, 5):
            if list(i[k].shape) != [C]:
                self.unsupported("input %d of shape %s, not [%s]" % (k, list(i[k].shape), C))
        args = [x.name] + [self.tensor(i[k]).name for k in range(1, 5)]
        return self.emit("batch_norm(%s, eps=%s)" % (", ".join(args), fmt_num(a.get("epsilon", 1e-5), "f32")), "f32", x.shape)

    def op_InstanceNormalization(self, i, a, n):
        x = self.tensor(i[0])
        self.want_dtype(x, ("f32",))
        if len(x.shape) < 3:
            self.unsupported("rank %d" % len(x.shape))
        return self.emit("instance_norm(%s, %s, %s, eps=%s)" % (x.name, self.tensor(i[1]).name, self.tensor(i[2]).name,
                                                               fmt_num(a.get("epsilon", 1e-5), "f32")), "f32", x.shape)

    def op_LayerNormalization(self, i, a, n):
        y = self.layer_norm(i, a, n)
        if not any(o for o in n.output[1:]):
            return y
        # Mean and InvStdDev: over the normalized axes, kept as size 1
        x = self.tensor(i[0])
        r = len(x.shape)
        ax = a.get("axis", -1) % r
        axes = list(range(ax, r))
        al = "[%s]" % ", ".join(map(str, axes)) if len(axes) > 1 else str(axes[0])
        sh = x.shape[:ax] + [1] * (r - ax)
        m = self.emit("mean(%s, axis=%s, keepdim=true)" % (x.name, al), "f32", sh)
        d = self.emit("%s - %s" % (x.name, m.name), "f32", x.shape)
        v = self.emit("rsqrt(mean(%s * %s, axis=%s, keepdim=true) + %s)" % (d.name, d.name, al, fmt_num(a.get("epsilon", 1e-5), "f32")), "f32", sh)
        return [y, m, v]

    def layer_norm(self, i, a, n):
        x = self.tensor(i[0])
        self.want_dtype(x, ("f32",))
        r = len(x.shape)
        ax = a.get("axis", -1) % r
        ns = x.shape[ax:]
        if a.get("stash_type", 1) != 1:
            self.unsupported("stash_type %d" % a["stash_type"])
        args = [x.name]
        for k, what in ((1, "scale"), (2, "bias")):
            if len(i) > k and i[k] is not None:
                v = i[k]
                if list(v.shape) != list(ns):
                    if is_const(v) or (len(v.shape) <= len(ns) and broadcast(ns, v.shape, "LayerNormalization") == ns):
                        vt = self.tensor(v)
                        v = self.emit("expand(%s, shape=%s)" % (vt.name, self.reshape_list(ns)), "f32", ns)
                    else:
                        self.unsupported("%s of shape %s for normalized shape %s" % (what, list(v.shape), ns))
                args.append(self.tensor(v).name)
            elif k == 2 and len(args) == 2:
                pass
        if not all_static(ns):
            self.unsupported("normalizing over symbolic axes")
        return self.emit("layer_norm(%s, eps=%s, normalized_shape=[%s])" % (
            ", ".join(args), fmt_num(a.get("epsilon", 1e-5), "f32"), ", ".join(map(str, ns))), "f32", x.shape)

    def op_GroupNormalization(self, i, a, n):
        if self.opset < 21:
            self.unsupported("opset-18 GroupNormalization (scale per group) is deprecated; modelc's is per channel")
        x = self.tensor(i[0])
        self.want_dtype(x, ("f32",))
        g = a["num_groups"]
        return self.emit("group_norm(%s, %s, %s, num_groups=%d, eps=%s)" % (
            x.name, self.tensor(i[1]).name, self.tensor(i[2]).name, g, fmt_num(a.get("epsilon", 1e-5), "f32")), "f32", x.shape)

    def op_RMSNormalization(self, i, a, n):
        x = self.tensor(i[0])
        self.want_dtype(x, ("f32",))
        r = len(x.shape)
        s = i[1]
        ax = a.get("axis", -1) % r
        if ax != r - 1 or list(s.shape) != [x.shape[-1]]:
            ns = x.shape[ax:]
            if broadcast(ns, s.shape, "RMSNormalization") != ns:
                self.unsupported("scale of shape %s for normalized shape %s" % (list(s.shape), ns))
            axes = list(range(ax, r))
            al = "[%s]" % ", ".join(map(str, axes)) if len(axes) > 1 else str(axes[0])
            return self.emit("%s * rsqrt(mean(%s * %s, axis=%s, keepdim=true) + %s) * %s" % (
                x.name, x.name, x.name, al, fmt_num(a.get("epsilon", 1e-5), "f32"), self.operand(s, "f32")), "f32", x.shape)
        return self.emit("rms_norm(%s, %s, eps=%s)" % (x.name, self.tensor(s).name, fmt_num(a.get("epsilon", 1e-5), "f32")), "f32", x.shape)

    def op_EyeLike(self, i, a, n):
        x = i[0]
        if not all_static(x.shape) or len(x.shape) != 2:
            self.unsupported("input shape %s" % x.shape)
        dt = a.get("dtype")
        npdt = NP_DTYPE.get(ONNX_DTYPE.get(dt, "")) if dt is not None else NP_DTYPE.get(self.dtype_of(x))
        if npdt is None:
            self.unsupported("dtype")
        return np.eye(x.shape[0], x.shape[1], k=a.get("k", 0), dtype=npdt)

    def op_OneHot(self, i, a, n):
        idx, depth, values = i
        depth = int(self.const_input(depth, "depth").reshape(-1)[0])
        values = self.const_input(values, "values")
        if self.dtype_of(values) not in ("f32",):
            self.unsupported("values of dtype %s" % values.dtype)
        self.want_dtype(idx, INTS, "indices")
        idx = self.tensor(idx)
        r = len(idx.shape) + 1
        ax = a.get("axis", -1) % r
        ids = self.emit("where(%s < 0, %s + %d, %s)" % (idx.name, idx.name, depth, idx.name), idx.dtype, idx.shape)
        if idx.dtype != "i64":
            ids = self.emit("cast(%s, dtype=i64)" % ids.name, "i64", idx.shape)
        off, on = float(values[0]), float(values[1])
        # an index outside [-depth, depth) gives a row of off values (ONNX), not a run error
        valid = self.emit("(%s >= %d) and (%s < %d)" % (idx.name, -depth, idx.name, depth), "bool", idx.shape)
        ids = self.emit("where(%s, %s, 0)" % (valid.name, ids.name), "i64", idx.shape)
        oh = self.emit("one_hot(%s, num_classes=%d) * unsqueeze(cast(%s, dtype=f32), %d)" % (
            ids.name, depth, valid.name, len(idx.shape)), "f32", list(idx.shape) + [depth])
        if (off, on) != (0.0, 1.0):
            oh = self.emit("%s * %s + %s" % (oh.name, fmt_num(on - off, "f32"), fmt_num(off, "f32")), "f32", oh.shape)
        if ax != r - 1:
            perm = list(range(r - 1))
            perm.insert(ax, r - 1)
            oh = self.emit("permute(%s, dims=[%s])" % (oh.name, ", ".join(map(str, perm))), "f32", [oh.shape[p] for p in perm])
        return oh

    def op_Range(self, i, a, n):
        """Range(0, n, 1) of a symbolic size n: arange(n) (constant ranges are folded)."""
        st, lim, de = i
        vals = []
        for v, what in ((st, "start"), (lim, "limit"), (de, "delta")):
            v = self.const_input(v, what)
            vals.append(v.reshape(-1)[0] if v.size == 1 else None)
        st, lim, de = vals
        if isinstance(st, str) or isinstance(de, str) or st is None or de is None or int(st) != 0 or int(de) != 1:
            self.unsupported("a range over symbolic sizes other than range(0, n, 1)")
        if not isinstance(lim, str):
            self.unsupported("limit %r" % (lim,))
        return self.emit("arange(%s)" % lim, "i64", [lim])

    def op_BitShift(self, i, a, n):
        """Shifts of i32 and i64 and of the integers --widen-ints carries wider (bitshift_int)."""
        x, y = i
        nx = getattr(x, "narrow", None) if isinstance(x, T) else (x.dtype.type if is_const(x) else None)
        if nx in (np.int8, np.int16, np.uint8, np.uint16, np.uint32) or (nx is None and self.dtype_of(x) in INTS):
            return self.bitshift_int(x, y, a, nx)
        self.unsupported("BitShift of %s (uint8/16/32 with --widen-ints; modelc has no uint64)"
                         % (np.dtype(nx).name if nx else self.dtype_of(x)))

    def op_Swish(self, i, a, n):
        """x * sigmoid(alpha * x): silu where alpha is 1."""
        x = self.tensor(i[0])
        alpha = a.get("alpha", 1.0)
        if alpha == 1.0:
            self.want_dtype(x, FLOATS)
            return self.emit("silu(%s)" % x.name, x.dtype, x.shape)
        self.want_dtype(x, ("f32",))
        return self.emit("%s * sigmoid(%s * %s)" % (x.name, x.name, fmt_num(alpha, "f32")), "f32", x.shape)

    def op_SwiGLU(self, i, a, n):
        """Swish(A, alpha) * B, shapes and dtypes equal (no broadcasting, as ONNX says)."""
        x, b = self.tensor(i[0]), self.tensor(i[1])
        if x.shape != b.shape or x.dtype != b.dtype:
            self.unsupported("A %s %s and B %s %s differ" % (x.dtype, x.shape, b.dtype, b.shape))
        sw = self.op_Swish([x], a, n)
        return self.emit("%s * %s" % (sw.name, b.name), x.dtype, x.shape)

    def op_Shrink(self, i, a, n):
        x = self.tensor(i[0])
        self.want_dtype(x, ("f32",))
        lam, bias = fmt_num(a.get("lambd", 0.5), "f32"), fmt_num(a.get("bias", 0.0), "f32")
        return self.emit("where(%s < -%s, %s + %s, where(%s > %s, %s - %s, 0.0))"
                         % (x.name, lam, x.name, bias, x.name, lam, x.name, bias), "f32", x.shape)

    def op_LpPool(self, i, a, n):
        """(sum over the window of |x|^p)^(1/p): the sum a depthwise convolution by ones."""
        x = self.tensor(i[0])
        self.want_dtype(x, ("f32",))
        p = a.get("p", 2)
        if a.get("ceil_mode", 0):
            self.unsupported("ceil_mode")
        if len(x.shape) not in (3, 4) or not isinstance(x.shape[1], int):
            self.unsupported("a %d-D pooling (modelc has 1-D and 2-D)" % (len(x.shape) - 2))
        if p < 1:
            self.unsupported("p %d" % p)
        ks = list(a["kernel_shape"])
        C = x.shape[1]
        w = self.const_tensor(np.ones([C, 1] + ks, np.float32), base="lppool_ones")
        xp = self.emit("abs(%s)" % x.name if p == 1 else
                       ("%s * %s" % (x.name, x.name) if p == 2 else "pow(abs(%s), %s)" % (x.name, fmt_num(float(p), "f32"))),
                       "f32", x.shape)
        ca = {k: v for k, v in a.items() if k in ("kernel_shape", "strides", "pads", "auto_pad", "dilations")}
        ca["group"] = C
        s = self.op_Conv([xp, w], ca, n)
        if p == 1:
            return s
        if p == 2:
            return self.emit("sqrt(%s)" % s.name, "f32", s.shape)
        return self.emit("pow(%s, %s)" % (s.name, fmt_num(1.0 / p, "f32")), "f32", s.shape)

    def op_LRN(self, i, a, n):
        """x / (bias + alpha / size * (sum of x^2 over the channel window))^beta; the window sum
        a matmul by a band of ones over the channels."""
        x = self.tensor(i[0])
        self.want_dtype(x, ("f32",))
        if len(x.shape) != 4 or not isinstance(x.shape[1], int):
            self.unsupported("input of shape %s (LRN is NCHW)" % x.shape)
        size = a["size"]
        alpha, beta, bias = a.get("alpha", 1e-4), a.get("beta", 0.75), a.get("bias", 1.0)
        C = x.shape[1]
        c1, c2 = (size - 1) // 2, -(-(size - 1) // 2)
        band = np.zeros((C, C), np.float32)
        for c in range(C):
            band[max(0, c - c1):min(C, c + c2 + 1), c] = 1
        bt = self.const_tensor(band, base="lrn_band")
        N, _, H, W = x.shape
        sq = self.emit("permute(%s * %s, dims=[0, 2, 3, 1])" % (x.name, x.name), "f32", [N, H, W, C])
        ss = self.emit("permute(%s @ %s, dims=[0, 3, 1, 2])" % (sq.name, bt.name), "f32", x.shape)
        return self.emit("%s / pow(%s + %s * %s, %s)" % (x.name, fmt_num(bias, "f32"), fmt_num(alpha / size, "f32"),
                                                        ss.name, fmt_num(beta, "f32")), "f32", x.shape)

    def op_RotaryEmbedding(self, i, a, n):
        """ONNX's RotaryEmbedding (onnx.reference's op_rotary_embedding): the first
        rotary_embedding_dim entries of each head rotated by the cos/sin caches (indexed by
        position_ids when given), in halves or interleaved; the rest passed through."""
        x, cos, sin = self.tensor(i[0]), self.tensor(i[1]), self.tensor(i[2])
        pos = i[3] if len(i) > 3 else None
        for t in (x, cos, sin):
            self.want_dtype(t, ("f32",))
        if not all_static(x.shape):
            self.unsupported("symbolic axes")
        if len(x.shape) == 4:
            B, Hh, S, D = x.shape
            xs = self.emit("permute(%s, dims=[0, 2, 1, 3])" % x.name, "f32", [B, S, Hh, D])
        elif len(x.shape) == 3:
            nh = a.get("num_heads", 0)
            B, S, HD = x.shape
            if not nh or HD % nh:
                self.unsupported("3-D input without a num_heads that divides %d" % HD)
            Hh, D = nh, HD // nh
            xs = self.do_reshape(x, [B, S, Hh, D])
        else:
            self.unsupported("rank %d input" % len(x.shape))
        rd = a.get("rotary_embedding_dim", 0) or D
        if rd % 2 or rd > D:
            self.unsupported("rotary_embedding_dim %d for heads of %d" % (rd, D))
        h = rd // 2
        caches = []
        for c in (cos, sin):
            if pos is not None:
                pt = self.tensor(pos)
                if pt.dtype not in INTS or list(pt.shape) != [B, S] or len(c.shape) != 2:
                    self.unsupported("position_ids %s %s for a cache %s" % (pt.dtype, pt.shape, c.shape))
                flat = self.do_reshape(pt, [B * S])
                c = self.emit("index_select(%s, 0, %s)" % (c.name, flat.name), "f32", [B * S, c.shape[1]])
            elif list(c.shape[:2]) != [B, S] or len(c.shape) != 3:
                self.unsupported("a cache of shape %s without position_ids" % c.shape)
            if c.shape[-1] != h:
                self.unsupported("caches of %d entries for rotary_embedding_dim %d" % (c.shape[-1], rd))
            caches.append(self.do_reshape(c, [B, S, 1, h]))
        cs, sn = caches
        if a.get("interleaved", 0):
            xr = self.emit("slice(%s, 3, 0, %d)" % (xs.name, rd), "f32", [B, S, Hh, rd]) if rd < D else xs
            xr = self.do_reshape(xr, [B, S, Hh, h, 2])
            x1 = self.do_reshape(self.emit("slice(%s, 4, 0, 1)" % xr.name, "f32", [B, S, Hh, h, 1]), [B, S, Hh, h])
            x2 = self.do_reshape(self.emit("slice(%s, 4, 1, 2)" % xr.name, "f32", [B, S, Hh, h, 1]), [B, S, Hh, h])
        else:
            x1 = self.emit("slice(%s, 3, 0, %d)" % (xs.name, h), "f32", [B, S, Hh, h])
            x2 = self.emit("slice(%s, 3, %d, %d)" % (xs.name, h, rd), "f32", [B, S, Hh, h])
        re_ = self.emit("%s * %s - %s * %s" % (cs.name, x1.name, sn.name, x2.name), "f32", [B, S, Hh, h])
        im = self.emit("%s * %s + %s * %s" % (sn.name, x1.name, cs.name, x2.name), "f32", [B, S, Hh, h])
        if a.get("interleaved", 0):
            r5 = self.do_reshape(re_, [B, S, Hh, h, 1])
            i5 = self.do_reshape(im, [B, S, Hh, h, 1])
            rot = self.emit("concat(%s, %s, axis=4)" % (r5.name, i5.name), "f32", [B, S, Hh, h, 2])
            rot = self.do_reshape(rot, [B, S, Hh, rd])
        else:
            rot = self.emit("concat(%s, %s, axis=3)" % (re_.name, im.name), "f32", [B, S, Hh, rd])
        if rd < D:
            rest = self.emit("slice(%s, 3, %d, %d)" % (xs.name, rd, D), "f32", [B, S, Hh, D - rd])
            rot = self.emit("concat(%s, %s, axis=3)" % (rot.name, rest.name), "f32", [B, S, Hh, D])
        if len(x.shape) == 4:
            return self.emit("permute(%s, dims=[0, 2, 1, 3])" % rot.name, "f32", x.shape)
        return self.do_reshape(rot, x.shape)

    def bitshift_int(self, x, y, a, nx):
        """BitShift of integers (onnx.reference's op_bitshift; signed ones since opset 26): a
        shift count outside [0, width) gives 0 (LEFT) or the sign fill, -1 or 0 (RIGHT); LEFT
        wraps (two's complement, or modulo 2**width unsigned), RIGHT is arithmetic (floor
        division by 2**y). Computed in i64: 2**y as the product of two table entries of at most
        2**32 each (exact; 2**63 wraps to -2**63, the same factor modulo 2**64), the product
        wrapped back to the width."""
        x, y = self.tensor(x), self.tensor(y)
        if x.dtype != y.dtype or getattr(y, "narrow", None) != nx:
            self.unsupported("shift counts of another dtype")
        width = narrow_range(nx)[0] if nx is not None else {"i32": 32, "i64": 64}[x.dtype]
        shape = broadcast(x.shape, y.shape, "BitShift")
        x64 = x if x.dtype == "i64" else self.emit("cast(%s, dtype=i64)" % x.name, "i64", x.shape)
        y64 = y if y.dtype == "i64" else self.emit("cast(%s, dtype=i64)" % y.name, "i64", y.shape)
        ny = numel(y.shape)
        if not isinstance(ny, int):
            self.unsupported("symbolic shift counts")
        ks = np.arange(width)
        hi = self.const_tensor(np.exp2(ks // 2).astype(np.float32), base="pow2_hi")
        lo = self.const_tensor(np.exp2(ks - ks // 2).astype(np.float32), base="pow2_lo")
        flat = self.do_reshape(self.emit("where(%s < 0, 0, where(%s > %d, %d, %s))" % (y64.name, y64.name, width - 1, width - 1, y64.name),
                                         "i64", y.shape), [ny])
        ph = self.emit("cast(index_select(%s, 0, %s), dtype=i64)" % (hi.name, flat.name), "i64", [ny])
        pl = self.emit("cast(index_select(%s, 0, %s), dtype=i64)" % (lo.name, flat.name), "i64", [ny])
        pw = self.do_reshape(self.emit("%s * %s" % (ph.name, pl.name), "i64", [ny]), y.shape)
        valid = "(%s >= 0) and (%s < %d)" % (y64.name, y64.name, width)
        d = a.get("direction", b"LEFT")
        d = d.decode() if isinstance(d, bytes) else d
        if d == "LEFT":
            r = self.emit("%s * %s" % (x64.name, pw.name), "i64", shape)
            if nx is not None and narrow_range(nx)[1] == 0:
                r = self.emit("%s %% %d" % (r.name, 1 << width), "i64", shape)
            elif width < 64:
                h = 1 << (width - 1)
                r = self.emit("(%s + %d) %% %d - %d" % (r.name, h, 1 << width, h), "i64", shape)
            r = self.emit("where(%s, %s, 0)" % (valid, r.name), "i64", shape)
        elif d == "RIGHT":
            r = self.emit("where((%s >= 0) and (%s < %d), %s // %s, 0 - cast(%s < 0, dtype=i64))"
                          % (y64.name, y64.name, width - 1, x64.name, pw.name, x64.name), "i64", shape)
        else:
            self.unsupported("direction %s" % d)
        if x.dtype != "i64":
            r = self.emit("cast(%s, dtype=i32)" % r.name, "i32", shape)
        if nx is not None:
            r.narrow = nx
        return r

    def op_Hardmax(self, i, a, n):
        x = self.tensor(i[0])
        self.want_dtype(x, ("f32",))
        r = len(x.shape)
        if self.opset < 13:
            self.unsupported("opset < 13 (2-D coercion)")
        ax = a.get("axis", -1) % r
        C = x.shape[ax]
        if not isinstance(C, int):
            self.unsupported("a symbolic axis")
        am = self.emit("argmax(%s, axis=%d)" % (x.name, ax), "i64", x.shape[:ax] + x.shape[ax + 1:])
        oh = self.emit("one_hot(%s, num_classes=%d)" % (am.name, C), "f32", am.shape + [C])
        if ax != r - 1:
            perm = list(range(r - 1))
            perm.insert(ax, r - 1)
            oh = self.emit("permute(%s, dims=[%s])" % (oh.name, ", ".join(map(str, perm))), "f32", x.shape)
        return oh

    def op_LpNormalization(self, i, a, n):
        x = self.tensor(i[0])
        self.want_dtype(x, ("f32",))
        ax = a.get("axis", -1) % len(x.shape)
        p = a.get("p", 2)
        # a zero vector stays zero (onnx's reference divides only where the norm is nonzero)
        if p == 2:
            nm = self.emit("sqrt(sum(%s * %s, axis=%d, keepdim=true))" % (x.name, x.name, ax), "f32", [])
        elif p == 1:
            nm = self.emit("sum(abs(%s), axis=%d, keepdim=true)" % (x.name, ax), "f32", [])
        else:
            self.unsupported("p=%d" % p)
        return self.emit("where(%s == 0, %s, %s / %s)" % (nm.name, x.name, x.name, nm.name), "f32", x.shape)
        self.unsupported("p=%d" % p)

    def loss_flat(self, x, t):
        """[N, C, d...] scores and [N, d...] targets as [N*D, C] and [N*D]."""
        r = len(x.shape)
        if r == 2:
            return x, t, None
        if not all_static(x.shape):
            self.unsupported("symbolic axes")
        perm = [0] + list(range(2, r)) + [1]
        xp = self.emit("permute(%s, dims=[%s])" % (x.name, ", ".join(map(str, perm))), "f32", [x.shape[p] for p in perm])
        nd = numel(x.shape) // x.shape[1]
        xf = self.do_reshape(xp, [nd, x.shape[1]])
        tf = self.do_reshape(t, [nd])
        return xf, tf, list(t.shape)

    def loss(self, fn, i, a, n):
        x, t = self.tensor(i[0]), self.tensor(i[1])
        self.want_dtype(x, ("f32",))
        self.want_dtype(t, INTS, "target")
        red = a.get("reduction", b"mean")
        red = red.decode() if isinstance(red, bytes) else red
        if red not in ("mean", "sum", "none"):
            self.unsupported("reduction %s" % red)
        if t.dtype != "i64":
            t = self.emit("cast(%s, dtype=i64)" % t.name, "i64", t.shape)
        xf, tf, back = self.loss_flat(x, t)
        if len(i) > 2 and i[2] is not None:
            # class weights: w[target] times the unreduced loss; the mean divides by the sum of
            # the weights of the samples counted (ONNX's and PyTorch's definition)
            w = self.tensor(i[2])
            self.want_dtype(w, ("f32",), "weights")
            ts = tf
            if "ignore_index" in a:
                ts = self.emit("where(%s == %s, 0, %s)" % (tf.name, fmt_num(a["ignore_index"], "i64"), tf.name), "i64", tf.shape)
            wt = self.emit("index_select(%s, 0, %s)" % (w.name, ts.name), "f32", tf.shape)
            if "ignore_index" in a:
                wt = self.emit("where(%s == %s, 0.0, %s)" % (tf.name, fmt_num(a["ignore_index"], "i64"), wt.name), "f32", tf.shape)
            l = self.emit("%s(%s, %s, reduction=none) * %s" % (fn, xf.name, ts.name, wt.name), "f32", tf.shape)
            if red == "none":
                return self.do_reshape(l, back) if back is not None else l
            if red == "sum":
                return self.emit("sum(%s, axis=0)" % l.name, "f32", [])
            return self.emit("sum(%s, axis=0) / sum(%s, axis=0)" % (l.name, wt.name), "f32", [])
        kw = ", reduction=%s" % red
        if "ignore_index" in a:
            kw += ", ignore_index=%d" % a["ignore_index"]
        out = [xf.shape[0]] if red == "none" else []
        y = self.emit("%s(%s, %s%s)" % (fn, xf.name, tf.name, kw), "f32", out)
        if red == "none" and back is not None:
            y = self.do_reshape(y, back)
        return y

    def op_NegativeLogLikelihoodLoss(self, i, a, n):
        return self.loss("nll_loss", i, a, n)

    def op_SoftmaxCrossEntropyLoss(self, i, a, n):
        y = self.loss("cross_entropy", i, a, n)
        if len(n.output) > 1 and n.output[1]:
            x = self.tensor(i[0])
            return [y, self.emit("log_softmax(%s, axis=1)" % x.name, "f32", x.shape)]
        return y

    def op_Attention(self, i, a, n):
        q, k, v = [self.tensor(t) for t in i[:3]]
        mask = i[3] if len(i) > 3 else None
        known = {"is_causal", "kv_num_heads", "q_num_heads", "qk_matmul_output_mode", "scale", "softcap",
                 "softmax_precision", "left_window_size", "right_window_size"}
        for key in a:
            if key not in known:
                self.unsupported("attribute %s" % key)
        past = [i[j] if len(i) > j else None for j in (4, 5)]
        nonpad = self.tensor(i[6]) if len(i) > 6 and i[6] is not None else None
        if nonpad is not None and (past[0] is not None or nonpad.dtype not in INTS):
            self.unsupported("nonpad_kv_seqlen of dtype %s%s" % (nonpad.dtype, " with a past cache"
                                                                  if past[0] is not None else ""))
        if (past[0] is None) != (past[1] is None):
            self.unsupported("only one of past_key and past_value")
        qk_out = len(n.output) > 3 and bool(n.output[3])
        mode = a.get("qk_matmul_output_mode", 0)
        lw, rw = a.get("left_window_size", -1), a.get("right_window_size", -1)
        softcap = a.get("softcap", 0.0)
        manual = qk_out or softcap or lw >= 0 or rw >= 0 or (a.get("is_causal", 0) and (past[0] is not None or mask is not None)) \
            or nonpad is not None
        if qk_out and (mode == 2 or mode > 3 or (mode == 1 and softcap)):
            self.unsupported("qk_matmul_output_mode %d%s" % (mode, " with softcap" if softcap else ""))
        for t in (q, k, v):
            self.want_dtype(t, ("f32",))
        three = len(q.shape) == 3
        if three:
            hq, hk = a.get("q_num_heads"), a.get("kv_num_heads")
            if not hq or not hk:
                self.unsupported("3-D inputs without q_num_heads/kv_num_heads")
            def heads(t, h):
                B, L, HE = t.shape
                r = self.do_reshape(t, [B, L, h, HE // h])
                return self.emit("permute(%s, dims=[0, 2, 1, 3])" % r.name, "f32", [B, h, L, HE // h])
            q, k, v = heads(q, hq), heads(k, hk), heads(v, hk)
        if len(q.shape) != 4:
            self.unsupported("rank %d inputs" % len(q.shape))
        if past[0] is not None:
            pk, pv = self.tensor(past[0]), self.tensor(past[1])
            k = self.emit("concat(%s, %s, axis=2)" % (pk.name, k.name), "f32", k.shape[:2] + [pk.shape[2] + k.shape[2]] + k.shape[3:])
            v = self.emit("concat(%s, %s, axis=2)" % (pv.name, v.name), "f32", v.shape[:2] + [pv.shape[2] + v.shape[2]] + v.shape[3:])
        present = [k, v]
        Hq, Hk = q.shape[1], k.shape[1]
        if Hq != Hk:
            if Hq % Hk:
                self.unsupported("%d query heads over %d key heads" % (Hq, Hk))
            k = self.emit("repeat_interleave(%s, %d, dim=1)" % (k.name, Hq // Hk), "f32", [k.shape[0], Hq] + k.shape[2:])
            v = self.emit("repeat_interleave(%s, %d, dim=1)" % (v.name, Hq // Hk), "f32", [v.shape[0], Hq] + v.shape[2:])
        if manual:
            y, qk = self.attention_lowered(q, k, v, mask, a, past[0], softcap, lw, rw, mode, nonpad)
            if three:
                B, H, L2, Ev = y.shape
                y = self.emit("permute(%s, dims=[0, 2, 1, 3])" % y.name, "f32", [B, L2, H, Ev])
                y = self.do_reshape(y, [B, L2, H * Ev])
            return [y] + present + ([qk] if qk_out else [])
        args = [q.name, k.name, v.name]
        L, S = q.shape[2], k.shape[2]
        if mask is not None:
            mdt = self.dtype_of(mask)
            mt = self.tensor(mask)
            if mdt == "bool":
                mt = self.emit("where(%s, 0.0, -inf)" % mt.name, "f32", mt.shape)
            elif mdt != "f32":
                self.unsupported("mask dtype %s" % mdt)
            if list(mt.shape)[-1:] != [S]:
                self.unsupported("mask of shape %s for %d keys" % (mt.shape, S))
            args.append(mt.name)
        kw = []
        if a.get("is_causal", 0):
            if mask is not None:
                self.unsupported("is_causal with a mask")
            kw.append("causal=true")
        if "scale" in a:
            kw.append("scale=%s" % fmt_num(a["scale"], "f32"))
        out = q.shape[:3] + [v.shape[3]]
        y = self.emit("scaled_dot_product_attention(%s)" % ", ".join(args + kw), "f32", out)
        if three:
            B, H, L2, Ev = out
            y = self.emit("permute(%s, dims=[0, 2, 1, 3])" % y.name, "f32", [B, L2, H, Ev])
            y = self.do_reshape(y, [B, L2, H * Ev])
        if any(o for o in n.output[1:3]):
            return [y] + present
        return y

    def attention_lowered(self, q, k, v, mask, a, past_key, softcap, lw, rw, mode, nonpad=None):
        """Attention as matmul, bias, softcap and softmax, following onnx's definition: the
        causal and sliding-window biases are aligned at the end of the past (offset), and a
        row whose bias is -inf everywhere gives zeros. With nonpad_kv_seqlen [B] (no past), the
        keys from nonpad[b] on are masked and the offset is nonpad[b] - L per batch item, so
        that bias is computed at run time."""
        L, S, E = q.shape[2], k.shape[2], q.shape[3]
        if not all_static([L, S, E]):
            self.unsupported("symbolic sequence axes")
        scale = a.get("scale", 1.0 / np.sqrt(E))
        scores = self.emit("(%s @ transpose(%s)) * %s" % (q.name, k.name, fmt_num(scale, "f32")), "f32",
                           q.shape[:3] + [S])
        if softcap:
            scores = self.emit("tanh(%s / %s) * %s" % (scores.name, fmt_num(softcap, "f32"), fmt_num(softcap, "f32")),
                               "f32", scores.shape)
        qk0 = scores
        offset = past_key.shape[2] if past_key is not None else 0
        allowed = np.ones((L, S), bool)
        diff = (np.arange(L)[:, None] + offset) - np.arange(S)[None, :]
        if a.get("is_causal", 0):
            allowed &= diff >= 0
        if lw >= 0:
            allowed &= diff <= lw
        if rw >= 0:
            allowed &= -diff <= rw
        bias = None
        if nonpad is not None:
            B = q.shape[0]
            if list(nonpad.shape) != [B]:
                self.unsupported("nonpad_kv_seqlen of shape %s for a batch of %s" % (nonpad.shape, B))
            # A[i, j] = j - i + L: causal allows A <= nonpad[b]; the window's diff is nonpad[b] - A
            A = self.const_tensor((np.arange(S)[None, :] - np.arange(L)[:, None] + L).astype(np.int64)
                                  .reshape(1, 1, L, S), base="attention_offsets")
            J = self.const_tensor(np.arange(S, dtype=np.int64).reshape(1, 1, 1, S), base="attention_keys")
            nb = nonpad if nonpad.dtype == "i64" else self.emit("cast(%s, dtype=i64)" % nonpad.name, "i64", [B])
            nb = self.do_reshape(nb, [B, 1, 1, 1])
            conds = ["(%s < %s)" % (J.name, nb.name)]
            if a.get("is_causal", 0):
                conds.append("(%s <= %s)" % (A.name, nb.name))
            if lw >= 0:
                conds.append("(%s - %s <= %d)" % (nb.name, A.name, lw))
            if rw >= 0:
                conds.append("(%s - %s <= %d)" % (A.name, nb.name, rw))
            bias = self.emit("where(%s, 0.0, -inf)" % " and ".join(conds), "f32", [B, 1, L, S])
        elif not allowed.all():
            bias = self.const_tensor(np.where(allowed, 0.0, -np.inf).astype(np.float32), base="attention_bias")
        if mask is not None:
            mt = self.tensor(mask)
            if not mt.shape or not isinstance(mt.shape[-1], int) or mt.shape[-1] > S:
                self.unsupported("mask of shape %s for %d keys" % (mt.shape, S))
            if mt.dtype == "bool":
                mt = self.emit("where(%s, 0.0, -inf)" % mt.name, "f32", mt.shape)
            elif mt.dtype != "f32":
                self.unsupported("mask dtype %s" % mt.dtype)
            if mt.shape[-1] < S:  # a mask over the first keys: the rest masked (onnx pads with -inf)
                rest = self.const_tensor(np.full(list(mt.shape[:-1]) + [S - mt.shape[-1]], -np.inf, np.float32),
                                         base="attention_mask_pad")
                mt = self.emit("concat(%s, %s, axis=%d)" % (mt.name, rest.name, len(mt.shape) - 1), "f32",
                               list(mt.shape[:-1]) + [S])
            bias = mt if bias is None else self.emit("%s + %s" % (mt.name, bias.name), "f32",
                                                     broadcast(mt.shape, bias.shape, "Attention"))
        if bias is not None:
            scores = self.emit("%s + %s" % (scores.name, bias.name), "f32", broadcast(scores.shape, bias.shape, "Attention"))
        p = self.emit("softmax(%s, axis=-1)" % scores.name, "f32", scores.shape)
        if bias is not None:
            p = self.emit("where(max(%s, axis=-1, keepdim=true) == -inf, 0.0, %s)" % (bias.name, p.name), "f32", p.shape)
        y = self.emit("%s @ %s" % (p.name, v.name), "f32", p.shape[:3] + [v.shape[3]])
        qk = {0: qk0, 1: scores, 3: p}.get(mode, qk0)
        return y, qk

    def op_Resize(self, i, a, n):
        """Resize as interpolate where modelc's modes match ONNX's; any other mode, coordinate
        transformation, axes or antialias as the linear map it is (linear_map)."""
        start = len(self.lines)
        try:
            return self.resize_interpolate(i, a, n)
        except Unsupported as e:
            if getattr(e, "needs_input", None) or not hasattr(e, "reason"):
                raise
            why = e.reason
        del self.lines[start:]
        return self.linear_map(n, i, 0, why)

    def op_DFT(self, i, a, n):
        if a.get("inverse", 0) and not a.get("onesided", 0):
            # the round trip of a real signal: imaginary parts that cancel to about 1e-7, which a
            # sum in f32 gets only to about 1e-6 (ONNX's tests compare at atol 1e-7)
            self.unsupported("an inverse DFT with complex output (sums that cancel below what f32 "
                             "accumulation resolves)")
        return self.linear_map(n, i, 0, "a DFT of a tensor modelc cannot map")

    def op_AffineGrid(self, i, a, n):
        return self.linear_map(n, i, 0, "an AffineGrid modelc cannot map")

    def op_Col2Im(self, i, a, n):
        return self.linear_map(n, i, 0, "a Col2Im modelc cannot map")

    def op_CenterCropPad(self, i, a, n):
        return self.linear_map(n, i, 0, "a CenterCropPad modelc cannot map")

    def op_ReverseSequence(self, i, a, n):
        return self.linear_map(n, i, 0, "a ReverseSequence modelc cannot map")

    def op_STFT(self, i, a, n):
        return self.linear_map(n, i, 0, "an STFT modelc cannot map")

    def resize_interpolate(self, i, a, n):
        x = self.tensor(i[0])
        self.want_dtype(x, ("f32",))
        if len(x.shape) != 4 or not all_static(x.shape):
            self.unsupported("input of shape %s (modelc resizes NCHW)" % x.shape)
        g = lambda k, d: (a.get(k, d).decode() if isinstance(a.get(k, d), bytes) else a.get(k, d))  # noqa: E731
        mode, ctm, nm = g("mode", "nearest"), g("coordinate_transformation_mode", "half_pixel"), g("nearest_mode", "round_prefer_floor")
        if self.opset < 11:
            ctm, nm = "asymmetric", "floor"
        if a.get("antialias", 0) or g("keep_aspect_ratio_policy", "stretch") != "stretch" or "axes" in a:
            self.unsupported("antialias, keep_aspect_ratio_policy or axes")
        scales = sizes = None
        if self.opset >= 11:
            if len(i) > 2 and i[2] is not None and i[2].shape != [0] and not (is_const(i[2]) and i[2].size == 0):
                scales = [float(v) for v in self.const_input(i[2], "scales").reshape(-1)]
            if len(i) > 3 and i[3] is not None:
                sizes = [int(v) for v in self.const_input(i[3], "sizes").reshape(-1)]
        else:
            scales = [float(v) for v in self.const_input(i[1], "scales").reshape(-1)]
        if scales is not None and (len(scales) != 4 or scales[:2] != [1.0, 1.0]):
            self.unsupported("scales %s (only H and W)" % scales)
        if sizes is not None and (len(sizes) != 4 or sizes[:2] != x.shape[:2]):
            self.unsupported("sizes %s (only H and W)" % sizes)
        if mode == "nearest":
            if sizes is not None:
                fac = [sizes[2] / x.shape[2], sizes[3] / x.shape[3]]
            else:
                fac = scales[2:]
            if ctm in ("half_pixel", "pytorch_half_pixel") and nm in ("round_prefer_floor", "round_prefer_ceil") \
                    and all(f == int(f) and f >= 1 for f in fac):
                # an integer upscale: (x + 0.5) / s - 0.5 rounds to floor(x / s), never a tie
                ctm, nm = "asymmetric", "floor"
            if ctm != "asymmetric" or nm != "floor":
                self.unsupported("nearest with %s coordinates and nearest_mode %s (modelc: asymmetric, floor)" % (ctm, nm))
            kw = "mode=nearest"
        elif mode == "linear":
            if ctm in ("half_pixel", "pytorch_half_pixel"):
                kw = "mode=bilinear"
            elif ctm == "align_corners":
                kw = "mode=bilinear, align_corners=true"
            else:
                self.unsupported("linear with %s coordinates" % ctm)
        else:
            self.unsupported("mode %s" % mode)
        if sizes is not None:
            out = sizes[2:]
            kw += ", size=[%d, %d]" % tuple(out)
        else:
            out = [int(np.floor(x.shape[2] * scales[2])), int(np.floor(x.shape[3] * scales[3]))]
            if ctm == "pytorch_half_pixel" and 1 in out:
                self.unsupported("pytorch_half_pixel to size 1")
            kw += ", scale_factor=[%s, %s]" % (fmt_num(scales[2], "f32"), fmt_num(scales[3], "f32"))
        if min(out) < 1:
            self.unsupported("output size %s" % out)
        if ctm in ("pytorch_half_pixel", "align_corners") and 1 in out:
            self.unsupported("%s to size 1" % ctm)
        return self.emit("interpolate(%s, %s)" % (x.name, kw), "f32", x.shape[:2] + out)

    def op_Upsample(self, i, a, n):
        return self.op_Resize(i, a, n)

    # ---- sequences (a Python list of values, known at import time)
    def op_SplitToSequence(self, i, a, n):
        x = i[0]
        r = len(x.shape)
        ax = a.get("axis", 0) % r
        L = x.shape[ax]
        if not isinstance(L, int):
            self.unsupported("split of a symbolic axis")
        keep = a.get("keepdims", 1)
        if len(i) > 1 and i[1] is not None:
            sp = self.const_input(i[1], "split")
            if sp.ndim == 0:
                c = int(sp)
                sizes = [c] * (L // c) + ([L % c] if L % c else [])
            else:
                sizes = [int(v) for v in sp.reshape(-1)]
            keep = 1
        else:
            sizes = [1] * L
        if sum(sizes) != L or any(v <= 0 for v in sizes):
            self.unsupported("split sizes %s of an axis of %d" % (sizes, L))
        x = self.tensor(x)
        if len(sizes) == 1:
            parts = [x]
        else:
            res = []
            for v in sizes:
                sh = list(x.shape)
                sh[ax] = v
                res.append((x.dtype, sh))
            parts = self.emit_multi("split(%s, [%s], dim=%d)" % (x.name, ", ".join(map(str, sizes)), ax), res)
        if not keep:
            parts = [self.do_reshape(p, p.shape[:ax] + p.shape[ax + 1:]) for p in parts]
        return [Seq(parts)]

    def op_SequenceConstruct(self, i, a, n):
        return [Seq(i)]

    def op_SequenceAt(self, i, a, n):
        seq = i[0]
        if not isinstance(seq, Seq):
            self.unsupported("input 0 is not a sequence")
        k = int(self.const_input(i[1], "position").reshape(-1)[0])
        if not -len(seq) <= k < len(seq):
            self.unsupported("position %d of a sequence of %d" % (k, len(seq)))
        return seq[k]

    def op_SequenceLength(self, i, a, n):
        if not isinstance(i[0], Seq):
            self.unsupported("input 0 is not a sequence")
        return np.array(len(i[0]), np.int64)

    def op_ConcatFromSequence(self, i, a, n):
        seq = i[0]
        if not isinstance(seq, Seq):
            self.unsupported("input 0 is not a sequence")
        if a.get("new_axis", 0):
            ax = a["axis"]
            r = len(seq[0].shape) + 1
            parts = [self.do_reshape(v, v.shape[:ax % r] + [1] + v.shape[ax % r:]) for v in seq]
            return self.op_Concat(parts, {"axis": ax % r}, n)
        return self.op_Concat(list(seq), a, n)

    def op_Constant(self, i, a, n):
        onnx = _onnx()
        if "value" in a:
            return onnx.numpy_helper.to_array(a["value"])
        if "value_float" in a:
            return np.array(a["value_float"], np.float32)
        if "value_floats" in a:
            return np.array(a["value_floats"], np.float32)
        if "value_int" in a:
            return np.array(a["value_int"], np.int64)
        if "value_ints" in a:
            return np.array(a["value_ints"], np.int64)
        self.unsupported("a Constant with %s" % ", ".join(a))

    # ---- results
    def source(self, onnx_path=None):
        out = []
        out.append("# %s, imported by tools/onnx2model.py%s" % (
            self.mname, (" from " + os.path.basename(onnx_path)) if onnx_path else ""))
        gi = self.model.producer_name
        if gi:
            out.append("# producer: %s %s, opset %d" % (gi, self.model.producer_version, self.opset))
        out.append("# compile: %s" % " ".join(self.compile_args()))
        if self.size_checked:
            out.append("# the values computed from the sizes alone were checked up to these bounds only: compile with")
            out.append("# --max-dim at most them (a larger bound runs sizes the importer did not check)")
        decls, lines = self.decls, self.lines
        self.block_stats = []
        if self.blocks:
            decls, lines, blocks, self.block_stats = model_blocks.find_blocks(
                decls, lines, reserved=function_names() | KEYWORDS | {self.mname})
            for b in blocks:
                out.extend(b)
                out.append("")
        out.append("model %s {" % self.mname)
        out.extend(decls)
        out.append("")
        out.extend(lines)
        out.append("}")
        return "\n".join(out) + "\n"

    def compile_args(self):
        args = ["modelc", self.mname + ".model", "-o", self.mname]
        if self.symbols and self.max_batch:
            args += ["--max-batch", str(self.max_batch)]
        others = ["%s=%d" % (s, self.max_dims[s]) for s in self.symbols[1:]]
        if others:
            args += ["--max-dim", ",".join(others)]
        return args


def sym_array(r):
    """A folded shape value as an array: int64 when every entry is known, else object."""
    r = np.array(r, dtype=object)
    if all(isinstance(v, (int, np.integer, bool, np.bool_)) for v in r.reshape(-1)):
        if r.size and all(isinstance(v, (bool, np.bool_)) for v in r.reshape(-1)):
            return r.astype(bool)
        return r.astype(np.int64)
    return r


# --widen-ints: ONNX integer dtypes modelc lacks, carried in a wider one (values kept in range
# by wrapping every arithmetic result, as the narrow type's own arithmetic does). The sub-byte
# ones (int4, uint4, int2, uint2) are ml_dtypes' NumPy types, as onnx.numpy_helper gives them.
def _ml_dtypes():
    import ml_dtypes
    return ml_dtypes


try:  # onnx depends on ml_dtypes; without onnx the importer stops with its own error
    import ml_dtypes as _ML
except ImportError:
    _ML = None
WIDEN_NP = (np.uint8, np.int8, np.int16, np.uint16, np.uint32)
WIDEN_NP += tuple(getattr(_ML, t) for t in ("int4", "uint4", "int2", "uint2")) if _ML else ()
# and the small float dtypes, carried in f32 (which holds each of their values exactly): only a
# Cast from them is exact (arithmetic would have to round to the small type after every op),
# so they are inputs and constants of Cast and CastLike only (Converter.convert_node)
WIDEN_FLOAT_NP = tuple(getattr(_ML, t) for t in (
    "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu",
    "float4_e2m1fn")) if _ML else ()


def widen_table():
    """TensorProto enum -> the NumPy type of each dtype --widen-ints carries in a wider one."""
    P = _onnx().TensorProto
    t = {P.UINT8: np.uint8, P.INT8: np.int8, P.INT16: np.int16, P.UINT16: np.uint16, P.UINT32: np.uint32}
    ml = _ml_dtypes()
    t.update({P.INT4: ml.int4, P.UINT4: ml.uint4, P.INT2: ml.int2, P.UINT2: ml.uint2,
              P.FLOAT8E4M3FN: ml.float8_e4m3fn, P.FLOAT8E4M3FNUZ: ml.float8_e4m3fnuz,
              P.FLOAT8E5M2: ml.float8_e5m2, P.FLOAT8E5M2FNUZ: ml.float8_e5m2fnuz,
              P.FLOAT8E8M0: ml.float8_e8m0fnu, P.FLOAT4E2M1: ml.float4_e2m1fn})
    return t


def onnx_of_narrow(narrow):
    """The TensorProto enum of a widened dtype (inverse of widen_table)."""
    return {v: k for k, v in widen_table().items()}[narrow]


def is_narrow_float(narrow):
    return narrow is not None and narrow in WIDEN_FLOAT_NP


def narrow_range(narrow):
    """(bits, min, max) of a widened integer dtype."""
    info = _ml_dtypes().iinfo(narrow)
    return info.bits, int(info.min), int(info.max)


def wide_of(narrow):
    if is_narrow_float(narrow):
        return "f32"
    return "i64" if narrow == np.uint32 else "i32"


# ops whose integer results stay in their inputs' range (no wrap needed)
NO_WRAP = {"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split", "Slice",
           "Gather", "GatherElements", "Expand", "Tile", "Max", "Min", "Where", "Clip", "Pad", "SpaceToDepth",
           "DepthToSpace", "ReduceMax", "ReduceMin", "SequenceAt", "Dropout", "Trilu"}


# The ONNX op types that are one modelc function of a float tensor, elementwise (Importer.unary).
UNARY_OPS = {"Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Erf": "erf", "Sin": "sin",
             "Cos": "cos", "Softplus": "softplus", "HardSwish": "hardswish"}
NO_FOLD = set()
SYMBOLIC_FOLD = {"Identity", "Cast", "CastLike", "Gather", "Concat", "Unsqueeze", "Squeeze", "Reshape",
                 "Slice", "Mul", "Add", "Sub", "Div", "Equal", "Shape"}


# ---------------------------------------------------------------- loading and writing

def load(path):
    onnx = _onnx()
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError as e:
        raise OnnxImportError("cannot read %s: %s" % (path, e.strerror))
    m = onnx.ModelProto()
    try:
        m.ParseFromString(blob)
    except Exception as e:  # noqa: BLE001  (google.protobuf.message.DecodeError)
        raise OnnxImportError("%s is not a valid ONNX file (truncated or corrupt?): %s" % (path, e))
    if not m.HasField("graph") or len(m.graph.node) == 0 and len(m.graph.output) == 0:
        raise OnnxImportError("%s holds no graph (truncated, corrupt, or not an ONNX model)" % path)
    # external data: load it from the model's folder, naming a file that is missing
    base = os.path.dirname(os.path.abspath(path))
    for t in m.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            loc = {e.key: e.value for e in t.external_data}.get("location", "")
            p = os.path.join(base, loc)
            if not loc or not os.path.isfile(p):
                raise OnnxImportError("initializer '%s' keeps its data in '%s', which is missing (looked in %s)"
                                      % (t.name, loc, base))
    try:
        from onnx.external_data_helper import load_external_data_for_model
        load_external_data_for_model(m, base)
    except Exception as e:  # noqa: BLE001
        raise OnnxImportError("%s: loading external data: %s" % (path, e))
    return m


def convert(model, name="net", max_dims=None, max_batch=None, keep_unused=False, widen=False, blocks=True):
    """Convert a ModelProto. Returns the Converter (source(), params, inputs, outputs, renames).
    blocks: write repeated layers as blocks instantiated `as` their state_dict prefix (False:
    straight-line code only; the program computes the same either way)."""
    return Converter(model, name, max_dims, max_batch, keep_unused, widen, blocks).run()


def check_output(out_base, what="-o"):
    """Refuse an output base before anything is written or computed: an empty base name
    (`-o dir/`), OUT.model or OUT.safetensors that is a directory, a directory that is missing
    or where no file can be created (probed with a temporary file, removed at once)."""
    if not out_base or out_base.endswith(os.sep) or os.path.basename(out_base) in ("", ".", ".."):
        raise OnnxImportError("%s %s: expected a path and a base name (OUT writes OUT.model and OUT.safetensors)"
                              % (what, out_base))
    d = os.path.dirname(os.path.abspath(out_base))
    if not os.path.isdir(d):
        raise OnnxImportError("%s %s: the directory %s does not exist" % (what, out_base, d))
    for ext in (".model", ".safetensors"):
        if os.path.isdir(out_base + ext):
            raise OnnxImportError("%s %s: %s is a directory" % (what, out_base, out_base + ext))
    try:
        fd, probe = tempfile.mkstemp(dir=d, prefix=".onnx2model.probe.")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise OnnxImportError("%s %s: cannot write in %s: %s" % (what, out_base, d, e.strerror or e))


def file_mode():
    """The mode a new file gets from open(): 0666 less the umask (mkstemp's files are 0600)."""
    um = os.umask(0o022)
    os.umask(um)
    return 0o666 & ~um


def write_files(files):
    """files: [(path, write(tmp_path))]. Each is written to a temporary file first; only when
    all are written are they renamed into place (so a failure leaves none of them behind)."""
    tmps = []
    try:
        for path, write in files:
            d = os.path.dirname(os.path.abspath(path))
            fd, tmp = tempfile.mkstemp(dir=d, prefix="." + os.path.basename(path) + ".tmp.")
            os.close(fd)
            tmps.append(tmp)
            write(tmp)
            os.chmod(tmp, file_mode())
        for (path, _), tmp in zip(files, tmps):
            os.replace(tmp, path)
    except BaseException:
        for t in tmps:
            if os.path.exists(t):
                os.unlink(t)
        raise


def write_text(text):
    def w(tmp):
        with open(tmp, "w") as f:
            f.write(text)
    return w


def write_outputs(conv, out_base, onnx_path=None, extra=()):
    """Write OUT.model and OUT.safetensors (and extra: [(path, write(tmp))]), all or none:
    each to a temporary file in its directory, renamed into place once all are written, with
    the mode a new file gets from the umask."""
    d = os.path.dirname(os.path.abspath(out_base))
    os.makedirs(d, exist_ok=True)
    src = conv.source(onnx_path)
    write_files([(out_base + ".model", write_text(src)),
                 (out_base + ".safetensors", lambda tmp: safetensors_np.write(tmp, conv.params))] + list(extra))


def parse_dims(specs):
    out = {}
    for spec in specs or []:
        for part in spec.split(","):
            if "=" not in part:
                raise OnnxImportError("--max-dim %s: expected NAME=N" % part)
            k, v = part.split("=", 1)
            try:
                n = int(v)
            except ValueError:
                raise OnnxImportError("--max-dim %s: %s is not an integer" % (part, v))
            if n < 1:
                raise OnnxImportError("--max-dim %s: the bound must be at least 1" % part)
            if k in out:
                raise OnnxImportError("--max-dim %s given twice" % k)
            out[k] = n
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="onnx2model.py",
        description="Import an ONNX model as a readable .model file and a .safetensors of its "
                    "initializers (state_dict names kept), for modelc.",
        epilog="Example: python3 tools/onnx2model.py resnet18.onnx -o r18 && build/bin/modelc r18.model -o r18")
    ap.add_argument("onnx", help="the .onnx file")
    ap.add_argument("-o", "--output", required=True, help="OUT: writes OUT.model and OUT.safetensors")
    ap.add_argument("--name", help="the model's name in the .model file (default: OUT's base name)")
    ap.add_argument("--max-dim", action="append", metavar="NAME=N[,NAME=N]",
                    help="bound of a symbolic (dynamic) dimension other than the batch; required for each")
    ap.add_argument("--max-batch", type=int, help="bound of the first symbolic dimension, for the printed modelc command")
    ap.add_argument("--keep-unused-inputs", action="store_true",
                    help="keep graph inputs no output uses (a warning) instead of refusing the model")
    ap.add_argument("--widen-ints", action="store_true",
                    help="take int8, uint8, int16, uint16, int4, uint4, int2, uint2 (as i32) and uint32 (as i64) "
                         "inputs and constants, wrapping arithmetic to their range (the program's inputs and "
                         "outputs are then i32/i64), and float8 and float4 ones (as f32) where only a Cast reads them")
    ap.add_argument("--no-blocks", action="store_true",
                    help="write straight-line code only (default: repeated layers, such as a transformer layer or "
                         "a ResNet block, become a block instantiated once per layer)")
    ap.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
    args = ap.parse_args(argv)
    try:
        try:
            import onnx  # noqa: F401
        except ImportError:
            raise OnnxImportError("the 'onnx' Python package is not installed (pip install onnx, or tools/setup.sh)")
        dims = parse_dims(args.max_dim)
        if args.max_batch is not None and args.max_batch < 1:
            raise OnnxImportError("--max-batch %d: the bound must be at least 1" % args.max_batch)
        check_output(args.output)
        m = load(args.onnx)
        name = args.name or os.path.basename(args.output)
        conv = convert(m, name, dims, args.max_batch, args.keep_unused_inputs, args.widen_ints,
                       not args.no_blocks)
        try:
            write_outputs(conv, args.output, args.onnx)
        except OSError as e:
            raise OnnxImportError("writing %s.model and %s.safetensors: %s" % (args.output, args.output, e))
    except OnnxImportError as e:
        sys.stderr.write("onnx2model: error: %s\n" % e)
        return 1
    if not args.quiet:
        for kind, a, b in conv.renames:
            print("%s %s -> %s" % (kind, a, b))
        print("wrote %s.model and %s.safetensors (%d params, %d statements)" % (
            args.output, args.output, len(conv.params), sum(1 for l in conv.lines if not l.lstrip().startswith("#"))))
        for bname, insts in conv.block_stats:
            print("block %s: %d instances (%s)" % (bname, len(insts), ", ".join(insts)))
        print("compile: " + " ".join(conv.compile_args()).replace(conv.mname + ".model", args.output + ".model", 1)
              .replace("-o " + conv.mname, "-o " + args.output, 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
