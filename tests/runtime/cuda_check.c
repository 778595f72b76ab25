/*
 * cuda_check.c — the CUDA library kernels (mrt_cuda_*, rt_cuda_kernels.cu) and the cuBLAS GEMM
 * against their CPU references in mrt_kernels.h, on inputs with NaN, -inf rows, ties, padding
 * and groups. Prints one "PASS: runtime/cuda/NAME maxdiff D tolerance T" or "FAIL: ..." line per
 * check. Without a CUDA device (or in a build without CUDA) it checks only that the program
 * starts and says why nothing ran: "SKIP: runtime/cuda/start: no CUDA device (...)".
 * tests/runtime/run.sh builds and runs it; on a GPU machine it is the kernels' numeric check.
 * MRT_CHECK_DEVICE=cuda:N picks the device (default cuda:0); the GPU-to-GPU copies go to another.
 * MRT_CHECK_B12=1 adds field case B12 (softmax over more than 2^31 elements; ~17 GB on the GPU).
 * MRT_CHECK_B12=sampled runs only B12's sampled form: the same 17 GB tensors, but only rows 0, 1,
 * 131071 and 131072 (the last, at element 2^31) written and checked; on the simulator with
 * CUDASIM_SAMPLE_BLOCKS=softmax_rows_kernel:0,1,131071,131072 and CUDASIM_FILL=none only those
 * rows' blocks run, on a device of more than 16 GiB that costs no memory beyond the rows.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "modelrt.h"
#include "mrt_kernels.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_fail;
static mrt_device g_dev = {MRT_DEVICE_CUDA, 0};
static void *g_stream;

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static float frand(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

/* A device copy of host data (NULL-safe for 0 bytes). */
static void *up(const void *h, size_t bytes)
{
    void *d = mrt_alloc(g_dev, bytes);
    if (!d || mrt_memcpy(g_dev, d, (mrt_device){MRT_DEVICE_CPU, 0}, h, bytes, g_stream) != MRT_OK) {
        fprintf(stderr, "upload: %s\n", mrt_last_error());
        exit(1);
    }
    return d;
}

/* A device buffer filled with NaN, so that unwritten outputs show. */
static float *poisoned(size_t n)
{
    float *h = malloc(n * sizeof(float) + 4);
    for (size_t i = 0; i < n; i++)
        h[i] = NAN;
    float *d = up(h, n * sizeof(float));
    free(h);
    return d;
}

static void down(void *h, const void *d, size_t bytes)
{
    if (mrt_memcpy((mrt_device){MRT_DEVICE_CPU, 0}, h, g_dev, d, bytes, g_stream) != MRT_OK ||
        mrt_stream_sync(g_dev, g_stream, "cuda_check") != MRT_OK) {
        fprintf(stderr, "download: %s\n", mrt_last_error());
        exit(1);
    }
}

/* Compare n floats: NaN must match NaN, inf must match inf, else |d| <= tol * (1 + |ref|). */
static void report(const char *name, mrt_status st, const float *got, const float *ref, size_t n,
                   double tol)
{
    if (st != MRT_OK) {
        printf("FAIL: runtime/cuda/%s: %s %s\n", name, mrt_status_name(st), mrt_last_error());
        g_fail = 1;
        return;
    }
    double maxdiff = 0.0;
    size_t bad = n;
    for (size_t i = 0; i < n; i++) {
        float g = got[i], r = ref[i];
        if (isnan(r) || isnan(g) || isinf(r) || isinf(g)) {
            if (!((isnan(r) && isnan(g)) || g == r)) {
                bad = i;
                break;
            }
            continue;
        }
        double d = fabs((double)g - (double)r) / (1.0 + fabs((double)r));
        if (d > maxdiff)
            maxdiff = d;
        if (d > tol && bad == n)
            bad = i;
    }
    if (bad < n) {
        printf("FAIL: runtime/cuda/%s: element %zu: got %.9g, want %.9g (maxdiff %g tolerance %g)\n",
               name, bad, got[bad], ref[bad], maxdiff, tol);
        g_fail = 1;
    } else {
        printf("PASS: runtime/cuda/%s maxdiff %g tolerance %g\n", name, maxdiff, tol);
    }
}

static float *rand_host(size_t n)
{
    float *h = malloc(n * sizeof(float) + 4);
    for (size_t i = 0; i < n; i++)
        h[i] = 4.0f * frand();
    return h;
}

static int sim_counters(unsigned long long c[5]);

/* softmax or log_softmax of x [outer, n, inner] along n against the CPU; on the simulator with
 * `launches` kernel launches when not 0 (3 for few long rows: chunks, their combination, the
 * elements) */
static void check_softmax(int64_t outer, int64_t n, int64_t inner, int log, int launches)
{
    size_t N = (size_t)(outer * n * inner);
    float *x = rand_host(N), *ref = malloc(N * 4), *got = malloc(N * 4);
    if (outer > 1 || inner > 1)
        x[5] = NAN; /* a NaN row (or column) */
    if (inner == 1 && outer > 2)
        for (int64_t j = 0; j < n; j++)
            x[2 * n + j] = -INFINITY; /* an all -inf row: NaN out, as PyTorch */
    if (outer > 1 || inner > 1)
        x[N - 1] = INFINITY;
    mrt_softmax_f32(ref, x, outer, n, inner, log);
    float *dx = up(x, N * 4), *dy = poisoned(N);
    unsigned long long c0[5], c1[5];
    int sim = sim_counters(c0);
    mrt_status st = mrt_cuda_softmax_f32(g_stream, dy, dx, outer, n, inner, log);
    if (st == MRT_OK && sim && launches && sim_counters(c1) && c1[0] - c0[0] != (unsigned long long)launches)
        st = mrt_set_error(MRT_ERR_INTERNAL, "%llu kernel launches, expected %d", c1[0] - c0[0], launches);
    down(got, dy, N * 4);
    char name[96];
    snprintf(name, sizeof name, "%s_%lldx%lldx%lld", log ? "log_softmax" : "softmax",
             (long long)outer, (long long)n, (long long)inner);
    if (!log && n > 1000) /* probabilities near 1/n: compare n times them, so the tolerance bites */
        for (size_t i = 0; i < N; i++)
            ref[i] *= (float)n, got[i] *= (float)n;
    report(name, st, got, ref, N, 1e-5);
    mrt_free(g_dev, dx), mrt_free(g_dev, dy), free(x), free(ref), free(got);
}

static void check_masked(int causal, int zero)
{
    int64_t L = 8, rows = 3 * L, n = 8;
    size_t N = (size_t)(rows * n);
    float *x = rand_host(N), *ref = malloc(N * 4), *got = malloc(N * 4);
    for (int64_t j = 0; j < n; j++)
        x[9 * n + j] = -INFINITY; /* a fully masked row */
    mrt_softmax_masked_f32(ref, x, rows, n, L, causal, zero);
    float *dx = up(x, N * 4), *dy = poisoned(N);
    mrt_status st = mrt_cuda_softmax_masked_f32(g_stream, dy, dx, rows, n, L, causal, zero);
    down(got, dy, N * 4);
    char name[64];
    snprintf(name, sizeof name, "softmax_masked_causal%d_zero%d", causal, zero);
    report(name, st, got, ref, N, 1e-5);
    mrt_free(g_dev, dx), mrt_free(g_dev, dy), free(x), free(ref), free(got);
}

/* The fused attention (mrt_cuda_attention_f32) against the CPU's (mrt_attention_f32): batch dims
 * [2, 3], q/k/v/out read as the heads of [B, T, H, D] (permuted strides), a mask [B, 1, 1, S]
 * with a fully masked row in item 1, L = 19 queries over S = 21 keys (causal: S = L), head 24. */
static void check_attention(int causal, int mask)
{
    const int64_t B = 2, H = 3, L = 19, S = causal ? 19 : 21, E = 24, Ev = 24;
    mrt_attention_desc d;
    memset(&d, 0, sizeof d);
    d.nb = 2, d.batch[0] = B, d.batch[1] = H, d.L = L, d.S = S, d.E = E, d.Ev = Ev;
    d.scale = 0.2f, d.causal = causal, d.zero_masked_rows = 1;
    d.q[0] = L * H * E, d.q[1] = E, d.q[2] = H * E, d.q[3] = 1;
    d.k[0] = S * H * E, d.k[1] = E, d.k[2] = H * E, d.k[3] = 1;
    d.v[0] = S * H * Ev, d.v[1] = Ev, d.v[2] = H * Ev, d.v[3] = 1;
    d.o[0] = L * H * Ev, d.o[1] = Ev, d.o[2] = H * Ev, d.o[3] = 1;
    d.m[0] = S, d.m[3] = 1;
    size_t nq = (size_t)(B * L * H * E), nk = (size_t)(B * S * H * E), nv = (size_t)(B * S * H * Ev);
    size_t no = (size_t)(B * L * H * Ev), nm = (size_t)(B * S);
    float *q = rand_host(nq), *k = rand_host(nk), *v = rand_host(nv), *m = rand_host(nm);
    float *ref = malloc(no * 4), *got = malloc(no * 4);
    for (int64_t j = 0; j < S; j++)
        m[S + j] = -INFINITY; /* item 1: every key masked, so its rows are zeros */
    m[3] = -INFINITY;
    mrt_status st = mrt_attention_f32(&d, ref, q, k, v, mask ? m : NULL);
    float *dq = up(q, nq * 4), *dk = up(k, nk * 4), *dv = up(v, nv * 4), *dm = up(m, nm * 4), *dy = poisoned(no);
    if (st == MRT_OK)
        st = mrt_cuda_attention_f32(g_stream, &d, dy, dq, dk, dv, mask ? dm : NULL);
    down(got, dy, no * 4);
    char name[64];
    snprintf(name, sizeof name, "attention_causal%d_mask%d", causal, mask);
    report(name, st, got, ref, no, 1e-5);
    mrt_free(g_dev, dq), mrt_free(g_dev, dk), mrt_free(g_dev, dv), mrt_free(g_dev, dm), mrt_free(g_dev, dy);
    free(q), free(k), free(v), free(m), free(ref), free(got);
}

