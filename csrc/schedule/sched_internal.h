/*
 * sched_internal.h — what the schedule stage's files share and nobody else uses.
 */
#ifndef SC_SCHED_INTERNAL_H
#define SC_SCHED_INTERNAL_H

#include "sc_sched.h"

/* Analyse a loop order for p: operands to transpose (s->transpose, s->tfmt) and the
 * workspace depth (s->ws_depth).  USER error (err may be NULL) when the order cannot
 * serve p's sparse output or reads one operand in two incompatible orders. */
sc_status sc_sched_analyse(const sc_lower_problem *p, const sc_expr_var *order, sc_sched *s,
                           sc_error *err);

/* p0 as s's order reads it: a copy in *p whose operands (in ops) have the formats s
 * transposes them to, their accesses' level variables following. */
enum { SC_SCHED_MAX_OPS = 64 }; /* operands a problem has at most (sc_lower_prepare) */
void sc_sched_transposed(const sc_lower_problem *p0, const sc_sched *s, sc_lower_problem *p,
                         sc_lower_operand ops[SC_SCHED_MAX_OPS]);

/* Whether s->parallel (an index) may be the parallel loop of s's order for p, with the
 * operands s transposes in their new formats; why (n bytes) says why not. */
bool sc_sched_parallel_ok(const sc_lower_problem *p, const sc_sched *s, char *why, size_t n);

/* Where s's outermost loop (s->parallel) cannot be parallel only because it walks an
 * operand's compressed level with repeated coordinates (COO's rows) and the caller keeps
 * converted copies (p->convert_once): that operand marked for conversion to the same
 * levels with unique coordinates (COO to DCSR, third-order COO to CSF: duplicates
 * summed, which is what they mean) in s, true.  False, s unchanged, otherwise.  Only the
 * automatic parallel loop does this: a parallel(...) the caller writes is checked as
 * asked.  (Without convert_once the conversion would run before every run, costing
 * about what the parallel loop saves.) */
bool sc_sched_made_unique(const sc_lower_problem *p, sc_sched *s);

/* The cost of copying a dense operand into another level order, per entry (a strided
 * read and a write), in the cost model's loop iterations. */
#define SC_SCHED_DENSE_COPY 1.0

/* Dense operands laid out again for s's order: one that the innermost loop, a dense
 * one, reads along a level other than its last (a non-unit stride per iteration) is
 * marked for conversion to the dense format whose levels follow the loop order
 * (s->transpose, s->tfmt), where copying it (every entry once) costs less than that
 * loop's iterations: A B^T with a dense B becomes a SpMM over B^T.  Operands read by two
 * accesses, broadcast, or with a dimension of size 1 keep their layout. */
void sc_sched_relayout(const sc_lower_problem *p, sc_sched *s);

/* Whether the innermost loop of s's order runs over a dense range (no sparse operand's
 * stored coordinates thin it, in the formats s transposes them to): only there does a
 * unit stride make vectors. */
bool sc_sched_inner_dense(const sc_lower_problem *p, const sc_sched *s);

/* Estimated iterations of the innermost loop of order (the cost model's count). */
double sc_sched_inner_count(const sc_lower_problem *p, const sc_expr_var *order);

#endif
