/*
 * embed_pipe.c — pipelined model parallelism from C (tests/dp/pipe.py): the two-stage MLP mlp2
 * (its second half 'on cpu:1') created on the CPU, run through the runtime's mrt_pipe_* API in
 * argv[4] micro-batches; y of argv[2]'s rows written to argv[3]. Then a refused count (0), whose
 * message it prints as "error: ...".
 *
 *   embed_pipe WEIGHTS X.npy OUT.npy MICRO_BATCHES
 */
#include "mlp2.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: embed_pipe WEIGHTS X.npy OUT.npy MICRO_BATCHES\n");
        return 2;
    }
    mrt_tensor x, y = {0};
    mlp2 *m = NULL;
    mrt_pipe *p = NULL;
    /* the pipeline may be made before the weights are loaded */
    if (mrt_npy_read(argv[2], &x) != MRT_OK || mlp2_create_mapped(&m, "cpu", "") != MRT_OK ||
        mrt_pipe_create(&p, &mlp2_info, m, atoi(argv[4])) != MRT_OK || mlp2_load_weights(m, argv[1]) != MRT_OK) {
        fprintf(stderr, "embed_pipe: %s\n", mrt_last_error());
        return 1;
    }
    y.dtype = MRT_F32;
    y.rank = 2;
    y.shape[0] = x.shape[0];
    y.shape[1] = 10;
    y.nbytes = (size_t)x.shape[0] * 10 * sizeof(float);
    y.data = malloc(y.nbytes);
    int64_t dims[MRT_MAX_SYMS] = {x.shape[0], 1, 1, 1};
    const void *in[1] = {x.data};
    void *out[1] = {y.data};
    if (!y.data || mrt_pipe_run(p, dims, in, out) != MRT_OK || mrt_npy_write(argv[3], &y) != MRT_OK) {
        fprintf(stderr, "embed_pipe: %s\n", mrt_last_error());
        return 1;
    }
    printf("embed_pipe: %lld rows through %d stages in %s micro-batches, %d thread(s) per CPU stage\n",
           (long long)x.shape[0], mrt_pipe_stages(p), argv[4], mrt_pipe_cpu_threads(p));
    mrt_pipe *q = NULL;
    if (mrt_pipe_create(&q, &mlp2_info, m, 0) == MRT_OK || q) {
        fprintf(stderr, "embed_pipe: 0 micro-batches were accepted\n");
        return 1;
    }
    printf("error: %s\n", mrt_last_error());
    mrt_pipe_destroy(p);
    mlp2_destroy(m);
    mrt_tensor_free(&x);
    free(y.data);
    return 0;
}
