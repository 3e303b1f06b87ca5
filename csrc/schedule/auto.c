/*
 * auto.c — the automatic schedule: every loop order of up to 7 indices is costed (a few
 * microseconds for typical 3-4 index kernels; beyond 7, the orders of the indices of
 * more than one iteration, those of one innermost), larger problems take the order of
 * first appearance that keeps every sparse tensor's levels in order (concordant_order);
 * the cheapest legal order wins, ties going to the earlier order.
 *
 * Cost (in "loop iterations"): for each loop the estimated iteration count, the product
 * of the fan-outs of the loops around it, where the fan-out of index v is what the
 * merge lattice allows — min over a product's factors, the sum (capped at the extent)
 * over a sum's terms, the extent for dense operands and literals, and for a sparse
 * operand est(vars bound with v) / est(vars bound), est(S) = min(prod of S's extents,
 * nnz) (uniformly spread entries); a loop of extent 1 costs nothing (so a size-1
 * dimension never displaces the rows from the outermost, parallel loop), halved where
 * the outermost loop can run in parallel.  Added: converting each discordant sparse
 * operand (~10 nnz log nnz per run; a tenth of a pass, 0.1 nnz, where the caller keeps
 * the copy, convert_once — made once, shared by the calls that read it — and the copy
 * buys a parallel loop: the orders that do not, a SpGEMM
 * workspace over two levels among them, keep the charge they were weighed with; a copy
 * that moves a batch level (a ddc's heads) inward, or starts with a grid of two or more
 * dense levels larger than its entries and the operand's own grid, is charged as made at
 * every run, plus the grid's cells: multi-head scores "hij" as ddc read in order i,j,h
 * would copy into an n×n grid, at every backward) and
 * one pass per dense operand relaid (sc_sched_relayout), a penalty for dense accesses
 * with a non-unit stride in the innermost loop (for a dense output in register tiles, a
 * store per tile lane instead), a gathered or scattered dense access in an innermost
 * sparse loop, a discount for an innermost dense loop of unit-stride accesses (vector
 * code), the scatter and sort traffic of a sparse output's workspace, and a penalty
 * above all else for a sparse output that would store every coordinate of a dense
 * loop.  Sparse
 * constrained indices end up outermost because that is what makes the counts small.
 */
#include "sched_internal.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static double est(const sc_lower_problem *p, const sc_lower_access *ac, uint32_t bound)
{
    double prod = 1;
    uint32_t seen = 0;
    for (int32_t d = 0; d < ac->order; d++) {
        sc_expr_var v = ac->var[d];
        if (((bound >> v) & 1) && !((seen >> v) & 1)) {
            prod *= (double)(p->extent[v] > 0 ? p->extent[v] : 1);
            seen |= 1u << v;
        }
    }
    double nnz = (double)(p->ops[ac->operand].nnz > 0 ? p->ops[ac->operand].nnz : 1);
    return prod < nnz ? prod : nnz;
}

static double fanout(const sc_lower_problem *p, const sc_lower_node *n, sc_expr_var v,
                     uint32_t bound)
{
    double ext = (double)(p->extent[v] > 0 ? p->extent[v] : 1);
    if (!n)
        return 0;
    switch (n->kind) {
    case SC_LN_ACCESS: {
        const sc_lower_access *ac = &p->acc[n->access];
        bool uses = false;
        for (int32_t d = 0; d < ac->order; d++)
            uses |= ac->var[d] == v;
        if (!uses || !p->ops[ac->operand].sparse)
            return ext;
        return est(p, ac, bound | (1u << v)) / est(p, ac, bound);
    }
    case SC_LN_LIT:
        return ext;
    case SC_LN_NEG:
        return fanout(p, n->a, v, bound);
    case SC_LN_MUL: {
        double a = fanout(p, n->a, v, bound), b = fanout(p, n->b, v, bound);
        return a < b ? a : b;
    }
    default: {
        double s = fanout(p, n->a, v, bound) + fanout(p, n->b, v, bound);
        return s < ext ? s : ext;
    }
    }
}

