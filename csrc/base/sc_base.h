/*
 * sc_base.h — what every stage of the C core shares: the context (allocator hook,
 * later the configuration and kernel cache), error reporting, checked size arithmetic
 * and the dtype / index / level-kind tables expanded from scorch_rt.h.
 *
 * No mutable globals: everything configurable lives in an sc_ctx the caller owns.
 * The library never prints, exits or aborts; failures come back as sc_status + sc_error.
 */
#ifndef SC_BASE_H
#define SC_BASE_H

#include "../runtime/scorch_rt.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define SC_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define SC_PRINTF(f, a)
#endif

/* Allocator hook: alloc(user, n) returns NULL on failure; free(user, p) accepts NULL. */
typedef struct sc_allocator {
    void *(*alloc)(void *user, size_t n);
    void (*free)(void *user, void *p);
    void *user;
} sc_allocator;

typedef struct sc_ctx {
    sc_allocator mem;
    int num_threads; /* <= 0: let OpenMP decide */
    int64_t cache_bytes; /* the last-level cache's size (see sc_cache_bytes) */
} sc_ctx;

/* A context with the default allocator (malloc/free; large blocks huge-page advised and
 * kept for reuse once freed, base.c) and default settings. */
void sc_ctx_init(sc_ctx *ctx);
/* The size in bytes of this machine's last-level cache, read once: $SCORCH_CACHE_BYTES if
 * set (a positive integer), else the L3 (or L2) size the kernel reports in sysfs, else
 * 32 MiB.  (sysfs, not sysconf: in a VM glibc's cpuid answer is the host's whole L3.) */
int64_t sc_cache_bytes(void);
/* Free memory from the default allocator (what a default ctx's mem.free does). */
void sc_mem_free(void *p);

/* Allocate n bytes (n == 0 gives a valid unique pointer); on failure fill err (NOMEM). */
void *sc_alloc(const sc_ctx *ctx, size_t n, sc_error *err);
/* Allocate count * size bytes, uninitialised; a product that overflows size_t fails as
 * out of memory (NOMEM) instead of allocating the wrapped, smaller size.  Every array
 * whose length comes from data (a dimension, a number of entries) goes through here. */
void *sc_alloc_array(const sc_ctx *ctx, size_t count, size_t size, sc_error *err);
/* Allocate count * size zeroed bytes, overflow-checked as sc_alloc_array. */
void *sc_calloc(const sc_ctx *ctx, size_t count, size_t size, sc_error *err);
void sc_free(const sc_ctx *ctx, void *p);

/* Fill err and return kind.  stage is a static string. */
sc_status sc_fail(sc_error *err, sc_status kind, const char *stage, const char *fmt, ...)
    SC_PRINTF(4, 5);
void sc_error_clear(sc_error *err);

/* Checked arithmetic on non-negative sizes: return false on overflow. */
bool sc_mul_ok(int64_t a, int64_t b, int64_t *out);
bool sc_add_ok(int64_t a, int64_t b, int64_t *out);

/* Tables. */
size_t sc_dtype_size(sc_dtype t);
const char *sc_dtype_name(sc_dtype t);
size_t sc_index_size(sc_index_type t);
const char *sc_index_name(sc_index_type t);
int64_t sc_index_max(sc_index_type t);
const char *sc_level_name(sc_level_kind k);
char sc_level_letter(sc_level_kind k);
bool sc_level_has_pos(sc_level_kind k);
bool sc_level_has_crd(sc_level_kind k);
const char *sc_status_name(sc_status s);

/*
 * Arena: one per compilation for AST / IR / lattice / schedule nodes, freed in one call.
 * Allocations are 16-byte aligned and live until sc_arena_release.
 */
typedef struct sc_arena_block sc_arena_block;
typedef struct sc_arena {
    const sc_ctx *ctx;
    sc_arena_block *head;
    size_t used, cap; /* of head */
} sc_arena;

void sc_arena_init(sc_arena *a, const sc_ctx *ctx);
/* n zeroed bytes from the arena, or NULL with err (NOMEM). */
void *sc_arena_alloc(sc_arena *a, size_t n, sc_error *err);
/* Copy of a string into the arena. */
char *sc_arena_strdup(sc_arena *a, const char *s, size_t len, sc_error *err);
void sc_arena_release(sc_arena *a);

/* Read / write element i of an index array of the given width. */
static inline int64_t sc_idx_get(const void *a, sc_index_type t, int64_t i)
{
    return t == SC_INDEX_I32 ? (int64_t)((const int32_t *)a)[i] : ((const int64_t *)a)[i];
}
static inline void sc_idx_set(void *a, sc_index_type t, int64_t i, int64_t v)
{
    if (t == SC_INDEX_I32)
        ((int32_t *)a)[i] = (int32_t)v;
    else
        ((int64_t *)a)[i] = v;
}

#endif /* SC_BASE_H */
