/*
 * emit_c.c — lowering the fused, placed and planned graph to C: the CPU path, the fallback and
 * the reference, plus the host side of the CUDA path.
 *
 * Output: NAME.h (the public API: create / load_weights / run / destroy, every tensor's shape in
 * the doc comments, the plan's sizes as macros) and NAME.c. Each fused elementwise kernel becomes
 * NAME_kN_expr, the scalar expression (MRT_HD, so emit_cuda.c writes the very same text into
 * NAME.cu), and NAME_kN, a loop nest with one 64-bit index per dimension. Adjacent dimensions are
 * merged when every operand is contiguous across them, so a chain over a contiguous tensor is
 * one flat loop the C compiler vectorizes.
 *
 * The model runs on device slots (place.c): slot 0 is the device chosen at create time, the
 * others are pinned by 'on' regions. Each slot has a weight region, an activation arena and, on
 * CUDA, a stream and a staging area for the caller's host buffers. Every kernel call dispatches
 * on its slot's device: the C loop or library kernel on the CPU, the generated or library CUDA
 * kernel on a GPU (only when compiled with -DMRT_WITH_CUDA, i.e. with NAME.cu). GEMMs go through
 * mrt_gemm_f32 (OpenBLAS or cuBLAS). Arena offsets come from two plans of the same schedule: 64-
 * byte alignment for the CPU, 256 for CUDA; weight regions use 256 for both.
 */
#include "modelc.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *c_type(DType dt) { return dt == DT_F32 ? "float" : dt == DT_I32 ? "int32_t" : "int64_t"; }
static const char *mrt_dtype(DType dt) { return dt == DT_F32 ? "MRT_F32" : dt == DT_I32 ? "MRT_I32" : "MRT_I64"; }

