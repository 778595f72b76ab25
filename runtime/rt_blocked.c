/*
 * rt_blocked.c — convolutions and max pooling in oneDNN's blocked activation layout, for the
 * CPU path of generated code (issue 12). modelc's layout pass (compiler/layout.c) marks the
 * convolutional part of an inference graph whose activations stay blocked between these ops;
 * the generated NAME_blocked() (run once at load, after the load-time kernels) describes each op
 * here, and run() calls mrt_blk_conv_run / mrt_blk_pool_run in place of im2col + GEMM + epilogue.
 *
 * Layout. A blocked tensor [N, C, H, W] is oneDNN's nChw16c (nChw8c on a CPU without AVX-512,
 * chosen here at load), or nhwc where modelc's layout_nhwc says so (mrt_blk_nhwc: the deep convs
 * that are not Winograd, where oneDNN's nhwc kernel brgconv:avx512_core is 10-25% faster; with C
 * a multiple of 16 it holds as many floats, and every op reorders a source stored in the other
 * layout, as it does an NCHW one; nChw8c, bf16 and $MODELRT_NHWC=0 keep every op in nChw16c).
 * In nChw16c element (n, c, h, w) is at ((n*Cp/b + c/b)*H*W + h*W + w)*b + c%b for block b,
 * with Cp = C rounded up to a whole block. With C a multiple of 16 it holds exactly
 * N*C*H*W floats, so the memory plan's sizes are those of NCHW, and same-shape elementwise
 * kernels read and write it unchanged; a conv's value of other C > 16 (24, 40) holds N*Cp*H*W
 * floats, the padding zero (oneDNN writes it so), and modelc's plan sizes it so (the residual
 * copy and the reorder buffers here take the padded size from oneDNN's memory descriptor). An op
 * reads a plain (NCHW) source where the region starts (the first conv's C = 3 image: the
 * primitive takes an nchw src with a blocked dst; with C > 4, a reorder to blocked first, padded
 * where C is not a multiple of the block, since oneDNN would run that conv on its reference
 * kernel) and writes a plain result where a value leaves the region: it computes into a blocked
 * buffer of its own, then one reorder.
 *
 * Ops. A conv is oneDNN's convolution primitive (prop forward_inference, algorithm direct, whose
 * implementation for nChw16c on AVX-512 is jit:avx512_core; or, for a 3x3 stride-1 conv that
 * modelc marks (not --no-winograd), Winograd where oneDNN has it: about 2x faster on ResNet's 3x3
 * convs at batch 1, bench/conv/RESULTS.md); a grouped conv (depthwise: jit_dw) has weights
 * [G, O/G, C/G, KH, KW] (goihw, the bytes of modelc's [O, C/G, KH, KW]). Weights are reordered
 * once into the primitive's preferred format (format `any`: e.g. Goihw16g for a depthwise conv);
 * the bias (the sum of the epilogue's per-channel vectors, copied at load) is its bias, the
 * epilogue's residual add the `sum` post-op (the residual is copied into the destination first
 * unless the plan put them in one buffer) and silu (swish, alpha 1) / hardswish an eltwise
 * post-op (oneDNN docs: "Primitive Attributes: Post-ops"); relu and clamp run after the primitive
 * (blk_clamp, AVX-512 where the CPU has it), since oneDNN's relu and clip (vmaxps/vminps) turn a
 * NaN into the bound (field case B13): +1-3% CPU time on ResNet-18 b1, +6-9% on MobileNetV2 at one
 * thread. Pairs of convs (mrt_blk_pair, modelc's layout pass: the second reads only the first's
 * result, run right after it) skip those passes at a run where a check of the first one's
 * source bounds every value of both (blk_pair_bounded: no NaN or infinity can reach the relu or
 * clip post-op), and an expand + depthwise pair (1x1, then 3x3 depthwise) with a large expanded
 * value runs as one primitive, the jit 1x1 kernel with oneDNN's depthwise post-op ("Primitive
 * Attributes: Depthwise Fusion"; blk_make_pair, mrt_blk_conv_pair_run): MobileNetV2 b1, one
 * thread, about 3.5% less CPU time (docs/runtime.md). Max pooling is the pooling_v2 primitive,
 * whose result is marked NaN where its window holds one (blk_pool_nan; it drops them too), after
 * a check of the source that finds none. Each primitive runs with a user-managed scratchpad (dnnl_scratchpad_mode_user), one
 * buffer shared by all, so a run allocates nothing at a batch size it has already seen;
 * primitives are made per batch size: the model's maximum at load, another size on its first
 * run (then cached, MRT_BLK_CACHE sizes per op).
 *
 * MODELRT_BLOCKED_VERBOSE=1 logs (MRT_LOG_INFO) which implementation oneDNN chose for each op;
 * an op that gets oneDNN's reference kernel (ref:any, 50-100x slower than its JIT ones; layout.c
 * marks only shapes that have one) is logged as a warning whatever the variable says.
 * Threads: Debian's oneDNN uses OpenMP (libgomp), the pool every other loop of modelc runs on;
 * a primitive takes omp_get_max_threads() threads when it runs, i.e. the run's --threads.
 * Memory: a conv's plain weights that nothing else reads are released once its first primitive
 * holds them reordered (mrt_blk_release_weights), so the weights are not held twice; a later
 * batch size reorders from that first primitive's copy.
 * Precision (modelc --precision bf16, mrt_model_desc.precision): on a CPU with bf16 instructions
 * (rt_model_bf16) every conv computes in bf16: bf16 weights (reordered from the f32 ones at load),
 * a bf16 source, f32 accumulation and bias, post-ops on the f32 sums (jit_bf16:avx512_core_bf16;
 * never Winograd, which 2.6 has in f32 only). modelc says which blocked values are stored as bf16
 * (mrt_blk_store_bf16, before an op is added; compiler/precision.c): an op's source and result
 * types (blk_op.sdt, ddt) then differ from f32 where it says so, and a conv converts an f32
 * source into b->tmp_in first (the in-reorder that an NCHW source takes), a pooling a bf16 result
 * that is stored f32 through b->tmp (the out-reorder of a result leaving the region). Without
 * bf16 instructions everything is f32, as in an f32 build (rt_precision_notice says so at load).
 * Without oneDNN (make DNNL=0) these calls fail with a message; modelc then never emits them.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "modelrt.h"
#include "mrt_kernels.h"
#include "rt_internal.h"

enum { MRT_BLK_CACHE = 4 };
/* An expand + depthwise pair runs as one primitive (mrt_blk_pair) when the expanded value of one
 * batch item takes this many bytes or more: measured faster only there (MobileNetV2 b1 on AVX-512,
 * docs/runtime.md: its first pair, 96 x 112 x 112, 1.08x at 1 thread and 1.2x at 2; the smaller
 * ones 2-4% slower fused, their working set in cache either way) */
#define MRT_BLK_FUSE_BYTES (4u << 20)

#ifdef MRT_WITH_DNNL
#include <dnnl.h>

/* One op at one batch size: its primitive and memory objects (handles set at each run). */
typedef struct blk_prim {
    int64_t N;
    dnnl_primitive_t prim, out_reorder, in_reorder;
    dnnl_memory_t src, dst, w, bias, scratch, tmp_blk, plain_dst, plain_src;
    void *wbuf;   /* the reordered weights, owned (NULL when shared with cache[0]'s) */
    /* ops of an expand + depthwise pair (mrt_blk_pair; blk_make_pair): prim_clip, the same conv
     * with its relu / clamp as oneDNN's post-op (run when the source is bounded); op i's
     * prim_fused, the 1x1 conv with op j as its depthwise post-op (dst_fused: op j's result,
     * w_dw / bias_dw: op j's reordered weights (its cache[0]'s buffer) and bias) */
    dnnl_primitive_t prim_clip, prim_fused;
    dnnl_memory_t dst_fused, w_dw, bias_dw;
    size_t dst_bytes; /* the blocked result's bytes, C padded to whole blocks */
} blk_prim;

typedef struct blk_op {
    int kind;                 /* 0 conv, 1 max pool */
    mrt_conv2d_params cp;
    mrt_pool2d_params pp;
    int src_blocked, dst_blocked, has_res, act;
    /* modelc's layout_nhwc (mrt_blk_nhwc): the primitive computes in nhwc (nhwc); its blocked
     * source / result is stored nhwc (src_nhwc / dst_nhwc); else nChw16c. Where this runtime
     * does not run nhwc (mrt_blk.nhwc 0) all three mean nChw16c, which holds the same bytes'
     * worth of values (C a multiple of 16), so the plan and the other ops agree either way. */
    int nhwc, src_nhwc, dst_nhwc;
    int winograd;             /* try oneDNN's Winograd algorithm first (3x3, stride 1) */
    /* --precision bf16: src_bf16 / dst_bf16, the stored source / result is bf16 (modelc's choice,
     * mrt_blk_store_bf16); sdt / ddt, the stored source's / result's data type as this CPU runs
     * it (bf16 only when the model computes in bf16 here, mrt_blk.bf16); cdt, the primitive's
     * source and weights type: bf16 for a conv of such a model (f32 accumulation, f32 bias),
     * else f32; a pooling's is its source's (max pooling rounds nothing) */
    int src_bf16, dst_bf16;
    dnnl_data_type_t sdt, ddt, cdt;
    float lo, hi;
    const float *w;           /* the plain weights [O, C, KH, KW] in the model's weight region */
    float *bias;              /* [O], owned, or NULL */
    char what[160];
    /* An expand + depthwise pair (mrt_blk_pair): pair, op j of this op i; pair_of, op i of this
     * op j (-1 none). fuse: op i runs the pair as one primitive where allowed. skip / src_bounded,
     * op j's, set by op i's run for j's call right after: its result is already written / its
     * source can hold no NaN or infinity (blk_pair_bounded). gain: the largest sum of |w| over
     * one output's weights, bmax: the largest |bias| (NaN where a weight or bias is not finite);
     * negzero: the bias holds a -0.0 (never a clip post-op then: oneDNN's clip makes -0.0 +0.0,
     * where blk_clamp keeps it). */
    int pair, pair_of, fuse, skip, src_bounded, negzero;
    int logged;               /* op i: its first pair run was logged (MODELRT_BLOCKED_VERBOSE) */
    double gain, bmax;
    float *zero_bias;         /* op j of a fused pair without a bias: O zeros, owned */
    blk_prim cache[MRT_BLK_CACHE];
    int ncache, next;
} blk_op;

