/*
 * print.c — the canonical text of an assignment: "C(i,k) = A(i,j) * B(j,k) + 2 * D(i,k)".
 *
 * One space around '=' and binary operators, none inside an access; parentheses only
 * where precedence or left-associativity would otherwise change the tree, so the text
 * parses back (sc_expr_parse_index) to the same tree.  Integer literals print exactly;
 * float literals in the shortest "%g" form that reads back to the same double, with ".0"
 * where that form has neither '.' nor exponent (it would read back as an integer).
 */
#include "expr_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name, *symbol;
    int prec;
} kind_table[] = {
#define SC_X_(e, name, sym, prec) {name, sym, prec},
    SC_EXPR_KINDS(SC_X_)
#undef SC_X_
};

const char *sc_expr_kind_name(sc_expr_kind k)
{
    if ((int)k < 0 || k >= SC_EXPR_KIND_COUNT)
        return "?";
    return kind_table[k].name;
}

/* Text written so far; len counts what would have been written with an unbounded buf. */
typedef struct writer {
    char *buf;
    size_t n;
    size_t len;
} writer;

static void put(writer *w, const char *fmt, ...) SC_PRINTF(2, 3);
static void put(writer *w, const char *fmt, ...)
{
    size_t room = w->len < w->n ? w->n - w->len : 0;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(room ? w->buf + w->len : NULL, room, fmt, ap);
    va_end(ap);
    if (k > 0)
        w->len += (size_t)k;
}

/* A negative literal binds like a unary minus. */
static int prec(const sc_expr_node *n)
{
    if (n->kind == SC_EXPR_LITERAL && (n->integer ? n->ival < 0 : signbit(n->value)))
        return kind_table[SC_EXPR_NEG].prec;
    return kind_table[n->kind].prec;
}

static void put_literal(writer *w, const sc_expr_node *n)
{
    if (n->integer) {
        put(w, "%lld", (long long)n->ival);
        return;
    }
    char text[40];
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(text, sizeof text, "%.*g", digits, n->value);
        if (strtod(text, NULL) == n->value)
            break;
    }
    put(w, "%s%s", text, strpbrk(text, ".e") ? "" : ".0");
}

static void put_access(writer *w, const sc_expr *e, const sc_expr_node *n)
{
    const sc_expr_tensor *t = n->operand == SC_EXPR_OUTPUT ? &e->out : &e->operands[n->operand];
    put(w, "%s", t->name);
    if (n->order == 0)
        return;
    put(w, "(");
    for (int32_t k = 0; k < n->order; k++)
        put(w, "%s%s", k ? "," : "", e->vars[n->idx[k]].name);
    put(w, ")");
}

static void put_node(writer *w, const sc_expr *e, const sc_expr_node *n);

static void put_child(writer *w, const sc_expr *e, const sc_expr_node *child, bool parens)
{
    if (parens)
        put(w, "(");
    put_node(w, e, child);
    if (parens)
        put(w, ")");
}

static void put_node(writer *w, const sc_expr *e, const sc_expr_node *n)
{
    int p = prec(n);
    switch (n->kind) {
    case SC_EXPR_ACCESS:
        put_access(w, e, n);
        break;
    case SC_EXPR_LITERAL:
        put_literal(w, n);
        break;
    case SC_EXPR_NEG:
        put(w, "-");
        put_child(w, e, n->a, prec(n->a) <= p);
        break;
    default:
        put_child(w, e, n->a, prec(n->a) < p);
        put(w, " %s ", kind_table[n->kind].symbol);
        put_child(w, e, n->b, prec(n->b) <= p);
        break;
    }
}

static size_t finish(writer *w)
{
    if (w->n > 0)
        w->buf[w->len < w->n ? w->len : w->n - 1] = '\0';
    return w->len;
}

size_t sc_expr_print_node(const sc_expr *e, const sc_expr_node *node, char *buf, size_t n)
{
    writer w = {buf, n, 0};
    put_node(&w, e, node);
    return finish(&w);
}

size_t sc_expr_print(const sc_expr *e, char *buf, size_t n)
{
    writer w = {buf, n, 0};
    if (e->lhs && e->rhs) {
        put_access(&w, e, e->lhs);
        put(&w, " = ");
        put_node(&w, e, e->rhs);
    }
    return finish(&w);
}
