/*
 * plan.c — static memory planning: liveness, in-place reuse, arena offsets, and a checker.
 *
 * Every value a kernel writes gets a Storage: the caller's output buffer when the value is a
 * graph output (so outputs are written in place, never copied out of the arena), otherwise a
 * block of the per-device activation arena. Reshape views share their source's storage.
 * Inputs are the caller's buffers and are never written; params live in the weight region.
 *
 * Liveness is measured in kernel steps (the fused schedule): a value is live from the kernel
 * that writes it to the last kernel that reads it, reads through views included, closed at both
 * ends. Sizes are taken at the compiled maximum batch, so offsets are constants and a run with
 * a smaller batch uses a prefix of each block.
 *
 * In-place reuse: an elementwise kernel may write over an operand whose storage dies at that
 * kernel, only when the operand is read with the identity index map, has the root's size, and
 * every other read of that storage in the kernel is also the identity map. Then each output
 * element depends only on the input element at the same index (field case B02: a reversed or
 * transposed read of the same buffer forbids it). GEMM kernels never write in place (BLAS
 * forbids aliasing, and the epilogue reads its operands after the GEMM wrote the output).
 *
 * Offsets: "greedy by size" over usage intervals, as in Pisarchyk & Lee, "Efficient Memory
 * Management for Deep Neural Net Inference" (2020), which TFLite's arena planner uses: take
 * blocks from largest to smallest, and put each in the smallest gap (best fit) between blocks
 * already placed whose lifetimes intersect its own, or after the last of them.
 *
 * check_plan then proves the result: two values whose closed lifetimes intersect never share
 * bytes, except an exact in-place pair at the one step where the older dies (field case B06);
 * every block lies in the arena and is aligned; outputs and inputs are never reused.
 */
#include "modelc.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* Weight regions use the CUDA alignment on every device, so the same host layout serves both. */
#define WEIGHT_ALIGN 256

static size_t node_bytes(const Graph *g, const Node *n) {
    Dim d = shape_numel(&n->shape);
    return (size_t)dim_max(g, d) * dtype_size(n->dtype);
}

/* The bytes node n's values take in its storage s: node_bytes, or more where the storage is n's
 * own arena block made larger for it (a blocked value padded to whole channel blocks: layout.c). */
static size_t value_bytes(const Graph *g, const Storage *s, const Node *n) {
    size_t b = node_bytes(g, n);
    return s && s->kind == S_ARENA && s->owner == n && s->bytes > b ? s->bytes : b;
}

/* Calls fn(n, k) for every materialized node kernel k reads (views resolved to their base). */
static void kernel_reads(const Kernel *k, void (*fn)(void *, Node *), void *ctx) {
    if (k->gemm) {
        fn(ctx, view_base(k->gemm->in[0]));
        fn(ctx, view_base(k->gemm->in[1]));
    }
    if (k->lib)
        for (int j = 0; j < k->lib->nin; j++) fn(ctx, view_base(k->lib->in[j]));
    for (int i = 0; i < k->nleaves; i++)
        if (i != k->gemm_leaf) fn(ctx, view_base(k->leaves[i].node));
}

typedef struct Ctx {
    MemPlan *mp;
    int step;
} Ctx;

static void mark_read(void *p, Node *n) {
    Ctx *c = p;
    if (c->mp->last_step[n->id] < c->step) c->mp->last_step[n->id] = c->step;
}

typedef struct InitCtx {
    int *last; /* last[node id]: the last load-time kernel reading it */
    int step;
} InitCtx;

static void mark_init_read(void *p, Node *n) {
    InitCtx *c = p;
    if (c->last[n->id] < c->step) c->last[n->id] = c->step;
}

static Storage *new_storage(MemPlan *mp, StorageKind kind, int index, Node *owner, size_t bytes) {
    Storage *s = xalloc(sizeof(Storage));
    s->id = mp->nst;
    s->slot = owner && owner->slot > 0 ? owner->slot : 0;
    s->kind = kind;
    s->index = index;
    s->owner = owner;
    s->newest = owner ? owner->id : -1;
    s->bytes = bytes;
    s->first = -1;
    s->last = -1;
    mp->st = xgrow_array(mp->st, mp->nst, &mp->capst, sizeof(Storage *));
    mp->st[mp->nst++] = s;
    return s;
}

static bool leaf_identity(const LeafRef *l, const Node *root) {
    if (l->node->shape.rank != root->shape.rank) return false;
    for (int i = 0; i < root->shape.rank; i++)
        if (l->map[i] != i || !dim_eq(l->node->shape.d[i], root->shape.d[i])) return false;
    return true;
}

/* The ops allowed to compute in place (ops.def's `inplace` column): each output element is a
 * function of the operand elements at the same index only, read before the element is
 * written. Every op a fused elementwise kernel contains must have it (permute does, because a
 * permuted read is rejected by the identity-map test below, not by the op). */
static bool op_inplace_ok(OpKind op) { return op_info[op].inplace; }

/* Can kernel k's root be written over storage s? */
static bool can_write_in_place(const Graph *g, const MemPlan *mp, const Kernel *k, const Storage *s, int step) {
    if (k->kind != K_ELEMENTWISE || s->kind != S_ARENA || s->last != step) return false;
    /* training: a storage live to the last step holds what the optimizer step reads after the
     * run (a gradient, the norm): never written over, even by the last kernel */
    if (g->train && s->last >= mp->nsteps - 1) return false;
    for (int i = 0; i < k->nmembers; i++)
        if (!op_inplace_ok(k->members[i]->op)) return false;
    if (s->bytes < node_bytes(g, k->root)) return false;
    bool any = false;
    for (int i = 0; i < k->nleaves; i++) {
        Node *b = view_base(k->leaves[i].node);
        if (mp->of[b->id] != s) continue;
        if (!leaf_identity(&k->leaves[i], k->root)) return false;
        if (dtype_size(k->leaves[i].node->dtype) != dtype_size(k->root->dtype)) return false;
        any = true;
    }
    return any;
}

