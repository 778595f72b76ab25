/*
 * emit_c.c — lowering the fused, planned graph to C (the CPU path, the fallback and the reference).
 *
 * Output: NAME.h (the public API: create / load_weights / run / destroy, with every tensor's
 * shape in the doc comments, and the plan's sizes as macros) and NAME.c. Each fused elementwise
 * kernel becomes two functions: NAME_kN_expr, the scalar expression (MRT_HD, so the same text can
 * be compiled for CUDA), and NAME_kN, a loop nest over the kernel's iteration space with one
 * 64-bit index per dimension. Adjacent dimensions are merged when every operand is contiguous
 * across them, so a plain chain over a contiguous tensor becomes one flat loop the C compiler
 * vectorizes. GEMMs call cblas_sgemm (OpenBLAS) and then run their epilogue in place over the
 * output. Reductions call the kernels in runtime/mrt_kernels.h.
 */
#include "modelc.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct Emit {
    const Graph *g;
    const KernelList *kl;
    const KernelList *init; /* kernels run once at load time */
    const MemPlan *mp;
    FILE *o;
    char *pfx;  /* C identifier prefix: the model name */
    char *PFX;  /* macro prefix */
    const char *scratch; /* the current kernel's scratch pointer (C), or NULL */
} Emit;

static Node *view_base(const Node *cn) {
    Node *n = (Node *)cn;
    while (n->op == OP_RESHAPE) n = n->in[0];
    return n;
}

static const char *ctype(DType dt) { return dt == DT_F32 ? "float" : dt == DT_I32 ? "int32_t" : "int64_t"; }
static const char *mrt_dtype(DType dt) { return dt == DT_F32 ? "MRT_F32" : dt == DT_I32 ? "MRT_I32" : "MRT_I64"; }

/* A Dim as a C expression over `B`, the run-time batch. */
static char *dimc(Dim d) {
    if (!d.sym) return xprintf("%" PRId64, d.c);
    if (d.c == 1) return xstrdup("B");
    return xprintf("(%" PRId64 " * B)", d.c);
}

static void contiguous_strides(const Shape *s, Dim *st) {
    Dim acc = {1, false};
    for (int i = s->rank - 1; i >= 0; i--) {
        st[i] = acc;
        acc = dim_mul(acc, s->d[i], NULL);
    }
}

/* A C identifier from a user's name: dots become '_', keywords and clashes get a '_'. */
static char *c_ident(const char *name) {
    static const char *reserved[] = {"auto", "break", "case", "char", "const", "continue", "default", "do",
                                     "double", "else", "enum", "extern", "float", "for", "goto", "if", "inline",
                                     "int", "long", "register", "restrict", "return", "short", "signed", "sizeof",
                                     "static", "struct", "switch", "typedef", "union", "unsigned", "void",
                                     "volatile", "while", "m", "batch", "B", "A", "W", "st", NULL};
    char *s = xstrdup(name);
    for (char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '_') *p = '_';
    for (int i = 0; reserved[i]; i++)
        if (!strcmp(s, reserved[i])) return xprintf("%s_", s);
    if (!strncmp(s, "mrt_", 4) || isdigit((unsigned char)s[0])) return xprintf("%s_", s); /* our locals are mrt_v<N> */
    return s;
}

static char *upper(const char *s) {
    char *u = xstrdup(s);
    for (char *p = u; *p; p++) *p = (char)toupper((unsigned char)*p);
    return u;
}

static char *float_lit(double v) {
    float f = (float)v;
    if (isinf(f)) return xstrdup(f > 0 ? "INFINITY" : "(-INFINITY)");
    if (isnan(f)) return xstrdup("NAN");
    return xprintf("%af", (double)f);
}

/* ---------------------------------------------------------------- elementwise kernels */

typedef struct Operand {
    Dim stride[MAX_RANK]; /* per iteration dim; {0,false} for broadcast */
    char *base;           /* constant element offset (slices), as C, or NULL */
} Operand;

static int emit_expr(Emit *e, const Kernel *k, const Expr *x, int *tmp) {
    FILE *o = e->o;
    const char *T = ctype(k->root->dtype);
    int a = -1, b = -1, t;
    if (x->op == OP_CONST) {
        t = (*tmp)++;
        fprintf(o, "    const %s t%d = %s;\n", T, t, float_lit(x->value));
        return t;
    }
    if (x->op == OP_INPUT) {
        t = (*tmp)++;
        fprintf(o, "    const %s t%d = a%d;\n", T, t, x->leaf);
        return t;
    }
    a = emit_expr(e, k, x->a, tmp);
    if (x->b) b = emit_expr(e, k, x->b, tmp);
    int c3 = x->c ? emit_expr(e, k, x->c, tmp) : -1;
    t = (*tmp)++;
    fprintf(o, "    const %s t%d = ", T, t);
    switch (x->op) {
    case OP_WHERE: fprintf(o, "t%d != 0 ? t%d : t%d", a, b, c3); break;
    case OP_SLICE: fprintf(o, "t%d", a); break;
    case OP_NEG: fprintf(o, "-t%d", a); break;
    case OP_EXP: fprintf(o, "expf(t%d)", a); break;
    case OP_LOG: fprintf(o, "logf(t%d)", a); break;
    case OP_SQRT: fprintf(o, "sqrtf(t%d)", a); break;
    case OP_RELU: fprintf(o, "mrt_relu(t%d)", a); break;
    case OP_SIGMOID: fprintf(o, "mrt_sigmoid(t%d)", a); break;
    case OP_TANH: fprintf(o, "tanhf(t%d)", a); break;
    case OP_GELU: fprintf(o, "mrt_gelu(t%d)", a); break;
    case OP_GELU_TANH: fprintf(o, "mrt_gelu_tanh(t%d)", a); break;
    case OP_ADD: fprintf(o, "t%d + t%d", a, b); break;
    case OP_SUB: fprintf(o, "t%d - t%d", a, b); break;
    case OP_MUL: fprintf(o, "t%d * t%d", a, b); break;
    case OP_DIV: fprintf(o, "t%d / t%d", a, b); break;
    case OP_PERMUTE: fprintf(o, "t%d", a); break;
    default: ICE("op %s in an elementwise expression", op_name(x->op));
    }
    fprintf(o, ";  /* %%%d %s */\n", x->node ? x->node->id : -1, op_name(x->op));
    return t;
}

