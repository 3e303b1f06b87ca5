/*
 * test_format.c — the format stage without Python: parsing, validation, conversions
 * between every pair of formats against a dense reference, and allocation failure
 * injected at every allocation of a conversion (run under ASan/UBSan by `make asan`).
 */
#include "../format/sc_format.h"
#include "check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Allocator that fails at the Nth call (fail_at < 0: never). */
typedef struct failing {
    long calls, fail_at;
} failing;

static void *failing_alloc(void *user, size_t n)
{
    failing *f = user;
    if (f->fail_at >= 0 && f->calls++ == f->fail_at)
        return NULL;
    return malloc(n);
}

static void failing_free(void *user, void *p)
{
    (void)user;
    free(p);
}

static const char *const specs2[] = {"dense", "csr", "csc", "coo", "dcsr", "dcsc", "cd",
                                     "c(nonunique)s", "dd", "cc", "c(nonunique)d",
                                     "c(nonunique)c"};

static void test_parse(void)
{
    sc_format f;
    sc_error err;
    char buf[64];
    CHECK(sc_fmt_parse("csr", 2, &f, &err) == SC_OK);
    sc_fmt_levels_text(&f, buf, sizeof buf);
    CHECK(!strcmp(buf, "dc") && f.lvl2dim[0] == 0);
    CHECK(sc_fmt_name(&f) && !strcmp(sc_fmt_name(&f), "csr"));
    CHECK(sc_fmt_parse("csc", 2, &f, &err) == SC_OK && f.lvl2dim[0] == 1);
    CHECK(!strcmp(sc_fmt_name(&f), "csc"));
    CHECK(sc_fmt_parse("coo", 3, &f, &err) == SC_OK);
    sc_fmt_levels_text(&f, buf, sizeof buf);
    CHECK(!strcmp(buf, "c(nonunique)s(nonunique)s(nonunique)"));
    CHECK(sc_fmt_parse("d, compressed(nonunique) s", 3, &f, &err) == SC_OK);
    CHECK(f.kind[0] == SC_LEVEL_DENSE && f.kind[1] == SC_LEVEL_COMPRESSED && !f.unique[1] &&
          f.kind[2] == SC_LEVEL_SINGLETON);
    CHECK(sc_fmt_parse("csf", 4, &f, &err) == SC_OK && !strcmp(sc_fmt_name(&f), "csf"));
    /* errors */
    CHECK(sc_fmt_parse("dx", 2, &f, &err) == SC_USER && err.pos == 1);
    CHECK(sc_fmt_parse("d x", 2, &f, &err) == SC_USER && err.pos == 2);
    CHECK(sc_fmt_parse("csr", 3, &f, &err) == SC_USER && strstr(err.msg, "2-D"));
    CHECK(sc_fmt_parse("dcc", 2, &f, &err) == SC_USER && strstr(err.msg, "more levels"));
    CHECK(sc_fmt_parse("d", 2, &f, &err) == SC_USER && strstr(err.msg, "1 levels"));
    CHECK(sc_fmt_parse("ds", 2, &f, &err) == SC_USER && strstr(err.msg, "singleton"));
    CHECK(sc_fmt_parse("s", 1, &f, &err) == SC_USER);
    CHECK(sc_fmt_parse("c(maybe)", 1, &f, &err) == SC_USER && err.pos == 2);
    CHECK(sc_fmt_parse("d(nonunique)", 1, &f, &err) == SC_USER);
    /* a level name is whole: a cut one is no level (it was taken for the one it begins) */
    CHECK(sc_fmt_parse("compr, dense", 2, &f, &err) == SC_USER && strstr(err.msg, "level name"));
    CHECK(sc_fmt_parse("compresse,d", 2, &f, &err) == SC_USER && err.pos == 0);
    CHECK(sc_fmt_parse("c,singl", 2, &f, &err) == SC_USER && err.pos == 2);
    CHECK(sc_fmt_parse("dense,singleton", 2, &f, &err) == SC_USER && strstr(err.msg, "singleton"));
}

