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
#include <stdlib.h>
#include <string.h>
#ifndef __CUDACC__
#include "modelrt.h"
#endif

/* MRT_PRAGMA(omp ...): an OpenMP directive where the code is compiled with OpenMP (-fopenmp,
 * which modelc and the runtime use: one pool, the OpenMP runtime's, runs every loop and every
 * GEMM, as in PyTorch's ATen), and nothing elsewhere (nvcc's host pass, a build without it), so
 * no unknown-pragma warning. Every split loop writes disjoint outputs and keeps each output's
 * arithmetic in one thread, in the serial order: results do not depend on the thread count. */
#ifdef _OPENMP
#define MRT_PRAGMA(x) _Pragma(#x)
#else
#define MRT_PRAGMA(x)
#endif
/* The fewest scalar operations a loop needs before it is split over the threads. A parallel
 * region costs 0.3 us when the team's threads are spinning, 7 us when they must be woken
 * (OMP_WAIT_POLICY=passive, or after libgomp's spin), and a scheduler time slice (ms) when one of
 * them waits for a core another process holds. On the 2-core VM, an add-and-relu over n floats
 * took 7.4 us on one thread and 3.9 on two at n = 64K: a gain below one wake-up; at 128K, 16 and
 * 8.7 us (docs/runtime.md, "Small kernels run on one thread"). */
#define MRT_PAR_MIN 131072

#ifdef __CUDACC__
#define MRT_HD static __host__ __device__ __forceinline__
#else
#define MRT_HD static inline
#endif
/* What the elementwise loops call (mrt_tanhf, mrt_erff and their gelus, and each fused kernel's
 * generated NAME_kN_expr): always inlined, since GCC leaves a call where the callee grew large (an
 * expr with mrt_erff inlined: ConvNeXt's GEMM epilogue ran per element, slower than libm's erff)
 * or a loop uses several, and a call stops the vectorizer. */
#ifdef __CUDACC__
#define MRT_HD_INLINE MRT_HD
#else
#define MRT_HD_INLINE static inline __attribute__((always_inline))
#endif

/* MRT_SIMD_V4: 1 where generated code may hold x86-64-v4 (AVX-512) and x86-64-v3 (AVX2 + FMA)
 * copies of its elementwise kernels, built with MRT_TARGET_V4 and MRT_TARGET_V3 and called where
 * mrt_cpu_simd_avx512() and mrt_cpu_simd_avx2() say so (modelrt.h): GCC on x86-64 (clang and
 * nvcc's host pass build the one portable copy). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#define MRT_SIMD_V4 1
#define MRT_TARGET_V4 __attribute__((target("arch=x86-64-v4")))
#define MRT_TARGET_V3 __attribute__((target("arch=x86-64-v3")))
#else
#define MRT_SIMD_V4 0
#define MRT_TARGET_V4
#define MRT_TARGET_V3
#endif

MRT_HD float mrt_relu(float x) { return x < 0.0f ? 0.0f : x; }
MRT_HD float mrt_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
/* x * sigmoid(x), as x / (1 + e^-x): silu(-0.0) is -0.0, silu(-inf) is NaN, as in PyTorch. */
MRT_HD float mrt_silu(float x) { return x / (1.0f + expf(-x)); }
/* clamp / hardtanh / relu6: NaN passes through (no comparison holds), as in PyTorch. */
MRT_HD float mrt_clamp(float x, float lo, float hi) { return x < lo ? lo : x > hi ? hi : x; }
MRT_HD float mrt_leaky_relu(float x, float slope) { return x > 0.0f ? x : x * slope; }
MRT_HD float mrt_elu(float x, float alpha) { return x > 0.0f ? x : alpha * expm1f(x); }
/* PyTorch's softplus: x where beta x exceeds the threshold, else log1p(e^(beta x)) / beta. */
MRT_HD float mrt_softplus(float x, float beta, float threshold) {
    return x * beta > threshold ? x : log1pf(expf(x * beta)) / beta;
}
/* hardswish and hardsigmoid piecewise, as PyTorch computes them (hardswish(-inf) is 0). */
MRT_HD float mrt_hardswish(float x) { return x <= -3.0f ? 0.0f : x >= 3.0f ? x : x * (x + 3.0f) / 6.0f; }
MRT_HD float mrt_hardsigmoid(float x) { return x <= -3.0f ? 0.0f : x >= 3.0f ? 1.0f : x / 6.0f + 0.5f; }
/* minimum / maximum of two tensors: a NaN in either gives NaN (torch.minimum, torch.maximum). */
MRT_HD float mrt_minimum(float a, float b) { return a != a ? a : b != b ? b : a < b ? a : b; }
MRT_HD float mrt_maximum(float a, float b) { return a != a ? a : b != b ? b : a > b ? a : b; }
/* a // b and a % b of floats, as PyTorch computes them (c10's div_floor_floating, and
 * remainder: the sign of b): b = 0 gives a / b (inf or NaN) and fmod's NaN. */
MRT_HD float mrt_floordiv(float a, float b) {
    if (b == 0.0f) return a / b;
    float mod = fmodf(a, b), div = (a - mod) / b;
    if (mod != 0.0f && (b < 0.0f) != (mod < 0.0f)) div -= 1.0f;
    if (div == 0.0f) return copysignf(0.0f, a / b);
    float fl = floorf(div);
    return div - fl > 0.5f ? fl + 1.0f : fl;
}
MRT_HD float mrt_remainder(float a, float b) {
    float mod = fmodf(a, b);
    return mod != 0.0f && (b < 0.0f) != (mod < 0.0f) ? mod + b : mod;
}
/* a // b and a % b of integers, Python's rules (the quotient rounds toward -inf, the remainder
 * has b's sign); MIN // -1 wraps to MIN (no SIGFPE), and b = 0 gives 0 and sets *fault to 1
 * (fault may be NULL where b is a nonzero constant), which the generated kernel reports as a
 * failed run naming its node. */
#define MRT_INT_DIV(N, T)                                                                    \
    MRT_HD T mrt_floordiv_##N(T a, T b, int *fault) {                                         \
        if (b == 0) return (T)(fault ? (*fault = 1, 0) : 0);                                 \
        if (b == -1) return (T)(0 - (u##T)a);                                                \
        T q = a / b;                                                                         \
        return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;                             \
    }                                                                                        \
    MRT_HD T mrt_remainder_##N(T a, T b, int *fault) {                                        \
        if (b == 0) return (T)(fault ? (*fault = 1, 0) : 0);                                 \
        if (b == -1) return 0;                                                               \
        T r = a % b;                                                                         \
        return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;                                 \
    }
MRT_INT_DIV(i32, int32_t)
MRT_INT_DIV(i64, int64_t)
#undef MRT_INT_DIV
/* float to integer, defined for every float: truncation toward zero, NaN gives 0, values
 * beyond the range saturate (C leaves both undefined; PyTorch's result there is the CPU's). */
MRT_HD int32_t mrt_f32_to_i32(float x) {
    return x != x ? 0 : x >= 2147483648.0f ? INT32_MAX : x <= -2147483648.0f ? INT32_MIN : (int32_t)x;
}
MRT_HD int64_t mrt_f32_to_i64(float x) {
    return x != x ? 0 : x >= 9223372036854775808.0f ? INT64_MAX : x <= -9223372036854775808.0f ? INT64_MIN : (int64_t)x;
}
/* f16 (IEEE binary16: 1 sign, 5 exponent, 10 fraction bits) and bf16 (bfloat16: the top 16
 * bits of an f32) are stored as uint16_t and computed in float. The conversions are plain bit
 * manipulation, the same code on the CPU and in CUDA kernels, so both round alike: to nearest,
 * ties to even; f16 overflows to inf from 65520 on and has subnormals down to 2^-24; a NaN stays
 * a NaN of the same sign, made quiet, with the top bits of its payload. f16 and bf16 to f32 are
 * exact. tests/runtime/test_half.c checks every 16-bit pattern and a sample of floats. */
MRT_HD float mrt_f32_from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
MRT_HD uint32_t mrt_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
MRT_HD float mrt_f16_to_f32(uint16_t h) {
    uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) return mrt_f32_from_bits(s | 0x7f800000u | (m << 13)); /* inf, NaN */
    if (e == 0) {
        if (m == 0) return mrt_f32_from_bits(s); /* +-0 */
        e = 113; /* a subnormal m * 2^-24: normalize */
        while (!(m & 0x400u)) { m <<= 1; e--; }
        return mrt_f32_from_bits(s | (e << 23) | ((m & 0x3ffu) << 13));
    }
    return mrt_f32_from_bits(s | ((e + 112) << 23) | (m << 13));
}
MRT_HD uint16_t mrt_f16_from_f32(float f) {
    uint32_t u = mrt_f32_bits(f), s = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(s | 0x7e00u | ((a >> 13) & 0x3ffu)); /* NaN, quiet */
    if (a >= 0x477ff000u) return (uint16_t)(s | 0x7c00u);                        /* >= 65520: inf */
    if (a < 0x38800000u) { /* below 2^-14: a subnormal m * 2^-24, or zero */
        uint32_t e = a >> 23;
        if (e < 102) return (uint16_t)s; /* below 2^-25: rounds to 0 */
        uint32_t m = (a & 0x7fffffu) | 0x800000u, sh = 126 - e, r = m >> sh, rem = m & ((1u << sh) - 1), half = 1u << (sh - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(s | r);
    }
    uint32_t r = (a >> 13) - (112u << 10), rem = a & 0x1fffu; /* rebias the exponent */
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1))) r++; /* a carry moves into the exponent */
    return (uint16_t)(s | r);
}
MRT_HD float mrt_bf16_to_f32(uint16_t h) { return mrt_f32_from_bits((uint32_t)h << 16); }
MRT_HD uint16_t mrt_bf16_from_f32(float f) {
    uint32_t u = mrt_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* NaN, quiet */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);               /* overflows to inf */
}
/* x rounded to the nearest f16 / bf16 value, as a float: what an f16 or bf16 node holds. */
MRT_HD float mrt_f16_round(float x) { return mrt_f16_to_f32(mrt_f16_from_f32(x)); }
MRT_HD float mrt_bf16_round(float x) { return mrt_bf16_to_f32(mrt_bf16_from_f32(x)); }
/* An integer as a float rounded to odd (truncated to 24 bits, the last set if any bit was lost):
 * rounding that to f16 or bf16 is then the correct rounding of the integer (round-to-odd with
 * two spare bits makes the second rounding the only one); a plain (float)v could round twice. */
