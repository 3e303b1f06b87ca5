/*
 * build.c — the checking constructors of the loop IR and the variable table.
 *
 * Every constructor checks its operands (non-NULL, ids in range, types that fit: integer
 * indices, buffer loads, float/int arithmetic of one kind) and returns a new immutable
 * node from the builder's arena.  The builder is sticky: the first failure is kept in
 * b->st / b->err and every later constructor returns NULL, so callers check once at the
 * end (sc_ir_finish).
 */
#include "sc_ir.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const type_names[] = {
#define SC_X_(e, c) c,
    SC_IR_TYPES(SC_X_)
#undef SC_X_
};
static const char *const op_syms[] = {
#define SC_X_(e, s, c) s,
    SC_IR_BINOPS(SC_X_)
#undef SC_X_
};
static const bool op_bool[] = {
#define SC_X_(e, s, c) c,
    SC_IR_BINOPS(SC_X_)
#undef SC_X_
};
static const char *const arg_names[] = {
#define SC_X_(e, n) n,
    SC_IR_ARGS(SC_X_)
#undef SC_X_
};

const char *sc_ir_type_name(sc_ir_type t)
{
    return (unsigned)t < SC_IR_TYPE_COUNT ? type_names[t] : "?";
}
const char *sc_ir_op_symbol(sc_ir_op op)
{
    return (unsigned)op < SC_IR_OP_COUNT ? op_syms[op] : "?";
}
const char *sc_ir_arg_name(sc_ir_arg a)
{
    return (unsigned)a < SC_IR_ARG_COUNT ? arg_names[a] : "?";
}

sc_ir_type sc_ir_val_type(sc_dtype dt)
{
    switch (dt) {
    case SC_DTYPE_F32: return SC_IR_F32;
    case SC_DTYPE_I32: return SC_IR_VI32;
    case SC_DTYPE_I64: return SC_IR_VI64;
    default: return SC_IR_F64;
    }
}
sc_ir_type sc_ir_idx_type(sc_index_type it)
{
    return it == SC_INDEX_I32 ? SC_IR_I32 : SC_IR_I64;
}
bool sc_ir_is_int(sc_ir_type t)
{
    return t == SC_IR_BOOL || t == SC_IR_U8 || t == SC_IR_I32 || t == SC_IR_I64 || t == SC_IR_U64;
}
bool sc_ir_is_value(sc_ir_type t)
{
    return t == SC_IR_F32 || t == SC_IR_F64 || sc_ir_is_int_value(t);
}
bool sc_ir_is_int_value(sc_ir_type t)
{
    return t == SC_IR_VI32 || t == SC_IR_VI64;
}

/* The type of an operation on values of types x and y: float32 with float64 is float64. */
static sc_ir_type value_join(sc_ir_type x, sc_ir_type y)
{
    if (x == y)
        return x;
    return x == SC_IR_F64 || y == SC_IR_F64 ? SC_IR_F64 : SC_IR_F32;
}

void sc_ir_builder_init(sc_ir_builder *b, sc_arena *arena, sc_ir_func *fn, const char *name,
                        sc_dtype dtype, sc_error *err)
{
    memset(fn, 0, sizeof *fn);
    fn->name = name;
    fn->dtype = dtype;
    fn->vec_bytes = SC_IR_VEC_BYTES;
    b->arena = arena;
    b->err = err;
    b->st = SC_OK;
    b->fn = fn;
}

sc_status sc_ir_fail(sc_ir_builder *b, sc_status kind, const char *fmt, ...)
{
    if (b->st != SC_OK)
        return b->st;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    b->st = sc_fail(b->err, kind, "ir", "%s", msg);
    return b->st;
}

static void *node(sc_ir_builder *b, size_t n)
{
    if (b->st != SC_OK)
        return NULL;
    void *p = sc_arena_alloc(b->arena, n, b->err);
    if (!p)
        b->st = SC_NOMEM;
    return p;
}

sc_ir_var sc_ir_new_var(sc_ir_builder *b, const char *name, sc_ir_type type, bool buffer,
                        bool readonly, bool owned)
{
    if (b->st != SC_OK)
        return -1;
    sc_ir_func *fn = b->fn;
    if (fn->nvars == fn->vars_cap) {
        int32_t cap = fn->vars_cap ? fn->vars_cap * 2 : 32;
        sc_ir_var_info *nv = node(b, (size_t)cap * sizeof *nv);
        if (!nv)
            return -1;
        if (fn->nvars)
            memcpy(nv, fn->vars, (size_t)fn->nvars * sizeof *nv);
        fn->vars = nv;
        fn->vars_cap = cap;
    }
    char tmp[96];
    snprintf(tmp, sizeof tmp, "%s_%d", name, (int)fn->nvars);
    char *s = sc_arena_strdup(b->arena, tmp, strlen(tmp), b->err);
    if (!s) {
        b->st = SC_NOMEM;
        return -1;
    }
    sc_ir_var id = fn->nvars++;
    fn->vars[id] = (sc_ir_var_info){s, type, buffer, readonly, owned, 0, 0};
    return id;
}

sc_ir_var sc_ir_new_local(sc_ir_builder *b, const char *name, sc_ir_type type, int32_t len)
{
    if (b->st != SC_OK)
        return -1;
    if (len <= 0 || len > SC_IR_LOCAL_MAX || type == SC_IR_VOID) {
        sc_ir_fail(b, SC_INTERNAL, "local array %s of %d elements", name, (int)len);
        return -1;
    }
    sc_ir_var v = sc_ir_new_var(b, name, type, true, false, false);
    if (v >= 0)
        b->fn->vars[v].local_len = len;
    return v;
}

bool sc_ir_vec_bytes_ok(int32_t bytes)
{
    return bytes == 32 || bytes == 64;
}

/* The bytes of a value of type t (a value type), else 0. */
static int32_t value_bytes(sc_ir_type t)
{
    return t == SC_IR_F32 || t == SC_IR_VI32 ? 4 : t == SC_IR_F64 || t == SC_IR_VI64 ? 8 : 0;
}

int32_t sc_ir_vec_lanes(const sc_ir_func *fn, sc_ir_type type)
{
    int32_t bytes = value_bytes(type);
    return bytes ? fn->vec_bytes / bytes : 0;
}

static bool lanes_ok(const sc_ir_func *fn, sc_ir_type type, int32_t lanes)
{
    int32_t w = sc_ir_vec_lanes(fn, type);
    return w && (lanes == w || lanes == w / 2 || lanes == w / 4);
}

