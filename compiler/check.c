/*
 * check.c — name resolution, type and shape checking, and lowering of the AST to the graph IR.
 *
 * This is where the compiler first sees user input, so every rank, size relation and
 * attribute is checked here before anything uses it as an index (field cases B19, B21). Each
 * error points at the expression the user wrote and prints the shapes involved. The lowering
 * is direct: one Node per operation, with `linear` expanded to matmul (trans_b) + add, and
 * `transpose` to permute. Symbolic sizes are Dims (c or c*batch); a tensor has at most one
 * batch-dependent dimension.
 */
#include "modelc.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ELEMS (1LL << 40) /* largest element count we accept for any tensor (at batch 1) */

/* ---------------------------------------------------------------- symbol table */

typedef enum SymKind { SYM_INPUT, SYM_PARAM, SYM_VALUE, SYM_OUTPUT_DECL } SymKind;

typedef struct Sym {
    char *name;
    SymKind kind;
    Node *node;      /* NULL for an output declared but not yet assigned */
    Loc loc;         /* where it was defined (or declared) */
    AstType *decl;   /* declared type of an output, if any */
    int out_index;   /* outputs: position in declaration order */
    bool used;
} Sym;

typedef struct Checker {
    Graph *g;
    Sym *syms;
    int nsyms, capsyms;
    Loc batch_loc;   /* where the batch name was first used */
} Checker;

static Sym *lookup(Checker *c, const char *name) {
    for (int i = 0; i < c->nsyms; i++)
        if (!strcmp(c->syms[i].name, name)) return &c->syms[i];
    return NULL;
}

static Sym *define(Checker *c, const char *name, Loc loc, SymKind kind) {
    Sym *old = lookup(c, name);
    if (old) {
        error_begin(loc, "redefinition of '%s'", name);
        note_at(old->loc, "previous definition of '%s' is here", name);
        diag_exit();
    }
    if (c->nsyms == c->capsyms) {
        int cap = c->capsyms ? 2 * c->capsyms : 16;
        c->syms = xrealloc_array(c->syms, c->capsyms, cap, sizeof(Sym));
        c->capsyms = cap;
    }
    Sym *s = &c->syms[c->nsyms++];
    memset(s, 0, sizeof *s);
    s->name = xstrdup(name);
    s->kind = kind;
    s->loc = loc;
    s->out_index = -1;
    return s;
}

static const char *shp(const Checker *c, const Shape *s) {
    char buf[256];
    return xstrdup(shape_str(s, c->g->batch_name, buf, sizeof buf));
}

static const char *dms(const Checker *c, Dim d) {
    char buf[64];
    return xstrdup(dim_str(d, c->g->batch_name, buf, sizeof buf));
}

/* ---------------------------------------------------------------- types */

static void use_batch_name(Checker *c, const char *name, Loc loc) {
    Graph *g = c->g;
    if (!g->batch_name) {
        g->batch_name = xstrdup(name);
        g->has_batch = true;
        c->batch_loc = loc;
        return;
    }
    if (strcmp(g->batch_name, name)) {
        error_begin(loc, "second symbolic dimension '%s': a model has one symbolic (batch) "
                         "dimension, already named '%s'", name, g->batch_name);
        note_at(c->batch_loc, "'%s' first used here", g->batch_name);
        diag_exit();
    }
}

/* Convert a declared type; `what` is "input 'x'" etc. for messages. */
static Shape convert_type(Checker *c, const AstType *t, const char *what, bool allow_sym) {
    Shape s = {0};
    if (t->rank > MAX_RANK)
        error_at(t->loc, "%s has rank %d, more than the maximum %d", what, t->rank, MAX_RANK);
    s.rank = t->rank;
    int nsym = 0;
    for (int i = 0; i < t->rank; i++) {
        const AstDim *d = &t->dims[i];
        if (d->is_sym) {
            if (!allow_sym)
                error_at(d->loc, "%s cannot use the symbolic dimension '%s': parameters have fixed shapes",
                         what, d->name);
            use_batch_name(c, d->name, d->loc);
            if (++nsym > 1)
                error_at(d->loc, "%s uses the batch dimension '%s' twice; a tensor may have one "
                                 "batch-dependent dimension", what, d->name);
            s.d[i] = (Dim){1, true};
        } else {
            if (d->value <= 0)
                error_at(d->loc, "dimension %d of %s is %lld; dimensions must be positive", i, what,
                         d->value);
            if (d->value > MAX_ELEMS)
                error_at(d->loc, "dimension %d of %s is %lld, more than the maximum 2^40", i, what,
                         d->value);
            s.d[i] = (Dim){d->value, false};
        }
    }
    int64_t n = 1;
    for (int i = 0; i < s.rank; i++)
        if (__builtin_mul_overflow(n, s.d[i].c, &n) || n > MAX_ELEMS)
            error_at(t->loc, "%s has too many elements (%s; more than 2^40 per batch item)", what,
                     shp(c, &s));
    return s;
}

