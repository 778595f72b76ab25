/*
 * layout.c — the CPU's blocked activation layout (issue 12): which convolutions, max poolings
 * and elementwise kernels keep their values in oneDNN's blocked layout (nChw16c, or nChw8c on a
 * CPU without AVX-512, chosen when the model loads) instead of NCHW. Runs after fuse_graph, on
 * inference graphs with one device slot; the emitter then calls runtime/rt_blocked.c's oneDNN
 * primitives for the marked kernels on the CPU (the CUDA path is unchanged: a GPU runs the same
 * kernels on NCHW, the fused epilogue included).
 *
 * Why: oneDNN's convolution in a blocked layout (brgconv:avx512_core) is about twice as fast as
 * im2col + GEMM on every ResNet-18 convolution, while on NCHW it is no faster
 * (bench/conv/RESULTS.md). OpenVINO (nChw16c) and ONNX Runtime (NCHWc, its "NchwcTransformer")
 * keep activations blocked across the convolutional part of a graph and convert at its edges;
 * so does this pass.
 *
 * What keeps the rest of the compiler unchanged: a blocked value of shape [N, C, H, W] with C a
 * multiple of 16 has exactly N*C*H*W elements in either layout, so the memory plan's sizes hold,
 * and an elementwise kernel whose operands all have the root's shape (no broadcast, no view)
 * computes the same thing in either layout as long as all of them share it. A value with C > 16
 * not a multiple of 16 (MobileNetV2's 24, EfficientNet's 40) is blocked too, but only between
 * plain convs (groups 1; no pool, grouped conv or elementwise kernel touches it): oneDNN pads it
 * to whole blocks (24 -> 32 channels, padding zero), and plan.c sizes its arena block by
 * blk_padded_channels. Measured (1-thread task-clock, bench case builds): MobileNetV2 b1 about
 * 10% less CPU time than with those values on NCHW, EfficientNet-B0 b1 about 30%.
 *
 * Candidates (a kernel that may write a blocked value):
 *   - a conv2d kernel: f32, O a multiple of 16 or padded as above, groups that oneDNN has a JIT
 *     kernel for in this layout (groups_ok: 1; depthwise, one channel in and out per group, as
 *     MobileNet's and EfficientNet's 3x3 and 5x5 ones, jit_dw; or groups of whole 16-channel
 *     blocks; a channel multiplier or a few channels per group has only oneDNN's reference
 *     kernel and stays NCHW), the weight a param or a load-time value (reordered once at load),
 *     and an epilogue of the form act(conv + b1[c] + ... + r) with per-channel vectors b (params
 *     or load-time values: summed into the primitive's bias at load), at most one same-shape
 *     operand r (oneDNN's `sum` post-op; it must be blocked too) and act none, relu, clamp, silu
 *     or hardswish (an eltwise post-op: oneDNN's swish with alpha 1 is silu). Its source may be
 *     blocked or NCHW (the region's entry: C <= 4, the image, read directly; C >= 16 reordered
 *     first; 4 < C < 16 stays on the im2col path, as oneDNN has only its reference kernel for a
 *     3x3 conv of it); its result is NCHW when a consumer needs NCHW (computed blocked, then
 *     reordered once); a conv that would read and write NCHW both is left to the im2col path
 *     unless it is a Winograd shape (wino_shape: 3x3, stride 1, 14x14 outputs or more);
 *   - a max_pool2d kernel whose source is blocked (oneDNN's pooling), C a multiple of 16;
 *   - an elementwise kernel whose non-scalar operands all have the root's shape and are all
 *     blocked (a residual add the fuser did not fold into a conv), C a multiple of 16.
 * Everything else reads NCHW: other ops, views (flatten, reshape), graph outputs. The decision
 * is a fixpoint: a candidate is dropped (it runs its NCHW kernel) when an operand it needs
 * blocked is not; a value that some consumer reads as NCHW makes its conv or pool write NCHW,
 * and makes an elementwise producer drop out. Both only ever turn "blocked" off, so it ends.
 *
 * Pairs (Kernel.blk_pair; f32 builds): two adjacent blocked convs, the second reading only the
 * first's result, no residual. Expand + depthwise pairs first (pair_dw: a 1x1 conv, then a 3x3
 * depthwise one of stride 1 or 2 and padding 1; MobileNetV2 has 16), which the runtime may run
 * as one oneDNN primitive; then other pairs with a relu or clamp (pair_chain). The runtime skips
 * their relu/clamp passes where a check of the first conv's source proves that no NaN can reach
 * the post-ops that replace them (runtime/rt_blocked.c, mrt_blk_pair).
 *
 * nhwc (layout_nhwc, after this pass; --no-nhwc turns it off). oneDNN 2.6 has two kernels for a
 * direct conv here: jit:avx512_core in nChw16c and brgconv:avx512_core in nhwc, the latter
 * 10-25% faster on ResNet's 14x14 and 7x7 convs (the non-Winograd ones: layer4's 3x3 convs, the
 * stride-2 ones), while Winograd exists in nChw16c only and the C = 3 image has no JIT kernel
 * with an nhwc result. So a blocked value is stored in one of two layouts: nhwc where a spatial,
 * non-Winograd conv with at most 14x14 outputs computes (nhwc_prefers), nChw16c elsewhere. Both
 * hold exactly N*C*H*W floats for C a multiple of 16 (nhwc is only used so), so the plan and the
 * layout-agnostic kernels (elementwise, blk_clamp) need nothing new. A 1x1 conv computes in nhwc
 * when its source is nhwc or its result is the residual of an nhwc conv (ResNet's downsample),
 * a max pooling and an elementwise kernel in their operands' layout; a conv whose source is in
 * the other layout reorders it first (a few microseconds at these sizes). Operands that must
 * share the primitive's layout (a conv's residual, an elementwise kernel's) turn nhwc off where
 * they disagree, again a fixpoint that only turns it off. Measured: ResNet-18 b1 11% less CPU
 * time at one thread, the imported ResNet-50 4%; MobileNetV2 has no such conv and is unchanged.
 */