sc_ir_var sc_ir_new_vector(sc_ir_builder *b, const char *name, sc_ir_type type, int32_t lanes)
{
    if (b->st != SC_OK)
        return -1;
    if (!lanes_ok(b->fn, type, lanes)) {
        sc_ir_fail(b, SC_INTERNAL, "vector %s of %s", name, sc_ir_type_name(type));
        return -1;
    }
    sc_ir_var v = sc_ir_new_var(b, name, type, false, false, false);
    if (v >= 0)
        b->fn->vars[v].lanes = lanes;
    return v;
}

static bool var_ok(sc_ir_builder *b, sc_ir_var v)
{
    if (b->st != SC_OK)
        return false;
    if (v < 0 || v >= b->fn->nvars) {
        sc_ir_fail(b, SC_INTERNAL, "variable id %d out of range", (int)v);
        return false;
    }
    return true;
}

static bool need(sc_ir_builder *b, const void *p, const char *what)
{
    if (b->st != SC_OK)
        return false;
    if (!p) {
        sc_ir_fail(b, SC_INTERNAL, "missing operand of %s", what);
        return false;
    }
    return true;
}

static bool scalar_int(sc_ir_builder *b, const sc_ir_expr *e, const char *what)
{
    if (!need(b, e, what))
        return false;
    if (e->buffer || !sc_ir_is_int(e->type)) {
        sc_ir_fail(b, SC_INTERNAL, "%s needs an integer scalar", what);
        return false;
    }
    return true;
}

const sc_ir_expr *sc_ir_var_ref(sc_ir_builder *b, sc_ir_var v)
{
    if (!var_ok(b, v))
        return NULL;
    sc_ir_expr *e = node(b, sizeof *e);
    if (!e)
        return NULL;
    e->kind = SC_IR_E_VAR;
    e->var = v;
    e->type = b->fn->vars[v].type;
    e->buffer = b->fn->vars[v].buffer;
    e->lanes = b->fn->vars[v].lanes;
    return e;
}

const sc_ir_expr *sc_ir_int(sc_ir_builder *b, int64_t v)
{
    sc_ir_expr *e = node(b, sizeof *e);
    if (!e)
        return NULL;
    e->kind = SC_IR_E_INT;
    e->type = SC_IR_I64;
    e->ival = v;
    return e;
}

const sc_ir_expr *sc_ir_flt(sc_ir_builder *b, double v, sc_ir_type t)
{
    if (sc_ir_is_int_value(t)) {
        if (b->st == SC_OK && !(v >= -0x1p63 && v < 0x1p63 && v == (double)(int64_t)v)) {
            sc_ir_fail(b, SC_INTERNAL, "constant %g of type %s", v, sc_ir_type_name(t));
            return NULL;
        }
        return sc_ir_int_value(b, b->st == SC_OK ? (int64_t)v : 0, t);
    }
    if (b->st == SC_OK && !sc_ir_is_value(t)) {
        sc_ir_fail(b, SC_INTERNAL, "float constant of type %s", sc_ir_type_name(t));
        return NULL;
    }
    sc_ir_expr *e = node(b, sizeof *e);
    if (!e)
        return NULL;
    e->kind = SC_IR_E_FLT;
    e->type = t;
    e->fval = v;
    return e;
}

const sc_ir_expr *sc_ir_int_value(sc_ir_builder *b, int64_t v, sc_ir_type t)
{
    if (b->st == SC_OK && (!sc_ir_is_int_value(t) ||
                           (t == SC_IR_VI32 && (v < INT32_MIN || v > INT32_MAX)))) {
        sc_ir_fail(b, SC_INTERNAL, "integer constant %lld of type %s", (long long)v,
                   sc_ir_type_name(t));
        return NULL;
    }
    sc_ir_expr *e = node(b, sizeof *e);
    if (!e)
        return NULL;
    e->kind = SC_IR_E_FLT;
    e->type = t;
    e->ival = v;
    return e;
}

/* buf is a buffer and idx an integer scalar (what: "load", "prefetch", ...). */
static bool element_of(sc_ir_builder *b, sc_ir_var buf, const sc_ir_expr *idx, const char *what)
{
    if (!var_ok(b, buf) || !scalar_int(b, idx, what))
        return false;
    if (!b->fn->vars[buf].buffer) {
        sc_ir_fail(b, SC_INTERNAL, "%s of an element of scalar %s", what, b->fn->vars[buf].name);
        return false;
    }
    return true;
}

const sc_ir_expr *sc_ir_load(sc_ir_builder *b, sc_ir_var buf, const sc_ir_expr *idx)
{
    if (!element_of(b, buf, idx, "load"))
        return NULL;
    sc_ir_expr *e = node(b, sizeof *e);
    if (!e)
        return NULL;
    e->kind = SC_IR_E_LOAD;
    e->var = buf;
    e->type = b->fn->vars[buf].type;
    e->a = idx;
    return e;
}

const sc_ir_expr *sc_ir_vload(sc_ir_builder *b, sc_ir_var buf, const sc_ir_expr *idx,
                              int32_t lanes)
{
    const sc_ir_expr *l = sc_ir_load(b, buf, idx);
    if (!l)
        return NULL;
    if (!lanes_ok(b->fn, l->type, lanes)) {
        sc_ir_fail(b, SC_INTERNAL, "vector load from %s", b->fn->vars[buf].name);
        return NULL;
    }
    sc_ir_expr *e = (sc_ir_expr *)l;
    e->kind = SC_IR_E_VLOAD;
    e->lanes = lanes;
    return e;
}

const sc_ir_expr *sc_ir_vload_n(sc_ir_builder *b, sc_ir_var buf, const sc_ir_expr *idx,
                                const sc_ir_expr *count, int32_t lanes)
{
    if (!scalar_int(b, count, "vector load count"))
        return NULL;
    const sc_ir_expr *l = sc_ir_vload(b, buf, idx, lanes);
    if (l)
        ((sc_ir_expr *)l)->b = count;
    return l;
}

