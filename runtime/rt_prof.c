/*
 * rt_prof.c — the per-kernel profile of a model's runs (`PROG --profile`, mrt_model_profile).
 *
 * The generated run() brackets each kernel with mrt_prof_begin / mrt_prof_end when m->prof is
 * set (one predictable branch per kernel otherwise). Each kernel's wall time is measured on the
 * host: a kernel on the CPU is synchronous (its OpenMP region or oneDNN primitive returns when
 * done); on a GPU both calls first synchronize the slot's stream, so a profiled GPU run is
 * serialized and runs eagerly (no CUDA graph: rt_model.c's graphs_wanted). The compiler hands
 * each kernel's work as arguments: the multiply-adds of a GEMM or convolution (2 per MAC, as
 * FLOPs) and the bytes the kernel reads and writes once each (its distinct operands and its
 * result at this run's sizes), so the report gives GFLOP/s and GB/s next to the time, to set
 * against the machine's measured GEMM rate and memory bandwidth (bench/gemm/RESULTS.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "modelrt.h"

typedef struct prof_k {
    double s, flops, bytes; /* summed over the calls */
    long calls;
} prof_k;

typedef struct mrt_prof {
    int n;
    prof_k *k;
} mrt_prof;

static double prof_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

mrt_status mrt_model_profile(mrt_model *m, int on) {
    if (!m || !m->desc) return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_model_profile: model is NULL");
    mrt_prof *p = m->prof;
    if (!on) {
        if (p) free(p->k);
        free(p);
        m->prof = NULL;
        return MRT_OK;
    }
    int n = m->desc->n_kernels;
    if (!p) {
        if (!(p = calloc(1, sizeof *p)) || !(p->k = calloc((size_t)(n > 0 ? n : 1), sizeof *p->k))) {
            free(p);
            return mrt_set_error(MRT_ERR_OOM, "%s: out of memory for the profile of %d kernels", m->desc->name, n);
        }
        p->n = n;
        m->prof = p;
    } else {
        memset(p->k, 0, sizeof *p->k * (size_t)(p->n > 0 ? p->n : 1));
    }
    return MRT_OK;
}

double mrt_prof_begin(mrt_model *m, int slot) {
    if (m->dev[slot].kind == MRT_DEVICE_CUDA) (void)mrt_stream_sync(m->dev[slot], m->stream[slot], "profile");
    return prof_now();
}

void mrt_prof_end(mrt_model *m, int slot, int k, double t0, double flops, double bytes) {
    if (m->dev[slot].kind == MRT_DEVICE_CUDA) (void)mrt_stream_sync(m->dev[slot], m->stream[slot], "profile");
    mrt_prof *p = m->prof;
    if (!p || k < 0 || k >= p->n) return;
    p->k[k].s += prof_now() - t0;
    p->k[k].flops += flops;
    p->k[k].bytes += bytes;
    p->k[k].calls++;
}

static const prof_k *sort_base;
static int by_time(const void *a, const void *b) {
    double x = sort_base[*(const int *)a].s, y = sort_base[*(const int *)b].s;
    return x < y ? 1 : x > y ? -1 : *(const int *)a - *(const int *)b;
}

/* A kernel's name without its "kN " (the op site it shares with the other instances of a line). */
static const char *site(const char *name) {
    const char *sp = name ? strchr(name, ' ') : NULL;
    return sp ? sp + 1 : name ? name : "?";
}

static const char *const *sort_names;
static int by_site(const void *a, const void *b) {
    int c = strcmp(site(sort_names[*(const int *)a]), site(sort_names[*(const int *)b]));
    return c ? c : *(const int *)a - *(const int *)b;
}

