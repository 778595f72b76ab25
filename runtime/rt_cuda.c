/*
 * rt_cuda.c — the CUDA half of the device API (built only with CUDA: -DMRT_WITH_CUDA; without
 * it, rt_nocuda.c stands in). It talks to the CUDA runtime API, linked statically
 * (cudart_static), so that a program starts, and runs on the CPU, on a machine with no driver.
 *
 * The probe (cudaGetDeviceCount and each device's properties) runs once, under pthread_once,
 * and only when something asks about CUDA; any error from it means "no usable GPU", with the
 * reason kept for messages (no driver gives error 35, CUDA_VISIBLE_DEVICES="" error 100).
 * With the test seam MODELRT_TEST_FAKE_CUDA set (rt_fake_cuda_count), the probe reports the
 * fake devices instead and never asks the driver; rt_device.c refuses all work on them.
 *
 * Every call that needs a device makes it current for the call and restores the caller's
 * current device afterwards (the device guard of PyTorch eager; field case B14), except
 * mrt_device_activate, whose job is to change it. cuBLAS is not linked: it is dlopen'ed on the
 * first GEMM on a CUDA device, with one handle per device kept for the life of the process,
 * used under that device's lock. cuBLASLt (the GEMMs with an epilogue) keeps, per device, the
 * descriptors and the heuristic's algorithm of the last few shapes, chosen for the pointers'
 * real alignments (a caller's buffer used in place may be only 4-byte aligned) and the stream's
 * workspace (the one cuBLAS uses); a shape the heuristic has no algorithm for runs as a cuBLAS
 * GEMM and a bias/activation kernel instead. Copies between two GPUs: a peer copy on the
 * destination's stream, after that stream waited for the source's, and which the source's stream
 * then waits for (mrt_stream_wait, from the generated code), or, without peer access, a
 * synchronous copy through one pinned buffer kept for the process.
 */
#include "rt_internal.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef MRT_WITH_CUDA
#error "rt_cuda.c is the CUDA build's file; without CUDA the Makefile builds rt_nocuda.c"
#endif

#define RT_CUDA_MAX_DEVICES 64
#define RT_STAGE_BYTES ((size_t)64 << 20) /* pinned buffer for GPU-to-GPU copies without peer access */

_Static_assert(RT_FAKE_CUDA_MAX <= RT_CUDA_MAX_DEVICES, "the probe holds every fake device");

static void rt_cuda_workspace_release(int index, void *stream);

/* ---------------------------------------------------------------- errors */

static __thread char rt_last_launch[192]; /* the last launch or library call checked, for faults */
int rt_cuda_sync_each(void);

/* MRT_ERR_CUDA (or `st`) with the formatted context and the CUDA error's name and text. Clears
 * the runtime's last error so that a later mrt_cuda_check_launch does not see this one. An
 * error that clearing leaves in place is a sticky fault of work queued before: said so, with
 * the last launch checked and how to find the one that faulted (see rt_cuda_after_launch). */
static mrt_status rt_cuda_fail(mrt_status st, cudaError_t e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static mrt_status rt_cuda_fail(mrt_status st, cudaError_t e, const char *fmt, ...)
{
    char ctx[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx, sizeof ctx, fmt, ap);
    va_end(ap);
    (void)cudaGetLastError();
    if (e != cudaSuccess && cudaPeekAtLastError() == e && !rt_cuda_sync_each())
        return mrt_set_error(st, "%s: %s (%s): a kernel or library call queued before faulted (the last launched "
                             "was %s; MODELRT_CUDA_SYNC=1 waits for each and names the one that faults)", ctx,
                             cudaGetErrorName(e), cudaGetErrorString(e),
                             rt_last_launch[0] ? rt_last_launch : "none on this thread");
    return mrt_set_error(st, "%s: %s (%s)", ctx, cudaGetErrorName(e), cudaGetErrorString(e));
}

/* Faults. A kernel that faults while it runs (an illegal address) leaves a sticky error that
 * every later call returns, cudaGetLastError included: on a GPU the launch checks of the kernels
 * queued after it, or the end-of-run synchronization, are the first to see it, and would name
 * the wrong kernel. So an error that survives cudaGetLastError is reported as an earlier
 * kernel's fault, with the last launch this thread checked before, and MODELRT_CUDA_SYNC=1 (as
 * CUDA_LAUNCH_BLOCKING=1) waits for every launch and library call, so that the one that faults
 * is named (run() is not captured as a CUDA graph then). */
int rt_cuda_sync_each(void)
{
    static int v = -1; /* read once; no lock: every thread finds the same answer */
    if (v < 0) {
        v = rt_env_flag("MODELRT_CUDA_SYNC", 0);
    }
    return v;
}

mrt_status rt_cuda_after_launch(const char *what)
{
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess && rt_cuda_sync_each() && (e = cudaDeviceSynchronize()) != cudaSuccess) {
        (void)cudaGetLastError();
        return mrt_set_error(MRT_ERR_CUDA, "%s: faulted while it ran: %s (%s) (MODELRT_CUDA_SYNC=1: every launch is "
                             "waited for)", what, cudaGetErrorName(e), cudaGetErrorString(e));
    }
    if (e == cudaSuccess) {
        snprintf(rt_last_launch, sizeof rt_last_launch, "%s", what);
        return MRT_OK;
    }
    if (cudaPeekAtLastError() == e) /* sticky: work queued before this launch faulted */
        return mrt_set_error(MRT_ERR_CUDA, "%s: not launched: an earlier kernel faulted: %s (%s), sticky; the last "
                             "launch before it was %s; run with MODELRT_CUDA_SYNC=1 to name the kernel that faults",
                             what, cudaGetErrorName(e), cudaGetErrorString(e),
                             rt_last_launch[0] ? rt_last_launch : "(none on this thread)");
    return mrt_set_error(MRT_ERR_CUDA, "%s: kernel launch failed: %s (%s)", what, cudaGetErrorName(e),
                         cudaGetErrorString(e));
}

mrt_status mrt_cuda_check_launch(const char *what)
{
    if (rt_fake_cuda_count(NULL) >= 0) /* nothing was launched on a fake device */
        return rt_fake_cuda_refuse(-1, what ? what : "kernel launch");
    return rt_cuda_after_launch(what ? what : "kernel");
}

/* ---------------------------------------------------------------- probe */

static struct {
    pthread_once_t once;
    int count;
    int fake; /* the devices are MODELRT_TEST_FAKE_CUDA's */
    char why[640];
    mrt_device_info info[RT_CUDA_MAX_DEVICES];
    cudaError_t info_err[RT_CUDA_MAX_DEVICES];
} rt_probe = {.once = PTHREAD_ONCE_INIT};

