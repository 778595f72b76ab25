/*
 * kprint.c — printing kernels as C, shared by both emitters: C types and sizes, identifiers,
 * the fused scalar expression (NAME_expr, MRT_HD_INLINE so the CPU loop and the CUDA kernel compile
 * the very same text), the loop nest of a fused elementwise kernel and its index expressions.
 * emit_c.c and emit_cuda.c call into this file; it calls neither, and touches no file.
 */
#include "modelc.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

/* The storage type. bool is stored as one byte holding 0 or 1 (PyTorch's and NumPy's layout);
 * f16 and bf16 as their 16 bits (IEEE binary16; bfloat16, the top half of an f32). */
const char *c_type(DType dt) {
    return dt == DT_F32 ? "float" : dt == DT_I32 ? "int32_t" : dt == DT_I64 ? "int64_t" : dtype_is_half(dt) ? "uint16_t" : "uint8_t";
}

/* The type an expression computes a value of dtype dt in: f16 and bf16 compute in float. */
static const char *calc_type(DType dt) { return dtype_is_half(dt) ? "float" : c_type(dt); }

/* mrt_f16 / mrt_bf16: the prefix of the runtime's conversion functions (mrt_kernels.h). */
static const char *half_pfx(DType dt) { return dt == DT_F16 ? "mrt_f16" : "mrt_bf16"; }

const char *sym_params = "", *sym_args = "", *sym_voids = "";

char *dim_c(Dim d) {
    if (!dim_is_sym(d)) return xprintf("%" PRId64, d.c);
    char buf[256];
    size_t n = 0;
    int nf = d.c != 1;
    if (nf) n += snprintf(buf + n, sizeof buf - n, "%" PRId64, d.c);
    for (int k = 0; k < MAX_SYMS; k++)
        for (int j = 0; j < d.e[k] && n < sizeof buf; j++, nf++)
            n += snprintf(buf + n, sizeof buf - n, k ? "%sB%d" : "%sB", nf ? " * " : "", k);
    if (n >= sizeof buf) ICE("dimension too long for C: %d factors", nf);
    return nf == 1 ? xstrdup(buf) : xprintf("(%s)", buf);
}

void contiguous_strides(const Shape *s, Dim *st) {
    Dim acc = {1, {0}};
    for (int i = s->rank - 1; i >= 0; i--) {
        st[i] = acc;
        acc = dim_mul(acc, s->d[i], NULL);
    }
}

char *c_ident(const char *name) {
    static const char *reserved[] = {"auto", "break", "case", "char", "const", "continue", "default", "do",
                                     "double", "else", "enum", "extern", "float", "for", "goto", "if", "inline",
                                     "int", "long", "register", "restrict", "return", "short", "signed", "sizeof",
                                     "static", "struct", "switch", "typedef", "union", "unsigned", "void",
                                     "volatile", "while", "m", "batch", "B", "B1", "B2", "B3", "st", "host", "direct", NULL};
    char *s = xstrdup(name);
    for (char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '_') *p = '_';
    for (int i = 0; reserved[i]; i++)
        if (!strcmp(s, reserved[i])) return xprintf("%s_", s);
    if (isdigit((unsigned char)s[0])) return xprintf("_%s", s); /* 0.weight (nn.Sequential) */
    if (!strncmp(s, "mrt_", 4)) return xprintf("%s_", s); /* our locals are mrt_* */
    return s;
}



char *float_lit(double v) {
    float f = (float)v;
    if (isinf(f)) return xstrdup(f > 0 ? "INFINITY" : "(-INFINITY)");
    if (isnan(f)) return xstrdup("NAN");
    return xprintf("%af", (double)f);
}


/* An integer // or % whose divisor is not a nonzero constant. */
static bool op_may_fault(const Expr *x) {
    return x->kind == EX_OP && (x->op == OP_FLOORDIV || x->op == OP_REMAINDER) && dtype_is_integer(x->dt) &&
           !(x->b->kind == EX_CONST && x->b->value != 0);
}

/* The integer C expressions of ops.def's IEXPR rows, by op. */
static const char *const int_expr[OP__COUNT] = {
#define IEXPR(id, c_expr) [OP_##id] = c_expr,
#include "ops.def"
};

/* A constant of dtype dt as a C literal. */
static char *const_lit(DType dt, double v) {
    if (dt == DT_F32) return float_lit(v);
    if (dtype_is_half(dt)) return xprintf("%s_round(%s)", half_pfx(dt), float_lit(v)); /* folded by the C compiler */
    if (dt == DT_BOOL) return xstrdup(v != 0 ? "1" : "0");
    if (dt == DT_I32) return xprintf("%" PRId64, (int64_t)v);
    return xprintf("INT64_C(%" PRId64 ")", (int64_t)v);
}

