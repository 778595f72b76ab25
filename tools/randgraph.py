#!/usr/bin/env python3
"""randgraph.py — random valid .model programs that stress modelc's memory planner.

    python3 tools/randgraph.py --seed N [--size small|medium]     # prints one program
    import randgraph; src = randgraph.generate(seed, size="small")

The same seed and size always give the same program (only `random.Random(seed)` is used).
Every program is valid per docs/language.md: shapes are tracked here while generating, so
every op gets operands it accepts. Values stay numerically tame (inputs and params are meant to
be drawn from [-1, 1]): log/sqrt only see positive values, denominators are bounded away from 0,
exp only sees small values, and large values are squashed with tanh before they are reused.

Besides random ops (elementwise unary/binary with broadcasting over size-1 dims and rank
differences, scalars, matmul/@, linear, softmax/log_softmax, sum/mean/max, reshape with -1,
transpose/permute; sometimes a symbolic batch) the generator mixes in motifs that are hard for a
memory planner:
  - values with several consumers and values read long after they are made;
  - chains where writing in place over a dying operand is tempting;
  - B02: a materialized square value read directly and transposed in one expression;
  - outputs that later ops still read; an output that is a view (reshape) of an intermediate;
    an output equal to an input; several outputs; outputs declared first and assigned later;
  - B06: small buffers alive while big ones die; B05: the optimizer update pattern.
"""

import argparse
import random
import sys

UNARY = ["neg", "exp", "log", "sqrt", "relu", "sigmoid", "tanh", "gelu", "silu", "erf", "abs", "sin", "cos",
         "hardswish", "hardsigmoid", "relu6", "elu", "leaky_relu", "softplus"]


class Val:
    __slots__ = ("name", "shape", "mag", "pos", "lo", "dtype", "uses", "born")

    def __init__(self, name, shape, mag=1.0, pos=False, lo=0.0, dtype="f32", born=0):
        self.name, self.shape, self.mag, self.pos, self.lo = name, tuple(shape), mag, pos, lo
        self.dtype, self.uses, self.born = dtype, 0, born


def is_sym(d):
    return isinstance(d, str)


def bcast(s1, s2):
    """NumPy broadcast of two shapes (ints or symbolic strings), or None."""
    out = []
    for i in range(1, max(len(s1), len(s2)) + 1):
        a = s1[-i] if i <= len(s1) else 1
        b = s2[-i] if i <= len(s2) else 1
        if a == b:
            out.append(a)
        elif a == 1:
            out.append(b)
        elif b == 1:
            out.append(a)
        else:
            return None
    out.reverse()
    if sum(is_sym(d) for d in out) > 1:
        return None   # a tensor has at most one batch-dependent dimension
    if any(is_sym(d) for d in out[1:]):
        return None   # keep the batch leading (the generator's own rule, not the language's)
    return tuple(out)


def sym_mult(d):
    """'batch' -> 1, 'batch*4' -> 4."""
    return int(d.split("*")[1]) if "*" in d else 1