char *dim_c(Dim d) {
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

char *c_ident(const char *name) {
    static const char *reserved[] = {"auto", "break", "case", "char", "const", "continue", "default", "do",
                                     "double", "else", "enum", "extern", "float", "for", "goto", "if", "inline",
                                     "int", "long", "register", "restrict", "return", "short", "signed", "sizeof",
                                     "static", "struct", "switch", "typedef", "union", "unsigned", "void",
                                     "volatile", "while", "m", "batch", "B", "st", "host", "direct", NULL};
    char *s = xstrdup(name);
    for (char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '_') *p = '_';
    for (int i = 0; reserved[i]; i++)
        if (!strcmp(s, reserved[i])) return xprintf("%s_", s);
    if (!strncmp(s, "mrt_", 4) || isdigit((unsigned char)s[0])) return xprintf("%s_", s); /* our locals are mrt_* */
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

/* ---------------------------------------------------------------- shared with emit_cuda.c */

static int emit_expr(FILE *o, const Kernel *k, const Expr *x, int *tmp) {
    const char *T = c_type(k->root->dtype);
    int a = -1, b = -1, c3 = -1, t;
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
    a = emit_expr(o, k, x->a, tmp);
    if (x->b) b = emit_expr(o, k, x->b, tmp);
    if (x->c) c3 = emit_expr(o, k, x->c, tmp);
    t = (*tmp)++;
    fprintf(o, "    const %s t%d = ", T, t);
    switch (x->op) {
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
    case OP_PERMUTE: case OP_SLICE: fprintf(o, "t%d", a); break;
    case OP_WHERE: fprintf(o, "t%d != 0 ? t%d : t%d", a, b, c3); break;
    default: ICE("op %s in an elementwise expression", op_name(x->op));
    }
    fprintf(o, ";  /* %%%d %s */\n", x->node ? x->node->id : -1, op_name(x->op));
    return t;
}

void emit_expr_function(FILE *o, const Kernel *k, const char *fname) {
    fprintf(o, "MRT_HD %s %s_expr(", c_type(k->root->dtype), fname);
    for (int i = 0; i < k->nleaves; i++) fprintf(o, "%s%s a%d", i ? ", " : "", c_type(k->leaves[i].node->dtype), i);
    if (!k->nleaves) fprintf(o, "void");
    fprintf(o, ") {\n");
    int tmp = 0;
    int res = emit_expr(o, k, k->expr, &tmp);
    fprintf(o, "    return t%d;\n}\n\n", res);
}

void kernel_loops(const Kernel *k, LoopNest *ln) {
    const Node *r = k->root;
    int rank = r->shape.rank;
    int nops = 1 + k->nleaves;
    if (nops > MAX_OPERANDS) ICE("kernel k%d reads %d tensors; at most %d are supported", k->id, k->nleaves, MAX_OPERANDS - 1);
    ln->nops = nops;
    for (int d = 0; d < rank; d++) ln->n[d] = r->shape.d[d];
    contiguous_strides(&r->shape, ln->stride[0]);
    ln->base[0] = NULL;
    for (int i = 0; i < k->nleaves; i++) {
        const LeafRef *l = &k->leaves[i];
        Dim ls[MAX_RANK];
        contiguous_strides(&l->node->shape, ls);
        for (int d = 0; d < rank; d++) ln->stride[1 + i][d] = (Dim){0, false};
        ln->base[1 + i] = NULL;
        for (int d = 0; d < l->node->shape.rank; d++) {
            if (l->map[d] >= 0) ln->stride[1 + i][l->map[d]] = dim_mul(ls[d], (Dim){l->step[d], false}, NULL);
            if (l->start[d]) {
                char *term = xprintf("%" PRId64 " * %s", l->start[d], dim_c(ls[d]));
                ln->base[1 + i] = ln->base[1 + i] ? xprintf("%s + %s", ln->base[1 + i], term) : term;
            }
        }
    }
    /* Merge dimension d into d+1 when every operand is contiguous across them. */
    for (int d = rank - 2; d >= 0; d--) {
        bool ok = true;
        for (int j = 0; j < nops && ok; j++) {
            bool mok;
            Dim want = dim_mul(ln->stride[j][d + 1], ln->n[d + 1], &mok);
            ok = mok && dim_eq(want, ln->stride[j][d]);
        }
        bool mok;
        Dim merged = dim_mul(ln->n[d], ln->n[d + 1], &mok);
        if (!ok || !mok) continue;
        ln->n[d] = merged;
        for (int j = 0; j < nops; j++) {
            ln->stride[j][d] = ln->stride[j][d + 1];
            for (int q = d + 1; q + 1 < rank; q++) ln->stride[j][q] = ln->stride[j][q + 1];
        }
        for (int q = d + 1; q + 1 < rank; q++) ln->n[q] = ln->n[q + 1];
        rank--;
    }
    ln->rank = rank;
}

char *loop_index(const LoopNest *ln, int op) {
    char *s = ln->base[op] ? xstrdup(ln->base[op]) : NULL;
    for (int d = 0; d < ln->rank; d++) {
        Dim st = ln->stride[op][d];
        if (st.c == 0) continue;
        char *term = (st.c == 1 && !st.sym) ? xprintf("i%d", d) : xprintf("i%d * %s", d, dim_c(st));
        s = s ? xprintf("%s + %s", s, term) : term;
    }
    return s ? s : xstrdup("0");
}

/* ---------------------------------------------------------------- state */

typedef struct Emit {
    const Graph *g;
    const KernelList *kl;
    const KernelList *init; /* kernels run once at load time */
    const MemPlan *mp;      /* the CPU plan (64-byte aligned arena) */
    const MemPlan *mpc;     /* the CUDA plan (256), same schedule and storages */
    FILE *o;
    char *pfx;  /* C identifier prefix: the model name */
    char *PFX;  /* macro prefix */
    const char *scratch; /* the current kernel's scratch pointer (C), or NULL */
    const char *kpfx;    /* "k" (run) or "init" (load time), for comments */
    size_t *io_off;      /* io_off[storage id]: offset in its slot's CUDA staging area */
    size_t *io_bytes;    /* per slot */
} Emit;

static int kslot(const Kernel *k) { return k->root->slot > 0 ? k->root->slot : 0; }

/* Print a call dispatched on slot s's device: `cpu` is a C statement, `cuda` an expression
 * returning mrt_status. Every slot decides when the model runs, not when it is compiled: the
 * device map can move a slot pinned to a GPU onto the CPU, and back. */
static void dispatch(Emit *e, int s, const char *cpu, const char *cuda) {
    FILE *o = e->o;
    if (!cuda) {
        fprintf(o, "    %s\n", cpu);
        return;
    }
    fprintf(o, "#ifdef MRT_WITH_CUDA\n    if (C%d) {\n        if ((st = %s) != MRT_OK) return st;\n    } else\n#endif\n"
               "    {\n        %s\n    }\n", s, cuda, cpu);
}

/* ---------------------------------------------------------------- elementwise */

static void emit_elementwise(Emit *e, const Kernel *k, const char *fname) {
    FILE *o = e->o;
    const char *T = c_type(k->root->dtype);
    emit_expr_function(o, k, fname);
    LoopNest ln;
    kernel_loops(k, &ln);
    fprintf(o, "static void %s(%s *out", fname, T);
    for (int i = 0; i < k->nleaves; i++) fprintf(o, ", const %s *l%d", c_type(k->leaves[i].node->dtype), i);
    fprintf(o, ", int64_t B) {\n    (void)B;\n");
    for (int d = 0; d < ln.rank; d++)
        fprintf(o, "%*sfor (int64_t i%d = 0; i%d < %s; i%d++) {\n", 4 * (d + 1), "", d, d, dim_c(ln.n[d]), d);
    fprintf(o, "%*sout[%s] = %s_expr(", 4 * (ln.rank + 1), "", loop_index(&ln, 0), fname);
    for (int i = 0; i < k->nleaves; i++) fprintf(o, "%sl%d[%s]", i ? ", " : "", i, loop_index(&ln, 1 + i));
    fprintf(o, ");\n");
    for (int d = ln.rank - 1; d >= 0; d--) fprintf(o, "%*s}\n", 4 * (d + 1), "");
    fprintf(o, "}\n\n");
}

static void emit_elementwise_call(Emit *e, const Kernel *k, char **ptr, const char *pfx) {
    char *args = xstrdup(ptr[k->root->id]);
    for (int j = 0; j < k->nleaves; j++)
        args = xprintf("%s, %s", args, j == k->gemm_leaf ? ptr[k->root->id] : ptr[view_base(k->leaves[j].node)->id]);
    if (k->kind == K_ELEMENTWISE) fprintf(e->o, "    /* %s%d: elementwise -> %%%d */\n", pfx, k->id, k->root->id);
    dispatch(e, kslot(k), xprintf("%s_%s%d(%s, B);", e->pfx, pfx, k->id, args),
             xprintf("%s_cuda_%s%d(S%d, %s, B)", e->pfx, pfx, k->id, kslot(k), args));
}

/* ---------------------------------------------------------------- GEMM and convolution */

static void check_blas_dim(Emit *e, const Node *m, Dim d, const char *what) {
    if (dim_at(d, e->g->max_batch) > INT32_MAX)
        error_at(m->loc, "matmul %s %" PRId64 " exceeds the BLAS limit of 2^31-1", what, dim_at(d, e->g->max_batch));
}

static void emit_gemm_call(Emit *e, const Kernel *k, char **ptr) {
    FILE *o = e->o;
    const Node *m = k->gemm;
    int s = kslot(k);
    const Shape *sa = &m->in[0]->shape, *sb = &m->in[1]->shape, *so = &m->shape;
    const char *A = ptr[view_base(m->in[0])->id], *Bm = ptr[view_base(m->in[1])->id], *C = ptr[k->root->id];
    if (m->op == OP_CONV2D) {
        const Shape *sx = &m->in[0]->shape;
        char *args = xprintf("%s, %s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %d, %d, %" PRId64
                             ", %" PRId64 ", %d, %d, %d, %d, %d, %d, %d, %s",
                             C, A, Bm, dim_c(sx->d[0]), sx->d[1].c, sx->d[2].c, sx->d[3].c, so->d[1].c, m->kernel[0],
                             m->kernel[1], so->d[2].c, so->d[3].c, m->stride[0], m->stride[1], m->pad[0], m->pad[1],
                             m->dilation[0], m->dilation[1], m->groups, e->scratch ? e->scratch : "NULL");
        fprintf(o, "    /* %s%d: conv2d %%%d = conv(%%%d, %%%d) */\n", e->kpfx, k->id, m->id, m->in[0]->id, m->in[1]->id);
        dispatch(e, s, xprintf("mrt_conv2d_f32(%s);", args), xprintf("mrt_cuda_conv2d_f32(S%d, %s)", s, args));
        return;
    }
    Dim M = sa->d[sa->rank - 2], K = sa->d[sa->rank - 1], N = so->d[so->rank - 1];
    check_blas_dim(e, m, M, "rows");
    check_blas_dim(e, m, K, "inner dimension");
    check_blas_dim(e, m, N, "columns");
    int tb = m->trans_b;
    char *ldb = tb ? dim_c(K) : dim_c(N);
    int ob = so->rank - 2, ab = sa->rank - 2, bb = sb->rank - 2;
    Dim bnum = {1, false}, onum = {1, false};
    for (int i = 0; i < bb; i++) bnum = dim_mul(bnum, sb->d[i], NULL);
    for (int i = 0; i < ob; i++) onum = dim_mul(onum, so->d[i], NULL);
    bool a_full = ab == ob, b_full = bb == ob;
    for (int i = 0; i < ab && a_full; i++) a_full = dim_eq(sa->d[i], so->d[i]);
    for (int i = 0; i < bb && b_full; i++) b_full = dim_eq(sb->d[i], so->d[i]);
    Dim anum = {1, false};
    for (int i = 0; i < ab; i++) anum = dim_mul(anum, sa->d[i], NULL);
    bool a_one = !anum.sym && anum.c == 1, b_one = !bnum.sym && bnum.c == 1;
    fprintf(o, "    /* %s%d: gemm %%%d = %%%d @ %%%d%s */\n", e->kpfx, k->id, m->id, m->in[0]->id, m->in[1]->id, tb ? "^T" : "");
    char *call;
    if (b_one && a_full) {
        /* One GEMM: a's leading dims fold into M. */
        Dim rows = {1, false};
        for (int i = 0; i < sa->rank - 1; i++) rows = dim_mul(rows, sa->d[i], NULL);
        check_blas_dim(e, m, rows, "rows");
        call = xprintf("mrt_gemm_f32(D%d, S%d, 0, %d, %s, %s, %s, 1.0f, %s, %s, 0, %s, %s, 0, 0.0f, %s, %s, 0, 1)", s, s, tb,
                       dim_c(rows), dim_c(N), dim_c(K), A, dim_c(K), Bm, ldb, C, dim_c(N));
    } else if ((a_full || a_one) && (b_full || b_one)) {
        /* A strided batch over the flattened leading dims (a stride of 0 repeats a matrix). */
        char *sA = a_one ? xstrdup("0") : dim_c(dim_mul(M, K, NULL));
        char *sB = b_one ? xstrdup("0") : dim_c(dim_mul(sb->d[sb->rank - 2], sb->d[sb->rank - 1], NULL));
        call = xprintf("mrt_gemm_f32(D%d, S%d, 0, %d, %s, %s, %s, 1.0f, %s, %s, %s, %s, %s, %s, 0.0f, %s, %s, %s, %s)", s, s,
                       tb, dim_c(M), dim_c(N), dim_c(K), A, dim_c(K), sA, Bm, ldb, sB, C, dim_c(N),
                       dim_c(dim_mul(M, N, NULL)), dim_c(onum));
    } else {
        /* General broadcasting of the leading dims: one GEMM per output matrix. */
        Dim ast[MAX_RANK], bst[MAX_RANK], ost[MAX_RANK];
        contiguous_strides(sa, ast);
        contiguous_strides(sb, bst);
        contiguous_strides(so, ost);
        fprintf(o, "    for (int64_t mrt_b = 0; mrt_b < %s; mrt_b++) {\n        int64_t mrt_r = mrt_b, ao = 0, bo = 0, co = 0;\n",
                dim_c(onum));
        for (int i = ob - 1; i >= 0; i--) {
            int ia = i - (ob - ab), ib = i - (ob - bb);
            fprintf(o, "        { const int64_t ix = mrt_r %% %s; mrt_r /= %s; co += ix * %s;", dim_c(so->d[i]),
                    dim_c(so->d[i]), dim_c(ost[i]));
            if (ia >= 0 && !(sa->d[ia].c == 1 && !sa->d[ia].sym)) fprintf(o, " ao += ix * %s;", dim_c(ast[ia]));
            if (ib >= 0 && !(sb->d[ib].c == 1 && !sb->d[ib].sym)) fprintf(o, " bo += ix * %s;", dim_c(bst[ib]));
            fprintf(o, " }\n");
        }
        fprintf(o, "        if ((st = mrt_gemm_f32(D%d, S%d, 0, %d, %s, %s, %s, 1.0f, %s + ao, %s, 0, %s + bo, %s, 0, 0.0f, "
                   "%s + co, %s, 0, 1)) != MRT_OK)\n            return st;\n    }\n",
                s, s, tb, dim_c(M), dim_c(N), dim_c(K), A, dim_c(K), Bm, ldb, C, dim_c(N));
        return;
    }
    fprintf(o, "    if ((st = %s) != MRT_OK) return st;\n", call);
}

/* A GEMM whose epilogue is exactly act(gemm + bias[N]) (act: none, relu, gelu tanh form) and
 * that is one plain GEMM: on a GPU it is one cuBLASLt matmul with that epilogue fused. Sets the
 * bias leaf (-1: none) and act (0, 1 relu, 2 gelu_tanh). */
static bool lt_epilogue(const Kernel *k, int *bias_leaf, int *act) {
    const Node *m = k->gemm, *r = k->root;
    if (!m || m->op != OP_MATMUL || !k->expr || r->dtype != DT_F32) return false;
    const Shape *sa = &m->in[0]->shape, *sb = &m->in[1]->shape, *so = &m->shape;
    for (int i = 0; i + 2 < sb->rank; i++)
        if (sb->d[i].sym || sb->d[i].c != 1) return false;
    if (sa->rank != so->rank) return false;
    for (int i = 0; i + 2 < sa->rank; i++)
        if (!dim_eq(sa->d[i], so->d[i])) return false;
    const Expr *x = k->expr;
    *act = 0;
    if (x->op == OP_RELU || x->op == OP_GELU_TANH) {
        *act = x->op == OP_RELU ? 1 : 2;
        x = x->a;
    }
    *bias_leaf = -1;
    if (x->op == OP_INPUT && x->leaf == k->gemm_leaf) return *act != 0;
    if (x->op != OP_ADD || x->a->op != OP_INPUT || x->b->op != OP_INPUT) return false;
    int g = x->a->leaf == k->gemm_leaf ? 0 : x->b->leaf == k->gemm_leaf ? 1 : -1;
    if (g < 0) return false;
    int bl = g == 0 ? x->b->leaf : x->a->leaf;
    const LeafRef *l = &k->leaves[bl];
    int lr = l->node->shape.rank, rr = r->shape.rank;
    if (lr < 1 || l->node->dtype != DT_F32 || l->map[lr - 1] != rr - 1 || l->start[lr - 1] || l->step[lr - 1] != 1 ||
        !dim_eq(l->node->shape.d[lr - 1], r->shape.d[rr - 1]))
        return false;
    for (int d = 0; d + 1 < lr; d++)
        if (l->map[d] >= 0 || l->start[d]) return false;
    *bias_leaf = bl;
    return true;
}

static void emit_lt_gemm(Emit *e, const Kernel *k, char **ptr, int bias_leaf, int act) {
    FILE *o = e->o;
    const Node *m = k->gemm;
    int s = kslot(k);
    const Shape *sa = &m->in[0]->shape, *so = &m->shape;
    Dim K = sa->d[sa->rank - 1], N = so->d[so->rank - 1], rows = {1, false};
    for (int i = 0; i < sa->rank - 1; i++) rows = dim_mul(rows, sa->d[i], NULL);
    check_blas_dim(e, m, rows, "rows");
    check_blas_dim(e, m, K, "inner dimension");
    check_blas_dim(e, m, N, "columns");
    const char *A = ptr[view_base(m->in[0])->id], *Bm = ptr[view_base(m->in[1])->id], *C = ptr[k->root->id];
    const char *bias = bias_leaf >= 0 ? ptr[view_base(k->leaves[bias_leaf].node)->id] : "NULL";
    char *ldb = m->trans_b ? dim_c(K) : dim_c(N);
    static const char *acts[] = {"", " + relu", " + gelu_tanh"};
    fprintf(o, "    /* %s%d: gemm %%%d = %%%d @ %%%d%s%s%s: one cuBLASLt matmul with its epilogue on a GPU */\n", e->kpfx,
            k->id, m->id, m->in[0]->id, m->in[1]->id, m->trans_b ? "^T" : "", bias_leaf >= 0 ? " + bias" : "", acts[act]);
    char *lt = xprintf("mrt_gemm_bias_act_f32(D%d, S%d, %d, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %d)", s, s, m->trans_b,
                       dim_c(rows), dim_c(N), dim_c(K), A, dim_c(K), Bm, ldb, C, dim_c(N), bias, act);
    char *args = xstrdup(C);
    for (int j = 0; j < k->nleaves; j++)
        args = xprintf("%s, %s", args, j == k->gemm_leaf ? C : ptr[view_base(k->leaves[j].node)->id]);
    char *cpu = xprintf("if ((st = mrt_gemm_f32(D%d, S%d, 0, %d, %s, %s, %s, 1.0f, %s, %s, 0, %s, %s, 0, 0.0f, %s, %s, 0, 1)) != MRT_OK)\n"
                        "            return st;\n        %s_%s%d(%s, B);",
                        s, s, m->trans_b, dim_c(rows), dim_c(N), dim_c(K), A, dim_c(K), Bm, ldb, C, dim_c(N), e->pfx,
                        e->kpfx, k->id, args);
    dispatch(e, s, cpu, lt);
}

/* ---------------------------------------------------------------- library kernels */

static void emit_library_call(Emit *e, const Kernel *k, char **ptr) {
    FILE *o = e->o;
    const Node *r = k->reduce, *x = r->in[0];
    int s = kslot(k);
    const char *X = ptr[view_base(x)->id], *Y = ptr[r->id];
    const Shape *xs = &x->shape;
    char *args = NULL, *fn = NULL;
    fprintf(o, "    /* %s%d: %s %%%d */\n", e->kpfx, k->id, op_name(r->op), r->id);
    switch (r->op) {
    case OP_TRANSFER: {
        const Node *src = view_base(x);
        int ss = src->slot > 0 ? src->slot : 0;
        char *bytes = xprintf("%s * %zu", dim_c(shape_numel(&r->shape)), dtype_size(r->dtype));
        fprintf(o, "#ifdef MRT_WITH_CUDA\n    if (C%d && (st = mrt_stream_sync(D%d, S%d, \"%s transfer\")) != MRT_OK) return st;\n#endif\n",
                ss, ss, ss, e->pfx);
        fprintf(o, "    if ((st = mrt_memcpy(D%d, %s, D%d, %s, %s, S%d)) != MRT_OK) return st;\n", s, Y, ss, X, bytes, s);
        return;
    }
    case OP_MAXPOOL2D:
        fn = "maxpool2d_f32";
        args = xprintf("%s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %d, %d, %d, %d, %d, %d, %d, %d", Y, X,
                       dim_c(dim_mul(xs->d[0], xs->d[1], NULL)), xs->d[2].c, xs->d[3].c, r->shape.d[2].c, r->shape.d[3].c,
                       r->kernel[0], r->kernel[1], r->stride[0], r->stride[1], r->pad[0], r->pad[1], r->dilation[0],
                       r->dilation[1]);
        break;
    case OP_AVGPOOL2D:
        fn = "avgpool2d_f32";
        args = xprintf("%s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %d, %d, %d, %d, %d, %d, %d, %d, %d", Y,
                       X, dim_c(dim_mul(xs->d[0], xs->d[1], NULL)), xs->d[2].c, xs->d[3].c, r->shape.d[2].c,
                       r->shape.d[3].c, r->kernel[0], r->kernel[1], r->stride[0], r->stride[1], r->pad[0], r->pad[1],
                       r->pad[2], r->pad[3], r->count_include_pad);
        break;
    case OP_ADAPTIVE_AVGPOOL2D:
        fn = "adaptive_avgpool2d_f32";
        args = xprintf("%s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64, Y, X,
                       dim_c(dim_mul(xs->d[0], xs->d[1], NULL)), xs->d[2].c, xs->d[3].c, r->shape.d[2].c, r->shape.d[3].c);
        break;
    case OP_LAYER_NORM: {
        Dim rows = {1, false};
        for (int i = 0; i + 1 < xs->rank; i++) rows = dim_mul(rows, xs->d[i], NULL);
        fn = "layernorm_f32";
        args = xprintf("%s, %s, %s, %s, %s, %" PRId64 ", %s", Y, X, ptr[view_base(r->in[1])->id],
                       ptr[view_base(r->in[2])->id], dim_c(rows), xs->d[xs->rank - 1].c, float_lit(r->value));
        break;
    }
    case OP_EMBEDDING: {
        const Node *w = r->in[1];
        const char *what = xprintf("%s: embedding %s", e->pfx, x->name ? x->name : "ids");
        char *a = xprintf("%s, %s, %d, %s, %s, %" PRId64 ", %" PRId64, Y, X, x->dtype == DT_I64, dim_c(shape_numel(xs)),
                          ptr[view_base(w)->id], w->shape.d[0].c, w->shape.d[1].c);
        char *cpu = xprintf("int64_t bad_id = 0, bad = mrt_embedding_f32(%s, &bad_id);\n"
                            "        if (bad >= 0)\n            return mrt_set_error(MRT_ERR_INVALID_ARG, \"%s: id %%lld at "
                            "position %%lld is out of range [0, %" PRId64 ")\", (long long)bad_id, (long long)bad);",
                            a, what, w->shape.d[0].c);
        dispatch(e, s, cpu, xprintf("mrt_cuda_embedding_f32(S%d, %s, \"%s\")", s, a, what));
        return;
    }
    case OP_CONCAT: {
        size_t es = dtype_size(r->dtype);
        Dim outer = {1, false}, inner = {1, false};
        for (int i = 0; i < r->axis; i++) outer = dim_mul(outer, r->shape.d[i], NULL);
        for (int i = r->axis + 1; i < r->shape.rank; i++) inner = dim_mul(inner, r->shape.d[i], NULL);
        Dim yrow = dim_mul(r->shape.d[r->axis], inner, NULL);
        Dim off = {0, r->shape.d[r->axis].sym};
        for (int j = 0; j < r->nin; j++) {
            const Node *xj = r->in[j];
            Dim xrow = dim_mul(xj->shape.d[r->axis], inner, NULL);
            char *a = xprintf("%s, %s, %s, %s * %zu, %s * %zu, %s * %zu", Y, ptr[view_base(xj)->id], dim_c(outer),
                              dim_c(xrow), es, dim_c(yrow), es, off.c ? dim_c(off) : "0", es);
            dispatch(e, s, xprintf("mrt_concat_part(%s);", a), xprintf("mrt_cuda_concat_part(S%d, %s)", s, a));
            off.c += xrow.c;
        }
        return;
    }
    default: {
        Dim outer = {1, false}, inner = {1, false};
        for (int i = 0; i < r->axis; i++) outer = dim_mul(outer, xs->d[i], NULL);
        for (int i = r->axis + 1; i < xs->rank; i++) inner = dim_mul(inner, xs->d[i], NULL);
        char *n = dim_c(xs->d[r->axis]), *ou = dim_c(outer), *in = dim_c(inner);
        switch (r->op) {
        case OP_SOFTMAX:
            if (r->causal || r->zero_masked_rows) {
                fn = "softmax_masked_f32";
                args = xprintf("%s, %s, %s, %s, %" PRId64 ", %d, %d", Y, X, ou, n,
                               xs->rank >= 2 ? xs->d[xs->rank - 2].c : 1, r->causal, r->zero_masked_rows);
            } else {
                fn = "softmax_f32";
                args = xprintf("%s, %s, %s, %s, %s, 0", Y, X, ou, n, in);
            }
            break;
        case OP_LOG_SOFTMAX: fn = "softmax_f32"; args = xprintf("%s, %s, %s, %s, %s, 1", Y, X, ou, n, in); break;
        case OP_SUM: fn = "sum_f32"; args = xprintf("%s, %s, %s, %s, %s, 0", Y, X, ou, n, in); break;
        case OP_MEAN: fn = "sum_f32"; args = xprintf("%s, %s, %s, %s, %s, 1", Y, X, ou, n, in); break;
        case OP_MAX: fn = "max_f32"; args = xprintf("%s, %s, %s, %s, %s", Y, X, ou, n, in); break;
        case OP_ARGMAX: fn = "argmax_f32"; args = xprintf("%s, %s, %s, %s, %s", Y, X, ou, n, in); break;
        default: ICE("no kernel for op %s", op_name(r->op));
        }
    }
    }
    dispatch(e, s, xprintf("mrt_%s(%s);", fn, args), xprintf("mrt_cuda_%s(S%d, %s)", fn, s, args));
}

/* ---------------------------------------------------------------- header */

static void doc_tensor(Emit *e, FILE *o, const char *role, const char *name, const Node *n) {
    char buf[256];
    fprintf(o, " *   %-12s %s%s, host memory or model-device memory (%s)\n", c_ident(name), dtype_name(n->dtype),
            shape_str(&n->shape, e->g->batch_name, buf, sizeof buf), role);
}

static void emit_run_proto(Emit *e, FILE *o) {
    const Graph *g = e->g;
    fprintf(o, "mrt_status %s_run(%s *m, int batch", e->pfx, e->pfx);
    for (int i = 0; i < g->ninputs; i++)
        fprintf(o, ",\n        const %s *%s", c_type(g->inputs[i]->dtype), c_ident(g->inputs[i]->name));
    for (int i = 0; i < g->noutputs; i++)
        fprintf(o, ",\n        %s *%s", c_type(g->outputs[i].node->dtype), c_ident(g->outputs[i].name));
    fprintf(o, ")");
}

static void emit_header(Emit *e, FILE *o, const char *unused) {
    const Graph *g = e->g;
    char buf[256];
    fprintf(o, "/* %s.h — generated by modelc from model '%s'. Do not edit.\n *\n", e->pfx, g->name);
    fprintf(o, " * Usage:\n *   %s *m;\n *   %s_create(&m, \"auto\");     (or \"cpu\", \"cuda\", \"cuda:1\")\n", e->pfx, e->pfx);
    fprintf(o, " *   %s_load_weights(m, \"%s.safetensors\");\n *   %s_run(m, batch, inputs..., outputs...);\n", e->pfx,
            e->pfx, e->pfx);
    fprintf(o, " *   %s_destroy(m);\n * Every call returns an mrt_status; on failure mrt_last_error() says why.\n *\n", e->pfx);
    fprintf(o, " * Build: cc -c %s.c (CPU only), or nvcc -c %s.cu and cc -DMRT_WITH_CUDA -c %s.c, then link with\n"
               " * libmodelrt (pkg-config --libs modelrt).\n */\n", e->pfx, e->pfx, e->pfx);
    fprintf(o, "#ifndef %s_H\n#define %s_H\n\n#include \"modelrt.h\"\n\n#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n",
            e->PFX, e->PFX);
    fprintf(o, "/* The model handle is the runtime's mrt_model (see modelrt.h); %s_run checks that it was\n"
               " * created for this model. */\ntypedef struct mrt_model %s;\n\n", e->pfx, e->pfx);
    fprintf(o, "/* Sizes from the memory plan, in bytes (activations at the maximum batch), per device slot as\n"
               " * --dump=memplan prints them. Slot 0 is the model's device: weights (resident after loading),\n"
               " * load-only weights (raw params only load-time folding reads; freed after loading), and the\n"
               " * arena with the CPU plan (64-byte alignment) and the CUDA plan (256). */\n");
    fprintf(o, "#define %s_MAX_BATCH %d\n", e->PFX, g->has_batch ? g->max_batch : 1);
    fprintf(o, "#define %s_WEIGHT_BYTES %zu\n", e->PFX, e->mp->slot_weights[0]);
    fprintf(o, "#define %s_LOAD_BYTES %zu\n", e->PFX, e->mp->slot_load[0]);
    fprintf(o, "#define %s_ARENA_BYTES_CPU %zu\n", e->PFX, e->mp->slot_arena[0]);
    fprintf(o, "#define %s_ARENA_BYTES_CUDA %zu\n", e->PFX, e->mpc->slot_arena[0]);
    for (int s = 1; s < g->nslots; s++) {
        fprintf(o, "/* device slot %d, pinned by 'on %s' at %s:%d */\n", s, g->slots[s].name, g->source, g->slots[s].loc.line);
        fprintf(o, "#define %s_SLOT%d_DEVICE \"%s\"\n", e->PFX, s, g->slots[s].name);
        fprintf(o, "#define %s_SLOT%d_WEIGHT_BYTES %zu\n", e->PFX, s, e->mp->slot_weights[s]);
        fprintf(o, "#define %s_SLOT%d_LOAD_BYTES %zu\n", e->PFX, s, e->mp->slot_load[s]);
        fprintf(o, "#define %s_SLOT%d_ARENA_BYTES_CPU %zu\n", e->PFX, s, e->mp->slot_arena[s]);
        fprintf(o, "#define %s_SLOT%d_ARENA_BYTES_CUDA %zu\n", e->PFX, s, e->mpc->slot_arena[s]);
    }
    fprintf(o, "\n/** Create the model on `device` (\"auto\", \"cpu\", \"cpu:N\", \"cuda\", \"cuda:N\"; NULL means\n"
               " *  $MODELRT_DEVICE or \"auto\", which picks the first usable GPU, else the CPU, and logs which).\n"
               " *  An explicit device that is absent is an error, never a fallback. The weight region and the\n"
               " *  activation arena are allocated there once; on a GPU, free memory is checked first. *m is set\n"
               " *  to NULL on failure. Free with %s_destroy. */\n", e->pfx);
    fprintf(o, "mrt_status %s_create(%s **m, const char *device);\n\n", e->pfx, e->pfx);
    fprintf(o, "/** %s_create with a device map for the devices 'on' regions pin, as PyTorch's map_location:\n"
               " *  \"cuda:1=cpu,cuda:0=cuda:0\" runs the cuda:1 region on the CPU (NULL: $MODELRT_DEVICE_MAP). */\n"
               "mrt_status %s_create_mapped(%s **m, const char *device, const char *device_map);\n\n", e->pfx, e->pfx, e->pfx);
    fprintf(o, "/** Load the weights from a safetensors file whose tensor names are the params below (a\n"
               " *  PyTorch state_dict saved with safetensors) and move them to the model's device(s), once.\n"
               " *  Every missing, unexpected, mistyped or mis-shaped tensor is an error naming it. Params:\n");
    for (int i = 0; i < g->nparams; i++)
        fprintf(o, " *   %-24s %s%s\n", g->params[i]->name, dtype_name(g->params[i]->dtype),
                shape_str(&g->params[i]->shape, g->batch_name, buf, sizeof buf));
    if (!g->nparams) fprintf(o, " *   (none: the path may be NULL)\n");
    fprintf(o, " */\nmrt_status %s_load_weights(%s *m, const char *safetensors_path);\n\n", e->pfx, e->pfx);
    fprintf(o, "/** Run the model synchronously. `batch` is in 1..%s_MAX_BATCH%s.\n", e->PFX,
            g->has_batch ? "" : " (this model has no batch dimension: pass 1)");
    fprintf(o, " *  Buffers are host memory (copied to and from the device), or memory on the model's own CUDA\n"
               " *  device (used in place, no copy); memory on another GPU is an error.\n");
    if (g->has_batch) fprintf(o, " *  Shapes use %s = batch.\n", g->batch_name);
    for (int i = 0; i < g->ninputs; i++) doc_tensor(e, o, "input", g->inputs[i]->name, g->inputs[i]);
    for (int i = 0; i < g->noutputs; i++) doc_tensor(e, o, "output", g->outputs[i].name, g->outputs[i].node);
    fprintf(o, " */\n");
    emit_run_proto(e, o);
    fprintf(o, ";\n\n/** Free everything the model holds. NULL is ignored. */\nvoid %s_destroy(%s *m);\n\n", e->pfx, e->pfx);
    fprintf(o, "/** The device the model runs on (slot 0). */\nmrt_device %s_device(const %s *m);\n\n", e->pfx, e->pfx);
    fprintf(o, "/** Descriptors: for the runtime (mrt_model_create) and for generic drivers (mrt_main). */\n"
               "extern const mrt_model_desc %s_desc;\nextern const mrt_model_info %s_info;\n\n", e->pfx, e->pfx);
    fprintf(o, "#ifdef __cplusplus\n}\n#endif\n#endif /* %s_H */\n", e->PFX);
}

/* ---------------------------------------------------------------- the C file */

static void io_desc(FILE *o, const char *name, const Node *n) {
    unsigned mask = 0;
    fprintf(o, "    {\"%s\", %s, %d, {", name, mrt_dtype(n->dtype), n->shape.rank);
    for (int i = 0; i < n->shape.rank; i++) {
        fprintf(o, "%s%" PRId64, i ? ", " : "", n->shape.d[i].c);
        if (n->shape.d[i].sym) mask |= 1u << i;
    }
    fprintf(o, "}, 0x%xu},\n", mask);
}

static size_t bytes_at_max(const Graph *g, const Node *n) {
    return (size_t)dim_at(shape_numel(&n->shape), g->max_batch) * dtype_size(n->dtype);
}

static char *bytes_c(const Node *n) {
    return xprintf("(size_t)%s * %zu", dim_c(shape_numel(&n->shape)), dtype_size(n->dtype));
}

/* One pointer per materialized value: in run() (inputs, params, load-time values, arena,
 * outputs) or in load_weights() (params and load-time values only). */
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
        if (!at_load && s->load_only) continue; /* freed after loading; run() never reads it */
        const char *T = c_type(n->dtype);
        int sl = s->slot;
        ptr[i] = xprintf("mrt_v%d", i);
        switch (s->kind) {
        case S_INPUT: {
            const char *name = c_ident(g->inputs[s->index]->name);
            fprintf(o, "    const %s *mrt_v%d;\n", T, i);
            fprintf(o, "    if ((st = mrt_model_stage_in(m, %d, %s, %s, %zu, (const void **)&mrt_v%d, \"%s\")) != MRT_OK) return st;\n",
                    sl, name, bytes_c(n), e->io_off[s->id], i, g->inputs[s->index]->name);
            break;
        }
        case S_PARAM:
            fprintf(o, "    const %s *const mrt_v%d = (const %s *)(%c%d + %zu);  /* %s */\n", T, i, T, s->load_only ? 'L' : 'W',
                    sl, s->offset, n->name);
            break;
        case S_INIT:
            if (at_load) fprintf(o, "    %s *const mrt_v%d = (%s *)(%c%d + %zu);\n", T, i, T, s->load_only ? 'L' : 'W', sl, s->offset);
            else fprintf(o, "    const %s *const mrt_v%d = (const %s *)(W%d + %zu);  /* computed at load */\n", T, i, T, sl, s->offset);
            break;
        case S_ARENA:
            fprintf(o, "    %s *const mrt_v%d = (%s *)(A%d + O%d[%d]);\n", T, i, T, sl, sl, s->id);
            break;
        case S_OUTPUT: {
            const char *name = c_ident(g->outputs[s->index].name);
            fprintf(o, "    %s *mrt_v%d;\n    int mrt_back%d;\n", T, i, i);
            fprintf(o, "    if ((st = mrt_model_stage_out(m, %d, %s, %zu, (void **)&mrt_v%d, &mrt_back%d, \"%s\")) != MRT_OK) return st;\n",
                    sl, name, e->io_off[s->id], i, i, g->outputs[s->index].name);
            break;
        }
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
    bool run = !strcmp(pfx, "k");
    int active = 0; /* the slot whose device is current (callers activate slot 0 first) */
    e->kpfx = pfx;
    for (int i = 0; i < kl->n; i++) {
        const Kernel *k = kl->k[i];
        int s = kslot(k);
        if (s != active) {
            /* launches and library calls run on the current device: make it this slot's (B14) */
            fprintf(e->o, "#ifdef MRT_WITH_CUDA\n    if (C%d && (st = mrt_device_activate(D%d)) != MRT_OK) return st;\n#endif\n", s, s);
            active = s;
        }
        e->scratch = NULL;
        if (run && e->mp->scratch[i])
            e->scratch = xprintf("(float *)(A%d + O%d[%d])", kslot(k), kslot(k), e->mp->scratch[i]->id);
        int bias_leaf, act;
        if (k->kind == K_GEMM && lt_epilogue(k, &bias_leaf, &act)) {
            emit_lt_gemm(e, k, ptr, bias_leaf, act);
            continue;
        }
        if (k->kind == K_GEMM) emit_gemm_call(e, k, ptr);
        if (k->kind == K_REDUCE) emit_library_call(e, k, ptr);
        if (k->expr) emit_elementwise_call(e, k, ptr, pfx);
    }
}

/* Locals naming each slot's device, stream and whether it is a GPU. */
static void declare_slots(Emit *e, bool arenas) {
    FILE *o = e->o;
    for (int s = 0; s < e->g->nslots; s++) {
        fprintf(o, "    const mrt_device D%d = m->dev[%d];\n    void *const S%d = m->stream[%d];\n", s, s, s, s);
        fprintf(o, "    const int C%d = D%d.kind == MRT_DEVICE_CUDA;\n", s, s);
        fprintf(o, "    unsigned char *const W%d = m->weights[%d];\n", s, s);
        if (!arenas) fprintf(o, "    unsigned char *const L%d = m->load[%d];\n    (void)L%d;\n", s, s, s);
        if (arenas) {
            fprintf(o, "    unsigned char *const A%d = m->arena[%d];\n", s, s);
            fprintf(o, "    const size_t *const O%d = %s_arena_offsets[C%d];\n", s, e->pfx, s);
            fprintf(o, "    (void)A%d;\n    (void)O%d;\n", s, s);
        }
        fprintf(o, "    (void)D%d;\n    (void)S%d;\n    (void)C%d;\n    (void)W%d;\n", s, s, s, s);
    }
}

/* Activation bytes over every device slot (what --memory reports for a split model). */
static size_t arena_total(const MemPlan *mp, int nslots) {
    size_t t = 0;
    for (int s = 0; s < nslots; s++) t += mp->slot_arena[s];
    return t;
}

/* The descriptor tables: the params (with their regions), the slots, the arena offsets. */
static void emit_tables(Emit *e, FILE *o) {
    const Graph *g = e->g;
    const MemPlan *mp = e->mp;
    fprintf(o, "static const mrt_param_desc %s_params[] = {\n", e->pfx);
    for (int i = 0; i < g->nparams; i++) {
        const Node *n = g->params[i];
        const Storage *s = mp->of[n->id];
        fprintf(o, "    {\"%s\", %s, %d, {", n->name, mrt_dtype(n->dtype), n->shape.rank);
        for (int d = 0; d < n->shape.rank; d++) fprintf(o, "%s%" PRId64, d ? ", " : "", n->shape.d[d].c);
        fprintf(o, "}, %zu, %d},\n", s->offset, 2 * s->slot + s->load_only);
    }
    if (!g->nparams) fprintf(o, "    {0}\n");
    fprintf(o, "};\n\n/* Per device slot: pinned device, its region, and the plan's bytes (weights, load-only,\n"
               " * arena with the CPU and the CUDA plan, CUDA staging). */\n");
    fprintf(o, "static const mrt_slot_desc %s_slots[] = {\n", e->pfx);
    for (int s = 0; s < g->nslots; s++) {
        if (s) fprintf(o, "    {\"%s\", \"%s:%d\", ", g->slots[s].name, g->source, g->slots[s].loc.line);
        else fprintf(o, "    {NULL, NULL, ");
        fprintf(o, "%zu, %zu, {%zu, %zu}, %zu},\n", mp->slot_weights[s], mp->slot_load[s], mp->slot_arena[s],
                e->mpc->slot_arena[s], e->io_bytes[s]);
    }
    fprintf(o, "};\n\n/* Arena offset of each storage: [0] the CPU plan, [1] the CUDA plan. */\n");
    fprintf(o, "static const size_t %s_arena_offsets[2][%d] = {\n", e->pfx, mp->nst + 1);
    for (int p = 0; p < 2; p++) {
        const MemPlan *pl = p ? e->mpc : mp;
        fprintf(o, "    {");
        for (int i = 0; i < mp->nst; i++) fprintf(o, "%s%zu", i ? ", " : "", pl->st[i]->kind == S_ARENA ? pl->st[i]->offset : 0);
        fprintf(o, "%s0},\n", mp->nst ? ", " : "");
    }
    fprintf(o, "};\n\n");
}

static void emit_source(Emit *e, FILE *o, const char *h_include) {
    const Graph *g = e->g;
    const KernelList *kl = e->kl;
    const MemPlan *mp = e->mp;
    int ns = g->nslots;
    e->o = o;
    fprintf(o, "/* %s.c — generated by modelc from model '%s'. Do not edit.\n", e->pfx, g->name);
    fprintf(o, " * Compile as C; add -DMRT_WITH_CUDA and link %s.cu's object for the GPU path. Creating,\n"
               " * loading and staging are the runtime's (mrt_model_*), driven by %s_desc below. */\n", e->pfx, e->pfx);
    fprintf(o, "#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n#include <math.h>\n");
    fprintf(o, "#include \"modelrt.h\"\n#include \"mrt_kernels.h\"\n#include \"%s\"\n\n", h_include);
    emit_tables(e, o);

    /* kernels: the run's, then the load-time ones; their CUDA twins live in NAME.cu */
    fprintf(o, "#ifdef MRT_WITH_CUDA\n");
    for (int li = 0; li < 2; li++) {
        const KernelList *L = li ? e->init : kl;
        for (int i = 0; i < L->n; i++) {
            const Kernel *k = L->k[i];
            if (!k->expr) continue;
            fprintf(o, "mrt_status %s_cuda_%s%d(void *stream, %s *out", e->pfx, li ? "init" : "k", k->id, c_type(k->root->dtype));
            for (int j = 0; j < k->nleaves; j++) fprintf(o, ", const %s *l%d", c_type(k->leaves[j].node->dtype), j);
            fprintf(o, ", int64_t B);\n");
        }
    }
    fprintf(o, "#endif\n\n");
    for (int li = 0; li < 2; li++) {
        const KernelList *L = li ? e->init : kl;
        for (int i = 0; i < L->n; i++) {
            const Kernel *k = L->k[i];
            if (!k->expr) continue;
            fprintf(o, "/* %s%d: %s -> %%%d */\n", li ? "init" : "k", k->id, k->kind == K_GEMM ? "GEMM epilogue" : "elementwise",
                    k->root->id);
            emit_elementwise(e, k, xprintf("%s_%s%d", e->pfx, li ? "init" : "k", k->id));
        }
    }

    /* the load-time kernels, run by mrt_model_load_weights once the params are in place */
    if (e->init->n) {
        fprintf(o, "/* Values that depend only on the weights (folded batch norms, ...), computed once. */\n");
        fprintf(o, "static mrt_status %s_init(mrt_model *m) {\n    const int64_t B = 1;\n    (void)B;\n"
                   "    mrt_status st = MRT_OK;\n", e->pfx);
        declare_slots(e, false);
        char **ptr = declare_pointers(e, true);
        fprintf(o, "    if (C0 && (st = mrt_device_activate(D0)) != MRT_OK) return st;\n");
        emit_calls(e, e->init, ptr, "init");
        for (int s = 0; s < ns; s++)
            fprintf(o, "    if ((st = mrt_stream_sync(D%d, S%d, \"%s load_weights\")) != MRT_OK) return st;\n", s, s, e->pfx);
        fprintf(o, "    return MRT_OK;\n}\n\n");
    }

    fprintf(o, "const mrt_model_desc %s_desc = {\n    .abi = MRT_MODEL_ABI,\n    .size = sizeof(mrt_model_desc),\n"
               "    .name = \"%s\",\n    .n_slots = %d,\n    .slots = %s_slots,\n    .n_params = %d,\n"
               "    .params = %s_params,\n", e->pfx, e->pfx, ns, e->pfx, g->nparams, e->pfx);
    fprintf(o, "#ifdef MRT_WITH_CUDA\n    .cuda = 1,\n#endif\n");
    if (e->init->n) fprintf(o, "    .init = %s_init,\n", e->pfx);
    fprintf(o, "};\n\n");

    /* the public API: thin calls into the runtime */
    fprintf(o, "mrt_status %s_create_mapped(%s **m, const char *device, const char *device_map) {\n"
               "    return mrt_model_create(m, &%s_desc, device, device_map);\n}\n", e->pfx, e->pfx, e->pfx);
    fprintf(o, "mrt_status %s_create(%s **m, const char *device) { return mrt_model_create(m, &%s_desc, device, NULL); }\n",
            e->pfx, e->pfx, e->pfx);
    fprintf(o, "mrt_status %s_load_weights(%s *m, const char *path) {\n"
               "    if (!m || m->desc != &%s_desc) return mrt_set_error(MRT_ERR_INVALID_ARG, \"%s_load_weights: not a %s model\");\n"
               "    return mrt_model_load_weights(m, path);\n}\n", e->pfx, e->pfx, e->pfx, e->pfx, e->pfx);
    fprintf(o, "void %s_destroy(%s *m) { mrt_model_destroy(m); }\n", e->pfx, e->pfx);
    fprintf(o, "mrt_device %s_device(const %s *m) { return m->dev[0]; }\n\n", e->pfx, e->pfx);

    /* run */
    emit_run_proto(e, o);
    fprintf(o, " {\n");
    fprintf(o, "    if (!m || m->desc != &%s_desc) return mrt_set_error(MRT_ERR_INVALID_ARG, \"%s_run: the model is NULL or not "
               "a %s model\");\n", e->pfx, e->pfx, e->pfx);
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
    fprintf(o, "    const int64_t B = batch;\n    (void)B;\n    mrt_status st = MRT_OK;\n    (void)st;\n");
    declare_slots(e, true);
    fprintf(o, "    if (C0 && (st = mrt_device_activate(D0)) != MRT_OK) return st;\n");
    char **ptr = declare_pointers(e, false);
    emit_calls(e, kl, ptr, "k");
    /* outputs back to the host, then wait for every GPU */
    fprintf(o, "#ifdef MRT_WITH_CUDA\n");
    for (int i = 0; i < g->noutputs; i++) {
        const Node *b = view_base(g->outputs[i].node);
        const Storage *s = mp->of[b->id];
        fprintf(o, "    if (mrt_back%d && (st = mrt_memcpy((mrt_device){MRT_DEVICE_CPU, 0}, %s, D%d, mrt_v%d, %s, S%d)) != MRT_OK) return st;\n",
                b->id, c_ident(g->outputs[i].name), s->slot, b->id, bytes_c(b), s->slot);
    }
    for (int s = 0; s < ns; s++)
        fprintf(o, "    if (C%d && (st = mrt_stream_sync(D%d, S%d, \"%s run\")) != MRT_OK) return st;\n", s, s, s, e->pfx);
    fprintf(o, "#endif\n");
    for (int i = 0; i < g->noutputs; i++) fprintf(o, "    (void)mrt_back%d;\n", view_base(g->outputs[i].node)->id);
    fprintf(o, "    return MRT_OK;\n}\n\n");

    /* the generic descriptor */
    fprintf(o, "static const mrt_io_desc %s_inputs[] = {\n", e->pfx);
    for (int i = 0; i < g->ninputs; i++) io_desc(o, g->inputs[i]->name, g->inputs[i]);
    if (!g->ninputs) fprintf(o, "    {0}\n");
    fprintf(o, "};\nstatic const mrt_io_desc %s_outputs[] = {\n", e->pfx);
    for (int i = 0; i < g->noutputs; i++) io_desc(o, g->outputs[i].name, g->outputs[i].node);
    fprintf(o, "};\n\n");
    fprintf(o, "static mrt_status %s_create_v(void **m, const char *device) { return %s_create((%s **)m, device); }\n",
            e->pfx, e->pfx, e->pfx);
    fprintf(o, "static mrt_status %s_load_v(void *m, const char *path) { return %s_load_weights(m, path); }\n", e->pfx, e->pfx);
    fprintf(o, "static void %s_destroy_v(void *m) { %s_destroy(m); }\n", e->pfx, e->pfx);
    fprintf(o, "static mrt_device %s_device_v(void *m) { return %s_device(m); }\n", e->pfx, e->pfx);
    fprintf(o, "static mrt_status %s_run_v(void *m, int batch, const void *const *in, void *const *out) {\n", e->pfx);
    fprintf(o, "    (void)in;\n    return %s_run(m, batch", e->pfx);
    for (int i = 0; i < g->ninputs; i++) fprintf(o, ", (const %s *)in[%d]", c_type(g->inputs[i]->dtype), i);
    for (int i = 0; i < g->noutputs; i++) fprintf(o, ", (%s *)out[%d]", c_type(g->outputs[i].node->dtype), i);
    fprintf(o, ");\n}\n\n");
    fprintf(o, "const mrt_model_info %s_info = {\n    .name = \"%s\",\n    .n_inputs = %d,\n    .n_outputs = %d,\n"
               "    .inputs = %s_inputs,\n    .outputs = %s_outputs,\n    .has_batch = %d,\n    .max_batch = %d,\n"
               "    .weight_bytes = %s_WEIGHT_BYTES,\n    .arena_bytes = %zu,\n    .create = %s_create_v,\n"
               "    .load_weights = %s_load_v,\n    .run = %s_run_v,\n    .destroy = %s_destroy_v,\n    .device = %s_device_v,\n"
               "    .batch_chunkable = %d,\n    .arena_bytes_cuda = %zu,\n    .desc = &%s_desc,\n};\n",
            e->pfx, g->name, g->ninputs, g->noutputs, e->pfx, e->pfx, g->has_batch ? 1 : 0, g->has_batch ? g->max_batch : 1,
            e->PFX, arena_total(e->mp, g->nslots), e->pfx, e->pfx, e->pfx, e->pfx, e->pfx, graph_batch_separable(g) ? 1 : 0,
            arena_total(e->mpc, g->nslots), e->pfx);
}

static char *render(void (*fn)(Emit *, FILE *, const char *), Emit *e, const char *arg, size_t *len) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f) fatal("out of memory");
    fn(e, f, arg);
    fclose(f);
    return buf;
}

