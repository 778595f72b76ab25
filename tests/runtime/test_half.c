/*
 * test_half.c — the f16 / bf16 conversions of mrt_kernels.h, for tests/runtime/half_check.py,
 * which holds the reference (NumPy's float16; round to nearest even of the top 16 bits for
 * bf16, computed another way) and the comparison. This program only converts:
 *
 *   test_half TABLES OUT     every 16-bit pattern to float: 65536 f16 then 65536 bf16 results
 *                            (f32 bits, uint32 little-endian) into OUT
 *   test_half FLOATS IN OUT  each f32 (uint32 bits) of IN to f16, then each to bf16 (uint16),
 *                            then each integer of IN (read as int32) through mrt_i64_to_f32_odd
 *                            and rounded to f16 and to bf16 (uint16), into OUT
 */
#include <stdio.h>
#include <stdlib.h>

#include "mrt_kernels.h"

static int fail(const char *what, const char *path) {
    fprintf(stderr, "test_half: %s %s\n", what, path);
    return 1;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "TABLES")) {
        FILE *o = fopen(argv[2], "wb");
        if (!o) return fail("cannot write", argv[2]);
        for (int pass = 0; pass < 2; pass++)
            for (uint32_t h = 0; h < 65536; h++) {
                uint32_t b = mrt_f32_bits(pass ? mrt_bf16_to_f32((uint16_t)h) : mrt_f16_to_f32((uint16_t)h));
                fwrite(&b, 4, 1, o);
            }
        return fclose(o) ? fail("cannot write", argv[2]) : 0;
    }
    if (argc == 4 && !strcmp(argv[1], "FLOATS")) {
        FILE *in = fopen(argv[2], "rb"), *o = fopen(argv[3], "wb");
        if (!in) return fail("cannot read", argv[2]);
        if (!o) return fail("cannot write", argv[3]);
        fseek(in, 0, SEEK_END);
        long n = ftell(in) / 4;
        fseek(in, 0, SEEK_SET);
        uint32_t *u = malloc((size_t)n * 4);
        if (!u || fread(u, 4, (size_t)n, in) != (size_t)n) return fail("cannot read", argv[2]);
        for (int pass = 0; pass < 4; pass++)
            for (long i = 0; i < n; i++) {
                float f = mrt_f32_from_bits(u[i]);
                int64_t v = (int32_t)u[i];
                uint16_t h = pass == 0 ? mrt_f16_from_f32(f)
                             : pass == 1 ? mrt_bf16_from_f32(f)
                             : pass == 2 ? mrt_f16_from_f32(mrt_i64_to_f32_odd(v))
                                         : mrt_bf16_from_f32(mrt_i64_to_f32_odd(v));
                fwrite(&h, 2, 1, o);
            }
        free(u);
        fclose(in);
        return fclose(o) ? fail("cannot write", argv[3]) : 0;
    }
    fprintf(stderr, "usage: test_half TABLES OUT | test_half FLOATS IN OUT\n");
    return 2;
}