class Gen:
    def __init__(self, seed, size="small"):
        self.rng = random.Random(seed)
        self.size = size
        r = self.rng
        self.batch = r.choice(["batch", "batch", "n", "B"]) if r.random() < 0.3 else None
        if size == "medium":
            self.dims = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]
            self.nsteps = r.randint(14, 28)
            self.big = r.choice([32, 48, 64])
        else:
            self.dims = [1, 2, 3, 4, 5, 6, 8]
            self.nsteps = r.randint(6, 14)
            self.big = r.choice([8, 12, 16])
        self.decls = []     # "input x0: f32[..]" / "param ..." lines
        self.body = []      # statements
        self.pool = []      # Val of every f32 value usable as an operand
        self.leaves = set()  # names of inputs and params: exact values, safe to compare
        self.outputs = []   # output names in declaration order
        self.out_decl = {}  # name -> Val for outputs declared by type, assigned later
        self.n = {"x": 0, "w": 0, "v": 0, "o": 0}
        self.step = 0

    # ------------------------------------------------------------------ names and text

    def fresh(self, k):
        i = self.n[k]
        self.n[k] += 1
        return "%s%d" % (k, i)

    def dim_text(self, d):
        if not is_sym(d):
            return str(d)
        m = sym_mult(d)
        return self.batch if m == 1 else "%s*%d" % (self.batch, m)

    def typable(self, shape):
        return all(not is_sym(d) or sym_mult(d) == 1 for d in shape)

    def type_text(self, shape, dtype="f32"):
        return "%s[%s]" % (dtype, ", ".join(self.dim_text(d) for d in shape))

    def rand_shape(self, rank=None, allow_batch=True):
        r = self.rng
        if rank is None:
            rank = r.choice([1, 2, 2, 2, 3, 3, 4]) if self.size == "medium" else r.choice([0, 1, 2, 2, 2, 3, 3])
        s = [r.choice(self.dims) for _ in range(rank)]
        if self.batch and allow_batch and rank >= 1 and r.random() < 0.7:
            s[0] = "batch"
        return tuple(s)

    # ------------------------------------------------------------------ leaves

    def new_input(self, shape):
        name = self.fresh("x")
        self.decls.append("input %s: %s" % (name, self.type_text(shape)))
        v = Val(name, shape, 1.0, born=self.step)
        self.pool.append(v)
        self.leaves.add(name)
        return v

    def new_param(self, shape, scale_name=None):
        r = self.rng
        i = self.n["w"]
        self.n["w"] += 1
        style = r.random()
        if style < 0.3:
            name = "layer%d.weight" % i
        elif style < 0.45:
            name = "blocks.%d.p_%d" % (i % 3, i)
        else:
            name = "w%d" % i
        self.decls.append("param  %s: %s" % (name, self.type_text(shape)))
        v = Val(name, shape, 1.0, born=self.step)
        self.pool.append(v)
        self.leaves.add(name)
        return v

    def new_leaf(self, shape):
        if any(is_sym(d) for d in shape):
            return self.new_input(shape)
        return self.new_input(shape) if self.rng.random() < 0.8 else self.new_param(shape)

    # ------------------------------------------------------------------ statements

    def emit(self, expr, shape, mag, pos=False, lo=0.0, out=None, dtype="f32", local_name=None):
        """Bind expr to a new value: a local, or an output when `out` is truthy."""
        r = self.rng
        self.step += 1
        if out:
            name = self.fresh("o")
            if r.random() < 0.2 and self.typable(shape):   # declared with its type first, assigned later
                self.decls.append("output %s: %s" % (name, self.type_text(shape, dtype)))
                self.body.append("%s = %s" % (name, expr))
            elif r.random() < 0.3 and self.typable(shape):
                self.body.append("output %s: %s = %s" % (name, self.type_text(shape, dtype), expr))
            else:
                self.body.append("output %s = %s" % (name, expr))
            self.outputs.append(name)
        else:
            name = local_name or self.fresh("v")
            self.body.append("%s = %s" % (name, expr))
        v = Val(name, shape, mag, pos, lo, dtype, born=self.step)
        if dtype == "f32":
            self.pool.append(v)
        return v

    def pick(self, pred=None, recent=0.55):
        """An operand: mostly recent values, sometimes an old one (long live ranges), sometimes a
        value that already has consumers (several readers)."""
        r = self.rng
        cands = [v for v in self.pool if pred is None or pred(v)]
        if not cands:
            return None
        x = r.random()
        if x < recent:
            v = cands[-1 - min(int(r.expovariate(1.0)), len(cands) - 1)]
        elif x < recent + 0.2:
            used = [c for c in cands if c.uses > 0]
            v = r.choice(used) if used else r.choice(cands)
        else:
            v = r.choice(cands[: max(1, len(cands) // 2)])   # an old one
        return v

    def use(self, v, allow_wrap=True):
        """The text that reads v; squashes large values with tanh."""
        v.uses += 1
        if allow_wrap and v.mag > 6:
            return "tanh(%s)" % v.name, 1.0
        return v.name, v.mag

    def positive(self, v):
        """Text for a positive version of v (for log/sqrt/div), and its (mag, lower bound)."""
        r = self.rng
        if v.pos and v.lo >= 0.05 and v.mag <= 50:
            v.uses += 1
            return v.name, v.mag, v.lo
        t, m = self.use(v)
        c = r.choice([0.5, 1, 1.5])
        form = r.random()
        if form < 0.4:
            return "(sigmoid(%s) + %g)" % (t, c), 1 + c, c
        if form < 0.7 and m <= 4:
            return "exp(%s)" % t, 2.718 ** m, 2.718 ** -m
        return "(%s * %s + %g)" % (t, t, c), m * m + c, c

    def scalar(self):
        r = self.rng
        return r.choice(["0.5", "2", "1", "0.25", "3", "1.5", "0.05", "1e-2", ".5", "2."])

    # ------------------------------------------------------------------ ops

    def op_unary(self):
        r = self.rng
        v = self.pick()
        op = r.choice(UNARY)
        if op == "gelu" and not v.shape:
            op = "tanh"   # refinterp's gelu fails on 0-d arrays (returns a float)
        if op in ("log", "sqrt"):
            t, m, lo = self.positive(v)
            if op == "log":
                return self.emit("log(%s)" % t, v.shape, max(abs(m), 3.0))
            return self.emit("sqrt(%s)" % t, v.shape, m ** 0.5 + 1, pos=True, lo=lo ** 0.5)
        t, m = self.use(v)
        if op == "exp":
            if m > 3:
                t, m = "tanh(%s)" % t, 1.0
            return self.emit("exp(%s)" % t, v.shape, 2.718 ** m, pos=True, lo=2.718 ** -m)
        if op == "gelu" and r.random() < 0.5:
            return self.emit("gelu(%s, approximate=tanh)" % t, v.shape, m)
        if op == "neg" and r.random() < 0.5:
            return self.emit("-%s" % t, v.shape, m)
        if op == "sigmoid":
            return self.emit("sigmoid(%s)" % t, v.shape, 1.0, pos=True, lo=1 / (1 + 2.718 ** m))
        if op == "tanh":
            return self.emit("tanh(%s)" % t, v.shape, 1.0)
        return self.emit("%s(%s)" % (op, t), v.shape, m, pos=False)

    def partner_shape(self, s):
        """A shape that broadcasts with s: s itself, s with some dims 1, a suffix of s, or s with a
        leading dim added (when s has no symbolic dim)."""
        r = self.rng
        x = r.random()
        t = [1 if is_sym(d) and sym_mult(d) > 1 else d for d in s]   # no input of type batch*k
        if x < 0.3 or not s:
            return tuple(t)
        if x < 0.6:
            for i in range(len(t)):
                if r.random() < 0.5:
                    t[i] = 1
        elif x < 0.85:
            t = t[r.randint(1, len(t)):] if len(t) > 1 else []
            if t and r.random() < 0.4:
                t[0] = 1
        else:
            if any(is_sym(d) for d in t) or len(t) >= 4:
                t = [1] * len(t)
            else:
                t = [r.choice(self.dims[1:6])] + t
        return tuple(t)

    def op_binary(self):
        r = self.rng
        a = self.pick()
        op = r.choice(["+", "-", "*", "/", "add", "mul", "sub"])
        if r.random() < 0.2:   # with a scalar
            t, m = self.use(a)
            c = self.scalar()
            if op == "/":
                return self.emit("%s / %s" % (t, c), a.shape, m * 100)
            if r.random() < 0.5:
                return self.emit("%s %s %s" % (c, op if len(op) == 1 else "+", t), a.shape, m * 3 + 3)
            return self.emit("%s %s %s" % (t, op if len(op) == 1 else "*", c), a.shape, m * 3 + 3)
        bs = [v for v in self.pool if v is not a and bcast(a.shape, v.shape) is not None
              and len(bcast(a.shape, v.shape)) <= 5]
        if bs and r.random() < 0.7:
            b = r.choice(bs[-6:]) if r.random() < 0.6 else r.choice(bs)
        elif r.random() < 0.15:
            b = a   # x op x: two reads of one buffer
        else:
            ps = self.partner_shape(a.shape)
            b = self.new_leaf(ps) if bcast(a.shape, ps) is not None else a
        shape = bcast(a.shape, b.shape)
        if r.random() < 0.5:
            a, b = b, a
        ta, ma = self.use(a)
        if op == "/":
            tb, mb, lo = self.positive(b)
            return self.emit("%s / %s" % (ta, tb), shape, ma / max(lo, 0.05))
        tb, mb = self.use(b)
        if op in ("*", "mul"):
            m = ma * mb
        else:
            m = ma + mb
        if len(op) == 1:
            return self.emit("%s %s %s" % (ta, op, tb), shape, m)
        return self.emit("%s(%s, %s)" % (op, ta, tb), shape, m)

    def op_matmul(self):
        r = self.rng
        a = self.pick(lambda v: len(v.shape) >= 2 and not is_sym(v.shape[-1]))
        if a is None:
            a = self.pick(lambda v: len(v.shape) >= 1 and not is_sym(v.shape[-1]))
            if a is None:
                return None
            # linear over the last axis works for any rank >= 1
            return self.linear(a)
        if r.random() < 0.35:
            return self.linear(a)
        K = a.shape[-1]
        lead_a = a.shape[:-2]

        def ok(v):
            if len(v.shape) < 2 or v.shape[-2] != K or is_sym(v.shape[-1]):
                return False
            lb = bcast(lead_a, v.shape[:-2])
            return lb is not None and sum(is_sym(d) for d in lb + (a.shape[-2], v.shape[-1])) <= 1
        bs = [v for v in self.pool if ok(v)]
        if bs and r.random() < 0.6:
            b = r.choice(bs)
        else:
            N = r.choice(self.dims[1:])
            lead = tuple(d for d in lead_a if not is_sym(d))
            if lead and r.random() < 0.5:
                b = self.new_param(lead[-1:] + (K, N) if r.random() < 0.5 else (K, N))
                if bcast(lead_a, b.shape[:-2]) is None:
                    return None
            else:
                b = self.new_param((K, N))
        lead = bcast(lead_a, b.shape[:-2])
        shape = lead + (a.shape[-2], b.shape[-1])
        ta, ma = self.use(a)
        tb, mb = self.use(b)
        m = ma * mb * (K ** 0.5) + 0.1
        if r.random() < 0.5:
            return self.emit("%s @ %s" % (ta, tb), shape, m)
        return self.emit("matmul(%s, %s)" % (ta, tb), shape, m)

    def linear(self, a):
        r = self.rng
        IN = a.shape[-1]
        OUT = r.choice(self.dims[1:])
        w = self.new_param((OUT, IN))
        ta, ma = self.use(a)
        m = ma * (IN ** 0.5) + 0.1
        if r.random() < 0.6:
            b = self.new_param((OUT,))
            return self.emit("linear(%s, %s, %s)" % (ta, w.name, b.name), a.shape[:-1] + (OUT,), m + 1)
        return self.emit("linear(%s, %s)" % (ta, w.name), a.shape[:-1] + (OUT,), m)

    def int_axes(self, s):
        return [i for i, d in enumerate(s) if not is_sym(d)]

    def axis_text(self, i, rank):
        r = self.rng
        return str(i - rank) if r.random() < 0.4 else str(i)

    def op_reduce(self):
        r = self.rng
        a = self.pick(lambda v: len(self.int_axes(v.shape)) >= 1)
        if a is None:
            return None
        ax = r.choice(self.int_axes(a.shape))
        rank = len(a.shape)
        op = r.choice(["softmax", "softmax", "log_softmax", "sum", "mean", "max"])
        t, m = self.use(a)
        if ax == rank - 1 and r.random() < 0.4:
            args = ""
        elif r.random() < 0.5:
            args = ", axis=%s" % self.axis_text(ax, rank)
        else:
            args = ", %s" % self.axis_text(ax, rank)
        if op in ("softmax", "log_softmax"):
            if op == "softmax":
                return self.emit("softmax(%s%s)" % (t, args), a.shape, 1.0, pos=True, lo=0.0)
            return self.emit("log_softmax(%s%s)" % (t, args), a.shape, 2 * m + 3)
        keep = r.random() < 0.35
        if keep:
            args += (", keepdim=true" if "axis" in args or not args else ", true") if args else ", keepdim=true"
            shape = a.shape[:ax] + (1,) + a.shape[ax + 1:]
        else:
            shape = a.shape[:ax] + a.shape[ax + 1:]
        mm = m * a.shape[ax] if op == "sum" else m
        return self.emit("%s(%s%s)" % (op, t, args), shape, mm, pos=False)

    def reshape_target(self, s):
        """A new shape for s (and its reshape-list text), or None."""
        r = self.rng
        sym = [d for d in s if is_sym(d)]
        if sym:
            if not is_sym(s[0]):
                return None
            per = sym_mult(s[0])
            for d in s[1:]:
                per *= d
        else:
            per = 1
            for d in s:
                per *= d
        # factor `per` into up to 3 factors
        facs = []
        rest = per
        for _ in range(r.randint(0, 3)):
            divs = [d for d in range(1, rest + 1) if rest % d == 0]
            f = r.choice(divs)
            facs.append(f)
            rest //= f
        if sym:
            # leading symbolic dim batch*rest
            lead = "batch" if rest == 1 else "batch*%d" % rest
            new = (lead,) + tuple(facs)
            if rest == 1 and r.random() < 0.5:
                items = [self.batch] + [str(f) for f in facs]
            else:
                items = ["-1"] + [str(f) for f in facs]
            return new, "[" + ", ".join(items) + "]"
        facs.append(rest)
        r.shuffle(facs)
        if len(facs) > 4:
            return None
        items = [str(f) for f in facs]
        if r.random() < 0.5:
            items[r.randrange(len(items))] = "-1"
        return tuple(facs), "[" + ", ".join(items) + "]"

    def op_reshape(self, out=False, a=None):
        r = self.rng
        a = a or self.pick(lambda v: len(v.shape) >= 1)
        if a is None:
            return None
        tgt = self.reshape_target(a.shape)
        if tgt is None:
            return None
        shape, lst = tgt
        a.uses += 1
        if r.random() < 0.3:
            return self.emit("reshape(%s, shape=%s)" % (a.name, lst), shape, a.mag, a.pos, a.lo, out=out)
        return self.emit("reshape(%s, %s)" % (a.name, lst), shape, a.mag, a.pos, a.lo, out=out)

    def op_transpose(self):
        r = self.rng
        a = self.pick(lambda v: len(self.int_axes(v.shape)) >= 2 and
                      (not any(is_sym(d) for d in v.shape) or is_sym(v.shape[0])))
        if a is None:
            return None
        s = a.shape
        rank = len(s)
        axes = self.int_axes(s)
        t, m = self.use(a)
        if r.random() < 0.5 or len(axes) < 2:
            i, j = r.sample(axes, 2)
            new = list(s)
            new[i], new[j] = new[j], new[i]
            if rank >= 2 and sorted((i, j)) == [rank - 2, rank - 1] and r.random() < 0.5:
                return self.emit("transpose(%s)" % t, tuple(new), m, a.pos, a.lo)
            return self.emit("transpose(%s, %s, %s)" % (t, self.axis_text(i, rank), self.axis_text(j, rank)),
                             tuple(new), m, a.pos, a.lo)
        perm = list(range(rank))
        sub = axes[:]
        r.shuffle(sub)
        for k, ax in zip(axes, sub):
            perm[k] = ax
        new = tuple(s[p] for p in perm)
        kw = "dims=" if r.random() < 0.5 else ""
        return self.emit("permute(%s, %s[%s])" % (t, kw, ", ".join(map(str, perm))), new, m, a.pos, a.lo)

    def op_movement(self):
        """repeat, repeat_interleave, pad, triu/tril or cumsum on fixed axes (the batch stays
        leading), so that they fuse (or not) with whatever produced their operand."""
        r = self.rng
        a = self.pick(lambda v: len(self.int_axes(v.shape)) >= 1)
        if a is None:
            return None
        s, rank, axes = a.shape, len(a.shape), self.int_axes(a.shape)
        trailing = 0
        while trailing < rank and not is_sym(s[rank - 1 - trailing]):
            trailing += 1
        kind = r.choice(["repeat", "repeat_interleave", "pad", "pad", "tri", "cumsum"])
        if kind == "tri" and trailing < 2:
            kind = "cumsum"
        t, m = self.use(a)
        if kind == "repeat":
            reps = [1] * rank
            ax = r.choice(axes)
            reps[ax] = r.choice([2, 3])
            lead = [2] if not any(is_sym(d) for d in s) and rank < 4 and r.random() < 0.3 else []
            new = tuple(lead) + tuple(d * reps[i] if i == ax else d for i, d in enumerate(s))
            return self.emit("repeat(%s, [%s])" % (t, ", ".join(map(str, lead + reps))), new, m, a.pos, a.lo)
        if kind == "repeat_interleave":
            ax, k = r.choice(axes), r.choice([2, 3])
            new = s[:ax] + (s[ax] * k,) + s[ax + 1:]
            return self.emit("repeat_interleave(%s, %d, dim=%s)" % (t, k, self.axis_text(ax, rank)), new, m, a.pos,
                             a.lo)
        if kind == "pad":
            k = r.randint(1, min(3, trailing))
            mode = r.choice(["constant", "reflect", "replicate"])
            if not (k + 1 <= rank <= k + 2):
                mode = "constant"
            pads, new = [], list(s)
            for i in range(k):
                d = rank - 1 - i
                if mode == "reflect":
                    lo, hi = r.randint(0, s[d] - 1), r.randint(0, s[d] - 1)
                elif mode == "constant" and s[d] > 2 and r.random() < 0.2:
                    lo, hi = -1, r.randint(0, 2)     # a negative pad crops
                else:
                    lo, hi = r.randint(0, 2), r.randint(0, 2)
                pads += [lo, hi]
                new[d] = s[d] + lo + hi
            if mode == "constant":
                value = r.choice(["", ", value=0.5", ", value=-2"])
                return self.emit("pad(%s, [%s]%s)" % (t, ", ".join(map(str, pads)), value), tuple(new), max(m, 2.0))
            return self.emit("pad(%s, [%s], mode=%s)" % (t, ", ".join(map(str, pads)), mode), tuple(new), m, a.pos,
                             a.lo)
        if kind == "tri":
            fn, dg = r.choice(["triu", "tril"]), r.randint(-2, 2)
            arg = "" if dg == 0 and r.random() < 0.5 else (", %d" % dg if r.random() < 0.5 else ", diagonal=%d" % dg)
            return self.emit("%s(%s%s)" % (fn, t, arg), s, m)
        ax = r.choice(axes)
        if m > 3:
            t, m = "tanh(%s)" % t, 1.0
        return self.emit("cumsum(%s, %s)" % (t, self.axis_text(ax, rank)), s, m * s[ax], a.pos and a.lo > 0,
                         a.lo if a.pos else 0.0)

    # ------------------------------------------------------------------ motifs

    def square(self):
        return self.rng.choice(self.dims[2:7] if self.size == "small" else self.dims[3:10])

    def motif_b02(self):
        """A materialized square value read directly and transposed in one expression."""
        r = self.rng
        n = self.square()
        lead = ()
        if self.batch and r.random() < 0.4:
            lead = ("batch",)
        elif r.random() < 0.25:
            lead = (r.choice([2, 3]),)
        x = self.new_input(lead + (n, n)) if lead and is_sym(lead[0]) else self.new_leaf(lead + (n, n))
        how = r.random()
        if how < 0.35:
            p = self.new_param((n, n))
            a = self.emit("%s @ %s" % (x.name, p.name), x.shape, n ** 0.5)
        elif how < 0.65:
            a = self.emit("softmax(%s)" % x.name, x.shape, 1.0, pos=True)
        else:
            a = self.emit("%s + %s" % (x.name, x.name), x.shape, 2.0)
            # B02 as written: x1 = x + x; f = P @ x1; out = x1 + f
            p = self.new_param((n, n))
            f = self.emit("%s @ %s" % (p.name, a.name), x.shape, 2 * n ** 0.5)
            return self.emit("%s + %s" % (a.name, f.name), x.shape, 2 + 2 * n ** 0.5, out=r.random() < 0.4)
        form = r.choice(["%s + transpose(%s)", "transpose(%s) * %s", "%s - permute(%s, [%s])",
                         "relu(%s) + transpose(%s) * 2"])
        if "permute" in form:
            rank = len(a.shape)
            perm = list(range(rank - 2)) + [rank - 1, rank - 2]
            expr = form % (a.name, a.name, ", ".join(map(str, perm)))
        else:
            expr = form % (a.name, a.name)
        a.uses += 2
        return self.emit(expr, a.shape, 2 * a.mag + 2, out=r.random() < 0.3)

    def motif_b05(self):
        """m2 = m + c*(g - m) (output), p2 = p - c*m2 (output, only reads m2), t = h * 1 (output)."""
        r = self.rng
        s = self.rand_shape(rank=r.choice([1, 1, 2]))
        m, g, p, h = (self.new_input(s) for _ in range(4))
        m2 = self.emit("%s + 0.05 * (%s - %s)" % (m.name, g.name, m.name), s, 2.0, out=True)
        self.emit("%s - 0.01 * %s" % (p.name, m2.name), s, 2.0, out=r.random() < 0.5)
        self.emit("%s * 1" % h.name, s, 1.0, out=True)

    def motif_b06(self):
        """Small buffers alive while big ones die."""
        r = self.rng
        bigs = (self.big, self.big) if r.random() < 0.5 else (self.big * self.big,)
        X = self.new_input(bigs)
        k = self.new_input((r.choice(self.dims[1:5]),))
        A = self.emit("relu(%s)" % X.name, bigs, 1.0)
        kk = self.emit("relu(%s)" % k.name, k.shape, 1.0, out=r.random() < 0.6)
        self.emit("%s + 1" % A.name, bigs, 2.0, out=True)
        small = (max(1, self.big // 2),) if len(bigs) == 1 else (self.big // 2, self.big)
        Y = self.new_input(small)
        Z = self.new_input(small)
        B = self.emit("relu(%s)" % Y.name, small, 1.0)
        C = self.emit("exp(%s)" % Z.name, small, 2.718, pos=True, lo=0.3)
        D = self.emit("%s + %s" % (B.name, C.name), small, 4.0, out=r.random() < 0.7)
        if r.random() < 0.5:
            self.emit("%s * 2 + sum(%s)" % (D.name, kk.name), small, 8.0, out=True)

    def motif_chain(self):
        """A materialized value followed by elementwise ops, each the last reader of the previous
        value: in-place reuse is tempting at every step."""
        r = self.rng
        a = self.pick(lambda v: len(self.int_axes(v.shape)) >= 1)
        if a is None:
            return None
        t, m = self.use(a)
        v = self.emit("softmax(%s)" % t if r.random() < 0.5 else "log_softmax(%s)" % t, a.shape, 3 + 2 * m)
        for _ in range(r.randint(2, 4)):
            op = r.choice(["%s * 2", "relu(%s)", "%s - 1", "tanh(%s)", "%s * %s", "sigmoid(%s) + %s"])
            expr = op % ((v.name,) * op.count("%s"))
            v.uses += 1
            v = self.emit(expr, v.shape, min(v.mag * v.mag + 2, 1e6))
        if r.random() < 0.5 and len(self.int_axes(v.shape)) >= 1:
            t, m = self.use(v)
            v = self.emit("sum(%s, %d)" % (t, self.int_axes(v.shape)[-1]),
                          v.shape[:self.int_axes(v.shape)[-1]] + v.shape[self.int_axes(v.shape)[-1] + 1:], m * 8)
        return v

    def motif_output_read_later(self):
        r = self.rng
        a = self.pick()
        t, m = self.use(a)
        o = self.emit(r.choice(["relu(%s)", "%s * 3", "exp(tanh(%s))", "-%s"]) % t, a.shape, m * 3, out=True)
        for _ in range(r.randint(1, 3)):
            self.random_op()
        t, m = self.use(o)
        return self.emit("%s + %s" % (t, self.scalar()), o.shape, m + 3, out=r.random() < 0.5)

    def motif_view_output(self):
        r = self.rng
        a = self.pick(lambda v: len(v.shape) >= 1)
        if a is None:
            return None
        t, m = self.use(a)
        v = self.emit("%s * %s" % (t, t) if r.random() < 0.5 else "sigmoid(%s)" % t, a.shape, m * m)
        o = self.op_reshape(out=True, a=v)
        if o is not None and r.random() < 0.5:
            self.emit("%s + 1" % v.name, v.shape, v.mag + 1, out=r.random() < 0.5)
        return o

    def motif_output_is_input(self):
        r = self.rng
        x = self.pick(lambda v: v.name.startswith("x")) or self.new_input(self.rand_shape())
        x.uses += 1
        name = self.fresh("o")
        self.body.append("output %s = %s" % (name, x.name))
        self.outputs.append(name)
        # and an elementwise op on that input that could have gone in place, then the input again
        y = self.emit("%s * 2" % x.name, x.shape, 2 * x.mag)
        self.emit("%s + %s" % (y.name, x.name), x.shape, 3 * x.mag, out=r.random() < 0.5)

    def op_select(self):
        """A mask from comparisons of leaves (exact values: a computed one could round across the
        threshold in one implementation and not the other) feeding where, logic or a cast: bool
        nodes fused with f32 ones."""
        r = self.rng
        a = self.pick(lambda v: v.name in self.leaves)
        if a is None:
            return None
        thr = r.choice(["0", "0.5", "-0.25"])
        cmp = "%s %s %s" % (a.name, r.choice(["<", "<=", ">", ">="]), thr)
        if r.random() < 0.3:
            cmp = "(%s) %s (%s != 0)" % (cmp, r.choice(["and", "or"]), a.name)
        if r.random() < 0.2:
            cmp = "not (%s)" % cmp
        bs = [v for v in self.pool if bcast(a.shape, v.shape) is not None and len(bcast(a.shape, v.shape)) <= 5]
        if not bs:
            return None
        b = r.choice(bs[-6:])
        tb, mb = self.use(b)
        shape = bcast(a.shape, b.shape)
        if r.random() < 0.4:
            return self.emit("cast(%s, dtype=f32) * %s" % (cmp, tb), shape, mb)
        c = r.choice(bs[-6:])
        if bcast(shape, c.shape) is None or len(bcast(shape, c.shape)) > 5:
            return self.emit("where(%s, %s, 0)" % (cmp, tb), shape, mb)
        tc, mc = self.use(c)
        return self.emit("where(%s, %s, %s)" % (cmp, tb, tc), bcast(shape, c.shape), max(mb, mc))

    def motif_argmax(self):
        a = self.pick(lambda v: len(self.int_axes(v.shape)) >= 1 and v.mag <= 6)
        if a is None:
            return None
        ax = self.int_axes(a.shape)[-1]
        t, _ = self.use(a, allow_wrap=False)   # (tanh of large values saturates: ties)
        return self.emit("argmax(%s, %d)" % (t, ax), a.shape[:ax] + a.shape[ax + 1:], 0, out=True, dtype="i64")

    # ------------------------------------------------------------------ driver

    def random_op(self):
        r = self.rng
        ops = [(self.op_unary, 3), (self.op_binary, 5), (self.op_matmul, 3), (self.op_reduce, 3),
               (self.op_reshape, 1.2), (self.op_transpose, 1.2), (self.op_movement, 1.2), (self.op_select, 0.8)]
        tot = sum(w for _, w in ops)
        x = r.random() * tot
        for fn, w in ops:
            x -= w
            if x <= 0:
                break
        v = fn()
        if v is not None and r.random() < 0.12 and v.dtype == "f32":
            # make it an output right away; later ops may still read it
            pass
        return v

    def generate(self):
        r = self.rng
        # a few starting leaves
        for _ in range(r.randint(1, 3)):
            self.new_leaf(self.rand_shape())
        motifs = [self.motif_b02, self.motif_b05, self.motif_b06, self.motif_chain,
                  self.motif_output_read_later, self.motif_view_output, self.motif_output_is_input,
                  self.motif_argmax]
        weights = [3, 1, 1.5, 3, 2, 2, 1, 0.5]
        for _ in range(self.nsteps):
            if r.random() < 0.3:
                fn = r.choices(motifs, weights)[0]
            else:
                fn = self.random_op
            fn()
        # outputs: the last value, some random others (several outputs, long live ranges)
        locals_ = [v for v in self.pool if v.name.startswith("v")]
        sinks = [v for v in locals_ if v.uses == 0]
        want = [self.pool[-1]] if self.pool[-1].name.startswith("v") else []
        r.shuffle(sinks)
        ndirect = r.randint(1, 3)
        want += sinks[:ndirect]
        for _ in range(r.randint(0, 1)):
            if locals_:
                want.append(r.choice(locals_))
        # the other sinks: reduced and added into one output, so they stay alive
        terms = []
        for v in sinks[ndirect:]:
            if v is self.pool[-1]:
                continue
            if not v.shape:
                terms.append(v.name if v.mag < 6 else "tanh(%s)" % v.name)
            elif is_sym(v.shape[0]):
                terms.append("mean(reshape(%s, [%s, -1]))" % (v.name, self.batch))
            else:
                terms.append("mean(reshape(%s, [-1]))" % v.name)
        if terms:
            self.body.append("output %s = %s" % (self.fresh("o"), " + ".join(terms)))
            self.outputs.append("o%d" % (self.n["o"] - 1))
        done = set()
        for v in want:
            if v.name in done:
                continue
            done.add(v.name)
            name = self.fresh("o")
            form = r.random()
            if form < 0.4:
                self.body.append("output %s = %s" % (name, v.name))
            elif form < 0.6 and self.typable(v.shape):
                self.body.append("output %s: %s = %s" % (name, self.type_text(v.shape), v.name))
            else:
                self.body.append("output %s = %s" % (name, r.choice(["relu(%s)", "%s * 0.5", "tanh(%s)"]) % v.name))
            self.outputs.append(name)
        if not self.outputs:
            v = self.pool[-1]
            self.body.append("output %s = %s + 1" % (self.fresh("o"), v.name))
        lines = ["# randgraph seed program (tools/randgraph.py)", "model g {"]
        lines += ["  " + d for d in self.decls if not d.startswith("output")]
        lines += ["  " + d for d in self.decls if d.startswith("output")]
        lines += ["  " + s for s in self.body]
        lines.append("}")
        return "\n".join(lines) + "\n"


def generate(seed, size="small"):
    """The program text for `seed` (a string ending in a newline)."""
    return Gen(seed, size).generate()


def main():
    ap = argparse.ArgumentParser(description="print a random valid .model program")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--size", choices=["small", "medium"], default="small")
    a = ap.parse_args()
    sys.stdout.write(generate(a.seed, a.size))
    return 0


if __name__ == "__main__":
    sys.exit(main())