typedef struct mrt_blk {
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    int block;                /* 16 or 8 */
    int bf16;                 /* the convs compute in bf16 (rt_model_bf16: --precision bf16, avx512_bf16) */
    int nhwc;                 /* the ops modelc marks nhwc run so: nChw16c, f32, and not $MODELRT_NHWC=0 */
    int64_t max_batch;
    blk_op *ops;
    int nops;
    void *scratch;            /* the shared scratchpad */
    size_t scratch_bytes;
    void *tmp;                /* the blocked result of an op whose result leaves the region */
    size_t tmp_bytes;
    void *tmp_in;             /* an NCHW source of C % block == 0 channels, reordered to blocked */
    size_t tmp_in_bytes;
    int released;             /* some op's plain weights were released (mrt_blk_release_weights) */
} mrt_blk;

/* An NCHW source the primitive reads through a reorder into b->tmp_in: oneDNN's kernels take an
 * nchw source with a blocked destination only for a few input channels (the C = 3 image; with
 * C = 16 it picks ref:any, orders of magnitude slower). modelc's layout pass marks no conv with
 * an NCHW source of 4 < C < 16 (a 3x3 conv of it is ref:any even reordered). */
static dnnl_format_tag_t blk_tag(const mrt_blk *b);
/* The layout op's primitive computes in, and those its source and result are stored in (NCHW
 * where they are not blocked). */
static dnnl_format_tag_t op_tag(const mrt_blk *b, const blk_op *op) { return op->nhwc && b->nhwc ? dnnl_nhwc : blk_tag(b); }
static dnnl_format_tag_t src_tag(const mrt_blk *b, const blk_op *op) {
    return !op->src_blocked ? dnnl_nchw : op->src_nhwc && b->nhwc ? dnnl_nhwc : blk_tag(b);
}
static dnnl_format_tag_t dst_tag(const mrt_blk *b, const blk_op *op) {
    return !op->dst_blocked ? dnnl_nchw : op->dst_nhwc && b->nhwc ? dnnl_nhwc : blk_tag(b);
}
static const char *tag_name(dnnl_format_tag_t t) {
    return t == dnnl_nchw ? "nchw" : t == dnnl_nhwc ? "nhwc" : t == dnnl_nChw16c ? "nChw16c" : "nChw8c";
}

static int blk_reorder_in(const mrt_blk *b, const blk_op *op) {
    return op->kind == 0 && ((!op->src_blocked && op->cp.C > 4) || (op->src_blocked && src_tag(b, op) != op_tag(b, op)) ||
                             op->sdt != op->cdt);
}

/* The primitive's destination type: a conv writes its stored result's type when that is blocked
 * (oneDNN's bf16 kernels write f32 or bf16), f32 into b->tmp when it leaves the region; a pooling
 * writes its source's type. */
static dnnl_data_type_t blk_prim_ddt(const blk_op *op) {
    return op->kind == 0 ? (op->dst_blocked ? op->ddt : dnnl_f32) : op->sdt;
}

/* The result goes through b->tmp and one reorder: it leaves the region (NCHW), is stored in the
 * other blocked layout, or a pooling of a bf16 source stores an f32 result (also a conversion:
 * oneDNN pools within one type). */
static int blk_reorder_out(const mrt_blk *b, const blk_op *op) {
    return dst_tag(b, op) != op_tag(b, op) || blk_prim_ddt(op) != op->ddt;
}

static const char *blk_dt_name(dnnl_data_type_t t) { return t == dnnl_bf16 ? "bf16" : "f32"; }

static const char *dnnl_what(dnnl_status_t s) {
    switch (s) {
    case dnnl_success: return "success";
    case dnnl_out_of_memory: return "out of memory";
    case dnnl_invalid_arguments: return "invalid arguments";
    case dnnl_unimplemented: return "unimplemented";
    case dnnl_iterator_ends: return "iterator ends";
    case dnnl_runtime_error: return "runtime error";
    case dnnl_not_required: return "not required";
    default: return "unknown status";
    }
}

#define BLK_TRY(call, op, step)                                                                                        \
    do {                                                                                                               \
        dnnl_status_t s_ = (call);                                                                                     \
        if (s_ != dnnl_success)                                                                                        \
            return mrt_set_error(MRT_ERR_INTERNAL, "%s: oneDNN %s failed: %s (status %d); cpu, batch %lld "            \
                                 "(recompile with modelc --no-blocked-conv to use the im2col path)",                   \
                                 (op)->what, step, dnnl_what(s_), (int)s_, (long long)N);                              \
    } while (0)

static dnnl_format_tag_t blk_tag(const mrt_blk *b) { return b->block == 16 ? dnnl_nChw16c : dnnl_nChw8c; }

/* A conv's weights descriptor: [O, C, KH, KW] (oihw) for groups 1; grouped (depthwise), oneDNN's
 * 5-D [G, O/G, C/G, KH, KW] (goihw), the same bytes as modelc's [O, C/G, KH, KW]. tag: the plain
 * layout, or dnnl_format_tag_any for the primitive's choice (Goihw16g for a depthwise one). */
static void blk_weights_md(dnnl_memory_desc_t *md, const mrt_conv2d_params *p, dnnl_format_tag_t tag,
                           dnnl_data_type_t dt) {
    int64_t g = p->groups > 1 ? p->groups : 1;
    if (g == 1) {
        dnnl_dims_t wd = {p->O, p->C, p->kh, p->kw};
        dnnl_memory_desc_init_by_tag(md, 4, wd, dt, tag == dnnl_format_tag_any ? tag : dnnl_oihw);
    } else {
        dnnl_dims_t wd = {g, p->O / g, p->C / g, p->kh, p->kw};
        dnnl_memory_desc_init_by_tag(md, 5, wd, dt, tag == dnnl_format_tag_any ? tag : dnnl_goihw);
    }
}

/* Grow a shared buffer to at least `bytes` (64-byte aligned). Only at primitive creation. */
static int blk_grow(void **buf, size_t *have, size_t bytes) {
    if (bytes <= *have) return 1;
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64)) return 0;
    free(*buf);
    *buf = p;
    *have = bytes;
    return 1;
}

static mrt_status blk_scratch_for(mrt_blk *b, blk_op *op, const_dnnl_primitive_desc_t pd, int64_t N) {
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    size_t need = md ? dnnl_memory_desc_get_size(md) : 0;
    if (!blk_grow(&b->scratch, &b->scratch_bytes, need))
        return mrt_set_error(MRT_ERR_OOM, "%s: cannot allocate %zu bytes of oneDNN scratchpad on the cpu", op->what, need);
    return MRT_OK;
}

/* op's activation as an eltwise post-op: silu and hardswish always; relu and clamp only with
 * clip (a primitive that runs where no NaN can reach them, blk_pair_bounded). */
static void blk_append_act(dnnl_post_ops_t po, const blk_op *op, int clip) {
    if (op->act == 1 && clip) dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f);
    if (op->act == 2 && clip) dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_clip, op->lo, op->hi);
    if (op->act == 3) dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_swish, 1.0f, 0.0f); /* x*sigmoid(x) */
    if (op->act == 4) dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_hardswish, 0.0f, 0.0f);
}

static mrt_status blk_make_pair(mrt_blk *b, blk_op *op, blk_prim *e, int64_t N);

