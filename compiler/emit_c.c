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
 * byte alignment for the CPU, 256 for CUDA; weight regions use 256 for both. A run() of more
 * than RUN_PART kernels is emitted in parts, each a function of its own.
 */
#include "modelc.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Kernels per part of a large run(): gcc -O2 spends time superlinear in a function's size
 * (5,000 GEMMs in one function: 37 s), and a model this small keeps one function. */
enum { RUN_PART = 256 };

static const char *mrt_dtype(DType dt) {
    return dt == DT_F32 ? "MRT_F32" : dt == DT_I32 ? "MRT_I32" : dt == DT_I64 ? "MRT_I64" : dt == DT_BOOL ? "MRT_BOOL"
         : dt == DT_F16 ? "MRT_F16" : "MRT_BF16";
}
/* s as the inside of a C string literal: quotes, backslashes and non-printable bytes escaped
 * (a file name may hold any of them). */
static char *c_string_body(const char *s) {
    char *out = xalloc(4 * strlen(s) + 1), *p = out;
    for (const unsigned char *q = (const unsigned char *)s; *q; q++) {
        if (*q == '"' || *q == '\\') { *p++ = '\\'; *p++ = (char)*q; }
        else if (*q < 0x20 || *q >= 0x7f) p += sprintf(p, "\\%03o", *q);
        else *p++ = (char)*q;
    }
    *p = 0;
    return out;
}
static char *upper(const char *s) {
    char *u = xstrdup(s);
    for (char *p = u; *p; p++) *p = (char)toupper((unsigned char)*p);
    return u;
}

/* ---------------------------------------------------------------- state */

struct Emit {
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
    char **cpu_fn[2];    /* cpu_fn[0 run, 1 init][kernel]: the C function computing its elementwise part
                            (kernels with the same code share one) */
    const char *fail;    /* what a failing call does: NULL "return st"; in the calls a CUDA graph may
                            capture, "goto mrt_graph_end" (mrt_model_graph_end decides) */
    int nfail;           /* calls written with e->fail since it was set */
    unsigned *pipe_acq, *pipe_rel; /* split models, per run kernel: see pipe_masks */
    GradReady *ready;    /* training builds on one device: when each gradient is final (the
                            data-parallel hooks, emit_calls), NULL otherwise */
    int *mm_id;          /* per run kernel: its id among the GEMMs against constant weights that
                            init() prepares (mrt_matmul_prepare), or -1 (packed_gemms) */
    int nmm;
};

/* The statement a failing call runs (e->fail), counted so that its label is written only when used. */
static const char *on_fail(Emit *e) {
    e->nfail++;
    return e->fail ? e->fail : "return st";
}

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
    fprintf(o, "    MRT_DISPATCH(gpu%d, %s,\n                 %s, %s);\n", s, cuda, cpu, on_fail(e));
}

/* ---------------------------------------------------------------- elementwise */

/* gpu_only: the CPU kernel has done this epilogue already (a fused depthwise conv2d). */
static void emit_elementwise_call(Emit *e, const Kernel *k, char **ptr, const char *pfx, bool gpu_only) {
    char *args = xstrdup(ptr[k->root->id]);
    for (int j = 0; j < k->nleaves; j++)
        args = xprintf("%s, %s", args, j == k->gemm_leaf ? ptr[k->root->id] : ptr[view_base(k->leaves[j].node)->id]);
    if (k->kind == K_ELEMENTWISE) fprintf(e->o, "    /* %s%d: elementwise -> %%%d */\n", pfx, k->id, k->root->id);
    const char *fn = e->cpu_fn[!strcmp(pfx, "init")][k->id];
    char *cpu = gpu_only ? xstrdup("(void)0 /* fused into the CPU's conv */")
                : kernel_may_fault(k) ? xprintf("if ((st = %s(%s, B%s, \"%s\")) != MRT_OK) %s", fn, args,
                                                sym_args, fault_what(e->g, k, pfx), on_fail(e))
                                      : xprintf("%s(%s, B%s)", fn, args, sym_args);
    dispatch(e, kslot(k), cpu, xprintf("%s_cuda_%s%d(stream%d, %s, B%s)", e->pfx, pfx, k->id, kslot(k), args, sym_args));
}

/* ---------------------------------------------------------------- GEMM and convolution */

static void check_blas_dim(Emit *e, const Node *m, Dim d, const char *what) {
    if (dim_max(e->g, d) > INT32_MAX)
        error_at(m->loc, "matmul %s %" PRId64 " exceeds the BLAS limit of 2^31-1", what, dim_max(e->g, d));
}

/* The name of kernel k's parameter struct (conv2d, pooling), emitted by emit_params. */
static char *params_name(const Emit *e, const Kernel *k) { return xprintf("%s_%s%d_p", e->pfx, e->kpfx, k->id); }

/* A matmul whose B is one matrix (its leading dims all 1) and whose A has the output's leading
 * dims: the whole product is one GEMM with M = the rows of A over all its leading dims. */
static bool matmul_one_gemm(const Node *m) {
    const Shape *sa = &m->in[0]->shape, *sb = &m->in[1]->shape, *so = &m->shape;
    for (int i = 0; i + 2 < sb->rank; i++)
        if (!dim_is_one(sb->d[i])) return false;
    if (sa->rank != so->rank) return false;
    for (int i = 0; i + 2 < sa->rank; i++)
        if (!dim_eq(sa->d[i], so->d[i])) return false;
    return true;
}

/* Whether run kernel k is one plain GEMM whose right operand is constant after loading (a
 * resident param or a load-time value), f32, so that init() may prepare it once
 * (mrt_matmul_prepare: a oneDNN matmul primitive on a CPU slot). Never in a training build: an
 * optimizer step rewrites the weights between runs without a load. */
static bool gemm_const_weights(const Emit *e, const Kernel *k) {
    const Node *m = k->gemm;
    if (e->g->train || k->kind != K_GEMM || !m || m->op != OP_MATMUL || m->dtype != DT_F32) return false;
    const Node *b = view_base(m->in[1]);
    const Storage *st = e->mp->of[b->id];
    if (!st || b->dtype != DT_F32 || m->in[0]->dtype != DT_F32) return false;
    if (!((st->kind == S_PARAM && !st->load_only) || st->kind == S_INIT)) return false;
    return matmul_one_gemm(m);
}

/* Number the run kernels gemm_const_weights accepts (e->mm_id, e->nmm). */
static void packed_gemms(Emit *e) {
    int nid = 0;
    for (int i = 0; i < e->kl->n; i++) nid = e->kl->k[i]->id >= nid ? e->kl->k[i]->id + 1 : nid;
    e->mm_id = xalloc(sizeof(int) * (size_t)(nid + 1));
    for (int i = 0; i <= nid; i++) e->mm_id[i] = -1;
    e->nmm = 0;
    for (int i = 0; i < e->kl->n; i++)
        if (gemm_const_weights(e, e->kl->k[i])) e->mm_id[e->kl->k[i]->id] = e->nmm++;
}

/* Whether prepared GEMM k may store its weights packed in their own storage (MRT_MATMUL_PACK):
 * the weight (a param or a load-time value, through any reshape views) is read by this GEMM and
 * nothing else in the whole program (no other kernel, load-time ones included, no graph output,
 * no tied embedding's gather: every such read is a live use, analyze_uses), the build is
 * inference (gemm_const_weights) and the kernel's slot is not pinned to a GPU. The runtime packs
 * only on a CPU device, f32, and reads those weights from then on through its primitives alone. */
static bool gemm_sole_reader(const Emit *e, const Kernel *k) {
    const Node *m = k->gemm, *n = m->in[1];
    if (e->g->slots && e->g->slots[kslot(k)].cuda) return false;
    for (;;) {
        if (n->nuses != 1 || n->is_output || n == m->in[0]) return false;
        if (n->op != OP_RESHAPE) break;
        n = n->in[0];
    }
    const Storage *st = e->mp->of[n->id];
    return st && (st->kind == S_PARAM || st->kind == S_INIT) && !st->load_only;
}

/* The rows of GEMM m when it runs as one GEMM (a's leading dims folded into M). */
static Dim gemm_rows(const Node *m) {
    const Shape *sa = &m->in[0]->shape;
    Dim rows = {1, {0}};
    for (int i = 0; i < sa->rank - 1; i++) rows = dim_mul(rows, sa->d[i], NULL);
    return rows;
}

static bool lt_epilogue(const Kernel *k, int *bias_leaf, int *act);

/* In init(): prepare every numbered GEMM at the plan's largest row count, with the bias and
 * activation of its fused epilogue when it has one (lt_epilogue) and it is not relu: oneDNN's
 * relu post-op gives 0 for NaN, where mrt_relu keeps the NaN (field case B13), so a relu GEMM is
 * prepared bare and its epilogue loop runs after it. */
static void emit_matmul_prepares(Emit *e, char **ptr) {
    for (int i = 0; i < e->kl->n; i++) {
        const Kernel *k = e->kl->k[i];
        if (e->mm_id[k->id] < 0) continue;
        const Node *m = k->gemm;
        const Shape *sa = &m->in[0]->shape, *so = &m->shape;
        int bias_leaf = -1, act = 0;
        if (!lt_epilogue(k, &bias_leaf, &act) || act == 1) bias_leaf = -1, act = 0; /* relu: NaN (emit_lt_gemm) */
        bool pack = gemm_sole_reader(e, k);
        fprintf(e->o, "    /* matmul %d: k%d, gemm %%%d against constant weights%s */\n"
                      "    if ((st = mrt_matmul_prepare(m, %d, dev%d, %d, %" PRId64 ", %s, %s, %s, %d, %d%s)) != MRT_OK) return st;\n",
                e->mm_id[k->id], k->id, m->id, pack ? ", their only reader: packed in place" : "", e->mm_id[k->id], kslot(k),
                m->trans_b, dim_max(e->g, gemm_rows(m)), dim_c(so->d[so->rank - 1]), dim_c(sa->d[sa->rank - 1]),
                ptr[view_base(m->in[1])->id], bias_leaf >= 0, act, pack ? " | MRT_MATMUL_PACK" : "");
    }
}

/* Run kernel k's id among the prepared GEMMs, or -1 (an init kernel, or not one). */
static int mm_of(const Emit *e, const Kernel *k) { return e->mm_id && !strcmp(e->kpfx, "k") ? e->mm_id[k->id] : -1; }

/* The packed path of run kernel k in front of its usual call `usual` (a C statement): the
 * prepared primitive when mrt_matmul_run takes it, else the usual call. */
static char *packed_or(Emit *e, const Kernel *k, char **ptr, const char *bias, const char *usual) {
    const Node *m = k->gemm;
    return xprintf("{ int mrt_done; if ((st = mrt_matmul_run(m, %d, %s, %s, %s, %s, %s, &mrt_done)) != MRT_OK) %s;\n"
                   "                   if (!mrt_done) { %s } }",
                   mm_of(e, k), dim_c(gemm_rows(m)), ptr[view_base(m->in[0])->id], ptr[view_base(m->in[1])->id], bias,
                   ptr[k->root->id], on_fail(e), usual);
}

/* A GEMM's root writes C; its epilogue, if any, runs on C after it (or inside cuBLASLt). */
static void emit_matmul(Emit *e, const Kernel *k, char **ptr) {
    FILE *o = e->o;
    const Node *m = k->gemm;
    int s = kslot(k);
    const Shape *sa = &m->in[0]->shape, *sb = &m->in[1]->shape, *so = &m->shape;
    const char *A = ptr[view_base(m->in[0])->id], *Bm = ptr[view_base(m->in[1])->id], *C = ptr[k->root->id];
    Dim M = sa->d[sa->rank - 2], K = sa->d[sa->rank - 1], N = so->d[so->rank - 1];
    check_blas_dim(e, m, M, "rows");
    check_blas_dim(e, m, K, "inner dimension");
    check_blas_dim(e, m, N, "columns");
    int tb = m->trans_b;
    char *ldb = tb ? dim_c(K) : dim_c(N);
    int ob = so->rank - 2, ab = sa->rank - 2, bb = sb->rank - 2;
    Dim bnum = {1, {0}}, onum = {1, {0}};
    for (int i = 0; i < bb; i++) bnum = dim_mul(bnum, sb->d[i], NULL);
    for (int i = 0; i < ob; i++) onum = dim_mul(onum, so->d[i], NULL);
    bool a_full = ab == ob, b_full = bb == ob;
    for (int i = 0; i < ab && a_full; i++) a_full = dim_eq(sa->d[i], so->d[i]);
    for (int i = 0; i < bb && b_full; i++) b_full = dim_eq(sb->d[i], so->d[i]);
    Dim anum = {1, {0}};
    for (int i = 0; i < ab; i++) anum = dim_mul(anum, sa->d[i], NULL);
    bool a_one = dim_is_one(anum), b_one = dim_is_one(bnum);
    fprintf(o, "    /* %s%d: gemm %%%d = %%%d @ %%%d%s */\n", e->kpfx, k->id, m->id, m->in[0]->id, m->in[1]->id, tb ? "^T" : "");
    char *call;
    if (b_one && a_full) {
        /* One GEMM: a's leading dims fold into M. */
        Dim rows = {1, {0}};
        for (int i = 0; i < sa->rank - 1; i++) rows = dim_mul(rows, sa->d[i], NULL);
        check_blas_dim(e, m, rows, "rows");
        call = xprintf("mrt_gemm_f32(dev%d, stream%d, 0, %d, %s, %s, %s, 1.0f, %s, %s, 0, %s, %s, 0, 0.0f, %s, %s, 0, 1)", s,
                       s, tb, dim_c(rows), dim_c(N), dim_c(K), A, dim_c(K), Bm, ldb, C, dim_c(N));
        if (mm_of(e, k) >= 0) {
            /* prepared at load (constant weights): the primitive, else the usual call */
            fprintf(o, "    %s\n", packed_or(e, k, ptr, "NULL", xprintf("if ((st = %s) != MRT_OK) %s;", call, on_fail(e))));
            return;
        }
    } else if ((a_full || a_one) && (b_full || b_one)) {
        /* A strided batch over the flattened leading dims (a stride of 0 repeats a matrix). */
        char *sA = a_one ? xstrdup("0") : dim_c(dim_mul(M, K, NULL));
        char *sB = b_one ? xstrdup("0") : dim_c(dim_mul(sb->d[sb->rank - 2], sb->d[sb->rank - 1], NULL));
        call = xprintf("mrt_gemm_f32(dev%d, stream%d, 0, %d, %s, %s, %s, 1.0f, %s, %s, %s, %s, %s, %s, 0.0f, %s, %s, %s, %s)",
                       s, s, tb, dim_c(M), dim_c(N), dim_c(K), A, dim_c(K), sA, Bm, ldb, sB, C, dim_c(N),
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
            if (ia >= 0 && !dim_is_one(sa->d[ia])) fprintf(o, " ao += ix * %s;", dim_c(ast[ia]));
            if (ib >= 0 && !dim_is_one(sb->d[ib])) fprintf(o, " bo += ix * %s;", dim_c(bst[ib]));
            fprintf(o, " }\n");
        }
        fprintf(o, "        if ((st = mrt_gemm_f32(dev%d, stream%d, 0, %d, %s, %s, %s, 1.0f, %s + ao, %s, 0, %s + bo, %s, 0, "
                   "0.0f, %s + co, %s, 0, 1)) != MRT_OK)\n            %s;\n    }\n",
                s, s, tb, dim_c(M), dim_c(N), dim_c(K), A, dim_c(K), Bm, ldb, C, dim_c(N), on_fail(e));
        return;
    }
    fprintf(o, "    if ((st = %s) != MRT_OK) %s;\n", call, on_fail(e));
}

/* A depthwise conv2d's epilogue that the CPU kernel takes fused (mrt_conv2d_dw): exactly
 * act(conv + bias[c]) or act(conv), act none or one of the MRT_ACT_* ops, in f32 over the conv's
 * own index space (no view between). Sets the bias leaf (-1: none), act and clamp's bounds. */
