/*
 * rt_train.c — training builds (modelc --train): saving the weights and the optimizer state as
 * safetensors, and `PROG train`, the training loop of the command-line driver.
 *
 * A training build's run() is one step: forward, loss, backward, and the optimizer's update of
 * the weights in place (the generated NAME_opt_step); it refuses to update when the loss is not
 * finite, so the weights stay those of the last good step. `PROG train` reads every input and
 * target from .npy files (one row per sample along the leading axis), cuts them into batches in
 * file order or, with --shuffle, in a seeded order (splitmix64 and Fisher-Yates, the same on
 * every machine), runs the steps, prints progress, and writes the weights (and, on request, the
 * optimizer state) atomically.
 */
#include "modelrt.h"
#include "rt_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The bytes of param p (its shape was checked when the model's descriptor was). */
static size_t param_bytes(const mrt_param_desc *p)
{
    uint64_t numel = 1;
    rt_shape_numel(p->shape, p->rank, &numel);
    return (size_t)numel * mrt_dtype_size(p->dtype);
}

/* x in the fewest significant digits (up to 17) that read back as x: "0.3", not "0.29999999999999999". */
static const char *num_str(char *buf, size_t n, double x)
{
    for (int p = 6; p <= 17; p++) {
        snprintf(buf, n, "%.*g", p, x);
        if (strtod(buf, NULL) == x)
            break;
    }
    return buf;
}

mrt_status mrt_model_save_weights(mrt_model *m, const char *path, int state)
{
    if (!m || !m->desc || !path || !*path)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_model_save_weights: model or path is NULL or empty");
    const mrt_model_desc *d = m->desc;
    if (!m->weights_loaded) /* the regions hold whatever the allocator left */
        return mrt_set_error(MRT_ERR_INVALID_ARG, "%s_%s: weights are not loaded (call %s_load_weights first)", d->name,
                             state ? "save_state" : "save_weights", d->name);
    size_t data = 0;
    for (int i = 0; i < d->n_params; i++) {
        const mrt_param_desc *p = &d->params[i];
        if (!!p->state != !!state)
            continue;
        if (p->region % 2) /* first: no setting at load time brings these back */
            return mrt_set_error(MRT_ERR_INVALID_ARG, "%s: cannot save param '%s': it was needed only while the "
                                 "weights loaded (compile with --train, which keeps every param)", path, p->name);
        data += param_bytes(p);
    }
    if (!state && mrt_blk_released(m))
        return mrt_set_error(MRT_ERR_INVALID_ARG, "%s_save_weights: its blocked convolutions released their plain "
                             "weights after loading (set MODELRT_KEEP_WEIGHTS=1 before loading to keep them)", d->name);
    if (!state && rt_matmul_packed(m))
        return mrt_set_error(MRT_ERR_INVALID_ARG, "%s_save_weights: some of its GEMMs hold their weights packed in place "
                             "after loading (set MODELRT_PACK_WEIGHTS=0 before loading to keep them plain)", d->name);
    /* The header: JSON with each tensor's dtype, shape and byte range, padded with spaces to a
     * multiple of 8 (what the safetensors library writes), then the data in that order. */
    size_t cap = 256 + (size_t)d->n_params * (64 + 12 * MRT_MAX_RANK);
    for (int i = 0; i < d->n_params; i++)
        cap += 2 * strlen(d->params[i].name);
    char *hdr = malloc(cap + 8);
    unsigned char *buf = malloc(data ? data : 1);
    if (!hdr || !buf) {
        free(hdr);
        free(buf);
        return mrt_set_error(MRT_ERR_OOM, "%s: cannot allocate %zu bytes to save the weights", path, data + cap);
    }
    /* optimizer_args: the hyperparameters this model trains with now (m->train: --lr and the
     * schedule as PROG train set them), then the optimizer statement's others (betas, ...) */
    const char *rest = d->optimizer_args ? d->optimizer_args : "";
    if (!strncmp(rest, "lr=", 3))
        rest = strchr(rest, ' ') ? strchr(rest, ' ') + 1 : "";
    char args[512], n1[32], n2[32], n3[32];
    snprintf(args, sizeof args, "lr=%s clip_grad_norm=%s warmup_steps=%lld decay_steps=%lld min_lr=%s%s%s",
             num_str(n1, sizeof n1, m->train.lr), num_str(n2, sizeof n2, m->train.clip_grad_norm),
             (long long)m->train.warmup_steps, (long long)m->train.decay_steps, num_str(n3, sizeof n3, m->train.min_lr),
             *rest ? " " : "", rest);
    cap += strlen(args) + sizeof m->run;
    size_t h = (size_t)snprintf(hdr, cap, "{\"__metadata__\":{\"format\":\"pt\",\"model\":\"%s\",\"content\":\"%s\","
                                "\"optimizer\":\"%s\",\"optimizer_args\":\"%s\",\"run\":\"%s\",\"step\":\"%lld\"}",
                                d->name, state ? "optimizer state" : "weights", d->optimizer ? d->optimizer : "", args,
                                m->run, (long long)m->step);
    size_t off = 0;
    mrt_status st = MRT_OK;
    for (int i = 0; i < d->n_params && st == MRT_OK; i++) {
        const mrt_param_desc *p = &d->params[i];
        if (!!p->state != !!state)
            continue;
        size_t bytes = param_bytes(p);
        h += (size_t)snprintf(hdr + h, cap - h, ",\"");
        for (const char *c = p->name; *c && h + 8 < cap; c++) { /* JSON string escapes */
            if (*c == '"' || *c == '\\')
                hdr[h++] = '\\';
            hdr[h++] = *c;
        }
        h += (size_t)snprintf(hdr + h, cap - h, "\":{\"dtype\":\"%s\",\"shape\":[", rt_safetensors_dtype(p->dtype));
        for (int k = 0; k < p->rank; k++)
            h += (size_t)snprintf(hdr + h, cap - h, "%s%lld", k ? "," : "", (long long)p->shape[k]);
        h += (size_t)snprintf(hdr + h, cap - h, "],\"data_offsets\":[%zu,%zu]}", off, off + bytes);
        int slot = p->region / 2;
        st = mrt_memcpy((mrt_device){MRT_DEVICE_CPU, 0}, buf + off, m->dev[slot], m->weights[slot] + p->offset, bytes,
                        m->stream[slot]);
        if (st == MRT_OK && m->dev[slot].kind == MRT_DEVICE_CUDA)
            st = mrt_stream_sync(m->dev[slot], m->stream[slot], "save_weights");
        off += bytes;
    }
    if (st != MRT_OK || h + 8 >= cap) {
        free(hdr);
        free(buf);
        return st != MRT_OK ? st : mrt_set_error(MRT_ERR_INTERNAL, "%s: the safetensors header overflowed", path);
    }
    hdr[h++] = '}';
    while (h % 8)
        hdr[h++] = ' ';
    unsigned char len[8];
    for (int k = 0; k < 8; k++)
        len[k] = (unsigned char)((uint64_t)h >> (8 * k));
    const void *parts[3] = {len, hdr, buf};
    size_t lens[3] = {8, h, data};
    st = rt_write_atomic(path, "safetensors", parts, lens, 3);
    free(hdr);
    free(buf);
    return st;
}

double mrt_train_lr(const mrt_train_cfg *c, int64_t t)
{
    if (c->warmup_steps > 0 && t <= c->warmup_steps)
        return c->lr * (double)t / (double)c->warmup_steps;
    if (c->decay_steps <= 0)
        return c->lr;
    int64_t k = t - (c->warmup_steps > 0 ? c->warmup_steps : 0);
    if (k > c->decay_steps)
        k = c->decay_steps;
    return c->min_lr + (c->lr - c->min_lr) * (1 + cos(M_PI * (double)k / (double)c->decay_steps)) / 2;
}

mrt_status mrt_model_load_state(mrt_model *m, const char *path)
{
    if (!m || !m->desc || !path || !*path)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_model_load_state: model or path is NULL or empty");
    const mrt_model_desc *d = m->desc;
    if (!d->optimizer)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "%s: model '%s' is not a training build: it has no optimizer state",
                             path, d->name);
    if (!m->weights_loaded) /* load_weights zeroes the state: it would undo this load */
        return mrt_set_error(MRT_ERR_INVALID_ARG, "%s_load_state: weights are not loaded (call %s_load_weights first, "
                             "then %s_load_state)", d->name, d->name, d->name);
    /* What the file says it is, before any tensor is read. */
    char model[256], content[64], opt[64], step[32];
    mrt_status st;
    if ((st = rt_safetensors_meta(path, "model", model, sizeof model)) != MRT_OK ||
        (st = rt_safetensors_meta(path, "content", content, sizeof content)) != MRT_OK ||
        (st = rt_safetensors_meta(path, "optimizer", opt, sizeof opt)) != MRT_OK ||
        (st = rt_safetensors_meta(path, "step", step, sizeof step)) != MRT_OK)
        return st;
    if (!*model || !*step)
        return mrt_set_error(MRT_ERR_MISMATCH, "%s: not a state file of a modelc training run (no model and step in "
                             "its metadata; PROG train --save-state writes one)", path);
    if (strcmp(model, d->name))
        return mrt_set_error(MRT_ERR_MISMATCH, "%s: the state of model '%s', not of '%s'", path, model, d->name);
    if (strcmp(content, "optimizer state"))
        return mrt_set_error(MRT_ERR_MISMATCH, "%s holds %s, not optimizer state (--save-state writes that; --save "
                             "writes the weights)", path, *content ? content : "no optimizer state");
    if (strcmp(opt, d->optimizer))
        return mrt_set_error(MRT_ERR_MISMATCH, "%s: the state of optimizer '%s', but model '%s' trains with '%s'", path,
                             *opt ? opt : "(none)", d->name, d->optimizer);
    char *end;
    errno = 0;
    long long steps = strtoll(step, &end, 10);
    if (*end || errno || steps < 0)
        return mrt_set_error(MRT_ERR_FORMAT, "%s: its step count '%s' is not a non-negative integer", path, step);
    /* The state tensors alone, each required, read into place (a GPU slot through host memory). */
    mrt_param_desc *ps = malloc(sizeof *ps * (size_t)(d->n_params + 1));
    void *regions[2 * MRT_MAX_SLOTS] = {0};
    size_t bytes[2 * MRT_MAX_SLOTS] = {0};
    int n = 0;
    st = ps ? MRT_OK : mrt_set_error(MRT_ERR_OOM, "%s: out of memory", path);
    for (int i = 0; st == MRT_OK && i < d->n_params; i++)
        if (d->params[i].state) {
            ps[n] = d->params[i];
            ps[n++].state = 0; /* required */
        }
    for (int s = 0; st == MRT_OK && s < d->n_slots; s++) {
        bytes[2 * s] = d->slots[s].weight_bytes;
        int cuda = m->dev[s].kind == MRT_DEVICE_CUDA;
        regions[2 * s] = cuda ? malloc(bytes[2 * s] ? bytes[2 * s] : 1) : m->weights[s];
        if (!regions[2 * s])
            st = mrt_set_error(MRT_ERR_OOM, "%s: cannot allocate %zu bytes of host memory", path, bytes[2 * s]);
    }
    if (st == MRT_OK && n)
        st = mrt_weights_load_regions(path, ps, n, regions, bytes, 2 * d->n_slots);
    for (int i = 0; st == MRT_OK && i < n; i++) {
        int s = ps[i].region / 2;
        if (m->dev[s].kind != MRT_DEVICE_CUDA)
            continue;
        if ((st = mrt_device_activate(m->dev[s])) == MRT_OK &&
            (st = mrt_memcpy(m->dev[s], m->weights[s] + ps[i].offset, (mrt_device){MRT_DEVICE_CPU, 0},
                             (unsigned char *)regions[2 * s] + ps[i].offset, param_bytes(&ps[i]), m->stream[s])) == MRT_OK)
            st = mrt_stream_sync(m->dev[s], m->stream[s], "load_state");
    }
    for (int s = 0; s < d->n_slots; s++)
        if (m->dev[s].kind == MRT_DEVICE_CUDA)
            free(regions[2 * s]);
    free(ps);
    if (st == MRT_OK)
        st = mrt_device_activate(m->dev[0]);
    if (st == MRT_OK)
        m->step = steps;
    return st;
}

