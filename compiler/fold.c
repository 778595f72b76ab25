/*
 * fold.c — graph rewrites between checking and fusion: batch-norm folding and weight hoisting.
 *
 * Batch-norm folding. In inference, batch_norm(y) = (y - mean) * s + beta with
 * s = gamma / sqrt(var + eps), a per-channel affine map. When y is a convolution or a linear
 * layer whose result nothing else reads, the map folds into that layer's weights:
 *
 *     conv(x, W) + b  ->  conv(x, W * s[o]) + ((b - mean) * s + beta)
 *
 * (the standard rewrite, e.g. Jacob et al., "Quantization and Training of Neural Networks for
 * Efficient Integer-Arithmetic-Only Inference", CVPR 2018, section 3.2; PyTorch's
 * torch.fx fuse_conv_bn_eval). The new weight and bias are expressions over params only, so
 * hoisting (below) computes them once, when the weights are loaded: a folded network runs
 * exactly the convolutions and GEMMs of the unfolded one, with no batch-norm pass. A batch_norm
 * that cannot fold is lowered to the same elementwise expression, which fusion then puts into
 * its producer's epilogue.
 *
 * Hoisting. A node whose operands are all params, constants or hoisted nodes (and that reads at
 * least one param) depends on nothing the caller passes to run(), so it is marked init and
 * computed once at load time; its value lives in the weight region. Views of params stay views.
 * A node with a symbolic size (a slice of a table up to seq) is not hoisted: its shape is the
 * run's.
 */
#include "modelc.h"

#include <math.h>
#include <string.h>

void replace_uses(Graph *g, Node *from, Node *to) {
    for (int i = 0; i < g->nnodes; i++) {
        Node *n = g->nodes[i];
        if (n == to) continue;
        for (int j = 0; j < n->nin; j++)
            if (n->in[j] == from) n->in[j] = to;
    }
    for (int i = 0; i < g->noutputs; i++)
        if (g->outputs[i].node == from) g->outputs[i].node = to;
}

static void visit(Node *n, bool *seen, Node **order, int *k) {
    if (seen[n->id]) return;
    seen[n->id] = true;
    for (int j = 0; j < n->nin; j++) visit(n->in[j], seen, order, k);
    order[(*k)++] = n;
}

/* Stable: nodes keep their relative order, and a node moves only to follow an operand created
 * after it, so an unchanged graph keeps its ids (the dumps agree with each other). Dead nodes
 * stay in the list, marked dead. */
void toposort_graph(Graph *g) {
    bool *seen = xalloc(sizeof(bool) * (g->nnodes + 1));
    Node **order = xalloc(sizeof(Node *) * (g->nnodes + 1));
    int k = 0;
    for (int i = 0; i < g->nnodes; i++) visit(g->nodes[i], seen, order, &k);
    for (int i = 0; i < k; i++) order[i]->id = i;
    g->nodes = order;
    g->nnodes = k;
    g->capnodes = g->nnodes + 1;
    analyze_uses(g);
}

/* ---------------------------------------------------------------- builders (shapes known valid) */


/* Each builder takes `at`, the node the new one stands for: its slot and location. */
static Node *bin(Graph *g, OpKind op, const Node *at, Node *a, Node *b) {
    Node *n = new_node_for(g, op, at);
    n->in[0] = a;
    n->in[1] = b;
    n->nin = 2;
    n->shape = shape_broadcast(&a->shape, &b->shape);
    return n;
}

static Node *un(Graph *g, OpKind op, const Node *at, Node *a) {
    Node *n = new_node_for(g, op, at);
    n->in[0] = a;
    n->nin = 1;
    n->shape = a->shape;
    return n;
}

static Node *cst(Graph *g, const Node *at, double v) {
    Node *n = new_node_for(g, OP_CONST, at);
    n->value = (double)(float)v;
    return n;
}

/* x viewed as [len, 1, ..., 1] (rank `rank`), to broadcast along axis 0 of that rank. */
static Node *as_column(Graph *g, const Node *at, Node *x, int rank) {
    Node *n = new_node_for(g, OP_RESHAPE, at);
    n->in[0] = x;
    n->nin = 1;
    n->dtype = x->dtype;
    n->shape.rank = rank;
    n->shape.d[0] = x->shape.d[0];
    for (int i = 1; i < rank; i++) n->shape.d[i] = dim_const(1);
    return n;
}

/* fold_graph's state: is_static's answers so far (a node's operands may share operands, and
 * the walk without them is exponential in the depth of such a DAG), and each node's readers
 * in the graph as checked (so that replacing a batch norm's uses costs its readers, not a scan
 * of every node). */
typedef struct Fold {
    Graph *g;
    int n0;               /* the nodes [0, n0) existed before folding */
    signed char *is_st;   /* [n0]: 0 unknown, 1 static, -1 not */
    int *ustart, *users;  /* readers of node i: users[ustart[i] .. ustart[i+1]) (with repeats) */
} Fold;

static Fold *FD; /* set by fold_graph while it runs */