#include "modelc.h"

#include <string.h>

static bool dim_fixed(Dim d) {
    for (int k = 0; k < MAX_SYMS; k++)
        if (d.e[k]) return false;
    return true;
}

/* [N, C, H, W] f32 with C a constant multiple of 16. */
static bool blockable(const Node *n) {
    return n->dtype == DT_F32 && n->shape.rank == 4 && dim_fixed(n->shape.d[1]) && n->shape.d[1].c % 16 == 0 &&
           n->shape.d[1].c > 0;
}

/* [N, C, H, W] f32 with C a constant over 16 that is not a multiple of 16 (MobileNetV2's 24,
 * EfficientNet's 40): blocked only between plain (groups 1) convs, padded to whole blocks. */
static bool blockable_padded(const Node *n) {
    return n->dtype == DT_F32 && n->shape.rank == 4 && dim_fixed(n->shape.d[1]) && n->shape.d[1].c > 16 &&
           n->shape.d[1].c % 16;
}

int64_t blk_padded_channels(const Kernel *k) {
    const Node *r = k->root;
    if (k->blk < 0 || !k->blk_dst || r->shape.rank != 4 || !dim_fixed(r->shape.d[1])) return 0;
    return r->shape.d[1].c % 16 ? (r->shape.d[1].c + 15) / 16 * 16 : 0;
}

int64_t blk_item_bytes(const Node *n) {
    int64_t b = (int64_t)dtype_size(n->dtype);
    for (int d = 1; d < n->shape.rank; d++) {
        if (!dim_fixed(n->shape.d[d])) return 0;
        b *= n->shape.d[d].c;
    }
    return b;
}

/* A value computed once at load or read from the weights: the primitive may take it at load. */
static bool load_time(const Node *n) {
    n = view_base(n);
    return (n->op == OP_PARAM && !n->state) || n->init;
}

