/*
 * compiler.c — the compiler object: its jit, the kernel map under one mutex, and the
 * small accessors of a kernel.
 *
 * The map is open addressing keyed by the 128-bit kernel key; it only grows.  Lookups
 * and inserts hold the mutex for a few loads; compiling happens outside it, and when two
 * threads compile the same key the first insert wins and the second kernel is dropped.
 */
#define _GNU_SOURCE
#include "driver_internal.h"

#include <dlfcn.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* The vector width kernels are written for: $SCORCH_VEC_BYTES (32 or 64) when set, else
 * 64 where the CPU has AVX-512F (a vector is one zmm register) and 32 elsewhere (one ymm
 * register with AVX2; where 64-byte vectors take two registers each, a register tile
 * of SpMM or the eight dot products of SDDMM spill, measured 2-4x slower on a Zen 3).
 * USER error for any other value. */
static sc_status vec_width(int32_t *out, sc_error *err)
{
    const char *v = getenv("SCORCH_VEC_BYTES");
    if (v && *v) {
        if (strcmp(v, "32") != 0 && strcmp(v, "64") != 0)
            return sc_fail(err, SC_USER, "driver", "SCORCH_VEC_BYTES must be 32 or 64, not '%.40s'", v);
        *out = v[0] == '3' ? 32 : 64;
        return SC_OK;
    }
    *out = 32;
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        *out = 64;
#endif
    return SC_OK;
}

/* Whether SpMV's rows read x through gathers: $SCORCH_GATHERS (0 or 1) when set, else
 * the outcome kept in the cache directory for this host's ISA ("gathers-<isa>"), else
 * measured (sc_drv_fast_gathers) and kept there.  The probe is a timing: on a shared
 * machine it came out either way from one process to the next, and with it the SpMV
 * kernel each process ran and the cache files it found.  USER error for a bad
 * $SCORCH_GATHERS. */
static sc_status gathers(const sc_ctx *ctx, sc_jit *jit, bool *out, sc_error *err)
{
    const char *v = getenv("SCORCH_GATHERS");
    if (v && *v) {
        if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0)
            return sc_fail(err, SC_USER, "driver", "SCORCH_GATHERS must be 0 or 1, not '%.40s'", v);
        *out = v[0] == '1';
        return SC_OK;
    }
    char hex[33], name[48], kept[8];
    sc_jit_key_hex(sc_jit_host_isa(), hex);
    snprintf(name, sizeof name, "gathers-%s", hex);
    if (sc_jit_note_read(jit, name, kept, sizeof kept) == 2 && kept[1] == '\n' &&
        (kept[0] == '0' || kept[0] == '1')) {
        *out = kept[0] == '1';
        return SC_OK;
    }
    sc_status st = sc_drv_fast_gathers(ctx, out, err);
    if (st == SC_OK)
        sc_jit_note_write(jit, name, *out ? "1\n" : "0\n");
    return st;
}

sc_compiler *sc_compiler_new(const sc_ctx *ctx, const sc_jit_config *cfg, sc_error *err)
{
    int32_t vec_bytes = 64;
    bool fast = false;
    if (vec_width(&vec_bytes, err) != SC_OK)
        return NULL;
    sc_compiler *c = sc_calloc(ctx, 1, sizeof *c, err);
    if (!c)
        return NULL;
    c->ctx = *ctx;
    const char *dbg = getenv("SCORCH_DEBUG");
    c->debug = dbg && *dbg && strcmp(dbg, "0") != 0;
    c->vec_bytes = vec_bytes;
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        sc_fail(err, SC_INTERNAL, "driver", "pthread_mutex_init failed");
        sc_free(ctx, c);
        return NULL;
    }
    if (pthread_mutex_init(&c->later_mu, NULL) != 0) {
        sc_fail(err, SC_INTERNAL, "driver", "pthread_mutex_init failed");
        pthread_mutex_destroy(&c->mu);
        sc_free(ctx, c);
        return NULL;
    }
    c->jit = sc_jit_new(&c->ctx, cfg, err);
    if (!c->jit || gathers(&c->ctx, c->jit, &fast, err) != SC_OK) {
        sc_jit_free(c->jit);
        pthread_mutex_destroy(&c->later_mu);
        pthread_mutex_destroy(&c->mu);
        sc_free(ctx, c);
        return NULL;
    }
    c->gathers = fast && vec_bytes == 64;
    return c;
}

