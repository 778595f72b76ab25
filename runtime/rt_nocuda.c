/*
 * rt_nocuda.c — the CUDA half of modelrt in a build without CUDA (no nvcc when modelrt was
 * built; the Makefile compiles this file instead of rt_cuda.c and rt_cuda_kernels.cu). Every
 * CUDA entry point of modelrt.h exists and answers as the header says: no devices, with the
 * reason, and MRT_ERR_DEVICE for anything that needs one. The test seam MODELRT_TEST_FAKE_CUDA
 * works here too: the fake devices are counted and described (rt_device.c refuses all work on
 * them). (The runtime builds with -Wno-unused-parameter.)
 */
#include "rt_internal.h"

#include <string.h>

static const char rt_no_cuda[] = "this build of modelrt has no CUDA support";

static mrt_status rt_no_cuda_err(const char *what)
{
    if (rt_fake_cuda_count(NULL) >= 0)
        return rt_fake_cuda_refuse(-1, what);
    return mrt_set_error(MRT_ERR_DEVICE, "%s: %s", what, rt_no_cuda);
}

int mrt_cuda_device_count(const char **why)
{
    const char *fake_why = NULL;
    int fake = rt_fake_cuda_count(&fake_why);
    if (fake >= 0) {
        if (why)
            *why = fake_why;
        return fake;
    }
    if (why)
        *why = rt_no_cuda;
    return 0;
}

mrt_status mrt_cuda_check_launch(const char *what)
{
    return rt_no_cuda_err(what ? what : "kernel launch");
}

/* ---------------------------------------------------------------- internal (rt_internal.h) */

mrt_status rt_cuda_info(int index, mrt_device_info *info, int with_free)
{
    if (info && index >= 0 && index < rt_fake_cuda_count(NULL)) {
        rt_fake_cuda_info(index, info);
        return MRT_OK;
    }
    if (info)
        memset(info, 0, sizeof *info);
    return mrt_set_error(MRT_ERR_DEVICE, "cuda:%d: %s", index, rt_no_cuda);
}

void *rt_cuda_alloc(int index, size_t bytes)
{
    mrt_set_error(MRT_ERR_DEVICE, "cannot allocate %zu bytes on cuda:%d: %s", bytes, index,
                  rt_no_cuda);
    return NULL;
}

void rt_cuda_free(int index, void *p)
{
}

mrt_status rt_cuda_activate(int index)
{
    return mrt_set_error(MRT_ERR_DEVICE, "cannot activate cuda:%d: %s", index, rt_no_cuda);
}

mrt_status rt_cuda_stream_create(int index, void **stream)
{
    if (stream)
        *stream = NULL;
    return mrt_set_error(MRT_ERR_DEVICE, "cannot create a stream on cuda:%d: %s", index,
                         rt_no_cuda);
}

void rt_cuda_stream_destroy(int index, void *stream)
{
}

mrt_status rt_cuda_stream_sync(int index, void *stream, const char *what, int collect)
{
    (void)collect;
    return mrt_set_error(MRT_ERR_DEVICE, "%s: cannot synchronize cuda:%d: %s", what, index,
                         rt_no_cuda);
}

mrt_status rt_cuda_stream_wait(int wait_index, void *waiter, int index, void *stream, const char *what)
{
    return mrt_set_error(MRT_ERR_DEVICE, "%s: cannot order cuda:%d after cuda:%d: %s", what, wait_index, index,
                         rt_no_cuda);
}

int rt_cuda_sim_counters(unsigned long long c[5])
{
    (void)c;
    return 0;
}

/* No CUDA, no graphs and no workspaces: rt_model.c asks only for CUDA slots, which a build
 * without CUDA never has. */
int rt_cuda_checks_pending(int device, void *stream)
{
    return -1;
}

void *rt_cuda_checks_save(int device, void *stream)
{
    return NULL;
}

void rt_cuda_checks_restore(int device, void *stream, const void *saved)
{
}

mrt_status rt_cuda_graph_begin(int index, void *stream)
{
    return mrt_set_error(MRT_ERR_DEVICE, "CUDA graph on cuda:%d: %s", index, rt_no_cuda);
}

mrt_status rt_cuda_graph_end(int index, void *stream, void **exec)
{
    return mrt_set_error(MRT_ERR_DEVICE, "CUDA graph on cuda:%d: %s", index, rt_no_cuda);
}

mrt_status rt_cuda_graph_launch(int index, void *stream, void *exec)
{
    return mrt_set_error(MRT_ERR_DEVICE, "CUDA graph on cuda:%d: %s", index, rt_no_cuda);
}

void rt_cuda_graph_abort(int index, void *stream)
{
}

void rt_cuda_checks_drop(int device, void *stream)
{
}

int rt_cuda_peer_access(int dst, int src)
{
    return 0;
}

void rt_cuda_graph_destroy(int index, void *exec)
{
}

mrt_status rt_cuda_workspace(int index, void *stream, void **out)
{
    *out = NULL;
    return mrt_set_error(MRT_ERR_DEVICE, "cuBLAS workspace on cuda:%d: %s", index, rt_no_cuda);
}

