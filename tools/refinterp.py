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
  - blocks are inlined (params under the "as" prefix, integer/bool arguments substituted);
    "on DEVICE { }" regions are transparent (they change where things run, never the results).
  - conv2d/pooling: PyTorch output sizes; avg_pool2d divides by the taps inside the explicitly
    padded input (never the ceil_mode overhang); attention rows with every key masked give 0;
    an embedding id outside 0..V-1 is an error naming it.
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

import math
import re
import os
import sys

import numpy as np

# ---------------------------------------------------------------------------------- tokenizer

KEYWORDS = {"model", "input", "param", "output", "true", "false", "block", "return", "as", "on", "and", "or", "not"}
# f16 values are np.float16 arrays; bf16 values, which NumPy lacks, are np.uint16 arrays of their
# bits (the top half of an f32), as modelc's npy files hold them. Only the elementwise functions
# (_HALF_OK) compute on them: they see the values as floats and round the result back
# (half_encode), as modelc's kernels do; the data-movement ones (_MOVEMENT) move the bits.
DTYPES = {"f32": np.float32, "i32": np.int32, "i64": np.int64, "bool": np.bool_, "f16": np.float16,
          "bf16": np.uint16}
HALF = ("f16", "bf16")


def bf16_to_f32(bits):
    """bf16 bits (uint16) as float32 values (exact)."""
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def bf16_from_float(x):
    """The bf16 bits nearest to the values x (float64 or narrower): ties to even, overflow to
    inf, a NaN quiet with its sign; computed from the two neighbouring bf16 values."""
    x = np.asarray(x, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        sign = np.signbit(x).astype(np.uint32) << 15
        a = np.abs(x)
        lo = (a.astype(np.float32).view(np.uint32) >> 16).astype(np.uint32)
        lo = np.where(bf16_to_f32(lo.astype(np.uint16)).astype(np.float64) > a, lo - 1, lo)
        hi = lo + 1
        dec = lambda b: np.where(b >= 0x7f80, 2.0 ** 128, bf16_to_f32(np.minimum(b, 0x7f80).astype(np.uint16)).astype(np.float64))
        dlo, dhi = a - dec(lo), dec(hi) - a
        r = np.where(dlo < dhi, lo, np.where(dhi < dlo, hi, np.where(lo & 1, hi, lo)))
        r = np.where(np.isinf(a), 0x7f80, np.minimum(r, 0x7f80))
        r = np.where(np.isnan(a), 0x7fc0, r)
    return (r | sign).astype(np.uint16)


def half_encode(kind, x):
    """Float values x rounded to f16 (np.float16) or bf16 (uint16 bits), to nearest even."""
    with np.errstate(over="ignore"):
        return np.asarray(x, np.float64).astype(np.float16) if kind == "f16" else bf16_from_float(x)


def half_decode(x):
    """An f16 or bf16 array's values as float64 (exact); other arrays unchanged."""
    if x.dtype == np.float16:
        return x.astype(np.float64)
    if x.dtype == np.uint16:
        return bf16_to_f32(x).astype(np.float64)
    return x

_TOKEN_RE = re.compile(r"""
    (?P<ws>[ \t\r\n]+|\#[^\n]*)
  | (?P<dname>[0-9]+(?:\.[0-9]+)*\.(?![eE][+-]?[0-9]+(?![A-Za-z0-9_]))[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)
  | (?P<num>(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)
  | (?P<punct>\*\*|//|<=|>=|==|!=|\+=|-=|\*=|/=|[{}()\[\],:=;+\-*/@<>%])
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
        if kind == "dname":   # 0.weight: a name (an nn.Sequential state_dict key)
            kind = "name"
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
        self.sym_names = []   # the symbolic dimensions in order of first use; the first is the batch
        self.path = "<model>"
        self.blocks, self.stmts = {}, []


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

    # file := block* 'model' NAME '{' stmt* '}'
    def parse_file(self):
        blocks = {}
        while self.peek().kind == "kw" and self.peek().text == "block":
            bt = self.peek()
            b = self.block()
            if b.name in blocks:
                self.err("redefinition of block '%s'" % b.name, bt)
            blocks[b.name] = b
        self.expect("model")
        m = Model(self.name("the model's name"))
        m.path = self.path
        m.blocks = blocks
        self.expect("{")
        m.stmts = []
        while not self.accept("}"):
            if self.accept(";"):
                continue
            m.stmts.append(self.stmt())
        if self.peek().kind != "eof":
            self.err("expected end of file after '}'")
        _Expander(m).run()
        for o in m.outputs:
            if o not in m.defs:
                raise ModelError("%s: error: output '%s' is never assigned" % (self.path, o))
        return m

    # block := 'block' NAME '(' NAME ('=' attrval)? (',' NAME ('=' attrval)?)* ')'
    #          '{' stmt* 'return' expr '}'
    def block(self):
        self.expect("block")
        b = Block(self.name("the block's name"))
        self.expect("(")
        while True:
            pt = self.peek()
            if pt.kind == "kw" and pt.text == "input":   # forward(self, input)
                self.i += 1
                pn = "input"
            else:
                pn = self.name("a block parameter")
            if pn in [q[0] for q in b.params]:
                self.err("block parameter '%s' declared twice" % pn, pt)
            b.params.append((pn, self.attrval() if self.accept("=") else None))
            if self.accept(")"):
                break
            self.expect(",", "or ')' after a block parameter")
        self.expect("{")
        while not self.accept("return"):
            if self.accept(";"):
                continue
            b.stmts.append(self.stmt())
        b.ret = [self.expr()]          # return a, b: several results
        while self.accept(","):
            b.ret.append(self.expr())
        while self.accept(";"):
            pass
        self.expect("}", "after the return expression")
        return b

    # stmt := 'input' NAME ':' type | 'param' NAME ':' type | 'output' NAME ':' type
    #       | 'output' NAME (':' type)? '=' expr | NAME '=' expr | 'on' DEVICE '{' stmt* '}'
    # Statements are returned as tuples and laid out into the Model by _Expander:
    #   ('decl', 'input'|'param', name, dtype, dims, tok)  ('output', name, Decl|None, expr|None, tok)
    #   ('assign', name, expr, tok)  ('on', device, [stmt])
    def stmt(self):
        t = self.peek()
        if t.kind == "kw" and t.text == "input" and self.peek(1).kind == "punct" and self.peek(1).text == "=":
            self.i += 2                  # input = input * 2 (a block parameter named input)
            return ("assign", "input", self.expr(), t)
        if self.accept("input") or self.accept("param"):
            nt = self.peek()
            n = self.name()
            self.expect(":")
            dtype, dims = self.type()
            return ("decl", t.text, n, dtype, dims, nt)
        if self.accept("output"):
            nt = self.peek()
            n = self.name()
            decl = None
            if self.accept(":"):
                dtype, dims = self.type()
                decl = Decl("output", n, dtype, dims)
            e = None
            if self.accept("="):
                e = self.expr()
            elif decl is None:
                self.err("expected ':' or '=' after output name")
            return ("output", n, decl, e, nt)
        if self.accept("on"):
            dt = self.peek()
            dev = self.name("a device (cpu, cpu:N, cuda, cuda:N)")
            if self.accept(":"):
                it = self.peek()
                if it.kind != "num" or not re.fullmatch(r"[0-9]+", it.text):
                    self.err("expected a device number after ':'")
                self.i += 1
                dev += ":" + it.text
            if not re.fullmatch(r"(cpu|cuda)(:[0-9]+)?", dev):
                self.err("unknown device '%s' in 'on' (expected cpu, cpu:N, cuda or cuda:N)" % dev, dt)
            self.expect("{", "after the device of 'on'")
            body = []
            while not self.accept("}"):
                if self.accept(";"):
                    continue
                body.append(self.stmt())
            return ("on", dev, body)
        if t.kind == "name":
            n = self.name()
            if self.peek().kind == "punct" and self.peek().text == ",":   # a, b = chunk(x, 2)
                names = [n]
                while self.accept(","):
                    names.append(self.name())
                self.expect("=", "after the names of a statement")
                return ("massign", names, self.expr(), t)
            op = self.peek()
            if op.kind == "punct" and op.text in ("+=", "-=", "*=", "/="):   # h += x: h = h + (x)
                self.i += 1
                return ("assign", n, ("bin", op.text[0], ("name", n), self.expr()), t)
            self.expect("=", "after a name at the start of a statement")
            return ("assign", n, self.expr(), t)
        self.err("expected a statement")

    # type := DTYPE '[' (dim (',' dim)*)? ']';  dim := INT | NAME
    def type(self):
        t = self.peek()
        if t.kind != "name" or t.text not in DTYPES:
            self.err("expected a dtype (f32, f16, bf16, i32, i64, bool)")
        self.i += 1
        self.expect("[")
        dims = []
        if not self.accept("]"):
            while True:
                d = self.peek()
                it = _item(self.arith())
                if isinstance(it, float):
                    self.err("expected a dimension", d)
                dims.append(it)
                if self.accept("]"):
                    break
                self.expect(",", "or ']' in a type")
        return t.text, dims

    # expr := expr 'or' conj | conj;  conj := conj 'and' neg | neg;  neg := 'not' neg | cmp
    def expr(self):
        e = self.conj()
        while self.accept("or"):
            e = ("bin", "or", e, self.conj())
        return e

    def conj(self):
        e = self.negation()
        while self.accept("and"):
            e = ("bin", "and", e, self.negation())
        return e

    def negation(self):
        if self.accept("not"):
            return ("call", "logical_not", [(None, self.negation())], None)
        return self.cmp()

    # cmp := arith (('<' | '<=' | '>' | '>=' | '==' | '!=') arith)?   (no chains)
    def cmp(self):
        e = self.arith()
        for op in ("<=", ">=", "==", "!=", "<", ">"):
            if self.accept(op):
                e = ("bin", op, e, self.arith())
                if self.peek().kind == "punct" and self.peek().text in ("<=", ">=", "==", "!=", "<", ">"):
                    self.err("comparisons do not chain")
                return e
        return e

    # arith := arith ('+' | '-') term | term
    def arith(self):
        e = self.term()
        while True:
            t = self.accept("+") or self.accept("-")
            if not t:
                return e
            e = ("bin", t.text, e, self.term())

    # term := term ('*' | '/' | '//' | '%' | '@') unary | unary
    def term(self):
        e = self.unary()
        while True:
            t = self.accept("*") or self.accept("//") or self.accept("/") or self.accept("%") or self.accept("@")
            if not t:
                return e
            e = ("bin", t.text, e, self.unary())

    # unary := '-' unary | power;  power := postfix ('**' unary)?   (as in Python)
    def unary(self):
        if self.accept("-"):
            return ("neg", self.unary())
        e = self.postfix()
        if self.accept("**"):
            return ("bin", "**", e, self.unary())
        return e

    # postfix := NAME '(' args? ')' | primary;  primary := NUMBER | NAME | '(' expr ')' | list
    def postfix(self):
        t = self.peek()
        if t.kind == "kw" and t.text == "input":   # a block parameter named input
            self.i += 1
            return ("name", "input")
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
                scope = None
                if self.accept("as"):
                    scope = self.name("an instance name after 'as'")
                return ("call", t.text, args, scope)
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

    # list := '[' (listitem (',' listitem)*)? ']';  listitem := '-'? INT | '-'? NUMBER | NAME
    # (a float item: interpolate's scale_factor=[1.5, 2]; the ops that need integers refuse it)
    def list(self):
        self.expect("[")
        items = []
        if not self.accept("]"):
            while True:
                items.append(_item(self.arith()))
                if self.accept("]"):
                    break
                self.expect(",", "or ']' in a list")
        return ("list", items)


class Block:
    """A parsed block: name, params [(name, default AST or None)], stmts, ret (an AST)."""

    def __init__(self, name):
        self.name, self.params, self.stmts, self.ret = name, [], [], None


def _item(e):
    """A list item or dimension as parsed: an int, a float, a name (str), or ("expr", e) for an
    integer expression computed later (2 * C, size(x, 0) // 2)."""
    if e[0] == "num":
        return int(e[1]) if e[2] else e[1]
    if e[0] == "neg" and e[1][0] == "num":
        return -int(e[1][1]) if e[1][2] else -e[1][1]
    if e[0] == "name":
        return e[1]
    return ("expr", e)


def int_expr(e, name_value):
    """The integer of expression e: literals, names (name_value(n) -> int or None), + - * // %
    (Python's rules), negation, and size(x, d) (name_value(("size", x, d)))."""
    k = e[0]
    if k == "num" and e[2]:
        return int(e[1])
    if k == "neg":
        x = int_expr(e[1], name_value)
        return None if x is None else -x
    if k == "name":
        return name_value(e[1])
    if k == "bin" and e[1] in ("+", "-", "*", "//", "%"):
        a, b = int_expr(e[2], name_value), int_expr(e[3], name_value)
        if a is None or b is None:
            return None
        if e[1] in ("//", "%") and b == 0:
            raise ModelError("error: integer division by zero in a size expression")
        return {"+": a + b, "-": a - b, "*": a * b, "//": a // b if b else 0, "%": a % b if b else 0}[e[1]]
    if k == "call" and e[1] == "size" and len(e[2]) == 2 and e[2][0][1][0] == "name":
        d = int_expr(e[2][1][1], name_value)
        return None if d is None else name_value(("size", e[2][0][1][1], d))
    return None


def _flat(stmts):
    """The statements with 'on DEVICE { ... }' regions opened: a region only says where its
    statements run, never what they compute, and its names are visible after it."""
    for st in stmts:
        if st[0] == "on":
            yield from _flat(st[2])
        else:
            yield st


class _Expander:
    """Lays the parsed statements out into the Model (inputs, params, outputs, defs).

    A block call is inlined: the block's locals and its tensor arguments become defs named
    '#N/name' (no user name can contain '#'), its params are declared under the instance prefix
    ('as' scopes nest: outer.inner.name; without 'as' the caller's prefix is kept), and its
    integer and boolean arguments are substituted into dims, attributes and lists. A block sees
    only its own names; a name it does not know becomes '?name' (an attribute word such as
    'tanh' stays usable, a tensor use fails as an unknown name)."""

    def __init__(self, m):
        self.m, self.n, self.depth = m, 0, 0
        self.names = set()
        self.cur = {}     # a model-level name bound again -> the def that holds its current value

    def err(self, msg, tok=None):
        if tok is not None:
            raise ModelError("%s:%d:%d: error: %s" % (self.m.path, tok.line, tok.col, msg))
        raise ModelError("%s: error: %s" % (self.m.path, msg))

    def run(self):
        m = self.m
        for st in _flat(m.stmts):
            k = st[0]
            if k == "decl":
                _, kind, n, dtype, dims, tok = st
                self.define(n, tok)
                d = Decl(kind, n, dtype, dims)
                if kind == "input":
                    m.inputs.append(d)
                else:
                    self.add_param(d, tok)
                self.note_batch(dims, kind == "param", tok)
            elif k == "output":
                _, n, decl, e, tok = st
                if n in m.outputs:
                    self.err("output '%s' declared twice" % n, tok)
                self.define(n, tok)
                m.outputs.append(n)
                m.out_types[n] = decl
                if decl is not None:
                    self.note_batch(decl.dims, False, tok)
                if e is not None:
                    m.defs[n] = self.rw(e, None, None)
            elif k == "massign":
                _, names, e, tok = st
                for i, key in enumerate(self.several(e, None, None, len(names), tok)):
                    self.bind(names[i], key, tok)
            else:  # assign
                _, n, e, tok = st
                if n in m.outputs and n not in m.defs:
                    m.defs[n] = self.rw(e, None, None)
                    continue
                if n in m.outputs:
                    self.err("output '%s' is assigned twice" % n, tok)
                if n in self.names:   # bound again (Python style): later uses see the new value
                    self.n += 1
                    key = "%s@%d" % (n, self.n)     # no user name contains '@'
                    m.defs[key] = self.rw(e, None, None)
                    self.cur[n] = key
                    continue
                self.define(n, tok)
                m.defs[n] = self.rw(e, None, None)

    def bind(self, n, e, tok):
        """Bind model-level name n to expression e (a new name, or one bound again)."""
        if n in self.m.outputs:
            self.err("'%s' is an output; bind it alone" % n, tok)
        if n in self.names:
            self.n += 1
            key = "%s@%d" % (n, self.n)
            self.m.defs[key] = e
            self.cur[n] = key
        else:
            self.define(n, tok)
            self.m.defs[n] = e

    def several(self, e, ctx, prefix, count, tok):
        """The `count` results of e (split, chunk, or a block returning several) as expressions."""
        if e[0] == "call" and e[1] in self.m.blocks:
            r = self.inst(self.m.blocks[e[1]], e[2], e[3], ctx, prefix, several=True)
        elif e[0] == "call" and e[1] in ("split", "chunk"):
            self.n += 1
            call = ("call", e[1], [(key, self.rw(v, ctx, prefix)) for key, v in e[2]])
            r = [("item", i, call, self.n, count) for i in range(count)]
        else:
            self.err("%d names are bound, but this expression gives one tensor" % count, tok)
        if len(r) != count:
            self.err("%d names are bound, but '%s' gives %d tensors" % (count, e[1], len(r)), tok)
        return r

    def define(self, n, tok):
        if n in self.names:
            self.err("'%s' is defined twice" % n, tok)
        self.names.add(n)

    def add_param(self, d, tok):
        if any(p.name == d.name for p in self.m.params):
            self.err("param '%s' is declared twice" % d.name, tok)
        self.m.params.append(d)

    def note_batch(self, dims, is_param, tok):
        m = self.m
        for d in dims:
            if isinstance(d, str):
                if is_param:
                    self.err("params may not use the batch dimension", tok)
                if m.batch_name is None:
                    m.batch_name = d
                if d not in m.sym_names:
                    m.sym_names.append(d)

    def rw(self, e, ctx, prefix):
        """Rewrite an expression of the caller's scope ctx (None: model level) into global names."""
        k = e[0]
        if k in ("num", "bool"):
            return e
        if k == "name":
            if ctx is None:
                return ("name", self.cur[e[1]]) if e[1] in self.cur else e
            b = ctx.get(e[1])
            if b is None:
                return ("name", "?" + e[1])
            if b[0] == "t":
                return ("name", b[1])
            if b[0] == "i":
                return ("num", float(b[1]), True)
            return ("bool", b[1])
        if k == "neg":
            return ("neg", self.rw(e[1], ctx, prefix))
        if k == "bin":
            return ("bin", e[1], self.rw(e[2], ctx, prefix), self.rw(e[3], ctx, prefix))
        if k == "list":
            items = []
            for it in e[1]:
                if isinstance(it, tuple):          # ("expr", e): rewritten, computed at run
                    items.append(("expr", self.rw(it[1], ctx, prefix)))
                    continue
                b = ctx.get(it) if (ctx is not None and isinstance(it, str)) else None
                items.append(b[1] if b is not None and b[0] == "i" else it)
            return ("list", items)
        if k == "call":
            name, args, scope = e[1], e[2], e[3]
            if name in self.m.blocks:
                return self.inst(self.m.blocks[name], args, scope, ctx, prefix)[0]
            if scope is not None:
                self.err("'as %s' names a block instance, but '%s' is an operation" % (scope, name))
            return ("call", name, [(key, self.rw(v, ctx, prefix)) for key, v in args])
        raise ModelError("%s: error: bad expression %r" % (self.m.path, e))

    def int_value(self, v, ctx):
        """The integer an argument stands for (literals and integer block parameters with + - *
        // %), or None. size() needs shapes, which the expansion does not know: refused."""
        def name_value(n):
            if isinstance(n, tuple):
                self.err("size() in a block argument or a param's shape is not supported by the reference "
                         "interpreter")
            return ctx[n][1] if ctx is not None and ctx.get(n, ("t",))[0] == "i" else None
        return int_expr(v, name_value)

    def inst(self, b, args, scope, cctx, cprefix, several=False):
        """The block's results as a list of expressions (one unless `several`)."""
        if len(b.ret) != 1 and not several:
            self.err("block '%s' returns %d tensors: bind them to names" % (b.name, len(b.ret)))
        if self.depth >= 32:
            self.err("blocks nested more than 32 deep: is block '%s' recursive?" % b.name)
        pnames = [q[0] for q in b.params]
        bound, npos = {}, 0
        for key, v in args:
            if key is None:
                if npos >= len(pnames):
                    self.err("too many arguments to block '%s': it takes %d" % (b.name, len(pnames)))
                key = pnames[npos]
                npos += 1
            elif key not in pnames:
                self.err("block '%s' has no parameter '%s'" % (b.name, key))
            if key in bound:
                self.err("parameter '%s' of block '%s' is given twice" % (key, b.name))
            bound[key] = v
        self.n += 1
        uid = self.n
        ctx = {}
        for pn, default in b.params:
            v = bound.get(pn, default)
            if v is None:
                self.err("missing argument '%s' for block '%s'" % (pn, b.name))
            if v[0] == "bool":
                ctx[pn] = ("b", v[1])
            elif v[0] == "name" and cctx is not None and cctx.get(v[1], ("t",))[0] == "b":
                ctx[pn] = cctx[v[1]]
            elif self.int_value(v, cctx) is not None:
                ctx[pn] = ("i", self.int_value(v, cctx))
            else:
                g = "#%d/%s" % (uid, pn)
                self.m.defs[g] = self.rw(v, cctx, cprefix)   # evaluated in the caller's scope
                ctx[pn] = ("t", g)
        prefix = (cprefix + "." + scope if cprefix else scope) if scope else cprefix
        self.depth += 1
        for st in _flat(b.stmts):
            if st[0] in ("output",) or (st[0] == "decl" and st[1] == "input"):
                self.err("'%s' is not allowed in a block; a block takes tensors as parameters and "
                         "returns one" % ("output" if st[0] == "output" else "input"), st[-1])
            if st[0] == "decl":
                _, _, n, dtype, dims, tok = st
                if n in ctx:
                    self.err("'%s' is defined twice" % n, tok)
                dd = []
                for d in dims:
                    if isinstance(d, tuple):
                        v = self.int_value(d[1], ctx)
                        if v is None or v <= 0:
                            self.err("a dimension of param '%s' is not a positive integer" % n, tok)
                        d = v
                    if isinstance(d, str):
                        bd = ctx.get(d)
                        if bd is None or bd[0] != "i":
                            self.err("unknown dimension '%s' in param '%s': not a parameter of block "
                                     "'%s'" % (d, n, b.name), tok)
                        if bd[1] <= 0:
                            self.err("dimension %s = %d of param '%s' must be positive" % (d, bd[1], n), tok)
                        d = bd[1]
                    dd.append(d)
                g = prefix + "." + n if prefix else n
                self.add_param(Decl("param", g, dtype, dd), tok)
                ctx[n] = ("t", g)
            elif st[0] == "massign":
                _, names, e, tok = st
                for i, r in enumerate(self.several(e, ctx, prefix, len(names), tok)):
                    if names[i] in ctx and ctx[names[i]][0] != "t":
                        self.err("'%s' is an integer argument of block '%s'" % (names[i], b.name), tok)
                    self.n += 1
                    g = "#%d/%s@%d" % (uid, names[i], self.n)
                    self.m.defs[g] = r
                    ctx[names[i]] = ("t", g)
            else:
                _, n, e, tok = st
                if n in ctx and ctx[n][0] != "t":
                    self.err("'%s' is an integer argument of block '%s'" % (n, b.name), tok)
                self.n += 1      # a name bound again gets a def of its own (Python style)
                g = "#%d/%s@%d" % (uid, n, self.n)
                self.m.defs[g] = self.rw(e, ctx, prefix)
                ctx[n] = ("t", g)
        rets = []
        for i, r in enumerate(b.ret):
            g = "#%d/return%d" % (uid, i)
            self.m.defs[g] = self.rw(r, ctx, prefix)
            rets.append(("name", g))
        self.depth -= 1
        return rets


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
    return np.issubdtype(a.dtype, np.integer) and a.dtype != np.uint16   # uint16: bf16 bits


def _float_only(op, *xs):
    for a in xs:
        if _is_int(a):
            raise ModelError("error: arithmetic on an integer tensor in '%s'" % op)


def op_relu(x):
    # (x < 0) ? +0 : x  — keeps NaN and -0.0, maps -inf and negatives to +0.0.
    return np.where(x < 0, np.zeros((), x.dtype), x)


def op_sqrt(x):
    return np.sqrt(x)  # IEEE: sqrt(-0.0) = -0.0, sqrt(negative) = NaN


def _ax(axis):
    return tuple(axis) if isinstance(axis, list) else axis


def op_logsumexp(x, axis=-1, keepdim=False):
    big = float(np.finfo(np.float32).max)
    m = np.clip(np.max(x, axis=_ax(axis), keepdims=True), -big, big)
    r = m + np.log(np.sum(np.exp(x - m), axis=_ax(axis), keepdims=True))
    return r if keepdim else np.squeeze(r, axis=_ax(axis))


def op_rms_norm(x, w=None, eps=1e-6):
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y * w if w is not None else y


def op_squeeze(x, dim=None):
    if dim is None:
        return np.squeeze(x)
    return np.squeeze(x, axis=dim) if x.shape[dim] == 1 else x


def op_expand(x, shape):
    off = len(shape) - x.ndim
    full = [x.shape[i - off] if s == -1 else s for i, s in enumerate(shape)]
    return np.broadcast_to(x, full).copy()


def op_clamp(x, lo, hi):
    # NaN passes through: no comparison holds for it (PyTorch's clamp)
    return np.where(x < lo, lo, np.where(x > hi, hi, x))


def op_softplus(x, beta=1.0, threshold=20.0):
    with np.errstate(over="ignore"):
        return np.where(x * beta > threshold, x, np.log1p(np.exp(x * beta)) / beta)


def op_erf(x):
    import math
    return np.vectorize(math.erf, otypes=[np.float64])(x)


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


def _pair(v, what, op):
    """An integer (both axes) or [h, w]."""
    if isinstance(v, bool) or not (isinstance(v, int) or (isinstance(v, list) and len(v) == 2
                                                          and all(isinstance(i, int) for i in v))):
        raise ModelError("error: attribute '%s' of '%s' must be an integer or [h, w], got %r" % (what, op, v))
    return (v, v) if isinstance(v, int) else tuple(v)


def _pads(v, op):
    """padding: an integer, [h, w] (symmetric) or [top, left, bottom, right] -> (t, l, b, r)."""
    if isinstance(v, int) and not isinstance(v, bool):
        p = (v, v, v, v)
    elif isinstance(v, list) and len(v) == 2 and all(isinstance(i, int) for i in v):
        p = (v[0], v[1], v[0], v[1])
    elif isinstance(v, list) and len(v) == 4 and all(isinstance(i, int) for i in v):
        p = tuple(v)
    else:
        raise ModelError("error: '%s' padding must be an integer, [h, w] or [top, left, bottom, right],"
                         " got %r" % (op, v))
    if min(p) < 0:
        raise ModelError("error: '%s' padding must be >= 0, got %r" % (op, v))
    return p


def window_out(L, k, s, pb, pe, d=1, ceil_mode=False):
    """PyTorch's sliding-window output length (docs/language.md): floor (or ceil) of
    (L + pb + pe - d*(k-1) - 1) / s, plus 1; under ceil_mode a last window starting at or after
    L + pb is dropped. Exact integer arithmetic: L=1, k=2, s=2 gives 0 (floor), 1 (ceil)."""
    num = L + pb + pe - d * (k - 1) - 1
    o = (-(-num // s) if ceil_mode else num // s) + 1
    if ceil_mode and (o - 1) * s >= L + pb:
        o -= 1
    return o


def _need_nchw(op, x):
    if x.ndim != 4:
        raise ModelError("error: '%s' input must be rank 4 [N, C, H, W], got %s" % (op, list(x.shape)))


def _check_window(op, stride, dil):
    if min(stride) < 1:
        raise ModelError("error: '%s' stride must be >= 1, got %r" % (op, stride))
    if min(dil) < 1:
        raise ModelError("error: '%s' dilation must be >= 1, got %r" % (op, dil))


def _out_hw(op, x, k, stride, pads, dil, ceil_mode):
    H, W = x.shape[2], x.shape[3]
    oh = window_out(H, k[0], stride[0], pads[0], pads[2], dil[0], ceil_mode)
    ow = window_out(W, k[1], stride[1], pads[1], pads[3], dil[1], ceil_mode)
    if oh < 1 or ow < 1:
        raise ModelError("error: '%s' output size %dx%d is empty (input %dx%d, kernel %dx%d, stride %dx%d, "
                         "padding %s, dilation %dx%d)" % (op, max(oh, 0), max(ow, 0), H, W, k[0], k[1],
                                                          stride[0], stride[1], list(pads), dil[0], dil[1]))
    return oh, ow


def _taps(xp, kh, kw, stride, dil, oh, ow):
    """The window tap (kh, kw) of every output position: xp[..., i*sh + kh*dh, j*sw + kw*dw]."""
    h0, w0 = kh * dil[0], kw * dil[1]
    return xp[:, :, h0:h0 + stride[0] * (oh - 1) + 1:stride[0], w0:w0 + stride[1] * (ow - 1) + 1:stride[1]]


def _pad_to(x, pads, oh, ow, k, stride, dil, value):
    """x padded by (t, l, b, r), and further at the end so that every (ceil-mode) window fits."""
    t, l, b, r = pads
    need_h = stride[0] * (oh - 1) + dil[0] * (k[0] - 1) + 1
    need_w = stride[1] * (ow - 1) + dil[1] * (k[1] - 1) + 1
    eb = max(b, need_h - x.shape[2] - t)
    er = max(r, need_w - x.shape[3] - l)
    return np.pad(x, ((0, 0), (0, 0), (t, eb), (l, er)), constant_values=value)


def op_conv2d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    op = "conv2d"
    if w.ndim != 4:
        raise ModelError("error: 'conv2d' weight must be rank 4 [O, C/groups, KH, KW], got rank %d" % w.ndim)
    _need_nchw(op, x)
    stride, dil, pads = _pair(stride, "stride", op), _pair(dilation, "dilation", op), _pads(padding, op)
    _check_window(op, stride, dil)
    if not isinstance(groups, int) or groups < 1:
        raise ModelError("error: 'conv2d' groups must be >= 1, got %r" % (groups,))
    N, C = x.shape[:2]
    O, Cg, KH, KW = w.shape
    if C % groups:
        raise ModelError("error: 'conv2d' groups %d does not divide input channels %d" % (groups, C))
    if O % groups:
        raise ModelError("error: 'conv2d' groups %d does not divide output channels %d" % (groups, O))
    if Cg * groups != C:
        raise ModelError("error: 'conv2d' input channels %d differ from weight C x groups = %d x %d"
                         % (C, Cg, groups))
    if b is not None and b.shape != (O,):
        raise ModelError("error: 'conv2d' bias must be [%d], got %s" % (O, list(b.shape)))
    oh, ow = _out_hw(op, x, (KH, KW), stride, pads, dil, False)
    xp = _pad_to(x, pads, oh, ow, (KH, KW), stride, dil, 0)
    Og = O // groups
    out = np.zeros((N, O, oh, ow), dtype=np.result_type(x, w))
    for g in range(groups):
        xg = xp[:, g * Cg:(g + 1) * Cg]
        wg = w[g * Og:(g + 1) * Og]
        acc = np.zeros((N, Og, oh, ow), dtype=out.dtype)
        for kh in range(KH):
            for kw in range(KW):
                acc += np.einsum("nchw,oc->nohw", _taps(xg, kh, kw, stride, dil, oh, ow), wg[:, :, kh, kw])
        out[:, g * Og:(g + 1) * Og] = acc
    if b is not None:
        out = out + b.reshape(O, 1, 1)
    return out


def op_conv1d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    """F.conv1d on NCL, computed directly (one einsum per tap), not through conv2d."""
    if x.ndim != 3 or w.ndim != 3:
        raise ModelError("error: 'conv1d' input and weight must be rank 3, got %s and %s"
                         % (list(x.shape), list(w.shape)))
    for what, v, lo in (("stride", stride, 1), ("padding", padding, 0), ("dilation", dilation, 1), ("groups", groups, 1)):
        if not isinstance(v, int) or v < lo:
            raise ModelError("error: 'conv1d' %s must be >= %d, got %r" % (what, lo, v))
    N, C, L = x.shape
    O, Cg, K = w.shape
    if C % groups or O % groups or Cg * groups != C:
        raise ModelError("error: 'conv1d' groups %d do not fit input channels %d, weight %s" % (groups, C, list(w.shape)))
    if b is not None and b.shape != (O,):
        raise ModelError("error: 'conv1d' bias must be [%d], got %s" % (O, list(b.shape)))
    ol = (L + 2 * padding - dilation * (K - 1) - 1) // stride + 1
    if ol < 1:
        raise ModelError("error: 'conv1d' output length %d is empty" % max(ol, 0))
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding)))
    Og = O // groups
    out = np.zeros((N, O, ol), dtype=np.result_type(x, w))
    for g in range(groups):
        for k in range(K):
            s0 = k * dilation
            taps = xp[:, g * Cg:(g + 1) * Cg, s0:s0 + stride * (ol - 1) + 1:stride]
            out[:, g * Og:(g + 1) * Og] += np.einsum("ncl,oc->nol", taps, w[g * Og:(g + 1) * Og, :, k])
    if b is not None:
        out = out + b.reshape(O, 1)
    return out


def op_conv_transpose2d(x, w, b=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """F.conv_transpose2d: every input pixel times every tap added into a buffer of the full size
    (H-1)*stride + dilation*(KH-1) + 1 + output_padding, then cut by padding on both sides."""
    op = "conv_transpose2d"
    _need_nchw(op, x)
    if w.ndim != 4:
        raise ModelError("error: 'conv_transpose2d' weight must be rank 4 [C, O/groups, KH, KW], got %s" % list(w.shape))
    s, p, op_, d = (_pair(v, a, op) for v, a in ((stride, "stride"), (padding, "padding"),
                                                  (output_padding, "output_padding"), (dilation, "dilation")))
    if min(s) < 1 or min(d) < 1 or min(p) < 0 or min(op_) < 0:
        raise ModelError("error: 'conv_transpose2d' stride/dilation must be >= 1, padding/output_padding >= 0")
    if any(o >= si and o >= di for o, si, di in zip(op_, s, d)):
        raise ModelError("error: 'conv_transpose2d' output_padding must be smaller than either stride or dilation")
    N, C, H, W = x.shape
    Cw, Og, KH, KW = w.shape
    if Cw != C or not isinstance(groups, int) or groups < 1 or C % groups:
        raise ModelError("error: 'conv_transpose2d' weight %s and groups %r do not fit the input %s"
                         % (list(w.shape), groups, list(x.shape)))
    O, Cg = Og * groups, C // groups
    if b is not None and b.shape != (O,):
        raise ModelError("error: 'conv_transpose2d' bias must be [%d], got %s" % (O, list(b.shape)))
    full = [(n - 1) * si + di * (k - 1) + 1 + o for n, si, di, k, o in zip((H, W), s, d, (KH, KW), op_)]
    oh, ow = full[0] - 2 * p[0], full[1] - 2 * p[1]
    if oh < 1 or ow < 1:
        raise ModelError("error: 'conv_transpose2d' output size %dx%d is empty" % (oh, ow))
    buf = np.zeros((N, O) + tuple(full), dtype=np.result_type(x, w))
    for g in range(groups):
        xg, wg = x[:, g * Cg:(g + 1) * Cg], w[g * Cg:(g + 1) * Cg]
        for kh in range(KH):
            for kw in range(KW):
                h0, w0 = kh * d[0], kw * d[1]
                buf[:, g * Og:(g + 1) * Og, h0:h0 + (H - 1) * s[0] + 1:s[0], w0:w0 + (W - 1) * s[1] + 1:s[1]] += \
                    np.einsum("nchw,co->nohw", xg, wg[:, :, kh, kw])
    out = buf[:, :, p[0]:p[0] + oh, p[1]:p[1] + ow]
    if b is not None:
        out = out + b.reshape(O, 1, 1)
    return out


def op_pixel_shuffle(x, upscale_factor=None):
    """F.pixel_shuffle: [*, C*r*r, H, W] -> [*, C, H*r, W*r], out[c, h*r+i, w*r+j] = x[c*r*r + i*r + j, h, w]."""
    r = upscale_factor
    if x.ndim < 3 or not isinstance(r, int) or r < 1 or x.shape[-3] % (r * r):
        raise ModelError("error: 'pixel_shuffle' needs [*, C*r*r, H, W] and r >= 1, got %s and %r" % (list(x.shape), r))
    *lead, C, H, W = x.shape
    out = np.empty(tuple(lead) + (C // (r * r), H * r, W * r), dtype=x.dtype)
    for i in range(r):
        for j in range(r):
            out[..., i::r, j::r] = x[..., i * r + j::r * r, :, :]
    return out


def _interp_scale(n_in, n_out, align_corners, sf):
    """PyTorch's float32 scale (area_pixel_compute_scale / compute_scales_value)."""
    f = np.float32
    if align_corners:
        return f(n_in - 1) / f(n_out - 1) if n_out > 1 else f(0)
    return f(1.0 / sf) if sf else f(n_in) / f(n_out)


def _nearest_index(n_in, n_out, scale):
    """Source index of every output index (PyTorch CPU's nearest_idx, float32 products)."""
    d = np.arange(n_out)
    if n_out == n_in:
        return d
    if n_out == 2 * n_in:
        return d >> 1
    return np.minimum(np.floor(d.astype(np.float32) * scale).astype(np.int64), n_in - 1)


def _linear_index(n_in, n_out, scale, align_corners):
    """(i0, i1, lambda1) per output index (PyTorch CPU's compute_source_index_and_lambda)."""
    f = np.float32
    if n_out == n_in:  # a copy (compute_source_index_and_lambda), whatever the scale
        return np.arange(n_in), np.arange(n_in), np.zeros(n_in)
    d = np.arange(n_out).astype(f)
    src = scale * d if align_corners else np.maximum(scale * (d + f(0.5)) - f(0.5), f(0))
    i0 = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    lam = np.clip(src - i0.astype(f), f(0), f(1))
    return i0, i0 + (i0 < n_in - 1), lam.astype(np.float64)


def op_interpolate(x, size=None, scale_factor=None, mode="nearest", align_corners=False, op="interpolate"):
    """F.interpolate on NCHW (nearest, bilinear), PyTorch's coordinates; the values in float64."""
    _need_nchw(op, x)
    if (size is None) == (scale_factor is None):
        raise ModelError("error: '%s' takes exactly one of size and scale_factor" % op)
    if mode not in ("nearest", "bilinear"):
        raise ModelError("error: '%s' mode must be nearest or bilinear, got %r" % (op, mode))
    H, W = x.shape[2:]
    if size is not None:
        out = _pair(size, "size", op)
        sfs = (None, None)
    else:
        sfs = tuple(float(v) for v in (scale_factor if isinstance(scale_factor, list) else [scale_factor] * 2))
        out = tuple(int(math.floor(float(n) * s)) for n, s in zip((H, W), sfs))
    if min(out) < 1:
        raise ModelError("error: '%s' output size %s is empty" % (op, list(out)))
    ac = bool(align_corners) and mode == "bilinear"
    sh, sw = (_interp_scale(n, o, ac, s) for n, o, s in zip((H, W), out, sfs))
    if mode == "nearest":
        return x[:, :, _nearest_index(H, out[0], sh)][:, :, :, _nearest_index(W, out[1], sw)]
    h0, h1, lh = _linear_index(H, out[0], sh, ac)
    w0, w1, lw = _linear_index(W, out[1], sw, ac)
    lh, lw = lh[:, None], lw[None, :]
    r0, r1 = x[:, :, h0], x[:, :, h1]
    return ((1 - lh) * ((1 - lw) * r0[..., w0] + lw * r0[..., w1]) +
            lh * ((1 - lw) * r1[..., w0] + lw * r1[..., w1]))


def _pool_attrs(op, x, kernel, stride, padding, dilation):
    _need_nchw(op, x)
    if kernel is None:
        raise ModelError("error: '%s' needs a kernel size" % op)
    k = _pair(kernel, "kernel", op)
    if min(k) < 1:
        raise ModelError("error: '%s' kernel must be >= 1, got %r" % (op, kernel))
    s = k if stride is None else _pair(stride, "stride", op)
    d = _pair(dilation, "dilation", op)
    pads = _pads(padding, op)
    _check_window(op, s, d)
    for i in range(4):
        eff = d[i % 2] * (k[i % 2] - 1) + 1
        if 2 * pads[i] > eff:
            raise ModelError("error: '%s' padding %d is more than half the kernel size %d" % (op, pads[i], eff))
    return k, s, d, pads


def op_max_pool2d(x, kernel=None, stride=None, padding=0, dilation=1, ceil_mode=False):
    op = "max_pool2d"
    k, s, d, pads = _pool_attrs(op, x, kernel, stride, padding, dilation)
    oh, ow = _out_hw(op, x, k, s, pads, d, bool(ceil_mode))
    xp = _pad_to(x, pads, oh, ow, k, s, d, -np.inf)
    out = np.full(x.shape[:2] + (oh, ow), -np.inf, dtype=x.dtype)
    for kh in range(k[0]):
        for kw in range(k[1]):
            out = np.maximum(out, _taps(xp, kh, kw, s, d, oh, ow))   # NaN propagates, as in PyTorch
    return out


def op_avg_pool2d(x, kernel=None, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    op = "avg_pool2d"
    k, s, d, pads = _pool_attrs(op, x, kernel, stride, padding, 1)
    oh, ow = _out_hw(op, x, k, s, pads, d, bool(ceil_mode))
    xp = _pad_to(x, pads, oh, ow, k, s, d, 0)
    tot = np.zeros(x.shape[:2] + (oh, ow), dtype=x.dtype)
    for kh in range(k[0]):
        for kw in range(k[1]):
            tot = tot + _taps(xp, kh, kw, s, d, oh, ow)
    H, W = x.shape[2], x.shape[3]

    def count(o, L, kk, ss, pb, pe):
        st = np.arange(o) * ss - pb
        if count_include_pad:   # taps inside the explicitly padded input [-pb, L + pe)
            return np.minimum(st + kk, L + pe) - st
        return np.minimum(st + kk, L) - np.maximum(st, 0)
    div = np.outer(count(oh, H, k[0], s[0], pads[0], pads[2]), count(ow, W, k[1], s[1], pads[1], pads[3]))
    return tot / div.astype(x.dtype)


def op_adaptive_avg_pool2d(x, output_size=1):
    op = "adaptive_avg_pool2d"
    _need_nchw(op, x)
    oh, ow = _pair(output_size, "output_size", op)
    H, W = x.shape[2], x.shape[3]
    if not (1 <= oh <= H and 1 <= ow <= W):
        raise ModelError("error: 'adaptive_avg_pool2d' output size %dx%d must be in 1..%dx%d" % (oh, ow, H, W))
    out = np.zeros(x.shape[:2] + (oh, ow), dtype=x.dtype)
    for i in range(oh):
        h0, h1 = (i * H) // oh, -((-(i + 1) * H) // oh)
        for j in range(ow):
            w0, w1 = (j * W) // ow, -((-(j + 1) * W) // ow)
            out[:, :, i, j] = np.mean(x[:, :, h0:h1, w0:w1], axis=(2, 3))
    return out


def op_batch_norm(x, w, b, mean, var, eps=1e-5, momentum=0.1):
    """The inference form (running statistics); momentum matters only to a training step
    (modelc --train), which this interpreter does not run."""
    if x.ndim < 2:
        raise ModelError("error: 'batch_norm' input must have rank >= 2 [N, C, ...], got %s" % list(x.shape))
    C = x.shape[1]
    for what, p in (("weight", w), ("bias", b), ("running_mean", mean), ("running_var", var)):
        if p.shape != (C,):
            raise ModelError("error: 'batch_norm' %s must be [%d], got %s" % (what, C, list(p.shape)))
    sh = (C,) + (1,) * (x.ndim - 2)
    return ((x - mean.reshape(sh)) / np.sqrt(var.reshape(sh) + eps)) * w.reshape(sh) + b.reshape(sh)


def _stats_norm(x, axes, eps):
    """(x - mean) / sqrt(var + eps) over axes, biased variance (float64 throughout)."""
    mu = np.mean(x, axis=axes, keepdims=True)
    var = np.mean((x - mu) ** 2, axis=axes, keepdims=True)
    return (x - mu) / np.sqrt(var + eps)


def op_layer_norm(x, w=None, b=None, eps=1e-5, normalized_shape=None):
    """F.layer_norm over the last len(normalized_shape) axes (default: the last axis)."""
    if normalized_shape is None:
        ns = (x.shape[-1],)
    else:
        ns = tuple(normalized_shape) if isinstance(normalized_shape, (list, tuple)) else (normalized_shape,)
    if not 1 <= len(ns) <= x.ndim or tuple(x.shape[x.ndim - len(ns):]) != ns:
        raise ModelError("error: 'layer_norm' normalized_shape %s is not the last %d axes of the input %s"
                         % (list(ns), len(ns), list(x.shape)))
    for what, p in (("weight", w), ("bias", b)):
        if p is not None and tuple(p.shape) != ns:
            raise ModelError("error: 'layer_norm' %s must be %s, got %s" % (what, list(ns), list(p.shape)))
    y = _stats_norm(x, tuple(range(x.ndim - len(ns), x.ndim)), eps)
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y


def op_group_norm(x, w=None, b=None, num_groups=None, eps=1e-5, op="group_norm"):
    """F.group_norm: statistics per image and group of C/num_groups channels (and all positions)."""
    if x.ndim < (3 if op == "instance_norm" else 2):
        raise ModelError("error: '%s' input must have rank >= %d, got %s"
                         % (op, 3 if op == "instance_norm" else 2, list(x.shape)))
    N, C = x.shape[:2]
    G = C if op == "instance_norm" else num_groups
    if not isinstance(G, int) or G < 1 or C % G:
        raise ModelError("error: 'group_norm' num_groups %r does not divide the %d channels" % (G, C))
    for what, p in (("weight", w), ("bias", b)):
        if p is not None and p.shape != (C,):
            raise ModelError("error: '%s' %s must be [%d], got %s" % (op, what, C, list(p.shape)))
    y = _stats_norm(x.reshape(N, G, -1), 2, eps).reshape(x.shape)
    sh = (C,) + (1,) * (x.ndim - 2)
    if w is not None:
        y = y * w.reshape(sh)
    if b is not None:
        y = y + b.reshape(sh)
    return y


def _axis(op, what, a, r):
    if not isinstance(a, int) or isinstance(a, bool) or not -r <= a < r:
        raise ModelError("error: '%s' %s %r is out of range for rank %d" % (op, what, a, r))
    return a % r


def op_flatten(x, start_dim=1, end_dim=-1):
    if x.ndim == 0:
        return x.reshape(1)
    a = _axis("flatten", "start_dim", start_dim, x.ndim)
    b = _axis("flatten", "end_dim", end_dim, x.ndim)
    if a > b:
        raise ModelError("error: 'flatten' start_dim %d comes after end_dim %d" % (a, b))
    return x.reshape(x.shape[:a] + (-1,) + x.shape[b + 1:]) if x.size else x


def op_concat(*xs, axis=0):
    r = xs[0].ndim
    ax = _axis("concat", "axis", axis, r)
    for i, x in enumerate(xs):
        if x.dtype != xs[0].dtype:
            raise ModelError("error: 'concat' operand %d is %s but operand 0 is %s" % (i, x.dtype, xs[0].dtype))
        if x.ndim != r or any(x.shape[d] != xs[0].shape[d] for d in range(r) if d != ax):
            raise ModelError("error: 'concat' along axis %d: operand %d %s does not match operand 0 %s"
                             % (ax, i, list(x.shape), list(xs[0].shape)))
    return np.concatenate(xs, axis=ax)


def op_slice(x, axis=None, start=0, end=None, step=1):
    if axis is None:
        raise ModelError("error: 'slice' needs an axis")
    ax = _axis("slice", "axis", axis, x.ndim)
    if step < 1:
        raise ModelError("error: 'slice' step must be >= 1, got %d" % step)
    idx = [slice(None)] * x.ndim
    idx[ax] = slice(start, end, step)           # Python's rules: negatives from the end, clamped
    r = x[tuple(idx)]
    if r.shape[ax] < 1:
        raise ModelError("error: 'slice' of axis %d (size %d) from %r to %r is empty" % (ax, x.shape[ax], start, end))
    return r


def op_embedding(ids, w):
    if not _is_int(ids):
        raise ModelError("error: 'embedding' ids must be i32 or i64, got %s" % ids.dtype)
    if _is_int(w) or w.ndim != 2:
        raise ModelError("error: 'embedding' weight must be f32 [num_embeddings, dim]")
    V = w.shape[0]
    bad = (ids < 0) | (ids >= V)
    if np.any(bad):
        i = tuple(np.argwhere(bad)[0])
        raise ModelError("error: 'embedding' id %d at index %s is out of range 0..%d"
                         % (int(ids[i]), list(map(int, i)), V - 1))
    return w[ids]


def op_sdpa(q, k, v, mask=None, causal=False, scale=None):
    if q.ndim < 2:
        raise ModelError("error: 'scaled_dot_product_attention' query must have rank >= 2")
    E = q.shape[-1]
    if scale is None:
        scale = 1 / math.sqrt(E)
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * q.dtype.type(scale)
    if mask is not None:
        s = s + mask
    L, S = s.shape[-2], s.shape[-1]
    if causal:
        s = np.where(np.arange(S)[None, :] > np.arange(L)[:, None], -np.inf, s)
    m = np.max(s, axis=-1, keepdims=True)
    dead = m == -np.inf                    # every key masked: the row gives zeros, as in PyTorch
    e = np.exp(s - np.where(dead, 0, m))
    p = e / np.sum(e, axis=-1, keepdims=True)
    p = np.where(dead, 0, p)
    return np.matmul(p, v)


def op_split(x, split_size_or_sections=None, dim=0):
    """torch.split: pieces of a size (the last may be smaller), or of the listed sizes."""
    n = x.shape[dim]
    if isinstance(split_size_or_sections, list):
        if sum(split_size_or_sections) != n or any(s < 1 for s in split_size_or_sections):
            raise ModelError("error: 'split' sections %s do not add up to %d" % (split_size_or_sections, n))
        sizes = split_size_or_sections
    else:
        s = int(split_size_or_sections)
        if s < 1:
            raise ModelError("error: 'split' split_size must be positive")
        sizes = [min(s, n - i) for i in range(0, n, s)]
    return tuple(np.split(x, np.cumsum(sizes)[:-1], axis=dim))


def op_chunk(x, chunks=None, dim=0):
    """torch.chunk: ceil(n / chunks)-sized pieces (so possibly fewer than chunks)."""
    if int(chunks) < 1:
        raise ModelError("error: 'chunk' chunks must be positive")
    n = x.shape[dim]
    return op_split(x, -(-n // int(chunks)), dim)


def op_where(c, a, b):
    return np.where(c != 0, a, b)


def op_cast(x, dtype):
    """modelc's cast: to bool x != 0 (NaN is true); float to integer truncates toward zero, NaN
    gives 0 and values out of range saturate; integers wrap to i32; bool gives 0 or 1."""
    if dtype in HALF:   # x is a float already (half_decode) or an integer or bool
        return half_encode(dtype, x.astype(np.float64))
    to = DTYPES[dtype]
    if to == np.bool_:
        return x != 0
    if x.dtype.kind == "f" and to != np.float32:
        info = np.iinfo(to)
        t = np.trunc(np.nan_to_num(x, nan=0.0, posinf=np.inf, neginf=-np.inf))
        big, small = t >= float(info.max) + 1, t <= float(info.min)
        r = np.where(big | small, 0, t).astype(to)
        return np.where(big, info.max, np.where(small, info.min, r)).astype(to)
    if to == np.float32:
        return x.astype(np.float64)
    return x.astype(to)


def _int_div(op, a, b):
    """Python's // and % of integers (NumPy's rules); a zero divisor is an error, as modelc's run."""
    if _is_int(a) and np.any(np.asarray(b) == 0):
        raise ModelError("error: integer division by zero in '%s'" % op)
    return np.floor_divide(a, b) if op == "floor_divide" else np.remainder(a, b)


def _logical(op, *xs):
    for x in xs:
        if x.dtype != np.bool_:
            raise ModelError("error: '%s' expects bool tensors, got %s" % (op, _dtype_name(x)))
    return {"logical_and": np.logical_and, "logical_or": np.logical_or, "logical_xor": np.logical_xor,
            "logical_not": np.logical_not}[op](*xs)


def _dtype_name(a):
    if a.dtype in (np.float16, np.uint16):
        return "f16" if a.dtype == np.float16 else "bf16"
    return "bool" if a.dtype == np.bool_ else "f32" if a.dtype.kind == "f" else "i32" if a.dtype == np.int32 else "i64"

# ---------------------------------------------------------------- shape and data-movement ops
# (issue 10) torch.Tensor.repeat, torch.repeat_interleave, torch.nn.functional.pad, torch.cumsum,
# torch.arange, torch.triu / tril; the compiler's messages, the same rules.

def _int_list(op, name, v):
    if not isinstance(v, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in v):
        raise ModelError("error: attribute '%s' of '%s' must be a list of integers" % (name, op))
    return v


def op_repeat(x, reps=None):
    reps = _int_list("repeat", "reps", reps)
    if len(reps) < x.ndim:
        raise ModelError("error: 'repeat' of a tensor of rank %d needs at least %d repeats, got %d"
                         % (x.ndim, x.ndim, len(reps)))
    if any(r < 1 for r in reps):
        raise ModelError("error: 'repeat' repeats must be positive, got %d" % min(reps))
    return np.tile(x, reps)


def op_repeat_interleave(x, repeats=None, dim=None):
    if not isinstance(repeats, int) or repeats < 1:
        raise ModelError("error: 'repeat_interleave' repeats must be positive, got %r" % (repeats,))
    if dim is None:
        return np.repeat(x.reshape(-1), repeats)
    return np.repeat(x, repeats, axis=_axis("repeat_interleave", "dim", dim, x.ndim))


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}


def op_pad(x, pad=None, mode="constant", value=0.0):
    pad = _int_list("pad", "pad", pad)
    if mode not in _PAD_MODES:
        raise ModelError("error: attribute 'mode' of 'pad' must be one of constant/reflect/replicate, got '%s'" % mode)
    r = x.ndim
    if len(pad) % 2:
        raise ModelError("error: 'pad' list must have an even length (before, after pairs), got %d entries" % len(pad))
    if len(pad) > 2 * r:
        raise ModelError("error: 'pad' list of %d entries pads %d axes; a tensor of rank %d has %d"
                         % (len(pad), len(pad) // 2, r, r))
    k = len(pad) // 2
    if mode != "constant":
        if not (1 <= k <= 3 and k + 1 <= r <= k + 2):
            raise ModelError("error: 'pad' mode %s takes 2 pads for a tensor of rank 2 or 3, 4 for rank 3 or 4, 6 for "
                             "rank 4 or 5 (as PyTorch); got %d for rank %d" % (mode, len(pad), r))
        if value != 0:
            raise ModelError("error: 'pad' value applies to mode constant only, not %s" % mode)
    widths = [(0, 0)] * r
    for i in range(k):
        d = r - 1 - i
        lo, hi = pad[2 * i], pad[2 * i + 1]
        if mode != "constant" and (lo < 0 or hi < 0):
            raise ModelError("error: 'pad' mode %s needs pads >= 0" % mode)
        if mode == "reflect" and max(lo, hi) >= x.shape[d]:
            raise ModelError("error: 'pad' mode reflect: padding %d of axis %d must be less than its size %d"
                             % (max(lo, hi), d, x.shape[d]))
        if min(lo, 0) + min(hi, 0) <= -x.shape[d]:
            raise ModelError("error: 'pad' crops axis %d (size %d) leaving nothing" % (d, x.shape[d]))
        idx = [slice(None)] * r                    # negative pads crop (constant mode), as in PyTorch
        idx[d] = slice(-lo if lo < 0 else 0, x.shape[d] + hi if hi < 0 else None)
        x = x[tuple(idx)]
        widths[d] = (max(lo, 0), max(hi, 0))
    if mode == "constant":
        return np.pad(x, widths, mode="constant", constant_values=value)
    return np.pad(x, widths, mode=_PAD_MODES[mode])


def op_cumsum(x, dim=None):
    if x.ndim == 0:
        raise ModelError("error: 'cumsum' needs a tensor of rank >= 1, got a scalar")
    return np.cumsum(x, axis=_axis("cumsum", "dim", dim, x.ndim))


def op_arange(start=0, end=None, step=1):
    if end is None:
        start, end = 0, start
    if step == 0:
        raise ModelError("error: 'arange' step must be nonzero")
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end, step))
    n = math.ceil((end - start) / step)
    if n < 1:
        raise ModelError("error: 'arange' from %g to %g by %g is empty" % (start, end, step))
    i = np.arange(n, dtype=np.float64)
    return (start + step * i).astype(np.int64) if ints else start + step * i


def _index_check(op, index, n):
    bad = (index < 0) | (index >= n)
    if np.any(bad):
        i = tuple(np.argwhere(bad)[0])
        raise ModelError("error: '%s' index %d at %s is out of range [0, %d)" % (op, int(index[i]), list(map(int, i)), n))


def op_gather(x, index, dim=None):
    if not _is_int(index) or index.dtype != np.int64:
        raise ModelError("error: 'gather' index must be i64, got %s" % index.dtype)
    if index.ndim != x.ndim:
        raise ModelError("error: 'gather' index has rank %d; x has rank %d (they must match)" % (index.ndim, x.ndim))
    d = _axis("gather", "dim", dim, x.ndim)
    if any(index.shape[i] > x.shape[i] for i in range(x.ndim) if i != d):
        raise ModelError("error: 'gather' index %s is larger than x %s" % (list(index.shape), list(x.shape)))
    _index_check("gather", index, x.shape[d])
    xs = x[tuple(slice(0, index.shape[i]) if i != d else slice(None) for i in range(x.ndim))]
    return np.take_along_axis(xs, index, axis=d)


def op_index_select(x, index, dim=None):
    if not _is_int(index):
        raise ModelError("error: 'index_select' index must be i32 or i64, got %s" % index.dtype)
    if index.ndim != 1:
        raise ModelError("error: 'index_select' index must be 1-D, got %s" % list(index.shape))
    d = _axis("index_select", "dim", dim, x.ndim)
    _index_check("index_select", index, x.shape[d])
    return np.take(x, index, axis=d)


def _reduce_loss(per, reduction, count=None):
    if reduction == "none":
        return per
    if reduction == "sum":
        return np.sum(per)
    return np.sum(per) / count if count is not None else np.mean(per)


def op_cross_entropy(x, t, ignore_index=-100, label_smoothing=0.0, reduction="mean", log_probs=False):
    """torch.nn.functional.cross_entropy (nll_loss with log_probs) of [N, C] and class ids [N]."""
    if x.ndim != 2 or t.ndim != 1 or t.shape[0] != x.shape[0]:
        raise ModelError("error: cross_entropy takes [N, C] scores and [N] class ids, got %s and %s"
                         % (list(x.shape), list(t.shape)))
    lp = x if log_probs else op_log_softmax(x, axis=1)
    C = x.shape[1]
    t = np.asarray(t).astype(np.int64)
    valid = t != ignore_index
    safe = np.where(valid, t, 0)
    if ((safe < 0) | (safe >= C)).any():
        raise ModelError("error: class id out of range [0, %d)" % C)
    nll = -lp[np.arange(len(t)), safe]
    per = nll
    if label_smoothing > 0:
        per = (1 - label_smoothing) * nll + label_smoothing * (-lp.mean(axis=1))
    per = np.where(valid, per, 0.0)
    return _reduce_loss(per, reduction, count=float(valid.sum()) if reduction == "mean" else None)


def op_mse_loss(a, b, reduction="mean"):
    if a.shape != b.shape:
        raise ModelError("error: mse_loss of shapes %s and %s" % (list(a.shape), list(b.shape)))
    return _reduce_loss((a - b) ** 2, reduction)


def op_bce_logits(x, y, reduction="mean"):
    if x.shape != y.shape:
        raise ModelError("error: binary_cross_entropy_with_logits of shapes %s and %s" % (list(x.shape), list(y.shape)))
    return _reduce_loss(np.logaddexp(0, x) - x * y, reduction)


def op_one_hot(ids, num_classes=None):
    if not _is_int(ids) or ids.dtype != np.int64:
        raise ModelError("error: 'one_hot' ids must be i64, got %s" % ids.dtype)
    if not isinstance(num_classes, int) or num_classes < 1:
        raise ModelError("error: 'one_hot' num_classes must be >= 1, got %r" % (num_classes,))
    _index_check("one_hot", ids, num_classes)
    return (ids[..., None] == np.arange(num_classes)).astype(np.float64)   # f32 in the language


def _tri(op, np_fn):
    def f(x, diagonal=0):
        if x.ndim < 2:
            raise ModelError("error: '%s' needs a tensor of rank >= 2, got %s" % (op, list(x.shape)))
        return np_fn(x, diagonal)
    return f


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
    "silu": ((1, 1), ["x"], _NOATTR, lambda x: x / (1 + np.exp(-x))),
    "hardtanh": ((1, 1), ["x"], [("min_val", -1.0), ("max_val", 1.0)],
                 lambda x, min_val, max_val: op_clamp(x, min_val, max_val)),
    "clamp": ((1, 1), ["x"], [("min", float("-inf")), ("max", float("inf"))], lambda x, min, max: op_clamp(x, min, max)),
    "relu6": ((1, 1), ["x"], _NOATTR, lambda x: op_clamp(x, 0.0, 6.0)),
    "leaky_relu": ((1, 1), ["x"], [("negative_slope", 0.01)], lambda x, negative_slope: np.where(x > 0, x, x * negative_slope)),
    "elu": ((1, 1), ["x"], [("alpha", 1.0)], lambda x, alpha: np.where(x > 0, x, alpha * np.expm1(np.where(x > 0, 0.0, x)))),
    "softplus": ((1, 1), ["x"], [("beta", 1.0), ("threshold", 20.0)], op_softplus),
    "hardswish": ((1, 1), ["x"], _NOATTR, lambda x: np.where(x <= -3, 0.0, np.where(x >= 3, x, x * (x + 3) / 6))),
    "hardsigmoid": ((1, 1), ["x"], _NOATTR, lambda x: np.where(x <= -3, 0.0, np.where(x >= 3, 1.0, x / 6 + 0.5))),
    "erf": ((1, 1), ["x"], _NOATTR, op_erf),
    "abs": ((1, 1), ["x"], _NOATTR, np.abs),
    "rsqrt": ((1, 1), ["x"], _NOATTR, lambda x: 1 / np.sqrt(x)),
    "sin": ((1, 1), ["x"], _NOATTR, np.sin),
    "cos": ((1, 1), ["x"], _NOATTR, np.cos),
    "pow": ((2, 2), ["a", "b"], _NOATTR, np.power),
    "minimum": ((2, 2), ["a", "b"], _NOATTR, np.minimum),
    "maximum": ((2, 2), ["a", "b"], _NOATTR, np.maximum),
    "dropout": ((1, 1), ["x"], [("p", 0.5)], lambda x, p: x),
    "gelu": ((1, 1), ["x"], [("approximate", "none")], op_gelu),
    "matmul": ((2, 2), ["a", "b"], _NOATTR, op_matmul),
    "linear": ((2, 3), ["x", "weight", "bias"], _NOATTR, op_linear),
    "softmax": ((1, 1), ["x"], [("axis", -1)], op_softmax),
    "log_softmax": ((1, 1), ["x"], [("axis", -1)], op_log_softmax),
    "sum": ((1, 1), ["x"], [("axis", -1), ("keepdim", False)],
            lambda x, axis, keepdim: np.sum(x, axis=_ax(axis), keepdims=keepdim)),
    "mean": ((1, 1), ["x"], [("axis", -1), ("keepdim", False)],
             lambda x, axis, keepdim: np.mean(x, axis=_ax(axis), keepdims=keepdim)),
    "max": ((1, 1), ["x"], [("axis", -1), ("keepdim", False)],
            lambda x, axis, keepdim: np.max(x, axis=_ax(axis), keepdims=keepdim)),
    "min": ((1, 1), ["x"], [("axis", -1), ("keepdim", False)],
            lambda x, axis, keepdim: np.min(x, axis=_ax(axis), keepdims=keepdim)),
    "argmax": ((1, 1), ["x"], [("axis", -1), ("keepdim", False)], op_argmax),
    "argmin": ((1, 1), ["x"], [("axis", -1), ("keepdim", False)], lambda x, axis, keepdim: op_argmax(-x, axis, keepdim)),
    "var": ((1, 1), ["x"], [("axis", -1), ("unbiased", True), ("keepdim", False)],
            lambda x, axis, unbiased, keepdim: np.var(x, axis=_ax(axis), ddof=1 if unbiased else 0, keepdims=keepdim)),
    "std": ((1, 1), ["x"], [("axis", -1), ("unbiased", True), ("keepdim", False)],
            lambda x, axis, unbiased, keepdim: np.std(x, axis=_ax(axis), ddof=1 if unbiased else 0, keepdims=keepdim)),
    "logsumexp": ((1, 1), ["x"], [("axis", -1), ("keepdim", False)], op_logsumexp),
    "rms_norm": ((1, 2), ["x", "weight"], [("eps", 1e-6)], op_rms_norm),
    "unsqueeze": ((1, 1), ["x"], [("dim", None)], lambda x, dim: np.expand_dims(x, dim)),
    "squeeze": ((1, 1), ["x"], [("dim", None)], op_squeeze),
    "flip": ((1, 1), ["x"], [("dims", None)], lambda x, dims: np.flip(x, axis=_ax(dims))),
    "expand": ((1, 1), ["x"], [("shape", None)], op_expand),
    "broadcast_to": ((1, 1), ["x"], [("shape", None)], op_expand),
    "stack": ((1, 16), ["x%d" % i for i in range(16)], [("axis", 0)], lambda *xs, axis: np.stack(xs, axis=axis)),
    "zeros": ((0, 0), [], [("shape", None)], lambda shape: np.zeros(shape)),
    "ones": ((0, 0), [], [("shape", None)], lambda shape: np.ones(shape)),
    "full": ((0, 0), [], [("shape", None), ("value", None)], lambda shape, value: np.full(shape, float(value))),
    # tensor(data, dtype): Evaluator.table reads the nested lists from the AST (call() goes there first)
    "tensor": ((0, 0), [], [("data", None), ("dtype", "f32")], None),
    "reshape": ((1, 1), ["x"], [("shape", None)], None),
    "transpose": ((1, 1), ["x"], [("dim0", -2), ("dim1", -1)],
                  lambda x, dim0, dim1: np.swapaxes(x, dim0, dim1)),
    "permute": ((1, 1), ["x"], [("dims", None)], lambda x, dims: np.transpose(x, dims)),
    "conv2d": ((2, 3), ["x", "weight", "bias"],
               [("stride", 1), ("padding", 0), ("dilation", 1), ("groups", 1)], op_conv2d),
    "conv1d": ((2, 3), ["x", "weight", "bias"],
               [("stride", 1), ("padding", 0), ("dilation", 1), ("groups", 1)], op_conv1d),
    "conv_transpose2d": ((2, 3), ["x", "weight", "bias"], [("stride", 1), ("padding", 0), ("output_padding", 0),
                                                           ("groups", 1), ("dilation", 1)], op_conv_transpose2d),
    "pixel_shuffle": ((1, 1), ["x"], [("upscale_factor", None)], op_pixel_shuffle),
    "interpolate": ((1, 1), ["x"], [("size", None), ("scale_factor", None), ("mode", "nearest"),
                                    ("align_corners", False)], op_interpolate),
    "upsample": ((1, 1), ["x"], [("size", None), ("scale_factor", None), ("mode", "nearest"), ("align_corners", False)],
                 lambda x, **kw: op_interpolate(x, op="upsample", **kw)),
    "max_pool2d": ((1, 1), ["x"], [("kernel", None), ("stride", None), ("padding", 0), ("dilation", 1),
                                   ("ceil_mode", False)], op_max_pool2d),
    "avg_pool2d": ((1, 1), ["x"], [("kernel", None), ("stride", None), ("padding", 0), ("ceil_mode", False),
                                   ("count_include_pad", True)], op_avg_pool2d),
    "adaptive_avg_pool2d": ((1, 1), ["x"], [("output_size", 1)], op_adaptive_avg_pool2d),
    "batch_norm": ((5, 5), ["x", "weight", "bias", "running_mean", "running_var"], [("eps", 1e-5), ("momentum", 0.1)],
                   op_batch_norm),
    "layer_norm": ((1, 3), ["x", "weight", "bias"], [("eps", 1e-5), ("normalized_shape", None)], op_layer_norm),
    "group_norm": ((1, 3), ["x", "weight", "bias"], [("num_groups", None), ("eps", 1e-5)], op_group_norm),
    "instance_norm": ((1, 3), ["x", "weight", "bias"], [("eps", 1e-5)],
                      lambda x, w=None, b=None, eps=1e-5: op_group_norm(x, w, b, None, eps, "instance_norm")),
    "flatten": ((1, 1), ["x"], [("start_dim", 1), ("end_dim", -1)], op_flatten),
    "concat": ((1, 16), ["x%d" % i for i in range(16)], [("axis", 0)], op_concat),
    "slice": ((1, 1), ["x"], [("axis", None), ("start", 0), ("end", None), ("step", 1)], op_slice),
    "embedding": ((2, 2), ["ids", "weight"], _NOATTR, op_embedding),
    "scaled_dot_product_attention": ((3, 4), ["q", "k", "v", "mask"], [("causal", False), ("scale", None)],
                                     op_sdpa),
    "where": ((3, 3), ["cond", "a", "b"], _NOATTR, op_where),
    "split": ((1, 1), ["x"], [("split_size_or_sections", None), ("dim", 0)], op_split),
    "chunk": ((1, 1), ["x"], [("chunks", None), ("dim", 0)], op_chunk),
    "lt": ((2, 2), ["a", "b"], _NOATTR, np.less),
    "le": ((2, 2), ["a", "b"], _NOATTR, np.less_equal),
    "gt": ((2, 2), ["a", "b"], _NOATTR, np.greater),
    "ge": ((2, 2), ["a", "b"], _NOATTR, np.greater_equal),
    "eq": ((2, 2), ["a", "b"], _NOATTR, np.equal),
    "ne": ((2, 2), ["a", "b"], _NOATTR, np.not_equal),
    "logical_and": ((2, 2), ["a", "b"], _NOATTR, lambda a, b: _logical("logical_and", a, b)),
    "logical_or": ((2, 2), ["a", "b"], _NOATTR, lambda a, b: _logical("logical_or", a, b)),
    "logical_xor": ((2, 2), ["a", "b"], _NOATTR, lambda a, b: _logical("logical_xor", a, b)),
    "logical_not": ((1, 1), ["x"], _NOATTR, lambda x: _logical("logical_not", x)),
    "cast": ((1, 1), ["x"], [("dtype", None)], op_cast),
    "floor_divide": ((2, 2), ["a", "b"], _NOATTR, lambda a, b: _int_div("floor_divide", a, b)),
    "remainder": ((2, 2), ["a", "b"], _NOATTR, lambda a, b: _int_div("remainder", a, b)),
    # shape and data-movement ops (issue 10)
    "repeat": ((1, 1), ["x"], [("reps", None)], op_repeat),
    "repeat_interleave": ((1, 1), ["x"], [("repeats", None), ("dim", None)], op_repeat_interleave),
    "pad": ((1, 1), ["x"], [("pad", None), ("mode", "constant"), ("value", 0.0)], op_pad),
    "cumsum": ((1, 1), ["x"], [("dim", None)], op_cumsum),
    "arange": ((0, 0), [], [("start", 0), ("end", None), ("step", 1)], op_arange),
    "triu": ((1, 1), ["x"], [("diagonal", 0)], _tri("triu", np.triu)),
    "tril": ((1, 1), ["x"], [("diagonal", 0)], _tri("tril", np.tril)),
    "gather": ((2, 2), ["x", "index"], [("dim", None)], op_gather),
    "index_select": ((2, 2), ["x", "index"], [("dim", None)], op_index_select),
    "one_hot": ((1, 1), ["ids"], [("num_classes", None)], op_one_hot),
    "cross_entropy": ((2, 2), ["input", "target"], [("ignore_index", -100), ("label_smoothing", 0.0),
                                                    ("reduction", "mean")], op_cross_entropy),
    "nll_loss": ((2, 2), ["input", "target"], [("ignore_index", -100), ("reduction", "mean")],
                 lambda x, t, ignore_index=-100, reduction="mean": op_cross_entropy(x, t, ignore_index, 0.0, reduction,
                                                                                    log_probs=True)),
    "mse_loss": ((2, 2), ["input", "target"], [("reduction", "mean")], op_mse_loss),
    "binary_cross_entropy_with_logits": ((2, 2), ["input", "target"], [("reduction", "mean")], op_bce_logits),
}
_MOVEMENT = {"reshape", "transpose", "permute", "flatten", "concat", "slice", "unsqueeze", "squeeze", "flip", "expand",
             "broadcast_to", "stack", "pixel_shuffle", "repeat", "repeat_interleave", "split", "chunk"}  # on integers too
# the one tensor argument that may be an integer tensor
_INT_ARG = {"embedding": 0, "where": 0, "gather": 1, "index_select": 1, "one_hot": 0, "cross_entropy": 1, "nll_loss": 1}
_BINOP = {"+": "add", "-": "sub", "*": "mul", "/": "div", "@": "matmul", "**": "pow", "//": "floor_divide",
          "%": "remainder", "<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne",
          "and": "logical_and", "or": "logical_or"}
# Elementwise functions whose operands may be integers (and bool, for the comparisons): their
# operands share one dtype, a number literal taking the other operands' (modelc's unify_dtypes)
_ARITH = {"add", "sub", "mul", "neg", "abs", "minimum", "maximum", "floor_divide", "remainder"}
_COMPARE = {"lt", "le", "gt", "ge", "eq", "ne"}
# The functions that take f16 and bf16 tensors and compute on their values (modelc's
# lower_elementwise, lower_arith, lower_relu6, lower_gelu, lower_compare, lower_where, lower_cast)
_HALF_OK = _ARITH | _COMPARE | {"where", "cast", "div", "exp", "log", "sqrt", "relu", "sigmoid", "tanh", "silu",
                                "hardtanh", "clamp", "relu6", "leaky_relu", "elu", "softplus", "hardswish",
                                "hardsigmoid", "erf", "rsqrt", "sin", "cos", "pow", "gelu"}
_LOGICAL = {"logical_and", "logical_or", "logical_xor", "logical_not"}



# ---------------------------------------------------------------------------------- evaluator

class Evaluator:
    def __init__(self, model, env, sizes, dt):
        """sizes: name -> the run's size of each symbolic dimension (read off the inputs)."""
        self.m, self.env, self.sizes, self.dt = model, env, sizes, dt
        self.batch = sizes.get(model.batch_name)
        self.busy = set()
        self.ties = None      # a dict: name -> (x, axis, keepdim, op) for names defined by argmax/argmin
        self.several = {}     # statement uid -> the tensors of its split / chunk

    def value(self, name):
        if name in self.env:
            return self.env[name]
        if name not in self.m.defs and name.lstrip("?") in ("inf", "nan"):   # math.inf, math.nan
            return self.const(float(name.lstrip("?")))
        if name not in self.m.defs:
            raise ModelError("%s: error: unknown name '%s'%s" % (self.m.path, name.lstrip("?"),
                             " (a block sees only its parameters and its own names)" if name[0] == "?" else ""))
        if name in self.busy:
            raise ModelError("%s: error: '%s' depends on itself" % (self.m.path, name))
        self.busy.add(name)
        e = self.m.defs[name]
        v = self.eval(e)
        self.busy.discard(name)
        self.env[name] = v
        if self.ties is not None and e[0] == "call" and e[1] in ("argmax", "argmin"):
            self.ties[name] = self.arg_input
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
            return self.call("neg", [(None, e[1])])
        if k == "bin":
            return self.call(_BINOP[e[1]], [(None, e[2]), (None, e[3])])
        if k == "call" and e[1] == "size":
            return self.const(self.int_eval(e))
        if k == "call":
            if e[1] in ("split", "chunk"):
                raise ModelError("%s: error: '%s' gives several tensors: bind them to names" % (self.m.path, e[1]))
            return self.call(e[1], e[2])
        if k == "item":   # result i of split / chunk, evaluated once per statement
            _, i, call, uid, count = e
            if uid not in self.several:
                self.several[uid] = self.call(call[1], call[2])
            if len(self.several[uid]) != count:
                raise ModelError("%s: error: %d names are bound, but '%s' gives %d tensors"
                                 % (self.m.path, count, call[1], len(self.several[uid])))
            return self.several[uid][i]
        raise ModelError("%s: error: a %s is not a tensor expression" % (self.m.path, k))

    def attr(self, e):
        """An attribute value: int, float, str (a name), bool or list."""
        k = e[0]
        if k == "num":
            return int(e[1]) if e[2] else e[1]
        if k == "neg" and e[1][0] == "num":
            return -int(e[1][1]) if e[1][2] else -e[1][1]
        if k == "name" and e[1].lstrip("?") in ("inf", "nan") and e[1] not in self.m.defs:
            return float(e[1].lstrip("?"))
        if k == "neg" and e[1][0] == "name" and e[1][1].lstrip("?") in ("inf", "nan"):
            return -float(e[1][1].lstrip("?"))
        if k == "name" and e[1] in self.sizes and e[1] not in self.m.defs:   # slice(t, 0, 0, seq)
            return self.sizes[e[1]]
        if k == "name":
            return e[1].lstrip("?")
        if k == "list":
            return [self.int_eval(it[1]) if isinstance(it, tuple) else it for it in e[1]]
        if k == "bool":
            return e[1]
        if k in ("bin", "call", "neg"):
            return self.int_eval(e)
        raise ModelError("%s: error: bad attribute value %r" % (self.m.path, e))

    def size_name(self, s):
        """The size a name in a shape list stands for: a symbolic dimension or a bound size."""
        if s in self.sizes:
            return self.sizes[s]
        if s in self.m.defs:
            return self.int_eval(("name", s))
        raise ModelError("%s: error: unknown dimension '%s'" % (self.m.path, s))

    def int_eval(self, e):
        """An integer expression, with size(x, d) read off the tensors."""
        def name_value(n):
            if isinstance(n, tuple):
                return int(self.value(n[1]).shape[n[2]])
            if n in self.sizes:
                return self.sizes[n]
            if n in self.m.defs:          # T = size(x, 1): a name bound to a size
                v = self.value(n)
                if np.ndim(v) == 0 and float(v) == int(float(v)):
                    return int(float(v))
            return None
        v = int_expr(e, name_value)
        if v is None:
            raise ModelError("%s: error: not an integer expression: %r" % (self.m.path, e))
        return v

    def table(self, args):
        """tensor(data, dtype=f32): a constant from nested lists of numbers (torch.tensor)."""
        data, dtype = None, "f32"
        for key, node in args:
            if key in (None, "data") and data is None:
                data = node
            elif key == "dtype":
                dtype = node[1]
            else:
                raise ModelError("%s: error: 'tensor' takes data and dtype" % self.m.path)

        def conv(n):
            if isinstance(n, (int, float)):
                return n
            if isinstance(n, str):
                return float(n.lstrip("?")) if n.lstrip("?") in ("inf", "nan") else self.int_eval(("name", n))
            if n[0] == "expr":
                return conv(n[1])
            if n[0] == "list":
                return [conv(i) for i in n[1]]
            if n[0] == "neg":
                v = conv(n[1])
                return -v
            if n[0] == "num":
                return int(n[1]) if n[2] else n[1]
            if n[0] == "name":
                return conv(n[1])
            return self.int_eval(n)
        a = np.array(conv(data), dtype=np.float64)
        if dtype in ("f32", "f16", "bf16"):
            a = a.astype(np.float32).astype(self.dt)
            return half_encode(dtype, a) if dtype in HALF else a
        return a.astype(DTYPES[dtype])

    def call(self, op, args):
        if op == "tensor":
            return self.table(args)
        if op not in OPS:
            raise ModelError("%s: error: unknown op '%s'" % (self.m.path, op))
        (nmin, nmax), tnames, attrs, fn = OPS[op]
        tensors, avals = [], {}
        for key, node in args:
            if key is None:
                int_lit = node[0] == "num" and node[2] or (node[0] == "neg" and node[1][0] == "num"
                                                           and node[1][2])
                variadic_attr = nmax > 3 and attrs and len(tensors) >= nmin and int_lit
                if (nmin >= 2 and len(tensors) == 1 and attrs and attrs[0][0] == "dim" and "dim" not in avals
                        and (node[0] == "num" and node[2] or node[0] == "neg" and node[1][0] == "num")):
                    avals["dim"] = self.attr(node)      # gather(x, 1, index): PyTorch's order
                    continue
                if len(tensors) < nmin or (len(tensors) < nmax and not avals and not variadic_attr
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
        half = None   # the f16 / bf16 kind the result is rounded to
        if op not in _MOVEMENT and op != "dropout":
            hs = [_dtype_name(x) for x in xs if x is not None and _dtype_name(x) in HALF]
            if hs and op not in _HALF_OK:
                # computed in f32 (modelc's lower_in_f32): one half dtype, no f32 operand beside it
                fs = [_dtype_name(x) for i, x in enumerate(xs) if x is not None and i != _INT_ARG.get(op)
                      and _dtype_name(x) == "f32" and np.ndim(x) > 0]
                if len(set(hs)) > 1 or fs:
                    raise ModelError("%s: error: '%s' operands are %s: cast one"
                                     % (self.m.path, op, " and ".join(sorted(set(hs) | set(fs)))))
                half = hs[0]
                xs = [half_decode(x) if x is not None and _dtype_name(x) in HALF else x for x in xs]
        if op in _ARITH or op in _COMPARE or op == "where":
            xs = self.unify(op, xs, tensors, [1, 2] if op == "where" else range(len(xs)))
            if op in _ARITH and xs[0].dtype == np.bool_:
                raise ModelError("%s: error: '%s' does not take bool tensors" % (self.m.path, op))
        elif op not in _MOVEMENT and op not in _LOGICAL and op != "cast":
            _float_only(op, *[x for i, x in enumerate(xs) if x is not None and i != _INT_ARG.get(op)])
            if op in _HALF_OK and any(x is not None and _dtype_name(x) in HALF for x in xs):
                xs = self.unify(op, xs, tensors, range(len(xs)))   # one dtype; a number takes it
        if op in _HALF_OK:
            hs = [_dtype_name(x) for i, x in enumerate(xs) if x is not None and _dtype_name(x) in HALF
                  and not (op == "where" and i == 0)]
            half = hs[0] if hs and op not in _COMPARE and op != "cast" else None
            xs = [half_decode(x) if x is not None else None for x in xs]
        kw = {}
        for a, default in attrs:
            v = avals.get(a, default)
            if v is None and a in ("shape", "dims", "value"):
                raise ModelError("%s: error: '%s' needs '%s'" % (self.m.path, op, a))
            kw[a] = v
        if "keepdim" in kw:
            kw["keepdim"] = bool(kw["keepdim"])
        if op == "reshape":
            shape = []
            for s in kw["shape"]:
                if isinstance(s, str):
                    s = self.size_name(s)
                shape.append(s)
            return np.reshape(xs[0], shape)
        if "shape" in kw and op != "reshape" and kw["shape"] is not None:   # expand, zeros, ones, full
            kw["shape"] = [self.size_name(s) if isinstance(s, str) else s for s in kw["shape"]]
        if op in ("concat", "stack"):
            xs = [x for x in xs if x is not None]
        if op in ("argmax", "argmin"):
            self.arg_input = (xs[0], kw["axis"], kw["keepdim"], op)
        with np.errstate(all="ignore"):
            r = fn(*xs, **kw)
        if isinstance(r, tuple):   # split / chunk: several tensors
            return r
        r = np.asarray(r)
        if r.dtype.kind == "f" and r.dtype != self.dt and r.dtype != np.float16:
            r = r.astype(self.dt)
        if half and r.dtype.kind == "f":
            r = half_encode(half, r)
        return r

    def unify(self, op, xs, nodes, idx):
        """modelc's unify_dtypes: the operands xs[idx] share a dtype (no implicit promotion), a
        number literal taking the others' (an integer for i32/i64, 0 or 1 for bool)."""
        def is_lit(n):
            return n[0] == "num" or (n[0] == "neg" and n[1][0] == "num")
        kinds = {_dtype_name(xs[i]) for i in idx if not is_lit(nodes[i])}
        if len(kinds) > 1:
            raise ModelError("%s: error: '%s' operands are %s: cast one" % (self.m.path, op, " and ".join(sorted(kinds))))
        if not kinds or kinds == {"f32"}:
            return xs
        kind = kinds.pop()
        xs = list(xs)
        for i in idx:
            if is_lit(nodes[i]):
                v = float(-nodes[i][1][1] if nodes[i][0] == "neg" else nodes[i][1])
                if kind in HALF:     # a number meeting f16 / bf16 is rounded to it
                    xs[i] = half_encode(kind, v)
                    continue
                ok = v == math.floor(v) and (kind != "bool" or v in (0.0, 1.0)) and \
                    (kind != "i32" or -2**31 <= v < 2**31)
                if not ok:
                    raise ModelError("%s: error: '%s' of %s and the number %g" % (self.m.path, op, kind, v))
                xs[i] = np.asarray(int(v), dtype=DTYPES[kind])
        return xs


def _dims_at(dims, sizes):
    return tuple(sizes[d] if isinstance(d, str) else d for d in dims)


def _bind_batch(model, decls, arrays, kind):
    """The sizes of the symbolic dimensions, read off the arrays: name -> size (each >= 1, the
    same wherever it appears)."""
    sizes = {}
    for d in decls:
        if d.name not in arrays:
            raise ModelError("%s: error: missing %s '%s'" % (model.path, kind, d.name))
        a = arrays[d.name]
        if a.ndim != len(d.dims):
            raise ModelError("%s: error: %s '%s' has rank %d, declared %s%s"
                             % (model.path, kind, d.name, a.ndim, d.dtype, d.dims))
        for n, dim in zip(a.shape, d.dims):
            if isinstance(dim, str):
                if n < 1:
                    raise ModelError("%s: error: %s '%s': %s = %d; a size is at least 1"
                                     % (model.path, kind, d.name, dim, n))
                if sizes.get(dim, n) != n:
                    raise ModelError("%s: error: %s '%s': %s = %d, but %d elsewhere"
                                     % (model.path, kind, d.name, dim, n, sizes[dim]))
                sizes[dim] = n
            elif n != dim:
                raise ModelError("%s: error: %s '%s' has shape %s, declared %s%s"
                                 % (model.path, kind, d.name, list(a.shape), d.dtype, d.dims))
    return sizes


def run_model(model, weights, inputs, precision="f64", ties=None, out_f64=False):
    """Evaluate `model` (a path, source text containing 'model', or a Model) on `weights`
    and `inputs` (dicts name -> array-like). Returns {output name: array} in declaration order;
    f32 outputs are float32, i32/i64 keep their dtype. precision: 'f64' (default) or 'f32'.
    ties: a dict to fill, for each output defined directly by argmax/argmin, with what
    argmax_acceptable() needs to judge another implementation's indices."""
    if isinstance(model, str):
        model = parse_source(model) if "{" in model else parse_file(model)
    dt = np.dtype(np.float64 if precision == "f64" else np.float32)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))   # deep chains of block defs
    env = {}
    arrays = {}
    for decls, src in ((model.inputs, inputs), (model.params, weights)):
        for d in decls:
            if d.name not in src:
                raise ModelError("%s: error: missing %s '%s'" % (model.path, d.kind, d.name))
            a = np.asarray(src[d.name])
            if d.dtype == "f32":
                a = a.astype(np.float32).astype(dt)   # round to f32 first
            elif d.dtype in HALF:   # f16 as np.float16, bf16 as its bits (uint16); floats are rounded
                a = a if a.dtype == DTYPES[d.dtype] else half_encode(d.dtype, a)
            else:
                if not _is_int(a) and a.dtype != np.bool_:
                    raise ModelError("%s: error: %s '%s' must be %s"
                                     % (model.path, d.kind, d.name, d.dtype))
                a = a.astype(DTYPES[d.dtype])
            arrays[d.name] = a
    sizes = _bind_batch(model, model.inputs, arrays, "input")
    _bind_batch(model, model.params, arrays, "param")
    env.update(arrays)
    ev = Evaluator(model, env, sizes, dt)
    ev.ties = ties
    out = {}
    for name in model.outputs:
        v = ev.value(name)
        decl = model.out_types.get(name)
        if decl is not None:
            want = _dims_at(decl.dims, sizes)
            if tuple(v.shape) != want:
                raise ModelError("%s: error: output '%s' has shape %s, declared %s%s"
                                 % (model.path, name, list(v.shape), decl.dtype, decl.dims))
            want_kind = "f" if decl.dtype == "f32" else "b" if decl.dtype == "bool" else "i"
            if decl.dtype in HALF:
                want_kind = decl.dtype
            got_kind = _dtype_name(v) if _dtype_name(v) in HALF else "i" if _is_int(v) else v.dtype.kind
            if want_kind != got_kind:
                raise ModelError("%s: error: output '%s' is %s, declared %s"
                                 % (model.path, name, v.dtype, decl.dtype))
        if v.dtype in (np.float16, np.uint16):
            pass
        elif _is_int(v) or v.dtype == np.bool_:   # i32 stays i32 (moved by reshape/...), argmax is i64
            v = v.astype(DTYPES[decl.dtype]) if decl is not None else v
        elif not out_f64:   # out_f64: float outputs as computed (float64 at precision f64)
            with np.errstate(over="ignore"):
                v = v.astype(np.float32)
        out[name] = np.array(v, order="C")  # (ascontiguousarray makes 0-d arrays 1-d)
    return out


def argmax_acceptable(tie, got, atol, rtol):
    """Whether the int indices `got` are a correct argmax (argmin) of the reference's input
    within float tolerance: each picked element is within atol + rtol*|best| of the row's best
    (max for argmax, min for argmin), the index is in range, and rows holding a NaN pick exactly
    NumPy's index. `tie` is an entry of run_model's `ties`. Returns (ok, number of rows where
    `got` picked a near-tie other than NumPy's first best index). An argmax is discontinuous: two
    implementations whose inputs agree to rounding may pick different elements of a near-tie, and
    both are right."""
    x, axis, keepdim, op = tie
    x = np.asarray(x, np.float64)
    if op == "argmin":
        x = -x
    g = np.asarray(got).astype(np.int64)
    if x.ndim == 0:
        return bool((g == 0).all()), 0
    ax = axis % x.ndim
    if not keepdim:
        g = np.expand_dims(g, ax)
    if g.shape[:ax] + g.shape[ax + 1:] != x.shape[:ax] + x.shape[ax + 1:] or g.shape[ax] != 1:
        return False, 0
    if ((g < 0) | (g >= x.shape[ax])).any():
        return False, 0
    ref = np.expand_dims(np.argmax(x, axis=ax), ax)
    best = np.take_along_axis(x, ref, ax)
    picked = np.take_along_axis(x, g, ax)
    nan_row = np.isnan(x).any(axis=ax, keepdims=True)
    ok = np.where(nan_row, g == ref, picked >= best - (atol + rtol * np.abs(best)))
    return bool(ok.all()), int(((g != ref) & ok).sum())


# ---------------------------------------------------------------------------------- safetensors

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_np  # noqa: E402  (tools/, beside this file)


def read_safetensors(path):
    """Read a safetensors file (tools/safetensors_np.py) -> {name: array}."""
    try:
        return safetensors_np.read(path)
    except safetensors_np.SafetensorsError as e:
        raise ModelError(str(e))


def write_safetensors(path, tensors):
    """Write {name: array} as safetensors (tools/safetensors_np.py)."""
    safetensors_np.write(path, tensors)


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
    one22 = np.ones((1, 1, 2, 2), np.float32)
    T.append(("B23 avg_pool2d asymmetric pads and count_include_pad", """model b23 {
        input x: f32[1, 1, 2, 2]
        output inc = avg_pool2d(x, [2, 2], stride=1, padding=[0, 0, 1, 1])
        output exc = avg_pool2d(x, 2, 1, [0, 0, 1, 1], false, false)
        output inc2 = avg_pool2d(x, 2, stride=1, padding=[1, 0, 0, 1], count_include_pad=true)
        output exc2 = avg_pool2d(x, 2, stride=1, padding=[1, 0, 0, 1], count_include_pad=false) }""",
        {"x": one22}, {},
        {"inc": f([[[[1.0, 0.5], [0.5, 0.25]]]]), "exc": np.ones((1, 1, 2, 2), np.float32),
         "inc2": f([[[[0.5, 0.25], [1.0, 0.5]]]]), "exc2": np.ones((1, 1, 2, 2), np.float32)}, False))
    x24 = f([[2.0903, 4.6493, 1.6320, -3.2051, 4.6975, 4.7296, 3.3653, -1.5815, -2.3832],
             [0.9628, -1.5899, -2.6820, 5.7529, 7.7346, -0.8910, -2.0151, 0.1313, -0.5374]])
    T.append(("B24 avg_pool ceil_mode overhang not counted (1-D as H=1)", """model b24 {
        input x: f32[1, 2, 1, 9]
        output y = avg_pool2d(x, [1, 7], stride=[1, 3], padding=[0, 3, 0, 3], ceil_mode=true,
                              count_include_pad=true) }""",
        {"x": x24.reshape(1, 2, 1, 9)}, {},
        {"y": f([[0.7380714, 2.5655572, 0.8032287, -0.0999000],
                 [0.3491143, 1.0389000, 1.4536142, -0.4035333]]).reshape(1, 2, 1, 4)}, False))
    w26 = np.zeros((4, 1, 3, 3), np.float32)
    w26[0, 0, 1, 1] = 1
    w26[1] = 1
    w26[2, 0, 1, 1] = 2
    w26[3, 0, 0, 1] = w26[3, 0, 1, 0] = w26[3, 0, 1, 2] = w26[3, 0, 2, 1] = 1
    x26 = (np.arange(32, dtype=np.float32) / 10).reshape(1, 2, 4, 4)
    T.append(("B26 depthwise conv with channel multiplier 2", """model b26 {
        input x: f32[1, 2, 4, 4]; param w: f32[4, 1, 3, 3]; param b: f32[4]
        y = conv2d(x, w, b, padding=1, groups=2)
        output out0 = slice(y, 1, 0, 1)
        output out1 = slice(y, 1, 1, 2)
        output out2 = slice(y, 1, 2, 3)
        output out3 = slice(y, 1, 3, 4) }""",
        {"x": x26}, {"w": w26, "b": f([0, 0, 0, 0.5])},
        {"out0": x26[:, :1], "out1": f([[1, 1.8, 2.4, 1.8], [2.7, 4.5, 5.4, 3.9], [5.1, 8.1, 9, 6.3],
                                        [4.2, 6.6, 7.2, 5]]).reshape(1, 1, 4, 4),
         "out2": 2 * x26[:, 1:], "out3": f([[4.2, 6, 6.3, 4.6], [6.6, 8.9, 9.3, 7.3], [7.8, 10.5, 10.9, 8.5],
                                            [5.8, 8.8, 9.1, 6.2]]).reshape(1, 1, 4, 4)}, False))
    T.append(("B27 conv2d asymmetric dilation (1,3)", """model b27 {
        input x: f32[1, 1, 5, 7]; param w: f32[1, 1, 2, 2]
        output y = conv2d(x, w, dilation=[1, 3]) }""",
        {"x": np.arange(35, dtype=np.float32).reshape(1, 1, 5, 7)}, {"w": np.ones((1, 1, 2, 2), np.float32)},
        {"y": f([[20, 24, 28, 32], [48, 52, 56, 60], [76, 80, 84, 88], [104, 108, 112, 116]]).reshape(1, 1, 4, 4)},
        False))
    T.append(("B22 ceil_mode pool of a 1x1 input: size 1, as in PyTorch", """model b22 {
        input x: f32[1, 1, 1, 1]
        output m = max_pool2d(x, 2, 2, ceil_mode=true)
        output a = avg_pool2d(x, 2, 2, 0, true) }""",
        {"x": f([[[[3]]]])}, {}, {"m": f([[[[3]]]]), "a": f([[[[3]]]])}, False))
    T.append(("blocks: scopes, nesting, int/bool/tensor params, defaults, on regions", """
        block lin(x, n, k) {
          param weight: f32[n, k]
          param bias: f32[n]
          return linear(x, weight, bias)
        }
        block mlp(x, d, hidden=3) {
          h = relu(lin(x, hidden, d) as fc1)
          return lin(h, d, hidden) as fc2
        }
        block plain(x, s) { return x * s }
        block pool(x, inc=true) { return avg_pool2d(x, 2, 1, [0, 0, 1, 1], false, inc) }
        model blk {
          input x: f32[batch, 2]
          input o: f32[1, 1, 2, 2]
          on cpu:1 { a = mlp(x, 2) as layer.0 }
          on cuda { b = mlp(a, 2, hidden=4) as layer.1 }
          on cpu { output y = plain(b, x) }
          output z = lin(x, 1, 2) as head
          output p1 = pool(o)
          output p0 = pool(o, inc=false)
        }""",
        {"x": f([[1, -2], [0.5, 3]]), "o": one22},
        {"layer.0.fc1.weight": f([[1, 0], [0, 1], [1, 1]]), "layer.0.fc1.bias": f([0, 0, 0]),
         "layer.0.fc2.weight": f([[1, 0, 0], [0, 1, 1]]), "layer.0.fc2.bias": f([0, 1]),
         "layer.1.fc1.weight": np.ones((4, 2), np.float32), "layer.1.fc1.bias": f([0, 0, 0, -100]),
         "layer.1.fc2.weight": np.ones((2, 4), np.float32), "layer.1.fc2.bias": f([1, 2]),
         "head.weight": f([[1, 1]]), "head.bias": f([-10])},
        {"y": f([[7, -16], [12.5, 78]]), "z": f([[-11], [-6.5]]),
         "p1": f([[[[1.0, 0.5], [0.5, 0.25]]]]), "p0": one22}, False))
    T.append(("concat/slice/flatten/embedding/where/layer_norm/batch_norm/adaptive", """model misc {
        input a: f32[2, 1, 2]; input b: f32[2, 2, 2]; input ids: i32[3]; input c: i64[2, 2]
        param e: f32[3, 2]; param g: f32[2]; param bb: f32[2]; param mu: f32[2]; param v: f32[2]
        output cc = concat(a, b, a, 1)
        output sl = slice(b, -1, -2, 2, 2)
        output sl2 = slice(e, axis=0, start=-5, end=10, step=2)
        output fl = flatten(b)
        output em = embedding(ids, e)
        output wh = where(c, 1, -1)
        output ln = layer_norm(b, g, bb)
        output bn = batch_norm(b, g, bb, mu, v, eps=0)
        output ad = adaptive_avg_pool2d(reshape(e, [1, 1, 3, 2]), [2, 1]) }""",
        {"a": f([[[1, 2]], [[3, 4]]]), "b": f([[[5, 6], [7, 8]], [[9, 10], [11, 12]]]),
         "ids": np.array([2, 0, 2], np.int32), "c": np.array([[0, 3], [-1, 0]], np.int64)},
        {"e": f([[0, 1], [2, 3], [4, 5]]), "g": f([1, 2]), "bb": f([0, 1]), "mu": f([1, 0]), "v": f([4, 1])},
        {"cc": f([[[1, 2], [5, 6], [7, 8], [1, 2]], [[3, 4], [9, 10], [11, 12], [3, 4]]]),
         "sl": f([[[5], [7]], [[9], [11]]]), "sl2": f([[0, 1], [4, 5]]),
         "fl": f([[5, 6, 7, 8], [9, 10, 11, 12]]), "em": f([[4, 5], [0, 1], [4, 5]]),
         "wh": f([[-1, 1], [1, -1]]),
         "ln": np.tile(f([-0.5 / math.sqrt(0.25001), 1 + 1 / math.sqrt(0.25001)]), (2, 2, 1)),
         "bn": f([[[2, 2.5], [15, 17]], [[4, 4.5], [23, 25]]]),
         "ad": f([[[[1.5], [3.5]]]])}, False))
    T.append(("scaled_dot_product_attention: causal, fully masked row, scale", """model att {
        input q: f32[2, 2]; input k: f32[2, 2]; input v: f32[2, 3]; input m: f32[2, 2]
        output c = scaled_dot_product_attention(q, k, v, causal=true)
        output z = scaled_dot_product_attention(q, k, v, m)
        output s = scaled_dot_product_attention(q, k, v, scale=0) }""",
        {"q": f([[1, 0], [0, 1]]), "k": f([[1, 0], [0, 1]]), "v": f([[1, 2, 3], [5, 6, 7]]),
         "m": f([[-inf, -inf], [0, -inf]])}, {},
        {"c": f([[1, 2, 3], [1 + 4 / (1 + math.exp(-1 / math.sqrt(2))), 2 + 4 / (1 + math.exp(-1 / math.sqrt(2))),
                              3 + 4 / (1 + math.exp(-1 / math.sqrt(2)))]]),
         "z": f([[0, 0, 0], [1, 2, 3]]), "s": f([[3, 4, 5], [3, 4, 5]])}, False))
    return T


def _error_tests():
    """Models the reference must reject, each with a piece of the expected message (B18, B21, B22)."""
    E = []  # (name, source, inputs, weights, substring)
    r = np.random.default_rng(0).standard_normal
    f = lambda *s: r(s).astype(np.float32)  # noqa: E731
    E.append(("B21 conv2d weight rank 0", "model e { input x: f32[7,6,1,5]; param w: f32[]; param b: f32[2]\n"
              "output y = conv2d(x, w, b) }", {"x": f(7, 6, 1, 5)}, {"w": f(), "b": f(2)}, "must be rank 4"))
    E.append(("B21 conv2d channels 6 vs 2", "model e { input x: f32[1,6,5,5]; param w: f32[4,2,3,3]\n"
              "output y = conv2d(x, w, groups=1) }", {"x": f(1, 6, 5, 5)}, {"w": f(4, 2, 3, 3)}, "channels 6"))
    E.append(("B21 conv2d groups 4 on 6 channels", "model e { input x: f32[1,6,5,5]; param w: f32[4,2,3,3]\n"
              "output y = conv2d(x, w, groups=4) }", {"x": f(1, 6, 5, 5)}, {"w": f(4, 2, 3, 3)}, "does not divide"))
    E.append(("B21 conv2d bias length 3 for O=4", "model e { input x: f32[1,2,5,5]; param w: f32[4,2,3,3]\n"
              "param b: f32[3]; output y = conv2d(x, w, b) }", {"x": f(1, 2, 5, 5)}, {"w": f(4, 2, 3, 3),
                                                                                    "b": f(3)}, "bias"))
    E.append(("B21 concat mismatch", "model e { input a: f32[2,3]; input b: f32[2,4]\n"
              "output y = concat(a, b, axis=0) }", {"a": f(2, 3), "b": f(2, 4)}, {}, "concat"))
    for what, call in (("kernel 0", "max_pool2d(x, 0)"), ("stride 0", "avg_pool2d(x, 2, 0)"),
                       ("negative padding", "conv2d(x, w, padding=-1)")):
        E.append(("B21 %s" % what, "model e { input x: f32[1,1,4,4]; param w: f32[1,1,2,2]\n"
                  "output y = %s\n output u = sum(w) }" % call, {"x": f(1, 1, 4, 4)}, {"w": f(1, 1, 2, 2)},
                  call.split("(")[0]))
    chain = ["model e { input x: f32[1,3,10,10]"]
    prev, c = "x", 3
    for i in range(1, 5):
        chain.append("param c%d: f32[32,%d,3,3]" % (i, c))
        chain.append("p%d = max_pool2d(conv2d(%s, c%d, padding=1), 2, 2)" % (i, prev, i))
        prev, c = "p%d" % i, 32
    chain.append("param c5: f32[32,32,3,3]; output y = conv2d(p4, c5, padding=1) }")
    E.append(("B22 pooling chain 10-5-2-1-0", "\n".join(chain), {"x": f(1, 3, 10, 10)},
              {"c%d" % i: f(32, 3 if i == 1 else 32, 3, 3) for i in range(1, 6)}, "output size 0x0"))
    E.append(("B18 input with a batch of 0", "model e { input x: f32[batch, 4]; param W: f32[4, 3]\n"
              "output y = relu(matmul(x, W)) }", {"x": np.zeros((0, 4), np.float32)}, {"W": f(4, 3)}, "batch"))
    E.append(("embedding id out of range", "model e { input i: i64[3]; param w: f32[4, 2]\n"
              "output y = embedding(i, w) }", {"i": np.array([0, 4, 1])}, {"w": f(4, 2)}, "id 4"))
    E.append(("block: a name outside the block", "block bl(x) { return x + q }\n"
              "model e { input x: f32[2]; input q: f32[2]; output y = bl(x) }", {"x": f(2), "q": f(2)}, {},
              "unknown name 'q'"))
    E.append(("block: param declared twice (no 'as')", "block bl(x) { param w: f32[2]; return x * w }\n"
              "model e { input x: f32[2]; output y = bl(bl(x)) }", {"x": f(2)}, {"w": f(2)}, "declared twice"))
    return E


def _window_unit_checks():
    """B22: the size function with negative numerators, floor and ceil."""
    bad = []
    for args, want in (((1, 2, 2, 0, 0, 1, False), 0), ((1, 2, 2, 0, 0, 1, True), 1),
                       ((10, 2, 2, 0, 0, 1, False), 5), ((5, 2, 2, 0, 0, 1, False), 2),
                       ((2, 2, 2, 0, 0, 1, False), 1), ((5, 2, 2, 0, 0, 1, True), 3),
                       ((9, 7, 3, 3, 3, 1, True), 4), ((9, 7, 3, 3, 3, 1, False), 3),
                       ((1, 3, 1, 0, 0, 1, False), -1), ((1, 3, 1, 0, 0, 1, True), -1),
                       ((7, 2, 1, 0, 0, 3, False), 4), ((4, 3, 2, 1, 1, 1, True), 3)):
        got = window_out(*args)
        if (got if got >= 1 else -1) != (want if want >= 1 else -1):
            bad.append("window_out%s = %d, want %d" % (args, got, want))
    return bad


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
    gi = rng.integers(0, 4, (3, 6, 5))      # gather along an axis of size 4, 6 picks each
    gj = rng.integers(0, 5, (2, 4, 3))      # an index smaller than x on the other axes
    si = np.array([4, 0, 2, 2, 1], np.int64)
    t = lambda v: torch.from_numpy(np.asarray(v, np.float64))  # noqa: E731
    checks = [  # (model expression over inputs s, x, y, a, b, w, bb, gi, gj, si; torch result)
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
        # shape and data-movement ops (issue 10)
        ("repeat(x, [2, 1, 3])", t(x).repeat(2, 1, 3)), ("repeat(y, [3, 2, 2])", t(y).repeat(3, 2, 2)),
        ("repeat_interleave(x, 3, dim=1)", torch.repeat_interleave(t(x), 3, dim=1)),
        ("repeat_interleave(y, 2)", torch.repeat_interleave(t(y), 2)),
        ("pad(x, [1, 2, 0, 3], value=-2.5)", F.pad(t(x), (1, 2, 0, 3), value=-2.5)),
        ("pad(x, [-1, 2, 1, -2])", F.pad(t(x), (-1, 2, 1, -2))),
        ("pad(x, [4, 3, 2, 3], mode=reflect)", F.pad(t(x), (4, 3, 2, 3), mode="reflect")),
        ("pad(x, [2, 1], mode=reflect)", F.pad(t(x), (2, 1), mode="reflect")),
        ("pad(a, [3, 2, 0, 4], mode=replicate)", F.pad(t(a), (3, 2, 0, 4), mode="replicate")),
        ("pad(a, [1, 1, 2, 0, 1, 2], mode=replicate)", F.pad(t(a), (1, 1, 2, 0, 1, 2), mode="replicate")),
        ("cumsum(x, 1)", torch.cumsum(t(x), 1)), ("cumsum(s, dim=0)", torch.cumsum(t(special), 0)),
        ("arange(7)", torch.arange(7)), ("arange(3, -8, -3)", torch.arange(3, -8, -3)),
        ("arange(0.5, 2, 0.1)", torch.arange(0.5, 2, 0.1, dtype=torch.float32)),
        ("triu(x)", torch.triu(t(x))), ("triu(x, 2)", torch.triu(t(x), 2)), ("triu(x, -1)", torch.triu(t(x), -1)),
        ("tril(x)", torch.tril(t(x))), ("tril(x, diagonal=-2)", torch.tril(t(x), -2)),
        ("tril(x, 9)", torch.tril(t(x), 9)),
        ("gather(x, 1, gi)", torch.gather(t(x), 1, torch.from_numpy(gi))),
        ("gather(x, gj, dim=2)", torch.gather(t(x), 2, torch.from_numpy(gj))),
        ("index_select(x, 2, si)", torch.index_select(t(x), 2, torch.from_numpy(si))),
        ("index_select(s, si, dim=0)", torch.index_select(t(special), 0, torch.from_numpy(si))),
        ("one_hot(si, 6)", F.one_hot(torch.from_numpy(si), 6).double()),
    ]
    src = ["model tc {", "input s: f32[12]; input x: f32[3,4,5]; input y: f32[4,1]",
           "input a: f32[2,1,4,6]; input b: f32[3,6,5]; input w: f32[7,5]; input bb: f32[7]",
           "input gi: i64[3,6,5]; input gj: i64[2,4,3]; input si: i64[5]"]
    for i, (e, _) in enumerate(checks):
        src.append("output o%d = %s" % (i, e))
    src.append("}")
    out = run_model(parse_source("\n".join(src), "<torch-check>"), {},
                    {"s": special, "x": x, "y": y, "a": a, "b": b, "w": w, "bb": bb, "gi": gi, "gj": gj,
                     "si": si})
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


def _torch_nn_cross_check():
    """The neural-network ops and blocks vs PyTorch (float64). None if torch is not importable."""
    try:
        import torch
        import torch.nn.functional as F
    except Exception:  # noqa: BLE001
        return None
    rng = np.random.default_rng(1)
    g = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    ins = {"x": g(2, 4, 9, 8), "w": g(6, 2, 3, 2), "cb": g(6), "w1": g(3, 4, 2, 2), "xs": g(2, 4, 9, 8),
           "c": g(4), "bn_b": g(4), "mu": g(4), "var": rng.uniform(0.5, 2, 4).astype(np.float32),
           "r2": g(5, 4), "q": g(2, 3, 5, 8), "k": g(2, 3, 7, 8), "v": g(2, 3, 7, 6), "mk": g(5, 7),
           "ln_w": g(8), "ln_b": g(8), "lw3": g(4, 9, 8), "r3": g(2, 4, 11), "w3": g(6, 2, 3), "b3": g(6), "w3d": g(8, 1, 4),
           "x5": g(2, 3, 18, 2, 3), "wt": g(4, 3, 3, 2), "bt": g(6), "wt4": g(4, 5, 3, 2), "ids": rng.integers(0, 10, (3, 4)).astype(np.int64), "emb": g(10, 5),
           "cond": rng.integers(-1, 2, (5, 1)).astype(np.int64), "qq": g(2, 6, 8)}
    ins["x"][0, 0, 0, 0] = np.nan
    t = {k: torch.from_numpy(np.asarray(v, np.float64) if v.dtype == np.float32 else v) for k, v in ins.items()}
    x, w, cb, w1, xs = t["x"], t["w"], t["cb"], t["w1"], t["xs"]
    mkm = t["mk"].clone()
    mkm[2] = -float("inf")
    ins["mkm"] = mkm.numpy().astype(np.float32)
    checks = [
        ("conv2d(xs, w, cb, stride=[1, 2], padding=[1, 0], dilation=[2, 1], groups=2)",
         F.conv2d(xs, w, cb, stride=(1, 2), padding=(1, 0), dilation=(2, 1), groups=2)),
        ("conv2d(xs, w, groups=2, padding=[1, 0, 2, 1], stride=2)",
         F.conv2d(F.pad(xs, (0, 1, 1, 2)), w, groups=2, stride=2)),
        ("conv2d(xs, w1, padding=3)", F.conv2d(xs, w1, padding=3)),
        ("conv2d(xs, w1, stride=[3, 4])", F.conv2d(xs, w1, stride=(3, 4))),
        ("conv1d(r3, w3, b3, stride=2, padding=1, dilation=2, groups=2)",
         F.conv1d(t["r3"], t["w3"], t["b3"], stride=2, padding=1, dilation=2, groups=2)),
        ("conv1d(r3, w3d, groups=4, padding=3)", F.conv1d(t["r3"], t["w3d"], groups=4, padding=3)),
        ("conv_transpose2d(xs, wt, bt, stride=2, padding=1, output_padding=1, groups=2)",
         F.conv_transpose2d(xs, t["wt"], t["bt"], stride=2, padding=1, output_padding=1, groups=2)),
        ("conv_transpose2d(xs, wt4, stride=[3, 1], padding=[0, 2], dilation=[1, 2], output_padding=[2, 1])",
         F.conv_transpose2d(xs, t["wt4"], stride=(3, 1), padding=(0, 2), dilation=(1, 2), output_padding=(2, 1))),
        ("interpolate(xs, scale_factor=1.5)", F.interpolate(xs, scale_factor=1.5)),
        ("interpolate(xs, size=[5, 13], mode=bilinear)", F.interpolate(xs, size=(5, 13), mode="bilinear")),
        ("interpolate(xs, size=[13, 5], mode=bilinear, align_corners=true)",
         F.interpolate(xs, size=(13, 5), mode="bilinear", align_corners=True)),
        ("upsample(xs, scale_factor=[1.3, 0.7], mode=bilinear)",
         F.interpolate(xs, scale_factor=(1.3, 0.7), mode="bilinear")),
        ("pixel_shuffle(xs, 2)", F.pixel_shuffle(xs, 2)),
        ("pixel_shuffle(x5, 3)", F.pixel_shuffle(t["x5"], 3)),
        ("max_pool2d(x, 3, 2, 1)", F.max_pool2d(x, 3, 2, 1)),
        ("max_pool2d(xs, [3, 2], stride=[1, 2], padding=[1, 0], dilation=[2, 1])",
         F.max_pool2d(xs, (3, 2), (1, 2), (1, 0), (2, 1))),
        ("max_pool2d(xs, 2, stride=3, ceil_mode=true)", F.max_pool2d(xs, 2, 3, ceil_mode=True)),
        ("max_pool2d(xs, 3, 2, 1, 1, true)", F.max_pool2d(xs, 3, 2, 1, 1, ceil_mode=True)),
        ("avg_pool2d(xs, 3, 2, 1, true, true)", F.avg_pool2d(xs, 3, 2, 1, ceil_mode=True, count_include_pad=True)),
        ("avg_pool2d(xs, 3, 2, 1, true, false)", F.avg_pool2d(xs, 3, 2, 1, ceil_mode=True, count_include_pad=False)),
        ("avg_pool2d(xs, [3, 2], stride=[1, 2], padding=[1, 0])", F.avg_pool2d(xs, (3, 2), (1, 2), (1, 0))),
        ("avg_pool2d(xs, 2, stride=[3, 4], ceil_mode=true)", F.avg_pool2d(xs, 2, (3, 4), ceil_mode=True)),
        ("adaptive_avg_pool2d(xs, [4, 3])", F.adaptive_avg_pool2d(xs, (4, 3))),
        ("adaptive_avg_pool2d(xs)", F.adaptive_avg_pool2d(xs, 1)),
        ("batch_norm(xs, c, bn_b, mu, var)", F.batch_norm(xs, t["mu"], t["var"], t["c"], t["bn_b"], False)),
        ("batch_norm(r2, c, bn_b, mu, var, eps=0.001)",
         F.batch_norm(t["r2"], t["mu"], t["var"], t["c"], t["bn_b"], False, eps=1e-3)),
        ("layer_norm(xs, ln_w, ln_b)", F.layer_norm(xs, (8,), t["ln_w"], t["ln_b"])),
        ("layer_norm(xs, lw3, normalized_shape=[4, 9, 8])", F.layer_norm(xs, (4, 9, 8), t["lw3"])),
        ("layer_norm(xs, normalized_shape=[9, 8], eps=0.01)", F.layer_norm(xs, (9, 8), eps=0.01)),
        ("group_norm(xs, c, bn_b, num_groups=2)", F.group_norm(xs, 2, t["c"], t["bn_b"])),
        ("group_norm(xs, num_groups=1, eps=0.1)", F.group_norm(xs, 1, eps=0.1)),
        ("group_norm(r2, c, num_groups=4)", F.group_norm(t["r2"], 4, t["c"])),
        ("instance_norm(xs, c, bn_b)", F.instance_norm(xs, weight=t["c"], bias=t["bn_b"])),
        ("instance_norm(qq, eps=0.001)", F.instance_norm(t["qq"], eps=1e-3)),
        ("flatten(xs)", xs.flatten(1)), ("flatten(xs, 0, 2)", xs.flatten(0, 2)),
        ("concat(xs, x, xs, axis=-2)", torch.cat([xs, x, xs], -2)),
        ("slice(xs, 2, -7, 100, 2)", xs[:, :, -7::2]),
        ("embedding(ids, emb)", F.embedding(t["ids"], t["emb"])),
        ("scaled_dot_product_attention(q, k, v)", F.scaled_dot_product_attention(t["q"], t["k"], t["v"])),
        ("scaled_dot_product_attention(q, k, v, mk, scale=0.3)",
         F.scaled_dot_product_attention(t["q"], t["k"], t["v"], attn_mask=t["mk"], scale=0.3)),
        ("scaled_dot_product_attention(q, k, v, causal=true)",
         F.scaled_dot_product_attention(t["q"], t["k"], t["v"], is_causal=True)),
        ("scaled_dot_product_attention(q, k, v, mkm)",
         F.scaled_dot_product_attention(t["q"], t["k"], t["v"], attn_mask=mkm)),
        ("scaled_dot_product_attention(qq, qq, qq, causal=true)",
         F.scaled_dot_product_attention(t["qq"], t["qq"], t["qq"], is_causal=True)),
        ("where(cond, r2, 0.5)", torch.where(t["cond"] != 0, t["r2"], torch.tensor(0.5, dtype=torch.float64))),
    ]
    decl = {"x": "f32[2,4,9,8]", "w": "f32[6,2,3,2]", "cb": "f32[6]", "w1": "f32[3,4,2,2]",
            "xs": "f32[2,4,9,8]", "c": "f32[4]", "bn_b": "f32[4]", "mu": "f32[4]", "var": "f32[4]",
            "r2": "f32[5,4]", "q": "f32[2,3,5,8]", "k": "f32[2,3,7,8]", "v": "f32[2,3,7,6]", "mk": "f32[5,7]",
            "ln_w": "f32[8]", "ln_b": "f32[8]", "lw3": "f32[4,9,8]", "r3": "f32[2,4,11]", "w3": "f32[6,2,3]", "b3": "f32[6]",
            "w3d": "f32[8,1,4]", "x5": "f32[2,3,18,2,3]", "wt": "f32[4,3,3,2]", "bt": "f32[6]", "wt4": "f32[4,5,3,2]", "ids": "i64[3,4]", "emb": "f32[10,5]", "cond": "i64[5,1]",
            "qq": "f32[2,6,8]", "mkm": "f32[5,7]"}
    src = ["model tn {"] + ["input %s: %s" % kv for kv in decl.items()]
    src += ["output o%d = %s" % (i, e) for i, (e, _) in enumerate(checks)] + ["}"]
    out = run_model(parse_source("\n".join(src), "<torch-nn-check>"), {}, ins)
    bad = []
    for i, (e, want) in enumerate(checks):
        got, want = out["o%d" % i], want.numpy()
        ok, msg = _close(got, want.astype(np.float32), atol=1e-5, rtol=1e-5)
        if not ok:
            bad.append("%s: %s" % (e, msg))
    # a ResNet-style block instantiated twice with 'as', vs the same network in torch
    blk = """block basic(x, planes, stride=1) {
      param conv1.weight: f32[planes, planes, 3, 3]
      param bn1.weight: f32[planes]
      param bn1.bias: f32[planes]
      param bn1.running_mean: f32[planes]
      param bn1.running_var: f32[planes]
      h = relu(batch_norm(conv2d(x, conv1.weight, stride=stride, padding=1), bn1.weight, bn1.bias,
                          bn1.running_mean, bn1.running_var))
      return relu(h + max_pool2d(x, 1, stride))
    }
    model net { input x: f32[batch, 4, 6, 6]
      on cpu:1 { a = basic(x, 4) as layer.0 }
      output y = basic(a, 4, 2) as layer.1 }"""
    wts = {}
    for s in ("layer.0", "layer.1"):
        wts[s + ".conv1.weight"] = g(4, 4, 3, 3)
        wts[s + ".bn1.weight"], wts[s + ".bn1.bias"], wts[s + ".bn1.running_mean"] = g(4), g(4), g(4)
        wts[s + ".bn1.running_var"] = rng.uniform(0.5, 2, 4).astype(np.float32)
    xb = g(2, 4, 6, 6)
    m = parse_source(blk, "<torch-block-check>")
    if sorted(d.name for d in m.params) != sorted(wts):
        bad.append("block params %s" % [d.name for d in m.params])
    else:
        got = run_model(m, wts, {"x": xb})["y"]
        tw = {k: torch.from_numpy(v.astype(np.float64)) for k, v in wts.items()}
        h = torch.from_numpy(xb.astype(np.float64))
        for s, st in (("layer.0", 1), ("layer.1", 2)):
            z = F.relu(F.batch_norm(F.conv2d(h, tw[s + ".conv1.weight"], stride=st, padding=1),
                                    tw[s + ".bn1.running_mean"], tw[s + ".bn1.running_var"],
                                    tw[s + ".bn1.weight"], tw[s + ".bn1.bias"], False))
            h = F.relu(z + h[:, :, ::st, ::st])
        ok, msg = _close(got, h.numpy().astype(np.float32))
        if not ok:
            bad.append("ResNet-style block x2: %s" % msg)
    return bad, len(checks) + 1


def _argmax_tie_checks():
    """argmax_acceptable on a model with a near-tie: the other near-best index passes, a clearly
    smaller one, an out-of-range one and any pick other than NumPy's on a NaN row fail."""
    src = "model t { input x: f32[2, 4]\n output i = argmax(x, 1)\n output j = argmin(x, axis=0) }"
    x = np.array([[1.0, 3.0, 3.0 - 1e-7, 0.5], [np.nan, 2.0, 9.0, 1.0]], np.float32)
    ties = {}
    out = run_model(parse_source(src, "<self-test>"), {}, {"x": x}, ties=ties)
    bad = []
    for what, name, got, want in (("NumPy's own answer", "i", out["i"], (True, 0)),
                                  ("the other element of a near-tie", "i", [2, 0], (True, 1)),
                                  ("a clearly smaller element", "i", [3, 0], (False, 0)),
                                  ("an index out of range", "i", [4, 0], (False, 0)),
                                  ("another pick on a row with a NaN", "i", [1, 2], (False, 0)),
                                  ("argmin, NumPy's answer", "j", out["j"], (True, 0)),
                                  ("argmin, a larger element", "j", [0, 0, 0, 0], (False, 0))):
        r = argmax_acceptable(ties[name], np.array(got), 1e-4, 1e-4)
        if r != want:
            bad.append("%s: got %s, want %s" % (what, r, want))
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
    r = _torch_nn_cross_check()
    if r is None:
        print("PASS: refinterp/torch cross-check of the neural-network ops (skipped: torch not importable)")
    elif r[0]:
        fails += 1
        print("FAIL: refinterp/torch cross-check of the neural-network ops: %s" % "; ".join(r[0]))
    else:
        print("PASS: refinterp/torch cross-check of the neural-network ops (%d checks, float64)" % r[1])
    bad = _window_unit_checks()
    fails += bool(bad)
    print("%s: refinterp/B22 window size function%s" % ("FAIL" if bad else "PASS", ": " + "; ".join(bad) if bad else ""))
    bad = _argmax_tie_checks()
    fails += bool(bad)
    print("%s: refinterp/argmax near-ties%s" % ("FAIL" if bad else "PASS", ": " + "; ".join(bad) if bad else ""))
    for name, src, inputs, weights, want in _error_tests():
        try:
            run_model(parse_source(src, "<self-test>"), weights, inputs)
            why = "no error (want one containing %r)" % want
        except ModelError as e:
            why = None if want in str(e) else "error %r does not contain %r" % (str(e), want)
        except Exception as e:  # noqa: BLE001
            why = "not a ModelError: %s: %s" % (type(e).__name__, e)
        fails += why is not None
        print("%s: refinterp/rejects: %s%s" % ("FAIL" if why else "PASS", name, ": " + why if why else ""))
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
        for shape in ([4, 0], [0, 4]):     # field case B18: a dimension of 0 is a clean error
            write_safetensors(p, {"fc.w": np.zeros(shape, np.float32)})
            try:
                read_safetensors(p)
                why = "accepted"
            except ModelError as e:
                why = None if "fc.w: dimension %d is 0" % shape.index(0) in str(e) else str(e)
            print("%s: refinterp/B18 weight with shape %s rejected%s" % ("FAIL" if why else "PASS", shape,
                                                                           ": " + why if why else ""))
            fails += why is not None
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
