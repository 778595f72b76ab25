#!/usr/bin/env python3
"""refinterp.py — an independent NumPy reference interpreter of the modelc language.

It shares no code with the C compiler: a hand-written tokenizer and a recursive-descent parser
for the grammar of docs/language.md, then a direct evaluation of the statements with NumPy.
It is the reference that tests/numeric/run.py compares compiled executables against.

Numerics: every f32 value (inputs, params, number literals) is first rounded to float32, then
computed in float64 (precision='f64', the default), and the outputs are cast to float32 at the
end. precision='f32' computes in float32 throughout (closer to the compiled code, a worse
reference). Integer inputs keep their dtype; argmax gives int64.

Semantics follow docs/language.md and the field cases (shared/cases/field-cases.md):
  - NumPy broadcasting; matmul broadcasts leading dims; linear = x @ W.T + b.
  - gelu: erf form 0.5*x*(1+erf(x/sqrt(2))) (math.erf, vectorized) or the tanh form.
  - softmax / log_softmax subtract the maximum first; max and softmax propagate NaN.
  - argmax: first maximal index (NumPy's rule; a NaN counts as the maximum), int64.
  - relu(x) = (x < 0) ? +0.0 : x. This keeps NaN and -0.0 (spec, B13) and gives +0.0 for every
    negative number including -inf (B13: relu([NaN,-inf,inf,-1,1]) = [NaN,0,inf,0,1]).
    NOTE: the spec's formula `x > 0 ? x : x * 0` disagrees at -inf (gives NaN) and at negative
    numbers (gives -0.0); the field case is taken as the truth here.
  - sqrt(-0.0) = -0.0, gelu(-0.0) = -0.0, and -x flips the sign of zero (never 0 - x).
It performs no shape diagnostics beyond what NumPy raises, except that it checks inputs and
params against their declared types and outputs against declared output types.

CLI (mirrors the compiled executables' mrt_main):
  python3 tools/refinterp.py MODEL.model [--weights W.safetensors] --input x=x.npy ...
                             --output y=y.npy ... [--precision f64|f32]
  python3 tools/refinterp.py --self-test
Library:
  run_model(path_or_Model, weights: dict, inputs: dict, precision='f64') -> dict (name -> array)
  parse_file(path) / parse_source(text) -> Model;  read_safetensors / write_safetensors.
Only NumPy is required.
"""

import json
import math
import re
import struct
import sys

import numpy as np

# ---------------------------------------------------------------------------------- tokenizer

KEYWORDS = {"model", "input", "param", "output", "true", "false"}
DTYPES = {"f32": np.float32, "i32": np.int32, "i64": np.int64}

_TOKEN_RE = re.compile(r"""
    (?P<ws>[ \t\r\n]+|\#[^\n]*)
  | (?P<num>(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)
  | (?P<punct>[{}()\[\],:=;+\-*/@])
""", re.VERBOSE)


class ModelError(Exception):
    """A syntax or evaluation error, with file:line:col."""


class Tok:
    __slots__ = ("kind", "text", "line", "col")

    def __init__(self, kind, text, line, col):
        self.kind, self.text, self.line, self.col = kind, text, line, col

    def __repr__(self):
        return "%s %r" % (self.kind, self.text)


def tokenize(src, path="<model>"):
    """Split `src` into tokens: kinds 'num', 'name', 'kw', 'punct', 'eof'."""
    toks = []
    pos, line, line_start = 0, 1, 0
    while pos < len(src):
        m = _TOKEN_RE.match(src, pos)
        if not m:
            raise ModelError("%s:%d:%d: error: unexpected character %r"
                             % (path, line, pos - line_start + 1, src[pos]))
        kind = m.lastgroup
        text = m.group()
        if kind != "ws":
            if kind == "name" and text in KEYWORDS:
                kind = "kw"
            toks.append(Tok(kind, text, line, pos - line_start + 1))
        nl = text.count("\n")
        if nl:
            line += nl
            line_start = pos + text.rindex("\n") + 1
        pos = m.end()
    toks.append(Tok("eof", "", line, pos - line_start + 1))
    return toks


# ---------------------------------------------------------------------------------- parser
# AST nodes are tuples:
#   ('num', value, is_int)  ('name', n)  ('neg', x)  ('bin', op, lhs, rhs)
#   ('call', name, [(key or None, node)])  ('list', [int | str])  ('bool', v)

class Decl:
    """An input, param or output declaration: name, dtype ('f32'...), dims (int or str)."""

    def __init__(self, kind, name, dtype, dims):
        self.kind, self.name, self.dtype, self.dims = kind, name, dtype, dims

    def __repr__(self):
        return "%s %s: %s%s" % (self.kind, self.name, self.dtype, self.dims)


class Model:
    """A parsed model: name, inputs/params (Decl lists), outputs (names in declaration order),
    out_types (name -> Decl or None), defs (name -> AST), batch_name (or None)."""

    def __init__(self, name):
        self.name = name
        self.inputs, self.params, self.outputs = [], [], []
        self.out_types, self.defs = {}, {}
        self.batch_name = None
        self.path = "<model>"


