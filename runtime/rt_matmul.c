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
 * [N, K] weight): bench/gemm/RESULTS.md measured oneDNN 2.6's brgemm matmul on GPT-2's and
 * MiniLM's shapes with the weights reordered into its preferred packed layout (format_tag any)
 * and in place, and found no difference in rate (both within a few percent of dnnl_sgemm), so the
 * copy (as much memory again as the weights) buys nothing here. Bias and gelu (tanh form) are
 * the primitive's bias and eltwise post-op; not relu, whose oneDNN post-op turns NaN into 0 where
 * mrt_relu keeps it (field case B13): modelc prepares a relu GEMM bare and runs its epilogue loop.
 *
 * A prepared primitive has a fixed row count: the plan's maximum (the batch at --max-batch).
 * A run with fewer rows, a one-row GEMM (its sums must not depend on the thread count:
 * mrt_cpu_sgemm's GEMV), a GPU slot, a build without oneDNN, or a primitive oneDNN could not
 * create at load (logged once per model, then the usual path: documented fallback, never wrong)
 * take the usual path. The handle is shared by the views of a model running micro-batches
 * (rt_pipe.c); a run that finds it busy in another thread takes the usual path too.
 */
#include "rt_internal.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#ifdef MRT_WITH_DNNL
#include <dnnl.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

typedef struct rt_matmul {
    int64_t rows, N, K;
    int trans_b, act, has_bias;
    const float *W;        /* the weights it was prepared for (run() passes them again) */
    atomic_int busy;
#ifdef MRT_WITH_DNNL
    dnnl_engine_t eng;
    dnnl_stream_t strm;
    dnnl_primitive_t prim;
    dnnl_memory_t src, wts, bias, dst, pad;
    void *padbuf;
#endif
} rt_matmul;

/* The model's table of prepared GEMMs, indexed by the id modelc gave each (m->matmul). */
typedef struct rt_matmul_table {
    int n;
    rt_matmul **h;
    int warned;
} rt_matmul_table;

static void matmul_free(rt_matmul *h)
{
    if (!h)
        return;
#ifdef MRT_WITH_DNNL
    if (h->prim) dnnl_primitive_destroy(h->prim);
    if (h->src) dnnl_memory_destroy(h->src);
    if (h->wts) dnnl_memory_destroy(h->wts);
    if (h->bias) dnnl_memory_destroy(h->bias);
    if (h->dst) dnnl_memory_destroy(h->dst);
    if (h->pad) dnnl_memory_destroy(h->pad);
    if (h->strm) dnnl_stream_destroy(h->strm);
    if (h->eng) dnnl_engine_destroy(h->eng);
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

#ifdef MRT_WITH_DNNL
/* The primitive for h's shape with its post-ops; NULL with *why set when oneDNN has none. */
static rt_matmul *matmul_create(int trans_b, int64_t rows, int64_t N, int64_t K, const float *W, int has_bias, int act,
                                const char **why)
{
    rt_matmul *h = calloc(1, sizeof *h);
    if (!h) {
        *why = "out of memory";
        return NULL;
    }
    *h = (rt_matmul){.rows = rows, .N = N, .K = K, .trans_b = trans_b, .act = act, .has_bias = has_bias, .W = W};
    atomic_init(&h->busy, 0);
    dnnl_memory_desc_t smd, wmd, bmd, dmd;
    dnnl_dims_t sd = {rows, K}, wd = {K, N}, bd = {1, N}, dd = {rows, N};
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_matmul_desc_t desc;
    *why = "oneDNN refused the matmul";
    /* weights [K, N] as stored: row-major [K, N] (ab), or [N, K] read transposed (ba) */
    if (dnnl_memory_desc_init_by_tag(&smd, 2, sd, dnnl_f32, dnnl_ab) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&wmd, 2, wd, dnnl_f32, trans_b ? dnnl_ba : dnnl_ab) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&bmd, 2, bd, dnnl_f32, dnnl_ab) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&dmd, 2, dd, dnnl_f32, dnnl_ab) != dnnl_success ||
        dnnl_matmul_desc_init(&desc, &smd, &wmd, has_bias ? &bmd : NULL, &dmd) != dnnl_success ||
        dnnl_primitive_attr_create(&attr) != dnnl_success ||
        dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) != dnnl_success)
        goto fail;
    if (act) {
        if (dnnl_post_ops_create(&po) != dnnl_success ||
            dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_gelu_tanh, 0.0f, 0.0f) != dnnl_success ||
            dnnl_primitive_attr_set_post_ops(attr, po) != dnnl_success)
            goto fail;
    }
    /* oneDNN plans a primitive's threads when it is created (omp_get_max_threads()): a small
     * GEMM is planned for the calling thread alone (RT_GEMM_SERIAL_MACS) */
    int nt = 0;
