/* bench/peaks.c — this machine's two ceilings, measured the way modelc's kernels meet them, for
 * bench/run.py to set each model's profile (PROG --profile) against:
 *
 *   peaks THREADS      prints one JSON object:
 *     {"threads": T, "sgemm_gflops": G, "sgemm_gflops_1t": G1, "triad_gbs": B, "copy_gbs": C}
 *
 * sgemm: oneDNN's dnnl_sgemm (the library modelc's CPU GEMMs use) on a 1024x1024x1024 f32
 * product, the best of 7 calls after a warm-up, with T threads and with one. triad and copy:
 * STREAM's kernels (McCalpin, "Memory Bandwidth and Machine Balance", 1995: a[i] = b[i] + s*c[i],
 * a[i] = b[i]) over arrays of 64 MiB each, far beyond the caches, on T OpenMP threads, the best
 * of 7, counting the bytes the kernel reads and writes (triad 3 arrays, copy 2; the write
 * allocate's extra read not counted, as STREAM does not). Build: cc -O2 -fopenmp peaks.c -ldnnl.
 */
#include <dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double sgemm_gflops(int threads) {
    enum { S = 1024 };
    omp_set_num_threads(threads);
    float *a = aligned_alloc(64, sizeof(float) * S * S), *b = aligned_alloc(64, sizeof(float) * S * S),
          *c = aligned_alloc(64, sizeof(float) * S * S);
    if (!a || !b || !c) return 0;
    for (long i = 0; i < (long)S * S; i++) a[i] = (float)(i % 7) * 0.1f, b[i] = (float)(i % 5) * 0.2f, c[i] = 0;
    double best = 1e30;
    for (int r = 0; r < 8; r++) {
        double t0 = now();
        if (dnnl_sgemm('N', 'N', S, S, S, 1.0f, a, S, b, S, 0.0f, c, S) != dnnl_success) return 0;
        double t = now() - t0;
        if (r > 0 && t < best) best = t;
    }
    free(a), free(b), free(c);
    return 2.0 * S * S * S / best * 1e-9;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    if (threads < 1) threads = 1;
    const long n = 16L << 20; /* 16M floats: 64 MiB per array */
    float *a = aligned_alloc(64, sizeof(float) * n), *b = aligned_alloc(64, sizeof(float) * n),
          *c = aligned_alloc(64, sizeof(float) * n);
    if (!a || !b || !c) {
        fprintf(stderr, "peaks: out of memory\n");
        return 1;
    }
    omp_set_num_threads(threads);
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) a[i] = 0, b[i] = 1, c[i] = 2;
    double triad = 1e30, copy = 1e30;
    for (int r = 0; r < 7; r++) {
        double t0 = now();
#pragma omp parallel for schedule(static)
        for (long i = 0; i < n; i++) a[i] = b[i] + 0.5f * c[i];
        double t1 = now();
#pragma omp parallel for schedule(static)
        for (long i = 0; i < n; i++) c[i] = a[i];
        double t2 = now();
        if (t1 - t0 < triad) triad = t1 - t0;
        if (t2 - t1 < copy) copy = t2 - t1;
    }
    double g = sgemm_gflops(threads), g1 = threads > 1 ? sgemm_gflops(1) : g;
    printf("{\"threads\": %d, \"sgemm_gflops\": %.1f, \"sgemm_gflops_1t\": %.1f, \"triad_gbs\": %.1f, \"copy_gbs\": %.1f}\n",
           threads, g, g1, 3.0 * sizeof(float) * n / triad * 1e-9, 2.0 * sizeof(float) * n / copy * 1e-9);
    free(a), free(b), free(c);
    return 0;
}
