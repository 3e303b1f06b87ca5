/*
 * run.c — sc_kernel_run: check operands against the kernel's descriptions, convert the
 * operands the schedule transposes, call the generated function with an env built from
 * the compiler's ctx, and turn its status into an sc_error.
 */
#include "driver_internal.h"
#include "../format/sc_format.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

static bool same_fmt(const sc_format *a, const sc_format *b)
{
    if (a->order != b->order)
        return false;
    for (int32_t k = 0; k < a->order; k++)
        if (a->kind[k] != b->kind[k] || (a->unique[k] != 0) != (b->unique[k] != 0) ||
            a->lvl2dim[k] != b->lvl2dim[k])
            return false;
    return true;
}

static sc_status check_ops(const sc_kernel *k, const sc_tensor *const *ops, int64_t *ext,
                           sc_error *err)
{
    const char *who[32];
    int32_t whodim[32];
    for (int32_t v = 0; v < k->nvars; v++) {
        ext[v] = -1;
        who[v] = NULL;
        whodim[v] = 0;
    }
    for (int32_t t = 0; t < k->nops; t++) {
        const sc_tensor *o = ops[t];
        if (!o)
            return sc_fail(err, SC_USER, "run", "operand %s is missing", k->opname[t]);
        if (!same_fmt(&o->fmt, &k->fmt[t]))
            return sc_fail(err, SC_USER, "run", "operand %s: format differs from the compiled kernel's",
                           k->opname[t]);
        if (o->dtype != k->dtype)
            return sc_fail(err, SC_USER, "run", "operand %s: dtype %s, the kernel was compiled for %s",
                           k->opname[t], sc_dtype_name(o->dtype), sc_dtype_name(k->dtype));
        if (o->index_type != k->itype[t])
            return sc_fail(err, SC_USER, "run", "operand %s: index type %s, the kernel was compiled for %s",
                           k->opname[t], sc_index_name(o->index_type), sc_index_name(k->itype[t]));
        if (!o->vals && o->nvals > 0)
            return sc_fail(err, SC_USER, "run", "operand %s has no values array", k->opname[t]);
        for (int32_t l = 0; l < o->fmt.order; l++) {
            if ((sc_level_has_pos(o->fmt.kind[l]) && !o->pos[l]) ||
                (sc_level_has_crd(o->fmt.kind[l]) && !o->crd[l] && o->nvals > 0))
                return sc_fail(err, SC_USER, "run", "operand %s: level %d arrays missing",
                               k->opname[t], (int)l);
        }
        for (int32_t d = 0; d < o->fmt.order; d++) {
            int64_t n = o->dims[d];
            if (n < 0)
                return sc_fail(err, SC_USER, "run", "operand %s: negative size %lld", k->opname[t],
                               (long long)n);
            if ((k->bcast[t] >> d) & 1) {
                if (n != 1)
                    return sc_fail(err, SC_USER, "run", "operand %s: dimension %d was broadcast "
                                   "(size 1) when compiled, now has size %lld", k->opname[t], (int)d,
                                   (long long)n);
                continue;
            }
            /* each read of operand t binds its own index here (index notation may read
             * an operand twice with other indices: A(i,j) * A(j,k)) */
            for (int32_t a = 0; a < k->nacc; a++) {
                int32_t v = k->acc_op[a] == t ? k->acc_var[a][d] : -1;
                if (v < 0)
                    continue;
                if (ext[v] < 0) {
                    ext[v] = n;
                    who[v] = k->opname[t];
                    whodim[v] = d;
                } else if (ext[v] != n) {
                    return sc_fail(err, SC_USER, "run",
                                   "size mismatch for index %s: %s dimension %d has size %lld, "
                                   "%s dimension %d has size %lld",
                                   k->varname[v], who[v], (int)whodim[v], (long long)ext[v],
                                   k->opname[t], (int)d, (long long)n);
                }
            }
        }
        if (o->fmt.order > 0) {
            bool dense = true;
            int64_t prod = 1;
            for (int32_t l = 0; l < o->fmt.order; l++) {
                dense &= o->fmt.kind[l] == SC_LEVEL_DENSE;
                if (!sc_mul_ok(prod, o->dims[l], &prod))
                    return sc_fail(err, SC_USER, "run", "operand %s: size overflows", k->opname[t]);
            }
            if (dense && o->nvals != prod)
                return sc_fail(err, SC_USER, "run", "dense operand %s has %lld values, expected %lld",
                               k->opname[t], (long long)o->nvals, (long long)prod);
        }
    }
    for (int32_t v = 0; v < k->nvars; v++) {
        if (ext[v] < 0)
            ext[v] = 1;
        if (k->fixed[v] > 0 && ext[v] != k->fixed[v])
            return sc_fail(err, SC_USER, "run", "index %s has size %lld; the kernel was written "
                           "for size %lld", k->varname[v], (long long)ext[v],
                           (long long)k->fixed[v]);
    }
    /* the output's leading dense levels are allocated whole (a dense output's values, a
     * ddc output's positions): their element count, in bytes, must be a size */
    int64_t cells = 1;
    for (int32_t l = 0; l < k->out_fmt.order && k->out_fmt.kind[l] == SC_LEVEL_DENSE; l++)
        if (!sc_mul_ok(cells, ext[k->out_var[k->out_fmt.lvl2dim[l]]], &cells) ||
            cells > INT64_MAX / 16) {
            char sizes[256];
            size_t n = 0;
            sizes[0] = '\0';
            for (int32_t d = 0; d < k->out_order && n < sizeof sizes; d++)
                n += (size_t)snprintf(sizes + n, sizeof sizes - n, "%s%lld", d ? " x " : "",
                                      (long long)ext[k->out_var[d]]);
            return sc_fail(err, SC_USER, "run", "the output (%s) would hold more elements "
                           "than memory can address", sizes);
        }
    return SC_OK;
}

