/*
 * sc_lower.h — the lower stage: from a parsed assignment plus operand formats to the
 * problem the scheduler and the loop builder work on, merge lattices, output-format
 * inference, and the loop nest itself (loop IR).
 *
 * In:  an sc_expr (csrc/expr), operand descriptions (format, dims, dtype, index width,
 *      stored-entry counts), an optional output format, and later a schedule.
 * Out: an sc_lower_problem (arena), lattices for unit tests and the scheduler, and the
 *      kernel as an sc_ir_func (arena).
 *
 * Terms: an access is one ACCESS node of the right-hand side; a sparse operand has at
 * least one compressed or singleton level; at loop variable v a sparse level indexed by
 * v is an iterator (co-iterated: ∩ for products, ∪ for sums) and a dense level a locator.
 */
#ifndef SC_LOWER_H
#define SC_LOWER_H

#include "../base/sc_base.h"
#include "../expr/sc_expr.h"
#include "../ir/sc_ir.h"

/* Most index variables and accesses one kernel may have. */
#define SC_LOWER_MAX_VARS 16
#define SC_LOWER_MAX_ACCESSES 32
/* Most iterators co-iterated at one loop (2^n lattice candidates). */
#define SC_LOWER_MAX_ITERS 6

/* Lowering expression kinds: X(ENUM, name). */
#define SC_LOWER_NODE_KINDS(X) \
    X(ACCESS, "access")        \
    X(LIT, "lit")              \
    X(NEG, "neg")              \
    X(MUL, "mul")              \
    X(ADD, "add")              \
    X(SUB, "sub")

typedef enum {
#define SC_X_(e, n) SC_LN_##e,
    SC_LOWER_NODE_KINDS(SC_X_)
#undef SC_X_
    SC_LN_KIND_COUNT
} sc_lower_node_kind;

/* Immutable expression node; NULL stands for the constant zero.  A LIT is the literal
 * converted to the problem's dtype as torch converts a Python scalar: value for float32
 * (rounded to float once, from the integer itself) and float64, ival for int32 (an
 * integer literal wrapped, two's complement) and int64; the other field is 0. */
typedef struct sc_lower_node sc_lower_node;
struct sc_lower_node {
    sc_lower_node_kind kind;
    int32_t access; /* ACCESS */
    int64_t ival;   /* LIT of an integer dtype */
    double value;   /* LIT of a float dtype */
    const sc_lower_node *a, *b;
};

typedef struct sc_lower_operand {
    sc_format fmt;
    int64_t dims[SC_MAX_ORDER];
    sc_index_type itype;
    int64_t nnz;  /* stored entries (nvals), for the cost model */
    bool sparse;  /* some level is compressed or singleton */
} sc_lower_operand;

typedef struct sc_lower_access {
    int32_t operand;
    int32_t order;
    sc_expr_var var[SC_MAX_ORDER];  /* per dimension */
    sc_expr_var lvar[SC_MAX_ORDER]; /* per level: var[fmt.lvl2dim[k]] */
    int32_t pos;                    /* source column */
} sc_lower_access;

typedef struct sc_lower_problem {
    const sc_expr *e;
    int32_t nvars;
    int64_t extent[SC_LOWER_MAX_VARS];
    int32_t nops;
    sc_lower_operand *ops; /* arena */
    uint32_t bcast[64];    /* per operand: dims stretched from size 1 */
    int32_t naccess;
    sc_lower_access acc[SC_LOWER_MAX_ACCESSES];
    const sc_lower_node *rhs;
    sc_dtype dtype;
    /* output: filled by sc_lower_set_output */
    int32_t out_order;
    sc_expr_var out_var[SC_MAX_ORDER];  /* per dimension */
    sc_expr_var out_lvar[SC_MAX_ORDER]; /* per level */
    sc_format out_fmt;
    int64_t out_dims[SC_MAX_ORDER];
    sc_index_type out_itype;
    bool out_sparse;
    /* extents the kernel is written for (0: read at run time): sc_lower_fix_extents */
    int64_t fixed[SC_LOWER_MAX_VARS];
    /* the caller converts an operand the schedule transposes once and keeps the copy (the
     * Python layer does): the cost model charges that conversion as a tenth of a pass, not
     * a sort per run, where it buys a parallel loop */
    bool convert_once;
} sc_lower_problem;

/*
 * Build the problem for e over operand descriptions ops[0..nops) (only fmt, dims, dtype,
 * index_type, nvals are read).  Checks: operand count and orders, one value dtype (USER),
 * a float literal with an integer dtype that is not an integer of the dtype's range
 * (USER, at its column), shapes (USER naming the index, the operands and the sizes),
 * formats (sc_fmt_check), sparse operands with a repeated index or a broadcast dimension
 * (UNSUPPORTED).  The output is not set yet.  Memory: arena.
 */
sc_status sc_lower_prepare(sc_arena *arena, const sc_expr *e, int32_t nops,
                           const sc_tensor *ops, sc_lower_problem *p, sc_error *err);

