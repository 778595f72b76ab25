/*
 * grad.c — reverse-mode differentiation over the graph IR (training, --train).
 *
 * grad_graph appends the backward graph to a checked graph whose g->loss is a scalar f32 node:
 * the adjoint of every node on a path from a trainable param to the loss, in reverse topological
 * order, each operand's contribution given by the op's vector-Jacobian product (its VJP row in
 * ops.def, next to the op's OP row) and summed where a value has several consumers. g->grad[i]
 * is then d loss / d params[i] (NULL for a frozen param or one the loss does not read). The
 * backward nodes are ordinary IR nodes: fusion, epilogues, placement and the memory plan treat
 * them like the forward ones, so the saved activations are planned by liveness across both.
 *
 * Broadcasting is undone by summing the adjoint over the broadcast axes (unbroadcast). A mean
 * over a symbolic axis divides by the run's size, computed as the sum of ones over that axis.
 * A value that the loss reads through an op without a VJP rule, on a path to a trainable param,
 * is a compile error naming the op and its source line. The approach is the one of every
 * autodiff system over a static graph (Griewank and Walther, "Evaluating Derivatives", 2008;
 * the per-op rules follow PyTorch's derivatives.yaml).
 */
#include "modelc.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

static Graph *G;

static void add_grad_sumsq(Graph *g);

/* ---------------------------------------------------------------- node constructors */

static Node *mk(OpKind op, const Node *at, DType dt, const Shape *s) {
    Node *n = new_node_for(G, op, at);
    n->dtype = dt;
    n->shape = *s;
    return n;
}

static Node *cnst(const Node *at, double v) {
    Node *n = new_node_for(G, OP_CONST, at);
    n->value = (double)(float)v;
    n->exact = v;
    n->shape.rank = 0;
    return n;
}

static Node *un(OpKind op, const Node *at, Node *x) {
    Node *n = mk(op, at, x->dtype, &x->shape);
    n->in[0] = x;
    n->nin = 1;
    return n;
}

static Node *bin(OpKind op, const Node *at, Node *a, Node *b) {
    Shape s = shape_broadcast(&a->shape, &b->shape);
    Node *n = mk(op, at, op_info[op].cat == CAT_BINARY && (op == OP_GT || op == OP_LT || op == OP_GE || op == OP_LE ||
                                                            op == OP_EQ || op == OP_NE) ? DT_BOOL : a->dtype, &s);
    n->in[0] = a;
    n->in[1] = b;
    n->nin = 2;
    return n;
}

static Node *where(const Node *at, Node *cond, Node *a, Node *b) {
    Shape s = shape_broadcast(&cond->shape, &a->shape);
    s = shape_broadcast(&s, &b->shape);
    Node *n = mk(OP_WHERE, at, a->dtype, &s);
    n->in[0] = cond;
    n->in[1] = a;
    n->in[2] = b;
    n->nin = 3;
    return n;
}

static Node *expand(const Node *at, Node *x, const Shape *s);

static Node *reshape(const Node *at, Node *x, const Shape *s) {
    bool same = x->shape.rank == s->rank;
    for (int i = 0; same && i < s->rank; i++) same = dim_eq(x->shape.d[i], s->d[i]);
    if (same) return x;
    if (x->op == OP_CONST) return expand(at, x, s); /* a scalar constant broadcasts (a view of it has no bytes) */
    Node *n = mk(OP_RESHAPE, at, x->dtype, s);
    n->in[0] = x;
    n->nin = 1;
    return n;
}

static Node *expand(const Node *at, Node *x, const Shape *s) {
    bool same = x->shape.rank == s->rank;
    for (int i = 0; same && i < s->rank; i++) same = dim_eq(x->shape.d[i], s->d[i]);
    if (same) return x;
    Node *n = mk(OP_EXPAND, at, x->dtype, s);
    n->in[0] = x;
    n->nin = 1;
    return n;
}

static Node *sum_axis(const Node *at, Node *x, int axis) { /* keepdim */
    Shape s = x->shape;
    s.d[axis] = dim_const(1);
    Node *n = mk(OP_SUM, at, x->dtype, &s);
    n->in[0] = x;
    n->nin = 1;
    n->axis = axis;
    n->keepdim = true;
    return n;
}

static Node *permute(const Node *at, Node *x, const int *perm) {
    Shape s = {x->shape.rank, {{0}}};
    bool ident = true;
    for (int i = 0; i < s.rank; i++) {
        s.d[i] = x->shape.d[perm[i]];
        ident = ident && perm[i] == i;
    }
    if (ident) return x;
    Node *n = mk(OP_PERMUTE, at, x->dtype, &s);
    n->in[0] = x;
    n->nin = 1;
    memcpy(n->perm, perm, sizeof(int) * (size_t)s.rank);
    return n;
}

/* The last two axes swapped. */
static Node *transpose2(const Node *at, Node *x) {
    int perm[MAX_RANK], r = x->shape.rank;
    for (int i = 0; i < r; i++) perm[i] = i;
    perm[r - 1] = r - 2;
    perm[r - 2] = r - 1;
    return permute(at, x, perm);
}

/* a[..., M, K] @ b[..., K, N] (b stored [..., N, K] with trans_b); the batch axes broadcast
 * (NumPy's rules, as the forward matmul's). */
static Node *matmul(const Node *at, Node *a, Node *b, bool trans_b) {
    const Shape *sa = &a->shape, *sb = &b->shape;
    Shape ba = *sa, bb = *sb;
    ba.rank -= 2;
    bb.rank -= 2;
    Shape s = shape_broadcast(&ba, &bb);
    s.d[s.rank++] = sa->d[sa->rank - 2];
    s.d[s.rank++] = trans_b ? sb->d[sb->rank - 2] : sb->d[sb->rank - 1];
    Node *n = mk(OP_MATMUL, at, DT_F32, &s);
    n->in[0] = a;
    n->in[1] = b;
    n->nin = 2;
    n->trans_b = trans_b;
    return n;
}

/* g (the adjoint of a broadcast result) summed back to the operand's shape t. */
static Node *unbroadcast(const Node *at, Node *g, const Shape *t) {
    int lead = g->shape.rank - t->rank;
    for (int i = g->shape.rank - 1; i >= 0; i--) {
        Dim want = i >= lead ? t->d[i - lead] : dim_const(1);
        if (dim_is_one(want) && !dim_is_one(g->shape.d[i])) g = sum_axis(at, g, i);
    }
    return reshape(at, g, t);
}

/* The number of elements along axis of x, as a scalar f32 node: a constant, or for a symbolic
 * axis the sum of ones over it (the run's size). */
static Node *axis_count(const Node *at, const Node *x, int axis) {
    Dim d = x->shape.d[axis];
    if (!dim_is_sym(d)) return cnst(at, (double)d.c);
    Shape s = {1, {d}};
    Node *ones = expand(at, cnst(at, 1.0), &s);
    Node *c = sum_axis(at, ones, 0);
    Shape sc = {0};
    return reshape(at, c, &sc);
}