/* Emit NAME_kN_expr and the loop function NAME_kN[suffix](out, leaves..., B). */
static void emit_elementwise(Emit *e, const Kernel *k, const char *fname) {
    FILE *o = e->o;
    const Node *r = k->root;
    const char *T = ctype(r->dtype);
    /* The expression, shared by the CPU loop and (later) the CUDA kernel. */
    fprintf(o, "MRT_HD %s %s_expr(", T, fname);
    for (int i = 0; i < k->nleaves; i++) fprintf(o, "%s%s a%d", i ? ", " : "", ctype(k->leaves[i].node->dtype), i);
    if (!k->nleaves) fprintf(o, "void");
    fprintf(o, ") {\n");
    int tmp = 0;
    int res = emit_expr(e, k, k->expr, &tmp);
    fprintf(o, "    return t%d;\n}\n\n", res);

    /* Iteration space and operand strides, then merge contiguous dimensions. */
    int rank = r->shape.rank;
    Dim n[MAX_RANK];
    Operand ops[1 + 64];
    int nops = 1 + k->nleaves;
    if (nops > 65) ICE("kernel k%d reads %d tensors; at most 64 are supported", k->id, k->nleaves);
    for (int d = 0; d < rank; d++) n[d] = r->shape.d[d];
    contiguous_strides(&r->shape, ops[0].stride);
    for (int i = 0; i < k->nleaves; i++) {
        const LeafRef *l = &k->leaves[i];
        Dim ls[MAX_RANK];
        contiguous_strides(&l->node->shape, ls);
        for (int d = 0; d < rank; d++) ops[1 + i].stride[d] = (Dim){0, false};
        ops[1 + i].base = NULL;
        for (int d = 0; d < l->node->shape.rank; d++) {
            if (l->map[d] >= 0) ops[1 + i].stride[l->map[d]] = dim_mul(ls[d], (Dim){l->step[d], false}, NULL);
            if (l->start[d]) {
                char *term = xprintf("%" PRId64 " * %s", l->start[d], dimc(ls[d]));
                ops[1 + i].base = ops[1 + i].base ? xprintf("%s + %s", ops[1 + i].base, term) : term;
            }
        }
    }
    ops[0].base = NULL;
    for (int d = rank - 2; d >= 0; d--) {
        bool ok = true;
        for (int j = 0; j < nops && ok; j++) {
            bool mok;
            Dim want = dim_mul(ops[j].stride[d + 1], n[d + 1], &mok);
            ok = mok && dim_eq(want, ops[j].stride[d]);
        }
        if (!ok) continue;
        bool mok;
        Dim merged = dim_mul(n[d], n[d + 1], &mok);
        if (!mok) continue;
        n[d] = merged;
        for (int j = 0; j < nops; j++) {
            ops[j].stride[d] = ops[j].stride[d + 1];
            for (int q = d + 1; q + 1 < rank; q++) ops[j].stride[q] = ops[j].stride[q + 1];
        }
        for (int q = d + 1; q + 1 < rank; q++) n[q] = n[q + 1];
        rank--;
    }

    fprintf(o, "static void %s(%s *out", fname, T);
    for (int i = 0; i < k->nleaves; i++) fprintf(o, ", const %s *l%d", ctype(k->leaves[i].node->dtype), i);
    fprintf(o, ", int64_t B) {\n    (void)B;\n");
    for (int d = 0; d < rank; d++)
        fprintf(o, "%*sfor (int64_t i%d = 0; i%d < %s; i%d++) {\n", 4 * (d + 1), "", d, d, dimc(n[d]), d);
    int ind = 4 * (rank + 1);
    fprintf(o, "%*sout[", ind, "");
    bool first = true;
    for (int d = 0; d < rank; d++) {
        if (ops[0].stride[d].c == 0) continue;
        fprintf(o, "%si%d", first ? "" : " + ", d);
        if (!(ops[0].stride[d].c == 1 && !ops[0].stride[d].sym)) fprintf(o, " * %s", dimc(ops[0].stride[d]));
        first = false;
    }
    if (first) fprintf(o, "0");
    fprintf(o, "] = %s_expr(", fname);
    for (int i = 0; i < k->nleaves; i++) {
        fprintf(o, "%sl%d[", i ? ", " : "", i);
        bool f1 = true;
        if (ops[1 + i].base) {
            fprintf(o, "%s", ops[1 + i].base);
            f1 = false;
        }
        for (int d = 0; d < rank; d++) {
            Dim s = ops[1 + i].stride[d];
            if (s.c == 0) continue;
            fprintf(o, "%si%d", f1 ? "" : " + ", d);
            if (!(s.c == 1 && !s.sym)) fprintf(o, " * %s", dimc(s));
            f1 = false;
        }
        if (f1) fprintf(o, "0");
        fprintf(o, "]");
    }
    fprintf(o, ");\n");
    for (int d = rank - 1; d >= 0; d--) fprintf(o, "%*s}\n", 4 * (d + 1), "");
    fprintf(o, "}\n\n");
}

