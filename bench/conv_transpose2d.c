/*
 * bench/conv_transpose2d.c — the CPU conv_transpose2d kernel (mrt_kernels.h: GEMM + col2im, or
 * the direct scatter for at most MRT_CONVT_DIRECT_CG channels per group) against the plain
 * scatter loop, on shapes from real decoders (U-Net, DCGAN, a depthwise upsampler) and odd
 * ones (groups, dilation, output_padding, W != H). Checks that both agree (|a - b| <= 1e-4 + 1e-4 |b|) and prints the
 * time of each:
 *   cc -O2 -std=c11 -D_GNU_SOURCE $(pkg-config --cflags openblas) -Iruntime bench/conv_transpose2d.c \
 *      -o /tmp/ct $(pkg-config --libs openblas) -lm && /tmp/ct
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "mrt_kernels.h"

/* The direct loop: every input pixel, weighted by every tap, added to its output pixel. */
static void naive(float *y, const float *x, const float *w, int64_t N, int64_t C, int64_t H, int64_t W, int64_t O,
                  int KH, int KW, int64_t OH, int64_t OW, int sh, int sw, int ph, int pw, int dh, int dw, int groups) {
    const int64_t Cg = C / groups, Og = O / groups;
    memset(y, 0, (size_t)(N * O * OH * OW) * sizeof(float));
    for (int64_t n = 0; n < N; n++)
        for (int g = 0; g < groups; g++)
            for (int64_t c = 0; c < Cg; c++) {
                const float *xc = x + (n * C + g * Cg + c) * H * W;
                for (int64_t o = 0; o < Og; o++) {
                    float *yo = y + (n * O + g * Og + o) * OH * OW;
                    const float *wk = w + ((g * Cg + c) * Og + o) * KH * KW;
                    for (int kh = 0; kh < KH; kh++)
                        for (int kw = 0; kw < KW; kw++) {
                            const float wv = wk[kh * KW + kw];
                            for (int64_t ih = 0; ih < H; ih++) {
                                const int64_t oh = ih * sh - ph + (int64_t)kh * dh;
                                if (oh < 0 || oh >= OH) continue;
                                for (int64_t iw = 0; iw < W; iw++) {
                                    const int64_t ow = iw * sw - pw + (int64_t)kw * dw;
                                    if (ow >= 0 && ow < OW) yo[oh * OW + ow] += wv * xc[ih * W + iw];
                                }
                            }
                        }
                }
            }
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void) {
    struct { int64_t N, C, H, W, O; int k, s, p, op, d, g; const char *what; } cases[] = {
        {1, 64, 32, 32, 32, 2, 2, 0, 0, 1, 1, "U-Net up 64->32, k2 s2, 32x32"},
        {8, 128, 16, 16, 64, 4, 2, 1, 0, 1, 1, "DCGAN 128->64, k4 s2 p1, 16x16, batch 8"},
        {1, 256, 8, 8, 128, 3, 2, 1, 1, 1, 1, "k3 s2 p1 op1, 8x8"},
        {1, 32, 64, 64, 32, 4, 2, 1, 0, 1, 32, "depthwise k4 s2 p1, 64x64"},
        {2, 16, 20, 20, 16, 3, 1, 1, 0, 2, 8, "groups 8 (2 channels each) k3 d2, 20x20"},
        {2, 12, 9, 11, 6, 3, 3, 2, 2, 2, 3, "groups 3, k3 s3 p2 op2 d2, 9x11"},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t N = cases[i].N, C = cases[i].C, H = cases[i].H, W = cases[i].W, O = cases[i].O;
        int k = cases[i].k, s = cases[i].s, p = cases[i].p, d = cases[i].d, g = cases[i].g;
        int64_t OH = (H - 1) * s - 2 * p + d * (k - 1) + cases[i].op + 1, OW = (W - 1) * s - 2 * p + d * (k - 1) + cases[i].op + 1;
        size_t nx = N * C * H * W, nw = C * (O / g) * k * k, ny = N * O * OH * OW;
        float *x = malloc(nx * 4), *w = malloc(nw * 4), *a = malloc(ny * 4), *b = malloc(ny * 4);
        float *col = malloc((size_t)(O / g) * k * k * H * W * 4);
        srand(1);
        for (size_t j = 0; j < nx; j++) x[j] = rand() / (float)RAND_MAX - 0.5f;
        for (size_t j = 0; j < nw; j++) w[j] = rand() / (float)RAND_MAX - 0.5f;
        double best[2] = {1e9, 1e9};
        for (int rep = 0; rep < 5; rep++) {
            double t0 = now();
            mrt_conv_transpose2d_f32(a, x, w, N, C, H, W, O, k, k, OH, OW, s, s, p, p, d, d, g, col);
            double t1 = now();
            naive(b, x, w, N, C, H, W, O, k, k, OH, OW, s, s, p, p, d, d, g);
            double t2 = now();
            if (t1 - t0 < best[0]) best[0] = t1 - t0;
            if (t2 - t1 < best[1]) best[1] = t2 - t1;
        }
        double md = 0;
        for (size_t j = 0; j < ny; j++) {
            double e = fabs((double)a[j] - b[j]);
            if (e > md) md = e;
            if (!(e <= 1e-4 + 1e-4 * fabs(b[j]))) bad = 1;
        }
        printf("%-42s kernel %8.3f ms   naive %8.3f ms   (%.1fx)   maxdiff %.2g\n", cases[i].what, best[0] * 1e3,
               best[1] * 1e3, best[1] / best[0], md);
        free(x), free(w), free(a), free(b), free(col);
    }
    printf("%s\n", bad ? "FAIL: the two kernels disagree" : "PASS: the two kernels agree");
    return bad;
}
