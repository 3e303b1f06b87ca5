/*
 * verify.c — the IR verifier: scoping and typing rules codegen relies on.
 *
 * Walks the statement tree with the set of variables in scope: a variable is usable
 * after its DECL (or as a FOR variable inside the loop) until its block ends; owned
 * buffers are in scope everywhere (codegen declares them at the top).  Checks stores go
 * to writable buffers, loads read buffers, REQUIRE (which jumps to the failure path)
 * never sits inside a parallel region, and parallel regions do not nest.
 */
#include "sc_ir.h"

#include <string.h>

typedef struct vstate {
    const sc_ir_func *fn;
    uint8_t *live; /* per variable: 1 when in scope */
    sc_error *err;
    int par_depth;
} vstate;

static sc_status bad(vstate *v, const char *what, sc_ir_var id)
{
    const char *name = id >= 0 && id < v->fn->nvars ? v->fn->vars[id].name : "?";
    return sc_fail(v->err, SC_INTERNAL, "ir", "verifier: %s (%s)", what, name);
}

static sc_status use(vstate *v, sc_ir_var id)
{
    if (id < 0 || id >= v->fn->nvars)
        return bad(v, "variable id out of range", id);
    if (!v->live[id] && !v->fn->vars[id].owned)
        return bad(v, "variable used outside its scope", id);
    return SC_OK;
}

static sc_status expr(vstate *v, const sc_ir_expr *e)
{
    if (!e)
        return sc_fail(v->err, SC_INTERNAL, "ir", "verifier: missing expression");
    sc_status st = SC_OK;
    switch (e->kind) {
    case SC_IR_E_VAR:
    case SC_IR_E_NONNULL:
        return use(v, e->var);
    case SC_IR_E_LOAD:
    case SC_IR_E_VLOAD:
        if ((st = use(v, e->var)) != SC_OK)
            return st;
        if (!v->fn->vars[e->var].buffer)
            return bad(v, "load from a scalar", e->var);
        if (e->kind == SC_IR_E_VLOAD && e->b && (st = expr(v, e->b)) != SC_OK)
            return st;
        return expr(v, e->a);
    case SC_IR_E_BIN:
    case SC_IR_E_FOLD:
    case SC_IR_E_RUNSPLIT:
    case SC_IR_E_RUNEND:
        if ((e->kind == SC_IR_E_RUNSPLIT || e->kind == SC_IR_E_RUNEND) &&
            (st = use(v, e->var)) != SC_OK)
            return st;
        if ((st = expr(v, e->a)) != SC_OK)
            return st;
        return expr(v, e->b);
    case SC_IR_E_NEG:
    case SC_IR_E_NOT:
    case SC_IR_E_CAST:
    case SC_IR_E_ALLOC:
    case SC_IR_E_SPLAT:
    case SC_IR_E_HSUM:
    case SC_IR_E_LANE:
        return expr(v, e->a);
    case SC_IR_E_SELECT:
    case SC_IR_E_VGATHER:
    case SC_IR_E_ROWOF:
        if (e->kind != SC_IR_E_SELECT && (st = use(v, e->var)) != SC_OK)
            return st;
        if ((st = expr(v, e->a)) != SC_OK || (st = expr(v, e->b)) != SC_OK)
            return st;
        return expr(v, e->c);
    default:
        return SC_OK;
    }
}

static sc_status stmt(vstate *v, const sc_ir_stmt *s);

static sc_status scoped(vstate *v, const sc_ir_stmt *s)
{
    /* A body is its own scope: remember what was live and restore it afterwards. */
    size_t n = (size_t)v->fn->nvars;
    uint8_t saved[1024];
    uint8_t *copy = n <= sizeof saved ? saved : NULL;
    if (!copy)
        return sc_fail(v->err, SC_UNSUPPORTED, "ir", "verifier: more than %zu variables",
                       sizeof saved);
    memcpy(copy, v->live, n);
    sc_status st = stmt(v, s);
    memcpy(v->live, copy, n);
    return st;
}

