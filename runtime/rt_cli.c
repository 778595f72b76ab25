/*
 * rt_cli.c — mrt_main, the command-line driver every generated executable calls:
 *
 *   PROG --weights W.safetensors --input NAME=IN.npy ... --output NAME=OUT.npy ...
 *        [--device D] [--device-map MAP] [--time] [--repeat N] [--memory] [--help]
 *        [--list-devices] [--devices LIST] [--micro-batches N] [--threads N]
 *
 * It is the only part of modelrt that prints. Steps: parse the arguments (usage errors exit 2;
 * a single-valued flag -- --weights, --device, --device-map, --repeat -- given twice is one, as
 * a repeated --input is); check the output paths (distinct regular files, none of them the
 * weights or an input; symlinks written through, FIFOs and devices refused); read every input;
 * infer the batch from the inputs' shapes against the model's descriptors and check every
 * other dimension; create the model on the device, load the weights; run (in chunks of
 * max_batch when the batch is larger, the model is batch_chunkable and the batch leads every
 * input and output); write the requested outputs atomically. Runtime failures print
 * "PROG: error: <message>" and exit 1. Every path frees what it allocated. --list-devices
 * prints the devices (CPU first, then each visible CUDA GPU, or why there is none) and exits
 * 0. --memory alone prints the plan's bytes per device and exits 0; with a run it adds what
 * was measured (peak resident memory, CUDA memory held); with --weights and no inputs it loads
 * the weights and measures that, without a run.
 */
#include <sys/resource.h>
#include <sys/stat.h>
#include "rt_internal.h"
#include <signal.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { CLI_OK = 0, CLI_ERROR = 1, CLI_USAGE = 2 };

typedef struct cli_opts {
    const char *weights, *device, *device_map;
    const char *devices; /* --devices: data-parallel replicas (rt_dp.c) */
    const char *micro_arg; /* --micro-batches's text, to name it when given twice */
    int micro_batches;     /* --micro-batches: a split model pipelined (rt_pipe.c); 0: not */
    const char *repeat_arg; /* --repeat's text, to name it when given twice */
    const char **in_files;  /* [n_inputs], NULL where not given */
    const char **out_files; /* [n_outputs], NULL where not requested */
    int time, memory, help, list_devices, plan_only;
    int load_only; /* --memory --weights W without inputs: load, measure, no run */
    int profile; /* --profile[=N]: the N slowest kernels (0: all); -1: no profile */
    int threads; /* --threads, 0: the default (mrt_set_threads) */
    long repeat;
} cli_opts;

/* ---------------------------------------------------------------- messages */

static const char *cli_prog(int argc, char **argv)
{
    if (argc < 1 || !argv || !argv[0] || !argv[0][0])
        return "model";
    const char *slash = strrchr(argv[0], '/');
    return slash ? slash + 1 : argv[0];
}

/* A descriptor's shape with its symbolic sizes by name: "[batch,64]", "[batch*8,3]",
 * "[batch*seq,384]". */
static char *cli_desc_shape(char *buf, size_t n, const mrt_io_desc *d, const mrt_model_info *info)
{
    size_t used = 0;
    int k = snprintf(buf, n, "[");
    for (int i = 0; i < d->rank && k >= 0 && (used += (size_t)k) < n; i++) {
        char term[256];
        size_t t = 0;
        int any = 0;
        for (int s = 0; s < info->n_syms; s++)
            for (int j = 0; j < d->sym[i][s] && t < sizeof term; j++, any = 1)
                t += (size_t)snprintf(term + t, sizeof term - t, "%s%s", any ? "*" : "", info->sym_names[s]);
        if (!any)
            snprintf(term, sizeof term, "%lld", (long long)d->shape[i]);
        else if (d->shape[i] != 1 && t < sizeof term)
            snprintf(term + t, sizeof term - t, "*%lld", (long long)d->shape[i]);
        k = snprintf(buf + used, n - used, "%s%s", i ? "," : "", term);
    }
    if (k >= 0 && (used += (size_t)k) < n)
        snprintf(buf + used, n - used, "]");
    return buf;
}

static void cli_usage_line(FILE *f, const char *prog)
{
    fprintf(f, "usage: %s --weights W.safetensors --input NAME=FILE.npy ... "
               "[--output NAME=FILE.npy ...]\n"
               "       [--device D] [--device-map MAP] [--devices LIST] [--micro-batches N] [--threads N]\n"
               "       [--time] [--repeat N] [--profile[=N]] [--memory] [--help] [--list-devices]\n", prog);
}

static void cli_help(const mrt_model_info *info, const char *prog)
{
    char sh[RT_SHAPE_STR_MAX + 64];
    cli_usage_line(stdout, prog);
    if (info->train)
        printf("       %s train --weights INIT.safetensors --data NAME=FILE.npy ... [options]\n", prog);
    printf("\nRuns the compiled model '%s'.\n", info->name ? info->name : "?");
    if (info->train)
        printf("It is a training build (modelc --train): '%s train' trains it on .npy files, one\n"
               "optimizer step per batch ('%s train --help' lists its options); a plain run is one such step.\n",
               prog, prog);
    if (info->desc && info->desc->precision == MRT_PRECISION_BF16)
        printf("It was compiled with --precision bf16: on a CPU with avx512_bf16 its oneDNN convolutions and\n"
               "GEMMs against constant weights compute in bf16 (f32 sums); elsewhere, or on a GPU, in f32.\n");
    if (info->has_batch)
        printf("The batch is inferred from the inputs' shapes: up to %d per run; a larger batch\n"
               "runs in chunks of %d when it is the leading axis of every input and output.\n",
               info->max_batch, info->max_batch);
    for (int k = 1; k < info->n_syms; k++)
        printf("%s is inferred from the inputs' shapes too: 1..%lld (fixed when compiled).\n",
               info->sym_names[k], (long long)info->sym_max[k]);
    printf("\ninputs:\n");
    for (int i = 0; i < info->n_inputs; i++)
        printf("  %-16s %s%s\n", info->inputs[i].name, mrt_dtype_name(info->inputs[i].dtype),
               cli_desc_shape(sh, sizeof sh, &info->inputs[i], info));
    printf("outputs:\n");
    for (int i = 0; i < info->n_outputs; i++)
        printf("  %-16s %s%s\n", info->outputs[i].name, mrt_dtype_name(info->outputs[i].dtype),
               cli_desc_shape(sh, sizeof sh, &info->outputs[i], info));
    printf("\noptions:\n"
           "  --weights FILE       safetensors file with the model's parameters%s\n"
           "  --input NAME=FILE    .npy file for an input (NAME= may be left out when the model\n"
           "                       has one input); every input is required\n"
           "  --output NAME=FILE   write an output to a .npy file (NAME= may be left out when\n"
           "                       the model has one output); outputs not named are not written\n"
           "  --device D           where to run (default: $MODELRT_DEVICE, else auto):\n"
           "                         auto     the first usable CUDA GPU, else the CPU (one\n"
           "                                  line on stderr says which and why)\n"
           "                         cpu      the CPU (cpu:N, N 0..7, names a placement)\n"
           "                         cuda     CUDA GPU 0; cuda:N GPU N as CUDA_VISIBLE_DEVICES\n"
           "                                  numbers them; a GPU that is missing is an error\n"
           "  --device-map MAP     move the devices 'on' regions pin, like PyTorch's map_location:\n"
           "                       FROM=TO[,FROM=TO...], e.g. cuda:1=cpu,cuda:0=cuda:0\n"
           "                       (default: $MODELRT_DEVICE_MAP)\n"
           "  --devices LIST       data-parallel: a replica of the model on each device of LIST\n"
           "                       (cuda:0,cuda:1 or cpu:0,cpu:1, or all: every GPU); each batch is\n"
           "                       split into contiguous shards that run at once (CPU replicas share\n"
           "                       --threads: N / replicas each, at least 1); the outputs are the\n"
           "                       single-device run's\n"
           "  --micro-batches N    a model split over devices by 'on' regions: run each batch as N\n"
           "                       micro-batches that flow through its devices, which then work at\n"
           "                       the same time (GPipe); the CPU devices share the threads\n"
           "  --list-devices       print the devices this program can use, and exit\n"
           "  --threads N          CPU threads for the kernels (default: $MODELRT_THREADS, else\n"
           "                       $OMP_NUM_THREADS, else the cores this process may use)\n"
           "  --time               print the time per run to stderr (with --repeat N > 1 the mean, then\n"
           "                       the median, fastest and slowest run; on the tests' CUDA simulator,\n"
           "                       also the launches, copies and host synchronizations per run)\n"
           "  --repeat N           run N times (with --time and N > 1: after one warm-up run, two on a GPU;\n"
           "                       --time alone times one cold run)\n"
           "  --profile[=N]        time each kernel and print the N slowest (default 20; 0 or all: every\n"
           "                       one) with GFLOP/s and GB/s to stderr; with --repeat N > 1 after one\n"
           "                       warm-up run (on a GPU each kernel is synchronized: the run is slower)\n"
           "  --memory             print the bytes each device holds (weights, arena, scratch)\n"
           "                       to stderr; alone, without --input, print the plan and exit;\n"
           "                       with --weights and no --input, also load them and measure\n"
           "  --help               print this help\n",
           info->weight_bytes ? "" : " (this model has none)");
    const mrt_model_desc *d = info->desc;
    printf("\ndevices: the model runs on --device");
    if (d && d->n_slots > 1) {
        printf("; it pins regions to:\n");
        for (int s = 1; s < d->n_slots; s++)
            printf("  %-10s 'on %s' at %s\n", d->slots[s].device, d->slots[s].device,
                   d->slots[s].where ? d->slots[s].where : "?");
        printf("A pinned device that is not present is an error; --device-map moves it.\n");
    } else {
        printf(" (no region pins another device).\n");
    }
    if (d && !d->cuda)
        printf("This program was built without CUDA: it runs on the CPU.\n");
}

