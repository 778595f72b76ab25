/*
 * rt_cuda_kernels.cu — the CUDA twins of the library kernels in mrt_kernels.h (softmax, masked
 * softmax, sum/mean, max, argmax, conv2d, pooling, layernorm, embedding, concat), with the same
 * arguments and the same numerics: NaN propagates through max and softmax, an all -inf softmax
 * row gives NaN (or zeros with zero_masked_rows), argmax takes the first maximum with NaN as the
 * maximum, sums accumulate in double, layernorm takes two passes in double. Generated CUDA code
 * calls these on the model's stream after mrt_device_activate; the CPU versions are the
 * reference they are checked against (tests/numeric on a GPU machine).
 *
 * Habits: all index math is int64 (field case B12: more than 2^31 elements); every kernel is a
 * grid-stride loop, so a grid is capped and never sized from 32-bit products; an empty tensor
 * returns before any launch (a grid of 0 blocks is an invalid configuration, field case B18);
 * each launch is checked with cudaGetLastError and a failure names the kernel. Row-wise
 * reductions over the last axis (inner == 1, the common case) use one block per row with a
 * warp-shuffle block reduction and coalesced reads; over an inner axis (inner > 1) one thread
 * per (outer, inner) column walks the axis, adjacent threads reading adjacent columns. Outputs
 * never alias inputs here (plan.c writes in place only inside elementwise kernels), hence
 * __restrict__.
 */
#include "modelrt.h"
#include "mrt_kernels.h"
#include "mrt_launch.h"
#include "rt_internal.h"

#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>

namespace {

constexpr int kBlock = 256;                  // threads per block for element-wise grids
constexpr int64_t kMaxGrid = 65535LL * 16;   // grid-stride loops cover the rest

unsigned grid_for(int64_t items, int block)
{
    int64_t g = (items + block - 1) / block;
    if (g > kMaxGrid)
        g = kMaxGrid;
    return (unsigned)(g < 1 ? 1 : g);
}

// Threads for one block per row of n elements: a multiple of 32 up to 256.
int row_block(int64_t n)
{
    if (n >= kBlock)
        return kBlock;
    int t = (int)((n + 31) / 32) * 32;
    return t < 32 ? 32 : t;
}

mrt_status launched(const char *fn, const char *kernel)
{
    char what[256];
    snprintf(what, sizeof what, "%s: kernel %s", fn, kernel);
    return rt_cuda_after_launch(what); // its launch error, an earlier fault, or (MODELRT_CUDA_SYNC=1) its own
}

mrt_status bad_arg(const char *fn, const char *why)
{
    return mrt_set_error(MRT_ERR_INVALID_ARG, "%s: %s", fn, why);
}

#define LAUNCH_CHECK(fn, kernel)                                                                \
    do {                                                                                        \
        mrt_status st_ = launched(fn, kernel);                                                  \
        if (st_ != MRT_OK)                                                                      \
            return st_;                                                                         \
    } while (0)

/* ---------------------------------------------------------------- block reductions */

struct MaxOp {
    __device__ float operator()(float a, float b) const { return mrt_maxf(a, b); }
};
struct AddF {
    __device__ float operator()(float a, float b) const { return a + b; }
};
struct AddD {
    __device__ double operator()(double a, double b) const { return a + b; }
};

template <typename T, typename Op>
__device__ __forceinline__ T warp_reduce(T v, Op op)
{
    for (int o = 16; o > 0; o >>= 1)
        v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Every thread of the block gets the reduction of v over the block (blockDim.x a multiple of
// 32). Called uniformly by all threads; `shm` holds 32 values. The leading barrier makes it safe
// to call twice in a row with the same `shm`.
template <typename T, typename Op>
__device__ __forceinline__ T block_reduce(T v, Op op, T *shm)
{
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_reduce(v, op);
    __syncthreads();
    if (lane == 0)
        shm[wid] = v;
    __syncthreads();
    T r = shm[0];
    for (int i = 1; i < nw; i++)
        r = op(r, shm[i]);
    return r;
}

// argmax state: value and index; NaN wins (first NaN), else the larger value, ties to the
// smaller index. (-inf, INT64_MAX) is the empty state.
__device__ __forceinline__ void am_combine(float &m, long long &k, float m2, long long k2)
{
    const bool n1 = m != m, n2 = m2 != m2;
    if (n1 || n2) {
        if (n2 && (!n1 || k2 < k)) {
            m = m2;
            k = k2;
        }
        return;
    }
    if (m2 > m || (m2 == m && k2 < k)) {
        m = m2;
        k = k2;
    }
}

/* ---------------------------------------------------------------- softmax */

// x, y [rows, n]: one block per row.
__global__ void softmax_rows_kernel(float *__restrict__ y, const float *__restrict__ x, int64_t rows,
                                    int64_t n, int log)
{
    __shared__ float shm[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        float m = -INFINITY;
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
            m = mrt_maxf(m, xr[j]);
        m = block_reduce(m, MaxOp(), shm);
        if (m == -INFINITY)
            m = 0.0f; // an all -inf row: sum 0, NaN out, as PyTorch
        float s = 0.0f;
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
            s += expf(xr[j] - m);
        s = block_reduce(s, AddF(), shm);
        if (log) {
            const float ls = logf(s);
            for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
                yr[j] = xr[j] - m - ls;
        } else {
            const float inv = 1.0f / s;
            for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
                yr[j] = expf(xr[j] - m) * inv;
        }
    }
}

// A few long rows (split_count): the chunks' maxima and sums of exp(x - chunk max) first
// (part [rows, splits]), then one thread per row combines them in chunk order into the row's
// max and sum (part [rows * splits + r]), then the elements are written chunk by chunk.
struct SoftmaxPart {
    float m, s;
};
__global__ void softmax_split_partial_kernel(SoftmaxPart *__restrict__ part, const float *__restrict__ x, int64_t n,
                                             int64_t chunk, int splits)
{
    __shared__ float shm[32];
    const int64_t r = blockIdx.y, lo = (int64_t)blockIdx.x * chunk, hi = lo + chunk < n ? lo + chunk : n;
    const float *xr = x + r * n;
    float m = -INFINITY;
    for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x)
        m = mrt_maxf(m, xr[j]);
    m = block_reduce(m, MaxOp(), shm);
    const float mc = m == -INFINITY ? 0.0f : m;
    float sum = 0.0f;
    for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x)
        sum += expf(xr[j] - mc);
    sum = block_reduce(sum, AddF(), shm);
    if (threadIdx.x == 0)
        part[r * splits + blockIdx.x] = SoftmaxPart{m, sum};
}

__global__ void softmax_split_combine_kernel(SoftmaxPart *__restrict__ part, int64_t rows, int splits)
{
    for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += (int64_t)gridDim.x * blockDim.x) {
        const SoftmaxPart *p = part + r * splits;
        float m = -INFINITY;
        for (int k = 0; k < splits; k++)
            m = mrt_maxf(m, p[k].m);
        if (m == -INFINITY)
            m = 0.0f; // an all -inf row: sum 0, NaN out, as PyTorch
        float sum = 0.0f;
        for (int k = 0; k < splits; k++)
            if (p[k].m != -INFINITY) // an all -inf chunk adds nothing
                sum += p[k].s * expf(p[k].m - m);
        part[rows * splits + r] = SoftmaxPart{m, sum};
    }
}

__global__ void softmax_split_write_kernel(float *__restrict__ y, const float *__restrict__ x,
                                           const SoftmaxPart *__restrict__ row, int64_t n, int64_t chunk, int log)
{
    const int64_t r = blockIdx.y, lo = (int64_t)blockIdx.x * chunk, hi = lo + chunk < n ? lo + chunk : n;
    const float *xr = x + r * n;
    float *yr = y + r * n;
    const float m = row[r].m;
    if (log) {
        const float ls = logf(row[r].s);
        for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x)
            yr[j] = xr[j] - m - ls;
    } else {
        const float inv = 1.0f / row[r].s;
        for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x)
            yr[j] = expf(xr[j] - m) * inv;
    }
}

// x, y [outer, n, inner], inner > 1, few columns down a long axis: the split form by columns.
// Block (32, 8): blockIdx.x is (o, a tile of 32 columns), its 8 lanes go down chunk blockIdx.y;
// part [outer * inner, splits] gets each chunk's max and sum (softmax_split_combine_kernel
// then combines them per column, as per row).
__global__ void softmax_cols_partial_kernel(SoftmaxPart *__restrict__ part, const float *__restrict__ x, int64_t n,
                                            int64_t inner, int64_t tiles, int64_t chunk, int splits)
{
    __shared__ float shm[8][33];
    const int64_t o = blockIdx.x / tiles, i = (int64_t)(blockIdx.x - o * tiles) * 32 + threadIdx.x;
    const int64_t lo = (int64_t)blockIdx.y * chunk, hi = lo + chunk < n ? lo + chunk : n;
    const float *xc = x + o * n * inner + i;
    float m = -INFINITY;
    if (i < inner)
        for (int64_t j = lo + threadIdx.y; j < hi; j += 8)
            m = mrt_maxf(m, xc[j * inner]);
    shm[threadIdx.y][threadIdx.x] = m;
    __syncthreads();
    for (int k = 0; k < 8; k++)
        if (k != (int)threadIdx.y)
            m = mrt_maxf(m, shm[k][threadIdx.x]); // every lane gets the chunk's max
    __syncthreads();
    const float mc = m == -INFINITY ? 0.0f : m;
    float sum = 0.0f;
    if (i < inner)
        for (int64_t j = lo + threadIdx.y; j < hi; j += 8)
            sum += expf(xc[j * inner] - mc);
    shm[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && i < inner) {
        for (int k = 1; k < 8; k++)
            sum += shm[k][threadIdx.x];
        part[(o * inner + i) * splits + blockIdx.y] = SoftmaxPart{m, sum};
    }
}

__global__ void softmax_cols_write_kernel(float *__restrict__ y, const float *__restrict__ x,
                                          const SoftmaxPart *__restrict__ col, int64_t n, int64_t inner, int64_t tiles,
                                          int64_t chunk, int log)
{
    const int64_t o = blockIdx.x / tiles, i = (int64_t)(blockIdx.x - o * tiles) * 32 + threadIdx.x;
    if (i >= inner)
        return;
    const int64_t lo = (int64_t)blockIdx.y * chunk, hi = lo + chunk < n ? lo + chunk : n;
    const float *xc = x + o * n * inner + i;
    float *yc = y + o * n * inner + i;
    const SoftmaxPart c = col[o * inner + i];
    const float ls = logf(c.s), inv = 1.0f / c.s;
    for (int64_t j = lo + threadIdx.y; j < hi; j += 8)
        yc[j * inner] = log ? xc[j * inner] - c.m - ls : expf(xc[j * inner] - c.m) * inv;
}

// x, y [outer, n, inner], inner > 1: one thread per (o, i) column.
__global__ void softmax_cols_kernel(float *__restrict__ y, const float *__restrict__ x, int64_t outer,
                                    int64_t n, int64_t inner, int log)
{
    const int64_t cols = outer * inner;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < cols;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t o = t / inner, i = t - o * inner;
        const float *xr = x + o * n * inner + i;
        float *yr = y + o * n * inner + i;
        float m = -INFINITY;
        for (int64_t j = 0; j < n; j++)
            m = mrt_maxf(m, xr[j * inner]);
        if (m == -INFINITY)
            m = 0.0f;
        float s = 0.0f;
        for (int64_t j = 0; j < n; j++)
            s += expf(xr[j * inner] - m);
        if (log) {
            const float ls = logf(s);
            for (int64_t j = 0; j < n; j++)
                yr[j * inner] = xr[j * inner] - m - ls;
        } else {
            const float inv = 1.0f / s;
            for (int64_t j = 0; j < n; j++)
                yr[j * inner] = expf(xr[j * inner] - m) * inv;
        }
    }
}

// x, y [rows, n]; row r sees keys j < lim (causal: (r % L) + 1).
__global__ void softmax_masked_kernel(float *__restrict__ y, const float *__restrict__ x, int64_t rows,
                                      int64_t n, int64_t L, int causal, int zero_masked_rows)
{
    __shared__ float shm[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        int64_t lim = causal ? (r % L) + 1 : n;
        if (lim > n)
            lim = n;
        float m = -INFINITY;
        for (int64_t j = threadIdx.x; j < lim; j += blockDim.x)
            m = mrt_maxf(m, xr[j]);
        m = block_reduce(m, MaxOp(), shm);
        if (m == -INFINITY && zero_masked_rows) {
            for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
                yr[j] = 0.0f;
            continue; // uniform across the block: m is the same in every thread
        }
        float s = 0.0f;
        for (int64_t j = threadIdx.x; j < lim; j += blockDim.x)
            s += expf(xr[j] - m);
        s = block_reduce(s, AddF(), shm);
        const float inv = 1.0f / s;
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
            yr[j] = j < lim ? expf(xr[j] - m) * inv : 0.0f;
    }
}

