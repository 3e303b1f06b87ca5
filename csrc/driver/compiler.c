/*
 * compiler.c — the compiler object: its jit, the kernel map under one mutex, and the
 * small accessors of a kernel.
 *
 * The map is open addressing keyed by the 128-bit kernel key; it only grows.  Lookups
 * and inserts hold the mutex for a few loads; compiling happens outside it, and when two
 * threads compile the same key the first insert wins and the second kernel is dropped.
 */
#include "driver_internal.h"

#include <stdlib.h>
#include <string.h>

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

/* Whether SpMV's rows read x through gathers: $SCORCH_GATHERS (0 or 1) when set,
 * else measured (sc_drv_fast_gathers).  USER error for any other value. */
static sc_status gathers(const sc_ctx *ctx, bool *out, sc_error *err)
{
    const char *v = getenv("SCORCH_GATHERS");
    if (v && *v) {
        if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0)
            return sc_fail(err, SC_USER, "driver", "SCORCH_GATHERS must be 0 or 1, not '%.40s'", v);
        *out = v[0] == '1';
        return SC_OK;
    }
    return sc_drv_fast_gathers(ctx, out, err);
}

sc_compiler *sc_compiler_new(const sc_ctx *ctx, const sc_jit_config *cfg, sc_error *err)
{
    int32_t vec_bytes = 64;
    bool fast = false;
    if (vec_width(&vec_bytes, err) != SC_OK || gathers(ctx, &fast, err) != SC_OK)
        return NULL;
    sc_compiler *c = sc_calloc(ctx, 1, sizeof *c, err);
    if (!c)
        return NULL;
    c->ctx = *ctx;
    const char *dbg = getenv("SCORCH_DEBUG");
    c->debug = dbg && *dbg && strcmp(dbg, "0") != 0;
    c->vec_bytes = vec_bytes;
    c->gathers = fast && vec_bytes == 64;
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        sc_fail(err, SC_INTERNAL, "driver", "pthread_mutex_init failed");
        sc_free(ctx, c);
        return NULL;
    }
    c->jit = sc_jit_new(&c->ctx, cfg, err);
    if (!c->jit) {
        pthread_mutex_destroy(&c->mu);
        sc_free(ctx, c);
        return NULL;
    }
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
    for (size_t i = 0; i < c->cap; i++)
        sc_drv_kernel_free(c, c->map[i]);
    sc_free(&c->ctx, c->map);
    sc_jit_free(c->jit);
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
