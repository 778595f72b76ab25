/*
 * rt_nccl.c — NCCL between GPUs for data-parallel training (`PROG train --devices cuda:0,cuda:1`,
 * GPU ranks under mpirun or torchrun), loaded at run time.
 *
 * Nothing links against NCCL: the first communicator dlopens libnccl.so.2 (or $MODELRT_NCCL_LIB)
 * and looks up the functions it calls, as rt_cuda.c loads cuBLAS and rt_mpi.c Open MPI, so a
 * program that never trains on several GPUs never needs the library. The types of nccl.h that
 * cross the calls (ncclUniqueId's 128 bytes, the enums) are declared here with NCCL's values.
 *
 * Gradients are all-reduced in place in the buckets of rt_ddp.c (PyTorch DDP's, 25 MiB by
 * default), each posted by its local rank as the backward pass finishes it: one
 * ncclGroupStart/ncclGroupEnd of ncclAllReduce on the rank's communication stream, which waits
 * for an event on its compute stream (rt_nccl_bucket_post). The weighting by shard size is
 * NCCL's own ncclRedOpCreatePreMulSum (sum_r w_r * g_r, the scalar read at the call), so no
 * kernel scales the gradients first. The waits poll ncclCommGetAsyncError beside cudaStreamQuery, and give up after
 * $MODELRT_NCCL_TIMEOUT seconds (default 600, PyTorch's NCCL timeout) with ncclCommAbort: a rank
 * whose peer died stops with an error instead of hanging.
 *
 * The reduction order: NCCL's result is a deterministic function of the message size, the
 * topology, the algorithm and the channel count, so a run repeats bit for bit on one machine.
 * Unless the user set them, NCCL_ALGO=Ring is set before the first communicator, so that the
 * algorithm does not switch to a tree by message size.
 */
#include "modelrt.h"
#include "rt_internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef MRT_WITH_CUDA
#include <cuda_runtime_api.h>

/* nccl.h's types as the calls see them (rt_internal.h's RT_NCCL_* spell them) */
typedef void *ncclComm_t;
typedef int ncclResult_t;
typedef int ncclRedOp_t;
typedef rt_nccl_id ncclUniqueId;
enum { NCCL_SUCCESS = RT_NCCL_SUCCESS, NCCL_IN_PROGRESS = RT_NCCL_IN_PROGRESS, NCCL_SUM = RT_NCCL_SUM,
       NCCL_UINT64 = RT_NCCL_UINT64, NCCL_FLOAT = RT_NCCL_FLOAT, NCCL_FLOAT64 = RT_NCCL_FLOAT64,
       NCCL_SCALAR_HOST_IMMEDIATE = RT_NCCL_SCALAR_HOST_IMMEDIATE };

static struct {
    int tried;
    mrt_status st;
    char err[640];
    void *lib;
#define RT_NCCL_MEMBER(name, ret, args) ret(*name) args;
    RT_NCCL_CALLS(RT_NCCL_MEMBER)
    RT_NCCL_OPTIONAL(RT_NCCL_MEMBER)
#undef RT_NCCL_MEMBER
    int version;
} nccl;

/* The communicators of this process: n local ranks (one per GPU) of a world of `world`. */
struct rt_nccl {
    int n, world, rank0; /* local rank i is global rank rank0 + i */
    int dev[MRT_DP_MAX];
    ncclComm_t comm[MRT_DP_MAX];
    double *part[MRT_DP_MAX]; /* device scratch: the gradient norm's partial sums */
    size_t part_n;
    void *scratch;            /* device scratch of local rank 0 for the host collectives */
    size_t scratch_bytes;
    cudaStream_t own;         /* local rank 0's stream for the host collectives */
    int broken;               /* an error was seen: the communicators are aborted, not destroyed */
    double timeout;           /* seconds a collective may take: $MODELRT_NCCL_TIMEOUT, else 600 */
    /* the buckets posted during the backward pass (rt_nccl_bucket_*): each local rank's
     * communication stream, an event per bucket on its compute stream, one at the end of its
     * communication, and this step's pre-multiplied sum */
    int n_buckets;
    cudaStream_t comm_stream[MRT_DP_MAX];
    cudaEvent_t *ready[MRT_DP_MAX], done[MRT_DP_MAX];
    ncclRedOp_t op[MRT_DP_MAX];
    int has_op[MRT_DP_MAX];
};

