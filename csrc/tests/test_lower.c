/*
 * test_lower.c — the middle stages on their own, without a C compiler: merge lattices,
 * output-format inference, automatic loop orders, the schedule text (parse/print round
 * trip) and one negative test per illegal schedule, plus the IR verifier and printer on
 * the loop nests the builder produces.
 */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "expr/sc_expr.h"
#include "format/sc_format.h"
#include "ir/sc_ir.h"
#include "lower/sc_lower.h"
#include "schedule/sc_sched.h"

#include <string.h>
#include <time.h>

static sc_ctx ctx;

typedef struct prob {
    sc_arena arena;
    sc_expr e;
    sc_lower_problem p;
    sc_status st;
    sc_error err;
} prob;

/* Build a problem: einsum (lang 0) or index notation (1); fmts[t] spec, dims[t] sizes,
 * nnz[t] stored entries; out NULL = inferred. */
static void mk(prob *P, const char *expr, int lang, int nops, const char *const *fmts,
               const int64_t (*dims)[4], const int64_t *nnz, const char *out)
{
    sc_arena_init(&P->arena, &ctx);
    sc_tensor ops[4];
    memset(ops, 0, sizeof ops);
    int32_t orders[4];
    for (int t = 0; t < nops; t++) {
        orders[t] = 0;
        while (orders[t] < 4 && dims[t][orders[t]] > 0)
            orders[t]++;
        /* "ddc(0,2,1)": the levels, then the dimension each stores */
        char lv[16];
        const char *paren = strchr(fmts[t], '(');
        size_t n = paren ? (size_t)(paren - fmts[t]) : strlen(fmts[t]);
        snprintf(lv, sizeof lv, "%.*s", (int)n, fmts[t]);
        sc_fmt_parse(lv, orders[t], &ops[t].fmt, NULL);
        for (int k = 0; paren && k < orders[t]; k++)
            ops[t].fmt.lvl2dim[k] = (int8_t)(paren[1 + 2 * k] - '0');
        memcpy(ops[t].dims, dims[t], sizeof dims[t]);
        ops[t].dtype = SC_DTYPE_F64;
        ops[t].index_type = SC_INDEX_I32;
        ops[t].nvals = nnz ? nnz[t] : 10;
    }
    P->st = lang == 0 ? sc_expr_parse_einsum(&P->arena, expr, nops, orders, &P->e, &P->err)
                      : sc_expr_parse_index(&P->arena, expr, &P->e, &P->err);
    if (P->st == SC_OK)
        P->st = sc_lower_prepare(&P->arena, &P->e, nops, ops, &P->p, &P->err);
    if (P->st == SC_OK) {
        sc_format of;
        if (out)
            sc_fmt_parse(out, P->p.out_order, &of, NULL);
        P->st = sc_lower_set_output(&P->p, out ? &of : NULL, &P->err);
    }
    if (P->st != SC_OK)
        fprintf(stderr, "%s: %s\n", expr, P->err.msg);
}

static void lattice_is(const char *expr, const char *f0, const char *f1, const char *f2,
                       const char *var, const char *want)
{
    prob P;
    const char *fmts[3] = {f0, f1, f2};
    const int64_t dims[3][4] = {{6, 8}, {6, 8}, {6, 8}};
    int n = f2 ? 3 : f1 ? 2 : 1;
    mk(&P, expr, 1, n, fmts, dims, NULL, NULL);
    CHECK(P.st == SC_OK);
    if (P.st == SC_OK) {
        sc_lower_lattice lat;
        int8_t nb[SC_LOWER_MAX_ACCESSES] = {0};
        CHECK(sc_lower_lattice_at(&P.p, P.p.rhs, sc_expr_find_var(&P.e, var), nb, &lat, NULL) == SC_OK);
        char txt[256];
        sc_lower_lattice_text(&P.p, &lat, txt, sizeof txt);
        if (strcmp(txt, want))
            fprintf(stderr, "lattice of %s at %s: got '%s', want '%s'\n", expr, var, txt, want);
        CHECK(strcmp(txt, want) == 0);
    }
    sc_arena_release(&P.arena);
}

static void test_lattices(void)
{
    lattice_is("C(i,j) = A(i,j) * B(i,j)", "dcsr", "dcsr", NULL, "i", "{A,B}");
    lattice_is("C(i,j) = A(i,j) + B(i,j)", "dcsr", "dcsr", NULL, "i", "{A,B} {B} {A}");
    lattice_is("C(i,j) = A(i,j) - B(i,j)", "dcsr", "dcsr", NULL, "i", "{A,B} {B} {A}");
    lattice_is("C(i,j) = A(i,j) * B(i,j) + D(i,j)", "dcsr", "dcsr", "dcsr", "i",
               "{A,B,D} {B,D} {A,D} {A,B} {D}");
    lattice_is("C(i,j) = A(i,j) + B(i,j)", "dcsr", "dense", NULL, "i", "U {A} {}");
    lattice_is("C(i,j) = A(i,j) * B(i,j)", "csr", "dense", NULL, "i", "U {}");
    lattice_is("C(i,j) = 2 * A(i,j)", "dcsr", NULL, NULL, "i", "{A}");
    lattice_is("C(i,j) = A(i,j) * (B(i,j) + 3)", "dcsr", "dcsr", NULL, "i", "{A,B} {A}");

    /* specialisation returns the same node when nothing changes, NULL for zero */
    prob P;
    const char *fmts[2] = {"csr", "csr"};
    const int64_t dims[2][4] = {{4, 4}, {4, 4}};
    mk(&P, "C(i,j) = A(i,j) + B(i,j)", 1, 2, fmts, dims, NULL, NULL);
    CHECK(sc_lower_specialize(&P.arena, P.p.rhs, 0, NULL) == P.p.rhs);
    CHECK(sc_lower_specialize(&P.arena, P.p.rhs, 3, NULL) == NULL);
    const sc_lower_node *onlyA = sc_lower_specialize(&P.arena, P.p.rhs, 2, NULL);
    CHECK(onlyA && onlyA->kind == SC_LN_ACCESS && onlyA->access == 0);
    sc_arena_release(&P.arena);
}

static void infer_is(const char *expr, int nops, const char *f0, const char *f1, const char *f2,
                     const int64_t (*dims)[4], const char *want_levels, int l0)
{
    prob P;
    const char *fmts[3] = {f0, f1, f2};
    mk(&P, expr, 0, nops, fmts, dims, NULL, NULL);
    CHECK(P.st == SC_OK);
    if (P.st == SC_OK) {
        char lv[64];
        sc_fmt_levels_text(&P.p.out_fmt, lv, sizeof lv);
        bool ok = !strcmp(lv, want_levels) && (P.p.out_order == 0 || P.p.out_fmt.lvl2dim[0] == l0);
        if (!ok)
            fprintf(stderr, "inferred %s for %s (%s,%s): want %s lvl2dim[0]=%d\n", lv, expr, f0,
                    f1 ? f1 : "", want_levels, l0);
        CHECK(ok);
    }
    sc_arena_release(&P.arena);
}

static void test_inference(void)
{
    const int64_t mat2[3][4] = {{6, 8}, {8, 5}, {0}};
    const int64_t vec[2][4] = {{6, 8}, {8}};
    const int64_t same[3][4] = {{6, 8}, {6, 8}, {6, 8}};
    const int64_t sddmm[3][4] = {{6, 8}, {6, 3}, {8, 3}};
    const int64_t aat[2][4] = {{6, 8}, {6, 8}};
    const int64_t ttv[2][4] = {{6, 4, 8}, {8}};
    infer_is("ij,j->i", 2, "csr", "dense", NULL, vec, "d", 0);
    infer_is("ij,j->i", 2, "csc", "dense", NULL, vec, "d", 0);
    infer_is("ij,jk->ik", 2, "csr", "dense", NULL, mat2, "dd", 0);
    infer_is("ij,ik,jk->ij", 3, "csr", "dense", "dense", sddmm, "dc", 0);
    infer_is("ij,ik,jk->ij", 3, "csc", "dense", "dense", sddmm, "dc", 1);
    infer_is("ij,jk->ik", 2, "csr", "csr", NULL, mat2, "dc", 0);
    infer_is("ij,jk->ik", 2, "dcsr", "dcsr", NULL, mat2, "cc", 0);
    infer_is("ij,jk->ik", 2, "csc", "csc", NULL, mat2, "dc", 1);
    infer_is("ij,kj->ik", 2, "csr", "csr", NULL, aat, "dc", 0);
    infer_is("ij,ij->ij", 2, "csc", "csr", NULL, same, "dc", 1);
    infer_is("ij->ji", 1, "csr", NULL, NULL, same, "dc", 1);
    infer_is("ij->j", 1, "csr", NULL, NULL, same, "c", 0);
    infer_is("ij->i", 1, "csr", NULL, NULL, same, "d", 0);
    infer_is("ij->", 1, "csr", NULL, NULL, same, "", 0);
    infer_is("ijk,k->ij", 2, "csf", "dense", NULL, ttv, "dd", 0);
    /* multi-head scores on one mask: dense over the heads, then the mask's levels; an
     * outer product of two sparse operands is not batched (rule 5) */
    const int64_t heads[3][4] = {{6, 8}, {4, 6, 3}, {4, 8, 3}};
    infer_is("ij,hik,hjk->hij", 3, "csr", "dense", "dense", heads, "ddc", 0);
    infer_is("ij,hik,hjk->hij", 3, "csc", "dense", "dense", heads, "ddc", 0);
    infer_is("ij,hik,hjk->hij", 3, "coo", "dense", "dense", heads, "dc(nonunique)s(nonunique)", 0);
    const int64_t outer[2][4] = {{6, 8}, {6, 8}};
    infer_is("ij,kl->ijkl", 2, "csr", "csr", NULL, outer, "ddcc", 0);

    prob P;
    const char *f[2] = {"csr", "csc"};
    mk(&P, "C(i,j) = A(i,j) + B(i,j)", 1, 2, f, same, NULL, NULL);
    char lv[32];
    sc_fmt_levels_text(&P.p.out_fmt, lv, sizeof lv);
    CHECK(!strcmp(lv, "dc") && P.p.out_fmt.lvl2dim[0] == 0); /* union: first operand's format */
    sc_arena_release(&P.arena);
    const char *g[2] = {"csr", "dense"};
    mk(&P, "C(i,j) = A(i,j) + B(i,j)", 1, 2, g, same, NULL, NULL);
    sc_fmt_levels_text(&P.p.out_fmt, lv, sizeof lv);
    CHECK(!strcmp(lv, "dd")); /* a dense term makes the sum dense */
    sc_arena_release(&P.arena);
}