void sc_compiler_set_convert_once(sc_compiler *c, bool once)
{
    c->convert_once = once;
}

void sc_drv_kernel_free(sc_compiler *c, sc_kernel *k)
{
    if (!k)
        return;
    sc_free(&c->ctx, k->names);
    sc_free(&c->ctx, k->schedule);
    sc_free(&c->ctx, k->explain);
    sc_free(&c->ctx, k);
}

void sc_compiler_free(sc_compiler *c)
{
    if (!c)
        return;
    for (sc_later *l = c->laters, *next; l; l = next) {
        next = l->next;
        if (!l->joined && l->pid == getpid())
            pthread_join(l->thread, NULL);
        sc_drv_kernel_free(c, l->k);
        sc_free(&c->ctx, l->src);
        sc_free(&c->ctx, l);
    }
    for (size_t i = 0; i < c->cap; i++)
        sc_drv_kernel_free(c, c->map[i]);
    sc_free(&c->ctx, c->map);
    sc_jit_free(c->jit);
    if (c->aot_lib)
        dlclose(c->aot_lib);
    pthread_mutex_destroy(&c->later_mu);
    pthread_mutex_destroy(&c->mu);
    sc_ctx ctx = c->ctx;
    sc_free(&ctx, c);
}

static size_t slot(const sc_compiler *c, sc_jit_key key)
{
    size_t i = (size_t)(key.w[0] ^ (key.w[1] >> 7)) & (c->cap - 1);
    while (c->map[i] && memcmp(&c->map[i]->key, &key, sizeof key) != 0)
        i = (i + 1) & (c->cap - 1);
    return i;
}

const sc_kernel *sc_drv_lookup(sc_compiler *c, sc_jit_key key)
{
    pthread_mutex_lock(&c->mu);
    const sc_kernel *k = c->cap ? c->map[slot(c, key)] : NULL;
    pthread_mutex_unlock(&c->mu);
    return k;
}

const sc_kernel *sc_drv_insert(sc_compiler *c, sc_kernel *k, sc_error *err)
{
    pthread_mutex_lock(&c->mu);
    if (c->cap) {
        sc_kernel *old = c->map[slot(c, k->key)];
        if (old) {
            pthread_mutex_unlock(&c->mu);
            sc_drv_kernel_free(c, k);
            return old;
        }
    }
    if ((c->count + 1) * 2 > c->cap) {
        size_t ncap = c->cap ? c->cap * 2 : 64;
        sc_kernel **nm = sc_calloc(&c->ctx, ncap, sizeof *nm, err);
        if (!nm) {
            pthread_mutex_unlock(&c->mu);
            sc_drv_kernel_free(c, k);
            return NULL;
        }
        sc_kernel **old = c->map;
        size_t ocap = c->cap;
        c->map = nm;
        c->cap = ncap;
        for (size_t i = 0; i < ocap; i++)
            if (old[i])
                c->map[slot(c, old[i]->key)] = old[i];
        sc_free(&c->ctx, old);
    }
    c->map[slot(c, k->key)] = k;
    c->count++;
    pthread_mutex_unlock(&c->mu);
    return k;
}

void sc_kernel_output(const sc_kernel *k, sc_tensor *desc)
{
    memset(desc, 0, sizeof *desc);
    desc->fmt = k->out_fmt;
    desc->dtype = k->dtype;
    desc->index_type = k->out_itype;
    memcpy(desc->dims, k->out_dims, sizeof desc->dims);
}

const char *sc_kernel_explain(const sc_kernel *k)
{
    return k->explain;
}