/* Whether a loop over v (the variables in bound already bound around it) runs over
 * stored coordinates only: some sparse operand's next level is a compressed or singleton
 * one over v (every level above it bound), so the merge lattice iterates that level —
 * one factor of a product does, every term of a sum must. */
static bool thinned(const sc_lower_problem *p, const sc_lower_node *n, sc_expr_var v,
                    uint32_t bound)
{
    if (!n)
        return false;
    switch (n->kind) {
    case SC_LN_ACCESS: {
        const sc_lower_access *ac = &p->acc[n->access];
        const sc_lower_operand *op = &p->ops[ac->operand];
        for (int32_t k = 0; op->sparse && k < ac->order; k++) {
            if (ac->lvar[k] == v)
                return op->fmt.kind[k] != SC_LEVEL_DENSE;
            if (!((bound >> ac->lvar[k]) & 1))
                return false; /* a level above v's is not bound yet */
        }
        return false;
    }
    case SC_LN_NEG:
        return thinned(p, n->a, v, bound);
    case SC_LN_MUL:
        return thinned(p, n->a, v, bound) || thinned(p, n->b, v, bound);
    case SC_LN_ADD:
    case SC_LN_SUB:
        return thinned(p, n->a, v, bound) && thinned(p, n->b, v, bound);
    default:
        return false;
    }
}

/* Whether v is an output index. */
static bool is_output(const sc_lower_problem *p, sc_expr_var v)
{
    for (int32_t k = 0; k < p->out_order; k++)
        if (p->out_var[k] == v)
            return true;
    return false;
}

/* A sparse output without a workspace stores an entry at every iteration of the loop
 * over a compressed output level's index, unless that loop runs over stored coordinates
 * only and nothing inside it can come up empty.  Two ways it stores zeros: the loop is
 * walked densely (no sparse operand thins it, in the formats the order reads them in:
 * A·B in order i,k,j reads B as csc, whose k is dense, and stores every (i,k)), or a
 * sparse reduction runs inside it, whose intersection may be empty (the inner-product
 * order over a dcsc B stores an (i,k) for every stored column k of B, zero or not).
 * Either way the result is denser than the product, so such an order costs more than
 * any other (a penalty, not +inf, so that the least bad one still wins when all of them
 * do it).  A loop of one iteration counts as any other: a 1 x n by n x 1 product in
 * order i,k,j stored its one entry with nothing multiplied into it (it had been left
 * alone; one under the rows of A, A·B with one column in B, stored one per row).  A
 * loop a compressed level drives, with only output indices or dense loops inside, stores
 * only the operand's coordinates: exempt (penalising it sent SDDMM over coo and dcsr to
 * order (k,i,j) with a workspace of every (i,j)). */
static double densified_output(const sc_lower_problem *p, const sc_sched *s,
                               const sc_expr_var *order)
{
    /* whether a loop is thinned, in the formats the order reads the sparse operands in
     * (a transposed copy's levels: A·B in order i,k,j reads B as csc, whose k is dense) */
    sc_lower_problem tp;
    sc_lower_operand ops[SC_SCHED_MAX_OPS];
    sc_sched_transposed(p, s, &tp, ops);
    bool th[SC_LOWER_MAX_VARS];
    uint32_t bound = 0;
    for (int32_t d = 0; d < p->nvars; d++) {
        th[d] = thinned(&tp, tp.rhs, order[d], bound);
        bound |= 1u << order[d];
    }
    for (int32_t d = 0; d < p->nvars; d++) {
        sc_expr_var v = order[d];
        bool exempt = th[d];
        for (int32_t e = d + 1; e < p->nvars && exempt; e++)
            if (th[e] && !is_output(p, order[e]))
                exempt = false;
        for (int32_t k = 0; k < p->out_order; k++)
            if (p->out_lvar[k] == v && p->out_fmt.kind[k] != SC_LEVEL_DENSE && !exempt)
                return 1e18;
    }
    return 0;
}

