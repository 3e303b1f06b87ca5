/*
 * node.c — the lowering expression: the right-hand side of an sc_expr as a tree over
 * access ids, its specialisation to lattice points (accesses set to zero, simplified)
 * and its text.
 *
 * Zero is NULL.  Simplification is structural (0*x = 0 even for x = inf), as in TACO:
 * a stored entry's absence means zero.  A rewrite returns the same node when nothing
 * changed, so callers can compare pointers.
 */
#include "lower_internal.h"
#include "../format/sc_format.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const sc_lower_node *mk(sc_arena *arena, sc_lower_node_kind k, const sc_lower_node *a,
                               const sc_lower_node *b, sc_error *err)
{
    sc_lower_node *n = sc_arena_alloc(arena, sizeof *n, err);
    if (!n)
        return NULL;
    n->kind = k;
    n->a = a;
    n->b = b;
    return n;
}

const sc_lower_node *sc_lower_mul(sc_arena *arena, const sc_lower_node *a,
                                  const sc_lower_node *b, sc_error *err)
{
    return mk(arena, SC_LN_MUL, a, b, err);
}

uint64_t sc_lower_node_accesses(const sc_lower_node *n)
{
    if (!n)
        return 0;
    if (n->kind == SC_LN_ACCESS)
        return (uint64_t)1 << n->access;
    return sc_lower_node_accesses(n->a) | sc_lower_node_accesses(n->b);
}

/* Sentinel for "allocation failed" distinct from zero (NULL). */
static const sc_lower_node failed_node;

static const sc_lower_node *spec(sc_arena *arena, const sc_lower_node *n, uint64_t zero,
                                 sc_error *err)
{
    if (!n)
        return NULL;
    switch (n->kind) {
    case SC_LN_ACCESS:
        return (zero >> n->access) & 1 ? NULL : n;
    case SC_LN_LIT:
        return n->ival == 0 && n->value == 0.0 ? NULL : n;
    default:
        break;
    }
    const sc_lower_node *a = spec(arena, n->a, zero, err);
    const sc_lower_node *b = n->b ? spec(arena, n->b, zero, err) : NULL;
    if (a == &failed_node || b == &failed_node)
        return &failed_node;
    const sc_lower_node *r = NULL;
    switch (n->kind) {
    case SC_LN_NEG:
        if (!a)
            return NULL;
        if (a == n->a)
            return n;
        r = arena ? mk(arena, SC_LN_NEG, a, NULL, err) : n;
        break;
    case SC_LN_MUL:
        if (!a || !b)
            return NULL;
        if (a == n->a && b == n->b)
            return n;
        r = arena ? mk(arena, SC_LN_MUL, a, b, err) : n;
        break;
    case SC_LN_ADD:
    case SC_LN_SUB:
        if (!a && !b)
            return NULL;
        if (a == n->a && b == n->b)
            return n;
        if (!b)
            return a;
        if (!a)
            return n->kind == SC_LN_ADD ? b : (arena ? mk(arena, SC_LN_NEG, b, NULL, err) : n);
        r = arena ? mk(arena, n->kind, a, b, err) : n;
        break;
    default:
        return n;
    }
    return r ? r : &failed_node;
}

const sc_lower_node *sc_lower_specialize(sc_arena *arena, const sc_lower_node *n,
                                         uint64_t zero_mask, sc_error *err)
{
    const sc_lower_node *r = spec(arena, n, zero_mask, err);
    return r == &failed_node ? NULL : r;
}

/* Set n, a LIT, to literal x in p's dtype (see sc_lower_node).  false with a USER error at
 * x's column for a float literal that an integer dtype does not hold. */
static bool literal(const sc_lower_problem *p, const sc_expr_node *x, sc_lower_node *n,
                    sc_error *err)
{
    n->kind = SC_LN_LIT;
    bool is32 = p->dtype == SC_DTYPE_I32;
    if (p->dtype == SC_DTYPE_F32 || p->dtype == SC_DTYPE_F64) {
        /* an integer straight to float: through double it could round twice */
        n->value = !x->integer ? x->value
                   : p->dtype == SC_DTYPE_F32 ? (double)(float)x->ival : (double)x->ival;
    } else if (x->integer) {
        /* torch's Python int with an integer tensor: wrapped to the tensor's width */
        uint32_t low = (uint32_t)(uint64_t)x->ival;
        n->ival = !is32 ? x->ival
                  : low >= 0x80000000u ? (int64_t)low - ((int64_t)1 << 32) : (int64_t)low;
    } else {
        double lim = is32 ? 0x1p31 : 0x1p63;
        if (x->value != floor(x->value) || !(x->value >= -lim && x->value < lim)) {
            char text[64];
            sc_expr_print_node(p->e, x, text, sizeof text);
            sc_fail(err, SC_USER, "lower", "the constant %s is not an %s value", text,
                    sc_dtype_name(p->dtype));
            if (err)
                err->pos = x->pos;
            return false;
        }
        n->ival = (int64_t)x->value;
    }
    return true;
}

