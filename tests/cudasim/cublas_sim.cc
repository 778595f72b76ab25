/*
 * cublas_sim.cc — the CUDA simulator's checking stand-in for cuBLAS and cuBLASLt (tests/cudasim).
 *
 * Built as build/cudasim/lib/libcublas.so.13, with libcublasLt.so.13 a link to it: the first
 * names runtime/rt_cuda.c dlopens, found before the toolkit's through the test programs' rpath,
 * so rt_cuda.c runs unchanged, dlopen and dlsym included. Each call checks what cuBLAS checks
 * (operations, sizes, leading dimensions: CUBLAS_STATUS_INVALID_VALUE) and what a GPU would fault
 * on or compute garbage from, which cuBLAS does not check: a handle or stream used on another
 * device than the handle's, a matrix that is not inside device memory the handle's device can
 * access, an output overlapping an input or (batched) another item's output. Those say why on
 * stderr ("cudasim: cublasSgemm: ...") and return CUBLAS_STATUS_EXECUTION_FAILED or
 * INVALID_VALUE. The product itself is queued on the handle's stream as plain loops with double
 * accumulation rounded once to float (then alpha, beta C and the epilogue in float), column-major
 * as cuBLAS: beta == 0 does not read C, alpha == 0 does not read A or B. The cuBLASLt GELU
 * epilogue is the tanh approximation, as cuBLASLt's.
 *
 * cuBLASLt's heuristic offers two algorithms: a split-K one that needs a workspace (two partial
 * products per element of D, in double: 16 * m * n bytes, 256-rounded), first when k >= 2 and
 * the preference's CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES allows it, and one that needs none.
 * cublasLtMatmul checks the workspace as cuBLASLt documents it (at least the algorithm's size,
 * 256-byte aligned) and, as a GPU would, that it is device memory of the handle's device
 * overlapping no matrix; the split-K product writes its partials there and reads them back, so
 * a workspace too small or freed faults. CUDASIM_LT_NOALGO=1 (read at every call) makes the
 * heuristic return no algorithm, as cuBLASLt does for a configuration it has none for.
 * cudasim_lt_counts tells a test which path its GEMMs took.
 */
#include "cublasLt.h"
#include "cudasim.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <mutex>
#include <set>
#include <vector>

#define CUBLAS_EXPORT extern "C" __attribute__((visibility("default")))

struct cublasContext {
    int device;
    cudaStream_t stream;
    void *workspace = nullptr; // cublasSetWorkspace's, until the next cublasSetStream
    size_t workspace_bytes = 0;
};
struct cublasLtContext {
    int device;
};
struct cublasLtMatmulDescOpaque_t {
    int compute, scale;
    int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N, transc = CUBLAS_OP_N, pointer_mode = 0;
    uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    const void *bias = nullptr;
};
struct cublasLtMatmulPreferenceOpaque_t {
    uint64_t max_workspace = 0;
    uint32_t align[4] = {256, 256, 256, 256}; // A, B, C, D: cuBLASLt's defaults
};
struct cublasLtMatrixLayoutOpaque_t {
    int type;
    uint64_t rows, cols;
    int64_t ld;
};

