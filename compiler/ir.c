/*
 * ir.c — the graph IR: nodes, symbolic dimensions, use counts, and the --dump=graph text form.
 *
 * A Graph is a list of Nodes in topological order (each node's inputs come before it), built
 * by check.c from the AST. Every node keeps the Loc the user wrote, so later phases can point
 * at the source. The text form is documented in docs/ir.md and read by the FileCheck tests.
 */
#include "modelc.h"

#include <inttypes.h>
#include <string.h>

const OpInfo op_info[OP__COUNT] = {
#define OP(id, name, cat, inplace, batch, c_expr, kernel, emit) [OP_##id] = {name, cat, inplace, batch, c_expr, kernel},
#include "ops.def"
};

static const char *const cat_names[CAT__COUNT] = {
    [CAT_LEAF] = "leaf", [CAT_UNARY] = "elementwise", [CAT_BINARY] = "elementwise", [CAT_SELECT] = "elementwise",
    [CAT_MOVE] = "elementwise (data movement)", [CAT_GEMM] = "GEMM", [CAT_REDUCE] = "reduction",
    [CAT_LIBRARY] = "library", [CAT_VIEW] = "view", [CAT_REWRITE] = "rewritten before fusion",
};
_Static_assert(sizeof cat_names / sizeof cat_names[0] == CAT__COUNT, "one name per category");

const char *op_category_name(OpCategory c) { return c >= 0 && c < CAT__COUNT ? cat_names[c] : "?"; }

/* The number of operands an elementwise category's c_expr may read. */
static int expr_operands(OpCategory c) { return c == CAT_BINARY ? 2 : c == CAT_SELECT ? 3 : 1; }

void validate_op_table(void) {
    for (int i = 0; i < OP__COUNT; i++) {
        const OpInfo *o = &op_info[i];
        bool elem = op_is_elementwise((OpKind)i), kern = o->cat == CAT_GEMM || o->cat == CAT_REDUCE || o->cat == CAT_LIBRARY;
        if (!o->name) ICE("ops.def: op %d has no name", i);
        for (int j = 0; j < i; j++)
            if (!strcmp(op_info[j].name, o->name)) ICE("ops.def: two ops are named '%s'", o->name);
        if (elem != (o->c_expr != NULL))
            ICE("ops.def: op '%s' (%s) %s a c_expr", o->name, cat_names[o->cat], elem ? "needs" : "must not have");
        if (kern != (o->kernel != NULL))
            ICE("ops.def: op '%s' (%s) %s a kernel", o->name, cat_names[o->cat], kern ? "needs" : "must not have");
        if (o->inplace && !elem) ICE("ops.def: op '%s' is marked in place, but only elementwise ops may be", o->name);
        for (const char *p = o->c_expr; p && *p; p++)
            if (p[0] == '%' && p[1] >= '0' && p[1] <= '9' && p[1] - '0' >= expr_operands(o->cat))
                ICE("ops.def: the c_expr of '%s' reads %%%c, but a %s op has %d operand%s", o->name, p[1],
                    cat_names[o->cat], expr_operands(o->cat), expr_operands(o->cat) == 1 ? "" : "s");
    }
}

const char *op_name(OpKind op) {
    return (op >= 0 && op < OP__COUNT && op_info[op].name) ? op_info[op].name : "?";
}

bool op_is_unary(OpKind op) { return op_info[op].cat == CAT_UNARY; }
bool op_is_binary(OpKind op) { return op_info[op].cat == CAT_BINARY; }
bool op_is_elementwise(OpKind op) {
    OpCategory c = op_info[op].cat;
    return c == CAT_UNARY || c == CAT_BINARY || c == CAT_SELECT || c == CAT_MOVE;
}
bool op_is_reduction(OpKind op) { return op_info[op].cat == CAT_REDUCE; }
bool op_is_library(OpKind op) { return op_info[op].cat == CAT_REDUCE || op_info[op].cat == CAT_LIBRARY; }

Node *view_base(const Node *n) {
    while (n->op == OP_RESHAPE) n = n->in[0];
    return (Node *)n;
}