static bool convert_once; /* the problems schedule_is builds: p.convert_once */

static void schedule_is(const char *expr, int nops, const char *f0, const char *f1,
                        const char *f2, const int64_t (*dims)[4], const int64_t *nnz,
                        const char *out, const char *want, uint32_t want_transpose)
{
    prob P;
    const char *fmts[3] = {f0, f1, f2};
    mk(&P, expr, 0, nops, fmts, dims, nnz, out);
    P.p.convert_once = convert_once;
    CHECK(P.st == SC_OK);
    if (P.st == SC_OK) {
        sc_sched s;
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        sc_status st = sc_sched_auto(&P.p, &s, &P.err);
        clock_gettime(CLOCK_MONOTONIC, &b);
        double us = (double)(b.tv_sec - a.tv_sec) * 1e6 + (double)(b.tv_nsec - a.tv_nsec) / 1e3;
        CHECK(st == SC_OK);
        char txt[256];
        sc_sched_print(&P.e, &s, txt, sizeof txt);
        bool ok = st == SC_OK && !strcmp(txt, want) && s.transpose == want_transpose;
        if (!ok)
            fprintf(stderr, "schedule of %s (%s,%s): got '%s' transpose %x, want '%s' %x (%s)\n",
                    expr, f0, f1 ? f1 : "", txt, s.transpose, want, want_transpose,
                    st ? P.err.msg : "");
        CHECK(ok);
        printf("  auto schedule %-14s %-5s %-6s %-30s %6.1f us\n", expr, f0, f1 ? f1 : "", txt, us);
    }
    sc_arena_release(&P.arena);
}

static void test_loop_orders(void)
{
    const int64_t spmm[2][4] = {{100000, 100000}, {100000, 64}};
    const int64_t nnz_spmm[2] = {1000000, 6400000};
    schedule_is("ij,jk->ik", 2, "csr", "dense", NULL, spmm, nnz_spmm, NULL,
                "order(i,j,k) parallel(i)", 0);
    schedule_is("ij,jk->ik", 2, "csc", "dense", NULL, spmm, nnz_spmm, NULL, "order(j,i,k)", 0);
    const int64_t spmv[2][4] = {{100000, 100000}, {100000}};
    schedule_is("ij,j->i", 2, "csr", "dense", NULL, spmv, nnz_spmm, NULL, "order(i,j) parallel(i)", 0);
    /* COO's rows repeat coordinates: converted to unique ones (bit 0) for a parallel loop
     * where the caller keeps the copy; on one thread where it would be made every run */
    convert_once = true;
    schedule_is("ij,j->i", 2, "coo", "dense", NULL, spmv, nnz_spmm, NULL, "order(i,j) parallel(i)", 1);
    schedule_is("ij,jk->ik", 2, "coo", "dense", NULL, spmm, nnz_spmm, NULL,
                "order(i,j,k) parallel(i)", 1);
    /* csc: A X transposed once to csr and run in parallel, A^T X (csr) likewise */
    schedule_is("ij,jk->ik", 2, "csc", "dense", NULL, spmm, nnz_spmm, NULL,
                "order(i,j,k) parallel(i)", 1);
    const int64_t atx[2][4] = {{100000, 64}, {100000, 100000}};
    const int64_t nnz_atx[2] = {6400000, 1000000};
    schedule_is("ik,ij->jk", 2, "dense", "csr", NULL, atx, nnz_atx, NULL,
                "order(j,i,k) parallel(j)", 2);
    convert_once = false;
    schedule_is("ij,j->i", 2, "coo", "dense", NULL, spmv, nnz_spmm, NULL, "order(i,j)", 0);
    const int64_t gemm[2][4] = {{100000, 100000}, {100000, 100000}};
    const int64_t nnz_gemm[2] = {1000000, 1000000};
    schedule_is("ij,jk->ik", 2, "csr", "csr", NULL, gemm, nnz_gemm, NULL,
                "order(i,j,k) parallel(i) workspace(k)", 0);
    schedule_is("ij,jk->ik", 2, "csr", "csr", NULL, gemm, nnz_gemm, "dense",
                "order(i,j,k) parallel(i)", 0);
    /* A A^T on a large sparse matrix: Gustavson with the second operand transposed beats
     * the inner-product order */
    schedule_is("ij,kj->ik", 2, "csr", "csr", NULL, gemm, nnz_gemm, NULL,
                "order(i,j,k) parallel(i) workspace(k)", 2);
    const int64_t sddmm[3][4] = {{100000, 100000}, {100000, 32}, {100000, 32}};
    const int64_t nnz_sddmm[3] = {1000000, 3200000, 3200000};
    schedule_is("ij,ik,jk->ij", 3, "csr", "dense", "dense", sddmm, nnz_sddmm, NULL,
                "order(i,j,k) parallel(i)", 0);
    /* rows as a compressed level (every row estimated nonempty): still the sampled
     * operand's entries outermost, not (k,i,j) with a workspace of every (i,j); in
     * parallel, the output having the operand's whole pattern (each value written at its
     * entry's position); coo too, its threads' shares cut between runs of a row */
    schedule_is("ij,ik,jk->ij", 3, "dcsr", "dense", "dense", sddmm, nnz_sddmm, NULL,
                "order(i,j,k) parallel(i)", 0);
    schedule_is("ij,ik,jk->ij", 3, "coo", "dense", "dense", sddmm, nnz_sddmm, NULL,
                "order(i,j,k) parallel(i)", 0);
    /* A B^T with a dense B (64 x 100000): B copied into B^T's layout (bit 1), a SpMM; not
     * where A has fewer entries than B's rows hold (the copy would cost more: B is read
     * across its rows, 64 lines a stored entry either way) */
    const int64_t abt[2][4] = {{100000, 100000}, {64, 100000}};
    const int64_t nnz_abt[2] = {1000000, 6400000};
    schedule_is("ij,kj->ik", 2, "csr", "dense", NULL, abt, nnz_abt, NULL,
                "order(i,j,k) parallel(i)", 2);
    const int64_t nnz_abt_few[2] = {50000, 6400000};
    schedule_is("ij,kj->ik", 2, "csr", "dense", NULL, abt, nnz_abt_few, NULL,
                "order(i,j,k) parallel(i)", 0);
    /* G^T A into a (k, j) output: A's columns (its csc copy, bit 1) outermost, the output
     * strided along the innermost k but stored once per register tile */
    convert_once = true;
    const int64_t gta[2][4] = {{100000, 64}, {100000, 100000}};
    schedule_is("ak,aj->kj", 2, "dense", "csr", NULL, gta, nnz_atx, NULL,
                "order(j,a,k) parallel(j)", 2);
    /* a batch of SpMVs and SpMMs over ddc (dense batch and rows, compressed columns):
     * concordant, in parallel over the batch; ddc (0,2,1) read as it is stored.  (The
     * cost model once judged a transposed order's innermost loop by the stored format's
     * levels: i dense in ddc, though compressed in the copy, so each format chose the
     * other's order, and every run of a batched SpMV transposed its operand.) */
    const int64_t bmv[2][4] = {{4, 100000, 100000}, {4, 100000}};
    const int64_t nnz_bmv[2] = {4000000, 400000};
    schedule_is("bij,bj->bi", 2, "ddc", "dense", NULL, bmv, nnz_bmv, NULL,
                "order(b,i,j) parallel(b)", 0);
    schedule_is("bij,bj->bi", 2, "ddc(0,2,1)", "dense", NULL, bmv, nnz_bmv, NULL,
                "order(b,j,i) parallel(b)", 0);
    const int64_t bmm[2][4] = {{4, 100000, 100000}, {4, 100000, 16}};
    const int64_t nnz_bmm[2] = {4000000, 6400000};
    schedule_is("bij,bjk->bik", 2, "ddc", "dense", NULL, bmm, nnz_bmm, NULL,
                "order(b,i,j,k) parallel(b)", 0);
    convert_once = false;
    const int64_t mttkrp[3][4] = {{1000, 1000, 1000}, {1000, 16}, {1000, 16}};
    const int64_t nnz_mttkrp[3] = {100000, 16000, 16000};
    schedule_is("ijk,jr,kr->ir", 3, "csf", "dense", "dense", mttkrp, nnz_mttkrp, NULL,
                "order(i,j,k,r) parallel(i)", 0);
}

