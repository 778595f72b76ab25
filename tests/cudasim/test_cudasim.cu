/*
 * test_cudasim.cu — the CUDA simulator's own tests: that it runs what a GPU runs (barriers, warp
 * intrinsics, atomics, streams, events, peer copies) and rejects what a GPU rejects, with the
 * CUDA error a GPU gives. Compiled by the host C++ compiler against tests/cudasim/include and
 * linked with libcudasim.so and the cuBLAS stand-in.
 *
 *   test_cudasim --list      the test names
 *   test_cudasim NAME        run one: prints "PASS" or "FAIL: why"; tests/cudasim/run.sh runs
 *                            each in its own process, since the device configuration
 *                            (CUDASIM_DEVICES, ...) is read once per process
 * Tests of what ends a program (a fault, a hang) run the offending code in a child process and
 * check that it aborts with the simulator's diagnosis.
 */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "mrt_launch.h"

static std::string g_why; // the first failed check of the running test

#define CHECK(cond)                                                                             \
    do {                                                                                        \
        if (!(cond) && g_why.empty())                                                           \
            g_why = std::string(__FILE__ ":") + std::to_string(__LINE__) + ": " #cond;          \
    } while (0)
#define CHECK_ERR(call, want)                                                                   \
    do {                                                                                        \
        cudaError_t e_ = (call);                                                                \
        if (e_ != (want) && g_why.empty())                                                      \
            g_why = std::string(__FILE__ ":") + std::to_string(__LINE__) + ": " #call " gave " +   \
                    cudaGetErrorName(e_) + ", want " #want;                                     \
    } while (0)
#define CHECK_OK(call) CHECK_ERR(call, cudaSuccess)
#define REPORTED(substr) CHECK(strstr(cudasim_last_report(), substr))

/* Run fn in a child; true if it aborts and its stderr holds `want` (else *got says what it did). */
static bool dies_with(void (*fn)(), const char *want, std::string *got)
{
    int p[2];
    if (pipe(p) != 0)
        return false;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 2);
        close(p[0]);
        fn();
        _exit(0);
    }
    close(p[1]);
    std::string err;
    char buf[4096];
    ssize_t k;
    while ((k = read(p[0], buf, sizeof buf)) > 0)
        err.append(buf, (size_t)k);
    close(p[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    bool ok = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT && strstr(err.c_str(), want);
    if (!ok)
        *got = (WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status))
                                    : "exit " + std::to_string(WEXITSTATUS(status))) + ", stderr: " + err;
    return ok;
}
#define CHECK_DIES(fn, want)                                                                    \
    do {                                                                                        \
        std::string got_;                                                                       \
        if (!dies_with(fn, want, &got_) && g_why.empty())                                       \
            g_why = std::string(#fn " should abort saying '") + (want) + "'; " + got_;          \
    } while (0)

template <typename T> static T *dev_alloc(size_t n)
{
    void *p = NULL;
    if (cudaMalloc(&p, n * sizeof(T)) != cudaSuccess)
        return NULL;
    return (T *)p;
}

/* ---------------------------------------------------------------- kernels */

// out[block] = sum of in over the block's 2D tile, by a shared-memory tree (blockDim 32 x 32).
__global__ void tile_sum_kernel(int *out, const int *in)
{
    __shared__ int s[1024];
    const int t = threadIdx.y * blockDim.x + threadIdx.x;
    const int b = blockIdx.y * gridDim.x + blockIdx.x;
    s[t] = in[b * 1024 + t];
    __syncthreads();
    for (int half = 512; half > 0; half >>= 1) {
        if (t < half)
            s[t] += s[t + half];
        __syncthreads();
    }
    if (t == 0)
        out[b] = s[0];
}

// y[i] = x[n - 1 - i] through shared memory, with or without the barrier between.
__global__ void reverse_kernel(int *y, const int *x, int n, int sync)
{
    __shared__ int s[256];
    s[threadIdx.x] = x[threadIdx.x];
    if (sync)
        __syncthreads();
    y[threadIdx.x] = s[n - 1 - threadIdx.x];
}

__global__ void barrier_reductions_kernel(int *out)
{
    const int odd = threadIdx.x & 1;
    const int c = __syncthreads_count(odd), a = __syncthreads_and(odd), o = __syncthreads_or(odd);
    const int all = __syncthreads_and(1);
    if (threadIdx.x == 0) {
        out[0] = c;
        out[1] = a;
        out[2] = o;
        out[3] = all;
    }
}

template <typename T> __global__ void shuffle_kernel(T *out, int width)
{
    const int lane = threadIdx.x & 31;
    const T v = (T)(threadIdx.x * 3 + 1);
    const int n = blockDim.x;
    out[0 * n + threadIdx.x] = __shfl_sync(0xffffffffu, v, 5, width);
    out[1 * n + threadIdx.x] = __shfl_up_sync(0xffffffffu, v, 3, width);
    out[2 * n + threadIdx.x] = __shfl_down_sync(0xffffffffu, v, 3, width);
    out[3 * n + threadIdx.x] = __shfl_xor_sync(0xffffffffu, v, 6, width);
    T s = v; // a butterfly sum over the whole warp
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    out[4 * n + threadIdx.x] = s;
    (void)lane;
}

__global__ void vote_kernel(unsigned *out)
{
    const int lane = threadIdx.x & 31;
    const unsigned b = __ballot_sync(0xffffffffu, lane % 3 == 0);
    const int any = __any_sync(0xffffffffu, lane == 7), all = __all_sync(0xffffffffu, lane < 40);
    const unsigned sum = __reduce_add_sync(0xffffffffu, (unsigned)lane);
    unsigned half = 0;
    if (lane < 16) // a half-warp collective with its own mask
        half = __ballot_sync(0x0000ffffu, lane & 1);
    __syncwarp();
    if (threadIdx.x == 0) {
        out[0] = b;
        out[1] = (unsigned)any;
        out[2] = (unsigned)all;
        out[3] = sum;
        out[4] = half;
        out[5] = __activemask(); // scheduling-dependent: at least the calling lane
    }
}

__global__ void atomics_kernel(unsigned long long *count, int *mx, int *cas)
{
    atomicAdd(count, 1ull);
    atomicMax(mx, (int)(blockIdx.x * blockDim.x + threadIdx.x));
    atomicCAS(cas, 0, (int)(blockIdx.x * blockDim.x + threadIdx.x) + 1); // the first to get there wins
}

// Two block-wide sums through the same shared words, with or without the barrier between them
// (the one block_reduce in rt_cuda_kernels.cu opens with). out[0] = sum of 1, out[1] = sum of 2.
__global__ void two_sums_kernel(int *out, int sync)
{
    __shared__ int s[32];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int total[2];
    for (int k = 0; k < 2; k++) {
        int v = k + 1;
        for (int o = 16; o > 0; o >>= 1)
            v += __shfl_xor_sync(0xffffffffu, v, o);
        if (sync || k == 0)
            __syncthreads();
        if (lane == 0)
            s[w] = v;
        __syncthreads();
        total[k] = 0;
        for (int i = 0; i < nw; i++)
            total[k] += s[i];
    }
    atomicMin(&out[0], total[0]);
    atomicMax(&out[1], total[0]);
    atomicMin(&out[2], total[1]);
    atomicMax(&out[3], total[1]);
}

__global__ void fill_kernel(int *p, int n, int v)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        p[i] = v + i;
}

__global__ void copy_kernel(int *y, const int *x, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        y[i] = x[i];
}

__global__ void read_at_kernel(int *y, const int *x, long long at) { y[0] = x[at]; }

__global__ void divergent_barrier_kernel(int *p)
{
    if (threadIdx.x < 32)
        __syncthreads();
    else
        __syncthreads();
    p[threadIdx.x] = 1;
}

__global__ void partial_warp_shuffle_kernel(int *p)
{
    p[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);
}

__global__ void exited_lanes_kernel(int *p)
{
    if (threadIdx.x & 1)
        return;
    p[threadIdx.x] = __shfl_down_sync(0xffffffffu, (int)threadIdx.x, 2);
}

__global__ void nothing_kernel(int *p) { (void)p; }

__global__ void float4_kernel(float4 *p) { p[0].x = 1.0f; }

static int *g_dev_ptr;

/* ---------------------------------------------------------------- devices and errors */

static void test_devices()
{
    setenv("CUDASIM_DEVICES", "3:1024:8.6", 1);
    int n = -1;
    CHECK_OK(cudaGetDeviceCount(&n));
    CHECK(n == 3);
    cudaDeviceProp p;
    CHECK_OK(cudaGetDeviceProperties(&p, 2));
    CHECK(p.major == 8 && p.minor == 6 && p.totalGlobalMem == (size_t)1 << 30);
    CHECK(strstr(p.name, "cudasim device 2") && p.maxThreadsPerBlock == 1024 && p.warpSize == 32);
    CHECK(p.sharedMemPerBlock == 48 * 1024 && p.sharedMemPerBlockOptin == 101376);
    CHECK_ERR(cudaGetDeviceProperties(&p, 3), cudaErrorInvalidDevice);
    CHECK_ERR(cudaSetDevice(3), cudaErrorInvalidDevice);
    CHECK_ERR(cudaPeekAtLastError(), cudaErrorInvalidDevice);
    CHECK_ERR(cudaGetLastError(), cudaErrorInvalidDevice);
    CHECK_OK(cudaGetLastError());
    int d = -1;
    CHECK_OK(cudaSetDevice(1));
    CHECK_OK(cudaGetDevice(&d));
    CHECK(d == 1);
    size_t fr = 0, total = 0;
    CHECK_OK(cudaMemGetInfo(&fr, &total));
    CHECK(fr == total && total == (size_t)1 << 30);
}

