/*
 * fuzz_npy.c — libFuzzer harness for the .npy reader: each input is written to a file and read
 * with mrt_npy_read. An error must come with a message; a tensor read must be consistent (its
 * byte count is its element count times the dtype's size) and must survive a round trip:
 * mrt_npy_write, then mrt_npy_read again, gives the same dtype, shape and bytes. Built by
 * `make fuzz`.
 */
#include "modelrt.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fuzz_in[96], fuzz_out[96];

/* tmpfs when there is one: mrt_npy_write syncs the file it writes, a disk makes that slow */
static const char *fuzz_dir(void) { return access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp"; }

static void fuzz_unlink(void) {
    unlink(fuzz_in);
    unlink(fuzz_out);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    snprintf(fuzz_in, sizeof fuzz_in, "%s/modelc-fuzz-npy-%d.npy", fuzz_dir(), (int)getpid());
    snprintf(fuzz_out, sizeof fuzz_out, "%s/modelc-fuzz-npy-%d-out.npy", fuzz_dir(), (int)getpid());
    atexit(fuzz_unlink);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FILE *f = fopen(fuzz_in, "wb");
    if (!f) return 0;
    int ok = fwrite(data, 1, size, f) == size;
    if (fclose(f) != 0 || !ok) return 0;
    mrt_tensor t;
    memset(&t, 0, sizeof t);
    if (mrt_npy_read(fuzz_in, &t) != MRT_OK) {
        if (mrt_last_error()[0] == '\0') abort();
        return 0;
    }
    uint64_t numel = 1;
    if (t.rank < 0 || t.rank > MRT_MAX_RANK) abort();
    for (int i = 0; i < t.rank; i++)
        if (t.shape[i] < 0 || __builtin_mul_overflow(numel, (uint64_t)t.shape[i], &numel)) abort();
    uint64_t bytes;
    if (__builtin_mul_overflow(numel, (uint64_t)mrt_dtype_size(t.dtype), &bytes) || bytes != t.nbytes ||
        (t.nbytes && !t.data))
        abort();
    if (mrt_npy_write(fuzz_out, &t) != MRT_OK) abort();
    mrt_tensor u;
    memset(&u, 0, sizeof u);
    if (mrt_npy_read(fuzz_out, &u) != MRT_OK) abort();
    if (u.dtype != t.dtype || u.rank != t.rank || memcmp(u.shape, t.shape, sizeof t.shape[0] * (size_t)t.rank) ||
        u.nbytes != t.nbytes || (t.nbytes && memcmp(u.data, t.data, t.nbytes)))
        abort();
    mrt_tensor_free(&u);
    mrt_tensor_free(&t);
    return 0;
}
