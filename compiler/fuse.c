/*
 * fuse.c — grouping the graph into kernels.
 *
 * The algorithm is the classic "fuse injective ops into their consumer" rule of TVM's operator
 * fusion (Chen et al., "TVM", OSDI 2018, section 4.1) and XLA's loop fusion, kept deliberately
 * simple:
 *
 *  1. Inlining. An elementwise node (unary, binary, permute) is inlined into its consumer when
 *     it has exactly one use, is not a graph output, its consumer is elementwise too, and it has
 *     as many elements as the consumer (we never recompute a broadcast value per output element).
 *     Every elementwise node that is not inlined is the root of one kernel: an expression tree
 *     over "leaves", the materialized tensors it reads. Each node of the tree computes in its
 *     own dtype (a comparison of floats gives a bool that a where reads), so dtypes do not
 *     stop fusion.
 *  2. Index maps. The kernel iterates over its root's shape. Each leaf is read through a map
 *     from its dimensions to iteration dimensions (map[d] = -1: broadcast). Maps are composed
 *     down the tree: broadcasting aligns shapes at the right and drops size-1 dims; permute
 *     permutes. A leaf may appear several times with different maps (x + transpose(x)).
 *  3. Epilogues. A matmul whose only use is inside an elementwise tree, read with the identity
 *     map, becomes that kernel's GEMM: the GEMM writes the root's buffer and the tree runs over
 *     it in place as an epilogue (bias add, activation, residual add).
 *  4. Reductions (softmax, sum, ...) are kernels of their own; two reductions are never fused
 *     into one kernel (field case B03: each keeps its own axis and range).
 *
 * Before grouping, every graph output whose value is not produced by a kernel of its own (an
 * input, a param, a constant, a view of one, or a value already returned by another output)
 * gets an explicit copy, so each output owns its bytes and can be written straight into the
 * caller's buffer; then an inference build's attention chains (matmul, scale, mask, softmax,
 * matmul) become single attention nodes (fuse_attention, with its own essay below).
 */
#include "modelc.h"
#include "modelrt.h" /* MRT_CUDA_CONV_DIRECT_TAPS: the CUDA conv2d's paths */

#include <float.h>
#include <math.h>
#include <string.h>

#define MAX_FUSED 64 /* nodes in one fused elementwise expression */

/* A copy of x, on x's device slot (so it never reads another device's memory). */
static Node *mk_copy(Graph *g, Node *x, Loc loc) {
    Node *n = new_node_for(g, OP_PERMUTE, x);
    n->loc = loc;
    n->in[0] = x;
    n->nin = 1;
    n->dtype = x->dtype;
    n->shape = x->shape;
    for (int i = 0; i < x->shape.rank; i++) n->perm[i] = i;
    return n;
}

static void materialize_outputs(Graph *g) {
    for (int i = 0; i < g->noutputs; i++) {
        GraphOutput *o = &g->outputs[i];
        Node *base = view_base(o->node);
        bool need = base->op == OP_INPUT || base->op == OP_PARAM || base->op == OP_CONST || base->init;
        for (int j = 0; j < i && !need; j++) need = view_base(g->outputs[j].node) == base;
        if (need) {
            Node *cp = mk_copy(g, o->node, o->loc);
            cp->name = o->name;
            o->node = cp;
        }
    }
    analyze_uses(g);
}

typedef struct Fuser {
    Graph *g;
    FuseOptions opt;
    Node **consumer; /* consumer[id]: the single consumer of a node with nuses == 1 */
    bool *inl;       /* inl[id]: computed inside its consumer's kernel */
    Kernel *cur;
    int capleaves;
} Fuser;

static bool same_numel(const Node *a, const Node *b) {
    return dim_eq(shape_numel(&a->shape), shape_numel(&b->shape));
}

/* How a node is read from the kernel's iteration space (see LeafRef). */
typedef struct IMap {
    int map[MAX_RANK];
    int64_t start[MAX_RANK], step[MAX_RANK];
} IMap;

static bool same_read(const LeafRef *l, const Node *n, const IMap *m) {
    if (l->node != n) return false;
    for (int d = 0; d < n->shape.rank; d++)
        if (l->map[d] != m->map[d] || l->start[d] != m->start[d] || l->step[d] != m->step[d]) return false;
    return true;
}

