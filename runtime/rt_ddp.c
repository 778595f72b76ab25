/*
 * rt_ddp.c — the gradient reducer of data-parallel training: buckets of gradients all-reduced
 * while the backward pass goes on (PyTorch DDP's Reducer; Li et al. 2020, "PyTorch Distributed:
 * Experiences on Accelerating Data Parallel Training", section 3.2: gradient bucketing and
 * overlapping computation with communication).
 *
 * The compiler knows the backward schedule: desc->grad_ready lists the gradients in the order
 * run() finalizes them (modelc's plan_grad_ready: after the last kernel that touches each one),
 * and run() calls mrt_grad_ready(m, j) after the kernel that makes the first j of that list
 * final. Here the list is cut into buckets of at most `bucket_bytes` (DDP's bucket_cap_mb, 25 MiB
 * by default; a gradient larger than the cap is a bucket alone), in that order, the same on
 * every replica and rank: DDP's buckets as they are after its first iteration rebuilds them in
 * the order the gradients became ready. A bucket is reduced once every replica (or this rank)
 * has finalized it:
 *   - CPU devices (threads, RT_DDP_THREADS): a communication thread of its own takes the buckets
 *     in order as the last replica hands each over, and computes sum_r w_r * g_r element by
 *     element in replica order (the replicas with an empty shard left out), writing the sum to
 *     every replica: the formula of the reduction after the step that this replaced, so the
 *     gradients are the same bit for bit.
 *   - MPI ranks (RT_DDP_MPI): each gradient of the bucket scaled by w (zeroed for an empty
 *     shard), then MPI_Iallreduce in place, one per gradient as the blocking MPI_Allreduce was;
 *     each later announcement tests the requests (Open MPI progresses a non-blocking collective
 *     inside MPI calls).
 *   - GPUs (RT_DDP_NCCL: replicas in one process, or a GPU rank under mpirun or torchrun): each
 *     replica posts its own bucket as its backward finishes it, from its own thread: an event
 *     recorded on its compute stream, its communication stream made to wait on it, and
 *     ncclAllReduce (the pre-multiplied sum sum_r w_r * g_r) on the communication stream
 *     (rt_nccl_bucket_post), so the GPU all-reduces bucket b while it computes the rest of the
 *     backward; an empty shard's replica zeroes its gradients and posts every bucket at once.
 *     rt_ddp_finish waits for each communication stream and makes the compute stream wait for it
 *     before the optimizer step (rt_nccl_bucket_wait).
 * rt_ddp_finish, after every replica's run(), hands over the buckets not yet handed over (a
 * build without announcements, a run that failed half-way: every rank still posts the same
 * collectives, so none waits for one that never comes) and waits for all; the optimizer step
 * comes after it. The gradients are safe to overwrite from the moment they are announced: the
 * memory plan keeps them live to the end of the run and no later kernel touches them (the
 * gradient norm's kernels, which read them, are skipped under m->defer_update). Two
 * gradients that are one tensor (the gradient of a + b for params a and b is one node) are
 * reduced once: the second is an alias of the first (its square still counts in the norm, as
 * clip_grad_norm_ counts both .grad tensors).
 */
#include "modelrt.h"
#include "rt_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct ddp_replica {
    struct rt_ddp *d;
    int i;
    int next; /* the first bucket this replica has not handed over this step */
} ddp_replica;

struct rt_ddp {
    int kind, n, n_grads, n_buckets;
    const int *order;       /* [n_grads]: gradient k in ready order (desc->grad_ready, or 0..n-1) */
    int *end;               /* [n_buckets]: bucket b is order[end[b-1] .. end[b]) */
    int *alias;             /* [n_grads]: -1, or the gradient k' earlier in the order whose bytes gradient k
                             * shares (a + b of two params: one node is both gradients), reduced once */
    int *live, *live_end;   /* the order without the aliases, cut like it (bucket b: live[live_end[b-1] ..]) */
    float **grad[MRT_DP_MAX];
    const int64_t *numel;
    rt_nccl *nccl;          /* RT_DDP_NCCL: the communicators */
    const char *const *names; /* [k]: the param of gradient k, for errors */
    mrt_model *rep[MRT_DP_MAX];
    ddp_replica me[MRT_DP_MAX];
    /* this step */
    double w[MRT_DP_MAX];
    int64_t count[MRT_DP_MAX];
    int need;               /* the replicas that run (a non-empty shard) */
    double *ss;             /* [n_grads]: sum of squares of each reduced gradient (RT_DDP_THREADS) */
    double *t_start;        /* [n_buckets]: when its reduction started (s, CLOCK_MONOTONIC) */
    double t_last;          /* when the last bucket was handed over by all (the backward's last gradient final) */
    /* RT_DDP_THREADS: the communication thread */
    pthread_t thread;
    int started, quit;
    pthread_mutex_t lock; /* RT_DDP_NCCL too: the times */
    pthread_cond_t go, fin;
    int *arrived;           /* [n_buckets]: replicas that handed bucket b over */
    int ready, done;        /* buckets complete (handed over by all), and reduced */
};

