"""tools/model_blocks.py — find the repeated layers of an imported model and write them as blocks.

    decls, lines, blocks, stats = find_blocks(decls, lines)

The input is what tools/onnx2model.py writes inside `model NAME { ... }`: `decls`, the
`  param NAME: DTYPE[SHAPE]` / `  input ...` lines, and `lines`, the body (statements
`  a, b = EXPR`, `  output y = x`, and `  # OP NODE` comments, each before the statements of its
node). The result is the same program with each recognised repeated layer written once as a
`block` (its params declared inside, named relative to the instance prefix) and instantiated
`as PREFIX`, so every param keeps its state_dict name and the weights load unchanged.

How a layer is recognised (a pure text-and-dataflow analysis of the statements; no shapes are
guessed, since every shape, attribute and constant the importer writes is in the statement
text or the param declaration):

1. Instance prefixes come from the param names: `encoder.layer.0`, `layer1.0`, `h.0`,
   `encoder_layer_3` — a name part holding a digit; its siblings (the same part with other
   numbers) are the candidate instances. Outer levels are tried first (`layer1.0` before
   `layer1.0.downsample.0`).
2. An instance's region is every statement between its params: the statements reading its
   params (and no other instance's), plus those that are both descendants and ancestors of
   such statements, plus the statements after them that read no params and take values of no
   later instance (a residual add, the last ReLU), cut back as far as needed to match the
   other instances (the last layer's tail must not take the pooling), plus, where every
   instance then still matches, the statements before it that read no params and feed only
   it (an RMSNorm's statistics).
3. A region must be convex (no path leaves it and comes back), must not read its params from
   outside, and is written in canonical form: its own values numbered in statement order,
   values from outside numbered in order of first use (they become block arguments: the
   layer's input, an attention mask, a folded constant), its params by their relative names.
   Integer literals (sizes in shapes and param declarations, integer attributes) are left out
   of the canonical text: regions with the same canonical text and param declarations form
   one block, and a literal whose value differs between the instances becomes an integer
   argument of the block (one per distinct column of values; a column that is another's
   multiple or quotient is written `4 * n0`, `n0 // 4`), so ResNet's bottlenecks of 64 to 512
   channels are one block. Only for a block of at least MIN_INT_BLOCK statements and at most
   MAX_INT_ARGS integer arguments; a group of one stays straight-line code. Instances are
   looked for at each numbered level and across the levels above it too (`layer#.#`: every
   stage's blocks together).
4. Every call is checked by expanding the block back with the call's names: it must give the
   instance's statements character for character; anything that does not fit stays inline.

The order of the top-level statements changes only as far as needed to make each region
contiguous (a stable topological order); the dataflow graph is the same one.
"""
import hashlib
import heapq
import re

# a name as the importer writes it: value names, dotted param names (which may start with a
# digit part, as nn.Sequential's keys do); numbers such as 1e-05 or 0.5 match too and are
# never a known name
TOKEN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.]*")
DECL = re.compile(r"^  param ([^:]+): (.*)$")
# an integer literal: not part of a name, a float (0.25, 1e-05, 1e+20) or a negative number's
# digits (a size is positive; `(-1)` stays as it is)
INT = re.compile(r"(?<![-+A-Za-z0-9_.@])[0-9]+(?![A-Za-z0-9_.])")
MAX_TRIM = 16          # the most statements cut from the end of a region's tail to match others
MIN_INT_BLOCK = 6      # the fewest statements of a block that takes integer arguments
MAX_INT_ARGS = 5       # the most integer arguments a block takes
STMT = re.compile(r"^  (output )?([A-Za-z0-9_., ]+?) = (.*)$")


class _Stmt:
    def __init__(self, idx, comment, out_kw, defs, rhs):
        self.idx = idx              # position in the original body
        self.comment = comment      # the '  # OP NODE' line before it, or None
        self.out_kw = out_kw        # an 'output NAME = x' statement
        self.defs = defs            # names it binds
        self.rhs = rhs              # the expression text
        self.reads = []             # known names it reads, in order (with repeats)


