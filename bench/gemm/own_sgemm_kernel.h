/* own_sgemm_kernel.h — an AVX-512 f32 GEMM C = A * B (+ bias), a prototype for issue 12 measured
 * by bench/gemm/own_sgemm.c against oneDNN's matmul primitive (bench/gemm/RESULTS.md, "An own
 * AVX-512 GEMM against the matmul primitive"); nothing here is linked into modelc.
 *
 * B is packed into panels of 32 columns with K contiguous per panel, columns past N zero
 * (sg_pack_b, once, as a runtime would at prepare), or, for a [K, N] weight with sg_w_inplace
 * set, per call into a per-thread scratch, one K block of an N chunk at a time (sg_pack_kn). A is
 * read in place (row-major, stride lda) and broadcast from memory into the FMA (as ONNX Runtime's
 * MLAS SgemmKernelAvx512F does). Register tile MR x 32 (MR = 12: 24 zmm accumulators, two B
 * vectors, the broadcast; gcc 12 -O2 keeps them all in registers, no spill in the k loop; MR = 14
 * spills row pointers, and packing A into k-major micro-panels measured slower). Loops: N chunk of
 * sg_nc panels, K block of sg_kc, M block of sg_mc rows, panel, MR rows: the B block of a chunk
 * stays in L2, a tile's B panel (sg_kc x 32) in L1. Partial sums go through C between K blocks
 * (exact: f32 stored and loaded back), bias added after the last K block, the last panel's
 * columns stored under a mask. Threads: the OpenMP team splits N panels (or rows where N has
 * fewer than 4 panels a thread); K is never split, so every output's sum runs in one fixed k
 * order and no result depends on the thread count. Sources of the scheme: K. Goto and
 * R. van de Geijn, "Anatomy of high-performance matrix multiplication", ACM TOMS 34(3), 2008;
 * BLIS; MLAS.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define SG_AVX512 __attribute__((target("avx512f")))
#ifndef SG_MR
#define SG_MR 12
#endif
enum { SG_NR = 32 };

static int sg_kc = 384, sg_mc = 96, sg_nc = 8, sg_split = 0; /* K block, M block (rows), N chunk (panels); 1: split N, 2: split M */

/* B [K, N] (trans_b 0) or [N, K] (trans_b 1) into panels: P[p][k][32], columns past N zero. */
static void sg_pack_b(const float *W, int trans_b, int64_t N, int64_t K, float *P)
{
    int64_t np = (N + SG_NR - 1) / SG_NR;
    for (int64_t p = 0; p < np; p++) {
        float *d = P + p * K * SG_NR;
        int64_t n0 = p * SG_NR, nn = N - n0 < SG_NR ? N - n0 : SG_NR;
        for (int64_t k = 0; k < K; k++) {
            float *dk = d + k * SG_NR;
            for (int64_t j = 0; j < SG_NR; j++)
                dk[j] = j < nn ? (trans_b ? W[(n0 + j) * K + k] : W[k * N + n0 + j]) : 0.0f;
        }
    }
}