const sc_ir_expr *sc_ir_vgather_n(sc_ir_builder *b, sc_ir_var buf, sc_ir_var crd,
                                  const sc_ir_expr *idx, const sc_ir_expr *count, int32_t lanes)
{
    if (!element_of(b, crd, idx, "gather") || !scalar_int(b, count, "gather count") ||
        !var_ok(b, buf))
        return NULL;
    const sc_ir_var_info *c = &b->fn->vars[crd], *x = &b->fn->vars[buf];
    int32_t full = sc_ir_vec_lanes(b->fn, x->type);
    bool f64x8 = value_bytes(x->type) == 8 && full == 8 && lanes == 8;
    if (c->type != SC_IR_I32 || !c->readonly || !x->buffer || !sc_ir_is_value(x->type) ||
        !full || (lanes != full / 2 && lanes != full / 4 && !f64x8)) {
        sc_ir_fail(b, SC_INTERNAL, "gather of %d lanes from %s at %s", (int)lanes, x->name, c->name);
        return NULL;
    }
    sc_ir_expr *e = node(b, sizeof *e);
    if (!e)
        return NULL;
    e->kind = SC_IR_E_VGATHER;
    e->var = buf;
    e->type = x->type;
    e->lanes = lanes;
    e->a = idx;
    e->b = count;
    e->c = sc_ir_var_ref(b, crd);
    return e->c ? e : NULL;
}

const sc_ir_expr *sc_ir_splat(sc_ir_builder *b, const sc_ir_expr *x, int32_t lanes)
{
    if (!need(b, x, "splat"))
        return NULL;
    if (x->buffer || x->lanes || !lanes_ok(b->fn, x->type, lanes)) {
        sc_ir_fail(b, SC_INTERNAL, "splat of a %s", x->lanes ? "vector" : sc_ir_type_name(x->type));
        return NULL;
    }
    sc_ir_expr *e = node(b, sizeof *e);
    if (!e)
        return NULL;
    e->kind = SC_IR_E_SPLAT;
    e->type = x->type;
    e->lanes = lanes;
    e->a = x;
    return e;
}

const sc_ir_expr *sc_ir_hsum(sc_ir_builder *b, const sc_ir_expr *x)
{
    if (!need(b, x, "hsum"))
        return NULL;
    if (!x->lanes) {
        sc_ir_fail(b, SC_INTERNAL, "lane sum of a scalar");
        return NULL;
    }
    sc_ir_expr *e = node(b, sizeof *e);
    if (!e)
        return NULL;
    e->kind = SC_IR_E_HSUM;
    e->type = x->type;
    e->a = x;
    return e;
}

const sc_ir_expr *sc_ir_fold(sc_ir_builder *b, const sc_ir_expr *x, const sc_ir_expr *y,
                             int32_t w)
{
    if (!need(b, x, "fold") || !need(b, y, "fold"))
        return NULL;
    int32_t full = sc_ir_vec_lanes(b->fn, x->type);
    if (x->lanes != full || y->lanes != full || y->type != x->type || w < 0 || w >= full ||
        (w & (w - 1)) != 0 || (w == 0 && x != y)) {
        sc_ir_fail(b, SC_INTERNAL, "fold of partial or mixed vectors, or block width %d", (int)w);
        return NULL;
    }
    sc_ir_expr *e = node(b, sizeof *e);
    if (!e)
        return NULL;
    e->kind = SC_IR_E_FOLD;
    e->type = x->type;
    e->lanes = full;
    e->ival = w;
    e->a = x;
    e->b = y;
    return e;
}

int32_t sc_ir_fold_src(const sc_ir_func *fn, sc_ir_type type, int32_t w, int32_t half, int32_t l)
{
    int32_t W = sc_ir_vec_lanes(fn, type), seg = 16 / value_bytes(type);
    if (w == 0)
        return 2 * (l % (W / 2)) + half;
    int32_t base = 0, span = W; /* the lanes the block is placed among: a segment or all */
    if (2 * w <= seg) {
        base = l / seg * seg;
        span = seg;
    }
    int32_t blk = (l - base) / w, per = span / (2 * w);
    return (blk < per ? 0 : W) + base + (blk % per) * 2 * w + half * w + l % w;
}

/* A RUNSPLIT or RUNEND over the coordinates crd between lo and hi (ROWOF: over the pos
 * array crd, from row lo, of position hi). */
static const sc_ir_expr *run_expr(sc_ir_builder *b, sc_ir_expr_kind kind, sc_ir_var crd,
                                  const sc_ir_expr *lo, const sc_ir_expr *hi, int64_t ival)
{
    if (!var_ok(b, crd) || !scalar_int(b, lo, "run start") || !scalar_int(b, hi, "run bound"))
        return NULL;
    const sc_ir_var_info *c = &b->fn->vars[crd];
    if (!c->buffer || !c->readonly || (c->type != SC_IR_I32 && c->type != SC_IR_I64)) {
        sc_ir_fail(b, SC_INTERNAL, "%s over %s",
                   kind == SC_IR_E_RUNEND ? "run end" : kind == SC_IR_E_ROWOF ? "row search" : "run split",
                   c->name);
        return NULL;
    }
    sc_ir_expr *e = node(b, sizeof *e);
    if (!e)
        return NULL;
    e->kind = kind;
    e->type = SC_IR_I64;
    e->var = crd;
    e->a = lo;
    e->b = hi;
    e->ival = ival;
    return e;
}

const sc_ir_expr *sc_ir_runsplit(sc_ir_builder *b, sc_ir_var crd, const sc_ir_expr *lo,
                                 const sc_ir_expr *hi, bool end)
{
    return run_expr(b, SC_IR_E_RUNSPLIT, crd, lo, hi, end);
}

const sc_ir_expr *sc_ir_runend(sc_ir_builder *b, sc_ir_var crd, const sc_ir_expr *lo,
                               const sc_ir_expr *hi)
{
    return run_expr(b, SC_IR_E_RUNEND, crd, lo, hi, 0);
}

const sc_ir_expr *sc_ir_rowof(sc_ir_builder *b, sc_ir_var pos, const sc_ir_expr *r,
                              const sc_ir_expr *p, const sc_ir_expr *end)
{
    sc_ir_expr *e = (sc_ir_expr *)run_expr(b, SC_IR_E_ROWOF, pos, r, p, 0);
    if (!e || !scalar_int(b, end, "row bound"))
        return NULL;
    e->c = end;
    return e;
}

const sc_ir_expr *sc_ir_lane(sc_ir_builder *b, const sc_ir_expr *x, int32_t lane)
{
    if (!need(b, x, "lane"))
        return NULL;
    if (!x->lanes || lane < 0 || lane >= x->lanes) {
        sc_ir_fail(b, SC_INTERNAL, "lane %d of a %d-lane value", (int)lane, (int)x->lanes);
        return NULL;
    }
    sc_ir_expr *e = node(b, sizeof *e);
    if (!e)
        return NULL;
    e->kind = SC_IR_E_LANE;
    e->type = x->type;
    e->ival = lane;
    e->a = x;
    return e;
}