static bool shape_eq(const Shape *a, const Shape *b) {
    if (a->rank != b->rank) return false;
    for (int i = 0; i < a->rank; i++)
        if (!dim_eq(a->d[i], b->d[i])) return false;
    return true;
}

/* ---------------------------------------------------------------- op table */

typedef enum AttrKind { A_INT, A_BOOL, A_ENUM, A_INTLIST, A_SHAPE } AttrKind;

typedef struct AttrSpec {
    const char *name;
    AttrKind kind;
    const char *enums; /* A_ENUM: "none|tanh" */
} AttrSpec;

typedef struct OpSpec {
    const char *name;
    int min_t, max_t;  /* tensor arguments */
    AttrSpec attrs[3];
    int nattrs;
} OpSpec;

enum {
    S_ADD, S_SUB, S_MUL, S_DIV, S_NEG, S_EXP, S_LOG, S_SQRT, S_RELU, S_SIGMOID, S_TANH, S_GELU,
    S_MATMUL, S_LINEAR, S_SOFTMAX, S_LOG_SOFTMAX, S_SUM, S_MEAN, S_MAX, S_ARGMAX, S_RESHAPE,
    S_TRANSPOSE, S_PERMUTE, S__COUNT
};

#define AXIS_ATTRS {{"axis", A_INT, 0}, {"keepdim", A_BOOL, 0}}, 2
static const OpSpec op_specs[S__COUNT] = {
    [S_ADD] = {"add", 2, 2, {{0}}, 0},          [S_SUB] = {"sub", 2, 2, {{0}}, 0},
    [S_MUL] = {"mul", 2, 2, {{0}}, 0},          [S_DIV] = {"div", 2, 2, {{0}}, 0},
    [S_NEG] = {"neg", 1, 1, {{0}}, 0},          [S_EXP] = {"exp", 1, 1, {{0}}, 0},
    [S_LOG] = {"log", 1, 1, {{0}}, 0},          [S_SQRT] = {"sqrt", 1, 1, {{0}}, 0},
    [S_RELU] = {"relu", 1, 1, {{0}}, 0},        [S_SIGMOID] = {"sigmoid", 1, 1, {{0}}, 0},
    [S_TANH] = {"tanh", 1, 1, {{0}}, 0},
    [S_GELU] = {"gelu", 1, 1, {{"approximate", A_ENUM, "none|tanh"}}, 1},
    [S_MATMUL] = {"matmul", 2, 2, {{0}}, 0},    [S_LINEAR] = {"linear", 2, 3, {{0}}, 0},
    [S_SOFTMAX] = {"softmax", 1, 1, {{"axis", A_INT, 0}}, 1},
    [S_LOG_SOFTMAX] = {"log_softmax", 1, 1, {{"axis", A_INT, 0}}, 1},
    [S_SUM] = {"sum", 1, 1, AXIS_ATTRS},        [S_MEAN] = {"mean", 1, 1, AXIS_ATTRS},
    [S_MAX] = {"max", 1, 1, AXIS_ATTRS},        [S_ARGMAX] = {"argmax", 1, 1, AXIS_ATTRS},
    [S_RESHAPE] = {"reshape", 1, 1, {{"shape", A_SHAPE, 0}}, 1},
    [S_TRANSPOSE] = {"transpose", 1, 1, {{"dim0", A_INT, 0}, {"dim1", A_INT, 0}}, 2},
    [S_PERMUTE] = {"permute", 1, 1, {{"dims", A_INTLIST, 0}}, 1},
};

/* A call with its arguments sorted into tensors and attributes. */
typedef struct Call {
    const Ast *ast;
    const OpSpec *spec;
    Node *t[3];
    int nt;
    const Ast *attr[3]; /* by spec position; NULL if not given */
    Loc attr_loc[3];
} Call;

static Node *lower_expr(Checker *c, const Ast *e);

static bool is_attr_literal(const Ast *e) { return e->kind == AST_LIST || e->kind == AST_BOOL; }