static int cli_usage_error(const char *prog, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int cli_usage_error(const char *prog, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: error: ", prog);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    cli_usage_line(stderr, prog);
    fprintf(stderr, "Try '%s --help' for more information.\n", prog);
    return CLI_USAGE;
}

static void cli_log_hook(mrt_log_level level, const char *msg, void *user)
{
    (void)user;
    fprintf(stderr, "modelrt: %s%s\n", level == MRT_LOG_WARN ? "warning: " : "", msg);
}

/* ---------------------------------------------------------------- arguments */

/* "--flag VALUE" or "--flag=VALUE". Returns 1 if argv[*i] is `flag` (value in *val, NULL when
 * missing), 0 if not. */
static int cli_flag_value(int argc, char **argv, int *i, const char *flag, const char **val)
{
    const char *a = argv[*i];
    size_t n = strlen(flag);
    if (strncmp(a, flag, n) != 0)
        return 0;
    if (a[n] == '=') {
        *val = a + n + 1;
        return 1;
    }
    if (a[n] != '\0')
        return 0;
    *val = (*i + 1 < argc) ? argv[++*i] : NULL;
    return 1;
}

/* Bind "NAME=FILE" (or "FILE" for a model with one such tensor) to its slot in `files`. */
static int cli_bind(const char *prog, const char *kind, const char *spec,
                    const mrt_io_desc *descs, int n, const char **files)
{
    const char *eq = strchr(spec, '=');
    int idx = -1;
    if (eq) {
        size_t len = (size_t)(eq - spec);
        for (int i = 0; i < n; i++)
            if (strlen(descs[i].name) == len && strncmp(descs[i].name, spec, len) == 0)
                idx = i;
        if (idx < 0) {
            fprintf(stderr, "%s: error: unknown %s '%.*s'; the model's %ss are:", prog, kind,
                    (int)len, spec, kind);
            for (int i = 0; i < n; i++)
                fprintf(stderr, " %s", descs[i].name);
            fprintf(stderr, "%s\n", n ? "" : " (none)");
            cli_usage_line(stderr, prog);
            fprintf(stderr, "Try '%s --help' for more information.\n", prog);
            return CLI_USAGE;
        }
        spec = eq + 1;
    } else if (n == 1) {
        idx = 0;
    } else {
        return cli_usage_error(prog, "--%s FILE without NAME= is only for a model with one %s; "
                               "this model has %d, so write NAME=FILE", kind, kind, n);
    }
    if (*spec == '\0')
        return cli_usage_error(prog, "--%s %s: empty file name", kind, descs[idx].name);
    if (files[idx])
        return cli_usage_error(prog, "%s '%s' given twice", kind, descs[idx].name);
    files[idx] = spec;
    return CLI_OK;
}

static int cli_parse(const mrt_model_info *info, const char *prog, int argc, char **argv,
                     cli_opts *o)
{
    /* --help wins wherever it stands, even after a mistake the help would explain; then
     * --list-devices, which needs no other argument. */
    for (int i = 1; i < argc; i++)
        if (argv[i] && (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)) {
            o->help = 1;
            return CLI_OK;
        }
    for (int i = 1; i < argc; i++)
        if (argv[i] && strcmp(argv[i], "--list-devices") == 0) {
            o->list_devices = 1;
            return CLI_OK;
        }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int rc;
        if (!a) {
            break;
        } else if (strcmp(a, "--time") == 0) {
            o->time = 1;
        } else if (strcmp(a, "--memory") == 0) {
            o->memory = 1;
        } else if (strcmp(a, "--profile") == 0 || strncmp(a, "--profile=", 10) == 0) {
            if (o->profile >= 0)
                return cli_usage_error(prog, "--profile given twice; give it once");
            o->profile = 20;
            if (a[9] == '=') {
                const char *pv = a + 10;
                char *end = NULL;
                long t = -1;
                if (!strcmp(pv, "all"))
                    t = 0;
                else if (*pv >= '0' && *pv <= '9' && ((t = strtol(pv, &end, 10)), *end != '\0'))
                    t = -1;
                if (t < 0 || t > 1000000)
                    return cli_usage_error(prog, "--profile='%s': expected the number of kernels to list, "
                                           "0 to 1000000 (0 or 'all': every kernel)", pv);
                o->profile = (int)t;
            }
        } else if (cli_flag_value(argc, argv, &i, "--weights", &v) ||
                   cli_flag_value(argc, argv, &i, "--device-map", &v) ||
                   cli_flag_value(argc, argv, &i, "--devices", &v) ||
                   cli_flag_value(argc, argv, &i, "--micro-batches", &v) ||
                   cli_flag_value(argc, argv, &i, "--device", &v) ||
                   cli_flag_value(argc, argv, &i, "--repeat", &v) ||
                   cli_flag_value(argc, argv, &i, "--threads", &v) ||
                   cli_flag_value(argc, argv, &i, "--input", &v) ||
                   cli_flag_value(argc, argv, &i, "--output", &v)) {
            char flag[24];
            size_t fl = strcspn(a, "=");
            snprintf(flag, sizeof flag, "%.*s", (int)(fl < 23 ? fl : 23), a);
            if (strcmp(flag, "--device-map") == 0 && !info->desc)
                return cli_usage_error(prog, "--device-map needs a model compiled by modelc");
            if (!v)
                return cli_usage_error(prog, "%s needs a value", flag);
            /* A single-valued flag given twice is a mistake (which one was meant?), as a
             * repeated --input is, not a silent "last one wins". */
            const char *prev = strcmp(flag, "--weights") == 0      ? o->weights
                               : strcmp(flag, "--device") == 0     ? o->device
                               : strcmp(flag, "--device-map") == 0 ? o->device_map
                               : strcmp(flag, "--devices") == 0    ? o->devices
                               : strcmp(flag, "--repeat") == 0     ? o->repeat_arg
                               : strcmp(flag, "--micro-batches") == 0 ? o->micro_arg
                                                                   : NULL;
            if (prev)
                return cli_usage_error(prog, "%s given twice ('%s' and '%s'); give it once",
                                       flag, prev, v);
            if (strcmp(flag, "--weights") == 0) {
                o->weights = v;
            } else if (strcmp(flag, "--device") == 0) {
                o->device = v;
            } else if (strcmp(flag, "--devices") == 0) {
                o->devices = v;
            } else if (strcmp(flag, "--micro-batches") == 0) {
                char *end;
                long t = strtol(v, &end, 10);
                if (*v < '0' || *v > '9' || *end != '\0' || t < 1 || t > MRT_PIPE_MAX_MB)
                    return cli_usage_error(prog, "--micro-batches '%s': expected a count from 1 to %d", v,
                                           MRT_PIPE_MAX_MB);
                o->micro_batches = (int)t;
                o->micro_arg = v;
            } else if (strcmp(flag, "--threads") == 0) {
                char *end;
                long t = strtol(v, &end, 10);
                if (*v < '0' || *v > '9' || *end != '\0' || t < 1 || t > 4096)
                    return cli_usage_error(prog, "--threads '%s': expected a count from 1 to 4096", v);
                o->threads = (int)t;
            } else if (strcmp(flag, "--device-map") == 0) {
                o->device_map = v;
            } else if (strcmp(flag, "--repeat") == 0) {
                char *end;
                long r = strtol(v, &end, 10);
                if (*v < '0' || *v > '9' || *end != '\0' || r < 1 || r > 1000000000)
                    return cli_usage_error(prog, "--repeat '%s': expected a count from 1 to "
                                           "1000000000", v);
                o->repeat = r;
                o->repeat_arg = v;
            } else if (strcmp(flag, "--input") == 0) {
                if ((rc = cli_bind(prog, "input", v, info->inputs, info->n_inputs,
                                   o->in_files)) != CLI_OK)
                    return rc;
            } else {
                if ((rc = cli_bind(prog, "output", v, info->outputs, info->n_outputs,
                                   o->out_files)) != CLI_OK)
                    return rc;
            }
        } else if (a[0] == '-') {
            return cli_usage_error(prog, "unknown option '%s'", a);
        } else {
            return cli_usage_error(prog, "unexpected argument '%s'", a);
        }
    }
    if (o->devices && (o->device || o->device_map))
        return cli_usage_error(prog, "--devices runs a replica on each device it lists: give it without %s",
                               o->device ? "--device" : "--device-map");
    if (o->profile >= 0 && (o->devices || o->micro_batches))
        return cli_usage_error(prog, "--profile times the kernels of one model's runs: give it without %s",
                               o->devices ? "--devices" : "--micro-batches");
    if (o->profile >= 0 && !info->desc)
        return cli_usage_error(prog, "--profile needs a model compiled by modelc");
    if (o->devices && o->micro_batches)
        return cli_usage_error(prog, "--micro-batches pipelines a model split over devices; --devices replicates "
                               "it: give one of them");
    if (o->micro_batches && !info->desc)
        return cli_usage_error(prog, "--micro-batches needs a model compiled by modelc");
    if (o->devices && info->desc && info->desc->n_slots > 1)
        return cli_usage_error(prog, "--devices: model '%s' pins regions to other devices ('on' regions); its "
                               "replicas would share them", info->name);
    int any_input = 0;
    for (int i = 0; i < info->n_inputs; i++)
        any_input |= o->in_files[i] != NULL;
    int any_output = 0;
    for (int i = 0; i < info->n_outputs; i++)
        any_output |= o->out_files[i] != NULL;
    if (o->memory && !any_input && !any_output && !o->weights && info->n_inputs > 0) {
        o->plan_only = 1; /* --memory alone: the plan, no run */
        return CLI_OK;
    }
    if (o->memory && !any_input && !any_output && o->weights && info->n_inputs > 0 && !o->time && o->profile < 0 &&
        !o->repeat_arg && !o->devices && !o->micro_batches) {
        o->load_only = 1; /* --memory --weights: load the weights and measure, no run */
        return CLI_OK;
    }
    for (int i = 0; i < info->n_inputs; i++)
        if (!o->in_files[i])
            return cli_usage_error(prog, "missing --input for '%s' (use --input %s=FILE.npy)",
                                   info->inputs[i].name, info->inputs[i].name);
    /* a model whose weight region holds only its own constants (tensor(...)) needs no file */
    if (!o->weights && (info->desc ? info->desc->n_params > 0 : info->weight_bytes > 0))
        return cli_usage_error(prog, "missing --weights FILE.safetensors (the model has %zu "
                               "bytes of parameters)", info->weight_bytes);
    return CLI_OK;
}

