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

#endif