static void sched_parse_ok(prob *P, const char *text, const char *want)
{
    sc_sched s;
    sc_error err;
    sc_status st = sc_sched_parse(&P->e, text, &s, &err);
    CHECK(st == SC_OK);
    char a[256], b[256];
    sc_sched_print(&P->e, &s, a, sizeof a);
    if (strcmp(a, want))
        fprintf(stderr, "parse/print '%s' gave '%s', want '%s'\n", text, a, want);
    CHECK(strcmp(a, want) == 0);
    sc_sched s2;
    CHECK(sc_sched_parse(&P->e, a, &s2, &err) == SC_OK);
    sc_sched_print(&P->e, &s2, b, sizeof b);
    CHECK(strcmp(a, b) == 0);
}

/* The dense operands a schedule relays out under each rule: at the problem's sizes (an
 * SDDMM gradient of an 8 x 1 weight: neither copy pays for itself, and C's column of 1 is
 * read the same either way), none, or every one the innermost loop reads across. */
static void test_relayout_rules(void)
{
    prob P;
    const char *fmts[3] = {"csr", "dense", "dense"};
    const int64_t dims[3][4] = {{8, 1}, {4, 8}, {4, 1}};
    mk(&P, "kj,ak,aj->kj", 0, 3, fmts, dims, NULL, NULL);
    CHECK(P.st == SC_OK);
    const sc_sched_relayout_rule rules[3] = {SC_SCHED_RELAYOUT_SIZED, SC_SCHED_RELAYOUT_NONE,
                                             SC_SCHED_RELAYOUT_ALL};
    const uint32_t want[3] = {0, 0, 0x6};
    for (int r = 0; r < 3 && P.st == SC_OK; r++) {
        sc_sched s;
        sc_error err;
        CHECK(sc_sched_parse(&P.e, "order(k,j,a)", &s, &err) == SC_OK);
        s.relayout = rules[r];
        sc_status st = sc_sched_check(&P.p, &s, &err);
        if (st != SC_OK || s.transpose != want[r])
            fprintf(stderr, "relayout rule %d: status %d transpose %x, want %x\n", r, (int)st,
                    s.transpose, want[r]);
        CHECK(st == SC_OK && s.transpose == want[r]);
        if (r == 2)   /* (B and C to the loop order: a innermost) */
            CHECK(s.tfmt[1].lvl2dim[0] == 1 && s.tfmt[2].lvl2dim[0] == 1);
    }
    sc_arena_release(&P.arena);
}

static void sched_parse_bad(prob *P, const char *text, int64_t pos, const char *needle)
{
    sc_sched s;
    sc_error err;
    sc_status st = sc_sched_parse(&P->e, text, &s, &err);
    bool ok = st == SC_USER && err.pos == pos && strstr(err.msg, needle);
    if (!ok)
        fprintf(stderr, "schedule '%s': status %d pos %lld msg '%s'\n", text, (int)st,
                (long long)err.pos, st ? err.msg : "");
    CHECK(ok);
}

static void sched_check_bad(prob *P, const char *text, const char *needle)
{
    sc_sched s;
    sc_error err;
    sc_status st = sc_sched_parse(&P->e, text, &s, &err);
    CHECK(st == SC_OK);
    st = sc_sched_check(&P->p, &s, &err);
    bool ok = st == SC_USER && strstr(err.msg, needle);
    if (!ok)
        fprintf(stderr, "schedule '%s' should fail with '%s': status %d msg '%s'\n", text, needle,
                (int)st, st ? err.msg : "");
    CHECK(ok);
}

static void test_schedule_text(void)
{
    prob P;
    const char *fmts[2] = {"csr", "csr"};
    const int64_t dims[2][4] = {{50, 60}, {60, 70}};
    mk(&P, "ij,jk->ik", 0, 2, fmts, dims, NULL, NULL); /* csr output */
    sched_parse_ok(&P, "order(i,j,k) parallel(i) workspace(k)", "order(i,j,k) parallel(i) workspace(k)");
    sched_parse_ok(&P, "  workspace( k )  parallel(i)order(i , j,k) ", "order(i,j,k) parallel(i) workspace(k)");
    sched_parse_ok(&P, "order(k,i,j)", "order(k,i,j)");
    sched_parse_ok(&P, "parallel(none)", "");
    sched_parse_ok(&P, "", "");
    sched_parse_bad(&P, "order(i,j,k) tile(i)", 13, "unknown directive 'tile'");
    sched_parse_bad(&P, "order(i,x,k)", 8, "unknown index 'x'");
    sched_parse_bad(&P, "order(i,j,i)", 10, "repeated");
    sched_parse_bad(&P, "order(i,j,k", 11, "expected ',' or ')'");
    sched_parse_bad(&P, "order i,j,k", 6, "expected '('");
    sched_parse_bad(&P, "order(i) order(j)", 9, "given twice");
    sched_parse_bad(&P, "parallel(i,j)", 11, "one index");
    /* legality, one negative test per rule */
    sched_check_bad(&P, "order(i,j)", "every index");
    sched_check_bad(&P, "order(j,i,k)", "must be loop 1");
    sched_check_bad(&P, "order(i,j,k) parallel(j)", "not the outermost");
    sched_check_bad(&P, "order(i,j,k) workspace(j)", "workspace(j) is illegal");
    sched_check_bad(&P, "order(i,k,j) workspace(k)", "workspace(k) is illegal");
    sched_check_bad(&P, "order(i,j,k) workspace()", "needs workspace");
    sc_arena_release(&P.arena);

    mk(&P, "ij,jk->ik", 0, 2, fmts, dims, NULL, "dense");
    sched_check_bad(&P, "order(j,i,k) parallel(j)", "reduction index");
    sched_check_bad(&P, "order(i,j,k) workspace(k)", "needs no workspace");
    sc_arena_release(&P.arena);

    const char *dd[2] = {"dcsr", "dcsr"};
    const int64_t same[2][4] = {{50, 60}, {50, 60}};
    mk(&P, "ij,ij->ij", 0, 2, dd, same, NULL, "csr");
    sched_check_bad(&P, "order(i,j) parallel(i)", "co-iterates");
    sc_arena_release(&P.arena);
    mk(&P, "ij,ij->ij", 0, 2, dd, same, NULL, "dcsr");
    sched_check_bad(&P, "order(j,i)", "stores index i before j");
    sc_arena_release(&P.arena);

    /* one operand read in two incompatible orders (index notation, same tensor twice) */
    const char *one[1] = {"csr"};
    const int64_t sq[1][4] = {{40, 40}};
    prob Q;
    sc_arena_init(&Q.arena, &ctx);
    sc_tensor op;
    memset(&op, 0, sizeof op);
    sc_fmt_parse(one[0], 2, &op.fmt, NULL);
    op.dims[0] = sq[0][0];
    op.dims[1] = sq[0][1];
    op.nvals = 100;
    CHECK(sc_expr_parse_index(&Q.arena, "C(i,j) = A(i,j) * A(j,i)", &Q.e, &Q.err) == SC_OK);
    CHECK(sc_lower_prepare(&Q.arena, &Q.e, 1, &op, &Q.p, &Q.err) == SC_OK);
    CHECK(sc_lower_set_output(&Q.p, NULL, &Q.err) == SC_OK);
    sc_sched s;
    CHECK(sc_sched_parse(&Q.e, "order(i,j)", &s, &Q.err) == SC_OK);
    CHECK(sc_sched_check(&Q.p, &s, &Q.err) == SC_USER && strstr(Q.err.msg, "two index orders"));
    sc_arena_release(&Q.arena);
}

