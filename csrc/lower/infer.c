/*
 * infer.c — output-format inference, applied when the caller gives no output format.
 *
 * Rules, first match wins:
 *  1. SDDMM-like: the right-hand side is a product (literals and negation allowed) with a
 *     factor that is a sparse operand indexed by exactly the output's indices: keep that
 *     operand's format (its level order mapped onto the output's dimensions), with a
 *     level the output cannot be assembled in made compressed (cd -> cc).  Failing that,
 *     a factor indexed by some of the output's indices (multi-head scores on one mask,
 *     "ij,hik,hjk->hij" or heads last "ij,ihk,jhk->ijh"; on a batch of masks,
 *     "bij,bhik,bhjk->bhij"), each of the others read by a dense operand and by no
 *     sparse one: dense levels over those, then its format.
 *  2. Elementwise union: a sum/difference whose every term qualifies under rule 1: the
 *     first such operand's format.
 *  3. A dense operand takes part in a product (a product with a dense-only result, e.g.
 *     SpMV, SpMM, TTV), or a dense operand indexed by an output index takes part: dense.
 *  4. SpGEMM-like: every operand sparse and 2-D, a pure product with a 2-D output: the
 *     first operand format whose second level is compressed and unique (csr x csr ->
 *     csr, dcsr x dcsr -> dcsr, csc x csc -> csc, csr x csc -> csr, coo x csr -> csr).
 *     Batched (order 3+), where rule 5 finds no sparse output index (a ddc batch times
 *     its transposed view): the first operand format of unique levels, the last one
 *     compressed.
 *  5. Per output index: sparse when the expression vanishes wherever the sparse levels
 *     indexed by it are empty (lattice without universe), else dense; no sparse index:
 *     dense; otherwise dense indices first (in output order), then compressed ones.
 */
#include "sc_lower.h"
#include "../format/sc_format.h"

#include <string.h>

/* Whether access ac reads index v. */
static bool reads(const sc_lower_access *ac, sc_expr_var v)
{
    for (int32_t d = 0; d < ac->order; d++)
        if (ac->var[d] == v)
            return true;
    return false;
}

/* Whether an operand, sparse or dense as asked, is read with index v. */
static bool operand_reads(const sc_lower_problem *p, sc_expr_var v, bool sparse)
{
    for (int32_t a = 0; a < p->naccess; a++)
        if (p->ops[p->acc[a].operand].sparse == sparse && reads(&p->acc[a], v))
            return true;
    return false;
}

/* Rule 1 (batched: the operand may lack output indices, each of whose slices then holds
 * its pattern: "ij,hik,hjk->hij", multi-head scores on one mask, "ij,ihk,jhk->ijh" with
 * the heads last, "bij,bhik,bhjk->bhij" on a batch of masks, "i,j->ij" a sparse vector's
 * outer product with a dense one; each of those indices a dense operand's and no sparse
 * one's, so that the slices are its batch, not another sparse operand's entries: two
 * sparse operands' "ij,kl->ijkl" and "i,j,j->ij" are rule 5's). */
static int32_t rule1(const sc_lower_problem *p, const sc_lower_node *n, bool batched)
{
    if (!n)
        return -1;
    switch (n->kind) {
    case SC_LN_ACCESS: {
        const sc_lower_access *ac = &p->acc[n->access];
        if (!p->ops[ac->operand].sparse ||
            (batched ? ac->order >= p->out_order || ac->order == 0 : ac->order != p->out_order))
            return -1;
        /* (the output indices it lacks: each a dense operand's and no sparse one's, so
         * that they are its batch (leading, between its indices as torch's (B, H, n, n)
         * has the heads, or after them as PyG's (n, n, H)), not another sparse operand's
         * entries: "i,j,j->ij" over two sparse vectors is rule 5's) */
        for (int32_t o = 0; o < p->out_order; o++)
            if (!reads(ac, p->out_var[o]) && (!operand_reads(p, p->out_var[o], false) ||
                                               operand_reads(p, p->out_var[o], true)))
                return -1;
        for (int32_t d = 0; d < ac->order; d++) {
            bool found = false;
            for (int32_t o = 0; o < p->out_order; o++)
                found |= p->out_var[o] == ac->var[d];
            for (int32_t d2 = d + 1; d2 < ac->order; d2++)
                if (ac->var[d2] == ac->var[d])
                    return -1;
            if (!found)
                return -1;
        }
        return n->access;
    }
    case SC_LN_NEG:
        return rule1(p, n->a, batched);
    case SC_LN_MUL: {
        int32_t a = rule1(p, n->a, batched);
        return a >= 0 ? a : rule1(p, n->b, batched);
    }
    default:
        return -1;
    }
}

/* Rule 2: every term of a sum qualifies; returns the first term's access or -1. */
static int32_t rule2(const sc_lower_problem *p, const sc_lower_node *n)
{
    if (n && (n->kind == SC_LN_ADD || n->kind == SC_LN_SUB)) {
        int32_t a = rule2(p, n->a), b = rule2(p, n->b);
        return a >= 0 && b >= 0 ? a : -1;
    }
    if (n && n->kind == SC_LN_NEG)
        return rule2(p, n->a);
    return rule1(p, n, false);
}

static bool pure_product(const sc_lower_node *n)
{
    if (!n)
        return true;
    if (n->kind == SC_LN_ADD || n->kind == SC_LN_SUB)
        return false;
    return pure_product(n->a) && pure_product(n->b);
}