/* ---------------------------------------------------------------- the VJP rules
 *
 * vjp_OP(n, j, g): the contribution of n's adjoint g to the adjoint of n->in[j], shaped like
 * n->in[j]; NULL when that operand takes no gradient (an index, a condition). */

typedef Node *(*VjpFn)(Node *n, int j, Node *g);

static Node *vjp_neg(Node *n, int j, Node *g) { (void)j; return un(OP_NEG, n, g); }
static Node *vjp_add(Node *n, int j, Node *g) { return unbroadcast(n, g, &n->in[j]->shape); }
static Node *vjp_sub(Node *n, int j, Node *g) { return unbroadcast(n, j ? un(OP_NEG, n, g) : g, &n->in[j]->shape); }
static Node *vjp_mul(Node *n, int j, Node *g) { return unbroadcast(n, bin(OP_MUL, n, g, n->in[1 - j]), &n->in[j]->shape); }
static Node *vjp_div(Node *n, int j, Node *g) {
    Node *a = n->in[0], *b = n->in[1];
    if (j == 0) return unbroadcast(n, bin(OP_DIV, n, g, b), &a->shape);
    /* d(a/b)/db = -a / b^2 = -(a/b) / b */
    return unbroadcast(n, un(OP_NEG, n, bin(OP_DIV, n, bin(OP_MUL, n, g, n), b)), &b->shape);
}
static Node *vjp_exp(Node *n, int j, Node *g) { (void)j; return bin(OP_MUL, n, g, n); }
static Node *vjp_log(Node *n, int j, Node *g) { (void)j; return bin(OP_DIV, n, g, n->in[0]); }
static Node *vjp_sqrt(Node *n, int j, Node *g) { (void)j; return bin(OP_DIV, n, g, bin(OP_MUL, n, n, cnst(n, 2.0))); }
static Node *vjp_rsqrt(Node *n, int j, Node *g) { /* d x^-1/2 = -1/2 x^-3/2 = -0.5 * y^3 */
    (void)j;
    Node *y3 = bin(OP_MUL, n, bin(OP_MUL, n, n, n), n);
    return bin(OP_MUL, n, g, bin(OP_MUL, n, y3, cnst(n, -0.5)));
}
static Node *vjp_relu(Node *n, int j, Node *g) { /* PyTorch: the gradient at 0 is 0 */
    (void)j;
    return where(n, bin(OP_GT, n, n->in[0], cnst(n, 0.0)), g, cnst(n, 0.0));
}
static Node *vjp_sigmoid(Node *n, int j, Node *g) {
    (void)j;
    return bin(OP_MUL, n, g, bin(OP_MUL, n, n, bin(OP_SUB, n, cnst(n, 1.0), n)));
}
static Node *vjp_tanh(Node *n, int j, Node *g) {
    (void)j;
    return bin(OP_MUL, n, g, bin(OP_SUB, n, cnst(n, 1.0), bin(OP_MUL, n, n, n)));
}
static Node *vjp_abs(Node *n, int j, Node *g) { /* sign(x), 0 at 0 */
    (void)j;
    Node *x = n->in[0];
    Node *s = where(n, bin(OP_GT, n, x, cnst(n, 0.0)), cnst(n, 1.0),
                    where(n, bin(OP_LT, n, x, cnst(n, 0.0)), cnst(n, -1.0), cnst(n, 0.0)));
    return bin(OP_MUL, n, g, s);
}
static Node *vjp_softplus(Node *n, int j, Node *g) { /* sigmoid(beta x); 1 where beta x > threshold */
    (void)j;
    Node *bx = bin(OP_MUL, n, n->in[0], cnst(n, n->fattr[0]));
    return where(n, bin(OP_GT, n, bx, cnst(n, n->fattr[1])), g, bin(OP_MUL, n, g, un(OP_SIGMOID, n, bx)));
}
static Node *vjp_silu(Node *n, int j, Node *g) { /* s + x s (1 - s) */
    (void)j;
    Node *x = n->in[0], *s = un(OP_SIGMOID, n, x);
    Node *d = bin(OP_ADD, n, s, bin(OP_MUL, n, bin(OP_MUL, n, x, s), bin(OP_SUB, n, cnst(n, 1.0), s)));
    return bin(OP_MUL, n, g, d);
}
static Node *vjp_gelu(Node *n, int j, Node *g) { /* erf form: Phi(x) + x phi(x) */
    (void)j;
    Node *x = n->in[0];
    Node *cdf = bin(OP_MUL, n, bin(OP_ADD, n, cnst(n, 1.0), un(OP_ERF, n, bin(OP_MUL, n, x, cnst(n, M_SQRT1_2)))),
                    cnst(n, 0.5));
    Node *pdf = bin(OP_MUL, n, un(OP_EXP, n, bin(OP_MUL, n, bin(OP_MUL, n, x, x), cnst(n, -0.5))),
                    cnst(n, 0.3989422804014327)); /* 1/sqrt(2 pi) */
    return bin(OP_MUL, n, g, bin(OP_ADD, n, cdf, bin(OP_MUL, n, x, pdf)));
}
static Node *vjp_clamp(Node *n, int j, Node *g) { /* 1 inside [min, max], PyTorch: at the bounds too */
    (void)j;
    Node *x = n->in[0];
    Node *in = bin(OP_LOGICAL_AND, n, bin(OP_GE, n, x, cnst(n, n->fattr[0])), bin(OP_LE, n, x, cnst(n, n->fattr[1])));
    return where(n, in, g, cnst(n, 0.0));
}
static Node *vjp_reshape(Node *n, int j, Node *g) { (void)j; return reshape(n, g, &n->in[0]->shape); }
static Node *vjp_expand(Node *n, int j, Node *g) { (void)j; return unbroadcast(n, g, &n->in[0]->shape); }
static Node *vjp_permute(Node *n, int j, Node *g) {
    (void)j;
    int inv[MAX_RANK];
    for (int i = 0; i < n->shape.rank; i++) inv[n->perm[i]] = i;
    return permute(n, g, inv);
}
static Node *vjp_cast(Node *n, int j, Node *g) { /* between float dtypes: the adjoint in the operand's dtype */
    (void)j;
    if (!dtype_is_float(n->in[0]->dtype)) return NULL;
    Node *c = un(OP_CAST, n, g);
    c->dtype = n->in[0]->dtype;
    return c->dtype == g->dtype ? g : c;
}
static Node *vjp_sum(Node *n, int j, Node *g) {
    (void)j;
    Shape k = n->in[0]->shape;
    k.d[n->axis] = dim_const(1);
    return expand(n, reshape(n, g, &k), &n->in[0]->shape);
}
static Node *vjp_mean(Node *n, int j, Node *g) {
    return bin(OP_DIV, n, vjp_sum(n, j, g), axis_count(n, n->in[0], n->axis));
}
static Node *vjp_softmax(Node *n, int j, Node *g) { /* y (g - sum(g y)) */
    (void)j;
    Node *gy = bin(OP_MUL, n, g, n);
    return bin(OP_MUL, n, n, bin(OP_SUB, n, g, sum_axis(n, gy, n->axis)));
}
static Node *vjp_log_softmax(Node *n, int j, Node *g) { /* g - exp(y) sum(g) */
    (void)j;
    return bin(OP_SUB, n, g, bin(OP_MUL, n, un(OP_EXP, n, n), sum_axis(n, g, n->axis)));
}
static Node *vjp_slice_strided(Node *n, Node *g); /* transformer section */