namespace {

std::mutex g_mu;
std::set<const void *> g_live; // every handle, descriptor and layout not yet destroyed

bool live(const void *p)
{
    std::lock_guard<std::mutex> l(g_mu);
    return p && g_live.count(p);
}
void track(const void *p)
{
    std::lock_guard<std::mutex> l(g_mu);
    g_live.insert(p);
}
bool untrack(const void *p)
{
    std::lock_guard<std::mutex> l(g_mu);
    return g_live.erase(p) == 1;
}

const uint64_t kAlgoMagic = 0x6375646173696dULL; // marks an algorithm the stand-in's heuristic made

// cudasim_lt_counts: cublasLtMatmul calls accepted, those of them with a split-K (workspace)
// algorithm, and heuristic calls that returned no algorithm
unsigned long long g_lt_matmuls, g_lt_workspace_matmuls, g_lt_no_algo;

/* The largest power of two (up to 256) that divides p's address. */
uint32_t alignment(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    return a == 0 || (a & 255) == 0 ? 256u : (uint32_t)(a & (~a + 1));
}

/* One matrix operand: column-major rows x cols with leading dimension ld, batch items apart. */
struct Mat {
    const float *p;
    int64_t rows, cols, ld, stride;
    bool is_c = false; // the C input, which may be the output itself
    size_t bytes() const { return rows && cols ? (size_t)((cols - 1) * ld + rows) * sizeof(float) : 0; }
};

bool overlap(const Mat &a, int64_t i, const Mat &b, int64_t j)
{
    uintptr_t a0 = (uintptr_t)(a.p + i * a.stride), b0 = (uintptr_t)(b.p + j * b.stride);
    return a.bytes() && b.bytes() && a0 < b0 + b.bytes() && b0 < a0 + a.bytes();
}

/* The handle's device is current and its stream belongs to it; every matrix lies in memory
 * that device may access; the output overlaps no input and no other item's output. */
cublasStatus_t check_run(const char *api, int device, cudaStream_t stream, const Mat *in, int nin, const Mat &out,
                         int batch)
{
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess || cur != device) {
        (void)cudaGetLastError();
        cudasim_report("%s: the handle was created on cuda:%d but cuda:%d is current", api, device, cur);
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    int sd = cudasim_stream_device(stream);
    if (sd != device) {
        cudasim_report("%s: the stream %s cuda:%d's, not the handle's cuda:%d", api,
                       sd < 0 ? "does not exist; it is not" : "is", sd, device);
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    char what[96];
    for (int b = 0; b < batch; b++) {
        for (int i = 0; i < nin; i++) {
            snprintf(what, sizeof what, "%s: input %d of item %d", api, i + 1, b);
            if (in[i].bytes() && cudasim_check_access(in[i].p + b * in[i].stride, in[i].bytes(), device, what) != 0)
                return CUBLAS_STATUS_EXECUTION_FAILED;
            if (overlap(out, b, in[i], b) && !(in[i].is_c && out.p == in[i].p && out.ld == in[i].ld)) {
                cudasim_report("%s: item %d's output overlaps its input %d", api, b, i + 1);
                return CUBLAS_STATUS_INVALID_VALUE;
            }
        }
        snprintf(what, sizeof what, "%s: output of item %d", api, b);
        if (out.bytes() && cudasim_check_access(out.p + b * out.stride, out.bytes(), device, what) != 0)
            return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    if (batch > 1 && overlap(out, 0, out, 1)) {
        cudasim_report("%s: the outputs of batch items overlap (stride %lld, each item %zu bytes)", api,
                       (long long)out.stride, out.bytes());
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_SUCCESS;
}

/* D = act(alpha op(A) op(B) + beta C + bias), for `batch` items, on the stream. */
struct Gemm {
    int ta, tb;
    int64_t m, n, k;
    float alpha, beta;
    const float *A, *B, *C, *bias;
    float *D;
    int64_t lda, ldb, ldc, ldd, sA, sB, sC, sD;
    int batch;
    int act;                // 0 none, 1 relu, 2 gelu (tanh)
    double *ws = nullptr;   // split-K (cuBLASLt, batch 1): the partials [n][m][2] in the workspace

    // op(A) row i times op(B) column j over p in [p0, p1), in double
    double dot(const float *A, const float *B, int64_t i, int64_t j, int64_t p0, int64_t p1) const
    {
        double acc = 0.0;
        for (int64_t p2 = p0; p2 < p1; p2++) {
            const float a = ta ? A[p2 + i * lda] : A[i + p2 * lda];
            const float bv = tb ? B[j + p2 * ldb] : B[p2 + j * ldb];
            acc += (double)a * bv;
        }
        return acc;
    }

    static void run(void *p)
    {
        const Gemm &g = *static_cast<Gemm *>(p);
        for (int b = 0; b < g.batch; b++) {
            const float *A = g.A + b * g.sA, *B = g.B + b * g.sB, *C = g.C ? g.C + b * g.sC : nullptr;
            float *D = g.D + b * g.sD;
            if (g.ws && g.alpha != 0.0f) // the two halves of k, each into its own slot of the workspace
                for (int64_t j = 0; j < g.n; j++)
                    for (int64_t i = 0; i < g.m; i++)
                        for (int h = 0; h < 2; h++)
                            g.ws[2 * (i + j * g.m) + h] = g.dot(A, B, i, j, h ? g.k / 2 : 0, h ? g.k : g.k / 2);
            std::vector<float> col((size_t)g.m); // C may be D: read a column before writing it
            for (int64_t j = 0; j < g.n; j++) {
                for (int64_t i = 0; i < g.m; i++) {
                    double acc = 0.0;
                    if (g.alpha != 0.0f)
                        acc = g.ws ? g.ws[2 * (i + j * g.m)] + g.ws[2 * (i + j * g.m) + 1] : g.dot(A, B, i, j, 0, g.k);
                    // the product rounded once; scaling and the epilogue in float, as cuBLAS's
                    // FP32 compute type does
                    float f = g.alpha * (float)acc;
                    if (g.beta != 0.0f)
                        f += g.beta * C[i + j * g.ldc];
                    if (g.bias)
                        f += g.bias[i];
                    if (g.act == 1)
                        f = f < 0.0f ? 0.0f : f;
                    else if (g.act == 2)
                        f = 0.5f * f * (1.0f + tanhf(0.79788456080286535588f * (f + 0.044715f * f * f * f)));
                    col[(size_t)i] = f;
                }
                for (int64_t i = 0; i < g.m; i++)
                    D[i + j * g.ldd] = col[(size_t)i];
            }
        }
    }
    static void drop(void *p) { delete static_cast<Gemm *>(p); }
};

cublasStatus_t sgemm(const char *api, cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb, int m,
                     int n, int k, const float *alpha, const float *A, int lda, long long sA, const float *B, int ldb,
                     long long sB, const float *beta, float *C, int ldc, long long sC, int batch)
{
    if (!live(h))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
    const int arows = ta ? k : m, brows = tb ? n : k;
    if ((transa != CUBLAS_OP_N && transa != CUBLAS_OP_T && transa != CUBLAS_OP_C) ||
        (transb != CUBLAS_OP_N && transb != CUBLAS_OP_T && transb != CUBLAS_OP_C) || m < 0 || n < 0 || k < 0 ||
        batch < 0 || lda < (arows > 1 ? arows : 1) || ldb < (brows > 1 ? brows : 1) || ldc < (m > 1 ? m : 1) ||
        !alpha || !beta) {
        cudasim_report("%s: invalid arguments: op %d %d, m %d n %d k %d, lda %d ldb %d ldc %d, batch %d%s", api,
                       (int)transa, (int)transb, m, n, k, lda, ldb, ldc, batch,
                       !alpha || !beta ? ", alpha or beta NULL" : "");
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (m == 0 || n == 0 || batch == 0)
        return CUBLAS_STATUS_SUCCESS;
    if (!h->workspace && cudasim_stream_capturing(h->stream)) {
        // cuBLAS's default workspace comes from its own pool, which a graph must not hold on to
        // (cuBLAS guide, "CUDA Graphs support"): stricter than cuBLAS, the stand-in refuses it
        cudasim_report("%s on a capturing stream without cublasSetWorkspace after the last cublasSetStream "
                       "(which resets the workspace to cuBLAS's default pool)", api);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    const bool reads_ab = *alpha != 0.0f && k > 0;
    Mat in[3] = {{A, arows, ta ? m : k, lda, sA}, {B, brows, tb ? k : n, ldb, sB}, {C, m, n, ldc, sC, true}};
    Mat out = {C, m, n, ldc, sC};
    Mat used[3];
    int nin = 0;
    if (reads_ab)
        used[nin++] = in[0], used[nin++] = in[1];
    if (*beta != 0.0f)
        used[nin++] = in[2];
    cublasStatus_t st = check_run(api, h->device, h->stream, used, nin, out, batch);
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    Gemm *g = new Gemm{ta, tb, m, n, reads_ab ? k : 0, *alpha, *beta, A, B, C, nullptr, C,
                       lda, ldb, ldc, ldc, sA, sB, sC, sC, batch, 0};
    if (cudasim_enqueue(h->stream, api, &Gemm::run, g, &Gemm::drop) != cudaSuccess)
        return CUBLAS_STATUS_EXECUTION_FAILED;
    return CUBLAS_STATUS_SUCCESS;
}

} // namespace

/* ---------------------------------------------------------------- cuBLAS */

CUBLAS_EXPORT cublasStatus_t cublasCreate_v2(cublasHandle_t *handle)
{
    int dev;
    if (!handle)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return CUBLAS_STATUS_NOT_INITIALIZED;
    }
    *handle = new cublasContext{dev, nullptr};
    track(*handle);
    return CUBLAS_STATUS_SUCCESS;
}

CUBLAS_EXPORT cublasStatus_t cublasDestroy_v2(cublasHandle_t h)
{
    if (!untrack(h))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

CUBLAS_EXPORT cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t stream)
{
    if (!live(h))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = stream; // checked against the handle's device where it is used, as on a GPU
    h->workspace = nullptr; // as cuBLAS: back to the default workspace pool
    h->workspace_bytes = 0;
    return CUBLAS_STATUS_SUCCESS;
}

CUBLAS_EXPORT cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void *workspace, size_t bytes)
{
    if (!live(h))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (bytes && (!workspace || (uintptr_t)workspace % 256 ||
                  cudasim_check_access(workspace, bytes, h->device, "cublasSetWorkspace") != 0)) {
        cudasim_report("cublasSetWorkspace: %zu bytes at %p: not 256-byte aligned device memory of cuda:%d", bytes,
                       workspace, h->device);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    h->workspace = bytes ? workspace : nullptr;
    h->workspace_bytes = bytes;
    return CUBLAS_STATUS_SUCCESS;
}

CUBLAS_EXPORT const char *cublasGetStatusName(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}
CUBLAS_EXPORT const char *cublasGetStatusString(cublasStatus_t s) { return cublasGetStatusName(s); }

CUBLAS_EXPORT cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb,
                                            int m, int n, int k, const float *alpha, const float *A, int lda,
                                            const float *B, int ldb, const float *beta, float *C, int ldc)
{
    return sgemm("cublasSgemm", h, transa, transb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

CUBLAS_EXPORT cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t transa,
                                                       cublasOperation_t transb, int m, int n, int k,
                                                       const float *alpha, const float *A, int lda, long long sA,
                                                       const float *B, int ldb, long long sB, const float *beta,
                                                       float *C, int ldc, long long sC, int batch)
{
    return sgemm("cublasSgemmStridedBatched", h, transa, transb, m, n, k, alpha, A, lda, sA, B, ldb, sB, beta, C, ldc,
                 sC, batch);
}

/* ---------------------------------------------------------------- cuBLASLt */

CUBLAS_EXPORT cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle)
{
    int dev;
    if (!handle)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return CUBLAS_STATUS_NOT_INITIALIZED;
    }
    *handle = new cublasLtContext{dev};
    track(*handle);
    return CUBLAS_STATUS_SUCCESS;
}

CUBLAS_EXPORT cublasStatus_t cublasLtDestroy(cublasLtHandle_t h)
{
    if (!untrack(h))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

CUBLAS_EXPORT cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc, cublasComputeType_t compute,
                                                      cudaDataType_t scale)
{
    if (!desc)
        return CUBLAS_STATUS_INVALID_VALUE;
    *desc = new cublasLtMatmulDescOpaque_t{};
    (*desc)->compute = compute;
    (*desc)->scale = scale;
    track(*desc);
    return CUBLAS_STATUS_SUCCESS;
}

CUBLAS_EXPORT cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc)
{
    if (!untrack(desc))
        return CUBLAS_STATUS_INVALID_VALUE;
    delete desc;
    return CUBLAS_STATUS_SUCCESS;
}

CUBLAS_EXPORT cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                                            const void *buf, size_t size)
{
    if (!live(d) || !buf)
        return CUBLAS_STATUS_INVALID_VALUE;
    void *field = nullptr;
    size_t want = 4;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: field = &d->compute; break;
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: field = &d->scale; break;
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: field = &d->pointer_mode; break;
    case CUBLASLT_MATMUL_DESC_TRANSA: field = &d->transa; break;
    case CUBLASLT_MATMUL_DESC_TRANSB: field = &d->transb; break;
    case CUBLASLT_MATMUL_DESC_TRANSC: field = &d->transc; break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: field = &d->epilogue; break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: field = &d->bias, want = sizeof(void *); break;
    }
    if (!field || size != want) {
        cudasim_report("cublasLtMatmulDescSetAttribute: attribute %d takes %zu bytes, given %zu", (int)attr, want, size);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    memcpy(field, buf, size);
    return CUBLAS_STATUS_SUCCESS;
}

