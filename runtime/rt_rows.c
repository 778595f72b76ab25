/*
 * rt_rows.c — the CPU's row kernels of attention and the transformer block, for generated code
 * (mrt_softmax_masked_f32, mrt_softmax_f32 along the last axis, and mrt_layernorm_f32 in
 * mrt_kernels.h call them) and the runtime's tests: softmax along rows (causal or not, with
 * PyTorch's zeros for a fully masked row) and layer norm.
 *
 * Generated code and mrt_kernels.h are built for the baseline x86-64 (SSE2), where these rows
 * were scalar: a serial sum in double, a call to libm's expf per score. In MiniLM 8x128 they took
 * a quarter of the run. Here each has two paths with the same arithmetic:
 *
 *   - on a CPU with AVX-512 F (checked at run time, __builtin_cpu_supports), 16 lanes at a time
 *     with intrinsics; the tail of a row is a masked load (the masked-off lanes read nothing and
 *     add +0.0, which leaves a sum unchanged);
 *   - otherwise (or with MODELRT_SIMD=portable, which the tests use to check this path too) plain
 *     C that follows the same lane structure: element j of a row adds into partial sum j % 16.
 *
 * Every sum is 16 partial sums in double, combined in one fixed order (lane k += lane k + 8,
 * then + 4, + 2, + 1, as the AVX-512 path halves its registers), and every other step is the
 * same IEEE operation in both: no contraction (-ffp-contract=off), a fused multiply-add only
 * where written, fmaf in C and _mm512_fmadd_ps in the AVX-512 path (attention's products and
 * mrt_exp_nonpos), so the two paths give the same bits, and results do not depend on the thread
 * count (a row is computed by one thread). Softmax's e^(x - max) is mrt_exp_nonpos (Cephes'
 * expf, in mrt_kernels.h; its 16-lane copy here is the same sequence).
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "modelrt.h"
#include "mrt_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ROWS_X86 1
#endif

/* The portable paths use fmaf where the AVX-512 ones use FMA instructions (the same bits). On
 * x86-64 built for the baseline, fmaf is a call into libm; these functions get a second copy
 * built for FMA, chosen at load time where the CPU has it (GCC's target_clones). */
#if defined(ROWS_X86) && defined(__has_attribute)
#if __has_attribute(target_clones) && defined(__ELF__) && !defined(__FMA__)
#define ROWS_FMA_CLONES __attribute__((target_clones("fma", "default")))
#endif
#endif
#ifndef ROWS_FMA_CLONES
#define ROWS_FMA_CLONES
#endif

/* ------------------------------------------------------------------ which path */

/* What the CPU offers, MODELRT_SIMD's path names aside: 2 AVX-512 (F, BW, DQ, VL, CD), 1
 * x86-64-v3 (AVX2 + FMA), 0 neither (or not x86-64). */
static int simd_level_detect(void) {
#ifdef ROWS_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512cd"))
        return 2;
#if __GNUC__ >= 12 && !defined(__clang__)
    return __builtin_cpu_supports("x86-64-v3") ? 1 : 0;
#else /* older GCC and clang know no "x86-64-v3" here (nor clang "movbe"); every CPU with these
       * also has the rest of v3 (F16C, LZCNT, MOVBE: Haswell, Excavator and later) */
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi") &&
                   __builtin_cpu_supports("bmi2")
               ? 1
               : 0;
#endif
#else
    return 0;
#endif
}

/* The path every CPU kernel with copies takes, read once: 2 AVX-512, 1 AVX2 + FMA, 0 portable.
 * MODELRT_SIMD=portable forces 0, MODELRT_SIMD=avx2 at most 1 (the tests run each path). An
 * AVX-512 CPU also has v3 (every one shipped has AVX2 and FMA). */
static int simd_level(void) {
    static int use = -1; /* benign race: every thread computes the same value */
    int u = __atomic_load_n(&use, __ATOMIC_RELAXED);
    if (u < 0) {
        const char *e = getenv("MODELRT_SIMD");
        u = simd_level_detect();
        if (e && !strcmp(e, "portable")) u = 0;
        else if (e && !strcmp(e, "avx2") && u > 1) u = 1;
        __atomic_store_n(&use, u, __ATOMIC_RELAXED);
    }
    return u;
}

int mrt_cpu_simd_avx512(void) { return simd_level() == 2; }

int mrt_cpu_simd_avx2(void) { return simd_level() >= 1; }

/* ------------------------------------------------------------------ gelu loops */

/* mrt_cpu_gelu_f32's loop, once per copy: SUF "" (the x86-64 baseline, where mrt_erff's fmaf is a
 * libm call), _v3 and _v4 (fmaf one instruction, 8 and 16 lanes). */
#define GELU_LOOP(SUF, ATTR)                                                                      \
    ATTR static void gelu_loop##SUF(float *x, const float *bias, int64_t n, int tanh_form) {     \
        if (tanh_form && bias) {                                                                 \
            MRT_PRAGMA(omp simd)                                                                 \
            for (int64_t i = 0; i < n; i++) x[i] = mrt_gelu_tanh(x[i] + bias[i]);                \
        } else if (tanh_form) {                                                                  \
            MRT_PRAGMA(omp simd)                                                                 \
            for (int64_t i = 0; i < n; i++) x[i] = mrt_gelu_tanh(x[i]);                          \
        } else if (bias) {                                                                       \
            MRT_PRAGMA(omp simd)                                                                 \
            for (int64_t i = 0; i < n; i++) x[i] = mrt_gelu(x[i] + bias[i]);                     \
        } else {                                                                                 \
            MRT_PRAGMA(omp simd)                                                                 \
            for (int64_t i = 0; i < n; i++) x[i] = mrt_gelu(x[i]);                               \
        }                                                                                        \
    }
GELU_LOOP(, )
#if MRT_SIMD_V4
GELU_LOOP(_v3, MRT_TARGET_V3)
GELU_LOOP(_v4, MRT_TARGET_V4)
#endif
#undef GELU_LOOP

