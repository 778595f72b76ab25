/*
 * rt_device.c — device strings, selection, memory, copies and GEMM: the device API of modelrt.h
 * for every build. Parsing ("cpu", "cpu:N", "cuda", "cuda:N", "auto") is pure; selection
 * resolves a parsed device against what this build and machine offer. `auto` takes the first
 * CUDA device the kernels were built for, else cpu:0, and says which and why through the log
 * hook; an explicit CUDA device that is absent is an error listing what is visible, never a
 * silent fallback (field case B16). CPU devices cpu:0..cpu:7 are distinct ordinals for
 * placement; they share host memory. This file does the CPU half and checks CUDA ordinals
 * against the probe; the CUDA half lives in rt_cuda.c (or rt_nocuda.c without CUDA), so a
 * CPU-only run never touches the driver. The test seam MODELRT_TEST_FAKE_CUDA (fake CUDA
 * devices that both probes report and that this file refuses to run anything on) is read here,
 * once, by rt_fake_cuda_count. Device strings quoted in messages go through rt_quote.
 */
#include "rt_internal.h"
#include "mrt_kernels.h"

#ifdef MRT_WITH_DNNL
#include <dnnl.h>
#else
#include <cblas.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif
#include <sched.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#define RT_MAX_ORDINAL 1023   /* largest N accepted in "cuda:N" */
#define RT_N_CPU_DEVICES 8    /* cpu:0 .. cpu:7 */
#define RT_CPU_ALIGN 64

static const char rt_device_forms[] = "expected 'auto', 'cpu', 'cpu:N', 'cuda' or 'cuda:N' "
                                      "with N a plain decimal (cpu:0..cpu:7, cuda:0..cuda:1023)";

/* ---------------------------------------------------------------- parsing */

/* A plain decimal in p: digits only, no sign or space, and no leading 0 unless it is "0".
 * Returns 0 with *out = the value (saturated at max + 1, so "99999999999" cannot overflow),
 * or -1 when p is not one. */
static int rt_parse_decimal(const char *p, long max, long *out)
{
    if (*p == '\0' || (p[0] == '0' && p[1] != '\0'))
        return -1;
    long v = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        if (v <= max)
            v = v * 10 + (*p - '0');
    }
    *out = v > max ? max + 1 : v;
    return 0;
}

/* mrt_device_parse, with `from` (" (from MODELRT_DEVICE)" or "") said after the quoted string,
 * so that the accepted forms stay the message's last words. */
static mrt_status rt_device_parse_from(const char *s, const char *from, mrt_device *out,
                                       int *is_auto)
{
    if (!out)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_device_parse: out is NULL");
    if (!s)
        return mrt_set_error(MRT_ERR_DEVICE, "device string is NULL; %s", rt_device_forms);
    char q[RT_QUOTE_MAX];
    mrt_device d = {MRT_DEVICE_CPU, 0};
    int automatic = 0;
    const char *rest = NULL;
    if (strcmp(s, "auto") == 0) {
        automatic = 1;
    } else if (strncmp(s, "cpu", 3) == 0) {
        rest = s + 3;
    } else if (strncmp(s, "cuda", 4) == 0) {
        d.kind = MRT_DEVICE_CUDA;
        rest = s + 4;
    } else {
        return mrt_set_error(MRT_ERR_DEVICE, "unknown device %s%s; %s",
                             rt_quote(q, sizeof q, s), from, rt_device_forms);
    }
    if (rest && *rest != '\0') {
        long max = d.kind == MRT_DEVICE_CPU ? RT_N_CPU_DEVICES - 1 : RT_MAX_ORDINAL, v;
        if (*rest != ':' || rt_parse_decimal(rest + 1, max, &v) != 0)
            return mrt_set_error(MRT_ERR_DEVICE, "bad device %s%s; %s", rt_quote(q, sizeof q, s),
                                 from, rt_device_forms);
        if (v > max && d.kind == MRT_DEVICE_CPU)
            return mrt_set_error(MRT_ERR_DEVICE, "device %s%s is out of range: CPU devices are "
                                 "cpu:0..cpu:%d", rt_quote(q, sizeof q, s), from,
                                 RT_N_CPU_DEVICES - 1);
        if (v > max)
            return mrt_set_error(MRT_ERR_DEVICE, "device %s%s is out of range: CUDA ordinals are "
                                 "0..%d", rt_quote(q, sizeof q, s), from, RT_MAX_ORDINAL);
        d.index = (int)v;
    }
    *out = d;
    if (is_auto)
        *is_auto = automatic;
    return MRT_OK;
}

mrt_status mrt_device_parse(const char *s, mrt_device *out, int *is_auto)
{
    return rt_device_parse_from(s, "", out, is_auto);
}

/* ---------------------------------------------------------------- the fake-CUDA test seam */

static struct {
    pthread_once_t once;
    int count;            /* -1: MODELRT_TEST_FAKE_CUDA unset or empty */
    size_t bytes;         /* memory of each fake device */
    char value[RT_QUOTE_MAX]; /* the value as messages show it ("2", "2:1024", quoted if bad) */
    char why[512];        /* the reason mrt_cuda_device_count gives when count is 0 */
} rt_fake = {.once = PTHREAD_ONCE_INIT};

