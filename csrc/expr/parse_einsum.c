/*
 * parse_einsum.c — einsum equations to an assignment.
 *
 *   equation := term { ',' term } [ '->' output ]      spaces allowed anywhere
 *   term, output := { letter }                          letters a-z A-Z, case-sensitive
 *
 * "ij,jk->ik" becomes  out(i,k) = A(i,j) * B(j,k): operand k is named A, B, C, ... (T26,
 * T27, ... after Z), the product is left-deep in operand order, each '*' at the column of
 * the ',' before its right operand.  Without '->' the output is the subscripts that occur
 * exactly once, in ASCII order (upper case first), as torch.einsum does.
 */
#include "expr_internal.h"

#include <stdio.h>
#include <string.h>

/* Einsum subscripts are letters, so there are at most 52 index variables. */
#define NLETTERS 52

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

static const char *plural(int32_t n) { return n == 1 ? "" : "s"; }

/* Reject a character that is neither a letter nor a space in a term or the output. */
static sc_status check_char(const char *s, int32_t i, sc_error *err)
{
    char c = s[i];
    if (is_letter(c) || is_space(c))
        return SC_OK;
    if (c == '.')
        return sc_expr_fail_at(err, SC_UNSUPPORTED, i,
                               "ellipsis ('...'): scorch.einsum spells it out from the "
                               "operands' dimensions; the compiler takes letters only");
    if ((unsigned char)c >= 0x20 && (unsigned char)c < 0x7f)
        return sc_expr_fail_at(err, SC_USER, i,
                               "invalid character '%c' in einsum equation "
                               "(expected letters, ',' or '->')", c);
    return sc_expr_fail_at(err, SC_USER, i,
                           "invalid byte \\x%02x in einsum equation (expected letters, ',' or '->')",
                           (unsigned char)c);
}

/* The number of comma-separated terms in s[0..end) must be noperands. */
static sc_status check_term_count(const char *s, int32_t end, int32_t noperands, sc_error *err)
{
    int32_t nterms = 1, surplus_pos = 0;
    for (int32_t i = 0; i < end; i++) {
        if (s[i] != ',')
            continue;
        if (nterms == noperands)
            surplus_pos = i; /* the ',' that opens the first term without an operand */
        nterms++;
    }
    if (nterms == noperands)
        return SC_OK;
    return sc_expr_fail_at(err, SC_USER, nterms > noperands ? surplus_pos : end,
                           "einsum equation has %d operand term%s but %d operand%s %s given",
                           (int)nterms, plural(nterms), (int)noperands, plural(noperands),
                           noperands == 1 ? "was" : "were");
}

/*
 * Operand k: the term s[begin..end) against its order.  count[v] counts the occurrences
 * of index variable v over all terms (for the implicit output).
 */
static sc_status parse_term(sc_expr *e, const char *s, int32_t begin, int32_t end, int32_t k,
                            int32_t order, int32_t *count, const sc_expr_node **out,
                            sc_error *err)
{
    int32_t first = begin; /* the column errors about the whole term point at */
    while (first < end && is_space(s[first]))
        first++;

    int32_t nsub = 0, surplus_pos = -1;
    for (int32_t i = begin; i < end; i++) {
        sc_status st = check_char(s, i, err);
        if (st)
            return st;
        if (!is_letter(s[i]))
            continue;
        if (nsub == order)
            surplus_pos = i;
        nsub++;
    }
    if (order > SC_MAX_ORDER)
        return sc_expr_fail_at(err, SC_UNSUPPORTED, first,
                               "einsum operand %d has %d dimensions; at most %d are supported",
                               (int)k, (int)order, SC_MAX_ORDER);
    if (nsub != order)
        return sc_expr_fail_at(err, SC_USER, nsub > order ? surplus_pos : first,
                               "einsum operand %d has %d subscript%s but the tensor has %d "
                               "dimension%s", (int)k, (int)nsub, plural(nsub), (int)order,
                               plural(order));

    sc_expr_var idx[SC_MAX_ORDER];
    int32_t idx_pos[SC_MAX_ORDER];
    int32_t n = 0;
    for (int32_t i = begin; i < end; i++) {
        if (!is_letter(s[i]))
            continue;
        sc_status st = sc_expr_intern_var(e, s + i, 1, i, &idx[n], err);
        if (st)
            return st;
        idx_pos[n] = i;
        count[idx[n]]++;
        n++;
    }

    char name[16];
    if (k < 26)
        snprintf(name, sizeof name, "%c", 'A' + (int)k);
    else
        snprintf(name, sizeof name, "T%d", (int)k);
    int32_t id;
    sc_status st = sc_expr_intern_operand(e, name, strlen(name), order, first, &id, err);
    if (st)
        return st;
    return sc_expr_access(e, id, idx, idx_pos, first, out, err);
}