static double ddp_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Bucket b reduced over the replicas on the communication thread (see above). */
static void ddp_reduce_threads(rt_ddp *d, int b)
{
    for (int p = b ? d->end[b - 1] : 0; p < d->end[b]; p++) {
        int k = d->order[p];
        if (d->alias[k] >= 0) { /* its bytes are those of an earlier gradient, already summed */
            d->ss[k] = d->ss[d->alias[k]];
            continue;
        }
        float *g0 = d->grad[0][k];
        double ss = 0;
        for (int64_t e = 0; e < d->numel[k]; e++) {
            float v = 0;
            for (int r = 0; r < d->n; r++)
                if (d->count[r])
                    v += (float)d->w[r] * d->grad[r][k][e];
            g0[e] = v;
            ss += (double)v * v;
        }
        d->ss[k] = ss;
        for (int r = 1; r < d->n; r++)
            memcpy(d->grad[r][k], g0, sizeof *g0 * (size_t)d->numel[k]);
    }
}

static void *ddp_thread(void *arg)
{
    rt_ddp *d = arg;
    pthread_mutex_lock(&d->lock);
    for (;;) {
        while (!d->quit && d->done == d->ready)
            pthread_cond_wait(&d->go, &d->lock);
        if (d->quit)
            break;
        int b = d->done;
        d->t_start[b] = ddp_now();
        pthread_mutex_unlock(&d->lock);
        ddp_reduce_threads(d, b);
        pthread_mutex_lock(&d->lock);
        d->done++;
        pthread_cond_broadcast(&d->fin);
    }
    pthread_mutex_unlock(&d->lock);
    return NULL;
}

/* This rank's bucket b: scaled, and its all-reduces posted (RT_DDP_MPI). */
static mrt_status ddp_post_mpi(rt_ddp *d, int b)
{
    d->t_start[b] = ddp_now();
    for (int p = b ? d->end[b - 1] : 0; p < d->end[b]; p++) {
        int k = d->order[p];
        float *g = d->grad[0][k];
        if (d->alias[k] >= 0)
            continue;
        if (!d->count[0])
            memset(g, 0, sizeof *g * (size_t)d->numel[k]);
        else if (d->w[0] != 1.0)
            for (int64_t e = 0; e < d->numel[k]; e++)
                g[e] = (float)d->w[0] * g[e];
        mrt_status st = rt_mpi_iallreduce_f32(g, d->numel[k]);
        if (st != MRT_OK)
            return st;
    }
    return rt_mpi_test();
}

/* Replica i hands over the buckets whose gradients are all among the first n_final of the order. */
static mrt_status ddp_hand_over(rt_ddp *d, int i, int n_final)
{
    ddp_replica *me = &d->me[i];
    while (me->next < d->n_buckets && d->end[me->next] <= n_final) {
        int b = me->next++;
        if (d->kind == RT_DDP_MPI) {
            if (b == d->n_buckets - 1)
                d->t_last = ddp_now();
            mrt_status st = ddp_post_mpi(d, b);
            if (st != MRT_OK)
                return st;
            continue;
        }
        if (d->kind == RT_DDP_NCCL) { /* the times: the last replica's to post the bucket */
            double t = ddp_now();
            pthread_mutex_lock(&d->lock);
            if (t > d->t_start[b])
                d->t_start[b] = t;
            if (b == d->n_buckets - 1 && t > d->t_last)
                d->t_last = t;
            pthread_mutex_unlock(&d->lock);
            int p0 = b ? d->live_end[b - 1] : 0;
            mrt_status st = d->live_end[b] == p0 ? MRT_OK /* every gradient of it an alias */
                            : rt_nccl_bucket_post(d->nccl, i, b, d->grad[i], d->numel, d->live + p0, d->live_end[b] - p0,
                                                  d->rep[i]->stream[0], !d->count[i], d->names);
            if (st != MRT_OK)
                return st;
            continue;
        }
        pthread_mutex_lock(&d->lock);
        if (++d->arrived[b] == d->need) { /* buckets complete in order: each replica hands them over in order */
            d->ready = b + 1;
            if (b == d->n_buckets - 1)
                d->t_last = ddp_now();
            pthread_cond_signal(&d->go);
        }
        pthread_mutex_unlock(&d->lock);
    }
    return MRT_OK;
}

