/*
 * rt_dp.c — data-parallel inference: replicas of one compiled model on several devices, each
 * batch split into contiguous shards that run concurrently (PyTorch's nn.DataParallel, ahead of
 * time).
 *
 * The weights are read from the file once, into the first replica, and copied device to device
 * into the others (mrt_model_copy_weights). A batch of B items over n replicas gives the first
 * B % n replicas B / n + 1 items and the others B / n, in order; a replica with no items sits the
 * run out. Each replica has a worker thread of its own, started once; a run hands each its
 * shard's pointers into the caller's buffers and waits for all of them, so nothing is allocated
 * or copied per run beyond what each replica's run() does. The result is the single-device
 * run's: the model must be batch-separable (no op mixes batch items) with the batch the leading
 * axis of every input and output, which the compiler records (batch_chunkable) and this checks;
 * a leading axis of k*batch rows (reshape(h, [batch*2, 5])) gives a shard at row k*first
 * (rt_batch_unit, shared with the plain chunking and the micro-batches).
 * CPU replicas (cpu:0, cpu:1, ...) share the host's memory and the thread setting
 * (mrt_set_threads, --threads): T threads over n CPU replicas give each T / n, at least one.
 */
#include "modelrt.h"
#include "rt_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* ---------------------------------------------------------------- a team of threads */

typedef struct team_member {
    struct rt_team *t;
    int i;
} team_member;

struct rt_team {
    int n;
    pthread_t thread[MRT_DP_MAX];
    team_member member[MRT_DP_MAX]; /* each thread's argument */
    int started[MRT_DP_MAX];
    pthread_mutex_t lock;
    pthread_cond_t go, done;
    unsigned long gen; /* bumped for each job; a member runs once per generation */
    int pending, quit;
    void (*fn)(void *ctx, int i);
    void *ctx;
};

static void *team_thread(void *arg)
{
    team_member *me = arg;
    rt_team *t = me->t;
    unsigned long seen = 0;
    pthread_mutex_lock(&t->lock);
    for (;;) {
        while (t->gen == seen && !t->quit)
            pthread_cond_wait(&t->go, &t->lock);
        if (t->quit)
            break;
        seen = t->gen;
        pthread_mutex_unlock(&t->lock);
#ifdef _OPENMP
        if (rt_cpu_threads() > 0) /* a new thread starts from OMP_NUM_THREADS, not from the caller's count */
            omp_set_num_threads(rt_cpu_threads());
#endif
        t->fn(t->ctx, me->i);
        pthread_mutex_lock(&t->lock);
        if (--t->pending == 0)
            pthread_cond_signal(&t->done);
    }
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

mrt_status rt_team_create(rt_team **out, int n)
{
    *out = NULL;
    if (n < 1 || n > MRT_DP_MAX)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "rt_team_create: %d threads", n);
    rt_team *t = calloc(1, sizeof *t);
    if (!t)
        return mrt_set_error(MRT_ERR_OOM, "rt_team_create: out of memory");
    t->n = n;
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->go, NULL);
    pthread_cond_init(&t->done, NULL);
    for (int i = 0; i < n; i++) {
        t->member[i] = (team_member){t, i};
        if (pthread_create(&t->thread[i], NULL, team_thread, &t->member[i]) != 0) {
            rt_team_destroy(t);
            return mrt_set_error(MRT_ERR_OOM, "cannot start thread %d of %d", i + 1, n);
        }
        t->started[i] = 1;
    }
    *out = t;
    return MRT_OK;
}

void rt_team_run(rt_team *t, void (*fn)(void *ctx, int i), void *ctx)
{
    pthread_mutex_lock(&t->lock);
    t->fn = fn;
    t->ctx = ctx;
    t->pending = t->n;
    t->gen++;
    pthread_cond_broadcast(&t->go);
    while (t->pending > 0)
        pthread_cond_wait(&t->done, &t->lock);
    pthread_mutex_unlock(&t->lock);
}

void rt_team_destroy(rt_team *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->lock);
    t->quit = 1;
    pthread_cond_broadcast(&t->go);
    pthread_mutex_unlock(&t->lock);
    for (int i = 0; i < t->n; i++)
        if (t->started[i])
            pthread_join(t->thread[i], NULL);
    pthread_cond_destroy(&t->go);
    pthread_cond_destroy(&t->done);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