static int cmp_size_desc(const void *a, const void *b) {
    const Storage *x = *(Storage *const *)a, *y = *(Storage *const *)b;
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
    return x->first - y->first;
}

static int cmp_offset(const void *a, const void *b) {
    const Storage *x = *(Storage *const *)a, *y = *(Storage *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int cmp_first_then_size(const void *a, const void *b) {
    const Storage *x = *(Storage *const *)a, *y = *(Storage *const *)b;
    if (x->first != y->first) return x->first - y->first;
    return x->bytes < y->bytes ? 1 : x->bytes > y->bytes ? -1 : x->id - y->id;
}

static int cmp_lifetime_desc(const void *a, const void *b) {
    const Storage *x = *(Storage *const *)a, *y = *(Storage *const *)b;
    int lx = x->last - x->first, ly = y->last - y->first;
    if (lx != ly) return ly - lx;
    return x->bytes < y->bytes ? 1 : x->bytes > y->bytes ? -1 : x->id - y->id;
}

/* The largest sum of (aligned) block sizes of slot `slot` live at one step: a sweep over the
 * steps with what starts and what ends at each, O(blocks + steps) (not steps x blocks). */
static size_t lower_bound_of(Storage **blocks, int na, int nsteps, size_t align, int slot) {
    if (nsteps <= 0) return 0;
    size_t *starts = xalloc(sizeof(size_t) * (nsteps + 1)), *ends = xalloc(sizeof(size_t) * (nsteps + 1));
    for (int i = 0; i < na; i++) {
        const Storage *b = blocks[i];
        int f = b->first < 0 ? 0 : b->first, l = b->last >= nsteps ? nsteps - 1 : b->last;
        if (b->slot != slot || f > l) continue;
        starts[f] += align_up(b->bytes, align);
        ends[l + 1] += align_up(b->bytes, align); /* no longer live from step l + 1 */
    }
    size_t lb = 0, live = 0;
    for (int s = 0; s < nsteps; s++) {
        live = live + starts[s] - ends[s];
        if (live > lb) lb = live;
    }
    return lb;
}

/* The blocks of one slot placed so far, indexed for the query "which of them live at some step
 * of [f, l]": a segment tree over the steps at which blocks start, each node holding the latest
 * last step among the blocks below it, each leaf a list of the blocks starting there. A query
 * descends only into subtrees that hold an answer: O((answers + 1) log steps), where scanning
 * every placed block made placement quadratic in the number of blocks. */
typedef struct LiveIndex {
    int n;          /* leaves: a power of two >= the number of steps */
    int *maxlast;   /* [2n], 1-based heap order: the largest `last` below, -1 when empty */
    int *head;      /* [n]: the newest block starting at that step, an index into blk; -1 */
    int *next;      /* [cap]: the block before it starting at the same step, or -1 */
    Storage **blk;
    int nblk;
} LiveIndex;

static void live_index_init(LiveIndex *ix, int nsteps, int cap) {
    ix->n = 1;
    while (ix->n < nsteps) ix->n *= 2;
    ix->maxlast = xalloc(sizeof(int) * 2 * ix->n);
    ix->head = xalloc(sizeof(int) * ix->n);
    ix->next = xalloc(sizeof(int) * (cap + 1));
    ix->blk = xalloc(sizeof(Storage *) * (cap + 1));
}

static void live_index_clear(LiveIndex *ix) {
    for (int i = 0; i < 2 * ix->n; i++) ix->maxlast[i] = -1;
    for (int i = 0; i < ix->n; i++) ix->head[i] = -1;
    ix->nblk = 0;
}

static void live_index_add(LiveIndex *ix, Storage *b) {
    if (b->first < 0 || b->first >= ix->n || b->last < b->first)
        ICE("plan: block %d has the live range [%d,%d] outside the %d steps", b->id, b->first, b->last, ix->n);
    int k = ix->nblk++;
    ix->blk[k] = b;
    ix->next[k] = ix->head[b->first];
    ix->head[b->first] = k;
    for (int node = ix->n + b->first; node >= 1; node /= 2)
        if (ix->maxlast[node] < b->last) ix->maxlast[node] = b->last;
}

/* Appends to out[*nout] the blocks below `node` (covering start steps [lo, hi]) that start at
 * or before l and end at or after f. */
static void live_index_query(const LiveIndex *ix, int node, int lo, int hi, int f, int l, Storage **out, int *nout) {
    if (lo > l || ix->maxlast[node] < f) return;
    if (lo == hi) {
        for (int k = ix->head[lo]; k >= 0; k = ix->next[k])
            if (ix->blk[k]->last >= f) out[(*nout)++] = ix->blk[k];
        return;
    }
    int mid = lo + (hi - lo) / 2;
    live_index_query(ix, 2 * node, lo, mid, f, l, out, nout);
    live_index_query(ix, 2 * node + 1, mid + 1, hi, f, l, out, nout);
}

/* Place the blocks in the given order, each in the smallest gap between already placed blocks
 * whose lifetimes intersect its own (best fit), or after the last of them. Slots do not share
 * bytes, so each slot's blocks are placed on their own, in the same order. */
static void place_blocks(Storage **blocks, int na, int nsteps, int nslots, size_t align, size_t *slot_arena) {
    Storage **ov = xalloc(sizeof(Storage *) * (na + 1));
    LiveIndex ix;
    live_index_init(&ix, nsteps, na);
    bool *used = xalloc(sizeof(bool) * (nslots + 1));
    for (int i = 0; i < na; i++) used[blocks[i]->slot] = true;
    for (int sl = 0; sl < nslots; sl++) {
        if (!used[sl]) continue;
        live_index_clear(&ix);
        for (int i = 0; i < na; i++) {
            Storage *b = blocks[i];
            if (b->slot != sl) continue;
            size_t need = align_up(b->bytes, align);
            int nov = 0;
            live_index_query(&ix, 1, 0, ix.n - 1, b->first, b->last, ov, &nov);
            qsort(ov, nov, sizeof(Storage *), cmp_offset);
            size_t best = SIZE_MAX, best_gap = SIZE_MAX, prev_end = 0;
            for (int j = 0; j < nov; j++) {
                size_t gap_start = prev_end, gap_end = ov[j]->offset;
                if (gap_end > gap_start && gap_end - gap_start >= need && gap_end - gap_start < best_gap) {
                    best_gap = gap_end - gap_start;
                    best = gap_start;
                }
                size_t e = align_up(ov[j]->offset + ov[j]->bytes, align);
                if (e > prev_end) prev_end = e;
            }
            if (best == SIZE_MAX) best = prev_end; /* no gap fits: after the last overlapping block */
            b->offset = best;
            live_index_add(&ix, b);
            if (best + need > slot_arena[b->slot]) slot_arena[b->slot] = best + need;
        }
    }
}

static MemPlan *plan_order(Graph *g, KernelList *kl, KernelList *init, PlanOptions opt) {
    MemPlan *mp = xalloc(sizeof(MemPlan));
    int nn = g->nnodes;
    mp->of = xalloc(sizeof(Storage *) * nn);
    mp->inplace_of = xalloc(sizeof(int) * nn);
    mp->def_step = xalloc(sizeof(int) * nn);
    mp->last_step = xalloc(sizeof(int) * nn);
    mp->nsteps = kl->n;
    mp->nslots = g->nslots;
    mp->align = opt.align;
    mp->slot_arena = xalloc(sizeof(size_t) * g->nslots);
    mp->slot_weights = xalloc(sizeof(size_t) * g->nslots);
    for (int i = 0; i < nn; i++) mp->inplace_of[i] = mp->def_step[i] = mp->last_step[i] = -1;

    /* Liveness at node level. */
    for (int s = 0; s < kl->n; s++) {
        Ctx c = {mp, s};
        mp->def_step[kl->k[s]->root->id] = s;
        kernel_reads(kl->k[s], mark_read, &c);
    }
    /* An expand + depthwise pair (layout.c, pair_dw) that the runtime fuses (its expanded value
     * BLK_FUSE_BYTES a batch item or more) runs as one primitive when its first kernel runs,
     * reading that one's source while it writes the second's result: the source stays live
     * through the second, so the two never share bytes (elsewhere the runtime checks, and runs
     * the pair as two ops where they do). */
    for (int s = 0; s + 1 < kl->n; s++) {
        const Kernel *k = kl->k[s];
        if (k->blk < 0 || k->blk_pair != kl->k[s + 1] || !k->blk_pair_dw || !k->gemm ||
            blk_item_bytes(k->root) < BLK_FUSE_BYTES)
            continue;
        int x = view_base(k->gemm->in[0])->id;
        if (mp->last_step[x] < s + 1) mp->last_step[x] = s + 1;
    }

    /* Training: the optimizer step, after the last kernel, reads every gradient and updates its
     * param and optimizer state: all stay live (and resident) to the end. */
    for (int i = 0; g->train && g->grad && i < g->nparams; i++) {
        if (!g->grad[i]) continue;
        mp->last_step[view_base(g->grad[i])->id] = kl->n - 1;
        mp->last_step[g->params[i]->id] = kl->n - 1;
        for (int k = 0; k < 2; k++)
            if (g->opt_state[i][k]) mp->last_step[g->opt_state[i][k]->id] = kl->n - 1;
    }
    if (g->train && g->grad_sumsq) mp->last_step[view_base(g->grad_sumsq)->id] = kl->n - 1;
    for (int i = 0; g->train && i < g->nupd; i++) { /* and writes back the buffers (batch_norm's stats) */
        mp->last_step[view_base(g->upd_value[i])->id] = kl->n - 1;
        mp->last_step[g->upd_param[i]->id] = kl->n - 1;
    }

    /* Inputs, then the weights: each slot has a resident region (the params and load-time
     * values that run() reads) and a load-only one (those only load-time kernels read, such as
     * the raw conv weights and batch-norm statistics that folding consumes), which the runtime
     * frees once the weights are loaded. */
    for (int i = 0; i < g->ninputs; i++) {
        Node *n = g->inputs[i];
        mp->of[n->id] = new_storage(mp, S_INPUT, i, n, node_bytes(g, n));
    }
    mp->slot_load = xalloc(sizeof(size_t) * g->nslots);
    for (int i = 0; i < g->nparams; i++) {
        Node *n = g->params[i];
        Storage *s = new_storage(mp, S_PARAM, i, n, node_bytes(g, n));
        s->load_only = mp->last_step[n->id] < 0;
        size_t *off = s->load_only ? &mp->slot_load[s->slot] : &mp->slot_weights[s->slot];
        s->offset = *off;
        *off = align_up(*off + s->bytes, WEIGHT_ALIGN);
        mp->of[n->id] = s;
    }
    for (int s = 0; s < init->n; s++) {
        Node *r = init->k[s]->root;
        if (mp->of[r->id]) continue;
        Storage *st = new_storage(mp, S_INIT, -1, r, node_bytes(g, r));
        st->load_only = mp->last_step[r->id] < 0;
        size_t *off = st->load_only ? &mp->slot_load[st->slot] : &mp->slot_weights[st->slot];
        st->offset = *off;
        *off = align_up(*off + st->bytes, WEIGHT_ALIGN);
        mp->of[r->id] = st;
        if (init->k[s]->scratch_bytes) ICE("a load-time kernel needs scratch memory");
    }
    mp->weight_bytes = mp->slot_weights[0];

    /* The last load-time reader of each load-only storage: its pages may go after that kernel
     * (the load-only region never reuses an offset, so nothing else lives in them). */
    mp->init_last = xalloc(sizeof(int) * (size_t)mp->nst);
    int *node_last = xalloc(sizeof(int) * nn);
    for (int i = 0; i < nn; i++) node_last[i] = -1;
    for (int s = 0; s < init->n; s++) kernel_reads(init->k[s], mark_init_read, &(InitCtx){node_last, s});
    for (int i = 0; i < mp->nst; i++) mp->init_last[i] = -1;
    for (int i = 0; i < nn; i++) {
        Storage *st = mp->of[i];
        if (st && st->load_only && node_last[i] > mp->init_last[st->id]) mp->init_last[st->id] = node_last[i];
    }

    /* Outputs own the caller's buffer. */
    for (int i = 0; i < g->noutputs; i++) {
        Node *b = view_base(g->outputs[i].node);
        ASSERT(!mp->of[b->id]);
        mp->of[b->id] = new_storage(mp, S_OUTPUT, i, b, node_bytes(g, b));
    }

    /* Kernel roots: a fresh arena block, or in place over a dying operand. */
    for (int s = 0; s < kl->n; s++) {
        Kernel *k = kl->k[s];
        Node *r = k->root;
        if (!mp->of[r->id]) {
            Storage *reuse = NULL;
            for (int i = 0; opt.inplace && k->kind == K_ELEMENTWISE && i < k->nleaves && !reuse; i++) {
                Storage *cand = mp->of[view_base(k->leaves[i].node)->id];
                if (cand && can_write_in_place(g, mp, k, cand, s)) reuse = cand;
            }
            if (reuse) {
                mp->of[r->id] = reuse;
                mp->inplace_of[r->id] = reuse->newest; /* the value it overwrites, dying here */
                reuse->newest = r->id;
            } else {
                /* a blocked value of C % 16 != 0 channels holds its padding too (layout.c) */
                int64_t padc = blk_padded_channels(k);
                size_t bytes = node_bytes(g, r);
                if (padc) bytes = bytes / (size_t)r->shape.d[1].c * (size_t)padc;
                mp->of[r->id] = new_storage(mp, S_ARENA, -1, r, bytes);
            }
        }
        Storage *st = mp->of[r->id];
        if (st->first < 0) st->first = s;
        if (st->last < mp->last_step[r->id]) st->last = mp->last_step[r->id];
        if (st->last < s) st->last = s;
    }
    /* Views map to their base's storage. */
    for (int i = 0; i < nn; i++) {
        Node *n = g->nodes[i];
        if (!n->dead && n->op == OP_RESHAPE) mp->of[i] = mp->of[view_base(n)->id];
    }

    /* Scratch blocks live for their kernel's step only. Both plans have the same blocks (the
     * offset tables share storage ids): one that only the CUDA plan needs (a depthwise conv with
     * more taps than CUDA's direct path takes) is a float in the CPU's. */
    mp->scratch = xalloc(sizeof(Storage *) * (kl->n + 1));
    for (int s = 0; s < kl->n; s++)
        if (kl->k[s]->scratch_bytes || kl->k[s]->scratch_bytes_cuda) {
            const Kernel *k = kl->k[s];
            size_t bytes = opt.cuda && k->scratch_bytes_cuda ? k->scratch_bytes_cuda : k->scratch_bytes;
            if (!bytes) bytes = sizeof(float);
            Storage *st = new_storage(mp, S_ARENA, -1, k->root, bytes);
            st->first = st->last = s;
            mp->scratch[s] = st;
        }

    /* Offsets: greedy by size first; when that leaves the arena above the lower bound, also try
     * the blocks in order of first use and in order of lifetime length, and keep the smallest
     * (Pisarchyk & Lee's paper compares the same families of orderings). */
    int na = 0;
    Storage **blocks = xalloc(sizeof(Storage *) * (mp->nst + 1));
    for (int i = 0; i < mp->nst; i++)
        if (mp->st[i]->kind == S_ARENA) blocks[na++] = mp->st[i];
    int (*orders[])(const void *, const void *) = {cmp_size_desc, cmp_first_then_size, cmp_lifetime_desc};
    size_t *best_off = xalloc(sizeof(size_t) * (mp->nst + 1)), *best_arena = xalloc(sizeof(size_t) * g->nslots);
    size_t best_total = SIZE_MAX;
    for (int o = 0; o < 3; o++) {
        qsort(blocks, na, sizeof(Storage *), orders[o]);
        for (int sl = 0; sl < g->nslots; sl++) mp->slot_arena[sl] = 0;
        place_blocks(blocks, na, kl->n, g->nslots, opt.align, mp->slot_arena);
        size_t total = 0;
        for (int sl = 0; sl < g->nslots; sl++) total += mp->slot_arena[sl];
        if (total < best_total) {
            best_total = total;
            for (int i = 0; i < na; i++) best_off[blocks[i]->id] = blocks[i]->offset;
            memcpy(best_arena, mp->slot_arena, sizeof(size_t) * g->nslots);
        }
        if (o == 0 && lower_bound_of(blocks, na, kl->n, opt.align, 0) >= mp->slot_arena[0] && g->nslots == 1) break;
    }
    for (int i = 0; i < na; i++) blocks[i]->offset = best_off[blocks[i]->id];
    memcpy(mp->slot_arena, best_arena, sizeof(size_t) * g->nslots);
    mp->arena_bytes = mp->slot_arena[0];

    /* Lower bound and naive sum. */
    mp->lower_bound = lower_bound_of(blocks, na, kl->n, opt.align, 0);
    for (int s = 0; s < kl->n; s++) {
        Node *r = kl->k[s]->root;
        if (mp->of[r->id]->kind == S_ARENA && mp->of[r->id]->slot == 0)
            mp->naive_bytes += align_up(value_bytes(g, mp->of[r->id], r), opt.align);
    }
    check_plan(g, kl, mp);
    return mp;
}

/* ---------------------------------------------------------------- checker */

void check_plan(const Graph *g, const KernelList *kl, const MemPlan *mp) {
    int nn = g->nnodes;
    for (int s = 0; s < kl->n; s++) {
        const Node *r = kl->k[s]->root;
        const Storage *st = mp->of[r->id];
        if (!st) ICE("plan: kernel k%d's value %%%d has no storage", s, r->id);
        if (st->kind == S_INPUT || st->kind == S_PARAM)
            ICE("plan: kernel k%d writes %%%d into an %s buffer", s, r->id, st->kind == S_INPUT ? "input" : "param");
        if (st->kind == S_ARENA) {
            if (st->offset % mp->align) ICE("plan: %%%d at offset %zu is not aligned", r->id, st->offset);
            if (st->offset + node_bytes(g, r) > mp->slot_arena[st->slot])
                ICE("plan: %%%d [%zu, %zu) lies outside the arena of %zu bytes", r->id, st->offset,
                    st->offset + node_bytes(g, r), mp->slot_arena[st->slot]);
            if (st->slot != (r->slot > 0 ? r->slot : 0))
                ICE("plan: %%%d runs on slot %d but its storage is on slot %d", r->id, r->slot, st->slot);
        }
        if (st->kind == S_OUTPUT && st->owner != r)
            ICE("plan: output storage of %%%d reused by %%%d", st->owner->id, r->id);
    }
    /* Scratch: aligned, inside the arena (disjoint from the values live at its step: below). */
    for (int s = 0; s < kl->n; s++) {
        const Storage *sc = mp->scratch[s];
        if (sc && (sc->offset % mp->align || sc->offset + sc->bytes > mp->slot_arena[sc->slot]))
            ICE("plan: scratch of k%d [%zu, %zu) misaligned or outside the arena", s, sc->offset, sc->offset + sc->bytes);
    }
    /* Values whose closed lifetimes intersect must not share bytes. Two closed intervals
     * intersect when one starts inside the other, so a sweep over the steps compares each value,
     * at the step that defines it, with the values live then, and each scratch block with the
     * values live at its step: O(values + pairs live together), not O(values^2). */
    int ns = kl->n;
    int *def_head = xalloc(sizeof(int) * (ns + 1)), *end_head = xalloc(sizeof(int) * (ns + 1));
    int *def_next = xalloc(sizeof(int) * (nn + 1)), *end_next = xalloc(sizeof(int) * (nn + 1));
    int *live = xalloc(sizeof(int) * (nn + 1)), *pos = xalloc(sizeof(int) * (nn + 1)), nlive = 0;
    for (int s = 0; s <= ns; s++) def_head[s] = end_head[s] = -1;
    for (int i = nn - 1; i >= 0; i--) { /* lists in increasing node id */
        const Storage *a = mp->of[i];
        if (!a || a->kind != S_ARENA || g->nodes[i]->op == OP_RESHAPE || mp->def_step[i] < 0) continue;
        int ai = mp->def_step[i], al = mp->last_step[i] < ai ? ai : mp->last_step[i];
        if (ai >= ns || al >= ns) ICE("plan: %%%d live [%d,%d] outside the %d steps", i, ai, al, ns);
        def_next[i] = def_head[ai];
        def_head[ai] = i;
        end_next[i] = end_head[al + 1]; /* no longer live from step al + 1 */
        end_head[al + 1] = i;
    }
    for (int s = 0; s < ns; s++) {
        for (int i = end_head[s]; i >= 0; i = end_next[i]) { /* swap-remove from the live set */
            int last = live[--nlive];
            live[pos[i]] = last;
            pos[last] = pos[i];
        }
        for (int n = def_head[s]; n >= 0; n = def_next[n]) {
            for (int k = 0; k < nlive; k++) {
                int i = live[k] < n ? live[k] : n, j = live[k] < n ? n : live[k];
                const Storage *a = mp->of[i], *b = mp->of[j];
                if (a->slot != b->slot) continue;
                int ai = mp->def_step[i], al = mp->last_step[i] < ai ? ai : mp->last_step[i];
                int bi = mp->def_step[j], bl = mp->last_step[j] < bi ? bi : mp->last_step[j];
                size_t a0 = a->offset, a1 = a0 + node_bytes(g, g->nodes[i]);
                size_t b0 = b->offset, b1 = b0 + node_bytes(g, g->nodes[j]);
                if (a1 <= b0 || b1 <= a0) continue; /* disjoint bytes */
                /* Touching at one step is allowed only for an exact in-place pair. */
                bool inplace = a == b && a0 == b0 &&
                               ((al == bi && mp->inplace_of[j] == i) || (bl == ai && mp->inplace_of[i] == j));
                if (!inplace)
                    ICE("plan: %%%d [%zu,%zu) live [%d,%d] overlaps %%%d [%zu,%zu) live [%d,%d]", i, a0, a1, ai, al, j,
                        b0, b1, bi, bl);
            }
            pos[n] = nlive;
            live[nlive++] = n;
        }
        const Storage *sc = mp->scratch[s];
        for (int k = 0; sc && k < nlive; k++) {
            int i = live[k];
            const Storage *a = mp->of[i];
            if (a->slot == sc->slot && a->offset < sc->offset + sc->bytes &&
                sc->offset < a->offset + node_bytes(g, g->nodes[i]))
                ICE("plan: scratch of k%d overlaps %%%d", s, i);
        }
    }
}

/* ---------------------------------------------------------------- dump */

void dump_memplan(FILE *out, const Graph *g, const KernelList *kl, const MemPlan *mp, const MemPlan *cuda_plan) {
    char buf[256];
    static const char *const kinds[S__COUNT] = {[S_INPUT] = "input", [S_PARAM] = "param", [S_ARENA] = "arena",
                                                [S_OUTPUT] = "output", [S_CONST] = "const", [S_INIT] = "init"};
    _Static_assert(sizeof kinds / sizeof kinds[0] == S__COUNT, "one name per storage kind");
    fprintf(out, "memplan %s: offsets of the %s plan (align %zu), sizes at ", g->name, mp->align == 256 ? "CUDA" : "CPU",
            mp->align);
    if (!g->nsyms) fprintf(out, "batch = %d", g->max_batch);
    for (int k = 0; k < g->nsyms; k++) fprintf(out, "%s%s = %" PRId64, k ? ", " : "", g->sym_names[k], g->sym_max[k]);
    fprintf(out, "\n");
    fprintf(out, "  schedule:");
    for (int s = 0; s < kl->n; s++) fprintf(out, " k%d(%%%d)", s, kl->k[s]->root->id);
    fprintf(out, "\n");
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        const Storage *s = mp->of[i];
        if (!s || n->dead) continue;
        fprintf(out, "  %%%-4d %-8s %10zu bytes  live [%d,%d]", n->id, kinds[s->kind], value_bytes(g, s, n),
                mp->def_step[i], mp->last_step[i] < mp->def_step[i] ? mp->def_step[i] : mp->last_step[i]);
        if (s->kind == S_ARENA || s->kind == S_PARAM || s->kind == S_INIT)
            fprintf(out, "  offset %zu%s", s->offset, s->load_only ? " (load-only)" : "");
        if (s->kind == S_INPUT || s->kind == S_OUTPUT) fprintf(out, "  #%d", s->index);
        if (n->op == OP_RESHAPE) fprintf(out, "  view of %%%d", view_base((Node *)n)->id);
        if (s->slot > 0) fprintf(out, "  on %s", g->slots[s->slot].name);
        if (mp->inplace_of[i] >= 0) fprintf(out, "  in place of %%%d", mp->inplace_of[i]);
        fprintf(out, "  %s%s", dtype_name(n->dtype), shape_str(&n->shape, g->sym_names, buf, sizeof buf));
        if (n->name) fprintf(out, "  ; %s", n->name);
        fprintf(out, "\n");
    }
    for (int s = 0; s < kl->n; s++)
        if (mp->scratch[s]) {
            fprintf(out, "  scratch k%d  %zu bytes  live [%d,%d]  offset %zu", s, mp->scratch[s]->bytes, s, s,
                    mp->scratch[s]->offset);
            if (cuda_plan && cuda_plan->scratch[s]->bytes != mp->scratch[s]->bytes) /* a grouped conv's */
                fprintf(out, "  (CUDA %zu bytes)", cuda_plan->scratch[s]->bytes);
            fprintf(out, "\n");
        }
    double lb = mp->lower_bound ? (double)mp->arena_bytes / mp->lower_bound : 1.0;
    double nv = mp->naive_bytes ? (double)mp->arena_bytes / mp->naive_bytes : 1.0;
    fprintf(out, "  lower bound %zu bytes (ratio %.3f), naive %zu (ratio %.3f) on slot 0\n", mp->lower_bound, lb,
            mp->naive_bytes, nv);
    dump_slot_totals(out, g, mp, cuda_plan);
}

void dump_slot_totals(FILE *out, const Graph *g, const MemPlan *mp, const MemPlan *cuda_plan) {
    for (int s = 0; s < mp->nslots; s++) {
        fprintf(out, "  slot %d %s: arena %zu bytes (CPU, align %zu)", s,
                s ? g->slots[s].name : "the model's device", mp->slot_arena[s], mp->align);
        if (cuda_plan) fprintf(out, ", %zu bytes (CUDA, align %zu)", cuda_plan->slot_arena[s], cuda_plan->align);
        fprintf(out, ", weights %zu bytes, load-only %zu bytes\n", mp->slot_weights[s], mp->slot_load[s]);
    }
}

/* ---------------------------------------------------------------- schedule */

typedef struct Sched {
    Graph *g;
    KernelList *kl;
    int *producer;   /* producer[node id]: kernel index writing it, or -1 */
    int *readers;    /* readers[node id]: number of kernels still to run that read it */
    int *deps;       /* deps[kernel]: number of producer kernels not yet run */
    bool *done;
    int cur;
} Sched;

static void count_reader(void *p, Node *n) {
    Sched *s = p;
    s->readers[n->id]++;
}

static void count_dep(void *p, Node *n) {
    Sched *s = p;
    int k = s->producer[n->id];
    if (k >= 0 && k != s->cur && !s->done[k]) s->deps[s->cur]++;
}

typedef struct Gain {
    Sched *s;
    long long freed;
} Gain;

static void gain_read(void *p, Node *n) {
    Gain *g = p;
    if (g->s->readers[n->id] == 1 && g->s->producer[n->id] >= 0)
        g->freed += (long long)node_bytes(g->s->g, n);
}

static void drop_reader(void *p, Node *n) {
    Sched *s = p;
    s->readers[n->id]--;
}

/* The kernels that read each kernel's value: start[k]..start[k+1] index cons. */
typedef struct Cons {
    Sched *s;
    int *start, *cons, *fill;
} Cons;

static void count_consumer(void *p, Node *n) {
    Cons *c = p;
    int k = c->s->producer[n->id];
    if (k >= 0 && k != c->s->cur) c->start[k + 1]++;
}

static void add_consumer(void *p, Node *n) {
    Cons *c = p;
    int k = c->s->producer[n->id];
    if (k >= 0 && k != c->s->cur) c->cons[c->fill[k]++] = c->s->cur;
}

/* A memory-aware list schedule: among the kernels whose operands are ready, run the one that
 * frees the most bytes net of what it allocates (ties: the earliest in the default order).
 * The greedy rule is the one of Kirisame et al.'s and TVM's memory-aware schedulers in spirit;
 * it is a heuristic, and plan_memory keeps it only when it plans a smaller arena. */
static KernelList schedule_greedy(Graph *g, KernelList *kl) {
    Sched S = {.g = g, .kl = kl}, *s = &S;
    int nk = kl->n;
    s->producer = xalloc(sizeof(int) * g->nnodes);
    s->readers = xalloc(sizeof(int) * g->nnodes);
    s->deps = xalloc(sizeof(int) * (nk + 1));
    s->done = xalloc(sizeof(bool) * (nk + 1));
    for (int i = 0; i < g->nnodes; i++) s->producer[i] = -1;
    for (int k = 0; k < nk; k++) s->producer[kl->k[k]->root->id] = k;
    for (int k = 0; k < nk; k++) {
        s->cur = k;
        kernel_reads(kl->k[k], count_reader, s);
        kernel_reads(kl->k[k], count_dep, s);
    }
    /* Each kernel's consumers, one entry per read (CSR), so that finishing a kernel updates
     * only the kernels that wait for it; the ready ones are kept in a list. */
    Cons C = {s, xalloc(sizeof(int) * (nk + 2)), NULL, NULL};
    for (int k = 0; k < nk; k++) {
        s->cur = k;
        kernel_reads(kl->k[k], count_consumer, &C);
    }
    for (int k = 0; k < nk; k++) C.start[k + 1] += C.start[k];
    C.cons = xalloc(sizeof(int) * (C.start[nk] + 1));
    int *fill = xalloc(sizeof(int) * (nk + 1));
    memcpy(fill, C.start, sizeof(int) * nk);
    C.fill = fill;
    for (int k = 0; k < nk; k++) {
        s->cur = k;
        kernel_reads(kl->k[k], add_consumer, &C);
    }
    int *ready = xalloc(sizeof(int) * (nk + 1)), nready = 0;
    for (int k = 0; k < nk; k++)
        if (s->deps[k] == 0) ready[nready++] = k;
    KernelList out = {xalloc(sizeof(Kernel *) * (nk + 1)), 0, nk + 1};
    for (int step = 0; step < nk; step++) {
        int best = -1, best_at = -1;
        long long best_gain = 0;
        for (int r = 0; r < nready; r++) {
            int k = ready[r];
            Gain gn = {s, 0};
            kernel_reads(kl->k[k], gain_read, &gn);
            long long gain = gn.freed - (long long)node_bytes(g, kl->k[k]->root);
            if (best < 0 || gain > best_gain || (gain == best_gain && k < best)) {
                best = k;
                best_at = r;
                best_gain = gain;
            }
        }
        ASSERT(best >= 0);
        ready[best_at] = ready[--nready];
        s->done[best] = true;
        kernel_reads(kl->k[best], drop_reader, s);
        out.k[out.n++] = kl->k[best];
        for (int c = C.start[best]; c < C.start[best + 1]; c++)
            if (!s->done[C.cons[c]] && --s->deps[C.cons[c]] == 0) ready[nready++] = C.cons[c];
    }
    return out;
}

MemPlan *plan_memory(Graph *g, KernelList *kl, KernelList *init, PlanOptions opt) {
    MemPlan *base = plan_order(g, kl, init, opt);
    if (!opt.reorder || kl->n < 3) return base;
    KernelList alt = schedule_greedy(g, kl);
    bool same = true;
    for (int i = 0; i < kl->n; i++) same = same && alt.k[i] == kl->k[i];
    if (same) return base;
    KernelList orig = {xalloc(sizeof(Kernel *) * (kl->n + 1)), kl->n, kl->n + 1};
    memcpy(orig.k, kl->k, sizeof(Kernel *) * kl->n);
    memcpy(kl->k, alt.k, sizeof(Kernel *) * kl->n);
    for (int i = 0; i < kl->n; i++) kl->k[i]->id = i;
    MemPlan *mp = plan_order(g, kl, init, opt);
    if (mp->arena_bytes < base->arena_bytes) {
        /* an expand + depthwise pair that this order split runs as two ops (Kernel.blk_pair) */
        for (int i = 0; i < kl->n; i++)
            if (kl->k[i]->blk_pair && (i + 1 == kl->n || kl->k[i + 1] != kl->k[i]->blk_pair)) kl->k[i]->blk_pair = NULL;
        return mp;
    }
    memcpy(kl->k, orig.k, sizeof(Kernel *) * kl->n);
    for (int i = 0; i < kl->n; i++) kl->k[i]->id = i;
    return base;
}

/* --dump=memplan-svg: the arena over time. x: kernel steps; y: byte offset (0 at the top). Each
 * value is a rectangle spanning its live range and its bytes; in-place chains share a colour. */
void dump_memplan_svg(FILE *out, const Graph *g, const KernelList *kl, const MemPlan *mp) {
    const double W = 900, PH = 520, left = 90, top = 40, right = 20, bottom = 50;
    const double H = PH * mp->nslots;
    int steps = kl->n ? kl->n : 1;
    double sx = (W - left - right) / steps;
    fprintf(out, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                 "font-family=\"sans-serif\" font-size=\"11\">\n", W, H);
    fprintf(out, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    static const char *colours[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
    for (int sl = 0; sl < mp->nslots; sl++) { /* one panel per device slot */
        double y0 = sl * PH, arena = mp->slot_arena[sl] ? (double)mp->slot_arena[sl] : 1.0;
        double sy = (PH - top - bottom) / arena;
        fprintf(out, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"14\">%s, slot %d (%s): arena %zu bytes", left, y0 + 20,
                g->name, sl, sl ? g->slots[sl].name : "the model's device", mp->slot_arena[sl]);
        if (sl == 0) fprintf(out, " (lower bound %zu, naive %zu)", mp->lower_bound, mp->naive_bytes);
        fprintf(out, "</text>\n");
        fprintf(out, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#888\"/>\n", left,
                y0 + top, W - left - right, PH - top - bottom);
        for (int s = 0; s <= steps; s++)
            fprintf(out, "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%s</text>\n", left + s * sx,
                    y0 + PH - bottom + 16, s < steps ? xprintf("k%d", s) : "");
        fprintf(out, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">kernel step</text>\n", (W + left) / 2, y0 + PH - 12);
        for (int i = 0; i <= 4; i++)
            fprintf(out, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%.0f</text>\n", left - 6,
                    y0 + top + i * (PH - top - bottom) / 4 + 4, arena * i / 4);
        for (int i = 0; i < g->nnodes; i++) {
            const Storage *st = mp->of[i];
            if (!st || st->kind != S_ARENA || st->slot != sl || g->nodes[i]->op == OP_RESHAPE || mp->def_step[i] < 0)
                continue;
            int a = mp->def_step[i], b = mp->last_step[i] < a ? a : mp->last_step[i];
            double x = left + a * sx, y = y0 + top + st->offset * sy, w = (b - a + 1) * sx,
                   h = node_bytes(g, g->nodes[i]) * sy;
            fprintf(out, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" fill-opacity=\"0.75\" "
                         "stroke=\"black\" stroke-width=\"0.5\"><title>%%%d %s: %zu bytes at offset %zu, live [%d,%d]</title></rect>\n",
                    x + 1, y, w - 2, h < 1 ? 1 : h, colours[st->id % 10], i, g->nodes[i]->name ? g->nodes[i]->name : "",
                    node_bytes(g, g->nodes[i]), st->offset, a, b);
            if (h > 12 && w > 30)
                fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" fill=\"white\">%%%d</text>\n", x + 4, y + 12, i);
        }
    }
    fprintf(out, "</svg>\n");
}

/* ---------------------------------------------------------------- gradients' readiness */

/* Data-parallel training reduces each bucket of gradients as soon as the backward pass is done
 * with it, while the rest of the backward runs (PyTorch DDP's Reducer hooks each param's
 * gradient accumulator; here the schedule is static, so the compiler knows the step). "Done"
 * means no later kernel touches the gradient's bytes: the reduction (another thread, or NCCL on
 * another stream) overwrites them with the sum over the replicas, so a later read would see the
 * sum and a later write would undo it. The memory plan keeps every gradient live to the end of
 * the run and never writes over one in place (can_write_in_place), so after its last touch the
 * bytes stay the gradient's until the optimizer step has read them. */

typedef struct TouchCtx {
    const MemPlan *mp;
    const Storage *want;
    bool hit;
} TouchCtx;

static void touch_read(void *p, Node *n) {
    TouchCtx *c = p;
    if (c->mp->of[n->id] == c->want) c->hit = true;
}

static bool kernel_touches(const MemPlan *mp, const Kernel *k, const Storage *st) {
    TouchCtx c = {mp, st, mp->of[k->root->id] == st};
    if (!c.hit) kernel_reads(k, touch_read, &c);
    return c.hit;
}

typedef struct RootCtx {
    const int *root_of; /* node id -> kernel index whose root it is, or -1 */
    bool *skip;
    bool changed;
} RootCtx;

static void unskip_read(void *p, Node *n) {
    RootCtx *c = p;
    int k = c->root_of[n->id];
    if (k >= 0 && c->skip[k]) c->skip[k] = false, c->changed = true;
}

GradReady *plan_grad_ready(const Graph *g, const KernelList *kl, const MemPlan *const *plans, int nplans) {
    GradReady *r = xalloc(sizeof(GradReady));
    int nk = kl->n;
    r->after = xalloc(sizeof(int) * (size_t)(nk + 1));
    r->skip = xalloc(sizeof(bool) * (size_t)(nk + 1));
    /* the norm's kernels: rooted at a grad_norm node, read by no kernel outside the set (a
     * later pass could have merged a norm node into another value: then it is not skipped) */
    int *root_of = xalloc(sizeof(int) * (size_t)(g->nnodes + 1));
    for (int i = 0; i < g->nnodes; i++) root_of[i] = -1;
    for (int s = 0; s < nk; s++) {
        root_of[kl->k[s]->root->id] = s;
        r->skip[s] = kl->k[s]->root->grad_norm;
    }
    for (RootCtx c = {root_of, r->skip, true}; c.changed;) {
        c.changed = false;
        for (int s = 0; s < nk; s++)
            if (!r->skip[s]) kernel_reads(kl->k[s], unskip_read, &c);
    }
    for (int i = 0; i < g->nparams; i++) r->n += g->grad[i] != NULL;
    r->order = xalloc(sizeof(int) * (size_t)(r->n + 1));
    r->step = xalloc(sizeof(int) * (size_t)(r->n + 1));
    for (int i = 0, k = 0; i < g->nparams; i++) {
        if (!g->grad[i]) continue;
        const Node *d = view_base(g->grad[i]);
        r->step[k] = -1;
        for (int p = 0; p < nplans; p++) {
            const Storage *st = plans[p]->of[d->id];
            if (!st || st->kind != S_ARENA)
                ICE("plan: the gradient of '%s' (%%%d) is not in the arena", g->params[i]->name, d->id);
            for (int s = nk - 1; s > r->step[k]; s--)
                if (!r->skip[s] && kernel_touches(plans[p], kl->k[s], st)) {
                    r->step[k] = s;
                    break;
                }
        }
        if (r->step[k] < 0) ICE("plan: no kernel computes the gradient of '%s' (%%%d)", g->params[i]->name, d->id);
        k++;
    }
    /* ready order: by step, ties the later param first (a stable insertion sort: few gradients) */
    for (int k = 0; k < r->n; k++) {
        int j = k;
        while (j > 0 && (r->step[r->order[j - 1]] > r->step[k] ||
                         (r->step[r->order[j - 1]] == r->step[k] && r->order[j - 1] < k))) {
            r->order[j] = r->order[j - 1];
            j--;
        }
        r->order[j] = k;
    }
    for (int j = 0; j < r->n; j++) r->after[r->step[r->order[j]]] = j + 1;
    return r;
}