/* ---------------------------------------------------------------- attention */

// Score of key j for the query row qr: (q . k_j summed over E in order) * scale + mask[j].
__device__ __forceinline__ float attn_score(const mrt_attention_desc &d, const float *qr, const float *kb,
                                            const float *mr, int64_t j)
{
    const int nb = d.nb;
    const float *kr = kb + j * d.k[nb];
    float acc = 0.0f;
    for (int64_t e = 0; e < d.E; e++)
        acc = acc + qr[e * d.q[nb + 1]] * kr[e * d.k[nb + 1]];
    float s = acc * d.scale;
    if (mr)
        s = s + mr[j * d.m[nb + 1]];
    return s;
}

// out = softmax(scale q k^T + mask) v (mrt_cuda_attention_f32): one block per query row of one
// batch item (rows = batch items * L). The scores are recomputed in each of three passes over
// the keys the row sees (the maximum; the sum of e^(s - max) in double; p v, a block of keys at
// a time through shared memory, threads over the head) instead of being stored.
__global__ void attention_kernel(mrt_attention_desc d, float *__restrict__ out, const float *__restrict__ q,
                                 const float *__restrict__ k, const float *__restrict__ v,
                                 const float *__restrict__ mask, int64_t rows)
{
    __shared__ float shm[32];
    __shared__ double shd[32];
    __shared__ float pj[kBlock];
    const int nb = d.nb;
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const int64_t i = row % d.L;
        int64_t rest = row / d.L, qo = 0, ko = 0, vo = 0, mo = 0, oo = 0;
        for (int b = nb - 1; b >= 0; b--) {
            const int64_t ix = rest % d.batch[b];
            rest /= d.batch[b];
            qo += ix * d.q[b];
            ko += ix * d.k[b];
            vo += ix * d.v[b];
            mo += ix * d.m[b];
            oo += ix * d.o[b];
        }
        const float *qr = q + qo + i * d.q[nb], *kb = k + ko;
        const float *mr = mask ? mask + mo + i * d.m[nb] : nullptr;
        const int64_t lim = d.causal ? (i + 1 < d.S ? i + 1 : d.S) : d.S;
        float m = -INFINITY;
        for (int64_t j = threadIdx.x; j < lim; j += blockDim.x)
            m = mrt_maxf(m, attn_score(d, qr, kb, mr, j));
        m = block_reduce(m, MaxOp(), shm);
        const bool zero = m == -INFINITY && d.zero_masked_rows; // uniform across the block
        double s = 0.0;
        for (int64_t j = threadIdx.x; j < lim && !zero; j += blockDim.x)
            s += mrt_exp_nonpos(attn_score(d, qr, kb, mr, j) - m);
        s = block_reduce(s, AddD(), shd);
        const float inv = (float)(1.0 / s);
        for (int64_t d0 = 0; d0 < d.Ev; d0 += blockDim.x) {
            const int64_t c = d0 + threadIdx.x;
            float acc = 0.0f;
            for (int64_t j0 = 0; j0 < lim; j0 += blockDim.x) {
                const int64_t j = j0 + threadIdx.x;
                __syncthreads(); // the previous chunk's reads of pj are done
                pj[threadIdx.x] = j < lim && !zero ? mrt_exp_nonpos(attn_score(d, qr, kb, mr, j) - m) * inv : 0.0f;
                __syncthreads();
                const int64_t n = lim - j0 < (int64_t)blockDim.x ? lim - j0 : (int64_t)blockDim.x;
                for (int64_t jj = 0; jj < n && c < d.Ev; jj++)
                    acc = acc + pj[jj] * v[vo + (j0 + jj) * d.v[nb] + c * d.v[nb + 1]];
            }
            if (c < d.Ev)
                out[oo + i * d.o[nb] + c * d.o[nb + 1]] = acc;
        }
        __syncthreads(); // pj is free for the next row
    }
}

/* ---------------------------------------------------------------- sum, max, argmax */

__global__ void sum_rows_kernel(float *__restrict__ y, const float *__restrict__ x, int64_t rows, int64_t n,
                                int mean)
{
    __shared__ double shm[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *xr = x + r * n;
        double s = 0.0;
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
            s += xr[j];
        s = block_reduce(s, AddD(), shm);
        if (threadIdx.x == 0)
            y[r] = (float)(mean ? s / (double)n : s);
    }
}

__global__ void max_rows_kernel(float *__restrict__ y, const float *__restrict__ x, int64_t rows, int64_t n)
{
    __shared__ float shm[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *xr = x + r * n;
        float m = -INFINITY; // n >= 1: every row has a first element
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
            m = mrt_maxf(m, xr[j]);
        m = block_reduce(m, MaxOp(), shm);
        if (threadIdx.x == 0)
            y[r] = m;
    }
}

__global__ void argmax_rows_kernel(int64_t *__restrict__ y, const float *__restrict__ x, int64_t rows,
                                   int64_t n)
{
    __shared__ float shm_m[32];
    __shared__ long long shm_k[32];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *xr = x + r * n;
        float m = -INFINITY;
        long long k = LLONG_MAX;
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
            am_combine(m, k, xr[j], (long long)j);
        for (int o = 16; o > 0; o >>= 1) {
            const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
            const long long k2 = __shfl_xor_sync(0xffffffffu, k, o);
            am_combine(m, k, m2, k2);
        }
        __syncthreads();
        if (lane == 0) {
            shm_m[wid] = m;
            shm_k[wid] = k;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            m = shm_m[0];
            k = shm_k[0];
            for (int i = 1; i < nw; i++)
                am_combine(m, k, shm_m[i], shm_k[i]);
            y[r] = (int64_t)k;
        }
    }
}

/* ---------------------------------------------------------------- split and tiled reductions
 * A few long rows (one row of 1M) would leave all but a few SMs idle with a block per row: each
 * row is cut into `splits` chunks, a block each, and a second kernel combines the chunks'
 * partials of each row in chunk order, so the result does not depend on scheduling. The
 * partials live in the stream's library workspace (rt_cuda_workspace): stream-ordered, so a
 * run allocates nothing and a CUDA graph captures it. A reduction over a strided axis (inner >
 * 1) reads 32 consecutive columns per block with 8 lanes down the axis (coalesced; a tree over
 * the lanes in shared memory), and few columns split the axis over blocks the same way. */
struct RedSum { // sum and mean, in double as the CPU loop
    typedef double T;
    typedef float Out;
    __device__ static T id() { return 0.0; }
    __device__ static T of(float v, int64_t) { return (double)v; }
    __device__ static T comb(T a, T b) { return a + b; }
    __device__ static Out out(T a, int64_t n, int mean) { return (float)(mean ? a / (double)n : a); }
};
struct RedMax {
    typedef float T;
    typedef float Out;
    __device__ static T id() { return -INFINITY; }
    __device__ static T of(float v, int64_t) { return v; }
    __device__ static T comb(T a, T b) { return mrt_maxf(a, b); }
    __device__ static Out out(T a, int64_t, int) { return a; }
};
struct ArgState {
    float m;
    long long k;
};
struct RedArgmax { // the first maximum, the first NaN (am_combine)
    typedef ArgState T;
    typedef int64_t Out;
    __device__ static T id() { return T{-INFINITY, LLONG_MAX}; }
    __device__ static T of(float v, int64_t j) { return T{v, (long long)j}; }
    __device__ static T comb(T a, T b)
    {
        am_combine(a.m, a.k, b.m, b.k);
        return a;
    }
    __device__ static Out out(T a, int64_t, int) { return (int64_t)a.k; }
};

// The reduction of a over the block (a power-of-two blockDim.x of at most kBlock), in a fixed
// tree order; every thread gets it. Called uniformly.
template <typename R> __device__ typename R::T tree_reduce(typename R::T a, typename R::T *shm)
{
    __syncthreads();
    shm[threadIdx.x] = a;
    __syncthreads();
    for (int h = blockDim.x / 2; h > 0; h /= 2) {
        if ((int)threadIdx.x < h)
            shm[threadIdx.x] = R::comb(shm[threadIdx.x], shm[threadIdx.x + h]);
        __syncthreads();
    }
    return shm[0];
}

// part [rows, splits]: block (s, r) reduces chunk s of row r of x [rows, n].
template <typename R>
__global__ void reduce_rows_split_kernel(typename R::T *__restrict__ part, const float *__restrict__ x, int64_t n,
                                         int64_t chunk, int splits)
{
    __shared__ typename R::T shm[kBlock];
    const int64_t r = blockIdx.y, lo = (int64_t)blockIdx.x * chunk, hi = lo + chunk < n ? lo + chunk : n;
    const float *xr = x + r * n;
    typename R::T a = R::id();
    for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x)
        a = R::comb(a, R::of(xr[j], j));
    a = tree_reduce<R>(a, shm);
    if (threadIdx.x == 0)
        part[r * splits + blockIdx.x] = a;
}

// y [lines] from part [lines, splits], each line's partials combined in order.
template <typename R>
__global__ void reduce_finish_kernel(typename R::Out *__restrict__ y, const typename R::T *__restrict__ part,
                                     int64_t lines, int splits, int64_t n, int mean)
{
    __shared__ typename R::T shm[kBlock];
    for (int64_t l = blockIdx.x; l < lines; l += gridDim.x) {
        typename R::T a = R::id();
        for (int s = threadIdx.x; s < splits; s += blockDim.x)
            a = R::comb(a, part[l * splits + s]);
        a = tree_reduce<R>(a, shm);
        if (threadIdx.x == 0)
            y[l] = R::out(a, n, mean);
    }
}

// x [outer, n, inner], inner > 1; block (32, 8): blockIdx.x is (o, a tile of 32 columns i), its
// 8 lanes go down chunk blockIdx.y of the n axis. With one chunk it writes y [outer, inner];
// else part [outer * inner, splits].
template <typename R>
__global__ void reduce_cols_tiled_kernel(typename R::Out *__restrict__ y, typename R::T *__restrict__ part,
                                         const float *__restrict__ x, int64_t n, int64_t inner, int64_t tiles,
                                         int64_t chunk, int splits, int mean)
{
    __shared__ typename R::T shm[8][33];
    const int64_t o = blockIdx.x / tiles, i = (int64_t)(blockIdx.x - o * tiles) * 32 + threadIdx.x;
    const int64_t lo = (int64_t)blockIdx.y * chunk, hi = lo + chunk < n ? lo + chunk : n;
    typename R::T a = R::id();
    if (i < inner)
        for (int64_t j = lo + threadIdx.y; j < hi; j += 8)
            a = R::comb(a, R::of(x[(o * n + j) * inner + i], j));
    shm[threadIdx.y][threadIdx.x] = a;
    __syncthreads();
    if (threadIdx.y == 0 && i < inner) {
        for (int k = 1; k < 8; k++)
            a = R::comb(a, shm[k][threadIdx.x]);
        if (splits == 1)
            y[o * inner + i] = R::out(a, n, mean);
        else
            part[(o * inner + i) * splits + blockIdx.y] = a;
    }
}

// How many chunks to cut the n axis into so that about kSplitBlocks blocks work, each on at least
// `min_chunk` elements, with the partials within the workspace; 1: no split.
constexpr int64_t kSplitBlocks = 1024;
int split_count(int64_t lines_blocks, int64_t n, int64_t min_chunk, int64_t lines, size_t part_bytes, size_t ws)
{
    if (lines_blocks >= kSplitBlocks / 4 || n < 2 * min_chunk)
        return 1;
    int64_t s = kSplitBlocks / lines_blocks, most = (n + min_chunk - 1) / min_chunk;
    if (s > most)
        s = most;
    if (s > 65535)
        s = 65535;
    while (s > 1 && (size_t)(lines * s) * part_bytes > ws)
        s /= 2;
    return (int)(s < 1 ? 1 : s);
}