/* Leaf l of k reads its node with the kernel's own index (same shape as the root, no view). */
static bool leaf_identity(const Kernel *k, const LeafRef *l) {
    const Node *n = l->node, *r = k->root;
    if (n != view_base(n) || n->shape.rank != r->shape.rank) return false;
    for (int d = 0; d < n->shape.rank; d++)
        if (!dim_eq(n->shape.d[d], r->shape.d[d]) || l->map[d] != d || l->start[d] || l->step[d] != 1) return false;
    return true;
}

/* Leaf l is a per-channel vector: one value per channel (iteration dim 1), f32, from 0. */
static bool leaf_channel(const Kernel *k, const LeafRef *l) {
    int along = 0;
    for (int d = 0; d < l->node->shape.rank; d++) {
        if (l->map[d] < 0) {
            if (l->start[d]) return false;
        } else if (l->map[d] == 1 && !l->start[d] && l->step[d] == 1 && dim_eq(l->node->shape.d[d], k->root->shape.d[1])) {
            along++;
        } else {
            return false;
        }
    }
    return along == 1 && l->node->dtype == DT_F32;
}

/* Leaf l is one value broadcast everywhere. */
static bool leaf_scalar(const LeafRef *l) {
    for (int d = 0; d < l->node->shape.rank; d++)
        if (l->map[d] >= 0) return false;
    return true;
}

/* The terms of a sum tree x of f32 adds: each leaf's role in k->blk_* (bias or residual).
 * False when x holds anything else. */
static bool conv_terms(Kernel *k, const Expr *x, int *ngemm) {
    if (x->kind == EX_OP && x->op == OP_ADD && x->dt == DT_F32)
        return conv_terms(k, x->a, ngemm) && conv_terms(k, x->b, ngemm);
    if (x->kind != EX_LEAF) return false;
    const LeafRef *l = &k->leaves[x->leaf];
    if (x->leaf == k->gemm_leaf) return ++*ngemm == 1 && leaf_identity(k, l);
    if (leaf_channel(k, l) && load_time(l->node)) {
        if (k->blk_nbias == (int)(sizeof k->blk_bias / sizeof k->blk_bias[0])) return false;
        k->blk_bias[k->blk_nbias++] = x->leaf;
        return true;
    }
    if (leaf_identity(k, l) && l->node->dtype == DT_F32 && k->blk_res < 0) {
        k->blk_res = x->leaf;
        return true;
    }
    return false;
}

/* The groups of conv m that oneDNN computes blocked with a JIT kernel: 1; depthwise with one
 * output per group (C = O = groups: jit_dw, weights Goihw16g); or groups of whole blocks (C/G and
 * O/G multiples of 16: jit:avx512_core per group). Anything else, a depthwise conv with a channel
 * multiplier included (O = k*C), gets oneDNN's reference kernel (ref:any, orders of magnitude
 * slower) and stays on the NCHW path (mrt_conv2d_dw, or im2col per group). */
static bool groups_ok(const Node *m) {
    if (m->groups == 1) return true;
    int64_t c = m->in[0]->shape.d[1].c, o = m->shape.d[1].c, g = m->groups;
    if (g < 1 || c % g || o % g) return false;
    return (c == g && o == g) || ((c / g) % 16 == 0 && (o / g) % 16 == 0);
}

/* A conv2d kernel the blocked primitive can compute, its epilogue included: fills k->blk_*. */
/* Every side's padding under the kernel's extent ((k - 1) * dilation + 1): oneDNN's JIT kernels
 * take no more (a 3x3 conv with padding 3 ran on ref:any, 38x slower than im2col). The bottom and
 * right sides as the runtime passes them: what gives exactly the output's size. */
static bool pads_ok(const Node *m) {
    for (int a = 0; a < 2; a++) {
        int ext = (m->kernel[a] - 1) * m->dilation[a] + 1;
        int64_t hi = m->pad[2 + a];
        Dim in = m->in[0]->shape.d[2 + a], out = m->shape.d[2 + a];
        if (dim_fixed(in) && dim_fixed(out)) hi = (out.c - 1) * m->stride[a] + ext - in.c - m->pad[a];
        if (m->pad[a] >= ext || hi >= ext) return false;
    }
    return true;
}

