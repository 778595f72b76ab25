/*
 * main.c — the modelc driver, in three parts: the command line (parse_args), the pass pipeline
 * as plain calls (compile), and the files: the emitters write into memory streams and only this
 * file writes them out (atomically) and runs the C compiler on them (build_executable).
 *
 *   parse_program -> build_graph -> fold_graph -> place_graph -> hoist_graph -> fuse_graph
 *   -> plan_memory (CPU and CUDA plans) -> emit_c_* / emit_cuda -> $CC
 *
 * --dump=WHAT prints the named phase's text form to stdout and stops; nothing is written.
 */
#include "modelc.h"
#include "rt_path.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef MODELC_LINK_LIBS
#define MODELC_LINK_LIBS "-lcjson -lopenblas -lm -lpthread"
#endif
#ifndef MODELC_EXTRA_CFLAGS
#define MODELC_EXTRA_CFLAGS ""
#endif
#ifndef MODELC_NVCC
#define MODELC_NVCC "" /* nvcc, when the runtime was built with CUDA */
#endif
#ifndef MODELC_CUDA_CFLAGS
#define MODELC_CUDA_CFLAGS ""
#endif
/* Hopper and Ampere machine code, plus PTX for newer GPUs; $MODELC_GENCODE replaces it (one
 * architecture compiles in about half the time: tools/gpu_check.py). */
#define MODELC_GENCODE "-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"
#define MODELC_VERSION "0.1.0"
/* nvcc's flags for the generated .cu besides the targets. -fmad=false: nvcc contracts a*b + c
 * into one fused multiply-add by default, which rounds once where the CPU path (the same
 * expression code, compiled with -ffp-contract=off) rounds twice, so a kernel's last bits
 * differed between the devices (arange's start + i*step: 1.9e-16 for 0 on an H200). Only the
 * fused elementwise and reduction kernels see it; the GEMMs are cuBLAS's. */
#define MODELC_NVCC_OPT "-O3 -fmad=false"