const sc_ir_expr *sc_ir_bin(sc_ir_builder *b, sc_ir_op op, const sc_ir_expr *x,
                            const sc_ir_expr *y)
{
    if (!need(b, x, "binary") || !need(b, y, "binary"))
        return NULL;
    if ((unsigned)op >= SC_IR_OP_COUNT || x->buffer || y->buffer ||
        sc_ir_is_value(x->type) != sc_ir_is_value(y->type) ||
        ((x->lanes || y->lanes) && (op_bool[op] || op == SC_IR_OP_MIN || op == SC_IR_OP_MAX ||
                                    (x->lanes && y->lanes && x->lanes != y->lanes) ||
                                    x->type != y->type))) {
        sc_ir_fail(b, SC_INTERNAL, "bad operands for '%s' (%s, %s)", sc_ir_op_symbol(op),
                   sc_ir_type_name(x->type), sc_ir_type_name(y->type));
        return NULL;
    }
    if (op == SC_IR_OP_DIV && (sc_ir_is_int_value(x->type) || sc_ir_is_int_value(y->type))) {
        sc_ir_fail(b, SC_UNSUPPORTED, "division of integer values");
        return NULL;
    }
    /* algebraic identities on integer constants: x+0, 0+x, x*1, 1*x */
    if (!sc_ir_is_value(x->type)) {
        bool xc = x->kind == SC_IR_E_INT, yc = y->kind == SC_IR_E_INT;
        if (op == SC_IR_OP_ADD && yc && y->ival == 0 && x->type == SC_IR_I64)
            return x;
        if (op == SC_IR_OP_ADD && xc && x->ival == 0 && y->type == SC_IR_I64)
            return y;
        if (op == SC_IR_OP_MUL && yc && y->ival == 1 && x->type == SC_IR_I64)
            return x;
        if (op == SC_IR_OP_MUL && xc && x->ival == 1 && y->type == SC_IR_I64)
            return y;
    }
    sc_ir_expr *e = node(b, sizeof *e);
    if (!e)
        return NULL;
    e->kind = SC_IR_E_BIN;
    e->op = op;
    e->a = x;
    e->b = y;
    e->lanes = x->lanes ? x->lanes : y->lanes;
    if (op_bool[op])
        e->type = SC_IR_BOOL;
    else if (sc_ir_is_value(x->type))
        e->type = value_join(x->type, y->type);
    else
        e->type = SC_IR_I64;
    return e;
}

const sc_ir_expr *sc_ir_neg(sc_ir_builder *b, const sc_ir_expr *x)
{
    if (!need(b, x, "neg"))
        return NULL;
    sc_ir_expr *e = node(b, sizeof *e);
    if (!e)
        return NULL;
    e->kind = SC_IR_E_NEG;
    e->type = sc_ir_is_value(x->type) ? x->type : SC_IR_I64;
    e->lanes = x->lanes;
    e->a = x;
    return e;
}

const sc_ir_expr *sc_ir_not(sc_ir_builder *b, const sc_ir_expr *x)
{
    if (!scalar_int(b, x, "not"))
        return NULL;
    sc_ir_expr *e = node(b, sizeof *e);
    if (!e)
        return NULL;
    e->kind = SC_IR_E_NOT;
    e->type = SC_IR_BOOL;
    e->a = x;
    return e;
}

const sc_ir_expr *sc_ir_cast(sc_ir_builder *b, sc_ir_type t, const sc_ir_expr *x)
{
    if (!need(b, x, "cast"))
        return NULL;
    if (x->buffer || x->lanes || t == SC_IR_VOID) {
        sc_ir_fail(b, SC_INTERNAL, "bad cast to %s", sc_ir_type_name(t));
        return NULL;
    }
    sc_ir_expr *e = node(b, sizeof *e);
    if (!e)
        return NULL;
    e->kind = SC_IR_E_CAST;
    e->type = t;
    e->a = x;
    return e;
}

const sc_ir_expr *sc_ir_select(sc_ir_builder *b, const sc_ir_expr *c, const sc_ir_expr *x,
                               const sc_ir_expr *y)
{
    if (!scalar_int(b, c, "select") || !need(b, x, "select") || !need(b, y, "select"))
        return NULL;
    if (sc_ir_is_value(x->type) != sc_ir_is_value(y->type) || x->buffer || y->buffer ||
        x->lanes || y->lanes) {
        sc_ir_fail(b, SC_INTERNAL, "select arms of different kinds");
        return NULL;
    }
    sc_ir_expr *e = node(b, sizeof *e);
    if (!e)
        return NULL;
    e->kind = SC_IR_E_SELECT;
    if (sc_ir_is_value(x->type))
        e->type = value_join(x->type, y->type);
    else
        e->type = SC_IR_I64;
    e->a = c;
    e->b = x;
    e->c = y;
    return e;
}

const sc_ir_expr *sc_ir_arg_ref(sc_ir_builder *b, sc_ir_arg arg, int32_t operand,
                                int32_t level, sc_ir_type type)
{
    if (b->st != SC_OK)
        return NULL;
    if ((unsigned)arg >= SC_IR_ARG_COUNT || operand < -1 || level < 0 || level >= SC_MAX_ORDER) {
        sc_ir_fail(b, SC_INTERNAL, "bad argument reference");
        return NULL;
    }
    sc_ir_expr *e = node(b, sizeof *e);
    if (!e)
        return NULL;
    e->kind = SC_IR_E_ARG;
    e->arg = arg;
    e->ival = operand;
    e->level = level;
    e->buffer = arg == SC_IR_ARG_POS || arg == SC_IR_ARG_CRD || arg == SC_IR_ARG_VALS;
    e->type = arg == SC_IR_ARG_DIM || arg == SC_IR_ARG_CRD_LEN || arg == SC_IR_ARG_CACHE ||
                      arg == SC_IR_ARG_THREADS
                  ? SC_IR_I64
                  : type;
    return e;
}

const sc_ir_expr *sc_ir_alloc(sc_ir_builder *b, sc_ir_type type, const sc_ir_expr *count)
{
    if (!scalar_int(b, count, "alloc count"))
        return NULL;
    if (type == SC_IR_VOID) {
        sc_ir_fail(b, SC_INTERNAL, "alloc of void");
        return NULL;
    }
    sc_ir_expr *e = node(b, sizeof *e);
    if (!e)
        return NULL;
    e->kind = SC_IR_E_ALLOC;
    e->type = type;
    e->buffer = true;
    e->a = count;
    return e;
}