// The reduction R of x [outer, n, inner] along n into y [outer, inner] (n >= 1) with the split
// rows kernels (inner == 1: `splits` chunks, from rows_splits) or the tiled columns one.
template <typename R>
mrt_status reduce_launch(const char *fn, typename R::Out *y, const float *x, int64_t outer, int64_t n, int64_t inner,
                         int mean, cudaStream_t s, int splits)
{
    typedef typename R::T T;
    int device = 0;
    void *ws = NULL;
    mrt_status st = MRT_OK;
    if (cudaGetDevice(&device) != cudaSuccess)
        return launched(fn, "cudaGetDevice");
    if (inner == 1) {
        if ((st = rt_cuda_workspace(device, s, &ws)) != MRT_OK)
            return st;
        const int64_t chunk = (n + splits - 1) / splits;
        MRT_LAUNCH(reduce_rows_split_kernel<R>, dim3((unsigned)splits, (unsigned)outer), kBlock, 0, s, (T *)ws, x, n,
                   chunk, splits);
        if ((st = launched(fn, "reduce_rows_split_kernel")) != MRT_OK)
            return st;
        MRT_LAUNCH(reduce_finish_kernel<R>, grid_for(outer, 1), splits <= 32 ? 32 : splits <= 64 ? 64 : kBlock, 0, s,
                   y, (const T *)ws, outer, splits, n, mean);
        return launched(fn, "reduce_finish_kernel");
    }
    const int64_t tiles = (inner + 31) / 32, blocks = outer * tiles;
    splits = split_count(blocks, n, 64, outer * inner, sizeof(T), rt_cuda_workspace_bytes(device));
    if (splits > 1 && (st = rt_cuda_workspace(device, s, &ws)) != MRT_OK)
        return st;
    const int64_t chunk = (n + splits - 1) / splits;
    MRT_LAUNCH(reduce_cols_tiled_kernel<R>, dim3((unsigned)blocks, (unsigned)splits), dim3(32, 8), 0, s, y, (T *)ws, x,
               n, inner, tiles, chunk, splits, mean);
    if ((st = launched(fn, "reduce_cols_tiled_kernel")) != MRT_OK || splits == 1)
        return st;
    MRT_LAUNCH(reduce_finish_kernel<R>, grid_for(outer * inner, 1), 32, 0, s, y, (const T *)ws, outer * inner, splits,
               n, mean);
    return launched(fn, "reduce_finish_kernel");
}

// Chunks per row for few long rows (1: a block per row).
template <typename R> int rows_splits(int64_t outer, int64_t n)
{
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) {
        (void)cudaGetLastError();
        return 1;
    }
    return split_count(outer, n, 8 * kBlock, outer, sizeof(typename R::T), rt_cuda_workspace_bytes(device));
}

/* ---------------------------------------------------------------- conv2d, pooling */

// col [Cg*KH*KW, OH*OW] = im2col of one image's group xg [Cg, H, W] (as mrt_conv2d_f32).
// y [N, O, OH, OW] of a grouped convolution with few taps per output (depthwise: one channel per
// group): each thread sums the Cg*KH*KW taps of its output element directly, so all images and
// groups take one launch instead of an im2col and a GEMM each (MobileNet's depthwise layers).
__global__ void conv_direct_kernel(float *__restrict__ y, const float *__restrict__ x, const float *__restrict__ w,
                                   int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int KH, int KW, int64_t OH,
                                   int64_t OW, int sh, int sw, int pt, int pl, int dh, int dw, int64_t Cg, int64_t Og)
{
    const int64_t total = N * O * OH * OW;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t ow = t % OW, r1 = t / OW, oh = r1 % OH, r2 = r1 / OH, o = r2 % O, n = r2 / O;
        const float *xg = x + (n * C + (o / Og) * Cg) * H * W;
        const float *wo = w + o * Cg * KH * KW;
        float acc = 0.0f;
        for (int64_t c = 0; c < Cg; c++)
            for (int i = 0; i < KH; i++) {
                const int64_t ih = oh * sh - pt + (int64_t)i * dh;
                if (ih < 0 || ih >= H)
                    continue;
                for (int j = 0; j < KW; j++) {
                    const int64_t iw = ow * sw - pl + (int64_t)j * dw;
                    if (iw >= 0 && iw < W)
                        acc += xg[(c * H + ih) * W + iw] * wo[(c * KH + i) * KW + j];
                }
            }
        y[t] = acc;
    }
}

__global__ void im2col_kernel(float *__restrict__ col, const float *__restrict__ xg, int64_t Cg, int64_t H,
                              int64_t W, int KH, int KW, int64_t OH, int64_t OW, int sh, int sw, int pt,
                              int pl, int dh, int dw)
{
    const int64_t P = OH * OW, total = Cg * KH * KW * P;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = t / P, p = t - row * P;
        const int kw = (int)(row % KW);
        const int64_t rk = row / KW;
        const int kh = (int)(rk % KH);
        const int64_t c = rk / KH;
        const int64_t oh = p / OW, ow = p - oh * OW;
        const int64_t ih = oh * sh - pt + (int64_t)kh * dh, iw = ow * sw - pl + (int64_t)kw * dw;
        col[t] = (ih >= 0 && ih < H && iw >= 0 && iw < W) ? xg[(c * H + ih) * W + iw] : 0.0f;
    }
}

__global__ void maxpool2d_kernel(float *__restrict__ y, const float *__restrict__ x, int64_t NC, int64_t H,
                                 int64_t W, int64_t OH, int64_t OW, int kh, int kw, int sh, int sw, int pt,
                                 int pl, int dh, int dw)
{
    const int64_t total = NC * OH * OW;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t ow = t % OW, r = t / OW, oh = r % OH, p = r / OH;
        const float *xp = x + p * H * W;
        float m = -INFINITY;
        for (int i = 0; i < kh; i++) {
            const int64_t ih = oh * sh - pt + (int64_t)i * dh;
            if (ih < 0 || ih >= H)
                continue;
            for (int j = 0; j < kw; j++) {
                const int64_t iw = ow * sw - pl + (int64_t)j * dw;
                if (iw >= 0 && iw < W)
                    m = mrt_maxf(m, xp[ih * W + iw]);
            }
        }
        y[t] = m;
    }
}

__global__ void avgpool2d_kernel(float *__restrict__ y, const float *__restrict__ x, int64_t NC, int64_t H,
                                 int64_t W, int64_t OH, int64_t OW, int kh, int kw, int sh, int sw, int pt,
                                 int pl, int pb, int pr, int count_include_pad)
{
    const int64_t total = NC * OH * OW;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t ow = t % OW, r = t / OW, oh = r % OH, p = r / OH;
        const float *xp = x + p * H * W;
        const int64_t h0 = oh * sh - pt, w0 = ow * sw - pl;
        const int64_t h1 = h0 + kh, w1 = w0 + kw;
        // clipped to the explicitly padded input (divisor) and to the input (sum); B23, B24
        const int64_t ph0 = h0 < -pt ? -pt : h0, ph1 = h1 > H + pb ? H + pb : h1;
        const int64_t pw0 = w0 < -pl ? -pl : w0, pw1 = w1 > W + pr ? W + pr : w1;
        const int64_t ih0 = h0 < 0 ? 0 : h0, ih1 = h1 > H ? H : h1;
        const int64_t iw0 = w0 < 0 ? 0 : w0, iw1 = w1 > W ? W : w1;
        double s = 0.0;
        for (int64_t ih = ih0; ih < ih1; ih++)
            for (int64_t iw = iw0; iw < iw1; iw++)
                s += xp[ih * W + iw];
        const int64_t cnt = count_include_pad ? (ph1 - ph0) * (pw1 - pw0) : (ih1 - ih0) * (iw1 - iw0);
        y[t] = cnt > 0 ? (float)(s / (double)cnt) : 0.0f;
    }
}

__global__ void adaptive_avgpool2d_kernel(float *__restrict__ y, const float *__restrict__ x, int64_t NC,
                                          int64_t H, int64_t W, int64_t OH, int64_t OW)
{
    const int64_t total = NC * OH * OW;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t j = t % OW, r = t / OW, i = r % OH, p = r / OH;
        const float *xp = x + p * H * W;
        const int64_t h0 = i * H / OH, h1 = ((i + 1) * H + OH - 1) / OH;
        const int64_t w0 = j * W / OW, w1 = ((j + 1) * W + OW - 1) / OW;
        double s = 0.0;
        for (int64_t ih = h0; ih < h1; ih++)
            for (int64_t iw = w0; iw < w1; iw++)
                s += xp[ih * W + iw];
        y[t] = (float)(s / (double)((h1 - h0) * (w1 - w0)));
    }
}

/* ---------------------------------------------------------------- pooling gradients (training)
 *
 * One thread per input element (p, ih, iw) gathers the outputs whose window holds it, in
 * row-major output order, which is the order in which the CPU kernels scatter into it: the
 * same additions in the same order, and no atomics. */

__global__ void maxpool2d_grad_kernel(float *__restrict__ dx, const float *__restrict__ g, const float *__restrict__ x,
                                      int64_t NC, int64_t H, int64_t W, int64_t OH, int64_t OW, int kh, int kw, int sh,
                                      int sw, int pt, int pl, int dh, int dw)
{
    const int64_t total = NC * H * W;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t iw = t % W, r = t / W, ih = r % H, p = r / H;
        const float *xp = x + p * H * W;
        float s = 0.0f;
        for (int i = kh - 1; i >= 0; i--) { // oh ascending
            const int64_t a = ih + pt - (int64_t)i * dh;
            if (a < 0 || a % sh)
                continue;
            const int64_t oh = a / sh;
            if (oh >= OH)
                continue;
            for (int j = kw - 1; j >= 0; j--) {
                const int64_t b = iw + pl - (int64_t)j * dw;
                if (b < 0 || b % sw)
                    continue;
                const int64_t ow = b / sw;
                if (ow >= OW)
                    continue;
                if (mrt_maxpool2d_argmax(xp, H, W, oh, ow, kh, kw, sh, sw, pt, pl, dh, dw) == ih * W + iw)
                    s += g[(p * OH + oh) * OW + ow];
            }
        }
        dx[t] = s;
    }
}

__global__ void avgpool2d_grad_kernel(float *__restrict__ dx, const float *__restrict__ g, int64_t NC, int64_t H,
                                      int64_t W, int64_t OH, int64_t OW, int kh, int kw, int sh, int sw, int pt, int pl,
                                      int pb, int pr, int count_include_pad)
{
    const int64_t total = NC * H * W;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t iw = t % W, r = t / W, ih = r % H, p = r / H;
        // windows [oh*sh - pt, + kh) holding ih: oh in [ceil((ih + pt - kh + 1) / sh), (ih + pt) / sh]
        const int64_t ah = ih + pt - kh + 1, aw = iw + pl - kw + 1;
        const int64_t oh0 = ah <= 0 ? 0 : (ah + sh - 1) / sh, ow0 = aw <= 0 ? 0 : (aw + sw - 1) / sw;
        int64_t oh1 = (ih + pt) / sh, ow1 = (iw + pl) / sw;
        if (oh1 > OH - 1)
            oh1 = OH - 1;
        if (ow1 > OW - 1)
            ow1 = OW - 1;
        float s = 0.0f;
        for (int64_t oh = oh0; oh <= oh1; oh++)
            for (int64_t ow = ow0; ow <= ow1; ow++) {
                const int64_t cnt = mrt_avgpool2d_count(H, W, oh, ow, kh, kw, sh, sw, pt, pl, pb, pr, count_include_pad);
                if (cnt > 0)
                    s += g[(p * OH + oh) * OW + ow] / (float)cnt;
            }
        dx[t] = s;
    }
}

__global__ void adaptive_avgpool2d_grad_kernel(float *__restrict__ dx, const float *__restrict__ g, int64_t NC,
                                               int64_t H, int64_t W, int64_t OH, int64_t OW)
{
    const int64_t total = NC * H * W;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t iw = t % W, r = t / W, ih = r % H, p = r / H;
        // cells i with floor(i*H/OH) <= ih < ceil((i+1)*H/OH): i in [ih*OH/H, ceil((ih+1)*OH/H))
        int64_t i1 = ((ih + 1) * OH + H - 1) / H, j1 = ((iw + 1) * OW + W - 1) / W;
        if (i1 > OH)
            i1 = OH;
        if (j1 > OW)
            j1 = OW;
        float s = 0.0f;
        for (int64_t i = ih * OH / H; i < i1; i++) {
            const int64_t h0 = i * H / OH, h1 = ((i + 1) * H + OH - 1) / OH;
            if (ih < h0 || ih >= h1)
                continue;
            for (int64_t j = iw * OW / W; j < j1; j++) {
                const int64_t w0 = j * W / OW, w1 = ((j + 1) * W + OW - 1) / OW;
                if (iw < w0 || iw >= w1)
                    continue;
                s += g[(p * OH + i) * OW + j] / (float)(h1 - h0) / (float)(w1 - w0);
            }
        }
        dx[t] = s;
    }
}