/* Explicit output: the subscripts in s[begin..end) after the '->' at column arrow. */
static sc_status parse_output(sc_expr *e, const char *s, int32_t arrow, int32_t end,
                              const sc_expr_node **out, sc_error *err)
{
    sc_expr_var idx[SC_MAX_ORDER];
    int32_t idx_pos[SC_MAX_ORDER];
    int32_t n = 0;
    for (int32_t i = arrow + 2; i < end; i++) {
        sc_status st = check_char(s, i, err);
        if (st)
            return st;
        if (!is_letter(s[i]))
            continue;
        if (n == SC_MAX_ORDER)
            return sc_expr_fail_at(err, SC_UNSUPPORTED, i,
                                   "einsum output has more than %d subscripts", SC_MAX_ORDER);
        st = sc_expr_intern_var(e, s + i, 1, i, &idx[n], err);
        if (st)
            return st;
        idx_pos[n] = i;
        n++;
    }
    sc_status st = sc_expr_set_output(e, "out", 3, n, arrow, err);
    if (st)
        return st;
    return sc_expr_access(e, SC_EXPR_OUTPUT, idx, idx_pos, arrow, out, err);
}

/* Implicit output: every subscript counted once, in ASCII order. */
static sc_status implicit_output(sc_expr *e, const int32_t *count, const sc_expr_node **out,
                                 sc_error *err)
{
    sc_expr_var idx[SC_MAX_ORDER];
    int32_t n = 0;
    for (int c = 'A'; c <= 'z'; c++) {
        char letter[2] = {(char)c, '\0'};
        sc_expr_var v = is_letter((char)c) ? sc_expr_find_var(e, letter) : -1;
        if (v < 0 || count[v] != 1)
            continue;
        if (n == SC_MAX_ORDER)
            return sc_expr_fail_at(err, SC_UNSUPPORTED, e->vars[v].pos,
                                   "einsum output would have more than %d dimensions",
                                   SC_MAX_ORDER);
        idx[n++] = v;
    }
    sc_status st = sc_expr_set_output(e, "out", 3, n, -1, err);
    if (st)
        return st;
    return sc_expr_access(e, SC_EXPR_OUTPUT, idx, NULL, -1, out, err);
}

sc_status sc_expr_parse_einsum(sc_arena *arena, const char *equation, int32_t noperands,
                               const int32_t *orders, sc_expr *out, sc_error *err)
{
    sc_expr_init(out, arena);
    size_t len = strlen(equation);
    if (len > INT32_MAX - 2)
        return sc_expr_fail_at(err, SC_USER, -1, "einsum equation too long");
    if (noperands > 0 && !orders)
        return sc_expr_fail_at(err, SC_INTERNAL, -1, "einsum operand orders missing");
    char *s = sc_arena_strdup(arena, equation, len, err);
    if (!s)
        return SC_NOMEM;
    out->source = s;

    int32_t end = (int32_t)len, arrow = -1;
    const char *a = strstr(s, "->");
    if (a) {
        arrow = (int32_t)(a - s);
        const char *again = strstr(a + 2, "->");
        if (again)
            return sc_expr_fail_at(err, SC_USER, (int32_t)(again - s),
                                   "einsum equation has more than one '->'");
    }
    int32_t inputs_end = arrow >= 0 ? arrow : end;
    sc_status st = check_term_count(s, inputs_end, noperands, err);
    if (st)
        return st;

    int32_t count[NLETTERS] = {0};
    const sc_expr_node *rhs = NULL;
    int32_t begin = 0;
    for (int32_t k = 0; k < noperands; k++) {
        int32_t term_end = begin;
        while (term_end < inputs_end && s[term_end] != ',')
            term_end++;
        const sc_expr_node *access;
        st = parse_term(out, s, begin, term_end, k, orders[k], count, &access, err);
        if (st)
            return st;
        if (rhs)
            st = sc_expr_binary(out, SC_EXPR_MUL, rhs, access, begin - 1, &rhs, err);
        else
            rhs = access;
        if (st)
            return st;
        begin = term_end + 1;
    }

    const sc_expr_node *lhs;
    if (arrow >= 0)
        st = parse_output(out, s, arrow, end, &lhs, err);
    else
        st = implicit_output(out, count, &lhs, err);
    if (st)
        return st;
    return sc_expr_finish(out, lhs, rhs, err);
}