static bool dw_epilogue(const Kernel *k, int *bias_leaf, int *act, double *lo, double *hi) {
    const Node *m = k->gemm, *r = k->root;
    if (!m || !conv_is_depthwise(m) || !k->expr || r->dtype != DT_F32 || r->shape.rank != 4) return false;
    const LeafRef *gl = &k->leaves[k->gemm_leaf];
    for (int d = 0; d < 4; d++)
        if (!dim_eq(r->shape.d[d], m->shape.d[d]) || gl->map[d] != d || gl->start[d] || gl->step[d] != 1) return false;
    const Expr *x = k->expr;
    *act = 0, *lo = *hi = 0;
    static const struct { OpKind op; int act; } acts[] = {
        {OP_RELU, 1}, {OP_GELU_TANH, 2}, {OP_CLAMP, 3}, {OP_HARDSWISH, 4}, {OP_SILU, 5}, {OP_GELU, 6}, {OP_SIGMOID, 7}};
    for (size_t i = 0; x->kind == EX_OP && i < sizeof acts / sizeof acts[0]; i++)
        if (x->op == acts[i].op && x->dt == DT_F32) {
            *act = acts[i].act;
            if (x->op == OP_CLAMP) *lo = x->node->fattr[0], *hi = x->node->fattr[1];
            x = x->a;
            break;
        }
    *bias_leaf = -1;
    if (x->kind == EX_LEAF && x->leaf == k->gemm_leaf) return true;
    if (x->kind != EX_OP || x->op != OP_ADD || x->dt != DT_F32 || x->a->kind != EX_LEAF || x->b->kind != EX_LEAF)
        return false;
    int g = x->a->leaf == k->gemm_leaf ? 0 : x->b->leaf == k->gemm_leaf ? 1 : -1;
    if (g < 0) return false;
    int bl = g == 0 ? x->b->leaf : x->a->leaf;
    if (bl == k->gemm_leaf) return false;
    /* the bias: one value per channel, f32, read along iteration dim 1 from 0 */
    const LeafRef *l = &k->leaves[bl];
    int along = 0;
    for (int d = 0; d < l->node->shape.rank; d++) {
        if (l->map[d] < 0) {
            if (l->start[d]) return false;
        } else if (l->map[d] == 1 && !l->start[d] && l->step[d] == 1 && dim_eq(l->node->shape.d[d], m->shape.d[1])) {
            along++;
        } else {
            return false;
        }
    }
    if (along != 1 || l->node->dtype != DT_F32) return false;
    *bias_leaf = bl;
    return true;
}

/* A conv2d. A depthwise one runs on the CPU as mrt_conv2d_dw, with its epilogue fused when
 * fused_epi (bias leaf, act and bounds as dw_epilogue found them); CUDA's conv is the same. */
static void emit_conv2d_as(Emit *e, const Kernel *k, char **ptr, bool fused_epi, int bias_leaf, int act, double lo,
                           double hi) {
    const Node *m = k->gemm;
    int s = kslot(k);
    char *args = xprintf("&%s, %s, %s, %s, %s, %s", params_name(e, k), dim_c(m->in[0]->shape.d[0]), ptr[k->root->id],
                         ptr[view_base(m->in[0])->id], ptr[view_base(m->in[1])->id], e->scratch ? e->scratch : "NULL");
    const char *fn = op_info[m->op].kernel;
    char *cuda = xprintf("mrt_cuda_%s(stream%d, %s)", fn, s, args);
    if (!conv_is_depthwise(m)) {
        fprintf(e->o, "    /* %s%d: conv2d %%%d = conv(%%%d, %%%d) */\n", e->kpfx, k->id, m->id, m->in[0]->id, m->in[1]->id);
        dispatch(e, s, xprintf("mrt_%s(%s)", fn, args), cuda);
        return;
    }
    static const char *act_names[] = {"NONE", "RELU", "GELU_TANH", "CLAMP", "HARDSWISH", "SILU", "GELU", "SIGMOID"};
    const char *bias = fused_epi && bias_leaf >= 0 ? ptr[view_base(k->leaves[bias_leaf].node)->id] : "NULL";
    if (!fused_epi) act = 0, lo = hi = 0;
    fprintf(e->o, "    /* %s%d: conv2d %%%d = conv(%%%d, %%%d), depthwise%s */\n", e->kpfx, k->id, m->id, m->in[0]->id,
            m->in[1]->id, fused_epi ? ": the CPU kernel fuses the epilogue" : "");
    char *cpu = xprintf("mrt_conv2d_dw(&%s, %s, %s, %s, %s, %s, MRT_ACT_%s, %s, %s)", params_name(e, k),
                        dim_c(m->in[0]->shape.d[0]), ptr[k->root->id], ptr[view_base(m->in[0])->id],
                        ptr[view_base(m->in[1])->id], bias, act_names[act], float_lit(lo), float_lit(hi));
    dispatch(e, s, cpu, cuda);
}

static void emit_conv2d(Emit *e, const Kernel *k, char **ptr) { emit_conv2d_as(e, k, ptr, false, -1, 0, 0, 0); }

/* A kernel in the CPU's blocked layout (layout.c): on the CPU, oneDNN's conv2d (its epilogue
 * fused as bias and post-ops) or max pooling, op k->blk of NAME_blocked; on a GPU the kernel's
 * usual NCHW call, then its epilogue. */
static void emit_blocked_call(Emit *e, const Kernel *k, char **ptr, const char *pfx) {
    const Node *m = k->gemm ? k->gemm : k->lib;
    /* a value's layout: NCHW, nChw16c ("blocked") or nhwc (layout_nhwc) */
    const char *src_l = !k->blk_src ? "nchw" : k->blk_src_nhwc ? "nhwc" : "blocked";
    const char *dst_l = !k->blk_dst ? "nchw" : k->blk_dst_nhwc ? "nhwc" : "blocked";
    int s = kslot(k);
    const char *x = ptr[view_base(m->in[0])->id], *y = ptr[k->root->id];
    char *cpu, *cuda;
    if (k->gemm) {
        const char *res = k->blk_res >= 0 ? ptr[view_base(k->leaves[k->blk_res].node)->id] : "NULL";
        fprintf(e->o, "    /* %s%d: conv2d %%%d = conv(%%%d, %%%d)%s: oneDNN, blocked layout (%s -> %s) on the CPU */\n",
                e->kpfx, k->id, m->id, m->in[0]->id, m->in[1]->id, k->expr ? " + epilogue" : "",
                src_l, dst_l);
        if (k->blk_pair) /* an expand + depthwise pair (layout.c, pair_dw): the runtime may write the
                               * depthwise conv's result now, whose own call then returns at once */
            cpu = xprintf("if ((st = mrt_blk_conv_pair_run(m, %d, B, %s, %s, %s)) != MRT_OK) %s", k->blk, y, x,
                          ptr[k->blk_pair->root->id], on_fail(e));
        else
            cpu = xprintf("if ((st = mrt_blk_conv_run(m, %d, B, %s, %s, %s)) != MRT_OK) %s", k->blk, y, x, res, on_fail(e));
        char *args = xprintf("&%s, %s, %s, %s, %s, %s", params_name(e, k), dim_c(m->in[0]->shape.d[0]), y, x,
                             ptr[view_base(m->in[1])->id], e->scratch ? e->scratch : "NULL");
        cuda = xprintf("mrt_cuda_%s(stream%d, %s)", op_info[m->op].kernel, s, args);
    } else {
        fprintf(e->o, "    /* %s%d: %s %%%d: oneDNN, blocked layout (%s -> %s) on the CPU */\n", e->kpfx, k->id,
                op_name(m->op), m->id, src_l, dst_l);
        cpu = xprintf("if ((st = mrt_blk_pool_run(m, %d, B, %s, %s)) != MRT_OK) %s", k->blk, y, x, on_fail(e));
        cuda = xprintf("mrt_cuda_%s(stream%d, &%s, %s, %s, %s)", op_info[m->op].kernel, s, params_name(e, k),
                       dim_c(m->in[0]->shape.d[0]), y, x);
    }
    dispatch(e, s, cpu, cuda);
    if (k->expr) emit_elementwise_call(e, k, ptr, pfx, true);
}

/* A GEMM whose epilogue is exactly act(gemm + bias[N]) (act: none, relu, gelu tanh form) and
 * that is one plain GEMM: on a GPU it is one cuBLASLt matmul with that epilogue fused. Sets the
 * bias leaf (-1: none) and act (0, 1 relu, 2 gelu_tanh). */
static bool lt_epilogue(const Kernel *k, int *bias_leaf, int *act) {
    const Node *m = k->gemm, *r = k->root;
    if (!m || m->op != OP_MATMUL || !k->expr || r->dtype != DT_F32) return false;
    if (!matmul_one_gemm(m)) return false;
    const Expr *x = k->expr;
    *act = 0;
    if (x->op == OP_RELU || x->op == OP_GELU_TANH) {
        *act = x->op == OP_RELU ? 1 : 2;
        x = x->a;
    }
    *bias_leaf = -1;
    if (x->kind == EX_LEAF && x->leaf == k->gemm_leaf) return *act != 0;
    if (x->op != OP_ADD || x->a->kind != EX_LEAF || x->b->kind != EX_LEAF) return false;
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
    Dim K = sa->d[sa->rank - 1], N = so->d[so->rank - 1], rows = {1, {0}};
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
    char *lt = xprintf("mrt_gemm_bias_act_f32(dev%d, stream%d, %d, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %d)", s, s,
                       m->trans_b, dim_c(rows), dim_c(N), dim_c(K), A, dim_c(K), Bm, ldb, C, dim_c(N), bias, act);
    char *args = xstrdup(C);
    for (int j = 0; j < k->nleaves; j++)
        args = xprintf("%s, %s", args, j == k->gemm_leaf ? C : ptr[view_base(k->leaves[j].node)->id]);
    char *gemm = xprintf("if ((st = mrt_gemm_f32(dev%d, stream%d, 0, %d, %s, %s, %s, 1.0f, %s, %s, 0, %s, %s, 0, 0.0f, %s, "
                         "%s, 0, 1)) != MRT_OK) %s;", s, s, m->trans_b, dim_c(rows), dim_c(N), dim_c(K), A, dim_c(K), Bm, ldb, C,
                         dim_c(N), on_fail(e));
    char *epi = xprintf("%s(%s, B%s)", e->cpu_fn[!strcmp(e->kpfx, "init")][k->id], args, sym_args);
    char *cpu = xprintf("%s\n                 %s", gemm, epi);
    if (mm_of(e, k) >= 0 && act != 1) /* prepared at load (constant weights): the primitive does the epilogue too */
        cpu = packed_or(e, k, ptr, bias, xprintf("%s;", cpu));
    else if (mm_of(e, k) >= 0) /* relu: the loop after the primitive (oneDNN's relu turns NaN into 0) */
        cpu = xprintf("%s\n                 %s", packed_or(e, k, ptr, "NULL", gemm), epi);
    dispatch(e, s, cpu, lt);
}

/* ---------------------------------------------------------------- library kernels
 *
 * One emitter per kind of library op, named by the op's row in ops.def (the `emit` column);
 * each writes one dispatched call of the runtime kernel the row names. */

static void library_call(Emit *e, const Kernel *k, const char *fn, const char *args) {
    int s = kslot(k);
    if (!fn) ICE("op '%s' has no kernel in ops.def", op_name(k->root->op));
    dispatch(e, s, xprintf("mrt_%s(%s)", fn, args), xprintf("mrt_cuda_%s(stream%d, %s)", fn, s, args));
}

/* Reductions along one axis: x viewed as [outer, n, inner]. */
static void emit_axis(Emit *e, const Kernel *k, char **ptr) {
    const Node *r = k->lib, *x = r->in[0];
    const Shape *xs = &x->shape;
    const char *X = ptr[view_base(x)->id], *Y = ptr[r->id];
    Dim outer = {1, {0}}, inner = {1, {0}};
    for (int i = 0; i < r->axis; i++) outer = dim_mul(outer, xs->d[i], NULL);
    for (int i = r->axis + 1; i < xs->rank; i++) inner = dim_mul(inner, xs->d[i], NULL);
    char *n = dim_c(xs->d[r->axis]), *ou = dim_c(outer), *in = dim_c(inner);
    const char *fn = op_info[r->op].kernel;
    char *args;
    if (r->op == OP_SOFTMAX && (r->causal || r->zero_masked_rows)) {
        fn = "softmax_masked_f32";
        /* L, the query rows of one [L, n] score matrix: a C expression, symbolic sizes included (a
         * symbolic seq gave its constant part, 1, to a causal softmax: every row saw every key) */
        args = xprintf("%s, %s, %s, %s, %s, %d, %d", Y, X, ou, n, xs->rank >= 2 ? dim_c(xs->d[xs->rank - 2]) : "1",
                       r->causal, r->zero_masked_rows);
    } else if (r->op == OP_SOFTMAX || r->op == OP_LOG_SOFTMAX || r->op == OP_SUM || r->op == OP_MEAN ||
               r->op == OP_CUMSUM) {
        /* the flag: log for softmax, mean for sum, from the end for cumsum */
        args = xprintf("%s, %s, %s, %s, %s, %d", Y, X, ou, n, in,
                       r->op == OP_LOG_SOFTMAX || r->op == OP_MEAN || (r->op == OP_CUMSUM && r->reverse));
    } else {
        args = xprintf("%s, %s, %s, %s, %s", Y, X, ou, n, in);
    }
    fprintf(e->o, "    /* %s%d: %s %%%d */\n", e->kpfx, k->id, op_name(r->op), r->id);
    library_call(e, k, fn, args);
}

/* Attention in one kernel (fuse.c, OP_ATTENTION): a descriptor of the sizes and of each tensor's
 * element strides along the result's logical dims ([batch..., rows, cols]; 0 for a broadcast
 * dim), built in run() since the batch is a run-time size, then one dispatched call. */
static void emit_attention(Emit *e, const Kernel *k, char **ptr) {
    const Node *n = k->lib;
    int r = n->shape.rank, nb = r - 2;
    if (nb > 6) ICE("attention of rank %d: mrt_attention_desc holds at most 6 batch dims (MRT_ATTN_MAX_BATCH)", r);
    char *st[5] = {0}; /* q, k, v, mask, out: "{s0, s1, ...}" */
    Dim sz[4][MAX_RANK]; /* the logical sizes of q, k, v, and the result */
    int rk[4];
    for (int j = 0; j < 4; j++) {
        const Shape *s = j < 3 ? &n->in[j]->shape : &n->shape;
        Dim cs[MAX_RANK];
        contiguous_strides(s, cs);
        rk[j] = s->rank;
        char *lst = xstrdup("");
        Dim lstr[MAX_RANK];
        for (int i = 0; i < s->rank; i++) {
            sz[j][i] = s->d[n->attn_perm[j][i]];
            lstr[i] = cs[n->attn_perm[j][i]];
        }
        /* aligned at the right against the result's [batch..., rows, cols] */
        for (int i = 0; i < r; i++) {
            int oi = i - (r - s->rank);
            const char *v = oi < 0 || dim_is_one(sz[j][oi]) ? "0" : dim_c(lstr[oi]);
            lst = xprintf("%s%s%s", lst, i ? ", " : "", v);
        }
        st[j < 3 ? j : 4] = xprintf("{%s}", lst);
    }
    const char *mask = "NULL";
    if (n->nin > 3) {
        const Shape *s = &n->in[3]->shape;
        Dim cs[MAX_RANK];
        contiguous_strides(s, cs);
        char *lst = xstrdup("");
        for (int i = 0; i < r; i++) {
            int oi = i - (r - s->rank);
            const char *v = oi < 0 || dim_is_one(s->d[oi]) ? "0" : dim_c(cs[oi]);
            lst = xprintf("%s%s%s", lst, i ? ", " : "", v);
        }
        st[3] = xprintf("{%s}", lst);
        mask = ptr[view_base(n->in[3])->id];
    } else {
        st[3] = xstrdup("{0}");
    }
    char *batch = xstrdup("");
    for (int i = 0; i < nb; i++) batch = xprintf("%s%s%s", batch, i ? ", " : "", dim_c(sz[3][i]));
    fprintf(e->o, "    /* %s%d: attention %%%d = softmax(%.9g q k^T%s%s) v */\n", e->kpfx, k->id, n->id, n->fattr[0],
            n->nin > 3 ? " + mask" : "", n->causal ? ", causal" : "");
    fprintf(e->o, "    {\n    const mrt_attention_desc mrt_ad = {.nb = %d, .batch = {%s}, .L = %s, .S = %s, .E = %s, .Ev = %s,\n"
                  "        .scale = %s, .causal = %d, .zero_masked_rows = %d,\n"
                  "        .q = %s, .k = %s, .v = %s,\n        .m = %s, .o = %s};\n",
            nb, nb ? batch : "0", dim_c(sz[3][r - 2]), dim_c(sz[1][rk[1] - 2]), dim_c(sz[0][rk[0] - 1]),
            dim_c(sz[3][r - 1]), float_lit(n->fattr[0]), n->causal, n->zero_masked_rows, st[0], st[1], st[2], st[3], st[4]);
    const char *args = xprintf("&mrt_ad, %s, %s, %s, %s, %s", ptr[n->id], ptr[view_base(n->in[0])->id],
                               ptr[view_base(n->in[1])->id], ptr[view_base(n->in[2])->id], mask);
    int s = kslot(k);
    dispatch(e, s, xprintf("if ((st = mrt_attention_f32(%s)) != MRT_OK) %s;", args, on_fail(e)),
             xprintf("mrt_cuda_attention_f32(stream%d, %s)", s, args));
    fprintf(e->o, "    }\n");
}