static void sort_args(Checker *c, const Ast *e, const OpSpec *spec, Call *call) {
    memset(call, 0, sizeof *call);
    call->ast = e;
    call->spec = spec;
    int npos = 0;
    for (int i = 0; i < e->nargs; i++) {
        const AstArg *a = &e->args[i];
        if (a->key) {
            int k = -1;
            for (int j = 0; j < spec->nattrs; j++)
                if (!strcmp(spec->attrs[j].name, a->key)) k = j;
            if (k < 0) {
                char list[128] = "";
                for (int j = 0; j < spec->nattrs; j++)
                    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", j ? ", " : "",
                             spec->attrs[j].name);
                if (spec->nattrs)
                    error_at(a->loc, "unknown attribute '%s' for '%s' (it takes: %s)", a->key, spec->name, list);
                error_at(a->loc, "unknown attribute '%s': '%s' takes no attributes", a->key, spec->name);
            }
            if (call->attr[k])
                error_at(a->loc, "attribute '%s' of '%s' is given twice", a->key, spec->name);
            call->attr[k] = a->val;
            call->attr_loc[k] = a->loc;
            continue;
        }
        if (npos < spec->max_t) {
            if (is_attr_literal(a->val))
                error_at(a->loc, "argument %d of '%s' must be a tensor", npos + 1, spec->name);
            call->t[npos++] = lower_expr(c, a->val);
            call->nt = npos;
            continue;
        }
        int k = npos - spec->max_t;
        if (k >= spec->nattrs || call->nt < spec->min_t)
            error_at(a->loc, "too many arguments to '%s': it takes %s%d tensor%s%s", spec->name,
                     spec->min_t == spec->max_t ? "" : "up to ", spec->max_t, spec->max_t == 1 ? "" : "s",
                     spec->nattrs ? " and attributes" : "");
        if (call->attr[k])
            error_at(a->loc, "attribute '%s' of '%s' is given twice", spec->attrs[k].name, spec->name);
        call->attr[k] = a->val;
        call->attr_loc[k] = a->loc;
        npos++;
    }
    if (call->nt < spec->min_t) {
        if (spec->min_t == spec->max_t)
            error_at(e->loc, "'%s' takes %d tensor argument%s, got %d", spec->name, spec->min_t,
                     spec->min_t == 1 ? "" : "s", call->nt);
        error_at(e->loc, "'%s' takes %d to %d tensor arguments, got %d", spec->name, spec->min_t,
                 spec->max_t, call->nt);
    }
}

/* Integer literal value of an attribute, with sign. */
static bool int_literal(const Ast *v, long long *out) {
    if (v->kind == AST_NUM && v->is_int) {
        *out = (long long)v->num;
        return fabs(v->num) < 9e15;
    }
    if (v->kind == AST_NEG && v->lhs->kind == AST_NUM && v->lhs->is_int) {
        *out = -(long long)v->lhs->num;
        return fabs(v->lhs->num) < 9e15;
    }
    return false;
}

static const char *ast_text(const Ast *v) {
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    print_expr(f, v);
    fclose(f);
    char *s = xstrdup(buf);
    free(buf);
    return s;
}

static long long attr_int(const Call *call, int k, long long def) {
    const Ast *v = call->attr[k];
    if (!v) return def;
    long long x;
    if (!int_literal(v, &x))
        error_at(v->loc, "attribute '%s' of '%s' must be an integer, got '%s'", call->spec->attrs[k].name,
                 call->spec->name, ast_text(v));
    return x;
}

static bool attr_bool(const Call *call, int k, bool def) {
    const Ast *v = call->attr[k];
    if (!v) return def;
    if (v->kind != AST_BOOL)
        error_at(v->loc, "attribute '%s' of '%s' must be true or false, got '%s'", call->spec->attrs[k].name,
                 call->spec->name, ast_text(v));
    return v->bval;
}

/* Returns the index of the chosen alternative in spec->enums, or def. */
static int attr_enum(const Call *call, int k, int def) {
    const Ast *v = call->attr[k];
    if (!v) return def;
    const AttrSpec *as = &call->spec->attrs[k];
    if (v->kind == AST_NAME) {
        const char *p = as->enums;
        for (int i = 0; *p; i++) {
            const char *bar = strchr(p, '|');
            size_t len = bar ? (size_t)(bar - p) : strlen(p);
            if (strlen(v->name) == len && !strncmp(p, v->name, len)) return i;
            p += len + (bar ? 1 : 0);
        }
    }
    char alts[64];
    snprintf(alts, sizeof alts, "%s", as->enums);
    for (char *q = alts; *q; q++)
        if (*q == '|') *q = '/';
    error_at(v->loc, "attribute '%s' of '%s' must be one of %s, got '%s'", as->name, call->spec->name, alts,
             ast_text(v));
}

static int norm_axis(const Call *call, const Ast *where, Loc loc, long long axis, int rank, const char *what) {
    if (rank == 0)
        error_at(loc, "'%s' needs a tensor of rank >= 1, got a scalar", call->spec->name);
    if (axis < -rank || axis >= rank)
        error_at(where ? where->loc : loc, "%s %lld is out of range for '%s' on a tensor of rank %d "
                 "(expected %d..%d)", what, axis, call->spec->name, rank, -rank, rank - 1);
    return (int)(axis < 0 ? axis + rank : axis);
}