void mrt_cpu_gelu_f32(float *x, const float *bias, int64_t n, int tanh_form) {
#if MRT_SIMD_V4
    if (mrt_cpu_simd_avx512()) {
        gelu_loop_v4(x, bias, n, tanh_form);
        return;
    }
    if (mrt_cpu_simd_avx2()) {
        gelu_loop_v3(x, bias, n, tanh_form);
        return;
    }
#endif
    gelu_loop(x, bias, n, tanh_form);
}

/* s[0] = the 16 partial sums combined: lane k += lane k + w for w = 8, 4, 2, 1. */
static inline double rows_combine16(double *s) {
    for (int w = 8; w; w >>= 1)
        for (int k = 0; k < w; k++) s[k] += s[k + w];
    return s[0];
}

/* The row's maximum over [0, lim), NaN when it holds one (a canonical quiet NaN: its payload does
 * not depend on the path), +0.0 for a maximum of -0.0 (max is exact otherwise, in any order). */
static inline float rows_canon_max(float m, int nan) { return nan ? NAN : m == 0.0f ? 0.0f : m; }

/* ------------------------------------------------------------------ portable paths */

/* The row's e^(x - max) into y[0, lim) and zeros into y[lim, n); returns 1 / their sum, the
 * factor that normalizes them (0 for a fully masked row with zero_masked_rows, whose y is all 0). */
ROWS_FMA_CLONES static float softmax_exp_portable(float *yr, const float *xr, int64_t lim, int64_t n, int zero_masked_rows) {
    float m = -INFINITY;
    int nan = 0;
    for (int64_t j = 0; j < lim; j++) {
        nan |= xr[j] != xr[j];
        m = xr[j] > m ? xr[j] : m;
    }
    m = rows_canon_max(m, nan);
    if (m == -INFINITY && zero_masked_rows) {
        for (int64_t j = 0; j < n; j++) yr[j] = 0.0f;
        return 0.0f;
    }
    double s[16] = {0};
    for (int64_t j = 0; j < lim; j++) { /* each exp once, kept in y (y may be x) */
        const float e = mrt_exp_nonpos(xr[j] - m);
        s[j & 15] += e;
        yr[j] = e;
    }
    for (int64_t j = lim; j < n; j++) yr[j] = 0.0f;
    return (float)(1.0 / rows_combine16(s));
}

static void softmax_row_portable(float *yr, const float *xr, int64_t lim, int64_t n, int zero_masked_rows) {
    const float inv = softmax_exp_portable(yr, xr, lim, n, zero_masked_rows);
    for (int64_t j = 0; j < lim; j++) yr[j] *= inv;
}

/* The normalized value of x[j], v = (float)((x - mean) * inv), then * w[j], + b[j] (w, b may be NULL). */
static inline float ln_out(double xj, double mean, double inv, const float *w, const float *b, int64_t j) {
    float v = (float)((xj - mean) * inv);
    if (w) v = v * w[j];
    if (b) v = v + b[j];
    return v;
}

static void layernorm_row_portable(float *yr, const float *xr, const float *w, const float *b, int64_t D, float eps) {
    double s[16] = {0};
    for (int64_t j = 0; j < D; j++) s[j & 15] += xr[j];
    const double mean = rows_combine16(s) / (double)D;
    double v[16] = {0};
    for (int64_t j = 0; j < D; j++) {
        const double d = (double)xr[j] - mean;
        v[j & 15] += d * d;
    }
    const double var = rows_combine16(v) / (double)D;
    const double inv = 1.0 / sqrt(var + (double)eps);
    for (int64_t j = 0; j < D; j++) yr[j] = ln_out(xr[j], mean, inv, w, b, j);
}

/* ------------------------------------------------------------------ AVX-512 paths */

#ifdef ROWS_X86
#define ROWS_AVX512 __attribute__((target("avx512f")))

/* The lanes [0, min(16, left)) of a 16-lane block. */
static inline ROWS_AVX512 __mmask16 rows_mask(int64_t left) {
    return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
}

/* mrt_exp_nonpos on 16 lanes: the same operations in the same order (the FMAs as FMAs). Below
 * -104 and at -inf, where mrt_exp_nonpos selects 0, this takes the value at the clamp, -104,
 * which is +0 too (p * 2^-150 with p < 1 rounds to +0: the same bits); NaN gives max's -104,
 * then d. */
static inline ROWS_AVX512 __m512 exp_nonpos16(__m512 d) {
    const __m512 c = _mm512_max_ps(d, _mm512_set1_ps(-104.0f)); /* NaN: the second operand */
    const __mmask16 nan = _mm512_cmp_ps_mask(d, d, _CMP_UNORD_Q);
    const __m512 magic = _mm512_set1_ps(12582912.0f);
    const __m512 nf = _mm512_sub_ps(_mm512_fmadd_ps(c, _mm512_set1_ps(1.44269504088896341f), magic), magic);
    const __m512 r = _mm512_fnmadd_ps(nf, _mm512_set1_ps(-2.12194440e-4f),
                                      _mm512_fnmadd_ps(nf, _mm512_set1_ps(0.693359375f), c));
    const __m512 z = _mm512_mul_ps(r, r);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(1.9875691500e-4f), r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_add_ps(_mm512_fmadd_ps(p, z, r), _mm512_set1_ps(1.0f));
    /* p * 2^nf rounded once (to a subnormal too): the portable p * 2^(n+64) * 2^-64, whose first
     * product is exact, in one instruction */
    return _mm512_mask_blend_ps(nan, _mm512_scalef_ps(p, nf), d); /* NaN: d */
}

/* exp_nonpos16 on four vectors, each step for all four before the next: the same operations on
 * each lane, written so that the four dependency chains are interleaved in the instruction
 * stream (the out-of-order window then always has independent work). */