/* ---------------------------------------------------------------- conv_transpose2d */

// y [N, O, OH, OW] = conv_transpose2d(x [N, C, H, W], w [C, O/g, KH, KW]): one thread per output
// element gathers the taps that reach it (output row oh gets input row ih through tap kh when
// oh + ph - kh*dh = ih*sh), so no two threads write one element (no atomics). The taps of one
// axis are enumerated once per thread by their residue: kh*dh = oh + ph (mod sh).
__global__ void conv_transpose2d_kernel(float *__restrict__ y, const float *__restrict__ x,
                                        const float *__restrict__ w, int64_t N, int64_t C, int64_t H, int64_t W,
                                        int64_t O, int KH, int KW, int64_t OH, int64_t OW, int sh, int sw, int ph,
                                        int pw, int dh, int dw, int groups)
{
    const int64_t total = N * O * OH * OW, Cg = C / groups, Og = O / groups;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t ow = t % OW, r1 = t / OW, oh = r1 % OH, r2 = r1 / OH, o = r2 % O, n = r2 / O;
        const int64_t g = o / Og, og = o - g * Og;
        float acc = 0.0f;
        for (int kh = 0; kh < KH; kh++) {
            const int64_t hn = oh + ph - (int64_t)kh * dh;
            if (hn < 0 || hn % sh) continue;
            const int64_t ih = hn / sh;
            if (ih >= H) continue;
            for (int kw = 0; kw < KW; kw++) {
                const int64_t wn = ow + pw - (int64_t)kw * dw;
                if (wn < 0 || wn % sw) continue;
                const int64_t iw = wn / sw;
                if (iw >= W) continue;
                const float *xp = x + ((n * C + g * Cg) * H + ih) * W + iw;
                const float *wp = w + ((g * Cg * Og + og) * KH + kh) * KW + kw;
                for (int64_t c = 0; c < Cg; c++)
                    acc += xp[c * H * W] * wp[c * Og * KH * KW];
            }
        }
        y[t] = acc;
    }
}

/* ---------------------------------------------------------------- interpolate */

// y [NC, OH, OW] = interpolate(x [NC, H, W]): one thread per output element, the coordinate
// rules shared with the CPU (mrt_interp2d_at in mrt_kernels.h).
__global__ void interp2d_kernel(float *__restrict__ y, const float *__restrict__ x, int64_t NC, int64_t H,
                                int64_t W, int64_t OH, int64_t OW, int bilinear, int align_corners, float sh,
                                float sw)
{
    const int64_t total = NC * OH * OW;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t ow = t % OW, r = t / OW, oh = r % OH, p = r / OH;
        y[t] = mrt_interp2d_at(x + p * H * W, H, W, OH, OW, oh, ow, bilinear, align_corners, sh, sw);
    }
}

// dx [NC, H, W] = interpolate's input gradient of g [NC, OH, OW] (mrt_interp2d_grad_f32): one
// thread per input element gathers the shares of the outputs that read it, rows and columns found
// by binary search (mrt_interp_first), in the CPU's scatter order, so both give the same bits.
__global__ void interp2d_grad_kernel(float *__restrict__ dx, const float *__restrict__ g, int64_t NC, int64_t H,
                                     int64_t W, int64_t OH, int64_t OW, int bilinear, int align_corners, float sh,
                                     float sw)
{
    const int64_t total = NC * H * W, back = bilinear ? 1 : 0;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t iw = t % W, r = t / W, ih = r % H, p = r / H;
        const int64_t oh0 = mrt_interp_first(sh, bilinear, align_corners, H, OH, ih - back);
        const int64_t oh1 = mrt_interp_first(sh, bilinear, align_corners, H, OH, ih + 1);
        const int64_t ow0 = mrt_interp_first(sw, bilinear, align_corners, W, OW, iw - back);
        const int64_t ow1 = mrt_interp_first(sw, bilinear, align_corners, W, OW, iw + 1);
        float s = 0.0f;
        for (int64_t oh = oh0; oh < oh1; oh++) {
            int64_t th[2], tw[2];
            float lh[2], lw[2];
            const int nh = mrt_interp_taps(sh, oh, bilinear, align_corners, H, OH, th, lh);
            for (int64_t ow = ow0; ow < ow1; ow++) {
                const int nw = mrt_interp_taps(sw, ow, bilinear, align_corners, W, OW, tw, lw);
                const float v = g[(p * OH + oh) * OW + ow];
                for (int a = 0; a < nh; a++) {
                    if (th[a] != ih)
                        continue;
                    for (int b = 0; b < nw; b++)
                        if (tw[b] == iw)
                            s += MRT_FMUL(MRT_FMUL(lh[a], lw[b]), v);
                }
            }
        }
        dx[t] = s;
    }
}

/* ---------------------------------------------------------------- layernorm, embedding, concat */

__global__ void layernorm_kernel(float *__restrict__ y, const float *__restrict__ x, const float *__restrict__ w,
                                 const float *__restrict__ b, int64_t rows, int64_t D, float eps)
{
    __shared__ double shm[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *xr = x + r * D;
        float *yr = y + r * D;
        double s = 0.0;
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x)
            s += xr[j];
        const double mean = block_reduce(s, AddD(), shm) / (double)D;
        double v = 0.0;
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
            const double d = xr[j] - mean;
            v += d * d;
        }
        const double var = block_reduce(v, AddD(), shm) / (double)D;
        const double inv = 1.0 / sqrt(var + (double)eps);
        // the deviation from the mean in double, as on the CPU (mrt_layernorm_f32): a float mean
        // loses the digits of rows with a large common offset
        // w and b may be NULL (layer_norm without them, group_norm, instance_norm)
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
            const float v = (float)(((double)xr[j] - mean) * inv);
            yr[j] = b ? (w ? v * w[j] : v) + b[j] : (w ? v * w[j] : v);
        }
    }
}

// y [n, D] = w[ids]; rows with an id outside [0, V) are skipped and the smallest such position
// goes to *first_bad (initialised to ~0). Dl = max(D, 1), so that D == 0 still checks every id.
__global__ void embedding_kernel(float *__restrict__ y, const void *__restrict__ ids, int ids_i64, int64_t n,
                                 const float *__restrict__ w, int64_t V, int64_t D, int64_t Dl,
                                 unsigned long long *__restrict__ first_bad)
{
    const int64_t total = n * Dl;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = t / Dl, j = t - i * Dl;
        const int64_t id = ids_i64 ? ((const int64_t *)ids)[i] : (int64_t)((const int32_t *)ids)[i];
        if (id < 0 || id >= V) {
            if (j == 0)
                atomicMin(first_bad, (unsigned long long)i);
        } else if (j < D) {
            y[i * D + j] = w[id * D + j];
        }
    }
}

// Running sums along n of x [outer, n, inner] (reverse: from the end): one thread per (o, i)
// line, in double and in the CPU kernel's order (mrt_cumsum_f32), so both round alike.
__global__ void cumsum_kernel(float *__restrict__ y, const float *__restrict__ x, int64_t outer, int64_t n,
                              int64_t inner, int reverse)
{
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < outer * inner;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t o = t / inner, i = t - o * inner;
        const float *xr = x + o * n * inner + i;
        float *yr = y + o * n * inner + i;
        double s = 0.0;
        for (int64_t k = 0; k < n; k++) {
            const int64_t j = reverse ? n - 1 - k : k;
            s += xr[j * inner];
            yr[j * inner] = (float)s;
        }
    }
}

// Running sums of long rows (inner == 1): one block per row, kBlock threads each scanning a
// contiguous chunk: the chunk totals (double) are scanned in shared memory, then each chunk is
// summed again from its offset. Sums in double as the CPU kernel does, in another order, so a
// result may differ from it in the double's last bits (almost never after rounding to float);
// NaN and infinities propagate down the row as there. reverse: the row read and written from its
// end (position k of the scan is element n-1-k).
__global__ void cumsum_rows_kernel(float *__restrict__ y, const float *__restrict__ x, int64_t outer, int64_t n,
                                   int reverse)
{
    __shared__ double part[kBlock];
    const int64_t chunk = (n + kBlock - 1) / kBlock;
    for (int64_t r = blockIdx.x; r < outer; r += gridDim.x) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        const int64_t beg = threadIdx.x * chunk, end = beg + chunk < n ? beg + chunk : n;
        double s = 0.0;
        for (int64_t j = beg; j < end; j++)
            s += xr[reverse ? n - 1 - j : j];
        part[threadIdx.x] = s;
        __syncthreads();
        if (threadIdx.x == 0) { // exclusive scan of the chunk totals
            double acc = 0.0;
            for (int t = 0; t < kBlock; t++) {
                const double v = part[t];
                part[t] = acc;
                acc += v;
            }
        }
        __syncthreads();
        double a = part[threadIdx.x];
        for (int64_t j = beg; j < end; j++) {
            const int64_t e = reverse ? n - 1 - j : j;
            a += xr[e];
            yr[e] = (float)a;
        }
        __syncthreads(); // part is reused by the next row
    }
}

// y[i] = start + step * i, f32 or int64 (mrt_iota).
__global__ void iota_kernel(void *__restrict__ y, int64_t n, double start, double step, int i64)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const double v = start + step * (double)i;
        if (i64)
            ((int64_t *)y)[i] = (int64_t)v;
        else
            ((float *)y)[i] = (float)v;
    }
}

// outer rows of `words` T-sized words from x (row pitch x_row bytes) to y + y_offset (pitch y_row).
template <typename T>
__global__ void concat_kernel(char *__restrict__ y, const char *__restrict__ x, int64_t outer, int64_t words,
                              int64_t x_row, int64_t y_row, int64_t y_offset)
{
    const int64_t total = outer * words;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t o = t / words, k = t - o * words;
        reinterpret_cast<T *>(y + o * y_row + y_offset)[k] = reinterpret_cast<const T *>(x + o * x_row)[k];
    }
}

template <typename T>
mrt_status concat_launch(cudaStream_t s, void *y, const void *x, int64_t outer, int64_t x_row, int64_t y_row,
                         int64_t y_offset)
{
    const int64_t words = x_row / (int64_t)sizeof(T);
    MRT_LAUNCH(concat_kernel<T>, grid_for(outer * words, kBlock), kBlock, 0, s, (char *)y, (const char *)x, outer,
               words, x_row, y_row, y_offset);
    return launched("mrt_cuda_concat_part", "concat_kernel");
}

/* ---------------------------------------------------------------- GEMM epilogue */

// The epilogue of a GEMM cuBLASLt had no algorithm for (rt_cuda_bias_act): C [M, N] with row
// stride ldc, in place, one thread per element, adjacent threads on adjacent columns.
__global__ void bias_act_kernel(float *C, int64_t ldc, int64_t M, int64_t N, const float *__restrict__ bias, int act)
{
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < M * N; t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = t / N, c = t - r * N;
        C[r * ldc + c] = mrt_bias_act(C[r * ldc + c], bias, c, act);
    }
}

} // namespace

/* ---------------------------------------------------------------- entry points */