/* sum, mean, max and argmax of x [outer, n, inner] along n against the CPU; on the simulator each
 * call makes `launches` kernel launches when that is not 0 (2: a split or tiled reduction and
 * the kernel that combines its partials) */
static void check_reduce(int64_t outer, int64_t n, int64_t inner, int launches)
{
    size_t N = (size_t)(outer * n * inner), M = (size_t)(outer * inner);
    float *x = rand_host(N), *ref = malloc(M * 4), *got = malloc(M * 4);
    if (outer > 1)
        x[3 * inner] = NAN; /* in the first row or columns; the others are finite */
    x[N - 1] = x[N - 1 - inner] = 7.0f; /* a tie at the maximum */
    float *dx = up(x, N * 4), *dy = poisoned(M);
    char name[96];
    for (int mean = 0; mean < 2; mean++) {
        mrt_sum_f32(ref, x, outer, n, inner, mean);
        unsigned long long c0[5], c1[5];
        int sim = sim_counters(c0);
        mrt_status st = mrt_cuda_sum_f32(g_stream, dy, dx, outer, n, inner, mean);
        if (st == MRT_OK && sim && launches && sim_counters(c1) && c1[0] - c0[0] != (unsigned long long)launches)
            st = mrt_set_error(MRT_ERR_INTERNAL, "%llu kernel launches, expected %d", c1[0] - c0[0], launches);
        down(got, dy, M * 4);
        snprintf(name, sizeof name, "%s_%lldx%lldx%lld", mean ? "mean" : "sum", (long long)outer,
                 (long long)n, (long long)inner);
        report(name, st, got, ref, M, 1e-6);
    }
    mrt_max_f32(ref, x, outer, n, inner);
    unsigned long long c0[5], c1[5];
    int sim = sim_counters(c0);
    mrt_status st = mrt_cuda_max_f32(g_stream, dy, dx, outer, n, inner);
    if (st == MRT_OK && sim && launches && sim_counters(c1) && c1[0] - c0[0] != (unsigned long long)launches)
        st = mrt_set_error(MRT_ERR_INTERNAL, "%llu kernel launches, expected %d", c1[0] - c0[0], launches);
    down(got, dy, M * 4);
    snprintf(name, sizeof name, "max_%lldx%lldx%lld", (long long)outer, (long long)n, (long long)inner);
    report(name, st, got, ref, M, 0.0);
    int64_t *iref = malloc(M * 8), *igot = malloc(M * 8);
    int64_t *di = mrt_alloc(g_dev, M * 8);
    mrt_argmax_f32(iref, x, outer, n, inner);
    sim = sim_counters(c0);
    st = mrt_cuda_argmax_f32(g_stream, di, dx, outer, n, inner);
    if (st == MRT_OK && sim && launches && sim_counters(c1) && c1[0] - c0[0] != (unsigned long long)launches)
        st = mrt_set_error(MRT_ERR_INTERNAL, "%llu kernel launches, expected %d", c1[0] - c0[0], launches);
    down(igot, di, M * 8);
    float *fr = malloc(M * 4), *fg = malloc(M * 4);
    for (size_t i = 0; i < M; i++)
        fr[i] = (float)iref[i], fg[i] = (float)igot[i];
    snprintf(name, sizeof name, "argmax_%lldx%lldx%lld", (long long)outer, (long long)n, (long long)inner);
    report(name, st, fg, fr, M, 0.0);
    mrt_free(g_dev, di), mrt_free(g_dev, dx), mrt_free(g_dev, dy);
    free(x), free(ref), free(got), free(iref), free(igot), free(fr), free(fg);
}

/* conv2d on the GPU vs mrt_conv2d_f32. The device's col is the size the compiler's CUDA plan
 * gives it (fuse.c's conv_scratch_cuda: all groups at once where the GEMM path is grouped), with
 * the simulator's guard regions around it. On the simulator the launches and library calls are
 * pinned: a grouped conv with few taps is one direct launch; a 1x1 conv min(N, groups) GEMMs
 * (one for groups 1); any other one im2col and one GEMM batched over the groups per image, so
 * the count does not grow with the groups. */
static void check_conv(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int KH, int KW, int sh,
                       int sw, int pt, int pl, int pb, int pr, int dh, int dw, int groups)
{
    int64_t OH = (H + pt + pb - (int64_t)dh * (KH - 1) - 1) / sh + 1;
    int64_t OW = (W + pl + pr - (int64_t)dw * (KW - 1) - 1) / sw + 1;
    const int64_t taps = (C / groups) * KH * KW;
    const int one = KH == 1 && KW == 1 && sh == 1 && sw == 1 && !pt && !pl && !pb && !pr;
    const int fewtaps = groups > 1 && taps <= MRT_CUDA_CONV_DIRECT_TAPS;
    size_t nx = (size_t)(N * C * H * W), nw = (size_t)(O * (C / groups) * KH * KW),
           ny = (size_t)(N * O * OH * OW), ncol = (size_t)(taps * OH * OW),
           ndcol = groups > 1 && !fewtaps ? ncol * (size_t)groups : ncol;
    float *x = rand_host(nx), *w = rand_host(nw), *ref = malloc(ny * 4), *got = malloc(ny * 4);
    float *col = malloc(ncol * 4 + 4);
    mrt_conv2d_f32(ref, x, w, N, C, H, W, O, KH, KW, OH, OW, sh, sw, pt, pl, dh, dw, groups, col);
    float *dx = up(x, nx * 4), *dw_ = up(w, nw * 4), *dy = poisoned(ny), *dcol = one ? NULL : poisoned(ndcol);
    unsigned long long c0[5], c1[5];
    int sim = sim_counters(c0);
    mrt_status st = mrt_cuda_conv2d_f32(g_stream, dy, dx, dw_, N, C, H, W, O, KH, KW, OH, OW, sh, sw, pt,
                                        pl, dh, dw, groups, dcol);
    const unsigned long long want_launches = fewtaps ? 1 : one ? 0 : (unsigned long long)N;
    const unsigned long long want_calls = fewtaps ? 0
                                          : one   ? (unsigned long long)(groups == 1 ? 1 : N < groups ? N : groups)
                                                  : (unsigned long long)N;
    if (st == MRT_OK && sim && sim_counters(c1) && (c1[0] - c0[0] != want_launches || c1[1] - c0[1] != want_calls))
        st = mrt_set_error(MRT_ERR_INTERNAL, "conv took %llu launches and %llu library calls, want %llu and %llu",
                           c1[0] - c0[0], c1[1] - c0[1], want_launches, want_calls);
    down(got, dy, ny * 4);
    char name[128];
    snprintf(name, sizeof name, "conv2d_%lldx%lldx%lldx%lld_o%lld_k%dx%d_s%d%d_p%d%d_d%d%d_g%d",
             (long long)N, (long long)C, (long long)H, (long long)W, (long long)O, KH, KW, sh, sw, pt,
             pl, dh, dw, groups);
    /* sums of `taps` products in another order (cuBLAS's, the direct kernel's): the weight
     * gradient's bound, 16 ulp per term, and at least 1e-5 */
    report(name, st, got, ref, ny, fmax(1e-5, ldexp(16.0 * (double)taps, -24)));
    mrt_free(g_dev, dx), mrt_free(g_dev, dw_), mrt_free(g_dev, dy);
    if (dcol)
        mrt_free(g_dev, dcol);
    free(x), free(w), free(ref), free(got), free(col);
}

static void check_pools(void)
{
    int64_t NC = 6, H = 9, W = 8;
    size_t nx = (size_t)(NC * H * W);
    float *x = rand_host(nx);
    x[10] = NAN;
    float *dx = up(x, nx * 4);
    /* maxpool k3x2 s2x1 p1x0 d1x2 */
    {
        int64_t OH = (H + 2 - 3) / 2 + 1, OW = (W + 0 - 2 * 1 - 1) / 1 + 1;
        size_t ny = (size_t)(NC * OH * OW);
        float *ref = malloc(ny * 4), *got = malloc(ny * 4), *dy = poisoned(ny);
        mrt_maxpool2d_f32(ref, x, NC, H, W, OH, OW, 3, 2, 2, 1, 1, 0, 1, 2);
        mrt_status st = mrt_cuda_maxpool2d_f32(g_stream, dy, dx, NC, H, W, OH, OW, 3, 2, 2, 1, 1, 0, 1, 2);
        down(got, dy, ny * 4);
        report("maxpool2d", st, got, ref, ny, 0.0);
        mrt_free(g_dev, dy), free(ref), free(got);
    }
    /* avgpool k2x3 s1x2, pads top 0 left 1 bottom 1 right 2 (B23), both divisor rules */
    for (int cip = 0; cip < 2; cip++) {
        int64_t OH = (H + 0 + 1 - 2) / 1 + 1, OW = (W + 1 + 2 - 3) / 2 + 1;
        size_t ny = (size_t)(NC * OH * OW);
        float *ref = malloc(ny * 4), *got = malloc(ny * 4), *dy = poisoned(ny);
        mrt_avgpool2d_f32(ref, x, NC, H, W, OH, OW, 2, 3, 1, 2, 0, 1, 1, 2, cip);
        mrt_status st = mrt_cuda_avgpool2d_f32(g_stream, dy, dx, NC, H, W, OH, OW, 2, 3, 1, 2, 0, 1, 1, 2, cip);
        down(got, dy, ny * 4);
        report(cip ? "avgpool2d_count_include_pad" : "avgpool2d", st, got, ref, ny, 1e-6);
        mrt_free(g_dev, dy), free(ref), free(got);
    }
    {
        int64_t OH = 4, OW = 3;
        size_t ny = (size_t)(NC * OH * OW);
        float *ref = malloc(ny * 4), *got = malloc(ny * 4), *dy = poisoned(ny);
        mrt_adaptive_avgpool2d_f32(ref, x, NC, H, W, OH, OW);
        mrt_status st = mrt_cuda_adaptive_avgpool2d_f32(g_stream, dy, dx, NC, H, W, OH, OW);
        down(got, dy, ny * 4);
        report("adaptive_avgpool2d", st, got, ref, ny, 1e-6);
        mrt_free(g_dev, dy), free(ref), free(got);
    }
    mrt_free(g_dev, dx), free(x);
}

