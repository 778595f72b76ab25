/*
 * cudasim.h — the CUDA simulator of the tests: what it is, and the few calls beyond the CUDA
 * runtime API that its headers (cuda_runtime.h), its cuBLAS stand-in and its own tests use.
 *
 * What it is. The runtime's CUDA files (runtime/rt_cuda.c, runtime/rt_cuda_kernels.cu) and the
 * NAME.cu files modelc generates are compiled by the host compiler (C, and C++ for the .cu files)
 * against tests/cudasim/include instead of the toolkit, and linked with libcudasim.so:
 *
 *  - Devices: CUDASIM_DEVICES="N[:MiB[,MiB...][:MAJOR.MINOR]]" (default "1:16384:9.0"): N
 *    devices of MiB each, or with one size per device ("2:16384,8192:9.0": cuda:0 16 GiB,
 *    cuda:1 8 GiB; the sizes go by physical ordinal, before CUDA_VISIBLE_DEVICES); "0" gives
 *    cudaErrorNoDevice, "nodriver" cudaErrorInsufficientDriver (35) as on a machine without a
 *    driver. CUDA_VISIBLE_DEVICES is honoured like the driver does (a list of ordinals, cut at the
 *    first bad entry). CUDASIM_PEER=0 makes every pair of devices unable to access each other.
 *  - Memory: each device owns a reserved address range (mmap, PROT_NONE); every allocation gets
 *    pages of its own, 256-byte aligned and ending as close as alignment allows to a guard page,
 *    filled with 0xff bytes (float NaN) unless CUDASIM_FILL=none. Device pages are readable and
 *    writable only while the simulated device works (a kernel, a queued copy, a library call);
 *    freed pages go back to PROT_NONE for good, their addresses not reused until the range runs
 *    out. So the simulator tells device from host pointers by address, catches host code
 *    dereferencing device memory and kernels touching memory past an allocation's end or after
 *    its cudaFree (SIGSEGV, diagnosed, then abort), and checks every copy and memset against the
 *    allocation it lands in. A kernel dereferencing a host pointer it was not given as an
 *    argument is not caught.
 *  - Streams run lazily: work queues on its stream and runs only when the host waits for it
 *    (cudaStreamSynchronize, cudaEventSynchronize, cudaDeviceSynchronize, a cudaMemcpy to pageable
 *    memory, cudaFree, ...), in stream order, with events and cudaStreamWaitEvent ordering streams.
 *    The legacy NULL stream first drains the device's blocking streams and then runs at once.
 *    A host that reads a result before waiting for it sees the old bytes, as on a GPU.
 *  - Graphs from stream capture: between cudaStreamBeginCapture and cudaStreamEndCapture a
 *    stream records its operations instead of running them; cudaGraphInstantiate copies them,
 *    cudaGraphLaunch queues them again, in order, on its stream (cudaGraphExecUpdate accepts the
 *    same sequence of kernels and calls with other arguments). An executable graph holds device
 *    memory until cudaGraphExecDestroy, as a driver's does (64 KiB and 8 KiB per operation, in
 *    2 MiB pages: cudaMemGetInfo shows it; cudaErrorMemoryAllocation when it does not fit). What CUDA forbids during a
 *    capture fails with cudaErrorStreamCaptureUnsupported and invalidates it: a host
 *    synchronization, cudaMalloc/cudaFree/cudaMallocHost/cudaFreeHost, a synchronous copy or
 *    memset, a copy to or from pageable memory on the capturing stream. A capture forks as
 *    CUDA's does: an event recorded on a capturing stream and waited for by another stream (of
 *    any device) pulls that stream into the capture; the capture ends on the stream that began
 *    it, once that stream has waited for an event recorded after the last operation of every
 *    stream it forked into (else cudaErrorStreamCaptureUnjoined), and a replay runs the
 *    operations of all of them in the order they were captured, each on its own device. A
 *    capturing stream that waits for an event recorded outside its capture fails with
 *    cudaErrorStreamCaptureIsolation. CUDASIM_CAPTURE_FAIL=op:N makes the N-th operation
 *    queued on a capturing stream (kernel, copy, memset, library call) fail with
 *    cudaErrorStreamCaptureUnsupported and invalidate the capture; =end[:N] makes the N-th
 *    cudaStreamEndCapture (default: every one) fail with cudaErrorStreamCaptureInvalidated.
 *  - Kernels: blocks run one after another; the threads of a block are fibers (one 256 KiB stack
 *    each, switched by a few lines of assembly on x86-64, by ucontext elsewhere), one running at a
 *    time until it finishes or waits: __syncthreads releases when every live thread of the block
 *    waits at the same barrier; a warp intrinsic (__shfl_*_sync, __ballot_sync, __syncwarp, ...)
 *    completes when every lane of its mask has arrived with that mask, and the last lane to
 *    arrive computes every lane's result by the PTX rules (width, out-of-segment lanes). Barriers
 *    at different places, masks naming missing or exited lanes, reading a lane outside the mask,
 *    and waits that can never complete are diagnosed and abort. The lowest-numbered ready thread
 *    runs next, so a warp whose shuffle completes runs ahead of the others; CUDASIM_SCHEDULE=
 *    reverse or random[:SEED] picks the highest or one at random, so that a race one order hides
 *    shows in another. __shared__ variables (static, in section cudasim_shared) are refilled with
 *    0xff bytes before every block; dynamic `extern __shared__` memory is not provided. Atomics
 *    are plain read-modify-writes (no thread is interrupted between two waits); __activemask is
 *    the lanes not yet exited.
 *  - Faults: CUDASIM_FAULT=NAME[:N] makes the N-th run (default the first) of a kernel whose name
 *    contains NAME fault as an illegal address would on a GPU: it does not run, and the fault is
 *    sticky: every later call, cudaGetLastError included, returns cudaErrorIllegalAddress.
 *  - Sampled launches: CUDASIM_SAMPLE_BLOCKS=NAME:B[,B...] runs only the listed blocks of every
 *    kernel whose name contains NAME, in the order listed; B is the linear block index
 *    (x + y*gridDim.x + z*gridDim.x*gridDim.y), negative from the grid's end (-1 the last). With
 *    CUDASIM_FILL=none the pages no sampled block touches are never touched, so a kernel over a
 *    tensor of more than 2^31 elements (field case B12) runs its real index arithmetic on the
 *    blocks that matter (the first, those around element 2^31, the last) at no memory cost.
 *  - Launch checks, as the GPU's: block over 1024 threads or over (1024, 1024, 64), grid over
 *    (2^31-1, 65535, 65535) or empty: cudaErrorInvalidConfiguration; dynamic shared memory over
 *    48 KiB without cudaFuncSetAttribute(MaxDynamicSharedMemorySize), or over the opt-in limit:
 *    cudaErrorInvalidValue; a stream of another device: cudaErrorInvalidResourceHandle; a pointer
 *    argument that is host memory, freed, or another device's without peer access:
 *    cudaErrorIllegalAddress; one not aligned for its type (a float4 * off 16 bytes):
 *    cudaErrorMisalignedAddress. The kernel then does not run.
 *
 * cuBLAS and cuBLASLt: a checking stand-in, cublas_sim.cc, built as libcublas.so.13 (and
 * libcublasLt.so.13, a link to it), which runtime/rt_cuda.c dlopens unchanged. Its cuBLASLt
 * heuristic offers a split-K algorithm that needs a workspace whenever the preference allows
 * one, so a cublasLtMatmul without it fails; CUDASIM_LT_NOALGO=1 makes the heuristic find no
 * algorithm (read at each call); cudasim_lt_counts (dlsym in the loaded library) counts both.
 *
 * NCCL: a stand-in, nccl_sim.cc, built as libnccl.so.2 (which runtime/rt_nccl.c dlopens unchanged):
 * collectives in rank order over the simulated devices' memory, in one process or across processes
 * (a shared-memory file keyed by the unique id); CUDASIM_NCCL_FAIL=N[:RANK] and
 * CUDASIM_NCCL_TIMEOUT are described in that file.
 *
 * Build and use: `make cudasim` builds $B/cudasim (libcudasim.so, the stand-in, the runtime as
 * libmodelrt-sim.a, and bin/modelc, a modelc whose executables are built for the simulator with
 * tests/cudasim/nvcc.sh in place of nvcc); tests/cudasim/run.sh runs the suite.
 *
 * Every diagnosed error is also said on stderr as one "cudasim: ..." line (CUDASIM_QUIET=1
 * silences them). The simulator proves indexing, synchronisation and API use, not speed.
 */