static void emit_pool(Emit *e, const Kernel *k, char **ptr) {
    const Node *r = k->lib, *x = r->in[0];
    fprintf(e->o, "    /* %s%d: %s %%%d */\n", e->kpfx, k->id, op_name(r->op), r->id);
    library_call(e, k, op_info[r->op].kernel,
                 xprintf("&%s, %s, %s, %s", params_name(e, k), dim_c(x->shape.d[0]), ptr[r->id], ptr[view_base(x)->id]));
}

static void emit_adaptive_pool(Emit *e, const Kernel *k, char **ptr) {
    const Node *r = k->lib, *x = r->in[0];
    const Shape *xs = &x->shape;
    fprintf(e->o, "    /* %s%d: %s %%%d */\n", e->kpfx, k->id, op_name(r->op), r->id);
    library_call(e, k, op_info[r->op].kernel,
                 xprintf("%s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64, ptr[r->id], ptr[view_base(x)->id],
                         dim_c(dim_mul(xs->d[0], xs->d[1], NULL)), xs->d[2].c, xs->d[3].c, r->shape.d[2].c,
                         r->shape.d[3].c));
}

/* conv_transpose2d: the kernel's col scratch is the kernel list's (NULL for the direct path). */
static void emit_conv_transpose2d(Emit *e, const Kernel *k, char **ptr) {
    const Node *r = k->lib, *x = r->in[0], *w = r->in[1];
    const Shape *xs = &x->shape;
    fprintf(e->o, "    /* %s%d: %s %%%d */\n", e->kpfx, k->id, op_name(r->op), r->id);
    library_call(e, k, op_info[r->op].kernel,
                 xprintf("%s, %s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %d, %d, %" PRId64 ", %" PRId64
                         ", %d, %d, %d, %d, %d, %d, %d, %s", ptr[r->id], ptr[view_base(x)->id], ptr[view_base(w)->id],
                         dim_c(xs->d[0]), xs->d[1].c, xs->d[2].c, xs->d[3].c, r->shape.d[1].c, r->kernel[0], r->kernel[1],
                         r->shape.d[2].c, r->shape.d[3].c, r->stride[0], r->stride[1], r->pad[0], r->pad[1],
                         r->dilation[0], r->dilation[1], r->groups, e->scratch ? e->scratch : "NULL"));
}

/* Training: conv2d's weight gradient (the conv's parameter struct; its im2col scratch). */
static void emit_conv2d_wgrad(Emit *e, const Kernel *k, char **ptr) {
    const Node *r = k->lib, *g = r->in[0], *x = r->in[1];
    fprintf(e->o, "    /* %s%d: %s %%%d = d conv / d weight (%%%d, %%%d) */\n", e->kpfx, k->id, op_name(r->op), r->id, g->id,
            x->id);
    library_call(e, k, op_info[r->op].kernel,
                 xprintf("&%s, %s, %s, %s, %s, %s", params_name(e, k), dim_c(x->shape.d[0]), ptr[r->id], ptr[view_base(g)->id],
                         ptr[view_base(x)->id], e->scratch ? e->scratch : "NULL"));
}

/* Training: max_pool2d's and avg_pool2d's input gradient (the pooling's parameter struct). */
static void emit_pool_grad(Emit *e, const Kernel *k, char **ptr) {
    const Node *r = k->lib, *g = r->in[0];
    fprintf(e->o, "    /* %s%d: %s %%%d */\n", e->kpfx, k->id, op_name(r->op), r->id);
    char *args = xprintf("&%s, %s, %s, %s", params_name(e, k), dim_c(r->shape.d[0]), ptr[r->id], ptr[view_base(g)->id]);
    if (r->op == OP_MAXPOOL2D_GRAD) args = xprintf("%s, %s", args, ptr[view_base(r->in[1])->id]);
    library_call(e, k, op_info[r->op].kernel, args);
}

/* Training: adaptive_avg_pool2d's input gradient on [N*C] planes. */
static void emit_adaptive_pool_grad(Emit *e, const Kernel *k, char **ptr) {
    const Node *r = k->lib, *g = r->in[0];
    const Shape *xs = &r->shape;
    fprintf(e->o, "    /* %s%d: %s %%%d */\n", e->kpfx, k->id, op_name(r->op), r->id);
    library_call(e, k, op_info[r->op].kernel,
                 xprintf("%s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64, ptr[r->id], ptr[view_base(g)->id],
                         dim_c(dim_mul(xs->d[0], xs->d[1], NULL)), xs->d[2].c, xs->d[3].c, g->shape.d[2].c,
                         g->shape.d[3].c));
}

/* interpolate on [N*C] planes, and its input gradient (training: the planes H, W are its result's,
 * OH, OW its operand's, the adjoint); the scale factors are written exactly (hex doubles): the
 * kernel derives PyTorch's float scale 1/scale_factor from them. */
static void emit_interpolate(Emit *e, const Kernel *k, char **ptr) {
    const Node *r = k->lib, *x = r->in[0];
    const Shape *xs = &x->shape, *ys = &r->shape;
    if (r->op == OP_INTERPOLATE_GRAD) xs = &r->shape, ys = &x->shape;
    fprintf(e->o, "    /* %s%d: %s %%%d */\n", e->kpfx, k->id, op_name(r->op), r->id);
    library_call(e, k, op_info[r->op].kernel,
                 xprintf("%s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %d, %d, %a, %a", ptr[r->id],
                         ptr[view_base(x)->id], dim_c(dim_mul(xs->d[0], xs->d[1], NULL)), xs->d[2].c, xs->d[3].c,
                         ys->d[2].c, ys->d[3].c, r->bilinear, r->align_corners, r->scale[0], r->scale[1]));
}

/* layer_norm over the axes from r->axis on: rows x D; weight and bias are optional (NULL). */
static void emit_layer_norm(Emit *e, const Kernel *k, char **ptr) {
    const Node *r = k->lib, *x = r->in[0];
    const Shape *xs = &x->shape;
    Dim rows = {1, {0}}, D = {1, {0}};
    for (int i = 0; i < r->axis; i++) rows = dim_mul(rows, xs->d[i], NULL);
    for (int i = r->axis; i < xs->rank; i++) D = dim_mul(D, xs->d[i], NULL);
    if (dim_is_sym(D)) ICE("layer_norm %%%d normalizes over a symbolic axis", r->id);
    const char *w = r->nin > 1 ? ptr[view_base(r->in[1])->id] : "NULL", *b = r->nin > 2 ? ptr[view_base(r->in[2])->id] : "NULL";
    fprintf(e->o, "    /* %s%d: %s %%%d */\n", e->kpfx, k->id, op_name(r->op), r->id);
    library_call(e, k, op_info[r->op].kernel,
                 xprintf("%s, %s, %s, %s, %s, %" PRId64 ", %s", ptr[r->id], ptr[view_base(x)->id], w, b, dim_c(rows),
                         D.c, float_lit(r->eps)));
}

static void emit_embedding(Emit *e, const Kernel *k, char **ptr) {
    const Node *r = k->lib, *x = r->in[0], *w = r->in[1];
    int s = kslot(k);
    const char *what = xprintf("\"%s: embedding at %s:%d:%d, ids %s%s%s\"", e->pfx, c_string_body(e->g->source),
                               r->loc.line, r->loc.col, x->name ? "'" : "", x->name ? c_string_body(x->name) : "computed",
                               x->name ? "'" : "");
    char *a = xprintf("%s, %s, %d, %s, %s, %" PRId64 ", %" PRId64, ptr[r->id], ptr[view_base(x)->id], x->dtype == DT_I64,
                      dim_c(shape_numel(&x->shape)), ptr[view_base(w)->id], w->shape.d[0].c, w->shape.d[1].c);
    fprintf(e->o, "    /* %s%d: %s %%%d */\n", e->kpfx, k->id, op_name(r->op), r->id);
    const char *fn = op_info[r->op].kernel; /* the CPU kernel's checked form returns a status */
    dispatch(e, s, xprintf("if ((st = mrt_%s_checked(%s, %s)) != MRT_OK) %s", fn, what, a, on_fail(e)),
             xprintf("mrt_cuda_%s(stream%d, %s, %s)", fn, s, a, what));
}

static void emit_concat(Emit *e, const Kernel *k, char **ptr) {
    const Node *r = k->lib;
    size_t es = dtype_size(r->dtype);
    Dim outer = {1, {0}}, inner = {1, {0}};
    for (int i = 0; i < r->axis; i++) outer = dim_mul(outer, r->shape.d[i], NULL);
    for (int i = r->axis + 1; i < r->shape.rank; i++) inner = dim_mul(inner, r->shape.d[i], NULL);
    Dim yrow = dim_mul(r->shape.d[r->axis], inner, NULL);
    /* the offset of part j in a row of y: the parts before it, each xrow = its axis * inner
     * elements, batch-dependent (a multiple of B) when inner holds the batch (field case: a
     * concat along an axis before the batch axis wrote its parts B times too close) */
    Dim off = {0, {0}};
    fprintf(e->o, "    /* %s%d: %s %%%d */\n", e->kpfx, k->id, op_name(r->op), r->id);
    for (int j = 0; j < r->nin; j++) {
        const Node *xj = r->in[j];
        Dim xrow = dim_mul(xj->shape.d[r->axis], inner, NULL);
        library_call(e, k, op_info[r->op].kernel,
                     xprintf("%s, %s, %s, %s * %zu, %s * %zu, %s * %zu", ptr[r->id], ptr[view_base(xj)->id], dim_c(outer),
                             dim_c(xrow), es, dim_c(yrow), es, off.c ? dim_c(off) : "0", es));
        if (j > 0 && memcmp(xrow.e, off.e, sizeof off.e)) ICE("concat %%%d: parts with row sizes of different symbols", r->id);
        off.c += xrow.c;
        memcpy(off.e, xrow.e, sizeof off.e);
    }
}

/* gather, index_select, one_hot: y [outer, k, inner] from x [outer, n, inner] through the index
 * (its mode, GATHER_*); an index outside [0, n) fails the run with a message naming the call and
 * its source location (on CUDA at the stream's next synchronization, as for embedding). */
static void emit_gather(Emit *e, const Kernel *k, char **ptr) {
    const Node *r = k->lib;
    int s = kslot(k), d = r->axis, mode = r->gather_mode;
    const Node *x = mode == GATHER_ONE_HOT ? NULL : r->in[0], *idx = mode == GATHER_ONE_HOT ? r->in[0] : r->in[1];
    static const char *const fns[] = {"gather", "index_select", "one_hot"};
    Dim outer = {1, {0}}, inner = {1, {0}}, kk = r->shape.d[d], n = x ? x->shape.d[d] : kk;
    for (int i = 0; i < d; i++) outer = dim_mul(outer, r->shape.d[i], NULL);
    for (int i = d + 1; i < r->shape.rank; i++) inner = dim_mul(inner, r->shape.d[i], NULL);
    /* a loss's one-hot of its class ids is named after the loss (cross_entropy, target 'labels') */
    bool loss = r->error_fn != NULL;
    const char *what = xprintf("\"%s: %s at %s:%d:%d, %s %s%s%s\"", e->pfx, loss ? r->error_fn : fns[mode],
                               c_string_body(e->g->source), r->loc.line, r->loc.col, loss ? "target" : "index",
                               idx->name ? "'" : "", idx->name ? c_string_body(idx->name) : "computed", idx->name ? "'" : "");
    char *a = xprintf("%s, %s, %s, %d, %d, %s, %s, %s, %s", ptr[r->id], x ? ptr[view_base(x)->id] : "NULL",
                      ptr[view_base(idx)->id], idx->dtype == DT_I64, mode, dim_c(outer), dim_c(n), dim_c(kk), dim_c(inner));
    fprintf(e->o, "    /* %s%d: %s %%%d (%s along axis %d) */\n", e->kpfx, k->id, op_name(r->op), r->id, fns[mode], d);
    const char *fn = op_info[r->op].kernel;
    dispatch(e, s, xprintf("if ((st = mrt_%s_checked(%s, %s)) != MRT_OK) %s", fn, what, a, on_fail(e)),
             xprintf("mrt_cuda_%s(stream%d, %s, %s)", fn, s, a, what));
}

/* scatter_add (training: the adjoint of gather, index_select, embedding): y shaped like the
 * gathered tensor, viewed [outer, n, inner] around r->axis, from g [outer, k, inner] through the
 * index (mode 0: the index has g's shape; mode 1: k entries, k the index's element count). */
static void emit_scatter_add(Emit *e, const Kernel *k, char **ptr) {
    const Node *r = k->lib, *g = r->in[0], *idx = r->in[1];
    int d = r->axis, mode = r->gather_mode;
    Dim outer = {1, {0}}, inner = {1, {0}}, n = r->shape.d[d];
    Dim kk = mode == GATHER_ELEMENTS ? g->shape.d[d] : shape_numel(&idx->shape);
    for (int i = 0; i < d; i++) outer = dim_mul(outer, r->shape.d[i], NULL);
    for (int i = d + 1; i < r->shape.rank; i++) inner = dim_mul(inner, r->shape.d[i], NULL);
    fprintf(e->o, "    /* %s%d: %s %%%d (%s along axis %d) */\n", e->kpfx, k->id, op_name(r->op), r->id,
            mode == GATHER_ELEMENTS ? "gather" : "index_select", d);
    library_call(e, k, op_info[r->op].kernel,
                 xprintf("%s, %s, %s, %d, %d, %s, %s, %s, %s", ptr[r->id], ptr[view_base(g)->id], ptr[view_base(idx)->id],
                         idx->dtype == DT_I64, mode, dim_c(outer), dim_c(n), dim_c(kk), dim_c(inner)));
}

/* dropout in a training build: the mask of (m->seed, the step being taken, the site r->start,
 * the element index); m->step counts the steps already taken. */
static void emit_dropout(Emit *e, const Kernel *k, char **ptr) {
    const Node *r = k->lib, *x = r->in[0];
    double p = r->fattr[0];
    fprintf(e->o, "    /* %s%d: %s %%%d {p=%g, site=%" PRId64 "} */\n", e->kpfx, k->id, op_name(r->op), r->id, p, r->start);
    library_call(e, k, op_info[r->op].kernel,
                 xprintf("%s, %s, %s, %s, %s, m->seed, (uint64_t)m->step, %" PRId64 "u", ptr[r->id],
                         ptr[view_base(x)->id], dim_c(shape_numel(&x->shape)), float_lit(p),
                         p < 1 ? float_lit(1.0 / (double)(float)(1.0 - p)) : "0.0f", r->start));
}