static int add_leaf(Fuser *f, Node *n, const IMap *map) {
    Kernel *k = f->cur;
    for (int i = 0; i < k->nleaves; i++)
        if (same_read(&k->leaves[i], n, map)) return i;
    if (k->nleaves == f->capleaves) {
        int cap = f->capleaves ? 2 * f->capleaves : 8;
        k->leaves = xrealloc_array(k->leaves, f->capleaves, cap, sizeof(LeafRef));
        f->capleaves = cap;
    }
    LeafRef *l = &k->leaves[k->nleaves];
    memset(l, 0, sizeof *l);
    l->node = n;
    memcpy(l->map, map->map, sizeof l->map);
    memcpy(l->start, map->start, sizeof l->start);
    memcpy(l->step, map->step, sizeof l->step);
    return k->nleaves++;
}

/* Map of child `x` (an operand of elementwise node `p` read through pm): broadcasting aligns
 * at the right and pins size-1 dims to index 0; permute permutes; slice scales and shifts its
 * axis (index start + step * i). */
static void child_map(const Node *p, const IMap *pm, const Node *x, IMap *xm) {
    if (p->op == OP_PERMUTE) {
        for (int i = 0; i < p->shape.rank; i++) {
            xm->map[p->perm[i]] = pm->map[i];
            xm->start[p->perm[i]] = pm->start[i];
            xm->step[p->perm[i]] = pm->step[i];
        }
        return;
    }
    if (p->op == OP_SLICE) {
        *xm = *pm;
        int a = p->axis;
        xm->start[a] = p->start + p->step * pm->start[a];
        xm->step[a] = p->step * pm->step[a];
        return;
    }
    int off = p->shape.rank - x->shape.rank;
    for (int i = 0; i < x->shape.rank; i++) {
        Dim dx = x->shape.d[i], dp = p->shape.d[i + off];
        if (dim_is_one(dx) && !dim_eq(dx, dp)) {
            xm->map[i] = -1;
            xm->start[i] = 0;
            xm->step[i] = 0;
        } else {
            xm->map[i] = pm->map[i + off];
            xm->start[i] = pm->start[i + off];
            xm->step[i] = pm->step[i + off];
        }
    }
}

static void add_member(Kernel *k, Node *n) {
    k->members = xgrow_array(k->members, k->nmembers, &k->capmembers, sizeof(Node *));
    k->members[k->nmembers++] = n;
}

static Expr *build_expr(Fuser *f, Node *n, const IMap *map, bool is_root) {
    Expr *e = xalloc(sizeof(Expr));
    e->dt = n->dtype;
    if (n->op == OP_CONST) {
        e->kind = EX_CONST;
        e->value = n->value;
        return e;
    }
    if (!is_root && !f->inl[n->id]) {
        e->kind = EX_LEAF;
        e->leaf = add_leaf(f, n, map);
        return e;
    }
    e->kind = EX_OP;
    e->op = n->op;
    e->node = n;
    IMap cm;
    child_map(n, map, n->in[0], &cm);
    e->a = build_expr(f, n->in[0], &cm, false);
    if (n->nin > 1) {
        child_map(n, map, n->in[1], &cm);
        e->b = build_expr(f, n->in[1], &cm, false);
    }
    if (n->nin > 2) {
        child_map(n, map, n->in[2], &cm);
        e->c = build_expr(f, n->in[2], &cm, false);
    }
    add_member(f->cur, n);
    return e;
}

static bool map_is_identity(const LeafRef *l, const Node *root) {
    if (l->node->shape.rank != root->shape.rank) return false;
    for (int i = 0; i < root->shape.rank; i++)
        if (l->map[i] != i || l->start[i] != 0 || l->step[i] != 1 || !dim_eq(l->node->shape.d[i], root->shape.d[i]))
            return false;
    return true;
}

/* im2col buffer of a convolution: [C/groups * KH * KW, OH * OW] floats; none for a 1x1,
 * stride-1, unpadded convolution, which reads its input directly. */
bool conv_is_depthwise(const Node *n) {
    if (n->op != OP_CONV2D || n->groups <= 1 || n->dtype != DT_F32) return false;
    int64_t C = n->in[0]->shape.d[1].c, O = n->shape.d[1].c;
    return n->groups == C && O % C == 0;
}

/* The CPU's im2col buffer (none for a 1x1 conv that reads its input directly, nor for a
 * depthwise one, mrt_conv2d_dw). */
static size_t conv_scratch(const Node *n) {
    const Node *w = n->in[1];
    bool direct = n->kernel[0] == 1 && n->kernel[1] == 1 && n->stride[0] == 1 && n->stride[1] == 1 && !n->pad[0] &&
                  !n->pad[1] && !n->pad[2] && !n->pad[3];
    if (direct || conv_is_depthwise(n)) return 0;
    return (size_t)w->shape.d[1].c * n->kernel[0] * n->kernel[1] * n->shape.d[2].c * n->shape.d[3].c * sizeof(float);
}

