/*
 * rt_matmul.c — GEMMs against constant weights on the CPU: oneDNN matmul primitives created once
 * at load time (issue 12, CPU speed). The generated init() (run by mrt_model_load_weights once
 * the params are in place) calls mrt_matmul_prepare for each GEMM whose right operand is a param
 * or a load-time value; the generated run() calls mrt_matmul_run, which executes the primitive,
 * or says it did nothing and the generated code takes its usual path (mrt_gemm_f32 and the
 * epilogue loop). A prepared GEMM owns its primitive, its oneDNN memory objects and a user
 * scratchpad (dnnl_scratchpad_mode_user), so a run allocates nothing; dnnl_sgemm, which the
 * usual path calls, mallocs its packing buffers on every call.
 *
 * The weights stay where the plan put them, in their stored layout (ab, or ba for a transposed
 * [N, K] weight), unless this GEMM is their only reader (below). A packed COPY is ruled out by
 * memory (as much again as the weights: GPT-2 small +340 MB, above ONNX Runtime's peak RSS).
 *
 * Weights packed in place (MRT_MATMUL_PACK, issue 12): modelc sets the flag where the GEMM is the
 * weight's only reader in the whole program (no other kernel, load-time ones included, no graph
 * output, no tied embedding: GPT-2's wte stays plain) in an inference build on a slot not pinned
 * to a GPU. Here, f32 on a CPU device, a plan of 2 rows or more (a one-row plan keeps the GEMV,
 * faster there) and unless MODELRT_PACK_WEIGHTS=0, the first primitive is
 * made with format_tag any weights; when its layout differs from W's and takes no more bytes
 * (dnnl_memory_desc_get_size), W is reordered into it IN PLACE through one temporary copy of W
 * (mmap'd and unmapped in mm_pack_weights: a transient of one weight, 9.4 MB for GPT-2's MLP), else
 * W stays as stored and the primitive is made again for that. Measured (bench/gemm/RESULTS.md,
 * "the matmul primitive with packed weights"): GPT-2 small's [K, N] GEMMs run 11-54% faster from the
 * packed layout with cold weights (mlp c_fc and c_proj, whose 12 KB row stride is where the
 * in-place read is slowest, most), MiniLM's [N, K] ones 3-7%. From then on W is readable by this
 * GEMM's primitives alone: every row count, one row included, runs through a primitive (one per
 * row count, RT_MM_CACHE, sharing W as bf16 shares its converted weights; brgemm never splits K,
 * so the sums do not depend on the thread count: numeric packed_weights checks 1, 2 and 3 threads
 * bit for bit), a run that finds the handle busy waits, and a primitive oneDNN will not make at
 * some row count is an error (the usual path cannot read W). Loading the weights again rewrites W
 * plain and init() prepares (packs) it again (tests/numeric/run_aba.c loads twice).
 * mrt_model_copy_weights and mrt_model_save_weights refuse a model with packed weights
 * (rt_matmul_packed), and mrt_dp_load_weights has every replica read the file.
 *
 * Bias and gelu (tanh form) are
 * the primitive's bias and eltwise post-op; not relu, whose oneDNN post-op turns NaN into 0 where
 * mrt_relu keeps it (field case B13): modelc prepares a relu GEMM bare and runs its epilogue loop.
 * Every other epilogue is the generated loop after the primitive, measured 2026-12-05
 * (docs/runtime.md, "Epilogues of GEMMs against constant weights"): exact gelu is not oneDNN's
 * gelu_erf post-op, which gives +0.0 where PyTorch and mrt_gelu give -0.0 (x = -0.0, x below
 * about -5.4: B13; numeric packed_gemm_gelu_erf_zero) and is about 5x further from erf in double
 * (9 ulps against 2.6 on [-1, 0)), though it would have saved MiniLM's FFN a seventh of its time;
 * a residual add as oneDNN's binary post-op gave the same bits and no measurable gain (the loop
 * reads C back from the cache); and running the epilogue per block of rows while the block is in
 * the L2 cache gained nothing either (exact gelu is compute-bound, 0.7-0.8 ns an element from L2
 * or L3, and a block of rows re-reads the weights).
 *
 * Weights in place: a prepared primitive has a fixed row count: the plan's maximum (the batch
 * at --max-batch). A run with fewer rows, a one-row GEMM (its sums must not depend on the thread count:
 * mrt_cpu_sgemm's GEMV), a GPU slot, a build without oneDNN, or a primitive oneDNN could not
 * create at load (logged once per model, then the usual path: documented fallback, never wrong)
 * take the usual path. The handle is shared by the views of a model running micro-batches
 * (rt_pipe.c); a run that finds it busy in another thread takes the usual path too (packed or
 * bf16 weights: it waits).
 *
 * --precision bf16 (rt_model_bf16: the model asks, the slot is the CPU, and the CPU has bf16
 * instructions): the weights are converted once at prepare into a bf16 copy in oneDNN's preferred
 * layout (format_tag any: 8% faster than ba for GPT-2's tied 768x50257 head, the same elsewhere;
 * the f32 weights stay, since the usual path and other kernels read them), the source is converted
 * per call by a reorder into h->abuf, the sums and the result are f32 (brg:avx512_core_bf16, about
 * 2.2x the f32 primitive's rate on GPT-2's and MiniLM's shapes, one thread). Every row count runs
 * in bf16, one row included, so that a bf16 model's numbers do not depend on its batch: a
 * primitive per row count (RT_MM_CACHE, the prepared rows kept, another made on its first run and
 * sharing the bf16 weights, whose layout does not depend on the rows); brgemm splits rows and
 * columns among threads and never K, so no result depends on the thread count either (measured,
 * 1 to 8 threads, 1 to 128 rows).
 * A run that finds the GEMM busy waits for it rather than computing in f32.
 */
