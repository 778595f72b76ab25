/*
 * bench/gelu.c — ns per element of the elementwise loops that generated kernels run for exact
 * gelu (mrt_gelu: mrt_erff), gelu_tanh (mrt_gelu_tanh: mrt_tanhf), erf and tanh, one thread, in
 * each copy that kprint.c emits: portable (the x86-64 baseline), x86-64-v3 (AVX2 + FMA) and
 * x86-64-v4 (AVX-512). Each loop is an `omp simd` loop over 4096 floats in [-6, 6] (in L1),
 * repeated; the best of 7 rounds of CPU time (CLOCK_THREAD_CPUTIME_ID) is printed. Also checks
 * that the three copies give the same bits.
 *   cc -O2 -std=c11 -D_GNU_SOURCE -fopenmp -ffp-contract=off -Iruntime bench/gelu.c -o /tmp/bg -lm && /tmp/bg
 * (-I DIR before -Iruntime, DIR holding another mrt_kernels.h, measures that one.)
 */
#include <stdio.h>
#include <time.h>

#include "mrt_kernels.h"

enum { N = 4096, REPS = 400 };

#define LOOPS(SUF, ATTR)                                                                        \
    ATTR static void gelu##SUF(float *y, const float *x, int n) {                              \
        MRT_PRAGMA(omp simd)                                                                   \
        for (int i = 0; i < n; i++) y[i] = mrt_gelu(x[i]);                                     \
    }                                                                                          \
    ATTR static void gelu_tanh##SUF(float *y, const float *x, int n) {                         \
        MRT_PRAGMA(omp simd)                                                                   \
        for (int i = 0; i < n; i++) y[i] = mrt_gelu_tanh(x[i]);                                \
    }                                                                                          \
    ATTR static void erf##SUF(float *y, const float *x, int n) {                               \
        MRT_PRAGMA(omp simd)                                                                   \
        for (int i = 0; i < n; i++) y[i] = mrt_erff(x[i]);                                     \
    }                                                                                          \
    ATTR static void tanh##SUF(float *y, const float *x, int n) {                              \
        MRT_PRAGMA(omp simd)                                                                   \
        for (int i = 0; i < n; i++) y[i] = mrt_tanhf(x[i]);                                    \
    }
LOOPS(_portable, )
LOOPS(_v3, __attribute__((target("arch=x86-64-v3"))))
LOOPS(_v4, __attribute__((target("arch=x86-64-v4"))))

typedef void (*Fn)(float *, const float *, int);

static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static double time_ns(Fn f, float *y, const float *x) {
    double best = 1e30;
    for (int round = 0; round < 7; round++) {
        double t0 = cpu_s();
        for (int r = 0; r < REPS; r++) f(y, x, N);
        double t = (cpu_s() - t0) / ((double)REPS * N) * 1e9;
        if (t < best) best = t;
    }
    return best;
}

int main(void) {
    static float x[N], y[3][N];
    for (int i = 0; i < N; i++) x[i] = -6.0f + 12.0f * (float)((i * 2654435761u) % N) / N;
    const char *names[4] = {"gelu (erf)", "gelu_tanh", "erf", "tanh"};
    Fn fns[4][3] = {{gelu_portable, gelu_v3, gelu_v4}, {gelu_tanh_portable, gelu_tanh_v3, gelu_tanh_v4},
                    {erf_portable, erf_v3, erf_v4}, {tanh_portable, tanh_v3, tanh_v4}};
    int bad = 0;
    __builtin_cpu_init();
    int has_v4 = __builtin_cpu_supports("avx512f"), has_v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    printf("%-12s %10s %10s %10s  (ns per element, 1 thread)\n", "", "portable", "v3", "v4");
    for (int f = 0; f < 4; f++) {
        double t[3] = {0, 0, 0};
        for (int c = 0; c < 3; c++) {
            if ((c == 1 && !has_v3) || (c == 2 && !has_v4)) continue;
            t[c] = time_ns(fns[f][c], y[c], x);
            if (c && memcmp(y[c], y[0], sizeof y[0])) printf("%s: copy %d differs from portable\n", names[f], c), bad = 1;
        }
        printf("%-12s %10.3f %10.3f %10.3f\n", names[f], t[0], t[1], t[2]);
    }
    return bad;
}