/* One size per device ("N:MiB,MiB,...:MAJOR.MINOR"), by physical ordinal under
 * CUDA_VISIBLE_DEVICES; a size list of another length than N is malformed. */
static void test_device_sizes()
{
    setenv("CUDASIM_DEVICES", "3:1024,512,256:8.6", 1);
    setenv("CUDA_VISIBLE_DEVICES", "2,0", 1);
    int n = -1;
    CHECK_OK(cudaGetDeviceCount(&n));
    CHECK(n == 2);
    cudaDeviceProp p;
    CHECK_OK(cudaGetDeviceProperties(&p, 0));
    CHECK(strstr(p.name, "cudasim device 2") && p.totalGlobalMem == (size_t)256 << 20 && p.major == 8);
    CHECK_OK(cudaGetDeviceProperties(&p, 1));
    CHECK(strstr(p.name, "cudasim device 0") && p.totalGlobalMem == (size_t)1024 << 20);
    size_t fr = 0, total = 0;
    CHECK_OK(cudaSetDevice(1));
    CHECK_OK(cudaMemGetInfo(&fr, &total));
    CHECK(fr == total && total == (size_t)1024 << 20);
    void *a = NULL;
    CHECK_OK(cudaSetDevice(0));
    CHECK_ERR(cudaMalloc(&a, (size_t)300 << 20), cudaErrorMemoryAllocation); // 256 MiB here
    (void)cudaGetLastError();
}

static void test_bad_sizes()
{
    setenv("CUDASIM_DEVICES", "2:1024,512,256", 1);
    int n = -1;
    CHECK_ERR(cudaGetDeviceCount(&n), cudaErrorInitializationError);
    REPORTED("CUDASIM_DEVICES='2:1024,512,256' is malformed");
}

static void test_visible_devices()
{
    setenv("CUDASIM_DEVICES", "4", 1);
    setenv("CUDA_VISIBLE_DEVICES", "2,0,x,1", 1); // cut at the first bad entry, as the driver
    int n = -1;
    CHECK_OK(cudaGetDeviceCount(&n));
    CHECK(n == 2);
    cudaDeviceProp p;
    CHECK_OK(cudaGetDeviceProperties(&p, 0));
    CHECK(strstr(p.name, "cudasim device 2"));
    CHECK_OK(cudaGetDeviceProperties(&p, 1));
    CHECK(strstr(p.name, "cudasim device 0"));
}

static void test_no_devices()
{
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    int n = -1;
    CHECK_ERR(cudaGetDeviceCount(&n), cudaErrorNoDevice);
    CHECK(n == 0);
    void *p;
    CHECK_ERR(cudaMalloc(&p, 16), cudaErrorNoDevice);
}

static void test_no_driver()
{
    setenv("CUDASIM_DEVICES", "nodriver", 1);
    int n = -1;
    CHECK_ERR(cudaGetDeviceCount(&n), cudaErrorInsufficientDriver);
    CHECK(n == 0 && (int)cudaErrorInsufficientDriver == 35);
    CHECK(!strcmp(cudaGetErrorString(cudaErrorInsufficientDriver),
                  "CUDA driver version is insufficient for CUDA runtime version"));
}

static void test_bad_config()
{
    setenv("CUDASIM_DEVICES", "2:lots", 1);
    int n = -1;
    CHECK_ERR(cudaGetDeviceCount(&n), cudaErrorInitializationError);
    REPORTED("CUDASIM_DEVICES='2:lots' is malformed");
}

static void test_error_strings()
{
    CHECK(!strcmp(cudaGetErrorName(cudaErrorIllegalAddress), "cudaErrorIllegalAddress"));
    CHECK(!strcmp(cudaGetErrorString(cudaErrorIllegalAddress), "an illegal memory access was encountered"));
    CHECK(!strcmp(cudaGetErrorString(cudaErrorInvalidConfiguration), "invalid configuration argument"));
    CHECK(!strcmp(cudaGetErrorString((cudaError_t)12345), "unrecognized error code"));
    CHECK((int)cudaErrorInvalidValue == 1 && (int)cudaErrorMemoryAllocation == 2 &&
          (int)cudaErrorInvalidConfiguration == 9 && (int)cudaErrorNoDevice == 100 &&
          (int)cudaErrorInvalidResourceHandle == 400 && (int)cudaErrorIllegalAddress == 700 &&
          (int)cudaErrorPeerAccessAlreadyEnabled == 704);
}

/* ---------------------------------------------------------------- memory */

static void test_memory()
{
    setenv("CUDASIM_DEVICES", "1:64", 1); // 64 MiB
    void *a = NULL, *b = NULL, *z = (void *)1;
    CHECK_OK(cudaMalloc(&z, 0));
    CHECK(z == NULL);
    CHECK_OK(cudaMalloc(&a, 1000));
    CHECK(a && (uintptr_t)a % 256 == 0);
    size_t fr, total;
    CHECK_OK(cudaMemGetInfo(&fr, &total));
    CHECK(total - fr == 1024 && cudasim_live_bytes(0) == 1024);
    CHECK_ERR(cudaMalloc(&b, (size_t)65 << 20), cudaErrorMemoryAllocation);
    CHECK_ERR(cudaGetLastError(), cudaErrorMemoryAllocation);
    CHECK_OK(cudaMalloc(&b, (size_t)32 << 20));
    unsigned char h[1000];
    CHECK_OK(cudaMemcpy(h, a, sizeof h, cudaMemcpyDeviceToHost));
    CHECK(h[0] == 0xff && h[999] == 0xff); // fresh memory is garbage: NaN-filled
    CHECK_OK(cudaMemset(a, 7, 1000));
    CHECK_OK(cudaMemcpy(h, a, sizeof h, cudaMemcpyDefault));
    CHECK(h[0] == 7 && h[999] == 7);
    CHECK_OK(cudaFree(a));
    CHECK_OK(cudaFree(b));
    CHECK_OK(cudaFree(NULL));
    CHECK(cudasim_live_bytes(0) == 0);
    void *pinned = NULL;
    CHECK_OK(cudaMallocHost(&pinned, 100));
    CHECK_OK(cudaFreeHost(pinned));
    CHECK_ERR(cudaFreeHost(h), cudaErrorInvalidValue);
}