#include "rt_internal.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#ifdef MRT_WITH_DNNL
#include <dnnl.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

enum { RT_MM_CACHE = 4 }; /* bf16: primitives per GEMM, one per row count (the prepared one stays) */

/* One row count's primitive and its oneDNN memory objects (handles set at each run). */
typedef struct rt_mm_prim {
    int64_t rows;
#ifdef MRT_WITH_DNNL
    dnnl_primitive_t prim, cvt; /* the matmul; bf16: the reorder of A from f32 into h->abuf */
    dnnl_memory_t src, a32, wts, bias, dst, pad;
    size_t pad_bytes;
#endif
} rt_mm_prim;

typedef struct rt_matmul {
    int64_t rows, N, K;    /* rows: the prepared (largest) row count */
    int trans_b, act, has_bias, bf16;
    int pack, packed;      /* pack: asked (MRT_MATMUL_PACK); packed: W now holds the weights in h->wmd */
    const float *W;        /* the weights it was prepared for (run() passes them again) */
    atomic_int busy;
    rt_mm_prim e[RT_MM_CACHE]; /* f32 in place: e[0] alone; bf16, packed: e[0] the prepared rows, then others */
    int ne, next;
#ifdef MRT_WITH_DNNL
    dnnl_engine_t eng;
    dnnl_stream_t strm;
    dnnl_memory_desc_t wmd; /* bf16, packed: the weights as the primitives read them (wbuf, W) */
    void *wbuf, *abuf, *padbuf; /* bf16: the weights, A converted; the shared scratchpad */
    size_t abuf_bytes, padbuf_bytes;
#endif
} rt_matmul;

/* The model's table of prepared GEMMs, indexed by the id modelc gave each (m->matmul). */
typedef struct rt_matmul_table {
    int n;
    rt_matmul **h;
    int warned;
} rt_matmul_table;

static void mm_prim_free(rt_mm_prim *e)
{
#ifdef MRT_WITH_DNNL
    if (e->prim) dnnl_primitive_destroy(e->prim);
    if (e->cvt) dnnl_primitive_destroy(e->cvt);
    dnnl_memory_t *mems[] = {&e->src, &e->a32, &e->wts, &e->bias, &e->dst, &e->pad};
    for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++)
        if (*mems[i]) dnnl_memory_destroy(*mems[i]);
