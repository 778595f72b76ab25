/*
 * bench/conv/dwconv.c — depthwise conv2d on the CPU: the direct kernel (mrt_cpu_dwconv2d_f32,
 * bias and activation fused) against the path modelc took before it (mrt_conv2d_f32: im2col + one
 * GEMM per group, then the epilogue as a separate pass), on the depthwise layers of MobileNetV2
 * (3x3), EfficientNet-B0 (5x5) and ConvNeXt-Tiny (7x7) at 224x224, batch 1. Checks that both
 * agree (|a - b| <= 1e-4 + 1e-4 |b|), then prints the median of 15 timed calls of each, in ms and
 * GFLOP/s (2 * O * OH * OW * KH * KW flops).
 *
 *   make -j2 all && bash bench/conv/dwconv.sh [THREADS]      (default 2 threads)
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "mrt_kernels.h"

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct Shape {
    const char *model;
    int C, H, k, s;
} Shape;

/* the old path's epilogue pass: + bias[c], relu6 (the generated elementwise kernel's work) */
static void epilogue(float *y, const float *b, int64_t C, int64_t P) {
    MRT_PRAGMA(omp parallel for schedule(static) if(C * P >= MRT_PAR_MIN))
    for (int64_t c = 0; c < C; c++)
        for (int64_t i = 0; i < P; i++) y[c * P + i] = mrt_clamp(y[c * P + i] + b[c], 0.0f, 6.0f);
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    int used = 0;
    mrt_set_threads(threads, &used);
    static const Shape shapes[] = {
        {"mobilenet_v2", 32, 112, 3, 1},   {"mobilenet_v2", 96, 112, 3, 2},  {"mobilenet_v2", 144, 56, 3, 1},
        {"mobilenet_v2", 144, 56, 3, 2},   {"mobilenet_v2", 192, 28, 3, 1},  {"mobilenet_v2", 384, 14, 3, 1},
        {"mobilenet_v2", 576, 14, 3, 2},   {"mobilenet_v2", 960, 7, 3, 1},   {"efficientnet_b0", 240, 28, 5, 1},
        {"efficientnet_b0", 480, 14, 5, 1}, {"efficientnet_b0", 672, 14, 5, 2}, {"efficientnet_b0", 1152, 7, 5, 1},
        {"convnext_tiny", 96, 56, 7, 1},   {"convnext_tiny", 192, 28, 7, 1}, {"convnext_tiny", 384, 14, 7, 1},
        {"convnext_tiny", 768, 7, 7, 1},
    };
    printf("%d threads (%d in use); median of 15 calls; relu6 epilogue with bias\n\n", threads, used);
    printf("| model | C, H=W, k, stride | im2col+GEMM ms | GFLOP/s | direct ms | GFLOP/s | speedup |\n");
    printf("|---|---|---:|---:|---:|---:|---:|\n");
    double sum_old = 0, sum_new = 0;
    int bad = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const Shape *s = &shapes[i];
        const int64_t C = s->C, H = s->H, W = s->H, k = s->k, pad = k / 2;
        const int64_t OH = (H + 2 * pad - k) / s->s + 1, OW = OH, P = OH * OW;
        float *x = malloc(sizeof(float) * (size_t)(C * H * W)), *w = malloc(sizeof(float) * (size_t)(C * k * k));
        float *b = malloc(sizeof(float) * (size_t)C), *col = malloc(sizeof(float) * (size_t)(k * k * P));
        float *y0 = malloc(sizeof(float) * (size_t)(C * P)), *y1 = malloc(sizeof(float) * (size_t)(C * P));
        srand(1);
        for (int64_t j = 0; j < C * H * W; j++) x[j] = (float)rand() / RAND_MAX - 0.5f;
        for (int64_t j = 0; j < C * k * k; j++) w[j] = (float)rand() / RAND_MAX - 0.5f;
        for (int64_t j = 0; j < C; j++) b[j] = (float)rand() / RAND_MAX - 0.5f;
        double t_old[15], t_new[15];
        for (int r = -2; r < 15; r++) { /* two warm-up calls */
            double t0 = now_ms();
            mrt_conv2d_f32(y0, x, w, 1, C, H, W, C, (int)k, (int)k, OH, OW, s->s, s->s, (int)pad, (int)pad, 1, 1, (int)C,
                           col);
            epilogue(y0, b, C, P);
            double t1 = now_ms();
            mrt_cpu_dwconv2d_f32(y1, x, w, b, MRT_ACT_CLAMP, 0.0f, 6.0f, 1, C, H, W, C, (int)k, (int)k, OH, OW, s->s, s->s,
                                 (int)pad, (int)pad, 1, 1);
            double t2 = now_ms();
            if (r >= 0) t_old[r] = t1 - t0, t_new[r] = t2 - t1;
        }
        for (int64_t j = 0; j < C * P; j++)
            if (!(fabsf(y1[j] - y0[j]) <= 1e-4f + 1e-4f * fabsf(y0[j]))) {
                printf("MISMATCH at %lld: direct %g, im2col %g\n", (long long)j, y1[j], y0[j]);
                bad = 1;
                break;
            }
        qsort(t_old, 15, sizeof(double), cmp_double);
        qsort(t_new, 15, sizeof(double), cmp_double);
        double flops = 2.0 * C * P * k * k, mo = t_old[7], mn = t_new[7];
        sum_old += mo, sum_new += mn;
        printf("| %s | %lld, %lld, %lld, %d | %.3f | %.1f | %.3f | %.1f | %.1fx |\n", s->model, (long long)C, (long long)H,
               (long long)k, s->s, mo, flops / mo / 1e6, mn, flops / mn / 1e6, mo / mn);
        free(x), free(w), free(b), free(col), free(y0), free(y1);
    }
    printf("| sum | | %.3f | | %.3f | | %.1fx |\n", sum_old, sum_new, sum_old / sum_new);
    return bad;
}