/* Training: conv2d's weight gradient, im2col + GEMM per image and group on the CPU; on the GPU
 * per image one im2col of all groups (col sized as the compiler's CUDA plan: groups times the
 * CPU's) and one GEMM batched over the groups, launches and GEMM calls pinned on the simulator. Each
 * element sums N*OH*OW products of |x|, |g| <= 4 that cancel; cuBLAS and OpenBLAS add them in
 * other orders, so the tolerance is f32's rounding bound over the sum, 2^-24 * 16 * N*OH*OW. */
static void check_conv_wgrad(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int KH, int KW, int sh, int sw,
                             int pt, int pl, int pb, int pr, int dh, int dw, int groups)
{
    int64_t OH = (H + pt + pb - (int64_t)dh * (KH - 1) - 1) / sh + 1;
    int64_t OW = (W + pl + pr - (int64_t)dw * (KW - 1) - 1) / sw + 1;
    size_t nx = (size_t)(N * C * H * W), nw = (size_t)(O * (C / groups) * KH * KW),
           ng = (size_t)(N * O * OH * OW), ncol = (size_t)((C / groups) * KH * KW * OH * OW);
    const int one = KH == 1 && KW == 1 && sh == 1 && sw == 1 && !pt && !pl && !pb && !pr;
    float *x = rand_host(nx), *g = rand_host(ng), *ref = malloc(nw * 4), *got = malloc(nw * 4);
    float *col = malloc(ncol * 4 + 4);
    mrt_conv2d_wgrad_f32(ref, g, x, N, C, H, W, O, KH, KW, OH, OW, sh, sw, pt, pl, dh, dw, groups, col);
    float *dx = up(x, nx * 4), *dg = up(g, ng * 4), *dgw = poisoned(nw),
          *dcol = one ? NULL : poisoned(ncol * (size_t)groups);
    unsigned long long c0[5], c1[5];
    int sim = sim_counters(c0);
    mrt_status st = mrt_cuda_conv2d_wgrad_f32(g_stream, dgw, dg, dx, N, C, H, W, O, KH, KW, OH, OW, sh, sw, pt, pl, dh,
                                              dw, groups, dcol);
    if (st == MRT_OK && sim && sim_counters(c1) &&
        (c1[0] - c0[0] != (unsigned long long)(one ? 0 : N) || c1[1] - c0[1] != (unsigned long long)N))
        st = mrt_set_error(MRT_ERR_INTERNAL, "weight gradient took %llu launches and %llu library calls, want %lld and %lld",
                           c1[0] - c0[0], c1[1] - c0[1], (long long)(one ? 0 : N), (long long)N);
    down(got, dgw, nw * 4);
    char name[128];
    snprintf(name, sizeof name, "conv2d_wgrad_%lldx%lldx%lldx%lld_o%lld_k%dx%d_s%d%d_p%d%d%d%d_d%d%d_g%d", (long long)N,
             (long long)C, (long long)H, (long long)W, (long long)O, KH, KW, sh, sw, pt, pl, pb, pr, dh, dw, groups);
    report(name, st, got, ref, nw, ldexp(16.0 * (double)(N * OH * OW), -24));
    mrt_free(g_dev, dx), mrt_free(g_dev, dg), mrt_free(g_dev, dgw);
    if (dcol)
        mrt_free(g_dev, dcol);
    free(x), free(g), free(ref), free(got), free(col);
}

/* Training: the pooling gradients, the GPU's gather vs the CPU's scatter: the same additions in
 * the same order, so exactly equal; max pooling on an input with ties (small integers) and a NaN */
static void check_pool_grads(void)
{
    int64_t NC = 5, H = 9, W = 8;
    size_t nx = (size_t)(NC * H * W);
    float *x = rand_host(nx), *got = malloc(nx * 4), *ref = malloc(nx * 4);
    for (size_t i = 0; i < nx; i++)
        x[i] = (float)(int)(x[i] * 0.75f); /* -3 .. 3: ties in most windows */
    x[17] = NAN;
    float *dx = up(x, nx * 4), *ddx = poisoned(nx);
    /* max pooling k3x2 s2x1 pads top 1 left 0 dilation 1x2; k3 s1 p1 (overlapping) */
    static const int mp[2][8] = {{3, 2, 2, 1, 1, 0, 1, 2}, {3, 3, 1, 1, 1, 1, 1, 1}};
    for (int c = 0; c < 2; c++) {
        const int *a = mp[c];
        int64_t OH = (H + 2 * a[4] - (int64_t)a[6] * (a[0] - 1) - 1) / a[2] + 1;
        int64_t OW = (W + 2 * a[5] - (int64_t)a[7] * (a[1] - 1) - 1) / a[3] + 1;
        size_t ny = (size_t)(NC * OH * OW);
        float *gy = rand_host(ny), *dgy = up(gy, ny * 4);
        mrt_maxpool2d_grad_f32(ref, gy, x, NC, H, W, OH, OW, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]);
        mrt_status st = mrt_cuda_maxpool2d_grad_f32(g_stream, ddx, dgy, dx, NC, H, W, OH, OW, a[0], a[1], a[2], a[3],
                                                    a[4], a[5], a[6], a[7]);
        down(got, ddx, nx * 4);
        report(c ? "maxpool2d_grad_overlapping_ties" : "maxpool2d_grad_ties", st, got, ref, nx, 0.0);
        mrt_free(g_dev, dgy), free(gy);
    }
    /* avg pooling k2x3 s1x2, pads top 0 left 1 bottom 1 right 2, both divisor rules; k3 s2 p1 */
    static const int ap[2][8] = {{2, 3, 1, 2, 0, 1, 1, 2}, {3, 3, 2, 2, 1, 1, 1, 1}};
    for (int c = 0; c < 2; c++)
        for (int cip = 0; cip < 2; cip++) {
            const int *a = ap[c];
            int64_t OH = (H + a[4] + a[6] - a[0]) / a[2] + 1, OW = (W + a[5] + a[7] - a[1]) / a[3] + 1;
            size_t ny = (size_t)(NC * OH * OW);
            float *gy = rand_host(ny), *dgy = up(gy, ny * 4);
            mrt_avgpool2d_grad_f32(ref, gy, NC, H, W, OH, OW, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], cip);
            mrt_status st = mrt_cuda_avgpool2d_grad_f32(g_stream, ddx, dgy, NC, H, W, OH, OW, a[0], a[1], a[2], a[3],
                                                        a[4], a[5], a[6], a[7], cip);
            down(got, ddx, nx * 4);
            char name[64];
            snprintf(name, sizeof name, "avgpool2d_grad_k%dx%d%s", a[0], a[1], cip ? "_count_include_pad" : "");
            report(name, st, got, ref, nx, 0.0);
            mrt_free(g_dev, dgy), free(gy);
        }
    /* adaptive: 9x8 to 4x3 (overlapping cells) and to 9x8, 1x1 */
    static const int64_t ad[3][2] = {{4, 3}, {9, 8}, {1, 1}};
    for (int c = 0; c < 3; c++) {
        int64_t OH = ad[c][0], OW = ad[c][1];
        size_t ny = (size_t)(NC * OH * OW);
        float *gy = rand_host(ny), *dgy = up(gy, ny * 4);
        mrt_adaptive_avgpool2d_grad_f32(ref, gy, NC, H, W, OH, OW);
        mrt_status st = mrt_cuda_adaptive_avgpool2d_grad_f32(g_stream, ddx, dgy, NC, H, W, OH, OW);
        down(got, ddx, nx * 4);
        char name[64];
        snprintf(name, sizeof name, "adaptive_avgpool2d_grad_%lldx%lld", (long long)OH, (long long)OW);
        report(name, st, got, ref, nx, 0.0);
        mrt_free(g_dev, dgy), free(gy);
    }
    mrt_free(g_dev, dx), mrt_free(g_dev, ddx), free(x), free(got), free(ref);
}

/* conv_transpose2d: the GPU's gather vs the CPU's GEMM + col2im (or its direct path) */
static void check_conv_transpose(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int KH, int KW, int sh,
                                 int sw, int ph, int pw, int oph, int opw, int dh, int dw, int groups)
{
    int64_t OH = (H - 1) * sh - 2 * ph + (int64_t)dh * (KH - 1) + oph + 1;
    int64_t OW = (W - 1) * sw - 2 * pw + (int64_t)dw * (KW - 1) + opw + 1;
    size_t nx = (size_t)(N * C * H * W), nw = (size_t)(C * (O / groups) * KH * KW), ny = (size_t)(N * O * OH * OW);
    float *x = rand_host(nx), *w = rand_host(nw), *ref = malloc(ny * 4), *got = malloc(ny * 4);
    float *col = malloc((size_t)((O / groups) * KH * KW * H * W) * 4 + 4);
    mrt_conv_transpose2d_f32(ref, x, w, N, C, H, W, O, KH, KW, OH, OW, sh, sw, ph, pw, dh, dw, groups, col);
    float *dx = up(x, nx * 4), *dw_ = up(w, nw * 4), *dy = poisoned(ny);
    mrt_status st = mrt_cuda_conv_transpose2d_f32(g_stream, dy, dx, dw_, N, C, H, W, O, KH, KW, OH, OW, sh, sw, ph,
                                                  pw, dh, dw, groups, NULL);
    down(got, dy, ny * 4);
    char name[128];
    snprintf(name, sizeof name, "conv_transpose2d_%lldx%lldx%lldx%lld_o%lld_k%dx%d_s%d%d_p%d%d_op%d%d_d%d%d_g%d",
             (long long)N, (long long)C, (long long)H, (long long)W, (long long)O, KH, KW, sh, sw, ph, pw, oph, opw,
             dh, dw, groups);
    report(name, st, got, ref, ny, 1e-5);
    mrt_free(g_dev, dx), mrt_free(g_dev, dw_), mrt_free(g_dev, dy);
    free(x), free(w), free(ref), free(got), free(col);
}

