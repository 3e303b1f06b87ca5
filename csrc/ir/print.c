/*
 * print.c — the loop IR as indented pseudo-code, for SCORCH_DEBUG dumps and tests.
 *
 * The text is close to C but names the IR constructs (for, while, parallel, sort, alloc)
 * so a dump reads as the loop nest the lowering chose.  Output follows snprintf rules:
 * the return value is the length of the whole text even when buf is too small.
 */
#include "sc_ir.h"

#include <stdarg.h>
#include <stdio.h>

typedef struct sink {
    char *buf;
    size_t n, len;
} sink;

static void put(sink *s, const char *fmt, ...) SC_PRINTF(2, 3);
static void put(sink *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t room = s->len < s->n ? s->n - s->len : 0;
    int k = vsnprintf(room ? s->buf + s->len : NULL, room, fmt, ap);
    va_end(ap);
    if (k > 0)
        s->len += (size_t)k;
}

static void expr(sink *s, const sc_ir_func *fn, const sc_ir_expr *e)
{
    switch (e->kind) {
    case SC_IR_E_VAR:
        put(s, "%s", fn->vars[e->var].name);
        break;
    case SC_IR_E_INT:
        put(s, "%lld", (long long)e->ival);
        break;
    case SC_IR_E_FLT:
        if (sc_ir_is_int_value(e->type))
            put(s, "%lld", (long long)e->ival);
        else
            put(s, "%.17g", e->fval);
        break;
    case SC_IR_E_LOAD:
    case SC_IR_E_VLOAD:
        put(s, "%s[", fn->vars[e->var].name);
        expr(s, fn, e->a);
        if (e->kind == SC_IR_E_VLOAD && e->b) {
            put(s, " +%d lanes, first ", (int)e->lanes);
            expr(s, fn, e->b);
            put(s, "]");
        } else {
            put(s, e->kind == SC_IR_E_VLOAD ? " +%d lanes]" : "]", (int)e->lanes);
        }
        break;
    case SC_IR_E_VGATHER:
        put(s, "%s[", fn->vars[e->var].name);
        expr(s, fn, e->c);
        put(s, "[");
        expr(s, fn, e->a);
        put(s, " +%d lanes, first ", (int)e->lanes);
        expr(s, fn, e->b);
        put(s, "]]");
        break;
    case SC_IR_E_RUNSPLIT:
    case SC_IR_E_RUNEND:
    case SC_IR_E_ROWOF:
        if (e->kind == SC_IR_E_RUNSPLIT)
            put(s, "runsplit_%s(%s, ", e->ival ? "end" : "start", fn->vars[e->var].name);
        else
            put(s, "%s(%s, ", e->kind == SC_IR_E_RUNEND ? "runend" : "rowof", fn->vars[e->var].name);
        expr(s, fn, e->a);
        put(s, ", ");
        expr(s, fn, e->b);
        if (e->kind == SC_IR_E_ROWOF) {
            put(s, ", ");
            expr(s, fn, e->c);
        }
        put(s, ")");
        break;
    case SC_IR_E_HSUM:
        put(s, "hsum(");
        expr(s, fn, e->a);
        put(s, ")");
        break;
    case SC_IR_E_FOLD:
        put(s, "fold%d(", (int)e->ival);
        expr(s, fn, e->a);
        put(s, ", ");
        expr(s, fn, e->b);
        put(s, ")");
        break;
    case SC_IR_E_LANE:
        put(s, "lane%d(", (int)e->ival);
        expr(s, fn, e->a);
        put(s, ")");
        break;
    case SC_IR_E_SPLAT:
        put(s, "splat(");
        expr(s, fn, e->a);
        put(s, ")");
        break;
    case SC_IR_E_BIN:
        if (e->op == SC_IR_OP_MIN || e->op == SC_IR_OP_MAX) {
            put(s, "%s(", sc_ir_op_symbol(e->op));
            expr(s, fn, e->a);
            put(s, ", ");
            expr(s, fn, e->b);
            put(s, ")");
        } else {
            put(s, "(");
            expr(s, fn, e->a);
            put(s, " %s ", sc_ir_op_symbol(e->op));
            expr(s, fn, e->b);
            put(s, ")");
        }
        break;
    case SC_IR_E_NEG:
        put(s, "-");
        expr(s, fn, e->a);
        break;
    case SC_IR_E_NOT:
        put(s, "!");
        expr(s, fn, e->a);
        break;
    case SC_IR_E_CAST:
        put(s, "(%s)", sc_ir_type_name(e->type));
        expr(s, fn, e->a);
        break;
    case SC_IR_E_SELECT:
        put(s, "(");
        expr(s, fn, e->a);
        put(s, " ? ");
        expr(s, fn, e->b);
        put(s, " : ");
        expr(s, fn, e->c);
        put(s, ")");
        break;
    case SC_IR_E_ARG:
        if (e->arg == SC_IR_ARG_THREADS || e->arg == SC_IR_ARG_CACHE)
            put(s, "%s", sc_ir_arg_name(e->arg));
        else if (e->ival < 0)
            put(s, "out.%s[%d]", sc_ir_arg_name(e->arg), (int)e->level);
        else
            put(s, "op%d.%s[%d]", (int)e->ival, sc_ir_arg_name(e->arg), (int)e->level);
        break;
    case SC_IR_E_ALLOC:
        put(s, "alloc%s<%s>(", e->uninit ? "_uninit" : "", sc_ir_type_name(e->type));
        expr(s, fn, e->a);
        put(s, ")");
        break;
    case SC_IR_E_NONNULL:
        put(s, "nonnull(%s)", fn->vars[e->var].name);
        break;
    default:
        put(s, "?");
    }
}

