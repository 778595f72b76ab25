/*
 * nccl_sim.cc — a NCCL stand-in for the CUDA simulator (test-only).
 *
 * Built as build/cudasim/lib/libnccl.so.2, the name runtime/rt_nccl.c dlopens, found before any
 * real NCCL through the test programs' rpath (as the cuBLAS stand-in is), so rt_nccl.c runs
 * unchanged, dlopen and dlsym included. It implements the calls the runtime makes:
 * ncclGetVersion, ncclGetErrorString, ncclGetLastError, ncclGetUniqueId, ncclCommInitAll,
 * ncclCommInitRank, ncclAllReduce (float and double sum, float ncclRedOpCreatePreMulSum with a
 * host scalar), ncclAllGather, ncclGroupStart/End, ncclCommGetAsyncError, ncclCommDestroy,
 * ncclCommAbort, ncclRedOpCreatePreMulSum and ncclRedOpDestroy.
 *
 * How a collective runs. The ranks of a communicator share a "clique": plain memory for the
 * ranks of one ncclCommInitAll, a shared-memory file (/dev/shm/cudasim-nccl-<id>) for ranks in
 * several processes (ncclCommInitRank), found by the unique id. ncclGetUniqueId makes a random id,
 * or, when NCCL_COMM_ID is set, an id that is a function of that string, so that every process
 * gets the same one (what NCCL's own bootstrap does with NCCL_COMM_ID). The calls of a group are
 * kept until ncclGroupEnd (a call outside a group is a group of one); there the host waits for
 * each call's stream (so the data is what the stream computed), and the i-th call of every rank
 * runs together in chunks: each rank copies its chunk into its slot of the clique, all ranks meet
 * at a barrier, each rank computes the result from the slots in rank order (r = 0, 1, ...: a
 * fixed order, float adds left to right; PreMulSum multiplies each rank's value by its float
 * scalar first) and copies it to its receive buffer, and all meet again. So the collective is
 * synchronous on the host, and ordered after the stream's earlier work; work queued after it
 * sees the result.
 *
 * Errors: an unknown datatype or op, a count or pointer the devices refuse (cudaMemcpy's error),
 * ranks whose calls in a group disagree in number, a call on a capturing stream (not supported
 * here): ncclInvalidArgument/ncclInvalidUsage with a message for ncclGetLastError. A rank that
 * does not arrive at a barrier within CUDASIM_NCCL_TIMEOUT seconds (default 60): ncclSystemError.
 * CUDASIM_NCCL_FAIL=N[:RANK] makes the N-th collective (counted per rank from 1) of rank RANK
 * (default every rank) fail with ncclSystemError, as a NCCL network error would: the rank marks
 * the clique broken, and every rank then waiting at its barriers returns ncclRemoteError at once,
 * so all ranks stop; ncclCommGetAsyncError reports the error afterwards.
 */
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <string>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

#include "cudasim.h"

#define API extern "C" __attribute__((visibility("default")))

typedef int ncclResult_t;
enum { ncclSuccess = 0, ncclUnhandledCudaError = 1, ncclSystemError = 2, ncclInternalError = 3,
       ncclInvalidArgument = 4, ncclInvalidUsage = 5, ncclRemoteError = 6, ncclInProgress = 7 };
enum { ncclSum = 0, ncclNumOps = 5 };
enum { ncclUint64 = 5, ncclFloat32 = 7, ncclFloat64 = 8 };
struct ncclUniqueId {
    char internal[128];
};

