/*
 * place.c — device placement: which device slot each node runs on, and the transfers between.
 *
 * Slot 0 is the model's device, chosen when the program starts (`--device`, like PyTorch's
 * model.to(device)); every 'on DEVICE { ... }' region pins its nodes to another slot, the
 * compiled counterpart of PyTorch's device context. Inputs arrive on slot 0, or on the slot of
 * the region that declares them. A reshape is a view and stays with its source. A param
 * declared in a region lives there; any other param lives on the slot of its first consumer; a
 * constant is inlined wherever it is used. A slot that ends up with no live node is dropped, so
 * its device is not required at run time. Then every edge whose producer and consumer sit on different
 * slots gets an explicit OP_TRANSFER node on the consumer's slot, one per value and destination,
 * so no kernel ever reads memory of another device (field cases B14, B15). A transfer of a
 * param-only value is itself param-only, so hoisting moves it to load time: weights cross
 * devices once, not on every run.
 */
#include "modelc.h"

#include <string.h>

/* The transfer of src to `slot` made so far, or NULL: memo[head[src id]], then along next[]
 * (one entry per destination of src, so a lookup does not scan every transfer). */
static Node *find_transfer(Node **memo, const int *head, const int *next, Node *src, int slot) {
    for (int k = head[src->id]; k >= 0; k = next[k])
        if (memo[k]->slot == slot) return memo[k];
    return NULL;
}

/* Remove the slots no live node uses (a region that holds only constants, or whose values
 * nothing reads): their device is not needed at run time. Renumbers the rest in order. */
static void drop_empty_slots(Graph *g) {
    int *map = xalloc(sizeof(int) * (size_t)g->nslots);
    bool *used = xalloc(sizeof(bool) * (size_t)g->nslots);
    used[0] = true;
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        if (n->slot > 0 && !n->dead) used[n->slot] = true; /* an unused input pins nothing */
    }
    int k = 0;
    for (int s = 0; s < g->nslots; s++) {
        map[s] = used[s] ? k : 0;
        if (used[s]) g->slots[k++] = g->slots[s];
    }
    g->nslots = k;
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->slot > 0) g->nodes[i]->slot = map[g->nodes[i]->slot];
}

void place_graph(Graph *g) {
    analyze_uses(g);
    /* An input declared in a region arrives on that region's device; a param declared in one
     * lives there (its weights are loaded to that device). Other params and constants follow
     * their consumers. */
    for (int i = 0; i < g->nnodes; i++) {
        Node *n = g->nodes[i];
        if ((n->op == OP_PARAM && n->slot <= 0) || n->op == OP_CONST) n->slot = -1;
    }
    for (int i = 0; i < g->nnodes; i++) { /* a param goes to its first consumer's slot */
        Node *n = g->nodes[i];
        if (n->dead) continue;
        for (int j = 0; j < n->nin; j++) {
            Node *p = n->in[j];
            while (p->op == OP_RESHAPE && p->in[0]->op != OP_INPUT) p = p->in[0];
            if (p->op == OP_PARAM && p->slot < 0 && n->op != OP_RESHAPE) p->slot = n->slot;
        }
    }
    for (int i = 0; i < g->nparams; i++)
        if (g->params[i]->slot < 0) g->params[i]->slot = 0; /* unused params */
    for (int i = 0; i < g->nnodes; i++) {
        Node *n = g->nodes[i];
        if (n->op == OP_RESHAPE) n->slot = n->in[0]->slot < 0 ? 0 : n->in[0]->slot;
    }
    drop_empty_slots(g);
    if (g->nslots == 1) return;

    /* Transfers. */
    int n0 = g->nnodes, nmemo = 0;
    Node **memo = xalloc(sizeof(Node *) * (size_t)(n0 * MAX_IN + 1));
    int *head = xalloc(sizeof(int) * (size_t)(n0 + 1)), *next = xalloc(sizeof(int) * (size_t)(n0 * MAX_IN + 1));
    for (int i = 0; i < n0; i++) head[i] = -1;
    for (int i = 0; i < n0; i++) {
        Node *n = g->nodes[i];
        if (n->dead || n->op == OP_RESHAPE || n->slot < 0) continue;
        for (int j = 0; j < n->nin; j++) {
            Node *p = n->in[j];
            if (p->op == OP_CONST || p->slot == n->slot) continue;
            ASSERT(p->id < n0); /* an operand of the graph before transfers */
            Node *t = find_transfer(memo, head, next, p, n->slot);
            if (!t) {
                t = new_node_for(g, OP_TRANSFER, n); /* on the consumer's slot */
                t->in[0] = p;
                t->nin = 1;
                t->dtype = p->dtype;
                t->shape = p->shape;
                memo[nmemo] = t;
                next[nmemo] = head[p->id];
                head[p->id] = nmemo++;
            }
            n->in[j] = t;
        }
    }
    toposort_graph(g);
}

void dump_placement(FILE *out, const Graph *g) {
    char buf[256];
    fprintf(out, "placement %s: %d device slot%s\n", g->name, g->nslots, g->nslots == 1 ? "" : "s");
    for (int s = 0; s < g->nslots; s++)
        fprintf(out, "  slot %d: %s\n", s, s == 0 ? "the model's device (--device, default auto)" : g->slots[s].name);
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        if (n->dead || n->op == OP_CONST) continue;
        const char *where = n->slot <= 0 ? "default" : g->slots[n->slot].name;
        if (n->op == OP_TRANSFER) {
            const Node *src = n->in[0];
            fprintf(out, "  %%%-4d transfer %%%d %s -> %s, %s%s%s\n", n->id, src->id,
                    src->slot <= 0 ? "default" : g->slots[src->slot].name, where, dtype_name(n->dtype),
                    shape_str(&n->shape, g->sym_names, buf, sizeof buf), n->init ? " (at load time)" : "");
            continue;
        }
        fprintf(out, "  %%%-4d %-10s %-8s", n->id, op_name(n->op), where);
        if (n->name) fprintf(out, "  ; %s", n->name);
        fprintf(out, "\n");
    }
}