/* Create op's primitive at batch N (cache entry e). */
static mrt_status blk_make(mrt_blk *b, blk_op *op, blk_prim *e, int64_t N) {
    memset(e, 0, sizeof *e);
    e->N = N;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    mrt_status st = MRT_OK;
    BLK_TRY(dnnl_primitive_attr_create(&attr), op, "attribute creation");
    dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    dnnl_memory_desc_t src_md, dst_md, w_md, bias_md;
    int64_t C, H, W, O, OH, OW;
    if (op->kind == 0) {
        const mrt_conv2d_params *p = &op->cp;
        C = p->C, H = p->H, W = p->W, O = p->O, OH = p->OH, OW = p->OW;
        dnnl_dims_t sd = {N, C, H, W}, dd = {N, O, OH, OW}, bd = {O};
        dnnl_dims_t strides = {p->sh, p->sw}, dil = {p->dh - 1, p->dw - 1}, pl = {p->pt, p->pl};
        /* the right and bottom padding that gives exactly OH x OW (what the shape rule computed) */
        dnnl_dims_t pr = {(OH - 1) * p->sh + (p->kh - 1) * p->dh + 1 - H - p->pt,
                          (OW - 1) * p->sw + (p->kw - 1) * p->dw + 1 - W - p->pl};
        /* the source blocked unless it is the region's NCHW image (C <= 4, read directly; a bf16
         * conv reads it converted to bf16, still NCHW) */
        dnnl_memory_desc_init_by_tag(&src_md, 4, sd, op->cdt, op->src_blocked || C > 4 ? op_tag(b, op) : dnnl_nchw);
        dnnl_memory_desc_init_by_tag(&dst_md, 4, dd, blk_prim_ddt(op), op_tag(b, op));
        blk_weights_md(&w_md, p, dnnl_format_tag_any, op->cdt);
        dnnl_memory_desc_init_by_tag(&bias_md, 1, bd, dnnl_f32, dnnl_x);
        BLK_TRY(dnnl_post_ops_create(&po), op, "post-ops creation");
        if (op->has_res) dnnl_post_ops_append_sum(po, 1.0f);
        /* relu and clamp (act 1, 2) run after the primitive (blk_clamp): oneDNN's relu and clip
         * post-ops turn a NaN into the bound (field case B13); prim_clip (blk_make_pair) has them */
        blk_append_act(po, op, 0);
        dnnl_primitive_attr_set_post_ops(attr, po);
        dnnl_status_t s = dnnl_unimplemented;
        /* Winograd first where asked (its F(2x3)/F(4x3) kernels exist for avx512_core f32 only:
         * elsewhere, or for a shape it does not take, the direct algorithm, which computes the
         * same convolution with a smaller rounding error) */
        for (int a = op->winograd ? 0 : 1; a < 2 && s != dnnl_success; a++) {
            dnnl_convolution_desc_t cd;
            BLK_TRY(dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference,
                                                               a == 0 ? dnnl_convolution_winograd : dnnl_convolution_direct,
                                                               &src_md, &w_md, op->bias ? &bias_md : NULL, &dst_md, strides,
                                                               dil, pl, pr),
                    op, "convolution descriptor");
            s = dnnl_primitive_desc_create(&pd, &cd, attr, b->eng, NULL);
        }
        dnnl_post_ops_destroy(po);
        if (s != dnnl_success) {
            dnnl_primitive_attr_destroy(attr);
            BLK_TRY(s, op, "convolution primitive descriptor");
        }
    } else {
        const mrt_pool2d_params *p = &op->pp;
        C = O = p->C, H = p->H, W = p->W, OH = p->OH, OW = p->OW;
        dnnl_dims_t sd = {N, C, H, W}, dd = {N, C, OH, OW};
        dnnl_dims_t strides = {p->sh, p->sw}, k = {p->kh, p->kw}, dil = {p->dh - 1, p->dw - 1}, pl = {p->pt, p->pl};
        dnnl_dims_t pr = {(OH - 1) * p->sh + (p->kh - 1) * p->dh + 1 - H - p->pt,
                          (OW - 1) * p->sw + (p->kw - 1) * p->dw + 1 - W - p->pl};
        dnnl_memory_desc_init_by_tag(&src_md, 4, sd, op->sdt, op_tag(b, op));
        dnnl_memory_desc_init_by_tag(&dst_md, 4, dd, blk_prim_ddt(op), op_tag(b, op));
        dnnl_pooling_v2_desc_t pdsc;
        BLK_TRY(dnnl_pooling_v2_forward_desc_init(&pdsc, dnnl_forward_inference, dnnl_pooling_max, &src_md, &dst_md, strides,
                                                  k, dil, pl, pr),
                op, "pooling descriptor");
        dnnl_status_t s = dnnl_primitive_desc_create(&pd, &pdsc, attr, b->eng, NULL);
        if (s != dnnl_success) {
            dnnl_primitive_attr_destroy(attr);
            BLK_TRY(s, op, "pooling primitive descriptor");
        }
    }
    dnnl_primitive_attr_destroy(attr);
    const char *impl = "?";
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    if (rt_env_flag("MODELRT_BLOCKED_VERBOSE", 0)) /* which implementation oneDNN chose, per op and batch */
        mrt_log(MRT_LOG_INFO, "%s: oneDNN %s, batch %lld, %s %s src%s, %s %s dst%s, computes in %s %s", op->what, impl,
                (long long)N, tag_name(src_tag(b, op)), blk_dt_name(op->sdt), blk_reorder_in(b, op) ? " (reordered)" : "",
                tag_name(dst_tag(b, op)), blk_dt_name(op->ddt), blk_reorder_out(b, op) ? " (reordered)" : "",
                tag_name(op_tag(b, op)), blk_dt_name(op->cdt));
    /* modelc's layout pass only marks shapes oneDNN has JIT kernels for (layout.c: groups_ok, the
     * entry's channels, pads_ok); its reference kernel is 50-100x slower, so say so rather than run slowly */
    if (!strncmp(impl, "ref", 3))
        mrt_log(MRT_LOG_WARN, "%s: oneDNN chose its reference kernel (%s) at batch %lld: correct but slow "
                "(modelc --no-blocked-conv avoids it)", op->what, impl, (long long)N);
    if ((st = blk_scratch_for(b, op, pd, N)) != MRT_OK) goto out;
    dnnl_status_t s = dnnl_primitive_create(&e->prim, pd);
    if (s != dnnl_success) {
        dnnl_primitive_desc_destroy(pd);
        BLK_TRY(s, op, "primitive creation");
    }
    /* memory objects without buffers: run() sets their handles */
    const dnnl_memory_desc_t *q_src = dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
    const dnnl_memory_desc_t *q_dst = dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
    const dnnl_memory_desc_t *q_sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    if (dnnl_memory_create(&e->src, q_src, b->eng, DNNL_MEMORY_NONE) != dnnl_success ||
        dnnl_memory_create(&e->dst, q_dst, b->eng, DNNL_MEMORY_NONE) != dnnl_success ||
        dnnl_memory_create(&e->scratch, q_sp, b->eng, DNNL_MEMORY_NONE) != dnnl_success) {
        st = mrt_set_error(MRT_ERR_OOM, "%s: cannot create oneDNN memory objects", op->what);
        goto out;
    }
    if (op->kind == 0) {
        /* the weights, reordered once into the primitive's format (shared between batch sizes
         * when the format is the same) */
        const dnnl_memory_desc_t *q_w = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        blk_prim *first = op->ncache > 0 && &op->cache[0] != e ? &op->cache[0] : NULL;
        const dnnl_memory_desc_t *first_w = NULL;
        if (first) dnnl_memory_get_memory_desc(first->w, &first_w);
        void *wbuf = NULL;
        if (first && first_w && dnnl_memory_desc_equal(first_w, q_w)) {
            dnnl_memory_get_data_handle(first->w, &wbuf);
        } else {
            size_t wb = dnnl_memory_desc_get_size(q_w);
            if (posix_memalign(&e->wbuf, 64, wb ? wb : 64)) {
                st = mrt_set_error(MRT_ERR_OOM, "%s: cannot allocate %zu bytes for the reordered weights", op->what, wb);
                goto out;
            }
            wbuf = e->wbuf;
            /* from the plain weights, or, once they were released (mrt_blk_release_weights), from
             * the first primitive's reordered ones */
            dnnl_memory_desc_t user_md;
            void *from = (void *)op->w;
            if (!op->w && first && first_w) {
                user_md = *first_w;
                dnnl_memory_get_data_handle(first->w, &from);
            } else {
                blk_weights_md(&user_md, &op->cp, dnnl_oihw, dnnl_f32);
            }
            dnnl_memory_t um = NULL, wm = NULL;
            dnnl_primitive_desc_t rpd = NULL;
            dnnl_primitive_t r = NULL;
            dnnl_status_t rs = from ? dnnl_memory_create(&um, &user_md, b->eng, from) : dnnl_invalid_arguments;
            if (rs == dnnl_success) rs = dnnl_memory_create(&wm, q_w, b->eng, wbuf);
            if (rs == dnnl_success) rs = dnnl_reorder_primitive_desc_create(&rpd, &user_md, b->eng, q_w, b->eng, NULL);
            if (rs == dnnl_success) rs = dnnl_primitive_create(&r, rpd);
            if (rs == dnnl_success) {
                dnnl_exec_arg_t a[] = {{DNNL_ARG_FROM, um}, {DNNL_ARG_TO, wm}};
                rs = dnnl_primitive_execute(r, b->stream, 2, a);
                if (rs == dnnl_success) rs = dnnl_stream_wait(b->stream);
            }
            if (r) dnnl_primitive_destroy(r);
            if (rpd) dnnl_primitive_desc_destroy(rpd);
            if (um) dnnl_memory_destroy(um);
            if (wm) dnnl_memory_destroy(wm);
            if (rs != dnnl_success) {
                st = mrt_set_error(MRT_ERR_INTERNAL, "%s: oneDNN weight reorder failed: %s (status %d)", op->what,
                                   dnnl_what(rs), (int)rs);
                goto out;
            }
        }
        if (dnnl_memory_create(&e->w, q_w, b->eng, wbuf) != dnnl_success) {
            st = mrt_set_error(MRT_ERR_OOM, "%s: cannot create oneDNN memory objects", op->what);
            goto out;
        }
        if (op->bias) {
            dnnl_dims_t bd = {op->cp.O};
            dnnl_memory_desc_t bmd;
            dnnl_memory_desc_init_by_tag(&bmd, 1, bd, dnnl_f32, dnnl_x);
            if (dnnl_memory_create(&e->bias, &bmd, b->eng, op->bias) != dnnl_success) {
                st = mrt_set_error(MRT_ERR_OOM, "%s: cannot create oneDNN memory objects", op->what);
                goto out;
            }
        }
    }
    e->dst_bytes = dnnl_memory_desc_get_size(q_dst);
    if (blk_reorder_in(b, op)) {
        size_t need = dnnl_memory_desc_get_size(q_src); /* C padded to whole blocks */
        dnnl_dims_t sd = {N, C, H, W};
        dnnl_memory_desc_t plain; /* the source as stored: NCHW, the other blocked layout, or f32 read by a bf16 conv */
        dnnl_memory_desc_init_by_tag(&plain, 4, sd, op->sdt, src_tag(b, op));
        dnnl_primitive_desc_t rpd = NULL;
        dnnl_status_t rs = blk_grow(&b->tmp_in, &b->tmp_in_bytes, need) ? dnnl_success : dnnl_out_of_memory;
        if (rs == dnnl_success) rs = dnnl_reorder_primitive_desc_create(&rpd, &plain, b->eng, q_src, b->eng, NULL);
        if (rs == dnnl_success) rs = dnnl_primitive_create(&e->in_reorder, rpd);
        if (rs == dnnl_success) rs = dnnl_memory_create(&e->plain_src, &plain, b->eng, DNNL_MEMORY_NONE);
        if (rpd) dnnl_primitive_desc_destroy(rpd);
        if (rs != dnnl_success) {
            st = mrt_set_error(MRT_ERR_INTERNAL, "%s: oneDNN reorder of the source failed: %s (status %d)", op->what,
                               dnnl_what(rs), (int)rs);
            goto out;
        }
    }
    if (blk_reorder_out(b, op)) {
        /* a result leaving the region: computed blocked into b->tmp, then reordered to NCHW (or
         * to the other blocked layout, or a bf16 pooling's result converted to blocked f32) */
        size_t need = e->dst_bytes;
        if (!blk_grow(&b->tmp, &b->tmp_bytes, need)) {
            st = mrt_set_error(MRT_ERR_OOM, "%s: cannot allocate %zu bytes on the cpu", op->what, need);
            goto out;
        }
        dnnl_dims_t dd = {N, O, OH, OW};
        dnnl_memory_desc_t plain;
        dnnl_memory_desc_init_by_tag(&plain, 4, dd, op->ddt, dst_tag(b, op));
        dnnl_primitive_desc_t rpd = NULL;
        dnnl_primitive_attr_t ra = NULL;
        dnnl_status_t rs = dnnl_primitive_attr_create(&ra);
        if (rs == dnnl_success) rs = dnnl_primitive_attr_set_scratchpad_mode(ra, dnnl_scratchpad_mode_user);
        if (rs == dnnl_success) rs = dnnl_reorder_primitive_desc_create(&rpd, q_dst, b->eng, &plain, b->eng, ra);
        if (ra) dnnl_primitive_attr_destroy(ra);
        if (rs == dnnl_success) {
            const dnnl_memory_desc_t *rsp = dnnl_primitive_desc_query_md(rpd, dnnl_query_scratchpad_md, 0);
            size_t rneed = rsp ? dnnl_memory_desc_get_size(rsp) : 0;
            if (!blk_grow(&b->scratch, &b->scratch_bytes, rneed)) rs = dnnl_out_of_memory;
        }
        if (rs == dnnl_success) rs = dnnl_primitive_create(&e->out_reorder, rpd);
        if (rs == dnnl_success) rs = dnnl_memory_create(&e->tmp_blk, q_dst, b->eng, DNNL_MEMORY_NONE);
        if (rs == dnnl_success) rs = dnnl_memory_create(&e->plain_dst, &plain, b->eng, DNNL_MEMORY_NONE);
        if (rpd) dnnl_primitive_desc_destroy(rpd);
        if (rs != dnnl_success) {
            st = mrt_set_error(MRT_ERR_INTERNAL, "%s: oneDNN reorder of the result failed: %s (status %d)", op->what,
                               dnnl_what(rs), (int)rs);
            goto out;
        }
    }
    if (op->kind == 0 && (op->pair >= 0 || op->pair_of >= 0)) st = blk_make_pair(b, op, e, N);