static bool conv_candidate(Kernel *k) {
    const Node *m = k->gemm, *r = k->root;
    if (k->kind != K_GEMM || !m || m->op != OP_CONV2D || m->dtype != DT_F32 || !dim_fixed(m->in[0]->shape.d[1]) ||
        m->in[0]->dtype != DT_F32 || m->in[1]->dtype != DT_F32 || !load_time(m->in[1]) || !groups_ok(m) || !pads_ok(m))
        return false;
    /* a padded value only between plain convs (no grouped conv, pool or elementwise kernel) */
    bool pad = m->groups == 1;
    if (!(blockable(m) || (pad && blockable_padded(m))) || !(blockable(r) || (pad && blockable_padded(r)))) return false;
    for (int d = 0; d < 4; d++)
        if (!dim_eq(r->shape.d[d], m->shape.d[d])) return false;
    k->blk_res = -1, k->blk_nbias = 0, k->blk_act = 0;
    if (!k->expr) return r == m;
    const Expr *x = k->expr;
    if (x->kind == EX_OP && x->dt == DT_F32 &&
        (x->op == OP_RELU || x->op == OP_CLAMP || x->op == OP_SILU || x->op == OP_HARDSWISH)) {
        k->blk_act = x->op == OP_RELU ? 1 : x->op == OP_CLAMP ? 2 : x->op == OP_SILU ? 3 : 4;
        if (x->op == OP_CLAMP) k->blk_lo = x->node->fattr[0], k->blk_hi = x->node->fattr[1];
        x = x->a;
    }
    int ngemm = 0;
    return conv_terms(k, x, &ngemm) && ngemm == 1;
}

static bool pool_candidate(const Kernel *k) {
    const Node *r = k->lib;
    /* undilated only: oneDNN 2.6 has only its reference kernel for a dilated max pooling */
    return k->kind == K_LIBRARY && r && r->op == OP_MAXPOOL2D && blockable(r) && r->in[0] == view_base(r->in[0]) &&
           r->dilation[0] == 1 && r->dilation[1] == 1;
}

static bool ew_candidate(const Kernel *k) {
    if (k->kind != K_ELEMENTWISE || !blockable(k->root)) return false;
    int n = 0;
    for (int j = 0; j < k->nleaves; j++) {
        if (leaf_scalar(&k->leaves[j])) continue;
        if (!leaf_identity(k, &k->leaves[j]) || k->leaves[j].node->dtype != DT_F32) return false;
        n++;
    }
    return n > 0;
}

enum { C_NONE, C_CONV, C_POOL, C_EW };

static bool pair_dw(const Kernel *k, const Kernel *d);
static bool pair_chain(const Kernel *k, const Kernel *d);

/* A conv2d that runs with oneDNN's Winograd: 3x3, stride 1, undilated, not grouped (the shape it takes), with
 * an output of 14x14 positions or more. Its transformed weights are 4x the plain ones (6x6 tiles
 * of a 3x3 kernel); at 7x7 (ResNet's last stage, most of its weights) it gained about 10% and
 * held 130 MB more (ResNet-18 b1). */
static bool wino_shape(const Node *m) {
    return m->groups == 1 && m->kernel[0] == 3 && m->kernel[1] == 3 && m->stride[0] == 1 && m->stride[1] == 1 && m->dilation[0] == 1 &&
           m->dilation[1] == 1 && dim_fixed(m->shape.d[2]) && dim_fixed(m->shape.d[3]) &&
           m->shape.d[2].c * m->shape.d[3].c >= 14 * 14;
}