static void test_memcpy_checks()
{
    int *d = dev_alloc<int>(16), *d2 = dev_alloc<int>(16);
    int h[32] = {0};
    int *heap = (int *)malloc(64);
    CHECK_OK(cudaMemcpy(d, h, 64, cudaMemcpyHostToDevice));
    CHECK_ERR(cudaMemcpy(h, d, 64, cudaMemcpyHostToDevice), cudaErrorInvalidValue); // kinds swapped
    REPORTED("cudaMemcpyHostToDevice");
    CHECK_ERR(cudaMemcpy(d, h, 64, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    CHECK_ERR(cudaMemcpy(heap, h, 64, cudaMemcpyHostToDevice), cudaErrorInvalidValue); // not from cudaMalloc
    REPORTED("host memory (not from cudaMalloc)");
    CHECK_ERR(cudaMemcpy(d, h, 65, cudaMemcpyHostToDevice), cudaErrorInvalidValue); // past the end
    CHECK_ERR(cudaMemcpy(d + 1, h, 64, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    CHECK_ERR(cudaMemcpy(h, d, 64, cudaMemcpyDeviceToDevice), cudaErrorInvalidValue);
    CHECK_OK(cudaMemcpy(d2, d, 64, cudaMemcpyDeviceToDevice));
    CHECK_OK(cudaMemcpy(h, d2, 64, cudaMemcpyDefault));
    CHECK_ERR(cudaMemcpy(d, h, 4, (cudaMemcpyKind)7), cudaErrorInvalidMemcpyDirection);
    CHECK_ERR(cudaMemset(d, 0, 65), cudaErrorInvalidValue);
    CHECK_ERR(cudaMemset(heap, 0, 4), cudaErrorInvalidValue);
    CHECK_ERR(cudaFree(d + 1), cudaErrorInvalidValue);
    CHECK_ERR(cudaFree(heap), cudaErrorInvalidValue);
    CHECK_OK(cudaFree(d));
    CHECK_ERR(cudaFree(d), cudaErrorInvalidValue);
    REPORTED("double free");
    CHECK_ERR(cudaMemcpy(h, d, 4, cudaMemcpyDeviceToHost), cudaErrorInvalidValue); // freed
    REPORTED("freed");
    CHECK_OK(cudaFree(d2));
    free(heap);
}

static void test_pointer_attributes()
{
    int *d = dev_alloc<int>(4);
    void *pinned = NULL;
    int h = 0;
    cudaPointerAttributes a;
    CHECK_OK(cudaMallocHost(&pinned, 16));
    CHECK_OK(cudaPointerGetAttributes(&a, d + 2));
    CHECK(a.type == cudaMemoryTypeDevice && a.device == 0);
    CHECK_OK(cudaPointerGetAttributes(&a, pinned));
    CHECK(a.type == cudaMemoryTypeHost && a.hostPointer == pinned);
    CHECK_OK(cudaPointerGetAttributes(&a, &h));
    CHECK(a.type == cudaMemoryTypeUnregistered);
    CHECK_OK(cudaFree(d));
    CHECK_OK(cudaFreeHost(pinned));
}

static void host_reads_device() { (void)*(volatile int *)g_dev_ptr; }
static void host_reads_freed()
{
    cudaFree(g_dev_ptr);
    (void)*(volatile int *)g_dev_ptr;
}

static void test_host_dereference()
{
    g_dev_ptr = dev_alloc<int>(4);
    CHECK_DIES(host_reads_device, "host code made an invalid read of device memory");
    CHECK_DIES(host_reads_freed, "bytes into the freed 16-byte allocation");
}

/* ---------------------------------------------------------------- kernels */

static void test_barrier()
{
    const int blocks = 6;
    int *in = dev_alloc<int>(blocks * 1024), *out = dev_alloc<int>(blocks);
    static int h[6 * 1024];
    for (int i = 0; i < blocks * 1024; i++)
        h[i] = i % 1000 - 300;
    CHECK_OK(cudaMemcpy(in, h, sizeof h, cudaMemcpyHostToDevice));
    MRT_LAUNCH(tile_sum_kernel, dim3(3, 2), dim3(32, 32), 0, 0, out, in);
    CHECK_OK(cudaGetLastError());
    int got[6];
    CHECK_OK(cudaMemcpy(got, out, sizeof got, cudaMemcpyDeviceToHost));
    for (int b = 0; b < blocks; b++) {
        long long want = 0;
        for (int t = 0; t < 1024; t++)
            want += h[b * 1024 + t];
        CHECK(got[b] == want);
    }
    int r[4];
    MRT_LAUNCH(barrier_reductions_kernel, 1, 96, 0, 0, out);
    CHECK_OK(cudaMemcpy(r, out, sizeof r, cudaMemcpyDeviceToHost));
    CHECK(r[0] == 48 && r[1] == 0 && r[2] == 1 && r[3] == 1);
    cudaFree(in), cudaFree(out);
}

/* Without the barrier, thread t reads s[n-1-t] before thread n-1-t wrote it: the simulator shows
 * the race (threads run in turn), where a GPU might hide it. */
static void test_missing_barrier()
{
    int *x = dev_alloc<int>(256), *y = dev_alloc<int>(256), h[256], got[256];
    for (int i = 0; i < 256; i++)
        h[i] = i;
    CHECK_OK(cudaMemcpy(x, h, sizeof h, cudaMemcpyHostToDevice));
    MRT_LAUNCH(reverse_kernel, 1, 256, 0, 0, y, x, 256, 1);
    CHECK_OK(cudaMemcpy(got, y, sizeof got, cudaMemcpyDeviceToHost));
    bool right = true;
    for (int i = 0; i < 256; i++)
        right = right && got[i] == 255 - i;
    CHECK(right);
    MRT_LAUNCH(reverse_kernel, 1, 256, 0, 0, y, x, 256, 0);
    CHECK_OK(cudaMemcpy(got, y, sizeof got, cudaMemcpyDeviceToHost));
    right = true;
    for (int i = 0; i < 256; i++)
        right = right && got[i] == 255 - i;
    CHECK(!right);
    cudaFree(x), cudaFree(y);
}

template <typename T> static void check_shuffles(int width)
{
    const int n = 64;
    T *d = dev_alloc<T>(5 * n), h[5 * n];
    MRT_LAUNCH(shuffle_kernel<T>, 1, n, 0, 0, d, width);
    CHECK_OK(cudaGetLastError());
    CHECK_OK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    for (int t = 0; t < n; t++) {
        const int lane = t & 31, seg = lane & ~(width - 1), hi = seg + width - 1, w = t & ~31;
        auto v = [&](int l) { return (T)((w + l) * 3 + 1); };
        CHECK(h[0 * n + t] == v(seg + (5 & (width - 1))));
        CHECK(h[1 * n + t] == (lane - 3 < seg ? v(lane) : v(lane - 3)));
        CHECK(h[2 * n + t] == (lane + 3 > hi ? v(lane) : v(lane + 3)));
        CHECK(h[3 * n + t] == ((lane ^ 6) > hi ? v(lane) : v(lane ^ 6)));
        T s = 0;
        for (int l = 0; l < 32; l++)
            s += v(l);
        CHECK(h[4 * n + t] == s);
    }
    cudaFree(d);
}

static void test_warp()
{
    check_shuffles<int>(32);
    check_shuffles<float>(16);
    check_shuffles<double>(8);
    check_shuffles<long long>(4);
    unsigned *d = dev_alloc<unsigned>(6), h[6];
    MRT_LAUNCH(vote_kernel, 1, 32, 0, 0, d);
    CHECK_OK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    unsigned want = 0;
    for (int l = 0; l < 32; l += 3)
        want |= 1u << l;
    CHECK(h[0] == want && h[1] == 1 && h[2] == 1 && h[3] == 496 && h[4] == 0xaaaau && (h[5] & 1u));
    cudaFree(d);
}

static void test_atomics()
{
    unsigned long long *count = dev_alloc<unsigned long long>(1);
    int *mx = dev_alloc<int>(1), *cas = dev_alloc<int>(1);
    CHECK_OK(cudaMemset(count, 0, 8));
    CHECK_OK(cudaMemset(mx, 0, 4));
    CHECK_OK(cudaMemset(cas, 0, 4));
    MRT_LAUNCH(atomics_kernel, 4, 256, 0, 0, count, mx, cas);
    unsigned long long c = 0;
    int m = 0, k = 0;
    CHECK_OK(cudaMemcpy(&c, count, 8, cudaMemcpyDeviceToHost));
    CHECK_OK(cudaMemcpy(&m, mx, 4, cudaMemcpyDeviceToHost));
    CHECK_OK(cudaMemcpy(&k, cas, 4, cudaMemcpyDeviceToHost));
    CHECK(c == 1024 && m == 1023 && k >= 1 && k <= 1024);
    cudaFree(count), cudaFree(mx), cudaFree(cas);
}

/* Without the barrier between the two sums, the first warp to finish its second warp sum
 * overwrites a word that other warps have not read yet: the default schedule (lowest thread
 * first, a warp running on as soon as its shuffle completes) shows it, as does reverse. */
static void test_race_between_reductions()
{
    int *d = dev_alloc<int>(4), h[4];
    const int init[4] = {1 << 30, -(1 << 30), 1 << 30, -(1 << 30)};
    for (int sync = 1; sync >= 0; sync--) {
        CHECK_OK(cudaMemcpy(d, init, sizeof init, cudaMemcpyHostToDevice));
        MRT_LAUNCH(two_sums_kernel, 1, 256, 0, 0, d, sync);
        CHECK_OK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
        const bool right = h[0] == 256 && h[1] == 256 && h[2] == 512 && h[3] == 512;
        const char *sched = getenv("CUDASIM_SCHEDULE");
        if (sync)
            CHECK(right);
        else if (!sched || strncmp(sched, "random", 6) != 0)
            CHECK(!right);
    }
    cudaFree(d);
}

static void test_launch_config()
{
    int *d = dev_alloc<int>(1);
    struct {
        dim3 grid, block;
    } bad[] = {{1, 1025}, {1, dim3(1024, 2)}, {1, dim3(1, 1, 65)}, {0, 32}, {dim3(1, 65536), 32},
               {dim3(1, 1, 65536), 32}, {dim3(2147483648u), 32}, {1, dim3(0, 1)}};
    for (auto &c : bad) {
        MRT_LAUNCH(nothing_kernel, c.grid, c.block, 0, 0, d);
        CHECK_ERR(cudaGetLastError(), cudaErrorInvalidConfiguration);
    }
    REPORTED("invalid launch configuration");
    cudaStream_t idle; // never synchronised: what is queued on it never runs
    CHECK_OK(cudaStreamCreate(&idle));
    MRT_LAUNCH(nothing_kernel, dim3(2147483647u), 1024, 0, idle, (int *)NULL);
    CHECK_OK(cudaGetLastError());
    MRT_LAUNCH(nothing_kernel, dim3(1, 65535, 65535), dim3(8, 8, 16), 0, idle, (int *)NULL);
    CHECK_OK(cudaGetLastError());
    cudaStream_t s;
    CHECK_OK(cudaStreamCreate(&s));
    MRT_LAUNCH(nothing_kernel, 1, 1, 0, s, d);
    CHECK_OK(cudaStreamDestroy(s));
    MRT_LAUNCH(nothing_kernel, 1, 1, 0, s, d); // a destroyed stream
    CHECK_ERR(cudaGetLastError(), cudaErrorInvalidResourceHandle);
    // no cudaFree(d): it would wait for `idle`, which holds two billion blocks
}

static void test_shared_memory_limit()
{
    cudaStream_t s;
    CHECK_OK(cudaStreamCreate(&s)); // a stream that is never synchronised: nothing runs
    MRT_LAUNCH(nothing_kernel, 1, 32, 48 * 1024, s, (int *)NULL);
    CHECK_OK(cudaGetLastError());
    MRT_LAUNCH(nothing_kernel, 1, 32, 48 * 1024 + 1, s, (int *)NULL);
    CHECK_ERR(cudaGetLastError(), cudaErrorInvalidValue);
    REPORTED("cudaFuncAttributeMaxDynamicSharedMemorySize");
    CHECK_OK(cudaFuncSetAttribute(nothing_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 100000));
    MRT_LAUNCH(nothing_kernel, 1, 32, 100000, s, (int *)NULL);
    CHECK_OK(cudaGetLastError());
    MRT_LAUNCH(nothing_kernel, 1, 32, 100001, s, (int *)NULL);
    CHECK_ERR(cudaGetLastError(), cudaErrorInvalidValue);
    CHECK_ERR(cudaFuncSetAttribute(nothing_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 232449),
              cudaErrorInvalidValue);
}

static void test_pointer_args()
{
    int host[4];
    int *heap = (int *)malloc(16), *d = dev_alloc<int>(4), *freed = dev_alloc<int>(4);
    void *pinned;
    CHECK_OK(cudaMallocHost(&pinned, 16));
    CHECK_OK(cudaFree(freed));
    MRT_LAUNCH(fill_kernel, 1, 4, 0, 0, host, 4, 0);
    CHECK_ERR(cudaGetLastError(), cudaErrorIllegalAddress);
    REPORTED("pointer argument 1 is");
    MRT_LAUNCH(fill_kernel, 1, 4, 0, 0, heap, 4, 0);
    CHECK_ERR(cudaGetLastError(), cudaErrorIllegalAddress);
    REPORTED("host memory (not from cudaMalloc)");
    MRT_LAUNCH(fill_kernel, 1, 4, 0, 0, freed, 4, 0);
    CHECK_ERR(cudaGetLastError(), cudaErrorIllegalAddress);
    REPORTED("freed");
    MRT_LAUNCH(fill_kernel, 1, 4, 0, 0, (int *)pinned, 4, 0); // pinned host memory is mapped
    CHECK_OK(cudaGetLastError());
    MRT_LAUNCH(fill_kernel, 1, 4, 0, 0, d + 4, 0, 0); // one past the end: a valid pointer
    CHECK_OK(cudaGetLastError());
    MRT_LAUNCH(fill_kernel, 1, 4, 0, 0, (int *)((char *)d + 2), 0, 0); // an int * off by 2 bytes
    CHECK_ERR(cudaGetLastError(), cudaErrorMisalignedAddress);
    REPORTED("is not aligned to the 4 bytes of its type");
    MRT_LAUNCH(float4_kernel, 1, 1, 0, 0, (float4 *)(d + 1));
    CHECK_ERR(cudaGetLastError(), cudaErrorMisalignedAddress);
    MRT_LAUNCH(float4_kernel, 1, 1, 0, 0, (float4 *)d);
    CHECK_OK(cudaGetLastError());
    CHECK_OK(cudaDeviceSynchronize());
    CHECK(((int *)pinned)[3] == 3);
    free(heap), cudaFree(d), cudaFreeHost(pinned);
}

static void kernel_reads_past_end()
{
    int *x = dev_alloc<int>(100), *y = dev_alloc<int>(1);
    MRT_LAUNCH(read_at_kernel, 1, 1, 0, 0, y, x, 100 + 1024);
}
static void kernel_reads_before_start()
{
    int *x = dev_alloc<int>(2000), *y = dev_alloc<int>(1);
    MRT_LAUNCH(read_at_kernel, 1, 1, 0, 0, y, x, -100); // x fills its pages: the guard before it
}
static void kernel_divergent_barrier()
{
    int *p = dev_alloc<int>(64);
    MRT_LAUNCH(divergent_barrier_kernel, 1, 64, 0, 0, p);
}
static void kernel_partial_warp()
{
    int *p = dev_alloc<int>(48);
    MRT_LAUNCH(partial_warp_shuffle_kernel, 1, 48, 0, 0, p);
}
static void kernel_exited_lanes()
{
    int *p = dev_alloc<int>(32);
    MRT_LAUNCH(exited_lanes_kernel, 1, 32, 0, 0, p);
}

static void test_kernel_faults()
{
    CHECK_DIES(kernel_reads_past_end, "kernel 'read_at_kernel' on cuda:0, block (0,0,0) thread (0,0,0): invalid "
                                      "read at 0x");
    CHECK_DIES(kernel_reads_past_end, "bytes past the end of the 400-byte allocation");
    CHECK_DIES(kernel_reads_before_start, "400 bytes before the 8000-byte allocation");
    CHECK_DIES(kernel_divergent_barrier, "threads wait at different __syncthreads");
    CHECK_DIES(kernel_partial_warp, "names lane 16, which does not exist (the block has 48 threads)");
    CHECK_DIES(kernel_exited_lanes, "a warp intrinsic waits for lanes that will not arrive");
}

/* ---------------------------------------------------------------- streams, events, peers */

static void test_streams_lazy()
{
    int *d = dev_alloc<int>(256);
    int *pinned;
    int pageable[256];
    CHECK_OK(cudaMallocHost((void **)&pinned, sizeof pageable));
    memset(pinned, 0, sizeof pageable);
    cudaStream_t s;
    CHECK_OK(cudaStreamCreate(&s));
    MRT_LAUNCH(fill_kernel, 2, 64, 0, s, d, 256, 10);
    CHECK_OK(cudaMemcpyAsync(pinned, d, sizeof pageable, cudaMemcpyDeviceToHost, s));
    CHECK(pinned[5] == 0); // queued, not run: the host must wait before reading
    CHECK_OK(cudaStreamSynchronize(s));
    CHECK(pinned[5] == 15 && pinned[255] == 265);
    MRT_LAUNCH(fill_kernel, 2, 64, 0, s, d, 256, 20);
    CHECK_OK(cudaMemcpyAsync(pageable, d, sizeof pageable, cudaMemcpyDeviceToHost, s)); // returns when done
    CHECK(pageable[5] == 25);
    pageable[0] = 77; // a pageable source is staged at the call: changing it later changes nothing
    CHECK_OK(cudaMemcpyAsync(d, pageable, 4, cudaMemcpyHostToDevice, s));
    pageable[0] = 78;
    CHECK_OK(cudaMemcpyAsync(pageable, d, 4, cudaMemcpyDeviceToHost, s));
    CHECK(pageable[0] == 77);
    CHECK_OK(cudaStreamDestroy(s));
    cudaFree(d), cudaFreeHost(pinned);
}

static void test_events()
{
    setenv("CUDASIM_DEVICES", "2", 1);
    int *x = dev_alloc<int>(128), *y = dev_alloc<int>(128), h[128];
    cudaStream_t s1, s2;
    cudaEvent_t e, t0, t1;
    CHECK_OK(cudaStreamCreate(&s1));
    CHECK_OK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CHECK_OK(cudaEventCreate(&e));
    CHECK_OK(cudaEventCreate(&t0));
    CHECK_OK(cudaEventCreate(&t1));
    CHECK_OK(cudaEventRecord(t0, s1));
    MRT_LAUNCH(fill_kernel, 1, 128, 0, s1, x, 128, 5);
    CHECK_OK(cudaEventRecord(e, s1));
    CHECK_OK(cudaStreamWaitEvent(s2, e, 0));
    MRT_LAUNCH(copy_kernel, 1, 128, 0, s2, y, x, 128);
    CHECK_OK(cudaEventRecord(t1, s2));
    float ms = -1;
    CHECK_ERR(cudaEventElapsedTime(&ms, t0, t1), cudaErrorNotReady);
    CHECK_OK(cudaStreamSynchronize(s2)); // s1's work up to e runs first
    CHECK_OK(cudaMemcpy(h, y, sizeof h, cudaMemcpyDeviceToHost));
    CHECK(h[0] == 5 && h[127] == 132);
    CHECK_OK(cudaEventSynchronize(t0));
    CHECK_OK(cudaEventElapsedTime(&ms, t0, t1));
    CHECK(ms >= 0);
    CHECK_OK(cudaSetDevice(1));
    cudaStream_t other;
    CHECK_OK(cudaStreamCreate(&other));
    CHECK_ERR(cudaEventRecord(e, other), cudaErrorInvalidResourceHandle); // e is cuda:0's
    CHECK_OK(cudaEventSynchronize(e)); // fine from any device
    CHECK_OK(cudaSetDevice(0));
    CHECK_OK(cudaEventDestroy(e));
    CHECK_ERR(cudaEventDestroy(e), cudaErrorInvalidResourceHandle);
    cudaStreamDestroy(s1), cudaStreamDestroy(s2), cudaFree(x), cudaFree(y);
}

/* The legacy NULL stream waits for the device's blocking streams, not for non-blocking ones. */
static void test_null_stream()
{
    int *d = dev_alloc<int>(64), h[64];
    cudaStream_t blocking, nonblocking;
    CHECK_OK(cudaStreamCreate(&blocking));
    CHECK_OK(cudaStreamCreateWithFlags(&nonblocking, cudaStreamNonBlocking));
    MRT_LAUNCH(fill_kernel, 1, 64, 0, blocking, d, 64, 100);
    CHECK_OK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    CHECK(h[1] == 101);
    MRT_LAUNCH(fill_kernel, 1, 64, 0, nonblocking, d, 64, 200);
    CHECK_OK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    CHECK(h[1] == 101); // the non-blocking stream's kernel has not run: a race the host lost
    CHECK_OK(cudaDeviceSynchronize());
    CHECK_OK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    CHECK(h[1] == 201);
    cudaStreamDestroy(blocking), cudaStreamDestroy(nonblocking), cudaFree(d);
}

static void test_free_async()
{
    cudaStream_t s;
    CHECK_OK(cudaStreamCreate(&s));
    int *p = NULL;
    CHECK_OK(cudaMallocAsync((void **)&p, 64, s));
    MRT_LAUNCH(fill_kernel, 1, 16, 0, s, p, 16, 0);
    CHECK_OK(cudaFreeAsync(p, s));
    CHECK_ERR(cudaFreeAsync(p, s), cudaErrorInvalidValue);
    CHECK(cudasim_live_bytes(0) == 256);
    CHECK_OK(cudaStreamSynchronize(s));
    CHECK(cudasim_live_bytes(0) == 0);
    CHECK_OK(cudaStreamDestroy(s));
}

static void test_wrong_device_stream()
{
    setenv("CUDASIM_DEVICES", "2", 1);
    int *d = dev_alloc<int>(4);
    cudaStream_t s1;
    CHECK_OK(cudaSetDevice(1));
    CHECK_OK(cudaStreamCreate(&s1));
    CHECK_OK(cudaSetDevice(0));
    MRT_LAUNCH(fill_kernel, 1, 4, 0, s1, d, 4, 0); // a kernel into another device's stream
    CHECK_ERR(cudaGetLastError(), cudaErrorInvalidResourceHandle);
    REPORTED("launched on cuda:0 into a stream of cuda:1");
    CHECK_OK(cudaMemcpyAsync(d, d, 0, cudaMemcpyDeviceToDevice, s1)); // copies may use any stream
    CHECK_OK(cudaStreamDestroy(s1));
}

static void test_peer()
{
    setenv("CUDASIM_DEVICES", "2", 1);
    int *a = dev_alloc<int>(64), *b, h[64];
    CHECK_OK(cudaSetDevice(1));
    b = dev_alloc<int>(64);
    CHECK_OK(cudaSetDevice(0));
    int can = -1;
    CHECK_OK(cudaDeviceCanAccessPeer(&can, 0, 1));
    CHECK(can == 1);
    CHECK_OK(cudaDeviceCanAccessPeer(&can, 0, 0));
    CHECK(can == 0);
    MRT_LAUNCH(fill_kernel, 1, 64, 0, 0, b, 64, 3); // cuda:0 writing cuda:1's memory
    CHECK_ERR(cudaGetLastError(), cudaErrorIllegalAddress);
    REPORTED("peer access to it is not enabled");
    CHECK_OK(cudaDeviceEnablePeerAccess(1, 0));
    CHECK_ERR(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessAlreadyEnabled);
    CHECK_ERR(cudaDeviceEnablePeerAccess(0, 0), cudaErrorInvalidDevice);
    (void)cudaGetLastError();
    MRT_LAUNCH(fill_kernel, 1, 64, 0, 0, b, 64, 3);
    CHECK_OK(cudaGetLastError());
    CHECK_OK(cudaMemcpyPeer(a, 0, b, 1, sizeof h));
    CHECK_OK(cudaMemcpy(h, a, sizeof h, cudaMemcpyDeviceToHost));
    CHECK(h[0] == 3 && h[63] == 66);
    CHECK_ERR(cudaMemcpyPeer(a, 1, b, 1, sizeof h), cudaErrorInvalidValue); // a is not cuda:1's
    CHECK_OK(cudaDeviceDisablePeerAccess(1));
    CHECK_ERR(cudaDeviceDisablePeerAccess(1), cudaErrorPeerAccessNotEnabled);
}

static void test_no_peer()
{
    setenv("CUDASIM_DEVICES", "2", 1);
    setenv("CUDASIM_PEER", "0", 1);
    int can = -1;
    CHECK_OK(cudaDeviceCanAccessPeer(&can, 0, 1));
    CHECK(can == 0);
    CHECK_ERR(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessUnsupported);
}

/* ---------------------------------------------------------------- the cuBLAS stand-in */

static void test_cublas()
{
    setenv("CUDASIM_DEVICES", "2", 1);
    const int M = 3, N = 2, K = 4; // column-major C [M, N] = A [M, K] B [K, N]
    float a[M * K], b[K * N], c[M * N], want[M * N];
    for (int i = 0; i < M * K; i++)
        a[i] = (float)(i + 1);
    for (int i = 0; i < K * N; i++)
        b[i] = (float)(i % 3 - 1);
    for (int j = 0; j < N; j++)
        for (int i = 0; i < M; i++) {
            float s = 0;
            for (int p = 0; p < K; p++)
                s += a[i + p * M] * b[p + j * K];
            want[i + j * M] = s;
        }
    float *da = dev_alloc<float>(M * K), *db = dev_alloc<float>(K * N), *dc = dev_alloc<float>(M * N);
    cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice);
    cudaMemcpy(db, b, sizeof b, cudaMemcpyHostToDevice);
    cublasHandle_t h;
    CHECK(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
    const float one = 1, zero = 0;
    CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, da, M, db, K, &zero, dc, M) == CUBLAS_STATUS_SUCCESS);
    CHECK_OK(cudaMemcpy(c, dc, sizeof c, cudaMemcpyDeviceToHost)); // NaN-filled C is not read: beta 0
    CHECK(memcmp(c, want, sizeof c) == 0);
    CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, da, M - 1, db, K, &zero, dc, M) ==
          CUBLAS_STATUS_INVALID_VALUE); // lda < m
    CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, a, M, db, K, &zero, dc, M) ==
          CUBLAS_STATUS_EXECUTION_FAILED); // A is host memory
    REPORTED("host memory (not from cudaMalloc)");
    CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N + 1, K, &one, da, M, db, K, &zero, dc, M) ==
          CUBLAS_STATUS_EXECUTION_FAILED); // B and C one column short
    CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, da, M, db, K, &zero, da, M) ==
          CUBLAS_STATUS_INVALID_VALUE); // C overlaps A
    REPORTED("item 0's output overlaps its input 1");
    CHECK(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, N, K, &one, da, 1, 1, db, K, 0, &zero, dc, 1, 1,
                                    2) == CUBLAS_STATUS_INVALID_VALUE); // the items' outputs overlap
    REPORTED("outputs of batch items overlap");
    CHECK_OK(cudaSetDevice(1));
    CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, da, M, db, K, &zero, dc, M) ==
          CUBLAS_STATUS_EXECUTION_FAILED); // the handle is cuda:0's
    REPORTED("the handle was created on cuda:0 but cuda:1 is current");
    CHECK_OK(cudaSetDevice(0));
    CHECK(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS);
}