MRT_HD float mrt_i64_to_f32_odd(int64_t v) {
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    uint32_t sh = 0;
    while (u >= (UINT64_C(1) << 24)) { u = (u >> 1) | (u & 1); sh++; }
    float f = (float)u * mrt_f32_from_bits((127u + sh) << 23); /* exact: a power of two */
    return v < 0 ? -f : f;
}
/* MRT_FMAF(a, b, c): a * b + c rounded once (C's fmaf), for the polynomial steps of mrt_exp_reduced,
 * mrt_tanhf and mrt_erff. fmaf is correctly rounded wherever it runs (an FMA instruction on x86
 * with FMA, aarch64 and CUDA; glibc's exact emulation elsewhere), so these functions give the
 * same bits on every path while the code stays -ffp-contract=off (no contraction of a * b + c
 * written out). GCC inlines it as one instruction where the target has FMA: the x86-64-v3 and v4
 * copies of the generated loops (MRT_TARGET_V3, MRT_TARGET_V4), aarch64, -march=native; in the
 * x86-64 baseline it is a call of libm's fmaf, which does not vectorize: exact gelu there costs
 * 32 ns an element instead of 3.2 without fmaf (bench/gelu.c), so kprint.c's twins and
 * mrt_cpu_gelu_f32 leave that path to CPUs without AVX2 and FMA, and to MODELRT_SIMD=portable. */
#define MRT_FMAF(a, b, c) fmaf((a), (b), (c))
/* e^y in float for |y| < 87 (no overflow, underflow or NaN handling: the callers clamp), as
 * 2^n e^r: n = rint(y / ln2) by the 1.5 * 2^23 trick, r = y - n ln2 by Cody-Waite (ln2 = hi + lo,
 * hi of 16 bits so n hi and y - n hi are exact; n lo subtracted by one fma), |r| <= ln2/2, then
 * e^r = 1 + r P(r) with P of degree 5 by Horner in fmaf (near Taylor's 1, 1/2, ..., 1/720, fitted
 * for relative error: weighted least squares toward minimax, Lawson's iteration, on 2000 Chebyshev
 * nodes in float64 with NumPy and mpmath, coefficients rounded to float one at a time with the
 * rest re-fitted; relative error 0.05 ulp before rounding; tools/fit_mrt_poly.py). Branch-free,
 * so that the loops of mrt_tanhf and mrt_erff vectorize. */
MRT_HD_INLINE float mrt_exp_reduced(float y) {
    float nf = MRT_FMAF(y, 1.44269504088896341f, 12582912.0f) - 12582912.0f; /* rint(y / ln2), |y| < 2^22 */
    float r = MRT_FMAF(nf, -1.428606765330187e-06f, y - nf * 0.693145751953125f);
    float p = MRT_FMAF(MRT_FMAF(MRT_FMAF(MRT_FMAF(MRT_FMAF(MRT_FMAF(0.0013821024f, r, 0.008368669f), r, 0.041668262f), r,
                                                 0.16666521f), r, 0.49999994f), r, 1.0f), r, 1.0f);
    return p * mrt_f32_from_bits((uint32_t)((int32_t)nf + 127) << 23);
}
/* e^d in float for softmax's d = x - max: d <= 0, -inf or NaN (d > 0 is outside its domain). The
 * algorithm and coefficients are Cephes' expf (S. L. Moshier, Cephes Math Library 2.2, expf.c;
 * also Pommier's sse_mathfun and avx_mathfun): n = rint(d / ln2) by the 1.5 * 2^23 trick,
 * r = d - n ln2 in two parts (Cody-Waite, C1 = 0.693359375 exact in 9 bits so n * C1 is exact,
 * C2 = -2.12194440e-4), e^r = 1 + r + r^2 P(r) with P of degree 5 (|r| <= ln2 / 2), Horner's
 * steps, the reduction and the rint as fused multiply-adds (fmaf: one rounding each; an FMA
 * instruction on the CPUs the runtime's fast paths run on, and on CUDA). 2^n is applied as
 * 2^(n+64) then 2^-64, so that the subnormal results (d down to -103.97) are rounded once, like
 * libm's; d < -104 (e^d below half the least subnormal) and -inf give 0, NaN stays NaN. Every
 * other operation is a separate IEEE multiply, add or select (the code is built with
 * -ffp-contract=off): rt_rows.c's AVX-512 softmax repeats this sequence lane by lane with FMA
 * instructions, so both give the same bits. Over every float in [-104, 0] (checked exhaustively
 * against exp in double) it is at most 1.0103 ulp from exp (at d = -5.87788; the same sequence
 * without FMA: 0.982; glibc's expf: 0.502), subnormal results at most 0.7503 steps, and it differs
 * from expf on 0.81% of them; tests/runtime/test_rows.c checks a sample (<= 1.02 ulp). */
MRT_HD_INLINE float mrt_exp_nonpos(float d) {
    const float c = d >= -104.0f ? d : -104.0f; /* NaN and -inf: -104 here, selected below */
    const float nf = fmaf(c, 1.44269504088896341f, 12582912.0f) - 12582912.0f;
    const float r = fmaf(-nf, -2.12194440e-4f, fmaf(-nf, 0.693359375f, c));
    const float z = r * r;
    const float p = fmaf(fmaf(fmaf(fmaf(fmaf(fmaf(1.9875691500e-4f, r, 1.3981999507e-3f), r, 8.3334519073e-3f), r,
                                        4.1665795894e-2f), r, 1.6666665459e-1f), r, 5.0000001201e-1f), z, r) + 1.0f;
    const float e = (p * mrt_f32_from_bits((uint32_t)((int32_t)nf + 191) << 23)) * 5.42101086242752217e-20f; /* 2^-64 */
    return d != d ? d : d >= -104.0f ? e : 0.0f;
}
/* tanh(x) in float, branch-free so that a loop of it vectorizes (libm's tanhf is a call, and
 * gelu's tanh was a fifth of GPT-2's inference and half its training step); the CPU and the CUDA
 * kernels both use it, so they agree. |x| < 0.625: x + x^3 Q(x^2), Q of degree 4 fitted to
 * tanh(x)/x (relative error 4.4e-9 before rounding), by Horner in fmaf, x added by the last fma;
 * otherwise, with e = e^(2|x|) by mrt_exp_reduced and |x| clamped at 10 (tanh(10) rounds to 1),
 * 1 - 2 / (e + 1), the sign of x put back. Every step of that is monotonic in e and e in |x|, so
 * tanh is monotonic, as libm's is (a form (e - 1) / (e + 1) below 0.9 was 0.12 ulp more accurate
 * but went down by an ulp at 74,677 floats in [0.625, 0.693]: the review of 2026-12-05). Tested
 * over every float (tests/runtime/test_tanh.c, a sample in make test, which also checks it is
 * monotonic): at most 1.362 ulp from tanh in double, at x = 0.6300 (glibc's tanhf: 1 ulp); odd,
 * tanh(-0) = -0, tanh(+-inf) = +-1, NaN stays NaN. The selects are bit operations because a float
 * conditional would be if-converted into a branch that stops the vectorizer. */
MRT_HD_INLINE float mrt_tanhf(float x) {
    float a = fabsf(x), t = x * x;
    float q = MRT_FMAF(MRT_FMAF(MRT_FMAF(MRT_FMAF(-0.005704973917797426f, t, 0.020639074438955796f), t,
                                        -0.05373971063626483f), t, 0.13331442134305557f), t, -0.33333281938910875f);
    float small = MRT_FMAF(x * t, q, x);
    uint32_t ab = mrt_f32_bits(a) < 0x41200000u ? mrt_f32_bits(a) : 0x41200000u; /* min(|x|, 10); NaN: below */
    float e = mrt_exp_reduced(2.0f * mrt_f32_from_bits(ab));
    float big = 1.0f - 2.0f / (e + 1.0f); /* each step monotonic in e, so tanh is (not (e - 1) / (e + 1)) */
    uint32_t m = 0u - (uint32_t)(a < 0.625f), nan = 0u - (uint32_t)(x != x);
    uint32_t v = (((mrt_f32_bits(small) & m) | (mrt_f32_bits(big) & ~m)) & 0x7fffffffu) | (mrt_f32_bits(x) & 0x80000000u);
    return mrt_f32_from_bits((mrt_f32_bits(x) & nan) | (v & ~nan));
}
/* erf(x) in float, branch-free (libm's erff is a call of 20-30 ns; exact gelu, BERT's and ViT's
 * and ConvNeXt's, spent a third of ConvNeXt-Tiny's time in it); the CPU and the CUDA kernels both
 * use it. |x| < 0.875: x + x P(x^2), P of degree 6 fitted to erf(x)/x - 1 (relative error 2.2e-10
 * before rounding), by Horner in fmaf, x added exactly by the last fma (the rounding stays near
 * half an ulp); otherwise erf(|x|) = 1 - e^(Q(t)), t = |x| clamped to [0.875, 4] (erf rounds to 1
 * from 3.92; NaN: 4), Q of degree 6 fitted to log(erfc(t)) weighted by erfc(t) (the error it makes
 * in erf: at most 0.03 ulp of erf before rounding), by Horner in fmaf, e^Q by mrt_exp_reduced (one
 * exp, no division), the sign of x put back. Q's fit: weighted least squares toward minimax
 * (Lawson's iteration) on 3000 Chebyshev nodes, log(erfc) from mpmath, coefficients rounded to
 * float one at a time with the rest re-fitted (tools/fit_mrt_poly.py); P's: least squares on
 * Chebyshev nodes in float64 (NumPy). Tested over every float (tests/runtime/test_tanh.c, a sample
 * in make test): at most 1.111 ulp from erf in double, at x = 0.8755 (1.157 before the fmaf steps
 * and the one-exp form; glibc's erff: 1 ulp); odd, erf(-0) = -0,
 * erf(+-inf) = +-1, NaN stays NaN. */
MRT_HD_INLINE float mrt_erff(float x) {
    float a = fabsf(x), s = x * x;
    float p = MRT_FMAF(MRT_FMAF(MRT_FMAF(MRT_FMAF(MRT_FMAF(MRT_FMAF(8.71399924e-05f, s, -0.000822050584f), s,
                                                          0.00520762059f), s, -0.0268619684f), s, 0.11283741f), s,
                                -0.376126367f), s, 0.128379167f);
    float small = MRT_FMAF(x, p, x);
    uint32_t ab = mrt_f32_bits(a) < 0x40800000u ? mrt_f32_bits(a) : 0x40800000u; /* min(|x|, 4); NaN: 4 */
    ab = ab > 0x3f600000u ? ab : 0x3f600000u;                                   /* max(., 0.875) */
    float t = mrt_f32_from_bits(ab);
    float q = MRT_FMAF(MRT_FMAF(MRT_FMAF(MRT_FMAF(MRT_FMAF(MRT_FMAF(0.00019991556f, t, -0.0030820982f), t, 0.022381324f), t,
                                                 -0.10425063f), t, -0.6368203f), t, -1.1278895f), t, -0.00014419337f);
    float big = 1.0f - mrt_exp_reduced(q);
    uint32_t m = 0u - (uint32_t)(a < 0.875f), nan = 0u - (uint32_t)(x != x);
    uint32_t w = (mrt_f32_bits(small) & m) | (((mrt_f32_bits(big) & 0x7fffffffu) | (mrt_f32_bits(x) & 0x80000000u)) & ~m);
    return mrt_f32_from_bits((mrt_f32_bits(x) & nan) | (w & ~nan));
}
/* gelu, erf form: x/2 * (1 + erf(x/sqrt(2))) */
MRT_HD_INLINE float mrt_gelu(float x) { return 0.5f * x * (1.0f + mrt_erff(x * 0.70710678118654752440f)); }
/* gelu, tanh approximation: x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))) */
MRT_HD_INLINE float mrt_gelu_tanh(float x) {
    return 0.5f * x * (1.0f + mrt_tanhf(0.79788456080286535588f * (x + 0.044715f * x * x * x)));
}
/* The epilogue of mrt_gemm_bias_act_f32 on one element v of column c: v + bias[c] (bias NULL:
 * none, v kept as is, -0.0 included), then act 0 (none), 1 (relu) or 2 (gelu, tanh form), in
 * float as cuBLASLt's epilogues. The CPU path and the CUDA fallback kernel (when cuBLASLt has no
 * algorithm) both call it. */