/* An iota: y[i] = start + step * i for i < n (f32 or i64), computed in double. */
static void emit_iota(Emit *e, const Kernel *k, char **ptr) {
    const Node *r = k->lib;
    fprintf(e->o, "    /* %s%d: %s %%%d {start=%.17g, step=%.17g} */\n", e->kpfx, k->id, op_name(r->op), r->id, r->fattr[0],
            r->fattr[1]);
    library_call(e, k, op_info[r->op].kernel,
                 xprintf("%s, %s, %.17g, %.17g, %d", ptr[r->id], dim_c(r->shape.d[0]), r->fattr[0], r->fattr[1],
                         r->dtype == DT_I64));
}

/* A tensor constant: its values (the table printed into the C file) copied into its place in the
 * weight region, at load time. */
static void emit_table(Emit *e, const Kernel *k, char **ptr) {
    FILE *o = e->o;
    const Node *r = k->lib;
    int s = kslot(k);
    const char *T = c_type(r->dtype);
    fprintf(o, "    /* %s%d: %s %%%d (%" PRId64 " values) */\n    {\n        static const %s table[%" PRId64 "] = {", e->kpfx,
            k->id, op_name(r->op), r->id, r->ntable, T, r->ntable);
    for (int64_t i = 0; i < r->ntable; i++) {
        if (i % 8 == 0) fprintf(o, "\n            ");
        if (r->dtype == DT_F32) fprintf(o, "%s, ", float_lit(r->table[i]));
        else fprintf(o, "%" PRId64 ", ", (int64_t)r->table[i]);
    }
    size_t bytes = (size_t)r->ntable * dtype_size(r->dtype);
    fprintf(o, "\n        };\n");
    fprintf(o, "#ifdef MRT_WITH_CUDA\n        if (gpu%d) {\n            if ((st = mrt_memcpy(dev%d, %s, (mrt_device){MRT_DEVICE_CPU, 0}, table, "
               "%zu, stream%d)) != MRT_OK) %s;\n        } else\n#endif\n", s, s, ptr[r->id], bytes, s, on_fail(e));
    fprintf(o, "        memcpy(%s, table, %zu);\n    }\n", ptr[r->id], bytes);
}

/* A copy between device slots, on the destination's stream, once the source's work is done: from
 * a GPU to the CPU the host waits for the source's stream; from a GPU to a GPU the destination's
 * stream waits for it (no host wait: a CUDA graph captures it). The source slot's stream then
 * waits for the copy. */
static void emit_transfer(Emit *e, const Kernel *k, char **ptr) {
    FILE *o = e->o;
    const Node *r = k->lib, *src = view_base(r->in[0]);
    int s = kslot(k), ss = src->slot > 0 ? src->slot : 0;
    fprintf(o, "    /* %s%d: %s %%%d */\n", e->kpfx, k->id, op_name(r->op), r->id);
    fprintf(o, "#ifdef MRT_WITH_CUDA\n    if (gpu%d && !gpu%d && (st = mrt_stream_sync(dev%d, stream%d, \"%s transfer\")) != MRT_OK) %s;\n",
            ss, s, ss, ss, e->pfx, on_fail(e));
    fprintf(o, "    if (gpu%d && gpu%d && (st = mrt_stream_wait(dev%d, stream%d, dev%d, stream%d, \"%s transfer\")) != MRT_OK) %s;\n#endif\n",
            ss, s, s, s, ss, ss, e->pfx, on_fail(e));
    fprintf(o, "    if ((st = mrt_memcpy(dev%d, %s, dev%d, %s, %s * %zu, stream%d)) != MRT_OK) %s;\n", s, ptr[r->id], ss,
            ptr[src->id], dim_c(shape_numel(&r->shape)), dtype_size(r->dtype), s, on_fail(e));
    /* the copy runs on the destination's stream: later kernels of the source slot, which may
     * reuse the source block, wait for it (a write-after-read race on two GPUs otherwise) */
    fprintf(o, "#ifdef MRT_WITH_CUDA\n    if (gpu%d && gpu%d && (st = mrt_stream_wait(dev%d, stream%d, dev%d, stream%d, \"%s transfer\")) != MRT_OK)"
               " %s;\n#endif\n", ss, s, ss, ss, s, s, e->pfx, on_fail(e));
}

/* emit_fns[op]: the emitter of a GEMM or library op's call, from ops.def (NULL: fused or none). */
typedef void (*EmitFn)(Emit *e, const Kernel *k, char **ptr);
static const EmitFn emit_fns[OP__COUNT] = {
#define OP(id, name, cat, inplace, batch, c_expr, kernel, emit) [OP_##id] = emit,
#include "ops.def"
};

/* The static parameter structs of the convolutions and poolings in kl (before the function
 * that calls them). */
static void emit_params(Emit *e, const KernelList *kl, const char *kpfx) {
    FILE *o = e->o;
    e->kpfx = kpfx;
    for (int i = 0; i < kl->n; i++) {
        const Kernel *k = kl->k[i];
        const Node *n = k->kind == K_GEMM ? k->gemm : k->lib;
        if (!n || (n->op != OP_CONV2D && n->op != OP_MAXPOOL2D && n->op != OP_AVGPOOL2D && n->op != OP_CONV2D_WGRAD &&
                   n->op != OP_MAXPOOL2D_GRAD && n->op != OP_AVGPOOL2D_GRAD))
            continue;
        const Shape *xs = &n->in[0]->shape, *ys = &n->shape;
        /* the gradients describe their forward op: its input x and its result y */
        if (n->op == OP_CONV2D_WGRAD) xs = &n->in[1]->shape, ys = &n->in[0]->shape;
        if (n->op == OP_MAXPOOL2D_GRAD || n->op == OP_AVGPOOL2D_GRAD) xs = &n->shape, ys = &n->in[0]->shape;
        if (n->op == OP_CONV2D || n->op == OP_CONV2D_WGRAD)
            fprintf(o, "static const mrt_conv2d_params %s = {.C = %" PRId64 ", .H = %" PRId64 ", .W = %" PRId64 ", .O = %" PRId64
                       ", .OH = %" PRId64 ", .OW = %" PRId64 ",\n    .kh = %d, .kw = %d, .sh = %d, .sw = %d, .pt = %d, .pl = %d, "
                       ".dh = %d, .dw = %d, .groups = %d};\n",
                    params_name(e, k), xs->d[1].c, xs->d[2].c, xs->d[3].c, ys->d[1].c, ys->d[2].c, ys->d[3].c, n->kernel[0],
                    n->kernel[1], n->stride[0], n->stride[1], n->pad[0], n->pad[1], n->dilation[0], n->dilation[1],
                    n->groups);
        else
            fprintf(o, "static const mrt_pool2d_params %s = {.C = %" PRId64 ", .H = %" PRId64 ", .W = %" PRId64 ", .OH = %" PRId64
                       ", .OW = %" PRId64 ",\n    .kh = %d, .kw = %d, .sh = %d, .sw = %d, .pt = %d, .pl = %d, .pb = %d, .pr = %d, "
                       ".dh = %d, .dw = %d, .count_include_pad = %d};\n",
                    params_name(e, k), xs->d[1].c, xs->d[2].c, xs->d[3].c, ys->d[2].c, ys->d[3].c, n->kernel[0], n->kernel[1],
                    n->stride[0], n->stride[1], n->pad[0], n->pad[1], n->pad[2], n->pad[3], n->dilation[0], n->dilation[1],
                    n->count_include_pad);
    }
}

/* ---------------------------------------------------------------- header */

static void doc_tensor(Emit *e, FILE *o, const char *role, const char *name, const Node *n) {
    char buf[256];
    fprintf(o, " *   %-12s %s%s, host memory or model-device memory (%s)%s\n", c_ident(name), dtype_name(n->dtype),
            shape_str(&n->shape, e->g->sym_names, buf, sizeof buf), role,
            dtype_is_half(n->dtype) ? ", uint16_t bits" : "");
}

/* The run function's parameter for symbol k >= 1: its name, or NAME_size when an input or
 * output takes that name. */
static char *sym_param(const Emit *e, int k) {
    const Graph *g = e->g;
    char *s = c_ident(g->sym_names[k]);
    bool taken = !strcmp(s, "batch") || !strcmp(s, "m");
    for (int i = 0; i < g->ninputs; i++) taken |= !strcmp(s, c_ident(g->inputs[i]->name));
    for (int i = 0; i < g->noutputs; i++) taken |= !strcmp(s, c_ident(g->outputs[i].name));
    return taken ? xprintf("%s_size", s) : s;
}

static void emit_proto(Emit *e, FILE *o, const char *fn) {
    const Graph *g = e->g;
    fprintf(o, "mrt_status %s_%s(%s *m, int batch", e->pfx, fn, e->pfx);
    for (int k = 1; k < g->nsyms; k++) fprintf(o, ", int64_t %s", sym_param(e, k));
    for (int i = 0; i < g->ninputs; i++)
        fprintf(o, ",\n        const %s *%s", c_type(g->inputs[i]->dtype), c_ident(g->inputs[i]->name));
    for (int i = 0; i < g->noutputs; i++)
        fprintf(o, ",\n        %s *%s", c_type(g->outputs[i].node->dtype), c_ident(g->outputs[i].name));
    fprintf(o, ")");
}

static void emit_run_proto(Emit *e, FILE *o) { emit_proto(e, o, "run"); }

/* The arguments of run() by name, for the calls of the training API's wrappers. */
static char *run_args(const Emit *e) {
    const Graph *g = e->g;
    char *s = xstrdup("m, batch");
    for (int k = 1; k < g->nsyms; k++) s = xprintf("%s, %s", s, sym_param(e, k));
    for (int i = 0; i < g->ninputs; i++) s = xprintf("%s, %s", s, c_ident(g->inputs[i]->name));
    for (int i = 0; i < g->noutputs; i++) s = xprintf("%s, %s", s, c_ident(g->outputs[i].name));
    return s;
}

/* Training builds: the training API, declared in the header (definitions = false) or defined as
 * calls into run() and the runtime. */
static void emit_train_api(Emit *e, FILE *o, bool definitions) {
    const char *P = e->pfx;
    if (!definitions)
        fprintf(o, "/** One training step on a batch: forward, the loss (written to *%s), backward and the\n"
                   " *  optimizer's update of the weights in place; the same call as %s_run. A loss or gradient\n"
                   " *  norm that is not finite is MRT_ERR_NOT_FINITE and the weights stay the last step's. */\n",
                c_ident(e->g->outputs[0].name), P);
    emit_proto(e, o, "train_step");
    if (definitions) fprintf(o, " {\n    return %s_run(%s);\n}\n", P, run_args(e));
    else fprintf(o, ";\n\n");
    if (!definitions)
        fprintf(o, "/* The evaluation twin, %s_eval.h and .c (written beside these files; link it when you use it):\n"
                   " * %s_eval_run(ev, batch, inputs..., targets..., &loss) is the loss in inference mode\n"
                   " * (batch_norm's running statistics, no dropout); mrt_model_copy_weights(ev, m) gives it the\n"
                   " * weights of the model being trained. */\n\n", P, P);
    const char *what[3] = {"save_weights", "save_state", "load_state"};
    const char *doc[3] = {"Write the weights (state_dict names) to a safetensors file, atomically",
                          "Write the optimizer state (and the step count) to a safetensors file, atomically",
                          "Resume: read a state file that save_state wrote (mrt_model_load_state)"};
    for (int k = 0; k < 3; k++) {
        if (!definitions) fprintf(o, "/** %s. */\n", doc[k]);
        fprintf(o, "mrt_status %s_%s(%s *m, const char *path)", P, what[k], P);
        if (!definitions) {
            fprintf(o, ";\n\n");
            continue;
        }
        fprintf(o, " {\n    if (!m || m->desc != &%s_desc)\n        return mrt_set_error(MRT_ERR_INVALID_ARG, \"%s_%s: the "
                   "model is %%s\", m ? \"not a %s model\" : \"NULL\");\n", P, P, what[k], P);
        fprintf(o, "    return %s;\n}\n", k == 2 ? "mrt_model_load_state(m, path)" : k ? "mrt_model_save_weights(m, path, 1)"
                                                                                    : "mrt_model_save_weights(m, path, 0)");
    }
    if (definitions) fprintf(o, "\n");
}

void emit_c_header(Emit *e, FILE *o) {
    const Graph *g = e->g;
    char buf[256];
    fprintf(o, "/* %s.h — generated by modelc from model '%s'. Do not edit.\n *\n", e->pfx, g->name);
    fprintf(o, " * Usage:\n *   %s *m;\n *   %s_create(&m, \"auto\");     (or \"cpu\", \"cuda\", \"cuda:1\")\n", e->pfx, e->pfx);
    char *dims = xstrdup("batch");
    for (int k = 1; k < g->nsyms; k++) dims = xprintf("%s, %s", dims, sym_param(e, k));
    fprintf(o, " *   %s_load_weights(m, \"%s.safetensors\");\n *   %s_run(m, %s, inputs..., outputs...);\n", e->pfx,
            e->pfx, e->pfx, dims);
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
    /* modelc --precision (mrt_model_desc.precision) */
    fprintf(o, "#define %s_PRECISION \"%s\"%s\n", e->PFX, g->bf16 ? "bf16" : "f32",
            g->bf16 ? " /* the CPU's oneDNN convs and constant-weight GEMMs in bf16 (f32 sums); the rest f32 */" : "");
    for (int k = 1; k < g->nsyms; k++)
        fprintf(o, "#define %s_MAX_%s %" PRId64 "\n", e->PFX, upper(c_ident(g->sym_names[k])), g->sym_max[k]);
    fprintf(o, "#define %s_WEIGHT_BYTES %zu\n", e->PFX, e->mp->slot_weights[0]);
    fprintf(o, "#define %s_LOAD_BYTES %zu\n", e->PFX, e->mp->slot_load[0]);
    fprintf(o, "#define %s_ARENA_BYTES_CPU %zu\n", e->PFX, e->mp->slot_arena[0]);
    fprintf(o, "#define %s_ARENA_BYTES_CUDA %zu\n", e->PFX, e->mpc->slot_arena[0]);
    for (int s = 1; s < g->nslots; s++) {
        fprintf(o, "/* device slot %d, pinned by 'on %s' at line %d */\n", s, g->slots[s].name, g->slots[s].loc.line);
        fprintf(o, "#define %s_SLOT%d_DEVICE \"%s\"\n", e->PFX, s, g->slots[s].name);
        fprintf(o, "#define %s_SLOT%d_WEIGHT_BYTES %zu\n", e->PFX, s, e->mp->slot_weights[s]);
        fprintf(o, "#define %s_SLOT%d_LOAD_BYTES %zu\n", e->PFX, s, e->mp->slot_load[s]);
        fprintf(o, "#define %s_SLOT%d_ARENA_BYTES_CPU %zu\n", e->PFX, s, e->mp->slot_arena[s]);
        fprintf(o, "#define %s_SLOT%d_ARENA_BYTES_CUDA %zu\n", e->PFX, s, e->mpc->slot_arena[s]);
    }
    fprintf(o, "\n/** Create the model on `device` (\"auto\", \"cpu\", \"cpu:N\", \"cuda\", \"cuda:N\"; NULL means\n"
               " *  $MODELRT_DEVICE or \"auto\", which picks the first usable GPU, else the CPU, and logs which;\n"
               " *  $MODELRT_DEVICE_MAP, if set, moves the devices 'on' regions pin: see %s_create_mapped).\n"
               " *  An explicit device that is absent is an error, never a fallback. The weight region and the\n"
               " *  activation arena are allocated there once; on a GPU, free memory is checked first. *m is set\n"
               " *  to NULL on failure. Free with %s_destroy. */\n", e->pfx, e->pfx);
    fprintf(o, "mrt_status %s_create(%s **m, const char *device);\n\n", e->pfx, e->pfx);
    fprintf(o, "/** %s_create with a device map for the devices 'on' regions pin, as PyTorch's map_location:\n"
               " *  \"cuda:1=cpu,cuda:0=cuda:0\" runs the cuda:1 region on the CPU (NULL: $MODELRT_DEVICE_MAP). */\n"
               "mrt_status %s_create_mapped(%s **m, const char *device, const char *device_map);\n\n", e->pfx, e->pfx, e->pfx);
    fprintf(o, "/** Load the weights from a safetensors file whose tensor names are the params below (a\n"
               " *  PyTorch state_dict saved with safetensors) and move them to the model's device(s), once.\n"
               " *  Every missing, unexpected, mistyped or mis-shaped tensor is an error naming it. Params:\n");
    int nstate = 0;
    for (int i = 0; i < g->nparams; i++) {
        nstate += g->params[i]->state != 0;
        if (!g->params[i]->state)
            fprintf(o, " *   %-24s %s%s\n", g->params[i]->name, dtype_name(g->params[i]->dtype),
                    shape_str(&g->params[i]->shape, g->sym_names, buf, sizeof buf));
    }
    if (g->nparams == nstate) fprintf(o, " *   (none: the path may be NULL)\n");
    if (nstate) { /* training builds: the optimizer state is NAME_load_state's, never in a weights file */
        fprintf(o, " *  A file that holds any of the optimizer state (it starts at zero; %s_load_state reads it)\n"
                   " *  is refused:\n", e->pfx);
        for (int i = 0; i < g->nparams; i++)
            if (g->params[i]->state)
                fprintf(o, " *   %-24s %s%s\n", g->params[i]->name, dtype_name(g->params[i]->dtype),
                        shape_str(&g->params[i]->shape, g->sym_names, buf, sizeof buf));
    }
    fprintf(o, " */\nmrt_status %s_load_weights(%s *m, const char *safetensors_path);\n\n", e->pfx, e->pfx);
    fprintf(o, "/** Run the model synchronously. `batch` is in 1..%s_MAX_BATCH%s.\n", e->PFX,
            g->has_batch ? "" : " (this model has no batch dimension: pass 1)");
    fprintf(o, " *  Buffers are host memory (copied to and from the device), or memory on the model's own CUDA\n"
               " *  device (used in place, no copy); memory on another GPU is an error.\n");
    if (g->has_batch) fprintf(o, " *  Shapes use %s = batch.\n", g->batch_name);
    for (int k = 1; k < g->nsyms; k++)
        fprintf(o, " *  `%s` is the size %s in the shapes, in 1..%s_MAX_%s.\n", sym_param(e, k), g->sym_names[k], e->PFX,
                upper(c_ident(g->sym_names[k])));
    for (int i = 0; i < g->ninputs; i++) doc_tensor(e, o, "input", g->inputs[i]->name, g->inputs[i]);
    for (int i = 0; i < g->noutputs; i++) doc_tensor(e, o, "output", g->outputs[i].name, g->outputs[i].node);
    bool half = false;
    for (int i = 0; i < g->ninputs; i++) half |= dtype_is_half(g->inputs[i]->dtype);
    for (int i = 0; i < g->noutputs; i++) half |= dtype_is_half(g->outputs[i].node->dtype);
    if (half)
        fprintf(o, " *  f16 and bf16 buffers hold each value's 16 bits as a uint16_t; mrt_kernels.h converts\n"
                   " *  (mrt_f16_from_f32, mrt_f16_to_f32, mrt_bf16_from_f32, mrt_bf16_to_f32: to nearest even).\n");
    fprintf(o, " */\n");
    emit_run_proto(e, o);
    fprintf(o, ";\n\n");
    if (g->train) emit_train_api(e, o, false);
    fprintf(o, "/** Free everything the model holds. NULL is ignored. */\nvoid %s_destroy(%s *m);\n\n", e->pfx, e->pfx);
    fprintf(o, "/** The device the model runs on (slot 0); cpu:0 for NULL. */\nmrt_device %s_device(const %s *m);\n\n", e->pfx,
            e->pfx);
    fprintf(o, "/** Descriptors: for the runtime (mrt_model_create) and for generic drivers (mrt_main). */\n"
               "extern const mrt_model_desc %s_desc;\nextern const mrt_model_info %s_info;\n\n", e->pfx, e->pfx);
    fprintf(o, "#ifdef __cplusplus\n}\n#endif\n#endif /* %s_H */\n", e->PFX);
}

