/*
 * rt_safetensors.c — load a model's weights from a safetensors file into the weight region.
 *
 * Layout (https://github.com/huggingface/safetensors): u64 little-endian N, N bytes of JSON
 * {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
 * then the data region; offsets are relative to the start of the data region (byte 8 + N).
 *
 * The file is untrusted. In order: the header length against the file size (a .npy file, or
 * anything whose length field points past its end, is "not a safetensors file"); the header's
 * first byte ('{', after optional spaces; a UTF-8 byte-order mark is rejected, as the safetensors
 * library does, though cJSON would skip it); a linear pre-scan of the JSON text that rejects
 * control bytes, nesting deeper than any header needs, names and dtypes with an embedded NUL
 * (\u0000, which cJSON would cut the C string at) and oversized arrays (a shape of a million
 * entries) before cJSON builds a node per element; cJSON; __metadata__, an object of strings;
 * then every entry: rank, each dimension (> 0, so that no later check can divide by it), the
 * element count and byte size with overflow-checked multiplies, the span against the data
 * region and against dtype x shape; then the spans together: every byte of the data region
 * belongs to exactly one tensor (no overlap, no hole, nothing after the last one), as the
 * safetensors library requires. Only then is the file matched against the model's parameters,
 * strictly: missing, unexpected, wrong dtype, wrong shape. Bytes are copied last, with pread,
 * tensor by tensor.
 */
#include "rt_internal.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define RT_ST_MAX_HEADER (100u * 1000u * 1000u) /* 100 MB, as the reference implementation */
#define RT_ST_MAX_EXACT 9007199254740992.0      /* 2^53: integers a JSON double holds exactly */

/* One tensor entry of the file, validated. */
typedef struct st_entry {
    const char *name; /* points into the cJSON tree */
    const char *dtype_name;
    int known;        /* dtype is F32/I32/I64/BOOL/F16/BF16 */
    mrt_dtype dtype;
    int rank;
    int64_t shape[MRT_MAX_RANK];
    uint64_t begin, end;
    int param;        /* index of the matching param, or -1 */
} st_entry;

/* Element sizes of the safetensors dtypes, so spans can be checked even for a dtype this
 * runtime does not load (the error is then "wrong dtype", not a confusing span error). */
static int st_dtype_size(const char *s, mrt_dtype *dt, int *known)
{
    static const struct { const char *name; int size; } table[] = {
        {"BOOL", 1}, {"U8", 1}, {"I8", 1}, {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2},
        {"U16", 2}, {"F16", 2}, {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},
        {"F64", 8}, {"I64", 8}, {"U64", 8},
    };
    *known = 1;
    if (strcmp(s, "F32") == 0) { *dt = MRT_F32; return 4; }
    if (strcmp(s, "I32") == 0) { *dt = MRT_I32; return 4; }
    if (strcmp(s, "I64") == 0) { *dt = MRT_I64; return 8; }
    if (strcmp(s, "BOOL") == 0) { *dt = MRT_BOOL; return 1; }
    if (strcmp(s, "F16") == 0) { *dt = MRT_F16; return 2; }
    if (strcmp(s, "BF16") == 0) { *dt = MRT_BF16; return 2; }
    *known = 0;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(s, table[i].name) == 0)
            return table[i].size;
    return 0;
}

const char *rt_safetensors_dtype(mrt_dtype dt)
{
    return dt == MRT_F32 ? "F32" : dt == MRT_I32 ? "I32" : dt == MRT_I64 ? "I64" : dt == MRT_BOOL ? "BOOL"
         : dt == MRT_F16 ? "F16" : dt == MRT_BF16 ? "BF16" : "?";
}

/* ---------------------------------------------------------------- JSON pre-scan */

/* Whether the JSON string body s[0..n) holds the escape \u0000 (an embedded NUL). */
static int st_has_nul_escape(const char *s, size_t n)
{
    for (size_t i = 0; i + 1 < n; i++) {
        if (s[i] != '\\')
            continue;
        if (s[i + 1] == 'u' && i + 5 < n && memcmp(s + i + 2, "0000", 4) == 0)
            return 1;
        i++; /* skip the escaped character */
    }
    return 0;
}

