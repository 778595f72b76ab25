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
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ELEMS (1LL << 40) /* largest element count we accept for any tensor (at batch 1) */

/* ---------------------------------------------------------------- symbol table */

/* SYM_INT: an integer (or boolean) block argument, or a name bound to a constant size
 * (C = size(x, 1)); SYM_SIZE: a name bound to a symbolic size (T = size(x, 1) of [batch, seq]). */
/* SYM_TARGET: a target in an inference build (it has no value: only the loss reads it). */
typedef enum SymKind { SYM_INPUT, SYM_PARAM, SYM_VALUE, SYM_OUTPUT_DECL, SYM_INT, SYM_SIZE, SYM_TARGET } SymKind;

typedef struct Sym {
    char *name;
    SymKind kind;
    Node *node;      /* NULL for an output declared but not yet assigned */
    Loc loc;         /* where it was defined (or declared) */
    AstType *decl;   /* declared type of an output, if any */
    int out_index;   /* outputs: position in declaration order */
    bool used;
    long long ival;  /* SYM_INT: an integer (or boolean) block argument */
    Dim dval;        /* SYM_SIZE: the symbolic size */
    bool size_bound; /* SYM_INT, SYM_SIZE: bound by a statement (hd = E // H), so it may be bound again */
    bool is_bool;
    unsigned hash;   /* name_hash(name) */
    int shadow;      /* the next older symbol in the same hash bucket, or -1 */
} Sym;

typedef struct Checker {
    Graph *g;
    const Program *prog;
    Sym *syms;
    int nsyms, capsyms;
    int *bucket;         /* [nbucket]: the newest symbol whose hash falls there, or -1 */
    int nbucket;         /* a power of two, at least twice nsyms */
    int *ptab;           /* [nptab]: open addressing over g->params by name, index + 1 (0 empty) */
    int nptab;           /* a power of two, at least twice g->nparams */
    int scope_base;      /* names visible: syms[scope_base..nsyms) (a block sees only its own) */
    const char *prefix;  /* param name prefix of the block instance being checked, or NULL */
    const char *block;   /* name of that block, or NULL at model level */
    int depth;
    const DimBounds *bounds; /* --max-batch and --max-dim */
    Loc loss_loc, opt_loc;   /* where the loss and the optimizer statements are (line 0: none) */
    char **frozen;           /* the names of 'freeze' statements */
    Loc *frozen_loc;
    int nfrozen;
    Loc *param_locs; /* where each of g->params was declared */
    int nchecked;    /* g->nodes[0..nchecked) have been held to MAX_ELEMS (check_new_nodes) */
} Checker;

static Checker *CK; /* the checker, for attribute helpers that resolve block integers */