/* The CUDA plan's im2col buffer, where it differs: mrt_cuda_conv2d_f32 unfolds all groups of an
 * image at once for one GEMM batched over the groups, [C * KH * KW, OH * OW] floats, groups times
 * conv_scratch. A grouped conv with at most MRT_CUDA_CONV_DIRECT_TAPS taps per output (depthwise)
 * is one direct launch that reads no col, and keeps the CPU's size. 0: as conv_scratch. (A
 * depthwise conv needs none on the CPU, but one with more taps still unfolds on CUDA.) */
static size_t conv_scratch_cuda(const Node *n) {
    int64_t taps = n->in[1]->shape.d[1].c * n->kernel[0] * n->kernel[1];
    size_t cpu = (size_t)taps * n->shape.d[2].c * n->shape.d[3].c * sizeof(float);
    bool direct = n->kernel[0] == 1 && n->kernel[1] == 1 && n->stride[0] == 1 && n->stride[1] == 1 && !n->pad[0] &&
                  !n->pad[1] && !n->pad[2] && !n->pad[3];
    if (direct || n->groups <= 1 || taps <= MRT_CUDA_CONV_DIRECT_TAPS) return 0;
    return cpu * (size_t)n->groups;
}

/* conv_transpose2d's GEMM result col [O/g*KH*KW, H*W] (none for the direct path of
 * mrt_conv_transpose2d_f32, at most MRT_CONVT_DIRECT_CG = 2 input channels per group). */
static size_t conv_transpose_scratch(const Node *n) {
    const Node *x = n->in[0], *w = n->in[1];
    if (x->shape.d[1].c / n->groups <= 2) return 0;
    return (size_t)w->shape.d[1].c * n->kernel[0] * n->kernel[1] * x->shape.d[2].c * x->shape.d[3].c * sizeof(float);
}

/* conv2d_weight_grad's im2col of the conv's input: [C/groups * KH * KW, OH * OW] floats (OH, OW
 * the adjoint's), none where the conv reads its input directly (as conv_scratch). */
static size_t conv_wgrad_scratch(const Node *n) {
    const Node *g = n->in[0];
    bool direct = n->kernel[0] == 1 && n->kernel[1] == 1 && n->stride[0] == 1 && n->stride[1] == 1 && !n->pad[0] &&
                  !n->pad[1] && !n->pad[2] && !n->pad[3];
    if (direct) return 0;
    return (size_t)n->shape.d[1].c * n->kernel[0] * n->kernel[1] * g->shape.d[2].c * g->shape.d[3].c * sizeof(float);
}

/* The CUDA plan's for conv2d_weight_grad: mrt_cuda_conv2d_wgrad_f32 unfolds all groups of an
 * image at once (no direct path), groups times conv_wgrad_scratch; 0: as conv_wgrad_scratch. */
static size_t conv_wgrad_scratch_cuda(const Node *n) {
    size_t cpu = conv_wgrad_scratch(n);
    return cpu && n->groups > 1 ? cpu * (size_t)n->groups : 0;
}

static Kernel *new_kernel(KernelList *kl, KernelKind kind, Node *root) {
    Kernel *k = xalloc(sizeof(Kernel));
    k->kind = kind;
    k->root = root;
    k->gemm_leaf = -1;
    k->blk = k->blk_res = -1;
    k->blk_pair = NULL;
    k->id = kl->n;
    kl->k = xgrow_array(kl->k, kl->n, &kl->cap, sizeof(Kernel *));
    kl->k[kl->n++] = k;
    return k;
}