static mrt_status nccl_load(void)
{
    if (nccl.tried)
        return nccl.st == MRT_OK ? MRT_OK : mrt_set_error(nccl.st, "%s", nccl.err);
    nccl.tried = 1;
    nccl.st = MRT_ERR_DEVICE;
    const char *name = getenv("MODELRT_NCCL_LIB");
    if (!name || !*name)
        name = "libnccl.so.2";
    nccl.lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!nccl.lib) {
        const char *de = dlerror();
        snprintf(nccl.err, sizeof nccl.err, "data-parallel training on GPUs needs NCCL, and %s cannot be loaded (%s): "
                 "install NCCL 2.11 or later (NVIDIA's CUDA repository: apt-get install libnccl2; or pip install "
                 "nvidia-nccl-cu12 and add its nvidia/nccl/lib to LD_LIBRARY_PATH), or name the library in "
                 "MODELRT_NCCL_LIB", name, de ? de : "not found");
        return mrt_set_error(nccl.st, "%s", nccl.err);
    }
    struct {
        const char *sym;
        void **at;
    } syms[] = {
#define RT_NCCL_SYM(name, ret, args) {#name, (void **)&nccl.name},
        RT_NCCL_CALLS(RT_NCCL_SYM)
#undef RT_NCCL_SYM
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++)
        if (!(*syms[i].at = dlsym(nccl.lib, syms[i].sym))) {
            snprintf(nccl.err, sizeof nccl.err, "%s has no '%s': NCCL 2.11 or later is needed", name, syms[i].sym);
            return mrt_set_error(nccl.st, "%s", nccl.err);
        }
    *(void **)&nccl.ncclGetLastError = dlsym(nccl.lib, "ncclGetLastError");
    nccl.ncclGetVersion(&nccl.version);
    setenv("NCCL_ALGO", "Ring", 0); /* a fixed reduction order for every message size (see above) */
    nccl.st = MRT_OK;
    return MRT_OK;
}

/* The error of NCCL call `what` that returned r, on communicator c (may be NULL). */
static mrt_status nccl_fail(ncclResult_t r, ncclComm_t c, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static mrt_status nccl_fail(ncclResult_t r, ncclComm_t c, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    const char *last = c && nccl.ncclGetLastError ? nccl.ncclGetLastError(c) : NULL;
    return mrt_set_error(MRT_ERR_DEVICE, "%s: NCCL error %d (%s)%s%s", what, r, nccl.ncclGetErrorString(r),
                         last && *last ? ": " : "", last && *last ? last : "");
}

static double nccl_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Wait for local rank i's stream, watching its communicator: an asynchronous NCCL error (a peer
 * gone) or MODELRT_NCCL_TIMEOUT seconds without completion is an error, and the communicators
 * are then aborted (rt_nccl_destroy). */
static mrt_status nccl_wait(rt_nccl *c, int i, cudaStream_t s, const char *what)
{
    double t0 = nccl_now(), limit = c->timeout;
    cudaSetDevice(c->dev[i]);
    for (long spins = 0;; spins++) {
        cudaError_t q = cudaStreamQuery(s);
        if (q == cudaSuccess)
            return MRT_OK;
        if (q != cudaErrorNotReady) {
            c->broken = 1;
            return mrt_set_error(MRT_ERR_CUDA, "%s on cuda:%d (rank %d of %d): %s", what, c->dev[i], c->rank0 + i,
                                 c->world, cudaGetErrorString(q));
        }
        ncclResult_t ae = NCCL_SUCCESS;
        nccl.ncclCommGetAsyncError(c->comm[i], &ae);
        if (ae != NCCL_SUCCESS && ae != NCCL_IN_PROGRESS) {
            c->broken = 1;
            return nccl_fail(ae, c->comm[i], "%s on cuda:%d (rank %d of %d)", what, c->dev[i], c->rank0 + i, c->world);
        }
        if (nccl_now() - t0 > limit) {
            c->broken = 1;
            return mrt_set_error(MRT_ERR_DEVICE, "%s on cuda:%d (rank %d of %d) did not finish within %g s "
                                 "(MODELRT_NCCL_TIMEOUT): a rank is gone or stuck", what, c->dev[i], c->rank0 + i,
                                 c->world, limit);
        }
        struct timespec ts = {0, spins < 1000 ? 20000 : 1000000};
        nanosleep(&ts, NULL);
    }
}

static mrt_status nccl_scratch(rt_nccl *c)
{
    cudaSetDevice(c->dev[0]);
    if (cudaStreamCreateWithFlags(&c->own, cudaStreamNonBlocking) != cudaSuccess)
        return mrt_set_error(MRT_ERR_CUDA, "cuda:%d: cannot create a stream for NCCL", c->dev[0]);
    return MRT_OK;
}