#endif
    memset(e, 0, sizeof *e);
}

static void matmul_free(rt_matmul *h)
{
    if (!h)
        return;
    for (int i = 0; i < h->ne; i++)
        mm_prim_free(&h->e[i]);
#ifdef MRT_WITH_DNNL
    if (h->strm) dnnl_stream_destroy(h->strm);
    if (h->eng) dnnl_engine_destroy(h->eng);
    free(h->wbuf);
    free(h->abuf);
    free(h->padbuf);
#endif
    free(h);
}

void rt_matmul_table_free(void *table)
{
    rt_matmul_table *t = table;
    if (!t)
        return;
    for (int i = 0; i < t->n; i++)
        matmul_free(t->h[i]);
    free(t->h);
    free(t);
}

/* ---------------------------------------------------------------- --precision bf16 */

#ifdef MRT_WITH_DNNL
static const char *isa_name(dnnl_cpu_isa_t isa)
{
    switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "unknown";
    }
}
#endif

int rt_cpu_bf16(void)
{
#ifdef MRT_WITH_DNNL
    /* the ISA values are feature masks (avx2_vnni, 0x407, compares above avx512_core_bf16) */
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    return ((unsigned)isa & (unsigned)dnnl_cpu_isa_avx512_core_bf16) == (unsigned)dnnl_cpu_isa_avx512_core_bf16;
#else
    return 0;
#endif
}

int rt_model_bf16(const mrt_model *m, mrt_device d)
{
    return m && m->desc && m->desc->precision == MRT_PRECISION_BF16 && d.kind == MRT_DEVICE_CPU && rt_cpu_bf16();
}

void rt_precision_notice(const mrt_model *m)
{
    static atomic_int said_cpu, said_gpu;
    if (!m || !m->desc || m->desc->precision != MRT_PRECISION_BF16)
        return;
    for (int s = 0; s < m->desc->n_slots; s++) {
        if (m->dev[s].kind == MRT_DEVICE_CPU && !rt_cpu_bf16() && !atomic_exchange(&said_cpu, 1)) {
#ifdef MRT_WITH_DNNL
            const char *isa = isa_name(dnnl_get_effective_cpu_isa());
#else
            const char *isa = "none: a runtime built without oneDNN";
#endif
            mrt_log(MRT_LOG_WARN, "%s was compiled with --precision bf16, but this CPU has no bf16 instructions "
                    "(avx512_bf16; oneDNN's ISA: %s): its convolutions and matmuls run in f32", m->desc->name, isa);
        }
        if (m->dev[s].kind == MRT_DEVICE_CUDA && !atomic_exchange(&said_gpu, 1))
            mrt_log(MRT_LOG_WARN, "%s was compiled with --precision bf16, which applies to the CPU's oneDNN "
                    "convolutions and matmuls only: on cuda:%d it runs in f32", m->desc->name, m->dev[s].index);
    }
}

#ifdef MRT_WITH_DNNL
/* Grow a buffer to at least `bytes` (64-byte aligned). Only when a primitive is made. */
static int mm_grow(void **buf, size_t *have, size_t bytes)
{
    if (bytes <= *have)
        return 1;
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p)
        return 0;
    free(*buf);
    *buf = p;
    *have = bytes;
    return 1;
}

/* h's primitive at `rows` rows into e, with its post-ops; 0 with *why set when oneDNN has none.
 * f32: A, W (where it is, ab or ba), C. bf16: A converted into h->abuf by a reorder, W from
 * h->wbuf: on the first call (the prepared rows) in the format oneDNN prefers (`any`; the
 * caller fills wbuf), later in that same format (h->wmd: it does not depend on the row count). */
