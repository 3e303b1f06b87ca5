/*
 * parse_index.c — index notation to an assignment, by recursive descent.
 *
 *   assign  := access '=' expr EOF
 *   expr    := term { ('+' | '-') term }           left associative
 *   term    := unary { '*' unary }                 left associative
 *   unary   := '-' unary | primary
 *   primary := NUMBER | access | '(' expr ')'
 *   access  := NAME [ '(' [ NAME { ',' NAME } ] ')' ]
 *
 * An integer NUMBER is an int64 literal; 2^63 is one only right after a unary '-', the two
 * being the literal INT64_MIN (C's and Python's -9223372036854775808).
 * The output is declared before the right-hand side is read, so an operand with the
 * output's name is caught where it appears.  Recursion is bounded by SC_EXPR_MAX_DEPTH.
 */
#include "expr_internal.h"

#include <stdio.h>
#include <string.h>

typedef struct parser {
    sc_expr *e;
    sc_expr_lexer lx;
    sc_expr_token tok; /* the current token */
    int32_t depth;     /* nested '(' and unary '-' being parsed */
    sc_error *err;
} parser;

static sc_status next(parser *p) { return sc_expr_lex_next(&p->lx, &p->tok, p->err); }

static sc_status expected(parser *p, const char *what)
{
    char found[48];
    sc_expr_token_text(&p->lx, &p->tok, found, sizeof found);
    return sc_expr_fail_at(p->err, SC_USER, p->tok.pos, "expected %s but found %s", what, found);
}

static sc_status enter(parser *p)
{
    if (++p->depth > SC_EXPR_MAX_DEPTH)
        return sc_expr_fail_at(p->err, SC_USER, p->tok.pos,
                               "expression is nested too deeply (more than %d levels)",
                               SC_EXPR_MAX_DEPTH);
    return SC_OK;
}

/* The optional index list after a tensor name; *order = 0 when there is none. */
static sc_status parse_indices(parser *p, sc_expr_var *idx, int32_t *idx_pos, int32_t *order)
{
    *order = 0;
    if (p->tok.kind != '(')
        return SC_OK;
    sc_status st = next(p);
    if (st)
        return st;
    if (p->tok.kind == ')')
        return next(p);
    for (;;) {
        if (p->tok.kind != SC_EXPR_TK_NAME)
            return expected(p, "an index name");
        if (*order == SC_MAX_ORDER)
            return sc_expr_fail_at(p->err, SC_UNSUPPORTED, p->tok.pos,
                                   "more than %d indices; at most %d dimensions are supported",
                                   SC_MAX_ORDER, SC_MAX_ORDER);
        st = sc_expr_intern_var(p->e, p->lx.src + p->tok.pos, (size_t)p->tok.len, p->tok.pos,
                                &idx[*order], p->err);
        if (st)
            return st;
        idx_pos[*order] = p->tok.pos;
        (*order)++;
        if ((st = next(p)))
            return st;
        if (p->tok.kind == ')')
            return next(p);
        if (p->tok.kind != ',')
            return expected(p, "',' or ')'");
        if ((st = next(p)))
            return st;
    }
}

/* An operand access on the right-hand side; the current token is its name. */
static sc_status parse_access(parser *p, const sc_expr_node **out)
{
    sc_expr_token name = p->tok;
    sc_expr_var idx[SC_MAX_ORDER];
    int32_t idx_pos[SC_MAX_ORDER];
    int32_t order, id;
    sc_status st = next(p);
    if (!st)
        st = parse_indices(p, idx, idx_pos, &order);
    if (!st)
        st = sc_expr_intern_operand(p->e, p->lx.src + name.pos, (size_t)name.len, order,
                                    name.pos, &id, p->err);
    if (st)
        return st;
    return sc_expr_access(p->e, id, idx, idx_pos, name.pos, out, p->err);
}

static sc_status parse_expr(parser *p, const sc_expr_node **out);

/* The literal of the current token, a NUMBER; negate: it follows a unary '-' at pos (only
 * 2^63 is read so, as INT64_MIN). */
static sc_status parse_number(parser *p, bool negate, int32_t pos, const sc_expr_node **out)
{
    const sc_expr_token *t = &p->tok;
    sc_status st;
    if (!t->integer)
        st = sc_expr_literal(p->e, t->value, t->pos, out, p->err);
    else if (negate)
        st = sc_expr_int_literal(p->e, INT64_MIN, pos, out, p->err);
    else if (t->ival > INT64_MAX)
        st = sc_expr_fail_at(p->err, SC_USER, t->pos,
                             "integer %.*s is out of the int64 range; write %.*s.0 for a "
                             "float constant", (int)t->len, p->lx.src + t->pos, (int)t->len,
                             p->lx.src + t->pos);
    else
        st = sc_expr_int_literal(p->e, (int64_t)t->ival, t->pos, out, p->err);
    return st ? st : next(p);
}

