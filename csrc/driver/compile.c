/*
 * compile.c — sc_compile, the one function that runs the pipeline top to bottom:
 *
 *   expr (parse) → lower (problem, output format) → schedule (auto or forced, checked)
 *   → key → [cache hit: done] → lower (loop IR) → ir (verify) → codegen (C) → jit
 *
 * Each stage's dump goes into the explain text when SCORCH_DEBUG is set, with its time.
 * One arena per compilation holds everything up to the C text; the kernel keeps only
 * ctx memory (names, schedule, explain).
 */
#define _POSIX_C_SOURCE 200809L
#include "driver_internal.h"
#include "../codegen/sc_cg.h"
#include "../expr/sc_expr.h"
#include "../format/sc_format.h"
#include "../ir/sc_ir.h"
#include "../lower/sc_lower.h"
#include "../schedule/sc_sched.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

double sc_drv_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void fmt_text(const sc_format *f, char *buf, size_t n)
{
    const char *name = sc_fmt_name(f);
    char lv[128];
    sc_fmt_levels_text(f, lv, sizeof lv);
    int k = snprintf(buf, n, "%s%s%s (", name ? name : "", name ? " = " : "", lv);
    for (int32_t d = 0; d < f->order && k > 0 && (size_t)k < n; d++)
        k += snprintf(buf + k, n - (size_t)k, "%s%d", d ? "," : "", (int)f->lvl2dim[d]);
    if (k > 0 && (size_t)k < n)
        snprintf(buf + k, n - (size_t)k, ")");
}

static void hash_fmt(sc_jit_hasher *h, const sc_format *f)
{
    int32_t w[1 + 3 * SC_MAX_ORDER] = {0};
    w[0] = f->order;
    for (int32_t k = 0; k < f->order; k++) {
        w[1 + 3 * k] = f->kind[k];
        w[2 + 3 * k] = f->unique[k];
        w[3 + 3 * k] = f->lvl2dim[k];
    }
    sc_jit_hash_field(h, w, sizeof w);
}

/* The kernel record (ctx memory) for a problem compiled under schedule s. */
static sc_kernel *new_kernel(sc_compiler *c, const sc_lower_problem *p, const sc_tensor *ops,
                             const sc_sched *s, const char *sched_text, sc_error *err)
{
    sc_kernel *k = sc_calloc(&c->ctx, 1, sizeof *k, err);
    if (!k)
        return NULL;
    k->c = c;
    k->nops = p->nops;
    k->nvars = p->nvars;
    k->dtype = p->dtype;
    size_t names = 1;
    for (int32_t t = 0; t < p->nops; t++)
        names += strlen(p->e->operands[t].name) + 1;
    for (int32_t v = 0; v < p->nvars; v++)
        names += strlen(p->e->vars[v].name) + 1;
    k->names = sc_alloc(&c->ctx, names, err);
    size_t sl = strlen(sched_text);
    k->schedule = sc_alloc(&c->ctx, sl + 1, err);
    if (!k->names || !k->schedule) {
        sc_drv_kernel_free(c, k);
        return NULL;
    }
    memcpy(k->schedule, sched_text, sl + 1);
    char *q = k->names;
    for (int32_t t = 0; t < p->nops; t++) {
        size_t l = strlen(p->e->operands[t].name);
        memcpy(q, p->e->operands[t].name, l + 1);
        k->opname[t] = q;
        q += l + 1;
        k->fmt[t] = ops[t].fmt;
        k->itype[t] = ops[t].index_type;
        k->bcast[t] = p->bcast[t];
        for (int32_t d = 0; d < SC_MAX_ORDER; d++)
            k->var[t][d] = -1;
    }
    for (int32_t v = 0; v < p->nvars; v++) {
        size_t l = strlen(p->e->vars[v].name);
        memcpy(q, p->e->vars[v].name, l + 1);
        k->varname[v] = q;
        q += l + 1;
    }
    k->nacc = p->naccess;
    for (int32_t a = 0; a < p->naccess; a++) {
        k->acc_op[a] = p->acc[a].operand;
        for (int32_t d = 0; d < SC_MAX_ORDER; d++)
            k->acc_var[a][d] = d < p->acc[a].order ? p->acc[a].var[d] : -1;
        for (int32_t d = 0; d < p->acc[a].order; d++)
            k->var[p->acc[a].operand][d] = p->acc[a].var[d];
    }
    for (int32_t v = 0; v < p->nvars; v++)
        k->fixed[v] = p->fixed[v];
    k->transpose = s->transpose;
    memcpy(k->tfmt, s->tfmt, sizeof k->tfmt);
    k->out_fmt = p->out_fmt;
    k->out_itype = p->out_itype;
    k->out_order = p->out_order;
    for (int32_t d = 0; d < p->out_order; d++) {
        k->out_var[d] = p->out_var[d];
        k->out_dims[d] = p->out_dims[d];
    }
    return k;
}