void layout_blocked(Graph *g, KernelList *kl, bool winograd) {
    for (int i = 0; i < kl->n; i++) kl->k[i]->blk = -1, kl->k[i]->blk_pair = NULL;
    if (g->train || g->with_loss || g->nslots != 1) return;
    int nn = g->nnodes;
    int *cls = xalloc(sizeof(int) * (size_t)(kl->n + 1));
    bool *blk = xalloc(sizeof(bool) * (size_t)(nn + 1)), *plain = xalloc(sizeof(bool) * (size_t)(nn + 1));
    int ncand = 0;
    for (int i = 0; i < kl->n; i++) {
        Kernel *k = kl->k[i];
        cls[i] = conv_candidate(k) ? C_CONV : pool_candidate(k) ? C_POOL : ew_candidate(k) ? C_EW : C_NONE;
        k->blk_src = k->blk_dst = cls[i] != C_NONE;
        ncand += cls[i] == C_CONV;
    }
    if (!ncand) return;
    for (bool changed = true; changed;) {
        changed = false;
        memset(blk, 0, sizeof(bool) * (size_t)nn);
        for (int i = 0; i < kl->n; i++)
            if (cls[i] != C_NONE && kl->k[i]->blk_dst) blk[kl->k[i]->root->id] = true;
        for (int i = 0; i < g->noutputs; i++) plain[view_base(g->outputs[i].node)->id] = true;
        for (int i = 0; i < kl->n; i++) {
            Kernel *k = kl->k[i];
            const Node *anchor = k->gemm ? k->gemm : k->lib;
            bool drop = false;
            if (cls[i] == C_CONV) {
                const Node *x = anchor->in[0];
                if (x != view_base(x)) plain[view_base(x)->id] = true;
                k->blk_src = x == view_base(x) && blk[x->id];
                /* An NCHW source is read directly only as a region's image-like entry (C <= 4:
                 * oneDNN's first-conv kernels); C >= 16 is reordered in first (padded to whole
                 * blocks where C % 16 != 0). Read directly, or reordered with 4 < C < 16, a 3x3
                 * conv gets oneDNN's reference kernel (ref:any, 50x slower: MobileNetV2's 24- and
                 * 40-channel convs took 300 ms read directly). And a conv that would both read and
                 * write NCHW (an island between grouped convs that stay NCHW, say) gains nothing
                 * from the layout but two reorders, unless oneDNN's Winograd takes it. */
                int64_t cin = x->shape.d[1].c;
                if (!k->blk_src && cin > 4 && cin < 16) drop = true;
                if (!k->blk_src && !k->blk_dst && !(winograd && wino_shape(anchor))) drop = true;
                if (k->blk_res >= 0 && !blk[k->leaves[k->blk_res].node->id]) drop = true;
                for (int b = 0; b < k->blk_nbias; b++) plain[view_base(k->leaves[k->blk_bias[b]].node)->id] = true;
            } else if (cls[i] == C_POOL) {
                if (!blk[anchor->in[0]->id]) drop = true;
            } else if (cls[i] == C_EW) {
                for (int j = 0; j < k->nleaves; j++) {
                    const LeafRef *l = &k->leaves[j];
                    if (leaf_scalar(l)) plain[view_base(l->node)->id] = true;
                    else if (!blk[l->node->id]) drop = true;
                }
            }
            if (drop) cls[i] = C_NONE, changed = true;
            if (cls[i] != C_NONE) continue;
            /* an NCHW kernel reads every operand as NCHW */
            for (int j = 0; anchor && j < anchor->nin; j++) plain[view_base(anchor->in[j])->id] = true;
            for (int j = 0; j < k->nleaves; j++)
                if (j != k->gemm_leaf) plain[view_base(k->leaves[j].node)->id] = true;
        }
        for (int i = 0; i < kl->n; i++) {
            Kernel *k = kl->k[i];
            if (cls[i] == C_NONE || !k->blk_dst || !plain[k->root->id]) continue;
            changed = true;
            if (cls[i] == C_EW) cls[i] = C_NONE; /* it cannot write NCHW from blocked operands */
            else k->blk_dst = false;             /* a conv or pool reorders its result to NCHW */
        }
    }
    int idx = 0;
    for (int i = 0; i < kl->n; i++) {
        Kernel *k = kl->k[i];
        k->blk_ew = cls[i] == C_EW;
        if (cls[i] != C_CONV && cls[i] != C_POOL) continue;
        k->blk = idx++;
        if (cls[i] == C_POOL) k->blk_src = true;
        if (cls[i] == C_CONV) {
            const Node *m = k->gemm;
            k->blk_wino = winograd && wino_shape(m);
        }
        k->blk_pair = NULL, k->blk_pair_dw = false;
        if (cls[i] == C_CONV && k->scratch_bytes) { /* no im2col on the CPU; the CUDA plan keeps its own */
            if (!k->scratch_bytes_cuda) k->scratch_bytes_cuda = k->scratch_bytes;
            k->scratch_bytes = 0;
        }
    }
    /* expand + depthwise pairs (pair_dw) first, then other pairs of convs among the rest
     * (pair_chain); f32 only (--precision bf16 keeps its two primitives and their passes) */
    bool *paired = xalloc(sizeof(bool) * (size_t)(kl->n + 1));
    for (int pass = 0; pass < 2 && !g->bf16; pass++)
        for (int i = 0; i + 1 < kl->n; i++) {
            Kernel *k = kl->k[i], *d = kl->k[i + 1];
            if (paired[i] || paired[i + 1] || !(pass ? pair_chain(k, d) : pair_dw(k, d))) continue;
            k->blk_pair = d, k->blk_pair_dw = !pass;
            paired[i] = paired[i + 1] = true;
        }
}