/* ---------------------------------------------------------------- the C file */

static void io_desc(FILE *o, const char *name, const Node *n) {
    fprintf(o, "    {\"%s\", %s, %d, {", name, mrt_dtype(n->dtype), n->shape.rank);
    for (int i = 0; i < n->shape.rank; i++) fprintf(o, "%s%" PRId64, i ? ", " : "", n->shape.d[i].c);
    fprintf(o, "}, {");
    for (int i = 0; i < n->shape.rank; i++) {
        fprintf(o, "%s{", i ? ", " : "");
        for (int k = 0; k < MAX_SYMS; k++) fprintf(o, "%s%d", k ? ", " : "", n->shape.d[i].e[k]);
        fprintf(o, "}");
    }
    fprintf(o, "}},\n");
}

static size_t bytes_at_max(const Graph *g, const Node *n) {
    return (size_t)dim_max(g, shape_numel(&n->shape)) * dtype_size(n->dtype);
}

static char *bytes_c(const Node *n) {
    return xprintf("(size_t)%s * %zu", dim_c(shape_numel(&n->shape)), dtype_size(n->dtype));
}

/* One pointer per materialized value: in run() (inputs, params, load-time values, arena,
 * outputs) or in load_weights() (params and load-time values only). With `want` (a part of a
 * large run(), see RUN_PART), only the values want[id] marks; with from_io, inputs and outputs
 * are taken from run()'s array mrt_io (inputs first, then outputs) instead of being staged. */
static char **declare_pointers(Emit *e, bool at_load, const bool *want, bool from_io) {
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
        if (want && !want[i]) continue;
        const char *T = c_type(n->dtype);
        int sl = s->slot;
        ptr[i] = xprintf("mrt_v%d", i);
        if (from_io && (s->kind == S_INPUT || s->kind == S_OUTPUT)) {
            bool in = s->kind == S_INPUT;
            fprintf(o, "    MRT_UNUSED %s%s *const mrt_v%d = (%s%s *)mrt_io[%d];\n", in ? "const " : "", T, i, in ? "const " : "",
                    T, in ? s->index : g->ninputs + s->index);
            continue;
        }
        switch (s->kind) {
        case S_INPUT: {
            const char *name = c_ident(g->inputs[s->index]->name);
            fprintf(o, "    MRT_UNUSED const %s *mrt_v%d;\n", T, i);
            fprintf(o, "    if ((st = mrt_model_stage_in(m, %d, %s, %s, %zu, (const void **)&mrt_v%d, \"%s\")) != MRT_OK) return st;\n",
                    sl, name, bytes_c(n), e->io_off[s->id], i, g->inputs[s->index]->name);
            break;
        }
        case S_PARAM:
            fprintf(o, "    MRT_UNUSED const %s *const mrt_v%d = (const %s *)(%s%d + %zu);  /* %s */\n", T, i, T,
                    s->load_only ? "load" : "weights", sl, s->offset, n->name);
            break;
        case S_INIT:
            if (at_load)
                fprintf(o, "    MRT_UNUSED %s *const mrt_v%d = (%s *)(%s%d + %zu);\n", T, i, T, s->load_only ? "load" : "weights",
                        sl, s->offset);
            else
                fprintf(o, "    MRT_UNUSED const %s *const mrt_v%d = (const %s *)(weights%d + %zu);  /* computed at load */\n", T,
                        i, T, sl, s->offset);
            break;
        case S_ARENA:
            fprintf(o, "    MRT_UNUSED %s *const mrt_v%d = (%s *)(arena%d + offsets%d[%d]);\n", T, i, T, sl, sl, s->id);
            break;
        case S_OUTPUT: {
            const char *name = c_ident(g->outputs[s->index].name);
            fprintf(o, "    %s *mrt_v%d;\n    MRT_UNUSED int mrt_back%d;\n", T, i, i);
            fprintf(o, "    if ((st = mrt_model_stage_out(m, %d, %s, %zu, (void **)&mrt_v%d, &mrt_back%d, \"%s\")) != MRT_OK) return st;\n",
                    sl, name, e->io_off[s->id], i, i, g->outputs[s->index].name);
            break;
        }
        case S_CONST:
            break;
        case S__COUNT:
            ICE("storage of %%%d has no kind", i);
        }
    }
    for (int i = 0; i < g->nnodes; i++)
        if (!g->nodes[i]->dead && g->nodes[i]->op == OP_RESHAPE && mp->of[i]) ptr[i] = ptr[view_base(g->nodes[i])->id];
    return ptr;
}

/* Marks in want[] the values kernel k's call names: what it writes and what it reads. */
static void mark_kernel_values(const Kernel *k, bool *want) {
    want[view_base(k->root)->id] = true;
    const Node *anchor = k->gemm ? k->gemm : k->lib;
    for (int j = 0; anchor && j < anchor->nin; j++) want[view_base(anchor->in[j])->id] = true;
    for (int j = 0; j < k->nleaves; j++) want[view_base(k->leaves[j].node)->id] = true;
}

/* A split model's run in micro-batches (runtime/rt_pipe.c) hands each device slot's arena from one
 * micro-batch to the next. pipe_acq[i] is the set of slots (bit s: slot s) whose arena the run
 * starts to use at kernel i, pipe_rel[i] those it is done with after kernel i: a slot is used
 * from the first to the last kernel that runs on it or reads a value from its arena (a
 * transfer reads its source's), so between the two no other micro-batch touches it. */
static void pipe_masks(Emit *e) {
    const KernelList *kl = e->kl;
    int first[16], last[16];
    for (int s = 0; s < 16; s++) first[s] = last[s] = -1;
    bool *want = xalloc(sizeof(bool) * (size_t)(e->g->nnodes + 1));
    for (int i = 0; i < kl->n; i++) {
        unsigned m = 1u << kslot(kl->k[i]);
        memset(want, 0, sizeof(bool) * (size_t)e->g->nnodes);
        mark_kernel_values(kl->k[i], want);
        for (int v = 0; v < e->g->nnodes; v++) {
            const Storage *st = want[v] ? e->mp->of[v] : NULL;
            if (st && st->kind == S_ARENA) m |= 1u << st->slot;
        }
        for (int s = 0; s < e->g->nslots; s++)
            if (m >> s & 1) {
                if (first[s] < 0) first[s] = i;
                last[s] = i;
            }
    }
    e->pipe_acq = xalloc(sizeof(unsigned) * (size_t)(kl->n + 1));
    e->pipe_rel = xalloc(sizeof(unsigned) * (size_t)(kl->n + 1));
    for (int s = 0; s < e->g->nslots; s++)
        if (first[s] >= 0) {
            e->pipe_acq[first[s]] |= 1u << s;
            e->pipe_rel[last[s]] |= 1u << s;
        }
}

static void emit_pipe_gate(Emit *e, unsigned acq, unsigned rel) {
    if (acq || rel)
        fprintf(e->o, "    if (m->pipe && (st = mrt_pipe_gate(m, 0x%xu, 0x%xu)) != MRT_OK) %s;\n", acq, rel, on_fail(e));
}

/* The calls of kernels [from, to) of one kernel list, in order. */
/* Kernel k's work for the profile (rt_prof.c), as C expressions over the run's sizes: *flops,
 * 2 per multiply-add of a GEMM or convolution ("0" for other kernels), and *bytes, what it reads
 * and writes once each (its distinct operands, views resolved, and its result). */
static void kernel_cost(const Kernel *k, char **flops, char **bytes) {
    const Node *m = k->gemm;
    *flops = "0";
    if (m && m->op == OP_MATMUL) {
        const Shape *sa = &m->in[0]->shape;
        *flops = xprintf("2.0 * (double)(%s) * (double)(%s)", dim_c(shape_numel(&m->shape)), dim_c(sa->d[sa->rank - 1]));
    } else if (k->lib && k->lib->op == OP_ATTENTION) { /* per output row: S * (E + Ev) multiply-adds */
        const Node *a = k->lib, *q = a->in[0], *kk = a->in[1];
        *flops = xprintf("2.0 * (double)(%s) / (double)(%s) * (double)(%s) * (double)(%s + %s)", dim_c(shape_numel(&a->shape)),
                         dim_c(a->shape.d[a->attn_perm[3][a->shape.rank - 1]]),
                         dim_c(kk->shape.d[a->attn_perm[1][kk->shape.rank - 2]]),
                         dim_c(q->shape.d[a->attn_perm[0][q->shape.rank - 1]]),
                         dim_c(a->shape.d[a->attn_perm[3][a->shape.rank - 1]]));
    } else if (m && m->op == OP_CONV2D) { /* per output: C/groups * KH * KW multiply-adds */
        const Shape *sw = &m->in[1]->shape;
        Dim per = {1, {0}};
        for (int d = 1; d < sw->rank; d++) per = dim_mul(per, sw->d[d], NULL);
        *flops = xprintf("2.0 * (double)(%s) * (double)(%s)", dim_c(shape_numel(&m->shape)), dim_c(per));
    }
    const Node *seen[64];
    int ns = 0;
    const Node *cand[64 + 2];
    int nc = 0;
    if (m) cand[nc++] = view_base(m->in[0]), cand[nc++] = view_base(m->in[1]);
    for (int j = 0; k->lib && j < k->lib->nin && nc < 64; j++) cand[nc++] = view_base(k->lib->in[j]);
    for (int i = 0; i < k->nleaves && nc < 64; i++)
        if (i != k->gemm_leaf) cand[nc++] = view_base(k->leaves[i].node);
    cand[nc++] = k->root;
    char *b = "0";
    for (int i = 0; i < nc; i++) {
        bool dup = false;
        for (int j = 0; j < ns && !dup; j++) dup = seen[j] == cand[i];
        if (dup || ns == 64) continue;
        seen[ns++] = cand[i];
        b = xprintf("%s + (double)(%s) * %d", b, dim_c(shape_numel(&cand[i]->shape)), (int)dtype_size(cand[i]->dtype));
    }
    *bytes = b;
}

/* Kernel k's line in the profile: "k12 conv2d resnet18.model:14:9 +epilogue, blocked". */
static char *kernel_label(const Emit *e, const Kernel *k) {
    const Node *n = k->gemm ? k->gemm : k->lib ? k->lib : k->root;
    const char *src = e->g->source ? e->g->source : e->g->name;
    const char *slash = strrchr(src, '/');
    const char *what = k->kind == K_ELEMENTWISE ? "elementwise" : op_name(n->op);
    char *s = xprintf("k%d %s%s%s %s:%d:%d", k->id, what, k->kind == K_ELEMENTWISE ? " -> " : "",
                      k->kind == K_ELEMENTWISE ? op_name(n->op) : "", slash ? slash + 1 : src, n->loc.line, n->loc.col);
    if (k->kind == K_GEMM && k->expr) s = xprintf("%s +epilogue", s);
    if (k->blk >= 0) s = xprintf("%s, blocked%s", s, k->blk_wino ? " (Winograd where oneDNN has it)" : "");
    if (kslot(k) > 0) s = xprintf("%s, slot %d", s, kslot(k));
    return s;
}