/* Depends only on params (and constants)? */
static bool is_static(const Node *n) {
    if (n->op == OP_PARAM || n->op == OP_CONST) return true;
    if (n->op == OP_INPUT) return false;
    bool memo = FD && n->id < FD->n0 && FD->g->nodes[n->id] == n;
    if (memo && FD->is_st[n->id]) return FD->is_st[n->id] > 0;
    bool st = true;
    for (int j = 0; j < n->nin && st; j++) st = is_static(n->in[j]);
    if (memo) FD->is_st[n->id] = st ? 1 : -1;
    return st;
}

/* replace_uses for a node of the checked graph, through its reader list. New nodes never read
 * a batch norm not yet rewritten (they read its operands), so the lists stay complete. */
static void replace_uses_fast(Graph *g, Node *from, Node *to) {
    if (!FD || from->id >= FD->n0 || g->nodes[from->id] != from) {
        replace_uses(g, from, to);
        return;
    }
    for (int u = FD->ustart[from->id]; u < FD->ustart[from->id + 1]; u++) {
        Node *n = g->nodes[FD->users[u]];
        if (n == to) continue;
        for (int j = 0; j < n->nin; j++)
            if (n->in[j] == from) n->in[j] = to;
    }
    for (int i = 0; i < g->noutputs; i++)
        if (g->outputs[i].node == from) g->outputs[i].node = to;
}

/* ---------------------------------------------------------------- batch norm */

static bool single_use(const Node *n) { return n->nuses == 1 && !n->is_output; }

/* The bias operand of add(y, reshape(b[C])) when y is `anchor`, else NULL. */
static Node *bias_of(Node *add, Node **anchor) {
    if (add->op != OP_ADD || !single_use(add)) return NULL;
    for (int j = 0; j < 2; j++) {
        Node *y = add->in[j], *b = add->in[1 - j];
        while (b->op == OP_RESHAPE) b = b->in[0];
        if ((y->op == OP_CONV2D || y->op == OP_MATMUL) && b->shape.rank == 1 && is_static(b)) {
            *anchor = y;
            return b;
        }
    }
    return NULL;
}

/* Try to fold bn into the conv2d / linear that produces its input. */
static bool fold_bn_into_producer(Graph *g, Node *bn) {
    Node *y = bn->in[0], *anchor = NULL, *bias = bias_of(y, &anchor);
    if (!bias) anchor = y;
    if (!single_use(anchor)) return false;
    bool conv = anchor->op == OP_CONV2D;
    bool linear = anchor->op == OP_MATMUL && anchor->trans_b && anchor->shape.rank == 2 && bn->shape.rank == 2 &&
                  anchor->in[1]->shape.rank == 2;
    if (!conv && !linear) return false;
    Node *W = anchor->in[1];
    if (!is_static(W)) return false;
    const Node *loc = bn;
    Node *gamma = bn->in[1], *beta = bn->in[2], *mean = bn->in[3], *var = bn->in[4];
    /* s = gamma / sqrt(var + eps) */
    Node *s = bin(g, OP_DIV, loc, gamma, un(g, OP_SQRT, loc, bin(g, OP_ADD, loc, var, cst(g, loc, bn->eps))));
    /* W' = W * s along the output-channel axis (axis 0 of both layouts); it stands for the
     * layer's weight, so it lives where the layer runs (the rest stands for the batch norm) */
    Node *Wf = bin(g, OP_MUL, anchor, W, as_column(g, anchor, s, W->shape.rank));
    Wf->name = xprintf("%s*bn", W->name ? W->name : "w");
    /* b' = (b - mean) * s + beta, or beta - mean * s without a bias */
    Node *bf = bias ? bin(g, OP_ADD, loc, bin(g, OP_MUL, loc, bin(g, OP_SUB, loc, bias, mean), s), beta)
                    : bin(g, OP_SUB, loc, beta, bin(g, OP_MUL, loc, mean, s));
    Node *na = new_node_for(g, anchor->op, anchor);
    *na = *anchor;
    na->id = g->nnodes - 1;
    na->in[1] = Wf;
    na->name = NULL;
    Node *out = bin(g, OP_ADD, loc, na, conv ? as_column(g, loc, bf, 3) : bf);
    out->name = bn->name;
    replace_uses_fast(g, bn, out);
    return true;
}

/* y = (x - mean) * s + beta, per channel (axis 1). */
static void lower_bn(Graph *g, Node *bn) {
    const Node *loc = bn;
    int r = bn->shape.rank - 1; /* rank of the per-channel view [C, 1, ...] */
    Node *s = bin(g, OP_DIV, loc, bn->in[1], un(g, OP_SQRT, loc, bin(g, OP_ADD, loc, bn->in[4], cst(g, loc, bn->eps))));
    Node *y = bin(g, OP_SUB, loc, bn->in[0], as_column(g, loc, bn->in[3], r));
    y = bin(g, OP_MUL, loc, y, as_column(g, loc, s, r));
    y = bin(g, OP_ADD, loc, y, as_column(g, loc, bn->in[2], r));
    y->name = bn->name;
    replace_uses_fast(g, bn, y);
}

/* ---------------------------------------------------------------- hoisting */

