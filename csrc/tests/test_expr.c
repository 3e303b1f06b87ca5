/*
 * test_expr.c — the expr stage on its own: einsum and index-notation parsing checked
 * through the canonical text, the tables and the reduction variables; one negative test
 * per error with its kind, column and message; shape binding; allocation failures.
 */
#include "../expr/sc_expr.h"
#include "check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static sc_ctx ctx;

/* The reduction variables of e as "j" or "i,j" ("" when none). */
static void reductions_text(const sc_expr *e, char *buf, size_t n)
{
    sc_expr_var vars[64];
    int32_t count = sc_expr_reduction_vars(e, vars, 64);
    buf[0] = '\0';
    for (int32_t k = 0; k < count; k++) {
        if (k)
            strncat(buf, ",", n - strlen(buf) - 1);
        strncat(buf, e->vars[vars[k]].name, n - strlen(buf) - 1);
    }
}

static void check_result(const char *text, sc_status st, const sc_error *err, const sc_expr *e,
                         const char *printed, const char *reduced)
{
    char buf[512], red[256];
    CHECK(st == SC_OK);
    if (st != SC_OK) {
        fprintf(stderr, "  %s: %s (pos %lld)\n", text, err->msg, (long long)err->pos);
        return;
    }
    sc_expr_print(e, buf, sizeof buf);
    CHECK(strcmp(buf, printed) == 0);
    if (strcmp(buf, printed) != 0)
        fprintf(stderr, "  %s: printed \"%s\", expected \"%s\"\n", text, buf, printed);
    reductions_text(e, red, sizeof red);
    CHECK(strcmp(red, reduced) == 0);
    if (strcmp(red, reduced) != 0)
        fprintf(stderr, "  %s: reductions \"%s\", expected \"%s\"\n", text, red, reduced);
}

static void einsum_ok(const char *eq, int32_t n, const int32_t *orders, const char *printed,
                      const char *reduced)
{
    sc_arena arena;
    sc_arena_init(&arena, &ctx);
    sc_error err;
    sc_error_clear(&err);
    sc_expr e;
    sc_status st = sc_expr_parse_einsum(&arena, eq, n, orders, &e, &err);
    check_result(eq, st, &err, &e, printed, reduced);
    sc_arena_release(&arena);
}

static void index_ok(const char *text, const char *printed, const char *reduced)
{
    sc_arena arena;
    sc_arena_init(&arena, &ctx);
    sc_error err;
    sc_error_clear(&err);
    sc_expr e;
    sc_status st = sc_expr_parse_index(&arena, text, &e, &err);
    check_result(text, st, &err, &e, printed, reduced);
    if (st == SC_OK) {
        /* The canonical text parses back to itself. */
        char first[512], again[512];
        sc_expr e2;
        sc_expr_print(&e, first, sizeof first);
        st = sc_expr_parse_index(&arena, first, &e2, &err);
        CHECK(st == SC_OK);
        if (st == SC_OK) {
            sc_expr_print(&e2, again, sizeof again);
            CHECK(strcmp(first, again) == 0);
        }
    }
    sc_arena_release(&arena);
}

static void check_error(const char *text, sc_status st, const sc_error *err, sc_status kind,
                        int64_t pos, const char *phrase)
{
    CHECK(st == kind);
    CHECK(err->kind == kind);
    CHECK(err->pos == pos);
    CHECK(strcmp(err->stage, "expr") == 0);
    CHECK(strstr(err->msg, phrase) != NULL);
    if (st != kind || err->pos != pos || !strstr(err->msg, phrase))
        fprintf(stderr, "  %s: got %s at %lld: \"%s\"; expected %s at %lld with \"%s\"\n", text,
                sc_status_name(st), (long long)err->pos, err->msg, sc_status_name(kind),
                (long long)pos, phrase);
}

static void einsum_err(const char *eq, int32_t n, const int32_t *orders, sc_status kind,
                       int64_t pos, const char *phrase)
{
    sc_arena arena;
    sc_arena_init(&arena, &ctx);
    sc_error err;
    sc_error_clear(&err);
    sc_expr e;
    sc_status st = sc_expr_parse_einsum(&arena, eq, n, orders, &e, &err);
    check_error(eq, st, &err, kind, pos, phrase);
    sc_arena_release(&arena);
}