/* A 5x4 matrix with an empty row, an empty column and a duplicate. */
static const int64_t rows[] = {0, 0, 2, 4, 4, 2, 0};
static const int64_t cols[] = {1, 3, 0, 1, 3, 0, 1};
static const double vals[] = {1, 2, 3, 4, 5, 6, 10};
#define NE 7

static void dense_ref(double *d)
{
    memset(d, 0, 20 * sizeof *d);
    for (int e = 0; e < NE; e++)
        d[rows[e] * 4 + cols[e]] += vals[e];
}

static bool same(const double *a, const double *b, int n)
{
    for (int i = 0; i < n; i++)
        if (fabs(a[i] - b[i]) > 1e-12)
            return false;
    return true;
}

static void test_convert_grid(void)
{
    sc_ctx ctx;
    sc_ctx_init(&ctx);
    sc_error err;
    int64_t coords[2 * NE], dims[2] = {5, 4};
    for (int e = 0; e < NE; e++) {
        coords[e] = rows[e];
        coords[NE + e] = cols[e];
    }
    double ref[20], got[20];
    dense_ref(ref);
    size_t ns = sizeof specs2 / sizeof specs2[0];
    for (size_t a = 0; a < ns; a++) {
        for (int it = 0; it < SC_INDEX_COUNT; it++) {
            sc_format fa;
            CHECK(sc_fmt_parse(specs2[a], 2, &fa, &err) == SC_OK);
            sc_tensor ta;
            sc_status st = sc_fmt_from_coords(&ctx, 2, dims, NE, coords, NE, vals,
                                              SC_DTYPE_F64, &fa, (sc_index_type)it, 0, &ta, &err);
            CHECK(st == SC_OK);
            if (st != SC_OK)
                continue;
            CHECK(sc_fmt_validate(&ctx, &ta, &err) == SC_OK);
            CHECK(sc_fmt_to_dense(&ctx, &ta, got, &err) == SC_OK && same(ref, got, 20));
            for (size_t b = 0; b < ns; b++) {
                sc_format fb;
                sc_tensor tb;
                CHECK(sc_fmt_parse(specs2[b], 2, &fb, &err) == SC_OK);
                st = sc_fmt_convert(&ctx, &ta, &fb, SC_INDEX_I32, 0, &tb, &err);
                CHECK(st == SC_OK);
                if (st != SC_OK)
                    continue;
                CHECK(sc_fmt_validate(&ctx, &tb, &err) == SC_OK);
                CHECK(sc_fmt_to_dense(&ctx, &tb, got, &err) == SC_OK && same(ref, got, 20));
                sc_tensor_release(&ctx, &tb);
            }
            sc_tensor_release(&ctx, &ta);
        }
    }
    /* Dense to dense with the levels swapped (a schedule's relaid dense operand): every
     * entry, zeros included, at its transposed place. */
    {
        sc_format fd, ft;
        sc_tensor td, tt;
        CHECK(sc_fmt_parse("dense", 2, &fd, &err) == SC_OK);
        ft = fd;
        ft.lvl2dim[0] = 1;
        ft.lvl2dim[1] = 0;
        CHECK(sc_fmt_from_dense(&ctx, 2, dims, ref, SC_DTYPE_F64, &fd, SC_INDEX_I32, &td, &err) ==
              SC_OK);
        CHECK(sc_fmt_convert(&ctx, &td, &ft, SC_INDEX_I32, 0, &tt, &err) == SC_OK);
        CHECK(sc_fmt_validate(&ctx, &tt, &err) == SC_OK && tt.nvals == 20);
        CHECK(sc_fmt_to_dense(&ctx, &tt, got, &err) == SC_OK && same(ref, got, 20));
        const double *tv = (const double *)tt.vals;
        bool at = true;
        for (int i = 0; i < 5; i++)
            for (int j = 0; j < 4; j++)
                at &= tv[j * 5 + i] == ref[i * 4 + j];
        CHECK(at);
        sc_tensor_release(&ctx, &tt);
        sc_tensor_release(&ctx, &td);
        /* third order, 40 x 3 x 37 (tiles cut at both edges), levels (2, 0, 1), f32 */
        int64_t d3[3] = {40, 3, 37};
        float *x3 = malloc(sizeof(float) * 40 * 3 * 37), *g3 = malloc(sizeof(float) * 40 * 3 * 37);
        for (int i = 0; i < 40 * 3 * 37; i++)
            x3[i] = (float)(i % 97) - 40.0f;
        sc_format f3, p3;
        CHECK(sc_fmt_parse("ddd", 3, &f3, &err) == SC_OK);
        p3 = f3;
        p3.lvl2dim[0] = 2;
        p3.lvl2dim[1] = 0;
        p3.lvl2dim[2] = 1;
        CHECK(sc_fmt_from_dense(&ctx, 3, d3, x3, SC_DTYPE_F32, &f3, SC_INDEX_I64, &td, &err) == SC_OK);
        CHECK(sc_fmt_convert(&ctx, &td, &p3, SC_INDEX_I64, 0, &tt, &err) == SC_OK);
        CHECK(sc_fmt_to_dense(&ctx, &tt, g3, &err) == SC_OK && !memcmp(x3, g3, sizeof(float) * 40 * 3 * 37));
        CHECK(((const float *)tt.vals)[1] == x3[37]); /* (k=0, i=0, j=1) */
        sc_tensor_release(&ctx, &tt);
        sc_tensor_release(&ctx, &td);
        free(x3);
        free(g3);
    }
    /* Dense input, csr output: 6 nonzeros stored (the duplicate summed). */
    sc_format f;
    sc_tensor t;
    CHECK(sc_fmt_parse("csr", 2, &f, &err) == SC_OK);
    CHECK(sc_fmt_from_dense(&ctx, 2, dims, ref, SC_DTYPE_F64, &f, SC_INDEX_I64, &t, &err) ==
          SC_OK);
    CHECK(t.nvals == 5 && t.pos_len[1] == 6 && t.crd_len[1] == 5);
    CHECK(sc_fmt_to_dense(&ctx, &t, got, &err) == SC_OK && same(ref, got, 20));
    sc_tensor_release(&ctx, &t);
}