namespace {

constexpr size_t kSlot = 1 << 20; // bytes of each rank's slot: a collective runs in chunks of this
constexpr uint64_t kMagic = 0x6c63636e6d697363ull;

struct CliqueHdr { // at the start of the clique's memory; zero is a valid initial state
    uint64_t magic;
    std::atomic<int> nranks, joined, arrived, gen, broken; // broken: 1 + the failing rank
    std::atomic<int> pid[64];
};

struct Clique {
    CliqueHdr *h;
    char *slots;
    int nranks;
    bool shared;
    std::string path;
    size_t bytes;
    int refs;
};

struct Comm {
    Clique *c;
    int rank, nranks, device;
    ncclResult_t async;
    int ncoll;                  // collectives this rank began
    std::vector<float> scalars; // PreMulSum ops: op ncclNumOps + i has scalar scalars[i]
    std::vector<bool> live;
};

struct Call {
    Comm *comm;
    bool gather;
    const void *send;
    void *recv;
    size_t count;
    int dtype, op;
    cudaStream_t stream;
};

thread_local int t_group = 0;
thread_local std::vector<Call> t_calls;
thread_local char t_err[512];

ncclResult_t fail(ncclResult_t r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
ncclResult_t fail(ncclResult_t r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t_err, sizeof t_err, fmt, ap);
    va_end(ap);
    cudasim_report("nccl: %s", t_err);
    return r;
}

double now()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

double timeout_s()
{
    const char *s = getenv("CUDASIM_NCCL_TIMEOUT");
    double t = s && *s ? atof(s) : 60;
    return t > 0 ? t : 60;
}

size_t dsize(int dtype)
{
    return dtype == ncclFloat32 ? 4 : dtype == ncclFloat64 || dtype == ncclUint64 ? 8 : 0;
}

/* nlocal ranks of this caller arrive; wait for the others (or a broken clique, or the timeout). */
ncclResult_t barrier(Clique *c, int nlocal, int rank)
{
    CliqueHdr *h = c->h;
    int g = h->gen.load();
    if (h->broken.load())
        return fail(ncclRemoteError, "rank %d failed: this rank (%d) stops too", h->broken.load() - 1, rank);
    if (h->arrived.fetch_add(nlocal) + nlocal == c->nranks) {
        h->arrived.store(0);
        h->gen.fetch_add(1);
        return ncclSuccess;
    }
    double t0 = now(), lim = timeout_s();
    for (long spin = 0; h->gen.load() == g; spin++) {
        if (h->broken.load())
            return fail(ncclRemoteError, "rank %d failed: this rank (%d) stops too", h->broken.load() - 1, rank);
        if (now() - t0 > lim) {
            h->broken.store(rank + 1);
            return fail(ncclSystemError, "rank %d: the other ranks did not arrive within %g s (CUDASIM_NCCL_TIMEOUT)",
                        rank, lim);
        }
        timespec ts = {0, spin < 2000 ? 10000 : 1000000};
        nanosleep(&ts, nullptr);
    }
    return ncclSuccess;
}

Clique *clique_local(int n)
{
    Clique *c = new Clique();
    c->bytes = sizeof(CliqueHdr) + (size_t)n * kSlot;
    void *p = mmap(nullptr, c->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        delete c;
        return nullptr;
    }
    c->h = new (p) CliqueHdr();
    c->slots = (char *)p + sizeof(CliqueHdr);
    c->nranks = n;
    c->h->nranks = n;
    c->refs = n;
    return c;
}

/* Is rank r's failure injected at its collective number k (1-based)? */
bool injected(int rank, int k)
{
    const char *s = getenv("CUDASIM_NCCL_FAIL");
    if (!s || !*s)
        return false;
    char *end;
    long n = strtol(s, &end, 10);
    long r = *end == ':' ? strtol(end + 1, nullptr, 10) : -1;
    return n == k && (r < 0 || r == rank);
}

/* Run call i of every local rank (calls[j] for the ranks of one clique, one call each). */
ncclResult_t run_collective(std::vector<Call *> &calls)
{
    Clique *c = calls[0]->comm->c;
    const Call &a = *calls[0];
    size_t es = dsize(a.dtype);
    int nl = (int)calls.size();
    for (Call *k : calls) {
        if (k->comm->c != c || k->gather != a.gather || k->count != a.count || k->dtype != a.dtype)
            return fail(ncclInvalidUsage, "the ranks' calls in a group do not match (another collective, count or "
                        "datatype at the same place)");
        k->comm->ncoll++;
        if (injected(k->comm->rank, k->comm->ncoll)) {
            k->comm->async = ncclSystemError;
            c->h->broken.store(k->comm->rank + 1);
            return fail(ncclSystemError, "rank %d: collective %d failed (CUDASIM_NCCL_FAIL)", k->comm->rank,
                        k->comm->ncoll);
        }
        if (cudasim_stream_capturing(k->stream))
            return fail(ncclInvalidUsage, "a collective on a capturing stream (not supported by the stand-in)");
        cudaSetDevice(k->comm->device);
        if (cudaStreamSynchronize(k->stream) != cudaSuccess)
            return fail(ncclUnhandledCudaError, "rank %d: the stream failed before the collective: %s", k->comm->rank,
                        cudaGetErrorString(cudaGetLastError()));
    }
    const size_t chunk = a.gather ? kSlot / es : kSlot / es; // elements per slot
    std::vector<char> res(a.gather ? kSlot * (size_t)c->nranks : kSlot);
    for (size_t at = 0; at < a.count || (at == 0 && a.count == 0); at += chunk) {
        size_t m = a.count - at < chunk ? a.count - at : chunk;
        for (Call *k : calls) {
            char *slot = c->slots + (size_t)k->comm->rank * kSlot;
            cudaSetDevice(k->comm->device);
            if (m && cudaMemcpy(slot, (const char *)k->send + at * es, m * es, cudaMemcpyDeviceToHost) != cudaSuccess)
                return fail(ncclUnhandledCudaError, "rank %d: reading %zu bytes of the send buffer failed: %s",
                            k->comm->rank, m * es, cudaGetErrorString(cudaGetLastError()));
            if (k->op >= ncclNumOps) {
                float s = k->comm->scalars[k->op - ncclNumOps];
                for (size_t e = 0; e < m; e++)
                    ((float *)slot)[e] = s * ((float *)slot)[e];
            }
        }
        ncclResult_t r = barrier(c, nl, calls[0]->comm->rank);
        if (r != ncclSuccess)
            return r;
        if (a.gather) {
            // recv holds every rank's count elements in rank order; this chunk's part of each
            for (Call *k : calls) {
                cudaSetDevice(k->comm->device);
                for (int q = 0; q < c->nranks; q++)
                    if (m && cudaMemcpy((char *)k->recv + ((size_t)q * a.count + at) * es, c->slots + (size_t)q * kSlot,
                                        m * es, cudaMemcpyHostToDevice) != cudaSuccess)
                        return fail(ncclUnhandledCudaError, "rank %d: writing the receive buffer failed", k->comm->rank);
            }
        } else {
            for (size_t e = 0; e < m; e++) {
                if (a.dtype == ncclFloat32) {
                    float v = 0;
                    for (int q = 0; q < c->nranks; q++)
                        v += ((const float *)(c->slots + (size_t)q * kSlot))[e];
                    ((float *)res.data())[e] = v;
                } else if (a.dtype == ncclFloat64) {
                    double v = 0;
                    for (int q = 0; q < c->nranks; q++)
                        v += ((const double *)(c->slots + (size_t)q * kSlot))[e];
                    ((double *)res.data())[e] = v;
                } else {
                    uint64_t v = 0;
                    for (int q = 0; q < c->nranks; q++)
                        v += ((const uint64_t *)(c->slots + (size_t)q * kSlot))[e];
                    ((uint64_t *)res.data())[e] = v;
                }
            }
            for (Call *k : calls) {
                cudaSetDevice(k->comm->device);
                if (m && cudaMemcpy((char *)k->recv + at * es, res.data(), m * es, cudaMemcpyHostToDevice) != cudaSuccess)
                    return fail(ncclUnhandledCudaError, "rank %d: writing %zu bytes of the receive buffer failed: %s",
                                k->comm->rank, m * es, cudaGetErrorString(cudaGetLastError()));
            }
        }
        if ((r = barrier(c, nl, calls[0]->comm->rank)) != ncclSuccess) // the slots are free again
            return r;
        if (a.count == 0)
            break;
    }
    return ncclSuccess;
}

ncclResult_t flush()
{
    std::vector<Call> calls;
    calls.swap(t_calls);
    if (calls.empty())
        return ncclSuccess;
    int was = 0;
    cudaGetDevice(&was);
    // the calls of each communicator in order; the i-th of each run together
    std::vector<Comm *> comms;
    for (Call &k : calls) {
        bool seen = false;
        for (Comm *c : comms)
            seen |= c == k.comm;
        if (!seen)
            comms.push_back(k.comm);
    }
    std::vector<std::vector<Call *>> per(comms.size());
    for (Call &k : calls)
        for (size_t j = 0; j < comms.size(); j++)
            if (comms[j] == k.comm)
                per[j].push_back(&k);
    for (size_t j = 1; j < comms.size(); j++)
        if (per[j].size() != per[0].size() || comms[j]->c != comms[0]->c) {
            cudaSetDevice(was);
            return fail(ncclInvalidUsage, "a group holds %zu calls of rank %d and %zu of rank %d (or ranks of two "
                        "communicators)", per[0].size(), comms[0]->rank, per[j].size(), comms[j]->rank);
        }
    ncclResult_t r = ncclSuccess;
    for (size_t i = 0; i < per[0].size() && r == ncclSuccess; i++) {
        std::vector<Call *> one;
        for (auto &p : per)
            one.push_back(p[i]);
        r = run_collective(one);
    }
    if (r != ncclSuccess)
        for (Comm *c : comms)
            if (c->async == ncclSuccess)
                c->async = r;
    cudaSetDevice(was);
    return r;
}

ncclResult_t enqueue(const Call &k)
{
    if (!k.comm)
        return fail(ncclInvalidArgument, "comm is NULL");
    if (k.comm->async != ncclSuccess)
        return fail(ncclInvalidUsage, "rank %d: the communicator has failed before (error %d)", k.comm->rank,
                    k.comm->async);
    if (!dsize(k.dtype))
        return fail(ncclInvalidArgument, "datatype %d is not supported by the stand-in (float, double, uint64)", k.dtype);
    if (k.gather ? k.op != ncclSum : !(k.op == ncclSum || (k.op >= ncclNumOps &&
                                                         (size_t)(k.op - ncclNumOps) < k.comm->scalars.size() &&
                                                         k.comm->live[k.op - ncclNumOps])))
        return fail(ncclInvalidArgument, "op %d is not supported by the stand-in (ncclSum, PreMulSum)", k.op);
    if (k.op >= ncclNumOps && k.dtype != ncclFloat32)
        return fail(ncclInvalidArgument, "PreMulSum on datatype %d (the stand-in has it for float)", k.dtype);
    if (cudasim_stream_device(k.stream) != k.comm->device)
        return fail(ncclInvalidArgument, "rank %d: the stream is not of the communicator's device cuda:%d", k.comm->rank,
                    k.comm->device);
    t_calls.push_back(k);
    return t_group ? ncclSuccess : flush();
}

} // namespace

