/*
 * embed_train.c — the training API of a generated model used from C (tests/train/run.py,
 * train/embed): mlp_adamw's NAME_train_step over the batches of the data files in file order,
 * then NAME_save_weights and NAME_save_state; a second model resumes from those files with
 * NAME_load_state (and a third, never loaded, whose save_weights, save_state and load_state
 * fail), on $MODELRT_DEVICE (the test sets cpu). run.py compares the weights with
 * `PROG train`'s, which must be identical.
 *
 *   embed_train INIT.safetensors X.npy LABELS.npy STEPS OUT.safetensors STATE.safetensors
 */
#include "mlp_adamw.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what)
{
    fprintf(stderr, "embed_train: %s: %s\n", what, mrt_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: embed_train INIT X.npy LABELS.npy STEPS OUT STATE\n");
        return 2;
    }
    mrt_tensor x, y;
    if (mrt_npy_read(argv[2], &x) != MRT_OK || mrt_npy_read(argv[3], &y) != MRT_OK)
        return fail("reading the data");
    int steps = atoi(argv[4]), n = (int)x.shape[0], b = 8;
    mlp_adamw *m = NULL;
    if (mlp_adamw_create(&m, NULL) != MRT_OK || mlp_adamw_load_weights(m, argv[1]) != MRT_OK)
        return fail("create or load_weights");
    for (int s = 0, b0 = 0; s < steps; s++, b0 = b0 + b >= n ? 0 : b0 + b) {
        int nb = n - b0 < b ? n - b0 : b;
        float loss = 0;
        if (mlp_adamw_train_step(m, nb, (const float *)x.data + (size_t)b0 * 8, (const int64_t *)y.data + b0, &loss) !=
            MRT_OK)
            return fail("train_step");
        printf("step %d loss %.9g\n", s + 1, loss);
    }
    if (mlp_adamw_save_weights(m, argv[5]) != MRT_OK || mlp_adamw_save_state(m, argv[6]) != MRT_OK)
        return fail("save_weights or save_state");
    /* a model whose weights were never loaded: saving it, or loading its state, is an error
     * (its regions hold whatever the allocator left), and no file is written */
    mlp_adamw *u = NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s.unloaded", argv[5]);
    if (mlp_adamw_create(&u, NULL) != MRT_OK)
        return fail("create");
    if (mlp_adamw_save_weights(u, path) == MRT_OK || !strstr(mrt_last_error(), "weights are not loaded")) {
        fprintf(stderr, "embed_train: save_weights before load_weights: %s\n", mrt_last_error());
        return 1;
    }
    printf("save_weights before load_weights: %s\n", mrt_last_error());
    if (mlp_adamw_save_state(u, path) == MRT_OK || !strstr(mrt_last_error(), "weights are not loaded")) {
        fprintf(stderr, "embed_train: save_state before load_weights: %s\n", mrt_last_error());
        return 1;
    }
    printf("save_state before load_weights: %s\n", mrt_last_error());
    if (mlp_adamw_load_state(u, argv[6]) == MRT_OK || !strstr(mrt_last_error(), "weights are not loaded")) {
        fprintf(stderr, "embed_train: load_state before load_weights: %s\n", mrt_last_error());
        return 1;
    }
    printf("load_state before load_weights: %s\n", mrt_last_error());
    if (fopen(path, "rb")) {
        fprintf(stderr, "embed_train: %s was written\n", path);
        return 1;
    }
    mlp_adamw_destroy(u);
    /* a second model resumes from the files: its state and step are the first one's */
    mlp_adamw *r = NULL;
    if (mlp_adamw_create(&r, NULL) != MRT_OK || mlp_adamw_load_weights(r, argv[5]) != MRT_OK ||
        mlp_adamw_load_state(r, argv[6]) != MRT_OK)
        return fail("resume");
    if (r->step != m->step) {
        fprintf(stderr, "embed_train: resumed at step %lld, expected %lld\n", (long long)r->step, (long long)m->step);
        return 1;
    }
    if (mlp_adamw_load_state(r, argv[5]) == MRT_OK) {
        fprintf(stderr, "embed_train: load_state accepted a weights file\n");
        return 1;
    }
    printf("load_state of the weights file: %s\n", mrt_last_error());
    mlp_adamw_destroy(m);
    mlp_adamw_destroy(r);
    mrt_tensor_free(&x);
    mrt_tensor_free(&y);
    return 0;
}
