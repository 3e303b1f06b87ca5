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

#endif
