/*
 * jit.c — the jit's lifecycle and sc_jit_get's lookup order: process map → disk cache →
 * compile.  Only the map, the handle list, the compiler identity and the counters are
 * touched under jit->lock; spawning, file-system work and dlopen happen outside it, so
 * two threads missing on one key may both compile; the map keeps the first function.
 *
 * Keys: map key = H(config_key, symbol, source); disk key = H(map key, compiler
 * identity).  The identity is fixed for a jit, so the map needs no `cc --version`.
 */
#include "jit_impl.h"

#include <dlfcn.h>
#include <string.h>

sc_jit *sc_jit_new(const sc_ctx *ctx, const sc_jit_config *cfg, sc_error *err)
{
    if (!ctx) {
        sc_fail(err, SC_USER, SC_JIT_STAGE, "sc_jit_new: NULL context");
        return NULL;
    }
    sc_jit *jit = sc_calloc(ctx, 1, sizeof *jit, err);
    if (!jit)
        return NULL;
    jit->ctx = ctx;
    if (pthread_mutex_init(&jit->lock, NULL) != 0) {
        sc_free(ctx, jit);
        sc_fail(err, SC_INTERNAL, SC_JIT_STAGE, "cannot create a mutex");
        return NULL;
    }
    if (sc_jit_configure(jit, cfg, err) != SC_OK || sc_jit_fingerprint(jit, err) != SC_OK) {
        sc_jit_free(jit);
        return NULL;
    }
    return jit;
}

void sc_jit_free(sc_jit *jit)
{
    if (!jit)
        return;
    const sc_ctx *ctx = jit->ctx;
    sc_jit_map_release(jit);
    pthread_mutex_destroy(&jit->lock);
    sc_free(ctx, jit->cc);
    sc_free(ctx, jit->cflags);
    sc_free(ctx, jit->cache_dir);
    sc_free(ctx, jit->cache_err);
    sc_free(ctx, jit->include_dir);
    sc_free(ctx, jit->words);
    sc_free(ctx, jit->include_flag);
    sc_free(ctx, jit->argv);
    sc_free(ctx, jit);
}

static sc_jit_key map_key(const sc_jit *jit, const char *source, size_t len,
                          const char *symbol)
{
    sc_jit_hasher h;
    sc_jit_hash_init(&h, 2);
    sc_jit_hash_update(&h, &jit->config_key, sizeof jit->config_key);
    sc_jit_hash_field(&h, symbol, strlen(symbol));
    sc_jit_hash_field(&h, source, len);
    return sc_jit_hash_final(&h);
}

static sc_status identity(sc_jit *jit, sc_jit_key *out, sc_error *err)
{
    pthread_mutex_lock(&jit->lock);
    int have = jit->have_ident;
    *out = jit->ident;
    pthread_mutex_unlock(&jit->lock);
    if (have)
        return SC_OK;
    sc_status st = sc_jit_identify(jit, out, err); /* racing threads get the same answer */
    if (st != SC_OK)
        return st;
    pthread_mutex_lock(&jit->lock);
    jit->ident = *out;
    jit->have_ident = 1;
    pthread_mutex_unlock(&jit->lock);
    return SC_OK;
}

/* Open <hex>.so, compiling it first (where `compile`) if it is missing, unsafe or fails
 * to load (then *compiled); *refused if an existing file was not used.  Without
 * `compile`, a file that cannot be used leaves *lib NULL and returns SC_OK.  A missing
 * symbol is an error of the source, not of the file, so it does not trigger a compile. */
static sc_status load_or_compile(sc_jit *jit, sc_jit_key key, const char *source,
                                 size_t len, const char *symbol, bool compile, void **lib,
                                 sc_jit_fn *fn, int *compiled, int *refused, sc_error *err)
{
    char hex[33];
    sc_jit_key_hex(key, hex);
    if (!jit->cache_dir) {   /* (no usable cache directory: nothing to find, no compile) */
        *lib = NULL;
        *compiled = *refused = 0;
        return compile ? sc_fail(err, SC_USER, SC_JIT_STAGE, "%s", jit->cache_err) : SC_OK;
    }
    char *so = sc_jit_cache_path(jit, hex, ".so", err);
    if (!so)
        return err->kind;
    sc_status st = SC_RUNTIME;
    int probe = sc_jit_disk_probe(so);
    if (probe > 0)
        st = sc_jit_disk_open(so, lib, err);
    *refused = probe < 0 || (probe > 0 && st != SC_OK);
    *compiled = st != SC_OK && compile;
    if (st != SC_OK && !compile) {
        *lib = NULL;
        sc_error_clear(err);
        sc_free(jit->ctx, so);
        return SC_OK;
    }
    if (st != SC_OK) {
        st = sc_jit_compile(jit, hex, source, len, err);
        if (st == SC_OK)
            st = sc_jit_disk_open(so, lib, err);
    }
    if (st == SC_OK)
        st = sc_jit_disk_symbol(*lib, so, symbol, fn, err);
    sc_free(jit->ctx, so);
    return st;
}

