/*
 * problem.c — the lowering problem: accesses with their per-level variables, index
 * extents bound from the operand shapes, checks of dtypes and formats, and the output
 * (given or inferred) with its level variables.
 *
 * Invariant after sc_lower_set_output: every access's lvar[] and the output's out_lvar[]
 * follow the current formats; sc_lower_replace_formats keeps it so.
 */
#include "lower_internal.h"
#include "../format/sc_format.h"

#include <string.h>

static void set_lvars(sc_lower_problem *p)
{
    for (int32_t a = 0; a < p->naccess; a++) {
        sc_lower_access *ac = &p->acc[a];
        const sc_format *f = &p->ops[ac->operand].fmt;
        for (int32_t k = 0; k < ac->order; k++)
            ac->lvar[k] = ac->var[f->lvl2dim[k]];
    }
    for (int32_t k = 0; k < p->out_order; k++)
        p->out_lvar[k] = p->out_var[p->out_fmt.lvl2dim[k]];
}

sc_status sc_lower_prepare(sc_arena *arena, const sc_expr *e, int32_t nops,
                           const sc_tensor *ops, sc_lower_problem *p, sc_error *err)
{
    memset(p, 0, sizeof *p);
    p->e = e;
    if (nops != e->noperands)
        return sc_fail(err, SC_USER, "lower", "the expression has %d operands, %d given",
                       (int)e->noperands, (int)nops);
    if (nops > 64)
        return sc_fail(err, SC_UNSUPPORTED, "lower", "more than 64 operands");
    if (e->nvars > SC_LOWER_MAX_VARS)
        return sc_fail(err, SC_UNSUPPORTED, "lower", "more than %d index variables",
                       SC_LOWER_MAX_VARS);
    p->nvars = e->nvars;
    p->nops = nops;
    p->ops = sc_arena_alloc(arena, (size_t)(nops ? nops : 1) * sizeof *p->ops, err);
    if (!p->ops)
        return SC_NOMEM;
    p->dtype = nops ? ops[0].dtype : SC_DTYPE_F64;
    const int64_t *dimp[64];
    for (int32_t t = 0; t < nops; t++) {
        const sc_tensor *o = &ops[t];
        sc_lower_operand *lo = &p->ops[t];
        if ((unsigned)o->dtype >= SC_DTYPE_COUNT || (unsigned)o->index_type >= SC_INDEX_COUNT)
            return sc_fail(err, SC_USER, "lower", "operand %s: bad dtype or index type",
                           e->operands[t].name);
        if (o->dtype != p->dtype)
            return sc_fail(err, SC_USER, "lower",
                           "operands must share one dtype: %s is %s, %s is %s",
                           e->operands[0].name, sc_dtype_name(p->dtype), e->operands[t].name,
                           sc_dtype_name(o->dtype));
        if (o->fmt.order != e->operands[t].order)
            return sc_fail(err, SC_USER, "lower", "operand %s has order %d, the expression uses %d",
                           e->operands[t].name, (int)o->fmt.order, (int)e->operands[t].order);
        sc_status st = sc_fmt_check(&o->fmt, err);
        if (st != SC_OK)
            return st;
        lo->fmt = o->fmt;
        memcpy(lo->dims, o->dims, sizeof lo->dims);
        lo->itype = o->index_type;
        lo->nnz = o->nvals;
        for (int32_t k = 0; k < o->fmt.order; k++)
            if (o->fmt.kind[k] != SC_LEVEL_DENSE)
                lo->sparse = true;
        dimp[t] = lo->dims;
    }
    p->rhs = sc_lower_from_expr(arena, p, e->rhs, err);
    if (!p->rhs)
        return err && err->kind != SC_OK ? err->kind : SC_NOMEM;
    int64_t ext[SC_LOWER_MAX_VARS + 1];
    sc_status st = sc_expr_bind_dims(e, dimp, true, ext, p->bcast, err);
    if (st != SC_OK)
        return st;
    for (int32_t v = 0; v < p->nvars; v++)
        p->extent[v] = ext[v];
    for (int32_t a = 0; a < p->naccess; a++) {
        const sc_lower_access *ac = &p->acc[a];
        const sc_lower_operand *lo = &p->ops[ac->operand];
        if (!lo->sparse)
            continue;
        if (p->bcast[ac->operand]) {
            sc_fail(err, SC_UNSUPPORTED, "lower",
                    "sparse operand %s cannot be broadcast (a dimension of size 1 is stretched)",
                    e->operands[ac->operand].name);
            if (err)
                err->pos = ac->pos;
            return SC_UNSUPPORTED;
        }
        for (int32_t d = 0; d < ac->order; d++)
            for (int32_t d2 = d + 1; d2 < ac->order; d2++)
                if (ac->var[d] == ac->var[d2]) {
                    sc_fail(err, SC_UNSUPPORTED, "lower",
                            "sparse operand %s uses index %s twice (a diagonal), which a kernel "
                            "cannot read; scorch.einsum takes the diagonal first (\"ii->i\")",
                            e->operands[ac->operand].name, e->vars[ac->var[d]].name);
                    if (err)
                        err->pos = ac->pos;
                    return SC_UNSUPPORTED;
                }
        for (int32_t k = 1; k < lo->fmt.order; k++)
            if (!lo->fmt.unique[k - 1] && lo->fmt.kind[k] != SC_LEVEL_SINGLETON)
                return sc_fail(err, SC_UNSUPPORTED, "lower",
                               "operand %s: a %s level below a non-unique level is not supported",
                               e->operands[ac->operand].name, sc_level_name(lo->fmt.kind[k]));
    }
    p->out_order = e->out.order;
    for (int32_t d = 0; d < p->out_order; d++)
        p->out_var[d] = e->lhs->idx[d];
    set_lvars(p);
    return SC_OK;
}