static void test_validate_errors(void)
{
    sc_ctx ctx;
    sc_ctx_init(&ctx);
    sc_error err;
    int32_t pos[] = {0, 2, 2, 3};
    int32_t crd[] = {1, 0, 2};
    double v[] = {1, 2, 3};
    sc_tensor t;
    memset(&t, 0, sizeof t);
    CHECK(sc_fmt_parse("csr", 2, &t.fmt, &err) == SC_OK);
    t.dims[0] = 3;
    t.dims[1] = 3;
    t.index_type = SC_INDEX_I32;
    t.dtype = SC_DTYPE_F64;
    t.pos[1] = pos;
    t.pos_len[1] = 4;
    t.crd[1] = crd;
    t.crd_len[1] = 3;
    t.vals = v;
    t.nvals = 3;
    CHECK(sc_fmt_validate(&ctx, &t, &err) == SC_USER && strstr(err.msg, "strictly increasing"));
    crd[0] = 0;
    crd[1] = 1;
    CHECK(sc_fmt_validate(&ctx, &t, &err) == SC_OK);
    crd[2] = 3;
    CHECK(sc_fmt_validate(&ctx, &t, &err) == SC_INDEX && strstr(err.msg, "out of range"));
    crd[2] = 2;
    pos[1] = 3;
    CHECK(sc_fmt_validate(&ctx, &t, &err) == SC_USER && strstr(err.msg, "decreases"));
    pos[1] = 2;
    t.pos_len[1] = 3;
    CHECK(sc_fmt_validate(&ctx, &t, &err) == SC_USER && strstr(err.msg, "length"));
    t.pos_len[1] = 4;
    t.nvals = 2;
    CHECK(sc_fmt_validate(&ctx, &t, &err) == SC_USER && strstr(err.msg, "values"));
    t.nvals = 3;
    pos[0] = 1;
    CHECK(sc_fmt_validate(&ctx, &t, &err) == SC_USER && strstr(err.msg, "start at 0"));
    pos[0] = 0;
    /* Coordinates out of range at construction. */
    int64_t coords[] = {0, 5, 0, 0};
    int64_t dims[] = {3, 3};
    sc_tensor out;
    CHECK(sc_fmt_from_coords(&ctx, 2, dims, 2, coords, 2, v, SC_DTYPE_F64, &t.fmt,
                             SC_INDEX_I32, 0, &out, &err) == SC_INDEX);
    /* A singleton under a unique level cannot hold two columns of one row. */
    int64_t c2[] = {1, 1, 0, 2};
    sc_format cs;
    CHECK(sc_fmt_parse("cs", 2, &cs, &err) == SC_OK);
    CHECK(sc_fmt_from_coords(&ctx, 2, dims, 2, c2, 2, v, SC_DTYPE_F64, &cs, SC_INDEX_I32, 0,
                             &out, &err) == SC_UNSUPPORTED);
    /* int32 cannot index a dimension of 2^31 + 1. */
    int64_t big[] = {3, ((int64_t)1 << 31) + 1};
    CHECK(sc_fmt_from_coords(&ctx, 2, big, 0, coords, 0, v, SC_DTYPE_F64, &t.fmt,
                             SC_INDEX_I32, 0, &out, &err) == SC_USER && strstr(err.msg, "int64"));
}

