/*
 * arena.c — the compiler's one allocator.
 *
 * Every phase (parser, checker, fuser, planner, emitters) allocates from a single arena that
 * lives for the whole compilation and is released at once by arena_free_all(). Nothing is
 * freed piecemeal, so AST, graph and plan nodes may point at each other freely.
 *
 * Memory comes in chunks of CHUNK_SIZE bytes carved by bumping a pointer; a request larger
 * than a quarter chunk gets a chunk of its own. Chunks come from calloc, so every allocation
 * is zeroed. Running out of memory is fatal: xalloc never returns NULL.
 */
#include "modelc.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

enum { CHUNK_SIZE = 64 * 1024, ALIGN = _Alignof(max_align_t) };

typedef struct Chunk {
    struct Chunk *next;
    size_t used, cap; /* bytes of data[] */
    _Alignas(max_align_t) unsigned char data[];
} Chunk;

static Chunk *chunks; /* newest first; the head is the one being carved */

static Chunk *chunk_new(size_t cap) {
    if (cap > SIZE_MAX - sizeof(Chunk))
        fatal("out of memory (asked for %zu bytes)", cap);
    Chunk *c = calloc(1, sizeof(Chunk) + cap);
    if (!c)
        fatal("out of memory (asked for %zu bytes)", cap);
    c->cap = cap;
    return c;
}

/* Returns `bytes` zeroed bytes aligned for any type; never NULL. */
void *xalloc(size_t bytes) {
    if (bytes == 0)
        bytes = 1;
    if (bytes > SIZE_MAX - ALIGN)
        fatal("out of memory (asked for %zu bytes)", bytes);
    size_t n = (bytes + ALIGN - 1) & ~(size_t)(ALIGN - 1);
    if (n > CHUNK_SIZE / 4) {
        /* A big block: its own chunk, linked behind the head so the head keeps carving. */
        Chunk *c = chunk_new(n);
        c->used = n;
        if (chunks) {
            c->next = chunks->next;
            chunks->next = c;
        } else {
            chunks = c;
        }
        return c->data;
    }
    if (!chunks || chunks->cap - chunks->used < n) {
        Chunk *c = chunk_new(CHUNK_SIZE);
        c->next = chunks;
        chunks = c;
    }
    void *p = chunks->data + chunks->used;
    chunks->used += n;
    return p;
}

/* Grows a vector of old_n elements of `elem` bytes to new_n (new_n >= old_n): a fresh zeroed
 * block holding a copy of the old contents. The old block stays in the arena. */
void *xrealloc_array(void *old, size_t old_n, size_t new_n, size_t elem) {
    if (elem && new_n > SIZE_MAX / elem)
        fatal("out of memory (asked for %zu elements of %zu bytes)", new_n, elem);
    void *p = xalloc(new_n * elem);
    size_t keep = old_n < new_n ? old_n : new_n;
    if (old && keep)
        memcpy(p, old, keep * elem);
    return p;
}

/* Makes room for one more element in a vector of n elements and capacity *cap (n <= *cap):
 * returns it unchanged while n < *cap, else a copy with twice the capacity (at least 8), so
 * that n appends cost O(n) time and memory in all, not O(n^2) (issue 16). */
void *xgrow_array(void *old, int n, int *cap, size_t elem) {
    if (n < *cap) return old;
    if (*cap > INT_MAX / 2) fatal("out of memory (a vector of more than %d elements)", INT_MAX / 2);
    int ncap = *cap ? 2 * *cap : 8;
    void *p = xrealloc_array(old, (size_t)n, (size_t)ncap, elem);
    *cap = ncap;
    return p;
}

char *xstrndup(const char *s, size_t n) {
    size_t len = strnlen(s, n);
    char *p = xalloc(len + 1);
    memcpy(p, s, len);
    return p;
}

char *xstrdup(const char *s) {
    return xstrndup(s, strlen(s));
}

char *xprintf(const char *fmt, ...) {
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        ICE("vsnprintf failed for format \"%s\"", fmt);
    char *p = xalloc((size_t)n + 1);
    vsnprintf(p, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    return p;
}

/* Frees everything xalloc ever returned. The arena may be used again afterwards. */
void arena_free_all(void) {
    while (chunks) {
        Chunk *next = chunks->next;
        free(chunks);
        chunks = next;
    }
}