/* ---------------------------------------------------------------- attention
 *
 * scaled_dot_product_attention is checked into five nodes (check.c, lower_sdpa): matmul(q, k^T),
 * mul by the scale, add the mask, softmax (causal, zero_masked_rows), matmul(p, v). Fused as
 * usual they make three kernels that write the [..., L, S] scores and probabilities through
 * memory: a GEMM with its epilogue, the softmax, a GEMM. fuse_attention makes them one node,
 * OP_ATTENTION, whose kernel (mrt_attention_f32) takes a block of query rows at a time with its
 * scores in cache: FlashAttention's idea (Dao et al., 2022) without its online rescaling, so each
 * probability is the unfused softmax's formula. The same chain written by hand (an imported
 * model's MatMul, Mul, Add, Softmax, MatMul) is found too, with softmax's own semantics.
 *
 * The chain is taken where each intermediate has that one reader, is not an output, runs on the
 * root's device slot and is not computed at load time; never in a training build (the backward
 * reads the probabilities), and not with --no-fuse-attention. The scale is any number (up to
 * ATTN_MAX_SCALES) of multiplies by a scalar f32 constant and divisions by one (not by 0 or a
 * non-finite one), on the scores before the mask, or on q or k before the product (under or
 * above a folded permute); none: 1. Their product (in double) is the kernel's scale, rounded to
 * float once: one multiply of the scores is the unfused chain's scale step; scores / c becomes
 * scores * (1 / c), and (q * c1) @ k or scores * c1 * c2 one multiply, which differ from the
 * unfused float operations by rounding, a few ulps of a score (numeric attn_scale_forms compares
 * them with NumPy within its tolerance), and where an intermediate product of the unfused chain
 * would overflow or underflow (a factor that takes the float product to inf, 0 or a subnormal, when
 * each factor is finite and not 0, is not folded: attn_scalar). A constant on q or k must be finite and not 0 (q * 0 would give
 * 0 where an overflowing q . k times 0 gives NaN). A constant divided by the scores, or a scale
 * after the mask, is no such chain and stays unfused. The mask is an add of an f32 tensor that
 * broadcasts into the scores without widening them. A permute that is the only reader of q, k or v, or the only reader of the
 * result, and keeps axis 0 in place, is folded into how the kernel reads or writes that tensor
 * (Node.attn_perm), so the heads' [B, T, H, D] <-> [B, H, T, D] copies go too; a transposed
 * operand of either matmul (trans_b, or not for k) is such a permutation as well.
 */

enum { ATTN_MAX_SCALES = 8 }; /* scalar multiplies and divisions folded into one chain's scale */

/* x is computed only for the chain ending at root: fused away with it. */
static bool attn_inner(const Node *x, const Node *root) {
    return !x->dead && x->nuses == 1 && !x->is_output && x->slot == root->slot && !x->init && x->dtype == DT_F32;
}

static bool same_shape(const Shape *a, const Shape *b) {
    if (a->rank != b->rank) return false;
    for (int d = 0; d < a->rank; d++)
        if (!dim_eq(a->d[d], b->d[d])) return false;
    return true;
}

/* The tensor the kernel reads for operand x of the chain ending at root, with perm (logical dim
 * i of x is dim perm[i] of the tensor read) composed with a folded permute. */
static Node *attn_read(Node *x, const Node *root, signed char *perm) {
    if (x->op != OP_PERMUTE || !attn_inner(x, root) || x->perm[0] != 0 || x->in[0]->op == OP_CONST) return x;
    for (int i = 0; i < x->shape.rank; i++) perm[i] = (signed char)x->perm[perm[i]];
    x->dead = true;
    return x->in[0];
}

/* x = a * c, c * a or a / c, c a scalar f32 constant (finite and not 0 for a division, or for
 * q or k: operand), x computed only for the chain ending at root and of a's shape: returns a,
 * with *scale multiplied by c (or 1 / c, in double); else NULL. The kernel multiplies q . k by the product rounded to float once: a
 * division, or several multiplies, can differ from the unfused chain's float operations by a
 * few ulps of the score (the essay above). */
static Node *attn_scalar(Node *x, const Node *root, double *scale, bool operand) {
    if ((x->op != OP_MUL && x->op != OP_DIV) || !attn_inner(x, root)) return NULL;
    for (int j = 0; j < 2; j++) {
        Node *a = x->in[j], *c = x->in[1 - j];
        if (x->op == OP_DIV && j == 1) break; /* c / a is not a scale */
        if (c->op != OP_CONST || c->shape.rank != 0 || c->dtype != DT_F32 || !same_shape(&a->shape, &x->shape) ||
            a->dtype != DT_F32)
            continue;
        if ((x->op == OP_DIV || operand) && (c->value == 0.0 || !isfinite(c->value))) return NULL;
        const double next = x->op == OP_DIV ? *scale / c->value : *scale * c->value;
        /* factors that are each finite and not 0 but whose product, rounded to the kernel's
         * float, overflows, underflows to 0 or is subnormal: the unfused steps stay finite and
         * not 0 (q * 1e-30 and k * 1e-30 would become a scale of 0, and NaN where an
         * overflowing q . k meets it); this factor and those above it stay unfused */
        const float nf = (float)next;
        if (isfinite(c->value) && c->value != 0.0 && isfinite(*scale) && *scale != 0.0 &&
            (!isfinite(nf) || fabsf(nf) < FLT_MIN))
            return NULL;
        *scale = next;
        return a;
    }
    return NULL;
}