/* A parallel outermost loop that splits a sparse operand's rows shares the work among the
 * threads: counted as two, the fewest a parallel machine has.  (Without it a sequential
 * order won every tie, and A^T X ran on one thread, scattering into the output's rows,
 * rather than over the transposed copy in parallel: 2.7-7x slower on the shared graphs
 * at K = 64.)  Only such a loop: a parallel loop over a dense index outside the sparse
 * operands (SpMM's columns, order k,j,i) walks the whole operand once per iteration, which
 * the iteration counts do not see. */
enum { PAR_SHARE = 2 };

/* An innermost loop over a dense index whose dense accesses all have unit stride runs in
 * vector registers (SpMM's and SDDMM's K): its iterations count at this share.  Without
 * it an order whose innermost loop gathers from a sparse row (A B^T in order i,k,j: row
 * i of A read again for every k, B's entries gathered) tied with the contiguous one
 * (i,j,k over a transposed B) and won. */
static const double VECTOR_SHARE = 0.5;

/* A dense operand or output read or written at a sparse operand's stored coordinates in
 * the innermost loop (a gather or scatter, x[crd[p]]) costs this much more per iteration:
 * the order whose innermost loop gathers A B^T's B[k, j] at A's stored j (i,k,j) ran
 * 5.5x slower than a SpMM over B^T (i,j,k) on usroads at 64 columns, yet counted 1.3x
 * less. */
static const double GATHER = 1.0;


/* Whether v is the index of some sparse operand's first level (in the format s gives it). */
static bool splits_rows(const sc_lower_problem *p, const sc_sched *s, sc_expr_var v)
{
    for (int32_t a = 0; a < p->naccess; a++) {
        const sc_lower_access *ac = &p->acc[a];
        int32_t t = ac->operand;
        if (!p->ops[t].sparse || ac->order == 0)
            continue;
        const sc_format *f = t < 32 && ((s->transpose >> t) & 1) ? &s->tfmt[t] : &p->ops[t].fmt;
        if (ac->var[f->lvl2dim[0]] == v)
            return true;
    }
    return false;
}

/* The depth where the loop builder starts a register tile of a dense output (the
 * innermost loop, dense, over an output index, with a reduction loop between it and the
 * other output indices: SpMM's row, stored once per tile), or -1 (build.c's tile_depth).
 * Such a tile is stored once per iteration of the loop above it, so an output strided
 * along the innermost loop costs a store per tile entry, not per iteration. */
static int32_t tile_start(const sc_lower_problem *p, const sc_expr_var *order, bool dense_in,
                          bool par)
{
    int32_t n = p->nvars, r = 0;
    if (p->out_sparse || n < 2 || !dense_in || !is_output(p, order[n - 1]))
        return -1;
    for (int32_t d = 0; d < n - 1; d++)
        if (is_output(p, order[d]))
            r = d + 1;
    return r > n - 2 || (r == 0 && par) ? -1 : r;
}

bool sc_sched_inner_dense(const sc_lower_problem *p0, const sc_sched *s)
{
    if (p0->nvars == 0)
        return false;
    /* in the formats the order reads the sparse operands in (a transposed copy's levels:
     * "bij,bj->bi" in order b,j,i over a ddc A scatters at the copy's compressed i) */
    sc_lower_problem p;
    sc_lower_operand ops[SC_SCHED_MAX_OPS];
    sc_sched_transposed(p0, s, &p, ops);
    uint32_t bound = 0;
    for (int32_t d = 0; d + 1 < p.nvars; d++)
        bound |= 1u << s->order[d];
    return !thinned(&p, p.rhs, s->order[p.nvars - 1], bound);
}

double sc_sched_inner_count(const sc_lower_problem *p, const sc_expr_var *order)
{
    double cnt = 1;
    uint32_t bound = 0;
    for (int32_t d = 0; d < p->nvars; d++) {
        cnt *= fanout(p, p->rhs, order[d], bound);
        bound |= 1u << order[d];
    }
    return cnt;
}

