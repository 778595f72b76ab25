/*
 * rt_npy.c — read and write NumPy .npy files, the tensors that go in and out of a generated
 * executable (https://numpy.org/devdocs/reference/generated/numpy.lib.format.html).
 *
 * Layout: "\x93NUMPY", major, minor, header length (u16 LE for 1.0, u32 LE for 2.0/3.0), then a
 * Python-literal dict {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), } padded with
 * spaces and ended by '\n', then the raw C-order data. The dict is parsed by hand (a tiny
 * recursive-descent reader over three keys, any order, any whitespace); every number is checked
 * before use and the data size must match the shape exactly. Writing goes to a mkstemp() file
 * in the target's directory and is renamed into place, so readers see the old file or the new
 * one, never a part. The target is the path, or the regular file a symlink names (the link is
 * kept); a FIFO, device node, directory or socket is refused, never replaced.
 */
#include "rt_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAX_HEADER (64u * 1024u * 1024u) /* far above anything NumPy writes */

/* ---------------------------------------------------------------- header dict parser */

typedef struct npy_parser {
    const char *s, *end;
    const char *path;
} npy_parser;

static void npy_ws(npy_parser *p)
{
    while (p->s < p->end && (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r'))
        p->s++;
}

static mrt_status npy_bad(npy_parser *p, const char *what)
{
    return mrt_set_error(MRT_ERR_FORMAT, "%s: malformed header: %s", p->path, what);
}

/* A quoted Python string ('...' or "...", no escapes needed for our keys and dtypes). */
static mrt_status npy_string(npy_parser *p, const char **str, size_t *len)
{
    npy_ws(p);
    if (p->s >= p->end || (*p->s != '\'' && *p->s != '"'))
        return npy_bad(p, "expected a quoted string");
    char q = *p->s++;
    const char *start = p->s;
    while (p->s < p->end && *p->s != q) {
        if (*p->s == '\\')
            return npy_bad(p, "escapes in strings are not supported");
        p->s++;
    }
    if (p->s >= p->end)
        return npy_bad(p, "unterminated string");
    *str = start;
    *len = (size_t)(p->s - start);
    p->s++;
    return MRT_OK;
}

static int npy_lit(npy_parser *p, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(p->end - p->s) >= n && memcmp(p->s, word, n) == 0) {
        p->s += n;
        return 1;
    }
    return 0;
}

/* (d0, d1, ...) with an optional trailing comma; "()" is rank 0. Counts entries beyond
 * MRT_MAX_RANK without storing them so the error can say the real rank. */
static mrt_status npy_shape(npy_parser *p, int64_t *shape, int *rank)
{
    npy_ws(p);
    if (p->s >= p->end || *p->s != '(')
        return npy_bad(p, "'shape' is not a tuple");
    p->s++;
    size_t count = 0;
    for (;;) {
        npy_ws(p);
        if (p->s < p->end && *p->s == ')') {
            p->s++;
            break;
        }
        int neg = 0;
        if (p->s < p->end && *p->s == '-') {
            neg = 1;
            p->s++;
        }
        if (p->s >= p->end || *p->s < '0' || *p->s > '9')
            return npy_bad(p, "'shape' entry is not an integer");
        uint64_t v = 0;
        int overflow = 0;
        while (p->s < p->end && *p->s >= '0' && *p->s <= '9') {
            if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, (uint64_t)(*p->s - '0'), &v))
                overflow = 1;
            p->s++;
        }
        if (p->s < p->end && *p->s == 'L') /* Python 2 long literal */
            p->s++;
        if (neg && overflow)
            return mrt_set_error(MRT_ERR_FORMAT, "%s: shape entry %zu is negative", p->path,
                                 count);
        if (neg && v != 0)
            return mrt_set_error(MRT_ERR_FORMAT, "%s: shape entry %zu is -%llu (negative)",
                                 p->path, count, (unsigned long long)v);
        if (overflow || v > (uint64_t)INT64_MAX)
            return mrt_set_error(MRT_ERR_FORMAT, "%s: shape entry %zu does not fit in 64 bits",
                                 p->path, count);
        if (count < MRT_MAX_RANK)
            shape[count] = (int64_t)v;
        count++;
        npy_ws(p);
        if (p->s < p->end && *p->s == ',') {
            p->s++;
            continue;
        }
        if (p->s < p->end && *p->s == ')') {
            p->s++;
            break;
        }
        return npy_bad(p, "expected ',' or ')' in 'shape'");
    }
    if (count > MRT_MAX_RANK)
        return mrt_set_error(MRT_ERR_FORMAT, "%s: rank %zu exceeds maximum %d", p->path, count,
                             MRT_MAX_RANK);
    *rank = (int)count;
    return MRT_OK;
}

