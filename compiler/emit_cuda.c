/*
 * emit_cuda.c — the CUDA twins of the fused elementwise kernels (NAME.cu).
 *
 * Each kernel of the fused graph that has an elementwise expression (a chain, or a GEMM or
 * convolution epilogue) gets here the same scalar function NAME_kN_expr that emit_c.c writes
 * into NAME.c — produced by the same code (emit_expr_function), compiled as
 * __host__ __device__ — and a grid-stride __global__ kernel over the same loop nest
 * (kernel_loops), with 64-bit index math (field case B12). When the merged loop nest is one
 * flat dimension and every operand is either contiguous or a single broadcast element, a second
 * kernel moves four floats per thread (float4, 16-byte loads and stores); the launcher takes it
 * when the element count is a multiple of 4 and every pointer is 16-byte aligned (arena blocks
 * are 256-aligned by the CUDA plan). Every launch is spelled MRT_LAUNCH (runtime/mrt_launch.h:
 * <<<...>>> under nvcc; the tests' CUDA simulator compiles the same file with a host C++
 * compiler), is checked, and a failure names the model, the kernel and the graph node. GEMMs, convolutions and the library kernels (softmax, pooling,
 * layer norm, ...) live in the runtime (mrt_gemm_f32, rt_cuda_kernels.cu).
 */
#include "modelc.h"

#include <inttypes.h>
#include <string.h>

static bool vectorizable(const Kernel *k, const LoopNest *ln) {
    if (ln->rank != 1 || k->root->dtype != DT_F32 || kernel_may_fault(k)) return false;
    for (int j = 0; j < ln->nops; j++) {
        if (ln->base[j]) return false;
        Dim s = ln->stride[j][0];
        if (dim_is_sym(s) || (s.c != 0 && s.c != 1)) return false;
        if (j > 0 && k->leaves[j - 1].node->dtype != DT_F32) return false;
    }
    return ln->stride[0][0].c == 1;
}