def _reads(rhs, known):
    """The known names an expression reads: tokens not directly followed by '(' (a function)
    or a single '=' (a keyword argument)."""
    out = []
    for m in TOKEN.finditer(rhs):
        tok, end = m.group(0), m.end()
        rest = rhs[end:end + 2]
        if rest[:1] == "(" or (rest[:1] == "=" and rest[:2] != "=="):
            continue
        if tok in known:
            out.append(tok)
    return out


def _subst(text, mapping):
    """text with every name token in mapping replaced (the same tokenisation as _reads)."""
    def rep(m):
        tok, end = m.group(0), m.end()
        rest = text[end:end + 2]
        if rest[:1] == "(" or (rest[:1] == "=" and rest[:2] != "=="):
            return tok
        return mapping.get(tok, tok)
    return TOKEN.sub(rep, text)


def _abstract(text):
    """text with each integer literal replaced by '#', and their values in order."""
    vals = [int(m.group(0)) for m in INT.finditer(text)]
    return INT.sub("#", text), vals


def _fill(text, reps):
    """text with its integer literals replaced, in order, by the strings in reps (an expression
    such as `4 * n0` in parentheses unless it stands alone as a list item or an argument)."""
    it = iter(reps)

    def one(m):
        r = next(it)
        if " " in r:
            before, after = text[:m.start()].rstrip()[-1:], text[m.end():].lstrip()[:1]
            if not (before in ("[", "(", ",", "=") and after in ("]", ")", ",")):
                r = "(%s)" % r
        return r
    return INT.sub(one, text)


def _instance_prefixes(name):
    """(prefix, pattern) of each name part of a param name that holds a digit: for
    'layer1.0.conv1.weight': ('layer1', 'layer#'), ('layer1.0', 'layer1.#'), and, where an outer
    part holds a digit too, every such part generalised: ('layer1.0', 'layer#.#'), so the
    blocks of all the stages are candidates together."""
    parts = name.split(".")
    out = []
    for i, p in enumerate(parts[:-1]):
        if re.search(r"\d", p):
            out.append((".".join(parts[:i + 1]), ".".join(parts[:i] + [re.sub(r"\d+", "#", p)])))
            if any(re.search(r"\d", q) for q in parts[:i]):
                out.append((".".join(parts[:i + 1]), ".".join(re.sub(r"\d+", "#", q) for q in parts[:i + 1])))
    return out