/* ---------------------------------------------------------------- PROG train */

typedef struct train_opts {
    const char *weights, *save, *save_state, *device, *log;
    const char **data; /* [n_inputs] */
    const char *resume, *devices;
    mrt_device dev[MRT_DP_MAX];
    int ndev;
    const char **eval_files; /* [n_inputs] --eval NAME=FILE, or NULL without --eval */
    int batch, epochs, epochs_given, shuffle, quiet, time, threads;
    long long steps, save_every;
    long long warmup_steps, decay_steps; /* -1: the model's */
    double lr, clip_grad_norm, min_lr;   /* lr 0, the others -1: the model's */
    double bucket_mb;                    /* --bucket-mb; 0: $MODELRT_DDP_BUCKET_MB, else 25 */
    unsigned long long seed;
} train_opts;

static void train_usage(FILE *f, const char *prog)
{
    fprintf(f, "usage: %s train --weights INIT.safetensors --data NAME=FILE.npy ... [--batch N] [--epochs E]\n"
               "       [--steps S] [--lr LR] [--warmup-steps N] [--decay-steps N] [--min-lr LR]\n"
               "       [--clip-grad-norm X] [--shuffle] [--seed S] [--save OUT.safetensors]\n"
               "       [--save-state STATE.safetensors] [--save-every N] [--resume STATE.safetensors]\n"
               "       [--eval NAME=FILE.npy,...] [--device D | --devices LIST] [--bucket-mb MB] [--threads N]\n"
               "       [--log FILE] [--time] [--quiet]\n",
            prog);
}

static void train_help(const mrt_model_info *info, const char *prog)
{
    train_usage(stdout, prog);
    printf("\nTrains model '%s': each step runs forward, the loss, backward and the optimizer on one batch.\n",
           info->name);
    printf("\ndata (one .npy per input and target, samples along the leading axis):\n");
    for (int i = 0; i < info->n_inputs; i++)
        printf("  %-16s %s\n", info->inputs[i].name, mrt_dtype_name(info->inputs[i].dtype));
    printf("\noptions:\n"
           "  --weights FILE     the initial weights (safetensors, the params' names)\n"
           "  --data NAME=FILE   the samples of input or target NAME (every one is required)\n"
           "  --batch N          samples per step (default and most: the compiled --max-batch, %d);\n"
           "                     the last batch of an epoch may be smaller\n"
           "  --epochs E         passes over the data (default 1, or with --steps alone as many as S\n"
           "                     steps take); --steps S stops after S steps\n"
           "  --lr LR            the learning rate (default: the model's optimizer statement, %g)\n"
           "  --warmup-steps N   linear warmup: step t <= N takes lr * t / N (default %lld)\n"
           "  --decay-steps N    then cosine decay to --min-lr over N steps; 0: constant (default %lld)\n"
           "  --min-lr LR        the end of the cosine decay (default %g)\n"
           "  --clip-grad-norm X scale the gradients to a global L2 norm of at most X, as\n"
           "                     torch.nn.utils.clip_grad_norm_; 0: never (default %g)\n"
           "  --shuffle          a new order of the samples each epoch, from --seed (default 0)\n"
           "  --seed S           the seed of --shuffle and of dropout's masks (default 0)\n"
           "  --save FILE        write the trained weights there (atomically) at the end\n"
           "  --save-state FILE  write the optimizer state (and its step) there too\n"
           "  --save-every N     also write them after every N steps (checkpoints); a step whose loss is\n"
           "                     not finite stops the run and leaves the last checkpoint as it is\n"
           "  --resume FILE      continue from a --save-state file (with --weights the --save file of\n"
           "                     the same step): its step count picks the batch, the learning rate and\n"
           "                     the bias correction, so with the same --batch, --shuffle and --seed\n"
           "                     the run ends bit for bit as one that was never stopped; --epochs and\n"
           "                     --steps count from the first step of the training; --lr and the\n"
           "                     schedule's options left out are the saving run's (given: the same)\n"
           "  --eval NAME=FILE,...  after each epoch, the mean loss over these samples (every input and\n"
           "                     target) in inference mode: batch_norm's running statistics, no dropout\n"
           "  --log FILE         append one line per step: epoch, step, loss, samples/s (that step's), grad_norm, lr\n"
           "  --device D         cpu, cuda, cuda:N or auto (default)\n"
           "  --devices LIST     data-parallel: a replica on each device of LIST, all CPU (cpu:0,cpu:1)\n"
           "                     or all CUDA (cuda:0,cuda:1), each taking its contiguous shard of every\n"
           "                     batch; the gradients are averaged (weighted by shard size, in a fixed\n"
           "                     order; between GPUs by NCCL's ncclAllReduce) before one update that every\n"
           "                     replica applies: the full batch's step, up to float rounding (a loss\n"
           "                     summed over the batch is summed); a model whose ops mix batch items\n"
           "                     otherwise is refused\n"
           "  --bucket-mb MB     data-parallel (--devices, mpirun, torchrun): the gradients go in buckets\n"
           "                     of at most MB MiB (default $MODELRT_DDP_BUCKET_MB, else 25, as PyTorch\n"
           "                     DDP's bucket_cap_mb), in the order the backward pass finishes them;\n"
           "                     each bucket is all-reduced while the rest of the backward runs\n"
           "  --threads N        CPU threads for the kernels (default: $MODELRT_THREADS, else\n"
           "                     $OMP_NUM_THREADS, else the cores this process may use)\n"
           "  --time             print the median time of a step (the first step of the run excluded);\n"
           "                     data-parallel: also the buckets, and how many started their all-reduce\n"
           "                     before the backward pass ended\n"
           "  --quiet            no progress line\n"
           "\nacross processes, a rank each (rank 0 writes the checkpoints and the log):\n"
           "  mpirun -np N %s train ...   Open MPI; CPU ranks reduce with MPI_Allreduce, GPU ranks\n"
           "                     (--device cuda:N) with NCCL, its id sent by MPI_Bcast\n"
           "  torchrun --nproc-per-node N %s train ...   (no MPI) GPU ranks only: RANK, WORLD_SIZE,\n"
           "                     MASTER_ADDR and MASTER_PORT bootstrap NCCL (NCCL_COMM_ID); LOCAL_RANK\n"
           "                     picks cuda:LOCAL_RANK when --device is not given\n",
           info->max_batch, info->desc ? info->desc->train.lr : 0.0,
           info->desc ? (long long)info->desc->train.warmup_steps : 0LL,
           info->desc ? (long long)info->desc->train.decay_steps : 0LL, info->desc ? info->desc->train.min_lr : 0.0,
           info->desc ? info->desc->train.clip_grad_norm : 0.0, prog, prog);
}

static int train_parse(const mrt_model_info *info, const char *prog, int argc, char **argv, train_opts *o, int *help)
{
    o->epochs = 1;
    o->batch = info->max_batch;
    o->warmup_steps = o->decay_steps = -1;
    o->clip_grad_norm = o->min_lr = -1;
    /* a single-valued flag given twice is a mistake (which one was meant?), as the inference
     * CLI says, not a silent "last one wins" */
    static const char *const single[] = {"--weights", "--save", "--save-state", "--devices", "--resume", "--device",
                                         "--log", "--batch", "--epochs", "--steps", "--seed", "--threads",
                                         "--save-every", "--warmup-steps", "--decay-steps", "--lr", "--min-lr",
                                         "--clip-grad-norm", "--bucket-mb"};
    enum { NSINGLE = sizeof single / sizeof *single };
    const char *given[NSINGLE] = {0};
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        for (int q = 0; q < NSINGLE && v; q++)
            if (!strcmp(a, single[q])) {
                if (given[q]) {
                    fprintf(stderr, "%s train: error: %s given twice ('%s' and '%s'); give it once\n", prog, a, given[q],
                            v);
                    return 2;
                }
                given[q] = v;
            }
#define NEED()                                                                              \
    do {                                                                                    \
        if (!v) {                                                                           \
            fprintf(stderr, "%s train: error: '%s' needs a value\n", prog, a);              \
            return 2;                                                                       \
        }                                                                                   \
        i++;                                                                                \
    } while (0)
        char *end;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            *help = 1;
            return 0;
        } else if (!strcmp(a, "--weights")) {
            NEED();
            o->weights = v;
        } else if (!strcmp(a, "--save")) {
            NEED();
            o->save = v;
        } else if (!strcmp(a, "--save-state")) {
            NEED();
            o->save_state = v;
        } else if (!strcmp(a, "--devices")) {
            NEED();
            o->devices = v;
        } else if (!strcmp(a, "--resume")) {
            NEED();
            o->resume = v;
        } else if (!strcmp(a, "--device")) {
            NEED();
            o->device = v;
        } else if (!strcmp(a, "--log")) {
            NEED();
            o->log = v;
        } else if (!strcmp(a, "--shuffle")) {
            o->shuffle = 1;
        } else if (!strcmp(a, "--quiet")) {
            o->quiet = 1;
        } else if (!strcmp(a, "--time")) {
            o->time = 1;
        } else if (!strcmp(a, "--batch") || !strcmp(a, "--epochs") || !strcmp(a, "--steps") || !strcmp(a, "--seed") ||
                   !strcmp(a, "--threads") ||
                   !strcmp(a, "--save-every") || !strcmp(a, "--warmup-steps") || !strcmp(a, "--decay-steps")) {
            NEED();
            errno = 0;
            long long x = strtoll(v, &end, 10);
            int nonneg = !strcmp(a, "--seed") || !strcmp(a, "--warmup-steps") || !strcmp(a, "--decay-steps");
            if (*end || !*v || errno || x < (nonneg ? 0 : 1)) {
                fprintf(stderr, "%s train: error: %s takes a %s integer, got '%s'\n", prog, a,
                        nonneg ? "non-negative" : "positive", v);
                return 2;
            }
            if (!strcmp(a, "--threads"))
                o->threads = x > 4096 ? 4096 : (int)x;
            else if (!strcmp(a, "--save-every"))
                o->save_every = x;
            else if (!strcmp(a, "--warmup-steps"))
                o->warmup_steps = x;
            else if (!strcmp(a, "--decay-steps"))
                o->decay_steps = x;
            else if (!strcmp(a, "--batch")) {
                o->batch = x > (long long)info->max_batch * MRT_DP_MAX ? info->max_batch * MRT_DP_MAX + 1 : (int)x;
            } else if (!strcmp(a, "--epochs")) {
                o->epochs = x > 1000000 ? 1000000 : (int)x;
                o->epochs_given = 1;
            } else if (!strcmp(a, "--steps")) {
                o->steps = x;
            } else {
                o->seed = (unsigned long long)x;
            }
        } else if (!strcmp(a, "--lr") || !strcmp(a, "--min-lr") || !strcmp(a, "--clip-grad-norm") ||
                   !strcmp(a, "--bucket-mb")) {
            NEED();
            double x = 0;
            int pos = !strcmp(a, "--lr") || !strcmp(a, "--bucket-mb");
            if (!rt_parse_real(v, &x) || !(pos ? x > 0 : x >= 0)) {
                fprintf(stderr, "%s train: error: %s takes a %s number, got '%s'\n", prog, a, pos ? "positive" : "non-negative",
                        v);
                return 2;
            }
            if (!strcmp(a, "--bucket-mb"))
                o->bucket_mb = x;
            else if (pos)
                o->lr = x;
            else if (!strcmp(a, "--min-lr"))
                o->min_lr = x;
            else
                o->clip_grad_norm = x;
        } else if (!strcmp(a, "--eval")) {
            NEED();
            if (!info->eval) {
                fprintf(stderr, "%s train: error: --eval needs a program built by this modelc (its evaluation twin is "
                                "missing)\n", prog);
                return 2;
            }
            if (!o->eval_files && !(o->eval_files = calloc((size_t)info->n_inputs + 1, sizeof *o->eval_files)))
                return 1;
            /* NAME=FILE[,NAME=FILE...] */
            for (const char *s = v; *s;) {
                const char *comma = strchr(s, ','), *end = comma ? comma : s + strlen(s);
                const char *eq = memchr(s, '=', (size_t)(end - s));
                int k = -1;
                for (int j = 0; eq && j < info->n_inputs; j++)
                    if ((size_t)(eq - s) == strlen(info->inputs[j].name) && !strncmp(s, info->inputs[j].name, (size_t)(eq - s)))
                        k = j;
                if (k < 0 || eq + 1 == end) {
                    fprintf(stderr, "%s train: error: --eval takes NAME=FILE.npy[,NAME=FILE.npy...] with each NAME one of "
                                    "the model's inputs and targets, got '%.*s'\n", prog, (int)(end - s), s);
                    return 2;
                }
                if (o->eval_files[k]) {
                    fprintf(stderr, "%s train: error: --eval %s is given twice\n", prog, info->inputs[k].name);
                    return 2;
                }
                o->eval_files[k] = rt_strdup_printf("%.*s", (int)(end - eq - 1), eq + 1);
                s = comma ? comma + 1 : end;
            }
        } else if (!strcmp(a, "--data")) {
            NEED();
            const char *eq = strchr(v, '=');
            int k = -1;
            for (int j = 0; eq && j < info->n_inputs; j++)
                if ((size_t)(eq - v) == strlen(info->inputs[j].name) && !strncmp(v, info->inputs[j].name, (size_t)(eq - v)))
                    k = j;
            if (k < 0) {
                fprintf(stderr, "%s train: error: --data takes NAME=FILE.npy with NAME one of the model's inputs and "
                                "targets, got '%s'\n", prog, v);
                return 2;
            }
            if (o->data[k]) {
                fprintf(stderr, "%s train: error: --data %s is given twice\n", prog, info->inputs[k].name);
                return 2;
            }
            o->data[k] = eq + 1;
        } else {
            fprintf(stderr, "%s train: error: unknown option '%s'\n", prog, a);
            train_usage(stderr, prog);
            return 2;
        }