/* ---------------------------------------------------------------- shape rules */

static void require_f32(const Call *call, Node *n, int argi) {
    if (n->dtype != DT_F32) {
        const Ast *a = call->ast->kind == AST_CALL ? call->ast->args[argi].val : call->ast;
        error_at(a->loc, "'%s' expects an f32 tensor, got %s%s%s%s", call->spec->name, dtype_name(n->dtype),
                 n->name ? " tensor '" : "", n->name ? n->name : "", n->name ? "'" : "");
    }
}

/* NumPy broadcasting of a and b; errors point at loc and name the op. */
static Shape broadcast(Checker *c, Loc loc, const char *opname, const Shape *a, const Shape *b) {
    Shape r = {0};
    r.rank = a->rank > b->rank ? a->rank : b->rank;
    for (int i = 0; i < r.rank; i++) {
        int ia = a->rank - r.rank + i, ib = b->rank - r.rank + i;
        Dim da = ia >= 0 ? a->d[ia] : (Dim){1, false};
        Dim db = ib >= 0 ? b->d[ib] : (Dim){1, false};
        if (dim_eq(da, db)) r.d[i] = da;
        else if (!da.sym && da.c == 1) r.d[i] = db;
        else if (!db.sym && db.c == 1) r.d[i] = da;
        else
            error_at(loc, "cannot broadcast shapes %s and %s in '%s' (dimension %d: %s vs %s)", shp(c, a),
                     shp(c, b), opname, i, dms(c, da), dms(c, db));
    }
    if (shape_nsym(&r) > 1)
        error_at(loc, "broadcasting %s and %s in '%s' gives two batch-dependent dimensions", shp(c, a),
                 shp(c, b), opname);
    return r;
}

static Node *mk_unary(Checker *c, OpKind op, Loc loc, Node *x) {
    Node *n = new_node(c->g, op, loc);
    n->in[0] = x;
    n->nin = 1;
    n->shape = x->shape;
    return n;
}

static Node *mk_binary(Checker *c, OpKind op, Loc loc, Node *a, Node *b) {
    Node *n = new_node(c->g, op, loc);
    n->in[0] = a;
    n->in[1] = b;
    n->nin = 2;
    n->shape = broadcast(c, loc, op_name(op), &a->shape, &b->shape);
    return n;
}

static Node *mk_reshape(Checker *c, Loc loc, Node *x, Shape s) {
    Node *n = new_node(c->g, OP_RESHAPE, loc);
    n->in[0] = x;
    n->nin = 1;
    n->shape = s;
    n->dtype = x->dtype;
    return n;
}

/* a[..., M, K] @ b[..., K, N]; with trans_b, b is stored [..., N, K]. */
static Node *mk_matmul(Checker *c, Loc loc, const char *opname, Node *a, Node *b, bool trans_b) {
    const Shape *sa = &a->shape, *sb = &b->shape;
    if (sa->rank < 2 || sb->rank < 2)
        error_at(loc, "'%s' needs operands of rank >= 2, got %s and %s", opname, shp(c, sa), shp(c, sb));
    Dim M = sa->d[sa->rank - 2], K = sa->d[sa->rank - 1];
    Dim Kb = trans_b ? sb->d[sb->rank - 1] : sb->d[sb->rank - 2];
    Dim N = trans_b ? sb->d[sb->rank - 2] : sb->d[sb->rank - 1];
    if (!dim_eq(K, Kb))
        error_at(loc, "'%s' inner dimensions differ: %s @ %s%s (%s vs %s)", opname, shp(c, sa), shp(c, sb),
                 trans_b ? "^T" : "", dms(c, K), dms(c, Kb));
    Shape ba = *sa, bb = *sb;
    ba.rank -= 2;
    bb.rank -= 2;
    Shape r = broadcast(c, loc, opname, &ba, &bb);
    r.d[r.rank++] = M;
    r.d[r.rank++] = N;
    if (shape_nsym(&r) > 1)
        error_at(loc, "'%s' of %s and %s gives two batch-dependent dimensions", opname, shp(c, sa), shp(c, sb));
    Node *n = new_node(c->g, OP_MATMUL, loc);
    n->in[0] = a;
    n->in[1] = b;
    n->nin = 2;
    n->trans_b = trans_b;
    n->shape = r;
    return n;
}