static int mm_prim_make(rt_matmul *h, rt_mm_prim *e, int64_t rows, const char **why)
{
    memset(e, 0, sizeof *e);
    e->rows = rows;
    int64_t N = h->N, K = h->K;
    dnnl_data_type_t ct = h->bf16 ? dnnl_bf16 : dnnl_f32;
    dnnl_memory_desc_t smd, a32md, wmd, bmd, dmd;
    dnnl_dims_t sd = {rows, K}, wd = {K, N}, bd = {1, N}, dd = {rows, N};
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL, cpd = NULL;
    dnnl_matmul_desc_t desc;
    *why = "oneDNN refused the matmul";
    /* f32 weights [K, N] as stored: row-major [K, N] (ab), or [N, K] read transposed (ba) */
    if ((h->bf16 || h->packed) && h->ne > 0)
        wmd = h->wmd;
    else if (dnnl_memory_desc_init_by_tag(&wmd, 2, wd, ct, h->bf16 || h->pack ? dnnl_format_tag_any : h->trans_b ? dnnl_ba : dnnl_ab) !=
             dnnl_success)
        goto fail;
    if (dnnl_memory_desc_init_by_tag(&smd, 2, sd, ct, dnnl_ab) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&a32md, 2, sd, dnnl_f32, dnnl_ab) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&bmd, 2, bd, dnnl_f32, dnnl_ab) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&dmd, 2, dd, dnnl_f32, dnnl_ab) != dnnl_success ||
        dnnl_matmul_desc_init(&desc, &smd, &wmd, h->has_bias ? &bmd : NULL, &dmd) != dnnl_success ||
        dnnl_primitive_attr_create(&attr) != dnnl_success ||
        dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) != dnnl_success)
        goto fail;
    if (h->act) {
        if (dnnl_post_ops_create(&po) != dnnl_success ||
            dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_gelu_tanh, 0.0f, 0.0f) != dnnl_success ||
            dnnl_primitive_attr_set_post_ops(attr, po) != dnnl_success)
            goto fail;
    }
    /* oneDNN plans a primitive's threads when it is created (omp_get_max_threads()): a small
     * GEMM is planned for the calling thread alone (RT_GEMM_SERIAL_MACS), its conversion too */
    int nt = 0;
#ifdef _OPENMP
    if (rows * N * K < RT_GEMM_SERIAL_MACS && (nt = omp_get_max_threads()) > 1)
        omp_set_num_threads(1);
    else
        nt = 0;
#endif
    dnnl_status_t cst = dnnl_primitive_desc_create(&pd, &desc, attr, h->eng, NULL);
    if (cst == dnnl_success)
        cst = dnnl_primitive_create(&e->prim, pd);
    if (cst == dnnl_success && h->bf16) {
        cst = dnnl_reorder_primitive_desc_create(&cpd, &a32md, h->eng, &smd, h->eng, NULL);
        if (cst == dnnl_success)
            cst = dnnl_primitive_create(&e->cvt, cpd);
    }
#ifdef _OPENMP
    if (nt)
        omp_set_num_threads(nt);
#endif
    if (cst != dnnl_success)
        goto fail;
    const dnnl_memory_desc_t *qw = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    if ((h->bf16 || h->pack) && h->ne == 0)
        h->wmd = *qw;
    const dnnl_memory_desc_t *ps = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    size_t pbytes = ps ? dnnl_memory_desc_get_size(ps) : 0;
    if (!mm_grow(&h->padbuf, &h->padbuf_bytes, pbytes) ||
        (h->bf16 && !mm_grow(&h->abuf, &h->abuf_bytes, (size_t)rows * (size_t)K * 2))) {
        *why = "out of memory for its buffers";
        goto fail;
    }
    if (dnnl_memory_create(&e->src, &smd, h->eng, DNNL_MEMORY_NONE) != dnnl_success ||
        (h->bf16 && dnnl_memory_create(&e->a32, &a32md, h->eng, DNNL_MEMORY_NONE) != dnnl_success) ||
        dnnl_memory_create(&e->wts, qw, h->eng, DNNL_MEMORY_NONE) != dnnl_success ||
        dnnl_memory_create(&e->bias, &bmd, h->eng, DNNL_MEMORY_NONE) != dnnl_success ||
        dnnl_memory_create(&e->dst, &dmd, h->eng, DNNL_MEMORY_NONE) != dnnl_success ||
        (pbytes && dnnl_memory_create(&e->pad, ps, h->eng, DNNL_MEMORY_NONE) != dnnl_success))
        goto fail;
    e->pad_bytes = pbytes;
    dnnl_primitive_desc_destroy(pd);
    if (cpd) dnnl_primitive_desc_destroy(cpd);
    dnnl_primitive_attr_destroy(attr);
    if (po) dnnl_post_ops_destroy(po);
    return 1;
