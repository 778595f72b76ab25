/*
 * model.y — the grammar of .model files (bison; pure, reentrant, with locations).
 *
 * This is docs/language.md's grammar, rule for rule:
 *
 *   file     := block* 'model' NAME '{' stmt* '}'
 *   block    := 'block' NAME '(' NAME ('=' attrval)? (',' ...)* ')' '{' stmt* 'return' expr (,expr)* '}'
 *   stmt     := 'input' NAME ':' type | 'param' NAME ':' type
 *             | 'output' NAME ':' type | 'output' NAME (':' type)? '=' expr
 *             | NAME '=' expr | NAME (',' NAME)+ '=' expr    (';' may separate statements)
 *             | NAME ('+=' | '-=' | '*=' | '/=') expr          (NAME = NAME op (expr))
 *             | 'on' DEVICE '{' stmt* '}'                    DEVICE: cpu, cpu:N, cuda, cuda:N
 *   type     := DTYPE '[' (dim (',' dim)*)? ']'
 *   expr     := expr 'or' conj | conj;   conj := conj 'and' neg | neg
 *   neg      := 'not' neg | cmp
 *   cmp      := arith (('<'|'<='|'>'|'>='|'=='|'!=') arith)?     (no chains: a < b < c)
 *   arith    := arith ('+'|'-') term | term
 *   term     := term ('*'|'/'|'//'|'%'|'@') unary | unary
 *   unary    := '-' unary | postfix
 *   postfix  := NAME '(' args? ')' ('as' NAME)? | primary
 *   primary  := NUMBER | NAME | '(' expr ')' | list
 *   arg      := attrval | NAME '=' attrval;   attrval := expr | 'true' | 'false'
 *   list     := '[' (listitem (',' listitem)*)? ']';   listitem := '-'? INT | NAME
 *
 * Two small departures, neither of which changes the language: attrval has no separate
 * `list` alternative because an expr already derives a list (keeping both would be a
 * reduce/reduce conflict), and a float or negative dimension, or a float list item, is parsed
 * and then rejected with a message that says why, rather than as a bare syntax error.
 *
 * Actions are one-liners that call the constructors of ast.c. Syntax errors go through
 * yyreport_syntax_error, which reads the set of tokens the parser could have accepted (exact,
 * thanks to LAC) and turns it into a sentence: "expected ')' or ',' after argument, got '='".
 * The first error exits (error_at), so there is no error recovery.
 */

%code top {
/* The parser's stacks come from the arena, like the AST: a syntax error exits with them in
 * use, and a harness that catches that exit (tests/fuzz) frees them with the arena. */
#define YYMALLOC xalloc
#define YYFREE(p) ((void)(p))
}

%code requires {
#include "modelc.h"

#ifndef YY_TYPEDEF_YY_SCANNER_T
#define YY_TYPEDEF_YY_SCANNER_T
typedef void *yyscan_t;
#endif

/* The lexer's state (flex's yyextra). */
typedef struct LexState {
    const char *src;       /* the whole file */
    int line, col;         /* where the next token starts */
    size_t off;            /* byte offset of the next token */
    size_t tok_off, tok_len; /* the text just matched (a token, a space or a comment) */
    size_t cur_off, cur_len;   /* the last token returned (len 0: end of file), */
    int cur_line, cur_col;     /* and where it starts */
    size_t prev_off, prev_len; /* the token before it, */
    int prev_line, prev_col;   /* and where it starts */
    int end_line, end_col; /* just past the last real token: where EOF is reported */
} LexState;

/* Growable vectors for the list rules (arena-allocated). */
typedef struct StmtVec { Stmt **v; int n, cap; } StmtVec;
typedef struct ArgVec { AstArg *v; int n, cap; } ArgVec;
typedef struct AstVec { Ast **v; int n, cap; } AstVec;
typedef struct DimVec { AstDim *v; int n, cap; } DimVec;
typedef struct BlockVec { Block **v; int n, cap; } BlockVec;
typedef struct BParamVec { BlockParam *v; int n, cap; } BParamVec;

/* What the parser hands back, and what its error messages need to know. */
typedef struct ParseResult {
    Program *prog;
    const char *model_name; /* set once 'model NAME' is read */
    Loc brace_loc;          /* the model's '{' */
    int nregions;           /* 'on' regions open where the parser is (innermost last) */
    Loc region_brace[64];   /* their '{' (the first 64) */
    const char *region_dev[64];
} ParseResult;
}

