/*
 * diag.c — diagnostics, in the form gcc and clang use:
 *
 *   digits.model:9:12: error: expected ')' or ',' after argument, got '='
 *     h = relu(x = 1)
 *                ^
 *
 * Every phase reports through here with the Loc its AST or graph node kept from the parser.
 * The first error ends the compilation with status 1 (error_at, or error_begin + note_at +
 * diag_exit when notes follow). Warnings are counted and compilation goes on. A compiler bug
 * (ICE/ASSERT) says "internal error" and exits with 2, so it is never mistaken for a user's
 * mistake. Nothing here allocates from the arena: fatal() must work when the arena cannot.
 * A fuzzing harness may redirect the messages and catch the exits (diag_set_exit_hook).
 */
#include "modelc.h"

#include <stdlib.h>
#include <string.h>

int diag_warnings;

/* The block instantiations being checked, outermost first: each error inside a block gets a
 * note per level pointing at the call. */
#define MAX_CONTEXT 64
static Loc ctx_loc[MAX_CONTEXT];
static const char *ctx_msg[MAX_CONTEXT];
static int nctx;

static FILE *diag_stream; /* NULL: stderr */
static void (*diag_hook)(int status);

static FILE *diag_out(void) { return diag_stream ? diag_stream : stderr; }

void diag_set_stream(FILE *f) { diag_stream = f; }

void diag_set_exit_hook(void (*hook)(int status)) { diag_hook = hook; }

/* exit(status), or the harness's hook (which does not return). */
static noreturn void diag_quit(int status) {
    fflush(diag_out());
    if (diag_hook) diag_hook(status);
    exit(status);
}

static const char *diag_path = "<input>";
static const char *diag_src; /* the whole file, NUL-terminated; NULL: no quoting */

void diag_init(const char *path, const char *src) {
    diag_path = path ? path : "<input>";
    diag_src = src;
    nctx = 0; /* a compilation left by an error (a harness's hook) may have left some */
}

/* Finds line `line` (1-based) of the source; sets *len to its length without "\n" or "\r\n".
 * NULL if there is no such line (line 0, or past the end of the file). */
static const char *find_line(int line, size_t *len) {
    if (!diag_src || line <= 0)
        return NULL;
    const char *p = diag_src;
    for (int i = 1; i < line; i++) {
        p = strchr(p, '\n');
        if (!p)
            return NULL;
        p++;
    }
    if (*p == '\0') /* just past the final newline: no such line */
        return NULL;
    size_t n = strcspn(p, "\n");
    if (n > 0 && p[n - 1] == '\r')
        n--;
    *len = n;
    return p;
}

/* Writes n bytes of s to diag_out() with control characters (other than tab) shown as '?', so a
 * stray escape sequence in a .model file never reaches the terminal raw; one byte stays one
 * column, so carets still line up. */
static void put_safe(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        fputc((c < 0x20 && c != '\t') || c == 0x7f ? '?' : c, diag_out());
    }
}

/* Prints the source line and a caret under column `col`. The caret line copies the tabs of
 * the source line and skips UTF-8 continuation bytes so the caret sits under the byte `col`
 * in a terminal. */
static void quote_line(Loc loc) {
    size_t len;
    const char *s = find_line(loc.line, &len);
    if (!s)
        return;
    int col = loc.col < 1 ? 1 : loc.col;
    /* A very long line is shown as a window of it around the column. */
    enum { WIDTH = 120 };
    if (len > WIDTH + 40) {
        size_t start = (size_t)col > WIDTH / 2 ? (size_t)col - WIDTH / 2 : 0;
        if (start > len) start = len;
        size_t n = len - start < WIDTH ? len - start : WIDTH;
        fputs(start ? "..." : "", diag_out());
        put_safe(s + start, n);
        fprintf(diag_out(), "%s\n", start + n < len ? "..." : "");
        for (size_t i = 0; i < (start ? 3 : 0) + (size_t)col - 1 - start; i++) fputc(' ', diag_out());
        fputs("^\n", diag_out());
        return;
    }
    put_safe(s, len);
    fputc('\n', diag_out());
    for (int i = 0; i < col - 1; i++) {
        unsigned char c = (size_t)i < len ? (unsigned char)s[i] : ' ';
        if (c == '\t')
            fputc('\t', diag_out());
        else if ((c & 0xC0) != 0x80)
            fputc(' ', diag_out());
    }
    fputs("^\n", diag_out());
}

static void report(Loc loc, const char *kind, const char *fmt, va_list ap) {
    fflush(stdout);
    if (loc.line > 0)
        fprintf(diag_out(), "%s:%d:%d: %s: ", diag_path, loc.line, loc.col, kind);
    else
        fprintf(diag_out(), "%s: %s: ", diag_path, kind);
    char msg[4096];
    int k = vsnprintf(msg, sizeof msg, fmt, ap);
    put_safe(msg, k < 0 ? 0 : (size_t)k < sizeof msg ? (size_t)k : sizeof msg - 1);
    fputc('\n', diag_out());
    quote_line(loc);
}


void diag_push_context(Loc loc, const char *msg) {
    if (nctx < MAX_CONTEXT) {
        ctx_loc[nctx] = loc;
        ctx_msg[nctx] = msg;
    }
    nctx++;
}

void diag_pop_context(void) {
    if (nctx > 0)
        nctx--;
}

/* Innermost first; a deep stack (a recursive block) shows its 3 innermost and 2 outermost
 * levels and counts the rest, as clang does for template instantiations. */
static void print_context(void) {
    int n = nctx < MAX_CONTEXT ? nctx : MAX_CONTEXT;
    for (int i = n - 1; i >= 0; i--) {
        if (n > 6 && i == n - 4) {
            note_at((Loc){0, 0}, "(skipping %d block instantiations)", n - 5);
            i = 2;
        }
        note_at(ctx_loc[i], "%s", ctx_msg[i]);
    }
}

noreturn void diag_exit(void) {
    print_context();
    diag_quit(1);
}

noreturn void error_at(Loc loc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    report(loc, "error", fmt, ap);
    va_end(ap);
    diag_exit();
}

void error_begin(Loc loc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    report(loc, "error", fmt, ap);
    va_end(ap);
}

bool diag_quiet;

void warning_at(Loc loc, const char *fmt, ...) {
    if (diag_quiet) return;
    va_list ap;
    va_start(ap, fmt);
    report(loc, "warning", fmt, ap);
    va_end(ap);
    diag_warnings++;
}

void note_at(Loc loc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    report(loc, "note", fmt, ap);
    va_end(ap);
}

noreturn void fatal(const char *fmt, ...) {
    va_list ap;
    fflush(stdout);
    fputs("modelc: error: ", diag_out());
    va_start(ap, fmt);
    vfprintf(diag_out(), fmt, ap);
    va_end(ap);
    fputc('\n', diag_out());
    diag_quit(1);
}

/* `file` is __FILE__ (e.g. "compiler/plan.c"); only its last component is printed. */
noreturn void internal_error(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    fflush(stdout);
    fprintf(diag_out(), "modelc: internal error at %s:%d: ", base, line);
    va_start(ap, fmt);
    vfprintf(diag_out(), fmt, ap);
    va_end(ap);
    fputc('\n', diag_out());
    diag_quit(2);
}