def find_blocks(decls, lines, reserved=()):
    """Rewrite an imported body with blocks for its repeated layers (see the module doc).

    decls: the declaration lines; lines: the body lines; reserved: names the block names must
    not take (value names are avoided anyway). Returns (decls, lines, blocks, stats): the new
    declaration and body lines, the block definitions (a list of line lists, to go before the
    model) and a list of (block name, [instance prefixes]). Returns the input unchanged (and
    no blocks) where nothing repeats."""
    # ---- parse
    params = {}                      # param name -> declaration text after ':'
    decl_of = {}
    for i, d in enumerate(decls):
        m = DECL.match(d)
        if m:
            params[m.group(1)] = m.group(2)
            decl_of[m.group(1)] = i
    stmts, comment = [], None
    for i, l in enumerate(lines):
        if l.startswith("  #"):
            comment = l
            continue
        m = STMT.match(l)
        if not m:
            return decls, lines, [], []          # a line this pass does not know: leave it all
        defs = [x.strip() for x in m.group(2).split(",")]
        stmts.append(_Stmt(len(stmts), comment, bool(m.group(1)), defs, m.group(3)))
        comment = None
    if comment is not None:
        return decls, lines, [], []
    defined = {}                                 # value name -> index of its statement
    inputs = set()
    for d in decls:
        m = re.match(r"^  input ([^:]+):", d)
        if m:
            inputs.add(m.group(1))
    known = set(params) | inputs
    for s in stmts:
        known |= set(s.defs)
    for s in stmts:
        s.reads = _reads(s.rhs, known)
        for d in s.defs:
            if d in defined or d in params or d in inputs:
                return decls, lines, [], []      # a name bound twice: the order matters, leave it
            defined[d] = s.idx
    n = len(stmts)
    preds = [sorted({defined[r] for r in s.reads if r in defined}) for s in stmts]
    succs = [[] for _ in range(n)]
    for i, ps in enumerate(preds):
        for p in ps:
            succs[p].append(i)
    readers = {}                                 # param -> statements reading it
    for s in stmts:
        for r in s.reads:
            if r in params:
                readers.setdefault(r, set()).add(s.idx)

    def closure(start, edges):
        seen, stack = set(start), list(start)
        while stack:
            for j in edges[stack.pop()]:
                if j not in seen:
                    seen.add(j)
                    stack.append(j)
        return seen

    # ---- candidate levels, outermost first
    levels = {}                                  # pattern -> {prefix: [params]}
    first = {}
    for k, p in enumerate(params):
        for prefix, pat in _instance_prefixes(p):
            levels.setdefault(pat, {}).setdefault(prefix, []).append(p)
            first.setdefault(pat, (pat.count("."), -pat.count("#"), k))
    claimed_stmt = {}                            # statement -> group id
    claimed_param = set()
    groups = []                                  # (pattern, [(prefix, region, info)])

    for pat in sorted(levels, key=lambda q: first[q]):
        insts = {pre: ps for pre, ps in levels[pat].items() if not claimed_param.intersection(ps)}
        # a numbered module (`layer.3`, `layers.3`, `h.3`) or, with 3 or more siblings, a name
        # ending in its number (`encoder_layer_3`); not `ln_1` / `ln_2` or `conv1` / `conv2`
        last = pat.split(".")[-1]
        if len(insts) < 2 or (last != "#" and not (last.endswith("_#") and len(insts) >= 3)):
            continue
        owner = {}
        for pre, ps in insts.items():
            for p in ps:
                owner[p] = pre
        # seeds: statements reading params of this instance and of no other (top-level params
        # they read, such as folded constants, become block arguments)
        seeds = {}
        bad = set()
        for s in stmts:
            pre_set = {owner[r] for r in s.reads if r in owner}
            if len(pre_set) == 1 and s.idx not in claimed_stmt and not s.out_kw:
                seeds.setdefault(pre_set.pop(), set()).add(s.idx)
            elif pre_set:
                bad |= pre_set
        regions = {}
        in_hull = {}
        for pre in insts:
            sd = seeds.get(pre)
            if not sd or pre in bad:
                continue
            hull = closure(sd, succs) & closure(sd, [preds[i] for i in range(n)])
            regions[pre] = hull
            for i in hull:
                in_hull.setdefault(i, []).append(pre)
        for i, ps in in_hull.items():            # a statement in two hulls: neither instance
            if len(ps) > 1:
                for pre in ps:
                    regions.pop(pre, None)
        owner_of = {}
        for pre, r in regions.items():
            for i in r:
                owner_of[i] = pre
        down = {pre: closure(r, succs) for pre, r in regions.items()}
        tails = {}
        # tails: statements reading no instance's params whose values from regions all come
        # from one region
        for s in stmts:
            if s.idx in owner_of or s.idx in claimed_stmt or s.out_kw:
                continue
            if any(r in params for r in s.reads):
                continue
            own = {owner_of[p] for p in preds[s.idx] if p in owner_of}
            # several: the latest, the one downstream of all others (a residual add of this
            # layer's output and the previous layer's)
            late = [q for q in own if all(q == o or regions[q] & down[o] for o in own)]
            if len(late) == 1:
                pre = late[0]
                regions[pre].add(s.idx)
                tails.setdefault(pre, []).append(s.idx)
                owner_of[s.idx] = pre
        # each instance with its tail cut shorter too (the last layer's tail may run on into
        # the head: a pooling, a flatten); each takes the form another instance shares with
        # the fewest results, then the longest
        variants = {}
        for pre in sorted(regions, key=lambda q: min(regions[q])):
            tail = tails.get(pre, [])
            hull = regions[pre] - set(tail)
            ks = sorted(set(range(len(tail), max(-1, len(tail) - MAX_TRIM - 1), -1)) | {0}, reverse=True)
            for k in ks:
                reg = sorted(hull | set(tail[:k]))
                info = _canonical(pre, reg, stmts, preds, succs, params, insts[pre], readers, claimed_stmt,
                                  closure, n)
                if info is not None:
                    variants.setdefault(pre, []).append((reg, info))
        count = {}
        for pre, vs in variants.items():
            for key in {info["key"] for _, info in vs}:
                count[key] = count.get(key, 0) + 1
        bykey = {}
        for pre, vs in variants.items():
            # the fewest results first (one tensor out, where the tail can end there), then
            # the longest
            for reg, info in sorted(vs, key=lambda v: (len(v[1]["outs"]), -len(v[0]))):
                if count[info["key"]] >= 2:
                    bykey.setdefault(info["key"], []).append((pre, reg, info))
                    break
        for key in sorted(bykey, key=lambda k: min(bykey[k][0][1])):
            members = bykey[key]
            if len(members) < 2:
                continue
            # integer arguments only for a real layer: at least MIN_INT_BLOCK statements and
            # at most MAX_INT_ARGS of them (a single linear layer of two widths stays inline)
            nints = len(_int_args(members, set())[1])
            if nints and (len(members[0][1]) < MIN_INT_BLOCK or nints > MAX_INT_ARGS):
                continue
            with_heads = _with_heads(members, stmts, preds, succs, params, insts, readers, claimed_stmt,
                                     closure, n)
            # a head may be in another group's region at this level (its tail): then without
            if not any(i in claimed_stmt for _, reg, _ in with_heads for i in reg):
                members = with_heads
            members = [mb for mb in members if not any(i in claimed_stmt for i in mb[1])]
            if len(members) < 2:
                continue
            gid = len(groups)
            groups.append((pat, members))
            for pre, reg, info in members:
                for i in reg:
                    claimed_stmt[i] = (gid, pre)
                claimed_param.update(info["params"])
    if not groups:
        return decls, lines, [], []
    return _emit(decls, lines, stmts, preds, params, decl_of, groups, claimed_stmt, known, reserved)


