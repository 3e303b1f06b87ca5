/*
 * check.c — legality of a schedule for a problem, applied when a schedule (forced or
 * automatic) is used; the reason comes back as a USER error.
 *
 * Derives what the loop builder relies on: operands to transpose (a sparse operand whose
 * levels the loop order visits out of level order gets its levels re-ordered, keeping
 * the level kinds; a dense one read across its levels by a dense innermost loop may be
 * too: sc_sched_relayout), the workspace of a sparse output (the output indices nested inside
 * the first reduction loop that has output loops inside it) and the parallel loop (for
 * which an operand whose repeated top-level coordinates would keep it sequential is
 * converted to unique ones: sc_sched_made_unique).
 */
#include "sched_internal.h"

#include <stdio.h>
#include <string.h>

static sc_status bad(sc_error *err, const char *fmt, const char *a, const char *b)
{
    sc_fail(err, SC_USER, "schedule", fmt, a, b);
    if (err)
        err->pos = -1;
    return SC_USER;
}

/* Concordant format of operand t for the loop order (its levels sorted by depth, each
 * position keeping its level kind).  A sparse format whose last level becomes dense gets
 * a compressed one there: a cdd read in order j,k,i as cdd (1,2,0) would store every i
 * of each (j,k), places the operand never stored (zeros a sparse output then kept, and
 * a copy far larger than the entries); with the last level compressed the copy stores
 * exactly the operand's places. */
static void concordant(const sc_format *f, const sc_lower_access *ac, const int32_t *depth,
                       sc_format *out)
{
    *out = *f;
    int32_t dims[SC_MAX_ORDER];
    for (int32_t d = 0; d < f->order; d++)
        dims[d] = d;
    for (int32_t i = 1; i < f->order; i++)
        for (int32_t j = i; j > 0 && depth[ac->var[dims[j]]] < depth[ac->var[dims[j - 1]]]; j--) {
            int32_t t = dims[j];
            dims[j] = dims[j - 1];
            dims[j - 1] = t;
        }
    for (int32_t k = 0; k < f->order; k++)
        out->lvl2dim[k] = dims[k];
    bool sparse = false;
    for (int32_t k = 0; k < f->order; k++)
        sparse |= f->kind[k] != SC_LEVEL_DENSE;
    if (sparse && out->kind[f->order - 1] == SC_LEVEL_DENSE)
        out->kind[f->order - 1] = SC_LEVEL_COMPRESSED;
}

/* Common analysis of an order: transposes, workspace depth; USER on illegal orders.
 * Used by the checker (with messages) and by the cost model (err NULL). */
sc_status sc_sched_analyse(const sc_lower_problem *p, const sc_expr_var *order, sc_sched *s,
                           sc_error *err)
{
    const sc_expr *e = p->e;
    int32_t depth[SC_LOWER_MAX_VARS];
    for (int32_t v = 0; v < p->nvars; v++)
        depth[v] = -1;
    for (int32_t d = 0; d < p->nvars; d++)
        depth[order[d]] = d;
    s->transpose = 0;
    for (int32_t a = 0; a < p->naccess; a++) {
        const sc_lower_access *ac = &p->acc[a];
        const sc_lower_operand *op = &p->ops[ac->operand];
        if (!op->sparse)
            continue;
        bool ok = true;
        for (int32_t k = 1; k < ac->order; k++)
            ok &= depth[ac->lvar[k - 1]] < depth[ac->lvar[k]];
        sc_format f = op->fmt;
        if (!ok)
            concordant(&op->fmt, ac, depth, &f);
        int32_t t = ac->operand;
        if (t >= 32)
            return sc_fail(err, SC_UNSUPPORTED, "schedule", "more than 32 operands");
        if ((s->transpose >> t) & 1) {
            if (memcmp(&s->tfmt[t], &f, sizeof f) != 0)
                return bad(err, "operand %s is read in two index orders that no single level order serves%s",
                           e->operands[t].name, "");
        } else if (!ok) {
            for (int32_t b = 0; b < a; b++)
                if (p->acc[b].operand == t)
                    return bad(err, "operand %s is read in two index orders that no single level order serves%s",
                               e->operands[t].name, "");
            s->transpose |= 1u << t;
            s->tfmt[t] = f;
        }
    }
    s->ws_depth = -1;
    if (!p->out_sparse)
        return SC_OK;
    int32_t D = 0;
    while (D < p->out_order && p->out_fmt.kind[D] == SC_LEVEL_DENSE)
        D++;
    for (int32_t k = 0; k < D; k++)
        if (depth[p->out_lvar[k]] != k)
            return bad(err, "the sparse output's dense level over index %s must be loop %s from the outside",
                       e->vars[p->out_lvar[k]].name, k == 0 ? "1" : k == 1 ? "2" : "k+1");
    for (int32_t k = 1; k < p->out_order; k++)
        if (depth[p->out_lvar[k - 1]] > depth[p->out_lvar[k]])
            return bad(err, "the sparse output stores index %s before %s: the loop order must follow that order",
                       e->vars[p->out_lvar[k - 1]].name, e->vars[p->out_lvar[k]].name);
    int32_t dlast = -1;
    for (int32_t k = 0; k < p->out_order; k++)
        if (depth[p->out_lvar[k]] > dlast)
            dlast = depth[p->out_lvar[k]];
    for (int32_t d = 0; d < dlast; d++)
        if (!sc_expr_var_in_output(e, order[d])) {
            s->ws_depth = d;
            break;
        }
    return SC_OK;
}