/* Kernel k (blocked conv, result blocked) and d, the next kernel, a blocked conv that alone
 * reads k's result (nuses 1), neither adding a residual, one of them with a relu or clamp: a
 * check of k's source can bound both results at run time (rt_blocked.c, blk_pair_bounded), and
 * then oneDNN's relu/clip post-ops give what blk_clamp's separate passes give (MobileNetV2's
 * stem conv and its first depthwise conv; its last 1x1 project conv and the 1x1 conv to 1280
 * channels after it). */
static bool pair_chain(const Kernel *k, const Kernel *d) {
    const Node *a = k->gemm, *m = d->gemm;
    if (k->blk < 0 || d->blk < 0 || !a || !m || a->op != OP_CONV2D || m->op != OP_CONV2D) return false;
    if (!k->blk_dst || !d->blk_src || k->blk_res >= 0 || d->blk_res >= 0) return false;
    if (m->in[0] != k->root || k->root->nuses != 1) return false;
    return k->blk_act == 1 || k->blk_act == 2 || d->blk_act == 1 || d->blk_act == 2;
}

/* Kernel k (blocked conv) is a 1x1 conv (stride 1, no padding, groups 1) and d, the next
 * kernel, a blocked 3x3 depthwise conv (C = O = groups, stride 1 or 2 both ways, padding 1 on
 * every side, undilated) that reads k's result, which nothing else reads (nuses 1: not a graph
 * output either); neither adds a residual; both blocked in and out. Such a pair is MobileNetV2's
 * (and EfficientNet's and MobileNetV3's 3x3) expand conv and depthwise conv: oneDNN's jit 1x1
 * kernel computes both in one primitive (its depthwise post-op), and a relu / clamp between
 * them need not run as a separate pass where the runtime proves no NaN can reach it
 * (rt_blocked.c, mrt_blk_pair). The pair must be adjacent: the fused primitive writes d's result
 * when k runs, so no kernel may run in between (one whose buffer the plan shares with it). */
static bool pair_dw(const Kernel *k, const Kernel *d) {
    const Node *a = k->gemm, *m = d->gemm;
    if (k->blk < 0 || d->blk < 0 || !a || !m || a->op != OP_CONV2D || m->op != OP_CONV2D) return false;
    if (!k->blk_src || !k->blk_dst || !d->blk_src || !d->blk_dst || k->blk_res >= 0 || d->blk_res >= 0) return false;
    if (a->groups != 1 || a->kernel[0] != 1 || a->kernel[1] != 1 || a->stride[0] != 1 || a->stride[1] != 1)
        return false;
    for (int j = 0; j < 4; j++)
        if (a->pad[j] || m->pad[j] != 1) return false;
    if (m->in[0] != k->root || k->root->nuses != 1 || !conv_is_depthwise(m) || m->shape.d[1].c != m->groups)
        return false;
    return m->kernel[0] == 3 && m->kernel[1] == 3 && m->stride[0] == m->stride[1] &&
           (m->stride[0] == 1 || m->stride[0] == 2) && m->dilation[0] == 1 && m->dilation[1] == 1;
}

