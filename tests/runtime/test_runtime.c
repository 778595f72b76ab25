/*
 * test_runtime.c — unit tests of modelrt: devices (CPU, CUDA where this machine and build
 * have it, and fake CUDA devices through the MODELRT_TEST_FAKE_CUDA seam, each case in a child
 * process), the CPU GEMM, errors, safetensors, npy, and mrt_main
 * driven with argv arrays against a fake model (y = 2x + b). Bad files are written from C into
 * a fresh temporary directory, so the tests need nothing but the library.
 *
 *   test_runtime --list      the test names, one a line
 *   test_runtime NAME        run one test; prints "PASS" or "FAIL: why"; exit 0 or 1
 *   test_runtime             run all, one "PASS: runtime/NAME" or "FAIL: ..." line each
 *
 * tests/runtime/run.sh runs each test in its own process, so that a crash or a leak report
 * (ASan) is charged to the test that caused it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "modelrt.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* ---------------------------------------------------------------- harness */

static char g_why[4096];
static int g_failed;
static char g_dir[4096];

static void fail_at(int line, const char *fmt, ...)
{
    if (g_failed)
        return;
    g_failed = 1;
    int k = snprintf(g_why, sizeof g_why, "line %d: ", line);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_why + k, sizeof g_why - (size_t)k, fmt, ap);
    va_end(ap);
    for (char *p = g_why; *p; p++) /* one line per test */
        if (*p == '\n')
            *p = ' ';
}

#define CHECK(cond)                                                                             \
    do {                                                                                        \
        if (!(cond)) {                                                                          \
            fail_at(__LINE__, "%s", #cond);                                                     \
            return;                                                                             \
        }                                                                                       \
    } while (0)
#define CHECKF(cond, ...)                                                                       \
    do {                                                                                        \
        if (!(cond)) {                                                                          \
            fail_at(__LINE__, __VA_ARGS__);                                                     \
            return;                                                                             \
        }                                                                                       \
    } while (0)
/* A call that must fail with `want` and a message containing `sub`. */
#define CHECK_ERR(call, want, sub)                                                              \
    do {                                                                                        \
        mrt_status st_ = (call);                                                                \
        CHECKF(st_ == (want) && strstr(mrt_last_error(), (sub)),                                \
               "%s: got %s \"%s\", want %s containing \"%s\"", #call, mrt_status_name(st_),     \
               mrt_last_error(), mrt_status_name(want), (sub));                                 \
    } while (0)
#define CHECK_OK(call)                                                                          \
    do {                                                                                        \
        mrt_status st_ = (call);                                                                \
        CHECKF(st_ == MRT_OK, "%s: %s \"%s\"", #call, mrt_status_name(st_), mrt_last_error()); \
    } while (0)

/* A path inside this test's directory (rotating static buffers: valid for a few calls). */
static const char *P(const char *name)
{
    static char bufs[8][4200];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, sizeof bufs[0], "%s/%s", g_dir, name);
    return b;
}

static void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        abort();
    }
    if (n && fwrite(p, 1, n, f) != n)
        abort();
    fclose(f);
}

static char *read_bytes(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)len + 1);
    if (fread(p, 1, (size_t)len, f) != (size_t)len)
        abort();
    p[len] = '\0';
    fclose(f);
    if (n)
        *n = (size_t)len;
    return p;
}

static int exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* Number of entries of `dir` whose name contains `sub`. */
static int count_entries(const char *dir, const char *sub)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strstr(e->d_name, sub))
            n++;
    closedir(d);
    return n;
}

/* A safetensors file: u64 LE header length (hlen_override if nonzero), JSON, data. */
static void write_st_len(const char *path, uint64_t hlen, const char *json, const void *data,
                         size_t dlen)
{
    size_t jl = strlen(json);
    unsigned char *buf = malloc(8 + jl + dlen + 1);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)(hlen >> (8 * i));
    memcpy(buf + 8, json, jl);
    if (dlen)
        memcpy(buf + 8 + jl, data, dlen);
    write_bytes(path, buf, 8 + jl + dlen);
    free(buf);
}

static void write_st(const char *path, const char *json, const void *data, size_t dlen)
{
    write_st_len(path, strlen(json), json, data, dlen);
}

/* A .npy file with header dict `dict` (padded with spaces and '\n' to a multiple of 16 past the
 * preamble), format version `major`, and `dlen` bytes of data. */
static void write_npy_raw(const char *path, int major, const char *dict, const void *data,
                          size_t dlen)
{
    size_t pre = major == 1 ? 10 : 12;
    size_t dl = strlen(dict);
    size_t total = (pre + dl + 1 + 15) / 16 * 16;
    size_t hlen = total - pre;
    unsigned char *buf = calloc(1, total + dlen + 1);
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    buf[7] = 0;
    for (size_t i = 0; i < pre - 8; i++)
        buf[8 + i] = (unsigned char)(hlen >> (8 * i));
    memcpy(buf + pre, dict, dl);
    memset(buf + pre + dl, ' ', hlen - dl - 1);
    buf[total - 1] = '\n';
    if (dlen)
        memcpy(buf + total, data, dlen);
    write_bytes(path, buf, total + dlen);
    free(buf);
}

/* ---------------------------------------------------------------- status and log */

static char g_log[4096];
static int g_log_lines;
static void test_hook(mrt_log_level lvl, const char *msg, void *user)
{
    (void)user;
    g_log_lines++;
    snprintf(g_log, sizeof g_log, "%s %s", lvl == MRT_LOG_INFO ? "INFO" : "WARN", msg);
}