extern "C" {

mrt_status mrt_cuda_softmax_f32(void *stream, float *y, const float *x, int64_t outer, int64_t n, int64_t inner,
                                int log)
{
    static const char fn[] = "mrt_cuda_softmax_f32";
    if (outer < 0 || n < 0 || inner < 0)
        return bad_arg(fn, "negative dimension");
    if (outer == 0 || n == 0 || inner == 0)
        return MRT_OK;
    cudaStream_t s = (cudaStream_t)stream;
    int device = 0;
    if (inner == 1 && cudaGetDevice(&device) != cudaSuccess)
        return launched(fn, "cudaGetDevice");
    const int splits = inner == 1 ? split_count(outer, n, 8 * kBlock, outer + 1, sizeof(SoftmaxPart),
                                                rt_cuda_workspace_bytes(device))
                                  : 1;
    if (inner == 1 && splits > 1) { // few long rows: split (see softmax_split_partial_kernel)
        void *ws = NULL;
        mrt_status st = rt_cuda_workspace(device, s, &ws);
        if (st != MRT_OK)
            return st;
        SoftmaxPart *part = (SoftmaxPart *)ws;
        const int64_t chunk = (n + splits - 1) / splits;
        MRT_LAUNCH(softmax_split_partial_kernel, dim3((unsigned)splits, (unsigned)outer), kBlock, 0, s, part, x, n,
                   chunk, splits);
        LAUNCH_CHECK(fn, "softmax_split_partial_kernel");
        MRT_LAUNCH(softmax_split_combine_kernel, grid_for(outer, 32), 32, 0, s, part, outer, splits);
        LAUNCH_CHECK(fn, "softmax_split_combine_kernel");
        MRT_LAUNCH(softmax_split_write_kernel, dim3((unsigned)splits, (unsigned)outer), kBlock, 0, s, y, x,
                   part + outer * splits, n, chunk, log);
        LAUNCH_CHECK(fn, "softmax_split_write_kernel");
    } else if (inner == 1) {
        const int t = row_block(n);
        MRT_LAUNCH(softmax_rows_kernel, grid_for(outer, 1), t, 0, s, y, x, outer, n, log);
        LAUNCH_CHECK(fn, "softmax_rows_kernel");
    } else {
        const int64_t tiles = (inner + 31) / 32, blocks = outer * tiles, lines = outer * inner;
        if (cudaGetDevice(&device) != cudaSuccess)
            return launched(fn, "cudaGetDevice");
        const int csplits = split_count(blocks, n, 64, lines + 1, sizeof(SoftmaxPart), rt_cuda_workspace_bytes(device));
        if (csplits > 1) { // few columns down a long axis: split by columns
            void *ws = NULL;
            mrt_status st = rt_cuda_workspace(device, s, &ws);
            if (st != MRT_OK)
                return st;
            SoftmaxPart *part = (SoftmaxPart *)ws;
            const int64_t chunk = (n + csplits - 1) / csplits;
            MRT_LAUNCH(softmax_cols_partial_kernel, dim3((unsigned)blocks, (unsigned)csplits), dim3(32, 8), 0, s, part,
                       x, n, inner, tiles, chunk, csplits);
            LAUNCH_CHECK(fn, "softmax_cols_partial_kernel");
            MRT_LAUNCH(softmax_split_combine_kernel, grid_for(lines, 32), 32, 0, s, part, lines, csplits);
            LAUNCH_CHECK(fn, "softmax_split_combine_kernel");
            MRT_LAUNCH(softmax_cols_write_kernel, dim3((unsigned)blocks, (unsigned)csplits), dim3(32, 8), 0, s, y, x,
                       part + lines * csplits, n, inner, tiles, chunk, log);
            LAUNCH_CHECK(fn, "softmax_cols_write_kernel");
            return MRT_OK;
        }
        MRT_LAUNCH(softmax_cols_kernel, grid_for(outer * inner, kBlock), kBlock, 0, s, y, x, outer, n, inner, log);
        LAUNCH_CHECK(fn, "softmax_cols_kernel");
    }
    return MRT_OK;
}

mrt_status mrt_cuda_attention_f32(void *stream, const mrt_attention_desc *d, float *out, const float *q,
                                  const float *k, const float *v, const float *mask)
{
    static const char fn[] = "mrt_cuda_attention_f32";
    if (!d || d->nb < 0 || d->nb > MRT_ATTN_MAX_BATCH)
        return bad_arg(fn, "batch dims out of range");
    int64_t rows = d->L;
    for (int b = 0; b < d->nb; b++) {
        if (d->batch[b] < 0)
            return bad_arg(fn, "negative batch size");
        rows *= d->batch[b];
    }
    if (d->L < 0 || d->S < 0 || d->E < 0 || d->Ev < 0)
        return bad_arg(fn, "negative dimension");
    if (rows == 0 || d->Ev == 0)
        return MRT_OK;
    MRT_LAUNCH(attention_kernel, grid_for(rows, 1), row_block(d->S > d->Ev ? d->S : d->Ev), 0, (cudaStream_t)stream, *d,
               out, q, k, v, mask, rows);
    LAUNCH_CHECK(fn, "attention_kernel");
    return MRT_OK;
}

mrt_status mrt_cuda_softmax_masked_f32(void *stream, float *y, const float *x, int64_t rows, int64_t n, int64_t L,
                                       int causal, int zero_masked_rows)
{
    static const char fn[] = "mrt_cuda_softmax_masked_f32";
    if (rows < 0 || n < 0)
        return bad_arg(fn, "negative dimension");
    if (causal && L <= 0)
        return bad_arg(fn, "causal mask with query length L <= 0");
    if (rows == 0 || n == 0)
        return MRT_OK;
    MRT_LAUNCH(softmax_masked_kernel, grid_for(rows, 1), row_block(n), 0, (cudaStream_t)stream, y, x, rows, n, L,
               causal, zero_masked_rows);
    LAUNCH_CHECK(fn, "softmax_masked_kernel");
    return MRT_OK;
}

mrt_status mrt_cuda_sum_f32(void *stream, float *y, const float *x, int64_t outer, int64_t n, int64_t inner, int mean)
{
    static const char fn[] = "mrt_cuda_sum_f32";
    if (outer < 0 || n < 0 || inner < 0)
        return bad_arg(fn, "negative dimension");
    if (outer == 0 || inner == 0)
        return MRT_OK;
    cudaStream_t s = (cudaStream_t)stream;
    const int splits = inner == 1 && n > 0 ? rows_splits<RedSum>(outer, n) : 1;
    if (inner == 1 && splits == 1) {
        MRT_LAUNCH(sum_rows_kernel, grid_for(outer, 1), row_block(n), 0, s, y, x, outer, n, mean);
        LAUNCH_CHECK(fn, "sum_rows_kernel");
        return MRT_OK;
    }
    if (n == 0) { // the sum of nothing (the mean of nothing: NaN)
        MRT_LAUNCH(sum_rows_kernel, grid_for(outer * inner, 1), 32, 0, s, y, x, outer * inner, n, mean);
        LAUNCH_CHECK(fn, "sum_rows_kernel");
        return MRT_OK;
    }
    return reduce_launch<RedSum>(fn, y, x, outer, n, inner, mean, s, splits);
}

/* Partial sums of squares for the data-parallel gradient norm: block b of a grid of
 * MRT_CUDA_SUMSQ_BLOCKS (fixed, so the grouping never depends on the device) adds x[j]^2 in
 * double for j = b*blockDim + t, strided by the grid, and writes part[b]. */
__global__ void sumsq_partial_kernel(double *__restrict__ part, const float *__restrict__ x, int64_t n)
{
    __shared__ double shm[32];
    double s = 0.0;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += (int64_t)gridDim.x * blockDim.x)
        s += (double)x[j] * (double)x[j];
    s = block_reduce(s, AddD(), shm);
    if (threadIdx.x == 0)
        part[blockIdx.x] = s;
}

mrt_status mrt_cuda_sumsq_partial_f32(void *stream, double *part, const float *x, int64_t n)
{
    static const char fn[] = "mrt_cuda_sumsq_partial_f32";
    if (n < 0)
        return bad_arg(fn, "negative length");
    MRT_LAUNCH(sumsq_partial_kernel, MRT_CUDA_SUMSQ_BLOCKS, kBlock, 0, (cudaStream_t)stream, part, x, n);
    LAUNCH_CHECK(fn, "sumsq_partial_kernel");
    return MRT_OK;
}

mrt_status mrt_cuda_cumsum_f32(void *stream, float *y, const float *x, int64_t outer, int64_t n, int64_t inner,
                               int reverse)
{
    static const char fn[] = "mrt_cuda_cumsum_f32";
    if (outer < 0 || n < 0 || inner < 0)
        return bad_arg(fn, "negative dimension");
    if (outer == 0 || n == 0 || inner == 0)
        return MRT_OK;
    cudaStream_t s = (cudaStream_t)stream;
    if (inner == 1 && n >= 4 * kBlock && outer < 4096) { // few long rows: a block per row
        MRT_LAUNCH(cumsum_rows_kernel, grid_for(outer, 1), kBlock, 0, s, y, x, outer, n, reverse);
        LAUNCH_CHECK(fn, "cumsum_rows_kernel");
    } else { // a thread per line
        MRT_LAUNCH(cumsum_kernel, grid_for(outer * inner, kBlock), kBlock, 0, s, y, x, outer, n, inner, reverse);
        LAUNCH_CHECK(fn, "cumsum_kernel");
    }
    return MRT_OK;
}

mrt_status mrt_cuda_iota(void *stream, void *y, int64_t n, double start, double step, int i64)
{
    static const char fn[] = "mrt_cuda_iota";
    if (n < 0)
        return bad_arg(fn, "negative length");
    if (n == 0)
        return MRT_OK;
    MRT_LAUNCH(iota_kernel, grid_for(n, kBlock), kBlock, 0, (cudaStream_t)stream, y, n, start, step, i64);
    LAUNCH_CHECK(fn, "iota_kernel");
    return MRT_OK;
}

// scatter_add (mrt_scatter_add_f32): y is zeroed, then one thread per line (o, i) walks the
// positions j = 0 .. k-1 in order and adds g[o, j, i] to y[o, index, i]. No two threads touch
// one element (each owns its (o, i) line of y), so there are no atomics, the work is that of
// reading g once, and every element sums its entries in increasing j, in float, as the CPU
// kernel does: deterministic, and bit-identical to the CPU.
__global__ void scatter_add_kernel(float *__restrict__ y, const float *__restrict__ g, const void *__restrict__ idx,
                                   int idx_i64, int mode, int64_t outer, int64_t n, int64_t k, int64_t inner)
{
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < outer * inner;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t o = t / inner, i = t - o * inner;
        for (int64_t j = 0; j < k; j++) {
            const int64_t at = (o * k + j) * inner + i, pos = mode == 0 ? at : j;
            const int64_t id = idx_i64 ? ((const int64_t *)idx)[pos] : (int64_t)((const int32_t *)idx)[pos];
            if (id >= 0 && id < n)
                y[(o * n + id) * inner + i] += g[at];
        }
    }
}

mrt_status mrt_cuda_scatter_add_f32(void *stream, float *y, const float *g, const void *idx, int idx_i64, int mode,
                                    int64_t outer, int64_t n, int64_t k, int64_t inner)
{
    static const char fn[] = "mrt_cuda_scatter_add_f32";
    if (outer < 0 || n < 0 || k < 0 || inner < 0 || mode < 0 || mode > 1)
        return bad_arg(fn, "negative dimension or bad mode");
    if (outer == 0 || n == 0 || inner == 0)
        return MRT_OK;
    cudaStream_t s = (cudaStream_t)stream;
    cudaError_t e = cudaMemsetAsync(y, 0, sizeof(float) * (size_t)(outer * n * inner), s);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return mrt_set_error(MRT_ERR_CUDA, "%s: zeroing %lld floats failed: %s (%s)", fn, (long long)(outer * n * inner),
                             cudaGetErrorName(e), cudaGetErrorString(e));
    }
    if (k == 0)
        return MRT_OK;
    MRT_LAUNCH(scatter_add_kernel, grid_for(outer * inner, kBlock), kBlock, 0, s, y, g, idx, idx_i64, mode, outer, n, k,
               inner);
    LAUNCH_CHECK(fn, "scatter_add_kernel");
    return MRT_OK;
}

// dropout (mrt_dropout_f32): the mask from the same Philox4x32-10 words as the CPU's.
__global__ void dropout_kernel(float *y, const float *x, int64_t n, float p, float scale, uint64_t seed, uint64_t step,
                               uint32_t site)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = mrt_dropout_elem(x[i], p, scale, seed, step, site, i);
}

mrt_status mrt_cuda_dropout_f32(void *stream, float *y, const float *x, int64_t n, float p, float scale, uint64_t seed,
                                uint64_t step, uint32_t site)
{
    static const char fn[] = "mrt_cuda_dropout_f32";
    if (n < 0)
        return bad_arg(fn, "negative length");
    if (n == 0)
        return MRT_OK;
    MRT_LAUNCH(dropout_kernel, grid_for(n, kBlock), kBlock, 0, (cudaStream_t)stream, y, x, n, p, scale, seed, step, site);
    LAUNCH_CHECK(fn, "dropout_kernel");
    return MRT_OK;
}

namespace {
// One launch of the multi-tensor optimizer step, passed by value as the kernel's parameters:
// tensor k owns blocks [first_block[k], first_block[k + 1]).
struct OptChunk {
    mrt_opt_args a;
    mrt_opt_tensor t[MRT_OPT_CHUNK];
    int first_block[MRT_OPT_CHUNK + 1];
    int n;
};
constexpr int kOptBlocksPerTensor = 1024; // a larger tensor is covered grid-stride
} // namespace