static void rt_cuda_probe(void)
{
    const char *fake_why = NULL;
    int fake = rt_fake_cuda_count(&fake_why);
    if (fake >= 0) { /* the test seam: fake devices, and not a word to the driver */
        for (int i = 0; i < fake; i++) {
            rt_fake_cuda_info(i, &rt_probe.info[i]);
            rt_probe.info_err[i] = cudaSuccess;
        }
        snprintf(rt_probe.why, sizeof rt_probe.why, "%s", fake_why);
        rt_probe.fake = 1;
        rt_probe.count = fake;
        return;
    }
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
        char env[RT_QUOTE_MAX + 32] = "", q[RT_QUOTE_MAX];
        if (cvd)
            snprintf(env, sizeof env, "; CUDA_VISIBLE_DEVICES=%s", rt_quote(q, sizeof q, cvd));
        snprintf(rt_probe.why, sizeof rt_probe.why, "cudaGetDeviceCount failed: error %d (%s)%s",
                 (int)e, cudaGetErrorString(e), env);
        (void)cudaGetLastError();
        rt_probe.count = 0;
        return;
    }
    if (n <= 0) {
        snprintf(rt_probe.why, sizeof rt_probe.why, "cudaGetDeviceCount found no devices");
        rt_probe.count = 0;
        return;
    }
    if (n > RT_CUDA_MAX_DEVICES)
        n = RT_CUDA_MAX_DEVICES;
    for (int i = 0; i < n; i++) {
        mrt_device_info *d = &rt_probe.info[i];
        struct cudaDeviceProp prop;
        d->device.kind = MRT_DEVICE_CUDA;
        d->device.index = i;
        rt_probe.info_err[i] = cudaGetDeviceProperties(&prop, i); /* creates no context */
        if (rt_probe.info_err[i] != cudaSuccess) {
            snprintf(d->name, sizeof d->name, "(properties unavailable)");
            (void)cudaGetLastError();
            continue;
        }
        snprintf(d->name, sizeof d->name, "%.127s", prop.name);
        d->total_bytes = prop.totalGlobalMem;
        d->cc_major = prop.major;
        d->cc_minor = prop.minor;
    }
    rt_probe.count = n;
}

int mrt_cuda_device_count(const char **why)
{
    pthread_once(&rt_probe.once, rt_cuda_probe);
    if (why)
        *why = rt_probe.count > 0 ? "" : rt_probe.why;
    return rt_probe.count;
}

/* ---------------------------------------------------------------- device guard */

/* Make `index` current, remembering the caller's device in *prev (-1 if unknown). */
static cudaError_t rt_guard_enter(int index, int *prev)
{
    if (cudaGetDevice(prev) != cudaSuccess) {
        (void)cudaGetLastError();
        *prev = -1;
    }
    return *prev == index ? cudaSuccess : cudaSetDevice(index);
}

static void rt_guard_leave(int index, int prev)
{
    if (prev >= 0 && prev != index && cudaSetDevice(prev) != cudaSuccess)
        (void)cudaGetLastError();
}

mrt_status rt_cuda_info(int index, mrt_device_info *info, int with_free)
{
    if (index < 0 || index >= mrt_cuda_device_count(NULL))
        return mrt_set_error(MRT_ERR_DEVICE, "cuda:%d is not present", index);
    *info = rt_probe.info[index];
    if (rt_probe.fake)
        return MRT_OK; /* free memory included */
    if (rt_probe.info_err[index] != cudaSuccess)
        return mrt_set_error(MRT_ERR_CUDA, "cudaGetDeviceProperties(cuda:%d) failed: %s (%s)",
                             index, cudaGetErrorName(rt_probe.info_err[index]),
                             cudaGetErrorString(rt_probe.info_err[index]));
    if (with_free) {
        int prev;
        size_t fr = 0, total = 0;
        cudaError_t e = rt_guard_enter(index, &prev);
        if (e == cudaSuccess)
            e = cudaMemGetInfo(&fr, &total);
        rt_guard_leave(index, prev);
        if (e != cudaSuccess)
            return rt_cuda_fail(MRT_ERR_CUDA, e, "cannot query the memory of cuda:%d (%s)", index,
                                info->name);
        info->free_bytes = fr;
        info->total_bytes = total;
    }
    return MRT_OK;
}

/* ---------------------------------------------------------------- memory and streams */

void *rt_cuda_alloc(int index, size_t bytes)
{
    int prev;
    void *p = NULL;
    cudaError_t e = rt_guard_enter(index, &prev);
    if (e == cudaSuccess)
        e = cudaMalloc(&p, bytes ? bytes : 256); /* cudaMalloc(0) gives NULL; 256-byte aligned */
    if (e == cudaErrorMemoryAllocation) {
        size_t fr = 0, total = 0;
        (void)cudaGetLastError();
        if (cudaMemGetInfo(&fr, &total) != cudaSuccess)
            (void)cudaGetLastError();
        rt_guard_leave(index, prev);
        mrt_set_error(MRT_ERR_OOM, "cannot allocate %zu bytes on cuda:%d (%s): out of memory "
                      "(%zu of %zu bytes free)", bytes, index, rt_probe.info[index].name, fr,
                      total);
        return NULL;
    }
    rt_guard_leave(index, prev);
    if (e != cudaSuccess) {
        rt_cuda_fail(MRT_ERR_OOM, e, "cannot allocate %zu bytes on cuda:%d", bytes, index);
        return NULL;
    }
    return p;
}

void rt_cuda_free(int index, void *p)
{
    int prev;
    if (rt_guard_enter(index, &prev) != cudaSuccess || cudaFree(p) != cudaSuccess)
        (void)cudaGetLastError(); /* a free cannot report; an earlier async error resurfaces later */
    rt_guard_leave(index, prev);
}

mrt_status rt_cuda_activate(int index)
{
    cudaError_t e = cudaSetDevice(index);
    if (e != cudaSuccess)
        return rt_cuda_fail(MRT_ERR_CUDA, e, "cannot activate cuda:%d", index);
    return MRT_OK;
}

mrt_status rt_cuda_stream_create(int index, void **stream)
{
    int prev;
    cudaStream_t s = NULL;
    cudaError_t e = rt_guard_enter(index, &prev);
    if (e == cudaSuccess)
        e = cudaStreamCreate(&s);
    rt_guard_leave(index, prev);
    if (e != cudaSuccess)
        return rt_cuda_fail(MRT_ERR_CUDA, e, "cannot create a stream on cuda:%d", index);
    *stream = s;
    return MRT_OK;
}

void rt_cuda_stream_destroy(int index, void *stream)
{
    int prev;
    cudaError_t e = rt_guard_enter(index, &prev);
    if (e == cudaSuccess)
        rt_cuda_checks_release(index, stream);
    if (e != cudaSuccess || cudaStreamDestroy((cudaStream_t)stream) != cudaSuccess)
        (void)cudaGetLastError();
    rt_cuda_workspace_release(index, stream); /* cudaFree waits for the device's work */
    rt_guard_leave(index, prev);
}