static sc_status parse_primary(parser *p, const sc_expr_node **out)
{
    sc_status st;
    switch (p->tok.kind) {
    case SC_EXPR_TK_NUMBER:
        return parse_number(p, false, p->tok.pos, out);
    case SC_EXPR_TK_NAME:
        return parse_access(p, out);
    case '(': {
        int32_t open = p->tok.pos;
        if ((st = enter(p)) || (st = next(p)) || (st = parse_expr(p, out)))
            return st;
        if (p->tok.kind != ')') {
            char what[48];
            snprintf(what, sizeof what, "')' to close the '(' at column %d", (int)open);
            return expected(p, what);
        }
        p->depth--;
        return next(p);
    }
    default:
        return expected(p, "a tensor, a number or '('");
    }
}

static sc_status parse_unary(parser *p, const sc_expr_node **out)
{
    if (p->tok.kind != '-')
        return parse_primary(p, out);
    int32_t pos = p->tok.pos;
    const sc_expr_node *a;
    sc_status st;
    if ((st = enter(p)) || (st = next(p)))
        return st;
    if (p->tok.kind == SC_EXPR_TK_NUMBER && p->tok.integer && p->tok.ival == (uint64_t)1 << 63) {
        p->depth--;
        return parse_number(p, true, pos, out);
    }
    if ((st = parse_unary(p, &a)))
        return st;
    p->depth--;
    return sc_expr_neg(p->e, a, pos, out, p->err);
}

static sc_status parse_term(parser *p, const sc_expr_node **out)
{
    const sc_expr_node *a, *b;
    sc_status st = parse_unary(p, &a);
    while (!st && p->tok.kind == '*') {
        int32_t pos = p->tok.pos;
        if ((st = next(p)) || (st = parse_unary(p, &b)))
            break;
        st = sc_expr_binary(p->e, SC_EXPR_MUL, a, b, pos, &a, p->err);
    }
    if (!st)
        *out = a;
    return st;
}

static sc_status parse_expr(parser *p, const sc_expr_node **out)
{
    const sc_expr_node *a, *b;
    sc_status st = parse_term(p, &a);
    while (!st && (p->tok.kind == '+' || p->tok.kind == '-')) {
        sc_expr_kind kind = p->tok.kind == '+' ? SC_EXPR_ADD : SC_EXPR_SUB;
        int32_t pos = p->tok.pos;
        if ((st = next(p)) || (st = parse_term(p, &b)))
            break;
        st = sc_expr_binary(p->e, kind, a, b, pos, &a, p->err);
    }
    if (!st)
        *out = a;
    return st;
}

/* The left-hand side: the output tensor and its access. */
static sc_status parse_lhs(parser *p, const sc_expr_node **out)
{
    if (p->tok.kind != SC_EXPR_TK_NAME)
        return expected(p, "the output tensor's name");
    sc_expr_token name = p->tok;
    sc_expr_var idx[SC_MAX_ORDER];
    int32_t idx_pos[SC_MAX_ORDER];
    int32_t order;
    sc_status st = next(p);
    if (!st)
        st = parse_indices(p, idx, idx_pos, &order);
    if (!st)
        st = sc_expr_set_output(p->e, p->lx.src + name.pos, (size_t)name.len, order, name.pos,
                                p->err);
    if (st)
        return st;
    return sc_expr_access(p->e, SC_EXPR_OUTPUT, idx, idx_pos, name.pos, out, p->err);
}

sc_status sc_expr_parse_index(sc_arena *arena, const char *text, sc_expr *out, sc_error *err)
{
    sc_expr_init(out, arena);
    size_t len = strlen(text);
    if (len > INT32_MAX - 2)
        return sc_expr_fail_at(err, SC_USER, -1, "expression too long");
    char *s = sc_arena_strdup(arena, text, len, err);
    if (!s)
        return SC_NOMEM;
    out->source = s;

    parser p = {0};
    p.e = out;
    p.err = err;
    sc_expr_lex_init(&p.lx, s, arena);

    const sc_expr_node *lhs, *rhs;
    sc_status st = next(&p);
    if (!st)
        st = parse_lhs(&p, &lhs);
    if (st)
        return st;
    if (p.tok.kind != '=')
        return expected(&p, "'='");
    if ((st = next(&p)) || (st = parse_expr(&p, &rhs)))
        return st;
    if (p.tok.kind != SC_EXPR_TK_EOF)
        return expected(&p, "an operator or the end of the expression");
    return sc_expr_finish(out, lhs, rhs, err);
}