void sc_sched_relayout(const sc_lower_problem *p, sc_sched *s)
{
    if (p->nvars == 0)
        return;
    sc_expr_var in = s->order[p->nvars - 1];
    const bool sized = s->relayout == SC_SCHED_RELAYOUT_SIZED;
    if (s->relayout == SC_SCHED_RELAYOUT_NONE || (sized && p->extent[in] <= 1) ||
        !sc_sched_inner_dense(p, s))
        return;
    int32_t depth[SC_LOWER_MAX_VARS];
    for (int32_t d = 0; d < p->nvars; d++)
        depth[s->order[d]] = d;
    double inner = -1;
    for (int32_t t = 0; t < p->nops && t < 32; t++) {
        const sc_lower_operand *op = &p->ops[t];
        if (op->sparse || ((s->transpose >> t) & 1) || p->bcast[t] || op->fmt.order < 2)
            continue;
        const sc_lower_access *ac = NULL;
        int32_t uses = 0;
        for (int32_t a = 0; a < p->naccess; a++)
            if (p->acc[a].operand == t) {
                ac = &p->acc[a];
                uses++;
            }
        if (uses != 1 || ac->lvar[ac->order - 1] == in)
            continue;
        bool reads_in = false, flat = false;
        uint32_t seen = 0;
        double size = 1;
        for (int32_t d = 0; d < ac->order; d++) {
            reads_in |= ac->var[d] == in;
            flat |= (sized && op->dims[d] <= 1) || ((seen >> ac->var[d]) & 1); /* (or a diagonal) */
            seen |= 1u << ac->var[d];
            size *= (double)op->dims[d];
        }
        if (!reads_in || flat)
            continue;
        if (inner < 0)
            inner = sc_sched_inner_count(p, s->order);
        if (sized && SC_SCHED_DENSE_COPY * size >= inner)
            continue;
        concordant(&op->fmt, ac, depth, &s->tfmt[t]);
        s->transpose |= 1u << t;
    }
}

void sc_sched_transposed(const sc_lower_problem *p0, const sc_sched *s, sc_lower_problem *p,
                         sc_lower_operand ops[SC_SCHED_MAX_OPS])
{
    *p = *p0;
    memcpy(ops, p0->ops, (size_t)p0->nops * sizeof ops[0]);
    p->ops = ops;
    sc_lower_replace_formats(p, s->transpose, s->tfmt);
}

bool sc_sched_parallel_ok(const sc_lower_problem *p0, const sc_sched *s, char *why, size_t n)
{
    sc_lower_problem p;
    sc_lower_operand ops[SC_SCHED_MAX_OPS];
    sc_sched_transposed(p0, s, &p, ops);
    sc_expr_var v = s->parallel;
    if (p.nvars == 0 || s->order[0] != v) {
        snprintf(why, n, "index %s is not the outermost loop", p.e->vars[v].name);
        return false;
    }
    if (!sc_expr_var_in_output(p.e, v)) {
        snprintf(why, n, "index %s is a reduction index", p.e->vars[v].name);
        return false;
    }
    /* (unless the output has an operand's whole pattern: its entries are that operand's,
     * written at their own positions, so no assembly orders them) */
    int32_t whole = p.out_sparse && s->ws_depth < 0 ? sc_lower_whole_pattern(&p) : -1;
    if (p.out_sparse && p.out_fmt.kind[0] != SC_LEVEL_DENSE && whole < 0) {
        snprintf(why, n, "the output's first level (index %s) is compressed", p.e->vars[v].name);
        return false;
    }
    int8_t nb[SC_LOWER_MAX_ACCESSES] = {0};
    sc_lower_lattice lat;
    if (sc_lower_lattice_at(&p, p.rhs, v, nb, &lat, NULL) != SC_OK) {
        snprintf(why, n, "too many sparse operands");
        return false;
    }
    if (lat.niters == 0)
        return true;
    if (lat.niters == 1 && !lat.universe) {
        const sc_lower_access *ac = &p.acc[lat.iters[0]];
        if (p.ops[ac->operand].fmt.unique[0])
            return true;
        /* a non-unique first level (COO's rows) whose entries the output shares, each
         * written at its own position: the threads take shares of its positions that
         * split no run of equal coordinates (sc_ir_runsplit) */
        if (whole == lat.iters[0] && p.ops[ac->operand].fmt.kind[0] == SC_LEVEL_COMPRESSED)
            return true;
    }
    snprintf(why, n, "the loop over index %s co-iterates sparse operands or non-unique coordinates",
             p.e->vars[v].name);
    return false;
}