#define SG_AIDX(i, k) a[(i) * lda + (k)]
#ifdef SG_PF
#define SG_PREFETCH(p) (_mm_prefetch((const char *)(p) + SG_PF, _MM_HINT_T0), _mm_prefetch((const char *)(p) + SG_PF + 64, _MM_HINT_T0))
#else
#define SG_PREFETCH(p) ((void)0)
#endif
/* One MR x 32 tile over kc values of k: a (MR rows, stride lda), b (kc x 32 packed), c (stride ldc). */
#define SG_TILE_BODY(MR)                                                                                            \
    __m512 c0[MR], c1[MR];                                                                                          \
    const int mrc = MR; (void)mrc;                                                                                  \
    if (first) {                                                                                                    \
        for (int i = 0; i < MR; i++) c0[i] = c1[i] = _mm512_setzero_ps();                                           \
    } else {                                                                                                        \
        for (int i = 0; i < MR; i++) {                                                                              \
            c0[i] = _mm512_maskz_loadu_ps(m0, c + i * ldc);                                                         \
            c1[i] = _mm512_maskz_loadu_ps(m1, c + i * ldc + 16);                                                    \
        }                                                                                                           \
    }                                                                                                               \
    for (int k = 0; k < kc; k++) {                                                                                  \
        __m512 b0 = _mm512_loadu_ps(b + k * ldb), b1 = _mm512_loadu_ps(b + k * ldb + 16);                           \
        SG_PREFETCH(b + k * ldb);                                                                                   \
        _Pragma("GCC unroll 16") for (int i = 0; i < MR; i++) {                                                     \
            __m512 ai = _mm512_set1_ps(SG_AIDX(i, k));                                                             \
            c0[i] = _mm512_fmadd_ps(ai, b0, c0[i]);                                                                 \
            c1[i] = _mm512_fmadd_ps(ai, b1, c1[i]);                                                                 \
        }                                                                                                           \
    }                                                                                                               \
    if (bias) {                                                                                                     \
        __m512 bb0 = _mm512_maskz_loadu_ps(m0, bias), bb1 = _mm512_maskz_loadu_ps(m1, bias + 16);                   \
        for (int i = 0; i < MR; i++) c0[i] = _mm512_add_ps(c0[i], bb0), c1[i] = _mm512_add_ps(c1[i], bb1);          \
    }                                                                                                               \
    for (int i = 0; i < MR; i++) {                                                                                  \
        _mm512_mask_storeu_ps(c + i * ldc, m0, c0[i]);                                                              \
        _mm512_mask_storeu_ps(c + i * ldc + 16, m1, c1[i]);                                                         \
    }

#define SG_TILE_FN(MR)                                                                                              \
    SG_AVX512 static void sg_tile_##MR(int kc, const float *restrict a, int64_t lda, const float *restrict b,         \
                                       int64_t ldb, float *restrict c, int64_t ldc, int first, __mmask16 m0, __mmask16 m1,       \
                                       const float *bias)                                                           \
    {                                                                                                               \
        SG_TILE_BODY(MR)                                                                                            \
    }
SG_TILE_FN(1) SG_TILE_FN(2) SG_TILE_FN(3) SG_TILE_FN(4) SG_TILE_FN(5) SG_TILE_FN(6) SG_TILE_FN(7)
SG_TILE_FN(8) SG_TILE_FN(9) SG_TILE_FN(10) SG_TILE_FN(11) SG_TILE_FN(12)
#if SG_MR > 12
SG_TILE_FN(13) SG_TILE_FN(14)
#endif

typedef void (*sg_tile_fn)(int, const float *, int64_t, const float *, int64_t, float *, int64_t, int, __mmask16, __mmask16,
                           const float *);
static const sg_tile_fn sg_tiles[] = {NULL, sg_tile_1, sg_tile_2, sg_tile_3, sg_tile_4, sg_tile_5, sg_tile_6,
                                      sg_tile_7, sg_tile_8, sg_tile_9, sg_tile_10, sg_tile_11, sg_tile_12,
#if SG_MR > 12
                                      sg_tile_13, sg_tile_14
#endif
};

/* rows [r0, r1) x panels [p0, p1) of C: blocked loops, one thread */
/* W [K, N] in place (row stride N): panels q0..q1, rows k0..k0+kc into scratch S[p - q0][k][32] */
SG_AVX512 static void sg_pack_kn(const float *W, int64_t N, int64_t q0, int64_t q1, int64_t k0, int kc, float *S)
{
    for (int64_t p = q0; p < q1; p++) {
        int64_t n0 = p * SG_NR, nn = N - n0 < SG_NR ? N - n0 : SG_NR;
        __mmask16 m0 = (__mmask16)(nn >= 16 ? 0xffff : (1u << nn) - 1);
        __mmask16 m1 = (__mmask16)(nn >= 32 ? 0xffff : nn <= 16 ? 0 : (1u << (nn - 16)) - 1);
        float *d = S + (p - q0) * kc * SG_NR;
        const float *w = W + k0 * N + n0;
        for (int k = 0; k < kc; k++) {
            _mm512_store_ps(d + k * SG_NR, _mm512_maskz_loadu_ps(m0, w + k * N));
            _mm512_store_ps(d + k * SG_NR + 16, _mm512_maskz_loadu_ps(m1, w + k * N + 16));
        }
    }
}