static void rt_fake_cuda_read(void)
{
    rt_fake.count = -1;
    const char *e = getenv("MODELRT_TEST_FAKE_CUDA");
    if (!e || !*e)
        return;
    char n_str[32] = "", mib_str[32] = "";
    const char *colon = strchr(e, ':');
    long n = -1, mib = RT_FAKE_CUDA_DEFAULT_MIB;
    int ok = strlen(e) < sizeof n_str; /* longer than "64:16777216" is malformed anyway */
    if (ok) {
        snprintf(n_str, sizeof n_str, "%.*s", colon ? (int)(colon - e) : (int)strlen(e), e);
        if (colon)
            snprintf(mib_str, sizeof mib_str, "%s", colon + 1);
        ok = rt_parse_decimal(n_str, RT_FAKE_CUDA_MAX, &n) == 0 && n <= RT_FAKE_CUDA_MAX &&
             (!colon || (rt_parse_decimal(mib_str, RT_FAKE_CUDA_MAX_MIB, &mib) == 0 &&
                         mib >= 1 && mib <= RT_FAKE_CUDA_MAX_MIB));
    }
    if (!ok) {
        rt_fake.count = 0;
        rt_quote(rt_fake.value, sizeof rt_fake.value, e);
        snprintf(rt_fake.why, sizeof rt_fake.why, "MODELRT_TEST_FAKE_CUDA=%s is malformed "
                 "(expected N or N:MiB, N a plain decimal 0..%d and MiB 1..%d), so no CUDA "
                 "device is faked and the driver is not asked", rt_fake.value,
                 RT_FAKE_CUDA_MAX, RT_FAKE_CUDA_MAX_MIB);
        return;
    }
    rt_fake.count = (int)n;
    rt_fake.bytes = (size_t)mib << 20;
    snprintf(rt_fake.value, sizeof rt_fake.value, "%s", e);
    if (n == 0)
        snprintf(rt_fake.why, sizeof rt_fake.why, "MODELRT_TEST_FAKE_CUDA=0 fakes no CUDA "
                 "device, and the driver is not asked");
}

int rt_fake_cuda_count(const char **why)
{
    pthread_once(&rt_fake.once, rt_fake_cuda_read);
    if (why)
        *why = rt_fake.count < 0 ? NULL : rt_fake.count > 0 ? "" : rt_fake.why;
    return rt_fake.count;
}

void rt_fake_cuda_info(int index, mrt_device_info *info)
{
    memset(info, 0, sizeof *info);
    info->device.kind = MRT_DEVICE_CUDA;
    info->device.index = index;
    snprintf(info->name, sizeof info->name, "%s", RT_FAKE_CUDA_NAME);
    info->total_bytes = info->free_bytes = rt_fake.bytes;
    info->cc_major = 9;
    info->cc_minor = 0;
}

mrt_status rt_fake_cuda_refuse(int index, const char *what)
{
    if (index >= 0)
        return mrt_set_error(MRT_ERR_DEVICE, "%s: cuda:%d is a fake device from "
                             "MODELRT_TEST_FAKE_CUDA=%s (a test seam); nothing runs on it", what,
                             index, rt_fake.value);
    return mrt_set_error(MRT_ERR_DEVICE, "%s: the CUDA devices are fake, from "
                         "MODELRT_TEST_FAKE_CUDA=%s (a test seam); nothing runs on them", what,
                         rt_fake.value);
}

/* ---------------------------------------------------------------- selection */

/* "1 CUDA device visible (cuda:0 NVIDIA H200)", "0 CUDA devices visible (reason)". */
static char *rt_cuda_visible(char *buf, size_t n)
{
    const char *why = NULL;
    int count = mrt_cuda_device_count(&why);
    size_t used = 0;
    int k = snprintf(buf, n, "%d CUDA device%s visible (", count, count == 1 ? "" : "s");
    if (count == 0 && k >= 0 && (size_t)k < n)
        k += snprintf(buf + k, n - (size_t)k, "%s", why ? why : "reason unknown");
    for (int i = 0; i < count && k >= 0 && (size_t)k < n; i++) {
        mrt_device_info info;
        if (rt_cuda_info(i, &info, 0) != MRT_OK)
            snprintf(info.name, sizeof info.name, "?");
        used = (size_t)k;
        k += snprintf(buf + used, n - used, "%scuda:%d %s", i ? ", " : "", i, info.name);
    }
    if (k >= 0 && (size_t)k < n)
        snprintf(buf + k, n - (size_t)k, ")");
    return buf;
}

/* MRT_OK if d is a CPU device or a visible CUDA device; else MRT_ERR_DEVICE "<prefix>, N CUDA
 * devices visible (...)". */
static mrt_status rt_device_present(mrt_device d, const char *prefix)
{
    if (d.kind == MRT_DEVICE_CPU) {
        if (d.index >= 0 && d.index < RT_N_CPU_DEVICES)
            return MRT_OK;
        return mrt_set_error(MRT_ERR_DEVICE, "%s, but it is not present; devices present: "
                             "cpu:0..cpu:%d", prefix, RT_N_CPU_DEVICES - 1);
    }
    if (d.index >= 0 && d.index < mrt_cuda_device_count(NULL))
        return MRT_OK;
    char vis[768];
    return mrt_set_error(MRT_ERR_DEVICE, "%s, %s", prefix, rt_cuda_visible(vis, sizeof vis));
}

/* MRT_OK if work may run on d: present (else MRT_ERR_DEVICE "<what>: no such device, ..."), and
 * not a fake device of MODELRT_TEST_FAKE_CUDA (else MRT_ERR_DEVICE "<what>: cuda:N is a fake
 * device ..."), so that nothing below asks the driver about a device that is not there. */
static mrt_status rt_device_usable(mrt_device d, const char *what)
{
    char prefix[256];
    snprintf(prefix, sizeof prefix, "%s: no such device", what);
    if (rt_device_present(d, prefix) != MRT_OK)
        return MRT_ERR_DEVICE;
    if (d.kind == MRT_DEVICE_CUDA && rt_fake_cuda_count(NULL) >= 0)
        return rt_fake_cuda_refuse(d.index, what);
    return MRT_OK;
}

static double rt_gib(size_t bytes) { return (double)bytes / (1024.0 * 1024.0 * 1024.0); }

