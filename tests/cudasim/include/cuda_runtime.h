/*
 * cuda_runtime.h — the CUDA simulator's device side (tests/cudasim; design in cudasim.h): the
 * built-in variables, barriers, warp intrinsics, atomics and device math that the runtime's
 * kernels and generated NAME.cu files use, and cudasim_launch, which MRT_LAUNCH
 * (runtime/mrt_launch.h) expands to where host C++ cannot parse <<<...>>>.
 */
#ifndef CUDASIM_CUDA_RUNTIME_H
#define CUDASIM_CUDA_RUNTIME_H

#include "cuda_runtime_api.h"
#include "cudasim.h"

#ifdef __cplusplus
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

/* ---------------------------------------------------------------- built-in variables */

#define threadIdx (cudasim_cur->threadIdx)
#define blockIdx (cudasim_cur->blockIdx)
#define blockDim (cudasim_cur->blockDim)
#define gridDim (cudasim_cur->gridDim)
constexpr int warpSize = 32;

/* ---------------------------------------------------------------- barriers */

inline void __syncthreads(const char *file = __builtin_FILE(), int line = __builtin_LINE())
{
    (void)cudasim_barrier(CUDASIM_BAR_SYNC, 0, file, line);
}
inline int __syncthreads_count(int pred, const char *file = __builtin_FILE(), int line = __builtin_LINE())
{
    return cudasim_barrier(CUDASIM_BAR_COUNT, pred != 0, file, line);
}
inline int __syncthreads_and(int pred, const char *file = __builtin_FILE(), int line = __builtin_LINE())
{
    return cudasim_barrier(CUDASIM_BAR_AND, pred != 0, file, line);
}
inline int __syncthreads_or(int pred, const char *file = __builtin_FILE(), int line = __builtin_LINE())
{
    return cudasim_barrier(CUDASIM_BAR_OR, pred != 0, file, line);
}
inline void __syncwarp(unsigned mask = 0xffffffffu, const char *file = __builtin_FILE(),
                       int line = __builtin_LINE())
{
    (void)cudasim_warp(CUDASIM_WARP_SYNC, mask, 0, 0, 32, "__syncwarp", file, line);
}
inline void __threadfence(void) {}
inline void __threadfence_block(void) {}
inline void __threadfence_system(void) {}

/* ---------------------------------------------------------------- warp intrinsics */

namespace cudasim_detail {
template <typename T> unsigned long long bits(T v)
{
    static_assert(std::is_arithmetic<T>::value && sizeof(T) <= 8, "a warp shuffle moves a scalar of at most 8 bytes");
    unsigned long long b = 0;
    memcpy(&b, &v, sizeof v);
    return b;
}
template <typename T> T unbits(unsigned long long b)
{
    T v;
    memcpy(&v, &b, sizeof v);
    return v;
}
template <typename T>
T shfl(int op, const char *name, unsigned mask, T v, int arg, int width, const char *file, int line)
{
    return unbits<T>(cudasim_warp(op, mask, bits(v), arg, width, name, file, line));
}
} // namespace cudasim_detail

