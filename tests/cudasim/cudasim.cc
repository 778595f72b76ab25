/*
 * cudasim.cc — the CUDA simulator of the tests (libcudasim.so): devices, memory, streams,
 * events, peer access, kernel launches and the device-side primitives behind barriers and warp
 * intrinsics. The design, the environment variables and the checks are described in
 * include/cudasim.h; this file is in four parts:
 *
 *   1. configuration and errors          (CUDASIM_DEVICES, CUDA_VISIBLE_DEVICES, error strings)
 *   2. memory                            (a reserved address range per device, guard pages)
 *   3. streams and events                (lazy in-order queues; the legacy NULL stream)
 *   4. kernels                           (fibers, the block scheduler, barriers, warps, faults)
 *
 * One recursive lock serialises every call, and work queued on streams runs on the host thread
 * that waits for it. Only one kernel runs at a time; its blocks run one after another on the
 * same pool of fibers (fiber i always runs thread i of the block).
 */
#include "cudasim.h" /* not cuda_runtime.h: its threadIdx macros would rename cudasim_ids's fields */

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#define CUDASIM_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

constexpr int kMaxDevices = 64;
constexpr size_t kPage = 4096;
constexpr size_t kDefaultSmem = 48 << 10;
constexpr size_t kStackBytes = 256 << 10;

std::recursive_mutex g_mu;
using Lock = std::lock_guard<std::recursive_mutex>;

/* ================================================================ 1. configuration and errors */

struct Stream;

struct Device {
    int physical;   // index before CUDA_VISIBLE_DEVICES
    size_t total;   // bytes
    size_t used;    // bytes live (allocations rounded to 256)
    size_t graph_bytes = 0; // what the executable graphs instantiated on it hold (graph_charge)
    int major, minor;
    uintptr_t lo = 0, hi = 0, bump = 0; // the reserved address range (lazily mapped)
    bool peer[kMaxDevices] = {};        // peer[p]: this device may access p's memory
    Stream *null_stream = nullptr;
    std::vector<Stream *> streams;      // created, not yet destroyed (the NULL stream excluded)
};

std::once_flag g_once;
cudaError_t g_init_err = cudaSuccess; // every device call fails with it (bad config, "no driver")
std::vector<Device> g_dev;
bool g_peer_ok = true;
int g_fill = 0xff; // -1: do not fill new allocations
bool g_quiet = false;
char g_last_report[1024];
int g_schedule = 0;          // 0 forward, 1 reverse, 2 random: the order ready threads run in
unsigned long long g_seed = 1;
std::string g_fault_kernel;  // CUDASIM_FAULT=NAME[:N]: the N-th run of a kernel whose name has NAME faults
long g_fault_at = 1, g_fault_seen = 0;
cudaError_t g_sticky = cudaSuccess; // a fault while a kernel ran: every later call fails with it
std::string g_sample_kernel;        // CUDASIM_SAMPLE_BLOCKS=NAME:B,...: kernels whose name has NAME
std::vector<long long> g_sample;    // run only these linear blocks (negative: from the grid's end)
// CUDASIM_CAPTURE_FAIL=op:N: the N-th operation queued on a capturing stream fails; =end[:N]: the
// N-th cudaStreamEndCapture (default every one). 0: none.
long g_capfail_op = 0, g_capfail_op_seen = 0, g_capfail_end = 0, g_capfail_end_seen = 0;
// CUDASIM_TRACE=FILE: one line per kernel launch ("PROGRAM kernel NAME") and library call
// ("PROGRAM library WHAT") appended to FILE, for choosing test subsets that still launch every
// kernel (tests/cudasim/numeric_quick.py). -1: off.
int g_trace_fd = -1;