static void test_status_basics(void)
{
    CHECK(strcmp(mrt_status_name(MRT_OK), "MRT_OK") == 0);
    CHECK(strcmp(mrt_status_name(MRT_ERR_FORMAT), "MRT_ERR_FORMAT") == 0);
    CHECK(strcmp(mrt_status_name(MRT_ERR_INTERNAL), "MRT_ERR_INTERNAL") == 0);
    CHECK(mrt_set_error(MRT_ERR_IO, "file %s: %d", "a.npy", 7) == MRT_ERR_IO);
    CHECK(strcmp(mrt_last_error(), "file a.npy: 7") == 0);
    /* the last error as an argument to the next one (overlapping buffers) */
    mrt_set_error(MRT_ERR_IO, "outer: %s", mrt_last_error());
    CHECK(strcmp(mrt_last_error(), "outer: file a.npy: 7") == 0);
    char big[3000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    mrt_set_error(MRT_ERR_IO, "%s", big);
    CHECK(strlen(mrt_last_error()) == 1023);
    CHECK(mrt_dtype_size(MRT_F32) == 4 && mrt_dtype_size(MRT_I32) == 4 &&
          mrt_dtype_size(MRT_I64) == 8);
    CHECK(strcmp(mrt_dtype_name(MRT_I64), "i64") == 0);
    mrt_tensor t;
    memset(&t, 0, sizeof t);
    mrt_tensor_free(&t);
    mrt_tensor_free(NULL);
    t.data = malloc(10);
    t.nbytes = 10;
    mrt_tensor_free(&t);
    CHECK(t.data == NULL && t.nbytes == 0);
}

static void test_log_hook(void)
{
    g_log_lines = 0;
    mrt_log(MRT_LOG_INFO, "dropped %d", 1); /* no hook: dropped */
    CHECK(g_log_lines == 0);
    mrt_set_log_hook(test_hook, NULL);
    mrt_log(MRT_LOG_WARN, "hello %s\n", "world");
    CHECK(g_log_lines == 1 && strcmp(g_log, "WARN hello world") == 0);
    char big[2000];
    memset(big, 'y', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    mrt_log(MRT_LOG_INFO, "%s", big);
    CHECK(g_log_lines == 2 && strlen(g_log) == 5 + 1999);
    mrt_set_log_hook(NULL, NULL);
    mrt_log(MRT_LOG_INFO, "dropped again");
    CHECK(g_log_lines == 2);
}

/* rt_env_flag (rt_internal.h): the runtime's on/off environment variables. */
int rt_env_flag(const char *name, int dflt);

static void test_env_flag(void)
{
    const char *v = "MODELRT_TEST_FLAG_X";
    unsetenv(v);
    CHECK(rt_env_flag(v, 0) == 0 && rt_env_flag(v, 1) == 1);
    setenv(v, "", 1);
    CHECK(rt_env_flag(v, 0) == 0 && rt_env_flag(v, 1) == 1);
    const char *on[] = {"1", "true", "YES", "On"}, *off[] = {"0", "False", "no", "OFF"};
    for (int i = 0; i < 4; i++) {
        setenv(v, on[i], 1);
        CHECK(rt_env_flag(v, 0) == 1);
        setenv(v, off[i], 1);
        CHECK(rt_env_flag(v, 1) == 0);
    }
    /* anything else: the default, and one warning naming the variable and the value */
    g_log_lines = 0;
    mrt_set_log_hook(test_hook, NULL);
    setenv(v, "2", 1);
    CHECK(rt_env_flag(v, 0) == 0 && rt_env_flag(v, 1) == 1);
    CHECK(g_log_lines == 1 && strstr(g_log, "MODELRT_TEST_FLAG_X='2'") && strstr(g_log, "not an on/off value"));
    mrt_set_log_hook(NULL, NULL);
    unsetenv(v);
}

/* ---------------------------------------------------------------- devices */

static void test_device_parse(void)
{
    mrt_device d;
    int a = -1;
    CHECK_OK(mrt_device_parse("auto", &d, &a));
    CHECK(a == 1 && d.kind == MRT_DEVICE_CPU && d.index == 0);
    CHECK_OK(mrt_device_parse("cpu", &d, &a));
    CHECK(a == 0 && d.kind == MRT_DEVICE_CPU && d.index == 0);
    CHECK_OK(mrt_device_parse("cpu:1", &d, NULL));
    CHECK(d.kind == MRT_DEVICE_CPU && d.index == 1);
    CHECK_OK(mrt_device_parse("cuda", &d, &a));
    CHECK(a == 0 && d.kind == MRT_DEVICE_CUDA && d.index == 0);
    CHECK_OK(mrt_device_parse("cuda:1", &d, NULL));
    CHECK(d.kind == MRT_DEVICE_CUDA && d.index == 1);
    CHECK_OK(mrt_device_parse("cuda:1023", &d, NULL));
    CHECK(d.index == 1023);
    const char *bad[] = {"gpu", "cuda:", "cuda:-1", "", "cpu:1x", " cpu", "cuda0", "CUDA",
                         "cuda:+1", "cuda: 1", "auto:0", "cuda:01", "cpu:007", "cpu:00",
                         "cuda:1 ", "cpu:-0", "cuda:0x1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        d.kind = MRT_DEVICE_CUDA;
        d.index = 77;
        mrt_status st = mrt_device_parse(bad[i], &d, NULL);
        CHECKF(st == MRT_ERR_DEVICE, "'%s' parsed (%s)", bad[i], mrt_status_name(st));
        char quoted[64];
        snprintf(quoted, sizeof quoted, "'%s'", bad[i]);
        CHECKF(strstr(mrt_last_error(), quoted) && strstr(mrt_last_error(), "cuda:N"),
               "'%s': message \"%s\"", bad[i], mrt_last_error());
        CHECKF(d.kind == MRT_DEVICE_CUDA && d.index == 77, "'%s' changed out", bad[i]);
    }
    CHECK(mrt_device_parse(NULL, &d, NULL) == MRT_ERR_DEVICE);
    CHECK(mrt_device_parse("cpu", NULL, NULL) != MRT_OK);
}

static void test_device_select(void)
{
    mrt_device d;
    unsetenv("MODELRT_DEVICE");
    g_log_lines = 0;
    mrt_set_log_hook(test_hook, NULL);
    CHECK_OK(mrt_device_select("auto", &d));
    const char *why = NULL;
    int ncuda = mrt_cuda_device_count(&why);
    CHECK(d.index == 0 && (d.kind == MRT_DEVICE_CPU || ncuda > 0)); /* a GPU machine: cuda:0 */
    char want[1200];
    snprintf(want, sizeof want, "INFO auto selected cpu:0 (no usable CUDA device: %s)", why);
    CHECKF(ncuda > 0 || (g_log_lines == 1 && strcmp(g_log, want) == 0), "log: %d \"%s\"",
           g_log_lines, g_log);
    if (ncuda > 0) /* a GPU machine: the same test, but auto takes the first usable GPU */
        CHECKF(g_log_lines == 1 && strstr(g_log, "INFO auto selected "), "log: \"%s\"", g_log);
    g_log_lines = 0;
    CHECK_OK(mrt_device_select("cpu", &d));
    CHECK(d.kind == MRT_DEVICE_CPU && d.index == 0 && g_log_lines == 0);
    CHECK_OK(mrt_device_select("cpu:1", &d));
    CHECK(d.kind == MRT_DEVICE_CPU && d.index == 1);
    CHECK_OK(mrt_device_select("cpu:7", &d));
    CHECK_ERR(mrt_device_select("cpu:8", &d), MRT_ERR_DEVICE, "cpu:8");
    if (ncuda == 0) {
        snprintf(want, sizeof want, "device cuda:0 requested, 0 CUDA devices visible (%s)", why);
        CHECK_ERR(mrt_device_select("cuda", &d), MRT_ERR_DEVICE, want);
    }
    CHECK_ERR(mrt_device_select("cuda:1023", &d), MRT_ERR_DEVICE, "device cuda:1023 requested");
    CHECK(g_log_lines == 0); /* never a silent (or logged) fallback */
    CHECK_ERR(mrt_device_select("gpu", &d), MRT_ERR_DEVICE, "'gpu'");
    CHECK_ERR(mrt_device_select("cuda:99999999999", &d), MRT_ERR_DEVICE, "cuda:99999999999");
    mrt_set_log_hook(NULL, NULL);
}

static void test_device_env(void)
{
    mrt_device d;
    g_log_lines = 0;
    mrt_set_log_hook(test_hook, NULL);
    unsetenv("MODELRT_DEVICE");
    CHECK_OK(mrt_device_select(NULL, &d));
    CHECK(d.index == 0 && (d.kind == MRT_DEVICE_CPU || mrt_cuda_device_count(NULL) > 0) &&
          g_log_lines == 1); /* auto */
    setenv("MODELRT_DEVICE", "cpu:3", 1);
    CHECK_OK(mrt_device_select(NULL, &d));
    CHECK(d.kind == MRT_DEVICE_CPU && d.index == 3);
    CHECK_OK(mrt_device_select("cpu:2", &d)); /* an explicit string wins over the variable */
    CHECK(d.index == 2);
    setenv("MODELRT_DEVICE", "cuda:1023", 1); /* absent even on a machine with GPUs */
    CHECK_ERR(mrt_device_select(NULL, &d), MRT_ERR_DEVICE, "MODELRT_DEVICE");
    CHECK(strstr(mrt_last_error(), "cuda:1023"));
    setenv("MODELRT_DEVICE", "banana", 1);
    CHECK_ERR(mrt_device_select(NULL, &d), MRT_ERR_DEVICE, "'banana'");
    CHECK(strstr(mrt_last_error(), "MODELRT_DEVICE"));
    unsetenv("MODELRT_DEVICE");
    mrt_set_log_hook(NULL, NULL);
}

/* The accepted forms, word for word: the tail of every parse error. */
#define FORMS "expected 'auto', 'cpu', 'cpu:N', 'cuda' or 'cuda:N' with N a plain decimal " \
              "(cpu:0..cpu:7, cuda:0..cuda:1023)"

/* mrt_device_parse(s) fails with MRT_ERR_DEVICE and exactly the message `want`. */
#define CHECK_PARSE_MSG(s, want)                                                                \
    do {                                                                                        \
        mrt_device d_;                                                                          \
        mrt_status st_ = mrt_device_parse((s), &d_, NULL);                                      \
        CHECKF(st_ == MRT_ERR_DEVICE && strcmp(mrt_last_error(), (want)) == 0,                  \
               "parse: got %s \"%s\", want \"%s\"", mrt_status_name(st_), mrt_last_error(),      \
               (want));                                                                         \
    } while (0)

/* Ordinals are plain decimals; cpu:N is 0..7 and cuda:N 0..1023, said by the parser. */
static void test_device_parse_ordinals(void)
{
    mrt_device d;
    const char *good[] = {"cpu:0", "cpu:7", "cuda:0", "cuda:10", "cuda:1023"};
    const int idx[] = {0, 7, 0, 10, 1023};
    for (int i = 0; i < 5; i++) {
        CHECK_OK(mrt_device_parse(good[i], &d, NULL));
        CHECKF(d.index == idx[i], "'%s' gave index %d", good[i], d.index);
    }
    CHECK_PARSE_MSG("cuda:01", "bad device 'cuda:01'; " FORMS);
    CHECK_PARSE_MSG("cpu:007", "bad device 'cpu:007'; " FORMS);
    CHECK_PARSE_MSG("cuda:+1", "bad device 'cuda:+1'; " FORMS);
    CHECK_PARSE_MSG("cuda: 1", "bad device 'cuda: 1'; " FORMS);
    CHECK_PARSE_MSG("cuda:00", "bad device 'cuda:00'; " FORMS);
    CHECK_PARSE_MSG("cpu:8", "device 'cpu:8' is out of range: CPU devices are cpu:0..cpu:7");
    CHECK_PARSE_MSG("cpu:1023", "device 'cpu:1023' is out of range: CPU devices are cpu:0..cpu:7");
    CHECK_PARSE_MSG("cpu:99999999999",
                    "device 'cpu:99999999999' is out of range: CPU devices are cpu:0..cpu:7");
    CHECK_PARSE_MSG("cuda:1024", "device 'cuda:1024' is out of range: CUDA ordinals are 0..1023");
    CHECK_PARSE_MSG("cuda:99999999999",
                    "device 'cuda:99999999999' is out of range: CUDA ordinals are 0..1023");
    CHECK_PARSE_MSG("cuda:099999999999", "bad device 'cuda:099999999999'; " FORMS);
    /* mrt_device_select says the same, before looking at any hardware */
    CHECK_ERR(mrt_device_select("cpu:8", &d), MRT_ERR_DEVICE,
              "device 'cpu:8' is out of range: CPU devices are cpu:0..cpu:7");
    setenv("MODELRT_DEVICE", "cpu:9", 1);
    CHECK_ERR(mrt_device_select(NULL, &d), MRT_ERR_DEVICE,
              "device 'cpu:9' (from MODELRT_DEVICE) is out of range: CPU devices are cpu:0..cpu:7");
    unsetenv("MODELRT_DEVICE");
}

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && strcmp(s + n - k, tail) == 0;
}

/* A quoted device string is escaped and, when long, shortened; the forms stay the last words. */
static void test_device_parse_quote(void)
{
    CHECK_PARSE_MSG("cu\nda", "unknown device 'cu\\nda'; " FORMS);
    CHECK_PARSE_MSG("cuda:\t1", "bad device 'cuda:\\t1'; " FORMS);
    CHECK_PARSE_MSG("gpu\x01\x7f", "unknown device 'gpu\\x01\\x7F'; " FORMS);
    CHECK_PARSE_MSG("cpu:\xc3\xa9", "bad device 'cpu:\\xC3\\xA9'; " FORMS);
    CHECK_PARSE_MSG("a'b\\c\r", "unknown device 'a\\'b\\\\c\\r'; " FORMS);
    char s[2100], want[1100];
    memset(s, 'x', 64); /* 64 bytes: quoted whole */
    s[64] = '\0';
    snprintf(want, sizeof want, "unknown device '%.64s'; %s", s, FORMS);
    CHECK_PARSE_MSG(s, want);
    memset(s, 'x', 65); /* 65: the first 48 and "..." */
    s[65] = '\0';
    CHECK_PARSE_MSG(s, "unknown device 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...' "
                       "(65 bytes); " FORMS);
    memcpy(s, "cuda:", 5); /* 2000 bytes of newlines after "cuda:" */
    memset(s + 5, '\n', 1995);
    s[2000] = '\0';
    mrt_device d;
    CHECK(mrt_device_parse(s, &d, NULL) == MRT_ERR_DEVICE);
    CHECKF(strncmp(mrt_last_error(), "bad device 'cuda:\\n\\n", 21) == 0 &&
           strstr(mrt_last_error(), "\\n...' (2000 bytes); ") && ends_with(mrt_last_error(), FORMS)
           && strlen(mrt_last_error()) < 400, "\"%s\"", mrt_last_error());
    memcpy(s, "cpu:", 4); /* a long run of digits: out of range, shortened */
    memset(s + 4, '9', 196);
    s[200] = '\0';
    CHECK(mrt_device_parse(s, &d, NULL) == MRT_ERR_DEVICE);
    CHECKF(strncmp(mrt_last_error(), "device 'cpu:9999", 16) == 0 &&
           ends_with(mrt_last_error(), "9...' (200 bytes) is out of range: CPU devices are "
                                       "cpu:0..cpu:7"), "\"%s\"", mrt_last_error());
    /* from MODELRT_DEVICE: the origin follows the quote, the forms still end the message */
    memset(s, 'z', 1500);
    s[1500] = '\0';
    setenv("MODELRT_DEVICE", s, 1);
    CHECK(mrt_device_select(NULL, &d) == MRT_ERR_DEVICE);
    CHECKF(ends_with(mrt_last_error(), "zzz...' (1500 bytes) (from MODELRT_DEVICE); " FORMS),
           "\"%s\"", mrt_last_error());
    setenv("MODELRT_DEVICE", "banana", 1);
    CHECK_ERR(mrt_device_select(NULL, &d), MRT_ERR_DEVICE,
              "unknown device 'banana' (from MODELRT_DEVICE); " FORMS);
    CHECK(ends_with(mrt_last_error(), FORMS));
    unsetenv("MODELRT_DEVICE");
}

/* "" is auto, as NULL with MODELRT_DEVICE unset or "" is: the same device, the same one line. */
static void test_device_select_empty(void)
{
    mrt_device want, d;
    char line[sizeof g_log];
    mrt_set_log_hook(test_hook, NULL);
    unsetenv("MODELRT_DEVICE");
    g_log_lines = 0;
    CHECK_OK(mrt_device_select("auto", &want));
    CHECK(g_log_lines == 1 && strstr(g_log, "INFO auto selected "));
    snprintf(line, sizeof line, "%s", g_log);
    const char *how[] = {"\"\"", "NULL, MODELRT_DEVICE unset", "NULL, MODELRT_DEVICE=\"\"",
                         "\"\" with MODELRT_DEVICE=cpu:3"};
    for (int i = 0; i < 4; i++) {
        if (i == 2)
            setenv("MODELRT_DEVICE", "", 1);
        if (i == 3)
            setenv("MODELRT_DEVICE", "cpu:3", 1); /* an explicit "" is auto, not the variable */
        g_log_lines = 0;
        d.kind = MRT_DEVICE_CUDA;
        d.index = 77;
        CHECK_OK(mrt_device_select(i == 1 || i == 2 ? NULL : "", &d));
        CHECKF(d.kind == want.kind && d.index == want.index && g_log_lines == 1 &&
               strcmp(g_log, line) == 0, "%s: device %d:%d, log %d \"%s\", want \"%s\"", how[i],
               (int)d.kind, d.index, g_log_lines, g_log, line);
    }
    unsetenv("MODELRT_DEVICE");
    /* mrt_device_parse itself still rejects "": it is mrt_device_select's default */
    CHECK_PARSE_MSG("", "unknown device ''; " FORMS);
    mrt_set_log_hook(NULL, NULL);
}

static void test_device_str(void)
{
    char buf[32];
    mrt_device d = {MRT_DEVICE_CUDA, 1};
    CHECK(strcmp(mrt_device_str(d, buf, sizeof buf), "cuda:1") == 0);
    d.kind = MRT_DEVICE_CPU;
    d.index = 0;
    CHECK(strcmp(mrt_device_str(d, buf, sizeof buf), "cpu:0") == 0);
    char tiny[4];
    CHECK(strcmp(mrt_device_str(d, tiny, sizeof tiny), "cpu") == 0); /* cut, terminated */
}

static void test_alloc(void)
{
    mrt_device cpu = {MRT_DEVICE_CPU, 0};
    void *a = mrt_alloc(cpu, 0), *b = mrt_alloc(cpu, 0);
    CHECK(a && b && a != b);
    CHECK(((uintptr_t)a % 64) == 0 && ((uintptr_t)b % 64) == 0);
    mrt_free(cpu, a);
    mrt_free(cpu, b);
    for (size_t n = 1; n < 300; n += 37) {
        unsigned char *p = mrt_alloc(cpu, n);
        CHECK(p && ((uintptr_t)p % 64) == 0);
        memset(p, 1, n);
        mrt_free(cpu, p);
    }
    mrt_free(cpu, NULL);
    void *huge = mrt_alloc(cpu, SIZE_MAX - 3);
    CHECK(huge == NULL);
    CHECK(strstr(mrt_last_error(), "cpu:0"));
    CHECK(mrt_alloc(cpu, (size_t)1 << 62) == NULL);
    CHECKF(strstr(mrt_last_error(), "4611686018427387904 bytes"), "\"%s\"", mrt_last_error());
    mrt_device cuda = {MRT_DEVICE_CUDA, 1023};
    CHECK(mrt_alloc(cuda, 16) == NULL && strstr(mrt_last_error(), "cuda:1023"));
    CHECKF(strstr(mrt_last_error(), "cannot allocate 16 bytes on cuda:1023") &&
           strstr(mrt_last_error(), "CUDA device"), "\"%s\"", mrt_last_error());
}

/* ---------------------------------------------------------------- CUDA and devices
 * This machine may have no GPU (no driver: cudaGetDeviceCount fails with error 35) or a build
 * without CUDA ("no CUDA support"); both must give 0 devices with a reason. On a GPU machine the
 * no-GPU expectations are skipped and the CPU parts still run. */

static int no_cuda_reason_ok(const char *why)
{
    return why && (strstr(why, "error 35") || strstr(why, "error 100") ||
                   strstr(why, "no CUDA support") || strstr(why, "no devices"));
}

static void test_cuda_count(void)
{
    const char *why = NULL, *why2 = NULL;
    int n = mrt_cuda_device_count(&why);
    CHECK(n >= 0 && why != NULL);
    CHECK(mrt_cuda_device_count(&why2) == n && why2 == why); /* probed once, cached */
    CHECK(mrt_cuda_device_count(NULL) == n);
    if (n > 0)
        return;
    CHECKF(no_cuda_reason_ok(why), "reason \"%s\"", why);
    /* CUDA-only calls answer with an error, never crash */
    mrt_device cuda = {MRT_DEVICE_CUDA, 0};
    void *s = (void *)1;
    CHECK_ERR(mrt_device_activate(cuda), MRT_ERR_DEVICE, "cuda:0");
    CHECK_ERR(mrt_stream_create(cuda, &s), MRT_ERR_DEVICE, "0 CUDA devices visible");
    CHECK(s == NULL);
    mrt_stream_destroy(cuda, NULL);
    CHECK_ERR(mrt_stream_sync(cuda, NULL, "digits run"), MRT_ERR_DEVICE, "digits run");
    size_t fr, tot;
    CHECK_ERR(mrt_device_memory(cuda, &fr, &tot), MRT_ERR_DEVICE, "cuda:0");
    float a[4] = {1, 2, 3, 4}, b[4] = {0};
    CHECK_ERR(mrt_memcpy(cuda, b, (mrt_device){MRT_DEVICE_CPU, 0}, a, sizeof a, NULL),
              MRT_ERR_DEVICE, "cannot copy 16 bytes from cpu:0 to cuda:0");
    CHECK_ERR(mrt_gemm_f32(cuda, NULL, 0, 0, 1, 1, 1, 1.0f, a, 1, 0, a, 1, 0, 0.0f, b, 1, 0, 1),
              MRT_ERR_DEVICE, "gemm on cuda:0");
    /* kernels: MRT_ERR_DEVICE without CUDA support; with CUDA but no driver, the launch fails */
    mrt_status st = mrt_cuda_softmax_f32(NULL, b, a, 1, 4, 1, 0);
    CHECKF(st == MRT_ERR_DEVICE || st == MRT_ERR_CUDA, "softmax: %s", mrt_status_name(st));
    CHECKF(strstr(mrt_last_error(), "softmax"), "\"%s\"", mrt_last_error());
    st = mrt_cuda_check_launch("digits k3");
    CHECK(st == MRT_ERR_DEVICE || st == MRT_ERR_CUDA || st == MRT_OK);
    /* free of a NULL CUDA pointer is ignored like free(NULL) */
    mrt_free(cuda, NULL);
}

/* CUDA_VISIBLE_DEVICES="" hides every GPU: 0 devices, with the reason. (run.sh runs each test
 * in a fresh process, so the probe sees the variable.) */
static void test_cuda_visible_empty(void)
{
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    const char *why = NULL;
    int n = mrt_cuda_device_count(&why);
    CHECKF(n == 0, "%d devices with CUDA_VISIBLE_DEVICES=\"\"", n);
    CHECKF(no_cuda_reason_ok(why), "reason \"%s\"", why);
    mrt_device d;
    g_log_lines = 0;
    mrt_set_log_hook(test_hook, NULL);
    CHECK_OK(mrt_device_select("auto", &d));
    CHECK(d.kind == MRT_DEVICE_CPU && d.index == 0);
    CHECKF(g_log_lines == 1 && strstr(g_log, "auto selected cpu:0 (no usable CUDA device: ") &&
           strstr(g_log, why), "log %d \"%s\"", g_log_lines, g_log);
    CHECK_ERR(mrt_device_select("cuda", &d), MRT_ERR_DEVICE,
              "device cuda:0 requested, 0 CUDA devices visible (");
    CHECK(g_log_lines == 1);
    mrt_set_log_hook(NULL, NULL);
    unsetenv("CUDA_VISIBLE_DEVICES");
}

/* auto, cuda, cuda:1, cpu:1 as field case B16 wants them: one line for auto, errors for CUDA. */
static void test_device_select_b16(void)
{
    const char *why = NULL;
    if (mrt_cuda_device_count(&why) > 0)
        return;
    mrt_device d = {MRT_DEVICE_CUDA, 5};
    g_log_lines = 0;
    mrt_set_log_hook(test_hook, NULL);
    CHECK_OK(mrt_device_select("auto", &d));
    CHECK(d.kind == MRT_DEVICE_CPU && d.index == 0 && g_log_lines == 1);
    CHECKF(strstr(g_log, "INFO auto selected cpu:0 (no usable CUDA device: ") && strstr(g_log, why),
           "\"%s\"", g_log);
    d.kind = MRT_DEVICE_CUDA;
    d.index = 5;
    CHECK_ERR(mrt_device_select("cuda", &d), MRT_ERR_DEVICE, "device cuda:0 requested, 0 CUDA "
                                                             "devices visible (");
    CHECK(strstr(mrt_last_error(), why));
    CHECK_ERR(mrt_device_select("cuda:1", &d), MRT_ERR_DEVICE, "device cuda:1 requested, 0 CUDA "
                                                               "devices visible (");
    CHECK(d.kind == MRT_DEVICE_CUDA && d.index == 5); /* untouched on failure */
    CHECK(g_log_lines == 1);                           /* no fallback, no extra line */
    CHECK_OK(mrt_device_select("cpu:1", &d));
    CHECK(d.kind == MRT_DEVICE_CPU && d.index == 1 && g_log_lines == 1);
    mrt_set_log_hook(NULL, NULL);
}

static void test_device_list(void)
{
    mrt_device_info info[8];
    int n = -1;
    memset(info, 0xAB, sizeof info);
    CHECK_OK(mrt_device_list(info, 8, &n));
    int ncuda = mrt_cuda_device_count(NULL);
    CHECKF(n == 1 + (ncuda < 7 ? ncuda : 7), "n %d with %d CUDA devices", n, ncuda);
    CHECK(info[0].device.kind == MRT_DEVICE_CPU && info[0].device.index == 0);
    CHECK(info[0].name[0] != '\0' && memchr(info[0].name, '\0', sizeof info[0].name));
    CHECK(info[0].total_bytes > 0 && info[0].free_bytes <= info[0].total_bytes);
    CHECK(info[0].cc_major == 0 && info[0].cc_minor == 0);
    for (int i = 1; i < n; i++)
        CHECK(info[i].device.kind == MRT_DEVICE_CUDA && info[i].device.index == i - 1 &&
              info[i].cc_major >= 1 && info[i].total_bytes > 0);
    CHECK_OK(mrt_device_list(info, 1, &n));
    CHECK(n == 1);
    CHECK_OK(mrt_device_list(NULL, 0, &n));
    CHECK(n == 0);
    CHECK(mrt_device_list(info, 8, NULL) == MRT_ERR_INVALID_ARG);
    size_t fr = 0, tot = 0;
    CHECK_OK(mrt_device_memory((mrt_device){MRT_DEVICE_CPU, 0}, &fr, &tot));
    CHECK(tot == info[0].total_bytes && fr <= tot && fr > 0);
    CHECK_ERR(mrt_device_memory((mrt_device){MRT_DEVICE_CPU, 9}, &fr, &tot), MRT_ERR_DEVICE, "cpu:9");
}

/* ---------------------------------------------------------------- MODELRT_TEST_FAKE_CUDA
 * The probe reads the seam once per process, so each case runs in a child process with the
 * variable set before its first CUDA question (and the parent's probe is left alone). */

/* Run fn in a child with MODELRT_TEST_FAKE_CUDA=value; its failure (or crash) is ours. */
static void in_child_with_fake(const char *value, void (*fn)(void))
{
    int fd[2];
    if (g_failed || pipe(fd) != 0)
        return;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        setenv("MODELRT_TEST_FAKE_CUDA", value, 1);
        fn();
        if (g_failed && write(fd[1], g_why, strlen(g_why)) < 0)
            _exit(2);
        _exit(g_failed);
    }
    close(fd[1]);
    char why[sizeof g_why];
    ssize_t k = pid > 0 ? read(fd[0], why, sizeof why - 1) : -1;
    why[k > 0 ? k : 0] = '\0';
    close(fd[0]);
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        fail_at(__LINE__, "fork/waitpid failed");
    else if (WIFSIGNALED(status))
        fail_at(__LINE__, "MODELRT_TEST_FAKE_CUDA=%s: killed by signal %d", value,
                WTERMSIG(status));
    else if (WEXITSTATUS(status) != 0)
        fail_at(__LINE__, "MODELRT_TEST_FAKE_CUDA=%s: %s", value, why);
}

#define FAKE_NAME "fake CUDA device (MODELRT_TEST_FAKE_CUDA)"

