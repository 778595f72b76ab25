/*
 * tests/runtime/test_attn.c — rt_rows.c's fused attention, mrt_cpu_attention_f32, against a
 * reference in double computed here (the scores, the row maximum, exp and the sum in double:
 * independent of the kernel's float code and of its Cephes exp).
 *
 * Cases: batch dims [2, 3] (and none, and a broadcast one); (L, S, E, Ev) from 1 x 1 to 200 x
 * 131 (two blocks of query rows, tails of every 16-lane vector, head sizes 8, 24, 32, 40, 64);
 * without a mask, with a mask [B, 1, 1, S] broadcast over heads and rows, with a mask [L, S]
 * broadcast over the batch; causal and not; q, k, v and out contiguous, or permuted as the heads
 * of [B, T, H, D] (modelc folds that permute into the strides), or with columns not contiguous
 * (k stored [.., E, S], v [.., Ev, S], out [.., Ev, L]: the packing paths); fully masked rows
 * with and without zero_masked_rows (zeros, NaN), a NaN in q, a NaN in v under a masked key
 * (causal too: a key after the row, whose 0 * NaN still makes it NaN, as the unfused GEMM does);
 * a padding mask of -10000 over each item's last keys (whole 16-key vectors, whose exps and
 * products the kernel skips) with a NaN and an inf in v under it (those heads are NaN, the
 * others not).
 * Each: |y - ref| <= 2e-6 (1 + sum_j p_j |v_j|) and NaN exactly where the reference has NaN;
 * and the same bits at 1, 2 and 3 threads.
 *
 * With a file argument every output is also written there: tests/runtime/run.sh runs this twice,
 * the second time with MODELRT_SIMD=portable, and compares the files byte for byte (the AVX-512
 * and the portable paths give the same bits). `test_attn --bench` times MiniLM's attention (8 x 12
 * heads, 128 x 128, head 32, permuted, padding mask) on the current thread count instead.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "modelrt.h"

static FILE *g_out;
static int g_failed, g_cases;

static uint64_t g_rng = 0x9e3779b97f4a7c15u;
static double urand(void) { /* xorshift64*, [0, 1) */
    g_rng ^= g_rng >> 12, g_rng ^= g_rng << 25, g_rng ^= g_rng >> 27;
    return (double)((g_rng * 0x2545f4914f6cdd1du) >> 11) * 0x1p-53;
}

/* Layouts of a [B, H, R, C] tensor (logical): contiguous, the heads of [B, R, H, C], or columns
 * not contiguous ([B, H, C, R]). */
enum { LAY_PLAIN, LAY_HEADS, LAY_COLS };

/* Strides (elements) of logical [B, H, R, C] stored in layout lay, into st[4]; returns the size. */
static int64_t lay_strides(int lay, int64_t B, int64_t H, int64_t R, int64_t C, int64_t *st) {
    (void)B;
    if (lay == LAY_PLAIN) st[0] = H * R * C, st[1] = R * C, st[2] = C, st[3] = 1;
    if (lay == LAY_HEADS) st[0] = R * H * C, st[1] = C, st[2] = H * C, st[3] = 1;
    if (lay == LAY_COLS) st[0] = H * R * C, st[1] = R * C, st[2] = 1, st[3] = R;
    return B * H * R * C;
}

typedef struct Case {
    int64_t B, H, L, S, E, Ev;
    int mask;     /* 0 none, 1 [B, 1, 1, S], 2 [L, S] */
    int causal, zero;
    int lq, lk, lv, lo;
    int special;  /* 1 fully masked rows, 2 NaN in q, 3 NaN in v under a masked key */
} Case;

