/*
 * expr_internal.h — shared by the files of csrc/expr only: the error helper that sets a
 * column, and the lexer of index notation (lex.c).  Not part of the stage's API.
 */
#ifndef SC_EXPR_INTERNAL_H
#define SC_EXPR_INTERNAL_H

#include "sc_expr.h"

/* sc_fail(err, kind, "expr", ...) and then err->pos = pos.  Returns kind. */
sc_status sc_expr_fail_at(sc_error *err, sc_status kind, int32_t pos, const char *fmt, ...)
    SC_PRINTF(4, 5);

/* Token kinds: a single-character token is its character ('(', '+', ...); these follow. */
enum { SC_EXPR_TK_EOF = 256, SC_EXPR_TK_NAME, SC_EXPR_TK_NUMBER };

typedef struct sc_expr_token {
    int kind;
    int32_t pos; /* column of the first character */
    int32_t len; /* length of the text */
    /* SC_EXPR_TK_NUMBER: an integer (no '.', no exponent) of value ival (UINT64_MAX past
     * 2^63), or a float of value value */
    bool integer;
    uint64_t ival;
    double value;
} sc_expr_token;

typedef struct sc_expr_lexer {
    const char *src; /* NUL-terminated */
    int32_t cur;     /* column of the next character to read */
    sc_arena *arena; /* scratch for number conversion */
} sc_expr_lexer;

void sc_expr_lex_init(sc_expr_lexer *lx, const char *src, sc_arena *arena);

/* Read the next token into tok; USER error at the column of a bad character or number. */
sc_status sc_expr_lex_next(sc_expr_lexer *lx, sc_expr_token *tok, sc_error *err);

/* Printable description of tok for messages: "'A'", "'('", "end of input".
 * Writes into buf (n bytes) and returns buf. */
const char *sc_expr_token_text(const sc_expr_lexer *lx, const sc_expr_token *tok, char *buf,
                               size_t n);

#endif /* SC_EXPR_INTERNAL_H */