static void from_access(const sc_lower_problem *p, int32_t a, sc_format *out)
{
    const sc_lower_access *ac = &p->acc[a];
    const sc_format *f = &p->ops[ac->operand].fmt;
    memset(out, 0, sizeof *out);
    out->order = p->out_order;
    /* (rule 1 batched: dense levels first, over the output indices the operand lacks in
     * output order: "bij,bhik,bhjk->bhij" stores h, then the mask's b, i, j) */
    int32_t lead = 0;
    for (int32_t o = 0; o < p->out_order; o++)
        if (!reads(ac, p->out_var[o])) {
            out->kind[lead] = SC_LEVEL_DENSE;
            out->unique[lead] = 1;
            out->lvl2dim[lead++] = o;
        }
    for (int32_t k = 0; k < f->order; k++) {
        out->kind[lead + k] = f->kind[k];
        out->unique[lead + k] = f->unique[k];
        sc_expr_var v = ac->var[f->lvl2dim[k]];
        for (int32_t o = 0; o < p->out_order; o++)
            if (p->out_var[o] == v)
                out->lvl2dim[lead + k] = o;
    }
}

/* Rules 1 and 2 keep an operand's levels, which the output may not be able to take
 * (problem.c: dense levels, then compressed(unique) ones or a COO tail): a level below
 * the first sparse one that breaks that becomes compressed, or a singleton in a COO tail
 * (cd -> cc: which rows hold entries is known only once the kernel has run). */
static void assemblable(sc_format *f)
{
    int32_t k = 0;
    while (k < f->order && f->kind[k] == SC_LEVEL_DENSE)
        k++;
    if (k == f->order)
        return;
    bool flat = !f->unique[k];
    for (int32_t j = k + 1; j < f->order; j++) {
        if (flat && f->kind[j] != SC_LEVEL_SINGLETON) {
            f->kind[j] = SC_LEVEL_SINGLETON;
            f->unique[j] = j + 1 == f->order;
        } else if (!flat) {
            f->kind[j] = SC_LEVEL_COMPRESSED;
            f->unique[j] = 1;
        }
    }
}

/* Rule 4: every operand sparse and of the output's order, a pure product: the first
 * operand format whose levels are all unique and whose last one is compressed, which an
 * output row (or column) can take; in mixed formats too (csr · csc, A @ A.t(): a csr,
 * not a dense n × n).  Whether *out was set. */
static bool rule4(const sc_lower_problem *p, sc_format *out)
{
    if (p->nops == 0 || !pure_product(p->rhs))
        return false;
    for (int32_t t = 0; t < p->nops; t++)
        if (!p->ops[t].sparse || p->ops[t].fmt.order != p->out_order)
            return false;
    for (int32_t t = 0; t < p->nops; t++) {
        const sc_format *f = &p->ops[t].fmt;
        bool unique = true;
        for (int32_t l = 0; l < f->order; l++)
            unique &= f->unique[l] != 0;
        if (unique && f->kind[f->order - 1] == SC_LEVEL_COMPRESSED) {
            *out = *f;
            return true;
        }
    }
    return false;
}

void sc_lower_infer_format(const sc_lower_problem *p, sc_format *out)
{
    int32_t a = rule2(p, p->rhs);
    if (a < 0 && pure_product(p->rhs))
        a = rule1(p, p->rhs, true);
    if (a >= 0) {
        from_access(p, a, out);
        assemblable(out);
        return;
    }
    sc_fmt_dense(p->out_order, out);
    for (int32_t i = 0; i < p->naccess; i++) {
        const sc_lower_access *ac = &p->acc[i];
        if (p->ops[ac->operand].sparse)
            continue;
        if (pure_product(p->rhs))
            return; /* rule 3 */
        for (int32_t d = 0; d < ac->order; d++)
            for (int32_t o = 0; o < p->out_order; o++)
                if (ac->var[d] == p->out_var[o])
                    return; /* rule 3 */
    }
    if (p->out_order == 2 && rule4(p, out))
        return;
    bool sparse[SC_MAX_ORDER] = {false};
    int32_t nsparse = 0;
    for (int32_t o = 0; o < p->out_order; o++) {
        sc_expr_var v = p->out_var[o];
        uint64_t zero = 0;
        for (int32_t i = 0; i < p->naccess; i++) {
            const sc_lower_access *ac = &p->acc[i];
            const sc_format *f = &p->ops[ac->operand].fmt;
            for (int32_t k = 0; k < f->order; k++)
                if (f->kind[k] != SC_LEVEL_DENSE && ac->lvar[k] == v)
                    zero |= (uint64_t)1 << i;
        }
        if (zero && sc_lower_specialize(NULL, p->rhs, zero, NULL) == NULL) {
            sparse[o] = true;
            nsparse++;
        }
    }
    if (!nsparse) {
        /* (rule 4 batched: where the sum took every sparse output index, a ddc batch
         * times its transposed view, A @ A.mT, is not a dense batch of n x n) */
        if (p->out_order > 2)
            rule4(p, out);
        return;
    }
    int32_t k = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int32_t o = 0; o < p->out_order; o++)
            if (sparse[o] == (pass == 1)) {
                out->kind[k] = pass ? SC_LEVEL_COMPRESSED : SC_LEVEL_DENSE;
                out->unique[k] = 1;
                out->lvl2dim[k++] = o;
            }
}