#undef NEED
    }
    if (o->devices && o->device) {
        fprintf(stderr, "%s train: error: --devices trains a replica on each device it lists: give it without --device\n",
                prog);
        return 2;
    }
    o->ndev = 1;
    if (o->devices) {
        if (rt_devices_parse(o->devices, o->dev, &o->ndev) != MRT_OK) {
            fprintf(stderr, "%s train: error: %s\n", prog, mrt_last_error());
            return 1;
        }
        for (int i = 1; i < o->ndev; i++)
            if (o->dev[i].kind != o->dev[0].kind) {
                fprintf(stderr, "%s train: error: --devices %s: the replicas are all CPU devices (cpu:0,cpu:1) or all "
                                "GPUs (cuda:0,cuda:1), not both\n", prog, o->devices);
                return 1;
            }
        if (info->desc && info->desc->n_slots > 1) {
            fprintf(stderr, "%s train: error: --devices: model '%s' pins regions to other devices ('on' regions)\n", prog,
                    info->name);
            return 2;
        }
    }
    if (o->batch > (long long)info->max_batch * o->ndev) {
        if (o->ndev > 1)
            fprintf(stderr, "%s train: error: --batch %d is more than %d devices take: %d each, the compiled maximum "
                            "(modelc --max-batch)\n", prog, o->batch, o->ndev, info->max_batch);
        else
            fprintf(stderr, "%s train: error: --batch %d is more than the compiled maximum %d (modelc --max-batch)\n", prog,
                    o->batch, info->max_batch);
        return 2;
    }
    if (o->save_every && !o->save) {
        fprintf(stderr, "%s train: error: --save-every needs --save FILE (and --save-state FILE for the optimizer state)\n",
                prog);
        return 2;
    }
    for (int j = 0; o->eval_files && j < info->n_inputs; j++)
        if (!o->eval_files[j]) {
            fprintf(stderr, "%s train: error: --eval has no file for %s (it takes every input and target: "
                            "--eval NAME=FILE.npy,...)\n", prog, info->inputs[j].name);
            return 2;
        }
    for (int j = 0; j < info->n_inputs; j++)
        if (!o->data[j]) {
            fprintf(stderr, "%s train: error: missing --data %s=FILE.npy\n", prog, info->inputs[j].name);
            return 2;
        }
    if (!o->weights && info->desc && info->desc->n_params > 0) {
        int real = 0;
        for (int i = 0; i < info->desc->n_params; i++)
            real += !info->desc->params[i].state;
        if (real) {
            fprintf(stderr, "%s train: error: missing --weights INIT.safetensors (the initial weights)\n", prog);
            return 2;
        }
    }
    return 0;
}

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The shape of d as the model writes it, with the batch as N: "[N,seq,8]". */
static void want_shape(char *want, size_t n, const mrt_io_desc *d, const mrt_model_info *info)
{
    snprintf(want, n, "[N");
    for (int k = 1; k < d->rank; k++) {
        size_t u = strlen(want);
        int any = 0;
        snprintf(want + u, n - u, ",");
        if (d->shape[k] != 1 || !info->n_syms)
            any = 1, snprintf(want + strlen(want), n - strlen(want), "%lld", (long long)d->shape[k]);
        for (int s = 0; s < info->n_syms; s++)
            for (int j = 0; j < d->sym[k][s]; j++, any = 1)
                snprintf(want + strlen(want), n - strlen(want), "%s%s", any ? "*" : "", s ? info->sym_names[s] : "N");
        if (!any)
            snprintf(want + strlen(want), n - strlen(want), "1");
    }
    snprintf(want + strlen(want), n - strlen(want), "]");
}

/* Read files[i] (.npy, given as `flag` NAME=FILE) for every input of info into data[i]: each
 * of the declared dtype, the batch its leading axis (all files the same number of samples, *N),
 * its other axes the declared ones; a symbolic axis other than the batch (seq) takes its size
 * from the files (dims[s], s >= 1: the same in every file, within the compiled --max-dim bound),
 * dims[0] set to 1. row[i] is the bytes of one sample and bufs[i] a buffer of `batch` of them. */
static mrt_status read_samples(const mrt_model_info *info, const char *flag, const char *const *files, mrt_tensor *data,
                               size_t *row, void **bufs, int batch, int64_t *N, int64_t *dims)
{
    int from = 0, sfrom[MRT_MAX_SYMS] = {0};
    *N = -1;
    for (int s = 0; s < MRT_MAX_SYMS; s++)
        dims[s] = s ? -1 : 1;
    for (int i = 0; i < info->n_inputs; i++) {
        const mrt_io_desc *d = &info->inputs[i];
        mrt_status st = mrt_npy_read(files[i], &data[i]);
        if (st != MRT_OK)
            return st;
        const mrt_tensor *t = &data[i];
        int ok = t->dtype == d->dtype && t->rank == d->rank && t->rank > 0 && d->sym[0][0] == 1;
        for (int s = 1; ok && s < MRT_MAX_SYMS; s++)
            ok = !d->sym[0][s] && d->shape[0] == 1;
        char got[RT_SHAPE_STR_MAX], want[RT_SHAPE_STR_MAX + 64];
        rt_shape_str(got, sizeof got, t->shape, t->rank);
        want_shape(want, sizeof want, d, info);
        /* the sizes of the symbols alone on an axis (seq, 4*seq), the batch not among them */
        for (int k = 1; ok && k < d->rank; k++) {
            int s = rt_axis_symbol(d, info, k), any = 0;
            for (int q = 0; q < info->n_syms; q++)
                any |= d->sym[k][q] != 0;
            if (!any || s < 0)
                continue; /* checked below, once the sizes are known */
            if (s == 0 || t->shape[k] % d->shape[k] || t->shape[k] < d->shape[k]) {
                ok = 0;
                break;
            }
            int64_t v = t->shape[k] / d->shape[k];
            if (v > info->sym_max[s])
                return mrt_set_error(MRT_ERR_MISMATCH, "%s %s=%s: %s%s gives %s = %lld (axis %d), more than the compiled "
                                     "maximum %lld (modelc --max-dim %s=N)", flag, d->name, files[i],
                                     mrt_dtype_name(t->dtype), got, info->sym_names[s], (long long)v, k,
                                     (long long)info->sym_max[s], info->sym_names[s]);
            if (dims[s] >= 0 && dims[s] != v) {
                int fi = sfrom[s] / MRT_MAX_RANK, fk = sfrom[s] % MRT_MAX_RANK;
                return mrt_set_error(MRT_ERR_MISMATCH, "%s %s=%s: %s%s gives %s = %lld (axis %d), but %s %s=%s has %s = "
                                     "%lld (axis %d): every file has the same %s", flag, d->name, files[i],
                                     mrt_dtype_name(t->dtype), got, info->sym_names[s], (long long)v, k, flag,
                                     info->inputs[fi].name, files[fi], info->sym_names[s], (long long)dims[s], fk,
                                     info->sym_names[s]);
            }
            if (dims[s] < 0)
                sfrom[s] = i * MRT_MAX_RANK + k;
            dims[s] = v;
        }
        if (!ok)
            return mrt_set_error(MRT_ERR_MISMATCH, "%s %s=%s: %s%s; the model takes %s%s (N samples along the leading axis)",
                                 flag, d->name, files[i], mrt_dtype_name(t->dtype), got, mrt_dtype_name(d->dtype),
                                 d->rank > 0 && d->sym[0][0] == 1 ? want : "[...] with the batch leading");
        if (*N >= 0 && t->shape[0] != *N)
            return mrt_set_error(MRT_ERR_MISMATCH, "%s %s=%s has %lld samples, but %s %s=%s has %lld: every file holds "
                                 "the same samples", flag, d->name, files[i], (long long)t->shape[0], flag,
                                 info->inputs[from].name, files[from], (long long)*N);
        *N = t->shape[0];
        from = i;
    }
    /* a symbol no file gives alone (only in products such as seq*seq): the files cannot say it */
    for (int s = 1; s < info->n_syms; s++)
        if (dims[s] < 0) {
            int used = 0;
            for (int i = 0; i < info->n_inputs; i++)
                for (int k = 1; k < info->inputs[i].rank; k++)
                    used |= info->inputs[i].sym[k][s] != 0;
            if (used)
                return mrt_set_error(MRT_ERR_MISMATCH, "%s: no file gives %s by an axis of its own (an axis of %s alone, "
                                     "as [N,%s,...])", flag, info->sym_names[s], info->sym_names[s], info->sym_names[s]);
            dims[s] = 1;
        }
    /* every axis at these sizes (products of symbols included) */
    for (int i = 0; i < info->n_inputs; i++) {
        const mrt_io_desc *d = &info->inputs[i];
        const mrt_tensor *t = &data[i];
        for (int k = 1; k < d->rank; k++) {
            int64_t want = d->shape[k];
            int batch_axis = 0;
            for (int s = 0; s < info->n_syms; s++)
                for (int j = 0; j < d->sym[k][s]; j++) {
                    batch_axis |= s == 0;
                    want *= dims[s];
                }
            if (t->shape[k] != want || batch_axis) {
                char got[RT_SHAPE_STR_MAX], ws[RT_SHAPE_STR_MAX + 64];
                rt_shape_str(got, sizeof got, t->shape, t->rank);
                want_shape(ws, sizeof ws, d, info);
                return mrt_set_error(MRT_ERR_MISMATCH, "%s %s=%s: %s%s; the model takes %s%s (N samples along the leading "
                                     "axis), axis %d of size %lld here", flag, d->name, files[i], mrt_dtype_name(t->dtype),
                                     got, mrt_dtype_name(d->dtype), ws, k, (long long)want);
            }
        }
        row[i] = t->shape[0] ? t->nbytes / (size_t)t->shape[0] : 0;
        if (!(bufs[i] = malloc(row[i] * (size_t)batch + 1)))
            return mrt_set_error(MRT_ERR_OOM, "out of memory for a batch of %s %s", flag, d->name);
    }
    if (*N < 1)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "%s: the files hold no samples", flag);
    return MRT_OK;
}