static inline ROWS_AVX512 __attribute__((always_inline)) void exp_nonpos16x4(const __m512 *d, __m512 *e) {
    const __m512 magic = _mm512_set1_ps(12582912.0f);
    __m512 c[4], nf[4], r[4], z[4], p[4];
    __mmask16 nan[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) c[i] = _mm512_max_ps(d[i], _mm512_set1_ps(-104.0f));
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) nan[i] = _mm512_cmp_ps_mask(d[i], d[i], _CMP_UNORD_Q);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) nf[i] = _mm512_fmadd_ps(c[i], _mm512_set1_ps(1.44269504088896341f), magic);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) nf[i] = _mm512_sub_ps(nf[i], magic);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) r[i] = _mm512_fnmadd_ps(nf[i], _mm512_set1_ps(0.693359375f), c[i]);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) r[i] = _mm512_fnmadd_ps(nf[i], _mm512_set1_ps(-2.12194440e-4f), r[i]);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) z[i] = _mm512_mul_ps(r[i], r[i]);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) p[i] = _mm512_fmadd_ps(_mm512_set1_ps(1.9875691500e-4f), r[i], _mm512_set1_ps(1.3981999507e-3f));
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) p[i] = _mm512_fmadd_ps(p[i], r[i], _mm512_set1_ps(8.3334519073e-3f));
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) p[i] = _mm512_fmadd_ps(p[i], r[i], _mm512_set1_ps(4.1665795894e-2f));
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) p[i] = _mm512_fmadd_ps(p[i], r[i], _mm512_set1_ps(1.6666665459e-1f));
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) p[i] = _mm512_fmadd_ps(p[i], r[i], _mm512_set1_ps(5.0000001201e-1f));
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) p[i] = _mm512_fmadd_ps(p[i], z[i], r[i]);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) p[i] = _mm512_add_ps(p[i], _mm512_set1_ps(1.0f));
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) e[i] = _mm512_mask_blend_ps(nan[i], _mm512_scalef_ps(p[i], nf[i]), d[i]);
}

/* 16 floats (masked-off lanes 0) added into the double partial sums lanes 0-7 (a) and 8-15 (b). */
static inline ROWS_AVX512 void add16(__m512d *a, __m512d *b, __m512 v) {
    *a = _mm512_add_pd(*a, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
    *b = _mm512_add_pd(*b, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
}

/* rows_combine16 on the partial sums held as lanes 0-7 (a) and 8-15 (b). */
static inline ROWS_AVX512 double combine16(__m512d a, __m512d b) {
    const __m512d s8 = _mm512_add_pd(a, b);
    const __m256d s4 = _mm256_add_pd(_mm512_castpd512_pd256(s8), _mm512_extractf64x4_pd(s8, 1));
    const __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(s4), _mm256_extractf128_pd(s4, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
}

/* softmax_exp_portable on 16 lanes: e into y[0, lim), zeros after; returns 1 / sum (0: masked). */
static ROWS_AVX512 float softmax_exp_avx512(float *yr, const float *xr, int64_t lim, int64_t n, int zero_masked_rows) {
    __m512 mv = _mm512_set1_ps(-INFINITY);
    __mmask16 nan = 0;
    for (int64_t j = 0; j < lim; j += 16) {
        const __m512 v = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), rows_mask(lim - j), xr + j);
        nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        mv = _mm512_max_ps(mv, v);
    }
    const float m = rows_canon_max(_mm512_reduce_max_ps(mv), nan != 0);
    if (m == -INFINITY && zero_masked_rows) {
        for (int64_t j = 0; j < n; j += 16) _mm512_mask_storeu_ps(yr + j, rows_mask(n - j), _mm512_setzero_ps());
        return 0.0f;
    }
    const __m512 m16 = _mm512_set1_ps(m);
    __m512d sa = _mm512_setzero_pd(), sb = _mm512_setzero_pd();
    for (int64_t j = 0; j < lim; j += 16) {
        const __mmask16 k = rows_mask(lim - j);
        const __m512 e = _mm512_maskz_mov_ps(k, exp_nonpos16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, xr + j), m16)));
        add16(&sa, &sb, e);
        _mm512_mask_storeu_ps(yr + j, k, e);
    }
    for (int64_t j = lim; j < n; j += 16) _mm512_mask_storeu_ps(yr + j, rows_mask(n - j), _mm512_setzero_ps());
    return (float)(1.0 / combine16(sa, sb));
}

static ROWS_AVX512 void softmax_row_avx512(float *yr, const float *xr, int64_t lim, int64_t n, int zero_masked_rows) {
    const __m512 inv = _mm512_set1_ps(softmax_exp_avx512(yr, xr, lim, n, zero_masked_rows));
    for (int64_t j = 0; j < lim; j += 16) {
        const __mmask16 k = rows_mask(lim - j);
        _mm512_mask_storeu_ps(yr + j, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, yr + j), inv));
    }
}

static ROWS_AVX512 void layernorm_row_avx512(float *yr, const float *xr, const float *w, const float *b, int64_t D,
                                             float eps) {
    __m512d sa = _mm512_setzero_pd(), sb = _mm512_setzero_pd();
    for (int64_t j = 0; j < D; j += 16) add16(&sa, &sb, _mm512_maskz_loadu_ps(rows_mask(D - j), xr + j));
    const double mean = combine16(sa, sb) / (double)D;
    const __m512d mv = _mm512_set1_pd(mean);
    __m512d va = _mm512_setzero_pd(), vb = _mm512_setzero_pd();
    for (int64_t j = 0; j < D; j += 16) {
        const __mmask16 k = rows_mask(D - j);
        const __m512 x = _mm512_maskz_loadu_ps(k, xr + j);
        /* masked-off lanes: their deviation is masked to +0.0, so they add nothing */
        const __m512d da = _mm512_maskz_sub_pd((__mmask8)k, _mm512_cvtps_pd(_mm512_castps512_ps256(x)), mv);
        const __m512d db = _mm512_maskz_sub_pd((__mmask8)(k >> 8),
                                               _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1))), mv);
        va = _mm512_add_pd(va, _mm512_mul_pd(da, da));
        vb = _mm512_add_pd(vb, _mm512_mul_pd(db, db));
    }
    const double var = combine16(va, vb) / (double)D;
    const __m512d iv = _mm512_set1_pd(1.0 / sqrt(var + (double)eps));
    for (int64_t j = 0; j < D; j += 16) {
        const __mmask16 k = rows_mask(D - j);
        const __m512 x = _mm512_maskz_loadu_ps(k, xr + j);
        const __m512d da = _mm512_mul_pd(_mm512_sub_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(x)), mv), iv);
        const __m512d db = _mm512_mul_pd(
            _mm512_sub_pd(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1))), mv), iv);
        __m512 v = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(_mm512_cvtpd_ps(da))),
                                                      _mm256_castps_pd(_mm512_cvtpd_ps(db)), 1));
        if (w) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(k, w + j));
        if (b) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, b + j));
        _mm512_mask_storeu_ps(yr + j, k, v);
    }
}
#endif

