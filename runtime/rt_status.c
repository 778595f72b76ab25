/*
 * rt_status.c — status codes, the thread-local last error, the log hook, and the small dtype
 * and tensor helpers every other runtime file uses. The library reports through these two
 * channels only: a status plus mrt_last_error(), and notices sent to the caller's log hook.
 */
#include "rt_internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---------------------------------------------------------------- errors */

#define RT_ERR_MAX 1024 /* the header promises messages are cut at 1023 bytes */

static _Thread_local char rt_last_error[RT_ERR_MAX];

const char *mrt_last_error(void) { return rt_last_error; }

const char *mrt_status_name(mrt_status s)
{
    switch (s) {
    case MRT_OK: return "MRT_OK";
    case MRT_ERR_INVALID_ARG: return "MRT_ERR_INVALID_ARG";
    case MRT_ERR_DEVICE: return "MRT_ERR_DEVICE";
    case MRT_ERR_IO: return "MRT_ERR_IO";
    case MRT_ERR_FORMAT: return "MRT_ERR_FORMAT";
    case MRT_ERR_MISMATCH: return "MRT_ERR_MISMATCH";
    case MRT_ERR_OOM: return "MRT_ERR_OOM";
    case MRT_ERR_CUDA: return "MRT_ERR_CUDA";
    case MRT_ERR_INTERNAL: return "MRT_ERR_INTERNAL";
    case MRT_ERR_NOT_FINITE: return "MRT_ERR_NOT_FINITE";
    }
    return "MRT_ERR_UNKNOWN";
}

mrt_status mrt_set_error(mrt_status s, const char *fmt, ...)
{
    /* Format into a scratch buffer first: callers may pass mrt_last_error() itself as an
     * argument (to add context to an inner error), and vsnprintf must not overlap. */
    char tmp[RT_ERR_MAX];
    int k = 0;
    tmp[0] = '\0';
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        k = vsnprintf(tmp, sizeof tmp, fmt, ap);
        va_end(ap);
    }
    if (k < 0)
        snprintf(tmp, sizeof tmp, "%s (error message could not be formatted)", mrt_status_name(s));
    memcpy(rt_last_error, tmp, sizeof tmp);
    rt_last_error[RT_ERR_MAX - 1] = '\0';
    return s;
}

/* ---------------------------------------------------------------- log hook */

/* Process-wide, set once by the program before it starts threads (documented as such). */
static mrt_log_fn rt_log_fn;
static void *rt_log_user;

void mrt_set_log_hook(mrt_log_fn fn, void *user)
{
    rt_log_fn = fn;
    rt_log_user = user;
}

void rt_log_hook_get(mrt_log_fn *fn, void **user)
{
    *fn = rt_log_fn;
    *user = rt_log_user;
}

void mrt_log(mrt_log_level level, const char *fmt, ...)
{
    mrt_log_fn fn = rt_log_fn;
    if (!fn || !fmt)
        return;
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (k < 0) {
        va_end(ap2);
        return;
    }
    char small[256];
    char *msg = (size_t)k < sizeof small ? small : malloc((size_t)k + 1);
    if (!msg) { /* out of memory: deliver the notice cut rather than not at all */
        msg = small;
        vsnprintf(msg, sizeof small, fmt, ap2);
    } else {
        vsnprintf(msg, (size_t)k + 1, fmt, ap2);
    }
    va_end(ap2);
    /* The hook wants a line without a trailing newline. */
    size_t len = strlen(msg);
    while (len > 0 && msg[len - 1] == '\n')
        msg[--len] = '\0';
    fn(level, msg, rt_log_user);
    if (msg != small)
        free(msg);
}

/* ---------------------------------------------------------------- dtypes, shapes, tensors */

int rt_dtype_valid(mrt_dtype dt)
{
    return dt == MRT_F32 || dt == MRT_I32 || dt == MRT_I64 || dt == MRT_BOOL || dt == MRT_F16 || dt == MRT_BF16;
}

size_t mrt_dtype_size(mrt_dtype dt)
{
    switch (dt) {
    case MRT_F32: return 4;
    case MRT_I32: return 4;
    case MRT_I64: return 8;
    case MRT_BOOL: return 1;
    case MRT_F16: return 2;
    case MRT_BF16: return 2;
    }
    return 0;
}