static void usage(FILE *f) {
    fprintf(f,
            "usage: modelc FILE.model [options]\n"
            "\n"
            "Compile a .model file to an executable (default) or to C source for embedding.\n"
            "\n"
            "options:\n"
            "  -o PATH            the executable to write (default: the model file's name without\n"
            "                     .model); with --emit-c, the directory for NAME.c, NAME.h and NAME.cu\n"
            "  --emit-c           write C source and header instead of an executable\n"
            "  --train            build the training step (the model's target, loss and optimizer statements):\n"
            "                     PROG train --data x=X.npy --data labels=Y.npy ... (docs/language.md, Training)\n"
            "  --max-batch N      the largest batch the compiled model accepts (default 64): the bound of\n"
            "                     its first symbolic dimension\n"
            "  --max-dim NAME=N[,NAME=N...]\n"
            "                     the bound of each other symbolic dimension (input ids: i64[batch, seq]\n"
            "                     needs --max-dim seq=512); the memory plan holds at the bounds\n"
            "                     (--max-dim batch=N is --max-batch N for a first symbol named batch)\n"
            "  --dump=WHAT        print a phase to stdout and stop: ast, graph, placement, fused, memplan,\n"
            "                     memplan-svg (the arena over time as an SVG picture)\n"
            "  --no-fuse          do not fuse elementwise chains (one kernel per op)\n"
            "  --no-epilogue      do not fold elementwise consumers into GEMM epilogues\n"
            "  --no-fuse-attention  keep attention's matmul, softmax and matmul as separate kernels\n"
            "  --no-blocked-conv  on the CPU, run every conv2d as im2col + GEMM on NCHW tensors instead of\n"
            "                     oneDNN's convolution and max pooling in its blocked layout (nChw16c) through\n"
            "                     the convolutional part of an inference graph (the default when modelc is\n"
            "                     built with oneDNN; make DNNL=0 builds without it, and without this)\n"
            "  --no-winograd      in that layout, run 3x3 stride-1 convolutions with oneDNN's direct algorithm\n"
            "                     instead of its Winograd one (faster; a larger rounding error, still f32)\n"
            "  --no-nhwc          in that layout, keep every value in nChw16c (by default the deep convs that\n"
            "                     are not Winograd, at most 14x14 outputs, compute in nhwc: oneDNN's brgconv)\n"
            "  --precision P      f32 (default) or bf16: with bf16 the CPU's oneDNN convolutions (that\n"
            "                     layout) and GEMMs against constant weights take bf16 weights (converted\n"
            "                     at load) and bf16 sources, and accumulate in f32; every other kernel,\n"
            "                     and a GPU, stays f32; a CPU without avx512_bf16 runs f32 and says so\n"
            "                     (inference builds; needs oneDNN)\n"
            "  --no-inplace       do not let kernels write over a dying operand\n"
            "  --no-reorder       keep the kernels in source order (no memory-aware schedule)\n"
            "  --no-fold-bn       do not fold batch_norm into the preceding conv2d / linear\n"
            "  --no-hoist         recompute param-only values on every run instead of once at load\n"
            "  --no-fold-transpose  copy a transposed matmul operand instead of using the GEMM's flag\n"
            "  --no-fold-silu     keep mul(x, sigmoid(x)) as two ops instead of silu(x)\n"
            "  --keep-c           keep the generated C next to the executable (PATH.c, PATH.h, PATH_main.c,\n"
            "                     and PATH.cu with CUDA)\n"
            "  --no-cuda          build a CPU-only executable even when CUDA is available (CUDA is\n"
            "                     available when nvcc was found as modelc itself was built)\n"
            "  --list-ops         print the op table (the language's functions, the IR's operations), and exit\n"
            "  --print-cflags     print the flags to compile generated C against the runtime, and exit\n"
            "  --print-libs       print the flags to link a program with the runtime, and exit\n"
            "  --print-nvcc-flags print nvcc's flags for a generated .cu (with MODELC_GENCODE's targets), and exit\n"
            "  -O0 | -O1 | -O2 | -O3   optimization level passed to the C compiler (default -O2)\n"
            "  -h, --help         show this help\n"
            "  --version          print the version\n"
            "\n"
            "environment: CC (the C compiler, default cc), MODELC_CFLAGS (extra flags for it),\n"
            "             MODELC_HOME (where include/modelc and lib/libmodelrt.a are; default: next to\n"
            "             this executable), MODELC_GENCODE (nvcc's target flags for the generated .cu,\n"
            "             e.g. -arch=native or '-gencode arch=compute_90,code=sm_90'; default: sm_80,\n"
            "             sm_90 and compute_90 PTX)\n");
}

/* The file that writing `path` replaces, by the runtime's policy (rt_path.h): the path, or the
 * regular file a symlink names (the link stays); fatal for a FIFO, device, socket, directory or
 * dangling symlink, which are never replaced by a regular file. `what` names the file. */
static char *output_target(const char *path, const char *what) {
    char why[RT_QUOTE_MAX + 128];
    char *target = rt_output_target(path, why, sizeof why);
    if (!target)
        fatal("cannot write %s '%s': %s; only a regular file (or a symlink to one) is replaced", what, path, why);
    return target;
}

/* Write `text` to `path` atomically: a temporary file beside the file it replaces
 * (output_target), renamed over it; fatal on failure, leaving nothing behind. */