/* MODELRT_TEST_FAKE_CUDA=2: two 16 GiB devices, listed, measured and selectable. */
static void fake_two_seen(void)
{
    const char *why = NULL;
    CHECKF(mrt_cuda_device_count(&why) == 2 && why && *why == '\0', "count %d, why \"%s\"",
           mrt_cuda_device_count(NULL), why);
    mrt_device_info info[8];
    int n = 0;
    CHECK_OK(mrt_device_list(info, 8, &n));
    CHECKF(n == 3, "listed %d", n);
    for (int i = 1; i < 3; i++)
        CHECKF(info[i].device.kind == MRT_DEVICE_CUDA && info[i].device.index == i - 1 &&
               strcmp(info[i].name, FAKE_NAME) == 0 && info[i].cc_major == 9 &&
               info[i].cc_minor == 0 && info[i].total_bytes == ((size_t)16384 << 20) &&
               info[i].free_bytes == info[i].total_bytes, "entry %d: %s", i, info[i].name);
    size_t fr = 0, tot = 0;
    CHECK_OK(mrt_device_memory((mrt_device){MRT_DEVICE_CUDA, 1}, &fr, &tot));
    CHECK(fr == ((size_t)16384 << 20) && tot == fr);
    mrt_device d;
    g_log_lines = 0;
    mrt_set_log_hook(test_hook, NULL);
    CHECK_OK(mrt_device_select("auto", &d));
    CHECK(d.kind == MRT_DEVICE_CUDA && d.index == 0);
    CHECKF(g_log_lines == 1 &&
           strcmp(g_log, "INFO auto selected cuda:0 (" FAKE_NAME ", 16.0 GiB)") == 0, "\"%s\"",
           g_log);
    CHECK_OK(mrt_device_select("cuda:1", &d));
    CHECK(d.kind == MRT_DEVICE_CUDA && d.index == 1);
    CHECK_OK(mrt_device_select("", &d));
    CHECK(d.kind == MRT_DEVICE_CUDA && d.index == 0);
    CHECK_ERR(mrt_device_select("cuda:2", &d), MRT_ERR_DEVICE,
              "device cuda:2 requested, 2 CUDA devices visible (cuda:0 " FAKE_NAME ", cuda:1 "
              FAKE_NAME ")");
    mrt_set_log_hook(NULL, NULL);
    /* host memory is never a fake device's, and nobody is asked */
    float host[4];
    d.kind = MRT_DEVICE_CUDA;
    CHECK_OK(mrt_pointer_device(host, &d));
    CHECK(d.kind == MRT_DEVICE_CPU && d.index == 0);
}

#define FAKE_MSG(what, i) what ": cuda:" #i " is a fake device from MODELRT_TEST_FAKE_CUDA=2:1024 " \
                                        "(a test seam); nothing runs on it"

/* MODELRT_TEST_FAKE_CUDA=2:1024: 1 GiB each; anything that would run on one fails cleanly. */
static void fake_two_refuse(void)
{
    CHECK(mrt_cuda_device_count(NULL) == 2);
    mrt_device c0 = {MRT_DEVICE_CUDA, 0}, c1 = {MRT_DEVICE_CUDA, 1}, cpu = {MRT_DEVICE_CPU, 0};
    size_t fr = 0, tot = 0;
    CHECK_OK(mrt_device_memory(c1, &fr, &tot));
    CHECK(fr == ((size_t)1 << 30) && tot == fr);
    CHECK(mrt_alloc(c1, 16) == NULL);
    CHECKF(strcmp(mrt_last_error(), FAKE_MSG("cannot allocate 16 bytes on cuda:1", 1)) == 0,
           "\"%s\"", mrt_last_error());
    CHECK(mrt_alloc(c0, 0) == NULL);
    CHECK_ERR(mrt_device_activate(c0), MRT_ERR_DEVICE, FAKE_MSG("cannot activate cuda:0", 0));
    void *s = (void *)1;
    CHECK_ERR(mrt_stream_create(c1, &s), MRT_ERR_DEVICE,
              FAKE_MSG("cannot create a stream on cuda:1", 1));
    CHECK(s == NULL);
    CHECK_ERR(mrt_stream_sync(c0, NULL, "digits run"), MRT_ERR_DEVICE,
              FAKE_MSG("digits run: cannot synchronize cuda:0", 0));
    mrt_stream_destroy(c0, (void *)8); /* no stream can exist: ignored, the driver not asked */
    mrt_free(c0, (void *)8);
    float a[4] = {1, 2, 3, 4}, b[4] = {0};
    CHECK_ERR(mrt_memcpy(c1, b, cpu, a, sizeof a, NULL), MRT_ERR_DEVICE,
              FAKE_MSG("cannot copy 16 bytes from cpu:0 to cuda:1", 1));
    CHECK_ERR(mrt_memcpy(cpu, b, c0, a, sizeof a, NULL), MRT_ERR_DEVICE,
              FAKE_MSG("cannot copy 16 bytes from cuda:0 to cpu:0", 0));
    CHECK_ERR(mrt_memcpy(c1, b, c0, a, sizeof a, NULL), MRT_ERR_DEVICE,
              FAKE_MSG("cannot copy 16 bytes from cuda:0 to cuda:1", 0));
    CHECK_OK(mrt_memcpy(cpu, b, cpu, a, sizeof a, NULL)); /* the CPU is untouched by the seam */
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK_ERR(mrt_gemm_f32(c1, NULL, 0, 0, 1, 1, 1, 1.0f, a, 1, 0, a, 1, 0, 0.0f, b, 1, 0, 1),
              MRT_ERR_DEVICE, FAKE_MSG("gemm on cuda:1", 1));
    CHECK_ERR(mrt_gemm_bias_act_f32(c0, NULL, 0, 1, 1, 1, a, 1, a, 1, b, 1, NULL, 1),
              MRT_ERR_DEVICE, FAKE_MSG("gemm on cuda:0", 0));
    CHECK_ERR(mrt_cuda_check_launch("digits k3"), MRT_ERR_DEVICE,
              "digits k3: the CUDA devices are fake, from MODELRT_TEST_FAKE_CUDA=2:1024 (a test "
              "seam); nothing runs on them");
    /* an absent ordinal is still "no such device", listing the fakes */
    CHECK(mrt_alloc((mrt_device){MRT_DEVICE_CUDA, 2}, 16) == NULL);
    CHECKF(strcmp(mrt_last_error(), "cannot allocate 16 bytes on cuda:2: no such device, 2 CUDA "
                  "devices visible (cuda:0 " FAKE_NAME ", cuda:1 " FAKE_NAME ")") == 0, "\"%s\"",
           mrt_last_error());
}

/* MODELRT_TEST_FAKE_CUDA=64: the most there can be. */
static void fake_many(void)
{
    CHECK(mrt_cuda_device_count(NULL) == 64);
    mrt_device d;
    CHECK_OK(mrt_device_select("cuda:63", &d));
    CHECK(d.index == 63);
    CHECK_ERR(mrt_device_select("cuda:64", &d), MRT_ERR_DEVICE,
              "device cuda:64 requested, 64 CUDA devices visible (cuda:0 " FAKE_NAME);
}

/* MODELRT_TEST_FAKE_CUDA=0: no device, and the reason says why. */
static void fake_zero(void)
{
    const char *why = NULL;
    CHECK(mrt_cuda_device_count(&why) == 0);
    CHECKF(strcmp(why, "MODELRT_TEST_FAKE_CUDA=0 fakes no CUDA device, and the driver is not "
                  "asked") == 0, "\"%s\"", why);
    mrt_device d;
    CHECK_OK(mrt_device_select("auto", &d));
    CHECK(d.kind == MRT_DEVICE_CPU);
    CHECK_ERR(mrt_device_select("cuda", &d), MRT_ERR_DEVICE,
              "device cuda:0 requested, 0 CUDA devices visible (MODELRT_TEST_FAKE_CUDA=0 fakes");
}

/* MODELRT_TEST_FAKE_CUDA="": no seam, the real probe's answer. */
static void fake_empty(void)
{
    const char *why = NULL;
    if (mrt_cuda_device_count(&why) == 0)
        CHECKF(no_cuda_reason_ok(why), "\"%s\"", why);
    CHECK(!strstr(why, "MODELRT_TEST_FAKE_CUDA"));
}

static const char *g_bad_fake; /* the malformed value fake_malformed checks */
static void fake_malformed(void)
{
    const char *why = NULL;
    char q[64], want[512];
    CHECK(mrt_cuda_device_count(&why) == 0);
    /* the value as the message quotes it: \n escaped */
    size_t k = 0;
    for (const char *p = g_bad_fake; *p && k < sizeof q - 3; p++) {
        if (*p == '\n') {
            q[k++] = '\\';
            q[k++] = 'n';
        } else {
            q[k++] = *p;
        }
    }
    q[k] = '\0';
    snprintf(want, sizeof want, "MODELRT_TEST_FAKE_CUDA='%s' is malformed (expected N or N:MiB, "
             "N a plain decimal 0..64 and MiB 1..16777216), so no CUDA device is faked and the "
             "driver is not asked", q);
    CHECKF(strcmp(why, want) == 0, "why \"%s\", want \"%s\"", why, want);
    mrt_device d;
    g_log_lines = 0;
    mrt_set_log_hook(test_hook, NULL);
    CHECK_OK(mrt_device_select("auto", &d));
    CHECK(d.kind == MRT_DEVICE_CPU && g_log_lines == 1 && strstr(g_log, want));
    CHECK_ERR(mrt_device_select("cuda", &d), MRT_ERR_DEVICE, want);
    CHECK_ERR(mrt_cuda_check_launch("k"), MRT_ERR_DEVICE, "k: the CUDA devices are fake");
    mrt_set_log_hook(NULL, NULL);
}

static void test_fake_cuda(void)
{
    in_child_with_fake("2", fake_two_seen);
    in_child_with_fake("2:1024", fake_two_refuse);
    in_child_with_fake("64", fake_many);
    in_child_with_fake("0", fake_zero);
    in_child_with_fake("", fake_empty);
}

static void test_fake_cuda_malformed(void)
{
    const char *bad[] = {"x", "-1", "99999", "65", "01", "2:", "2:0", "2:016384", "2:16777217",
                         "2:1:1", " 2", "2\n", "+2", ":1024"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        g_bad_fake = bad[i];
        in_child_with_fake(bad[i], fake_malformed);
    }
}

/* --list-devices shows the fakes like real ones. */
static void fake_list_cli(void);
static void test_fake_cuda_cli(void) { in_child_with_fake("1:2048", fake_list_cli); }

static void test_cpu_device_ops(void)
{
    mrt_device cpu = {MRT_DEVICE_CPU, 0}, cpu3 = {MRT_DEVICE_CPU, 3};
    CHECK_OK(mrt_device_activate(cpu));
    CHECK_OK(mrt_device_activate(cpu3));
    void *s = (void *)1;
    CHECK_OK(mrt_stream_create(cpu, &s));
    CHECK(s == NULL);
    CHECK_OK(mrt_stream_sync(cpu, NULL, "x"));
    mrt_stream_destroy(cpu, NULL);
    float a[5] = {1, 2, 3, 4, 5}, b[5] = {0};
    CHECK_OK(mrt_memcpy(cpu3, b, cpu, a, sizeof a, NULL));
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK_OK(mrt_memcpy(cpu, NULL, cpu, NULL, 0, NULL)); /* nothing to copy */
    CHECK_ERR(mrt_memcpy(cpu, NULL, cpu, a, 4, NULL), MRT_ERR_INVALID_ARG, "4 bytes");
    /* pointers in host memory, malloc'd or not, are cpu:0 */
    mrt_device d = {MRT_DEVICE_CUDA, 7};
    float *heap = malloc(64);
    CHECK_OK(mrt_pointer_device(heap, &d));
    CHECK(d.kind == MRT_DEVICE_CPU && d.index == 0);
    d.kind = MRT_DEVICE_CUDA;
    CHECK_OK(mrt_pointer_device(a, &d));
    CHECK(d.kind == MRT_DEVICE_CPU && d.index == 0);
    d.kind = MRT_DEVICE_CUDA;
    CHECK_OK(mrt_pointer_device(NULL, &d));
    CHECK(d.kind == MRT_DEVICE_CPU);
    void *al = mrt_alloc(cpu, 100);
    CHECK_OK(mrt_pointer_device(al, &d));
    CHECK(d.kind == MRT_DEVICE_CPU && d.index == 0);
    mrt_free(cpu, al);
    free(heap);
    CHECK(mrt_pointer_device(a, NULL) == MRT_ERR_INVALID_ARG);
}

/* ---------------------------------------------------------------- GEMM on the CPU */

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static float frand(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) & 0xFFFF) / 32768.0f - 1.0f;
}

/* The definition, in double: C_i = alpha op(A_i) op(B_i) + beta C_i, batch items in order. */
static void naive_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                       int64_t sA, const float *B, int ldb, int64_t sB, float beta, float *C,
                       int ldc, int64_t sC, int batch)
{
    for (int i = 0; i < batch; i++) {
        const float *Ai = A + i * sA, *Bi = B + i * sB;
        float *Ci = C + i * sC;
        for (int r = 0; r < M; r++)
            for (int c = 0; c < N; c++) {
                double acc = 0.0;
                for (int k = 0; k < K; k++)
                    acc += (double)(ta ? Ai[k * lda + r] : Ai[r * lda + k]) *
                           (double)(tb ? Bi[c * ldb + k] : Bi[k * ldb + c]);
                double old = beta == 0.0f ? 0.0 : (double)beta * Ci[r * ldc + c];
                Ci[r * ldc + c] = (float)(alpha * acc + old);
            }
    }
}

