/*
 * fuzz_model.c — libFuzzer harness for the .model front end: every input is a source file
 * that goes through the whole pipeline (parse, check, fold, place, hoist, fuse, both memory
 * plans), then every dump and the C and CUDA emitters write into a null stream. No C
 * compiler runs. Built and run by `make fuzz` (tests/fuzz/run.sh).
 *
 * A user's error (status 1: error_at, fatal) is the expected answer to most inputs: diag.c's
 * exit hook longjmps back here, and the arena and the lexer are freed as modelc's exit would.
 * An internal error (status 2: ICE, ASSERT) is a bug: the harness aborts, and libFuzzer saves
 * the input as a crash. So are sanitizer reports, hangs and running out of memory.
 * MODELC_FUZZ_VERBOSE=1 shows the compiler's messages (to reproduce one input).
 */
#include "modelc.h"

#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static jmp_buf fuzz_back;
static FILE *fuzz_null;

static void fuzz_exit_hook(int status) {
    if (status != 1) abort(); /* an internal error is a bug, never a user's mistake */
    longjmp(fuzz_back, 1);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_null = fopen("/dev/null", "w");
    if (!fuzz_null) abort();
    const char *v = getenv("MODELC_FUZZ_VERBOSE");
    diag_set_stream(v && *v == '1' ? stderr : fuzz_null);
    diag_set_exit_hook(fuzz_exit_hook);
    return 0;
}

/* The flag combinations a first byte of 0x80..0xFF selects (one bit per --no-* flag of
 * modelc; that byte is then not part of the source), so that the variants the command line
 * offers are fuzzed too. A source as written (every seed) compiles with the defaults. */
static void fuzz_options(Options *o, unsigned sel) {
    options_default(o);
    o->fuse.elementwise = !(sel & 1);
    o->fuse.epilogue = !(sel & 2);
    o->plan.inplace = !(sel & 4);
    o->plan.reorder = !(sel & 8);
    o->fold.fold_bn = !(sel & 16);
    o->fold.hoist = !(sel & 32);
    o->fold.fold_transpose = !(sel & 64);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > (1u << 20) || memchr(data, 0, size)) return 0; /* modelc refuses a NUL */
    static char *src; /* static: setjmp/longjmp leave automatic variables indeterminate */
    static Options o;
    fuzz_options(&o, data[0] >= 0x80 ? data[0] & 0x7f : 0);
    if (data[0] >= 0x80) {
        data++;
        size--;
    }
    src = malloc(size + 1);
    if (!src) return 0;
    memcpy(src, data, size);
    src[size] = 0;
    diag_warnings = 0;
    if (setjmp(fuzz_back) == 0) {
        Compiled c = {0};
        if (compile_source(&o, "fuzz.model", src, &c, fuzz_null)) {
            dump_graph(fuzz_null, c.g);
            dump_placement(fuzz_null, c.g);
            dump_fused(fuzz_null, c.g, &c.kl, &c.init);
            dump_memplan(fuzz_null, c.g, &c.kl, c.mp, c.mpc);
            dump_memplan_svg(fuzz_null, c.g, &c.kl, c.mp);
            Emit *e = emit_begin(c.g, &c.kl, &c.init, c.mp, c.mpc);
            emit_c_header(e, fuzz_null);
            emit_c_source(e, fuzz_null, "fuzz.h");
            emit_c_main(e, fuzz_null, "fuzz.h");
            emit_cuda(fuzz_null, c.g, &c.kl, &c.init, emit_prefix(e));
        }
    }
    parse_cleanup();
    arena_free_all();
    free(src);
    src = NULL;
    return 0;
}