static void index_err(const char *text, sc_status kind, int64_t pos, const char *phrase)
{
    sc_arena arena;
    sc_arena_init(&arena, &ctx);
    sc_error err;
    sc_error_clear(&err);
    sc_expr e;
    sc_status st = sc_expr_parse_index(&arena, text, &e, &err);
    check_error(text, st, &err, kind, pos, phrase);
    sc_arena_release(&arena);
}

static void test_einsum(void)
{
    const int32_t o22[] = {2, 2}, o222[] = {2, 2, 2}, o2[] = {2}, o11[] = {1, 1};
    const int32_t o33[] = {3, 3}, o0[] = {0}, o02[] = {0, 2};

    einsum_ok("ij,jk->ik", 2, o22, "out(i,k) = A(i,j) * B(j,k)", "j");
    einsum_ok("ij,jk", 2, o22, "out(i,k) = A(i,j) * B(j,k)", "j");
    einsum_ok(" i j , j k -> i k ", 2, o22, "out(i,k) = A(i,j) * B(j,k)", "j");
    einsum_ok("ij,ik,jk->ij", 3, o222, "out(i,j) = A(i,j) * B(i,k) * C(j,k)", "k");
    einsum_ok("bij,bjk->bik", 2, o33, "out(b,i,k) = A(b,i,j) * B(b,j,k)", "j");
    einsum_ok("ij->ji", 1, o2, "out(j,i) = A(i,j)", "");
    einsum_ok("ji", 1, o2, "out(i,j) = A(j,i)", "");
    einsum_ok("ij->", 1, o2, "out = A(i,j)", "i,j");
    einsum_ok("ii->i", 1, o2, "out(i) = A(i,i)", "");
    einsum_ok("ii->", 1, o2, "out = A(i,i)", "i");
    einsum_ok("ii", 1, o2, "out = A(i,i)", "i");
    einsum_ok("i,i->", 2, o11, "out = A(i) * B(i)", "i");
    einsum_ok("i,i", 2, o11, "out = A(i) * B(i)", "i");
    einsum_ok("i,j", 2, o11, "out(i,j) = A(i) * B(j)", "");
    einsum_ok("iI", 1, o2, "out(I,i) = A(i,I)", "");
    einsum_ok("iI->iI", 1, o2, "out(i,I) = A(i,I)", "");
    einsum_ok(",ij->ij", 2, o02, "out(i,j) = A * B(i,j)", "");
    einsum_ok("", 1, o0, "out = A", "");
    einsum_ok("->", 1, o0, "out = A", "");

    /* Tables, ids and columns. */
    sc_arena arena;
    sc_arena_init(&arena, &ctx);
    sc_error err;
    sc_expr e;
    CHECK(sc_expr_parse_einsum(&arena, "ij,jk->ik", 2, o22, &e, &err) == SC_OK);
    CHECK(e.nvars == 3 && strcmp(e.vars[0].name, "i") == 0 && strcmp(e.vars[2].name, "k") == 0);
    CHECK(e.vars[1].pos == 1);
    CHECK(e.noperands == 2 && strcmp(e.operands[1].name, "B") == 0 && e.operands[1].order == 2);
    CHECK(e.operands[0].naccesses == 1 && e.operands[1].naccesses == 1);
    const sc_expr_node *b = e.operands[1].accesses[0];
    CHECK(b->kind == SC_EXPR_ACCESS && b->operand == 1 && b->pos == 3);
    CHECK(b->idx[0] == 1 && b->idx[1] == 2 && b->idx_pos[0] == 3 && b->idx_pos[1] == 4);
    CHECK(e.rhs->kind == SC_EXPR_MUL && e.rhs->pos == 2);
    CHECK(e.lhs->operand == SC_EXPR_OUTPUT && e.lhs->idx_pos[1] == 8);
    CHECK(strcmp(e.out.name, "out") == 0 && e.out.order == 2 && e.out.accesses[0] == e.lhs);
    CHECK(sc_expr_var_in_output(&e, 0) && !sc_expr_var_in_output(&e, 1));
    CHECK(sc_expr_find_operand(&e, "B") == 1 && sc_expr_find_operand(&e, "Z") == -1);
    CHECK(sc_expr_find_var(&e, "k") == 2 && sc_expr_find_var(&e, "x") == -1);
    CHECK(strcmp(e.source, "ij,jk->ik") == 0);

    /* Past Z operands are called T26, T27, ... */
    int32_t zeros[27] = {0};
    char commas[27];
    memset(commas, ',', 26);
    commas[26] = '\0';
    CHECK(sc_expr_parse_einsum(&arena, commas, 27, zeros, &e, &err) == SC_OK);
    CHECK(e.noperands == 27 && strcmp(e.operands[25].name, "Z") == 0 &&
          strcmp(e.operands[26].name, "T26") == 0);
    sc_arena_release(&arena);
}