%code {
#include "lex.yy.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

static Loc L(YYLTYPE l) { return (Loc){l.first_line, l.first_column}; }

/* Appends to a vector, doubling its capacity in the arena. */
#define PUSH(vec, x)                                                              \
    do {                                                                          \
        if ((vec)->n == (vec)->cap) {                                             \
            int cap_ = (vec)->cap ? 2 * (vec)->cap : 4;                           \
            (vec)->v = xrealloc_array((vec)->v, (vec)->n, cap_, sizeof *(vec)->v); \
            (vec)->cap = cap_;                                                    \
        }                                                                         \
        (vec)->v[(vec)->n++] = (x);                                               \
    } while (0)

static Stmt *new_stmt(StmtKind kind, YYLTYPE at, const char *name, YYLTYPE name_at,
                      AstType *type, Ast *expr);
static AstType *new_type(YYLTYPE at, const char *dtype, DimVec *dims);
static AstDim int_dim(YYLTYPE at, const char *text);
static AstDim dim_of(YYLTYPE at, Ast *e);
static void yyerror(YYLTYPE *at, yyscan_t scanner, ParseResult *res, const char *msg);

/* A training statement: the word before the name says which ('target y: i64[batch]', 'loss l =
 * ...', 'optimizer adamw(...)', 'freeze a, b'); any other word there is a syntax error. */
static Stmt *train_stmt(ParseResult *res, const char *word, YYLTYPE at, StmtKind kind, const char *name,
                        YYLTYPE name_at) {
    (void)res;
    static const char *const words[] = {[ST_TARGET] = "target", [ST_LOSS] = "loss", [ST_OPTIMIZER] = "optimizer",
                                        [ST_FREEZE] = "freeze"};
    if (strcmp(word, words[kind])) {
        if (!strcmp(word, "target") || !strcmp(word, "loss") || !strcmp(word, "optimizer") || !strcmp(word, "freeze"))
            error_at(L(at), "'%s' is followed by %s", word,
                     !strcmp(word, "target") ? "a name, ':' and a type: target labels: i64[batch]"
                     : !strcmp(word, "loss") ? "a name, '=' and the loss: loss l = cross_entropy(logits, labels)"
                     : !strcmp(word, "optimizer") ? "the optimizer's call: optimizer adamw(lr=1e-3)"
                                                  : "param names: freeze embed.weight, fc1.bias");
        error_at(L(at), "expected a statement, got the name '%s' followed by the name '%s' (a statement starts with "
                 "a name and '=', or with input, param, output, target, loss, optimizer, freeze or on)", word, name);
    }
    Stmt *s = xalloc(sizeof *s);
    s->kind = kind;
    s->loc = L(at);
    s->name = (char *)name;
    s->name_loc = L(name_at);
    return s;
}

/* Remember an open 'on' region, so a syntax error inside it can name it. */
static void open_region(ParseResult *res, const char *dev, YYLTYPE brace) {
    if (res->nregions < 64) {
        res->region_brace[res->nregions] = (Loc){brace.first_line, brace.first_column};
        res->region_dev[res->nregions] = dev;
    }
    res->nregions++;
}
}

%define api.pure full
%define parse.error custom
%define parse.lac full
%locations
%expect 0
%lex-param   {yyscan_t scanner}
%parse-param {yyscan_t scanner} {ParseResult *res}

%union {
    char *str;
    Ast *ast;
    AstArg arg;
    AstDim dim;
    AstType *type;
    Stmt *stmt;
    StmtVec *stmts;
    ArgVec *args;
    AstVec *items;
    DimVec *dims;
    Block *block;
    BlockVec *blocks;
    BlockParam bparam;
    BParamVec *bparams;
}