/* slice: the adjoint in the sliced range, zeros elsewhere (a concat of zeros, g, zeros along the
 * axis; step 1). Another step, or a symbolic axis (a fixed part of one, as BERT's [CLS] row, or a
 * symbolic length of a fixed one, as slice(wpe, 0, 0, seq)): g scattered to start + i*step. */
static Node *vjp_slice(Node *n, int j, Node *g) {
    (void)j;
    Node *x = n->in[0];
    int ax = n->axis;
    Dim L = x->shape.d[ax], len = n->shape.d[ax];
    if (n->step == 1 && n->start == 0 && dim_eq(L, len)) return g; /* the whole axis */
    if (n->step == -1 && !dim_is_sym(L) && dim_eq(L, len) && n->start == L.c - 1) { /* flip: its own inverse */
        Node *f = mk(OP_SLICE, n, g->dtype, &g->shape);
        f->in[0] = g;
        f->nin = 1;
        f->axis = ax;
        f->start = n->start;
        f->step = -1;
        return f;
    }
    if (n->step != 1 || dim_is_sym(L) || dim_is_sym(len)) return vjp_slice_strided(n, g);
    Node *parts[3];
    int np = 0;
    int64_t before = n->start, after = L.c - n->start - len.c;
    Shape zs = x->shape;
    if (before > 0) {
        zs.d[ax] = dim_const(before);
        parts[np++] = expand(n, cnst(n, 0.0), &zs);
    }
    parts[np++] = g;
    if (after > 0) {
        zs.d[ax] = dim_const(after);
        parts[np++] = expand(n, cnst(n, 0.0), &zs);
    }
    if (np == 1) return g;
    Node *c = mk(OP_CONCAT, n, g->dtype, &x->shape);
    c->axis = ax;
    for (int i = 0; i < np; i++) c->in[i] = parts[i];
    c->nin = np;
    return c;
}

static Node *vjp_where(Node *n, int j, Node *g) {
    if (j == 0) return NULL; /* the condition */
    Node *c = n->in[0];
    Node *z = cnst(n, 0.0);
    return unbroadcast(n, j == 1 ? where(n, c, g, z) : where(n, c, z, g), &n->in[j]->shape);
}
/* matmul: ga = g @ b^T and gb = a^T @ g, each over the result's batch axes and then summed over
 * the axes its operand broadcast (unbroadcast): [B, H, T, D] @ [D, E], [1, H, T, D] @ [B, H, D, E]
 * and [T, D] @ [B, D, E] alike. A weight without batch axes under an operand with them (a linear
 * layer's) takes one GEMM over the batch folded into the rows instead. */
static Node *vjp_matmul(Node *n, int j, Node *g) {
    Node *a = n->in[0], *b = n->in[1];
    int ra = a->shape.rank, rb = b->shape.rank;
    if (ra < 2 || rb < 2)
        error_at(n->loc, "no gradient for a matmul of a vector yet (shapes of rank %d and %d): reshape it to a matrix",
                 ra, rb);
    if (j == 0) { /* ga = g @ b^T (b stored [N, K] with trans_b: g @ b) */
        Node *r = matmul(n, g, b, !n->trans_b);
        return unbroadcast(n, r, &a->shape);
    }
    /* gb = a^T @ g, summed over a's batch axes when b has none (a linear layer's weight) */
    if (rb == 2 && ra > 2) {
        Shape a2 = {2, {shape_numel(&a->shape), a->shape.d[ra - 1]}}, g2 = {2, {shape_numel(&g->shape), g->shape.d[ra - 1]}};
        bool ok;
        a2.d[0] = dim_div(a2.d[0], a->shape.d[ra - 1], &ok);
        g2.d[0] = dim_div(g2.d[0], g->shape.d[ra - 1], &ok);
        a = reshape(n, a, &a2);
        g = reshape(n, g, &g2);
    }
    /* b stored [N, K]: (a^T g)^T = g^T a */
    Node *r = n->trans_b ? matmul(n, transpose2(n, g), a, false) : matmul(n, transpose2(n, a), g, false);
    return unbroadcast(n, r, &b->shape);
}

/* ================================================================ convolution, pooling and batch norm
 * (issue 14, the convolutional half). Kept in one section to ease merging with the other
 * training ops' rules.
 *
 * conv2d: the input's adjoint is a conv_transpose2d of g with the same weight (its layout,
 * [O, C/groups, KH, KW], is conv_transpose2d's [in, out/groups, KH, KW] for in = O), the same
 * stride, dilation and groups, padding top/left, and the input's size as output (bottom and right
 * padding only drop outputs). The weight's adjoint is its own op, conv2d_weight_grad (im2col
 * and one GEMM per image and group, summed over the batch). A bias is an add, whose rule sums.
 * Pooling: max_pool2d_grad sends each output's adjoint to the first maximum of its window in
 * PyTorch's scan order (a NaN takes it), avg_pool2d_grad and adaptive_avg_pool2d_grad spread it
 * over the window with the forward's divisor. batch_norm of a training build normalizes with the
 * batch's statistics (train_batch_norms below), so its gradient is that of mean, sub, mul and
 * rsqrt. */

/* r's window attributes (kernel, stride, padding, dilation, groups, ceil_mode,
 * count_include_pad) taken from the forward node n. */
static void copy_window(Node *r, const Node *n) {
    memcpy(r->kernel, n->kernel, sizeof r->kernel);
    memcpy(r->stride, n->stride, sizeof r->stride);
    memcpy(r->dilation, n->dilation, sizeof r->dilation);
    memcpy(r->pad, n->pad, sizeof r->pad);
    r->groups = n->groups;
    r->ceil_mode = n->ceil_mode;
    r->count_include_pad = n->count_include_pad;
}

static Node *vjp_conv2d(Node *n, int j, Node *g) {
    Node *x = n->in[0], *w = n->in[1];
    if (j == 0) { /* dx = conv_transpose2d(g, w): output (OH-1)*s - pt + d*(k-1) + 1 + out_pad = H */
        Node *r = mk(OP_CONV_TRANSPOSE2D, n, DT_F32, &x->shape);
        r->in[0] = g;
        r->in[1] = w;
        r->nin = 2;
        copy_window(r, n);
        r->pad[2] = r->pad[0];
        r->pad[3] = r->pad[1];
        for (int i = 0; i < 2; i++)
            r->out_pad[i] = (int)(x->shape.d[2 + i].c - ((n->shape.d[2 + i].c - 1) * n->stride[i] - 2 * (int64_t)n->pad[i] +
                                                        (int64_t)n->dilation[i] * (n->kernel[i] - 1) + 1));
        return r;
    }
    Node *r = mk(OP_CONV2D_WGRAD, n, DT_F32, &w->shape);
    r->in[0] = g;
    r->in[1] = x;
    r->nin = 2;
    copy_window(r, n);
    return r;
}

