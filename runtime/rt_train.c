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

mrt_status mrt_model_save_weights(mrt_model *m, const char *path, int state)
{
    if (!m || !m->desc || !path || !*path)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_model_save_weights: model or path is NULL or empty");
    const mrt_model_desc *d = m->desc;
    size_t data = 0;
    for (int i = 0; i < d->n_params; i++) {
        const mrt_param_desc *p = &d->params[i];
        if (!!p->state != !!state)
            continue;
        if (p->region % 2)
            return mrt_set_error(MRT_ERR_INVALID_ARG, "%s: cannot save param '%s': it was needed only while the "
                                 "weights loaded (compile with --train, which keeps every param)", path, p->name);
        data += param_bytes(p);
    }
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
    size_t h = (size_t)snprintf(hdr, cap, "{\"__metadata__\":{\"format\":\"pt\",\"model\":\"%s\",\"step\":\"%lld\"}",
                                d->name, (long long)m->step);
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

/* ---------------------------------------------------------------- PROG train */

typedef struct train_opts {
    const char *weights, *save, *save_state, *device, *log;
    const char **data; /* [n_inputs] */
    int batch, epochs, shuffle, quiet;
    long long steps;
    double lr;
    unsigned long long seed;
} train_opts;

static void train_usage(FILE *f, const char *prog)
{
    fprintf(f, "usage: %s train --weights INIT.safetensors --data NAME=FILE.npy ... [--batch N] [--epochs E]\n"
               "       [--steps S] [--lr LR] [--shuffle] [--seed S] [--save OUT.safetensors]\n"
               "       [--save-state STATE.safetensors] [--device D] [--log FILE] [--quiet]\n",
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
           "  --epochs E         passes over the data (default 1); --steps S stops after S steps\n"
           "  --lr LR            the learning rate (default: the model's optimizer statement)\n"
           "  --shuffle          a new order of the samples each epoch, from --seed (default 0)\n"
           "  --seed S           the seed of --shuffle and of dropout's masks (default 0)\n"
           "  --save FILE        write the trained weights there (atomically) at the end\n"
           "  --save-state FILE  write the optimizer state (and its step) there too\n"
           "  --log FILE         append one line per step: epoch, step, loss, samples/s\n"
           "  --device D         cpu, cuda, cuda:N or auto (default)\n"
           "  --quiet            no progress line\n",
           info->max_batch);
}

static int train_parse(const mrt_model_info *info, const char *prog, int argc, char **argv, train_opts *o, int *help)
{
    o->epochs = 1;
    o->batch = info->max_batch;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
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
        } else if (!strcmp(a, "--batch") || !strcmp(a, "--epochs") || !strcmp(a, "--steps") || !strcmp(a, "--seed")) {
            NEED();
            errno = 0;
            long long x = strtoll(v, &end, 10);
            if (*end || errno || x < (strcmp(a, "--seed") ? 1 : 0)) {
                fprintf(stderr, "%s train: error: %s takes a %s integer, got '%s'\n", prog, a,
                        strcmp(a, "--seed") ? "positive" : "non-negative", v);
                return 2;
            }
            if (!strcmp(a, "--batch")) {
                if (x > info->max_batch) {
                    fprintf(stderr, "%s train: error: --batch %lld is more than the compiled maximum %d (modelc "
                                    "--max-batch)\n", prog, x, info->max_batch);
                    return 2;
                }
                o->batch = (int)x;
            } else if (!strcmp(a, "--epochs")) {
                o->epochs = x > 1000000 ? 1000000 : (int)x;
            } else if (!strcmp(a, "--steps")) {
                o->steps = x;
            } else {
                o->seed = (unsigned long long)x;
            }
        } else if (!strcmp(a, "--lr")) {
            NEED();
            errno = 0;
            double x = strtod(v, &end);
            if (*end || errno || !(x > 0) || !isfinite(x)) {
                fprintf(stderr, "%s train: error: --lr takes a positive number, got '%s'\n", prog, v);
                return 2;
            }
            o->lr = x;
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

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
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
        free(o.data);
        return help ? 0 : rc;
    }
    rc = 1;
    int nin = info->n_inputs;
    /* The files written (--save, --save-state, --log): none of them a file the training reads,
     * nor two of them one file; checked before anything is read or run. */
    {
        const char *outs[3] = {o.save, o.save_state, o.log}, *outw[3] = {"--save", "--save-state", "--log"};
        const char **readers = calloc((size_t)nin + 1, sizeof *readers), **rw = calloc((size_t)nin + 1, sizeof *rw);
        rt_dest d[3];
        memset(d, 0, sizeof d);
        mrt_status st = readers && rw ? MRT_OK : mrt_set_error(MRT_ERR_OOM, "out of memory");
        if (st == MRT_OK) {
            readers[0] = o.weights;
            rw[0] = "the weights file";
            for (int i = 0; i < nin; i++) {
                readers[i + 1] = o.data[i];
                rw[i + 1] = rt_strdup_printf("--data %s", info->inputs[i].name);
            }
        }
        for (int i = 0; i < 3 && st == MRT_OK; i++) {
            if (!outs[i])
                continue;
            st = rt_output_check(outw[i], outs[i], readers, rw, nin + 1, &d[i]);
            for (int j = 0; j < i && st == MRT_OK; j++)
                if (outs[j] && rt_dest_same(&d[i], &d[j]))
                    st = mrt_set_error(MRT_ERR_INVALID_ARG, "%s and %s name one file (%s); name two files", outw[j],
                                       outw[i], outs[i]);
        }
        for (int i = 0; i < 3; i++)
            free(d[i].name);
        for (int i = 0; rw && i < nin; i++)
            free((char *)rw[i + 1]);
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
    int64_t *order = NULL;
    void *model = NULL;
    FILE *log = NULL;
    float loss = 0;
    if (!data || !bufs || !row)
        goto oom;
    /* The data: every file read and checked against the model before the first step. */
    int64_t N = -1;
    int from = 0;
    for (int i = 0; i < nin; i++) {
        const mrt_io_desc *d = &info->inputs[i];
        if (mrt_npy_read(o.data[i], &data[i]) != MRT_OK)
            goto fail;
        const mrt_tensor *t = &data[i];
        int ok = t->dtype == d->dtype && t->rank == d->rank && t->rank > 0 && d->sym[0][0] == 1;
        for (int k = 1; ok && k < d->rank; k++)
            ok = t->shape[k] == d->shape[k];
        if (!ok) {
            mrt_set_error(MRT_ERR_MISMATCH, "--data %s=%s: %s of rank %d; the model takes %s samples of the "
                          "declared shape along the leading (batch) axis", d->name, o.data[i], mrt_dtype_name(t->dtype),
                          t->rank, mrt_dtype_name(d->dtype));
            goto fail;
        }
        if (N >= 0 && t->shape[0] != N) {
            mrt_set_error(MRT_ERR_MISMATCH, "--data %s=%s has %lld samples, but --data %s=%s has %lld: every file "
                          "holds the same samples", d->name, o.data[i], (long long)t->shape[0], info->inputs[from].name,
                          o.data[from], (long long)N);
            goto fail;
        }
        N = t->shape[0];
        from = i;
        row[i] = t->shape[0] ? t->nbytes / (size_t)t->shape[0] : 0;
        bufs[i] = malloc(row[i] * (size_t)o.batch + 1);
        if (!bufs[i])
            goto oom;
    }
    if (N < 1) {
        mrt_set_error(MRT_ERR_INVALID_ARG, "the data holds no samples");
        goto fail;
    }
    order = malloc(sizeof *order * (size_t)N);
    if (!order)
        goto oom;
    for (int64_t i = 0; i < N; i++)
        order[i] = i;
    if (info->create(&model, o.device) != MRT_OK)
        goto fail;
    if (info->load_weights(model, o.weights) != MRT_OK)
        goto fail;
    mrt_model *m = model;
    if (o.lr > 0)
        m->lr = o.lr;
    m->seed = o.seed;
    if (o.log && !(log = fopen(o.log, "a"))) {
        mrt_set_error(MRT_ERR_IO, "--log %s: cannot open: %s", o.log, strerror(errno));
        goto fail;
    }
    int tty = !o.quiet && isatty(STDERR_FILENO);
    int64_t steps_per_epoch = (N + o.batch - 1) / o.batch, step = 0;
    uint64_t rng = o.seed;
    double t0 = now_s();
    int64_t seen = 0;
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
            for (int i = 0; i < nin; i++)
                for (int r = 0; r < nb; r++)
                    memcpy((unsigned char *)bufs[i] + (size_t)r * row[i],
                           (const unsigned char *)data[i].data + (size_t)order[b0 + r] * row[i], row[i]);
            int64_t dims[MRT_MAX_SYMS] = {nb, 1, 1, 1};
            void *out[1] = {&loss};
            mrt_status st = info->run(model, dims, (const void *const *)bufs, out);
            if (st != MRT_OK) {
                char msg[1024];
                snprintf(msg, sizeof msg, "%s", mrt_last_error());
                mrt_set_error(st, "epoch %d, step %lld: %s%s", ep, (long long)step + 1, msg,
                              o.save ? " (nothing is saved: the weights file keeps its old contents)" : "");
                goto fail;
            }
            step++;
            seen += nb;
            double el = now_s() - t0;
            if (log)
                fprintf(log, "epoch %d step %lld loss %.9g samples/s %.1f\n", ep, (long long)step, loss,
                        el > 0 ? (double)seen / el : 0.0);
            if (tty)
                fprintf(stderr, "\repoch %d/%d  step %lld/%lld  loss %.6f  %.0f samples/s   ", ep, o.epochs,
                        (long long)((step - 1) % steps_per_epoch + 1), (long long)steps_per_epoch, loss,
                        el > 0 ? (double)seen / el : 0.0);
        }
        if (tty)
            fprintf(stderr, "\n");
        else if (!o.quiet)
            fprintf(stderr, "epoch %d/%d: %lld steps, last loss %.6f\n", ep, o.epochs, (long long)step, loss);
    }
    if (o.save && mrt_model_save_weights(m, o.save, 0) != MRT_OK)
        goto fail;
    if (o.save_state && mrt_model_save_weights(m, o.save_state, 1) != MRT_OK)
        goto fail;
    rc = 0;
    goto done;
oom:
    mrt_set_error(MRT_ERR_OOM, "out of memory while reading the data");
fail:
    fprintf(stderr, "%s train: error: %s\n", prog, mrt_last_error());
done:
    if (log)
        fclose(log);
    if (model)
        info->destroy(model);
    for (int i = 0; data && i < nin; i++) {
        mrt_tensor_free(&data[i]);
        if (bufs)
            free(bufs[i]);
    }
    free(data);
    free(bufs);
    free(row);
    free(order);
    free(o.data);
    return rc;
}