/* ------------------------------------------------------------------ entry points */

void mrt_cpu_softmax_rows_f32(float *y, const float *x, int64_t rows, int64_t n, int64_t L, int causal,
                              int zero_masked_rows) {
    const int avx = mrt_cpu_simd_avx512();
    MRT_PRAGMA(omp parallel for schedule(static) if(rows * n >= MRT_PAR_MIN))
    for (int64_t r = 0; r < rows; r++) {
        int64_t lim = causal ? (r % L) + 1 : n;
        if (lim > n) lim = n;
#ifdef ROWS_X86
        if (avx) {
            softmax_row_avx512(y + r * n, x + r * n, lim, n, zero_masked_rows);
            continue;
        }
#endif
        softmax_row_portable(y + r * n, x + r * n, lim, n, zero_masked_rows);
    }
    (void)avx;
}

void mrt_cpu_layernorm_f32(float *y, const float *x, const float *w, const float *b, int64_t rows, int64_t D,
                           float eps) {
    const int avx = mrt_cpu_simd_avx512();
    MRT_PRAGMA(omp parallel for schedule(static) if(rows * D >= MRT_PAR_MIN))
    for (int64_t r = 0; r < rows; r++) {
#ifdef ROWS_X86
        if (avx) {
            layernorm_row_avx512(y + r * D, x + r * D, w, b, D, eps);
            continue;
        }
#endif
        layernorm_row_portable(y + r * D, x + r * D, w, b, D, eps);
    }
    (void)avx;
}

/* ------------------------------------------------------------------ attention
 *
 * mrt_cpu_attention_f32 (modelrt.h): per (batch item, block of ATTN_RB query rows), k^T (keys
 * contiguous) is packed into the thread's workspace, and q and v rows where they are not
 * contiguous; then per chunk of ATTN_C rows (causal: ATTN_G) the scores (q . k summed over E in
 * order, times the scale; then + mask) fill an [rows, keys] tile that stays in L1; each row is
 * softmaxed in place by the softmax rows' code above; then out = p v summed over the keys in
 * order, written through the result's strides. Every output element is one chain of IEEE
 * operations in a fixed order, the products as fused multiply-adds (fmaf, _mm512_fmadd_ps),
 * whatever the blocking, the thread or the path (AVX-512 registers of R rows by NV vectors, or
 * portable loops): the same bits. */

enum { ATTN_RB = 128 }; /* query rows per block: the rows that share one packing of k^T and v */
enum { ATTN_G = 8 };    /* causal: rows per chunk (they share the keys they compute) */
enum { ATTN_C = 32 };   /* other rows per chunk: the chunk's ATTN_C x S scores stay in L1 */

/* The thread's workspace: grown on first use, freed by the key's destructor when the thread
 * ends (the pool's threads live as long as the process). */
typedef struct AttnWs {
    float *p;
    size_t n;
} AttnWs;
static pthread_key_t attn_key;
static pthread_once_t attn_once = PTHREAD_ONCE_INIT;
static int attn_key_ok;
static void attn_ws_free(void *w) {
    AttnWs *a = w;
    free(a->p);
    free(a);
}
static void attn_key_make(void) { attn_key_ok = pthread_key_create(&attn_key, attn_ws_free) == 0; }

/* At least n floats, 64-byte aligned, for this thread; NULL when they cannot be had. */
static float *attn_ws(size_t n) {
    pthread_once(&attn_once, attn_key_make);
    if (!attn_key_ok) return NULL;
    AttnWs *a = pthread_getspecific(attn_key);
    if (!a) {
        if (!(a = calloc(1, sizeof *a))) return NULL;
        if (pthread_setspecific(attn_key, a)) {
            free(a);
            return NULL;
        }
    }
    if (a->n < n) {
        free(a->p);
        a->p = aligned_alloc(64, (n * sizeof(float) + 63) & ~(size_t)63);
        a->n = a->p ? n : 0;
    }
    return a->p;
}

static inline int64_t attn_pad16(int64_t n) { return (n + 15) & ~(int64_t)15; }

/* Portable: sb[r][j] = (sum_e qb[r][e] * kt[e][j]) * scale (+ mb[r][j] when mb) for rows
 * [0, R), keys [0, n); q rows at qld, mask rows at mrs (0: one row for all). */
ROWS_FMA_CLONES static void attn_scores_portable(float *sb, int64_t sld, const float *qb, int64_t qld, int64_t E, const float *kt,
                                 int64_t ktld, int64_t R, int64_t n, float scale, const float *mb, int64_t mrs) {
    for (int64_t r = 0; r < R; r++) {
        float *s = sb + r * sld;
        for (int64_t j = 0; j < n; j++) s[j] = 0.0f;
        for (int64_t e = 0; e < E; e++) {
            const float a = qb[r * qld + e], *kr = kt + e * ktld;
            for (int64_t j = 0; j < n; j++) s[j] = fmaf(a, kr[j], s[j]);
        }
        for (int64_t j = 0; j < n; j++) s[j] = s[j] * scale;
        if (mb)
            for (int64_t j = 0; j < n; j++) s[j] = s[j] + mb[r * mrs + j];
    }
}

