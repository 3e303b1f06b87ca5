/*
 * lex.c — tokens of index notation: names [A-Za-z_][A-Za-z0-9_]*, unsigned numbers
 * (digits, an optional fraction, an optional exponent), and the single characters
 * ( ) , = + - *.  Spaces, tabs and newlines separate tokens.  Columns are byte offsets.
 * A number without '.' or exponent is an integer, converted here exactly up to 2^63 (the
 * magnitude of INT64_MIN) and saturated past it; the parser decides which of those are
 * int64 literals.  Any other number is converted by strtod, which assumes the "C"
 * LC_NUMERIC locale (Python keeps it); a locale that rejects '.' gives an INTERNAL error,
 * not a wrong value.
 */
#include "expr_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

void sc_expr_lex_init(sc_expr_lexer *lx, const char *src, sc_arena *arena)
{
    lx->src = src;
    lx->cur = 0;
    lx->arena = arena;
}

/* Describe the byte c for a message: 'x' when printable, \xNN otherwise. */
static void char_text(char c, char *buf, size_t n)
{
    unsigned char u = (unsigned char)c;
    if (u >= 0x20 && u < 0x7f)
        snprintf(buf, n, "'%c'", c);
    else
        snprintf(buf, n, "byte \\x%02x", u);
}

/* The integer of the digits s[start, end): its value, or UINT64_MAX past 2^63. */
static uint64_t integer_of(const char *s, int32_t start, int32_t end)
{
    const uint64_t max = (uint64_t)1 << 63;
    uint64_t v = 0;
    for (int32_t i = start; i < end; i++) {
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (max - d) / 10)
            return UINT64_MAX;
        v = v * 10 + d;
    }
    return v;
}

static sc_status lex_number(sc_expr_lexer *lx, sc_expr_token *tok, sc_error *err)
{
    const char *s = lx->src;
    int32_t start = lx->cur, i = lx->cur, digits = 0;
    while (is_digit(s[i])) {
        i++;
        digits++;
    }
    if (s[i] != '.' && s[i] != 'e' && s[i] != 'E') {
        tok->kind = SC_EXPR_TK_NUMBER;
        tok->len = i - start;
        tok->integer = true;
        tok->ival = integer_of(s, start, i);
        lx->cur = i;
        return SC_OK;
    }
    if (s[i] == '.') {
        i++;
        while (is_digit(s[i])) {
            i++;
            digits++;
        }
    }
    if (digits == 0)
        return sc_expr_fail_at(err, SC_USER, start, "'.' must be part of a number such as .5");
    if (s[i] == 'e' || s[i] == 'E') {
        int32_t e = i++;
        if (s[i] == '+' || s[i] == '-')
            i++;
        if (!is_digit(s[i]))
            return sc_expr_fail_at(err, SC_USER, e, "exponent of number has no digits");
        while (is_digit(s[i]))
            i++;
    }

    char *text = sc_arena_strdup(lx->arena, s + start, (size_t)(i - start), err);
    if (!text)
        return SC_NOMEM;
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (*end != '\0')
        return sc_expr_fail_at(err, SC_INTERNAL, start,
                               "strtod rejected the number '%s' (LC_NUMERIC locale?)", text);
    if (errno == ERANGE && isinf(v))
        return sc_expr_fail_at(err, SC_USER, start, "number '%s' is out of range", text);

    tok->kind = SC_EXPR_TK_NUMBER;
    tok->pos = start;
    tok->len = i - start;
    tok->value = v;
    lx->cur = i;
    return SC_OK;
}

sc_status sc_expr_lex_next(sc_expr_lexer *lx, sc_expr_token *tok, sc_error *err)
{
    const char *s = lx->src;
    while (is_space(s[lx->cur]))
        lx->cur++;

    char c = s[lx->cur];
    tok->pos = lx->cur;
    tok->len = 1;
    tok->integer = false;
    tok->ival = 0;
    tok->value = 0;
    if (c == '\0') {
        tok->kind = SC_EXPR_TK_EOF;
        tok->len = 0;
        return SC_OK;
    }
    if (is_alpha(c)) {
        int32_t i = lx->cur;
        while (is_alpha(s[i]) || is_digit(s[i]))
            i++;
        tok->kind = SC_EXPR_TK_NAME;
        tok->len = i - lx->cur;
        lx->cur = i;
        return SC_OK;
    }
    if (is_digit(c) || c == '.')
        return lex_number(lx, tok, err);
    switch (c) {
    case '(': case ')': case ',': case '=': case '+': case '-': case '*':
        tok->kind = c;
        lx->cur++;
        return SC_OK;
    default: {
        char what[32];
        char_text(c, what, sizeof what);
        return sc_expr_fail_at(err, SC_USER, lx->cur, "unexpected character %s", what);
    }
    }
}

const char *sc_expr_token_text(const sc_expr_lexer *lx, const sc_expr_token *tok, char *buf,
                               size_t n)
{
    if (tok->kind == SC_EXPR_TK_EOF)
        snprintf(buf, n, "end of input");
    else
        snprintf(buf, n, "'%.*s'", (int)tok->len, lx->src + tok->pos);
    return buf;
}
