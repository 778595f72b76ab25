/*
 * tests/runtime/test_rows.c — rt_rows.c's row kernels and mrt_exp_nonpos against references in
 * double computed here from libm (exp, sqrt in double: independent of the kernels' float code).
 *
 *   exp:       mrt_exp_nonpos over every 61st float in [-104, 0] and the special values, vs
 *              exp in double: the largest error in ulps of the float result (at most 1.02 above
 *              2^-126: over every float the FMA form's worst is 1.0103 ulp, at -5.87788; at
 *              most 1 subnormal step below), printed with glibc expf's on the same sample and
 *              how many results differ from expf's;
 *   softmax:   mrt_cpu_softmax_rows_f32 on row lengths 1..300 (whole 16-lane blocks and tails),
 *              causal and not, fully masked rows with and without zero_masked_rows, a NaN row, a
 *              +inf row, large logits: |y - ref| <= 1e-9 + 1e-6 |ref| (the exp's 1 ulp, the
 *              reciprocal's and the product's roundings), NaN where the reference has NaN;
 *   layernorm: mrt_cpu_layernorm_f32 on D 1..769, with and without weight and bias, rows with a
 *              large common offset: |y - ref| <= 1e-6 + 1e-6 |ref|.
 *
 * With a file argument every output is also written there: tests/runtime/run.sh runs this
 * twice, the second time with MODELRT_SIMD=portable, and compares the files byte for byte (the
 * AVX-512 and the portable paths must give the same bits). Prints PASS:/FAIL: lines and which
 * path ran; exits 1 on a failure.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "modelrt.h"
#include "mrt_kernels.h"

static FILE *g_out;
static int g_failed;

static void dump(const float *y, size_t n) {
    if (g_out) fwrite(y, sizeof(float), n, g_out);
}

static uint64_t g_rng = 0x9e3779b97f4a7c15u;
static double urand(void) { /* xorshift64*, [0, 1) */
    g_rng ^= g_rng >> 12, g_rng ^= g_rng << 25, g_rng ^= g_rng >> 27;
    return (double)((g_rng * 0x2545f4914f6cdd1du) >> 11) * 0x1p-53;
}
static float nrand(double scale) { return (float)((urand() + urand() + urand() - 1.5) * 2.0 * scale); }

/* The error of a float result e against the exact value ref, in units of the float spacing at
 * ref (2^-149 below 2^-126). */
static double ulps(float e, double ref) {
    if (ref == 0.0) return e == 0.0f ? 0.0 : fabs((double)e) / 0x1p-149;
    int ex;
    frexp(ref, &ex); /* ref = m 2^ex, m in [0.5, 1) */
    double u = ldexp(1.0, ex - 24);
    if (u < 0x1p-149) u = 0x1p-149;
    return fabs((double)e - ref) / u;
}

static void check_exp(void) {
    double worst = 0, worst_libm = 0, worst_sub = 0;
    float at = 0, at_libm = 0;
    long n = 0, differ = 0;
    for (uint32_t b = 0x80000000u; b <= 0xc2d00000u; b += 61) { /* -0 .. -104 */
        float d = mrt_f32_from_bits(b);
        float e = mrt_exp_nonpos(d), l = expf(d);
        double ref = exp((double)d), u = ulps(e, ref), ul = ulps(l, ref);
        n++;
        differ += mrt_f32_bits(e) != mrt_f32_bits(l);
        if (ref < 0x1p-126) {
            if (u > worst_sub) worst_sub = u;
            continue;
        }
        if (u > worst) worst = u, at = d;
        if (ul > worst_libm) worst_libm = ul, at_libm = d;
    }
    int special = mrt_exp_nonpos(0.0f) == 1.0f && mrt_exp_nonpos(-0.0f) == 1.0f && mrt_exp_nonpos(-INFINITY) == 0.0f &&
                  mrt_exp_nonpos(-104.0f) == 0.0f && mrt_exp_nonpos(-200.0f) == 0.0f && isnan(mrt_exp_nonpos(NAN)) &&
                  mrt_exp_nonpos(-103.9f) > 0.0f;
    int ok = worst <= 1.02 && worst_sub <= 1.0 && special;
    printf("%s: runtime/rows/exp (mrt_exp_nonpos vs exp in double, %ld floats in [-104, 0]: max %.3f ulp at %.9g "
           "(tol 1.02), subnormal results max %.3f steps (tol 1); glibc expf max %.3f ulp at %.9g; %ld results (%.2f%%) "
           "differ from expf; specials %s)\n",
           ok ? "PASS" : "FAIL", n, worst, at, worst_sub, worst_libm, at_libm, differ, 100.0 * differ / n,
           special ? "ok" : "WRONG");
    g_failed |= !ok;
}

/* softmax reference in double over the visible [0, lim) */
static void softmax_ref(double *r, const float *x, int64_t lim, int64_t n, int zero) {
    double m = -INFINITY;
    int nan = 0;
    for (int64_t j = 0; j < lim; j++) {
        nan |= x[j] != x[j];
        if (x[j] > m) m = x[j];
    }
    if (nan || m == INFINITY) {
        for (int64_t j = 0; j < n; j++) r[j] = j < lim ? NAN : 0.0;
        return;
    }
    if (m == -INFINITY) {
        for (int64_t j = 0; j < n; j++) r[j] = j < lim && !zero ? NAN : 0.0;
        return;
    }
    double s = 0;
    for (int64_t j = 0; j < lim; j++) s += exp((double)x[j] - m);
    for (int64_t j = 0; j < n; j++) r[j] = j < lim ? exp((double)x[j] - m) / s : 0.0;
}