/* Portable: ob[r][d] = (sum_{j < n} pb[r][j] * vb[j][d]) * rinv[r], the sum from +0.0 in key order. */
ROWS_FMA_CLONES static void attn_pv_portable(float *ob, int64_t old, const float *pb, int64_t pld, const float *vb, int64_t vld,
                             int64_t R, int64_t n, int64_t Ev, const float *rinv) {
    for (int64_t r = 0; r < R; r++) {
        float *o = ob + r * old;
        for (int64_t d = 0; d < Ev; d++) o[d] = 0.0f;
        for (int64_t j = 0; j < n; j++) {
            const float p = pb[r * pld + j], *vr = vb + j * vld;
            for (int64_t d = 0; d < Ev; d++) o[d] = fmaf(p, vr[d], o[d]);
        }
        for (int64_t d = 0; d < Ev; d++) o[d] = o[d] * rinv[r];
    }
}

#ifdef ROWS_X86
/* The lanes [0, left) of a 16-lane vector, none for left <= 0. */
static inline ROWS_AVX512 __mmask16 attn_mask(int64_t left) {
    return left <= 0 ? (__mmask16)0 : left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
}

/* dst[c][r] = src[r][c] for a 16 x 16 block (rows at sld and dld floats): unpacks, then
 * in-lane shuffles, then two rounds of 128-bit lane shuffles (the usual in-register transpose). */
static inline ROWS_AVX512 void attn_tr16(const float *src, int64_t sld, float *dst, int64_t dld) {
    __m512 r[16], t[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + i * sld);
    for (int p = 0; p < 8; p++) {
        t[2 * p] = _mm512_unpacklo_ps(r[2 * p], r[2 * p + 1]);
        t[2 * p + 1] = _mm512_unpackhi_ps(r[2 * p], r[2 * p + 1]);
    }
    for (int i = 0; i < 4; i++) { /* r[4i+k], 128-bit lane L: column 4L+k of rows 4i..4i+3 */
        r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int k = 0; k < 4; k++) { /* the 4 x 4 transpose of lanes across r[k], r[4+k], r[8+k], r[12+k] */
        const __m512 u0 = _mm512_shuffle_f32x4(r[k], r[4 + k], 0x88), u1 = _mm512_shuffle_f32x4(r[k], r[4 + k], 0xdd);
        const __m512 u2 = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0x88), u3 = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0xdd);
        _mm512_storeu_ps(dst + k * dld, _mm512_shuffle_f32x4(u0, u2, 0x88));
        _mm512_storeu_ps(dst + (8 + k) * dld, _mm512_shuffle_f32x4(u0, u2, 0xdd));
        _mm512_storeu_ps(dst + (4 + k) * dld, _mm512_shuffle_f32x4(u1, u3, 0x88));
        _mm512_storeu_ps(dst + (12 + k) * dld, _mm512_shuffle_f32x4(u1, u3, 0xdd));
    }
}

/* kt[e][j] = kb[j][e] for keys [0, n), e in [0, E) (k's columns contiguous, rows at kld). */
static ROWS_AVX512 void attn_pack_kt_avx512(float *kt, int64_t ktld, const float *kb, int64_t kld, int64_t n, int64_t E) {
    const int64_t n16 = n & ~(int64_t)15, E16 = E & ~(int64_t)15;
    for (int64_t j = 0; j < n16; j += 16)
        for (int64_t e = 0; e < E16; e += 16) attn_tr16(kb + j * kld + e, kld, kt + e * ktld + j, ktld);
    for (int64_t j = 0; j < n; j++)
        for (int64_t e = j < n16 ? E16 : 0; e < E; e++) kt[e * ktld + j] = kb[j * kld + e];
}

/* attn_scores_portable for R rows, NV vectors of keys at a time (R * NV accumulators). */
static inline ROWS_AVX512 __attribute__((always_inline)) void attn_scores_rv(float *sb, int64_t sld, const float *qb,
                                                                             int64_t qld, int64_t E, const float *kt,
                                                                             int64_t ktld, const int R, const int NV,
                                                                             int64_t n, float scale, const float *mb,
                                                                             int64_t mrs) {
    const __m512 sc = _mm512_set1_ps(scale);
    for (int64_t j0 = 0; j0 < n; j0 += 16 * NV) {
        __mmask16 mk[4];
        __m512 acc[8][4];
#pragma GCC unroll 4
        for (int c = 0; c < NV; c++) mk[c] = attn_mask(n - j0 - 16 * c);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int c = 0; c < NV; c++) acc[r][c] = _mm512_setzero_ps();
        for (int64_t e = 0; e < E; e++) {
            const float *kr = kt + e * ktld + j0;
            __m512 kv[4];
#pragma GCC unroll 4
            for (int c = 0; c < NV; c++) kv[c] = _mm512_maskz_loadu_ps(mk[c], kr + 16 * c);
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                const __m512 a = _mm512_set1_ps(qb[r * qld + e]);
#pragma GCC unroll 4
                for (int c = 0; c < NV; c++) acc[r][c] = _mm512_fmadd_ps(a, kv[c], acc[r][c]);
            }
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int c = 0; c < NV; c++) {
                __m512 x = _mm512_mul_ps(acc[r][c], sc);
                if (mb) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(mk[c], mb + r * mrs + j0 + 16 * c));
                _mm512_mask_storeu_ps(sb + r * sld + j0 + 16 * c, mk[c], x);
            }
    }
}