MRT_HD float mrt_bias_act(float v, const float *bias, int64_t c, int act) {
    if (bias)
        v += bias[c];
    return act == 1 ? mrt_relu(v) : act == 2 ? mrt_gelu_tanh(v) : v;
}
/* NaN-propagating maximum: once NaN, stays NaN. */
MRT_HD float mrt_maxf(float m, float v) { return (v > m || v != v) ? v : m; }

/* ---------------------------------------------------------------- interpolate
 *
 * PyTorch's coordinate rules for upsample_nearest2d and upsample_bilinear2d (CPU,
 * aten/src/ATen/native/UpSample.h), in float as PyTorch computes them, so that a source index
 * that lands on a boundary is the same one: the scale is (in-1)/(out-1) with align_corners, else
 * 1/scale_factor when a scale_factor was given (sf > 0), else in/out. The products are rounded
 * before the additions on CUDA too (__fmul_rn: nvcc would contract them into an fma). */
#ifdef __CUDA_ARCH__
#define MRT_FMUL(a, b) __fmul_rn((a), (b))
#else
#define MRT_FMUL(a, b) ((a) * (b))
#endif
MRT_HD float mrt_interp_scale(int64_t in, int64_t out, int align_corners, double sf) {
    if (align_corners) return out > 1 ? (float)(in - 1) / (float)(out - 1) : 0.0f;
    return sf > 0 ? (float)(1.0 / sf) : (float)in / (float)out;
}
/* nearest: floor(d * scale), at most in - 1; out == in and out == 2 in are exact shortcuts
 * (PyTorch's CPU nearest_idx: they decide when the scale_factor is not in/out). */
MRT_HD int64_t mrt_nearest_src(float scale, int64_t d, int64_t in, int64_t out) {
    if (out == in) return d;
    if (out == 2 * in) return d >> 1;
    int64_t s = (int64_t)floorf(MRT_FMUL((float)d, scale));
    return s < in - 1 ? s : in - 1;
}
/* bilinear along one axis: the source taps i0, i1 (= i0 at the last row) and the weight l1 of
 * i1 (i0 has 1 - l1). Without align_corners the source is scale * (d + 0.5) - 0.5, clamped at 0;
 * out == in copies (PyTorch's compute_source_index_and_lambda: it decides when a scale_factor
 * gives out == in with a scale other than 1). */
MRT_HD void mrt_linear_src(float scale, int64_t d, int align_corners, int64_t in, int64_t out, int64_t *i0,
                           int64_t *i1, float *l1) {
    if (out == in) {
        *i0 = *i1 = d;
        *l1 = 0.0f;
        return;
    }
    float src = align_corners ? MRT_FMUL(scale, (float)d) : MRT_FMUL(scale, (float)d + 0.5f) - 0.5f;
    if (!align_corners && src < 0.0f) src = 0.0f;
    int64_t i = (int64_t)floorf(src);
    if (i > in - 1) i = in - 1;
    float l = src - (float)i;
    *i0 = i;
    *i1 = i + (i < in - 1 ? 1 : 0);
    *l1 = l < 0.0f ? 0.0f : l > 1.0f ? 1.0f : l;
}
/* One output element of interpolate on a plane xp [H, W]. */
MRT_HD float mrt_interp2d_at(const float *xp, int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t oh, int64_t ow,
                             int bilinear, int align_corners, float sh, float sw) {
    if (!bilinear) return xp[mrt_nearest_src(sh, oh, H, OH) * W + mrt_nearest_src(sw, ow, W, OW)];
    int64_t h0, h1, w0, w1;
    float lh, lw;
    mrt_linear_src(sh, oh, align_corners, H, OH, &h0, &h1, &lh);
    mrt_linear_src(sw, ow, align_corners, W, OW, &w0, &w1, &lw);
    const float *r0 = xp + h0 * W, *r1 = xp + h1 * W;
    return (1.0f - lh) * ((1.0f - lw) * r0[w0] + lw * r0[w1]) + lh * ((1.0f - lw) * r1[w0] + lw * r1[w1]);
}

/* interpolate's backward (training) along one axis: the source taps of output row (or column) d,
 * i[0..n), with their weights l[0..n): nearest one tap of weight 1, bilinear two, i0 with 1 - l1
 * and i1 with l1 (the forward's coordinates). Returns n. */
MRT_HD int mrt_interp_taps(float scale, int64_t d, int bilinear, int align_corners, int64_t in, int64_t out,
                           int64_t *i, float *l) {
    if (!bilinear) {
        i[0] = mrt_nearest_src(scale, d, in, out);
        l[0] = 1.0f;
        return 1;
    }
    mrt_linear_src(scale, d, align_corners, in, out, &i[0], &i[1], &l[1]);
    l[0] = 1.0f - l[1];
    return 2;
}
/* The first output row d in [0, out) whose first tap is >= v (out if none). The first tap is
 * non-decreasing in d (a floor of a product with a positive scale, rounded monotonically), and
 * the second is the first or the next: the rows that read source row s are those between the
 * first whose first tap is >= s - 1 (bilinear; s for nearest) and the first whose first tap
 * is > s. A binary search, for the CUDA kernel's gather. */