/* ---------------------------------------------------------------- cutting buffers by batch items */

int rt_batch_leads(const mrt_io_desc *d)
{
    if (!d || d->rank < 1 || d->sym[0][0] != 1 || d->shape[0] < 1)
        return 0;
    for (int k = 1; k < d->rank; k++)
        if (d->sym[k][0] != 0)
            return 0;
    return 1;
}

size_t rt_batch_unit(const mrt_io_desc *d, const int64_t *dims)
{
    uint64_t u = mrt_dtype_size(d->dtype);
    for (int k = 0; k < d->rank; k++) {
        int64_t v = d->shape[k]; /* on axis 0 the k of k*batch */
        for (int s = k == 0 ? 1 : 0; s < MRT_MAX_SYMS; s++)
            for (int e = 0; e < d->sym[k][s]; e++)
                v *= dims[s];
        u *= (uint64_t)v;
    }
    return (size_t)u;
}

/* ---------------------------------------------------------------- data-parallel inference */

struct mrt_dp {
    const mrt_model_info *info;
    int n;
    mrt_device dev[MRT_DP_MAX];
    void *model[MRT_DP_MAX];
    rt_team *team;
    /* this run: each replica's shard of batch items [first, first + count), its status */
    int64_t first[MRT_DP_MAX], count[MRT_DP_MAX];
    int64_t piece[MRT_DP_MAX]; /* the batch item the failed run() started at (its positions count from it) */
    mrt_status st[MRT_DP_MAX];
    char err[MRT_DP_MAX][1024];
    int64_t dims[MRT_MAX_SYMS];
    const void *const *in;
    void *const *out;
    size_t *unit; /* bytes per batch item of each input, then of each output */
};

/* Replica i's part of a run: its shard of every buffer (in pieces of at most max_batch). */
static void dp_run_shard(void *ctx, int i)
{
    mrt_dp *dp = ctx;
    const mrt_model_info *info = dp->info;
    const void *in[64];
    void *out[64];
    for (int k = 0; k < info->n_inputs; k++)
        in[k] = (const unsigned char *)dp->in[k] + (size_t)dp->first[i] * dp->unit[k];
    for (int k = 0; k < info->n_outputs; k++)
        out[k] = (unsigned char *)dp->out[k] + (size_t)dp->first[i] * dp->unit[info->n_inputs + k];
    int64_t dims[MRT_MAX_SYMS];
    memcpy(dims, dp->dims, sizeof dims);
    dp->st[i] = MRT_OK;
    for (int64_t b0 = 0; b0 < dp->count[i] && dp->st[i] == MRT_OK; b0 += info->max_batch) {
        dims[0] = dp->count[i] - b0 < info->max_batch ? dp->count[i] - b0 : info->max_batch;
        dp->piece[i] = dp->first[i] + b0;
        dp->st[i] = info->run(dp->model[i], dims, in, out);
        for (int k = 0; k < info->n_inputs; k++)
            in[k] = (const unsigned char *)in[k] + (size_t)dims[0] * dp->unit[k];
        for (int k = 0; k < info->n_outputs; k++)
            out[k] = (unsigned char *)out[k] + (size_t)dims[0] * dp->unit[info->n_inputs + k];
    }
    if (dp->st[i] != MRT_OK)
        snprintf(dp->err[i], sizeof dp->err[i], "%s", mrt_last_error());
}

/* The device list: "all" (every CUDA device; an error without one), or devices separated by
 * commas, each present and none twice. */