static void test_alloc_failure(void)
{
    failing fl = {0, 0};
    sc_ctx ctx;
    sc_ctx_init(&ctx);
    ctx.mem.alloc = failing_alloc;
    ctx.mem.free = failing_free;
    ctx.mem.user = &fl;
    sc_error err;
    int64_t coords[2 * NE], dims[2] = {5, 4};
    for (int e = 0; e < NE; e++) {
        coords[e] = rows[e];
        coords[NE + e] = cols[e];
    }
    sc_format f;
    CHECK(sc_fmt_parse("csc", 2, &f, &err) == SC_OK);
    int failures = 0;
    for (long n = 0; n < 200; n++) {
        fl.calls = 0;
        fl.fail_at = n;
        sc_tensor t, u;
        sc_status st = sc_fmt_from_coords(&ctx, 2, dims, NE, coords, NE, vals, SC_DTYPE_F64,
                                          &f, SC_INDEX_I32, 0, &t, &err);
        if (st == SC_OK) {
            sc_format g;
            CHECK(sc_fmt_parse("coo", 2, &g, &err) == SC_OK);
            st = sc_fmt_convert(&ctx, &t, &g, SC_INDEX_I64, 0, &u, &err);
            if (st == SC_OK)
                sc_tensor_release(&ctx, &u);
            sc_tensor_release(&ctx, &t);
        }
        if (st == SC_OK)
            break;
        CHECK(st == SC_NOMEM);
        failures++;
    }
    CHECK(failures > 3);
}

/* One dense relayout of an order-n tensor of 4- or 8-byte elements (distinct bit
 * patterns, NaN payloads among them) into level order perm, checked element by element
 * against the source at the same coordinates, bit for bit. */
static void relaid_case(int32_t n, const int64_t *dims, const int32_t *perm, sc_dtype dt, size_t vs)
{
    sc_ctx ctx;
    sc_ctx_init(&ctx);
    sc_error err;
    int64_t total = 1;
    for (int32_t d = 0; d < n; d++)
        total *= dims[d];
    unsigned char *x = malloc((size_t)(total ? total : 1) * vs);
    for (int64_t e = 0; e < total; e++) {
        uint64_t bits = 0x7ff8000000000001ull + (uint64_t)e * 0x10001ull; /* f64 NaN payloads */
        uint32_t b32 = 0x7fc00001u + (uint32_t)e * 7u;                   /* f32 NaN payloads */
        if (vs == 8)
            memcpy(x + e * 8, &bits, 8);
        else
            memcpy(x + e * 4, &b32, 4);
    }
    sc_format fd, fp;
    sc_tensor td, tt;
    CHECK(sc_fmt_parse(n == 2 ? "dd" : "ddd", n, &fd, &err) == SC_OK);
    fp = fd;
    for (int32_t k = 0; k < n; k++)
        fp.lvl2dim[k] = perm[k];
    CHECK(sc_fmt_from_dense(&ctx, n, dims, x, dt, &fd, SC_INDEX_I32, &td, &err) == SC_OK);
    CHECK(sc_fmt_convert(&ctx, &td, &fp, SC_INDEX_I32, 0, &tt, &err) == SC_OK);
    bool ok = tt.nvals == total;
    for (int64_t e = 0; ok && e < total; e++) {
        int64_t c[3] = {0, 0, 0}, r = e, at = 0;
        for (int32_t d = n - 1; d >= 0; d--) { /* e's coordinates in dimension order */
            c[d] = r % dims[d];
            r /= dims[d];
        }
        for (int32_t k = 0; k < n; k++) /* its place in level order perm */
            at = at * dims[perm[k]] + c[perm[k]];
        ok = !memcmp((const unsigned char *)tt.vals + at * (int64_t)vs, x + e * (int64_t)vs, vs);
    }
    CHECK(ok);
    sc_tensor_release(&ctx, &tt);
    sc_tensor_release(&ctx, &td);
    free(x);
}