/* Training: interpolate's input gradient dx [NC, H, W] from g [NC, OH, OW], the GPU's gather vs
 * the CPU's scatter: the same products added in the same order, so exactly equal */
static void check_interp_grad(int64_t NC, int64_t H, int64_t W, int64_t OH, int64_t OW, int bilinear,
                              int align_corners, double sfh, double sfw)
{
    size_t nx = (size_t)(NC * H * W), ny = (size_t)(NC * OH * OW);
    float *gy = rand_host(ny), *ref = malloc(nx * 4), *got = malloc(nx * 4);
    mrt_interp2d_grad_f32(ref, gy, NC, H, W, OH, OW, bilinear, align_corners, sfh, sfw);
    float *dgy = up(gy, ny * 4), *ddx = poisoned(nx);
    mrt_status st = mrt_cuda_interp2d_grad_f32(g_stream, ddx, dgy, NC, H, W, OH, OW, bilinear, align_corners, sfh, sfw);
    down(got, ddx, nx * 4);
    char name[96];
    snprintf(name, sizeof name, "interp2d_grad_%s%s_%lldx%lld_to_%lldx%lld%s", bilinear ? "bilinear" : "nearest",
             align_corners ? "_align" : "", (long long)H, (long long)W, (long long)OH, (long long)OW,
             sfh > 0 ? "_scale" : "");
    report(name, st, got, ref, nx, 0.0);
    mrt_free(g_dev, dgy), mrt_free(g_dev, ddx);
    free(gy), free(ref), free(got);
}

/* interpolate [NC, H, W] -> [NC, OH, OW] (sfh, sfw: the scale_factor given, 0: none) */
static void check_interp(int64_t NC, int64_t H, int64_t W, int64_t OH, int64_t OW, int bilinear, int align_corners,
                         double sfh, double sfw)
{
    size_t nx = (size_t)(NC * H * W), ny = (size_t)(NC * OH * OW);
    float *x = rand_host(nx), *ref = malloc(ny * 4), *got = malloc(ny * 4);
    x[1] = INFINITY; /* 0 * inf in a bilinear tap: NaN on both */
    mrt_interp2d_f32(ref, x, NC, H, W, OH, OW, bilinear, align_corners, sfh, sfw);
    float *dx = up(x, nx * 4), *dy = poisoned(ny);
    mrt_status st = mrt_cuda_interp2d_f32(g_stream, dy, dx, NC, H, W, OH, OW, bilinear, align_corners, sfh, sfw);
    down(got, dy, ny * 4);
    char name[96];
    snprintf(name, sizeof name, "interp2d_%s%s_%lldx%lld_to_%lldx%lld%s", bilinear ? "bilinear" : "nearest",
             align_corners ? "_align" : "", (long long)H, (long long)W, (long long)OH, (long long)OW,
             sfh > 0 ? "_scale" : "");
    report(name, st, got, ref, ny, bilinear ? 1e-6 : 0.0);
    mrt_free(g_dev, dx), mrt_free(g_dev, dy);
    free(x), free(ref), free(got);
}

/* cumsum along the middle axis (reverse: from its end), with a NaN and an infinity that must
 * propagate down their line */
static void check_cumsum(int64_t outer, int64_t n, int64_t inner, int reverse)
{
    size_t N = (size_t)(outer * n * inner);
    float *x = rand_host(N), *ref = malloc(N * 4), *got = malloc(N * 4);
    x[inner] = NAN;
    x[N - 2 * inner] = INFINITY;
    float *dx = up(x, N * 4), *dy = poisoned(N);
    mrt_cumsum_f32(ref, x, outer, n, inner, reverse);
    mrt_status st = mrt_cuda_cumsum_f32(g_stream, dy, dx, outer, n, inner, reverse);
    down(got, dy, N * 4);
    char name[96];
    snprintf(name, sizeof name, "cumsum%s_%lldx%lldx%lld", reverse ? "_reverse" : "", (long long)outer, (long long)n,
             (long long)inner);
    report(name, st, got, ref, N, 1e-6);
    mrt_free(g_dev, dx), mrt_free(g_dev, dy), free(x), free(ref), free(got);
}

/* The data-parallel gradient norm's partial sums (MRT_CUDA_SUMSQ_BLOCKS per tensor, added in
 * order on the host) against the sum of squares in double on the host; every part written. */
static void check_sumsq(int64_t n)
{
    float *x = rand_host((size_t)n + 1);
    enum { P = MRT_CUDA_SUMSQ_BLOCKS };
    double ref = 0, got = 0, part[P];
    for (int64_t i = 0; i < n; i++)
        ref += (double)x[i] * x[i];
    float *dx = up(x, (size_t)n * 4 + 4);
    double *dp = (double *)poisoned(2 * P);
    mrt_status st = mrt_cuda_sumsq_partial_f32(g_stream, dp, dx, n);
    down(part, dp, sizeof part);
    int nan = 0;
    for (int b = 0; b < P; b++) {
        nan |= isnan(part[b]);
        got += part[b];
    }
    double d = fabs(got - ref) / (1.0 + ref);
    char name[64];
    snprintf(name, sizeof name, "sumsq_partial_%lld", (long long)n);
    if (st != MRT_OK || nan || d > 1e-12) {
        printf("FAIL: runtime/cuda/%s: %s (got %.17g, want %.17g)\n", name, st != MRT_OK ? mrt_last_error() :
               nan ? "a part left unwritten" : "wrong sum", got, ref);
        g_fail = 1;
    } else {
        printf("PASS: runtime/cuda/%s maxdiff %g tolerance 1e-12\n", name, d);
    }
    mrt_free(g_dev, dx), mrt_free(g_dev, dp), free(x);
}

/* iota, f32 (a fractional step) and i64 */
static void check_iota(int64_t n)
{
    float *ref = malloc(n * 4), *got = malloc(n * 4), *dy = poisoned(n);
    mrt_iota(ref, n, -3.5, 0.1, 0);
    mrt_status st = mrt_cuda_iota(g_stream, dy, n, -3.5, 0.1, 0);
    down(got, dy, n * 4);
    report("iota_f32", st, got, ref, (size_t)n, 0.0);
    int64_t *iref = malloc(n * 8), *igot = malloc(n * 8), *di = mrt_alloc(g_dev, n * 8);
    mrt_iota(iref, n, 7, -3, 1);
    st = mrt_cuda_iota(g_stream, di, n, 7, -3, 1);
    down(igot, di, n * 8);
    for (int64_t i = 0; i < n; i++)
        ref[i] = (float)iref[i], got[i] = (float)igot[i];
    report("iota_i64", st, got, ref, (size_t)n, 0.0);
    mrt_free(g_dev, dy), mrt_free(g_dev, di), free(ref), free(got), free(iref), free(igot);
}

/* affine: 3 weight and bias, 2 weight only, 1 bias only, 0 neither (NULL: layer_norm without
 * them, group_norm, instance_norm) */
static void check_layernorm(int64_t rows, int64_t D, int affine)
{
    size_t N = (size_t)(rows * D);
    float *x = rand_host(N), *w = rand_host((size_t)D), *b = rand_host((size_t)D);
    float *ref = malloc(N * 4), *got = malloc(N * 4);
    for (int64_t j = 0; j < D; j++)
        x[j] += 1000.0f; /* a large mean: the two-pass variance keeps it exact */
    for (int64_t j = 0; rows > 1 && j < D; j++)
        x[D + j] = 10000.0f + 0.01f * x[D + j]; /* a large offset: x - mean is taken in double */
    const float *hw = affine & 2 ? w : NULL, *hb = affine & 1 ? b : NULL;
    mrt_layernorm_f32(ref, x, hw, hb, rows, D, 1e-5f);
    float *dx = up(x, N * 4), *dw = up(w, (size_t)D * 4), *db = up(b, (size_t)D * 4), *dy = poisoned(N);
    mrt_status st = mrt_cuda_layernorm_f32(g_stream, dy, dx, affine & 2 ? dw : NULL, affine & 1 ? db : NULL, rows,
                                           D, 1e-5f);
    down(got, dy, N * 4);
    char name[64];
    snprintf(name, sizeof name, "layernorm_%lldx%lld%s", (long long)rows, (long long)D,
             (const char *[]){"_plain", "_bias", "_weight", ""}[affine]);
    report(name, st, got, ref, N, 1e-5);
    mrt_free(g_dev, dx), mrt_free(g_dev, dw), mrt_free(g_dev, db), mrt_free(g_dev, dy);
    free(x), free(w), free(b), free(ref), free(got);
}

/* The simulator's counters (tests/cudasim/include/cudasim.h) when it is the CUDA runtime:
 * {launches, library calls, copies, host synchronizations}; 0 on a real GPU. */
static int sim_counters(unsigned long long c[5])
{
    void *f = dlsym(RTLD_DEFAULT, "cudasim_get_counters");
    void (*get)(unsigned long long *);
    if (!f)
        return 0;
    memcpy(&get, &f, sizeof f);
    get(c);
    return 1;
}