#ifdef _OPENMP
    if (rows * N * K < RT_GEMM_SERIAL_MACS && (nt = omp_get_max_threads()) > 1)
        omp_set_num_threads(1);
    else
        nt = 0;
#endif
    dnnl_status_t cst = dnnl_engine_create(&h->eng, dnnl_cpu, 0);
    if (cst == dnnl_success)
        cst = dnnl_stream_create(&h->strm, h->eng, dnnl_stream_default_flags);
    if (cst == dnnl_success)
        cst = dnnl_primitive_desc_create(&pd, &desc, attr, h->eng, NULL);
    if (cst == dnnl_success)
        cst = dnnl_primitive_create(&h->prim, pd);
#ifdef _OPENMP
    if (nt)
        omp_set_num_threads(nt);
#endif
    if (cst != dnnl_success)
        goto fail;
    const dnnl_memory_desc_t *ps = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    size_t pbytes = ps ? dnnl_memory_desc_get_size(ps) : 0;
    if (pbytes && !(h->padbuf = aligned_alloc(64, (pbytes + 63) / 64 * 64))) {
        *why = "out of memory for its scratchpad";
        goto fail;
    }
    if (dnnl_memory_create(&h->src, &smd, h->eng, DNNL_MEMORY_NONE) != dnnl_success ||
        dnnl_memory_create(&h->wts, &wmd, h->eng, (void *)W) != dnnl_success ||
        dnnl_memory_create(&h->bias, &bmd, h->eng, DNNL_MEMORY_NONE) != dnnl_success ||
        dnnl_memory_create(&h->dst, &dmd, h->eng, DNNL_MEMORY_NONE) != dnnl_success ||
        (pbytes && dnnl_memory_create(&h->pad, ps, h->eng, h->padbuf) != dnnl_success))
        goto fail;
    dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_attr_destroy(attr);
    if (po) dnnl_post_ops_destroy(po);
    return h;
fail:
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (po) dnnl_post_ops_destroy(po);
    matmul_free(h);
    return NULL;
}
#endif

mrt_status mrt_matmul_prepare(mrt_model *m, int id, mrt_device d, int trans_b, int64_t rows, int64_t N, int64_t K,
                              const float *W, int has_bias, int act)
{
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
    if (d.kind != MRT_DEVICE_CPU || rows < 2)
        return MRT_OK;
    const char *why = NULL;
    t->h[id] = matmul_create(trans_b, rows, N, K, W, has_bias, act, &why);
    if (!t->h[id] && !t->warned) {
        t->warned = 1;
        mrt_log(MRT_LOG_WARN, "%s: matmul %d (%lldx%lldx%lld): %s; it runs on dnnl_sgemm (and so does any other "
                "such matmul of this model)", m->desc->name, id, (long long)rows, (long long)N, (long long)K,
                why ? why : "no primitive");
    }
#else
    (void)d, (void)trans_b, (void)has_bias;
#endif
    return MRT_OK;
}

mrt_status mrt_matmul_run(mrt_model *m, int id, int64_t rows, const float *A, const float *W, const float *bias,
                          float *C, int *done)
{
    *done = 0;
    rt_matmul_table *t = m->matmul;
    rt_matmul *h = t && id >= 0 && id < t->n ? t->h[id] : NULL;
    if (!h || rows != h->rows || W != h->W || !bias != !h->has_bias)
        return MRT_OK;
#ifdef MRT_WITH_DNNL
    int idle = 0;
    if (!atomic_compare_exchange_strong(&h->busy, &idle, 1))
        return MRT_OK; /* another view of the model is in it */
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, h->src}, {DNNL_ARG_WEIGHTS, h->wts}, {DNNL_ARG_DST, h->dst}};
    int n = 3;
    if (bias)
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, h->bias};
    if (h->pad)
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, h->pad};
    dnnl_status_t s = dnnl_memory_set_data_handle(h->src, (void *)A);
    if (s == dnnl_success) s = dnnl_memory_set_data_handle(h->dst, C);
    if (s == dnnl_success && bias) s = dnnl_memory_set_data_handle(h->bias, (void *)bias);
    if (s == dnnl_success) s = dnnl_primitive_execute(h->prim, h->strm, n, args);
    if (s == dnnl_success) s = dnnl_stream_wait(h->strm);
    atomic_store(&h->busy, 0);
    if (s != dnnl_success)
        return mrt_set_error(MRT_ERR_INTERNAL, "%s: matmul %d (%lldx%lldx%lld) on cpu: oneDNN failed (status %d)",
                             m->desc->name, id, (long long)rows, (long long)h->N, (long long)h->K, (int)s);
    *done = 1;
#else
    (void)A, (void)C;
#endif
    return MRT_OK;
}