mrt_status mrt_grad_ready(mrt_model *m, int n_final)
{
    ddp_replica *me = m ? m->ddp : NULL;
    if (!me)
        return MRT_OK;
    return ddp_hand_over(me->d, me->i, n_final);
}

/* A bucket's cap in bytes for mb MiB (mb > 0): at least one byte, and SIZE_MAX (one bucket for
 * everything) where mb MiB is more than a size_t holds. */
static size_t ddp_bucket_bytes(double mb)
{
    double b = mb * 1048576.0;
    return b >= (double)SIZE_MAX ? SIZE_MAX : b < 1 ? 1 : (size_t)b;
}

mrt_status rt_ddp_create(rt_ddp **out, int kind, mrt_model *const *rep, int n, float **const *grad,
                         const int64_t *numel, double bucket_mb, rt_nccl *nccl, const char *const *names)
{
    *out = NULL;
    const mrt_model_desc *desc = rep[0]->desc;
    rt_ddp *d = calloc(1, sizeof *d);
    if (!d)
        return mrt_set_error(MRT_ERR_OOM, "out of memory");
    pthread_mutex_init(&d->lock, NULL);
    pthread_cond_init(&d->go, NULL);
    pthread_cond_init(&d->fin, NULL);
    d->kind = kind;
    d->n = n;
    d->n_grads = desc->n_grads;
    d->numel = numel;
    d->nccl = nccl;
    d->names = names;
    int ng = d->n_grads;
    int *order = calloc((size_t)ng + 1, sizeof *order);
    d->end = calloc((size_t)ng + 1, sizeof *d->end);
    d->ss = calloc((size_t)ng + 1, sizeof *d->ss);
    d->t_start = calloc((size_t)ng + 1, sizeof *d->t_start);
    d->arrived = calloc((size_t)ng + 1, sizeof *d->arrived);
    d->alias = calloc((size_t)ng + 1, sizeof *d->alias);
    d->live = calloc((size_t)ng + 1, sizeof *d->live);
    d->live_end = calloc((size_t)ng + 1, sizeof *d->live_end);
    if (!order || !d->end || !d->ss || !d->t_start || !d->arrived || !d->alias || !d->live || !d->live_end) {
        free(order);
        rt_ddp_destroy(d);
        return mrt_set_error(MRT_ERR_OOM, "out of memory");
    }
    for (int k = 0; k < ng; k++)
        order[k] = desc->grad_ready ? desc->grad_ready[k] : k;
    d->order = order;
    /* the buckets: in ready order, each at most the cap (a larger gradient alone) */
    if (!(bucket_mb > 0)) { /* not given: $MODELRT_DDP_BUCKET_MB, else PyTorch DDP's 25 MiB */
        const char *s = getenv("MODELRT_DDP_BUCKET_MB");
        bucket_mb = 25;
        if (s && *s && (!rt_parse_real(s, &bucket_mb) || !(bucket_mb > 0))) {
            rt_ddp_destroy(d);
            return mrt_set_error(MRT_ERR_INVALID_ARG, "MODELRT_DDP_BUCKET_MB='%s': not a positive number of MiB "
                                 "(the gradient buckets' size; unset, 25)", s);
        }
    }
    size_t cap = ddp_bucket_bytes(bucket_mb);
    size_t bytes = 0;
    for (int p = 0; p < ng; p++) {
        size_t g = sizeof(float) * (size_t)numel[order[p]];
        if (p > 0 && bytes + g > cap) {
            d->end[d->n_buckets++] = p;
            bytes = 0;
        }
        bytes += g;
    }
    if (ng)
        d->end[d->n_buckets++] = ng;
    for (int p = 0, b = 0, nl = 0; p < ng; p++) {
        int k = order[p];
        d->alias[k] = -1;
        for (int q = 0; q < p && d->alias[k] < 0; q++)
            if (grad[0][order[q]] == grad[0][k] && numel[order[q]] == numel[k])
                d->alias[k] = order[q];
        if (d->alias[k] < 0)
            d->live[nl++] = k;
        if (p + 1 == d->end[b])
            d->live_end[b++] = nl;
    }
    for (int i = 0; i < n; i++) {
        d->grad[i] = grad[i];
        d->rep[i] = rep[i];
        d->me[i] = (ddp_replica){d, i, 0};
    }
    if (kind == RT_DDP_THREADS && pthread_create(&d->thread, NULL, ddp_thread, d) != 0) {
        rt_ddp_destroy(d);
        return mrt_set_error(MRT_ERR_OOM, "cannot start the gradient reducer's thread");
    }
    d->started = kind == RT_DDP_THREADS;
    mrt_status st = kind == RT_DDP_NCCL ? rt_nccl_bucket_setup(nccl, d->n_buckets) : MRT_OK;
    if (st != MRT_OK) {
        rt_ddp_destroy(d);
        return st;
    }
    for (int i = 0; i < n; i++)
        rep[i]->ddp = &d->me[i];
    *out = d;
    return MRT_OK;
}

