/*
 * sc_expr.h — the expr stage: einsum strings and index notation parsed into one
 * index-notation assignment  out(vars) = rhs.
 *
 * In:  "ij,jk->ik" plus the order of each operand, or "C(i,k) = A(i,j) * B(j,k)".
 * Out: an sc_expr: a table of index variables, a table of operand tensors, the output
 *      tensor, and an immutable tree of nodes for the right-hand side.
 *
 * Memory: everything an sc_expr points to (names, nodes, tables, the source copy) lives
 * in the caller's arena and is freed by sc_arena_release; the sc_expr struct itself is
 * the caller's.  Nothing here is ever freed piecemeal.
 *
 * Ids: index variables and operands are small integers (0, 1, ...) numbered in order of
 * first appearance in the text.  Nodes are built only through the checking constructors
 * below and never change afterwards.  Every node keeps the 0-based column it came from
 * (-1 when built in code); user errors set err->pos to the offending column.
 */
#ifndef SC_EXPR_H
#define SC_EXPR_H

#include "../base/sc_base.h"

/* Node kinds: X(ENUM, name, operator symbol, precedence for printing). */
#define SC_EXPR_KINDS(X)              \
    X(ACCESS, "access", "", 4)        \
    X(LITERAL, "literal", "", 4)      \
    X(NEG, "neg", "-", 3)             \
    X(MUL, "mul", "*", 2)             \
    X(ADD, "add", "+", 1)             \
    X(SUB, "sub", "-", 1)

typedef enum {
#define SC_X_(e, name, sym, prec) SC_EXPR_##e,
    SC_EXPR_KINDS(SC_X_)
#undef SC_X_
    SC_EXPR_KIND_COUNT
} sc_expr_kind;

/* Id of an index variable: an index into sc_expr.vars. */
typedef int32_t sc_expr_var;

/* The operand id an ACCESS node uses for the output tensor (the left-hand side). */
#define SC_EXPR_OUTPUT (-1)

/* Deepest node tree (and parenthesis nesting) accepted; deeper input is a USER error. */
#define SC_EXPR_MAX_DEPTH 512

/*
 * One node.  Which fields mean something depends on kind:
 *   ACCESS   operand(idx[0], ..., idx[order-1]); operand is an id into sc_expr.operands
 *            or SC_EXPR_OUTPUT; idx_pos[k] is the column of index k (or -1)
 *   LITERAL  an integer, exactly: ival (integer set), or a float: value (finite)
 *   NEG      -a
 *   ADD/SUB/MUL  a op b
 * Fields a kind does not use are 0 / NULL.  pos is the column of the tensor name, the
 * number, the unary '-' or the binary operator (for einsum's products: the ',').
 */
typedef struct sc_expr_node sc_expr_node;
struct sc_expr_node {
    sc_expr_kind kind;
    int32_t pos;
    int32_t depth; /* 1 for leaves */
    int32_t operand;
    int32_t order;
    sc_expr_var idx[SC_MAX_ORDER];
    int32_t idx_pos[SC_MAX_ORDER];
    bool integer;  /* LITERAL: written without '.' or exponent */
    int64_t ival;  /* LITERAL with integer */
    double value;  /* LITERAL without integer */
    const sc_expr_node *a, *b;
};

typedef struct sc_expr_var_info {
    const char *name; /* "i", "j2"; einsum: one letter */
    int32_t pos;      /* column of first appearance, or -1 */
} sc_expr_var_info;

/*
 * A tensor: an operand of the right-hand side, or the output.  accesses lists the
 * ACCESS nodes that read it, left to right (filled by sc_expr_finish; for the output it
 * is the left-hand side).  Einsum operands are named A, B, C, ... (T26, T27, ... past
 * the 26th) and the einsum output "out".
 */
typedef struct sc_expr_tensor {
    const char *name;
    int32_t order;
    int32_t pos; /* column of first appearance, or -1 */
    int32_t naccesses;
    const sc_expr_node *const *accesses;
} sc_expr_tensor;

/*
 * The assignment  out(lhs->idx) = rhs.  Reduction variables (on the right but not on the
 * left) are summed over the whole right-hand side, as in einsum and TACO.  Read the
 * public fields freely; change them only through the functions below.
 */