mrt_status rt_cuda_stream_sync(int index, void *stream, const char *what, int collect)
{
    int prev;
    cudaError_t e = rt_guard_enter(index, &prev); /* the NULL stream is the device's own */
    if (e == cudaSuccess)
        e = cudaStreamSynchronize((cudaStream_t)stream);
    rt_guard_leave(index, prev);
    if (e != cudaSuccess)
        return rt_cuda_fail(MRT_ERR_CUDA, e, "%s on cuda:%d failed", what, index);
    return collect ? rt_cuda_checks_collect(index, stream) : MRT_OK; /* the embeddings' id checks, now complete */
}

mrt_status rt_cuda_stream_wait(int wait_index, void *waiter, int index, void *stream, const char *what)
{
    int prev;
    cudaEvent_t ev = NULL;
    cudaError_t e = rt_guard_enter(index, &prev);
    if (e == cudaSuccess)
        e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e == cudaSuccess)
        e = cudaEventRecord(ev, (cudaStream_t)stream);
    if (e == cudaSuccess && wait_index != index)
        e = cudaSetDevice(wait_index);
    if (e == cudaSuccess) /* an event of another device may be waited on (CUDA guide, 3.2.8.6) */
        e = cudaStreamWaitEvent((cudaStream_t)waiter, ev, 0);
    if (ev && cudaEventDestroy(ev) != cudaSuccess && e == cudaSuccess) /* freed once it completes */
        e = cudaGetLastError();
    rt_guard_leave(-1, prev);
    if (e != cudaSuccess)
        return rt_cuda_fail(MRT_ERR_CUDA, e, "%s: cannot make a stream of cuda:%d wait for one of cuda:%d",
                            what, wait_index, index);
    return MRT_OK;
}

int rt_cuda_sim_counters(unsigned long long c[5])
{
    static int tried;
    static void (*get)(unsigned long long *);
    if (!tried) { /* no lock: every thread finds the same answer */
        void *f = dlsym(RTLD_DEFAULT, "cudasim_get_counters");
        memcpy(&get, &f, sizeof f);
        tried = 1;
    }
    if (!get)
        return 0;
    get(c); /* cudasim_counters is five unsigned long longs, in this order */
    return 1;
}

/* ---------------------------------------------------------------- copies */

/* The pinned buffer of the staged copies: one per process, grown to the largest chunk asked
 * (at most RT_STAGE_BYTES), held under its lock for a whole copy, freed at exit. */
static struct {
    pthread_mutex_t lock;
    void *buf;
    size_t size;
} rt_stage = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void rt_stage_free(void)
{
    if (rt_stage.buf && cudaFreeHost(rt_stage.buf) != cudaSuccess)
        (void)cudaGetLastError(); /* at exit the driver may be gone already */
    rt_stage.buf = NULL;
}

/* GPU to GPU without peer access: wait for the stream, then copy through the pinned staging
 * buffer in chunks, synchronously. */
static cudaError_t rt_copy_staged(int dst, void *d, int src, const void *s, size_t bytes,
                                  cudaStream_t stream)
{
    int prev;
    cudaError_t e = rt_guard_enter(src, &prev);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(stream);
    size_t chunk = bytes < RT_STAGE_BYTES ? bytes : RT_STAGE_BYTES;
    pthread_mutex_lock(&rt_stage.lock);
    if (e == cudaSuccess && rt_stage.size < chunk) {
        static int registered;
        if (!registered)
            registered = atexit(rt_stage_free) == 0;
        rt_stage_free();
        rt_stage.size = 0;
        if ((e = cudaMallocHost(&rt_stage.buf, chunk)) == cudaSuccess)
            rt_stage.size = chunk;
        else
            rt_stage.buf = NULL;
    }
    void *host = rt_stage.buf;
    for (size_t off = 0; e == cudaSuccess && off < bytes; off += chunk) {
        size_t k = bytes - off < chunk ? bytes - off : chunk;
        e = cudaSetDevice(src);
        if (e == cudaSuccess)
            e = cudaMemcpy(host, (const char *)s + off, k, cudaMemcpyDeviceToHost);
        if (e == cudaSuccess)
            e = cudaSetDevice(dst);
        if (e == cudaSuccess)
            e = cudaMemcpy((char *)d + off, host, k, cudaMemcpyHostToDevice);
    }
    pthread_mutex_unlock(&rt_stage.lock);
    rt_guard_leave(-1, prev);
    return e;
}

static pthread_mutex_t rt_peer_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned char rt_peer_state[RT_CUDA_MAX_DEVICES][RT_CUDA_MAX_DEVICES]; /* 0 ?, 1 yes, 2 no */

/* 1 if dst can read src's memory directly (enabling access once per pair), else 0. */
int rt_cuda_peer_access(int dst, int src)
{
    pthread_mutex_lock(&rt_peer_lock);
    unsigned char *st = &rt_peer_state[dst][src];
    if (*st == 0) {
        int can = 0, prev;
        if (cudaDeviceCanAccessPeer(&can, dst, src) != cudaSuccess)
            can = 0;
        if (can && rt_guard_enter(dst, &prev) == cudaSuccess) {
            cudaError_t e = cudaDeviceEnablePeerAccess(src, 0);
            if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled)
                can = 0;
            rt_guard_leave(dst, prev);
        } else {
            can = 0;
        }
        (void)cudaGetLastError();
        *st = can ? 1 : 2;
    }
    int ok = *st == 1;
    pthread_mutex_unlock(&rt_peer_lock);
    return ok;
}

mrt_status rt_cuda_memcpy(mrt_device dst_dev, void *dst, mrt_device src_dev, const void *src,
                          size_t bytes, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    cudaError_t e;
    int prev, work;
    if (dst_dev.kind == MRT_DEVICE_CUDA && src_dev.kind == MRT_DEVICE_CUDA &&
        dst_dev.index != src_dev.index) {
        if (rt_cuda_peer_access(dst_dev.index, src_dev.index)) {
            work = dst_dev.index;
            e = rt_guard_enter(work, &prev);
            if (e == cudaSuccess)
                e = cudaMemcpyPeerAsync(dst, dst_dev.index, src, src_dev.index, bytes, s);
            rt_guard_leave(work, prev);
        } else {
            e = rt_copy_staged(dst_dev.index, dst, src_dev.index, src, bytes, s);
        }
    } else {
        enum cudaMemcpyKind kind;
        if (src_dev.kind == MRT_DEVICE_CPU) {
            kind = cudaMemcpyHostToDevice;
            work = dst_dev.index;
        } else if (dst_dev.kind == MRT_DEVICE_CPU) {
            kind = cudaMemcpyDeviceToHost;
            work = src_dev.index;
        } else {
            kind = cudaMemcpyDeviceToDevice;
            work = dst_dev.index;
        }
        e = rt_guard_enter(work, &prev);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(dst, src, bytes, kind, s);
        rt_guard_leave(work, prev);
    }
    if (e != cudaSuccess) {
        char dn[32], sn[32];
        return rt_cuda_fail(MRT_ERR_CUDA, e, "cannot copy %zu bytes from %s to %s", bytes,
                            mrt_device_str(src_dev, sn, sizeof sn),
                            mrt_device_str(dst_dev, dn, sizeof dn));
    }
    return MRT_OK;
}