__global__ void opt_multi_kernel(OptChunk c)
{
    const int b = (int)blockIdx.x;
    int k = 0;
    while (k + 1 < c.n && b >= c.first_block[k + 1])
        k++;
    const mrt_opt_tensor t = c.t[k];
    const int64_t nb = c.first_block[k + 1] - c.first_block[k];
    for (int64_t i = (int64_t)(b - c.first_block[k]) * blockDim.x + threadIdx.x; i < t.n; i += nb * blockDim.x)
        mrt_opt_elem(&c.a, t.p + i, t.g[i], t.s0 ? t.s0 + i : NULL, t.s1 ? t.s1 + i : NULL);
}

mrt_status mrt_cuda_opt_step_multi_f32(void *stream, const struct mrt_opt_args *a, const struct mrt_opt_tensor *t, int n)
{
    static const char fn[] = "mrt_cuda_opt_step_multi_f32";
    if (n < 0 || !a || (n > 0 && !t))
        return bad_arg(fn, "negative count or no arguments");
    OptChunk c;
    memset(&c, 0, sizeof c);
    c.a = *a;
    for (int k0 = 0; k0 < n; k0 += MRT_OPT_CHUNK) {
        c.n = 0;
        int blocks = 0;
        for (int k = k0; k < n && k < k0 + MRT_OPT_CHUNK; k++) {
            if (t[k].n < 0)
                return bad_arg(fn, "negative length");
            if (t[k].n == 0)
                continue;
            int64_t want = (t[k].n + kBlock - 1) / kBlock;
            c.t[c.n] = t[k];
            c.first_block[c.n++] = blocks;
            blocks += (int)(want < kOptBlocksPerTensor ? want : kOptBlocksPerTensor);
        }
        if (!c.n)
            continue;
        c.first_block[c.n] = blocks;
        MRT_LAUNCH(opt_multi_kernel, blocks, kBlock, 0, (cudaStream_t)stream, c);
        LAUNCH_CHECK(fn, "opt_multi_kernel");
    }
    return MRT_OK;
}

mrt_status mrt_cuda_max_f32(void *stream, float *y, const float *x, int64_t outer, int64_t n, int64_t inner)
{
    static const char fn[] = "mrt_cuda_max_f32";
    if (outer < 0 || n < 0 || inner < 0)
        return bad_arg(fn, "negative dimension");
    if (outer == 0 || inner == 0)
        return MRT_OK;
    if (n == 0)
        return bad_arg(fn, "max over an empty axis");
    cudaStream_t s = (cudaStream_t)stream;
    const int splits = inner == 1 ? rows_splits<RedMax>(outer, n) : 1;
    if (inner == 1 && splits == 1) {
        MRT_LAUNCH(max_rows_kernel, grid_for(outer, 1), row_block(n), 0, s, y, x, outer, n);
        LAUNCH_CHECK(fn, "max_rows_kernel");
        return MRT_OK;
    }
    return reduce_launch<RedMax>(fn, y, x, outer, n, inner, 0, s, splits);
}

mrt_status mrt_cuda_argmax_f32(void *stream, int64_t *y, const float *x, int64_t outer, int64_t n, int64_t inner)
{
    static const char fn[] = "mrt_cuda_argmax_f32";
    if (outer < 0 || n < 0 || inner < 0)
        return bad_arg(fn, "negative dimension");
    if (outer == 0 || inner == 0)
        return MRT_OK;
    if (n == 0)
        return bad_arg(fn, "argmax over an empty axis");
    cudaStream_t s = (cudaStream_t)stream;
    const int splits = inner == 1 ? rows_splits<RedArgmax>(outer, n) : 1;
    if (inner == 1 && splits == 1) {
        MRT_LAUNCH(argmax_rows_kernel, grid_for(outer, 1), row_block(n), 0, s, y, x, outer, n);
        LAUNCH_CHECK(fn, "argmax_rows_kernel");
        return MRT_OK;
    }
    return reduce_launch<RedArgmax>(fn, y, x, outer, n, inner, 0, s, splits);
}

mrt_status mrt_cuda_conv2d_f32(void *stream, float *y, const float *x, const float *w, int64_t N, int64_t C, int64_t H,
                               int64_t W, int64_t O, int KH, int KW, int64_t OH, int64_t OW, int sh, int sw, int pt,
                               int pl, int dh, int dw, int groups, float *col)
{
    static const char fn[] = "mrt_cuda_conv2d_f32";
    if (N < 0 || C < 0 || H < 0 || W < 0 || O < 0 || OH < 0 || OW < 0 || KH < 1 || KW < 1 || sh < 1 ||
        sw < 1 || dh < 1 || dw < 1 || groups < 1 || C % groups != 0 || O % groups != 0)
        return bad_arg(fn, "bad shape or attributes");
    if (N == 0 || O == 0 || OH == 0 || OW == 0)
        return MRT_OK;
    int cur = 0;
    cudaError_t e = cudaGetDevice(&cur); // the device mrt_device_activate made current
    if (e != cudaSuccess)
        return mrt_set_error(MRT_ERR_CUDA, "%s: cudaGetDevice failed: %s", fn, cudaGetErrorString(e));
    const mrt_device dev = {MRT_DEVICE_CUDA, cur};
    cudaStream_t s = (cudaStream_t)stream;
    const int64_t Cg = C / groups, Og = O / groups, K = Cg * KH * KW, P = OH * OW;
    const bool direct = KH == 1 && KW == 1 && sh == 1 && sw == 1 && pt == 0 && pl == 0 && OH == H && OW == W;
    mrt_status st;
    if (groups > 1 && K <= MRT_CUDA_CONV_DIRECT_TAPS) { // one launch for every image and group
        MRT_LAUNCH(conv_direct_kernel, grid_for(N * O * P, kBlock), kBlock, 0, s, y, x, w, N, C, H, W, O, KH, KW, OH, OW,
                   sh, sw, pt, pl, dh, dw, Cg, Og);
        LAUNCH_CHECK(fn, "conv_direct_kernel");
        return MRT_OK;
    }
    if (direct) {
        // x is already [C/g, H*W] per image and group: no im2col. Image n's group g is the
        // GEMM y[n, g] (Og x P) = w[g] (Og x K) @ x[n, g] (K x P); a strided batch has one
        // stride, so batch over the larger of the images and the groups: min(N, groups) calls.
        if (groups == 1)
            return mrt_gemm_f32(dev, stream, 0, 0, O, P, K, 1.0f, w, K, 0, x, P, C * P, 0.0f, y, P, O * P, N);
        if (N <= groups) {
            for (int64_t n = 0; n < N; n++)
                if ((st = mrt_gemm_f32(dev, stream, 0, 0, Og, P, K, 1.0f, w, K, Og * K, x + n * C * P, P, Cg * P,
                                       0.0f, y + n * O * P, P, Og * P, groups)) != MRT_OK)
                    return st;
        } else {
            for (int64_t g = 0; g < groups; g++)
                if ((st = mrt_gemm_f32(dev, stream, 0, 0, Og, P, K, 1.0f, w + g * Og * K, K, 0, x + g * Cg * P, P,
                                       C * P, 0.0f, y + g * Og * P, P, O * P, N)) != MRT_OK)
                    return st;
        }
        return MRT_OK;
    }
    if (!col)
        return bad_arg(fn, "col is NULL but the convolution needs im2col");
    // Per image: one im2col of all C channels, col [C*KH*KW, P], which is [groups][K][P] (the
    // rows of group g are channels g*Cg.., in order), then one GEMM batched over the groups:
    // y[n, g] (Og x P) = w[g] (Og x K) @ col[g] (K x P). col holds groups*K*P floats (the
    // compiler's CUDA plan sizes it so: fuse.c, conv_scratch_cuda); stream order keeps the next
    // image's im2col from overwriting col before this GEMM has read it.
    for (int64_t n = 0; n < N; n++) {
        MRT_LAUNCH(im2col_kernel, grid_for(C * KH * KW * P, kBlock), kBlock, 0, s, col, x + n * C * H * W, C, H, W, KH,
                   KW, OH, OW, sh, sw, pt, pl, dh, dw);
        LAUNCH_CHECK(fn, "im2col_kernel");
        if ((st = mrt_gemm_f32(dev, stream, 0, 0, Og, P, K, 1.0f, w, K, Og * K, col, P, K * P, 0.0f, y + n * O * P, P,
                               Og * P, groups)) != MRT_OK)
            return st;
    }
    return MRT_OK;
}

mrt_status mrt_cuda_maxpool2d_f32(void *stream, float *y, const float *x, int64_t NC, int64_t H, int64_t W, int64_t OH,
                                  int64_t OW, int kh, int kw, int sh, int sw, int pt, int pl, int dh, int dw)
{
    static const char fn[] = "mrt_cuda_maxpool2d_f32";
    if (NC < 0 || H < 0 || W < 0 || OH < 0 || OW < 0)
        return bad_arg(fn, "negative dimension");
    const int64_t total = NC * OH * OW;
    if (total == 0)
        return MRT_OK;
    MRT_LAUNCH(maxpool2d_kernel, grid_for(total, kBlock), kBlock, 0, (cudaStream_t)stream, y, x, NC, H, W, OH, OW,
               kh, kw, sh, sw, pt, pl, dh, dw);
    LAUNCH_CHECK(fn, "maxpool2d_kernel");
    return MRT_OK;
}

mrt_status mrt_cuda_avgpool2d_f32(void *stream, float *y, const float *x, int64_t NC, int64_t H, int64_t W, int64_t OH,
                                  int64_t OW, int kh, int kw, int sh, int sw, int pt, int pl, int pb, int pr,
                                  int count_include_pad)
{
    static const char fn[] = "mrt_cuda_avgpool2d_f32";
    if (NC < 0 || H < 0 || W < 0 || OH < 0 || OW < 0)
        return bad_arg(fn, "negative dimension");
    const int64_t total = NC * OH * OW;
    if (total == 0)
        return MRT_OK;
    MRT_LAUNCH(avgpool2d_kernel, grid_for(total, kBlock), kBlock, 0, (cudaStream_t)stream, y, x, NC, H, W, OH, OW,
               kh, kw, sh, sw, pt, pl, pb, pr, count_include_pad);
    LAUNCH_CHECK(fn, "avgpool2d_kernel");
    return MRT_OK;
}

mrt_status mrt_cuda_adaptive_avgpool2d_f32(void *stream, float *y, const float *x, int64_t NC, int64_t H, int64_t W,
                                           int64_t OH, int64_t OW)
{
    static const char fn[] = "mrt_cuda_adaptive_avgpool2d_f32";
    if (NC < 0 || H < 1 || W < 1 || OH < 0 || OW < 0)
        return bad_arg(fn, "bad dimension");
    const int64_t total = NC * OH * OW;
    if (total == 0)
        return MRT_OK;
    MRT_LAUNCH(adaptive_avgpool2d_kernel, grid_for(total, kBlock), kBlock, 0, (cudaStream_t)stream, y, x, NC, H, W,
               OH, OW);
    LAUNCH_CHECK(fn, "adaptive_avgpool2d_kernel");
    return MRT_OK;
}

mrt_status mrt_cuda_conv2d_wgrad_f32(void *stream, float *gw, const float *g, const float *x, int64_t N, int64_t C,
                                     int64_t H, int64_t W, int64_t O, int KH, int KW, int64_t OH, int64_t OW, int sh,
                                     int sw, int pt, int pl, int dh, int dw, int groups, float *col)
{
    static const char fn[] = "mrt_cuda_conv2d_wgrad_f32";
    if (N < 0 || C < 1 || H < 0 || W < 0 || O < 1 || OH < 0 || OW < 0 || KH < 1 || KW < 1 || sh < 1 || sw < 1 ||
        dh < 1 || dw < 1 || groups < 1 || C % groups != 0 || O % groups != 0)
        return bad_arg(fn, "bad shape or attributes");
    int cur = 0;
    cudaError_t e = cudaGetDevice(&cur);
    if (e != cudaSuccess)
        return mrt_set_error(MRT_ERR_CUDA, "%s: cudaGetDevice failed: %s", fn, cudaGetErrorString(e));
    const mrt_device dev = {MRT_DEVICE_CUDA, cur};
    cudaStream_t s = (cudaStream_t)stream;
    const int64_t Cg = C / groups, Og = O / groups, K = Cg * KH * KW, P = OH * OW;
    const bool direct = KH == 1 && KW == 1 && sh == 1 && sw == 1 && pt == 0 && pl == 0 && OH == H && OW == W;
    if (N == 0 || P == 0) {
        e = cudaMemsetAsync(gw, 0, (size_t)(O * K) * sizeof(float), s);
        if (e != cudaSuccess)
            return mrt_set_error(MRT_ERR_CUDA, "%s: cudaMemsetAsync failed: %s", fn, cudaGetErrorString(e));
        return MRT_OK;
    }
    if (!direct && !col)
        return bad_arg(fn, "col is NULL but the gradient needs im2col");
    mrt_status st;
    // Per image: one im2col of all groups, col [C*KH*KW, P] = [groups][K][P] (as the forward;
    // groups*K*P floats), or x itself for a 1x1 conv, then one GEMM batched over the groups:
    // gw[g] [Og, K] (+)= g_n[g] [Og, P] @ col[g]^T. Stream order keeps col until the GEMM read it.
    for (int64_t n = 0; n < N; n++) {
        const float *b = x + n * C * H * W;
        if (!direct) {
            MRT_LAUNCH(im2col_kernel, grid_for(C * KH * KW * P, kBlock), kBlock, 0, s, col, b, C, H, W, KH, KW, OH,
                       OW, sh, sw, pt, pl, dh, dw);
            LAUNCH_CHECK(fn, "im2col_kernel");
            b = col;
        }
        if ((st = mrt_gemm_f32(dev, stream, 0, 1, Og, K, P, 1.0f, g + n * O * P, P, Og * P, b, P, K * P,
                               n ? 1.0f : 0.0f, gw, K, Og * K, groups)) != MRT_OK)
            return st;
    }
    return MRT_OK;
}

