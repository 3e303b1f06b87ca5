/*
 * map.c — the in-process kernel map (open addressing, linear probing on the key's first
 * word, at most half full, never shrinks or deletes) and the list of dlopen handles kept
 * until sc_jit_free.  The caller holds jit->lock; a lookup touches no syscall and no
 * allocator.
 */
#include "jit_impl.h"

#include <dlfcn.h>

static int key_eq(sc_jit_key a, sc_jit_key b)
{
    return a.w[0] == b.w[0] && a.w[1] == b.w[1];
}

/* The slot holding key, or the empty slot where it belongs.  cap > 0. */
static sc_jit_entry *slot(sc_jit_entry *map, size_t cap, sc_jit_key key)
{
    size_t mask = cap - 1;
    for (size_t i = (size_t)key.w[0] & mask;; i = (i + 1) & mask)
        if (!map[i].fn || key_eq(map[i].key, key))
            return &map[i];
}

sc_jit_fn sc_jit_map_find(const sc_jit *jit, sc_jit_key key)
{
    return jit->map_cap ? slot(jit->map, jit->map_cap, key)->fn : NULL;
}

static sc_status grow(sc_jit *jit, sc_error *err)
{
    size_t cap = jit->map_cap ? jit->map_cap * 2 : 64;
    sc_jit_entry *map = sc_calloc(jit->ctx, cap, sizeof *map, err);
    if (!map)
        return err->kind;
    for (size_t i = 0; i < jit->map_cap; i++)
        if (jit->map[i].fn)
            *slot(map, cap, jit->map[i].key) = jit->map[i];
    sc_free(jit->ctx, jit->map);
    jit->map = map;
    jit->map_cap = cap;
    return SC_OK;
}

sc_status sc_jit_map_insert(sc_jit *jit, sc_jit_key key, sc_jit_fn fn, sc_jit_fn *winner,
                            sc_error *err)
{
    sc_jit_fn have = sc_jit_map_find(jit, key);
    if (have) {
        *winner = have;
        return SC_OK;
    }
    if (2 * (jit->map_len + 1) > jit->map_cap) {
        sc_status st = grow(jit, err);
        if (st != SC_OK)
            return st;
    }
    sc_jit_entry *e = slot(jit->map, jit->map_cap, key);
    e->key = key;
    e->fn = fn;
    jit->map_len++;
    *winner = fn;
    return SC_OK;
}

sc_status sc_jit_keep_lib(sc_jit *jit, void *lib, sc_error *err)
{
    if (jit->n_libs == jit->cap_libs) {
        size_t cap = jit->cap_libs ? jit->cap_libs * 2 : 16;
        void **libs = sc_calloc(jit->ctx, cap, sizeof *libs, err);
        if (!libs)
            return err->kind;
        for (size_t i = 0; i < jit->n_libs; i++)
            libs[i] = jit->libs[i];
        sc_free(jit->ctx, jit->libs);
        jit->libs = libs;
        jit->cap_libs = cap;
    }
    jit->libs[jit->n_libs++] = lib;
    return SC_OK;
}

void sc_jit_map_release(sc_jit *jit)
{
    for (size_t i = jit->n_libs; i > 0; i--)
        dlclose(jit->libs[i - 1]);
    sc_free(jit->ctx, jit->libs);
    sc_free(jit->ctx, jit->map);
    jit->libs = NULL;
    jit->map = NULL;
    jit->n_libs = jit->cap_libs = jit->map_len = jit->map_cap = 0;
}