static void test_einsum_errors(void)
{
    const int32_t o22[] = {2, 2}, o2[] = {2}, o9[] = {9}, o81[] = {8, 1}, o0[] = {0};

    einsum_err("ij,j2->i", 2, o22, SC_USER, 4, "invalid character '2'");
    einsum_err("ij,jk->i,k", 2, o22, SC_USER, 8, "invalid character ','");
    einsum_err("ij,jk>ik", 2, o22, SC_USER, 5, "invalid character '>'");
    einsum_err("...ij,jk->ik", 2, o22, SC_UNSUPPORTED, 0, "ellipsis");
    einsum_err("ij->i->j", 1, o2, SC_USER, 5, "more than one '->'");
    einsum_err("ij,jk,kl->il", 2, o22, SC_USER, 5, "3 operand terms but 2 operands were given");
    einsum_err("ij->ij", 2, o22, SC_USER, 2, "1 operand term but 2 operands were given");
    einsum_err("", 0, NULL, SC_USER, 0, "1 operand term but 0 operands were given");
    einsum_err("ijk,jk->ik", 2, o22, SC_USER, 2,
               "einsum operand 0 has 3 subscripts but the tensor has 2 dimensions");
    einsum_err("ij, j->i", 2, o22, SC_USER, 4,
               "einsum operand 1 has 1 subscript but the tensor has 2 dimensions");
    einsum_err("abcdefghi", 1, o9, SC_UNSUPPORTED, 0, "at most 8");
    einsum_err("ij,jk->ii", 2, o22, SC_USER, 8, "output index 'i' appears twice");
    einsum_err("ij,jk->iz", 2, o22, SC_USER, 8, "output index 'z' does not appear in any input");
    einsum_err("abcdefgh,i", 2, o81, SC_UNSUPPORTED, 9, "more than 8 dimensions");
    einsum_err("->abcdefghi", 1, o0, SC_UNSUPPORTED, 10, "more than 8 subscripts");
    einsum_err("i\xc3\xa9", 1, o2, SC_USER, 1, "invalid byte \\xc3");
}