mrt_status mrt_device_select(const char *s, mrt_device *out)
{
    if (!out)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_device_select: out is NULL");
    const char *from_env = "";
    if (!s) {
        const char *e = getenv("MODELRT_DEVICE");
        if (e && *e) {
            s = e;
            from_env = " (from MODELRT_DEVICE)";
        }
    }
    if (!s || !*s) /* NULL with MODELRT_DEVICE unset or empty, or "": auto */
        s = "auto";
    mrt_device d;
    int automatic = 0;
    if (rt_device_parse_from(s, from_env, &d, &automatic) != MRT_OK)
        return MRT_ERR_DEVICE;
    if (automatic) {
        /* The first CUDA device the kernels run on; else the CPU, with the reason. */
        const char *why = NULL;
        int count = mrt_cuda_device_count(&why);
        char reason[512] = "";
        for (int i = 0; i < count; i++) {
            mrt_device_info info;
            if (rt_cuda_info(i, &info, 0) != MRT_OK) {
                snprintf(reason, sizeof reason, "cuda:%d: %s", i, mrt_last_error());
                continue;
            }
            if (info.cc_major < RT_CUDA_MIN_CC_MAJOR) {
                snprintf(reason, sizeof reason, "cuda:%d %s has compute capability %d.%d; "
                         "modelrt's kernels need %d.0 or newer", i, info.name, info.cc_major,
                         info.cc_minor, RT_CUDA_MIN_CC_MAJOR);
                continue;
            }
            mrt_log(MRT_LOG_INFO, "auto selected cuda:%d (%s, %.1f GiB)%s", i, info.name,
                    rt_gib(info.total_bytes), from_env);
            out->kind = MRT_DEVICE_CUDA;
            out->index = i;
            return MRT_OK;
        }
        mrt_log(MRT_LOG_INFO, "auto selected cpu:0 (no usable CUDA device: %s)%s",
                count == 0 ? (why ? why : "none found") : reason, from_env);
        out->kind = MRT_DEVICE_CPU;
        out->index = 0;
        return MRT_OK;
    }
    char name[32], prefix[96];
    mrt_device_str(d, name, sizeof name);
    snprintf(prefix, sizeof prefix, "device %s requested%s", name, from_env);
    if (rt_device_present(d, prefix) != MRT_OK)
        return MRT_ERR_DEVICE;
    if (d.kind == MRT_DEVICE_CUDA) {
        mrt_device_info info;
        if (rt_cuda_info(d.index, &info, 0) != MRT_OK)
            return mrt_set_error(MRT_ERR_DEVICE, "%s: %s", prefix, mrt_last_error());
        if (info.cc_major < RT_CUDA_MIN_CC_MAJOR)
            return mrt_set_error(MRT_ERR_DEVICE, "%s: %s has compute capability %d.%d, but "
                                 "modelrt's kernels need %d.0 or newer", prefix, info.name,
                                 info.cc_major, info.cc_minor, RT_CUDA_MIN_CC_MAJOR);
    }
    *out = d;
    return MRT_OK;
}

char *mrt_device_str(mrt_device d, char *buf, size_t n)
{
    if (!buf || n == 0)
        return buf;
    snprintf(buf, n, "%s:%d", d.kind == MRT_DEVICE_CUDA ? "cuda" : "cpu", d.index);
    return buf;
}

/* ---------------------------------------------------------------- memory */

void *mrt_alloc(mrt_device d, size_t bytes)
{
    char name[32], what[128];
    mrt_device_str(d, name, sizeof name);
    if (d.kind == MRT_DEVICE_CUDA) {
        snprintf(what, sizeof what, "cannot allocate %zu bytes on %s", bytes, name);
        if (rt_device_usable(d, what) != MRT_OK)
            return NULL;
        return rt_cuda_alloc(d.index, bytes);
    }
    /* aligned_alloc wants a multiple of the alignment; 0 bytes still gets a unique block. */
    size_t rounded;
    if (bytes == 0) {
        rounded = RT_CPU_ALIGN;
    } else if (__builtin_add_overflow(bytes, (size_t)RT_CPU_ALIGN - 1, &rounded)) {
        mrt_set_error(MRT_ERR_OOM, "cannot allocate %zu bytes on %s: size too large", bytes,
                      name);
        return NULL;
    } else {
        rounded &= ~(size_t)(RT_CPU_ALIGN - 1);
    }
    void *p = aligned_alloc(RT_CPU_ALIGN, rounded);
    if (!p)
        mrt_set_error(MRT_ERR_OOM, "cannot allocate %zu bytes on %s: out of memory", bytes, name);
    return p;
}

void mrt_free(mrt_device d, void *p)
{
    if (!p)
        return;
    if (d.kind == MRT_DEVICE_CUDA) {
        if (rt_fake_cuda_count(NULL) < 0) /* nothing was allocated on a fake device */
            rt_cuda_free(d.index, p);
    } else
        free(p);
}

void mrt_cpu_release(void *p, size_t bytes)
{
    long pg = sysconf(_SC_PAGESIZE);
    if (!p || pg <= 0)
        return;
    uintptr_t lo = ((uintptr_t)p + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1);
    uintptr_t hi = ((uintptr_t)p + bytes) & ~((uintptr_t)pg - 1);
    if (hi > lo)
        (void)madvise((void *)lo, hi - lo, MADV_DONTNEED); /* advice: on failure the pages just stay */
}

/* MemTotal and MemAvailable from /proc/meminfo, in bytes. */
static mrt_status rt_cpu_memory(size_t *free_bytes, size_t *total_bytes)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return mrt_set_error(MRT_ERR_IO, "cannot read /proc/meminfo for the memory of cpu:0");
    char line[256];
    unsigned long long total = 0, avail = 0, freek = 0, v;
    int have_avail = 0;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemTotal: %llu kB", &v) == 1)
            total = v;
        else if (sscanf(line, "MemAvailable: %llu kB", &v) == 1)
            avail = v, have_avail = 1;
        else if (sscanf(line, "MemFree: %llu kB", &v) == 1)
            freek = v;
    }
    fclose(f);
    if (total == 0)
        return mrt_set_error(MRT_ERR_FORMAT, "/proc/meminfo has no MemTotal line");
    if (total_bytes)
        *total_bytes = (size_t)(total * 1024ull);
    if (free_bytes)
        *free_bytes = (size_t)((have_avail ? avail : freek) * 1024ull);
    return MRT_OK;
}