mrt_status rt_devices_parse(const char *s, mrt_device *dev, int *n)
{
    mrt_device_info present[MRT_DP_MAX + 1];
    int np = 0;
    mrt_status st = mrt_device_list(present, MRT_DP_MAX + 1, &np);
    if (st != MRT_OK)
        return st;
    char have[512] = "";
    for (int i = 0; i < np; i++) {
        char b[32];
        snprintf(have + strlen(have), sizeof have - strlen(have), "%s%s", i ? ", " : "", mrt_device_str(present[i].device, b, sizeof b));
    }
    if (np > 0 && present[0].device.kind == MRT_DEVICE_CPU)
        snprintf(have + strlen(have), sizeof have - strlen(have), " (and cpu:1..cpu:7, the same host)");
    *n = 0;
    if (!strcmp(s, "all")) {
        for (int i = 0; i < np; i++)
            if (present[i].device.kind == MRT_DEVICE_CUDA && *n < MRT_DP_MAX)
                dev[(*n)++] = present[i].device;
        if (!*n)
            return mrt_set_error(MRT_ERR_DEVICE, "--devices all: no CUDA device is present (present: %s); CPU "
                                 "replicas are named, e.g. --devices cpu:0,cpu:1", have);
        return MRT_OK;
    }
    for (const char *p = s;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char one[80];
        if (len >= sizeof one)
            len = sizeof one - 1;
        memcpy(one, p, len);
        one[len] = '\0';
        mrt_device d;
        int is_auto = 0;
        if ((st = mrt_device_parse(one, &d, &is_auto)) != MRT_OK)
            return st;
        if (is_auto)
            return mrt_set_error(MRT_ERR_DEVICE, "--devices '%s': 'auto' is not a device of a list (name each, or 'all')",
                                 s);
        for (int i = 0; i < *n; i++)
            if (dev[i].kind == d.kind && dev[i].index == d.index)
                return mrt_set_error(MRT_ERR_DEVICE, "--devices '%s' names %s twice (present: %s)", s, one, have);
        int found = d.kind == MRT_DEVICE_CPU;
        for (int i = 0; i < np && !found; i++)
            found = present[i].device.kind == d.kind && present[i].device.index == d.index;
        if (!found)
            return mrt_set_error(MRT_ERR_DEVICE, "--devices '%s': %s is not present (present: %s)", s, one, have);
        if (*n == MRT_DP_MAX)
            return mrt_set_error(MRT_ERR_DEVICE, "--devices '%s': at most %d devices", s, MRT_DP_MAX);
        dev[(*n)++] = d;
        if (!comma)
            break;
        p = comma + 1;
    }
    return MRT_OK;
}

mrt_status mrt_dp_create(mrt_dp **out, const mrt_model_info *info, const char *devices)
{
    if (!out || !info || !devices)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_dp_create: NULL argument");
    *out = NULL;
    /* the batch must lead every input and output, once, and no op may mix batch items */
    int leading = info->has_batch && info->batch_chunkable && info->n_inputs <= 64 && info->n_outputs <= 64;
    for (int i = 0; leading && i < info->n_inputs + info->n_outputs; i++)
        leading = rt_batch_leads(i < info->n_inputs ? &info->inputs[i] : &info->outputs[i - info->n_inputs]);
    if (!leading)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "model '%s' cannot run data-parallel: %s", info->name,
                             !info->has_batch ? "it has no batch dimension"
                             : !info->batch_chunkable ? "an operation mixes batch items (a reduction or a reshape across the batch)"
                                                      : "the batch is not the leading axis of every input and output");
    mrt_dp *dp = calloc(1, sizeof *dp);
    if (!dp)
        return mrt_set_error(MRT_ERR_OOM, "mrt_dp_create: out of memory");
    dp->info = info;
    mrt_status st = rt_devices_parse(devices, dp->dev, &dp->n);
    dp->unit = st == MRT_OK ? calloc((size_t)(info->n_inputs + info->n_outputs + 1), sizeof *dp->unit) : NULL;
    if (st == MRT_OK && !dp->unit)
        st = mrt_set_error(MRT_ERR_OOM, "mrt_dp_create: out of memory");
    int cpus = 0;
    for (int i = 0; st == MRT_OK && i < dp->n; i++) {
        char b[32];
        cpus += dp->dev[i].kind == MRT_DEVICE_CPU;
        st = info->create(&dp->model[i], mrt_device_str(dp->dev[i], b, sizeof b));
        if (st != MRT_OK) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", mrt_last_error());
            st = mrt_set_error(st, "replica %d of %d (%s): %s", i + 1, dp->n, b, msg);
        }
    }
    if (st == MRT_OK && cpus > 1) { /* the CPU replicas share the thread setting: T / replicas each, at least 1 */
        int threads = rt_cpu_threads();
#ifdef _OPENMP
        if (threads < 1)
            threads = omp_get_max_threads();
#endif
        st = mrt_set_threads(threads / cpus > 1 ? threads / cpus : 1, NULL);
    }
    if (st == MRT_OK)
        st = rt_team_create(&dp->team, dp->n);
    if (st != MRT_OK) {
        mrt_dp_destroy(dp);
        return st;
    }
    *out = dp;
    return MRT_OK;
}