/* cast(v) from dtype `from` to `to`, defined for every value (C leaves float-to-integer
 * conversion of NaN and out-of-range values undefined): to bool is v != 0 (NaN is true, as in
 * PyTorch); float to integer truncates toward zero, NaN gives 0 and out-of-range values
 * saturate (mrt_f32_to_i32/_i64); i64 to i32 wraps (keeps the low 32 bits); bool gives 0 or 1.
 * An f16 or bf16 value is already a float here (calc_type) and a result of those dtypes is
 * rounded by emit_expr, so they cast as f32 does; an integer goes to them through
 * mrt_i64_to_f32_odd (round to odd), so that the rounding to 11 or 8 bits is the only one. */
static char *cast_expr(DType from, DType to, const char *v) {
    if (dtype_is_half(from)) from = DT_F32;
    if (dtype_is_half(to) && dtype_is_integer(from)) return xprintf("mrt_i64_to_f32_odd((int64_t)%s)", v);
    if (dtype_is_half(to)) to = DT_F32;
    if (to == DT_BOOL) return xprintf("(%s != 0)", v);
    if (from == DT_F32 && dtype_is_integer(to)) return xprintf("mrt_f32_to_%s(%s)", dtype_name(to), v);
    if (from == DT_I64 && to == DT_I32) return xprintf("(int32_t)(uint32_t)(uint64_t)%s", v);
    if (from == DT_BOOL) return xprintf("(%s)(%s != 0)", c_type(to), v); /* any nonzero byte is true */
    return xprintf("(%s)%s", c_type(to), v);
}

/* One temporary per expression node, in operand order, each of its node's dtype; an op's C
 * text is its c_expr row in ops.def (its IEXPR row when it computes an integer) with %0 %1 %2
 * replaced by the operands' temporaries, %a %b by its float attributes and %T %U %N by its C
 * type, that type's unsigned twin and its dtype's name. An f16 or bf16 node is a float
 * temporary holding a value of its dtype: a leaf converts on read, an op computes in f32 and
 * rounds (mrt_f16_round: to nearest even), so a fused kernel gives the bits of the unfused chain. */
static int emit_expr(FILE *o, const Kernel *k, const Expr *x, int *tmp, bool comments) {
    (void)k;
    const char *T = calc_type(x->dt);
    bool half = dtype_is_half(x->dt);
    if (x->kind == EX_CONST) {
        fprintf(o, "    const %s t%d = %s;\n", T, *tmp, const_lit(x->dt, x->value));
        return (*tmp)++;
    }
    if (x->kind == EX_LEAF) {
        if (half) fprintf(o, "    const float t%d = %s_to_f32(a%d);\n", *tmp, half_pfx(x->dt), x->leaf);
        else fprintf(o, "    const %s t%d = a%d;\n", T, *tmp, x->leaf);
        return (*tmp)++;
    }
    const char *tmpl = dtype_is_integer(x->dt) && int_expr[x->op] ? int_expr[x->op] : op_info[x->op].c_expr;
    if (!tmpl) ICE("op '%s' in an elementwise expression has no c_expr in ops.def", op_name(x->op));
    int arg[3] = {-1, -1, -1};
    const Expr *opnd[3] = {x->a, x->b, x->c};
    for (int i = 0; i < 3; i++)
        if (opnd[i]) arg[i] = emit_expr(o, k, opnd[i], tmp, comments);
    int t = (*tmp)++;
    fprintf(o, "    const %s t%d = ", T, t);
    if (half) fprintf(o, "%s_round(", half_pfx(x->dt));
    if (x->op == OP_CAST) tmpl = cast_expr(x->a->dt, x->dt, xprintf("t%d", arg[0]));
    /* pow by a constant 2 or 3 as products, as PyTorch's CPU pow does (pow_tensor_scalar: x*x,
     * x*x*x): x*x is powf's correctly rounded square bit for bit; x*x*x rounds twice (within
     * 2 ulp of powf), like PyTorch; both vectorize where libm's powf is a call per element
     * (the decomposed gelu of imported GPT-2: 6% of its run in powf) */
    if (x->op == OP_POW && !dtype_is_integer(x->dt) && x->b->kind == EX_CONST && (x->b->value == 2.0 || x->b->value == 3.0))
        tmpl = x->b->value == 2.0 ? "%0 * %0" : "%0 * %0 * %0";
    for (const char *p = tmpl; *p; p++) {
        if (p[0] == '%' && (p[1] == 'a' || p[1] == 'b')) {
            if (!x->node) ICE("c_expr of '%s' reads an attribute, but the expression has no node", op_name(x->op));
            fputs(float_lit(x->node->fattr[p[1] - 'a']), o);
            p++;
        } else if (p[0] == '%' && p[1] == 'F') {
            fputs(op_may_fault(x) ? "mrt_fault" : "(int *)0", o);
            p++;
        } else if (p[0] == '%' && (p[1] == 'T' || p[1] == 'U' || p[1] == 'N')) {
            fputs(p[1] == 'T' ? T : p[1] == 'N' ? dtype_name(x->dt) : x->dt == DT_I64 ? "uint64_t" : "uint32_t", o);
            p++;
        } else if (p[0] == '%' && p[1] >= '0' && p[1] <= '2') {
            int i = p[1] - '0';
            if (arg[i] < 0) ICE("c_expr of '%s' reads operand %d, which it does not have", op_name(x->op), i);
            fprintf(o, "t%d", arg[i]);
            p++;
        } else {
            fputc(*p, o);
        }
    }
    if (half) fputc(')', o);
    if (comments) fprintf(o, ";  /* %%%d %s */\n", x->node ? x->node->id : -1, op_name(x->op));
    else fprintf(o, ";\n");
    return t;
}

