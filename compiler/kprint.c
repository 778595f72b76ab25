/*
 * kprint.c — printing kernels as C, shared by both emitters: C types and sizes, identifiers,
 * the fused scalar expression (NAME_expr, MRT_HD so the CPU loop and the CUDA kernel compile
 * the very same text), the loop nest of a fused elementwise kernel and its index expressions.
 * emit_c.c and emit_cuda.c call into this file; it calls neither, and touches no file.
 */
#include "modelc.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

const char *c_type(DType dt) { return dt == DT_F32 ? "float" : dt == DT_I32 ? "int32_t" : "int64_t"; }

char *dim_c(Dim d) {
    if (!d.sym) return xprintf("%" PRId64, d.c);
    if (d.c == 1) return xstrdup("B");
    return xprintf("(%" PRId64 " * B)", d.c);
}

void contiguous_strides(const Shape *s, Dim *st) {
    Dim acc = {1, false};
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
                                     "volatile", "while", "m", "batch", "B", "st", "host", "direct", NULL};
    char *s = xstrdup(name);
    for (char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '_') *p = '_';
    for (int i = 0; reserved[i]; i++)
        if (!strcmp(s, reserved[i])) return xprintf("%s_", s);
    if (!strncmp(s, "mrt_", 4) || isdigit((unsigned char)s[0])) return xprintf("%s_", s); /* our locals are mrt_* */
    return s;
}



char *float_lit(double v) {
    float f = (float)v;
    if (isinf(f)) return xstrdup(f > 0 ? "INFINITY" : "(-INFINITY)");
    if (isnan(f)) return xstrdup("NAN");
    return xprintf("%af", (double)f);
}


/* One temporary per expression node, in operand order; an op's C text is its c_expr row in
 * ops.def with %0 %1 %2 replaced by the operands' temporaries. */
static int emit_expr(FILE *o, const Kernel *k, const Expr *x, int *tmp, bool comments) {
    const char *T = c_type(k->root->dtype);
    if (x->kind == EX_CONST) {
        fprintf(o, "    const %s t%d = %s;\n", T, *tmp, float_lit(x->value));
        return (*tmp)++;
    }
    if (x->kind == EX_LEAF) {
        fprintf(o, "    const %s t%d = a%d;\n", T, *tmp, x->leaf);
        return (*tmp)++;
    }
    const char *tmpl = op_info[x->op].c_expr;
    if (!tmpl) ICE("op '%s' in an elementwise expression has no c_expr in ops.def", op_name(x->op));
    int arg[3] = {-1, -1, -1};
    const Expr *opnd[3] = {x->a, x->b, x->c};
    for (int i = 0; i < 3; i++)
        if (opnd[i]) arg[i] = emit_expr(o, k, opnd[i], tmp, comments);
    int t = (*tmp)++;
    fprintf(o, "    const %s t%d = ", T, t);
    for (const char *p = tmpl; *p; p++) {
        if (p[0] == '%' && (p[1] == 'a' || p[1] == 'b')) {
            if (!x->node) ICE("c_expr of '%s' reads an attribute, but the expression has no node", op_name(x->op));
            fputs(float_lit(x->node->fattr[p[1] - 'a']), o);
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
    if (comments) fprintf(o, ";  /* %%%d %s */\n", x->node ? x->node->id : -1, op_name(x->op));
    else fprintf(o, ";\n");
    return t;
}

void emit_expr_function(FILE *o, const Kernel *k, const char *fname, bool comments) {
    fprintf(o, "MRT_HD %s %s_expr(", c_type(k->root->dtype), fname);
    for (int i = 0; i < k->nleaves; i++) fprintf(o, "%s%s a%d", i ? ", " : "", c_type(k->leaves[i].node->dtype), i);
    if (!k->nleaves) fprintf(o, "void");
    fprintf(o, ") {\n");
    int tmp = 0;
    int res = emit_expr(o, k, k->expr, &tmp, comments);
    fprintf(o, "    return t%d;\n}\n\n", res);
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
        for (int d = 0; d < rank; d++) ln->stride[1 + i][d] = (Dim){0, false};
        ln->base[1 + i] = NULL;
        for (int d = 0; d < l->node->shape.rank; d++) {
            if (l->map[d] >= 0) ln->stride[1 + i][l->map[d]] = dim_mul(ls[d], (Dim){l->step[d], false}, NULL);
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
        char *term = (st.c == 1 && !st.sym) ? xprintf("i%d", d) : xprintf("i%d * %s", d, dim_c(st));
        s = s ? xprintf("%s + %s", s, term) : term;
    }
    return s ? s : xstrdup("0");
}

void emit_c_loop(FILE *o, const Kernel *k, const char *fname) {
    const char *T = c_type(k->root->dtype);
    LoopNest ln;
    kernel_loops(k, &ln);
    fprintf(o, "static void %s(%s *out", fname, T);
    for (int i = 0; i < k->nleaves; i++) fprintf(o, ", const %s *l%d", c_type(k->leaves[i].node->dtype), i);
    fprintf(o, ", MRT_UNUSED int64_t B) {\n");
    for (int d = 0; d < ln.rank; d++)
        fprintf(o, "%*sfor (int64_t i%d = 0; i%d < %s; i%d++) {\n", 4 * (d + 1), "", d, d, dim_c(ln.n[d]), d);
    fprintf(o, "%*sout[%s] = %s_expr(", 4 * (ln.rank + 1), "", loop_index(&ln, 0), fname);
    for (int i = 0; i < k->nleaves; i++) fprintf(o, "%sl%d[%s]", i ? ", " : "", i, loop_index(&ln, 1 + i));
    fprintf(o, ");\n");
    for (int d = ln.rank - 1; d >= 0; d--) fprintf(o, "%*s}\n", 4 * (d + 1), "");
    fprintf(o, "}\n");
}