/* "model name" from /proc/cpuinfo (x86), else "Hardware"/"cpu model", else "CPU". */
static void rt_cpu_name(char *buf, size_t n)
{
    snprintf(buf, n, "CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) && strncmp(line, "Hardware", 8) &&
            strncmp(line, "cpu model", 9))
            continue;
        char *colon = strchr(line, ':');
        if (!colon)
            continue;
        char *v = colon + 1;
        while (*v == ' ' || *v == '\t')
            v++;
        v[strcspn(v, "\r\n")] = '\0';
        if (*v) {
            snprintf(buf, n, "%s", v);
            break;
        }
    }
    fclose(f);
}

mrt_status mrt_device_memory(mrt_device d, size_t *free_bytes, size_t *total_bytes)
{
    char name[32], prefix[96];
    snprintf(prefix, sizeof prefix, "cannot query the memory of %s: no such device",
             mrt_device_str(d, name, sizeof name));
    if (rt_device_present(d, prefix) != MRT_OK)
        return MRT_ERR_DEVICE;
    if (d.kind == MRT_DEVICE_CPU)
        return rt_cpu_memory(free_bytes, total_bytes);
    mrt_device_info info;
    mrt_status st = rt_cuda_info(d.index, &info, 1);
    if (st != MRT_OK)
        return st;
    if (free_bytes)
        *free_bytes = info.free_bytes;
    if (total_bytes)
        *total_bytes = info.total_bytes;
    return MRT_OK;
}

mrt_status mrt_device_list(mrt_device_info *out, int max, int *n)
{
    if (!n || (max > 0 && !out))
        return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_device_list: out or n is NULL");
    *n = 0;
    if (max <= 0)
        return MRT_OK;
    mrt_device_info *cpu = &out[0];
    memset(cpu, 0, sizeof *cpu);
    cpu->device.kind = MRT_DEVICE_CPU;
    rt_cpu_name(cpu->name, sizeof cpu->name);
    if (rt_cpu_memory(&cpu->free_bytes, &cpu->total_bytes) != MRT_OK)
        cpu->free_bytes = cpu->total_bytes = 0; /* listed all the same */
    *n = 1;
    int count = mrt_cuda_device_count(NULL);
    for (int i = 0; i < count && *n < max; i++) {
        /* a device whose free memory cannot be read (busy, exclusive) is listed with free 0 */
        if (rt_cuda_info(i, &out[*n], 1) != MRT_OK) {
            rt_cuda_info(i, &out[*n], 0);
            out[*n].free_bytes = 0;
        }
        ++*n;
    }
    return MRT_OK;
}

/* ---------------------------------------------------------------- activation and streams */

mrt_status mrt_device_activate(mrt_device d)
{
    char name[32], what[96];
    snprintf(what, sizeof what, "cannot activate %s", mrt_device_str(d, name, sizeof name));
    if (rt_device_usable(d, what) != MRT_OK)
        return MRT_ERR_DEVICE;
    return d.kind == MRT_DEVICE_CUDA ? rt_cuda_activate(d.index) : MRT_OK;
}

mrt_status mrt_stream_create(mrt_device d, void **stream)
{
    if (!stream)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_stream_create: stream is NULL");
    *stream = NULL;
    char name[32], what[96];
    snprintf(what, sizeof what, "cannot create a stream on %s",
             mrt_device_str(d, name, sizeof name));
    if (rt_device_usable(d, what) != MRT_OK)
        return MRT_ERR_DEVICE;
    return d.kind == MRT_DEVICE_CUDA ? rt_cuda_stream_create(d.index, stream) : MRT_OK;
}

void mrt_stream_destroy(mrt_device d, void *stream)
{
    if (stream && d.kind == MRT_DEVICE_CUDA && rt_fake_cuda_count(NULL) < 0)
        rt_cuda_stream_destroy(d.index, stream);
}

static mrt_status stream_sync(mrt_device d, void *stream, const char *what, int collect)
{
    if (d.kind != MRT_DEVICE_CUDA)
        return MRT_OK;
    char name[32], ctx[160];
    snprintf(ctx, sizeof ctx, "%s: cannot synchronize %s", what ? what : "sync",
             mrt_device_str(d, name, sizeof name));
    if (rt_device_usable(d, ctx) != MRT_OK)
        return MRT_ERR_DEVICE;
    return rt_cuda_stream_sync(d.index, stream, what ? what : "stream", collect);
}

mrt_status mrt_stream_sync(mrt_device d, void *stream, const char *what) { return stream_sync(d, stream, what, 1); }

mrt_status mrt_model_sync(mrt_model *m, int slot, const char *what)
{
    /* a micro-batch's checks were read when it handed the stage on (mrt_pipe_gate); those the
     * stream holds now are the next micro-batch's */
    return stream_sync(m->dev[slot], m->stream[slot], what, !m->pipe);
}

mrt_status mrt_stream_wait(mrt_device wait_dev, void *waiter, mrt_device d, void *stream, const char *what)
{
    if (wait_dev.kind != MRT_DEVICE_CUDA || d.kind != MRT_DEVICE_CUDA || waiter == stream ||
        rt_fake_cuda_count(NULL) >= 0)
        return MRT_OK;
    char wn[32], name[32], ctx[160];
    snprintf(ctx, sizeof ctx, "%s: cannot make a stream of %s wait for %s", what ? what : "wait",
             mrt_device_str(wait_dev, wn, sizeof wn), mrt_device_str(d, name, sizeof name));
    if (rt_device_usable(wait_dev, ctx) != MRT_OK || rt_device_usable(d, ctx) != MRT_OK)
        return MRT_ERR_DEVICE;
    return rt_cuda_stream_wait(wait_dev.index, waiter, d.index, stream, what ? what : "wait");
}

/* ---------------------------------------------------------------- copies and pointers */