class Parser:
    def __init__(self, toks, path):
        self.toks, self.i, self.path = toks, 0, path

    def peek(self, k=0):
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def err(self, msg, tok=None):
        tok = tok or self.peek()
        got = tok.text if tok.kind != "eof" else "end of file"
        raise ModelError("%s:%d:%d: error: %s, got '%s'" % (self.path, tok.line, tok.col, msg, got))

    def accept(self, text):
        t = self.peek()
        if t.kind in ("punct", "kw") and t.text == text:
            self.i += 1
            return t
        return None

    def expect(self, text, what=None):
        t = self.accept(text)
        if not t:
            self.err("expected '%s'%s" % (text, " " + what if what else ""))
        return t

    def name(self, what="a name"):
        t = self.peek()
        if t.kind != "name":
            self.err("expected %s" % what)
        self.i += 1
        return t.text

    # file := 'model' NAME '{' stmt* '}'
    def parse_file(self):
        self.expect("model")
        m = Model(self.name("the model's name"))
        m.path = self.path
        self.expect("{")
        while not self.accept("}"):
            if self.accept(";"):
                continue
            self.stmt(m)
        if self.peek().kind != "eof":
            self.err("expected end of file after '}'")
        for o in m.outputs:
            if o not in m.defs:
                raise ModelError("%s: error: output '%s' is never assigned" % (self.path, o))
        return m

    def define(self, m, name, tok):
        if name in m.defs or any(d.name == name for d in m.inputs + m.params):
            raise ModelError("%s:%d:%d: error: '%s' is defined twice"
                             % (self.path, tok.line, tok.col, name))

    # stmt := 'input' NAME ':' type | 'param' NAME ':' type | 'output' NAME ':' type
    #       | 'output' NAME (':' type)? '=' expr | NAME '=' expr
    def stmt(self, m):
        t = self.peek()
        if self.accept("input") or self.accept("param"):
            nt = self.peek()
            n = self.name()
            self.define(m, n, nt)
            self.expect(":")
            dtype, dims = self.type()
            d = Decl(t.text, n, dtype, dims)
            (m.inputs if t.text == "input" else m.params).append(d)
            self.note_batch(m, dims, t.text == "param", nt)
        elif self.accept("output"):
            nt = self.peek()
            n = self.name()
            if n in m.outputs:
                self.err("output '%s' declared twice" % n, nt)
            decl = None
            if self.accept(":"):
                dtype, dims = self.type()
                decl = Decl("output", n, dtype, dims)
                self.note_batch(m, dims, False, nt)
            m.outputs.append(n)
            m.out_types[n] = decl
            if self.accept("="):
                self.define(m, n, nt)
                m.defs[n] = self.expr()
            elif decl is None:
                self.err("expected ':' or '=' after output name")
        elif t.kind == "name":
            n = self.name()
            self.define(m, n, t)
            self.expect("=", "after a name at the start of a statement")
            m.defs[n] = self.expr()
        else:
            self.err("expected a statement")

    def note_batch(self, m, dims, is_param, tok):
        for d in dims:
            if isinstance(d, str):
                if is_param:
                    self.err("params may not use the batch dimension", tok)
                if m.batch_name is None:
                    m.batch_name = d
                elif m.batch_name != d:
                    self.err("a second symbolic dimension '%s'" % d, tok)

    # type := DTYPE '[' (dim (',' dim)*)? ']';  dim := INT | NAME
    def type(self):
        t = self.peek()
        if t.kind != "name" or t.text not in DTYPES:
            self.err("expected a dtype (f32, i32, i64)")
        self.i += 1
        self.expect("[")
        dims = []
        if not self.accept("]"):
            while True:
                d = self.peek()
                if d.kind == "num" and re.fullmatch(r"[0-9]+", d.text):
                    dims.append(int(d.text))
                elif d.kind == "name":
                    dims.append(d.text)
                else:
                    self.err("expected a dimension")
                self.i += 1
                if self.accept("]"):
                    break
                self.expect(",", "or ']' in a type")
        return t.text, dims

    # expr := expr ('+' | '-') term | term
    def expr(self):
        e = self.term()
        while True:
            t = self.accept("+") or self.accept("-")
            if not t:
                return e
            e = ("bin", t.text, e, self.term())

    # term := term ('*' | '/' | '@') unary | unary
    def term(self):
        e = self.unary()
        while True:
            t = self.accept("*") or self.accept("/") or self.accept("@")
            if not t:
                return e
            e = ("bin", t.text, e, self.unary())

    # unary := '-' unary | postfix
    def unary(self):
        if self.accept("-"):
            return ("neg", self.unary())
        return self.postfix()

    # postfix := NAME '(' args? ')' | primary;  primary := NUMBER | NAME | '(' expr ')' | list
    def postfix(self):
        t = self.peek()
        if t.kind == "name":
            self.i += 1
            if self.accept("("):
                args = []
                if not self.accept(")"):
                    while True:
                        args.append(self.arg())
                        if self.accept(")"):
                            break
                        self.expect(",", "or ')' after an argument")
                return ("call", t.text, args)
            return ("name", t.text)
        if t.kind == "num":
            self.i += 1
            is_int = re.fullmatch(r"[0-9]+", t.text) is not None
            return ("num", float(t.text), is_int)
        if self.accept("("):
            e = self.expr()
            self.expect(")")
            return e
        if self.peek().text == "[" and self.peek().kind == "punct":
            return self.list()
        self.err("expected an expression")

    # arg := expr | NAME '=' attrval;  attrval := expr | list | 'true' | 'false'
    def arg(self):
        if self.peek().kind == "name" and self.peek(1).kind == "punct" and self.peek(1).text == "=":
            key = self.name()
            self.expect("=")
            return (key, self.attrval())
        return (None, self.attrval())

    def attrval(self):
        if self.accept("true"):
            return ("bool", True)
        if self.accept("false"):
            return ("bool", False)
        return self.expr()

    # list := '[' (listitem (',' listitem)*)? ']';  listitem := '-'? INT | NAME
    def list(self):
        self.expect("[")
        items = []
        if not self.accept("]"):
            while True:
                neg = bool(self.accept("-"))
                t = self.peek()
                if t.kind == "num" and re.fullmatch(r"[0-9]+", t.text):
                    items.append(-int(t.text) if neg else int(t.text))
                elif t.kind == "name" and not neg:
                    items.append(t.text)
                else:
                    self.err("expected an integer or a name in a list")
                self.i += 1
                if self.accept("]"):
                    break
                self.expect(",", "or ']' in a list")
        return ("list", items)