static Node *alloc_node(Graph *g, OpKind op, Loc loc, int slot) {
    if (g->nnodes == g->capnodes) {
        int cap = g->capnodes ? 2 * g->capnodes : 32;
        g->nodes = xrealloc_array(g->nodes, g->capnodes, cap, sizeof(Node *));
        g->capnodes = cap;
    }
    Node *n = xalloc(sizeof(Node));
    n->id = g->nnodes;
    n->op = op;
    n->loc = loc;
    n->dtype = DT_F32;
    n->index = -1;
    n->slot = slot;
    g->nodes[g->nnodes++] = n;
    return n;
}

Node *new_node(Graph *g, OpKind op, Loc loc) {
    if (g->cur_slot == SLOT_NONE)
        ICE("a pass created a '%s' node with new_node; passes use new_node_for, so the node keeps the device of "
            "the node it stands for", op_name(op));
    return alloc_node(g, op, loc, g->cur_slot);
}

Node *new_node_for(Graph *g, OpKind op, const Node *orig) {
    return alloc_node(g, op, orig->loc, orig->slot >= 0 ? orig->slot : 0);
}

Dim dim_const(int64_t c) { return (Dim){c, {0}}; }

Shape shape_broadcast(const Shape *a, const Shape *b) {
    Shape r = {a->rank > b->rank ? a->rank : b->rank, {{0}}};
    for (int i = 0; i < r.rank; i++) {
        int ia = a->rank - r.rank + i, ib = b->rank - r.rank + i;
        Dim da = ia >= 0 ? a->d[ia] : dim_const(1), db = ib >= 0 ? b->d[ib] : dim_const(1);
        r.d[i] = dim_is_one(da) ? db : da;
    }
    return r;
}

Dim dim_symbol(int k) {
    Dim d = {1, {0}};
    d.e[k] = 1;
    return d;
}

bool dim_is_sym(Dim d) {
    for (int k = 0; k < MAX_SYMS; k++)
        if (d.e[k]) return true;
    return false;
}

bool dim_is_one(Dim d) { return d.c == 1 && !dim_is_sym(d); }

int dim_symbol_of(Dim d) {
    int found = -1;
    for (int k = 0; k < MAX_SYMS; k++) {
        if (!d.e[k]) continue;
        if (d.e[k] != 1 || found >= 0) return -1;
        found = k;
    }
    return d.c == 1 ? found : -1;
}

Dim dim_mul(Dim a, Dim b, bool *ok) {
    Dim r = {0, {0}};
    bool good = !__builtin_mul_overflow(a.c, b.c, &r.c);
    for (int k = 0; k < MAX_SYMS; k++) {
        int e = a.e[k] + b.e[k];
        if (e > 200) good = false;
        r.e[k] = (uint8_t)(e > 200 ? 200 : e);
    }
    if (ok) *ok = good;
    return r;
}

Dim dim_div(Dim a, Dim b, bool *ok) {
    Dim r = {0, {0}};
    bool good = b.c != 0 && a.c % b.c == 0;
    r.c = good ? a.c / b.c : 0;
    for (int k = 0; k < MAX_SYMS; k++) {
        if (a.e[k] < b.e[k]) good = false;
        else r.e[k] = (uint8_t)(a.e[k] - b.e[k]);
    }
    *ok = good;
    return r;
}

bool dim_eq(Dim a, Dim b) { return a.c == b.c && !memcmp(a.e, b.e, sizeof a.e); }

Dim shape_numel(const Shape *s) {
    Dim n = dim_const(1);
    for (int i = 0; i < s->rank; i++) n = dim_mul(n, s->d[i], NULL);
    return n;
}

int shape_nsym(const Shape *s) {
    int k = 0;
    for (int i = 0; i < s->rank; i++) k += dim_is_sym(s->d[i]);
    return k;
}

bool dtype_is_integer(DType dt) { return dt == DT_I32 || dt == DT_I64; }
bool dtype_is_half(DType dt) { return dt == DT_F16 || dt == DT_BF16; }
bool dtype_is_float(DType dt) { return dt == DT_F32 || dtype_is_half(dt); }
size_t dtype_size(DType dt) { return dt == DT_I64 ? 8 : dt == DT_BOOL ? 1 : dtype_is_half(dt) ? 2 : 4; }

