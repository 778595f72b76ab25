#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "mrt_kernels.h"
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
MRT_HD_INLINE float ex(float a0, float a1) { return mrt_gelu(a0 + a1); }
MRT_TARGET_V4 static void epi(float *out, const float *l0, const float *l1, int64_t r0, int64_t r1) {
    for (int64_t i0 = r0; i0 < r1; i0++) {
        MRT_PRAGMA(omp simd)
        for (int64_t i1 = 0; i1 < 1536; i1++) out[i0 * 1536 + i1] = ex(l0[i0 * 1536 + i1], l1[i1]);
    }
}
MRT_TARGET_V4 static void addonly(float *out, const float *l0, const float *l1, int64_t r0, int64_t r1) {
    for (int64_t i0 = r0; i0 < r1; i0++) {
        MRT_PRAGMA(omp simd)
        for (int64_t i1 = 0; i1 < 1536; i1++) out[i0 * 1536 + i1] = l0[i0 * 1536 + i1] + l1[i1];
    }
}
int main(void) {
    int64_t R = 1024; float *c = aligned_alloc(64, R * 1536 * 4), *b = aligned_alloc(64, 1536 * 4);
    for (int64_t i = 0; i < R * 1536; i++) c[i] = (float)((i * 7919) % 2001 - 1000) / 400.0f;
    for (int i = 0; i < 1536; i++) b[i] = 0.0f;
    for (int rows = 32; rows <= 1024; rows *= 4) {
        double best = 1e9, besta = 1e9;
        for (int it = 0; it < 50; it++) {
            double t0 = now(); epi(c, c, b, 0, rows); double t1 = now(); if (t1 - t0 < best) best = t1 - t0;
            t0 = now(); addonly(c, c, b, 0, rows); t1 = now(); if (t1 - t0 < besta) besta = t1 - t0;
        }
        printf("rows %4d: gelu epilogue %.3f ms (%.2f ns/elem), bias add only %.3f ms\n", rows, best * 1e3, best * 1e9 / (rows * 1536), besta * 1e3);
    }
}