/* The whole dict. On success *dt, *shape, *rank are set. */
static mrt_status npy_parse_header(const char *path, const char *h, size_t n, mrt_dtype *dt,
                                   int64_t *shape, int *rank)
{
    npy_parser p = {h, h + n, path};
    mrt_status st;
    int have_descr = 0, have_fortran = 0, have_shape = 0;
    npy_ws(&p);
    if (p.s >= p.end || *p.s != '{')
        return npy_bad(&p, "expected '{'");
    p.s++;
    for (;;) {
        npy_ws(&p);
        if (p.s < p.end && *p.s == '}') {
            p.s++;
            break;
        }
        const char *key;
        size_t klen;
        if ((st = npy_string(&p, &key, &klen)) != MRT_OK)
            return st;
        npy_ws(&p);
        if (p.s >= p.end || *p.s != ':')
            return npy_bad(&p, "expected ':' after a key");
        p.s++;
        npy_ws(&p);
        if (klen == 5 && memcmp(key, "descr", 5) == 0 && !have_descr) {
            have_descr = 1;
            if (p.s < p.end && *p.s == '[')
                return mrt_set_error(MRT_ERR_FORMAT, "%s: structured dtypes are not supported "
                                     "(expected '<f4', '<i4', '<i8', '|b1', '<f2' or '<u2' (bf16 bits))", path);
            const char *d;
            size_t dlen;
            if ((st = npy_string(&p, &d, &dlen)) != MRT_OK)
                return st;
            /* '<' little-endian, or '=' native, which is little-endian on every host we build on */
            if (dlen == 3 && (d[0] == '<' || d[0] == '=') && memcmp(d + 1, "f4", 2) == 0)
                *dt = MRT_F32;
            else if (dlen == 3 && (d[0] == '<' || d[0] == '=') && memcmp(d + 1, "i4", 2) == 0)
                *dt = MRT_I32;
            else if (dlen == 3 && (d[0] == '<' || d[0] == '=') && memcmp(d + 1, "i8", 2) == 0)
                *dt = MRT_I64;
            else if (dlen == 3 && (d[0] == '|' || d[0] == '<' || d[0] == '=') && memcmp(d + 1, "b1", 2) == 0)
                *dt = MRT_BOOL;
            else if (dlen == 3 && (d[0] == '<' || d[0] == '=') && memcmp(d + 1, "f2", 2) == 0)
                *dt = MRT_F16;
            else if (dlen == 3 && (d[0] == '<' || d[0] == '=') && memcmp(d + 1, "u2", 2) == 0)
                *dt = MRT_BF16; /* NumPy has no bfloat16: its bits, as uint16 (modelrt.h) */
            else
                return mrt_set_error(MRT_ERR_FORMAT, "%s: dtype '%.*s' not supported (expected "
                                     "'<f4', '<i4', '<i8', '|b1', '<f2' or '<u2' (bf16 bits))", path, (int)(dlen > 64 ? 64 : dlen),
                                     d);
        } else if (klen == 13 && memcmp(key, "fortran_order", 13) == 0 && !have_fortran) {
            have_fortran = 1;
            if (npy_lit(&p, "True"))
                return mrt_set_error(MRT_ERR_FORMAT, "%s: fortran_order True is not supported "
                                     "(save a C-order array, e.g. np.ascontiguousarray)", path);
            if (!npy_lit(&p, "False"))
                return npy_bad(&p, "'fortran_order' is not True or False");
        } else if (klen == 5 && memcmp(key, "shape", 5) == 0 && !have_shape) {
            have_shape = 1;
            if ((st = npy_shape(&p, shape, rank)) != MRT_OK)
                return st;
        } else {
            return mrt_set_error(MRT_ERR_FORMAT, "%s: malformed header: unexpected or repeated "
                                 "key '%.*s'", path, (int)(klen > 64 ? 64 : klen), key);
        }
        npy_ws(&p);
        if (p.s < p.end && *p.s == ',') {
            p.s++;
            continue;
        }
        if (p.s < p.end && *p.s == '}') {
            p.s++;
            break;
        }
        return npy_bad(&p, "expected ',' or '}'");
    }
    npy_ws(&p);
    if (p.s != p.end)
        return npy_bad(&p, "text after the closing '}'");
    if (!have_descr || !have_fortran || !have_shape)
        return mrt_set_error(MRT_ERR_FORMAT, "%s: malformed header: missing '%s'", path,
                             !have_descr ? "descr" : !have_fortran ? "fortran_order" : "shape");
    return MRT_OK;
}