def _with_heads(members, stmts, preds, succs, params, insts, readers, claimed, closure, n):
    """The members of a group with their heads: the statements before each region that read no
    params and feed only it (a norm's statistics before the layer's first weight: an RMSNorm's
    mean and rsqrt), where every member then still has one canonical form; else as they were."""
    taken = set(claimed)
    for _, reg, _ in members:
        taken |= set(reg)
    out = []
    for pre, reg, info in members:
        inside = set(reg)
        heads = set()
        for t in range(max(reg), -1, -1):
            s = stmts[t]
            if t in inside or t in taken or s.out_kw or any(r in params for r in s.reads):
                continue
            if succs[t] and all(j in inside or j in heads for j in succs[t]):
                heads.add(t)
        if not heads:
            return members
        ext = sorted(inside | heads)
        new = _canonical(pre, ext, stmts, preds, succs, params, insts[pre], readers, claimed, closure, n)
        if new is None or (out and new["key"] != out[0][2]["key"]):
            return members
        out.append((pre, ext, new))
    return out


def _canonical(pre, reg, stmts, preds, succs, params, inst_params, readers, claimed, closure, n):
    """The canonical form of a region, or None where it cannot be a block call."""
    regset = set(reg)
    if any(i in claimed for i in reg):
        return None
    # convex: nothing outside reachable from the region reaches back into it
    out_succ = {j for i in reg for j in succs[i] if j not in regset}
    if out_succ:
        down = closure(out_succ, succs)
        if down & regset:
            return None
    # the instance's params are read only inside
    mine = set(inst_params)
    for p in mine:
        if readers.get(p, set()) - regset:
            return None
    reg = _canonical_order(pre, reg, stmts, preds, mine)
    local, args, used_params = {}, [], []
    for i in reg:
        for d in stmts[i].defs:
            local[d] = "v%d" % len(local)
    amap = {}
    text = []
    for i in reg:
        s = stmts[i]
        for r in s.reads:
            if r in local or r in mine:
                if r in mine and r not in used_params:
                    used_params.append(r)
                continue
            if r not in amap:
                amap[r] = "a%d" % len(amap)
                args.append(r)
    rel = {}
    for p in used_params:
        r = p[len(pre) + 1:]
        if not r:
            return None
        rel[p] = "@" + r
    mapping = dict(local)
    mapping.update(amap)
    mapping.update(rel)
    # integer literals (sizes, attributes) are left out of the key: instances that differ only
    # there are one block taking the differing ones as integer arguments (see _int_args)
    ints = []
    for i in reg:
        s = stmts[i]
        t, vals = _abstract(_subst(s.rhs, mapping))
        text.append("%s = %s" % (", ".join(mapping[d] for d in s.defs), t))
        ints.append(vals)
    outs = [d for i in reg for d in stmts[i].defs
            if any(j not in regset for j in succs[i] if d in stmts[j].reads)]
    if not outs:
        return None
    used_params.sort(key=lambda p: list(params).index(p))
    pdecl, pints = [], []
    for p in used_params:
        t, vals = _abstract(params[p])
        pdecl.append((rel[p], t))
        pints.append(vals)
    key = ("\n".join(text), tuple(mapping[o] for o in outs), tuple(pdecl))
    return {"key": key, "args": args, "outs": outs, "params": used_params, "rel": rel, "local": local,
            "order": reg, "ints": ints, "pints": pints}