bool expr_may_fault(const Expr *x) {
    if (!x || x->kind != EX_OP) return false;
    return op_may_fault(x) || expr_may_fault(x->a) || expr_may_fault(x->b) || expr_may_fault(x->c);
}

static int count_faults(const Expr *x) {
    if (!x || x->kind != EX_OP) return 0;
    return op_may_fault(x) + count_faults(x->a) + count_faults(x->b) + count_faults(x->c);
}

bool kernel_may_fault(const Kernel *k) { return expr_may_fault(k->expr); }

static const Node *first_fault(const Expr *x) {
    if (!x || x->kind != EX_OP) return NULL;
    const Node *n = first_fault(x->a);
    if (!n) n = first_fault(x->b);
    if (!n) n = first_fault(x->c);
    if (!n && op_may_fault(x)) n = x->node;
    return n;
}

char *fault_what(const Graph *g, const Kernel *k, const char *kind) {
    const Node *f = first_fault(k->expr), *r = k->root;
    if (!f) ICE("kernel %s%d cannot fault", kind, k->id);
    int nf = count_faults(k->expr);
    return xprintf("%s: '%s' at line %d:%d%s (node %%%d, in kernel %s%d computing %%%d%s%s%s)", g->name,
                   f->op == OP_FLOORDIV ? "//" : "%", f->loc.line, f->loc.col,
                   nf > 1 ? xprintf(" or another of the kernel's %d integer divisions", nf) : "", f->id, kind, k->id,
                   r->id, r->name ? " '" : "", r->name ? r->name : "", r->name ? "'" : "");
}

char *kernel_what(const Graph *g, const Kernel *k, const char *kind) {
    const Node *r = k->root;
    return xprintf("%s %s%d (node %%%d%s%s%s, line %d)", g->name, kind, k->id, r->id, r->name ? " '" : "",
                   r->name ? r->name : "", r->name ? "'" : "", r->loc.line);
}

void emit_expr_function(FILE *o, const Kernel *k, const char *fname, bool comments) {
    fprintf(o, "MRT_HD_INLINE %s %s_expr(", c_type(k->root->dtype), fname);
    for (int i = 0; i < k->nleaves; i++) fprintf(o, "%s%s a%d", i ? ", " : "", c_type(k->leaves[i].node->dtype), i);
    if (kernel_may_fault(k)) fprintf(o, "%sint *mrt_fault", k->nleaves ? ", " : "");
    else if (!k->nleaves) fprintf(o, "void");
    fprintf(o, ") {\n");
    int tmp = 0;
    int res = emit_expr(o, k, k->expr, &tmp, comments);
    if (dtype_is_half(k->root->dtype)) fprintf(o, "    return %s_from_f32(t%d);\n}\n\n", half_pfx(k->root->dtype), res);
    else fprintf(o, "    return t%d;\n}\n\n", res);
}