static void test_index(void)
{
    index_ok("C(i,k) = A(i,j) * B(j,k) + 2 * D(i,k)", "C(i,k) = A(i,j) * B(j,k) + 2 * D(i,k)",
             "j");
    index_ok("y(i) = A(i,j) * x(j)", "y(i) = A(i,j) * x(j)", "j");
    index_ok("a = B(i,j) * C(i,j)", "a = B(i,j) * C(i,j)", "i,j");
    index_ok("a() = B(i,j)*C(i,j)", "a = B(i,j) * C(i,j)", "i,j");
    index_ok("  y ( i )=A( i , j )*x(j)  ", "y(i) = A(i,j) * x(j)", "j");
    index_ok("y(i) = -A(i,j) * x(j)", "y(i) = -A(i,j) * x(j)", "j");
    index_ok("y(i) = -(A(i) + B(i))", "y(i) = -(A(i) + B(i))", "");
    index_ok("y(i) = --x(i)", "y(i) = -(-x(i))", "");
    index_ok("y(i) = x(i) * -2", "y(i) = x(i) * -2", "");
    index_ok("y(i) = A(i) - (B(i) - C(i))", "y(i) = A(i) - (B(i) - C(i))", "");
    index_ok("y(i) = (A(i) - B(i)) - C(i)", "y(i) = A(i) - B(i) - C(i)", "");
    index_ok("y(i) = A(i) + B(i) * C(i)", "y(i) = A(i) + B(i) * C(i)", "");
    index_ok("y(i) = (A(i) + B(i)) * C(i)", "y(i) = (A(i) + B(i)) * C(i)", "");
    index_ok("y(i) = A(i) * (B(i) * C(i))", "y(i) = A(i) * (B(i) * C(i))", "");
    index_ok("y(i) = ((A(i)))", "y(i) = A(i)", "");
    index_ok("y(i) = 0.5*x(i) + 1e-3*z(i) + 2.50*w(i) + .25*v(i) + 3E+2*u(i) + 7.*t(i)",
             "y(i) = 0.5 * x(i) + 0.001 * z(i) + 2.5 * w(i) + 0.25 * v(i) + 300.0 * u(i) + "
             "7.0 * t(i)", "");
    index_ok("y(i) = 0.1 * x(i)", "y(i) = 0.1 * x(i)", "");
    index_ok("out_1(i1, j2) = A_b(i1, k) * Bx(k, j2)", "out_1(i1,j2) = A_b(i1,k) * Bx(k,j2)", "k");
    index_ok("y(i) = alpha * x(i) + beta() * y0(i)", "y(i) = alpha * x(i) + beta * y0(i)", "");
    index_ok("y(i) = A(i,i)", "y(i) = A(i,i)", "");
    index_ok("a = A(i,j) * A(j,i)", "a = A(i,j) * A(j,i)", "i,j");
    index_ok("a = 3", "a = 3", "");
    index_ok("C(i,j) = A(i,j) * B(i,j) - A(i,j)", "C(i,j) = A(i,j) * B(i,j) - A(i,j)", "");

    /* Tables: operands by first appearance, the output apart, accesses per operand. */
    sc_arena arena;
    sc_arena_init(&arena, &ctx);
    sc_error err;
    sc_expr e;
    CHECK(sc_expr_parse_index(&arena, "C(i,k) = A(i,j) * B(j,k) + 2 * A(i,k)", &e, &err) ==
          SC_OK);
    CHECK(e.noperands == 2 && strcmp(e.operands[0].name, "A") == 0 &&
          strcmp(e.operands[1].name, "B") == 0);
    CHECK(strcmp(e.out.name, "C") == 0 && e.out.order == 2 && e.out.pos == 0);
    CHECK(e.operands[0].naccesses == 2 && e.operands[1].naccesses == 1);
    CHECK(e.operands[0].accesses[1]->pos == 31 && e.operands[0].accesses[1]->idx[1] == 1);
    CHECK(e.nvars == 3 && strcmp(e.vars[1].name, "k") == 0 && strcmp(e.vars[2].name, "j") == 0);
    CHECK(e.rhs->kind == SC_EXPR_ADD && e.rhs->pos == 25);
    CHECK(e.rhs->b->kind == SC_EXPR_MUL && e.rhs->b->a->kind == SC_EXPR_LITERAL &&
          e.rhs->b->a->integer && e.rhs->b->a->ival == 2);

    /* A bounded buffer gets a truncated, terminated text and the full length back. */
    char small[8];
    size_t need = sc_expr_print(&e, small, sizeof small);
    CHECK(need == strlen("C(i,k) = A(i,j) * B(j,k) + 2 * A(i,k)"));
    CHECK(strcmp(small, "C(i,k) ") == 0);
    CHECK(sc_expr_print(&e, NULL, 0) == need);
    CHECK(sc_expr_print_node(&e, e.rhs->b, small, sizeof small) == 10);
    CHECK(strcmp(sc_expr_kind_name(SC_EXPR_SUB), "sub") == 0);
    sc_arena_release(&arena);
}

