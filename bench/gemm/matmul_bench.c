/* bench/gemm/matmul_bench.c — oneDNN's dnnl_sgemm against its matmul primitive with the weights
 * reordered once into the primitive's own packed layout (format_tag any), on the weight GEMMs of
 * GPT-2 small (1x128 tokens) and MiniLM (8x128). A measurement for issue 12 (CPU speed), not
 * part of modelc; it decided how the runtime runs GEMMs against constant weights (mrt_matmul_*).
 *
 *   cc -O2 -std=c11 -D_GNU_SOURCE bench/gemm/matmul_bench.c -ldnnl -lm -o build/gemm/matmul_bench
 *   OMP_NUM_THREADS=1 build/gemm/matmul_bench [MIN_SECONDS]
 *
 * C[M,N] = A[M,K] * W[K,N] (+ bias[N]), f32, row-major. "sgemm": dnnl_sgemm('N','N'), what modelc
 * called for every GEMM before (it packs W on every call). "packed": a matmul primitive created
 * once, W reordered once into the layout the primitive asks for (format_tag any), a user
 * scratchpad allocated once; "in place": the same primitive reading W where it is (format ab),
 * what rt_matmul.c does; "+ bias": that with a bias. For each: two warm-up calls, then calls until
 * MIN_SECONDS (default 0.5) and at least 5; the median and, in parentheses, the fastest call, as
 * GFLOP/s (2*M*N*K flops). Each primitive's result is compared with sgemm's (max |diff| / max
 * |c|, the largest printed) and the program exits 1 when it is above 1e-5.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <oneapi/dnnl/dnnl.h>

typedef struct { const char *name; int M, N, K; } Shape;

static const Shape SHAPES[] = {
    {"gpt2 c_attn", 128, 2304, 768},
    {"gpt2 attn c_proj", 128, 768, 768},
    {"gpt2 mlp c_fc", 128, 3072, 768},
    {"gpt2 mlp c_proj", 128, 768, 3072},
    {"gpt2 lm_head", 128, 50257, 768},
    {"minilm qkv", 1024, 1152, 384},
    {"minilm attn out", 1024, 384, 384},
    {"minilm ffn in", 1024, 1536, 384},
    {"minilm ffn out", 1024, 384, 1536},
};

#define CHECK(x) do { dnnl_status_t s_ = (x); if (s_ != dnnl_success) { \
    fprintf(stderr, "%s:%d: %s failed: status %d\n", __FILE__, __LINE__, #x, (int)s_); exit(1); } } while (0)

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float rand_unit(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (float)((rng_state * 0x2545F4914F6CDD1Dull) >> 40) / (float)(1 << 24) * 2.0f - 1.0f;
}

typedef struct {
    dnnl_primitive_t prim;
    dnnl_memory_t src, wts, bias, dst, pad;
    void *wbuf, *padbuf;
} Packed;

static dnnl_engine_t eng;
static dnnl_stream_t strm;

/* A matmul primitive for [M,K] x [K,N] (+ bias), its weights reordered from w into its layout. */
static void packed_create(Packed *p, int M, int N, int K, const float *w, int with_bias, int in_place) {
    dnnl_memory_desc_t smd, wmd, wany, bmd, dmd;
    dnnl_dims_t sd = {M, K}, wd = {K, N}, bd = {1, N}, dd = {M, N};
    CHECK(dnnl_memory_desc_init_by_tag(&smd, 2, sd, dnnl_f32, dnnl_ab));
    CHECK(dnnl_memory_desc_init_by_tag(&wmd, 2, wd, dnnl_f32, dnnl_ab));
    CHECK(dnnl_memory_desc_init_by_tag(&wany, 2, wd, dnnl_f32, dnnl_format_tag_any));
    CHECK(dnnl_memory_desc_init_by_tag(&bmd, 2, bd, dnnl_f32, dnnl_ab));
    CHECK(dnnl_memory_desc_init_by_tag(&dmd, 2, dd, dnnl_f32, dnnl_ab));
    dnnl_matmul_desc_t desc;
    CHECK(dnnl_matmul_desc_init(&desc, &smd, in_place ? &wmd : &wany, with_bias ? &bmd : NULL, &dmd));
    dnnl_primitive_attr_t attr;
    CHECK(dnnl_primitive_attr_create(&attr));
    CHECK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
    dnnl_primitive_desc_t pd;
    CHECK(dnnl_primitive_desc_create(&pd, &desc, attr, eng, NULL));
    dnnl_primitive_attr_destroy(attr);
    const dnnl_memory_desc_t *pw = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    const dnnl_memory_desc_t *ps = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    size_t wbytes = dnnl_memory_desc_get_size(pw), pbytes = ps ? dnnl_memory_desc_get_size(ps) : 0;
    p->wbuf = aligned_alloc(64, (wbytes + 63) / 64 * 64);
    p->padbuf = pbytes ? aligned_alloc(64, (pbytes + 63) / 64 * 64) : NULL;
    CHECK(dnnl_memory_create(&p->wts, pw, eng, p->wbuf));
    if (pbytes) CHECK(dnnl_memory_create(&p->pad, ps, eng, p->padbuf));
    else p->pad = NULL;
    CHECK(dnnl_memory_create(&p->src, &smd, eng, DNNL_MEMORY_NONE));
    CHECK(dnnl_memory_create(&p->dst, &dmd, eng, DNNL_MEMORY_NONE));
    CHECK(dnnl_memory_create(&p->bias, &bmd, eng, DNNL_MEMORY_NONE));
    /* the reorder, once */
    dnnl_memory_t wplain;
    CHECK(dnnl_memory_create(&wplain, &wmd, eng, (void *)w));
    dnnl_primitive_desc_t rpd;
    CHECK(dnnl_reorder_primitive_desc_create(&rpd, &wmd, eng, pw, eng, NULL));
    dnnl_primitive_t r;
    CHECK(dnnl_primitive_create(&r, rpd));
    dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, wplain}, {DNNL_ARG_TO, p->wts}};
    CHECK(dnnl_primitive_execute(r, strm, 2, ra));
    CHECK(dnnl_stream_wait(strm));
    dnnl_primitive_destroy(r);
    dnnl_primitive_desc_destroy(rpd);
    dnnl_memory_destroy(wplain);
    CHECK(dnnl_primitive_create(&p->prim, pd));
    const char *impl = NULL;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    printf("#   %dx%dx%d%s%s: impl %s, weights %zu bytes, scratchpad %zu bytes\n", M, N, K,
           in_place ? " in place" : " packed", with_bias ? " +bias" : "", impl ? impl : "?", wbytes, pbytes);
    dnnl_primitive_desc_destroy(pd);
}