static void attn_identity(signed char *perm, int rank, bool swap_last) {
    for (int i = 0; i < MAX_RANK; i++) perm[i] = (signed char)i;
    if (swap_last && rank >= 2) perm[rank - 2] = (signed char)(rank - 1), perm[rank - 1] = (signed char)(rank - 2);
}

/* Rewrite every attention chain into an OP_ATTENTION node (the essay above). The root (the
 * second matmul, or the permute that reads it) becomes that node in place, so its readers keep
 * reading it; the other nodes of the chain die. Returns how many. */
static int fuse_attention(Graph *g) {
    Node **cons = xalloc(sizeof(Node *) * (size_t)(g->nnodes + 1));
    for (int i = 0; i < g->nnodes; i++)
        for (int j = 0; j < g->nodes[i]->nin; j++) cons[g->nodes[i]->in[j]->id] = g->nodes[i];
    int made = 0;
    for (int i = 0; i < g->nnodes; i++) {
        Node *pv = g->nodes[i];
        if (pv->dead || pv->op != OP_MATMUL || pv->dtype != DT_F32 || pv->init) continue;
        Node *p = pv->in[0];
        if (p->op != OP_SOFTMAX || p->axis != p->shape.rank - 1 || !attn_inner(p, pv)) continue;
        Node *s = p->in[0], *mask = NULL, *add = NULL;
        double scale = 1.0;
        for (int j = 0; j < 2 && s->op == OP_ADD && attn_inner(s, pv) && !add; j++) {
            Node *a = s->in[j], *b = s->in[1 - j];
            if ((a->op == OP_MUL || a->op == OP_DIV || a->op == OP_MATMUL) && same_shape(&a->shape, &s->shape) &&
                b->dtype == DT_F32 &&
                b->op != OP_CONST && b->shape.rank <= s->shape.rank)
                add = s, mask = b, s = a;
        }
        Node *muls[ATTN_MAX_SCALES];
        int nmul = 0;
        for (Node *a; nmul < ATTN_MAX_SCALES && (a = attn_scalar(s, pv, &scale, false)); s = a) muls[nmul++] = s;
        Node *qk = s;
        if (qk->op != OP_MATMUL || !attn_inner(qk, pv)) continue;
        int r = pv->shape.rank;
        bool ok = qk->shape.rank == r && r >= 2 && r <= MAX_RANK;
        for (int d = 0; ok && d < r - 1; d++) ok = dim_eq(qk->shape.d[d], pv->shape.d[d]); /* the batch and L */
        if (!ok) continue;
        /* the result's reader: a permute keeping axis 0, then the node the kernel writes */
        Node *root = pv, *c = cons[pv->id];
        signed char operm[MAX_RANK];
        attn_identity(operm, r, false);
        if (c && c->op == OP_PERMUTE && !c->dead && pv->nuses == 1 && !pv->is_output && c->slot == pv->slot &&
            c->init == pv->init && c->perm[0] == 0) {
            for (int d = 0; d < r; d++) operm[c->perm[d]] = (signed char)d;
            root = c;
            pv->dead = true;
        }
        signed char perm[3][MAX_RANK];
        attn_identity(perm[0], qk->in[0]->shape.rank, false);
        attn_identity(perm[1], qk->in[1]->shape.rank, !qk->trans_b);
        attn_identity(perm[2], pv->in[1]->shape.rank, pv->trans_b);
        /* q and k: a scalar scale under and above a folded permute goes into the kernel's */
        Node *qk_in[2];
        for (int j = 0; j < 2; j++) {
            Node *x = qk->in[j], *a;
            for (; nmul < ATTN_MAX_SCALES && (a = attn_scalar(x, pv, &scale, true)); x = a) muls[nmul++] = x;
            x = attn_read(x, pv, perm[j]);
            for (; nmul < ATTN_MAX_SCALES && (a = attn_scalar(x, pv, &scale, true)); x = a) muls[nmul++] = x;
            qk_in[j] = x;
        }
        Node *q = qk_in[0], *k = qk_in[1], *v = attn_read(pv->in[1], pv, perm[2]);
        qk->dead = p->dead = true;
        for (int j = 0; j < nmul; j++) muls[j]->dead = true;
        if (add) add->dead = true;
        Loc loc = pv->loc; /* the call the profile and messages name */
        root->op = OP_ATTENTION;
        root->loc = loc;
        root->in[0] = q;
        root->in[1] = k;
        root->in[2] = v;
        root->nin = 3;
        if (mask) root->in[root->nin++] = mask;
        root->fattr[0] = scale;
        root->causal = p->causal;
        root->zero_masked_rows = p->zero_masked_rows;
        memcpy(root->attn_perm[0], perm[0], MAX_RANK);
        memcpy(root->attn_perm[1], perm[1], MAX_RANK);
        memcpy(root->attn_perm[2], perm[2], MAX_RANK);
        memcpy(root->attn_perm[3], operm, MAX_RANK);
        made++;
    }
    return made;
}