/* A kernel whose output has an operand's pattern hands out that operand's pos and crd
 * (scorch_rt.h: borrowed).  Those of a caller's operand are marked borrowed; those of a
 * copy transposed for this run (tmp, freed below) are taken over by the output. */
static void adopt_shared(sc_tensor *out, const sc_tensor *const *use, sc_tensor *tmp,
                         uint32_t made, int32_t nops)
{
    for (int32_t l = 0; l < out->fmt.order; l++) {
        int32_t j, t = sc_tensor_lender(use, nops, out, l, &j);
        if (t < 0)
            continue;
        if ((made >> t) & 1u) {
            if (out->pos[l] == tmp[t].pos[j])
                tmp[t].pos[j] = NULL;
            if (out->crd[l] == tmp[t].crd[j])
                tmp[t].crd[j] = NULL;
        } else {
            out->borrowed |= 1u << l;
        }
    }
}

sc_status sc_kernel_run(const sc_kernel *k, const sc_tensor *const *ops, int num_threads,
                        sc_tensor *out, sc_error *err)
{
    sc_error_clear(err);
    if (!k || !out || (k->nops > 0 && !ops))
        return sc_fail(err, SC_USER, "run", "sc_kernel_run: missing argument");
    memset(out, 0, sizeof *out);
    int64_t ext[32];
    sc_status st = check_ops(k, ops, ext, err);
    if (st != SC_OK)
        return st;
    const sc_ctx *ctx = &k->c->ctx;
    sc_tensor tmp[SC_DRV_MAX_OPS];
    const sc_tensor *use[SC_DRV_MAX_OPS];
    uint32_t made = 0;
    for (int32_t t = 0; t < k->nops; t++) {
        use[t] = ops[t];
        if (!((k->transpose >> t) & 1))
            continue;
        st = sc_fmt_convert(ctx, ops[t], &k->tfmt[t], ops[t]->index_type, 0, &tmp[t], err);
        if (st != SC_OK)
            goto done;
        made |= 1u << t;
        use[t] = &tmp[t];
    }
    out->fmt = k->out_fmt;
    out->dtype = k->dtype;
    out->index_type = k->out_itype;
    for (int32_t d = 0; d < k->out_order; d++)
        out->dims[d] = ext[k->out_var[d]];
    sc_rt_env env;
    memset(&env, 0, sizeof env);
    env.alloc = ctx->mem.alloc;
    env.free = ctx->mem.free;
    env.user = ctx->mem.user;
    env.num_threads = num_threads > 0 ? num_threads : ctx->num_threads;
    env.cache_bytes = ctx->cache_bytes;
    int rc = k->fn(use, out, &env);
    if (rc == SC_OK)
        adopt_shared(out, use, tmp, made, k->nops);
    if (rc != SC_OK) {
        env.msg[sizeof env.msg - 1] = '\0';
        st = sc_fail(err, rc > 0 && rc < SC_STATUS_COUNT ? (sc_status)rc : SC_RUNTIME, "kernel", "%s",
                     env.msg[0] ? env.msg : "kernel failed");
    }
done:
    for (int32_t t = 0; t < k->nops; t++)
        if ((made >> t) & 1)
            sc_tensor_release(ctx, &tmp[t]);
    if (st != SC_OK) {
        sc_format f = out->fmt;
        memset(out, 0, sizeof *out);
        out->fmt = f;
    }
    return st;
}