fail:
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (cpd) dnnl_primitive_desc_destroy(cpd);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (po) dnnl_post_ops_destroy(po);
    mm_prim_free(e);
    return 0;
}

/* Reorder the weights at src (desc smd) into dst (h->wmd) on h's engine and stream, waiting
 * for it: the one reorder both the bf16 conversion and the f32 packing run. */
static dnnl_status_t mm_reorder_weights(rt_matmul *h, const dnnl_memory_desc_t *smd, void *src, void *dst)
{
    dnnl_memory_t um = NULL, wm = NULL;
    dnnl_primitive_desc_t rpd = NULL;
    dnnl_primitive_t r = NULL;
    dnnl_status_t s = dnnl_memory_create(&um, smd, h->eng, src);
    if (s == dnnl_success) s = dnnl_memory_create(&wm, &h->wmd, h->eng, dst);
    if (s == dnnl_success) s = dnnl_reorder_primitive_desc_create(&rpd, smd, h->eng, &h->wmd, h->eng, NULL);
    if (s == dnnl_success) s = dnnl_primitive_create(&r, rpd);
    if (s == dnnl_success) {
        dnnl_exec_arg_t a[] = {{DNNL_ARG_FROM, um}, {DNNL_ARG_TO, wm}};
        s = dnnl_primitive_execute(r, h->strm, 2, a);
        if (s == dnnl_success) s = dnnl_stream_wait(h->strm);
    }
    if (r) dnnl_primitive_destroy(r);
    if (rpd) dnnl_primitive_desc_destroy(rpd);
    if (um) dnnl_memory_destroy(um);
    if (wm) dnnl_memory_destroy(wm);
    return s;
}

/* bf16: W (f32, ab or ba) converted into h->wbuf in h->wmd's format, once at prepare. */
static int mm_convert_weights(rt_matmul *h, const char **why)
{
    dnnl_memory_desc_t umd;
    dnnl_dims_t wd = {h->K, h->N};
    size_t wb = dnnl_memory_desc_get_size(&h->wmd);
    dnnl_status_t s = dnnl_memory_desc_init_by_tag(&umd, 2, wd, dnnl_f32, h->trans_b ? dnnl_ba : dnnl_ab);
    if (s == dnnl_success && !(h->wbuf = aligned_alloc(64, (wb + 63) / 64 * 64 + 64)))
        s = dnnl_out_of_memory;
    if (s == dnnl_success) s = mm_reorder_weights(h, &umd, (void *)h->W, h->wbuf);
    if (s != dnnl_success)
        *why = s == dnnl_out_of_memory ? "out of memory for its bf16 weights" : "oneDNN refused the bf16 weight reorder";
    return s == dnnl_success;
}

/* f32, MRT_MATMUL_PACK: W (ab or ba) reordered in place into h->wmd, the layout the first
 * primitive (format_tag any) chose, through one temporary copy of W (freed here: a transient of one
 * weight's bytes). 1 when W now holds the packed weights (h->packed); 0 when they stay plain: the
 * packed layout takes more bytes than W has, it is W's own layout, or oneDNN or memory failed
 * (W is restored from the copy then). */