void trace(const char *kind, const char *name)
{
    if (g_trace_fd < 0)
        return;
    char line[512];
    int n = snprintf(line, sizeof line, "%s %s %s\n", program_invocation_short_name, kind, name);
    if (n > 0)
        (void)!write(g_trace_fd, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

thread_local int t_dev = 0;
thread_local cudaError_t t_err = cudaSuccess;

void vreport(const char *fmt, va_list ap)
{
    vsnprintf(g_last_report, sizeof g_last_report, fmt, ap);
    if (!g_quiet) {
        char line[1100];
        int n = snprintf(line, sizeof line, "cudasim: %s\n", g_last_report);
        if (n > 0)
            (void)!write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    }
}

void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void report(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport(fmt, ap);
    va_end(ap);
}

/* Say why and abort, as a GPU fault or hang ends the program. */
[[noreturn]] void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
[[noreturn]] void die(const char *fmt, ...)
{
    g_quiet = false;
    va_list ap;
    va_start(ap, fmt);
    vreport(fmt, ap);
    va_end(ap);
    signal(SIGABRT, SIG_DFL);
    abort();
}

/* A decimal in [lo, hi] filling [s, e), else -1. */
long parse_num(const char *s, const char *e, long lo, long hi)
{
    if (s == e || e - s > 12)
        return -1;
    long v = 0;
    for (const char *p = s; p < e; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        v = v * 10 + (*p - '0');
    }
    return v < lo || v > hi ? -1 : v;
}

void init_once()
{
    const char *q = getenv("CUDASIM_QUIET");
    g_quiet = q && strcmp(q, "1") == 0;
    const char *fill = getenv("CUDASIM_FILL");
    if (fill && strcmp(fill, "none") == 0)
        g_fill = -1;
    else if (fill && *fill)
        g_fill = (int)(strtol(fill, NULL, 0) & 0xff);
    const char *peer = getenv("CUDASIM_PEER");
    g_peer_ok = !(peer && strcmp(peer, "0") == 0);
    const char *fault = getenv("CUDASIM_FAULT");
    if (fault && *fault) {
        const char *colon = strrchr(fault, ':');
        g_fault_kernel.assign(fault, colon ? (size_t)(colon - fault) : strlen(fault));
        g_fault_at = colon ? parse_num(colon + 1, colon + strlen(colon), 1, 1L << 30) : 1;
        if (g_fault_kernel.empty() || g_fault_at < 0) {
            report("CUDASIM_FAULT='%s' is malformed: expected NAME or NAME:N (N >= 1: the N-th run of a kernel "
                   "whose name has NAME faults)", fault);
            g_init_err = cudaErrorInitializationError;
            return;
        }
    }
    const char *tr = getenv("CUDASIM_TRACE");
    if (tr && *tr)
        g_trace_fd = open(tr, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    const char *sample = getenv("CUDASIM_SAMPLE_BLOCKS");
    if (sample && *sample) { // NAME:B,B,...; B a linear block index, -1 the last block
        const char *colon = strrchr(sample, ':');
        bool ok = colon && colon > sample && colon[1];
        for (const char *p = colon ? colon + 1 : sample; ok && *p;) {
            char *e;
            errno = 0;
            long long b = strtoll(p, &e, 10);
            ok = e != p && errno == 0 && (*e == ',' || !*e) && (*e != ',' || e[1]);
            g_sample.push_back(b);
            p = *e ? e + 1 : e;
        }
        if (!ok) {
            report("CUDASIM_SAMPLE_BLOCKS='%s' is malformed: expected NAME:B[,B...], B a linear block index "
                   "(x + y*gridDim.x + z*gridDim.x*gridDim.y; -1 the last block)",
                   sample);
            g_init_err = cudaErrorInitializationError;
            return;
        }
        g_sample_kernel.assign(sample, (size_t)(colon - sample));
    }
    const char *capfail = getenv("CUDASIM_CAPTURE_FAIL");
    if (capfail && *capfail) {
        const char *colon = strchr(capfail, ':');
        long n = colon ? parse_num(colon + 1, colon + strlen(colon), 1, 1L << 30) : 0;
        size_t kw = colon ? (size_t)(colon - capfail) : strlen(capfail);
        if (kw == 2 && !strncmp(capfail, "op", 2) && n > 0) {
            g_capfail_op = n;
        } else if (kw == 3 && !strncmp(capfail, "end", 3) && (!colon || n > 0)) {
            g_capfail_end = colon ? n : -1;
        } else {
            report("CUDASIM_CAPTURE_FAIL='%s' is malformed: expected op:N or end[:N]", capfail);
            g_init_err = cudaErrorInitializationError;
            return;
        }
    }
    const char *sched = getenv("CUDASIM_SCHEDULE");
    if (sched && strcmp(sched, "reverse") == 0) {
        g_schedule = 1;
    } else if (sched && strncmp(sched, "random", 6) == 0) {
        g_schedule = 2;
        g_seed = sched[6] == ':' ? strtoull(sched + 7, NULL, 10) + 1 : 1;
    } else if (sched && *sched && strcmp(sched, "forward") != 0) {
        report("CUDASIM_SCHEDULE='%s' is malformed: expected forward, reverse or random[:SEED]", sched);
        g_init_err = cudaErrorInitializationError;
        return;
    }

    const char *cfg = getenv("CUDASIM_DEVICES");
    if (!cfg || !*cfg)
        cfg = "1:16384:9.0";
    if (strcmp(cfg, "nodriver") == 0) {
        g_init_err = cudaErrorInsufficientDriver;
        return;
    }
    // N[:MiB[,MiB...][:MAJOR.MINOR]]: one size for every device, or one per (physical) device
    const char *c1 = strchr(cfg, ':'), *end = cfg + strlen(cfg);
    const char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    long n = parse_num(cfg, c1 ? c1 : end, 0, kMaxDevices), major = 9, minor = 0;
    std::vector<long> mib;
    bool sizes_ok = true;
    if (n >= 0 && c1)
        for (const char *p = c1 + 1, *stop = c2 ? c2 : end; sizes_ok;) {
            const char *comma = (const char *)memchr(p, ',', (size_t)(stop - p));
            long v = parse_num(p, comma ? comma : stop, 1, 1L << 24);
            sizes_ok = v > 0;
            mib.push_back(v);
            if (!comma)
                break;
            p = comma + 1;
        }
    if (mib.empty())
        mib.push_back(16384);
    sizes_ok = sizes_ok && (mib.size() == 1 || (long)mib.size() == n);
    if (n >= 0 && sizes_ok && c2) {
        const char *dot = strchr(c2 + 1, '.');
        major = dot ? parse_num(c2 + 1, dot, 1, 12) : -1;
        minor = dot ? parse_num(dot + 1, end, 0, 9) : -1;
    }
    if (n < 0 || !sizes_ok || major < 0 || minor < 0) {
        report("CUDASIM_DEVICES='%s' is malformed: expected N[:MiB[,MiB...][:MAJOR.MINOR]], e.g. 2:16384:9.0 or "
               "2:16384,8192:9.0 (N <= %d, one size or N sizes), 0, or nodriver",
               cfg, kMaxDevices);
        g_init_err = cudaErrorInitializationError;
        return;
    }
    std::vector<int> visible;
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (!cvd) {
        for (int i = 0; i < n; i++)
            visible.push_back(i);
    } else { // as the driver: ordinals up to the first entry that is not a present, new one
        for (const char *p = cvd; *p;) {
            const char *comma = strchr(p, ',');
            const char *e = comma ? comma : p + strlen(p);
            long v = parse_num(p, e, 0, n - 1);
            if (v < 0 || std::find(visible.begin(), visible.end(), (int)v) != visible.end())
                break;
            visible.push_back((int)v);
            if (!comma)
                break;
            p = comma + 1;
        }
    }
    for (int phys : visible) {
        Device d;
        d.physical = phys;
        d.total = (size_t)mib[mib.size() == 1 ? 0 : (size_t)phys] << 20;
        d.used = 0;
        d.major = (int)major;
        d.minor = (int)minor;
        g_dev.push_back(d);
    }
}

cudaError_t init()
{
    std::call_once(g_once, init_once);
    return g_init_err;
}

/* Record e as the thread's last error (as every failing runtime call does) and return it. */
cudaError_t fail(cudaError_t e)
{
    if (e != cudaSuccess && e != cudaErrorNotReady)
        t_err = e;
    return e;
}

/* init() and at least one device, else the error every device call returns. */
cudaError_t ready()
{
    cudaError_t e = init();
    if (e != cudaSuccess)
        return e;
    if (g_sticky != cudaSuccess)
        return g_sticky;
    return g_dev.empty() ? cudaErrorNoDevice : cudaSuccess;
}

bool bad_device(int d) { return d < 0 || d >= (int)g_dev.size(); }

size_t smem_optin(const Device &d)
{
    if (d.major >= 9)
        return 232448; // 227 KiB
    if (d.major == 8)
        return d.minor == 0 ? 166912 : 101376;
    if (d.major == 7)
        return 98304;
    return kDefaultSmem;
}

struct ErrorText {
    cudaError_t e;
    const char *name, *text;
};
const ErrorText k_errors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration", "invalid configuration argument"},
    {cudaErrorInvalidDevicePointer, "cudaErrorInvalidDevicePointer", "invalid device pointer"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"},
    {cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {cudaErrorInvalidDeviceFunction, "cudaErrorInvalidDeviceFunction", "invalid device function"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorNoKernelImageForDevice, "cudaErrorNoKernelImageForDevice",
     "no kernel image is available for execution on the device"},
    {cudaErrorPeerAccessUnsupported, "cudaErrorPeerAccessUnsupported",
     "peer access is not supported between these two devices"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorIllegalAddress, "cudaErrorIllegalAddress", "an illegal memory access was encountered"},
    {cudaErrorLaunchOutOfResources, "cudaErrorLaunchOutOfResources", "too many resources requested for launch"},
    {cudaErrorPeerAccessAlreadyEnabled, "cudaErrorPeerAccessAlreadyEnabled", "peer access is already enabled"},
    {cudaErrorPeerAccessNotEnabled, "cudaErrorPeerAccessNotEnabled", "peer access has not been enabled"},
    {cudaErrorMisalignedAddress, "cudaErrorMisalignedAddress", "misaligned address"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure"},
    {cudaErrorNotPermitted, "cudaErrorNotPermitted", "operation not permitted"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
    {cudaErrorStreamCaptureUnsupported, "cudaErrorStreamCaptureUnsupported",
     "operation not permitted when stream is capturing"},
    {cudaErrorStreamCaptureInvalidated, "cudaErrorStreamCaptureInvalidated",
     "operation failed due to a previous error during capture"},
    {cudaErrorStreamCaptureUnmatched, "cudaErrorStreamCaptureUnmatched", "the capture was not initiated in this stream"},
    {cudaErrorStreamCaptureUnjoined, "cudaErrorStreamCaptureUnjoined",
     "the capture sequence contains a fork that was not joined to the primary stream"},
    {cudaErrorStreamCaptureIsolation, "cudaErrorStreamCaptureIsolation",
     "a dependency would have been created which crosses the capture sequence boundary"},
    {cudaErrorStreamCaptureImplicit, "cudaErrorStreamCaptureImplicit",
     "operation would make the legacy stream depend on a capturing blocking stream"},
    {cudaErrorIllegalState, "cudaErrorIllegalState", "operation not permitted in this state"},
    {cudaErrorStreamCaptureWrongThread, "cudaErrorStreamCaptureWrongThread",
     "attempt to terminate a thread-local capture sequence from another thread"},
    {cudaErrorGraphExecUpdateFailure, "cudaErrorGraphExecUpdateFailure",
     "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update"},
    {cudaErrorUnknown, "cudaErrorUnknown", "unknown error"},
};

const ErrorText *error_text(cudaError_t e)
{
    for (const ErrorText &t : k_errors)
        if (t.e == e)
            return &t;
    return NULL;
}

/* ================================================================ 2. memory */

struct Alloc {
    uintptr_t base;    // what cudaMalloc returned (256-aligned)
    size_t size;       // bytes asked for
    size_t need;       // size rounded up to 256 (what the device accounts)
    uintptr_t span_lo; // its pages: [span_lo, span_hi - kPage) data, then one guard page
    uintptr_t span_hi;
    int device;
    bool live;
    bool free_queued;  // cudaFreeAsync issued, not yet run
};
std::map<uintptr_t, Alloc> g_allocs; // device allocations by base, live and freed
std::map<uintptr_t, Alloc *> g_live;  // the live ones

/* Device memory is readable and writable only while the simulated device works on it (a
 * kernel, a copy, a library call): host code that dereferences a device pointer faults, as on
 * a GPU. DeviceAccess opens every live allocation for its scope (nested scopes count). */
int g_open = 0;
size_t data_bytes(const Alloc &al) { return al.span_hi - kPage - al.span_lo; }
void protect_live(int prot)
{
    for (auto &kv : g_live)
        mprotect((void *)kv.second->span_lo, data_bytes(*kv.second), prot);
}
struct DeviceAccess {
    DeviceAccess()
    {
        if (g_open++ == 0)
            protect_live(PROT_READ | PROT_WRITE);
    }
    ~DeviceAccess()
    {
        if (--g_open == 0)
            protect_live(PROT_NONE);
    }
};

struct Pinned {
    uintptr_t base;
    size_t size, mapped;
    int device;
};
std::map<uintptr_t, Pinned> g_pinned; // cudaMallocHost blocks by base

struct FiberStack {
    uintptr_t lo, hi; // guard page at lo
};
std::vector<FiberStack> g_stacks;

size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

int device_of_address(uintptr_t a)
{
    for (size_t d = 0; d < g_dev.size(); d++)
        if (g_dev[d].lo && a >= g_dev[d].lo && a < g_dev[d].hi)
            return (int)d;
    return -1;
}

/* The allocation whose pages (guard included) hold address a, or NULL. */
Alloc *alloc_at(uintptr_t a)
{
    auto it = g_allocs.upper_bound(a);
    if (it != g_allocs.end() && it->second.span_lo <= a && a < it->second.span_hi)
        return &it->second; // in the slack before its base
    if (it == g_allocs.begin())
        return NULL;
    --it;
    return a < it->second.span_hi ? &it->second : NULL;
}

const Pinned *pinned_at(uintptr_t a)
{
    auto it = g_pinned.upper_bound(a);
    if (it == g_pinned.begin())
        return NULL;
    --it;
    return a < it->second.base + it->second.size ? &it->second : NULL;
}

/* What p is, in words, for messages: "host memory (not from cudaMalloc)", "12 bytes past the end
 * of the 400-byte allocation at 0x... on cuda:0", ... */
std::string describe(const void *p)
{
    char buf[256];
    uintptr_t a = (uintptr_t)p;
    if (!p)
        return "NULL";
    int d = device_of_address(a);
    if (d >= 0) {
        const Alloc *al = alloc_at(a);
        if (!al) { // between allocations: name the nearer one of this device
            auto next = g_allocs.upper_bound(a);
            const Alloc *n = next != g_allocs.end() && next->second.device == d ? &next->second : NULL;
            const Alloc *pr = NULL;
            if (next != g_allocs.begin() && std::prev(next)->second.device == d)
                pr = &std::prev(next)->second;
            if (pr && (!n || a - (pr->base + pr->size) < n->base - a))
                al = pr;
            else
                al = n;
        }
        if (!al) {
            snprintf(buf, sizeof buf, "%p, in cuda:%d's address range but in no allocation", p, d);
        } else {
            const char *st = al->live ? "" : "freed ";
            if (a < al->base)
                snprintf(buf, sizeof buf, "%p, %zu bytes before the %s%zu-byte allocation at 0x%lx on cuda:%d", p,
                         (size_t)(al->base - a), st, al->size, (unsigned long)al->base, d);
            else if (a >= al->base + al->size && al->size)
                snprintf(buf, sizeof buf, "%p, %zu bytes past the end of the %s%zu-byte allocation at 0x%lx on cuda:%d",
                         p, (size_t)(a - al->base - al->size), st, al->size, (unsigned long)al->base, d);
            else
                snprintf(buf, sizeof buf, "%p, %zu bytes into the %s%zu-byte allocation at 0x%lx on cuda:%d", p,
                         (size_t)(a - al->base), st, al->size, (unsigned long)al->base, d);
        }
        return buf;
    }
    if (const Pinned *h = pinned_at(a)) {
        snprintf(buf, sizeof buf, "%p, %zu bytes into the %zu-byte pinned host block at 0x%lx (cudaMallocHost)", p,
                 (size_t)(a - h->base), h->size, (unsigned long)h->base);
        return buf;
    }
    for (const FiberStack &s : g_stacks)
        if (a >= s.lo && a < s.hi) {
            snprintf(buf, sizeof buf, "%p, on a simulated thread's stack%s", p,
                     a < s.lo + kPage ? " (its guard page: stack overflow)" : "");
            return buf;
        }
    snprintf(buf, sizeof buf, "%p, host memory (not from cudaMalloc)", p);
    return buf;
}

/* Where [p, p + n) lies: a live device allocation (its device in *dev), pinned host memory, or
 * other host memory; Bad for a device address outside every live allocation. */
enum class Where { Device, Pinned, Host, Bad };
Where where(const void *p, size_t n, int *dev)
{
    uintptr_t a = (uintptr_t)p;
    *dev = device_of_address(a);
    if (*dev >= 0) {
        const Alloc *al = alloc_at(a);
        if (al && al->live && a >= al->base && a - al->base <= al->size && n <= al->base + al->size - a)
            return Where::Device;
        return Where::Bad;
    }
    const Pinned *h = pinned_at(a);
    if (h && n <= h->base + h->size - a) {
        *dev = h->device;
        return Where::Pinned;
    }
    return Where::Host;
}

cudaError_t reserve_range(Device &d)
{
    if (d.lo)
        return cudaSuccess;
    size_t bytes = round_up(d.total * 4 + ((size_t)1 << 30), kPage);
    void *m = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
        report("cannot reserve %zu bytes of address space for a simulated device: %s", bytes, strerror(errno));
        return cudaErrorMemoryAllocation;
    }
    d.lo = (uintptr_t)m;
    d.hi = d.lo + bytes;
    d.bump = d.lo + kPage; // the first allocation is preceded by a guard page too
    return cudaSuccess;
}

cudaError_t device_alloc(int dv, size_t size, void **out)
{
    Device &d = g_dev[dv];
    size_t need = round_up(size ? size : 1, 256), data = round_up(need, kPage), span = data + kPage;
    if (need > d.total - d.used - d.graph_bytes)
        return cudaErrorMemoryAllocation;
    cudaError_t e = reserve_range(d);
    if (e != cudaSuccess)
        return e;
    uintptr_t lo = 0;
    if (d.bump + span <= d.hi) {
        lo = d.bump;
        d.bump += span;
    } else { // the range ran out: first fit between live allocations, dropping freed records there
        uintptr_t prev = d.lo + kPage;
        for (auto &kv : g_allocs) {
            const Alloc &al = kv.second;
            if (al.device != dv || !al.live)
                continue;
            if (al.span_lo >= prev + span) {
                lo = prev;
                break;
            }
            prev = al.span_hi;
        }
        if (!lo && prev + span <= d.hi)
            lo = prev;
        if (!lo)
            return cudaErrorMemoryAllocation;
        for (auto it = g_allocs.begin(); it != g_allocs.end();)
            if (!it->second.live && it->second.span_lo < lo + span && it->second.span_hi > lo)
                it = g_allocs.erase(it);
            else
                ++it;
    }
    if (mprotect((void *)lo, data, PROT_READ | PROT_WRITE) != 0) {
        report("cannot map %zu bytes for a simulated allocation: %s", data, strerror(errno));
        return cudaErrorMemoryAllocation;
    }
    Alloc al{lo + data - need, size, need, lo, lo + span, dv, true, false};
    if (g_fill >= 0)
        memset((void *)al.base, g_fill, need);
    if (!g_open)
        mprotect((void *)lo, data, PROT_NONE);
    g_allocs[al.base] = al;
    g_live[al.base] = &g_allocs[al.base];
    d.used += need;
    *out = (void *)al.base;
    return cudaSuccess;
}

void release(Alloc &al)
{
    size_t data = data_bytes(al);
    mprotect((void *)al.span_lo, data, PROT_NONE);
    madvise((void *)al.span_lo, data, MADV_DONTNEED);
    al.live = false;
    g_live.erase(al.base);
    g_dev[al.device].used -= al.need;
}

/* The live allocation that starts at p, or NULL after saying why not (naming `api`). */
Alloc *alloc_to_free(void *p, const char *api)
{
    auto it = g_allocs.find((uintptr_t)p);
    if (it != g_allocs.end() && it->second.live && !it->second.free_queued)
        return &it->second;
    if (it != g_allocs.end())
        report("%s(%p): already freed (double free)", api, p);
    else
        report("%s(%p): not the start of a device allocation: %s", api, p, describe(p).c_str());
    return NULL;
}

/* ================================================================ 3. streams and events */

struct Op {
    std::string what;
    std::function<void()> fn;
    bool device = false; // touches device memory (a copy, a kernel, a library call)
};

/* A stream capture (cudaStreamBeginCapture): the operations queued since, in order, instead of
 * running, on the stream that began it (the origin) and on the streams it forked into (a stream
 * that waits for an event recorded during the capture joins it); an error while capturing
 * invalidates it (cudaStreamEndCapture then fails with cudaErrorStreamCaptureInvalidated). The
 * capture ends on its origin, once the origin has waited for every other member's last
 * operation, directly (an event recorded on that member; CUDA also accepts a join through
 * another member), else cudaErrorStreamCaptureUnjoined. */
struct Capture {
    std::vector<Op> ops;
    bool invalid = false;
    bool ended = false;
    int mode;          // cudaStreamCaptureMode
    pthread_t thread;  // the thread that began it
    Stream *origin = nullptr;
    std::vector<Stream *> members;        // the origin first, then the streams forked into it
    std::map<Stream *, uint64_t> queued;  // operations each member added
    std::map<Stream *, uint64_t> joined;  // each member's operations the origin has waited for
};

struct Stream {
    uint64_t id;
    int device;
    unsigned flags;
    bool is_null;
    std::deque<Op> q;
    uint64_t enq = 0, done = 0; // operations queued and run so far
    bool flushing = false;
    std::shared_ptr<Capture> cap = nullptr; // while capturing
};

/* A captured graph, and an executable one (cudaGraphInstantiate): the captured operations,
 * replayed in order by cudaGraphLaunch. Kernel closures and the stand-in's products are shared,
 * so a replay runs them again with the arguments of the capture, as a GPU replays its nodes. */
struct Graph {
    int device;
    std::vector<Op> ops;
    size_t charge = 0; // an executable graph's device memory (graph_charge), held until destroyed
};

/* The device memory an executable graph holds, as a driver's instantiation allocates it for its
 * nodes' launch parameters and descriptors: 64 KiB and 8 KiB per operation, in 2 MiB pages. An
 * estimate (the driver's own figure is undocumented and varies); the runtime's pre-flight
 * reserves more per graph (RT_GRAPH_BYTES in runtime/rt_model.c). */
size_t graph_charge(size_t ops)
{
    const size_t page = (size_t)2 << 20;
    return ((64 << 10) + ops * (8 << 10) + page - 1) / page * page;
}
std::set<Graph *> g_graphs;
std::set<Graph *> g_execs;
int g_captures_global = 0;        // captures in cudaStreamCaptureModeGlobal, by any thread
thread_local int t_captures = 0;  // captures this thread began (global or thread-local mode)
uint64_t g_next_id = 1;
std::map<uint64_t, Stream *> g_streams; // by id: every live stream, the NULL ones included
std::map<Stream *, uint64_t> g_stream_ids;

struct Event {
    int device;
    unsigned flags;
    uint64_t stream = 0; // id of the stream of the last record (0: never recorded)
    uint64_t seq = 0;    // that stream's operation count up to the record
    uint64_t gen = 0;
    bool stamped = false;
    double ms = 0;
    // last recorded during a capture: the capture, the stream and its operations in it so far
    std::shared_ptr<Capture> cap = nullptr;
    Stream *cap_stream = nullptr;
    uint64_t cap_count = 0;
};
std::map<Event *, bool> g_events;

const char *g_op = NULL; // the stream operation running now (for fault messages)

/* What the host asked of the simulated devices (cudasim_get_counters). A host synchronization
 * is a call that returns only once device work is done: a stream, event or device
 * synchronization (or query), a copy that returns once done (cudaMemcpy, cudaMemcpyAsync to
 * pageable memory, cudaMemcpyPeer), cudaMemset, cudaFree and cudaFreeHost. */
cudasim_counters g_counts;
unsigned long long g_pinned_allocs; // cudaMallocHost calls of a non-empty block

double now_ms()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

Stream *null_stream(int dv)
{
    Device &d = g_dev[dv];
    if (!d.null_stream) {
        Stream *s = new Stream{g_next_id++, dv, 0, true, {}, 0, 0, false};
        g_streams[s->id] = s;
        g_stream_ids[s] = s->id;
        d.null_stream = s;
    }
    return d.null_stream;
}

/* The stream behind a handle: NULL, cudaStreamLegacy and cudaStreamPerThread are the current
 * device's NULL stream. */
cudaError_t resolve(cudaStream_t h, Stream **out)
{
    if (!h || h == cudaStreamLegacy || h == cudaStreamPerThread) {
        *out = null_stream(t_dev);
        return cudaSuccess;
    }
    Stream *s = (Stream *)h;
    if (!g_stream_ids.count(s)) {
        report("stream %p does not exist (never created, or destroyed)", (void *)h);
        return cudaErrorInvalidResourceHandle;
    }
    *out = s;
    return cudaSuccess;
}

void run_op(Op &op)
{
    const char *prev = g_op;
    g_op = op.what.c_str();
    if (op.device) {
        DeviceAccess open;
        op.fn();
    } else {
        op.fn();
    }
    g_op = prev;
}

/* Run s's queued operations, in order, until `upto` of them have run in all. */
void flush(Stream *s, uint64_t upto = UINT64_MAX)
{
    if (s->flushing) {
        if (upto > s->done + 1) // the running operation is done + 1; earlier ones are complete
            die("stream dependency cycle: an operation of a stream waits for a later one of the same stream");
        return;
    }
    s->flushing = true;
    // Consecutive device operations share one opening of device memory (run_op's own nests in
    // it): opening and closing mprotect every live allocation, the most a simulated run costs.
    // No host code runs between them; a host operation (cudaLaunchHostFunc) runs with it closed.
    std::unique_ptr<DeviceAccess> open;
    while (s->done < upto && !s->q.empty()) {
        Op op = std::move(s->q.front());
        s->q.pop_front();
        if (op.device && !open)
            open.reset(new DeviceAccess);
        else if (!op.device)
            open.reset();
        run_op(op);
        s->done++;
    }
    open.reset();
    s->flushing = false;
}

/* Everything queued on the device's streams (what cudaDeviceSynchronize waits for); with
 * blocking_only, only the streams the legacy NULL stream synchronises with. */
void drain(int dv, bool blocking_only)
{
    std::vector<Stream *> list = g_dev[dv].streams;
    for (Stream *s : list)
        if (g_stream_ids.count(s) && (!blocking_only || !(s->flags & cudaStreamNonBlocking)))
            flush(s);
}

/* Queue op on s; on a NULL stream, the device's blocking streams drain and op runs now. On a
 * capturing stream, op joins the capture instead. */
void enqueue(Stream *s, Op op)
{
    if (s->cap) {
        s->cap->ops.push_back(std::move(op));
        s->cap->queued[s]++;
        return;
    }
    s->enq++;
    if (s->is_null) {
        drain(s->device, true);
        run_op(op);
        s->done++;
        return;
    }
    s->q.push_back(std::move(op));
}

bool event_complete(const Event *e)
{
    auto it = g_streams.find(e->stream);
    return !e->stream || it == g_streams.end() || it->second->done >= e->seq;
}

cudaError_t check_event(cudaEvent_t h, Event **out)
{
    Event *e = (Event *)h;
    if (!h || !g_events.count(e)) {
        report("event %p does not exist (never created, or destroyed)", (void *)h);
        return cudaErrorInvalidResourceHandle;
    }
    *out = e;
    return cudaSuccess;
}

/* An unsafe call (a host synchronization, an allocation or free, a synchronous copy) while a
 * capture forbids it: a capture of this thread, or one in global mode of any thread. As CUDA,
 * the call fails with cudaErrorStreamCaptureUnsupported and invalidates the captures. */
bool capture_forbids(const char *api)
{
    if (!g_captures_global && !t_captures)
        return false;
    report("%s while a stream is being captured: not permitted during capture (cudaErrorStreamCaptureUnsupported); "
           "the capture is invalidated",
           api);
    for (auto &kv : g_streams)
        if (kv.second->cap)
            kv.second->cap->invalid = true;
    return true;
}

/* A call that the capture of stream s cannot record: fails and invalidates it. */
bool capture_refuses(Stream *s, const char *api, const char *why)
{
    if (!s->cap)
        return false;
    report("%s on a capturing stream: %s (cudaErrorStreamCaptureUnsupported); the capture is invalidated", api, why);
    s->cap->invalid = true;
    return true;
}

/* End capture c: its members stop capturing (the origin's cudaStreamEndCapture, or the origin's
 * destruction). */
void capture_close(const std::shared_ptr<Capture> &c)
{
    for (Stream *m : c->members)
        if (g_stream_ids.count(m) && m->cap == c)
            m->cap = nullptr;
    c->ended = true;
    if (c->mode == cudaStreamCaptureModeGlobal)
        g_captures_global--;
    if (c->mode != cudaStreamCaptureModeRelaxed)
        t_captures--;
}

/* The fault CUDASIM_CAPTURE_FAIL=op:N injects: the N-th operation queued on a capturing stream
 * (a kernel, a copy, a memset, a library call, a host function) fails as an operation CUDA cannot
 * capture does, with cudaErrorStreamCaptureUnsupported, and invalidates the capture. */
bool capture_injected(Stream *s, const char *api)
{
    if (!s->cap || !g_capfail_op || ++g_capfail_op_seen != g_capfail_op)
        return false;
    report("%s on a capturing stream: fails as CUDASIM_CAPTURE_FAIL=op:%ld asks (cudaErrorStreamCaptureUnsupported); "
           "the capture is invalidated",
           api, g_capfail_op);
    s->cap->invalid = true;
    return true;
}

/* ================================================================ 4. kernels */

enum ThreadState { ST_READY, ST_BAR, ST_WARP, ST_DONE };

/* The ready threads of the running block, one bit each. The scheduler runs one ready thread at a
 * time until it waits or exits: the lowest-numbered (the default), the highest (reverse) or one
 * at random. A warp whose collective completes thus runs on at once, ahead of the threads that
 * have not started: what other warps have not yet read from shared memory can be overwritten,
 * as on a GPU that schedules that warp first. */
uint64_t g_ready[16];
void set_ready(int i) { g_ready[i >> 6] |= 1ull << (i & 63); }
int pick_ready()
{
    if (g_schedule == 1) {
        for (int w = 15; w >= 0; w--)
            if (g_ready[w])
                return w * 64 + 63 - __builtin_clzll(g_ready[w]);
        return -1;
    }
    if (g_schedule == 2) {
        int total = 0;
        for (int w = 0; w < 16; w++)
            total += __builtin_popcountll(g_ready[w]);
        if (!total)
            return -1;
        g_seed ^= g_seed << 13, g_seed ^= g_seed >> 7, g_seed ^= g_seed << 17; // xorshift64
        int k = (int)(g_seed % (unsigned long long)total);
        for (int w = 0;; w++) {
            int c = __builtin_popcountll(g_ready[w]);
            if (k >= c) {
                k -= c;
                continue;
            }
            uint64_t m = g_ready[w];
            while (k--)
                m &= m - 1;
            return w * 64 + __builtin_ctzll(m);
        }
    }
    for (int w = 0; w < 16; w++)
        if (g_ready[w])
            return w * 64 + __builtin_ctzll(g_ready[w]);
    return -1;
}

#if defined(__x86_64__) && !defined(CUDASIM_UCONTEXT)
/* Save the callee-saved registers, MXCSR and the x87 control word on the current stack, store
 * the stack pointer in *save, and continue on stack `to` (made by fiber_make or saved here). */
extern "C" void cudasim_fiber_switch(void **save, void *to);
__asm__(".text\n"
        ".globl cudasim_fiber_switch\n"
        ".hidden cudasim_fiber_switch\n"
        ".type cudasim_fiber_switch,@function\n"
        "cudasim_fiber_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  subq $8, %rsp\n  stmxcsr (%rsp)\n  fnstcw 4(%rsp)\n"
        "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
        "  ldmxcsr (%rsp)\n  fldcw 4(%rsp)\n  addq $8, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size cudasim_fiber_switch, .-cudasim_fiber_switch\n");
struct Context {
    void *sp = NULL;
};
#else
struct Context {
    ucontext_t uc;
};
#endif

struct SimThread {
    cudasim_ids ids;
    int lin; // linear index in the block
    int state;
    // a wait at __syncthreads*
    int bar_kind, bar_pred, bar_result;
    const char *file;
    int line;
    // a wait at a warp intrinsic
    int wop, warg, wwidth;
    unsigned wmask;
    unsigned long long win, wout;
    const char *wname;
    Context ctx;
    bool has_fiber = false;
};

struct Launch {
    std::string name;
    int device;
    dim3 grid, block;
    int nthreads;
    void (*run)(void *);
    void *closure;
    void (*drop)(void *);
    char *shared_lo, *shared_hi; // the module's __shared__ variables
    ~Launch() { drop(closure); }
};

SimThread g_th[1024];
Context g_sched;
SimThread *g_self = NULL;   // the simulated thread running now
Launch *g_kernel = NULL;     // the kernel running now
cudasim_ids g_host_ids;      // what threadIdx reads outside kernels: zeros
// The thread's alternate signal stack (the fault handler runs there), freed when the thread ends
// (LeakSanitizer saw one 64 KiB stack per stream thread left behind).
struct AltStack {
    void *p = nullptr;
    ~AltStack()
    {
        if (!p)
            return;
        stack_t ss = {};
        ss.ss_flags = SS_DISABLE;
        sigaltstack(&ss, NULL);
        free(p);
    }
};
thread_local AltStack t_altstack;

[[noreturn]] void fiber_main();

#if defined(__x86_64__) && !defined(CUDASIM_UCONTEXT)
void fiber_make(SimThread *t, uintptr_t lo, uintptr_t hi)
{
    (void)lo;
    void **sp = (void **)(hi & ~(uintptr_t)15);
    *--sp = NULL;                    // fiber_main's return address slot: entry sees rsp % 16 == 8
    *--sp = (void *)&fiber_main;     // where cudasim_fiber_switch returns to
    for (int i = 0; i < 6; i++)
        *--sp = NULL;                // rbp rbx r12 r13 r14 r15
    unsigned int csr[2] = {0, 0};
    __asm__ volatile("stmxcsr %0" : "=m"(csr[0]));
    __asm__ volatile("fnstcw %0" : "=m"(csr[1]));
    *--sp = NULL;
    memcpy(sp, csr, 8);              // MXCSR at 0, x87 control word at 4
    t->ctx.sp = sp;
}
void switch_in(SimThread *t) { cudasim_fiber_switch(&g_sched.sp, t->ctx.sp); }
void switch_out(SimThread *t) { cudasim_fiber_switch(&t->ctx.sp, g_sched.sp); }
#else
void fiber_trampoline() { fiber_main(); }
void fiber_make(SimThread *t, uintptr_t lo, uintptr_t hi)
{
    getcontext(&t->ctx.uc);
    t->ctx.uc.uc_stack.ss_sp = (void *)(lo + kPage);
    t->ctx.uc.uc_stack.ss_size = hi - lo - kPage;
    t->ctx.uc.uc_link = NULL;
    makecontext(&t->ctx.uc, fiber_trampoline, 0);
}
void switch_in(SimThread *t) { swapcontext(&g_sched.uc, &t->ctx.uc); }
void switch_out(SimThread *t) { swapcontext(&t->ctx.uc, &g_sched.uc); }
#endif

/* Each fiber runs the kernel body for its thread slot, then parks until the next block. */
[[noreturn]] void fiber_main()
{
    for (;;) {
        SimThread *t = g_self;
        g_kernel->run(g_kernel->closure);
        t->state = ST_DONE;
        switch_out(t);
    }
}

void ensure_fibers(int n)
{
    for (int i = 0; i < n; i++) {
        SimThread *t = &g_th[i];
        if (t->has_fiber)
            continue;
        size_t bytes = kStackBytes + kPage;
        void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED)
            die("cannot map a %zu-byte stack for simulated thread %d: %s", bytes, i, strerror(errno));
        mprotect(m, kPage, PROT_NONE); // the guard page
        g_stacks.push_back(FiberStack{(uintptr_t)m, (uintptr_t)m + bytes});
        fiber_make(t, (uintptr_t)m, (uintptr_t)m + bytes);
        t->has_fiber = true;
    }
}

void resume(SimThread *t)
{
    g_self = t;
    cudasim_cur = &t->ids;
    switch_in(t);
    g_self = NULL;
    cudasim_cur = &g_host_ids;
}

/* "kernel 'name' on cuda:0, block (1,0,0) thread (5,0,0)" (the thread only while one runs). */
std::string where_kernel()
{
    char buf[512];
    const cudasim_ids *b = g_self ? &g_self->ids : &g_th[0].ids;
    int k = snprintf(buf, sizeof buf, "kernel '%s' on cuda:%d, block (%u,%u,%u)", g_kernel->name.c_str(),
                     g_kernel->device, b->blockIdx.x, b->blockIdx.y, b->blockIdx.z);
    if (g_self && k > 0 && (size_t)k < sizeof buf)
        snprintf(buf + k, sizeof buf - k, " thread (%u,%u,%u)", b->threadIdx.x, b->threadIdx.y, b->threadIdx.z);
    return buf;
}

/* What each thread of the block waits at, grouped into runs of consecutive threads. */
std::string block_states(int n)
{
    std::string out;
    auto say = [](const SimThread &t) {
        char b[256];
        if (t.state == ST_DONE)
            return std::string("have exited");
        if (t.state == ST_BAR)
            snprintf(b, sizeof b, "wait at __syncthreads (%s:%d)", t.file, t.line);
        else if (t.state == ST_WARP)
            snprintf(b, sizeof b, "wait at %s (%s:%d) with mask 0x%08x", t.wname, t.file, t.line, t.wmask);
        else
            snprintf(b, sizeof b, "are ready");
        return std::string(b);
    };
    for (int i = 0; i < n;) {
        std::string s = say(g_th[i]);
        int j = i + 1;
        while (j < n && say(g_th[j]) == s)
            j++;
        char r[64];
        snprintf(r, sizeof r, j - i > 1 ? "threads %d-%d " : "thread %d ", i, j - 1);
        out += (out.empty() ? "" : "; ") + std::string(r) + s;
        i = j;
    }
    return out;
}

/* Every thread is waiting: release the barrier if all the live ones wait at the same one, else
 * the block can never finish. */
void release_or_die(int n)
{
    int live = 0, at_bar = 0, count = 0;
    const SimThread *first = NULL;
    bool same = true;
    for (int i = 0; i < n; i++) {
        const SimThread &t = g_th[i];
        if (t.state == ST_DONE)
            continue;
        live++;
        if (t.state != ST_BAR)
            continue;
        at_bar++;
        count += t.bar_pred;
        if (!first)
            first = &t;
        else if (t.line != first->line || strcmp(t.file, first->file) != 0 || t.bar_kind != first->bar_kind)
            same = false;
    }
    g_self = NULL;
    if (at_bar != live || !same)
        die("%s: the block can never finish (%s): %s", where_kernel().c_str(),
            at_bar == live ? "threads wait at different __syncthreads" : "a warp intrinsic waits for lanes that "
                                                                         "will not arrive",
            block_states(n).c_str());
    for (int i = 0; i < n; i++) {
        SimThread &t = g_th[i];
        if (t.state != ST_BAR)
            continue;
        t.bar_result = t.bar_kind == CUDASIM_BAR_COUNT ? count
                     : t.bar_kind == CUDASIM_BAR_AND   ? count == live
                     : t.bar_kind == CUDASIM_BAR_OR    ? count > 0
                                                       : 0;
        t.state = ST_READY;
        set_ready(i);
    }
}

void run_block(Launch *L, unsigned bx, unsigned by, unsigned bz)
{
    const int n = L->nthreads;
    if (g_fill >= 0 && L->shared_lo && L->shared_hi > L->shared_lo) // shared memory starts as garbage
        memset(L->shared_lo, g_fill, (size_t)(L->shared_hi - L->shared_lo));
    for (int i = 0; i < n; i++) {
        SimThread &t = g_th[i];
        t.lin = i;
        t.ids.threadIdx = uint3{i % L->block.x, (i / L->block.x) % L->block.y, i / (L->block.x * L->block.y)};
        t.ids.blockIdx = uint3{bx, by, bz};
        t.ids.blockDim = L->block;
        t.ids.gridDim = L->grid;
        t.state = ST_READY;
        set_ready(i);
    }
    int done = 0;
    for (;;) {
        const int i = pick_ready();
        if (i < 0) {
            if (done == n)
                return;
            release_or_die(n);
            continue;
        }
        g_ready[i >> 6] &= ~(1ull << (i & 63));
        resume(&g_th[i]);
        done += g_th[i].state == ST_DONE;
    }
}

void execute(Launch *L)
{
    ensure_fibers(L->nthreads);
    if (!t_altstack.p) { // the fault handler runs here, so that a fiber's stack overflow is reported
        stack_t ss;
        ss.ss_size = 1 << 16;
        ss.ss_sp = t_altstack.p = malloc(ss.ss_size);
        ss.ss_flags = 0;
        sigaltstack(&ss, NULL);
    }
    if (g_sticky != cudaSuccess) // a faulted context runs nothing more
        return;
    if (!g_fault_kernel.empty() && L->name.find(g_fault_kernel) != std::string::npos && ++g_fault_seen == g_fault_at) {
        report("kernel '%s' on cuda:%d: fault injected by CUDASIM_FAULT (its run %ld): cudaErrorIllegalAddress, "
               "sticky from now on",
               L->name.c_str(), L->device, g_fault_seen);
        g_sticky = cudaErrorIllegalAddress;
        return;
    }
    Launch *prev = g_kernel;
    g_kernel = L;
    if (!g_sample_kernel.empty() && L->name.find(g_sample_kernel) != std::string::npos) {
        // CUDASIM_SAMPLE_BLOCKS: only the listed blocks, in the order listed (the others never
        // run, so their memory is never touched: a grid over more memory than is ever written)
        const long long gx = L->grid.x, gxy = gx * L->grid.y, total = gxy * L->grid.z;
        for (long long b : g_sample) {
            const long long lin = b < 0 ? total + b : b;
            if (lin < 0 || lin >= total) {
                report("kernel '%s' on cuda:%d: CUDASIM_SAMPLE_BLOCKS block %lld is outside its grid of %lld "
                       "blocks: skipped",
                       L->name.c_str(), L->device, b, total);
                continue;
            }
            run_block(L, (unsigned)(lin % gx), (unsigned)(lin % gxy / gx), (unsigned)(lin / gxy));
        }
    } else {
        for (unsigned z = 0; z < L->grid.z; z++)
            for (unsigned y = 0; y < L->grid.y; y++)
                for (unsigned x = 0; x < L->grid.x; x++)
                    run_block(L, x, y, z);
    }
    g_kernel = prev;
}

/* ---------------------------------------------------------------- faults */

struct sigaction g_old_segv, g_old_bus;

void on_fault(int sig, siginfo_t *si, void *ucv)
{
    uintptr_t a = (uintptr_t)si->si_addr;
    const char *rw = "access";
#if defined(__x86_64__)
    const ucontext_t *uc = (const ucontext_t *)ucv;
    rw = (uc->uc_mcontext.gregs[REG_ERR] & 2) ? "write" : "read";
#else
    (void)ucv;
#endif
    bool ours = device_of_address(a) >= 0 || g_kernel;
    for (const FiberStack &s : g_stacks)
        ours = ours || (a >= s.lo && a < s.lo + kPage);
    if (!ours) { // not the simulator's: let it crash as it would have
        sigaction(SIGSEGV, &g_old_segv, NULL);
        sigaction(SIGBUS, &g_old_bus, NULL);
        return;
    }
    std::string what = describe((const void *)a);
    if (g_kernel)
        die("%s: invalid %s at %s (cudaErrorIllegalAddress)", where_kernel().c_str(), rw, what.c_str());
    if (g_op)
        die("stream operation '%s': invalid %s at %s (cudaErrorIllegalAddress)", g_op, rw, what.c_str());
    die("host code made an invalid %s of device memory at %s (device memory is not host-accessible; copy it "
        "with cudaMemcpy)",
        rw, what.c_str());
    (void)sig;
}

struct FaultHandler {
    FaultHandler()
    {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_fault;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, &g_old_segv);
        sigaction(SIGBUS, &sa, &g_old_bus);
    }
} g_fault_handler;

/* ---------------------------------------------------------------- copies */

const char *kind_name(int k)
{
    static const char *names[] = {"cudaMemcpyHostToHost", "cudaMemcpyHostToDevice", "cudaMemcpyDeviceToHost",
                                  "cudaMemcpyDeviceToDevice", "cudaMemcpyDefault"};
    return k >= 0 && k <= 4 ? names[k] : "an invalid kind";
}

/* Check a copy of n bytes and queue it on s (sync: on the current device's NULL stream). */
cudaError_t memcpy_impl(const char *api, void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                        Stream *s)
{
    if ((int)kind < 0 || (int)kind > 4) {
        report("%s: invalid copy kind %d", api, (int)kind);
        return cudaErrorInvalidMemcpyDirection;
    }
    if (n == 0)
        return cudaSuccess;
    if (!dst || !src) {
        report("%s of %zu bytes: %s pointer is NULL", api, n, dst ? "the source" : "the destination");
        return cudaErrorInvalidValue;
    }
    int dd, sd;
    Where wd = where(dst, n, &dd), ws = where(src, n, &sd);
    bool dst_dev = wd == Where::Device, src_dev = ws == Where::Device;
    bool dst_host = wd == Where::Host || wd == Where::Pinned, src_host = ws == Where::Host || ws == Where::Pinned;
    bool ok;
    switch (kind) {
    case cudaMemcpyHostToDevice: ok = dst_dev && src_host; break;
    case cudaMemcpyDeviceToHost: ok = src_dev && dst_host; break;
    case cudaMemcpyDeviceToDevice: ok = dst_dev && src_dev; break;
    case cudaMemcpyHostToHost: ok = dst_host && src_host; break;
    default: ok = wd != Where::Bad && ws != Where::Bad; break;
    }
    if (!ok) {
        report("%s of %zu bytes with %s: destination %s; source %s", api, n, kind_name(kind), describe(dst).c_str(),
               describe(src).c_str());
        return cudaErrorInvalidValue;
    }
    char what[160];
    snprintf(what, sizeof what, "%s of %zu bytes to %p from %p", api, n, dst, src);
    bool async = !s->is_null;
    if (!async && capture_forbids(api))
        return cudaErrorStreamCaptureUnsupported;
    if (s->cap && (ws == Where::Host || wd == Where::Host) &&
        capture_refuses(s, api, "a copy to or from pageable host memory cannot be captured (use pinned memory)"))
        return cudaErrorStreamCaptureUnsupported;
    if (capture_injected(s, api))
        return cudaErrorStreamCaptureUnsupported;
    if (async && ws == Where::Host && dst_dev) { // pageable source: staged now, as the driver does
        auto staged = std::make_shared<std::vector<unsigned char>>((const unsigned char *)src,
                                                                   (const unsigned char *)src + n);
        enqueue(s, Op{what, [dst, staged, n] { memcpy(dst, staged->data(), n); }, true});
        g_counts.copies++;
        return cudaSuccess;
    }
    enqueue(s, Op{what, [dst, src, n] { memmove(dst, src, n); }, true});
    g_counts.copies++;
    if (!async)
        g_counts.host_syncs++;
    if (async && (wd == Where::Host || (dst_host && src_host))) { // returns once the copy is done
        g_counts.host_syncs++;
        flush(s, s->enq);
    }
    return cudaSuccess;
}

cudaError_t memset_impl(const char *api, void *p, int value, size_t n, Stream *s)
{
    if (n == 0)
        return cudaSuccess;
    int d;
    if (where(p, n, &d) != Where::Device) {
        report("%s of %zu bytes at %s: not inside one live device allocation", api, n, describe(p).c_str());
        return cudaErrorInvalidValue;
    }
    char what[128];
    snprintf(what, sizeof what, "%s of %zu bytes at %p", api, n, p);
    if (s->is_null && capture_forbids(api))
        return cudaErrorStreamCaptureUnsupported;
    if (capture_injected(s, api))
        return cudaErrorStreamCaptureUnsupported;
    enqueue(s, Op{what, [p, value, n] { memset(p, value, n); }, true});
    return cudaSuccess;
}

std::map<const void *, int> g_func_smem; // cudaFuncAttributeMaxDynamicSharedMemorySize by kernel

} // namespace

/* ================================================================ the API */

extern "C" {
__attribute__((visibility("default"))) const cudasim_ids *cudasim_cur = &g_host_ids;
}

CUDASIM_EXPORT cudaError_t cudaGetLastError(void)
{
    Lock l(g_mu);
    cudaError_t e = t_err;
    t_err = cudaSuccess;
    return g_sticky != cudaSuccess ? g_sticky : e; // a sticky fault is never cleared
}
CUDASIM_EXPORT cudaError_t cudaPeekAtLastError(void)
{
    Lock l(g_mu);
    return g_sticky != cudaSuccess ? g_sticky : t_err;
}
CUDASIM_EXPORT const char *cudaGetErrorString(cudaError_t e)
{
    const ErrorText *t = error_text(e);
    return t ? t->text : "unrecognized error code";
}
CUDASIM_EXPORT const char *cudaGetErrorName(cudaError_t e)
{
    const ErrorText *t = error_text(e);
    return t ? t->name : "unrecognized error code";
}
CUDASIM_EXPORT cudaError_t cudaDriverGetVersion(int *v)
{
    if (!v)
        return fail(cudaErrorInvalidValue);
    *v = init() == cudaErrorInsufficientDriver ? 0 : CUDART_VERSION;
    return cudaSuccess;
}
CUDASIM_EXPORT cudaError_t cudaRuntimeGetVersion(int *v)
{
    if (!v)
        return fail(cudaErrorInvalidValue);
    *v = CUDART_VERSION;
    return cudaSuccess;
}

/* ---------------------------------------------------------------- devices */

CUDASIM_EXPORT cudaError_t cudaGetDeviceCount(int *count)
{
    Lock l(g_mu);
    if (!count)
        return fail(cudaErrorInvalidValue);
    *count = 0;
    cudaError_t e = ready();
    if (e != cudaSuccess)
        return fail(e);
    *count = (int)g_dev.size();
    return cudaSuccess;
}

CUDASIM_EXPORT cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int device)
{
    Lock l(g_mu);
    cudaError_t e = ready();
    if (e != cudaSuccess)
        return fail(e);
    if (!p)
        return fail(cudaErrorInvalidValue);
    if (bad_device(device))
        return fail(cudaErrorInvalidDevice);
    const Device &d = g_dev[device];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "cudasim device %d (sm_%d%d, simulated)", d.physical, d.major, d.minor);
    p->totalGlobalMem = d.total;
    p->sharedMemPerBlock = kDefaultSmem;
    p->regsPerBlock = 65536;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
    p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647;
    p->maxGridSize[1] = p->maxGridSize[2] = 65535;
    p->totalConstMem = 65536;
    p->major = d.major;
    p->minor = d.minor;
    p->multiProcessorCount = 132;
    p->concurrentKernels = 1;
    p->pciBusID = d.physical + 1;
    p->unifiedAddressing = 1;
    p->canMapHostMemory = 1;
    p->sharedMemPerBlockOptin = smem_optin(d);
    p->memoryPoolsSupported = 1;
    return cudaSuccess;
}

