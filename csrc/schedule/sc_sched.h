/*
 * sc_sched.h — the schedule stage: a schedule is data, an ordered list of directives
 * with a text form, chosen automatically from shapes and nnz or forced by the caller.
 *
 * Text grammar (directives separated by spaces, each at most once, any order):
 *     schedule  := { directive }
 *     directive := "order(" var { "," var } ")"      loop order, outermost first
 *                | "parallel(" var | "none" ")"       OpenMP over the outermost loop
 *                | "workspace(" var { "," var } ")"   dense workspace for these output
 *                                                     indices (scattered accumulation)
 * In:  an sc_lower_problem (formats, extents, nnz, output).  Out: a checked sc_sched,
 * plus what checking derives: operands to transpose into a concordant format and the
 * depth where the workspace starts.
 */
#ifndef SC_SCHED_H
#define SC_SCHED_H

#include "../lower/sc_lower.h"

#define SC_SCHED_MAX_WS 8

/* Which dense operands sc_sched_relayout transposes to the loop order (each gives a
 * correct kernel; the driver asks for the others only to find a built-in kernel). */
typedef enum sc_sched_relayout_rule {
    SC_SCHED_RELAYOUT_SIZED, /* where the copy pays for itself at the problem's sizes */
    SC_SCHED_RELAYOUT_NONE,  /* none */
    SC_SCHED_RELAYOUT_ALL,   /* every one the innermost loop reads across, at any size */
} sc_sched_relayout_rule;

typedef struct sc_sched {
    int32_t norder; /* 0: no order directive */
    sc_expr_var order[SC_LOWER_MAX_VARS];
    bool has_parallel;
    sc_expr_var parallel; /* -1: none */
    bool has_workspace;
    int32_t nworkspace;
    sc_expr_var workspace[SC_SCHED_MAX_WS];
    /* derived by sc_sched_check */
    uint32_t transpose;             /* operands to convert before running */
    sc_format tfmt[32];             /* their concordant formats */
    int32_t ws_depth;               /* depth of the first reduction loop with output
                                       loops inside it (sparse output), or -1 */
    /* set by the caller: the vector width (bytes) the kernel is written for, 32 or 64;
     * 0 means SC_IR_VEC_BYTES */
    int32_t vec_bytes;
    /* set by the caller: the target's gathers are fast, so SpMV's rows read x through
     * 8-lane gathers (lower/build.c gathered_row) */
    bool gathers;
    /* set by the caller: which dense operands sc_sched_check relays out */
    sc_sched_relayout_rule relayout;
} sc_sched;

/* Parse text (NULL or "" gives an empty schedule) with variable names from e.  USER error
 * with err->pos at the offending column of the schedule text. */
sc_status sc_sched_parse(const sc_expr *e, const char *text, sc_sched *out, sc_error *err);

/* Text form of s ("order(i,k,j) parallel(i) workspace(j)"), snprintf semantics. */
size_t sc_sched_print(const sc_expr *e, const sc_sched *s, char *buf, size_t n);

/*
 * Check s against p and complete it: the order must name every index variable once;
 * each sparse operand whose levels the order visits out of level order is marked for
 * transposition (tfmt: its levels re-ordered to the loop order); a sparse output needs
 * its dense leading levels outermost and its levels visited in level order, and a
 * workspace(...) naming exactly the output indices nested inside a reduction loop;
 * parallel(v) needs v outermost, an output index, and a loop without co-iteration.
 * Missing parallel/workspace directives are filled in (parallel: none).  USER error
 * with the reason otherwise.
 */
sc_status sc_sched_check(const sc_lower_problem *p, sc_sched *s, sc_error *err);

/*
 * The automatic schedule: the loop order of least estimated cost (iterations of every
 * loop from the operands' densities, conversions of discordant sparse operands, dense
 * accesses with a non-unit stride in the innermost loop, workspace traffic), legal for
 * the output, then parallel over the outermost loop when legal and worthwhile.  Checked.
 */
sc_status sc_sched_auto(const sc_lower_problem *p, sc_sched *out, sc_error *err);

/* Estimated cost of the order in s (as sc_sched_auto sees it); +inf when illegal. */
double sc_sched_cost(const sc_lower_problem *p, const sc_expr_var *order);

/* A loop order and its estimated cost (sc_sched_rank). */
typedef struct sc_sched_ranked {
    double cost;
    sc_expr_var order[SC_LOWER_MAX_VARS];
} sc_sched_ranked;

/* Every legal loop order of p (of at most 7 indices: none beyond), cheapest first, as
 * sc_sched_auto weighs them: *out (ctx memory, the caller frees) holds *n of them. */
sc_status sc_sched_rank(const sc_lower_problem *p, const sc_ctx *ctx, sc_sched_ranked **out,
                        size_t *n, sc_error *err);

#endif /* SC_SCHED_H */