/* The fused GEMM + bias + activation (cuBLASLt's epilogue on a GPU) against a naive loop. */
static void test_gemm_bias_act_cpu(void)
{
    mrt_device cpu = {MRT_DEVICE_CPU, 0};
    enum { M = 5, N = 7, K = 6 };
    float A[M * K], Bn[K * N], Bt[N * K], bias[N], C[M * N];
    for (int i = 0; i < M * K; i++) A[i] = (float)((i * 7) % 11) - 5.0f;
    for (int k = 0; k < K; k++)
        for (int n = 0; n < N; n++) Bn[k * N + n] = Bt[n * K + k] = (float)((k * 5 + n * 3) % 9) - 4.0f;
    for (int n = 0; n < N; n++) bias[n] = 0.5f * (float)n - 1.5f;
    for (int tb = 0; tb < 2; tb++)
        for (int act = 0; act < 3; act++)
            for (int with_bias = 0; with_bias < 2; with_bias++) {
                mrt_status st = mrt_gemm_bias_act_f32(cpu, NULL, tb, M, N, K, A, K, tb ? Bt : Bn, tb ? K : N, C, N,
                                                      with_bias ? bias : NULL, act);
                CHECKF(st == MRT_OK, "%s", mrt_last_error());
                double maxd = 0;
                for (int m = 0; m < M; m++)
                    for (int n = 0; n < N; n++) {
                        double v = with_bias ? bias[n] : 0.0;
                        for (int k = 0; k < K; k++) v += (double)A[m * K + k] * Bn[k * N + n];
                        if (act == 1) v = v < 0 ? 0 : v;
                        if (act == 2) v = 0.5 * v * (1 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
                        double d = fabs(v - C[m * N + n]);
                        if (d > maxd) maxd = d;
                    }
                CHECKF(maxd < 1e-4, "tb %d act %d bias %d: maxdiff %g > 1e-4", tb, act, with_bias, maxd);
            }
    CHECK(mrt_gemm_bias_act_f32(cpu, NULL, 0, M, N, K, A, K, Bn, N, C, N, bias, 7) == MRT_ERR_INVALID_ARG);
}

static void test_gemm_cpu(void)
{
    mrt_device cpu = {MRT_DEVICE_CPU, 0};
    enum { MAXF = 4096 };
    static float A[MAXF], B[MAXF], C[MAXF], R[MAXF];
    /* M, N, K, batch, padding of the leading dims, which operand has stride 0 (0 none, 1 A,
     * 2 B, 3 C), alpha, beta */
    const struct { int M, N, K, batch, pad, zero; float alpha, beta; } cases[] = {
        {3, 4, 5, 1, 0, 0, 1.0f, 0.0f},   {7, 2, 9, 3, 1, 0, 0.5f, 0.0f},
        {4, 6, 3, 4, 2, 1, 1.0f, 1.0f},   {5, 3, 4, 3, 0, 2, -2.0f, 0.5f},
        {2, 3, 4, 3, 3, 3, 1.0f, 1.0f},   {1, 1, 1, 1, 0, 0, 1.0f, 0.0f},
        {6, 5, 0, 2, 0, 0, 1.0f, 2.0f},   {16, 17, 18, 2, 5, 0, 1.0f, -1.0f},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                int M = cases[ci].M, N = cases[ci].N, K = cases[ci].K, bt = cases[ci].batch;
                int pad = cases[ci].pad;
                int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
                if (lda < 1)
                    lda = 1;
                if (ldb < 1)
                    ldb = 1;
                int64_t sA = (int64_t)(ta ? K : M) * lda + pad, sB = (int64_t)(tb ? N : K) * ldb,
                        sC = (int64_t)M * ldc + 1;
                if (cases[ci].zero == 1) sA = 0;
                if (cases[ci].zero == 2) sB = 0;
                if (cases[ci].zero == 3) sC = 0;
                CHECK(sA * bt + lda * 64 < MAXF && sB * bt + ldb * 64 < MAXF &&
                      sC * bt + ldc * 64 < MAXF);
                for (int i = 0; i < MAXF; i++) {
                    A[i] = frand();
                    B[i] = frand();
                    C[i] = R[i] = frand();
                }
                CHECK_OK(mrt_gemm_f32(cpu, NULL, ta, tb, M, N, K, cases[ci].alpha, A, lda, sA, B, ldb,
                                      sB, cases[ci].beta, C, ldc, sC, bt));
                naive_gemm(ta, tb, M, N, K, cases[ci].alpha, A, lda, sA, B, ldb, sB,
                           cases[ci].beta, R, ldc, sC, bt);
                double maxdiff = 0.0;
                for (int i = 0; i < MAXF; i++) {
                    double dlt = fabs((double)C[i] - (double)R[i]);
                    if (dlt > maxdiff)
                        maxdiff = dlt;
                }
                /* padding between rows and past the batch is left alone (compared exactly too) */
                CHECKF(maxdiff <= 1e-4 * (1 + K), "case %zu ta %d tb %d: maxdiff %g tolerance %g",
                       ci, ta, tb, maxdiff, 1e-4 * (1 + K));
            }
#ifdef _OPENMP
    /* a product under 4M multiply-adds runs on the calling thread, the pool set to one thread
     * around it (docs/runtime.md): the pool is as it was afterwards */
    CHECK_OK(mrt_set_threads(2, NULL));
    CHECK_OK(mrt_gemm_f32(cpu, NULL, 0, 0, 3, 3, 3, 1.0f, A, 3, 0, B, 3, 0, 0.0f, C, 3, 0, 1));
    CHECKF(omp_get_max_threads() == 2, "after a small gemm the pool has %d threads, not 2", omp_get_max_threads());
    CHECK_OK(mrt_set_threads(0, NULL));
#endif
    /* nothing to do */
    CHECK_OK(mrt_gemm_f32(cpu, NULL, 0, 0, 0, 3, 3, 1.0f, NULL, 3, 0, NULL, 3, 0, 0.0f, NULL, 3, 0, 1));
    CHECK_OK(mrt_gemm_f32(cpu, NULL, 0, 0, 3, 3, 3, 1.0f, NULL, 3, 0, NULL, 3, 0, 0.0f, NULL, 3, 0, 0));
    /* bad arguments: MRT_ERR_INVALID_ARG, never a BLAS abort */
    CHECK_ERR(mrt_gemm_f32(cpu, NULL, 0, 0, -1, 3, 3, 1.0f, A, 3, 0, B, 3, 0, 0.0f, C, 3, 0, 1),
              MRT_ERR_INVALID_ARG, "M=-1");
    CHECK_ERR(mrt_gemm_f32(cpu, NULL, 0, 0, (int64_t)1 << 31, 3, 3, 1.0f, A, 3, 0, B, 3, 0, 0.0f,
                           C, 3, 0, 1), MRT_ERR_INVALID_ARG, "M=2147483648");
    CHECK_ERR(mrt_gemm_f32(cpu, NULL, 0, 0, 3, 3, 4, 1.0f, A, 3, 0, B, 3, 0, 0.0f, C, 3, 0, 1),
              MRT_ERR_INVALID_ARG, "lda=3");
    CHECK_ERR(mrt_gemm_f32(cpu, NULL, 0, 1, 3, 5, 4, 1.0f, A, 4, 0, B, 3, 0, 0.0f, C, 5, 0, 1),
              MRT_ERR_INVALID_ARG, "ldb >= 4");
    CHECK_ERR(mrt_gemm_f32(cpu, NULL, 0, 0, 3, 3, 3, 1.0f, A, 3, -9, B, 3, 0, 0.0f, C, 3, 0, 2),
              MRT_ERR_INVALID_ARG, "negative batch stride");
    CHECK_ERR(mrt_gemm_f32(cpu, NULL, 0, 0, 3, 3, 3, 1.0f, NULL, 3, 0, B, 3, 0, 0.0f, C, 3, 0, 1),
              MRT_ERR_INVALID_ARG, "NULL");
    CHECK_ERR(mrt_gemm_f32((mrt_device){MRT_DEVICE_CPU, 8}, NULL, 0, 0, 3, 3, 3, 1.0f, A, 3, 0, B,
                           3, 0, 0.0f, C, 3, 0, 1), MRT_ERR_DEVICE, "cpu:8");
}

/* One-row GEMMs (mrt_cpu_sgemm's GEMV, rt_device.c): against the sums in double, bound by
 * K * 2^-23 * sum |a_k b_k| (alpha, beta applied after), and bit for bit the same on 1, 2 and 3
 * threads (the outputs split over the threads, each sum in one thread in a fixed order). The
 * shapes: MobileNetV2's and ResNet-18's classifiers (split over the threads: N * K >=
 * MRT_PAR_MIN), odd N and K (a partial block of columns, a partial 16-lane chunk of K), K = 1. */
static void test_gemv_cpu(void)
{
    mrt_device cpu = {MRT_DEVICE_CPU, 0};
    const struct { int N, K; float alpha, beta; } cases[] = {
        {1000, 1280, 1.0f, 0.0f}, {1000, 512, 1.0f, 0.0f}, {37, 19, 0.5f, 0.0f},
        {130, 33, 1.0f, 1.0f},    {257, 1, -2.0f, 0.5f},   {515, 517, 1.0f, 0.0f},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                const int N = cases[ci].N, K = cases[ci].K, lda = ta ? 3 : K; /* ta: a[k] at a[3k] */
                const int ldb = tb ? K + 1 : N + 2;
                float *A = malloc(sizeof(float) * (size_t)K * 3), *B = malloc(sizeof(float) * (size_t)(tb ? N : K) * ldb);
                float *C0 = malloc(sizeof(float) * N), *C[3];
                CHECK(A && B && C0);
                for (int i = 0; i < K * 3; i++) A[i] = frand();
                for (int i = 0; i < (tb ? N : K) * ldb; i++) B[i] = frand();
                for (int n = 0; n < N; n++) C0[n] = frand();
                for (int t = 0; t < 3; t++) {
                    C[t] = malloc(sizeof(float) * N);
                    CHECK(C[t]);
                    memcpy(C[t], C0, sizeof(float) * N);
                    CHECK_OK(mrt_set_threads(t + 1, NULL));
                    CHECK_OK(mrt_gemm_f32(cpu, NULL, ta, tb, 1, N, K, cases[ci].alpha, A, lda, 0, B, ldb, 0,
                                          cases[ci].beta, C[t], N, 0, 1));
                }
                CHECK_OK(mrt_set_threads(0, NULL));
                double worst = 0.0; /* the largest error over its bound */
                for (int n = 0; n < N; n++) {
                    double acc = 0.0, mag = 0.0;
                    for (int k = 0; k < K; k++) {
                        double p = (double)A[ta ? k * lda : k] * (double)(tb ? B[n * ldb + k] : B[k * ldb + n]);
                        acc += p;
                        mag += fabs(p);
                    }
                    double ref = cases[ci].alpha * acc + (cases[ci].beta == 0.0f ? 0.0 : (double)cases[ci].beta * C0[n]);
                    double bound = K * 0x1p-23 * fabs(cases[ci].alpha) * mag + 0x1p-22 * fabs(ref) + 1e-30;
                    double r = fabs(C[0][n] - ref) / bound;
                    if (r > worst) worst = r;
                }
                CHECKF(worst <= 1.0, "gemv N %d K %d ta %d tb %d: error %.3g of the bound", N, K, ta, tb, worst);
                for (int t = 1; t < 3; t++)
                    CHECKF(!memcmp(C[0], C[t], sizeof(float) * N), "gemv N %d K %d ta %d tb %d: %d threads differ from 1",
                           N, K, ta, tb, t + 1);
                free(A), free(B), free(C0);
                for (int t = 0; t < 3; t++) free(C[t]);
            }
}

/* ---------------------------------------------------------------- safetensors */

/* The model of most weight tests: fc.w f32[4,4] at 0, fc.b f32[4] at 64. */
static const mrt_param_desc fc_params[] = {
    {"fc.w", MRT_F32, 2, {4, 4}, 0, 0, 0},
    {"fc.b", MRT_F32, 1, {4}, 64, 0, 0},
};
static float fc_data[32];
static const char fc_json[] = "{\"fc.w\":{\"dtype\":\"F32\",\"shape\":[4,4],\"data_offsets\":[0,64]},"
                              "\"fc.b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[64,80]}}";

static mrt_status load_fc(const char *path)
{
    static unsigned char dst[128];
    return mrt_weights_load(path, fc_params, 2, dst, sizeof dst);
}

static void test_st_good(void)
{
    /* a f32[2,3] at [0,24], b i64[2] at [24,40], c i32 scalar at [40,44]; metadata first. */
    unsigned char data[44];
    for (int i = 0; i < 44; i++)
        data[i] = (unsigned char)(i + 1);
    write_st(P("good.safetensors"),
             "{\"__metadata__\":{\"format\":\"pt\"},"
             "  \"b\": {\"dtype\": \"I64\", \"shape\": [2], \"data_offsets\": [24, 40]},\n"
             "  \"a\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [0, 24]},"
             "  \"c\": {\"dtype\": \"I32\", \"shape\": [], \"data_offsets\": [40, 44]}}     ",
             data, sizeof data);
    mrt_param_desc params[] = {
        {"c", MRT_I32, 0, {0}, 128, 0, 0},
        {"a", MRT_F32, 2, {2, 3}, 64, 0, 0},
        {"b", MRT_I64, 1, {2}, 0, 0, 0},
    };
    unsigned char dst[192];
    memset(dst, 0xAA, sizeof dst);
    CHECK_OK(mrt_weights_load(P("good.safetensors"), params, 3, dst, sizeof dst));
    CHECK(memcmp(dst + 64, data, 24) == 0);
    CHECK(memcmp(dst + 0, data + 24, 16) == 0);
    CHECK(memcmp(dst + 128, data + 40, 4) == 0);
    for (int i = 16; i < 64; i++)
        CHECKF(dst[i] == 0xAA, "byte %d touched", i);
    for (int i = 88; i < 128; i++)
        CHECKF(dst[i] == 0xAA, "byte %d touched", i);
    for (int i = 132; i < 192; i++)
        CHECKF(dst[i] == 0xAA, "byte %d touched", i);
    /* the same with no params at all and an empty header object */
    write_st(P("empty.safetensors"), "{}", NULL, 0);
    CHECK_OK(mrt_weights_load(P("empty.safetensors"), NULL, 0, NULL, 0));
    write_st(P("meta.safetensors"), "{\"__metadata__\":{\"a\":\"b\"}}", NULL, 0);
    CHECK_OK(mrt_weights_load(P("meta.safetensors"), NULL, 0, NULL, 0));
}

/* F16 and BF16 tensors load as their 2-byte patterns (MRT_F16, MRT_BF16); a model's f16 param
 * meets a file's BF16 (or F32) as a dtype error naming both. */
static void test_st_half(void)
{
    uint16_t data[6] = {0x3c00, 0xc000, 0x7c00, 0x3f80, 0xc040, 0x7fc0}; /* f16 1 -2 inf; bf16 1 -3 NaN */
    write_st(P("half.safetensors"),
             "{\"h\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[0,6]},"
             "\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[6,12]}}",
             data, sizeof data);
    mrt_param_desc params[] = {
        {"h", MRT_F16, 1, {3}, 0, 0, 0},
        {"b", MRT_BF16, 1, {3}, 8, 0, 0},
    };
    unsigned char dst[16];
    memset(dst, 0xAA, sizeof dst);
    CHECK_OK(mrt_weights_load(P("half.safetensors"), params, 2, dst, sizeof dst));
    CHECK(memcmp(dst, data, 6) == 0 && memcmp(dst + 8, data + 3, 6) == 0);
    CHECK(dst[6] == 0xAA && dst[7] == 0xAA && dst[14] == 0xAA);
    mrt_param_desc swapped[] = {
        {"h", MRT_BF16, 1, {3}, 0, 0, 0},
        {"b", MRT_BF16, 1, {3}, 8, 0, 0},
    };
    CHECK_ERR(mrt_weights_load(P("half.safetensors"), swapped, 2, dst, sizeof dst), MRT_ERR_MISMATCH,
              "tensor 'h': dtype F16 in file, model expects BF16");
    CHECK(mrt_dtype_size(MRT_F16) == 2 && mrt_dtype_size(MRT_BF16) == 2);
    CHECK(strcmp(mrt_dtype_name(MRT_F16), "f16") == 0 && strcmp(mrt_dtype_name(MRT_BF16), "bf16") == 0);
}

static void test_st_missing(void)
{
    write_st(P("w.safetensors"),
             "{\"fc.w\":{\"dtype\":\"F32\",\"shape\":[4,4],\"data_offsets\":[0,64]}}", fc_data,
             64);
    CHECK_ERR(load_fc(P("w.safetensors")), MRT_ERR_MISMATCH, "missing tensor 'fc.b'");
    CHECK(strstr(mrt_last_error(), "w.safetensors"));
    CHECK_ERR(load_fc(P("nonexistent.safetensors")), MRT_ERR_IO, "nonexistent.safetensors");
}

static void test_st_unexpected(void)
{
    write_st(P("w.safetensors"),
             "{\"fc.w\":{\"dtype\":\"F32\",\"shape\":[4,4],\"data_offsets\":[0,64]},"
             "\"fc.b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[64,80]},"
             "\"fc.extra\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[80,84]}}",
             fc_data, 84);
    CHECK_ERR(load_fc(P("w.safetensors")), MRT_ERR_MISMATCH, "unexpected tensor 'fc.extra'");
}

static void test_st_wrong_dtype(void)
{
    write_st(P("w.safetensors"),
             "{\"fc.w\":{\"dtype\":\"F32\",\"shape\":[4,4],\"data_offsets\":[0,64]},"
             "\"fc.b\":{\"dtype\":\"I32\",\"shape\":[4],\"data_offsets\":[64,80]}}",
             fc_data, 80);
    CHECK_ERR(load_fc(P("w.safetensors")), MRT_ERR_MISMATCH,
              "tensor 'fc.b': dtype I32 in file, model expects F32");
    write_st(P("w.safetensors"),
             "{\"fc.w\":{\"dtype\":\"F16\",\"shape\":[4,4],\"data_offsets\":[0,32]},"
             "\"fc.b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[32,48]}}",
             fc_data, 48);
    CHECK_ERR(load_fc(P("w.safetensors")), MRT_ERR_MISMATCH,
              "tensor 'fc.w': dtype F16 in file, model expects F32");
    write_st(P("w.safetensors"),
             "{\"fc.w\":{\"dtype\":\"Q4\",\"shape\":[4,4],\"data_offsets\":[0,64]}}", fc_data,
             64);
    CHECK_ERR(load_fc(P("w.safetensors")), MRT_ERR_FORMAT, "tensor 'fc.w': unknown dtype 'Q4'");
}

static void test_st_wrong_shape(void)
{
    write_st(P("digits.safetensors"),
             "{\"fc.w\":{\"dtype\":\"F32\",\"shape\":[4,3],\"data_offsets\":[0,48]},"
             "\"fc.b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[48,64]}}",
             fc_data, 64);
    CHECK_ERR(load_fc(P("digits.safetensors")), MRT_ERR_MISMATCH,
              "digits.safetensors: tensor 'fc.w': shape [4,3] in file, model expects [4,4]");
    write_st(P("w.safetensors"),
             "{\"fc.w\":{\"dtype\":\"F32\",\"shape\":[16],\"data_offsets\":[0,64]},"
             "\"fc.b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[64,80]}}",
             fc_data, 80);
    CHECK_ERR(load_fc(P("w.safetensors")), MRT_ERR_MISMATCH,
              "tensor 'fc.w': shape [16] in file, model expects [4,4]");
}

static void test_st_offsets(void)
{
    /* end past the data region */
    write_st(P("w.safetensors"), fc_json, fc_data, 79);
    CHECK_ERR(load_fc(P("w.safetensors")), MRT_ERR_FORMAT,
              "tensor 'fc.b': data_offsets end 80 is past the end of the data region (79 bytes)");
    /* overlapping spans */
    write_st(P("w.safetensors"),
             "{\"fc.w\":{\"dtype\":\"F32\",\"shape\":[4,4],\"data_offsets\":[0,64]},"
             "\"fc.b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[60,76]}}",
             fc_data, 80);
    CHECK_ERR(load_fc(P("w.safetensors")), MRT_ERR_FORMAT, "overlap");
    CHECK(strstr(mrt_last_error(), "'fc.w'") && strstr(mrt_last_error(), "'fc.b'"));
    /* begin > end */
    write_st(P("w.safetensors"),
             "{\"fc.w\":{\"dtype\":\"F32\",\"shape\":[4,4],\"data_offsets\":[64,0]}}", fc_data,
             80);
    CHECK_ERR(load_fc(P("w.safetensors")), MRT_ERR_FORMAT,
              "tensor 'fc.w': data_offsets [64, 0] has begin > end");
    /* span that disagrees with dtype x shape */
    write_st(P("w.safetensors"),
             "{\"fc.w\":{\"dtype\":\"F32\",\"shape\":[4,4],\"data_offsets\":[0,60]},"
             "\"fc.b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[64,80]}}",
             fc_data, 80);
    CHECK_ERR(load_fc(P("w.safetensors")), MRT_ERR_FORMAT,
              "tensor 'fc.w': data_offsets [0, 60] span 60 bytes, but F32 [4,4] needs 64");
    /* offsets not a pair of integers */
    const char *bad[] = {"[0]", "[0,64,80]", "[-1,63]", "[0.5,64]", "\"0,64\"", "[0,1e300]"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char json[256];
        snprintf(json, sizeof json,
                 "{\"fc.w\":{\"dtype\":\"F32\",\"shape\":[4,4],\"data_offsets\":%s}}", bad[i]);
        write_st(P("w.safetensors"), json, fc_data, 80);
        CHECK_ERR(load_fc(P("w.safetensors")), MRT_ERR_FORMAT, "data_offsets");
    }
    /* offsets are relative to the data region, not the file: a shifted header still loads */
    write_st(P("w.safetensors"), fc_json, fc_data, 80);
    CHECK_OK(load_fc(P("w.safetensors")));
}

static void test_st_header(void)
{
    /* header length larger than the file */
    write_st_len(P("w.safetensors"), 1000, fc_json, fc_data, 80);
    CHECK_ERR(load_fc(P("w.safetensors")), MRT_ERR_FORMAT, "header length 1000 is beyond");
    write_st_len(P("w.safetensors"), UINT64_MAX, fc_json, fc_data, 80);
    CHECK_ERR(load_fc(P("w.safetensors")), MRT_ERR_FORMAT, "header length 18446744073709551615");
    /* header length 0 */
    write_st_len(P("w.safetensors"), 0, "", NULL, 0);
    CHECK_ERR(load_fc(P("w.safetensors")), MRT_ERR_FORMAT, "header length is 0");
    /* above 100 MB (a sparse file, so the test stays small) */
    int fd = open(P("big.safetensors"), O_CREAT | O_TRUNC | O_WRONLY, 0600);
    unsigned char len8[8] = {0x01, 0xe1, 0xf5, 0x05, 0, 0, 0, 0}; /* 100000001 */
    CHECK(write(fd, len8, 8) == 8 && ftruncate(fd, 8 + 100000001 + 10) == 0);
    close(fd);
    CHECK_ERR(load_fc(P("big.safetensors")), MRT_ERR_FORMAT, "exceeds the limit");
    /* malformed JSON, JSON that is not an object, trailing garbage, embedded NUL */
    const char *bad[] = {"{\"fc.w\":{\"dtype\":\"F32\",", "[1,2]", "{} x", "{}\0  ", "nul",
                         "{\"fc.w\":}"};
    size_t lens[] = {0, 0, 0, 5, 0, 0};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t n = lens[i] ? lens[i] : strlen(bad[i]);
        unsigned char buf[64];
        for (int k = 0; k < 8; k++)
            buf[k] = (unsigned char)((uint64_t)n >> (8 * k));
        memcpy(buf + 8, bad[i], n);
        write_bytes(P("w.safetensors"), buf, 8 + n);
        mrt_status st = load_fc(P("w.safetensors"));
        CHECKF(st == MRT_ERR_FORMAT && (strstr(mrt_last_error(), "JSON")),
               "case %zu: %s \"%s\"", i, mrt_status_name(st), mrt_last_error());
    }
    /* truncated: fewer than 8 bytes */
    write_bytes(P("w.safetensors"), "\x10\0\0", 3);
    CHECK_ERR(load_fc(P("w.safetensors")), MRT_ERR_FORMAT, "file is 3 bytes, too short");
    write_bytes(P("w.safetensors"), "", 0);
    CHECK_ERR(load_fc(P("w.safetensors")), MRT_ERR_FORMAT, "file is 0 bytes");
    /* entries without their fields, or of the wrong JSON type */
    const char *entries[] = {
        "{\"fc.w\":{\"shape\":[4,4],\"data_offsets\":[0,64]}}",
        "{\"fc.w\":{\"dtype\":\"F32\",\"data_offsets\":[0,64]}}",
        "{\"fc.w\":{\"dtype\":\"F32\",\"shape\":[4,4]}}",
        "{\"fc.w\":[1,2]}",
        "{\"fc.w\":{\"dtype\":7,\"shape\":[4,4],\"data_offsets\":[0,64]}}",
        "{\"fc.w\":{\"dtype\":\"F32\",\"shape\":4,\"data_offsets\":[0,64]}}",
        "{\"fc.w\":{\"dtype\":\"F32\",\"shape\":[4,\"4\"],\"data_offsets\":[0,64]}}",
        "{\"fc.w\":{\"dtype\":\"F32\",\"shape\":[4,4.5],\"data_offsets\":[0,72]}}",
        "{\"fc.w\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[4,4],\"data_offsets\":[0,64]}}",
    };
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
        write_st(P("w.safetensors"), entries[i], fc_data, 80);
        mrt_status st = load_fc(P("w.safetensors"));
        CHECKF(st == MRT_ERR_FORMAT && strstr(mrt_last_error(), "tensor 'fc.w'"),
               "entry %zu: %s \"%s\"", i, mrt_status_name(st), mrt_last_error());
    }
    /* the same tensor twice */
    write_st(P("w.safetensors"),
             "{\"fc.w\":{\"dtype\":\"F32\",\"shape\":[4,4],\"data_offsets\":[0,64]},"
             "\"fc.w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[64,80]}}",
             fc_data, 80);
    CHECK_ERR(load_fc(P("w.safetensors")), MRT_ERR_FORMAT, "tensor 'fc.w' appears twice");
}