MRT_HD int64_t mrt_interp_first(float scale, int bilinear, int align_corners, int64_t in, int64_t out, int64_t v) {
    int64_t lo = 0, hi = out;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        int64_t i[2];
        float l[2];
        mrt_interp_taps(scale, mid, bilinear, align_corners, in, out, i, l);
        if (i[0] >= v) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

/* ---------------------------------------------------------------- optimizers
 *
 * One element of torch.optim's single-tensor updates, in f32 with PyTorch's operation order (the
 * scalars as PyTorch turns its Python floats into f32 for f32 tensors), shared by the CPU loop
 * and the CUDA kernel. mrt_opt_args holds the step's scalars, computed once per step on the
 * host (mrt_opt_args_for). */
typedef struct mrt_opt_args {
    int kind;            /* 0 SGD, 1 Adam, 2 AdamW */
    float lr, weight_decay, momentum, dampening_w; /* dampening_w = 1 - dampening */
    int nesterov, first; /* first: the SGD momentum buffer is empty (step 1) */
    float b1w, b2, b2w;  /* 1 - beta1, beta2, 1 - beta2 */
    float neg_step_size; /* -lr / (1 - beta1^step) */
    float bc2_sqrt;      /* sqrt(1 - beta2^step) */
    float eps, decay;    /* decay = 1 - lr * weight_decay (AdamW) */
    float grad_scale;    /* each gradient is multiplied by it first: clip_grad_norm_'s clamped
                            coefficient (1 when not clipping, as PyTorch multiplies then too) */
} mrt_opt_args;

/* One tensor of a multi-tensor optimizer step: param p, its gradient g, its state s0, s1 (NULL
 * where the optimizer keeps none), n elements, all on one device. */
typedef struct mrt_opt_tensor {
    float *p;
    const float *g;
    float *s0, *s1;
    int64_t n;
} mrt_opt_tensor;

#define MRT_OPT_CHUNK 48 /* tensors per CUDA launch: 48 * 40 bytes + the scalars fit the 4 KiB of kernel parameters */

/* p (the param), g (its gradient), s0, s1 (its state: SGD's momentum buffer; Adam's exp_avg and
 * exp_avg_sq) at one index. */
MRT_HD void mrt_opt_elem(const mrt_opt_args *a, float *p, float g, float *s0, float *s1) {
    g = g * a->grad_scale; /* torch._foreach_mul_(grads, clip_coef_clamped) */
    if (a->kind == 0) {
        if (a->weight_decay != 0) g = g + a->weight_decay * *p;
        if (a->momentum != 0) {
            float b = a->first ? g : *s0 * a->momentum + a->dampening_w * g;
            *s0 = b;
            g = a->nesterov ? g + a->momentum * b : b;
        }
        *p = *p + (-a->lr) * g;
        return;
    }
    if (a->kind == 2) *p = *p * a->decay;
    else if (a->weight_decay != 0) g = g + a->weight_decay * *p;
    float m = *s0;
    m = a->b1w < 0.5f ? m + a->b1w * (g - m) : g - (g - m) * (1 - a->b1w); /* exp_avg.lerp_(grad, 1 - beta1) */
    *s0 = m;
    float v = *s1 * a->b2 + a->b2w * g * g; /* exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2) */
    *s1 = v;
    float denom = sqrtf(v) / a->bc2_sqrt + a->eps;
    *p = *p + a->neg_step_size * m / denom; /* param.addcdiv_(exp_avg, denom, value=-step_size) */
}

/* Pooling gradients (training): shared by the CPU kernels below and the CUDA kernels. */
/* The index ih*W + iw of the element max pooling output (oh, ow) takes in plane xp[H, W],
 * PyTorch's rule: the window's taps in row-major order, the first strictly greater value (or
 * any NaN, the last of them) wins, starting from the first tap inside the input; -1 when no tap
 * is inside. */
MRT_HD int64_t mrt_maxpool2d_argmax(const float *xp, int64_t H, int64_t W, int64_t oh, int64_t ow, int kh, int kw,
                                    int sh, int sw, int pt, int pl, int dh, int dw) {
    int64_t ih0 = oh * sh - pt, iw0 = ow * sw - pl;
    int64_t ih1 = ih0 + (int64_t)(kh - 1) * dh + 1, iw1 = iw0 + (int64_t)(kw - 1) * dw + 1;
    if (ih1 > H) ih1 = H;
    if (iw1 > W) iw1 = W;
    while (ih0 < 0) ih0 += dh;
    while (iw0 < 0) iw0 += dw;
    if (ih0 >= ih1 || iw0 >= iw1) return -1;
    int64_t best = ih0 * W + iw0;
    float m = -INFINITY;
    for (int64_t ih = ih0; ih < ih1; ih += dh)
        for (int64_t iw = iw0; iw < iw1; iw += dw) {
            const float v = xp[ih * W + iw];
            if (v > m || v != v) {
                m = v;
                best = ih * W + iw;
            }
        }
    return best;
}

/* The divisor of average pooling output (oh, ow), as mrt_avgpool2d_f32 computes it. */
MRT_HD int64_t mrt_avgpool2d_count(int64_t H, int64_t W, int64_t oh, int64_t ow, int kh, int kw, int sh, int sw, int pt,
                                   int pl, int pb, int pr, int count_include_pad) {
    const int64_t h0 = oh * sh - pt, w0 = ow * sw - pl, h1 = h0 + kh, w1 = w0 + kw;
    if (count_include_pad) {
        const int64_t ph0 = h0 < -pt ? -pt : h0, ph1 = h1 > H + pb ? H + pb : h1;
        const int64_t pw0 = w0 < -pl ? -pl : w0, pw1 = w1 > W + pr ? W + pr : w1;
        return (ph1 - ph0) * (pw1 - pw0);
    }
    const int64_t ih0 = h0 < 0 ? 0 : h0, ih1 = h1 > H ? H : h1, iw0 = w0 < 0 ? 0 : w0, iw1 = w1 > W ? W : w1;
    return (ih1 - ih0) * (iw1 - iw0);
}

/* ---------------------------------------------------------------- dropout's generator (training) */

/* Philox4x32-10 (Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as easy as 1, 2, 3",
 * SC 2011; Random123's philox4x32 with 10 rounds, as cuRAND and PyTorch's CUDA generator use):
 * the 4 words of counter c under the key (k0, k1) into out. */
MRT_HD void mrt_philox4x32_10(uint32_t out[4], const uint32_t c[4], uint32_t k0, uint32_t k1) {
    uint32_t x0 = c[0], x1 = c[1], x2 = c[2], x3 = c[3];
    for (int r = 0; r < 10; r++) {
        if (r) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        const uint64_t p0 = (uint64_t)0xD2511F53u * x0, p1 = (uint64_t)0xCD9E8D57u * x2;
        const uint32_t h0 = (uint32_t)(p0 >> 32), l0 = (uint32_t)p0, h1 = (uint32_t)(p1 >> 32), l1 = (uint32_t)p1;
        x0 = h1 ^ x1 ^ k0;
        x1 = l1;
        x2 = h0 ^ x3 ^ k1;
        x3 = l0;
    }
    out[0] = x0, out[1] = x1, out[2] = x2, out[3] = x3;
}

/* Dropout's uniform number of element i in [0, 1) (24 bits): word i % 4 of Philox4x32-10 with
 * the key (seed low, seed high) and the counter (i / 4 low, i / 4 high, step, site), so a mask is
 * a pure function of (seed, step, site, i) on every device. */
MRT_HD float mrt_dropout_uniform(uint64_t seed, uint64_t step, uint32_t site, int64_t i) {
    const uint64_t q = (uint64_t)i >> 2;
    const uint32_t c[4] = {(uint32_t)q, (uint32_t)(q >> 32), (uint32_t)step, site};
    uint32_t r[4];
    mrt_philox4x32_10(r, c, (uint32_t)seed, (uint32_t)(seed >> 32));
    return (float)(r[i & 3] >> 8) * 0x1p-24f;
}

/* Element i of dropout: x kept (times scale = 1 / (1 - p)) where its uniform number is >= p, else 0. */
MRT_HD float mrt_dropout_elem(float x, float p, float scale, uint64_t seed, uint64_t step, uint32_t site, int64_t i) {
    return mrt_dropout_uniform(seed, step, site, i) >= p ? x * scale : 0.0f;
}

#ifndef __CUDACC__
/* y = softmax(x) (or log_softmax when log != 0) along the middle axis of [outer, n, inner].
 * The row sum is accumulated in double. */
/* expf(d) for softmax's d = x - max <= 0 (or NaN): below -104 expf underflows to 0, which glibc
 * reaches through its errno path (__math_uflowf, with_errnof: a fifth of the imported GPT-2's run
 * went there, its masked attention scores being -3.4e38); 0 here directly, the same bits. */
static inline float mrt_softmax_exp(float d) { return d < -104.0f ? 0.0f : expf(d); }

static inline void mrt_softmax_f32(float *y, const float *x, int64_t outer, int64_t n, int64_t inner, int log) {
    if (inner == 1 && !log) { /* along the last axis: rt_rows.c's rows (AVX-512 where the CPU has it) */
        mrt_cpu_softmax_rows_f32(y, x, outer, n, 1, 0, 0);
        return;
    }
    MRT_PRAGMA(omp parallel for collapse(2) schedule(static) if(outer * n * inner >= MRT_PAR_MIN))
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t i = 0; i < inner; i++) {
            const float *xr = x + o * n * inner + i;
            float *yr = y + o * n * inner + i;
            float m = -INFINITY;
            for (int64_t j = 0; j < n; j++) m = mrt_maxf(m, xr[j * inner]);
            if (m == -INFINITY) m = 0.0f; /* an all -inf row: exp(-inf - 0) = 0, sum 0 -> NaN as in PyTorch */
            double sd = 0.0;
            if (log) {
                for (int64_t j = 0; j < n; j++) sd += mrt_softmax_exp(xr[j * inner] - m);
                float ls = logf((float)sd);
                for (int64_t j = 0; j < n; j++) yr[j * inner] = xr[j * inner] - m - ls;
            } else { /* each exp once, kept in y (y may be x: each element is read before it is written) */
                for (int64_t j = 0; j < n; j++) {
                    const float ej = mrt_softmax_exp(xr[j * inner] - m);
                    sd += ej;
                    yr[j * inner] = ej;
                }
                float r = 1.0f / (float)sd;
                for (int64_t j = 0; j < n; j++) yr[j * inner] *= r;
            }
        }
    }
}