/* A linear scan over the header text that finds arrays longer than MRT_MAX_RANK (no array in a
 * valid safetensors header is: shapes have at most MRT_MAX_RANK entries, data_offsets two),
 * and names the tensor that has one, before cJSON allocates a node per element. It also rejects
 * nesting deeper than MAXD (a header nests 3 deep; cJSON's own limit would only say
 * "malformed") and a NUL escape in a tensor's name or anywhere in its entry (metadata values may
 * hold one: they are not used). It tracks only nesting, strings and keys; anything it does not
 * understand is left for cJSON to report. */
static mrt_status st_prescan(const char *path, const char *s, size_t n)
{
    enum { MAXD = 64 };
    char kind[MAXD];
    int expect_key[MAXD];
    size_t count[MAXD];
    int d = 0;
    const char *key1 = NULL, *key2 = NULL; /* tensor name, field name (raw JSON text) */
    size_t key1_len = 0, key2_len = 0;
    /* JSON allows no control characters, not even in strings; cJSON would skip them (NUL
     * included) as whitespace. */
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 && s[i] != '\t' && s[i] != '\n' && s[i] != '\r')
            return mrt_set_error(MRT_ERR_FORMAT, "%s: malformed JSON header: control byte 0x%02x "
                                 "at byte %zu", path, (unsigned char)s[i], i);
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ':')
            continue;
        if (c == ',') {
            if (d > 0 && kind[d - 1] == '{')
                expect_key[d - 1] = 1;
            continue;
        }
        if (c == '}' || c == ']') {
            if (d == 0 || kind[d - 1] != (c == '}' ? '{' : '['))
                return MRT_OK; /* malformed: cJSON says where */
            d--;
            if (c == ']' && count[d] > MRT_MAX_RANK) {
                if (d == 2 && key1 && key2 && key2_len == 5 && memcmp(key2, "shape", 5) == 0)
                    return mrt_set_error(MRT_ERR_FORMAT, "%s: tensor '%.*s': rank %zu exceeds "
                                         "maximum %d", path, (int)key1_len, key1, count[d],
                                         MRT_MAX_RANK);
                if (d == 2 && key1 && key2)
                    return mrt_set_error(MRT_ERR_FORMAT, "%s: tensor '%.*s': '%.*s' has %zu "
                                         "entries (at most %d expected)", path, (int)key1_len,
                                         key1, (int)key2_len, key2, count[d], MRT_MAX_RANK);
                return mrt_set_error(MRT_ERR_FORMAT, "%s: JSON header has an array of %zu "
                                     "entries where at most %d are expected", path, count[d],
                                     MRT_MAX_RANK);
            }
            continue;
        }
        /* A value or a key starts here. */
        int is_key = d > 0 && kind[d - 1] == '{' && expect_key[d - 1];
        if (d > 0 && kind[d - 1] == '[')
            count[d - 1]++;
        if (c == '"') {
            size_t j = i + 1;
            while (j < n && s[j] != '"')
                j += (s[j] == '\\') ? 2 : 1;
            if (j >= n)
                return MRT_OK;
            int in_meta = d >= 2 && key1 && key1_len == 12 && memcmp(key1, "__metadata__", 12) == 0;
            if (d >= 1 && !in_meta && st_has_nul_escape(s + i + 1, j - i - 1)) {
                if (d == 1 && is_key)
                    return mrt_set_error(MRT_ERR_FORMAT, "%s: tensor name \"%.*s\" has an embedded "
                                         "NUL (\\u0000)", path, (int)(j - i - 1), s + i + 1);
                if (d >= 2 && key1)
                    return mrt_set_error(MRT_ERR_FORMAT, "%s: tensor '%.*s': string \"%.*s\" has an "
                                         "embedded NUL (\\u0000)", path, (int)key1_len, key1,
                                         (int)(j - i - 1), s + i + 1);
            }
            if (is_key) {
                expect_key[d - 1] = 0;
                if (d == 1) { key1 = s + i + 1; key1_len = j - i - 1; key2 = NULL; }
                if (d == 2) { key2 = s + i + 1; key2_len = j - i - 1; }
            }
            i = j;
            continue;
        }
        if (c == '{' || c == '[') {
            if (d == MAXD)
                return mrt_set_error(MRT_ERR_FORMAT, "%s: JSON header is nested too deeply (more "
                                     "than %d levels at byte %zu; a safetensors header has 3)",
                                     path, MAXD, i);
            kind[d] = c;
            expect_key[d] = (c == '{');
            count[d] = 0;
            d++;
            continue;
        }
        /* number, true/false/null, or garbage: skip to the next delimiter */
        while (i + 1 < n && !strchr(",]}: \t\r\n\"", s[i + 1]))
            i++;
    }
    return MRT_OK;
}

