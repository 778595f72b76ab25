/*
 * embed.c — calling a model compiled by modelc from your own C program.
 *
 *   modelc ../digits/digits.model --emit-c -o OUT      # writes OUT/digits.c and OUT/digits.h
 *   cc -O2 $(modelc --print-cflags) -IOUT embed.c OUT/digits.c $(modelc --print-libs) -o embed
 *      (or, after make install: cc embed.c OUT/digits.c $(pkg-config --cflags --libs modelrt))
 *   ./embed [WEIGHTS.safetensors TEST_X.npy TORCH_LOGITS.npy]     (defaults: ../digits/...)
 *
 * Runs the first 8 test images through the digits MLP and checks the result against the logits
 * PyTorch computed for the same images: same predicted class, |difference| <= 1e-4.
 * Exit status 0 when they agree, 1 otherwise.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "modelrt.h"
#include "digits.h"

#define N 8          /* images to run */
#define IN 64        /* 8x8 pixels */
#define CLASSES 10
#define TOL 1e-4

static void log_to_stderr(mrt_log_level level, const char *msg, void *user) {
    (void)user;
    fprintf(stderr, "embed: %s%s\n", level == MRT_LOG_WARN ? "warning: " : "", msg);
}

static int argmax(const float *row, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (row[i] > row[best]) best = i;
    return best;
}

/* Read a float32 .npy of shape [rows >= N, cols]. */
static int read_f32(const char *path, int cols, mrt_tensor *t) {
    if (mrt_npy_read(path, t) != MRT_OK) {
        fprintf(stderr, "embed: error: %s\n", mrt_last_error());
        return 0;
    }
    if (t->dtype != MRT_F32 || t->rank != 2 || t->shape[0] < N || t->shape[1] != cols) {
        fprintf(stderr, "embed: error: %s: expected f32[>=%d, %d]\n", path, N, cols);
        mrt_tensor_free(t);
        return 0;
    }
    return 1;
}

int main(int argc, char **argv) {
    const char *weights = "../digits/digits.safetensors";
    const char *x_path = "../digits/test_x.npy";
    const char *ref_path = "../digits/torch_logits.npy";
    if (argc == 4) {
        weights = argv[1];
        x_path = argv[2];
        ref_path = argv[3];
    } else if (argc != 1) {
        fprintf(stderr, "usage: %s [WEIGHTS.safetensors TEST_X.npy TORCH_LOGITS.npy]\n", argv[0]);
        return 2;
    }

    mrt_set_log_hook(log_to_stderr, NULL);   /* see which device "auto" picks */

    mrt_tensor x = {0}, ref = {0};
    if (!read_f32(x_path, IN, &x)) return 1;
    if (!read_f32(ref_path, CLASSES, &ref)) {
        mrt_tensor_free(&x);
        return 1;
    }

    int rc = 1;
    digits *m = NULL;
    float logits[N * CLASSES];
    mrt_status s;

    if ((s = digits_create(&m, "auto")) != MRT_OK) {
        fprintf(stderr, "embed: digits_create: %s: %s\n", mrt_status_name(s), mrt_last_error());
        goto out;
    }
    if ((s = digits_load_weights(m, weights)) != MRT_OK) {
        fprintf(stderr, "embed: digits_load_weights: %s: %s\n", mrt_status_name(s), mrt_last_error());
        goto out;
    }
    /* x holds all the test images; the first N rows are the first N images (C order). */
    if ((s = digits_run(m, N, (const float *)x.data, logits)) != MRT_OK) {
        fprintf(stderr, "embed: digits_run: %s: %s\n", mrt_status_name(s), mrt_last_error());
        goto out;
    }

    const float *want = (const float *)ref.data;
    double max_diff = 0;
    int agree = 0;
    printf("predicted:");
    for (int i = 0; i < N; i++) printf(" %d", argmax(logits + i * CLASSES, CLASSES));
    printf("\npytorch:  ");
    for (int i = 0; i < N; i++) printf(" %d", argmax(want + i * CLASSES, CLASSES));
    printf("\n");
    for (int i = 0; i < N; i++) {
        agree += argmax(logits + i * CLASSES, CLASSES) == argmax(want + i * CLASSES, CLASSES);
        for (int j = 0; j < CLASSES; j++) {
            double d = fabs((double)logits[i * CLASSES + j] - (double)want[i * CLASSES + j]);
            if (!(d <= max_diff)) max_diff = d;   /* NaN makes max_diff NaN, and fails below */
        }
    }
    rc = (agree == N && max_diff <= TOL) ? 0 : 1;
    printf("%s: %d/%d predictions agree with PyTorch, max |logit - torch| = %.1e (tolerance 1e-4)\n",
           rc == 0 ? "OK" : "FAIL", agree, N, max_diff);

out:
    if (m) digits_destroy(m);
    mrt_tensor_free(&x);
    mrt_tensor_free(&ref);
    return rc;
}