/* The evaluation twin's mean loss over the --eval samples, in batches of `batch`, with the
 * weights of the training model m copied in first. Each batch's loss is weighted by its size
 * (exact for a mean-reduced loss without ignored targets). */
static mrt_status evaluate(const mrt_model_info *info, void **emodel, mrt_model *m, const mrt_tensor *edata,
                           const size_t *erow, void **ebufs, int64_t NE, const int64_t *edims, int batch, double *mean)
{
    const mrt_model_info *ev = info->eval;
    mrt_status st = MRT_OK;
    if (!*emodel) {
        char dev[32];
        if ((st = ev->create(emodel, mrt_device_str(m->dev[0], dev, sizeof dev))) != MRT_OK)
            return st;
    }
    if ((st = mrt_model_copy_weights(*emodel, m)) != MRT_OK)
        return st;
    double sum = 0;
    if (batch > ev->max_batch)
        batch = ev->max_batch;
    for (int64_t b0 = 0; b0 < NE && st == MRT_OK; b0 += batch) {
        int nb = (int)(NE - b0 < batch ? NE - b0 : batch);
        for (int i = 0; i < ev->n_inputs; i++)
            memcpy(ebufs[i], (const unsigned char *)edata[i].data + (size_t)b0 * erow[i], (size_t)nb * erow[i]);
        int64_t dims[MRT_MAX_SYMS];
        memcpy(dims, edims, sizeof dims);
        dims[0] = nb;
        float l = 0;
        void *out[1] = {&l};
        st = ev->run(*emodel, dims, (const void *const *)ebufs, out);
        sum += (double)l * nb;
    }
    *mean = sum / (double)NE;
    return st;
}

/* ---------------------------------------------------------------- data-parallel training */

/* Replicas of a training build on CPU devices (--devices cpu:0,cpu:1): each step, every replica
 * runs forward and backward on its contiguous shard of the batch (m->defer_update: no update);
 * the gradients are reduced, sum_i (n_i / n) g_i in replica order, and the result written back to
 * every replica, bucket by bucket while the backward passes go on (rt_ddp.c: run() announces
 * each gradient once it is final, and the reducer's thread takes each bucket the replicas have
 * all finished); the gradients' squared norm and the loss (weighted alike) come from the reduced
 * values; then every replica applies the same update (desc->apply), so the weights stay
 * identical. For a loss that is a mean over the batch this is the full batch's gradient, as one
 * device computes it up to float rounding.
 * GPU replicas (--devices cuda:0,cuda:1): the same, but the reduction is NCCL's (rt_nccl.c: one
 * communicator per GPU from ncclCommInitAll, ncclAllReduce of each bucket in place with the
 * weights as a pre-multiplied sum, on each replica's communication stream as its backward
 * finishes the bucket). The squared norm comes from replica 0's reduced gradients
 * (rt_nccl_sumsq). */
typedef struct dp_train {
    const mrt_model_info *info;
    int n;
    void *rep[MRT_DP_MAX];
    rt_team *team;
    float **grad[MRT_DP_MAX]; /* [replica][k]: gradient k of each replica (desc->grad_ptrs) */
    int64_t *numel;           /* [k] */
    /* this step */
    int64_t first[MRT_DP_MAX], count[MRT_DP_MAX], batch;
    void *const *bufs;
    const size_t *row;
    const int64_t *syms; /* [MRT_MAX_SYMS]: the sizes of the symbols after the batch (dims[1..]) */
    float loss[MRT_DP_MAX];
    float loss_all, sumsq;
    mrt_status st[MRT_DP_MAX];
    char err[MRT_DP_MAX][1024];
    rt_nccl *nccl;      /* GPU replicas: a NCCL communicator each (ncclCommInitAll) */
    rt_ddp *ddp;        /* CPU replicas: the bucketed reduction during the backward pass */
    const char **names; /* [k]: the param of gradient k, for errors */
} dp_train;

static void dp_grads(void *ctx, int i)
{
    dp_train *t = ctx;
    t->st[i] = MRT_OK;
    t->loss[i] = 0;
    if (!t->count[i]) { /* a GPU replica still takes part in every all-reduce */
        if (t->ddp && (t->st[i] = rt_ddp_replica_done(t->ddp, i)) != MRT_OK)
            snprintf(t->err[i], sizeof t->err[i], "%s", mrt_last_error());
        return;
    }
    const void *in[64];
    for (int k = 0; k < t->info->n_inputs; k++)
        in[k] = (const unsigned char *)t->bufs[k] + (size_t)t->first[i] * t->row[k];
    int64_t dims[MRT_MAX_SYMS];
    memcpy(dims, t->syms, sizeof dims);
    dims[0] = t->count[i];
    void *out[1] = {&t->loss[i]};
    ((mrt_model *)t->rep[i])->defer_update = 1;
    t->st[i] = t->info->run(t->rep[i], dims, in, out);
    if (t->st[i] != MRT_OK)
        snprintf(t->err[i], sizeof t->err[i], "%s", mrt_last_error());
    /* the buckets run() did not hand over (a failed run, or a build without announcements) */
    mrt_status sd = t->ddp ? rt_ddp_replica_done(t->ddp, i) : MRT_OK;
    if (sd != MRT_OK && t->st[i] == MRT_OK) {
        t->st[i] = sd;
        snprintf(t->err[i], sizeof t->err[i], "%s", mrt_last_error());
    }
}

static void dp_apply(void *ctx, int i)
{
    dp_train *t = ctx;
    mrt_model *m = t->rep[i];
    t->st[i] = mrt_device_activate(m->dev[0]);
    if (t->st[i] == MRT_OK)
        t->st[i] = m->desc->apply(m, t->loss_all, t->sumsq);
    if (t->st[i] != MRT_OK)
        snprintf(t->err[i], sizeof t->err[i], "%s", mrt_last_error());
}

/* One data-parallel step on the batch in bufs (nb samples); *loss the batch's loss. */
static mrt_status dp_step(dp_train *t, int nb, void *const *bufs, const size_t *row, float *loss)
{
    int64_t first = 0;
    for (int i = 0; i < t->n; i++) {
        t->first[i] = first;
        t->count[i] = nb / t->n + (i < nb % t->n);
        first += t->count[i];
    }
    t->batch = nb;
    t->bufs = bufs;
    t->row = row;
    const int sum = ((mrt_model *)t->rep[0])->desc->dp_loss_sum; /* reduction=sum: the shards' losses add up */
    double w[MRT_DP_MAX], ss = 0, l = 0;
    for (int i = 0; i < t->n; i++)
        w[i] = sum ? 1.0 : (double)t->count[i] / (double)nb;
    mrt_status st = rt_ddp_begin(t->ddp, w, t->count);
    if (st != MRT_OK)
        return st;
    rt_team_run(t->team, dp_grads, t);
    /* the reducer idle again (the buckets a failed replica did not hand over included), then
     * the replicas' errors first: the cause, where the reduction's is a consequence */
    st = rt_ddp_finish(t->ddp, &ss);
    for (int i = 0; i < t->n; i++)
        if (t->st[i] != MRT_OK)
            return mrt_set_error(t->st[i], "replica %d (batch items %lld..%lld of the step): %s", i + 1,
                                 (long long)t->first[i], (long long)(t->first[i] + t->count[i] - 1), t->err[i]);
    if (st != MRT_OK)
        return st;
    for (int i = 0; i < t->n; i++)
        l += w[i] * t->loss[i];
    t->sumsq = (float)ss;
    t->loss_all = (float)l;
    rt_team_run(t->team, dp_apply, t);
    for (int i = 0; i < t->n; i++)
        if (t->st[i] != MRT_OK) {
            mrt_set_error(t->st[i], "%s", t->err[i]); /* every replica refuses alike */
            return t->st[i];
        }
    *loss = t->loss_all;
    return MRT_OK;
}

/* The replicas hold the same trained params and optimizer state (a check after the run). */
static mrt_status dp_same(const dp_train *t)
{
    const mrt_model *m0 = t->rep[0];
    const mrt_model_desc *d = m0->desc;
    for (int r = 1; r < t->n; r++)
        for (int i = 0; i < d->n_params; i++) {
            const mrt_param_desc *p = &d->params[i];
            int trained = p->state;
            for (int k = 0; k < d->n_grads && !trained; k++)
                trained = d->grad_params[k] == i;
            const mrt_model *mr = t->rep[r];
            if (!trained)
                continue;
            size_t bytes = param_bytes(p);
            unsigned char *a = malloc(bytes + 1), *b = malloc(bytes + 1);
            const mrt_device host = {MRT_DEVICE_CPU, 0};
            mrt_status st = a && b ? MRT_OK : mrt_set_error(MRT_ERR_OOM, "out of memory");
            const mrt_model *ms[2] = {m0, mr};
            for (int k = 0; k < 2 && st == MRT_OK; k++) { /* through host memory from a GPU */
                const mrt_model *mk = ms[k];
                int slot = p->region / 2;
                st = mrt_memcpy(host, k ? b : a, mk->dev[slot], mk->weights[slot] + p->offset, bytes, mk->stream[slot]);
                if (st == MRT_OK && mk->dev[slot].kind == MRT_DEVICE_CUDA)
                    st = mrt_stream_sync(mk->dev[slot], mk->stream[slot], "the replicas' check");
            }
            if (st == MRT_OK && memcmp(a, b, bytes))
                st = mrt_set_error(MRT_ERR_INTERNAL, "data-parallel replicas 1 and %d hold different '%s' after the "
                                   "run", r + 1, p->name);
            free(a);
            free(b);
            if (st != MRT_OK)
                return st;
        }
    return MRT_OK;
}

static void dp_train_free(dp_train *t, int failed)
{
    rt_ddp_destroy(t->ddp);
    rt_nccl_destroy(t->nccl, failed);
    free(t->names);
    rt_team_destroy(t->team);
    for (int i = 1; i < t->n; i++) /* replica 0 is the CLI's model */
        if (t->rep[i])
            t->info->destroy(t->rep[i]);
    for (int i = 0; i < t->n; i++)
        free(t->grad[i]);
    free(t->numel);
}

/* Replicas 1.. of the loaded and configured replica 0 (m) on the devices of `list`, with its
 * weights, optimizer state and settings; the gradients' places after one run. */
/* numel[k]: the elements of gradient k (of param d->grad_params[k]). */
static void grad_numels(const mrt_model_desc *d, int64_t *numel)
{
    for (int k = 0; k < d->n_grads; k++) {
        uint64_t n = 1;
        const mrt_param_desc *p = &d->params[d->grad_params[k]];
        rt_shape_numel(p->shape, p->rank, &n);
        numel[k] = (int64_t)n;
    }
}