static void write_file_atomic(const char *path, const char *text, size_t len) {
    char *target = output_target(path, "the file");
    char *tmp = xprintf("%s.tmp.XXXXXX", target);
    int fd = mkstemp(tmp);
    if (fd < 0) fatal("cannot write '%s': %s", path, strerror(errno));
    FILE *f = fdopen(fd, "w");
    if (!f || fwrite(text, 1, len, f) != len || fclose(f) != 0) {
        unlink(tmp);
        fatal("cannot write '%s': %s", path, strerror(errno));
    }
    chmod(tmp, 0644);
    if (rename(tmp, target) != 0) {
        unlink(tmp);
        fatal("cannot write '%s': %s", path, strerror(errno));
    }
    free(target);
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) fatal("cannot open '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) fatal("'%s' is not a regular file", path);
    if (sb.st_size > (64 << 20)) fatal("'%s' is %lld bytes; a .model file may be at most 64 MiB", path, (long long)sb.st_size);
    char *buf = xalloc((size_t)sb.st_size + 1);
    size_t n = fread(buf, 1, (size_t)sb.st_size, f);
    fclose(f);
    if (memchr(buf, 0, n)) fatal("'%s' contains a NUL byte; is it a .model text file?", path);
    buf[n] = 0;
    *len = n;
    return buf;
}

/* Directory holding include/modelc and lib/libmodelrt.a. */
static char *runtime_home(void) {
    const char *env = getenv("MODELC_HOME");
    if (env && *env) return xstrdup(env);
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) fatal("cannot locate the modelc executable; set MODELC_HOME");
    exe[n] = 0;
    char *dir = dirname(exe);   /* .../bin */
    return xprintf("%s/..", dir);
}

/* Split a space-separated flag string into argv entries. */
static void split_flags(const char *s, char ***argv, int *argc) {
    char *copy = xstrdup(s);
    for (char *tok = strtok(copy, " \t\n"); tok; tok = strtok(NULL, " \t\n")) {
        *argv = xrealloc_array(*argv, *argc, *argc + 2, sizeof(char *));
        (*argv)[(*argc)++] = tok;
    }
}

static void add_arg(char ***argv, int *argc, const char *a) {
    *argv = xrealloc_array(*argv, *argc, *argc + 2, sizeof(char *));
    (*argv)[(*argc)++] = (char *)a;
}

