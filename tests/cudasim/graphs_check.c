/*
 * graphs_check.c — the CUDA graphs of a generated run() on the simulated GPU (tests/cudasim/run.sh
 * builds it with tests/numeric/cases/symbolic_attention.model, emitted with --emit-c: an
 * embedding with its deferred id check, cuBLASLt and cuBLAS GEMMs, softmax, two symbolic sizes).
 *
 * A run at new sizes runs eagerly (the first) or is captured and launched; a run at sizes and
 * pointers seen before replays its graph: no kernel launch or library call, one graph launch, and
 * bit for bit the results of the eager run (the simulator computes the same either way). Other
 * sizes, and the caller's device buffers (used in place, so their pointers are in the graph),
 * re-capture; each result is compared bit for bit with a second model's eager run at the same
 * sizes. A bad id in a replayed run is reported from the graph's deferred check. Prints
 * "PASS: cudasim/graphs/NAME" or "FAIL: cudasim/graphs/NAME: why" lines; exit 1 on a failure.
 *
 *   graphs_check WEIGHTS.safetensors     (CUDASIM_DEVICES=1; MODELRT_CUDA_GRAPHS unset)
 */
#include "symbolic_attention.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MB = SYMBOLIC_ATTENTION_MAX_BATCH, MS = SYMBOLIC_ATTENTION_MAX_SEQ, D = 16 };

typedef struct { /* one run's inputs and outputs, host or device */
    int64_t *ids;
    float *mask, *y, *cls, *pooled, *flat, *probs;
    int64_t *pos;
} io;

static size_t sz[8]; /* bytes of each buffer at the largest sizes, in io's order */
static int failed;

static void result(const char *name, int ok, const char *why)
{
    if (ok)
        printf("PASS: cudasim/graphs/%s\n", name);
    else
        printf("FAIL: cudasim/graphs/%s: %s\n", name, why);
    failed |= !ok;
}

static void counters(unsigned long long c[5])
{
    void *f = dlsym(RTLD_DEFAULT, "cudasim_get_counters");
    void (*get)(unsigned long long *);
    memset(c, 0, 5 * sizeof *c);
    if (f) {
        memcpy(&get, &f, sizeof f);
        get(c);
    }
}

static void io_alloc(io *b, mrt_device d)
{
    void **p[8] = {(void **)&b->ids, (void **)&b->mask, (void **)&b->y, (void **)&b->cls,
                   (void **)&b->pooled, (void **)&b->flat, (void **)&b->probs, (void **)&b->pos};
    for (int i = 0; i < 8; i++) {
        *p[i] = d.kind == MRT_DEVICE_CPU ? calloc(1, sz[i]) : mrt_alloc(d, sz[i]);
        if (!*p[i]) {
            fprintf(stderr, "graphs_check: cannot allocate %zu bytes: %s\n", sz[i], mrt_last_error());
            exit(1);
        }
    }
}

static void io_free(io *b, mrt_device d)
{
    void *p[8] = {b->ids, b->mask, b->y, b->cls, b->pooled, b->flat, b->probs, b->pos};
    for (int i = 0; i < 8; i++)
        d.kind == MRT_DEVICE_CPU ? free(p[i]) : mrt_free(d, p[i]);
}

/* Copy all 8 buffers of src to dst (either side on the device; 'to' names dst's device). */
static void io_copy(io *dst, mrt_device dd, const io *src, mrt_device sd, void *stream)
{
    void *a[8] = {dst->ids, dst->mask, dst->y, dst->cls, dst->pooled, dst->flat, dst->probs, dst->pos};
    const void *b[8] = {src->ids, src->mask, src->y, src->cls, src->pooled, src->flat, src->probs, src->pos};
    for (int i = 0; i < 8; i++)
        if (mrt_memcpy(dd, a[i], sd, b[i], sz[i], stream) != MRT_OK) {
            fprintf(stderr, "graphs_check: copy: %s\n", mrt_last_error());
            exit(1);
        }
    if (mrt_stream_sync(dd.kind == MRT_DEVICE_CUDA ? dd : sd, stream, "graphs_check copy") != MRT_OK)
        exit(1);
}

static mrt_status run(symbolic_attention *m, int B, int S, const io *b)
{
    return symbolic_attention_run(m, B, S, b->ids, b->mask, b->y, b->cls, b->pooled, b->flat, b->pos, b->probs);
}