template <typename T>
T __shfl_sync(unsigned mask, T var, int srcLane, int width = warpSize, const char *file = __builtin_FILE(),
              int line = __builtin_LINE())
{
    return cudasim_detail::shfl(CUDASIM_WARP_SHFL_IDX, "__shfl_sync", mask, var, srcLane, width, file, line);
}
template <typename T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize, const char *file = __builtin_FILE(),
                 int line = __builtin_LINE())
{
    return cudasim_detail::shfl(CUDASIM_WARP_SHFL_UP, "__shfl_up_sync", mask, var, (int)delta, width, file, line);
}
template <typename T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize, const char *file = __builtin_FILE(),
                   int line = __builtin_LINE())
{
    return cudasim_detail::shfl(CUDASIM_WARP_SHFL_DOWN, "__shfl_down_sync", mask, var, (int)delta, width, file,
                                line);
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = warpSize, const char *file = __builtin_FILE(),
                  int line = __builtin_LINE())
{
    return cudasim_detail::shfl(CUDASIM_WARP_SHFL_XOR, "__shfl_xor_sync", mask, var, laneMask, width, file, line);
}
inline unsigned __ballot_sync(unsigned mask, int pred, const char *file = __builtin_FILE(), int line = __builtin_LINE())
{
    return (unsigned)cudasim_warp(CUDASIM_WARP_BALLOT, mask, pred != 0, 0, 32, "__ballot_sync", file, line);
}
inline int __any_sync(unsigned mask, int pred, const char *file = __builtin_FILE(), int line = __builtin_LINE())
{
    return cudasim_warp(CUDASIM_WARP_BALLOT, mask, pred != 0, 0, 32, "__any_sync", file, line) != 0;
}
inline int __all_sync(unsigned mask, int pred, const char *file = __builtin_FILE(), int line = __builtin_LINE())
{
    return cudasim_warp(CUDASIM_WARP_BALLOT, mask, pred != 0, 0, 32, "__all_sync", file, line) == mask;
}
inline unsigned __activemask(void) { return cudasim_activemask(); }
inline unsigned __reduce_add_sync(unsigned mask, unsigned v, const char *file = __builtin_FILE(),
                                  int line = __builtin_LINE())
{
    return (unsigned)cudasim_warp(CUDASIM_WARP_REDUCE_ADD, mask, v, 0, 32, "__reduce_add_sync", file, line);
}
inline unsigned __reduce_min_sync(unsigned mask, unsigned v, const char *file = __builtin_FILE(),
                                  int line = __builtin_LINE())
{
    return (unsigned)cudasim_warp(CUDASIM_WARP_REDUCE_MIN, mask, v, 0, 32, "__reduce_min_sync", file, line);
}
inline unsigned __reduce_max_sync(unsigned mask, unsigned v, const char *file = __builtin_FILE(),
                                  int line = __builtin_LINE())
{
    return (unsigned)cudasim_warp(CUDASIM_WARP_REDUCE_MAX, mask, v, 0, 32, "__reduce_max_sync", file, line);
}
inline int __reduce_min_sync(unsigned mask, int v, const char *file = __builtin_FILE(), int line = __builtin_LINE())
{
    return (int)cudasim_warp(CUDASIM_WARP_REDUCE_MIN_S, mask, (unsigned)v, 0, 32, "__reduce_min_sync", file, line);
}
inline int __reduce_max_sync(unsigned mask, int v, const char *file = __builtin_FILE(), int line = __builtin_LINE())
{
    return (int)cudasim_warp(CUDASIM_WARP_REDUCE_MAX_S, mask, (unsigned)v, 0, 32, "__reduce_max_sync", file, line);
}

/* ---------------------------------------------------------------- atomics
 * One simulated thread runs at a time and none is interrupted between its waits, so a
 * read-modify-write is atomic as written. */

#define CUDASIM_ATOMIC(name, T, expr)                                                           \
    inline T name(T *address, T val)                                                            \
    {                                                                                           \
        T old = *address;                                                                       \
        *address = (expr);                                                                      \
        return old;                                                                             \
    }
#define CUDASIM_ATOMIC_ALL(name, expr)                                                          \
    CUDASIM_ATOMIC(name, int, expr)                                                             \
    CUDASIM_ATOMIC(name, unsigned int, expr)                                                    \
    CUDASIM_ATOMIC(name, long long, expr)                                                       \
    CUDASIM_ATOMIC(name, unsigned long long, expr)
CUDASIM_ATOMIC_ALL(atomicAdd, old + val)
CUDASIM_ATOMIC(atomicAdd, float, old + val)
CUDASIM_ATOMIC(atomicAdd, double, old + val)
CUDASIM_ATOMIC_ALL(atomicSub, old - val)
CUDASIM_ATOMIC_ALL(atomicMin, val < old ? val : old)
CUDASIM_ATOMIC_ALL(atomicMax, val > old ? val : old)
CUDASIM_ATOMIC_ALL(atomicExch, val)
CUDASIM_ATOMIC(atomicExch, float, val)
CUDASIM_ATOMIC_ALL(atomicAnd, old & val)
CUDASIM_ATOMIC_ALL(atomicOr, old | val)
CUDASIM_ATOMIC_ALL(atomicXor, old ^ val)
CUDASIM_ATOMIC(atomicInc, unsigned int, old >= val ? 0u : old + 1u)
CUDASIM_ATOMIC(atomicDec, unsigned int, (old == 0u || old > val) ? val : old - 1u)
#undef CUDASIM_ATOMIC_ALL
#undef CUDASIM_ATOMIC
template <typename T> T atomicCAS(T *address, T compare, T val)
{
    static_assert(std::is_integral<T>::value, "atomicCAS takes an integer word");
    T old = *address;
    if (old == compare)
        *address = val;
    return old;
}