mrt_status mrt_cuda_maxpool2d_grad_f32(void *stream, float *dx, const float *g, const float *x, int64_t NC, int64_t H,
                                       int64_t W, int64_t OH, int64_t OW, int kh, int kw, int sh, int sw, int pt, int pl,
                                       int dh, int dw)
{
    static const char fn[] = "mrt_cuda_maxpool2d_grad_f32";
    if (NC < 0 || H < 0 || W < 0 || OH < 0 || OW < 0 || kh < 1 || kw < 1 || sh < 1 || sw < 1 || dh < 1 || dw < 1)
        return bad_arg(fn, "bad dimension");
    const int64_t total = NC * H * W;
    if (total == 0)
        return MRT_OK;
    MRT_LAUNCH(maxpool2d_grad_kernel, grid_for(total, kBlock), kBlock, 0, (cudaStream_t)stream, dx, g, x, NC, H, W, OH,
               OW, kh, kw, sh, sw, pt, pl, dh, dw);
    LAUNCH_CHECK(fn, "maxpool2d_grad_kernel");
    return MRT_OK;
}

mrt_status mrt_cuda_avgpool2d_grad_f32(void *stream, float *dx, const float *g, int64_t NC, int64_t H, int64_t W,
                                       int64_t OH, int64_t OW, int kh, int kw, int sh, int sw, int pt, int pl, int pb,
                                       int pr, int count_include_pad)
{
    static const char fn[] = "mrt_cuda_avgpool2d_grad_f32";
    if (NC < 0 || H < 0 || W < 0 || OH < 0 || OW < 0 || kh < 1 || kw < 1 || sh < 1 || sw < 1)
        return bad_arg(fn, "bad dimension");
    const int64_t total = NC * H * W;
    if (total == 0)
        return MRT_OK;
    MRT_LAUNCH(avgpool2d_grad_kernel, grid_for(total, kBlock), kBlock, 0, (cudaStream_t)stream, dx, g, NC, H, W, OH, OW,
               kh, kw, sh, sw, pt, pl, pb, pr, count_include_pad);
    LAUNCH_CHECK(fn, "avgpool2d_grad_kernel");
    return MRT_OK;
}

mrt_status mrt_cuda_adaptive_avgpool2d_grad_f32(void *stream, float *dx, const float *g, int64_t NC, int64_t H,
                                                int64_t W, int64_t OH, int64_t OW)
{
    static const char fn[] = "mrt_cuda_adaptive_avgpool2d_grad_f32";
    if (NC < 0 || H < 1 || W < 1 || OH < 1 || OW < 1)
        return bad_arg(fn, "bad dimension");
    const int64_t total = NC * H * W;
    if (total == 0)
        return MRT_OK;
    MRT_LAUNCH(adaptive_avgpool2d_grad_kernel, grid_for(total, kBlock), kBlock, 0, (cudaStream_t)stream, dx, g, NC, H,
               W, OH, OW);
    LAUNCH_CHECK(fn, "adaptive_avgpool2d_grad_kernel");
    return MRT_OK;
}

mrt_status mrt_cuda_conv_transpose2d_f32(void *stream, float *y, const float *x, const float *w, int64_t N, int64_t C,
                                         int64_t H, int64_t W, int64_t O, int KH, int KW, int64_t OH, int64_t OW, int sh,
                                         int sw, int ph, int pw, int dh, int dw, int groups, float *col)
{
    static const char fn[] = "mrt_cuda_conv_transpose2d_f32";
    (void)col;
    if (N < 0 || C < 1 || H < 1 || W < 1 || O < 1 || KH < 1 || KW < 1 || OH < 0 || OW < 0 || sh < 1 || sw < 1 ||
        dh < 1 || dw < 1 || groups < 1 || C % groups || O % groups)
        return bad_arg(fn, "bad dimension");
    const int64_t total = N * O * OH * OW;
    if (total == 0)
        return MRT_OK;
    MRT_LAUNCH(conv_transpose2d_kernel, grid_for(total, kBlock), kBlock, 0, (cudaStream_t)stream, y, x, w, N, C, H, W,
               O, KH, KW, OH, OW, sh, sw, ph, pw, dh, dw, groups);
    LAUNCH_CHECK(fn, "conv_transpose2d_kernel");
    return MRT_OK;
}

mrt_status mrt_cuda_interp2d_f32(void *stream, float *y, const float *x, int64_t NC, int64_t H, int64_t W, int64_t OH,
                                 int64_t OW, int bilinear, int align_corners, double sfh, double sfw)
{
    static const char fn[] = "mrt_cuda_interp2d_f32";
    if (NC < 0 || H < 1 || W < 1 || OH < 0 || OW < 0)
        return bad_arg(fn, "bad dimension");
    const int64_t total = NC * OH * OW;
    if (total == 0)
        return MRT_OK;
    const float sh = mrt_interp_scale(H, OH, bilinear && align_corners, sfh);
    const float sw = mrt_interp_scale(W, OW, bilinear && align_corners, sfw);
    MRT_LAUNCH(interp2d_kernel, grid_for(total, kBlock), kBlock, 0, (cudaStream_t)stream, y, x, NC, H, W, OH, OW,
               bilinear, align_corners, sh, sw);
    LAUNCH_CHECK(fn, "interp2d_kernel");
    return MRT_OK;
}

mrt_status mrt_cuda_interp2d_grad_f32(void *stream, float *dx, const float *g, int64_t NC, int64_t H, int64_t W,
                                      int64_t OH, int64_t OW, int bilinear, int align_corners, double sfh, double sfw)
{
    static const char fn[] = "mrt_cuda_interp2d_grad_f32";
    if (NC < 0 || H < 1 || W < 1 || OH < 1 || OW < 1)
        return bad_arg(fn, "bad dimension");
    const int64_t total = NC * H * W;
    if (total == 0)
        return MRT_OK;
    const float sh = mrt_interp_scale(H, OH, bilinear && align_corners, sfh);
    const float sw = mrt_interp_scale(W, OW, bilinear && align_corners, sfw);
    MRT_LAUNCH(interp2d_grad_kernel, grid_for(total, kBlock), kBlock, 0, (cudaStream_t)stream, dx, g, NC, H, W, OH, OW,
               bilinear, align_corners, sh, sw);
    LAUNCH_CHECK(fn, "interp2d_grad_kernel");
    return MRT_OK;
}

mrt_status mrt_cuda_layernorm_f32(void *stream, float *y, const float *x, const float *w, const float *b, int64_t rows,
                                  int64_t D, float eps)
{
    static const char fn[] = "mrt_cuda_layernorm_f32";
    if (rows < 0 || D < 0)
        return bad_arg(fn, "negative dimension");
    if (rows == 0 || D == 0)
        return MRT_OK;
    MRT_LAUNCH(layernorm_kernel, grid_for(rows, 1), row_block(D), 0, (cudaStream_t)stream, y, x, w, b, rows, D, eps);
    LAUNCH_CHECK(fn, "layernorm_kernel");
    return MRT_OK;
}

mrt_status rt_cuda_bias_act(void *stream, float *C, int64_t ldc, int64_t M, int64_t N, const float *bias, int act)
{
    static const char fn[] = "rt_cuda_bias_act";
    if (M < 0 || N < 0 || ldc < N || act < 0 || act > 2)
        return bad_arg(fn, "negative dimension, row stride below the row, or unknown activation");
    if (M == 0 || N == 0 || (!bias && act == 0))
        return MRT_OK;
    MRT_LAUNCH(bias_act_kernel, grid_for(M * N, kBlock), kBlock, 0, (cudaStream_t)stream, C, ldc, M, N, bias, act);
    LAUNCH_CHECK(fn, "bias_act_kernel");
    return MRT_OK;
}

/* Checks deferred to the stream's next synchronization: the embeddings' ids, and the integer
 * divisions of generated kernels. Each call gets a device record of its own, reset before its
 * kernel: an embedding marks the first bad position and a one-thread kernel adds the id found
 * there; a generated kernel sets `fault` to 1 on an integer division by zero. An asynchronous
 * copy brings the record to pinned host memory; it is read after the host waits for the stream
 * anyway (rt_cuda_stream_sync, at the end of a model's run), so a run makes no host
 * synchronization of its own for the checks. Up to kChecks calls per stream between two
 * synchronizations (more: the stream is synchronized and checked early); a stream's records
 * are allocated at its first check and freed with it. */
namespace {
struct CheckRecord {
    unsigned long long pos; // embedding: the smallest bad position, ~0 if none
    long long id;           // embedding: the id there
    int fault;              // generated kernel: 1 after an integer division by zero
};
enum CheckKind { kEmbedding, kIntDivision };
constexpr int kChecks = 16, kCheckStreams = 64;
struct Checks {
    cudaStream_t stream;
    int device, used, n;  // n: records queued since the last collect
    int overflowed;       // the records ran out once: a run synchronized early
    CheckRecord *dev_rec; // kChecks device records
    CheckRecord *host_rec; // kChecks pinned host records
    int64_t V[kChecks];
    CheckKind kind[kChecks];
    char what[kChecks][160];
};
pthread_mutex_t g_checks_lock = PTHREAD_MUTEX_INITIALIZER;
Checks g_checks[kCheckStreams];

Checks *checks_find(cudaStream_t s, int device)
{
    for (int i = 0; i < kCheckStreams; i++)
        if (g_checks[i].used && g_checks[i].stream == s && g_checks[i].device == device)
            return &g_checks[i];
    return NULL;
}

// The first failed check among the records collected (call order), as an error; the records reset.
mrt_status checks_report(Checks *c)
{
    mrt_status st = MRT_OK;
    for (int k = 0; k < c->n && st == MRT_OK; k++) {
        const CheckRecord *r = &c->host_rec[k];
        if (c->kind[k] == kEmbedding && r->pos != ~0ull)
            st = mrt_set_error(MRT_ERR_INVALID_ARG, "%s: id %lld at position %lld is out of range [0, %lld)",
                               c->what[k], r->id, (long long)r->pos, (long long)c->V[k]);
        else if (c->kind[k] == kIntDivision && r->fault == 1)
            st = mrt_set_error(MRT_ERR_INVALID_ARG, "%s: integer division by zero", c->what[k]);
    }
    c->n = 0;
    return st;
}

/* A reset record for the next kernel on `s` (under g_checks_lock): *c and *k name it. */
mrt_status check_open(cudaStream_t s, const char *what, Checks **cp, int *kp)
{
    int device = 0;
    cudaError_t e = cudaGetDevice(&device);
    Checks *c = e == cudaSuccess ? checks_find(s, device) : NULL;
    for (int i = 0; e == cudaSuccess && !c && i < kCheckStreams; i++)
        if (!g_checks[i].used) { // the stream's first check: its records, once
            Checks *f = &g_checks[i];
            e = cudaMalloc((void **)&f->dev_rec, kChecks * sizeof(CheckRecord));
            if (e == cudaSuccess && (e = cudaMallocHost((void **)&f->host_rec, kChecks * sizeof(CheckRecord))) != cudaSuccess)
                (void)cudaFree(f->dev_rec);
            if (e == cudaSuccess) {
                f->used = 1, f->stream = s, f->device = device, f->n = 0;
                c = f;
            }
        }
    mrt_status st = MRT_OK;
    if (e == cudaSuccess && !c)
        st = mrt_set_error(MRT_ERR_CUDA, "%s: cannot set up the run-time check: more than %d streams with checks", what,
                           kCheckStreams);
    if (e == cudaSuccess && c && c->n == kChecks) { // full: wait for the stream and check now
        c->overflowed = 1;
        e = cudaStreamSynchronize(s);
        if (e == cudaSuccess)
            st = checks_report(c);
    }
    int k = c ? c->n : 0;
    if (e == cudaSuccess && st == MRT_OK)
        e = cudaMemsetAsync(&c->dev_rec[k], 0xff, sizeof(CheckRecord), s);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        st = mrt_set_error(MRT_ERR_CUDA, "%s: cannot set up the run-time check: %s (%s)", what, cudaGetErrorName(e),
                           cudaGetErrorString(e));
    }
    *cp = c;
    *kp = k;
    return st;
}