static KernelList build_kernels(Fuser *f, bool init);

KernelList fuse_graph(Graph *g, FuseOptions opt, KernelList *init) {
    materialize_outputs(g);
    if (opt.attention && !g->train && fuse_attention(g)) analyze_uses(g);
    Fuser F = {.g = g, .opt = opt}, *f = &F;
    f->consumer = xalloc(sizeof(Node *) * g->nnodes);
    f->inl = xalloc(sizeof(bool) * g->nnodes);
    for (int i = 0; i < g->nnodes; i++) {
        Node *n = g->nodes[i];
        if (n->dead) continue;
        for (int j = 0; j < n->nin; j++) f->consumer[n->in[j]->id] = n;
    }
    /* tree[i]: nodes in i's expression tree so far; a tree stops growing at MAX_FUSED nodes, which
     * bounds the compile time, the generated function and the registers a kernel needs.
     * leaves[i]: the tensors i's tree reads (at most; a tensor read twice counts twice). A tree
     * goes into its consumer c only with at most (MAX_OPERANDS - 1) / c->nin of them, so that no
     * kernel reads more than MAX_OPERANDS - 1 tensors (a sum of 65 gradients did, in GPT-2's
     * training step). */
    int *tree = xalloc(sizeof(int) * (g->nnodes + 1)), *leaves = xalloc(sizeof(int) * (g->nnodes + 1));
    for (int i = 0; i < g->nnodes; i++) {
        Node *n = g->nodes[i], *c = f->consumer[i];
        tree[i] = 1;
        for (int j = 0; j < n->nin; j++) {
            bool in = f->inl[n->in[j]->id];
            tree[i] += in ? tree[n->in[j]->id] : 0;
            leaves[i] += in ? leaves[n->in[j]->id] : 1;
        }
        f->inl[i] = opt.elementwise && !n->dead && op_is_elementwise(n->op) && n->nuses == 1 && !n->is_output &&
                    c && op_is_elementwise(c->op) && same_numel(n, c) && n->init == c->init &&
                    n->slot == c->slot && tree[i] < MAX_FUSED && leaves[i] <= (MAX_OPERANDS - 1) / c->nin;
    }
    *init = build_kernels(f, true);
    return build_kernels(f, false);
}