static void check_embedding(int i64)
{
    int64_t V = 50, D = 33, n = 9;
    float *w = rand_host((size_t)(V * D)), *ref = malloc((size_t)(n * D) * 4), *got = malloc((size_t)(n * D) * 4);
    int64_t ids64[9] = {3, 0, 49, 7, 7, 12, 1, 48, 2};
    int32_t ids32[9];
    for (int i = 0; i < 9; i++)
        ids32[i] = (int32_t)ids64[i];
    const void *ids = i64 ? (const void *)ids64 : (const void *)ids32;
    size_t isz = i64 ? 8 : 4;
    int64_t bad_id;
    mrt_embedding_f32(ref, ids, i64, n, w, V, D, &bad_id);
    float *dw = up(w, (size_t)(V * D) * 4), *dy = poisoned((size_t)(n * D));
    void *dids = up(ids, (size_t)n * isz);
    mrt_status st = mrt_cuda_embedding_f32(g_stream, dy, dids, i64, n, dw, V, D, "check: embedding ids");
    down(got, dy, (size_t)(n * D) * 4);
    report(i64 ? "embedding_i64" : "embedding_i32", st, got, ref, (size_t)(n * D), 0.0);
    /* out of range at positions 3 and 6: the first is named */
    ids64[3] = 50, ids64[6] = -1, ids32[3] = 50, ids32[6] = -1;
    mrt_free(g_dev, dids);
    dids = up(ids, (size_t)n * isz);
    /* the error comes with the stream's synchronization, and the call itself makes the host wait
     * for nothing (counted under the simulator; elsewhere only the error is checked) */
    unsigned long long c0[5], c1[5];
    int sim = sim_counters(c0);
    st = mrt_cuda_embedding_f32(g_stream, dy, dids, i64, n, dw, V, D, "check: embedding ids");
    int no_wait = !sim || (sim_counters(c1) && c1[3] == c0[3]);
    if (st == MRT_OK)
        st = mrt_stream_sync(g_dev, g_stream, "check");
    int ok = st == MRT_ERR_INVALID_ARG && no_wait &&
             strstr(mrt_last_error(), "check: embedding ids: id 50 at position 3 is out of range [0, 50)");
    if (!no_wait)
        mrt_set_error(MRT_ERR_INTERNAL, "mrt_cuda_embedding_f32 made %llu host synchronizations", c1[3] - c0[3]);
    /* the stream is clean again: a good call after it succeeds */
    mrt_status st2 = MRT_OK;
    if (ok) {
        mrt_free(g_dev, dids);
        ids64[3] = 5, ids64[6] = 6, ids32[3] = 5, ids32[6] = 6;
        dids = up(ids, (size_t)n * isz);
        st2 = mrt_cuda_embedding_f32(g_stream, dy, dids, i64, n, dw, V, D, "check: embedding ids");
        if (st2 == MRT_OK)
            st2 = mrt_stream_sync(g_dev, g_stream, "check");
        ok = st2 == MRT_OK;
    }
    printf("%s: runtime/cuda/embedding_bounds_%s%s%s\n", ok ? "PASS" : "FAIL", i64 ? "i64" : "i32",
           ok ? "" : ": ", ok ? "" : mrt_last_error());
    g_fail |= !ok;
    mrt_free(g_dev, dids), mrt_free(g_dev, dw), mrt_free(g_dev, dy), free(w), free(ref), free(got);
}

/* gather in its three modes (x [outer, n, inner] -> y [outer, k, inner]) against the CPU kernel,
 * then an index out of range at two positions: the first is named at the stream's sync */
static void check_gather(int mode, int i64)
{
    int64_t outer = 5, n = 7, k = mode == 2 ? 7 : 4, inner = mode == 2 ? 1 : 3;
    int64_t ni = mode == 0 ? outer * k * inner : mode == 1 ? k : outer, N = outer * k * inner;
    float *x = rand_host((size_t)(outer * n * inner)), *ref = malloc((size_t)N * 4), *got = malloc((size_t)N * 4);
    int64_t *i64s = malloc((size_t)ni * 8);
    int32_t *i32s = malloc((size_t)ni * 4);
    for (int64_t i = 0; i < ni; i++)
        i64s[i] = (i * 5 + 3) % n, i32s[i] = (int32_t)i64s[i];
    const void *idx = i64 ? (const void *)i64s : (const void *)i32s;
    size_t isz = i64 ? 8 : 4;
    int64_t bad_id;
    int64_t bad = mrt_gather_f32(ref, mode == 2 ? NULL : x, idx, i64, mode, outer, n, k, inner, &bad_id);
    float *dx = up(x, (size_t)(outer * n * inner) * 4), *dy = poisoned((size_t)N);
    void *didx = up(idx, (size_t)ni * isz);
    mrt_status st = mrt_cuda_gather_f32(g_stream, dy, mode == 2 ? NULL : dx, didx, i64, mode, outer, n, k, inner,
                                        "check: gather index");
    down(got, dy, (size_t)N * 4);
    char name[64];
    snprintf(name, sizeof name, "gather_mode%d_%s", mode, i64 ? "i64" : "i32");
    if (bad >= 0)
        st = mrt_set_error(MRT_ERR_INTERNAL, "the CPU gather found index %lld bad", (long long)bad_id);
    report(name, st, got, ref, (size_t)N, 0.0);
    int64_t p0 = ni / 2, p1 = ni - 1;
    i64s[p1] = -2, i32s[p1] = -2, i64s[p0] = n, i32s[p0] = (int32_t)n;
    mrt_free(g_dev, didx);
    didx = up(idx, (size_t)ni * isz);
    st = mrt_cuda_gather_f32(g_stream, dy, mode == 2 ? NULL : dx, didx, i64, mode, outer, n, k, inner,
                             "check: gather index");
    if (st == MRT_OK)
        st = mrt_stream_sync(g_dev, g_stream, "check");
    char want[128];
    snprintf(want, sizeof want, "check: gather index: id %lld at position %lld is out of range [0, %lld)", (long long)n,
             (long long)p0, (long long)n);
    int ok = st == MRT_ERR_INVALID_ARG && strstr(mrt_last_error(), want);
    bad = mrt_gather_f32(ref, mode == 2 ? NULL : x, idx, i64, mode, outer, n, k, inner, &bad_id);
    ok = ok && bad == p0 && bad_id == n; /* the CPU kernel names the same one */
    printf("%s: runtime/cuda/%s_bounds%s%s\n", ok ? "PASS" : "FAIL", name, ok ? "" : ": ", ok ? "" : mrt_last_error());
    g_fail |= !ok;
    mrt_free(g_dev, didx), mrt_free(g_dev, dx), mrt_free(g_dev, dy), free(x), free(ref), free(got), free(i64s), free(i32s);
}

/* scatter_add (training: gather's adjoint) in modes 0 and 1 against the CPU kernel, with indices
 * that repeat (their sums must match bit for bit: both add in increasing position) and one out
 * of range (adds nothing on either) */
static void check_scatter_add(int mode, int i64)
{
    int64_t outer = 3, n = 5, k = 9, inner = mode == 0 ? 4 : 3;
    int64_t ni = mode == 0 ? outer * k * inner : k, N = outer * n * inner, G = outer * k * inner;
    float *g = rand_host((size_t)G), *ref = malloc((size_t)N * 4), *got = malloc((size_t)N * 4);
    int64_t *i64s = malloc((size_t)ni * 8);
    int32_t *i32s = malloc((size_t)ni * 4);
    for (int64_t i = 0; i < ni; i++)
        i64s[i] = i == ni / 3 ? n : (i * 3 + 1) % n, i32s[i] = (int32_t)i64s[i];
    const void *idx = i64 ? (const void *)i64s : (const void *)i32s;
    size_t isz = i64 ? 8 : 4;
    mrt_scatter_add_f32(ref, g, idx, i64, mode, outer, n, k, inner);
    float *dg = up(g, (size_t)G * 4), *dy = poisoned((size_t)N);
    void *didx = up(idx, (size_t)ni * isz);
    mrt_status st = mrt_cuda_scatter_add_f32(g_stream, dy, dg, didx, i64, mode, outer, n, k, inner);
    down(got, dy, (size_t)N * 4);
    char name[64];
    snprintf(name, sizeof name, "scatter_add_mode%d_%s", mode, i64 ? "i64" : "i32");
    report(name, st, got, ref, (size_t)N, 0.0);
    mrt_free(g_dev, didx), mrt_free(g_dev, dg), mrt_free(g_dev, dy), free(g), free(ref), free(got), free(i64s), free(i32s);
}

/* dropout: the GPU's mask is the CPU's (Philox4x32-10 of seed, step, site, index), bit for bit,
 * for a seed above 2^32 and a length that is not a multiple of 4; in place too */
static void check_dropout(int64_t n, float p, uint64_t seed, uint64_t step, uint32_t site)
{
    float *x = rand_host((size_t)n), *ref = malloc((size_t)n * 4), *got = malloc((size_t)n * 4);
    const float scale = 1.0f / (1.0f - p);
    mrt_dropout_f32(ref, x, n, p, scale, seed, step, site);
    float *dx = up(x, (size_t)n * 4), *dy = poisoned((size_t)n);
    mrt_status st = mrt_cuda_dropout_f32(g_stream, dy, dx, n, p, scale, seed, step, site);
    down(got, dy, (size_t)n * 4);
    char name[64];
    snprintf(name, sizeof name, "dropout_%lld_p%g", (long long)n, (double)p);
    report(name, st, got, ref, (size_t)n, 0.0);
    st = mrt_cuda_dropout_f32(g_stream, dx, dx, n, p, scale, seed, step, site);
    down(got, dx, (size_t)n * 4);
    snprintf(name, sizeof name, "dropout_%lld_p%g_inplace", (long long)n, (double)p);
    report(name, st, got, ref, (size_t)n, 0.0);
    mrt_free(g_dev, dx), mrt_free(g_dev, dy), free(x), free(ref), free(got);
}

