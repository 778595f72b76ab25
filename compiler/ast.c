/*
 * ast.c — the syntax tree the parser (grammar/model.y) builds, and its text form.
 *
 * The constructors are what the grammar's one-line actions call; every node keeps the Loc of
 * its token so the checker can point at the source (a binary operation points at its
 * operator, a call at the op's name). dump_ast prints the tree for --dump=ast: one line per
 * statement, expressions in source form with every binary operation parenthesized, so a test
 * can see exactly how the parser grouped `a + b * c`:
 *
 *   model digits
 *     input x: f32[batch, 64]
 *     param fc1.weight: f32[128, 64]
 *     assign h = relu(linear(x, fc1.weight, fc1.bias))
 *     output logits = linear(h, fc2.weight, fc2.bias)
 */
#include "modelc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

const char *dtype_name(DType dt) {
    switch (dt) {
    case DT_F32: return "f32";
    case DT_I32: return "i32";
    case DT_I64: return "i64";
    case DT_BOOL: return "bool";
    case DT_F16: return "f16";
    case DT_BF16: return "bf16";
    }
    ICE("bad dtype %d", (int)dt);
}

static Ast *new_ast(AstKind kind, Loc loc) {
    Ast *e = xalloc(sizeof *e);
    e->kind = kind;
    e->loc = loc;
    e->depth = 1;
    return e;
}

/* Record that e contains x, and stop at MAX_EXPR_DEPTH: every later phase (checking, fusion,
 * the dumps) walks expressions recursively. */
static void nest(Ast *e, const Ast *x) {
    if (x && x->depth + 1 > e->depth) e->depth = x->depth + 1;
    if (e->depth > MAX_EXPR_DEPTH)
        error_at(e->loc, "expression nested too deeply (more than %d levels); split it into several statements",
                 MAX_EXPR_DEPTH);
}

/* A number literal as written: "42", "0.5", "1e-5", "2.", ".5". is_int when it has no '.',
 * 'e' or 'E'; num is its value (strtod; an out-of-range literal becomes inf or 0, which the
 * checker may reject). An integer is also parsed exactly into ival, and int_ok says whether it
 * is at most MAX_INT_LITERAL: the checker range-checks on int_ok before it negates or uses the
 * value, never on the rounded double. */
Ast *new_num(Loc loc, const char *text) {
    Ast *e = new_ast(AST_NUM, loc);
    e->text = xstrdup(text);
    e->is_int = text[strcspn(text, ".eE")] == '\0';
    e->num = strtod(text, NULL);
    if (e->is_int) {
        errno = 0;
        unsigned long long u = strtoull(text, NULL, 10);
        e->int_ok = errno != ERANGE && u <= (unsigned long long)MAX_INT_LITERAL;
        e->ival = e->int_ok ? (int64_t)u : 0;
    }
    return e;
}

Ast *new_name(Loc loc, const char *name) {
    Ast *e = new_ast(AST_NAME, loc);
    e->name = xstrdup(name);
    return e;
}

Ast *new_call(Loc loc, const char *name, AstArg *args, int nargs) {
    Ast *e = new_ast(AST_CALL, loc);
    e->name = xstrdup(name);
    e->args = args;
    e->nargs = nargs;
    for (int i = 0; i < nargs; i++) nest(e, args[i].val);
    return e;
}

Ast *new_binop(Loc loc, char op, Ast *lhs, Ast *rhs) {
    Ast *e = new_ast(AST_BINOP, loc);
    e->op = op;
    e->lhs = lhs;
    e->rhs = rhs;
    nest(e, lhs);
    nest(e, rhs);
    return e;
}

/* `not x` is logical_not(x). */
Ast *new_not(Loc loc, Ast *x) {
    AstArg *a = xalloc(sizeof *a);
    *a = (AstArg){.key = NULL, .val = x, .loc = x->loc};
    return new_call(loc, "logical_not", a, 1);
}

/* The operator as written: "+", "<=", "and", "**", ... */
const char *binop_text(char op) {
    switch (op) {
    case '^': return "**";
    case 'l': return "<=";
    case 'g': return ">=";
    case 'e': return "==";
    case 'n': return "!=";
    case 'f': return "//";
    case '&': return "and";
    case '|': return "or";
    case '+': return "+";
    case '-': return "-";
    case '*': return "*";
    case '/': return "/";
    case '@': return "@";
    case '%': return "%";
    case '<': return "<";
    case '>': return ">";
    }
    ICE("unknown binary operator '%c'", op);
}

Ast *new_neg(Loc loc, Ast *x) {
    Ast *e = new_ast(AST_NEG, loc);
    e->lhs = x;
    nest(e, x);
    return e;
}

Ast *new_list(Loc loc, Ast **items, int nitems) {
    Ast *e = new_ast(AST_LIST, loc);
    e->items = items;
    e->nitems = nitems;
    return e;
}