#ifndef CUDASIM_H
#define CUDASIM_H

#include "cuda_runtime_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The identity of the simulated thread now running (read through threadIdx and friends). */
typedef struct cudasim_ids {
    uint3 threadIdx, blockIdx;
    dim3 blockDim, gridDim;
} cudasim_ids;
extern const cudasim_ids *cudasim_cur;

/* One kernel argument, for the launch checks: pointers are checked (where they point, and that
 * they are aligned for their pointee type, `align` bytes), other values ignored. */
typedef struct cudasim_arg {
    const void *ptr;
    int is_pointer;
    size_t align;
} cudasim_arg;

/* Queue a kernel (the closure runs the kernel body for the current simulated thread) on
 * `stream`; the launch error, if any, goes to cudaGetLastError, and drop(closure) is called
 * once the kernel ran or was refused. [shared_lo, shared_hi) is the cudasim_shared section of
 * the kernel's module (NULLs if it has none). cuda_runtime.h's cudasim_launch calls this. */
void cudasim_launch_kernel(const char *name, const void *func, dim3 grid, dim3 block, size_t shmem,
                           cudaStream_t stream, const cudasim_arg *args, int nargs,
                           void (*run)(void *), void *closure, void (*drop)(void *),
                           char *shared_lo, char *shared_hi);