/* ---------------------------------------------------------------- GEMM */

static void check_blas_dim(Emit *e, const Node *m, Dim d, const char *what) {
    if (dim_at(d, e->g->max_batch) > INT32_MAX)
        error_at(m->loc, "matmul %s %" PRId64 " exceeds the BLAS limit of 2^31-1", what, dim_at(d, e->g->max_batch));
}

/* Emits the GEMM call (and the epilogue call) into run(); operands are pointer variable names. */
static void emit_gemm_call(Emit *e, const Kernel *k, char **ptr) {
    FILE *o = e->o;
    const Node *m = k->gemm;
    const Shape *sa = &m->in[0]->shape, *sb = &m->in[1]->shape, *so = &m->shape;
    const char *A = ptr[view_base(m->in[0])->id], *Bm = ptr[view_base(m->in[1])->id], *C = ptr[k->root->id];
    if (m->op == OP_CONV2D) {
        const Shape *sx = &m->in[0]->shape;
        fprintf(o, "    /* k%d: conv2d %%%d = conv(%%%d, %%%d) */\n", k->id, m->id, m->in[0]->id, m->in[1]->id);
        fprintf(o, "    mrt_conv2d_f32(%s, %s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %d, %d, %" PRId64
                   ", %" PRId64 ", %d, %d, %d, %d, %d, %d, %d, %s);\n",
                C, A, Bm, dimc(sx->d[0]), sx->d[1].c, sx->d[2].c, sx->d[3].c, so->d[1].c, m->kernel[0], m->kernel[1],
                so->d[2].c, so->d[3].c, m->stride[0], m->stride[1], m->pad[0], m->pad[1], m->dilation[0], m->dilation[1],
                m->groups, e->scratch ? e->scratch : "NULL");
        return;
    }
    Dim M = sa->d[sa->rank - 2], K = sa->d[sa->rank - 1], N = so->d[so->rank - 1];
    check_blas_dim(e, m, M, "rows");
    check_blas_dim(e, m, K, "inner dimension");
    check_blas_dim(e, m, N, "columns");
    const char *tb = m->trans_b ? "CblasTrans" : "CblasNoTrans";
    char *ldb = m->trans_b ? dimc(K) : dimc(N);
    int ob = so->rank - 2, ab = sa->rank - 2, bb = sb->rank - 2;
    Dim bnum = {1, false};
    for (int i = 0; i < bb; i++) bnum = dim_mul(bnum, sb->d[i], NULL);
    bool a_full = ab == ob;
    for (int i = 0; i < ab && a_full; i++) a_full = dim_eq(sa->d[i], so->d[i]);
    fprintf(o, "    /* k%d: gemm %%%d = %%%d @ %%%d%s  [%s] */\n", k->id, m->id, m->in[0]->id, m->in[1]->id,
            m->trans_b ? "^T" : "", e->g->name);
    if (!bnum.sym && bnum.c == 1 && a_full) {
        /* One GEMM: a's leading dims fold into M. */
        Dim rows = {1, false};
        for (int i = 0; i < sa->rank - 1; i++) rows = dim_mul(rows, sa->d[i], NULL);
        check_blas_dim(e, m, rows, "rows");
        fprintf(o, "    cblas_sgemm(CblasRowMajor, CblasNoTrans, %s, (int)%s, (int)%s, (int)%s, 1.0f, %s, (int)%s, %s, (int)%s, 0.0f, %s, (int)%s);\n",
                tb, dimc(rows), dimc(N), dimc(K), A, dimc(K), Bm, ldb, C, dimc(N));
    } else {
        /* Batched with broadcasting: a loop over the output's leading dims. */
        Dim ast[MAX_RANK], bst[MAX_RANK], ost[MAX_RANK];
        contiguous_strides(sa, ast);
        contiguous_strides(sb, bst);
        contiguous_strides(so, ost);
        fprintf(o, "    {\n");
        for (int i = 0; i < ob; i++)
            fprintf(o, "%*sfor (int64_t b%d = 0; b%d < %s; b%d++) {\n", 8 + 4 * i, "", i, i, dimc(so->d[i]), i);
        int ind = 8 + 4 * ob;
        fprintf(o, "%*sconst int64_t ao = 0", ind, "");
        for (int i = 0; i < ob; i++) {
            int ia = i - (ob - ab);
            if (ia >= 0 && !(sa->d[ia].c == 1 && !sa->d[ia].sym)) fprintf(o, " + b%d * %s", i, dimc(ast[ia]));
        }
        fprintf(o, ";\n%*sconst int64_t bo = 0", ind, "");
        for (int i = 0; i < ob; i++) {
            int ib = i - (ob - bb);
            if (ib >= 0 && !(sb->d[ib].c == 1 && !sb->d[ib].sym)) fprintf(o, " + b%d * %s", i, dimc(bst[ib]));
        }
        fprintf(o, ";\n%*sconst int64_t co = 0", ind, "");
        for (int i = 0; i < ob; i++) fprintf(o, " + b%d * %s", i, dimc(ost[i]));
        fprintf(o, ";\n");
        fprintf(o, "%*scblas_sgemm(CblasRowMajor, CblasNoTrans, %s, (int)%s, (int)%s, (int)%s, 1.0f, %s + ao, (int)%s, %s + bo, (int)%s, 0.0f, %s + co, (int)%s);\n",
                ind, "", tb, dimc(M), dimc(N), dimc(K), A, dimc(K), Bm, ldb, C, dimc(N));
        for (int i = ob - 1; i >= 0; i--) fprintf(o, "%*s}\n", 8 + 4 * i, "");
        fprintf(o, "    }\n");
    }
}