static void packed_run(Packed *p, float *c, const float *a, const float *bias) {
    CHECK(dnnl_memory_set_data_handle(p->src, (void *)a));
    CHECK(dnnl_memory_set_data_handle(p->dst, c));
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, p->src}, {DNNL_ARG_WEIGHTS, p->wts}, {DNNL_ARG_DST, p->dst}};
    int n = 3;
    if (bias) {
        CHECK(dnnl_memory_set_data_handle(p->bias, (void *)bias));
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, p->bias};
    }
    if (p->pad) args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, p->pad};
    CHECK(dnnl_primitive_execute(p->prim, strm, n, args));
    CHECK(dnnl_stream_wait(strm));
}

static void packed_destroy(Packed *p) {
    dnnl_primitive_destroy(p->prim);
    dnnl_memory_destroy(p->src); dnnl_memory_destroy(p->wts); dnnl_memory_destroy(p->dst);
    dnnl_memory_destroy(p->bias);
    if (p->pad) dnnl_memory_destroy(p->pad);
    free(p->wbuf);
    free(p->padbuf);
}

enum { SGEMM, PACKED, INPLACE, INPLACE_BIAS };

/* median and fastest GFLOP/s of variant v */
static void timeit(int v, Packed *p, float *c, const float *a, const float *w, const float *bias, const Shape *s,
                   double min_s, double *med, double *best) {
    double t[4096];
    int n = 0;
    double t0 = now_s();
    for (int i = -2; n < 4096; i++) {
        double a0 = now_s();
        if (v == SGEMM) {
            if (dnnl_sgemm('N', 'N', s->M, s->N, s->K, 1.0f, a, s->K, w, s->N, 0.0f, c, s->N) != dnnl_success) exit(1);
        } else {
            packed_run(p, c, a, v == INPLACE_BIAS ? bias : NULL);
        }
        double a1 = now_s();
        if (i >= 0) t[n++] = a1 - a0;
        if (i >= 4 && a1 - t0 >= min_s) break;
    }
    qsort(t, n, sizeof t[0], cmp_double);
    double fl = 2.0 * s->M * s->N * s->K * 1e-9;
    *med = fl / t[n / 2];
    *best = fl / t[0];
}

