/*
 * tests/runtime/test_dwconv.c — mrt_cpu_dwconv2d_f32 (runtime/rt_dwconv.c) against a direct
 * reference in double written from the definition (PyTorch's conv2d with groups = C, then
 * + bias and the activation), on seeded random shapes: kernel 1..7 x 1..7, stride 1..3 per axis,
 * padding up to kernel-1 per side, dilation 1..2, channel multiplier 1..3, batch 1..3, widths
 * around the 16-column tile, every MRT_ACT_*, with and without bias.
 *
 *   test_dwconv OUT.bin      prints one PASS/FAIL line (maxdiff and tolerance) and writes every
 *                            output to OUT.bin
 *
 * tests/runtime/run.sh runs it twice, the second time with MODELRT_DWCONV=portable, and requires
 * the two OUT.bin to be identical: the AVX-512 and portable paths sum in the same order.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "modelrt.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}
static int pick(int lo, int hi) { return lo + (int)(next_u32() % (uint32_t)(hi - lo + 1)); }
static float uniform(void) { return (float)(next_u32() % 2000001u) / 1000000.0f - 1.0f; }

static double act_ref(double v, int act, double lo, double hi) {
    switch (act) {
    case MRT_ACT_RELU: return v < 0 ? 0 : v;
    case MRT_ACT_GELU_TANH: return 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    case MRT_ACT_CLAMP: return v < lo ? lo : v > hi ? hi : v;
    case MRT_ACT_HARDSWISH: return v <= -3 ? 0 : v >= 3 ? v : v * (v + 3) / 6;
    case MRT_ACT_SILU: return v / (1 + exp(-v));
    case MRT_ACT_GELU: return 0.5 * v * (1 + erf(v / sqrt(2.0)));
    case MRT_ACT_SIGMOID: return 1 / (1 + exp(-v));
    default: return v;
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_dwconv OUT.bin\n");
        return 2;
    }
    FILE *out = fopen(argv[1], "wb");
    if (!out) {
        perror(argv[1]);
        return 2;
    }
    const double atol = 1e-5, rtol = 1e-5;
    double maxdiff = 0, tol_at = atol;
    int ncases = 0, bad = 0;
    for (int t = 0; t < 300 && !bad; t++) {
        const int KH = pick(1, 7), KW = t % 3 ? KH : pick(1, 7);
        const int sh = pick(1, 3) > 2 ? pick(1, 3) : 1 + (t & 1), sw = t % 5 ? sh : pick(1, 3);
        const int dh = pick(1, 4) == 4 ? 2 : 1, dw = t % 7 ? dh : pick(1, 2);
        const int pt = pick(0, KH - 1), pb = pick(0, KH - 1), pl = pick(0, KW - 1), pr = pick(0, KW - 1);
        const int64_t N = pick(1, 3), C = pick(1, 6), mult = pick(1, 4) == 4 ? pick(2, 3) : 1, O = C * mult;
        const int64_t H = pick(1, 20), W = pick(1, 4) == 1 ? pick(30, 70) : pick(1, 24);
        const int64_t OH = (H + pt + pb - dh * (KH - 1) - 1) / sh + 1, OW = (W + pl + pr - dw * (KW - 1) - 1) / sw + 1;
        if (H + pt + pb < dh * (KH - 1) + 1 || W + pl + pr < dw * (KW - 1) + 1 || OH < 1 || OW < 1) continue;
        const int act = t % 8, has_bias = t % 3 != 0;
        const float lo = -0.25f, hi = 0.5f;
        float *x = malloc(sizeof(float) * (size_t)(N * C * H * W)), *w = malloc(sizeof(float) * (size_t)(O * KH * KW));
        float *b = malloc(sizeof(float) * (size_t)O), *y = malloc(sizeof(float) * (size_t)(N * O * OH * OW));
        for (int64_t i = 0; i < N * C * H * W; i++) x[i] = uniform();
        for (int64_t i = 0; i < O * KH * KW; i++) w[i] = uniform();
        for (int64_t i = 0; i < O; i++) b[i] = uniform();
        mrt_cpu_dwconv2d_f32(y, x, w, has_bias ? b : NULL, act, lo, hi, N, C, H, W, O, KH, KW, OH, OW, sh, sw, pt, pl, dh,
                             dw);
        fwrite(y, sizeof(float), (size_t)(N * O * OH * OW), out);
        ncases++;
        for (int64_t n = 0; n < N && !bad; n++)
            for (int64_t o = 0; o < O && !bad; o++)
                for (int64_t oh = 0; oh < OH && !bad; oh++)
                    for (int64_t ow = 0; ow < OW; ow++) {
                        double s = 0;
                        for (int kh = 0; kh < KH; kh++)
                            for (int kw = 0; kw < KW; kw++) {
                                int64_t ih = oh * sh - pt + kh * dh, iw = ow * sw - pl + kw * dw;
                                if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                                    s += (double)w[(o * KH + kh) * KW + kw] * x[((n * C + o / mult) * H + ih) * W + iw];
                            }
                        double ref = act_ref(s + (has_bias ? b[o] : 0), act, lo, hi);
                        double got = y[((n * O + o) * OH + oh) * OW + ow], d = fabs(got - ref), tol = atol + rtol * fabs(ref);
                        if (d > maxdiff) maxdiff = d, tol_at = tol;
                        if (!(d <= tol)) {
                            printf("FAIL: runtime/dwconv: case %d (N %lld C %lld O %lld H %lld W %lld k %dx%d s %dx%d "
                                   "p %d,%d,%d,%d d %dx%d act %d bias %d): y[%lld,%lld,%lld,%lld] = %.9g, reference %.9g "
                                   "(diff %.3g > tol %.3g)\n",
                                   t, (long long)N, (long long)C, (long long)O, (long long)H, (long long)W, KH, KW, sh, sw,
                                   pt, pl, pb, pr, dh, dw, act, has_bias, (long long)n, (long long)o, (long long)oh,
                                   (long long)ow, got, ref, d, tol);
                            bad = 1;
                            break;
                        }
                    }
        free(x), free(w), free(b), free(y);
    }
    fclose(out);
    if (!bad)
        printf("PASS: runtime/dwconv (%d random shapes vs the double reference, maxdiff %.3g, tol %.3g there)\n", ncases,
               maxdiff, tol_at);
    return bad;
}
