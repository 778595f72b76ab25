/* bench/gemm/own_gemm.c — a single-precision GEMM of the kind modelc could emit itself (issue 12,
 * item 4: a measurement, not part of modelc). Plain C with GCC vector extensions and OpenMP, no
 * intrinsics, no assembly, no JIT:
 *
 *   cc -O3 -march=native -fopenmp -ffp-contract=fast -c own_gemm.c
 *
 * c (M,N) = a (M,K) * b (K,N), every matrix row-major and dense (lda = K, ldb = ldc = N).
 *
 * The blocking is the BLIS/GotoBLAS scheme (K. Goto and R. A. van de Geijn, "Anatomy of
 * high-performance matrix multiplication", ACM TOMS 34(3), 2008; F. G. Van Zee and R. A. van de
 * Geijn, "BLIS: A framework for rapidly instantiating BLAS functionality", ACM TOMS 41(3), 2015):
 * the K dimension in KC-deep slices; per slice a KC x NC panel of b packed into NR-wide
 * micro-panels (each KC x NR, contiguous, zero-padded) and an MC x KC block of a packed into
 * MR-tall micro-panels (KC x MR, k-major); then the jr loop over the NR-wide micro-panels of b
 * outside the ir loop over the MR-tall micro-panels of a, so that one KC x NR micro-panel of b
 * (KC 192 x NR 32 x 4 bytes = 24 KB) stays in L1 while the MC x KC block of a streams from L2; the
 * micro-kernel keeps an MR x NR block of c in registers (MR 8 x NR 32 = 16 zmm accumulators with
 * AVX-512) and does, per k, two vector loads of b, MR broadcasts of a and 2*MR FMAs.
 *
 * Threads: c is cut into tiles of up to MC x NC (smaller when there would be fewer than 4 per
 * thread), and an OpenMP loop with a dynamic schedule hands the tiles out; each thread packs the
 * parts of a and b its tile needs into its own buffers. A tile is the unit a thread that was
 * descheduled holds up; the dynamic schedule lets the other thread take the rest.
 * Nothing is packed ahead of the call (a compiler could pack the weights once at build time).
 * The last micro-panel of b, when 16 wide, gets a 16-wide kernel; other edges go through a buffer.
 * MR 8 was measured against MR 12 (24 accumulators) on one thread: 8 as fast or faster on every
 * shape here. OWN_MR, OWN_NV, OWN_KC, OWN_MC, OWN_NC override the sizes (-D).
 */
#include <stdlib.h>
#include <string.h>

#ifndef OWN_MR
#define OWN_MR 8
#endif
#ifndef OWN_NV
#define OWN_NV 2 /* NR = 16 * OWN_NV */
#endif
#ifndef OWN_KC
#define OWN_KC 192
#endif
#ifndef OWN_MC
#define OWN_MC 96
#endif
#ifndef OWN_NC
#define OWN_NC 512
#endif
#define MR OWN_MR
#define NR (16 * OWN_NV)
#define KC OWN_KC
#define MC OWN_MC
#define NC OWN_NC

typedef float v16 __attribute__((vector_size(64), aligned(64)));
typedef float v16u __attribute__((vector_size(64), aligned(4), may_alias));

#define STR_(x) #x
#define STR(x) STR_(x)
const char own_gemm_config[] =
    "MR " STR(OWN_MR) ", NR 16*" STR(OWN_NV) ", KC " STR(OWN_KC) ", MC " STR(OWN_MC) ", NC " STR(OWN_NC);

/* c[0..MR)[0..16 nv) (=, or += when acc) a (KC x MR micro-panel) * b (KC x NR micro-panel, of
 * which the first 16 nv columns: nv < OWN_NV for the last, narrower panel of b) */
static inline __attribute__((always_inline)) void micro_nv(int kc, const float *restrict a, const float *restrict b,
                                                           float *restrict c, long ldc, int acc, const int nv) {
    v16 s[MR][OWN_NV];
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) s[i][v] = (v16){0};
    for (int k = 0; k < kc; k++) {
        v16 bv[OWN_NV];
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) bv[v] = *(const v16 *)(b + (long)k * NR + 16 * v);
#pragma GCC unroll 16
        for (int i = 0; i < MR; i++) {
            v16 av = a[(long)k * MR + i] - (v16){0}; /* a broadcast (x - 0 folds; 0 + x would not) */
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++) s[i][v] += av * bv[v];
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) {
            v16u *p = (v16u *)(c + i * ldc + 16 * v);
            if (acc)
                *p += s[i][v];
            else
                *p = s[i][v];
        }
}