const sc_ir_expr *sc_ir_alloc_uninit(sc_ir_builder *b, sc_ir_type type, const sc_ir_expr *count)
{
    const sc_ir_expr *e = sc_ir_alloc(b, type, count);
    if (!e)
        return NULL;
    sc_ir_expr *u = node(b, sizeof *u);
    if (!u)
        return NULL;
    *u = *e;
    u->uninit = true;
    return u;
}

const sc_ir_expr *sc_ir_nonnull(sc_ir_builder *b, sc_ir_var buf)
{
    if (!var_ok(b, buf))
        return NULL;
    if (!b->fn->vars[buf].buffer) {
        sc_ir_fail(b, SC_INTERNAL, "null test of scalar %s", b->fn->vars[buf].name);
        return NULL;
    }
    sc_ir_expr *e = node(b, sizeof *e);
    if (!e)
        return NULL;
    e->kind = SC_IR_E_NONNULL;
    e->type = SC_IR_BOOL;
    e->var = buf;
    return e;
}

static sc_ir_stmt *stmt(sc_ir_builder *b, sc_ir_stmt_kind k)
{
    sc_ir_stmt *s = node(b, sizeof *s);
    if (s)
        s->kind = k;
    return s;
}

const sc_ir_stmt *sc_ir_block(sc_ir_builder *b, const sc_ir_stmt *const *items, int32_t n)
{
    if (b->st != SC_OK)
        return NULL;
    for (int32_t i = 0; i < n; i++)
        if (!need(b, items[i], "block"))
            return NULL;
    sc_ir_stmt *s = stmt(b, SC_IR_S_BLOCK);
    const sc_ir_stmt **copy = n ? node(b, (size_t)n * sizeof *copy) : NULL;
    if (!s || (n && !copy))
        return NULL;
    for (int32_t i = 0; i < n; i++)
        copy[i] = items[i];
    s->n = n;
    s->items = copy;
    return s;
}

static bool value_fits(sc_ir_builder *b, const sc_ir_var_info *vi, const sc_ir_expr *x)
{
    if (vi->buffer != x->buffer || vi->lanes != x->lanes ||
        (!vi->buffer && sc_ir_is_value(vi->type) != sc_ir_is_value(x->type)) ||
        (vi->buffer && vi->type != x->type)) {
        sc_ir_fail(b, SC_INTERNAL, "value of type %s%s does not fit %s", sc_ir_type_name(x->type),
                   x->buffer ? "*" : "", vi->name);
        return false;
    }
    return true;
}

const sc_ir_stmt *sc_ir_decl(sc_ir_builder *b, sc_ir_var v, const sc_ir_expr *init)
{
    if (!var_ok(b, v) || !need(b, init, "decl") || !value_fits(b, &b->fn->vars[v], init))
        return NULL;
    sc_ir_stmt *s = stmt(b, SC_IR_S_DECL);
    if (!s)
        return NULL;
    s->var = v;
    s->a = init;
    return s;
}

const sc_ir_stmt *sc_ir_decl_local(sc_ir_builder *b, sc_ir_var v)
{
    if (!var_ok(b, v))
        return NULL;
    if (b->fn->vars[v].local_len <= 0) {
        sc_ir_fail(b, SC_INTERNAL, "%s is not a local array", b->fn->vars[v].name);
        return NULL;
    }
    sc_ir_stmt *s = stmt(b, SC_IR_S_DECL);
    if (!s)
        return NULL;
    s->var = v;
    return s;
}

const sc_ir_stmt *sc_ir_assign(sc_ir_builder *b, sc_ir_var v, bool accumulate,
                               const sc_ir_expr *value)
{
    if (!var_ok(b, v) || !need(b, value, "assign") || !value_fits(b, &b->fn->vars[v], value))
        return NULL;
    sc_ir_stmt *s = stmt(b, SC_IR_S_ASSIGN);
    if (!s)
        return NULL;
    s->var = v;
    s->accumulate = accumulate;
    s->a = value;
    return s;
}

/* A scalar store (vector false) or a vector store of value into buf at idx. */
static const sc_ir_stmt *store_stmt(sc_ir_builder *b, sc_ir_var buf, const sc_ir_expr *idx,
                                    bool accumulate, const sc_ir_expr *value, bool vector)
{
    if (!var_ok(b, buf) || !scalar_int(b, idx, "store index") || !need(b, value, "store"))
        return NULL;
    const sc_ir_var_info *vi = &b->fn->vars[buf];
    bool ok = vi->buffer && !vi->readonly && !value->buffer &&
              (vector ? value->lanes && !vi->local_len && vi->type == value->type
                      : !value->lanes && sc_ir_is_value(vi->type) == sc_ir_is_value(value->type));
    if (!ok) {
        sc_ir_fail(b, SC_INTERNAL, "bad %sstore into %s", vector ? "vector " : "", vi->name);
        return NULL;
    }
    sc_ir_stmt *s = stmt(b, SC_IR_S_STORE);
    if (!s)
        return NULL;
    s->var = buf;
    s->a = value;
    s->b = idx;
    s->accumulate = accumulate;
    s->lanes = vector ? value->lanes : 0;
    return s;
}

const sc_ir_stmt *sc_ir_vstore(sc_ir_builder *b, sc_ir_var buf, const sc_ir_expr *idx,
                               bool accumulate, const sc_ir_expr *value)
{
    return store_stmt(b, buf, idx, accumulate, value, true);
}

const sc_ir_stmt *sc_ir_vstore_n(sc_ir_builder *b, sc_ir_var buf, const sc_ir_expr *idx,
                                 bool accumulate, const sc_ir_expr *value,
                                 const sc_ir_expr *count)
{
    if (!scalar_int(b, count, "vector store count") || !need(b, value, "store"))
        return NULL;
    if (value->lanes != sc_ir_vec_lanes(b->fn, value->type)) {
        sc_ir_fail(b, SC_INTERNAL, "a counted vector store needs a full-width vector");
        return NULL;
    }
    const sc_ir_stmt *s = store_stmt(b, buf, idx, accumulate, value, true);
    if (s)
        ((sc_ir_stmt *)s)->c = count;
    return s;
}