static ROWS_AVX512 void attn_scores_avx512(float *sb, int64_t sld, const float *qb, int64_t qld, int64_t E,
                                           const float *kt, int64_t ktld, int64_t R, int64_t n, float scale,
                                           const float *mb, int64_t mrs) {
    int64_t r = 0;
    for (; r + 4 <= R; r += 4)
        attn_scores_rv(sb + r * sld, sld, qb + r * qld, qld, E, kt, ktld, 4, 4, n, scale, mb ? mb + r * mrs : NULL, mrs);
    for (; r < R; r++)
        attn_scores_rv(sb + r * sld, sld, qb + r * qld, qld, E, kt, ktld, 1, 4, n, scale, mb ? mb + r * mrs : NULL, mrs);
}

/* attn_pv_portable for R rows, NV vectors of the head at a time. */
static inline ROWS_AVX512 __attribute__((always_inline)) void attn_pv_rv(float *ob, int64_t old, const float *pb,
                                                                         int64_t pld, const float *vb, int64_t vld,
                                                                         const int R, const int NV, int64_t n,
                                                                         int64_t Ev, const float *rinv) {
    for (int64_t d0 = 0; d0 < Ev; d0 += 16 * NV) {
        __mmask16 md[4];
        __m512 acc[8][4];
#pragma GCC unroll 4
        for (int c = 0; c < NV; c++) md[c] = attn_mask(Ev - d0 - 16 * c);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int c = 0; c < NV; c++) acc[r][c] = _mm512_setzero_ps();
        for (int64_t j = 0; j < n; j++) {
            const float *vr = vb + j * vld + d0;
            __m512 vv[4];
#pragma GCC unroll 4
            for (int c = 0; c < NV; c++) vv[c] = _mm512_maskz_loadu_ps(md[c], vr + 16 * c);
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                const __m512 p = _mm512_set1_ps(pb[r * pld + j]);
#pragma GCC unroll 4
                for (int c = 0; c < NV; c++) acc[r][c] = _mm512_fmadd_ps(p, vv[c], acc[r][c]);
            }
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const __m512 inv = _mm512_set1_ps(rinv[r]);
#pragma GCC unroll 4
            for (int c = 0; c < NV; c++) _mm512_mask_storeu_ps(ob + r * old + d0 + 16 * c, md[c], _mm512_mul_ps(acc[r][c], inv));
        }
    }
}

static ROWS_AVX512 void attn_pv_avx512(float *ob, int64_t old, const float *pb, int64_t pld, const float *vb,
                                       int64_t vld, int64_t R, int64_t n, int64_t Ev, const float *rinv) {
    int64_t r = 0;
    if (Ev <= 32) { /* MiniLM's 32: 8 rows x 2 vectors */
        for (; r + 8 <= R; r += 8) attn_pv_rv(ob + r * old, old, pb + r * pld, pld, vb, vld, 8, 2, n, Ev, rinv + r);
        for (; r < R; r++) attn_pv_rv(ob + r * old, old, pb + r * pld, pld, vb, vld, 1, 2, n, Ev, rinv + r);
    } else { /* GPT-2's 64: 4 rows x 4 vectors */
        for (; r + 4 <= R; r += 4) attn_pv_rv(ob + r * old, old, pb + r * pld, pld, vb, vld, 4, 4, n, Ev, rinv + r);
        for (; r < R; r++) attn_pv_rv(ob + r * old, old, pb + r * pld, pld, vb, vld, 1, 4, n, Ev, rinv + r);
    }
}
#endif

#ifdef ROWS_X86
/* softmax_exp_avx512 on four rows at once (row r at s + r * ld, its keys [0, lim[r]), zeros to
 * n), so that the four rows' exp chains and sums overlap: each row's lanes see the same
 * operations as softmax_exp_avx512 (steps past a row's lim add +0.0 to its sums and -inf to its
 * maximum, which change neither), so the same bits. rinv[r]: 1 / the row's sum, 0 for a fully
 * masked row with zero_masked_rows. */
static ROWS_AVX512 int64_t softmax_exp4_avx512(float *s, int64_t ld, const int64_t *lim, int64_t n, int zero_masked_rows,
                                               float *rinv) {
    int64_t last = 0;
    __m512 mv[4];
    __mmask16 nan[4] = {0, 0, 0, 0};
    int64_t lmax = 0;
    #pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        mv[r] = _mm512_set1_ps(-INFINITY);
        lmax = lim[r] > lmax ? lim[r] : lmax;
    }
    for (int64_t j = 0; j < lmax; j += 16)
        #pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            const __m512 v = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), attn_mask(lim[r] - j), s + r * ld + j);
            nan[r] |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
            mv[r] = _mm512_max_ps(mv[r], v);
        }
    __m512 m16[4];
    int zero[4];
    #pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        const float m = rows_canon_max(_mm512_reduce_max_ps(mv[r]), nan[r] != 0);
        zero[r] = m == -INFINITY && zero_masked_rows;
        m16[r] = _mm512_set1_ps(m);
    }
    __m512d sa[4], sb[4];
    #pragma GCC unroll 4
    for (int r = 0; r < 4; r++) sa[r] = sb[r] = _mm512_setzero_pd();
    for (int64_t j = 0; j < lmax; j += 16) {
        __mmask16 k[4];
        __m512 dv[4], e[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            k[r] = zero[r] ? (__mmask16)0 : attn_mask(lim[r] - j);
            dv[r] = _mm512_sub_ps(_mm512_maskz_loadu_ps(k[r], s + r * ld + j), m16[r]);
        }
        /* every lane of the four below -104 (a padding mask's keys): every e is +0, and adding
         * +0 to the sums, which are never -0, changes no bit */
        __mmask16 live = 0;
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) live |= _mm512_mask_cmp_ps_mask(k[r], dv[r], _mm512_set1_ps(-104.0f), _CMP_NLT_UQ);
        if (!live) {
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) _mm512_mask_storeu_ps(s + r * ld + j, attn_mask(n - j), _mm512_setzero_ps());
            continue;
        }
        last = j + 16;
        exp_nonpos16x4(dv, e);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            e[r] = _mm512_maskz_mov_ps(k[r], e[r]);
            add16(&sa[r], &sb[r], e[r]);
            _mm512_mask_storeu_ps(s + r * ld + j, attn_mask(n - j), e[r]); /* zeros past lim */
        }
    }
    #pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        for (int64_t j = (lmax + 15) & ~(int64_t)15; j < n; j += 16)
            _mm512_mask_storeu_ps(s + r * ld + j, attn_mask(n - j), _mm512_setzero_ps());
        rinv[r] = zero[r] ? 0.0f : (float)(1.0 / combine16(sa[r], sb[r]));
    }
    return last;
}
#endif

