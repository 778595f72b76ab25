/*
 * rt_pipe.c — pipelined model parallelism: a model split over devices by 'on' regions runs each
 * batch as micro-batches that flow through its stages, so that the devices work at the same
 * time (GPipe's forward schedule: Huang et al., "GPipe: Efficient Training of Giant Neural
 * Networks using Pipeline Parallelism", 2019, section 2.2).
 *
 * A stage is a device slot of the model (place.c): its arena is its state. The generated run()
 * names, at each kernel boundary, the slots whose arena the next kernels start to use and those
 * whose arena the run is done with (mrt_pipe_gate; a transfer uses both its source's and its
 * destination's, so it holds both). A slot is held by one micro-batch at a time and handed on in
 * micro-batch order: micro-batch i enters slot s once micro-batch i-1 has left it. So stage s
 * works on micro-batch i while stage s+1 works on micro-batch i-1, and no arena is ever used by
 * two micro-batches at once. The waits cannot deadlock: a micro-batch only ever waits for the one
 * before it, which never waits for it, and the first waits for nobody.
 *
 * The micro-batches run on a team of worker threads, one per stage (micro-batch i on worker
 * i mod stages), each through a view of the model: a copy of the handle that shares its weights,
 * arenas and streams (one stream per GPU stage, so a GPU stage's kernels are queued in micro-batch
 * order) but has its own CUDA staging for the caller's host buffers and no CUDA graphs. A GPU
 * stage is handed on after its stream is synchronized, so that an error its stream reports
 * (a fault, an embedding's bad id, checked on the device) names the right micro-batch; the other
 * GPUs keep working meanwhile. CPU stages
 * share the cores: each runs its kernels with (threads / CPU stages) threads, at least one.
 *
 * Micro-batches are contiguous slices of the batch (the batch must lead every input and output,
 * and no op may mix batch items: the compiler's batch_chunkable, as for data parallelism), so the
 * outputs are gathered in order by writing each slice in place. Each slice's rows are what that
 * slice gives run alone; a GEMM library may round a row differently at another number of rows,
 * so against one run of the whole batch the result agrees to rounding (bit for bit where the ops
 * do not depend on the row count).
 */
#include "modelrt.h"
#include "rt_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* One worker's place in the pipeline: the view's m->pipe points here. */
typedef struct pipe_worker {
    struct mrt_pipe *p;
    int mb;      /* the micro-batch this worker runs now */
    int aborted; /* a gate stopped it because another micro-batch failed */
} pipe_worker;