%token END 0 "end of file"
%token MODEL "'model'" INPUT "'input'" PARAM "'param'" OUTPUT "'output'"
%token TRUE "'true'" FALSE "'false'"
%token BLOCK "'block'" RETURN "'return'" AS "'as'" ON "'on'" POW "'**'"
%token LE "'<='" GE "'>='" EQ "'=='" NE "'!='" FLOORDIV "'//'" AND "'and'" OR "'or'" NOT "'not'"
%token ADDEQ "'+='" SUBEQ "'-='" MULEQ "'*='" DIVEQ "'/='"
%token <str> NAME "a name" INT "an integer" FLOAT "a number"

%type <stmts> stmts
%type <stmt> stmt
%type <str> ordinal
%type <type> type
%type <dims> dims dims_opt
%type <dim> dim
%type <ast> expr conj negation cmp arith term unary power postfix primary list attrval item
%type <args> args args_opt
%type <arg> arg
%type <items> rets names items items_opt freezes
%type <block> block
%type <blocks> blocks
%type <bparam> bparam
%type <bparams> bparams

%%

file
    : blocks MODEL NAME { res->model_name = $3; }
      '{' { res->brace_loc = L(@5); }
      stmts '}'
        {
            Program *p = xalloc(sizeof *p);
            p->name = $3; p->loc = L(@2); p->stmts = $7->v; p->nstmts = $7->n;
            p->blocks = $1->v; p->nblocks = $1->n;
            res->prog = p;
        }
    ;

blocks
    : %empty                           { $$ = xalloc(sizeof *$$); }
    | blocks block                     { PUSH($1, $2); $$ = $1; }
    ;

block
    : BLOCK NAME '(' bparams ')' '{' stmts RETURN rets '}'
        {
            Block *b = xalloc(sizeof *b);
            b->name = $2; b->loc = L(@2); b->params = $4->v; b->nparams = $4->n;
            b->stmts = $7->v; b->nstmts = $7->n; b->rets = $9->v; b->nrets = $9->n; b->ret = $9->v[0];
            b->ret_loc = L(@8);
            $$ = b;
        }
    ;

rets
    : expr                             { $$ = xalloc(sizeof *$$); PUSH($$, $1); }
    | rets ',' expr                    { PUSH($1, $3); $$ = $1; }
    ;

freezes
    : NAME                             { $$ = xalloc(sizeof *$$); PUSH($$, new_name(L(@1), $1)); }
    | freezes ',' NAME                 { PUSH($1, new_name(L(@3), $3)); $$ = $1; }
    ;

names
    : NAME ',' NAME                    { $$ = xalloc(sizeof *$$); PUSH($$, new_name(L(@1), $1)); PUSH($$, new_name(L(@3), $3)); }
    | names ',' NAME                   { PUSH($1, new_name(L(@3), $3)); $$ = $1; }
    ;

bparams
    : bparam                           { $$ = xalloc(sizeof *$$); PUSH($$, $1); }
    | bparams ',' bparam               { PUSH($1, $3); $$ = $1; }
    ;

bparam
    : NAME                             { $$ = (BlockParam){.name = $1, .def = NULL, .loc = L(@1)}; }
    | INPUT                            { $$ = (BlockParam){.name = xstrdup("input"), .def = NULL, .loc = L(@1)}; }
    | NAME '=' attrval                 { $$ = (BlockParam){.name = $1, .def = $3, .loc = L(@1)}; }
    ;

stmts
    : %empty           { $$ = xalloc(sizeof *$$); }
    | stmts stmt       { PUSH($1, $2); $$ = $1; }
    | stmts ';'        { $$ = $1; }
    ;