static void emit_calls(Emit *e, const KernelList *kl, int from, int to, char **ptr, const char *pfx) {
    bool run = !strcmp(pfx, "k");
    int active = 0; /* the slot whose device is current (callers activate slot 0 first) */
    e->kpfx = pfx;
    for (int i = from; i < to; i++) {
        const Kernel *k = kl->k[i];
        int s = kslot(k);
        if (s != active) {
            /* launches and library calls run on the current device: make it this slot's (B14) */
            fprintf(e->o, "    if (gpu%d && (st = mrt_device_activate(dev%d)) != MRT_OK) %s;\n", s, s, on_fail(e));
            active = s;
        }
        if (run && e->pipe_acq) emit_pipe_gate(e, e->pipe_acq[i], i > 0 ? e->pipe_rel[i - 1] : 0);
        e->scratch = NULL;
        if (run && e->mp->scratch[i])
            e->scratch = xprintf("(float *)(arena%d + offsets%d[%d])", kslot(k), kslot(k), e->mp->scratch[i]->id);
        bool skip = run && e->ready && e->ready->skip[i];
        if (run) fprintf(e->o, "    if (m->prof) mrt_pt = mrt_prof_begin(m, %d);\n", s);
        if (skip) /* the gradient norm: a data-parallel step takes that of the reduced gradients */
            fprintf(e->o, "    if (!m->defer_update) {\n");
        int bias_leaf, act;
        double lo, hi;
        if (run && k->blk >= 0) {
            emit_blocked_call(e, k, ptr, pfx);
        } else if (k->kind == K_GEMM && lt_epilogue(k, &bias_leaf, &act)) {
            emit_lt_gemm(e, k, ptr, bias_leaf, act);
        } else if (k->kind == K_GEMM && dw_epilogue(k, &bias_leaf, &act, &lo, &hi)) {
            /* the CPU's depthwise kernel applies the epilogue; a GPU runs it after the conv */
            emit_conv2d_as(e, k, ptr, true, bias_leaf, act, lo, hi);
            emit_elementwise_call(e, k, ptr, pfx, true);
        } else {
            if (k->kind != K_ELEMENTWISE) {
                const Node *n = k->kind == K_GEMM ? k->gemm : k->lib;
                if (!emit_fns[n->op]) ICE("op '%s' has no kernel emitter (the emit column of ops.def)", op_name(n->op));
                emit_fns[n->op](e, k, ptr);
            }
            if (k->expr) emit_elementwise_call(e, k, ptr, pfx, false);
        }
        if (skip) fprintf(e->o, "    }\n");
        if (run) {
            char *flops, *bytes;
            kernel_cost(k, &flops, &bytes);
            fprintf(e->o, "    if (m->prof) mrt_prof_end(m, %d, %d, mrt_pt, %s, %s);\n", s, i, flops, bytes);
        }
        if (!strcmp(pfx, "init")) /* load-only values this was the last reader of: their pages go now */
            for (int j = 0; j < e->mp->nst; j++) {
                const Storage *st = e->mp->st[j];
                if (st->load_only && e->mp->init_last[st->id] == i && st->bytes >= 8192) /* one whole 4 KiB page at least */
                    fprintf(e->o, "    if (!gpu%d) mrt_cpu_release(load%d + %zu, %zu);\n", st->slot, st->slot, st->offset,
                            st->bytes);
            }
        if (run && e->ready && e->ready->after[i]) /* gradients final here: their buckets may go */
            fprintf(e->o, "    if (m->ddp && (st = mrt_grad_ready(m, %d)) != MRT_OK) %s;\n", e->ready->after[i], on_fail(e));
    }
    if (run && e->pipe_acq && to == kl->n && to > 0) emit_pipe_gate(e, 0, e->pipe_rel[to - 1]);
}

/* Locals naming each slot's device, stream, whether it is a GPU, and its memory. */
static void declare_slots(Emit *e, bool arenas) {
    FILE *o = e->o;
    for (int s = 0; s < e->g->nslots; s++) {
        fprintf(o, "    MRT_UNUSED const mrt_device dev%d = m->dev[%d];\n    MRT_UNUSED void *const stream%d = m->stream[%d];\n", s, s,
                s, s);
        fprintf(o, "    MRT_UNUSED const int gpu%d = dev%d.kind == MRT_DEVICE_CUDA;\n", s, s);
        fprintf(o, "    MRT_UNUSED unsigned char *const weights%d = m->weights[%d];\n", s, s);
        if (!arenas) fprintf(o, "    MRT_UNUSED unsigned char *const load%d = m->load[%d];\n", s, s);
        if (arenas)
            fprintf(o, "    MRT_UNUSED unsigned char *const arena%d = m->arena[%d];\n"
                       "    MRT_UNUSED const size_t *const offsets%d = %s_arena_offsets[gpu%d];\n", s, s, s, e->pfx, s);
    }
}

/* Activation bytes over every device slot (what --memory reports for a split model). */
static size_t arena_total(const MemPlan *mp, int nslots) {
    size_t t = 0;
    for (int s = 0; s < nslots; s++) t += mp->slot_arena[s];
    return t;
}

/* Training builds, after the backward pass: the loss and the gradients' squared norm come to the
 * host, then NAME_apply. With m->defer_update (data-parallel training: the runtime reduces the
 * replicas' gradients first, then calls desc->apply itself) the step stops here. */
static void emit_loss_check_and_step(Emit *e, FILE *o, char **ptr) {
    const Graph *g = e->g;
    const Node *v[2] = {view_base(g->loss), view_base(g->grad_sumsq)};
    const char *var[2] = {"mrt_loss", "mrt_sumsq"};
    fprintf(o, "    if (!m->defer_update) {\n        float mrt_loss = 0, mrt_sumsq = 0;\n");
    for (int k = 0; k < 2; k++) {
        int s = v[k]->slot > 0 ? v[k]->slot : 0;
        fprintf(o, "#ifdef MRT_WITH_CUDA\n        if (gpu%d) {\n"
                   "            if ((st = mrt_memcpy((mrt_device){MRT_DEVICE_CPU, 0}, &%s, dev%d, %s, 4, stream%d)) != MRT_OK ||\n"
                   "                (st = mrt_stream_sync(dev%d, stream%d, \"%s %s\")) != MRT_OK) return st;\n"
                   "        } else\n#endif\n            %s = *(const float *)%s;\n", s, var[k], s, ptr[v[k]->id], s, s, s, e->pfx,
                k ? "gradient norm" : "loss", var[k], ptr[v[k]->id]);
    }
    fprintf(o, "        if ((st = %s_apply(m, mrt_loss, mrt_sumsq)) != MRT_OK) return st;\n    }\n", e->pfx);
}

/* Training builds: NAME_apply(m, loss, sumsq), the step after the backward pass: a loss or a
 * gradient norm that is not finite stops it before the update (the weights stay the last good
 * step's), else the optimizer step. */
static void emit_apply(Emit *e, FILE *o) {
    const Graph *g = e->g;
    fprintf(o, "/* After the backward pass: the checks, then the optimizer step (desc.apply). */\n");
    fprintf(o, "static mrt_status %s_apply(mrt_model *m, float mrt_loss, float mrt_sumsq) {\n", e->pfx);
    fprintf(o, "    if (!isfinite(mrt_loss))\n        return mrt_set_error(MRT_ERR_NOT_FINITE, \"%s: the loss '%s' is %%g at "
               "step %%lld: the update is not applied (the weights are those of the last step)\", (double)mrt_loss, "
               "(long long)m->step + 1);\n", e->pfx, g->outputs[0].name);
    fprintf(o, "    if (!isfinite(mrt_sumsq))\n        return mrt_set_error(MRT_ERR_NOT_FINITE, \"%s: the gradients' norm is "
               "%%g at step %%lld (the loss is %%g): the update is not applied (the weights are those of the last step)\", "
               "sqrt((double)mrt_sumsq), (long long)m->step + 1, (double)mrt_loss);\n", e->pfx);
    fprintf(o, "    return %s_opt_step(m, mrt_sumsq);\n}\n\n", e->pfx);
}

/* Training builds: NAME_grad_ptrs(m, g), each trained param's gradient after a run (in the
 * arena of its device: valid until the next run), in the order of desc.grads. */
static void emit_grad_ptrs(Emit *e, FILE *o) {
    const Graph *g = e->g;
    bool *want = xalloc(sizeof(bool) * (size_t)(g->nnodes + 1));
    for (int i = 0; i < g->nparams; i++)
        if (g->grad[i]) want[view_base(g->grad[i])->id] = true;
    fprintf(o, "/* Where each trained param's gradient is after a run (desc.grad_ptrs). */\n");
    fprintf(o, "static mrt_status %s_grad_ptrs(mrt_model *m, float **mrt_g) {\n    MRT_UNUSED mrt_status st = MRT_OK;\n", e->pfx);
    declare_slots(e, true);
    char **ptr = declare_pointers(e, false, want, false);
    int k = 0;
    for (int i = 0; i < g->nparams; i++)
        if (g->grad[i]) fprintf(o, "    mrt_g[%d] = (float *)%s; /* %s */\n", k++, ptr[view_base(g->grad[i])->id], g->params[i]->name);
    fprintf(o, "    return MRT_OK;\n}\n\n");
}

/* Training builds: the optimizer step after the backward pass over every trained param at once
 * (torch.optim's single-tensor algorithm, element by element in mrt_opt_elem, over a table of
 * the tensors of each device: one CPU loop, or as few CUDA launches as the kernel-parameter
 * limit allows); the learning rate of the step from the schedule (mrt_train_lr), the gradients
 * scaled by clip_grad_norm_'s coefficient first. */
