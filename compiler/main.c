/*
 * main.c — the modelc driver: command line, the pass pipeline as plain calls, and the C compiler
 * invocation that turns the emitted source into an executable.
 *
 *   parse_program -> build_graph -> fuse_graph -> plan_memory -> emit_c -> $CC
 *
 * --dump=WHAT prints the named phase's text form to stdout and stops; nothing is written.
 */
#include "modelc.h"

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
/* Hopper and Ampere machine code, plus PTX for newer GPUs. */
#define MODELC_GENCODE "-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"
#define MODELC_VERSION "0.1.0"

static void usage(FILE *f) {
    fprintf(f,
            "usage: modelc FILE.model [options]\n"
            "\n"
            "Compile a .model file to an executable (default) or to C source for embedding.\n"
            "\n"
            "options:\n"
            "  -o PATH            the executable to write (default: the model file's name without\n"
            "                     .model); with --emit-c, the directory for NAME.c and NAME.h\n"
            "  --emit-c           write C source and header instead of an executable\n"
            "  --max-batch N      the largest batch the compiled model accepts (default 64)\n"
            "  --dump=WHAT        print a phase to stdout and stop: ast, graph, placement, fused, memplan,\n"
            "                     memplan-svg (the arena over time as an SVG picture)\n"
            "  --no-fuse          do not fuse elementwise chains (one kernel per op)\n"
            "  --no-epilogue      do not fold elementwise consumers into GEMM epilogues\n"
            "  --no-inplace       do not let kernels write over a dying operand\n"
            "  --no-reorder       keep the kernels in source order (no memory-aware schedule)\n"
            "  --no-fold-bn       do not fold batch_norm into the preceding conv2d / linear\n"
            "  --no-hoist         recompute param-only values on every run instead of once at load\n"
            "  --no-fold-transpose  copy a transposed matmul operand instead of using the GEMM's flag\n"
            "  --keep-c           keep the generated C next to the executable (PATH.c, PATH.h, PATH_main.c)\n"
            "  --no-cuda          build a CPU-only executable even when CUDA is available\n"
            "  --print-cflags     print the flags to compile generated C against the runtime, and exit\n"
            "  --print-libs       print the flags to link a program with the runtime, and exit\n"
            "  -O0 | -O1 | -O2 | -O3   optimization level passed to the C compiler (default -O2)\n"
            "  -h, --help         show this help\n"
            "  --version          print the version\n"
            "\n"
            "environment: CC (the C compiler, default cc), MODELC_CFLAGS (extra flags for it),\n"
            "             MODELC_HOME (where include/modelc and lib/libmodelrt.a are; default: next to\n"
            "             this executable)\n");
}