struct mrt_pipe {
    const mrt_model_info *info;
    mrt_model *model; /* the caller's; the views copy it before each run */
    int n_slots, micro_batches, workers, cpu_threads;
    int cuttable; /* the batch leads every buffer and no op mixes batch items */
    int said_clamp, said_max; /* a notice is logged once per pipeline */
    mrt_model view[MRT_MAX_SLOTS];
    unsigned char *io[MRT_MAX_SLOTS][MRT_MAX_SLOTS]; /* [worker][slot]: its own CUDA staging */
    pipe_worker w[MRT_MAX_SLOTS];
    rt_team *team;
    /* the hand-over: turn[s] is the micro-batch that may hold slot s (those before it left it) */
    pthread_mutex_t lock;
    pthread_cond_t moved;
    int turn[MRT_MAX_SLOTS];
    int failed;
    /* this run */
    int n_mb;
    int64_t first[MRT_PIPE_MAX_MB], count[MRT_PIPE_MAX_MB];
    int64_t dims[MRT_MAX_SYMS];
    const void *const *in;
    void *const *out;
    size_t *unit; /* bytes per batch item of each input, then of each output */
    /* when each micro-batch got and left each slot (ms since the run began), for mrt_pipe_overlap */
    double t0, *t_in, *t_out; /* [mb * MRT_MAX_SLOTS + slot] */
    int t_cap;
    double overlap;
    int err_mb;   /* the first micro-batch that failed (not one stopped by it), or -1 */
    mrt_status err_st;
    char err[1024];
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

mrt_status mrt_pipe_gate(mrt_model *m, unsigned acquire, unsigned release)
{
    pipe_worker *w = m ? m->pipe : NULL;
    if (!w)
        return MRT_OK;
    mrt_pipe *p = w->p;
    /* A GPU stage is handed on once its work for this micro-batch is done, so that what its
     * stream reports at the synchronization (a fault, an embedding's bad id) is this
     * micro-batch's: the next one's kernels are not queued yet. */
    for (int s = 0; s < p->n_slots; s++)
        if (release >> s & 1 && m->dev[s].kind == MRT_DEVICE_CUDA) {
            char what[96];
            snprintf(what, sizeof what, "%s micro-batch %d", m->desc->name, w->mb + 1);
            mrt_status st = mrt_stream_sync(m->dev[s], m->stream[s], what);
            if (st != MRT_OK)
                return st;
        }
    pthread_mutex_lock(&p->lock);
    double t = now_ms() - p->t0;
    if (release) {
        for (int s = 0; s < p->n_slots; s++)
            if (release >> s & 1) {
                p->turn[s] = w->mb + 1;
                p->t_out[w->mb * MRT_MAX_SLOTS + s] = t;
            }
        pthread_cond_broadcast(&p->moved);
    }
    for (int s = 0; s < p->n_slots; s++)
        while (acquire >> s & 1 && p->turn[s] != w->mb && !p->failed)
            pthread_cond_wait(&p->moved, &p->lock);
    if (acquire) {
        t = now_ms() - p->t0;
        for (int s = 0; s < p->n_slots; s++)
            if (acquire >> s & 1)
                p->t_in[w->mb * MRT_MAX_SLOTS + s] = t;
    }
    int failed = p->failed;
    pthread_mutex_unlock(&p->lock);
    if (failed) {
        w->aborted = 1;
        return mrt_set_error(MRT_ERR_INVALID_ARG, "micro-batch %d stopped: another micro-batch failed", w->mb + 1);
    }
    return MRT_OK;
}

/* Worker i: micro-batches i, i + workers, ... in order, each through its view of the model. */
static void pipe_worker_run(void *ctx, int i)
{
    mrt_pipe *p = ctx;
    const mrt_model_info *info = p->info;
    pipe_worker *w = &p->w[i];
#ifdef _OPENMP
    omp_set_num_threads(p->cpu_threads); /* this thread's CPU stages' share of the cores */
#endif
    const void *in[64];
    void *out[64];
    for (int j = i; j < p->n_mb; j += p->workers) {
        pthread_mutex_lock(&p->lock);
        int failed = p->failed;
        pthread_mutex_unlock(&p->lock);
        if (failed)
            return;
        w->mb = j;
        w->aborted = 0;
        for (int k = 0; k < info->n_inputs; k++)
            in[k] = (const unsigned char *)p->in[k] + (size_t)p->first[j] * p->unit[k];
        for (int k = 0; k < info->n_outputs; k++)
            out[k] = (unsigned char *)p->out[k] + (size_t)p->first[j] * p->unit[info->n_inputs + k];
        int64_t dims[MRT_MAX_SYMS];
        memcpy(dims, p->dims, sizeof dims);
        dims[0] = p->count[j];
        mrt_status st = info->run(&p->view[i], dims, in, out);
        if (st == MRT_OK)
            continue;
        pthread_mutex_lock(&p->lock);
        if (!w->aborted && (p->err_mb < 0 || j < p->err_mb)) {
            p->err_mb = j;
            p->err_st = st;
            snprintf(p->err, sizeof p->err, "%s", mrt_last_error());
        }
        p->failed = 1;
        pthread_cond_broadcast(&p->moved);
        pthread_mutex_unlock(&p->lock);
        return;
    }
}

mrt_status mrt_pipe_create(mrt_pipe **out, const mrt_model_info *info, void *model, int micro_batches)
{
    if (!out || !info || !model)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_pipe_create: NULL argument");
    *out = NULL;
    if (micro_batches < 1 || micro_batches > MRT_PIPE_MAX_MB)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "micro-batches %d: expected a count from 1 to %d", micro_batches,
                             MRT_PIPE_MAX_MB);
    const mrt_model_desc *d = info->desc;
    mrt_model *m = model;
    if (!d || m->desc != d)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_pipe_create: model '%s' %s", info->name ? info->name : "?",
                             !d ? "was not compiled by modelc (no descriptor)" : "is not the model info describes");
    if (info->train)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "model '%s' is a training build: micro-batches pipeline inference only",
                             info->name);
    /* the batch must lead every input and output, once, and no op may mix batch items */
    int leading = info->has_batch && info->batch_chunkable && info->n_inputs <= 64 && info->n_outputs <= 64;
    for (int i = 0; leading && i < info->n_inputs + info->n_outputs; i++)
        leading = rt_batch_leads(i < info->n_inputs ? &info->inputs[i] : &info->outputs[i - info->n_inputs]);
    if (info->n_inputs > 64 || info->n_outputs > 64)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "model '%s' has %d inputs and %d outputs: micro-batches take at most 64 "
                             "of each", info->name, info->n_inputs, info->n_outputs);
    if (d->n_slots > 1 && !leading)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "model '%s' cannot run in micro-batches: %s", info->name,
                             !info->has_batch ? "it has no batch dimension"
                             : !info->batch_chunkable ? "an operation mixes batch items (a reduction or a reshape across the batch)"
                                                      : "the batch is not the leading axis of every input and output");
    mrt_pipe *p = calloc(1, sizeof *p);
    if (!p)
        return mrt_set_error(MRT_ERR_OOM, "mrt_pipe_create: out of memory");
    p->info = info;
    p->model = m;
    p->n_slots = d->n_slots;
    p->micro_batches = micro_batches;
    p->workers = d->n_slots; /* a stage per worker: at most that many micro-batches are in flight */
    p->cuttable = leading;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->moved, NULL);
    mrt_status st = MRT_OK;
    p->unit = calloc((size_t)(info->n_inputs + info->n_outputs + 1), sizeof *p->unit);
    if (!p->unit)
        st = mrt_set_error(MRT_ERR_OOM, "mrt_pipe_create: out of memory");
    if (d->n_slots == 1) {
        mrt_log(MRT_LOG_INFO, "model '%s' has no 'on' regions: nothing to pipeline, it runs as usual", info->name);
        p->micro_batches = 1;
    }
    /* the CPU stages share the cores the thread setting gives */
    int cpus = 0, threads = rt_cpu_threads();