CUDASIM_EXPORT cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
    struct cudaDeviceProp p;
    cudaError_t e = value ? cudaGetDeviceProperties(&p, device) : fail(cudaErrorInvalidValue);
    if (e != cudaSuccess)
        return e;
    switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxBlockDimX: *value = p.maxThreadsDim[0]; break;
    case cudaDevAttrMaxBlockDimY: *value = p.maxThreadsDim[1]; break;
    case cudaDevAttrMaxBlockDimZ: *value = p.maxThreadsDim[2]; break;
    case cudaDevAttrMaxGridDimX: *value = p.maxGridSize[0]; break;
    case cudaDevAttrMaxGridDimY: *value = p.maxGridSize[1]; break;
    case cudaDevAttrMaxGridDimZ: *value = p.maxGridSize[2]; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = (int)p.sharedMemPerBlock; break;
    case cudaDevAttrWarpSize: *value = p.warpSize; break;
    case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
    case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = (int)p.sharedMemPerBlockOptin; break;
    case cudaDevAttrMemoryPoolsSupported: *value = p.memoryPoolsSupported; break;
    default: return fail(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

CUDASIM_EXPORT cudaError_t cudaSetDevice(int device)
{
    Lock l(g_mu);
    cudaError_t e = ready();
    if (e != cudaSuccess)
        return fail(e);
    if (bad_device(device))
        return fail(cudaErrorInvalidDevice);
    t_dev = device;
    return cudaSuccess;
}

CUDASIM_EXPORT cudaError_t cudaGetDevice(int *device)
{
    Lock l(g_mu);
    cudaError_t e = ready();
    if (e != cudaSuccess)
        return fail(e);
    if (!device)
        return fail(cudaErrorInvalidValue);
    *device = t_dev;
    return cudaSuccess;
}

CUDASIM_EXPORT cudaError_t cudaDeviceSynchronize(void)
{
    Lock l(g_mu);
    cudaError_t e = ready();
    if (e != cudaSuccess)
        return fail(e);
    if (capture_forbids("cudaDeviceSynchronize"))
        return fail(cudaErrorStreamCaptureUnsupported);
    g_counts.host_syncs++;
    drain(t_dev, false);
    return fail(g_sticky);
}

CUDASIM_EXPORT cudaError_t cudaDeviceReset(void)
{
    Lock l(g_mu);
    cudaError_t e = ready();
    if (e != cudaSuccess)
        return fail(e);
    drain(t_dev, false);
    for (auto &kv : g_allocs)
        if (kv.second.live && kv.second.device == t_dev)
            release(kv.second);
    Device &d = g_dev[t_dev];
    for (Stream *s : d.streams) {
        g_streams.erase(s->id);
        g_stream_ids.erase(s);
        delete s;
    }
    d.streams.clear();
    for (auto it = g_events.begin(); it != g_events.end();)
        if (it->first->device == t_dev) {
            delete it->first;
            it = g_events.erase(it);
        } else {
            ++it;
        }
    memset(d.peer, 0, sizeof d.peer);
    g_func_smem.clear();
    return cudaSuccess;
}

CUDASIM_EXPORT cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    Lock l(g_mu);
    cudaError_t e = ready();
    if (e != cudaSuccess)
        return fail(e);
    if (!free_bytes || !total_bytes)
        return fail(cudaErrorInvalidValue);
    *total_bytes = g_dev[t_dev].total;
    *free_bytes = g_dev[t_dev].total - g_dev[t_dev].used - g_dev[t_dev].graph_bytes;
    return cudaSuccess;
}