const sc_ir_stmt *sc_ir_store(sc_ir_builder *b, sc_ir_var buf, const sc_ir_expr *idx,
                              bool accumulate, const sc_ir_expr *value)
{
    return store_stmt(b, buf, idx, accumulate, value, false);
}

const sc_ir_stmt *sc_ir_for(sc_ir_builder *b, sc_ir_var v, const sc_ir_expr *lo,
                            const sc_ir_expr *hi, const sc_ir_expr *step, sc_ir_par par,
                            int32_t chunk, const sc_ir_stmt *body)
{
    if (!var_ok(b, v) || !scalar_int(b, lo, "for lo") || !scalar_int(b, hi, "for hi") ||
        !scalar_int(b, step, "for step") || !need(b, body, "for body"))
        return NULL;
    if (b->fn->vars[v].buffer || !sc_ir_is_int(b->fn->vars[v].type)) {
        sc_ir_fail(b, SC_INTERNAL, "loop variable %s is not an integer", b->fn->vars[v].name);
        return NULL;
    }
    if (step->kind == SC_IR_E_INT && step->ival <= 0) {
        sc_ir_fail(b, SC_INTERNAL, "loop step %lld", (long long)step->ival);
        return NULL;
    }
    sc_ir_stmt *s = stmt(b, SC_IR_S_FOR);
    if (!s)
        return NULL;
    s->var = v;
    s->a = lo;
    s->b = hi;
    s->c = step;
    s->par = par;
    s->level = chunk;
    s->body = body;
    return s;
}

const sc_ir_stmt *sc_ir_for_weighed(sc_ir_builder *b, sc_ir_var v, const sc_ir_expr *lo,
                                    const sc_ir_expr *hi, int32_t chunk, const sc_ir_expr *work,
                                    const sc_ir_stmt *body)
{
    if (!scalar_int(b, work, "loop work"))
        return NULL;
    if (chunk < 1) {
        sc_ir_fail(b, SC_INTERNAL, "weighed loop with chunk %d", (int)chunk);
        return NULL;
    }
    sc_ir_stmt *s = (sc_ir_stmt *)sc_ir_for(b, v, lo, hi, sc_ir_int(b, 1), SC_IR_PAR_FOR, chunk, body);
    if (!s)
        return NULL;
    s->work = work;
    return s;
}

const sc_ir_stmt *sc_ir_scalar(sc_ir_builder *b, const sc_ir_stmt *s)
{
    if (!need(b, s, "scalar loop"))
        return NULL;
    if (s->kind != SC_IR_S_FOR) {
        sc_ir_fail(b, SC_INTERNAL, "only a loop can be marked scalar");
        return NULL;
    }
    ((sc_ir_stmt *)s)->scalar = true;
    return s;
}

const sc_ir_stmt *sc_ir_pairs(sc_ir_builder *b, const sc_ir_stmt *s, int32_t min,
                              const sc_ir_stmt *pair)
{
    if (!need(b, s, "paired loop") || !need(b, pair, "pair body"))
        return NULL;
    if (s->kind != SC_IR_S_FOR || !s->balanced || s->orelse || min < 0) {
        sc_ir_fail(b, SC_INTERNAL, "only a balanced loop takes a pair body, once, for rows averaging >= 0 entries");
        return NULL;
    }
    ((sc_ir_stmt *)s)->orelse = pair;
    ((sc_ir_stmt *)s)->pair_min = min;
    return s;
}

const sc_ir_stmt *sc_ir_runs(sc_ir_builder *b, const sc_ir_stmt *s, int32_t min, sc_ir_var end,
                             const sc_ir_stmt *run)
{
    if (!need(b, s, "loop with runs") || !need(b, run, "run body") || !var_ok(b, end))
        return NULL;
    if (s->kind != SC_IR_S_FOR || !s->balanced || s->orelse || min < 1) {
        sc_ir_fail(b, SC_INTERNAL, "only a balanced loop takes a run body, once, for rows under >= 1 entries");
        return NULL;
    }
    if (b->fn->vars[end].buffer || !sc_ir_is_int(b->fn->vars[end].type) || end == s->var) {
        sc_ir_fail(b, SC_INTERNAL, "the end of a run is not an integer variable of its own");
        return NULL;
    }
    sc_ir_stmt *w = (sc_ir_stmt *)s;
    w->orelse = run;
    w->run_min = min;
    w->run_end = end;
    return s;
}

const sc_ir_stmt *sc_ir_for_balanced(sc_ir_builder *b, sc_ir_var v, const sc_ir_expr *lo,
                                     const sc_ir_expr *hi, sc_ir_par par, sc_ir_var pos,
                                     const sc_ir_expr *work, const sc_ir_stmt *body)
{
    if (b->st != SC_OK || !var_ok(b, pos))
        return NULL;
    if (par == SC_IR_SEQ || !b->fn->vars[pos].buffer || !sc_ir_is_int(b->fn->vars[pos].type)) {
        sc_ir_fail(b, SC_INTERNAL, "balanced loop needs a parallel loop and an integer pos buffer");
        return NULL;
    }
    sc_ir_stmt *s = (sc_ir_stmt *)sc_ir_for(b, v, lo, hi, sc_ir_int(b, 1), par, 0, body);
    if (!s)
        return NULL;
    s->balanced = true;
    s->bal = pos;
    s->work = work;
    return s;
}

const sc_ir_stmt *sc_ir_while(sc_ir_builder *b, const sc_ir_expr *cond, const sc_ir_stmt *body)
{
    if (!scalar_int(b, cond, "while") || !need(b, body, "while body"))
        return NULL;
    sc_ir_stmt *s = stmt(b, SC_IR_S_WHILE);
    if (!s)
        return NULL;
    s->a = cond;
    s->body = body;
    return s;
}

const sc_ir_stmt *sc_ir_if(sc_ir_builder *b, const sc_ir_expr *cond, const sc_ir_stmt *then,
                           const sc_ir_stmt *orelse)
{
    if (!scalar_int(b, cond, "if") || !need(b, then, "if body"))
        return NULL;
    sc_ir_stmt *s = stmt(b, SC_IR_S_IF);
    if (!s)
        return NULL;
    s->a = cond;
    s->body = then;
    s->orelse = orelse;
    return s;
}

const sc_ir_stmt *sc_ir_parallel(sc_ir_builder *b, const sc_ir_expr *cond, const sc_ir_stmt *body)
{
    if (!need(b, body, "parallel body") || (cond && !scalar_int(b, cond, "parallel condition")))
        return NULL;
    sc_ir_stmt *s = stmt(b, SC_IR_S_PARALLEL);
    if (s) {
        s->body = body;
        s->a = cond;
    }
    return s;
}