int rt_cuda_pointer_index(const void *p)
{
    struct cudaPointerAttributes a;
    memset(&a, 0, sizeof a);
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError(); /* older runtimes fail for unregistered host memory */
        return -1;
    }
    if (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged)
        return a.device;
    return -1;
}

/* ---------------------------------------------------------------- library workspaces */

/* cuBLAS's workspace per stream (cuBLAS guide: 4 MiB, 32 MiB on Hopper and later): the caller's,
 * so that a captured GEMM holds memory the runtime owns and two streams never share one. The
 * memory pre-flight counts it for every CUDA slot (rt_cuda_workspace_bytes). cuBLASLt uses the
 * same buffer (rt_lt_plan_make offers the heuristic its size, cublasLtMatmul gets it): calls on
 * one stream run in its order, so a cuBLAS and a cuBLASLt GEMM never use it at once, and a CUDA
 * graph that captures either holds memory that lives as long as the stream. */
#define RT_WORKSPACES 64

static struct {
    pthread_mutex_t lock;
    struct {
        int index;
        void *stream, *p;
    } w[RT_WORKSPACES];
} rt_ws = {.lock = PTHREAD_MUTEX_INITIALIZER};

size_t rt_cuda_workspace_bytes(int index)
{
    int major = index >= 0 && index < mrt_cuda_device_count(NULL) ? rt_probe.info[index].cc_major : 0;
    return major >= 9 ? ((size_t)32 << 20) : ((size_t)4 << 20);
}

mrt_status rt_cuda_workspace(int index, void *stream, void **out)
{
    pthread_mutex_lock(&rt_ws.lock);
    int slot = -1;
    for (int i = 0; i < RT_WORKSPACES; i++) {
        if (rt_ws.w[i].p && rt_ws.w[i].index == index && rt_ws.w[i].stream == stream) {
            *out = rt_ws.w[i].p;
            pthread_mutex_unlock(&rt_ws.lock);
            return MRT_OK;
        }
        if (!rt_ws.w[i].p && slot < 0)
            slot = i;
    }
    mrt_status st = MRT_OK;
    size_t bytes = rt_cuda_workspace_bytes(index);
    void *p = slot >= 0 ? rt_cuda_alloc(index, bytes) : NULL;
    if (slot < 0)
        st = mrt_set_error(MRT_ERR_CUDA, "cuBLAS workspace on cuda:%d: more than %d streams use cuBLAS", index,
                           RT_WORKSPACES);
    else if (!p)
        st = mrt_set_error(MRT_ERR_OOM, "cannot allocate the %zu-byte cuBLAS workspace on cuda:%d: %s", bytes, index,
                           mrt_last_error());
    else
        rt_ws.w[slot].index = index, rt_ws.w[slot].stream = stream, rt_ws.w[slot].p = p;
    *out = p;
    pthread_mutex_unlock(&rt_ws.lock);
    return st;
}

/* Free the workspace of a stream that goes (its work done: rt_cuda_stream_destroy). */
static void rt_cuda_workspace_release(int index, void *stream)
{
    pthread_mutex_lock(&rt_ws.lock);
    for (int i = 0; i < RT_WORKSPACES; i++)
        if (rt_ws.w[i].p && rt_ws.w[i].index == index && rt_ws.w[i].stream == stream) {
            rt_cuda_free(index, rt_ws.w[i].p);
            rt_ws.w[i].p = NULL;
        }
    pthread_mutex_unlock(&rt_ws.lock);
}

/* ---------------------------------------------------------------- CUDA graphs */

/* A model's run, captured on its (first slot's) stream, rt_model.c decides when and forks the
 * other slots' streams into it: cudaStreamBeginCapture in thread-local mode, so that only this
 * thread's unsafe calls break it and other threads' work goes on; the end instantiates the
 * graph, or updates the executable graph given (the same kernels with other sizes or
 * pointers), and launches it. */
mrt_status rt_cuda_graph_begin(int index, void *stream)
{
    int prev;
    cudaError_t e = rt_guard_enter(index, &prev);
    if (e == cudaSuccess)
        e = cudaStreamBeginCapture((cudaStream_t)stream, cudaStreamCaptureModeThreadLocal);
    rt_guard_leave(index, prev);
    if (e != cudaSuccess)
        return rt_cuda_fail(MRT_ERR_CUDA, e, "cannot begin a CUDA graph capture on cuda:%d", index);
    return MRT_OK;
}

mrt_status rt_cuda_graph_end(int index, void *stream, void **exec)
{
    int prev;
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = (cudaGraphExec_t)*exec;
    cudaError_t e = rt_guard_enter(index, &prev);
    if (e == cudaSuccess)
        e = cudaStreamEndCapture((cudaStream_t)stream, &g);
    const char *what = "cudaStreamEndCapture";
    if (e == cudaSuccess && x) {
        cudaGraphExecUpdateResultInfo info;
        if (cudaGraphExecUpdate(x, g, &info) != cudaSuccess) { /* another sequence: instantiate anew */
            (void)cudaGetLastError();
            (void)cudaGraphExecDestroy(x);
            x = NULL;
        }
    }
    if (e == cudaSuccess && !x && (what = "cudaGraphInstantiate", e = cudaGraphInstantiate(&x, g, 0)) != cudaSuccess)
        x = NULL;
    *exec = x;
    if (g && cudaGraphDestroy(g) != cudaSuccess)
        (void)cudaGetLastError();
    if (e == cudaSuccess)
        what = "cudaGraphLaunch", e = cudaGraphLaunch(x, (cudaStream_t)stream);
    rt_guard_leave(index, prev);
    if (e != cudaSuccess)
        return rt_cuda_fail(MRT_ERR_CUDA, e, "CUDA graph of the run on cuda:%d: %s failed", index, what);
    return MRT_OK;
}

mrt_status rt_cuda_graph_launch(int index, void *stream, void *exec)
{
    int prev;
    cudaError_t e = rt_guard_enter(index, &prev);
    if (e == cudaSuccess)
        e = cudaGraphLaunch((cudaGraphExec_t)exec, (cudaStream_t)stream);
    rt_guard_leave(index, prev);
    if (e != cudaSuccess)
        return rt_cuda_fail(MRT_ERR_CUDA, e, "cannot launch the CUDA graph of the run on cuda:%d", index);
    /* a fault reported later names the replayed graph, not the last launch of its capture */
    snprintf(rt_last_launch, sizeof rt_last_launch, "the CUDA graph of the run on cuda:%d (a replay; "
             "MODELRT_CUDA_GRAPHS=0 runs its kernels one by one)", index);
    return MRT_OK;
}