static Node *lower_linear(Checker *c, const Call *call) {
    Loc loc = call->ast->loc;
    Node *x = call->t[0], *w = call->t[1], *b = call->nt > 2 ? call->t[2] : NULL;
    if (w->shape.rank != 2)
        error_at(call->ast->args[1].val->loc, "'linear' weight must be rank 2 [out_features, in_features], got %s",
                 shp(c, &w->shape));
    if (w->shape.d[0].sym || w->shape.d[1].sym)
        error_at(call->ast->args[1].val->loc, "'linear' weight %s must not depend on the batch", shp(c, &w->shape));
    Dim out = w->shape.d[0], in = w->shape.d[1];
    if (x->shape.rank < 1)
        error_at(call->ast->args[0].val->loc, "'linear' input must have rank >= 1, got a scalar");
    Dim xin = x->shape.d[x->shape.rank - 1];
    if (!dim_eq(xin, in))
        error_at(loc, "'linear' input features %s differ from the weight's in_features %s (input %s, weight %s)",
                 dms(c, xin), dms(c, in), shp(c, &x->shape), shp(c, &w->shape));
    if (b && (b->shape.rank != 1 || !dim_eq(b->shape.d[0], out)))
        error_at(call->ast->args[2].val->loc, "'linear' bias must be [%s] to match the weight %s, got %s",
                 dms(c, out), shp(c, &w->shape), shp(c, &b->shape));
    Node *xx = x;
    if (x->shape.rank == 1) {
        Shape s2 = {2, {{1, false}, x->shape.d[0]}};
        xx = mk_reshape(c, loc, x, s2);
    }
    Node *y = mk_matmul(c, loc, "linear", xx, w, true);
    if (b) y = mk_binary(c, OP_ADD, loc, y, b);
    if (x->shape.rank == 1) {
        Shape s1 = {1, {out}};
        y = mk_reshape(c, loc, y, s1);
    }
    return y;
}

static Node *lower_reduce(Checker *c, const Call *call, OpKind op, bool has_keepdim) {
    Node *x = call->t[0];
    require_f32(call, x, 0);
    long long ax = attr_int(call, 0, -1);
    int axis = norm_axis(call, call->attr[0], call->ast->loc, ax, x->shape.rank, "axis");
    Node *n = new_node(c->g, op, call->ast->loc);
    n->in[0] = x;
    n->nin = 1;
    n->axis = axis;
    if (!has_keepdim) {
        n->shape = x->shape;
        return n;
    }
    n->keepdim = attr_bool(call, 1, false);
    n->shape = x->shape;
    if (n->keepdim) {
        n->shape.d[axis] = (Dim){1, false};
    } else {
        for (int i = axis; i + 1 < x->shape.rank; i++) n->shape.d[i] = x->shape.d[i + 1];
        n->shape.rank--;
    }
    if (op == OP_ARGMAX) n->dtype = DT_I64;
    return n;
}

static Node *lower_reshape(Checker *c, const Call *call) {
    Node *x = call->t[0];
    const Ast *v = call->attr[0];
    if (!v) error_at(call->ast->loc, "'reshape' needs a target shape, e.g. reshape(x, [%s, 8, 8])",
                     c->g->batch_name ? c->g->batch_name : "2");
    if (v->kind != AST_LIST)
        error_at(v->loc, "'reshape' shape must be a list such as [2, -1], got '%s'", ast_text(v));
    if (v->nitems > MAX_RANK)
        error_at(v->loc, "'reshape' target has rank %d, more than the maximum %d", v->nitems, MAX_RANK);
    Shape s = {v->nitems, {{0}}};
    int infer = -1;
    Dim known = {1, false};
    for (int i = 0; i < v->nitems; i++) {
        const Ast *it = v->items[i];
        long long val;
        if (it->kind == AST_NAME) {
            if (!c->g->batch_name || strcmp(it->name, c->g->batch_name))
                error_at(it->loc, "unknown dimension name '%s' in 'reshape'%s%s%s", it->name,
                         c->g->batch_name ? " (the batch dimension is '" : "",
                         c->g->batch_name ? c->g->batch_name : "", c->g->batch_name ? "')" : "");
            s.d[i] = (Dim){1, true};
        } else if (int_literal(it, &val)) {
            if (val == -1) {
                if (infer >= 0) error_at(it->loc, "'reshape' allows only one -1 dimension");
                infer = i;
                continue;
            }
            if (val <= 0 || val > MAX_ELEMS)
                error_at(it->loc, "'reshape' dimension %d is %lld; dimensions must be positive (or -1)", i, val);
            s.d[i] = (Dim){val, false};
        } else {
            error_at(it->loc, "'reshape' dimensions must be integers, -1 or '%s'",
                     c->g->batch_name ? c->g->batch_name : "the batch name");
        }
        bool ok;
        known = dim_mul(known, s.d[i], &ok);
        if (!ok) error_at(it->loc, "'reshape' target has two batch-dependent dimensions or too many elements");
    }
    Dim numel = shape_numel(&x->shape);
    if (infer >= 0) {
        bool bad = (known.sym && !numel.sym) || numel.c % known.c != 0;
        if (bad)
            error_at(v->loc, "cannot reshape %s (%s elements) to %s: %s is not a multiple of %s", shp(c, &x->shape),
                     dms(c, numel), ast_text(v), dms(c, numel), dms(c, known));
        s.d[infer] = (Dim){numel.c / known.c, numel.sym && !known.sym};
    } else if (!dim_eq(known, numel)) {
        error_at(v->loc, "cannot reshape %s (%s elements) to %s (%s elements)", shp(c, &x->shape), dms(c, numel),
                 shp(c, &s), dms(c, known));
    }
    return mk_reshape(c, call->ast->loc, x, s);
}