/* Whether a copy of operand op in format f moves one of op's batch levels (the dense
 * levels above the last of the dense ones it starts with, where a sparse level follows:
 * a ddc's heads, not a csr's rows) below another dimension. */
static bool moves_batch(const sc_lower_operand *op, const sc_format *f)
{
    int32_t run = 0;
    while (run < op->fmt.order && op->fmt.kind[run] == SC_LEVEL_DENSE)
        run++;
    if (run == op->fmt.order)
        return false;
    uint32_t batch = 0;
    for (int32_t k = 0; k + 1 < run; k++)
        batch |= 1u << op->fmt.lvl2dim[k];
    bool other = false;
    for (int32_t k = 0; k < f->order; k++) {
        bool b = (batch >> f->lvl2dim[k]) & 1;
        if (b && other)
            return true;
        other |= !b;
    }
    return false;
}

/* The positions of the grid a copy of operand op in format f starts with, its leading
 * dense levels, where they are two or more (one is a matrix's rows or columns, the
 * ordinary csr / csc shape); else 0. */
static double dense_grid(const sc_lower_operand *op, const sc_format *f)
{
    double cells = 1;
    int32_t k = 0;
    for (; k < f->order && f->kind[k] == SC_LEVEL_DENSE; k++)
        cells *= (double)(op->dims[f->lvl2dim[k]] > 0 ? op->dims[f->lvl2dim[k]] : 1);
    return k >= 2 ? cells : 0;
}

double sc_sched_cost(const sc_lower_problem *p, const sc_expr_var *order)
{
    sc_sched s;
    memset(&s, 0, sizeof s);
    if (sc_sched_analyse(p, order, &s, NULL) != SC_OK)
        return INFINITY;
    char why[200];
    s.norder = p->nvars;
    memcpy(s.order, order, (size_t)p->nvars * sizeof order[0]);
    s.parallel = p->nvars > 0 ? order[0] : -1;
    bool par = s.parallel >= 0 && (sc_sched_parallel_ok(p, &s, why, sizeof why) ||
                                   sc_sched_made_unique(p, &s)) &&
               splits_rows(p, &s, order[0]);
    sc_sched_relayout(p, &s);
    double convert = 0, cost = 0;
    for (int32_t t = 0; t < p->nops && t < 32; t++)
        if ((s.transpose >> t) & 1) {
            double nnz = (double)(p->ops[t].nnz > 0 ? p->ops[t].nnz : 1);
            if (!p->ops[t].sparse)
                convert += SC_SCHED_DENSE_COPY * nnz;
            else {
                /* a copy that moves a batch level inward, or starts with a grid of more
                 * positions than the entries and the operand's own grid (building every
                 * one of them), is charged as made at every run: batched operands are
                 * mostly a step's own tensors (multi-head scores, their gradient, new at
                 * every backward), whose copies put the heads innermost, 4-20x slower */
                double own = dense_grid(&p->ops[t], &p->ops[t].fmt);
                double more = dense_grid(&p->ops[t], &s.tfmt[t]) - (own > nnz ? own : nnz);
                bool kept = p->convert_once && par && more <= 0 &&
                            !moves_batch(&p->ops[t], &s.tfmt[t]);
                convert += kept ? 0.1 * nnz : 10.0 * nnz * (1.0 + log2(nnz + 1.0) / 4.0);
                if (more > 0)
                    convert += more;
            }
        }
    double cnt = 1, cnt_at_ws = 0, last = 0, at[SC_LOWER_MAX_VARS];
    uint32_t bound = 0;
    for (int32_t d = 0; d < p->nvars; d++) {
        sc_expr_var v = order[d];
        cnt *= fanout(p, p->rhs, v, bound);
        at[d] = cnt;
        last = p->extent[v] != 1 ? cnt : 0; /* (a loop of one iteration adds none) */
        cost += last;
        bound |= 1u << v;
        if (d == s.ws_depth - 1 || (s.ws_depth == 0 && d == 0))
            cnt_at_ws = cnt;
    }
    if (p->nvars > 0) {
        sc_expr_var in = order[p->nvars - 1];
        bool dense_in = sc_sched_inner_dense(p, &s), strided = false;
        for (int32_t a = 0; a < p->naccess; a++) {
            const sc_lower_access *ac = &p->acc[a];
            int32_t t = ac->operand;
            const sc_lower_operand *op = &p->ops[t];
            if (op->sparse || ac->order == 0)
                continue;
            const sc_format *f = t < 32 && ((s.transpose >> t) & 1) ? &s.tfmt[t] : &op->fmt;
            bool uses = false;
            for (int32_t d = 0; d < ac->order; d++)
                uses |= ac->var[d] == in;
            if (uses && ac->var[f->lvl2dim[f->order - 1]] != in) {
                cost += 0.5 * cnt;
                strided = true;
            }
            if (uses && !dense_in)
                cost += GATHER * cnt;
        }
        if (!p->out_sparse && !dense_in && is_output(p, in))
            cost += GATHER * cnt;
        if (!p->out_sparse && p->out_order > 0 && is_output(p, in) &&
            p->out_lvar[p->out_order - 1] != in) {
            int32_t r = tile_start(p, order, dense_in, par);
            if (r < 0) {
                cost += 0.5 * cnt;
                strided = true;
            } else {
                cost += (r > 0 ? at[r - 1] : 1.0) * (double)p->extent[in];
            }
        }
        if (!strided && dense_in)
            cost -= (1.0 - VECTOR_SHARE) * last;
    }
    if (p->out_sparse && s.ws_depth < 0)
        cost += densified_output(p, &s, order);
    if (s.ws_depth >= 0) {
        double out = cnt < cnt_at_ws * 1e9 ? cnt : cnt_at_ws;
        cost += cnt + 0.5 * out * (1.0 + log2(out + 1.0) / 4.0);
        /* the workspace itself, dense over the output indices inside it, cleared once:
         * a row of a SpGEMM costs its width, a workspace over two levels (order j,i,k
         * into a dcsr C) every entry of C — 4.9e9 for a 70000² product of 4 entries,
         * which then went out of memory where converting A costs 40 */
        double size = 1;
        for (int32_t d = s.ws_depth; d < p->nvars; d++)
            if (is_output(p, order[d]))
                size *= (double)(p->extent[order[d]] > 0 ? p->extent[order[d]] : 1);
        cost += size;
    }
    if (par)
        cost /= PAR_SHARE;
    return convert + cost;
}