const sc_lower_node *sc_lower_from_expr(sc_arena *arena, sc_lower_problem *p,
                                        const sc_expr_node *x, sc_error *err)
{
    sc_lower_node *n = sc_arena_alloc(arena, sizeof *n, err);
    if (!n)
        return NULL;
    switch (x->kind) {
    case SC_EXPR_ACCESS: {
        if (p->naccess >= SC_LOWER_MAX_ACCESSES) {
            sc_fail(err, SC_UNSUPPORTED, "lower", "more than %d tensor accesses",
                    SC_LOWER_MAX_ACCESSES);
            if (err)
                err->pos = x->pos;
            return NULL;
        }
        sc_lower_access *a = &p->acc[p->naccess];
        memset(a, 0, sizeof *a);
        a->operand = x->operand;
        a->order = x->order;
        a->pos = x->pos;
        for (int32_t d = 0; d < x->order; d++)
            a->var[d] = x->idx[d];
        n->kind = SC_LN_ACCESS;
        n->access = p->naccess++;
        return n;
    }
    case SC_EXPR_LITERAL:
        return literal(p, x, n, err) ? n : NULL;
    case SC_EXPR_NEG:
        n->kind = SC_LN_NEG;
        n->a = sc_lower_from_expr(arena, p, x->a, err);
        return n->a ? n : NULL;
    case SC_EXPR_MUL:
    case SC_EXPR_ADD:
    case SC_EXPR_SUB:
        n->kind = x->kind == SC_EXPR_MUL ? SC_LN_MUL : x->kind == SC_EXPR_ADD ? SC_LN_ADD : SC_LN_SUB;
        n->a = sc_lower_from_expr(arena, p, x->a, err);
        if (!n->a)
            return NULL;
        n->b = sc_lower_from_expr(arena, p, x->b, err);
        return n->b ? n : NULL;
    default:
        sc_fail(err, SC_INTERNAL, "lower", "unknown expression node");
        return NULL;
    }
}

typedef struct sink {
    char *buf;
    size_t cap, len;
} sink;

static void put(sink *s, const char *t)
{
    size_t k = strlen(t);
    if (s->len + 1 < s->cap) {
        size_t room = s->cap - s->len - 1;
        memcpy(s->buf + s->len, t, k < room ? k : room);
        s->buf[s->len + (k < room ? k : room)] = '\0';
    }
    s->len += k;
}

static void text(sink *s, const sc_lower_problem *p, const sc_lower_node *n, int prec)
{
    char tmp[64];
    if (!n) {
        put(s, "0");
        return;
    }
    switch (n->kind) {
    case SC_LN_ACCESS:
        put(s, p->e->operands[p->acc[n->access].operand].name);
        return;
    case SC_LN_LIT:
        if (p->dtype == SC_DTYPE_I32 || p->dtype == SC_DTYPE_I64)
            snprintf(tmp, sizeof tmp, "%lld", (long long)n->ival);
        else
            snprintf(tmp, sizeof tmp, "%.17g", n->value);
        put(s, tmp);
        return;
    case SC_LN_NEG:
        put(s, "-");
        text(s, p, n->a, 3);
        return;
    default: {
        int my = n->kind == SC_LN_MUL ? 2 : 1;
        if (my < prec)
            put(s, "(");
        text(s, p, n->a, my);
        put(s, n->kind == SC_LN_MUL ? " * " : n->kind == SC_LN_ADD ? " + " : " - ");
        text(s, p, n->b, my + 1);
        if (my < prec)
            put(s, ")");
    }
    }
}

size_t sc_lower_node_text(const sc_lower_problem *p, const sc_lower_node *n, char *buf,
                          size_t cap)
{
    sink s = {buf, cap, 0};
    if (cap)
        buf[0] = '\0';
    text(&s, p, n, 0);
    return s.len;
}