/* --dump=fused: the layout of each blocked kernel ("blocked" is nChw16c, "nhwc" nhwc). */
void dump_layout(FILE *out, const Graph *g, const KernelList *kl) {
    (void)g;
    for (int i = 0; i < kl->n; i++) {
        const Kernel *k = kl->k[i];
        if (k->blk < 0 && !k->blk_ew) continue;
        const char *src = !k->blk_src ? "nchw" : k->blk_src_nhwc ? "nhwc" : "blocked";
        const char *dst = !k->blk_dst ? "nchw (reordered)" : k->blk_dst_nhwc ? "nhwc" : "blocked";
        if (k->blk_ew) {
            fprintf(out, "  blocked k%d: elementwise -> %%%d %s\n", k->id, k->root->id, k->blk_nhwc ? "nhwc" : "blocked");
            continue;
        }
        static const char *acts[] = {"", ", relu", ", clamp", ", silu", ", hardswish"};
        if (k->gemm)
            fprintf(out, "  blocked k%d: conv2d #%d%s, src %s, dst %s, bias %d%s%s%s%s\n", k->id, k->blk,
                    k->blk_nhwc ? " in nhwc" : "", src, dst, k->blk_nbias, k->blk_res >= 0 ? ", sum" : "",
                    acts[k->blk_act], k->blk_wino ? ", winograd" : "",
                    k->blk_pair ? xprintf(", pair with k%d%s", k->blk_pair->id, k->blk_pair_dw ? " (depthwise)" : "") : "");
        else
            fprintf(out, "  blocked k%d: max_pool2d #%d%s, src %s, dst %s\n", k->id, k->blk, k->blk_nhwc ? " in nhwc" : "",
                    src, dst);
    }
}

/* Conv kernel k may compute in nhwc: groups 1, C and O multiples of 16 (no padded channels: an
 * nhwc value then holds exactly N*C*H*W floats, as an nChw16c one does), a blocked source or an
 * NCHW one that is reordered in (C >= 16), and not Winograd (oneDNN 2.6 has it in nChw16c only). */
static bool nhwc_ok(const Kernel *k) {
    const Node *m = k->gemm;
    return m->groups == 1 && !k->blk_wino && m->in[0]->shape.d[1].c % 16 == 0 && m->shape.d[1].c % 16 == 0;
}

/* A conv that gains from nhwc by itself: a spatial kernel (not 1x1) with at most 14x14 outputs,
 * where oneDNN's brgconv:avx512_core (nhwc) beat its jit:avx512_core (nChw16c) by 10-25% on
 * ResNet's last stages (bench/conv/RESULTS.md, "nhwc"); at 28x28 and more it gained less than the reorders
 * between the layouts cost. */
static bool nhwc_prefers(const Kernel *k) {
    const Node *m = k->gemm;
    return nhwc_ok(k) && m->kernel[0] * m->kernel[1] > 1 && dim_fixed(m->shape.d[2]) && dim_fixed(m->shape.d[3]) &&
           m->shape.d[2].c * m->shape.d[3].c <= 14 * 14;
}

