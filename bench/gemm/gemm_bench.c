/* bench/gemm/gemm_bench.c — single-precision GEMM throughput of one BLAS library on the GEMM
 * shapes of modelc's CPU models (issue 12, item 4: a measurement, not part of modelc).
 *
 *   cc -O2 gemm_bench.c -DSGEMM_CBLAS=cblas_sgemm -lopenblas -o gemm_openblas
 *   cc -O2 gemm_bench.c -DSGEMM_DNNL -ldnnl -o gemm_dnnl
 *   cc -O2 gemm_bench.c -DSGEMM_XSMM -fopenmp -lxsmmext -lxsmm -o gemm_xsmm
 *   cc -O2 gemm_bench.c -DSGEMM_OWN own_gemm.o -fopenmp -o gemm_own   (see own_gemm.c)
 *   ./gemm_openblas NAME [MIN_SECONDS]      (bench/gemm/run.sh builds and runs every library)
 *
 * Every shape is C[M,N] = A[M,K] * B[K,N], row-major, no transposes, alpha 1, beta 0: the layout
 * of modelc's im2col convolutions (A the [Cout, Cin*kh*kw] weights, B the [Cin*kh*kw, Ho*Wo]
 * columns, one image) and of its linear layers (A the [tokens, in] activations, B the [in, out]
 * weights). For each shape: two warm-up calls, then calls until MIN_SECONDS (default 0.5) have
 * passed and at least 10 were timed; the median is reported. The result of the last call is
 * checked against a double-precision dot product at 4096 sampled entries (every entry when there
 * are fewer): |c - ref| <= 1e-5 * sum_k |a_ik * b_kj| + 1e-30, the bound of an f32 sum that
 * is summed in blocks. Threads are the library's own business: run.sh sets
 * OPENBLAS_NUM_THREADS, OMP_NUM_THREADS, BLIS_NUM_THREADS and MKL_NUM_THREADS.
 *
 * Prints one line per shape: NAME shape M N K ms GFLOP/s best maxerr/bound (ms and GFLOP/s of
 * the median call, best: GFLOP/s of the fastest call, which other processes disturb least), and
 * exits 1 when any check fails (a wrong library must not print a fast number unnoticed).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(SGEMM_DNNL)
/* oneDNN's dnnl_sgemm (row-major; the same in oneDNN 2.x and 3.x), declared here so that
 * Debian's libdnnl and the PyPI wheel, which ships no header, build alike. Returns 0 on success. */