/* ---------------------------------------------------------------- read */

static int npy_read_all(FILE *f, void *dst, size_t n)
{
    return fread(dst, 1, n, f) == n ? 0 : -1;
}

mrt_status mrt_npy_read(const char *path, mrt_tensor *out)
{
    if (!path || !out)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_npy_read: path or out is NULL");
    if (!*path)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_npy_read: the .npy path is empty (\"\")");
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f)
        return mrt_set_error(MRT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    mrt_status st;
    char *hdr = NULL;
    void *data = NULL;
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = mrt_set_error(MRT_ERR_IO, "%s: not a readable regular file", path);
        goto done;
    }
    uint64_t fsize = (uint64_t)sb.st_size;
    unsigned char pre[12];
    if (fsize < 10 || npy_read_all(f, pre, 10) != 0) {
        st = mrt_set_error(MRT_ERR_FORMAT, "%s: truncated: %llu bytes is too short for a .npy "
                           "header", path, (unsigned long long)fsize);
        goto done;
    }
    if (memcmp(pre, NPY_MAGIC, 6) != 0) {
        st = mrt_set_error(MRT_ERR_FORMAT, "%s: not a .npy file (bad magic)", path);
        goto done;
    }
    uint64_t hlen, hstart;
    if (pre[6] == 1) {
        hlen = (uint64_t)pre[8] | (uint64_t)pre[9] << 8;
        hstart = 10;
    } else if (pre[6] == 2 || pre[6] == 3) {
        if (fsize < 12 || npy_read_all(f, pre + 10, 2) != 0) {
            st = mrt_set_error(MRT_ERR_FORMAT, "%s: truncated header", path);
            goto done;
        }
        hlen = (uint64_t)pre[8] | (uint64_t)pre[9] << 8 | (uint64_t)pre[10] << 16 |
               (uint64_t)pre[11] << 24;
        hstart = 12;
    } else {
        st = mrt_set_error(MRT_ERR_FORMAT, "%s: unsupported .npy format version %d.%d", path,
                           pre[6], pre[7]);
        goto done;
    }
    if (hlen > fsize - hstart) {
        st = mrt_set_error(MRT_ERR_FORMAT, "%s: truncated header: %llu header bytes declared, "
                           "%llu in the file", path, (unsigned long long)hlen,
                           (unsigned long long)(fsize - hstart));
        goto done;
    }
    if (hlen > NPY_MAX_HEADER) {
        st = mrt_set_error(MRT_ERR_FORMAT, "%s: header length %llu is too large", path,
                           (unsigned long long)hlen);
        goto done;
    }
    hdr = malloc((size_t)hlen + 1);
    if (!hdr) {
        st = mrt_set_error(MRT_ERR_OOM, "%s: cannot allocate %llu bytes for the header", path,
                           (unsigned long long)hlen + 1);
        goto done;
    }
    if (npy_read_all(f, hdr, (size_t)hlen) != 0) {
        st = mrt_set_error(MRT_ERR_IO, "%s: cannot read the header", path);
        goto done;
    }
    hdr[hlen] = '\0';
    mrt_dtype dt = MRT_F32;
    int64_t shape[MRT_MAX_RANK] = {0};
    int rank = 0;
    if ((st = npy_parse_header(path, hdr, (size_t)hlen, &dt, shape, &rank)) != MRT_OK)
        goto done;
    uint64_t numel, nbytes;
    char sh[RT_SHAPE_STR_MAX];
    if (rt_shape_numel(shape, rank, &numel) != 0 ||
        __builtin_mul_overflow(numel, (uint64_t)mrt_dtype_size(dt), &nbytes) ||
        nbytes > (uint64_t)SIZE_MAX) {
        st = mrt_set_error(MRT_ERR_FORMAT, "%s: element count overflows 64 bits (shape %s)",
                           path, rt_shape_str(sh, sizeof sh, shape, rank));
        goto done;
    }
    uint64_t have = fsize - hstart - hlen;
    if (have != nbytes) {
        st = mrt_set_error(MRT_ERR_FORMAT, "%s: %s: data is %llu bytes, shape %s of %s needs "
                           "%llu", path, have < nbytes ? "truncated" : "trailing bytes",
                           (unsigned long long)have, rt_shape_str(sh, sizeof sh, shape, rank),
                           mrt_dtype_name(dt), (unsigned long long)nbytes);
        goto done;
    }
    data = malloc(nbytes ? (size_t)nbytes : 1);
    if (!data) {
        st = mrt_set_error(MRT_ERR_OOM, "%s: cannot allocate %llu bytes for the data", path,
                           (unsigned long long)nbytes);
        goto done;
    }
    if (npy_read_all(f, data, (size_t)nbytes) != 0) {
        st = mrt_set_error(MRT_ERR_IO, "%s: cannot read %llu bytes of data", path,
                           (unsigned long long)nbytes);
        goto done;
    }
    /* NumPy writes bool as bytes 0 and 1; another byte would compare unequal to true */
    for (uint64_t i = 0; dt == MRT_BOOL && i < nbytes; i++)
        if (((const unsigned char *)data)[i] > 1) {
            st = mrt_set_error(MRT_ERR_FORMAT, "%s: bool element %llu holds the byte %u; a bool .npy "
                               "holds only 0 and 1", path, (unsigned long long)i,
                               ((const unsigned char *)data)[i]);
            goto done;
        }
    out->dtype = dt;
    out->rank = rank;
    memcpy(out->shape, shape, sizeof shape);
    out->data = data;
    out->nbytes = (size_t)nbytes;
    data = NULL;
    st = MRT_OK;