/* MARK / COLLECT / SCAN: constructors check their buffers, the verifier their scopes. */
static void test_bitmap_ir(void)
{
    sc_arena ar;
    sc_arena_init(&ar, &ctx);
    sc_ir_func f;
    sc_error err;
    sc_ir_builder bld;
    sc_ir_builder_init(&bld, &ar, &f, "bm", SC_DTYPE_F32, &err);
    sc_ir_var b0 = sc_ir_new_var(&bld, "b0", SC_IR_U64, true, false, false);
    sc_ir_var b1 = sc_ir_new_var(&bld, "b1", SC_IR_U64, true, false, false);
    sc_ir_var lst = sc_ir_new_var(&bld, "lst", SC_IR_I32, true, false, false);
    sc_ir_var n = sc_ir_new_var(&bld, "n", SC_IR_I64, false, false, false);
    sc_ir_var nw = sc_ir_new_var(&bld, "nw", SC_IR_I64, false, false, false);
    const sc_ir_expr *c4 = sc_ir_int(&bld, 4);
    const sc_ir_stmt *items[8] = {
        sc_ir_decl(&bld, b0, sc_ir_alloc(&bld, SC_IR_U64, sc_ir_int(&bld, 1))),
        sc_ir_decl(&bld, b1, sc_ir_alloc(&bld, SC_IR_U64, sc_ir_int(&bld, 1))),
        sc_ir_decl(&bld, lst, sc_ir_alloc_uninit(&bld, SC_IR_I32, c4)),
        sc_ir_decl(&bld, n, sc_ir_int(&bld, 0)),
        sc_ir_mark(&bld, b0, b1, sc_ir_int(&bld, 3),
                   sc_ir_assign(&bld, n, true, sc_ir_int(&bld, 1)), NULL),
        sc_ir_decl(&bld, nw, sc_ir_int(&bld, 0)),
        sc_ir_mark_new(&bld, b0, b1, sc_ir_int(&bld, 5), nw),
        sc_ir_collect(&bld, lst, sc_ir_int(&bld, 0), sc_ir_var_ref(&bld, n), b0, b1, true,
                      sc_ir_int(&bld, 64))};
    CHECK(sc_ir_finish(&bld, sc_ir_block(&bld, items, 8)) == SC_OK);
    CHECK(sc_ir_verify(&f, &err) == SC_OK);
    char t[1024];
    sc_ir_print(&f, t, sizeof t);
    CHECK(strstr(t, "alloc_uninit<int32_t>(4)") != NULL);
    CHECK(strstr(t, "mark 3 in b0_0/b1_1:") != NULL);
    CHECK(strstr(t, "nw_4 = mark_new 5 in b0_0/b1_1") != NULL);
    CHECK(strstr(t, "collect sorted lst_2[0:+n_3] from b0_0/b1_1 of 64") != NULL);
    /* the bitmap used outside its scope */
    sc_ir_builder_init(&bld, &ar, &f, "bm2", SC_DTYPE_F32, &err);
    b0 = sc_ir_new_var(&bld, "b0", SC_IR_U64, true, false, false);
    b1 = sc_ir_new_var(&bld, "b1", SC_IR_U64, true, false, false);
    const sc_ir_stmt *m = sc_ir_mark(&bld, b0, b1, sc_ir_int(&bld, 0), sc_ir_block(&bld, NULL, 0), NULL);
    CHECK(sc_ir_finish(&bld, m) == SC_OK);
    CHECK(sc_ir_verify(&f, &err) == SC_INTERNAL && strstr(err.msg, "outside its scope"));
    /* a bitmap must be two distinct uint64 buffers; collect needs an int32/int64 buffer */
    sc_ir_builder_init(&bld, &ar, &f, "bm3", SC_DTYPE_F32, &err);
    b0 = sc_ir_new_var(&bld, "b0", SC_IR_U64, true, false, false);
    sc_ir_var u8 = sc_ir_new_var(&bld, "u8", SC_IR_U8, true, false, false);
    CHECK(sc_ir_mark(&bld, b0, u8, sc_ir_int(&bld, 0), sc_ir_block(&bld, NULL, 0), NULL) == NULL);
    CHECK(bld.st == SC_INTERNAL && strstr(err.msg, "not two writable uint64 buffers"));
    sc_ir_builder_init(&bld, &ar, &f, "bm4", SC_DTYPE_F32, &err);
    b0 = sc_ir_new_var(&bld, "b0", SC_IR_U64, true, false, false);
    b1 = sc_ir_new_var(&bld, "b1", SC_IR_U64, true, false, false);
    sc_ir_var fl = sc_ir_new_var(&bld, "fl", SC_IR_F32, true, false, false);
    CHECK(sc_ir_collect(&bld, fl, sc_ir_int(&bld, 0), sc_ir_int(&bld, 0), b0, b1, false,
                        sc_ir_int(&bld, 1)) == NULL);
    CHECK(bld.st == SC_INTERNAL && strstr(err.msg, "not a writable int32/int64 buffer"));
    /* mark_new sets an int64 variable, not a float one */
    sc_ir_builder_init(&bld, &ar, &f, "bm5", SC_DTYPE_F32, &err);
    b0 = sc_ir_new_var(&bld, "b0", SC_IR_U64, true, false, false);
    b1 = sc_ir_new_var(&bld, "b1", SC_IR_U64, true, false, false);
    sc_ir_var fv = sc_ir_new_var(&bld, "fv", SC_IR_F32, false, false, false);
    CHECK(sc_ir_mark_new(&bld, b0, b1, sc_ir_int(&bld, 0), fv) == NULL);
    CHECK(bld.st == SC_INTERNAL && strstr(err.msg, "not an int64 variable"));
    /* SCAN: uint8 flags into an int32/int64 buffer, the count added to an int64 scalar */
    sc_ir_builder_init(&bld, &ar, &f, "sc", SC_DTYPE_F32, &err);
    sc_ir_var fg = sc_ir_new_var(&bld, "fg", SC_IR_U8, true, false, false);
    lst = sc_ir_new_var(&bld, "lst", SC_IR_I32, true, false, false);
    n = sc_ir_new_var(&bld, "n", SC_IR_I64, false, false, false);
    const sc_ir_stmt *sitems[4] = {
        sc_ir_decl(&bld, fg, sc_ir_alloc(&bld, SC_IR_U8, sc_ir_int(&bld, 16))),
        sc_ir_decl(&bld, lst, sc_ir_alloc_uninit(&bld, SC_IR_I32, c4)),
        sc_ir_decl(&bld, n, sc_ir_int(&bld, 0)),
        sc_ir_scan(&bld, lst, sc_ir_var_ref(&bld, n), fg, sc_ir_int(&bld, 2), sc_ir_int(&bld, 7), n)};
    CHECK(sc_ir_finish(&bld, sc_ir_block(&bld, sitems, 4)) == SC_OK);
    CHECK(sc_ir_verify(&f, &err) == SC_OK);
    sc_ir_print(&f, t, sizeof t);
    CHECK(strstr(t, "n_2 += scan lst_1[n_2:] from fg_0[2..7]") != NULL);
    /* flags used outside their scope */
    sc_ir_builder_init(&bld, &ar, &f, "sc2", SC_DTYPE_F32, &err);
    fg = sc_ir_new_var(&bld, "fg", SC_IR_U8, true, false, false);
    lst = sc_ir_new_var(&bld, "lst", SC_IR_I64, true, false, false);
    n = sc_ir_new_var(&bld, "n", SC_IR_I64, false, false, false);
    const sc_ir_stmt *s2[2] = {
        sc_ir_decl(&bld, lst, sc_ir_alloc_uninit(&bld, SC_IR_I64, c4)),
        sc_ir_decl(&bld, n, sc_ir_int(&bld, 0))};
    const sc_ir_stmt *s2b[3] = {s2[0], s2[1],
        sc_ir_scan(&bld, lst, sc_ir_int(&bld, 0), fg, sc_ir_int(&bld, 0), sc_ir_int(&bld, 3), n)};
    CHECK(sc_ir_finish(&bld, sc_ir_block(&bld, s2b, 3)) == SC_OK);
    CHECK(sc_ir_verify(&f, &err) == SC_INTERNAL && strstr(err.msg, "outside its scope"));
    /* flags must be uint8, the total an int64 scalar */
    sc_ir_builder_init(&bld, &ar, &f, "sc3", SC_DTYPE_F32, &err);
    b0 = sc_ir_new_var(&bld, "b0", SC_IR_U64, true, false, false);
    lst = sc_ir_new_var(&bld, "lst", SC_IR_I32, true, false, false);
    n = sc_ir_new_var(&bld, "n", SC_IR_I64, false, false, false);
    CHECK(sc_ir_scan(&bld, lst, sc_ir_int(&bld, 0), b0, sc_ir_int(&bld, 0), sc_ir_int(&bld, 1), n) == NULL);
    CHECK(bld.st == SC_INTERNAL && strstr(err.msg, "not writable uint8 flags"));
    sc_ir_builder_init(&bld, &ar, &f, "sc4", SC_DTYPE_F32, &err);
    fg = sc_ir_new_var(&bld, "fg", SC_IR_U8, true, false, false);
    lst = sc_ir_new_var(&bld, "lst", SC_IR_I32, true, false, false);
    sc_ir_var n32 = sc_ir_new_var(&bld, "n", SC_IR_I32, false, false, false);
    CHECK(sc_ir_scan(&bld, lst, sc_ir_int(&bld, 0), fg, sc_ir_int(&bld, 0), sc_ir_int(&bld, 1), n32) == NULL);
    CHECK(bld.st == SC_INTERNAL && strstr(err.msg, "an int64 variable"));
    sc_arena_release(&ar);
}

/* PAIRS: a balanced loop's pair body, verified in the loop's scope and printed after its
 * body with its minimum average row; refused on a loop that is not balanced, a second
 * time, and for a negative minimum. */