/* conv_transpose2d is conv2d's input adjoint, so its own adjoints are conv2d's other two
 * products: dx = conv2d(g, w) (w [C, O/groups, KH, KW] read as conv2d's [out = C, in/groups,
 * KH, KW]) with the same stride, padding, dilation and groups, and dw = conv2d_weight_grad with
 * the roles of its operands swapped: x [N, C, H, W] as the conv's adjoint and g [N, O, OH, OW] as
 * its input (gw[c, o, kh, kw] = sum of x[n, c, ih, iw] g[n, o, ih*s - p + kh*d, iw*s - p + kw*d]).
 * The conv reads g of OH = (H-1)*s - 2p + d*(KH-1) + 1 + output_padding rows for H outputs: its
 * bottom padding is p - output_padding (negative where the last rows of g, which output_padding
 * added and no input reaches, are not read). The bias is an add, whose rule sums. */
static Node *vjp_conv_transpose2d(Node *n, int j, Node *g) {
    Node *x = n->in[0], *w = n->in[1];
    Node *r = mk(j == 0 ? OP_CONV2D : OP_CONV2D_WGRAD, n, DT_F32, j == 0 ? &x->shape : &w->shape);
    r->in[0] = j == 0 ? g : x;
    r->in[1] = j == 0 ? w : g;
    r->nin = 2;
    copy_window(r, n);
    r->pad[2] = n->pad[0] - n->out_pad[0];
    r->pad[3] = n->pad[1] - n->out_pad[1];
    return r;
}

static Node *vjp_max_pool2d(Node *n, int j, Node *g) {
    (void)j;
    Node *r = mk(OP_MAXPOOL2D_GRAD, n, DT_F32, &n->in[0]->shape);
    r->in[0] = g;
    r->in[1] = n->in[0];
    r->nin = 2;
    copy_window(r, n);
    return r;
}

static Node *vjp_avg_pool2d(Node *n, int j, Node *g) {
    (void)j;
    Node *r = mk(OP_AVGPOOL2D_GRAD, n, DT_F32, &n->in[0]->shape);
    r->in[0] = g;
    r->nin = 1;
    copy_window(r, n);
    return r;
}

static Node *vjp_adaptive_avg_pool2d(Node *n, int j, Node *g) {
    (void)j;
    Node *r = mk(OP_ADAPTIVE_AVGPOOL2D_GRAD, n, DT_F32, &n->in[0]->shape);
    r->in[0] = g;
    r->nin = 1;
    return r;
}

/* interpolate: its input gradient, interpolate_grad (each output's adjoint added to the source
 * taps it read, with their weights: PyTorch's upsample backward, without atomics on CUDA). */
static Node *vjp_interpolate(Node *n, int j, Node *g) {
    (void)j;
    Node *r = mk(OP_INTERPOLATE_GRAD, n, DT_F32, &n->in[0]->shape);
    r->in[0] = g;
    r->nin = 1;
    r->bilinear = n->bilinear;
    r->align_corners = n->align_corners;
    r->scale[0] = n->scale[0];
    r->scale[1] = n->scale[1];
    return r;
}

/* mean of x along axis, keepdim. */
static Node *mean_axis(const Node *at, Node *x, int axis) {
    Node *n = sum_axis(at, x, axis);
    n->op = OP_MEAN;
    return n;
}

/* x [C] viewed as [C, 1, ...] of rank `rank` (broadcasting against [N, C, ...] of rank + 1). */
static Node *as_channels(const Node *at, Node *x, int rank) {
    Shape s = {rank, {{0}}};
    s.d[0] = x->shape.d[0];
    for (int i = 1; i < rank; i++) s.d[i] = dim_const(1);
    return reshape(at, x, &s);
}

/* param p takes the value v after each training step. */
static void add_update(Graph *g, const Node *bn, Node *p, Node *v, const char *what) {
    if (p->op != OP_PARAM)
        error_at(p->loc, "a training step updates batch_norm's %s, so it must be a param (a buffer of the state_dict), "
                 "not a computed value", what);
    for (int i = 0; i < g->nupd; i++)
        if (g->upd_param[i] == p)
            error_at(bn->loc, "'%s' is the %s of two batch_norm calls: a training step would update it twice", p->name, what);
    if (g->nupd == g->capupd) {
        int cap = g->capupd ? 2 * g->capupd : 8;
        g->upd_param = xrealloc_array(g->upd_param, g->capupd, cap, sizeof(Node *));
        g->upd_value = xrealloc_array(g->upd_value, g->capupd, cap, sizeof(Node *));
        g->capupd = cap;
    }
    g->upd_param[g->nupd] = p;
    g->upd_value[g->nupd++] = v;
}

/* The param PREFIX.num_batches_tracked of the batch norm whose running_mean is the param
 * PREFIX.running_mean (nn.BatchNorm2d's buffers in a state_dict), when the model declares it;
 * it must be an i64[] then. NULL when there is none. */
static Node *num_batches_tracked(Graph *g, const Node *rm) {
    static const char suffix[] = "running_mean";
    size_t L = rm->name ? strlen(rm->name) : 0, ls = sizeof suffix - 1;
    if (rm->op != OP_PARAM || L < ls || strcmp(rm->name + L - ls, suffix)) return NULL;
    char *want = xprintf("%.*snum_batches_tracked", (int)(L - ls), rm->name);
    for (int i = 0; i < g->nparams; i++) {
        Node *p = g->params[i];
        if (strcmp(p->name, want)) continue;
        char buf[128];
        if (p->dtype != DT_I64 || p->shape.rank != 0)
            error_at(p->loc, "'%s' must be an i64[] (a batch norm's count of training steps, as in PyTorch's state_dict), "
                     "got %s%s", want, dtype_name(p->dtype), shape_str(&p->shape, g->sym_names, buf, sizeof buf));
        return p;
    }
    return NULL;
}

/* batch_norm in training mode (PyTorch's F.batch_norm(training=True)): x [N, C, ...] normalized
 * per channel with the batch's mean and biased variance over every axis but 1, as
 * y = x * alpha + (beta - mean * alpha), alpha = gamma / sqrt(var + eps) (PyTorch's CPU
 * kernel's form); running_mean and running_var become (1 - momentum) * running + momentum *
 * batch, with the unbiased variance (var * n / (n - 1), n = N * H * W ...), and
 * PREFIX.num_batches_tracked, when the model declares it next to PREFIX.running_mean, counts
 * the step. The rewrite is made before differentiation,
 * so the gradient follows the ops it is written with. */