#ifdef _OPENMP
    if (threads < 1)
        threads = omp_get_max_threads();
#endif
    for (int s = 0; s < d->n_slots; s++)
        cpus += m->dev[s].kind == MRT_DEVICE_CPU;
    p->cpu_threads = threads < 1 ? 1 : cpus > 1 ? (threads / cpus > 0 ? threads / cpus : 1) : threads;
    /* each worker's own staging on the GPU stages (the model's holds nobody's micro-batch) */
    for (int w = 0; st == MRT_OK && w < p->workers; w++)
        for (int s = 0; st == MRT_OK && s < d->n_slots; s++)
            if (m->dev[s].kind == MRT_DEVICE_CUDA && d->slots[s].io_bytes) {
                if ((st = mrt_device_activate(m->dev[s])) == MRT_OK && !(p->io[w][s] = mrt_alloc(m->dev[s], d->slots[s].io_bytes)))
                    st = MRT_ERR_OOM; /* mrt_alloc named the bytes and the device */
            }
    if (st == MRT_OK && m->dev[0].kind == MRT_DEVICE_CUDA)
        st = mrt_device_activate(m->dev[0]);
    if (st == MRT_OK)
        st = rt_team_create(&p->team, p->workers);
    if (st != MRT_OK) {
        mrt_pipe_destroy(p);
        return st;
    }
    *out = p;
    return MRT_OK;
}