def parse_source(src, path="<model>"):
    return Parser(tokenize(src, path), path).parse_file()


def parse_file(path):
    with open(path) as f:
        return parse_source(f.read(), path)


# ---------------------------------------------------------------------------------- ops

_erf = np.frompyfunc(math.erf, 1, 1)


def _erf64(x):
    return np.asarray(_erf(np.asarray(x, np.float64)), np.float64)


def _is_int(a):
    return np.issubdtype(a.dtype, np.integer)


def _float_only(op, *xs):
    for a in xs:
        if _is_int(a):
            raise ModelError("error: arithmetic on an integer tensor in '%s'" % op)


def op_relu(x):
    # (x < 0) ? +0 : x  — keeps NaN and -0.0, maps -inf and negatives to +0.0.
    return np.where(x < 0, np.zeros((), x.dtype), x)


def op_sqrt(x):
    return np.sqrt(x)  # IEEE: sqrt(-0.0) = -0.0, sqrt(negative) = NaN


def op_sigmoid(x):
    return 1 / (1 + np.exp(-x))


def op_gelu(x, approximate="none"):
    dt = x.dtype
    if approximate == "none":
        e = np.asarray(_erf64(np.asarray(x, np.float64) * (1 / math.sqrt(2)))).astype(dt)
        return 0.5 * x * (1 + e)
    if approximate == "tanh":
        c = dt.type(math.sqrt(2 / math.pi))
        return 0.5 * x * (1 + np.tanh(c * (x + dt.type(0.044715) * x * x * x)))
    raise ModelError("error: gelu approximate must be none or tanh, got %r" % (approximate,))


def op_softmax(x, axis=-1):
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def op_log_softmax(x, axis=-1):
    m = np.max(x, axis=axis, keepdims=True)
    s = x - m
    return s - np.log(np.sum(np.exp(s), axis=axis, keepdims=True))


def op_argmax(x, axis=-1, keepdim=False):
    r = np.argmax(x, axis=axis).astype(np.int64)
    if keepdim:
        r = np.expand_dims(r, axis)
    return r


def op_matmul(a, b):
    if a.ndim < 2 or b.ndim < 2:
        raise ModelError("error: matmul needs operands of rank >= 2, got %s and %s"
                         % (list(a.shape), list(b.shape)))
    return np.matmul(a, b)


def op_linear(x, w, b=None):
    y = np.matmul(x, w.T) if x.ndim >= 2 else np.matmul(w, x)
    if b is not None:
        y = y + b
    return y


# op name -> (number of tensor args (min, max), tensor arg names, [(attr, default)], function)
_NOATTR = []
OPS = {
    "add": ((2, 2), ["a", "b"], _NOATTR, lambda a, b: a + b),
    "sub": ((2, 2), ["a", "b"], _NOATTR, lambda a, b: a - b),
    "mul": ((2, 2), ["a", "b"], _NOATTR, lambda a, b: a * b),
    "div": ((2, 2), ["a", "b"], _NOATTR, lambda a, b: a / b),
    "neg": ((1, 1), ["x"], _NOATTR, lambda x: -x),
    "exp": ((1, 1), ["x"], _NOATTR, np.exp),
    "log": ((1, 1), ["x"], _NOATTR, np.log),
    "sqrt": ((1, 1), ["x"], _NOATTR, op_sqrt),
    "relu": ((1, 1), ["x"], _NOATTR, op_relu),
    "sigmoid": ((1, 1), ["x"], _NOATTR, op_sigmoid),
    "tanh": ((1, 1), ["x"], _NOATTR, np.tanh),
    "gelu": ((1, 1), ["x"], [("approximate", "none")], op_gelu),
    "matmul": ((2, 2), ["a", "b"], _NOATTR, op_matmul),
    "linear": ((2, 3), ["x", "weight", "bias"], _NOATTR, op_linear),
    "softmax": ((1, 1), ["x"], [("axis", -1)], op_softmax),
    "log_softmax": ((1, 1), ["x"], [("axis", -1)], op_log_softmax),
    "sum": ((1, 1), ["x"], [("axis", -1), ("keepdim", False)],
            lambda x, axis, keepdim: np.sum(x, axis=axis, keepdims=keepdim)),
    "mean": ((1, 1), ["x"], [("axis", -1), ("keepdim", False)],
             lambda x, axis, keepdim: np.mean(x, axis=axis, keepdims=keepdim)),
    "max": ((1, 1), ["x"], [("axis", -1), ("keepdim", False)],
            lambda x, axis, keepdim: np.max(x, axis=axis, keepdims=keepdim)),
    "argmax": ((1, 1), ["x"], [("axis", -1), ("keepdim", False)], op_argmax),
    "reshape": ((1, 1), ["x"], [("shape", None)], None),
    "transpose": ((1, 1), ["x"], [("dim0", -2), ("dim1", -1)],
                  lambda x, dim0, dim1: np.swapaxes(x, dim0, dim1)),
    "permute": ((1, 1), ["x"], [("dims", None)], lambda x, dims: np.transpose(x, dims)),
}
_MOVEMENT = {"reshape", "transpose", "permute"}  # allowed on integer tensors
_BINOP = {"+": "add", "-": "sub", "*": "mul", "/": "div", "@": "matmul"}