/* ---------------------------------------------------------------- --list-devices */

/*   cpu:0  AMD EPYC 7763  memory 23.4 GiB
 *   cuda:0  NVIDIA H200  memory 139.8 GiB (free 139.1 GiB)  compute 9.0
 *   no CUDA devices: <reason>                                (when there is none) */
static void cli_fmt_bytes(char *buf, size_t n, size_t b);

static int cli_list_devices(const mrt_model_info *minfo, const char *prog)
{
    enum { MAX_LIST = 65 };
    mrt_device_info info[MAX_LIST];
    int n = 0;
    if (mrt_device_list(info, MAX_LIST, &n) != MRT_OK) {
        fprintf(stderr, "%s: error: %s\n", prog, mrt_last_error());
        return CLI_ERROR;
    }
    for (int i = 0; i < n; i++) {
        char name[32];
        mrt_device_str(info[i].device, name, sizeof name);
        char tot[32], fr[32];
        cli_fmt_bytes(tot, sizeof tot, info[i].total_bytes);
        cli_fmt_bytes(fr, sizeof fr, info[i].free_bytes);
        if (info[i].device.kind == MRT_DEVICE_CPU)
            printf("%s  %s  memory %s\n", name, info[i].name, tot);
        else
            printf("%s  %s  memory %s (free %s)  compute %d.%d%s\n", name, info[i].name, tot, fr,
                   info[i].cc_major, info[i].cc_minor,
                   minfo->desc && !minfo->desc->cuda ? "  (not usable: this program was built without CUDA)" : "");
    }
    printf("cpu:1 .. cpu:7  the same host, as separate devices for models split with 'on cpu:N'\n");
    const char *why = NULL;
    if (mrt_cuda_device_count(&why) == 0)
        printf("no CUDA devices: %s\n", why && *why ? why : "none found");
    fflush(stdout);
    return CLI_OK;
}

/* ---------------------------------------------------------------- --memory */

/* One line per device slot, as nvidia-smi users read it:
 *   memory: cpu:0 (the model's device): weights 1.2 MiB, arena 64.0 KiB, scratch 0 B, total 1.3 MiB */
static void cli_fmt_bytes(char *buf, size_t n, size_t b)
{
    if (b < 1024)
        snprintf(buf, n, "%zu B", b);
    else if (b < ((size_t)1 << 20))
        snprintf(buf, n, "%.1f KiB", (double)b / 1024.0);
    else if (b < ((size_t)1 << 30))
        snprintf(buf, n, "%.1f MiB", (double)b / 1048576.0);
    else
        snprintf(buf, n, "%.1f GiB", (double)b / 1073741824.0);
}

static void cli_memory_plan(const mrt_model_desc *d, const mrt_device *devs)
{
    size_t total = 0, load = 0;
    for (int s = 0; s < d->n_slots; s++) {
        mrt_memory_use u;
        if (mrt_model_plan_memory(d, devs, s, &u) != MRT_OK)
            continue;
        char dn[32], w[32], a[32], sc[32], t[32];
        cli_fmt_bytes(w, sizeof w, u.weights);
        cli_fmt_bytes(a, sizeof a, u.arena);
        cli_fmt_bytes(sc, sizeof sc, u.scratch);
        cli_fmt_bytes(t, sizeof t, u.total);
        fprintf(stderr, "memory: %s (%s%s%s%s): weights %s, arena %s, scratch %s, total %s (%zu bytes)\n",
                mrt_device_str(u.device, dn, sizeof dn), s ? "'on " : "the model's device",
                s ? d->slots[s].device : "", s ? "' at " : "", s && d->slots[s].where ? d->slots[s].where : "", w,
                a, sc, t, u.total);
        total += u.total;
        load += u.load_only;
    }
    char t[32], l[32];
    cli_fmt_bytes(t, sizeof t, total);
    cli_fmt_bytes(l, sizeof l, load);
    fprintf(stderr, "memory: planned total %s (%zu bytes); while loading also %s of raw weights that only "
            "load-time folding reads\n", t, total, l);
}