static void emit_main(Emit *e, FILE *o, const char *h_include) {
    fprintf(o, "/* main.c — generated by modelc: the command-line driver for model '%s'. */\n", e->g->name);
    fprintf(o, "#include \"modelrt.h\"\n#include \"%s\"\n\n", h_include);
    fprintf(o, "int main(int argc, char **argv) { return mrt_main(&%s_info, argc, argv); }\n", e->pfx);
}

static void emit_cuda_adapter(Emit *e, FILE *o, const char *unused) {
    emit_cuda(o, e->g, e->kl, e->init, e->pfx);
}

/* The model's C name: its own name, unless that would clash with main(), the runtime's mrt_
 * names or a C library function the generated code uses (then NAME_model). */
char *model_ident(const char *name) {
    static const char *taken[] = {"main", "mrt", "memcpy", "memset", "memcmp", "malloc", "calloc", "realloc", "free",
                                  "exit", "abs", "getenv", "strcmp", "strlen", "printf", "fprintf", "expf", "logf",
                                  "sqrtf", "tanhf", "erff", "log", "exp", "sqrt", "tanh", "erf", "cblas", NULL};
    char *s = c_ident(name);
    for (int i = 0; taken[i]; i++)
        if (!strcmp(s, taken[i])) return xprintf("%s_model", s);
    if (!strncmp(s, "mrt_", 4) || !strncmp(s, "cblas_", 6) || !strncmp(s, "cuda", 4)) return xprintf("%s_model", s);
    return s;
}