/* ---------------------------------------------------------------- entries */

/* A JSON number that must be an integer in [lo, 2^53]. Returns 0 and sets *v, else -1. */
static int st_json_int(const cJSON *j, double lo, uint64_t *v)
{
    if (!cJSON_IsNumber(j))
        return -1;
    double x = j->valuedouble;
    if (!(x >= lo) || x > RT_ST_MAX_EXACT || x != (double)(int64_t)x)
        return -1;
    *v = (uint64_t)(int64_t)x;
    return 0;
}

/* Validate one entry of the header into *e. data_len: bytes in the data region. */
static mrt_status st_entry_parse(const char *path, const cJSON *item, uint64_t data_len,
                                 st_entry *e)
{
    const char *name = item->string;
    memset(e, 0, sizeof *e);
    e->name = name;
    e->param = -1;
    if (!cJSON_IsObject(item))
        return mrt_set_error(MRT_ERR_FORMAT, "%s: tensor '%s': entry is not a JSON object", path,
                             name);
    const cJSON *dtype = NULL, *shape = NULL, *offs = NULL, *f;
    cJSON_ArrayForEach(f, item) {
        const cJSON **slot = strcmp(f->string, "dtype") == 0 ? &dtype
                             : strcmp(f->string, "shape") == 0 ? &shape
                             : strcmp(f->string, "data_offsets") == 0 ? &offs : NULL;
        if (!slot)
            continue; /* unknown fields are tolerated */
        if (*slot)
            return mrt_set_error(MRT_ERR_FORMAT, "%s: tensor '%s': field '%s' appears twice",
                                 path, name, f->string);
        *slot = f;
    }
    if (!dtype || !shape || !offs)
        return mrt_set_error(MRT_ERR_FORMAT, "%s: tensor '%s': missing '%s'", path, name,
                             !dtype ? "dtype" : !shape ? "shape" : "data_offsets");
    if (!cJSON_IsString(dtype))
        return mrt_set_error(MRT_ERR_FORMAT, "%s: tensor '%s': dtype is not a string", path,
                             name);
    e->dtype_name = dtype->valuestring;
    int esize = st_dtype_size(e->dtype_name, &e->dtype, &e->known);
    if (esize == 0)
        return mrt_set_error(MRT_ERR_FORMAT, "%s: tensor '%s': unknown dtype '%s'", path, name,
                             e->dtype_name);

    /* Rank first, before looping over the dimensions. */
    if (!cJSON_IsArray(shape))
        return mrt_set_error(MRT_ERR_FORMAT, "%s: tensor '%s': shape is not an array", path,
                             name);
    int rank = cJSON_GetArraySize(shape);
    if (rank > MRT_MAX_RANK)
        return mrt_set_error(MRT_ERR_FORMAT, "%s: tensor '%s': rank %d exceeds maximum %d", path,
                             name, rank, MRT_MAX_RANK);
    e->rank = rank;
    int i = 0;
    cJSON_ArrayForEach(f, shape) {
        if (!cJSON_IsNumber(f))
            return mrt_set_error(MRT_ERR_FORMAT, "%s: tensor '%s': dimension %d is not a number",
                                 path, name, i);
        double x = f->valuedouble;
        if (x <= 0 && x >= -RT_ST_MAX_EXACT && x == (double)(int64_t)x) /* range first: no UB */
            return mrt_set_error(MRT_ERR_FORMAT, "%s: tensor '%s': dimension %d is %lld", path,
                                 name, i, (long long)x);
        uint64_t v;
        if (st_json_int(f, 1, &v) != 0)
            return mrt_set_error(MRT_ERR_FORMAT, "%s: tensor '%s': dimension %d is %g, not an "
                                 "integer in 1..2^53", path, name, i, x);
        e->shape[i++] = (int64_t)v;
    }
    char sh[RT_SHAPE_STR_MAX];
    uint64_t numel, bytes;
    if (rt_shape_numel(e->shape, rank, &numel) != 0)
        return mrt_set_error(MRT_ERR_FORMAT, "%s: tensor '%s': element count overflows 64 bits "
                             "(shape %s)", path, name, rt_shape_str(sh, sizeof sh, e->shape, rank));
    if (__builtin_mul_overflow(numel, (uint64_t)esize, &bytes))
        return mrt_set_error(MRT_ERR_FORMAT, "%s: tensor '%s': byte size overflows 64 bits "
                             "(%s x shape %s)", path, name, e->dtype_name,
                             rt_shape_str(sh, sizeof sh, e->shape, rank));

    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
        st_json_int(offs->child, 0, &e->begin) != 0 ||
        st_json_int(offs->child->next, 0, &e->end) != 0)
        return mrt_set_error(MRT_ERR_FORMAT, "%s: tensor '%s': data_offsets is not [begin, end] "
                             "with non-negative integers", path, name);
    if (e->begin > e->end)
        return mrt_set_error(MRT_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] has "
                             "begin > end", path, name, (unsigned long long)e->begin,
                             (unsigned long long)e->end);
    if (e->end > data_len)
        return mrt_set_error(MRT_ERR_FORMAT, "%s: tensor '%s': data_offsets end %llu is past the "
                             "end of the data region (%llu bytes)", path, name,
                             (unsigned long long)e->end, (unsigned long long)data_len);
    if (e->end - e->begin != bytes)
        return mrt_set_error(MRT_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] span "
                             "%llu bytes, but %s %s needs %llu", path, name,
                             (unsigned long long)e->begin, (unsigned long long)e->end,
                             (unsigned long long)(e->end - e->begin), e->dtype_name,
                             rt_shape_str(sh, sizeof sh, e->shape, rank),
                             (unsigned long long)bytes);
    return MRT_OK;
}