static void run_case(const Case *c) {
    mrt_attention_desc d;
    memset(&d, 0, sizeof d);
    const int64_t B = c->B, H = c->H, L = c->L, S = c->S, E = c->E, Ev = c->Ev;
    d.nb = 2, d.batch[0] = B, d.batch[1] = H;
    d.L = L, d.S = S, d.E = E, d.Ev = Ev;
    d.scale = (float)(1.0 / sqrt((double)E));
    d.causal = c->causal, d.zero_masked_rows = c->zero;
    int64_t nq = lay_strides(c->lq, B, H, L, E, d.q), nk = lay_strides(c->lk, B, H, S, E, d.k);
    int64_t nv = lay_strides(c->lv, B, H, S, Ev, d.v), no = lay_strides(c->lo, B, H, L, Ev, d.o);
    int64_t nm = 0;
    if (c->mask == 1) d.m[0] = S, d.m[1] = 0, d.m[2] = 0, d.m[3] = 1, nm = B * S;
    if (c->mask == 2) d.m[0] = 0, d.m[1] = 0, d.m[2] = S, d.m[3] = 1, nm = L * S;
    float *q = malloc(sizeof(float) * nq), *k = malloc(sizeof(float) * nk), *v = malloc(sizeof(float) * nv);
    float *m = nm ? malloc(sizeof(float) * nm) : NULL, *y = malloc(sizeof(float) * no), *y2 = malloc(sizeof(float) * no);
    for (int64_t i = 0; i < nq; i++) q[i] = (float)(urand() * 4 - 2);
    for (int64_t i = 0; i < nk; i++) k[i] = (float)(urand() * 4 - 2);
    for (int64_t i = 0; i < nv; i++) v[i] = (float)(urand() * 2 - 1);
    for (int64_t i = 0; i < nm; i++) m[i] = urand() < 0.2 ? -INFINITY : (float)(urand() - 0.5);
    if (c->special == 1 && m) /* row 1 of every mask row set: all -inf */
        for (int64_t i = 0; i < nm; i += S)
            if (c->mask == 2 ? i / S == 1 : (i / S) % 2 == 1)
                for (int64_t j = 0; j < S; j++) m[i + j] = -INFINITY;
    if (c->special == 2) q[d.q[2] * (L / 2)] = NAN; /* item 0, head 0, row L/2 */
    if (c->special == 3 && m) {                     /* key S-1 masked off for item 0's rows, its v NaN */
        for (int64_t i = 0; i < (c->mask == 2 ? L : 1); i++) m[i * S + S - 1] = -INFINITY;
        v[(S - 1) * d.v[2]] = NAN;
    }
    if (c->special == 4 && m) { /* padding: item b's last 16 + 37 b keys -10000 (BERT's), and a NaN
                                   * (item 1, head 0) and an inf (item 0, head 1) in v under them */
        for (int64_t b = 0; b < B; b++)
            for (int64_t j = S - 16 - 37 * b; j < S; j++)
                if (j >= 0) m[b * S + j] = -10000.0f;
        v[1 * d.v[0] + (S - 1) * d.v[2]] = NAN;
        v[1 * d.v[1] + (S - 2) * d.v[2]] = INFINITY;
    }
    mrt_status st = mrt_cpu_attention_f32(&d, y, q, k, v, m);
    if (st != MRT_OK) {
        printf("FAIL: runtime/attn: %s\n", mrt_last_error());
        g_failed = 1;
        return;
    }
    /* the reference */
    double worst = 0, worst_tol = 0;
    int bad = 0;
    double *p = malloc(sizeof(double) * (size_t)(S ? S : 1));
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < L; i++) {
                const int64_t lim = c->causal ? (i + 1 < S ? i + 1 : S) : S;
                double mx = -INFINITY;
                int nan = 0;
                for (int64_t j = 0; j < lim; j++) {
                    double s = 0;
                    for (int64_t e = 0; e < E; e++)
                        s += (double)q[b * d.q[0] + h * d.q[1] + i * d.q[2] + e * d.q[3]] *
                             (double)k[b * d.k[0] + h * d.k[1] + j * d.k[2] + e * d.k[3]];
                    s *= (double)d.scale;
                    if (m) s += (double)m[b * d.m[0] + h * d.m[1] + i * d.m[2] + j * d.m[3]];
                    p[j] = s;
                    nan |= s != s;
                    if (s > mx) mx = s;
                }
                double sum = 0;
                const int zero = !nan && mx == -INFINITY && c->zero;
                for (int64_t j = 0; j < S; j++) {
                    p[j] = j < lim && !zero ? (nan || mx == -INFINITY ? NAN : exp(p[j] - mx)) : 0.0;
                    sum += j < lim ? p[j] : 0.0;
                }
                for (int64_t j = 0; j < S; j++) p[j] = zero ? 0.0 : p[j] / sum;
                for (int64_t cc = 0; cc < Ev; cc++) {
                    double r = 0, mag = 0;
                    for (int64_t j = 0; j < S; j++) {
                        const double vj = v[b * d.v[0] + h * d.v[1] + j * d.v[2] + cc * d.v[3]];
                        r += p[j] * vj;
                        mag += fabs(p[j] * vj);
                    }
                    const float got = y[b * d.o[0] + h * d.o[1] + i * d.o[2] + cc * d.o[3]];
                    const double tol = 2e-6 * (1 + mag), err = fabs((double)got - r);
                    if ((r != r) != (got != got) || (r == r && err > tol)) {
                        if (!bad)
                            printf("  at [%lld,%lld,%lld,%lld]: got %.9g, ref %.9g\n", (long long)b, (long long)h,
                                   (long long)i, (long long)cc, got, r);
                        bad++;
                    }
                    if (r == r && err / tol > worst / (worst_tol ? worst_tol : 1)) worst = err, worst_tol = tol;
                }
            }
    free(p);
    char name[160];
    snprintf(name, sizeof name, "B%lldH%lld_L%lld_S%lld_E%lld_Ev%lld_mask%d%s%s_lay%d%d%d%d%s", (long long)B,
             (long long)H, (long long)L, (long long)S, (long long)E, (long long)Ev, c->mask, c->causal ? "_causal" : "",
             c->zero ? "_zero" : "", c->lq, c->lk, c->lv, c->lo,
             c->special == 1 ? "_masked_rows" : c->special == 2 ? "_nan_q" : c->special == 3 ? "_nan_v_masked" : c->special == 4 ? "_padding" : "");
    if (bad) {
        printf("FAIL: runtime/attn/%s: %d outputs off (maxerr %.3g, tol %.3g)\n", name, bad, worst, worst_tol);
        g_failed = 1;
    }
    /* the same bits at 1, 2 and 3 threads */
    for (int t = 1; t <= 3; t++) {
        mrt_set_threads(t, NULL);
        for (int64_t i = 0; i < no; i++) y2[i] = -7.0f;
        if (mrt_cpu_attention_f32(&d, y2, q, k, v, m) != MRT_OK || memcmp(y, y2, sizeof(float) * no)) {
            printf("FAIL: runtime/attn/%s/threads: %d threads give other bits\n", name, t);
            g_failed = 1;
        }
    }
    mrt_set_threads(2, NULL);
    if (g_out) fwrite(y, sizeof(float), (size_t)no, g_out);
    g_cases++;
    free(q), free(k), free(v), free(m), free(y), free(y2);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* MiniLM's attention: the best of 200 calls, in ms. */
