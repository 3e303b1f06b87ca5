/*
 * test_compile.c — end to end: expression + formats → driver → lower → schedule → ir →
 * codegen → jit → run, compared with a dense reference computed here in plain C (a direct
 * interpreter of the parsed expression over every index assignment).  Seeded random
 * operands with empty rows, f32, f64, int32 and int64 values (integers exact), int32 and
 * int64 indices.  One compiler (temp
 * cache dir, cheap flags) is shared by the whole file.
 */
#define _GNU_SOURCE
#include "check.h"
#include "tmpdir.h"
#include "driver/sc_driver.h"
#include "expr/sc_expr.h"
#include "format/sc_format.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static sc_ctx ctx;
static sc_compiler *comp;
static char root[512];

/* ---- dense reference ---- */

static double eval_node(const sc_expr_node *n, double *const *data, int64_t *const *strides,
                        const int64_t *val)
{
    switch (n->kind) {
    case SC_EXPR_ACCESS: {
        int64_t off = 0;
        for (int32_t d = 0; d < n->order; d++)
            off += val[n->idx[d]] * strides[n->operand][d];
        return data[n->operand][off];
    }
    case SC_EXPR_LITERAL:
        return n->integer ? (double)n->ival : n->value;
    case SC_EXPR_NEG:
        return -eval_node(n->a, data, strides, val);
    case SC_EXPR_MUL:
        return eval_node(n->a, data, strides, val) * eval_node(n->b, data, strides, val);
    case SC_EXPR_ADD:
        return eval_node(n->a, data, strides, val) + eval_node(n->b, data, strides, val);
    default:
        return eval_node(n->a, data, strides, val) - eval_node(n->b, data, strides, val);
    }
}

/* An empty dimension in a case's dims (0 ends the list). */
#define Z (-2)

typedef struct tcase {
    const char *expr;
    int lang; /* 0 einsum, 1 index */
    int nops;
    const char *fmt[4];   /* format spec per operand ("dense", "csr", "dense_cm" = column-major) */
    int64_t dims[4][4];
    const char *out_fmt;  /* NULL: inferred */
    const char *sched;    /* NULL: automatic */
} tcase;

static void parse_fmt(const char *spec, int32_t order, sc_format *f)
{
    if (!strcmp(spec, "dense_cm")) {
        sc_fmt_parse("dense", order, f, NULL);
        f->lvl2dim[0] = 1;
        f->lvl2dim[1] = 0;
        return;
    }
    sc_error err;
    if (sc_fmt_parse(spec, order, f, &err) != SC_OK)
        fprintf(stderr, "bad format %s: %s\n", spec, err.msg);
}

/* The dense result of the last successful run_case (malloc'd; owned here). */
static double *last_result;
static int64_t last_size;