/* The fixed extents into the key by index name, in name order (the two languages number
 * the indices of one canonical expression differently). */
static void hash_fixed(sc_jit_hasher *h, const sc_expr *e, const sc_lower_problem *p)
{
    const char *last = "";
    for (;;) {
        int32_t next = -1;
        for (int32_t v = 0; v < p->nvars; v++)
            if (p->fixed[v] > 0 && strcmp(e->vars[v].name, last) > 0 &&
                (next < 0 || strcmp(e->vars[v].name, e->vars[next].name) < 0))
                next = v;
        if (next < 0)
            return;
        last = e->vars[next].name;
        sc_jit_hash_field(h, last, strlen(last) + 1);
        sc_jit_hash_field(h, &p->fixed[next], sizeof p->fixed[next]);
    }
}

/* The kernel's key: everything that shapes the generated code. */
static sc_jit_key kernel_key(const sc_expr *e, const char *canon, int32_t nops,
                             const sc_tensor *ops, const sc_lower_problem *p,
                             const sc_sched *s, const char *stext)
{
    sc_jit_hasher h;
    sc_jit_hash_init(&h, 0x5c0c0de);
    int32_t ver = SC_RT_VERSION;
    sc_jit_hash_field(&h, &ver, sizeof ver);
    sc_jit_hash_field(&h, canon, strlen(canon));
    for (int32_t t = 0; t < nops; t++) {
        hash_fmt(&h, &ops[t].fmt);
        int32_t w[3] = {(int32_t)ops[t].dtype, (int32_t)ops[t].index_type, (int32_t)p->bcast[t]};
        sc_jit_hash_field(&h, w, sizeof w);
    }
    hash_fmt(&h, &p->out_fmt);
    int32_t oit = (int32_t)p->out_itype;
    sc_jit_hash_field(&h, &oit, sizeof oit);
    sc_jit_hash_field(&h, stext, strlen(stext));
    /* what the schedule converts: for sparse operands the order decides it, for dense
     * ones (sc_sched_relayout) the sizes do too */
    sc_jit_hash_field(&h, &s->transpose, sizeof s->transpose);
    for (int32_t t = 0; t < nops && t < 32; t++)
        if ((s->transpose >> t) & 1)
            hash_fmt(&h, &s->tfmt[t]);
    sc_jit_hash_field(&h, &s->vec_bytes, sizeof s->vec_bytes);
    uint8_t gth = s->gathers;
    sc_jit_hash_field(&h, &gth, sizeof gth);
    hash_fixed(&h, e, p);
    return sc_jit_hash_final(&h);
}

static bool has_fixed(const sc_lower_problem *p)
{
    for (int32_t v = 0; v < p->nvars; v++)
        if (p->fixed[v] > 0)
            return true;
    return false;
}

/* What one pass of the pipeline is asked for (sc_compile_sized, sc_compile_later,
 * sc_compile_source). */
typedef enum {
    WANT_KERNEL,   /* a callable kernel: the map, the ahead-of-time table, the jit */
    WANT_AOT_ONLY, /* the map or the ahead-of-time table; *out NULL where neither has it */
    WANT_SOURCE,   /* the generated C, its key and symbol; nothing is compiled or kept */
} want;