static void test_st_b18_zero_dim(void)
{
    write_st(P("w.safetensors"),
             "{\"fc.w\":{\"dtype\":\"F32\",\"shape\":[4,0],\"data_offsets\":[0,0]}}", NULL, 0);
    CHECK_ERR(load_fc(P("w.safetensors")), MRT_ERR_FORMAT,
              "w.safetensors: tensor 'fc.w': dimension 1 is 0");
    write_st(P("w.safetensors"),
             "{\"fc.w\":{\"dtype\":\"F32\",\"shape\":[0,4],\"data_offsets\":[0,0]}}", NULL, 0);
    CHECK_ERR(load_fc(P("w.safetensors")), MRT_ERR_FORMAT, "tensor 'fc.w': dimension 0 is 0");
    write_st(P("w.safetensors"),
             "{\"fc.w\":{\"dtype\":\"F32\",\"shape\":[4,-3],\"data_offsets\":[0,0]}}", NULL, 0);
    CHECK_ERR(load_fc(P("w.safetensors")), MRT_ERR_FORMAT, "tensor 'fc.w': dimension 1 is -3");
    write_st(P("w.safetensors"),
             "{\"fc.w\":{\"dtype\":\"F32\",\"shape\":[4,-1e300],\"data_offsets\":[0,0]}}", NULL,
             0);
    CHECK_ERR(load_fc(P("w.safetensors")), MRT_ERR_FORMAT, "tensor 'fc.w': dimension 1");
    /* a model param with a zero dimension is the caller's bug, not a crash either */
    mrt_param_desc p = {"fc.w", MRT_F32, 2, {4, 0}, 0, 0, 0};
    unsigned char dst[64];
    CHECK_ERR(mrt_weights_load(P("w.safetensors"), &p, 1, dst, sizeof dst), MRT_ERR_INVALID_ARG,
              "dimension 1 is 0");
}

static void test_st_b19_rank(void)
{
    size_t n = 1000000;
    const char *head = "{\"X\":{\"dtype\":\"F32\",\"data_offsets\":[0,4],\"shape\":[";
    size_t hl = strlen(head);
    char *json = malloc(hl + 2 * n + 8);
    memcpy(json, head, hl);
    char *p = json + hl;
    for (size_t i = 0; i < n; i++) {
        *p++ = '1';
        *p++ = ',';
    }
    p[-1] = ']';
    strcpy(p, "}}");
    float four = 4;
    write_st(P("w.safetensors"), json, &four, 4);
    free(json);
    mrt_param_desc x = {"X", MRT_F32, 1, {1}, 0, 0, 0};
    unsigned char dst[64];
    CHECK_ERR(mrt_weights_load(P("w.safetensors"), &x, 1, dst, sizeof dst), MRT_ERR_FORMAT,
              "w.safetensors: tensor 'X': rank 1000000 exceeds maximum 8");
    /* rank 9: one past the limit, with shape before the other fields */
    write_st(P("w.safetensors"),
             "{\"X\":{\"shape\":[1,1,1,1,1,1,1,1,1],\"dtype\":\"F32\",\"data_offsets\":[0,4]}}",
             &four, 4);
    CHECK_ERR(mrt_weights_load(P("w.safetensors"), &x, 1, dst, sizeof dst), MRT_ERR_FORMAT,
              "tensor 'X': rank 9 exceeds maximum 8");
    /* rank 8 is fine (and then a shape mismatch) */
    write_st(P("w.safetensors"),
             "{\"X\":{\"shape\":[1,1,1,1,1,1,1,1],\"dtype\":\"F32\",\"data_offsets\":[0,4]}}",
             &four, 4);
    CHECK_ERR(mrt_weights_load(P("w.safetensors"), &x, 1, dst, sizeof dst), MRT_ERR_MISMATCH,
              "shape [1,1,1,1,1,1,1,1] in file");
}

static void test_st_b19_overflow(void)
{
    /* 4194305 * 4194305 * 211106198978564 == 4 (mod 2^64) */
    float data[4] = {0};
    write_st(P("w.safetensors"),
             "{\"X\":{\"dtype\":\"F32\",\"shape\":[4194305,4194305,211106198978564],"
             "\"data_offsets\":[0,16]}}",
             data, 16);
    mrt_param_desc x = {"X", MRT_F32, 1, {4}, 0, 0, 0};
    unsigned char dst[64];
    CHECK_ERR(mrt_weights_load(P("w.safetensors"), &x, 1, dst, sizeof dst), MRT_ERR_FORMAT,
              "tensor 'X': element count overflows 64 bits");
    /* elements fit, bytes do not: 2^62 f32 */
    write_st(P("w.safetensors"),
             "{\"X\":{\"dtype\":\"F32\",\"shape\":[2147483648,2147483648],"
             "\"data_offsets\":[0,16]}}",
             data, 16);
    CHECK_ERR(mrt_weights_load(P("w.safetensors"), &x, 1, dst, sizeof dst), MRT_ERR_FORMAT,
              "tensor 'X': byte size overflows 64 bits");
    /* a dimension beyond what a JSON number holds exactly */
    write_st(P("w.safetensors"),
             "{\"X\":{\"dtype\":\"F32\",\"shape\":[1e30],\"data_offsets\":[0,16]}}", data, 16);
    CHECK_ERR(mrt_weights_load(P("w.safetensors"), &x, 1, dst, sizeof dst), MRT_ERR_FORMAT,
              "tensor 'X': dimension 0");
}

