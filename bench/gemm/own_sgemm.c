/* bench/gemm/own_sgemm.c — an own AVX-512 f32 GEMM (own_sgemm_kernel.h: weights packed once into
 * 32-column panels, A broadcast from memory, MR x 32 register tile) against oneDNN 2.6's matmul
 * primitive created exactly as runtime/rt_matmul.c creates it (f32, the weights in place as ab or
 * ba, bias, user scratchpad), on MiniLM's and GPT-2 small's weight GEMMs (issue 12, go/no-go).
 *
 *   make bench-own-sgemm            (bash bench/gemm/own_sgemm.sh [REPEATS] [ROUNDS]: every mode below,
 *                                    1 and 2 threads; bench/gemm/own_sgemm_table.py the medians)
 *   OMP_NUM_THREADS=T build/gemm/own_sgemm [ROUNDS] [CALLS]
 *
 * For each shape: ROUNDS rounds (default 7), each CALLS calls (default: about 40 ms worth) of the
 * own kernel then the primitive (A B A B ...). Per call: wall time (CLOCK_MONOTONIC) and process
 * CPU time; GFLOP/s of the median call by wall time and by CPU time (flops / CPU seconds: the rate
 * per busy core summed, so spinning threads count; with more than one thread the process clock
 * lags, so trust the wall column there). Both results are checked against a double dot product at
 * 2048 sampled outputs (|c - ref| <= 1e-5 * sum |a b|); exit 1 on a miss.
 * Environment: SG_KC, SG_MC, SG_NC override the kernel's K block, M block (rows) and N chunk;
 * SG_SPLIT=1/2 forces the thread split over N/M; SG_INPLACE=1 packs a [K,N] weight per call into
 * per-thread scratch, =2 reads it in place (no copy of the weights); SG_COLD=1 rotates through
 * copies of the weights (>= 128 MB) so they come from memory; SG_ONLY=TEXT runs the shapes whose
 * name contains TEXT; SG_SHAPE=M,K,N,trans_b runs that shape alone. SG_ANY=1 compares the primitive
 * with itself instead: the "own" columns are then the primitive reading the weights in place (ab /
 * ba, as rt_matmul.c without MRT_MATMUL_PACK), the "dnnl" columns the primitive made with
 * format_tag any weights, on copies reordered into that layout (as MRT_MATMUL_PACK stores them).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <dnnl.h>

#include "own_sgemm_kernel.h"

typedef struct { const char *name; int M, N, K, trans_b; } Shape;

static const Shape SHAPES[] = {
    {"minilm qkv-proj", 1024, 384, 384, 1},   {"minilm qkv fused", 1024, 1152, 384, 1},
    {"minilm ffn up", 1024, 1536, 384, 1},    {"minilm ffn down", 1024, 384, 1536, 1},
    {"gpt2 c_attn", 128, 2304, 768, 0},       {"gpt2 attn c_proj", 128, 768, 768, 0},
    {"gpt2 mlp c_fc", 128, 3072, 768, 0},     {"gpt2 mlp c_proj", 128, 768, 3072, 0},
    {"gpt2 lm_head", 128, 50257, 768, 1},
};

#define CHECK(x) do { dnnl_status_t s_ = (x); if (s_ != dnnl_success) { \
    fprintf(stderr, "%s:%d: %s failed: status %d\n", __FILE__, __LINE__, #x, (int)s_); exit(1); } } while (0)

static double now(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float rand_unit(void) {
    rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
    return (float)((rng * 0x2545F4914F6CDD1Dull) >> 40) / (float)(1 << 24) * 2.0f - 1.0f;
}

typedef struct {
    dnnl_engine_t eng;
    dnnl_stream_t strm;
    dnnl_primitive_t prim;
    dnnl_memory_t src, wts, bias, dst, pad;
    void *padbuf;
    dnnl_memory_desc_t wmd;
} Prim;

/* w (plain, ab or ba) reordered into p's weight layout at out */
static void prim_pack(Prim *p, const Shape *s, const float *w, void *out) {
    dnnl_memory_desc_t umd;
    dnnl_dims_t wd = {s->K, s->N};
    dnnl_memory_t um, wm;
    dnnl_primitive_desc_t rpd;
    dnnl_primitive_t r;
    CHECK(dnnl_memory_desc_init_by_tag(&umd, 2, wd, dnnl_f32, s->trans_b ? dnnl_ba : dnnl_ab));
    CHECK(dnnl_memory_create(&um, &umd, p->eng, (void *)w));
    CHECK(dnnl_memory_create(&wm, &p->wmd, p->eng, out));
    CHECK(dnnl_reorder_primitive_desc_create(&rpd, &umd, p->eng, &p->wmd, p->eng, NULL));
    CHECK(dnnl_primitive_create(&r, rpd));
    dnnl_exec_arg_t a[] = {{DNNL_ARG_FROM, um}, {DNNL_ARG_TO, wm}};
    CHECK(dnnl_primitive_execute(r, p->strm, 2, a));
    CHECK(dnnl_stream_wait(p->strm));
    dnnl_primitive_destroy(r), dnnl_primitive_desc_destroy(rpd), dnnl_memory_destroy(um), dnnl_memory_destroy(wm);
}

