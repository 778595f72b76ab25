/*
 * embed_packed.c — mrt_model_save_weights on inference models whose GEMMs pack their weights in
 * place (MRT_MATMUL_PACK, rt_matmul.c), run by tests/train/run.py (train/embed_packed):
 *
 *   embed_packed WEIGHTS OUT
 *
 * Model lt (tests/train/packed_lt.model) packs only a load-time value (x @ (s * 2), s also read
 * by x @ s): its params stay plain, so save_weights must succeed (run.py then compares OUT with
 * WEIGHTS byte for byte); model pp (packed_pp.model) packs its param s: save_weights must refuse
 * with a message that says so, unless MODELRT_PACK_WEIGHTS=0 (then it must succeed). Prints one
 * line per model; exits 1 on an unexpected result.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "packed_lt.h"
#include "packed_pp.h"

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: embed_packed WEIGHTS OUT\n");
        return 2;
    }
    int bad = 0;
    packed_lt *a;
    if (packed_lt_create(&a, "cpu") != MRT_OK || packed_lt_load_weights(a, argv[1]) != MRT_OK) {
        printf("lt: load failed: %s\n", mrt_last_error());
        return 1;
    }
    if (mrt_model_save_weights((mrt_model *)a, argv[2], 0) != MRT_OK)
        printf("lt: save refused: %s\n", mrt_last_error()), bad = 1;
    else
        printf("lt: saved (only a load-time value is packed)\n");
    packed_lt_destroy(a);

    packed_pp *b;
    char out2[4096];
    snprintf(out2, sizeof out2, "%s.pp", argv[2]);
    if (packed_pp_create(&b, "cpu") != MRT_OK || packed_pp_load_weights(b, argv[1]) != MRT_OK) {
        printf("pp: load failed: %s\n", mrt_last_error());
        return 1;
    }
    const char *e = getenv("MODELRT_PACK_WEIGHTS");
    int off = e && !strcmp(e, "0");
    mrt_status st = mrt_model_save_weights((mrt_model *)b, out2, 0);
    if (off ? st != MRT_OK : st == MRT_OK || !strstr(mrt_last_error(), "packed in place"))
        printf("pp: unexpected: save %s (%s), MODELRT_PACK_WEIGHTS=%s\n", st == MRT_OK ? "succeeded" : "refused",
               st == MRT_OK ? "-" : mrt_last_error(), e ? e : "(unset)"),
            bad = 1;
    else
        printf("pp: save %s%s%s\n", st == MRT_OK ? "succeeded" : "refused: ", st == MRT_OK ? "" : mrt_last_error(),
               off ? " (MODELRT_PACK_WEIGHTS=0)" : "");
    packed_pp_destroy(b);
    return bad;
}