static int run_cc(char **argv) {
    pid_t pid = fork();
    if (pid < 0) fatal("cannot start the C compiler: %s", strerror(errno));
    if (pid == 0) {
        execvp(argv[0], argv);
        fprintf(stderr, "modelc: error: cannot run the C compiler '%s': %s (set CC)\n", argv[0], strerror(errno));
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) fatal("waiting for the C compiler: %s", strerror(errno));
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static bool is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* ---------------------------------------------------------------- the command line */

/* MODELC_DNNL: 1 when the runtime modelc links programs with has oneDNN (the Makefile's DNNL),
 * which the blocked convolution layout needs; its default follows it. */
#ifndef MODELC_DNNL
#define MODELC_DNNL 0
#endif

void options_default(Options *o) {
    *o = (Options){.olevel = "-O2", .max_batch = 64, .fuse = {.elementwise = true, .epilogue = true, .blocked = MODELC_DNNL, .winograd = true, .attention = true, .nhwc = true},
                   .plan = {.inplace = true, .align = 64, .reorder = true},
                   .fold = {.fold_bn = true, .hoist = true, .fold_transpose = true, .fold_silu = true}};
}

static void parse_args(int argc, char **argv, Options *o) {
    options_default(o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "--version")) {
            printf("modelc %s\n", MODELC_VERSION);
            exit(0);
        } else if (!strcmp(a, "--list-ops")) {
            list_ops(stdout);
            exit(0);
        } else if (!strcmp(a, "--print-cflags")) {
            printf("-I%s/include/modelc %s\n", runtime_home(), MODELC_EXTRA_CFLAGS);
            exit(0);
        } else if (!strcmp(a, "--print-nvcc-flags")) {
            const char *gencode = getenv("MODELC_GENCODE");
            printf("%s %s -I%s/include/modelc\n", MODELC_NVCC_OPT, gencode && *gencode ? gencode : MODELC_GENCODE,
                   runtime_home());
            exit(0);
        } else if (!strcmp(a, "--print-libs")) {
            printf("%s/lib/libmodelrt.a %s\n", runtime_home(), MODELC_LINK_LIBS);
            exit(0);
        } else if (!strcmp(a, "-o")) {
            if (++i >= argc) fatal("'-o' needs a path");
            o->out = argv[i];
        } else if (!strcmp(a, "--train")) {
            o->dims.train = true;
        } else if (!strcmp(a, "--emit-c")) {
            o->emit_only = true;
        } else if (!strcmp(a, "--keep-c")) {
            o->keep = true;
        } else if (!strcmp(a, "--no-cuda")) {
            o->no_cuda = true;
        } else if (!strcmp(a, "--max-batch") || !strncmp(a, "--max-batch=", 12)) {
            const char *v = a[11] == '=' ? a + 12 : (++i < argc ? argv[i] : NULL);
            if (!v) fatal("'--max-batch' needs a number");
            char *end;
            errno = 0;
            long n = strtol(v, &end, 10);
            if (*end || errno || n < 1 || n > (1 << 24)) fatal("--max-batch must be an integer in 1..16777216, got '%s'", v);
            o->max_batch = (int)n;
        } else if (!strcmp(a, "--max-dim") || !strncmp(a, "--max-dim=", 10)) {
            const char *v = a[9] == '=' ? a + 10 : (++i < argc ? argv[i] : NULL);
            if (!v) fatal("'--max-dim' needs NAME=N, e.g. --max-dim seq=512");
            char *list = xstrdup(v), *save = NULL;
            for (char *item = strtok_r(list, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
                char *eq = strchr(item, '=');
                if (!eq || eq == item) fatal("--max-dim takes NAME=N items, e.g. seq=512; got '%s'", item);
                *eq = 0;
                char *end;
                errno = 0;
                long long n = strtoll(eq + 1, &end, 10);
                if (!eq[1] || *end || errno || n < 1 || n > (1 << 24))
                    fatal("--max-dim %s: the bound must be an integer in 1..16777216, got '%s'", item, eq + 1);
                for (int k = 0; k < o->dims.n; k++)
                    if (!strcmp(o->dims.names[k], item)) fatal("--max-dim %s is given twice", item);
                if (o->dims.n == MAX_SYMS * 2) fatal("--max-dim: at most %d names", MAX_SYMS * 2);
                o->dims.names[o->dims.n] = xstrdup(item);
                o->dims.max[o->dims.n++] = n;
            }
        } else if (!strncmp(a, "--dump=", 7)) {
            o->dump = a + 7;
            if (strcmp(o->dump, "ast") && strcmp(o->dump, "graph") && strcmp(o->dump, "fused") && strcmp(o->dump, "memplan") &&
                strcmp(o->dump, "memplan-svg") && strcmp(o->dump, "placement") && strcmp(o->dump, "grad"))
                fatal("unknown dump '%s' (expected ast, graph, grad, placement, fused, memplan or memplan-svg)", o->dump);
        } else if (!strcmp(a, "--no-fuse")) {
            o->fuse.elementwise = false;
        } else if (!strcmp(a, "--no-epilogue")) {
            o->fuse.epilogue = false;
        } else if (!strcmp(a, "--no-fuse-attention")) {
            o->fuse.attention = false;
        } else if (!strcmp(a, "--no-blocked-conv")) {
            o->fuse.blocked = false;
        } else if (!strcmp(a, "--no-nhwc")) {
            o->fuse.nhwc = false;
        } else if (!strcmp(a, "--no-winograd")) {
            o->fuse.winograd = false;
        } else if (!strcmp(a, "--precision") || !strncmp(a, "--precision=", 12)) {
            const char *v = a[11] == '=' ? a + 12 : (++i < argc ? argv[i] : NULL);
            if (!v) fatal("'--precision' needs a value: f32 or bf16");
            if (!strcmp(v, "f32")) o->bf16 = false;
            else if (!strcmp(v, "bf16")) o->bf16 = true;
            else fatal("unknown precision '%s' (expected f32 or bf16)", v);
        } else if (!strcmp(a, "--no-inplace")) {
            o->plan.inplace = false;
        } else if (!strcmp(a, "--no-reorder")) {
            o->plan.reorder = false;
        } else if (!strcmp(a, "--no-fold-bn")) {
            o->fold.fold_bn = false;
        } else if (!strcmp(a, "--no-hoist")) {
            o->fold.hoist = false;
        } else if (!strcmp(a, "--no-fold-transpose")) {
            o->fold.fold_transpose = false;
        } else if (!strcmp(a, "--no-fold-silu")) {
            o->fold.fold_silu = false;
        } else if (!strcmp(a, "-O0") || !strcmp(a, "-O1") || !strcmp(a, "-O2") || !strcmp(a, "-O3")) {
            o->olevel = a;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "modelc: error: unknown option '%s'\n", a);
            usage(stderr);
            exit(1);
        } else {
            if (o->input) fatal("more than one input file ('%s' and '%s')", o->input, a);
            o->input = a;
        }
    }
    if (o->bf16 && o->dims.train)
        fatal("--precision bf16 is for inference builds: a training build (--train) computes in f32");
    if (o->bf16 && !MODELC_DNNL)
        fatal("--precision bf16 needs oneDNN's bf16 kernels, and this modelc was built without oneDNN (make DNNL=0)");
    if (!o->input) {
        fprintf(stderr, "modelc: error: no input file\n");
        usage(stderr);
        exit(1);
    }
}