void rt_cuda_graph_abort(int index, void *stream)
{
    int prev;
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    cudaGraph_t g = NULL;
    if (rt_guard_enter(index, &prev) == cudaSuccess &&
        cudaStreamIsCapturing((cudaStream_t)stream, &cs) == cudaSuccess && cs != cudaStreamCaptureStatusNone &&
        cudaStreamEndCapture((cudaStream_t)stream, &g) == cudaSuccess && g)
        (void)cudaGraphDestroy(g);
    (void)cudaGetLastError();
    rt_guard_leave(index, prev);
}

void rt_cuda_graph_destroy(int index, void *exec)
{
    int prev;
    if (exec && (rt_guard_enter(index, &prev) != cudaSuccess || cudaGraphExecDestroy((cudaGraphExec_t)exec) != cudaSuccess))
        (void)cudaGetLastError();
    if (exec)
        rt_guard_leave(index, prev);
}

/* ---------------------------------------------------------------- cuBLAS, loaded on demand */

/* The few cuBLAS entry points used, declared here so that no cuBLAS header or library is
 * needed to build or start: handles are opaque pointers, statuses and operations ints
 * (CUBLAS_STATUS_SUCCESS 0, CUBLAS_OP_N 0, CUBLAS_OP_T 1). */
typedef void *rt_cublas_handle;
typedef int (*rt_cublas_create_fn)(rt_cublas_handle *);
typedef int (*rt_cublas_destroy_fn)(rt_cublas_handle);
typedef int (*rt_cublas_set_stream_fn)(rt_cublas_handle, cudaStream_t);
typedef int (*rt_cublas_set_workspace_fn)(rt_cublas_handle, void *, size_t);
typedef int (*rt_cublas_sgemm_fn)(rt_cublas_handle, int, int, int, int, int, const float *,
                                  const float *, int, const float *, int, const float *, float *,
                                  int);
typedef int (*rt_cublas_sgemm_sb_fn)(rt_cublas_handle, int, int, int, int, int, const float *,
                                     const float *, int, long long, const float *, int, long long,
                                     const float *, float *, int, long long, int);
typedef const char *(*rt_cublas_status_fn)(int);

static struct {
    pthread_mutex_t lock;
    int tried;
    mrt_status st;
    char err[512];
    const char *lib;
    rt_cublas_create_fn create;
    rt_cublas_destroy_fn destroy;
    rt_cublas_set_stream_fn set_stream;
    rt_cublas_set_workspace_fn set_workspace;
    rt_cublas_sgemm_fn sgemm;
    rt_cublas_sgemm_sb_fn sgemm_sb;
    rt_cublas_status_fn status_name;
    rt_cublas_handle handle[RT_CUDA_MAX_DEVICES];
    pthread_mutex_t dev_lock[RT_CUDA_MAX_DEVICES]; /* a handle is used by one thread at a time */
} rt_blas = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* dlopen cuBLAS and resolve its symbols, once; call with rt_blas.lock held. */
static mrt_status rt_blas_load(void)
{
    if (!rt_blas.tried)
        for (int i = 0; i < RT_CUDA_MAX_DEVICES; i++)
            pthread_mutex_init(&rt_blas.dev_lock[i], NULL);
    if (rt_blas.tried) {
        if (rt_blas.st != MRT_OK)
            return mrt_set_error(rt_blas.st, "%s", rt_blas.err);
        return MRT_OK;
    }
    rt_blas.tried = 1;
    static const char *names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so.11",
                                  "libcublas.so"};
    char first_err[256] = "";
    void *h = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !h; i++) {
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (h) {
            rt_blas.lib = names[i];
        } else if (!first_err[0]) {
            const char *de = dlerror();
            snprintf(first_err, sizeof first_err, "%s", de ? de : "not found");
        }
    }
    if (!h) {
        rt_blas.st = MRT_ERR_CUDA;
        snprintf(rt_blas.err, sizeof rt_blas.err, "cannot load cuBLAS: tried libcublas.so.13, "
                 "libcublas.so.12, libcublas.so.11 and libcublas.so (%s)", first_err);
        return mrt_set_error(rt_blas.st, "%s", rt_blas.err);
    }
    static const char *syms[] = {"cublasCreate_v2", "cublasDestroy_v2", "cublasSetStream_v2",
                                 "cublasSgemm_v2", "cublasSgemmStridedBatched", "cublasSetWorkspace_v2"};
    void *f[6];
    for (int i = 0; i < 6; i++) {
        f[i] = dlsym(h, syms[i]);
        if (!f[i]) {
            rt_blas.st = MRT_ERR_CUDA;
            snprintf(rt_blas.err, sizeof rt_blas.err, "cannot load cuBLAS: %s has no symbol %s",
                     rt_blas.lib, syms[i]);
            return mrt_set_error(rt_blas.st, "%s", rt_blas.err);
        }
    }
    /* POSIX dlsym returns object pointers; converting to function pointers is how it is used. */
    memcpy(&rt_blas.create, &f[0], sizeof f[0]);
    memcpy(&rt_blas.destroy, &f[1], sizeof f[1]);
    memcpy(&rt_blas.set_stream, &f[2], sizeof f[2]);
    memcpy(&rt_blas.sgemm, &f[3], sizeof f[3]);
    memcpy(&rt_blas.sgemm_sb, &f[4], sizeof f[4]);
    memcpy(&rt_blas.set_workspace, &f[5], sizeof f[5]);
    void *sn = dlsym(h, "cublasGetStatusName"); /* cuBLAS 11.4+; optional */
    if (sn)
        memcpy(&rt_blas.status_name, &sn, sizeof sn);
    return MRT_OK;
}

static mrt_status rt_blas_fail(int index, const char *call, int status)
{
    return mrt_set_error(MRT_ERR_CUDA, "gemm on cuda:%d: %s failed: %s (cuBLAS status %d)",
                         index, call,
                         rt_blas.status_name ? rt_blas.status_name(status) : "cuBLAS error",
                         status);
}