/* After a run: what this process holds, measured. cuda_free0[s]: free bytes on slot s's GPU
 * before the model was created. */
static void cli_memory_measured(const mrt_model_desc *d, const mrt_device *devs, const size_t *cuda_free0)
{
    /* VmHWM, the high-water mark of this process image's own memory: ru_maxrss also counts the
     * image an exec replaced (a Python parent of a few hundred MiB, say), so it is only the
     * fallback where /proc is missing */
    size_t hwm = 0;
    FILE *f = fopen("/proc/self/status", "r");
    if (f) {
        char line[256];
        unsigned long long kb;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "VmHWM: %llu kB", &kb) == 1)
                hwm = (size_t)kb * 1024;
        fclose(f);
    }
    struct rusage ru;
    if (!hwm && getrusage(RUSAGE_SELF, &ru) == 0)
        hwm = (size_t)ru.ru_maxrss * 1024;
    char b[32];
    if (hwm) {
        cli_fmt_bytes(b, sizeof b, hwm);
        fprintf(stderr, "memory: measured: peak resident memory of the process %s\n", b);
    }
    for (int s = 0; s < d->n_slots; s++) {
        int seen = 0;
        for (int q = 0; q < s; q++)
            seen |= devs[q].kind == devs[s].kind && devs[q].index == devs[s].index;
        size_t fr = 0, tot = 0;
        if (seen || devs[s].kind != MRT_DEVICE_CUDA || mrt_device_memory(devs[s], &fr, &tot) != MRT_OK)
            continue;
        char dn[32], held[32], used[32];
        cli_fmt_bytes(held, sizeof held, cuda_free0[s] > fr ? cuda_free0[s] - fr : 0);
        cli_fmt_bytes(used, sizeof used, tot - fr);
        fprintf(stderr, "memory: measured: %s: this process took %s since before create (weights, arena, "
                "library workspaces); %s in use on the device (cudaMemGetInfo)\n",
                mrt_device_str(devs[s], dn, sizeof dn), held, used);
    }
}

/* --memory without inputs: the plan on the devices the model would run on, nothing allocated. */
static int cli_memory_only(const mrt_model_info *info, const cli_opts *o, const char *prog)
{
    mrt_log_fn old_fn;
    void *old_user;
    rt_log_hook_get(&old_fn, &old_user);
    mrt_set_log_hook(cli_log_hook, NULL);
    int rc = CLI_OK;
    if (info->desc) {
        mrt_device devs[MRT_MAX_SLOTS];
        if (mrt_model_requested_devices(info->desc, o->device, o->device_map, devs) != MRT_OK) {
            fprintf(stderr, "%s: error: %s\n", prog, mrt_last_error()); /* a malformed device or map */
            rc = CLI_ERROR;
        } else if (mrt_model_select_devices(info->desc, o->device, o->device_map, devs) != MRT_OK) {
            /* The plan is what a user wants most when it does not fit: show it on the devices
             * asked for, and say why it cannot run here as it is. */
            char why[1024];
            snprintf(why, sizeof why, "%s", mrt_last_error());
            mrt_model_requested_devices(info->desc, o->device, o->device_map, devs);
            cli_memory_plan(info->desc, devs);
            fprintf(stderr, "memory: note: it cannot run here as it is: %s\n", why);
        } else {
            cli_memory_plan(info->desc, devs);
        }
    } else {
        fprintf(stderr, "memory: weights %zu bytes, arena %zu bytes (CPU plan), %zu bytes (CUDA plan)\n",
                info->weight_bytes, info->arena_bytes, info->arena_bytes_cuda);
    }
    mrt_set_log_hook(old_fn, old_user);
    return rc;
}

/* ---------------------------------------------------------------- model descriptor checks */

static int cli_desc_ok(const mrt_io_desc *d, const mrt_model_info *info)
{
    if (!d->name || !rt_dtype_valid(d->dtype) || d->rank < 0 || d->rank > MRT_MAX_RANK)
        return 0;
    for (int i = 0; i < d->rank; i++) {
        if (d->shape[i] <= 0)
            return 0;
        for (int s = 0; s < MRT_MAX_SYMS; s++)
            if (d->sym[i][s] > (s < info->n_syms ? 16 : 0))
                return 0;
    }
    return 1;
}

static mrt_status cli_check_info(const mrt_model_info *info)
{
    if (!info || info->n_inputs < 0 || info->n_outputs < 0 ||
        (info->n_inputs && !info->inputs) || (info->n_outputs && !info->outputs) ||
        !info->create || !info->run || !info->destroy || info->max_batch < 1 ||
        info->n_syms < 0 || info->n_syms > MRT_MAX_SYMS || (info->n_syms && (!info->sym_names || !info->sym_max)) ||
        info->has_batch != (info->n_syms > 0) || (info->n_syms && info->max_batch != info->sym_max[0]))
        return mrt_set_error(MRT_ERR_INTERNAL, "internal error: malformed model descriptor");
    for (int k = 0; k < info->n_syms; k++)
        if (!info->sym_names[k] || info->sym_max[k] < 1)
            return mrt_set_error(MRT_ERR_INTERNAL, "internal error: malformed symbolic dimension %d", k);
    for (int i = 0; i < info->n_inputs; i++)
        if (!cli_desc_ok(&info->inputs[i], info))
            return mrt_set_error(MRT_ERR_INTERNAL, "internal error: malformed descriptor of "
                                 "input %d", i);
    for (int i = 0; i < info->n_outputs; i++)
        if (!cli_desc_ok(&info->outputs[i], info))
            return mrt_set_error(MRT_ERR_INTERNAL, "internal error: malformed descriptor of "
                                 "output %d", i);
    return MRT_OK;
}

/* The sizes dims[0..n_syms) as "batch = 2, seq = 7", for messages. */
static const char *cli_dims_str(char *buf, size_t n, const mrt_model_info *info, const int64_t *dims)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int k = 0; k < info->n_syms && used < n; k++)
        used += (size_t)snprintf(buf + used, n - used, "%s%s = %lld", k ? ", " : "", info->sym_names[k],
                                 (long long)dims[k]);
    return buf;
}

/* The concrete shape of `d` at the sizes dims, and its byte size; overflow-checked. */
static mrt_status cli_shape_at(const mrt_io_desc *d, const mrt_model_info *info, const int64_t *dims,
                               int64_t *shape, size_t *bytes)
{
    uint64_t numel, b;
    char ds[256];
    for (int i = 0; i < d->rank; i++) {
        shape[i] = d->shape[i];
        for (int s = 0; s < info->n_syms; s++)
            for (int j = 0; j < d->sym[i][s]; j++)
                if (__builtin_mul_overflow(shape[i], dims[s], &shape[i]))
                    return mrt_set_error(MRT_ERR_INVALID_ARG, "'%s' at %s: size overflows", d->name,
                                         cli_dims_str(ds, sizeof ds, info, dims));
    }
    if (rt_shape_numel(shape, d->rank, &numel) != 0 ||
        __builtin_mul_overflow(numel, (uint64_t)mrt_dtype_size(d->dtype), &b) || b > SIZE_MAX)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "'%s' at %s: size overflows", d->name,
                             cli_dims_str(ds, sizeof ds, info, dims));
    *bytes = (size_t)b;
    return MRT_OK;
}

int rt_axis_symbol(const mrt_io_desc *d, const mrt_model_info *info, int k)
{
    int found = -1;
    for (int s = 0; s < info->n_syms; s++) {
        if (!d->sym[k][s])
            continue;
        if (d->sym[k][s] != 1 || found >= 0)
            return -1;
        found = s;
    }
    return found;
}

