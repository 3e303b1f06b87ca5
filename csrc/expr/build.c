/*
 * build.c — the tables of an expression (index variables, operands, output) and the
 * checking node constructors the parsers build with.
 *
 * Tables grow by doubling inside the arena and are addressed by id, never by a pointer
 * kept across an insertion.  Nodes are zeroed arena memory; a constructor fills one and
 * hands it out as const: nothing writes to it afterwards.
 */
#include "expr_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

sc_status sc_expr_fail_at(sc_error *err, sc_status kind, int32_t pos, const char *fmt, ...)
{
    char msg[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sc_fail(err, kind, "expr", "%s", msg);
    if (err)
        err->pos = pos;
    return kind;
}

void sc_expr_init(sc_expr *e, sc_arena *arena)
{
    memset(e, 0, sizeof *e);
    e->out.pos = -1;
    e->arena = arena;
}

static bool name_is(const char *stored, const char *name, size_t len)
{
    return strlen(stored) == len && memcmp(stored, name, len) == 0;
}

/*
 * Table of n entries of elem bytes with room for one more: table itself when *cap > n,
 * otherwise a copy in an arena block twice as large.  NULL with err on failure.
 */
static void *grow(sc_arena *arena, void *table, int32_t n, int32_t *cap, size_t elem,
                  sc_error *err)
{
    if (n < *cap)
        return table;
    if (*cap > INT32_MAX / 2) {
        sc_fail(err, SC_NOMEM, "expr", "expression table too large");
        return NULL;
    }
    int32_t new_cap = *cap ? *cap * 2 : 8;
    if ((size_t)new_cap > SIZE_MAX / elem) {
        sc_fail(err, SC_NOMEM, "expr", "expression table too large");
        return NULL;
    }
    void *bigger = sc_arena_alloc(arena, (size_t)new_cap * elem, err);
    if (!bigger)
        return NULL;
    if (n > 0)
        memcpy(bigger, table, (size_t)n * elem);
    *cap = new_cap;
    return bigger;
}

sc_status sc_expr_intern_var(sc_expr *e, const char *name, size_t len, int32_t pos,
                             sc_expr_var *id, sc_error *err)
{
    for (int32_t v = 0; v < e->nvars; v++) {
        if (name_is(e->vars[v].name, name, len)) {
            *id = v;
            return SC_OK;
        }
    }
    if (len == 0)
        return sc_expr_fail_at(err, SC_USER, pos, "empty index variable name");

    sc_expr_var_info *vars = grow(e->arena, e->vars, e->nvars, &e->vars_cap, sizeof *vars, err);
    if (!vars)
        return SC_NOMEM;
    e->vars = vars;
    char *copy = sc_arena_strdup(e->arena, name, len, err);
    if (!copy)
        return SC_NOMEM;
    vars[e->nvars].name = copy;
    vars[e->nvars].pos = pos;
    *id = e->nvars++;
    return SC_OK;
}

static sc_status check_order(const char *name, size_t len, int32_t order, int32_t pos,
                             sc_error *err)
{
    if (order < 0)
        return sc_expr_fail_at(err, SC_USER, pos, "tensor '%.*s' has a negative order (%d)",
                               (int)len, name, (int)order);
    if (order > SC_MAX_ORDER)
        return sc_expr_fail_at(err, SC_UNSUPPORTED, pos,
                               "tensor '%.*s' has %d dimensions; at most %d are supported",
                               (int)len, name, (int)order, SC_MAX_ORDER);
    return SC_OK;
}

sc_status sc_expr_intern_operand(sc_expr *e, const char *name, size_t len, int32_t order,
                                 int32_t pos, int32_t *id, sc_error *err)
{
    if (e->out.name && name_is(e->out.name, name, len))
        return sc_expr_fail_at(err, SC_USER, pos,
                               "output tensor '%s' also appears on the right-hand side",
                               e->out.name);
    for (int32_t k = 0; k < e->noperands; k++) {
        const sc_expr_tensor *t = &e->operands[k];
        if (!name_is(t->name, name, len))
            continue;
        if (t->order != order)
            return sc_expr_fail_at(err, SC_USER, pos,
                                   "tensor '%s' is used with %d index%s here but with %d before",
                                   t->name, (int)order, order == 1 ? "" : "es", (int)t->order);
        *id = k;
        return SC_OK;
    }
    if (len == 0)
        return sc_expr_fail_at(err, SC_USER, pos, "empty tensor name");
    sc_status st = check_order(name, len, order, pos, err);
    if (st)
        return st;

    sc_expr_tensor *ops =
        grow(e->arena, e->operands, e->noperands, &e->operands_cap, sizeof *ops, err);
    if (!ops)
        return SC_NOMEM;
    e->operands = ops;
    char *copy = sc_arena_strdup(e->arena, name, len, err);
    if (!copy)
        return SC_NOMEM;
    ops[e->noperands].name = copy;
    ops[e->noperands].order = order;
    ops[e->noperands].pos = pos;
    *id = e->noperands++;
    return SC_OK;
}

sc_status sc_expr_set_output(sc_expr *e, const char *name, size_t len, int32_t order,
                             int32_t pos, sc_error *err)
{
    if (e->out.name)
        return sc_expr_fail_at(err, SC_INTERNAL, pos, "output tensor declared twice");
    if (len == 0)
        return sc_expr_fail_at(err, SC_USER, pos, "empty tensor name");
    for (int32_t k = 0; k < e->noperands; k++) {
        if (name_is(e->operands[k].name, name, len))
            return sc_expr_fail_at(err, SC_USER, pos,
                                   "output tensor '%s' also appears on the right-hand side",
                                   e->operands[k].name);
    }
    sc_status st = check_order(name, len, order, pos, err);
    if (st)
        return st;
    char *copy = sc_arena_strdup(e->arena, name, len, err);
    if (!copy)
        return SC_NOMEM;
    e->out.name = copy;
    e->out.order = order;
    e->out.pos = pos;
    return SC_OK;
}

int32_t sc_expr_find_operand(const sc_expr *e, const char *name)
{
    for (int32_t k = 0; k < e->noperands; k++) {
        if (strcmp(e->operands[k].name, name) == 0)
            return k;
    }
    return -1;
}

sc_expr_var sc_expr_find_var(const sc_expr *e, const char *name)
{
    for (int32_t v = 0; v < e->nvars; v++) {
        if (strcmp(e->vars[v].name, name) == 0)
            return v;
    }
    return -1;
}

/* ---- Node constructors ---- */

static sc_status new_node(sc_expr *e, sc_expr_kind kind, int32_t pos, int32_t depth,
                          sc_expr_node **out, sc_error *err)
{
    if (depth > SC_EXPR_MAX_DEPTH)
        return sc_expr_fail_at(err, SC_USER, pos,
                               "expression is nested too deeply (more than %d levels)",
                               SC_EXPR_MAX_DEPTH);
    sc_expr_node *n = sc_arena_alloc(e->arena, sizeof *n, err);
    if (!n)
        return SC_NOMEM;
    n->kind = kind;
    n->pos = pos;
    n->depth = depth;
    *out = n;
    return SC_OK;
}

sc_status sc_expr_access(sc_expr *e, int32_t operand, const sc_expr_var *idx,
                         const int32_t *idx_pos, int32_t pos, const sc_expr_node **out,
                         sc_error *err)
{
    const sc_expr_tensor *t;
    if (operand == SC_EXPR_OUTPUT) {
        if (!e->out.name)
            return sc_expr_fail_at(err, SC_INTERNAL, pos, "access to an undeclared output");
        t = &e->out;
    } else if (operand >= 0 && operand < e->noperands) {
        t = &e->operands[operand];
    } else {
        return sc_expr_fail_at(err, SC_INTERNAL, pos, "operand id %d out of range",
                               (int)operand);
    }
    for (int32_t k = 0; k < t->order; k++) {
        if (idx[k] < 0 || idx[k] >= e->nvars)
            return sc_expr_fail_at(err, SC_INTERNAL, pos, "index variable id %d out of range",
                                   (int)idx[k]);
    }

    sc_expr_node *n = NULL;
    sc_status st = new_node(e, SC_EXPR_ACCESS, pos, 1, &n, err);
    if (st)
        return st;
    n->operand = operand;
    n->order = t->order;
    for (int32_t k = 0; k < t->order; k++) {
        n->idx[k] = idx[k];
        n->idx_pos[k] = idx_pos ? idx_pos[k] : -1;
    }
    *out = n;
    return SC_OK;
}

sc_status sc_expr_literal(sc_expr *e, double value, int32_t pos, const sc_expr_node **out,
                          sc_error *err)
{
    if (!isfinite(value))
        return sc_expr_fail_at(err, SC_USER, pos, "literal %g is not a finite number", value);
    sc_expr_node *n = NULL;
    sc_status st = new_node(e, SC_EXPR_LITERAL, pos, 1, &n, err);
    if (st)
        return st;
    n->value = value;
    *out = n;
    return SC_OK;
}

sc_status sc_expr_int_literal(sc_expr *e, int64_t value, int32_t pos,
                              const sc_expr_node **out, sc_error *err)
{
    sc_expr_node *n = NULL;
    sc_status st = new_node(e, SC_EXPR_LITERAL, pos, 1, &n, err);
    if (st)
        return st;
    n->integer = true;
    n->ival = value;
    *out = n;
    return SC_OK;
}

sc_status sc_expr_neg(sc_expr *e, const sc_expr_node *a, int32_t pos,
                      const sc_expr_node **out, sc_error *err)
{
    if (!a)
        return sc_expr_fail_at(err, SC_INTERNAL, pos, "negation of a NULL node");
    sc_expr_node *n = NULL;
    sc_status st = new_node(e, SC_EXPR_NEG, pos, a->depth + 1, &n, err);
    if (st)
        return st;
    n->a = a;
    *out = n;
    return SC_OK;
}

sc_status sc_expr_binary(sc_expr *e, sc_expr_kind kind, const sc_expr_node *a,
                         const sc_expr_node *b, int32_t pos, const sc_expr_node **out,
                         sc_error *err)
{
    if (kind != SC_EXPR_ADD && kind != SC_EXPR_SUB && kind != SC_EXPR_MUL)
        return sc_expr_fail_at(err, SC_INTERNAL, pos, "%s is not a binary operator",
                               sc_expr_kind_name(kind));
    if (!a || !b)
        return sc_expr_fail_at(err, SC_INTERNAL, pos, "binary operator with a NULL operand");
    int32_t depth = a->depth > b->depth ? a->depth : b->depth;
    sc_expr_node *n = NULL;
    sc_status st = new_node(e, kind, pos, depth + 1, &n, err);
    if (st)
        return st;
    n->a = a;
    n->b = b;
    *out = n;
    return SC_OK;
}

/* ---- Finishing ---- */

static int32_t count_accesses(const sc_expr_node *n)
{
    switch (n->kind) {
    case SC_EXPR_ACCESS:
        return 1;
    case SC_EXPR_LITERAL:
        return 0;
    case SC_EXPR_NEG:
        return count_accesses(n->a);
    default:
        return count_accesses(n->a) + count_accesses(n->b);
    }
}

/* Append the ACCESS nodes under n, left to right, to list[*len...]. */
static void list_accesses(const sc_expr_node *n, const sc_expr_node **list, int32_t *len)
{
    switch (n->kind) {
    case SC_EXPR_ACCESS:
        list[(*len)++] = n;
        break;
    case SC_EXPR_LITERAL:
        break;
    case SC_EXPR_NEG:
        list_accesses(n->a, list, len);
        break;
    default:
        list_accesses(n->a, list, len);
        list_accesses(n->b, list, len);
        break;
    }
}

sc_status sc_expr_finish(sc_expr *e, const sc_expr_node *lhs, const sc_expr_node *rhs,
                         sc_error *err)
{
    sc_status st = sc_expr_check(e, lhs, rhs, err);
    if (st)
        return st;

    /* Every access of the right-hand side, then each operand's share of them. */
    int32_t total = count_accesses(rhs), len = 0;
    const sc_expr_node **all = sc_arena_alloc(e->arena, (size_t)total * sizeof *all, err);
    if (!all)
        return SC_NOMEM;
    list_accesses(rhs, all, &len);
    for (int32_t k = 0; k < e->noperands; k++) {
        int32_t n = 0;
        for (int32_t i = 0; i < total; i++)
            n += all[i]->operand == k;
        const sc_expr_node **mine = sc_arena_alloc(e->arena, (size_t)n * sizeof *mine, err);
        if (!mine)
            return SC_NOMEM;
        n = 0;
        for (int32_t i = 0; i < total; i++) {
            if (all[i]->operand == k)
                mine[n++] = all[i];
        }
        e->operands[k].naccesses = n;
        e->operands[k].accesses = mine;
    }

    const sc_expr_node **lhs_list = sc_arena_alloc(e->arena, sizeof *lhs_list, err);
    if (!lhs_list)
        return SC_NOMEM;
    lhs_list[0] = lhs;
    e->out.naccesses = 1;
    e->out.accesses = lhs_list;
    e->lhs = lhs;
    e->rhs = rhs;
    return SC_OK;
}