/* ---------------------------------------------------------------- reductions */

static void emit_library_call(Emit *e, const Kernel *k, char **ptr) {
    FILE *o = e->o;
    const Node *r = k->reduce, *x = r->in[0];
    const char *X = ptr[view_base(x)->id], *Y = ptr[r->id];
    const Shape *xs = &x->shape;
    switch (r->op) {
    case OP_MAXPOOL2D:
    case OP_AVGPOOL2D:
    case OP_ADAPTIVE_AVGPOOL2D: {
        char *nc = dimc(dim_mul(xs->d[0], xs->d[1], NULL));
        fprintf(o, "    /* k%d: %s %%%d */\n", k->id, op_name(r->op), r->id);
        if (r->op == OP_MAXPOOL2D)
            fprintf(o, "    mrt_maxpool2d_f32(%s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %d, %d, %d, %d, %d, %d, %d, %d);\n",
                    Y, X, nc, xs->d[2].c, xs->d[3].c, r->shape.d[2].c, r->shape.d[3].c, r->kernel[0], r->kernel[1],
                    r->stride[0], r->stride[1], r->pad[0], r->pad[1], r->dilation[0], r->dilation[1]);
        else if (r->op == OP_AVGPOOL2D)
            fprintf(o, "    mrt_avgpool2d_f32(%s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %d, %d, %d, %d, %d, %d, %d, %d, %d);\n",
                    Y, X, nc, xs->d[2].c, xs->d[3].c, r->shape.d[2].c, r->shape.d[3].c, r->kernel[0], r->kernel[1],
                    r->stride[0], r->stride[1], r->pad[0], r->pad[1], r->pad[2], r->pad[3], r->count_include_pad);
        else
            fprintf(o, "    mrt_adaptive_avgpool2d_f32(%s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ");\n", Y, X,
                    nc, xs->d[2].c, xs->d[3].c, r->shape.d[2].c, r->shape.d[3].c);
        return;
    }
    case OP_LAYER_NORM: {
        Dim rows = {1, false};
        for (int i = 0; i + 1 < xs->rank; i++) rows = dim_mul(rows, xs->d[i], NULL);
        fprintf(o, "    /* k%d: layer_norm %%%d */\n", k->id, r->id);
        fprintf(o, "    mrt_layernorm_f32(%s, %s, %s, %s, %s, %" PRId64 ", %s);\n", Y, X, ptr[view_base(r->in[1])->id],
                ptr[view_base(r->in[2])->id], dimc(rows), xs->d[xs->rank - 1].c, float_lit(r->value));
        return;
    }
    case OP_EMBEDDING: {
        const Node *w = r->in[1];
        char *n = dimc(shape_numel(xs));
        fprintf(o, "    /* k%d: embedding %%%d */\n    {\n        int64_t bad_id = 0;\n", k->id, r->id);
        fprintf(o, "        int64_t bad = mrt_embedding_f32(%s, %s, %d, %s, %s, %" PRId64 ", %" PRId64 ", &bad_id);\n", Y, X,
                x->dtype == DT_I64, n, ptr[view_base(w)->id], w->shape.d[0].c, w->shape.d[1].c);
        fprintf(o, "        if (bad >= 0)\n            return mrt_set_error(MRT_ERR_INVALID_ARG, \"%s: embedding %s: id %%lld at "
                   "position %%lld is out of range [0, %" PRId64 ")\", (long long)bad_id, (long long)bad);\n    }\n",
                e->pfx, x->name ? x->name : "ids", w->shape.d[0].c);
        return;
    }
    case OP_CONCAT: {
        size_t es = dtype_size(r->dtype);
        Dim outer = {1, false}, inner = {1, false};
        for (int i = 0; i < r->axis; i++) outer = dim_mul(outer, r->shape.d[i], NULL);
        for (int i = r->axis + 1; i < r->shape.rank; i++) inner = dim_mul(inner, r->shape.d[i], NULL);
        Dim yrow = dim_mul(r->shape.d[r->axis], inner, NULL);
        fprintf(o, "    /* k%d: concat %%%d along axis %d */\n", k->id, r->id, r->axis);
        Dim off = {0, r->shape.d[r->axis].sym};
        for (int j = 0; j < r->nin; j++) {
            const Node *xj = r->in[j];
            Dim xrow = dim_mul(xj->shape.d[r->axis], inner, NULL);
            fprintf(o, "    mrt_concat_part(%s, %s, %s, %s * %zu, %s * %zu, %s * %zu);\n", Y, ptr[view_base(xj)->id],
                    dimc(outer), dimc(xrow), es, dimc(yrow), es, off.c ? dimc(off) : "0", es);
            off.c += xrow.c;
            off.sym = xrow.sym;
        }
        return;
    }
    default:
        break;
    }
    Dim outer = {1, false}, inner = {1, false};
    for (int i = 0; i < r->axis; i++) outer = dim_mul(outer, x->shape.d[i], NULL);
    for (int i = r->axis + 1; i < x->shape.rank; i++) inner = dim_mul(inner, x->shape.d[i], NULL);
    char *n = dimc(x->shape.d[r->axis]), *ou = dimc(outer), *in = dimc(inner);
    fprintf(o, "    /* k%d: %s %%%d {axis=%d} */\n", k->id, op_name(r->op), r->id, r->axis);
    switch (r->op) {
    case OP_SOFTMAX:
        if (r->causal || r->zero_masked_rows)
            fprintf(o, "    mrt_softmax_masked_f32(%s, %s, %s, %s, %" PRId64 ", %d, %d);\n", Y, X, ou, n,
                    x->shape.rank >= 2 ? x->shape.d[x->shape.rank - 2].c : 1, r->causal, r->zero_masked_rows);
        else
            fprintf(o, "    mrt_softmax_f32(%s, %s, %s, %s, %s, 0);\n", Y, X, ou, n, in);
        break;
    case OP_LOG_SOFTMAX: fprintf(o, "    mrt_softmax_f32(%s, %s, %s, %s, %s, 1);\n", Y, X, ou, n, in); break;
    case OP_SUM: fprintf(o, "    mrt_sum_f32(%s, %s, %s, %s, %s, 0);\n", Y, X, ou, n, in); break;
    case OP_MEAN: fprintf(o, "    mrt_sum_f32(%s, %s, %s, %s, %s, 1);\n", Y, X, ou, n, in); break;
    case OP_MAX: fprintf(o, "    mrt_max_f32(%s, %s, %s, %s, %s);\n", Y, X, ou, n, in); break;
    case OP_ARGMAX: fprintf(o, "    mrt_argmax_f32(%s, %s, %s, %s, %s);\n", Y, X, ou, n, in); break;
    default: ICE("op %s is not a reduction", op_name(r->op));
    }
}