static void train_batch_norm(Graph *g, Node *bn) {
    Node *x = bn->in[0], *gamma = bn->in[1], *beta = bn->in[2], *rm = bn->in[3], *rv = bn->in[4];
    int r = x->shape.rank;
    double m = bn->fattr[0];
    Node *mu = x;
    for (int ax = r - 1; ax >= 0; ax--)
        if (ax != 1) mu = mean_axis(bn, mu, ax);
    Node *d = bin(OP_SUB, bn, x, mu), *var = bin(OP_MUL, bn, d, d);
    for (int ax = r - 1; ax >= 0; ax--)
        if (ax != 1) var = mean_axis(bn, var, ax);
    Shape cs = {1, {x->shape.d[1]}};
    Node *mean_c = reshape(bn, mu, &cs), *var_c = reshape(bn, var, &cs);
    Node *alpha = bin(OP_MUL, bn, un(OP_RSQRT, bn, bin(OP_ADD, bn, var_c, cnst(bn, bn->eps))), gamma);
    Node *shift = bin(OP_SUB, bn, beta, bin(OP_MUL, bn, mean_c, alpha));
    Node *y = bin(OP_ADD, bn, bin(OP_MUL, bn, x, as_channels(bn, alpha, r - 1)), as_channels(bn, shift, r - 1));
    y->name = bn->name;
    replace_uses(g, bn, y);
    if (g->loss == bn) g->loss = y;
    /* the running statistics: n / (n - 1) corrects the variance; n holds the batch when it is symbolic */
    Node *cnt = cnst(bn, 1.0);
    int64_t known = 1;
    for (int ax = 0; ax < r; ax++) {
        if (ax == 1) continue;
        if (dim_is_sym(x->shape.d[ax])) cnt = bin(OP_MUL, bn, cnt, axis_count(bn, x, ax));
        else known *= x->shape.d[ax].c;
    }
    /* PyTorch refuses one value per channel (its variance would be 0 / 0): at compile time, or
     * when the batch is the run's, at the start of the run */
    Dim per = dim_const(1);
    for (int ax = 0; ax < r; ax++)
        if (ax != 1) per = dim_mul(per, x->shape.d[ax], NULL);
    if (!dim_is_sym(per) && per.c < 2)
        error_at(bn->loc, "'batch_norm' of a training build needs more than 1 value per channel (batch statistics, as "
                 "in PyTorch), got an input of %" PRId64 " per channel", per.c);
    if (dim_is_sym(per) && known < 2) {
        g->checks = xgrow_array(g->checks, g->nchecks, &g->capchecks, sizeof *g->checks);
        g->checks[g->nchecks++] = (struct ShapeCheck){per, 2, bn->loc, "batch_norm"};
    }
    Node *corr;
    if (cnt->op == OP_CONST) {
        corr = cnst(bn, (double)known / (double)(known - 1));
    } else {
        cnt = bin(OP_MUL, bn, cnt, cnst(bn, (double)known));
        corr = bin(OP_DIV, bn, cnt, bin(OP_SUB, bn, cnt, cnst(bn, 1.0)));
    }
    Node *unbiased = bin(OP_MUL, bn, var_c, corr);
    Node *new_rm = bin(OP_ADD, bn, bin(OP_MUL, bn, mean_c, cnst(bn, m)), bin(OP_MUL, bn, rm, cnst(bn, 1.0 - m)));
    Node *new_rv = bin(OP_ADD, bn, bin(OP_MUL, bn, unbiased, cnst(bn, m)), bin(OP_MUL, bn, rv, cnst(bn, 1.0 - m)));
    add_update(g, bn, rm, new_rm, "running_mean");
    add_update(g, bn, rv, new_rv, "running_var");
    Node *nbt = num_batches_tracked(g, rm);
    if (nbt) {
        Node *one = cnst(bn, 1.0);
        one->dtype = DT_I64;
        one->literal_int = true;
        add_update(g, bn, nbt, bin(OP_ADD, bn, nbt, one), "num_batches_tracked");
    }
}

/* Every batch_norm of the graph in training mode, then the graph in topological order again. */
static void train_batch_norms(Graph *g) {
    int n0 = g->nnodes, nbn = 0;
    for (int i = 0; i < n0; i++)
        if (g->nodes[i]->op == OP_BATCH_NORM) {
            train_batch_norm(g, g->nodes[i]);
            nbn++;
        }
    if (nbn) toposort_graph(g);
}

/* ---------------------------------------------------------------- transformer gradients and dropout (issue 14)
 *
 * The rules of the transformer's ops (layer_norm, embedding, gelu_tanh, attention's pieces) and
 * of the remaining elementwise ops, reductions and data movement, as PyTorch's derivatives.yaml
 * writes them, ties and kinks included: max sends its adjoint to the first maximum along the
 * axis (torch.max(x, dim)'s index); minimum/maximum split it in half between equal operands;
 * pow's exponent takes none where the base is 0 and the exponent >= 0; relu-like kinks follow
 * PyTorch's comparisons (leaky_relu x > 0, elu x <= 0, hardswish [-3, 3], hardsigmoid (-3, 3)).
 * layer_norm recomputes its statistics in the backward graph from the saved input (ordinary
 * nodes, fused); embedding and gather scatter their adjoint back with scatter_add, whose kernels
 * sum duplicates in index order (deterministic, and the same on the CPU and CUDA). */

static Node *tf_reduce(OpKind op, const Node *at, Node *x, int axis) { /* sum/mean/max/argmax, keepdim */
    Shape s = x->shape;
    s.d[axis] = dim_const(1);
    Node *n = mk(op, at, op == OP_ARGMAX ? DT_I64 : x->dtype, &s);
    n->in[0] = x;
    n->nin = 1;
    n->axis = axis;
    n->keepdim = true;
    return n;
}

/* x[..., start : start + len, ...] along axis, step 1 (len == the axis: x itself). */
static Node *tf_slice(const Node *at, Node *x, int axis, int64_t start, int64_t len) {
    if (start == 0 && dim_eq(x->shape.d[axis], dim_const(len))) return x;
    Shape s = x->shape;
    s.d[axis] = dim_const(len);
    Node *n = mk(OP_SLICE, at, x->dtype, &s);
    n->in[0] = x;
    n->nin = 1;
    n->axis = axis;
    n->start = start;
    n->step = 1;
    return n;
}

/* The positions 0 .. n-1 along axis of a tensor of shape xs, as i64 shaped [1, .., n, .., 1]. */
static Node *tf_positions(const Node *at, const Shape *xs, int axis) {
    Shape s1 = {1, {xs->d[axis]}};
    Node *io = mk(OP_IOTA, at, DT_I64, &s1);
    io->nin = 0;
    io->fattr[0] = 0;
    io->fattr[1] = 1;
    Shape s = {xs->rank, {{0}}};
    for (int i = 0; i < xs->rank; i++) s.d[i] = i == axis ? xs->d[axis] : dim_const(1);
    return reshape(at, io, &s);
}