size_t rt_cuda_workspace_bytes(int index)
{
    return 0;
}

int rt_cuda_sync_each(void)
{
    return 0;
}

mrt_status rt_cuda_memcpy(mrt_device dst_dev, void *dst, mrt_device src_dev, const void *src,
                          size_t bytes, void *stream)
{
    char dn[32], sn[32];
    return mrt_set_error(MRT_ERR_DEVICE, "cannot copy %zu bytes from %s to %s: %s", bytes,
                         mrt_device_str(src_dev, sn, sizeof sn),
                         mrt_device_str(dst_dev, dn, sizeof dn), rt_no_cuda);
}

int rt_cuda_pointer_index(const void *p)
{
    return -1;
}

mrt_status rt_cuda_gemm(int index, void *stream, int trans_a, int trans_b, int M, int N, int K,
                        float alpha, const float *A, int lda, int64_t strideA, const float *B,
                        int ldb, int64_t strideB, float beta, float *C, int ldc, int64_t strideC,
                        int batch)
{
    return mrt_set_error(MRT_ERR_DEVICE, "gemm on cuda:%d: %s", index, rt_no_cuda);
}

mrt_status rt_cuda_gemm_bias_act(int index, void *stream, int trans_b, int M, int N, int K, const float *A, int lda,
                                 const float *B, int ldb, float *C, int ldc, const float *bias, int act)
{
    return mrt_set_error(MRT_ERR_DEVICE, "gemm on cuda:%d: %s", index, rt_no_cuda);
}

/* ---------------------------------------------------------------- library kernels */

mrt_status mrt_cuda_softmax_f32(void *stream, float *y, const float *x, int64_t outer, int64_t n, int64_t inner,
                                int log)
{
    return rt_no_cuda_err("mrt_cuda_softmax_f32");
}

mrt_status mrt_cuda_softmax_masked_f32(void *stream, float *y, const float *x, int64_t rows, int64_t n, int64_t L,
                                       int causal, int zero_masked_rows)
{
    return rt_no_cuda_err("mrt_cuda_softmax_masked_f32");
}

mrt_status mrt_cuda_attention_f32(void *stream, const mrt_attention_desc *d, float *out, const float *q,
                                  const float *k, const float *v, const float *mask)
{
    return rt_no_cuda_err("mrt_cuda_attention_f32");
}

mrt_status mrt_cuda_sum_f32(void *stream, float *y, const float *x, int64_t outer, int64_t n, int64_t inner, int mean)
{
    return rt_no_cuda_err("mrt_cuda_sum_f32");
}

mrt_status mrt_cuda_cumsum_f32(void *stream, float *y, const float *x, int64_t outer, int64_t n, int64_t inner,
                               int reverse)
{
    return rt_no_cuda_err("mrt_cuda_cumsum_f32");
}

mrt_status mrt_cuda_gather_f32(void *stream, float *y, const float *x, const void *idx, int idx_i64, int mode,
                               int64_t outer, int64_t n, int64_t k, int64_t inner, const char *what)
{
    return rt_no_cuda_err(what ? what : "mrt_cuda_gather_f32");
}

mrt_status mrt_cuda_scatter_add_f32(void *stream, float *y, const float *g, const void *idx, int idx_i64, int mode,
                                    int64_t outer, int64_t n, int64_t k, int64_t inner)
{
    return rt_no_cuda_err("mrt_cuda_scatter_add_f32");
}

mrt_status mrt_cuda_dropout_f32(void *stream, float *y, const float *x, int64_t n, float p, float scale, uint64_t seed,
                                uint64_t step, uint32_t site)
{
    return rt_no_cuda_err("mrt_cuda_dropout_f32");
}

mrt_status mrt_cuda_iota(void *stream, void *y, int64_t n, double start, double step, int i64)
{
    return rt_no_cuda_err("mrt_cuda_iota");
}

mrt_status mrt_cuda_opt_step_multi_f32(void *stream, const struct mrt_opt_args *a, const struct mrt_opt_tensor *t, int n)
{
    return rt_no_cuda_err("mrt_cuda_opt_step_multi_f32");
}

mrt_status mrt_cuda_sumsq_partial_f32(void *stream, double *part, const float *x, int64_t n)
{
    return rt_no_cuda_err("mrt_cuda_sumsq_partial_f32");
}

mrt_status mrt_cuda_max_f32(void *stream, float *y, const float *x, int64_t outer, int64_t n, int64_t inner)
{
    return rt_no_cuda_err("mrt_cuda_max_f32");
}

mrt_status mrt_cuda_argmax_f32(void *stream, int64_t *y, const float *x, int64_t outer, int64_t n, int64_t inner)
{
    return rt_no_cuda_err("mrt_cuda_argmax_f32");
}

mrt_status mrt_cuda_conv2d_f32(void *stream, float *y, const float *x, const float *w, int64_t N, int64_t C, int64_t H,
                               int64_t W, int64_t O, int KH, int KW, int64_t OH, int64_t OW, int sh, int sw, int pt,
                               int pl, int dh, int dw, int groups, float *col)
{
    return rt_no_cuda_err("mrt_cuda_conv2d_f32");
}