mrt_status mrt_dp_load_weights(mrt_dp *dp, const char *path)
{
    if (!dp)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_dp_load_weights: NULL");
    mrt_status st = dp->info->load_weights(dp->model[0], path);
    /* the others read the file too where the first replica no longer holds every param: its
     * blocked convolutions released their plain weights (mrt_blk_release_weights), some GEMMs
     * hold theirs packed in place (MRT_MATMUL_PACK, rt_matmul_packed), or some
     * params were read only by load-time kernels (a batch norm folded into a conv, GPT-2's
     * position table gathered at constant positions), whose region is gone after loading */
    int reread = st == MRT_OK && (mrt_blk_released(dp->model[0]) || rt_matmul_packed(dp->model[0]));
    const mrt_model_desc *d = dp->info->desc ? ((const mrt_model *)dp->model[0])->desc : NULL;
    for (int i = 0; st == MRT_OK && d && i < d->n_params && !reread; i++)
        reread = d->params[i].region % 2;
    for (int i = 1; st == MRT_OK && i < dp->n; i++)
        st = reread ? dp->info->load_weights(dp->model[i], path) : mrt_model_copy_weights(dp->model[i], dp->model[0]);
    return st;
}

mrt_status mrt_dp_run(mrt_dp *dp, const int64_t *dims, const void *const *in, void *const *out)
{
    if (!dp || !dims || (!in && dp->info->n_inputs) || (!out && dp->info->n_outputs))
        return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_dp_run: NULL argument");
    const mrt_model_info *info = dp->info;
    int64_t B = dims[0];
    if (B < 1)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_dp_run: batch %lld", (long long)B);
    /* bytes per batch item of each buffer at these sizes */
    for (int i = 0; i < info->n_inputs + info->n_outputs; i++)
        dp->unit[i] = rt_batch_unit(i < info->n_inputs ? &info->inputs[i] : &info->outputs[i - info->n_inputs], dims);
    int64_t first = 0;
    for (int i = 0; i < dp->n; i++) {
        dp->first[i] = first;
        dp->count[i] = B / dp->n + (i < B % dp->n);
        first += dp->count[i];
    }
    memcpy(dp->dims, dims, sizeof dp->dims);
    for (int s = info->n_syms > 0 ? info->n_syms : 1; s < MRT_MAX_SYMS; s++)
        dp->dims[s] = 1;
    dp->in = in;
    dp->out = out;
    rt_team_run(dp->team, dp_run_shard, dp);
    for (int i = 0; i < dp->n; i++)
        if (dp->st[i] != MRT_OK) {
            char b[32];
            return mrt_set_error(dp->st[i], "replica %d (%s, batch items %lld..%lld): %s (positions count from batch "
                                 "item %lld)", i + 1, mrt_device_str(dp->dev[i], b, sizeof b), (long long)dp->first[i],
                                 (long long)(dp->first[i] + dp->count[i] - 1), dp->err[i], (long long)dp->piece[i]);
        }
    return MRT_OK;
}

int mrt_dp_count(const mrt_dp *dp) { return dp ? dp->n : 0; }

void *mrt_dp_replica(const mrt_dp *dp, int i) { return dp && i >= 0 && i < dp->n ? dp->model[i] : NULL; }

void mrt_dp_destroy(mrt_dp *dp)
{
    if (!dp)
        return;
    rt_team_destroy(dp->team);
    for (int i = 0; i < dp->n; i++)
        if (dp->model[i])
            dp->info->destroy(dp->model[i]);
    free(dp->unit);
    free(dp);
}
