/*
 * rt_internal.h — helpers shared by the files of modelrt. Not part of the public API
 * (modelrt.h is); nothing here is promised to generated code or to embedders.
 */
#ifndef MODELRT_INTERNAL_H
#define MODELRT_INTERNAL_H

#include <sys/types.h>
#include "modelrt.h"
#include "rt_path.h"

/* rt_blocked.c (declared with its other calls in mrt_kernels.h) */
void mrt_blk_free(mrt_model *m);
int mrt_blk_released(const mrt_model *m);

#ifdef __cplusplus /* rt_cuda_kernels.cu may call the fake-CUDA seam */
extern "C" {
#endif

/* Enough for "[" + MRT_MAX_RANK dims of up to 20 digits and a sign, commas, "]", NUL. */
#define RT_SHAPE_STR_MAX 256

/** 1 if `dt` is one of MRT_F32, MRT_I32, MRT_I64, MRT_BOOL, MRT_F16, MRT_BF16. */
int rt_dtype_valid(mrt_dtype dt);

/** Format `shape` (rank 0..MRT_MAX_RANK) as "[128,64]" ("[]" for rank 0) into `buf` of `n`
 *  bytes; always NUL-terminated, cut when `n` is small. Returns `buf`. */
char *rt_shape_str(char *buf, size_t n, const int64_t *shape, int rank);

/** Element count of `shape` into *numel. Returns 0, or -1 when a dimension is negative or the
 *  product overflows 64 bits. Multiplies with an overflow check, never divides. */
int rt_shape_numel(const int64_t *shape, int rank, uint64_t *numel);

/** The log hook currently installed (for mrt_main to restore the caller's on return). */
void rt_log_hook_get(mrt_log_fn *fn, void **user);
/** A CPU GEMM of fewer multiply-adds (M*N*K) than this runs on the calling thread alone: every
 *  path, mrt_cpu_sgemm's dnnl_sgemm, rt_cpu_gemm's batches, and a prepared primitive (rt_matmul.c,
 *  planned for one thread). 1M multiply-adds is about 8 us on one core here; under it a fork/join
 *  of the team costs as much as it saves (docs/runtime.md, "Small kernels run on one thread").
 *  Measured on the idle 2-core VM, 2 threads: digits compiled --max-batch 360 (a 360x128x64
 *  prepared GEMM, 2.9M) runs in 0.026 ms a run split, 0.037 on one thread (median of 5000 runs,
 *  3 alternating rounds); on a machine where another process holds a core every split is slower
 *  than running alone, this one too (0.035-0.11 ms serial against 0.2-2.6 split at load average
 *  2.4), which is what --threads 1 is for. Thread-count independent by construction. */
#define RT_GEMM_SERIAL_MACS ((int64_t)1 << 20)
/** A batch of small disjoint products (rt_cpu_gemm: attention's per-head products) is spread one
 *  product per thread once their total reaches this (the imported BERT's 4 heads of 64x64x16,
 *  262K, stay on the calling thread: bench/gemm/RESULTS.md). */
#define RT_GEMM_BATCH_PAR_MACS ((int64_t)1 << 20)

/** Free a model's table of prepared GEMMs (m->matmul, rt_matmul.c); NULL is ignored. */
void rt_matmul_table_free(void *table);

/* modelc --precision bf16 (rt_matmul.c). rt_cpu_bf16: 1 when oneDNN runs bf16 kernels natively
 * on this CPU (avx512_bf16, or AMX, in its effective ISA, which DNNL_MAX_CPU_ISA may lower),
 * else 0 (always 0 without oneDNN). rt_model_bf16: 1 when m was compiled --precision bf16, d is
 * the CPU and rt_cpu_bf16(): its oneDNN primitives on d then compute in bf16. rt_precision_notice:
 * at load, says once per process (MRT_LOG_WARN) where a bf16 model runs in f32 instead (a CPU
 * without avx512_bf16, a GPU slot). */
int rt_cpu_bf16(void);
int rt_model_bf16(const mrt_model *m, mrt_device d);
void rt_precision_notice(const mrt_model *m);

/* ---------------------------------------------------------------- rt_npy.c */


/* ---------------------------------------------------------------- rt_device.c */


/* The test seam MODELRT_TEST_FAKE_CUDA=N[:MiB] (see modelrt.h): N fake CUDA devices, each with
 * MiB of memory (default 16384), that the probe of rt_cuda.c / rt_nocuda.c reports instead of
 * asking the driver, and that rt_device.c refuses to run anything on. */
#define RT_FAKE_CUDA_MAX 64             /* largest N */
#define RT_FAKE_CUDA_MAX_MIB 16777216   /* largest MiB (16 TiB) */
#define RT_FAKE_CUDA_DEFAULT_MIB 16384
#define RT_FAKE_CUDA_NAME "fake CUDA device (MODELRT_TEST_FAKE_CUDA)"

/** Reads MODELRT_TEST_FAKE_CUDA once per process. -1 when it is unset or empty: probe the
 *  driver as usual (*why = NULL). Else the seam is on and the driver must not be asked: returns
 *  N, or 0 for a malformed value, with *why (may be NULL) the reason to give for no devices
 *  ("" when N > 0; for a malformed value, a static message saying so). */
int rt_fake_cuda_count(const char **why);
/** The probe's entry for fake device `index` (0 <= index < N): RT_FAKE_CUDA_NAME, compute
 *  capability 9.0, total and free memory MiB << 20 bytes. */
void rt_fake_cuda_info(int index, mrt_device_info *info);
/** MRT_ERR_DEVICE "<what>: cuda:<index> is a fake device from MODELRT_TEST_FAKE_CUDA=<value> (a
 *  test seam); nothing runs on it" (index < 0: "<what>: the CUDA devices are fake, ..."). */
mrt_status rt_fake_cuda_refuse(int index, const char *what);

/* ---------------------------------------------------------------- rt_cuda.c / rt_nocuda.c
 * The CUDA half of the device API. rt_device.c handles the CPU and checks that a CUDA ordinal
 * is below mrt_cuda_device_count(), and that it is not a fake one (rt_fake_cuda_count), before
 * calling these; rt_cuda.c implements them in a build with CUDA (MRT_WITH_CUDA), rt_nocuda.c
 * answers MRT_ERR_DEVICE in a build without. Both probes report the fake devices. */

/** Smallest compute capability (major) the runtime's kernels are built for (sm_80). */
#define RT_CUDA_MIN_CC_MAJOR 8

/** Name, total memory and compute capability of CUDA device `index` (cached at the probe);
 *  free_bytes is queried only when with_free (that creates the device's context). A fake device
 *  gives rt_fake_cuda_info's entry, free memory included, without asking the driver. */
mrt_status rt_cuda_info(int index, mrt_device_info *info, int with_free);
/** cudaMalloc on device `index` (made current for the call, then restored); NULL with
 *  MRT_ERR_OOM naming bytes and device on failure. 0 bytes gives a unique 256-byte block. */
void *rt_cuda_alloc(int index, size_t bytes);
void rt_cuda_free(int index, void *p);
mrt_status rt_cuda_activate(int index);
mrt_status rt_cuda_stream_create(int index, void **stream);
void rt_cuda_stream_destroy(int index, void *stream);
/** Wait for the work queued on `stream`; with `collect`, then read the embeddings' id checks of
 *  the kernels that completed (an error names the first bad id). */
mrt_status rt_cuda_stream_sync(int index, void *stream, const char *what, int collect);
/** Make `waiter` (on cuda:wait_index) wait for the work queued so far on `stream` (on cuda:index):
 *  an event recorded on stream, cudaStreamWaitEvent on waiter. The host does not wait. */
mrt_status rt_cuda_stream_wait(int wait_index, void *waiter, int index, void *stream, const char *what);
/** Under the tests' CUDA simulator (tests/cudasim, found with dlsym), its counters since the
 *  process started: c = {kernel launches, library calls, copies, host synchronizations}; returns
 *  1. Returns 0, c untouched, with a real CUDA runtime or without CUDA. */
int rt_cuda_sim_counters(unsigned long long c[5]);
/** rt_cuda_kernels.cu: the deferred checks of the embeddings queued on `stream` of cuda:device
 *  (read after the stream was synchronized: the first bad id as an error), and their records
 *  freed before the stream is destroyed. */
mrt_status rt_cuda_checks_collect(int device, void *stream);
/** After a kernel launch or library call named `what` (rt_cuda.c): its launch error, or the
 *  sticky fault of earlier work (named so, with the last launch before), or, under
 *  MODELRT_CUDA_SYNC=1 (rt_cuda_sync_each), its own fault, found by waiting for the device. */
mrt_status rt_cuda_after_launch(const char *what);
int rt_cuda_sync_each(void);
void rt_cuda_checks_release(int device, void *stream);
/** The deferred checks and CUDA graphs (rt_cuda_kernels.cu): the records queued on the stream
 *  since its last synchronization (-1 if its records ever overflowed, which synchronizes the
 *  host in the middle of a run: such a run cannot be captured). */
int rt_cuda_checks_pending(int device, void *stream);
/** A copy (malloc) of what the host keeps of the stream's queued checks; restored before a
 *  graph that queued them is launched again (free the copy with free()). */
void *rt_cuda_checks_save(int device, void *stream);
void rt_cuda_checks_restore(int device, void *stream, const void *saved);
/** Forget the records queued on the stream since its last synchronization: a capture that was
 *  dropped queued them, and their kernels ran nowhere. */
void rt_cuda_checks_drop(int device, void *stream);
/** CUDA graphs (rt_cuda.c): capture the work queued on `stream` from _begin to _end, which
 *  instantiates it (or updates *exec) and launches it; _launch replays *exec; _abort ends a
 *  capture left open by a failed run and drops it. Other streams join the capture by waiting for
 *  `stream` (rt_cuda_stream_wait) and must be joined back before _end. */
mrt_status rt_cuda_graph_begin(int index, void *stream);
mrt_status rt_cuda_graph_end(int index, void *stream, void **exec);
mrt_status rt_cuda_graph_launch(int index, void *stream, void *exec);
void rt_cuda_graph_abort(int index, void *stream);
void rt_cuda_graph_destroy(int index, void *exec);
/** 1 if cuda:dst can read cuda:src's memory directly (peer access, enabled once per pair), so that
 *  a copy between them is queued on a stream; 0 if such copies go through the host. */
int rt_cuda_peer_access(int dst, int src);
/** cuBLAS's workspace for `stream` on cuda:index (allocated once per stream, freed with it) and
 *  its size, which the memory pre-flight counts for every CUDA slot. */
mrt_status rt_cuda_workspace(int index, void *stream, void **out);
size_t rt_cuda_workspace_bytes(int index);
/** Any copy with at least one CUDA side (see mrt_memcpy). */
mrt_status rt_cuda_memcpy(mrt_device dst_dev, void *dst, mrt_device src_dev, const void *src,
                          size_t bytes, void *stream);
/** The CUDA ordinal holding device memory p, or -1 for host memory or any error. */
int rt_cuda_pointer_index(const void *p);
/** cuBLASLt part of mrt_gemm_bias_act_f32 (arguments checked to fit int32). */
mrt_status rt_cuda_gemm_bias_act(int index, void *stream, int trans_b, int M, int N, int K, const float *A, int lda,
                                 const float *B, int ldb, float *C, int ldc, const float *bias, int act);
/** The epilogue of mrt_gemm_bias_act_f32 as a kernel (rt_cuda_kernels.cu), for a GEMM cuBLASLt
 *  has no algorithm for: C [M, N] (row stride ldc >= N, device memory) = act(C + bias) in place,
 *  bias [N] or NULL, act 0/1/2 (mrt_bias_act), queued on `stream` of the current device. Launches
 *  nothing when there is nothing to do; MRT_ERR_CUDA naming the kernel if the launch fails. */
mrt_status rt_cuda_bias_act(void *stream, float *C, int64_t ldc, int64_t M, int64_t N, const float *bias, int act);
/** cuBLAS part of mrt_gemm_f32 (arguments already checked to fit int32, batch >= 1). */
mrt_status rt_cuda_gemm(int index, void *stream, int trans_a, int trans_b, int M, int N, int K,
                        float alpha, const float *A, int lda, int64_t strideA, const float *B,
                        int ldb, int64_t strideB, float beta, float *C, int ldc, int64_t strideC,
                        int batch);

/* The file an output path lands in, to tell two paths to one file apart from two files
 * (rt_cli.c). */
typedef struct rt_dest {
    int exists;
    dev_t dev;
    ino_t ino;
    char *name; /* when it does not exist yet: realpath of its directory + "/" + base name */
} rt_dest;
/* 1 if two outputs would land in one file. */
int rt_dest_same(const rt_dest *a, const rt_dest *b);
/* Check an output path before anything runs: its directory exists and is writable; it is a
 * regular file, a name not there yet, or a symlink to one; it is none of the nreaders files
 * the run reads (readers[j], described as reader_what[j] in the message; NULL entries are
 * skipped). `what` names the output ("output 'y'", "--save"). Fills *d for rt_dest_same. */
/* The symbol that axis k of input/output `d` is exactly (a size of 1 * that symbol), or -1 (a
 * fixed axis, or a product of several symbols). Shared by the CLI and PROG train (rt_cli.c). */
int rt_axis_symbol(const mrt_io_desc *d, const mrt_model_info *info, int k);
mrt_status rt_output_check(const char *what, const char *path, const char *const *readers,
                           const char *const *reader_what, int nreaders, rt_dest *d);
/* A dtype's safetensors name: "F32", "I64", "BF16", ... ("?" for none) (rt_safetensors.c). */
const char *rt_safetensors_dtype(mrt_dtype dt);

/** The string value of `key` in the __metadata__ of the safetensors file at `path`, copied into
 *  out[cap] ("" when the file has no such entry). MRT_ERR_IO / MRT_ERR_FORMAT naming the file
 *  when it cannot be read or is not safetensors. */
mrt_status rt_safetensors_meta(const char *path, const char *key, char *out, size_t cap);

/* rt_device.c: the thread count of the last mrt_set_threads (0 before the first). The OpenMP
 * count is a per-thread setting: a thread the runtime starts applies it before it runs kernels. */
int rt_cpu_threads(void);

/* rt_dp.c: a team of n persistent threads (n <= MRT_DP_MAX); rt_team_run calls fn(ctx, i) on
 * thread i for every i at once and returns when all have returned. */
typedef struct rt_team rt_team;
mrt_status rt_team_create(rt_team **t, int n);
void rt_team_run(rt_team *t, void (*fn)(void *ctx, int i), void *ctx);
void rt_team_destroy(rt_team *t);
/* A device list: "all" (every CUDA device; MRT_ERR_DEVICE without one) or devices separated by
 * commas, each present and none twice; errors list the devices present. */
mrt_status rt_devices_parse(const char *s, mrt_device *dev, int *n);

/* rt_dp.c: the batch leads buffer d when axis 0 holds it once (as batch, or k*batch, or
 * batch*seq: a whole number of rows per batch item) and no other axis holds it; then the
 * buffer's batch items b0..b0+n-1 are the contiguous bytes [b0*unit, (b0+n)*unit), unit being
 * rt_batch_unit(d, dims) (bytes per batch item at the symbolic sizes dims; dims[0], the batch,
 * does not enter). Batch chunking (rt_cli.c), data parallelism and micro-batches cut buffers
 * with these two, so that an output such as reshape(h, [batch*2, 5]) takes its shard at 2*first. */
int rt_batch_leads(const mrt_io_desc *d);
size_t rt_batch_unit(const mrt_io_desc *d, const int64_t *dims);

/* rt_nccl.c: NCCL between GPUs, libnccl.so.2 (or $MODELRT_NCCL_LIB) loaded at run time on first
 * use. An rt_nccl holds this process's communicators: rt_nccl_init_all one per device of dev[n]
 * (ncclCommInitAll: every rank in this process), rt_nccl_init_rank one rank of `world` on
 * cuda:dev (ncclCommInitRank with the RT_NCCL_ID_BYTES-byte id of rt_nccl_unique_id, which rank
 * 0 makes and sends, or which every rank makes alike under NCCL_COMM_ID). Errors name the call,
 * the device, the rank and NCCL's message; a failed load names the library and how to install it.
 * rt_nccl_sumsq: *out = sum_k sum_e g[k][e]^2 on local rank i's GPU, in double, in a fixed order
 * (mrt_cuda_sumsq_partial_f32). The host collectives (one local rank): rt_nccl_host_allreduce_f64
 * sums x[n] in place over the ranks, rt_nccl_host_allgather_u64 gathers every rank's n values into
 * all[world * n] in rank order, through device scratch. rt_nccl_destroy (NULL-safe) destroys the
 * communicators, or aborts them (ncclCommAbort) when `abort` is set or an error was seen. */
#define RT_NCCL_ID_BYTES 128 /* NCCL_UNIQUE_ID_BYTES */
/* The values of nccl.h that rt_nccl.c passes (NCCL is not included: it is loaded at run time);
 * tests/runtime/nccl_abi.c checks them against an installed nccl.h. */
enum {
    RT_NCCL_SUCCESS = 0,            /* ncclSuccess */
    RT_NCCL_IN_PROGRESS = 7,        /* ncclInProgress */
    RT_NCCL_SUM = 0,                /* ncclSum */
    RT_NCCL_UINT64 = 5,             /* ncclUint64 */
    RT_NCCL_FLOAT = 7,              /* ncclFloat32 */
    RT_NCCL_FLOAT64 = 8,            /* ncclFloat64 */
    RT_NCCL_SCALAR_HOST_IMMEDIATE = 1 /* ncclScalarHostImmediate */
};
/* The NCCL calls rt_nccl.c makes, X(name, result type, parameters), with NCCL's types spelled
 * through the macros below (by default the int and void * that rt_nccl.c passes; nccl_abi.c
 * defines them as nccl.h's types to check each call against its prototype). */
#ifndef RT_NCCL_COMM
#define RT_NCCL_COMM void *      /* ncclComm_t */
#define RT_NCCL_ID rt_nccl_id    /* ncclUniqueId */
#define RT_NCCL_STREAM void *    /* cudaStream_t */
#define RT_NCCL_RESULT int       /* ncclResult_t */
#define RT_NCCL_DTYPE int        /* ncclDataType_t */
#define RT_NCCL_OP int           /* ncclRedOp_t */
#define RT_NCCL_RESIDENCE int    /* ncclScalarResidence_t */
#endif
typedef struct {
    char internal[RT_NCCL_ID_BYTES];
} rt_nccl_id;
#define RT_NCCL_CALLS(X)                                                                                          \
    X(ncclGetErrorString, const char *, (RT_NCCL_RESULT))                                                         \
    X(ncclGetVersion, RT_NCCL_RESULT, (int *))                                                                    \
    X(ncclGetUniqueId, RT_NCCL_RESULT, (RT_NCCL_ID *))                                                            \
    X(ncclCommInitRank, RT_NCCL_RESULT, (RT_NCCL_COMM *, int, RT_NCCL_ID, int))                                   \
    X(ncclCommInitAll, RT_NCCL_RESULT, (RT_NCCL_COMM *, int, const int *))                                        \
    X(ncclAllReduce, RT_NCCL_RESULT, (const void *, void *, size_t, RT_NCCL_DTYPE, RT_NCCL_OP, RT_NCCL_COMM,      \
                                      RT_NCCL_STREAM))                                                            \
    X(ncclAllGather, RT_NCCL_RESULT, (const void *, void *, size_t, RT_NCCL_DTYPE, RT_NCCL_COMM, RT_NCCL_STREAM)) \
    X(ncclGroupStart, RT_NCCL_RESULT, (void))                                                                     \
    X(ncclGroupEnd, RT_NCCL_RESULT, (void))                                                                       \
    X(ncclCommDestroy, RT_NCCL_RESULT, (RT_NCCL_COMM))                                                            \
    X(ncclCommAbort, RT_NCCL_RESULT, (RT_NCCL_COMM))                                                              \
    X(ncclCommGetAsyncError, RT_NCCL_RESULT, (RT_NCCL_COMM, RT_NCCL_RESULT *))                                    \
    X(ncclRedOpCreatePreMulSum, RT_NCCL_RESULT, (RT_NCCL_OP *, void *, RT_NCCL_DTYPE, RT_NCCL_RESIDENCE,          \
                                                 RT_NCCL_COMM))                                                   \
    X(ncclRedOpDestroy, RT_NCCL_RESULT, (RT_NCCL_OP, RT_NCCL_COMM))
/* optional (NCCL 2.13 and later): ncclGetLastError */
#define RT_NCCL_OPTIONAL(X) X(ncclGetLastError, const char *, (RT_NCCL_COMM))
typedef struct rt_nccl rt_nccl;
mrt_status rt_nccl_init_all(rt_nccl **out, const int *dev, int n);
mrt_status rt_nccl_unique_id(unsigned char *id);
mrt_status rt_nccl_init_rank(rt_nccl **out, int dev, int world, int rank, const unsigned char *id);
mrt_status rt_nccl_sumsq(rt_nccl *c, int i, float *const *g, const int64_t *numel, int n_grads, void *stream,
                         double *out);
/* The buckets of rt_ddp.c, posted while the backward pass goes on: rt_nccl_bucket_setup once
 * (for each local rank a communication stream, an event per bucket); per step and local rank i,
 * rt_nccl_bucket_begin (the pre-multiplied sum with weight w), rt_nccl_bucket_post for each
 * bucket b (gradients g[ks[0..nk)]; zeroed first when `zero`: an empty shard) once its
 * gradients are final on `stream`, the compute stream: an event recorded there, the
 * communication stream waiting on it, one ncclGroupStart/End of ncclAllReduce in place on the
 * communication stream; then rt_nccl_bucket_wait: the wait for the communication stream (an
 * asynchronous NCCL error or $MODELRT_NCCL_TIMEOUT seconds, default 600, is an error), and
 * `stream` made to wait for it
 * too, so the optimizer step queued next runs after the sums. */
mrt_status rt_nccl_bucket_setup(rt_nccl *c, int n_buckets);
mrt_status rt_nccl_bucket_begin(rt_nccl *c, int i, double w);
mrt_status rt_nccl_bucket_post(rt_nccl *c, int i, int b, float *const *g, const int64_t *numel, const int *ks, int nk,
                               void *stream, int zero, const char *const *names);
mrt_status rt_nccl_bucket_wait(rt_nccl *c, int i, void *stream);
mrt_status rt_nccl_host_allreduce_f64(rt_nccl *c, double *x, int n);
mrt_status rt_nccl_host_allgather_u64(rt_nccl *c, const uint64_t *mine, uint64_t *all, int n);
void rt_nccl_destroy(rt_nccl *c, int abort);

/* rt_mpi.c: MPI across processes, Open MPI loaded at run time. rt_mpi_start: *size 1 when the
 * process was not started by mpirun, else MPI_Init and this process's rank and the world size
 * (MRT_ERR_DEVICE when mpirun started it but libmpi.so.40 cannot be loaded). The collectives
 * sum in place over every rank; rt_mpi_bcast sends `bytes` bytes of buf from rank `root` to
 * every rank (the NCCL id of GPU ranks); rt_mpi_abort ends every rank (MPI_Abort); rt_mpi_finish
 * is MPI_Finalize. */
mrt_status rt_mpi_start(int *rank, int *size);
mrt_status rt_mpi_allreduce_f32(float *x, int64_t n);
mrt_status rt_mpi_allreduce_f64(double *x, int n);
/* Non-blocking: rt_mpi_iallreduce_f32 posts the in-place sum of x[n] (MPI_Iallreduce; x must stay
 * untouched until the wait), rt_mpi_test lets Open MPI progress the posted ones (MPI_Testall),
 * rt_mpi_wait_all waits for every one posted (MPI_Testall polled for at most $MODELRT_MPI_TIMEOUT
 * seconds, else 600: a stuck rank is an error, and rt_mpi_broken says so). One thread calls them. */
mrt_status rt_mpi_iallreduce_f32(float *x, int64_t n);
mrt_status rt_mpi_test(void);
mrt_status rt_mpi_wait_all(void);
mrt_status rt_mpi_allgather_u64(const uint64_t *mine, uint64_t *all, int n);
mrt_status rt_mpi_bcast(void *buf, int bytes, int root);
/* 1 when an MPI wait timed out (MODELRT_MPI_TIMEOUT): the ranks are not in step, so an error
 * must end the job with rt_mpi_abort, not MPI_Finalize (which would wait for the stuck rank). */
int rt_mpi_broken(void);
void rt_mpi_abort(int code);
void rt_mpi_finish(void);
/* rt_ddp.c: the gradient reducer of data-parallel training (PyTorch DDP's Reducer), buckets
 * all-reduced while the backward pass goes on. rt_ddp_create: over the n local replicas rep[]
 * (their gradients grad[i][k], numel[k] floats each, k < desc->n_grads, as desc->grad_ptrs gives
 * them; the arrays stay the caller's and must outlive it), the buckets cut from desc->grad_ready
 * at bucket_mb MiB each (<= 0: $MODELRT_DDP_BUCKET_MB, else 25); sets each rep[i]->ddp, so that
 * run()'s mrt_grad_ready calls hand the buckets over. RT_DDP_THREADS: CPU replicas in one
 * process, reduced by a thread of its own; RT_DDP_MPI: this rank's one replica, MPI_Iallreduce;
 * RT_DDP_NCCL: GPU replicas (or this GPU rank) with the communicators `nccl` (names[k] name the
 * gradients in its errors), ncclAllReduce on a communication stream (rt_nccl_bucket_*).
 * Per step: rt_ddp_begin with each replica's weight w[i] (its share n_i / n, or 1 for a summed
 * loss) and shard size count[i] (0: it does not run; its gradients are left out, or zeroed on
 * a rank or GPU), then the replicas' run()s with m->defer_update, each followed on its own thread
 * by rt_ddp_replica_done(d, i) (also for an empty shard: a GPU replica's collectives must all be
 * posted while its peers wait in theirs), then rt_ddp_finish (the buckets not yet handed over,
 * then the wait for all): every replica's gradients are then the weighted sum, *sumsq their
 * squared norm (CPU: each gradient's in double, added in gradient order; GPU: rt_nccl_sumsq).
 * rt_ddp_buckets: how many; rt_ddp_overlapped: of the last step, the buckets whose reduction
 * started before the backward pass made its last gradient final (on the last replica to get
 * there): at most rt_ddp_buckets - 1. rt_ddp_destroy (NULL-safe) clears rep[i]->ddp. */
typedef struct rt_ddp rt_ddp;
enum { RT_DDP_THREADS, RT_DDP_MPI, RT_DDP_NCCL };
mrt_status rt_ddp_create(rt_ddp **out, int kind, mrt_model *const *rep, int n, float **const *grad,
                         const int64_t *numel, double bucket_mb, rt_nccl *nccl, const char *const *names);
mrt_status rt_ddp_begin(rt_ddp *d, const double *w, const int64_t *count);
mrt_status rt_ddp_replica_done(rt_ddp *d, int i);
mrt_status rt_ddp_finish(rt_ddp *d, double *sumsq);
int rt_ddp_buckets(const rt_ddp *d);
int rt_ddp_overlapped(const rt_ddp *d);
void rt_ddp_destroy(rt_ddp *d);

/* malloc'd printf, NULL when out of memory. */
char *rt_strdup_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A decimal number, all of s: [+-]digits[.digits][e[+-]digits]; 1 and *x when it is one and
 * finite, 0 otherwise (hex, inf, nan, blanks, trailing characters, overflow: what strtod alone
 * would accept or saturate). For the command line's and the environment's numbers. */
int rt_parse_real(const char *s, double *x);
/* The seconds in environment variable `name` (a timeout): dflt when it is unset or empty; an
 * error naming the variable when it is not a positive decimal (rt_parse_real). */
mrt_status rt_env_seconds(const char *name, double dflt, double *out);
/* An on/off environment variable (MODELRT_KEEP_WEIGHTS, MODELRT_CUDA_SYNC, ...): dflt when it is
 * unset or empty; 1 for 1, true, yes, on; 0 for 0, false, no, off (any case); any other value
 * gives dflt and a warning naming the variable and the values it takes (once per variable). */
int rt_env_flag(const char *name, int dflt);
/* Whether some prepared GEMM of m holds a param's bytes packed in their own storage
 * (MRT_MATMUL_PACK, rt_matmul.c): the params buffer then is not plain, and whatever would read
 * it back (copy, save) must refuse or read the file again. A packed load-time value (computed
 * from the params at each load) leaves the params plain and does not count. */
int rt_matmul_packed(const mrt_model *m);

/* Write the concatenation of parts[0..n) to path atomically (rt_npy.c): a temporary file beside
 * it, synced and renamed into place; `kind` names the file type in messages. */
mrt_status rt_write_atomic(const char *path, const char *kind, const void *const *parts, const size_t *lens, int n);
/* Unlink every temporary file rt_write_atomic is writing at this moment; async-signal-safe (the
 * CLI's signal handler calls it, so that a Ctrl-C during a save leaves no PATH.tmp.XXXXXX). */
void rt_remove_temporaries(void);


#ifdef __cplusplus
}
#endif

#endif /* MODELRT_INTERNAL_H */