static void test_pairs_ir(void)
{
    sc_arena ar;
    sc_arena_init(&ar, &ctx);
    sc_ir_func f;
    sc_error err;
    sc_ir_builder bld;
    sc_ir_builder_init(&bld, &ar, &f, "pr", SC_DTYPE_F32, &err);
    sc_ir_var pos = sc_ir_new_var(&bld, "pos", SC_IR_I32, true, false, false);
    sc_ir_var y = sc_ir_new_var(&bld, "y", SC_IR_F32, true, false, false);
    sc_ir_var i = sc_ir_new_var(&bld, "i", SC_IR_I64, false, false, false);
    sc_ir_var n = sc_ir_new_var(&bld, "n", SC_IR_I64, false, false, false);
    const sc_ir_expr *one = sc_ir_flt(&bld, 1.0, SC_IR_F32);
    const sc_ir_stmt *body = sc_ir_store(&bld, y, sc_ir_var_ref(&bld, i), false, one);
    const sc_ir_stmt *pair[2] = {
        sc_ir_store(&bld, y, sc_ir_var_ref(&bld, i), false, one),
        sc_ir_store(&bld, y, sc_ir_bin(&bld, SC_IR_OP_ADD, sc_ir_var_ref(&bld, i), sc_ir_int(&bld, 1)),
                    false, one)};
    const sc_ir_stmt *loop = sc_ir_for_balanced(&bld, i, sc_ir_int(&bld, 0), sc_ir_var_ref(&bld, n),
                                                SC_IR_PAR_FOR, pos, NULL, body);
    CHECK(sc_ir_pairs(&bld, loop, 3, sc_ir_block(&bld, pair, 2)) == loop);
    const sc_ir_stmt *items[4] = {
        sc_ir_decl(&bld, n, sc_ir_int(&bld, 4)),
        sc_ir_decl(&bld, pos, sc_ir_alloc(&bld, SC_IR_I32, sc_ir_int(&bld, 5))),
        sc_ir_decl(&bld, y, sc_ir_alloc(&bld, SC_IR_F32, sc_ir_var_ref(&bld, n))), loop};
    CHECK(sc_ir_finish(&bld, sc_ir_block(&bld, items, 4)) == SC_OK);
    CHECK(sc_ir_verify(&f, &err) == SC_OK);
    char t[1024];
    sc_ir_print(&f, t, sizeof t);
    CHECK(strstr(t, "balanced by pos_0:") != NULL && strstr(t, "pairs i_2, i_2 + 1 in ranges of rows averaging >= 3 entries:") != NULL);
    CHECK(strstr(t, "y_1[(i_2 + 1)] = 1") != NULL);
    /* a second pair body, and one on a plain loop, are refused */
    CHECK(sc_ir_pairs(&bld, loop, 3, body) == NULL && strstr(err.msg, "only a balanced loop"));
    sc_ir_builder_init(&bld, &ar, &f, "pr2", SC_DTYPE_F32, &err);
    i = sc_ir_new_var(&bld, "i", SC_IR_I64, false, false, false);
    const sc_ir_stmt *plain = sc_ir_for(&bld, i, sc_ir_int(&bld, 0), sc_ir_int(&bld, 2), sc_ir_int(&bld, 1),
                                        SC_IR_SEQ, 0, sc_ir_block(&bld, NULL, 0));
    CHECK(sc_ir_pairs(&bld, plain, 0, sc_ir_block(&bld, NULL, 0)) == NULL);
    CHECK(bld.st == SC_INTERNAL && strstr(err.msg, "only a balanced loop"));
    sc_ir_builder_init(&bld, &ar, &f, "pr3", SC_DTYPE_F32, &err);
    i = sc_ir_new_var(&bld, "i", SC_IR_I64, false, false, false);
    pos = sc_ir_new_var(&bld, "pos", SC_IR_I32, true, false, false);
    loop = sc_ir_for_balanced(&bld, i, sc_ir_int(&bld, 0), sc_ir_int(&bld, 2), SC_IR_PAR_FOR, pos, NULL,
                              sc_ir_block(&bld, NULL, 0));
    CHECK(sc_ir_pairs(&bld, loop, -1, sc_ir_block(&bld, NULL, 0)) == NULL);
    CHECK(bld.st == SC_INTERNAL && strstr(err.msg, "only a balanced loop"));
    sc_arena_release(&ar);
}

/* RUNS: a balanced loop's run body over rows v .. end - 1, its end variable in scope only
 * there, printed after the loop's body; refused on a plain loop, a second time, for a
 * minimum below 1 or with the loop variable as the end. */
static void test_runs_ir(void)
{
    sc_arena ar;
    sc_arena_init(&ar, &ctx);
    sc_ir_func f;
    sc_error err;
    sc_ir_builder bld;
    sc_ir_builder_init(&bld, &ar, &f, "ru", SC_DTYPE_F32, &err);
    sc_ir_var pos = sc_ir_new_var(&bld, "pos", SC_IR_I32, true, false, false);
    sc_ir_var y = sc_ir_new_var(&bld, "y", SC_IR_F32, true, false, false);
    sc_ir_var i = sc_ir_new_var(&bld, "i", SC_IR_I64, false, false, false);
    sc_ir_var n = sc_ir_new_var(&bld, "n", SC_IR_I64, false, false, false);
    sc_ir_var re = sc_ir_new_var(&bld, "re", SC_IR_I64, false, false, false);
    const sc_ir_expr *one = sc_ir_flt(&bld, 1.0, SC_IR_F32);
    const sc_ir_stmt *body = sc_ir_store(&bld, y, sc_ir_var_ref(&bld, i), false, one);
    const sc_ir_stmt *run = sc_ir_store(&bld, y, sc_ir_var_ref(&bld, re), false, one);
    const sc_ir_stmt *loop = sc_ir_for_balanced(&bld, i, sc_ir_int(&bld, 0), sc_ir_var_ref(&bld, n),
                                                SC_IR_PAR_FOR, pos, NULL, body);
    CHECK(sc_ir_runs(&bld, loop, 0, re, run) == NULL && strstr(err.msg, "only a balanced loop"));
    bld.st = SC_OK;
    CHECK(sc_ir_runs(&bld, loop, 8, i, run) == NULL && strstr(err.msg, "variable of its own"));
    bld.st = SC_OK;
    CHECK(sc_ir_runs(&bld, loop, 8, re, run) == loop);
    const sc_ir_stmt *items[4] = {
        sc_ir_decl(&bld, n, sc_ir_int(&bld, 4)),
        sc_ir_decl(&bld, pos, sc_ir_alloc(&bld, SC_IR_I32, sc_ir_int(&bld, 5))),
        sc_ir_decl(&bld, y, sc_ir_alloc(&bld, SC_IR_F32, sc_ir_int(&bld, 6))), loop};
    CHECK(sc_ir_finish(&bld, sc_ir_block(&bld, items, 4)) == SC_OK);
    CHECK(sc_ir_verify(&f, &err) == SC_OK);
    char t[1024];
    sc_ir_print(&f, t, sizeof t);
    CHECK(strstr(t, "runs of rows under 8 entries i_2 .. re_4:") != NULL);
    CHECK(sc_ir_runs(&bld, loop, 8, re, run) == NULL && strstr(err.msg, "only a balanced loop"));
    /* the end of a run used in the loop's own body is out of scope */
    sc_ir_builder_init(&bld, &ar, &f, "ru2", SC_DTYPE_F32, &err);
    pos = sc_ir_new_var(&bld, "pos", SC_IR_I32, true, false, false);
    y = sc_ir_new_var(&bld, "y", SC_IR_F32, true, false, false);
    i = sc_ir_new_var(&bld, "i", SC_IR_I64, false, false, false);
    re = sc_ir_new_var(&bld, "re", SC_IR_I64, false, false, false);
    one = sc_ir_flt(&bld, 1.0, SC_IR_F32);
    loop = sc_ir_for_balanced(&bld, i, sc_ir_int(&bld, 0), sc_ir_int(&bld, 4), SC_IR_PAR_FOR, pos, NULL,
                              sc_ir_store(&bld, y, sc_ir_var_ref(&bld, re), false, one));
    CHECK(sc_ir_runs(&bld, loop, 8, re, sc_ir_store(&bld, y, sc_ir_var_ref(&bld, re), false, one)) == loop);
    const sc_ir_stmt *items2[3] = {
        sc_ir_decl(&bld, pos, sc_ir_alloc(&bld, SC_IR_I32, sc_ir_int(&bld, 5))),
        sc_ir_decl(&bld, y, sc_ir_alloc(&bld, SC_IR_F32, sc_ir_int(&bld, 6))), loop};
    CHECK(sc_ir_finish(&bld, sc_ir_block(&bld, items2, 3)) == SC_OK);
    CHECK(sc_ir_verify(&f, &err) != SC_OK);
    sc_arena_release(&ar);
}

/* ROWOF: the row of a position over a readonly int32/int64 pos array (an operand's),
 * printed with its first row and end row, verified with the array in scope; refused over
 * a writable or float buffer and for a float position or bound. */