mrt_status mrt_memcpy(mrt_device dst_dev, void *dst, mrt_device src_dev, const void *src, size_t bytes,
                      void *stream)
{
    char dn[32], sn[32], prefix[192];
    mrt_device_str(dst_dev, dn, sizeof dn);
    mrt_device_str(src_dev, sn, sizeof sn);
    if (bytes == 0)
        return MRT_OK;
    if (!dst || !src)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "cannot copy %zu bytes from %s to %s: %s "
                             "pointer is NULL", bytes, sn, dn, !src ? "source" : "destination");
    snprintf(prefix, sizeof prefix, "cannot copy %zu bytes from %s to %s: %s is not present",
             bytes, sn, dn, sn);
    if (rt_device_present(src_dev, prefix) != MRT_OK)
        return MRT_ERR_DEVICE;
    snprintf(prefix, sizeof prefix, "cannot copy %zu bytes from %s to %s: %s is not present",
             bytes, sn, dn, dn);
    if (rt_device_present(dst_dev, prefix) != MRT_OK)
        return MRT_ERR_DEVICE;
    if (rt_fake_cuda_count(NULL) >= 0 && (src_dev.kind == MRT_DEVICE_CUDA ||
                                          dst_dev.kind == MRT_DEVICE_CUDA)) {
        snprintf(prefix, sizeof prefix, "cannot copy %zu bytes from %s to %s", bytes, sn, dn);
        return rt_fake_cuda_refuse(src_dev.kind == MRT_DEVICE_CUDA ? src_dev.index
                                                                   : dst_dev.index, prefix);
    }
    if (dst_dev.kind == MRT_DEVICE_CPU && src_dev.kind == MRT_DEVICE_CPU) {
        memmove(dst, src, bytes); /* host memory is shared by every cpu:N */
        return MRT_OK;
    }
    return rt_cuda_memcpy(dst_dev, dst, src_dev, src, bytes, stream);
}

mrt_status mrt_pointer_device(const void *p, mrt_device *out)
{
    if (!out)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_pointer_device: out is NULL");
    out->kind = MRT_DEVICE_CPU;
    out->index = 0;
    /* Without a visible CUDA device no pointer can be device memory: ask nothing more. Nor
     * with fake ones (MODELRT_TEST_FAKE_CUDA), which hold no memory. */
    if (!p || mrt_cuda_device_count(NULL) == 0 || rt_fake_cuda_count(NULL) >= 0)
        return MRT_OK;
    int idx = rt_cuda_pointer_index(p);
    if (idx >= 0) {
        out->kind = MRT_DEVICE_CUDA;
        out->index = idx;
    }
    return MRT_OK;
}

/* ---------------------------------------------------------------- GEMM */

/* c[N] = alpha * a @ op(B) + beta * c for one row a[K] (element k at a[k * inc]): the GEMM's
 * M == 1 case. oneDNN takes a GEMV path there whose sums depend on the thread count (measured:
 * 1x64x4608 gives 63 of 64 different results on 1 and 2 threads; M >= 2 agree), so it is done
 * here, in a summation order fixed by K alone:
 *   B [K, N] (tb == 0): each output's sum runs over k in order (the inner loop is over n and
 *   vectorizes; B is read row by row);
 *   B stored [N, K] (tb): one dot product per output in 16 partial sums (lane j takes k = j mod
 *   16 while 16 remain), then the partial sums added in lane order, then the k left over (a
 *   strided a, trans_a: every k in order, after the empty partial sums).
 * The threads split the outputs N into blocks (RT_GEMV_NB columns; tb: RT_GEMV_NBT) when N * K
 * reaches MRT_PAR_MIN, whole dot products each, so no sum depends on the thread count or on the
 * block. Memory-bound, as any GEMV is (B is read once): with AVX-512 (mrt_cpu_simd_avx512) the
 * blocks run as rt_gemv_*_avx512, the same multiplies and adds in the same order (separate, no
 * FMA, as the portable code under -ffp-contract=off), so both give the same bits; tb reads 4 rows
 * of B at a time. MobileNetV2's classifier (1x1280 @ 1280x1000, 5 MB): 0.25 ms on one thread
 * before (portable, and serial under rt_cpu_gemm's `small`), docs/runtime.md for after. */
#ifdef MRT_WITH_DNNL /* OpenBLAS (make DNNL=0) does M == 1 itself */
enum { RT_GEMV_NB = 128, RT_GEMV_NBT = 16 };