stmt
    : INPUT NAME ':' type              { $$ = new_stmt(ST_INPUT, @1, $2, @2, $4, NULL); }
    | PARAM NAME ':' type              { $$ = new_stmt(ST_PARAM, @1, $2, @2, $4, NULL); }
    | OUTPUT NAME ':' type             { $$ = new_stmt(ST_OUTPUT, @1, $2, @2, $4, NULL); }
    | OUTPUT NAME ':' type '=' expr    { $$ = new_stmt(ST_OUTPUT, @1, $2, @2, $4, $6); }
    | OUTPUT NAME '=' expr             { $$ = new_stmt(ST_OUTPUT, @1, $2, @2, NULL, $4); }
    | NAME '=' expr                    { $$ = new_stmt(ST_ASSIGN, @1, $1, @1, NULL, $3); }
    | INPUT '=' expr                   { $$ = new_stmt(ST_ASSIGN, @1, xstrdup("input"), @1, NULL, $3); }
    | NAME ADDEQ expr                  { $$ = new_stmt(ST_ASSIGN, @1, $1, @1, NULL, new_binop(L(@2), '+', new_name(L(@1), $1), $3)); }
    | NAME SUBEQ expr                  { $$ = new_stmt(ST_ASSIGN, @1, $1, @1, NULL, new_binop(L(@2), '-', new_name(L(@1), $1), $3)); }
    | NAME MULEQ expr                  { $$ = new_stmt(ST_ASSIGN, @1, $1, @1, NULL, new_binop(L(@2), '*', new_name(L(@1), $1), $3)); }
    | NAME DIVEQ expr                  { $$ = new_stmt(ST_ASSIGN, @1, $1, @1, NULL, new_binop(L(@2), '/', new_name(L(@1), $1), $3)); }
    /* training statements: 'target', 'loss', 'optimizer' and 'freeze' are words only here, so a
     * tensor may still be named loss (the word, then a name, starts these statements only) */
    | NAME NAME ':' type               { $$ = train_stmt(res, $1, @1, ST_TARGET, $2, @2);
                                         $$->type = $4; }
    | NAME NAME '=' expr               { $$ = train_stmt(res, $1, @1, ST_LOSS, $2, @2); $$->expr = $4; }
    | NAME NAME '(' args_opt ')'       { $$ = train_stmt(res, $1, @1, ST_OPTIMIZER, $2, @2);
                                         $$->expr = new_call(L(@2), $2, $4->v, $4->n); }
    | NAME freezes                     { $$ = train_stmt(res, $1, @1, ST_FREEZE, $2->v[0]->name, @2);
                                         $$->names = $2->v; $$->nnames = $2->n; }
    | names '=' expr                   { $$ = new_stmt(ST_ASSIGN, @1, $1->v[0]->name, @1, NULL, $3);
                                         $$->names = $1->v; $$->nnames = $1->n; }
    | ON NAME '{' { open_region(res, $2, @3); } stmts '}'
        { $$ = new_stmt(ST_ON, @1, $2, @2, NULL, NULL); $$->body = $5->v; $$->nbody = $5->n; res->nregions--; }
    | ON NAME ':' ordinal '{' { open_region(res, xprintf("%s:%s", $2, $4), @5); } stmts '}'
        { $$ = new_stmt(ST_ON, @1, xprintf("%s:%s", $2, $4), @2, NULL, NULL); $$->body = $7->v; $$->nbody = $7->n; res->nregions--; }
    | ON NAME ':' bad_ordinal          { $$ = NULL; }
    ;

/* A device ordinal is a plain decimal: 0, 1, 12 (no sign, no leading zero, no fraction). */
ordinal
    : INT                              { if ($1[0] == '0' && $1[1]) error_at(L(@1), "expected a device ordinal (a plain decimal such as 1), got '%s'", $1); $$ = $1; }
    ;

bad_ordinal
    : NAME                             { error_at(L(@1), "expected a device ordinal after ':', got '%s'", $1); }
    | FLOAT                            { error_at(L(@1), "expected a device ordinal after ':', got '%s'", $1); }
    | '-'                              { error_at(L(@1), "expected a device ordinal after ':', got '-'"); }
    | '{'                              { error_at(L(@1), "expected a device ordinal after ':', got '{'"); }
    ;

type
    : NAME '[' dims_opt ']'            { $$ = new_type(@1, $1, $3); }
    ;

dims_opt
    : %empty                           { $$ = xalloc(sizeof *$$); }
    | dims
    ;

dims
    : dim                              { $$ = xalloc(sizeof *$$); PUSH($$, $1); }
    | dims ',' dim                     { PUSH($1, $3); $$ = $1; }
    ;