static void test_index_errors(void)
{
    char deep[700], chain[3000];

    index_err("y(i) = A(i) / B(i)", SC_USER, 12, "unexpected character '/'");
    index_err("y(i) = A(i) \x80", SC_USER, 12, "unexpected character byte \\x80");
    index_err("y(i) A(i)", SC_USER, 5, "expected '=' but found 'A'");
    index_err("", SC_USER, 0, "expected the output tensor's name but found end of input");
    index_err("= A(i)", SC_USER, 0, "expected the output tensor's name");
    index_err("y(i) = (A(i) + B(i)", SC_USER, 19, "expected ')' to close the '(' at column 7");
    index_err("y(i) = A(i,)", SC_USER, 11, "expected an index name but found ')'");
    index_err("y(i) = A(i j)", SC_USER, 11, "expected ',' or ')' but found 'j'");
    index_err("y(i) = A(i) + ", SC_USER, 14, "expected a tensor, a number or '(' but found end");
    index_err("y(i) = A(i) B(i)", SC_USER, 12, "expected an operator or the end");
    index_err("y(i) = A(i,j) * y(j)", SC_USER, 16, "output tensor 'y' also appears");
    index_err("y(i) = A(i,j) * x(j) + A(i)", SC_USER, 23,
              "tensor 'A' is used with 1 index here but with 2 before");
    index_err("y(i,k) = A(i,j) * x(j)", SC_USER, 4, "output index 'k' does not appear in any input");
    index_err("y(i) = 2", SC_USER, 2, "output index 'i' does not appear in any input");
    index_err("C(i,i) = A(i,i)", SC_USER, 4, "output index 'i' appears twice");
    index_err("y(a,b,c,d,e,f,g,h,i) = A(a)", SC_UNSUPPORTED, 18, "at most 8 dimensions");
    index_err("y(i) = 1e999 * x(i)", SC_USER, 7, "number '1e999' is out of range");
    index_err("y(i) = 2e+ * x(i)", SC_USER, 8, "exponent of number has no digits");
    index_err("y(i) = . * x(i)", SC_USER, 7, "'.' must be part of a number");

    /* Nesting: 600 '(' fail at the 513th; a 600-term sum fails at its 512th '+'. */
    strcpy(deep, "a = ");
    for (int k = 0; k < 600; k++)
        strcat(deep, "(");
    strcat(deep, "b");
    index_err(deep, SC_USER, 4 + SC_EXPR_MAX_DEPTH, "nested too deeply");
    strcpy(chain, "a = b");
    for (int k = 0; k < 600; k++)
        strcat(chain, " + b");
    index_err(chain, SC_USER, 6 + 4 * (SC_EXPR_MAX_DEPTH - 1), "nested too deeply");
}

/* The literal of "y(i) = <lit> * x(i)" (the product's left factor), or NULL. */
static const sc_expr_node *factor(sc_arena *arena, const char *text)
{
    sc_error err;
    sc_expr e;
    if (sc_expr_parse_index(arena, text, &e, &err) != SC_OK)
        return NULL;
    const sc_expr_node *n = e.rhs->kind == SC_EXPR_MUL ? e.rhs->a : e.rhs;
    return n->kind == SC_EXPR_LITERAL ? n : NULL;
}