const sc_ir_stmt *sc_ir_flag(sc_ir_builder *b, sc_ir_var v)
{
    if (!var_ok(b, v))
        return NULL;
    if (b->fn->vars[v].buffer || b->fn->vars[v].type != SC_IR_BOOL) {
        sc_ir_fail(b, SC_INTERNAL, "flag %s is not an int", b->fn->vars[v].name);
        return NULL;
    }
    sc_ir_stmt *s = stmt(b, SC_IR_S_BARRIER_OR);
    if (s)
        s->var = v;
    return s;
}

const sc_ir_stmt *sc_ir_require(sc_ir_builder *b, const sc_ir_expr *cond, sc_status status,
                                const char *msg)
{
    if (!scalar_int(b, cond, "require") || !need(b, msg, "require message"))
        return NULL;
    sc_ir_stmt *s = stmt(b, SC_IR_S_REQUIRE);
    if (!s)
        return NULL;
    s->a = cond;
    s->status = (int32_t)status;
    s->text = msg;
    return s;
}

const sc_ir_stmt *sc_ir_free(sc_ir_builder *b, sc_ir_var buf)
{
    if (!var_ok(b, buf))
        return NULL;
    if (!b->fn->vars[buf].buffer) {
        sc_ir_fail(b, SC_INTERNAL, "free of %s, not a buffer", b->fn->vars[buf].name);
        return NULL;
    }
    sc_ir_stmt *s = stmt(b, SC_IR_S_FREE);
    if (s)
        s->var = buf;
    return s;
}

const sc_ir_stmt *sc_ir_sort(sc_ir_builder *b, sc_ir_var buf, const sc_ir_expr *count)
{
    if (!var_ok(b, buf) || !scalar_int(b, count, "sort count"))
        return NULL;
    if (!b->fn->vars[buf].buffer || b->fn->vars[buf].type != SC_IR_I64) {
        sc_ir_fail(b, SC_INTERNAL, "sort of %s, not an int64 buffer", b->fn->vars[buf].name);
        return NULL;
    }
    sc_ir_stmt *s = stmt(b, SC_IR_S_SORT);
    if (!s)
        return NULL;
    s->var = buf;
    s->a = count;
    return s;
}

/* bits and summary: writable uint64 buffers. */
static bool bitmap_ok(sc_ir_builder *b, sc_ir_var bits, sc_ir_var summary)
{
    if (!var_ok(b, bits) || !var_ok(b, summary))
        return false;
    const sc_ir_var_info *x = &b->fn->vars[bits], *y = &b->fn->vars[summary];
    if (!x->buffer || x->readonly || x->type != SC_IR_U64 || !y->buffer || y->readonly ||
        y->type != SC_IR_U64 || bits == summary) {
        sc_ir_fail(b, SC_INTERNAL, "bitmap %s / %s: not two writable uint64 buffers", x->name,
                   y->name);
        return false;
    }
    return true;
}

/* A MARK of coordinate c in the bitmap (bits, summary), checked; body and total unset. */
static sc_ir_stmt *mark_stmt(sc_ir_builder *b, sc_ir_var bits, sc_ir_var summary,
                             const sc_ir_expr *c)
{
    if (!bitmap_ok(b, bits, summary) || !scalar_int(b, c, "mark coordinate"))
        return NULL;
    sc_ir_stmt *s = stmt(b, SC_IR_S_MARK);
    if (!s)
        return NULL;
    s->var = s->bits = bits;
    s->summary = summary;
    s->b = c;
    return s;
}

const sc_ir_stmt *sc_ir_mark(sc_ir_builder *b, sc_ir_var bits, sc_ir_var summary,
                             const sc_ir_expr *c, const sc_ir_stmt *then,
                             const sc_ir_stmt *orelse)
{
    sc_ir_stmt *s = mark_stmt(b, bits, summary, c);
    if (!s || !need(b, then, "mark"))
        return NULL;
    s->body = then;
    s->orelse = orelse;
    return s;
}

const sc_ir_stmt *sc_ir_mark_new(sc_ir_builder *b, sc_ir_var bits, sc_ir_var summary,
                                 const sc_ir_expr *c, sc_ir_var isnew)
{
    sc_ir_stmt *s = mark_stmt(b, bits, summary, c);
    if (!s || !var_ok(b, isnew))
        return NULL;
    const sc_ir_var_info *ni = &b->fn->vars[isnew];
    if (ni->buffer || ni->type != SC_IR_I64) {
        sc_ir_fail(b, SC_INTERNAL, "mark into %s: not an int64 variable", ni->name);
        return NULL;
    }
    s->total = isnew;
    return s;
}

/* buf: a writable int32/int64 buffer, where COLLECT and SCAN write coordinates. */
static bool coord_buffer(sc_ir_builder *b, sc_ir_var buf, const char *what)
{
    const sc_ir_var_info *vi = &b->fn->vars[buf];
    if (!vi->buffer || vi->readonly || (vi->type != SC_IR_I32 && vi->type != SC_IR_I64)) {
        sc_ir_fail(b, SC_INTERNAL, "%s into %s, not a writable int32/int64 buffer", what,
                   vi->name);
        return false;
    }
    return true;
}

const sc_ir_stmt *sc_ir_collect(sc_ir_builder *b, sc_ir_var buf, const sc_ir_expr *start,
                                const sc_ir_expr *count, sc_ir_var bits, sc_ir_var summary,
                                bool sort, const sc_ir_expr *extent)
{
    if (!bitmap_ok(b, bits, summary) || !var_ok(b, buf) ||
        !scalar_int(b, start, "collect start") || !scalar_int(b, count, "collect count") ||
        !scalar_int(b, extent, "collect extent"))
        return NULL;
    if (!coord_buffer(b, buf, "collect"))
        return NULL;
    sc_ir_stmt *s = stmt(b, SC_IR_S_COLLECT);
    if (!s)
        return NULL;
    s->var = buf;
    s->bits = bits;
    s->summary = summary;
    s->b = start;
    s->a = count;
    s->c = extent;
    s->level = sort;
    return s;
}