/* The cuBLASLt stand-in: its heuristic offers the split-K algorithm (a workspace of 16 m n
 * bytes) first when the preference allows it, else the one without; cublasLtMatmul checks the
 * workspace as cuBLASLt documents (at least the algorithm's, 256-byte aligned) and as a GPU
 * would (device memory, apart from the matrices); CUDASIM_LT_NOALGO=1 finds no algorithm. */
static void test_cublaslt()
{
    const int M = 3, N = 2, K = 4; // column-major D [M, N] = A [M, K] B [K, N] + bias [M]
    float a[M * K], b[K * N], bias[M] = {1, -2, 3}, d[M * N], want[M * N];
    for (int i = 0; i < M * K; i++)
        a[i] = (float)(i + 1);
    for (int i = 0; i < K * N; i++)
        b[i] = (float)(i % 3 - 1);
    for (int j = 0; j < N; j++)
        for (int i = 0; i < M; i++) {
            float v = bias[i];
            for (int p = 0; p < K; p++)
                v += a[i + p * M] * b[p + j * K];
            want[i + j * M] = v;
        }
    float *da = dev_alloc<float>(M * K), *db = dev_alloc<float>(K * N), *dd = dev_alloc<float>(M * N);
    float *dbias = dev_alloc<float>(M), *ws = dev_alloc<float>(1024);
    cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice);
    cudaMemcpy(db, b, sizeof b, cudaMemcpyHostToDevice);
    cudaMemcpy(dbias, bias, sizeof bias, cudaMemcpyHostToDevice);
    cublasLtHandle_t h;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulPreference_t pref;
    CHECK(cublasLtCreate(&h) == CUBLAS_STATUS_SUCCESS);
    CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) == CUBLAS_STATUS_SUCCESS);
    CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias, sizeof dbias) ==
          CUBLAS_STATUS_SUCCESS);
    CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, M, K, M) == CUBLAS_STATUS_SUCCESS);
    CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, K, N, K) == CUBLAS_STATUS_SUCCESS);
    CHECK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, M, N, M) == CUBLAS_STATUS_SUCCESS);
    CHECK(cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulHeuristicResult_t r[2];
    int n = -1;
    // no workspace allowed (the default preference): one algorithm, needing none
    CHECK(cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, ld, ld, pref, 2, r, &n) == CUBLAS_STATUS_SUCCESS);
    CHECK(n == 1 && r[0].workspaceSize == 0);
    const float one = 1, zero = 0;
    CHECK(cublasLtMatmul(h, desc, &one, da, la, db, lb, &zero, dd, ld, dd, ld, &r[0].algo, NULL, 0, NULL) ==
          CUBLAS_STATUS_SUCCESS);
    CHECK_OK(cudaMemcpy(d, dd, sizeof d, cudaMemcpyDeviceToHost));
    CHECK(memcmp(d, want, sizeof d) == 0);
    // 4 KiB allowed: split-K first (16 * 3 * 2 = 96 bytes, 256 rounded), then the other
    uint64_t max_ws = 4096;
    CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws,
                                               sizeof max_ws) == CUBLAS_STATUS_SUCCESS);
    CHECK(cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, ld, ld, pref, 2, r, &n) == CUBLAS_STATUS_SUCCESS);
    CHECK(n == 2 && r[0].workspaceSize == 256 && r[1].workspaceSize == 0);
    const cublasLtMatmulAlgo_t *split = &r[0].algo;
    CHECK(cublasLtMatmul(h, desc, &one, da, la, db, lb, &zero, dd, ld, dd, ld, split, NULL, 0, NULL) ==
          CUBLAS_STATUS_INVALID_VALUE); // no workspace
    REPORTED("the algorithm needs 256 bytes of workspace, given 0");
    CHECK(cublasLtMatmul(h, desc, &one, da, la, db, lb, &zero, dd, ld, dd, ld, split, ws, 128, NULL) ==
          CUBLAS_STATUS_INVALID_VALUE); // too small
    CHECK(cublasLtMatmul(h, desc, &one, da, la, db, lb, &zero, dd, ld, dd, ld, split, ws + 1, 1024, NULL) ==
          CUBLAS_STATUS_INVALID_VALUE); // not 256-byte aligned
    REPORTED("not 256-byte aligned");
    static float host_ws[1024] __attribute__((aligned(256)));
    CHECK(cublasLtMatmul(h, desc, &one, da, la, db, lb, &zero, dd, ld, dd, ld, split, host_ws, 1024, NULL) ==
          CUBLAS_STATUS_EXECUTION_FAILED); // host memory
    REPORTED("cublasLtMatmul: the workspace");
    CHECK(cublasLtMatmul(h, desc, &one, da, la, db, lb, &zero, dd, ld, dd, ld, split, ws, 8192, NULL) ==
          CUBLAS_STATUS_EXECUTION_FAILED); // past the allocation
    CHECK(cublasLtMatmul(h, desc, &one, da, la, db, lb, &zero, dd, ld, dd, ld, &r[1].algo, ws + 1, 4, NULL) ==
          CUBLAS_STATUS_INVALID_VALUE); // any workspace given must be aligned
    cudaMemset(dd, 0xff, sizeof d);
    CHECK(cublasLtMatmul(h, desc, &one, da, la, db, lb, &zero, dd, ld, dd, ld, split, ws, 4096, NULL) ==
          CUBLAS_STATUS_SUCCESS);
    CHECK_OK(cudaMemcpy(d, dd, sizeof d, cudaMemcpyDeviceToHost));
    CHECK(memcmp(d, want, sizeof d) == 0);
    unsigned long long c[3];
    cudasim_lt_counts(c);
    CHECK(c[0] == 2 && c[1] == 1 && c[2] == 0);
    setenv("CUDASIM_LT_NOALGO", "1", 1);
    CHECK(cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, ld, ld, pref, 2, r, &n) == CUBLAS_STATUS_SUCCESS);
    CHECK(n == 0);
    unsetenv("CUDASIM_LT_NOALGO");
    cudasim_lt_counts(c);
    CHECK(c[2] == 1);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(desc);
    CHECK(cublasLtDestroy(h) == CUBLAS_STATUS_SUCCESS);
    cudaFree(da), cudaFree(db), cudaFree(dd), cudaFree(dbias), cudaFree(ws);
}