/* y shaped `s`, zeros plus g's entries added where idx points along axis (gather's modes). */
static Node *tf_scatter_add(const Node *at, Node *g, Node *idx, int mode, int axis, const Shape *s) {
    Node *n = mk(OP_SCATTER_ADD, at, DT_F32, s);
    n->in[0] = g;
    n->in[1] = idx;
    n->nin = 2;
    n->gather_mode = mode;
    n->axis = axis;
    return n;
}

/* A slice with a step other than 1 (a flip of part of an axis: pad's reflect mode): g added at
 * the positions start + i*step it read, by scatter_add over an iota of them (no two repeat). */
static Node *vjp_slice_strided(Node *n, Node *g) {
    Shape s1 = {1, {n->shape.d[n->axis]}};
    Node *pos = mk(OP_IOTA, n, DT_I64, &s1);
    pos->nin = 0;
    pos->fattr[0] = (double)n->start;
    pos->fattr[1] = (double)n->step;
    return tf_scatter_add(n, g, pos, GATHER_INDEX_SELECT, n->axis, &n->in[0]->shape);
}

static Node *mulc(const Node *at, Node *x, double c) { return bin(OP_MUL, at, x, cnst(at, c)); }

static Node *vjp_gelu_tanh(Node *n, int j, Node *g) { /* PyTorch's GeluBackward, approximate='tanh' */
    (void)j;
    const double beta = M_SQRT2 * M_2_SQRTPI * 0.5, kappa = 0.044715;
    Node *x = n->in[0], *x2 = bin(OP_MUL, n, x, x);
    Node *inner = mulc(n, bin(OP_ADD, n, x, mulc(n, bin(OP_MUL, n, x2, x), kappa)), beta);
    Node *t = un(OP_TANH, n, inner);
    Node *left_d = mulc(n, bin(OP_ADD, n, t, cnst(n, 1.0)), 0.5);
    Node *right_d = bin(OP_MUL, n, bin(OP_MUL, n, mulc(n, x, 0.5), bin(OP_SUB, n, cnst(n, 1.0), bin(OP_MUL, n, t, t))),
                        mulc(n, bin(OP_ADD, n, cnst(n, 1.0), mulc(n, x2, 3.0 * kappa)), beta));
    return bin(OP_MUL, n, g, bin(OP_ADD, n, left_d, right_d));
}
static Node *vjp_erf(Node *n, int j, Node *g) { /* 2/sqrt(pi) e^(-x^2) */
    (void)j;
    Node *x = n->in[0];
    return bin(OP_MUL, n, g, mulc(n, un(OP_EXP, n, un(OP_NEG, n, bin(OP_MUL, n, x, x))), M_2_SQRTPI));
}
static Node *vjp_sin(Node *n, int j, Node *g) { (void)j; return bin(OP_MUL, n, g, un(OP_COS, n, n->in[0])); }
static Node *vjp_cos(Node *n, int j, Node *g) { (void)j; return bin(OP_MUL, n, g, un(OP_NEG, n, un(OP_SIN, n, n->in[0]))); }
static Node *vjp_leaky_relu(Node *n, int j, Node *g) { /* x > 0 ? g : g * slope */
    (void)j;
    return where(n, bin(OP_GT, n, n->in[0], cnst(n, 0.0)), g, mulc(n, g, n->fattr[0]));
}
static Node *vjp_elu(Node *n, int j, Node *g) { /* x <= 0 ? g * alpha * e^x : g */
    (void)j;
    Node *x = n->in[0];
    return where(n, bin(OP_LE, n, x, cnst(n, 0.0)), bin(OP_MUL, n, g, mulc(n, un(OP_EXP, n, x), n->fattr[0])), g);
}
static Node *vjp_hardswish(Node *n, int j, Node *g) { /* 0 below -3, x/3 + 1/2 on [-3, 3], 1 above */
    (void)j;
    Node *x = n->in[0];
    Node *mid = bin(OP_MUL, n, g, bin(OP_ADD, n, bin(OP_DIV, n, x, cnst(n, 3.0)), cnst(n, 0.5)));
    return where(n, bin(OP_LT, n, x, cnst(n, -3.0)), cnst(n, 0.0), where(n, bin(OP_LE, n, x, cnst(n, 3.0)), mid, g));
}
static Node *vjp_hardsigmoid(Node *n, int j, Node *g) { /* 1/6 on (-3, 3), else 0 */
    (void)j;
    Node *x = n->in[0];
    Node *in = bin(OP_LOGICAL_AND, n, bin(OP_GT, n, x, cnst(n, -3.0)), bin(OP_LT, n, x, cnst(n, 3.0)));
    return where(n, in, bin(OP_DIV, n, g, cnst(n, 6.0)), cnst(n, 0.0));
}
static Node *vjp_pow(Node *n, int j, Node *g) {
    Node *a = n->in[0], *b = n->in[1], *z = cnst(n, 0.0);
    if (j == 0) { /* b a^(b-1), 0 where b == 0 */
        Node *d = bin(OP_MUL, n, b, bin(OP_POW, n, a, bin(OP_SUB, n, b, cnst(n, 1.0))));
        return unbroadcast(n, where(n, bin(OP_EQ, n, b, z), z, bin(OP_MUL, n, g, d)), &a->shape);
    }
    /* a^b log(a), 0 where a == 0 and b >= 0 */
    Node *mask = bin(OP_LOGICAL_AND, n, bin(OP_EQ, n, a, z), bin(OP_GE, n, b, z));
    return unbroadcast(n, where(n, mask, z, bin(OP_MUL, n, g, bin(OP_MUL, n, n, un(OP_LOG, n, a)))), &b->shape);
}
/* minimum / maximum: the adjoint to the operand chosen, half to each where they are equal (PyTorch) */
static Node *minmax_vjp(Node *n, int j, Node *g, OpKind loses) {
    Node *a = n->in[j], *b = n->in[1 - j];
    Node *r = where(n, bin(OP_EQ, n, a, b), mulc(n, g, 0.5), where(n, bin(loses, n, a, b), cnst(n, 0.0), g));
    return unbroadcast(n, r, &a->shape);
}
static Node *vjp_minimum(Node *n, int j, Node *g) { return minmax_vjp(n, j, g, OP_GT); }
static Node *vjp_maximum(Node *n, int j, Node *g) { return minmax_vjp(n, j, g, OP_LT); }
static Node *vjp_max(Node *n, int j, Node *g) { /* all of it to the first maximum (argmax: a NaN counts as one) */
    (void)j;
    Node *x = n->in[0];
    Node *first = bin(OP_EQ, n, tf_positions(n, &x->shape, n->axis), tf_reduce(OP_ARGMAX, n, x, n->axis));
    return where(n, first, vjp_sum(n, 0, g), cnst(n, 0.0));
}
static Node *vjp_cumsum(Node *n, int j, Node *g) { /* the running sums from the end (any axis, symbolic too) */
    (void)j;
    Node *c = un(OP_CUMSUM, n, g);
    c->axis = n->axis;
    c->reverse = !n->reverse;
    return c;
}
/* concat: operand j's part of g, a slice along the axis. Along a symbolic axis every operand's
 * size is k_i * S for one product of symbols S (the checker's rule), so g's axis of K * S
 * elements, K = sum k_i, is viewed as [K, S] and operand j's part is the fixed rows
 * [k_0 + .. + k_{j-1}, + k_j) of K, viewed back as k_j * S. */