static void test_rowof_ir(void)
{
    sc_arena ar;
    sc_arena_init(&ar, &ctx);
    sc_ir_func f;
    sc_error err;
    sc_ir_builder bld;
    sc_ir_builder_init(&bld, &ar, &f, "ro", SC_DTYPE_F32, &err);
    sc_ir_var pos = sc_ir_new_var(&bld, "pos", SC_IR_I64, true, true, false);
    sc_ir_var row = sc_ir_new_var(&bld, "row", SC_IR_I64, false, false, false);
    const sc_ir_expr *ro = sc_ir_rowof(&bld, pos, sc_ir_int(&bld, 2), sc_ir_int(&bld, 9),
                                       sc_ir_int(&bld, 7));
    CHECK(ro != NULL && ro->type == SC_IR_I64);
    const sc_ir_stmt *items[2] = {
        sc_ir_decl(&bld, pos, sc_ir_arg_ref(&bld, SC_IR_ARG_POS, 0, 1, SC_IR_I64)),
        sc_ir_decl(&bld, row, ro)};
    CHECK(sc_ir_finish(&bld, sc_ir_block(&bld, items, 2)) == SC_OK);
    CHECK(sc_ir_verify(&f, &err) == SC_OK);
    char t[512];
    sc_ir_print(&f, t, sizeof t);
    CHECK(strstr(t, "row_1 = rowof(pos_0, 2, 9, 7)") != NULL);
    /* used before its array is declared */
    sc_ir_builder_init(&bld, &ar, &f, "ro2", SC_DTYPE_F32, &err);
    pos = sc_ir_new_var(&bld, "pos", SC_IR_I32, true, true, false);
    row = sc_ir_new_var(&bld, "row", SC_IR_I64, false, false, false);
    CHECK(sc_ir_finish(&bld, sc_ir_decl(&bld, row, sc_ir_rowof(&bld, pos, sc_ir_int(&bld, 0),
                                                                sc_ir_int(&bld, 0),
                                                                sc_ir_int(&bld, 1)))) == SC_OK);
    CHECK(sc_ir_verify(&f, &err) != SC_OK);
    /* a writable or a float array; a float position or bound */
    sc_ir_builder_init(&bld, &ar, &f, "ro3", SC_DTYPE_F32, &err);
    sc_ir_var w = sc_ir_new_var(&bld, "w", SC_IR_I32, true, false, false);
    sc_ir_var fl = sc_ir_new_var(&bld, "fl", SC_IR_F32, true, true, false);
    pos = sc_ir_new_var(&bld, "pos", SC_IR_I32, true, true, false);
    const sc_ir_expr *z = sc_ir_int(&bld, 0), *x = sc_ir_flt(&bld, 1.0, SC_IR_F32);
    CHECK(sc_ir_rowof(&bld, w, z, z, z) == NULL && strstr(err.msg, "row search over w"));
    bld.st = SC_OK;
    CHECK(sc_ir_rowof(&bld, fl, z, z, z) == NULL && strstr(err.msg, "row search over fl"));
    bld.st = SC_OK;
    CHECK(sc_ir_rowof(&bld, pos, z, x, z) == NULL);
    bld.st = SC_OK;
    CHECK(sc_ir_rowof(&bld, pos, z, z, x) == NULL);
    sc_arena_release(&ar);
}

/* VGATHER: a masked gather of half or a quarter of a vector's lanes at a readonly int32
 * coordinate buffer, summed by a partial-width hsum; printed and verified with the
 * coordinate buffer in scope; refused for full or odd widths, int64 or writable
 * coordinates, a coordinate buffer that is not a buffer, and hsum of a scalar.  And a
 * read-only scalar refuses an assignment. */
static void test_gather_ir(void)
{
    sc_arena ar;
    sc_arena_init(&ar, &ctx);
    sc_ir_func f;
    sc_error err;
    sc_ir_builder bld;
    sc_ir_builder_init(&bld, &ar, &f, "ga", SC_DTYPE_F32, &err);
    sc_ir_var x = sc_ir_new_var(&bld, "x", SC_IR_F32, true, true, false);
    sc_ir_var crd = sc_ir_new_var(&bld, "crd", SC_IR_I32, true, true, false);
    sc_ir_var s = sc_ir_new_var(&bld, "s", SC_IR_F32, false, false, false);
    const sc_ir_expr *at = sc_ir_int(&bld, 3), *n = sc_ir_int(&bld, 2);
    const sc_ir_expr *g = sc_ir_vgather_n(&bld, x, crd, at, n, 4);
    CHECK(g != NULL && g->lanes == 4 && g->type == SC_IR_F32);
    const sc_ir_expr *prod = sc_ir_bin(&bld, SC_IR_OP_MUL, sc_ir_vload_n(&bld, x, at, n, 4), g);
    const sc_ir_stmt *items[3] = {
        sc_ir_decl(&bld, x, sc_ir_alloc(&bld, SC_IR_F32, sc_ir_int(&bld, 8))),
        sc_ir_decl(&bld, crd, sc_ir_alloc(&bld, SC_IR_I32, sc_ir_int(&bld, 8))),
        sc_ir_decl(&bld, s, sc_ir_hsum(&bld, prod))};
    CHECK(sc_ir_finish(&bld, sc_ir_block(&bld, items, 3)) == SC_OK);
    CHECK(sc_ir_verify(&f, &err) == SC_OK);
    char t[1024];
    sc_ir_print(&f, t, sizeof t);
    CHECK(strstr(t, "hsum((x_0[3 +4 lanes, first 2] * x_0[crd_1[3 +4 lanes, first 2]]))") != NULL);
    /* the coordinate buffer used before its declaration */
    sc_ir_builder_init(&bld, &ar, &f, "ga2", SC_DTYPE_F32, &err);
    x = sc_ir_new_var(&bld, "x", SC_IR_F32, true, true, false);
    crd = sc_ir_new_var(&bld, "crd", SC_IR_I32, true, true, false);
    s = sc_ir_new_var(&bld, "s", SC_IR_F32, false, false, false);
    const sc_ir_stmt *late[3] = {
        sc_ir_decl(&bld, x, sc_ir_alloc(&bld, SC_IR_F32, sc_ir_int(&bld, 8))),
        sc_ir_decl(&bld, s, sc_ir_hsum(&bld, sc_ir_vgather_n(&bld, x, crd, sc_ir_int(&bld, 0),
                                                              sc_ir_int(&bld, 1), 8))),
        sc_ir_decl(&bld, crd, sc_ir_alloc(&bld, SC_IR_I32, sc_ir_int(&bld, 8)))};
    CHECK(sc_ir_finish(&bld, sc_ir_block(&bld, late, 3)) == SC_OK);
    CHECK(sc_ir_verify(&f, &err) != SC_OK && strstr(err.msg, "crd") != NULL);
    /* refusals: 16 (full) and 5 lanes; int64, writable and scalar coordinates */
    static const int32_t bad_lanes[] = {16, 5};
    for (int i = 0; i < 6; i++) {
        sc_ir_builder_init(&bld, &ar, &f, "ga3", SC_DTYPE_F32, &err);
        x = sc_ir_new_var(&bld, "x", SC_IR_F32, true, true, false);
        sc_ir_type ct = i == 2 ? SC_IR_I64 : SC_IR_I32;
        crd = sc_ir_new_var(&bld, "crd", ct, i != 4, i != 3, false);
        const sc_ir_expr *e = i == 5 ? sc_ir_hsum(&bld, sc_ir_flt(&bld, 1.0, SC_IR_F32))
                                     : sc_ir_vgather_n(&bld, x, crd, sc_ir_int(&bld, 0), sc_ir_int(&bld, 1),
                                                       i < 2 ? bad_lanes[i] : 8);
        CHECK(e == NULL && bld.st == SC_INTERNAL);
    }
    /* a read-only scalar (a fixed extent) is declared const and never assigned */
    sc_ir_builder_init(&bld, &ar, &f, "ro", SC_DTYPE_F32, &err);
    sc_ir_var nk = sc_ir_new_var(&bld, "Nk", SC_IR_I64, false, true, false);
    const sc_ir_stmt *ro[2] = {sc_ir_decl(&bld, nk, sc_ir_int(&bld, 16)),
                               sc_ir_assign(&bld, nk, true, sc_ir_int(&bld, 1))};
    CHECK(sc_ir_finish(&bld, sc_ir_block(&bld, ro, 2)) == SC_OK);
    CHECK(sc_ir_verify(&f, &err) != SC_OK && strstr(err.msg, "assignment to a read-only") != NULL);
    sc_arena_release(&ar);
}

/* FOLD / LANE: full-width vectors of one type, a power-of-two block width below the lane
 * count, a lane inside the vector; printed and verified like the other expressions. */
