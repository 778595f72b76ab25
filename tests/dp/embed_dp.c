/*
 * embed_dp.c — data-parallel inference from C (tests/dp/run.py): the digits model's replicas on
 * the devices of argv[2] through the runtime's mrt_dp_* API, the logits of argv[3]'s images
 * written to argv[4].
 *
 *   embed_dp WEIGHTS DEVICES X.npy OUT.npy
 */
#include "digits.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: embed_dp WEIGHTS DEVICES X.npy OUT.npy\n");
        return 2;
    }
    mrt_tensor x, y = {0};
    mrt_dp *dp = NULL;
    if (mrt_npy_read(argv[3], &x) != MRT_OK || mrt_dp_create(&dp, &digits_info, argv[2]) != MRT_OK ||
        mrt_dp_load_weights(dp, argv[1]) != MRT_OK) {
        fprintf(stderr, "embed_dp: %s\n", mrt_last_error());
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
    if (!y.data || mrt_dp_run(dp, dims, in, out) != MRT_OK || mrt_npy_write(argv[4], &y) != MRT_OK) {
        fprintf(stderr, "embed_dp: %s\n", mrt_last_error());
        return 1;
    }
    printf("embed_dp: %lld images on %d replicas\n", (long long)x.shape[0], mrt_dp_count(dp));
    mrt_dp_destroy(dp);
    mrt_tensor_free(&x);
    free(y.data);
    return 0;
}