mrt_status rt_nccl_init_all(rt_nccl **out, const int *dev, int n)
{
    *out = NULL;
    mrt_status st = nccl_load();
    if (st != MRT_OK)
        return st;
    double limit; /* PyTorch's NCCL timeout; a bad value is an error, not the default */
    if ((st = rt_env_seconds("MODELRT_NCCL_TIMEOUT", 600, &limit)) != MRT_OK)
        return st;
    rt_nccl *c = calloc(1, sizeof *c);
    if (!c)
        return mrt_set_error(MRT_ERR_OOM, "out of memory");
    c->timeout = limit;
    c->n = c->world = n;
    memcpy(c->dev, dev, sizeof *dev * (size_t)n);
    int was = 0;
    cudaGetDevice(&was);
    ncclResult_t r = nccl.ncclCommInitAll(c->comm, n, dev);
    if (r != NCCL_SUCCESS) {
        char list[160] = "";
        for (int i = 0; i < n; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%scuda:%d", i ? "," : "", dev[i]);
        free(c);
        cudaSetDevice(was);
        return nccl_fail(r, NULL, "ncclCommInitAll over %s (NCCL %d)", list, nccl.version);
    }
    st = nccl_scratch(c);
    cudaSetDevice(was);
    if (st != MRT_OK) {
        rt_nccl_destroy(c, 1);
        return st;
    }
    *out = c;
    return MRT_OK;
}

mrt_status rt_nccl_unique_id(unsigned char *id)
{
    mrt_status st = nccl_load();
    if (st != MRT_OK)
        return st;
    ncclUniqueId u;
    ncclResult_t r = nccl.ncclGetUniqueId(&u);
    if (r != NCCL_SUCCESS) {
        const char *cid = getenv("NCCL_COMM_ID");
        return nccl_fail(r, NULL, "ncclGetUniqueId%s%s%s", cid ? " (NCCL_COMM_ID=" : "", cid ? cid : "", cid ? ")" : "");
    }
    memcpy(id, u.internal, RT_NCCL_ID_BYTES);
    return MRT_OK;
}

mrt_status rt_nccl_init_rank(rt_nccl **out, int dev, int world, int rank, const unsigned char *id)
{
    *out = NULL;
    mrt_status st = nccl_load();
    if (st != MRT_OK)
        return st;
    double limit; /* PyTorch's NCCL timeout; a bad value is an error, not the default */
    if ((st = rt_env_seconds("MODELRT_NCCL_TIMEOUT", 600, &limit)) != MRT_OK)
        return st;
    rt_nccl *c = calloc(1, sizeof *c);
    if (!c)
        return mrt_set_error(MRT_ERR_OOM, "out of memory");
    c->timeout = limit;
    c->n = 1;
    c->world = world;
    c->rank0 = rank;
    c->dev[0] = dev;
    ncclUniqueId u;
    memcpy(u.internal, id, RT_NCCL_ID_BYTES);
    int was = 0;
    cudaGetDevice(&was);
    cudaSetDevice(dev);
    ncclResult_t r = nccl.ncclCommInitRank(&c->comm[0], world, u, rank);
    if (r != NCCL_SUCCESS) {
        free(c);
        cudaSetDevice(was);
        const char *cid = getenv("NCCL_COMM_ID");
        return nccl_fail(r, NULL, "ncclCommInitRank (rank %d of %d on cuda:%d%s%s, NCCL %d)", rank, world, dev,
                         cid ? ", NCCL_COMM_ID=" : "", cid ? cid : "", nccl.version);
    }
    st = nccl_scratch(c);
    cudaSetDevice(was);
    if (st != MRT_OK) {
        rt_nccl_destroy(c, 1);
        return st;
    }
    *out = c;
    return MRT_OK;
}

mrt_status rt_nccl_bucket_setup(rt_nccl *c, int n_buckets)
{
    int was = 0;
    cudaGetDevice(&was);
    mrt_status st = MRT_OK;
    c->n_buckets = n_buckets;
    for (int i = 0; i < c->n && st == MRT_OK; i++) {
        cudaSetDevice(c->dev[i]);
        if (!(c->ready[i] = calloc((size_t)n_buckets + 1, sizeof *c->ready[i])))
            st = mrt_set_error(MRT_ERR_OOM, "out of memory");
        else if (cudaStreamCreateWithFlags(&c->comm_stream[i], cudaStreamNonBlocking) != cudaSuccess ||
                 cudaEventCreateWithFlags(&c->done[i], cudaEventDisableTiming) != cudaSuccess)
            st = mrt_set_error(MRT_ERR_CUDA, "cuda:%d: cannot create the stream and events of the gradients' all-reduce",
                               c->dev[i]);
        for (int b = 0; b < n_buckets && st == MRT_OK; b++)
            if (cudaEventCreateWithFlags(&c->ready[i][b], cudaEventDisableTiming) != cudaSuccess)
                st = mrt_set_error(MRT_ERR_CUDA, "cuda:%d: cannot create the event of gradient bucket %d", c->dev[i], b);
    }
    cudaSetDevice(was);
    return st;
}

mrt_status rt_nccl_bucket_begin(rt_nccl *c, int i, double w)
{
    float s = (float)w;
    ncclResult_t r = nccl.ncclRedOpCreatePreMulSum(&c->op[i], &s, NCCL_FLOAT, NCCL_SCALAR_HOST_IMMEDIATE, c->comm[i]);
    if (r != NCCL_SUCCESS)
        return nccl_fail(r, c->comm[i], "ncclRedOpCreatePreMulSum on cuda:%d", c->dev[i]);
    c->has_op[i] = 1;
    return MRT_OK;
}

mrt_status rt_nccl_bucket_post(rt_nccl *c, int i, int b, float *const *g, const int64_t *numel, const int *ks, int nk,
                               void *stream, int zero, const char *const *names)
{
    if (c->broken || !c->has_op[i]) /* a communicator failed: nothing more is posted (the wait reports it) */
        return MRT_OK;
    int was = 0;
    cudaGetDevice(&was);
    cudaSetDevice(c->dev[i]);
    mrt_status st = MRT_OK;
    size_t bytes = 0;
    for (int j = 0; j < nk; j++) {
        bytes += sizeof(float) * (size_t)numel[ks[j]];
        if (zero && st == MRT_OK && /* an empty shard's gradients are stale: zeroed */
            cudaMemsetAsync(g[ks[j]], 0, sizeof(float) * (size_t)numel[ks[j]], (cudaStream_t)stream) != cudaSuccess)
            st = mrt_set_error(MRT_ERR_CUDA, "cuda:%d: cannot clear the gradient of '%s' of an empty shard", c->dev[i],
                               names[ks[j]]);
    }
    /* the communication stream takes the bucket once the compute stream has finished it */
    if (st == MRT_OK && (cudaEventRecord(c->ready[i][b], (cudaStream_t)stream) != cudaSuccess ||
                         cudaStreamWaitEvent(c->comm_stream[i], c->ready[i][b], 0) != cudaSuccess))
        st = mrt_set_error(MRT_ERR_CUDA, "cuda:%d: cannot order gradient bucket %d after the backward pass: %s", c->dev[i],
                           b, cudaGetErrorString(cudaGetLastError()));
    ncclResult_t r = st == MRT_OK ? nccl.ncclGroupStart() : NCCL_SUCCESS;
    for (int j = 0; j < nk && st == MRT_OK && r == NCCL_SUCCESS; j++)
        r = nccl.ncclAllReduce(g[ks[j]], g[ks[j]], (size_t)numel[ks[j]], NCCL_FLOAT, c->op[i], c->comm[i],
                               c->comm_stream[i]);
    if (st == MRT_OK) {
        ncclResult_t e = nccl.ncclGroupEnd();
        if (r == NCCL_SUCCESS)
            r = e;
        if (r != NCCL_SUCCESS && r != NCCL_IN_PROGRESS) {
            c->broken = 1;
            st = nccl_fail(r, c->comm[i], "the all-reduce of gradient bucket %d ('%s'%s%s%s, %zu bytes) on cuda:%d (rank %d "
                           "of %d)", b, names[ks[0]], nk > 1 ? " .. '" : "", nk > 1 ? names[ks[nk - 1]] : "",
                           nk > 1 ? "'" : "", bytes, c->dev[i], c->rank0 + i, c->world);
        }
    }
    cudaSetDevice(was);
    return st;
}

mrt_status rt_nccl_bucket_wait(rt_nccl *c, int i, void *stream)
{
    int was = 0;
    cudaGetDevice(&was);
    cudaSetDevice(c->dev[i]);
    mrt_status st = nccl_wait(c, i, c->comm_stream[i], "the gradients' all-reduce");
    /* the optimizer step, on the compute stream, after the communication (the host saw it end too) */
    if (st == MRT_OK && (cudaEventRecord(c->done[i], c->comm_stream[i]) != cudaSuccess ||
                         cudaStreamWaitEvent((cudaStream_t)stream, c->done[i], 0) != cudaSuccess))
        st = mrt_set_error(MRT_ERR_CUDA, "cuda:%d: cannot order the optimizer step after the gradients' all-reduce",
                           c->dev[i]);
    if (c->has_op[i] && !c->broken)
        nccl.ncclRedOpDestroy(c->op[i], c->comm[i]);
    c->has_op[i] = 0;
    cudaSetDevice(was);
    return st;
}

mrt_status rt_nccl_sumsq(rt_nccl *c, int i, float *const *g, const int64_t *numel, int n_grads, void *stream, double *out)
{
    *out = 0;
    if (n_grads < 1)
        return MRT_OK;
    int was = 0;
    cudaGetDevice(&was);
    cudaSetDevice(c->dev[i]);
    size_t need = (size_t)n_grads * MRT_CUDA_SUMSQ_BLOCKS;
    mrt_status st = MRT_OK;
    if (c->part_n < need) { /* the same size every step: allocated at the first */
        for (int j = 0; j < c->n; j++) {
            cudaSetDevice(c->dev[j]);
            if (c->part[j])
                cudaFree(c->part[j]);
            c->part[j] = NULL;
            if (cudaMalloc((void **)&c->part[j], sizeof(double) * need) != cudaSuccess) {
                c->part_n = 0;
                cudaSetDevice(was);
                return mrt_set_error(MRT_ERR_OOM, "cuda:%d: cannot allocate %zu bytes for the gradient norm", c->dev[j],
                                     sizeof(double) * need);
            }
        }
        c->part_n = need;
        cudaSetDevice(c->dev[i]);
    }
    double *host = malloc(sizeof *host * need), sum = 0;
    if (!host)
        st = mrt_set_error(MRT_ERR_OOM, "out of memory");
    for (int k = 0; k < n_grads && st == MRT_OK; k++)
        st = mrt_cuda_sumsq_partial_f32(stream, c->part[i] + (size_t)k * MRT_CUDA_SUMSQ_BLOCKS, g[k], numel[k]);
    if (st == MRT_OK &&
        (cudaMemcpyAsync(host, c->part[i], sizeof *host * need, cudaMemcpyDeviceToHost, (cudaStream_t)stream) != cudaSuccess ||
         cudaStreamSynchronize((cudaStream_t)stream) != cudaSuccess))
        st = mrt_set_error(MRT_ERR_CUDA, "cuda:%d: reading the gradient norm's partial sums failed: %s", c->dev[i],
                           cudaGetErrorString(cudaGetLastError()));
    for (size_t b = 0; st == MRT_OK && b < need; b++) /* in order: the same sum on every GPU */
        sum += host[b];
    free(host);
    *out = sum;
    cudaSetDevice(was);
    return st;
}

/* A host collective through local rank 0's scratch: in (bytes_in) to the device, the
 * collective, out (bytes_out) back. */
static mrt_status nccl_host(rt_nccl *c, const void *in, size_t bytes_in, void *out, size_t bytes_out, int gather,
                            int dtype, size_t count, const char *what)
{
    int was = 0;
    cudaGetDevice(&was);
    cudaSetDevice(c->dev[0]);
    size_t need = bytes_in + bytes_out;
    if (need > c->scratch_bytes) {
        if (c->scratch)
            cudaFree(c->scratch);
        c->scratch = NULL;
        c->scratch_bytes = 0;
        if (cudaMalloc(&c->scratch, need) != cudaSuccess) {
            cudaSetDevice(was);
            return mrt_set_error(MRT_ERR_OOM, "cuda:%d: cannot allocate %zu bytes for NCCL", c->dev[0], need);
        }
        c->scratch_bytes = need;
    }
    unsigned char *sin = c->scratch, *sout = sin + bytes_in;
    mrt_status st = MRT_OK;
    if (cudaMemcpyAsync(sin, in, bytes_in, cudaMemcpyHostToDevice, c->own) != cudaSuccess)
        st = mrt_set_error(MRT_ERR_CUDA, "cuda:%d: copying %zu bytes for %s failed", c->dev[0], bytes_in, what);
    ncclResult_t r = NCCL_SUCCESS;
    if (st == MRT_OK) {
        r = gather ? nccl.ncclAllGather(sin, sout, count, dtype, c->comm[0], c->own)
                   : nccl.ncclAllReduce(sin, sout, count, dtype, NCCL_SUM, c->comm[0], c->own);
        if (r != NCCL_SUCCESS && r != NCCL_IN_PROGRESS) {
            c->broken = 1;
            st = nccl_fail(r, c->comm[0], "%s on cuda:%d (rank %d of %d)", what, c->dev[0], c->rank0, c->world);
        }
    }
    if (st == MRT_OK)
        st = nccl_wait(c, 0, c->own, what);
    if (st == MRT_OK && (cudaMemcpyAsync(out, sout, bytes_out, cudaMemcpyDeviceToHost, c->own) != cudaSuccess ||
                         cudaStreamSynchronize(c->own) != cudaSuccess))
        st = mrt_set_error(MRT_ERR_CUDA, "cuda:%d: copying %zu bytes back after %s failed", c->dev[0], bytes_out, what);
    cudaSetDevice(was);
    return st;
}

mrt_status rt_nccl_host_allreduce_f64(rt_nccl *c, double *x, int n)
{
    return nccl_host(c, x, sizeof *x * (size_t)n, x, sizeof *x * (size_t)n, 0, NCCL_FLOAT64, (size_t)n,
                     "an all-reduce of the step's flags and loss");
}

mrt_status rt_nccl_host_allgather_u64(rt_nccl *c, const uint64_t *mine, uint64_t *all, int n)
{
    return nccl_host(c, mine, sizeof *mine * (size_t)n, all, sizeof *mine * (size_t)n * (size_t)c->world, 1,
                     NCCL_UINT64, (size_t)n, "the all-gather of the ranks' settings");
}

void rt_nccl_destroy(rt_nccl *c, int abort)
{
    if (!c)
        return;
    int was = 0;
    cudaGetDevice(&was);
    for (int i = 0; i < c->n; i++) {
        cudaSetDevice(c->dev[i]);
        if (c->comm[i])
            (c->broken || abort ? nccl.ncclCommAbort : nccl.ncclCommDestroy)(c->comm[i]);
        if (c->part[i])
            cudaFree(c->part[i]);
        for (int b = 0; c->ready[i] && b < c->n_buckets; b++)
            if (c->ready[i][b])
                cudaEventDestroy(c->ready[i][b]);
        free(c->ready[i]);
        if (c->done[i])
            cudaEventDestroy(c->done[i]);
        if (c->comm_stream[i])
            cudaStreamDestroy(c->comm_stream[i]);
    }
    cudaSetDevice(c->dev[0]);
    if (c->scratch)
        cudaFree(c->scratch);
    if (c->own)
        cudaStreamDestroy(c->own);
    cudaSetDevice(was);
    free(c);
}

#else /* a build without CUDA */

static mrt_status no_cuda(void)
{
    return mrt_set_error(MRT_ERR_DEVICE, "NCCL: this build of modelrt has no CUDA support");
}
mrt_status rt_nccl_init_all(rt_nccl **out, const int *dev, int n)
{
    *out = NULL;
    return no_cuda();
}
mrt_status rt_nccl_unique_id(unsigned char *id)
{
    return no_cuda();
}
mrt_status rt_nccl_init_rank(rt_nccl **out, int dev, int world, int rank, const unsigned char *id)
{
    *out = NULL;
    return no_cuda();
}
mrt_status rt_nccl_sumsq(rt_nccl *c, int i, float *const *g, const int64_t *numel, int n_grads, void *stream, double *out)
{
    return no_cuda();
}
mrt_status rt_nccl_bucket_setup(rt_nccl *c, int n_buckets)
{
    return no_cuda();
}
mrt_status rt_nccl_bucket_begin(rt_nccl *c, int i, double w)
{
    return no_cuda();
}
mrt_status rt_nccl_bucket_post(rt_nccl *c, int i, int b, float *const *g, const int64_t *numel, const int *ks, int nk,
                               void *stream, int zero, const char *const *names)
{
    return no_cuda();
}
mrt_status rt_nccl_bucket_wait(rt_nccl *c, int i, void *stream)
{
    return no_cuda();
}
mrt_status rt_nccl_host_allreduce_f64(rt_nccl *c, double *x, int n)
{
    return no_cuda();
}
mrt_status rt_nccl_host_allgather_u64(rt_nccl *c, const uint64_t *mine, uint64_t *all, int n)
{
    return no_cuda();
}
void rt_nccl_destroy(rt_nccl *c, int abort)
{
}
#endif