static uint64_t rng;
static double urand(void)
{
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static bool is_int(sc_dtype dt) { return dt == SC_DTYPE_I32 || dt == SC_DTYPE_I64; }

static void put_value(void *buf, int64_t i, sc_dtype dt, double v)
{
    switch (dt) {
    case SC_DTYPE_F32: ((float *)buf)[i] = (float)v; break;
    case SC_DTYPE_F64: ((double *)buf)[i] = v; break;
    case SC_DTYPE_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    default: ((int64_t *)buf)[i] = (int64_t)v; break;
    }
}

static double get_value(const void *buf, int64_t i, sc_dtype dt)
{
    switch (dt) {
    case SC_DTYPE_F32: return ((const float *)buf)[i];
    case SC_DTYPE_F64: return ((const double *)buf)[i];
    case SC_DTYPE_I32: return (double)((const int32_t *)buf)[i];
    default: return (double)((const int64_t *)buf)[i];
    }
}

/* Run one case; returns 1 when it matched the reference.  Writes the kernel to *kout. */
static int run_case(const tcase *tc, sc_dtype dt, sc_index_type it, uint64_t seed,
                    const sc_kernel **kout)
{
    rng = seed * 0x9E3779B97F4A7C15ULL + 1;
    int ok = 0;
    sc_error err;
    sc_arena arena;
    sc_arena_init(&arena, &ctx);
    sc_expr e;
    int32_t orders[4];
    int64_t dims[4][4];
    for (int t = 0; t < tc->nops; t++) {
        orders[t] = 0;
        while (orders[t] < 4 && tc->dims[t][orders[t]] != 0) {
            dims[t][orders[t]] = tc->dims[t][orders[t]] == Z ? 0 : tc->dims[t][orders[t]];
            orders[t]++;
        }
    }
    sc_status st = tc->lang == 0 ? sc_expr_parse_einsum(&arena, tc->expr, tc->nops, orders, &e, &err)
                                 : sc_expr_parse_index(&arena, tc->expr, &e, &err);
    if (st != SC_OK) {
        fprintf(stderr, "%s: parse: %s\n", tc->expr, err.msg);
        sc_arena_release(&arena);
        return 0;
    }
    double *data[4] = {0};
    int64_t strides[4][4], *sp[4];
    sc_tensor ops[4];
    memset(ops, 0, sizeof ops);
    const int64_t *dimp[4];
    for (int t = 0; t < tc->nops; t++) {
        int64_t n = 1;
        for (int d = orders[t]; d-- > 0;) {
            strides[t][d] = n;
            n *= dims[t][d];
        }
        sp[t] = strides[t];
        dimp[t] = dims[t];
        data[t] = calloc((size_t)(n ? n : 1), sizeof(double));
        bool sparse = strcmp(tc->fmt[t], "dense") && strcmp(tc->fmt[t], "dense_cm");
        for (int64_t i = 0; i < n; i++) {
            int64_t row = orders[t] > 0 ? i / strides[t][0] : 0;
            bool empty = sparse && row % 3 == 1;
            double r = urand();
            if (!empty && (!sparse || r < 0.35))
                data[t][i] = is_int(dt) ? (double)((int)(urand() * 16) - 8)
                                        : (double)((int)(urand() * 16) - 8) / 4.0 + 0.25;
        }
        sc_format f;
        parse_fmt(tc->fmt[t], orders[t], &f);
        void *buf = malloc((size_t)(n ? n : 1) * 8);
        for (int64_t i = 0; i < n; i++)
            put_value(buf, i, dt, data[t][i]);
        if (sc_fmt_from_dense(&ctx, orders[t], dims[t], buf, dt, &f, it, &ops[t], &err) != SC_OK)
            fprintf(stderr, "from_dense: %s\n", err.msg);
        free(buf);
    }
    int64_t ext[16];
    if (sc_expr_bind_dims(&e, dimp, false, ext, NULL, &err) != SC_OK) {
        fprintf(stderr, "bind: %s\n", err.msg);
        goto out;
    }
    int64_t osize = 1, ostr[8];
    for (int d = e.out.order; d-- > 0;) {
        ostr[d] = osize;
        osize *= ext[e.lhs->idx[d]];
    }
    double *ref = calloc((size_t)osize, sizeof(double));
    int64_t val[16] = {0};
    int64_t total = 1;
    for (int v = 0; v < e.nvars; v++)
        total *= ext[v];
    for (int64_t c = 0; c < total; c++) {
        int64_t r = c;
        for (int v = e.nvars; v-- > 0;) {
            val[v] = r % ext[v];
            r /= ext[v];
        }
        int64_t off = 0;
        for (int d = 0; d < e.out.order; d++)
            off += val[e.lhs->idx[d]] * ostr[d];
        ref[off] += eval_node(e.rhs, data, sp, val);
    }
    sc_format of, *ofp = NULL;
    if (tc->out_fmt) {
        parse_fmt(tc->out_fmt, e.out.order, &of);
        ofp = &of;
    }
    const sc_kernel *k = NULL;
    st = sc_compile(comp, tc->lang == 0 ? SC_EXPR_LANG_EINSUM : SC_EXPR_LANG_INDEX, tc->expr,
                    tc->nops, ops, ofp, tc->sched, &k, &err);
    if (st != SC_OK) {
        fprintf(stderr, "%s: compile: %s: %s\n", tc->expr, sc_status_name(st), err.msg);
        free(ref);
        goto out;
    }
    if (kout)
        *kout = k;
    if (getenv("SC_SHOW") && dt == SC_DTYPE_F64 && it == SC_INDEX_I32)
        fprintf(stderr, "%s\n", sc_kernel_explain(k));
    const sc_tensor *opp[4] = {&ops[0], &ops[1], &ops[2], &ops[3]};
    sc_tensor res;
    st = sc_kernel_run(k, opp, 2, &res, &err);
    if (st != SC_OK) {
        fprintf(stderr, "%s: run: %s\n", tc->expr, err.msg);
        free(ref);
        goto out;
    }
    if (res.fmt.order > 0 && sc_fmt_validate(&ctx, &res, &err) != SC_OK) {
        fprintf(stderr, "%s: invalid output: %s\n", tc->expr, err.msg);
    } else {
        void *got = malloc((size_t)osize * 8 + 8);
        if (res.fmt.order == 0)
            memcpy(got, res.vals, sc_dtype_size(dt));
        if (res.fmt.order == 0 || sc_fmt_to_dense(&ctx, &res, got, &err) == SC_OK) {
            ok = 1;
            free(last_result);
            last_result = malloc((size_t)osize * sizeof(double) + 8);
            last_size = osize;
            for (int64_t i = 0; i < osize; i++)
                last_result[i] = get_value(got, i, dt);
            double tol = dt == SC_DTYPE_F32 ? 1e-3 : dt == SC_DTYPE_F64 ? 1e-10 : 0;
            for (int64_t i = 0; i < osize; i++) {
                double g = get_value(got, i, dt);
                if (fabs(g - ref[i]) > tol * (1 + fabs(ref[i]))) {
                    fprintf(stderr, "%s [%s %s sched %s]: out[%lld] = %g, expected %g\n", tc->expr,
                            sc_dtype_name(dt), sc_index_name(it), sc_kernel_schedule(k),
                            (long long)i, g, ref[i]);
                    ok = 0;
                    break;
                }
            }
        } else {
            fprintf(stderr, "to_dense: %s\n", err.msg);
        }
        free(got);
    }
    sc_tensor_release(&ctx, &res);
    free(ref);
out:
    for (int t = 0; t < tc->nops; t++) {
        sc_tensor_release(&ctx, &ops[t]);
        free(data[t]);
    }
    sc_arena_release(&arena);
    return ok;
}

static int run_all_types(const tcase *tc)
{
    int ok = 1;
    static const sc_dtype dts[] = {SC_DTYPE_F32, SC_DTYPE_F64};
    static const sc_index_type its[] = {SC_INDEX_I32, SC_INDEX_I64};
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
            ok &= run_case(tc, dts[a], its[b], (uint64_t)(a * 2 + b + 1), NULL);
    /* integer values, where the expression's constants are integers: int32 values with
     * int32 indices, int64 with int64 (the index widths are covered above) */
    if (!strchr(tc->expr, '.')) {
        ok &= run_case(tc, SC_DTYPE_I32, SC_INDEX_I32, 5, NULL);
        ok &= run_case(tc, SC_DTYPE_I64, SC_INDEX_I64, 6, NULL);
    }
    return ok;
}


#define M 7
#define N 9
#define K 5
#define L 4

#define T3 3
static const tcase CASES[] = {
    /* SpMV, SpMM with A in every 2-D format, B row- and column-major */
    {"ij,j->i", 0, 2, {"csr", "dense"}, {{M, N}, {N}}, NULL, NULL},
    {"ij,j->i", 0, 2, {"csc", "dense"}, {{M, N}, {N}}, NULL, NULL},
    {"ij,j->i", 0, 2, {"coo", "dense"}, {{M, N}, {N}}, NULL, NULL},
    {"ij,jk->ik", 0, 2, {"csr", "dense"}, {{M, N}, {N, K}}, NULL, NULL},
    {"ij,jk->ik", 0, 2, {"csc", "dense"}, {{M, N}, {N, K}}, NULL, NULL},
    {"ij,jk->ik", 0, 2, {"coo", "dense"}, {{M, N}, {N, K}}, NULL, NULL},
    {"ij,jk->ik", 0, 2, {"dcsr", "dense"}, {{M, N}, {N, K}}, NULL, NULL},
    {"ij,jk->ik", 0, 2, {"csr", "dense_cm"}, {{M, N}, {N, K}}, NULL, NULL},
    {"ij,jk->ik", 0, 2, {"csc", "dense_cm"}, {{M, N}, {N, K}}, NULL, NULL},
    {"ij,jk->ik", 0, 2, {"coo", "dense_cm"}, {{M, N}, {N, K}}, NULL, NULL},
    {"ij,jk->ik", 0, 2, {"dcsr", "dense_cm"}, {{M, N}, {N, K}}, NULL, NULL},
    /* dense x sparse */
    {"ij,jk->ik", 0, 2, {"dense", "csr"}, {{M, N}, {N, K}}, NULL, NULL},
    {"ij,jk->ik", 0, 2, {"dense", "csc"}, {{M, N}, {N, K}}, NULL, NULL},
    /* SDDMM: output keeps A's pattern */
    {"ij,ik,jk->ij", 0, 3, {"csr", "dense", "dense"}, {{M, N}, {M, K}, {N, K}}, NULL, NULL},
    /* rows >= SC_IR_PAR_MIN: nnz-balanced row ranges on two threads (empty rows too) */
    {"ij,j->i", 0, 2, {"csr", "dense"}, {{301, N}, {N}}, NULL, NULL},
    {"ij,jk->ik", 0, 2, {"csr", "dense"}, {{300, N}, {N, K}}, NULL, NULL},
    {"ij,ik,jk->ij", 0, 3, {"csr", "dense", "dense"}, {{257, N}, {257, K}, {N, K}}, NULL, NULL},
    {"ij,ik,jk->ij", 0, 3, {"coo", "dense", "dense"}, {{M, N}, {M, K}, {N, K}}, NULL, NULL},
    {"ij,ik,jk->ij", 0, 3, {"csc", "dense", "dense"}, {{M, N}, {M, K}, {N, K}}, NULL, NULL},
    /* A A^T */
    {"ij,kj->ik", 0, 2, {"csr", "csr"}, {{M, N}, {M, N}}, NULL, NULL},
    /* elementwise intersection and union across formats */
    {"ij,ij->ij", 0, 2, {"csr", "csc"}, {{M, N}, {M, N}}, NULL, NULL},
    {"ij,ij->ij", 0, 2, {"coo", "csr"}, {{M, N}, {M, N}}, NULL, NULL},
    {"ij,ij->ij", 0, 2, {"dcsr", "dense"}, {{M, N}, {M, N}}, NULL, NULL},
    {"C(i,j) = A(i,j) + B(i,j)", 1, 2, {"csr", "csr"}, {{M, N}, {M, N}}, NULL, NULL},
    {"C(i,j) = A(i,j) + B(i,j)", 1, 2, {"csr", "csc"}, {{M, N}, {M, N}}, NULL, NULL},
    {"C(i,j) = A(i,j) + B(i,j)", 1, 2, {"dcsr", "coo"}, {{M, N}, {M, N}}, NULL, NULL},
    {"C(i,j) = A(i,j) + B(i,j)", 1, 2, {"coo", "csr"}, {{M, N}, {M, N}}, NULL, NULL},
    {"C(i,j) = A(i,j) - B(i,j)", 1, 2, {"csr", "dcsr"}, {{M, N}, {M, N}}, NULL, NULL},
    {"C(i,j) = A(i,j) - B(i,j)", 1, 2, {"csr", "dense"}, {{M, N}, {M, N}}, NULL, NULL},
    {"C(i,j) = 2*A(i,j) + B(i,j)*D(i,j)", 1, 3, {"csr", "csr", "dcsr"}, {{M, N}, {M, N}, {M, N}}, NULL, NULL},
    {"C(i,j) = 2*A(i,j) + B(i,j)*D(i,j)", 1, 3, {"csr", "csc", "dense"}, {{M, N}, {M, N}, {M, N}}, NULL, NULL},
    {"C(i,j) = -A(i,j) + B(i,j)", 1, 2, {"csr", "csr"}, {{M, N}, {M, N}}, "dcsr", NULL},
    /* sums */
    {"ij->i", 0, 1, {"csr"}, {{M, N}}, NULL, NULL},
    {"ij->j", 0, 1, {"csr"}, {{M, N}}, NULL, NULL},
    {"ij->j", 0, 1, {"csr"}, {{M, N}}, "dense", NULL},
    {"ij->", 0, 1, {"csr"}, {{M, N}}, NULL, NULL},
    {"ij->", 0, 1, {"coo"}, {{M, N}}, NULL, NULL},
    /* transpose to a sparse output */
    {"ij->ji", 0, 1, {"csr"}, {{M, N}}, NULL, NULL},
    {"ij->ji", 0, 1, {"csr"}, {{M, N}}, "csr", NULL},
    {"ij->ji", 0, 1, {"coo"}, {{M, N}}, "dcsr", NULL},
    /* outer and inner products */
    {"i,j->ij", 0, 2, {"dense", "dense"}, {{M}, {N}}, NULL, NULL},
    {"i,j->ij", 0, 2, {"csf", "dense"}, {{M}, {N}}, "csr", NULL},
    {"ij,ij->", 0, 2, {"csr", "dense"}, {{M, N}, {M, N}}, NULL, NULL},
    {"ij,ij->", 0, 2, {"csr", "csc"}, {{M, N}, {M, N}}, NULL, NULL},
    /* 3-D CSF */
    {"ijk,k->ij", 0, 2, {"csf", "dense"}, {{M, T3, N}, {N}}, NULL, NULL},
    {"ijk,k->ij", 0, 2, {"csf", "dense"}, {{M, T3, N}, {N}}, "dense", NULL},
    {"ijk,kl->ijl", 0, 2, {"csf", "dense"}, {{M, T3, N}, {N, L}}, NULL, NULL},
    {"ijk,jr,kr->ir", 0, 3, {"csf", "dense", "dense"}, {{M, T3, N}, {T3, L}, {N, L}}, NULL, NULL},
    {"ijk,ijk->ijk", 0, 2, {"csf", "csf"}, {{M, T3, N}, {M, T3, N}}, NULL, NULL},
    {"C(i,j,k) = A(i,j,k) + B(i,j,k)", 1, 2, {"csf", "coo"}, {{M, T3, N}, {M, T3, N}}, NULL, NULL},
    /* batched, chain */
    {"bij,bjk->bik", 0, 2, {"csf", "dense"}, {{T3, M, N}, {T3, N, K}}, NULL, NULL},
    {"bij,bjk->bik", 0, 2, {"dcc", "dense"}, {{T3, M, N}, {T3, N, K}}, NULL, NULL},
    {"ij,jk,kl->il", 0, 3, {"csr", "dense", "dense"}, {{M, N}, {N, K}, {K, L}}, NULL, NULL},
    /* COO outputs, multi-level workspaces, several dense leading output levels */
    {"ij,jk->ik", 0, 2, {"csr", "csr"}, {{M, N}, {N, K}}, "coo", NULL},
    {"C(i,j) = A(i,j) + B(i,j)", 1, 2, {"csr", "dcsr"}, {{M, N}, {M, N}}, "coo", NULL},
    {"ij->j", 0, 1, {"csr"}, {{M, N}}, "coo", NULL},
    {"il,ljk->ijk", 0, 2, {"csr", "csf"}, {{M, 4}, {4, 3, N}}, "dcc", NULL},
    {"il,ljk->ijk", 0, 2, {"csr", "csf"}, {{M, 4}, {4, 3, N}}, "csf", NULL},
    {"il,ljk->ijk", 0, 2, {"csr", "csf"}, {{M, 4}, {4, 3, N}}, "coo", NULL},
    {"ijk,ijk->ijk", 0, 2, {"csf", "dense"}, {{M, T3, N}, {M, T3, N}}, "ddc", NULL},
    {"ijk,k->ij", 0, 2, {"coo", "dense"}, {{M, T3, N}, {N}}, NULL, NULL},
    {"C(i,j) = A(i,j) * B(j) + D(i,j)", 1, 3, {"csr", "dense", "csc"}, {{M, N}, {N}, {M, N}}, NULL, NULL},
    {"C(i,j) = A(i,j) + 1.5", 1, 1, {"csr"}, {{M, N}}, NULL, NULL},
    /* four-way union and a mixed product/difference of dcsr operands (deep lattices) */
    {"C(i,j) = A(i,j) + B(i,j) + D(i,j) + E(i,j)", 1, 4, {"dcsr", "dcsr", "dcsr", "dcsr"},
     {{M, N}, {M, N}, {M, N}, {M, N}}, NULL, NULL},
    {"C(i,j) = A(i,j) * B(i,j) - D(i,j)", 1, 3, {"dcsr", "csr", "coo"}, {{M, N}, {M, N}, {M, N}}, NULL, NULL},
    {"C(i,j,k) = A(i,j,k) + B(i,j,k) + D(i,j,k)", 1, 3, {"csf", "csf", "coo"},
     {{M, T3, N}, {M, T3, N}, {M, T3, N}}, NULL, NULL},
    {"C(i,j,k) = A(i,j,k) + B(i,j,k) - D(i,j,k)", 1, 3, {"csf", "coo", "dcc"},
     {{M, T3, N}, {M, T3, N}, {M, T3, N}}, "dense", NULL},
    {"C(i,j) = A(i,j) + B(i,j) + D(i,j) + E(i,j)", 1, 4, {"dcsr", "dcsr", "dcsr", "dense"},
     {{M, N}, {M, N}, {M, N}, {M, N}}, NULL, NULL},
    {"C(i,j) = A(i,j) * (B(i,j) + D(i,j) + E(i,j))", 1, 4, {"dcsr", "dcsr", "coo", "dcsr"},
     {{M, N}, {M, N}, {M, N}, {M, N}}, NULL, NULL},
    /* enough rows (>= SC_IR_PAR_MIN) for the parallel paths to run on several threads */
    {"ij,j->i", 0, 2, {"csr", "dense"}, {{300, 40}, {40}}, NULL, NULL},
    {"ij,jk->ik", 0, 2, {"csr", "dense"}, {{300, 40}, {40, 6}}, NULL, NULL},
    {"ij,jk->ik", 0, 2, {"csr", "csr"}, {{300, 40}, {40, 30}}, NULL, NULL},
    {"ij,jk->ik", 0, 2, {"csr", "csc"}, {{300, 40}, {40, 30}}, "csr", "order(i,k,j)"},
    {"ij,ik,jk->ij", 0, 3, {"csr", "dense", "dense"}, {{300, 40}, {300, 3}, {40, 3}}, NULL, NULL},
    /* COO: thread shares of the positions cut between runs of a row (sc_ir_runsplit) */
    {"ij,ik,jk->ij", 0, 3, {"coo", "dense", "dense"}, {{300, 40}, {300, 16}, {40, 16}}, NULL, NULL},
    {"C(i,j) = A(i,j) + B(i,j)", 1, 2, {"csr", "csr"}, {{300, 40}, {300, 40}}, NULL, NULL},
    {"ijk,ijk->ijk", 0, 2, {"csf", "dense"}, {{200, 2, 9}, {200, 2, 9}}, "ddc", NULL},
    /* empty and 1x1 */
    {"ij,jk->ik", 0, 2, {"csr", "dense"}, {{1, 1}, {1, 1}}, NULL, NULL},
    {"ij,jk->ik", 0, 2, {"csr", "csr"}, {{Z, 3}, {3, 2}}, NULL, NULL},
};

static const char *const SPGEMM_FMT[] = {"csr", "csc", "dcsr"};
static const char *const SPGEMM_OUT[] = {"csr", "dcsr", "dense"};


/* Forced alternative schedules of one expression: each against the reference and all
 * against the first one. */
static void alternatives(const tcase *base, const char *const *scheds, int n)
{
    double *first = NULL;
    int64_t fsize = 0;
    for (int i = 0; i < n; i++) {
        tcase tc = *base;
        tc.sched = scheds[i];
        const sc_kernel *k = NULL;
        int ok = run_case(&tc, SC_DTYPE_F64, SC_INDEX_I32, 7, &k);
        if (!ok)
            fprintf(stderr, "FAILED: %s under schedule '%s'\n", tc.expr, scheds[i]);
        CHECK(ok);
        if (!ok)
            continue;
        /* the kernel ran the schedule it was asked for (auto fills parallel/workspace) */
        CHECK(strncmp(sc_kernel_schedule(k), scheds[i], strlen("order(i,j,k)")) == 0 ||
              strstr(scheds[i], "order") == NULL);
        if (!first) {
            first = last_result;
            fsize = last_size;
            last_result = NULL;
            continue;
        }
        bool same = fsize == last_size;
        for (int64_t j = 0; same && j < fsize; j++)
            same = fabs(first[j] - last_result[j]) <= 1e-9 * (1 + fabs(first[j]));
        if (!same)
            fprintf(stderr, "%s: schedule '%s' disagrees with '%s'\n", tc.expr, scheds[i], scheds[0]);
        CHECK(same);
    }
    free(first);
}

static void test_schedules(void)
{
    static const char *const spmm[] = {
        "order(i,j,k) parallel(i)", "order(i,j,k) parallel(none)", "order(i,k,j)",
        "order(k,i,j) parallel(k)", "order(j,i,k)", "order(j,k,i)", "order(k,j,i)"};
    tcase a = {"ij,jk->ik", 0, 2, {"csr", "dense"}, {{M, N}, {N, K}}, NULL, NULL};
    alternatives(&a, spmm, 7);
    static const char *const spgemm[] = {
        "order(i,j,k) workspace(k)", "order(i,j,k) parallel(none) workspace(k)", "order(i,k,j)",
        "order(i,k,j) parallel(none)"};
    tcase b = {"ij,jk->ik", 0, 2, {"csr", "csr"}, {{M, N}, {N, K}}, "csr", NULL};
    alternatives(&b, spgemm, 4);
    tcase b2 = {"ij,jk->ik", 0, 2, {"dcsr", "csc"}, {{M, N}, {N, K}}, "dcsr", NULL};
    static const char *const spgemm2[] = {"order(i,j,k)", "order(i,k,j)"};
    alternatives(&b2, spgemm2, 2);
    static const char *const sddmm[] = {"order(i,j,k)", "order(i,k,j) workspace(j)",
                                        "order(i,j,k) parallel(none)"};
    tcase c = {"ij,ik,jk->ij", 0, 3, {"csr", "dense", "dense"}, {{M, N}, {M, K}, {N, K}}, NULL, NULL};
    alternatives(&c, sddmm, 3);
    static const char *const add[] = {"order(i,j)", "order(j,i)"};
    tcase d = {"C(i,j) = A(i,j) + B(i,j)", 1, 2, {"csr", "dcsr"}, {{M, N}, {M, N}}, "dense", NULL};
    alternatives(&d, add, 2);
    static const char *const ttm[] = {"order(i,j,k,l)", "order(i,j,l,k)", "order(l,i,j,k)"};
    tcase e = {"ijk,kl->ijl", 0, 2, {"csf", "dense"}, {{M, 3, N}, {N, L}}, "dense", NULL};
    alternatives(&e, ttm, 3);
}

/* Pattern goldens: key lines of the generated C, not whole files. */
static void golden(const tcase *tc, const char *const *needles, int n)
{
    const sc_kernel *k = NULL;
    CHECK(run_case(tc, SC_DTYPE_F32, SC_INDEX_I32, 3, &k));
    if (!k)
        return;
    const char *src = strstr(sc_kernel_explain(k), "generated C");
    CHECK(src != NULL);
    for (int i = 0; src && i < n; i++) {
        bool found = strstr(src, needles[i]) != NULL;
        if (!found)
            fprintf(stderr, "golden %s: missing '%s'\n", tc->expr, needles[i]);
        CHECK(found);
    }
}

/* Lines that must not appear in the generated C. */
static void absent(const tcase *tc, const char *const *needles, int n)
{
    const sc_kernel *k = NULL;
    CHECK(run_case(tc, SC_DTYPE_F32, SC_INDEX_I32, 3, &k));
    if (!k)
        return;
    const char *src = strstr(sc_kernel_explain(k), "generated C");
    CHECK(src != NULL);
    for (int i = 0; src && i < n; i++) {
        bool found = strstr(src, needles[i]) != NULL;
        if (found)
            fprintf(stderr, "golden %s: unexpected '%s'\n", tc->expr, needles[i]);
        CHECK(!found);
    }
}

static void test_goldens(void)
{
    tcase spmv = {"ij,j->i", 0, 2, {"csr", "dense"}, {{M, N}, {N}}, NULL, NULL};
    static const char *const g1[] = {
        "#pragma omp parallel num_threads(nt_) if(sc_k_par_worth((Ni_",
        "int64_t i_", /* nnz-balanced rows: bounds by binary search on A's pos */
        "= sc_k_split32(A1_pos_0, i_",
        "_t + 1, i_",
        "for (int64_t A1_p_",
        "= A1_pos_0[p_",
        "int64_t j_",
        "= A1_crd_1[A1_p_",
        "float acc_",
        "acc_", "+= (v_",
        "pu_", " += 4) {", /* four independent accumulators per row */
        "out_vals_", "sc_k_alloc_raw(env, out_size_", /* every row stored once: no zero fill */
        /* x's element 32 entries on, where x outgrows L2 (crd read within its length) */
        "if ((262144 <= Nj_", "__builtin_prefetch(&B_vals_", "[sc_min((pu_", " + 32), (A1_len_",
        /* rows in pairs only in a thread's range of rows averaging 16 entries */
        "] >= (int64_t)16 * (i_"};
    golden(&spmv, g1, (int)(sizeof g1 / sizeof g1[0]));
    /* where gathers are slow (the sweep's setting) no row is gathered, short ones neither */
    static const char *const no_gathers[] = {"sc_vgathern_f32q(B_vals_", "sc_vgathern_f32h(B_vals_"};
    absent(&spmv, no_gathers, 2);
    tcase spmm = {"ij,jk->ik", 0, 2, {"csr", "dense"}, {{M, N}, {N, K}}, NULL, NULL};
    static const char *const g5[] = {
        "sc_vf32 acc_", /* register tiles of the dense output row: vector accumulators */
        "+= 64) {", /* full tiles of 4 vectors, then the rest in halving tiles */
        " + 32) <= Nk_", " + 16) <= Nk_",
        "+= (v_", "(*(const sc_vf32u *)&B_vals_",
        "*(sc_vf32u *)&out_vals_",
        "sc_vloadn_f32(&B_vals_", "sc_vstoren_f32(&out_vals_", /* one partial vector tile */
        "sc_k_alloc_raw(env, out_size_",
        " += 2) {", /* one-vector tiles: two accumulators over alternate nonzeros */
        /* B's rows beyond the cache, or of one line beyond 32 MiB, or of at most 256
         * bytes beyond 1.5 MiB a thread, far apart: the tile's lines of the row 32
         * entries on */
        "int rowpf_", "= ((((env->cache_bytes <= (Nj_", "* 4) <= 64) && (33554432 <= (Nj_",
        "* 4) <= 256) && (((int64_t)nt_ * 1572864) <= (Nj_",
        "(4096 * (", "int64_t pfrow_", "= A1_crd_1[sc_min((A1_p_",
        "__builtin_prefetch(&B_vals_4[((pfrow_"};
    golden(&spmm, g5, 19);
    static const char *const g5n[] = {")] += (v_", /* no read-modify-write of out */
                                      "sc_vf32h acc_", "float acc_"}; /* nor narrower tiles */
    absent(&spmm, g5n, 3);
    static const char *const g1n[] = {"#pragma omp parallel for", "schedule(dynamic"};
    absent(&spmv, g1n, 2);
    /* the entries' stream prefetch is SDDMM's only (see streamed in lower/build.c) */
    static const char *const gsn[] = {" + 1024)"};
    absent(&spmv, gsn, 1);
    absent(&spmm, gsn, 1);
    tcase sddmm = {"ij,ik,jk->ij", 0, 3, {"csr", "dense", "dense"}, {{M, N}, {M, K}, {N, K}}, NULL, NULL};
    static const char *const g2[] = {
        "/* the output has A's pattern: no count phase, its pos and crd arrays shared */",
        "out->pos[1] = (void *)A1_pos_0;", "out->crd[1] = (void *)A1_crd_1;",
        "= A1_pos_0[r_",
        "= sc_k_split32(A1_pos_0, i_",
        "#pragma omp barrier",
        "for (int64_t k_",
        "+= (B_vals_", /* A's value hoisted out of the dot product */
        "C_vals_",
        "out_vals_", "= (v_",
        "sc_vf32 vacc_", "sc_hsum_f32(", /* the dot product in vectors, then a lane sum */
        "(*(const sc_vf32u *)&C_vals_",
        /* groups of 8 entries: 8 vector sums, one transpose-and-add tree of lane sums
         * whose last step puts them in the entries' order, the reduction's last partial
         * vector masked; the 8 values times the 8 sums stored as one vector */
        " += 8) {", "= sc_fold8_f32(vacc_", "= sc_fold0_f32(fold_", "#define sc_fold4_f64(x, y)",
        "#define sc_fold0_f32(x, y) (SC_K_SHUF(x, y, sc_vi32, 0, 2, 4, 6, 8, 10, 12, 14, 0, 2,",
        "(Nk_10 - N1_", "sc_vstoren_f32(&out_vals_15[n_", "(sc_vloadn_f32(&A_vals_3[p_",
        "], 8) * fold_", "n_20 += 8;",
        /* runs of rows under 8 entries as one segment, each entry's row by a cursor */
        "] >= 8) {", "int64_t re_", "while ((A1_pos_0[(r_", "B_vals_4[((row_",
        /* K (summed, read by dense operands only) is a constant of the kernel */
        "const int64_t Nk_", " = 5;",
        /* C's whole rows (at most 512 bytes) prefetched, in the runs of short rows too */
        "* 4) <= 512)", "__builtin_prefetch(&C_vals_6[((pfrow_", "+ pfo_",
        /* A's crd and vals, and out's vals for writing, requested 1024 entries past a
         * row's (or a run's) first, inside the arrays */
        "if (((A1_pos_0[i_17] + 1024) < A1_len_2)) {", "__builtin_prefetch(&A1_crd_1[(A1_pos_0[i_17] + 1024)]);",
        "__builtin_prefetch(&A_vals_3[(A1_pos_0[i_17] + 1024)]);",
        "__builtin_prefetch(&out_vals_15[(A1_pos_0[i_17] + 1024)], 1);"};
    golden(&sddmm, g2, 37);
    /* SpMM's K (only the dense operand reads it) is a constant of the kernel too */
    static const char *const g5f[] = {"const int64_t Nk_", " = 5;"};
    golden(&spmm, g5f, 2);
    /* no count, no index array of its own: not allocated, not written */
    static const char *const g2n[] = {"phase 1: count", "cnt_", "out_crd_", "out_pos_"};
    absent(&sddmm, g2n, 4);
    /* an intersection of two sparse operands keeps the count phase */
    tcase mul = {"ij,ij->ij", 0, 2, {"csr", "csr"}, {{M, N}, {M, N}}, NULL, NULL};
    static const char *const g6[] = {"/* phase 1: count the entries of each row */"};
    golden(&mul, g6, 1);
    tcase spgemm = {"ij,jk->ik", 0, 2, {"csr", "csr"}, {{M, N}, {N, K}}, NULL, NULL};
    static const char *const g3[] = {
        /* one pass: rows bounded by their multiply counts, no count phase */
        "/* phase 1: bound the entries of each row by its multiply count (and by the row's extent) */",
        /* in parallel, A's rows split by their entries */
        "extent) */\n    #pragma omp parallel num_threads(nt_) if(sc_k_par_worth((Ni_", "= sc_k_split32(A1_pos_",
        "= (sc_min(cnt_",
        "+= (B1_end_",
        "#pragma omp parallel num_threads(nt_) if(((128 <= nrows_",
        "<= bound_", /* one thread when the multiply count is small */
        "= sc_k_split64(cnt_", /* threads' rows balanced by multiply count */
        "uint64_t *restrict ws_bits_", /* two-level bitmap, zero-filled once per thread */
        "sc_k_alloc(env, ((ws_s_",
        /* a bitmap row marks with no branch: the coordinate written at the slot's end,
         * the end moved by whether it was new, the value added to the zeroed workspace */
        "= sc_k_mark_new(ws_bits_", "n_61 += new_", "ws_n_54 += new_",
        "sc_k_collect32(out_crd_",  /* ordered in the output's own slot */
        ", ws_s_13);",              /* of the workspace's extent */
        /* a row of at most 8 products (and fewer than the columns) appends them and
         * sorts its slot, summing equal coordinates: no workspace; in vector registers
         * where the target has AVX-512 (the helper for at most 8) */
        "if (((bnd_", " <= 8) && (bnd_", " < Nk_", "= sc_k_sortsum8_32_f32(out_crd_",
        ", out_vals_", ", n0_",
        "] = (v_",                  /* first touch assigns */
        "] += (v_",
        "row_start_", "sc_k_alloc_raw(env, bound_",
        "/* close the gaps between the threads' runs of rows: each run moved in blocks */",
        /* a run is moved when the next row's slot does not follow it, once it holds
         * 16384 entries where it moves sequentially (so that it moves while still in
         * cache), and at the end */
        "if (((s_", " != (run_src_", " + run_len_", ")) || ((16384 <= run_len_", "run_dst_", " = nnz_",
        /* a run moved down by 16384 or more, of 65536 or more entries, moves on all
         * threads in rounds of the gap's length */
        "if (((16384 <= gap_", ") && (65536 <= run_len_", "; c0_", " += gap_",
        "#pragma omp parallel for num_threads(nt_) if((cn_",
        "#pragma omp atomic write",
        /* B's row 4 nonzeros of A ahead, its pos entry 8 ahead, running on into A's
         * next rows (up to A's number of entries) */
        "__builtin_prefetch(&B1_crd_", "__builtin_prefetch(&B_vals_",
        "__builtin_prefetch(&B1_pos_4[A1_crd_1[sc_min((A1_p_",
        "int64_t A1_len_2 = ops[0]->crd_len[1];", ", A1_len_2) - 1))];",
        /* dense rows: a span pass, then, where the span is under 4x the products (16x
         * under 32 products), adds and byte flags with no test, scanned in order; the
         * gather clears the values for the next row */
        "= sc_min(lo_", "= sc_max(hi_", "((hi_65 - lo_64) < (((bnd_63 < 32) ? 16 : 4) * bnd_63))",
        "uint8_t *restrict ws_flag_", "] = (uint8_t)1;", "+= sc_k_scan32(out_crd_",
        "] = (float)0.0;",
        /* phase 1 bounds a row of 128 or more products by its span too, above the rows
         * that append their products (8, or 64 where they sort in 64-byte vectors): a
         * probe of its first and last segments, then the whole row where that spans
         * fewer columns than the products */
        "if ((128 <= n_18)) {", "A1_p_28 += sc_max(1, ((A1_end_29 - 1) - A1_pos_0[p_16]))",
        "if ((((hi_27 - lo_26) + 1) < n_18)) {", "n_18 = sc_min(n_18, sc_max(((hi_27 - lo_26) + 1), "};
    golden(&spgemm, g3, (int)(sizeof g3 / sizeof g3[0]));
    /* COO SDDMM in parallel: each thread's share of the positions cut between rows; a
     * row's run end scanned over its first 8 positions, then searched; its columns a
     * plain segment (each position its own entry) in groups of dot products; no zero
     * fill of the output */
    tcase coo = {"ij,ik,jk->ij", 0, 3, {"coo", "dense", "dense"}, {{M, N}, {M, K}, {N, K}}, NULL, NULL};
    static const char *const gc[] = {
        "#pragma omp parallel num_threads(nt_) if(",
        "= sc_k_runsplit32(A0_crd_1, A0_p_", ", 0);", ", 1);",
        "while ((A0_p_", "out_vals_", "+ 8))) && (A0_crd_1[A0_run_",
        "= sc_k_runend32(A0_crd_1, A0_run_",
        "sc_fold8_", "sc_k_alloc_raw(env, nnz_"};
    golden(&coo, gc, (int)(sizeof gc / sizeof gc[0]));
    static const char *const gcn[] = {"A1_run_", "sc_k_runend32(A1_crd_"}; /* no column runs */
    absent(&coo, gcn, 2);
    /* DCSR SDDMM: one range of stored rows per thread, balanced by their entries */
    tcase dcsr = {"ij,ik,jk->ij", 0, 3, {"dcsr", "dense", "dense"}, {{M, N}, {M, K}, {N, K}}, NULL, NULL};
    static const char *const gd[] = {
        "#pragma omp parallel num_threads(nt_) if(",
        "_b = sc_k_split32(A1_pos_", "_e = sc_k_split32(A1_pos_", "int64_t i_"};
    golden(&dcsr, gd, (int)(sizeof gd / sizeof gd[0]));
    /* no count phase (no touched list), no byte marks, no int64 sort, no dynamic chunks,
     * no branch on a mark, the span pass for every row above 8 products */
    static const char *const g3n[] = {"ws_list_", "phase 1: count", "ws_mark_", "sc_k_sort(",
                                      "schedule(dynamic", "if (sc_k_mark(", "if ((32 <= bnd_"};
    absent(&spgemm, g3n, 7);
    /* a workspace over two output levels (3-D output) keeps marks + sorted int64 list */
    tcase ws2 = {"il,ljk->ijk", 0, 2, {"csr", "csf"}, {{M, 4}, {4, 3, N}}, "dcc", NULL};
    static const char *const g7[] = {"uint8_t *restrict ws_mark_", "sc_k_sort(ws_list_"};
    golden(&ws2, g7, 2);
    tcase add = {"C(i,j) = A(i,j) + B(i,j)", 1, 2, {"dcsr", "dcsr"}, {{M, N}, {M, N}}, NULL, NULL};
    static const char *const g4[] = {
        "while (((A0_p_", "sc_min(", "== i_", "while ((A0_p_", "while ((B0_p_",
        "(v_", " + v_"};
    golden(&add, g4, 7);
}

/* "C(i,j) = <text> * A(i,j)" (text: the literal c) over A of format fmt, 2x40, in dtype dt,
 * against the product computed here as torch computes x * c: c converted to the dtype
 * first (int64 exactly, int32 wrapped, float32 rounded once from the integer), then the
 * products in the dtype, integers wrapping.  The generated C holds needle. */
static void literal_kernel(const char *text, int64_t c, const char *fmt, sc_dtype dt,
                           const char *needle)
{
    enum { R = 2, C = 40 };
    char expr[96];
    snprintf(expr, sizeof expr, "C(i,j) = %s * A(i,j)", text);
    const int64_t dims[2] = {R, C};
    int64_t a[R * C];
    void *buf = malloc(R * C * 8), *want = malloc(R * C * 8), *got = malloc(R * C * 8);
    for (int i = 0; i < R * C; i++) {
        a[i] = i == 3 ? 1 : i % 7 == 1 ? 0 : i % 5 - 2; /* 1 at (0, 3), some zeros */
        put_value(buf, i, dt, (double)a[i]);
        uint64_t p = (uint64_t)c * (uint64_t)a[i];
        switch (dt) {
        case SC_DTYPE_F32: ((float *)want)[i] = (float)c * (float)a[i]; break;
        case SC_DTYPE_F64: ((double *)want)[i] = (double)c * (double)a[i]; break;
        case SC_DTYPE_I32: memcpy((int32_t *)want + i, &p, 4); break; /* (little-endian) */
        default: memcpy((int64_t *)want + i, &p, 8); break;
        }
    }
    sc_format f;
    parse_fmt(fmt, 2, &f);
    sc_tensor op, res;
    memset(&res, 0, sizeof res);
    sc_error err;
    const sc_kernel *k = NULL;
    const sc_tensor *opp[1] = {&op};
    bool ok = sc_fmt_from_dense(&ctx, 2, dims, buf, dt, &f, SC_INDEX_I32, &op, &err) == SC_OK;
    ok = ok && sc_compile(comp, SC_EXPR_LANG_INDEX, expr, 1, &op, NULL, NULL, &k, &err) == SC_OK;
    ok = ok && sc_kernel_run(k, opp, 2, &res, &err) == SC_OK;
    ok = ok && sc_fmt_to_dense(&ctx, &res, got, &err) == SC_OK;
    if (!ok)
        fprintf(stderr, "%s (%s, %s): %s\n", expr, fmt, sc_dtype_name(dt), err.msg);
    CHECK(ok);
    if (ok) {
        /* integers bit for bit; floats by value (a structural zero is +0.0, not -0.0) */
        size_t w = sc_dtype_size(dt);
        bool same = true;
        for (int i = 0; i < R * C; i++)
            same &= is_int(dt) ? !memcmp((char *)got + i * w, (char *)want + i * w, w)
                               : get_value(got, i, dt) == get_value(want, i, dt);
        if (!same)
            fprintf(stderr, "%s (%s, %s): out[3] = %.17g, want %.17g\n", expr, fmt,
                    sc_dtype_name(dt), get_value(got, 3, dt), get_value(want, 3, dt));
        CHECK(same);
        bool found = !needle || strstr(sc_kernel_explain(k), needle) != NULL;
        if (!found)
            fprintf(stderr, "%s (%s, %s): no '%s' in the generated C\n", expr, fmt,
                    sc_dtype_name(dt), needle);
        CHECK(found);
    }
    sc_tensor_release(&ctx, &res);
    sc_tensor_release(&ctx, &op);
    free(buf);
    free(want);
    free(got);
}

/* Integer literals keep their exact int64 value into the generated C in every dtype. */
static void test_literal_kernels(void)
{
    static const char *const fmts[] = {"csr", "dense"};
    for (int f = 0; f < 2; f++) {
        const char *fm = fmts[f];
        /* 2^53 + 1: exact in int64 (a double holds 2^53) */
        literal_kernel("9007199254740993", 9007199254740993, fm, SC_DTYPE_I64,
                       "(uint64_t)INT64_C(9007199254740993)");
        literal_kernel("9007199254740993", 9007199254740993, fm, SC_DTYPE_I32,
                       "(uint32_t)INT64_C(1)");
        literal_kernel("9007199254740993", 9007199254740993, fm, SC_DTYPE_F64,
                       "(double)9007199254740992.0");
        literal_kernel("9223372036854775807", INT64_MAX, fm, SC_DTYPE_I64,
                       "(uint64_t)INT64_C(9223372036854775807)");
        literal_kernel("-9223372036854775808", INT64_MIN, fm, SC_DTYPE_I64,
                       "(uint64_t)(-INT64_C(9223372036854775807) - 1)");
        literal_kernel("-9223372036854775808", INT64_MIN, fm, SC_DTYPE_F32, NULL);
        literal_kernel("2147483648", 2147483648, fm, SC_DTYPE_I32,
                       "(uint32_t)INT64_C(-2147483648)");
        /* 2^60 + 2^36 + 1: float32 rounds it to 2^60 + 2^37, a double first to 2^60 */
        literal_kernel("1152921573326323713", 1152921573326323713, fm, SC_DTYPE_F32,
                       "(float)1.1529216420458004e+18");
    }
}

/* Every case and SpGEMM format combination against the dense reference, with kernels
 * written for vectors of `bytes` (SCORCH_VEC_BYTES: both widths are tested on any host;
 * a wider vector than the target's is split by the C compiler). */
static int sweep(const sc_jit_config *cfg, const char *bytes)
{
    setenv("SCORCH_VEC_BYTES", bytes, 1);
    sc_error err;
    comp = sc_compiler_new(&ctx, cfg, &err);
    if (!comp) {
        fprintf(stderr, "sc_compiler_new: %s\n", err.msg);
        return 0;
    }
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        int ok = run_all_types(&CASES[i]);
        if (!ok)
            fprintf(stderr, "FAILED (%s-byte vectors): %s %s,%s%s%s\n", bytes, CASES[i].expr,
                    CASES[i].fmt[0], CASES[i].fmt[1] ? CASES[i].fmt[1] : "",
                    CASES[i].out_fmt ? " -> " : "", CASES[i].out_fmt ? CASES[i].out_fmt : "");
        CHECK(ok);
    }
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++)
            for (int o = 0; o < 3; o++) {
                tcase tc = {"ij,jk->ik", 0, 2, {SPGEMM_FMT[a], SPGEMM_FMT[b]}, {{M, N}, {N, K}},
                            SPGEMM_OUT[o], NULL};
                int ok = run_all_types(&tc);
                if (!ok)
                    fprintf(stderr, "FAILED (%s-byte vectors): SpGEMM %s x %s -> %s\n", bytes,
                            SPGEMM_FMT[a], SPGEMM_FMT[b], SPGEMM_OUT[o]);
                CHECK(ok);
            }
    test_schedules();
    return 1;
}