/* Capture and replay: a captured stream records instead of running; a launched graph runs the
 * operations again, in order, with the arguments of the capture; what CUDA forbids during a
 * capture fails and invalidates it; an update takes the same sequence with other arguments. */
static void test_graphs()
{
    int *d = dev_alloc<int>(256), *d2 = dev_alloc<int>(256), *pinned;
    int pageable[4] = {0};
    CHECK_OK(cudaMallocHost((void **)&pinned, 256 * sizeof(int)));
    memset(pinned, 0, 256 * sizeof(int));
    cudaStream_t s;
    CHECK_OK(cudaStreamCreate(&s));
    cudasim_counters c0, c1;
    CHECK_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    enum cudaStreamCaptureStatus cs;
    CHECK_OK(cudaStreamIsCapturing(s, &cs));
    CHECK(cs == cudaStreamCaptureStatusActive);
    MRT_LAUNCH(fill_kernel, 2, 64, 0, s, d, 256, 10);
    MRT_LAUNCH(copy_kernel, 2, 64, 0, s, d2, d, 256);
    CHECK_OK(cudaMemcpyAsync(pinned, d2, 256 * sizeof(int), cudaMemcpyDeviceToHost, s));
    cudaGraph_t g;
    CHECK_OK(cudaStreamEndCapture(s, &g));
    CHECK_OK(cudaStreamSynchronize(s));
    CHECK(pinned[5] == 0); // captured, not run
    cudaGraphExec_t x;
    CHECK_OK(cudaGraphInstantiate(&x, g, 0));
    cudasim_get_counters(&c0);
    for (int k = 0; k < 3; k++) {
        memset(pinned, 0, 256 * sizeof(int));
        CHECK_OK(cudaGraphLaunch(x, s));
        CHECK(pinned[5] == 0); // queued: the host must wait
        CHECK_OK(cudaStreamSynchronize(s));
        CHECK(pinned[5] == 15 && pinned[255] == 265);
    }
    cudasim_get_counters(&c1);
    CHECK(c1.launches == c0.launches && c1.copies == c0.copies && c1.graph_launches == c0.graph_launches + 3);
    // an update with other arguments (the same kernels in the same order) replays the new ones
    CHECK_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    MRT_LAUNCH(fill_kernel, 2, 64, 0, s, d, 256, 20);
    MRT_LAUNCH(copy_kernel, 2, 64, 0, s, d2, d, 256);
    CHECK_OK(cudaMemcpyAsync(pinned, d2, 256 * sizeof(int), cudaMemcpyDeviceToHost, s));
    cudaGraph_t g2;
    CHECK_OK(cudaStreamEndCapture(s, &g2));
    cudaGraphExecUpdateResultInfo info;
    CHECK_OK(cudaGraphExecUpdate(x, g2, &info));
    CHECK_OK(cudaGraphLaunch(x, s));
    CHECK_OK(cudaStreamSynchronize(s));
    CHECK(pinned[5] == 25);
    // another sequence is refused
    CHECK_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    MRT_LAUNCH(fill_kernel, 2, 64, 0, s, d, 256, 30);
    cudaGraph_t g3;
    CHECK_OK(cudaStreamEndCapture(s, &g3));
    CHECK_ERR(cudaGraphExecUpdate(x, g3, &info), cudaErrorGraphExecUpdateFailure);
    CHECK(info.result == cudaGraphExecUpdateErrorTopologyChanged);
    // what a capture forbids: a host wait, a synchronous copy, an allocation, pageable memory
    setenv("CUDASIM_QUIET", "1", 1);
    const struct {
        int what;
        cudaError_t want;
    } bad[] = {{0, cudaErrorStreamCaptureUnsupported}, {1, cudaErrorStreamCaptureUnsupported},
               {2, cudaErrorStreamCaptureUnsupported}, {3, cudaErrorStreamCaptureUnsupported},
               {4, cudaErrorStreamCaptureUnsupported}};
    for (const auto &b : bad) {
        CHECK_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        void *p = NULL;
        cudaError_t e = b.what == 0   ? cudaStreamSynchronize(s)
                        : b.what == 1 ? cudaMemcpy(pageable, d, sizeof pageable, cudaMemcpyDeviceToHost)
                        : b.what == 2 ? cudaMalloc(&p, 64)
                        : b.what == 3 ? cudaMemcpyAsync(pageable, d, sizeof pageable, cudaMemcpyDeviceToHost, s)
                                      : cudaDeviceSynchronize();
        CHECK(e == b.want);
        (void)cudaGetLastError();
        CHECK_OK(cudaStreamIsCapturing(s, &cs));
        CHECK(cs == cudaStreamCaptureStatusInvalidated);
        cudaGraph_t gb = (cudaGraph_t)1;
        CHECK_ERR(cudaStreamEndCapture(s, &gb), cudaErrorStreamCaptureInvalidated);
        CHECK(gb == NULL);
        (void)cudaGetLastError();
    }
    CHECK_ERR(cudaStreamBeginCapture(NULL, cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported);
    (void)cudaGetLastError();
    // cuBLAS: a GEMM in a capture needs the caller's workspace (cublasSetStream resets it)
    cublasHandle_t h;
    CHECK(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
    CHECK(cublasSetStream(h, s) == CUBLAS_STATUS_SUCCESS);
    float *fa = dev_alloc<float>(4), *fc = dev_alloc<float>(4), *ws = dev_alloc<float>(1024);
    const float one = 1, zero = 0;
    CHECK_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, fa, 2, fa, 2, &zero, fc, 2) ==
          CUBLAS_STATUS_NOT_SUPPORTED);
    CHECK(cublasSetWorkspace(h, ws, 4096) == CUBLAS_STATUS_SUCCESS);
    CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, fa, 2, fa, 2, &zero, fc, 2) ==
          CUBLAS_STATUS_SUCCESS);
    cudaGraph_t gg;
    CHECK_OK(cudaStreamEndCapture(s, &gg));
    CHECK_OK(cudaGraphDestroy(gg));
    CHECK(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS);
    CHECK_OK(cudaGraphExecDestroy(x));
    CHECK_OK(cudaGraphDestroy(g));
    CHECK_OK(cudaGraphDestroy(g2));
    CHECK_OK(cudaGraphDestroy(g3));
    CHECK_OK(cudaStreamDestroy(s));
    cudaFree(d), cudaFree(d2), cudaFree(fa), cudaFree(fc), cudaFree(ws), cudaFreeHost(pinned);
}