typedef struct request {
    bool sizes;
    want want;
    int gathers;        /* -1: the compiler's */
    sc_later **later;   /* WANT_KERNEL: where a background compile may be started */
    sc_source *source;  /* WANT_SOURCE: the result */
    const char *instead; /* WANT_AOT_ONLY for another loop order (builtin_in_other_order):
                            the scheduler's schedule, for the explain text */
    sc_sched_relayout_rule relayout; /* the dense operands the schedule relays out */
} request;

static sc_status compile_core(sc_compiler *c, sc_expr_lang lang, const char *expr,
                              int32_t nops, const sc_tensor *ops, const sc_format *out_fmt,
                              const char *schedule, const request *rq, const sc_kernel **out,
                              sc_error *err);

sc_status sc_compile(sc_compiler *c, sc_expr_lang lang, const char *expr, int32_t nops,
                     const sc_tensor *ops, const sc_format *out_fmt, const char *schedule,
                     const sc_kernel **out, sc_error *err)
{
    return sc_compile_sized(c, lang, expr, nops, ops, out_fmt, schedule, true, out, err);
}

sc_status sc_compile_sized(sc_compiler *c, sc_expr_lang lang, const char *expr, int32_t nops,
                           const sc_tensor *ops, const sc_format *out_fmt, const char *schedule,
                           bool sizes, const sc_kernel **out, sc_error *err)
{
    request rq = {.sizes = sizes, .want = WANT_KERNEL, .gathers = -1};
    return compile_core(c, lang, expr, nops, ops, out_fmt, schedule, &rq, out, err);
}

sc_status sc_compile_later(sc_compiler *c, sc_expr_lang lang, const char *expr, int32_t nops,
                           const sc_tensor *ops, const sc_format *out_fmt, const char *schedule,
                           bool sizes, const sc_kernel **out, sc_later **later, sc_error *err)
{
    *later = NULL;
    request rq = {.sizes = sizes, .want = WANT_KERNEL, .gathers = -1, .later = later};
    return compile_core(c, lang, expr, nops, ops, out_fmt, schedule, &rq, out, err);
}

sc_status sc_compile_source(sc_compiler *c, sc_expr_lang lang, const char *expr, int32_t nops,
                            const sc_tensor *ops, const sc_format *out_fmt, const char *schedule,
                            bool sizes, int gathers, sc_source *source, sc_error *err)
{
    memset(source, 0, sizeof *source);
    request rq = {.sizes = sizes, .want = WANT_SOURCE, .gathers = gathers, .source = source};
    const sc_kernel *unused;
    return compile_core(c, lang, expr, nops, ops, out_fmt, schedule, &rq, &unused, err);
}

void sc_source_release(sc_compiler *c, sc_source *source)
{
    sc_free(&c->ctx, source->text);
    memset(source, 0, sizeof *source);
}

/* Without a C compiler: a built-in kernel of p's problem, or *out NULL.  The loop orders
 * go cheapest first (sc_sched_rank); each with the dense operands relaid out as the sizes
 * say, not at all, or all of them; written for the sizes where the request's was, then
 * generic.  Every one of them computes the problem. */
static sc_status builtin_in_other_order(sc_compiler *c, sc_expr_lang lang, const char *expr,
                                        int32_t nops, const sc_tensor *ops,
                                        const sc_format *out_fmt, const sc_expr *e,
                                        const sc_lower_problem *p, const char *chosen,
                                        const request *rq, const sc_kernel **out, sc_error *err)
{
    *out = NULL;
    sc_sched_ranked *r;
    size_t m;
    sc_status st = sc_sched_rank(p, &c->ctx, &r, &m, err);
    for (size_t q = 0; q < m && !*out && st == SC_OK; q++) {
        sc_sched o;
        memset(&o, 0, sizeof o);
        o.parallel = -1;
        o.norder = p->nvars;
        memcpy(o.order, r[q].order, sizeof o.order);
        char text[512];
        if (sc_sched_print(e, &o, text, sizeof text) >= sizeof text)
            continue;
        for (int k = 0; k < (rq->sizes ? 6 : 3) && !*out && st == SC_OK; k++) {
            request grq = {.sizes = k < 3 && rq->sizes, .want = WANT_AOT_ONLY,
                           .gathers = rq->gathers, .instead = chosen,
                           .relayout = (sc_sched_relayout_rule)(k % 3)};
            st = compile_core(c, lang, expr, nops, ops, out_fmt, text, &grq, out, err);
            if (st != SC_OK && st != SC_NOMEM) {   /* (an order the checks refuse) */
                sc_error_clear(err);
                st = SC_OK;
            }
        }
    }
    sc_free(&c->ctx, r);
    return st;
}