# ---------------------------------------------------------------------------------- evaluator

class Evaluator:
    def __init__(self, model, env, batch, dt):
        self.m, self.env, self.batch, self.dt = model, env, batch, dt
        self.busy = set()

    def value(self, name):
        if name in self.env:
            return self.env[name]
        if name not in self.m.defs:
            raise ModelError("%s: error: unknown name '%s'" % (self.m.path, name))
        if name in self.busy:
            raise ModelError("%s: error: '%s' depends on itself" % (self.m.path, name))
        self.busy.add(name)
        v = self.eval(self.m.defs[name])
        self.busy.discard(name)
        self.env[name] = v
        return v

    def const(self, v):
        return np.asarray(np.float32(v), dtype=self.dt)

    def eval(self, e):
        k = e[0]
        if k == "num":
            return self.const(e[1])
        if k == "name":
            return self.value(e[1])
        if k == "neg":
            if e[1][0] == "num":          # a literal: fold in float32, keeps -0.0
                return self.const(-np.float32(e[1][1]))
            x = self.eval(e[1])
            _float_only("neg", x)
            return -x
        if k == "bin":
            return self.call(_BINOP[e[1]], [(None, e[2]), (None, e[3])])
        if k == "call":
            return self.call(e[1], e[2])
        raise ModelError("%s: error: a %s is not a tensor expression" % (self.m.path, k))

    def attr(self, e):
        """An attribute value: int, float, str (a name), bool or list."""
        k = e[0]
        if k == "num":
            return int(e[1]) if e[2] else e[1]
        if k == "neg" and e[1][0] == "num":
            return -int(e[1][1]) if e[1][2] else -e[1][1]
        if k == "name":
            return e[1]
        if k in ("bool", "list"):
            return e[1]
        raise ModelError("%s: error: bad attribute value %r" % (self.m.path, e))

    def call(self, op, args):
        if op not in OPS:
            raise ModelError("%s: error: unknown op '%s'" % (self.m.path, op))
        (nmin, nmax), tnames, attrs, fn = OPS[op]
        tensors, avals = [], {}
        for key, node in args:
            if key is None:
                if len(tensors) < nmin or (len(tensors) < nmax and not avals
                                           and node[0] not in ("list", "bool")):
                    tensors.append(node)
                else:
                    i = len(avals)
                    if i >= len(attrs):
                        raise ModelError("%s: error: too many arguments to '%s'" % (self.m.path, op))
                    avals[attrs[i][0]] = self.attr(node)
            elif key in tnames:
                i = tnames.index(key)
                while len(tensors) <= i:
                    tensors.append(None)
                tensors[i] = node
            else:
                if key not in dict(attrs):
                    raise ModelError("%s: error: '%s' has no attribute '%s'" % (self.m.path, op, key))
                avals[key] = self.attr(node)
        if not (nmin <= len(tensors) <= nmax) or any(t is None for t in tensors[:nmin]):
            raise ModelError("%s: error: '%s' takes %d..%d tensors" % (self.m.path, op, nmin, nmax))
        xs = [self.eval(t) if t is not None else None for t in tensors]
        if op not in _MOVEMENT:
            _float_only(op, *[x for x in xs if x is not None])
        kw = {}
        for a, default in attrs:
            v = avals.get(a, default)
            if v is None and a in ("shape", "dims"):
                raise ModelError("%s: error: '%s' needs '%s'" % (self.m.path, op, a))
            kw[a] = v
        if "keepdim" in kw:
            kw["keepdim"] = bool(kw["keepdim"])
        if op == "reshape":
            shape = []
            for s in kw["shape"]:
                if isinstance(s, str):
                    if s != self.m.batch_name or self.batch is None:
                        raise ModelError("%s: error: unknown dimension '%s'" % (self.m.path, s))
                    s = self.batch
                shape.append(s)
            return np.reshape(xs[0], shape)
        with np.errstate(all="ignore"):
            r = fn(*xs, **kw)
        r = np.asarray(r)
        if not _is_int(r) and r.dtype != self.dt:
            r = r.astype(self.dt)
        return r


def _dims_at(dims, batch_name, batch):
    return tuple(batch if isinstance(d, str) else d for d in dims)


def _bind_batch(model, decls, arrays, kind):
    batch = None
    for d in decls:
        if d.name not in arrays:
            raise ModelError("%s: error: missing %s '%s'" % (model.path, kind, d.name))
        a = arrays[d.name]
        if a.ndim != len(d.dims):
            raise ModelError("%s: error: %s '%s' has rank %d, declared %s%s"
                             % (model.path, kind, d.name, a.ndim, d.dtype, d.dims))
        for n, dim in zip(a.shape, d.dims):
            if isinstance(dim, str):
                if batch is not None and batch != n:
                    raise ModelError("%s: error: %s '%s': batch %d, but %d elsewhere"
                                     % (model.path, kind, d.name, n, batch))
                batch = n
            elif n != dim:
                raise ModelError("%s: error: %s '%s' has shape %s, declared %s%s"
                                 % (model.path, kind, d.name, list(a.shape), d.dtype, d.dims))
    return batch