const char *sc_kernel_schedule(const sc_kernel *k)
{
    return k->schedule;
}

int32_t sc_kernel_fixed(const sc_kernel *k, int32_t max, int32_t *op, int32_t *dim, int64_t *size)
{
    int32_t n = 0;
    for (int32_t t = 0; t < k->nops; t++)
        for (int32_t d = 0; d < k->fmt[t].order; d++) {
            int32_t v = k->var[t][d];
            if (v < 0 || k->fixed[v] <= 0 || ((k->bcast[t] >> d) & 1))
                continue;
            if (n < max) {
                op[n] = t;
                dim[n] = d;
                size[n] = k->fixed[v];
            }
            n++;
        }
    return n;
}

void sc_kernel_times(const sc_kernel *k, double *front_us, double *jit_us)
{
    *front_us = k->front_us;
    *jit_us = k->jit_us;
}

void sc_compiler_jit_stats(sc_compiler *c, sc_jit_counts *out)
{
    sc_jit_stats(c->jit, out);
}

bool sc_kernel_ahead(const sc_kernel *k)
{
    return k->ahead;
}

/* ---- ahead-of-time kernels ---- */

static int key_cmp(const uint64_t a[2], const uint64_t b[2])
{
    return a[0] != b[0] ? (a[0] < b[0] ? -1 : 1) : a[1] != b[1] ? (a[1] < b[1] ? -1 : 1) : 0;
}

sc_status sc_compiler_load_aot(sc_compiler *c, const char *path, size_t *loaded,
                               const char **why, sc_error *err)
{
    *loaded = 0;
    *why = NULL;
    pthread_mutex_lock(&c->mu);
    bool busy = c->aot_lib || c->count;
    pthread_mutex_unlock(&c->mu);
    if (busy)
        return sc_fail(err, SC_USER, "driver",
                       "ahead-of-time kernels load once, before the first kernel");
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return sc_fail(err, SC_RUNTIME, "driver", "cannot load '%s': %s", path, dlerror());
    const uint64_t *isa = dlsym(lib, "scorch_aot_isa");
    const int32_t *ver = dlsym(lib, "scorch_aot_version");
    const size_t *n = dlsym(lib, "scorch_aot_count");
    const sc_aot_kernel *tab = dlsym(lib, "scorch_aot_table");
    if (!isa || !ver || !n || (!tab && *n)) {
        dlclose(lib);
        return sc_fail(err, SC_RUNTIME, "driver", "'%s' is not a table of scorch kernels", path);
    }
    sc_jit_key host = sc_jit_host_isa();
    if (isa[0] != host.w[0] || isa[1] != host.w[1])
        *why = "built on a host with another instruction set";
    else if (*ver != SC_RT_VERSION)
        *why = "built for another version of scorch's runtime";
    for (size_t i = 1; i < *n && !*why; i++)
        if (key_cmp(tab[i - 1].key, tab[i].key) >= 0)
            *why = "its table is not sorted";
    if (*why) {
        dlclose(lib);
        return SC_OK;
    }
    c->aot_lib = lib;
    c->aot = tab;
    c->naot = *n;
    *loaded = *n;
    return SC_OK;
}

sc_jit_key sc_source_hash(const char *text, size_t len)
{
    sc_jit_hasher h;
    sc_jit_hash_init(&h, 0xa07);
    sc_jit_hash_field(&h, text, len);
    return sc_jit_hash_final(&h);
}