mrt_status mrt_model_profile_print(const mrt_model *m, FILE *f, int top) {
    if (!m || !m->desc || !f) return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_model_profile_print: model or file is NULL");
    const mrt_prof *p = m->prof;
    if (!p) return mrt_set_error(MRT_ERR_INVALID_ARG, "%s: no profile was taken (mrt_model_profile(m, 1) before the runs)", m->desc->name);
    long runs = 0;
    double tot = 0, gs = 0, gf = 0, os = 0, ob = 0;
    for (int i = 0; i < p->n; i++) {
        const prof_k *k = &p->k[i];
        if (k->calls > runs) runs = k->calls;
        tot += k->s;
        if (k->flops > 0) gs += k->s, gf += k->flops;
        else os += k->s, ob += k->bytes;
    }
    if (runs == 0) {
        fprintf(f, "profile: %s: no run was profiled\n", m->desc->name);
        return MRT_OK;
    }
    double r = (double)runs;
    fprintf(f, "profile: %s, %ld run%s: %.3f ms per run in %d kernels (the sum of their times)\n", m->desc->name, runs,
            runs == 1 ? "" : "s", 1e3 * tot / r, p->n);
    if (tot > 0) {
        fprintf(f, "profile:   GEMMs and convolutions %.3f ms (%.1f%%), %.3g GFLOP per run at %.1f GFLOP/s\n", 1e3 * gs / r,
                100 * gs / tot, gf / r * 1e-9, gs > 0 ? gf / gs * 1e-9 : 0.0);
        if (gs < tot)
            fprintf(f, "profile:   other kernels %.3f ms (%.1f%%), %.3g GB read and written per run at %.1f GB/s\n",
                    1e3 * os / r, 100 * os / tot, ob / r * 1e-9, os > 0 ? ob / os * 1e-9 : 0.0);
    }
    int *ord = malloc(sizeof(int) * (size_t)(p->n > 0 ? p->n : 1));
    if (!ord) return mrt_set_error(MRT_ERR_OOM, "%s: out of memory for the profile's table", m->desc->name);
    for (int i = 0; i < p->n; i++) ord[i] = i;
    sort_base = p->k;
    qsort(ord, (size_t)p->n, sizeof(int), by_time);
    int shown = top > 0 && top < p->n ? top : p->n;
    fprintf(f, "profile: %s kernels by time (GFLOP/s for GEMMs and convolutions; GB/s: the bytes each reads and writes once):\n",
            shown == p->n ? "all" : "the slowest");
    fprintf(f, "profile: %10s %6s %8s %8s  %s\n", "ms/run", "%", "GFLOP/s", "GB/s", "kernel");
    for (int j = 0; j < shown; j++) {
        const prof_k *k = &p->k[ord[j]];
        if (!k->calls) continue;
        char gfs[16] = "-";
        if (k->flops > 0 && k->s > 0) snprintf(gfs, sizeof gfs, "%.1f", k->flops / k->s * 1e-9);
        const char *name = m->desc->kernel_names ? m->desc->kernel_names[ord[j]] : NULL;
        fprintf(f, "profile: %10.4f %5.1f%% %8s %8.1f  %s\n", 1e3 * k->s / r, tot > 0 ? 100 * k->s / tot : 0.0, gfs,
                k->s > 0 ? k->bytes / k->s * 1e-9 : 0.0, name ? name : "?");
    }
    if (shown < p->n) fprintf(f, "profile: (%d more kernels; --profile=all lists every one)\n", p->n - shown);

    /* the same by op site: the kernels of one source line:col (a layer repeated in a loop, the
     * blocks of an imported model) summed, since that is where a model's time goes */
    const char *const *names = m->desc->kernel_names;
    if (names) {
        for (int i = 0; i < p->n; i++) ord[i] = i;
        sort_names = names;
        qsort(ord, (size_t)p->n, sizeof(int), by_site);
        prof_k *g = calloc((size_t)p->n + 1, sizeof *g);
        int *first = malloc(sizeof(int) * ((size_t)p->n + 1)), *cnt = calloc((size_t)p->n + 1, sizeof(int)), ng = 0;
        if (!g || !first || !cnt) {
            free(g), free(first), free(cnt), free(ord);
            return mrt_set_error(MRT_ERR_OOM, "%s: out of memory for the profile's table", m->desc->name);
        }
        for (int j = 0; j < p->n; j++) {
            int i = ord[j];
            if (!ng || strcmp(site(names[i]), site(names[first[ng - 1]]))) first[ng++] = i;
            prof_k *t = &g[ng - 1];
            t->s += p->k[i].s, t->flops += p->k[i].flops, t->bytes += p->k[i].bytes;
            cnt[ng - 1]++;
        }
        int *gord = malloc(sizeof(int) * ((size_t)ng + 1));
        if (gord && ng < p->n) {
            for (int i = 0; i < ng; i++) gord[i] = i;
            sort_base = g;
            qsort(gord, (size_t)ng, sizeof(int), by_time);
            int gshown = top > 0 && top < ng ? top : ng;
            fprintf(f, "profile: by op site (the kernels of one source line summed):\n");
            fprintf(f, "profile: %10s %6s %8s %8s  %s\n", "ms/run", "%", "GFLOP/s", "GB/s", "kernels  op site");
            for (int j = 0; j < gshown; j++) {
                const prof_k *k = &g[gord[j]];
                char gfs[16] = "-";
                if (k->flops > 0 && k->s > 0) snprintf(gfs, sizeof gfs, "%.1f", k->flops / k->s * 1e-9);
                fprintf(f, "profile: %10.4f %5.1f%% %8s %8.1f  %7d  %s\n", 1e3 * k->s / r, tot > 0 ? 100 * k->s / tot : 0.0,
                        gfs, k->s > 0 ? k->bytes / k->s * 1e-9 : 0.0, cnt[gord[j]], site(names[first[gord[j]]]));
            }
        }
        free(gord), free(g), free(first), free(cnt);
    }
    free(ord);
    return MRT_OK;
}