#ifdef ROWS_X86
/* 1 when x[0, n) holds no NaN or infinity (x * 0 is 0 for the others). */
static ROWS_AVX512 int attn_row_finite_avx512(const float *x, int64_t n) {
    __mmask16 bad = 0;
    for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 k = rows_mask(n - j);
        const __m512 z = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + j), _mm512_setzero_ps());
        bad |= _mm512_mask_cmp_ps_mask(k, z, _mm512_setzero_ps(), _CMP_NEQ_UQ);
    }
    return bad == 0;
}
#endif

static int attn_row_finite(const float *x, int64_t n, int avx) {
#ifdef ROWS_X86
    if (avx) return attn_row_finite_avx512(x, n);
#endif
    for (int64_t j = 0; j < n; j++)
        if (!isfinite(x[j])) return 0;
    return 1;
    (void)avx;
}

/* One block: rows [i0, i1) of batch item `o`, with its workspace ws (attn_ws_floats). k is
 * packed transposed (kt[e][j]); q and v are packed into contiguous rows unless they already are
 * (a permuted head's rows lie a whole [T, H * D] row apart, which maps them onto a few L1 sets
 * and made v's rows miss on every pass); out is written where it is when its columns are
 * contiguous. Then the rows go by chunks of ATTN_C (causal: ATTN_G): the chunk's scores,
 * softmax and p v, so that its scores stay in L1 while p v reads them. */
static void attn_block(const mrt_attention_desc *d, int64_t o, int64_t i0, int64_t i1, float *out, const float *q,
                       const float *k, const float *v, const float *mask, float *ws, int avx) {
    const int nb = d->nb;
    const int64_t S = d->S, E = d->E, Ev = d->Ev, R = i1 - i0;
    int64_t qo = 0, ko = 0, vo = 0, mo = 0, oo = 0, rest = o;
    for (int b = nb - 1; b >= 0; b--) {
        const int64_t ix = rest % d->batch[b];
        rest /= d->batch[b];
        qo += ix * d->q[b], ko += ix * d->k[b], vo += ix * d->v[b], mo += ix * d->m[b], oo += ix * d->o[b];
    }
    const int64_t n = d->causal ? (i1 < S ? i1 : S) : S; /* the keys any row of the block sees */
    const int64_t Sp = attn_pad16(S), Evp = attn_pad16(Ev);
    float *kt = ws, *sb = kt + E * Sp, *qp = sb + ATTN_C * Sp, *vp = qp + ATTN_RB * E, *op = vp + S * Evp;
    float *rinv = op + ATTN_RB * Evp; /* each row's 1 / sum of its e */
    /* q rows [R, E] at qld */
    const float *qb = q + qo + i0 * d->q[nb];
    int64_t qld = d->q[nb];
    if (d->q[nb + 1] != 1 || (qld != E && R > 1)) {
        for (int64_t r = 0; r < R; r++)
            if (d->q[nb + 1] == 1)
                memcpy(qp + r * E, qb + r * d->q[nb], sizeof(float) * (size_t)E);
            else
                for (int64_t e = 0; e < E; e++) qp[r * E + e] = qb[r * d->q[nb] + e * d->q[nb + 1]];
        qb = qp, qld = E;
    }
    /* v rows [S, Ev] at vld: the rows some row of the block sees */
    const float *vb = v + vo;
    int64_t vld = d->v[nb];
    if (d->v[nb + 1] != 1 || (vld != Ev && vld != Evp && S > 1)) {
        for (int64_t j = 0; j < S; j++)
            if (d->v[nb + 1] == 1)
                memcpy(vp + j * Evp, vb + j * d->v[nb], sizeof(float) * (size_t)Ev);
            else
                for (int64_t c = 0; c < Ev; c++) vp[j * Evp + c] = vb[j * d->v[nb] + c * d->v[nb + 1]];
        vb = vp, vld = Evp;
    }
    /* out rows [R, Ev] at old */
    float *ob = out + oo + i0 * d->o[nb];
    int64_t old = d->o[nb];
    const int opack = d->o[nb + 1] != 1;
    if (opack) ob = op, old = Evp;
    const int64_t kc = d->k[nb + 1];
#ifdef ROWS_X86
    if (avx && kc == 1)
        attn_pack_kt_avx512(kt, Sp, k + ko, d->k[nb], n, E);
    else
#endif
    for (int64_t j = 0; j < n; j++) {
        const float *kr = k + ko + j * d->k[nb];
        if (kc == 1)
            for (int64_t e = 0; e < E; e++) kt[e * Sp + j] = kr[e];
        else
            for (int64_t e = 0; e < E; e++) kt[e * Sp + j] = kr[e * kc];
    }
    /* the mask rows, where the scores kernel adds them (columns contiguous) */
    const float *mb = mask ? mask + mo + i0 * d->m[nb] : NULL;
    const int64_t mrs = d->m[nb], mfused = mask && d->m[nb + 1] == 1;
    /* out = (e v) / sum over every key, the masked ones with e = 0 (so a NaN or inf v gives NaN
     * there, as the unfused GEMM of p and v does). A chunk's p v stops at the last key whose e
     * may be nonzero in one of its rows (causal: the last key it sees; a padding mask: its keys
     * are 0 in every row) when every v row after it is finite: the terms after it would be
     * 0 * v = +-0, and a sum that starts at +0.0 and adds products of p >= 0 is never -0.0, so
     * adding +-0 leaves its bits. fin: the v rows [fin, S) are finite (checked as needed, each
     * row once a block). */
    int64_t fin = S;
    const int64_t C = d->causal ? ATTN_G : ATTN_C;
    for (int64_t g0 = 0; g0 < R; g0 += C) {
        const int64_t g1 = g0 + C < R ? g0 + C : R, G = g1 - g0;
        /* causal: the keys the chunk sees, ng; the others: n (all) */
        const int64_t ng = d->causal && i0 + g1 < S ? i0 + g1 : n;
        const float *mg = mfused ? mb + g0 * mrs : NULL;
#ifdef ROWS_X86
        if (avx)
            attn_scores_avx512(sb, Sp, qb + g0 * qld, qld, E, kt, Sp, G, ng, d->scale, mg, mrs);
        else
#endif
            attn_scores_portable(sb, Sp, qb + g0 * qld, qld, E, kt, Sp, G, ng, d->scale, mg, mrs);
        int64_t r4 = 0, need = 0; /* the keys whose e may be nonzero in a row of the chunk: [0, need) */
#ifdef ROWS_X86
        for (; avx && !(mask && !mfused) && r4 + 4 <= G; r4 += 4) {
            int64_t lim4[4];
            for (int r = 0; r < 4; r++) {
                const int64_t i = i0 + g0 + r4 + r;
                lim4[r] = d->causal ? (i + 1 < S ? i + 1 : S) : S;
            }
            const int64_t l4 = softmax_exp4_avx512(sb + r4 * Sp, Sp, lim4, S, d->zero_masked_rows, rinv + r4);
            need = l4 > need ? l4 : need;
        }
#endif
        for (int64_t r = r4; r < G; r++) {
            float *s = sb + r * Sp;
            const int64_t i = i0 + g0 + r, lim = d->causal ? (i + 1 < S ? i + 1 : S) : S;
            need = lim > need ? lim : need;
            if (mask && !mfused) {
                const float *mr = mb + (g0 + r) * mrs;
                for (int64_t j = 0; j < lim; j++) s[j] = s[j] + mr[j * d->m[nb + 1]];
            }
#ifdef ROWS_X86
            if (avx) {
                rinv[r] = softmax_exp_avx512(s, s, lim, S, d->zero_masked_rows);
                continue;
            }
#endif
            rinv[r] = softmax_exp_portable(s, s, lim, S, d->zero_masked_rows);
        }
        if (need > S) need = S;
        for (; fin > need && attn_row_finite(vb + (fin - 1) * vld, Ev, avx); fin--) {}
        const int64_t nv = need > fin ? need : fin;
#ifdef ROWS_X86
        if (avx)
            attn_pv_avx512(ob + g0 * old, old, sb, Sp, vb, vld, G, nv, Ev, rinv);
        else
#endif
            attn_pv_portable(ob + g0 * old, old, sb, Sp, vb, vld, G, nv, Ev, rinv);
    }
    for (int64_t r = 0; opack && r < R; r++) {
        float *orow = out + oo + (i0 + r) * d->o[nb];
        for (int64_t c = 0; c < Ev; c++) orow[c * d->o[nb + 1]] = ob[r * Evp + c];
    }
    (void)avx;
}