void layout_nhwc(Graph *g, KernelList *kl) {
    int nn = g->nnodes, n = kl->n;
    int *prod = xalloc(sizeof(int) * (size_t)(nn + 1));
    bool *allowed = xalloc(sizeof(bool) * (size_t)(n + 1)), *fmt = xalloc(sizeof(bool) * (size_t)(n + 1)),
         *res_pref = xalloc(sizeof(bool) * (size_t)(n + 1));
    for (int v = 0; v < nn; v++) prod[v] = -1;
    for (int i = 0; i < n; i++) {
        Kernel *k = kl->k[i];
        k->blk_nhwc = k->blk_src_nhwc = k->blk_dst_nhwc = false;
        allowed[i] = true;
        if ((k->blk >= 0 && k->blk_dst) || k->blk_ew) prod[k->root->id] = i;
    }
    /* allowed[i] only ever turns false, so the loop ends */
    for (bool changed = true; changed;) {
        changed = false;
        /* a 1x1 conv whose result is the residual of an nhwc conv computes in nhwc too (ResNet's
         * downsample: else the sum post-op's operand would be in the other layout) */
        memset(res_pref, 0, sizeof(bool) * (size_t)n);
        for (int i = 0; i < n; i++) {
            const Kernel *k = kl->k[i];
            if (k->blk >= 0 && k->gemm && k->blk_res >= 0 && allowed[i] && nhwc_prefers(k)) {
                int p = prod[k->leaves[k->blk_res].node->id];
                if (p >= 0) res_pref[p] = true;
            }
        }
        for (int i = 0; i < n; i++) {
            Kernel *k = kl->k[i];
            fmt[i] = false;
            if (k->blk >= 0 && k->gemm) {
                const Node *m = k->gemm;
                int ps = k->blk_src ? prod[m->in[0]->id] : -1;
                if (!allowed[i] || !nhwc_ok(k)) continue;
                if (m->kernel[0] * m->kernel[1] > 1) fmt[i] = nhwc_prefers(k);
                else fmt[i] = (ps >= 0 && fmt[ps]) || res_pref[i]; /* a 1x1 conv follows its source */
                if (k->blk_res >= 0) { /* the residual is stored as the primitive computes */
                    int p = prod[k->leaves[k->blk_res].node->id];
                    if (p >= 0 && fmt[p] != fmt[i]) {
                        allowed[fmt[i] ? i : p] = false;
                        changed = true;
                        fmt[i] = false;
                    }
                }
            } else if (k->blk >= 0) { /* a max pooling computes in its source's layout */
                int ps = prod[k->lib->in[0]->id];
                fmt[i] = allowed[i] && ps >= 0 && fmt[ps];
                if (ps >= 0 && fmt[ps] && !fmt[i]) allowed[ps] = false, changed = true;
            } else if (k->blk_ew) { /* an elementwise kernel: all its operands in one layout */
                int nh = 0, nb = 0;
                for (int j = 0; j < k->nleaves; j++) {
                    int p = leaf_scalar(&k->leaves[j]) ? -1 : prod[k->leaves[j].node->id];
                    if (p >= 0) fmt[p] ? nh++ : nb++;
                }
                fmt[i] = allowed[i] && nh > 0 && nb == 0;
                if (nh && !fmt[i]) {
                    for (int j = 0; j < k->nleaves; j++) {
                        int p = leaf_scalar(&k->leaves[j]) ? -1 : prod[k->leaves[j].node->id];
                        if (p >= 0 && fmt[p]) allowed[p] = false;
                    }
                    changed = true;
                }
            }
        }
    }
    for (int i = 0; i < n; i++) {
        Kernel *k = kl->k[i];
        if (k->blk < 0 && !k->blk_ew) continue;
        k->blk_nhwc = fmt[i];
        k->blk_dst_nhwc = fmt[i] && (k->blk_dst || k->blk_ew);
        if (k->blk >= 0 && k->blk_src) {
            int ps = prod[(k->gemm ? k->gemm : k->lib)->in[0]->id];
            k->blk_src_nhwc = ps >= 0 && fmt[ps];
        }
    }
    /* a pair (layout_blocked) runs its two convs in nChw16c: one that touches nhwc is dropped
     * (its convs run as two ops, as an unpaired conv does) */
    for (int i = 0; i < n; i++) {
        Kernel *k = kl->k[i], *d = k->blk_pair;
        if (d && (k->blk_nhwc || k->blk_src_nhwc || k->blk_dst_nhwc || d->blk_nhwc || d->blk_src_nhwc || d->blk_dst_nhwc))
            k->blk_pair = NULL, k->blk_pair_dw = false;
    }
}