CUBLAS_EXPORT cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout, cudaDataType type,
                                                        uint64_t rows, uint64_t cols, int64_t ld)
{
    if (!layout)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (type != CUDA_R_32F) {
        cudasim_report("cublasLtMatrixLayoutCreate: the stand-in computes in float32 only (type %d)", (int)type);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (rows > INT32_MAX || cols > INT32_MAX || ld < (int64_t)(rows > 1 ? rows : 1)) {
        cudasim_report("cublasLtMatrixLayoutCreate: %llu x %llu with leading dimension %lld (at least the rows)",
                       (unsigned long long)rows, (unsigned long long)cols, (long long)ld);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    *layout = new cublasLtMatrixLayoutOpaque_t{type, rows, cols, ld};
    track(*layout);
    return CUBLAS_STATUS_SUCCESS;
}

CUBLAS_EXPORT cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout)
{
    if (!untrack(layout))
        return CUBLAS_STATUS_INVALID_VALUE;
    delete layout;
    return CUBLAS_STATUS_SUCCESS;
}

CUBLAS_EXPORT cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref)
{
    if (!pref)
        return CUBLAS_STATUS_INVALID_VALUE;
    *pref = new cublasLtMatmulPreferenceOpaque_t{};
    track(*pref);
    return CUBLAS_STATUS_SUCCESS;
}