/* A dimension: an integer, a name (the batch, or a block's integer), or an integer expression
 * (2 * C, size(x, 1) // 4) that the checker computes. */
dim
    : arith                            { $$ = dim_of(@1, $1); }
    ;

/* Python's precedence: or < and < not < comparisons < + - < * / // % @ < unary - < **.
 * A comparison does not chain (a < b < c is a syntax error, not Python's a < b and b < c). */
expr
    : expr OR conj                     { $$ = new_binop(L(@2), '|', $1, $3); }
    | conj
    ;

conj
    : conj AND negation                { $$ = new_binop(L(@2), '&', $1, $3); }
    | negation
    ;

negation
    : NOT negation                     { $$ = new_not(L(@1), $2); }
    | cmp
    ;

cmp
    : arith '<' arith                  { $$ = new_binop(L(@2), '<', $1, $3); }
    | arith '>' arith                  { $$ = new_binop(L(@2), '>', $1, $3); }
    | arith LE arith                   { $$ = new_binop(L(@2), 'l', $1, $3); }
    | arith GE arith                   { $$ = new_binop(L(@2), 'g', $1, $3); }
    | arith EQ arith                   { $$ = new_binop(L(@2), 'e', $1, $3); }
    | arith NE arith                   { $$ = new_binop(L(@2), 'n', $1, $3); }
    | arith
    ;

arith
    : arith '+' term                   { $$ = new_binop(L(@2), '+', $1, $3); }
    | arith '-' term                   { $$ = new_binop(L(@2), '-', $1, $3); }
    | term
    ;

term
    : term '*' unary                   { $$ = new_binop(L(@2), '*', $1, $3); }
    | term '/' unary                   { $$ = new_binop(L(@2), '/', $1, $3); }
    | term '@' unary                   { $$ = new_binop(L(@2), '@', $1, $3); }
    | term FLOORDIV unary              { $$ = new_binop(L(@2), 'f', $1, $3); }
    | term '%' unary                   { $$ = new_binop(L(@2), '%', $1, $3); }
    | unary
    ;

unary
    : '-' unary                        { $$ = new_neg(L(@1), $2); }
    | power
    ;

/* a ** b binds tighter than unary minus on its left and groups to the right, as in Python:
 * -x ** 2 is -(x ** 2), and 2 ** -1 is 0.5. */
power
    : postfix
    | postfix POW unary                { $$ = new_binop(L(@2), '^', $1, $3); }
    ;

postfix
    : NAME '(' args_opt ')'            { $$ = new_call(L(@1), $1, $3->v, $3->n); }
    | NAME '(' args_opt ')' AS NAME    { $$ = new_call(L(@1), $1, $3->v, $3->n); $$->scope = $6; $$->scope_loc = L(@6); }
    | primary
    ;

primary
    : INT                              { $$ = new_num(L(@1), $1); }
    | FLOAT                            { $$ = new_num(L(@1), $1); }
    | NAME                             { $$ = new_name(L(@1), $1); }
    | INPUT                            { $$ = new_name(L(@1), xstrdup("input")); } /* forward(self, input) */
    | '(' expr ')'                     { $$ = $2; }
    | list
    ;

args_opt
    : %empty                           { $$ = xalloc(sizeof *$$); }
    | args
    ;

args
    : arg                              { $$ = xalloc(sizeof *$$); PUSH($$, $1); }
    | args ',' arg                     { PUSH($1, $3); $$ = $1; }
    ;

arg
    : attrval                          { $$ = (AstArg){.key = NULL, .val = $1, .loc = L(@1)}; }
    | NAME '=' attrval                 { $$ = (AstArg){.key = $1, .val = $3, .loc = L(@1)}; }
    ;

attrval
    : expr
    | TRUE                             { $$ = new_bool(L(@1), true); }
    | FALSE                            { $$ = new_bool(L(@1), false); }
    ;

list
    : '[' items_opt ']'                { $$ = new_list(L(@1), $2->v, $2->n); }
    ;

items_opt
    : %empty                           { $$ = xalloc(sizeof *$$); }
    | items
    ;