static void test_fold_ir(void)
{
    sc_arena ar;
    sc_arena_init(&ar, &ctx);
    sc_ir_func f;
    sc_error err;
    sc_ir_builder bld;
    sc_ir_builder_init(&bld, &ar, &f, "fold", SC_DTYPE_F32, &err);
    sc_ir_var x = sc_ir_new_vector(&bld, "x", SC_IR_F32, 16);
    sc_ir_var s = sc_ir_new_var(&bld, "s", SC_IR_F32, false, false, false);
    const sc_ir_expr *z = sc_ir_splat(&bld, sc_ir_flt(&bld, 0.0, SC_IR_F32), 16);
    const sc_ir_expr *xr = sc_ir_var_ref(&bld, x);
    const sc_ir_stmt *items[2] = {
        sc_ir_decl(&bld, x, sc_ir_fold(&bld, z, z, 8)),
        sc_ir_decl(&bld, s, sc_ir_lane(&bld, sc_ir_fold(&bld, xr, xr, 1), 7))};
    CHECK(sc_ir_finish(&bld, sc_ir_block(&bld, items, 2)) == SC_OK);
    CHECK(sc_ir_verify(&f, &err) == SC_OK);
    char t[1024];
    sc_ir_print(&f, t, sizeof t);
    CHECK(strstr(t, "fold8(splat(") != NULL);
    CHECK(strstr(t, "lane7(fold1(x_0, x_0))") != NULL);
    /* width 16 of a 16-lane vector, 3 (not a power of two), -1, a half vector, mixed
     * types; width 0 (the last step, lane pairs in order) of two vectors */
    static const int32_t bad_w[] = {16, 3, -1};
    for (int i = 0; i < 3; i++) {
        sc_ir_builder_init(&bld, &ar, &f, "fold2", SC_DTYPE_F32, &err);
        const sc_ir_expr *v = sc_ir_splat(&bld, sc_ir_flt(&bld, 1.0, SC_IR_F32), 16);
        CHECK(sc_ir_fold(&bld, v, v, bad_w[i]) == NULL && bld.st == SC_INTERNAL);
    }
    sc_ir_builder_init(&bld, &ar, &f, "fold0", SC_DTYPE_F32, &err);
    const sc_ir_expr *v0 = sc_ir_splat(&bld, sc_ir_flt(&bld, 1.0, SC_IR_F32), 16);
    CHECK(sc_ir_fold(&bld, v0, v0, 0) != NULL && bld.st == SC_OK);
    const sc_ir_expr *v1 = sc_ir_splat(&bld, sc_ir_flt(&bld, 1.0, SC_IR_F32), 16);
    CHECK(sc_ir_fold(&bld, v0, v1, 0) == NULL && bld.st == SC_INTERNAL);
    /* pair t of 16 float lanes to lanes t and t + 8; of 8 double lanes to t and t + 4 */
    CHECK(sc_ir_fold_src(&f, SC_IR_F32, 0, 0, 3) == 6 && sc_ir_fold_src(&f, SC_IR_F32, 0, 1, 3) == 7);
    CHECK(sc_ir_fold_src(&f, SC_IR_F32, 0, 0, 9) == 2 && sc_ir_fold_src(&f, SC_IR_F32, 0, 1, 15) == 15);
    CHECK(sc_ir_fold_src(&f, SC_IR_F64, 0, 0, 5) == 2 && sc_ir_fold_src(&f, SC_IR_F64, 0, 1, 3) == 7);
    sc_ir_builder_init(&bld, &ar, &f, "fold3", SC_DTYPE_F32, &err);
    const sc_ir_expr *h = sc_ir_splat(&bld, sc_ir_flt(&bld, 1.0, SC_IR_F32), 8);
    CHECK(sc_ir_fold(&bld, h, h, 2) == NULL && strstr(err.msg, "fold of partial or mixed"));
    sc_ir_builder_init(&bld, &ar, &f, "fold4", SC_DTYPE_F32, &err);
    const sc_ir_expr *a = sc_ir_splat(&bld, sc_ir_flt(&bld, 1.0, SC_IR_F32), 16);
    const sc_ir_expr *d = sc_ir_splat(&bld, sc_ir_flt(&bld, 1.0, SC_IR_F64), 8);
    CHECK(sc_ir_fold(&bld, a, d, 4) == NULL && bld.st == SC_INTERNAL);
    sc_ir_builder_init(&bld, &ar, &f, "lane", SC_DTYPE_F32, &err);
    CHECK(sc_ir_lane(&bld, sc_ir_flt(&bld, 1.0, SC_IR_F32), 0) == NULL &&
          strstr(err.msg, "lane 0 of a 0-lane value"));
    sc_ir_builder_init(&bld, &ar, &f, "lane2", SC_DTYPE_F32, &err);
    a = sc_ir_splat(&bld, sc_ir_flt(&bld, 1.0, SC_IR_F32), 16);
    CHECK(sc_ir_lane(&bld, a, 16) == NULL && bld.st == SC_INTERNAL);
    sc_arena_release(&ar);
}

static void test_prefetch_ir(void)
{
    sc_arena ar;
    sc_arena_init(&ar, &ctx);
    sc_ir_func f;
    sc_error err;
    sc_ir_builder bld;
    sc_ir_builder_init(&bld, &ar, &f, "pf", SC_DTYPE_F32, &err);
    sc_ir_var in = sc_ir_new_var(&bld, "in", SC_IR_F32, true, true, false);
    sc_ir_var out = sc_ir_new_var(&bld, "out", SC_IR_F32, true, false, false);
    const sc_ir_stmt *items[2] = {sc_ir_prefetch(&bld, in, sc_ir_int(&bld, 5)),
                                  sc_ir_prefetch_write(&bld, out, sc_ir_int(&bld, 7))};
    CHECK(sc_ir_finish(&bld, sc_ir_block(&bld, items, 2)) == SC_OK);
    char t[512];
    sc_ir_print(&f, t, sizeof t);
    CHECK(strstr(t, "prefetch in_0[5]") != NULL);
    CHECK(strstr(t, "prefetch for writing out_1[7]") != NULL);
    /* an operand's array is never written, so never fetched for writing */
    sc_ir_builder_init(&bld, &ar, &f, "pf2", SC_DTYPE_F32, &err);
    in = sc_ir_new_var(&bld, "in", SC_IR_F32, true, true, false);
    CHECK(sc_ir_prefetch_write(&bld, in, sc_ir_int(&bld, 0)) == NULL &&
          strstr(err.msg, "prefetch for writing of readonly in_0"));
    sc_arena_release(&ar);
}

static void test_build_and_verify(void)
{
    prob P;
    const char *fmts[2] = {"csr", "csr"};
    const int64_t dims[2][4] = {{50, 60}, {60, 70}};
    mk(&P, "ij,jk->ik", 0, 2, fmts, dims, NULL, NULL);
    sc_sched s;
    CHECK(sc_sched_auto(&P.p, &s, &P.err) == SC_OK);
    sc_ir_func fn;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    CHECK(sc_lower_build(&P.arena, &P.p, &s, "k", &fn, &P.err) == SC_OK);
    clock_gettime(CLOCK_MONOTONIC, &b);
    CHECK(sc_ir_verify(&fn, &P.err) == SC_OK);
    char txt[12288];
    size_t n = sc_ir_print(&fn, txt, sizeof txt);
    CHECK(n > 0 && n < sizeof txt);
    CHECK(strstr(txt, "parallel if ((128 <= nrows") != NULL);
    /* Gustavson workspace: rows bounded by their multiply counts (no count phase),
     * bitmap marks, the fill orders the row's coordinates in place in the output, whose
     * arrays have the bound's size */
    CHECK(strstr(txt, "= mark_new k_") != NULL);
    CHECK(strstr(txt, "collect ws_list_") == NULL);
    CHECK(strstr(txt, "collect sorted out_crd_") != NULL);
    CHECK(strstr(txt, "alloc_uninit<int32_t>(bound_") != NULL);
    CHECK(strstr(txt, "sort ws_list") == NULL);
    CHECK(strstr(txt, "prefetch B1_crd_") != NULL);
    CHECK(strstr(txt, "omp for i") != NULL);
    printf("  build SpGEMM loop IR: %.1f us\n",
           (double)(b.tv_sec - a.tv_sec) * 1e6 + (double)(b.tv_nsec - a.tv_nsec) / 1e3);
    sc_arena_release(&P.arena);

    /* the verifier rejects a use outside scope */
    sc_arena ar;
    sc_arena_init(&ar, &ctx);
    sc_ir_func f2;
    sc_error err;
    sc_ir_builder bld;
    sc_ir_builder_init(&bld, &ar, &f2, "bad", SC_DTYPE_F64, &err);
    sc_ir_var x = sc_ir_new_var(&bld, "x", SC_IR_I64, false, false, false);
    sc_ir_var i = sc_ir_new_var(&bld, "i", SC_IR_I64, false, false, false);
    const sc_ir_stmt *loop = sc_ir_for(&bld, i, sc_ir_int(&bld, 0), sc_ir_int(&bld, 4),
                                       sc_ir_int(&bld, 2), SC_IR_SEQ, 0,
                                       sc_ir_decl(&bld, x, sc_ir_var_ref(&bld, i)));
    const sc_ir_stmt *items[2] = {loop, sc_ir_assign(&bld, x, true, sc_ir_int(&bld, 1))};
    CHECK(sc_ir_finish(&bld, sc_ir_block(&bld, items, 2)) == SC_OK);
    CHECK(sc_ir_verify(&f2, &err) == SC_INTERNAL && strstr(err.msg, "outside its scope"));
    char t2[512];
    sc_ir_print(&f2, t2, sizeof t2);
    CHECK(strstr(t2, "step 2") != NULL);
    /* a checking constructor refuses a float loop variable, and the builder stays failed */
    sc_ir_var fv = sc_ir_new_var(&bld, "f", SC_IR_F64, false, false, false);
    CHECK(fv < 0 || sc_ir_for(&bld, fv, sc_ir_int(&bld, 0), sc_ir_int(&bld, 1), sc_ir_int(&bld, 1),
                             SC_IR_SEQ, 0, loop) == NULL);
    CHECK(bld.st == SC_INTERNAL && sc_ir_int(&bld, 3) == NULL);
    sc_arena_release(&ar);
    test_bitmap_ir();
}