static void test_st_dst(void)
{
    write_st(P("w.safetensors"), fc_json, fc_data, 80);
    unsigned char dst[79];
    CHECK_ERR(mrt_weights_load(P("w.safetensors"), fc_params, 2, dst, sizeof dst),
              MRT_ERR_INVALID_ARG, "fc.b");
    mrt_param_desc dup[2] = {fc_params[0], fc_params[0]};
    dup[1].offset = 64;
    dup[1].rank = 1;
    dup[1].shape[0] = 4;
    unsigned char big[128];
    CHECK_ERR(mrt_weights_load(P("w.safetensors"), dup, 2, big, sizeof big), MRT_ERR_INVALID_ARG,
              "listed twice");
    CHECK(mrt_weights_load(NULL, fc_params, 2, big, sizeof big) == MRT_ERR_INVALID_ARG);
    CHECK(mrt_weights_load(P("w.safetensors"), NULL, 2, big, sizeof big) == MRT_ERR_INVALID_ARG);
    CHECK(mrt_weights_load(P("w.safetensors"), fc_params, 2, NULL, 128) == MRT_ERR_INVALID_ARG);
    CHECK_ERR(mrt_weights_load(g_dir, fc_params, 2, big, sizeof big), MRT_ERR_IO, g_dir);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void test_st_large(void)
{
    /* 100 MB of weights: w f32[25000000] and v f32[64]. */
    size_t n = 25000000;
    float *w = malloc(n * 4 + 256);
    for (size_t i = 0; i < n + 64; i++)
        w[i] = (float)(i % 1000);
    char json[256];
    snprintf(json, sizeof json,
             "{\"w\":{\"dtype\":\"F32\",\"shape\":[%zu],\"data_offsets\":[0,%zu]},"
             "\"v\":{\"dtype\":\"F32\",\"shape\":[64],\"data_offsets\":[%zu,%zu]}}",
             n, n * 4, n * 4, n * 4 + 256);
    write_st(P("big.safetensors"), json, w, n * 4 + 256);
    mrt_param_desc params[] = {{"w", MRT_F32, 1, {(int64_t)n}, 256, 0, 0}, {"v", MRT_F32, 1, {64}, 0, 0, 0}};
    mrt_device cpu = {MRT_DEVICE_CPU, 0};
    float *dst = mrt_alloc(cpu, n * 4 + 256);
    CHECK(dst);
    double t0 = now_s();
    mrt_status st = mrt_weights_load(P("big.safetensors"), params, 2, dst, n * 4 + 256);
    double dt = now_s() - t0;
    int same = st == MRT_OK && memcmp(dst + 64, w, n * 4) == 0 && memcmp(dst, w + n, 256) == 0;
    mrt_free(cpu, dst);
    free(w);
    unlink(P("big.safetensors"));
    CHECKF(st == MRT_OK, "%s", mrt_last_error());
    CHECK(same);
    CHECKF(dt < 5.0, "loading 100 MB took %.2f s", dt);
}

/* Every data byte belongs to exactly one tensor, as the safetensors library requires: bytes
 * after the last tensor, a hole between two, or before the first are errors that name them. */
static void test_st_coverage(void)
{
    write_st(P("w.safetensors"), fc_json, fc_data, 84);
    CHECK_ERR(load_fc(P("w.safetensors")), MRT_ERR_FORMAT,
              "w.safetensors: 4 trailing bytes after the last tensor 'fc.b' (data bytes [80, 84)) "
              "belong to no tensor");
    write_st(P("w.safetensors"),
             "{\"fc.w\":{\"dtype\":\"F32\",\"shape\":[4,4],\"data_offsets\":[0,64]},"
             "\"fc.b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[68,84]}}",
             fc_data, 84);
    CHECK_ERR(load_fc(P("w.safetensors")), MRT_ERR_FORMAT,
              "w.safetensors: data bytes [64, 68) between tensors 'fc.w' and 'fc.b' belong to no "
              "tensor");
    write_st(P("w.safetensors"),
             "{\"fc.w\":{\"dtype\":\"F32\",\"shape\":[4,4],\"data_offsets\":[16,80]},"
             "\"fc.b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[80,96]}}",
             fc_data, 96);
    CHECK_ERR(load_fc(P("w.safetensors")), MRT_ERR_FORMAT,
              "w.safetensors: data bytes [0, 16) before tensor 'fc.w' belong to no tensor");
    write_st(P("w.safetensors"), "{\"__metadata__\":{\"a\":\"b\"}}", fc_data, 8);
    CHECK_ERR(mrt_weights_load(P("w.safetensors"), NULL, 0, NULL, 0), MRT_ERR_FORMAT,
              "w.safetensors: 8 data bytes but no tensors");
    /* the exact cover loads, in any order of the entries */
    write_st(P("w.safetensors"),
             "{\"fc.b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[64,80]},"
             "\"fc.w\":{\"dtype\":\"F32\",\"shape\":[4,4],\"data_offsets\":[0,64]}}",
             fc_data, 80);
    CHECK_OK(load_fc(P("w.safetensors")));
}

/* A NUL escape would cut a name or dtype short in cJSON's C strings ("fc.w\u0000x" would load
 * as fc.w): rejected in the name and in the entry; metadata values may hold one. */
static void test_st_nul(void)
{
    write_st(P("w.safetensors"),
             "{\"fc.w\\u0000x\":{\"dtype\":\"F32\",\"shape\":[4,4],\"data_offsets\":[0,64]},"
             "\"fc.b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[64,80]}}",
             fc_data, 80);
    CHECK_ERR(load_fc(P("w.safetensors")), MRT_ERR_FORMAT,
              "w.safetensors: tensor name \"fc.w\\u0000x\" has an embedded NUL (\\u0000)");
    write_st(P("w.safetensors"),
             "{\"fc.w\":{\"dtype\":\"F32\\u0000\",\"shape\":[4,4],\"data_offsets\":[0,64]},"
             "\"fc.b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[64,80]}}",
             fc_data, 80);
    CHECK_ERR(load_fc(P("w.safetensors")), MRT_ERR_FORMAT,
              "w.safetensors: tensor 'fc.w': string \"F32\\u0000\" has an embedded NUL (\\u0000)");
    /* metadata values may hold one; an escaped backslash before "u0000" is not a NUL */
    write_st(P("w.safetensors"), "{\"__metadata__\":{\"a\":\"x\\u0000\"}}", NULL, 0);
    CHECK_OK(mrt_weights_load(P("w.safetensors"), NULL, 0, NULL, 0));
    write_st(P("w.safetensors"), "{\"a\\\\u0000\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
             fc_data, 16);
    CHECK_ERR(mrt_weights_load(P("w.safetensors"), NULL, 0, NULL, 0), MRT_ERR_MISMATCH,
              "unexpected tensor 'a\\u0000'");
}

/* __metadata__ is a map of strings to strings (or null), as the safetensors library reads it. */
static void test_st_metadata(void)
{
    const char *bad[] = {"[1]", "\"pt\"", "7"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char json[64];
        snprintf(json, sizeof json, "{\"__metadata__\":%s}", bad[i]);
        write_st(P("w.safetensors"), json, NULL, 0);
        CHECK_ERR(mrt_weights_load(P("w.safetensors"), NULL, 0, NULL, 0), MRT_ERR_FORMAT,
                  "w.safetensors: __metadata__ is not a JSON object of strings");
    }
    write_st(P("w.safetensors"), "{\"__metadata__\":{\"format\":\"pt\",\"step\":1000}}", NULL, 0);
    CHECK_ERR(mrt_weights_load(P("w.safetensors"), NULL, 0, NULL, 0), MRT_ERR_FORMAT,
              "w.safetensors: __metadata__ 'step' is not a string (metadata values are strings)");
    write_st(P("w.safetensors"), "{\"__metadata__\":{\"a\":{\"b\":\"c\"}}}", NULL, 0);
    CHECK_ERR(mrt_weights_load(P("w.safetensors"), NULL, 0, NULL, 0), MRT_ERR_FORMAT,
              "__metadata__ 'a' is not a string");
    write_st(P("w.safetensors"), "{\"__metadata__\":null}", NULL, 0);
    CHECK_OK(mrt_weights_load(P("w.safetensors"), NULL, 0, NULL, 0));
}

/* The header starts with '{' (leading spaces allowed): a UTF-8 byte-order mark, which cJSON
 * would skip, is rejected as the safetensors library does. */
static void test_st_bom(void)
{
    char json[sizeof fc_json + 8];
    snprintf(json, sizeof json, "\xef\xbb\xbf%s", fc_json);
    write_st(P("w.safetensors"), json, fc_data, 80);
    CHECK_ERR(load_fc(P("w.safetensors")), MRT_ERR_FORMAT,
              "w.safetensors: JSON header starts with a UTF-8 byte-order mark (EF BB BF); a "
              "safetensors header starts with '{'");
    snprintf(json, sizeof json, "  %s", fc_json);
    write_st(P("w.safetensors"), json, fc_data, 80);
    CHECK_OK(load_fc(P("w.safetensors")));
}

/* Deep nesting (valid JSON) is named as such, not "malformed" from cJSON's own limit. */
static void test_st_deep(void)
{
    enum { DEPTH = 2000 };
    char *json = malloc(2 * DEPTH + 64);
    char *p = json + sprintf(json, "{\"x\":{\"extra\":");
    for (int i = 0; i < DEPTH; i++)
        *p++ = '[';
    for (int i = 0; i < DEPTH; i++)
        *p++ = ']';
    strcpy(p, "}}");
    write_st(P("w.safetensors"), json, NULL, 0);
    free(json);
    CHECK_ERR(mrt_weights_load(P("w.safetensors"), NULL, 0, NULL, 0), MRT_ERR_FORMAT,
              "w.safetensors: JSON header is nested too deeply (more than 64 levels at byte 76; a "
              "safetensors header has 3)");
}

/* A .npy file given as weights: "not a safetensors file", not an absurd header length (its
 * magic read as a u64). An empty path names the problem for both readers and the writer. */
static void test_st_not_safetensors(void)
{
    float v[4] = {1, 2, 3, 4};
    mrt_tensor t = {MRT_F32, 1, {4}, v, sizeof v};
    CHECK_OK(mrt_npy_write(P("x.npy"), &t));
    CHECK_ERR(load_fc(P("x.npy")), MRT_ERR_FORMAT,
              "x.npy: not a safetensors file: it is a NumPy .npy file (weights are safetensors; "
              ".npy files are inputs)");
    write_bytes(P("w.txt"), "hello, world: this is text", 26);
    CHECK_ERR(load_fc(P("w.txt")), MRT_ERR_FORMAT,
              "w.txt: not a safetensors file: header length 8583909746840200552 is beyond the end "
              "of the file (26 bytes)");
    CHECK_ERR(load_fc(""), MRT_ERR_INVALID_ARG,
              "mrt_weights_load: the weights path is empty (\"\")");
    mrt_tensor r;
    CHECK_ERR(mrt_npy_read("", &r), MRT_ERR_INVALID_ARG, "mrt_npy_read: the .npy path is empty (\"\")");
    CHECK_ERR(mrt_npy_write("", &t), MRT_ERR_INVALID_ARG,
              "mrt_npy_write: the .npy path is empty (\"\")");
}

/* ---------------------------------------------------------------- npy */

static void test_npy_roundtrip(void)
{
    const mrt_dtype dts[] = {MRT_F32, MRT_I32, MRT_I64, MRT_BOOL, MRT_F16, MRT_BF16};
    static const char *const descr[] = {"<f4", "<i4", "<i8", "|b1", "<f2", "<u2"}; /* bf16: its bits */
    const int64_t shapes[4][3] = {{0}, {5}, {2, 3}, {2, 3, 4}};
    for (int di = 0; di < 6; di++)
        for (int rank = 0; rank <= 3; rank++) {
            mrt_tensor t;
            memset(&t, 0, sizeof t);
            t.dtype = dts[di];
            t.rank = rank;
            size_t numel = 1;
            for (int k = 0; k < rank; k++)
                numel *= (size_t)(t.shape[k] = shapes[rank][k]);
            t.nbytes = numel * mrt_dtype_size(t.dtype);
            t.data = malloc(t.nbytes);
            for (size_t i = 0; i < numel; i++) {
                if (t.dtype == MRT_F32)
                    ((float *)t.data)[i] = (float)i * 0.5f - 3.0f;
                else if (t.dtype == MRT_I32)
                    ((int32_t *)t.data)[i] = (int32_t)i * -7 + 1;
                else if (t.dtype == MRT_BOOL)
                    ((uint8_t *)t.data)[i] = (uint8_t)(i % 3 == 1);
                else if (t.dtype == MRT_F16 || t.dtype == MRT_BF16)
                    ((uint16_t *)t.data)[i] = (uint16_t)(i * 4099u + 0x7c00u); /* incl. inf and NaN */
                else
                    ((int64_t *)t.data)[i] = (int64_t)i * 3000000000LL - 5;
            }
            mrt_status st = mrt_npy_write(P("t.npy"), &t);
            mrt_tensor u;
            mrt_status st2 = st == MRT_OK ? mrt_npy_read(P("t.npy"), &u) : st;
            int same = st2 == MRT_OK && u.dtype == t.dtype && u.rank == t.rank &&
                       u.nbytes == t.nbytes && memcmp(u.shape, t.shape, sizeof t.shape) == 0 &&
                       memcmp(u.data, t.data, t.nbytes) == 0;
            size_t flen = 0;
            char *f = read_bytes(P("t.npy"), &flen);
            mrt_tensor_free(&t);
            if (st2 == MRT_OK)
                mrt_tensor_free(&u);
            CHECKF(st == MRT_OK && st2 == MRT_OK, "%s rank %d: %s", mrt_dtype_name(dts[di]), rank,
                   mrt_last_error());
            CHECKF(same, "%s rank %d: read back differs", mrt_dtype_name(dts[di]), rank);
            /* header as numpy writes it: v1.0, data 64-aligned, '\n' last */
            unsigned hl = (unsigned char)f[8] | (unsigned)(unsigned char)f[9] << 8;
            int hdr_ok = memcmp(f, "\x93NUMPY\x01\x00", 8) == 0 && (10 + hl) % 64 == 0 &&
                         f[10 + hl - 1] == '\n' && flen == 10 + hl + numel * mrt_dtype_size(dts[di]);
            const char *want = rank == 0 ? "'shape': (), }" : rank == 1 ? "'shape': (5,), }"
                             : rank == 2 ? "'shape': (2, 3), }" : "'shape': (2, 3, 4), }";
            char want_descr[32];
            snprintf(want_descr, sizeof want_descr, "{'descr': '%s'", descr[di]);
            int shape_ok = strstr(f + 10, want) != NULL && strncmp(f + 10, want_descr, strlen(want_descr)) == 0;
            free(f);
            CHECKF(hdr_ok && shape_ok, "%s rank %d: header not as numpy writes it",
                   mrt_dtype_name(dts[di]), rank);
        }
    CHECK(count_entries(g_dir, ".tmp.") == 0);
}

static void test_npy_read_forms(void)
{
    float d[6] = {1, 2, 3, 4, 5, 6};
    mrt_tensor t;
    /* numpy's own bytes for np.arange(1, 7, dtype='<f4').reshape(2, 3) */
    write_npy_raw(P("a.npy"), 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", d,
                  24);
    CHECK_OK(mrt_npy_read(P("a.npy"), &t));
    CHECK(t.dtype == MRT_F32 && t.rank == 2 && t.shape[0] == 2 && t.shape[1] == 3 &&
          t.nbytes == 24 && memcmp(t.data, d, 24) == 0);
    mrt_tensor_free(&t);
    /* other key order, odd whitespace, double quotes, no trailing comma, version 2.0 */
    write_npy_raw(P("b.npy"), 2, "{ \"shape\" :(6 ,) ,'fortran_order':False,\n'descr':'<i4'}", d,
                  24);
    CHECK_OK(mrt_npy_read(P("b.npy"), &t));
    CHECK(t.dtype == MRT_I32 && t.rank == 1 && t.shape[0] == 6);
    mrt_tensor_free(&t);
    /* version 3.0, rank 0, '<i8' */
    int64_t s = -42;
    write_npy_raw(P("c.npy"), 3, "{'descr': '<i8', 'fortran_order': False, 'shape': (), }", &s, 8);
    CHECK_OK(mrt_npy_read(P("c.npy"), &t));
    CHECK(t.dtype == MRT_I64 && t.rank == 0 && t.nbytes == 8 && *(int64_t *)t.data == -42);
    mrt_tensor_free(&t);
    /* an empty array and '=' byte order; Python 2 long literals */
    write_npy_raw(P("d.npy"), 1, "{'descr': '=f4', 'fortran_order': False, 'shape': (0, 3L), }",
                  NULL, 0);
    CHECK_OK(mrt_npy_read(P("d.npy"), &t));
    CHECK(t.rank == 2 && t.shape[0] == 0 && t.shape[1] == 3 && t.nbytes == 0);
    mrt_tensor_free(&t);
}

static void test_npy_bad(void)
{
    float d[12] = {0};
    mrt_tensor t;
    struct {
        int major;
        const char *dict;
        size_t dlen;
        mrt_status want;
        const char *sub;
    } cases[] = {
        {1, "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", 24, MRT_ERR_FORMAT,
         "x.npy: dtype '<f8' not supported (expected '<f4', '<i4', '<i8', '|b1', '<f2' or '<u2' (bf16 bits))"},
        {1, "{'descr': '>f2', 'fortran_order': False, 'shape': (3,), }", 6, MRT_ERR_FORMAT,
         "dtype '>f2' not supported"},
        {1, "{'descr': '>f4', 'fortran_order': False, 'shape': (3,), }", 12, MRT_ERR_FORMAT,
         "dtype '>f4' not supported"},
        {1, "{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }", 3, MRT_ERR_FORMAT,
         "dtype '|u1' not supported"},
        {1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,), }", 12,
         MRT_ERR_FORMAT, "structured"},
        {1, "{'descr': '<f4', 'fortran_order': True, 'shape': (3, 4), }", 48, MRT_ERR_FORMAT,
         "fortran_order True"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", 47, MRT_ERR_FORMAT,
         "truncated: data is 47 bytes, shape [3,4] of f32 needs 48"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", 0, MRT_ERR_FORMAT,
         "truncated"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 3), }", 48, MRT_ERR_FORMAT,
         "trailing bytes"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-3, 4), }", 48, MRT_ERR_FORMAT,
         "shape entry 0 is -3"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4194305, 4194305, "
            "211106198978564), }", 16, MRT_ERR_FORMAT, "element count overflows"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", 16,
         MRT_ERR_FORMAT, "does not fit in 64 bits"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", 4,
         MRT_ERR_FORMAT, "rank 9 exceeds maximum 8"},
        {1, "{'descr': '<f4', 'shape': (3,), }", 12, MRT_ERR_FORMAT, "missing 'fortran_order'"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'x': 1}", 12,
         MRT_ERR_FORMAT, "unexpected or repeated key 'x'"},
        {1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", 12,
         MRT_ERR_FORMAT, "repeated"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,) } junk", 12, MRT_ERR_FORMAT,
         "malformed header"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3 4), }", 48, MRT_ERR_FORMAT,
         "malformed header"},
        {1, "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (3,), }", 12, MRT_ERR_FORMAT,
         "malformed header"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': [3], }", 12, MRT_ERR_FORMAT,
         "malformed header"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,", 12, MRT_ERR_FORMAT,
         "malformed header"},
        {1, "", 0, MRT_ERR_FORMAT, "malformed header"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_npy_raw(P("x.npy"), cases[i].major, cases[i].dict, d, cases[i].dlen);
        memset(&t, 0x5a, sizeof t);
        mrt_status st = mrt_npy_read(P("x.npy"), &t);
        CHECKF(st == cases[i].want && strstr(mrt_last_error(), cases[i].sub),
               "case %zu: %s \"%s\", want \"%s\"", i, mrt_status_name(st), mrt_last_error(),
               cases[i].sub);
        CHECKF(t.data == NULL, "case %zu: out->data set on failure", i);
    }
}

static void test_npy_bad_preamble(void)
{
    mrt_tensor t;
    /* bad magic */
    write_bytes(P("x.npy"), "\x93NUMPX\x01\x00\x10\x00{'descr': '<f4'}", 26);
    CHECK_ERR(mrt_npy_read(P("x.npy"), &t), MRT_ERR_FORMAT, "bad magic");
    write_bytes(P("x.npy"), "PK\x03\x04 this is a zip file", 24);
    CHECK_ERR(mrt_npy_read(P("x.npy"), &t), MRT_ERR_FORMAT, "bad magic");
    /* shorter than the preamble */
    write_bytes(P("x.npy"), "\x93NUMPY\x01", 7);
    CHECK_ERR(mrt_npy_read(P("x.npy"), &t), MRT_ERR_FORMAT, "too short");
    write_bytes(P("x.npy"), "\x93NUMPY\x02\x00\x10\x00", 10);
    CHECK_ERR(mrt_npy_read(P("x.npy"), &t), MRT_ERR_FORMAT, "truncated header");
    /* header length beyond the file */
    write_bytes(P("x.npy"), "\x93NUMPY\x01\x00\xff\xff{'descr': '<f4'}", 26);
    CHECK_ERR(mrt_npy_read(P("x.npy"), &t), MRT_ERR_FORMAT, "truncated header");
    write_bytes(P("x.npy"), "\x93NUMPY\x03\x00\xff\xff\xff\xff{'descr'", 20);
    CHECK_ERR(mrt_npy_read(P("x.npy"), &t), MRT_ERR_FORMAT, "truncated header");
    /* unknown version */
    write_bytes(P("x.npy"), "\x93NUMPY\x04\x00\x10\x00{'descr': '<f4'}", 26);
    CHECK_ERR(mrt_npy_read(P("x.npy"), &t), MRT_ERR_FORMAT, "version 4.0");
    /* no such file; a directory */
    CHECK_ERR(mrt_npy_read(P("none.npy"), &t), MRT_ERR_IO, "none.npy");
    CHECK(mrt_npy_read(g_dir, &t) == MRT_ERR_IO);
    CHECK(mrt_npy_read(NULL, &t) == MRT_ERR_INVALID_ARG);
}

static void test_npy_atomic(void)
{
    float v[4] = {1, 2, 3, 4};
    mrt_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = MRT_F32;
    t.rank = 1;
    t.shape[0] = 4;
    t.data = v;
    t.nbytes = 16;
    /* a directory that does not exist: an error, and nothing left anywhere */
    CHECK_ERR(mrt_npy_write(P("nodir/y.npy"), &t), MRT_ERR_IO, "nodir/y.npy");
    CHECK(!exists(P("nodir")));
    CHECK(count_entries(g_dir, "y.npy") == 0);
    /* over an existing file: replaced whole */
    float *big = calloc(1000, sizeof(float));
    mrt_tensor b = t;
    b.shape[0] = 1000;
    b.data = big;
    b.nbytes = 4000;
    CHECK_OK(mrt_npy_write(P("y.npy"), &b));
    free(big);
    chmod(P("y.npy"), 0640);
    CHECK_OK(mrt_npy_write(P("y.npy"), &t));
    mrt_tensor u;
    CHECK_OK(mrt_npy_read(P("y.npy"), &u));
    int same = u.rank == 1 && u.shape[0] == 4 && u.nbytes == 16 && memcmp(u.data, v, 16) == 0;
    mrt_tensor_free(&u);
    CHECK(same);
    struct stat sb;
    CHECK(stat(P("y.npy"), &sb) == 0 && (sb.st_mode & 0777) == 0640 && sb.st_size == 128 + 16);
    CHECK(count_entries(g_dir, ".tmp.") == 0);
    /* a path that is a directory: refused, no temporary file left */
    mkdir(P("adir"), 0700);
    CHECK_ERR(mrt_npy_write(P("adir"), &t), MRT_ERR_IO, "adir");
    CHECK(count_entries(g_dir, ".tmp.") == 0);
    /* an inconsistent tensor is refused before anything is created */
    mrt_tensor bad = t;
    bad.nbytes = 12;
    CHECK_ERR(mrt_npy_write(P("z.npy"), &bad), MRT_ERR_INVALID_ARG, "z.npy");
    bad = t;
    bad.shape[0] = -1;
    CHECK(mrt_npy_write(P("z.npy"), &bad) == MRT_ERR_INVALID_ARG);
    bad = t;
    bad.rank = 9;
    CHECK(mrt_npy_write(P("z.npy"), &bad) == MRT_ERR_INVALID_ARG);
    bad = t;
    bad.data = NULL;
    CHECK(mrt_npy_write(P("z.npy"), &bad) == MRT_ERR_INVALID_ARG);
    CHECK(!exists(P("z.npy")) && count_entries(g_dir, ".tmp.") == 0);
}