items
    : item                             { $$ = xalloc(sizeof *$$); PUSH($$, $1); }
    | items ',' item                   { PUSH($1, $3); $$ = $1; }
    ;

/* a list item: an integer, a name, a number (scale_factor=[1.5, 2]; integer lists refuse it), or
 * an integer expression ([2 * C, -1], [size(x, 0) // 2]) */
item
    : arith
    ;

%%

static Stmt *new_stmt(StmtKind kind, YYLTYPE at, const char *name, YYLTYPE name_at,
                      AstType *type, Ast *expr) {
    Stmt *s = xalloc(sizeof *s);
    s->kind = kind;
    s->loc = L(at);
    s->name = (char *)name;
    s->name_loc = L(name_at);
    s->type = type;
    s->expr = expr;
    return s;
}

/* `dtype` is the name before '[': only f32, f16, bf16, i32, i64 and bool are types. */
static AstType *new_type(YYLTYPE at, const char *dtype, DimVec *dims) {
    AstType *t = xalloc(sizeof *t);
    if (!strcmp(dtype, "f32"))
        t->dtype = DT_F32;
    else if (!strcmp(dtype, "i32"))
        t->dtype = DT_I32;
    else if (!strcmp(dtype, "i64"))
        t->dtype = DT_I64;
    else if (!strcmp(dtype, "bool"))
        t->dtype = DT_BOOL;
    else if (!strcmp(dtype, "f16"))
        t->dtype = DT_F16;
    else if (!strcmp(dtype, "bf16"))
        t->dtype = DT_BF16;
    else
        error_at(L(at), "unknown dtype '%s' (expected f32, f16, bf16, i32, i64 or bool)", dtype);
    t->dims = dims->v;
    t->rank = dims->n;
    t->loc = L(at);
    return t;
}

static AstDim dim_of(YYLTYPE at, Ast *e) {
    if (e->kind == AST_NUM && !e->is_int)
        error_at(L(at), "a dimension must be an integer or a name, got '%s'", e->text);
    if (e->kind == AST_NUM) return int_dim(at, e->text);
    if (e->kind == AST_NEG && e->lhs->kind == AST_NUM && e->lhs->is_int) {
        AstDim d = int_dim(at, e->lhs->text);
        d.value = -d.value;
        return d;
    }
    if (e->kind == AST_NAME) return (AstDim){.is_sym = true, .name = e->name, .loc = L(at)};
    return (AstDim){.expr = e, .loc = L(at)};
}

static AstDim int_dim(YYLTYPE at, const char *text) {
    errno = 0;
    long long v = strtoll(text, NULL, 10);
    if (errno == ERANGE)
        error_at(L(at), "dimension '%s' is too large", text);
    return (AstDim){.is_sym = false, .value = v, .loc = L(at)};
}

/* ---------------------------------------------------------------- syntax errors */

/* The kind of a one-character token, e.g. K(')'). */
#define K(c) YYTRANSLATE(c)

/* "'text'" for the token at [off, off+len) of the source, or "end of file" when len is 0. */
static const char *token_text(const LexState *ls, size_t off, size_t len) {
    if (len == 0)
        return "end of file";
    return xprintf("'%.*s'", (int)len, ls->src + off);
}

/* The names of a set of tokens in grammar order, as "A, B or C". */
static const char *list_tokens(const bool *in) {
    const char *out = "";
    int n = 0, total = 0;
    for (int k = 0; k < YYNTOKENS; k++)
        total += in[k];
    for (int k = 0; k < YYNTOKENS; k++) {
        if (!in[k])
            continue;
        const char *name = yysymbol_name((yysymbol_kind_t)k);
        out = n == 0 ? name : xprintf("%s%s%s", out, n == total - 1 ? " or " : ", ", name);
        n++;
    }
    return out;
}

/* Reports a syntax error and exits. The set of tokens the parser could have accepted (exact,
 * thanks to LAC) and the symbol it had just read say where we are; each context gets a
 * sentence in the words of docs/language.md:
 *   expected ')' or ',' after argument, got '='
 *   expected '}' at end of model 'digits', got end of file
 * Anything not foreseen falls back to listing the expected tokens. */