mrt_status rt_cuda_gemm(int index, void *stream, int trans_a, int trans_b, int M, int N, int K,
                        float alpha, const float *A, int lda, int64_t strideA, const float *B,
                        int ldb, int64_t strideB, float beta, float *C, int ldc, int64_t strideC,
                        int batch)
{
    if (index < 0 || index >= RT_CUDA_MAX_DEVICES)
        return mrt_set_error(MRT_ERR_DEVICE, "gemm on cuda:%d: no such device", index);
    pthread_mutex_lock(&rt_blas.lock); /* the loading only; then the device's own lock */
    int prev = -1;
    mrt_status st = rt_blas_load();
    pthread_mutex_unlock(&rt_blas.lock);
    if (st != MRT_OK)
        return st;
    pthread_mutex_t *lock = &rt_blas.dev_lock[index];
    pthread_mutex_lock(lock);
    cudaError_t e = cudaSuccess;
    if (st == MRT_OK)
        e = rt_guard_enter(index, &prev);
    if (st == MRT_OK && e != cudaSuccess) {
        st = rt_cuda_fail(MRT_ERR_CUDA, e, "gemm on cuda:%d", index);
        rt_guard_leave(index, prev);
    }
    if (st != MRT_OK) {
        pthread_mutex_unlock(lock);
        return st;
    }
    int s = 0;
    if (!rt_blas.handle[index] && (s = rt_blas.create(&rt_blas.handle[index])) != 0) {
        rt_blas.handle[index] = NULL;
        st = rt_blas_fail(index, "cublasCreate", s);
    }
    rt_cublas_handle h = rt_blas.handle[index];
    if (st == MRT_OK && (s = rt_blas.set_stream(h, (cudaStream_t)stream)) != 0)
        st = rt_blas_fail(index, "cublasSetStream", s);
    /* cublasSetStream resets the workspace to cuBLAS's own pool, which a CUDA graph must not
     * capture: every call gets the stream's workspace (allocated with the model, or here once). */
    void *ws = NULL;
    if (st == MRT_OK && (st = rt_cuda_workspace(index, stream, &ws)) == MRT_OK &&
        (s = rt_blas.set_workspace(h, ws, rt_cuda_workspace_bytes(index))) != 0)
        st = rt_blas_fail(index, "cublasSetWorkspace", s);
    /* cuBLAS is column-major: a row-major C [M, N] is a column-major C^T [N, M], and
     * C^T = op(B)^T op(A)^T, so pass B first, A second, and swap M and N. */
    int opa = trans_a ? 1 : 0, opb = trans_b ? 1 : 0;
    if (st == MRT_OK && batch == 1) {
        if ((s = rt_blas.sgemm(h, opb, opa, N, M, K, &alpha, B, ldb, A, lda, &beta, C, ldc)) != 0)
            st = rt_blas_fail(index, "cublasSgemm", s);
    } else if (st == MRT_OK && strideC == 0) {
        /* every item writes the same C: in order, as the CPU loop does */
        for (int i = 0; i < batch && st == MRT_OK; i++)
            if ((s = rt_blas.sgemm(h, opb, opa, N, M, K, &alpha, B + (int64_t)i * strideB, ldb,
                                   A + (int64_t)i * strideA, lda, &beta, C, ldc)) != 0)
                st = rt_blas_fail(index, "cublasSgemm", s);
    } else if (st == MRT_OK) {
        if ((s = rt_blas.sgemm_sb(h, opb, opa, N, M, K, &alpha, B, ldb, (long long)strideB, A, lda,
                                  (long long)strideA, &beta, C, ldc, (long long)strideC,
                                  batch)) != 0)
            st = rt_blas_fail(index, "cublasSgemmStridedBatched", s);
    }
    if (st == MRT_OK) {
        char what[96];
        snprintf(what, sizeof what, "gemm on cuda:%d (cuBLAS, %dx%dx%d, batch %d)", index, M, N, K, batch);
        st = rt_cuda_after_launch(what);
    }
    rt_guard_leave(index, prev);
    pthread_mutex_unlock(lock);
    return st;
}

/* ---------------------------------------------------------------- cuBLASLt epilogues */

#include <cublasLt.h>

typedef cublasStatus_t (*rt_lt_create_fn)(cublasLtHandle_t *);
typedef cublasStatus_t (*rt_lt_desc_create_fn)(cublasLtMatmulDesc_t *, cublasComputeType_t, cudaDataType_t);
typedef cublasStatus_t (*rt_lt_desc_destroy_fn)(cublasLtMatmulDesc_t);
typedef cublasStatus_t (*rt_lt_desc_set_fn)(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t, const void *, size_t);
typedef cublasStatus_t (*rt_lt_layout_create_fn)(cublasLtMatrixLayout_t *, cudaDataType, uint64_t, uint64_t, int64_t);
typedef cublasStatus_t (*rt_lt_layout_destroy_fn)(cublasLtMatrixLayout_t);
typedef cublasStatus_t (*rt_lt_matmul_fn)(cublasLtHandle_t, cublasLtMatmulDesc_t, const void *, const void *,
                                          cublasLtMatrixLayout_t, const void *, cublasLtMatrixLayout_t, const void *,
                                          const void *, cublasLtMatrixLayout_t, void *, cublasLtMatrixLayout_t,
                                          const cublasLtMatmulAlgo_t *, void *, size_t, cudaStream_t);
typedef cublasStatus_t (*rt_lt_pref_create_fn)(cublasLtMatmulPreference_t *);
typedef cublasStatus_t (*rt_lt_pref_destroy_fn)(cublasLtMatmulPreference_t);
typedef cublasStatus_t (*rt_lt_pref_set_fn)(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t,
                                            const void *, size_t);
typedef cublasStatus_t (*rt_lt_heuristic_fn)(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t,
                                             cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                             cublasLtMatmulPreference_t, int, cublasLtMatmulHeuristicResult_t *, int *);

/* One GEMM shape's descriptors and algorithm, kept for the next call of that shape: a model calls
 * the same few shapes every run. The key holds the pointers' alignments (the algorithm was
 * chosen for them), not the pointers; the bias pointer is set on the descriptor at each call.
 * A shape the heuristic found no algorithm for keeps only its key and `fallback`. */
typedef struct {
    int used, trans_b, M, N, K, lda, ldb, ldc, epi;
    uint32_t align[3]; /* B (cuBLASLt's A), A (its B), C (its C and D), in bytes */
    int fallback;      /* no algorithm: cuBLAS and rt_cuda_bias_act instead */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
} rt_lt_plan;

#define RT_LT_PLANS 32 /* per device; the oldest is replaced when full */

typedef struct {
    pthread_mutex_t lock; /* a handle and its plans are used by one thread at a time */
    cublasLtHandle_t handle;
    rt_lt_plan plan[RT_LT_PLANS];
    int next;
    int said_fallback; /* the fallback was logged (once per device and process) */
} rt_lt_device;

