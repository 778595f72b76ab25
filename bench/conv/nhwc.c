/* bench/conv/nhwc.c — ResNet-18's convolutions (batch N, f32, bias) in oneDNN's nChw16c and nhwc
 * layouts, each with the implementation oneDNN picks, and the reorders between the layouts at
 * each stage's size: what a switch to nhwc for some of the convolutions would gain.
 * Build and run: bash bench/conv/nhwc.sh [THREADS] [N] [interleaved]. Prints per conv: the
 * median of R calls in ms, the implementation; then the sums. With "interleaved": the deep
 * non-Winograd convs only, the two layouts' calls alternated, and the median ratio. */
#include <dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define CHK(x)                                                                                                         \
    do {                                                                                                               \
        dnnl_status_t s_ = (x);                                                                                        \
        if (s_ != dnnl_success) {                                                                                      \
            fprintf(stderr, "%s:%d: %s: status %d\n", __FILE__, __LINE__, #x, (int)s_);                               \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

enum { R = 40 };
static dnnl_engine_t eng;
static dnnl_stream_t st;

static double time_prim(dnnl_primitive_t p, int na, dnnl_exec_arg_t *a) {
    double t[R];
    for (int i = 0; i < 5; i++) CHK(dnnl_primitive_execute(p, st, na, a));
    CHK(dnnl_stream_wait(st));
    for (int i = 0; i < R; i++) {
        double t0 = now_ms();
        CHK(dnnl_primitive_execute(p, st, na, a));
        CHK(dnnl_stream_wait(st));
        t[i] = now_ms() - t0;
    }
    qsort(t, R, sizeof t[0], cmpd);
    return t[R / 2];
}

static dnnl_memory_t mem(const dnnl_memory_desc_t *md) {
    dnnl_memory_t m;
    CHK(dnnl_memory_create(&m, md, eng, DNNL_MEMORY_ALLOCATE));
    void *h;
    dnnl_memory_get_data_handle(m, &h);
    size_t n = dnnl_memory_desc_get_size(md) / 4;
    for (size_t i = 0; i < n; i++) ((float *)h)[i] = (float)((i * 7919) % 97) / 97.0f - 0.5f;
    return m;
}

typedef struct { dnnl_primitive_t p; dnnl_exec_arg_t a[5]; } made;
static made *keep; /* conv() leaves its primitive here (not destroyed) when set */

/* one conv: C, H, O, k, stride, pad; layout tag for src/dst; winograd or direct; sum post-op */
static double conv(int N, int C, int H, int O, int k, int s, int p, dnnl_format_tag_t tag, int wino, int sum,
                   const char **impl_out) {
    int OH = (H + 2 * p - k) / s + 1;
    dnnl_dims_t sd = {N, C, H, H}, dd = {N, O, OH, OH}, wd = {O, C, k, k}, bd = {O};
    dnnl_dims_t strides = {s, s}, dil = {0, 0}, pl = {p, p}, pr = {p, p};
    dnnl_memory_desc_t smd, dmd, wmd, bmd;
    CHK(dnnl_memory_desc_init_by_tag(&smd, 4, sd, dnnl_f32, C <= 4 ? dnnl_nchw : tag));
    CHK(dnnl_memory_desc_init_by_tag(&dmd, 4, dd, dnnl_f32, tag));
    CHK(dnnl_memory_desc_init_by_tag(&wmd, 4, wd, dnnl_f32, dnnl_format_tag_any));
    CHK(dnnl_memory_desc_init_by_tag(&bmd, 1, bd, dnnl_f32, dnnl_x));
    dnnl_convolution_desc_t cd;
    CHK(dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference,
                                                   wino ? dnnl_convolution_winograd : dnnl_convolution_direct, &smd,
                                                   &wmd, &bmd, &dmd, strides, dil, pl, pr));
    dnnl_primitive_attr_t attr;
    CHK(dnnl_primitive_attr_create(&attr));
    dnnl_post_ops_t po;
    CHK(dnnl_post_ops_create(&po));
    if (sum) CHK(dnnl_post_ops_append_sum(po, 1.0f));
    CHK(dnnl_primitive_attr_set_post_ops(attr, po));
    dnnl_primitive_desc_t pd;
    if (dnnl_primitive_desc_create(&pd, &cd, attr, eng, NULL) != dnnl_success) {
        *impl_out = "(none)";
        return -1;
    }
    const char *impl;
    CHK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl));
    *impl_out = strdup(impl);
    dnnl_primitive_t prim;
    CHK(dnnl_primitive_create(&prim, pd));
    dnnl_memory_t ms = mem(dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0));
    dnnl_memory_t mw = mem(dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0));
    dnnl_memory_t mb = mem(&bmd);
    dnnl_memory_t md = mem(dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0));
    dnnl_memory_t msp = mem(dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0));
    dnnl_exec_arg_t a[] = {{DNNL_ARG_SRC, ms}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_BIAS, mb}, {DNNL_ARG_DST, md},
                           {DNNL_ARG_SCRATCHPAD, msp}};
    if (keep) {
        keep->p = prim;
        memcpy(keep->a, a, sizeof a);
        return 0;
    }
    double t = time_prim(prim, 5, a);
    dnnl_primitive_destroy(prim);
    dnnl_primitive_desc_destroy(pd);
    dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(attr);
    dnnl_memory_t ms_[] = {ms, mw, mb, md, msp};
    if (keep) return 0;
    for (int i = 0; i < 5; i++) dnnl_memory_destroy(ms_[i]);
    return t;
}