static int yyreport_syntax_error(const yypcontext_t *ctx, yyscan_t scanner, ParseResult *res) {
    const LexState *ls = yyget_extra(scanner);
    yysymbol_kind_t exp[YYNTOKENS];
    int nexp = yypcontext_expected_tokens(ctx, exp, YYNTOKENS);
    bool E[YYNTOKENS] = {0};
    for (int i = 0; i < nexp && i < YYNTOKENS; i++)
        if (exp[i] >= 0)
            E[exp[i]] = true;
    yysymbol_kind_t tok = yypcontext_token(ctx);
    Loc at = L(*yypcontext_location(ctx));
    const char *got = tok == YYSYMBOL_YYEOF ? "end of file"
                                            : token_text(ls, ls->cur_off, ls->cur_len);
    const char *prev = token_text(ls, ls->prev_off, ls->prev_len);
    /* The symbol just read (or reduced), and the one before it. */
    yysymbol_kind_t sym = YY_ACCESSING_SYMBOL(ctx->yyssp[0]);
    yysymbol_kind_t below = YYSYMBOL_YYEMPTY;
    if (ctx->yyssp[0] != 0) /* state 0 is the bottom of the stack and only there */
        below = YY_ACCESSING_SYMBOL(ctx->yyssp[-1]);

    bool expr_start = E[YYSYMBOL_NAME] && E[YYSYMBOL_INT] && E[YYSYMBOL_FLOAT] &&
                      E[K('(')] && E[K('[')] && E[K('-')];
    bool after_operand = E[K('+')] && E[K('-')] && E[K('*')] && E[K('/')] && E[K('@')];
    /* Inside f32[...] rather than a list [...]: the '[' follows the dtype's name. */
    bool in_type = below == YYSYMBOL_NAME || sym == YYSYMBOL_dims || below == YYSYMBOL_dims;

    bool cmp_tok = tok == K('<') || tok == K('>') || tok == YYSYMBOL_LE || tok == YYSYMBOL_GE ||
                   tok == YYSYMBOL_EQ || tok == YYSYMBOL_NE;
    /* a comparison where none may follow, right after an operand: a chain (a < b < c) */
    char last = ls->prev_len ? ls->src[ls->prev_off + ls->prev_len - 1] : 0;
    if (cmp_tok && !expr_start && (isalnum((unsigned char)last) || last == ')' || last == ']' || last == '_'))
        error_at(at, "comparisons do not chain: write (a < b) and (b < c), not a < b < c (got %s)", got);
    if (E[YYSYMBOL_MODEL])
        error_at(at, "expected 'model' at the start of the file, got %s", got);
    if (sym == YYSYMBOL_MODEL)
        error_at(at, "expected the model's name after 'model', got %s", got);
    if (sym == K(':') && below == YYSYMBOL_NAME && E[YYSYMBOL_INT] && E[K('{')])
        error_at(at, "expected a device ordinal after ':', got %s", got);
    if (E[K('{')] && (sym == YYSYMBOL_ordinal || below == YYSYMBOL_ON))
        error_at(at, "expected '{' to open the 'on' region after its device, got %s", got);
    if (E[K('{')])
        error_at(at, "expected '{' after model %s, got %s", prev, got);
    if (E[YYSYMBOL_YYEOF])
        error_at(at, "expected end of file after the '}' that ends model '%s', got %s",
                 res->model_name, got);
    if (E[K('}')]) {
        if (tok == YYSYMBOL_YYEOF && res->nregions > 0) {
            int r = res->nregions <= 64 ? res->nregions - 1 : 63;
            error_begin(at, "expected '}' at end of region 'on %s', got end of file", res->region_dev[r]);
            note_at(res->region_brace[r], "to match this '{'");
            diag_exit();
        }
        if (tok == YYSYMBOL_YYEOF) {
            error_begin(at, "expected '}' at end of model '%s', got end of file",
                        res->model_name);
            note_at(res->brace_loc, "to match this '{'");
            diag_exit();
        }
        if (E[K('=')])
            error_at(at, "expected '=', a statement or '}', got %s", got);
        error_at(at, "expected a statement or '}', got %s", got);
    }
    if (sym == YYSYMBOL_INPUT || sym == YYSYMBOL_PARAM || sym == YYSYMBOL_OUTPUT)
        error_at(at, "expected a name after %s, got %s", prev, got);
    if (E[K(':')] && E[K('=')])
        error_at(at, "expected ':' or '=' after output %s, got %s", prev, got);
    if (E[K(':')])
        error_at(at, "expected ':' and a type after %s, got %s", prev, got);
    if (sym == K(':'))
        error_at(at, "expected a type such as f32[batch, 64] after ':', got %s", got);
    if (E[K('[')] && !expr_start) {
        const char *dtype = xstrndup(ls->src + ls->prev_off, ls->prev_len);
        if (strcmp(dtype, "f32") && strcmp(dtype, "i32") && strcmp(dtype, "i64") && strcmp(dtype, "bool") &&
            strcmp(dtype, "f16") && strcmp(dtype, "bf16"))
            error_at((Loc){ls->prev_line, ls->prev_col},
                     "expected a type such as f32[batch, 64] after ':', got %s", prev);
        error_at(at, "expected '[' after %s (a scalar is %s[]), got %s", prev, dtype, got);
    }
    if (E[K('=')] && !E[K(',')] && !after_operand)
        error_at(at, "expected '=' after %s, got %s", prev, got);
    if (E[YYSYMBOL_TRUE])
        error_at(at, "expected an attribute value after '=', got %s", got);
    if (expr_start && E[K(')')])
        error_at(at, "expected an argument or ')', got %s", got);
    if (expr_start)
        error_at(at, "expected an expression, got %s", got);
    if (E[K(',')] && E[K(')')])
        error_at(at, "expected ')' or ',' after argument, got %s", got);
    if (after_operand && E[K(')')])
        error_at(at, "expected ')' after expression, got %s", got);
    if (E[K(']')] && E[YYSYMBOL_INT] && sym == K('['))
        error_at(at, in_type ? "expected a dimension or ']', got %s"
                             : "expected a list item (an integer or a name) or ']', got %s",
                 got);
    if (E[YYSYMBOL_INT] && sym == K('-'))
        error_at(at, "expected an integer after '-', got %s", got);
    if (E[YYSYMBOL_INT])
        error_at(at, in_type ? "expected a dimension after ',', got %s"
                             : "expected a list item (an integer or a name) after ',', got %s",
                 got);
    if (E[K(',')] && E[K(']')])
        error_at(at, in_type ? "expected ',' or ']' after dimension, got %s"
                             : "expected ',' or ']' after list item, got %s",
                 got);
    error_at(at, "expected %s, got %s", list_tokens(E), got);
}