/* The floats of one block's workspace: k^T, the scores, and packed q rows, v, rows of out. */
static size_t attn_ws_floats(const mrt_attention_desc *d) {
    const size_t Sp = (size_t)attn_pad16(d->S), Evp = (size_t)attn_pad16(d->Ev);
    return (size_t)d->E * Sp + ATTN_C * Sp + ATTN_RB * (size_t)d->E + (size_t)d->S * Evp + ATTN_RB * Evp + ATTN_C;
}

mrt_status mrt_cpu_attention_f32(const mrt_attention_desc *d, float *out, const float *q, const float *k,
                                 const float *v, const float *mask) {
    static const char fn[] = "mrt_cpu_attention_f32";
    if (!d || d->nb < 0 || d->nb > MRT_ATTN_MAX_BATCH)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "%s: %d batch dims (at most %d)", fn, d ? d->nb : -1, MRT_ATTN_MAX_BATCH);
    int64_t outer = 1;
    for (int b = 0; b < d->nb; b++) {
        if (d->batch[b] < 0) return mrt_set_error(MRT_ERR_INVALID_ARG, "%s: negative batch size", fn);
        outer *= d->batch[b];
    }
    if (d->L < 0 || d->S < 0 || d->E < 0 || d->Ev < 0)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "%s: negative size (L %lld, S %lld, E %lld, Ev %lld)", fn,
                             (long long)d->L, (long long)d->S, (long long)d->E, (long long)d->Ev);
    if (outer == 0 || d->L == 0 || d->Ev == 0) return MRT_OK;
    const int avx = mrt_cpu_simd_avx512();
    const int64_t nblk = (d->L + ATTN_RB - 1) / ATTN_RB, items = outer * nblk;
    const size_t need = attn_ws_floats(d);
    const double work = (double)outer * (double)d->L * (double)(d->S + 1) * (double)(d->E + d->Ev);
    int oom = 0;
    MRT_PRAGMA(omp parallel for schedule(dynamic, 1) if(work >= MRT_PAR_MIN))
    for (int64_t it = 0; it < items; it++) {
        float *ws = attn_ws(need);
        if (!ws) {
            __atomic_store_n(&oom, 1, __ATOMIC_RELAXED);
            continue;
        }
        const int64_t o = it / nblk, i0 = (it % nblk) * ATTN_RB, i1 = i0 + ATTN_RB < d->L ? i0 + ATTN_RB : d->L;
        attn_block(d, o, i0, i1, out, q, k, v, mask, ws, avx);
    }
    if (oom) return mrt_set_error(MRT_ERR_OOM, "%s: cannot allocate a workspace of %zu bytes", fn, need * sizeof(float));
    return MRT_OK;
}