static void micro(int kc, const float *restrict a, const float *restrict b, float *restrict c, long ldc, int acc) {
    micro_nv(kc, a, b, c, ldc, acc, OWN_NV);
}
static void micro16(int kc, const float *restrict a, const float *restrict b, float *restrict c, long ldc, int acc) {
    micro_nv(kc, a, b, c, ldc, acc, 1);
}

/* the same for an edge block of mr x nr < MR x NR: through a local MR x NR buffer */
static void micro_edge(int kc, const float *a, const float *b, float *c, long ldc, int acc, int mr, int nr) {
    float t[MR * NR] __attribute__((aligned(64)));
    if (nr <= 16)
        micro16(kc, a, b, t, NR, 0);
    else
        micro(kc, a, b, t, NR, 0);
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) c[i * ldc + j] = acc ? c[i * ldc + j] + t[i * NR + j] : t[i * NR + j];
}

/* b[k0.., j0..] (kc x nc) into NR-wide micro-panels, zero-padded to a multiple of NR */
static void pack_b(float *restrict dst, const float *restrict b, long ldb, int kc, int nc) {
    for (int j = 0; j < nc; j += NR) {
        int w = nc - j < NR ? nc - j : NR;
        for (int k = 0; k < kc; k++) {
            const float *s = b + k * ldb + j;
            float *d = dst + k * NR;
            if (w == NR)
                memcpy(d, s, sizeof(float) * NR);
            else {
                memcpy(d, s, sizeof(float) * w);
                memset(d + w, 0, sizeof(float) * (NR - w));
            }
        }
        dst += (long)kc * NR;
    }
}

/* a[i0.., k0..] (mc x kc) into MR-tall micro-panels (k-major), zero-padded to a multiple of MR */
static void pack_a(float *restrict dst, const float *restrict a, long lda, int mc, int kc) {
    for (int i = 0; i < mc; i += MR) {
        int h = mc - i < MR ? mc - i : MR;
        for (int k = 0; k < kc; k++) {
#pragma GCC unroll 16
            for (int r = 0; r < MR; r++) dst[k * MR + r] = r < h ? a[(i + r) * lda + k] : 0.0f;
        }
        dst += (long)kc * MR;
    }
}

void own_sgemm(int M, int N, int K, const float *a, const float *b, float *c) {
    int mt = MC, nt = NC;
    int threads = 1;
#ifdef _OPENMP
    extern int omp_get_max_threads(void);
    threads = omp_get_max_threads();
#endif
    /* at least 4 tiles per thread where the matrix allows it: halve the wider tile side */
    for (;;) {
        long tiles = (long)((M + mt - 1) / mt) * ((N + nt - 1) / nt);
        if (tiles >= 4L * threads) break;
        if (nt > 2 * NR && (nt >= N || (mt <= 2 * MR || (long)nt * 2 >= mt)) && nt / 2 < N)
            nt = (nt / 2 + NR - 1) / NR * NR;
        else if (mt > 2 * MR)
            mt = (mt / 2 + MR - 1) / MR * MR;
        else
            break;
    }
    int tm = (M + mt - 1) / mt, tn = (N + nt - 1) / nt;
#pragma omp parallel
    {
        float *ap = aligned_alloc(64, sizeof(float) * KC * ((mt + MR - 1) / MR * MR));
        float *bp = aligned_alloc(64, sizeof(float) * KC * ((nt + NR - 1) / NR * NR));
#pragma omp for schedule(dynamic, 1)
        for (long t = 0; t < (long)tm * tn; t++) {
            int i0 = (int)(t / tn) * mt, j0 = (int)(t % tn) * nt;
            int mc = M - i0 < mt ? M - i0 : mt, nc = N - j0 < nt ? N - j0 : nt;
            for (int p0 = 0; p0 < K; p0 += KC) {
                int kc = K - p0 < KC ? K - p0 : KC;
                pack_b(bp, b + (long)p0 * N + j0, N, kc, nc);
                pack_a(ap, a + (long)i0 * K + p0, K, mc, kc);
                for (int j = 0; j < nc; j += NR) {
                    const float *bj = bp + (long)(j / NR) * kc * NR;
                    for (int i = 0; i < mc; i += MR) {
                        const float *ai = ap + (long)(i / MR) * kc * MR;
                        float *cij = c + (long)(i0 + i) * N + j0 + j;
                        if (mc - i >= MR && nc - j >= NR)
                            micro(kc, ai, bj, cij, N, p0 > 0);
                        else if (mc - i >= MR && nc - j == 16)
                            micro16(kc, ai, bj, cij, N, p0 > 0);
                        else
                            micro_edge(kc, ai, bj, cij, N, p0 > 0, mc - i < MR ? mc - i : MR,
                                       nc - j < NR ? nc - j : NR);
                    }
                }
            }
        }
        free(ap);
        free(bp);
    }
}