typedef struct search {
    const sc_lower_problem *p;
    sc_expr_var cur[SC_LOWER_MAX_VARS], best[SC_LOWER_MAX_VARS];
    double best_cost;
    uint32_t used;
    uint32_t last;   /* indices not permuted: placed innermost, in index order */
    sc_sched_ranked *all;   /* sc_sched_rank: every legal order is kept here */
    size_t nall;
} search;

static void permute(search *S, int32_t d)
{
    const sc_lower_problem *p = S->p;
    if ((S->used | S->last) == (uint32_t)((1ull << p->nvars) - 1)) {   /* every index placed */
        for (sc_expr_var v = 0; v < p->nvars; v++)   /* (the indices kept innermost) */
            if ((S->last >> v) & 1)
                S->cur[d++] = v;
        double c = sc_sched_cost(p, S->cur);
        if (S->all && c < INFINITY) {
            S->all[S->nall].cost = c;
            memcpy(S->all[S->nall++].order, S->cur, sizeof S->cur);
        }
        if (c < S->best_cost) {
            S->best_cost = c;
            memcpy(S->best, S->cur, sizeof S->best);
        }
        return;
    }
    for (sc_expr_var v = 0; v < p->nvars; v++) {
        if (((S->used | S->last) >> v) & 1)
            continue;
        S->used |= 1u << v;
        S->cur[d] = v;
        permute(S, d + 1);
        S->used &= ~(1u << v);
    }
}