static void check_concat(int64_t outer, int64_t x_row, int64_t y_row, int64_t y_offset)
{
    size_t ny = (size_t)(outer * y_row), nx = (size_t)(outer * x_row);
    unsigned char *x = malloc(nx + 1), *ref = malloc(ny + 1), *got = malloc(ny + 1);
    for (size_t i = 0; i < nx; i++)
        x[i] = (unsigned char)(i * 7 + 1);
    memset(ref, 0xEE, ny);
    void *dx = up(x, nx), *dy = up(ref, ny); /* untouched bytes must stay 0xEE */
    mrt_concat_part(ref, x, outer, x_row, y_row, y_offset);
    mrt_status st = mrt_cuda_concat_part(g_stream, dy, dx, outer, x_row, y_row, y_offset);
    down(got, dy, ny);
    int ok = st == MRT_OK && memcmp(got, ref, ny) == 0;
    printf("%s: runtime/cuda/concat_%lld_%lld_%lld_%lld%s%s\n", ok ? "PASS" : "FAIL", (long long)outer,
           (long long)x_row, (long long)y_row, (long long)y_offset, ok ? "" : ": ", ok ? "" : mrt_last_error());
    g_fail |= !ok;
    mrt_free(g_dev, dx), mrt_free(g_dev, dy), free(x), free(ref), free(got);
}

static void check_gemm(int ta, int tb, int M, int N, int K, int batch, int zero_stride_a)
{
    int lda = (ta ? M : K) + 1, ldb = (tb ? K : N) + 2, ldc = N + 3;
    int64_t sA = zero_stride_a ? 0 : (int64_t)(ta ? K : M) * lda, sB = (int64_t)(tb ? N : K) * ldb,
            sC = (int64_t)M * ldc;
    size_t na = (size_t)(sA * (batch - 1) + (ta ? K : M) * lda), nb = (size_t)(sB * batch),
           nc = (size_t)(sC * batch);
    float *a = rand_host(na), *b = rand_host(nb), *c = rand_host(nc), *got = malloc(nc * 4);
    float *da = up(a, na * 4), *db = up(b, nb * 4), *dc = up(c, nc * 4);
    mrt_device cpu = {MRT_DEVICE_CPU, 0};
    mrt_gemm_f32(cpu, NULL, ta, tb, M, N, K, 0.5f, a, lda, sA, b, ldb, sB, 2.0f, c, ldc, sC, batch);
    mrt_status st = mrt_gemm_f32(g_dev, g_stream, ta, tb, M, N, K, 0.5f, da, lda, sA, db, ldb, sB, 2.0f, dc,
                                 ldc, sC, batch);
    down(got, dc, nc * 4);
    char name[96];
    snprintf(name, sizeof name, "gemm_t%d%d_%dx%dx%d_b%d%s", ta, tb, M, N, K, batch,
             zero_stride_a ? "_sA0" : "");
    report(name, st, got, c, nc, 1e-5 * (1 + K));
    mrt_free(g_dev, da), mrt_free(g_dev, db), mrt_free(g_dev, dc), free(a), free(b), free(c), free(got);
}

/* The simulator's cuBLASLt stand-in's counts (tests/cudasim/cublas_sim.cc), from the library
 * the runtime loaded: {cublasLtMatmul calls, those with a split-K algorithm (a workspace),
 * heuristic calls that found no algorithm}; 0 where the library is not the stand-in. */
static int lt_counts(unsigned long long c[3])
{
    static const char *names[] = {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so.11", "libcublasLt.so"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_NOLOAD);
        void *f = h ? dlsym(h, "cudasim_lt_counts") : NULL;
        if (h)
            dlclose(h);
        if (f) {
            void (*get)(unsigned long long *);
            memcpy(&get, &f, sizeof f);
            get(c);
            return 1;
        }
    }
    return 0;
}

enum { LT_PATH, LT_FALLBACK };
static int g_lt_notices; /* log lines about cuBLASLt's fallback */

static void lt_hook(mrt_log_level level, const char *msg, void *user)
{
    (void)level, (void)user;
    if (strstr(msg, "cuBLASLt has no algorithm"))
        g_lt_notices++;
}

/* The cuBLASLt GEMM with a bias/activation epilogue against the CPU path; with `off` > 0, A, B
 * and C start `off` floats into their allocations (a caller's buffer used in place, less than
 * 256-byte aligned: cuBLASLt's default preference, and so an algorithm chosen without the real
 * alignments, would reject or fault on it). `path` is what the GEMM must have taken on the
 * simulator: LT_PATH one cublasLtMatmul, with the stream's workspace when K >= 2 (the stand-in's
 * heuristic then offers only a split-K algorithm within the workspace the runtime offers, and
 * its cublasLtMatmul refuses a missing or short workspace); LT_FALLBACK (under
 * CUDASIM_LT_NOALGO=1: no algorithm) no cublasLtMatmul but a cuBLAS GEMM and, with a bias or an
 * activation, one kernel launch. */
static void check_gemm_bias_act(int tb, int M, int N, int K, int act, int with_bias, int off, int path)
{
    int lda = K, ldb = tb ? K : N, ldc = N;
    size_t na = (size_t)M * lda + off, nb = (size_t)(tb ? N : K) * ldb + off, nc = (size_t)M * ldc + off;
    float *a = rand_host(na), *b = rand_host(nb), *bias = rand_host((size_t)N), *c = malloc(nc * 4), *got = malloc(nc * 4);
    float *da = up(a, na * 4), *db = up(b, nb * 4), *dbias = up(bias, (size_t)N * 4), *dc = poisoned(nc);
    mrt_device cpu = {MRT_DEVICE_CPU, 0};
    mrt_gemm_bias_act_f32(cpu, NULL, tb, M, N, K, a + off, lda, b + off, ldb, c + off, ldc, with_bias ? bias : NULL, act);
    unsigned long long s0[5], s1[5], l0[3] = {0}, l1[3] = {0};
    int sim = sim_counters(s0) && lt_counts(l0);
    mrt_status st = mrt_gemm_bias_act_f32(g_dev, g_stream, tb, M, N, K, da + off, lda, db + off, ldb, dc + off, ldc,
                                          with_bias ? dbias : NULL, act);
    if (sim) sim_counters(s1), lt_counts(l1);
    if (st == MRT_OK) st = mrt_stream_sync(g_dev, g_stream, "gemm_bias_act");
    down(got, dc, nc * 4);
    char name[128];
    snprintf(name, sizeof name, "gemm_bias_act_t%d_%dx%dx%d_act%d%s%s%s", tb, M, N, K, act, with_bias ? "_bias" : "",
             off ? "_unaligned" : "", path == LT_FALLBACK ? "_fallback" : "");
    unsigned long long lt = l1[0] - l0[0], lt_ws = l1[1] - l0[1], launches = s1[0] - s0[0], calls = s1[1] - s0[1];
    int want_launch = path == LT_FALLBACK && (with_bias || act);
    if (st == MRT_OK && sim &&
        (path == LT_PATH ? lt != 1 || lt_ws != (K >= 2) || launches != 0
                         : lt != 0 || calls != 1 || launches != (unsigned long long)want_launch)) {
        printf("FAIL: runtime/cuda/%s: expected %s; got %llu cublasLtMatmul (%llu with a workspace), %llu library "
               "calls, %llu kernel launches\n", name,
               path == LT_PATH ? (K >= 2 ? "one cublasLtMatmul with the stream's workspace and no kernel"
                                         : "one cublasLtMatmul and no kernel")
                               : want_launch ? "no cublasLtMatmul, one cuBLAS GEMM and the bias/activation kernel"
                                             : "no cublasLtMatmul and one cuBLAS GEMM",
               lt, lt_ws, calls, launches);
        g_fail = 1;
    } else {
        report(name, st, got + off, c + off, nc - off, 1e-5 * (1 + K));
    }
    mrt_free(g_dev, da), mrt_free(g_dev, db), mrt_free(g_dev, dbias), mrt_free(g_dev, dc);
    free(a), free(b), free(bias), free(c), free(got);
}

/* Every epilogue through cuBLASLt (with the workspace), then through the fallback the heuristic's
 * "no algorithm" takes (CUDASIM_LT_NOALGO=1, other shapes than cuBLASLt's, which the runtime
 * keeps plans for): said once in the log, however many shapes and calls fall back. */
static void check_gemm_bias_acts(void)
{
    for (int act = 0; act < 3; act++)
        for (int tb = 0; tb < 2; tb++) check_gemm_bias_act(tb, 33, 20, 17, act, act != 1, 0, LT_PATH);
    check_gemm_bias_act(1, 33, 20, 17, 2, 1, 1, LT_PATH); /* 4-byte aligned A, B, C */
    check_gemm_bias_act(0, 8, 12, 5, 1, 1, 3, LT_PATH);
    check_gemm_bias_act(0, 7, 9, 1, 1, 1, 0, LT_PATH); /* K = 1: not split, no workspace */
    unsigned long long l[3];
    if (!lt_counts(l)) /* a real cuBLASLt: CUDASIM_LT_NOALGO means nothing to it */
        return;
    g_lt_notices = 0;
    mrt_set_log_hook(lt_hook, NULL);
    setenv("CUDASIM_LT_NOALGO", "1", 1);
    for (int act = 0; act < 3; act++)
        for (int tb = 0; tb < 2; tb++) check_gemm_bias_act(tb, 29, 21, 19, act, act != 1, 0, LT_FALLBACK);
    check_gemm_bias_act(0, 29, 21, 19, 0, 1, 0, LT_FALLBACK); /* a shape that fell back already */
    check_gemm_bias_act(0, 16, 8, 4, 0, 0, 0, LT_FALLBACK);   /* no bias, no activation: no kernel */
    check_gemm_bias_act(1, 29, 21, 19, 2, 1, 1, LT_FALLBACK); /* 4-byte aligned A, B, C */
    unsetenv("CUDASIM_LT_NOALGO");
    mrt_set_log_hook(NULL, NULL);
    int ok = g_lt_notices == 1;
    printf("%s: runtime/cuda/gemm_bias_act_fallback_logged_once (%d notices for 9 GEMMs that fell back)\n",
           ok ? "PASS" : "FAIL", g_lt_notices);
    g_fail |= !ok;
}

/* GPU to GPU copies (peer, or staged through pinned memory under CUDASIM_PEER=0), three of
 * them, checked byte for byte; under the simulator, staging allocates pinned memory at most
 * once for them all (the buffer is kept), where it once allocated 64 MB per copy. */