/* Symlinks are written through (the link kept); a FIFO, device or dangling link is refused
 * and left as it was. */
static void test_npy_write_special(void)
{
    float v[2] = {5, 6};
    mrt_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = MRT_F32;
    t.rank = 1;
    t.shape[0] = 2;
    t.data = v;
    t.nbytes = 8;
    mkdir(P("sub"), 0700);
    CHECK_OK(mrt_npy_write(P("sub/real.npy"), &t));
    chmod(P("sub/real.npy"), 0604);
    unlink(P("link.npy"));
    CHECK(symlink("sub/real.npy", P("link.npy")) == 0);
    v[0] = 7;
    CHECK_OK(mrt_npy_write(P("link.npy"), &t));
    struct stat sb;
    CHECK(lstat(P("link.npy"), &sb) == 0 && S_ISLNK(sb.st_mode));
    CHECK(stat(P("sub/real.npy"), &sb) == 0 && (sb.st_mode & 0777) == 0604);
    mrt_tensor u;
    CHECK_OK(mrt_npy_read(P("sub/real.npy"), &u));
    CHECK(u.nbytes == 8 && ((float *)u.data)[0] == 7);
    mrt_tensor_free(&u);
    CHECK(count_entries(g_dir, ".tmp.") == 0 && count_entries(P("sub"), ".tmp.") == 0);

    unlink(P("fifo"));
    CHECK(mkfifo(P("fifo"), 0600) == 0);
    CHECK_ERR(mrt_npy_write(P("fifo"), &t), MRT_ERR_IO,
              "fifo: cannot write a .npy file there: it is a FIFO; only a regular file (or a "
              "symlink to one) is written");
    CHECK(lstat(P("fifo"), &sb) == 0 && S_ISFIFO(sb.st_mode));
    CHECK_ERR(mrt_npy_write("/dev/null", &t), MRT_ERR_IO,
              "/dev/null: cannot write a .npy file there: it is a character device");
    CHECK(stat("/dev/null", &sb) == 0 && S_ISCHR(sb.st_mode));
    unlink(P("flink"));
    CHECK(symlink("fifo", P("flink")) == 0);
    CHECK_ERR(mrt_npy_write(P("flink"), &t), MRT_ERR_IO, "fifo', a FIFO; only a regular file");
    unlink(P("dangling"));
    CHECK(symlink("gone/y.npy", P("dangling")) == 0);
    CHECK_ERR(mrt_npy_write(P("dangling"), &t), MRT_ERR_IO,
              "dangling: cannot write a .npy file there: it is a symlink to 'gone/y.npy', which "
              "does not exist");
    CHECK(!exists(P("gone")) && lstat(P("dangling"), &sb) == 0 && S_ISLNK(sb.st_mode));
    unlink(P("loop"));
    CHECK(symlink("loop", P("loop")) == 0);
    CHECK_ERR(mrt_npy_write(P("loop"), &t), MRT_ERR_IO, "it is a symlink that cannot be resolved");
    CHECK(count_entries(g_dir, ".tmp.") == 0);
}

/* ---------------------------------------------------------------- mrt_main, fake models */

/* Fake model "double": y[batch,3] = 2 * x[batch,3] + b, b f32[3] from the weights. It computes
 * on the host whatever its device, so its weights stay in host memory (auto is cuda:0 on a GPU
 * machine, and host code must not touch device memory). */
typedef struct fake {
    mrt_device dev;
    float *w;
} fake;
static int g_runs, g_max_run_batch;

static mrt_status fake_create(void **out, const char *device)
{
    mrt_device d;
    mrt_status st = mrt_device_select(device, &d);
    if (st != MRT_OK)
        return st;
    fake *m = calloc(1, sizeof *m);
    m->dev = d;
    m->w = calloc(3, sizeof(float));
    *out = m;
    return MRT_OK;
}
static mrt_status fake_load(void *model, const char *path)
{
    fake *m = model;
    static const mrt_param_desc p = {"b", MRT_F32, 1, {3}, 0, 0, 0};
    return mrt_weights_load(path, &p, 1, m->w, 12);
}
static mrt_status fake_run(void *model, const int64_t *dims, const void *const *in, void *const *out)
{
    fake *m = model;
    int batch = (int)dims[0];
    if (batch < 1 || batch > 4)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "fake: batch %d out of range 1..4", batch);
    g_runs++;
    if (batch > g_max_run_batch)
        g_max_run_batch = batch;
    const float *x = in[0];
    float *y = out[0];
    for (int i = 0; i < batch * 3; i++)
        y[i] = 2 * x[i] + m->w[i % 3];
    return MRT_OK;
}
static void fake_destroy(void *model)
{
    fake *m = model;
    free(m->w);
    free(m);
}
static mrt_device fake_device(void *model) { return ((fake *)model)->dev; }

static const char *const fake_syms[] = {"batch"};
static const int64_t fake_max[] = {4}, add_max[] = {8};
static const mrt_io_desc fake_in[] = {{"x", MRT_F32, 2, {1, 3}, {{1}}}};
static const mrt_io_desc fake_out[] = {{"y", MRT_F32, 2, {1, 3}, {{1}}}};
static const mrt_model_info fake_info = {
    "double", 1, 1, fake_in, fake_out, 1, 4, 12, 4096,
    fake_create, fake_load, fake_run, fake_destroy, fake_device, 1, 4096, NULL, 1, fake_syms, fake_max, 0, NULL,
};

/* The same, but the compiler found an op that mixes batch items: never chunked. */
static const mrt_model_info fake_info_mixing = {
    "double_mixing", 1, 1, fake_in, fake_out, 1, 4, 12, 4096,
    fake_create, fake_load, fake_run, fake_destroy, fake_device, 0, 4096, NULL, 1, fake_syms, fake_max, 0, NULL,
};

/* The same with the batch on axis 1 (x [3, batch]): cannot be chunked. */
static const mrt_io_desc fake_in_t[] = {{"x", MRT_F32, 2, {3, 1}, {{0}, {1}}}};
static const mrt_io_desc fake_out_t[] = {{"y", MRT_F32, 2, {3, 1}, {{0}, {1}}}};
static const mrt_model_info fake_info_t = {
    "double_t", 1, 1, fake_in_t, fake_out_t, 1, 4, 12, 0,
    fake_create, fake_load, fake_run, fake_destroy, fake_device, 1, 4096, NULL, 1, fake_syms, fake_max, 0, NULL,
};

/* Two inputs a, b [batch*2] and output s [batch*2] = a + b; no weights, max batch 8. */
static mrt_status add_create(void **out, const char *device)
{
    mrt_device d;
    mrt_status st = mrt_device_select(device, &d);
    if (st != MRT_OK)
        return st;
    *out = malloc(1);
    return MRT_OK;
}
static mrt_status add_run(void *model, const int64_t *dims, const void *const *in, void *const *out)
{
    (void)model;
    int batch = (int)dims[0];
    g_runs++;
    const float *a = in[0], *b = in[1];
    float *s = out[0];
    for (int i = 0; i < batch * 2; i++)
        s[i] = a[i] + b[i];
    return MRT_OK;
}
static void add_destroy(void *model) { free(model); }
static const mrt_io_desc add_in[] = {{"a", MRT_F32, 1, {2}, {{1}}}, {"b", MRT_F32, 1, {2}, {{1}}}};
static const mrt_io_desc add_out[] = {{"s", MRT_F32, 1, {2}, {{1}}}, {"t", MRT_I32, 0, {0}, {{0}}}};
static const mrt_model_info add_info = {
    "add", 2, 2, add_in, add_out, 1, 8, 0, 0, add_create, NULL, add_run, add_destroy, NULL, 1, 0, NULL, 1, fake_syms, add_max, 0, NULL,
};

/* Write x.npy ([n,3] f32, x[i] = i) and b.safetensors (b = [10, 20, 30]). */
static void fake_files(int n)
{
    float *x = malloc((size_t)n * 3 * sizeof(float) + 4);
    for (int i = 0; i < n * 3; i++)
        x[i] = (float)i;
    mrt_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = MRT_F32;
    t.rank = 2;
    t.shape[0] = n;
    t.shape[1] = 3;
    t.data = x;
    t.nbytes = (size_t)n * 12;
    if (mrt_npy_write(P("x.npy"), &t) != MRT_OK)
        abort();
    free(x);
    float b[3] = {10, 20, 30};
    write_st(P("b.safetensors"), "{\"b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]}}",
             b, 12);
}