out:
    dnnl_primitive_desc_destroy(pd);
    return st;
}

/* An op of an expand + depthwise pair at batch N (cache entry e, whose primitive exists): its
 * prim_clip where it has a relu or clamp, and op i's prim_fused where op->fuse (oneDNN's jit 1x1
 * kernel with the depthwise post-op: "Primitive Attributes: Depthwise Fusion" in oneDNN's
 * docs; its post-ops are op i's activation, op j, op j's activation). A variant that oneDNN gives
 * only as a reference kernel, with weights in another format than e->prim's (the fused one also:
 * op j's weights not as its cache[0] holds them, or a result not op j's blocked one) is left
 * out, and the pair runs as two ops. */
static mrt_status blk_make_pair(mrt_blk *b, blk_op *op, blk_prim *e, int64_t N) {
    const mrt_conv2d_params *p = &op->cp;
    const blk_op *dj = op->pair >= 0 ? &b->ops[op->pair] : NULL;
    const dnnl_memory_desc_t *ew = NULL;
    if (!e->prim || !e->w || dnnl_memory_get_memory_desc(e->w, &ew) != dnnl_success) return MRT_OK;
    /* the descriptor of blk_make's direct conv (f32: a pair is never bf16) */
    dnnl_memory_desc_t src_md, dst_md, w_md, bias_md;
    dnnl_dims_t sd = {N, p->C, p->H, p->W}, dd = {N, p->O, p->OH, p->OW}, bd = {p->O};
    dnnl_dims_t strides = {p->sh, p->sw}, dil = {p->dh - 1, p->dw - 1}, pl = {p->pt, p->pl};
    dnnl_dims_t pr = {(p->OH - 1) * p->sh + (p->kh - 1) * p->dh + 1 - p->H - p->pt,
                      (p->OW - 1) * p->sw + (p->kw - 1) * p->dw + 1 - p->W - p->pl};
    dnnl_memory_desc_init_by_tag(&src_md, 4, sd, dnnl_f32, op->src_blocked || p->C > 4 ? blk_tag(b) : dnnl_nchw);
    dnnl_memory_desc_init_by_tag(&dst_md, 4, dd, dnnl_f32, blk_tag(b));
    blk_weights_md(&w_md, p, dnnl_format_tag_any, dnnl_f32);
    dnnl_memory_desc_init_by_tag(&bias_md, 1, bd, dnnl_f32, dnnl_x);
    dnnl_convolution_desc_t cd;
    BLK_TRY(dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct, &src_md,
                                                       &w_md, op->bias ? &bias_md : NULL, &dst_md, strides, dil, pl, pr),
            op, "convolution descriptor");
    for (int v = 0; v < 2; v++) { /* 0: prim_clip, 1: prim_fused */
        if (v == 0 && (e->prim_clip || !(op->act == 1 || op->act == 2))) continue;
        if (v == 1 && (e->prim_fused || !dj || !op->fuse || dj->ncache < 1 || !dj->cache[0].w)) continue;
        dnnl_primitive_attr_t attr = NULL;
        dnnl_post_ops_t po = NULL;
        dnnl_primitive_desc_t pd = NULL;
        dnnl_status_t s = dnnl_primitive_attr_create(&attr);
        if (s == dnnl_success) s = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
        if (s == dnnl_success) s = dnnl_post_ops_create(&po);
        if (s == dnnl_success) {
            blk_append_act(po, op, 1);
            if (v == 1) {
                s = dj->cp.sh == 1 ? dnnl_post_ops_append_dw_k3s1p1(po, dnnl_f32, dnnl_f32, dnnl_f32, 0, 0, NULL)
                                   : dnnl_post_ops_append_dw_k3s2p1(po, dnnl_f32, dnnl_f32, dnnl_f32, 0, 0, NULL);
                blk_append_act(po, dj, 1);
            }
        }
        if (s == dnnl_success) s = dnnl_primitive_attr_set_post_ops(attr, po);
        if (s == dnnl_success) s = dnnl_primitive_desc_create(&pd, &cd, attr, b->eng, NULL);
        if (po) dnnl_post_ops_destroy(po);
        if (attr) dnnl_primitive_attr_destroy(attr);
        const char *impl = "none";
        if (s == dnnl_success) dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
        int use = s == dnnl_success && strncmp(impl, "ref", 3) &&
                  dnnl_memory_desc_equal(dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0), ew);
        const dnnl_memory_desc_t *fw = NULL, *fd = NULL, *jw = NULL;
        if (use && v == 1) {
            dnnl_memory_desc_t jdst;
            dnnl_dims_t jd = {N, dj->cp.O, dj->cp.OH, dj->cp.OW};
            dnnl_memory_desc_init_by_tag(&jdst, 4, jd, dnnl_f32, blk_tag(b));
            fw = dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_WEIGHTS);
            fd = dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
            use = fw && fd && dnnl_memory_get_memory_desc(dj->cache[0].w, &jw) == dnnl_success &&
                  dnnl_memory_desc_equal(fw, jw) && dnnl_memory_desc_equal(fd, &jdst);
        }
        if (rt_env_flag("MODELRT_BLOCKED_VERBOSE", 0))
            mrt_log(MRT_LOG_INFO, "%s: %s %s (where no NaN can reach a relu or clamp): oneDNN %s, batch %lld",
                    op->what, use ? "can run" : "cannot run",
                    v ? "fused with the depthwise conv after it" : "with its relu/clamp as a post-op", impl, (long long)N);
        mrt_status st = MRT_OK;
        if (use && (st = blk_scratch_for(b, op, pd, N)) == MRT_OK) {
            s = dnnl_primitive_create(v ? &e->prim_fused : &e->prim_clip, pd);
            if (s == dnnl_success && v == 1) {
                void *jwb = NULL;
                dnnl_memory_desc_t jbm;
                dnnl_dims_t jb = {dj->cp.O};
                dnnl_memory_desc_init_by_tag(&jbm, 1, jb, dnnl_f32, dnnl_x);
                s = dnnl_memory_get_data_handle(dj->cache[0].w, &jwb);
                if (s == dnnl_success) s = dnnl_memory_create(&e->w_dw, fw, b->eng, jwb);
                if (s == dnnl_success)
                    s = dnnl_memory_create(&e->bias_dw, &jbm, b->eng, dj->bias ? dj->bias : dj->zero_bias);
                if (s == dnnl_success) s = dnnl_memory_create(&e->dst_fused, fd, b->eng, DNNL_MEMORY_NONE);
            }
            if (s != dnnl_success)
                st = mrt_set_error(MRT_ERR_INTERNAL, "%s: oneDNN primitive creation failed: %s (status %d)", op->what,
                                   dnnl_what(s), (int)s);
        }
        if (pd) dnnl_primitive_desc_destroy(pd);
        if (st != MRT_OK) return st;
    }
    return MRT_OK;
}