/* as rt_matmul.c's mm_prim_make (f32): weights ab or ba in place, bias, user scratchpad */
static int sg_any; /* SG_ANY=1: the weights in the primitive's preferred layout (format_tag any) */
static void prim_create(Prim *p, const Shape *s) {
    dnnl_memory_desc_t smd, wmd, bmd, dmd;
    dnnl_dims_t sd = {s->M, s->K}, wd = {s->K, s->N}, bd = {1, s->N}, dd = {s->M, s->N};
    CHECK(dnnl_engine_create(&p->eng, dnnl_cpu, 0));
    CHECK(dnnl_stream_create(&p->strm, p->eng, dnnl_stream_default_flags));
    CHECK(dnnl_memory_desc_init_by_tag(&wmd, 2, wd, dnnl_f32, sg_any ? dnnl_format_tag_any : s->trans_b ? dnnl_ba : dnnl_ab));
    CHECK(dnnl_memory_desc_init_by_tag(&smd, 2, sd, dnnl_f32, dnnl_ab));
    CHECK(dnnl_memory_desc_init_by_tag(&bmd, 2, bd, dnnl_f32, dnnl_ab));
    CHECK(dnnl_memory_desc_init_by_tag(&dmd, 2, dd, dnnl_f32, dnnl_ab));
    dnnl_matmul_desc_t desc;
    CHECK(dnnl_matmul_desc_init(&desc, &smd, &wmd, &bmd, &dmd));
    dnnl_primitive_attr_t attr;
    CHECK(dnnl_primitive_attr_create(&attr));
    CHECK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
    dnnl_primitive_desc_t pd;
    CHECK(dnnl_primitive_desc_create(&pd, &desc, attr, p->eng, NULL));
    CHECK(dnnl_primitive_create(&p->prim, pd));
    const char *impl = NULL;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    const dnnl_memory_desc_t *ps = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    size_t pb = ps ? dnnl_memory_desc_get_size(ps) : 0;
    p->padbuf = pb ? aligned_alloc(64, (pb + 63) / 64 * 64) : NULL;
    p->pad = NULL;
    if (pb) CHECK(dnnl_memory_create(&p->pad, ps, p->eng, p->padbuf));
    CHECK(dnnl_memory_create(&p->src, &smd, p->eng, DNNL_MEMORY_NONE));
    const dnnl_memory_desc_t *qw = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    p->wmd = *qw;
    CHECK(dnnl_memory_create(&p->wts, qw, p->eng, DNNL_MEMORY_NONE));
    if (sg_any) printf("#   packed weights %zu bytes (plain %zu)\n", dnnl_memory_desc_get_size(qw), (size_t)s->K * s->N * 4);
    CHECK(dnnl_memory_create(&p->bias, &bmd, p->eng, DNNL_MEMORY_NONE));
    CHECK(dnnl_memory_create(&p->dst, &dmd, p->eng, DNNL_MEMORY_NONE));
    printf("#   %s: primitive %s, scratchpad %zu bytes\n", s->name, impl ? impl : "?", pb);
    dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_attr_destroy(attr);
}

static void prim_run(Prim *p, const float *a, const float *w, const float *bias, float *c) {
    CHECK(dnnl_memory_set_data_handle(p->src, (void *)a));
    CHECK(dnnl_memory_set_data_handle(p->wts, (void *)w));
    CHECK(dnnl_memory_set_data_handle(p->dst, c));
    CHECK(dnnl_memory_set_data_handle(p->bias, (void *)bias));
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, p->src}, {DNNL_ARG_WEIGHTS, p->wts}, {DNNL_ARG_DST, p->dst},
                               {DNNL_ARG_BIAS, p->bias}};
    int n = 4;
    if (p->pad) {
        CHECK(dnnl_memory_set_data_handle(p->pad, p->padbuf));
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, p->pad};
    }
    CHECK(dnnl_primitive_execute(p->prim, p->strm, n, args));
    CHECK(dnnl_stream_wait(p->strm));
}