CUDASIM_EXPORT cudaError_t cudaDeviceCanAccessPeer(int *can, int device, int peer)
{
    Lock l(g_mu);
    cudaError_t e = ready();
    if (e != cudaSuccess)
        return fail(e);
    if (!can)
        return fail(cudaErrorInvalidValue);
    if (bad_device(device) || bad_device(peer))
        return fail(cudaErrorInvalidDevice);
    *can = device != peer && g_peer_ok;
    return cudaSuccess;
}

CUDASIM_EXPORT cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags)
{
    Lock l(g_mu);
    cudaError_t e = ready();
    if (e != cudaSuccess)
        return fail(e);
    if (flags != 0)
        return fail(cudaErrorInvalidValue);
    if (bad_device(peer) || peer == t_dev)
        return fail(cudaErrorInvalidDevice);
    if (!g_peer_ok)
        return fail(cudaErrorPeerAccessUnsupported);
    if (g_dev[t_dev].peer[peer])
        return fail(cudaErrorPeerAccessAlreadyEnabled);
    g_dev[t_dev].peer[peer] = true;
    return cudaSuccess;
}

CUDASIM_EXPORT cudaError_t cudaDeviceDisablePeerAccess(int peer)
{
    Lock l(g_mu);
    cudaError_t e = ready();
    if (e != cudaSuccess)
        return fail(e);
    if (bad_device(peer) || peer == t_dev)
        return fail(cudaErrorInvalidDevice);
    if (!g_dev[t_dev].peer[peer])
        return fail(cudaErrorPeerAccessNotEnabled);
    g_dev[t_dev].peer[peer] = false;
    return cudaSuccess;
}