void kernel_loops(const Kernel *k, LoopNest *ln) {
    const Node *r = k->root;
    int rank = r->shape.rank;
    int nops = 1 + k->nleaves;
    if (nops > MAX_OPERANDS) ICE("kernel k%d reads %d tensors; at most %d are supported", k->id, k->nleaves, MAX_OPERANDS - 1);
    ln->nops = nops;
    for (int d = 0; d < rank; d++) ln->n[d] = r->shape.d[d];
    contiguous_strides(&r->shape, ln->stride[0]);
    ln->base[0] = NULL;
    for (int i = 0; i < k->nleaves; i++) {
        const LeafRef *l = &k->leaves[i];
        Dim ls[MAX_RANK];
        contiguous_strides(&l->node->shape, ls);
        for (int d = 0; d < rank; d++) ln->stride[1 + i][d] = dim_const(0);
        ln->base[1 + i] = NULL;
        for (int d = 0; d < l->node->shape.rank; d++) {
            if (l->map[d] >= 0) ln->stride[1 + i][l->map[d]] = dim_mul(ls[d], dim_const(l->step[d]), NULL);
            if (l->start[d]) {
                char *term = xprintf("%" PRId64 " * %s", l->start[d], dim_c(ls[d]));
                ln->base[1 + i] = ln->base[1 + i] ? xprintf("%s + %s", ln->base[1 + i], term) : term;
            }
        }
    }
    /* Merge dimension d into d+1 when every operand is contiguous across them. */
    for (int d = rank - 2; d >= 0; d--) {
        bool ok = true;
        for (int j = 0; j < nops && ok; j++) {
            bool mok;
            Dim want = dim_mul(ln->stride[j][d + 1], ln->n[d + 1], &mok);
            ok = mok && dim_eq(want, ln->stride[j][d]);
        }
        bool mok;
        Dim merged = dim_mul(ln->n[d], ln->n[d + 1], &mok);
        if (!ok || !mok) continue;
        ln->n[d] = merged;
        for (int j = 0; j < nops; j++) {
            ln->stride[j][d] = ln->stride[j][d + 1];
            for (int q = d + 1; q + 1 < rank; q++) ln->stride[j][q] = ln->stride[j][q + 1];
        }
        for (int q = d + 1; q + 1 < rank; q++) ln->n[q] = ln->n[q + 1];
        rank--;
    }
    ln->rank = rank;
}

char *loop_index(const LoopNest *ln, int op) {
    char *s = ln->base[op] ? xstrdup(ln->base[op]) : NULL;
    for (int d = 0; d < ln->rank; d++) {
        Dim st = ln->stride[op][d];
        if (st.c == 0) continue;
        char *term = dim_is_one(st) ? xprintf("i%d", d) : xprintf("i%d * %s", d, dim_c(st));
        s = s ? xprintf("%s + %s", s, term) : term;
    }
    return s ? s : xstrdup("0");
}

/* The OpenMP directive over an elementwise loop nest (MRT_PRAGMA: nothing without OpenMP). The
 * nest is split over the threads when it has at least MRT_PAR_MIN elements at run time. The
 * outer loops are collapsed and the innermost one is left whole (so it vectorizes) when the outer
 * ones have at least 8 iterations for any batch; otherwise every loop is collapsed. Each element
 * is computed once by one thread, so the result does not depend on the thread count. A kernel
 * without a fault flag is also vectorized ("simd": the innermost loop, or the collapsed nest when
 * it takes every loop; the elements are independent, and -O2 alone does not vectorize). Returns
 * how many loops the directive collapses. */
static int emit_omp_for(FILE *o, const LoopNest *ln, bool fault) {
    if (ln->rank < 1) return 0;
    int64_t outer = 1;
    for (int d = 0; d + 1 < ln->rank; d++) outer = outer > (1 << 20) ? outer : outer * (ln->n[d].c > 0 ? ln->n[d].c : 1);
    int depth = ln->rank == 1 ? 1 : outer >= 8 ? ln->rank - 1 : ln->rank;
    fprintf(o, "    MRT_PRAGMA(omp parallel for%s", !fault && depth == ln->rank ? " simd" : "");
    if (depth > 1) fprintf(o, " collapse(%d)", depth);
    fprintf(o, " schedule(static)%s if(parallel: ", fault ? " reduction(|:mrt_fault)" : "");
    for (int d = 0; d < ln->rank; d++) fprintf(o, "%s(int64_t)(%s)", d ? " * " : "", dim_c(ln->n[d]));
    fprintf(o, " >= MRT_PAR_MIN))\n");
    return depth;
}

/* Whether the expression calls one of mrt_kernels.h's branch-free transcendental functions
 * (mrt_erff, mrt_tanhf and the gelus built on them): the kernels whose loops are compute-bound,
 * worth AVX-512 and AVX2 + FMA copies. */
static bool expr_wants_v4(const Expr *x) {
    if (!x || x->kind != EX_OP) return false;
    const char *c = op_info[x->op].c_expr;
    if (c && (strstr(c, "mrt_erff") || strstr(c, "mrt_tanhf") || strstr(c, "mrt_gelu"))) return true;
    return expr_wants_v4(x->a) || expr_wants_v4(x->b) || expr_wants_v4(x->c);
}