static void check_gpu_copies(void)
{
    mrt_device d1 = {MRT_DEVICE_CUDA, g_dev.index == 0 ? 1 : 0};
    if (mrt_cuda_device_count(NULL) < 2)
        return;
    const size_t n = 4099;
    unsigned char *h = malloc(n), *got = malloc(n);
    for (size_t i = 0; i < n; i++)
        h[i] = (unsigned char)(i * 13 + 5);
    void *src = up(h, n), *dst = mrt_alloc(d1, n);
    void *f = dlsym(RTLD_DEFAULT, "cudasim_pinned_allocs");
    unsigned long long (*pinned)(void) = NULL;
    if (f)
        memcpy(&pinned, &f, sizeof f);
    unsigned long long p0 = pinned ? pinned() : 0;
    mrt_status st = dst ? MRT_OK : MRT_ERR_OOM;
    for (int k = 0; k < 3 && st == MRT_OK; k++)
        st = mrt_memcpy(d1, dst, g_dev, src, n, g_stream);
    if (st == MRT_OK)
        st = mrt_stream_sync(g_dev, g_stream, "check");
    if (st == MRT_OK)
        st = mrt_memcpy((mrt_device){MRT_DEVICE_CPU, 0}, got, d1, dst, n, NULL);
    if (st == MRT_OK)
        st = mrt_stream_sync(d1, NULL, "check");
    unsigned long long allocs = pinned ? pinned() - p0 : 0;
    int ok = st == MRT_OK && memcmp(got, h, n) == 0 && allocs <= 1;
    printf("%s: runtime/cuda/gpu_to_gpu_copies%s%s\n", ok ? "PASS" : "FAIL", ok ? "" : ": ",
           ok ? "" : st != MRT_OK ? mrt_last_error() : allocs > 1 ? "a pinned buffer allocated per copy" : "bytes differ");
    g_fail |= !ok;
    mrt_free(g_dev, src), mrt_free(d1, dst), free(h), free(got);
}

/* Field case B12: softmax over X [131073, 16384] (more than 2^31 elements), X[i,0] = ln(i+1),
 * else 0: Y[i,0] = (i+1)/(i+16384), Y[i,j>0] = 1/(i+16384). About 17.2 GB of device memory and
 * 8.6 GB of host memory: run only with MRT_CHECK_B12=1. */
static void check_b12(void)
{
    const int64_t R = 131073, Ncol = 16384;
    const size_t N = (size_t)(R * Ncol);
    float *x = calloc(N, sizeof(float));
    if (!x) {
        printf("FAIL: runtime/cuda/b12_softmax_2g: cannot allocate %zu host bytes\n", N * 4);
        g_fail = 1;
        return;
    }
    for (int64_t i = 0; i < R; i++)
        x[(size_t)(i * Ncol)] = logf((float)(i + 1));
    float *dx = up(x, N * 4), *dy = poisoned(N);
    mrt_status st = mrt_cuda_softmax_f32(g_stream, dy, dx, R, Ncol, 1, 0);
    float *first = malloc((size_t)Ncol * 4), *last = malloc((size_t)Ncol * 4);
    down(first, dy, (size_t)Ncol * 4);
    down(last, dy + (size_t)((R - 1) * Ncol), (size_t)Ncol * 4);
    int ok = st == MRT_OK;
    double worst = 0.0;
    for (int64_t j = 0; ok && j < Ncol; j++) {
        double wl = j == 0 ? 131073.0 / (131072.0 + 16384.0) : 1.0 / (131072.0 + 16384.0);
        double d1 = fabs(first[j] - 1.0 / 16384.0) * 16384.0, d2 = fabs(last[j] - wl) / wl;
        if (!(d1 <= 1e-4 && d2 <= 1e-4))
            ok = 0;
        worst = fmax(worst, fmax(d1, d2));
    }
    printf("%s: runtime/cuda/b12_softmax_2g rel maxdiff %g tolerance 1e-4%s%s\n", ok ? "PASS" : "FAIL", worst,
           st == MRT_OK ? "" : ": ", st == MRT_OK ? "" : mrt_last_error());
    g_fail |= !ok;
    mrt_free(g_dev, dx), mrt_free(g_dev, dy), free(x), free(first), free(last);
}

/* B12 sampled: X and Y [131073, 16384] allocated whole (8.6 GB each), but only the rows in
 * `rows` written (X as in check_b12, Y poisoned with NaN first) and read back: each must be
 * written whole with the formula's values. Where only those rows' blocks run (the simulator's
 * CUDASIM_SAMPLE_BLOCKS, grid one block per row) nothing else of the 17 GB is touched; row
 * 131072 starts at element 2^31 exactly, so 32-bit row offsets read and write 8 GiB away. */
static void check_b12_sampled(void)
{
    static const char name[] = "b12_softmax_2g_sampled";
    const int64_t R = 131073, Ncol = 16384, rows[] = {0, 1, 131071, 131072};
    const size_t N = (size_t)(R * Ncol), row_bytes = (size_t)Ncol * 4;
    if (dlsym(RTLD_DEFAULT, "cudasim_last_report")) { /* the simulator: all 131073 rows would fill 17 GB */
        const char *s = getenv("CUDASIM_SAMPLE_BLOCKS"), *f = getenv("CUDASIM_FILL");
        if (!s || !strstr(s, "softmax_rows_kernel") || !f || strcmp(f, "none") != 0) {
            printf("FAIL: runtime/cuda/%s: on the simulator, run with CUDASIM_FILL=none and "
                   "CUDASIM_SAMPLE_BLOCKS=softmax_rows_kernel:0,1,131071,131072 (it would touch all 17 GB)\n",
                   name);
            g_fail = 1;
            return;
        }
    }
    float *dx = mrt_alloc(g_dev, N * 4), *dy = dx ? mrt_alloc(g_dev, N * 4) : NULL;
    if (!dy) {
        printf("FAIL: runtime/cuda/%s: %s\n", name, mrt_last_error());
        g_fail = 1;
        mrt_free(g_dev, dx);
        return;
    }
    const mrt_device cpu = {MRT_DEVICE_CPU, 0};
    float *xr = calloc((size_t)Ncol, 4), *nan_row = malloc(row_bytes), *got = malloc(row_bytes);
    for (int64_t j = 0; j < Ncol; j++)
        nan_row[j] = NAN;
    mrt_status st = MRT_OK;
    for (size_t k = 0; k < sizeof rows / sizeof rows[0] && st == MRT_OK; k++) {
        xr[0] = logf((float)(rows[k] + 1));
        st = mrt_memcpy(g_dev, dx + (size_t)(rows[k] * Ncol), cpu, xr, row_bytes, g_stream);
        if (st == MRT_OK)
            st = mrt_memcpy(g_dev, dy + (size_t)(rows[k] * Ncol), cpu, nan_row, row_bytes, g_stream);
        if (st == MRT_OK) /* xr is reused: the copy from pageable memory must have finished */
            st = mrt_stream_sync(g_dev, g_stream, name);
    }
    if (st == MRT_OK)
        st = mrt_cuda_softmax_f32(g_stream, dy, dx, R, Ncol, 1, 0);
    double worst = 0.0;
    char why[160] = "";
    for (size_t k = 0; k < sizeof rows / sizeof rows[0] && st == MRT_OK && !why[0]; k++) {
        const int64_t i = rows[k];
        down(got, dy + (size_t)(i * Ncol), row_bytes);
        for (int64_t j = 0; j < Ncol; j++) {
            const double want = (j == 0 ? (double)(i + 1) : 1.0) / (double)(i + 16384);
            const double d = fabs(got[j] - want) / want;
            if (!(d <= 1e-4)) { /* NaN too: the element was never written */
                snprintf(why, sizeof why, ": Y[%lld,%lld] = %g, expected %g", (long long)i, (long long)j,
                         (double)got[j], want);
                break;
            }
            worst = fmax(worst, d);
        }
    }
    int ok = st == MRT_OK && !why[0];
    printf("%s: runtime/cuda/%s rows 0 1 131071 131072 rel maxdiff %g tolerance 1e-4%s%s%s\n", ok ? "PASS" : "FAIL",
           name, worst, why, st == MRT_OK ? "" : ": ", st == MRT_OK ? "" : mrt_last_error());
    g_fail |= !ok;
    mrt_free(g_dev, dx), mrt_free(g_dev, dy), free(xr), free(nan_row), free(got);
}