static int mm_pack_weights(rt_matmul *h)
{
    dnnl_memory_desc_t umd;
    dnnl_dims_t wd = {h->K, h->N};
    size_t plain = (size_t)h->K * (size_t)h->N * sizeof(float);
    if (dnnl_memory_desc_init_by_tag(&umd, 2, wd, dnnl_f32, h->trans_b ? dnnl_ba : dnnl_ab) != dnnl_success ||
        dnnl_memory_desc_get_size(&h->wmd) > plain || dnnl_memory_desc_equal(&umd, &h->wmd))
        return 0;
    /* mmap, not malloc: munmap gives the pages back at once, where glibc's dynamic mmap threshold
     * would keep a smaller weight's copy in the heap after the first large one (measured on GPT-2
     * small: +7 MB of peak RSS) */
    void *tmp = mmap(NULL, plain, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (tmp == MAP_FAILED)
        return 0;
    memcpy(tmp, h->W, plain);
    dnnl_status_t s = mm_reorder_weights(h, &umd, tmp, (void *)h->W); /* the params are writable */
    if (s != dnnl_success)
        memcpy((void *)h->W, tmp, plain); /* W as it was */
    munmap(tmp, plain);
    h->packed = s == dnnl_success;
    return h->packed;
}

/* The primitive for h's shape with its post-ops; NULL with *why set when oneDNN has none.
 * pack (f32): W packed in place when mm_pack_weights can, else in place as stored. */
static rt_matmul *matmul_create(int trans_b, int64_t rows, int64_t N, int64_t K, const float *W, int has_bias, int act,
                                int bf16, int pack, const char **why)
{
    rt_matmul *h = calloc(1, sizeof *h);
    if (!h) {
        *why = "out of memory";
        return NULL;
    }
    h->rows = rows, h->N = N, h->K = K, h->trans_b = trans_b, h->act = act, h->has_bias = has_bias, h->bf16 = bf16;
    h->pack = pack && !bf16;
    h->W = W;
    atomic_init(&h->busy, 0);
    *why = "oneDNN refused the matmul";
    if (dnnl_engine_create(&h->eng, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&h->strm, h->eng, dnnl_stream_default_flags) != dnnl_success ||
        !mm_prim_make(h, &h->e[0], rows, why) || (h->ne = 1, bf16 && !mm_convert_weights(h, why))) {
        matmul_free(h);
        return NULL;
    }
    if (h->pack && !mm_pack_weights(h)) { /* kept plain: the primitive for W as stored */
        mm_prim_free(&h->e[0]);
        h->ne = 0, h->pack = 0;
        if (!mm_prim_make(h, &h->e[0], rows, why)) {
            matmul_free(h);
            return NULL;
        }
        h->ne = 1;
    }
    return h;
}

/* bf16: h's primitive at `rows` rows, cached or made now (a cache entry other than the
 * prepared rows' may be replaced); NULL when oneDNN has none (*why). */
static rt_mm_prim *mm_prim_for(rt_matmul *h, int64_t rows, const char **why)
{
    for (int i = 0; i < h->ne; i++)
        if (h->e[i].rows == rows)
            return &h->e[i];
    if (!h->bf16 && !h->packed)
        return NULL;
    int slot = h->ne < RT_MM_CACHE ? h->ne : 1 + h->next++ % (RT_MM_CACHE - 1);
    if (slot < h->ne)
        mm_prim_free(&h->e[slot]);
    if (!mm_prim_make(h, &h->e[slot], rows, why)) {
        if (slot < h->ne) { /* the freed entry moves the last one into its place */
            h->e[slot] = h->e[h->ne - 1];
            memset(&h->e[--h->ne], 0, sizeof h->e[0]);
        }
        return NULL;
    }
    if (slot == h->ne)
        h->ne++;
    return &h->e[slot];
}
#endif

mrt_status mrt_matmul_prepare(mrt_model *m, int id, mrt_device d, int trans_b, int64_t rows, int64_t N, int64_t K,
                              const float *W, int has_bias, int act)
{
    int pack = (act & MRT_MATMUL_PACK) != 0;
    act &= ~MRT_MATMUL_PACK;
    if (!m || id < 0 || rows < 0 || N < 1 || K < 1 || !W || (act != MRT_ACT_NONE && act != MRT_ACT_GELU_TANH))
        return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_matmul_prepare: matmul %d: bad arguments (rows=%lld N=%lld "
                             "K=%lld act=%d)", id, (long long)rows, (long long)N, (long long)K, act);
    rt_matmul_table *t = m->matmul;
    if (!t) {
        if (!(t = calloc(1, sizeof *t)))
            return mrt_set_error(MRT_ERR_OOM, "%s: out of memory (%zu bytes) for the matmul table", m->desc->name,
                                 sizeof *t);
        m->matmul = t;
    }
    if (id >= t->n) {
        rt_matmul **h = realloc(t->h, sizeof *h * (size_t)(id + 1));
        if (!h)
            return mrt_set_error(MRT_ERR_OOM, "%s: out of memory (%zu bytes) for the matmul table", m->desc->name,
                                 sizeof *h * (size_t)(id + 1));
        memset(h + t->n, 0, sizeof *h * (size_t)(id + 1 - t->n));
        t->h = h;
        t->n = id + 1;
    }
    matmul_free(t->h[id]); /* weights loaded again: prepared again */
    t->h[id] = NULL;
#ifdef MRT_WITH_DNNL
    int bf16 = rt_model_bf16(m, d);
    /* f32: a one-row plan keeps mrt_cpu_sgemm's GEMV (its sums do not depend on the thread count),
     * its weights as stored: MobileNetV2's 1x1280 -> 1000 classifier took 0.25 ms on the GEMV and
     * 0.29-0.38 ms on the packed primitive (one thread). bf16 and packed f32 (rows >= 2): every
     * row count, one row included (oneDNN's brgemm splits rows and columns among threads, never K:
     * its sums do not depend on the thread count either, measured; numeric packed_weights checks
     * 1, 2 and 3 threads bit for bit) */
    pack = pack && !bf16 && rows >= 2 && rt_env_flag("MODELRT_PACK_WEIGHTS", 1);
    if (d.kind != MRT_DEVICE_CPU || rows < (bf16 ? 1 : 2))
        return MRT_OK;
    const char *why = NULL;
    t->h[id] = matmul_create(trans_b, rows, N, K, W, has_bias, act, bf16, pack, &why);
    if (!t->h[id] && !t->warned) {
        t->warned = 1;
        mrt_log(MRT_LOG_WARN, "%s: matmul %d (%lldx%lldx%lld%s): %s; it runs on dnnl_sgemm (and so does any other "
                "such matmul of this model)", m->desc->name, id, (long long)rows, (long long)N, (long long)K,
                bf16 ? ", bf16" : "", why ? why : "no primitive");
    }
#else
    (void)d, (void)trans_b, (void)has_bias, (void)pack;
#endif
    return MRT_OK;
}

mrt_status mrt_matmul_run(mrt_model *m, int id, int64_t rows, const float *A, const float *W, const float *bias,
                          float *C, int *done)
{
    *done = 0;
    rt_matmul_table *t = m->matmul;
    rt_matmul *h = t && id >= 0 && id < t->n ? t->h[id] : NULL;
    if (h && h->packed && rows >= 1 && (W != h->W || !bias != !h->has_bias))
        return mrt_set_error(MRT_ERR_INTERNAL, "%s: matmul %d holds its weights packed, but a run passed %s", m->desc->name,
                             id, W != h->W ? "other weights" : "another bias");
    if (!h || rows < 1 || (rows != h->rows && !h->bf16 && !h->packed) || W != h->W || !bias != !h->has_bias)
        return MRT_OK;
#ifdef MRT_WITH_DNNL
    int idle = 0;
    /* f32 in place: another view of the model in it takes the usual path (the same numbers);
     * bf16 waits its turn, since the usual path would compute in f32, and so do packed weights,
     * which the usual path cannot read */
    while (!atomic_compare_exchange_strong(&h->busy, &idle, 1)) {
        if (!h->bf16 && !h->packed)
            return MRT_OK;
        idle = 0;
        sched_yield();
    }
    const char *why = NULL;
    rt_mm_prim *e = mm_prim_for(h, rows, &why);
    if (!e && h->packed) {
        atomic_store(&h->busy, 0);
        return mrt_set_error(MRT_ERR_INTERNAL, "%s: matmul %d at %lld rows (%lldx%lldx%lld, packed weights): %s",
                             m->desc->name, id, (long long)rows, (long long)rows, (long long)h->N, (long long)h->K,
                             why ? why : "no primitive");
    }
    if (!e) {
        atomic_store(&h->busy, 0);
        if (!t->warned) {
            t->warned = 1;
            mrt_log(MRT_LOG_WARN, "%s: matmul %d at %lld rows (%lldx%lldx%lld, bf16): %s; it runs on dnnl_sgemm in f32 "
                    "(and so does any other such matmul of this model)", m->desc->name, id, (long long)rows,
                    (long long)rows, (long long)h->N, (long long)h->K, why ? why : "no primitive");
        }
        return MRT_OK;
    }
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, e->src}, {DNNL_ARG_WEIGHTS, e->wts}, {DNNL_ARG_DST, e->dst}};
    int n = 3;
    if (bias)
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, e->bias};
    if (e->pad)
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, e->pad};
    dnnl_status_t s = dnnl_memory_set_data_handle(e->src, h->bf16 ? h->abuf : (void *)A);
    if (s == dnnl_success) s = dnnl_memory_set_data_handle(e->wts, h->bf16 ? h->wbuf : (void *)W);
    if (s == dnnl_success) s = dnnl_memory_set_data_handle(e->dst, C);
    if (s == dnnl_success && bias) s = dnnl_memory_set_data_handle(e->bias, (void *)bias);
    if (s == dnnl_success && e->pad) s = dnnl_memory_set_data_handle(e->pad, h->padbuf);
    if (s == dnnl_success && h->bf16) { /* A to bf16 (round to nearest even) */
        s = dnnl_memory_set_data_handle(e->a32, (void *)A);
        dnnl_exec_arg_t r[] = {{DNNL_ARG_FROM, e->a32}, {DNNL_ARG_TO, e->src}};
        if (s == dnnl_success) s = dnnl_primitive_execute(e->cvt, h->strm, 2, r);
    }
    if (s == dnnl_success) s = dnnl_primitive_execute(e->prim, h->strm, n, args);
    if (s == dnnl_success) s = dnnl_stream_wait(h->strm);
    atomic_store(&h->busy, 0);
    if (s != dnnl_success)
        return mrt_set_error(MRT_ERR_INTERNAL, "%s: matmul %d (%lldx%lldx%lld%s) on cpu: oneDNN failed (status %d)",
                             m->desc->name, id, (long long)rows, (long long)h->N, (long long)h->K,
                             h->bf16 ? ", bf16" : "", (int)s);
    *done = 1;
#else
    (void)A, (void)C;
#endif
    return MRT_OK;
}

int rt_matmul_packed(const mrt_model *m)
{
    const rt_matmul_table *t = m ? m->matmul : NULL;
    const mrt_model_desc *d = m ? m->desc : NULL;
    for (int i = 0; t && d && i < t->n; i++) {
        if (!t->h[i] || !t->h[i]->packed)
            continue;
        /* a param's bytes, or a load-time value's (computed from the params at each load, so the
         * params stay plain: the reviewer's x @ (s * 2.0) beside x @ s) */
        const unsigned char *w = (const unsigned char *)t->h[i]->W;
        for (int j = 0; j < d->n_params; j++) {
            const mrt_param_desc *p = &d->params[j];
            if (p->region % 2 || !m->weights[p->region / 2])
                continue;
            uint64_t numel = 1;
            rt_shape_numel(p->shape, p->rank, &numel);
            const unsigned char *b = (const unsigned char *)m->weights[p->region / 2] + p->offset;
            if (w >= b && w < b + (size_t)numel * mrt_dtype_size(p->dtype))
                return 1;
        }
    }
    return 0;
}