/* ---------------------------------------------------------------- the pipeline */

/* The passes, in order, as plain calls (after QBE's main.c). Returns false when a --dump
 * printed its phase (to `out`) and the compilation stops there. */
bool compile_source(const Options *o, const char *path, const char *src, Compiled *c, FILE *out) {
    diag_init(path, src);
    Program *prog = parse_program(path, src);
    if (o->dump && !strcmp(o->dump, "ast")) return dump_ast(out, prog), false;
    DimBounds bounds = o->dims;
    bounds.max_batch = o->max_batch;
    Graph *g = c->g = build_graph(prog, &bounds);
    g->source = basename(xstrdup(path));
    g->bf16 = o->bf16 && !g->train && !g->eval;
    FoldOptions fold = o->fold;
    if (g->train) { /* the backward graph; params change every step: nothing is folded into them */
        int first = g->nnodes;
        graph_dp_trainable(g); /* on the forward graph: may data-parallel training split its batches? */
        grad_graph(g, g->frozen, g->nfrozen);
        if (o->dump && !strcmp(o->dump, "grad")) return dump_grad(out, g, first), dump_graph(out, g), false;
        fold.fold_bn = false;
        fold.hoist = false;
        fold.fold_silu = false;
    } else if (o->dump && !strcmp(o->dump, "grad")) {
        fatal("--dump=grad shows the backward graph of a training build: add --train");
    }
    if (o->dump && !strcmp(o->dump, "graph")) return dump_graph(out, g), false;
    fold_graph(g, fold);
    place_graph(g);
    if (fold.hoist) hoist_graph(g);
    if (o->dump && !strcmp(o->dump, "placement")) return dump_placement(out, g), false;
    c->kl = fuse_graph(g, o->fuse, &c->init);
    if (o->fuse.blocked) layout_blocked(g, &c->kl, o->fuse.winograd);
    if (o->fuse.blocked && o->fuse.nhwc) layout_nhwc(g, &c->kl);
    precision_bf16(g, &c->kl);
    if (o->dump && !strcmp(o->dump, "fused")) return dump_fused(out, g, &c->kl, &c->init), false;
    c->mp = plan_memory(g, &c->kl, &c->init, o->plan);
    PlanOptions pc = o->plan; /* the CUDA plan: the same schedule, 256-byte alignment, its scratch */
    pc.align = 256;
    pc.cuda = true;
    pc.reorder = false;
    c->mpc = plan_memory(g, &c->kl, &c->init, pc);
    if (o->dump && !strcmp(o->dump, "memplan"))
        return dump_memplan(out, g, &c->kl, c->mp, MODELC_NVCC[0] && !o->no_cuda ? c->mpc : NULL), false;
    if (o->dump && !strcmp(o->dump, "memplan-svg")) return dump_memplan_svg(out, g, &c->kl, c->mp), false;
    return true;
}