/* ---------------------------------------------------------------- header */

static void doc_tensor(Emit *e, FILE *o, const char *role, const char *name, const Node *n) {
    char buf[256];
    fprintf(o, " *   %-12s %s%s, host memory (%s)\n", c_ident(name), dtype_name(n->dtype),
            shape_str(&n->shape, e->g->batch_name, buf, sizeof buf), role);
}

static void emit_run_proto(Emit *e, FILE *o) {
    const Graph *g = e->g;
    fprintf(o, "mrt_status %s_run(%s *m, int batch", e->pfx, e->pfx);
    for (int i = 0; i < g->ninputs; i++)
        fprintf(o, ",\n        const %s *%s", ctype(g->inputs[i]->dtype), c_ident(g->inputs[i]->name));
    for (int i = 0; i < g->noutputs; i++)
        fprintf(o, ",\n        %s *%s", ctype(g->outputs[i].node->dtype), c_ident(g->outputs[i].name));
    fprintf(o, ")");
}

static void emit_header(Emit *e, FILE *o) {
    const Graph *g = e->g;
    fprintf(o, "/* %s.h — generated by modelc from model '%s'. Do not edit.\n *\n", e->pfx, g->name);
    fprintf(o, " * Usage:\n *   %s *m;\n *   %s_create(&m, \"auto\");     (or \"cpu\", \"cpu:1\")\n",
            e->pfx, e->pfx);
    fprintf(o, " *   %s_load_weights(m, \"%s.safetensors\");\n *   %s_run(m, batch, inputs..., outputs...);\n",
            e->pfx, e->pfx, e->pfx);
    fprintf(o, " *   %s_destroy(m);\n * Every call returns an mrt_status; on failure mrt_last_error() says why.\n */\n",
            e->pfx);
    fprintf(o, "#ifndef %s_H\n#define %s_H\n\n#include \"modelrt.h\"\n\n#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n",
            e->PFX, e->PFX);
    fprintf(o, "typedef struct %s %s;\n\n", e->pfx, e->pfx);
    fprintf(o, "/* Sizes from the memory plan, in bytes (activations at the maximum batch). */\n");
    fprintf(o, "#define %s_MAX_BATCH %d\n", e->PFX, g->has_batch ? g->max_batch : 1);
    fprintf(o, "#define %s_WEIGHT_BYTES %zu\n", e->PFX, e->mp->weight_bytes);
    fprintf(o, "#define %s_ARENA_BYTES_CPU %zu\n\n", e->PFX, e->mp->arena_bytes);
    fprintf(o, "/** Create the model on `device` (\"auto\", \"cpu\", \"cpu:N\"; NULL means $MODELRT_DEVICE or\n"
               " *  \"auto\"), allocating its weight region and activation arena there. *m is set to NULL on\n"
               " *  failure. Free with %s_destroy. */\n", e->pfx);
    fprintf(o, "mrt_status %s_create(%s **m, const char *device);\n\n", e->pfx, e->pfx);
    fprintf(o, "/** Load the weights from a safetensors file whose tensor names are the params below (a\n"
               " *  PyTorch state_dict saved with safetensors). Every missing, unexpected, mistyped or\n"
               " *  mis-shaped tensor is an error naming it. Params:\n");
    char buf[256];
    for (int i = 0; i < g->nparams; i++)
        fprintf(o, " *   %-24s %s%s\n", g->params[i]->name, dtype_name(g->params[i]->dtype),
                shape_str(&g->params[i]->shape, g->batch_name, buf, sizeof buf));
    if (!g->nparams) fprintf(o, " *   (none: the path may be NULL)\n");
    fprintf(o, " */\nmrt_status %s_load_weights(%s *m, const char *safetensors_path);\n\n", e->pfx, e->pfx);
    fprintf(o, "/** Run the model on host buffers, synchronously. `batch` is in 1..%s_MAX_BATCH%s.\n", e->PFX,
            g->has_batch ? "" : " (this model has no batch dimension: pass 1)");
    if (g->has_batch) fprintf(o, " *  Shapes use %s = batch.\n", g->batch_name);
    for (int i = 0; i < g->ninputs; i++) doc_tensor(e, o, "input", g->inputs[i]->name, g->inputs[i]);
    for (int i = 0; i < g->noutputs; i++) doc_tensor(e, o, "output", g->outputs[i].name, g->outputs[i].node);
    fprintf(o, " */\n");
    emit_run_proto(e, o);
    fprintf(o, ";\n\n/** Free everything the model holds. NULL is ignored. */\nvoid %s_destroy(%s *m);\n\n", e->pfx,
            e->pfx);
    fprintf(o, "/** The device the model runs on. */\nmrt_device %s_device(const %s *m);\n\n", e->pfx, e->pfx);
    fprintf(o, "/** Descriptor for generic drivers (mrt_main). */\nextern const mrt_model_info %s_info;\n\n", e->pfx);
    fprintf(o, "#ifdef __cplusplus\n}\n#endif\n#endif /* %s_H */\n", e->PFX);
}