CUDASIM_EXPORT cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value)
{
    Lock l(g_mu);
    cudaError_t e = ready();
    if (e != cudaSuccess)
        return fail(e);
    if (!func)
        return fail(cudaErrorInvalidDeviceFunction);
    if (attr == cudaFuncAttributePreferredSharedMemoryCarveout)
        return value >= -1 && value <= 100 ? cudaSuccess : fail(cudaErrorInvalidValue);
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize)
        return fail(cudaErrorInvalidValue);
    if (value < 0 || (size_t)value > smem_optin(g_dev[t_dev])) {
        report("cudaFuncSetAttribute: %d bytes of dynamic shared memory is over cuda:%d's opt-in limit of %zu", value,
               t_dev, smem_optin(g_dev[t_dev]));
        return fail(cudaErrorInvalidValue);
    }
    g_func_smem[func] = value;
    return cudaSuccess;
}

/* ---------------------------------------------------------------- memory */

CUDASIM_EXPORT cudaError_t cudaMalloc(void **p, size_t size)
{
    Lock l(g_mu);
    cudaError_t e = ready();
    if (e != cudaSuccess)
        return fail(e);
    if (!p)
        return fail(cudaErrorInvalidValue);
    *p = NULL;
    if (capture_forbids("cudaMalloc"))
        return fail(cudaErrorStreamCaptureUnsupported);
    if (size == 0)
        return cudaSuccess; // as the toolkit: success and NULL
    return fail(device_alloc(t_dev, size, p));
}

