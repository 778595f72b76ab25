/*
 * precision.c — modelc --precision bf16 (issue 12): which values of the CPU's blocked region are
 * stored as bf16. Runs after layout_blocked on an inference graph compiled with --precision bf16
 * (Graph.bf16).
 *
 * What bf16 means here: the CPU's oneDNN primitives compute in bf16 — every blocked convolution
 * (runtime/rt_blocked.c: bf16 source and weights, the weights converted once at load, f32
 * accumulation and bias, its post-ops on the f32 sums) and every GEMM against constant weights
 * (runtime/rt_matmul.c: bf16 weights converted at load, the source converted per call, f32
 * result). Every other kernel, and everything on a GPU, stays f32. On a CPU without
 * avx512_bf16 the runtime runs the whole model in f32 and says so at load.
 *
 * What this pass decides is storage: a conv reading an f32 source converts it first (a reorder:
 * reading 4 bytes and writing 2 an element, about as much traffic again as the conv's own source
 * read), so a value that only bf16 convs (and max poolings, which round nothing) read is better
 * written as bf16 by its producer, half the bytes in the f32 buffer the memory plan gives it.
 * A blocked value (the root of a blocked conv or max pool kernel that writes blocked) is bf16
 * when every reader is a blocked conv (its source, or its residual) or a blocked max pool; it
 * stays f32 when an elementwise kernel reads it (its code is f32), when it leaves the region
 * (NCHW: a graph output, a view, any other kernel) or when it is not blocked. A conv's residual
 * (oneDNN's `sum` post-op, which reads the destination in the destination's type) must be
 * stored as the conv's result: where one is bf16 and the other is not, both become f32 (a
 * fixpoint: it only ever turns bf16 off). What this costs in accuracy: bf16 keeps 8 significant
 * bits (a relative rounding error of at most 2^-9 per stored value; the residual stream of a
 * ResNet accumulates one such rounding per block), on top of the bf16 inputs of each conv.
 * OpenVINO's bf16 mode stores activations the same way.
 *
 * Kernels of other kinds that a later layout pass may add to the blocked region (a depthwise
 * conv, say) read and write f32 here until this pass names them: safe by default.
 */
#include "modelc.h"

#include <string.h>

/* A blocked conv (grouped and depthwise ones too: oneDNN's jit_dw and grouped kernels read
 * bf16) or max pool kernel: the readers that take a bf16 value. */
static bool bf16_reader(const Kernel *k) {
    if (k->blk < 0) return false;
    if (k->gemm) return k->gemm->op == OP_CONV2D;
    return k->lib && k->lib->op == OP_MAXPOOL2D;
}

void precision_bf16(Graph *g, KernelList *kl) {
    for (int i = 0; i < kl->n; i++) kl->k[i]->blk_src_bf16 = kl->k[i]->blk_dst_bf16 = false;
    if (!g->bf16) return;
    int nn = g->nnodes;
    bool *f32 = xalloc(sizeof(bool) * (size_t)(nn + 1));          /* some reader needs f32 */
    Kernel **prod = xalloc(sizeof(Kernel *) * (size_t)(nn + 1)); /* the kernel whose root it is */
    for (int i = 0; i < kl->n; i++) {
        Kernel *k = kl->k[i];
        prod[k->root->id] = k;
        const Node *anchor = k->gemm ? k->gemm : k->lib;
        if (bf16_reader(k)) {
            /* its source (anchor->in[0], read directly: layout.c keeps a conv's viewed source
             * NCHW) and its residual take bf16; the weights and the biases are f32 load-time
             * values, never blocked */
            for (int j = 1; anchor && j < anchor->nin; j++) f32[view_base(anchor->in[j])->id] = true;
            for (int j = 0; j < k->nleaves; j++)
                if (j != k->gemm_leaf && j != k->blk_res) f32[view_base(k->leaves[j].node)->id] = true;
            continue;
        }
        for (int j = 0; anchor && j < anchor->nin; j++) f32[view_base(anchor->in[j])->id] = true;
        for (int j = 0; j < k->nleaves; j++)
            if (j != k->gemm_leaf) f32[view_base(k->leaves[j].node)->id] = true;
    }
    for (int i = 0; i < g->noutputs; i++) f32[view_base(g->outputs[i].node)->id] = true;
    for (int i = 0; i < kl->n; i++) {
        Kernel *k = kl->k[i];
        k->blk_dst_bf16 = bf16_reader(k) && k->blk_dst && !f32[k->root->id];
    }
    /* a conv's residual is stored as its result */
    for (bool changed = true; changed;) {
        changed = false;
        for (int i = 0; i < kl->n; i++) {
            Kernel *k = kl->k[i];
            if (!bf16_reader(k) || !k->gemm || k->blk_res < 0) continue;
            Kernel *r = prod[k->leaves[k->blk_res].node->id];
            bool rb = r && r->blk_dst_bf16;
            if (rb == k->blk_dst_bf16) continue;
            k->blk_dst_bf16 = false;
            if (r) r->blk_dst_bf16 = false;
            changed = true;
        }
    }
    for (int i = 0; i < kl->n; i++) {
        Kernel *k = kl->k[i];
        if (!bf16_reader(k) || !k->blk_src) continue;
        const Node *x = (k->gemm ? k->gemm : k->lib)->in[0];
        Kernel *p = x == view_base(x) ? prod[x->id] : NULL;
        k->blk_src_bf16 = p && p->blk_dst_bf16;
    }
}

void dump_precision(FILE *out, const Graph *g, const KernelList *kl) {
    if (!g->bf16) return;
    int n = 0;
    for (int i = 0; i < kl->n; i++) n += kl->k[i]->blk_dst_bf16;
    fprintf(out, "  precision bf16: the CPU's blocked convs and constant-weight matmuls compute in bf16; "
                 "%d blocked value%s stored as bf16\n", n, n == 1 ? "" : "s");
    for (int i = 0; i < kl->n; i++) {
        const Kernel *k = kl->k[i];
        if (k->blk < 0 || (!k->blk_src_bf16 && !k->blk_dst_bf16)) continue;
        fprintf(out, "  bf16 k%d: src %s, dst %s\n", k->id, k->blk_src_bf16 ? "bf16" : "f32",
                k->blk_dst_bf16 ? "bf16" : "f32");
    }
}