/* ---------------------------------------------------------------- the C file */

static void io_desc(Emit *e, FILE *o, const char *name, const Node *n) {
    unsigned mask = 0;
    fprintf(o, "    {\"%s\", %s, %d, {", name, mrt_dtype(n->dtype), n->shape.rank);
    for (int i = 0; i < n->shape.rank; i++) {
        fprintf(o, "%s%" PRId64, i ? ", " : "", n->shape.d[i].c);
        if (n->shape.d[i].sym) mask |= 1u << i;
    }
    fprintf(o, "}, 0x%xu},\n", mask);
}

/* Declare one pointer per materialized value: for run() (inputs, params, load-time values,
 * arena, outputs), or for load_weights() (params and load-time values only). */
static char **declare_pointers(Emit *e, bool at_load) {
    const Graph *g = e->g;
    const MemPlan *mp = e->mp;
    FILE *o = e->o;
    char **ptr = xalloc(sizeof(char *) * (g->nnodes + 1));
    for (int i = 0; i < g->nnodes; i++) {
        Node *n = g->nodes[i];
        const Storage *s = mp->of[i];
        if (n->dead || !s || n->op == OP_RESHAPE) continue;
        if (at_load && s->kind != S_PARAM && s->kind != S_INIT) continue;
        const char *T = ctype(n->dtype);
        ptr[i] = xprintf("mrt_v%d", i);
        switch (s->kind) {
        case S_INPUT:
            fprintf(o, "    const %s *const mrt_v%d = %s;\n", T, i, c_ident(g->inputs[s->index]->name));
            break;
        case S_PARAM:
            fprintf(o, "    const %s *const mrt_v%d = (const %s *)(W + %zu);  /* %s */\n", T, i, T, s->offset, n->name);
            break;
        case S_INIT:
            if (at_load) fprintf(o, "    %s *const mrt_v%d = (%s *)(W + %zu);\n", T, i, T, s->offset);
            else fprintf(o, "    const %s *const mrt_v%d = (const %s *)(W + %zu);  /* computed at load */\n", T, i, T, s->offset);
            break;
        case S_ARENA:
            fprintf(o, "    %s *const mrt_v%d = (%s *)(A + %zu);\n", T, i, T, s->offset);
            break;
        case S_OUTPUT:
            fprintf(o, "    %s *const mrt_v%d = %s;\n", T, i, c_ident(g->outputs[s->index].name));
            break;
        case S_CONST:
            break;
        }
        fprintf(o, "    (void)mrt_v%d;\n", i);
    }
    for (int i = 0; i < g->nnodes; i++)
        if (!g->nodes[i]->dead && g->nodes[i]->op == OP_RESHAPE && mp->of[i]) ptr[i] = ptr[view_base(g->nodes[i])->id];
    return ptr;
}

/* The calls of one kernel list, in order. */
static void emit_calls(Emit *e, const KernelList *kl, char **ptr, const char *pfx) {
    FILE *o = e->o;
    bool run = !strcmp(pfx, "k");
    for (int i = 0; i < kl->n; i++) {
        const Kernel *k = kl->k[i];
        e->scratch = NULL;
        if (run && e->mp->scratch[i]) {
            e->scratch = xprintf("(float *)(A + %zu)", e->mp->scratch[i]->offset);
        }
        if (k->kind == K_GEMM) emit_gemm_call(e, k, ptr);
        if (k->kind == K_REDUCE) emit_library_call(e, k, ptr);
        if (k->expr) {
            if (k->kind == K_ELEMENTWISE) fprintf(o, "    /* %s%d: elementwise */\n", pfx, k->id);
            fprintf(o, "    %s_%s%d(%s", e->pfx, pfx, k->id, ptr[k->root->id]);
            for (int j = 0; j < k->nleaves; j++)
                fprintf(o, ", %s", j == k->gemm_leaf ? ptr[k->root->id] : ptr[view_base(k->leaves[j].node)->id]);
            fprintf(o, ", B);\n");
        }
    }
}