static void blk_prim_free(blk_prim *e) {
    if (e->prim) dnnl_primitive_destroy(e->prim);
    if (e->out_reorder) dnnl_primitive_destroy(e->out_reorder);
    if (e->in_reorder) dnnl_primitive_destroy(e->in_reorder);
    if (e->prim_clip) dnnl_primitive_destroy(e->prim_clip);
    if (e->prim_fused) dnnl_primitive_destroy(e->prim_fused);
    dnnl_memory_t *mems[] = {&e->src, &e->dst, &e->w, &e->bias, &e->scratch, &e->tmp_blk, &e->plain_dst, &e->plain_src,
                             &e->dst_fused, &e->w_dw, &e->bias_dw};
    for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++)
        if (*mems[i]) dnnl_memory_destroy(*mems[i]);
    free(e->wbuf);
    memset(e, 0, sizeof *e);
}

/* op's primitive at batch N: cached, else made now (entry 0, the maximum batch, stays). */
static mrt_status blk_get(mrt_blk *b, blk_op *op, int64_t N, blk_prim **out) {
    for (int i = 0; i < op->ncache; i++)
        if (op->cache[i].N == N) return *out = &op->cache[i], MRT_OK;
    int slot = op->ncache < MRT_BLK_CACHE ? op->ncache : 1 + op->next++ % (MRT_BLK_CACHE - 1);
    if (slot >= op->ncache) op->ncache = slot + 1;
    else blk_prim_free(&op->cache[slot]);
    mrt_status st = blk_make(b, op, &op->cache[slot], N);
    if (st != MRT_OK) {
        blk_prim_free(&op->cache[slot]);
        op->cache[slot].N = -1;
        return st;
    }
    *out = &op->cache[slot];
    return MRT_OK;
}

static mrt_blk *blk_of(mrt_model *m, int i, const char *fn) {
    mrt_blk *b = m ? (mrt_blk *)m->blk : NULL;
    if (!b || i < 0 || i >= b->nops) {
        mrt_set_error(MRT_ERR_INVALID_ARG, "%s: blocked op %d does not exist (were the weights loaded on the cpu?)", fn, i);
        return NULL;
    }
    return b;
}

mrt_status mrt_blk_create(mrt_model *m, int nops, int64_t max_batch) {
    mrt_blk_free(m);
    mrt_blk *b = calloc(1, sizeof *b);
    if (!b || !(b->ops = calloc((size_t)(nops > 0 ? nops : 1), sizeof *b->ops))) {
        free(b);
        return mrt_set_error(MRT_ERR_OOM, "%s: cannot allocate the blocked ops", m->desc->name);
    }
    b->nops = nops;
    b->max_batch = max_batch;
    for (int i = 0; i < nops; i++) b->ops[i].pair = b->ops[i].pair_of = -1;
    b->block = dnnl_get_effective_cpu_isa() >= dnnl_cpu_isa_avx512_core ? 16 : 8;
    if (getenv("MODELRT_BLOCK") && atoi(getenv("MODELRT_BLOCK")) == 8) b->block = 8; /* tests: the nChw8c path */
    /* bf16 where the model asks and the CPU has it (rt_precision_notice said so otherwise); not
     * in nChw8c (only the test knob above picks it on such a CPU): oneDNN 2.6 has only its
     * reference kernels for bf16 in that layout (ref:any, about 10^4 times slower) */
    b->bf16 = rt_model_bf16(m, m->dev[0]);
    if (b->bf16 && b->block != 16) {
        b->bf16 = 0;
        mrt_log(MRT_LOG_INFO, "%s: MODELRT_BLOCK=8: the blocked convolutions run in f32 (bf16 needs nChw16c)", m->desc->name);
    }
    /* nhwc where modelc asks (mrt_blk_nhwc): oneDNN 2.6's nhwc kernels that beat its nChw16c ones
     * are brgconv:avx512_core, f32; with nChw8c or bf16 every op stays in the blocked layout
     * (MODELRT_NHWC=0 too: the tests compare both) */
    b->nhwc = b->block == 16 && !b->bf16 && rt_env_flag("MODELRT_NHWC", 1);
    dnnl_status_t s = dnnl_engine_create(&b->eng, dnnl_cpu, 0);
    if (s == dnnl_success) s = dnnl_stream_create(&b->stream, b->eng, dnnl_stream_default_flags);
    m->blk = b;
    if (s != dnnl_success)
        return mrt_set_error(MRT_ERR_INTERNAL, "%s: oneDNN cpu engine creation failed: %s", m->desc->name, dnnl_what(s));
    return MRT_OK;
}

mrt_status mrt_blk_store_bf16(mrt_model *m, int i, int src_bf16, int dst_bf16) {
    mrt_blk *b = blk_of(m, i, "mrt_blk_store_bf16");
    if (!b) return MRT_ERR_INVALID_ARG;
    b->ops[i].src_bf16 = src_bf16 != 0, b->ops[i].dst_bf16 = dst_bf16 != 0;
    return MRT_OK;
}

mrt_status mrt_blk_nhwc(mrt_model *m, int i, int op_nhwc, int src_nhwc, int dst_nhwc) {
    mrt_blk *b = blk_of(m, i, "mrt_blk_nhwc");
    if (!b) return MRT_ERR_INVALID_ARG;
    b->ops[i].nhwc = op_nhwc != 0, b->ops[i].src_nhwc = src_nhwc != 0, b->ops[i].dst_nhwc = dst_nhwc != 0;
    return MRT_OK;
}

/* An op that modelc marks nhwc is one layout_nhwc can mark: a conv of groups 1 with C and O
 * multiples of 16 (no padded channels); a pooling in its source's layout. */
static mrt_status blk_check_nhwc(const blk_op *op) {
    if (op->kind == 0 && op->nhwc && (op->cp.groups != 1 || op->cp.C % 16 || op->cp.O % 16))
        return mrt_set_error(MRT_ERR_INVALID_ARG, "%s: an nhwc convolution needs groups 1 and C, O multiples of 16 "
                             "(groups %d, C %lld, O %lld)", op->what, op->cp.groups, (long long)op->cp.C, (long long)op->cp.O);
    if (op->kind == 1 && op->nhwc != op->src_nhwc)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "%s: a pooling computes in its source's layout (nhwc %d, source nhwc %d)",
                             op->what, op->nhwc, op->src_nhwc);
    if ((op->src_nhwc && !op->src_blocked) || (op->dst_nhwc && !op->dst_blocked))
        return mrt_set_error(MRT_ERR_INVALID_ARG, "%s: an nhwc value is a blocked one (src %s, dst %s)", op->what,
                             op->src_blocked ? "blocked" : "nchw", op->dst_blocked ? "blocked" : "nchw");
    return MRT_OK;
}

/* op's data types (blk_op.sdt, ddt, cdt) once its kind and layouts are set: bf16 only where the
 * model computes in bf16 here (else every value is f32, as the plan's buffers allow either). A
 * bf16 value is always blocked; a conv's residual is stored as its result (modelc makes both
 * the same type). */
static mrt_status blk_types(const mrt_blk *b, blk_op *op) {
    if ((op->src_bf16 && !op->src_blocked) || (op->dst_bf16 && !op->dst_blocked))
        return mrt_set_error(MRT_ERR_INVALID_ARG, "%s: a bf16 value must be blocked (src %s, dst %s)", op->what,
                             op->src_blocked ? "blocked" : "nchw", op->dst_blocked ? "blocked" : "nchw");
    op->sdt = b->bf16 && op->src_bf16 ? dnnl_bf16 : dnnl_f32;
    op->ddt = b->bf16 && op->dst_bf16 ? dnnl_bf16 : dnnl_f32;
    op->cdt = op->kind == 0 ? (b->bf16 ? dnnl_bf16 : dnnl_f32) : op->sdt;
    return MRT_OK;
}

/* op->gain, bmax, negzero (blk_op) of a conv of a pair: from its plain weights (NaN without
 * them: the pair then never skips its passes) and summed bias, at load. */
static void blk_gain(blk_op *op) {
    const mrt_conv2d_params *p = &op->cp;
    op->gain = op->bmax = NAN;
    if (!op->w) return;
    const int64_t per = p->C / p->groups * p->kh * p->kw;
    double g = 0, bm = 0;
    int bad = 0;
    for (int64_t o = 0; o < p->O; o++) {
        double sum = 0;
        for (int64_t t = 0; t < per; t++) sum += fabs((double)op->w[o * per + t]);
        bad |= !isfinite(sum);
        g = sum > g ? sum : g;
        if (op->bias) {
            float v = op->bias[o];
            bad |= !isfinite(v);
            bm = fabs((double)v) > bm ? fabs((double)v) : bm;
            op->negzero |= v == 0.0f && signbit(v);
        }
    }
    if (!bad) op->gain = g, op->bmax = bm;
}

mrt_status mrt_blk_add_conv(mrt_model *m, int i, const mrt_conv2d_params *p, int src_blocked, int dst_blocked,
                            const float *w, const float *const *bias, int nbias, int has_res, int act, float lo, float hi,
                            int winograd, const char *what) {
    mrt_blk *b = blk_of(m, i, "mrt_blk_add_conv");
    if (!b) return MRT_ERR_INVALID_ARG;
    blk_op *op = &b->ops[i];
    op->kind = 0;
    op->cp = *p;
    op->src_blocked = src_blocked, op->dst_blocked = dst_blocked, op->has_res = has_res, op->act = act;
    op->lo = lo, op->hi = hi;
    if (act < 0 || act > 4)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "%s: %s: unknown activation %d (0 none, 1 relu, 2 clamp, 3 silu, "
                             "4 hardswish)", m->desc->name, what, act);
    snprintf(op->what, sizeof op->what, "%s: %s", m->desc->name, what);
    if (blk_types(b, op) != MRT_OK || blk_check_nhwc(op) != MRT_OK) return MRT_ERR_INVALID_ARG;
    /* oneDNN 2.6's Winograd kernels are f32 only (a bf16 conv is direct, and faster), and have no
     * grouped variant */
    op->winograd = winograd && op->cdt == dnnl_f32 && p->groups == 1 && p->kh == 3 && p->kw == 3 && p->sh == 1 &&
                   p->sw == 1 && p->dh == 1 && p->dw == 1;
    op->w = w;
    if (p->groups < 1 || p->C % p->groups || p->O % p->groups ||
        (p->groups > 1 && (p->O % b->block || p->C % b->block)))
        return mrt_set_error(MRT_ERR_INVALID_ARG, "%s: not a blocked convolution (groups %d, C %lld, O %lld)", op->what,
                             p->groups, (long long)p->C, (long long)p->O);
    if (nbias > 0) {
        if (!(op->bias = malloc(sizeof(float) * (size_t)p->O)))
            return mrt_set_error(MRT_ERR_OOM, "%s: cannot allocate its bias", op->what);
        for (int64_t o = 0; o < p->O; o++) {
            float s = bias[0][o];
            for (int j = 1; j < nbias; j++) s += bias[j][o];
            op->bias[o] = s;
        }
    }
    blk_prim *e;
    int64_t N = b->max_batch;
    return blk_get(b, op, N, &e);
}