static void test_literals(void)
{
    /* Integers (no '.', no exponent) are int64 literals, printed exactly; the float
     * literals print with a '.' or an exponent, so each reads back as what it was. */
    index_ok("y(i) = 9007199254740993 * x(i)", "y(i) = 9007199254740993 * x(i)", "");
    index_ok("y(i) = 9223372036854775807*x(i)", "y(i) = 9223372036854775807 * x(i)", "");
    index_ok("y(i) = -9223372036854775807*x(i)", "y(i) = -9223372036854775807 * x(i)", "");
    index_ok("y(i) = -9223372036854775808*x(i)", "y(i) = -9223372036854775808 * x(i)", "");
    index_ok("y(i) = x(i) * - 9223372036854775808", "y(i) = x(i) * -9223372036854775808", "");
    index_ok("y(i) = --9223372036854775808*x(i)", "y(i) = -(-9223372036854775808) * x(i)", "");
    index_ok("y(i) = 007 * x(i)", "y(i) = 7 * x(i)", "");
    index_ok("y(i) = 2.0 * x(i) + 1e3 * z(i)", "y(i) = 2.0 * x(i) + 1000.0 * z(i)", "");
    index_ok("y(i) = 1e16 * x(i)", "y(i) = 1e+16 * x(i)", "");
    index_ok("y(i) = 12345678901234567.0 * x(i)", "y(i) = 12345678901234568.0 * x(i)", "");
    index_ok("y(i) = 9223372036854775808.0 * x(i)", "y(i) = 9.223372036854776e+18 * x(i)", "");

    sc_arena arena;
    sc_arena_init(&arena, &ctx);
    const sc_expr_node *n = factor(&arena, "y(i) = 9007199254740993 * x(i)");
    CHECK(n && n->integer && n->ival == 9007199254740993 && n->pos == 7);
    n = factor(&arena, "y(i) = 9223372036854775807 * x(i)");
    CHECK(n && n->integer && n->ival == INT64_MAX);
    /* a '-' right before 2^63 and the number are one literal, at the '-' */
    n = factor(&arena, "y(i) = - 9223372036854775808 * x(i)");
    CHECK(n && n->integer && n->ival == INT64_MIN && n->pos == 7);
    /* any other '-' stays a negation */
    CHECK(factor(&arena, "y(i) = -9223372036854775807 * x(i)") == NULL);
    n = factor(&arena, "y(i) = 9007199254740993.0 * x(i)");
    CHECK(n && !n->integer && n->value == 9007199254740992.0);
    n = factor(&arena, "y(i) = 2e0 * x(i)");
    CHECK(n && !n->integer && n->value == 2.0);
    sc_arena_release(&arena);

    /* past int64: a USER error at the number, naming it */
    index_err("y(i) = 9223372036854775808 * x(i)", SC_USER, 7,
              "integer 9223372036854775808 is out of the int64 range; write "
              "9223372036854775808.0 for a float constant");
    index_err("y(i) = x(i) - 9223372036854775808", SC_USER, 14,
              "integer 9223372036854775808 is out of the int64 range");
    index_err("y(i) = -9223372036854775809 * x(i)", SC_USER, 8,
              "integer 9223372036854775809 is out of the int64 range");
    index_err("y(i) = -(9223372036854775808) * x(i)", SC_USER, 9,
              "integer 9223372036854775808 is out of the int64 range");
    index_err("y(i) = 18446744073709551616 * x(i)", SC_USER, 7,
              "integer 18446744073709551616 is out of the int64 range");
    index_err("y(i) = x(i) * 100000000000000000000000000000", SC_USER, 14,
              "write 100000000000000000000000000000.0 for a float constant");
}

