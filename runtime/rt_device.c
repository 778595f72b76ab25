/*
 * rt_device.c — device strings and device memory. Parsing ("cpu", "cpu:N", "cuda", "cuda:N",
 * "auto") is pure; selection resolves a parsed device against what this build and machine
 * offer. This build has no CUDA: `auto` resolves to cpu:0 and says so through the log hook, and
 * an explicit CUDA device is an error that lists what is present, never a silent fallback.
 * CPU devices cpu:0..cpu:7 are distinct ordinals for placement; they share host memory.
 */
#include "rt_internal.h"

#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#define RT_MAX_ORDINAL 1023   /* largest N accepted in "cpu:N" / "cuda:N" */
#define RT_N_CPU_DEVICES 8    /* cpu:0 .. cpu:7 */
#define RT_CPU_ALIGN 64

static const char rt_device_forms[] = "expected 'auto', 'cpu', 'cpu:N', 'cuda' or 'cuda:N' "
                                      "with N a decimal ordinal 0..1023";

/* Parse the ordinal after "kind:" in `p`: decimal digits only, 0..RT_MAX_ORDINAL. */
static int parse_ordinal(const char *p, int *out)
{
    if (*p == '\0')
        return -1;
    long v = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        v = v * 10 + (*p - '0');
        if (v > RT_MAX_ORDINAL) /* checked each digit, so "99999999999" cannot overflow */
            return -1;
    }
    *out = (int)v;
    return 0;
}

mrt_status mrt_device_parse(const char *s, mrt_device *out, int *is_auto)
{
    if (!out)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_device_parse: out is NULL");
    if (!s)
        return mrt_set_error(MRT_ERR_DEVICE, "device string is NULL; %s", rt_device_forms);
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
        return mrt_set_error(MRT_ERR_DEVICE, "unknown device '%s'; %s", s, rt_device_forms);
    }
    if (rest && *rest != '\0') {
        if (*rest != ':' || parse_ordinal(rest + 1, &d.index) != 0)
            return mrt_set_error(MRT_ERR_DEVICE, "bad device '%s'; %s", s, rt_device_forms);
    }
    *out = d;
    if (is_auto)
        *is_auto = automatic;
    return MRT_OK;
}

mrt_status mrt_device_select(const char *s, mrt_device *out)
{
    if (!out)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_device_select: out is NULL");
    const char *from_env = NULL;
    if (!s) {
        const char *e = getenv("MODELRT_DEVICE");
        if (e && *e) {
            s = e;
            from_env = " (from MODELRT_DEVICE)";
        } else {
            s = "auto";
        }
    }
    mrt_device d;
    int automatic = 0;
    if (mrt_device_parse(s, &d, &automatic) != MRT_OK) {
        if (from_env)
            return mrt_set_error(MRT_ERR_DEVICE, "%s%s", mrt_last_error(), from_env);
        return MRT_ERR_DEVICE;
    }
    if (automatic) {
        mrt_log(MRT_LOG_INFO, "auto selected cpu:0 (no CUDA support in this build)");
        *out = d;
        return MRT_OK;
    }
    char name[32];
    mrt_device_str(d, name, sizeof name);
    if (d.kind == MRT_DEVICE_CUDA)
        return mrt_set_error(MRT_ERR_DEVICE,
                             "device %s requested%s, but this build of modelrt has no CUDA "
                             "support; devices present: cpu:0..cpu:%d",
                             name, from_env ? from_env : "", RT_N_CPU_DEVICES - 1);
    if (d.index >= RT_N_CPU_DEVICES)
        return mrt_set_error(MRT_ERR_DEVICE,
                             "device %s requested%s, but it is not present; devices present: "
                             "cpu:0..cpu:%d",
                             name, from_env ? from_env : "", RT_N_CPU_DEVICES - 1);
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

void *mrt_alloc(mrt_device d, size_t bytes)
{
    char name[32];
    mrt_device_str(d, name, sizeof name);
    if (d.kind != MRT_DEVICE_CPU) {
        mrt_set_error(MRT_ERR_DEVICE, "cannot allocate %zu bytes on %s: this build of modelrt "
                      "has no CUDA support", bytes, name);
        return NULL;
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
    (void)d;
    free(p); /* CPU only in this build; NULL is fine */
}