mrt_status mrt_blk_add_pool(mrt_model *m, int i, const mrt_pool2d_params *p, int dst_blocked, const char *what) {
    mrt_blk *b = blk_of(m, i, "mrt_blk_add_pool");
    if (!b) return MRT_ERR_INVALID_ARG;
    blk_op *op = &b->ops[i];
    op->kind = 1;
    op->pp = *p;
    op->src_blocked = 1, op->dst_blocked = dst_blocked;
    snprintf(op->what, sizeof op->what, "%s: %s", m->desc->name, what);
    if (blk_types(b, op) != MRT_OK || blk_check_nhwc(op) != MRT_OK) return MRT_ERR_INVALID_ARG;
    if (p->C % b->block)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "%s: not a blocked pooling (C %lld)", op->what, (long long)p->C);
    blk_prim *e;
    return blk_get(b, op, b->max_batch, &e);
}

/* Run op i at batch N: y (blocked or NCHW, as created) from x, res added by the sum post-op. */
/* A bf16 value's float (its top 16 bits), and a float rounded to bf16 (to nearest even; a NaN
 * stays a quiet NaN). */
static float bf16_f(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static uint16_t f_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

/* relu / clamp (op->act 1, 2) on a conv's result in place, as mrt_clamp orders it (x < lo ? lo :
 * x > hi ? hi : x): a NaN stays NaN and -0.0 stays -0.0 (field case B13), where oneDNN's relu and
 * clip post-ops (vmaxps/vminps) give the bound. buf is the primitive's blocked result
 * [N][ceil(O/b)][OH*OW][b] of its type; only the real channels are touched, so the padding of a
 * partial last block stays 0. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define BLK_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
/* blk_clamp's 16 lanes of S positions, with AVX-512 (the same comparisons, so the same bits) */
BLK_AVX512 static void clamp16_f32(float *p, int64_t S, float lo, float hi) {
    const __m512 l = _mm512_set1_ps(lo), h = _mm512_set1_ps(hi);
    for (int64_t q = 0; q < S; q++, p += 16) {
        __m512 v = _mm512_loadu_ps(p);
        v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, l, _CMP_LT_OQ), v, l);
        v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, h, _CMP_GT_OQ), v, h);
        _mm512_storeu_ps(p, v);
    }
}
BLK_AVX512 static void clamp16_bf16(uint16_t *p, int64_t S, float lo, float hi, uint16_t lob, uint16_t hib) {
    const __m512 l = _mm512_set1_ps(lo), h = _mm512_set1_ps(hi);
    const __m256i lb = _mm256_set1_epi16((short)lob), hb = _mm256_set1_epi16((short)hib);
    for (int64_t q = 0; q < S; q++, p += 16) {
        __m256i raw = _mm256_loadu_si256((const __m256i *)p);
        __m512 v = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
        __mmask16 ml = _mm512_cmp_ps_mask(v, l, _CMP_LT_OQ), mh = _mm512_cmp_ps_mask(v, h, _CMP_GT_OQ);
        raw = _mm256_mask_blend_epi16(ml, raw, lb);
        raw = _mm256_mask_blend_epi16(mh, raw, hb);
        _mm256_storeu_si256((__m256i *)p, raw);
    }
}
#endif

static void blk_clamp(const mrt_blk *b, const blk_op *op, void *buf, int64_t N) {
    const int64_t O = op->cp.O, S = op->cp.OH * op->cp.OW, bk = b->block, CB = (O + bk - 1) / bk;
    const float lo = op->act == 1 ? 0.0f : op->lo, hi = op->act == 1 ? INFINITY : op->hi;
    const int bf = blk_prim_ddt(op) == dnnl_bf16;
    const uint16_t lob = f_bf16(lo), hib = f_bf16(hi);
#ifdef BLK_AVX512
    const int avx = bk == 16 && mrt_cpu_simd_avx512();
#endif
    MRT_PRAGMA(omp parallel for schedule(static) if (N * CB * S * bk >= MRT_PAR_MIN))
    for (int64_t nc = 0; nc < N * CB; nc++) {
        const int64_t lanes = O - (nc % CB) * bk < bk ? O - (nc % CB) * bk : bk;
#ifdef BLK_AVX512
        if (avx && lanes == 16) {
            if (bf) clamp16_bf16((uint16_t *)buf + nc * S * bk, S, lo, hi, lob, hib);
            else clamp16_f32((float *)buf + nc * S * bk, S, lo, hi);
            continue;
        }
#endif
        if (!bf) {
            float *p = (float *)buf + nc * S * bk;
            for (int64_t q = 0; q < S; q++, p += bk)
                for (int64_t l = 0; l < lanes; l++) p[l] = mrt_clamp(p[l], lo, hi);
        } else {
            uint16_t *p = (uint16_t *)buf + nc * S * bk;
            for (int64_t q = 0; q < S; q++, p += bk)
                for (int64_t l = 0; l < lanes; l++) {
                    float v = bf16_f(p[l]);
                    p[l] = v < lo ? lob : v > hi ? hib : p[l];
                }
        }
    }
}

#ifdef BLK_AVX512
/* Whether f32 x[0, n) holds a NaN: blk_has_nan's test (a value unordered with itself), 64 lanes
 * an iteration. */
BLK_AVX512 static int has_nan_f32_avx512(const float *x, size_t n) {
    __mmask16 m = 0;
    size_t j = 0;
    for (; j + 64 <= n; j += 64) {
        __m512 a = _mm512_loadu_ps(x + j), b = _mm512_loadu_ps(x + j + 16), c = _mm512_loadu_ps(x + j + 32),
               d = _mm512_loadu_ps(x + j + 48);
        m |= _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q) |
             _mm512_cmp_ps_mask(c, c, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(d, d, _CMP_UNORD_Q);
    }
    for (; j < n; j++) m |= x[j] != x[j];
    return m != 0;
}
#endif

/* Whether the blocked value x (n elements of type dt, in any layout) holds a NaN. */
static int blk_has_nan(const void *x, size_t n, dnnl_data_type_t dt) {
    int any = 0;
#ifdef BLK_AVX512
    /* the f32 scan with AVX-512, in chunks of 16384 floats (64 KiB) over the threads: the scalar
     * loop below was 2.2% of ResNet-18 b1's CPU time (its max pooling's 64x112x112 source) */
    if (dt != dnnl_bf16 && mrt_cpu_simd_avx512()) {
        const size_t ch = 16384, nch = (n + ch - 1) / ch;
        const float *f = x;
        MRT_PRAGMA(omp parallel for schedule(static) reduction(| : any) if (n >= MRT_PAR_MIN))
        for (size_t c = 0; c < nch; c++) any |= has_nan_f32_avx512(f + c * ch, n - c * ch < ch ? n - c * ch : ch);
        return any;
    }
#endif
    if (dt == dnnl_bf16) {
        const uint16_t *h = x;
        MRT_PRAGMA(omp parallel for schedule(static) reduction(| : any) if (n >= MRT_PAR_MIN))
        for (size_t j = 0; j < n; j++) any |= (h[j] & 0x7fff) > 0x7f80;
    } else {
        const uint32_t *u = x;
        MRT_PRAGMA(omp parallel for schedule(static) reduction(| : any) if (n >= MRT_PAR_MIN))
        for (size_t j = 0; j < n; j++) any |= (u[j] & 0x7fffffffu) > 0x7f800000u;
    }
    return any;
}

/* Whether pooling window (oh, ow) of one channel holds a NaN: element (h, w) of the channel at
 * index at + (h * W + w) * step of x (f32, or bf16 where bf). */
static int blk_window_nan(const mrt_pool2d_params *p, const void *x, int bf, size_t at, size_t step, int64_t oh,
                          int64_t ow) {
    for (int i = 0; i < p->kh; i++) {
        int64_t h = oh * p->sh - p->pt + (int64_t)i * p->dh;
        if (h < 0 || h >= p->H) continue;
        for (int j = 0; j < p->kw; j++) {
            int64_t w = ow * p->sw - p->pl + (int64_t)j * p->dw;
            if (w < 0 || w >= p->W) continue;
            size_t e = at + (size_t)(h * p->W + w) * step;
            if (bf ? (((const uint16_t *)x)[e] & 0x7fff) > 0x7f80 : (((const uint32_t *)x)[e] & 0x7fffffffu) > 0x7f800000u)
                return 1;
        }
    }
    return 0;
}

/* After oneDNN's max pooling, which drops a NaN (vmaxps): every output whose window holds a NaN
 * becomes NaN, as mrt_maxpool2d gives and PyTorch does (field case B13). Runs only when the source
 * has a NaN (blk_has_nan), so its scalar loops cost nothing otherwise. In nhwc (f32 only) element
 * (n, c, h, w) is at ((n*H + h)*W + w)*C + c; in the blocked layout at ((nc*H + h)*W + w)*bk + l,
 * nc = n*CB + c / bk, l = c % bk. */