const char *mrt_dtype_name(mrt_dtype dt)
{
    switch (dt) {
    case MRT_F32: return "f32";
    case MRT_I32: return "i32";
    case MRT_I64: return "i64";
    case MRT_BOOL: return "bool";
    case MRT_F16: return "f16";
    case MRT_BF16: return "bf16";
    }
    return "?";
}

void mrt_tensor_free(mrt_tensor *t)
{
    if (!t)
        return;
    free(t->data);
    memset(t, 0, sizeof *t);
}

char *rt_shape_str(char *buf, size_t n, const int64_t *shape, int rank)
{
    if (!buf || n == 0)
        return buf;
    size_t used = 0;
    buf[0] = '\0';
    if (rank < 0 || rank > MRT_MAX_RANK) {
        snprintf(buf, n, "[rank %d]", rank);
        return buf;
    }
    for (int i = 0; i <= rank && used < n; i++) {
        int k;
        if (i == rank)
            k = snprintf(buf + used, n - used, "%s]", rank == 0 ? "[" : "");
        else
            k = snprintf(buf + used, n - used, "%s%lld", i == 0 ? "[" : ",", (long long)shape[i]);
        if (k < 0)
            break;
        used += (size_t)k;
    }
    return buf;
}

int rt_shape_numel(const int64_t *shape, int rank, uint64_t *numel)
{
    uint64_t n = 1;
    if (rank < 0 || rank > MRT_MAX_RANK)
        return -1;
    for (int i = 0; i < rank; i++) {
        if (shape[i] < 0)
            return -1;
        if (__builtin_mul_overflow(n, (uint64_t)shape[i], &n))
            return -1;
    }
    *numel = n;
    return 0;
}

char *rt_strdup_printf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return NULL;
    char *s = malloc((size_t)n + 1);
    if (!s)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

int rt_parse_real(const char *s, double *x)
{
    /* [+-]digits[.digits][(e|E)[+-]digits], or [+-].digits...: what strtod would also read as
     * hex, inf, nan or after leading blanks is refused before strtod sees it */
    const char *p = s;
    if (*p == '+' || *p == '-')
        p++;
    int digits = 0;
    while (isdigit((unsigned char)*p))
        p++, digits++;
    if (*p == '.')
        for (p++; isdigit((unsigned char)*p); p++)
            digits++;
    if (!digits)
        return 0;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (!isdigit((unsigned char)*p))
            return 0;
        while (isdigit((unsigned char)*p))
            p++;
    }
    if (*p)
        return 0;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (*end || errno == ERANGE || !isfinite(v))
        return 0;
    *x = v;
    return 1;
}

int rt_env_flag(const char *name, int dflt)
{
    static const char *const on[] = {"1", "true", "yes", "on"}, *const off[] = {"0", "false", "no", "off"};
    const char *s = getenv(name);
    if (!s || !*s)
        return dflt;
    for (size_t i = 0; i < sizeof on / sizeof on[0]; i++) {
        if (!strcasecmp(s, on[i]))
            return 1;
        if (!strcasecmp(s, off[i]))
            return 0;
    }
    /* warned once per variable: the names seen (a handful of variables; no lock needed for a
     * repeated warning's harm) */
    static const char *warned[16];
    static int nwarned;
    for (int i = 0; i < nwarned; i++)
        if (!strcmp(warned[i], name))
            return dflt;
    if (nwarned < (int)(sizeof warned / sizeof warned[0]))
        warned[nwarned++] = name;
    mrt_log(MRT_LOG_WARN, "%s='%s' is not an on/off value (1, true, yes, on or 0, false, no, off): taken as unset "
            "(the default)", name, s);
    return dflt;
}

mrt_status rt_env_seconds(const char *name, double dflt, double *out)
{
    const char *s = getenv(name);
    *out = dflt;
    if (!s || !*s)
        return MRT_OK;
    double v;
    if (!rt_parse_real(s, &v) || !(v > 0))
        return mrt_set_error(MRT_ERR_INVALID_ARG, "%s='%s': not a positive number of seconds (unset: %g)", name, s, dflt);
    *out = v;
    return MRT_OK;
}