static void prim_destroy(Prim *p) {
    dnnl_primitive_destroy(p->prim);
    dnnl_memory_destroy(p->src), dnnl_memory_destroy(p->wts), dnnl_memory_destroy(p->dst);
    dnnl_memory_destroy(p->bias);
    if (p->pad) dnnl_memory_destroy(p->pad);
    free(p->padbuf);
    dnnl_stream_destroy(p->strm);
    dnnl_engine_destroy(p->eng);
}

/* worst |c - ref| / (1e-5 * sum|a b|) over sampled outputs; > 1 is a miss */
static double check(const Shape *s, const float *a, const float *w, const float *bias, const float *c) {
    double worst = 0;
    for (int t = 0; t < 2048; t++) {
        int64_t i = (int64_t)(rand_unit() * 0.5f + 0.5f) * 0 + (rng >> 20) % s->M, j = (rng >> 7) % s->N;
        rand_unit();
        double ref = bias[j], mag = fabs(bias[j]);
        for (int64_t k = 0; k < s->K; k++) {
            double x = (double)a[i * s->K + k] * (s->trans_b ? w[j * s->K + k] : w[k * s->N + j]);
            ref += x, mag += fabs(x);
        }
        double e = fabs(c[i * s->N + j] - ref) / (1e-5 * mag + 1e-30);
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 7, calls_arg = argc > 2 ? atoi(argv[2]) : 0;
    if (getenv("SG_KC")) sg_kc = atoi(getenv("SG_KC"));
    if (getenv("SG_MC")) sg_mc = atoi(getenv("SG_MC"));
    if (getenv("SG_NC")) sg_nc = atoi(getenv("SG_NC"));
    if (getenv("SG_SPLIT")) sg_split = atoi(getenv("SG_SPLIT"));
    const dnnl_version_t *ver = dnnl_version();
    int T = 1;
#ifdef _OPENMP
    T = omp_get_max_threads();
#endif
    double load = 0;
    FILE *lf = fopen("/proc/loadavg", "r");
    if (lf) { if (fscanf(lf, "%lf", &load) != 1) load = 0; fclose(lf); }
    printf("# oneDNN %d.%d.%d, %d threads, own: MR=%d NR=%d KC=%d MC=%d NC=%d panels; [K,N] weights %s; %s; load %.2f\n",
           ver->major, ver->minor, ver->patch, T, SG_MR, SG_NR, sg_kc, sg_mc, sg_nc,
           !getenv("SG_INPLACE") || !atoi(getenv("SG_INPLACE")) ? "packed once" : atoi(getenv("SG_INPLACE")) == 2 ? "read in place" : "packed per call",
           getenv("SG_COLD") && atoi(getenv("SG_COLD")) ? "cold weights (copies in turn)" : "warm weights", load);
    int failed = 0;
    printf("| shape (M x K -> N, layout) | own wall | dnnl wall | own/dnnl wall | own cpu | dnnl cpu | own/dnnl cpu | check own, dnnl |\n"
           "|---|---:|---:|---:|---:|---:|---:|---:|\n");
    Shape one = {"SG_SHAPE", 0, 0, 0, 0};
    const char *shp = getenv("SG_SHAPE"); /* "M,K,N,trans_b": that shape alone */
    if (shp && sscanf(shp, "%d,%d,%d,%d", &one.M, &one.K, &one.N, &one.trans_b) != 4) {
        fprintf(stderr, "SG_SHAPE: M,K,N,trans_b\n");
        return 2;
    }
    size_t nshapes = shp ? 1 : sizeof SHAPES / sizeof SHAPES[0];
    for (size_t si = 0; si < nshapes; si++) {
        const Shape *s = shp ? &one : &SHAPES[si];
        if (getenv("SG_ONLY") && !strstr(s->name, getenv("SG_ONLY"))) continue;
        size_t na = (size_t)s->M * s->K, nw = (size_t)s->K * s->N, nc = (size_t)s->M * s->N;
        int64_t np = (s->N + SG_NR - 1) / SG_NR;
        /* SG_COLD=1: copies of the weights (at least 128 MB in all, at most 16), one per call in turn,
         * so that they come from memory as in a model whose layers each have their own */
        int cold = getenv("SG_COLD") && atoi(getenv("SG_COLD")), inplace = getenv("SG_INPLACE") && atoi(getenv("SG_INPLACE")) && !s->trans_b;
        int nrep = cold ? (int)((128u << 20) / (nw * 4) + 1) : 1;
        if (nrep > 16) nrep = 16;
        size_t npk = (size_t)np * s->K * SG_NR;
        float *a = malloc(na * 4), *w = malloc(nw * 4 * nrep), *c0 = malloc(nc * 4), *c1 = malloc(nc * 4),
              *bias = malloc(s->N * 4), *P = aligned_alloc(64, npk * 4 * (inplace ? 1 : nrep));
        for (size_t j = 0; j < na; j++) a[j] = rand_unit();
        for (size_t j = 0; j < nw; j++) w[j] = rand_unit();
        for (int r = 1; r < nrep; r++) memcpy(w + r * nw, w, nw * 4);
        for (int j = 0; j < s->N; j++) bias[j] = rand_unit();
        for (int r = 0; r < (inplace ? 1 : nrep); r++) sg_pack_b(w, s->trans_b, s->N, s->K, P + r * npk);
        Prim p, pin;
        size_t nw_pk = nw;
        float *wpk = NULL;
        sg_any = getenv("SG_ANY") && atoi(getenv("SG_ANY"));
        prim_create(&p, s);
        if (sg_any) { /* v = 0: the in-place primitive; v = 1: the packed one, on packed copies */
            sg_any = 0;
            prim_create(&pin, s);
            sg_any = 1;
            size_t pw = (dnnl_memory_desc_get_size(&p.wmd) + 63) / 64 * 16; /* floats */
            wpk = aligned_alloc(64, pw * 4 * nrep);
            for (int r = 0; r < nrep; r++) prim_pack(&p, s, w + r * nw, wpk + r * pw);
            nw_pk = pw;
        }
        double fl = 2.0 * s->M * s->N * s->K;
        int calls = calls_arg > 0 ? calls_arg : (int)(0.04 / (fl / 300e9)) + 1;
        if (calls > 200) calls = 200;
        int n = rounds * calls;
        double *tw[2], *tc[2];
        for (int v = 0; v < 2; v++) tw[v] = malloc(n * 8), tc[v] = malloc(n * 8);
        sg_direct = inplace && atoi(getenv("SG_INPLACE")) == 2;
        if (inplace) sg_w_inplace = w;
        if (sg_any) prim_run(&pin, a, w, bias, c0); else
        sg_gemm(s->M, s->N, s->K, a, s->K, P, bias, c0, s->N); /* warm-up */
        prim_run(&p, a, sg_any ? wpk : w, bias, c1);
        for (int r = 0; r < rounds; r++)
            for (int v = 0; v < 2; v++)
                for (int i = 0; i < calls; i++) {
                    int rr = (r * calls + i) % nrep;
                    if (inplace) sg_w_inplace = w + rr * nw;
                    double w0 = now(CLOCK_MONOTONIC), p0 = now(CLOCK_PROCESS_CPUTIME_ID);
                    if (v == 0 && sg_any) prim_run(&pin, a, w + rr * nw, bias, c0);
                    else if (v == 1 && sg_any) prim_run(&p, a, wpk + rr * nw_pk, bias, c1);
                    else if (v == 0) sg_gemm(s->M, s->N, s->K, a, s->K, P + (inplace ? 0 : rr * npk), bias, c0, s->N);
                    else prim_run(&p, a, w + rr * nw, bias, c1);
                    double p1 = now(CLOCK_PROCESS_CPUTIME_ID), w1 = now(CLOCK_MONOTONIC);
                    tw[v][r * calls + i] = w1 - w0, tc[v][r * calls + i] = p1 - p0;
                }
        double gw[2], gc[2];
        for (int v = 0; v < 2; v++) {
            qsort(tw[v], n, 8, cmp_double), qsort(tc[v], n, 8, cmp_double);
            gw[v] = fl / tw[v][n / 2] * 1e-9, gc[v] = fl / tc[v][n / 2] * 1e-9;
        }
        double e0 = check(s, a, w, bias, c0), e1 = check(s, a, w, bias, c1);
        if (!(e0 <= 1) || !(e1 <= 1)) failed = 1;
        printf("| %s (%d x %d -> %d, %s) | %.0f | %.0f | %.3f | %.0f | %.0f | %.3f | %.2f, %.2f%s |\n", s->name, s->M,
               s->K, s->N, s->trans_b ? "[N,K]" : "[K,N]", gw[0], gw[1], gw[0] / gw[1], gc[0], gc[1], gc[0] / gc[1], e0,
               e1, e0 <= 1 && e1 <= 1 ? "" : " FAILED");
        fflush(stdout);
        prim_destroy(&p);
        if (sg_any) prim_destroy(&pin), free(wpk);
        sg_w_inplace = NULL;
        for (int v = 0; v < 2; v++) free(tw[v]), free(tc[v]);
        free(a), free(w), free(c0), free(c1), free(bias), free(P);
    }
    return failed;
}