/* Check input `i`'s dtype, rank and fixed axes against its descriptor, and read the symbolic
 * sizes its axes give into dims (-1: not yet known; from[s]: the input and axis that gave it,
 * as i * MRT_MAX_RANK + axis). Axes of several symbols are checked by cli_verify_input. */
static mrt_status cli_check_input(const mrt_model_info *info, int i, const char *file,
                                  const mrt_tensor *t, int64_t *dims, int *from)
{
    const mrt_io_desc *d = &info->inputs[i];
    char want[RT_SHAPE_STR_MAX + 64], got[RT_SHAPE_STR_MAX];
    cli_desc_shape(want, sizeof want, d, info);
    rt_shape_str(got, sizeof got, t->shape, t->rank);
    if (t->dtype != d->dtype)
        return mrt_set_error(MRT_ERR_MISMATCH, "input '%s' (%s): dtype %s %s, model expects %s "
                             "%s", d->name, file, mrt_dtype_name(t->dtype), got,
                             mrt_dtype_name(d->dtype), want);
    int ok = t->rank == d->rank;
    for (int k = 0; ok && k < d->rank; k++) {
        int s = rt_axis_symbol(d, info, k);
        int any = 0;
        for (int q = 0; q < info->n_syms; q++)
            any |= d->sym[k][q] != 0;
        if (!any) {
            ok = t->shape[k] == d->shape[k];
            continue;
        }
        if (s < 0)
            continue; /* batch*seq: checked once every size is known */
        /* d->shape[k] > 0 was checked with the descriptor: the division is safe */
        ok = t->shape[k] % d->shape[k] == 0;
        int64_t v = t->shape[k] / d->shape[k];
        if (!ok)
            break;
        if (v == 0)
            return mrt_set_error(MRT_ERR_MISMATCH, "input '%s' (%s): shape %s gives %s = 0; the "
                                 "model expects %s with %s >= 1", d->name, file, got,
                                 info->sym_names[s], want, info->sym_names[s]);
        if (v > INT32_MAX)
            return mrt_set_error(MRT_ERR_MISMATCH, "input '%s' (%s): %s %lld is too large",
                                 d->name, file, info->sym_names[s], (long long)v);
        if (dims[s] >= 0 && dims[s] != v) {
            int fi = from[s] / MRT_MAX_RANK, fk = from[s] % MRT_MAX_RANK;
            return mrt_set_error(MRT_ERR_MISMATCH, "input '%s' (%s): shape %s means %s = %lld "
                                 "(axis %d), but input '%s' has %s = %lld (axis %d)", d->name, file,
                                 got, info->sym_names[s], (long long)v, k, info->inputs[fi].name,
                                 info->sym_names[s], (long long)dims[s], fk);
        }
        if (dims[s] < 0)
            from[s] = i * MRT_MAX_RANK + k;
        dims[s] = v;
    }
    if (!ok)
        return mrt_set_error(MRT_ERR_MISMATCH, "input '%s' (%s): shape %s, model expects %s",
                             d->name, file, got, want);
    return MRT_OK;
}

/* Once every size is known: input i's whole shape (axes of several symbols included). */
static mrt_status cli_verify_input(const mrt_model_info *info, int i, const char *file,
                                   const mrt_tensor *t, const int64_t *dims)
{
    const mrt_io_desc *d = &info->inputs[i];
    int64_t shape[MRT_MAX_RANK];
    size_t bytes;
    if (cli_shape_at(d, info, dims, shape, &bytes) != MRT_OK)
        return MRT_ERR_INVALID_ARG;
    for (int k = 0; k < d->rank; k++)
        if (shape[k] != t->shape[k]) {
            char want[RT_SHAPE_STR_MAX + 64], got[RT_SHAPE_STR_MAX], at[RT_SHAPE_STR_MAX], ds[256];
            cli_desc_shape(want, sizeof want, d, info);
            rt_shape_str(got, sizeof got, t->shape, t->rank);
            rt_shape_str(at, sizeof at, shape, d->rank);
            return mrt_set_error(MRT_ERR_MISMATCH, "input '%s' (%s): shape %s, model expects %s, "
                                 "which is %s at %s", d->name, file, got, want, at,
                                 cli_dims_str(ds, sizeof ds, info, dims));
        }
    return MRT_OK;
}

/* ---------------------------------------------------------------- output paths */

/* 1 if the two outputs would be written to one file: the same inode (a hard link, a symlink
 * to the other, "a.npy" and "./a.npy"), or, for files not there yet, the same canonical
 * name. */
int rt_dest_same(const rt_dest *a, const rt_dest *b)
{
    if (a->exists || b->exists)
        return a->exists && b->exists && a->dev == b->dev && a->ino == b->ino;
    return a->name && b->name && strcmp(a->name, b->name) == 0;
}

mrt_status rt_output_check(const char *what, const char *path, const char *const *readers,
                           const char *const *reader_what, int nreaders, rt_dest *d)
{
    char why[RT_QUOTE_MAX + 128];
    memset(d, 0, sizeof *d);
    if (!path || !*path)
        return mrt_set_error(MRT_ERR_IO, "cannot write %s: its file name is empty", what);
    char *target = rt_output_target(path, why, sizeof why);
    if (!target)
        return mrt_set_error(MRT_ERR_IO, "cannot write %s to %s: %s; outputs are "
                             "written only to regular files (or through a symlink to one)",
                             what, path, why);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", target);
    char *slash = strrchr(dir, '/');
    const char *base = slash ? slash + 1 : target;
    if (slash == dir)
        dir[1] = '\0';
    else if (slash)
        *slash = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    struct stat so, sw;
    if (!*base || (stat(dir, &so) == 0 && !S_ISDIR(so.st_mode))) {
        mrt_set_error(MRT_ERR_IO, "cannot write %s to %s: %s", what, path,
                      !*base ? "it names a directory, not a file" : "its parent is not a directory");
        free(target);
        return MRT_ERR_IO;
    }
    if (access(dir, W_OK) != 0) {
        mrt_set_error(MRT_ERR_IO, "cannot write %s to %s: directory '%s' %s", what,
                      path, dir, access(dir, F_OK) != 0 ? "does not exist" : "is not writable");
        free(target);
        return MRT_ERR_IO;
    }
    if (stat(target, &so) == 0) {
        d->exists = 1;
        d->dev = so.st_dev;
        d->ino = so.st_ino;
        free(target);
        for (int j = 0; j < nreaders; j++)
            if (readers[j] && stat(readers[j], &sw) == 0 && sw.st_dev == so.st_dev &&
                sw.st_ino == so.st_ino)
                return mrt_set_error(MRT_ERR_INVALID_ARG, "%s would overwrite %s (%s); name "
                                     "another file", what, reader_what[j], path);
        return MRT_OK;
    }
    /* Not there yet: two such outputs are one file when their canonical names agree. */
    char *rdir = realpath(dir, NULL);
    if (rdir && (d->name = malloc(strlen(rdir) + strlen(base) + 2)) != NULL)
        sprintf(d->name, "%s/%s", rdir, base);
    free(rdir);
    free(target);
    return MRT_OK;
}

/* Output i's path, checked before the run (rt_output_check): not the weights file or an
 * input. */
static mrt_status cli_output_check(const mrt_model_info *info, const cli_opts *o, int i,
                                   rt_dest *d)
{
    int n = info->n_inputs + 1;
    const char **readers = calloc((size_t)n, sizeof *readers), **what = calloc((size_t)n, sizeof *what);
    if (!readers || !what) {
        free(readers);
        free(what);
        return mrt_set_error(MRT_ERR_OOM, "out of memory");
    }
    readers[0] = o->weights;
    what[0] = "the weights file";
    for (int j = 0; j < info->n_inputs; j++) {
        readers[j + 1] = o->in_files[j];
        what[j + 1] = rt_strdup_printf("input '%s'", info->inputs[j].name);
    }
    char *w = rt_strdup_printf("output '%s'", info->outputs[i].name);
    mrt_status st = rt_output_check(w ? w : "an output", o->out_files[i], readers, what, n, d);
    free(w);
    for (int j = 1; j < n; j++)
        free((char *)what[j]);
    free(readers);
    free(what);
    return st;
}