/* Prepare "C(i,j) = <rhs>" over A, a dense 2x3 of dtype dt, into *P; the literal of the
 * right-hand side (itself or its product's left factor) in *lit, NULL where there is none. */
static sc_status lower_literal(prob *P, const char *expr, sc_dtype dt, const sc_lower_node **lit)
{
    sc_arena_init(&P->arena, &ctx);
    sc_tensor op;
    memset(&op, 0, sizeof op);
    sc_fmt_parse("dense", 2, &op.fmt, NULL);
    op.dims[0] = 2;
    op.dims[1] = 3;
    op.dtype = dt;
    op.index_type = SC_INDEX_I32;
    op.nvals = 6;
    sc_error_clear(&P->err);
    *lit = NULL;
    P->st = sc_expr_parse_index(&P->arena, expr, &P->e, &P->err);
    if (P->st == SC_OK)
        P->st = sc_lower_prepare(&P->arena, &P->e, 1, &op, &P->p, &P->err);
    if (P->st == SC_OK) {
        const sc_lower_node *n = P->p.rhs->kind == SC_LN_MUL ? P->p.rhs->a : P->p.rhs;
        *lit = n->kind == SC_LN_LIT ? n : NULL;
    }
    return P->st;
}

static bool int_literal_is(const char *expr, sc_dtype dt, int64_t want)
{
    prob P;
    const sc_lower_node *n;
    bool ok = lower_literal(&P, expr, dt, &n) == SC_OK && n && n->ival == want;
    if (!ok)
        fprintf(stderr, "%s in %s: %s, got %lld, want %lld\n", expr, sc_dtype_name(dt),
                P.st ? P.err.msg : "ok", n ? (long long)n->ival : 0LL, (long long)want);
    sc_arena_release(&P.arena);
    return ok;
}

static bool float_literal_is(const char *expr, sc_dtype dt, double want)
{
    prob P;
    const sc_lower_node *n;
    bool ok = lower_literal(&P, expr, dt, &n) == SC_OK && n && n->value == want;
    if (!ok)
        fprintf(stderr, "%s in %s: %s, got %.17g, want %.17g\n", expr, sc_dtype_name(dt),
                P.st ? P.err.msg : "ok", n ? n->value : 0.0, want);
    sc_arena_release(&P.arena);
    return ok;
}

static bool literal_error(const char *expr, sc_dtype dt, int32_t pos, const char *phrase)
{
    prob P;
    const sc_lower_node *n;
    sc_status st = lower_literal(&P, expr, dt, &n);
    bool ok = st == SC_USER && P.err.pos == pos && strstr(P.err.msg, phrase);
    if (!ok)
        fprintf(stderr, "%s in %s: %s at %lld: '%s', want USER at %d: '%s'\n", expr,
                sc_dtype_name(dt), sc_status_name(st), (long long)P.err.pos, P.err.msg,
                (int)pos, phrase);
    sc_arena_release(&P.arena);
    return ok;
}

/* Literals in the kernel's dtype, as torch converts a Python scalar for a tensor of it:
 * an integer exactly in int64, wrapped in int32, rounded once (from the integer, not
 * through a double) in float32; a float literal of an integer dtype only where it is an
 * integer of its range.  Then the constant in the loop IR. */
static void test_literals(void)
{
    const char *big = "C(i,j) = 9007199254740993 * A(i,j)"; /* 2^53 + 1 */
    CHECK(int_literal_is(big, SC_DTYPE_I64, 9007199254740993));
    CHECK(int_literal_is("C(i,j) = 9223372036854775807 * A(i,j)", SC_DTYPE_I64, INT64_MAX));
    CHECK(int_literal_is("C(i,j) = -9223372036854775808 * A(i,j)", SC_DTYPE_I64, INT64_MIN));
    CHECK(int_literal_is("C(i,j) = 3e9 * A(i,j)", SC_DTYPE_I64, 3000000000));
    CHECK(int_literal_is(big, SC_DTYPE_I32, 1));
    CHECK(int_literal_is("C(i,j) = 2147483648 * A(i,j)", SC_DTYPE_I32, INT32_MIN));
    CHECK(int_literal_is("C(i,j) = 4294967295 * A(i,j)", SC_DTYPE_I32, -1));
    CHECK(int_literal_is("C(i,j) = 9223372036854775807 * A(i,j)", SC_DTYPE_I32, -1));
    CHECK(int_literal_is("C(i,j) = -9223372036854775808 * A(i,j)", SC_DTYPE_I32, 0));
    CHECK(int_literal_is("C(i,j) = 2.0 * A(i,j)", SC_DTYPE_I32, 2));
    CHECK(float_literal_is(big, SC_DTYPE_F64, 9007199254740992.0));
    CHECK(float_literal_is("C(i,j) = -9223372036854775808 * A(i,j)", SC_DTYPE_F64, -0x1p63));
    /* 2^60 + 2^36 + 1: float32's nearest is 2^60 + 2^37; through double (2^60 + 2^36, a
     * tie) it would be 2^60 */
    CHECK(float_literal_is("C(i,j) = 1152921573326323713 * A(i,j)", SC_DTYPE_F32,
                           0x1p60 + 0x1p37));
    CHECK(float_literal_is("C(i,j) = 1152921573326323713 * A(i,j)", SC_DTYPE_F64,
                           0x1p60 + 0x1p36));
    CHECK(float_literal_is("C(i,j) = 0.1 * A(i,j)", SC_DTYPE_F32, 0.1));
    CHECK(literal_error("C(i,j) = 0.5 * A(i,j)", SC_DTYPE_I64, 9,
                        "the constant 0.5 is not an int64 value"));
    CHECK(literal_error("C(i,j) = A(i,j) + 3e9", SC_DTYPE_I32, 18,
                        "the constant 3000000000.0 is not an int32 value"));
    CHECK(literal_error("C(i,j) = 9223372036854775808.0 * A(i,j)", SC_DTYPE_I64, 9,
                        "the constant 9.223372036854776e+18 is not an int64 value"));

    /* the constant reaches the loop IR exactly, and its text */
    prob P;
    const sc_lower_node *n;
    CHECK(lower_literal(&P, big, SC_DTYPE_I64, &n) == SC_OK);
    if (P.st == SC_OK && sc_lower_set_output(&P.p, NULL, &P.err) == SC_OK) {
        char txt[4096];
        sc_lower_node_text(&P.p, P.p.rhs, txt, sizeof txt);
        CHECK(strcmp(txt, "9007199254740993 * A") == 0);
        sc_sched s;
        sc_ir_func fn;
        CHECK(sc_sched_auto(&P.p, &s, &P.err) == SC_OK);
        CHECK(sc_lower_build(&P.arena, &P.p, &s, "k", &fn, &P.err) == SC_OK);
        CHECK(sc_ir_verify(&fn, &P.err) == SC_OK);
        sc_ir_print(&fn, txt, sizeof txt);
        CHECK(strstr(txt, "9007199254740993") != NULL);
    }
    sc_arena_release(&P.arena);

    /* the checking constructors of value constants */
    sc_arena ar;
    sc_arena_init(&ar, &ctx);
    sc_ir_func f;
    sc_error err;
    sc_ir_builder bld;
    sc_ir_builder_init(&bld, &ar, &f, "lit", SC_DTYPE_I64, &err);
    const sc_ir_expr *c = sc_ir_int_value(&bld, INT64_MIN, SC_IR_VI64);
    CHECK(c && c->kind == SC_IR_E_FLT && c->type == SC_IR_VI64 && c->ival == INT64_MIN);
    c = sc_ir_flt(&bld, -3.0, SC_IR_VI32);
    CHECK(c && c->kind == SC_IR_E_FLT && c->ival == -3);
    CHECK(sc_ir_int_value(&bld, (int64_t)1 << 31, SC_IR_VI32) == NULL && bld.st == SC_INTERNAL);
    sc_ir_builder_init(&bld, &ar, &f, "lit", SC_DTYPE_I64, &err);
    CHECK(sc_ir_flt(&bld, 0.5, SC_IR_VI64) == NULL && bld.st == SC_INTERNAL);
    sc_ir_builder_init(&bld, &ar, &f, "lit", SC_DTYPE_I64, &err);
    CHECK(sc_ir_int_value(&bld, 1, SC_IR_F64) == NULL && bld.st == SC_INTERNAL);
    sc_arena_release(&ar);
}

int main(void)
{
    sc_ctx_init(&ctx);
    test_literals();
    test_lattices();
    test_inference();
    test_loop_orders();
    test_schedule_text();
    test_relayout_rules();
    test_build_and_verify();
    test_fold_ir();
    test_prefetch_ir();
    test_pairs_ir();
    test_runs_ir();
    test_rowof_ir();
    test_gather_ir();
    return check_report("test_lower");
}