/* Run mrt_main with a NULL-terminated argument list; stdout and stderr captured. */
static int run_main(const mrt_model_info *info, char **out, char **err, ...)
{
    char *argv[64];
    int argc = 0;
    va_list ap;
    va_start(ap, err);
    argv[argc++] = "/some/dir/prog";
    for (char *a; (a = va_arg(ap, char *)) != NULL && argc < 63;)
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    g_runs = 0;
    g_max_run_batch = 0;
    /* stdout to one file, stderr to another */
    fflush(stdout);
    fflush(stderr);
    int so = dup(1), se = dup(2);
    int fo = open(P("stdout.txt"), O_CREAT | O_TRUNC | O_WRONLY, 0600);
    int fe = open(P("stderr.txt"), O_CREAT | O_TRUNC | O_WRONLY, 0600);
    dup2(fo, 1);
    dup2(fe, 2);
    close(fo);
    close(fe);
    int rc = mrt_main(info, argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(so, 1);
    dup2(se, 2);
    close(so);
    close(se);
    *out = read_bytes(P("stdout.txt"), NULL);
    *err = read_bytes(P("stderr.txt"), NULL);
    unlink(P("stdout.txt"));
    unlink(P("stderr.txt"));
    return rc;
}

/* Free the captured text at the end of a test body, even when a CHECK returns early. */
#define MAIN(info, ...)                                                                         \
    (free(out), free(err), out = err = NULL, run_main((info), &out, &err, __VA_ARGS__, NULL))

static char *out, *err;
static void main_cleanup(void)
{
    free(out);
    free(err);
    out = err = NULL;
}

static void check_y(int n, int *ok)
{
    mrt_tensor y;
    *ok = 0;
    if (mrt_npy_read(P("y.npy"), &y) != MRT_OK)
        return;
    int good = y.dtype == MRT_F32 && y.rank == 2 && y.shape[0] == n && y.shape[1] == 3;
    for (int i = 0; good && i < n * 3; i++)
        good = ((float *)y.data)[i] == 2.0f * (float)i + 10.0f * (float)(1 + i % 3);
    mrt_tensor_free(&y);
    *ok = good;
}

static void test_cli_help(void)
{
    int rc = MAIN(&fake_info, "--help");
    CHECKF(rc == 0, "rc %d: %s", rc, err);
    CHECKF(strstr(out, "usage: prog --weights") && strstr(out, "x ") &&
           strstr(out, "f32[batch,3]") && strstr(out, "y ") && strstr(out, "--device"),
           "help: %s", out);
    rc = MAIN(&add_info, "--bogus", "--help");
    CHECK(rc == 0 && strstr(out, "a ") && strstr(out, "f32[batch*2]") && strstr(out, "i32[]"));
    rc = MAIN(&fake_info_t, "-h");
    CHECK(rc == 0 && strstr(out, "f32[3,batch]"));
}

static void test_cli_usage_errors(void)
{
    fake_files(2);
    int rc = MAIN(&fake_info, "--weights", P("b.safetensors"));
    CHECKF(rc == 2 && strstr(err, "prog: error: missing --input for 'x'") &&
           strstr(err, "--help"), "rc %d: %s", rc, err);
    rc = MAIN(&fake_info, "--weights", P("b.safetensors"), "--input", P("x.npy"), "--frobnicate");
    CHECKF(rc == 2 && strstr(err, "prog: error: unknown option '--frobnicate'"), "rc %d: %s", rc,
           err);
    rc = MAIN(&fake_info, "--input", P("x.npy"), "--weights");
    CHECKF(rc == 2 && strstr(err, "--weights needs a value"), "rc %d: %s", rc, err);
    char spec[4200];
    snprintf(spec, sizeof spec, "z=%s", P("x.npy"));
    rc = MAIN(&fake_info, "--weights", P("b.safetensors"), "--input", spec);
    CHECKF(rc == 2 && strstr(err, "unknown input 'z'") && strstr(err, " x"), "rc %d: %s", rc,
           err);
    rc = MAIN(&fake_info, "--weights", P("b.safetensors"), "--input", P("x.npy"), "--repeat",
              "0");
    CHECKF(rc == 2 && strstr(err, "--repeat '0'"), "rc %d: %s", rc, err);
    rc = MAIN(&fake_info, "--weights", P("b.safetensors"), "--input", P("x.npy"), "--repeat",
              "3x");
    CHECK(rc == 2);
    rc = MAIN(&fake_info, "--weights", P("b.safetensors"), "--input", P("x.npy"), "--input",
              P("x.npy"));
    CHECKF(rc == 2 && strstr(err, "given twice"), "rc %d: %s", rc, err);
    /* a single-valued flag given twice: an error naming both values, whichever form */
    rc = MAIN(&fake_info, "--weights", P("b.safetensors"), "--input", P("x.npy"), "--weights=w2");
    CHECKF(rc == 2 && strstr(err, "prog: error: --weights given twice ('") &&
           strstr(err, "b.safetensors' and 'w2'); give it once"), "rc %d: %s", rc, err);
    rc = MAIN(&fake_info, "--weights", P("b.safetensors"), "--input", P("x.npy"), "--device",
              "cpu", "--device", "cuda");
    CHECKF(rc == 2 && strstr(err, "prog: error: --device given twice ('cpu' and 'cuda'); give "
                             "it once"), "rc %d: %s", rc, err);
    rc = MAIN(&fake_info, "--weights", P("b.safetensors"), "--input", P("x.npy"), "--repeat",
              "2", "--repeat=3");
    CHECKF(rc == 2 && strstr(err, "prog: error: --repeat given twice ('2' and '3'); give it "
                             "once"), "rc %d: %s", rc, err);
    rc = MAIN(&fake_info, "--weights", "", "--weights", P("b.safetensors"), "--input",
              P("x.npy"));
    CHECKF(rc == 2 && strstr(err, "--weights given twice (''"), "rc %d: %s", rc, err);
    CHECK(g_runs == 0);
    rc = MAIN(&fake_info, "--input", P("x.npy"));
    CHECKF(rc == 2 && strstr(err, "missing --weights"), "rc %d: %s", rc, err);
    rc = MAIN(&fake_info, "--weights", P("b.safetensors"), "--input", P("x.npy"), "stray");
    CHECKF(rc == 2 && strstr(err, "unexpected argument 'stray'"), "rc %d: %s", rc, err);
    rc = MAIN(&add_info, "--input", P("x.npy"));
    CHECKF(rc == 2 && strstr(err, "without NAME="), "rc %d: %s", rc, err);
    CHECK(!exists(P("y.npy")));
}

static void test_cli_run(void)
{
    fake_files(3);
    char spec[4200];
    snprintf(spec, sizeof spec, "y=%s", P("y.npy"));
    unsetenv("MODELRT_DEVICE");
    int rc = MAIN(&fake_info, "--weights", P("b.safetensors"), "--input", P("x.npy"), "--output",
                  spec);
    CHECKF(rc == 0, "rc %d: %s", rc, err);
    CHECKF(strstr(err, "modelrt: auto selected "), "%s", err);
    CHECK(g_runs == 1 && g_max_run_batch == 3);
    int ok;
    check_y(3, &ok);
    CHECK(ok);
    /* the forms "--flag=value", "--input x=FILE", "--output FILE" */
    unlink(P("y.npy"));
    char in[4200], w[4200];
    snprintf(in, sizeof in, "--input=x=%s", P("x.npy"));
    snprintf(w, sizeof w, "--weights=%s", P("b.safetensors"));
    rc = MAIN(&fake_info, w, in, "--output", P("y.npy"), "--device", "cpu");
    CHECKF(rc == 0, "rc %d: %s", rc, err);
    CHECK(strstr(err, "auto selected") == NULL);
    check_y(3, &ok);
    CHECK(ok);
    /* an output not asked for is not written */
    unlink(P("y.npy"));
    rc = MAIN(&fake_info, "--weights", P("b.safetensors"), "--input", P("x.npy"));
    CHECKF(rc == 0, "rc %d: %s", rc, err);
    CHECK(!exists(P("y.npy")) && g_runs == 1);
    CHECK(count_entries(g_dir, ".tmp.") == 0);
}

static void test_cli_chunked(void)
{
    fake_files(10);
    int rc = MAIN(&fake_info, "--weights", P("b.safetensors"), "--input", P("x.npy"), "--output",
                  P("y.npy"));
    CHECKF(rc == 0, "rc %d: %s", rc, err);
    CHECKF(g_runs == 3 && g_max_run_batch == 4, "runs %d, max batch %d", g_runs, g_max_run_batch);
    int ok;
    check_y(10, &ok);
    CHECK(ok);
    /* batch on axis 1: no chunking, a clear error */
    float xt[30] = {0};
    mrt_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = MRT_F32;
    t.rank = 2;
    t.shape[0] = 3;
    t.shape[1] = 10;
    t.data = xt;
    t.nbytes = sizeof xt;
    CHECK_OK(mrt_npy_write(P("xt.npy"), &t));
    rc = MAIN(&fake_info_t, "--weights", P("b.safetensors"), "--input", P("xt.npy"));
    CHECKF(rc == 1 && strstr(err, "prog: error: batch 10 exceeds the compiled maximum 4 "
                                  "(recompile with --max-batch)"), "rc %d: %s", rc, err);
    CHECK(g_runs == 0);
    /* batch leading, but the model mixes batch items: no chunking either */
    rc = MAIN(&fake_info_mixing, "--weights", P("b.safetensors"), "--input", P("x.npy"));
    CHECKF(rc == 1 && strstr(err, "prog: error: batch 10 exceeds the compiled maximum 4 "
                                  "(recompile with --max-batch)") && strstr(err, "mixes"),
           "rc %d: %s", rc, err);
    CHECK(g_runs == 0);
    t.shape[1] = 4;
    t.nbytes = 48;
    CHECK_OK(mrt_npy_write(P("xt.npy"), &t));
    rc = MAIN(&fake_info_t, "--weights", P("b.safetensors"), "--input", P("xt.npy"));
    CHECKF(rc == 0 && g_runs == 1 && g_max_run_batch == 4, "rc %d: %s", rc, err);
}

static void test_cli_shape_errors(void)
{
    /* wrong inner dimension */
    float x[8] = {0};
    mrt_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = MRT_F32;
    t.rank = 2;
    t.shape[0] = 2;
    t.shape[1] = 4;
    t.data = x;
    t.nbytes = 32;
    CHECK_OK(mrt_npy_write(P("x.npy"), &t));
    fake_files(0 + 1); /* b.safetensors; x.npy rewritten below */
    CHECK_OK(mrt_npy_write(P("bad.npy"), &t));
    int rc = MAIN(&fake_info, "--weights", P("b.safetensors"), "--input", P("bad.npy"));
    CHECKF(rc == 1 && strstr(err, "prog: error: input 'x'") && strstr(err, "bad.npy") &&
           strstr(err, "shape [2,4], model expects [batch,3]"), "rc %d: %s", rc, err);
    /* wrong rank */
    t.rank = 1;
    t.shape[0] = 8;
    CHECK_OK(mrt_npy_write(P("bad.npy"), &t));
    rc = MAIN(&fake_info, "--weights", P("b.safetensors"), "--input", P("bad.npy"));
    CHECKF(rc == 1 && strstr(err, "shape [8], model expects [batch,3]"), "rc %d: %s", rc, err);
    /* wrong dtype */
    int32_t xi[6] = {0};
    t.dtype = MRT_I32;
    t.rank = 2;
    t.shape[0] = 2;
    t.shape[1] = 3;
    t.data = xi;
    t.nbytes = sizeof xi;
    CHECK_OK(mrt_npy_write(P("bad.npy"), &t));
    rc = MAIN(&fake_info, "--weights", P("b.safetensors"), "--input", P("bad.npy"));
    CHECKF(rc == 1 && strstr(err, "input 'x'") && strstr(err, "dtype i32") &&
           strstr(err, "expects f32 [batch,3]"), "rc %d: %s", rc, err);
    /* batch 0 (B18: never run with an empty batch) */
    t.dtype = MRT_F32;
    t.shape[0] = 0;
    t.nbytes = 0;
    CHECK_OK(mrt_npy_write(P("bad.npy"), &t));
    rc = MAIN(&fake_info, "--weights", P("b.safetensors"), "--input", P("bad.npy"));
    CHECKF(rc == 1 && strstr(err, "gives batch = 0") && g_runs == 0, "rc %d: %s", rc, err);
    /* a missing or malformed input file */
    rc = MAIN(&fake_info, "--weights", P("b.safetensors"), "--input", P("none.npy"));
    CHECKF(rc == 1 && strstr(err, "prog: error: ") && strstr(err, "none.npy"), "rc %d: %s", rc,
           err);
    /* inputs disagreeing on the batch */
    float a[4] = {1, 2, 3, 4}, b[6] = {1, 1, 1, 1, 1, 1};
    mrt_tensor ta;
    memset(&ta, 0, sizeof ta);
    ta.dtype = MRT_F32;
    ta.rank = 1;
    ta.shape[0] = 4;
    ta.data = a;
    ta.nbytes = 16;
    CHECK_OK(mrt_npy_write(P("a.npy"), &ta));
    ta.shape[0] = 6;
    ta.data = b;
    ta.nbytes = 24;
    CHECK_OK(mrt_npy_write(P("b.npy"), &ta));
    char sa[4200], sb[4200], ss[4200];
    snprintf(sa, sizeof sa, "a=%s", P("a.npy"));
    snprintf(sb, sizeof sb, "b=%s", P("b.npy"));
    rc = MAIN(&add_info, "--input", sa, "--input", sb);
    CHECKF(rc == 1 && strstr(err, "input 'b'") && strstr(err, "means batch = 3") &&
           strstr(err, "input 'a' has batch = 2"), "rc %d: %s", rc, err);
    /* odd length for [batch*2] */
    ta.shape[0] = 3;
    ta.nbytes = 12;
    CHECK_OK(mrt_npy_write(P("b.npy"), &ta));
    rc = MAIN(&add_info, "--input", sa, "--input", sb);
    CHECKF(rc == 1 && strstr(err, "shape [3], model expects [batch*2]"), "rc %d: %s", rc, err);
    /* and the two-input model working, with a rank-0 output left unwritten */
    ta.shape[0] = 4;
    ta.nbytes = 16;
    CHECK_OK(mrt_npy_write(P("b.npy"), &ta));
    snprintf(ss, sizeof ss, "s=%s", P("s.npy"));
    rc = MAIN(&add_info, "--input", sb, "--input", sa, "--output", ss);
    CHECKF(rc == 0, "rc %d: %s", rc, err);
    mrt_tensor s;
    CHECK_OK(mrt_npy_read(P("s.npy"), &s));
    int ok = s.rank == 1 && s.shape[0] == 4 && ((float *)s.data)[0] == 2.0f &&
             ((float *)s.data)[3] == 5.0f;
    mrt_tensor_free(&s);
    CHECK(ok);
}

static void test_cli_device(void)
{
    fake_files(2);
    int rc = MAIN(&fake_info, "--weights", P("b.safetensors"), "--input", P("x.npy"), "--output",
                  P("y.npy"), "--device", "cuda");
    if (mrt_cuda_device_count(NULL) > 0) /* a GPU machine: cuda works there; see cuda_* tests */
        return;
    CHECKF(rc == 1 && strstr(err, "prog: error: device cuda:0 requested, 0 CUDA devices visible ("),
           "rc %d: %s", rc, err);
    CHECK(!exists(P("y.npy")) && g_runs == 0);
    rc = MAIN(&fake_info, "--weights", P("b.safetensors"), "--input", P("x.npy"), "--device",
              "banana");
    CHECKF(rc == 1 && strstr(err, "prog: error: unknown device 'banana'"), "rc %d: %s", rc, err);
    setenv("MODELRT_DEVICE", "cuda:1", 1);
    rc = MAIN(&fake_info, "--weights", P("b.safetensors"), "--input", P("x.npy"));
    unsetenv("MODELRT_DEVICE");
    CHECKF(rc == 1 && strstr(err, "cuda:1") && strstr(err, "MODELRT_DEVICE"), "rc %d: %s", rc,
           err);
    rc = MAIN(&fake_info, "--weights", P("b.safetensors"), "--input", P("x.npy"), "--device",
              "cpu:1", "--output", P("y.npy"));
    CHECKF(rc == 0, "rc %d: %s", rc, err);
}

static void test_cli_list_devices(void)
{
    int rc = MAIN(&fake_info, "--list-devices");
    CHECKF(rc == 0, "rc %d: %s", rc, err);
    CHECKF(strncmp(out, "cpu:0  ", 7) == 0 && strstr(out, "  memory ") && strstr(out, " GiB\n"),
           "out: %s", out);
    const char *why = NULL;
    if (mrt_cuda_device_count(&why) == 0) {
        char want[1100];
        snprintf(want, sizeof want, "\nno CUDA devices: %s\n", why);
        CHECKF(strstr(out, want), "out: %s", out);
        CHECK(!strstr(out, "cuda:0"));
    } else {
        CHECKF(strstr(out, "\ncuda:0  ") && strstr(out, "(free ") && strstr(out, "  compute "),
               "out: %s", out);
    }
    CHECKF(err[0] == '\0', "stderr: %s", err);
    /* needs no other argument, and wins over a usage mistake */
    rc = MAIN(&fake_info, "--bogus", "--list-devices");
    CHECKF(rc == 0 && strncmp(out, "cpu:0", 5) == 0, "rc %d: %s", rc, err);
    rc = MAIN(&fake_info, "--help");
    CHECKF(rc == 0 && strstr(out, "--list-devices") && strstr(out, "cuda:N") &&
           strstr(out, "auto ") && strstr(out, "cpu:N"), "help: %s", out);
}

static void fake_list_cli(void)
{
    int rc = MAIN(&fake_info, "--list-devices");
    CHECKF(rc == 0 && strstr(out, "\ncuda:0  " FAKE_NAME "  memory 2.0 GiB (free 2.0 GiB)  "
                                  "compute 9.0\n") && !strstr(out, "cuda:1") &&
           !strstr(out, "no CUDA devices"), "rc %d: %s", rc, out);
    main_cleanup();
}

/* The device actually used is reported: auto's one line on stderr, and --time/--memory. */
static void test_cli_auto_device(void)
{
    if (mrt_cuda_device_count(NULL) > 0)
        return;
    fake_files(2);
    unsetenv("MODELRT_DEVICE");
    int rc = MAIN(&fake_info, "--weights", P("b.safetensors"), "--input", P("x.npy"), "--output",
                  P("y.npy"), "--memory");
    CHECKF(rc == 0, "rc %d: %s", rc, err);
    const char *line = strstr(err, "modelrt: auto selected cpu:0 (no usable CUDA device: ");
    CHECKF(line && !strstr(line + 20, "auto selected"), "stderr: %s", err);
    CHECKF(strstr(err, "(device cpu:0)"), "stderr: %s", err);
    int ok;
    check_y(2, &ok);
    CHECK(ok);
}

static void test_cli_weights_errors(void)
{
    fake_files(2);
    write_st(P("w0.safetensors"), "{\"b\":{\"dtype\":\"F32\",\"shape\":[3,0],\"data_offsets\":[0,0]}}",
             NULL, 0);
    int rc = MAIN(&fake_info, "--weights", P("w0.safetensors"), "--input", P("x.npy"),
                  "--output", P("y.npy"));
    CHECKF(rc == 1 && strstr(err, "prog: error: ") &&
           strstr(err, "w0.safetensors: tensor 'b': dimension 1 is 0"), "rc %d: %s", rc, err);
    float four[4] = {0};
    write_st(P("w4.safetensors"), "{\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
             four, 16);
    rc = MAIN(&fake_info, "--weights", P("w4.safetensors"), "--input", P("x.npy"));
    CHECKF(rc == 1 && strstr(err, "tensor 'b': shape [4] in file, model expects [3]"),
           "rc %d: %s", rc, err);
    rc = MAIN(&fake_info, "--weights", P("nope.safetensors"), "--input", P("x.npy"));
    CHECKF(rc == 1 && strstr(err, "nope.safetensors"), "rc %d: %s", rc, err);
    CHECK(!exists(P("y.npy")) && g_runs == 0);
}

static void test_cli_time_memory(void)
{
    fake_files(10);
    int rc = MAIN(&fake_info, "--weights", P("b.safetensors"), "--input", P("x.npy"), "--output",
                  P("y.npy"), "--time", "--repeat", "3", "--memory", "--device", "cpu");
    CHECKF(rc == 0, "rc %d: %s", rc, err);
    CHECKF(strstr(err, "time: ") && strstr(err, " ms per run (3 runs, batch 10, device cpu:0; weights 12 bytes, arena 4096 bytes)\n"),
           "%s", err);
    CHECKF(strstr(err, "memory: weights 12 bytes, arena 4096 bytes (device cpu:0)\n"), "%s", err);
    CHECKF(g_runs == 4 * 3, "runs %d (one warm-up + 3, 3 chunks each)", g_runs);
    int ok;
    check_y(10, &ok);
    CHECK(ok);
    rc = MAIN(&fake_info, "--weights", P("b.safetensors"), "--input", P("x.npy"), "--repeat", "2");
    CHECK(rc == 0 && g_runs == 2 * 3 && strstr(err, "time:") == NULL);
}

/* ---------------------------------------------------------------- driver */

typedef struct test_case {
    const char *name;
    void (*fn)(void);
} test_case;

static const test_case tests[] = {
    {"status_basics", test_status_basics},
    {"log_hook", test_log_hook},
    {"env_flag", test_env_flag},
    {"device_parse", test_device_parse},
    {"device_select", test_device_select},
    {"device_env", test_device_env},
    {"device_parse_ordinals", test_device_parse_ordinals},
    {"device_parse_quote", test_device_parse_quote},
    {"device_select_empty", test_device_select_empty},
    {"device_str", test_device_str},
    {"alloc", test_alloc},
    {"cuda_count", test_cuda_count},
    {"cuda_visible_empty", test_cuda_visible_empty},
    {"device_select_b16", test_device_select_b16},
    {"device_list", test_device_list},
    {"fake_cuda", test_fake_cuda},
    {"fake_cuda_malformed", test_fake_cuda_malformed},
    {"fake_cuda_cli", test_fake_cuda_cli},
    {"cpu_device_ops", test_cpu_device_ops},
    {"gemm_cpu", test_gemm_cpu},
    {"gemv_cpu", test_gemv_cpu},
    {"gemm_bias_act_cpu", test_gemm_bias_act_cpu},
    {"st_good", test_st_good},
    {"st_half", test_st_half},
    {"st_missing", test_st_missing},
    {"st_unexpected", test_st_unexpected},
    {"st_wrong_dtype", test_st_wrong_dtype},
    {"st_wrong_shape", test_st_wrong_shape},
    {"st_offsets", test_st_offsets},
    {"st_header", test_st_header},
    {"st_b18_zero_dim", test_st_b18_zero_dim},
    {"st_b19_rank", test_st_b19_rank},
    {"st_b19_overflow", test_st_b19_overflow},
    {"st_dst", test_st_dst},
    {"st_large", test_st_large},
    {"st_coverage", test_st_coverage},
    {"st_nul", test_st_nul},
    {"st_metadata", test_st_metadata},
    {"st_bom", test_st_bom},
    {"st_deep", test_st_deep},
    {"st_not_safetensors", test_st_not_safetensors},
    {"npy_roundtrip", test_npy_roundtrip},
    {"npy_read_forms", test_npy_read_forms},
    {"npy_bad", test_npy_bad},
    {"npy_bad_preamble", test_npy_bad_preamble},
    {"npy_atomic", test_npy_atomic},
    {"npy_write_special", test_npy_write_special},
    {"cli_help", test_cli_help},
    {"cli_usage_errors", test_cli_usage_errors},
    {"cli_run", test_cli_run},
    {"cli_chunked", test_cli_chunked},
    {"cli_shape_errors", test_cli_shape_errors},
    {"cli_device", test_cli_device},
    {"cli_list_devices", test_cli_list_devices},
    {"cli_auto_device", test_cli_auto_device},
    {"cli_weights_errors", test_cli_weights_errors},
    {"cli_time_memory", test_cli_time_memory},
};

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

/* Run one test in a fresh temporary directory; 0 on pass. */
static int run_one(const test_case *t, int prefixed)
{
    const char *base = getenv("MRT_TEST_DIR");
    snprintf(g_dir, sizeof g_dir, "%s/%s.XXXXXX", base && *base ? base : "/tmp", t->name);
    if (!mkdtemp(g_dir)) {
        printf("FAIL: %s%s: cannot create a temporary directory\n", prefixed ? "runtime/" : "",
               t->name);
        return 1;
    }
    g_failed = 0;
    g_why[0] = '\0';
    t->fn();
    main_cleanup();
    mrt_set_log_hook(NULL, NULL);
    nftw(g_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    if (prefixed)
        printf(g_failed ? "FAIL: runtime/%s: %s\n" : "PASS: runtime/%s\n", t->name, g_why);
    else
        printf(g_failed ? "FAIL: %s\n" : "PASS\n", g_why);
    fflush(stdout);
    return g_failed;
}

int main(int argc, char **argv)
{
    size_t n = sizeof tests / sizeof tests[0];
    if (argc > 1 && strcmp(argv[1], "--list") == 0) {
        for (size_t i = 0; i < n; i++)
            printf("%s\n", tests[i].name);
        return 0;
    }
    if (argc > 1) {
        for (size_t i = 0; i < n; i++)
            if (strcmp(argv[1], tests[i].name) == 0)
                return run_one(&tests[i], 0);
        printf("FAIL: no test named '%s'\n", argv[1]);
        return 1;
    }
    int failed = 0;
    for (size_t i = 0; i < n; i++)
        failed |= run_one(&tests[i], 1);
    return failed;
}