static void test_builder(void)
{
    sc_arena arena;
    sc_arena_init(&arena, &ctx);
    sc_error err;
    sc_expr e;
    sc_expr_init(&e, &arena);

    sc_expr_var i;
    int32_t x, y;
    const sc_expr_node *lhs, *xi, *two, *neg2, *prod, *neg, *bad;
    CHECK(sc_expr_intern_var(&e, "i", 1, -1, &i, &err) == SC_OK && i == 0);
    CHECK(sc_expr_set_output(&e, "y", 1, 1, -1, &err) == SC_OK);
    CHECK(sc_expr_intern_operand(&e, "x", 1, 1, -1, &x, &err) == SC_OK && x == 0);
    CHECK(sc_expr_intern_operand(&e, "x", 1, 1, -1, &y, &err) == SC_OK && y == 0);
    CHECK(sc_expr_access(&e, SC_EXPR_OUTPUT, &i, NULL, -1, &lhs, &err) == SC_OK);
    CHECK(sc_expr_access(&e, x, &i, NULL, -1, &xi, &err) == SC_OK && xi->idx_pos[0] == -1);
    CHECK(sc_expr_literal(&e, -2, -1, &two, &err) == SC_OK);
    CHECK(sc_expr_neg(&e, two, -1, &neg2, &err) == SC_OK);
    CHECK(sc_expr_binary(&e, SC_EXPR_MUL, two, xi, -1, &prod, &err) == SC_OK);
    CHECK(sc_expr_binary(&e, SC_EXPR_ADD, prod, neg2, -1, &neg, &err) == SC_OK);

    /* Checking constructors: bad ids, kinds, orders and literals are refused. */
    sc_expr_var nine = 9;
    CHECK(sc_expr_access(&e, 5, &i, NULL, 0, &bad, &err) == SC_INTERNAL);
    CHECK(sc_expr_access(&e, x, &nine, NULL, 0, &bad, &err) == SC_INTERNAL);
    CHECK(sc_expr_binary(&e, SC_EXPR_NEG, xi, xi, 0, &bad, &err) == SC_INTERNAL);
    CHECK(sc_expr_literal(&e, HUGE_VAL, 3, &bad, &err) == SC_USER && err.pos == 3);
    CHECK(sc_expr_intern_operand(&e, "x", 1, 2, 7, &y, &err) == SC_USER && err.pos == 7);
    CHECK(sc_expr_intern_operand(&e, "y", 1, 1, 7, &y, &err) == SC_USER);
    CHECK(sc_expr_intern_operand(&e, "z", 1, 9, 7, &y, &err) == SC_UNSUPPORTED);

    const sc_expr_node *lo;
    CHECK(sc_expr_int_literal(&e, INT64_MIN, 4, &lo, &err) == SC_OK && lo->integer &&
          lo->ival == INT64_MIN && lo->pos == 4);

    CHECK(sc_expr_finish(&e, lhs, neg, &err) == SC_OK);
    char buf[128];
    sc_expr_print(&e, buf, sizeof buf);
    CHECK(strcmp(buf, "y(i) = -2.0 * x(i) + -(-2.0)") == 0);
    CHECK(sc_expr_print_node(&e, lo, buf, sizeof buf) == 20 &&
          strcmp(buf, "-9223372036854775808") == 0);
    CHECK(e.source == NULL && e.operands[0].naccesses == 1);
    sc_arena_release(&arena);
}