static int st_cmp_begin(const void *a, const void *b)
{
    const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : 0;
}

static int st_cmp_name(const void *a, const void *b)
{
    return strcmp((*(const st_entry *const *)a)->name, (*(const st_entry *const *)b)->name);
}

static int st_cmp_param(const void *a, const void *b)
{
    return strcmp((*(const mrt_param_desc *const *)a)->name,
                  (*(const mrt_param_desc *const *)b)->name);
}

/* ---------------------------------------------------------------- the loader */

static mrt_status st_check_params(const mrt_param_desc *params, int n, void *const *regions,
                                  const size_t *region_bytes, int nregions)
{
    for (int i = 0; i < n; i++) {
        const mrt_param_desc *p = &params[i];
        uint64_t numel, bytes, end;
        if (!p->name || !rt_dtype_valid(p->dtype) || p->rank < 0 || p->rank > MRT_MAX_RANK)
            return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_weights_load: param %d is malformed "
                                 "(name, dtype or rank)", i);
        if (p->region < 0 || p->region >= nregions || (!regions[p->region] && region_bytes[p->region]))
            return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_weights_load: param '%s' names region "
                                 "%d of %d", p->name, p->region, nregions);
        size_t dst_bytes = region_bytes[p->region];
        for (int k = 0; k < p->rank; k++)
            if (p->shape[k] <= 0)
                return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_weights_load: param '%s': "
                                     "dimension %d is %lld", p->name, k, (long long)p->shape[k]);
        if (rt_shape_numel(p->shape, p->rank, &numel) != 0 ||
            __builtin_mul_overflow(numel, (uint64_t)mrt_dtype_size(p->dtype), &bytes) ||
            __builtin_add_overflow(bytes, (uint64_t)p->offset, &end) || end > dst_bytes)
            return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_weights_load: param '%s' at offset "
                                 "%zu does not fit in the weight region of %zu bytes", p->name,
                                 p->offset, dst_bytes);
    }
    return MRT_OK;
}