/* An executable graph holds device memory until it is destroyed (2 MiB for a few operations):
 * cudaMemGetInfo shows it, cudaMalloc cannot have it, and an instantiation that does not fit
 * fails with cudaErrorMemoryAllocation. */
static void test_graph_memory()
{
    setenv("CUDASIM_DEVICES", "1:5", 1); // 5 MiB
    int *d = dev_alloc<int>((3 << 20) / sizeof(int)); // 3 MiB
    cudaStream_t s;
    CHECK_OK(cudaStreamCreate(&s));
    CHECK_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    MRT_LAUNCH(fill_kernel, 2, 64, 0, s, d, 256, 10);
    cudaGraph_t g;
    CHECK_OK(cudaStreamEndCapture(s, &g));
    size_t fr0, fr1, total;
    CHECK_OK(cudaMemGetInfo(&fr0, &total));
    cudaGraphExec_t x, y;
    CHECK_OK(cudaGraphInstantiate(&x, g, 0));
    CHECK_OK(cudaMemGetInfo(&fr1, &total));
    CHECK(fr0 - fr1 == (size_t)2 << 20 && cudasim_live_bytes(0) == (size_t)3 << 20);
    CHECK_ERR(cudaGraphInstantiate(&y, g, 0), cudaErrorMemoryAllocation); // 0 MiB left
    REPORTED("cudaGraphInstantiate: the graph's 1 operations need 2097152 bytes of cuda:0, 0 free");
    (void)cudaGetLastError();
    void *p = NULL;
    CHECK_ERR(cudaMalloc(&p, 1 << 20), cudaErrorMemoryAllocation);
    (void)cudaGetLastError();
    CHECK_OK(cudaGraphExecDestroy(x));
    CHECK_OK(cudaMemGetInfo(&fr1, &total));
    CHECK(fr1 == fr0);
    CHECK_OK(cudaMalloc(&p, 1 << 20));
    CHECK_OK(cudaGraphDestroy(g));
    CHECK_OK(cudaStreamDestroy(s));
    cudaFree(p), cudaFree(d);
}