static sc_status stmt(vstate *v, const sc_ir_stmt *s)
{
    if (!s)
        return sc_fail(v->err, SC_INTERNAL, "ir", "verifier: missing statement");
    sc_status st = SC_OK;
    switch (s->kind) {
    case SC_IR_S_BLOCK:
        for (int32_t i = 0; i < s->n && st == SC_OK; i++)
            st = stmt(v, s->items[i]);
        return st;
    case SC_IR_S_DECL:
        if (!s->a && v->fn->vars[s->var].local_len <= 0)
            return bad(v, "declaration without a value of a variable that is not a local array", s->var);
        if (s->a && (st = expr(v, s->a)) != SC_OK)
            return st;
        if (v->live[s->var])
            return bad(v, "variable declared twice in one scope", s->var);
        v->live[s->var] = 1;
        return SC_OK;
    case SC_IR_S_ASSIGN:
        if ((st = use(v, s->var)) != SC_OK)
            return st;
        if (v->fn->vars[s->var].readonly)
            return bad(v, "assignment to a read-only variable", s->var);
        return expr(v, s->a);
    case SC_IR_S_STORE:
        if ((st = use(v, s->var)) != SC_OK)
            return st;
        if (!v->fn->vars[s->var].buffer || v->fn->vars[s->var].readonly)
            return bad(v, "store into a read-only or scalar variable", s->var);
        if ((st = expr(v, s->b)) != SC_OK)
            return st;
        if (s->lanes && s->c && (st = expr(v, s->c)) != SC_OK)
            return st;
        return expr(v, s->a);
    case SC_IR_S_FOR: {
        if ((st = expr(v, s->a)) != SC_OK || (st = expr(v, s->b)) != SC_OK ||
            (st = expr(v, s->c)) != SC_OK)
            return st;
        if (s->balanced) {
            if ((st = use(v, s->bal)) != SC_OK)
                return st;
            if (!v->fn->vars[s->bal].buffer || !sc_ir_is_int(v->fn->vars[s->bal].type) ||
                s->par == SC_IR_SEQ)
                return bad(v, "balanced loop without a parallel loop over an integer pos buffer", s->bal);
        }
        if (s->work && !s->balanced && s->par != SC_IR_PAR_FOR)
            return bad(v, "loop work on a loop that is neither balanced nor a parallel for", s->var);
        if (s->work && (st = expr(v, s->work)) != SC_OK)
            return st;
        if (s->par == SC_IR_OMP_FOR && v->par_depth == 0)
            return bad(v, "omp for outside a parallel region", s->var);
        if (s->par == SC_IR_PAR_FOR && v->par_depth > 0)
            return bad(v, "nested parallel for", s->var);
        if (v->live[s->var])
            return bad(v, "loop variable already in scope", s->var);
        v->live[s->var] = 1;
        if (s->orelse && !s->balanced)
            return bad(v, "a pair body on a loop that is not balanced", s->var);
        bool runs = s->run_min > 0; /* the run body sees the end of its run */
        if (runs && v->live[s->run_end])
            return bad(v, "the end of a run already in scope", s->run_end);
        v->par_depth += s->par == SC_IR_PAR_FOR;
        st = scoped(v, s->body);
        if (st == SC_OK && s->orelse) {
            if (runs)
                v->live[s->run_end] = 1;
            st = scoped(v, s->orelse);
            if (runs)
                v->live[s->run_end] = 0;
        }
        v->par_depth -= s->par == SC_IR_PAR_FOR;
        v->live[s->var] = 0;
        return st;
    }
    case SC_IR_S_WHILE:
        if ((st = expr(v, s->a)) != SC_OK)
            return st;
        return scoped(v, s->body);
    case SC_IR_S_IF:
        if ((st = expr(v, s->a)) != SC_OK || (st = scoped(v, s->body)) != SC_OK)
            return st;
        return s->orelse ? scoped(v, s->orelse) : SC_OK;
    case SC_IR_S_PARALLEL:
        if (v->par_depth > 0)
            return sc_fail(v->err, SC_INTERNAL, "ir", "verifier: nested parallel region");
        if (s->a && (st = expr(v, s->a)) != SC_OK)
            return st;
        v->par_depth++;
        st = scoped(v, s->body);
        v->par_depth--;
        return st;
    case SC_IR_S_BARRIER_OR:
        return use(v, s->var);
    case SC_IR_S_REQUIRE:
        if (v->par_depth > 0)
            return sc_fail(v->err, SC_INTERNAL, "ir", "verifier: require inside a parallel region");
        return expr(v, s->a);
    case SC_IR_S_FREE:
        if (v->par_depth > 0 && v->fn->vars[s->var].owned)
            return bad(v, "free of a kernel-level buffer inside a parallel region", s->var);
        return use(v, s->var);
    case SC_IR_S_SORT:
        if ((st = use(v, s->var)) != SC_OK)
            return st;
        return expr(v, s->a);
    case SC_IR_S_MARK:
        if ((st = use(v, s->bits)) != SC_OK || (st = use(v, s->summary)) != SC_OK ||
            (st = expr(v, s->b)) != SC_OK)
            return st;
        if (!s->body)
            return use(v, s->total);
        if ((st = scoped(v, s->body)) != SC_OK)
            return st;
        return s->orelse ? scoped(v, s->orelse) : SC_OK;
    case SC_IR_S_PREFETCH:
        if ((st = use(v, s->var)) != SC_OK)
            return st;
        return expr(v, s->b);
    case SC_IR_S_COLLECT:
        if ((st = use(v, s->var)) != SC_OK || (st = use(v, s->bits)) != SC_OK ||
            (st = use(v, s->summary)) != SC_OK || (st = expr(v, s->b)) != SC_OK ||
            (st = expr(v, s->c)) != SC_OK)
            return st;
        return expr(v, s->a);
    case SC_IR_S_SORTSUM:
        if ((st = use(v, s->var)) != SC_OK || (st = use(v, s->vals)) != SC_OK ||
            (st = use(v, s->total)) != SC_OK)
            return st;
        return expr(v, s->b);
    case SC_IR_S_SCAN:
        if ((st = use(v, s->var)) != SC_OK || (st = use(v, s->bits)) != SC_OK ||
            (st = use(v, s->total)) != SC_OK || (st = expr(v, s->b)) != SC_OK ||
            (st = expr(v, s->a)) != SC_OK)
            return st;
        return expr(v, s->c);
    case SC_IR_S_OUT_SET:
        return expr(v, s->a);
    default:
        return SC_OK;
    }
}

sc_status sc_ir_verify(const sc_ir_func *fn, sc_error *err)
{
    if (!fn || !fn->body)
        return sc_fail(err, SC_INTERNAL, "ir", "verifier: empty function");
    if (!sc_ir_vec_bytes_ok(fn->vec_bytes))
        return sc_fail(err, SC_INTERNAL, "ir", "verifier: vectors of %d bytes", (int)fn->vec_bytes);
    uint8_t live[1024];
    if ((size_t)fn->nvars > sizeof live)
        return sc_fail(err, SC_UNSUPPORTED, "ir",
                       "kernel needs more than %zu variables (an expression that co-iterates "
                       "many reads of sparse operands: split it into several calls)",
                       sizeof live);
    memset(live, 0, sizeof live);
    vstate v = {fn, live, err, 0};
    return stmt(&v, fn->body);
}