void emit_c(const Graph *g, const KernelList *kl, const KernelList *init, const MemPlan *mp, const MemPlan *mpc,
            const EmitOptions *opt) {
    Emit E = {.g = g, .kl = kl, .init = init, .mp = mp, .mpc = mpc}, *e = &E;
    e->pfx = model_ident(g->name);
    e->PFX = upper(e->pfx);
    if (mp->nst != mpc->nst) ICE("the CPU and CUDA plans differ in storages (%d vs %d)", mp->nst, mpc->nst);
    if (g->nslots > 16) /* MRT_MAX_SLOTS */
        error_at(g->slots[16].loc, "a model may use at most 16 devices; this is the 17th");
    /* GPU staging: slot 0 holds the inputs; every slot holds the outputs it computes. */
    e->io_off = xalloc(sizeof(size_t) * (mp->nst + 1));
    e->io_bytes = xalloc(sizeof(size_t) * g->nslots);
    for (int i = 0; i < mp->nst; i++) {
        const Storage *s = mp->st[i];
        if (s->kind != S_INPUT && s->kind != S_OUTPUT) continue;
        e->io_off[i] = e->io_bytes[s->slot];
        e->io_bytes[s->slot] += (bytes_at_max(g, s->owner) + 255) / 256 * 256;
    }
    size_t len;
    char *h = render(emit_header, e, NULL, &len);
    write_file_atomic(opt->h_path, h, len);
    free(h);
    char *c = render(emit_source, e, opt->h_include, &len);
    write_file_atomic(opt->c_path, c, len);
    free(c);
    if (opt->cu_path) {
        char *cu = render(emit_cuda_adapter, e, NULL, &len);
        write_file_atomic(opt->cu_path, cu, len);
        free(cu);
    }
    if (opt->main_path) {
        char *mn = render(emit_main, e, opt->h_include, &len);
        write_file_atomic(opt->main_path, mn, len);
        free(mn);
    }
}