/* ---------------------------------------------------------------- running */

typedef struct cli_run {
    const mrt_model_info *info;
    void *model;                  /* the model, or with --devices the first replica */
    mrt_dp *dp;                   /* --devices: the replicas */
    mrt_pipe *pipe;               /* --micro-batches: the pipeline over r.model's stages */
    int batch, chunk;             /* chunk: batch per call (== batch when not chunked) */
    int64_t dims[MRT_MAX_SYMS];   /* the symbolic sizes (dims[0] == batch) */
    mrt_tensor *in;               /* [n_inputs] */
    void **out;                   /* [n_outputs] host buffers for the full batch */
    size_t *in_unit, *out_unit;   /* bytes per batch element (leading-axis chunking) */
    const void **in_ptr;          /* scratch pointer arrays passed to run */
    void **out_ptr;
} cli_run;

static mrt_status cli_run_once(cli_run *r)
{
    const mrt_model_info *info = r->info;
    for (int b0 = 0; b0 < r->batch; b0 += r->chunk) {
        int nb = r->batch - b0 < r->chunk ? r->batch - b0 : r->chunk;
        for (int i = 0; i < info->n_inputs; i++)
            r->in_ptr[i] = (const unsigned char *)r->in[i].data + (size_t)b0 * r->in_unit[i];
        for (int i = 0; i < info->n_outputs; i++)
            r->out_ptr[i] = (unsigned char *)r->out[i] + (size_t)b0 * r->out_unit[i];
        int64_t dims[MRT_MAX_SYMS];
        memcpy(dims, r->dims, sizeof dims);
        dims[0] = nb;
        mrt_status st = r->dp     ? mrt_dp_run(r->dp, dims, (const void *const *)r->in_ptr, (void *const *)r->out_ptr)
                        : r->pipe ? mrt_pipe_run(r->pipe, dims, (const void *const *)r->in_ptr, (void *const *)r->out_ptr)
                                  : info->run(r->model, dims, (const void *const *)r->in_ptr, (void *const *)r->out_ptr);
        if (st != MRT_OK) {
            if (mrt_last_error()[0] == '\0')
                mrt_set_error(st, "run failed with %s", mrt_status_name(st));
            if (r->chunk < r->batch) {
                char msg[1024];
                snprintf(msg, sizeof msg, "%s", mrt_last_error());
                mrt_set_error(st, "%s (in the chunk of batch items %d..%d: positions count from item %d)",
                              msg, b0, b0 + nb - 1, b0);
            }
            return st;
        }
    }
    return MRT_OK;
}

static double cli_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cli_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* --time's second line: the median, fastest and slowest of the n timed runs (ms each; sorts
 * `each` in place). Nothing when each is NULL (one run, or no memory for the times). */
static void cli_time_spread(double *each, long n)
{
    if (!each || n < 2)
        return;
    qsort(each, (size_t)n, sizeof *each, cli_cmp_double);
    double med = n % 2 ? each[n / 2] : 0.5 * (each[n / 2 - 1] + each[n / 2]);
    fprintf(stderr, "time: median %.4f ms per run (fastest %.4f, slowest %.4f, of %ld runs)\n", med, each[0],
            each[n - 1], n);
}