Ast *new_bool(Loc loc, bool v) {
    Ast *e = new_ast(AST_BOOL, loc);
    e->bval = v;
    return e;
}

/* Source form: `(a + (b * c))`, `-x`, `-(-x)`, `f(x, axis=-1)`, `[batch, 8, -1]`. */
void print_expr(FILE *out, const Ast *e) {
    if (!e) {
        fputs("<null>", out);
        return;
    }
    switch (e->kind) {
    case AST_NUM:
        fputs(e->text ? e->text : "?", out);
        return;
    case AST_NAME:
        fputs(e->name, out);
        return;
    case AST_BOOL:
        fputs(e->bval ? "true" : "false", out);
        return;
    case AST_BINOP:
        fputc('(', out);
        print_expr(out, e->lhs);
        fprintf(out, " %s ", binop_text(e->op));
        print_expr(out, e->rhs);
        fputc(')', out);
        return;
    case AST_NEG:
        if (e->lhs && e->lhs->kind == AST_NEG) {
            fputs("-(", out);
            print_expr(out, e->lhs);
            fputc(')', out);
        } else {
            fputc('-', out);
            print_expr(out, e->lhs);
        }
        return;
    case AST_CALL:
        fprintf(out, "%s(", e->name);
        for (int i = 0; i < e->nargs; i++) {
            if (i)
                fputs(", ", out);
            if (e->args[i].key)
                fprintf(out, "%s=", e->args[i].key);
            print_expr(out, e->args[i].val);
        }
        fputc(')', out);
        if (e->scope)
            fprintf(out, " as %s", e->scope);
        return;
    case AST_LIST:
        fputc('[', out);
        for (int i = 0; i < e->nitems; i++) {
            if (i)
                fputs(", ", out);
            print_expr(out, e->items[i]);
        }
        fputc(']', out);
        return;
    }
    ICE("bad AST kind %d", (int)e->kind);
}

/* `f32[batch, 64]`; `f32[]` for a scalar. */
static void print_type(FILE *out, const AstType *t) {
    fprintf(out, "%s[", dtype_name(t->dtype));
    for (int i = 0; i < t->rank; i++) {
        if (i)
            fputs(", ", out);
        if (t->dims[i].is_sym)
            fputs(t->dims[i].name, out);
        else
            fprintf(out, "%lld", t->dims[i].value);
    }
    fputc(']', out);
}

static const char *stmt_word(StmtKind k) {
    switch (k) {
    case ST_INPUT: return "input";
    case ST_PARAM: return "param";
    case ST_OUTPUT: return "output";
    case ST_ASSIGN: return "assign";
    case ST_ON: return "on";
    case ST_TARGET: return "target";
    case ST_LOSS: return "loss";
    case ST_OPTIMIZER: return "optimizer";
    case ST_FREEZE: return "freeze";
    }
    ICE("bad statement kind %d", (int)k);
}

/* One line per statement, in source order:
 *   model NAME
 *     input|param NAME: TYPE
 *     output NAME[: TYPE][ = EXPR]
 *     assign NAME = EXPR */
static void dump_stmts(FILE *out, Stmt **stmts, int n) {
    for (int i = 0; i < n; i++) {
        const Stmt *s = stmts[i];
        fprintf(out, "  %s %s", stmt_word(s->kind), s->name);
        for (int j = 1; s->kind == ST_FREEZE && j < s->nnames; j++) fprintf(out, ", %s", s->names[j]->name);
        if (s->kind == ST_OPTIMIZER) { /* optimizer adamw(lr=...) */
            fputc(' ', out);
            print_expr(out, s->expr);
            fputc('\n', out);
            continue;
        }
        if (s->type) {
            fputs(": ", out);
            print_type(out, s->type);
        }
        if (s->expr) {
            fputs(" = ", out);
            print_expr(out, s->expr);
        }
        fputc('\n', out);
        if (s->kind == ST_ON) {
            dump_stmts(out, s->body, s->nbody);
            fputs("  end on\n", out);
        }
    }
}

void dump_ast(FILE *out, const Program *p) {
    for (int i = 0; i < p->nblocks; i++) {
        const Block *b = p->blocks[i];
        fprintf(out, "block %s(", b->name);
        for (int j = 0; j < b->nparams; j++) {
            fprintf(out, "%s%s", j ? ", " : "", b->params[j].name);
            if (b->params[j].def) {
                fputc('=', out);
                print_expr(out, b->params[j].def);
            }
        }
        fputs(")\n", out);
        dump_stmts(out, b->stmts, b->nstmts);
        fputs("  return ", out);
        print_expr(out, b->ret);
        fputc('\n', out);
    }
    fprintf(out, "model %s\n", p->name);
    dump_stmts(out, p->stmts, p->nstmts);
}