static Node *mk_permute(Checker *c, Loc loc, Node *x, const int *perm) {
    Node *n = new_node(c->g, OP_PERMUTE, loc);
    n->in[0] = x;
    n->nin = 1;
    n->dtype = x->dtype;
    n->shape.rank = x->shape.rank;
    for (int i = 0; i < x->shape.rank; i++) {
        n->perm[i] = perm[i];
        n->shape.d[i] = x->shape.d[perm[i]];
    }
    return n;
}

static Node *lower_transpose(Checker *c, const Call *call) {
    Node *x = call->t[0];
    int r = x->shape.rank;
    if (r < 2)
        error_at(call->ast->loc, "'transpose' needs a tensor of rank >= 2, got %s", shp(c, &x->shape));
    int d0 = norm_axis(call, call->attr[0], call->ast->loc, attr_int(call, 0, -2), r, "dim0");
    int d1 = norm_axis(call, call->attr[1], call->ast->loc, attr_int(call, 1, -1), r, "dim1");
    int perm[MAX_RANK];
    for (int i = 0; i < r; i++) perm[i] = i;
    perm[d0] = d1;
    perm[d1] = d0;
    return mk_permute(c, call->ast->loc, x, perm);
}

static Node *lower_permute(Checker *c, const Call *call) {
    Node *x = call->t[0];
    int r = x->shape.rank;
    const Ast *v = call->attr[0];
    if (!v) error_at(call->ast->loc, "'permute' needs dims=[...], a permutation of 0..%d", r - 1);
    if (v->kind != AST_LIST) error_at(v->loc, "'permute' dims must be a list such as [1, 0], got '%s'", ast_text(v));
    if (v->nitems != r)
        error_at(v->loc, "'permute' dims %s has %d entr%s for a tensor of rank %d %s", ast_text(v), v->nitems,
                 v->nitems == 1 ? "y" : "ies", r,
                 shp(c, &x->shape));
    int perm[MAX_RANK];
    bool seen[MAX_RANK] = {0};
    for (int i = 0; i < r; i++) {
        long long d;
        if (!int_literal(v->items[i], &d)) error_at(v->items[i]->loc, "'permute' dims must be integers");
        if (d < -r || d >= r)
            error_at(v->items[i]->loc, "'permute' dim %lld is out of range for rank %d (expected %d..%d)", d, r, -r,
                     r - 1);
        if (d < 0) d += r;
        if (seen[d]) error_at(v->loc, "'permute' dims %s is not a permutation of 0..%d", ast_text(v), r - 1);
        seen[d] = true;
        perm[i] = (int)d;
    }
    return mk_permute(c, call->ast->loc, x, perm);
}

