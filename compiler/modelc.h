/*
 * modelc.h — the one internal header of the compiler, sectioned by file.
 *
 * Pipeline (main.c runs it as plain calls):
 *   parse (grammar/model.y)  -> Program (AST)
 *   build_graph (check.c)    -> Graph: resolved names, dtypes and shapes checked
 *   fuse_graph (fuse.c)      -> Kernel list: elementwise chains fused, GEMM epilogues
 *   schedule + plan_memory (plan.c) -> arena offsets, checked
 *   emit (emit_c.c)          -> model.c + model.h (+ main)
 */
#ifndef MODELC_H
#define MODELC_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdnoreturn.h>

#define MAX_RANK 8
#define MAX_IN 16 /* operands of one node (concat takes up to 16) */

/* ================================================================ arena.c */

/* The compiler allocates from one arena per compilation, freed at exit (arena_free_all).
 * xalloc returns zeroed memory; it never returns NULL (out of memory is fatal). */
void *xalloc(size_t bytes);
void *xrealloc_array(void *old, size_t old_n, size_t new_n, size_t elem); /* grow a vector */
/* Room for element n of a vector with capacity *cap: the same vector while n < *cap, else a
 * copy with the capacity doubled (*cap updated). Appending with it is linear overall. */
void *xgrow_array(void *old, int n, int *cap, size_t elem);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
char *xprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void arena_free_all(void);

/* ================================================================ diag.c */

/* A source location: 1-based line and column (column counts bytes). line 0 = no location. */
typedef struct Loc {
    int line, col;
} Loc;

/* Remember the file being compiled so diagnostics can quote its lines. */
void diag_init(const char *path, const char *src);