done:
    free(data);
    free(hdr);
    fclose(f);
    return st;
}

/* ---------------------------------------------------------------- write */

static int npy_write_all(int fd, const void *buf, size_t n)
{
    const unsigned char *p = buf;
    while (n > 0) {
        ssize_t k = write(fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* The permission bits a plain creat(path, 0666) would give: the current umask, read from
 * /proc (umask() itself cannot be read without being changed, racing other threads). */
static mode_t npy_new_file_mode(void)
{
    mode_t mask = 022;
    FILE *f = fopen("/proc/self/status", "r");
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f)) {
            unsigned m;
            if (sscanf(line, "Umask: %o", &m) == 1) {
                mask = (mode_t)m;
                break;
            }
        }
        fclose(f);
    }
    return 0666 & ~mask;
}

/* The temporary files rt_write_atomic is writing now, for the CLI's SIGINT/SIGTERM/SIGHUP
 * handler (rt_cli_remove_temporaries): fixed slots, so that a handler reads them with no lock
 * and no allocation; a slot's path is copied before it is marked live. A file whose path does
 * not fit a slot is written all the same, unregistered. */
#define RT_TMP_SLOTS 8
#define RT_TMP_PATH 4096
static char rt_tmp_path[RT_TMP_SLOTS][RT_TMP_PATH];
static volatile sig_atomic_t rt_tmp_live[RT_TMP_SLOTS];
static pthread_mutex_t rt_tmp_lock = PTHREAD_MUTEX_INITIALIZER;