def run_model(model, weights, inputs, precision="f64"):
    """Evaluate `model` (a path, source text containing 'model', or a Model) on `weights`
    and `inputs` (dicts name -> array-like). Returns {output name: array} in declaration order;
    f32 outputs are float32, i32/i64 keep their dtype. precision: 'f64' (default) or 'f32'."""
    if isinstance(model, str):
        model = parse_source(model) if "{" in model else parse_file(model)
    dt = np.dtype(np.float64 if precision == "f64" else np.float32)
    env = {}
    arrays = {}
    for decls, src in ((model.inputs, inputs), (model.params, weights)):
        for d in decls:
            if d.name not in src:
                raise ModelError("%s: error: missing %s '%s'" % (model.path, d.kind, d.name))
            a = np.asarray(src[d.name])
            if d.dtype == "f32":
                a = a.astype(np.float32).astype(dt)   # round to f32 first
            else:
                if not _is_int(a):
                    raise ModelError("%s: error: %s '%s' must be %s"
                                     % (model.path, d.kind, d.name, d.dtype))
                a = a.astype(DTYPES[d.dtype])
            arrays[d.name] = a
    batch = _bind_batch(model, model.inputs, arrays, "input")
    _bind_batch(model, model.params, arrays, "param")
    env.update(arrays)
    ev = Evaluator(model, env, batch, dt)
    out = {}
    for name in model.outputs:
        v = ev.value(name)
        decl = model.out_types.get(name)
        if decl is not None:
            want = _dims_at(decl.dims, model.batch_name, batch)
            if tuple(v.shape) != want:
                raise ModelError("%s: error: output '%s' has shape %s, declared %s%s"
                                 % (model.path, name, list(v.shape), decl.dtype, decl.dims))
            want_int = decl.dtype != "f32"
            if want_int != _is_int(v):
                raise ModelError("%s: error: output '%s' is %s, declared %s"
                                 % (model.path, name, v.dtype, decl.dtype))
        if _is_int(v):   # i32 stays i32 (moved by reshape/transpose/permute), argmax is i64
            v = v.astype(DTYPES[decl.dtype]) if decl is not None else v
        else:
            with np.errstate(over="ignore"):
                v = v.astype(np.float32)
        out[name] = np.array(v, order="C")  # (ascontiguousarray makes 0-d arrays 1-d)
    return out


# ---------------------------------------------------------------------------------- safetensors

_ST_DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I32": np.int32,
              "I64": np.int64, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
_ST_NAMES = {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32", np.dtype(np.int64): "I64",
             np.dtype(np.float64): "F64"}