/* One change of the slots a micro-batch holds, for the sweep in pipe_overlap. */
typedef struct {
    double t;
    int mb, d;
} pipe_event;

static int event_cmp(const void *a, const void *b)
{
    const pipe_event *x = a, *y = b;
    return x->t < y->t ? -1 : x->t > y->t ? 1 : x->d - y->d; /* at a tie, leave before getting */
}

/* The share of the run's wall time during which two micro-batches or more each held a slot,
 * i.e. two stages worked at once: a sweep over every [got, left) interval. */
static double pipe_overlap(const mrt_pipe *p, double wall)
{
    int n = 0, cap = p->n_mb * p->n_slots * 2;
    pipe_event *ev = malloc(sizeof *ev * (size_t)(cap + 1));
    int *held = calloc((size_t)p->n_mb + 1, sizeof *held);
    double both = 0;
    if (ev && held && wall > 0) {
        for (int j = 0; j < p->n_mb; j++)
            for (int s = 0; s < p->n_slots; s++) {
                double a = p->t_in[j * MRT_MAX_SLOTS + s], b = p->t_out[j * MRT_MAX_SLOTS + s];
                if (a >= 0 && b >= a) {
                    ev[n++] = (pipe_event){a, j, 1};
                    ev[n++] = (pipe_event){b, j, -1};
                }
            }
        qsort(ev, (size_t)n, sizeof *ev, event_cmp);
        int active = 0; /* micro-batches holding a slot */
        for (int k = 0; k < n; k++) {
            if (k > 0 && active >= 2)
                both += ev[k].t - ev[k - 1].t;
            int was = held[ev[k].mb];
            held[ev[k].mb] += ev[k].d;
            active += (held[ev[k].mb] > 0) - (was > 0);
        }
    }
    free(ev);
    free(held);
    return wall > 0 ? both / wall : 0;
}

double mrt_pipe_overlap(const mrt_pipe *p) { return p ? p->overlap : 0; }