/* Everything after argument parsing. Returns CLI_OK or CLI_ERROR with the error recorded. */
static int cli_execute(const mrt_model_info *info, const cli_opts *o, const char *prog)
{
    int nin = info->n_inputs, nout = info->n_outputs;
    int rc = CLI_ERROR;
    rt_dest *dests = NULL;
    cli_run r;
    memset(&r, 0, sizeof r);
    r.info = info;
    r.in = calloc((size_t)nin + 1, sizeof *r.in);
    r.in_unit = calloc((size_t)nin + 1, sizeof *r.in_unit);
    r.in_ptr = calloc((size_t)nin + 1, sizeof *r.in_ptr);
    r.out = calloc((size_t)nout + 1, sizeof *r.out);
    r.out_unit = calloc((size_t)nout + 1, sizeof *r.out_unit);
    r.out_ptr = calloc((size_t)nout + 1, sizeof *r.out_ptr);
    size_t *out_bytes = calloc((size_t)nout + 1, sizeof *out_bytes);
    int64_t (*out_shape)[MRT_MAX_RANK] = calloc((size_t)nout + 1, sizeof *out_shape);
    if (!r.in || !r.in_unit || !r.in_ptr || !r.out || !r.out_unit || !r.out_ptr || !out_bytes ||
        !out_shape) {
        mrt_set_error(MRT_ERR_OOM, "out of memory setting up %d inputs and %d outputs", nin,
                      nout);
        goto done;
    }

    /* Outputs go to distinct regular files in directories that exist, none of them the
     * weights or an input, checked before anything runs, so that a run does not end with some
     * outputs written and others not, and nothing the user did not name as an output is
     * touched. */
    dests = calloc((size_t)nout + 1, sizeof *dests);
    if (!dests) {
        mrt_set_error(MRT_ERR_OOM, "out of memory checking %d output paths", nout);
        goto done;
    }
    for (int i = 0; i < nout; i++) {
        if (!o->out_files[i])
            continue;
        if (cli_output_check(info, o, i, &dests[i]) != MRT_OK)
            goto done;
        for (int j = 0; j < i; j++)
            if (o->out_files[j] && rt_dest_same(&dests[i], &dests[j])) {
                if (!strcmp(o->out_files[i], o->out_files[j]))
                    mrt_set_error(MRT_ERR_INVALID_ARG, "outputs '%s' and '%s' are both written "
                                  "to %s", info->outputs[j].name, info->outputs[i].name,
                                  o->out_files[i]);
                else
                    mrt_set_error(MRT_ERR_INVALID_ARG, "outputs '%s' and '%s' are both written "
                                  "to one file: %s and %s are the same file",
                                  info->outputs[j].name, info->outputs[i].name,
                                  o->out_files[j], o->out_files[i]);
                goto done;
            }
    }

    /* Inputs: read, check, infer the batch and the other symbolic sizes. */
    int from[MRT_MAX_SYMS] = {0};
    for (int s = 0; s < MRT_MAX_SYMS; s++)
        r.dims[s] = -1;
    for (int i = 0; i < nin && !o->load_only; i++) {
        if (mrt_npy_read(o->in_files[i], &r.in[i]) != MRT_OK)
            goto done;
        if (cli_check_input(info, i, o->in_files[i], &r.in[i], r.dims, from) != MRT_OK)
            goto done;
    }
    for (int s = 0; s < MRT_MAX_SYMS; s++)
        if (r.dims[s] < 0)
            r.dims[s] = 1; /* no input axis is it alone (no such symbol: modelc checks) */
    for (int i = 0; i < nin && !o->load_only; i++)
        if (cli_verify_input(info, i, o->in_files[i], &r.in[i], r.dims) != MRT_OK)
            goto done;
    for (int s = 1; s < info->n_syms; s++)
        if (r.dims[s] > info->sym_max[s]) {
            int fi = from[s] / MRT_MAX_RANK;
            mrt_set_error(MRT_ERR_INVALID_ARG, "input '%s' (%s): %s = %lld exceeds the compiled "
                          "maximum %lld (recompile with modelc --max-dim %s=N)", info->inputs[fi].name,
                          o->in_files[fi], info->sym_names[s], (long long)r.dims[s],
                          (long long)info->sym_max[s], info->sym_names[s]);
            goto done;
        }
    int64_t batch = r.dims[0];
    r.batch = (int)batch;
    r.chunk = r.batch;
    /* --devices: the replicas first (each shard is at most the compiled maximum batch) */
    int ndev = 1, threads = 0;
    if (o->devices) { /* the thread count first: CPU replicas then set one each */
        if (mrt_set_threads(o->threads, &threads) != MRT_OK || mrt_dp_create(&r.dp, info, o->devices) != MRT_OK)
            goto done;
        ndev = mrt_dp_count(r.dp);
        r.model = mrt_dp_replica(r.dp, 0);
        if (ndev > batch)
            fprintf(stderr, "%s: notice: batch %lld on %d devices: %lld of them get no items and sit out\n", prog,
                    (long long)batch, ndev, (long long)(ndev - batch));
    }
    if (batch > info->max_batch && !r.dp) {
        /* the batch leads a buffer when axis 0 holds it once and no other axis does */
        int leading = 1;
        for (int i = 0; i < nin + nout; i++)
            leading &= rt_batch_leads(i < nin ? &info->inputs[i] : &info->outputs[i - nin]);
        /* Chunks give the same result as one run only when no op mixes batch items
         * (batch_chunkable, from the compiler) and each chunk is a contiguous slice of every
         * host buffer (the batch leads every input and output). */
        if (!info->has_batch || !info->batch_chunkable || !leading) {
            mrt_set_error(MRT_ERR_INVALID_ARG, "batch %lld exceeds the compiled maximum %d "
                          "(recompile with --max-batch)%s", (long long)batch, info->max_batch,
                          !info->has_batch ? ""
                          : !leading ? "; it cannot run in chunks: the batch is not the leading "
                                       "axis of every input and output"
                                     : "; it cannot run in chunks: the model mixes batch items");
            goto done;
        }
        r.chunk = info->max_batch;
    }
    for (int i = 0; i < nin && !o->load_only; i++)
        r.in_unit[i] = r.in[i].nbytes / (size_t)batch; /* batch >= 1; exact when leading */
    for (int i = 0; i < nout; i++) {
        if (cli_shape_at(&info->outputs[i], info, r.dims, out_shape[i],
                         &out_bytes[i]) != MRT_OK)
            goto done;
        r.out_unit[i] = out_bytes[i] / (size_t)batch;
        r.out[i] = malloc(out_bytes[i] ? out_bytes[i] : 1);
        if (!r.out[i]) {
            mrt_set_error(MRT_ERR_OOM, "cannot allocate %zu bytes for output '%s'", out_bytes[i],
                          info->outputs[i].name);
            goto done;
        }
    }

    /* Threads, then the model: device, weights. */
    if (!r.dp && mrt_set_threads(o->threads, &threads) != MRT_OK)
        goto done;
    mrt_set_error(MRT_OK, "%s", "");
    const mrt_model_desc *d = info->desc;
    mrt_device devs[MRT_MAX_SLOTS];
    size_t cuda_free0[MRT_MAX_SLOTS] = {0};
    if (d && !r.dp) {
        if (mrt_model_select_devices(d, o->device, o->device_map, devs) != MRT_OK)
            goto done;
        for (int s = 0; s < d->n_slots; s++) {
            size_t tot;
            if (devs[s].kind == MRT_DEVICE_CUDA && mrt_device_memory(devs[s], &cuda_free0[s], &tot) != MRT_OK)
                goto done;
        }
    }
    if (r.dp) {
        /* the replicas exist; their free memory before loading, for --memory */
        for (int k = 0; k < ndev && d; k++) {
            size_t tot;
            mrt_model *rm = mrt_dp_replica(r.dp, k);
            if (rm->dev[0].kind == MRT_DEVICE_CUDA && k < MRT_MAX_SLOTS &&
                mrt_device_memory(rm->dev[0], &cuda_free0[k], &tot) != MRT_OK)
                goto done;
        }
    } else if (d ? mrt_model_create_on((mrt_model **)&r.model, d, devs) != MRT_OK
                 : info->create(&r.model, o->device) != MRT_OK || !r.model) {
        if (mrt_last_error()[0] == '\0')
            mrt_set_error(MRT_ERR_INTERNAL, "cannot create model '%s'", info->name);
        r.model = NULL;
        goto done;
    }
    char dev[32] = "cpu:0";
    if (info->device)
        mrt_device_str(info->device(r.model), dev, sizeof dev);
    int on_cuda = info->device && info->device(r.model).kind == MRT_DEVICE_CUDA;
    size_t arena = on_cuda && info->arena_bytes_cuda ? info->arena_bytes_cuda : info->arena_bytes;
    if (o->memory && d && r.dp)
        for (int k = 0; k < ndev; k++) {
            fprintf(stderr, "memory: replica %d of %d:\n", k + 1, ndev);
            cli_memory_plan(d, ((mrt_model *)mrt_dp_replica(r.dp, k))->dev);
        }
    else if (o->memory && d)
        cli_memory_plan(d, ((mrt_model *)r.model)->dev);
    else if (o->memory)
        fprintf(stderr, "memory: weights %zu bytes, arena %zu bytes (device %s)\n", info->weight_bytes, arena, dev);
    if (o->weights || (d && d->init)) { /* without params, the load still computes constants */
        if (!info->load_weights) {
            if (info->weight_bytes > 0) {
                mrt_set_error(MRT_ERR_INTERNAL, "internal error: model has no weight loader");
                goto done;
            }
        } else if (r.dp ? mrt_dp_load_weights(r.dp, o->weights) != MRT_OK
                        : info->load_weights(r.model, o->weights) != MRT_OK) {
            goto done;
        }
    }
    if (o->load_only) { /* --memory --weights, no inputs: what loading took, without a run */
        if (d)
            cli_memory_measured(d, ((mrt_model *)r.model)->dev, cuda_free0);
        fprintf(stderr, "memory: that was after loading the weights, before any run (give --input to measure a "
                "run too)\n");
        rc = CLI_OK;
        goto done;
    }

    /* --micro-batches: a pipeline over the model's stages, which cuts the whole batch itself */
    if (o->micro_batches && d->n_slots == 1) {
        fprintf(stderr, "%s: notice: --micro-batches %d: model '%s' has no 'on' regions, so there is nothing to "
                "pipeline; it runs as usual\n", prog, o->micro_batches, info->name);
    } else if (o->micro_batches) {
        int nmb = o->micro_batches;
        if (nmb > r.batch) {
            fprintf(stderr, "%s: notice: --micro-batches %d exceeds the batch %d: runs %d micro-batches of one item\n",
                    prog, nmb, r.batch, r.batch);
            nmb = r.batch;
        }
        if (mrt_pipe_create(&r.pipe, info, r.model, nmb) != MRT_OK)
            goto done;
        r.chunk = r.batch;
        threads = mrt_pipe_cpu_threads(r.pipe);
    }

    /* Run: when timing several runs, one warm-up (on a GPU two: the eager run, then the one that
     * captures the CUDA graph the timed runs replay), then `repeat` runs. */
    long repeat = o->repeat > 0 ? o->repeat : 1;
    for (int k = 0; k < 1 + on_cuda; k++)
        if (o->time && repeat > 1 && cli_run_once(&r) != MRT_OK)
            goto done;
    if (o->profile >= 0 && (repeat > 1 && !o->time) && cli_run_once(&r) != MRT_OK) /* the warm-up */
        goto done;
    if (o->profile >= 0 && mrt_model_profile(r.model, 1) != MRT_OK)
        goto done;
    unsigned long long c0[5] = {0}, c1[5] = {0};
    int sim = o->time && rt_cuda_sim_counters(c0);
    /* --time with several runs: each run's own time too (allocated before the timed loop), for
     * the median and the fastest run: a mean is pulled up by the odd run another process delayed */
    double *each = o->time && repeat > 1 ? malloc(sizeof *each * (size_t)repeat) : NULL;
    double t0 = cli_now_ms(), tk = t0;
    for (long k = 0; k < repeat; k++) {
        if (cli_run_once(&r) != MRT_OK) {
            free(each);
            goto done;
        }
        if (each) {
            double now = cli_now_ms();
            each[k] = now - tk;
            tk = now;
        }
    }
    double t1 = cli_now_ms();
    if (o->profile >= 0 && mrt_model_profile_print(r.model, stderr, o->profile) != MRT_OK) {
        free(each);
        goto done;
    }
    if (o->profile >= 0 && repeat == 1)
        fprintf(stderr, "profile: that was one cold run (its first-run costs included); --repeat N profiles N runs after "
                "a warm-up\n");
    if (o->profile >= 0 && r.chunk < r.batch)
        fprintf(stderr, "profile: a batch of %d over the model's maximum of %d runs as %d calls of run() each\n", r.batch,
                r.chunk, (r.batch + r.chunk - 1) / r.chunk);
    if (sim && rt_cuda_sim_counters(c1)) /* what a run asks of the (simulated) GPU */
        fprintf(stderr, "time: simulated CUDA per run: %g kernel launches, %g library calls, %g graph launches, "
                        "%g copies, %g host synchronizations\n", (double)(c1[0] - c0[0]) / (double)repeat,
                (double)(c1[1] - c0[1]) / (double)repeat, (double)(c1[4] - c0[4]) / (double)repeat,
                (double)(c1[2] - c0[2]) / (double)repeat, (double)(c1[3] - c0[3]) / (double)repeat);
    if (o->time && d) {
        /* every slot's device, and the bytes summed over the slots */
        size_t wsum = 0, asum = 0;
        char devlist[256] = "";
        for (int q = 0; q < (r.dp ? ndev : 1) * d->n_slots; q++) {
            int s = q % d->n_slots;
            mrt_memory_use u;
            char dn[32];
            mrt_model_plan_memory(d, ((mrt_model *)(r.dp ? mrt_dp_replica(r.dp, q / d->n_slots) : r.model))->dev, s, &u);
            wsum += u.weights;
            asum += u.arena;
            mrt_device_str(u.device, dn, sizeof dn);
            if (!strstr(devlist, dn) && strlen(devlist) + strlen(dn) + 2 < sizeof devlist)
                snprintf(devlist + strlen(devlist), sizeof devlist - strlen(devlist), "%s%s", *devlist ? "," : "", dn);
        }
        int cpus = 0; /* two CPU replicas or more share the threads (mrt_dp_create) */
        for (int k = 0; r.dp && k < ndev; k++)
            cpus += ((mrt_model *)mrt_dp_replica(r.dp, k))->dev[0].kind == MRT_DEVICE_CPU;
        if (cpus > 1)
            threads = rt_cpu_threads();
        char piped[64] = "";
        if (r.pipe)
            snprintf(piped, sizeof piped, " pipelined in %d micro-batches", o->micro_batches < r.batch ? o->micro_batches : r.batch);
        fprintf(stderr, "time: %.3f ms per run (%ld run%s, batch %d, device%s %s%s%s, %d thread%s%s; weights %zu bytes, "
                "arena %zu bytes)\n", (t1 - t0) / (double)repeat, repeat, repeat == 1 ? "" : "s", r.batch,
                strchr(devlist, ',') ? "s" : "", devlist, r.dp ? " data-parallel" : "", piped, threads, threads == 1 ? "" : "s",
                r.dp ? " per replica" : r.pipe ? " per CPU stage" : "", wsum, asum);
        cli_time_spread(each, repeat);
        if (r.pipe)
            fprintf(stderr, "time: the stages worked at once %.0f%% of the last run (micro-batches holding two stages or "
                    "more)\n", 100 * mrt_pipe_overlap(r.pipe));
    } else if (o->time) {
        fprintf(stderr, "time: %.3f ms per run (%ld run%s, batch %d, device %s; weights %zu bytes, arena %zu bytes)\n",
                (t1 - t0) / (double)repeat, repeat, repeat == 1 ? "" : "s", r.batch, dev, info->weight_bytes, arena);
        cli_time_spread(each, repeat);
    }
    free(each);

    if (o->memory && d && r.dp) /* each GPU replica's device; the host's resident memory once */
        for (int k = 0, host = 0; k < ndev && k < MRT_MAX_SLOTS; k++) {
            mrt_model *rm = mrt_dp_replica(r.dp, k);
            if (rm->dev[0].kind == MRT_DEVICE_CPU && host++)
                continue;
            cli_memory_measured(d, rm->dev, &cuda_free0[k]);
        }
    else if (o->memory && d)
        cli_memory_measured(d, ((mrt_model *)r.model)->dev, cuda_free0);

    /* Outputs, each written whole or not at all. */
    for (int i = 0; i < nout; i++) {
        if (!o->out_files[i])
            continue;
        mrt_tensor t;
        memset(&t, 0, sizeof t);
        t.dtype = info->outputs[i].dtype;
        t.rank = info->outputs[i].rank;
        memcpy(t.shape, out_shape[i], sizeof t.shape);
        t.data = r.out[i];
        t.nbytes = out_bytes[i];
        if (mrt_npy_write(o->out_files[i], &t) != MRT_OK)
            goto done;
    }
    rc = CLI_OK;

done:
    (void)prog;
    for (int i = 0; dests && i < nout; i++)
        free(dests[i].name);
    free(dests);
    mrt_pipe_destroy(r.pipe);
    if (r.dp)
        mrt_dp_destroy(r.dp);
    else if (r.model)
        info->destroy(r.model);
    for (int i = 0; r.in && i < nin; i++)
        mrt_tensor_free(&r.in[i]);
    for (int i = 0; r.out && i < nout; i++)
        free(r.out[i]);
    free(out_shape);
    free(out_bytes);
    free(r.out_ptr);
    free(r.out_unit);
    free(r.out);
    free(r.in_ptr);
    free(r.in_unit);
    free(r.in);
    return rc;
}