static int rt_tmp_enter(const char *tmp)
{
    size_t n = strlen(tmp);
    int slot = -1;
    if (n >= RT_TMP_PATH)
        return -1;
    pthread_mutex_lock(&rt_tmp_lock);
    for (int i = 0; i < RT_TMP_SLOTS && slot < 0; i++)
        if (!rt_tmp_live[i]) {
            memcpy(rt_tmp_path[i], tmp, n + 1);
            __atomic_signal_fence(__ATOMIC_SEQ_CST); /* the path before the mark */
            rt_tmp_live[i] = 1;
            slot = i;
        }
    pthread_mutex_unlock(&rt_tmp_lock);
    return slot;
}

static void rt_tmp_leave(int slot)
{
    if (slot >= 0)
        rt_tmp_live[slot] = 0;
}

void rt_remove_temporaries(void)
{
    for (int i = 0; i < RT_TMP_SLOTS; i++)
        if (rt_tmp_live[i])
            unlink(rt_tmp_path[i]); /* async-signal-safe */
}

/* Write the concatenation of parts[0..n) to `path` atomically: a mkstemp() file beside the
 * target (the path, or the regular file a symlink names), synced and renamed into place, with
 * the replaced file's mode; a FIFO, device, directory or socket is never replaced. `kind`
 * (".npy", "safetensors") names the file in messages. */
mrt_status rt_write_atomic(const char *path, const char *kind, const void *const *parts, const size_t *lens, int n)
{
    char why[RT_QUOTE_MAX + 128];
    char *target = rt_output_target(path, why, sizeof why);
    if (!target)
        return mrt_set_error(MRT_ERR_IO, "%s: cannot write a %s file there: %s; only a "
                             "regular file (or a symlink to one) is written", path, kind, why);
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += lens[i];
    size_t plen = strlen(target);
    char *tmp = malloc(plen + sizeof ".tmp.XXXXXX");
    if (!tmp) {
        free(target);
        return mrt_set_error(MRT_ERR_OOM, "%s: cannot allocate %zu bytes", path, plen + sizeof ".tmp.XXXXXX");
    }
    memcpy(tmp, target, plen);
    memcpy(tmp + plen, ".tmp.XXXXXX", sizeof ".tmp.XXXXXX");
    int fd = mkstemp(tmp);
    if (fd < 0) {
        mrt_status st = mrt_set_error(MRT_ERR_IO, "%s: cannot create a temporary file beside "
                                      "it: %s", path, strerror(errno));
        free(tmp);
        free(target);
        return st;
    }
    int slot = rt_tmp_enter(tmp);
    /* mkstemp makes the file 0600; give it the mode the replaced file had, or a new file's. */
    struct stat old;
    mode_t mode = stat(target, &old) == 0 ? (old.st_mode & 07777) : npy_new_file_mode();
    const char *step = NULL;
    if (fchmod(fd, mode) != 0)
        step = "set the mode of";
    /* a test's window into a half-written file (tests/train cli: a signal during a save) */
    const char *pause = getenv("MODELRT_TEST_WRITE_PAUSE_MS");
    for (int i = 0; i < n && !step; i++) {
        if (npy_write_all(fd, parts[i], lens[i]) != 0)
            step = "write";
        if (i == 0 && pause && *pause)
            usleep((useconds_t)atoi(pause) * 1000u);
    }
    if (!step && fsync(fd) != 0)
        step = "sync";
    int saved = errno;
    if (close(fd) != 0 && !step) {
        step = "close";
        saved = errno;
    }
    if (!step && rename(tmp, target) != 0) {
        step = "rename into place";
        saved = errno;
    }
    mrt_status st = MRT_OK;
    if (step) {
        st = mrt_set_error(MRT_ERR_IO, "%s: cannot %s the temporary file %s (%zu bytes): %s",
                           path, step, tmp, total, strerror(saved));
        unlink(tmp);
    }
    rt_tmp_leave(slot);
    free(tmp);
    free(target);
    return st;
}