sc_status sc_lower_set_output(sc_lower_problem *p, const sc_format *fmt, sc_error *err)
{
    sc_format f;
    if (fmt) {
        f = *fmt;
        if (f.order != p->out_order)
            return sc_fail(err, SC_USER, "lower", "output format has order %d, the output has %d",
                           (int)f.order, (int)p->out_order);
        sc_status st = sc_fmt_check(&f, err);
        if (st != SC_OK)
            return st;
    } else {
        sc_lower_infer_format(p, &f);
    }
    p->out_fmt = f;
    p->out_sparse = false;
    for (int32_t k = 0; k < f.order; k++)
        if (f.kind[k] != SC_LEVEL_DENSE)
            p->out_sparse = true;
    /* Assemblable shapes: dense* then either compressed(unique)+ or a COO tail
     * compressed(nonunique) singleton*. */
    int32_t k = 0;
    while (k < f.order && f.kind[k] == SC_LEVEL_DENSE)
        k++;
    if (k < f.order) {
        bool flat = !f.unique[k];
        if (f.kind[k] != SC_LEVEL_COMPRESSED)
            return sc_fail(err, SC_UNSUPPORTED, "lower",
                           "output format: the first sparse level must be compressed");
        for (int32_t j = k + 1; j < f.order; j++) {
            bool ok = flat ? f.kind[j] == SC_LEVEL_SINGLETON
                           : f.kind[j] == SC_LEVEL_COMPRESSED && f.unique[j];
            if (!ok)
                return sc_fail(err, SC_UNSUPPORTED, "lower",
                               "output format: level %d (%s) cannot be assembled; use dense "
                               "levels then compressed levels, or coo", (int)j,
                               sc_level_name(f.kind[j]));
        }
    }
    sc_index_type it = SC_INDEX_I32;
    for (int32_t t = 0; t < p->nops; t++)
        if (p->ops[t].itype == SC_INDEX_I64)
            it = SC_INDEX_I64;
    for (int32_t d = 0; d < p->out_order; d++) {
        p->out_dims[d] = p->extent[p->out_var[d]];
        if (p->out_dims[d] > INT32_MAX)
            it = SC_INDEX_I64;
    }
    p->out_itype = it;
    set_lvars(p);
    return SC_OK;
}

void sc_lower_fix_extents(sc_lower_problem *p, sc_expr_var outer)
{
    bool rows_out = false;
    for (int32_t d = 0; d < p->out_order; d++)
        rows_out |= p->out_var[d] == outer;
    for (sc_expr_var v = 0; v < p->nvars; v++) {
        bool ok = p->extent[v] >= 1 && p->extent[v] <= SC_LOWER_FIXED_MAX, read = false;
        for (int32_t d = 0; d < p->out_order; d++)
            ok &= rows_out || p->out_var[d] != v;
        for (int32_t a = 0; a < p->naccess; a++)
            for (int32_t d = 0; d < p->acc[a].order; d++)
                if (p->acc[a].var[d] == v) {
                    ok &= !p->ops[p->acc[a].operand].sparse &&
                          !((p->bcast[p->acc[a].operand] >> d) & 1);
                    read = true;
                }
        p->fixed[v] = ok && read ? p->extent[v] : 0;
    }
}

void sc_lower_replace_formats(sc_lower_problem *p, uint32_t mask, const sc_format *fmts)
{
    for (int32_t t = 0; t < p->nops && t < 32; t++)
        if ((mask >> t) & 1)
            p->ops[t].fmt = fmts[t];
    set_lvars(p);
}