/* SpMV's float rows through gathers (SCORCH_GATHERS=1, whatever the probe says of this
 * CPU): every SpMV case against dense, and the gathered row's lines. */
static void test_gathered_rows(const sc_jit_config *cfg)
{
    setenv("SCORCH_VEC_BYTES", "64", 1);
    setenv("SCORCH_GATHERS", "1", 1);
    sc_error err;
    comp = sc_compiler_new(&ctx, cfg, &err);
    CHECK(comp != NULL);
    if (!comp)
        return;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
        if (strcmp(CASES[i].expr, "ij,j->i") == 0)
            CHECK(run_all_types(&CASES[i]));
    tcase spmv = {"ij,j->i", 0, 2, {"csr", "dense"}, {{M, N}, {N}}, NULL, NULL};
    static const char *const g[] = {
        /* rows of up to 8 entries as one masked gather, whatever x's size */
        "if (((A1_end_", ") <= 8)) {", "sc_hsum_f32q((sc_vloadn_f32q(&A_vals_",
        /* longer rows: 16 entries a step into two half vectors, a masked tail */
        "sc_vf32h gacc_", " += 16) {", "* sc_vgathern_f32h(B_vals_", "&A1_crd_1[(pu_",
        " += 8) {", "sc_min((A1_end_", "sc_hsum_f32h((gacc_",
        /* which request their crd and vals 256 entries on, at the row's start and each
         * step (inside the arrays) */
        "__builtin_prefetch(&A1_crd_1[sc_min((pb_", "__builtin_prefetch(&A_vals_3[sc_min((pu_",
        " + 256), (A1_len_2 - 1))]);",
        /* x prefetched three times a row, 64 entries on, where it outgrows L2 */
        "if ((262144 <= Nj_", "(pb_", " + 40) + 32), (A1_len_"};
    golden(&spmv, g, (int)(sizeof g / sizeof g[0]));
    const sc_kernel *k = NULL;
    CHECK(run_case(&spmv, SC_DTYPE_F32, SC_INDEX_I32, 3, &k));
    CHECK(k && strstr(sc_kernel_explain(k), "\ngathers: fast\n") != NULL);
    CHECK(k && strstr(sc_kernel_explain(k), "(16 <= m_") == NULL); /* no rows in pairs */
    sc_compiler_free(comp);
    comp = NULL;
    setenv("SCORCH_GATHERS", "2", 1);
    CHECK(sc_compiler_new(&ctx, cfg, &err) == NULL && err.kind == SC_USER &&
          strstr(err.msg, "SCORCH_GATHERS must be 0 or 1, not '2'") != NULL);
    setenv("SCORCH_GATHERS", "0", 1);
}