/* Read exactly `len` bytes at `off` (pread, resuming after short reads and EINTR). */
static int st_pread_all(int fd, void *dst, uint64_t len, uint64_t off)
{
    unsigned char *p = dst;
    while (len > 0) {
        size_t chunk = len > (1u << 30) ? (1u << 30) : (size_t)len;
        ssize_t k = pread(fd, p, chunk, (off_t)off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        off += (uint64_t)k;
        len -= (uint64_t)k;
    }
    return 0;
}

mrt_status mrt_weights_load(const char *path, const mrt_param_desc *params, int n, void *dst,
                            size_t dst_bytes)
{
    if (!dst && dst_bytes > 0)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_weights_load: %s: bad params or "
                             "destination", path ? path : "(null)");
    return mrt_weights_load_regions(path, params, n, &dst, &dst_bytes, 1);
}

mrt_status mrt_weights_load_regions(const char *path, const mrt_param_desc *params, int n,
                                    void *const *regions, const size_t *region_bytes, int nregions)
{
    if (!path)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_weights_load: path is NULL");
    if (!*path)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_weights_load: the weights path is empty "
                             "(\"\")");
    if (n < 0 || (n > 0 && !params) || nregions < 1 || !regions || !region_bytes)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_weights_load: %s: bad params or "
                             "destination", path);
    mrt_status st = st_check_params(params, n, regions, region_bytes, nregions);
    if (st != MRT_OK)
        return st;

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return mrt_set_error(MRT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    char *hdr = NULL;
    cJSON *root = NULL;
    st_entry *entries = NULL;
    st_entry **order = NULL;
    const mrt_param_desc **byname = NULL; /* params sorted by name, for binary search */
    unsigned char *seen = NULL;

    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        st = mrt_set_error(MRT_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
        goto done;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = mrt_set_error(MRT_ERR_IO, "%s: not a regular file", path);
        goto done;
    }
    uint64_t fsize = (uint64_t)sb.st_size;
    unsigned char len8[8];
    if (fsize < 8) {
        st = mrt_set_error(MRT_ERR_FORMAT, "%s: file is %llu bytes, too short for the 8-byte "
                           "header length", path, (unsigned long long)fsize);
        goto done;
    }
    if (st_pread_all(fd, len8, 8, 0) != 0) {
        st = mrt_set_error(MRT_ERR_IO, "%s: cannot read the header length", path);
        goto done;
    }
    if (memcmp(len8, "\x93NUMPY", 6) == 0) {
        st = mrt_set_error(MRT_ERR_FORMAT, "%s: not a safetensors file: it is a NumPy .npy file "
                           "(weights are safetensors; .npy files are inputs)", path);
        goto done;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | len8[i];
    if (hlen == 0) {
        st = mrt_set_error(MRT_ERR_FORMAT, "%s: header length is 0", path);
        goto done;
    }
    if (hlen > fsize - 8) {
        st = mrt_set_error(MRT_ERR_FORMAT, "%s: not a safetensors file: header length %llu is "
                           "beyond the end of the file (%llu bytes)", path, (unsigned long long)hlen,
                           (unsigned long long)fsize);
        goto done;
    }
    if (hlen > RT_ST_MAX_HEADER) {
        st = mrt_set_error(MRT_ERR_FORMAT, "%s: header length %llu exceeds the limit of %u "
                           "bytes", path, (unsigned long long)hlen, RT_ST_MAX_HEADER);
        goto done;
    }
    uint64_t data_start = 8 + hlen, data_len = fsize - data_start;
    hdr = malloc((size_t)hlen + 1);
    if (!hdr) {
        st = mrt_set_error(MRT_ERR_OOM, "%s: cannot allocate %llu bytes for the header", path,
                           (unsigned long long)hlen + 1);
        goto done;
    }
    if (st_pread_all(fd, hdr, hlen, 8) != 0) {
        st = mrt_set_error(MRT_ERR_IO, "%s: cannot read the %llu-byte header", path,
                           (unsigned long long)hlen);
        goto done;
    }
    hdr[hlen] = '\0';
    if (hlen >= 3 && memcmp(hdr, "\xef\xbb\xbf", 3) == 0) {
        st = mrt_set_error(MRT_ERR_FORMAT, "%s: JSON header starts with a UTF-8 byte-order mark "
                           "(EF BB BF); a safetensors header starts with '{'", path);
        goto done;
    }
    if ((st = st_prescan(path, hdr, (size_t)hlen)) != MRT_OK)
        goto done;
    const char *end = NULL;
    root = cJSON_ParseWithLengthOpts(hdr, (size_t)hlen + 1, &end, 1);
    if (!root || (end && (uint64_t)(end - hdr) != hlen)) {
        size_t at = end ? (size_t)(end - hdr) : 0;
        st = mrt_set_error(MRT_ERR_FORMAT, "%s: malformed JSON header (at byte %zu of %llu)",
                           path, at, (unsigned long long)hlen);
        goto done;
    }
    if (!cJSON_IsObject(root)) {
        st = mrt_set_error(MRT_ERR_FORMAT, "%s: JSON header is not an object", path);
        goto done;
    }

    /* Validate every entry on its own. */
    int n_items = cJSON_GetArraySize(root), ne = 0;
    entries = calloc((size_t)n_items + 1, sizeof *entries);
    order = calloc((size_t)n_items + 1, sizeof *order);
    if (!entries || !order) {
        st = mrt_set_error(MRT_ERR_OOM, "%s: cannot allocate the table of %d tensors", path,
                           n_items);
        goto done;
    }
    const cJSON *item;
    cJSON_ArrayForEach(item, root) {
        if (strcmp(item->string, "__metadata__") == 0) {
            /* a map of strings to strings, or null, as the safetensors library reads it */
            if (!cJSON_IsObject(item) && !cJSON_IsNull(item)) {
                st = mrt_set_error(MRT_ERR_FORMAT, "%s: __metadata__ is not a JSON object of "
                                   "strings", path);
                goto done;
            }
            const cJSON *m;
            cJSON_ArrayForEach(m, item)
                if (!cJSON_IsString(m)) {
                    st = mrt_set_error(MRT_ERR_FORMAT, "%s: __metadata__ '%s' is not a string "
                                       "(metadata values are strings)", path, m->string);
                    goto done;
                }
            continue;
        }
        if ((st = st_entry_parse(path, item, data_len, &entries[ne])) != MRT_OK)
            goto done;
        order[ne] = &entries[ne];
        ne++;
    }

    /* Names are unique; spans do not overlap. */
    qsort(order, (size_t)ne, sizeof *order, st_cmp_name);
    for (int i = 1; i < ne; i++)
        if (strcmp(order[i - 1]->name, order[i]->name) == 0) {
            st = mrt_set_error(MRT_ERR_FORMAT, "%s: tensor '%s' appears twice", path,
                               order[i]->name);
            goto done;
        }
    /* Every data byte belongs to exactly one tensor: in order of begin, each span starts where
     * the one before ended (no overlap, no hole), and the last ends the file. */
    qsort(order, (size_t)ne, sizeof *order, st_cmp_begin);
    uint64_t covered = 0;
    for (int i = 0; i < ne; i++) {
        if (i > 0 && order[i]->begin < order[i - 1]->end) {
            st = mrt_set_error(MRT_ERR_FORMAT, "%s: tensors '%s' [%llu, %llu] and '%s' [%llu, "
                               "%llu] overlap", path, order[i - 1]->name,
                               (unsigned long long)order[i - 1]->begin,
                               (unsigned long long)order[i - 1]->end, order[i]->name,
                               (unsigned long long)order[i]->begin,
                               (unsigned long long)order[i]->end);
            goto done;
        }
        if (order[i]->begin > covered) {
            if (i == 0)
                st = mrt_set_error(MRT_ERR_FORMAT, "%s: data bytes [0, %llu) before tensor '%s' "
                                   "belong to no tensor", path,
                                   (unsigned long long)order[i]->begin, order[i]->name);
            else
                st = mrt_set_error(MRT_ERR_FORMAT, "%s: data bytes [%llu, %llu) between tensors "
                                   "'%s' and '%s' belong to no tensor", path,
                                   (unsigned long long)covered,
                                   (unsigned long long)order[i]->begin, order[i - 1]->name,
                                   order[i]->name);
            goto done;
        }
        covered = order[i]->end;
    }
    if (covered != data_len) {
        if (ne == 0)
            st = mrt_set_error(MRT_ERR_FORMAT, "%s: %llu data bytes but no tensors", path,
                               (unsigned long long)data_len);
        else
            st = mrt_set_error(MRT_ERR_FORMAT, "%s: %llu trailing bytes after the last tensor "
                               "'%s' (data bytes [%llu, %llu)) belong to no tensor", path,
                               (unsigned long long)(data_len - covered), order[ne - 1]->name,
                               (unsigned long long)covered, (unsigned long long)data_len);
        goto done;
    }

    /* Match against the model, strictly. */
    byname = malloc(((size_t)n + 1) * sizeof *byname);
    seen = calloc((size_t)n + 1, 1);
    if (!byname || !seen) {
        st = mrt_set_error(MRT_ERR_OOM, "%s: cannot allocate the table of %d params", path, n);
        goto done;
    }
    for (int i = 0; i < n; i++)
        byname[i] = &params[i];
    qsort(byname, (size_t)n, sizeof *byname, st_cmp_param);
    for (int i = 1; i < n; i++)
        if (strcmp(byname[i - 1]->name, byname[i]->name) == 0) {
            st = mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_weights_load: param '%s' is listed "
                               "twice", byname[i]->name);
            goto done;
        }
    for (int i = 0; i < ne; i++) {
        st_entry *e = &entries[i];
        int lo = 0, hi = n;
        while (lo < hi) {
            int mid = lo + (hi - lo) / 2;
            int c = strcmp(byname[mid]->name, e->name);
            if (c == 0) { e->param = (int)(byname[mid] - params); break; }
            if (c < 0) lo = mid + 1; else hi = mid;
        }
        if (e->param < 0) {
            st = mrt_set_error(MRT_ERR_MISMATCH, "%s: unexpected tensor '%s': the model has no "
                               "parameter of that name", path, e->name);
            goto done;
        }
        const mrt_param_desc *p = &params[e->param];
        seen[e->param] = 1;
        if (p->state) { /* a weights file is the params alone; the state is --resume's */
            st = mrt_set_error(MRT_ERR_MISMATCH, "%s: tensor '%s' is optimizer state, not a weight: load the weights "
                               "alone, and the optimizer state with PROG train --resume (NAME_load_state), which "
                               "also restores its step", path, e->name);
            goto done;
        }
        if (!e->known || e->dtype != p->dtype) {
            st = mrt_set_error(MRT_ERR_MISMATCH, "%s: tensor '%s': dtype %s in file, model "
                               "expects %s", path, e->name, e->dtype_name, rt_safetensors_dtype(p->dtype));
            goto done;
        }
        int same = e->rank == p->rank;
        for (int k = 0; same && k < e->rank; k++)
            same = e->shape[k] == p->shape[k];
        if (!same) {
            char a[RT_SHAPE_STR_MAX], b[RT_SHAPE_STR_MAX];
            st = mrt_set_error(MRT_ERR_MISMATCH, "%s: tensor '%s': shape %s in file, model "
                               "expects %s", path, e->name,
                               rt_shape_str(a, sizeof a, e->shape, e->rank),
                               rt_shape_str(b, sizeof b, p->shape, p->rank));
            goto done;
        }
    }
    for (int i = 0; i < n; i++)
        if (!seen[i] && !params[i].state) {
            char b[RT_SHAPE_STR_MAX];
            st = mrt_set_error(MRT_ERR_MISMATCH, "%s: missing tensor '%s' (%s %s): the model "
                               "needs it but the file does not have it", path, params[i].name,
                               rt_safetensors_dtype(params[i].dtype),
                               rt_shape_str(b, sizeof b, params[i].shape, params[i].rank));
            goto done;
        }

    /* Everything checked: optimizer state the file does not hold starts at zero, then the
     * bytes are copied into place. */
    for (int i = 0; i < n; i++)
        if (!seen[i] && params[i].state) {
            uint64_t numel = 1;
            rt_shape_numel(params[i].shape, params[i].rank, &numel); /* checked with the descriptor */
            memset((unsigned char *)regions[params[i].region] + params[i].offset, 0,
                   (size_t)numel * mrt_dtype_size(params[i].dtype));
        }
    for (int i = 0; i < ne; i++) {
        st_entry *e = &entries[i];
        const mrt_param_desc *p = &params[e->param];
        if (st_pread_all(fd, (unsigned char *)regions[p->region] + p->offset, e->end - e->begin,
                         data_start + e->begin) != 0) {
            st = mrt_set_error(MRT_ERR_IO, "%s: tensor '%s': cannot read %llu bytes at offset "
                               "%llu", path, e->name, (unsigned long long)(e->end - e->begin),
                               (unsigned long long)(data_start + e->begin));
            goto done;
        }
    }
    st = MRT_OK;

done:
    free(seen);
    free(byname);
    free(order);
    free(entries);
    cJSON_Delete(root);
    free(hdr);
    close(fd);
    return st;
}