static double reorder(int N, int C, int H, dnnl_format_tag_t from, dnnl_format_tag_t to) {
    dnnl_dims_t d = {N, C, H, H};
    dnnl_memory_desc_t a, b;
    CHK(dnnl_memory_desc_init_by_tag(&a, 4, d, dnnl_f32, from));
    CHK(dnnl_memory_desc_init_by_tag(&b, 4, d, dnnl_f32, to));
    dnnl_primitive_desc_t pd;
    CHK(dnnl_reorder_primitive_desc_create(&pd, &a, eng, &b, eng, NULL));
    dnnl_primitive_t p;
    CHK(dnnl_primitive_create(&p, pd));
    dnnl_memory_t ma = mem(&a), mb = mem(&b);
    dnnl_exec_arg_t x[] = {{DNNL_ARG_FROM, ma}, {DNNL_ARG_TO, mb}};
    double t = time_prim(p, 2, x);
    dnnl_primitive_destroy(p);
    dnnl_primitive_desc_destroy(pd);
    dnnl_memory_destroy(ma);
    dnnl_memory_destroy(mb);
    return t;
}

/* the non-Winograd deep convs, nChw16c and nhwc calls alternated (a loaded machine slows both
 * alike): medians of each and the median of the per-pair ratios nhwc / nChw16c */
static void interleaved(int N) {
    static const int cv[][6] = {{64, 56, 128, 3, 2, 1}, {128, 28, 256, 3, 2, 1}, {256, 14, 512, 3, 2, 1}, {512, 7, 512, 3, 1, 1}};
    printf("interleaved, threads %d, batch %d, %d pairs\n", omp_get_max_threads(), N, R);
    for (int i = 0; i < 4; i++) {
        const int *c = cv[i];
        made a, b;
        const char *ia, *ib;
        keep = &a;
        conv(N, c[0], c[1], c[2], c[3], c[4], c[5], dnnl_nChw16c, 0, 0, &ia);
        keep = &b;
        conv(N, c[0], c[1], c[2], c[3], c[4], c[5], dnnl_nhwc, 0, 0, &ib);
        keep = NULL;
        double ta[R], tb[R], r[R];
        for (int k = 0; k < 3; k++) {
            CHK(dnnl_primitive_execute(a.p, st, 5, a.a));
            CHK(dnnl_primitive_execute(b.p, st, 5, b.a));
        }
        CHK(dnnl_stream_wait(st));
        for (int k = 0; k < R; k++) {
            double t0 = now_ms();
            CHK(dnnl_primitive_execute(a.p, st, 5, a.a));
            CHK(dnnl_stream_wait(st));
            double t1 = now_ms();
            CHK(dnnl_primitive_execute(b.p, st, 5, b.a));
            CHK(dnnl_stream_wait(st));
            ta[k] = t1 - t0, tb[k] = now_ms() - t1, r[k] = tb[k] / ta[k];
        }
        qsort(ta, R, sizeof ta[0], cmpd);
        qsort(tb, R, sizeof tb[0], cmpd);
        qsort(r, R, sizeof r[0], cmpd);
        printf("%d,%d,%d,%d,%d: nChw16c %.3f (%s), nhwc %.3f (%s), ratio %.3f\n", c[0], c[1], c[2], c[3], c[4], ta[R / 2], ia,
               tb[R / 2], ib, r[R / 2]);
    }
}