/* A capture over two streams of two devices, as a model split over two GPUs makes: the origin
 * forks into the other stream (an event recorded during the capture, which the other stream waits
 * for, pulls it in) and joins it back the same way before the capture ends; the replay runs the
 * operations of both in the captured order, each on its own device. A fork not joined back, a
 * wait across the capture's boundary, and an end on the stream that did not begin it fail as on
 * CUDA. */
static void test_graph_fork()
{
    setenv("CUDASIM_DEVICES", "2", 1);
    const size_t bytes = 256 * sizeof(int);
    CHECK_OK(cudaSetDevice(0));
    int *a = dev_alloc<int>(256), *pinned;
    CHECK_OK(cudaMallocHost((void **)&pinned, bytes));
    memset(pinned, 0, bytes);
    cudaStream_t s0, s1;
    cudaEvent_t fork, join;
    CHECK_OK(cudaStreamCreate(&s0));
    CHECK_OK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CHECK_OK(cudaSetDevice(1));
    int *b = dev_alloc<int>(256);
    CHECK_OK(cudaStreamCreate(&s1));
    CHECK_OK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    CHECK_OK(cudaSetDevice(0));
    CHECK_OK(cudaStreamBeginCapture(s0, cudaStreamCaptureModeThreadLocal));
    MRT_LAUNCH(fill_kernel, 2, 64, 0, s0, a, 256, 10); // a = 10 + i on cuda:0
    CHECK_OK(cudaEventRecord(fork, s0));
    CHECK_OK(cudaSetDevice(1));
    enum cudaStreamCaptureStatus cs;
    CHECK_OK(cudaStreamIsCapturing(s1, &cs));
    CHECK(cs == cudaStreamCaptureStatusNone);
    CHECK_OK(cudaStreamWaitEvent(s1, fork, 0)); // the fork
    CHECK_OK(cudaStreamIsCapturing(s1, &cs));
    CHECK(cs == cudaStreamCaptureStatusActive);
    CHECK_OK(cudaMemcpyPeerAsync(b, 1, a, 0, bytes, s1)); // b = a, then its first half 100 + i on cuda:1
    MRT_LAUNCH(fill_kernel, 2, 64, 0, s1, b, 128, 100);
    CHECK_OK(cudaEventRecord(join, s1));
    CHECK_OK(cudaSetDevice(0));
    CHECK_OK(cudaStreamWaitEvent(s0, join, 0)); // the join
    CHECK_OK(cudaMemcpyPeerAsync(a, 0, b, 1, bytes, s0));
    CHECK_OK(cudaMemcpyAsync(pinned, a, bytes, cudaMemcpyDeviceToHost, s0));
    cudaGraph_t g;
    CHECK_OK(cudaStreamEndCapture(s0, &g));
    CHECK_OK(cudaStreamIsCapturing(s1, &cs));
    CHECK(cs == cudaStreamCaptureStatusNone); // the capture ended for both
    CHECK_OK(cudaStreamSynchronize(s0));
    CHECK_OK(cudaStreamSynchronize(s1));
    CHECK(pinned[5] == 0); // captured, not run
    cudaGraphExec_t x;
    CHECK_OK(cudaGraphInstantiate(&x, g, 0));
    cudasim_counters c0, c1;
    cudasim_get_counters(&c0);
    for (int k = 0; k < 2; k++) {
        memset(pinned, 0, bytes);
        CHECK_OK(cudaGraphLaunch(x, s0));
        CHECK_OK(cudaStreamSynchronize(s0));
        CHECK(pinned[5] == 105 && pinned[127] == 227 && pinned[128] == 138 && pinned[255] == 265);
    }
    cudasim_get_counters(&c1);
    CHECK(c1.launches == c0.launches && c1.copies == c0.copies && c1.graph_launches == c0.graph_launches + 2);
    // a fork that is not joined back
    CHECK_OK(cudaStreamBeginCapture(s0, cudaStreamCaptureModeThreadLocal));
    CHECK_OK(cudaEventRecord(fork, s0));
    CHECK_OK(cudaSetDevice(1));
    CHECK_OK(cudaStreamWaitEvent(s1, fork, 0));
    MRT_LAUNCH(fill_kernel, 2, 64, 0, s1, b, 256, 1);
    CHECK_OK(cudaSetDevice(0));
    cudaGraph_t gu = (cudaGraph_t)1;
    CHECK_ERR(cudaStreamEndCapture(s0, &gu), cudaErrorStreamCaptureUnjoined);
    REPORTED("whose last 1 operations were not joined back");
    CHECK(gu == NULL);
    CHECK_OK(cudaStreamIsCapturing(s1, &cs));
    CHECK(cs == cudaStreamCaptureStatusNone);
    (void)cudaGetLastError();
    // a wait for an event recorded outside the capture: a dependency across its boundary
    CHECK_OK(cudaSetDevice(1));
    CHECK_OK(cudaEventRecord(join, s1));
    CHECK_OK(cudaSetDevice(0));
    CHECK_OK(cudaStreamBeginCapture(s0, cudaStreamCaptureModeThreadLocal));
    CHECK_ERR(cudaStreamWaitEvent(s0, join, 0), cudaErrorStreamCaptureIsolation);
    CHECK_ERR(cudaStreamEndCapture(s0, &gu), cudaErrorStreamCaptureInvalidated);
    (void)cudaGetLastError();
    // the capture ends on its origin, not on a stream it forked into
    CHECK_OK(cudaStreamBeginCapture(s0, cudaStreamCaptureModeThreadLocal));
    CHECK_OK(cudaEventRecord(fork, s0));
    CHECK_OK(cudaSetDevice(1));
    CHECK_OK(cudaStreamWaitEvent(s1, fork, 0));
    CHECK_ERR(cudaStreamEndCapture(s1, &gu), cudaErrorStreamCaptureUnmatched);
    CHECK_OK(cudaSetDevice(0));
    CHECK_ERR(cudaStreamEndCapture(s0, &gu), cudaErrorStreamCaptureInvalidated);
    (void)cudaGetLastError();
    CHECK_OK(cudaGraphExecDestroy(x));
    CHECK_OK(cudaGraphDestroy(g));
    CHECK_OK(cudaStreamDestroy(s0));
    CHECK_OK(cudaStreamDestroy(s1));
    CHECK_OK(cudaEventDestroy(fork));
    CHECK_OK(cudaEventDestroy(join));
    cudaFree(a), cudaFree(b), cudaFreeHost(pinned);
}

/* CUDASIM_CAPTURE_FAIL=op:N: the N-th operation queued on a capturing stream fails as one CUDA
 * cannot capture (cudaErrorStreamCaptureUnsupported) and invalidates the capture; later ones are
 * captured. (=end: test_capture_fail_end.) */