bool sc_sched_made_unique(const sc_lower_problem *p, sc_sched *s)
{
    if (!p->convert_once)
        return false;
    for (int32_t t = 0; t < p->nops && t < 32; t++) {
        bool tr = (s->transpose >> t) & 1;
        const sc_format *f = tr ? &s->tfmt[t] : &p->ops[t].fmt;
        if (!p->ops[t].sparse || f->order < 1 || f->kind[0] != SC_LEVEL_COMPRESSED ||
            f->unique[0])
            continue;
        sc_format u = *f;
        for (int32_t k = 0; k < u.order; k++) {
            if (u.kind[k] == SC_LEVEL_SINGLETON)
                u.kind[k] = SC_LEVEL_COMPRESSED;
            u.unique[k] = 1;
        }
        sc_sched tried = *s;
        tried.transpose |= 1u << t;
        tried.tfmt[t] = u;
        char why[200];
        if (sc_sched_parallel_ok(p, &tried, why, sizeof why)) {
            *s = tried;
            return true;
        }
    }
    return false;
}

sc_status sc_sched_check(const sc_lower_problem *p, sc_sched *s, sc_error *err)
{
    const sc_expr *e = p->e;
    if (s->norder != p->nvars)
        return bad(err, "order(...) must list every index of the expression once%s%s", "", "");
    sc_status st = sc_sched_analyse(p, s->order, s, err);
    if (st != SC_OK)
        return st;
    sc_sched_relayout(p, s);
    /* workspace */
    int32_t nw = 0;
    sc_expr_var w[SC_SCHED_MAX_WS];
    if (s->ws_depth >= 0)
        for (int32_t d = s->ws_depth + 1; d < p->nvars; d++)
            if (sc_expr_var_in_output(e, s->order[d])) {
                if (nw == SC_SCHED_MAX_WS)
                    return sc_fail(err, SC_UNSUPPORTED, "schedule", "workspace over more than %d indices",
                                   SC_SCHED_MAX_WS);
                w[nw++] = s->order[d];
            }
    if (s->has_workspace) {
        for (int32_t i = 0; i < s->nworkspace; i++) {
            bool found = false;
            for (int32_t j = 0; j < nw; j++)
                found |= w[j] == s->workspace[i];
            if (!found)
                return bad(err, "workspace(%s) is illegal: %s", e->vars[s->workspace[i]].name,
                           p->out_sparse ? "it is not an output index nested inside a reduction loop"
                                         : "a dense output needs no workspace");
        }
        if (s->nworkspace != nw)
            return bad(err, "this order needs workspace(...) over every output index nested inside the reduction loop %s%s",
                       e->vars[s->order[s->ws_depth]].name, "");
    }
    s->has_workspace = true;
    s->nworkspace = nw;
    memcpy(s->workspace, w, sizeof w);
    /* parallel */
    char why[200];
    if (s->has_parallel && s->parallel >= 0) {
        if (!sc_sched_parallel_ok(p, s, why, sizeof why))
            return bad(err, "parallel(%s) is illegal: %s", e->vars[s->parallel].name, why);
    } else if (!s->has_parallel) {
        s->parallel = -1;
        if (p->nvars > 0) {
            s->parallel = s->order[0];
            if (!sc_sched_parallel_ok(p, s, why, sizeof why) && !sc_sched_made_unique(p, s))
                s->parallel = -1;
        }
    }
    s->has_parallel = true;
    return SC_OK;
}