int64_t dim_at(Dim d, const int64_t *vals) {
    int64_t r = d.c;
    for (int k = 0; k < MAX_SYMS; k++)
        for (int j = 0; j < d.e[k]; j++) r *= vals ? vals[k] : 1;
    return r;
}

int64_t dim_max(const Graph *g, Dim d) { return dim_at(d, g->sym_max); }

char *dim_str(Dim d, char *const *names, char *buf, size_t n) {
    size_t k = 0;
    bool any = false;
    for (int s = 0; s < MAX_SYMS; s++)
        for (int j = 0; j < d.e[s] && k < n; j++) {
            if (names && names[s]) k += snprintf(buf + k, n - k, "%s%s", any ? "*" : "", names[s]);
            else k += snprintf(buf + k, n - k, "%ss%d", any ? "*" : "", s);
            any = true;
        }
    if (!any) snprintf(buf, n, "%" PRId64, d.c);
    else if (d.c != 1 && k < n) snprintf(buf + k, n - k, "*%" PRId64, d.c);
    return buf;
}

char *shape_str(const Shape *s, char *const *names, char *buf, size_t n) {
    size_t k = 0;
    k += snprintf(buf + k, n - k, "[");
    for (int i = 0; i < s->rank && k < n; i++) {
        char d[64];
        k += snprintf(buf + k, n - k, "%s%s", i ? "," : "", dim_str(s->d[i], names, d, sizeof d));
    }
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

void analyze_uses(Graph *g) {
    for (int i = 0; i < g->nnodes; i++) {
        g->nodes[i]->nuses = 0;
        g->nodes[i]->is_output = 0;
        g->nodes[i]->dead = true;
    }
    for (int i = 0; i < g->noutputs; i++) {
        g->outputs[i].node->is_output++;
        g->outputs[i].node->nuses++;
        g->outputs[i].node->dead = false;
    }
    /* Training: the optimizer step after the graph reads each gradient (kept whole, like an
     * output) and updates its param and the param's optimizer state. */
    for (int i = 0; g->train && g->grad && i < g->nparams; i++) {
        Node *d = g->grad[i];
        if (!d) continue;
        d->is_output++;
        d->nuses++;
        d->dead = false;
        g->params[i]->dead = false;
        for (int k = 0; k < 2; k++)
            if (g->opt_state[i][k]) g->opt_state[i][k]->dead = false;
    }
    if (g->train && g->grad_sumsq) {
        g->grad_sumsq->is_output++;
        g->grad_sumsq->nuses++;
        g->grad_sumsq->dead = false;
    }
    /* ... and writes each updated buffer (batch_norm's running statistics) from its new value. */
    for (int i = 0; g->train && i < g->nupd; i++) {
        Node *v = g->upd_value[i];
        v->is_output++;
        v->nuses++;
        v->dead = false;
        g->upd_param[i]->dead = false;
    }
    /* Reverse topological order: a node is live if a live node reads it. */
    for (int i = g->nnodes - 1; i >= 0; i--) {
        Node *n = g->nodes[i];
        if (n->dead) continue;
        for (int j = 0; j < n->nin; j++) {
            n->in[j]->nuses++;
            n->in[j]->dead = false;
        }
    }
}

static void dump_attrs(FILE *out, const Node *n) {
    switch (n->op) {
    case OP_MATMUL:
        if (n->trans_b) fprintf(out, " {trans_b}");
        break;
    case OP_SOFTMAX: case OP_LOG_SOFTMAX:
        fprintf(out, " {axis=%d%s%s}", n->axis, n->causal ? ", causal" : "", n->zero_masked_rows ? ", zero_masked_rows" : "");
        break;
    case OP_SLICE:
        fprintf(out, " {axis=%d, start=%lld, step=%lld}", n->axis, (long long)n->start, (long long)n->step);
        break;
    case OP_CONCAT:
        fprintf(out, " {axis=%d}", n->axis);
        break;
    case OP_CONV2D:
        fprintf(out, " {stride=[%d,%d], pad=[%d,%d,%d,%d], dilation=[%d,%d], groups=%d}", n->stride[0], n->stride[1],
                n->pad[0], n->pad[1], n->pad[2], n->pad[3], n->dilation[0], n->dilation[1], n->groups);
        break;
    case OP_CONV_TRANSPOSE2D:
        fprintf(out, " {stride=[%d,%d], pad=[%d,%d], output_padding=[%d,%d], dilation=[%d,%d], groups=%d}", n->stride[0],
                n->stride[1], n->pad[0], n->pad[1], n->out_pad[0], n->out_pad[1], n->dilation[0], n->dilation[1],
                n->groups);
        break;
    case OP_CONV2D_WGRAD:
        fprintf(out, " {kernel=[%d,%d], stride=[%d,%d], pad=[%d,%d,%d,%d], dilation=[%d,%d], groups=%d}", n->kernel[0],
                n->kernel[1], n->stride[0], n->stride[1], n->pad[0], n->pad[1], n->pad[2], n->pad[3], n->dilation[0],
                n->dilation[1], n->groups);
        break;
    case OP_MAXPOOL2D: case OP_AVGPOOL2D: case OP_MAXPOOL2D_GRAD: case OP_AVGPOOL2D_GRAD:
        fprintf(out, " {kernel=[%d,%d], stride=[%d,%d], pad=[%d,%d,%d,%d]", n->kernel[0], n->kernel[1], n->stride[0],
                n->stride[1], n->pad[0], n->pad[1], n->pad[2], n->pad[3]);
        if (n->op == OP_MAXPOOL2D || n->op == OP_MAXPOOL2D_GRAD) fprintf(out, ", dilation=[%d,%d]", n->dilation[0], n->dilation[1]);
        if (n->ceil_mode) fprintf(out, ", ceil_mode");
        if ((n->op == OP_AVGPOOL2D || n->op == OP_AVGPOOL2D_GRAD) && !n->count_include_pad) fprintf(out, ", exclude_pad");
        fprintf(out, "}");
        break;
    case OP_INTERPOLATE: case OP_INTERPOLATE_GRAD:
        fprintf(out, " {%s%s", n->bilinear ? "bilinear" : "nearest", n->align_corners ? ", align_corners" : "");
        if (n->scale[0] > 0) fprintf(out, ", scale=[%g,%g]", n->scale[0], n->scale[1]);
        fprintf(out, "}");
        break;
    case OP_LAYER_NORM: case OP_BATCH_NORM:
        fprintf(out, " {eps=%g", n->eps);
        /* layer_norm over more than the last axis (normalized_shape, group_norm) */
        if (n->op == OP_LAYER_NORM && n->axis != n->shape.rank - 1) fprintf(out, ", from axis %d", n->axis);
        fprintf(out, "}");
        break;
    case OP_CLAMP:
        fprintf(out, " {min=%g, max=%g}", n->fattr[0], n->fattr[1]);
        break;
    case OP_LEAKY_RELU: case OP_ELU:
        fprintf(out, " {%s=%g}", n->op == OP_ELU ? "alpha" : "negative_slope", n->fattr[0]);
        break;
    case OP_SOFTPLUS:
        fprintf(out, " {beta=%g, threshold=%g}", n->fattr[0], n->fattr[1]);
        break;

    case OP_CUMSUM:
        fprintf(out, n->reverse ? " {axis=%d, reverse}" : " {axis=%d}", n->axis);
        break;
    case OP_IOTA:
        fprintf(out, " {start=%.17g, step=%.17g}", n->fattr[0], n->fattr[1]);
        break;
    case OP_DROPOUT:
        fprintf(out, " {p=%g, site=%" PRId64 "}", n->fattr[0], n->start);
        break;
    case OP_GATHER: case OP_SCATTER_ADD:
        fprintf(out, " {axis=%d, %s}", n->axis,
                n->gather_mode == GATHER_ONE_HOT ? "one_hot" : n->gather_mode == GATHER_INDEX_SELECT ? "index_select" : "gather");
        break;
    case OP_SUM: case OP_MEAN: case OP_MAX: case OP_ARGMAX:
        fprintf(out, " {axis=%d%s}", n->axis, n->keepdim ? ", keepdim" : "");
        break;
    case OP_PERMUTE:
        fprintf(out, " {perm=[");
        for (int i = 0; i < n->shape.rank; i++) fprintf(out, "%s%d", i ? "," : "", n->perm[i]);
        fprintf(out, "]}");
        break;
    default:
        break;
    }
}

void dump_graph(FILE *out, const Graph *g) {
    char buf[256];
    fprintf(out, "graph %s", g->name);
    for (int k = 0; k < g->nsyms; k++)
        fprintf(out, "%s%s <= %" PRId64 "%s", k ? ", " : " (", g->sym_names[k], g->sym_max[k], k == g->nsyms - 1 ? ")" : "");
    fprintf(out, "\n");
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        if (n->dead && n->op != OP_INPUT && n->op != OP_PARAM) continue;
        fprintf(out, "  %%%d = %s", n->id, op_name(n->op));
        if (n->op == OP_INPUT || n->op == OP_PARAM) fprintf(out, " %s", n->name);
        if (n->op == OP_CONST && !dtype_is_float(n->dtype)) fprintf(out, " %" PRId64, (int64_t)n->value);
        else if (n->op == OP_CONST) fprintf(out, " %.9g", n->value);
        for (int j = 0; j < n->nin; j++) fprintf(out, "%s%%%d", j ? ", " : " ", n->in[j]->id);
        dump_attrs(out, n);
        fprintf(out, " : %s%s", dtype_name(n->dtype), shape_str(&n->shape, g->sym_names, buf, sizeof buf));
        if (n->init) fprintf(out, " init");
        if (g->nslots > 1 && n->slot > 0) fprintf(out, " @%s", g->slots[n->slot].name);
        if (n->name && n->op != OP_INPUT && n->op != OP_PARAM) fprintf(out, "  ; %s", n->name);
        fprintf(out, "\n");
    }
    for (int i = 0; i < g->noutputs; i++)
        fprintf(out, "  output %s = %%%d\n", g->outputs[i].name, g->outputs[i].node->id);
}