static struct {
    pthread_mutex_t lock; /* guards the loading only */
    int tried;
    mrt_status st;
    char err[512];
    rt_lt_create_fn create;
    rt_lt_desc_create_fn desc_create;
    rt_lt_desc_destroy_fn desc_destroy;
    rt_lt_desc_set_fn desc_set;
    rt_lt_layout_create_fn layout_create;
    rt_lt_layout_destroy_fn layout_destroy;
    rt_lt_matmul_fn matmul;
    rt_lt_pref_create_fn pref_create;
    rt_lt_pref_destroy_fn pref_destroy;
    rt_lt_pref_set_fn pref_set;
    rt_lt_heuristic_fn heuristic;
    rt_lt_device dev[RT_CUDA_MAX_DEVICES];
} rt_lt = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* dlopen cuBLASLt and resolve its symbols, once. */
static mrt_status rt_lt_load(void)
{
    pthread_mutex_lock(&rt_lt.lock);
    if (rt_lt.tried) {
        mrt_status st = rt_lt.st;
        pthread_mutex_unlock(&rt_lt.lock);
        return st == MRT_OK ? MRT_OK : mrt_set_error(st, "%s", rt_lt.err);
    }
    rt_lt.tried = 1;
    rt_lt.st = MRT_ERR_CUDA;
    for (int i = 0; i < RT_CUDA_MAX_DEVICES; i++)
        pthread_mutex_init(&rt_lt.dev[i].lock, NULL);
    static const char *names[] = {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so.11", "libcublasLt.so"};
    void *h = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !h; i++) h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    static const char *syms[] = {"cublasLtCreate", "cublasLtMatmulDescCreate", "cublasLtMatmulDescDestroy",
                                 "cublasLtMatmulDescSetAttribute", "cublasLtMatrixLayoutCreate",
                                 "cublasLtMatrixLayoutDestroy", "cublasLtMatmul", "cublasLtMatmulPreferenceCreate",
                                 "cublasLtMatmulPreferenceDestroy", "cublasLtMatmulPreferenceSetAttribute",
                                 "cublasLtMatmulAlgoGetHeuristic"};
    enum { NSYMS = sizeof syms / sizeof syms[0] };
    void *f[NSYMS];
    if (!h)
        snprintf(rt_lt.err, sizeof rt_lt.err, "cannot load cuBLASLt: tried libcublasLt.so.13, .12, .11 and .so");
    for (int i = 0; h && i < NSYMS; i++)
        if (!(f[i] = dlsym(h, syms[i]))) {
            snprintf(rt_lt.err, sizeof rt_lt.err, "cannot load cuBLASLt: no symbol %s", syms[i]);
            h = NULL;
        }
    if (h) {
        memcpy(&rt_lt.create, &f[0], sizeof f[0]);
        memcpy(&rt_lt.desc_create, &f[1], sizeof f[1]);
        memcpy(&rt_lt.desc_destroy, &f[2], sizeof f[2]);
        memcpy(&rt_lt.desc_set, &f[3], sizeof f[3]);
        memcpy(&rt_lt.layout_create, &f[4], sizeof f[4]);
        memcpy(&rt_lt.layout_destroy, &f[5], sizeof f[5]);
        memcpy(&rt_lt.matmul, &f[6], sizeof f[6]);
        memcpy(&rt_lt.pref_create, &f[7], sizeof f[7]);
        memcpy(&rt_lt.pref_destroy, &f[8], sizeof f[8]);
        memcpy(&rt_lt.pref_set, &f[9], sizeof f[9]);
        memcpy(&rt_lt.heuristic, &f[10], sizeof f[10]);
        rt_lt.st = MRT_OK;
    }
    mrt_status st = rt_lt.st;
    pthread_mutex_unlock(&rt_lt.lock);
    return st == MRT_OK ? MRT_OK : mrt_set_error(st, "%s", rt_lt.err);
}

/* The largest power of two up to 256 dividing p's address: the alignment cuBLASLt is told. */
static uint32_t rt_lt_align(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    return (a & 255) == 0 ? 256u : (uint32_t)(a & (~a + 1));
}

/* Destroy plan p's descriptors and layouts (its key stays). */
static void rt_lt_plan_drop(rt_lt_plan *p)
{
    if (p->lc) rt_lt.layout_destroy(p->lc);
    if (p->lb) rt_lt.layout_destroy(p->lb);
    if (p->la) rt_lt.layout_destroy(p->la);
    if (p->desc) rt_lt.desc_destroy(p->desc);
    p->lc = p->lb = p->la = NULL;
    p->desc = NULL;
}

static void rt_lt_plan_free(rt_lt_plan *p)
{
    rt_lt_plan_drop(p);
    memset(p, 0, sizeof *p);
}

/* Build plan p for its key: descriptor, layouts, and the heuristic's first algorithm for the
 * real alignments and at most `ws_bytes` of workspace. No algorithm (none returned, or
 * CUBLAS_STATUS_NOT_SUPPORTED: no heuristic for this configuration) is not an error: p->fallback
 * is set and its descriptors dropped. Returns the failing call's status, its name in *call. */
static cublasStatus_t rt_lt_plan_make(cublasLtHandle_t h, rt_lt_plan *p, uint64_t ws_bytes, const char **call)
{
    int trans_b = p->trans_b, M = p->M, N = p->N, K = p->K;
    cublasOperation_t opa = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, opb = CUBLAS_OP_N;
    cublasLtEpilogue_t epi = (cublasLtEpilogue_t)p->epi;
    cublasLtMatmulPreference_t pref = NULL;
    cublasStatus_t s;
    uint64_t ws = ws_bytes;
    int n = 0, asked = 0;
    cublasLtMatmulHeuristicResult_t res;
    memset(&res, 0, sizeof res);
    if ((*call = "cublasLtMatmulDescCreate", s = rt_lt.desc_create(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F)) == 0 &&
        (*call = "cublasLtMatmulDescSetAttribute",
         s = rt_lt.desc_set(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa)) == 0 &&
        (s = rt_lt.desc_set(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb)) == 0 &&
        (s = rt_lt.desc_set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi)) == 0 &&
        (*call = "cublasLtMatrixLayoutCreate",
         s = rt_lt.layout_create(&p->la, CUDA_R_32F, trans_b ? K : N, trans_b ? N : K, p->ldb)) == 0 &&
        (s = rt_lt.layout_create(&p->lb, CUDA_R_32F, K, M, p->lda)) == 0 &&
        (s = rt_lt.layout_create(&p->lc, CUDA_R_32F, N, M, p->ldc)) == 0 &&
        (*call = "cublasLtMatmulPreferenceCreate", s = rt_lt.pref_create(&pref)) == 0 &&
        (*call = "cublasLtMatmulPreferenceSetAttribute",
         s = rt_lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws)) == 0 &&
        (s = rt_lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &p->align[0], sizeof p->align[0])) == 0 &&
        (s = rt_lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &p->align[1], sizeof p->align[1])) == 0 &&
        (s = rt_lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &p->align[2], sizeof p->align[2])) == 0 &&
        (s = rt_lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &p->align[2], sizeof p->align[2])) == 0 &&
        (*call = "cublasLtMatmulAlgoGetHeuristic", asked = 1,
         s = rt_lt.heuristic(h, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1, &res, &n)) == 0 &&
        n >= 1 && res.state == CUBLAS_STATUS_SUCCESS && res.workspaceSize <= ws_bytes)
        p->algo = res.algo;
    else if (asked && (s == CUBLAS_STATUS_SUCCESS || s == CUBLAS_STATUS_NOT_SUPPORTED)) {
        p->fallback = 1; /* no algorithm for this shape, epilogue, alignments and workspace */
        rt_lt_plan_drop(p);
        s = CUBLAS_STATUS_SUCCESS;
    }
    if (pref) rt_lt.pref_destroy(pref);
    return s;
}