CUDASIM_EXPORT cudaError_t cudaFree(void *p)
{
    Lock l(g_mu);
    cudaError_t e = ready();
    if (e != cudaSuccess)
        return fail(e);
    if (!p)
        return cudaSuccess;
    if (capture_forbids("cudaFree"))
        return fail(cudaErrorStreamCaptureUnsupported);
    Alloc *al = alloc_to_free(p, "cudaFree");
    if (!al)
        return fail(cudaErrorInvalidValue);
    g_counts.host_syncs++;
    drain(al->device, false); // cudaFree waits for the device's work
    release(*al);
    return cudaSuccess;
}

CUDASIM_EXPORT cudaError_t cudaMallocAsync(void **p, size_t size, cudaStream_t stream)
{
    Lock l(g_mu);
    cudaError_t e = ready();
    if (e != cudaSuccess)
        return fail(e);
    Stream *s;
    if (!p)
        return fail(cudaErrorInvalidValue);
    if ((e = resolve(stream, &s)) != cudaSuccess)
        return fail(e);
    *p = NULL;
    return size ? fail(device_alloc(s->device, size, p)) : cudaSuccess;
}

CUDASIM_EXPORT cudaError_t cudaFreeAsync(void *p, cudaStream_t stream)
{
    Lock l(g_mu);
    cudaError_t e = ready();
    if (e != cudaSuccess)
        return fail(e);
    Stream *s;
    if ((e = resolve(stream, &s)) != cudaSuccess)
        return fail(e);
    if (!p)
        return cudaSuccess;
    Alloc *al = alloc_to_free(p, "cudaFreeAsync");
    if (!al)
        return fail(cudaErrorInvalidValue);
    al->free_queued = true;
    uintptr_t base = al->base;
    enqueue(s, Op{"cudaFreeAsync", [base] {
                      auto it = g_allocs.find(base);
                      if (it != g_allocs.end() && it->second.live)
                          release(it->second);
                  }});
    return cudaSuccess;
}

CUDASIM_EXPORT cudaError_t cudaMallocHost(void **p, size_t size)
{
    Lock l(g_mu);
    cudaError_t e = ready();
    if (e != cudaSuccess)
        return fail(e);
    if (!p)
        return fail(cudaErrorInvalidValue);
    *p = NULL;
    if (capture_forbids("cudaMallocHost"))
        return fail(cudaErrorStreamCaptureUnsupported);
    if (size == 0)
        return cudaSuccess;
    g_pinned_allocs++;
    size_t mapped = round_up(size, kPage);
    void *m = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return fail(cudaErrorMemoryAllocation);
    g_pinned[(uintptr_t)m] = Pinned{(uintptr_t)m, size, mapped, t_dev};
    *p = m;
    return cudaSuccess;
}

CUDASIM_EXPORT cudaError_t cudaHostAlloc(void **p, size_t size, unsigned int flags)
{
    (void)flags;
    return cudaMallocHost(p, size);
}

CUDASIM_EXPORT cudaError_t cudaFreeHost(void *p)
{
    Lock l(g_mu);
    cudaError_t e = ready();
    if (e != cudaSuccess)
        return fail(e);
    if (!p)
        return cudaSuccess;
    auto it = g_pinned.find((uintptr_t)p);
    if (it == g_pinned.end()) {
        report("cudaFreeHost(%p): not a block from cudaMallocHost: %s", p, describe(p).c_str());
        return fail(cudaErrorInvalidValue);
    }
    if (capture_forbids("cudaFreeHost"))
        return fail(cudaErrorStreamCaptureUnsupported);
    g_counts.host_syncs++;
    for (size_t d = 0; d < g_dev.size(); d++) // queued copies may still use it
        drain((int)d, false);
    munmap(p, it->second.mapped);
    g_pinned.erase(it);
    return cudaSuccess;
}

CUDASIM_EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
    Lock l(g_mu);
    cudaError_t e = ready();
    if (e != cudaSuccess)
        return fail(e);
    e = memcpy_impl("cudaMemcpy", dst, src, n, kind, null_stream(t_dev));
    return fail(e == cudaSuccess ? g_sticky : e);
}

CUDASIM_EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                                           cudaStream_t stream)
{
    Lock l(g_mu);
    cudaError_t e = ready();
    if (e != cudaSuccess)
        return fail(e);
    Stream *s;
    if ((e = resolve(stream, &s)) != cudaSuccess)
        return fail(e);
    e = memcpy_impl("cudaMemcpyAsync", dst, src, n, kind, s);
    return fail(e == cudaSuccess ? g_sticky : e);
}

static cudaError_t peer_copy(const char *api, void *dst, int dd, const void *src, int sd, size_t n, Stream *s)
{
    if (bad_device(dd) || bad_device(sd))
        return cudaErrorInvalidDevice;
    if (n == 0)
        return cudaSuccess;
    int wd, ws;
    if (where(dst, n, &wd) != Where::Device || wd != dd || where(src, n, &ws) != Where::Device || ws != sd) {
        report("%s of %zu bytes from cuda:%d to cuda:%d: destination %s; source %s", api, n, sd, dd,
               describe(dst).c_str(), describe(src).c_str());
        return cudaErrorInvalidValue;
    }
    char what[160];
    snprintf(what, sizeof what, "%s of %zu bytes to %p (cuda:%d) from %p (cuda:%d)", api, n, dst, dd, src, sd);
    if (!s && capture_forbids(api))
        return cudaErrorStreamCaptureUnsupported;
    if (s && capture_injected(s, api))
        return cudaErrorStreamCaptureUnsupported;
    g_counts.copies++;
    if (!s) { // synchronous: after the work of both devices' blocking streams
        g_counts.host_syncs++;
        drain(sd, true);
        drain(dd, true);
        DeviceAccess open;
        memcpy(dst, src, n);
        return cudaSuccess;
    }
    enqueue(s, Op{what, [dst, src, n] { memcpy(dst, src, n); }, true});
    return cudaSuccess;
}

CUDASIM_EXPORT cudaError_t cudaMemcpyPeer(void *dst, int dd, const void *src, int sd, size_t n)
{
    Lock l(g_mu);
    cudaError_t e = ready();
    if (e != cudaSuccess)
        return fail(e);
    return fail(peer_copy("cudaMemcpyPeer", dst, dd, src, sd, n, NULL));
}

CUDASIM_EXPORT cudaError_t cudaMemcpyPeerAsync(void *dst, int dd, const void *src, int sd, size_t n,
                                               cudaStream_t stream)
{
    Lock l(g_mu);
    cudaError_t e = ready();
    if (e != cudaSuccess)
        return fail(e);
    Stream *s;
    if ((e = resolve(stream, &s)) != cudaSuccess)
        return fail(e);
    return fail(peer_copy("cudaMemcpyPeerAsync", dst, dd, src, sd, n, s));
}

CUDASIM_EXPORT cudaError_t cudaMemset(void *p, int value, size_t n)
{
    Lock l(g_mu);
    cudaError_t e = ready();
    if (e != cudaSuccess)
        return fail(e);
    g_counts.host_syncs++;
    return fail(memset_impl("cudaMemset", p, value, n, null_stream(t_dev)));
}

CUDASIM_EXPORT cudaError_t cudaMemsetAsync(void *p, int value, size_t n, cudaStream_t stream)
{
    Lock l(g_mu);
    cudaError_t e = ready();
    if (e != cudaSuccess)
        return fail(e);
    Stream *s;
    if ((e = resolve(stream, &s)) != cudaSuccess)
        return fail(e);
    return fail(memset_impl("cudaMemsetAsync", p, value, n, s));
}

CUDASIM_EXPORT cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p)
{
    Lock l(g_mu);
    cudaError_t e = ready();
    if (e != cudaSuccess)
        return fail(e);
    if (!a)
        return fail(cudaErrorInvalidValue);
    memset(a, 0, sizeof *a);
    int d;
    switch (where(p, 0, &d)) {
    case Where::Device:
        a->type = cudaMemoryTypeDevice;
        a->device = d;
        a->devicePointer = (void *)p;
        break;
    case Where::Pinned:
        a->type = cudaMemoryTypeHost;
        a->device = d;
        a->devicePointer = a->hostPointer = (void *)p;
        break;
    default: // pageable host memory, or freed device memory
        a->type = cudaMemoryTypeUnregistered;
        a->device = -1;
        break;
    }
    return cudaSuccess;
}

/* ---------------------------------------------------------------- streams */

CUDASIM_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *out, unsigned int flags)
{
    Lock l(g_mu);
    cudaError_t e = ready();
    if (e != cudaSuccess)
        return fail(e);
    if (!out || (flags & ~1u))
        return fail(cudaErrorInvalidValue);
    Stream *s = new Stream{g_next_id++, t_dev, flags, false, {}, 0, 0, false};
    g_streams[s->id] = s;
    g_stream_ids[s] = s->id;
    g_dev[t_dev].streams.push_back(s);
    *out = (cudaStream_t)s;
    return cudaSuccess;
}

CUDASIM_EXPORT cudaError_t cudaStreamCreate(cudaStream_t *out) { return cudaStreamCreateWithFlags(out, 0); }

CUDASIM_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t h)
{
    Lock l(g_mu);
    cudaError_t e = ready();
    if (e != cudaSuccess)
        return fail(e);
    Stream *s;
    if (!h || h == cudaStreamLegacy || h == cudaStreamPerThread)
        return fail(cudaErrorInvalidResourceHandle);
    if ((e = resolve(h, &s)) != cudaSuccess)
        return fail(e);
    if (s->cap && s->cap->origin == s) { // a capture in progress ends with its origin
        capture_close(s->cap);
    } else if (s->cap) { // a member leaves: what it forked is lost
        s->cap->invalid = true;
        s->cap->members.erase(std::remove(s->cap->members.begin(), s->cap->members.end(), s), s->cap->members.end());
        s->cap = nullptr;
    }
    flush(s); // its work completes, then it goes
    std::vector<Stream *> &v = g_dev[s->device].streams;
    v.erase(std::remove(v.begin(), v.end(), s), v.end());
    g_streams.erase(s->id);
    g_stream_ids.erase(s);
    delete s;
    return cudaSuccess;
}

CUDASIM_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t h)
{
    Lock l(g_mu);
    cudaError_t e = ready();
    if (e != cudaSuccess)
        return fail(e);
    Stream *s;
    if ((e = resolve(h, &s)) != cudaSuccess)
        return fail(e);
    if (capture_refuses(s, "cudaStreamSynchronize", "the host cannot wait for a capture") ||
        capture_forbids("cudaStreamSynchronize"))
        return fail(cudaErrorStreamCaptureUnsupported);
    g_counts.host_syncs++;
    if (s->is_null)
        drain(s->device, true);
    flush(s);
    return fail(g_sticky); // a kernel that faulted while the host waited
}

CUDASIM_EXPORT cudaError_t cudaStreamQuery(cudaStream_t h)
{
    return cudaStreamSynchronize(h); // the work "finished" by the time the host asks
}

CUDASIM_EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t h, cudaEvent_t ev, unsigned int flags)
{
    Lock l(g_mu);
    cudaError_t e = ready();
    if (e != cudaSuccess)
        return fail(e);
    Stream *s;
    Event *v;
    if ((e = resolve(h, &s)) != cudaSuccess || (e = check_event(ev, &v)) != cudaSuccess)
        return fail(e);
    if (flags != 0)
        return fail(cudaErrorInvalidValue);
    if (v->cap && !v->cap->ended) { // an event of a capture: a dependency inside it
        std::shared_ptr<Capture> c = v->cap;
        if (s->cap && s->cap != c) {
            report("cudaStreamWaitEvent: the stream is capturing, and the event was recorded in another capture "
                   "(cudaErrorStreamCaptureIsolation); both captures are invalidated");
            s->cap->invalid = c->invalid = true;
            return fail(cudaErrorStreamCaptureIsolation);
        }
        if (!s->cap) { // the capture forks into s
            if (s->is_null) {
                report("cudaStreamWaitEvent: the legacy NULL stream cannot join a capture (cudaErrorStreamCaptureImplicit); "
                       "the capture is invalidated");
                c->invalid = true;
                return fail(cudaErrorStreamCaptureImplicit);
            }
            s->cap = c;
            c->members.push_back(s);
        }
        if (s == c->origin && v->cap_stream != s)
            c->joined[v->cap_stream] = std::max(c->joined[v->cap_stream], v->cap_count);
        return cudaSuccess;
    }
    if (capture_refuses(s, "cudaStreamWaitEvent",
                        "the event was not recorded in this capture (a dependency across its boundary, "
                        "cudaErrorStreamCaptureIsolation)"))
        return fail(cudaErrorStreamCaptureIsolation);
    if (!v->stream || v->stream == s->id)
        return cudaSuccess;
    uint64_t src = v->stream, seq = v->seq;
    enqueue(s, Op{"cudaStreamWaitEvent", [src, seq] {
                      auto it = g_streams.find(src);
                      if (it != g_streams.end())
                          flush(it->second, seq);
                  }});
    return cudaSuccess;
}