int rt_train_main(const mrt_model_info *info, int argc, char **argv, const char *prog);

static void cli_on_signal(int sig)
{
    rt_remove_temporaries();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* The program's (mrt_main's) handlers for SIGINT, SIGTERM and SIGHUP, where their disposition is
 * the default: remove the temporaries of the saves under way (rt_remove_temporaries), then die
 * of the signal as before. The library alone installs none. */
static void rt_cli_catch_signals(void)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
        struct sigaction old;
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_DFL) { /* not under nohup's SIG_IGN */
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_handler = cli_on_signal;
            sigemptyset(&sa.sa_mask);
            sigaction(sigs[i], &sa, NULL);
        }
    }
}

int mrt_main(const mrt_model_info *info, int argc, char **argv)
{
    const char *prog = cli_prog(argc, argv);
    rt_cli_catch_signals();
    if (cli_check_info(info) != MRT_OK) {
        fprintf(stderr, "%s: error: %s\n", prog, mrt_last_error());
        return CLI_ERROR;
    }
    if (argc > 1 && !strcmp(argv[1], "train"))
        return rt_train_main(info, argc, argv, prog);
    cli_opts o;
    memset(&o, 0, sizeof o);
    o.profile = -1;
    o.in_files = calloc((size_t)info->n_inputs + 1, sizeof *o.in_files);
    o.out_files = calloc((size_t)info->n_outputs + 1, sizeof *o.out_files);
    int rc;
    if (!o.in_files || !o.out_files) {
        fprintf(stderr, "%s: error: out of memory\n", prog);
        rc = CLI_ERROR;
    } else if ((rc = cli_parse(info, prog, argc, argv, &o)) != CLI_OK) {
        /* usage error, already printed */
    } else if (o.help) {
        cli_help(info, prog);
        fflush(stdout);
        rc = CLI_OK;
    } else if (o.list_devices) {
        rc = cli_list_devices(info, prog);
    } else if (o.plan_only) {
        rc = cli_memory_only(info, &o, prog);
    } else {
        mrt_log_fn old_fn;
        void *old_user;
        rt_log_hook_get(&old_fn, &old_user);
        mrt_set_log_hook(cli_log_hook, NULL);
        rc = cli_execute(info, &o, prog);
        mrt_set_log_hook(old_fn, old_user);
        if (rc != CLI_OK)
            fprintf(stderr, "%s: error: %s\n", prog, mrt_last_error());
    }
    free(o.in_files);
    free(o.out_files);
    return rc;
}