mrt_status rt_safetensors_meta(const char *path, const char *key, char *out, size_t cap)
{
    if (cap)
        out[0] = '\0';
    FILE *f = fopen(path, "rb");
    if (!f)
        return mrt_set_error(MRT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    unsigned char len8[8];
    uint64_t hlen = 0;
    mrt_status st = MRT_OK;
    if (fread(len8, 1, 8, f) != 8)
        st = mrt_set_error(MRT_ERR_FORMAT, "%s: too short for a safetensors header", path);
    for (int i = 7; st == MRT_OK && i >= 0; i--)
        hlen = (hlen << 8) | len8[i];
    if (st == MRT_OK && (hlen == 0 || hlen > RT_ST_MAX_HEADER))
        st = mrt_set_error(MRT_ERR_FORMAT, "%s: not a safetensors file (header length %llu)", path,
                           (unsigned long long)hlen);
    char *hdr = st == MRT_OK ? malloc((size_t)hlen + 1) : NULL;
    if (st == MRT_OK && !hdr)
        st = mrt_set_error(MRT_ERR_OOM, "%s: cannot allocate %llu bytes for the header", path, (unsigned long long)hlen + 1);
    if (st == MRT_OK && fread(hdr, 1, (size_t)hlen, f) != hlen)
        st = mrt_set_error(MRT_ERR_FORMAT, "%s: not a safetensors file: the header is cut short", path);
    fclose(f);
    cJSON *root = NULL;
    if (st == MRT_OK) {
        hdr[hlen] = '\0';
        root = cJSON_ParseWithLength(hdr, (size_t)hlen);
        if (!cJSON_IsObject(root))
            st = mrt_set_error(MRT_ERR_FORMAT, "%s: malformed JSON header", path);
    }
    if (st == MRT_OK) {
        const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
        const cJSON *v = cJSON_IsObject(meta) ? cJSON_GetObjectItemCaseSensitive(meta, key) : NULL;
        if (cJSON_IsString(v) && cap)
            snprintf(out, cap, "%s", v->valuestring);
    }
    cJSON_Delete(root);
    free(hdr);
    return st;
}