static int bench(void) {
    mrt_attention_desc d;
    memset(&d, 0, sizeof d);
    const int64_t B = 8, H = 12, T = 128, D = 32;
    d.nb = 2, d.batch[0] = B, d.batch[1] = H, d.L = d.S = T, d.E = d.Ev = D, d.scale = 0.176776695f;
    d.zero_masked_rows = 1;
    int64_t n = lay_strides(LAY_HEADS, B, H, T, D, d.q);
    lay_strides(LAY_HEADS, B, H, T, D, d.k), lay_strides(LAY_HEADS, B, H, T, D, d.v), lay_strides(LAY_HEADS, B, H, T, D, d.o);
    d.m[0] = T, d.m[3] = 1;
    float *q = malloc(sizeof(float) * n), *k = malloc(sizeof(float) * n), *v = malloc(sizeof(float) * n);
    float *y = malloc(sizeof(float) * n), *m = malloc(sizeof(float) * B * T);
    for (int64_t i = 0; i < n; i++) q[i] = (float)urand(), k[i] = (float)urand(), v[i] = (float)urand();
    for (int64_t i = 0; i < B * T; i++) m[i] = i % T < 100 ? 0.0f : -1e9f;
    /* the chain it replaces, as an unfused build runs it: the heads permuted to [B, H, T, D], a
     * batched GEMM for the scores, the epilogue's scale and mask, the softmax rows, a batched
     * GEMM with v, the heads permuted back */
    float *qh = malloc(sizeof(float) * n), *kh = malloc(sizeof(float) * n), *vh = malloc(sizeof(float) * n);
    float *oh = malloc(sizeof(float) * n), *sc = malloc(sizeof(float) * B * H * T * T);
    const mrt_device cpu = {MRT_DEVICE_CPU, 0};
    double best = 1e30, best_chain = 1e30;
    for (int r = 0; r < 200; r++) {
        double t0 = now();
        mrt_cpu_attention_f32(&d, y, q, k, v, m);
        double t1 = now();
        for (int64_t b = 0; b < B; b++) /* [B, T, H, D] -> [B, H, T, D] */
            for (int64_t t = 0; t < T; t++)
                for (int64_t h = 0; h < H; h++) {
                    const int64_t src = ((b * T + t) * H + h) * D, dst = ((b * H + h) * T + t) * D;
                    memcpy(qh + dst, q + src, sizeof(float) * D);
                    memcpy(kh + dst, k + src, sizeof(float) * D);
                    memcpy(vh + dst, v + src, sizeof(float) * D);
                }
        mrt_gemm_f32(cpu, NULL, 0, 1, T, T, D, 1.0f, qh, D, T * D, kh, D, T * D, 0.0f, sc, T, T * T, B * H);
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < H * T * T; i++) sc[b * H * T * T + i] = sc[b * H * T * T + i] * d.scale + m[b * T + i % T];
        mrt_cpu_softmax_rows_f32(sc, sc, B * H * T, T, T, 0, 1);
        mrt_gemm_f32(cpu, NULL, 0, 0, T, D, T, 1.0f, sc, T, T * T, vh, D, T * D, 0.0f, oh, D, T * D, B * H);
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < T; t++)
                for (int64_t h = 0; h < H; h++)
                    memcpy(y + ((b * T + t) * H + h) * D, oh + ((b * H + h) * T + t) * D, sizeof(float) * D);
        double t2 = now();
        best = t1 - t0 < best ? t1 - t0 : best;
        best_chain = t2 - t1 < best_chain ? t2 - t1 : best_chain;
    }
    printf("attention 8x12x128x128, head 32, permuted heads, padding mask: fused %.3f ms, unfused chain %.3f ms "
           "(best of 200 each, alternating)\n", best * 1e3, best_chain * 1e3);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--bench")) return bench();
    if (argc > 1 && !(g_out = fopen(argv[1], "wb"))) {
        perror(argv[1]);
        return 1;
    }
    static const int64_t sizes[][4] = {{1, 1, 1, 1}, {5, 7, 8, 6}, {128, 128, 32, 32}, {130, 131, 64, 64},
                                       {17, 33, 40, 24}, {200, 131, 24, 40}, {3, 16, 64, 17}};
    const int ns = (int)(sizeof sizes / sizeof sizes[0]);
    for (int s = 0; s < ns; s++)
        for (int mask = 0; mask < 3; mask++)
            for (int causal = 0; causal < 2; causal++) {
                Case c = {2, 3, sizes[s][0], sizes[s][1], sizes[s][2], sizes[s][3], mask, causal, 1,
                          LAY_PLAIN, LAY_PLAIN, LAY_PLAIN, LAY_PLAIN, 0};
                run_case(&c);
                c.lq = c.lk = c.lv = c.lo = LAY_HEADS;
                run_case(&c);
                if (mask == 1) {
                    c.lq = LAY_COLS, c.lk = LAY_COLS, c.lv = LAY_COLS, c.lo = LAY_COLS;
                    run_case(&c);
                }
            }
    for (int zero = 0; zero < 2; zero++)
        for (int mask = 1; mask < 3; mask++) {
            Case c = {2, 3, 9, 20, 16, 8, mask, 0, zero, LAY_HEADS, LAY_HEADS, LAY_HEADS, LAY_HEADS, 1};
            run_case(&c);
            c.causal = 1;
            run_case(&c);
        }
    for (int special = 2; special <= 3; special++) {
        Case c = {2, 3, 33, 40, 32, 32, 2, 0, 1, LAY_HEADS, LAY_HEADS, LAY_HEADS, LAY_HEADS, special};
        run_case(&c);
        c.causal = 1; /* a NaN v after a row's last key still reaches it (0 * NaN), as unfused */
        run_case(&c);
    }
    for (int causal = 0; causal < 2; causal++) { /* padding: the keys no row of a chunk weighs, skipped */
        Case c = {2, 3, 128, 131, 32, 32, 1, causal, 1, LAY_HEADS, LAY_HEADS, LAY_HEADS, LAY_HEADS, 4};
        run_case(&c);
        c.lq = c.lk = c.lv = c.lo = LAY_PLAIN;
        run_case(&c);
    }
    /* no batch dims, and the heads broadcast (a k and v shared by every head: stride 0) */
    {
        mrt_attention_desc d;
        memset(&d, 0, sizeof d);
        d.nb = 0, d.L = 3, d.S = 4, d.E = 2, d.Ev = 1, d.scale = 1.0f;
        d.q[0] = 2, d.q[1] = 1, d.k[0] = 2, d.k[1] = 1, d.v[0] = 1, d.v[1] = 1, d.o[0] = 1, d.o[1] = 1;
        const float q[6] = {1, 0, 0, 1, 1, 1}, k[8] = {1, 0, 0, 1, 1, 1, -1, -1}, v[4] = {1, 2, 3, 4};
        float y[3];
        double ref[3];
        for (int i = 0; i < 3; i++) {
            double s[4], mx = -INFINITY, sum = 0, r = 0;
            for (int j = 0; j < 4; j++) s[j] = q[2 * i] * k[2 * j] + q[2 * i + 1] * k[2 * j + 1], mx = s[j] > mx ? s[j] : mx;
            for (int j = 0; j < 4; j++) sum += exp(s[j] - mx);
            for (int j = 0; j < 4; j++) r += exp(s[j] - mx) / sum * v[j];
            ref[i] = r;
        }
        if (mrt_cpu_attention_f32(&d, y, q, k, v, NULL) != MRT_OK || fabs(y[0] - ref[0]) > 1e-6 ||
            fabs(y[1] - ref[1]) > 1e-6 || fabs(y[2] - ref[2]) > 1e-6) {
            printf("FAIL: runtime/attn/no_batch: got %g %g %g, ref %g %g %g\n", y[0], y[1], y[2], ref[0], ref[1], ref[2]);
            g_failed = 1;
        }
        if (g_out) fwrite(y, sizeof(float), 3, g_out);
        d.nb = 7;
        if (mrt_cpu_attention_f32(&d, y, q, k, v, NULL) != MRT_ERR_INVALID_ARG) {
            printf("FAIL: runtime/attn/bad_nb: 7 batch dims accepted\n");
            g_failed = 1;
        }
    }
    if (g_out) fclose(g_out);
    if (!g_failed)
        printf("PASS: runtime/attn (%d cases against a double reference, 1/2/3 threads bit-identical, %s path)\n", g_cases,
               mrt_cpu_simd_avx512() ? "AVX-512" : "portable");
    return g_failed;
}