static void stmt(sink *s, const sc_ir_func *fn, const sc_ir_stmt *st, int ind)
{
    if (st->kind == SC_IR_S_BLOCK) {
        for (int32_t i = 0; i < st->n; i++)
            stmt(s, fn, st->items[i], ind);
        return;
    }
    put(s, "%*s", 2 * ind, "");
    const sc_ir_var_info *v = st->var >= 0 && st->var < fn->nvars ? &fn->vars[st->var] : NULL;
    switch (st->kind) {
    case SC_IR_S_DECL:
        if (v->local_len > 0) {
            put(s, "%s %s[%d]\n", sc_ir_type_name(v->type), v->name, (int)v->local_len);
            break;
        }
        if (v->lanes > 0)
            put(s, "vector<%s x %d> ", sc_ir_type_name(v->type), (int)v->lanes);
        put(s, "%s%s %s = ", sc_ir_type_name(v->type), v->buffer ? "*" : "", v->name);
        expr(s, fn, st->a);
        put(s, "\n");
        break;
    case SC_IR_S_ASSIGN:
        put(s, "%s %s ", v->name, st->accumulate ? "+=" : "=");
        expr(s, fn, st->a);
        put(s, "\n");
        break;
    case SC_IR_S_STORE:
        put(s, "%s[", v->name);
        expr(s, fn, st->b);
        if (st->lanes)
            put(s, " +%d lanes", (int)st->lanes);
        if (st->lanes && st->c) {
            put(s, ", first ");
            expr(s, fn, st->c);
        }
        put(s, "] %s ", st->accumulate ? "+=" : "=");
        expr(s, fn, st->a);
        put(s, "\n");
        break;
    case SC_IR_S_FOR:
        put(s, "%sfor %s in [", st->par == SC_IR_PAR_FOR ? "parallel " : st->par == SC_IR_OMP_FOR ? "omp " : "", v->name);
        expr(s, fn, st->a);
        put(s, ", ");
        expr(s, fn, st->b);
        put(s, ")");
        if (!(st->c->kind == SC_IR_E_INT && st->c->ival == 1)) {
            put(s, " step ");
            expr(s, fn, st->c);
        }
        if (st->balanced)
            put(s, " balanced by %s", fn->vars[st->bal].name);
        else if (st->work) {
            put(s, " weighed ");
            expr(s, fn, st->work);
        }
        if (st->scalar)
            put(s, " scalar");
        put(s, ":\n");
        stmt(s, fn, st->body, ind + 1);
        if (st->orelse && st->run_min > 0) {
            put(s, "%*sruns of rows under %d entries %s .. %s:\n", 2 * ind, "", (int)st->run_min,
                v->name, fn->vars[st->run_end].name);
            stmt(s, fn, st->orelse, ind + 1);
        } else if (st->orelse) {
            put(s, "%*spairs %s, %s + 1 in ranges of rows averaging >= %d entries:\n", 2 * ind, "",
                v->name, v->name, (int)st->pair_min);
            stmt(s, fn, st->orelse, ind + 1);
        }
        break;
    case SC_IR_S_WHILE:
        put(s, "while ");
        expr(s, fn, st->a);
        put(s, ":\n");
        stmt(s, fn, st->body, ind + 1);
        break;
    case SC_IR_S_IF:
        put(s, "if ");
        expr(s, fn, st->a);
        put(s, ":\n");
        stmt(s, fn, st->body, ind + 1);
        if (st->orelse) {
            put(s, "%*selse:\n", 2 * ind, "");
            stmt(s, fn, st->orelse, ind + 1);
        }
        break;
    case SC_IR_S_PARALLEL:
        put(s, "parallel");
        if (st->a) {
            put(s, " if ");
            expr(s, fn, st->a);
        }
        put(s, ":\n");
        stmt(s, fn, st->body, ind + 1);
        break;
    case SC_IR_S_BARRIER_OR:
        put(s, "atomic %s = 1\n", v->name);
        break;
    case SC_IR_S_REQUIRE:
        put(s, "require ");
        expr(s, fn, st->a);
        put(s, " else %s \"%s\"\n", sc_status_name((sc_status)st->status), st->text);
        break;
    case SC_IR_S_FREE:
        put(s, "free %s\n", v->name);
        break;
    case SC_IR_S_SORT:
        put(s, "sort %s[0:", v->name);
        expr(s, fn, st->a);
        put(s, "]\n");
        break;
    case SC_IR_S_MARK:
        if (!st->body) {
            put(s, "%s = mark_new ", fn->vars[st->total].name);
            expr(s, fn, st->b);
            put(s, " in %s/%s\n", fn->vars[st->bits].name, fn->vars[st->summary].name);
            break;
        }
        put(s, "mark ");
        expr(s, fn, st->b);
        put(s, " in %s/%s:\n", fn->vars[st->bits].name, fn->vars[st->summary].name);
        stmt(s, fn, st->body, ind + 1);
        if (st->orelse) {
            put(s, "%*selse:\n", 2 * ind, "");
            stmt(s, fn, st->orelse, ind + 1);
        }
        break;
    case SC_IR_S_PREFETCH:
        put(s, "prefetch%s %s[", st->accumulate ? " for writing" : "", v->name);
        expr(s, fn, st->b);
        put(s, "]\n");
        break;
    case SC_IR_S_COLLECT:
        put(s, "collect%s %s[", st->level ? " sorted" : "", v->name);
        expr(s, fn, st->b);
        put(s, ":+");
        expr(s, fn, st->a);
        put(s, "] from %s/%s of ", fn->vars[st->bits].name, fn->vars[st->summary].name);
        expr(s, fn, st->c);
        put(s, "\n");
        break;
    case SC_IR_S_SORTSUM:
        put(s, "%s = sortsum %s/%s[", fn->vars[st->total].name, v->name, fn->vars[st->vals].name);
        expr(s, fn, st->b);
        put(s, "..%s)", fn->vars[st->total].name);
        if (st->level > 0)
            put(s, " at most %d", (int)st->level);
        put(s, "\n");
        break;
    case SC_IR_S_SCAN:
        put(s, "%s += scan %s[", fn->vars[st->total].name, v->name);
        expr(s, fn, st->b);
        put(s, ":] from %s[", fn->vars[st->bits].name);
        expr(s, fn, st->a);
        put(s, "..");
        expr(s, fn, st->c);
        put(s, "]\n");
        break;
    case SC_IR_S_OUT_SET:
        put(s, "out.%s%s[%d] = ", sc_ir_arg_name(st->field), st->status ? "_len" : "",
            (int)st->level);
        expr(s, fn, st->a);
        put(s, "\n");
        break;
    case SC_IR_S_COMMENT:
        put(s, "# %s\n", st->text);
        break;
    default:
        put(s, "?\n");
    }
}

size_t sc_ir_print(const sc_ir_func *fn, char *buf, size_t n)
{
    sink s = {buf, n, 0};
    if (n)
        buf[0] = '\0';
    put(&s, "kernel %s (%s):\n", fn->name ? fn->name : "?", sc_dtype_name(fn->dtype));
    if (fn->body)
        stmt(&s, fn, fn->body, 1);
    return s.len;
}