/* 1 if the outputs of a and b (host) are equal bit for bit (the bytes the run writes). */
static int same(const io *a, const io *b, int B, int S)
{
    size_t n[6] = {(size_t)B * S * D * 4, (size_t)B * D * 4, (size_t)B * D * 4, (size_t)B * S * D * 4,
                   (size_t)B * 2 * S * S * 4, (size_t)S * 8};
    const void *x[6] = {a->y, a->cls, a->pooled, a->flat, a->probs, a->pos};
    const void *y[6] = {b->y, b->cls, b->pooled, b->flat, b->probs, b->pos};
    for (int i = 0; i < 6; i++)
        if (memcmp(x[i], y[i], n[i]))
            return 0;
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: graphs_check WEIGHTS.safetensors\n");
        return 2;
    }
    size_t s8[8] = {MB * MS * 8, MB * MS * 4, MB * MS * D * 4, MB * D * 4, MB * D * 4, MB * MS * D * 4,
                    MB * 2 * MS * MS * 4, MS * 8};
    memcpy(sz, s8, sizeof sz);
    const mrt_device cpu = {MRT_DEVICE_CPU, 0};
    symbolic_attention *m = NULL, *ref = NULL;
    if (symbolic_attention_create(&m, "cuda") != MRT_OK || symbolic_attention_load_weights(m, argv[1]) != MRT_OK ||
        symbolic_attention_create(&ref, "cuda") != MRT_OK || symbolic_attention_load_weights(ref, argv[1]) != MRT_OK) {
        fprintf(stderr, "graphs_check: %s\n", mrt_last_error());
        return 1;
    }
    mrt_device gpu = symbolic_attention_device(m);
    void *stream = ((mrt_model *)m)->stream[0];
    io in, r1, r2, r3, rr, dv, dv2;
    io_alloc(&in, cpu), io_alloc(&r1, cpu), io_alloc(&r2, cpu), io_alloc(&r3, cpu), io_alloc(&rr, cpu);
    io_alloc(&dv, gpu), io_alloc(&dv2, gpu);
    srand(7);
    for (int i = 0; i < MB * MS; i++) {
        in.ids[i] = rand() % 50;
        in.mask[i] = 0.6f + 0.4f * (float)rand() / (float)RAND_MAX;
    }
    io a = in, b = in, c = in, e = in; /* the inputs, each with its own outputs */
    a.y = r1.y, a.cls = r1.cls, a.pooled = r1.pooled, a.flat = r1.flat, a.probs = r1.probs, a.pos = r1.pos;
    b.y = r2.y, b.cls = r2.cls, b.pooled = r2.pooled, b.flat = r2.flat, b.probs = r2.probs, b.pos = r2.pos;
    c.y = r3.y, c.cls = r3.cls, c.pooled = r3.pooled, c.flat = r3.flat, c.probs = r3.probs, c.pos = r3.pos;
    e.y = rr.y, e.cls = rr.cls, e.pooled = rr.pooled, e.flat = rr.flat, e.probs = rr.probs, e.pos = rr.pos;

    /* eager, captured, replayed: the same bits; the replay launches one graph and nothing else */
    unsigned long long c0[5], c1[5], c2[5], c3[5];
    counters(c0);
    mrt_status st = run(m, 2, 7, &a);
    counters(c1);
    if (st == MRT_OK)
        st = run(m, 2, 7, &b);
    counters(c2);
    if (st == MRT_OK)
        st = run(m, 2, 7, &c);
    counters(c3);
    char why[512];
    snprintf(why, sizeof why, "%s; eager %llu launches + %llu library calls, capture %llu + %llu (%llu graph "
             "launches), replay %llu + %llu (%llu graph launches)", st == MRT_OK ? "runs ok" : mrt_last_error(),
             c1[0] - c0[0], c1[1] - c0[1], c2[0] - c1[0], c2[1] - c1[1], c2[4] - c1[4], c3[0] - c2[0],
             c3[1] - c2[1], c3[4] - c2[4]);
    result("replay_same_bits", st == MRT_OK && same(&r1, &r2, 2, 7) && same(&r1, &r3, 2, 7), why);
    result("replay_counts",
           st == MRT_OK && c1[0] - c0[0] > 0 && c1[4] == c0[4] && c2[4] - c1[4] == 1 && c3[0] == c2[0] &&
               c3[1] == c2[1] && c3[4] - c2[4] == 1,
           why);

    /* other sizes re-capture: the graph's run against the second model's eager one */
    int ok = 1;
    const int sizes[][2] = {{3, 5}, {1, 16}, {2, 7}, {3, 5}};
    for (int k = 0; k < 4 && ok; k++) {
        int B = sizes[k][0], S = sizes[k][1];
        ok = run(m, B, S, &b) == MRT_OK && run(ref, B, S, &e) == MRT_OK && same(&r2, &rr, B, S);
        if (B == 2 && S == 7)
            ok &= same(&r2, &r1, 2, 7); /* back at the first sizes: replayed, as the first run */
    }
    result("other_sizes_recapture", ok, ok ? "" : mrt_last_error()[0] ? mrt_last_error() : "results differ");

    /* the caller's device buffers, used in place: their pointers are the graph's, so other
     * buffers re-capture; each run is checked against the host-buffer run at those sizes */
    io_copy(&dv, gpu, &in, cpu, stream);
    io_copy(&dv2, gpu, &in, cpu, stream);
    ok = 1;
    for (int k = 0; k < 3 && ok; k++) {
        io *d = k == 1 ? &dv2 : &dv; /* dv, dv2, dv again (replayed) */
        counters(c0);
        ok = run(m, 2, 7, d) == MRT_OK;
        counters(c1);
        memset(r3.y, 0, sz[2]);
        io_copy(&r3, cpu, d, gpu, stream); /* the inputs come back too: the same bytes */
        ok &= same(&r3, &r1, 2, 7);
        if (k < 2) /* a new pointer: captured (launches counted), then launched */
            ok &= c1[0] > c0[0] && c1[4] - c0[4] == 1;
        snprintf(why, sizeof why, "device buffers, run %d: %llu launches, %llu graph launches, results %s", k,
                 c1[0] - c0[0], c1[4] - c0[4], same(&r3, &r1, 2, 7) ? "same" : "differ");
    }
    result("device_pointers_recapture", ok, why);

    /* a bad id in a replayed run: the graph's deferred check reports it at the run's end */
    a.ids[3] = 50;
    st = run(m, 2, 7, &a);
    int bad = st == MRT_ERR_INVALID_ARG && strstr(mrt_last_error(), "id 50 at position 3");
    snprintf(why, sizeof why, "status %d: %s", (int)st, mrt_last_error());
    a.ids[3] = 1;
    st = run(m, 2, 7, &a);
    result("replay_reports_bad_id", bad && st == MRT_OK, why);

    io_free(&in, cpu), io_free(&r1, cpu), io_free(&r2, cpu), io_free(&r3, cpu), io_free(&rr, cpu);
    io_free(&dv, gpu), io_free(&dv2, gpu);
    symbolic_attention_destroy(m);
    symbolic_attention_destroy(ref);
    return failed;
}
