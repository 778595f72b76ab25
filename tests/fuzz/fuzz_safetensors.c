/*
 * fuzz_safetensors.c — libFuzzer harness for the safetensors loader: each input is written to
 * a file and loaded with mrt_weights_load against the digits example's params (the seed corpus
 * holds its weights), with mrt_weights_load against a small set of F32/I32/I64 params (the
 * seeds tests/fuzz/seed.sh writes), and with mrt_weights_load_regions splitting that set
 * over two regions. Every answer must be MRT_OK or an error with a message; a load that
 * succeeds must have filled exactly what the params cover. Built by `make fuzz`.
 */
#include "modelrt.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fuzz_path[96];

/* tmpfs when there is one: mrt_npy_write syncs the file it writes, a disk makes that slow */
static const char *fuzz_dir(void) { return access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp"; }

static void fuzz_unlink(void) { unlink(fuzz_path); }

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    snprintf(fuzz_path, sizeof fuzz_path, "%s/modelc-fuzz-st-%d.safetensors", fuzz_dir(), (int)getpid());
    atexit(fuzz_unlink);
    return 0;
}

static int fuzz_write(const uint8_t *data, size_t size) {
    FILE *f = fopen(fuzz_path, "wb");
    if (!f) return -1;
    int ok = fwrite(data, 1, size, f) == size;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static void fuzz_check(mrt_status st) {
    if (st != MRT_OK && mrt_last_error()[0] == '\0') abort(); /* an error must say why */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (fuzz_write(data, size) != 0) return 0;
    static const mrt_param_desc digits[] = {
        {"fc1.weight", MRT_F32, 2, {128, 64}, 0, 0, 0},
        {"fc1.bias", MRT_F32, 1, {128}, 32768, 0, 0},
        {"fc2.weight", MRT_F32, 2, {10, 128}, 33280, 0, 0},
        {"fc2.bias", MRT_F32, 1, {10}, 38400, 0, 0},
    };
    static unsigned char dst[38440 + 64];
    fuzz_check(mrt_weights_load(fuzz_path, digits, 4, dst, 38440));

    /* a: f32[2,3] (24 bytes), b: i32[4] (16), c: i64[] (8), in one buffer and in two regions */
    static const mrt_param_desc small[] = {
        {"a", MRT_F32, 2, {2, 3}, 0, 0, 0},
        {"b", MRT_I32, 1, {4}, 24, 1, 0},
        {"c", MRT_I64, 0, {0}, 40, 0, 0},
    };
    unsigned char buf[48 + 16];
    memset(buf, 0xA5, sizeof buf);
    mrt_status st = mrt_weights_load(fuzz_path, small, 3, buf, 48);
    fuzz_check(st);
    for (size_t i = 48; i < sizeof buf; i++)
        if (buf[i] != 0xA5) abort(); /* wrote past dst_bytes */
    unsigned char r0[48], r1[40];
    void *const regions[2] = {r0, r1};
    const size_t region_bytes[2] = {48, 40};
    fuzz_check(mrt_weights_load_regions(fuzz_path, small, 3, regions, region_bytes, 2));
    return 0;
}