/* Dense relayouts that are transposes (the source's innermost dimension becomes the
 * destination's next-to-last level: 4 x 4 / 2 x 2 register blocks with SSE2) at sizes
 * cutting blocks and tiles at every edge, in order 2 and inside order 3, 4- and 8-byte
 * elements; and one that is not a transpose (the strided gather). */
static void test_dense_transpose(void)
{
    static const int64_t sizes[][2] = {{1, 1}, {1, 7}, {7, 1}, {3, 5}, {4, 4}, {5, 4},
                                       {8, 6}, {33, 31}, {64, 70}, {37, 129}};
    const int32_t t2[2] = {1, 0};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        relaid_case(2, sizes[s], t2, SC_DTYPE_F32, 4);
        relaid_case(2, sizes[s], t2, SC_DTYPE_I32, 4);
        relaid_case(2, sizes[s], t2, SC_DTYPE_F64, 8);
        relaid_case(2, sizes[s], t2, SC_DTYPE_I64, 8);
    }
    const int64_t d3[3] = {3, 37, 34};
    const int32_t inner[3] = {0, 2, 1}, outer[3] = {2, 0, 1}, mid[3] = {1, 2, 0};
    for (int f = 0; f < 2; f++) {
        sc_dtype dt = f ? SC_DTYPE_F64 : SC_DTYPE_F32;
        size_t vs = f ? 8 : 4;
        relaid_case(3, d3, inner, dt, vs); /* a transpose of each of 3 matrices */
        relaid_case(3, d3, outer, dt, vs); /* not a transpose: gathered */
        relaid_case(3, d3, mid, dt, vs);
    }
}

/* The default allocator keeps a freed block of 64 KiB or more for the next request of
 * about its size (base.c): the block comes back even after malloc has handed out what
 * a plain free would have released, and is never given to two live requests. */
static void test_kept_blocks(void)
{
    sc_ctx ctx;
    sc_ctx_init(&ctx);
    const size_t sizes[] = {(80 << 10) + 136, (300 << 10) + 72, (3 << 20) + 40, (5 << 20) + 8};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        unsigned char *a = ctx.mem.alloc(ctx.mem.user, n);
        CHECK(a != NULL);
        memset(a, 0x5a, n);
        ctx.mem.free(ctx.mem.user, a);
        void *other = malloc(n); /* takes a's memory, had it gone back to malloc */
        unsigned char *b = ctx.mem.alloc(ctx.mem.user, n);
        unsigned char *c = ctx.mem.alloc(ctx.mem.user, n - n / 8);
        CHECK(b == a);
        CHECK(c != a && c != NULL);
        CHECK(b[n - 1] == 0x5a); /* the kept memory, as it was left */
        memset(c, 0, n - n / 8);
        ctx.mem.free(ctx.mem.user, c);
        ctx.mem.free(ctx.mem.user, b);
        free(other);
        /* a request for less than 4/5 of the block's size does not take it */
        unsigned char *d = ctx.mem.alloc(ctx.mem.user, n / 2 + (64 << 10));
        CHECK(d != a && d != NULL);
        ctx.mem.free(ctx.mem.user, d);
    }
    /* blocks are kept while they fit in the count: a freed run of more than the kept
     * count returns its later blocks, none of them twice */
    void *many[40];
    for (int i = 0; i < 40; i++)
        many[i] = ctx.mem.alloc(ctx.mem.user, 70 << 10);
    for (int i = 0; i < 40; i++)
        ctx.mem.free(ctx.mem.user, many[i]);
    void *again[40];
    for (int i = 0; i < 40; i++) {
        again[i] = ctx.mem.alloc(ctx.mem.user, 70 << 10);
        CHECK(again[i] != NULL);
        for (int j = 0; j < i; j++)
            CHECK(again[j] != again[i]);
    }
    for (int i = 0; i < 40; i++)
        ctx.mem.free(ctx.mem.user, again[i]);
}