API const char *ncclGetErrorString(ncclResult_t r)
{
    static const char *const s[] = {"no error", "unhandled cuda error", "unhandled system error", "internal error",
                                    "invalid argument", "invalid usage", "remote process exited or there was a network "
                                    "error", "NCCL operation in progress"};
    return r >= 0 && r < 8 ? s[r] : "unknown result code";
}

API const char *ncclGetLastError(void *comm)
{
    return t_err;
}

API ncclResult_t ncclGetVersion(int *v)
{
    *v = 22800; // the API of NCCL 2.28
    return ncclSuccess;
}

API ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    memset(id, 0, sizeof *id);
    const char *cid = getenv("NCCL_COMM_ID");
    uint64_t h[2] = {1469598103934665603ull, 0};
    if (cid && *cid) {
        if (!strchr(cid, ':'))
            return fail(ncclInvalidArgument, "NCCL_COMM_ID=%s is not HOST:PORT", cid);
        for (const char *p = cid; *p; p++)
            h[0] = (h[0] ^ (unsigned char)*p) * 1099511628211ull;
        h[1] = 0x4e43434c5f434f4dull;
    } else {
        FILE *f = fopen("/dev/urandom", "rb");
        if (!f || fread(h, sizeof h, 1, f) != 1) {
            if (f)
                fclose(f);
            return fail(ncclSystemError, "cannot read /dev/urandom");
        }
        fclose(f);
    }
    memcpy(id->internal, h, sizeof h);
    return ncclSuccess;
}