/* Queue the copy of record k (its kernel launched) to the host and count it (under the lock). */
mrt_status check_close(Checks *c, int k, cudaStream_t s, const char *what, CheckKind kind, int64_t V)
{
    cudaError_t e = cudaMemcpyAsync(&c->host_rec[k], &c->dev_rec[k], sizeof(CheckRecord), cudaMemcpyDeviceToHost, s);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return mrt_set_error(MRT_ERR_CUDA, "%s: cannot queue the run-time check: %s (%s)", what, cudaGetErrorName(e),
                             cudaGetErrorString(e));
    }
    c->V[k] = V;
    c->kind[k] = kind;
    snprintf(c->what[k], sizeof c->what[k], "%s", what);
    c->n = k + 1;
    return MRT_OK;
}
} // namespace

// The id at the first bad position (rec->pos from embedding_kernel), while ids still holds it.
__global__ void embedding_bad_id_kernel(CheckRecord *rec, const void *ids, int ids_i64)
{
    const unsigned long long p = rec->pos;
    if (p != ~0ull)
        rec->id = ids_i64 ? ((const int64_t *)ids)[p] : (long long)((const int32_t *)ids)[p];
}

extern "C" mrt_status rt_cuda_checks_collect(int device, void *stream)
{
    pthread_mutex_lock(&g_checks_lock);
    Checks *c = checks_find((cudaStream_t)stream, device);
    mrt_status st = c ? checks_report(c) : MRT_OK;
    pthread_mutex_unlock(&g_checks_lock);
    return st;
}

namespace {
struct ChecksSaved {
    int n;
    int64_t V[kChecks];
    CheckKind kind[kChecks];
    char what[kChecks][160];
};
} // namespace

extern "C" int rt_cuda_checks_pending(int device, void *stream)
{
    pthread_mutex_lock(&g_checks_lock);
    Checks *c = checks_find((cudaStream_t)stream, device);
    int n = !c ? 0 : c->overflowed ? -1 : c->n;
    pthread_mutex_unlock(&g_checks_lock);
    return n;
}

extern "C" void *rt_cuda_checks_save(int device, void *stream)
{
    ChecksSaved *v = (ChecksSaved *)calloc(1, sizeof(ChecksSaved));
    pthread_mutex_lock(&g_checks_lock);
    Checks *c = checks_find((cudaStream_t)stream, device);
    if (v && c) {
        v->n = c->n;
        memcpy(v->V, c->V, sizeof v->V);
        memcpy(v->kind, c->kind, sizeof v->kind);
        memcpy(v->what, c->what, sizeof v->what);
    }
    pthread_mutex_unlock(&g_checks_lock);
    return v;
}

extern "C" void rt_cuda_checks_restore(int device, void *stream, const void *saved)
{
    const ChecksSaved *v = (const ChecksSaved *)saved;
    pthread_mutex_lock(&g_checks_lock);
    Checks *c = checks_find((cudaStream_t)stream, device);
    if (v && c && v->n > 0) { // the graph resets, fills and copies back records 0..n-1 again
        c->n = v->n;
        memcpy(c->V, v->V, sizeof v->V);
        memcpy(c->kind, v->kind, sizeof v->kind);
        memcpy(c->what, v->what, sizeof v->what);
    }
    pthread_mutex_unlock(&g_checks_lock);
}

extern "C" void rt_cuda_checks_drop(int device, void *stream)
{
    pthread_mutex_lock(&g_checks_lock);
    Checks *c = checks_find((cudaStream_t)stream, device);
    if (c)
        c->n = 0;
    pthread_mutex_unlock(&g_checks_lock);
}

extern "C" void rt_cuda_checks_release(int device, void *stream)
{
    pthread_mutex_lock(&g_checks_lock);
    Checks *c = checks_find((cudaStream_t)stream, device);
    if (c) {
        if (cudaFree(c->dev_rec) != cudaSuccess || cudaFreeHost(c->host_rec) != cudaSuccess)
            (void)cudaGetLastError();
        memset(c, 0, sizeof *c);
    }
    pthread_mutex_unlock(&g_checks_lock);
}

} // extern "C"

namespace {
// The start of an id-checked call (embedding, gather, index_select, one_hot): takes
// g_checks_lock, which it leaves held on success, and a reset record *pk (check_open).
mrt_status checks_begin(cudaStream_t s, const char *what, Checks **pc, int *pk)
{
    pthread_mutex_lock(&g_checks_lock);
    mrt_status st = check_open(s, what, pc, pk);
    if (st != MRT_OK)
        pthread_mutex_unlock(&g_checks_lock);
    return st;
}

// The end of an id-checked call whose kernel (status st) marked record k: the bad entry of ids
// is added to it and it is queued for the host, with the range [0, V) for the message; unlocks.
mrt_status checks_end(mrt_status st, Checks *c, int k, cudaStream_t s, const char *what, const void *ids, int ids_i64,
                      int64_t V)
{
    if (st == MRT_OK) {
        MRT_LAUNCH(embedding_bad_id_kernel, 1, 1, 0, s, &c->dev_rec[k], ids, ids_i64);
        st = launched(what, "embedding_bad_id_kernel");
    }
    if (st == MRT_OK)
        st = check_close(c, k, s, what, kEmbedding, V);
    pthread_mutex_unlock(&g_checks_lock);
    return st;
}
} // namespace

// y [outer, k, inner] from x [outer, n, inner] through the index (mrt_gather_f32's modes); an
// entry outside [0, n) leaves its element unwritten and its smallest position goes to *first_bad.
__global__ void gather_kernel(float *__restrict__ y, const float *__restrict__ x, const void *__restrict__ idx,
                              int idx_i64, int mode, int64_t outer, int64_t n, int64_t k, int64_t inner,
                              unsigned long long *__restrict__ first_bad)
{
    const int64_t total = outer * k * inner;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t o = t / (k * inner), r = t - o * k * inner, j = r / inner, i = r - j * inner;
        const int64_t pos = mode == 0 ? t : mode == 1 ? j : o;
        const int64_t id = idx_i64 ? ((const int64_t *)idx)[pos] : (int64_t)((const int32_t *)idx)[pos];
        if (id < 0 || id >= n)
            atomicMin(first_bad, (unsigned long long)pos);
        else
            y[t] = mode == 2 ? (id == j ? 1.0f : 0.0f) : x[(o * n + id) * inner + i];
    }
}

extern "C" {

mrt_status mrt_cuda_embedding_f32(void *stream, float *y, const void *ids, int ids_i64, int64_t n, const float *w,
                                  int64_t V, int64_t D, const char *what)
{
    static const char fn[] = "mrt_cuda_embedding_f32";
    if (!what)
        what = fn;
    if (n < 0 || V < 0 || D < 0)
        return bad_arg(what, "negative dimension");
    if (n == 0)
        return MRT_OK;
    cudaStream_t s = (cudaStream_t)stream;
    Checks *c = NULL;
    int k = 0;
    mrt_status st = checks_begin(s, what, &c, &k);
    if (st != MRT_OK)
        return st;
    const int64_t Dl = D > 0 ? D : 1;
    MRT_LAUNCH(embedding_kernel, grid_for(n * Dl, kBlock), kBlock, 0, s, y, ids, ids_i64, n, w, V, D, Dl,
               &c->dev_rec[k].pos);
    st = launched(what, "embedding_kernel");
    return checks_end(st, c, k, s, what, ids, ids_i64, V);
}

mrt_status mrt_cuda_gather_f32(void *stream, float *y, const float *x, const void *idx, int idx_i64, int mode,
                               int64_t outer, int64_t n, int64_t k, int64_t inner, const char *what)
{
    static const char fn[] = "mrt_cuda_gather_f32";
    if (!what)
        what = fn;
    if (outer < 0 || n < 0 || k < 0 || inner < 0 || mode < 0 || mode > 2)
        return bad_arg(what, "negative dimension or bad mode");
    if (outer == 0 || k == 0 || inner == 0)
        return MRT_OK;
    cudaStream_t s = (cudaStream_t)stream;
    Checks *c = NULL;
    int r = 0;
    mrt_status st = checks_begin(s, what, &c, &r);
    if (st != MRT_OK)
        return st;
    MRT_LAUNCH(gather_kernel, grid_for(outer * k * inner, kBlock), kBlock, 0, s, y, x, idx, idx_i64, mode, outer, n, k,
               inner, &c->dev_rec[r].pos);
    st = launched(what, "gather_kernel");
    return checks_end(st, c, r, s, what, idx, idx_i64, n);
}

mrt_status mrt_cuda_fault_begin(void *stream, const char *what, int **fault, int *ticket)
{
    if (!fault || !ticket)
        return bad_arg("mrt_cuda_fault_begin", "NULL fault or ticket");
    pthread_mutex_lock(&g_checks_lock);
    Checks *c;
    int k;
    mrt_status st = check_open((cudaStream_t)stream, what ? what : "mrt_cuda_fault_begin", &c, &k);
    *fault = st == MRT_OK ? &c->dev_rec[k].fault : NULL;
    *ticket = k;
    pthread_mutex_unlock(&g_checks_lock);
    return st;
}

mrt_status mrt_cuda_fault_end(void *stream, const char *what, int ticket)
{
    cudaStream_t s = (cudaStream_t)stream;
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) {
        (void)cudaGetLastError();
        return mrt_set_error(MRT_ERR_CUDA, "%s: no current CUDA device for the run-time check", what);
    }
    pthread_mutex_lock(&g_checks_lock);
    Checks *c = checks_find(s, device);
    mrt_status st = c && ticket == c->n ? check_close(c, ticket, s, what ? what : "mrt_cuda_fault_end", kIntDivision, 0)
                                        : bad_arg("mrt_cuda_fault_end", "no mrt_cuda_fault_begin on this stream");
    pthread_mutex_unlock(&g_checks_lock);
    return st;
}

mrt_status mrt_cuda_concat_part(void *stream, void *y, const void *x, int64_t outer, int64_t x_row, int64_t y_row,
                                int64_t y_offset)
{
    static const char fn[] = "mrt_cuda_concat_part";
    if (outer < 0 || x_row < 0 || y_row < 0 || y_offset < 0 || (outer > 1 && x_row + y_offset > y_row))
        return bad_arg(fn, "bad row sizes");
    if (outer == 0 || x_row == 0)
        return MRT_OK;
    cudaStream_t s = (cudaStream_t)stream;
    if (outer == 1 || (x_row == y_row && y_offset == 0)) { // one contiguous block
        cudaError_t e = cudaMemcpyAsync((char *)y + y_offset, x, (size_t)(outer * x_row), cudaMemcpyDeviceToDevice, s);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            return mrt_set_error(MRT_ERR_CUDA, "%s: copying %lld bytes failed: %s (%s)", fn,
                                 (long long)(outer * x_row), cudaGetErrorName(e), cudaGetErrorString(e));
        }
        return MRT_OK;
    }
    // the widest word that divides every address and pitch involved
    const uint64_t a = (uint64_t)(uintptr_t)x | ((uint64_t)(uintptr_t)y + (uint64_t)y_offset) | (uint64_t)x_row |
                       (uint64_t)y_row;
    if (a % 16 == 0)
        return concat_launch<uint4>(s, y, x, outer, x_row, y_row, y_offset);
    if (a % 8 == 0)
        return concat_launch<uint2>(s, y, x, outer, x_row, y_row, y_offset);
    if (a % 4 == 0)
        return concat_launch<uint32_t>(s, y, x, outer, x_row, y_row, y_offset);
    return concat_launch<unsigned char>(s, y, x, outer, x_row, y_row, y_offset);
}

} // extern "C"