/* |y - ref| <= atol + rtol |ref|, NaN where ref is NaN; the worst error / tolerance so far. */
static int close_to(const float *y, const double *ref, size_t n, double atol, double rtol, double *worst,
                    double *worst_err) {
    int ok = 1;
    for (size_t i = 0; i < n; i++) {
        if (isnan(ref[i])) {
            ok &= isnan(y[i]);
            continue;
        }
        double err = fabs((double)y[i] - ref[i]), tol = atol + rtol * fabs(ref[i]);
        if (!(err <= tol)) ok = 0;
        if (err / tol > *worst) *worst = err / tol, *worst_err = err;
    }
    return ok;
}

static void check_softmax(void) {
    static const int64_t ns[] = {1, 2, 5, 15, 16, 17, 31, 33, 64, 100, 128, 300};
    int ok = 1, cases = 0;
    double worst = 0, werr = 0;
    for (size_t t = 0; t < sizeof ns / sizeof *ns; t++)
        for (int variant = 0; variant < 4; variant++) {
            const int64_t n = ns[t], L = n, rows = 2 * L + 3;
            const int causal = variant & 1, zero = variant >> 1;
            size_t N = (size_t)(rows * n);
            float *x = malloc(N * 4), *y = malloc(N * 4);
            double *r = malloc(N * 8);
            for (size_t i = 0; i < N; i++) x[i] = nrand(variant == 3 ? 40.0 : 4.0);
            for (int64_t j = 0; j < n; j++) x[1 * n + j] = -INFINITY; /* fully masked */
            for (int64_t j = 0; j < n; j += 3) x[2 * n + j] = -INFINITY; /* partly masked */
            if (rows > 4) x[4 * n + n / 2] = NAN;
            if (rows > 5) x[5 * n] = INFINITY;
            if (rows > 6) x[6 * n + n - 1] = 3e38f, x[6 * n] = -3e38f;
            mrt_cpu_softmax_rows_f32(y, x, rows, n, L, causal, zero);
            for (int64_t row = 0; row < rows; row++) {
                int64_t lim = causal ? row % L + 1 : n;
                softmax_ref(r + row * n, x + row * n, lim, n, zero);
            }
            ok &= close_to(y, r, N, 1e-9, 1e-6, &worst, &werr);
            dump(y, N);
            /* in place (y == x), as generated code calls it */
            mrt_cpu_softmax_rows_f32(x, x, rows, n, L, causal, zero);
            ok &= !memcmp(x, y, N * 4);
            cases++;
            free(x), free(y), free(r);
        }
    printf("%s: runtime/rows/softmax (%d shapes x causal x zero_masked_rows, %s path: max |err| %.3g, %.3f of its "
           "tolerance 1e-9 + 1e-6 |ref|; in place the same bits)\n",
           ok ? "PASS" : "FAIL", cases, mrt_cpu_simd_avx512() ? "AVX-512" : "portable", werr, worst);
    g_failed |= !ok;
}

static void check_layernorm(void) {
    static const int64_t Ds[] = {1, 7, 16, 33, 100, 384, 769};
    int ok = 1, cases = 0;
    double worst = 0, werr = 0;
    for (size_t t = 0; t < sizeof Ds / sizeof *Ds; t++)
        for (int variant = 0; variant < 4; variant++) {
            const int64_t D = Ds[t], rows = 5;
            size_t N = (size_t)(rows * D);
            float *x = malloc(N * 4), *y = malloc(N * 4), *w = malloc(D * 4), *b = malloc(D * 4);
            double *r = malloc(N * 8);
            for (size_t i = 0; i < N; i++) x[i] = nrand(2.0) + (i / D == 3 ? 1e4f : 1.0f); /* row 3: offset 1e4 */
            for (int64_t j = 0; j < D; j++) w[j] = nrand(1.0), b[j] = nrand(1.0);
            const float *wp = variant & 1 ? w : NULL, *bp = variant & 2 ? b : NULL;
            const float eps = 1e-5f;
            mrt_cpu_layernorm_f32(y, x, wp, bp, rows, D, eps);
            for (int64_t row = 0; row < rows; row++) {
                const float *xr = x + row * D;
                double mean = 0, var = 0;
                for (int64_t j = 0; j < D; j++) mean += xr[j];
                mean /= (double)D;
                for (int64_t j = 0; j < D; j++) var += (xr[j] - mean) * (xr[j] - mean);
                var /= (double)D;
                for (int64_t j = 0; j < D; j++)
                    r[row * D + j] = (xr[j] - mean) / sqrt(var + eps) * (wp ? wp[j] : 1.0) + (bp ? bp[j] : 0.0);
            }
            ok &= close_to(y, r, N, 1e-6, 1e-6, &worst, &werr);
            dump(y, N);
            mrt_cpu_layernorm_f32(x, x, wp, bp, rows, D, eps);
            ok &= !memcmp(x, y, N * 4);
            cases++;
            free(x), free(y), free(w), free(b), free(r);
        }
    printf("%s: runtime/rows/layernorm (%d shapes x weight x bias, %s path: max |err| %.3g, %.3f of its tolerance "
           "1e-6 + 1e-6 |ref|; in place the same bits)\n",
           ok ? "PASS" : "FAIL", cases, mrt_cpu_simd_avx512() ? "AVX-512" : "portable", werr, worst);
    g_failed |= !ok;
}

int main(int argc, char **argv) {
    if (argc > 1 && !(g_out = fopen(argv[1], "wb"))) {
        fprintf(stderr, "test_rows: cannot write %s\n", argv[1]);
        return 2;
    }
    check_exp();
    check_softmax();
    check_layernorm();
    if (g_out) fclose(g_out);
    return g_failed;
}