static void emit_source(Emit *e, FILE *o, const char *h_include) {
    const Graph *g = e->g;
    const KernelList *kl = e->kl;
    e->o = o;
    fprintf(o, "/* %s.c — generated by modelc from model '%s'. Do not edit. */\n", e->pfx, g->name);
    fprintf(o, "#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n#include <math.h>\n#include <cblas.h>\n");
    fprintf(o, "#include \"modelrt.h\"\n#include \"mrt_kernels.h\"\n#include \"%s\"\n\n", h_include);
    fprintf(o, "struct %s {\n    mrt_device device;\n    unsigned char *weights;  /* %s_WEIGHT_BYTES */\n"
               "    unsigned char *arena;    /* %s_ARENA_BYTES_CPU */\n    int weights_loaded;\n};\n\n",
            e->pfx, e->PFX, e->PFX);
    /* params */
    fprintf(o, "static const mrt_param_desc %s_params[] = {\n", e->pfx);
    for (int i = 0; i < g->nparams; i++) {
        const Node *n = g->params[i];
        fprintf(o, "    {\"%s\", %s, %d, {", n->name, mrt_dtype(n->dtype), n->shape.rank);
        for (int d = 0; d < n->shape.rank; d++) fprintf(o, "%s%" PRId64, d ? ", " : "", n->shape.d[d].c);
        fprintf(o, "}, %zu},\n", e->mp->of[n->id]->offset);
    }
    if (!g->nparams) fprintf(o, "    {0}\n");
    fprintf(o, "};\n#define N_PARAMS %d\n\n", g->nparams);

    /* kernels: the run's, then the load-time ones */
    for (int li = 0; li < 2; li++) {
        const KernelList *L = li ? e->init : kl;
        for (int i = 0; i < L->n; i++) {
            const Kernel *k = L->k[i];
            if (!k->expr) continue;
            fprintf(o, "/* %s%d: %s -> %%%d */\n", li ? "init" : "k", k->id,
                    k->kind == K_GEMM ? "GEMM epilogue" : "elementwise", k->root->id);
            emit_elementwise(e, k, xprintf("%s_%s%d", e->pfx, li ? "init" : "k", k->id));
        }
    }

    /* create / load / destroy */
    fprintf(o, "mrt_status %s_create(%s **out, const char *device) {\n", e->pfx, e->pfx);
    fprintf(o, "    if (!out) return mrt_set_error(MRT_ERR_INVALID_ARG, \"%s_create: out is NULL\");\n", e->pfx);
    fprintf(o, "    *out = NULL;\n    mrt_device dev;\n    mrt_status st = mrt_device_select(device, &dev);\n"
               "    if (st != MRT_OK) return st;\n");
    fprintf(o, "    if (dev.kind != MRT_DEVICE_CPU) {\n        char name[32];\n"
               "        return mrt_set_error(MRT_ERR_DEVICE, \"%s: device %%s requested, but this model was compiled for the CPU only\",\n"
               "                             mrt_device_str(dev, name, sizeof name));\n    }\n", e->pfx);
    fprintf(o, "    %s *m = calloc(1, sizeof *m);\n", e->pfx);
    fprintf(o, "    if (!m) return mrt_set_error(MRT_ERR_OOM, \"%s_create: out of memory (%%zu bytes)\", sizeof *m);\n", e->pfx);
    fprintf(o, "    m->device = dev;\n    m->weights = mrt_alloc(dev, %s_WEIGHT_BYTES);\n    m->arena = mrt_alloc(dev, %s_ARENA_BYTES_CPU);\n",
            e->PFX, e->PFX);
    fprintf(o, "    if (!m->weights || !m->arena) {\n        mrt_free(dev, m->weights);\n        mrt_free(dev, m->arena);\n"
               "        free(m);\n        return MRT_ERR_OOM;\n    }\n");
    fprintf(o, "    m->weights_loaded = N_PARAMS == 0;\n    *out = m;\n    return MRT_OK;\n}\n\n");

    fprintf(o, "mrt_status %s_load_weights(%s *m, const char *path) {\n", e->pfx, e->pfx);
    fprintf(o, "    if (!m) return mrt_set_error(MRT_ERR_INVALID_ARG, \"%s_load_weights: model is NULL\");\n", e->pfx);
    fprintf(o, "    if (N_PARAMS == 0 && !path) return MRT_OK;\n");
    fprintf(o, "    if (!path) return mrt_set_error(MRT_ERR_INVALID_ARG, \"%s_load_weights: path is NULL\");\n", e->pfx);
    fprintf(o, "    m->weights_loaded = 0;\n");
    fprintf(o, "    mrt_status st = mrt_weights_load(path, %s_params, N_PARAMS, m->weights, %s_WEIGHT_BYTES);\n", e->pfx,
            e->PFX);
    fprintf(o, "    if (st != MRT_OK) return st;\n");
    if (e->init->n) {
        fprintf(o, "    /* values that depend only on the weights (folded batch norms, ...) */\n");
        fprintf(o, "    const int64_t B = 1;\n    (void)B;\n    unsigned char *const W = m->weights;\n");
        char **ptr = declare_pointers(e, true);
        emit_calls(e, e->init, ptr, "init");
    }
    fprintf(o, "    m->weights_loaded = 1;\n    return MRT_OK;\n}\n\n");

    fprintf(o, "void %s_destroy(%s *m) {\n    if (!m) return;\n    mrt_free(m->device, m->weights);\n"
               "    mrt_free(m->device, m->arena);\n    free(m);\n}\n\n", e->pfx, e->pfx);
    fprintf(o, "mrt_device %s_device(const %s *m) { return m->device; }\n\n", e->pfx, e->pfx);

    /* run */
    emit_run_proto(e, o);
    fprintf(o, " {\n");
    fprintf(o, "    if (!m) return mrt_set_error(MRT_ERR_INVALID_ARG, \"%s_run: model is NULL\");\n", e->pfx);
    fprintf(o, "    if (batch < 1 || batch > %s_MAX_BATCH)\n        return mrt_set_error(MRT_ERR_INVALID_ARG, "
               "\"%s_run: batch %%d is out of range 1..%%d%s\", batch, %s_MAX_BATCH);\n",
            e->PFX, e->pfx, g->has_batch ? " (the maximum is fixed with modelc --max-batch)" : " (the model has no batch dimension)",
            e->PFX);
    for (int i = 0; i < g->ninputs; i++)
        fprintf(o, "    if (!%s) return mrt_set_error(MRT_ERR_INVALID_ARG, \"%s_run: input '%s' is NULL\");\n",
                c_ident(g->inputs[i]->name), e->pfx, g->inputs[i]->name);
    for (int i = 0; i < g->noutputs; i++)
        fprintf(o, "    if (!%s) return mrt_set_error(MRT_ERR_INVALID_ARG, \"%s_run: output '%s' is NULL\");\n",
                c_ident(g->outputs[i].name), e->pfx, g->outputs[i].name);
    fprintf(o, "    if (!m->weights_loaded) return mrt_set_error(MRT_ERR_INVALID_ARG, \"%s_run: weights are not loaded "
               "(call %s_load_weights first)\");\n", e->pfx, e->pfx);
    fprintf(o, "    const int64_t B = batch;\n    (void)B;\n");
    fprintf(o, "    unsigned char *const A = m->arena;\n    const unsigned char *const W = m->weights;\n    (void)A;\n    (void)W;\n");
    char **ptr = declare_pointers(e, false);
    emit_calls(e, kl, ptr, "k");
    fprintf(o, "    return MRT_OK;\n}\n\n");

    /* the generic descriptor */
    fprintf(o, "static const mrt_io_desc %s_inputs[] = {\n", e->pfx);
    for (int i = 0; i < g->ninputs; i++) io_desc(e, o, g->inputs[i]->name, g->inputs[i]);
    if (!g->ninputs) fprintf(o, "    {0}\n");
    fprintf(o, "};\nstatic const mrt_io_desc %s_outputs[] = {\n", e->pfx);
    for (int i = 0; i < g->noutputs; i++) io_desc(e, o, g->outputs[i].name, g->outputs[i].node);
    fprintf(o, "};\n\n");
    fprintf(o, "static mrt_status %s_create_v(void **m, const char *device) { return %s_create((%s **)m, device); }\n",
            e->pfx, e->pfx, e->pfx);
    fprintf(o, "static mrt_status %s_load_v(void *m, const char *path) { return %s_load_weights(m, path); }\n", e->pfx,
            e->pfx);
    fprintf(o, "static void %s_destroy_v(void *m) { %s_destroy(m); }\n", e->pfx, e->pfx);
    fprintf(o, "static mrt_device %s_device_v(void *m) { return %s_device(m); }\n", e->pfx, e->pfx);
    fprintf(o, "static mrt_status %s_run_v(void *m, int batch, const void *const *in, void *const *out) {\n", e->pfx);
    fprintf(o, "    (void)in;\n    return %s_run(m, batch", e->pfx);
    for (int i = 0; i < g->ninputs; i++) fprintf(o, ", (const %s *)in[%d]", ctype(g->inputs[i]->dtype), i);
    for (int i = 0; i < g->noutputs; i++) fprintf(o, ", (%s *)out[%d]", ctype(g->outputs[i].node->dtype), i);
    fprintf(o, ");\n}\n\n");
    fprintf(o, "const mrt_model_info %s_info = {\n    \"%s\", %d, %d, %s_inputs, %s_outputs, %d, %d,\n"
               "    %s_WEIGHT_BYTES, %s_ARENA_BYTES_CPU,\n    %s_create_v, %s_load_v, %s_run_v, %s_destroy_v, %s_device_v,\n    %d,\n};\n",
            e->pfx, g->name, g->ninputs, g->noutputs, e->pfx, e->pfx, g->has_batch ? 1 : 0,
            g->has_batch ? g->max_batch : 1, e->PFX, e->PFX, e->pfx, e->pfx, e->pfx, e->pfx, e->pfx,
            graph_batch_separable(g) ? 1 : 0);
}