/* FNV-1a: names are short; what matters is that a lookup is not a scan of every symbol. */
static unsigned name_hash(const char *s) {
    unsigned h = 2166136261u;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* The symbols form a stack (a block's scope is pushed on top and popped after it); each hash
 * bucket chains its symbols newest first, so the first match at or above scope_base is the
 * visible one, as the scan from the top of the stack found it. */
static Sym *lookup(Checker *c, const char *name) {
    if (!c->nbucket) return NULL;
    unsigned h = name_hash(name);
    for (int i = c->bucket[h & (c->nbucket - 1)]; i >= c->scope_base; i = c->syms[i].shadow)
        if (c->syms[i].hash == h && !strcmp(c->syms[i].name, name)) return &c->syms[i];
    return NULL;
}

static void rehash_syms(Checker *c, int nbucket) {
    c->bucket = xalloc(sizeof(int) * nbucket);
    c->nbucket = nbucket;
    for (int b = 0; b < nbucket; b++) c->bucket[b] = -1;
    for (int i = 0; i < c->nsyms; i++) {
        int *head = &c->bucket[c->syms[i].hash & (nbucket - 1)];
        c->syms[i].shadow = *head;
        *head = i;
    }
}

/* Pop the symbols above n (the end of a block's scope). */
static void pop_syms(Checker *c, int n) {
    for (int i = c->nsyms - 1; i >= n; i--) c->bucket[c->syms[i].hash & (c->nbucket - 1)] = c->syms[i].shadow;
    c->nsyms = n;
}

static Sym *define_shadow(Checker *c, const char *name, Loc loc, SymKind kind);

static Sym *define(Checker *c, const char *name, Loc loc, SymKind kind) {
    Sym *old = lookup(c, name);
    if (old) {
        error_begin(loc, "redefinition of '%s'", name);
        note_at(old->loc, "previous definition of '%s' is here", name);
        diag_exit();
    }
    return define_shadow(c, name, loc, kind);
}

/* A new symbol for `name`, hiding any other of that name from here on. */
static Sym *define_shadow(Checker *c, const char *name, Loc loc, SymKind kind) {
    c->syms = xgrow_array(c->syms, c->nsyms, &c->capsyms, sizeof(Sym));
    Sym *s = &c->syms[c->nsyms++];
    memset(s, 0, sizeof *s);
    s->name = xstrdup(name);
    s->kind = kind;
    s->loc = loc;
    s->out_index = -1;
    s->hash = name_hash(name);
    if (2 * c->nsyms > c->nbucket) {
        rehash_syms(c, c->nbucket ? 2 * c->nbucket : 64);
    } else {
        int *head = &c->bucket[s->hash & (c->nbucket - 1)];
        s->shadow = *head;
        *head = c->nsyms - 1;
    }
    return s;
}

/* The index of the param named `name` in g->params, or -1. */
static int find_param(const Checker *c, const char *name) {
    if (!c->nptab) return -1;
    for (unsigned h = name_hash(name) & (c->nptab - 1);; h = (h + 1) & (c->nptab - 1)) {
        int k = c->ptab[h] - 1;
        if (k < 0) return -1;
        if (!strcmp(c->g->params[k]->name, name)) return k;
    }
}

static void ptab_insert(Checker *c, int k) {
    unsigned h = name_hash(c->g->params[k]->name) & (c->nptab - 1);
    while (c->ptab[h]) h = (h + 1) & (c->nptab - 1);
    c->ptab[h] = k + 1;
}

static const char *shp(const Checker *c, const Shape *s) {
    char buf[256];
    return xstrdup(shape_str(s, c->g->sym_names, buf, sizeof buf));
}

static const char *dms(const Checker *c, Dim d) {
    char buf[64];
    return xstrdup(dim_str(d, c->g->sym_names, buf, sizeof buf));
}

/* ---------------------------------------------------------------- types */

/* The index of the symbolic dimension `name`, or -1 when the model has none of that name. */
static int sym_index(const Graph *g, const char *name) {
    for (int k = 0; k < g->nsyms; k++)
        if (!strcmp(g->sym_names[k], name)) return k;
    return -1;
}

/* The names of the model's symbolic dimensions, "batch, seq", for messages. */
static const char *sym_list(const Graph *g) {
    char buf[256] = "";
    size_t n = 0;
    for (int k = 0; k < g->nsyms && n < sizeof buf; k++)
        n += snprintf(buf + n, sizeof buf - n, "%s%s", k ? ", " : "", g->sym_names[k]);
    return xstrdup(g->nsyms ? buf : "none");
}

/* The symbolic dimension `name`, declared by an input's type at loc: its index, a new one (with
 * its bound from the command line) the first time. */
static int use_sym(Checker *c, const char *name, Loc loc) {
    Graph *g = c->g;
    int k = sym_index(g, name);
    if (k >= 0) return k;
    if (g->nsyms == MAX_SYMS)
        error_at(loc, "symbolic dimension '%s': a model has at most %d (it has %s)", name, MAX_SYMS, sym_list(g));
    k = g->nsyms++;
    g->sym_names[k] = xstrdup(name);
    g->sym_loc[k] = loc;
    g->sym_max[k] = k == 0 ? c->bounds->max_batch : 0;
    for (int i = 0; i < c->bounds->n; i++)
        if (!strcmp(c->bounds->names[i], name)) g->sym_max[k] = c->bounds->max[i];
    if (!g->sym_max[k])
        error_at(loc, "symbolic dimension '%s' needs an upper bound: compile with --max-dim %s=N (the memory plan "
                 "holds at the bounds; only the first symbolic dimension, '%s', has a default, --max-batch)",
                 name, name, g->sym_names[0]);
    if (k == 0) {
        g->has_batch = true;
        g->batch_name = g->sym_names[0];
        g->max_batch = (int)g->sym_max[0];
    }
    return k;
}

/* Convert a declared type; `what` is "input 'x'" etc. for messages. */
static bool int_literal(const Ast *v, long long *out);
static const char *ast_text(const Ast *v);

static bool size_dim(const Ast *v, Dim *out);

static Shape convert_type(Checker *c, const AstType *t, const char *what, bool allow_sym) {
    Shape s = {0};
    if (t->rank > MAX_RANK)
        error_at(t->loc, "%s has rank %d, more than the maximum %d", what, t->rank, MAX_RANK);
    s.rank = t->rank;
    for (int i = 0; i < t->rank; i++) {
        const AstDim *d = &t->dims[i];
        Sym *is = d->is_sym ? lookup(c, d->name) : NULL;
        if (d->expr) { /* 2 * C, size(x, 1) // 4, 2 * seq */
            Dim dv;
            if (!size_dim(d->expr, &dv))
                error_at(d->loc, "dimension %d of %s must be an integer, got '%s'", i, what, ast_text(d->expr));
            if (dv.c <= 0 || dv.c > MAX_ELEMS)
                error_at(d->loc, "dimension %d of %s is %s = %s; dimensions must be positive (at most 2^40)", i, what,
                         ast_text(d->expr), dms(c, dv));
            if (dim_is_sym(dv) && !allow_sym)
                error_at(d->loc, "%s cannot use a symbolic dimension ('%s'): parameters have fixed shapes", what,
                         ast_text(d->expr));
            s.d[i] = dv;
        } else if (is && is->kind == SYM_INT) {
            if (is->ival <= 0 || is->ival > MAX_ELEMS)
                error_at(d->loc, "dimension %d of %s is %s = %lld; dimensions must be positive", i, what, d->name,
                         is->ival);
            s.d[i] = dim_const(is->ival);
        } else if (d->is_sym) {
            if (is && c->block)
                error_at(d->loc, "dimension '%s' of %s must be an integer, but block '%s' was given a tensor or a "
                         "non-integer number for it", d->name, what, c->block);
            if (!allow_sym && c->block)
                error_at(d->loc, "unknown dimension '%s' in %s: not a parameter of block '%s'", d->name, what,
                         c->block);
            if (!allow_sym)
                error_at(d->loc, "%s cannot use the symbolic dimension '%s': parameters have fixed shapes",
                         what, d->name);
            s.d[i] = dim_symbol(use_sym(c, d->name, d->loc));
        } else {
            if (d->value <= 0)
                error_at(d->loc, "dimension %d of %s is %lld; dimensions must be positive", i, what,
                         d->value);
            if (d->value > MAX_ELEMS)
                error_at(d->loc, "dimension %d of %s is %lld, more than the maximum 2^40", i, what,
                         d->value);
            s.d[i] = dim_const(d->value);
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

/* ---------------------------------------------------------------- the language's functions
 *
 * One FN row of ops.def per function: its tensor arity, its attributes with kinds and defaults
 * (a string, parsed once by fn_specs_init), its lowering function and the IR op it makes. */

typedef enum AttrKind { A_INT, A_BOOL, A_ENUM, A_INTLIST, A_SHAPE, A_FLOAT, A_PAIR, A_PAD, A_AXES, A_DATA, A__COUNT } AttrKind;

/* The kinds as ops.def and --list-ops write them. */
static const char *const attr_kind_names[A__COUNT] = {"int", "bool", "enum", "ints", "shape", "float", "pair", "pad", "axes", "data"};
_Static_assert(sizeof attr_kind_names / sizeof attr_kind_names[0] == A__COUNT, "one name per attribute kind");
/* A value of each kind, for the examples in messages. */
static const char *const attr_kind_example[A__COUNT] = {"1", "true", "...", "[1, 0]", "[2, 3]", "1.5", "[2, 2]",
                                                       "[1, 1]", "[0]", "[[1.0, 2.0], [3.0, 4.0]]"};

#define MAX_ATTRS 6

typedef struct AttrSpec {
    const char *name;
    AttrKind kind;
    const char *enums; /* A_ENUM: "none|tanh" */
    const char *def;   /* the default as written in ops.def, or NULL: required */
    bool literal;      /* def is a literal value (else the lowering computes it: stride=kernel) */
} AttrSpec;

typedef struct Call Call;
typedef Node *(*LowerFn)(Checker *c, const Call *call);

typedef struct FnSpec {
    const char *name;
    int min_t, max_t;  /* tensor arguments */
    const char *attr_text;
    LowerFn lower;
    OpKind op;
    const char *doc;
    AttrSpec attrs[MAX_ATTRS];
    int nattrs;
} FnSpec;
/* A call with its arguments sorted into tensors and attributes. */
struct Call {
    const Ast *ast;
    const FnSpec *spec;
    Node *t[MAX_IN];
    int nt;
    const Ast *attr[MAX_ATTRS]; /* by spec position; NULL if not given */
    Loc attr_loc[MAX_ATTRS];
};

static Node *lower_expr(Checker *c, const Ast *e);
static double attr_float(const Call *call, int k);
static Node *mk_const(Checker *c, Loc loc, double v);

static bool is_attr_literal(const Ast *e) { return e->kind == AST_LIST || e->kind == AST_BOOL; }

static void sort_args(Checker *c, const Ast *e, const FnSpec *spec, Call *call) {
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
        long long lit;
        /* an integer written or named (a block's integer, a size bound to a name) */
        Sym *is = a->val->kind == AST_NAME ? lookup(c, a->val->name) : NULL;
        bool int_arg = (a->val->kind == AST_NUM && a->val->is_int) ||
                       (a->val->kind == AST_NEG && a->val->lhs->kind == AST_NUM) ||
                       (is && is->kind == SYM_INT && !is->is_bool);
        bool variadic_attr = spec->max_t == MAX_IN && npos >= spec->min_t && spec->nattrs > 0 && int_arg &&
                             int_literal(a->val, &lit);
        if (variadic_attr) npos = spec->max_t; /* concat(a, b, 1): the integer is the axis */
        /* gather(x, 1, index): PyTorch's order, the dim between the tensors */
        bool dim_between = spec->min_t >= 2 && npos == 1 && spec->nattrs > 0 && !strcmp(spec->attrs[0].name, "dim") &&
                           !call->attr[0] && int_arg;
        if (dim_between) {
            call->attr[0] = a->val;
            call->attr_loc[0] = a->loc;
            continue;
        }
        if (npos < spec->max_t) {
            if (is_attr_literal(a->val))
                error_at(a->loc, "argument %d of '%s' must be a tensor", npos + 1, spec->name);
            call->t[npos++] = lower_expr(c, a->val);
            call->nt = npos;
            continue;
        }
        if (spec->max_t == MAX_IN && !variadic_attr && !is_attr_literal(a->val))
            error_at(a->loc, "'%s' takes at most %d tensors", spec->name, spec->max_t);
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
    /* an attribute ops.def gives no default is required; checked here, once, so no lowering
     * can reach attr_default for it */
    for (int k = 0; k < spec->nattrs; k++) {
        if (call->attr[k] || spec->attrs[k].def) continue;
        char eg[256];
        int n = snprintf(eg, sizeof eg, "%s(", spec->name);
        const char *sep = "";
        for (int i = 0; i < spec->min_t && n < (int)sizeof eg; i++, sep = ", ")
            n += spec->min_t == 1 ? snprintf(eg + n, sizeof eg - n, "x") : snprintf(eg + n, sizeof eg - n, "%sx%d", sep, i);
        for (int j = 0; j < spec->nattrs && n < (int)sizeof eg; j++)
            if (!spec->attrs[j].def) {
                n += snprintf(eg + n, sizeof eg - n, "%s%s=%s", sep, spec->attrs[j].name,
                              attr_kind_example[spec->attrs[j].kind]);
                sep = ", ";
            }
        if (n < (int)sizeof eg) snprintf(eg + n, sizeof eg - n, ")");
        error_at(e->loc, "'%s' needs its attribute '%s', e.g. %s", spec->name, spec->attrs[k].name, eg);
    }
}

/* The integer an attribute, list item or block argument stands for: a literal, a block's
 * integer argument, or either negated. A literal's magnitude is range-checked (MAX_INT_LITERAL,
 * on the exact value the parser kept) before it is negated, so no later arithmetic sees a value
 * near the int64 limits; a literal out of range is an error, never silently another kind of
 * value. Block integers were bounded the same way when they were bound. */
static bool int_literal1(const Ast *v, long long *out);

/* The integer an expression stands for, computed at compile time: literals and a block's
 * integer arguments combined with + - * // % (Python's rules for negative operands) and
 * size(x, dim), the size of a tensor's axis (an error for the batch axis, which only the run
 * knows). Returns false when v is not such an expression (a tensor, a float); an overflow of
 * 2^53 or a division by zero is an error at v. */
/* size(x, dim): the size of a tensor's axis, constant or symbolic. */
static Dim size_call(const Ast *v) {
    if (v->nargs != 2 || v->args[0].key || v->args[0].val->kind != AST_NAME ||
        (v->args[1].key && strcmp(v->args[1].key, "dim")))
        error_at(v->loc, "size takes a tensor's name and an axis: size(x, 1) (or size(x, dim=1))");
    Sym *s = lookup(CK, v->args[0].val->name);
    if (!s || !s->node)
        error_at(v->args[0].val->loc, "unknown tensor '%s' in size()", v->args[0].val->name);
    long long d;
    if (!int_literal(v->args[1].val, &d))
        error_at(v->args[1].val->loc, "the axis of size() must be an integer");
    const Shape *sh = &s->node->shape;
    if (d < -sh->rank || d >= sh->rank)
        error_at(v->args[1].val->loc, "axis %lld of size() is out of range for '%s' of rank %d", d, s->name, sh->rank);
    s->used = true;
    return sh->d[d < 0 ? d + sh->rank : d];
}

static bool int_literal(const Ast *v, long long *out);

/* The size an expression stands for, computed at compile time: what int_literal computes, and
 * also the model's symbolic dimensions by name (seq) and size(x, d) of a symbolic axis, combined
 * with * (and // by a constant that divides the coefficient): a monomial such as batch*seq or
 * 3*seq. A sum with a symbolic size is an error at v (sizes are monomials, see Dim). Returns
 * false when v is not a size (a tensor, a float, an unknown name). */
static bool size_dim(const Ast *v, Dim *out) {
    if (!CK) return false;
    if (v->kind == AST_NAME) {
        Sym *s = lookup(CK, v->name);
        if (s && s->kind == SYM_SIZE) {
            s->used = true;
            *out = s->dval;
            return true;
        }
        long long k;
        if (int_literal1(v, &k)) {
            *out = dim_const(k);
            return true;
        }
        int si = s ? -1 : sym_index(CK->g, v->name);
        if (si < 0) return false;
        *out = dim_symbol(si);
        return true;
    }
    if (v->kind == AST_CALL && !strcmp(v->name, "size")) {
        *out = size_call(v);
        return true;
    }
    if (v->kind == AST_BINOP && strchr("+-*f%", v->op)) {
        Dim a, b;
        if (!size_dim(v->lhs, &a) || !size_dim(v->rhs, &b)) return false;
        if (!dim_is_sym(a) && !dim_is_sym(b)) {
            long long k;
            if (!int_literal(v, &k)) return false;
            *out = dim_const(k);
            return true;
        }
        bool ok = false;
        if (v->op == '*') {
            *out = dim_mul(a, b, &ok);
            if (!ok || out->c > MAX_INT_LITERAL || out->c < -MAX_INT_LITERAL)
                error_at(v->loc, "'%s' is out of range", ast_text(v));
            return true;
        }
        if (v->op == 'f' && !dim_is_sym(b) && b.c > 0) {
            *out = dim_div(a, b, &ok);
            if (ok) return true;
        }
        error_at(v->loc, "'%s' is not a size the compiler can track: a size with a symbolic dimension (%s) is a product "
                 "of integers and symbolic dimensions (batch * seq, 3 * seq), or one divided by an integer that divides "
                 "its coefficient", ast_text(v), dim_is_sym(a) ? dms(CK, a) : dms(CK, b));
    }
    long long k;
    if (!int_literal(v, &k)) return false;
    *out = dim_const(k);
    return true;
}

static bool int_literal(const Ast *v, long long *out) {
    if (v->kind == AST_BINOP && strchr("+-*f%", v->op)) {
        long long a, b;
        if (!int_literal(v->lhs, &a) || !int_literal(v->rhs, &b)) return false;
        long long r = 0;
        bool ovf = false;
        switch (v->op) {
        case '+': ovf = __builtin_add_overflow(a, b, &r); break;
        case '-': ovf = __builtin_sub_overflow(a, b, &r); break;
        case '*': ovf = __builtin_mul_overflow(a, b, &r); break;
        default:
            if (b == 0) error_at(v->loc, "integer division by zero in '%s'", ast_text(v));
            r = v->op == 'f' ? a / b - ((a % b != 0) && ((a < 0) != (b < 0))) : ((a % b) + b) % b;
        }
        if (ovf || r > MAX_INT_LITERAL || r < -MAX_INT_LITERAL)
            error_at(v->loc, "'%s' is out of range (integers in attributes, lists and block arguments are at most "
                     "2^53 in magnitude)", ast_text(v));
        *out = r;
        return true;
    }
    if (v->kind == AST_CALL && !strcmp(v->name, "size") && CK) {
        Dim dim = size_call(v);
        if (dim_is_sym(dim))
            error_at(v->loc, "%s is %s, a symbolic dimension known only at run time; an integer is needed here "
                     "(shapes may use it: reshape(x, [%s, -1]))", ast_text(v), dms(CK, dim), dms(CK, dim));
        *out = dim.c;
        return true;
    }
    return int_literal1(v, out);
}

static bool int_literal1(const Ast *v, long long *out) {
    bool neg = v->kind == AST_NEG;
    const Ast *u = neg ? v->lhs : v;
    if (neg && u->kind != AST_NUM && u->kind != AST_NAME) { /* -(2 * C) */
        long long x;
        if (!int_literal(u, &x)) return false;
        *out = -x;
        return true;
    }
    if (u->kind == AST_NAME && CK) {
        Sym *s = lookup(CK, u->name);
        if (s && s->kind == SYM_SIZE)
            error_at(u->loc, "'%s' is %s, a symbolic size known only at run time; an integer is needed here", u->name,
                     dms(CK, s->dval));
        if (!s || s->kind != SYM_INT) return false;
        s->used = true;
        *out = neg ? -s->ival : s->ival;
        return true;
    }
    if (u->kind == AST_NUM && u->is_int) {
        if (!u->int_ok)
            error_at(v->loc, "integer %s%s is out of range (integers in attributes, lists and block arguments are "
                     "at most 2^53 in magnitude)", neg ? "-" : "", u->text);
        *out = neg ? -u->ival : u->ival;
        return true;
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

/* The default of attribute k as ops.def writes it; an attribute without a literal default is
 * the lowering's to handle (it asks call->attr[k] first), so reaching here is a bug. */
static const char *attr_default(const Call *call, int k) {
    const AttrSpec *as = &call->spec->attrs[k];
    if (!as->literal) ICE("'%s': attribute '%s' has no literal default in ops.def", call->spec->name, as->name);
    return as->def;
}

static long long attr_int(const Call *call, int k) {
    const Ast *v = call->attr[k];
    if (!v) return strtoll(attr_default(call, k), NULL, 10);
    long long x;
    if (!int_literal(v, &x))
        error_at(v->loc, "attribute '%s' of '%s' must be an integer, got '%s'", call->spec->attrs[k].name,
                 call->spec->name, ast_text(v));
    return x;
}

static bool attr_bool(const Call *call, int k) {
    const Ast *v = call->attr[k];
    if (!v) return !strcmp(attr_default(call, k), "true");
    if (v->kind == AST_NAME && CK) {
        Sym *s = lookup(CK, v->name);
        if (s && s->kind == SYM_INT && s->is_bool) return s->ival != 0;
    }
    if (v->kind != AST_BOOL)
        error_at(v->loc, "attribute '%s' of '%s' must be true or false, got '%s'", call->spec->attrs[k].name,
                 call->spec->name, ast_text(v));
    return v->bval;
}

/* The index of `name` among the alternatives "a|b|c", or -1. */
static int enum_index(const char *enums, const char *name) {
    const char *p = enums;
    for (int i = 0; *p; i++) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (strlen(name) == len && !strncmp(p, name, len)) return i;
        p += len + (bar ? 1 : 0);
    }
    return -1;
}

/* Returns the index of the chosen alternative in spec->enums (the default when not given). */
static int attr_enum(const Call *call, int k) {
    const Ast *v = call->attr[k];
    const AttrSpec *as = &call->spec->attrs[k];
    if (!v) return enum_index(as->enums, attr_default(call, k));
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

/* The call as messages name it: 'add', or '+' (add) when it was written as an operator. */
static const char *call_name(const Call *call) {
    if (call->ast->kind == AST_BINOP) return xprintf("'%s' (%s)", binop_text(call->ast->op), call->spec->name);
    if (call->ast->kind == AST_NEG) return xprintf("unary '-' (%s)", call->spec->name);
    return xprintf("'%s'", call->spec->name);
}

/* Where tensor argument i was written: the argument, an operator's operand, or the call. */
static const Ast *arg_ast(const Call *call, int i) {
    const Ast *e = call->ast;
    if (e->kind == AST_CALL && i < e->nargs) return e->args[i].val;
    if (e->kind == AST_BINOP) return i == 0 ? e->lhs : e->rhs;
    if (e->kind == AST_NEG) return e->lhs;
    return e;
}

/* Ops other than the elementwise ones compute f32 only; an f16 or bf16 operand is refused with
 * the cast that makes it f32 (modelc inserts no conversion a user did not write). */
static void require_f32(const Call *call, Node *n, int argi) {
    if (n->dtype != DT_F32)
        error_at(arg_ast(call, argi)->loc, "%s expects an f32 tensor, got %s%s%s%s%s%s%s", call_name(call), dtype_name(n->dtype),
                 n->name ? " tensor '" : "", n->name ? n->name : "", n->name ? "'" : "",
                 dtype_is_half(n->dtype) ? "; only elementwise ops compute " : "",
                 dtype_is_half(n->dtype) ? dtype_name(n->dtype) : "",
                 dtype_is_half(n->dtype) ? ": cast(x, dtype=f32) first" : "");
}

static bool is_literal(const Node *n) { return n->op == OP_CONST && n->literal; }

/* The dtype that the tensor operands t[0..n) of an elementwise call share. modelc does not
 * promote (PyTorch would turn f32 + i64 into f32, and bool + f32 too): operands of two dtypes
 * are an error that asks for a cast, as ONNX requires. A number literal takes the dtype of the
 * tensors it meets: an integer literal becomes i32 or i64 (within range), 0 or 1 becomes bool,
 * and a fraction meeting integers is an error; a number meeting f16 or bf16 is rounded to that
 * dtype (as NumPy 2 does); literals alone stay f32. */
static DType unify_dtypes(const Call *call, Node **t, int n) {
    int first = -1;
    for (int i = 0; i < n; i++) {
        if (is_literal(t[i])) continue;
        if (first < 0) {
            first = i;
        } else if (t[i]->dtype != t[first]->dtype) {
            error_at(call->ast->loc, "%s operands are %s and %s: modelc does not convert dtypes implicitly; "
                     "cast one, e.g. cast(x, dtype=%s)", call_name(call), dtype_name(t[first]->dtype),
                     dtype_name(t[i]->dtype), dtype_name(t[first]->dtype));
        }
    }
    if (first < 0) return DT_F32;
    DType dt = t[first]->dtype;
    for (int i = 0; i < n && dt != DT_F32; i++) {
        if (!is_literal(t[i])) continue;
        double v = t[i]->exact;
        if (dtype_is_half(dt)) { /* kprint.c rounds the constant to dt */
            t[i]->dtype = dt;
            t[i]->value = v;
            continue;
        }
        bool integral = t[i]->literal_int;
        bool fits = dt == DT_I64   ? integral
                    : dt == DT_I32 ? integral && v >= -2147483648.0 && v <= 2147483647.0
                                   : integral && (v == 0 || v == 1);
        if (!fits) {
            const char *why = t[i]->literal_big ? "integers in expressions are at most 2^53 in magnitude"
                              : dt == DT_BOOL   ? "a bool meets only 0 or 1"
                              : !integral       ? "a float literal does not become an integer (write it without '.', or cast)"
                                                : "the number is out of i32's range";
            const Ast *a = arg_ast(call, i);
            error_at(a->loc, "%s of %s and the number %s: %s", call_name(call), dtype_name(dt),
                     a->kind == AST_NEG && a->lhs->text ? xprintf("-%s", a->lhs->text) : a->text ? a->text : ast_text(a), why);
        }
        t[i]->dtype = dt;
        t[i]->value = v;
    }
    return dt;
}

/* NumPy broadcasting of a and b; errors point at loc and name the op. */
static Shape broadcast(Checker *c, Loc loc, const char *opname, const Shape *a, const Shape *b) {
    Shape r = {0};
    r.rank = a->rank > b->rank ? a->rank : b->rank;
    for (int i = 0; i < r.rank; i++) {
        int ia = a->rank - r.rank + i, ib = b->rank - r.rank + i;
        Dim da = ia >= 0 ? a->d[ia] : dim_const(1);
        Dim db = ib >= 0 ? b->d[ib] : dim_const(1);
        if (dim_eq(da, db)) r.d[i] = da;
        else if (dim_is_one(da)) r.d[i] = db;
        else if (dim_is_one(db)) r.d[i] = da;
        else
            error_at(loc, "cannot broadcast shapes %s and %s in '%s' (dimension %d: %s vs %s)", shp(c, a),
                     shp(c, b), opname, i, dms(c, da), dms(c, db));
    }
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
    Node *n = new_node(c->g, OP_MATMUL, loc);
    n->in[0] = a;
    n->in[1] = b;
    n->nin = 2;
    n->trans_b = trans_b;
    n->shape = r;
    return n;
}

static Node *lower_linear(Checker *c, const Call *call) {
    for (int i = 0; i < call->nt; i++) require_f32(call, call->t[i], i);
    Loc loc = call->ast->loc;
    Node *x = call->t[0], *w = call->t[1], *b = call->nt > 2 ? call->t[2] : NULL;
    if (w->shape.rank != 2)
        error_at(call->ast->args[1].val->loc, "'linear' weight must be rank 2 [out_features, in_features], got %s",
                 shp(c, &w->shape));
    if (shape_nsym(&w->shape))
        error_at(call->ast->args[1].val->loc, "'linear' weight %s must not have a symbolic dimension", shp(c, &w->shape));
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
        Shape s2 = {2, {{1, {0}}, x->shape.d[0]}};
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

/* One reduction of x along `axis` (normalized); argmax/argmin give i64. */
static Node *mk_reduce(Checker *c, OpKind op, Loc loc, Node *x, int axis, bool keepdim) {
    Node *n = new_node(c->g, op, loc);
    n->in[0] = x;
    n->nin = 1;
    n->axis = axis;
    n->keepdim = keepdim;
    n->shape = x->shape;
    if (op == OP_SOFTMAX || op == OP_LOG_SOFTMAX) return n;
    if (keepdim) {
        n->shape.d[axis] = dim_const(1);
    } else {
        for (int i = axis; i + 1 < x->shape.rank; i++) n->shape.d[i] = x->shape.d[i + 1];
        n->shape.rank--;
    }
    if (op == OP_ARGMAX) n->dtype = DT_I64;
    return n;
}

/* The axes attribute k: an integer or a list of distinct axes, normalized, in decreasing order
 * (so reducing one keeps the others' indices). Returns their count. */
static int attr_axes(const Call *call, int k, int rank, int *axes) {
    const Ast *v = call->attr[k];
    const char *name = call->spec->attrs[k].name;
    int n = 0;
    if (v && v->kind == AST_LIST) {
        if (v->nitems < 1 || v->nitems > rank)
            error_at(v->loc, "'%s' %s lists %d axes; a tensor of rank %d has 1 to %d", call->spec->name, name, v->nitems,
                     rank, rank);
        for (int i = 0; i < v->nitems; i++) {
            long long a;
            if (!int_literal(v->items[i], &a))
                error_at(v->items[i]->loc, "attribute '%s' of '%s' must hold integers", name, call->spec->name);
            axes[n++] = norm_axis(call, v->items[i], call->ast->loc, a, rank, name);
        }
    } else {
        axes[n++] = norm_axis(call, v, call->ast->loc, attr_int(call, k), rank, name);
    }
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            if (axes[i] == axes[j])
                error_at(v->loc, "'%s' %s names axis %d twice", call->spec->name, name, axes[i]);
            if (axes[j] > axes[i]) {
                int t = axes[i];
                axes[i] = axes[j];
                axes[j] = t;
            }
        }
    return n;
}

/* Reduce x over several axes (decreasing order) with single-axis kernels, keeping the reduced
 * dims; then drop them unless keepdim. */
static Node *reduce_axes(Checker *c, OpKind op, Loc loc, Node *x, const int *axes, int n, bool keepdim) {
    Shape out = {0};
    for (int d = 0; d < x->shape.rank; d++) {
        bool red = false;
        for (int i = 0; i < n; i++) red = red || axes[i] == d;
        if (!red) out.d[out.rank++] = x->shape.d[d];
        else if (keepdim) out.d[out.rank++] = dim_const(1);
    }
    if (n == 1) return mk_reduce(c, op, loc, x, axes[0], keepdim);
    Node *y = x;
    for (int i = 0; i < n; i++) y = mk_reduce(c, op, loc, y, axes[i], true);
    return keepdim ? y : mk_reshape(c, loc, y, out);
}

static Node *lower_reduce(Checker *c, const Call *call) {
    OpKind op = call->spec->op;
    Node *x = call->t[0];
    require_f32(call, x, 0);
    Loc loc = call->ast->loc;
    bool has_keepdim = call->spec->nattrs > 1, keepdim = has_keepdim && attr_bool(call, 1);
    if (x->shape.rank == 0) error_at(loc, "'%s' needs a tensor of rank >= 1, got a scalar", call->spec->name);
    int axes[MAX_RANK], n = 1;
    if (call->spec->attrs[0].kind == A_AXES) {
        n = attr_axes(call, 0, x->shape.rank, axes);
    } else {
        axes[0] = norm_axis(call, call->attr[0], loc, attr_int(call, 0), x->shape.rank, "axis");
    }
    bool is_min = !strcmp(call->spec->name, "min") || !strcmp(call->spec->name, "argmin");
    if (is_min) /* min(x) = -max(-x), argmin(x) = argmax(-x): same NaN and tie rules as max */
        x = mk_unary(c, OP_NEG, loc, x);
    Node *y = reduce_axes(c, op, loc, x, axes, n, keepdim);
    return is_min && op == OP_MAX ? mk_unary(c, OP_NEG, loc, y) : y;
}

/* var / std: the mean of squared deviations over the axes, times n / (n - 1) when unbiased
 * (PyTorch's correction=1; n = 1 then gives NaN, as PyTorch does). */
static Node *lower_var(Checker *c, const Call *call) {
    Node *x = call->t[0];
    require_f32(call, x, 0);
    Loc loc = call->ast->loc;
    if (x->shape.rank == 0) error_at(loc, "'%s' needs a tensor of rank >= 1, got a scalar", call->spec->name);
    int axes[MAX_RANK], n = attr_axes(call, 0, x->shape.rank, axes);
    bool unbiased = attr_bool(call, 1), keepdim = attr_bool(call, 2);
    int64_t count = 1;
    for (int i = 0; i < n; i++) {
        if (dim_is_sym(x->shape.d[axes[i]]))
            error_at(loc, "'%s' over a symbolic dimension (axis %d, %s) is not supported", call->spec->name, axes[i],
                     dms(c, x->shape.d[axes[i]]));
        count *= x->shape.d[axes[i]].c;
    }
    Node *m = reduce_axes(c, OP_MEAN, loc, x, axes, n, true);
    Node *d = mk_binary(c, OP_SUB, loc, x, m);
    Node *v = reduce_axes(c, OP_MEAN, loc, mk_binary(c, OP_MUL, loc, d, d), axes, n, keepdim);
    if (unbiased) v = mk_binary(c, OP_MUL, loc, v, mk_const(c, loc, count > 1 ? (double)count / (double)(count - 1) : INFINITY));
    return strcmp(call->spec->name, "std") ? v : mk_unary(c, OP_SQRT, loc, v);
}

/* logsumexp = m + log(sum(exp(x - m))) with m the row maximum clamped to the finite range, so an
 * all -inf row gives -inf (not NaN), a +inf gives +inf, and NaN propagates. */
static Node *lower_logsumexp(Checker *c, const Call *call) {
    Node *x = call->t[0];
    require_f32(call, x, 0);
    Loc loc = call->ast->loc;
    if (x->shape.rank == 0) error_at(loc, "'logsumexp' needs a tensor of rank >= 1, got a scalar");
    int axes[MAX_RANK], n = attr_axes(call, 0, x->shape.rank, axes);
    bool keepdim = attr_bool(call, 1);
    Node *m = mk_unary(c, OP_CLAMP, loc, reduce_axes(c, OP_MAX, loc, x, axes, n, true));
    m->fattr[0] = -FLT_MAX;
    m->fattr[1] = FLT_MAX;
    m->stop_grad = true; /* training: d/dm of the result is 1 - sum(softmax) = 0; the gradient is softmax's */
    Node *s = reduce_axes(c, OP_SUM, loc, mk_unary(c, OP_EXP, loc, mk_binary(c, OP_SUB, loc, x, m)), axes, n, true);
    Node *r = mk_binary(c, OP_ADD, loc, m, mk_unary(c, OP_LOG, loc, s));
    if (keepdim) return r;
    Shape out = {0};
    for (int d = 0; d < x->shape.rank; d++) {
        bool red = false;
        for (int i = 0; i < n; i++) red = red || axes[i] == d;
        if (!red) out.d[out.rank++] = x->shape.d[d];
    }
    return mk_reshape(c, loc, r, out);
}

/* rms_norm(x, weight?, eps): x / sqrt(mean(x^2 over the last axis) + eps) * weight. */
static Node *lower_rms_norm(Checker *c, const Call *call) {
    Node *x = call->t[0], *w = call->nt > 1 ? call->t[1] : NULL;
    for (int i = 0; i < call->nt; i++) require_f32(call, call->t[i], i);
    Loc loc = call->ast->loc;
    if (x->shape.rank == 0) error_at(loc, "'rms_norm' needs a tensor of rank >= 1, got a scalar");
    Dim D = x->shape.d[x->shape.rank - 1];
    if (w && (w->shape.rank != 1 || !dim_eq(w->shape.d[0], D)))
        error_at(call->ast->args[1].val->loc, "'rms_norm' weight must be [%s] (the last axis of %s), got %s", dms(c, D),
                 shp(c, &x->shape), shp(c, &w->shape));
    double eps = attr_float(call, 0);
    if (!(eps >= 0)) error_at(call->attr[0]->loc, "'rms_norm' eps must be >= 0");
    int ax = x->shape.rank - 1;
    Node *ms = mk_reduce(c, OP_MEAN, loc, mk_binary(c, OP_MUL, loc, x, x), ax, true);
    Node *y = mk_binary(c, OP_MUL, loc, x, mk_unary(c, OP_RSQRT, loc, mk_binary(c, OP_ADD, loc, ms, mk_const(c, loc, eps))));
    return w ? mk_binary(c, OP_MUL, loc, y, w) : y;
}

/* unsqueeze(x, dim) and squeeze(x, dim=all): views. */
static Node *lower_unsqueeze(Checker *c, const Call *call) {
    Node *x = call->t[0];
    int r = x->shape.rank;
    if (r + 1 > MAX_RANK) error_at(call->ast->loc, "'unsqueeze' of a rank-%d tensor: at most rank %d", r, MAX_RANK);
    int d = norm_axis(call, call->attr[0], call->ast->loc, attr_int(call, 0), r + 1, "dim");
    Shape s = {r + 1, {{0}}};
    for (int i = 0, j = 0; i < r + 1; i++) s.d[i] = i == d ? dim_const(1) : x->shape.d[j++];
    return mk_reshape(c, call->ast->loc, x, s);
}

static Node *lower_squeeze(Checker *c, const Call *call) {
    Node *x = call->t[0];
    int r = x->shape.rank, d = -1;
    if (call->attr[0]) d = norm_axis(call, call->attr[0], call->ast->loc, attr_int(call, 0), r, "dim");
    Shape s = {0};
    for (int i = 0; i < r; i++) {
        bool one = dim_is_one(x->shape.d[i]);
        if (one && (d < 0 || d == i)) continue;
        s.d[s.rank++] = x->shape.d[i];
    }
    return mk_reshape(c, call->ast->loc, x, s);
}

/* flip(x, dims): each axis read backwards (a slice with step -1). */
static Node *lower_flip(Checker *c, const Call *call) {
    Node *x = call->t[0];
    int r = x->shape.rank, axes[MAX_RANK];
    int n = attr_axes(call, 0, r, axes);
    for (int i = 0; i < n; i++) {
        Dim L = x->shape.d[axes[i]];
        if (dim_is_sym(L))
            error_at(call->ast->loc, "'flip' cannot reverse a symbolic dimension (axis %d, %s)", axes[i], dms(c, L));
        Node *s = new_node(c->g, OP_SLICE, call->ast->loc);
        s->in[0] = x;
        s->nin = 1;
        s->dtype = x->dtype;
        s->axis = axes[i];
        s->start = L.c - 1;
        s->step = -1;
        s->shape = x->shape;
        x = s;
    }
    return x;
}

/* expand / broadcast_to(x, shape): x broadcast to shape (NumPy rules; -1 keeps a dim). */
static Node *lower_expand(Checker *c, const Call *call) {
    Node *x = call->t[0];
    const Ast *v = call->attr[0];
    if (!v || v->kind != AST_LIST)
        error_at(v ? v->loc : call->ast->loc, "'%s' needs a shape list, e.g. %s(x, [4, -1])", call->spec->name,
                 call->spec->name);
    if (v->nitems > MAX_RANK || v->nitems < x->shape.rank)
        error_at(v->loc, "'%s' to rank %d: %s has rank %d (at most %d, and not fewer than the input's)",
                 call->spec->name, v->nitems, shp(c, &x->shape), x->shape.rank, MAX_RANK);
    Shape s = {v->nitems, {{0}}};
    int off = v->nitems - x->shape.rank;
    for (int i = 0; i < v->nitems; i++) {
        const Ast *it = v->items[i];
        Dim in = i >= off ? x->shape.d[i - off] : dim_const(1);
        Dim k;
        if (size_dim(it, &k) && !dim_is_sym(k) && k.c == -1 && i >= off) s.d[i] = in;
        else if (size_dim(it, &k) && k.c >= 1 && k.c <= MAX_ELEMS) s.d[i] = k;
        else error_at(it->loc, "'%s' sizes are positive integers, symbolic sizes (%s), or -1 for an existing dim, got '%s'",
                      call->spec->name, c->g->nsyms ? sym_list(c->g) : "batch", ast_text(it));
        if (!dim_eq(in, s.d[i]) && !dim_is_one(in))
            error_at(it->loc, "'%s' cannot broadcast dimension %d of %s (%s) to %s", call->spec->name, i - off,
                     shp(c, &x->shape), dms(c, in), dms(c, s.d[i]));
    }
    Node *n = new_node(c->g, OP_EXPAND, call->ast->loc);
    n->in[0] = x;
    n->nin = 1;
    n->dtype = x->dtype;
    n->shape = s;
    return n;
}

/* stack(x1, ..., axis): each unsqueezed at axis, then concatenated there. */
static Node *lower_stack(Checker *c, const Call *call) {
    Node *x0 = call->t[0];
    int r = x0->shape.rank;
    int axis = norm_axis(call, call->attr[0], call->ast->loc, attr_int(call, 0), r + 1, "axis");
    Node *n = new_node(c->g, OP_CONCAT, call->ast->loc);
    n->axis = axis;
    n->dtype = x0->dtype;
    for (int i = 0; i < call->nt; i++) {
        Node *x = call->t[i];
        if (x->dtype != x0->dtype || !shape_eq(&x->shape, &x0->shape))
            error_at(call->ast->args[i].val->loc, "'stack' operand %d is %s%s, operand 0 %s%s; stacked tensors are alike",
                     i, dtype_name(x->dtype), shp(c, &x->shape), dtype_name(x0->dtype), shp(c, &x0->shape));
        Shape s = {r + 1, {{0}}};
        for (int d = 0, j = 0; d < r + 1; d++) s.d[d] = d == axis ? dim_const(1) : x->shape.d[j++];
        n->in[i] = mk_reshape(c, call->ast->loc, x, s);
    }
    n->nin = call->nt;
    n->shape = n->in[0]->shape;
    n->shape.d[axis] = dim_const(call->nt);
    return n;
}

/* zeros / ones / full(shape, value): a constant broadcast to shape. */
static Node *lower_full(Checker *c, const Call *call) {
    const char *fn = call->spec->name;
    double value = !strcmp(fn, "zeros") ? 0.0 : !strcmp(fn, "ones") ? 1.0 : attr_float(call, 1);
    const Ast *v = call->attr[0];
    if (!v || v->kind != AST_LIST) error_at(v ? v->loc : call->ast->loc, "'%s' needs a shape list, e.g. %s([2, 3])", fn, fn);
    if (v->nitems > MAX_RANK) error_at(v->loc, "'%s' shape has rank %d; at most %d", fn, v->nitems, MAX_RANK);
    Shape s = {v->nitems, {{0}}};
    for (int i = 0; i < v->nitems; i++) {
        const Ast *it = v->items[i];
        Dim k;
        if (size_dim(it, &k) && k.c >= 1 && k.c <= MAX_ELEMS) s.d[i] = k;
        else error_at(it->loc, "'%s' sizes are positive integers or symbolic sizes (%s), got '%s'", fn,
                      c->g->nsyms ? sym_list(c->g) : "the batch name", ast_text(it));
    }
    Node *n = new_node(c->g, OP_EXPAND, call->ast->loc);
    n->in[0] = mk_const(c, call->ast->loc, value);
    n->nin = 1;
    n->shape = s;
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
    Dim known = {1, {0}};
    for (int i = 0; i < v->nitems; i++) {
        const Ast *it = v->items[i];
        Dim val;
        if (it->kind == AST_NAME && !size_dim(it, &val))
            error_at(it->loc, "unknown dimension name '%s' in 'reshape' (the model's symbolic dimensions: %s)", it->name,
                     sym_list(c->g));
        if (!size_dim(it, &val))
            error_at(it->loc, "'reshape' dimensions must be integers, -1 or symbolic sizes (%s), got '%s'%s",
                     c->g->nsyms ? sym_list(c->g) : "the batch name", ast_text(it),
                     it->kind == AST_BINOP && it->op == '/' ? " ('/' divides floats; sizes divide with //)" : "");
        if (!dim_is_sym(val) && val.c == -1) {
            if (infer >= 0) error_at(it->loc, "'reshape' allows only one -1 dimension");
            infer = i;
            continue;
        }
        if (val.c <= 0 || val.c > MAX_ELEMS) {
            if (it->kind == AST_NAME)
                error_at(it->loc, "'reshape' dimension %d is %s = %s; dimensions must be positive", i, it->name, dms(c, val));
            error_at(it->loc, "'reshape' dimension %d is %s; dimensions must be positive (or -1)", i, dms(c, val));
        }
        s.d[i] = val;
        bool ok;
        known = dim_mul(known, s.d[i], &ok);
        if (!ok) error_at(it->loc, "'reshape' target has too many elements");
    }
    Dim numel = shape_numel(&x->shape);
    if (infer >= 0) {
        bool ok;
        Dim q = dim_div(numel, known, &ok);
        if (!ok)
            error_at(v->loc, "cannot reshape %s (%s elements) to %s: %s is not a multiple of %s", shp(c, &x->shape),
                     dms(c, numel), ast_text(v), dms(c, numel), dms(c, known));
        s.d[infer] = q;
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
    int d0 = norm_axis(call, call->attr[0], call->ast->loc, attr_int(call, 0), r, "dim0");
    int d1 = norm_axis(call, call->attr[1], call->ast->loc, attr_int(call, 1), r, "dim1");
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

/* ---------------------------------------------------------------- neural-network ops */

/* inf and nan as numbers (Python's math.inf, math.nan), unless the name is bound: *out. */
static bool float_name(const Ast *v, double *out) {
    if (v->kind != AST_NAME || (CK && lookup(CK, v->name))) return false;
    if (!strcmp(v->name, "inf")) *out = INFINITY;
    else if (!strcmp(v->name, "nan")) *out = NAN;
    else return false;
    return true;
}

static double attr_float(const Call *call, int k) {
    const Ast *v = call->attr[k];
    if (!v) return strtod(attr_default(call, k), NULL);
    long long i;
    double f;
    if (v->kind == AST_NUM) return v->num;
    if (v->kind == AST_NEG && v->lhs->kind == AST_NUM) return -v->lhs->num;
    if (float_name(v, &f)) return f;
    if (v->kind == AST_NEG && float_name(v->lhs, &f)) return -f;
    if (int_literal(v, &i)) return (double)i;
    const Ast *u = v->kind == AST_NEG ? v->lhs : v;
    Sym *s = u->kind == AST_NAME && CK ? lookup(CK, u->name) : NULL;
    if (s && s->node)
        error_at(v->loc, "attribute '%s' of '%s' must be a number; '%s' is a tensor here (bound at line %d)",
                 call->spec->attrs[k].name, call->spec->name, u->name, s->loc.line);
    error_at(v->loc, "attribute '%s' of '%s' must be a number, got '%s'", call->spec->attrs[k].name, call->spec->name,
             ast_text(v));
}

/* An integer or a list of `n` integers (n == 2: [h, w]; pads also accept 4: [top, left, bottom, right]). */
static void attr_ints(const Call *call, int k, int *out, int n, bool pad) {
    const Ast *v = call->attr[k];
    const char *name = call->spec->attrs[k].name;
    long long x;
    if (!v) {
        int def = (int)strtol(attr_default(call, k), NULL, 10);
        for (int i = 0; i < n; i++) out[i] = def;
        return;
    }
    if (int_literal(v, &x)) {
        if (x < INT32_MIN || x > INT32_MAX)
            error_at(v->loc, "attribute '%s' of '%s' is %lld, out of range (at most 2^31-1 in magnitude)", name,
                     call->spec->name, x);
        for (int i = 0; i < n; i++) out[i] = (int)x;
        return;
    }
    if (v->kind == AST_LIST && (v->nitems == 2 || (pad && v->nitems == 4))) {
        int vals[4];
        for (int i = 0; i < v->nitems; i++) {
            if (!int_literal(v->items[i], &x))
                error_at(v->items[i]->loc, "attribute '%s' of '%s' must hold integers", name, call->spec->name);
            if (x < INT32_MIN || x > INT32_MAX)
                error_at(v->items[i]->loc, "attribute '%s' of '%s' holds %lld, out of range (at most 2^31-1 in "
                         "magnitude)", name, call->spec->name, x);
            vals[i] = (int)x;
        }
        if (v->nitems == 2 && pad) { /* [h, w]: symmetric */
            out[0] = out[2] = vals[0];
            out[1] = out[3] = vals[1];
        } else {
            for (int i = 0; i < n; i++) out[i] = vals[i];
        }
        return;
    }
    error_at(v->loc, "attribute '%s' of '%s' must be an integer or a list [h, w]%s, got '%s'", name, call->spec->name,
             pad ? " or [top, left, bottom, right]" : "", ast_text(v));
}

static int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
static int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -(-a / b); }

/* Extent d * (k - 1) + 1 of a window of k taps dilated by d, or INT64_MAX when that overflows
 * (k comes from a weight's shape, up to 2^40, d from an attribute, up to 2^31-1). Computed in
 * int64 with checks: in int, dilation 2^30 on a 3-wide kernel wrapped to -2147483647. */
static int64_t window_extent(int64_t k, int64_t d) {
    int64_t e;
    if (__builtin_mul_overflow(d, k - 1, &e) || __builtin_add_overflow(e, 1, &e)) return INT64_MAX;
    return e;
}

/* Output length of a sliding window, PyTorch's rule (see docs/language.md); <= 0 means empty.
 * The division is a true floor (or ceil): C's truncation would turn L=1, k=2, s=2 into 1
 * (field case B22). L <= 2^40 and the int attributes keep L + pb + pe far from overflow; an
 * extent more than one stride beyond the padded input is empty in either mode, and is answered
 * before the subtraction and divisions could wrap. */
static int64_t window_out(int64_t L, int64_t k, int s, int pb, int pe, int d, bool ceil_mode) {
    int64_t padded = L + pb + pe, ext = window_extent(k, d);
    if (ext > padded + s) return 0;
    int64_t num = padded - ext;
    int64_t o = (ceil_mode ? ceil_div(num, s) : floor_div(num, s)) + 1;
    if (ceil_mode && o > 0 && (o - 1) * s >= L + pb) o--;
    return o;
}

static void require_nchw(Checker *c, const Call *call, Node *x) {
    if (x->shape.rank != 4)
        error_at(call->ast->args[0].val->loc, "'%s' input must be rank 4 [N, C, H, W], got %s", call->spec->name,
                 shp(c, &x->shape));
    for (int i = 1; i < 4; i++)
        if (dim_is_sym(x->shape.d[i]))
            error_at(call->ast->args[0].val->loc, "'%s' input %s may have a symbolic dimension only in N", call->spec->name,
                     shp(c, &x->shape));
}

/* Where attribute `name` was written (its value), or the call if it was not. */
static Loc attr_loc(const Call *call, const char *name) {
    for (int k = 0; k < call->spec->nattrs; k++)
        if (!strcmp(call->spec->attrs[k].name, name) && call->attr[k]) return call->attr[k]->loc;
    return call->ast->loc;
}

static void check_window_attrs(const Call *call, const int *stride, const int *dil, const int *pad) {
    for (int i = 0; i < 2; i++) {
        if (stride[i] < 1) error_at(attr_loc(call, "stride"), "'%s' stride must be >= 1, got %d", call->spec->name, stride[i]);
        if (dil[i] < 1) error_at(attr_loc(call, "dilation"), "'%s' dilation must be >= 1, got %d", call->spec->name, dil[i]);
    }
    for (int i = 0; i < 4; i++)
        if (pad[i] < 0) error_at(attr_loc(call, "padding"), "'%s' padding must be >= 0, got %d", call->spec->name, pad[i]);
}

static void window_shape(Checker *c, const Call *call, Node *n, const Node *x, int64_t kh, int64_t kw) {
    int64_t H = x->shape.d[2].c, W = x->shape.d[3].c;
    int64_t oh = window_out(H, kh, n->stride[0], n->pad[0], n->pad[2], n->dilation[0], n->ceil_mode);
    int64_t ow = window_out(W, kw, n->stride[1], n->pad[1], n->pad[3], n->dilation[1], n->ceil_mode);
    if (oh < 1 || ow < 1)
        error_at(call->ast->loc, "'%s' output size %lldx%lld is empty (input %lldx%lld, kernel %lldx%lld, stride %dx%d, "
                 "padding [%d,%d,%d,%d], dilation %dx%d)", call->spec->name, (long long)(oh < 0 ? 0 : oh),
                 (long long)(ow < 0 ? 0 : ow), (long long)H, (long long)W, (long long)kh, (long long)kw, n->stride[0],
                 n->stride[1], n->pad[0],
                 n->pad[1], n->pad[2], n->pad[3], n->dilation[0], n->dilation[1]);
    n->shape.d[2] = dim_const(oh);
    n->shape.d[3] = dim_const(ow);
}

static Node *lower_conv2d(Checker *c, const Call *call) {
    Node *x = call->t[0], *w = call->t[1], *b = call->nt > 2 ? call->t[2] : NULL;
    for (int i = 0; i < call->nt; i++) require_f32(call, call->t[i], i);
    const Ast *wa = call->ast->args[1].val;
    if (w->shape.rank != 4)
        error_at(wa->loc, "'conv2d' weight must be rank 4 [O, C/groups, KH, KW], got rank %d", w->shape.rank);
    require_nchw(c, call, x);
    if (shape_nsym(&w->shape)) error_at(wa->loc, "'conv2d' weight %s must not have a symbolic dimension", shp(c, &w->shape));
    Node *n = new_node(c->g, OP_CONV2D, call->ast->loc);
    long long groups = attr_int(call, 3);
    if (groups < 1 || groups > INT32_MAX) error_at(call->attr[3]->loc, "'conv2d' groups must be in 1..2^31-1, got %lld", groups);
    n->groups = (int)groups;
    attr_ints(call, 0, n->stride, 2, false);
    attr_ints(call, 1, n->pad, 4, true);
    attr_ints(call, 2, n->dilation, 2, false);
    check_window_attrs(call, n->stride, n->dilation, n->pad);
    int64_t C = x->shape.d[1].c, O = w->shape.d[0].c, Cg = w->shape.d[1].c;
    if (C % groups) error_at(call->ast->loc, "'conv2d' groups %lld does not divide input channels %lld", groups, (long long)C);
    if (O % groups) error_at(call->ast->loc, "'conv2d' groups %lld does not divide output channels %lld", groups, (long long)O);
    int64_t cg_groups;
    bool ovf = __builtin_mul_overflow(Cg, (int64_t)groups, &cg_groups);
    if (ovf || cg_groups != C)
        error_at(call->ast->loc, "'conv2d' input channels %lld differ from weight C x groups = %lld x %lld%s "
                 "(input %s, weight %s)", (long long)C, (long long)Cg, groups,
                 ovf ? "" : xprintf(" = %lld", (long long)cg_groups), shp(c, &x->shape), shp(c, &w->shape));
    if (b && (b->shape.rank != 1 || !dim_eq(b->shape.d[0], w->shape.d[0])))
        error_at(call->ast->args[2].val->loc, "'conv2d' bias must be [%lld] (one per output channel), got %s", (long long)O,
                 shp(c, &b->shape));
    n->in[0] = x;
    n->in[1] = w;
    n->nin = 2;
    n->shape = (Shape){4, {x->shape.d[0], {O, {0}}, {0, {0}}, {0, {0}}}};
    window_shape(c, call, n, x, w->shape.d[2].c, w->shape.d[3].c);
    for (int i = 0; i < 2; i++) { /* the kernel is an int from here on (Node, runtime kernels) */
        if (w->shape.d[2 + i].c > INT32_MAX)
            error_at(wa->loc, "'conv2d' kernel %s %lld (dimension %d of the weight %s) is more than the maximum "
                     "2^31-1", i ? "width" : "height", (long long)w->shape.d[2 + i].c, 2 + i, shp(c, &w->shape));
        n->kernel[i] = (int)w->shape.d[2 + i].c;
    }
    if (!b) return n;
    Shape bs = {3, {{O, {0}}, {1, {0}}, {1, {0}}}};
    return mk_binary(c, OP_ADD, call->ast->loc, n, mk_reshape(c, call->ast->loc, b, bs));
}

/* conv1d(x[N, C, L], w[O, C/groups, K], b?): PyTorch's F.conv1d, lowered to conv2d on the views
 * x[N, C, 1, L] and w[O, C/groups, 1, K] (stride, padding and dilation on the width only), so it
 * shares conv2d's im2col + GEMM kernels and its epilogue fusion. */
static Node *lower_conv1d(Checker *c, const Call *call) {
    Node *x = call->t[0], *w = call->t[1], *b = call->nt > 2 ? call->t[2] : NULL;
    for (int i = 0; i < call->nt; i++) require_f32(call, call->t[i], i);
    const Ast *xa = call->ast->args[0].val, *wa = call->ast->args[1].val;
    if (x->shape.rank != 3) error_at(xa->loc, "'conv1d' input must be rank 3 [N, C, L], got %s", shp(c, &x->shape));
    if (dim_is_sym(x->shape.d[1]) || dim_is_sym(x->shape.d[2]))
        error_at(xa->loc, "'conv1d' input %s may have a symbolic dimension only in N", shp(c, &x->shape));
    if (w->shape.rank != 3)
        error_at(wa->loc, "'conv1d' weight must be rank 3 [O, C/groups, K], got %s", shp(c, &w->shape));
    if (shape_nsym(&w->shape)) error_at(wa->loc, "'conv1d' weight %s must not have a symbolic dimension", shp(c, &w->shape));
    long long v[4];
    static const char *names[4] = {"stride", "padding", "dilation", "groups"};
    for (int k = 0; k < 4; k++) {
        v[k] = attr_int(call, k);
        if (v[k] < (k == 1 ? 0 : 1) || v[k] > INT32_MAX)
            error_at(attr_loc(call, names[k]), "'conv1d' %s must be %s, got %lld", names[k],
                     k == 1 ? "in 0..2^31-1" : "in 1..2^31-1", v[k]);
    }
    long long groups = v[3];
    int64_t C = x->shape.d[1].c, L = x->shape.d[2].c, O = w->shape.d[0].c, Cg = w->shape.d[1].c, K = w->shape.d[2].c;
    if (C % groups) error_at(attr_loc(call, "groups"), "'conv1d' groups %lld does not divide input channels %lld", groups, (long long)C);
    if (O % groups) error_at(attr_loc(call, "groups"), "'conv1d' groups %lld does not divide output channels %lld", groups, (long long)O);
    int64_t cg_groups;
    if (__builtin_mul_overflow(Cg, (int64_t)groups, &cg_groups) || cg_groups != C)
        error_at(wa->loc, "'conv1d' input channels %lld differ from weight C x groups = %lld x %lld (input %s, weight %s)",
                 (long long)C, (long long)Cg, groups, shp(c, &x->shape), shp(c, &w->shape));
    if (K > INT32_MAX) error_at(wa->loc, "'conv1d' kernel size %lld is more than the maximum 2^31-1", (long long)K);
    if (b && (b->shape.rank != 1 || !dim_eq(b->shape.d[0], w->shape.d[0])))
        error_at(call->ast->args[2].val->loc, "'conv1d' bias must be [%lld] (one per output channel), got %s",
                 (long long)O, shp(c, &b->shape));
    int64_t OL = window_out(L, K, (int)v[0], (int)v[1], (int)v[1], (int)v[2], false);
    if (OL < 1)
        error_at(call->ast->loc, "'conv1d' output length %lld is empty (input length %lld, kernel %lld, stride %lld, "
                 "padding %lld, dilation %lld)", (long long)(OL < 0 ? 0 : OL), (long long)L, (long long)K, v[0], v[1],
                 v[2]);
    Loc loc = call->ast->loc;
    /* the views first: node ids are a topological order (analyze_uses walks them backwards) */
    Node *xv = mk_reshape(c, loc, x, (Shape){4, {x->shape.d[0], {C, {0}}, {1, {0}}, {L, {0}}}});
    Node *wv = mk_reshape(c, loc, w, (Shape){4, {{O, {0}}, {Cg, {0}}, {1, {0}}, {K, {0}}}});
    Node *n = new_node(c->g, OP_CONV2D, loc);
    n->groups = (int)groups;
    n->stride[0] = n->dilation[0] = 1;
    n->stride[1] = (int)v[0];
    n->dilation[1] = (int)v[2];
    n->pad[0] = n->pad[2] = 0;
    n->pad[1] = n->pad[3] = (int)v[1];
    n->kernel[0] = 1;
    n->kernel[1] = (int)K;
    n->in[0] = xv;
    n->in[1] = wv;
    n->nin = 2;
    n->shape = (Shape){4, {x->shape.d[0], {O, {0}}, {1, {0}}, {OL, {0}}}};
    /* the bias and what follows read the 3-D view of the conv2d: fusion takes them into its
     * epilogue through that view (fuse.c) */
    Node *y = mk_reshape(c, loc, n, (Shape){3, {x->shape.d[0], {O, {0}}, {OL, {0}}}});
    if (!b) return y;
    return mk_binary(c, OP_ADD, loc, y, mk_reshape(c, loc, b, (Shape){2, {{O, {0}}, {1, {0}}}}));
}

/* pixel_shuffle(x[*, C*r*r, H, W], r) -> [*, C, H*r, W*r]: PyTorch's F.pixel_shuffle, as the view
 * [*, C, r, r, H, W], the permutation [*, C, H, r, W, r] (a fused data movement) and the view of
 * the result. Up to three leading axes (the permuted view has rank + 2 <= MAX_RANK). */
static Node *lower_pixel_shuffle(Checker *c, const Call *call) {
    Node *x = call->t[0];
    const Ast *xa = call->ast->args[0].val;
    int r = x->shape.rank;
    if (r < 3 || r + 2 > MAX_RANK)
        error_at(xa->loc, "'pixel_shuffle' input must have rank 3 to %d [*, C*r*r, H, W], got %s", MAX_RANK - 2,
                 shp(c, &x->shape));
    for (int i = r - 3; i < r; i++)
        if (dim_is_sym(x->shape.d[i]))
            error_at(xa->loc, "'pixel_shuffle' input %s: its channels and spatial axes may not be symbolic",
                     shp(c, &x->shape));
    long long f = attr_int(call, 0);
    if (f < 1 || f > 65536)
        error_at(attr_loc(call, "upscale_factor"), "'pixel_shuffle' upscale_factor must be in 1..65536, got %lld", f);
    int64_t C = x->shape.d[r - 3].c, H = x->shape.d[r - 2].c, W = x->shape.d[r - 1].c;
    if (C % (f * f))
        error_at(xa->loc, "'pixel_shuffle' input channels %lld are not divisible by upscale_factor^2 = %lld (input %s)",
                 (long long)C, f * f, shp(c, &x->shape));
    Loc loc = call->ast->loc;
    int lead = r - 3;
    Shape v = {r + 2, {{0}}}, out = x->shape;
    int perm[MAX_RANK];
    for (int i = 0; i < lead; i++) v.d[i] = x->shape.d[i], perm[i] = i;
    v.d[lead] = dim_const(C / (f * f));
    v.d[lead + 1] = v.d[lead + 2] = dim_const(f);
    v.d[lead + 3] = dim_const(H);
    v.d[lead + 4] = dim_const(W);
    static const int tail[6] = {0, 3, 1, 4, 2}; /* C, H, r, W, r of C, r, r, H, W */
    for (int i = 0; i < 5; i++) perm[lead + i] = lead + tail[i];
    out.d[r - 3] = dim_const(C / (f * f));
    out.d[r - 2] = dim_const(H * f);
    out.d[r - 1] = dim_const(W * f);
    return mk_reshape(c, loc, mk_permute(c, loc, mk_reshape(c, loc, x, v), perm), out);
}

/* conv_transpose2d(x[N, C, H, W], w[C, O/groups, KH, KW], b?): PyTorch's F.conv_transpose2d;
 * output (H-1)*stride - 2*padding + dilation*(KH-1) + output_padding + 1 (and the same for W),
 * output_padding below stride or dilation on each axis (PyTorch's rule). */
static Node *lower_conv_transpose2d(Checker *c, const Call *call) {
    Node *x = call->t[0], *w = call->t[1], *b = call->nt > 2 ? call->t[2] : NULL;
    for (int i = 0; i < call->nt; i++) require_f32(call, call->t[i], i);
    const Ast *wa = call->ast->args[1].val;
    require_nchw(c, call, x);
    if (w->shape.rank != 4)
        error_at(wa->loc, "'conv_transpose2d' weight must be rank 4 [C, O/groups, KH, KW], got %s", shp(c, &w->shape));
    if (shape_nsym(&w->shape))
        error_at(wa->loc, "'conv_transpose2d' weight %s must not have a symbolic dimension", shp(c, &w->shape));
    Node *n = new_node(c->g, OP_CONV_TRANSPOSE2D, call->ast->loc);
    int pad[2];
    attr_ints(call, 0, n->stride, 2, false);
    attr_ints(call, 1, pad, 2, false);
    attr_ints(call, 2, n->out_pad, 2, false);
    attr_ints(call, 4, n->dilation, 2, false);
    long long groups = attr_int(call, 3);
    if (groups < 1 || groups > INT32_MAX)
        error_at(attr_loc(call, "groups"), "'conv_transpose2d' groups must be in 1..2^31-1, got %lld", groups);
    n->groups = (int)groups;
    for (int i = 0; i < 2; i++) {
        if (n->stride[i] < 1)
            error_at(attr_loc(call, "stride"), "'conv_transpose2d' stride must be >= 1, got %d", n->stride[i]);
        if (n->dilation[i] < 1)
            error_at(attr_loc(call, "dilation"), "'conv_transpose2d' dilation must be >= 1, got %d", n->dilation[i]);
        if (pad[i] < 0) error_at(attr_loc(call, "padding"), "'conv_transpose2d' padding must be >= 0, got %d", pad[i]);
        if (n->out_pad[i] < 0)
            error_at(attr_loc(call, "output_padding"), "'conv_transpose2d' output_padding must be >= 0, got %d",
                     n->out_pad[i]);
    }
    for (int i = 0; i < 2; i++)
        if (n->out_pad[i] >= n->stride[i] && n->out_pad[i] >= n->dilation[i])
            error_at(attr_loc(call, "output_padding"), "'conv_transpose2d' output_padding %d (%s) must be smaller than "
                     "either stride %d or dilation %d (as in PyTorch)", n->out_pad[i], i ? "width" : "height",
                     n->stride[i], n->dilation[i]);
    int64_t C = x->shape.d[1].c, Cw = w->shape.d[0].c, Og = w->shape.d[1].c, O;
    if (Cw != C)
        error_at(wa->loc, "'conv_transpose2d' weight %s must have the input's %lld channels first ([C, O/groups, KH, KW], "
                 "input %s)", shp(c, &w->shape), (long long)C, shp(c, &x->shape));
    if (C % groups)
        error_at(attr_loc(call, "groups"), "'conv_transpose2d' groups %lld does not divide input channels %lld", groups,
                 (long long)C);
    if (__builtin_mul_overflow(Og, (int64_t)groups, &O) || O > MAX_ELEMS)
        error_at(attr_loc(call, "groups"), "'conv_transpose2d' output channels %lld x groups %lld are too many",
                 (long long)Og, groups);
    if (b && (b->shape.rank != 1 || !dim_eq(b->shape.d[0], dim_const(O))))
        error_at(call->ast->args[2].val->loc, "'conv_transpose2d' bias must be [%lld] (one per output channel), got %s",
                 (long long)O, shp(c, &b->shape));
    int64_t out[2];
    for (int i = 0; i < 2; i++) {
        int64_t k = w->shape.d[2 + i].c, in = x->shape.d[2 + i].c;
        if (k > INT32_MAX)
            error_at(wa->loc, "'conv_transpose2d' kernel %s %lld is more than the maximum 2^31-1", i ? "width" : "height",
                     (long long)k);
        n->kernel[i] = (int)k;
        /* in, k <= 2^40 and the int attributes: no overflow in int64 below 2^40 * 2^31 + ... ; checked anyway */
        int64_t o;
        bool ovf = __builtin_mul_overflow(in - 1, (int64_t)n->stride[i], &o);
        int64_t ext = window_extent(k, n->dilation[i]);
        ovf = ovf || ext == INT64_MAX || __builtin_add_overflow(o, ext - 2 * (int64_t)pad[i] + n->out_pad[i], &o);
        if (ovf || o > MAX_ELEMS)
            error_at(call->ast->loc, "'conv_transpose2d' output %s is too large", i ? "width" : "height");
        if (o < 1)
            error_at(call->ast->loc, "'conv_transpose2d' output size %s (%lld - 1) * %d - 2 * %d + %d * (%lld - 1) + %d + 1 "
                     "= %lld is empty", i ? "width" : "height", (long long)in, n->stride[i], pad[i], n->dilation[i],
                     (long long)k, n->out_pad[i], (long long)o);
        out[i] = o;
    }
    n->pad[0] = n->pad[2] = pad[0];
    n->pad[1] = n->pad[3] = pad[1];
    n->in[0] = x;
    n->in[1] = w;
    n->nin = 2;
    n->shape = (Shape){4, {x->shape.d[0], {O, {0}}, {out[0], {0}}, {out[1], {0}}}};
    if (!b) return n;
    Shape bs = {3, {{O, {0}}, {1, {0}}, {1, {0}}}};
    return mk_binary(c, OP_ADD, call->ast->loc, n, mk_reshape(c, call->ast->loc, b, bs));
}

static Node *lower_pool(Checker *c, const Call *call) {
    OpKind op = call->spec->op;
    Node *x = call->t[0];
    require_f32(call, x, 0);
    require_nchw(c, call, x);
    Node *n = new_node(c->g, op, call->ast->loc);
    if (!call->attr[0]) error_at(call->ast->loc, "'%s' needs a kernel size, e.g. %s(x, 2)", call->spec->name, call->spec->name);
    attr_ints(call, 0, n->kernel, 2, false);
    for (int i = 0; i < 2; i++)
        if (n->kernel[i] < 1) error_at(call->attr[0]->loc, "'%s' kernel must be >= 1, got %d", call->spec->name, n->kernel[i]);
    if (call->attr[1]) attr_ints(call, 1, n->stride, 2, false);
    else memcpy(n->stride, n->kernel, sizeof n->stride); /* stride=kernel */
    attr_ints(call, 2, n->pad, 4, true);
    if (op == OP_MAXPOOL2D) {
        attr_ints(call, 3, n->dilation, 2, false);
        n->ceil_mode = attr_bool(call, 4);
    } else {
        n->dilation[0] = n->dilation[1] = 1;
        n->ceil_mode = attr_bool(call, 3);
        n->count_include_pad = attr_bool(call, 4);
    }
    check_window_attrs(call, n->stride, n->dilation, n->pad);
    for (int i = 0; i < 4; i++) { /* int64: 2 * pad and the extent overflow int (pad 2^31-1, dilation 2^30) */
        int64_t eff = window_extent(n->kernel[i % 2], n->dilation[i % 2]);
        if (2 * (int64_t)n->pad[i] > eff)
            error_at(call->attr[2] ? call->attr[2]->loc : call->ast->loc,
                     "'%s' padding %d is more than half the kernel size %lld (as in PyTorch, a window may not lie "
                     "entirely in the padding)", call->spec->name, n->pad[i], (long long)eff);
    }
    n->in[0] = x;
    n->nin = 1;
    n->shape = x->shape;
    window_shape(c, call, n, x, n->kernel[0], n->kernel[1]);
    return n;
}

/* A number: a literal, possibly negated, or an integer (a block's too). */
static bool number_literal(const Ast *v, double *out) {
    long long i;
    if (v->kind == AST_NUM && !v->is_int) return *out = v->num, true;
    if (v->kind == AST_NEG && v->lhs->kind == AST_NUM && !v->lhs->is_int) return *out = -v->lhs->num, true;
    if (int_literal(v, &i)) return *out = (double)i, true;
    return false;
}

/* interpolate(x[N, C, H, W], size | scale_factor, mode, align_corners) -> [N, C, OH, OW], as
 * F.interpolate: exactly one of size ([oh, ow] or one for both) and scale_factor (a number or
 * [sh, sw], > 0); with scale_factor the output is floor(H * sh) (in double, as PyTorch's Python
 * computes it) and the kernel's scale is 1/sh (recompute_scale_factor=None); align_corners only
 * with bilinear (PyTorch refuses it for nearest even when false). */
static Node *lower_interpolate(Checker *c, const Call *call) {
    const char *fn = call->spec->name;
    Node *x = call->t[0];
    require_f32(call, x, 0);
    require_nchw(c, call, x);
    const Ast *size = call->attr[0], *sf = call->attr[1];
    if (size && sf) error_at(call->attr_loc[1], "'%s' takes size or scale_factor, not both", fn);
    if (!size && !sf) error_at(call->ast->loc, "'%s' needs size or scale_factor, e.g. %s(x, scale_factor=2)", fn, fn);
    Node *n = new_node(c->g, OP_INTERPOLATE, call->ast->loc);
    n->bilinear = attr_enum(call, 2) == 1;
    n->align_corners = attr_bool(call, 3);
    if (call->attr[3] && !n->bilinear)
        error_at(call->attr_loc[3], "'%s' align_corners can only be set with mode=bilinear (as in PyTorch)", fn);
    int64_t in[2] = {x->shape.d[2].c, x->shape.d[3].c}, out[2];
    if (size) {
        int os[2];
        attr_ints(call, 0, os, 2, false);
        for (int i = 0; i < 2; i++) {
            if (os[i] < 1) error_at(size->loc, "'%s' size must be >= 1, got %d", fn, os[i]);
            out[i] = os[i];
            n->scale[i] = 0;
        }
    } else {
        double s[2];
        if (sf->kind == AST_LIST) {
            if (sf->nitems != 2) error_at(sf->loc, "'%s' scale_factor must be a number or [h, w], got '%s'", fn, ast_text(sf));
            for (int i = 0; i < 2; i++)
                if (!number_literal(sf->items[i], &s[i]))
                    error_at(sf->items[i]->loc, "'%s' scale_factor must hold numbers, got '%s'", fn, ast_text(sf->items[i]));
        } else if (!number_literal(sf, &s[0])) {
            error_at(sf->loc, "'%s' scale_factor must be a number or [h, w], got '%s'", fn, ast_text(sf));
        } else {
            s[1] = s[0];
        }
        for (int i = 0; i < 2; i++) {
            if (!(s[i] > 0) || isinf(s[i])) error_at(sf->loc, "'%s' scale_factor must be positive and finite, got %g", fn, s[i]);
            double o = floor((double)in[i] * s[i]);
            if (o < 1 || o > MAX_ELEMS)
                error_at(sf->loc, "'%s' output %s floor(%lld * %g) = %.0f is %s", fn, i ? "width" : "height",
                         (long long)in[i], s[i], o, o < 1 ? "empty" : "too large");
            out[i] = (int64_t)o;
            n->scale[i] = s[i];
        }
    }
    n->in[0] = x;
    n->nin = 1;
    n->shape = x->shape;
    n->shape.d[2] = dim_const(out[0]);
    n->shape.d[3] = dim_const(out[1]);
    return n;
}

static Node *lower_adaptive_pool(Checker *c, const Call *call) {
    Node *x = call->t[0];
    require_f32(call, x, 0);
    require_nchw(c, call, x);
    int os[2];
    attr_ints(call, 0, os, 2, false);
    for (int i = 0; i < 2; i++)
        if (os[i] < 1 || os[i] > x->shape.d[2 + i].c)
            error_at(call->attr[0] ? call->attr[0]->loc : call->ast->loc, "'adaptive_avg_pool2d' output size %d must be "
                     "in 1..%lld (the input size)", os[i], (long long)x->shape.d[2 + i].c);
    Node *n = new_node(c->g, OP_ADAPTIVE_AVGPOOL2D, call->ast->loc);
    n->in[0] = x;
    n->nin = 1;
    n->shape = x->shape;
    n->shape.d[2] = dim_const(os[0]);
    n->shape.d[3] = dim_const(os[1]);
    return n;
}

static void require_vec(Checker *c, const Call *call, int i, Dim len, const char *what) {
    Node *p = call->t[i];
    if (p->shape.rank != 1 || !dim_eq(p->shape.d[0], len))
        error_at(call->ast->args[i].val->loc, "'%s' %s must be [%s], got %s", call->spec->name, what, dms(c, len),
                 shp(c, &p->shape));
}

static Node *lower_batch_norm(Checker *c, const Call *call) {
    Node *x = call->t[0];
    for (int i = 0; i < 5; i++) require_f32(call, call->t[i], i);
    if (x->shape.rank < 2)
        error_at(call->ast->args[0].val->loc, "'batch_norm' input must have rank >= 2 [N, C, ...], got %s", shp(c, &x->shape));
    Dim C = x->shape.d[1];
    if (dim_is_sym(C)) error_at(call->ast->args[0].val->loc, "'batch_norm' channels (axis 1) may not be symbolic");
    static const char *what[] = {"", "weight", "bias", "running_mean", "running_var"};
    for (int i = 1; i < 5; i++) require_vec(c, call, i, C, what[i]);
    Node *n = new_node(c->g, OP_BATCH_NORM, call->ast->loc);
    for (int i = 0; i < call->nt; i++) n->in[i] = call->t[i];
    n->nin = call->nt;
    n->shape = x->shape;
    n->eps = attr_float(call, 0);
    if (!(n->eps >= 0)) error_at(call->attr[0]->loc, "'batch_norm' eps must be >= 0");
    n->fattr[0] = attr_float(call, 1);
    if (!(n->fattr[0] >= 0 && n->fattr[0] <= 1))
        error_at(call->attr[1]->loc, "'batch_norm' momentum must be in [0, 1], got %g", n->fattr[0]);
    return n;
}

/* A layer_norm node normalizing x over its axes axis.. (rows = the product of the axes before,
 * D = the product of those from axis on: one mrt_layernorm_f32 call), with an optional weight
 * and bias of D elements (NULL: none). */
static Node *mk_layer_norm(Checker *c, Loc loc, Node *x, int axis, Node *w, Node *b, double eps) {
    Node *n = new_node(c->g, OP_LAYER_NORM, loc);
    n->in[n->nin++] = x;
    if (w) n->in[n->nin++] = w;
    if (b) n->in[n->nin++] = b;
    n->shape = x->shape;
    n->axis = axis;
    n->eps = eps;
    return n;
}

/* eps, checked: >= 0 (NaN refused). */
static double attr_eps(const Call *call, int k) {
    double eps = attr_float(call, k);
    if (!(eps >= 0)) error_at(attr_loc(call, "eps"), "'%s' eps must be >= 0", call->spec->name);
    return eps;
}

/* layer_norm(x, weight?, bias?, eps, normalized_shape): PyTorch's F.layer_norm over the last k
 * axes, normalized_shape their sizes (an int, or a list as nn.LayerNorm((C, H, W)) takes;
 * default: the last axis); weight and bias, when given, have exactly that shape. */
static Node *lower_layer_norm(Checker *c, const Call *call) {
    Node *x = call->t[0];
    for (int i = 0; i < call->nt; i++) require_f32(call, call->t[i], i);
    int r = x->shape.rank;
    if (r < 1) error_at(call->ast->args[0].val->loc, "'layer_norm' needs a tensor of rank >= 1");
    const Ast *v = call->attr[1];
    Shape ns = {1, {x->shape.d[r - 1]}};
    if (v && v->kind == AST_LIST) {
        if (v->nitems < 1 || v->nitems > r)
            error_at(v->loc, "'layer_norm' normalized_shape %s has %d entries; the input %s has rank %d (1 to %d "
                     "entries)", ast_text(v), v->nitems, shp(c, &x->shape), r, r);
        ns.rank = v->nitems;
        for (int i = 0; i < v->nitems; i++) {
            long long k;
            if (!int_literal(v->items[i], &k) || k < 1 || k > MAX_ELEMS)
                error_at(v->items[i]->loc, "'layer_norm' normalized_shape holds positive integers, got '%s'",
                         ast_text(v->items[i]));
            ns.d[i] = dim_const(k);
        }
    } else if (v) {
        long long k = attr_int(call, 1);
        if (k < 1 || k > MAX_ELEMS)
            error_at(v->loc, "'layer_norm' normalized_shape holds positive integers, got '%s'", ast_text(v));
        ns.d[0] = dim_const(k);
    }
    int axis = r - ns.rank;
    for (int i = 0; i < ns.rank; i++) {
        Dim d = x->shape.d[axis + i];
        if (dim_is_sym(d)) error_at(call->ast->args[0].val->loc, "'layer_norm' normalized axes may not be symbolic");
        if (v && !dim_eq(d, ns.d[i])) {
            Shape last = {ns.rank, {{0}}}; /* what it would be: the input's last ns.rank axes */
            for (int j = 0; j < ns.rank; j++) last.d[j] = x->shape.d[axis + j];
            error_at(v->loc, "'layer_norm' normalized_shape %s is not the last %d ax%s of the input %s (that is "
                     "normalized_shape=%s; to normalize other axes, permute them to the end first)", shp(c, &ns),
                     ns.rank, ns.rank == 1 ? "is" : "es", shp(c, &x->shape), shp(c, &last));
        }
    }
    static const char *what[] = {"", "weight", "bias"};
    for (int i = 1; i < call->nt; i++) {
        const Shape *ps = &call->t[i]->shape;
        bool ok = ps->rank == ns.rank;
        for (int j = 0; ok && j < ns.rank; j++) ok = dim_eq(ps->d[j], ns.d[j]);
        if (!ok)
            error_at(call->ast->args[i].val->loc, "'layer_norm' %s must be %s, got %s", what[i], shp(c, &ns),
                     shp(c, ps));
    }
    return mk_layer_norm(c, call->ast->loc, x, axis, call->nt > 1 ? call->t[1] : NULL,
                         call->nt > 2 ? call->t[2] : NULL, attr_eps(call, 0));
}

/* y * weight + bias with weight and bias [C] broadcast along axis 1 of y [N, C, ...]. */
static Node *channel_affine(Checker *c, const Call *call, Node *y) {
    if (call->nt < 2) return y;
    Shape cs = {y->shape.rank - 1, {{0}}};
    cs.d[0] = y->shape.d[1];
    for (int i = 1; i < cs.rank; i++) cs.d[i] = dim_const(1);
    y = mk_binary(c, OP_MUL, call->ast->loc, y, mk_reshape(c, call->ast->loc, call->t[1], cs));
    if (call->nt < 3) return y;
    return mk_binary(c, OP_ADD, call->ast->loc, y, mk_reshape(c, call->ast->loc, call->t[2], cs));
}

/* group_norm(x[N, C, *], weight[C]?, bias[C]?, num_groups, eps) and instance_norm (num_groups =
 * C): the statistics of each (image, group) over its C/G channels and every spatial position,
 * as PyTorch's F.group_norm and F.instance_norm (inference: no running stats). Lowered to a
 * layer_norm over the view [N, G, C/G * spatial] and the per-channel weight and bias after it
 * (fused elementwise). */
static Node *lower_group_norm(Checker *c, const Call *call) {
    bool inst = !strcmp(call->spec->name, "instance_norm");
    Node *x = call->t[0];
    for (int i = 0; i < call->nt; i++) require_f32(call, call->t[i], i);
    int r = x->shape.rank;
    if (r < (inst ? 3 : 2))
        error_at(call->ast->args[0].val->loc, "'%s' input must have rank >= %d [N, C, %s], got %s", call->spec->name,
                 inst ? 3 : 2, inst ? "L, ..." : "...", shp(c, &x->shape));
    for (int i = 1; i < r; i++)
        if (dim_is_sym(x->shape.d[i]))
            error_at(call->ast->args[0].val->loc, "'%s' input %s may have a symbolic dimension only in N", call->spec->name,
                     shp(c, &x->shape));
    int64_t C = x->shape.d[1].c;
    long long G = C;
    if (!inst) {
        G = attr_int(call, 0);
        if (G < 1) error_at(attr_loc(call, "num_groups"), "'group_norm' num_groups must be >= 1, got %lld", G);
        if (C % G)
            error_at(attr_loc(call, "num_groups"), "'group_norm' num_groups %lld does not divide the %lld channels of "
                     "the input %s", G, (long long)C, shp(c, &x->shape));
    }
    static const char *what[] = {"", "weight", "bias"};
    for (int i = 1; i < call->nt; i++) require_vec(c, call, i, x->shape.d[1], what[i]);
    Dim rest = {C / G, {0}};
    for (int i = 2; i < r; i++) rest = dim_mul(rest, x->shape.d[i], NULL);
    Shape gs = {3, {x->shape.d[0], {G, {0}}, rest}};
    Node *y = mk_layer_norm(c, call->ast->loc, mk_reshape(c, call->ast->loc, x, gs), 2, NULL, NULL,
                            attr_eps(call, inst ? 0 : 1));
    return channel_affine(c, call, mk_reshape(c, call->ast->loc, y, x->shape));
}

static Node *lower_flatten(Checker *c, const Call *call) {
    Node *x = call->t[0];
    int r = x->shape.rank;
    if (r == 0) return mk_reshape(c, call->ast->loc, x, (Shape){1, {{1, {0}}}});
    int a = norm_axis(call, call->attr[0], call->ast->loc, attr_int(call, 0), r, "start_dim");
    int b = norm_axis(call, call->attr[1], call->ast->loc, attr_int(call, 1), r, "end_dim");
    if (a > b) error_at(call->ast->loc, "'flatten' start_dim %d comes after end_dim %d", a, b);
    Shape s = {0};
    for (int i = 0; i < a; i++) s.d[s.rank++] = x->shape.d[i];
    Dim m = {1, {0}};
    for (int i = a; i <= b; i++) {
        bool ok;
        m = dim_mul(m, x->shape.d[i], &ok);
        if (!ok) ICE("flatten of %s overflowed: its element count is capped", shp(c, &x->shape));
    }
    s.d[s.rank++] = m;
    for (int i = b + 1; i < r; i++) s.d[s.rank++] = x->shape.d[i];
    return mk_reshape(c, call->ast->loc, x, s);
}

static Node *lower_concat(Checker *c, const Call *call) {
    Node *x0 = call->t[0];
    int r = x0->shape.rank;
    int axis = norm_axis(call, call->attr[0], call->ast->loc, attr_int(call, 0), r, "axis");
    Node *n = new_node(c->g, OP_CONCAT, call->ast->loc);
    n->axis = axis;
    n->dtype = x0->dtype;
    n->shape = x0->shape;
    for (int i = 0; i < call->nt; i++) {
        Node *x = call->t[i];
        const Ast *a = call->ast->args[i].val;
        if (x->dtype != x0->dtype)
            error_at(a->loc, "'concat' operand %d is %s but operand 0 is %s", i, dtype_name(x->dtype), dtype_name(x0->dtype));
        if (x->shape.rank != r)
            error_at(a->loc, "'concat' operand %d has shape %s of rank %d; operand 0 %s has rank %d", i, shp(c, &x->shape),
                     x->shape.rank, shp(c, &x0->shape), r);
        for (int d = 0; d < r; d++)
            if (d != axis && !dim_eq(x->shape.d[d], x0->shape.d[d]))
                error_at(a->loc, "'concat' along axis %d: operand %d %s differs from operand 0 %s in dimension %d (%s vs %s)",
                         axis, i, shp(c, &x->shape), shp(c, &x0->shape), d, dms(c, x->shape.d[d]), dms(c, x0->shape.d[d]));
        if (i > 0) {
            Dim s0 = n->shape.d[axis], s1 = x->shape.d[axis];
            if (memcmp(s0.e, s1.e, sizeof s0.e))
                error_at(a->loc, "'concat' along axis %d adds sizes %s and %s: the sum is not a size the compiler can "
                         "track (sizes are products of integers and symbolic dimensions)", axis, dms(c, s0), dms(c, s1));
            int64_t sum;
            if (__builtin_add_overflow(s0.c, s1.c, &sum) || sum > MAX_ELEMS)
                error_at(a->loc, "'concat' along axis %d: operand %d makes the size %s + %s, more than the maximum 2^40",
                         axis, i, dms(c, s0), dms(c, s1));
            n->shape.d[axis].c = sum;
        }
        n->in[i] = x;
    }
    n->nin = call->nt;
    return n;
}

static Node *mk_slice(Checker *c, Loc loc, Node *x, int axis, int64_t start, int64_t step, int64_t len);

/* A run-time condition on the symbols' sizes: dim >= min, else the run fails with the message. */
static void add_shape_check(Checker *c, Loc loc, const char *op, Dim dim, int64_t min) {
    Graph *g = c->g;
    if (dim_max(g, dim) < min)
        error_at(loc, "'%s' needs %s >= %" PRId64 ", but its bound is %" PRId64 " (--max-batch, --max-dim)", op,
                 dms(c, dim), min, dim_max(g, dim));
    g->checks = xgrow_array(g->checks, g->nchecks, &g->capchecks, sizeof *g->checks);
    g->checks[g->nchecks++] = (struct ShapeCheck){dim, min, loc, op};
}

/* slice(x, axis, start, end, step) where the axis or the end is symbolic. Sizes are monomials
 * (see Dim), so three forms have a static shape:
 *   the whole axis:                      slice(x, 1, 0, seq) of [batch, seq, 64], or no end;
 *   a prefix of a fixed axis up to a size: slice(pos_table, 0, 0, seq), step 1 (the bound of
 *                                        seq must fit in the axis: a compile-time check);
 *   fixed bounds on a symbolic axis:     slice(h, 1, 0, 1) (BERT's [CLS] row), start and end
 *                                        >= 0 (the run checks that the axis reaches end). */
static Node *slice_symbolic(Checker *c, const Call *call, Node *x, int axis, Dim L, Dim end, long long step) {
    Loc loc = call->ast->loc;
    const Ast *sa = call->attr[1];
    Dim start = dim_const(0);
    if (sa && !size_dim(sa, &start))
        error_at(sa->loc, "attribute 'start' of 'slice' must be an integer or a size, got '%s'", ast_text(sa));
    if (dim_is_sym(start))
        error_at(sa->loc, "'slice' start %s is symbolic; a slice starts at a fixed index", dms(c, start));
    if (!dim_is_sym(end) && end.c < 0)
        error_at(call->attr[2]->loc, "'slice' end %lld counts from the end of the symbolic axis %d (%s): a symbolic "
                 "axis is sliced with indices >= 0", (long long)end.c, axis, dms(c, L));
    if (start.c < 0)
        error_at(sa->loc, "'slice' start %lld counts from the end of axis %d (%s): with a symbolic size, slices use "
                 "indices >= 0", (long long)start.c, axis, dms(c, L));
    if (dim_eq(end, L) && start.c == 0 && step == 1) return x; /* the whole axis */
    if (dim_is_sym(end)) {
        if (start.c != 0 || step != 1)
            error_at(loc, "'slice' from %lld to %s with step %lld has a length that is not a product of sizes; a "
                     "symbolic end needs start 0 and step 1", (long long)start.c, dms(c, end), step);
        if (!dim_is_sym(L)) {
            if (dim_max(c->g, end) > L.c)
                error_at(call->attr[2]->loc, "'slice' end %s may be up to %" PRId64 " (its bound), more than the %" PRId64
                         " of axis %d of %s", dms(c, end), dim_max(c->g, end), L.c, axis, shp(c, &x->shape));
        } else {
            error_at(call->attr[2]->loc, "'slice' of the symbolic axis %d (%s) up to %s: a symbolic axis is sliced "
                     "whole or between fixed indices", axis, dms(c, L), dms(c, end));
        }
        Node *n = mk_slice(c, loc, x, axis, 0, 1, 1);
        n->shape.d[axis] = end;
        return n;
    }
    if (start.c >= end.c)
        error_at(loc, "'slice' of axis %d (%s) from %lld to %lld is empty", axis, dms(c, L), (long long)start.c,
                 (long long)end.c);
    long long len = (end.c - start.c - 1) / step + 1;
    Node *n = mk_slice(c, loc, x, axis, start.c, step, len);
    add_shape_check(c, loc, "slice", L, end.c);
    return n;
}

static Node *lower_slice(Checker *c, const Call *call) {
    Node *x = call->t[0];
    int r = x->shape.rank;
    int axis = norm_axis(call, call->attr[0], call->ast->loc, attr_int(call, 0), r, "axis");
    Dim L = x->shape.d[axis];
    long long step = attr_int(call, 3);
    if (step < 1) error_at(call->attr[3]->loc, "'slice' step must be >= 1, got %lld", step);
    Dim endd = L;
    if (call->attr[2] && !size_dim(call->attr[2], &endd))
        error_at(call->attr[2]->loc, "attribute 'end' of 'slice' must be an integer or a size, got '%s'",
                 ast_text(call->attr[2]));
    if (dim_is_sym(L) || dim_is_sym(endd))
        return slice_symbolic(c, call, x, axis, L, endd, step);
    long long start = attr_int(call, 1), end = endd.c;
    if (start < 0) start += L.c;
    if (end < 0) end += L.c;
    start = start < 0 ? 0 : start > L.c ? L.c : start;
    end = end < 0 ? 0 : end > L.c ? L.c : end;
    long long len = end > start ? (end - start - 1) / step + 1 : 0; /* step may be up to 2^53: no end + step */
    if (len < 1)
        error_at(call->ast->loc, "'slice' of axis %d (size %lld) from %lld to %lld is empty", axis, (long long)L.c,
                 start, end);
    return mk_slice(c, call->ast->loc, x, axis, start, step, len);
}

#define MAX_RESULTS 64 /* tensors one statement may bind (a, b, ... = chunk(x, n)) */

/* split(x, split_size_or_sections, dim=0) and chunk(x, chunks, dim=0), as PyTorch defines them:
 * split by an integer cuts pieces of that size (the last may be smaller), by a list pieces of
 * those sizes (which must add up to the axis); chunk cuts ceil(n / chunks)-sized pieces, so it
 * may give fewer than `chunks` (chunk of 6 into 4 gives 3 of 2). Each piece is a slice, read
 * in place by the kernels that use it. Returns the number of pieces, in out[]. */
static int lower_split_chunk(Checker *c, const Call *call, Node **out) {
    Node *x = call->t[0];
    bool is_chunk = !strcmp(call->spec->name, "chunk");
    int r = x->shape.rank;
    int axis = norm_axis(call, call->attr[1], call->ast->loc, attr_int(call, 1), r, "dim");
    Dim L = x->shape.d[axis];
    if (dim_is_sym(L))
        error_at(call->ast->loc, "'%s' cannot cut a symbolic dimension (dim %d of %s)", call->spec->name, axis,
                 shp(c, &x->shape));
    const Ast *v = call->attr[0];
    int64_t size[MAX_RESULTS];
    int n = 0;
    long long k;
    if (v->kind == AST_LIST && !is_chunk) {
        int64_t total = 0;
        if (v->nitems < 1 || v->nitems > MAX_RESULTS)
            error_at(v->loc, "'split' takes 1 to %d section sizes, got %d", MAX_RESULTS, v->nitems);
        for (int i = 0; i < v->nitems; i++) {
            if (!int_literal(v->items[i], &k) || k < 1)
                error_at(v->items[i]->loc, "'split' section sizes must be positive integers");
            size[n++] = k;
            total += k; /* at most 64 sizes of at most 2^53 each: no overflow */
        }
        if (total != L.c)
            error_at(v->loc, "'split' sections add up to %lld, but dim %d has size %lld", (long long)total, axis,
                     (long long)L.c);
    } else {
        if (!int_literal(v, &k))
            error_at(v->loc, "'%s' %s must be an integer%s", call->spec->name, is_chunk ? "chunks" : "split_size",
                     is_chunk ? "" : " or a list of section sizes");
        if (k < 1)
            error_at(v->loc, "'%s' %s must be positive, got %lld", call->spec->name, is_chunk ? "chunks" : "split_size", k);
        int64_t piece = is_chunk ? (L.c + k - 1) / k : (k < L.c ? k : L.c);
        if ((L.c + piece - 1) / piece > MAX_RESULTS)
            error_at(v->loc, "'%s' would give %lld tensors; at most %d", call->spec->name,
                     (long long)((L.c + piece - 1) / piece), MAX_RESULTS);
        for (int64_t s = 0; s < L.c; s += piece) size[n++] = L.c - s < piece ? L.c - s : piece;
    }
    int64_t start = 0;
    for (int i = 0; i < n; i++) {
        out[i] = mk_slice(c, call->ast->loc, x, axis, start, 1, size[i]);
        start += size[i];
    }
    return n;
}

/* split and chunk used where one tensor is expected. */
static Node *lower_several(Checker *c, const Call *call) {
    (void)c;
    error_at(call->ast->loc, "'%s' gives several tensors: bind them to names, e.g. a, b = %s(x, 2)", call->spec->name,
             call->spec->name);
}

static Node *lower_embedding(Checker *c, const Call *call) {
    Node *ids = call->t[0], *w = call->t[1];
    if (!dtype_is_integer(ids->dtype))
        error_at(call->ast->args[0].val->loc, "'embedding' ids must be i32 or i64, got %s", dtype_name(ids->dtype));
    require_f32(call, w, 1);
    if (w->shape.rank != 2 || shape_nsym(&w->shape))
        error_at(call->ast->args[1].val->loc, "'embedding' weight must be rank 2 [num_embeddings, dim], got %s",
                 shp(c, &w->shape));
    if (ids->shape.rank >= MAX_RANK)
        error_at(call->ast->args[0].val->loc, "'embedding' ids have rank %d; at most %d", ids->shape.rank, MAX_RANK - 1);
    Node *n = new_node(c->g, OP_EMBEDDING, call->ast->loc);
    n->in[0] = ids;
    n->in[1] = w;
    n->nin = 2;
    n->shape = ids->shape;
    n->shape.d[n->shape.rank++] = w->shape.d[1];
    return n;
}

static Node *lower_sdpa(Checker *c, const Call *call) {
    Node *q = call->t[0], *k = call->t[1], *v = call->t[2], *mask = call->nt > 3 ? call->t[3] : NULL;
    for (int i = 0; i < call->nt; i++) require_f32(call, call->t[i], i);
    Loc loc = call->ast->loc;
    const char *op = "scaled_dot_product_attention";
    if (q->shape.rank < 2) error_at(loc, "'%s' query must have rank >= 2 [..., L, E], got %s", op, shp(c, &q->shape));
    Dim E = q->shape.d[q->shape.rank - 1];
    if (!call->attr[1] && dim_is_sym(E))
        error_at(loc, "'%s' query %s has a symbolic head size: give scale=", op, shp(c, &q->shape));
    double scale = call->attr[1] ? attr_float(call, 1) : 1.0 / sqrt((double)E.c); /* 1/sqrt(E) */
    Node *s = mk_matmul(c, loc, op, q, k, true);
    s = mk_binary(c, OP_MUL, loc, s, mk_const(c, loc, scale));
    if (mask) s = mk_binary(c, OP_ADD, loc, s, mask);
    Node *p = new_node(c->g, OP_SOFTMAX, loc);
    p->in[0] = s;
    p->nin = 1;
    p->shape = s->shape;
    p->axis = s->shape.rank - 1;
    p->causal = attr_bool(call, 0);
    p->zero_masked_rows = true;
    return mk_matmul(c, loc, op, p, v, false);
}

/* cond ? a : b; cond is bool, or a number tested against 0 (an i64 attention mask). a and b
 * share a dtype (unify_dtypes), which is the result's. */
static Node *lower_where(Checker *c, const Call *call) {
    Node *ab[2] = {call->t[1], call->t[2]};
    DType dt = unify_dtypes(call, ab, 2);
    Shape s = broadcast(c, call->ast->loc, "where", &call->t[0]->shape, &call->t[1]->shape);
    s = broadcast(c, call->ast->loc, "where", &s, &call->t[2]->shape);
    Node *n = new_node(c->g, OP_WHERE, call->ast->loc);
    for (int i = 0; i < 3; i++) n->in[i] = call->t[i];
    n->nin = 3;
    n->shape = s;
    n->dtype = dt;
    return n;
}

/* Arithmetic that integers share with floats (+ - * neg abs minimum maximum // %): the
 * operands' common dtype (unify_dtypes) is the result's; bool is refused. */
static Node *lower_arith(Checker *c, const Call *call) {
    Node *t[2] = {call->t[0], call->nt > 1 ? call->t[1] : NULL};
    DType dt = unify_dtypes(call, t, call->nt);
    if (dt == DT_BOOL)
        error_at(call->ast->loc, "%s does not take bool tensors: cast(x, dtype=i64) first, or use "
                 "logical_and / logical_or", call_name(call));
    OpKind op = call->spec->op;
    Node *n = op_is_binary(op) ? mk_binary(c, op, call->ast->loc, t[0], t[1]) : mk_unary(c, op, call->ast->loc, t[0]);
    n->dtype = dt;
    return n;
}

/* < <= > >= == != of two tensors of one dtype (unify_dtypes): a bool tensor. */
static Node *lower_compare(Checker *c, const Call *call) {
    Node *t[2] = {call->t[0], call->t[1]};
    unify_dtypes(call, t, 2);
    Node *n = mk_binary(c, call->spec->op, call->ast->loc, t[0], t[1]);
    n->dtype = DT_BOOL;
    return n;
}

/* and, or, xor, not of bool tensors: a bool tensor. A number is refused: compare it first. */
static Node *lower_logical(Checker *c, const Call *call) {
    Node *t[2] = {call->t[0], call->nt > 1 ? call->t[1] : NULL};
    for (int i = 0; i < call->nt; i++)
        if (t[i]->dtype != DT_BOOL || is_literal(t[i]))
            error_at(arg_ast(call, i)->loc, "%s expects bool tensors, got %s%s; compare first, e.g. x != 0",
                     call_name(call), is_literal(t[i]) ? "the number " : "",
                     is_literal(t[i]) ? (arg_ast(call, i)->text ? arg_ast(call, i)->text : "?") : dtype_name(t[i]->dtype));
    OpKind op = call->spec->op;
    Node *n = op_is_binary(op) ? mk_binary(c, op, call->ast->loc, t[0], t[1]) : mk_unary(c, op, call->ast->loc, t[0]);
    n->dtype = DT_BOOL;
    return n;
}

/* The values of a nested list literal into vals (C order) and its shape; the lists of one level
 * have one length (a rectangular table, as torch.tensor requires). */
#define MAX_TABLE 65536
static void table_values(const Ast *v, int depth, Shape *s, double *vals, int64_t *n, bool *ints) {
    if (v->kind != AST_LIST) {
        if (depth != s->rank)
            error_at(v->loc, "'tensor' data is not rectangular: a number at depth %d, lists at depth %d", depth, s->rank);
        if (*n == MAX_TABLE) error_at(v->loc, "'tensor' data has more than %d values; load larger tables as params", MAX_TABLE);
        long long i;
        double f;
        const Ast *u = v->kind == AST_NEG ? v->lhs : v;
        if (u->kind == AST_NUM) {
            f = u->num;
            *ints = *ints && u->is_int;
        } else if (float_name(u, &f)) {
            *ints = false;
        } else if (int_literal(u, &i)) {
            f = (double)i;
        } else {
            error_at(v->loc, "'tensor' data holds numbers, got '%s'", ast_text(v));
        }
        vals[(*n)++] = v->kind == AST_NEG ? -f : f;
        return;
    }
    if (depth == s->rank) { /* the first list at this depth fixes its length */
        if (depth == MAX_RANK) error_at(v->loc, "'tensor' data nests deeper than rank %d", MAX_RANK);
        if (v->nitems == 0) error_at(v->loc, "'tensor' data has an empty list (empty tensors are not supported)");
        s->d[s->rank++] = dim_const(v->nitems);
    } else if (depth > s->rank || s->d[depth].c != v->nitems) {
        error_at(v->loc, "'tensor' data is not rectangular: a list of %d at depth %d, where the first had %lld", v->nitems,
                 depth, depth < s->rank ? (long long)s->d[depth].c : 0LL);
    }
    for (int i = 0; i < v->nitems; i++) table_values(v->items[i], depth + 1, s, vals, n, ints);
}

/* tensor(data, dtype=f32): a constant table. Its values live in the generated C and are copied
 * into the weight region at load time (OP_TABLE is computed at load, like a hoisted value);
 * f16 and bf16 tables are f32 tables cast once at load. An integer dtype takes integers only,
 * bool 0 and 1. */
static Node *lower_tensor(Checker *c, const Call *call) {
    static const DType to[] = {DT_F32, DT_I32, DT_I64, DT_BOOL, DT_F16, DT_BF16}; /* the enum's order in ops.def */
    const Ast *v = call->attr[0];
    Loc loc = call->ast->loc;
    if (!v) error_at(loc, "'tensor' needs its data, e.g. tensor([[1.0, 2.0], [3.0, 4.0]])");
    DType dt = to[attr_enum(call, 1)];
    Shape s = {0};
    double *vals = xalloc(sizeof(double) * MAX_TABLE);
    int64_t n = 0;
    bool ints = true;
    table_values(v, 0, &s, vals, &n, &ints);
    for (int64_t i = 0; i < n; i++) {
        double x = vals[i];
        if (dtype_is_integer(dt) && !(x == floor(x) && fabs(x) <= (dt == DT_I32 ? 2147483647.0 : 9007199254740992.0)))
            error_at(v->loc, "'tensor' of dtype %s: value %d (%g) is not an integer %s holds", dtype_name(dt), (int)i, x,
                     dtype_name(dt));
        if (dt == DT_BOOL && x != 0 && x != 1)
            error_at(v->loc, "'tensor' of dtype bool: value %d is %g, not 0 or 1", (int)i, x);
        if (dt == DT_F32 || dtype_is_half(dt)) vals[i] = (double)(float)x; /* f32 values, as torch.tensor gives */
    }
    (void)ints;
    Node *t = new_node(c->g, OP_TABLE, loc);
    t->nin = 0;
    t->dtype = dtype_is_half(dt) ? DT_F32 : dt;
    t->shape = s;
    t->table = vals;
    t->ntable = n;
    if (!dtype_is_half(dt)) return t;
    Node *h = mk_unary(c, OP_CAST, loc, t);
    h->dtype = dt;
    return h;
}

/* cast(x, dtype=...): the conversions of kprint.c's cast_expr; a cast to x's own dtype is x. */
static Node *lower_cast(Checker *c, const Call *call) {
    static const DType to[] = {DT_F32, DT_I32, DT_I64, DT_BOOL, DT_F16, DT_BF16}; /* the enum's order in ops.def */
    DType dt = to[attr_enum(call, 0)];
    Node *x = call->t[0];
    if (x->dtype == dt) return x;
    Node *n = mk_unary(c, OP_CAST, call->ast->loc, x);
    n->dtype = dt;
    return n;
}

/* ---------------------------------------------------------------- shape and data-movement ops
 *
 * As PyTorch defines them. repeat, repeat_interleave and pad are sugar over expand, slice,
 * reshape and concat, so they fuse like those (an expand or a slice is an affine read, the
 * index maps of fuse.c; a reshape after an expand materializes it; repeat's i mod n has no
 * affine map, hence the extra axis). triu and tril are a where over a mask of iotas (OP_IOTA,
 * a library kernel, arange's too), fused with their producer; cumsum is a scan kernel; gather,
 * index_select and one_hot are one library kernel (OP_GATHER) whose bad indices fail the run
 * as embedding's do. */

/* An integer list attribute k of at most max items into out; returns the count. */
static int attr_int_list(const Call *call, int k, long long *out, int max) {
    const Ast *v = call->attr[k];
    const char *name = call->spec->attrs[k].name, *fn = call->spec->name;
    if (v->kind != AST_LIST) error_at(v->loc, "attribute '%s' of '%s' must be a list of integers, got '%s'", name, fn, ast_text(v));
    if (v->nitems > max)
        error_at(v->loc, "attribute '%s' of '%s' has %d entries; at most %d", name, fn, v->nitems, max);
    for (int i = 0; i < v->nitems; i++)
        if (!int_literal(v->items[i], &out[i]))
            error_at(v->items[i]->loc, "attribute '%s' of '%s' must hold integers, got '%s'", name, fn, ast_text(v->items[i]));
    return v->nitems;
}

static Node *mk_expand_to(Checker *c, Loc loc, Node *x, Shape s) {
    Node *n = new_node(c->g, OP_EXPAND, loc);
    n->in[0] = x;
    n->nin = 1;
    n->dtype = x->dtype;
    n->shape = s;
    return n;
}

static Node *mk_slice(Checker *c, Loc loc, Node *x, int axis, int64_t start, int64_t step, int64_t len) {
    Node *n = new_node(c->g, OP_SLICE, loc);
    n->in[0] = x;
    n->nin = 1;
    n->dtype = x->dtype;
    n->axis = axis;
    n->start = start;
    n->step = step;
    n->shape = x->shape;
    n->shape.d[axis] = dim_const(len);
    return n;
}

/* repeat(x, reps): torch.Tensor.repeat. x is viewed with leading 1s to len(reps) axes; each
 * repeated axis a becomes [reps, a] (a reshape, then an expand of the new axis), merged back. */
static Node *lower_repeat(Checker *c, const Call *call) {
    Node *x = call->t[0];
    Loc loc = call->ast->loc;
    const Ast *v = call->attr[0];
    long long reps[MAX_RANK];
    int r = attr_int_list(call, 0, reps, MAX_RANK), xr = x->shape.rank;
    if (r < xr)
        error_at(v->loc, "'repeat' of a tensor of rank %d needs at least %d repeats, got %d", xr, xr, r);
    /* in: x with leading 1s. A repeated axis of size 1 is expanded in place; any other becomes
     * [reps, size]: pre has a 1 before it, mid that 1 expanded, and out merges the two back. */
    Shape in = {r, {{0}}}, pre = {0}, mid = {0}, out = {r, {{0}}};
    int wide = r;
    for (int i = 0; i < r; i++) {
        if (reps[i] < 1)
            error_at(v->items[i]->loc, "'repeat' repeats must be positive, got %lld (empty tensors are not supported)",
                     reps[i]);
        if (reps[i] > MAX_ELEMS) error_at(v->items[i]->loc, "'repeat' repeats %lld is more than 2^40", reps[i]);
        in.d[i] = i < r - xr ? dim_const(1) : x->shape.d[i - (r - xr)];
        if (in.d[i].c > MAX_ELEMS / reps[i]) error_at(v->items[i]->loc, "'repeat' makes dimension %d more than 2^40", i);
        out.d[i] = dim_mul(in.d[i], dim_const(reps[i]), NULL);
        if (reps[i] > 1 && !dim_is_one(in.d[i])) wide++;
    }
    if (wide > MAX_RANK)
        error_at(v->loc, "'repeat' of %s repeating %d axes needs rank %d on the way, more than %d",
                 shp(c, &x->shape), wide - r, wide, MAX_RANK);
    for (int i = 0; i < r; i++) {
        Dim d = in.d[i];
        bool unit = dim_is_one(d);
        if (reps[i] > 1 && !unit) {
            pre.d[pre.rank++] = dim_const(1);
            mid.d[mid.rank++] = dim_const(reps[i]);
        }
        pre.d[pre.rank++] = d;
        mid.d[mid.rank++] = unit ? out.d[i] : d;
    }
    if (shape_eq(&mid, &in)) return r == xr ? x : mk_reshape(c, loc, x, in); /* nothing repeats */
    /* broadcasting adds leading axes: pre without its leading 1s may be x itself, and then the
     * expand reads x directly (fused with x's producer) */
    Shape lead = pre;
    int k = 0;
    while (k < lead.rank && dim_is_one(lead.d[k]) && lead.rank - k > xr) k++;
    lead.rank -= k;
    memmove(lead.d, lead.d + k, sizeof(Dim) * lead.rank);
    Node *y = shape_eq(&lead, &x->shape) ? x : mk_reshape(c, loc, x, pre);
    y = mk_expand_to(c, loc, y, mid);
    return shape_eq(&mid, &out) ? y : mk_reshape(c, loc, y, out);
}

/* repeat_interleave(x, repeats, dim): each element along dim repeated `repeats` times in a row;
 * without dim, x is flattened first (torch.repeat_interleave). */
static Node *lower_repeat_interleave(Checker *c, const Call *call) {
    Node *x = call->t[0];
    Loc loc = call->ast->loc;
    long long reps = attr_int(call, 0);
    if (reps < 1)
        error_at(call->attr[0]->loc, "'repeat_interleave' repeats must be positive, got %lld (empty tensors are not "
                 "supported)", reps);
    if (reps > MAX_ELEMS) error_at(call->attr[0]->loc, "'repeat_interleave' repeats %lld is more than 2^40", reps);
    int d;
    if (!call->attr[1]) {
        x = mk_reshape(c, loc, x, (Shape){1, {shape_numel(&x->shape)}});
        d = 0;
    } else {
        d = norm_axis(call, call->attr[1], loc, attr_int(call, 1), x->shape.rank, "dim");
    }
    int r = x->shape.rank;
    if (r + 1 > MAX_RANK)
        error_at(loc, "'repeat_interleave' of a rank-%d tensor needs rank %d on the way, more than %d", r, r + 1, MAX_RANK);
    Dim n = x->shape.d[d];
    if (n.c > MAX_ELEMS / reps) error_at(call->attr[0]->loc, "'repeat_interleave' makes dimension %d more than 2^40", d);
    if (reps == 1) return x;
    Shape pre = {r + 1, {{0}}};
    for (int i = 0, j = 0; i <= r; i++) pre.d[i] = i == d + 1 ? dim_const(1) : x->shape.d[j++];
    Shape mid = pre, out = x->shape;
    mid.d[d + 1] = dim_const(reps);
    out.d[d] = dim_mul(n, dim_const(reps), NULL);
    Node *y = mk_reshape(c, loc, x, pre);
    y = mk_expand_to(c, loc, y, mid);
    return mk_reshape(c, loc, y, out);
}

/* pad(x, pad, mode, value): torch.nn.functional.pad. pad holds (before, after) pairs from the
 * last axis backwards. Each padded axis becomes a concat of (up to) three parts: constant:
 * the value broadcast; replicate: the edge slice broadcast; reflect: a reversed slice without
 * the edge. Negative constant pads crop (a slice), as in PyTorch. */
static Node *lower_pad(Checker *c, const Call *call) {
    Node *x = call->t[0];
    Loc loc = call->ast->loc;
    require_f32(call, x, 0);
    const Ast *v = call->attr[0];
    int r = x->shape.rank;
    long long p[2 * MAX_RANK];
    int np = attr_int_list(call, 0, p, 2 * MAX_RANK);
    int mode = attr_enum(call, 1); /* constant, reflect, replicate */
    double value = attr_float(call, 2);
    static const char *const modes[] = {"constant", "reflect", "replicate"};
    if (np % 2) error_at(v->loc, "'pad' list must have an even length (before, after pairs), got %d entries", np);
    if (np > 2 * r)
        error_at(v->loc, "'pad' list of %d entries pads %d axes; a tensor of rank %d has %d", np, np / 2, r, r);
    if (mode) {
        /* PyTorch pads the last 1, 2 or 3 axes of a tensor with 1 or 2 more (batch, channel) */
        int k = np / 2;
        if (k < 1 || k > 3 || r < k + 1 || r > k + 2)
            error_at(v->loc, "'pad' mode %s takes 2 pads for a tensor of rank 2 or 3, 4 for rank 3 or 4, 6 for rank 4 "
                     "or 5 (as PyTorch); got %d for rank %d", modes[mode], np, r);
        if (call->attr[2] && value != 0)
            error_at(call->attr[2]->loc, "'pad' value applies to mode constant only, not %s", modes[mode]);
    }
    for (int i = 0; i < np; i++) {
        int d = r - 1 - i / 2;
        Dim L = x->shape.d[d];
        if (p[i] && dim_is_sym(L))
            error_at(v->items[i]->loc, "'pad' cannot pad a symbolic dimension (axis %d, %s)", d, dms(c, L));
        if (mode && p[i] < 0)
            error_at(v->items[i]->loc, "'pad' mode %s needs pads >= 0, got %lld", modes[mode], p[i]);
        if (mode == 1 && p[i] >= L.c)
            error_at(v->items[i]->loc, "'pad' mode reflect: padding %lld of axis %d must be less than its size %lld",
                     p[i], d, (long long)L.c);
        if (p[i] > MAX_ELEMS) error_at(v->items[i]->loc, "'pad' size %lld is more than 2^40", p[i]);
    }
    for (int i = 0; i + 1 < np; i += 2) {
        int d = r - 1 - i / 2;
        long long lo = p[i], hi = p[i + 1], L = x->shape.d[d].c;
        if (lo == 0 && hi == 0) continue;
        if (lo < 0 || hi < 0) { /* constant mode: crop first */
            long long a = lo < 0 ? -lo : 0, b = hi < 0 ? -hi : 0;
            if (a + b >= L)
                error_at(v->items[i]->loc, "'pad' crops axis %d (size %lld) by %lld, leaving nothing", d, L, a + b);
            x = mk_slice(c, loc, x, d, a, 1, L - a - b);
            L -= a + b;
            if (lo < 0) lo = 0;
            if (hi < 0) hi = 0;
            if (!lo && !hi) continue;
        }
        Node *side[2] = {NULL, NULL}; /* before, after */
        for (int j = 0; j < 2; j++) {
            long long w = j ? hi : lo;
            if (!w) continue;
            Shape sh = x->shape;
            sh.d[d] = dim_const(w);
            if (mode == 0) { /* constant */
                side[j] = mk_expand_to(c, loc, mk_const(c, loc, value), sh);
                side[j]->dtype = DT_F32;
            } else if (mode == 2) { /* replicate: the edge element broadcast */
                side[j] = mk_expand_to(c, loc, mk_slice(c, loc, x, d, j ? L - 1 : 0, 1, 1), sh);
            } else { /* reflect: x[w], ..., x[1] before; x[L-2], ..., x[L-1-w] after */
                side[j] = mk_slice(c, loc, x, d, j ? L - 2 : w, -1, w);
            }
        }
        Node *cat = new_node(c->g, OP_CONCAT, loc);
        cat->axis = d;
        cat->dtype = x->dtype;
        cat->shape = x->shape;
        cat->shape.d[d] = dim_const(L + lo + hi);
        if (side[0]) cat->in[cat->nin++] = side[0];
        cat->in[cat->nin++] = x;
        if (side[1]) cat->in[cat->nin++] = side[1];
        x = cat;
    }
    return x;
}

/* cumsum(x, dim): running sums along dim (a scan kernel; sums in double, as PyTorch's CPU). */
static Node *lower_cumsum(Checker *c, const Call *call) {
    Node *x = call->t[0];
    require_f32(call, x, 0);
    int r = x->shape.rank;
    if (r == 0) error_at(call->ast->loc, "'cumsum' needs a tensor of rank >= 1, got a scalar");
    int d = norm_axis(call, call->attr[0], call->ast->loc, attr_int(call, 0), r, "dim");
    Node *n = new_node(c->g, OP_CUMSUM, call->ast->loc);
    n->in[0] = x;
    n->nin = 1;
    n->axis = d;
    n->shape = x->shape;
    return n;
}

/* An iota: [len] of start + step * i (computed in double), f32 or i64. */
static Node *mk_iota(Checker *c, Loc loc, Dim len, double start, double step, DType dt) {
    Node *n = new_node(c->g, OP_IOTA, loc);
    n->nin = 0;
    n->dtype = dt;
    n->shape = (Shape){1, {len}};
    n->fattr[0] = start;
    n->fattr[1] = step;
    return n;
}

static bool attr_is_int(const Ast *v) {
    long long k;
    if (!v) return true; /* a default: the integers 0 and 1 */
    const Ast *u = v->kind == AST_NEG ? v->lhs : v;
    return u->kind == AST_NUM ? u->is_int : int_literal(v, &k);
}

/* arange(start, end, step), or arange(end): [ceil((end - start) / step)] values start + i*step;
 * i64 when every argument given is an integer, else f32 (PyTorch's rule). */
static Node *lower_arange(Checker *c, const Call *call) {
    Loc loc = call->ast->loc;
    /* arange(seq), arange(0, seq): a symbolic length (start 0, step 1; i64) */
    const Ast *ea = call->attr[1] ? call->attr[1] : call->attr[0];
    Dim send;
    if (ea && size_dim(ea, &send) && dim_is_sym(send)) {
        long long s0 = 0, st = 1;
        if ((call->attr[1] && (!int_literal(call->attr[0], &s0) || s0 != 0)) ||
            (call->attr[2] && (!int_literal(call->attr[2], &st) || st != 1)))
            error_at(loc, "'arange' up to the symbolic size %s starts at 0 with step 1 (its length must be a size)",
                     dms(c, send));
        return mk_iota(c, loc, send, 0, 1, DT_I64);
    }
    double start = attr_float(call, 0), end, step = attr_float(call, 2);
    if (call->attr[1]) {
        end = attr_float(call, 1);
    } else {
        if (!call->attr[0]) error_at(loc, "'arange' needs an end, e.g. arange(10) or arange(0, 10, 2)");
        end = start;
        start = 0;
    }
    bool ints = attr_is_int(call->attr[0]) && attr_is_int(call->attr[1]) && attr_is_int(call->attr[2]);
    for (int k = 0; k < 3; k++)
        if (call->attr[k] && !isfinite(attr_float(call, k)))
            error_at(call->attr[k]->loc, "'arange' %s must be finite", call->spec->attrs[k].name);
    if (step == 0) error_at(call->attr[2]->loc, "'arange' step must be nonzero");
    double len = ceil((end - start) / step);
    if (!(len >= 1))
        error_at(loc, "'arange' from %g to %g by %g is empty (empty tensors are not supported)", start, end, step);
    if (len > MAX_ELEMS) error_at(loc, "'arange' from %g to %g by %g has more than 2^40 elements", start, end, step);
    return mk_iota(c, loc, dim_const((int64_t)len), start, step, ints ? DT_I64 : DT_F32);
}

/* triu / tril(x, diagonal): x where col - row >= diagonal (triu) or <= diagonal (tril), else 0,
 * over the last two axes: where(clamp(+-(col - row - diagonal) + 1, 0, 1), x, 0), with col and
 * row iotas, fused into one elementwise kernel with x. */
static Node *lower_tri(Checker *c, const Call *call) {
    Node *x = call->t[0];
    Loc loc = call->ast->loc;
    bool upper = !strcmp(call->spec->name, "triu");
    require_f32(call, x, 0);
    int r = x->shape.rank;
    if (r < 2) error_at(loc, "'%s' needs a tensor of rank >= 2, got %s", call->spec->name, shp(c, &x->shape));
    Dim R = x->shape.d[r - 2], C = x->shape.d[r - 1];
    int64_t Rmax = dim_max(c->g, R), Cmax = dim_max(c->g, C); /* a symbolic axis at its bound */
    if (Rmax > (1 << 24) || Cmax > (1 << 24))
        error_at(loc, "'%s' of %s: the last two axes must be at most 2^24", call->spec->name, shp(c, &x->shape));
    long long k = attr_int(call, 0);
    if (k > Cmax + 1) k = Cmax + 1; /* beyond either end the mask is all or nothing; keeps k exact in f32 */
    if (k < -Rmax - 1) k = -Rmax - 1;
    Node *col = mk_reshape(c, loc, mk_iota(c, loc, C, 0, 1, DT_F32), (Shape){2, {dim_const(1), C}});
    Node *row = mk_reshape(c, loc, mk_iota(c, loc, R, 0, 1, DT_F32), (Shape){2, {R, dim_const(1)}});
    Node *dif = upper ? mk_binary(c, OP_SUB, loc, col, row) : mk_binary(c, OP_SUB, loc, row, col);
    /* triu: col - row - k + 1 >= 1 exactly when col - row >= k; tril: row - col + k + 1 */
    Node *m = mk_binary(c, OP_ADD, loc, dif, mk_const(c, loc, (double)(upper ? 1 - k : 1 + k)));
    m = mk_unary(c, OP_CLAMP, loc, m);
    m->fattr[0] = 0;
    m->fattr[1] = 1;
    Node *n = new_node(c->g, OP_WHERE, loc);
    n->in[0] = m;
    n->in[1] = x;
    n->in[2] = mk_const(c, loc, 0);
    n->nin = 3;
    n->shape = broadcast(c, loc, call->spec->name, &m->shape, &x->shape);
    return n;
}

/* gather(x, dim, index): out[..., i, ...] = x[..., index[..., i, ...], ...] along dim, index i64 of
 * x's rank and at most its size on the other axes (x is cut to it); index_select(x, dim, index):
 * the entries index (1-D) of x along dim. One kernel (OP_GATHER); an index outside
 * [0, size of dim) fails the run naming the call, the index and its position. */
static Node *lower_gather(Checker *c, const Call *call) {
    Node *x = call->t[0], *idx = call->t[1];
    Loc loc = call->ast->loc;
    const char *fn = call->spec->name;
    bool select = !strcmp(fn, "index_select");
    const Ast *ia = call->ast->args[0].val;
    for (int i = 0; i < call->ast->nargs; i++)
        if (!call->ast->args[i].key && i > 0 && call->ast->args[i].val != call->attr[0]) {
            ia = call->ast->args[i].val;
            break;
        }
    require_f32(call, x, 0);
    if (!dtype_is_integer(idx->dtype) || (!select && idx->dtype != DT_I64))
        error_at(ia->loc, "'%s' index must be %s, got %s", fn, select ? "i32 or i64" : "i64", dtype_name(idx->dtype));
    int r = x->shape.rank;
    int d = norm_axis(call, call->attr[0], loc, attr_int(call, 0), r, "dim");
    Node *n = new_node(c->g, OP_GATHER, loc);
    n->axis = d;
    if (select) {
        if (idx->shape.rank != 1)
            error_at(ia->loc, "'index_select' index must be 1-D, got %s", shp(c, &idx->shape));
        n->gather_mode = GATHER_INDEX_SELECT;
        n->shape = x->shape;
        n->shape.d[d] = idx->shape.d[0];
    } else {
        if (idx->shape.rank != r)
            error_at(ia->loc, "'gather' index %s has rank %d; x %s has rank %d (they must match)", shp(c, &idx->shape),
                     idx->shape.rank, shp(c, &x->shape), r);
        for (int i = 0; i < r; i++) {
            Dim di = idx->shape.d[i], dx = x->shape.d[i];
            if (i == d || dim_eq(di, dx)) continue;
            if (dim_is_sym(di) || (!dim_is_sym(dx) && di.c > dx.c))
                error_at(ia->loc, "'gather' index %s is larger than x %s in dimension %d (%s > %s)", shp(c, &idx->shape),
                         shp(c, &x->shape), i, dms(c, di), dms(c, dx));
            if (dim_is_sym(dx)) add_shape_check(c, loc, "gather", dx, di.c); /* the run checks x reaches it */
            x = mk_slice(c, loc, x, i, 0, 1, di.c); /* the part of x the index covers */
        }
        n->gather_mode = GATHER_ELEMENTS;
        n->shape = idx->shape;
    }
    n->in[0] = x;
    n->in[1] = idx;
    n->nin = 2;
    return n;
}

/* one_hot(ids, num_classes): [..., num_classes] of 0 and 1, f32 (so it can feed the f32 ops; PyTorch
 * gives i64). num_classes is required: a size cannot come from the data at compile time. */
static Node *lower_one_hot(Checker *c, const Call *call) {
    Node *ids = call->t[0];
    Loc loc = call->ast->loc;
    if (ids->dtype != DT_I64)
        error_at(call->ast->args[0].val->loc, "'one_hot' ids must be i64, got %s", dtype_name(ids->dtype));
    long long C = attr_int(call, 0);
    if (C < 1)
        error_at(call->attr[0]->loc, "'one_hot' num_classes must be >= 1, got %lld (it cannot be inferred from the data "
                 "at compile time)", C);
    if (C > MAX_ELEMS) error_at(call->attr[0]->loc, "'one_hot' num_classes %lld is more than 2^40", C);
    if (ids->shape.rank >= MAX_RANK)
        error_at(call->ast->args[0].val->loc, "'one_hot' ids have rank %d; at most %d", ids->shape.rank, MAX_RANK - 1);
    Node *n = new_node(c->g, OP_GATHER, loc);
    n->gather_mode = GATHER_ONE_HOT;
    n->in[0] = ids;
    n->nin = 1;
    n->shape = ids->shape;
    n->axis = n->shape.rank; /* the new axis (never the batch's) */
    n->shape.d[n->shape.rank++] = dim_const(C);
    return n;
}

/* ---------------------------------------------------------------- losses (PyTorch's definitions) */

static Node *mk_one_hot(Checker *c, Loc loc, Node *ids, int64_t C) {
    Node *n = new_node(c->g, OP_GATHER, loc);
    n->gather_mode = GATHER_ONE_HOT;
    n->in[0] = ids;
    n->nin = 1;
    n->shape = ids->shape;
    n->axis = n->shape.rank;
    n->shape.d[n->shape.rank++] = dim_const(C);
    return n;
}

/* A per-sample loss (rank >= 1) reduced as `reduction` says: mean (over `count`, or all the
 * elements), sum, or none. */
static Node *loss_reduce(Checker *c, Loc loc, Node *per, int reduction, Node *count) {
    if (reduction == 2) return per;
    int axes[MAX_RANK], n = per->shape.rank;
    for (int i = 0; i < n; i++) axes[i] = n - 1 - i;
    if (reduction == 1 || count) {
        Node *s = n ? reduce_axes(c, OP_SUM, loc, per, axes, n, false) : per;
        return reduction == 1 ? s : mk_binary(c, OP_DIV, loc, s, count);
    }
    return n ? reduce_axes(c, OP_MEAN, loc, per, axes, n, false) : per;
}

/* cross_entropy(input [N, C], target [N] (class ids), ignore_index=-100, label_smoothing=0,
 * reduction=mean) and nll_loss(input = log-probabilities [N, C], target, ignore_index,
 * reduction): torch.nn.functional's definitions. loss_n = -sum_c t_nc log p_nc with t the one-hot
 * target, smoothed to (1 - e) t + e / C; samples whose target is ignore_index count neither in
 * the sum nor in the mean's denominator. A class id outside [0, C) fails the run, naming the
 * call and the id (the one-hot kernel's check). */
static Node *lower_class_loss(Checker *c, const Call *call) {
    bool ce = !strcmp(call->spec->name, "cross_entropy");
    Node *x = call->t[0], *t = call->t[1];
    Loc loc = call->ast->loc;
    require_f32(call, x, 0);
    if (x->shape.rank != 2)
        error_at(arg_ast(call, 0)->loc, "'%s' input must be [N, C] (a batch of class scores), got %s", call->spec->name,
                 shp(c, &x->shape));
    if (!dtype_is_integer(t->dtype) || t->shape.rank != 1 || !dim_eq(t->shape.d[0], x->shape.d[0]))
        error_at(arg_ast(call, 1)->loc, "'%s' target must be class ids i64[N] with N = %s (the input's first axis), got "
                 "%s%s", call->spec->name, dms(c, x->shape.d[0]), dtype_name(t->dtype), shp(c, &t->shape));
    Dim C = x->shape.d[1];
    if (dim_is_sym(C)) error_at(arg_ast(call, 0)->loc, "'%s' classes (axis 1) may not be symbolic", call->spec->name);
    long long ignore = attr_int(call, 0);
    double eps = ce ? attr_float(call, 1) : 0.0;
    int reduction = attr_enum(call, ce ? 2 : 1);
    if (!(eps >= 0 && eps <= 1))
        error_at(attr_loc(call, "label_smoothing"), "'cross_entropy' label_smoothing must be in [0, 1], got %g", eps);
    if (t->dtype != DT_I64) {
        Node *w = mk_unary(c, OP_CAST, loc, t);
        w->dtype = DT_I64;
        t = w;
    }
    Node *lp = ce ? mk_reduce(c, OP_LOG_SOFTMAX, loc, x, 1, true) : x;
    Node *ig = mk_const(c, loc, (double)ignore);
    ig->dtype = DT_I64;
    ig->literal = false;
    Node *valid = mk_binary(c, OP_NE, loc, t, ig);
    valid->dtype = DT_BOOL;
    Node *zero = mk_const(c, loc, 0);
    zero->dtype = DT_I64;
    zero->literal = false;
    Node *safe = new_node(c->g, OP_WHERE, loc);
    safe->in[0] = valid;
    safe->in[1] = t;
    safe->in[2] = zero;
    safe->nin = 3;
    safe->dtype = DT_I64;
    safe->shape = t->shape;
    safe->name = call->t[1]->name; /* run errors name the target and the loss */
    Node *oh = mk_one_hot(c, loc, safe, C.c);
    oh->error_fn = call->spec->name;
    Node *per = mk_unary(c, OP_NEG, loc, mk_reduce(c, OP_SUM, loc, mk_binary(c, OP_MUL, loc, lp, oh), 1, false));
    if (eps > 0) { /* (1 - e) nll + e * (-mean_c log p) */
        Node *smooth = mk_unary(c, OP_NEG, loc, mk_reduce(c, OP_MEAN, loc, lp, 1, false));
        per = mk_binary(c, OP_ADD, loc, mk_binary(c, OP_MUL, loc, per, mk_const(c, loc, 1 - eps)),
                        mk_binary(c, OP_MUL, loc, smooth, mk_const(c, loc, eps)));
    }
    Node *w = new_node(c->g, OP_WHERE, loc);
    w->in[0] = valid;
    w->in[1] = per;
    w->in[2] = mk_const(c, loc, 0.0);
    w->nin = 3;
    w->shape = per->shape;
    per = w;
    Node *count = NULL;
    if (reduction == 0) {
        Node *vf = mk_unary(c, OP_CAST, loc, valid);
        vf->dtype = DT_F32;
        count = reduce_axes(c, OP_SUM, loc, vf, (int[]){0}, 1, false);
    }
    return loss_reduce(c, loc, per, reduction, count);
}

/* mse_loss(input, target, reduction=mean): (input - target)^2, shapes equal (PyTorch warns on
 * broadcasting; here it is an error). */
static Node *lower_mse_loss(Checker *c, const Call *call) {
    Node *a = call->t[0], *b = call->t[1];
    Loc loc = call->ast->loc;
    for (int i = 0; i < 2; i++) require_f32(call, call->t[i], i);
    if (!shape_eq(&a->shape, &b->shape))
        error_at(arg_ast(call, 1)->loc, "'mse_loss' target %s must have the input's shape %s", shp(c, &b->shape),
                 shp(c, &a->shape));
    Node *d = mk_binary(c, OP_SUB, loc, a, b);
    return loss_reduce(c, loc, mk_binary(c, OP_MUL, loc, d, d), attr_enum(call, 0), NULL);
}

/* binary_cross_entropy_with_logits(input, target, reduction=mean): softplus(x) - x * y, whose
 * gradient is sigmoid(x) - y exactly (the softplus kernel is stable for large |x|). */
static Node *lower_bce_logits(Checker *c, const Call *call) {
    Node *x = call->t[0], *y = call->t[1];
    Loc loc = call->ast->loc;
    for (int i = 0; i < 2; i++) require_f32(call, call->t[i], i);
    if (!shape_eq(&x->shape, &y->shape))
        error_at(arg_ast(call, 1)->loc, "'binary_cross_entropy_with_logits' target %s must have the input's shape %s",
                 shp(c, &y->shape), shp(c, &x->shape));
    Node *sp = mk_unary(c, OP_SOFTPLUS, loc, x);
    sp->fattr[0] = 1.0;  /* beta */
    sp->fattr[1] = 20.0; /* threshold */
    return loss_reduce(c, loc, mk_binary(c, OP_SUB, loc, sp, mk_binary(c, OP_MUL, loc, x, y)), attr_enum(call, 0), NULL);
}

/* ---------------------------------------------------------------- blocks */

static const Block *find_block(const Checker *c, const char *name) {
    for (int i = 0; i < c->prog->nblocks; i++)
        if (!strcmp(c->prog->blocks[i]->name, name)) return c->prog->blocks[i];
    return NULL;
}

static void lower_stmt(Checker *c, const Stmt *st);

/* Instantiate block b for call e: bind its parameters, check its body in a scope of its own
 * (params named PREFIX.name), and put the values of its return expressions in out[] (at most
 * MAX_RESULTS); returns how many. */
static int instantiate_all(Checker *c, const Block *b, const Ast *e, Node **out) {
    if (c->depth >= 32) error_at(e->loc, "blocks nested more than 32 deep: is block '%s' recursive?", b->name);
    const Ast *arg[64] = {0};
    Loc argloc[64];
    if (b->nparams > 64) error_at(b->loc, "block '%s' has more than 64 parameters", b->name);
    int npos = 0;
    for (int i = 0; i < e->nargs; i++) {
        const AstArg *a = &e->args[i];
        int k = -1;
        if (a->key) {
            for (int j = 0; j < b->nparams; j++)
                if (!strcmp(b->params[j].name, a->key)) k = j;
            if (k < 0) error_at(a->loc, "block '%s' has no parameter '%s'", b->name, a->key);
        } else {
            k = npos++;
            if (k >= b->nparams)
                error_at(a->loc, "too many arguments to block '%s': it takes %d", b->name, b->nparams);
        }
        if (arg[k]) error_at(a->loc, "parameter '%s' of block '%s' is given twice", b->params[k].name, b->name);
        arg[k] = a->val;
        argloc[k] = a->loc;
    }
    /* Evaluate arguments in the caller's scope. */
    Node *tens[64] = {0};
    long long ival[64];
    int kind[64]; /* 0 tensor, 1 int, 2 bool */
    for (int j = 0; j < b->nparams; j++) {
        const Ast *v = arg[j] ? arg[j] : b->params[j].def;
        if (!v) {
            error_begin(e->loc, "missing argument '%s' for block '%s'", b->params[j].name, b->name);
            note_at(b->params[j].loc, "'%s' is declared here", b->params[j].name);
            diag_exit();
        }
        Sym *sv = v->kind == AST_NAME ? lookup(c, v->name) : NULL;
        if (v->kind == AST_BOOL || (sv && sv->kind == SYM_INT && sv->is_bool)) {
            kind[j] = 2;
            ival[j] = v->kind == AST_BOOL ? v->bval : sv->ival;
        } else if (int_literal(v, &ival[j])) {
            kind[j] = 1;
        } else {
            kind[j] = 0;
            tens[j] = lower_expr(c, v);
        }
    }
    (void)argloc;
    /* The block's own scope. */
    int saved_base = c->scope_base, saved_n = c->nsyms;
    const char *saved_prefix = c->prefix, *saved_block = c->block;
    c->scope_base = c->nsyms;
    if (e->scope) c->prefix = c->prefix ? xprintf("%s.%s", c->prefix, e->scope) : e->scope;
    c->block = b->name;
    c->depth++;
    diag_push_context(e->loc, xprintf("in block '%s'%s%s called here", b->name, c->prefix ? " instantiated as " : "",
                                      c->prefix ? c->prefix : ""));
    for (int j = 0; j < b->nparams; j++) {
        Sym *s = define(c, b->params[j].name, b->params[j].loc, kind[j] ? SYM_INT : SYM_VALUE);
        s->node = tens[j];
        s->ival = ival[j];
        s->is_bool = kind[j] == 2;
        s->used = true;
    }
    for (int i = 0; i < b->nstmts; i++) {
        const Stmt *st = b->stmts[i];
        if (st->kind == ST_INPUT || st->kind == ST_OUTPUT)
            error_at(st->loc, "'%s' is not allowed in a block; a block takes tensors as parameters and returns one",
                     st->kind == ST_INPUT ? "input" : "output");
        lower_stmt(c, st);
    }
    if (b->nrets > MAX_RESULTS) error_at(b->ret_loc, "block '%s' returns %d tensors; at most %d", b->name, b->nrets, MAX_RESULTS);
    for (int i = 0; i < b->nrets; i++) out[i] = lower_expr(c, b->rets[i]);
    diag_pop_context();
    c->depth--;
    pop_syms(c, saved_n);
    c->scope_base = saved_base;
    c->prefix = saved_prefix;
    c->block = saved_block;
    return b->nrets;
}

/* A block used where one tensor is expected. */
static Node *instantiate(Checker *c, const Block *b, const Ast *e) {
    if (b->nrets != 1)
        error_at(e->loc, "block '%s' returns %d tensors: bind them to names, e.g. a, b = %s(...)", b->name, b->nrets,
                 b->name);
    Node *out[1];
    instantiate_all(c, b, e, out);
    return out[0];
}

/* add sub mul div (broadcasting) and the unary functions: one IR op each. */
/* Floating-point elementwise ops: f32, or f16 / bf16 computed in f32 and rounded to the
 * operands' dtype (kprint.c); the operands share one float dtype (unify_dtypes). */
static Node *lower_elementwise(Checker *c, const Call *call) {
    OpKind op = call->spec->op;
    Node *t[2] = {call->t[0], call->nt > 1 ? call->t[1] : NULL};
    bool floats = dtype_is_float(t[0]->dtype) && (call->nt < 2 || dtype_is_float(t[1]->dtype));
    if (call->nt == 2 && !floats)
        error_at(call->ast->loc, "%s expects f32 tensors, got %s and %s%s", call_name(call), dtype_name(call->t[0]->dtype),
                 dtype_name(call->t[1]->dtype), op == OP_DIV && dtype_is_integer(call->t[0]->dtype) ?
                 " (// is floor division of integers; or cast(x, dtype=f32))" : "");
    if (!floats) require_f32(call, call->t[0], 0);
    DType dt = unify_dtypes(call, t, call->nt);
    if (op_is_binary(op)) {
        Node *b = mk_binary(c, op, call->ast->loc, t[0], t[1]);
        b->dtype = dt;
        return b;
    }
    if (!op_is_unary(op)) ICE("'%s' is lowered as elementwise, but '%s' is not", call->spec->name, op_name(op));
    Node *n = mk_unary(c, op, call->ast->loc, call->t[0]);
    n->dtype = dt;
    /* float attributes, in order, become the op's %a and %b */
    if (call->spec->nattrs > 2) ICE("'%s': an elementwise op takes at most 2 attributes", call->spec->name);
    for (int k = 0; k < call->spec->nattrs; k++) {
        if (call->spec->attrs[k].kind != A_FLOAT) ICE("'%s': elementwise attributes are floats", call->spec->name);
        n->fattr[k] = attr_float(call, k);
        if (isnan(n->fattr[k]))
            error_at(call->attr[k]->loc, "'%s' attribute '%s' is NaN", call->spec->name, call->spec->attrs[k].name);
    }
    if (op == OP_CLAMP && n->fattr[0] > n->fattr[1])
        error_at(call->attr[0] ? call->attr[0]->loc : call->ast->loc, "'%s' has %s %g above %s %g", call->spec->name,
                 call->spec->attrs[0].name, n->fattr[0], call->spec->attrs[1].name, n->fattr[1]);
    if (op == OP_SOFTPLUS && n->fattr[0] == 0)
        error_at(call->attr[0]->loc, "'softplus' beta must not be 0");
    return n;
}

static Node *lower_relu6(Checker *c, const Call *call) {
    if (!dtype_is_float(call->t[0]->dtype)) require_f32(call, call->t[0], 0);
    Node *n = mk_unary(c, OP_CLAMP, call->ast->loc, call->t[0]);
    n->dtype = call->t[0]->dtype;
    n->fattr[0] = 0.0;
    n->fattr[1] = 6.0;
    return n;
}

/* dropout at inference is the identity (PyTorch's eval mode); p must still be a probability. */
static Node *lower_dropout(Checker *c, const Call *call) {
    (void)c;
    double p = attr_float(call, 0);
    if (!(p >= 0 && p <= 1))
        error_at(call->attr[0]->loc, "'dropout' p must be in [0, 1], got %g", p);
    if (!c->g->train || p == 0) return call->t[0]; /* inference, or nothing dropped: the identity */
    /* a training build: the mask of (seed, step, site, element), site = the dropouts before it */
    require_f32(call, call->t[0], 0);
    Node *n = mk_unary(c, OP_DROPOUT, call->ast->loc, call->t[0]);
    n->fattr[0] = p;
    n->start = c->g->ndropout++;
    return n;
}

static Node *lower_gelu(Checker *c, const Call *call) {
    if (!dtype_is_float(call->t[0]->dtype)) require_f32(call, call->t[0], 0);
    Node *n = mk_unary(c, attr_enum(call, 0) ? OP_GELU_TANH : OP_GELU, call->ast->loc, call->t[0]);
    n->dtype = call->t[0]->dtype;
    return n;
}

static Node *lower_matmul(Checker *c, const Call *call) {
    require_f32(call, call->t[0], 0);
    require_f32(call, call->t[1], 1);
    return mk_matmul(c, call->ast->loc, "matmul", call->t[0], call->t[1], false);
}

/* ---------------------------------------------------------------- the function table */

static FnSpec fn_specs[] = {
#define FN(name, min_t, max_t, attrs, lower, op, doc) {name, min_t, max_t, attrs, lower, op, doc, {{0}}, 0},
#include "ops.def"
};
#define N_FNS ((int)(sizeof fn_specs / sizeof fn_specs[0]))

/* Parse each row's attribute text ("stride:pair=1 padding:pad=0 ...") once; a malformed row is
 * a bug in ops.def. */
static void fn_specs_init(void) {
    static bool done;
    if (done) return;
    done = true;
    for (int i = 0; i < N_FNS; i++) {
        FnSpec *f = &fn_specs[i];
        /* the table lives as long as the process, not one compilation's arena (a harness
         * compiles many inputs, freeing the arena after each) */
        if (!f->attr_text[0]) continue; /* no attributes (and nothing to keep) */
        char *text = strdup(f->attr_text), *save = NULL;
        if (!text) fatal("out of memory");
        for (char *tok = strtok_r(text, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
            if (f->nattrs == MAX_ATTRS) ICE("ops.def: '%s' has more than %d attributes", f->name, MAX_ATTRS);
            AttrSpec *a = &f->attrs[f->nattrs++];
            char *colon = strchr(tok, ':'), *eq = strchr(tok, '=');
            if (!colon || (eq && eq < colon)) ICE("ops.def: '%s': attribute '%s' has no kind", f->name, tok);
            *colon = 0;
            if (eq) *eq = 0;
            a->name = tok;
            char *kind = colon + 1, *paren = strchr(kind, '(');
            if (paren) {
                char *close = strchr(paren, ')');
                if (!close) ICE("ops.def: '%s': bad enum in '%s'", f->name, kind);
                *close = 0;
                a->enums = paren + 1;
                *paren = 0;
            }
            int k = -1;
            for (int j = 0; j < A__COUNT; j++)
                if (!strcmp(kind, attr_kind_names[j])) k = j;
            if (k < 0) ICE("ops.def: '%s': unknown attribute kind '%s'", f->name, kind);
            a->kind = (AttrKind)k;
            if (!eq) continue;
            a->def = eq + 1;
            char *end;
            if (a->kind == A_BOOL) a->literal = !strcmp(a->def, "true") || !strcmp(a->def, "false");
            else if (a->kind == A_ENUM) a->literal = enum_index(a->enums, a->def) >= 0;
            else if (a->kind == A_FLOAT) a->literal = (strtod(a->def, &end), *end == 0);
            else a->literal = (strtoll(a->def, &end, 10), *end == 0);
        }
        for (int k = 0; k < f->nattrs; k++)
            for (int j = 0; j < k; j++)
                if (!strcmp(f->attrs[k].name, f->attrs[j].name))
                    ICE("ops.def: '%s' has two attributes named '%s'", f->name, f->attrs[k].name);
        for (int j = 0; j < i; j++)
            if (!strcmp(fn_specs[j].name, f->name)) ICE("ops.def: two functions are named '%s'", f->name);
        if (f->op < 0 || f->op >= OP__COUNT) ICE("ops.def: '%s' names no op", f->name);
        if (f->lower == lower_elementwise) {
            /* one op, its operands the call's tensors, its %a %b the call's float attributes */
            OpCategory cat = op_info[f->op].cat;
            int want = cat == CAT_UNARY ? 1 : cat == CAT_BINARY ? 2 : -1;
            if (want < 0 || f->min_t != want || f->max_t != want)
                ICE("ops.def: '%s' is lowered by lower_elementwise, so its op '%s' must be unary or binary and take "
                    "exactly its %d..%d tensors", f->name, op_name(f->op), f->min_t, f->max_t);
            int used = 0;
            for (const char *p = op_info[f->op].c_expr; p && *p; p++)
                if (p[0] == '%' && (p[1] == 'a' || p[1] == 'b') && p[1] - 'a' + 1 > used) used = p[1] - 'a' + 1;
            if (used > f->nattrs)
                ICE("ops.def: the c_expr of '%s' reads %%%c, but '%s' has %d attribute%s", op_name(f->op), 'a' + used - 1,
                    f->name, f->nattrs, f->nattrs == 1 ? "" : "s");
            for (int k = 0; k < f->nattrs; k++)
                if (f->attrs[k].kind != A_FLOAT)
                    ICE("ops.def: '%s' attribute '%s' must be a float (elementwise attributes are the op's %%a %%b)",
                        f->name, f->attrs[k].name);
        }
    }
    validate_op_table();
}



void list_ops(FILE *out) {
    fn_specs_init();
    fprintf(out, "functions of the language (%d):\n", N_FNS);
    for (int i = 0; i < N_FNS; i++) {
        const FnSpec *f = &fn_specs[i];
        fprintf(out, "  %-30s tensors %d", f->name, f->min_t);
        if (f->max_t != f->min_t) fprintf(out, "..%d", f->max_t);
        fprintf(out, "  attrs");
        for (int k = 0; k < f->nattrs; k++) {
            const AttrSpec *a = &f->attrs[k];
            fprintf(out, " %s:%s%s%s%s%s%s", a->name, attr_kind_names[a->kind],
                    a->enums ? "(" : "", a->enums ? a->enums : "", a->enums ? ")" : "", a->def ? "=" : "",
                    a->def ? a->def : "");
        }
        if (!f->nattrs) fprintf(out, " -");
        if (f->lower == lower_dropout) fprintf(out, "  op none (the identity at inference)  ; %s\n", f->doc);
        else fprintf(out, "  op %s (%s)  ; %s\n", op_name(f->op), op_category_name(op_info[f->op].cat), f->doc);
    }
    fprintf(out, "operators: a + b add, a - b sub, a * b mul, a / b div, a // b floor_divide, a %% b remainder, "
                 "a ** b pow (binds tighter than unary -, groups right), a @ b matmul, -x neg, a < b lt, a <= b le, "
                 "a > b gt, a >= b ge, a == b eq, a != b ne (no chains), a and b logical_and, a or b logical_or, "
                 "not x logical_not\n");
    fprintf(out, "defaults that are not literals are computed from the call: stride=kernel (pooling), end=len "
                 "(slice), scale=1/sqrt(E) (attention), dim=all (squeeze)\n");
    fprintf(out, "operations of the graph IR (%d):\n", OP__COUNT);
    for (int i = 0; i < OP__COUNT; i++) {
        const OpInfo *o = &op_info[i];
        fprintf(out, "  %-20s %-28s", o->name, op_category_name(o->cat));
        if (o->c_expr) fprintf(out, "  expr %s", o->c_expr);
        if (o->kernel) fprintf(out, "  kernel mrt_%s", o->kernel);
        if (o->kernel && i != OP_MATMUL && i != OP_TRANSFER) fprintf(out, ", mrt_cuda_%s", o->kernel);
        if (o->inplace) fprintf(out, "  in place");
        fprintf(out, "\n");
    }
}

static const FnSpec *find_fn(const char *name) {
    for (int i = 0; i < N_FNS; i++)
        if (!strcmp(fn_specs[i].name, name)) return &fn_specs[i];
    return NULL;
}

/* An operator (e: AST_BINOP or AST_NEG) is its function's call: `a < b` is lt(a, b), with the
 * same dtype and shape rules; messages name the operator ('<' (lt)). */
static Node *lower_in_f32(Checker *c, Call *call);

static Node *lower_operator(Checker *c, const Ast *e, const char *fn, Node *a, Node *b) {
    const FnSpec *spec = find_fn(fn);
    if (!spec) ICE("operator function '%s' is not in ops.def", fn);
    Call call = {.ast = e, .spec = spec, .t = {a, b}, .nt = b ? 2 : 1};
    return lower_in_f32(c, &call);
}

/* The functions whose kernels compute in f32 only (GEMMs, convolutions, reductions, norms,
 * pooling, data movement through a library kernel): on f16 or bf16 tensors they compute in f32,
 * as PyTorch's CPU kernels for half types do. Each half operand is cast to f32 (the cast fuses
 * into its producer; a param's cast is done once at load), the function runs in f32, and its
 * float result is rounded back to the operands' dtype. Operands of two float dtypes (f16 and
 * f32, f16 and bf16) are an error, as in PyTorch. */
static Node *lower_in_f32(Checker *c, Call *call) {
    static Node *(*const f32_only[])(Checker *, const Call *) = {
        lower_adaptive_pool, lower_batch_norm, lower_conv1d, lower_conv2d, lower_conv_transpose2d, lower_cumsum,
        lower_embedding, lower_gather, lower_group_norm, lower_interpolate, lower_layer_norm, lower_linear,
        lower_logsumexp, lower_matmul, lower_pad, lower_pool, lower_reduce, lower_rms_norm, lower_sdpa, lower_tri,
        lower_var};
    bool listed = false;
    for (size_t i = 0; i < sizeof f32_only / sizeof f32_only[0]; i++) listed |= call->spec->lower == f32_only[i];
    if (!listed) return call->spec->lower(c, call);
    DType half = DT_F32;
    int f32_at = -1;
    /* the index operand (embedding's ids, gather's index) is not a float operand */
    int index_arg = call->spec->lower == lower_embedding ? 0 : call->spec->lower == lower_gather ? 1 : -1;
    for (int i = 0; i < call->nt; i++) {
        DType d = call->t[i]->dtype;
        if (i == index_arg) continue;
        if (d == DT_F32 && !is_literal(call->t[i])) f32_at = i;
        if (!dtype_is_half(d)) continue;
        if (dtype_is_half(half) && d != half)
            error_at(arg_ast(call, i)->loc, "'%s' operands are %s and %s: cast one", call->spec->name, dtype_name(half),
                     dtype_name(d));
        half = d;
    }
    if (!listed || !dtype_is_half(half)) return call->spec->lower(c, call);
    if (f32_at >= 0)
        error_at(arg_ast(call, f32_at)->loc, "'%s' operands are %s and f32: cast one", call->spec->name, dtype_name(half));
    Call f = *call;
    for (int i = 0; i < f.nt; i++)
        if (i != index_arg && dtype_is_half(f.t[i]->dtype)) {
            Node *x = mk_unary(c, OP_CAST, call->ast->loc, f.t[i]);
            x->dtype = DT_F32;
            f.t[i] = x;
        }
    Node *r = call->spec->lower(c, &f);
    if (r->dtype != DT_F32) return r; /* argmax's indices */
    Node *h = mk_unary(c, OP_CAST, call->ast->loc, r);
    h->dtype = half;
    return h;
}

static Node *lower_call(Checker *c, const Ast *e) {
    long long sz;
    if (!strcmp(e->name, "size") && !find_block(c, e->name) && int_literal(e, &sz))
        return mk_const(c, e->loc, (double)sz); /* size(x, 1) as a number: it takes the dtype it meets */
    const Block *blk = find_block(c, e->name);
    if (blk) return instantiate(c, blk, e);
    int si = -1;
    for (int i = 0; i < N_FNS; i++)
        if (!strcmp(fn_specs[i].name, e->name)) si = i;
    if (si < 0 && e->scope) error_at(e->loc, "unknown block '%s'", e->name);
    if (e->scope) error_at(e->scope_loc, "'as %s' names a block instance, but '%s' is an operation", e->scope, e->name);
    if (si < 0) {
        Sym *s = lookup(c, e->name);
        if (s) error_at(e->loc, "'%s' is a tensor, not an operation", e->name);
        error_at(e->loc, "unknown operation '%s'", e->name);
    }
    Call call;
    sort_args(c, e, &fn_specs[si], &call);
    if (call.nt == 1 && is_literal(call.t[0]) && !call.t[0]->literal_big) { /* sqrt(2.0 / pi): a number, as math.sqrt */
        double x = call.t[0]->exact, r = NAN;
        bool ok = true;
        switch (fn_specs[si].op) {
        case OP_SQRT: r = sqrt(x); break;
        case OP_RSQRT: r = 1.0 / sqrt(x); break;
        case OP_EXP: r = exp(x); break;
        case OP_LOG: r = log(x); break;
        case OP_SIN: r = sin(x); break;
        case OP_COS: r = cos(x); break;
        case OP_TANH: r = tanh(x); break;
        case OP_ERF: r = erf(x); break;
        default: ok = false;
        }
        if (ok && fn_specs[si].lower == lower_elementwise) return mk_const(c, e->loc, r);
    }
    return lower_in_f32(c, &call);
}

/* A scalar constant: a literal or a computed size (integral: it may become an integer). */
static Node *mk_const(Checker *c, Loc loc, double v) {
    Node *n = new_node(c->g, OP_CONST, loc);
    n->value = (double)(float)v;
    n->literal = true;
    n->exact = v;
    n->literal_int = v == floor(v) && fabs(v) <= (double)MAX_INT_LITERAL;
    n->shape.rank = 0;
    return n;
}

/* The constant a number literal writes (negated with `neg`): an integer literal keeps its exact
 * value for an integer tensor it meets, a float literal (1.0, 2e3) stays a float. */
static Node *mk_const_lit(Checker *c, Loc loc, const Ast *num, bool neg) {
    Node *n = mk_const(c, loc, neg ? -num->num : num->num);
    n->literal_int = num->is_int && num->int_ok;
    n->literal_big = num->is_int && !num->int_ok;
    if (n->literal_int) n->exact = neg ? -(double)num->ival : (double)num->ival;
    return n;
}

/* Arithmetic on two numbers (literals, block integers, sizes) is a number, as in Python: 2 * C,
 * n - 2, size(x, -1) ** 0.5 take the dtype of the tensor they meet, as a literal would. Integers
 * stay integers under + - * // % (Python's signs); / and ** give floats. NULL: not foldable. */
static Node *fold_numbers(Checker *c, Loc loc, char op, const Node *a, const Node *b) {
    if (!is_literal(a) || !is_literal(b) || a->literal_big || b->literal_big) return NULL;
    double x = a->exact, y = b->exact, r;
    bool ints = a->literal_int && b->literal_int && strchr("+-*f%", op);
    switch (op) {
    case '+': r = x + y; break;
    case '-': r = x - y; break;
    case '*': r = x * y; break;
    case '/': r = x / y; break;
    case '^': r = pow(x, y); break;
    case 'f':
    case '%':
        if (ints && y == 0) error_at(loc, "integer division by zero");
        r = op == 'f' ? floor(x / y) : x - floor(x / y) * y;
        break;
    default: return NULL;
    }
    if (ints && !(fabs(r) <= (double)MAX_INT_LITERAL)) return NULL;
    Node *n = mk_const(c, loc, r);
    n->literal_int = ints;
    return n;
}

/* Elements of s per batch item, or -1 when that is more than MAX_ELEMS (multiplied with
 * overflow checks: dims of 2^32 x 2^32 must not wrap to 0). */
static int64_t shape_elems(const Shape *s) {
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++)
        if (__builtin_mul_overflow(n, s->d[i].c, &n) || n > MAX_ELEMS) return -1;
    return n;
}

/* Holds every node made since the last call to the 2^40-element cap that declared tensors
 * have (convert_type), so that no op's output, nor a tensor an op makes on the way (the scores
 * of an attention), wraps or outgrows the cap. Runs after each expression, before any other op
 * reads the expression's shape; `e` names the op in the message. */
static void check_new_nodes(Checker *c, const Ast *e, const Node *result) {
    Graph *g = c->g;
    for (; c->nchecked < g->nnodes; c->nchecked++) {
        const Node *n = g->nodes[c->nchecked];
        if (shape_elems(&n->shape) >= 0) continue;
        const char *op = e->kind == AST_CALL ? e->name : op_name(n->op);
        error_at(e->loc, "'%s' %s %s%s: more than 2^40 elements%s", op, n == result ? "gives" : "needs an intermediate",
                 dtype_name(n->dtype), shp(c, &n->shape), shape_nsym(&n->shape) ? " per batch item" : "");
    }
}

static Node *lower_expr1(Checker *c, const Ast *e);

/* Lowers expression e to the graph and returns the node of its value. */
static Node *lower_expr(Checker *c, const Ast *e) {
    Node *n = lower_expr1(c, e);
    check_new_nodes(c, e, n);
    return n;
}

static Node *lower_expr1(Checker *c, const Ast *e) {
    switch (e->kind) {
    case AST_NUM:
        return mk_const_lit(c, e->loc, e, false);
    case AST_NAME: {
        Sym *s = lookup(c, e->name);
        double f;
        if (!s && float_name(e, &f)) return mk_const(c, e->loc, f); /* inf, nan */
        if (!s) {
            if (c->g->batch_name && !strcmp(c->g->batch_name, e->name))
                error_at(e->loc, "'%s' is the batch dimension, not a tensor", e->name);
            error_at(e->loc, "unknown name '%s'", e->name);
        }
        if (s->kind == SYM_INT) { /* an integer (or boolean) block argument used as a number */
            s->used = true;
            return mk_const(c, e->loc, (double)s->ival);
        }
        if (s->kind == SYM_SIZE)
            error_at(e->loc, "'%s' is %s, a symbolic size known only at run time: shapes take it, a tensor expression "
                     "does not", e->name, dms(c, s->dval));
        if (s->kind == SYM_TARGET)
            error_at(e->loc, "target '%s' has no value in inference: only the loss reads targets (modelc --train "
                     "builds the training step)", e->name);
        if (!s->node) {
            error_begin(e->loc, "output '%s' is used before it is assigned", e->name);
            note_at(s->loc, "'%s' is declared here", e->name);
            diag_exit();
        }
        s->used = true;
        return s->node;
    }
    case AST_NEG:
        if (e->lhs->kind == AST_NUM) return mk_const_lit(c, e->loc, e->lhs, true);
        return lower_operator(c, e, "neg", lower_expr(c, e->lhs), NULL);
    case AST_BINOP: {
        Node *a = lower_expr(c, e->lhs), *b = lower_expr(c, e->rhs);
        Node *folded = fold_numbers(c, e->loc, e->op, a, b);
        if (folded) return folded;
        if (e->op == '@') {
            bool halves = dtype_is_half(a->dtype) && a->dtype == b->dtype; /* computed in f32 (lower_in_f32) */
            if (!halves && (a->dtype != DT_F32 || b->dtype != DT_F32))
                error_at(e->loc, "'@' (matmul) expects two f32 (or two f16, or two bf16) tensors, got %s and %s",
                         dtype_name(a->dtype), dtype_name(b->dtype));
            if (halves) return lower_operator(c, e, "matmul", a, b);
            return mk_matmul(c, e->loc, "matmul", a, b, false);
        }
        static const struct { char op; const char *fn; } ops[] = {
            {'+', "add"}, {'-', "sub"}, {'*', "mul"}, {'/', "div"}, {'^', "pow"}, {'f', "floor_divide"},
            {'%', "remainder"}, {'<', "lt"}, {'l', "le"}, {'>', "gt"}, {'g', "ge"}, {'e', "eq"}, {'n', "ne"},
            {'&', "logical_and"}, {'|', "logical_or"}};
        for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
            if (ops[i].op == e->op) return lower_operator(c, e, ops[i].fn, a, b);
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

static void add_param(Checker *c, Node *n, Loc loc) {
    Graph *g = c->g;
    int i = find_param(c, n->name);
    if (i >= 0) {
        error_begin(loc, "param '%s' is declared twice%s", n->name,
                    c->block ? " (give each block instance its own 'as' name)" : "");
        note_at(c->param_locs[i], "first declared here");
        diag_exit();
    }
    int cap = g->capparams;
    g->params = xgrow_array(g->params, g->nparams, &g->capparams, sizeof(Node *));
    c->param_locs = xgrow_array(c->param_locs, g->nparams, &cap, sizeof(Loc));
    n->index = g->nparams;
    c->param_locs[g->nparams] = loc;
    g->params[g->nparams++] = n;
    if (2 * g->nparams > c->nptab) {
        c->nptab = c->nptab ? 2 * c->nptab : 64;
        c->ptab = xalloc(sizeof(int) * c->nptab);
        for (int k = 0; k < g->nparams; k++) ptab_insert(c, k);
    } else {
        ptab_insert(c, g->nparams - 1);
    }
}

/* The slot for an 'on' region's device, made on first use. */
static int device_slot(Checker *c, const Stmt *st) {
    Graph *g = c->g;
    const char *d = st->name;
    bool cuda = !strncmp(d, "cuda", 4) && (d[4] == 0 || d[4] == ':');
    bool cpu = !strncmp(d, "cpu", 3) && (d[3] == 0 || d[3] == ':');
    const char *num = cuda ? d + 4 : cpu ? d + 3 : NULL;
    long idx = 0;
    if (num && *num == ':') { /* the grammar gave plain decimal digits */
        char *end;
        idx = strtol(num + 1, &end, 10);
        if (*end) num = NULL;
    }
    if (!num)
        error_at(st->name_loc, "unknown device '%.64s%s' in 'on' (expected cpu, cpu:N, cuda or cuda:N)", d,
                 strlen(d) > 64 ? "..." : "");
    if (cpu && idx > 7)
        error_at(st->name_loc, "device '%.64s' is out of range: CPU devices are cpu:0..cpu:7", d);
    if (cuda && (idx > 1023 || idx < 0))
        error_at(st->name_loc, "device '%.64s' is out of range: CUDA ordinals are 0..1023", d);
    char *name = xprintf("%s:%ld", cuda ? "cuda" : "cpu", idx);
    for (int i = 1; i < g->nslots; i++)
        if (!strcmp(g->slots[i].name, name)) return i;
    g->slots = xrealloc_array(g->slots, g->nslots, g->nslots + 1, sizeof(DeviceSlot));
    g->slots[g->nslots] = (DeviceSlot){name, cuda, (int)idx, st->name_loc};
    return g->nslots++;
}

/* Whether e is an integer expression: size(x, d), a symbolic dimension's name, integer
 * literals, block integers and names bound to sizes, combined with + - * // % (not /, which
 * gives a float). Such a statement binds a size (as Python's T = x.size(1) and hd = E // H),
 * not a tensor; a bare literal (y = 3) stays a number. */
static bool mentions_size(Checker *c, const Ast *e) {
    switch (e->kind) {
    case AST_CALL:
        return !strcmp(e->name, "size");
    case AST_NUM: /* hd = 8 // 2: an integer, as Python's */
        return e->is_int;
    case AST_NAME: {
        Sym *s = lookup(c, e->name);
        return s ? s->kind == SYM_SIZE || (s->kind == SYM_INT && !s->is_bool) : sym_index(c->g, e->name) >= 0;
    }
    case AST_NEG:
        return mentions_size(c, e->lhs);
    case AST_BINOP:
        return strchr("+-*f%", e->op) && (mentions_size(c, e->lhs) || mentions_size(c, e->rhs));
    default:
        return false;
    }
}

/* Bind `name` to v: a new value, or the name bound again (Python style: later uses see v,
 * earlier ones kept theirs; an input or param name is hidden from here on). */
static void bind_value(Checker *c, const char *name, Loc loc, Node *v) {
    Sym *s = lookup(c, name);
    if (s && s->size_bound) s = NULL; /* a size bound by a statement: hidden by the tensor from here on */
    if (sym_index(c->g, name) >= 0)
        error_at(loc, "'%s' is a symbolic dimension of the model; a tensor needs another name (a size may take it: "
                 "%s = size(x, 0))", name, name);
    if (s && s->kind == SYM_INT)
        error_at(loc, "'%s' is an integer argument of block '%s'; a tensor needs another name", name, c->block);
    if (s && s->kind == SYM_OUTPUT_DECL)
        error_at(loc, "'%s' is an output; bind it alone, as '%s = ...'", name, name);
    if (s && s->kind == SYM_VALUE) {
        if (!s->used)
            warning_at(s->loc, "value '%s' is computed but never used (it is bound again at line %d)", s->name, loc.line);
    } else {
        if (s) s->used = true;
        s = define_shadow(c, name, loc, SYM_VALUE);
    }
    s->node = v;
    s->loc = loc;
    s->used = !strcmp(name, "_"); /* _ holds a result nobody wants: no warning */
    if (!v->name) v->name = s->name;
}

/* a, b, ... = chunk(x, n) | split(x, ...) | BLOCK(...) returning several tensors. */
static void lower_assign_several(Checker *c, const Stmt *st) {
    const Ast *e = st->expr;
    Node *out[MAX_RESULTS];
    int n = -1;
    if (e->kind == AST_CALL) {
        const Block *blk = find_block(c, e->name);
        const FnSpec *spec = blk ? NULL : find_fn(e->name);
        if (blk) {
            n = instantiate_all(c, blk, e, out);
        } else if (spec && spec->lower == lower_several) {
            Call call;
            sort_args(c, e, spec, &call);
            n = lower_split_chunk(c, &call, out);
        }
    }
    if (n < 0)
        error_at(e->loc, "%d names are bound, but this expression gives one tensor (several come from split, chunk "
                 "or a block that returns several)", st->nnames);
    if (n != st->nnames)
        error_at(st->names[0]->loc, "%d names are bound, but '%s' gives %d tensor%s", st->nnames, e->name, n,
                 n == 1 ? "" : "s");
    for (int i = 0; i < n; i++) {
        check_new_nodes(c, e, out[i]);
        for (int j = 0; j < i; j++)
            if (!strcmp(st->names[i]->name, st->names[j]->name) && strcmp(st->names[i]->name, "_"))
                error_at(st->names[i]->loc, "'%s' is bound twice in one statement", st->names[i]->name);
        bind_value(c, st->names[i]->name, st->names[i]->loc, out[i]);
    }
}

static void parse_optimizer(Checker *c, const Ast *e);

static void lower_stmt(Checker *c, const Stmt *st) {
    Graph *g = c->g;
    switch (st->kind) {
    case ST_ON: {
        int saved = g->cur_slot, before = g->nnodes;
        g->cur_slot = device_slot(c, st);
        for (int i = 0; i < st->nbody; i++) lower_stmt(c, st->body[i]);
        bool work = false; /* anything but constants: an operation, an input or a param */
        for (int i = before; i < g->nnodes && !work; i++) work = g->nodes[i]->op != OP_CONST;
        if (!work)
            warning_at(st->loc, "region 'on %s' %s; it is ignored, and %s is not needed at run time", st->name,
                       st->nbody ? "holds only constants" : "is empty", g->slots[g->cur_slot].name);
        g->cur_slot = saved;
        break;
    }
    case ST_INPUT:
    case ST_PARAM: {
        bool in = st->kind == ST_INPUT;
        if (in && c->block)
            error_at(st->loc, "'input' is not allowed in a block; a block takes tensors as parameters and returns one");
        Sym *s = define(c, st->name, st->name_loc, in ? SYM_INPUT : SYM_PARAM);
        Node *n = new_node(g, in ? OP_INPUT : OP_PARAM, st->name_loc);
        n->name = in || !c->prefix ? s->name : xprintf("%s.%s", c->prefix, st->name);
        n->dtype = st->type->dtype;
        n->shape = convert_type(c, st->type, xprintf("%s '%s'", in ? "input" : "param", n->name), in);
        if (in) {
            n->index = g->ninputs;
            g->inputs[g->ninputs++] = n;
        } else {
            add_param(c, n, st->name_loc);
        }
        s->node = n;
        break;
    }
    case ST_TARGET: {
        if (c->block) error_at(st->loc, "'target' is not allowed in a block; declare targets in the model");
        Sym *s = define(c, st->name, st->name_loc, g->with_loss ? SYM_INPUT : SYM_TARGET);
        Shape sh = convert_type(c, st->type, xprintf("target '%s'", st->name), true);
        if (!g->with_loss) break; /* inference: no value, the loss is not built */
        Node *n = new_node(g, OP_INPUT, st->name_loc);
        n->name = s->name;
        n->dtype = st->type->dtype;
        n->shape = sh;
        n->stop_grad = true;
        n->index = g->ninputs;
        g->inputs[g->ninputs++] = n;
        s->node = n;
        break;
    }
    case ST_LOSS: {
        if (c->block) error_at(st->loc, "'loss' is not allowed in a block; a block returns values the loss may read");
        if (c->loss_loc.line) {
            error_begin(st->loc, "a second 'loss' statement; a model has one loss (add the terms: loss l = a + 0.1 * b)");
            note_at(c->loss_loc, "the first is here");
            diag_exit();
        }
        c->loss_loc = st->loc;
        if (!g->with_loss) break; /* inference builds leave the loss out */
        Node *v = lower_expr(c, st->expr);
        if (v->dtype != DT_F32 || v->shape.rank != 0)
            error_at(st->expr->loc, "the loss must be an f32 scalar, got %s%s: reduce it (mean(...), or a loss "
                     "function with reduction=mean or sum)", dtype_name(v->dtype), shp(c, &v->shape));
        g->loss = v;
        if (!v->name) v->name = st->name;
        g->outputs[g->noutputs++] = (GraphOutput){.name = st->name, .node = v, .loc = st->name_loc};
        break;
    }
    case ST_OPTIMIZER:
        if (c->block) error_at(st->loc, "'optimizer' is not allowed in a block");
        if (c->opt_loc.line) {
            error_begin(st->loc, "a second 'optimizer' statement; a model has one optimizer");
            note_at(c->opt_loc, "the first is here");
            diag_exit();
        }
        c->opt_loc = st->loc;
        parse_optimizer(c, st->expr);
        break;
    case ST_FREEZE:
        if (c->block) error_at(st->loc, "'freeze' is not allowed in a block; freeze params by their full names");
        for (int i = 0; i < st->nnames; i++) {
            c->frozen = xrealloc_array(c->frozen, c->nfrozen, c->nfrozen + 1, sizeof(char *));
            c->frozen_loc = xrealloc_array(c->frozen_loc, c->nfrozen, c->nfrozen + 1, sizeof(Loc));
            c->frozen[c->nfrozen] = st->names[i]->name;
            c->frozen_loc[c->nfrozen++] = st->names[i]->loc;
        }
        break;
    case ST_OUTPUT: {
        if (c->block)
            error_at(st->loc, "'output' is not allowed in a block; a block takes tensors as parameters and returns one");
        if (g->with_loss) { /* the training step's output is the loss; an output's value may feed it */
            if (st->expr) {
                bind_value(c, st->name, st->name_loc, lower_expr(c, st->expr));
                lookup(c, st->name)->used = true; /* an inference output the loss need not read */
            }
            break;
        }
        Sym *s = define(c, st->name, st->name_loc, SYM_OUTPUT_DECL);
        s->decl = st->type;
        s->out_index = g->noutputs;
        g->outputs[g->noutputs].name = s->name;
        g->outputs[g->noutputs].loc = st->name_loc;
        g->noutputs++;
        if (st->type) (void)convert_type(c, st->type, xprintf("output '%s'", st->name), true);
        if (st->expr) {
            /* lowering may define symbols (a block's scope) and move c->syms: keep the index */
            int si = (int)(s - c->syms);
            Node *v = lower_expr(c, st->expr);
            assign_output(c, &c->syms[si], v, st->name_loc);
        }
        break;
    }
    case ST_ASSIGN: {
        if (st->nnames > 1) {
            lower_assign_several(c, st);
            break;
        }
        Sym *s = lookup(c, st->name);
        if (s && s->kind == SYM_OUTPUT_DECL && !s->node) {
            int si = (int)(s - c->syms); /* lower_expr may move c->syms */
            Node *v = lower_expr(c, st->expr);
            assign_output(c, &c->syms[si], v, st->name_loc);
            break;
        }
        if (s && s->kind == SYM_OUTPUT_DECL) {
            error_begin(st->name_loc, "output '%s' is assigned twice", st->name);
            note_at(c->g->outputs[s->out_index].loc, "first assigned here");
            diag_exit();
        }
        Dim d; /* T = size(x, 1), pad_h = size(a, 2) - size(b, 2): a size (size(x, 1) + x is a tensor) */
        if (st->expr->kind != AST_NUM && mentions_size(c, st->expr) && size_dim(st->expr, &d)) {
            if (s && s->kind == SYM_INT && !s->size_bound)
                error_at(st->name_loc, "'%s' is an integer argument of block '%s'; bind the size to another name",
                         st->name, c->block);
            if (s && (s->kind == SYM_VALUE || s->kind == SYM_INPUT || s->kind == SYM_PARAM) && s->node)
                error_at(st->name_loc, "'%s' is a tensor; a size needs another name", st->name);
            Sym *n = define_shadow(c, st->name, st->name_loc, dim_is_sym(d) ? SYM_SIZE : SYM_INT);
            n->size_bound = true;
            n->ival = d.c;
            n->dval = d;
            n->used = !strcmp(st->name, "_");
            break;
        }
        bind_value(c, st->name, st->name_loc, lower_expr(c, st->expr));
        break;
    }
    }
}

/* optimizer sgd(lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=false) | adam(lr=1e-3,
 * betas=[0.9, 0.999], eps=1e-8, weight_decay=0) | adamw(..., weight_decay=1e-2): torch.optim's
 * names and defaults. */
static void parse_optimizer(Checker *c, const Ast *e) {
    struct Optimizer *o = &c->g->opt;
    const char *kinds[] = {"sgd", "adam", "adamw"};
    int k = -1;
    for (int i = 0; i < 3; i++)
        if (!strcmp(e->name, kinds[i])) k = i;
    if (k < 0) error_at(e->loc, "unknown optimizer '%s' (expected sgd, adam or adamw)", e->name);
    *o = (struct Optimizer){.kind = k == 0 ? OPT_SGD : k == 1 ? OPT_ADAM : OPT_ADAMW, .lr = 1e-3, .beta1 = 0.9,
                            .beta2 = 0.999, .eps = 1e-8, .weight_decay = k == 2 ? 1e-2 : 0, .loc = e->loc};
    for (int i = 0; i < e->nargs; i++) {
        const AstArg *a = &e->args[i];
        if (!a->key) error_at(a->val->loc, "optimizer arguments are named: %s(lr=1e-3, ...)", e->name);
        for (int j = 0; j < i; j++)
            if (e->args[j].key && !strcmp(e->args[j].key, a->key))
                error_at(a->loc, "optimizer argument '%s' is given twice", a->key);
        if (!strcmp(a->key, "nesterov") && a->val->kind != AST_BOOL)
            error_at(a->val->loc, "'nesterov' is true or false, got '%s'", ast_text(a->val));
        const Ast *v = a->val;
        double x = 0;
        bool is_bool = v->kind == AST_BOOL;
        if (!strcmp(a->key, "betas")) {
            if (k == 0) error_at(a->loc, "'sgd' has no betas");
            if (v->kind != AST_LIST || v->nitems != 2)
                error_at(v->loc, "'betas' is a list of two numbers, e.g. betas=[0.9, 0.999]");
            for (int j = 0; j < 2; j++) {
                const Ast *it = v->items[j];
                const Ast *u = it->kind == AST_NEG ? it->lhs : it;
                if (u->kind != AST_NUM) error_at(it->loc, "'betas' holds numbers");
                double b = it->kind == AST_NEG ? -u->num : u->num;
                if (!(b >= 0 && b < 1)) error_at(it->loc, "each beta must be in [0, 1), got %g", b);
                if (j) o->beta2 = b;
                else o->beta1 = b;
            }
            continue;
        }
        if (is_bool) x = v->bval;
        else if (v->kind == AST_NUM) x = v->num;
        else if (v->kind == AST_NEG && v->lhs->kind == AST_NUM) x = -v->lhs->num;
        else error_at(v->loc, "optimizer argument '%s' must be a number, got '%s'", a->key, ast_text(v));
        bool sgd = k == 0;
        bool count = !strcmp(a->key, "warmup_steps") || !strcmp(a->key, "decay_steps");
        if (count && (x != floor(x) || x > 1e15 || is_bool))
            error_at(v->loc, "'%s' is a number of steps (a non-negative integer), got '%s'", a->key, ast_text(v));
        if (!strcmp(a->key, "lr")) o->lr = x;
        else if (!strcmp(a->key, "clip_grad_norm") && !is_bool) o->clip_grad_norm = x;
        else if (!strcmp(a->key, "min_lr") && !is_bool) o->min_lr = x;
        else if (!strcmp(a->key, "warmup_steps")) o->warmup_steps = (long long)x;
        else if (!strcmp(a->key, "decay_steps")) o->decay_steps = (long long)x;
        else if (!strcmp(a->key, "weight_decay")) o->weight_decay = x;
        else if (sgd && !strcmp(a->key, "momentum")) o->momentum = x;
        else if (sgd && !strcmp(a->key, "dampening")) o->dampening = x;
        else if (sgd && !strcmp(a->key, "nesterov") && is_bool) o->nesterov = v->bval;
        else if (!sgd && !strcmp(a->key, "eps")) o->eps = x;
        else
            error_at(a->loc, "'%s' has no argument '%s' (it takes %s)", e->name, a->key,
                     sgd ? "lr, momentum, dampening, weight_decay, nesterov, clip_grad_norm, warmup_steps, decay_steps, min_lr"
                         : "lr, betas, eps, weight_decay, clip_grad_norm, warmup_steps, decay_steps, min_lr");
        if (!(x >= 0) || !isfinite(x) || (!strcmp(a->key, "lr") && x <= 0) || (!strcmp(a->key, "eps") && x <= 0))
            error_at(v->loc, "optimizer argument '%s' must be a finite number %s 0, got %g", a->key,
                     !strcmp(a->key, "lr") || !strcmp(a->key, "eps") ? ">" : ">=", x);
    }
    if (o->min_lr > o->lr)
        error_at(e->loc, "'%s': min_lr (%g) is above lr (%g): the cosine decay goes from lr down to min_lr", e->name,
                 o->min_lr, o->lr);
    if (o->nesterov && (o->momentum <= 0 || o->dampening != 0))
        error_at(e->loc, "'sgd' with nesterov=true needs momentum > 0 and dampening 0 (as torch.optim.SGD)");
    c->g->has_opt = true;
}

static void count_decls(Stmt **st, int n, int *nin, int *nout) {
    for (int i = 0; i < n; i++) {
        *nin += st[i]->kind == ST_INPUT || st[i]->kind == ST_TARGET;
        *nout += st[i]->kind == ST_OUTPUT || st[i]->kind == ST_LOSS;
        if (st[i]->kind == ST_ON) count_decls(st[i]->body, st[i]->nbody, nin, nout);
    }
}

/* PREFIX.num_batches_tracked beside a PREFIX.running_mean that the model reads: PyTorch's
 * batch-norm step counter, which only a training step uses (grad.c counts it); not an unused
 * param worth a warning. */
static bool is_bn_counter(const Graph *g, const Node *p) {
    static const char suffix[] = "num_batches_tracked";
    size_t L = p->name ? strlen(p->name) : 0, ls = sizeof suffix - 1;
    if (L < ls || strcmp(p->name + L - ls, suffix)) return false;
    for (int i = 0; i < g->nparams; i++) {
        const char *q = g->params[i]->name;
        if (g->params[i]->nuses > 0 && !strncmp(q, p->name, L - ls) && !strcmp(q + L - ls, "running_mean")) return true;
    }
    return false;
}

Graph *build_graph(const Program *p, const DimBounds *bounds) {
    fn_specs_init();
    Graph *g = xalloc(sizeof(Graph));
    g->name = p->name;
    g->max_batch = bounds->max_batch;
    Checker ck = {.g = g, .prog = p, .bounds = bounds}, *c = &ck;
    CK = c;
    g->slots = xalloc(sizeof(DeviceSlot));
    g->slots[0] = (DeviceSlot){xstrdup("default"), false, 0, p->loc};
    g->nslots = 1;
    int nin = 0, nout = 0;
    count_decls(p->stmts, p->nstmts, &nin, &nout);
    g->inputs = xalloc(sizeof(Node *) * (nin + 1));
    g->outputs = xalloc(sizeof(GraphOutput) * (nout + 1));
    for (int i = 0; i < p->nblocks; i++)
        for (int k = 0; k < N_FNS; k++)
            if (!strcmp(p->blocks[i]->name, fn_specs[k].name))
                error_at(p->blocks[i]->loc, "block '%s' has the name of a built-in operation", p->blocks[i]->name);
    for (int i = 0; i < p->nblocks; i++)
        for (int j = 0; j < i; j++)
            if (!strcmp(p->blocks[i]->name, p->blocks[j]->name)) {
                error_begin(p->blocks[i]->loc, "redefinition of block '%s'", p->blocks[i]->name);
                note_at(p->blocks[j]->loc, "previous definition is here");
                diag_exit();
            }

    g->train = bounds->train;
    g->eval = bounds->eval && !bounds->train;
    g->with_loss = g->train || g->eval;
    for (int i = 0; i < p->nstmts; i++) lower_stmt(c, p->stmts[i]);
    if (g->with_loss && !g->loss)
        error_at(p->loc, "model '%s' has no loss: --train builds the training step of a 'loss NAME = ...' statement "
                 "(loss l = cross_entropy(logits, labels))", p->name);
    if (g->train && !g->has_opt)
        error_at(p->loc, "model '%s' has no optimizer: --train needs one, e.g. 'optimizer adamw(lr=1e-3)'", p->name);
    for (int i = 0; i < c->nfrozen; i++) { /* each name a param, or a prefix* of some */
        size_t L = strlen(c->frozen[i]);
        bool any = false;
        for (int j = 0; j < g->nparams && !any; j++)
            any = L && c->frozen[i][L - 1] == '*' ? !strncmp(g->params[j]->name, c->frozen[i], L - 1)
                                                   : !strcmp(g->params[j]->name, c->frozen[i]);
        if (!any) error_at(c->frozen_loc[i], "'freeze %s': no param of that name (params are named as in the weights "
                           "file; a prefix ends in *: freeze encoder.*)", c->frozen[i]);
    }
    if (g->noutputs == 0) error_at(p->loc, "model '%s' has no outputs; declare one with 'output NAME = ...'", p->name);
    g->frozen = c->frozen;
    g->nfrozen = c->nfrozen;
    for (int i = 0; i < c->nsyms; i++)
        if (c->syms[i].kind == SYM_OUTPUT_DECL && !c->syms[i].node)
            error_at(c->syms[i].loc, "output '%s' is declared but never assigned", c->syms[i].name);

    /* A lowering may make a node before the nodes it reads (stack's reshapes, gather's slice):
     * node ids are a topological order from here on, which analyze_uses and every pass assume. */
    toposort_graph(g);
    /* A --max-dim must name one of the model's symbolic dimensions, and each of those must be an
     * axis of some input by itself, where a run reads its size. */
    for (int i = 0; i < bounds->n; i++)
        if (sym_index(g, bounds->names[i]) < 0)
            fatal("--max-dim %s=%" PRId64 ": model '%s' has no symbolic dimension '%s' (it has: %s)", bounds->names[i],
                  bounds->max[i], g->name, bounds->names[i], sym_list(g));
    for (int k = 0; k < g->nsyms; k++) {
        bool found = false;
        for (int i = 0; i < g->ninputs && !found; i++)
            for (int d = 0; d < g->inputs[i]->shape.rank && !found; d++)
                found = dim_symbol_of(g->inputs[i]->shape.d[d]) == k;
        if (!found)
            error_at(g->sym_loc[k], "symbolic dimension '%s' is not an axis of any input, so a run cannot know its size "
                     "(declare it in an input's type)", g->sym_names[k]);
    }
    /* Every tensor must be addressable at the bounds (sizes are planned at the bounds). */
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        Dim e = shape_numel(&n->shape);
        if (n->dead || !dim_is_sym(e)) continue;
        double at = (double)e.c;
        for (int k = 0; k < MAX_SYMS; k++)
            for (int j = 0; j < e.e[k]; j++) at *= (double)g->sym_max[k];
        if (at > (double)MAX_ELEMS) {
            char b[256] = "";
            size_t m = 0;
            for (int k = 0; k < g->nsyms && m < sizeof b; k++)
                m += snprintf(b + m, sizeof b - m, "%s%s = %" PRId64, k ? ", " : "", g->sym_names[k], g->sym_max[k]);
            error_at(n->loc, "'%s' gives %s%s with %s elements, too many at the bounds (%s; --max-batch, --max-dim); "
                     "at most 2^40 elements per tensor", op_name(n->op), dtype_name(n->dtype), shp(c, &n->shape),
                     dms(c, e), b);
        }
    }
    /* Model-level names in source order, then params declared inside blocks. */
    for (int i = 0; i < c->nsyms; i++) {
        Sym *s = &c->syms[i];
        if (s->kind == SYM_PARAM && s->node->nuses == 0 && is_bn_counter(g, s->node)) continue;
        if ((s->kind == SYM_INPUT || s->kind == SYM_PARAM) && s->node->nuses == 0)
            warning_at(s->loc, "%s '%s' is never used by %s", s->kind == SYM_PARAM ? "param" : s->node->stop_grad ? "target"
                       : "input", s->name, g->with_loss ? "the loss" : "any output");
        else if (s->kind == SYM_VALUE && !s->used)
            warning_at(s->loc, "value '%s' is computed but never used", s->name);
    }
    for (int i = 0; i < g->nparams; i++) {
        Sym *s = lookup(c, g->params[i]->name);
        if (g->params[i]->nuses == 0 && !(s && s->node == g->params[i]) && !is_bn_counter(g, g->params[i]))
            warning_at(c->param_locs[i], "param '%s' is never used by any output", g->params[i]->name);
    }
    CK = NULL;
    g->cur_slot = SLOT_NONE; /* from here on, passes create nodes with new_node_for */
    return g;
}
