/*
 * b12_check.c — field case B12's companion on the simulated GPU: the kernel modelc generates for
 * tests/cudasim/b12_add.model, y = x + 1 over n = 2^31 + 64 f16 elements (4 GiB each), run on the
 * caller's device buffers with only some blocks of its grid (tests/cudasim/run.sh sets
 * CUDASIM_SAMPLE_BLOCKS=b12_add_k0_g:0,-1 and CUDASIM_FILL=none, so the rest of the 8 GiB is never
 * touched). The grid is capped at 65536 blocks of 256 threads, a stride of 2^24 elements: block 0
 * ends its grid-stride loop on elements 2^31 .. 2^31+63 (past 2^31: an int32 index wraps there),
 * the last block on 2^31-256 .. 2^31-1. x is set at those elements and y poisoned with NaN there;
 * both ranges and block 0's first elements (x never written: zero pages, so y = 1) must come back
 * as x + 1. Prints "PASS: cudasim/b12_add_2g_sampled ..." or "FAIL: ..."; exit 1 on a failure.
 *
 *   b12_check       (CUDASIM_DEVICES=1:20480:9.0: the model's 8 GiB staging block and x and y)
 */
#include "b12_add.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrt_kernels.h"

#define N ((int64_t)2147483712) /* 2^31 + 64 */

static int fail(const char *why)
{
    printf("FAIL: cudasim/b12_add_2g_sampled: %s\n", why);
    return 1;
}

int main(void)
{
    char why[256];
    if (dlsym(RTLD_DEFAULT, "cudasim_last_report")) { /* the simulator: the whole grid would take hours */
        const char *s = getenv("CUDASIM_SAMPLE_BLOCKS"), *f = getenv("CUDASIM_FILL");
        if (!s || !strstr(s, "b12_add_k0_g") || !f || strcmp(f, "none") != 0)
            return fail("run with CUDASIM_FILL=none and CUDASIM_SAMPLE_BLOCKS=b12_add_k0_g:0,-1");
    }
    b12_add *m = NULL;
    if (b12_add_create(&m, "cuda") != MRT_OK || b12_add_load_weights(m, NULL) != MRT_OK)
        return fail(mrt_last_error());
    const mrt_device gpu = b12_add_device(m), cpu = {MRT_DEVICE_CPU, 0};
    uint16_t *x = mrt_alloc(gpu, (size_t)N * 2), *y = x ? mrt_alloc(gpu, (size_t)N * 2) : NULL;
    if (!y)
        return fail(mrt_last_error());
    /* the checked ranges: block 0's first and last elements, the last block's last ones */
    const int64_t at[3] = {0, ((int64_t)1 << 31) - 256, (int64_t)1 << 31}, len[3] = {256, 256, 64};
    uint16_t in[256], nan[256], out[256];
    for (int i = 0; i < 256; i++) {
        in[i] = mrt_f16_from_f32((float)(i % 97) - 40.0f);
        nan[i] = 0x7e00;
    }
    mrt_status st = MRT_OK;
    for (int r = 0; r < 3 && st == MRT_OK; r++) {
        if (r > 0)
            st = mrt_memcpy(gpu, x + at[r], cpu, in, (size_t)len[r] * 2, NULL);
        if (st == MRT_OK)
            st = mrt_memcpy(gpu, y + at[r], cpu, nan, (size_t)len[r] * 2, NULL);
    }
    if (st == MRT_OK)
        st = mrt_stream_sync(gpu, NULL, "b12_check");
    if (st == MRT_OK)
        st = b12_add_run(m, 1, x, y);
    if (st != MRT_OK)
        return fail(mrt_last_error());
    for (int r = 0; r < 3; r++) {
        if (mrt_memcpy(cpu, out, gpu, y + at[r], (size_t)len[r] * 2, NULL) != MRT_OK ||
            mrt_stream_sync(gpu, NULL, "b12_check") != MRT_OK)
            return fail(mrt_last_error());
        for (int i = 0; i < len[r]; i++) {
            const float want = (r == 0 ? 0.0f : mrt_f16_to_f32(in[i])) + 1.0f;
            if (mrt_f16_to_f32(out[i]) != want) { /* exact: small integers in f16 */
                snprintf(why, sizeof why, "y[%lld] = %g, expected %g", (long long)(at[r] + i),
                         (double)mrt_f16_to_f32(out[i]), (double)want);
                return fail(why);
            }
        }
    }
    printf("PASS: cudasim/b12_add_2g_sampled (y = x + 1 over 2^31+64 f16: elements 0..255, "
           "2^31-256..2^31+63 exact)\n");
    mrt_free(gpu, x), mrt_free(gpu, y);
    b12_add_destroy(m);
    return 0;
}