static char *render(void (*fn)(Emit *, FILE *, const char *), Emit *e, const char *arg, size_t *len) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f) fatal("out of memory");
    fn(e, f, arg);
    fclose(f);
    return buf;
}

static void emit_header_adapter(Emit *e, FILE *o, const char *unused) { emit_header(e, o); }

static void emit_main(Emit *e, FILE *o, const char *h_include) {
    fprintf(o, "/* main.c — generated by modelc: the command-line driver for model '%s'. */\n", e->g->name);
    fprintf(o, "#include \"modelrt.h\"\n#include \"%s\"\n\n", h_include);
    fprintf(o, "int main(int argc, char **argv) { return mrt_main(&%s_info, argc, argv); }\n", e->pfx);
}

void emit_c(const Graph *g, const KernelList *kl, const KernelList *init, const MemPlan *mp,
            const EmitOptions *opt) {
    Emit E = {.g = g, .kl = kl, .init = init, .mp = mp}, *e = &E;
    e->pfx = c_ident(g->name);
    e->PFX = upper(e->pfx);
    size_t len;
    char *h = render(emit_header_adapter, e, NULL, &len);
    write_file_atomic(opt->h_path, h, len);
    free(h);
    char *c = render(emit_source, e, opt->h_include, &len);
    write_file_atomic(opt->c_path, c, len);
    free(c);
    if (opt->main_path) {
        char *mn = render(emit_main, e, opt->h_include, &len);
        write_file_atomic(opt->main_path, mn, len);
        free(mn);
    }
}