static mrt_status dp_train_setup(dp_train *t, const mrt_model_info *info, mrt_model *m, const mrt_device *dev, int n,
                                 double bucket_mb)
{
    memset(t, 0, sizeof *t);
    t->info = info;
    t->n = n;
    t->rep[0] = m;
    const mrt_model_desc *d = m->desc;
    mrt_status st = MRT_OK;
    if (!d->apply || !d->grad_ptrs)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "this training build has no data-parallel step (rebuild it with this "
                             "modelc)");
    for (int i = 1; i < n && st == MRT_OK; i++) {
        char b[32];
        st = info->create(&t->rep[i], mrt_device_str(dev[i], b, sizeof b));
        if (st == MRT_OK)
            st = mrt_model_copy_weights(t->rep[i], m);
        if (st == MRT_OK) {
            mrt_model *r = t->rep[i];
            r->step = m->step;
            r->train = m->train;
            r->seed = m->seed;
        }
    }
    if (st == MRT_OK)
        st = rt_team_create(&t->team, n);
    t->numel = calloc((size_t)d->n_grads + 1, sizeof *t->numel);
    for (int i = 0; i < n && st == MRT_OK; i++)
        if (!(t->grad[i] = calloc((size_t)d->n_grads + 1, sizeof **t->grad)))
            st = mrt_set_error(MRT_ERR_OOM, "out of memory");
    for (int i = 0; i < n && st == MRT_OK; i++)
        st = d->grad_ptrs(t->rep[i], t->grad[i]);
    if (st == MRT_OK)
        grad_numels(d, t->numel);
    if (st == MRT_OK && !(t->names = calloc((size_t)d->n_grads + 1, sizeof *t->names)))
        st = mrt_set_error(MRT_ERR_OOM, "out of memory");
    for (int k = 0; st == MRT_OK && k < d->n_grads; k++)
        t->names[k] = d->params[d->grad_params[k]].name;
    if (st == MRT_OK && dev[0].kind == MRT_DEVICE_CUDA) {
        int idx[MRT_DP_MAX];
        for (int i = 0; i < n; i++)
            idx[i] = dev[i].index;
        st = rt_nccl_init_all(&t->nccl, idx, n);
    }
    if (st == MRT_OK)
        st = rt_ddp_create(&t->ddp, t->nccl ? RT_DDP_NCCL : RT_DDP_THREADS, (mrt_model *const *)t->rep, n, t->grad,
                           t->numel, bucket_mb, t->nccl, t->names);
    return st;
}

/* ---------------------------------------------------------------- across processes (MPI) */

/* `mpirun -np W PROG train ...`: every rank reads the same files and cuts the same batches; rank
 * r runs its contiguous shard of each batch (as replica r of --devices would), scales its
 * gradients by its share n_r / n, and MPI_Iallreduce sums them in place, bucket by bucket as the
 * backward pass finishes them (rt_ddp.c); the loss is summed alike, the gradients' norm computed
 * from the sums, and every rank applies the same update.
 * A failure in a step is exchanged first (a flag per rank), so every rank stops at that step
 * naming the rank that failed; a failure before the ranks have agreed on the run aborts them
 * all (MPI_Abort), so none waits for a rank that is gone.
 * GPU ranks: the gradients go through NCCL instead (a communicator whose id rank 0 makes and
 * MPI_Bcast sends, as llm.c does); the flags and the loss still through MPI. Under torchrun
 * (RANK and WORLD_SIZE, no mpirun: torchrun_env) every rank is a GPU rank, NCCL bootstraps
 * itself from NCCL_COMM_ID, and the flags, the loss and the settings' check go through NCCL too
 * (coll_allreduce_f64, coll_allgather_u64). */
typedef struct mpi_train {
    int rank, size;
    mrt_model *m;
    float **grad; /* [k] (desc->grad_ptrs) */
    int64_t *numel;
    rt_nccl *nccl;      /* GPU ranks: the gradients go through NCCL */
    rt_ddp *ddp;        /* the buckets during the backward pass: MPI_Iallreduce, or NCCL on GPU ranks */
    int torchrun;       /* no MPI: the host's collectives go through NCCL too */
    const char **names; /* [k]: the param of gradient k, for errors */
    const int64_t *syms; /* [MRT_MAX_SYMS]: the sizes of the symbols after the batch (dims[1..]) */
} mpi_train;

/* The host's collectives of the ranks: MPI under mpirun, NCCL under torchrun. */
static mrt_status coll_allreduce_f64(mpi_train *t, double *x, int n)
{
    return t->torchrun ? rt_nccl_host_allreduce_f64(t->nccl, x, n) : rt_mpi_allreduce_f64(x, n);
}

static mrt_status coll_allgather_u64(mpi_train *t, const uint64_t *mine, uint64_t *all, int n)
{
    return t->torchrun ? rt_nccl_host_allgather_u64(t->nccl, mine, all, n) : rt_mpi_allgather_u64(mine, all, n);
}

static mrt_status mpi_step(mpi_train *t, const mrt_model_info *info, int nb, void *const *bufs, const size_t *row,
                           float *loss, int64_t stepno)
{
    const mrt_model_desc *d = t->m->desc;
    int64_t cnt = nb / t->size + (t->rank < nb % t->size);
    int64_t first = (int64_t)t->rank * (nb / t->size) + (t->rank < nb % t->size ? t->rank : nb % t->size);
    float l = 0;
    mrt_status st = MRT_OK;
    double w = d->dp_loss_sum ? 1.0 : (double)cnt / (double)nb, ss = 0; /* a summed loss: the shards' sums add up */
    if ((st = rt_ddp_begin(t->ddp, &w, &cnt)) != MRT_OK)
        return st;
    if (cnt) {
        const void *in[64];
        for (int k = 0; k < info->n_inputs; k++)
            in[k] = (const unsigned char *)bufs[k] + (size_t)first * row[k];
        int64_t dims[MRT_MAX_SYMS];
        memcpy(dims, t->syms, sizeof dims);
        dims[0] = cnt;
        void *out[1] = {&l};
        t->m->defer_update = 1;
        st = info->run(t->m, dims, in, out);
    }
    char mine[1024];
    snprintf(mine, sizeof mine, "%s", mrt_last_error());
    /* the buckets not posted during the backward (all of them when it failed), then the wait */
    mrt_status sr = rt_ddp_finish(t->ddp, &ss);
    if (sr != MRT_OK)
        return st != MRT_OK ? mrt_set_error(st, "rank %d (batch items %lld..%lld of the step): %s", t->rank,
                                            (long long)first, (long long)(first + cnt - 1), mine) : sr;
    double flag[MRT_DP_MAX * 16] = {0};
    int nf = t->size < MRT_DP_MAX * 16 ? t->size : MRT_DP_MAX * 16;
    if (t->rank < nf)
        flag[t->rank] = st != MRT_OK;
    if (coll_allreduce_f64(t, flag, nf) != MRT_OK) /* this rank's own failure, when it has one, is the cause */
        return st != MRT_OK ? mrt_set_error(st, "rank %d (batch items %lld..%lld of the step): %s", t->rank,
                                            (long long)first, (long long)(first + cnt - 1), mine) : MRT_ERR_DEVICE;
    for (int r = 0; r < nf; r++)
        if (flag[r] != 0)
            return r == t->rank ? mrt_set_error(st, "rank %d (batch items %lld..%lld of the step): %s", r, (long long)first,
                                                (long long)(first + cnt - 1), mine)
                                : mrt_set_error(MRT_ERR_INVALID_ARG, "rank %d failed at step %lld (its error is in its "
                                                "output); this rank stops there too", r, (long long)stepno);
    double lw = w * l;
    if ((st = coll_allreduce_f64(t, &lw, 1)) != MRT_OK)
        return st;
    *loss = (float)lw;
    return d->apply(t->m, (float)lw, (float)ss);
}

/* A 64-bit hash of bytes (FNV-1a over 8-byte words, the tail bytewise), chained from h. */
static uint64_t hash_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, c + i, 8);
        h = (h ^ w) * 1099511628211ull;
        h ^= h >> 29;
    }
    for (; i < n; i++)
        h = (h ^ c[i]) * 1099511628211ull;
    return h;
}

#define HASH0 1469598103934665603ull

/* A hash of every param of m as it is now (the weights, and the optimizer state a --resume
 * loaded), read through host memory from a GPU. */
static mrt_status hash_params(const mrt_model *m, uint64_t *out)
{
    const mrt_model_desc *d = m->desc;
    uint64_t h = HASH0;
    const mrt_device host = {MRT_DEVICE_CPU, 0};
    for (int i = 0; i < d->n_params; i++) {
        const mrt_param_desc *p = &d->params[i];
        size_t bytes = param_bytes(p);
        int slot = p->region / 2;
        if (p->region % 2) /* load-only: nothing resident to compare */
            continue;
        unsigned char *a = malloc(bytes + 1);
        if (!a)
            return mrt_set_error(MRT_ERR_OOM, "out of memory hashing '%s' (%zu bytes)", p->name, bytes);
        mrt_status st = mrt_memcpy(host, a, m->dev[slot], m->weights[slot] + p->offset, bytes, m->stream[slot]);
        if (st == MRT_OK && m->dev[slot].kind == MRT_DEVICE_CUDA)
            st = mrt_stream_sync(m->dev[slot], m->stream[slot], "the ranks' check of the weights");
        if (st == MRT_OK)
            h = hash_bytes(hash_bytes(h, p->name, strlen(p->name)), a, bytes);
        free(a);
        if (st != MRT_OK)
            return st;
    }
    *out = h;
    return MRT_OK;
}

/* One thing every rank must agree on before the first step: its name for the error, its value
 * as a number (kind: 0 a count, 1 a hash, 2 a double's bits). */
typedef struct agree_item {
    char what[96];
    uint64_t v;
    int kind;
} agree_item;

/* What every rank must agree on before the first step (and before NCCL is set up, so that a
 * rank on another kind of device is named rather than waited for): the model (its name and
 * params, the hash of its compiled graph, the optimizer's hyper-parameters), every setting the
 * steps use (the learning rate and its schedule, clipping, the batch, epochs, steps, seed and
 * shuffle), the step it starts at (--resume), the device kind, the contents of each data file
 * and the weights and optimizer state it starts from. Fills it[0..*n). */
static mrt_status mpi_fingerprint(const mrt_model_info *info, const mrt_model *m, int64_t N, const train_opts *o,
                                  const mrt_tensor *data, const mrt_tensor *edata, agree_item *it, int *n)
{
    const mrt_model_desc *d = m->desc;
    int k = 0;
#define ITEM(W, V, K) (snprintf(it[k].what, sizeof it[k].what, "%s", W), it[k].v = (V), it[k++].kind = (K))
    uint64_t h = hash_bytes(HASH0, d->name, strlen(d->name));
    for (int i = 0; i < d->n_params; i++) {
        h = hash_bytes(h, d->params[i].name, strlen(d->params[i].name) + 1);
        h = hash_bytes(h, d->params[i].shape, sizeof *d->params[i].shape * (size_t)d->params[i].rank);
    }
    ITEM("model (its name, params and their shapes)", h, 1);
    ITEM("compiled model (the hash of its graph: another build of the .model, or another .model)", d->graph_hash, 1);
    const char *args = d->optimizer_args ? d->optimizer_args : "";
    ITEM("optimizer and its hyper-parameters in the .model", hash_bytes(hash_bytes(HASH0, d->optimizer ? d->optimizer : "",
                                                                                  d->optimizer ? strlen(d->optimizer) : 0),
                                                                       args, strlen(args)), 1);
    uint64_t bits;
    memcpy(&bits, &m->train.lr, 8);
    ITEM("learning rate (--lr, or the .model's lr)", bits, 2);
    memcpy(&bits, &m->train.clip_grad_norm, 8);
    ITEM("--clip-grad-norm", bits, 2);
    ITEM("--warmup-steps", (uint64_t)m->train.warmup_steps, 0);
    ITEM("--decay-steps", (uint64_t)m->train.decay_steps, 0);
    memcpy(&bits, &m->train.min_lr, 8);
    ITEM("--min-lr", bits, 2);
    ITEM("number of samples", (uint64_t)N, 0);
    ITEM("--batch", (uint64_t)o->batch, 0);
    ITEM("--epochs", (uint64_t)o->epochs, 0);
    ITEM("--steps", (uint64_t)o->steps, 0);
    ITEM("--seed", o->seed, 0);
    ITEM("--shuffle", (uint64_t)o->shuffle, 0);
    ITEM("step it starts from (--resume)", (uint64_t)m->step, 0);
    ITEM("device kind (0 CPU, 1 CUDA)", (uint64_t)(m->dev[0].kind == MRT_DEVICE_CUDA), 0);
    for (int i = 0; i < info->n_inputs; i++) {
        char w[96];
        snprintf(w, sizeof w, "contents of --data %s", info->inputs[i].name);
        ITEM(w, hash_bytes(HASH0, data[i].data, data[i].nbytes), 1);
        snprintf(w, sizeof w, "contents of --eval %s", info->inputs[i].name);
        ITEM(w, o->eval_files ? hash_bytes(HASH0, edata[i].data, edata[i].nbytes) : 0, 1);
    }
    mrt_status st = hash_params(m, &h);
    if (st != MRT_OK)
        return st;
    ITEM("initial weights and optimizer state (--weights, --resume)", h, 1);
#undef ITEM
    *n = k;
    return MRT_OK;
}