static KernelList build_kernels(Fuser *f, bool init) {
    Graph *g = f->g;
    FuseOptions opt = f->opt;
    Kernel **tree_of = xalloc(sizeof(Kernel *) * g->nnodes);
    KernelList kl = {0};
    for (int i = 0; i < g->nnodes; i++) {
        Node *n = g->nodes[i];
        if (n->dead || f->inl[i] || n->init != init) continue;
        if (op_is_elementwise(n->op)) {
            Kernel tmp = {0};
            f->cur = &tmp;
            f->capleaves = 0;
            IMap map;
            for (int d = 0; d < MAX_RANK; d++) {
                map.map[d] = d;
                map.start[d] = 0;
                map.step[d] = 1;
            }
            tmp.expr = build_expr(f, n, &map, true);
            tmp.gemm_leaf = -1;
            /* Epilogue: a single-use matmul read with the identity map; or a conv2d read through
             * one single-use view of it (conv1d's [N, O, 1, L] as [N, O, L]: the same elements in
             * the same order, and the GEMM writes the root's buffer either way). Not a matmul: its
             * cuBLASLt epilogue adds the bias along the GEMM's columns, which a view may move.
             * A kernel that may fault reports from its own loop, so it takes no GEMM. */
            for (int l = 0; opt.epilogue && !expr_may_fault(tmp.expr) && l < tmp.nleaves; l++) {
                Node *m = tmp.leaves[l].node;
                if (m->op == OP_RESHAPE && m->in[0]->op == OP_CONV2D && m->nuses == 1 && !m->is_output &&
                    m->init == n->init && m->slot == n->slot)
                    m = m->in[0];
                /* the GEMM writes its f32 result into the root's buffer, which the epilogue then
                 * overwrites in place: a root of another element size (a comparison's bool, an
                 * f16 cast) would be overrun */
                if (op_info[m->op].cat != CAT_GEMM || dtype_size(m->dtype) != dtype_size(n->dtype) || m->nuses != 1 ||
                    m->is_output ||
                    m->init != n->init || m->slot != n->slot || !map_is_identity(&tmp.leaves[l], n))
                    continue;
                tmp.gemm_leaf = l;
                tmp.gemm = m;
                break;
            }
            Kernel *k;
            if (tmp.gemm) {
                /* The GEMM runs where its consumer's kernel runs: remove any kernel made for it. */
                Kernel *old = tree_of[tmp.gemm->id];
                if (old) {
                    for (int j = old->id; j + 1 < kl.n; j++) {
                        kl.k[j] = kl.k[j + 1];
                        kl.k[j]->id = j;
                    }
                    kl.n--;
                }
                k = new_kernel(&kl, K_GEMM, n);
                k->gemm = tmp.gemm;
                if (k->gemm->op == OP_CONV2D) {
                    k->scratch_bytes = conv_scratch(k->gemm);
                    k->scratch_bytes_cuda = conv_scratch_cuda(k->gemm);
                }
                add_member(k, tmp.gemm);
            } else {
                k = new_kernel(&kl, K_ELEMENTWISE, n);
            }
            k->expr = tmp.expr;
            k->leaves = tmp.leaves;
            k->nleaves = tmp.nleaves;
            k->gemm_leaf = tmp.gemm_leaf;
            for (int j = 0; j < tmp.nmembers; j++) add_member(k, tmp.members[j]);
            tree_of[n->id] = k;
        } else if (op_info[n->op].cat == CAT_GEMM) {
            Kernel *k = new_kernel(&kl, K_GEMM, n);
            k->gemm = n;
            if (n->op == OP_CONV2D) {
                k->scratch_bytes = conv_scratch(n);
                k->scratch_bytes_cuda = conv_scratch_cuda(n);
            }
            add_member(k, n);
            tree_of[n->id] = k;
        } else if (op_is_library(n->op)) {
            Kernel *k = new_kernel(&kl, K_LIBRARY, n);
            k->lib = n;
            if (n->op == OP_CONV_TRANSPOSE2D) k->scratch_bytes = conv_transpose_scratch(n);
            if (n->op == OP_CONV2D_WGRAD) {
                k->scratch_bytes = conv_wgrad_scratch(n);
                k->scratch_bytes_cuda = conv_wgrad_scratch_cuda(n);
            }
            add_member(k, n);
            tree_of[n->id] = k;
        } else if (op_info[n->op].cat != CAT_LEAF && op_info[n->op].cat != CAT_VIEW) {
            /* inputs, params, constants and reshape views need no kernel; anything else does */
            ICE("op '%s' (%%%d) has no kernel: ops.def gives it category '%s'", op_name(n->op), n->id, op_category_name(op_info[n->op].cat));
        }
    }
    return kl;
}

/* ---------------------------------------------------------------- dump */

static void print_leaf(FILE *out, const LeafRef *l, const Node *root) {
    fprintf(out, "%%%d", l->node->id);
    if (map_is_identity(l, root)) return;
    fprintf(out, "[");
    for (int d = 0; d < l->node->shape.rank; d++) {
        if (d) fprintf(out, ",");
        if (l->map[d] < 0) {
            if (l->start[d]) fprintf(out, "%lld", (long long)l->start[d]);
            else fprintf(out, "_");
            continue;
        }
        if (l->start[d]) fprintf(out, "%lld+", (long long)l->start[d]);
        if (l->step[d] != 1) fprintf(out, "%lld*", (long long)l->step[d]);
        fprintf(out, "i%d", l->map[d]);
    }
    fprintf(out, "]");
}

static void print_kexpr(FILE *out, const Kernel *k, const Expr *e) {
    if (e->kind == EX_CONST) {
        fprintf(out, "%.9g", e->value);
        return;
    }
    if (e->kind == EX_LEAF) {
        if (e->leaf == k->gemm_leaf) fprintf(out, "gemm");
        else print_leaf(out, &k->leaves[e->leaf], k->root);
        return;
    }
    if (e->op == OP_PERMUTE || e->op == OP_SLICE) {
        /* the permutation is already folded into the leaves' maps */
        print_kexpr(out, k, e->a);
        return;
    }
    fprintf(out, "%s(", op_name(e->op));
    print_kexpr(out, k, e->a);
    if (e->b) {
        fprintf(out, ", ");
        print_kexpr(out, k, e->b);
    }
    if (e->c) {
        fprintf(out, ", ");
        print_kexpr(out, k, e->c);
    }
    fprintf(out, ")");
}