/* ---------------------------------------------------------------- device math beyond libm */

inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline float __fdividef(float x, float y) { return x / y; }
inline float fdividef(float x, float y) { return x / y; }
inline float __saturatef(float x) { return x != x ? 0.0f : x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __int_as_float(int v) { return cudasim_detail::unbits<float>((unsigned)v); }
inline int __float_as_int(float v) { return (int)(unsigned)cudasim_detail::bits(v); }
inline float __uint_as_float(unsigned v) { return cudasim_detail::unbits<float>(v); }
inline unsigned __float_as_uint(float v) { return (unsigned)cudasim_detail::bits(v); }
inline double __longlong_as_double(long long v) { return cudasim_detail::unbits<double>((unsigned long long)v); }
inline long long __double_as_longlong(double v) { return (long long)cudasim_detail::bits(v); }
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __popcll(unsigned long long v) { return __builtin_popcountll(v); }
inline int __clz(int v) { return v ? __builtin_clz((unsigned)v) : 32; }
inline int __clzll(long long v) { return v ? __builtin_clzll((unsigned long long)v) : 64; }
inline int __ffs(int v) { return __builtin_ffs(v); }
inline int __ffsll(long long v) { return __builtin_ffsll(v); }
inline unsigned __brev(unsigned v)
{
    unsigned r = 0;
    for (int i = 0; i < 32; i++, v >>= 1)
        r = (r << 1) | (v & 1u);
    return r;
}
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }

inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
inline float2 make_float2(float x, float y) { return float2{x, y}; }
inline int4 make_int4(int x, int y, int z, int w) { return int4{x, y, z, w}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
inline dim3 make_dim3(unsigned x, unsigned y, unsigned z) { return dim3(x, y, z); }

/* ---------------------------------------------------------------- the launch */

/* Where this module's __shared__ variables are (the linker defines these when there are any). */
extern "C" char __start_cudasim_shared[] __attribute__((weak, visibility("hidden")));
extern "C" char __stop_cudasim_shared[] __attribute__((weak, visibility("hidden")));

namespace cudasim_detail {
template <typename T> cudasim_arg arg_of(const T &v)
{
    if constexpr (std::is_pointer<T>::value) {
        using P = typename std::remove_cv<typename std::remove_pointer<T>::type>::type;
        if constexpr (std::is_void<P>::value || std::is_function<P>::value)
            return cudasim_arg{(const void *)v, 1, 1};
        else
            return cudasim_arg{(const void *)v, 1, alignof(P)};
    } else {
        return cudasim_arg{nullptr, 0, 0};
    }
}
template <typename K, typename Tuple> struct Closure {
    K kernel;
    Tuple args;
    static void run(void *c)
    {
        Closure *self = static_cast<Closure *>(c);
        Tuple copy = self->args; // each thread gets its own parameters, as on the GPU
        std::apply(self->kernel, copy);
    }
    static void drop(void *c) { delete static_cast<Closure *>(c); }
};
} // namespace cudasim_detail

template <typename... P, typename... A>
void cudasim_launch(const char *name, void (*kernel)(P...), dim3 grid, dim3 block, size_t shmem,
                    cudaStream_t stream, A &&...args)
{
    static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
    using Tuple = std::tuple<typename std::decay<P>::type...>;
    using C = cudasim_detail::Closure<void (*)(P...), Tuple>;
    C *c = new C{kernel, Tuple(std::forward<A>(args)...)};
    cudasim_arg info[sizeof...(P) + 1];
    int n = 0;
    std::apply([&](const auto &...v) { ((info[n++] = cudasim_detail::arg_of(v)), ...); }, c->args);
    cudasim_launch_kernel(name, (const void *)kernel, grid, block, shmem, stream, info, n, &C::run, c, &C::drop,
                          __start_cudasim_shared, __stop_cudasim_shared);
}

/* cudaFuncSetAttribute on a kernel, as the toolkit's C++ overload. */
template <typename... P> cudaError_t cudaFuncSetAttribute(void (*kernel)(P...), enum cudaFuncAttribute attr, int value)
{
    return cudaFuncSetAttribute((const void *)kernel, attr, value);
}

#endif /* __cplusplus */
#endif /* CUDASIM_CUDA_RUNTIME_H */
