/*
 * run_aba.c — runs one model A, B, A in one process: the in-process run-twice check of
 * tests/numeric/run.py (field case B05).
 *
 * Linked with one model emitted by `modelc --emit-c` (its descriptor named by -DMODEL_INFO=...)
 * and libmodelrt.a. Creates the model once, then runs inputs A, then B, then A again on the
 * same model object (same arena), writing each run's outputs; the weights are loaded again
 * between B and the second A (init() runs again: GEMMs that pack their weights in place,
 * MRT_MATMUL_PACK, must pack the newly loaded plain weights, or A2 differs from A1). Before every run each output
 * buffer is filled with a different garbage pattern (NaN bits, 0x7f.., zeros), so an element
 * a run forgets to write shows up as a difference between the two A runs.
 *
 *   run_aba WEIGHTS|- DEVICE|- NA SIZES_A A_1.npy .. A_NA SIZES_B B_1.npy .. B_NA OUTPREFIX
 *
 * SIZES is the batch, or the sizes of the model's symbolic dimensions in order, comma-separated
 * ("2,7" for [batch, seq]).
 *
 * writes OUTPREFIX_A1_<i>.npy, OUTPREFIX_B_<i>.npy, OUTPREFIX_A2_<i>.npy for output i
 * (declaration order). Exit 0 on success, 1 with a message on stderr otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "modelrt.h"

extern const mrt_model_info MODEL_INFO;

static int fail(const char *what) {
    fprintf(stderr, "run_aba: error: %s: %s\n", what, mrt_last_error());
    return 1;
}

/* Elements of io descriptor `d` at the sizes dims; fills shape[] with the concrete dims. */
static size_t io_numel(const mrt_io_desc *d, const int64_t *dims, int64_t *shape) {
    size_t n = 1;
    for (int i = 0; i < d->rank; i++) {
        shape[i] = d->shape[i];
        for (int s = 0; s < MRT_MAX_SYMS; s++)
            for (int j = 0; j < d->sym[i][s]; j++) shape[i] *= dims[s];
        n *= (size_t)shape[i];
    }
    return n;
}

/* "2,7" -> dims {2, 7, 1, 1} */
static void parse_sizes(const char *s, int64_t *dims) {
    for (int k = 0; k < MRT_MAX_SYMS; k++) dims[k] = 1;
    for (int k = 0; k < MRT_MAX_SYMS && *s; k++) {
        char *end;
        dims[k] = strtoll(s, &end, 10);
        s = *end == ',' ? end + 1 : end;
    }
}

/* Run once on the npy files in[0..n_inputs), write outputs as PREFIX_TAG_i.npy. */
static int run_once(void *model, const int64_t *dims, char **in, const char *prefix, const char *tag,
                    int fill) {
    const mrt_model_info *info = &MODEL_INFO;
    mrt_tensor *ti = calloc((size_t)info->n_inputs + 1, sizeof *ti);
    const void **ip = calloc((size_t)info->n_inputs + 1, sizeof *ip);
    mrt_tensor *to = calloc((size_t)info->n_outputs + 1, sizeof *to);
    void **op = calloc((size_t)info->n_outputs + 1, sizeof *op);
    int rc = 1;
    for (int i = 0; i < info->n_inputs; i++) {
        if (mrt_npy_read(in[i], &ti[i]) != MRT_OK) {
            fail(in[i]);
            goto out;
        }
        ip[i] = ti[i].data;
    }
    for (int i = 0; i < info->n_outputs; i++) {
        const mrt_io_desc *d = &info->outputs[i];
        to[i].dtype = d->dtype;
        to[i].rank = d->rank;
        size_t n = io_numel(d, dims, to[i].shape);
        to[i].nbytes = n * mrt_dtype_size(d->dtype);
        to[i].data = malloc(to[i].nbytes ? to[i].nbytes : 1);
        memset(to[i].data, fill, to[i].nbytes);
        op[i] = to[i].data;
    }
    if (info->run(model, dims, ip, op) != MRT_OK) {
        fail("run");
        goto out;
    }
    for (int i = 0; i < info->n_outputs; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s_%s_%d.npy", prefix, tag, i);
        if (mrt_npy_write(path, &to[i]) != MRT_OK) {
            fail(path);
            goto out;
        }
    }
    rc = 0;
out:
    for (int i = 0; i < info->n_inputs; i++)
        mrt_tensor_free(&ti[i]);
    for (int i = 0; i < info->n_outputs; i++)
        free(to[i].data);
    free(ti);
    free(ip);
    free(to);
    free(op);
    return rc;
}

int main(int argc, char **argv) {
    const mrt_model_info *info = &MODEL_INFO;
    if (argc < 6) {
        fprintf(stderr, "usage: run_aba WEIGHTS|- DEVICE|- NA BATCH_A A.. BATCH_B B.. OUTPREFIX\n");
        return 2;
    }
    int na = atoi(argv[3]);
    if (na != info->n_inputs || argc != 4 + 2 * (na + 1) + 1) {
        fprintf(stderr, "run_aba: expected %d inputs per set\n", info->n_inputs);
        return 2;
    }
    int64_t batch_a[MRT_MAX_SYMS], batch_b[MRT_MAX_SYMS];
    parse_sizes(argv[4], batch_a);
    char **in_a = &argv[5];
    parse_sizes(argv[5 + na], batch_b);
    char **in_b = &argv[6 + na];
    const char *prefix = argv[argc - 1];
    const char *device = strcmp(argv[2], "-") == 0 ? NULL : argv[2];
    void *model = NULL;
    if (info->create(&model, device) != MRT_OK)
        return fail("create");
    int rc = 1;
    const char *weights = strcmp(argv[1], "-") == 0 ? NULL : argv[1];
    if (info->load_weights(model, weights) != MRT_OK) {
        fail(weights ? weights : "load_weights(NULL)");
        goto out;
    }
    if (run_once(model, batch_a, in_a, prefix, "A1", 0xff) ||
        run_once(model, batch_b, in_b, prefix, "B", 0x7f))
        goto out;
    if (info->load_weights(model, weights) != MRT_OK) {
        fail(weights ? weights : "load_weights(NULL), again");
        goto out;
    }
    if (run_once(model, batch_a, in_a, prefix, "A2", 0x00))
        goto out;
    rc = 0;
out:
    info->destroy(model);
    return rc;
}