/* Bison calls this only when its stack overflows (YYMAXDEPTH): syntax errors go through
 * yyreport_syntax_error. */
static void yyerror(YYLTYPE *at, yyscan_t scanner, ParseResult *res, const char *msg) {
    error_at(L(*at), "expression nested too deeply (%s)", msg);
}

/* Parses a whole file; see modelc.h. Lexical and syntax errors exit through error_at. */
static yyscan_t scanner;

void parse_cleanup(void) {
    if (scanner) yylex_destroy(scanner);
    scanner = NULL;
}

Program *parse_program(const char *path, const char *src) {
    diag_init(path, src);
    LexState ls = {.src = src, .line = 1, .col = 1, .end_line = 1, .end_col = 1};
    ParseResult res = {0};
    /* scanner is static: it stays reachable if an error exits mid-parse, and parse_cleanup
     * frees it when a harness's exit hook returned to the harness instead */
    if (yylex_init_extra(&ls, &scanner))
        fatal("cannot initialize the lexer: %s", strerror(errno));
    YY_BUFFER_STATE buf = yy_scan_bytes(src, (int)strlen(src), scanner);
    int rc = yyparse(scanner, &res);
    yy_delete_buffer(buf, scanner);
    yylex_destroy(scanner);
    scanner = NULL;
    if (rc != 0 || !res.prog)
        ICE("parser failed without reporting an error (rc %d)", rc);
    return res.prog;
}