API ncclResult_t ncclCommInitAll(Comm **comm, int n, const int *devlist)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess)
        return fail(ncclUnhandledCudaError, "cudaGetDeviceCount failed");
    if (n < 1 || n > 64)
        return fail(ncclInvalidArgument, "ndev %d", n);
    for (int i = 0; i < n; i++) {
        int d = devlist ? devlist[i] : i;
        if (d < 0 || d >= count)
            return fail(ncclInvalidArgument, "device %d of %d", d, count);
        for (int j = 0; j < i; j++)
            if ((devlist ? devlist[j] : j) == d)
                return fail(ncclInvalidUsage, "device %d given twice", d);
    }
    Clique *c = clique_local(n);
    if (!c)
        return fail(ncclSystemError, "out of memory");
    for (int i = 0; i < n; i++)
        comm[i] = new Comm{c, i, n, devlist ? devlist[i] : i, ncclSuccess, 0, {}, {}};
    return ncclSuccess;
}

API ncclResult_t ncclCommInitRank(Comm **comm, int nranks, ncclUniqueId id, int rank)
{
    if (nranks < 1 || nranks > 64 || rank < 0 || rank >= nranks)
        return fail(ncclInvalidArgument, "rank %d of %d", rank, nranks);
    int dev = 0;
    cudaGetDevice(&dev);
    char name[96];
    uint64_t h[2];
    memcpy(h, id.internal, sizeof h);
    snprintf(name, sizeof name, "/dev/shm/cudasim-nccl-%016llx%016llx", (unsigned long long)h[0],
             (unsigned long long)h[1]);
    size_t bytes = sizeof(CliqueHdr) + (size_t)nranks * kSlot;
    int fd = open(name, O_RDWR | O_CREAT, 0600);
    if (fd < 0)
        return fail(ncclSystemError, "%s: %s", name, strerror(errno));
    struct stat_guard {
        int fd;
        ~stat_guard() { close(fd); }
    } g{fd};
    if (ftruncate(fd, (off_t)bytes) != 0)
        return fail(ncclSystemError, "%s: %s", name, strerror(errno));
    void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return fail(ncclSystemError, "%s: mmap: %s", name, strerror(errno));
    CliqueHdr *hd = (CliqueHdr *)p;
    int zero = 0;
    if (!hd->nranks.compare_exchange_strong(zero, nranks) && zero != nranks) {
        munmap(p, bytes);
        return fail(ncclInvalidUsage, "rank %d says %d ranks, another rank said %d", rank, nranks, zero);
    }
    int none = 0;
    if (!hd->pid[rank].compare_exchange_strong(none, (int)getpid())) {
        munmap(p, bytes);
        return fail(ncclInvalidUsage, "rank %d joined twice (or %s is left from an earlier run: remove it)", rank, name);
    }
    Clique *c = new Clique{hd, (char *)p + sizeof(CliqueHdr), nranks, true, name, bytes, 1};
    hd->joined.fetch_add(1);
    ncclResult_t r = barrier(c, 1, rank); // every rank has joined
    if (rank == 0)
        unlink(name); // a later run with the same NCCL_COMM_ID starts afresh
    if (r != ncclSuccess) {
        munmap(p, bytes);
        delete c;
        return r;
    }
    *comm = new Comm{c, rank, nranks, dev, ncclSuccess, 0, {}, {}};
    return ncclSuccess;
}