typedef struct sc_expr {
    const char *source; /* arena copy of the parsed text, or NULL when built in code */
    int32_t nvars;
    sc_expr_var_info *vars;
    int32_t noperands;
    sc_expr_tensor *operands; /* operand id = index; einsum: position in the argument list */
    sc_expr_tensor out;       /* out.name == NULL until sc_expr_set_output */
    const sc_expr_node *lhs;  /* ACCESS with operand SC_EXPR_OUTPUT; set by sc_expr_finish */
    const sc_expr_node *rhs;
    /* private to the builder */
    sc_arena *arena;
    int32_t vars_cap, operands_cap;
} sc_expr;

/* ---- Parsers ---------------------------------------------------------------------- */

/*
 * Parse an einsum equation for noperands operands whose orders are orders[0..noperands).
 * Accepted: letters (case-sensitive) as subscripts, ',' between operands, an optional
 * "->" followed by the output subscripts, spaces anywhere.  Without "->" the output is
 * every subscript that occurs exactly once, in ASCII order (torch.einsum's rule).  A
 * subscript repeated within one operand ("ii->i", "ii->") is allowed; the right-hand side
 * is the product of all operands.  Errors: USER for a bad character, a count of terms
 * different from noperands, a term whose length is not its operand's order, an output
 * subscript repeated or absent from the inputs; UNSUPPORTED for "..." and for orders
 * above SC_MAX_ORDER.  out is initialised here; its memory comes from arena.
 */
sc_status sc_expr_parse_einsum(sc_arena *arena, const char *equation, int32_t noperands,
                               const int32_t *orders, sc_expr *out, sc_error *err);

/*
 * Parse index notation:  out = expr  where out is  name  or  name()  (a scalar) or
 * name(i, j, ...),  and expr is built from accesses  name(i, ...)  (or a bare name for a
 * scalar tensor), numbers (123, 1.5, .5, 2e-3), + - * with the usual precedence (left
 * associative), unary minus and parentheses.  A number without '.' or exponent is an
 * int64 literal, kept exactly; "-9223372036854775808" (a unary minus right before 2^63)
 * is the one literal INT64_MIN, and any other integer past INT64_MAX is a USER error.  Names are [A-Za-z_][A-Za-z0-9_]*; tensors
 * and index variables have separate namespaces.  Operands are numbered by first
 * appearance on the right-hand side.  Errors (USER, err->pos at the column): syntax;
 * a tensor used with two different orders; the output tensor on the right-hand side;
 * an output index repeated or absent from the right-hand side.  UNSUPPORTED for more than
 * SC_MAX_ORDER indices.  out is initialised here; its memory comes from arena.
 */
sc_status sc_expr_parse_index(sc_arena *arena, const char *text, sc_expr *out,
                              sc_error *err);

/* ---- Queries ---------------------------------------------------------------------- */

/*
 * Write the canonical text of e into buf (at most n bytes including the NUL; nothing is
 * written when n == 0), e.g. "C(i,k) = A(i,j) * B(j,k) + 2 * D(i,k)".  Parentheses only
 * where the tree needs them; scalars print without "()"; integer literals exactly, float
 * literals in the shortest form that reads back to the same double, with a '.' or an
 * exponent (2.0, not 2), so that the text parses back to the same tree.  Returns the length of the whole text (excluding
 * the NUL), as snprintf does: a result >= n means buf was too small.  An unfinished e
 * prints as "".
 */
size_t sc_expr_print(const sc_expr *e, char *buf, size_t n);

/* The same for one node of e (names come from e's tables). */
size_t sc_expr_print_node(const sc_expr *e, const sc_expr_node *node, char *buf, size_t n);

/*
 * The reduction variables of a finished e (on the right-hand side, not in the output),
 * in increasing id order.  Writes min(count, cap) ids into out and returns count.
 */
int32_t sc_expr_reduction_vars(const sc_expr *e, sc_expr_var *out, int32_t cap);

/* Whether v indexes the output of a finished e. */
bool sc_expr_var_in_output(const sc_expr *e, sc_expr_var v);