CUBLAS_EXPORT cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref)
{
    if (!untrack(pref))
        return CUBLAS_STATUS_INVALID_VALUE;
    delete pref;
    return CUBLAS_STATUS_SUCCESS;
}

CUBLAS_EXPORT cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                                  cublasLtMatmulPreferenceAttributes_t attr,
                                                                  const void *buf, size_t size)
{
    if (!live(p) || !buf)
        return CUBLAS_STATUS_INVALID_VALUE;
    void *field = nullptr;
    size_t want = 4;
    switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: field = &p->max_workspace, want = 8; break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: field = &p->align[0]; break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: field = &p->align[1]; break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: field = &p->align[2]; break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: field = &p->align[3]; break;
    default: break;
    }
    if (!field || size != want) {
        cudasim_report("cublasLtMatmulPreferenceSetAttribute: attribute %d takes %zu bytes, given %zu (or is not "
                       "supported by the stand-in)", (int)attr, want, size);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    memcpy(field, buf, size);
    return CUBLAS_STATUS_SUCCESS;
}

/* Algorithms when the preference's alignments are powers of two of at least a float (what an
 * fp32 kernel can load), none otherwise (CUBLAS_STATUS_NOT_SUPPORTED, as cuBLASLt): the split-K
 * one first when k >= 2 and its workspace fits the preference's maximum, then the one that needs
 * none (the first only when requested is 1). An algorithm remembers those alignments, which
 * cublasLtMatmul then holds the pointers to, and the workspace it needs. Under
 * CUDASIM_LT_NOALGO=1, none: *returned = 0 and CUBLAS_STATUS_SUCCESS. */
