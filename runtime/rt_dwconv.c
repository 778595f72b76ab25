/*
 * rt_dwconv.c — the CPU's direct depthwise convolution, for generated code (mrt_conv2d_dw in
 * mrt_kernels.h) and the runtime's tests.
 *
 * A depthwise conv2d (groups == C: output channel o reads input channel o / (O / C) alone, the
 * 3x3 and 5x5 of MobileNet and EfficientNet, the 7x7 of ConvNeXt) as im2col + one GEMM per group
 * is a poor fit: per group a [O/C, KH*KW] @ [KH*KW, OH*OW] GEMM, too small for a BLAS to reach
 * speed, after an unfolding that writes KH*KW times the input. Here each output plane is
 * computed directly from its input plane, which stays in cache:
 *
 *   - on a CPU with AVX-512 (checked at run time, __builtin_cpu_supports) and stride 1 or 2, a
 *     tile of 4 output rows x 16 columns is held in four zmm accumulators; each tap (kh, kw) adds
 *     w[kh, kw] times one masked load of 16 inputs per row (stride 2: two loads, the even lanes
 *     picked by a permute). Masked-off lanes neither read nor fault, so the padding needs no
 *     branch and no padded copy: the mask keeps the lanes whose input column is inside [0, W);
 *   - otherwise (no AVX-512, another stride, or MODELRT_DWCONV=portable, which the tests use to
 *     check this path too), each output row accumulates tap by tap, `omp simd` over the columns
 *     whose input lies inside the row (the im2col kernel's [lo, hi) bounds).
 *
 * Both sum the taps of one output in the same order (kh, then kw, from 0.0f), then the epilogue
 * runs on each finished output row while it is in L1: + bias[o] (none when bias is NULL: -0.0
 * stays), then the activation, through mrt_kernels.h's scalar functions, so the fused result
 * equals the unfused chain's conv, add, activation. Threads split the N*O planes on the one
 * OpenMP pool; every output is written by one thread in the serial order, so the result does not
 * depend on the thread count. bench/conv/dwconv.c times it against the im2col path.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "modelrt.h"
#include "mrt_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define DW_X86 1
#endif

/* One call's shapes and pointers (mrt_cpu_dwconv2d_f32's arguments). */
typedef struct DwArgs {
    float *y;
    const float *x, *w, *bias;
    int act;
    float lo, hi;
    int64_t C, H, W, O, OH, OW, mult;
    int KH, KW, sh, sw, pt, pl, dh, dw;
} DwArgs;

/* The epilogue on n outputs r[0..n) of output channel o: + bias[o], then the activation. */
static inline __attribute__((always_inline)) void dw_epilogue(const DwArgs *a, float *r, int64_t n, int64_t o) {
    if (a->bias) {
        const float b = a->bias[o];
        MRT_PRAGMA(omp simd)
        for (int64_t i = 0; i < n; i++) r[i] += b;
    }
    const float lo = a->lo, hi = a->hi;
    switch (a->act) {
    case MRT_ACT_NONE: break;
    case MRT_ACT_RELU:
        MRT_PRAGMA(omp simd)
        for (int64_t i = 0; i < n; i++) r[i] = mrt_relu(r[i]);
        break;
    case MRT_ACT_CLAMP:
        MRT_PRAGMA(omp simd)
        for (int64_t i = 0; i < n; i++) r[i] = mrt_clamp(r[i], lo, hi);
        break;
    case MRT_ACT_HARDSWISH:
        MRT_PRAGMA(omp simd)
        for (int64_t i = 0; i < n; i++) r[i] = mrt_hardswish(r[i]);
        break;
    /* mrt_tanhf, mrt_erff: branch-free, vectorized; their fmaf steps one instruction in the
     * x86-64-v3 and v4 copies of mrt_cpu_gelu_f32 */
    case MRT_ACT_GELU_TANH:
        mrt_cpu_gelu_f32(r, NULL, n, 1);
        break;
    case MRT_ACT_GELU:
        mrt_cpu_gelu_f32(r, NULL, n, 0);
        break;
    /* libm's expf: not vectorized, as in the unfused elementwise kernel */
    case MRT_ACT_SILU:
        for (int64_t i = 0; i < n; i++) r[i] = mrt_silu(r[i]);
        break;
    case MRT_ACT_SIGMOID:
        for (int64_t i = 0; i < n; i++) r[i] = mrt_sigmoid(r[i]);
        break;
    }
}