/* A GEMM with epilogue that cuBLASLt has no algorithm for: the plain cuBLAS GEMM (rt_cuda_gemm,
 * which takes its own locks) and, when there is a bias or an activation, rt_cuda_bias_act on the
 * same stream, in order after it. */
static mrt_status rt_lt_fallback(int index, void *stream, int trans_b, int M, int N, int K, const float *A, int lda,
                                 const float *B, int ldb, float *C, int ldc, const float *bias, int act)
{
    mrt_status st = rt_cuda_gemm(index, stream, 0, trans_b, M, N, K, 1.0f, A, lda, 0, B, ldb, 0, 0.0f, C, ldc, 0, 1);
    if (st != MRT_OK || (!bias && act == 0))
        return st;
    int prev = -1;
    cudaError_t e = rt_guard_enter(index, &prev);
    if (e != cudaSuccess)
        st = rt_cuda_fail(MRT_ERR_CUDA, e, "gemm epilogue on cuda:%d", index);
    else
        st = rt_cuda_bias_act(stream, C, ldc, M, N, bias, act);
    rt_guard_leave(index, prev);
    return st;
}

mrt_status rt_cuda_gemm_bias_act(int index, void *stream, int trans_b, int M, int N, int K, const float *A, int lda,
                                 const float *B, int ldb, float *C, int ldc, const float *bias, int act)
{
    if (index < 0 || index >= RT_CUDA_MAX_DEVICES)
        return mrt_set_error(MRT_ERR_DEVICE, "gemm on cuda:%d: no such device", index);
    mrt_status st = rt_lt_load();
    if (st != MRT_OK)
        return st;
    /* the stream's workspace (the model allocated it with its streams, so a capture finds it) */
    void *ws = NULL;
    size_t ws_bytes = rt_cuda_workspace_bytes(index);
    if ((st = rt_cuda_workspace(index, stream, &ws)) != MRT_OK)
        return st;
    rt_lt_device *dv = &rt_lt.dev[index];
    pthread_mutex_lock(&dv->lock);
    int prev = -1;
    cudaError_t e = rt_guard_enter(index, &prev);
    if (e != cudaSuccess) {
        st = rt_cuda_fail(MRT_ERR_CUDA, e, "gemm on cuda:%d", index);
        rt_guard_leave(index, prev);
        pthread_mutex_unlock(&dv->lock);
        return st;
    }
    cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
    const char *call = "cublasLtCreate";
    if (!dv->handle) s = rt_lt.create(&dv->handle);
    /* Column-major view, as in rt_cuda_gemm: D^T [N, M] = op(B)^T [N, K] @ A^T [K, M]. The bias
     * [N] then runs along D^T's rows, which is what CUBLASLT_EPILOGUE_BIAS adds. */
    int epi = !bias ? (act == 1 ? CUBLASLT_EPILOGUE_RELU : act == 2 ? CUBLASLT_EPILOGUE_GELU : CUBLASLT_EPILOGUE_DEFAULT)
                    : (act == 1 ? CUBLASLT_EPILOGUE_RELU_BIAS
                                : act == 2 ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS);
    rt_lt_plan key = {.used = 1, .trans_b = trans_b, .M = M, .N = N, .K = K, .lda = lda, .ldb = ldb, .ldc = ldc,
                      .epi = epi, .align = {rt_lt_align(B), rt_lt_align(A), rt_lt_align(C)}};
    rt_lt_plan *p = NULL;
    for (int i = 0; s == CUBLAS_STATUS_SUCCESS && i < RT_LT_PLANS && !p; i++) {
        rt_lt_plan *q = &dv->plan[i];
        if (q->used && q->trans_b == key.trans_b && q->M == M && q->N == N && q->K == K && q->lda == lda &&
            q->ldb == ldb && q->ldc == ldc && q->epi == epi && !memcmp(q->align, key.align, sizeof key.align))
            p = q;
    }
    int say = 0; /* the first fallback on this device: logged once, after the lock */
    if (s == CUBLAS_STATUS_SUCCESS && !p) {
        p = &dv->plan[dv->next];
        dv->next = (dv->next + 1) % RT_LT_PLANS;
        if (p->used) rt_lt_plan_free(p);
        *p = key;
        if ((s = rt_lt_plan_make(dv->handle, p, ws_bytes, &call)) != CUBLAS_STATUS_SUCCESS)
            rt_lt_plan_free(p);
        else if (p->fallback && !dv->said_fallback)
            say = dv->said_fallback = 1;
    }
    int fallback = s == CUBLAS_STATUS_SUCCESS && p->fallback;
    if (s == CUBLAS_STATUS_SUCCESS && !fallback && bias) {
        call = "cublasLtMatmulDescSetAttribute";
        s = rt_lt.desc_set(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    }
    if (s == CUBLAS_STATUS_SUCCESS && !fallback) {
        const float one = 1.0f, zero = 0.0f;
        call = "cublasLtMatmul";
        s = rt_lt.matmul(dv->handle, p->desc, &one, B, p->la, A, p->lb, &zero, C, p->lc, C, p->lc, &p->algo, ws,
                         ws_bytes, (cudaStream_t)stream);
    }
    if (s != CUBLAS_STATUS_SUCCESS)
        st = mrt_set_error(MRT_ERR_CUDA, "gemm with epilogue on cuda:%d (%dx%dx%d; A, B, C %u-, %u-, %u-byte aligned): "
                           "%s failed (cuBLAS status %d)", index, M, N, K, key.align[1], key.align[0], key.align[2],
                           call, (int)s);
    if (st == MRT_OK && !fallback) {
        char what[96];
        snprintf(what, sizeof what, "gemm with epilogue on cuda:%d (cuBLASLt, %dx%dx%d)", index, M, N, K);
        st = rt_cuda_after_launch(what);
    }
    rt_guard_leave(index, prev);
    pthread_mutex_unlock(&dv->lock);
    if (say)
        mrt_log(MRT_LOG_INFO, "cuda:%d: cuBLASLt has no algorithm for a %dx%dx%d GEMM with epilogue %d (A, B, C "
                "%u-, %u-, %u-byte aligned, %zu bytes of workspace); such GEMMs run as a cuBLAS GEMM and a "
                "bias/activation kernel (said once)", index, M, N, K, epi, key.align[1], key.align[0], key.align[2],
                ws_bytes);
    if (st == MRT_OK && fallback)
        st = rt_lt_fallback(index, stream, trans_b, M, N, K, A, lda, B, ldb, C, ldc, bias, act);
    return st;
}
