#include <dnnl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include "mrt_kernels.h"
static float fb(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t bf(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static int64_t ord(float f) { int32_t i; memcpy(&i, &f, 4); return i < 0 ? (int64_t)INT32_MIN - i : i; }
static double ulp_err(float y, double ref) { /* in ulps of the float nearest ref */
    float r = (float)ref;
    double u = fabs((double)nextafterf(fabsf(r), INFINITY) - fabs((double)r));
    if (r == 0) u = 1.4e-45;
    return fabs((double)y - ref) / u;
}
int main(int argc, char **argv) {
    int step = argc > 1 ? atoi(argv[1]) : 97;
    size_t n = 0, cap = ((size_t)1 << 32) / step + 16;
    float *x = malloc(cap * 4), *y = malloc(cap * 4);
    for (uint64_t u = 0; u < ((uint64_t)1 << 32); u += step) { float f = fb((uint32_t)u); if (f == f && !isinf(f)) x[n++] = f; }
    dnnl_engine_t eng; dnnl_stream_t s; dnnl_engine_create(&eng, dnnl_cpu, 0); dnnl_stream_create(&s, eng, 0);
    dnnl_memory_desc_t md; dnnl_dims_t d = {(int64_t)n};
    dnnl_memory_desc_init_by_tag(&md, 1, d, dnnl_f32, dnnl_a);
    dnnl_eltwise_desc_t ed; dnnl_eltwise_forward_desc_init(&ed, dnnl_forward_inference, dnnl_eltwise_gelu_erf, &md, 0, 0);
    dnnl_primitive_desc_t pd; if (dnnl_primitive_desc_create(&pd, &ed, NULL, eng, NULL)) return 1;
    const char *impl; dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl); printf("impl %s, %zu floats\n", impl, n);
    dnnl_primitive_t p; dnnl_primitive_create(&p, pd);
    dnnl_memory_t mx, my; dnnl_memory_create(&mx, &md, eng, x); dnnl_memory_create(&my, &md, eng, y);
    dnnl_exec_arg_t a[] = {{DNNL_ARG_SRC, mx}, {DNNL_ARG_DST, my}}; dnnl_primitive_execute(p, s, 2, a); dnnl_stream_wait(s);
    /* regions */
    const double lo[] = {-INFINITY, -10, -5, -3, -1, -1e-3, 1e-3, 1, 3, 5}, hi[] = {-10, -5, -3, -1, -1e-3, 1e-3, 1, 3, 5, INFINITY};
    for (int r = 0; r < 10; r++) {
        double wd = 0, wm = 0; float xd = 0, xm = 0; double sumd = 0, summ = 0; size_t c = 0;
        for (size_t i = 0; i < n; i++) {
            if (!(x[i] >= lo[r] && x[i] < hi[r])) continue;
            double v = x[i];
            double ref = v < 0 ? 0.5 * v * erfc(-v / sqrt(2.0)) : 0.5 * v * (1 + erf(v / sqrt(2.0)));
            double ed_ = ulp_err(y[i], ref), em = ulp_err(mrt_gelu(x[i]), ref);
            if (ed_ > wd) wd = ed_, xd = x[i];
            if (em > wm) wm = em, xm = x[i];
            sumd += ed_; summ += em; c++;
        }
        printf("[%g, %g): %zu floats: onednn max %.3g ulp (x=%.9g) mean %.3g; mrt_gelu max %.3g ulp (x=%.9g) mean %.3g\n",
               lo[r], hi[r], c, wd, xd, sumd / c, wm, xm, summ / c);
    }
    /* specials */
    float sp[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-45f, -1e-45f, -20.0f, -100.0f, 88.0f, 1e30f, -1e30f, -3.4e38f};
    int ns = sizeof sp / sizeof sp[0];
    dnnl_dims_t d2 = {ns}; dnnl_memory_desc_t md2; dnnl_memory_desc_init_by_tag(&md2, 1, d2, dnnl_f32, dnnl_a);
    dnnl_eltwise_desc_t ed2; dnnl_eltwise_forward_desc_init(&ed2, dnnl_forward_inference, dnnl_eltwise_gelu_erf, &md2, 0, 0);
    dnnl_primitive_desc_t pd2; dnnl_primitive_desc_create(&pd2, &ed2, NULL, eng, NULL);
    dnnl_primitive_t p2; dnnl_primitive_create(&p2, pd2); float ys[32];
    dnnl_memory_t m1, m2; dnnl_memory_create(&m1, &md2, eng, sp); dnnl_memory_create(&m2, &md2, eng, ys);
    dnnl_exec_arg_t a2[] = {{DNNL_ARG_SRC, m1}, {DNNL_ARG_DST, m2}}; dnnl_primitive_execute(p2, s, 2, a2); dnnl_stream_wait(s);
    for (int i = 0; i < ns; i++) printf("x=%g: onednn %g (%08x) mrt_gelu %g (%08x)\n", sp[i], ys[i], bf(ys[i]), mrt_gelu(sp[i]), bf(mrt_gelu(sp[i])));
    return 0;
}