static void emit_opt_step(Emit *e, FILE *o) {
    const Graph *g = e->g;
    const struct Optimizer *op = &g->opt;
    bool *want = xalloc(sizeof(bool) * (size_t)(g->nnodes + 1));
    for (int i = 0; i < g->nparams; i++) {
        if (!g->grad[i]) continue;
        want[view_base(g->grad[i])->id] = want[g->params[i]->id] = true;
        for (int k = 0; k < 2; k++)
            if (g->opt_state[i][k]) want[g->opt_state[i][k]->id] = true;
    }
    for (int i = 0; i < g->nupd; i++) want[view_base(g->upd_value[i])->id] = want[g->upd_param[i]->id] = true;
    fprintf(o, "/* The optimizer step: %s(lr=%.9g, ...) over every trained param, at once on each device. */\n",
            op->kind == OPT_SGD ? "sgd" : op->kind == OPT_ADAM ? "adam" : "adamw", op->lr);
    fprintf(o, "static mrt_status %s_opt_step(mrt_model *m, float sumsq) {\n    MRT_UNUSED mrt_status st = MRT_OK;\n", e->pfx);
    declare_slots(e, true);
    char **ptr = declare_pointers(e, false, want, false);
    fprintf(o, "    const int64_t step = m->step + 1;\n    const double lr = mrt_train_lr(&m->train, step);\n");
    fprintf(o, "    mrt_opt_args a = mrt_opt_args_for(%d, lr, %.17g, %.17g, %.17g, %d, %.17g, %.17g, %.17g, step);\n",
            op->kind == OPT_SGD ? 0 : op->kind == OPT_ADAM ? 1 : 2, op->weight_decay, op->momentum, op->dampening, op->nesterov,
            op->beta1, op->beta2, op->eps);
    fprintf(o, "    if (m->train.clip_grad_norm > 0) a.grad_scale = mrt_clip_coef(sumsq, m->train.clip_grad_norm);\n");
    for (int s = 0; s < g->nslots; s++) {
        int n = 0;
        for (int i = 0; i < g->nparams; i++) {
            if (!g->grad[i]) continue;
            const Node *p = g->params[i];
            if ((p->slot > 0 ? p->slot : 0) != s) continue;
            char *s0 = g->opt_state[i][0] ? xprintf("(float *)%s", ptr[g->opt_state[i][0]->id]) : xstrdup("NULL");
            char *s1 = g->opt_state[i][1] ? xprintf("(float *)%s", ptr[g->opt_state[i][1]->id]) : xstrdup("NULL");
            fprintf(o, "%s        {(float *)%s, (const float *)%s, %s, %s, %" PRId64 "}, /* %s */\n",
                    n ? "" : xprintf("    {\n    const mrt_opt_tensor t%d[] = {\n", s), ptr[p->id],
                    ptr[view_base(g->grad[i])->id], s0, s1, shape_numel(&p->shape).c, p->name);
            n++;
        }
        if (!n) continue;
        fprintf(o, "    };\n");
        dispatch(e, s, xprintf("mrt_opt_step_multi_f32(&a, t%d, %d)", s, n),
                 xprintf("mrt_cuda_opt_step_multi_f32(stream%d, &a, t%d, %d)", s, s, n));
        fprintf(o, "    }\n");
    }
    /* the buffers a training step updates (batch_norm's running statistics), copied on their device */
    for (int i = 0; i < g->nupd; i++) {
        const Node *p = g->upd_param[i], *v = view_base(g->upd_value[i]);
        int s = p->slot > 0 ? p->slot : 0;
        fprintf(o, "    /* %s = %%%d */\n    if ((st = mrt_memcpy(dev%d, (void *)%s, dev%d, %s, %" PRId64 ", stream%d)) != MRT_OK) return st;\n",
                p->name, v->id, s, ptr[p->id], s, ptr[v->id], shape_numel(&p->shape).c * (int64_t)dtype_size(p->dtype), s);
    }
    fprintf(o, "    m->step = step;\n    m->last_lr = lr;\n    m->grad_norm = sqrt((double)sumsq);\n    return MRT_OK;\n}\n\n");
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
        fprintf(o, "}, %zu, %d, %d},\n", s->offset, 2 * s->slot + s->load_only, n->state);
    }
    if (!g->nparams) fprintf(o, "    {0}\n");
    fprintf(o, "};\n\n/* Per device slot: pinned device, its region, and the plan's bytes (weights, load-only,\n"
               " * arena with the CPU and the CUDA plan, CUDA staging). */\n");
    fprintf(o, "static const mrt_slot_desc %s_slots[] = {\n", e->pfx);
    for (int s = 0; s < g->nslots; s++) {
        if (s) fprintf(o, "    {\"%s\", \"%s:%d\", ", g->slots[s].name, c_string_body(g->source), g->slots[s].loc.line);
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

/* The run's CUDA graph (runtime/rt_model.c, mrt_model_graph_begin): keyed by the sizes and the
 * device pointers the kernels get for the inputs and outputs (a caller's device buffer is used
 * in place); a replay launches the graph and skips the calls, up to mrt_model_graph_end. */
static void emit_graph_begin(Emit *e, char **ptr) {
    const Graph *g = e->g;
    FILE *o = e->o;
    if (g->train) return; /* a training step runs eagerly: its optimizer arguments change every step */
    fprintf(o, "#ifdef MRT_WITH_CUDA\n    const int64_t mrt_gkey[] = {B");
    for (int k = 1; k < g->nsyms; k++) fprintf(o, ", B%d", k);
    for (int i = 0; i < g->ninputs; i++) {
        const char *p = ptr[g->inputs[i]->id];
        fprintf(o, ", %s%s%s", p ? "(int64_t)(intptr_t)(const void *)" : "", p ? p : "0", "");
    }
    for (int i = 0; i < g->noutputs; i++) {
        const char *p = ptr[view_base(g->outputs[i].node)->id];
        fprintf(o, ", %s%s", p ? "(int64_t)(intptr_t)(const void *)" : "", p ? p : "0");
    }
    fprintf(o, "};\n    int mrt_replayed = 0, mrt_again = 0;\n"
               "    if ((st = mrt_model_graph_begin(m, mrt_gkey, (int)(sizeof mrt_gkey / sizeof mrt_gkey[0]), &mrt_replayed)) != MRT_OK)\n"
               "        return st;\n    do {\n    if (!mrt_replayed) {\n#endif\n");
    e->fail = "goto mrt_graph_end"; /* a call that fails while the run is being captured */
    e->nfail = 0;
}

/* The end of the calls emit_graph_begin opened: every failing call comes here with its status,
 * which mrt_model_graph_end returns, or, when the call failed during a capture, turns into a
 * re-run without graphs (mrt_again). */
static void emit_graph_end(Emit *e) {
    FILE *o = e->o;
    if (e->g->train) return;
    fprintf(o, "#ifdef MRT_WITH_CUDA\n    }\n#endif\n");
    if (e->nfail) fprintf(o, "mrt_graph_end: MRT_UNUSED;\n"); /* the CPU build may not jump to it */
    fprintf(o, "#ifdef MRT_WITH_CUDA\n    if ((st = mrt_model_graph_end(m, st, &mrt_again)) != MRT_OK) return st;\n"
               "    } while (mrt_again);\n#else\n    if (st != MRT_OK) return st;\n#endif\n");
    e->fail = NULL;
}

/* NAME_blocked: the oneDNN primitives of the blocked kernels (layout.c), made once at load on a
 * CPU model (mrt_model_desc.blocked), after the load-time kernels computed their weights. */
static void emit_blocked_setup(Emit *e, FILE *o, int nblk) {
    const Graph *g = e->g;
    fprintf(o, "/* The blocked convolutions and poolings (modelc's layout pass): oneDNN primitives made once,\n"
               " * when the weights are loaded on the CPU (runtime/rt_blocked.c). */\n");
    fprintf(o, "static mrt_status %s_blocked(mrt_model *m) {\n    mrt_status st = MRT_OK;\n", e->pfx);
    declare_slots(e, false);
    char **ptr = declare_pointers(e, true, NULL, false);
    fprintf(o, "    if ((st = mrt_blk_create(m, %d, %s_MAX_BATCH)) != MRT_OK) return st;\n", nblk, e->PFX);
    /* --precision bf16: the blocked values stored as bf16 (precision.c), before each op is made */
    for (int i = 0; i < e->kl->n; i++) {
        const Kernel *k = e->kl->k[i];
        if (k->blk >= 0 && (k->blk_src_bf16 || k->blk_dst_bf16))
            fprintf(o, "    if ((st = mrt_blk_store_bf16(m, %d, %d, %d)) != MRT_OK) return st; /* k%d */\n", k->blk,
                    k->blk_src_bf16, k->blk_dst_bf16, k->id);
    }
    /* the ops that compute in nhwc, or read or write a value stored so (layout_nhwc) */
    for (int i = 0; i < e->kl->n; i++) {
        const Kernel *k = e->kl->k[i];
        if (k->blk >= 0 && (k->blk_nhwc || k->blk_src_nhwc || k->blk_dst_nhwc))
            fprintf(o, "    if ((st = mrt_blk_nhwc(m, %d, %d, %d, %d)) != MRT_OK) return st; /* k%d */\n", k->blk,
                    k->blk_nhwc, k->blk_src_nhwc, k->blk_dst_nhwc, k->id);
    }
    e->kpfx = "k";
    for (int i = 0; i < e->kl->n; i++) {
        const Kernel *k = e->kl->k[i];
        if (k->blk < 0) continue;
        const Node *m = k->gemm ? k->gemm : k->lib;
        char *what = xprintf("k%d %s %%%d at %s:%d:%d", k->id, op_name(m->op), m->id, g->source ? g->source : g->name,
                             m->loc.line, m->loc.col);
        if (k->gemm) {
            char *bias = xstrdup("NULL");
            if (k->blk_nbias) {
                bias = xstrdup("(const float *const[]){");
                for (int b = 0; b < k->blk_nbias; b++)
                    bias = xprintf("%s%s%s", bias, b ? ", " : "", ptr[view_base(k->leaves[k->blk_bias[b]].node)->id]);
                bias = xprintf("%s}", bias);
            }
            fprintf(o, "    if ((st = mrt_blk_add_conv(m, %d, &%s, %d, %d, %s, %s, %d, %d, %d, %s, %s, %d, \"%s\")) != MRT_OK) return st;\n",
                    k->blk, params_name(e, k), k->blk_src, k->blk_dst, ptr[view_base(m->in[1])->id], bias, k->blk_nbias,
                    k->blk_res >= 0, k->blk_act, float_lit(k->blk_lo), float_lit(k->blk_hi), k->blk_wino, c_string_body(what));
            /* a pair (layout.c) once both ops exist, before their plain weights go (mrt_blk_pair reads
             * them: the bound of each conv's result) */
            const Kernel *first = i > 0 && e->kl->k[i - 1]->blk_pair == k ? e->kl->k[i - 1] : NULL;
            if (first)
                fprintf(o, "    if ((st = mrt_blk_pair(m, %d, %d)) != MRT_OK) return st; /* k%d, k%d */\n", first->blk,
                        k->blk, first->id, k->id);
            /* the plain weights, when this conv is their only reader: the primitive holds them reordered */
            for (int r = first ? 0 : 1; r < 2 && !k->blk_pair; r++) {
                const Kernel *w = r ? k : first;
                const Node *wn = w->gemm->in[1];
                if (wn == view_base(wn) && wn->nuses == 1)
                    fprintf(o, "    if ((st = mrt_blk_release_weights(m, %d)) != MRT_OK) return st;\n", w->blk);
            }
        } else {
            fprintf(o, "    if ((st = mrt_blk_add_pool(m, %d, &%s, %d, \"%s\")) != MRT_OK) return st;\n", k->blk,
                    params_name(e, k), k->blk_dst, c_string_body(what));
        }
    }
    fprintf(o, "    return MRT_OK;\n}\n\n");
}

void emit_c_source(Emit *e, FILE *o, const char *h_include) {
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
            fprintf(o, ", int64_t B%s);\n", sym_params);
        }
    }
    fprintf(o, "#endif\n\n");
    /* The CPU functions of the elementwise parts. Kernels whose code is the same (the same
     * expression over the same loop nest: every batch-norm fold of a ResNet stage, say) share
     * one function, found by comparing the code printed without names and comments. */
    int nuniq = 0, ntab = 64;
    while (ntab < 2 * (kl->n + e->init->n + 1)) ntab *= 2;
    char **uniq_key = xalloc(sizeof(char *) * (size_t)(kl->n + e->init->n + 1));
    char **uniq_fn = xalloc(sizeof(char *) * (size_t)(kl->n + e->init->n + 1));
    int *uniq_tab = xalloc(sizeof(int) * (size_t)ntab); /* open addressing by the code's hash: u + 1, 0 empty */
    for (int li = 0; li < 2; li++) {
        const KernelList *L = li ? e->init : kl;
        e->cpu_fn[li] = xalloc(sizeof(char *) * (size_t)(L->n + 1));
        for (int i = 0; i < L->n; i++) {
            const Kernel *k = L->k[i];
            int bl, act;
            double lo, hi;
            if (!k->expr || (k->kind == K_GEMM && dw_epilogue(k, &bl, &act, &lo, &hi))) continue; /* none, or fused */
            if (!li && k->blk >= 0) continue; /* fused into oneDNN's conv on the CPU */
            char *key = NULL;
            size_t klen = 0;
            FILE *kf = open_memstream(&key, &klen);
            if (!kf) fatal("out of memory");
            emit_expr_function(kf, k, "F", false);
            emit_c_loop(kf, k, "F");
            fclose(kf);
            unsigned h = 2166136261u; /* FNV-1a */
            for (const char *c = key; *c; c++) h = (h ^ (unsigned char)*c) * 16777619u;
            h &= (unsigned)ntab - 1;
            while (uniq_tab[h] && strcmp(uniq_key[uniq_tab[h] - 1], key)) h = (h + 1) & ((unsigned)ntab - 1);
            int u = uniq_tab[h] ? uniq_tab[h] - 1 : nuniq;
            if (u < nuniq) {
                e->cpu_fn[li][k->id] = uniq_fn[u];
                free(key);
                continue;
            }
            char *fname = xprintf("%s_%s%d", e->pfx, li ? "init" : "k", k->id);
            uniq_key[nuniq] = xstrdup(key);
            uniq_fn[nuniq++] = fname;
            uniq_tab[h] = nuniq;
            free(key);
            e->cpu_fn[li][k->id] = fname;
            fprintf(o, "/* %s%d: %s -> %%%d */\n", li ? "init" : "k", k->id, k->kind == K_GEMM ? "GEMM epilogue" : "elementwise",
                    k->root->id);
            emit_expr_function(o, k, fname, true);
            emit_c_loop(o, k, fname);
            fprintf(o, "\n");
        }
    }

    /* the load-time kernels, run by mrt_model_load_weights once the params are in place */
    packed_gemms(e);
    bool has_init = e->init->n || e->nmm;
    if (has_init) {
        fprintf(o, "/* Values that depend only on the weights (folded batch norms, ...), computed once; the GEMMs\n"
                   " * against constant weights, prepared once (mrt_matmul_prepare). */\n");
        emit_params(e, e->init, "init");
        fprintf(o, "static mrt_status %s_init(mrt_model *m) {\n    MRT_UNUSED const int64_t B = 1;\n"
                   "    mrt_status st = MRT_OK;\n", e->pfx);
        for (int k = 1; k < g->nsyms; k++) fprintf(o, "    MRT_UNUSED const int64_t B%d = 1;\n", k);
        declare_slots(e, false);
        char **ptr = declare_pointers(e, true, NULL, false);
        fprintf(o, "    if (gpu0 && (st = mrt_device_activate(dev0)) != MRT_OK) return st;\n");
        emit_calls(e, e->init, 0, e->init->n, ptr, "init");
        emit_matmul_prepares(e, ptr);
        for (int s = 0; s < ns; s++)
            fprintf(o, "    if ((st = mrt_stream_sync(dev%d, stream%d, \"%s load_weights\")) != MRT_OK) return st;\n", s, s, e->pfx);
        fprintf(o, "    return MRT_OK;\n}\n\n");
    }

    if (g->train) {
        fprintf(o, "static mrt_status %s_apply(mrt_model *m, float mrt_loss, float mrt_sumsq);\n"
                   "static mrt_status %s_grad_ptrs(mrt_model *m, float **mrt_g);\n", e->pfx, e->pfx);
        fprintf(o, "static const int %s_grad_params[] = {", e->pfx);
        int k = 0;
        for (int i = 0; i < g->nparams; i++)
            if (g->grad[i]) fprintf(o, "%s%d", k++ ? ", " : "", i);
        fprintf(o, "%s};\n", k ? "" : "-1");
        if (e->ready) { /* the gradients in the order the backward pass finalizes them (kernel k<step>) */
            fprintf(o, "static const int %s_grad_ready[] = {", e->pfx);
            for (int j = 0; j < e->ready->n; j++)
                fprintf(o, "%s%d /* k%d */", j ? ", " : "", e->ready->order[j], e->ready->step[e->ready->order[j]]);
            fprintf(o, "%s};\n", e->ready->n ? "" : "-1");
        }
    }
    fprintf(o, "/* run()'s kernels, named for the profile (mrt_model_profile) */\nstatic const char *const %s_kernel_names[] = {\n", e->pfx);
    for (int i = 0; i < kl->n; i++) fprintf(o, "    \"%s\",\n", c_string_body(kernel_label(e, kl->k[i])));
    fprintf(o, "    NULL};\n");
    int nblk = 0;
    for (int i = 0; i < kl->n; i++) nblk += kl->k[i]->blk >= 0;
    if (nblk) fprintf(o, "static mrt_status %s_blocked(mrt_model *m);\n", e->pfx);
    fprintf(o, "const mrt_model_desc %s_desc = {\n    .abi = MRT_MODEL_ABI,\n    .size = sizeof(mrt_model_desc),\n"
               "    .name = \"%s\",\n    .n_slots = %d,\n    .slots = %s_slots,\n    .n_params = %d,\n"
               "    .params = %s_params,\n", e->pfx, e->pfx, ns, e->pfx, g->nparams, e->pfx);
    fprintf(o, "#ifdef MRT_WITH_CUDA\n    .cuda = 1,\n#endif\n");
    if (has_init) fprintf(o, "    .init = %s_init,\n", e->pfx);
    if (nblk) fprintf(o, "    .blocked = %s_blocked,\n", e->pfx);
    fprintf(o, "    .n_kernels = %d,\n    .kernel_names = %s_kernel_names,\n", kl->n, e->pfx);
    fprintf(o, "    .precision = %s,\n", g->bf16 ? "MRT_PRECISION_BF16" : "MRT_PRECISION_F32");
    {   /* the graph's hash: FNV-1a over its dump */
        char *txt = NULL;
        size_t len = 0;
        FILE *ms = open_memstream(&txt, &len);
        uint64_t h = 1469598103934665603ull;
        if (ms) {
            dump_graph(ms, g);
            fclose(ms);
            for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)txt[i]) * 1099511628211ull;
            free(txt);
        }
        fprintf(o, "    .graph_hash = UINT64_C(0x%016" PRIx64 "),\n", h);
    }
    if (g->train && g->dp_why) fprintf(o, "    .dp_refuse = \"%s\",\n", c_string_body(g->dp_why));
    if (g->train) fprintf(o, "    .dp_loss_sum = %d,\n", g->dp_loss_sum);
    if (g->train) {
        const struct Optimizer *op = &g->opt;
        const char *kind = op->kind == OPT_SGD ? "sgd" : op->kind == OPT_ADAM ? "adam" : "adamw";
        char *args = op->kind == OPT_SGD ? xprintf("lr=%.9g momentum=%.9g dampening=%.9g weight_decay=%.9g nesterov=%s", op->lr,
                                                   op->momentum, op->dampening, op->weight_decay, op->nesterov ? "true" : "false")
                                         : xprintf("lr=%.9g betas=[%.9g,%.9g] eps=%.9g weight_decay=%.9g", op->lr, op->beta1,
                                                   op->beta2, op->eps, op->weight_decay);
        fprintf(o, "    .optimizer = \"%s\",\n    .optimizer_args = \"%s\",\n", kind, args);
        int ng = 0;
        for (int i = 0; i < g->nparams; i++) ng += g->grad[i] != NULL;
        fprintf(o, "    .apply = %s_apply,\n    .grad_ptrs = %s_grad_ptrs,\n    .n_grads = %d,\n    .grad_params = %s_grad_params,\n",
                e->pfx, e->pfx, ng, e->pfx);
        if (e->ready) fprintf(o, "    .grad_ready = %s_grad_ready,\n", e->pfx);
        fprintf(o, "    .train = {.lr = %.17g, .clip_grad_norm = %.17g, .warmup_steps = %lld, .decay_steps = %lld, .min_lr = %.17g},\n",
                op->lr, op->clip_grad_norm, op->warmup_steps, op->decay_steps, op->min_lr);
    }
    fprintf(o, "};\n\n");

    /* the public API: thin calls into the runtime */
    fprintf(o, "mrt_status %s_create_mapped(%s **m, const char *device, const char *device_map) {\n"
               "    return mrt_model_create(m, &%s_desc, device, device_map);\n}\n", e->pfx, e->pfx, e->pfx);
    fprintf(o, "mrt_status %s_create(%s **m, const char *device) { return mrt_model_create(m, &%s_desc, device, NULL); }\n",
            e->pfx, e->pfx, e->pfx);
    fprintf(o, "mrt_status %s_load_weights(%s *m, const char *path) {\n"
               "    if (!m || m->desc != &%s_desc)\n        return mrt_set_error(MRT_ERR_INVALID_ARG, \"%s_load_weights: the "
               "model is %%s\", m ? \"not a %s model\" : \"NULL\");\n"
               "    return mrt_model_load_weights(m, path);\n}\n", e->pfx, e->pfx, e->pfx, e->pfx, e->pfx);
    fprintf(o, "void %s_destroy(%s *m) { mrt_model_destroy(m); }\n", e->pfx, e->pfx);
    fprintf(o, "mrt_device %s_device(const %s *m) { return m ? m->dev[0] : (mrt_device){MRT_DEVICE_CPU, 0}; }\n\n",
            e->pfx, e->pfx);

    /* run: a model of more than RUN_PART kernels gets its calls in parts, each a function of
     * its own that names only the values its kernels use, since C compilers take time
     * superlinear in the size of one function (5,000 GEMMs in one run(): 37 s at gcc -O2). */
    emit_params(e, kl, "k");
    if (g->nslots > 1 && !g->train) pipe_masks(e);
    int nparts = kl->n > RUN_PART ? (kl->n + RUN_PART - 1) / RUN_PART : 0;
    bool *want = nparts ? xalloc(sizeof(bool) * (size_t)(g->nnodes + 1)) : NULL;
    for (int p = 0; p < nparts; p++) {
        int from = p * RUN_PART, to = from + RUN_PART < kl->n ? from + RUN_PART : kl->n;
        memset(want, 0, sizeof(bool) * (size_t)g->nnodes);
        for (int i = from; i < to; i++) mark_kernel_values(kl->k[i], want);
        fprintf(o, "/* k%d..k%d of %s_run */\nstatic MRT_NOINLINE mrt_status %s_run_part%d(%s *m, const int64_t B%s, void *const *mrt_io) {\n"
                   "    MRT_UNUSED mrt_status st = MRT_OK;%s\n    MRT_UNUSED double mrt_pt = 0;\n", from, to - 1, e->pfx, e->pfx, p,
                e->pfx, sym_params, sym_voids);
        declare_slots(e, true);
        fprintf(o, "    if (gpu0 && (st = mrt_device_activate(dev0)) != MRT_OK) return st;\n");
        char **pp = declare_pointers(e, false, want, true);
        emit_calls(e, kl, from, to, pp, "k");
        fprintf(o, "    return MRT_OK;\n}\n\n");
    }
    if (g->train) {
        emit_opt_step(e, o);
        emit_apply(e, o);
        emit_grad_ptrs(e, o);
    }
    emit_run_proto(e, o);
    fprintf(o, " {\n");
    fprintf(o, "    if (!m || m->desc != &%s_desc)\n        return mrt_set_error(MRT_ERR_INVALID_ARG, \"%s_run: the model "
               "is %%s\", m ? \"not a %s model\" : \"NULL\");\n", e->pfx, e->pfx, e->pfx);
    fprintf(o, "    if (batch < 1 || batch > %s_MAX_BATCH)\n        return mrt_set_error(MRT_ERR_INVALID_ARG, "
               "\"%s_run: batch %%d is out of range 1..%%d%s\", batch, %s_MAX_BATCH);\n",
            e->PFX, e->pfx, g->has_batch ? " (the maximum is fixed with modelc --max-batch)" : " (the model has no batch dimension)",
            e->PFX);
    for (int k = 1; k < g->nsyms; k++) {
        char *v = sym_param(e, k), *M = xprintf("%s_MAX_%s", e->PFX, upper(c_ident(g->sym_names[k])));
        fprintf(o, "    if (%s < 1 || %s > %s)\n        return mrt_set_error(MRT_ERR_INVALID_ARG, \"%s_run: %s %%lld is out of "
                   "range 1..%%lld (the maximum is fixed with modelc --max-dim %s=N)\", (long long)%s, (long long)%s);\n",
                v, v, M, e->pfx, g->sym_names[k], g->sym_names[k], v, M);
    }
    for (int i = 0; i < g->ninputs; i++)
        fprintf(o, "    if (!%s) return mrt_set_error(MRT_ERR_INVALID_ARG, \"%s_run: input '%s' is NULL\");\n",
                c_ident(g->inputs[i]->name), e->pfx, g->inputs[i]->name);
    for (int i = 0; i < g->noutputs; i++)
        fprintf(o, "    if (!%s) return mrt_set_error(MRT_ERR_INVALID_ARG, \"%s_run: output '%s' is NULL\");\n",
                c_ident(g->outputs[i].name), e->pfx, g->outputs[i].name);
    fprintf(o, "    if (!m->weights_loaded) return mrt_set_error(MRT_ERR_INVALID_ARG, \"%s_run: weights are not loaded "
               "(call %s_load_weights first)\");\n", e->pfx, e->pfx);
    fprintf(o, "    MRT_UNUSED const int64_t B = batch;\n    MRT_UNUSED mrt_status st = MRT_OK;\n    MRT_UNUSED double mrt_pt = 0;\n");
    for (int k = 1; k < g->nsyms; k++) fprintf(o, "    MRT_UNUSED const int64_t B%d = %s;\n", k, sym_param(e, k));
    for (int i = 0; i < g->nchecks; i++) { /* what the shapes need of the sizes (a slice of seq up to 5) */
        const struct ShapeCheck *sc = &g->checks[i];
        char buf[64];
        fprintf(o, "    if (%s < %" PRId64 ")\n        return mrt_set_error(MRT_ERR_INVALID_ARG, \"%s_run: '%s' at %s:%d:%d needs "
                   "%s >= %" PRId64 ", got %%lld\", (long long)%s);\n", dim_c(sc->dim), sc->min, e->pfx, sc->op,
                g->source ? g->source : g->name, sc->loc.line, sc->loc.col, dim_str(sc->dim, g->sym_names, buf, sizeof buf),
                sc->min, dim_c(sc->dim));
    }
    declare_slots(e, true);
    fprintf(o, "    if (gpu0 && (st = mrt_device_activate(dev0)) != MRT_OK) return st;\n");
    if (!nparts) {
        char **ptr = declare_pointers(e, false, NULL, false);
        emit_graph_begin(e, ptr);
        emit_calls(e, kl, 0, kl->n, ptr, "k");
        if (g->train) emit_loss_check_and_step(e, o, ptr);
    } else {
        /* inputs staged and outputs found here, once; the parts read them from mrt_io */
        bool *io = xalloc(sizeof(bool) * (size_t)(g->nnodes + 1));
        for (int i = 0; i < g->ninputs; i++) io[g->inputs[i]->id] = true;
        for (int i = 0; i < g->noutputs; i++) io[view_base(g->outputs[i].node)->id] = true;
        if (g->train) io[view_base(g->grad_sumsq)->id] = true; /* read by the optimizer step */
        char **ptr = declare_pointers(e, false, io, false);
        fprintf(o, "    void *const mrt_io[] = {");
        for (int i = 0; i < g->ninputs; i++) fprintf(o, "%s(void *)%s", i ? ", " : "", ptr[g->inputs[i]->id] ? ptr[g->inputs[i]->id] : "NULL");
        for (int i = 0; i < g->noutputs; i++)
            fprintf(o, "%s(void *)%s", i + g->ninputs ? ", " : "", ptr[view_base(g->outputs[i].node)->id]);
        fprintf(o, "};\n");
        emit_graph_begin(e, ptr);
        for (int p = 0; p < nparts; p++)
            fprintf(o, "    if ((st = %s_run_part%d(m, B%s, mrt_io)) != MRT_OK) %s;\n", e->pfx, p, sym_args, on_fail(e));
        if (g->train) emit_loss_check_and_step(e, o, ptr);
    }
    emit_graph_end(e);
    /* outputs back to the host, then wait for every GPU */
    fprintf(o, "#ifdef MRT_WITH_CUDA\n");
    for (int i = 0; i < g->noutputs; i++) {
        const Node *b = view_base(g->outputs[i].node);
        const Storage *s = mp->of[b->id];
        fprintf(o, "    if (mrt_back%d && (st = mrt_memcpy((mrt_device){MRT_DEVICE_CPU, 0}, %s, dev%d, mrt_v%d, %s, stream%d)) != MRT_OK)\n"
                   "        return st;\n",
                b->id, c_ident(g->outputs[i].name), s->slot, b->id, bytes_c(b), s->slot);
    }
    for (int s = 0; s < ns; s++)
        fprintf(o, "    if (gpu%d && (st = mrt_model_sync(m, %d, \"%s run\")) != MRT_OK) return st;\n", s, s, e->pfx);
    fprintf(o, "#endif\n");
    fprintf(o, "    return MRT_OK;\n}\n\n");

    if (nblk) emit_blocked_setup(e, o, nblk);

    /* the generic descriptor */
    if (g->train) emit_train_api(e, o, true);
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
    fprintf(o, "static mrt_status %s_run_v(void *m, const int64_t *dims, const void *const *in, void *const *out) {\n", e->pfx);
    fprintf(o, "    (void)in;\n    if (!dims) return mrt_set_error(MRT_ERR_INVALID_ARG, \"%s_run: no sizes\");\n", e->pfx);
    fprintf(o, "    if (dims[0] > INT32_MAX) return mrt_set_error(MRT_ERR_INVALID_ARG, \"%s_run: batch %%lld is out of range\", "
               "(long long)dims[0]);\n", e->pfx);
    fprintf(o, "    return %s_run(m, (int)dims[0]", e->pfx);
    for (int k = 1; k < g->nsyms; k++) fprintf(o, ", dims[%d]", k);
    for (int i = 0; i < g->ninputs; i++) fprintf(o, ", (const %s *)in[%d]", c_type(g->inputs[i]->dtype), i);
    for (int i = 0; i < g->noutputs; i++) fprintf(o, ", (%s *)out[%d]", c_type(g->outputs[i].node->dtype), i);
    fprintf(o, ");\n}\n\n");
    fprintf(o, "static const char *const %s_sym_names[] = {", e->pfx);
    for (int k = 0; k < g->nsyms; k++) fprintf(o, "%s\"%s\"", k ? ", " : "", g->sym_names[k]);
    fprintf(o, "%s};\nstatic const int64_t %s_sym_max[] = {", g->nsyms ? "" : "NULL", e->pfx);
    for (int k = 0; k < g->nsyms; k++) fprintf(o, "%s%" PRId64, k ? ", " : "", g->sym_max[k]);
    fprintf(o, "%s};\n", g->nsyms ? "" : "1");
    if (g->train) /* the evaluation twin, NAME_eval.c (PROG train --eval); a program may leave it out */
        fprintf(o, "extern const mrt_model_info %s_eval_info __attribute__((weak));\n", e->pfx);
    fprintf(o, "const mrt_model_info %s_info = {\n    .n_syms = %d,\n    .sym_names = %s_sym_names,\n    .sym_max = %s_sym_max,\n",
            e->pfx, g->nsyms, e->pfx, e->pfx);
    if (g->train) fprintf(o, "    .eval = &%s_eval_info,\n", e->pfx);
    fprintf(o, "    .name = \"%s\",\n    .n_inputs = %d,\n    .n_outputs = %d,\n"
               "    .inputs = %s_inputs,\n    .outputs = %s_outputs,\n    .has_batch = %d,\n    .max_batch = %d,\n"
               "    .weight_bytes = %s_WEIGHT_BYTES,\n    .arena_bytes = %zu,\n    .create = %s_create_v,\n"
               "    .load_weights = %s_load_v,\n    .run = %s_run_v,\n    .destroy = %s_destroy_v,\n    .device = %s_device_v,\n"
               "    .batch_chunkable = %d,\n    .arena_bytes_cuda = %zu,\n    .desc = &%s_desc,\n    .train = %d,\n};\n",
            g->name, g->ninputs, g->noutputs, e->pfx, e->pfx, g->has_batch ? 1 : 0, g->has_batch ? g->max_batch : 1,
            e->PFX, arena_total(e->mp, g->nslots), e->pfx, e->pfx, e->pfx, e->pfx, e->pfx, graph_batch_separable(g) ? 1 : 0,
            arena_total(e->mpc, g->nslots), e->pfx, g->train ? 1 : 0);
}