static bool compile(const Options *o, Compiled *c) {
    size_t len;
    char *src = read_file(o->input, &len);
    if (!compile_source(o, o->input, src, c, stdout)) return false;
    if (c->g->train) {
        /* The evaluation twin: the same source in inference mode (batch statistics and dropout
         * off), the targets as inputs and the loss its one output, reading the params as they
         * are (nothing folded into them: the training changes them). Its warnings are the
         * training build's, already printed. */
        Options oe = *o;
        oe.dims.train = false;
        oe.dims.eval = true;
        oe.fold.fold_bn = false;
        oe.fold.hoist = false;
        oe.fold.fold_silu = false;
        oe.dump = NULL;
        c->eval = xalloc(sizeof(Compiled));
        diag_quiet = true;
        compile_source(&oe, o->input, src, c->eval, stdout);
        diag_quiet = false;
        c->eval->g->name = xprintf("%s_eval", model_ident(c->g->name));
    }
    return true;
}

/* ---------------------------------------------------------------- files */

/* Render one emitter's output in memory and write it to `path` atomically. */
static void write_emitted(const char *path, Emit *e, int which, const char *h_include) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) fatal("out of memory");
    switch (which) {
    case 0: emit_c_header(e, f); break;
    case 1: emit_c_source(e, f, h_include); break;
    case 2: emit_c_main(e, f, h_include); break;
    }
    fclose(f);
    write_file_atomic(path, buf, len);
    free(buf);
}

static void write_cuda(const char *path, const Compiled *c, const char *pfx) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) fatal("out of memory");
    emit_cuda(f, c->g, &c->kl, &c->init, pfx);
    fclose(f);
    write_file_atomic(path, buf, len);
    free(buf);
}

/* The generated files of a model in `dir`: NAME.h, NAME.c, and NAME.cu / NAME_main.c when asked. */
typedef struct Generated {
    char *c, *h, *cu, *main, *h_include;
} Generated;

static Generated generated_paths(const Compiled *c, const char *dir, bool cuda, bool with_main) {
    const char *pfx = model_ident(c->g->name);
    return (Generated){.c = xprintf("%s/%s.c", dir, pfx), .h = xprintf("%s/%s.h", dir, pfx),
                       .cu = cuda ? xprintf("%s/%s.cu", dir, pfx) : NULL,
                       .main = with_main ? xprintf("%s/%s_main.c", dir, pfx) : NULL, .h_include = xprintf("%s.h", pfx)};
}

/* Writes the model's files (and its evaluation twin's, *ev, when it has one: NAME_eval.h, .c and
 * .cu, no main). Every file is checked before the first is written: all or nothing. */
static Generated write_generated(const Compiled *c, const char *dir, bool cuda, bool with_main, Generated *ev) {
    Generated gen = generated_paths(c, dir, cuda, with_main);
    if (ev) *ev = c->eval ? generated_paths(c->eval, dir, cuda, false) : (Generated){0};
    const char *paths[] = {gen.h, gen.c, gen.cu, gen.main, ev ? ev->h : NULL, ev ? ev->c : NULL, ev ? ev->cu : NULL};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
        if (paths[i]) free(output_target(paths[i], "the file"));
    for (int k = 0; k < (c->eval && ev ? 2 : 1); k++) {
        const Compiled *cc = k ? c->eval : c;
        const Generated *g = k ? ev : &gen;
        Emit *e = emit_begin(cc->g, &cc->kl, &cc->init, cc->mp, cc->mpc);
        write_emitted(g->h, e, 0, g->h_include);
        write_emitted(g->c, e, 1, g->h_include);
        if (g->cu) write_cuda(g->cu, cc, emit_prefix(e));
        if (g->main) write_emitted(g->main, e, 2, g->h_include);
    }
    return gen;
}