mrt_status rt_ddp_begin(rt_ddp *d, const double *w, const int64_t *count)
{
    d->need = 0;
    for (int i = 0; i < d->n; i++) {
        d->w[i] = w[i];
        d->count[i] = count[i];
        d->need += count[i] > 0;
        d->me[i].next = 0;
    }
    for (int b = 0; b < d->n_buckets; b++) {
        d->arrived[b] = 0;
        d->t_start[b] = 0;
    }
    d->ready = d->done = 0;
    d->t_last = 0;
    mrt_status st = MRT_OK;
    for (int i = 0; i < d->n && st == MRT_OK && d->kind == RT_DDP_NCCL; i++)
        st = rt_nccl_bucket_begin(d->nccl, i, w[i]);
    return st;
}

mrt_status rt_ddp_replica_done(rt_ddp *d, int i)
{
    if (d->kind == RT_DDP_THREADS && !d->count[i]) /* not among the replicas summed */
        return MRT_OK;
    return ddp_hand_over(d, i, d->n_grads);
}

mrt_status rt_ddp_finish(rt_ddp *d, double *sumsq)
{
    mrt_status st = MRT_OK;
    if (d->kind == RT_DDP_MPI) {
        st = ddp_hand_over(d, 0, d->n_grads);
        mrt_status w = rt_mpi_wait_all();
        if (st == MRT_OK)
            st = w;
        double ss = 0; /* in gradient order, as the reduction after the step summed it */
        for (int k = 0; k < d->n_grads && st == MRT_OK; k++)
            for (int64_t e = 0; e < d->numel[k]; e++)
                ss += (double)d->grad[0][k][e] * d->grad[0][k][e];
        *sumsq = ss;
        return st;
    }
    if (d->kind == RT_DDP_NCCL) {
        for (int i = 0; i < d->n && st == MRT_OK; i++)
            st = ddp_hand_over(d, i, d->n_grads);
        for (int i = 0; i < d->n && st == MRT_OK; i++)
            st = rt_nccl_bucket_wait(d->nccl, i, d->rep[i]->stream[0]);
        /* every replica holds the same sums: the norm of replica 0's, on its GPU */
        if (st == MRT_OK)
            st = rt_nccl_sumsq(d->nccl, 0, d->grad[0], d->numel, d->n_grads, d->rep[0]->stream[0], sumsq);
        return st;
    }
    for (int i = 0; i < d->n; i++)
        if (d->count[i])
            ddp_hand_over(d, i, d->n_grads);
    pthread_mutex_lock(&d->lock);
    while (d->done < d->n_buckets)
        pthread_cond_wait(&d->fin, &d->lock);
    pthread_mutex_unlock(&d->lock);
    double ss = 0;
    for (int k = 0; k < d->n_grads; k++)
        ss += d->ss[k];
    *sumsq = ss;
    return st;
}

int rt_ddp_buckets(const rt_ddp *d) { return d ? d->n_buckets : 0; }

int rt_ddp_overlapped(const rt_ddp *d)
{
    int k = 0;
    for (int b = 0; d && b < d->n_buckets; b++)
        k += d->t_start[b] > 0 && d->t_start[b] < d->t_last;
    return k;
}

void rt_ddp_destroy(rt_ddp *d)
{
    if (!d)
        return;
    if (d->started) {
        pthread_mutex_lock(&d->lock);
        d->quit = 1;
        pthread_cond_broadcast(&d->go);
        pthread_mutex_unlock(&d->lock);
        pthread_join(d->thread, NULL);
    }
    pthread_cond_destroy(&d->go);
    pthread_cond_destroy(&d->fin);
    pthread_mutex_destroy(&d->lock);
    for (int i = 0; i < d->n; i++)
        if (d->rep[i] && d->rep[i]->ddp == &d->me[i])
            d->rep[i]->ddp = NULL;
    free((void *)d->order);
    free(d->end);
    free(d->ss);
    free(d->t_start);
    free(d->arrived);
    free(d->alias);
    free(d->live);
    free(d->live_end);
    free(d);
}