CUDASIM_EXPORT cudaError_t cudaLaunchHostFunc(cudaStream_t h, cudaHostFn_t fn, void *data)
{
    Lock l(g_mu);
    cudaError_t e = ready();
    if (e != cudaSuccess)
        return fail(e);
    Stream *s;
    if ((e = resolve(h, &s)) != cudaSuccess)
        return fail(e);
    if (!fn)
        return fail(cudaErrorInvalidValue);
    if (capture_injected(s, "cudaLaunchHostFunc"))
        return fail(cudaErrorStreamCaptureUnsupported);
    enqueue(s, Op{"cudaLaunchHostFunc", [fn, data] { fn(data); }});
    return cudaSuccess;
}

/* ---------------------------------------------------------------- graphs (stream capture) */

CUDASIM_EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t h, enum cudaStreamCaptureMode mode)
{
    Lock l(g_mu);
    cudaError_t e = ready();
    if (e != cudaSuccess)
        return fail(e);
    Stream *s;
    if ((e = resolve(h, &s)) != cudaSuccess)
        return fail(e);
    if ((int)mode < 0 || (int)mode > 2)
        return fail(cudaErrorInvalidValue);
    if (s->is_null) {
        report("cudaStreamBeginCapture: the legacy NULL stream cannot be captured");
        return fail(cudaErrorStreamCaptureUnsupported);
    }
    if (s->cap) {
        report("cudaStreamBeginCapture: the stream is already capturing");
        return fail(cudaErrorIllegalState);
    }
    s->cap = std::make_shared<Capture>();
    s->cap->mode = mode;
    s->cap->thread = pthread_self();
    s->cap->origin = s;
    s->cap->members.push_back(s);
    if (mode == cudaStreamCaptureModeGlobal)
        g_captures_global++;
    if (mode != cudaStreamCaptureModeRelaxed)
        t_captures++;
    return cudaSuccess;
}

CUDASIM_EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t h, cudaGraph_t *out)
{
    Lock l(g_mu);
    cudaError_t e = ready();
    if (e != cudaSuccess)
        return fail(e);
    Stream *s;
    if ((e = resolve(h, &s)) != cudaSuccess)
        return fail(e);
    if (!out)
        return fail(cudaErrorInvalidValue);
    *out = NULL;
    if (!s->cap) {
        report("cudaStreamEndCapture: the stream is not capturing");
        return fail(cudaErrorIllegalState);
    }
    std::shared_ptr<Capture> c = s->cap;
    if (c->origin != s) {
        report("cudaStreamEndCapture: the stream joined a capture another stream began, on which it must end "
               "(cudaErrorStreamCaptureUnmatched); the capture is invalidated");
        c->invalid = true;
        return fail(cudaErrorStreamCaptureUnmatched);
    }
    if (!pthread_equal(c->thread, pthread_self()) && c->mode != cudaStreamCaptureModeRelaxed) {
        report("cudaStreamEndCapture: called from another thread than cudaStreamBeginCapture");
        return fail(cudaErrorStreamCaptureWrongThread);
    }
    capture_close(c);
    if (c->invalid)
        return fail(cudaErrorStreamCaptureInvalidated);
    for (Stream *m : c->members)
        if (m != s && c->queued[m] > c->joined[m]) {
            report("cudaStreamEndCapture: the capture forked into a stream of cuda:%d whose last %llu operations were "
                   "not joined back into the origin stream (cudaErrorStreamCaptureUnjoined)",
                   m->device, (unsigned long long)(c->queued[m] - c->joined[m]));
            return fail(cudaErrorStreamCaptureUnjoined);
        }
    if (g_capfail_end && (g_capfail_end < 0 || ++g_capfail_end_seen == g_capfail_end)) {
        report("cudaStreamEndCapture: fails as CUDASIM_CAPTURE_FAIL=end asks (cudaErrorStreamCaptureInvalidated)");
        return fail(cudaErrorStreamCaptureInvalidated);
    }
    Graph *g = new Graph{s->device, std::move(c->ops)};
    g_graphs.insert(g);
    *out = (cudaGraph_t)g;
    return cudaSuccess;
}

CUDASIM_EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t h, enum cudaStreamCaptureStatus *status)
{
    Lock l(g_mu);
    cudaError_t e = ready();
    if (e != cudaSuccess)
        return fail(e);
    Stream *s;
    if ((e = resolve(h, &s)) != cudaSuccess)
        return fail(e);
    if (!status)
        return fail(cudaErrorInvalidValue);
    *status = !s->cap ? cudaStreamCaptureStatusNone
              : s->cap->invalid ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

CUDASIM_EXPORT cudaError_t cudaGraphInstantiate(cudaGraphExec_t *out, cudaGraph_t graph, unsigned long long flags)
{
    Lock l(g_mu);
    cudaError_t e = ready();
    if (e != cudaSuccess)
        return fail(e);
    Graph *g = (Graph *)graph;
    if (!out || !g_graphs.count(g) || flags != 0)
        return fail(cudaErrorInvalidValue);
    Device &d = g_dev[g->device];
    const size_t charge = graph_charge(g->ops.size());
    if (charge > d.total - d.used - d.graph_bytes) {
        report("cudaGraphInstantiate: the graph's %zu operations need %zu bytes of cuda:%d, %zu free", g->ops.size(),
               charge, g->device, d.total - d.used - d.graph_bytes);
        return fail(cudaErrorMemoryAllocation);
    }
    Graph *x = new Graph{g->device, g->ops, charge};
    d.graph_bytes += charge;
    g_execs.insert(x);
    *out = (cudaGraphExec_t)x;
    return cudaSuccess;
}

namespace {
/* What an operation is, for cudaGraphExecUpdate: a kernel's name, or the API that queued it. */
std::string op_kind(const Op &op)
{
    size_t k = op.what.find(" of ");
    return k == std::string::npos ? op.what : op.what.substr(0, k);
}
} // namespace

CUDASIM_EXPORT cudaError_t cudaGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph,
                                               cudaGraphExecUpdateResultInfo *info)
{
    Lock l(g_mu);
    cudaError_t e = ready();
    if (e != cudaSuccess)
        return fail(e);
    Graph *x = (Graph *)exec, *g = (Graph *)graph;
    if (!g_execs.count(x) || !g_graphs.count(g) || !info)
        return fail(cudaErrorInvalidValue);
    memset(info, 0, sizeof *info);
    // as CUDA: the same topology (here, the same sequence), node types and kernels; only
    // parameters (pointers, sizes, launch configurations) may change
    bool same = x->device == g->device && x->ops.size() == g->ops.size();
    for (size_t i = 0; same && i < g->ops.size(); i++)
        same = op_kind(x->ops[i]) == op_kind(g->ops[i]);
    if (!same) {
        info->result = x->ops.size() != g->ops.size() ? cudaGraphExecUpdateErrorTopologyChanged
                                                      : cudaGraphExecUpdateErrorFunctionChanged;
        return fail(cudaErrorGraphExecUpdateFailure);
    }
    x->ops = g->ops;
    info->result = cudaGraphExecUpdateSuccess;
    return cudaSuccess;
}

CUDASIM_EXPORT cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t h)
{
    Lock l(g_mu);
    cudaError_t e = ready();
    if (e != cudaSuccess)
        return fail(e);
    Graph *x = (Graph *)exec;
    Stream *s;
    if (!g_execs.count(x))
        return fail(cudaErrorInvalidValue);
    if ((e = resolve(h, &s)) != cudaSuccess)
        return fail(e);
    if (s->device != x->device) {
        report("cudaGraphLaunch: a graph of cuda:%d launched into a stream of cuda:%d", x->device, s->device);
        return fail(cudaErrorInvalidResourceHandle);
    }
    if (capture_refuses(s, "cudaGraphLaunch", "the simulator does not capture graph launches"))
        return fail(cudaErrorStreamCaptureUnsupported);
    for (const Op &op : x->ops)
        enqueue(s, op);
    g_counts.graph_launches++;
    return cudaSuccess;
}

CUDASIM_EXPORT cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec)
{
    Lock l(g_mu);
    Graph *x = (Graph *)exec;
    if (!g_execs.erase(x))
        return fail(cudaErrorInvalidValue);
    g_dev[x->device].graph_bytes -= x->charge;
    delete x; // operations queued by a launch hold their own copies
    return cudaSuccess;
}

CUDASIM_EXPORT cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
    Lock l(g_mu);
    Graph *g = (Graph *)graph;
    if (!g_graphs.erase(g))
        return fail(cudaErrorInvalidValue);
    delete g;
    return cudaSuccess;
}

CUDASIM_EXPORT int cudasim_stream_capturing(cudaStream_t h)
{
    Lock l(g_mu);
    Stream *s;
    if (ready() != cudaSuccess || resolve(h, &s) != cudaSuccess)
        return 0;
    return s->cap != nullptr;
}

/* ---------------------------------------------------------------- events */

CUDASIM_EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *out, unsigned int flags)
{
    Lock l(g_mu);
    cudaError_t e = ready();
    if (e != cudaSuccess)
        return fail(e);
    if (!out || (flags & ~3u))
        return fail(cudaErrorInvalidValue);
    Event *v = new Event{t_dev, flags};
    g_events[v] = true;
    *out = (cudaEvent_t)v;
    return cudaSuccess;
}

CUDASIM_EXPORT cudaError_t cudaEventCreate(cudaEvent_t *out) { return cudaEventCreateWithFlags(out, 0); }

CUDASIM_EXPORT cudaError_t cudaEventDestroy(cudaEvent_t ev)
{
    Lock l(g_mu);
    Event *v;
    cudaError_t e = check_event(ev, &v);
    if (e != cudaSuccess)
        return fail(e);
    g_events.erase(v);
    delete v;
    return cudaSuccess;
}

CUDASIM_EXPORT cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t h)
{
    Lock l(g_mu);
    cudaError_t e = ready();
    if (e != cudaSuccess)
        return fail(e);
    Stream *s;
    Event *v;
    if ((e = check_event(ev, &v)) != cudaSuccess || (e = resolve(h, &s)) != cudaSuccess)
        return fail(e);
    if (v->device != s->device) {
        report("cudaEventRecord: the event belongs to cuda:%d, the stream to cuda:%d", v->device, s->device);
        return fail(cudaErrorInvalidResourceHandle);
    }
    uint64_t gen = ++v->gen;
    if (s->cap) { // a point of the capture, for cudaStreamWaitEvent: no operation of its own
        v->cap = s->cap;
        v->cap_stream = s;
        v->cap_count = s->cap->queued[s];
        v->stream = 0;
        v->stamped = false;
        return cudaSuccess;
    }
    v->cap = nullptr;
    v->stream = s->id;
    v->stamped = false;
    enqueue(s, Op{"cudaEventRecord", [v, gen] {
                      if (g_events.count(v) && v->gen == gen) {
                          v->stamped = true;
                          v->ms = now_ms();
                      }
                  }});
    v->seq = s->enq;
    return cudaSuccess;
}

CUDASIM_EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t ev)
{
    Lock l(g_mu);
    Event *v;
    cudaError_t e = check_event(ev, &v);
    if (e != cudaSuccess)
        return fail(e);
    if (capture_forbids("cudaEventSynchronize"))
        return fail(cudaErrorStreamCaptureUnsupported);
    auto it = g_streams.find(v->stream);
    g_counts.host_syncs++;
    if (v->stream && it != g_streams.end())
        flush(it->second, v->seq);
    return fail(g_sticky);
}

CUDASIM_EXPORT cudaError_t cudaEventQuery(cudaEvent_t ev) { return cudaEventSynchronize(ev); }