int main(void)
{
    const char *why = NULL;
    int n = mrt_cuda_device_count(&why);
    if (n == 0) {
        printf("SKIP: runtime/cuda/start: no CUDA device (%s); the CUDA kernel checks did not run\n", why);
        return 0;
    }
    const char *want = getenv("MRT_CHECK_DEVICE");
    if (!want || !*want)
        want = "cuda:0";
    mrt_device parsed;
    if (mrt_device_parse(want, &parsed, NULL) != MRT_OK) {
        printf("FAIL: runtime/cuda/setup: MRT_CHECK_DEVICE: %s\n", mrt_last_error());
        return 1;
    }
    if (parsed.kind != MRT_DEVICE_CUDA) {
        printf("FAIL: runtime/cuda/setup: MRT_CHECK_DEVICE='%s' is not a CUDA device\n", want);
        return 1;
    }
    if (mrt_device_select(want, &g_dev) != MRT_OK || mrt_device_activate(g_dev) != MRT_OK ||
        mrt_stream_create(g_dev, &g_stream) != MRT_OK) {
        printf("FAIL: runtime/cuda/setup: %s\n", mrt_last_error());
        return 1;
    }
    mrt_device_info list[16];
    int cnt = 0;
    if (mrt_device_list(list, 16, &cnt) == MRT_OK)
        for (int i = 0; i < cnt && i < 16; i++)
            if (list[i].device.kind == g_dev.kind && list[i].device.index == g_dev.index)
                printf("# cuda:%d %s, compute %d.%d\n", g_dev.index, list[i].name, list[i].cc_major,
                       list[i].cc_minor);
    { /* the checks' buffers are on the device asked for (cudaPointerGetAttributes) */
        void *p = mrt_alloc(g_dev, 256);
        mrt_device at = {MRT_DEVICE_CPU, -1};
        int ok = p && mrt_pointer_device(p, &at) == MRT_OK && at.kind == g_dev.kind && at.index == g_dev.index;
        printf("%s: runtime/cuda/device (buffers on cuda:%d, MRT_CHECK_DEVICE)%s%s\n", ok ? "PASS" : "FAIL",
               g_dev.index, ok ? "" : ": ", ok ? "" : mrt_last_error());
        g_fail |= !ok;
        mrt_free(g_dev, p);
    }
    const char *big = getenv("MRT_CHECK_B12");
    if (big && strcmp(big, "sampled") == 0) { /* alone: it needs a device of its own size */
        check_b12_sampled();
        mrt_stream_destroy(g_dev, g_stream);
        return g_fail;
    }
    check_softmax(7, 1000, 1, 0, 1);
    check_softmax(7, 1000, 1, 1, 1);
    check_softmax(5, 3, 1, 0, 1);
    check_softmax(4, 33, 3, 0, 1);
    check_softmax(4, 33, 3, 1, 1);
    /* few long rows are split over blocks: a row of 1M; three of 100003 with a NaN row and an all
     * -inf one */
    check_softmax(1, 1 << 20, 1, 0, 3);
    check_softmax(1, 1 << 20, 1, 1, 3);
    check_softmax(3, 100003, 1, 0, 3);
    check_softmax(3, 100003, 1, 1, 3);
    /* and a few columns down a long axis, split the same way by columns */
    check_softmax(2, 50000, 3, 0, 3);
    check_softmax(2, 50000, 3, 1, 3);
    check_masked(1, 1);
    check_masked(1, 0);
    check_masked(0, 1);
    check_attention(0, 1);
    check_attention(1, 0);
    check_attention(1, 1);
    check_reduce(9, 700, 1, 1);
    check_reduce(9, 5, 1, 1);
    check_reduce(4, 37, 6, 1);
    /* long axes: one row of 1M and three of 100003 are split over blocks (a chunk each, then the
     * chunks' partials combined); a few columns down a long axis are tiled and split alike; many
     * columns are tiled in one launch */
    check_reduce(1, 1 << 20, 1, 2);
    check_reduce(3, 100003, 1, 2);
    check_reduce(2, 50000, 3, 2);
    check_reduce(3, 40, 1000, 1);
    check_conv(2, 4, 9, 8, 6, 3, 2, 1, 2, 1, 0, 1, 0, 2, 1, 2);
    check_conv(2, 4, 7, 7, 6, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1);
    check_conv(3, 4, 5, 6, 8, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1);
    check_conv(3, 4, 5, 6, 8, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 2);
    check_conv(1, 2, 4, 4, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2); /* depthwise x2 (B26) */
    /* grouped convolutions with few taps take the direct kernel: depthwise 3x3 stride 2 (MobileNet),
     * with dilation and asymmetric padding, a grouped 4-channel 3x3 (ResNeXt), and a large K
     * (17 * 4 * 4 taps > 256) that stays with im2col + GEMM */
    check_conv(3, 8, 9, 10, 8, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 8);
    check_conv(2, 6, 8, 7, 12, 3, 2, 1, 1, 2, 0, 1, 1, 2, 1, 6);
    check_conv(2, 8, 6, 6, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2);
    check_conv(1, 34, 6, 6, 4, 4, 4, 1, 1, 0, 0, 0, 0, 1, 1, 2);
    /* ResNeXt-like grouped 3x3 with more than 256 taps per output (C/g = 32: 288), stride 1 and 2,
     * batch 2: per image one im2col of all groups and one GEMM batched over them (2 launches and
     * 2 GEMMs for 8 groups as for 2); and 1x1 grouped convs with C/g > 256, on x directly:
     * min(N, groups) GEMMs (batched over the groups per image, or over the images per group) */
    check_conv(2, 256, 6, 6, 256, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 8);
    check_conv(2, 256, 7, 7, 256, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 8);
    check_conv(2, 1024, 4, 4, 512, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 32);
    check_conv(2, 64, 6, 5, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2);
    check_conv(2, 1200, 3, 3, 64, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 4);
    check_conv(3, 1028, 2, 3, 8, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 2);
    check_pools();
    check_conv_wgrad(2, 4, 9, 8, 6, 3, 2, 1, 2, 1, 0, 1, 0, 2, 1, 2);
    check_conv_wgrad(3, 3, 8, 8, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1);
    check_conv_wgrad(2, 4, 7, 7, 6, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1);
    check_conv_wgrad(3, 4, 5, 6, 8, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1); /* 1x1: x read directly */
    check_conv_wgrad(2, 8, 6, 6, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 8); /* depthwise x2 */
    check_conv_wgrad(2, 256, 5, 5, 256, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 32); /* ResNeXt-like, 32 groups */
    check_conv_wgrad(3, 64, 4, 5, 32, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 4);    /* 1x1 grouped: x read directly */
    check_pool_grads();
    check_layernorm(5, 300, 3);
    check_layernorm(3, 7, 3);
    for (int affine = 0; affine < 3; affine++)
        check_layernorm(4, 60, affine);
    check_conv_transpose(2, 4, 5, 6, 3, 4, 4, 2, 2, 1, 1, 0, 0, 1, 1, 1);
    check_conv_transpose(1, 4, 5, 6, 6, 3, 2, 3, 1, 2, 0, 1, 1, 1, 2, 2);
    check_conv_transpose(2, 6, 4, 4, 6, 3, 3, 2, 2, 0, 0, 1, 1, 1, 1, 6);
    check_conv_transpose(1, 6, 4, 5, 9, 2, 3, 1, 1, 1, 1, 0, 0, 2, 1, 3);
    check_interp(6, 5, 7, 10, 14, 0, 0, 2.0, 2.0);
    check_interp(6, 5, 7, 8, 3, 0, 0, 0, 0);
    check_interp(6, 5, 7, 7, 4, 0, 0, 1.5, 0.7);
    check_interp(6, 3, 4, 3, 5, 1, 0, 1.3, 1.3);
    check_interp(6, 5, 7, 9, 4, 1, 0, 0, 0);
    check_interp(6, 5, 7, 9, 13, 1, 1, 0, 0);
    check_interp(6, 5, 7, 1, 5, 1, 1, 0, 0);
    check_interp(6, 5, 7, 7, 4, 1, 0, 1.5, 0.7);
    /* its gradient: nearest (2x, a size, a scale below 1), bilinear (a scale, align_corners,
     * downsampling, out == in, out 1) */
    check_interp_grad(6, 5, 7, 10, 14, 0, 0, 2.0, 2.0);
    check_interp_grad(6, 5, 7, 8, 3, 0, 0, 0, 0);
    check_interp_grad(6, 5, 7, 7, 4, 0, 0, 1.5, 0.7);
    check_interp_grad(6, 3, 4, 8, 6, 1, 0, 2.5, 1.5);
    check_interp_grad(6, 5, 7, 9, 13, 1, 1, 0, 0);
    check_interp_grad(6, 9, 7, 4, 3, 1, 0, 0, 0);
    check_interp_grad(6, 9, 7, 4, 3, 1, 1, 0, 0);
    check_interp_grad(6, 5, 7, 5, 7, 1, 0, 0, 0);
    check_interp_grad(6, 5, 7, 1, 5, 1, 1, 0, 0);
    check_embedding(0);
    check_embedding(1);
    for (int mode = 0; mode < 3; mode++)
        for (int i64 = 0; i64 < 2; i64++)
            check_gather(mode, i64);
    for (int mode = 0; mode < 2; mode++)
        for (int i64 = 0; i64 < 2; i64++)
            check_scatter_add(mode, i64);
    check_dropout(1001, 0.3f, 0x123456789abcULL, 7, 2);
    check_dropout(4096, 0.5f, 0, 0, 0);
    check_cumsum(9, 700, 1, 0);
    check_cumsum(3, 100003, 1, 0); /* long rows: cumsum_rows_kernel (chunks of 391) */
    check_cumsum(2, 1024, 1, 0);
    check_cumsum(4, 37, 6, 0);
    check_cumsum(3, 100003, 1, 1); /* from the end (a cumsum's adjoint) */
    check_cumsum(2, 1024, 1, 1);
    check_cumsum(4, 37, 6, 1);
    check_iota(1000);
    check_sumsq(0);
    check_sumsq(1);
    check_sumsq(1000);
    check_sumsq(100003);
    check_concat(3, 12, 40, 8);
    check_concat(3, 5, 17, 3);
    check_concat(1, 64, 64, 0);
    check_concat(4, 32, 64, 32);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            check_gemm(ta, tb, 17, 9, 13, 3, 0);
    check_gemm(0, 1, 5, 7, 3, 4, 1);
    check_gemm(0, 0, 64, 48, 32, 1, 0);
    check_gemm_bias_acts();
    check_gpu_copies();
    if (big && strcmp(big, "1") == 0)
        check_b12();
    /* an empty tensor launches nothing and succeeds (B18) */
    mrt_status st = mrt_cuda_softmax_f32(g_stream, NULL, NULL, 0, 4, 1, 0);
    st = st == MRT_OK ? mrt_cuda_maxpool2d_f32(g_stream, NULL, NULL, 0, 4, 4, 2, 2, 2, 2, 2, 2, 0, 0, 1, 1) : st;
    st = st == MRT_OK ? mrt_stream_sync(g_dev, g_stream, "empty") : st;
    printf("%s: runtime/cuda/empty%s%s\n", st == MRT_OK ? "PASS" : "FAIL", st == MRT_OK ? "" : ": ",
           st == MRT_OK ? "" : mrt_last_error());
    g_fail |= st != MRT_OK;
    mrt_stream_destroy(g_dev, g_stream);
    return g_fail;
}