int dnnl_sgemm(char transa, char transb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
               int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
typedef struct {
    int major, minor, patch;
    const char *hash;
    unsigned cpu_runtime, gpu_runtime;
} DnnlVersion;   /* dnnl_version_t */
const DnnlVersion *dnnl_version(void);
#elif defined(SGEMM_CBLAS)
/* The CBLAS ABI (enums are ints), declared here so that one file serves OpenBLAS, BLIS, MKL and
 * the prefixed scipy-openblas build without their headers. */
void SGEMM_CBLAS(int order, int transa, int transb, int m, int n, int k, float alpha,
                 const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);
enum { CblasRowMajor = 101, CblasNoTrans = 111 };
#endif
#if defined(INFO_CONFIG)
/* OpenBLAS: openblas_get_config / openblas_get_corename (scipy_openblas_... in the wheel) */
const char *INFO_CONFIG(void);
const char *INFO_CORE(void);
#endif
#if defined(SGEMM_XSMM)
/* libxsmm 1.17 (column-major, Fortran-style pointers): libxsmm_sgemm_omp, the OpenMP-threaded
 * tiled GEMM of libxsmmext (its JIT micro-kernels), linked without a BLAS. */
#include <libxsmm.h>
/* The BLAS sgemm_ libxsmm hands the shapes its tiled path does not take to: here it computes
 * nothing and counts the call, so that such a shape is reported as "BLAS" rather than timed. */
static long blas_fallbacks;
void sgemm_(const char *ta, const char *tb, const libxsmm_blasint *m, const libxsmm_blasint *n,
            const libxsmm_blasint *k, const float *alpha, const float *a, const libxsmm_blasint *lda, const float *b,
            const libxsmm_blasint *ldb, const float *beta, float *c, const libxsmm_blasint *ldc) {
    (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b, (void)ldb;
    (void)beta, (void)c, (void)ldc;
    blas_fallbacks++;
}
/* the other BLAS symbols libxsmm.a refers to: never called here */
void dgemm_(void) { abort(); }
void dgemv_(void) { abort(); }
void sgemv_(void) { abort(); }
#elif defined(SGEMM_OWN)
void own_sgemm(int M, int N, int K, const float *a, const float *b, float *c);   /* own_gemm.c */
extern const char own_gemm_config[];
#endif
#if !defined(SGEMM_DNNL) && !defined(SGEMM_CBLAS) && !defined(SGEMM_XSMM) && !defined(SGEMM_OWN)
#error "define SGEMM_CBLAS=<cblas_sgemm symbol>, SGEMM_DNNL, SGEMM_XSMM or SGEMM_OWN"
#endif

typedef struct {
    const char *name;   /* where the shape comes from */
    int M, N, K;
} Shape;

static const Shape SHAPES[] = {
    /* ResNet-18 at 224x224, batch 1, as im2col GEMMs: M = Cout, N = Ho*Wo, K = Cin*kh*kw */
    {"resnet18 conv1 7x7/2", 64, 12544, 147},
    {"resnet18 layer1 3x3", 64, 3136, 576},
    {"resnet18 layer2 3x3", 128, 784, 1152},
    {"resnet18 layer3 3x3", 256, 196, 2304},
    {"resnet18 layer4 3x3", 512, 49, 4608},
    /* GPT-2 small, 128 tokens: M = tokens, N = out features, K = in features */
    {"gpt2 c_attn", 128, 2304, 768},
    {"gpt2 attn c_proj", 128, 768, 768},
    {"gpt2 mlp c_fc", 128, 3072, 768},
    {"gpt2 mlp c_proj", 128, 768, 3072},
};

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* c (M,N) = a (M,K) * b (K,N), row-major */
static void sgemm(float *c, const float *a, const float *b, int M, int N, int K) {
#if defined(SGEMM_DNNL)
    int st = dnnl_sgemm('N', 'N', M, N, K, 1.0f, a, K, b, N, 0.0f, c, N);
    if (st != 0) {
        fprintf(stderr, "dnnl_sgemm(%d, %d, %d) failed: status %d\n", M, N, K, st);
        exit(1);
    }
#elif defined(SGEMM_XSMM)
    /* row-major c = a b is column-major c^T = b^T a^T: m = N, n = M, first operand b (ld N) */
    const libxsmm_blasint m = N, n = M, k = K, lda = N, ldb = K, ldc = N;
    const float one = 1.0f, zero = 0.0f;
    libxsmm_sgemm_omp("N", "N", &m, &n, &k, &one, b, &lda, a, &ldb, &zero, c, &ldc);
#elif defined(SGEMM_OWN)
    own_sgemm(M, N, K, a, b, c);
#else
    SGEMM_CBLAS(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, a, K, b, N, 0.0f, c, N);
#endif
}

/* xorshift64*: the same inputs for every library */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float rand_unit(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (float)((rng_state * 0x2545F4914F6CDD1Dull) >> 40) / (float)(1 << 24) * 2.0f - 1.0f;
}

/* Largest |c - ref| / bound over the sampled entries (> 1: the check fails). */
static double check(const float *c, const float *a, const float *b, int M, int N, int K) {
    long total = (long)M * N, samples = total < 4096 ? total : 4096;
    double worst = 0;
    for (long s = 0; s < samples; s++) {
        long idx = samples == total ? s : (long)((s * 2654435761ull) % (unsigned long)total);
        int i = (int)(idx / N), j = (int)(idx % N);
        double ref = 0, mag = 0;
        for (int k = 0; k < K; k++) {
            double p = (double)a[(long)i * K + k] * b[(long)k * N + j];
            ref += p;
            mag += fabs(p);
        }
        double r = fabs(c[idx] - ref) / (1e-5 * mag + 1e-30);
        if (!(r <= worst)) worst = r;   /* NaN propagates as a failure */
    }
    return worst;
}

int main(int argc, char **argv) {
    const char *name = argc > 1 ? argv[1] : "sgemm";
    double min_s = argc > 2 ? atof(argv[2]) : 0.5;
    int failed = 0;
#if defined(INFO_CONFIG)
    printf("# %s: %s, core %s\n", name, INFO_CONFIG(), INFO_CORE());
#endif
#if defined(SGEMM_DNNL)
    const DnnlVersion *v = dnnl_version();
    printf("# %s: oneDNN %d.%d.%d (%s), cpu runtime %u (1 seq, 2 omp, 4 tbb, 8 threadpool, 512 sycl)\n", name, v->major,
           v->minor, v->patch, v->hash, v->cpu_runtime);
#endif
#if defined(SGEMM_XSMM)
    libxsmm_init();
    printf("# %s: libxsmm %s (%s), target %s, libxsmm_sgemm_omp\n", name, LIBXSMM_VERSION, LIBXSMM_BRANCH,
           libxsmm_get_target_arch());
    fflush(stdout);
#elif defined(SGEMM_OWN)
    printf("# %s: own_gemm.c, %s\n", name, own_gemm_config);
#endif
    printf("%-14s %-22s %5s %6s %5s %9s %8s %8s %8s\n", "library", "shape", "M", "N", "K", "ms", "GFLOP/s",
           "best", "err/tol");
    for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++) {
        const Shape *sh = &SHAPES[s];
        int M = sh->M, N = sh->N, K = sh->K;
        float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N),
              *c = malloc(sizeof(float) * M * N);
        if (!a || !b || !c) {
            fprintf(stderr, "out of memory for %d x %d x %d\n", M, N, K);
            return 1;
        }
        for (long i = 0; i < (long)M * K; i++) a[i] = rand_unit();
        for (long i = 0; i < (long)K * N; i++) b[i] = rand_unit();
        for (int w = 0; w < 2; w++) sgemm(c, a, b, M, N, K);
        int cap = 100000, n = 0;
        double *t = malloc(sizeof(double) * cap), start = now_s();
        while (n < cap && (n < 10 || now_s() - start < min_s)) {
            double t0 = now_s();
            sgemm(c, a, b, M, N, K);
            t[n++] = now_s() - t0;
        }
        qsort(t, n, sizeof(double), cmp_double);
        double med = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
        double err = check(c, a, b, M, N, K);
#if defined(SGEMM_XSMM)
        if (blas_fallbacks) {   /* libxsmm did not compute this shape itself */
            printf("%-14s %-22s %5d %6d %5d %9s %8s %8s %8s  FALLBACK (handed to BLAS sgemm_, not timed)\n", name,
                   sh->name, M, N, K, "-", "-", "-", "-");
            blas_fallbacks = 0;
            free(t), free(a), free(b), free(c);
            continue;
        }
#endif
        printf("%-14s %-22s %5d %6d %5d %9.4f %8.1f %8.1f %8.2f%s\n", name, sh->name, M, N, K, med * 1e3,
               2.0 * M * N * K / med * 1e-9, 2.0 * M * N * K / t[0] * 1e-9, err, err <= 1 ? "" : "  FAILED");
        fflush(stdout);
        failed |= !(err <= 1);
        free(t);
        free(a);
        free(b);
        free(c);
    }
    return failed;
}