/* Beyond the search: an order in which every sparse tensor's levels (operands' and a
 * sparse output's) come in level order, where their orders agree — each step the first
 * index (by appearance; a sparse output's indices before the others) that no unplaced
 * index must precede; where they disagree, the first unplaced index. */
static void concordant_order(const sc_lower_problem *p, uint32_t last, sc_expr_var *order)
{
    uint32_t before[SC_LOWER_MAX_VARS] = {0};   /* before[v]: indices that must precede v */
    for (int32_t a = 0; a < p->naccess; a++) {
        const sc_lower_access *ac = &p->acc[a];
        if (!p->ops[ac->operand].sparse)
            continue;
        for (int32_t l = 1; l < ac->order; l++)
            if (ac->lvar[l] != ac->lvar[l - 1])
                before[ac->lvar[l]] |= 1u << ac->lvar[l - 1];
    }
    uint32_t out = 0;
    if (p->out_sparse)
        for (int32_t l = 0; l < p->out_order; l++) {
            out |= 1u << p->out_lvar[l];
            if (l > 0 && p->out_lvar[l] != p->out_lvar[l - 1])
                before[p->out_lvar[l]] |= 1u << p->out_lvar[l - 1];
        }
    uint32_t placed = 0;
    int32_t n = 0;
    while (n < p->nvars - __builtin_popcount(last)) {
        sc_expr_var pick = -1;
        for (int pass = 0; pass < 3 && pick < 0; pass++)   /* output's free, any free, any */
            for (sc_expr_var v = 0; v < p->nvars && pick < 0; v++) {
                if (((placed | last) >> v) & 1)
                    continue;
                bool free = !(before[v] & ~placed);
                if ((pass == 0 && free && ((out >> v) & 1)) || (pass == 1 && free) || pass == 2)
                    pick = v;
            }
        order[n++] = pick;
        placed |= 1u << pick;
    }
    for (sc_expr_var v = 0; v < p->nvars; v++)   /* (the indices kept innermost) */
        if ((last >> v) & 1)
            order[n++] = v;
}

sc_status sc_sched_auto(const sc_lower_problem *p, sc_sched *out, sc_error *err)
{
    memset(out, 0, sizeof *out);
    out->parallel = -1;
    out->ws_depth = -1;
    search S;
    memset(&S, 0, sizeof S);
    S.p = p;
    S.best_cost = INFINITY;
    for (sc_expr_var v = 0; v < p->nvars; v++)
        S.best[v] = v;
    if (p->nvars > 7)   /* (indices of one iteration cost nothing: they go innermost,
                           so that a scalar factor's index leaves the others' orders to
                           be weighed; an einsum's 0-D operands bring one) */
        for (sc_expr_var v = 0; v < p->nvars; v++)
            if (p->extent[v] == 1)
                S.last |= 1u << v;
    if (p->nvars - __builtin_popcount(S.last) <= 7)
        permute(&S, 0);
    else
        concordant_order(p, S.last, S.best);
    out->norder = p->nvars;
    memcpy(out->order, S.best, sizeof out->order);
    return sc_sched_check(p, out, err);
}

static int by_cost(const void *a, const void *b)
{
    double x = ((const sc_sched_ranked *)a)->cost, y = ((const sc_sched_ranked *)b)->cost;
    return (x > y) - (x < y);
}

sc_status sc_sched_rank(const sc_lower_problem *p, const sc_ctx *ctx, sc_sched_ranked **out,
                        size_t *n, sc_error *err)
{
    *out = NULL;
    *n = 0;
    if (p->nvars > 7)
        return SC_OK;
    size_t total = 1;
    for (int32_t k = 2; k <= p->nvars; k++)
        total *= (size_t)k;
    search S;
    memset(&S, 0, sizeof S);
    S.p = p;
    S.best_cost = INFINITY;
    S.all = sc_calloc(ctx, total, sizeof *S.all, err);
    if (!S.all)
        return SC_NOMEM;
    permute(&S, 0);
    qsort(S.all, S.nall, sizeof *S.all, by_cost);
    *out = S.all;
    *n = S.nall;
    return SC_OK;
}