CUDASIM_EXPORT cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    Lock l(g_mu);
    Event *x, *y;
    cudaError_t e;
    if ((e = check_event(a, &x)) != cudaSuccess || (e = check_event(b, &y)) != cudaSuccess)
        return fail(e);
    if (!ms)
        return fail(cudaErrorInvalidValue);
    if ((x->flags | y->flags) & cudaEventDisableTiming || x->device != y->device)
        return fail(cudaErrorInvalidResourceHandle);
    if (!x->stream || !y->stream)
        return fail(cudaErrorInvalidResourceHandle);
    if (!event_complete(x) || !event_complete(y) || !x->stamped || !y->stamped)
        return cudaErrorNotReady;
    *ms = (float)(y->ms - x->ms);
    return cudaSuccess;
}

/* ---------------------------------------------------------------- kernels */

CUDASIM_EXPORT void cudasim_launch_kernel(const char *name, const void *func, dim3 grid, dim3 block, size_t shmem,
                                          cudaStream_t stream, const cudasim_arg *args, int nargs,
                                          void (*run)(void *), void *closure, void (*drop)(void *),
                                          char *shared_lo, char *shared_hi)
{
    Lock l(g_mu);
    Stream *s = NULL;
    auto refuse = [&](cudaError_t e) {
        drop(closure);
        if (s && s->cap) // a launch error during capture invalidates it, as on a GPU
            s->cap->invalid = true;
        fail(e);
    };
    cudaError_t e = ready();
    if (e != cudaSuccess || (e = resolve(stream, &s)) != cudaSuccess)
        return refuse(e);
    const int dev = t_dev;
    if (s->device != dev) {
        report("kernel '%s': launched on cuda:%d into a stream of cuda:%d", name, dev, s->device);
        return refuse(cudaErrorInvalidResourceHandle);
    }
    uint64_t threads = (uint64_t)block.x * block.y * block.z;
    if (!block.x || !block.y || !block.z || block.x > 1024 || block.y > 1024 || block.z > 64 || threads > 1024 ||
        !grid.x || !grid.y || !grid.z || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535) {
        report("kernel '%s': invalid launch configuration: grid (%u,%u,%u), block (%u,%u,%u) (a block holds at most "
               "1024 threads and (1024,1024,64); a grid is at least 1 and at most (2147483647,65535,65535))",
               name, grid.x, grid.y, grid.z, block.x, block.y, block.z);
        return refuse(cudaErrorInvalidConfiguration);
    }
    auto opt = g_func_smem.find(func);
    size_t limit = opt != g_func_smem.end() ? (size_t)opt->second : kDefaultSmem;
    if (shmem > limit) {
        report("kernel '%s': %zu bytes of dynamic shared memory, over the %zu-byte limit%s", name, shmem, limit,
               opt != g_func_smem.end() ? " set by cudaFuncSetAttribute"
                                        : " (more needs cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize))");
        return refuse(cudaErrorInvalidValue);
    }
    for (int i = 0; i < nargs; i++) {
        if (!args[i].is_pointer || !args[i].ptr)
            continue;
        if (args[i].align > 1 && (uintptr_t)args[i].ptr % args[i].align) {
            report("kernel '%s' on cuda:%d: pointer argument %d (%p) is not aligned to the %zu bytes of its type", name,
                   dev, i + 1, args[i].ptr, args[i].align);
            return refuse(cudaErrorMisalignedAddress);
        }
        int d;
        Where w = where(args[i].ptr, 0, &d);
        if (w == Where::Pinned || (w == Where::Device && (d == dev || g_dev[dev].peer[d])))
            continue;
        report("kernel '%s' on cuda:%d: pointer argument %d is %s%s", name, dev, i + 1, describe(args[i].ptr).c_str(),
               w == Where::Device ? ", and peer access to it is not enabled" : "");
        return refuse(cudaErrorIllegalAddress);
    }
    if (capture_injected(s, (std::string("kernel ") + name).c_str()))
        return refuse(cudaErrorStreamCaptureUnsupported);
    auto L = std::make_shared<Launch>();
    L->name = name;
    L->device = dev;
    L->grid = grid;
    L->block = block;
    L->nthreads = (int)threads;
    L->run = run;
    L->closure = closure;
    L->drop = drop;
    L->shared_lo = shared_lo;
    L->shared_hi = shared_hi;
    enqueue(s, Op{std::string("kernel ") + name, [L] { execute(L.get()); }, true});
    g_counts.launches++;
    trace("kernel", name);
}

CUDASIM_EXPORT int cudasim_barrier(int kind, int pred, const char *file, int line)
{
    SimThread *t = g_self;
    if (!t)
        die("__syncthreads called outside a kernel (%s:%d)", file, line);
    t->state = ST_BAR;
    t->bar_kind = kind;
    t->bar_pred = pred;
    t->file = file;
    t->line = line;
    switch_out(t);
    return t->bar_result;
}

CUDASIM_EXPORT unsigned cudasim_activemask(void)
{
    SimThread *t = g_self;
    if (!t)
        return 0;
    unsigned m = 0;
    int base = t->lin & ~31;
    for (int l = 0; l < 32 && base + l < g_kernel->nthreads; l++)
        if (g_th[base + l].state != ST_DONE)
            m |= 1u << l;
    return m;
}

CUDASIM_EXPORT unsigned long long cudasim_warp(int op, unsigned mask, unsigned long long value, int arg, int width,
                                               const char *name, const char *file, int line)
{
    SimThread *t = g_self;
    if (!t)
        die("%s called outside a kernel (%s:%d)", name, file, line);
    const int lane = t->lin & 31, base = t->lin & ~31, n = g_kernel->nthreads;
    if (!(mask >> lane & 1u))
        die("%s: %s (%s:%d) with mask 0x%08x, which leaves out the calling lane %d", where_kernel().c_str(), name, file,
            line, mask, lane);
    if (width < 1 || width > 32 || (width & (width - 1)))
        die("%s: %s (%s:%d) with width %d (a power of 2 up to 32)", where_kernel().c_str(), name, file, line, width);
    for (int l = 0; l < 32; l++)
        if ((mask >> l & 1u) && base + l >= n)
            die("%s: %s (%s:%d) with mask 0x%08x names lane %d, which does not exist (the block has %d threads)",
                where_kernel().c_str(), name, file, line, mask, l, n);
    t->state = ST_WARP;
    t->wop = op;
    t->wmask = mask;
    t->win = value;
    t->warg = arg;
    t->wwidth = width;
    t->wname = name;
    t->file = file;
    t->line = line;
    for (int l = 0; l < 32; l++) {
        const SimThread &u = g_th[base + l];
        if ((mask >> l & 1u) && (u.state != ST_WARP || u.wmask != mask)) {
            switch_out(t); // the last lane to arrive completes the collective and wakes the others
            return t->wout;
        }
    }
    // every lane of the mask is here: compute each one's result (the PTX rules of shfl.sync)
    unsigned ballot = 0;
    unsigned long long sum = 0, umin = ~0ull, umax = 0;
    long long smin = INT64_MAX, smax = INT64_MIN;
    for (int l = 0; l < 32; l++) {
        const SimThread &u = g_th[base + l];
        if (!(mask >> l & 1u))
            continue;
        if (u.wop != op || u.wwidth != width)
            die("%s: lanes of one warp meet at different warp intrinsics with mask 0x%08x: lane %d at %s (%s:%d), "
                "lane %d at %s (%s:%d)",
                where_kernel().c_str(), mask, lane, name, file, line, l, u.wname, u.file, u.line);
        ballot |= (u.win != 0) << l;
        sum += (unsigned)u.win;
        umin = std::min(umin, (unsigned long long)(unsigned)u.win);
        umax = std::max(umax, (unsigned long long)(unsigned)u.win);
        smin = std::min(smin, (long long)(int)(unsigned)u.win);
        smax = std::max(smax, (long long)(int)(unsigned)u.win);
    }
    for (int l = 0; l < 32; l++) {
        SimThread &u = g_th[base + l];
        if (!(mask >> l & 1u))
            continue;
        const int seg = 32 - width, lo = l & seg, hi = lo | (31 & ~seg), b = u.warg & 31;
        int j = l;
        switch (op) {
        case CUDASIM_WARP_SHFL_IDX: j = lo | (b & ~seg); break;
        case CUDASIM_WARP_SHFL_UP: j = l - b < lo ? l : l - b; break;
        case CUDASIM_WARP_SHFL_DOWN: j = l + b > hi ? l : l + b; break;
        case CUDASIM_WARP_SHFL_XOR: j = (l ^ b) > hi ? l : (l ^ b); break;
        default: break;
        }
        switch (op) {
        case CUDASIM_WARP_SHFL_IDX:
        case CUDASIM_WARP_SHFL_UP:
        case CUDASIM_WARP_SHFL_DOWN:
        case CUDASIM_WARP_SHFL_XOR:
            if (!(mask >> j & 1u))
                die("%s: lane %d's %s (%s:%d) reads lane %d, which is not in the mask 0x%08x", where_kernel().c_str(),
                    l, name, file, line, j, mask);
            u.wout = g_th[base + j].win;
            break;
        case CUDASIM_WARP_BALLOT: u.wout = ballot; break;
        case CUDASIM_WARP_REDUCE_ADD: u.wout = (unsigned)sum; break;
        case CUDASIM_WARP_REDUCE_MIN: u.wout = umin; break;
        case CUDASIM_WARP_REDUCE_MAX: u.wout = umax; break;
        case CUDASIM_WARP_REDUCE_MIN_S: u.wout = (unsigned)(int)smin; break;
        case CUDASIM_WARP_REDUCE_MAX_S: u.wout = (unsigned)(int)smax; break;
        default: u.wout = 0; break;
        }
        if (&u != t) {
            u.state = ST_READY;
            set_ready(base + l);
        }
    }
    t->state = ST_READY;
    return t->wout;
}

/* ---------------------------------------------------------------- for stand-ins and tests */

CUDASIM_EXPORT cudaError_t cudasim_enqueue(cudaStream_t stream, const char *what, void (*run)(void *), void *arg,
                                           void (*drop)(void *))
{
    Lock l(g_mu);
    cudaError_t e = ready();
    Stream *s = NULL;
    if (e == cudaSuccess)
        e = resolve(stream, &s);
    if (e != cudaSuccess) {
        if (drop)
            drop(arg);
        return e;
    }
    if (capture_injected(s, what)) {
        if (drop)
            drop(arg);
        return fail(cudaErrorStreamCaptureUnsupported);
    }
    std::shared_ptr<void> owner(arg, [drop](void *p) {
        if (drop)
            drop(p);
    });
    enqueue(s, Op{what, [run, owner] { run(owner.get()); }, true});
    g_counts.library_calls++;
    trace("library", what);
    return cudaSuccess;
}

CUDASIM_EXPORT unsigned long long cudasim_pinned_allocs(void)
{
    Lock l(g_mu);
    return g_pinned_allocs;
}

CUDASIM_EXPORT void cudasim_get_counters(cudasim_counters *out)
{
    Lock l(g_mu);
    *out = g_counts;
}

CUDASIM_EXPORT int cudasim_stream_device(cudaStream_t stream)
{
    Lock l(g_mu);
    Stream *s;
    if (ready() != cudaSuccess)
        return -1;
    if (!stream || stream == cudaStreamLegacy || stream == cudaStreamPerThread)
        return t_dev;
    s = (Stream *)stream;
    return g_stream_ids.count(s) ? s->device : -1;
}

CUDASIM_EXPORT int cudasim_check_access(const void *p, size_t bytes, int device, const char *what)
{
    Lock l(g_mu);
    int d;
    Where w = where(p, bytes, &d);
    if (w == Where::Pinned || (w == Where::Device && !bad_device(device) && (d == device || g_dev[device].peer[d])))
        return 0;
    report("%s: %zu bytes at %s%s, not memory cuda:%d can access", what, bytes, describe(p).c_str(),
           w == Where::Device ? " (peer access not enabled)" : w == Where::Bad ? " (does not fit the allocation)" : "",
           device);
    return -1;
}

CUDASIM_EXPORT void cudasim_report(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport(fmt, ap);
    va_end(ap);
}

CUDASIM_EXPORT const char *cudasim_last_report(void) { return g_last_report; }

CUDASIM_EXPORT size_t cudasim_live_bytes(int device)
{
    Lock l(g_mu);
    return ready() == cudaSuccess && !bad_device(device) ? g_dev[device].used : 0;
}