/* Device-side primitives behind __syncthreads* and the warp intrinsics (cuda_runtime.h). */
enum { CUDASIM_BAR_SYNC, CUDASIM_BAR_COUNT, CUDASIM_BAR_AND, CUDASIM_BAR_OR };
int cudasim_barrier(int kind, int pred, const char *file, int line);
enum {
    CUDASIM_WARP_SYNC, CUDASIM_WARP_SHFL_IDX, CUDASIM_WARP_SHFL_UP, CUDASIM_WARP_SHFL_DOWN,
    CUDASIM_WARP_SHFL_XOR, CUDASIM_WARP_BALLOT, CUDASIM_WARP_REDUCE_ADD, CUDASIM_WARP_REDUCE_MIN,
    CUDASIM_WARP_REDUCE_MAX, CUDASIM_WARP_REDUCE_MIN_S, CUDASIM_WARP_REDUCE_MAX_S
};
unsigned long long cudasim_warp(int op, unsigned mask, unsigned long long value, int arg, int width,
                                const char *name, const char *file, int line);
unsigned cudasim_activemask(void);

/* For stand-ins of device libraries (the cuBLAS one): run(arg) in stream order on `stream`
 * (NULL: the current device's), then drop(arg); cudaErrorInvalidResourceHandle for a bad
 * stream. */
cudaError_t cudasim_enqueue(cudaStream_t stream, const char *what, void (*run)(void *), void *arg,
                            void (*drop)(void *));
/* The device of `stream` (NULL: the current device), or -1 for a stream that does not exist. */
int cudasim_stream_device(cudaStream_t stream);
/* 0 if [p, p + bytes) lies in one live device allocation (or pinned host memory) that `device`
 * may access (its own, or a peer's with peer access enabled); else says why on stderr, naming
 * `what`, and returns -1. */
int cudasim_check_access(const void *p, size_t bytes, int device, const char *what);
/* Say "cudasim: <message>" on stderr (unless CUDASIM_QUIET=1) and keep it for cudasim_last_report. */
void cudasim_report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The last message cudasim_report said in this process ("" if none). */
const char *cudasim_last_report(void);
/* What the host asked of the simulated devices since the process started: kernels launched
 * (accepted), library calls queued (cuBLAS stand-in), copies (every cudaMemcpy* of at least one
 * byte), and host synchronizations: calls that return only once device work is done (stream,
 * event and device synchronizations and queries, cudaMemcpy, cudaMemcpyAsync to pageable
 * memory, cudaMemcpyPeer, cudaMemset, cudaFree, cudaFreeHost). The runtime's --time finds this
 * with dlsym and prints the counts of a run; a real CUDA build has no such symbol. */
typedef struct cudasim_counters {
    unsigned long long launches, library_calls, copies, host_syncs;
    unsigned long long graph_launches; /* cudaGraphLaunch calls (their operations are not counted above) */
} cudasim_counters;
void cudasim_get_counters(cudasim_counters *out);
/* 1 if `stream` is being captured (cudaStreamBeginCapture), for the stand-ins. */
int cudasim_stream_capturing(cudaStream_t stream);
/* cudaMallocHost calls (of at least one byte) since the process started. */
unsigned long long cudasim_pinned_allocs(void);
/* Bytes of device memory live on `device` from cudaMalloc (for leak checks in tests); the
 * executable graphs' memory is not counted here (cudaMemGetInfo counts it). */
size_t cudasim_live_bytes(int device);
/* In the cuBLAS stand-in (libcublas.so.13, not libcudasim): out[0] cublasLtMatmul calls
 * accepted, out[1] those with a split-K algorithm (given a workspace), out[2] heuristic calls
 * that found no algorithm (CUDASIM_LT_NOALGO=1, or alignments no kernel can take). A program
 * that reaches the stand-in only through the runtime's dlopen finds it with dlopen(RTLD_NOLOAD)
 * and dlsym (tests/runtime/cuda_check.c). */
void cudasim_lt_counts(unsigned long long out[3]);

#ifdef __cplusplus
}
#endif

#endif /* CUDASIM_H */