static sc_status compile_core(sc_compiler *c, sc_expr_lang lang, const char *expr,
                              int32_t nops, const sc_tensor *ops, const sc_format *out_fmt,
                              const char *schedule, const request *rq, const sc_kernel **out,
                              sc_error *err)
{
    *out = NULL;
    sc_error_clear(err);
    if (!c || !expr || (nops > 0 && !ops) || nops < 0)
        return sc_fail(err, SC_USER, "driver", "sc_compile: missing argument");
    if (nops > SC_DRV_MAX_OPS)
        return sc_fail(err, SC_UNSUPPORTED, "driver", "more than %d operands", SC_DRV_MAX_OPS);
    sc_arena arena;
    sc_arena_init(&arena, &c->ctx);
    sc_cg_buf dump;
    sc_cg_buf_init(&dump, &c->ctx);
    char *src = NULL;
    sc_kernel *k = NULL;
    sc_status st;
    double t0 = sc_drv_now_us(), t1;

    /* expr */
    sc_expr e;
    if (lang == SC_EXPR_LANG_EINSUM) {
        int32_t orders[SC_DRV_MAX_OPS];
        for (int32_t t = 0; t < nops; t++)
            orders[t] = ops[t].fmt.order;
        st = sc_expr_parse_einsum(&arena, expr, nops, orders, &e, err);
    } else {
        st = sc_expr_parse_index(&arena, expr, &e, err);
    }
    if (st != SC_OK)
        goto done;
    char canon[1024];
    if (sc_expr_print(&e, canon, sizeof canon) >= sizeof canon) {
        st = sc_fail(err, SC_UNSUPPORTED, "driver", "expression longer than %zu characters",
                     sizeof canon - 1);
        goto done;
    }

    /* lower: problem and output format */
    sc_lower_problem p;
    if ((st = sc_lower_prepare(&arena, &e, nops, ops, &p, err)) != SC_OK)
        goto done;
    if ((st = sc_lower_set_output(&p, out_fmt, err)) != SC_OK)
        goto done;
    p.convert_once = c->convert_once;

    /* schedule */
    sc_sched s;
    if ((st = sc_sched_parse(&e, schedule, &s, err)) != SC_OK)
        goto done;
    s.relayout = rq->relayout;
    if (s.norder == 0) {
        sc_sched a;
        if ((st = sc_sched_auto(&p, &a, err)) != SC_OK)
            goto done;
        s.norder = a.norder;
        memcpy(s.order, a.order, sizeof s.order);
    }
    if ((st = sc_sched_check(&p, &s, err)) != SC_OK)
        goto done;
    s.vec_bytes = c->vec_bytes;
    s.gathers = rq->gathers < 0 ? c->gathers : rq->gathers != 0;
    if (rq->sizes)
        sc_lower_fix_extents(&p, s.norder > 0 ? s.order[0] : -1);
    char stext[512];
    sc_sched_print(&e, &s, stext, sizeof stext);
    t1 = sc_drv_now_us();

    /* key: everything that shapes the generated code */
    sc_jit_key key = kernel_key(&e, canon, nops, ops, &p, &s, stext);
    const sc_kernel *hit = rq->want == WANT_SOURCE ? NULL : sc_drv_lookup(c, key);
    if (hit) {
        *out = hit;
        st = SC_OK;
        goto done;
    }
    if (rq->want == WANT_AOT_ONLY && !sc_drv_aot_has(c, key)) {
        st = SC_OK;   /* (*out NULL: nothing to build) */
        goto done;
    }

    /* miss: build the kernel */
    k = new_kernel(c, &p, ops, &s, stext, err);
    if (!k) {
        st = SC_NOMEM;
        goto done;
    }
    k->key = key;
    char hex[33], sym[48];
    sc_jit_key_hex(key, hex);
    snprintf(sym, sizeof sym, "sc_kernel_%.24s", hex);

    sc_cg_printf(&dump, "expression: %s\n", canon);
    for (int32_t t = 0; t < nops; t++) {
        char ft[160];
        fmt_text(&ops[t].fmt, ft, sizeof ft);
        sc_cg_printf(&dump, "operand %s: %s, %s, %s indices, nnz %lld\n", e.operands[t].name, ft,
                     sc_dtype_name(ops[t].dtype), sc_index_name(ops[t].index_type),
                     (long long)ops[t].nvals);
        if ((s.transpose >> t) & 1) {
            /* same: only uniqueness changed (made_unique), not the level order; dense: a
             * dense operand relaid (sc_sched_relayout) */
            bool same = true, dense = true;
            for (int32_t l = 0; l < ops[t].fmt.order; l++) {
                same &= s.tfmt[t].lvl2dim[l] == ops[t].fmt.lvl2dim[l];
                dense &= s.tfmt[t].kind[l] == SC_LEVEL_DENSE;
            }
            fmt_text(&s.tfmt[t], ft, sizeof ft);
            sc_cg_printf(&dump, same ? "  converted before running to %s (unique coordinates, so that "
                                       "the outer loop runs in parallel)\n"
                         : dense ? "  transposed before running to %s (so that the innermost loop "
                                   "reads it with unit stride)\n"
                                 : "  transposed before running to %s (discordant with the loop order)\n",
                         ft);
        }
    }
    {
        char ft[160];
        fmt_text(&p.out_fmt, ft, sizeof ft);
        sc_cg_printf(&dump, "output %s: %s%s, %s indices\n", e.out.name, ft,
                     out_fmt ? "" : " (inferred)", sc_index_name(p.out_itype));
    }
    sc_cg_printf(&dump, "loop order:");
    for (int32_t d = 0; d < s.norder; d++)
        sc_cg_printf(&dump, " %s", e.vars[s.order[d]].name);
    sc_cg_printf(&dump, "\nschedule: %s\n", stext);
    sc_cg_printf(&dump, "vectors: %d bytes\n", (int)s.vec_bytes);
    sc_cg_printf(&dump, "gathers: %s\n", s.gathers ? "fast" : "slow");
    int nfixed = 0;
    for (int32_t v = 0; v < p.nvars; v++)
        if (p.fixed[v] > 0)
            sc_cg_printf(&dump, "%s%s = %lld", nfixed++ ? ", " : "written for ", e.vars[v].name,
                         (long long)p.fixed[v]);
    if (nfixed)
        sc_cg_printf(&dump, " (other sizes of %s compile their own kernel)\n", nfixed > 1 ? "these" : "it");
    sc_lower_replace_formats(&p, s.transpose, s.tfmt);
    if (c->debug) {
        int8_t nb[SC_LOWER_MAX_ACCESSES] = {0};
        for (int32_t d = 0; d < s.norder; d++) {
            sc_lower_lattice lat;
            if (sc_lower_lattice_at(&p, p.rhs, s.order[d], d == 0 ? nb : NULL, &lat, NULL) == SC_OK) {
                char lt[256];
                sc_lower_lattice_text(&p, &lat, lt, sizeof lt);
                sc_cg_printf(&dump, "[debug] lattice at %s (outermost view): %s\n",
                             e.vars[s.order[d]].name, lt);
            }
        }
        sc_cg_printf(&dump, "[debug] parse+lower+schedule: %.1f us\n", t1 - t0);
    }

    double t2 = sc_drv_now_us();
    sc_ir_func fn;
    if ((st = sc_lower_build(&arena, &p, &s, sym, &fn, err)) != SC_OK)
        goto done;
    if ((st = sc_ir_verify(&fn, err)) != SC_OK)
        goto done;
    double t3 = sc_drv_now_us();
    if (c->debug) {
        size_t need = sc_ir_print(&fn, NULL, 0) + 1;
        char *irt = sc_arena_alloc(&arena, need, err);
        if (!irt) {
            st = SC_NOMEM;
            goto done;
        }
        sc_ir_print(&fn, irt, need);
        sc_cg_printf(&dump, "[debug] loop IR (%.1f us):\n", t3 - t2);
        sc_cg_append(&dump, irt, need - 1);
    }
    size_t srclen;
    if ((st = sc_cg_emit(&c->ctx, &fn, &src, &srclen, err)) != SC_OK)
        goto done;
    double t4 = sc_drv_now_us();
    if (rq->want == WANT_SOURCE) {
        rq->source->key = key;
        rq->source->hash = sc_source_hash(src, srclen);
        memcpy(rq->source->symbol, sym, sizeof rq->source->symbol);
        rq->source->text = src;
        rq->source->len = srclen;
        src = NULL;
        st = SC_OK;
        goto done;
    }
    sc_rt_kernel ahead = sc_drv_aot_find(c, key, src, srclen);
    if (!ahead && rq->want == WANT_AOT_ONLY) {
        *out = NULL;
        st = SC_OK;
        goto done;
    }
    k->front_us = t4 - t0;
    if (c->debug)
        sc_cg_printf(&dump, "[debug] codegen %.1f us\n", t4 - t3);
    if (ahead)
        sc_cg_printf(&dump, "ahead of time: built with scorch (no C compiler runs)\n");
    if (ahead && rq->instead)
        sc_cg_printf(&dump, "the scheduler's choice, %s, is not built in and no C compiler "
                            "runs here: this built-in kernel serves instead\n", rq->instead);
    sc_cg_printf(&dump, "generated C (%s):\n", sym);
    sc_cg_append(&dump, src, srclen);
    k->explain = sc_cg_buf_take(&dump, NULL, err);
    if (!k->explain) {
        st = SC_NOMEM;
        goto done;
    }
    if (ahead) {
        k->fn = ahead;
        k->ahead = true;
    } else {
        sc_jit_fn jf = NULL;
        if (rq->later && c->naot && has_fixed(&p)) {
            /* written for sizes, and only a generic kernel is at hand without the
             * compiler: that one runs now, this one compiles in the background */
            if ((st = sc_jit_cached(c->jit, src, srclen, sym, &jf, err)) != SC_OK)
                goto done;
            const sc_kernel *g = NULL;
            request grq = {.want = WANT_AOT_ONLY, .gathers = rq->gathers};
            if (!jf && (st = compile_core(c, lang, expr, nops, ops, out_fmt, schedule, &grq,
                                          &g, err)) != SC_OK)
                goto done;
            if (g) {
                st = sc_drv_later_start(c, k, src, srclen, sym, rq->later, err);
                k = NULL;
                src = NULL;
                *out = st == SC_OK ? g : NULL;
                goto done;
            }
        }
        if (!jf && c->naot && !schedule && rq->want == WANT_KERNEL &&
            (st = sc_jit_ready(c->jit, err)) != SC_OK) {
            /* no C compiler here: a built-in kernel of another loop order serves, else
             * the compiler's error stands */
            const sc_kernel *g = NULL;
            sc_error gerr;
            sc_error_clear(&gerr);
            if (builtin_in_other_order(c, lang, expr, nops, ops, out_fmt, &e, &p, stext, rq, &g,
                                       &gerr) == SC_OK && g) {
                sc_error_clear(err);
                *out = g;
                st = SC_OK;
            }
            goto done;
        }
        if (!jf && (st = sc_jit_get(c->jit, src, srclen, sym, &jf, err)) != SC_OK)
            goto done;
        k->fn = (sc_rt_kernel)jf;
    }
    k->jit_us = sc_drv_now_us() - t4;
    *out = sc_drv_insert(c, k, err);
    k = NULL;
    st = *out ? SC_OK : SC_NOMEM;
done:
    if (k)
        sc_drv_kernel_free(c, k);
    sc_free(&c->ctx, src);
    sc_cg_buf_release(&dump);
    sc_arena_release(&arena);
    if (st != SC_OK)
        *out = NULL;
    return st;
}