const sc_ir_stmt *sc_ir_scan(sc_ir_builder *b, sc_ir_var buf, const sc_ir_expr *start,
                             sc_ir_var flags, const sc_ir_expr *lo, const sc_ir_expr *hi,
                             sc_ir_var total)
{
    if (!var_ok(b, buf) || !var_ok(b, flags) || !var_ok(b, total) ||
        !scalar_int(b, start, "scan start") || !scalar_int(b, lo, "scan lo") ||
        !scalar_int(b, hi, "scan hi"))
        return NULL;
    if (!coord_buffer(b, buf, "scan"))
        return NULL;
    const sc_ir_var_info *fi = &b->fn->vars[flags], *ti = &b->fn->vars[total];
    if (!fi->buffer || fi->readonly || fi->type != SC_IR_U8 || ti->buffer ||
        ti->type != SC_IR_I64) {
        sc_ir_fail(b, SC_INTERNAL, "scan of %s adding to %s: not writable uint8 flags and "
                   "an int64 variable", fi->name, ti->name);
        return NULL;
    }
    sc_ir_stmt *s = stmt(b, SC_IR_S_SCAN);
    if (!s)
        return NULL;
    s->var = buf;
    s->bits = flags;
    s->total = total;
    s->b = start;
    s->a = lo;
    s->c = hi;
    return s;
}

const sc_ir_stmt *sc_ir_sortsum(sc_ir_builder *b, sc_ir_var buf, sc_ir_var vals,
                                const sc_ir_expr *start, sc_ir_var total, int32_t most)
{
    if (most < 0) {
        sc_ir_fail(b, SC_INTERNAL, "sortsum of at most %d entries", (int)most);
        return NULL;
    }
    if (!var_ok(b, buf) || !var_ok(b, vals) || !var_ok(b, total) ||
        !scalar_int(b, start, "sortsum start") || !coord_buffer(b, buf, "sortsum"))
        return NULL;
    const sc_ir_var_info *vi = &b->fn->vars[vals], *ti = &b->fn->vars[total];
    if (!vi->buffer || vi->readonly || !sc_ir_is_value(vi->type) ||
        ti->buffer || ti->type != SC_IR_I64) {
        sc_ir_fail(b, SC_INTERNAL, "sortsum of %s ending at %s: not writable values and "
                   "an int64 variable", vi->name, ti->name);
        return NULL;
    }
    sc_ir_stmt *s = stmt(b, SC_IR_S_SORTSUM);
    if (!s)
        return NULL;
    s->var = buf;
    s->vals = vals;
    s->total = total;
    s->b = start;
    s->level = most;
    return s;
}

static const sc_ir_stmt *prefetch_stmt(sc_ir_builder *b, sc_ir_var buf, const sc_ir_expr *idx,
                                       bool write)
{
    if (!element_of(b, buf, idx, "prefetch"))
        return NULL;
    if (write && b->fn->vars[buf].readonly) {
        sc_ir_fail(b, SC_INTERNAL, "prefetch for writing of readonly %s", b->fn->vars[buf].name);
        return NULL;
    }
    sc_ir_stmt *s = stmt(b, SC_IR_S_PREFETCH);
    if (!s)
        return NULL;
    s->var = buf;
    s->b = idx;
    s->accumulate = write;
    return s;
}

const sc_ir_stmt *sc_ir_prefetch(sc_ir_builder *b, sc_ir_var buf, const sc_ir_expr *idx)
{
    return prefetch_stmt(b, buf, idx, false);
}

const sc_ir_stmt *sc_ir_prefetch_write(sc_ir_builder *b, sc_ir_var buf, const sc_ir_expr *idx)
{
    return prefetch_stmt(b, buf, idx, true);
}

static const sc_ir_stmt *out_field(sc_ir_builder *b, sc_ir_arg field, int32_t level,
                                   const sc_ir_expr *value, int32_t is_len)
{
    if (!need(b, value, "out_set"))
        return NULL;
    if ((field != SC_IR_ARG_POS && field != SC_IR_ARG_CRD && field != SC_IR_ARG_VALS) ||
        level < 0 || level >= SC_MAX_ORDER || value->buffer == (is_len != 0)) {
        sc_ir_fail(b, SC_INTERNAL, "bad output field");
        return NULL;
    }
    sc_ir_stmt *s = stmt(b, SC_IR_S_OUT_SET);
    if (!s)
        return NULL;
    s->field = field;
    s->level = level;
    s->a = value;
    s->status = is_len;
    return s;
}

const sc_ir_stmt *sc_ir_out_set(sc_ir_builder *b, sc_ir_arg field, int32_t level,
                                const sc_ir_expr *value)
{
    return out_field(b, field, level, value, 0);
}

const sc_ir_stmt *sc_ir_out_len(sc_ir_builder *b, sc_ir_arg field, int32_t level,
                                const sc_ir_expr *len)
{
    if (len && (len->buffer || !sc_ir_is_int(len->type))) {
        sc_ir_fail(b, SC_INTERNAL, "output length is not an integer");
        return NULL;
    }
    return out_field(b, field, level, len, 1);
}

const sc_ir_stmt *sc_ir_comment(sc_ir_builder *b, const char *text)
{
    if (!need(b, text, "comment"))
        return NULL;
    char *copy = sc_arena_strdup(b->arena, text, strlen(text), b->err);
    if (!copy) {
        b->st = SC_NOMEM;
        return NULL;
    }
    for (char *p = copy; *p; p++)
        if (*p == '*' && p[1] == '/')
            *p = '+';
    sc_ir_stmt *s = stmt(b, SC_IR_S_COMMENT);
    if (s)
        s->text = copy;
    return s;
}

void sc_ir_push(sc_ir_builder *b, sc_ir_list *l, const sc_ir_stmt *s)
{
    if (!need(b, s, "statement list"))
        return;
    if (l->n == l->cap) {
        int32_t cap = l->cap ? l->cap * 2 : 8;
        const sc_ir_stmt **ni = node(b, (size_t)cap * sizeof *ni);
        if (!ni)
            return;
        if (l->n)
            memcpy(ni, l->items, (size_t)l->n * sizeof *ni);
        l->items = ni;
        l->cap = cap;
    }
    l->items[l->n++] = s;
}

const sc_ir_stmt *sc_ir_list_block(sc_ir_builder *b, const sc_ir_list *l)
{
    return sc_ir_block(b, l->items, l->n);
}

sc_status sc_ir_finish(sc_ir_builder *b, const sc_ir_stmt *body)
{
    if (b->st == SC_OK && !body)
        sc_ir_fail(b, SC_INTERNAL, "function without a body");
    if (b->st == SC_OK)
        b->fn->body = body;
    return b->st;
}
