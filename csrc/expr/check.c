/*
 * check.c — the rules of a well-formed assignment and the questions lowering asks about
 * its index variables: which index the output (free) and which are summed (reduction).
 *
 * The node constructors already guarantee ids in range and orders that match the
 * tables; what is checked here needs the whole assignment.
 */
#include "expr_internal.h"

/* Whether v indexes some access under n. */
static bool uses_var(const sc_expr_node *n, sc_expr_var v)
{
    switch (n->kind) {
    case SC_EXPR_ACCESS:
        for (int32_t k = 0; k < n->order; k++) {
            if (n->idx[k] == v)
                return true;
        }
        return false;
    case SC_EXPR_LITERAL:
        return false;
    case SC_EXPR_NEG:
        return uses_var(n->a, v);
    default:
        return uses_var(n->a, v) || uses_var(n->b, v);
    }
}

sc_status sc_expr_check(const sc_expr *e, const sc_expr_node *lhs, const sc_expr_node *rhs,
                        sc_error *err)
{
    if (!lhs || !rhs)
        return sc_expr_fail_at(err, SC_INTERNAL, -1, "assignment without a side");
    if (lhs->kind != SC_EXPR_ACCESS || lhs->operand != SC_EXPR_OUTPUT)
        return sc_expr_fail_at(err, SC_INTERNAL, lhs->pos,
                               "left-hand side is not an access of the output");

    for (int32_t k = 0; k < lhs->order; k++) {
        sc_expr_var v = lhs->idx[k];
        for (int32_t j = 0; j < k; j++) {
            if (lhs->idx[j] == v)
                return sc_expr_fail_at(err, SC_USER, lhs->idx_pos[k],
                                       "output index '%s' appears twice", e->vars[v].name);
        }
        if (!uses_var(rhs, v))
            return sc_expr_fail_at(err, SC_USER, lhs->idx_pos[k],
                                   "output index '%s' does not appear in any input",
                                   e->vars[v].name);
    }
    return SC_OK;
}

bool sc_expr_var_in_output(const sc_expr *e, sc_expr_var v)
{
    return e->lhs && uses_var(e->lhs, v);
}

int32_t sc_expr_reduction_vars(const sc_expr *e, sc_expr_var *out, int32_t cap)
{
    int32_t count = 0;
    if (!e->rhs)
        return 0;
    for (sc_expr_var v = 0; v < e->nvars; v++) {
        if (sc_expr_var_in_output(e, v) || !uses_var(e->rhs, v))
            continue;
        if (count < cap)
            out[count] = v;
        count++;
    }
    return count;
}
