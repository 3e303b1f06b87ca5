/*
 * arena.c — bump allocator for per-compilation nodes.  Blocks come from the context's
 * allocator; nothing allocated here outlives sc_arena_release.
 */
#include "sc_base.h"

#include <string.h>

struct sc_arena_block {
    sc_arena_block *next;
    size_t cap;
    _Alignas(16) unsigned char data[];
};

#define ARENA_BLOCK_MIN ((size_t)16 * 1024)

void sc_arena_init(sc_arena *a, const sc_ctx *ctx)
{
    a->ctx = ctx;
    a->head = NULL;
    a->used = 0;
    a->cap = 0;
}

void *sc_arena_alloc(sc_arena *a, size_t n, sc_error *err)
{
    size_t need = (n + 15) & ~(size_t)15;
    if (need < n) {
        sc_fail(err, SC_NOMEM, "arena", "arena allocation of %zu bytes overflows", n);
        return NULL;
    }
    if (!a->head || a->cap - a->used < need) {
        size_t cap = need > ARENA_BLOCK_MIN ? need : ARENA_BLOCK_MIN;
        if (cap > SIZE_MAX - sizeof(sc_arena_block)) {
            sc_fail(err, SC_NOMEM, "arena", "arena allocation of %zu bytes overflows", n);
            return NULL;
        }
        sc_arena_block *b = sc_alloc(a->ctx, sizeof(sc_arena_block) + cap, err);
        if (!b)
            return NULL;
        b->next = a->head;
        b->cap = cap;
        a->head = b;
        a->used = 0;
        a->cap = cap;
    }
    void *p = a->head->data + a->used;
    a->used += need;
    memset(p, 0, n);
    return p;
}

char *sc_arena_strdup(sc_arena *a, const char *s, size_t len, sc_error *err)
{
    char *p = sc_arena_alloc(a, len + 1, err);
    if (p) {
        memcpy(p, s, len);
        p[len] = '\0';
    }
    return p;
}

void sc_arena_release(sc_arena *a)
{
    sc_arena_block *b = a->head;
    while (b) {
        sc_arena_block *next = b->next;
        sc_free(a->ctx, b);
        b = next;
    }
    a->head = NULL;
    a->used = a->cap = 0;
}