static const float *sg_w_inplace; /* set: P is ignored, W [K, N] read in place (bench switch) */
static int sg_direct;              /* with sg_w_inplace: 0 pack per call, 1 read W directly (row stride N; the
                                    * bench's [K, N] shapes have N a multiple of 32: no edge panel to mask) */

SG_AVX512 static void sg_region(int64_t r0, int64_t r1, int64_t p0, int64_t p1, int64_t N, int64_t K, const float *A,
                                int64_t lda, const float *P, const float *bias, float *C, int64_t ldc)
{
    static __thread float *scratch;
    if (sg_w_inplace && !scratch) scratch = aligned_alloc(64, (size_t)64 * 1024 * 32 * 4);
    for (int64_t q0 = p0; q0 < p1; q0 += sg_nc) {
        int64_t q1 = q0 + sg_nc < p1 ? q0 + sg_nc : p1;
        for (int64_t k0 = 0; k0 < K; k0 += sg_kc) {
            int kc = (int)(K - k0 < sg_kc ? K - k0 : sg_kc);
            int first = k0 == 0, last = k0 + kc == K;
            if (sg_w_inplace && !sg_direct)
                sg_pack_kn(sg_w_inplace, N, q0, q1, k0, kc, scratch);
            for (int64_t m0 = r0; m0 < r1; m0 += sg_mc) {
                int64_t m1 = m0 + sg_mc < r1 ? m0 + sg_mc : r1;
                for (int64_t p = q0; p < q1; p++) {
                    int64_t n0 = p * SG_NR, nn = N - n0 < SG_NR ? N - n0 : SG_NR;
                    __mmask16 k0m = (__mmask16)(nn >= 16 ? 0xffff : (1u << nn) - 1);
                    __mmask16 k1m = (__mmask16)(nn >= 32 ? 0xffff : nn <= 16 ? 0 : (1u << (nn - 16)) - 1);
                    const float *b = sg_w_inplace ? sg_direct ? sg_w_inplace + k0 * N + n0 : scratch + (p - q0) * kc * SG_NR
                                                  : P + p * K * SG_NR + k0 * SG_NR;
                    int64_t ldb = sg_w_inplace && sg_direct ? N : SG_NR;
                    for (int64_t i = m0; i < m1; i += SG_MR) {
                        int mr = (int)(m1 - i < SG_MR ? m1 - i : SG_MR);
                        sg_tiles[mr](kc, A + i * lda + k0, lda, b, ldb, C + i * ldc + n0, ldc, first, k0m, k1m,
                                     last && bias ? bias + n0 : NULL);
                    }
                }
            }
        }
    }
}

/* C[M, N] = A[M, K] * B (+ bias), B packed by sg_pack_b. Threads: the OpenMP team, split over N
 * panels (or rows where N has few panels); every output's sum runs in one fixed k order. */
static void sg_gemm(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *P, const float *bias,
                    float *C, int64_t ldc)
{
    int64_t np = (N + SG_NR - 1) / SG_NR;
#pragma omp parallel
    {
        int T = 1, t = 0;
#ifdef _OPENMP
        T = omp_get_num_threads(), t = omp_get_thread_num();
#endif
        int64_t r0 = 0, r1 = M, p0 = 0, p1 = np;
        if (sg_split == 1 || (sg_split == 0 && (np >= 4 * T || M < 2 * SG_MR * T))) {
            p0 = np * t / T, p1 = np * (t + 1) / T;
        } else {
            int64_t mb = (M + SG_MR - 1) / SG_MR;
            r0 = mb * t / T * SG_MR, r1 = mb * (t + 1) / T * SG_MR;
            if (r1 > M) r1 = M;
        }
        if (r0 < r1 && p0 < p1)
            sg_region(r0, r1, p0, p1, N, K, A, lda, P, bias, C, ldc);
    }
}