/* ---------------------------------------------------------------- building the executable */

static void copy_file(const char *from, const char *to) {
    size_t n;
    char *t = read_file(from, &n);
    write_file_atomic(to, t, n);
}

/* Compile the generated files with nvcc (when CUDA is on) and $CC, link with the runtime, and
 * put the executable at `target` atomically (check_output_path's answer for `exe`: the file a
 * symlink `exe` names, or `exe`). */
static int build_executable(const Options *o, const Compiled *c, const char *exe, const char *target) {
    char *tmpdir = xstrdup("/tmp/modelc.XXXXXX");
    if (!mkdtemp(tmpdir)) fatal("cannot create a temporary directory: %s", strerror(errno));
    bool cuda = MODELC_NVCC[0] && !o->no_cuda;
    Generated ev;
    Generated gen = write_generated(c, tmpdir, cuda, true, &ev);
    char *home = runtime_home();
    const char *extra = getenv("MODELC_CFLAGS");
    char *cu_obj = xprintf("%s.o", gen.cu ? gen.cu : "none");
    char *ev_obj = xprintf("%s.o", ev.cu ? ev.cu : "none");
    char **av = NULL;
    int ac = 0;
    for (int k = 0; cuda && k < (ev.c ? 2 : 1); k++) { /* the CUDA twins of the fused kernels */
        split_flags(MODELC_NVCC, &av, &ac);
        split_flags(MODELC_NVCC_OPT, &av, &ac);
        const char *gencode = getenv("MODELC_GENCODE");
        split_flags(gencode && *gencode ? gencode : MODELC_GENCODE, &av, &ac);
        add_arg(&av, &ac, xprintf("-I%s/include/modelc", home));
        add_arg(&av, &ac, "-c");
        add_arg(&av, &ac, k ? ev.cu : gen.cu);
        add_arg(&av, &ac, "-o");
        add_arg(&av, &ac, k ? ev_obj : cu_obj);
        av[ac] = NULL;
        int rc = run_cc(av);
        if (rc != 0) {
            fprintf(stderr, "modelc: error: nvcc failed (exit %d); generated source kept in %s\n", rc, tmpdir);
            return 1;
        }
        av = NULL;
        ac = 0;
    }
    const char *cc = getenv("CC");
    if (!cc || !*cc) cc = "cc";
    char *tmp_exe = xprintf("%s.tmp.%d", target, (int)getpid());
    split_flags(cc, &av, &ac);
    add_arg(&av, &ac, o->olevel);
    add_arg(&av, &ac, "-std=c11");
    add_arg(&av, &ac, "-D_GNU_SOURCE");
    add_arg(&av, &ac, xprintf("-I%s/include/modelc", home));
    split_flags(MODELC_EXTRA_CFLAGS, &av, &ac);
    if (cuda) split_flags(MODELC_CUDA_CFLAGS, &av, &ac);
    if (extra) split_flags(extra, &av, &ac);
    add_arg(&av, &ac, gen.c);
    add_arg(&av, &ac, gen.main);
    if (ev.c) add_arg(&av, &ac, ev.c);
    if (cuda) add_arg(&av, &ac, cu_obj);
    if (cuda && ev.c) add_arg(&av, &ac, ev_obj);
    add_arg(&av, &ac, xprintf("%s/lib/libmodelrt.a", home));
    split_flags(MODELC_LINK_LIBS, &av, &ac);
    add_arg(&av, &ac, "-o");
    add_arg(&av, &ac, tmp_exe);
    av[ac] = NULL;
    int rc = run_cc(av);
    if (rc != 0) {
        unlink(tmp_exe);
        fprintf(stderr, "modelc: error: the C compiler failed (exit %d); generated source kept in %s\n", rc, tmpdir);
        return 1;
    }
    if (rename(tmp_exe, target) != 0) {
        unlink(tmp_exe);
        fatal("cannot write '%s': %s", exe, strerror(errno));
    }
    if (o->keep) {
        copy_file(gen.c, xprintf("%s.c", exe));
        copy_file(gen.h, xprintf("%s.h", exe));
        copy_file(gen.main, xprintf("%s_main.c", exe));
        if (cuda) copy_file(gen.cu, xprintf("%s.cu", exe));
        if (ev.c) {
            copy_file(ev.c, xprintf("%s_eval.c", exe));
            copy_file(ev.h, xprintf("%s_eval.h", exe));
            if (cuda) copy_file(ev.cu, xprintf("%s_eval.cu", exe));
        }
    }
    unlink(gen.c);
    unlink(gen.h);
    unlink(gen.main);
    if (cuda) {
        unlink(gen.cu);
        unlink(cu_obj);
    }
    if (ev.c) {
        unlink(ev.c);
        unlink(ev.h);
        if (cuda) {
            unlink(ev.cu);
            unlink(ev_obj);
        }
    }
    rmdir(tmpdir);
    return 0;
}

