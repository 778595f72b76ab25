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

/* Sort keys that carry their own value (no global state: two threads may print at once). */
typedef struct by_s {
    double s;
    int i;
} by_s;
static int cmp_time(const void *a, const void *b) {
    const by_s *x = a, *y = b;
    return x->s < y->s ? 1 : x->s > y->s ? -1 : x->i - y->i;
}

/* A kernel's name without its "kN " (the op site it shares with the other instances of a line). */
static const char *site(const char *name) {
    const char *sp = name ? strchr(name, ' ') : NULL;
    return sp ? sp + 1 : name ? name : "?";
}

typedef struct by_site_k {
    const char *site;
    int i;
} by_site_k;
static int cmp_site(const void *a, const void *b) {
    const by_site_k *x = a, *y = b;
    int c = strcmp(x->site, y->site);
    return c ? c : x->i - y->i;
}

static void row(FILE *f, const prof_k *k, double r, double tot, const char *count, const char *name) {
    char gfs[16] = "-";
    if (k->flops > 0 && k->s > 0) snprintf(gfs, sizeof gfs, "%.1f", k->flops / k->s * 1e-9);
    fprintf(f, "profile: %10.4f %5.1f%% %8s %8.1f  %s%s\n", 1e3 * k->s / r, tot > 0 ? 100 * k->s / tot : 0.0, gfs,
            k->s > 0 ? k->bytes / k->s * 1e-9 : 0.0, count, name);
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
    fprintf(f, "profile: %s, %ld call%s of run(): %.3f ms per call in %d kernel%s (the sum of their times)\n", m->desc->name,
            runs, runs == 1 ? "" : "s", 1e3 * tot / r, p->n, p->n == 1 ? "" : "s");
    if (tot > 0 && gs > 0)
        fprintf(f, "profile:   GEMMs and convolutions %.3f ms (%.1f%%), %.3g GFLOP per call at %.1f GFLOP/s\n", 1e3 * gs / r,
                100 * gs / tot, gf / r * 1e-9, gf / gs * 1e-9);
    if (tot > 0 && os > 0)
        fprintf(f, "profile:   other kernels %.3f ms (%.1f%%), %.3g GB read and written per call at %.1f GB/s\n", 1e3 * os / r,
                100 * os / tot, ob / r * 1e-9, ob / os * 1e-9);
    size_t n1 = (size_t)(p->n > 0 ? p->n : 1);
    by_s *ord = malloc(sizeof *ord * n1);
    by_site_k *bys = malloc(sizeof *bys * n1);
    prof_k *g = calloc(n1, sizeof *g);
    int *first = malloc(sizeof(int) * n1), *cnt = calloc(n1, sizeof(int));
    by_s *gord = malloc(sizeof *gord * n1);
    mrt_status st = MRT_OK;
    if (!ord || !bys || !g || !first || !cnt || !gord) {
        st = mrt_set_error(MRT_ERR_OOM, "%s: out of memory for the profile's table", m->desc->name);
        goto out;
    }
    for (int i = 0; i < p->n; i++) ord[i] = (by_s){p->k[i].s, i};
    qsort(ord, (size_t)p->n, sizeof *ord, cmp_time);
    int shown = top > 0 && top < p->n ? top : p->n;
    fprintf(f, "profile: %s kernels by time (GFLOP/s: GEMMs and convolutions, as direct ones, so a Winograd conv may "
               "show more than the GEMM peak; GB/s: the bytes each reads and writes once):\n", shown == p->n ? "all" : "the slowest");
    fprintf(f, "profile: %10s %6s %8s %8s  %s\n", "ms/call", "%", "GFLOP/s", "GB/s", "kernel");
    const char *const *names = m->desc->kernel_names;
    for (int j = 0; j < shown; j++) {
        const prof_k *k = &p->k[ord[j].i];
        if (k->calls) row(f, k, r, tot, "", names ? names[ord[j].i] : "?");
    }
    if (shown < p->n) fprintf(f, "profile: (%d more kernel%s)\n", p->n - shown, p->n - shown == 1 ? "" : "s");

    /* the same by op site: the kernels of one source line:col (a layer repeated in a loop, the
     * blocks of an imported model) summed, since that is where a model's time goes */
    if (names) {
        for (int i = 0; i < p->n; i++) bys[i] = (by_site_k){site(names[i]), i};
        qsort(bys, (size_t)p->n, sizeof *bys, cmp_site);
        int ng = 0;
        for (int j = 0; j < p->n; j++) {
            int i = bys[j].i;
            if (!ng || strcmp(bys[j].site, site(names[first[ng - 1]]))) first[ng++] = i;
            prof_k *t = &g[ng - 1];
            t->s += p->k[i].s, t->flops += p->k[i].flops, t->bytes += p->k[i].bytes;
            cnt[ng - 1]++;
        }
        if (ng < p->n) {
            for (int i = 0; i < ng; i++) gord[i] = (by_s){g[i].s, i};
            qsort(gord, (size_t)ng, sizeof *gord, cmp_time);
            int gshown = top > 0 && top < ng ? top : ng;
            fprintf(f, "profile: by op site (the kernels of one source line summed):\n");
            fprintf(f, "profile: %10s %6s %8s %8s  %s\n", "ms/call", "%", "GFLOP/s", "GB/s", "kernels  op site");
            for (int j = 0; j < gshown; j++) {
                char c[16];
                snprintf(c, sizeof c, "%7d  ", cnt[gord[j].i]);
                row(f, &g[gord[j].i], r, tot, c, site(names[first[gord[j].i]]));
            }
        }
    }
out:
    free(ord), free(bys), free(g), free(first), free(cnt), free(gord);
    return st;
}
