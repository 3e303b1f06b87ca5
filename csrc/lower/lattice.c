/*
 * lattice.c — merge lattices: which sparse levels are co-iterated at a loop variable and
 * which combinations of them (lattice points) carry a nonzero expression.
 *
 * Points are found by specialising the expression to each subset of the iterators (the
 * others set to zero): multiplication intersects (only the full subset survives), addition
 * and subtraction unite (every nonempty subset survives).  When the expression is nonzero
 * with no iterator present (a dense operand or a literal added), the loop must cover the
 * whole dimension: the lattice is marked universe and the empty point is included.
 */
#include "sc_lower.h"

#include <stdio.h>
#include <string.h>

static int popcount32(uint32_t x)
{
    int c = 0;
    for (; x; x &= x - 1)
        c++;
    return c;
}

sc_status sc_lower_lattice_at(const sc_lower_problem *p, const sc_lower_node *n,
                              sc_expr_var v, const int8_t *nbound, sc_lower_lattice *lat,
                              sc_error *err)
{
    memset(lat, 0, sizeof *lat);
    uint64_t present = sc_lower_node_accesses(n);
    for (int32_t a = 0; a < p->naccess; a++) {
        if (!((present >> a) & 1))
            continue;
        const sc_lower_access *ac = &p->acc[a];
        const sc_lower_operand *op = &p->ops[ac->operand];
        if (!op->sparse)
            continue;
        int32_t k = nbound ? nbound[a] : 0;
        if (k >= ac->order || ac->lvar[k] != v || op->fmt.kind[k] == SC_LEVEL_DENSE)
            continue;
        if (lat->niters == SC_LOWER_MAX_ITERS)
            return sc_fail(err, SC_UNSUPPORTED, "lower",
                           "more than %d reads of sparse operands co-iterated at index %s "
                           "(split the expression into several calls)",
                           SC_LOWER_MAX_ITERS, p->e->vars[v].name);
        lat->iters[lat->niters++] = a;
    }
    uint64_t all = 0;
    for (int32_t i = 0; i < lat->niters; i++)
        all |= (uint64_t)1 << lat->iters[i];
    lat->universe = sc_lower_specialize(NULL, n, all, err) != NULL;
    uint32_t nsub = 1u << lat->niters;
    for (int pc = lat->niters; pc >= 0; pc--)
        for (uint32_t m = nsub; m-- > 0;) {
            if (popcount32(m) != pc)
                continue;
            uint64_t zero = 0;
            for (int32_t i = 0; i < lat->niters; i++)
                if (!((m >> i) & 1))
                    zero |= (uint64_t)1 << lat->iters[i];
            if (sc_lower_specialize(NULL, n, zero, err) != NULL)
                lat->points[lat->npoints++] = m;
        }
    return SC_OK;
}

void sc_lower_lattice_text(const sc_lower_problem *p, const sc_lower_lattice *lat, char *buf,
                           size_t n)
{
    size_t len = 0;
    if (!n)
        return;
    buf[0] = '\0';
#define PUT(...)                                                          \
    do {                                                                  \
        int k_ = snprintf(buf + len, len < n ? n - len : 0, __VA_ARGS__); \
        if (k_ > 0)                                                       \
            len = len + (size_t)k_ < n ? len + (size_t)k_ : n - 1;        \
    } while (0)
    if (lat->universe)
        PUT("U");
    for (int32_t q = 0; q < lat->npoints; q++) {
        PUT("%s{", len ? " " : "");
        bool first = true;
        for (int32_t i = 0; i < lat->niters; i++)
            if ((lat->points[q] >> i) & 1) {
                PUT("%s%s", first ? "" : ",",
                    p->e->operands[p->acc[lat->iters[i]].operand].name);
                first = false;
            }
        PUT("}");
    }
#undef PUT
}