static Node *lower_call(Checker *c, const Ast *e) {
    int si = -1;
    for (int i = 0; i < S__COUNT; i++)
        if (!strcmp(op_specs[i].name, e->name)) si = i;
    if (si < 0) {
        Sym *s = lookup(c, e->name);
        if (s) error_at(e->loc, "'%s' is a tensor, not an operation", e->name);
        error_at(e->loc, "unknown operation '%s'", e->name);
    }
    Call call;
    sort_args(c, e, &op_specs[si], &call);
    Loc loc = e->loc;
    static const OpKind unary[] = {[S_NEG] = OP_NEG, [S_EXP] = OP_EXP, [S_LOG] = OP_LOG, [S_SQRT] = OP_SQRT,
                                   [S_RELU] = OP_RELU, [S_SIGMOID] = OP_SIGMOID, [S_TANH] = OP_TANH};
    static const OpKind binary[] = {[S_ADD] = OP_ADD, [S_SUB] = OP_SUB, [S_MUL] = OP_MUL, [S_DIV] = OP_DIV};
    switch (si) {
    case S_ADD: case S_SUB: case S_MUL: case S_DIV:
        require_f32(&call, call.t[0], 0);
        require_f32(&call, call.t[1], 1);
        return mk_binary(c, binary[si], loc, call.t[0], call.t[1]);
    case S_NEG: case S_EXP: case S_LOG: case S_SQRT: case S_RELU: case S_SIGMOID: case S_TANH:
        require_f32(&call, call.t[0], 0);
        return mk_unary(c, unary[si], loc, call.t[0]);
    case S_GELU:
        require_f32(&call, call.t[0], 0);
        return mk_unary(c, attr_enum(&call, 0, 0) ? OP_GELU_TANH : OP_GELU, loc, call.t[0]);
    case S_MATMUL:
        require_f32(&call, call.t[0], 0);
        require_f32(&call, call.t[1], 1);
        return mk_matmul(c, loc, "matmul", call.t[0], call.t[1], false);
    case S_LINEAR:
        for (int i = 0; i < call.nt; i++) require_f32(&call, call.t[i], i);
        return lower_linear(c, &call);
    case S_SOFTMAX: return lower_reduce(c, &call, OP_SOFTMAX, false);
    case S_LOG_SOFTMAX: return lower_reduce(c, &call, OP_LOG_SOFTMAX, false);
    case S_SUM: return lower_reduce(c, &call, OP_SUM, true);
    case S_MEAN: return lower_reduce(c, &call, OP_MEAN, true);
    case S_MAX: return lower_reduce(c, &call, OP_MAX, true);
    case S_ARGMAX: return lower_reduce(c, &call, OP_ARGMAX, true);
    case S_RESHAPE: return lower_reshape(c, &call);
    case S_TRANSPOSE: return lower_transpose(c, &call);
    case S_PERMUTE: return lower_permute(c, &call);
    }
    ICE("unhandled op spec %d", si);
}

static Node *mk_const(Checker *c, Loc loc, double v) {
    Node *n = new_node(c->g, OP_CONST, loc);
    n->value = (double)(float)v;
    n->shape.rank = 0;
    return n;
}

static Node *lower_expr(Checker *c, const Ast *e) {
    switch (e->kind) {
    case AST_NUM:
        return mk_const(c, e->loc, e->num);
    case AST_NAME: {
        Sym *s = lookup(c, e->name);
        if (!s) {
            if (c->g->batch_name && !strcmp(c->g->batch_name, e->name))
                error_at(e->loc, "'%s' is the batch dimension, not a tensor", e->name);
            error_at(e->loc, "unknown name '%s'", e->name);
        }
        if (!s->node) {
            error_begin(e->loc, "output '%s' is used before it is assigned", e->name);
            note_at(s->loc, "'%s' is declared here", e->name);
            diag_exit();
        }
        s->used = true;
        return s->node;
    }
    case AST_NEG:
        if (e->lhs->kind == AST_NUM) return mk_const(c, e->loc, -e->lhs->num);
        {
            Node *x = lower_expr(c, e->lhs);
            if (x->dtype != DT_F32) error_at(e->loc, "unary '-' expects an f32 tensor, got %s", dtype_name(x->dtype));
            return mk_unary(c, OP_NEG, e->loc, x);
        }
    case AST_BINOP: {
        Node *a = lower_expr(c, e->lhs), *b = lower_expr(c, e->rhs);
        const char *name = e->op == '+' ? "add" : e->op == '-' ? "sub" : e->op == '*' ? "mul"
                         : e->op == '/' ? "div" : "matmul";
        if (a->dtype != DT_F32 || b->dtype != DT_F32)
            error_at(e->loc, "'%c' (%s) expects f32 tensors, got %s and %s", e->op, name, dtype_name(a->dtype),
                     dtype_name(b->dtype));
        switch (e->op) {
        case '+': return mk_binary(c, OP_ADD, e->loc, a, b);
        case '-': return mk_binary(c, OP_SUB, e->loc, a, b);
        case '*': return mk_binary(c, OP_MUL, e->loc, a, b);
        case '/': return mk_binary(c, OP_DIV, e->loc, a, b);
        case '@': return mk_matmul(c, e->loc, "matmul", a, b, false);
        }
        ICE("unknown binary operator '%c'", e->op);
    }
    case AST_CALL:
        return lower_call(c, e);
    case AST_LIST:
        error_at(e->loc, "a list is not a tensor; lists are attribute values such as shape=[2, 3]");
    case AST_BOOL:
        error_at(e->loc, "'%s' is not a tensor; booleans are attribute values", e->bval ? "true" : "false");
    }
    ICE("unknown AST kind %d", e->kind);
}