/* One conversion into fmt (order N, e entries of coords[N][e]) into out, checked against
 * the dense sum of the entries and a valid tensor with nvals values. */
static void check_coalesced(const char *fmt, int32_t N, const int64_t *dims, int64_t e,
                            const int64_t *coords, const double *v, int64_t nvals)
{
    sc_ctx ctx;
    sc_ctx_init(&ctx);
    sc_error err;
    sc_format f;
    CHECK(sc_fmt_parse(fmt, N, &f, &err) == SC_OK);
    int64_t total = 1;
    for (int32_t d = 0; d < N; d++)
        total *= dims[d];
    double ref[64] = {0}, got[64];
    for (int64_t i = 0; i < e; i++) {
        int64_t at = 0;
        for (int32_t d = 0; d < N; d++)
            at = at * dims[d] + coords[d * e + i];
        ref[at] += v[i];
    }
    for (int it = 0; it < SC_INDEX_COUNT; it++) {
        sc_tensor t, u;
        CHECK(sc_fmt_from_coords(&ctx, N, dims, e, coords, e, v, SC_DTYPE_F64, &f,
                                 (sc_index_type)it, 0, &t, &err) == SC_OK);
        CHECK(t.nvals == nvals && sc_fmt_validate(&ctx, &t, &err) == SC_OK);
        CHECK(sc_fmt_to_dense(&ctx, &t, got, &err) == SC_OK && same(ref, got, (int)total));
        /* into its own format again (coalesce): nothing changes */
        CHECK(sc_fmt_convert(&ctx, &t, &f, (sc_index_type)it, 0, &u, &err) == SC_OK);
        CHECK(u.nvals == nvals && !memcmp(u.vals, t.vals, (size_t)nvals * sizeof(double)));
        sc_tensor_release(&ctx, &u);
        sc_tensor_release(&ctx, &t);
    }
}

/* A non-unique level opens a position per entry only above a singleton level; above a
 * dense or compressed one equal coordinates share it and the result is coalesced. */