/* Fail before building: never overwrite the input, the output's directory must exist, and the
 * output is a regular file, a new name, or a symlink to a regular file (output_target). Returns
 * the file to replace. */
static char *check_output_path(const Options *o, const char *exe) {
    char rin[PATH_MAX], rout[PATH_MAX];
    if (realpath(o->input, rin) && realpath(exe, rout) && !strcmp(rin, rout))
        fatal("refusing to write the executable over the input file '%s' (use -o)", o->input);
    if (is_dir(exe)) fatal("'%s' is a directory; -o names the executable to write", exe);
    char *target = output_target(exe, "the executable");
    if (o->keep) /* --keep-c's copies, checked before the build as the executable is */
        for (const char *const *sfx = (const char *const[]){".c", ".h", "_main.c", ".cu", NULL}; *sfx; sfx++)
            free(output_target(xprintf("%s%s", exe, *sfx), "the file"));
    char *dir = xstrdup(target);
    dir = dirname(dir);
    if (!is_dir(dir)) fatal("cannot write '%s': directory '%s' does not exist", exe, dir);
    char *home = runtime_home();
    if (access(xprintf("%s/include/modelc/modelrt.h", home), R_OK) != 0)
        fatal("cannot find the runtime in '%s' (include/modelc/modelrt.h); set MODELC_HOME", home);
    return target;
}

#ifndef MODELC_NO_MAIN /* defined when main.c is linked into a harness (tests/fuzz) */
int main(int argc, char **argv) {
    Options o;
    parse_args(argc, argv, &o);
    Compiled c = {0};
    if (!compile(&o, &c)) return 0; /* a --dump printed its phase */
    int rc = 0;
    if (o.emit_only) {
        const char *dir = o.out ? o.out : ".";
        if (!is_dir(dir) && mkdir(dir, 0755) != 0) fatal("cannot create directory '%s': %s", dir, strerror(errno));
        Generated ev;
        write_generated(&c, dir, true, false, &ev);
    } else {
        char *base = xstrdup(basename(xstrdup(o.input)));
        char *dot = strrchr(base, '.');
        if (dot && !strcmp(dot, ".model")) *dot = 0;
        const char *exe = o.out ? o.out : base;
        char *target = check_output_path(&o, exe);
        rc = build_executable(&o, &c, exe, target);
        free(target);
    }
    arena_free_all();
    return rc;
}
#endif