def _int_args(members, taken):
    """The integer literals of a group's instances: where every instance has the same value it
    stays a literal, else it becomes an integer argument of the block (one per distinct column
    of values; a column that is another's times an integer is written so: `4 * n0`). Returns
    ({("p", param index) or ("s", canonical statement index): [replacement text per literal]},
    the argument names, the argument values, one list per argument, indexed by member)."""
    infos = [m[2] for m in members]
    rep, names, vals = {}, [], []
    slots = [(("p", a), k) for a, v in enumerate(infos[0]["pints"]) for k in range(len(v))] + \
            [(("s", a), k) for a, v in enumerate(infos[0]["ints"]) for k in range(len(v))]
    for a in range(len(infos[0]["pints"])):
        rep[("p", a)] = []
    for a in range(len(infos[0]["ints"])):
        rep[("s", a)] = []
    for key, k in slots:
        col = [(inf["pints"] if key[0] == "p" else inf["ints"])[key[1]][k] for inf in infos]
        if all(c == col[0] for c in col):
            rep[key].append(str(col[0]))
            continue
        text = None
        for nm, v in zip(names, vals):
            if v == col:
                text = nm
                break
        if text is None:
            for nm, v in zip(names, vals):
                if all(b and c % b == 0 for b, c in zip(v, col)) and len({c // b for b, c in zip(v, col)}) == 1:
                    text = "%d * %s" % (col[0] // v[0], nm)
                    break
                if all(c and b % c == 0 for b, c in zip(v, col)) and len({b // c for b, c in zip(v, col)}) == 1:
                    text = "%s // %d" % (nm, v[0] // col[0])
                    break
        if text is None:
            nm, j = "n%d" % len(names), len(names)
            while nm in taken:
                j += 1
                nm = "n%d" % j
            taken = taken | {nm}
            names.append(nm)
            vals.append(col)
            text = nm
        rep[key].append(text)
    return rep, names, vals


def _canonical_order(pre, reg, stmts, preds, mine):
    """The region's statements in an order that does not depend on the order the exporter
    wrote the nodes in: a topological order taking, among the statements ready, the one with
    the smallest structural signature (a hash of its expression over the signatures of its
    inputs, in the manner of a Merkle tree; values from outside all sign alike), then the
    original position."""
    regset = set(reg)
    sig, where = {}, {}
    for i in reg:                                # reg is in original, topological, order
        s = stmts[i]
        m = {}
        for r in s.reads:
            if r in where:
                m[r] = where[r]
            elif r in mine:
                m[r] = "@" + r[len(pre) + 1:]
            else:
                m[r] = "ext"
        h = hashlib.sha1(("%d|%s" % (len(s.defs), _abstract(_subst(s.rhs, m))[0])).encode()).hexdigest()[:16]
        sig[i] = h
        for k, d in enumerate(s.defs):
            where[d] = "%s:%d" % (h, k)
    indeg = {i: len([p for p in preds[i] if p in regset]) for i in reg}
    succ = {i: [] for i in reg}
    for i in reg:
        for p in preds[i]:
            if p in regset:
                succ[p].append(i)
    ready = [(sig[i], i) for i in reg if indeg[i] == 0]
    heapq.heapify(ready)
    out = []
    while ready:
        _, i = heapq.heappop(ready)
        out.append(i)
        for j in succ[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(ready, (sig[j], j))
    return out


def _emit(decls, lines, stmts, preds, params, decl_of, groups, claimed, known, reserved):
    n = len(stmts)
    # block names
    taken = set(known) | set(reserved)
    blocks, stats, names = [], [], []
    for pat, members in groups:
        parts = pat.split(".")
        last = parts[-1]
        # the last part with a letter, its numbers left out ('features.#.#': features)
        named = [q for q in parts if re.sub(r"[#_]", "", q)]
        stem = re.sub(r"_?#", "", named[-1]) if named else "layer"
        stem = re.sub(r"[^A-Za-z0-9_]", "_", stem)
        if len(stem) < 3 and len(parts) > (1 if re.sub(r"[#_]", "", last) else 2):
            stem = re.sub(r"[^A-Za-z0-9_]", "_", parts[-2 if re.sub(r"[#_]", "", last) else -3]) + "_" + stem
        if not re.match(r"[A-Za-z_]", stem):
            stem = "block_" + stem
        name, k = stem, 2
        while name in taken:
            name = "%s_%d" % (stem, k)
            k += 1
        taken.add(name)
        names.append(name)
    # block bodies from the first instance; every instance is checked by expanding it back
    calls = {}                                   # (gid, prefix) -> call statement text
    moved = set()
    for gid, (pat, members) in enumerate(groups):
        # the layer's input first: the argument where the later instances take the result of
        # the one before (the residual stream; where the instances span stages, those after
        # another instance), else the first
        nargs = len(members[0][2]["args"])
        chained = [j for j in range(nargs)
                   if any(members[k][2]["args"][j] in members[k - 1][2]["outs"] for k in range(1, len(members)))]
        perm = chained[:1] + [j for j in range(nargs) if j not in chained[:1]]
        for _, _, info in members:
            info["args"] = [info["args"][j] for j in perm]
        pre0, reg0, info0 = members[0]
        # names inside the block: the first instance's, params by their relative names; the
        # layer's input is x
        arg_names = []
        inner_taken = set(info0["local"]) | {r[1:] for r in info0["rel"].values()}
        for k, a in enumerate(info0["args"]):
            nm = "x" if k == 0 and chained and "x" not in inner_taken else a
            if nm in inner_taken or nm in arg_names or "." in nm:
                nm = "arg%d" % k
                while nm in inner_taken or nm in arg_names:
                    nm += "_"
            arg_names.append(nm)
        rel_names = {r[1:] for r in info0["rel"].values()}
        if rel_names & (set(info0["local"]) | set(arg_names)):
            return decls, lines, [], []
        rep, int_names, int_vals = _int_args(members, inner_taken | set(arg_names))
        to_block = dict(zip(info0["args"], arg_names))
        to_block.update({p: r[1:] for p, r in info0["rel"].items()})
        pres = [m[0] for m in members]
        body = ["# %s: %s" % ("the layer at " + ", ".join(pres) if len(pres) <= 4 else
                              "the %d layers at %s ... %s" % (len(pres), pres[0], pres[-1]),
                              "%d statements" % len(info0["order"])),
                "block %s(%s) {" % (names[gid], ", ".join(arg_names + int_names))]
        for a, p in enumerate(info0["params"]):
            body.append("  param %s: %s" % (info0["rel"][p][1:], _fill(params[p], rep[("p", a)])))
        canon = {i: k for k, i in enumerate(info0["order"])}
        for i in sorted(info0["order"]):         # the exporter's order, as the straight-line code has it
            s = stmts[i]
            t = _subst(s.rhs, to_block)
            if len(INT.findall(t)) != len(rep[("s", canon[i])]):
                return decls, lines, [], []
            body.append("  %s = %s" % (", ".join(to_block.get(d, d) for d in s.defs), _fill(t, rep[("s", canon[i])])))
        body.append("  return " + ", ".join(to_block.get(o, o) for o in info0["outs"]))
        body.append("}")
        # check every instance: the body with its names is its statements, exactly
        inv0 = {}
        for p, r in info0["rel"].items():
            inv0[r[1:]] = p
        for m, (pre, reg, info) in enumerate(members):
            back = dict(zip(arg_names, info["args"]))
            for l0, lk in zip(info0["local"], info["local"]):
                back[to_block.get(l0, l0)] = lk
            for p, r in info["rel"].items():
                back[r[1:]] = p
            got = []
            for k, i in enumerate(info0["order"]):
                s = stmts[i]
                got.append("%s = %s" % (", ".join(back[to_block.get(d, d)] for d in s.defs),
                                        _fill(_subst(_subst(s.rhs, to_block), back), map(str, info["ints"][k]))))
            want = ["%s = %s" % (", ".join(stmts[i].defs), stmts[i].rhs) for i in info["order"]]
            got += [_fill(params[p], map(str, info["pints"][a])) for a, p in enumerate(info0["params"])]
            want += [params[p] for p in info["params"]]
            if got != want:
                return decls, lines, [], []
            outs = ", ".join(info["outs"])
            calls[(gid, pre)] = "  %s = %s(%s) as %s" % (outs, names[gid], ", ".join(
                info["args"] + [str(v[m]) for v in int_vals]), pre)
            moved.update(info["params"])
        blocks.append(body)
        stats.append((names[gid], [m[0] for m in members]))
    # top-level order: each instance one node, a stable topological order of the rest
    unit = {}
    for i in range(n):
        unit[i] = ("call",) + tuple(claimed[i]) if i in claimed else ("stmt", i)
    upreds, first = {}, {}
    for i in range(n):
        u = unit[i]
        first[u] = min(first.get(u, i), i)
        upreds.setdefault(u, set())
        for p in preds[i]:
            if unit[p] != u:
                upreds[u].add(unit[p])
    indeg = {u: len(ps) for u, ps in upreds.items()}
    usuccs = {}
    for u, ps in upreds.items():
        for p in ps:
            usuccs.setdefault(p, []).append(u)
    heap = [(first[u], u) for u, d in indeg.items() if d == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        _, u = heapq.heappop(heap)
        order.append(u)
        for v in usuccs.get(u, []):
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(heap, (first[v], v))
    if len(order) != len(upreds):
        return decls, lines, [], []              # a cycle between instances: leave it all
    body = []
    for u in order:
        if u[0] == "stmt":
            s = stmts[u[1]]
            if s.comment:
                body.append(s.comment)
            body.append("  %s%s = %s" % ("output " if s.out_kw else "", ", ".join(s.defs), s.rhs))
        else:
            body.append(calls[(u[1], u[2])])
    new_decls = [d for i, d in enumerate(decls)
                 if not (DECL.match(d) and DECL.match(d).group(1) in moved)]
    return new_decls, body, blocks, stats