static Node *vjp_concat(Node *n, int j, Node *g) {
    int ax = n->axis;
    int64_t off = 0;
    for (int i = 0; i < j; i++) off += n->in[i]->shape.d[ax].c;
    const Shape *xs = &n->in[j]->shape;
    if (!dim_is_sym(xs->d[ax])) return tf_slice(n, g, ax, off, xs->d[ax].c);
    if (g->shape.rank == MAX_RANK)
        error_at(n->loc, "no gradient for a concat along a symbolic axis of a rank-%d tensor yet (its adjoint splits the "
                 "axis in two, and %d is the most axes a tensor has)", MAX_RANK, MAX_RANK);
    Dim S = xs->d[ax];
    S.c = 1;
    Shape v = {g->shape.rank + 1, {{0}}};
    for (int i = 0, k = 0; i < g->shape.rank; i++) {
        if (i == ax) {
            v.d[k++] = dim_const(n->shape.d[ax].c);
            v.d[k++] = S;
        } else {
            v.d[k++] = g->shape.d[i];
        }
    }
    Node *part = tf_slice(n, reshape(n, g, &v), ax, off, xs->d[ax].c);
    return reshape(n, part, xs);
}
static Node *vjp_gather(Node *n, int j, Node *g) {
    if (j != 0 || n->gather_mode == GATHER_ONE_HOT) return NULL; /* the index; one_hot reads only ids */
    return tf_scatter_add(n, g, n->in[1], n->gather_mode, n->axis, &n->in[0]->shape);
}
static Node *vjp_embedding(Node *n, int j, Node *g) { /* the rows of weight [V, D]: index_select along 0 */
    if (j != 1) return NULL;
    return tf_scatter_add(n, g, n->in[0], GATHER_INDEX_SELECT, 0, &n->in[1]->shape);
}

/* layer_norm over the axes from n->axis on (D elements per row), weight and bias optional:
 * xhat = (x - mean) * rstd, rstd = 1 / sqrt(var + eps) recomputed from x;
 * dx = rstd (gw - mean(gw) - xhat mean(gw xhat)) with gw = g * weight; dweight = sum of g xhat and
 * dbias = sum of g over the rows. The statistics are built once per node (the three operands'
 * rules share them). */
static Node *vjp_layer_norm(Node *n, int j, Node *g) {
    static const Node *cached_n, *cached_g;
    static Node *xhat, *rstd, *g2;
    Node *x = n->in[0];
    int r = x->shape.rank, ax = n->axis;
    Dim D = dim_const(1);
    for (int i = ax; i < r; i++) D = dim_mul(D, x->shape.d[i], NULL);
    Shape s2 = {ax + 1, {{0}}}, sd = {1, {D}};
    for (int i = 0; i < ax; i++) s2.d[i] = x->shape.d[i];
    s2.d[ax] = D;
    if (cached_n != n || cached_g != g) {
        Node *x2 = reshape(n, x, &s2);
        Node *xc = bin(OP_SUB, n, x2, tf_reduce(OP_MEAN, n, x2, ax));
        rstd = un(OP_RSQRT, n, bin(OP_ADD, n, tf_reduce(OP_MEAN, n, bin(OP_MUL, n, xc, xc), ax), cnst(n, n->eps)));
        xhat = bin(OP_MUL, n, xc, rstd);
        g2 = reshape(n, g, &s2);
        cached_n = n;
        cached_g = g;
    }
    if (j == 0) {
        Node *gw = n->nin > 1 ? bin(OP_MUL, n, g2, reshape(n, n->in[1], &sd)) : g2;
        Node *d = bin(OP_SUB, n, bin(OP_SUB, n, gw, tf_reduce(OP_MEAN, n, gw, ax)),
                      bin(OP_MUL, n, xhat, tf_reduce(OP_MEAN, n, bin(OP_MUL, n, gw, xhat), ax)));
        return reshape(n, bin(OP_MUL, n, rstd, d), &x->shape);
    }
    Node *c = unbroadcast(n, j == 1 ? bin(OP_MUL, n, g2, xhat) : g2, &sd);
    return reshape(n, c, &n->in[j]->shape);
}

/* dropout: the adjoint through the same mask (the same seed, step, site and element indices) */
static Node *vjp_dropout(Node *n, int j, Node *g) {
    (void)j;
    Node *d = un(OP_DROPOUT, n, g);
    d->fattr[0] = n->fattr[0];
    d->start = n->start;
    return d;
}

static VjpFn vjp_table[OP__COUNT] = {
#define VJP(id, fn) [OP_##id] = fn,
#include "ops.def"
};

/* ---------------------------------------------------------------- the pass */

static bool trainable(const Graph *g, const Node *p, char **frozen, int nfrozen) {
    (void)g;
    for (int i = 0; i < nfrozen; i++) {
        size_t L = strlen(frozen[i]);
        if (L && frozen[i][L - 1] == '*' ? !strncmp(p->name, frozen[i], L - 1) : !strcmp(p->name, frozen[i]))
            return false;
    }
    return true;
}

/* The optimizer's state of each trained param, as params of their own (resident, zero at load,
 * saved with the optimizer's state, not read from the weights file): torch.optim's names,
 * exp_avg and exp_avg_sq (Adam, AdamW), momentum_buffer (SGD with momentum). */
static void add_optimizer_state(Graph *g) {
    int n = g->nparams;
    int per = g->opt.kind == OPT_SGD ? (g->opt.momentum > 0) : 2;
    static const char *const names[2][2] = {{"momentum_buffer", NULL}, {"exp_avg", "exp_avg_sq"}};
    g->opt_state = xalloc(sizeof(Node *[2]) * (size_t)(3 * n + 1));
    for (int i = 0; i < n; i++) {
        if (!g->grad[i]) continue;
        Node *p = g->params[i];
        for (int k = 0; k < per; k++) {
            Node *s = new_node_for(g, OP_PARAM, p);
            s->name = xprintf("%s.%s", p->name, names[g->opt.kind != OPT_SGD][k]);
            for (int q = 0; q < n; q++) /* a param of the model under that name: the state file could not hold both */
                if (!strcmp(g->params[q]->name, s->name))
                    error_at(g->params[q]->loc, "param '%s' has the name of the optimizer's state of param '%s' "
                             "(torch.optim's name, which the state file uses); rename it", s->name, p->name);
            s->dtype = p->dtype;
            s->shape = p->shape;
            s->state = true;
            s->slot = p->slot;
            if (g->nparams == g->capparams) {
                int cap = g->capparams ? 2 * g->capparams : 16;
                g->params = xrealloc_array(g->params, g->capparams, cap, sizeof(Node *));
                g->capparams = cap;
            }
            s->index = g->nparams;
            g->params[g->nparams++] = s;
            g->opt_state[i][k] = s;
        }
    }
}