void write_file_atomic(const char *path, const char *text, size_t len) {
    char *tmp = xprintf("%s.tmp.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) fatal("cannot write '%s': %s", path, strerror(errno));
    FILE *f = fdopen(fd, "w");
    if (!f || fwrite(text, 1, len, f) != len || fclose(f) != 0) {
        unlink(tmp);
        fatal("cannot write '%s': %s", path, strerror(errno));
    }
    chmod(tmp, 0644);
    if (rename(tmp, path) != 0) {
        unlink(tmp);
        fatal("cannot write '%s': %s", path, strerror(errno));
    }
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

int main(int argc, char **argv) {
    const char *input = NULL, *out = NULL, *dump = NULL, *olevel = "-O2";
    bool emit_only = false, keep = false, no_cuda = false;
    int max_batch = 64;
    FuseOptions fo = {.elementwise = true, .epilogue = true};
    PlanOptions po = {.inplace = true, .align = 64, .reorder = true};
    FoldOptions fd = {.fold_bn = true, .hoist = true, .fold_transpose = true};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--version")) {
            printf("modelc %s\n", MODELC_VERSION);
            return 0;
        } else if (!strcmp(a, "-o")) {
            if (++i >= argc) fatal("'-o' needs a path");
            out = argv[i];
        } else if (!strcmp(a, "--emit-c")) {
            emit_only = true;
        } else if (!strcmp(a, "--keep-c")) {
            keep = true;
        } else if (!strcmp(a, "--no-cuda")) {
            no_cuda = true;
        } else if (!strcmp(a, "--print-cflags")) {
            printf("-I%s/include/modelc %s\n", runtime_home(), MODELC_EXTRA_CFLAGS);
            return 0;
        } else if (!strcmp(a, "--print-libs")) {
            printf("%s/lib/libmodelrt.a %s\n", runtime_home(), MODELC_LINK_LIBS);
            return 0;
        } else if (!strcmp(a, "--max-batch") || !strncmp(a, "--max-batch=", 12)) {
            const char *v = a[11] == '=' ? a + 12 : (++i < argc ? argv[i] : NULL);
            if (!v) fatal("'--max-batch' needs a number");
            char *end;
            errno = 0;
            long n = strtol(v, &end, 10);
            if (*end || errno || n < 1 || n > (1 << 24)) fatal("--max-batch must be an integer in 1..16777216, got '%s'", v);
            max_batch = (int)n;
        } else if (!strncmp(a, "--dump=", 7)) {
            dump = a + 7;
            if (strcmp(dump, "ast") && strcmp(dump, "graph") && strcmp(dump, "fused") && strcmp(dump, "memplan") &&
                strcmp(dump, "memplan-svg") && strcmp(dump, "placement"))
                fatal("unknown dump '%s' (expected ast, graph, placement, fused, memplan or memplan-svg)", dump);
        } else if (!strcmp(a, "--no-fuse")) {
            fo.elementwise = false;
        } else if (!strcmp(a, "--no-epilogue")) {
            fo.epilogue = false;
        } else if (!strcmp(a, "--no-inplace")) {
            po.inplace = false;
        } else if (!strcmp(a, "--no-reorder")) {
            po.reorder = false;
        } else if (!strcmp(a, "--no-fold-bn")) {
            fd.fold_bn = false;
        } else if (!strcmp(a, "--no-hoist")) {
            fd.hoist = false;
        } else if (!strcmp(a, "--no-fold-transpose")) {
            fd.fold_transpose = false;
        } else if (!strcmp(a, "-O0") || !strcmp(a, "-O1") || !strcmp(a, "-O2") || !strcmp(a, "-O3")) {
            olevel = a;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "modelc: error: unknown option '%s'\n", a);
            usage(stderr);
            return 1;
        } else {
            if (input) fatal("more than one input file ('%s' and '%s')", input, a);
            input = a;
        }
    }
    if (!input) {
        fprintf(stderr, "modelc: error: no input file\n");
        usage(stderr);
        return 1;
    }

    size_t len;
    char *src = read_file(input, &len);
    diag_init(input, src);
    Program *prog = parse_program(input, src);
    if (dump && !strcmp(dump, "ast")) {
        dump_ast(stdout, prog);
        return 0;
    }
    Graph *g = build_graph(prog, max_batch);
    g->source = basename(xstrdup(input));
    if (dump && !strcmp(dump, "graph")) {
        dump_graph(stdout, g);
        return 0;
    }
    fold_graph(g, fd);
    place_graph(g);
    if (fd.hoist) hoist_graph(g);
    if (dump && !strcmp(dump, "placement")) {
        dump_placement(stdout, g);
        return 0;
    }
    KernelList init;
    KernelList kl = fuse_graph(g, fo, &init);
    if (dump && !strcmp(dump, "fused")) {
        dump_fused(stdout, g, &kl, &init);
        return 0;
    }
    MemPlan *mp = plan_memory(g, &kl, &init, po);
    /* The CUDA plan: the same schedule, 256-byte alignment. */
    PlanOptions pc = po;
    pc.align = 256;
    pc.reorder = false;
    MemPlan *mpc = plan_memory(g, &kl, &init, pc);
    if (dump && !strcmp(dump, "memplan")) {
        dump_memplan(stdout, g, &kl, mp, MODELC_NVCC[0] && !no_cuda ? mpc : NULL);
        return 0;
    }
    if (dump && !strcmp(dump, "memplan-svg")) {
        dump_memplan_svg(stdout, g, &kl, mp);
        return 0;
    }

    /* Names of the generated files. */
    char *base = xstrdup(input);
    base = xstrdup(basename(base));
    char *dot = strrchr(base, '.');
    if (dot && !strcmp(dot, ".model")) *dot = 0;
    char *cname = model_ident(g->name);

    if (emit_only) {
        const char *dir = out ? out : ".";
        if (!is_dir(dir) && mkdir(dir, 0755) != 0) fatal("cannot create directory '%s': %s", dir, strerror(errno));
        EmitOptions eo = {.c_path = xprintf("%s/%s.c", dir, cname), .h_path = xprintf("%s/%s.h", dir, cname),
                          .h_include = xprintf("%s.h", cname), .cu_path = xprintf("%s/%s.cu", dir, cname)};
        emit_c(g, &kl, &init, mp, mpc, &eo);
        arena_free_all();
        return 0;
    }

    const char *exe = out ? out : base;
    {
        /* Fail before building: never overwrite the input, and the output's directory must exist. */
        char rin[PATH_MAX], rout[PATH_MAX];
        if (realpath(input, rin) && realpath(exe, rout) && !strcmp(rin, rout))
            fatal("refusing to write the executable over the input file '%s' (use -o)", input);
        if (is_dir(exe)) fatal("'%s' is a directory; -o names the executable to write", exe);
        char *dir = xstrdup(exe);
        dir = dirname(dir);
        if (!is_dir(dir)) fatal("cannot write '%s': directory '%s' does not exist", exe, dir);
        char *home = runtime_home();
        if (access(xprintf("%s/include/modelc/modelrt.h", home), R_OK) != 0)
            fatal("cannot find the runtime in '%s' (include/modelc/modelrt.h); set MODELC_HOME", home);
    }
    char *tmpdir = xstrdup("/tmp/modelc.XXXXXX");
    if (!mkdtemp(tmpdir)) fatal("cannot create a temporary directory: %s", strerror(errno));
    bool cuda = MODELC_NVCC[0] && !no_cuda;
    EmitOptions eo = {.c_path = xprintf("%s/%s.c", tmpdir, cname), .h_path = xprintf("%s/%s.h", tmpdir, cname),
                      .h_include = xprintf("%s.h", cname), .main_path = xprintf("%s/%s_main.c", tmpdir, cname),
                      .cu_path = cuda ? xprintf("%s/%s.cu", tmpdir, cname) : NULL};
    emit_c(g, &kl, &init, mp, mpc, &eo);

    char *home = runtime_home();
    const char *extra = getenv("MODELC_CFLAGS");
    char *cu_obj = xprintf("%s/%s.cu.o", tmpdir, cname);
    char **av = NULL;
    int ac = 0;
    if (cuda) { /* the CUDA twins of the fused kernels */
        split_flags(MODELC_NVCC, &av, &ac);
        add_arg(&av, &ac, "-O3");
        split_flags(MODELC_GENCODE, &av, &ac);
        add_arg(&av, &ac, xprintf("-I%s/include/modelc", home));
        add_arg(&av, &ac, "-c");
        add_arg(&av, &ac, eo.cu_path);
        add_arg(&av, &ac, "-o");
        add_arg(&av, &ac, cu_obj);
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
    char *tmp_exe = xprintf("%s.tmp.%d", exe, (int)getpid());
    split_flags(cc, &av, &ac);
    add_arg(&av, &ac, olevel);
    add_arg(&av, &ac, "-std=c11");
    add_arg(&av, &ac, "-D_GNU_SOURCE");
    add_arg(&av, &ac, xprintf("-I%s/include/modelc", home));
    split_flags(MODELC_EXTRA_CFLAGS, &av, &ac);
    if (cuda) split_flags(MODELC_CUDA_CFLAGS, &av, &ac);
    if (extra) split_flags(extra, &av, &ac);
    add_arg(&av, &ac, eo.c_path);
    add_arg(&av, &ac, eo.main_path);
    if (cuda) add_arg(&av, &ac, cu_obj);
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
    if (rename(tmp_exe, exe) != 0) {
        unlink(tmp_exe);
        fatal("cannot write '%s': %s", exe, strerror(errno));
    }
    if (keep) {
        size_t n;
        char *t;
        t = read_file(eo.c_path, &n);
        write_file_atomic(xprintf("%s.c", exe), t, n);
        t = read_file(eo.h_path, &n);
        write_file_atomic(xprintf("%s.h", exe), t, n);
        t = read_file(eo.main_path, &n);
        write_file_atomic(xprintf("%s_main.c", exe), t, n);
    }
    if (keep && cuda) {
        size_t n;
        char *t = read_file(eo.cu_path, &n);
        write_file_atomic(xprintf("%s.cu", exe), t, n);
    }
    unlink(eo.c_path);
    unlink(eo.h_path);
    unlink(eo.main_path);
    if (cuda) {
        unlink(eo.cu_path);
        unlink(cu_obj);
    }
    rmdir(tmpdir);
    arena_free_all();
    return diag_warnings && 0;
}