/* One definition of the loop nest: static RET FNAME SUFFIX(...) { ... }, after ATTR. With v4_twin,
 * the body first hands the call to FNAME_v4 where the CPU takes AVX-512 paths, else to FNAME_v3
 * where it has AVX2 and FMA. */
static void emit_c_loop_as(FILE *o, const Kernel *k, const char *fname, const char *attr, const char *suffix,
                           bool v4_twin) {
    const char *T = c_type(k->root->dtype);
    LoopNest ln;
    kernel_loops(k, &ln);
    bool fault = kernel_may_fault(k);
    fprintf(o, "%sstatic %s %s%s(%s *out", attr, fault ? "mrt_status" : "void", fname, suffix, T);
    for (int i = 0; i < k->nleaves; i++) fprintf(o, ", const %s *l%d", c_type(k->leaves[i].node->dtype), i);
    fprintf(o, ", MRT_UNUSED int64_t B%s%s) {%s\n", sym_params, fault ? ", const char *what" : "", sym_voids);
    if (v4_twin) {
        fprintf(o, "#if MRT_SIMD_V4\n");
        for (int t = 0; t < 2; t++) {
            fprintf(o, "    if (%s) %s%s_v%d(out", t ? "mrt_cpu_simd_avx2()" : "mrt_cpu_simd_avx512()", fault ? "return " : "{ ",
                    fname, t ? 3 : 4);
            for (int i = 0; i < k->nleaves; i++) fprintf(o, ", l%d", i);
            fprintf(o, ", B%s%s)%s\n", sym_args, fault ? ", what" : "", fault ? ";" : "; return; }");
        }
        fprintf(o, "#endif\n");
    }
    if (fault) fprintf(o, "    int mrt_fault = 0;\n");
    int collapsed = emit_omp_for(o, &ln, fault);
    for (int d = 0; d < ln.rank; d++) {
        if (!fault && d == ln.rank - 1 && d >= collapsed) fprintf(o, "%*sMRT_PRAGMA(omp simd)\n", 4 * (d + 1), "");
        fprintf(o, "%*sfor (int64_t i%d = 0; i%d < %s; i%d++) {\n", 4 * (d + 1), "", d, d, dim_c(ln.n[d]), d);
    }
    fprintf(o, "%*sout[%s] = %s_expr(", 4 * (ln.rank + 1), "", loop_index(&ln, 0), fname);
    for (int i = 0; i < k->nleaves; i++) fprintf(o, "%sl%d[%s]", i ? ", " : "", i, loop_index(&ln, 1 + i));
    if (fault) fprintf(o, "%s&mrt_fault", k->nleaves ? ", " : "");
    fprintf(o, ");\n");
    for (int d = ln.rank - 1; d >= 0; d--) fprintf(o, "%*s}\n", 4 * (d + 1), "");
    if (fault)
        fprintf(o, "    return mrt_fault ? mrt_set_error(MRT_ERR_INVALID_ARG, \"%%s: integer division by zero\", what) : MRT_OK;\n");
    fprintf(o, "}\n");
}

/* The loop nest, and before it its copies for x86-64-v4 (AVX-512), FNAME_v4, and x86-64-v3 (AVX2
 * and FMA), FNAME_v3, which FNAME calls where mrt_cpu_simd_avx512(), else mrt_cpu_simd_avx2(),
 * says so (MRT_SIMD_V4: GCC on x86-64, mrt_kernels.h). The copies are the same C, built with 16-
 * and 8-float vectors: elementwise, with no contraction (-ffp-contract=off), the same libm calls,
 * and mrt_erff's and mrt_tanhf's explicit fmaf steps correctly rounded in each (one instruction in
 * the copies, a libm call in the baseline loop, which then does not vectorize), they give the same
 * bits. Exact gelu's loop: 0.40 ns an element in the v4 copy, 0.79 in v3, 32 in the baseline
 * (bench/gelu.c). Kernels with no transcendental function stay single: a loop of adds and
 * multiplies is memory-bound. */
void emit_c_loop(FILE *o, const Kernel *k, const char *fname) {
    bool twin = expr_wants_v4(k->expr);
    if (twin) {
        fprintf(o, "#if MRT_SIMD_V4\n");
        emit_c_loop_as(o, k, fname, "MRT_TARGET_V4 ", "_v4", false);
        emit_c_loop_as(o, k, fname, "MRT_TARGET_V3 ", "_v3", false);
        fprintf(o, "#endif\n");
    }
    emit_c_loop_as(o, k, fname, "", "", twin);
}