bool graph_batch_separable(const Graph *g) {
    if (!g->has_batch) return false;
    bool *dep = xalloc(sizeof(bool) * (g->nnodes + 1));
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        if (n->dead) continue;
        int nb = 0; /* dimensions that hold the batch (symbol 0) */
        for (int d = 0; d < n->shape.rank; d++) nb += n->shape.d[d].e[0] > 0;
        if (n->op == OP_INPUT) dep[i] = nb > 0;
        for (int j = 0; j < n->nin; j++) dep[i] = dep[i] || dep[n->in[j]->id];
        if (!dep[i]) continue;
        /* A batch-dependent value must keep the batch as its leading axis, once (a [batch*seq, 64]
         * splits at whole batch items too) ... */
        if (n->shape.rank == 0 || n->shape.d[0].e[0] != 1 || nb != 1) return false;
        /* ... and be computed from the same batch items of its operands (the op's batch rule). */
        bool same_rank = false;
        switch (op_info[n->op].batch) {
        case BATCH_KEEPS:
            break;
        case BATCH_PERMUTE:
            if (n->perm[0] != 0) return false;
            break;
        case BATCH_NOT_AXIS0:
            if (n->axis == 0) return false;
            break;
        case BATCH_CONCAT:
            if (n->axis == 0) return false; /* batch items of several operands interleave */
            same_rank = true;
            break;
        case BATCH_SAME_RANK:
            same_rank = true; /* each batch-dependent operand's leading (batch) dim is the output's */
            break;
        default:
            ICE("op '%s' has no batch rule", op_name(n->op));
        }
        for (int j = 0; same_rank && j < n->nin; j++)
            if (dep[n->in[j]->id] && n->in[j]->shape.rank != n->shape.rank) return false;
    }
    return true;
}