static void emit_kernel(FILE *o, const Graph *g, const Kernel *k, const char *pfx, const char *kind) {
    char *fname = xprintf("%s_%s%d", pfx, kind, k->id);
    const char *T = c_type(k->root->dtype);
    LoopNest ln;
    kernel_loops(k, &ln);
    emit_expr_function(o, k, fname, true);

    /* the general kernel */
    fprintf(o, "__global__ void %s_g(%s *out", fname, T);
    for (int i = 0; i < k->nleaves; i++) fprintf(o, ", const %s *l%d", c_type(k->leaves[i].node->dtype), i);
    bool fault = kernel_may_fault(k);
    fprintf(o, ", int64_t B%s, int64_t n%s) {\n    (void)B;%s\n", sym_params, fault ? ", int *mrt_fault" : "", sym_voids);
    fprintf(o, "    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += (int64_t)gridDim.x * blockDim.x) {\n");
    if (ln.rank == 1) {
        fprintf(o, "        const int64_t i0 = idx;\n");
    } else if (ln.rank > 1) {
        fprintf(o, "        int64_t r = idx;\n");
        for (int d = ln.rank - 1; d >= 1; d--)
            fprintf(o, "        const int64_t i%d = r %% %s;\n        r /= %s;\n", d, dim_c(ln.n[d]), dim_c(ln.n[d]));
        fprintf(o, "        const int64_t i0 = r;\n");
    }
    fprintf(o, "        out[%s] = %s_expr(", loop_index(&ln, 0), fname);
    for (int i = 0; i < k->nleaves; i++) fprintf(o, "%sl%d[%s]", i ? ", " : "", i, loop_index(&ln, 1 + i));
    fprintf(o, "%s);\n    }\n}\n\n", fault ? (k->nleaves ? ", mrt_fault" : "mrt_fault") : "");

    bool vec = vectorizable(k, &ln);
    if (vec) {
        fprintf(o, "__global__ void %s_g4(float4 *out", fname);
        for (int i = 0; i < k->nleaves; i++)
            fprintf(o, ", const %s *l%d", ln.stride[1 + i][0].c ? "float4" : "float", i);
        fprintf(o, ", int64_t n4) {\n");
        fprintf(o, "    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n4; idx += (int64_t)gridDim.x * blockDim.x) {\n");
        for (int i = 0; i < k->nleaves; i++) {
            if (ln.stride[1 + i][0].c) fprintf(o, "        const float4 v%d = l%d[idx];\n", i, i);
            else fprintf(o, "        const float s%d = l%d[0];\n", i, i);
        }
        fprintf(o, "        float4 r;\n");
        const char *lane[4] = {"x", "y", "z", "w"};
        for (int c = 0; c < 4; c++) {
            fprintf(o, "        r.%s = %s_expr(", lane[c], fname);
            for (int i = 0; i < k->nleaves; i++) {
                if (ln.stride[1 + i][0].c) fprintf(o, "%sv%d.%s", i ? ", " : "", i, lane[c]);
                else fprintf(o, "%ss%d", i ? ", " : "", i);
            }
            fprintf(o, ");\n");
        }
        fprintf(o, "        out[idx] = r;\n    }\n}\n\n");
    }

    /* the launcher */
    fprintf(o, "extern \"C\" mrt_status %s_cuda_%s%d(void *stream, %s *out", pfx, kind, k->id, T);
    for (int i = 0; i < k->nleaves; i++) fprintf(o, ", const %s *l%d", c_type(k->leaves[i].node->dtype), i);
    Dim numel = shape_numel(&k->root->shape);
    fprintf(o, ", int64_t B%s) {\n    const int64_t n = %s;\n    if (n <= 0) return MRT_OK;\n", sym_params, dim_c(numel));
    fprintf(o, "    cudaStream_t s = (cudaStream_t)stream;\n    const int threads = 256;\n");
    if (vec) {
        fprintf(o, "    if (n %% 4 == 0 && ((uintptr_t)out %% 16) == 0");
        for (int i = 0; i < k->nleaves; i++)
            if (ln.stride[1 + i][0].c) fprintf(o, " && ((uintptr_t)l%d %% 16) == 0", i);
        fprintf(o, ") {\n        const int64_t n4 = n / 4;\n        int64_t blocks = (n4 + threads - 1) / threads;\n"
                   "        if (blocks > 65536) blocks = 65536;\n");
        fprintf(o, "        MRT_LAUNCH(%s_g4, (unsigned)blocks, threads, 0, s, (float4 *)out", fname);
        for (int i = 0; i < k->nleaves; i++)
            fprintf(o, ", %sl%d", ln.stride[1 + i][0].c ? "(const float4 *)" : "", i);
        fprintf(o, ", n4);\n    } else\n");
    }
    char *what = kernel_what(g, k, kind), *fwhat = fault ? fault_what(g, k, kind) : NULL;
    if (fault) /* the integer division's check, read back at the end of the run */
        fprintf(o, "    int *mrt_fault, ticket;\n    mrt_status st = mrt_cuda_fault_begin(stream, \"%s\", &mrt_fault, &ticket);\n"
                   "    if (st != MRT_OK) return st;\n", fwhat);
    fprintf(o, "    {\n        int64_t blocks = (n + threads - 1) / threads;\n        if (blocks > 65536) blocks = 65536;\n");
    fprintf(o, "        MRT_LAUNCH(%s_g, (unsigned)blocks, threads, 0, s, out", fname);
    for (int i = 0; i < k->nleaves; i++) fprintf(o, ", l%d", i);
    fprintf(o, ", B%s, n%s);\n    }\n", sym_args, fault ? ", mrt_fault" : "");
    if (fault)
        fprintf(o, "    if ((st = mrt_cuda_check_launch(\"%s\")) != MRT_OK) return st;\n"
                   "    return mrt_cuda_fault_end(stream, \"%s\", ticket);\n}\n\n", what, fwhat);
    else
        fprintf(o, "    return mrt_cuda_check_launch(\"%s\");\n}\n\n", what);
}

void emit_cuda(FILE *o, const Graph *g, const KernelList *kl, const KernelList *init, const char *pfx) {
    fprintf(o, "/* %s.cu — generated by modelc from model '%s'. Do not edit.\n", pfx, g->name);
    fprintf(o, " * The CUDA twins of the fused elementwise kernels in %s.c (same expressions). Compile with\n"
               " * nvcc -c and link with %s.c built with -DMRT_WITH_CUDA. */\n", pfx, pfx);
    fprintf(o, "#include <cuda_runtime.h>\n#include <stdint.h>\n#include \"modelrt.h\"\n#include \"mrt_kernels.h\"\n"
               "#include \"mrt_launch.h\"\n\n");
    for (int li = 0; li < 2; li++) {
        const KernelList *L = li ? init : kl;
        for (int i = 0; i < L->n; i++)
            if (L->k[i]->expr) emit_kernel(o, g, L->k[i], pfx, li ? "init" : "k");
    }
}