/* y[o, i] = sum (or mean when mean != 0) over j of x[o, j, i]; accumulates in double. */
static inline void mrt_sum_f32(float *y, const float *x, int64_t outer, int64_t n, int64_t inner, int mean) {
    MRT_PRAGMA(omp parallel for collapse(2) schedule(static) if(outer * n * inner >= MRT_PAR_MIN))
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
    MRT_PRAGMA(omp parallel for collapse(2) schedule(static) if(outer * n * inner >= MRT_PAR_MIN))
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

/* Softmax along the last axis of [rows, n] as used by attention: rows are [..., L] query rows;
 * with causal, row r (query i = r % L) only sees keys j <= i. With zero_masked_rows, a row
 * whose visible scores are all -inf gives zeros (PyTorch's scaled_dot_product_attention).
 * rt_rows.c computes it (mrt_cpu_softmax_rows_f32: AVX-512 or portable C, the same bits). */
static inline void mrt_softmax_masked_f32(float *y, const float *x, int64_t rows, int64_t n, int64_t L, int causal,
                                          int zero_masked_rows) {
    mrt_cpu_softmax_rows_f32(y, x, rows, n, L, causal, zero_masked_rows);
}

/* Attention in one kernel, out = softmax(scale * q k^T + mask) v (modelc's fused attention):
 * rt_rows.c computes it (mrt_cpu_attention_f32 in modelrt.h: sizes, strides and semantics). */
static inline mrt_status mrt_attention_f32(const mrt_attention_desc *d, float *out, const float *q, const float *k,
                                           const float *v, const float *mask) {
    return mrt_cpu_attention_f32(d, out, q, k, v, mask);
}

/* y[N, O, OH, OW] = conv2d(x[N, C, H, W], w[O, C/groups, KH, KW]) with stride (sh, sw), padding
 * top/left (pt, pl) (bottom/right padding is implied by OH, OW), dilation (dh, dw). Each image
 * and group is one GEMM, w_g [O/g, C/g*KH*KW] @ col [C/g*KH*KW, OH*OW] (mrt_cpu_sgemm), where col is
 * the im2col unfolding of the input (Chellapilla et al., "High Performance Convolutional Neural
 * Networks for Document Processing", 2006), written to `col` (C/g*KH*KW*OH*OW floats). A 1x1,
 * stride-1, unpadded convolution reads x directly (col may be NULL). */
/* col [Cg*KH*KW, OH*OW] = the im2col unfolding of one image's group of Cg channels xg [Cg, H, W]
 * for a convolution with stride (sh, sw), padding top/left (pt, pl), dilation (dh, dw): row
 * (c, kh, kw), column (oh, ow) holds xg[c, oh*sh - pt + kh*dh, ow*sw - pl + kw*dw], 0 outside. */
static inline void mrt_im2col_f32(float *col, const float *xg, int64_t Cg, int64_t H, int64_t W, int KH, int KW,
                                  int64_t OH, int64_t OW, int sh, int sw, int pt, int pl, int dh, int dw) {
    const int64_t P = OH * OW;
    MRT_PRAGMA(omp parallel for collapse(3) schedule(static) if(Cg * KH * KW * P >= MRT_PAR_MIN))
    for (int64_t c = 0; c < Cg; c++)
        for (int kh = 0; kh < KH; kh++)
            for (int kw = 0; kw < KW; kw++) {
                float *row = col + ((c * KH + kh) * KW + kw) * P;
                const float *xc = xg + c * H * W;
                /* output columns whose input column lies inside [0, W): [lo, hi) */
                const int64_t off = (int64_t)kw * dw - pl;
                int64_t lo = off >= 0 ? 0 : (-off + sw - 1) / sw;
                int64_t hi = W - 1 - off < 0 ? 0 : (W - 1 - off) / sw + 1;
                if (lo > OW) lo = OW;
                if (hi > OW) hi = OW;
                if (hi < lo) hi = lo;
                for (int64_t oh = 0; oh < OH; oh++) {
                    const int64_t ih = oh * sh - pt + (int64_t)kh * dh;
                    float *r = row + oh * OW;
                    if (ih < 0 || ih >= H) {
                        memset(r, 0, (size_t)OW * sizeof(float));
                        continue;
                    }
                    const float *xr = xc + ih * W + off;
                    for (int64_t ow = 0; ow < lo; ow++) r[ow] = 0.0f;
                    if (sw == 1)
                        memcpy(r + lo, xr + lo, (size_t)(hi - lo) * sizeof(float));
                    else
                        for (int64_t ow = lo; ow < hi; ow++) r[ow] = xr[ow * sw];
                    for (int64_t ow = hi; ow < OW; ow++) r[ow] = 0.0f;
                }
            }
}

static inline void mrt_conv2d_f32(float *y, const float *x, const float *w, int64_t N, int64_t C, int64_t H, int64_t W,
                                  int64_t O, int KH, int KW, int64_t OH, int64_t OW, int sh, int sw, int pt, int pl, int dh,
                                  int dw, int groups, float *col) {
    const int64_t Cg = C / groups, Og = O / groups, K = Cg * KH * KW, P = OH * OW;
    const int direct = KH == 1 && KW == 1 && sh == 1 && sw == 1 && pt == 0 && pl == 0 && OH == H && OW == W;
    for (int64_t n = 0; n < N; n++) {
        for (int g = 0; g < groups; g++) {
            const float *xg = x + (n * C + (int64_t)g * Cg) * H * W;
            const float *b = xg;
            if (!direct) {
                mrt_im2col_f32(col, xg, Cg, H, W, KH, KW, OH, OW, sh, sw, pt, pl, dh, dw);
                b = col;
            }
            mrt_cpu_sgemm(0, 0, Og, P, K, 1.0f, w + g * Og * K, K, b, P, 0.0f, y + (n * O + g * Og) * P, P);
        }
    }
}

/* conv2d's weight gradient (training): gw[O, C/groups, KH, KW] = sum over n of
 * g_n,grp [O/groups, OH*OW] @ col_n,grp^T, where col is the im2col unfolding of x[N, C, H, W] as
 * mrt_conv2d_f32 makes it (into `col`, C/groups*KH*KW*OH*OW floats; a 1x1, stride-1, unpadded
 * convolution reads x directly and col may be NULL); g[N, O, OH, OW] is the adjoint of the
 * convolution's result. One mrt_cpu_sgemm per image and group, accumulating (beta 1) after the
 * first image. */
static inline void mrt_conv2d_wgrad_f32(float *gw, const float *g, const float *x, int64_t N, int64_t C, int64_t H,
                                        int64_t W, int64_t O, int KH, int KW, int64_t OH, int64_t OW, int sh, int sw, int pt,
                                        int pl, int dh, int dw, int groups, float *col) {
    const int64_t Cg = C / groups, Og = O / groups, K = Cg * KH * KW, P = OH * OW;
    const int direct = KH == 1 && KW == 1 && sh == 1 && sw == 1 && pt == 0 && pl == 0 && OH == H && OW == W;
    if (N == 0) memset(gw, 0, (size_t)(O * K) * sizeof(float));
    for (int64_t n = 0; n < N; n++)
        for (int grp = 0; grp < groups; grp++) {
            const float *xg = x + (n * C + (int64_t)grp * Cg) * H * W, *b = xg;
            if (!direct) {
                mrt_im2col_f32(col, xg, Cg, H, W, KH, KW, OH, OW, sh, sw, pt, pl, dh, dw);
                b = col;
            }
            mrt_cpu_sgemm(0, 1, Og, K, P, 1.0f, g + (n * O + grp * Og) * P, P, b, P, n ? 1.0f : 0.0f, gw + grp * Og * K, K);
        }
}

/* y[N, O, OH, OW] = conv_transpose2d(x[N, C, H, W], w[C, O/groups, KH, KW]) (PyTorch's layout and
 * output size (H-1)*sh - 2*ph + dh*(KH-1) + output_padding + 1, which comes in OH, OW), stride
 * (sh, sw), padding (ph, pw), dilation (dh, dw). Each image and group is one GEMM,
 * col [O/g*KH*KW, H*W] = w_g^T [O/g*KH*KW, C/g] @ x_g [C/g, H*W] (mrt_cpu_sgemm), then col2im
 * scatters col into y: input pixel (ih, iw) with tap (kh, kw) adds to output pixel
 * (ih*sh - ph + kh*dh, iw*sw - pw + kw*dw) when that lies inside. col has O/g*KH*KW*H*W floats.
 * With at most MRT_CONVT_DIRECT_CG input channels per group (depthwise) the GEMM is an outer
 * product and the direct scatter is faster: col is not used (may be NULL). bench/conv_transpose2d.c
 * measures both against the plain loop (one thread): the GEMM 15-20x faster than it on decoder
 * shapes, the direct path 1.2-1.3x on depthwise ones (where the GEMM was 0.8x). */
#define MRT_CONVT_DIRECT_CG 2
static inline void mrt_conv_transpose2d_f32(float *y, const float *x, const float *w, int64_t N, int64_t C, int64_t H,
                                            int64_t W, int64_t O, int KH, int KW, int64_t OH, int64_t OW, int sh,
                                            int sw, int ph, int pw, int dh, int dw, int groups, float *col) {
    const int64_t Cg = C / groups, Og = O / groups, M = Og * KH * KW, P = H * W;
    const int direct = Cg <= MRT_CONVT_DIRECT_CG;
    memset(y, 0, (size_t)(N * O * OH * OW) * sizeof(float));
    for (int64_t n = 0; n < N; n++)
        for (int g = 0; g < groups; g++)
            for (int64_t c = 0; c < (direct ? Cg : 1); c++) {
            /* direct: the taps of input channel c, weighted (wc != NULL) as they are scattered */
            const float *xc = x + (n * C + g * Cg + c) * P, *wc = direct ? w + (g * Cg + c) * M : NULL;
            if (!direct)
                mrt_cpu_sgemm(1, 0, M, P, Cg, 1.0f, w + g * Cg * M, M, x + (n * C + g * Cg) * P, P, 0.0f, col, P);
            float *yg = y + (n * O + g * Og) * OH * OW;
            for (int64_t o = 0; o < Og; o++)
                for (int kh = 0; kh < KH; kh++)
                    for (int kw = 0; kw < KW; kw++) {
                        const int64_t tap = (o * KH + kh) * KW + kw;
                        const float *row = direct ? xc : col + tap * P;
                        const float wv = direct ? wc[tap] : 1.0f;
                        float *yo = yg + o * OH * OW;
                        /* input columns whose output column lies inside [0, OW): [lo, hi) */
                        const int64_t off = (int64_t)kw * dw - pw;
                        int64_t lo = off >= 0 ? 0 : (-off + sw - 1) / sw;
                        int64_t hi = OW - 1 - off < 0 ? 0 : (OW - 1 - off) / sw + 1;
                        if (hi > W) hi = W;
                        if (lo > hi) lo = hi;
                        for (int64_t ih = 0; ih < H; ih++) {
                            const int64_t oh = ih * sh - ph + (int64_t)kh * dh;
                            if (oh < 0 || oh >= OH) continue;
                            const float *r = row + ih * W;
                            float *yr = yo + oh * OW + off;
                            if (direct)
                                for (int64_t iw = lo; iw < hi; iw++) yr[iw * sw] += wv * r[iw];
                            else if (sw == 1)
                                for (int64_t iw = lo; iw < hi; iw++) yr[iw] += r[iw];
                            else
                                for (int64_t iw = lo; iw < hi; iw++) yr[iw * sw] += r[iw];
                        }
                    }
            }
}

/* Max pooling over [NC, H, W] planes; windows entirely outside the input do not occur (the
 * compiler limits padding to half the kernel). NaN-propagating. */
static inline void mrt_maxpool2d_f32(float *y, const float *x, int64_t NC, int64_t H, int64_t W, int64_t OH, int64_t OW,
                                     int kh, int kw, int sh, int sw, int pt, int pl, int dh, int dw) {
    MRT_PRAGMA(omp parallel for schedule(static) if(NC * OH * OW * kh * kw >= MRT_PAR_MIN))
    for (int64_t p = 0; p < NC; p++) {
        const float *xp = x + p * H * W;
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                float m = -INFINITY;
                for (int i = 0; i < kh; i++) {
                    int64_t ih = oh * sh - pt + (int64_t)i * dh;
                    if (ih < 0 || ih >= H) continue;
                    for (int j = 0; j < kw; j++) {
                        int64_t iw = ow * sw - pl + (int64_t)j * dw;
                        if (iw >= 0 && iw < W) m = mrt_maxf(m, xp[ih * W + iw]);
                    }
                }
                y[(p * OH + oh) * OW + ow] = m;
            }
    }
}

/* Average pooling over [NC, H, W] planes with padding top/left/bottom/right. The divisor is the
 * number of taps inside the explicitly padded input [-pt, H+pb) x [-pl, W+pr) when
 * count_include_pad, else the taps inside the input; padding that ceil_mode adds beyond the
 * explicit padding never counts (as in PyTorch; field cases B23, B24). */
static inline void mrt_avgpool2d_f32(float *y, const float *x, int64_t NC, int64_t H, int64_t W, int64_t OH, int64_t OW,
                                     int kh, int kw, int sh, int sw, int pt, int pl, int pb, int pr,
                                     int count_include_pad) {
    MRT_PRAGMA(omp parallel for schedule(static) if(NC * OH * OW * kh * kw >= MRT_PAR_MIN))
    for (int64_t p = 0; p < NC; p++) {
        const float *xp = x + p * H * W;
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t h0 = oh * sh - pt, w0 = ow * sw - pl;
                int64_t h1 = h0 + kh, w1 = w0 + kw;
                /* window clipped to the padded input (for the divisor) and to the input (for the sum) */
                int64_t ph0 = h0 < -pt ? -pt : h0, ph1 = h1 > H + pb ? H + pb : h1;
                int64_t pw0 = w0 < -pl ? -pl : w0, pw1 = w1 > W + pr ? W + pr : w1;
                int64_t ih0 = h0 < 0 ? 0 : h0, ih1 = h1 > H ? H : h1;
                int64_t iw0 = w0 < 0 ? 0 : w0, iw1 = w1 > W ? W : w1;
                double s = 0.0;
                for (int64_t ih = ih0; ih < ih1; ih++)
                    for (int64_t iw = iw0; iw < iw1; iw++) s += xp[ih * W + iw];
                int64_t cnt = count_include_pad ? (ph1 - ph0) * (pw1 - pw0) : (ih1 - ih0) * (iw1 - iw0);
                y[(p * OH + oh) * OW + ow] = cnt > 0 ? (float)(s / (double)cnt) : 0.0f;
            }
    }
}

/* Adaptive average pooling: output cell (i, j) averages rows floor(i*H/OH) .. ceil((i+1)*H/OH)-1
 * and the same for columns (PyTorch's rule). */
static inline void mrt_adaptive_avgpool2d_f32(float *y, const float *x, int64_t NC, int64_t H, int64_t W, int64_t OH,
                                              int64_t OW) {
    MRT_PRAGMA(omp parallel for schedule(static) if(NC * H * W >= MRT_PAR_MIN))
    for (int64_t p = 0; p < NC; p++) {
        const float *xp = x + p * H * W;
        for (int64_t i = 0; i < OH; i++) {
            int64_t h0 = i * H / OH, h1 = ((i + 1) * H + OH - 1) / OH;
            for (int64_t j = 0; j < OW; j++) {
                int64_t w0 = j * W / OW, w1 = ((j + 1) * W + OW - 1) / OW;
                double s = 0.0;
                for (int64_t ih = h0; ih < h1; ih++)
                    for (int64_t iw = w0; iw < w1; iw++) s += xp[ih * W + iw];
                y[(p * OH + i) * OW + j] = (float)(s / (double)((h1 - h0) * (w1 - w0)));
            }
        }
    }
}

/* ---------------------------------------------------------------- pooling gradients (training)
 *
 * Each takes g[NC, OH, OW], the adjoint of the pooling's result, and writes dx[NC, H, W], the
 * adjoint of its input. The CPU kernels scatter each output's share in row-major output order;
 * the CUDA kernels gather, per input element, the outputs whose window holds it in the same
 * order, so both add the same numbers in the same order. */

/* max_pool2d's input gradient: each output's adjoint added to the element mrt_maxpool2d_argmax
 * picks (x[NC, H, W] is the pooled input). */