static void dump_kernels(FILE *out, const Graph *g, const KernelList *kl, const char *pfx);

/* An attention kernel's attributes: the scale, causal, zero_masked_rows, and each tensor read or
 * written through a permutation (q, k, v: logical dim i is dim P[i] of the operand; out: logical
 * dim i is dim P[i] of the result). */
static void print_attention(FILE *out, const Node *r) {
    fprintf(out, " {scale=%.9g%s%s", (double)(float)r->fattr[0], r->causal ? ", causal" : "", r->zero_masked_rows ? ", zero_masked_rows" : "");
    static const char *const names[4] = {"q", "k", "v", "out"};
    for (int j = 0; j < 4; j++) {
        int rank = j < 3 ? r->in[j]->shape.rank : r->shape.rank;
        bool id = true;
        for (int d = 0; d < rank; d++) id = id && r->attn_perm[j][d] == d;
        if (id) continue;
        fprintf(out, ", %s=[", names[j]);
        for (int d = 0; d < rank; d++) fprintf(out, "%s%d", d ? "," : "", r->attn_perm[j][d]);
        fprintf(out, "]");
    }
    fprintf(out, "}");
}

void dump_fused(FILE *out, const Graph *g, const KernelList *kl, const KernelList *init) {
    fprintf(out, "fused %s: %d kernel%s\n", g->name, kl->n, kl->n == 1 ? "" : "s");
    dump_kernels(out, g, kl, "k");
    if (init && init->n) {
        fprintf(out, "  at load time: %d kernel%s\n", init->n, init->n == 1 ? "" : "s");
        dump_kernels(out, g, init, "init");
    }
    for (int i = 0; i < g->noutputs; i++)
        fprintf(out, "  output %s = %%%d\n", g->outputs[i].name, g->outputs[i].node->id);
    dump_layout(out, g, kl);
    dump_precision(out, g, kl);
}

static void dump_kernels(FILE *out, const Graph *g, const KernelList *kl, const char *pfx) {
    char buf[256];
    for (int i = 0; i < kl->n; i++) {
        const Kernel *k = kl->k[i];
        fprintf(out, "  %s%d ", pfx, k->id);
        switch (k->kind) {
        case K_ELEMENTWISE:
            fprintf(out, "elementwise ");
            print_kexpr(out, k, k->expr);
            break;
        case K_GEMM: {
            const Node *m = k->gemm;
            if (m->op == OP_CONV2D)
                fprintf(out, "conv2d %%%d, %%%d", m->in[0]->id, m->in[1]->id);
            else
                fprintf(out, "gemm %%%d @ %%%d%s", m->in[0]->id, m->in[1]->id, m->trans_b ? "^T" : "");
            if (k->expr) {
                fprintf(out, " epilogue ");
                print_kexpr(out, k, k->expr);
            }
            break;
        }
        case K_LIBRARY: {
            const Node *r = k->lib;
            fprintf(out, "%s", op_name(r->op));
            for (int j = 0; j < r->nin; j++) fprintf(out, "%s%%%d", j ? ", " : " ", r->in[j]->id);
            if (op_is_reduction(r->op) || r->op == OP_CONCAT)
                fprintf(out, " {axis=%d%s%s}", r->axis, r->keepdim ? ", keepdim" : "", r->causal ? ", causal" : "");
            if (r->op == OP_IOTA) fprintf(out, " {start=%.17g, step=%.17g}", r->fattr[0], r->fattr[1]);
            if (r->op == OP_ATTENTION) print_attention(out, r);
            if (r->op == OP_DROPOUT) fprintf(out, " {p=%g, site=%lld}", r->fattr[0], (long long)r->start);
            if (r->op == OP_GATHER || r->op == OP_SCATTER_ADD)
                fprintf(out, " {axis=%d, %s}", r->axis, r->gather_mode == GATHER_ONE_HOT ? "one_hot" : r->gather_mode == GATHER_INDEX_SELECT ? "index_select" : "gather");
            break;
        }
        }
        fprintf(out, " -> %%%d : %s%s  ; nodes", k->root->id, dtype_name(k->root->dtype),
                shape_str(&k->root->shape, g->sym_names, buf, sizeof buf));
        for (int j = 0; j < k->nmembers; j++) fprintf(out, " %%%d", k->members[j]->id);
        fprintf(out, "\n");
    }
}