void graph_dp_trainable(Graph *g) {
    g->dp_why = NULL;
    g->dp_loss_sum = 0;
    if (!g->train || !g->loss || !g->has_batch) return;
    int nn = g->nnodes;
    /* the loss's ancestors; per node: 1 batch-dependent (batch leading), 2 reduced over the
     * batch by a mean, 3 by a sum, 0 neither */
    bool *need = xalloc(sizeof(bool) * (nn + 1));
    unsigned char *k = xalloc((size_t)nn + 1);
    need[g->loss->id] = true;
    for (int i = nn - 1; i >= 0; i--) {
        const Node *n = g->nodes[i];
        if (!need[i]) continue;
        for (int j = 0; j < n->nin; j++) need[n->in[j]->id] = true;
    }
    for (int i = 0; i < nn && !g->dp_why; i++) {
        const Node *n = g->nodes[i];
        if (!need[i] || n->dead) continue;
        const char *bad = NULL;
        int nb = 0, dep = 0, red = 0, redk = 0;
        for (int d = 0; d < n->shape.rank; d++) nb += n->shape.d[d].e[0] > 0;
        for (int j = 0; j < n->nin; j++) {
            int kj = k[n->in[j]->id];
            dep += kj == 1;
            if (kj >= 2) {
                if (redk && redk != kj) bad = "it combines a mean over the batch with a sum over it";
                red++;
                redk = kj;
            }
        }
        if (n->op == OP_INPUT) {
            k[i] = nb > 0;
            continue;
        }
        if (!bad && red) {
            /* after the batch reduction: linear scalar arithmetic only */
            if (dep) bad = "a value reduced over the batch is combined with batch items again";
            else if (n->op == OP_SUM || n->op == OP_MEAN || n->op == OP_RESHAPE || n->op == OP_NEG) k[i] = (unsigned char)redk;
            else if (n->op == OP_ADD || n->op == OP_SUB) {
                /* mean_s + c averages to mean + c; sum_s + c would add c once per shard */
                if (red == 2 || redk == 2) k[i] = (unsigned char)redk;
                else bad = "it adds a batch-independent value to a sum over the batch (it would count once per shard)";
            } else if (n->op == OP_MUL && red == 1) k[i] = (unsigned char)redk;
            else if (n->op == OP_DIV && red == 1 && k[n->in[0]->id] >= 2) k[i] = (unsigned char)redk;
            else if (n->op == OP_DIV && red == 2 && redk == 3) k[i] = 2; /* sum / count: a mean */
            else bad = "a non-linear function of a reduction over the batch";
        } else if (!bad && dep) {
            if ((n->op == OP_SUM || n->op == OP_MEAN) && n->axis == 0 && nb == 0) {
                k[i] = n->op == OP_MEAN ? 2 : 3; /* the loss's reduction over the batch */
                continue;
            }
            k[i] = 1;
            if (n->shape.rank == 0 || n->shape.d[0].e[0] != 1 || nb != 1) bad = "its result does not keep the batch as its leading axis";
            else switch (op_info[n->op].batch) {
            case BATCH_KEEPS: break;
            case BATCH_PERMUTE: if (n->perm[0] != 0) bad = "it moves the batch axis"; break;
            case BATCH_NOT_AXIS0: if (n->axis == 0) bad = "it works along the batch axis"; break;
            case BATCH_CONCAT: if (n->axis == 0) bad = "it concatenates along the batch axis"; break;
            case BATCH_SAME_RANK: break;
            }
            bool same_rank = op_info[n->op].batch == BATCH_SAME_RANK || op_info[n->op].batch == BATCH_CONCAT;
            for (int j = 0; !bad && same_rank && j < n->nin; j++)
                if (k[n->in[j]->id] == 1 && n->in[j]->shape.rank != n->shape.rank) bad = "it pairs batch items of operands of other ranks";
        }
        if (bad) g->dp_why = xprintf("'%s' at %s:%d:%d mixes batch items (%s)", op_name(n->op), g->source ? g->source : g->name,
                                     n->loc.line, n->loc.col, bad);
    }
    if (!g->dp_why) g->dp_loss_sum = k[g->loss->id] == 3;
}