int main(int argc, char **argv) {
    int N = argc > 1 ? atoi(argv[1]) : 1;
    CHK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    CHK(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
    if (argc > 2 && !strcmp(argv[2], "interleaved")) return interleaved(N), 0;
    /* C, H, O, k, s, p, count in ResNet-18, winograd in modelc today (3x3 s1, >= 14x14), sum post-op */
    static const int cv[][9] = {
        {3, 224, 64, 7, 2, 3, 1, 0, 0},   {64, 56, 64, 3, 1, 1, 4, 1, 0},    {64, 56, 128, 3, 2, 1, 1, 0, 0},
        {64, 56, 128, 1, 2, 0, 1, 0, 0},  {128, 28, 128, 3, 1, 1, 3, 1, 0},  {128, 28, 256, 3, 2, 1, 1, 0, 0},
        {128, 28, 256, 1, 2, 0, 1, 0, 0}, {256, 14, 256, 3, 1, 1, 3, 1, 0},  {256, 14, 512, 3, 2, 1, 1, 0, 0},
        {256, 14, 512, 1, 2, 0, 1, 0, 0}, {512, 7, 512, 3, 1, 1, 3, 0, 0},
    };
    printf("threads %d, batch %d, median of %d calls, ms\n", omp_get_max_threads(), N, R);
    printf("%-22s %5s %10s %-26s %10s %-26s\n", "conv C,H,O,k,s", "count", "nChw16c", "impl", "nhwc", "impl");
    double tot16 = 0, totnh = 0, best = 0;
    for (size_t i = 0; i < sizeof cv / sizeof cv[0]; i++) {
        const int *c = cv[i];
        const char *i16, *inh;
        double t16 = conv(N, c[0], c[1], c[2], c[3], c[4], c[5], dnnl_nChw16c, c[7], 0, &i16);
        /* the C = 3 image with an nhwc destination is ref:any (seconds a call): not timed */
        double tnh = c[0] <= 4 ? (inh = "ref:any (not timed)", -1) : conv(N, c[0], c[1], c[2], c[3], c[4], c[5], dnnl_nhwc, 0, 0, &inh);
        char name[64];
        snprintf(name, sizeof name, "%d,%d,%d,%d,%d", c[0], c[1], c[2], c[3], c[4]);
        printf("%-22s %5d %10.3f %-26s %10.3f %-26s\n", name, c[6], t16, i16, tnh, inh);
        tot16 += c[6] * t16;
        totnh += c[6] * (tnh > 0 ? tnh : t16);
        best += c[6] * (tnh > 0 && tnh < t16 ? tnh : t16);
    }
    printf("sum: nChw16c %.3f, nhwc %.3f (first conv nChw16c), each conv's faster %.3f\n", tot16, totnh, best);
    /* the 7x7 stage with Winograd (what wino_shape leaves out for memory) */
    const char *iw;
    double tw = conv(N, 512, 7, 512, 3, 1, 1, dnnl_nChw16c, 1, 0, &iw);
    printf("512,7,512,3,1 winograd nChw16c %.3f (%s)\n", tw, iw);
    static const int rs[][2] = {{64, 56}, {128, 28}, {256, 14}, {512, 7}};
    for (int i = 0; i < 4; i++)
        printf("reorder C %d H %d: nChw16c->nhwc %.3f, nhwc->nChw16c %.3f, nhwc->nchw %.3f, nChw16c->nchw %.3f\n",
               rs[i][0], rs[i][1], reorder(N, rs[i][0], rs[i][1], dnnl_nChw16c, dnnl_nhwc),
               reorder(N, rs[i][0], rs[i][1], dnnl_nhwc, dnnl_nChw16c), reorder(N, rs[i][0], rs[i][1], dnnl_nhwc, dnnl_nchw),
               reorder(N, rs[i][0], rs[i][1], dnnl_nChw16c, dnnl_nchw));
    printf("reorder image C 3 H 224 nchw->nhwc %.3f\n", reorder(N, 3, 224, dnnl_nchw, dnnl_nhwc));
    return 0;
}