int main(int argc, char **argv) {
    double min_s = argc > 1 ? atof(argv[1]) : 0.5;
    const dnnl_version_t *ver = dnnl_version();
    const char *th = getenv("OMP_NUM_THREADS");
    printf("# oneDNN %d.%d.%d, OMP_NUM_THREADS=%s\n", ver->major, ver->minor, ver->patch, th ? th : "(unset)");
    CHECK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    CHECK(dnnl_stream_create(&strm, eng, dnnl_stream_default_flags));
    int failed = 0;
    printf("| shape (M x N x K) | dnnl_sgemm | matmul, packed weights | matmul, weights in place | in place + bias | max diff |\n"
           "|---|---:|---:|---:|---:|---:|\n");
    for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; i++) {
        const Shape *s = &SHAPES[i];
        size_t na = (size_t)s->M * s->K, nw = (size_t)s->K * s->N, nc = (size_t)s->M * s->N;
        float *a = malloc(na * 4), *w = malloc(nw * 4), *c0 = malloc(nc * 4), *c1 = malloc(nc * 4),
              *bias = calloc(s->N, 4);
        for (size_t j = 0; j < na; j++) a[j] = rand_unit();
        for (size_t j = 0; j < nw; j++) w[j] = rand_unit();
        Packed pk, pi, pb;
        packed_create(&pk, s->M, s->N, s->K, w, 0, 0);
        packed_create(&pi, s->M, s->N, s->K, w, 0, 1);
        packed_create(&pb, s->M, s->N, s->K, w, 1, 1);
        double m[4], b[4], rel = 0;
        timeit(SGEMM, NULL, c0, a, w, bias, s, min_s, &m[0], &b[0]);
        for (int v = PACKED; v <= INPLACE_BIAS; v++) {
            timeit(v, v == PACKED ? &pk : v == INPLACE ? &pi : &pb, c1, a, w, bias, s, min_s, &m[v], &b[v]);
            double dmax = 0, cmax = 0;
            for (size_t j = 0; j < nc; j++) {
                double d = fabs((double)c0[j] - c1[j]);
                if (!(d <= dmax)) dmax = d;
                if (fabs(c0[j]) > cmax) cmax = fabs(c0[j]);
            }
            if (!(dmax / cmax <= rel)) rel = dmax / cmax;
        }
        if (!(rel <= 1e-5)) failed = 1;
        printf("| %s (%d x %d x %d) | %.0f (%.0f) | %.0f (%.0f) | %.0f (%.0f) | %.0f (%.0f) | %.1e%s |\n", s->name, s->M,
               s->N, s->K, m[0], b[0], m[1], b[1], m[2], b[2], m[3], b[3], rel, rel <= 1e-5 ? "" : " FAILED");
        fflush(stdout);
        packed_destroy(&pk);
        packed_destroy(&pi);
        packed_destroy(&pb);
        free(a); free(w); free(c0); free(c1); free(bias);
    }
    dnnl_stream_destroy(strm);
    dnnl_engine_destroy(eng);
    return failed;
}
