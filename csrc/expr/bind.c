/*
 * bind.c — from the operands' shapes to the extent of every index variable.
 *
 * Accesses are visited operand by operand (each operand's in text order), dimension by
 * dimension; the first size seen for a variable is its extent.  A later different size is
 * an error, unless broadcasting is on and one of the two sizes is 1 (the extent is then
 * the other size, as in torch.einsum).  A variable repeated within one access (a
 * diagonal) must have equal sizes there even when broadcasting.  Nothing is allocated:
 * the access that fixed a conflicting extent is found again by a second scan.
 */
#include "expr_internal.h"

/* Report that v has size `size` at dimension d of access n of operand k, but the extent
 * `extent` was fixed by an earlier access. */
static sc_status conflict(const sc_expr *e, const int64_t *const *dims, sc_expr_var v,
                          int64_t extent, int32_t k, const sc_expr_node *n, int32_t d,
                          sc_error *err)
{
    for (int32_t k0 = 0; k0 < e->noperands; k0++) {
        const sc_expr_tensor *t0 = &e->operands[k0];
        for (int32_t a0 = 0; a0 < t0->naccesses; a0++) {
            const sc_expr_node *n0 = t0->accesses[a0];
            for (int32_t d0 = 0; d0 < n0->order; d0++) {
                if (n0->idx[d0] != v || dims[k0][d0] != extent)
                    continue;
                return sc_expr_fail_at(err, SC_USER, n->idx_pos[d],
                                       "index '%s' has size %lld in %s (operand %d, dimension %d) "
                                       "but size %lld in %s (operand %d, dimension %d)",
                                       e->vars[v].name, (long long)extent, t0->name, (int)k0,
                                       (int)d0, (long long)dims[k][d], e->operands[k].name,
                                       (int)k, (int)d);
            }
        }
    }
    return sc_expr_fail_at(err, SC_INTERNAL, n->idx_pos[d], "index '%s': size conflict not found",
                           e->vars[v].name);
}

sc_status sc_expr_bind_dims(const sc_expr *e, const int64_t *const *dims, bool broadcast,
                            int64_t *extents, uint32_t *bcast, sc_error *err)
{
    if (!e->rhs)
        return sc_expr_fail_at(err, SC_INTERNAL, -1, "binding dims of an unfinished expression");
    for (sc_expr_var v = 0; v < e->nvars; v++)
        extents[v] = -1;

    for (int32_t k = 0; k < e->noperands; k++) {
        const sc_expr_tensor *t = &e->operands[k];
        for (int32_t d = 0; d < t->order; d++) {
            if (dims[k][d] < 0)
                return sc_expr_fail_at(err, SC_USER, t->pos,
                                       "%s (operand %d) has negative size %lld in dimension %d",
                                       t->name, (int)k, (long long)dims[k][d], (int)d);
        }
        for (int32_t a = 0; a < t->naccesses; a++) {
            const sc_expr_node *n = t->accesses[a];
            for (int32_t d = 0; d < n->order; d++) {
                sc_expr_var v = n->idx[d];
                int64_t size = dims[k][d];
                for (int32_t d0 = 0; d0 < d; d0++) {
                    if (n->idx[d0] == v && dims[k][d0] != size)
                        return sc_expr_fail_at(err, SC_USER, n->idx_pos[d],
                                               "index '%s' is repeated in %s (operand %d) but "
                                               "dimension %d has size %lld and dimension %d "
                                               "has size %lld", e->vars[v].name, t->name,
                                               (int)k, (int)d0, (long long)dims[k][d0], (int)d,
                                               (long long)size);
                }
                if (extents[v] < 0 || extents[v] == size)
                    extents[v] = size;
                else if (broadcast && size == 1)
                    continue;
                else if (broadcast && extents[v] == 1)
                    extents[v] = size;
                else
                    return conflict(e, dims, v, extents[v], k, n, d, err);
            }
        }
    }

    if (bcast) {
        for (int32_t k = 0; k < e->noperands; k++) {
            const sc_expr_tensor *t = &e->operands[k];
            bcast[k] = 0;
            for (int32_t a = 0; a < t->naccesses; a++) {
                const sc_expr_node *n = t->accesses[a];
                for (int32_t d = 0; d < n->order; d++) {
                    if (dims[k][d] == 1 && extents[n->idx[d]] != 1)
                        bcast[k] |= (uint32_t)1 << d;
                }
            }
        }
    }
    return SC_OK;
}