static bool static_operand(const Node *n) {
    while (n->op == OP_RESHAPE) n = n->in[0];
    return n->op == OP_PARAM || n->op == OP_TABLE || n->init;
}

void hoist_graph(Graph *g) {
    for (int i = 0; i < g->nnodes; i++) {
        Node *n = g->nodes[i];
        n->init = false;
        if (n->dead || n->op == OP_INPUT || n->op == OP_PARAM || n->op == OP_CONST || n->op == OP_RESHAPE) continue;
        if (n->op == OP_TABLE) { /* a constant from the source: copied into the weights at load */
            n->init = true;
            continue;
        }
        bool all = true, any = false;
        for (int j = 0; j < n->nin; j++) {
            bool st = static_operand(n->in[j]);
            all = all && (st || n->in[j]->op == OP_CONST);
            any = any || st;
        }
        /* a value whose shape has a symbolic size (slice(pos_table, 0, 0, seq)) has a size, and
         * layout, only the run knows */
        n->init = all && any && !shape_nsym(&n->shape);
    }
}

/* matmul(a, transpose(x)) reads x through the GEMM's transpose flag instead of copying it. */
static void fold_transposes(Graph *g) {
    for (int i = 0; i < g->nnodes; i++) {
        Node *n = g->nodes[i];
        if (n->dead || n->op != OP_MATMUL || n->trans_b || n->in[1]->op != OP_PERMUTE) continue;
        Node *p = n->in[1];
        int r = p->shape.rank;
        bool swap = r >= 2 && p->perm[r - 1] == r - 2 && p->perm[r - 2] == r - 1;
        for (int d = 0; d < r - 2 && swap; d++) swap = p->perm[d] == d;
        if (!swap) continue;
        n->in[1] = p->in[0];
        n->trans_b = true;
    }
}

/* mul(x, sigmoid(x)) -> silu(x). ONNX had no SiLU operator before opset 24, so exporters write
 * swish (EfficientNet's activation) as Sigmoid and Mul; x then has two readers, and fusion cannot
 * put the activation into the epilogue of x's producer (a conv2d, or the CPU's fused depthwise
 * kernel). silu computes x / (1 + e^-x) (mrt_silu), within an ulp of x * (1 / (1 + e^-x)), and
 * the same at -0.0, +-inf and NaN. The sigmoid stays if something else reads it. */
static int fold_silu(Graph *g) {
    int folded = 0;
    for (int i = 0; i < g->nnodes; i++) {
        Node *n = g->nodes[i];
        if (n->dead || n->op != OP_MUL || n->dtype != DT_F32) continue;
        for (int j = 0; j < 2; j++) {
            Node *x = n->in[j], *s = n->in[1 - j];
            bool same = s->op == OP_SIGMOID && s->in[0] == x && x->dtype == DT_F32 && x->shape.rank == n->shape.rank;
            for (int d = 0; same && d < n->shape.rank; d++) same = dim_eq(x->shape.d[d], n->shape.d[d]);
            if (!same) continue;
            Node *silu = un(g, OP_SILU, n, x);
            silu->dtype = DT_F32;
            silu->name = n->name; /* the value the user named (diagnostics, kernel messages) */
            replace_uses(g, n, silu);
            folded++;
            break;
        }
    }
    return folded;
}

void fold_graph(Graph *g, FoldOptions opt) {
    analyze_uses(g);
    if (opt.fold_silu && fold_silu(g)) toposort_graph(g); /* the new silu nodes come after their readers */
    if (opt.fold_transpose) fold_transposes(g);
    analyze_uses(g);
    int n0 = g->nnodes;
    Fold fd = {g, n0, xalloc((size_t)n0 + 1), xalloc(sizeof(int) * (size_t)(n0 + 2)), NULL};
    for (int i = 0; i < n0; i++)
        for (int j = 0; j < g->nodes[i]->nin; j++) fd.ustart[g->nodes[i]->in[j]->id + 1]++;
    for (int i = 0; i < n0; i++) fd.ustart[i + 1] += fd.ustart[i];
    fd.users = xalloc(sizeof(int) * (size_t)(fd.ustart[n0] + 1));
    int *fill = xalloc(sizeof(int) * (size_t)(n0 + 1));
    memcpy(fill, fd.ustart, sizeof(int) * (size_t)n0);
    for (int i = 0; i < n0; i++)
        for (int j = 0; j < g->nodes[i]->nin; j++) fd.users[fill[g->nodes[i]->in[j]->id]++] = i;
    FD = &fd;
    /* The uses are counted once, on the graph as checked. Recounting after each rewrite (a
     * pass over the whole graph per batch norm, quadratic in their number) could only lower
     * the count of a layer whose other reader an earlier rewrite replaced, by a node the
     * recount did not see yet: it made a shared layer look single-use, and folding it then
     * computed the layer twice. */
    for (int i = 0; i < n0; i++) {
        Node *n = g->nodes[i];
        if (n->dead || n->op != OP_BATCH_NORM) continue;
        if (!(opt.fold_bn && fold_bn_into_producer(g, n))) lower_bn(g, n);
    }
    FD = NULL;
    toposort_graph(g);
}