int main(void)
{
    sc_ctx_init(&ctx);
    /* the sweeps and goldens are the kernels of a CPU whose gathers are slow, whatever the
     * probe says of this one (test_gathered_rows sets them fast) */
    setenv("SCORCH_GATHERS", "0", 1);
    /* the kernel cache: $SC_TEST_KERNEL_CACHE when set (kept: the plain and the sanitized
     * builds compile the same kernels, so the second run loads the first one's), else a
     * fresh directory removed at the end */
    const char *shared = getenv("SC_TEST_KERNEL_CACHE");
    if (shared && *shared) {
        snprintf(root, sizeof root, "%s", shared);
    } else {
        snprintf(root, sizeof root, "/tmp/sc_test_compile_XXXXXX");
        if (!mkdtemp(root))
            return 1;
    }
    sc_jit_config cfg = {NULL, "-O1 -fopenmp", root, "runtime"};
    /* a width the IR does not take is refused by name */
    setenv("SCORCH_VEC_BYTES", "48", 1);
    sc_error err;
    CHECK(sc_compiler_new(&ctx, &cfg, &err) == NULL && err.kind == SC_USER &&
          strstr(err.msg, "SCORCH_VEC_BYTES must be 32 or 64") != NULL);
    /* Compiling the kernels is most of this test's time, so the 32-byte sweep and the
     * gathered rows run in a child process beside the 64-byte sweep and the goldens (the
     * two use different kernels); each prints its own counts, and the exit code fails if
     * either failed. */
    fflush(stdout);
    fflush(stderr);
    pid_t child = fork();
    CHECK(child >= 0); /* (a failed fork fails the test; the rest still runs) */
    if (child == 0) {
        int ok = sweep(&cfg, "32");
        sc_compiler_free(comp);
        comp = NULL;
        if (ok)
            test_gathered_rows(&cfg);
        free(last_result);
        return check_report("test_compile (32-byte vectors)") || !ok;
    }
    /* the goldens are the 64-byte (AVX-512) kernels' lines */
    int ok = sweep(&cfg, "64");
    if (ok) {
        test_goldens();
        test_literal_kernels();
    }
    sc_compiler_free(comp);
    free(last_result);
    unsetenv("SCORCH_VEC_BYTES");
    unsetenv("SCORCH_GATHERS");
    int status = 0;
    if (child > 0) {
        while (waitpid(child, &status, 0) < 0)
            if (errno != EINTR)
                break;
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    if (!(shared && *shared))
        tmpdir_remove(root);
    return check_report("test_compile") || !ok;
}