/* ---------------------------------------------------------------- statements */

static void assign_output(Checker *c, Sym *s, Node *v, Loc loc) {
    Graph *g = c->g;
    if (s->decl) {
        Shape want = convert_type(c, s->decl, xprintf("output '%s'", s->name), true);
        if (s->decl->dtype != v->dtype || !shape_eq(&want, &v->shape)) {
            error_begin(loc, "output '%s' is declared %s%s but assigned %s%s", s->name, dtype_name(s->decl->dtype),
                        shp(c, &want), dtype_name(v->dtype), shp(c, &v->shape));
            note_at(s->decl->loc, "declared here");
            diag_exit();
        }
    }
    s->node = v;
    GraphOutput *o = &g->outputs[s->out_index];
    o->node = v;
    o->loc = loc;
    if (!v->name) v->name = s->name;
}

Graph *build_graph(const Program *p, int max_batch) {
    Graph *g = xalloc(sizeof(Graph));
    g->name = p->name;
    g->max_batch = max_batch;
    Checker ck = {.g = g}, *c = &ck;
    int nin = 0, npar = 0, nout = 0;
    for (int i = 0; i < p->nstmts; i++) {
        nin += p->stmts[i]->kind == ST_INPUT;
        npar += p->stmts[i]->kind == ST_PARAM;
        nout += p->stmts[i]->kind == ST_OUTPUT;
    }
    g->inputs = xalloc(sizeof(Node *) * (nin + 1));
    g->params = xalloc(sizeof(Node *) * (npar + 1));
    g->outputs = xalloc(sizeof(GraphOutput) * (nout + 1));

    for (int i = 0; i < p->nstmts; i++) {
        const Stmt *st = p->stmts[i];
        switch (st->kind) {
        case ST_INPUT:
        case ST_PARAM: {
            bool in = st->kind == ST_INPUT;
            Sym *s = define(c, st->name, st->name_loc, in ? SYM_INPUT : SYM_PARAM);
            Node *n = new_node(g, in ? OP_INPUT : OP_PARAM, st->name_loc);
            n->name = s->name;
            n->dtype = st->type->dtype;
            n->shape = convert_type(c, st->type, xprintf("%s '%s'", in ? "input" : "param", st->name), in);
            if (in) {
                n->index = g->ninputs;
                g->inputs[g->ninputs++] = n;
            } else {
                n->index = g->nparams;
                g->params[g->nparams++] = n;
            }
            s->node = n;
            break;
        }
        case ST_OUTPUT: {
            Sym *s = define(c, st->name, st->name_loc, SYM_OUTPUT_DECL);
            s->decl = st->type;
            s->out_index = g->noutputs;
            g->outputs[g->noutputs].name = s->name;
            g->outputs[g->noutputs].loc = st->name_loc;
            g->noutputs++;
            if (st->type) (void)convert_type(c, st->type, xprintf("output '%s'", st->name), true);
            if (st->expr) assign_output(c, s, lower_expr(c, st->expr), st->name_loc);
            break;
        }
        case ST_ASSIGN: {
            Sym *s = lookup(c, st->name);
            if (s && s->kind == SYM_OUTPUT_DECL && !s->node) {
                assign_output(c, s, lower_expr(c, st->expr), st->name_loc);
                break;
            }
            if (s && s->kind == SYM_OUTPUT_DECL) {
                error_begin(st->name_loc, "output '%s' is assigned twice", st->name);
                note_at(c->g->outputs[s->out_index].loc, "first assigned here");
                diag_exit();
            }
            Node *v = lower_expr(c, st->expr);
            s = define(c, st->name, st->name_loc, SYM_VALUE);
            s->node = v;
            if (!v->name) v->name = s->name;
            break;
        }
        }
    }
    if (g->noutputs == 0) error_at(p->loc, "model '%s' has no outputs; declare one with 'output NAME = ...'", p->name);
    for (int i = 0; i < c->nsyms; i++)
        if (c->syms[i].kind == SYM_OUTPUT_DECL && !c->syms[i].node)
            error_at(c->syms[i].loc, "output '%s' is declared but never assigned", c->syms[i].name);

    analyze_uses(g);
    for (int i = 0; i < c->nsyms; i++) {
        Sym *s = &c->syms[i];
        if ((s->kind == SYM_INPUT || s->kind == SYM_PARAM) && s->node->nuses == 0)
            warning_at(s->loc, "%s '%s' is never used by any output", s->kind == SYM_INPUT ? "input" : "param",
                       s->name);
        else if (s->kind == SYM_VALUE && !s->used)
            warning_at(s->loc, "value '%s' is computed but never used", s->name);
    }
    return g;
}