/* Every rank's fingerprint gathered and compared: a mismatch is an error on every rank, naming
 * the first rank that differs from rank 0 and the item. Sets *synced once the ranks have
 * exchanged them (from then on a failure is every rank's). */
static mrt_status mpi_agree(mpi_train *t, const mrt_model_info *info, int64_t N, const train_opts *o,
                            const mrt_tensor *data, const mrt_tensor *edata, int *synced)
{
    int nf = 0;
    agree_item *it = calloc((size_t)20 + 2 * (size_t)info->n_inputs, sizeof *it);
    if (!it)
        return mrt_set_error(MRT_ERR_OOM, "out of memory");
    mrt_status st = mpi_fingerprint(info, t->m, N, o, data, edata, it, &nf);
    uint64_t *mine = st == MRT_OK ? calloc((size_t)nf + 1, sizeof *mine) : NULL;
    uint64_t *all = st == MRT_OK ? calloc((size_t)t->size * (size_t)nf + 1, sizeof *all) : NULL;
    if (st == MRT_OK && (!mine || !all))
        st = mrt_set_error(MRT_ERR_OOM, "out of memory");
    for (int f = 0; st == MRT_OK && f < nf; f++)
        mine[f] = it[f].v;
    if (st == MRT_OK && (st = coll_allgather_u64(t, mine, all, nf)) == MRT_OK)
        *synced = 1;
    for (int r = 1; st == MRT_OK && r < t->size; r++)
        for (int f = 0; st == MRT_OK && f < nf; f++)
            if (all[(size_t)r * nf + f] != all[f]) {
                char a[40], b[40];
                uint64_t va = all[(size_t)r * nf + f], vb = all[f];
                double x, y;
                memcpy(&x, &va, 8);
                memcpy(&y, &vb, 8);
                if (it[f].kind == 1) {
                    snprintf(a, sizeof a, "hash %016llx", (unsigned long long)va);
                    snprintf(b, sizeof b, "%016llx", (unsigned long long)vb);
                } else if (it[f].kind == 2) {
                    snprintf(a, sizeof a, "%.9g", x);
                    snprintf(b, sizeof b, "%.9g", y);
                } else {
                    snprintf(a, sizeof a, "%lld", (long long)va);
                    snprintf(b, sizeof b, "%lld", (long long)vb);
                }
                st = mrt_set_error(MRT_ERR_MISMATCH, "rank %d disagrees with rank 0 on the %s (%s, rank 0 has %s): every "
                                   "rank runs the same model, data, weights and options", r, it[f].what, a, b);
            }
    free(it);
    free(mine);
    free(all);
    return st;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A plain decimal (no sign, no leading zero but "0", at most 9 digits) into *v; 0 if it is not. */
static int env_decimal(const char *s, long *v)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > 9 || (s[0] == '0' && n > 1) || strspn(s, "0123456789") != n)
        return 0;
    *v = strtol(s, NULL, 10);
    return 1;
}

/* torchrun's environment, for a process not started by mpirun: RANK and WORLD_SIZE (both, or
 * neither), LOCAL_RANK (optional: -1 when unset), MASTER_ADDR and MASTER_PORT (needed when
 * WORLD_SIZE > 1, unless NCCL_COMM_ID is set). Sets NCCL_COMM_ID=MASTER_ADDR:MASTER_PORT (an
 * NCCL_COMM_ID already set wins), so that NCCL's own bootstrap joins the ranks: rank 0 listens
 * there, every rank's ncclGetUniqueId gives the same id. When torchrun's agent holds its store
 * on MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True, what torchrun's static rendezvous sets),
 * NCCL listens on MASTER_PORT + 1 instead. *world 1: not torchrun (or a world of one). Returns 0,
 * or after printing the error the exit status (2: the environment is wrong). */
static int torchrun_env(const char *prog, int *rank, int *world, int *local_rank)
{
    *rank = 0;
    *world = 1;
    *local_rank = -1;
    const char *ompi = getenv("OMPI_COMM_WORLD_SIZE");
    if (ompi && *ompi)
        return 0; /* mpirun's ranks: rt_mpi_start */
    const char *r = getenv("RANK"), *w = getenv("WORLD_SIZE"), *lr = getenv("LOCAL_RANK");
    if (!r && !w)
        return 0;
    long rv = 0, wv = 0, lv = 0;
    if (!r || !w) {
        fprintf(stderr, "%s train: error: %s is set but %s is not: a rank of torchrun has both (RANK=0..WORLD_SIZE-1)\n",
                prog, r ? "RANK" : "WORLD_SIZE", r ? "WORLD_SIZE" : "RANK");
        return 2;
    }
    if (!env_decimal(w, &wv) || wv < 1) {
        fprintf(stderr, "%s train: error: WORLD_SIZE='%s' is not a positive integer (torchrun sets the number of "
                        "ranks)\n", prog, w);
        return 2;
    }
    if (!env_decimal(r, &rv)) {
        fprintf(stderr, "%s train: error: RANK='%s' is not a non-negative integer\n", prog, r);
        return 2;
    }
    if (rv >= wv) {
        fprintf(stderr, "%s train: error: RANK=%ld is not below WORLD_SIZE=%ld (ranks are 0..%ld)\n", prog, rv, wv,
                wv - 1);
        return 2;
    }
    if (lr && !env_decimal(lr, &lv)) {
        fprintf(stderr, "%s train: error: LOCAL_RANK='%s' is not a non-negative integer\n", prog, lr);
        return 2;
    }
    if (wv > 1 && !getenv("NCCL_COMM_ID")) {
        const char *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
        long pv = 0;
        if (!addr || !*addr || !port || !*port) {
            fprintf(stderr, "%s train: error: WORLD_SIZE=%ld, but %s is not set: the ranks meet at "
                            "MASTER_ADDR:MASTER_PORT (or set NCCL_COMM_ID=HOST:PORT)\n", prog, wv,
                    !addr || !*addr ? "MASTER_ADDR" : "MASTER_PORT");
            return 2;
        }
        if (!env_decimal(port, &pv) || pv < 1 || pv > 65535) {
            fprintf(stderr, "%s train: error: MASTER_PORT='%s' is not a port (1..65535)\n", prog, port);
            return 2;
        }
        const char *agent = getenv("TORCHELASTIC_USE_AGENT_STORE");
        if (agent && !strcmp(agent, "True"))
            pv = pv < 65535 ? pv + 1 : pv - 1;
        char id[320];
        snprintf(id, sizeof id, strchr(addr, ':') && addr[0] != '[' ? "[%s]:%ld" : "%s:%ld", addr, pv);
        setenv("NCCL_COMM_ID", id, 1);
    }
    *rank = (int)rv;
    *world = (int)wv;
    *local_rank = lr ? (int)lv : -1;
    return 0;
}