void emit_c_main(Emit *e, FILE *o, const char *h_include) {
    fprintf(o, "/* main.c — generated by modelc: the command-line driver for model '%s'. */\n", e->g->name);
    fprintf(o, "#include \"modelrt.h\"\n#include \"%s\"\n\n", h_include);
    fprintf(o, "int main(int argc, char **argv) { return mrt_main(&%s_info, argc, argv); }\n", e->pfx);
}

const char *emit_prefix(const Emit *e) { return e->pfx; }

/* The model's C name: its own name, unless that would clash with main(), the runtime's mrt_
 * names or a name the C headers the generated code includes declare (math.h's functions with
 * their f and l forms and its macros, stdio.h, stdlib.h, string.h; then NAME_model). */
char *model_ident(const char *name) {
    static const char *const taken[] = {
        "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t", "uint64_t", "intptr_t", "uintptr_t", "size_t", "ssize_t", "ptrdiff_t", "intmax_t", "uintmax_t", "bool", "true", "false", "va_list", 
        "BUFSIZ", "EOF", "FILE", "HUGE_VAL", "HUGE_VALF", "HUGE_VALL", "INFINITY", "NAN", "NULL", "abort", "abs",
        "acos", "acosf", "acosh", "acoshf", "acoshl", "acosl", "asin", "asinf", "asinh", "asinhf", "asinhl",
        "asinl", "assert", "atan", "atan2", "atan2f", "atan2l", "atanf", "atanh", "atanhf", "atanhl", "atanl",
        "atexit", "atof", "atoi", "atol", "bsearch", "calloc", "cblas", "cbrt", "cbrtf", "cbrtl", "ceil", "ceilf",
        "ceill", "clearerr", "copysign", "copysignf", "copysignl", "cos", "cosf", "cosh", "coshf", "coshl", "cosl",
        "div", "erf", "erfc", "erfcf", "erfcl", "erff", "erfl", "errno", "exit", "exp", "exp2", "exp2f", "exp2l",
        "expf", "expl", "expm1", "expm1f", "expm1l", "fabs", "fabsf", "fabsl", "fclose", "fdim", "fdimf", "fdiml",
        "feof", "ferror", "fflush", "fgets", "fileno", "floor", "floorf", "floorl", "fma", "fmaf", "fmal", "fmax",
        "fmaxf", "fmaxl", "fmin", "fminf", "fminl", "fmod", "fmodf", "fmodl", "fopen", "fpclassify", "fprintf",
        "fputs", "fread", "free", "frexp", "frexpf", "frexpl", "fscanf", "fseek", "ftell", "fwrite", "getc",
        "getchar", "getenv", "hypot", "hypotf", "hypotl", "ilogb", "ilogbf", "ilogbl", "isfinite", "isgreater",
        "isgreaterequal", "isinf", "isless", "islessequal", "islessgreater", "isnan", "isnormal", "isunordered",
        "labs", "ldexp", "ldexpf", "ldexpl", "ldiv", "lgamma", "lgammaf", "lgammal", "llabs", "llrint", "llrintf",
        "llrintl", "llround", "llroundf", "llroundl", "log", "log10", "log10f", "log10l", "log1p", "log1pf",
        "log1pl", "log2", "log2f", "log2l", "logb", "logbf", "logbl", "logf", "logl", "lrint", "lrintf", "lrintl",
        "lround", "lroundf", "lroundl", "main", "malloc", "memchr", "memcmp", "memcpy", "memmove", "memset",
        "modf", "modff", "modfl", "mrt", "nan", "nanf", "nanl", "nearbyint", "nearbyintf", "nearbyintl",
        "nextafter", "nextafterf", "nextafterl", "nexttoward", "nexttowardf", "nexttowardl", "perror", "pow",
        "powf", "powl", "printf", "putc", "putchar", "puts", "qsort", "rand", "realloc", "remainder", "remainderf",
        "remainderl", "remove", "remquo", "remquof", "remquol", "rename", "rewind", "rint", "rintf", "rintl",
        "round", "roundf", "roundl", "scalbln", "scalblnf", "scalblnl", "scalbn", "scalbnf", "scalbnl", "scanf",
        "setbuf", "setvbuf", "signbit", "sin", "sinf", "sinh", "sinhf", "sinhl", "sinl", "snprintf", "sprintf",
        "sqrt", "sqrtf", "sqrtl", "srand", "sscanf", "stderr", "stdin", "stdout", "strcat", "strchr", "strcmp",
        "strcpy", "strdup", "strerror", "strlen", "strncat", "strncmp", "strncpy", "strndup", "strrchr", "strstr",
        "strtod", "strtof", "strtok", "strtol", "strtoll", "strtoul", "strtoull", "system", "tan", "tanf", "tanh",
        "tanhf", "tanhl", "tanl", "tgamma", "tgammaf", "tgammal", "tmpfile", "trunc", "truncf", "truncl", "ungetc",
        "vfprintf", "vprintf", "vsnprintf", NULL};
    char *s = c_ident(name);
    for (int i = 0; taken[i]; i++)
        if (!strcmp(s, taken[i])) return xprintf("%s_model", s);
    if (!strncmp(s, "mrt_", 4) || !strncmp(s, "cblas_", 6) || !strncmp(s, "cuda", 4)) return xprintf("%s_model", s);
    return s;
}

Emit *emit_begin(const Graph *g, const KernelList *kl, const KernelList *init, const MemPlan *mp, const MemPlan *mpc) {
    Emit *e = xalloc(sizeof(Emit));
    *e = (Emit){.g = g, .kl = kl, .init = init, .mp = mp, .mpc = mpc};
    e->pfx = model_ident(g->name);
    e->PFX = upper(e->pfx);
    /* the symbols after the batch travel with B to every kernel as B1, B2, ... */
    sym_params = sym_args = sym_voids = "";
    for (int k = 1; k < g->nsyms; k++) {
        sym_params = xprintf("%s, int64_t B%d", sym_params, k);
        sym_args = xprintf("%s, B%d", sym_args, k);
        sym_voids = xprintf("%s (void)B%d;", sym_voids, k);
    }
    if (mp->nst != mpc->nst) ICE("the CPU and CUDA plans differ in storages (%d vs %d)", mp->nst, mpc->nst);
    if (g->train && g->nslots == 1) {
        const MemPlan *plans[2] = {mp, mpc};
        e->ready = plan_grad_ready(g, kl, plans, 2);
    }
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
    return e;
}
