/*
 * lower_internal.h — what the lower stage's files share and nobody else uses.
 */
#ifndef SC_LOWER_INTERNAL_H
#define SC_LOWER_INTERNAL_H

#include "sc_lower.h"

/* The lowering tree of expression node x, registering its accesses in p (arena). */
const sc_lower_node *sc_lower_from_expr(sc_arena *arena, sc_lower_problem *p,
                                        const sc_expr_node *x, sc_error *err);

#endif