CUBLAS_EXPORT cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t desc,
                                                            cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                                                            cublasLtMatrixLayout_t lc, cublasLtMatrixLayout_t ld,
                                                            cublasLtMatmulPreference_t pref, int requested,
                                                            cublasLtMatmulHeuristicResult_t results[], int *returned)
{
    static const char api[] = "cublasLtMatmulAlgoGetHeuristic";
    if (!live(h))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!live(desc) || !live(la) || !live(lb) || !live(lc) || !live(ld) || !live(pref) || requested < 1 || !results ||
        !returned) {
        cudasim_report("%s: a descriptor, layout or preference does not exist, or no room for a result", api);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    *returned = 0;
    const char *noalgo = getenv("CUDASIM_LT_NOALGO");
    if (noalgo && strcmp(noalgo, "1") == 0) {
        std::lock_guard<std::mutex> l(g_mu);
        g_lt_no_algo++;
        return CUBLAS_STATUS_SUCCESS;
    }
    for (int i = 0; i < 4; i++)
        if (pref->align[i] < 4 || (pref->align[i] & (pref->align[i] - 1))) {
            cudasim_report("%s: no algorithm for %c aligned to %u bytes", api, "ABCD"[i], pref->align[i]);
            std::lock_guard<std::mutex> l(g_mu);
            g_lt_no_algo++;
            return CUBLAS_STATUS_NOT_SUPPORTED;
        }
    const bool ta = desc->transa != CUBLAS_OP_N;
    const uint64_t m = ta ? la->cols : la->rows, k = ta ? la->rows : la->cols;
    const uint64_t n = desc->transb != CUBLAS_OP_N ? lb->rows : lb->cols;
    const uint64_t split_ws = (2 * m * n * sizeof(double) + 255) / 256 * 256;
    uint64_t need[2];
    int avail = 0;
    if (k >= 2 && split_ws <= pref->max_workspace)
        need[avail++] = split_ws;
    need[avail++] = 0;
    for (int r = 0; r < avail && r < requested; r++) {
        memset(&results[r], 0, sizeof results[r]);
        for (int i = 0; i < 4; i++)
            results[r].algo.data[i] = pref->align[i];
        results[r].algo.data[4] = need[r]; // workspace bytes it needs (0: not split)
        results[r].algo.data[7] = kAlgoMagic;
        results[r].workspaceSize = need[r];
        results[r].state = CUBLAS_STATUS_SUCCESS;
        results[r].wavesCount = 1.0f;
        ++*returned;
    }
    return CUBLAS_STATUS_SUCCESS;
}