API ncclResult_t ncclCommGetAsyncError(Comm *comm, ncclResult_t *e)
{
    *e = comm ? comm->async : ncclInvalidArgument;
    return ncclSuccess;
}

static ncclResult_t comm_free(Comm *comm)
{
    if (!comm)
        return ncclSuccess;
    Clique *c = comm->c;
    if (--c->refs == 0) {
        munmap(c->h, c->bytes);
        delete c;
    }
    delete comm;
    return ncclSuccess;
}

API ncclResult_t ncclCommDestroy(Comm *comm)
{
    return comm_free(comm);
}

API ncclResult_t ncclCommAbort(Comm *comm)
{
    if (comm)
        comm->c->h->broken.store(comm->rank + 1);
    return comm_free(comm);
}

API ncclResult_t ncclRedOpCreatePreMulSum(int *op, void *scalar, int dtype, int residence, Comm *comm)
{
    if (!comm || dtype != ncclFloat32 || residence != 1)
        return fail(ncclInvalidArgument, "PreMulSum: the stand-in takes a float scalar in host memory");
    comm->scalars.push_back(*(const float *)scalar);
    comm->live.push_back(true);
    *op = ncclNumOps + (int)comm->scalars.size() - 1;
    return ncclSuccess;
}

API ncclResult_t ncclRedOpDestroy(int op, Comm *comm)
{
    if (!comm || op < ncclNumOps || (size_t)(op - ncclNumOps) >= comm->scalars.size() || !comm->live[op - ncclNumOps])
        return fail(ncclInvalidArgument, "ncclRedOpDestroy: op %d was not created on this communicator", op);
    comm->live[op - ncclNumOps] = false;
    return ncclSuccess;
}

API ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, int dtype, int op, Comm *comm,
                               cudaStream_t stream)
{
    return enqueue(Call{comm, false, send, recv, count, dtype, op, stream});
}

API ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, int dtype, Comm *comm, cudaStream_t stream)
{
    return enqueue(Call{comm, true, send, recv, count, dtype, ncclSum, stream});
}

API ncclResult_t ncclGroupStart(void)
{
    t_group++;
    return ncclSuccess;
}

API ncclResult_t ncclGroupEnd(void)
{
    if (t_group == 0)
        return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    return --t_group ? ncclSuccess : flush();
}