/* Block [n0, n1) of the portable GEMV into acc[n - n0]. */
static void rt_gemv_block(int tb, int64_t n0, int64_t n1, int64_t K, const float *a, int64_t inc, const float *B,
                          int64_t ldb, float *acc)
{
    for (int64_t n = n0; n < n1; n++)
        acc[n - n0] = 0.0f;
    if (!tb) {
        for (int64_t k = 0; k < K; k++) {
            const float ak = a[k * inc];
            const float *b = B + k * ldb;
            for (int64_t n = n0; n < n1; n++)
                acc[n - n0] += ak * b[n];
        }
        return;
    }
    for (int64_t n = n0; n < n1; n++) { /* 16 partial sums, added in a fixed order: it vectorizes */
        const float *b = B + n * ldb;
        float part[16] = {0}, s = 0.0f;
        int64_t k = 0;
        if (inc == 1)
            for (; k + 16 <= K; k += 16)
                for (int j = 0; j < 16; j++)
                    part[j] += a[k + j] * b[k + j];
        for (int j = 0; j < 16; j++)
            s += part[j];
        for (; k < K; k++)
            s += a[k * inc] * b[k];
        acc[n - n0] = s;
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#define GEMV_AVX512 __attribute__((target("avx512f")))

/* rt_gemv_block's tb == 0 case (a[k * inc] broadcast): the columns [n0, n1), n1 - n0 <=
 * RT_GEMV_NB, in 8 registers of 16 (the last ones masked). */
GEMV_AVX512 static void rt_gemv_n_avx512(int64_t n0, int64_t n1, int64_t K, const float *a, int64_t inc,
                                         const float *B, int64_t ldb, float *acc)
{
    __m512 s[RT_GEMV_NB / 16];
    __mmask16 msk[RT_GEMV_NB / 16];
    const int64_t w = n1 - n0;
    for (int j = 0; j < RT_GEMV_NB / 16; j++) {
        const int64_t left = w - 16 * j;
        msk[j] = left >= 16 ? (__mmask16)0xffff : left > 0 ? (__mmask16)((1u << left) - 1u) : 0;
        s[j] = _mm512_setzero_ps();
    }
    const int nv = (int)((w + 15) / 16);
    for (int64_t k = 0; k < K; k++) {
        const __m512 ak = _mm512_set1_ps(a[k * inc]);
        const float *b = B + k * ldb + n0;
        for (int j = 0; j < nv; j++)
            s[j] = _mm512_add_ps(s[j], _mm512_mul_ps(ak, _mm512_maskz_loadu_ps(msk[j], b + 16 * j)));
    }
    for (int j = 0; j < nv; j++)
        _mm512_mask_storeu_ps(acc + 16 * j, msk[j], s[j]);
}

/* The lanes of v added in lane order onto 0.0f, then a[k] b[k] for the k from k0 (tb's tail). */
GEMV_AVX512 static inline float rt_gemv_finish(__m512 v, int64_t k0, int64_t K, const float *a, const float *b)
{
    float part[16], s = 0.0f;
    _mm512_storeu_ps(part, v);
    for (int j = 0; j < 16; j++)
        s += part[j];
    for (int64_t k = k0; k < K; k++)
        s += a[k] * b[k];
    return s;
}

/* rt_gemv_block's tb case with inc == 1: rows n0.. of B [N, K], 4 at a time. */
GEMV_AVX512 static void rt_gemv_t_avx512(int64_t n0, int64_t n1, int64_t K, const float *a, const float *B,
                                         int64_t ldb, float *acc)
{
    const int64_t K16 = K / 16 * 16;
    int64_t n = n0;
    for (; n + 4 <= n1; n += 4) {
        const float *b0 = B + n * ldb, *b1 = b0 + ldb, *b2 = b1 + ldb, *b3 = b2 + ldb;
        __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
        for (int64_t k = 0; k < K16; k += 16) {
            const __m512 ak = _mm512_loadu_ps(a + k);
            s0 = _mm512_add_ps(s0, _mm512_mul_ps(ak, _mm512_loadu_ps(b0 + k)));
            s1 = _mm512_add_ps(s1, _mm512_mul_ps(ak, _mm512_loadu_ps(b1 + k)));
            s2 = _mm512_add_ps(s2, _mm512_mul_ps(ak, _mm512_loadu_ps(b2 + k)));
            s3 = _mm512_add_ps(s3, _mm512_mul_ps(ak, _mm512_loadu_ps(b3 + k)));
        }
        acc[n - n0] = rt_gemv_finish(s0, K16, K, a, b0);
        acc[n + 1 - n0] = rt_gemv_finish(s1, K16, K, a, b1);
        acc[n + 2 - n0] = rt_gemv_finish(s2, K16, K, a, b2);
        acc[n + 3 - n0] = rt_gemv_finish(s3, K16, K, a, b3);
    }
    for (; n < n1; n++) {
        const float *b0 = B + n * ldb;
        __m512 s0 = _mm512_setzero_ps();
        for (int64_t k = 0; k < K16; k += 16)
            s0 = _mm512_add_ps(s0, _mm512_mul_ps(_mm512_loadu_ps(a + k), _mm512_loadu_ps(b0 + k)));
        acc[n - n0] = rt_gemv_finish(s0, K16, K, a, b0);
    }
}
#endif

static void rt_cpu_gemv(int tb, int64_t N, int64_t K, float alpha, const float *a, int64_t inc, const float *B,
                        int64_t ldb, float beta, float *c)
{
#if defined(__x86_64__) && defined(__GNUC__)
    const int avx = mrt_cpu_simd_avx512() && (!tb || inc == 1);
#else
    const int avx = 0;
#endif
    const int64_t nb = tb ? RT_GEMV_NBT : RT_GEMV_NB, nblk = (N + nb - 1) / nb;
    MRT_PRAGMA(omp parallel for schedule(static) if(N * K >= MRT_PAR_MIN))
    for (int64_t i = 0; i < nblk; i++) {
        const int64_t n0 = i * nb, n1 = n0 + nb < N ? n0 + nb : N;
        float acc[RT_GEMV_NB];
#if defined(__x86_64__) && defined(__GNUC__)
        if (avx && tb)
            rt_gemv_t_avx512(n0, n1, K, a, B, ldb, acc);
        else if (avx)
            rt_gemv_n_avx512(n0, n1, K, a, inc, B, ldb, acc);
        else
#endif
            rt_gemv_block(tb, n0, n1, K, a, inc, B, ldb, acc);
        for (int64_t n = n0; n < n1; n++)
            c[n] = beta == 0.0f ? alpha * acc[n - n0] : alpha * acc[n - n0] + beta * c[n];
    }
}
#endif

void mrt_cpu_sgemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                   const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    if (M <= 0 || N <= 0)
        return;
    if (K <= 0) { /* C = beta * C (the libraries reject lda < 1 here) */
        for (int64_t r = 0; r < M; r++)
            for (int64_t c = 0; c < N; c++)
                C[r * ldc + c] = beta == 0.0f ? 0.0f : beta * C[r * ldc + c];
        return;
    }
#ifdef MRT_WITH_DNNL
    if (M == 1) {
        rt_cpu_gemv(tb, N, K, alpha, A, ta ? lda : 1, B, ldb, beta, C);
        return;
    }
    /* A small GEMM on the calling thread alone (RT_GEMM_SERIAL_MACS): dnnl_sgemm sizes its team
     * by omp_get_max_threads(). */
    int nt = 0;
#ifdef _OPENMP
    if (M * N * K < RT_GEMM_SERIAL_MACS && !omp_in_parallel() && (nt = omp_get_max_threads()) > 1)
        omp_set_num_threads(1);
    else
        nt = 0;
#endif
    /* The arguments are valid by construction (mrt_gemm_f32 checks a caller's; the compiler
     * derives the rest from checked shapes), so dnnl_sgemm fails only on a library fault. */
    dnnl_status_t gst = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#ifdef _OPENMP
    if (nt)
        omp_set_num_threads(nt);
#endif
    if (gst != dnnl_success) {
        fprintf(stderr, "modelrt: internal error: dnnl_sgemm(%c, %c, M=%lld, N=%lld, K=%lld, lda=%lld, ldb=%lld, "
                "ldc=%lld) failed\n", ta ? 'T' : 'N', tb ? 'T' : 'N', (long long)M, (long long)N, (long long)K,
                (long long)lda, (long long)ldb, (long long)ldc);
        abort();
    }
#else
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K,
                alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
#endif
}

/* C_i = alpha * op(A_i) @ op(B_i) + beta * C_i on the CPU for i < batch. Items whose C blocks
 * cannot overlap run concurrently, one GEMM per thread, when each is too small to use every
 * thread by itself (attention's per-head products); otherwise in order, so a C stride of 0
 * accumulates as a loop would, and each GEMM uses the whole pool. */
static void rt_cpu_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                        int64_t sA, const float *B, int ldb, int64_t sB, float beta, float *C,
                        int ldc, int64_t sC, int64_t batch)
{
    int disjoint = batch > 1 && sC >= (int64_t)(M - 1) * ldc + N;
    /* RT_GEMM_SERIAL_MACS (1M multiply-adds, rt_internal.h says why) */
    int64_t macs = (int64_t)M * N * (K > 0 ? K : 1);
    int small = macs < RT_GEMM_SERIAL_MACS;
#ifdef MRT_WITH_DNNL
    if (M == 1 && K > 0 && !disjoint) {
        /* a GEMV (mrt_cpu_sgemm's rt_cpu_gemv) decides its own split: over the outputs, at
         * MRT_PAR_MIN, thread-count independent (MobileNetV2's classifier, 1.3M multiply-adds,
         * ran serially here at half the rate); OpenBLAS's (make DNNL=0) keeps the rule below */
        for (int64_t i = 0; i < batch; i++)
            mrt_cpu_sgemm(ta, tb, M, N, K, alpha, A + i * sA, lda, B + i * sB, ldb, beta, C + i * sC, ldc);
        return;
    }
#endif
    if (disjoint && small) {
        /* the whole batch under RT_GEMM_BATCH_PAR_MACS on the calling thread (the imported BERT's
         * 4 heads of 64x64x16: a fork/join of the team for 262K multiply-adds) */
        MRT_PRAGMA(omp parallel for schedule(static) if(macs * batch >= RT_GEMM_BATCH_PAR_MACS))
        for (int64_t i = 0; i < batch; i++)
            mrt_cpu_sgemm(ta, tb, M, N, K, alpha, A + i * sA, lda, B + i * sB, ldb, beta, C + i * sC, ldc);
        return;
    }
    if (small) {
#ifdef _OPENMP
        int team = omp_get_max_threads(); /* oneDNN sizes its team by it: 1 opens no parallel region */
        omp_set_num_threads(1);
#endif
        for (int64_t i = 0; i < batch; i++)
            mrt_cpu_sgemm(ta, tb, M, N, K, alpha, A + i * sA, lda, B + i * sB, ldb, beta, C + i * sC, ldc);
#ifdef _OPENMP
        omp_set_num_threads(team);
#endif
        return;
    }
    for (int64_t i = 0; i < batch; i++)
        mrt_cpu_sgemm(ta, tb, M, N, K, alpha, A + i * sA, lda, B + i * sB, ldb, beta, C + i * sC, ldc);
}