/*
 * Infer the output format of p (see infer.c for the rules) into *out.  Pure function of
 * the problem's expression and operand formats.
 */
void sc_lower_infer_format(const sc_lower_problem *p, sc_format *out);

/*
 * Set the output: format fmt (NULL: inferred) checked against the output order, dims
 * from the extents, index width = the widest operand width.  UNSUPPORTED for sparse
 * output formats the loop builder cannot assemble (a dense level below a sparse one,
 * non-unique levels other than a COO tail).
 */
sc_status sc_lower_set_output(sc_lower_problem *p, const sc_format *fmt, sc_error *err);

/* Set p->fixed: a variable that only dense operands read (at least one), of extent 1 to
 * SC_LOWER_FIXED_MAX, is fixed (the kernel is written for that extent: SDDMM's and
 * SpMM's K, dot products and register tiles of constant trip counts; it runs only for
 * it), an output variable only where outer (the outermost loop's variable) is one too:
 * in a scatter (A.t() @ H, A's stored columns outermost) a fixed K made the products
 * 1.7-2.2x slower (the GCN demo's backward on Cora: At @ H16 61-67 -> 108-110 us,
 * Xt @ H16 142-165 -> 316-327).  Without this call nothing is fixed. */
#define SC_LOWER_FIXED_MAX 64
void sc_lower_fix_extents(sc_lower_problem *p, sc_expr_var outer);

/* The access whose operand's pattern a sparse output has at every level (-1: none): the
 * expression a product in which that operand is the one sparse factor, read with the
 * output's indices level by level, with the output's level kinds, uniqueness and index
 * width, not broadcast.  Every stored entry of it then gives the output entry at the
 * same position: a kernel without a workspace shares its pos and crd arrays and writes
 * each value at the entry's own position, in any order (in parallel over a compressed
 * first level: a DCSR SDDMM). */
int32_t sc_lower_whole_pattern(const sc_lower_problem *p);

/* Replace the formats of the operands whose bit is set in mask by fmts[t] (their
 * transposed form, chosen by the schedule). */
void sc_lower_replace_formats(sc_lower_problem *p, uint32_t mask, const sc_format *fmts);

/* ---- Expression and lattice queries (used by the scheduler and unit tests) ---- */

/* Node with every access in zero_mask replaced by zero and simplified (0*x = 0,
 * 0+x = x, x-0 = x, 0-x = -x); NULL when the whole expression is zero.  Returns n itself
 * when nothing changed.  New nodes come from arena (NULL arena: only decide zero-ness,
 * returning n or NULL). */
const sc_lower_node *sc_lower_specialize(sc_arena *arena, const sc_lower_node *n,
                                         uint64_t zero_mask, sc_error *err);
/* Mask of the accesses present in n. */
uint64_t sc_lower_node_accesses(const sc_lower_node *n);
/* The product node a * b from arena (NULL with err on NOMEM). */
const sc_lower_node *sc_lower_mul(sc_arena *arena, const sc_lower_node *a,
                                  const sc_lower_node *b, sc_error *err);

/*
 * The merge lattice of expression n at variable v given, per access, how many levels
 * are already bound (nbound, naccess entries; NULL: as if v were the outermost loop).
 * iters[i] = access id of each sparse level iterated at v; points are bitmasks over
 * iters (bit i = iters[i] present), ordered by decreasing popcount, each a case whose
 * specialised expression is nonzero; universe = the expression is nonzero where no
 * iterator is present (the loop must cover the whole dimension).
 */
typedef struct sc_lower_lattice {
    int32_t niters;
    int32_t iters[SC_LOWER_MAX_ITERS];
    int32_t npoints;
    uint32_t points[1 << SC_LOWER_MAX_ITERS];
    bool universe;
} sc_lower_lattice;

sc_status sc_lower_lattice_at(const sc_lower_problem *p, const sc_lower_node *n,
                              sc_expr_var v, const int8_t *nbound, sc_lower_lattice *lat,
                              sc_error *err);

/* Text of a lattice, e.g. "{A,B} {A} {B}" or "U {A} {}" (operand names). */
void sc_lower_lattice_text(const sc_lower_problem *p, const sc_lower_lattice *lat, char *buf,
                           size_t n);

/* Print n with operand names ("A * (B + 2)") into buf (snprintf semantics). */
size_t sc_lower_node_text(const sc_lower_problem *p, const sc_lower_node *n, char *buf,
                          size_t cap);

struct sc_sched;

/*
 * Build the kernel of p under schedule s (already checked by sc_sched_check) as loop IR
 * named symbol.  fn and its nodes live in arena.  INTERNAL if the schedule breaks an
 * invariant the checker should have caught; UNSUPPORTED for constructs not handled.
 */
sc_status sc_lower_build(sc_arena *arena, const sc_lower_problem *p, const struct sc_sched *s,
                         const char *symbol, sc_ir_func *fn, sc_error *err);

#endif /* SC_LOWER_H */