static inline void mrt_maxpool2d_grad_f32(float *dx, const float *g, const float *x, int64_t NC, int64_t H, int64_t W,
                                          int64_t OH, int64_t OW, int kh, int kw, int sh, int sw, int pt, int pl, int dh,
                                          int dw) {
    memset(dx, 0, (size_t)(NC * H * W) * sizeof(float));
    for (int64_t p = 0; p < NC; p++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                const int64_t k = mrt_maxpool2d_argmax(x + p * H * W, H, W, oh, ow, kh, kw, sh, sw, pt, pl, dh, dw);
                if (k >= 0) dx[p * H * W + k] += g[(p * OH + oh) * OW + ow];
            }
}

/* avg_pool2d's input gradient: g / divisor (in f32, as PyTorch) added to each tap of the window
 * inside the input. */
static inline void mrt_avgpool2d_grad_f32(float *dx, const float *g, int64_t NC, int64_t H, int64_t W, int64_t OH,
                                          int64_t OW, int kh, int kw, int sh, int sw, int pt, int pl, int pb, int pr,
                                          int count_include_pad) {
    memset(dx, 0, (size_t)(NC * H * W) * sizeof(float));
    for (int64_t p = 0; p < NC; p++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                const int64_t cnt = mrt_avgpool2d_count(H, W, oh, ow, kh, kw, sh, sw, pt, pl, pb, pr, count_include_pad);
                if (cnt <= 0) continue;
                const float d = g[(p * OH + oh) * OW + ow] / (float)cnt;
                int64_t h0 = oh * sh - pt, w0 = ow * sw - pl, h1 = h0 + kh, w1 = w0 + kw;
                if (h0 < 0) h0 = 0;
                if (w0 < 0) w0 = 0;
                if (h1 > H) h1 = H;
                if (w1 > W) w1 = W;
                for (int64_t ih = h0; ih < h1; ih++)
                    for (int64_t iw = w0; iw < w1; iw++) dx[(p * H + ih) * W + iw] += d;
            }
}

/* adaptive_avg_pool2d's input gradient: g / rows / columns of the cell (PyTorch's two f32
 * divisions) added to each element of the cell's window (mrt_adaptive_avgpool2d_f32's rule). */
static inline void mrt_adaptive_avgpool2d_grad_f32(float *dx, const float *g, int64_t NC, int64_t H, int64_t W,
                                                   int64_t OH, int64_t OW) {
    memset(dx, 0, (size_t)(NC * H * W) * sizeof(float));
    for (int64_t p = 0; p < NC; p++)
        for (int64_t i = 0; i < OH; i++) {
            const int64_t h0 = i * H / OH, h1 = ((i + 1) * H + OH - 1) / OH;
            for (int64_t j = 0; j < OW; j++) {
                const int64_t w0 = j * W / OW, w1 = ((j + 1) * W + OW - 1) / OW;
                const float d = g[(p * OH + i) * OW + j] / (float)(h1 - h0) / (float)(w1 - w0);
                for (int64_t ih = h0; ih < h1; ih++)
                    for (int64_t iw = w0; iw < w1; iw++) dx[(p * H + ih) * W + iw] += d;
            }
        }
}

/* y[NC, OH, OW] = interpolate(x[NC, H, W]), nearest or bilinear (mrt_interp2d_at); sfh, sfw are
 * the scale_factor given (0: none). The source rows and columns are computed once per call
 * (columns into a table when it can be allocated), not per element. */
static inline void mrt_interp2d_f32(float *y, const float *x, int64_t NC, int64_t H, int64_t W, int64_t OH, int64_t OW,
                                    int bilinear, int align_corners, double sfh, double sfw) {
    const float sh = mrt_interp_scale(H, OH, bilinear && align_corners, sfh);
    const float sw = mrt_interp_scale(W, OW, bilinear && align_corners, sfw);
    int64_t *cw = (int64_t *)malloc((size_t)OW * (2 * sizeof(int64_t) + sizeof(float)));
    if (!cw) { /* no table: element by element */
        for (int64_t p = 0; p < NC; p++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++)
                    y[(p * OH + oh) * OW + ow] =
                        mrt_interp2d_at(x + p * H * W, H, W, OH, OW, oh, ow, bilinear, align_corners, sh, sw);
        return;
    }
    int64_t *cw1 = cw + OW;
    float *cl = (float *)(cw1 + OW);
    for (int64_t ow = 0; ow < OW; ow++) {
        if (bilinear) mrt_linear_src(sw, ow, align_corners, W, OW, &cw[ow], &cw1[ow], &cl[ow]);
        else cw[ow] = mrt_nearest_src(sw, ow, W, OW);
    }
    for (int64_t oh = 0; oh < OH; oh++) {
        int64_t h0, h1;
        float lh = 0.0f;
        if (bilinear) mrt_linear_src(sh, oh, align_corners, H, OH, &h0, &h1, &lh);
        else h0 = h1 = mrt_nearest_src(sh, oh, H, OH);
        for (int64_t p = 0; p < NC; p++) {
            const float *r0 = x + (p * H + h0) * W, *r1 = x + (p * H + h1) * W;
            float *yr = y + (p * OH + oh) * OW;
            if (!bilinear)
                for (int64_t ow = 0; ow < OW; ow++) yr[ow] = r0[cw[ow]];
            else
                for (int64_t ow = 0; ow < OW; ow++) {
                    const float lw = cl[ow];
                    yr[ow] = (1.0f - lh) * ((1.0f - lw) * r0[cw[ow]] + lw * r0[cw1[ow]]) +
                             lh * ((1.0f - lw) * r1[cw[ow]] + lw * r1[cw1[ow]]);
                }
        }
    }
    free(cw);
}

/* interpolate's input gradient (training; PyTorch's upsample_nearest2d_backward and
 * upsample_bilinear2d_backward): dx[NC, H, W] = zeros plus, for each output element of
 * g[NC, OH, OW] in row-major order, g * lh * lw added to each of its source taps (h, w) in the
 * forward's order (h0 w0, h0 w1, h1 w0, h1 w1; a tap read twice at an edge gets both shares).
 * The products are rounded before the additions (MRT_FMUL), so the CUDA kernel, which gathers
 * for each input element the same shares in the same order, gives the same bits; no atomics.
 * sfh, sfw as mrt_interp2d_f32's. */
static inline void mrt_interp2d_grad_f32(float *dx, const float *g, int64_t NC, int64_t H, int64_t W, int64_t OH,
                                         int64_t OW, int bilinear, int align_corners, double sfh, double sfw) {
    const float sh = mrt_interp_scale(H, OH, bilinear && align_corners, sfh);
    const float sw = mrt_interp_scale(W, OW, bilinear && align_corners, sfw);
    memset(dx, 0, (size_t)(NC * H * W) * sizeof(float));
    MRT_PRAGMA(omp parallel for schedule(static) if(NC * OH * OW >= MRT_PAR_MIN))
    for (int64_t p = 0; p < NC; p++) {
        float *dp = dx + p * H * W;
        for (int64_t oh = 0; oh < OH; oh++) {
            int64_t ih[2], iw[2];
            float lh[2], lw[2];
            const int nh = mrt_interp_taps(sh, oh, bilinear, align_corners, H, OH, ih, lh);
            for (int64_t ow = 0; ow < OW; ow++) {
                const int nw = mrt_interp_taps(sw, ow, bilinear, align_corners, W, OW, iw, lw);
                const float v = g[(p * OH + oh) * OW + ow];
                for (int a = 0; a < nh; a++)
                    for (int b = 0; b < nw; b++) dp[ih[a] * W + iw[b]] += MRT_FMUL(MRT_FMUL(lh[a], lw[b]), v);
            }
        }
    }
}

/* y = (x - mean) / sqrt(var + eps) * w + b over the last axis of [rows, D] (biased variance,
 * two passes, accumulated in double; x - mean is taken in double too). w and b may be NULL
 * (no weight: 1, no bias: 0); group_norm and instance_norm use it without either. rt_rows.c
 * computes it (mrt_cpu_layernorm_f32: AVX-512 or portable C, the same bits); x - mean is taken
 * in double because rounding the mean to float first would cost a row with a large common
 * offset (1e4 + noise of 1e-2) most of its digits, float's spacing at 1e4 being 1e-3. */
static inline void mrt_layernorm_f32(float *y, const float *x, const float *w, const float *b, int64_t rows, int64_t D,
                                     float eps) {
    mrt_cpu_layernorm_f32(y, x, w, b, rows, D, eps);
}

/* y[i, :] = w[ids[i], :] for n ids (int64 when ids_i64, else int32), w [V, D]. Returns -1, or
 * the position of the first id outside [0, V) (and that id in *bad_id), leaving y partly written. */
static inline int64_t mrt_embedding_f32(float *y, const void *ids, int ids_i64, int64_t n, const float *w, int64_t V,
                                        int64_t D, int64_t *bad_id) {
    for (int64_t i = 0; i < n; i++) {
        int64_t id = ids_i64 ? ((const int64_t *)ids)[i] : (int64_t)((const int32_t *)ids)[i];
        if (id < 0 || id >= V) {
            *bad_id = id;
            return i;
        }
        const float *src = w + id * D;
        for (int64_t j = 0; j < D; j++) y[i * D + j] = src[j];
    }
    return -1;
}

/* y[o, j, i] = x[o, 0, i] + ... + x[o, j, i] for j < n: running sums along the middle axis of
 * x [outer, n, inner]; reverse: from the end, y[o, j, i] = x[o, j, i] + ... + x[o, n-1, i] (a
 * cumsum's adjoint, PyTorch's reversed_cumsum, without its two flips). Accumulates in double
 * (the CUDA kernel sums in the same order). */
static inline void mrt_cumsum_f32(float *y, const float *x, int64_t outer, int64_t n, int64_t inner, int reverse) {
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double s = 0.0;
            const float *xr = x + o * n * inner + i;
            float *yr = y + o * n * inner + i;
            for (int64_t k = 0; k < n; k++) {
                const int64_t j = reverse ? n - 1 - k : k;
                s += xr[j * inner];
                yr[j * inner] = (float)s;
            }
        }
}

/* y [outer, k, inner] gathered from x [outer, n, inner] along the middle axis, by an index of
 * int64 (idx_i64) or int32; mode 0 (gather): the index is [outer, k, inner], y[o, j, i] =
 * x[o, index[o, j, i], i]; mode 1 (index_select): the index is [k], y[o, j, i] = x[o, index[j], i];
 * mode 2 (one_hot, x unused, inner 1, n == k): the index is [outer], y[o, j] = index[o] == j.
 * Returns -1, or the first position in the index of an entry outside [0, n) (that entry in
 * *bad_id), leaving y partly written. */
static inline int64_t mrt_gather_f32(float *y, const float *x, const void *idx, int idx_i64, int mode, int64_t outer,
                                     int64_t n, int64_t k, int64_t inner, int64_t *bad_id) {
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < k; j++)
            for (int64_t i = 0; i < inner; i++) {
                const int64_t at = (o * k + j) * inner + i, pos = mode == 0 ? at : mode == 1 ? j : o;
                const int64_t id = idx_i64 ? ((const int64_t *)idx)[pos] : (int64_t)((const int32_t *)idx)[pos];
                if (id < 0 || id >= n) {
                    *bad_id = id;
                    return pos;
                }
                y[at] = mode == 2 ? (id == j ? 1.0f : 0.0f) : x[(o * n + id) * inner + i];
            }
    return -1;
}