/* sc_jit_get and sc_jit_cached: map → disk → compile (only where `compile`). */
static sc_status get(sc_jit *jit, const char *source, size_t len, const char *symbol,
                     bool compile, sc_jit_fn *fn, sc_error *err)
{
    if (fn)
        *fn = NULL;
    if (!jit || !source || !symbol || !*symbol || !fn)
        return sc_fail(err, SC_USER, SC_JIT_STAGE,
                       "sc_jit_get: jit, source, symbol and fn must be given");
    sc_jit_key key = map_key(jit, source, len, symbol);
    pthread_mutex_lock(&jit->lock);
    sc_jit_fn hit = sc_jit_map_find(jit, key);
    if (hit)
        jit->counts.mem_hits++;
    pthread_mutex_unlock(&jit->lock);
    if (hit) {
        *fn = hit;
        return SC_OK;
    }

    sc_jit_key ident;
    sc_status st = identity(jit, &ident, err);
    if (st != SC_OK && !compile) { /* no compiler: nothing it built can be found either */
        sc_error_clear(err);
        return SC_OK;
    }
    if (st != SC_OK)
        return st;
    sc_jit_hasher h;
    sc_jit_hash_init(&h, 3);
    sc_jit_hash_update(&h, &key, sizeof key);
    sc_jit_hash_update(&h, &ident, sizeof ident);
    void *lib = NULL;
    sc_jit_fn f = NULL;
    int compiled = 0, refused = 0;
    st = load_or_compile(jit, sc_jit_hash_final(&h), source, len, symbol, compile, &lib, &f,
                         &compiled, &refused, err);

    pthread_mutex_lock(&jit->lock);
    jit->counts.disk_refused += (uint64_t)refused;
    if (st == SC_OK && lib) {
        st = sc_jit_keep_lib(jit, lib, err);
        if (st != SC_OK)
            dlclose(lib); /* nothing from it was handed out */
        else
            st = sc_jit_map_insert(jit, key, f, fn, err);
        if (st == SC_OK && compiled)
            jit->counts.compiles++;
        else if (st == SC_OK)
            jit->counts.disk_hits++;
    }
    pthread_mutex_unlock(&jit->lock);
    return st;
}

sc_status sc_jit_get(sc_jit *jit, const char *source, size_t len, const char *symbol,
                     sc_jit_fn *fn, sc_error *err)
{
    return get(jit, source, len, symbol, true, fn, err);
}

sc_status sc_jit_cached(sc_jit *jit, const char *source, size_t len, const char *symbol,
                        sc_jit_fn *fn, sc_error *err)
{
    return get(jit, source, len, symbol, false, fn, err);
}

sc_status sc_jit_ready(sc_jit *jit, sc_error *err)
{
    if (jit->cache_err)
        return sc_fail(err, SC_USER, SC_JIT_STAGE, "%s", jit->cache_err);
    sc_jit_key ident;
    return identity(jit, &ident, err);
}

void sc_jit_stats(sc_jit *jit, sc_jit_counts *out)
{
    pthread_mutex_lock(&jit->lock);
    *out = jit->counts;
    pthread_mutex_unlock(&jit->lock);
}

const char *sc_jit_setting(const sc_jit *jit, const char *name)
{
    if (!strcmp(name, "cc"))
        return jit->cc;
    if (!strcmp(name, "cflags"))
        return jit->cflags;
    if (!strcmp(name, "cache_dir"))
        return jit->cache_dir;
    if (!strcmp(name, "include_dir"))
        return jit->include_dir;
    return NULL;
}