mrt_status mrt_cuda_maxpool2d_f32(void *stream, float *y, const float *x, int64_t NC, int64_t H, int64_t W, int64_t OH,
                                  int64_t OW, int kh, int kw, int sh, int sw, int pt, int pl, int dh, int dw)
{
    return rt_no_cuda_err("mrt_cuda_maxpool2d_f32");
}

mrt_status mrt_cuda_avgpool2d_f32(void *stream, float *y, const float *x, int64_t NC, int64_t H, int64_t W, int64_t OH,
                                  int64_t OW, int kh, int kw, int sh, int sw, int pt, int pl, int pb, int pr,
                                  int count_include_pad)
{
    return rt_no_cuda_err("mrt_cuda_avgpool2d_f32");
}

mrt_status mrt_cuda_adaptive_avgpool2d_f32(void *stream, float *y, const float *x, int64_t NC, int64_t H, int64_t W,
                                           int64_t OH, int64_t OW)
{
    return rt_no_cuda_err("mrt_cuda_adaptive_avgpool2d_f32");
}

mrt_status mrt_cuda_conv2d_wgrad_f32(void *stream, float *gw, const float *g, const float *x, int64_t N, int64_t C,
                                     int64_t H, int64_t W, int64_t O, int KH, int KW, int64_t OH, int64_t OW, int sh,
                                     int sw, int pt, int pl, int dh, int dw, int groups, float *col)
{
    return rt_no_cuda_err("mrt_cuda_conv2d_wgrad_f32");
}

mrt_status mrt_cuda_maxpool2d_grad_f32(void *stream, float *dx, const float *g, const float *x, int64_t NC, int64_t H,
                                       int64_t W, int64_t OH, int64_t OW, int kh, int kw, int sh, int sw, int pt, int pl,
                                       int dh, int dw)
{
    return rt_no_cuda_err("mrt_cuda_maxpool2d_grad_f32");
}

mrt_status mrt_cuda_avgpool2d_grad_f32(void *stream, float *dx, const float *g, int64_t NC, int64_t H, int64_t W,
                                       int64_t OH, int64_t OW, int kh, int kw, int sh, int sw, int pt, int pl, int pb,
                                       int pr, int count_include_pad)
{
    return rt_no_cuda_err("mrt_cuda_avgpool2d_grad_f32");
}

mrt_status mrt_cuda_adaptive_avgpool2d_grad_f32(void *stream, float *dx, const float *g, int64_t NC, int64_t H,
                                                int64_t W, int64_t OH, int64_t OW)
{
    return rt_no_cuda_err("mrt_cuda_adaptive_avgpool2d_grad_f32");
}

mrt_status mrt_cuda_conv_transpose2d_f32(void *stream, float *y, const float *x, const float *w, int64_t N, int64_t C,
                                         int64_t H, int64_t W, int64_t O, int KH, int KW, int64_t OH, int64_t OW, int sh,
                                         int sw, int ph, int pw, int dh, int dw, int groups, float *col)
{
    return rt_no_cuda_err("mrt_cuda_conv_transpose2d_f32");
}

mrt_status mrt_cuda_interp2d_f32(void *stream, float *y, const float *x, int64_t NC, int64_t H, int64_t W, int64_t OH,
                                 int64_t OW, int bilinear, int align_corners, double sfh, double sfw)
{
    return rt_no_cuda_err("mrt_cuda_interp2d_f32");
}

mrt_status mrt_cuda_interp2d_grad_f32(void *stream, float *dx, const float *g, int64_t NC, int64_t H, int64_t W,
                                      int64_t OH, int64_t OW, int bilinear, int align_corners, double sfh, double sfw)
{
    return rt_no_cuda_err("mrt_cuda_interp2d_grad_f32");
}

mrt_status mrt_cuda_layernorm_f32(void *stream, float *y, const float *x, const float *w, const float *b, int64_t rows,
                                  int64_t D, float eps)
{
    return rt_no_cuda_err("mrt_cuda_layernorm_f32");
}

mrt_status mrt_cuda_embedding_f32(void *stream, float *y, const void *ids, int ids_i64, int64_t n, const float *w,
                                  int64_t V, int64_t D, const char *what)
{
    return rt_no_cuda_err(what ? what : "mrt_cuda_embedding_f32");
}

mrt_status mrt_cuda_fault_begin(void *stream, const char *what, int **fault, int *ticket)
{
    return rt_no_cuda_err(what ? what : "mrt_cuda_fault_begin");
}

mrt_status mrt_cuda_fault_end(void *stream, const char *what, int ticket)
{
    return rt_no_cuda_err(what ? what : "mrt_cuda_fault_end");
}

mrt_status mrt_cuda_concat_part(void *stream, void *y, const void *x, int64_t outer, int64_t x_row, int64_t y_row,
                                int64_t y_offset)
{
    return rt_no_cuda_err("mrt_cuda_concat_part");
}