/* ---------------------------------------------------------------- training: scatter_add and dropout */

/* The adjoint of mrt_gather_f32 (modes 0 and 1): y [outer, n, inner] = 0, then for each
 * position (o, j, i) of g [outer, k, inner] in C order, y[o, index, i] += g[o, j, i] (the index
 * read as gather reads it). Every y element sums its entries in increasing j, in float, which
 * the CUDA kernel (one thread per (o, i) line, walking j in order) repeats exactly: the result is deterministic and
 * the same on both. An index outside [0, n) adds nothing (the forward gather has reported it). */
static inline void mrt_scatter_add_f32(float *y, const float *g, const void *idx, int idx_i64, int mode, int64_t outer,
                                       int64_t n, int64_t k, int64_t inner) {
    memset(y, 0, sizeof(float) * (size_t)(outer * n * inner));
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < k; j++)
            for (int64_t i = 0; i < inner; i++) {
                const int64_t at = (o * k + j) * inner + i, pos = mode == 0 ? at : j;
                const int64_t id = idx_i64 ? ((const int64_t *)idx)[pos] : (int64_t)((const int32_t *)idx)[pos];
                if (id >= 0 && id < n) y[(o * n + id) * inner + i] += g[at];
            }
}

/* y[i] = mrt_dropout_elem(x[i], ...) for n elements (y may be x). */
static inline void mrt_dropout_f32(float *y, const float *x, int64_t n, float p, float scale, uint64_t seed,
                                   uint64_t step, uint32_t site) {
    for (int64_t i = 0; i < n; i++) y[i] = mrt_dropout_elem(x[i], p, scale, seed, step, site, i);
}

/* y[i] = start + step * i for i < n, in double, then rounded to float (or converted to int64
 * when i64: start and step are integers then). */
static inline void mrt_iota(void *y, int64_t n, double start, double step, int i64) {
    for (int64_t i = 0; i < n; i++) {
        double v = start + step * (double)i;
        if (i64) ((int64_t *)y)[i] = (int64_t)v;
        else ((float *)y)[i] = (float)v;
    }
}

/* The step's scalars for step `step` (1, 2, ...). */
static inline mrt_opt_args mrt_opt_args_for(int kind, double lr, double weight_decay, double momentum, double dampening,
                                            int nesterov, double beta1, double beta2, double eps, int64_t step) {
    mrt_opt_args a;
    memset(&a, 0, sizeof a);
    a.kind = kind;
    a.lr = (float)lr;
    a.weight_decay = (float)weight_decay;
    a.momentum = (float)momentum;
    a.dampening_w = (float)(1 - dampening);
    a.nesterov = nesterov;
    a.first = step == 1;
    a.b1w = (float)(1 - beta1);
    a.b2 = (float)beta2;
    a.b2w = (float)(1 - beta2);
    a.neg_step_size = (float)(-(lr / (1 - pow(beta1, (double)step))));
    a.bc2_sqrt = (float)sqrt(1 - pow(beta2, (double)step));
    a.eps = (float)eps;
    a.decay = (float)(1 - lr * weight_decay);
    a.grad_scale = 1.0f;
    return a;
}

/* The update of every tensor of t[0..n) on the CPU. */
static inline void mrt_opt_step_multi_f32(const mrt_opt_args *a, const mrt_opt_tensor *t, int n) {
    for (int k = 0; k < n; k++) {
        float *p = t[k].p, *s0 = t[k].s0, *s1 = t[k].s1;
        const float *g = t[k].g;
        for (int64_t i = 0; i < t[k].n; i++) mrt_opt_elem(a, p + i, g[i], s0 ? s0 + i : NULL, s1 ? s1 + i : NULL);
    }
}

/* clip_grad_norm_'s coefficient for a global squared norm sumsq, in f32 as PyTorch computes it:
 * max_norm / (norm + 1e-6) clamped to at most 1. */
static inline float mrt_clip_coef(float sumsq, double max_norm) {
    float c = (float)max_norm / (sqrtf(sumsq) + 1e-6f);
    return c < 1.0f ? c : 1.0f;
}

/* One operand of a concatenation: `outer` rows of x_row bytes go to y at y_offset within each
 * y_row-byte row. */
static inline void mrt_concat_part(void *y, const void *x, int64_t outer, int64_t x_row, int64_t y_row, int64_t y_offset) {
    for (int64_t o = 0; o < outer; o++)
        memcpy((char *)y + o * y_row + y_offset, (const char *)x + o * x_row, (size_t)x_row);
}

/* ---------------------------------------------------------------- for generated code
 *
 * Generated code describes each convolution and pooling once, as a static parameter struct with
 * designated initializers, and calls these with the batch and the pointers; every kernel call
 * is one MRT_DISPATCH on its slot's device. */

/** One conv2d, NCHW: input [N, C, H, W], weight [O, C/groups, kh, kw], output [N, O, OH, OW];
 *  stride sh x sw, padding pt (top) and pl (left), dilation dh x dw. N comes with the call. */
typedef struct mrt_conv2d_params {
    int64_t C, H, W, O, OH, OW;
    int kh, kw, sh, sw, pt, pl, dh, dw, groups;
} mrt_conv2d_params;

/** One 2-D pooling, NCHW: input [N, C, H, W], output [N, C, OH, OW]; padding top, left,
 *  bottom, right; dilation (max pooling) and count_include_pad (average pooling). */
typedef struct mrt_pool2d_params {
    int64_t C, H, W, OH, OW;
    int kh, kw, sh, sw, pt, pl, pb, pr, dh, dw, count_include_pad;
} mrt_pool2d_params;

/* ---- blocked convolutions (runtime/rt_blocked.c; modelc's layout pass, compiler/layout.c)
 *
 * The convolutional part of an inference graph on the CPU, with activations in oneDNN's blocked
 * layout nChw16c (nChw8c without AVX-512; same element count as NCHW when C % 16 == 0) between
 * these ops. The generated NAME_blocked() runs once at load, after the load-time kernels, on a
 * CPU model: mrt_blk_create, then one mrt_blk_add_* per op, which makes its oneDNN primitive at
 * the model's maximum batch (weights reordered once; a failure is an error naming the op, never
 * a silent fallback). run() calls mrt_blk_*_run; mrt_model_destroy frees it all (mrt_blk_free).
 * Built without oneDNN (make DNNL=0) every call fails with MRT_ERR_DEVICE and says why. */

/** Start m's blocked ops: nops of them, primitives made at batch max_batch. Replaces any. */
mrt_status mrt_blk_create(mrt_model *m, int nops, int64_t max_batch);
/** Op i: a conv2d (O a multiple of 16; p->groups dividing C and O: 1, depthwise, or groups of
 *  whole blocks), y = act(conv(x, w) + sum of the nbias bias vectors [O] + res) with res only
 *  when has_res; act 0 none, 1 relu, 2 clamp to [lo, hi], 3 silu (x * sigmoid(x)), 4 hardswish
 *  (x * relu6(x + 3) / 6). w is [O, C/groups, KH, KW] f32 (read
 *  now; reordered into the primitive's format); the biases are summed
 *  and copied now. src_blocked: x is blocked (else NCHW); dst_blocked: y is (else NCHW, through
 *  a reorder). winograd: a 3x3 stride-1 conv tries oneDNN's Winograd algorithm first (AVX-512
 *  f32; else, or where oneDNN has no Winograd kernel for it, the direct one). `what` names the op in messages ("k3 conv2d %16 at resnet18.model:12:5"). */
mrt_status mrt_blk_add_conv(mrt_model *m, int i, const mrt_conv2d_params *p, int src_blocked, int dst_blocked,
                            const float *w, const float *const *bias, int nbias, int has_res, int act, float lo, float hi,
                            int winograd, const char *what);
/** --precision bf16 (called before op i's mrt_blk_add_*): its source (src_bf16) and result
 *  (dst_bf16), both blocked, are stored as bf16 (2 bytes an element, in the plan's f32 buffer)
 *  when the model computes in bf16 on this CPU (avx512_bf16; else f32, as every other value).
 *  In a bf16 model every conv computes in bf16 (bf16 source and weights, f32 accumulation and
 *  bias): a source stored f32 is converted first (a reorder into a buffer of the ops), and a
 *  residual (res) is stored as the result. modelc chooses bf16 storage where every reader is a
 *  blocked conv or max pooling (compiler/precision.c). */
mrt_status mrt_blk_store_bf16(mrt_model *m, int i, int src_bf16, int dst_bf16);
/** Called before op i's mrt_blk_add_* (modelc's layout_nhwc): its primitive computes in nhwc
 *  (op_nhwc) rather than nChw16c, and its blocked source (src_nhwc) / result (dst_nhwc) is
 *  stored nhwc; a conv reorders a source stored in the other layout into its own first, and
 *  writes a result stored in the other one through one reorder. An nhwc conv has groups 1 and C,
 *  O multiples of 16; a pooling computes in its source's layout (else mrt_blk_add_* fails with
 *  MRT_ERR_INVALID_ARG). Without AVX-512, with bf16 or with $MODELRT_NHWC=0 every op runs in
 *  the blocked layout, which holds the same values in as many floats. */
mrt_status mrt_blk_nhwc(mrt_model *m, int i, int op_nhwc, int src_nhwc, int dst_nhwc);
/** Op i: a max pooling, blocked source; dst_blocked as for mrt_blk_add_conv. */
mrt_status mrt_blk_add_pool(mrt_model *m, int i, const mrt_pool2d_params *p, int dst_blocked, const char *what);
/** Run conv op i at batch N: y from x (res: the residual, in y's layout, or NULL). y, x, res
 *  are host memory; y may be res (the sum post-op then reads it in place). */
mrt_status mrt_blk_conv_run(mrt_model *m, int i, int64_t N, float *y, const float *x, const float *res);
/** Run pooling op i at batch N. */
mrt_status mrt_blk_pool_run(mrt_model *m, int i, int64_t N, float *y, const float *x);
/** Ops i and j (both added, convs) are a pair (modelc's layout pass, pair_dw / pair_chain): j
 *  reads only i's result, which is blocked, neither adds a residual, each is in one pair only,
 *  and run() calls j right after i (i through mrt_blk_conv_pair_run). Then a relu or clamp of
 *  either runs as oneDNN's post-op instead of a pass of its own (blk_clamp) at a run where no NaN
 *  or infinity can reach it: a check of i's source bounds both results (max |x| times the
 *  weights' largest sum of |w| for one output, plus the largest |bias|, below FLT_MAX / 4), and
 *  neither bias holds a -0.0. An expand + depthwise pair (i a 1x1 conv of stride 1 and groups 1
 *  with a blocked source; j a 3x3 depthwise conv of stride 1 or 2, padding 1, blocked result)
 *  may also run as one oneDNN primitive (its jit 1x1 kernel with the depthwise post-op, where
 *  oneDNN has it for the shape and the plan kept i's source apart from j's result): where its
 *  expanded value takes MRT_BLK_FUSE_BYTES a batch item or more (measured faster only there), or
 *  always / never with $MODELRT_BLK_FUSE=1 / 0 (read here). Otherwise each runs as before. The
 *  results are those of the two ops, bit for bit in the cases measured (MobileNetV2). Ignored
 *  (MRT_OK) in a bf16 model; MRT_ERR_INVALID_ARG when i and j are no such pair. Call it before
 *  mrt_blk_release_weights of either (it reads their plain weights). */