static void blk_pool_nan(const mrt_blk *b, const blk_op *op, const void *x, void *y, int64_t N) {
    const mrt_pool2d_params *p = &op->pp;
    const int64_t bk = b->block, CB = (p->C + bk - 1) / bk;
    const int bf = op->sdt == dnnl_bf16;
    if (op_tag(b, op) == dnnl_nhwc) {
        MRT_PRAGMA(omp parallel for schedule(static))
        for (int64_t noh = 0; noh < N * p->OH; noh++)
            for (int64_t ow = 0; ow < p->OW; ow++)
                for (int64_t c = 0; c < p->C; c++) {
                    const int64_t n = noh / p->OH, oh = noh % p->OH;
                    if (blk_window_nan(p, x, 0, (size_t)(n * p->H * p->W * p->C + c), (size_t)p->C, oh, ow))
                        ((float *)y)[(noh * p->OW + ow) * p->C + c] = NAN;
                }
        return;
    }
    MRT_PRAGMA(omp parallel for schedule(static))
    for (int64_t nc = 0; nc < N * CB; nc++)
        for (int64_t oh = 0; oh < p->OH; oh++)
            for (int64_t ow = 0; ow < p->OW; ow++)
                for (int64_t l = 0; l < bk; l++) {
                    if (!blk_window_nan(p, x, bf, (size_t)(nc * p->H * p->W * bk + l), (size_t)bk, oh, ow)) continue;
                    size_t o = (size_t)(((nc * p->OH + oh) * p->OW + ow) * bk + l);
                    if (bf) ((uint16_t *)y)[o] = 0x7fc0;
                    else ((float *)y)[o] = NAN;
                }
}

/* Run op i at batch N: y (blocked or NCHW, as created) from x, res added by the sum post-op.
 * clip: the relu / clamp as oneDNN's post-op (e->prim_clip), where no NaN can reach it. Op j of
 * a pair whose op i ran fused (op->skip) returns at once; one whose source op i found bounded
 * (op->src_bounded) runs with clip. */
static mrt_status blk_run(mrt_model *m, int i, int64_t N, float *y, const float *x, const float *res, int kind, int clip) {
    mrt_blk *b = blk_of(m, i, kind ? "mrt_blk_pool_run" : "mrt_blk_conv_run");
    if (!b) return MRT_ERR_INVALID_ARG;
    blk_op *op = &b->ops[i];
    if (op->skip) return op->skip = 0, MRT_OK;
    if (op->src_bounded) clip = 1, op->src_bounded = 0;
    blk_prim *e;
    mrt_status st = blk_get(b, op, N, &e);
    if (st != MRT_OK) return st;
    clip = clip && e->prim_clip && (op->act == 1 || op->act == 2);
    float *work = blk_reorder_out(b, op) ? (float *)b->tmp : y;
    if (op->has_res && res != work) { /* res is stored as the primitive writes its result, padded as it is */
        size_t n = e->dst_bytes;
        char *wb = (char *)work;
        const char *rb = (const char *)res;
#pragma omp parallel for schedule(static)
        for (size_t j = 0; j < n; j += 16384) memcpy(wb + j, rb + j, n - j < 16384 ? n - j : 16384);
    }
    if (e->in_reorder) { /* an NCHW source to blocked, or f32 to the conv's bf16, first */
        dnnl_memory_set_data_handle(e->plain_src, (void *)x);
        dnnl_memory_set_data_handle(e->src, b->tmp_in);
        dnnl_exec_arg_t r[] = {{DNNL_ARG_FROM, e->plain_src}, {DNNL_ARG_TO, e->src}};
        BLK_TRY(dnnl_primitive_execute(e->in_reorder, b->stream, 2, r), op, "reorder of the source");
        x = b->tmp_in;
    }
    dnnl_memory_set_data_handle(e->src, (void *)x);
    dnnl_memory_set_data_handle(e->dst, work);
    dnnl_memory_set_data_handle(e->scratch, b->scratch);
    dnnl_exec_arg_t a[5] = {{DNNL_ARG_SRC, e->src}, {DNNL_ARG_DST, e->dst}, {DNNL_ARG_SCRATCHPAD, e->scratch}};
    int na = 3;
    if (e->w) a[na++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, e->w};
    if (e->bias) a[na++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, e->bias};
    BLK_TRY(dnnl_primitive_execute(clip ? e->prim_clip : e->prim, b->stream, na, a), op, "execution");
    if (op->kind == 0 && (op->act == 1 || op->act == 2) && !clip) {
        BLK_TRY(dnnl_stream_wait(b->stream), op, "stream wait");
        blk_clamp(b, op, work, N);
    } else if (op->kind == 1) {
        size_t n = (size_t)N * (size_t)((op->pp.C + b->block - 1) / b->block) * (size_t)b->block * (size_t)op->pp.H *
                   (size_t)op->pp.W;
        BLK_TRY(dnnl_stream_wait(b->stream), op, "stream wait");
        if (blk_has_nan(x, n, op->sdt)) blk_pool_nan(b, op, x, work, N);
    }
    if (e->out_reorder) {
        dnnl_memory_set_data_handle(e->tmp_blk, work);
        dnnl_memory_set_data_handle(e->plain_dst, y);
        dnnl_exec_arg_t r[] = {{DNNL_ARG_FROM, e->tmp_blk}, {DNNL_ARG_TO, e->plain_dst}, {DNNL_ARG_SCRATCHPAD, e->scratch}};
        BLK_TRY(dnnl_primitive_execute(e->out_reorder, b->stream, 3, r), op, "reorder of the result");
    }
    BLK_TRY(dnnl_stream_wait(b->stream), op, "stream wait");
    return MRT_OK;
}

mrt_status mrt_blk_conv_run(mrt_model *m, int i, int64_t N, float *y, const float *x, const float *res) {
    return blk_run(m, i, N, y, x, res, 0, 0);
}

mrt_status mrt_blk_pool_run(mrt_model *m, int i, int64_t N, float *y, const float *x) {
    return blk_run(m, i, N, y, x, NULL, 1, 0);
}
/* The largest |v| of n floats, as its bits with the sign cleared: above 0x7f7fffff when one is
 * NaN or infinite. The order of a max does not change it, so any thread count gives the same. */
#ifdef BLK_AVX512
BLK_AVX512 static uint32_t absmax_avx512(const uint32_t *u, size_t n) {
    const __m512i mask = _mm512_set1_epi32(0x7fffffff);
    __m512i m = _mm512_setzero_si512();
    size_t j = 0;
    for (; j + 16 <= n; j += 16) m = _mm512_max_epu32(m, _mm512_and_si512(_mm512_loadu_si512(u + j), mask));
    uint32_t r = _mm512_reduce_max_epu32(m);
    for (; j < n; j++) r = (u[j] & 0x7fffffffu) > r ? u[j] & 0x7fffffffu : r;
    return r;
}
#endif
static uint32_t blk_absmax_bits(const float *x, size_t n) {
    const uint32_t *u = (const uint32_t *)x;
    uint32_t r = 0;
    const size_t chunk = 1 << 14;
    MRT_PRAGMA(omp parallel for schedule(static) reduction(max : r) if (n >= MRT_PAR_MIN))
    for (size_t c = 0; c < n; c += chunk) {
        size_t len = n - c < chunk ? n - c : chunk;
        uint32_t v = 0;
#ifdef BLK_AVX512
        if (mrt_cpu_simd_avx512()) v = absmax_avx512(u + c, len);
        else
#endif
            for (size_t j = 0; j < len; j++) v = (u[c + j] & 0x7fffffffu) > v ? u[c + j] & 0x7fffffffu : v;
        r = v > r ? v : r;
    }
    return r;
}

/* The elements of op's stored source at batch N: blocked, C padded to whole blocks; or NCHW. */
static size_t blk_src_elems(const mrt_blk *b, const blk_op *op, int64_t N) {
    const mrt_conv2d_params *p = &op->cp;
    int64_t c = op->src_blocked ? (p->C + b->block - 1) / b->block * b->block : p->C;
    return (size_t)N * (size_t)c * (size_t)p->H * (size_t)p->W;
}

/* Whether a pair's relu / clamp may run as oneDNN's post-ops at this run (its source x, op i's,
 * at batch N): no NaN or infinity can reach them, so they give what blk_clamp gives. Always
 * when neither op has a relu or clamp (its other post-ops are those of the two ops). Else x
 * must be finite, |x| <= M, and the bounds M * gain + bmax of op i's result and (after its
 * activation: a clamp's bound, or that one) of op j's below FLT_MAX / 4, which leaves room for
 * the rounding of any order of the sums; and no -0.0 in a bias (without one no sum is -0.0:
 * oneDNN's accumulators start at +0.0, and +0.0 + -0.0 is +0.0), whose clamp blk_clamp keeps. */
static int blk_pair_bounded(const mrt_blk *b, const blk_op *op, const blk_op *dj, const float *x, int64_t N) {
    int ci = op->act == 1 || op->act == 2, cj = dj->act == 1 || dj->act == 2;
    if (!ci && !cj) return 1;
    if (op->negzero || dj->negzero || (op->act == 2 && !(op->lo <= op->hi)) || (dj->act == 2 && !(dj->lo <= dj->hi)))
        return 0;
    uint32_t u = blk_absmax_bits(x, blk_src_elems(b, op, N));
    if (u > 0x7f7fffffu) return 0;
    float mx;
    memcpy(&mx, &u, sizeof mx);
    const double lim = FLT_MAX / 4.0;
    double yi = (double)mx * op->gain + op->bmax; /* NaN when a weight is not finite: fails below */
    if (!(yi < lim)) return 0;
    if (op->act == 2) {
        double c = fabs(op->lo) > fabs(op->hi) ? fabs(op->lo) : fabs(op->hi);
        yi = c < yi ? c : yi;
    }
    return yi * dj->gain + dj->bmax < lim;
}

