/*
 * mrt_kernels.h — scalar primitives and CPU reference kernels used by code that modelc generates.
 *
 * The scalar functions (MRT_HD) compile both as C for the CPU path and as CUDA device code, so a
 * fused expression is written once and runs the same way on both. Numerics follow PyTorch eager
 * and are documented in docs/language.md: relu keeps NaN and -0.0, gelu keeps -0.0, max and
 * softmax propagate NaN, softmax subtracts the row maximum before exp (field cases B09, B13).
 *
 * The reduction kernels take a tensor viewed as [outer, n, inner] around the reduced axis
 * (n = size of the axis, inner = product of the dims after it), C order, float32 unless named.
 * Indices are int64 everywhere (field case B12).
 */
#ifndef MRT_KERNELS_H
#define MRT_KERNELS_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define MRT_HD static __host__ __device__ __forceinline__
#else
#define MRT_HD static inline
#endif

MRT_HD float mrt_relu(float x) { return x < 0.0f ? 0.0f : x; }
MRT_HD float mrt_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
/* gelu, erf form: x/2 * (1 + erf(x/sqrt(2))) */
MRT_HD float mrt_gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f)); }
/* gelu, tanh approximation: x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))) */
MRT_HD float mrt_gelu_tanh(float x) {
    return 0.5f * x * (1.0f + tanhf(0.79788456080286535588f * (x + 0.044715f * x * x * x)));
}
/* NaN-propagating maximum: once NaN, stays NaN. */
MRT_HD float mrt_maxf(float m, float v) { return (v > m || v != v) ? v : m; }

#ifndef __CUDACC__
/* y = softmax(x) (or log_softmax when log != 0) along the middle axis of [outer, n, inner]. */
static inline void mrt_softmax_f32(float *y, const float *x, int64_t outer, int64_t n, int64_t inner, int log) {
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t i = 0; i < inner; i++) {
            const float *xr = x + o * n * inner + i;
            float *yr = y + o * n * inner + i;
            float m = -INFINITY;
            for (int64_t j = 0; j < n; j++) m = mrt_maxf(m, xr[j * inner]);
            if (m == -INFINITY) m = 0.0f; /* an all -inf row: exp(-inf - 0) = 0, sum 0 -> NaN as in PyTorch */
            float s = 0.0f;
            for (int64_t j = 0; j < n; j++) s += expf(xr[j * inner] - m);
            if (log) {
                float ls = logf(s);
                for (int64_t j = 0; j < n; j++) yr[j * inner] = xr[j * inner] - m - ls;
            } else {
                float r = 1.0f / s;
                for (int64_t j = 0; j < n; j++) yr[j * inner] = expf(xr[j * inner] - m) * r;
            }
        }
    }
}

/* y[o, i] = sum (or mean when mean != 0) over j of x[o, j, i]; accumulates in double. */
static inline void mrt_sum_f32(float *y, const float *x, int64_t outer, int64_t n, int64_t inner, int mean) {
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double s = 0.0;
            const float *xr = x + o * n * inner + i;
            for (int64_t j = 0; j < n; j++) s += xr[j * inner];
            y[o * inner + i] = (float)(mean ? s / (double)n : s);
        }
}

/* y[o, i] = max over j of x[o, j, i], NaN-propagating. */
static inline void mrt_max_f32(float *y, const float *x, int64_t outer, int64_t n, int64_t inner) {
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const float *xr = x + o * n * inner + i;
            float m = xr[0];
            for (int64_t j = 1; j < n; j++) m = mrt_maxf(m, xr[j * inner]);
            y[o * inner + i] = m;
        }
}

/* y[o, i] = index of the first maximum over j of x[o, j, i] (a NaN counts as the maximum, as in
 * PyTorch), int64. */
static inline void mrt_argmax_f32(int64_t *y, const float *x, int64_t outer, int64_t n, int64_t inner) {
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const float *xr = x + o * n * inner + i;
            float m = xr[0];
            int64_t k = 0;
            for (int64_t j = 1; j < n && m == m; j++) {
                float v = xr[j * inner];
                if (v > m || v != v) {
                    m = v;
                    k = j;
                }
            }
            y[o * inner + i] = k;
        }
}
#endif /* !__CUDACC__ */

#endif /* MRT_KERNELS_H */