def read_safetensors(path):
    """Read a safetensors file: 8-byte LE header length, JSON header, data. -> {name: array}."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ModelError("%s: truncated safetensors file" % path)
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise ModelError("%s: header length %d beyond the file" % (path, n))
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        dt = np.dtype(_ST_DTYPES[e["dtype"]]).newbyteorder("<")
        b, end = e["data_offsets"]
        shape = tuple(e["shape"])
        a = np.frombuffer(data[b:end], dtype=dt)
        if a.size != int(np.prod(shape, dtype=np.int64)):
            raise ModelError("%s: tensor '%s': %d bytes for shape %s" % (path, name, end - b, shape))
        out[name] = a.reshape(shape).astype(dt.newbyteorder("="))
    return out


def write_safetensors(path, tensors):
    """Write {name: array} as safetensors (F32/I32/I64/F64, little-endian, C order)."""
    header, chunks, off = {}, [], 0
    for name, a in tensors.items():
        shape = list(np.shape(a))  # np.ascontiguousarray makes a 0-d array 1-d: keep the true shape
        a = np.ascontiguousarray(a)
        raw = a.astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": _ST_NAMES[a.dtype], "shape": shape,
                        "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for c in chunks:
            f.write(c)


# ---------------------------------------------------------------------------------- self-test

def _bits_equal(a, b):
    """Bit patterns equal, any NaN matching any NaN (payload and sign of NaN not compared)."""
    a = np.asarray(a, np.float32)
    b = np.asarray(b, np.float32)
    if a.shape != b.shape:
        return False
    na, nb = np.isnan(a), np.isnan(b)
    return bool(np.array_equal(na, nb) and
                np.array_equal(a.view(np.uint32)[~na], b.view(np.uint32)[~nb]))


def _close(got, want, atol=1e-5, rtol=1e-5):
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    if got.shape != want.shape:
        return False, "shape %s != %s" % (list(got.shape), list(want.shape))
    ng, nw = np.isnan(got), np.isnan(want)
    if not np.array_equal(ng, nw):
        return False, "NaN positions differ"
    fin = ~nw & np.isfinite(want)
    if not np.array_equal(got[~nw & ~fin], want[~nw & ~fin]):
        return False, "infinities differ"
    d = np.abs(got[fin] - want[fin])
    md = float(d.max()) if d.size else 0.0
    ok = bool(np.all(d <= atol + rtol * np.abs(want[fin])))
    return ok, "maxdiff %.2g" % md


def _self_tests():
    nan, inf = float("nan"), float("inf")
    f = lambda v: np.array(v, np.float32)  # noqa: E731
    T = []  # (name, source, inputs, weights, expected {out: value}, bits)

    T.append(("B02 P-matrix reversal 4x2", """model b02 {
        input x: f32[4, 2]
        param P: f32[4, 4]
        x1 = add(x, x); f = matmul(P, x1)
        output out = add(x1, f) }""",
        {"x": f([[0, 1], [2, 3], [4, 5], [6, 7]])}, {"P": f(np.eye(4)[::-1])},
        {"out": f([[12, 16]] * 4)}, False))
    T.append(("B03 softmax axis 1 + axis 0", """model b03 {
        input x: f32[2, 3]
        output out = add(softmax(x, axis=1), softmax(x, axis=0)) }""",
        {"x": f([[1, 2, 3], [4, 5, 6]])}, {},
        {"out": f([[0.1374564, 0.2921543, 0.7126668], [1.0426047, 1.1973026, 1.6178150]])}, False))
    T.append(("B04 broadcast forms", """model b04 {
        input A: f32[2, 1]; input S: f32[2, 4]; input M: f32[2, 4]
        input P: f32[2, 1, 4]; input Q: f32[1, 3, 1]
        output out1 = add(mul(A, S), M)
        output out2 = add(add(A, S), M)
        output out3 = add(P, Q) }""",
        {"A": f([[2], [3]]), "S": f([[0, 1, 2, 3], [4, 5, 6, 7]]), "M": np.ones((2, 4), np.float32),
         "P": np.arange(8, dtype=np.float32).reshape(2, 1, 4), "Q": f([0, 10, 20]).reshape(1, 3, 1)},
        {}, {"out1": f([[1, 3, 5, 7], [13, 16, 19, 22]]), "out2": f([[3, 4, 5, 6], [8, 9, 10, 11]]),
             "out3": f([[[0, 1, 2, 3], [10, 11, 12, 13], [20, 21, 22, 23]],
                        [[4, 5, 6, 7], [14, 15, 16, 17], [24, 25, 26, 27]]])}, False))
    T.append(("B05 optimizer-style update", """model b05 {
        input m: f32[4]; input g: f32[4]; input p: f32[4]; input h: f32[4]
        output m2 = m + 0.05 * (g - m)
        output p2 = p - 0.01 * m2
        output t = h * 1 }""",
        {"m": f([0] * 4), "g": f([1, 2, 3, 4]), "p": f([1] * 4), "h": f([10, 20, 30, 40])}, {},
        {"m2": f([0.05, 0.1, 0.15, 0.2]), "p2": f([0.9995, 0.999, 0.9985, 0.998]),
         "t": f([10, 20, 30, 40])}, False))
    T.append(("B06 case 1 shifted in-place", """model b06a {
        input a_in: f32[1024]; input z: f32[256]
        a = relu(a_in)
        output k = relu(z)
        output b = add(a, 1) }""",
        {"a_in": np.arange(1024, dtype=np.float32), "z": np.linspace(-1, 1, 256).astype(np.float32)},
        {}, {"b": np.arange(1, 1025, dtype=np.float32)}, False))
    T.append(("B06 case 2 small buffers", """model b06b {
        input X: f32[200]; input Y: f32[100]; input Z: f32[100]
        A = relu(X); output E = add(A, 1)
        B = relu(Y); C = relu(Z); output D = add(B, C) }""",
        {"X": np.ones(200, np.float32), "Y": np.ones(100, np.float32),
         "Z": np.full(100, 10, np.float32)}, {},
        {"E": np.full(200, 2, np.float32), "D": np.full(100, 11, np.float32)}, False))
    T.append(("B09 softmax large logits", """model b09 {
        input a: f32[3]; input b: f32[2, 3]
        output sa = softmax(a)
        output sb = softmax(b, axis=1) }""",
        {"a": f([2000, 2001, 1999]), "b": f([[800, 1, 1], [-1000, -1000, -1001]])}, {},
        {"sa": f([0.2447285, 0.6652409, 0.0900306]),
         "sb": f([[1, 0, 0], [0.4223188, 0.4223188, 0.1553624]])}, False))
    T.append(("B13 signed zero add", """model b13a {
        input a: f32[2]; input b: f32[2]; input z: f32[]
        output s = add(a, b)
        output plus0 = z + 0.0
        output minus0 = z + -0.0
        output sub0 = z - 0.0
        output negz = -z }""",
        {"a": f([-0.0, -0.0]), "b": f([-0.0, 0.0]), "z": f(-0.0)}, {},
        {"s": f([-0.0, 0.0]), "plus0": f(0.0), "minus0": f(-0.0), "sub0": f(-0.0),
         "negz": f(0.0)}, True))
    T.append(("B13 gelu(-0.0) both forms", """model b13b {
        input x: f32[3]
        output g1 = gelu(x)
        output g2 = gelu(x, approximate=tanh) }""",
        {"x": f([-0.0, 0.0, nan])}, {}, {"g1": f([-0.0, 0.0, nan]), "g2": f([-0.0, 0.0, nan])},
        True))
    T.append(("B13 sqrt(+-0) and 1/sqrt(+-0)", """model b13c {
        input x: f32[2]
        output s = sqrt(x)
        output r = 1 / sqrt(x) }""",
        {"x": f([0.0, -0.0])}, {}, {"s": f([0.0, -0.0]), "r": f([inf, -inf])}, True))
    T.append(("B13 relu NaN/inf/-0", """model b13d {
        input x: f32[5]; input z: f32[]
        output r = relu(x)
        output rz = relu(z) }""",
        {"x": f([nan, -inf, inf, -1, 1]), "z": f(-0.0)}, {},
        {"r": f([nan, 0, inf, 0, 1]), "rz": f(-0.0)}, True))
    xn = np.arange(12, dtype=np.float32).reshape(4, 3)
    xn[0, 0] = nan
    wn = np.arange(15, dtype=np.float32).reshape(3, 5) - 7
    rown = xn @ wn
    T.append(("B13 matmul NaN row", """model b13e {
        input x: f32[4, 3]; param w: f32[3, 5]
        output y = x @ w
        output m = max(x, axis=1) }""",
        {"x": xn}, {"w": wn}, {"y": np.vstack([np.full((1, 5), nan, np.float32), rown[1:]]),
                                 "m": f([nan, 5, 8, 11])}, False))
    T.append(("parser: precedence, literals, dotted names, positional attrs", """model p {
        # a comment
        input x: f32[batch, 2, 3]; param layer1.0.w: f32[3]
        output a = 1 - 2 * x / 4 + -x   # = 1 - x/2 - x
        output b = -2. * .5 + 1e1 - x @ transpose(x)
        output c = sum(x, 1, true) + layer1.0.w
        output d: i64[batch, 2]
        d = argmax(x)
        output e = reshape(permute(x, [2, 0, 1]), [3, -1])
        output f = reshape(x, shape=[batch, 6])
        output g = softmax(x, 0) }""",
        {"x": f([[[1, 5, 5], [3, 2, 1]]])}, {"layer1.0.w": f([1, 2, 3])},
        {"a": f([[[-0.5, -6.5, -6.5], [-3.5, -2, -0.5]]]),
         "b": f([[[-1 + 10 - 51 + 0, 9 - 18], [9 - 18, 9 - 14]]]),
         "c": f([[[5, 9, 9]]]), "d": np.array([[1, 0]], np.int64),
         "e": f([[1, 3], [5, 2], [5, 1]]), "f": f([[1, 5, 5, 3, 2, 1]]),
         "g": np.ones((1, 2, 3), np.float32)}, False))
    T.append(("mean/max/log_softmax/linear/sigmoid/tanh", """model q {
        input x: f32[2, 2]; param w: f32[3, 2]; param bb: f32[3]
        output mn = mean(x, axis=0)
        output mx = max(x, keepdim=true)
        output ls = log_softmax(x)
        output l = linear(x, w, bb)
        output l0 = linear(x, w)
        output sg = sigmoid(x)
        output th = tanh(x) }""",
        {"x": f([[0, 1], [2, 4]])}, {"w": f([[1, 0], [0, 1], [1, 1]]), "bb": f([1, 2, 3])},
        {"mn": f([1, 2.5]), "mx": f([[1], [4]]),
         "ls": f([[-1.3132616, -0.3132616], [-2.1269280, -0.1269280]]),
         "l": f([[1, 3, 4], [3, 6, 9]]), "l0": f([[0, 1, 1], [2, 4, 6]]),
         "sg": f([[0.5, 0.7310586], [0.8807971, 0.9820138]]),
         "th": f([[0, 0.7615942], [0.9640276, 0.9993293]])}, False))
    T.append(("gelu values", """model g {
        input x: f32[3]
        output a = gelu(x)
        output b = gelu(x, tanh) }""",
        {"x": f([-1, 0.5, 3])}, {},
        {"a": f([-0.15865525, 0.34573123, 2.9959502]),
         "b": f([-0.15880801, 0.34571401, 2.9963627])}, False))
    return T


def _torch_cross_check():
    """Compare each op with PyTorch (float64) on random and special values. None if no torch."""
    try:
        import torch
        import torch.nn.functional as F
    except Exception:  # noqa: BLE001
        return None
    rng = np.random.default_rng(0)
    special = np.array([np.nan, -np.inf, np.inf, -1, 1, -0.0, 0.0, 1e-30, -1e-30, 88, -88, 0.5],
                       np.float32)
    x = rng.standard_normal((3, 4, 5)).astype(np.float32) * 3
    y = rng.standard_normal((4, 1)).astype(np.float32)
    a = rng.standard_normal((2, 1, 4, 6)).astype(np.float32)
    b = rng.standard_normal((3, 6, 5)).astype(np.float32)
    w = rng.standard_normal((7, 5)).astype(np.float32)
    bb = rng.standard_normal(7).astype(np.float32)
    t = lambda v: torch.from_numpy(np.asarray(v, np.float64))  # noqa: E731
    checks = [  # (model expression over inputs s, x, y, a, b, w, bb; torch result)
        ("relu(s)", torch.relu(t(special))),
        ("gelu(s)", F.gelu(t(special))),
        ("gelu(s, approximate=tanh)", F.gelu(t(special), approximate="tanh")),
        ("sqrt(s)", torch.sqrt(t(special))), ("exp(s)", torch.exp(t(special))),
        ("log(s)", torch.log(t(special))), ("sigmoid(s)", torch.sigmoid(t(special))),
        ("tanh(s)", torch.tanh(t(special))), ("-s", -t(special)),
        ("x + y", t(x) + t(y)), ("y - x", t(y) - t(x)), ("x * y", t(x) * t(y)),
        ("x / y", t(x) / t(y)), ("2 / x", 2 / t(x)), ("1 - x", 1 - t(x)),
        ("a @ b", t(a) @ t(b)), ("linear(x, w, bb)", F.linear(t(x), t(w), t(bb))),
        ("linear(x, w)", F.linear(t(x), t(w))),
        ("softmax(x, axis=0)", torch.softmax(t(x), 0)), ("softmax(x, 1)", torch.softmax(t(x), 1)),
        ("log_softmax(x)", torch.log_softmax(t(x), -1)),
        ("log_softmax(x, axis=0)", torch.log_softmax(t(x), 0)),
        ("sum(x, axis=1, keepdim=true)", t(x).sum(1, keepdim=True)), ("sum(x)", t(x).sum(-1)),
        ("mean(x, axis=0)", t(x).mean(0)), ("max(x, axis=-2, keepdim=true)", t(x).amax(-2, keepdim=True)),
        ("max(s, axis=0)", t(special).amax(0)),
        ("argmax(x, axis=1)", torch.argmax(t(x), 1)),
        ("argmax(x, axis=0, keepdim=true)", torch.argmax(t(x), 0, keepdim=True)),
        ("transpose(x)", t(x).transpose(-2, -1)), ("transpose(x, 0, 2)", t(x).transpose(0, 2)),
        ("permute(x, dims=[2, 0, 1])", t(x).permute(2, 0, 1)),
        ("reshape(x, [5, -1])", t(x).reshape(5, -1)),
    ]
    src = ["model tc {", "input s: f32[12]; input x: f32[3,4,5]; input y: f32[4,1]",
           "input a: f32[2,1,4,6]; input b: f32[3,6,5]; input w: f32[7,5]; input bb: f32[7]"]
    for i, (e, _) in enumerate(checks):
        src.append("output o%d = %s" % (i, e))
    src.append("}")
    out = run_model(parse_source("\n".join(src), "<torch-check>"), {},
                    {"s": special, "x": x, "y": y, "a": a, "b": b, "w": w, "bb": bb})
    bad = []
    for i, (e, want) in enumerate(checks):
        got = out["o%d" % i]
        want = want.numpy()
        if np.issubdtype(want.dtype, np.integer):
            ok = np.array_equal(got, want)
        else:
            ok = _bits_equal(got, want.astype(np.float32))
            if not ok and not np.any(np.isinf(want) | np.isnan(want)):
                ok = _close(got, want, atol=1e-6, rtol=1e-6)[0]
        if not ok:
            bad.append("%s: got %s, torch %s" % (e, got.ravel()[:12].tolist(), want.ravel()[:12].tolist()))
    return bad


def self_test():
    fails = 0
    bad = _torch_cross_check()
    if bad is None:
        print("PASS: refinterp/torch cross-check (skipped: torch not importable)")
    elif bad:
        fails += 1
        print("FAIL: refinterp/torch cross-check: %s" % "; ".join(bad))
    else:
        print("PASS: refinterp/torch cross-check (34 ops, bit-exact on special values)")
    for name, src, inputs, weights, expected, bits in _self_tests():
        try:
            out = run_model(parse_source(src, "<self-test>"), weights, inputs)
            why = []
            for k, want in expected.items():
                got = out[k]
                if np.issubdtype(np.asarray(want).dtype, np.integer):
                    ok, msg = np.array_equal(got, want) and got.dtype == want.dtype, "int mismatch"
                elif bits:
                    ok, msg = _bits_equal(got, want), "bit patterns differ"
                else:
                    ok, msg = _close(got, want)
                if not ok:
                    why.append("%s: %s: got %s, want %s" % (k, msg, got.tolist(),
                                                            np.asarray(want).tolist()))
        except Exception as e:  # noqa: BLE001 — report any failure as a FAIL line
            why = ["%s: %s" % (type(e).__name__, e)]
        if why:
            fails += 1
            print("FAIL: refinterp/%s: %s" % (name, "; ".join(why)))
        else:
            print("PASS: refinterp/%s" % name)
    # round trip of the safetensors writer/reader
    import os
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "w.safetensors")
        t = {"a.b": np.arange(6, dtype=np.float32).reshape(2, 3), "i": np.array([1, -2], np.int64)}
        write_safetensors(p, t)
        r = read_safetensors(p)
        ok = all(np.array_equal(r[k], t[k]) and r[k].dtype == t[k].dtype for k in t)
        print("%s: refinterp/safetensors round trip" % ("PASS" if ok else "FAIL"))
        fails += not ok
    return fails


# ---------------------------------------------------------------------------------- CLI

def _pairs(items, what):
    d = {}
    for it in items:
        if "=" not in it:
            raise SystemExit("refinterp: error: %s expects NAME=FILE, got %r" % (what, it))
        k, v = it.split("=", 1)
        d[k] = v
    return d


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description="NumPy reference interpreter for .model files")
    ap.add_argument("model", nargs="?")
    ap.add_argument("--weights")
    ap.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy")
    ap.add_argument("--output", action="append", default=[], metavar="NAME=FILE.npy")
    ap.add_argument("--precision", choices=["f64", "f32"], default="f64")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args(argv)
    if a.self_test:
        return 1 if self_test() else 0
    if not a.model:
        ap.error("a model file is required")
    try:
        m = parse_file(a.model)
        weights = read_safetensors(a.weights) if a.weights else {}
        inputs = {k: np.load(v) for k, v in _pairs(a.input, "--input").items()}
        out = run_model(m, weights, inputs, a.precision)
    except Exception as e:  # noqa: BLE001 — any failure is a one-line error, exit 1
        print("refinterp: error: %s%s" % ("" if isinstance(e, ModelError) else type(e).__name__ + ": ", e),
              file=sys.stderr)
        return 1
    outs = _pairs(a.output, "--output")
    for k in outs:
        if k not in out:
            print("refinterp: error: no output named '%s'" % k, file=sys.stderr)
            return 1
    for k, path in outs.items():
        np.save(path, out[k])
    if not outs:
        for k, v in out.items():
            print("%s: %s %s\n%s" % (k, v.dtype, list(v.shape), v))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