/* Output plane (n, o), any stride: tap by tap into the output row, then its epilogue. */
static inline __attribute__((always_inline)) void dw_plane_portable(const DwArgs *a, int64_t n, int64_t o) {
    const int64_t H = a->H, W = a->W, OH = a->OH, OW = a->OW;
    const int KH = a->KH, KW = a->KW, sh = a->sh, sw = a->sw;
    const float *xp = a->x + (n * a->C + o / a->mult) * H * W, *wk = a->w + o * KH * KW;
    float *yp = a->y + (n * a->O + o) * OH * OW;
    for (int64_t oh = 0; oh < OH; oh++) {
        float *yr = yp + oh * OW;
        memset(yr, 0, (size_t)OW * sizeof(float));
        for (int kh = 0; kh < KH; kh++) {
            const int64_t ih = oh * sh - a->pt + (int64_t)kh * a->dh;
            if (ih < 0 || ih >= H) continue;
            for (int kw = 0; kw < KW; kw++) {
                /* output columns whose input column lies inside [0, W): [lo, hi) */
                const int64_t off = (int64_t)kw * a->dw - a->pl;
                int64_t lo = off >= 0 ? 0 : (-off + sw - 1) / sw;
                int64_t hi = W - 1 - off < 0 ? 0 : (W - 1 - off) / sw + 1;
                if (hi > OW) hi = OW;
                if (lo >= hi) continue;
                const float wv = wk[kh * KW + kw], *xr = xp + ih * W + off;
                if (sw == 1) {
                    MRT_PRAGMA(omp simd)
                    for (int64_t ow = lo; ow < hi; ow++) yr[ow] += wv * xr[ow];
                } else {
                    MRT_PRAGMA(omp simd)
                    for (int64_t ow = lo; ow < hi; ow++) yr[ow] += wv * xr[ow * sw];
                }
            }
        }
        dw_epilogue(a, yr, OW, o);
    }
}

static void dw_plane_generic(const DwArgs *a, int64_t n, int64_t o) { dw_plane_portable(a, n, o); }

#ifdef DW_X86
#define DW_AVX512 __attribute__((target("avx512f")))

/* The lanes [lo, hi) of a mask (0 when empty), hi <= 32. */
static inline uint32_t dw_lanes(int64_t lo, int64_t hi) {
    if (lo < 0) lo = 0;
    if (hi > 32) hi = 32;
    if (hi <= lo) return 0;
    uint32_t up = hi == 32 ? 0xffffffffu : (1u << hi) - 1;
    return up & ~((1u << lo) - 1);
}

/* One tap's inputs for 16 output columns starting at input column `base` of row xr: stride 1,
 * lanes `m` of xr[base + j]; stride 2, xr[base + 2j] from the 32 columns at base, lanes m
 * (low 16) and m >> 16 of the two halves. */
DW_AVX512 static inline __m512 dw_load(const float *xr, int64_t base, uint32_t m, int sw, __m512i even) {
    if (sw == 1) return _mm512_maskz_loadu_ps((__mmask16)m, xr + base);
    __m512 l = _mm512_maskz_loadu_ps((__mmask16)(m & 0xffffu), xr + base);
    __m512 h = _mm512_maskz_loadu_ps((__mmask16)(m >> 16), xr + base + 16);
    return _mm512_permutex2var_ps(l, even, h);
}

/* Output plane (n, o), stride 1 or 2, kernel at most DW_MAX_K per axis (any padding, dilation):
 * tiles of 4 rows x 16 columns in registers, then the epilogue on the tile's rows. The input
 * rows of a tile (per kh) and the lane masks of a column block (per kw) are computed once, so
 * the tap loop is loads and arithmetic; a tile whose rows are all inside the input (most) runs
 * without a branch per row. */