/* Id of the operand / index variable called name, or -1. */
int32_t sc_expr_find_operand(const sc_expr *e, const char *name);
sc_expr_var sc_expr_find_var(const sc_expr *e, const char *name);

/* "access", "mul", ... */
const char *sc_expr_kind_name(sc_expr_kind k);

/*
 * Bind shapes: dims[k] points at the operand k's sizes (operands[k].order of them).
 * Fills extents[v] for every index variable v (nvars entries).  A repeated index within
 * one access must have equal sizes.  Across accesses sizes must be equal, except that
 * with broadcast a size of 1 stretches to the other size (torch.einsum's rule); then
 * bit d of bcast[k] is set when dimension d of operand k is such a stretched size 1.
 * bcast may be NULL; when given it has noperands entries, all written.  USER error
 * naming the index variable, both operands, both dimensions and both sizes, with
 * err->pos at the index in the second access; USER error for a negative size.
 */
sc_status sc_expr_bind_dims(const sc_expr *e, const int64_t *const *dims, bool broadcast,
                            int64_t *extents, uint32_t *bcast, sc_error *err);

/* ---- Building an expression (what the parsers use; also for tests and lowering) ---- */

/* Start an empty expression whose memory comes from arena. */
void sc_expr_init(sc_expr *e, sc_arena *arena);

/* Id of the index variable name[0..len), added if new with pos as its first column. */
sc_status sc_expr_intern_var(sc_expr *e, const char *name, size_t len, int32_t pos,
                             sc_expr_var *id, sc_error *err);

/*
 * Id of the operand name[0..len), added if new.  USER error at pos when name is the
 * output's or when the operand exists with another order; UNSUPPORTED when order >
 * SC_MAX_ORDER.
 */
sc_status sc_expr_intern_operand(sc_expr *e, const char *name, size_t len, int32_t order,
                                 int32_t pos, int32_t *id, sc_error *err);

/* Declare the output tensor (once, before any operand).  Errors as for operands. */
sc_status sc_expr_set_output(sc_expr *e, const char *name, size_t len, int32_t order,
                             int32_t pos, sc_error *err);

/*
 * Node constructors: each checks its arguments (ids in range, order equal to the
 * tensor's, finite literal, kind a binary operator, depth <= SC_EXPR_MAX_DEPTH) and
 * stores a new immutable node from e's arena in *out.  idx_pos may be NULL (no columns).
 */
sc_status sc_expr_access(sc_expr *e, int32_t operand, const sc_expr_var *idx,
                         const int32_t *idx_pos, int32_t pos, const sc_expr_node **out,
                         sc_error *err);
sc_status sc_expr_literal(sc_expr *e, double value, int32_t pos, const sc_expr_node **out,
                          sc_error *err);
/* An integer literal: value is kept exactly (lowering converts it to the kernel's dtype). */
sc_status sc_expr_int_literal(sc_expr *e, int64_t value, int32_t pos,
                              const sc_expr_node **out, sc_error *err);
sc_status sc_expr_neg(sc_expr *e, const sc_expr_node *a, int32_t pos,
                      const sc_expr_node **out, sc_error *err);
sc_status sc_expr_binary(sc_expr *e, sc_expr_kind kind, const sc_expr_node *a,
                         const sc_expr_node *b, int32_t pos, const sc_expr_node **out,
                         sc_error *err);

/*
 * Complete e with lhs (an ACCESS of SC_EXPR_OUTPUT) and rhs: check the assignment
 * (sc_expr_check) and fill every tensor's accesses.  e is immutable afterwards.
 */
sc_status sc_expr_finish(sc_expr *e, const sc_expr_node *lhs, const sc_expr_node *rhs,
                         sc_error *err);

/*
 * The rules of a well-formed assignment, with lhs/rhs given: the output indices are
 * distinct and each appears on the right-hand side.  USER error at the offending output
 * index otherwise.
 */
sc_status sc_expr_check(const sc_expr *e, const sc_expr_node *lhs, const sc_expr_node *rhs,
                        sc_error *err);

#endif /* SC_EXPR_H */