mrt_status mrt_pipe_run(mrt_pipe *p, const int64_t *dims, const void *const *in, void *const *out)
{
    if (!p || !dims || (!in && p->info->n_inputs) || (!out && p->info->n_outputs))
        return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_pipe_run: NULL argument");
    const mrt_model_info *info = p->info;
    int64_t B = dims[0];
    if (B < 1)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_pipe_run: batch %lld", (long long)B);
    int64_t n = p->micro_batches;
    if (n > B) {
        if (!p->said_clamp++)
            mrt_log(MRT_LOG_INFO, "%lld micro-batches of a batch of %lld: runs %lld micro-batches of one item",
                    (long long)n, (long long)B, (long long)B);
        n = B;
    }
    if ((B + n - 1) / n > info->max_batch && !p->cuttable)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_pipe_run: batch %lld exceeds the compiled maximum %d, and model '%s' "
                             "cannot be cut into pieces of it (its batch items interact, or the batch does not lead every "
                             "input and output)", (long long)B, info->max_batch, info->name);
    if ((B + n - 1) / n > info->max_batch) {
        int64_t need = (B + info->max_batch - 1) / info->max_batch;
        if (need > MRT_PIPE_MAX_MB)
            return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_pipe_run: batch %lld needs %lld micro-batches of at most %d "
                                 "items (the compiled maximum batch); at most %d", (long long)B, (long long)need,
                                 info->max_batch, MRT_PIPE_MAX_MB);
        if (!p->said_max++)
            mrt_log(MRT_LOG_INFO, "%lld micro-batches of a batch of %lld would exceed the compiled maximum batch %d: "
                    "runs %lld micro-batches", (long long)n, (long long)B, info->max_batch, (long long)need);
        n = need;
    }
    /* bytes per batch item of each buffer at these sizes */
    for (int i = 0; i < info->n_inputs + info->n_outputs; i++)
        p->unit[i] = rt_batch_unit(i < info->n_inputs ? &info->inputs[i] : &info->outputs[i - info->n_inputs], dims);
    p->n_mb = (int)n;
    int64_t first = 0;
    for (int i = 0; i < p->n_mb; i++) {
        p->first[i] = first;
        p->count[i] = B / n + (i < B % n);
        first += p->count[i];
    }
    memcpy(p->dims, dims, sizeof p->dims);
    for (int s = info->n_syms > 0 ? info->n_syms : 1; s < MRT_MAX_SYMS; s++)
        p->dims[s] = 1;
    p->in = in;
    p->out = out;
    /* the views: the model as it is now (its weights may have been loaded since), with each
     * worker's staging, no graphs, and its place in the pipeline */
    for (int w = 0; w < p->workers; w++) {
        p->view[w] = *p->model;
        p->view[w].graphs = NULL;
        for (int s = 0; s < p->n_slots; s++)
            if (p->io[w][s])
                p->view[w].io[s] = p->io[w][s];
        p->w[w] = (pipe_worker){.p = p};
        p->view[w].pipe = p->n_slots > 1 ? &p->w[w] : NULL;
    }
    memset(p->turn, 0, sizeof p->turn);
    p->failed = 0;
    p->err_mb = -1;
    if (p->n_mb > p->t_cap) {
        double *a = realloc(p->t_in, sizeof *a * (size_t)p->n_mb * MRT_MAX_SLOTS);
        if (a)
            p->t_in = a;
        double *b = a ? realloc(p->t_out, sizeof *b * (size_t)p->n_mb * MRT_MAX_SLOTS) : NULL;
        if (b)
            p->t_out = b;
        if (!a || !b)
            return mrt_set_error(MRT_ERR_OOM, "mrt_pipe_run: out of memory for %d micro-batches' times", p->n_mb);
        p->t_cap = p->n_mb;
    }
    for (int i = 0; i < p->n_mb * MRT_MAX_SLOTS; i++)
        p->t_in[i] = p->t_out[i] = -1;
    p->t0 = now_ms();
    rt_team_run(p->team, pipe_worker_run, p);
    p->overlap = pipe_overlap(p, now_ms() - p->t0);
    if (p->model->dev[0].kind == MRT_DEVICE_CUDA)
        mrt_device_activate(p->model->dev[0]); /* the caller's thread as the model leaves it */
    if (p->failed) {
        if (p->err_mb < 0)
            return mrt_set_error(MRT_ERR_INTERNAL, "mrt_pipe_run: a micro-batch stopped without an error");
        int j = p->err_mb;
        return mrt_set_error(p->err_st, "micro-batch %d of %d (batch items %lld..%lld): %s (positions count from batch "
                             "item %lld)", j + 1, p->n_mb, (long long)p->first[j], (long long)(p->first[j] + p->count[j] - 1),
                             p->err, (long long)p->first[j]);
    }
    return MRT_OK;
}

int mrt_pipe_stages(const mrt_pipe *p) { return p ? p->n_slots : 0; }

int mrt_pipe_cpu_threads(const mrt_pipe *p) { return p ? p->cpu_threads : 0; }

void mrt_pipe_destroy(mrt_pipe *p)
{
    if (!p)
        return;
    rt_team_destroy(p->team);
    for (int w = 0; w < MRT_MAX_SLOTS; w++)
        for (int s = 0; s < MRT_MAX_SLOTS; s++)
            if (p->io[w][s])
                mrt_free(p->model->dev[s], p->io[w][s]);
    pthread_cond_destroy(&p->moved);
    pthread_mutex_destroy(&p->lock);
    free(p->unit);
    free(p->t_in);
    free(p->t_out);
    free(p);
}