mrt_status mrt_blk_pair(mrt_model *m, int i, int j);
/** Run op i of a pair (mrt_blk_pair) at batch N: y (i's result, f32 blocked) from x; y2 is op
 *  j's result, which it may compute now (then j's mrt_blk_conv_run returns at once); y2 must
 *  not be read or written by anything else until j's call. Without mrt_blk_pair for i: as
 *  mrt_blk_conv_run(m, i, N, y, x, NULL). */
mrt_status mrt_blk_conv_pair_run(mrt_model *m, int i, int64_t N, float *y, const float *x, float *y2);
/** Release conv op i's plain weights (the w of mrt_blk_add_conv) once its primitive holds them
 *  reordered: modelc emits the call when nothing else reads that tensor; a Winograd op keeps them
 *  (oneDNN cannot reorder out of its Winograd format for another batch size). The whole pages inside
 *  it are returned to the system (madvise MADV_DONTNEED; they read as zeros until the weights are
 *  loaded again), so the weights are not resident twice. Afterwards mrt_model_copy_weights and
 *  mrt_model_save_weights refuse m (mrt_blk_released). $MODELRT_KEEP_WEIGHTS=1 keeps them. */
mrt_status mrt_blk_release_weights(mrt_model *m, int i);
/** 1 when some op of m had its plain weights released (mrt_blk_release_weights), else 0. */
int mrt_blk_released(const mrt_model *m);
/** Free m's blocked ops (NULL, or none: nothing). */
void mrt_blk_free(mrt_model *m);
/** 1 when this runtime was built with oneDNN (the blocked ops work), else 0. */
int mrt_blk_available(void);

/** mrt_conv2d_f32 for a batch of N; col is the im2col scratch (NULL when the conv reads its
 *  input directly). */
static inline void mrt_conv2d(const mrt_conv2d_params *p, int64_t N, float *y, const float *x, const float *w,
                              float *col) {
    mrt_conv2d_f32(y, x, w, N, p->C, p->H, p->W, p->O, p->kh, p->kw, p->OH, p->OW, p->sh, p->sw, p->pt, p->pl, p->dh,
                   p->dw, p->groups, col);
}
/** A depthwise conv2d (p->groups == p->C, p->O a multiple of it) for a batch of N on the CPU,
 *  with its epilogue act(y + bias[o]) fused (bias NULL and act MRT_ACT_NONE: the bare conv;
 *  lo, hi: MRT_ACT_CLAMP's bounds): mrt_cpu_dwconv2d_f32, no scratch. */
static inline void mrt_conv2d_dw(const mrt_conv2d_params *p, int64_t N, float *y, const float *x, const float *w,
                                 const float *bias, int act, float lo, float hi) {
    mrt_cpu_dwconv2d_f32(y, x, w, bias, act, lo, hi, N, p->C, p->H, p->W, p->O, p->kh, p->kw, p->OH, p->OW, p->sh,
                         p->sw, p->pt, p->pl, p->dh, p->dw);
}
static inline void mrt_maxpool2d(const mrt_pool2d_params *p, int64_t N, float *y, const float *x) {
    mrt_maxpool2d_f32(y, x, N * p->C, p->H, p->W, p->OH, p->OW, p->kh, p->kw, p->sh, p->sw, p->pt, p->pl, p->dh, p->dw);
}
static inline void mrt_avgpool2d(const mrt_pool2d_params *p, int64_t N, float *y, const float *x) {
    mrt_avgpool2d_f32(y, x, N * p->C, p->H, p->W, p->OH, p->OW, p->kh, p->kw, p->sh, p->sw, p->pt, p->pl, p->pb, p->pr,
                      p->count_include_pad);
}
/** Pooling gradients for a batch of N with the forward's parameter struct (H, W the pooled
 *  input's, OH, OW the result's): dx[N, C, H, W] from g[N, C, OH, OW] (and x for max pooling). */
static inline void mrt_maxpool2d_grad(const mrt_pool2d_params *p, int64_t N, float *dx, const float *g, const float *x) {
    mrt_maxpool2d_grad_f32(dx, g, x, N * p->C, p->H, p->W, p->OH, p->OW, p->kh, p->kw, p->sh, p->sw, p->pt, p->pl, p->dh,
                           p->dw);
}
static inline void mrt_avgpool2d_grad(const mrt_pool2d_params *p, int64_t N, float *dx, const float *g) {
    mrt_avgpool2d_grad_f32(dx, g, N * p->C, p->H, p->W, p->OH, p->OW, p->kh, p->kw, p->sh, p->sw, p->pt, p->pl, p->pb,
                           p->pr, p->count_include_pad);
}
/** conv2d's weight gradient for a batch of N with the forward's parameter struct:
 *  gw[O, C/groups, KH, KW] from g[N, O, OH, OW] and x[N, C, H, W]. */
static inline void mrt_conv2d_wgrad(const mrt_conv2d_params *p, int64_t N, float *gw, const float *g, const float *x,
                                    float *col) {
    mrt_conv2d_wgrad_f32(gw, g, x, N, p->C, p->H, p->W, p->O, p->kh, p->kw, p->OH, p->OW, p->sh, p->sw, p->pt, p->pl,
                         p->dh, p->dw, p->groups, col);
}
/** mrt_embedding_f32 returning a status: an id outside [0, V) is MRT_ERR_INVALID_ARG naming `what`
 *  (model and tensor), the id and its position. */
static inline int mrt_embedding_f32_checked(const char *what, float *y, const void *ids, int ids_i64, int64_t n,
                                        const float *w, int64_t V, int64_t D) {
    int64_t bad_id = 0, bad = mrt_embedding_f32(y, ids, ids_i64, n, w, V, D, &bad_id);
    if (bad < 0) return MRT_OK;
    return mrt_set_error(MRT_ERR_INVALID_ARG, "%s: id %lld at position %lld is out of range [0, %lld)", what,
                         (long long)bad_id, (long long)bad, (long long)V);
}

/** mrt_gather_f32 returning a status: an index outside [0, n) is MRT_ERR_INVALID_ARG naming `what`
 *  (model, call and index), the index and its position (the same words as embedding's). */
static inline int mrt_gather_f32_checked(const char *what, float *y, const float *x, const void *idx, int idx_i64,
                                         int mode, int64_t outer, int64_t n, int64_t k, int64_t inner) {
    int64_t bad_id = 0, bad = mrt_gather_f32(y, x, idx, idx_i64, mode, outer, n, k, inner, &bad_id);
    if (bad < 0) return MRT_OK;
    return mrt_set_error(MRT_ERR_INVALID_ARG, "%s: id %lld at position %lld is out of range [0, %lld)", what,
                         (long long)bad_id, (long long)bad, (long long)n);
}

#ifdef MRT_WITH_CUDA
static inline mrt_status mrt_cuda_conv2d(void *stream, const mrt_conv2d_params *p, int64_t N, float *y, const float *x,
                                         const float *w, float *col) {
    return mrt_cuda_conv2d_f32(stream, y, x, w, N, p->C, p->H, p->W, p->O, p->kh, p->kw, p->OH, p->OW, p->sh, p->sw,
                               p->pt, p->pl, p->dh, p->dw, p->groups, col);
}
static inline mrt_status mrt_cuda_maxpool2d(void *stream, const mrt_pool2d_params *p, int64_t N, float *y,
                                            const float *x) {
    return mrt_cuda_maxpool2d_f32(stream, y, x, N * p->C, p->H, p->W, p->OH, p->OW, p->kh, p->kw, p->sh, p->sw, p->pt,
                                  p->pl, p->dh, p->dw);
}
static inline mrt_status mrt_cuda_avgpool2d(void *stream, const mrt_pool2d_params *p, int64_t N, float *y,
                                            const float *x) {
    return mrt_cuda_avgpool2d_f32(stream, y, x, N * p->C, p->H, p->W, p->OH, p->OW, p->kh, p->kw, p->sh, p->sw, p->pt,
                                  p->pl, p->pb, p->pr, p->count_include_pad);
}
static inline mrt_status mrt_cuda_maxpool2d_grad(void *stream, const mrt_pool2d_params *p, int64_t N, float *dx,
                                                 const float *g, const float *x) {
    return mrt_cuda_maxpool2d_grad_f32(stream, dx, g, x, N * p->C, p->H, p->W, p->OH, p->OW, p->kh, p->kw, p->sh, p->sw,
                                       p->pt, p->pl, p->dh, p->dw);
}
static inline mrt_status mrt_cuda_avgpool2d_grad(void *stream, const mrt_pool2d_params *p, int64_t N, float *dx,
                                                 const float *g) {
    return mrt_cuda_avgpool2d_grad_f32(stream, dx, g, N * p->C, p->H, p->W, p->OH, p->OW, p->kh, p->kw, p->sh, p->sw,
                                       p->pt, p->pl, p->pb, p->pr, p->count_include_pad);
}
static inline mrt_status mrt_cuda_conv2d_wgrad(void *stream, const mrt_conv2d_params *p, int64_t N, float *gw,
                                               const float *g, const float *x, float *col) {
    return mrt_cuda_conv2d_wgrad_f32(stream, gw, g, x, N, p->C, p->H, p->W, p->O, p->kh, p->kw, p->OH, p->OW, p->sh,
                                     p->sw, p->pt, p->pl, p->dh, p->dw, p->groups, col);
}
/** One dispatch point per kernel call in generated code: the CUDA call (an mrt_status
 *  expression) when the slot's device is a GPU, else the CPU statement; a failing status runs
 *  `on_error` (`return st`, or a goto to the end of the calls a CUDA graph may capture) in the
 *  caller, which has `mrt_status st` in scope. */
#define MRT_DISPATCH(gpu, cuda_call, cpu_stmt, on_error)                                                         \
    do {                                                                                                       \
        if (gpu) {                                                                                             \
            if ((st = (cuda_call)) != MRT_OK) on_error;                                                        \
        } else {                                                                                               \
            cpu_stmt;                                                                                          \
        }                                                                                                      \
    } while (0)
#else
#define MRT_DISPATCH(gpu, cuda_call, cpu_stmt, on_error) \
    do {                                                 \
        (void)(gpu);                                     \
        cpu_stmt;                                        \
    } while (0)
#endif

/** Marks generated locals that some models do not read. */
#define MRT_UNUSED __attribute__((unused))
/** Keeps a generated part of a large run() a function of its own (compile time: see modelc's
 *  emit_c.c, RUN_PART). */
#define MRT_NOINLINE __attribute__((noinline))
#endif /* !__CUDACC__ */

#endif /* MRT_KERNELS_H */