int rt_train_main(const mrt_model_info *info, int argc, char **argv, const char *prog)
{
    train_opts o;
    memset(&o, 0, sizeof o);
    o.data = calloc((size_t)info->n_inputs + 1, sizeof *o.data);
    int help = 0, rc = 2;
    if (!o.data)
        return 1;
    if (!info->train || !info->desc) {
        fprintf(stderr, "%s: error: 'train' needs a training build of the model (modelc --train)\n", prog);
        free(o.data);
        return 2;
    }
    if ((rc = train_parse(info, prog, argc, argv, &o, &help)) != 0 || help) {
        if (help)
            train_help(info, prog);
        for (int i = 0; o.eval_files && i < info->n_inputs; i++)
            free((char *)o.eval_files[i]);
        free(o.eval_files);
        free(o.data);
        return help ? 0 : rc;
    }
    rc = 1;
    int nin = info->n_inputs;
    /* Under mpirun: this process's rank; rank 0 alone writes the checkpoints and the log and
     * prints progress. */
    int rank = 0, world = 1, mpi_synced = 0, torchrun = 0, local_rank = -1;
    char local_dev[32];
    if ((rc = torchrun_env(prog, &rank, &world, &local_rank)) != 0) {
        free(o.data);
        return rc;
    }
    rc = 1;
    torchrun = world > 1;
    if (torchrun) {
        /* torchrun without MPI: GPU ranks only, NCCL bootstrapping itself */
        if (o.devices) {
            fprintf(stderr, "%s train: error: under torchrun each rank trains on one device: give --device (or let "
                            "LOCAL_RANK pick cuda:LOCAL_RANK), not --devices\n", prog);
            free(o.data);
            return 2;
        }
        if (!o.device && local_rank >= 0) {
            snprintf(local_dev, sizeof local_dev, "cuda:%d", local_rank);
            o.device = local_dev;
        }
        mrt_device want;
        int is_auto = 0;
        if (o.device && *o.device && strcmp(o.device, "auto") && mrt_device_parse(o.device, &want, &is_auto) == MRT_OK && !is_auto &&
            want.kind == MRT_DEVICE_CPU) {
            fprintf(stderr, "%s train: error: rank %d of %d (torchrun's RANK and WORLD_SIZE) on %s: ranks on CPUs "
                            "reduce their gradients with MPI, so start them with mpirun -np %d (Open MPI); under "
                            "torchrun every rank trains on a GPU (--device cuda:N, or LOCAL_RANK)\n", prog, rank, world,
                    o.device, world);
            free(o.data);
            return 2;
        }
    } else if (rt_mpi_start(&rank, &world) != MRT_OK) {
        fprintf(stderr, "%s train: error: %s\n", prog, mrt_last_error());
        free(o.data);
        return 1;
    }
    /* data parallelism gives the one-device step only when no op mixes batch items beyond what
     * it does as DDP does (modelc: graph_dp_trainable) */
    if ((o.ndev > 1 || world > 1) && info->desc->dp_refuse) {
        fprintf(stderr, "%s train: error: model '%s' cannot train data-parallel (%s): %s; train it on one device\n", prog,
                info->name, o.ndev > 1 ? "--devices" : torchrun ? "torchrun" : "mpirun", info->desc->dp_refuse);
        if (world > 1 && !torchrun)
            rt_mpi_abort(2);
        free(o.data);
        return 2;
    }
    if (world > 1 && o.devices && !torchrun) {
        fprintf(stderr, "%s train: error: under mpirun each rank trains on one device: give --device, not --devices\n",
                prog);
        rt_mpi_abort(2);
        return 2;
    }
    if (rank > 0) {
        o.save = o.save_state = o.log = NULL;
        o.quiet = 1;
        o.time = 0;
        o.save_every = 0;
    }
    /* The files written (--save, --save-state, --log): none of them a file the training reads,
     * nor two of them one file; checked before anything is read or run. A resumed run may write
     * its checkpoint where it read it (--weights and --save, --resume and --save-state one file
     * each): both are read whole before the first step, and written atomically. */
    {
        const char *outs[3] = {o.save, o.save_state, o.log}, *outw[3] = {"--save", "--save-state", "--log"};
        const char **readers = calloc((size_t)2 * nin + 2, sizeof *readers), **rw = calloc((size_t)2 * nin + 2, sizeof *rw);
        rt_dest d[3];
        memset(d, 0, sizeof d);
        mrt_status st = readers && rw ? MRT_OK : mrt_set_error(MRT_ERR_OOM, "out of memory");
        if (st == MRT_OK) {
            readers[0] = o.weights;
            rw[0] = "the weights file";
            readers[1] = o.resume;
            rw[1] = "the --resume file";
            for (int i = 0; i < nin; i++) {
                readers[i + 2] = o.data[i];
                rw[i + 2] = rt_strdup_printf("--data %s", info->inputs[i].name);
                readers[nin + i + 2] = o.eval_files ? o.eval_files[i] : NULL;
                rw[nin + i + 2] = rt_strdup_printf("--eval %s", info->inputs[i].name);
            }
        }
        for (int i = 0; i < 3 && st == MRT_OK; i++) {
            if (!outs[i])
                continue;
            readers[0] = o.resume && i == 0 ? NULL : o.weights;
            readers[1] = o.resume && i == 1 ? NULL : o.resume;
            st = rt_output_check(outw[i], outs[i], readers, rw, 2 * nin + 2, &d[i]);
            for (int j = 0; j < i && st == MRT_OK; j++)
                if (outs[j] && rt_dest_same(&d[i], &d[j]))
                    st = mrt_set_error(MRT_ERR_INVALID_ARG, "%s and %s name one file (%s); name two files", outw[j],
                                       outw[i], outs[i]);
        }
        for (int i = 0; i < 3; i++)
            free(d[i].name);
        for (int i = 0; rw && i < 2 * nin; i++)
            free((char *)rw[i + 2]);
        free(readers);
        free(rw);
        if (st != MRT_OK) {
            fprintf(stderr, "%s train: error: %s\n", prog, mrt_last_error());
            free(o.data);
            return 1;
        }
        if (!o.save && !o.quiet)
            fprintf(stderr, "%s train: note: no --save: the trained weights are not written\n", prog);
    }
    mrt_tensor *data = calloc((size_t)nin + 1, sizeof *data);
    void **bufs = calloc((size_t)nin + 1, sizeof *bufs);
    size_t *row = calloc((size_t)nin + 1, sizeof *row);
    mrt_tensor *edata = calloc((size_t)nin + 1, sizeof *edata);
    void **ebufs = calloc((size_t)nin + 1, sizeof *ebufs);
    size_t *erow = calloc((size_t)nin + 1, sizeof *erow);
    void *emodel = NULL;
    dp_train dpt, *dp = NULL;
    mpi_train mt = {0};
    int64_t *order = NULL, nt = 0;
    double *times = NULL;
    int *overlap = NULL; /* --time, data-parallel: per step, the buckets reduced during the backward (rt_ddp_overlapped) */
    void *model = NULL;
    FILE *log = NULL;
    float loss = 0;
    if (!data || !bufs || !row || !edata || !ebufs || !erow)
        goto oom;
    /* The data (and the evaluation data): every file read and checked against the model before
     * the first step. */
    int64_t N = -1, NE = -1, sdims[MRT_MAX_SYMS], edims[MRT_MAX_SYMS];
    if (read_samples(info, "--data", o.data, data, row, bufs, o.batch, &N, sdims) != MRT_OK)
        goto fail;
    if (o.eval_files && read_samples(info, "--eval", o.eval_files, edata, erow, ebufs, o.batch, &NE, edims) != MRT_OK)
        goto fail;
    order = malloc(sizeof *order * (size_t)N);
    if (!order)
        goto oom;
    for (int64_t i = 0; i < N; i++)
        order[i] = i;
    int threads = 0;
    if (mrt_set_threads(o.ndev > 1 ? 1 : o.threads, &threads) != MRT_OK) /* a core per CPU replica */
        goto fail;
    char dev0[32];
    if (info->create(&model, o.devices ? mrt_device_str(o.dev[0], dev0, sizeof dev0) : o.device) != MRT_OK)
        goto fail;
    if (info->load_weights(model, o.weights) != MRT_OK)
        goto fail;
    mrt_model *m = model;
    snprintf(m->run, sizeof m->run, "batch=%d shuffle=%d seed=%llu", o.batch, o.shuffle, o.seed);
    if (o.resume && mrt_model_load_state(m, o.resume) != MRT_OK)
        goto fail;
    if (o.resume) { /* the same batches as the run that saved it, or the resumed run is another run */
        char was[sizeof m->run];
        if (rt_safetensors_meta(o.resume, "run", was, sizeof was) != MRT_OK)
            goto fail;
        if (*was && strcmp(was, m->run)) {
            mrt_set_error(MRT_ERR_MISMATCH, "--resume %s was saved by a run with %s, this one has %s: give the same "
                          "--batch, --shuffle and --seed to continue it", o.resume, was, m->run);
            goto fail;
        }
        /* the weights of the same checkpoint: a run stopped between writing the two files (or
         * two checkpoints mixed up) leaves weights and state of different steps */
        char wstep[32], sstep[32], wrun[sizeof m->run];
        if (rt_safetensors_meta(o.weights, "step", wstep, sizeof wstep) != MRT_OK ||
            rt_safetensors_meta(o.resume, "step", sstep, sizeof sstep) != MRT_OK ||
            rt_safetensors_meta(o.weights, "run", wrun, sizeof wrun) != MRT_OK)
            goto fail;
        if (strcmp(wstep, sstep) || strcmp(wrun, was)) {
            mrt_set_error(MRT_ERR_MISMATCH, "--weights %s holds %s%s%s%s, but --resume %s holds step %s%s%s: a "
                          "checkpoint's weights and state are of one step of one run (a run stopped between writing "
                          "the two leaves them apart; give the --save file written with this --save-state file)",
                          o.weights, *wstep ? "step " : "no step (not a checkpoint of PROG train)", wstep,
                          *wrun && strcmp(wrun, was) ? " of a run with " : "", *wrun && strcmp(wrun, was) ? wrun : "",
                          o.resume, sstep, *was && strcmp(wrun, was) ? " of a run with " : "",
                          *was && strcmp(wrun, was) ? was : "");
            goto fail;
        }
    }
    /* the hyperparameters: an option given is the one the saving run used, an option left out
     * is taken from the state file (optimizer_args), else the model's */
    double *cfg_d[3] = {&o.lr, &o.clip_grad_norm, &o.min_lr};
    long long *cfg_i[2] = {&o.warmup_steps, &o.decay_steps};
    static const char *const cfg_key[5] = {"lr", "clip_grad_norm", "min_lr", "warmup_steps", "decay_steps"};
    if (o.resume) {
        char args[512];
        if (rt_safetensors_meta(o.resume, "optimizer_args", args, sizeof args) != MRT_OK)
            goto fail;
        for (int k = 0; k < 5; k++) {
            char pat[32];
            snprintf(pat, sizeof pat, "%s=", cfg_key[k]);
            const char *at = NULL;
            for (const char *c = args; (c = strstr(c, pat)); c++)
                if (c == args || c[-1] == ' ') {
                    at = c + strlen(pat);
                    break;
                }
            if (!at)
                continue; /* a state file of an older modelc: the model's, or the option's */
            char *end;
            double v = strtod(at, &end);
            if (end == at || (*end && *end != ' ')) {
                mrt_set_error(MRT_ERR_FORMAT, "--resume %s: its %s in optimizer_args is not a number", o.resume, pat);
                goto fail;
            }
            int given = k == 0 ? o.lr > 0 : k < 3 ? *cfg_d[k] >= 0 : *cfg_i[k - 3] >= 0;
            double mine = k < 3 ? *cfg_d[k] : (double)*cfg_i[k - 3];
            if (given && mine != v) {
                char a1[32], a2[32];
                mrt_set_error(MRT_ERR_MISMATCH, "--%s %s, but --resume %s was saved by a run with %s=%s: give the "
                              "same value to continue it (or leave the option out to take the saved one)",
                              k == 1 ? "clip-grad-norm" : k == 2 ? "min-lr" : k == 3 ? "warmup-steps"
                              : k == 4 ? "decay-steps" : "lr", num_str(a1, sizeof a1, mine), o.resume, cfg_key[k],
                              num_str(a2, sizeof a2, v));
                goto fail;
            }
            if (k < 3)
                *cfg_d[k] = v;
            else
                *cfg_i[k - 3] = (long long)v;
        }
    }
    if (o.lr > 0)
        m->train.lr = o.lr;
    if (o.warmup_steps >= 0)
        m->train.warmup_steps = o.warmup_steps;
    if (o.decay_steps >= 0)
        m->train.decay_steps = o.decay_steps;
    if (o.min_lr >= 0)
        m->train.min_lr = o.min_lr;
    if (o.clip_grad_norm >= 0)
        m->train.clip_grad_norm = o.clip_grad_norm;
    if (m->train.min_lr > m->train.lr) {
        mrt_set_error(MRT_ERR_INVALID_ARG, "the minimum learning rate %g is above the learning rate %g", m->train.min_lr,
                      m->train.lr);
        goto fail;
    }
    m->seed = o.seed;
    if (o.ndev > 1) {
        dp = &dpt;
        if (dp_train_setup(dp, info, m, o.dev, o.ndev, o.bucket_mb) != MRT_OK)
            goto fail;
        dp->syms = sdims;
    }
    mt = (mpi_train){rank, world, m, NULL, NULL, NULL, NULL, torchrun, NULL, sdims};
    /* every rank the same model, data, weights and settings, and the same kind of device:
     * checked before the first step and, under mpirun, before NCCL is set up (a GPU rank would
     * wait in ncclCommInitRank for a CPU rank that never comes) */
    if (world > 1 && !torchrun && mpi_agree(&mt, info, N, &o, data, edata, &mpi_synced) != MRT_OK)
        goto fail;
    if (world > 1 && m->dev[0].kind == MRT_DEVICE_CUDA) {
        /* a NCCL communicator: under mpirun rank 0 makes the id and MPI_Bcast sends it (as llm.c
         * does); under torchrun every rank's ncclGetUniqueId gives the same id (NCCL_COMM_ID) */
        unsigned char id[RT_NCCL_ID_BYTES] = {0};
        if ((torchrun || rank == 0) && rt_nccl_unique_id(id) != MRT_OK)
            goto fail;
        if (!torchrun && rt_mpi_bcast(id, RT_NCCL_ID_BYTES, 0) != MRT_OK)
            goto fail;
        if (rt_nccl_init_rank(&mt.nccl, m->dev[0].index, world, rank, id) != MRT_OK)
            goto fail;
    } else if (torchrun) {
        char dev[32];
        mrt_set_error(MRT_ERR_INVALID_ARG, "rank %d of %d (torchrun's RANK and WORLD_SIZE) runs on %s: ranks on CPUs "
                      "reduce their gradients with MPI, so start them with mpirun -np %d (Open MPI); under torchrun "
                      "every rank trains on a GPU (--device cuda:N, or LOCAL_RANK)", rank, world,
                      mrt_device_str(m->dev[0], dev, sizeof dev), world);
        goto fail;
    }
    if (world > 1) {
        const mrt_model_desc *d = m->desc;
        if (!d->apply || !d->grad_ptrs) {
            mrt_set_error(MRT_ERR_INVALID_ARG, "this training build has no data-parallel step (rebuild it with this modelc)");
            goto fail;
        }
        mt.grad = calloc((size_t)d->n_grads + 1, sizeof *mt.grad);
        mt.numel = calloc((size_t)d->n_grads + 1, sizeof *mt.numel);
        if (!mt.grad || !mt.numel)
            goto oom;
        if (d->grad_ptrs(m, mt.grad) != MRT_OK)
            goto fail;
        grad_numels(d, mt.numel);
        if (!(mt.names = calloc((size_t)d->n_grads + 1, sizeof *mt.names)))
            goto oom;
        for (int k = 0; k < d->n_grads; k++)
            mt.names[k] = d->params[d->grad_params[k]].name;
        if (rt_ddp_create(&mt.ddp, mt.nccl ? RT_DDP_NCCL : RT_DDP_MPI, &m, 1, &mt.grad, mt.numel, o.bucket_mb, mt.nccl,
                          mt.names) != MRT_OK)
            goto fail;
        /* under torchrun the ranks' check goes through NCCL: here, once it is set up (every rank a GPU) */
        if (torchrun && mpi_agree(&mt, info, N, &o, data, edata, &mpi_synced) != MRT_OK)
            goto fail;
    }
    if (o.log && !(log = fopen(o.log, "a"))) {
        mrt_set_error(MRT_ERR_IO, "--log %s: cannot open: %s", o.log, strerror(errno));
        goto fail;
    }
    int tty = !o.quiet && isatty(STDERR_FILENO);
    int64_t steps_per_epoch = (N + o.batch - 1) / o.batch, step = 0;
    if (o.steps && !o.epochs_given) /* --steps alone: as many epochs as those steps take */
        o.epochs = (int)((o.steps + steps_per_epoch - 1) / steps_per_epoch);
    const int64_t skip = m->step; /* a resumed run replays the order up to its step without running */
    int64_t total = (int64_t)o.epochs * steps_per_epoch;
    if (o.steps && o.steps < total)
        total = o.steps;
    if (skip >= total) {
        mrt_set_error(MRT_ERR_INVALID_ARG, "--resume %s is at step %lld, and this run ends at step %lld (--epochs and "
                      "--steps count from the first step of the training): nothing to train", o.resume, (long long)skip,
                      (long long)total);
        goto fail;
    }
    long long saved_at = -1; /* the step of the last checkpoint written */
    if (o.time && (!(times = malloc(sizeof *times * (size_t)total)) || !(overlap = calloc((size_t)total, sizeof *overlap))))
        goto oom;
    rt_ddp *reducer = dp ? dp->ddp : mt.ddp;
    if (!o.quiet) {
        char dev[32], res[64] = "";
        if (skip)
            snprintf(res, sizeof res, ", resumed at step %lld", (long long)skip);
        fprintf(stderr, "%s train: %lld samples, batch %d (%lld steps per epoch), on %s%s%s\n", prog, (long long)N, o.batch,
                (long long)steps_per_epoch, o.devices ? o.devices : mrt_device_str(m->dev[0], dev, sizeof dev),
                o.ndev > 1 ? (dp && dp->nccl ? " (data-parallel, a thread each, NCCL)" : " (data-parallel, a thread each)")
                : world > 1 ? (torchrun ? " (data-parallel over torchrun's ranks, NCCL)"
                               : mt.nccl ? " (data-parallel over MPI ranks, NCCL)" : " (data-parallel over MPI ranks)")
                            : "", res);
    }
    uint64_t rng = o.seed;
    double t_last = now_s(); /* the end of the last step (its checkpoint written): each step's own samples/s */
    for (int ep = 1; ep <= o.epochs && (!o.steps || step < o.steps); ep++) {
        if (o.shuffle)
            for (int64_t i = N - 1; i > 0; i--) {
                int64_t j = (int64_t)(splitmix64(&rng) % (uint64_t)(i + 1));
                int64_t t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
        for (int64_t b0 = 0; b0 < N && (!o.steps || step < o.steps); b0 += o.batch) {
            int nb = (int)(N - b0 < o.batch ? N - b0 : o.batch);
            if (step < skip) {
                step++;
                continue;
            }
            for (int i = 0; i < nin; i++)
                for (int r = 0; r < nb; r++)
                    memcpy((unsigned char *)bufs[i] + (size_t)r * row[i],
                           (const unsigned char *)data[i].data + (size_t)order[b0 + r] * row[i], row[i]);
            int64_t dims[MRT_MAX_SYMS];
            memcpy(dims, sdims, sizeof dims);
            dims[0] = nb;
            void *out[1] = {&loss};
            double ts = now_s();
            mrt_status st = world > 1 ? mpi_step(&mt, info, nb, bufs, row, &loss, step + 1)
                            : dp      ? dp_step(dp, nb, bufs, row, &loss)
                                      : info->run(model, dims, (const void *const *)bufs, out);
            if (o.time && times && nt < total) {
                overlap[nt] = rt_ddp_overlapped(reducer);
                times[nt++] = now_s() - ts;
            }
            if (st != MRT_OK) {
                char msg[1024], kept[1200] = "";
                snprintf(msg, sizeof msg, "%s", mrt_last_error());
                if (saved_at >= 0)
                    snprintf(kept, sizeof kept, " (the last checkpoint, %s%s%s, holds step %lld; it is kept as it is)", o.save,
                             o.save_state ? " and " : "", o.save_state ? o.save_state : "", saved_at);
                else if (o.save)
                    snprintf(kept, sizeof kept, " (nothing is saved%s%s%s; --save-every N keeps checkpoints)",
                             access(o.save, F_OK) == 0 ? ": " : "", access(o.save, F_OK) == 0 ? o.save : "",
                             access(o.save, F_OK) == 0 ? " keeps its old contents" : "");
                mrt_set_error(st, "epoch %d, step %lld: %s%s", ep, (long long)step + 1, msg, kept);
                goto fail;
            }
            step++;
            /* this step's rate (a running average from the start carried the first, cold step's time
             * along and rose with every step) */
            double el = now_s() - t_last, rate = el > 0 ? (double)nb / el : 0.0;
            if (log)
            {
                fprintf(log, "epoch %d step %lld loss %.9g samples/s %.1f grad_norm %.9g lr %.9g\n", ep, (long long)step,
                        loss, rate, m->grad_norm, m->last_lr);
                fflush(log); /* the log keeps up with the checkpoints, should the run be killed */
            }
            if (tty)
                fprintf(stderr, "\repoch %d/%d  step %lld/%lld  loss %.6f  lr %.3g  %.0f samples/s   ", ep, o.epochs,
                        (long long)((step - 1) % steps_per_epoch + 1), (long long)steps_per_epoch, loss, m->last_lr, rate);
            if (o.save_every && step % o.save_every == 0 && step < total) {
                if (mrt_model_save_weights(m, o.save, 0) != MRT_OK ||
                    (o.save_state && mrt_model_save_weights(m, o.save_state, 1) != MRT_OK))
                    goto fail;
                saved_at = step;
            }
            t_last = now_s();
        }
        if (step <= skip) /* an epoch the resumed run only replayed */
            continue;
        if (tty)
            fprintf(stderr, "\n");
        else if (!o.quiet)
            fprintf(stderr, "epoch %d/%d: %lld steps, last loss %.6f\n", ep, o.epochs, (long long)step, loss);
        if (o.eval_files && rank == 0) {
            double el;
            if (evaluate(info, &emodel, m, edata, erow, ebufs, NE, edims, o.batch, &el) != MRT_OK) {
                /* the training so far is good: it is saved before the run stops */
                char msg[1024], kept[600] = "";
                snprintf(msg, sizeof msg, "%s", mrt_last_error());
                if (o.save && mrt_model_save_weights(m, o.save, 0) == MRT_OK &&
                    (!o.save_state || mrt_model_save_weights(m, o.save_state, 1) == MRT_OK))
                    snprintf(kept, sizeof kept, " (the weights after step %lld are saved: %s%s%s)", (long long)step, o.save,
                             o.save_state ? " and " : "", o.save_state ? o.save_state : "");
                mrt_set_error(MRT_ERR_INVALID_ARG, "epoch %d: evaluating --eval: %s%s", ep, msg, kept);
                goto fail;
            }
            if (!o.quiet)
                fprintf(stderr, "epoch %d/%d: eval loss %.6f (%lld samples)\n", ep, o.epochs, el, (long long)NE);
            if (log)
                fprintf(log, "eval epoch %d step %lld loss %.9g samples %lld\n", ep, (long long)step, el, (long long)NE);
        }
    }
    char where[96] = ""; /* the ranks of mpirun or torchrun, which --time's line speaks for */
    if (world > 1)
        snprintf(where, sizeof where, ", rank %d of %d, data-parallel over the ranks", rank, world);
    else if (o.ndev > 1)
        snprintf(where, sizeof where, ", data-parallel");
    if (o.time && nt == 1) /* one step: nothing warm to take a median of */
        printf("time: %.3f ms for the only step (cold: the first touch of the arena, the BLAS warm-up; "
               "--steps 2 or more gives the median of the warm steps; batch %d, on %s%s)\n", times[0] * 1e3, o.batch,
               o.devices ? o.devices : mrt_device_str(m->dev[0], (char[32]){0}, 32), where);
    if (o.time && nt > 1) { /* the first step (first touch of the arena, BLAS warm-up) is left out */
        qsort(times + 1, (size_t)(nt - 1), sizeof *times, cmp_double);
        int64_t k = nt - 1;
        double med = k % 2 ? times[1 + k / 2] : (times[k / 2] + times[1 + k / 2]) / 2;
        printf("time: %.3f ms per step (median of %lld steps, batch %d, on %s%s)\n", med * 1e3, (long long)k, o.batch,
               o.devices ? o.devices : mrt_device_str(m->dev[0], (char[32]){0}, 32), where);
        if (reducer) { /* the overlap of the same steps */
            qsort(overlap + 1, (size_t)(nt - 1), sizeof *overlap, cmp_int);
            printf("ddp: %d gradient buckets; started all-reducing before the backward pass ended: %d per step "
                   "(median; min %d, max %d)\n", rt_ddp_buckets(reducer), overlap[1 + (nt - 1) / 2], overlap[1],
                   overlap[nt - 1]);
        }
    }
    if (dp && dp_same(dp) != MRT_OK)
        goto fail;
    if (o.save && mrt_model_save_weights(m, o.save, 0) != MRT_OK)
        goto fail;
    if (o.save_state && mrt_model_save_weights(m, o.save_state, 1) != MRT_OK)
        goto fail;
    rc = 0;
    goto done;
oom:
    mrt_set_error(MRT_ERR_OOM, "out of memory while reading the data");
fail:
    if (world > 1)
        fprintf(stderr, "%s train: rank %d of %d: error: %s\n", prog, rank, world, mrt_last_error());
    else
        fprintf(stderr, "%s train: error: %s\n", prog, mrt_last_error());
    if (world > 1 && (!mpi_synced || rt_mpi_broken()))
        rt_mpi_abort(1); /* the others would wait for this rank at the next collective (or a stuck one) */
done:
    if (log)
        fclose(log);
    if (emodel)
        info->eval->destroy(emodel);
    if (dp)
        dp_train_free(dp, rc != 0);
    if (world > 1) {
        rt_nccl_destroy(mt.nccl, rc != 0);
        rt_ddp_destroy(mt.ddp);
        free(mt.grad);
        free(mt.numel);
        free(mt.names);
        if (!torchrun)
            rt_mpi_finish();
    }
    if (world <= 1 && !torchrun)
        rt_mpi_finish(); /* mpirun -np 1 started MPI too: it must be finalized, or mpirun fails the job */
    if (model)
        info->destroy(model);
    for (int i = 0; data && i < nin; i++) {
        mrt_tensor_free(&data[i]);
        if (bufs)
            free(bufs[i]);
    }
    for (int i = 0; edata && i < nin; i++) {
        mrt_tensor_free(&edata[i]);
        if (ebufs)
            free(ebufs[i]);
    }
    for (int i = 0; o.eval_files && i < nin; i++)
        free((char *)o.eval_files[i]);
    free(o.eval_files);
    free(edata);
    free(ebufs);
    free(erow);
    free(data);
    free(bufs);
    free(row);
    free(order);
    free(times);
    free(overlap);
    free(o.data);
    return rc;
}