static void test_capture_fail_op()
{
    setenv("CUDASIM_CAPTURE_FAIL", "op:2", 1);
    int *d = dev_alloc<int>(64), *d2 = dev_alloc<int>(64);
    cudaStream_t s;
    CHECK_OK(cudaStreamCreate(&s));
    MRT_LAUNCH(fill_kernel, 1, 64, 0, s, d, 64, 1); // not capturing: not counted
    CHECK_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    MRT_LAUNCH(fill_kernel, 1, 64, 0, s, d, 64, 1);
    CHECK_OK(cudaGetLastError());
    MRT_LAUNCH(copy_kernel, 1, 64, 0, s, d2, d, 64);
    CHECK_ERR(cudaGetLastError(), cudaErrorStreamCaptureUnsupported);
    REPORTED("kernel copy_kernel on a capturing stream: fails as CUDASIM_CAPTURE_FAIL=op:2 asks");
    enum cudaStreamCaptureStatus cs;
    CHECK_OK(cudaStreamIsCapturing(s, &cs));
    CHECK(cs == cudaStreamCaptureStatusInvalidated);
    cudaGraph_t g;
    CHECK_ERR(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
    (void)cudaGetLastError();
    CHECK_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CHECK_OK(cudaMemsetAsync(d, 0, 64 * sizeof(int), s));
    MRT_LAUNCH(copy_kernel, 1, 64, 0, s, d2, d, 64);
    CHECK_OK(cudaGetLastError());
    CHECK_OK(cudaStreamEndCapture(s, &g));
    CHECK_OK(cudaGraphDestroy(g));
    CHECK_OK(cudaStreamDestroy(s));
    cudaFree(d), cudaFree(d2);
}

/* CUDASIM_CAPTURE_FAIL=end: cudaStreamEndCapture fails (and ends the capture). */
static void test_capture_fail_end()
{
    setenv("CUDASIM_CAPTURE_FAIL", "end", 1);
    int *d = dev_alloc<int>(64);
    cudaStream_t s;
    CHECK_OK(cudaStreamCreate(&s));
    CHECK_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    MRT_LAUNCH(fill_kernel, 1, 64, 0, s, d, 64, 1);
    CHECK_OK(cudaGetLastError());
    cudaGraph_t g = (cudaGraph_t)1;
    CHECK_ERR(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
    REPORTED("cudaStreamEndCapture: fails as CUDASIM_CAPTURE_FAIL=end asks");
    CHECK(g == NULL);
    enum cudaStreamCaptureStatus cs;
    CHECK_OK(cudaStreamIsCapturing(s, &cs));
    CHECK(cs == cudaStreamCaptureStatusNone);
    (void)cudaGetLastError();
    CHECK_OK(cudaStreamDestroy(s));
    cudaFree(d);
}

/* CUDASIM_FAULT: the chosen run of a kernel faults when it runs (lazily, at the host's wait), and
 * the error is sticky: cudaGetLastError does not clear it, every later call returns it. */
static void test_sticky_fault()
{
    setenv("CUDASIM_FAULT", "copy_kernel:2", 1);
    setenv("CUDASIM_QUIET", "1", 1);
    int *d = dev_alloc<int>(64), *d2 = dev_alloc<int>(64);
    cudaStream_t s;
    CHECK_OK(cudaStreamCreate(&s));
    MRT_LAUNCH(copy_kernel, 1, 64, 0, s, d2, d, 64);
    CHECK_OK(cudaStreamSynchronize(s)); // the first run is fine
    MRT_LAUNCH(copy_kernel, 1, 64, 0, s, d2, d, 64);
    CHECK_OK(cudaGetLastError()); // launched: the fault comes when it runs
    MRT_LAUNCH(fill_kernel, 1, 64, 0, s, d, 64, 1);
    CHECK_ERR(cudaStreamSynchronize(s), cudaErrorIllegalAddress);
    REPORTED("kernel 'copy_kernel' on cuda:0: fault injected by CUDASIM_FAULT (its run 2)");
    CHECK_ERR(cudaGetLastError(), cudaErrorIllegalAddress);
    CHECK_ERR(cudaPeekAtLastError(), cudaErrorIllegalAddress); // sticky
    void *p;
    CHECK_ERR(cudaMalloc(&p, 16), cudaErrorIllegalAddress);
}

/* ---------------------------------------------------------------- sampled launches */

__global__ void sampled_ids_kernel(int *out)
{
    if (threadIdx.x == 0)
        out[blockIdx.x + blockIdx.y * gridDim.x + blockIdx.z * gridDim.x * gridDim.y] = 1;
}

// y = x + 1 over n int8 elements, one element per thread, the index in 64 bits (field case B12)
__global__ void sampled_add_kernel(signed char *y, const signed char *x, long long n)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = (signed char)(x[i] + 1);
}

static long max_rss_kib()
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* CUDASIM_SAMPLE_BLOCKS: only the listed blocks of a matching kernel run (linear indices, -1 the
 * last), others' kernels run whole; with CUDASIM_FILL=none a kernel over 2^31 + 64 int8 elements
 * (B12's companion case, 4 GiB of device memory) runs its first and last blocks while the
 * process's memory grows by a few pages. */
static void test_sampled_blocks()
{
    setenv("CUDASIM_SAMPLE_BLOCKS", "sampled_:0,5,-1", 1);
    setenv("CUDASIM_FILL", "none", 1);
    setenv("CUDASIM_DEVICES", "1:8192", 1);
    int *ids = dev_alloc<int>(24), *all = dev_alloc<int>(24), h[24];
    CHECK_OK(cudaMemset(ids, 0, 24 * sizeof(int)));
    MRT_LAUNCH(sampled_ids_kernel, dim3(4, 3, 2), 32, 0, 0, ids);
    MRT_LAUNCH(fill_kernel, 3, 8, 0, 0, all, 24, 0); // not sampled: every block runs
    CHECK_OK(cudaMemcpy(h, ids, sizeof h, cudaMemcpyDeviceToHost));
    for (int b = 0; b < 24; b++)
        CHECK(h[b] == (b == 0 || b == 5 || b == 23));
    CHECK_OK(cudaMemcpy(h, all, sizeof h, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 24; i++)
        CHECK(h[i] == i);

    const long long n = (1LL << 31) + 64, blocks = (n + 255) / 256;
    const long rss0 = max_rss_kib();
    signed char *x = NULL, *y = NULL, in[256], out[256];
    CHECK_OK(cudaMalloc((void **)&x, (size_t)n));
    CHECK_OK(cudaMalloc((void **)&y, (size_t)n));
    for (int i = 0; i < 256; i++)
        in[i] = (signed char)(i % 100);
    const long long at[] = {0, 5 * 256, n - 64}; // the sampled blocks' elements (the last holds 64)
    for (long long a : at)
        CHECK_OK(cudaMemcpy(x + a, in, 64, cudaMemcpyHostToDevice));
    MRT_LAUNCH(sampled_add_kernel, (unsigned)blocks, 256, 0, 0, y, x, n);
    CHECK_OK(cudaGetLastError());
    for (long long a : at) {
        CHECK_OK(cudaMemcpy(out, y + a, 64, cudaMemcpyDeviceToHost));
        for (int i = 0; i < 64; i++)
            CHECK(out[i] == in[i] + 1);
    }
    CHECK_OK(cudaMemcpy(out, y + 256, 64, cudaMemcpyDeviceToHost)); // block 1 did not run
    for (int i = 0; i < 64; i++)
        CHECK(out[i] == 0);
    CHECK(max_rss_kib() - rss0 < 64 * 1024); // 4 GiB allocated, a few pages touched
    cudaFree(x), cudaFree(y), cudaFree(ids), cudaFree(all);
}

static void test_sampled_blocks_malformed()
{
    setenv("CUDASIM_SAMPLE_BLOCKS", "sampled_:0,,1", 1);
    int n = -1;
    CHECK_ERR(cudaGetDeviceCount(&n), cudaErrorInitializationError);
    REPORTED("CUDASIM_SAMPLE_BLOCKS='sampled_:0,,1' is malformed");
}

/* CUDASIM_FAULT=NAME:N takes N >= 1 and nothing after it (a 0, a sign or a suffix was read as
 * some number, or as none, and nothing was injected without a word). */
static void test_fault_malformed()
{
    setenv("CUDASIM_FAULT", "split_k4:1x", 1);
    int n = -1;
    CHECK_ERR(cudaGetDeviceCount(&n), cudaErrorInitializationError);
    REPORTED("CUDASIM_FAULT='split_k4:1x' is malformed");
}

/* ---------------------------------------------------------------- driver */

static const struct {
    const char *name;
    void (*fn)();
} k_tests[] = {
    {"devices", test_devices},
    {"device_sizes", test_device_sizes},
    {"bad_sizes", test_bad_sizes},
    {"visible_devices", test_visible_devices},
    {"no_devices", test_no_devices},
    {"no_driver", test_no_driver},
    {"bad_config", test_bad_config},
    {"error_strings", test_error_strings},
    {"memory", test_memory},
    {"memcpy_checks", test_memcpy_checks},
    {"pointer_attributes", test_pointer_attributes},
    {"host_dereference", test_host_dereference},
    {"barrier", test_barrier},
    {"missing_barrier", test_missing_barrier},
    {"warp", test_warp},
    {"atomics", test_atomics},
    {"race_between_reductions", test_race_between_reductions},
    {"launch_config", test_launch_config},
    {"shared_memory_limit", test_shared_memory_limit},
    {"pointer_args", test_pointer_args},
    {"kernel_faults", test_kernel_faults},
    {"streams_lazy", test_streams_lazy},
    {"events", test_events},
    {"null_stream", test_null_stream},
    {"graphs", test_graphs},
    {"graph_memory", test_graph_memory},
    {"graph_fork", test_graph_fork},
    {"capture_fail_op", test_capture_fail_op},
    {"capture_fail_end", test_capture_fail_end},
    {"sticky_fault", test_sticky_fault},
    {"free_async", test_free_async},
    {"wrong_device_stream", test_wrong_device_stream},
    {"peer", test_peer},
    {"no_peer", test_no_peer},
    {"cublas", test_cublas},
    {"cublaslt", test_cublaslt},
    {"sampled_blocks", test_sampled_blocks},
    {"sampled_blocks_malformed", test_sampled_blocks_malformed},
    {"fault_malformed", test_fault_malformed},
};

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--list")) {
        for (auto &t : k_tests)
            printf("%s\n", t.name);
        return 0;
    }
    for (auto &t : k_tests)
        if (argc == 2 && !strcmp(argv[1], t.name)) {
            setenv("CUDASIM_QUIET", "1", 1); // the diagnoses are checked through cudasim_last_report
            t.fn();
            if (g_why.empty())
                printf("PASS\n");
            else
                printf("FAIL: %s\n", g_why.c_str());
            return g_why.empty() ? 0 : 1;
        }
    fprintf(stderr, "usage: %s --list | NAME\n", argv[0]);
    return 2;
}