mrt_status mrt_gemm_f32(mrt_device d, void *stream, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                        float alpha, const float *A, int64_t lda, int64_t strideA, const float *B, int64_t ldb,
                        int64_t strideB, float beta, float *C, int64_t ldc, int64_t strideC, int64_t batch)
{
    char name[32];
    mrt_device_str(d, name, sizeof name);
    if (M < 0 || N < 0 || K < 0 || batch < 0 || M > INT_MAX || N > INT_MAX || K > INT_MAX ||
        batch > INT_MAX)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "gemm on %s: M=%lld N=%lld K=%lld batch=%lld "
                             "must each be in 0..%d", name, (long long)M, (long long)N,
                             (long long)K, (long long)batch, INT_MAX);
    /* Row-major leading dimensions: the row length of each stored matrix, at least 1. */
    int64_t need_a = trans_a ? M : K, need_b = trans_b ? K : N;
    if (lda < (need_a > 1 ? need_a : 1) || ldb < (need_b > 1 ? need_b : 1) ||
        ldc < (N > 1 ? N : 1) || lda > INT_MAX || ldb > INT_MAX || ldc > INT_MAX)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "gemm on %s: leading dimensions lda=%lld "
                             "ldb=%lld ldc=%lld, need lda >= %lld, ldb >= %lld, ldc >= %lld and "
                             "each <= %d", name, (long long)lda, (long long)ldb, (long long)ldc,
                             (long long)(need_a > 1 ? need_a : 1),
                             (long long)(need_b > 1 ? need_b : 1), (long long)(N > 1 ? N : 1),
                             INT_MAX);
    if (strideA < 0 || strideB < 0 || strideC < 0)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "gemm on %s: negative batch stride", name);
    if (M == 0 || N == 0 || batch == 0)
        return MRT_OK;
    if (!C || (K > 0 && (!A || !B)))
        return mrt_set_error(MRT_ERR_INVALID_ARG, "gemm on %s: NULL matrix", name);
    char what[64];
    snprintf(what, sizeof what, "gemm on %s", name);
    if (rt_device_usable(d, what) != MRT_OK)
        return MRT_ERR_DEVICE;
    if (d.kind == MRT_DEVICE_CPU) {
        rt_cpu_gemm(trans_a, trans_b, (int)M, (int)N, (int)K, alpha, A, (int)lda, strideA, B,
                    (int)ldb, strideB, beta, C, (int)ldc, strideC, batch);
        return MRT_OK;
    }
    return rt_cuda_gemm(d.index, stream, trans_a, trans_b, (int)M, (int)N, (int)K, alpha, A,
                        (int)lda, strideA, B, (int)ldb, strideB, beta, C, (int)ldc, strideC,
                        (int)batch);
}

