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
 * same IEEE operation in both, with no FMA (-ffp-contract=off; the intrinsics use separate
 * multiplies and adds), so the two paths give the same bits, and results do not depend on the
 * thread count (a row is computed by one thread). Softmax's e^(x - max) is mrt_exp_nonpos
 * (Cephes' expf, in mrt_kernels.h; its 16-lane copy here is the same sequence).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "modelrt.h"
#include "mrt_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ROWS_X86 1
#endif

/* ------------------------------------------------------------------ which path */

int mrt_cpu_simd_avx512(void) {
    static int use = -1; /* benign race: every thread computes the same value */
    int u = __atomic_load_n(&use, __ATOMIC_RELAXED);
    if (u < 0) {
        const char *e = getenv("MODELRT_SIMD");
#ifdef ROWS_X86
        __builtin_cpu_init();
        u = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
            __builtin_cpu_supports("avx512cd") && !(e && !strcmp(e, "portable"));
#else
        (void)e;
        u = 0;
#endif
        __atomic_store_n(&use, u, __ATOMIC_RELAXED);
    }
    return u;
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

static void softmax_row_portable(float *yr, const float *xr, int64_t lim, int64_t n, int zero_masked_rows) {
    float m = -INFINITY;
    int nan = 0;
    for (int64_t j = 0; j < lim; j++) {
        nan |= xr[j] != xr[j];
        m = xr[j] > m ? xr[j] : m;
    }
    m = rows_canon_max(m, nan);
    if (m == -INFINITY && zero_masked_rows) {
        for (int64_t j = 0; j < n; j++) yr[j] = 0.0f;
        return;
    }
    double s[16] = {0};
    for (int64_t j = 0; j < lim; j++) { /* each exp once, kept in y (y may be x) */
        const float e = mrt_exp_nonpos(xr[j] - m);
        s[j & 15] += e;
        yr[j] = e;
    }
    const float inv = (float)(1.0 / rows_combine16(s));
    for (int64_t j = 0; j < lim; j++) yr[j] *= inv;
    for (int64_t j = lim; j < n; j++) yr[j] = 0.0f;
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

/* mrt_exp_nonpos on 16 lanes: the same operations in the same order. */
static inline ROWS_AVX512 __m512 exp_nonpos16(__m512 d) {
    const __m512 lo = _mm512_set1_ps(-104.0f);
    const __mmask16 in = _mm512_cmp_ps_mask(d, lo, _CMP_GE_OQ); /* false for NaN and below -104 */
    const __mmask16 nan = _mm512_cmp_ps_mask(d, d, _CMP_UNORD_Q);
    const __m512 c = _mm512_mask_blend_ps(in, lo, d);
    const __m512 magic = _mm512_set1_ps(12582912.0f);
    const __m512 nf = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(c, _mm512_set1_ps(1.44269504088896341f)), magic), magic);
    const __m512 r = _mm512_sub_ps(_mm512_sub_ps(c, _mm512_mul_ps(nf, _mm512_set1_ps(0.693359375f))),
                                   _mm512_mul_ps(nf, _mm512_set1_ps(-2.12194440e-4f)));
    const __m512 z = _mm512_mul_ps(r, r);
    __m512 p = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(1.9875691500e-4f), r), _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(p, z), r), _mm512_set1_ps(1.0f));
    const __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(nf), _mm512_set1_epi32(191)), 23);
    __m512 e = _mm512_mul_ps(_mm512_mul_ps(p, _mm512_castsi512_ps(bits)), _mm512_set1_ps(5.42101086242752217e-20f));
    e = _mm512_maskz_mov_ps(in, e);          /* below -104, -inf: 0 */
    return _mm512_mask_blend_ps(nan, e, d); /* NaN: d */
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

static ROWS_AVX512 void softmax_row_avx512(float *yr, const float *xr, int64_t lim, int64_t n, int zero_masked_rows) {
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
        return;
    }
    const __m512 m16 = _mm512_set1_ps(m);
    __m512d sa = _mm512_setzero_pd(), sb = _mm512_setzero_pd();
    for (int64_t j = 0; j < lim; j += 16) {
        const __mmask16 k = rows_mask(lim - j);
        const __m512 e = _mm512_maskz_mov_ps(k, exp_nonpos16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, xr + j), m16)));
        add16(&sa, &sb, e);
        _mm512_mask_storeu_ps(yr + j, k, e);
    }
    const __m512 inv = _mm512_set1_ps((float)(1.0 / combine16(sa, sb)));
    for (int64_t j = 0; j < lim; j += 16) {
        const __mmask16 k = rows_mask(lim - j);
        _mm512_mask_storeu_ps(yr + j, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, yr + j), inv));
    }
    for (int64_t j = lim; j < n; j += 16) _mm512_mask_storeu_ps(yr + j, rows_mask(n - j), _mm512_setzero_ps());
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