static void test_nonunique_levels_coalesce(void)
{
    /* [[-1, -2]]: one row, stored once (it was once per nonzero, each a padded row) */
    const int64_t d2[] = {1, 2}, c2[] = {0, 0, 0, 1};
    const double v2[] = {-1, -2};
    check_coalesced("c(nonunique)d", 2, d2, 2, c2, v2, 2);
    check_coalesced("c(nonunique)c", 2, d2, 2, c2, v2, 2);
    check_coalesced("coo", 2, d2, 2, c2, v2, 2);
    /* 3x4 entries with duplicates: rows 0 and 2, (0, 1) three times, (2, 3) twice */
    const int64_t d3[] = {3, 4}, c3[] = {2, 0, 0, 2, 0, 0, /**/ 3, 1, 1, 3, 1, 2};
    const double v3[] = {1, 2, 3, 4, 5, 6};
    check_coalesced("c(nonunique)d", 2, d3, 6, c3, v3, 8);
    check_coalesced("c(nonunique)c(nonunique)", 2, d3, 6, c3, v3, 3);
    check_coalesced("coo", 2, d3, 6, c3, v3, 3);
    /* 3-D: the singleton run under the non-unique level ends at a dense level */
    const int64_t d4[] = {2, 2, 3}, c4[] = {0, 0, 1, 0, /**/ 0, 0, 1, 1, /**/ 0, 1, 2, 2};
    const double v4[] = {1, 2, 3, 4};
    check_coalesced("c(nonunique)s(nonunique)d", 3, d4, 4, c4, v4, 9);
    check_coalesced("c(nonunique)sd", 3, d4, 4, c4, v4, 9);
    check_coalesced("c(nonunique)s(nonunique)c", 3, d4, 4, c4, v4, 4);
    check_coalesced("c(nonunique)s(nonunique)s", 3, d4, 4, c4, v4, 4);
    check_coalesced("c(nonunique)dd", 3, d4, 4, c4, v4, 12);
    check_coalesced("c(nonunique)dc", 3, d4, 4, c4, v4, 4);
    check_coalesced("c(nonunique)c(nonunique)d", 3, d4, 4, c4, v4, 9);
    /* a unique level above a singleton that would repeat a coordinate is still refused */
    sc_ctx ctx;
    sc_ctx_init(&ctx);
    sc_error err;
    sc_format f;
    sc_tensor t;
    CHECK(sc_fmt_parse("c(nonunique)ss", 3, &f, &err) == SC_OK);
    CHECK(sc_fmt_from_coords(&ctx, 3, d4, 4, c4, 4, v4, SC_DTYPE_F64, &f, SC_INDEX_I32, 0, &t,
                             &err) == SC_UNSUPPORTED &&
          strstr(err.msg, "through level 1: that singleton level is unique"));
    CHECK(sc_fmt_parse("cs(nonunique)s", 3, &f, &err) == SC_OK);
    CHECK(sc_fmt_from_coords(&ctx, 3, d4, 4, c4, 4, v4, SC_DTYPE_F64, &f, SC_INDEX_I32, 0, &t,
                             &err) == SC_UNSUPPORTED &&
          strstr(err.msg, "from level 1 on: that singleton level sits under a unique level"));
    CHECK(sc_fmt_parse("csd", 3, &f, &err) == SC_OK);
    const int64_t c5[] = {0, 0, /**/ 0, 1, /**/ 0, 0};
    CHECK(sc_fmt_from_coords(&ctx, 3, d4, 2, c5, 2, v4, SC_DTYPE_F64, &f, SC_INDEX_I32, 0, &t,
                             &err) == SC_UNSUPPORTED &&
          strstr(err.msg, "make the level above it nonunique"));
}

/* Arrays sized by a huge dimension (a csr row array of 2^62 + 1 entries) fail as out of
 * memory: their byte count overflows size_t and must not wrap to a small block that the
 * conversion then writes past. */
static void test_huge_dimensions(void)
{
    sc_ctx ctx;
    sc_ctx_init(&ctx);
    sc_error err;
    CHECK(sc_alloc_array(&ctx, SIZE_MAX / 4, 8, &err) == NULL && err.kind == SC_NOMEM);
    CHECK(sc_calloc(&ctx, SIZE_MAX / 2 + 2, 2, &err) == NULL && err.kind == SC_NOMEM);
    const int64_t coords[] = {0, 1, 0, 0};
    const double v[] = {1, 2};
    sc_format csr, dcsr;
    CHECK(sc_fmt_parse("csr", 2, &csr, &err) == SC_OK);
    CHECK(sc_fmt_parse("dcsr", 2, &dcsr, &err) == SC_OK);
    const int64_t rows62[] = {(int64_t)1 << 62, 1}, rows61[] = {(int64_t)1 << 61, 1};
    sc_tensor out, d;
    CHECK(sc_fmt_from_coords(&ctx, 2, rows62, 2, coords, 2, v, SC_DTYPE_F64, &csr,
                             SC_INDEX_I64, 0, &out, &err) == SC_NOMEM);
    /* dcsr stores only the two rows; csr from it needs one position per row */
    CHECK(sc_fmt_from_coords(&ctx, 2, rows61, 2, coords, 2, v, SC_DTYPE_F64, &dcsr,
                             SC_INDEX_I64, 0, &d, &err) == SC_OK);
    CHECK(sc_fmt_convert(&ctx, &d, &csr, SC_INDEX_I64, 0, &out, &err) == SC_NOMEM);
    sc_tensor_release(&ctx, &d);
}

int main(void)
{
    test_parse();
    test_convert_grid();
    test_validate_errors();
    test_alloc_failure();
    test_dense_transpose();
    test_kept_blocks();
    test_huge_dimensions();
    test_nonunique_levels_coalesce();
    return check_report("test_format");
}