mrt_status mrt_npy_write(const char *path, const mrt_tensor *t)
{
    if (!path || !t)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_npy_write: path or tensor is NULL");
    if (!*path)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_npy_write: the .npy path is empty (\"\")");
    char sh[RT_SHAPE_STR_MAX];
    uint64_t numel, nbytes;
    if (!rt_dtype_valid(t->dtype) || t->rank < 0 || t->rank > MRT_MAX_RANK)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "%s: cannot write a tensor of dtype %d and "
                             "rank %d", path, (int)t->dtype, t->rank);
    if (rt_shape_numel(t->shape, t->rank, &numel) != 0 ||
        __builtin_mul_overflow(numel, (uint64_t)mrt_dtype_size(t->dtype), &nbytes) ||
        nbytes != (uint64_t)t->nbytes || (nbytes > 0 && !t->data))
        return mrt_set_error(MRT_ERR_INVALID_ARG, "%s: tensor of shape %s %s has nbytes %zu "
                             "or data inconsistent with its shape", path,
                             rt_shape_str(sh, sizeof sh, t->shape, t->rank),
                             mrt_dtype_name(t->dtype), t->nbytes);

    /* Header: magic, version 1.0, u16 length, dict padded with spaces so that the data starts
     * at a multiple of 64 bytes, then '\n' (what numpy.save writes). */
    static const char *const descr[] = {"<f4", "<i4", "<i8", "|b1", "<f2", "<u2"}; /* by mrt_dtype */
    char dict[512];
    int k = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                     descr[t->dtype]);
    for (int i = 0; i < t->rank && k > 0 && (size_t)k < sizeof dict; i++)
        k += snprintf(dict + k, sizeof dict - (size_t)k, "%s%lld", i ? ", " : "",
                      (long long)t->shape[i]);
    if (k > 0 && (size_t)k < sizeof dict)
        k += snprintf(dict + k, sizeof dict - (size_t)k, "%s), }", t->rank == 1 ? "," : "");
    if (k < 0 || (size_t)k >= sizeof dict - 128)
        return mrt_set_error(MRT_ERR_INTERNAL, "%s: .npy header does not fit", path);
    size_t total = 10 + (size_t)k + 1;
    size_t padded = (total + 63) / 64 * 64;
    unsigned char hdr[640];
    memcpy(hdr, NPY_MAGIC, 6);
    hdr[6] = 1;
    hdr[7] = 0;
    size_t hlen = padded - 10;
    hdr[8] = (unsigned char)(hlen & 0xff);
    hdr[9] = (unsigned char)(hlen >> 8);
    memcpy(hdr + 10, dict, (size_t)k);
    memset(hdr + 10 + k, ' ', padded - total);
    hdr[padded - 1] = '\n';

    const void *parts[2] = {hdr, t->data};
    size_t lens[2] = {padded, t->nbytes};
    return rt_write_atomic(path, ".npy", parts, lens, 2);
}