mrt_status mrt_gemm_bias_act_f32(mrt_device d, void *stream, int trans_b, int64_t M, int64_t N, int64_t K,
                                 const float *A, int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc,
                                 const float *bias, int act)
{
    char name[32];
    mrt_device_str(d, name, sizeof name);
    if (act < 0 || act > 2)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "gemm on %s: unknown activation %d (0 none, 1 relu, 2 gelu_tanh)",
                             name, act);
    char what[64];
    snprintf(what, sizeof what, "gemm on %s", name);
    if (d.kind == MRT_DEVICE_CUDA && M > 0 && N > 0 && rt_device_usable(d, what) != MRT_OK)
        return MRT_ERR_DEVICE; /* before cuBLASLt: an absent or fake device is never asked */
    if (d.kind == MRT_DEVICE_CUDA && M > 0 && N > 0 && M <= INT_MAX && N <= INT_MAX && K <= INT_MAX &&
        lda <= INT_MAX && ldb <= INT_MAX && ldc <= INT_MAX)
        return rt_cuda_gemm_bias_act(d.index, stream, trans_b, (int)M, (int)N, (int)K, A, (int)lda, B, (int)ldb, C,
                                     (int)ldc, bias, act);
    mrt_status st = mrt_gemm_f32(d, stream, 0, trans_b, M, N, K, 1.0f, A, lda, 0, B, ldb, 0, 0.0f, C, ldc, 0, 1);
    if (st != MRT_OK || d.kind != MRT_DEVICE_CPU)
        return st;
    if (!bias && !act)
        return MRT_OK;
    MRT_PRAGMA(omp parallel for schedule(static) if(M * N >= MRT_PAR_MIN))
    for (int64_t r = 0; r < M; r++) { /* one vectorized loop per (bias, act), as mrt_bias_act computes */
        float *row = C + r * ldc;
        if (act == 2) {
            mrt_cpu_gelu_f32(row, bias, N, 1); /* the v3 / v4 copy where the CPU has it */
        } else if (act == 1 && bias) {
            MRT_PRAGMA(omp simd)
            for (int64_t c = 0; c < N; c++) row[c] = mrt_relu(row[c] + bias[c]);
        } else if (act == 1) {
            MRT_PRAGMA(omp simd)
            for (int64_t c = 0; c < N; c++) row[c] = mrt_relu(row[c]);
        } else {
            MRT_PRAGMA(omp simd)
            for (int64_t c = 0; c < N; c++) row[c] += bias[c];
        }
    }
    return MRT_OK;
}

/* ---------------------------------------------------------------- CPU threads */

#ifndef MRT_WITH_DNNL
/* OpenBLAS's own knob (declared in its cblas.h in most builds; declared here for the others). */
void openblas_set_num_threads(int n);
#endif

/* The thread count in environment variable `var`: 0 when it is unset or empty, 1 and *out when
 * it is a count from 1 to 4096 (decimal digits only: no sign, blanks, hex or suffix), -1
 * otherwise. `list`: the variable may be an OpenMP list ("4,2": a count per nesting level), whose
 * first count is the one the kernels use. */
static int rt_env_threads(const char *var, int list, int *out)
{
    const char *v = getenv(var);
    if (!v || !*v)
        return 0;
    long n = 0;
    const char *p = v;
    for (; *p >= '0' && *p <= '9' && n <= 4096; p++)
        n = n * 10 + (*p - '0');
    if (p == v || n < 1 || n > 4096)
        return -1;
    if (*p) {
        if (!list || *p != ',' || !p[1])
            return -1;
        for (p++; *p; p++) /* the later levels: digits and commas, no empty item */
            if (!((*p >= '0' && *p <= '9') || (*p == ',' && p[-1] != ',' && p[1])))
                return -1;
    }
    *out = (int)n;
    return 1;
}

static int rt_threads_set; /* the last mrt_set_threads's count; 0 before the first */

int rt_cpu_threads(void)
{
    return __atomic_load_n(&rt_threads_set, __ATOMIC_RELAXED);
}

mrt_status mrt_set_threads(int n, int *used)
{
    if (n < 0 || n > 4096)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "threads must be 1..4096 (or 0 for the default), got %d", n);
    if (n == 0) {
        static const char *vars[] = {"MODELRT_THREADS", "OMP_NUM_THREADS"};
        for (int i = 0; i < 2 && n == 0; i++) {
            int r = rt_env_threads(vars[i], i == 1, &n);
            if (r < 0)
                return mrt_set_error(MRT_ERR_INVALID_ARG, "%s='%s' is not a thread count (1..4096)", vars[i],
                                     getenv(vars[i]));
        }
    }
    if (n == 0) {
        cpu_set_t set;
        n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : (int)sysconf(_SC_NPROCESSORS_ONLN);
        if (n < 1)
            n = 1;
    }
    __atomic_store_n(&rt_threads_set, n, __ATOMIC_RELAXED);
#ifdef _OPENMP
    omp_set_num_threads(n); /* the one pool: the generated loops, the kernels and oneDNN's GEMMs */
#endif
#ifndef MRT_WITH_DNNL
    openblas_set_num_threads(n);
#endif
    if (used)
        *used = n;
    return MRT_OK;
}