/* For tests (found with dlsym in the loaded stand-in): out[0] cublasLtMatmul calls accepted,
 * out[1] those with a split-K algorithm (a workspace), out[2] heuristic calls that found no
 * algorithm, since the process started. */
CUBLAS_EXPORT void cudasim_lt_counts(unsigned long long out[3])
{
    std::lock_guard<std::mutex> l(g_mu);
    out[0] = g_lt_matmuls, out[1] = g_lt_workspace_matmuls, out[2] = g_lt_no_algo;
}

CUBLAS_EXPORT cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void *alpha,
                                            const void *A, cublasLtMatrixLayout_t la, const void *B,
                                            cublasLtMatrixLayout_t lb, const void *beta, const void *C,
                                            cublasLtMatrixLayout_t lc, void *D, cublasLtMatrixLayout_t ld,
                                            const cublasLtMatmulAlgo_t *algo, void *workspace, size_t ws,
                                            cudaStream_t stream)
{
    static const char api[] = "cublasLtMatmul";
    if (!live(h))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    /* the alignments the algorithm was chosen for (no algorithm: the default preference's) */
    const uint32_t dflt[4] = {256, 256, 256, 256};
    uint32_t need[4];
    for (int i = 0; i < 4; i++)
        need[i] = algo ? (uint32_t)algo->data[i] : dflt[i];
    if (algo && algo->data[7] != kAlgoMagic) {
        cudasim_report("%s: the algorithm is not one cublasLtMatmulAlgoGetHeuristic returned", api);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    // the workspace, as cuBLASLt documents it: at least what the algorithm needs, and device memory
    // 256-byte aligned (checked when any is given, as the kernels would use it)
    const uint64_t ws_need = algo ? algo->data[4] : 0;
    if (ws_need > ws || (ws && (!workspace || (uintptr_t)workspace % 256))) {
        cudasim_report("%s: the algorithm needs %llu bytes of workspace, given %zu at %p%s", api,
                       (unsigned long long)ws_need, ws, workspace,
                       ws && workspace && (uintptr_t)workspace % 256 ? " (not 256-byte aligned)" : "");
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    const void *ptrs[4] = {A, B, C, D};
    for (int i = 0; i < 4; i++)
        if (alignment(ptrs[i]) < need[i]) {
            cudasim_report("%s: %c at %p is %u-byte aligned, but the algorithm %s %u-byte alignment", api, "ABCD"[i],
                           ptrs[i], alignment(ptrs[i]), algo ? "was chosen for" : "(none given: the default preference) assumes",
                           need[i]);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
    if (!live(desc) || !live(la) || !live(lb) || !live(lc) || !live(ld) || !alpha || !beta) {
        cudasim_report("%s: a descriptor or layout does not exist, or alpha or beta is NULL", api);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (desc->compute != CUBLAS_COMPUTE_32F || desc->scale != CUDA_R_32F || desc->pointer_mode != 0 ||
        desc->transc != CUBLAS_OP_N) {
        cudasim_report("%s: the stand-in supports compute 32F, scale 32F, host pointer mode, no transc", api);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    const bool ta = desc->transa != CUBLAS_OP_N, tb = desc->transb != CUBLAS_OP_N;
    const int64_t m = ta ? la->cols : la->rows, k = ta ? la->rows : la->cols;
    const int64_t kb = tb ? lb->cols : lb->rows, n = tb ? lb->rows : lb->cols;
    if (k != kb || lc->rows != (uint64_t)m || lc->cols != (uint64_t)n || ld->rows != (uint64_t)m ||
        ld->cols != (uint64_t)n || (C == D && lc->ld != ld->ld)) {
        cudasim_report("%s: shapes do not agree: op(A) %lld x %lld, op(B) %lld x %lld, C %llu x %llu, D %llu x %llu%s",
                       api, (long long)m, (long long)k, (long long)kb, (long long)n, (unsigned long long)lc->rows,
                       (unsigned long long)lc->cols, (unsigned long long)ld->rows, (unsigned long long)ld->cols,
                       C == D && lc->ld != ld->ld ? ", and C == D with different leading dimensions" : "");
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    int act;
    bool has_bias;
    switch (desc->epilogue) {
    case CUBLASLT_EPILOGUE_DEFAULT: act = 0, has_bias = false; break;
    case CUBLASLT_EPILOGUE_RELU: act = 1, has_bias = false; break;
    case CUBLASLT_EPILOGUE_BIAS: act = 0, has_bias = true; break;
    case CUBLASLT_EPILOGUE_RELU_BIAS: act = 1, has_bias = true; break;
    case CUBLASLT_EPILOGUE_GELU: act = 2, has_bias = false; break;
    case CUBLASLT_EPILOGUE_GELU_BIAS: act = 2, has_bias = true; break;
    default:
        cudasim_report("%s: epilogue %u is not supported by the stand-in", api, desc->epilogue);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (has_bias && !desc->bias) {
        cudasim_report("%s: a bias epilogue without CUBLASLT_MATMUL_DESC_BIAS_POINTER", api);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    const float a = *(const float *)alpha, b = *(const float *)beta;
    if (m == 0 || n == 0)
        return CUBLAS_STATUS_SUCCESS;
    const bool reads_ab = a != 0.0f && k > 0;
    Mat in[4];
    int nin = 0;
    if (reads_ab) {
        in[nin++] = Mat{(const float *)A, (int64_t)la->rows, (int64_t)la->cols, la->ld, 0};
        in[nin++] = Mat{(const float *)B, (int64_t)lb->rows, (int64_t)lb->cols, lb->ld, 0};
    }
    if (b != 0.0f)
        in[nin++] = Mat{(const float *)C, m, n, lc->ld, 0, true};
    if (has_bias)
        in[nin++] = Mat{(const float *)desc->bias, m, 1, m, 0};
    Mat out = {(const float *)D, m, n, ld->ld, 0};
    cublasStatus_t st = check_run(api, h->device, stream, in, nin, out, 1);
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    if (ws) { // the kernels write it: the handle's device's memory, apart from every matrix
        if (cudasim_check_access(workspace, ws, h->device, "cublasLtMatmul: the workspace") != 0)
            return CUBLAS_STATUS_EXECUTION_FAILED;
        const Mat w = {(const float *)workspace, (int64_t)(ws / sizeof(float)), 1, (int64_t)(ws / sizeof(float)), 0};
        for (int i = 0; i <= nin; i++)
            if (overlap(w, 0, i < nin ? in[i] : out, 0)) {
                cudasim_report("%s: the workspace overlaps %s", api, i < nin ? "an input" : "the output D");
                return CUBLAS_STATUS_INVALID_VALUE;
            }
    }
    Gemm *g = new Gemm{ta, tb, m, n, reads_ab ? k : 0, a, b, (const float *)A, (const float *)B,
                       (const float *)C, has_bias ? (const float *)desc->bias : nullptr, (float *)D,
                       la->ld, lb->ld, lc->ld, ld->ld, 0, 0, 0, 0, 1, act};
    g->ws = ws_need ? (double *)workspace : nullptr;
    if (cudasim_enqueue(stream, api, &Gemm::run, g, &Gemm::drop) != cudaSuccess)
        return CUBLAS_STATUS_EXECUTION_FAILED;
    std::lock_guard<std::mutex> l(g_mu);
    g_lt_matmuls++;
    g_lt_workspace_matmuls += ws_need != 0;
    return CUBLAS_STATUS_SUCCESS;
}