/* The table's entry for key, or NULL. */
static const sc_aot_kernel *aot_entry(const sc_compiler *c, sc_jit_key key)
{
    size_t lo = 0, hi = c->naot;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int d = key_cmp(c->aot[mid].key, key.w);
        if (d == 0)
            return &c->aot[mid];
        if (d < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

bool sc_drv_aot_has(const sc_compiler *c, sc_jit_key key)
{
    return aot_entry(c, key) != NULL;
}

sc_rt_kernel sc_drv_aot_find(const sc_compiler *c, sc_jit_key key, const char *src, size_t len)
{
    const sc_aot_kernel *a = aot_entry(c, key);
    if (!a)
        return NULL;
    sc_jit_key h = sc_source_hash(src, len);
    return key_cmp(a->text, h.w) == 0 ? a->fn : NULL;
}

/* ---- background compiles ---- */

static void *later_main(void *arg)
{
    sc_later *l = arg;
#ifdef __linux__
    /* Linux keeps a nice value per thread, and the compiler spawned from here inherits
     * it: the compile takes the cores only where the caller's work leaves them idle */
    (void)setpriority(PRIO_PROCESS, 0, 10);
#endif
    sc_jit_fn fn = NULL;
    sc_status st = sc_jit_get(l->c->jit, l->src, l->len, l->sym, &fn, &l->err);
    l->fn = fn;
    atomic_store_explicit(&l->state, st == SC_OK ? LATER_COMPILED : LATER_FAILED,
                          memory_order_release);
    return NULL;
}

sc_status sc_drv_later_start(sc_compiler *c, sc_kernel *k, char *src, size_t len,
                             const char *sym, sc_later **later, sc_error *err)
{
    *later = NULL;
    pthread_mutex_lock(&c->later_mu);
    for (sc_later *l = c->laters; l; l = l->next)
        if (!memcmp(&l->k_key, &k->key, sizeof k->key) && l->pid == getpid()) {
            *later = l;
            break;
        }
    sc_status st = SC_OK;
    sc_later *l = NULL;
    if (*later)
        goto drop; /* compiling already */
    l = sc_calloc(&c->ctx, 1, sizeof *l, err);
    if (!l) {
        st = SC_NOMEM;
        goto drop;
    }
    l->c = c;
    l->k = k;
    l->k_key = k->key;
    l->src = src;
    l->len = len;
    snprintf(l->sym, sizeof l->sym, "%s", sym);
    l->pid = getpid();
    l->t0 = sc_drv_now_us();
    atomic_init(&l->state, LATER_RUNNING);
    /* the thread takes no signals: they stay the caller's (Python's main thread) */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&l->thread, NULL, later_main, l);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        sc_free(&c->ctx, l);
        st = sc_fail(err, SC_INTERNAL, "driver", "cannot start a compile thread");
        goto drop;
    }
    l->next = c->laters;
    c->laters = l;
    pthread_mutex_unlock(&c->later_mu);
    *later = l;
    return SC_OK;
drop:
    pthread_mutex_unlock(&c->later_mu);
    sc_drv_kernel_free(c, k);
    sc_free(&c->ctx, src);
    return st;
}

int sc_later_poll(sc_later *l, bool wait, const sc_kernel **k, sc_error *err)
{
    sc_compiler *c = l->c;
    *k = NULL;
    bool here = l->pid == getpid();
    int state = here ? atomic_load_explicit(&l->state, memory_order_acquire) : LATER_FAILED;
    if (state == LATER_RUNNING && !wait)
        return 0;
    /* the hand-over happens once, under later_mu (sc_drv_insert takes mu inside it) */
    pthread_mutex_lock(&c->later_mu);
    if (here && !l->joined) {
        pthread_join(l->thread, NULL);
        l->joined = true;
        state = atomic_load_explicit(&l->state, memory_order_acquire);
    }
    int r = -1;
    if (state == LATER_COMPILED && l->k) {
        sc_kernel *mine = l->k;
        mine->fn = (sc_rt_kernel)l->fn;
        mine->jit_us = sc_drv_now_us() - l->t0;
        l->k = NULL;
        sc_free(&c->ctx, l->src);
        l->src = NULL;
        l->ready = sc_drv_insert(c, mine, err);
        if (!l->ready)
            l->err = *err;
    }
    if (l->ready) {
        *k = l->ready;
        r = 1;
    } else if (!here) {
        sc_fail(err, SC_RUNTIME, "driver", "the kernel was compiling in the parent process");
    } else {
        *err = l->err;
    }
    pthread_mutex_unlock(&c->later_mu);
    return r;
}