mrt_status mrt_blk_pair(mrt_model *m, int i, int j) {
    mrt_blk *b = blk_of(m, i, "mrt_blk_pair");
    if (!b) return MRT_ERR_INVALID_ARG;
    if (j < 0 || j >= b->nops || j == i)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_blk_pair: op %d cannot pair with op %d", i, j);
    blk_op *op = &b->ops[i], *dj = &b->ops[j];
    const mrt_conv2d_params *p = &op->cp, *q = &dj->cp;
    int ok = op->kind == 0 && dj->kind == 0 && op->ncache > 0 && dj->ncache > 0 && op->pair < 0 && op->pair_of < 0 &&
             dj->pair < 0 && dj->pair_of < 0 && op->dst_blocked && dj->src_blocked && !op->has_res && !dj->has_res &&
             q->C == p->O && q->H == p->OH && q->W == p->OW;
    if (!ok)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "%s and %s: not a pair of convs (the second reading the first's "
                             "blocked result, no residual, each in one pair)", op->what, dj->what);
    /* the shapes oneDNN fuses: a 1x1 conv, then a 3x3 depthwise one of stride 1 or 2 and padding 1 */
    int dw = op->src_blocked && p->groups == 1 && p->kh == 1 && p->kw == 1 && p->sh == 1 && p->sw == 1 && p->pt == 0 &&
             p->pl == 0 && p->OH == p->H && p->OW == p->W && q->O == p->O && q->groups == q->C && q->kh == 3 &&
             q->kw == 3 && q->sh == q->sw && (q->sh == 1 || q->sh == 2) && q->pt == 1 && q->pl == 1 && q->dh == 1 &&
             q->dw == 1 && q->OH == (q->H - 1) / q->sh + 1 && q->OW == (q->W - 1) / q->sw + 1 && dj->dst_blocked;
    if (op->cdt != dnnl_f32 || dj->cdt != dnnl_f32 || op->sdt != dnnl_f32 || dj->ddt != dnnl_f32 || op->ddt != dnnl_f32)
        return MRT_OK; /* bf16: two ops, as before */
    int big = (double)p->O * (double)p->OH * (double)p->OW * sizeof(float) >= (double)MRT_BLK_FUSE_BYTES;
    /* unset: by size; 1 / 0 force it. Never without a bias on the 1x1 conv: oneDNN 2.6's fused
     * kernel faults (SIGSEGV) there, so that pair runs as two primitives (numeric
     * blocked_dwpair_nobias: MobileNetV2's front with its batch norms not folded in) */
    op->fuse = dw && op->bias && rt_env_flag("MODELRT_BLK_FUSE", big);
    if (op->fuse && !dj->bias && !(dj->zero_bias = calloc((size_t)q->O, sizeof(float))))
        return mrt_set_error(MRT_ERR_OOM, "%s: cannot allocate its bias", dj->what);
    op->pair = j, dj->pair_of = i;
    blk_gain(op), blk_gain(dj); /* from the plain weights: modelc calls this before it releases them */
    mrt_status st = MRT_OK;
    for (int k = 0; k < dj->ncache && st == MRT_OK; k++) st = blk_make_pair(b, dj, &dj->cache[k], dj->cache[k].N);
    for (int k = 0; k < op->ncache && st == MRT_OK; k++) st = blk_make_pair(b, op, &op->cache[k], op->cache[k].N);
    return st;
}

mrt_status mrt_blk_conv_pair_run(mrt_model *m, int i, int64_t N, float *y, const float *x, float *y2) {
    mrt_blk *b = blk_of(m, i, "mrt_blk_conv_pair_run");
    if (!b) return MRT_ERR_INVALID_ARG;
    blk_op *op = &b->ops[i];
    if (op->pair < 0) return blk_run(m, i, N, y, x, NULL, 0, 0);
    blk_op *dj = &b->ops[op->pair];
    dj->skip = dj->src_bounded = 0;
    blk_prim *e, *ej;
    mrt_status st = blk_get(b, op, N, &e);
    if (st == MRT_OK) st = blk_get(b, dj, N, &ej);
    if (st != MRT_OK) return st;
    int bounded = blk_pair_bounded(b, op, dj, x, N);
    size_t xbytes = blk_src_elems(b, op, N) * sizeof(float);
    const char *xs = (const char *)x, *ys = (const char *)y2;
    int fused = bounded && e->prim_fused && (ys + ej->dst_bytes <= xs || xs + xbytes <= ys);
    if (!op->logged && rt_env_flag("MODELRT_BLOCKED_VERBOSE", 0)) { /* the first run only: the choice of each run */
        op->logged = 1;
        mrt_log(MRT_LOG_INFO, "%s: its first run (batch %lld): %s", op->what, (long long)N,
                fused     ? "fused with the depthwise conv after it"
                : bounded ? "two ops, a relu/clamp as a post-op where it has one"
                          : "two ops, relu/clamp after each (a NaN, an infinity or a value too large to bound)");
    }
    if (!bounded) return blk_run(m, i, N, y, x, NULL, 0, 0); /* as two ops, NaN kept */
    /* fused: op j's result now, unless the plan put it over x (x is read while it is written) */
    if (fused) {
        dnnl_memory_set_data_handle(e->src, (void *)x);
        dnnl_memory_set_data_handle(e->dst_fused, y2);
        dnnl_memory_set_data_handle(e->scratch, b->scratch);
        dnnl_exec_arg_t a[7] = {{DNNL_ARG_SRC, e->src},
                                {DNNL_ARG_DST, e->dst_fused},
                                {DNNL_ARG_SCRATCHPAD, e->scratch},
                                {DNNL_ARG_WEIGHTS, e->w},
                                {DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_WEIGHTS, e->w_dw},
                                {DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_BIAS, e->bias_dw}};
        int na = 6;
        if (e->bias) a[na++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, e->bias};
        BLK_TRY(dnnl_primitive_execute(e->prim_fused, b->stream, na, a), op, "execution (fused with the depthwise conv)");
        BLK_TRY(dnnl_stream_wait(b->stream), op, "stream wait");
        dj->skip = 1;
        return MRT_OK;
    }
    st = blk_run(m, i, N, y, x, NULL, 0, 1);
    dj->src_bounded = st == MRT_OK;
    return st;
}


void mrt_blk_free(mrt_model *m) {
    mrt_blk *b = m ? (mrt_blk *)m->blk : NULL;
    if (!b) return;
    for (int i = 0; i < b->nops; i++) {
        for (int j = 0; j < b->ops[i].ncache; j++) blk_prim_free(&b->ops[i].cache[j]);
        free(b->ops[i].bias);
        free(b->ops[i].zero_bias);
    }
    free(b->ops);
    free(b->scratch);
    free(b->tmp);
    free(b->tmp_in);
    if (b->stream) dnnl_stream_destroy(b->stream);
    if (b->eng) dnnl_engine_destroy(b->eng);
    free(b);
    m->blk = NULL;
}

mrt_status mrt_blk_release_weights(mrt_model *m, int i) {
    mrt_blk *b = blk_of(m, i, "mrt_blk_release_weights");
    if (!b) return MRT_ERR_INVALID_ARG;
    blk_op *op = &b->ops[i];
    /* kept for a Winograd op: oneDNN cannot reorder out of its Winograd weight format, and another
     * batch size may want another one */
    if (op->kind != 0 || op->winograd || !op->w || op->ncache < 1 || rt_env_flag("MODELRT_KEEP_WEIGHTS", 0)) return MRT_OK;
    /* the whole pages inside [w, w + bytes): other params may share the pages at its ends */
    size_t bytes = (size_t)op->cp.O * (size_t)(op->cp.C / op->cp.groups) * (size_t)op->cp.kh * (size_t)op->cp.kw * sizeof(float);
    mrt_cpu_release((void *)op->w, bytes);
    op->w = NULL;
    b->released = 1;
    return MRT_OK;
}

int mrt_blk_released(const mrt_model *m) {
    const mrt_blk *b = m ? (const mrt_blk *)m->blk : NULL;
    return b && b->released;
}

int mrt_blk_available(void) { return 1; }

#else /* no oneDNN: modelc built against this runtime never emits these calls */

static mrt_status blk_none(mrt_model *m) {
    return mrt_set_error(MRT_ERR_DEVICE, "%s: blocked convolutions need a runtime built with oneDNN (this one was "
                         "built with make DNNL=0); recompile the model with modelc --no-blocked-conv",
                         m && m->desc ? m->desc->name : "model");
}
mrt_status mrt_blk_create(mrt_model *m, int nops, int64_t max_batch) { return blk_none(m); }
mrt_status mrt_blk_add_conv(mrt_model *m, int i, const mrt_conv2d_params *p, int src_blocked, int dst_blocked,
                            const float *w, const float *const *bias, int nbias, int has_res, int act, float lo, float hi,
                            int winograd, const char *what) {
    return blk_none(m);
}
mrt_status mrt_blk_add_pool(mrt_model *m, int i, const mrt_pool2d_params *p, int dst_blocked, const char *what) {
    return blk_none(m);
}
mrt_status mrt_blk_store_bf16(mrt_model *m, int i, int src_bf16, int dst_bf16) { return blk_none(m); }
mrt_status mrt_blk_nhwc(mrt_model *m, int i, int op_nhwc, int src_nhwc, int dst_nhwc) { return blk_none(m); }
mrt_status mrt_blk_conv_run(mrt_model *m, int i, int64_t N, float *y, const float *x, const float *res) {
    return blk_none(m);
}
mrt_status mrt_blk_pool_run(mrt_model *m, int i, int64_t N, float *y, const float *x) { return blk_none(m); }
mrt_status mrt_blk_pair(mrt_model *m, int i, int j) { return blk_none(m); }
mrt_status mrt_blk_conv_pair_run(mrt_model *m, int i, int64_t N, float *y, const float *x, float *y2) {
    return blk_none(m);
}
void mrt_blk_free(mrt_model *m) { (void)m; }
mrt_status mrt_blk_release_weights(mrt_model *m, int i) { (void)i; return blk_none(m); }
int mrt_blk_released(const mrt_model *m) { (void)m; return 0; }
int mrt_blk_available(void) { return 0; }
#endif