static void test_bind(void)
{
    sc_arena arena;
    sc_arena_init(&arena, &ctx);
    sc_error err;
    sc_expr e;
    int64_t ext[8];
    uint32_t bcast[4];
    const int32_t o22[] = {2, 2}, o2[] = {2};

    CHECK(sc_expr_parse_einsum(&arena, "ij,jk->ik", 2, o22, &e, &err) == SC_OK);
    {
        const int64_t a[] = {3, 4}, b[] = {4, 5};
        const int64_t *dims[] = {a, b};
        CHECK(sc_expr_bind_dims(&e, dims, false, ext, bcast, &err) == SC_OK);
        CHECK(ext[0] == 3 && ext[1] == 4 && ext[2] == 5 && bcast[0] == 0 && bcast[1] == 0);
    }
    {
        const int64_t a[] = {3, 4}, b[] = {5, 6};
        const int64_t *dims[] = {a, b};
        CHECK(sc_expr_bind_dims(&e, dims, true, ext, NULL, &err) == SC_USER);
        CHECK(err.pos == 3);
        CHECK(strstr(err.msg, "index 'j' has size 4 in A (operand 0, dimension 1) but size 5 "
                              "in B (operand 1, dimension 0)") != NULL);
    }
    {
        const int64_t a[] = {3, -1}, b[] = {5, 6};
        const int64_t *dims[] = {a, b};
        CHECK(sc_expr_bind_dims(&e, dims, false, ext, NULL, &err) == SC_USER);
        CHECK(err.pos == 0 && strstr(err.msg, "negative size -1") != NULL);
    }

    /* Broadcasting of size-1 dimensions, and 1 against 0. */
    CHECK(sc_expr_parse_einsum(&arena, "ij,ij->ij", 2, o22, &e, &err) == SC_OK);
    {
        const int64_t a[] = {3, 1}, b[] = {3, 4};
        const int64_t *dims[] = {a, b};
        CHECK(sc_expr_bind_dims(&e, dims, false, ext, NULL, &err) == SC_USER);
        CHECK(err.pos == 4 && strstr(err.msg, "size 1 in A") != NULL);
        CHECK(sc_expr_bind_dims(&e, dims, true, ext, bcast, &err) == SC_OK);
        CHECK(ext[0] == 3 && ext[1] == 4 && bcast[0] == 2 && bcast[1] == 0);
    }
    {
        const int64_t a[] = {1, 0}, b[] = {0, 1};
        const int64_t *dims[] = {a, b};
        CHECK(sc_expr_bind_dims(&e, dims, true, ext, bcast, &err) == SC_OK);
        CHECK(ext[0] == 0 && ext[1] == 0 && bcast[0] == 1 && bcast[1] == 2);
    }
    {
        const int64_t a[] = {1, 1}, b[] = {1, 1};
        const int64_t *dims[] = {a, b};
        CHECK(sc_expr_bind_dims(&e, dims, true, ext, bcast, &err) == SC_OK);
        CHECK(ext[0] == 1 && ext[1] == 1 && bcast[0] == 0 && bcast[1] == 0);
    }

    /* A diagonal needs equal sizes, broadcasting or not. */
    CHECK(sc_expr_parse_einsum(&arena, "ii->i", 1, o2, &e, &err) == SC_OK);
    {
        const int64_t a[] = {3, 1};
        const int64_t *dims[] = {a};
        CHECK(sc_expr_bind_dims(&e, dims, true, ext, NULL, &err) == SC_USER);
        CHECK(err.pos == 1 && strstr(err.msg, "index 'i' is repeated in A") != NULL);
    }

    /* An operand read twice: both accesses bind. */
    CHECK(sc_expr_parse_index(&arena, "a = A(i,j) * A(j,i)", &e, &err) == SC_OK);
    {
        const int64_t a[] = {3, 4};
        const int64_t *dims[] = {a};
        CHECK(sc_expr_bind_dims(&e, dims, false, ext, NULL, &err) == SC_USER);
        CHECK(err.pos == 15 && strstr(err.msg, "index 'j' has size 4") != NULL);
    }
    sc_arena_release(&arena);
}

/* An allocator that fails from the nth allocation on. */
static int alloc_left;

static void *failing_alloc(void *user, size_t n)
{
    (void)user;
    if (alloc_left <= 0)
        return NULL;
    alloc_left--;
    return malloc(n);
}

static void failing_free(void *user, void *p)
{
    (void)user;
    free(p);
}

static void test_nomem(void)
{
    sc_ctx bad;
    sc_ctx_init(&bad);
    bad.mem.alloc = failing_alloc;
    bad.mem.free = failing_free;

    /* Big enough to need several arena blocks and table growth. */
    static char text[8192];
    strcpy(text, "y(i) = x0(i)");
    for (int k = 1; k < 300; k++) {
        char term[32];
        snprintf(term, sizeof term, " + v%d(i) * w(j%d)", k, k % 40);
        strcat(text, term);
    }
    const int32_t o22[] = {2, 2};

    int ok_at = -1;
    for (int n = 0; n < 100 && ok_at < 0; n++) {
        sc_arena arena;
        sc_arena_init(&arena, &bad);
        sc_error err;
        sc_expr e;
        alloc_left = n;
        sc_status st = sc_expr_parse_index(&arena, text, &e, &err);
        if (st == SC_OK)
            ok_at = n;
        else
            CHECK(st == SC_NOMEM && err.kind == SC_NOMEM);
        sc_arena_release(&arena);
    }
    CHECK(ok_at > 1);

    sc_arena arena;
    sc_arena_init(&arena, &bad);
    sc_error err;
    sc_expr e;
    alloc_left = 0;
    CHECK(sc_expr_parse_einsum(&arena, "ij,jk->ik", 2, o22, &e, &err) == SC_NOMEM);
    sc_arena_release(&arena);
}

int main(void)
{
    sc_ctx_init(&ctx);
    test_einsum();
    test_einsum_errors();
    test_index();
    test_index_errors();
    test_literals();
    test_builder();
    test_bind();
    test_nomem();
    return check_report("test_expr");
}