/* A trainable param that the loss reads, but only through a float-to-integer or float-to-bool
 * step (argmax, a comparison, a cast to an integer), would never change: a compile error naming
 * the param and that op, as an op without a gradient rule is (PyTorch leaves such a param's .grad
 * None without a word). A path cut on purpose (a target, logsumexp's max) is not one. n0: the
 * forward graph's nodes; need: grad_graph's "depends on a trainable param". */
static void check_cut_params(const Graph *g, int n0, const bool *need) {
    bool *reach = xalloc(sizeof(bool) * (size_t)(n0 + 1)), *desc = xalloc(sizeof(bool) * (size_t)(n0 + 1));
    reach[g->loss->id] = true;
    for (int i = n0 - 1; i >= 0; i--)
        if (reach[i])
            for (int j = 0; j < g->nodes[i]->nin; j++) reach[g->nodes[i]->in[j]->id] = true;
    for (int pi = 0; pi < g->nparams; pi++) {
        const Node *p = g->params[pi];
        if (g->grad[pi] || p->id >= n0 || !need[p->id] || !reach[p->id]) continue;
        memset(desc, 0, sizeof(bool) * (size_t)(n0 + 1));
        desc[p->id] = true;
        for (int i = p->id + 1; i < n0; i++) {
            const Node *n = g->nodes[i];
            if (n->stop_grad) continue;
            for (int j = 0; j < n->nin && !desc[i]; j++) desc[i] = desc[n->in[j]->id];
            if (!desc[i] || !reach[i] || dtype_is_float(n->dtype)) continue;
            for (int j = 0; j < n->nin; j++)
                if (desc[n->in[j]->id] && dtype_is_float(n->in[j]->dtype))
                    error_at(n->loc, "the loss '%s' reads param '%s' only through '%s' (its %s result has no gradient): "
                             "'%s' would never train; freeze it, or reach it through ops with gradients",
                             g->loss->name ? g->loss->name : "loss", p->name, op_name(n->op), dtype_name(n->dtype),
                             p->name);
        }
    }
}

void grad_graph(Graph *g, char **frozen, int nfrozen) {
    G = g;
    train_batch_norms(g);
    int n0 = g->nnodes;
    bool *need = xalloc(sizeof(bool) * (size_t)(n0 + 1)); /* depends on a trainable param */
    for (int i = 0; i < n0; i++) {
        Node *n = g->nodes[i];
        if (n->op == OP_PARAM) need[i] = dtype_is_float(n->dtype) && trainable(g, n, frozen, nfrozen);
        for (int j = 0; j < n->nin; j++) need[i] = need[i] || need[n->in[j]->id];
        if (n->stop_grad) need[i] = false;
    }
    Node **adj = xalloc(sizeof(Node *) * (size_t)(n0 + 1));
    Shape scalar = {0};
    adj[g->loss->id] = expand(g->loss, cnst(g->loss, 1.0), &scalar);
    for (int i = n0 - 1; i >= 0; i--) {
        Node *n = g->nodes[i];
        if (!adj[i] || !need[i] || n->op == OP_PARAM) continue;
        VjpFn f = vjp_table[n->op];
        for (int j = 0; j < n->nin; j++) {
            Node *x = n->in[j];
            if (!need[x->id]) continue;
            if (!f)
                error_at(n->loc, "'%s' has no gradient rule yet, and the loss reaches a trainable param through it "
                         "(freeze the params before it, or write the computation with ops that have one)",
                         op_name(n->op));
            Node *c = f(n, j, adj[i]);
            if (!c) continue;
            if (!dtype_is_float(x->dtype)) continue;
            adj[x->id] = adj[x->id] ? bin(OP_ADD, n, adj[x->id], c) : c;
        }
    }
    /* sized for the state params add_optimizer_state appends (at most 2 per param): none has a gradient */
    g->grad = xalloc(sizeof(Node *) * (size_t)(3 * g->nparams + 1));
    for (int i = 0; i < g->nparams; i++) {
        Node *p = g->params[i], *d = adj[p->id];
        if (!d || !need[p->id]) continue;
        /* the optimizer reads a materialized gradient of the param's shape */
        d = reshape(p, d, &p->shape);
        if (d->op == OP_CONST || d->op == OP_PARAM || d->op == OP_INPUT) {
            Node *e = mk(OP_EXPAND, p, d->dtype, &p->shape);
            e->in[0] = d;
            e->nin = 1;
            d = e;
        }
        g->grad[i] = d;
    }
    int trained = 0;
    for (int i = 0; i < g->nparams; i++) trained += g->grad[i] != NULL;
    if (!trained)
        error_at(g->loss->loc, "the loss '%s' depends on no trainable param through ops with gradients (each path ends "
                 "at a frozen param, or at an op without one, such as argmax or a comparison): nothing would train",
                 g->loss->name ? g->loss->name : "loss");
    check_cut_params(g, n0, need);
    add_optimizer_state(g);
    add_grad_sumsq(g);
}

/* g->grad_sumsq: the sum of the squares of every gradient, sum_i sum(g_i * g_i), a [1] f32
 * node that the optimizer step reads (with the loss) for the global L2 norm of
 * torch.nn.utils.clip_grad_norm_ and the log's grad_norm. Ordinary nodes: each square fuses into
 * its sum, on the gradient's device; marked grad_norm, since a data-parallel step skips them
 * (the norm it needs is that of the reduced gradients). */
static void add_grad_sumsq(Graph *g) {
    int first = g->nnodes;
    Node *tot = NULL;
    for (int i = 0; i < g->nparams; i++) {
        Node *d = g->grad[i];
        if (!d) continue;
        const Node *p = g->params[i];
        Shape flat = {1, {shape_numel(&p->shape)}};
        Node *r = reshape(p, d, &flat);
        Node *s = sum_axis(p, bin(OP_MUL, p, r, r), 0);
        tot = tot ? bin(OP_ADD, p, tot, s) : s;
    }
    g->grad_sumsq = tot;
    for (int i = first; i < g->nnodes; i++) g->nodes[i]->grad_norm = true;
}

void dump_grad(FILE *out, const Graph *g, int first) {
    char buf[256];
    fprintf(out, "grad %s: d %s / d params, nodes %%%d.. are the backward graph\n", g->name, g->loss->name ? g->loss->name : "loss",
            first);
    for (int i = 0; i < g->nparams; i++) {
        const Node *d = g->grad[i];
        const char *what = d ? xprintf("%%%d", d->id) : "(frozen or not read by the loss)";
        for (int k = 0; k < g->nupd; k++) /* a buffer: batch_norm's running statistics */
            if (g->upd_param[k] == g->params[i]) what = xprintf("(a buffer, set to %%%d after the step)", g->upd_value[k]->id);
        fprintf(out, "  d/d %s %s = %s\n", g->params[i]->name, shape_str(&g->params[i]->shape, g->sym_names, buf, sizeof buf),
                what);
    }
}