#define DW_MAX_K 32
DW_AVX512 static void dw_plane_avx512(const DwArgs *a, int64_t n, int64_t o) {
    const int64_t H = a->H, W = a->W, OH = a->OH, OW = a->OW;
    const int KH = a->KH, KW = a->KW, sh = a->sh, sw = a->sw, dwl = a->dw;
    const float *xp = a->x + (n * a->C + o / a->mult) * H * W, *wk = a->w + o * KH * KW;
    float *yp = a->y + (n * a->O + o) * OH * OW;
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const float *rows[DW_MAX_K][4]; /* the input row of output row oh0 + r for kh (NULL: padding) */
    int full[DW_MAX_K];             /* all 4 rows of kh inside the input */
    uint32_t mk[DW_MAX_K];          /* the lanes of kw for the current column block */
    for (int64_t oh0 = 0; oh0 < OH; oh0 += 4) {
        const int nr = OH - oh0 < 4 ? (int)(OH - oh0) : 4;
        for (int kh = 0; kh < KH; kh++) {
            full[kh] = nr == 4;
            for (int r = 0; r < 4; r++) {
                const int64_t ih = (oh0 + r) * sh - a->pt + (int64_t)kh * a->dh;
                rows[kh][r] = r < nr && ih >= 0 && ih < H ? xp + ih * W : NULL;
                full[kh] &= rows[kh][r] != NULL;
            }
        }
        for (int64_t ow0 = 0; ow0 < OW; ow0 += 16) {
            const int64_t nc = OW - ow0 < 16 ? OW - ow0 : 16;
            /* lanes whose input column base + lane is inside [0, W) and that an output column
             * < OW reads (stride 2: lane 2j for column j) */
            const uint32_t need = dw_lanes(0, sw == 1 ? nc : 2 * nc - 1);
            for (int kw = 0; kw < KW; kw++) {
                const int64_t base = ow0 * sw + (int64_t)kw * dwl - a->pl;
                mk[kw] = dw_lanes(-base, W - base) & need;
            }
            __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
            for (int kh = 0; kh < KH; kh++) {
                const float *r0 = rows[kh][0], *r1 = rows[kh][1], *r2 = rows[kh][2], *r3 = rows[kh][3];
                const float *wr = wk + kh * KW;
                int64_t base = ow0 * sw - a->pl;
                if (full[kh]) {
                    for (int kw = 0; kw < KW; kw++, base += dwl) {
                        const uint32_t m = mk[kw];
                        if (!m) continue;
                        const __m512 wv = _mm512_set1_ps(wr[kw]);
                        acc0 = _mm512_add_ps(acc0, _mm512_mul_ps(wv, dw_load(r0, base, m, sw, even)));
                        acc1 = _mm512_add_ps(acc1, _mm512_mul_ps(wv, dw_load(r1, base, m, sw, even)));
                        acc2 = _mm512_add_ps(acc2, _mm512_mul_ps(wv, dw_load(r2, base, m, sw, even)));
                        acc3 = _mm512_add_ps(acc3, _mm512_mul_ps(wv, dw_load(r3, base, m, sw, even)));
                    }
                    continue;
                }
                if (!r0 && !r1 && !r2 && !r3) continue;
                for (int kw = 0; kw < KW; kw++, base += dwl) {
                    const uint32_t m = mk[kw];
                    if (!m) continue;
                    const __m512 wv = _mm512_set1_ps(wr[kw]);
                    if (r0) acc0 = _mm512_add_ps(acc0, _mm512_mul_ps(wv, dw_load(r0, base, m, sw, even)));
                    if (r1) acc1 = _mm512_add_ps(acc1, _mm512_mul_ps(wv, dw_load(r1, base, m, sw, even)));
                    if (r2) acc2 = _mm512_add_ps(acc2, _mm512_mul_ps(wv, dw_load(r2, base, m, sw, even)));
                    if (r3) acc3 = _mm512_add_ps(acc3, _mm512_mul_ps(wv, dw_load(r3, base, m, sw, even)));
                }
            }
            const __mmask16 st = (__mmask16)dw_lanes(0, nc);
            float *yr = yp + oh0 * OW + ow0;
            _mm512_mask_storeu_ps(yr, st, acc0);
            if (nr > 1) _mm512_mask_storeu_ps(yr + OW, st, acc1);
            if (nr > 2) _mm512_mask_storeu_ps(yr + 2 * OW, st, acc2);
            if (nr > 3) _mm512_mask_storeu_ps(yr + 3 * OW, st, acc3);
        }
        for (int r = 0; r < nr; r++) dw_epilogue(a, yp + (oh0 + r) * OW, OW, o);
    }
}

/* 1 when the AVX-512 path runs: the CPU has it and MODELRT_DWCONV is not "portable". */
static int dw_use_avx512(void) {
    static int use = -1; /* benign race: every thread computes the same value */
    int u = __atomic_load_n(&use, __ATOMIC_RELAXED);
    if (u < 0) {
        const char *e = getenv("MODELRT_DWCONV");
        __builtin_cpu_init();
        u = __builtin_cpu_supports("avx512f") && !(e && !strcmp(e, "portable"));
        __atomic_store_n(&use, u, __ATOMIC_RELAXED);
    }
    return u;
}
#endif

void mrt_cpu_dwconv2d_f32(float *y, const float *x, const float *w, const float *bias, int act, float lo, float hi,
                          int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int KH, int KW, int64_t OH, int64_t OW,
                          int sh, int sw, int pt, int pl, int dh, int dw) {
    const DwArgs a = {.y = y, .x = x, .w = w, .bias = bias, .act = act, .lo = lo, .hi = hi, .C = C, .H = H, .W = W,
                      .O = O, .OH = OH, .OW = OW, .mult = O / C, .KH = KH, .KW = KW, .sh = sh, .sw = sw, .pt = pt,
                      .pl = pl, .dh = dh, .dw = dw};
    const int64_t planes = N * O;
#ifdef DW_X86
    const int fast = dw_use_avx512() && (sw == 1 || sw == 2) && KH <= DW_MAX_K && KW <= DW_MAX_K;
#else
    const int fast = 0;
#endif
    MRT_PRAGMA(omp parallel for schedule(static) if(planes * OH * OW * KH * KW >= MRT_PAR_MIN))
    for (int64_t p = 0; p < planes; p++) {
#ifdef DW_X86
        if (fast) {
            dw_plane_avx512(&a, p / O, p % O);
            continue;
        }
#endif
        dw_plane_generic(&a, p / O, p % O);
    }
    (void)fast;
}