/* "file:line:col: error: MSG", then the source line and a caret under col; exit(1). */
noreturn void error_at(Loc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Same with "warning:"; compilation continues. */
void warning_at(Loc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Same with "note:"; used right after an error_at-like report (see error_begin). */
void note_at(Loc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Print an error without exiting, so notes can follow; then call diag_exit(). */
void error_begin(Loc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
noreturn void diag_exit(void);
/* While checking a block instantiation: every error also gets "note: MSG" at loc. */
void diag_push_context(Loc loc, const char *msg);
void diag_pop_context(void);
/* "modelc: error: MSG" with no location (bad command line, unreadable file); exit(1). */
noreturn void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* An internal bug: "internal error at FILE:LINE: MSG"; exit(2). Never a user's mistake. */
noreturn void internal_error(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define ICE(...) internal_error(__FILE__, __LINE__, __VA_ARGS__)
#define ASSERT(c) ((c) ? (void)0 : ICE("assertion failed: %s", #c))
extern int diag_warnings; /* count of warnings printed */
extern bool diag_quiet;   /* warnings not printed (a second compilation of one file) */

/* For a harness that compiles many inputs in one process (tests/fuzz): diagnostics go to `f`
 * (NULL: stderr), and where the compiler would exit (status 1 for a user's error or fatal(),
 * 2 for an internal error) it calls `hook(status)` instead, which must not return (it
 * longjmps back to the harness, which then calls arena_free_all and parse_cleanup). NULL:
 * exit, as modelc does. */
void diag_set_stream(FILE *f);
void diag_set_exit_hook(void (*hook)(int status));

/* ================================================================ ast.c, grammar/ */

/* f16 (IEEE binary16) and bf16 (bfloat16, the top half of an f32) are storage dtypes: 2 bytes
 * each, held as uint16_t bits; kernels compute them in f32 and round each node's value to its
 * dtype (round to nearest even), see kprint.c. */
typedef enum DType { DT_F32 = 0, DT_I32 = 1, DT_I64 = 2, DT_BOOL = 3, DT_F16 = 4, DT_BF16 = 5 } DType;
const char *dtype_name(DType dt); /* "f32", "i32", "i64", "bool", "f16", "bf16" */

typedef enum AstKind {
    AST_NUM,   /* number literal: num, is_int, text */
    AST_NAME,  /* identifier (possibly dotted): name */
    AST_CALL,  /* name(args): name, args, nargs */
    AST_BINOP, /* lhs op rhs: op is one of + - * / @ ^ (**) % f (//) < > l (<=) g (>=) e (==) n (!=)
                  & (and) | (or); binop_text gives the operator as written */
    AST_NEG,   /* -lhs */
    AST_LIST,  /* [items]: items, nitems (each AST_NUM, AST_NEG of AST_NUM, or AST_NAME) */
    AST_BOOL,  /* true / false: bval */
} AstKind;

typedef struct Ast Ast;

/* One call argument; key == NULL for a positional argument. loc is the argument's start
 * (the key for keyword arguments). */
typedef struct AstArg {
    char *key;
    Ast *val;
    Loc loc;
} AstArg;

struct Ast {
    AstKind kind;
    Loc loc;        /* start of the expression; for AST_BINOP, the operator */
    double num;     /* AST_NUM */
    bool is_int;    /* AST_NUM written without '.', 'e' */
    bool int_ok;    /* is_int and the value is at most MAX_INT_LITERAL: ival holds it exactly */
    int64_t ival;   /* AST_NUM with int_ok: the literal's value, parsed from text (not from num) */
    char *text;     /* AST_NUM: the literal as written */
    char *name;     /* AST_NAME, AST_CALL */
    char op;        /* AST_BINOP */
    Ast *lhs, *rhs; /* AST_BINOP; AST_NEG uses lhs */
    AstArg *args;   /* AST_CALL */
    int nargs;
    Ast **items; /* AST_LIST */
    int nitems;
    bool bval; /* AST_BOOL */
    char *scope;    /* AST_CALL of a block: 'as SCOPE' (NULL if none) */
    Loc scope_loc;
    int depth;      /* nesting depth of the expression (1 for a leaf) */
};

/* Integer literals that stand for integers (attributes, list items, block arguments) are at
 * most this in magnitude: exact in a double, and far from overflow in any size arithmetic. */
#define MAX_INT_LITERAL (1LL << 53)

/* Expressions nested deeper than this are an error (every later phase recurses over them). */
#define MAX_EXPR_DEPTH 1000

/* One dimension in a type: an integer (value) or a symbolic name (is_sym, name). */
typedef struct AstDim {
    bool is_sym;
    long long value; /* as written; may be 0 or huge: the checker rejects bad values */
    char *name;
    Loc loc;
    struct Ast *expr; /* a computed dimension (2 * C), or NULL */
} AstDim;

typedef struct AstType {
    DType dtype;
    AstDim *dims; /* rank entries; rank may exceed MAX_RANK: the checker rejects it */
    int rank;
    Loc loc;
} AstType;

/* ST_TARGET, ST_LOSS, ST_OPTIMIZER, ST_FREEZE: training (docs/language.md, Training): a target
 * input the loss reads, the loss, the optimizer (expr: its call) and frozen params (names). */
typedef enum StmtKind { ST_INPUT, ST_PARAM, ST_OUTPUT, ST_ASSIGN, ST_ON, ST_TARGET, ST_LOSS, ST_OPTIMIZER, ST_FREEZE } StmtKind;

/* input/param: name, type. output: name, type and/or expr (at least one).
 * assign: name, expr. on: name is the device ("cpu", "cuda:1"), body the statements placed there. */
typedef struct Stmt Stmt;
struct Stmt {
    StmtKind kind;
    Loc loc;      /* the statement's first token */
    char *name;
    Loc name_loc;
    AstType *type; /* NULL if absent */
    Ast *expr;     /* NULL if absent */
    Stmt **body;   /* ST_ON */
    int nbody;
    Ast **names;   /* ST_ASSIGN of several results (a, b = chunk(x, 2)): AST_NAMEs, nnames >= 2 */
    int nnames;
};

/* One parameter of a block, with its default value (NULL if none). */
typedef struct BlockParam {
    char *name;
    Ast *def;
    Loc loc;
} BlockParam;

/* block NAME(params) { stmts return expr } */
typedef struct Block {
    char *name;
    Loc loc;
    BlockParam *params;
    int nparams;
    Stmt **stmts;
    int nstmts;
    Ast *ret;      /* rets[0] */
    Ast **rets;    /* return a, b: the block gives nrets tensors */
    int nrets;
    Loc ret_loc;
} Block;

typedef struct Program {
    char *name; /* the model's name */
    Loc loc;
    Stmt **stmts;
    int nstmts;
    Block **blocks;
    int nblocks;
} Program;

/* Parse a whole file (grammar/model.y). Syntax errors go through error_at with what was
 * expected, e.g. "expected ')' or ',' after argument, got '='". Never returns NULL. */
Program *parse_program(const char *path, const char *src);
/* Frees the lexer a parse left when an error ended it (only a harness that catches the exit,
 * diag_set_exit_hook, needs it; modelc exits instead). */
void parse_cleanup(void);

/* AST constructors used by the grammar's actions. */
Ast *new_num(Loc loc, const char *text);
Ast *new_name(Loc loc, const char *name);
Ast *new_call(Loc loc, const char *name, AstArg *args, int nargs);
Ast *new_binop(Loc loc, char op, Ast *lhs, Ast *rhs);
Ast *new_neg(Loc loc, Ast *x);
Ast *new_not(Loc loc, Ast *x);
const char *binop_text(char op); /* AST_BINOP's op as written: "+", "<=", "and", "**", ... */
Ast *new_list(Loc loc, Ast **items, int nitems);
Ast *new_bool(Loc loc, bool v);

/* --dump=ast: a stable, indented text form of the program (documented in docs/ir.md). */
void dump_ast(FILE *out, const Program *p);
/* Print an expression in source form, fully parenthesized where needed. */
void print_expr(FILE *out, const Ast *e);


/* ================================================================ ir.c */

/* The most symbolic dimensions a model may declare (batch, seq, ...). */
#define MAX_SYMS 4

/* A dimension: a monomial c * s0^e[0] * s1^e[1] * ..., where s_k is the run-time size of the
 * model's k-th symbolic dimension (g->sym_names[k], bound in 1..g->sym_max[k]). Products of
 * dimensions (element counts, strides, bytes, the [seq, seq] of attention) are again monomials,
 * so every size the compiler derives has this form; a sum of symbolic sizes is not one (a
 * concat along a symbolic axis is an error). Compare with dim_eq, never with ==. */
typedef struct Dim {
    int64_t c;
    uint8_t e[MAX_SYMS];
} Dim;

typedef struct Shape {
    int rank;
    Dim d[MAX_RANK];
} Shape;

/* What kind of operation an op is; see ops.def, the op table, for each category. */
typedef enum OpCategory {
    CAT_LEAF, CAT_UNARY, CAT_BINARY, CAT_SELECT, CAT_MOVE, CAT_GEMM, CAT_REDUCE, CAT_LIBRARY, CAT_VIEW, CAT_REWRITE,
    CAT__COUNT
} OpCategory;

/* How an op treats batch items, for graph_batch_separable (ops.def explains each). */
typedef enum BatchRule { BATCH_KEEPS, BATCH_SAME_RANK, BATCH_NOT_AXIS0, BATCH_PERMUTE, BATCH_CONCAT } BatchRule;

/* The operations of the graph IR, one per OP row of ops.def. */
typedef enum OpKind {
#define OP(id, ...) OP_##id,
#include "ops.def"
    OP__COUNT
} OpKind;

/* An op's row of the table. */
typedef struct OpInfo {
    const char *name;
    OpCategory cat;
    bool inplace;         /* may write over a dying operand in a fused kernel */
    BatchRule batch;
    const char *c_expr;   /* elementwise: the C (and CUDA) scalar expression over %0 %1 %2 */
    const char *kernel;   /* library and GEMM ops: mrt_<kernel> / mrt_cuda_<kernel> */
} OpInfo;

/* op_info[op]: the table, built from ops.def (ir.c). */
extern const OpInfo op_info[OP__COUNT];

typedef struct Node Node;
struct Node {
    int id;         /* position in Graph.nodes, a topological order */
    OpKind op;
    Loc loc;        /* where the user wrote it */
    char *name;     /* the user's name for the value (input/param/assigned name), or NULL */
    DType dtype;
    Shape shape;
    Node *in[MAX_IN];
    int nin;
    /* attributes */
    int axis;             /* reductions: normalized to 0..rank-1 of the input */
    bool keepdim;         /* sum/mean/max/argmax */
    bool trans_b;         /* matmul: b is stored transposed (linear's weight) */
    int perm[MAX_RANK];   /* permute: out dim i is input dim perm[i] */
    double value;         /* const: its value (rounded to float when the const is f32) */
    bool literal;         /* const: written as a number (or a block's integer), so it takes the
                           * dtype of the tensors it meets (check.c: unify_dtypes) */
    double exact;         /* const from a literal: the value as written, before rounding */
    bool literal_int;     /* const: written as an integer (no '.' or exponent), exact in `exact`
                           * unless literal_big (beyond 2^53, which a double does not hold) */
    bool literal_big;
    double eps;           /* batch_norm, layer_norm */
    double fattr[2];      /* an elementwise op's float attributes (clamp: min, max; elu: alpha; ...) */
    int index;            /* input/param: position in Graph.inputs / Graph.params */
    /* conv2d and pooling: per-axis [h, w]; pad is [top, left, bottom, right] */
    int kernel[2], stride[2], dilation[2], pad[4], groups;
    int out_pad[2];       /* conv_transpose2d: output_padding [h, w] (pad holds [ph, pw, ph, pw]) */
    bool ceil_mode, count_include_pad;
    /* slice: out index i along axis reads start + i*step; dropout (training): start is its site,
     * which keeps the masks of two dropouts apart (the Philox counter's last word) */
    int64_t start, step;
    bool reverse;         /* cumsum: the running sums from the end (a cumsum's adjoint, PyTorch's reversed_cumsum) */
    /* softmax from attention: keys j > i masked (causal), and all-masked rows give zeros; also
     * the fused attention's (fuse.c, OP_ATTENTION) */
    bool causal, zero_masked_rows;
    /* attention (fuse.c): how each tensor is read. Operand j (0 q, 1 k, 2 v) is read as its logical
     * [..., L, E] / [..., S, E] / [..., S, Ev] tensor whose dim i is dim attn_perm[j][i] of in[j]
     * (a permute or transpose folded into the read); the result's logical [..., L, Ev] dim i is
     * dim attn_perm[3][i] of the node's own shape. fattr[0] is the scale. */
    signed char attn_perm[4][MAX_RANK];
    /* interpolate: bilinear (else nearest), align_corners, and the scale_factor per axis [h, w]
     * that PyTorch's kernels read (0: none, the scale is in/out) */
    bool bilinear, align_corners;
    double scale[2];
    /* gather: how in[1] (the index) is read, GATHER_*; axis is the gathered axis */
    int gather_mode;
    const char *error_fn; /* gather: the function its run errors name, when not the op's own (the one-hot
                           * of cross_entropy's target names cross_entropy) */
    /* table (a tensor constant written in the source): its values in C order, ntable of them */
    const double *table;
    int64_t ntable;
    bool init;            /* depends only on params and constants: computed once at load time */
    bool stop_grad;       /* training: no gradient flows through it (logsumexp's max, labels) */
    bool state;           /* param: optimizer state (exp_avg, ...), zero at load, not in the weights file */
    bool grad_norm;       /* training: a node of the gradients' squared norm (add_grad_sumsq), which a
                           * data-parallel step does not read (the runtime takes the norm of the
                           * reduced gradients): its kernels are skipped there (plan_grad_ready) */
    int slot;             /* device slot (Graph.slots); -1: follows its consumers (params, constants) */
    /* filled by analysis */
    int nuses;            /* edges from live consumers (+1 per graph output naming it) */
    int is_output;        /* number of graph outputs naming this node */
    bool dead;
};

typedef struct GraphOutput {
    char *name;
    Node *node;
    Loc loc;
} GraphOutput;

/* A device slot: where part of the graph runs. Slot 0 is the model's device, chosen at run
 * time (--device, like model.to(device)); each other slot is pinned by an 'on DEVICE { }'
 * region to exactly that device. */
typedef struct DeviceSlot {
    char *name;   /* "default", "cpu:1", "cuda:0", ... */
    bool cuda;    /* pinned to a CUDA device */
    int index;    /* device ordinal */
    Loc loc;      /* the first 'on' naming it */
} DeviceSlot;

typedef struct Graph {
    char *name;
    const char *source; /* the .model file's name, for run-time messages ("split.model:6") */
    DeviceSlot *slots;
    int nslots;
    int cur_slot;      /* while checking: the slot new nodes go to; SLOT_NONE afterwards */
    Node **nodes;
    int nnodes, capnodes;
    Node **inputs;
    int ninputs;
    Node **params;
    int nparams, capparams;
    GraphOutput *outputs;
    int noutputs;
    /* The symbolic dimensions, in the order the source first uses them. The first is the batch:
     * --max-batch bounds it, a run may go past that bound in chunks (graph_batch_separable).
     * has_batch, batch_name and max_batch are nsyms > 0, sym_names[0] and sym_max[0]. */
    int nsyms;
    char *sym_names[MAX_SYMS];
    int64_t sym_max[MAX_SYMS];  /* each one's upper bound (--max-batch, --max-dim NAME=N) */
    Loc sym_loc[MAX_SYMS];      /* where each was first used */
    bool has_batch;
    char *batch_name;
    int max_batch;
    /* Conditions on the symbols' run-time sizes that the run function checks before it starts
     * (a slice up to 5 of a symbolic axis needs that axis >= 5): dim >= min, else the run fails
     * naming the op and its source location. */
    struct ShapeCheck {
        Dim dim;
        int64_t min;
        Loc loc;
        const char *op;
    } *checks;
    int nchecks, capchecks;
    /* Training (--train): the loss (a scalar f32 node, also output 0), the gradient of the loss
     * with respect to each trainable param (grad[i] for params[i]; NULL: frozen or unused), and
     * the optimizer that updates the params after the backward pass. */
    bool train;
    bool eval;      /* DimBounds.eval: the loss in inference mode is the one output */
    bool bf16;      /* --precision bf16: the CPU's oneDNN primitives compute in bf16 (precision.c) */
    bool with_loss; /* train || eval: targets are inputs and the loss is built */
    int ndropout;      /* training: the dropout nodes lowered so far (each one's site) */
    Node *loss;
    Node **grad;
    struct Optimizer {
        enum { OPT_SGD, OPT_ADAM, OPT_ADAMW } kind;
        double lr, momentum, dampening, weight_decay, beta1, beta2, eps;
        bool nesterov;
        /* every optimizer: clip the gradients' global L2 norm to clip_grad_norm (0: never), and
         * the learning-rate schedule: linear warmup over warmup_steps, then cosine decay to
         * min_lr over decay_steps (0: constant) -- defaults the run can change (mrt_train_cfg) */
        double clip_grad_norm, min_lr;
        long long warmup_steps, decay_steps;
        Loc loc;
    } opt;
    bool has_opt;
    Node *(*opt_state)[2]; /* per param with a gradient: its optimizer state params (NULL: none) */
    Node *grad_sumsq;      /* the f32 scalar sum of the squares of every gradient (for the global
                            * norm that clipping and the log read), kept like the loss */
    char **frozen; /* the 'freeze' names (exact, or a prefix ending in '*') */
    int nfrozen;
    /* Buffers a training step writes back after the optimizer step (batch_norm's running_mean,
     * running_var and num_batches_tracked): param upd_param[i] takes the value of node
     * upd_value[i], of its dtype and shape (grad.c). */
    Node **upd_param, **upd_value;
    int nupd, capupd;
    /* Training: whether data-parallel training (each replica the loss of its shard of the batch,
     * the gradients combined) gives the one-device step (graph_dp_trainable, on the forward
     * graph): dp_why NULL when it does, else why not (an op and its line:col); dp_loss_sum 1 when
     * the loss sums over the batch (the shards' gradients add up), 0 when it averages. */
    char *dp_why;
    int dp_loss_sum;
} Graph;

const char *op_name(OpKind op);
bool op_is_elementwise(OpKind op); /* fused: CAT_UNARY, CAT_BINARY, CAT_SELECT, CAT_MOVE */
bool op_is_unary(OpKind op);
bool op_is_binary(OpKind op);
bool op_is_reduction(OpKind op);   /* CAT_REDUCE: a library kernel along one axis */
bool op_is_library(OpKind op);     /* a kernel of its own from the runtime: CAT_REDUCE, CAT_LIBRARY */
/* "elementwise", "GEMM", "reduction", ... */
const char *op_category_name(OpCategory c);
/* Check the OP rows of ops.def against each other (an internal error names the row at fault):
 * names unique, c_expr exactly for elementwise ops and reading only their operands, a kernel
 * exactly for GEMM, reduction and library ops. Run by every compilation and --list-ops. */
void validate_op_table(void);
/* --list-ops: the language's functions and the IR's ops, from ops.def. */
void list_ops(FILE *out);
/* While checking (build_graph): a node on the slot of the enclosing 'on' region. Afterwards
 * g->cur_slot is SLOT_NONE and new_node is an internal error: a pass that creates a node says
 * which node it stands for (new_node_for), and the new node takes that node's device slot and
 * source location, so no rewrite can move work off the device the user chose. */
#define SLOT_NONE (-2)
Node *new_node(Graph *g, OpKind op, Loc loc);
Node *new_node_for(Graph *g, OpKind op, const Node *orig);
/* Follow reshape views down to the node that owns the bytes. */
Node *view_base(const Node *n);
Dim dim_mul(Dim a, Dim b, bool *ok);        /* ok = false on overflow (of c, or an exponent above 200) */
bool dim_eq(Dim a, Dim b);
Dim shape_numel(const Shape *s);
int shape_nsym(const Shape *s);             /* how many dimensions are symbolic */
bool dtype_is_integer(DType dt); /* i32 or i64 */
bool dtype_is_half(DType dt);    /* f16 or bf16 */
bool dtype_is_float(DType dt);   /* f32, f16 or bf16 */
size_t dtype_size(DType dt);
/* The constant dimension c. */
Dim dim_const(int64_t c);
/* NumPy broadcasting of two shapes already known compatible (passes that build nodes). */
Shape shape_broadcast(const Shape *a, const Shape *b);
/* The k-th symbolic dimension itself (c = 1, exponent 1). */
Dim dim_symbol(int k);
/* True when d depends on some symbolic dimension. */
bool dim_is_sym(Dim d);
/* True when d is the constant 1 (a broadcastable dimension). */
bool dim_is_one(Dim d);
/* The symbolic dimension d is exactly (c = 1, one symbol to the first power), or -1. */
int dim_symbol_of(Dim d);
/* a / b when it is a monomial with an integer coefficient (exponents do not go negative, b.c
 * divides a.c); *ok = false otherwise (the result is then meaningless). */
Dim dim_div(Dim a, Dim b, bool *ok);
/* Evaluate at the symbols' sizes vals[0..MAX_SYMS) (NULL: all 1). */
int64_t dim_at(Dim d, const int64_t *vals);
/* Evaluate at the graph's bounds (g->sym_max): the size the memory plan reserves. */
int64_t dim_max(const struct Graph *g, Dim d);
/* "[batch,seq,64]" style, written into buf (>= 256 bytes); names are the symbols' names
 * (g->sym_names; NULL entries print as s0, s1, ...). */
char *shape_str(const Shape *s, char *const *names, char *buf, size_t n);
char *dim_str(Dim d, char *const *names, char *buf, size_t n);
/* Count uses, mark dead nodes; graph outputs count as uses. */
void analyze_uses(Graph *g);
/* --dump=graph */
void dump_graph(FILE *out, const Graph *g);
/* True when a batch can run in chunks with the same result: every value that depends on a
 * batched input has the batch as its leading axis, and no op mixes batch items. */
bool graph_batch_separable(const Graph *g);
/* A training build's forward graph (before grad_graph): does splitting each batch into shards,
 * each replica computing the loss of its shard, and combining the shards' gradients (a mean
 * weighted by shard size, or a sum) give the one-device step? Batch items must stay apart as
 * graph_batch_separable says, except in what data parallelism does as PyTorch's DDP does:
 * batch_norm's statistics (per shard), dropout, and the loss's reduction over the batch (a sum
 * or mean over axis 0, then only linear scalar arithmetic: +, -, * and / by batch-independent
 * values, and sum / count of the same kind, cross_entropy's mean over the labels not ignored).
 * Sets g->dp_why (NULL: it does; else the op and its line:col that mixes batch items) and
 * g->dp_loss_sum. */
void graph_dp_trainable(Graph *g);

/* OP_GATHER's index modes (runtime/mrt_kernels.h, mrt_gather_f32): gather (index shaped like the
 * output), index_select (a 1-D index along the axis), one_hot (no x; ids, the output one longer). */
enum { GATHER_ELEMENTS = 0, GATHER_INDEX_SELECT = 1, GATHER_ONE_HOT = 2 };

/* ================================================================ check.c */

/* Resolve names, check dtypes, shapes and attributes, and lower the AST to a Graph.
 * Reports the first error through error_at and exits 1. Warns for unused inputs/params. */
/* Bounds of the symbolic dimensions from the command line: --max-batch bounds the first, and
 * --max-dim NAME=N each named one (a name the model does not use is an error, as is a symbol
 * other than the first without a bound). */
typedef struct DimBounds {
    int max_batch;
    int n;
    char *names[MAX_SYMS * 2];
    int64_t max[MAX_SYMS * 2];
    bool train; /* --train: build the training step (targets, loss, optimizer), not inference */
    bool eval;  /* the evaluation twin of a training build: inference, targets as inputs, the loss
                 * its one output (PROG train --eval) */
} DimBounds;
Graph *build_graph(const Program *p, const DimBounds *bounds);

/* ================================================================ grad.c */

/* Append the backward graph of g->loss to g: g->grad[i] = d loss / d params[i] (NULL for params
 * named by frozen (exact names, or a prefix ending in '*') or not read by the loss). An op
 * without a VJP rule on the way is a compile error at its source line. */
void grad_graph(Graph *g, char **frozen, int nfrozen);
/* --dump=grad: which node holds each param's gradient (nodes from `first` on are the backward
 * graph; --dump=graph after it shows them). */
void dump_grad(FILE *out, const Graph *g, int first);

/* ================================================================ fold.c */

typedef struct FoldOptions {
    bool fold_bn;   /* fold batch_norm into a preceding conv2d / linear */
    bool hoist;     /* compute param-only subgraphs once at load time */
    bool fold_transpose; /* matmul(a, transpose(b)) uses the GEMM's transpose flag */
    bool fold_silu; /* mul(x, sigmoid(x)) becomes silu(x) (inference only) */
} FoldOptions;

/* Graph rewrites before fusion: batch_norm folding (or lowering to elementwise ops).
 * Renumbers nodes in topological order. (Hoisting, hoist_graph, runs after placement.) */
void fold_graph(Graph *g, FoldOptions opt);
/* Re-sort g->nodes topologically (DFS from the outputs; inputs and params first) and
 * renumber ids. */
void toposort_graph(Graph *g);
/* Replace every use of `from` (operands and outputs) by `to`. */
void replace_uses(Graph *g, Node *from, Node *to);
/* Hoisting: mark param-only nodes init, computed once at load time (runs after placement). */
void hoist_graph(Graph *g);

/* ================================================================ place.c */

/* Give params the slot of their first consumer, and insert an OP_TRANSFER wherever a value
 * crosses from one device slot to another (one per value and destination). */
void place_graph(Graph *g);
/* --dump=placement: every node's device slot and every transfer. */
void dump_placement(FILE *out, const Graph *g);

/* ================================================================ fuse.c */

/* K_GEMM: a matmul or conv2d "anchor" with an optional elementwise epilogue.
 * K_LIBRARY: one node computed by a runtime kernel (reductions, pooling, norms, embedding,
 * concat, transfers: op_is_library). */
typedef enum KernelKind { K_ELEMENTWISE, K_GEMM, K_LIBRARY } KernelKind;

/* One operand read by an elementwise expression: a materialized node, read through an index
 * map from the kernel's iteration space. map[d] = iteration dim that leaf dim d follows, or -1
 * when leaf dim d is broadcast (size 1). */
typedef struct LeafRef {
    Node *node;
    int map[MAX_RANK];
    int64_t start[MAX_RANK]; /* leaf index along dim d = start[d] + step[d] * i[map[d]] */
    int64_t step[MAX_RANK];  /* (for map[d] == -1 it is start[d]) */
} LeafRef;

/* An expression tree node of a fused elementwise kernel: a leaf (a materialized operand), an
 * inlined constant, or an elementwise op over its operands. */
typedef enum ExprKind { EX_LEAF, EX_CONST, EX_OP } ExprKind;
typedef struct Expr Expr;
struct Expr {
    ExprKind kind;
    OpKind op;       /* EX_OP: an elementwise op */
    int leaf;        /* EX_LEAF: index into Kernel.leaves */
    double value;    /* EX_CONST */
    Node *node;      /* the IR node this expression computes (NULL for leaves/consts) */
    DType dt;        /* the dtype it computes in: its node's, leaf's or constant's */
    Expr *a, *b, *c; /* operands (c: where's second choice) */
};

typedef struct Kernel {
    int id;
    KernelKind kind;
    Node *root;       /* the value this kernel writes */
    Node *gemm;       /* K_GEMM: the matmul or conv2d node; its result is the root when expr == NULL */
    Node *lib;        /* K_LIBRARY: the library node (== root) */
    size_t scratch_bytes; /* temporary bytes the kernel needs (conv2d's im2col buffer) */
    size_t scratch_bytes_cuda; /* the CUDA plan's, where it needs more (a grouped conv2d's im2col
                                * of all groups at once); 0: scratch_bytes */
    Node **members;   /* every node computed by this kernel, topological order */
    int nmembers, capmembers;
    /* elementwise part (K_ELEMENTWISE, and K_GEMM's epilogue when expr != NULL) */
    Expr *expr;
    LeafRef *leaves;
    int nleaves;
    int gemm_leaf;    /* K_GEMM with epilogue: the leaf index standing for the GEMM's result */
    /* the CPU's blocked layout (layout.c): blk >= 0 is this conv2d's or max pool's index among
     * the model's oneDNN ops (rt_blocked.c), -1 none; blk_ew: an elementwise kernel over blocked
     * values (unchanged code: every operand has the root's shape) */
    int blk;
    bool blk_ew;
    bool blk_src, blk_dst; /* its source / its result in the blocked layout (else NCHW) */
    int blk_res;           /* conv: the epilogue's leaf that the sum post-op adds, -1 none */
    int blk_bias[4], blk_nbias; /* conv: the epilogue's per-channel leaves, summed into the bias */
    int blk_act;           /* conv: 0 none, 1 relu, 2 clamp to [blk_lo, blk_hi], 3 silu, 4 hardswish */
    bool blk_wino;         /* conv: 3x3, stride 1, dilation 1: oneDNN's Winograd algorithm where it has one */
    double blk_lo, blk_hi;
    bool blk_src_bf16, blk_dst_bf16; /* --precision bf16: its source / result is stored as bf16 (precision.c) */
    /* conv: the next kernel, a blocked conv that alone reads this one's blocked result, where the
     * runtime may skip the relu/clamp passes of the two (layout.c, pair_chain), else NULL;
     * blk_pair_dw: this is a 1x1 conv and that a 3x3 depthwise one (stride 1 or 2, padding 1),
     * which the runtime may run as one oneDNN primitive (pair_dw). On the CPU only
     * (mrt_blk_pair); plan_memory drops a pair that its kernel order no longer keeps adjacent. */
    struct Kernel *blk_pair;
    bool blk_pair_dw;
    /* blocked values in nhwc instead of nChw16c (layout.c, layout_nhwc): blk_nhwc, the op's
     * primitive computes in nhwc; blk_src_nhwc / blk_dst_nhwc, its blocked source / result is
     * stored nhwc (a conv reorders a source stored in the other blocked layout first) */
    bool blk_nhwc, blk_src_nhwc, blk_dst_nhwc;
} Kernel;

/* Fusion options; each pass can be switched off to bisect a wrong result. */
typedef struct FuseOptions {
    bool elementwise;  /* fuse elementwise chains into one kernel */
    bool epilogue;     /* fold elementwise consumers of a GEMM into its epilogue */
    bool blocked;      /* the CPU's blocked layout for convolutions (layout.c; off without oneDNN) */
    bool winograd;     /* blocked 3x3 stride-1 convs try oneDNN's Winograd algorithm (--no-winograd) */
    bool attention;    /* one attention kernel for matmul, scale, mask, softmax, matmul (inference
                          builds; --no-fuse-attention) */
    bool nhwc;         /* blocked values of the deep, non-Winograd convs in nhwc (layout_nhwc; --no-nhwc) */
} FuseOptions;

typedef struct KernelList {
    Kernel **k;
    int n, cap;
} KernelList;

/* Group the live nodes of g into kernels (in a valid execution order). Nodes marked init
 * (param-only subgraphs) go into *init, run once when the weights are loaded. */
KernelList fuse_graph(Graph *g, FuseOptions opt, KernelList *init);
/* A conv2d that the CPU runs as a direct depthwise convolution (mrt_conv2d_dw): f32, groups ==
 * C > 1, O a multiple of C (weight [O, 1, KH, KW]). It needs no im2col scratch on the CPU; the
 * CUDA path (direct for at most MRT_CUDA_CONV_DIRECT_TAPS taps) reads none either. */
bool conv_is_depthwise(const Node *n);
/* ================================================================ layout.c */

/* The CPU's blocked layout: mark the conv2d, max_pool2d and elementwise kernels of kl whose
 * values stay in oneDNN's blocked layout (Kernel.blk*; the essay at the top of layout.c). Only
 * inference graphs on one device slot; call it only when the runtime has oneDNN. Sets every
 * kernel's blk (-1: none). */
void layout_blocked(Graph *g, KernelList *kl, bool winograd);
/* After layout_blocked: which blocked kernels compute in nhwc rather than nChw16c (Kernel.blk_nhwc,
 * blk_src_nhwc, blk_dst_nhwc): a spatial conv with at most 14x14 outputs that is not Winograd
 * (groups 1, C and O multiples of 16), a 1x1 conv that reads such a value or whose result is such
 * a conv's residual, a max pooling or an elementwise kernel whose operands are nhwc. Operands that
 * must share a layout (a conv's residual and result, an elementwise kernel's, a pooling's source
 * and result) always do; a conv whose source is stored in the other layout reorders it first. */
void layout_nhwc(Graph *g, KernelList *kl);
/* The channels that kernel k's blocked result is padded to (oneDNN pads a blocked tensor to whole
 * blocks of 16): 0 unless k writes a blocked value whose C is not a multiple of 16. The memory
 * plan gives such a value N * that * H * W elements. */
int64_t blk_padded_channels(const Kernel *k);
/* An expand + depthwise pair (Kernel.blk_pair) whose expanded value takes this many bytes a
 * batch item or more runs as one oneDNN primitive (runtime/rt_blocked.c, MRT_BLK_FUSE_BYTES, the
 * same number); the memory plan keeps the pair's source apart from its result then. */
#define BLK_FUSE_BYTES (4u << 20)
/* The bytes of one batch item of n (all dims after the first, as constants; 0 when symbolic). */
int64_t blk_item_bytes(const Node *n);
/* The blocked kernels, one line each (part of --dump=fused). */
void dump_layout(FILE *out, const Graph *g, const KernelList *kl);

/* ================================================================ precision.c */

/* --precision bf16 (g->bf16): which blocked values are stored as bf16 (Kernel.blk_src_bf16,
 * blk_dst_bf16): those whose every reader is a blocked conv or max pooling. Call after
 * layout_blocked; a no-op for an f32 build. */
void precision_bf16(Graph *g, KernelList *kl);
/* Part of --dump=fused in a bf16 build: the precision, and the bf16 values, one line each. */
void dump_precision(FILE *out, const Graph *g, const KernelList *kl);

/* --dump=fused */
void dump_fused(FILE *out, const Graph *g, const KernelList *kl, const KernelList *init);

/* ================================================================ plan.c */

typedef enum StorageKind {
    S_INPUT,     /* the caller's input buffer (read-only) */
    S_PARAM,     /* the weight region */
    S_ARENA,     /* the activation arena */
    S_OUTPUT,    /* the caller's output buffer */
    S_CONST,     /* no storage: an inlined constant */
    S_INIT,      /* the weight region, after the params: computed at load time */
    S__COUNT
} StorageKind;

/* Where a materialized value lives. Views share their source's Storage. */
typedef struct Storage {
    int id;
    int newest;      /* the node whose value it holds last (in-place chains), for inplace_of */
    StorageKind kind;
    int slot;        /* the device slot whose arena or weight region holds it */
    int index;       /* S_INPUT/S_PARAM/S_OUTPUT: position; S_ARENA: -1 */
    size_t bytes;    /* at max batch */
    size_t offset;   /* S_ARENA: offset in the arena; S_PARAM: offset in the weight region */
    int first, last; /* live range in kernel steps, closed */
    Node *owner;     /* the node that first defined it */
    bool load_only;  /* S_PARAM/S_INIT: read by load-time kernels only; lives in the slot's
                        load-only region (offset relative to it), freed after loading */
} Storage;

typedef struct MemPlan {
    Storage **st;
    int nst, capst;
    Storage **of;       /* of[node id]: the node's storage (NULL for dead/inlined nodes) */
    size_t arena_bytes;  /* slot 0's (the model device's) */
    size_t weight_bytes; /* slot 0's resident weights */
    size_t *slot_arena;  /* per device slot */
    size_t *slot_weights; /* per slot: the resident weight region */
    size_t *slot_load;    /* per slot: the load-only region (freed after loading) */
    int nslots;
    size_t align;
    size_t lower_bound;  /* max over steps of bytes live at that step */
    size_t naive_bytes;  /* sum of all arena values without reuse */
    int *inplace_of;     /* inplace_of[node id] = id of the node whose bytes it reuses, or -1 */
    int nsteps;
    int *def_step;       /* def_step[node id]: kernel index defining it (-1 input/param) */
    int *last_step;      /* last_step[node id]: last kernel reading it */
    Storage **scratch;   /* scratch[kernel index]: its temporary block, or NULL */
    int *init_last;      /* init_last[storage id]: for a load-only storage, the last load-time
                            kernel (index in the init list) that reads it, after which the
                            runtime may release its pages (mrt_cpu_release); -1 otherwise */
} MemPlan;

typedef struct PlanOptions {
    bool inplace;    /* allow elementwise kernels to write over a dying operand */
    size_t align;    /* arena alignment in bytes: 64 CPU */
    bool reorder;    /* try a memory-aware kernel order and keep it if the arena shrinks */
    bool cuda;       /* the CUDA plan: kernels' scratch_bytes_cuda where set */
} PlanOptions;

/* Choose the kernel order (reordering kl when that lowers the arena), then plan it. */
MemPlan *plan_memory(Graph *g, KernelList *kl, KernelList *init, PlanOptions opt);
/* Verify a plan (overlap, bounds, alignment, outputs); ICE on a violation. */
void check_plan(const Graph *g, const KernelList *kl, const MemPlan *mp);
/* Training builds, for data-parallel training's gradient reduction overlapped with the backward
 * pass (PyTorch DDP's Reducer; Li et al. 2020, "PyTorch Distributed: Experiences on Accelerating
 * Data Parallel Training"). Gradient k is the k-th param (in param order) that has one. A
 * gradient is final after the last kernel that writes or reads its storage (in any of the plans:
 * in place, through a view, as another value's input), leaving out the kernels of the gradient
 * norm alone, which a data-parallel step skips. */
typedef struct GradReady {
    int n;       /* gradients */
    int *order;  /* [n]: the k, in the order they become final (ties: the later param first, as
                  * DDP's reverse order of model.parameters()) */
    int *step;   /* [n] by k: the kernel after which gradient k is final */
    int *after;  /* [kernels]: how many gradients (a prefix of order) are final after kernel s,
                  * or 0 when none became final at s */
    bool *skip;  /* [kernels]: a kernel of the gradient norm alone (Node.grad_norm) */
} GradReady;
GradReady *plan_grad_ready(const Graph *g, const KernelList *kl, const MemPlan *const *plans, int nplans);

/* --dump=memplan: the offsets of plan mp, then each slot's totals (with cuda_plan's arena
 * sizes when given: the build has CUDA). */
void dump_memplan(FILE *out, const Graph *g, const KernelList *kl, const MemPlan *mp, const MemPlan *cuda_plan);
/* "  slot S DEVICE: arena ... weights ... load-only ..." for every slot. */
void dump_slot_totals(FILE *out, const Graph *g, const MemPlan *mp, const MemPlan *cuda_plan);
/* --dump=memplan-svg: the arena over time as an SVG picture. */
void dump_memplan_svg(FILE *out, const Graph *g, const KernelList *kl, const MemPlan *mp);

/* ================================================================ kprint.c */

/* C (and CUDA) text of kernels, shared by both emitters. */
const char *c_type(DType dt);   /* "float", "int32_t", "int64_t" */
/* A Dim as C over the symbols' run-time sizes B (the batch), B1, B2, B3: "64", "B", "(64 * B * B1)" */
char *dim_c(Dim d);
/* The symbols' sizes as kernel parameters and arguments after B: "" for a model with at most one
 * symbol, else ", int64_t B1, ..." and ", B1, ..." (set by emit for the graph it emits). */
extern const char *sym_params, *sym_args, *sym_voids; /* sym_voids: " (void)B1; ..." */
char *float_lit(double v);      /* a float literal: hex, INFINITY, NAN */
char *c_ident(const char *name); /* a valid C identifier for a model or tensor name */
void contiguous_strides(const Shape *s, Dim *st); /* C-order element strides */

/* The loop nest of a fused elementwise kernel after merging contiguous dimensions: operand 0 is
 * the output, operand 1+i leaf i; stride[op][d] is the element stride of iteration dim d, and
 * base[op] a constant element offset (as C) or NULL. */
#define MAX_OPERANDS 65
typedef struct LoopNest {
    int rank;
    Dim n[MAX_RANK];
    int nops;
    Dim stride[MAX_OPERANDS][MAX_RANK];
    char *base[MAX_OPERANDS];
} LoopNest;
void kernel_loops(const Kernel *k, LoopNest *ln);
/* The element index of operand op as C over the loop variables i0, i1, ... and B. */
char *loop_index(const LoopNest *ln, int op);
/* FNAME_expr(a0, a1, ..., [int *mrt_fault]): the fused scalar expression, MRT_HD so C and CUDA
 * share the text; `comments` adds the graph node of each step. A kernel that may fault (an
 * integer // or %, whose divisor may be 0) takes mrt_fault, which the expression sets to 1. */
void emit_expr_function(FILE *o, const Kernel *k, const char *fname, bool comments);
/* static void FNAME(out, l0, l1, ..., B): the CPU loop nest calling FNAME_expr; for a kernel
 * that may fault, static mrt_status FNAME(out, l0, ..., B, what), failing with
 * "WHAT: integer division by zero". */
void emit_c_loop(FILE *o, const Kernel *k, const char *fname);
/* Whether the expression holds an integer // or % (kernel_may_fault: the kernel's). */
bool expr_may_fault(const Expr *x);
bool kernel_may_fault(const Kernel *k);
/* "MODEL k3 (node %7 'y', line 12)": a kernel in run-time messages. */
char *kernel_what(const Graph *g, const Kernel *k, const char *kind);
/* "MODEL: '//' at line 4:16 (node %3, in kernel k0 computing %4 'q')": the first integer
 * division of a kernel that may fault, for its run-time error. */
char *fault_what(const Graph *g, const Kernel *k, const char *kind);

/* ================================================================ emit_c.c, emit_cuda.c */


/* The emitters write into the FILE* they are given; only the driver (main.c) touches files.
 * emit_begin prepares a model's emission: mp is the CPU plan (64-byte aligned arena), mpc the
 * CUDA plan (256) of the same schedule. */
typedef struct Emit Emit;
Emit *emit_begin(const Graph *g, const KernelList *kl, const KernelList *init, const MemPlan *mp, const MemPlan *mpc);
const char *emit_prefix(const Emit *e); /* the model's C prefix (model_ident) */
void emit_c_header(Emit *e, FILE *o);   /* NAME.h: the API, the plan's sizes */
void emit_c_source(Emit *e, FILE *o, const char *h_include); /* NAME.c: descriptor, kernels, run */
void emit_c_main(Emit *e, FILE *o, const char *h_include);   /* a main() calling mrt_main */

/* The model's C prefix and file name: c_ident, plus "_model" where the name would clash with
 * main(), the runtime's mrt_ names or a C library function the generated code calls. */
char *model_ident(const char *name);

/* NAME.cu: a __global__ kernel and an extern "C" launcher per fused elementwise kernel. */
void emit_cuda(FILE *o, const Graph *g, const KernelList *kl, const KernelList *init, const char *pfx);


/* ================================================================ main.c */

/* modelc's command line, parsed (options_default: what no flag gives). */
typedef struct Options {
    const char *input, *out, *dump, *olevel;
    bool emit_only, keep, no_cuda;
    bool bf16;      /* --precision bf16 (inference builds; Graph.bf16) */
    int max_batch;
    DimBounds dims; /* --max-dim NAME=N, ... (dims.max_batch is set from max_batch at build_graph) */
    FuseOptions fuse;
    PlanOptions plan;
    FoldOptions fold;
} Options;

/* Everything a compilation produces for the emitters. */
typedef struct Compiled {
    Graph *g;
    KernelList kl, init;
    MemPlan *mp, *mpc; /* the CPU plan (64-byte alignment) and the CUDA plan (256) */
    struct Compiled *eval; /* a training build's evaluation twin (NAME_eval: the loss in
                            * inference mode, for PROG train --eval), or NULL */
} Compiled;

void options_default(Options *o);

/* The pass pipeline on the NUL-terminated source `src` of file `path` (for messages): parse,
 * check, fold, place, hoist, fuse, plan. With o->dump, prints that phase to `out` and returns
 * false; else fills *c and returns true. Errors exit through diag.c (see diag_set_exit_hook);
 * everything is allocated from the arena. */
bool compile_source(const Options *o, const char *path, const char *src, Compiled *c, FILE *out);

#endif /* MODELC_H */
