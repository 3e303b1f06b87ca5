/*
 * convert.c — conversions between formats, through one path:
 *
 *   source (coordinates | dense array | another format's arrays)
 *     → entries: per-dimension int64 coordinates + values, with the dimension order the
 *       entries are already sorted by (none for raw coordinates)
 *     → sort into the target's level order (stable LSD counting sort, skipping the keys the
 *       input order already gives; comparison sort for huge dimensions)
 *     → sum duplicates, mark each entry's first level that differs from its predecessor
 *       and so the level it opens new positions from (equal coordinates share positions
 *       except above a singleton level: the output is coalesced in every format)
 *     → pack level by level (dense: position arithmetic; compressed: append + segment
 *       counts; singleton: one coordinate per parent position).
 *
 * O(nnz * order + sum of dims) except the comparison-sort fallback (O(nnz log nnz)).
 * Every output array is allocated through the ctx; nothing the caller passed is written.
 */
#include "sc_format.h"

#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

/* Entries: coordinate of entry e in dimension d is c[d][e]. */
typedef struct entries {
    int32_t order;
    int64_t n;
    const int64_t *c[SC_MAX_ORDER];
    const void *vals;
    sc_dtype dtype;
    int32_t sorted_by[SC_MAX_ORDER]; /* dims the entries are lexicographically sorted by */
    int32_t nsorted;
    bool unique; /* no two entries share a coordinate */
} entries;

static int threads_for(const sc_ctx *ctx, int64_t work)
{
#ifdef _OPENMP
    if (work < 200000)
        return 1;
    int t = ctx->num_threads > 0 ? ctx->num_threads : omp_get_max_threads();
    return t < 1 ? 1 : t;
#else
    (void)ctx;
    (void)work;
    return 1;
#endif
}

static int thread_num(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* ---- values ------------------------------------------------------------------------- */

/* The value dtypes: X(ENUM, C type, sum).  Integer sums wrap (two's complement, added
 * as the unsigned type of the same width). */
#define ADD_FLOAT(a, b) ((a) + (b))
#define ADD_I32(a, b) ((int32_t)((uint32_t)(a) + (uint32_t)(b)))
#define ADD_I64(a, b) ((int64_t)((uint64_t)(a) + (uint64_t)(b)))
#define VAL_TYPES(X)                                          \
    X(F32, float, ADD_FLOAT) X(F64, double, ADD_FLOAT)        \
    X(I32, int32_t, ADD_I32) X(I64, int64_t, ADD_I64)

static bool val_is_zero(const void *v, sc_dtype t, int64_t i)
{
    switch (t) {
#define X(e, T, add) case SC_DTYPE_##e: return ((const T *)v)[i] == 0;
        VAL_TYPES(X)
#undef X
    default: return false;
    }
}

/* dst[i] += src[j] */
static void val_add(void *dst, int64_t i, const void *src, int64_t j, sc_dtype t)
{
    switch (t) {
#define X(e, T, add)                                                                       \
    case SC_DTYPE_##e: {                                                                   \
        T *d = dst;                                                                        \
        d[i] = add(d[i], ((const T *)src)[j]);                                             \
        break;                                                                             \
    }
        VAL_TYPES(X)
#undef X
    default: break;
    }
}

/* dst[i] = src[perm ? perm[i] : i] for i < n */
static void val_gather(void *dst, const void *src, const int64_t *perm, int64_t n, sc_dtype t,
                       int nt)
{
    if (!perm) {
        /* Split the copy: first touch of the fresh destination is most of its cost. */
        const size_t vs = sc_dtype_size(t);
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int c = 0; c < nt; c++) {
            int64_t lo = n * c / nt, hi = n * (c + 1) / nt;
            memcpy((char *)dst + (size_t)lo * vs, (const char *)src + (size_t)lo * vs,
                   (size_t)(hi - lo) * vs);
        }
        return;
    }
    switch (t) {
#define X(e, T, add)                                                                       \
    case SC_DTYPE_##e: {                                                                   \
        T *d = dst;                                                                        \
        const T *s = src;                                                                  \
        _Pragma("omp parallel for num_threads(nt) schedule(static)")                       \
        for (int64_t i = 0; i < n; i++)                                                    \
            d[i] = s[perm[i]];                                                             \
        break;                                                                             \
    }
        VAL_TYPES(X)
#undef X
    default: break;
    }
}

/* ---- sorting ------------------------------------------------------------------------ */

/* Stable counting sort of perm (n entries) by key c[perm[i]] in [0, D): out receives it. */
static sc_status counting_pass(const sc_ctx *ctx, const int64_t *c, int64_t D,
                               const int64_t *perm, int64_t *out, int64_t n, sc_error *err)
{
    int nt = threads_for(ctx, n);
    if ((int64_t)nt > 1 && D > n)
        nt = 1; /* per-thread histograms would cost more than the pass */
    int64_t *hist = sc_calloc(ctx, (size_t)D + 1, (size_t)nt * sizeof(int64_t), err);
    if (!hist)
        return SC_NOMEM;
#pragma omp parallel num_threads(nt)
    {
        int t = thread_num();
        int64_t lo = n * t / nt, hi = n * (t + 1) / nt;
        int64_t *h = hist + (int64_t)t * (D + 1);
        for (int64_t i = lo; i < hi; i++)
            h[c[perm ? perm[i] : i]]++;
#pragma omp barrier
#pragma omp single
        {
            /* Exclusive prefix over (key, thread): thread t's slot for key k. */
            int64_t run = 0;
            for (int64_t k = 0; k < D; k++)
                for (int u = 0; u < nt; u++) {
                    int64_t *hk = hist + (int64_t)u * (D + 1) + k;
                    int64_t cnt = *hk;
                    *hk = run;
                    run += cnt;
                }
        }
        for (int64_t i = lo; i < hi; i++) {
            int64_t e = perm ? perm[i] : i;
            out[h[c[e]]++] = e;
        }
    }
    sc_free(ctx, hist);
    return SC_OK;
}

typedef struct cmp_ctx {
    const int64_t *const *c; /* per level */
    int32_t order;
} cmp_ctx;

static int cmp_entries(const void *a, const void *b, void *user)
{
    const cmp_ctx *cc = user;
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    for (int32_t k = 0; k < cc->order; k++) {
        int64_t u = cc->c[k][x], v = cc->c[k][y];
        if (u != v)
            return u < v ? -1 : 1;
    }
    return x < y ? -1 : x > y;
}

/* qsort_r is a GNU extension; a small merge sort keeps this portable and stable. */
static void merge_sort(int64_t *a, int64_t *tmp, int64_t n, const cmp_ctx *cc)
{
    if (n < 2)
        return;
    if (n <= 16) {
        for (int64_t i = 1; i < n; i++) {
            int64_t x = a[i], j = i;
            while (j > 0 && cmp_entries(&a[j - 1], &x, (void *)cc) > 0) {
                a[j] = a[j - 1];
                j--;
            }
            a[j] = x;
        }
        return;
    }
    int64_t h = n / 2;
    merge_sort(a, tmp, h, cc);
    merge_sort(a + h, tmp, n - h, cc);
    int64_t i = 0, j = h, k = 0;
    while (i < h && j < n)
        tmp[k++] = cmp_entries(&a[j], &a[i], (void *)cc) < 0 ? a[j++] : a[i++];
    while (i < h)
        tmp[k++] = a[i++];
    while (j < n)
        tmp[k++] = a[j++];
    memcpy(a, tmp, (size_t)n * sizeof *a);
}

/*
 * Sorting permutation of the entries into level order of dst (*perm_out = NULL when the
 * input is already in that order).  Caller frees *perm_out.
 */
static sc_status sort_entries(const sc_ctx *ctx, const entries *E, const int64_t *dims,
                              const sc_format *dst, int64_t **perm_out, sc_error *err)
{
    const int32_t N = E->order;
    const int64_t n = E->n;
    *perm_out = NULL;
    /* Smallest j with (input order minus dst's first j level dims) == dst's levels j.. */
    int32_t j = 0;
    for (; j < N; j++) {
        int32_t rest[SC_MAX_ORDER], nr = 0;
        for (int32_t s = 0; s < E->nsorted; s++) {
            bool taken = false;
            for (int32_t q = 0; q < j; q++)
                taken |= dst->lvl2dim[q] == E->sorted_by[s];
            if (!taken)
                rest[nr++] = E->sorted_by[s];
        }
        bool ok = nr >= N - j;
        for (int32_t q = j; q < N && ok; q++)
            ok = rest[q - j] == dst->lvl2dim[q];
        if (ok)
            break;
    }
    if (j == 0 || n < 2)
        return SC_OK;

    bool huge = false;
    for (int32_t q = 0; q < j; q++)
        huge |= dims[dst->lvl2dim[q]] > 4 * n + (1 << 20);

    int64_t *a = sc_alloc_array(ctx, (size_t)n, sizeof(int64_t), err);
    int64_t *b = a ? sc_alloc_array(ctx, (size_t)n, sizeof(int64_t), err) : NULL;
    if (!b) {
        sc_free(ctx, a);
        return SC_NOMEM;
    }
    if (huge) {
        const int64_t *lc[SC_MAX_ORDER];
        for (int32_t q = 0; q < N; q++)
            lc[q] = E->c[dst->lvl2dim[q]];
        cmp_ctx cc = {lc, N};
        for (int64_t i = 0; i < n; i++)
            a[i] = i;
        merge_sort(a, b, n, &cc);
        sc_free(ctx, b);
        *perm_out = a;
        return SC_OK;
    }
    const int64_t *cur = NULL;
    for (int32_t q = j - 1; q >= 0; q--) {
        int32_t d = dst->lvl2dim[q];
        int64_t *into = cur == a ? b : a;
        sc_status st = counting_pass(ctx, E->c[d], dims[d], cur, into, n, err);
        if (st != SC_OK) {
            sc_free(ctx, a);
            sc_free(ctx, b);
            return st;
        }
        cur = into;
    }
    sc_free(ctx, cur == a ? b : a);
    *perm_out = (int64_t *)cur;
    return SC_OK;
}

/* ---- packing ------------------------------------------------------------------------ */

/*
 * Where an entry that first differs from its predecessor at level e opens new positions:
 * from new_at[e] on.  A dense or compressed level holds several children per position, so
 * entries equal above it share positions there (new_at[e] = e: the result is coalesced,
 * whatever the levels' uniqueness).  A singleton level holds one coordinate per position
 * of its parent, so an entry that first differs at a singleton needs new positions from
 * the level above that run of singletons (as coo's c(nonunique)s does); every level from
 * there to e-1 then repeats a coordinate prefix, which only a nonunique level may: bad[e]
 * is the first unique one of them (-1: none).
 */
static void new_position_levels(const sc_format *f, int32_t new_at[SC_MAX_ORDER],
                                int32_t bad[SC_MAX_ORDER])
{
    for (int32_t e = 0; e < f->order; e++) {
        new_at[e] = e > 0 && f->kind[e] == SC_LEVEL_SINGLETON ? new_at[e - 1] : e;
        bad[e] = -1;
        for (int32_t k = e - 1; k >= new_at[e]; k--)
            bad[e] = f->unique[k] ? k : bad[e];
    }
}

void sc_tensor_release(const sc_ctx *ctx, sc_tensor *t)
{
    for (int32_t k = 0; k < SC_MAX_ORDER; k++) {
        if ((t->borrowed >> k) & 1u)
            continue;
        sc_free(ctx, t->pos[k]);
        sc_free(ctx, t->crd[k]);
    }
    sc_free(ctx, t->vals);
    memset(t, 0, sizeof *t);
}

int32_t sc_tensor_lender(const sc_tensor *const *ops, int32_t n, const sc_tensor *out, int32_t l,
                         int32_t *level)
{
    const void *pp = out->pos[l], *cp = out->crd[l];
    /* A level whose pos and crd are both out's first: one array may serve two levels
     * (a caller's coo given one tensor as both levels' crd), whose pos tell them apart. */
    for (int pass = 0; pass < 2; pass++)
        for (int32_t t = 0; t < n && (pp || cp); t++)
            for (int32_t j = 0; j < ops[t]->fmt.order; j++) {
                bool both = pp == ops[t]->pos[j] && cp == ops[t]->crd[j];
                if (pass == 0 ? both
                              : (pp && pp == ops[t]->pos[j]) || (cp && cp == ops[t]->crd[j])) {
                    *level = j;
                    return t;
                }
            }
    return -1;
}

static void init_out(sc_tensor *out, const sc_format *dst, const int64_t *dims,
                     sc_index_type it, sc_dtype dt)
{
    memset(out, 0, sizeof *out);
    out->fmt = *dst;
    for (int32_t d = 0; d < dst->order; d++)
        out->dims[d] = dims[d];
    out->index_type = it;
    out->dtype = dt;
}

/*
 * One compressed level k of pack: entry u makes a new position when eff[u] <= k; its
 * coordinate goes to crd, and pos[q] = the first position whose parent is >= q.  Parents
 * never decrease along the entries, so each thread fills a disjoint part of both arrays:
 * a first pass counts each chunk's new positions and its last parent, a second writes.
 * cp (may be NULL) receives every entry's position at this level.
 */
static sc_status pack_compressed(const sc_ctx *ctx, const entries *E, const int64_t *perm,
                                 int64_t n, const uint8_t *eff, int32_t k, const int64_t *pp,
                                 int64_t P, int64_t *cp, sc_index_type it, int nt,
                                 sc_tensor *out, int64_t *count_out, sc_error *err)
{
    const int64_t *ck = E->c[out->fmt.lvl2dim[k]];
    int64_t chunk_count[64], chunk_last[64], start[64], before[64];
    if (nt > 64)
        nt = 64;
#pragma omp parallel num_threads(nt)
    {
        int t = thread_num();
        int64_t lo = n * t / nt, hi = n * (t + 1) / nt, c = 0, last = -1;
        for (int64_t u = lo; u < hi; u++) {
            if (eff[u] <= k) {
                c++;
                last = pp ? pp[u] : 0;
            }
        }
        chunk_count[t] = c;
        chunk_last[t] = last;
    }
    int64_t count = 0, prev = -1;
    for (int t = 0; t < nt; t++) {
        start[t] = count;
        before[t] = prev;
        count += chunk_count[t];
        if (chunk_last[t] >= 0)
            prev = chunk_last[t];
    }
    *count_out = count;
    if (count > sc_index_max(it))
        return sc_fail(err, SC_USER, "format",
                       "level %d stores %lld coordinates, which does not fit %s indices "
                       "(use int64)", (int)k, (long long)count, sc_index_name(it));
    size_t isz = sc_index_size(it);
    if (P == INT64_MAX)
        return sc_fail(err, SC_USER, "format",
                       "level %d would need a pos array of more than 2^63 entries", (int)k);
    out->pos_len[k] = P + 1;
    out->crd_len[k] = count;
    out->pos[k] = sc_alloc_array(ctx, (size_t)P + 1, isz, err);
    out->crd[k] = out->pos[k] ? sc_alloc_array(ctx, (size_t)count, isz, err) : NULL;
    if (!out->crd[k])
        return SC_NOMEM;
    void *pos = out->pos[k], *crd = out->crd[k];
#pragma omp parallel num_threads(nt)
    {
        int t = thread_num();
        int64_t lo = n * t / nt, hi = n * (t + 1) / nt;
        int64_t p = start[t] - 1, y = before[t];
        for (int64_t u = lo; u < hi; u++) {
            if (eff[u] <= k) {
                p++;
                int64_t x = pp ? pp[u] : 0;
                sc_idx_set(crd, it, p, ck[perm ? perm[u] : u]);
                for (int64_t q = y + 1; q <= x; q++)
                    sc_idx_set(pos, it, q, p);
                y = x;
            }
            if (cp)
                cp[u] = p;
        }
    }
    for (int64_t q = prev + 1; q <= P; q++)
        sc_idx_set(pos, it, q, count);
    return SC_OK;
}

/*
 * Build out from sorted entries.  perm (NULL = identity) orders them; the first n entries
 * of that order are used.  eff[u] is the first level at which position u must be new
 * (new_position_levels of its first differing level; never a singleton level); uvals holds
 * the summed values in sorted order (pack takes it).
 *
 * Per level, every entry's position at that level is needed only by the level below; it
 * is kept in one of two scratch arrays, or aliased to the coordinates (a dense root) or to
 * the parent's (a singleton) without being written.
 */
static sc_status pack(const sc_ctx *ctx, const entries *E, const int64_t *perm, int64_t n,
                      const uint8_t *eff, void *uvals, const sc_format *dst,
                      const int64_t *dims, sc_index_type it, sc_tensor *out, sc_error *err)
{
    const int32_t N = dst->order;
    const int nt = threads_for(ctx, n);
    int64_t *scratch[2] = {NULL, NULL};
    const int64_t *pp = NULL; /* entry -> position at level k-1 (NULL: all 0) */
    sc_status st = SC_OK;
    init_out(out, dst, dims, it, E->dtype);
    const bool last_dense = dst->kind[N - 1] == SC_LEVEL_DENSE;
    int64_t P = 1;
    for (int32_t k = 0; k < N; k++) {
        const int64_t *ck = E->c[dst->lvl2dim[k]];
        const int64_t dim = dims[dst->lvl2dim[k]];
        /* Positions of this level are needed below it, or for a dense last level's values. */
        const bool need = k + 1 < N || last_dense;
        int64_t *cp = NULL;
        if (need && dst->kind[k] != SC_LEVEL_SINGLETON && !(pp == NULL && !perm &&
                                                            dst->kind[k] == SC_LEVEL_DENSE)) {
            int64_t *s = scratch[k & 1];
            if (!s) {
                s = scratch[k & 1] = sc_alloc_array(ctx, (size_t)n, sizeof(int64_t), err);
                if (!s) {
                    st = SC_NOMEM;
                    goto fail;
                }
            }
            cp = s;
        }
        const int64_t *next = cp;
        int64_t count = 0;
        switch ((sc_level_kind)dst->kind[k]) {
        case SC_LEVEL_DENSE:
            if (!sc_mul_ok(P, dim, &count)) {
                st = sc_fail(err, SC_USER, "format",
                             "format with a dense level %d would need more than 2^63 "
                             "positions", (int)k);
                goto fail;
            }
            if (!need)
                break;
            if (!cp) {
                next = ck; /* dense root, entries in order: position = coordinate */
                break;
            }
#pragma omp parallel for num_threads(nt) schedule(static)
            for (int64_t u = 0; u < n; u++)
                cp[u] = (pp ? pp[u] * dim : 0) + ck[perm ? perm[u] : u];
            break;
        case SC_LEVEL_COMPRESSED: {
            st = pack_compressed(ctx, E, perm, n, eff, k, pp, P, cp, it, nt, out, &count, err);
            if (st != SC_OK)
                goto fail;
            break;
        }
        case SC_LEVEL_SINGLETON: {
            size_t isz = sc_index_size(it);
            count = P;
            out->crd_len[k] = count;
            out->crd[k] = sc_alloc_array(ctx, (size_t)count, isz, err);
            if (!out->crd[k]) {
                st = SC_NOMEM;
                goto fail;
            }
            for (int64_t u = 0; u < n; u++) {
                if (eff[u] == k) {
                    st = sc_fail(err, SC_INTERNAL, "format",
                                 "entry %lld opens a position at singleton level %d but not "
                                 "at its parent", (long long)u, (int)k);
                    goto fail;
                }
                if (eff[u] < k)
                    sc_idx_set(out->crd[k], it, pp ? pp[u] : 0, ck[perm ? perm[u] : u]);
            }
            next = pp; /* same positions as the parent */
            break;
        }
        default:
            st = sc_fail(err, SC_INTERNAL, "format", "unknown level kind");
            goto fail;
        }
        pp = next;
        P = count;
    }
    /* pp holds each entry's position at the last level when it was needed. */
    out->nvals = P;
    if (!last_dense) {
        out->vals = uvals; /* one position per entry, in entry order */
        uvals = NULL;
    } else {
        out->vals = sc_calloc(ctx, (size_t)P, sc_dtype_size(E->dtype), err);
        if (!out->vals) {
            st = SC_NOMEM;
            goto fail;
        }
        size_t vs = sc_dtype_size(E->dtype);
        for (int64_t u = 0; u < n; u++)
            memcpy((char *)out->vals + (size_t)(pp ? pp[u] : 0) * vs,
                   (char *)uvals + (size_t)u * vs, vs);
    }
    sc_free(ctx, uvals);
    sc_free(ctx, scratch[0]);
    sc_free(ctx, scratch[1]);
    return SC_OK;
fail:
    sc_free(ctx, uvals);
    sc_free(ctx, scratch[0]);
    sc_free(ctx, scratch[1]);
    sc_tensor_release(ctx, out);
    return st;
}

/*
 * entries → out in format dst.  Filters zeros (flags), sorts, sums duplicates and packs.
 */
static sc_status build(const sc_ctx *ctx, const entries *E0, const int64_t *dims,
                       const sc_format *dst, sc_index_type it, int flags, sc_tensor *out,
                       sc_error *err)
{
    sc_status st = sc_fmt_check(dst, err);
    if (st != SC_OK)
        return st;
    const int32_t N = dst->order;
    for (int32_t k = 0; k < N; k++) {
        int64_t dim = dims[dst->lvl2dim[k]];
        if (dst->kind[k] != SC_LEVEL_DENSE && dim > 0 && dim - 1 > sc_index_max(it))
            return sc_fail(err, SC_USER, "format",
                           "dimension %d has size %lld, which does not fit %s indices "
                           "(use int64)", (int)dst->lvl2dim[k], (long long)dim,
                           sc_index_name(it));
    }
    entries E = *E0;
    int64_t *keep = NULL, *perm = NULL, *merged = NULL;
    uint8_t *eff = NULL;
    void *uvals = NULL;
    const int64_t n0 = E.n;
    const int nt = threads_for(ctx, n0);

    int64_t *cbuf[SC_MAX_ORDER] = {NULL};
    void *vbuf = NULL;
    if (flags & SC_CONV_DROP_ZEROS) {
        /* Copy out the nonzero entries, in order (so the input order still holds). */
        int64_t m = 0;
        for (int64_t e = 0; e < n0; e++)
            m += !val_is_zero(E.vals, E.dtype, e);
        if (m < n0) {
            keep = sc_alloc_array(ctx, (size_t)m, sizeof(int64_t), err);
            vbuf = keep ? sc_alloc_array(ctx, (size_t)m, sc_dtype_size(E.dtype), err) : NULL;
            if (!vbuf) {
                st = SC_NOMEM;
                goto done;
            }
            m = 0;
            for (int64_t e = 0; e < n0; e++)
                if (!val_is_zero(E.vals, E.dtype, e))
                    keep[m++] = e;
            for (int32_t d = 0; d < N; d++) {
                cbuf[d] = sc_alloc_array(ctx, (size_t)m, sizeof(int64_t), err);
                if (!cbuf[d]) {
                    st = SC_NOMEM;
                    goto done;
                }
                for (int64_t i = 0; i < m; i++)
                    cbuf[d][i] = E.c[d][keep[i]];
                E.c[d] = cbuf[d];
            }
            val_gather(vbuf, E.vals, keep, m, E.dtype, nt);
            E.vals = vbuf;
            E.n = m;
        }
    }
    const int64_t n = E.n;

    st = sort_entries(ctx, &E, dims, dst, &perm, err);
    if (st != SC_OK)
        goto done;

    /* eff[u]: first level where entry u differs from u-1 (N: a duplicate). */
    eff = sc_alloc(ctx, (size_t)n, err);
    if (!eff) {
        st = SC_NOMEM;
        goto done;
    }
    const int64_t *lc[SC_MAX_ORDER];
    for (int32_t k = 0; k < N; k++)
        lc[k] = E.c[dst->lvl2dim[k]];
    int32_t new_at[SC_MAX_ORDER], bad[SC_MAX_ORDER];
    new_position_levels(dst, new_at, bad);
    /* Without duplicates, eff only matters at sparse levels where an entry can share its
     * predecessor's position (above new_at[N-1]) and where a unique level may be asked to
     * repeat a coordinate; with none such, every entry is new everywhere (eff = 0). */
    bool need_eff = !E.unique, any_bad = false;
    for (int32_t k = 0; k < new_at[N - 1]; k++)
        need_eff |= dst->kind[k] != SC_LEVEL_DENSE;
    for (int32_t e = 0; e < N; e++)
        any_bad |= bad[e] >= 0;
    need_eff |= any_bad;
    int64_t dups = 0;
    if (!need_eff)
        memset(eff, 0, (size_t)n);
#pragma omp parallel for num_threads(nt) schedule(static) reduction(+ : dups) if (need_eff)
    for (int64_t u = 1; u < (need_eff ? n : 1); u++) {
        int64_t a = perm ? perm[u - 1] : u - 1, b = perm ? perm[u] : u;
        int32_t k = N;
        for (int32_t l = N - 1; l >= 0; l--)
            k = lc[l][a] != lc[l][b] ? l : k;
        eff[u] = (uint8_t)k;
        dups += k == N;
    }
    if (n > 0)
        eff[0] = 0;
    int64_t un = n;
    uvals = sc_alloc_array(ctx, (size_t)n, sc_dtype_size(E.dtype), err);
    if (!uvals) {
        st = SC_NOMEM;
        goto done;
    }
    if (dups) {
        /* Compact: one entry per distinct coordinate, values summed in sorted order. */
        merged = sc_alloc_array(ctx, (size_t)(n - dups), sizeof(int64_t), err);
        if (!merged) {
            st = SC_NOMEM;
            goto done;
        }
        size_t vs = sc_dtype_size(E.dtype);
        int64_t w = -1;
        for (int64_t u = 0; u < n; u++) {
            int64_t e = perm ? perm[u] : u;
            if (u > 0 && eff[u] == N) {
                val_add(uvals, w, E.vals, e, E.dtype);
                continue;
            }
            w++;
            merged[w] = e;
            eff[w] = eff[u];
            memcpy((char *)uvals + (size_t)w * vs, (const char *)E.vals + (size_t)e * vs, vs);
        }
        un = w + 1;
        sc_free(ctx, perm);
        perm = merged;
        merged = NULL;
    } else {
        val_gather(uvals, E.vals, perm, n, E.dtype, nt);
    }
    int64_t first_bad = INT64_MAX;
#pragma omp parallel for num_threads(nt) schedule(static) reduction(min : first_bad) if (any_bad)
    for (int64_t u = 1; u < (any_bad ? un : 1); u++)
        if (bad[eff[u]] >= 0 && u < first_bad)
            first_bad = u;
    if (first_bad != INT64_MAX) {
        int32_t k = bad[eff[first_bad]];
        if (dst->kind[k] == SC_LEVEL_SINGLETON)
            st = sc_fail(err, SC_UNSUPPORTED, "format",
                         "format cannot store two entries with the same coordinates through "
                         "level %d: that singleton level is unique (make it nonunique)",
                         (int)k);
        else
            st = sc_fail(err, SC_UNSUPPORTED, "format",
                         "format cannot store two entries that differ only from level %d on: "
                         "that singleton level sits under a unique level (make the level "
                         "above it nonunique)", (int)(k + 1));
        goto done;
    }
    if (need_eff) {
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t u = 0; u < un; u++)
            eff[u] = (uint8_t)new_at[eff[u]];
    }

    st = pack(ctx, &E, perm, un, eff, uvals, dst, dims, it, out, err);
    uvals = NULL; /* pack took it */
done:
    for (int32_t d = 0; d < N; d++)
        sc_free(ctx, cbuf[d]);
    sc_free(ctx, vbuf);
    sc_free(ctx, keep);
    sc_free(ctx, perm);
    sc_free(ctx, merged);
    sc_free(ctx, eff);
    sc_free(ctx, uvals);
    return st;
}

static sc_status check_dims(int32_t order, const int64_t *dims, const sc_format *dst,
                            sc_error *err)
{
    if (order < 1 || order > SC_MAX_ORDER)
        return sc_fail(err, SC_USER, "format", "tensor order %d is outside 1..%d", (int)order,
                       SC_MAX_ORDER);
    if (dst->order != order)
        return sc_fail(err, SC_USER, "format",
                       "format has %d levels but the tensor has %d dimensions",
                       (int)dst->order, (int)order);
    for (int32_t d = 0; d < order; d++)
        if (dims[d] < 0)
            return sc_fail(err, SC_USER, "format", "dimension %d has negative size %lld",
                           (int)d, (long long)dims[d]);
    return SC_OK;
}

sc_status sc_fmt_from_coords(const sc_ctx *ctx, int32_t order, const int64_t *dims,
                             int64_t nnz, const int64_t *coords, int64_t ld,
                             const void *vals, sc_dtype dtype, const sc_format *dst,
                             sc_index_type index_type, int flags, sc_tensor *out,
                             sc_error *err)
{
    sc_status st = check_dims(order, dims, dst, err);
    if (st != SC_OK)
        return st;
    if (nnz < 0)
        return sc_fail(err, SC_USER, "format", "negative number of entries %lld",
                       (long long)nnz);
    entries E = {.order = order, .n = nnz, .vals = vals, .dtype = dtype, .nsorted = 0};
    const int nt = threads_for(ctx, nnz);
    for (int32_t d = 0; d < order; d++) {
        E.sorted_by[d] = d;
        E.c[d] = coords + (int64_t)d * ld;
    }
    /* One pass: coordinates in range, and (when claimed) strictly increasing row-major. */
    const bool check_sorted = flags & SC_CONV_SORTED;
    int64_t first_bad = INT64_MAX, first_unsorted = INT64_MAX;
#pragma omp parallel for num_threads(nt) schedule(static) \
    reduction(min : first_bad, first_unsorted)
    for (int64_t e = 0; e < nnz; e++) {
        int s = 0; /* sign of entry e - entry e-1, lexicographic */
        bool bad = false;
        for (int32_t d = order - 1; d >= 0; d--) {
            int64_t a = E.c[d][e];
            bad |= (uint64_t)a >= (uint64_t)dims[d];
            if (check_sorted && e > 0) {
                int64_t b = E.c[d][e - 1];
                int diff = (a > b) - (a < b);
                s = diff ? diff : s;
            }
        }
        if (bad && e < first_bad)
            first_bad = e;
        if (check_sorted && e > 0 && s <= 0 && e < first_unsorted)
            first_unsorted = e;
    }
    if (first_bad != INT64_MAX) {
        int32_t d = 0;
        while ((uint64_t)E.c[d][first_bad] < (uint64_t)dims[d])
            d++;
        return sc_fail(err, SC_INDEX, "format",
                       "index %lld of entry %lld is out of range for dimension %d of size %lld",
                       (long long)E.c[d][first_bad], (long long)first_bad, (int)d,
                       (long long)dims[d]);
    }
    if (first_unsorted != INT64_MAX)
        return sc_fail(err, SC_USER, "format",
                       "entries claimed sorted and unique are not: entry %lld does not come "
                       "after entry %lld", (long long)first_unsorted,
                       (long long)(first_unsorted - 1));
    if (check_sorted) {
        E.nsorted = order;
        E.unique = true;
    }
    return build(ctx, &E, dims, dst, index_type, flags, out, err);
}

sc_status sc_fmt_from_dense(const sc_ctx *ctx, int32_t order, const int64_t *dims,
                            const void *data, sc_dtype dtype, const sc_format *dst,
                            sc_index_type index_type, sc_tensor *out, sc_error *err)
{
    sc_status st = check_dims(order, dims, dst, err);
    if (st != SC_OK)
        return st;
    int64_t inner = dims[order - 1], rows = 1, total;
    for (int32_t d = 0; d + 1 < order; d++)
        if (!sc_mul_ok(rows, dims[d], &rows))
            return sc_fail(err, SC_USER, "format", "dense tensor size overflows");
    if (!sc_mul_ok(rows, inner, &total))
        return sc_fail(err, SC_USER, "format", "dense tensor size overflows");
    const int nt = threads_for(ctx, total);
    /* Pass 1: nonzeros per row (row = all dims but the last). */
    int64_t *rowstart = sc_calloc(ctx, (size_t)rows + 1, sizeof(int64_t), err);
    if (!rowstart)
        return SC_NOMEM;
    switch (dtype) {
#define X(e, T, add)                                                                       \
    case SC_DTYPE_##e: {                                                                   \
        const T *x = data;                                                                 \
        _Pragma("omp parallel for num_threads(nt) schedule(static)")                       \
        for (int64_t r = 0; r < rows; r++) {                                               \
            int64_t cnt = 0;                                                               \
            for (int64_t j = 0; j < inner; j++)                                            \
                cnt += x[r * inner + j] != 0;                                              \
            rowstart[r + 1] = cnt;                                                         \
        }                                                                                  \
        break;                                                                             \
    }
        VAL_TYPES(X)
#undef X
    default: break;
    }
    for (int64_t r = 0; r < rows; r++)
        rowstart[r + 1] += rowstart[r];
    const int64_t n = rowstart[rows];
    int64_t *coords = sc_alloc_array(ctx, (size_t)n, (size_t)order * sizeof(int64_t), err);
    void *vals = coords ? sc_alloc_array(ctx, (size_t)n, sc_dtype_size(dtype), err) : NULL;
    if (!vals) {
        sc_free(ctx, coords);
        sc_free(ctx, rowstart);
        return SC_NOMEM;
    }
    const size_t vs = sc_dtype_size(dtype);
    /* Pass 2: coordinates in row-major order (so sorted by dims 0..order-1). */
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        int64_t at = rowstart[r];
        if (at == rowstart[r + 1])
            continue;
        int64_t outer[SC_MAX_ORDER];
        int64_t rem = r;
        for (int32_t d = order - 2; d >= 0; d--) {
            outer[d] = rem % dims[d];
            rem /= dims[d];
        }
        for (int64_t j = 0; j < inner; j++) {
            if (val_is_zero(data, dtype, r * inner + j))
                continue;
            for (int32_t d = 0; d + 1 < order; d++)
                coords[(int64_t)d * n + at] = outer[d];
            coords[(int64_t)(order - 1) * n + at] = j;
            memcpy((char *)vals + (size_t)at * vs, (const char *)data + (size_t)(r * inner + j) * vs,
                   vs);
            at++;
        }
    }
    sc_free(ctx, rowstart);
    entries E = {.order = order, .n = n, .vals = vals, .dtype = dtype, .nsorted = order,
                 .unique = true};
    for (int32_t d = 0; d < order; d++) {
        E.c[d] = coords + (int64_t)d * n;
        E.sorted_by[d] = d;
    }
    st = build(ctx, &E, dims, dst, index_type, 0, out, err);
    sc_free(ctx, coords);
    sc_free(ctx, vals);
    return st;
}

/* The largest number of positions of any level (at least 1), or -1 with err set. */
static int64_t max_level_size(const sc_tensor *t, sc_error *err)
{
    int64_t m = 1;
    for (int32_t k = 0; k < t->fmt.order; k++) {
        int64_t c = sc_fmt_level_size(t, k, err);
        if (c < 0)
            return -1;
        m = c > m ? c : m;
    }
    return m;
}

/*
 * Coordinates of every last-level position of src, per dimension (c[d] has nvals
 * entries; allocated in one block *block).  Entries come out in level order.
 */
static sc_status unpack(const sc_ctx *ctx, const sc_tensor *src, int64_t **block,
                        int64_t *c[SC_MAX_ORDER], sc_error *err)
{
    const sc_format *f = &src->fmt;
    const int32_t N = f->order;
    const sc_index_type it = src->index_type;
    /* Level-major coordinate arrays at the current level's positions, built top-down;
     * stride n = the largest level (a dense level may have more positions than values). */
    int64_t n = max_level_size(src, err);
    if (n < 0)
        return err->kind;
    int64_t *buf = sc_alloc_array(ctx, (size_t)n, (size_t)N * sizeof(int64_t), err);
    int64_t *tmp = buf ? sc_alloc_array(ctx, (size_t)n, (size_t)N * sizeof(int64_t), err) : NULL;
    if (!tmp) {
        sc_free(ctx, buf);
        return SC_NOMEM;
    }
    int64_t P = 1;
    for (int32_t k = 0; k < N; k++) {
        int64_t count = sc_fmt_level_size(src, k, err);
        /* tmp[j][p'] for p' < count, j <= k */
        const int64_t dim = src->dims[f->lvl2dim[k]];
        switch ((sc_level_kind)f->kind[k]) {
        case SC_LEVEL_DENSE:
            for (int64_t q = 0; q < P; q++)
                for (int64_t i = 0; i < dim; i++) {
                    int64_t p = q * dim + i;
                    for (int32_t j = 0; j < k; j++)
                        tmp[(int64_t)j * n + p] = buf[(int64_t)j * n + q];
                    tmp[(int64_t)k * n + p] = i;
                }
            break;
        case SC_LEVEL_COMPRESSED:
            for (int64_t q = 0; q < P; q++) {
                int64_t lo = sc_idx_get(src->pos[k], it, q), hi = sc_idx_get(src->pos[k], it, q + 1);
                for (int32_t j = 0; j < k; j++) {
                    int64_t v = buf[(int64_t)j * n + q];
                    for (int64_t p = lo; p < hi; p++)
                        tmp[(int64_t)j * n + p] = v;
                }
            }
            for (int64_t p = 0; p < count; p++)
                tmp[(int64_t)k * n + p] = sc_idx_get(src->crd[k], it, p);
            break;
        case SC_LEVEL_SINGLETON:
            for (int32_t j = 0; j < k; j++)
                memcpy(tmp + (int64_t)j * n, buf + (int64_t)j * n, (size_t)count * sizeof(int64_t));
            for (int64_t p = 0; p < count; p++)
                tmp[(int64_t)k * n + p] = sc_idx_get(src->crd[k], it, p);
            break;
        default:
            break;
        }
        int64_t *t = buf;
        buf = tmp;
        tmp = t;
        P = count;
    }
    sc_free(ctx, tmp);
    if (src->nvals != P) {
        sc_free(ctx, buf);
        return sc_fail(err, SC_INTERNAL, "format", "values do not match the last level");
    }
    for (int32_t k = 0; k < N; k++)
        c[f->lvl2dim[k]] = buf + (int64_t)k * n;
    *block = buf;
    return SC_OK;
}

static bool all_dense(const sc_format *f)
{
    for (int32_t k = 0; k < f->order; k++)
        if (f->kind[k] != SC_LEVEL_DENSE)
            return false;
    return true;
}

/* n elements of size vs into d, contiguous, from s at element stride ss. */
static void gather_strided(char *restrict d, const char *restrict s, int64_t n, int64_t ss,
                           size_t vs)
{
    if (vs == 4) {
        for (int64_t i = 0; i < n; i++)
            ((uint32_t *)d)[i] = ((const uint32_t *)s)[i * ss];
    } else if (vs == 8) {
        for (int64_t i = 0; i < n; i++)
            ((uint64_t *)d)[i] = ((const uint64_t *)s)[i * ss];
    } else {
        for (int64_t i = 0; i < n; i++)
            memcpy(d + (size_t)i * vs, s + (size_t)(i * ss) * vs, vs);
    }
}

#if defined(__SSE2__)
/* relaid_tile's rows i0 .. i1 - 1 at columns j0 .. nj - 1, an element at a time (the
 * columns past the last whole block). */
static void tile_edge(char *restrict d, int64_t dr, const char *restrict s, int64_t sr, int64_t i0,
                      int64_t i1, int64_t j0, int64_t nj, size_t vs)
{
    for (int64_t j = j0; j < nj; j++)
        for (int64_t k = i0; k < i1; k++)
            memcpy(d + (size_t)(k * dr + j) * vs, s + (size_t)(j * sr + k) * vs, vs);
}
#endif

/*
 * A tile of a dense relayout: d[i * dr + j] = s[i * sa + j * sr] for i < ni, j < nj,
 * elements of vs bytes, each destination row gathered at the source's stride sr.  Where
 * the tile is a transpose (sa == 1) of 4- or 8-byte elements and SSE2 is there (every
 * x86-64), 4 x 4 blocks of 4-byte elements and 2 x 2 of 8-byte ones go through registers
 * (a load of each source row's piece, shuffles, a store of each destination row's: bit
 * moves only, so every value is kept as it is); the edges move one element at a time.
 */
static void relaid_tile(char *restrict d, int64_t dr, const char *restrict s, int64_t sa,
                        int64_t sr, int64_t ni, int64_t nj, size_t vs)
{
    int64_t i = 0;
#if defined(__SSE2__)
    if (sa == 1 && vs == 4) {
        float *df = (float *)d;
        const float *sf = (const float *)s;
        for (; i + 4 <= ni; i += 4) {
            int64_t j = 0;
            for (; j + 4 <= nj; j += 4) {
                __m128 r0 = _mm_loadu_ps(sf + j * sr + i), r1 = _mm_loadu_ps(sf + (j + 1) * sr + i);
                __m128 r2 = _mm_loadu_ps(sf + (j + 2) * sr + i), r3 = _mm_loadu_ps(sf + (j + 3) * sr + i);
                _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
                _mm_storeu_ps(df + i * dr + j, r0);
                _mm_storeu_ps(df + (i + 1) * dr + j, r1);
                _mm_storeu_ps(df + (i + 2) * dr + j, r2);
                _mm_storeu_ps(df + (i + 3) * dr + j, r3);
            }
            tile_edge(d, dr, s, sr, i, i + 4, j, nj, vs);
        }
    } else if (sa == 1 && vs == 8) {
        double *dd = (double *)d;
        const double *sd = (const double *)s;
        for (; i + 2 <= ni; i += 2) {
            int64_t j = 0;
            for (; j + 2 <= nj; j += 2) {
                __m128d r0 = _mm_loadu_pd(sd + j * sr + i), r1 = _mm_loadu_pd(sd + (j + 1) * sr + i);
                _mm_storeu_pd(dd + i * dr + j, _mm_unpacklo_pd(r0, r1));
                _mm_storeu_pd(dd + (i + 1) * dr + j, _mm_unpackhi_pd(r0, r1));
            }
            tile_edge(d, dr, s, sr, i, i + 2, j, nj, vs);
        }
    }
#endif
    for (; i < ni; i++)
        gather_strided(d + (size_t)(i * dr) * vs, s + (size_t)(i * sa) * vs, nj, sr, vs);
}

/*
 * A dense tensor into another dense level order (a schedule's relaid operand): the
 * values permuted, nothing else stored.  The destination's two innermost levels are
 * copied in square tiles (TILE x TILE elements: both sides' lines stay in L1 while a
 * tile is moved, relaid_tile: through registers where the source's own innermost
 * dimension is the destination's next-to-last, a transpose such as A·Bᵀ's B), the tiles
 * spread over the threads.
 */
enum { TILE = 32 };

static sc_status dense_relaid(const sc_ctx *ctx, const sc_tensor *src, const sc_format *dst,
                              sc_index_type index_type, sc_tensor *out, sc_error *err)
{
    const int32_t N = src->fmt.order;
    const size_t vs = sc_dtype_size(src->dtype);
    int64_t ss[SC_MAX_ORDER], ds[SC_MAX_ORDER], total = 1, acc = 1;
    for (int32_t k = N - 1; k >= 0; k--) {
        int32_t d = src->fmt.lvl2dim[k];
        ss[d] = acc;
        if (!sc_mul_ok(acc, src->dims[d], &acc))
            return sc_fail(err, SC_USER, "format", "dense tensor size overflows");
    }
    for (int32_t k = N - 1; k >= 0; k--) {
        int32_t d = dst->lvl2dim[k];
        ds[d] = total;
        total *= src->dims[d];
    }
    if (src->nvals < total)
        return sc_fail(err, SC_USER, "format", "dense tensor has %lld values, its shape needs %lld",
                       (long long)src->nvals, (long long)total);
    memset(out, 0, sizeof *out);
    out->fmt = *dst;
    out->dtype = src->dtype;
    out->index_type = index_type;
    for (int32_t d = 0; d < N; d++)
        out->dims[d] = src->dims[d];
    out->vals = sc_alloc_array(ctx, (size_t)(total > 0 ? total : 1), vs, err);
    if (!out->vals)
        return SC_NOMEM;
    out->nvals = total;
    if (total == 0)
        return SC_OK;
    /* a = the destination's next-to-last level's dimension (-1 for a vector), b its last */
    const int32_t b = dst->lvl2dim[N - 1], a = N > 1 ? dst->lvl2dim[N - 2] : -1;
    const int64_t nb = src->dims[b], na = a >= 0 ? src->dims[a] : 1;
    /* a row of the destination tile: its stride there and in the source (none: a vector) */
    const int64_t da = a >= 0 ? ds[a] : 0, sa = a >= 0 ? ss[a] : 0;
    const int64_t outer = total / (na * nb), ta = (na + TILE - 1) / TILE;
    const int nt = threads_for(ctx, total);
    char *dv = out->vals;
    const char *sv = src->vals;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t task = 0; task < outer * ta; task++) {
        int64_t o = task / ta, i0 = task % ta * TILE, so = 0, dof = 0;
        for (int32_t k = N - 3; k >= 0; k--) { /* o's coordinates in the outer levels */
            int32_t d = dst->lvl2dim[k];
            so += o % src->dims[d] * ss[d];
            dof += o % src->dims[d] * ds[d];
            o /= src->dims[d];
        }
        int64_t i1 = i0 + TILE < na ? i0 + TILE : na;
        for (int64_t j0 = 0; j0 < nb; j0 += TILE) {
            int64_t j1 = j0 + TILE < nb ? j0 + TILE : nb;
            relaid_tile(dv + (size_t)(dof + i0 * da + j0) * vs, da,
                        sv + (size_t)(so + i0 * sa + j0 * ss[b]) * vs, sa, ss[b], i1 - i0,
                        j1 - j0, vs);
        }
    }
    return SC_OK;
}

sc_status sc_fmt_convert(const sc_ctx *ctx, const sc_tensor *src, const sc_format *dst,
                         sc_index_type index_type, int flags, sc_tensor *out, sc_error *err)
{
    sc_status st = check_dims(src->fmt.order, src->dims, dst, err);
    if (st != SC_OK)
        return st;
    if (all_dense(&src->fmt) && all_dense(dst))
        return dense_relaid(ctx, src, dst, index_type, out, err);
    int64_t *block = NULL;
    entries E = {.order = src->fmt.order, .n = src->nvals, .vals = src->vals,
                 .dtype = src->dtype, .nsorted = src->fmt.order};
    st = unpack(ctx, src, &block, (int64_t **)E.c, err);
    if (st != SC_OK)
        return st;
    /* Stored entries come sorted by the levels' dims, except below a dense level under a
     * nonunique one: each repeat of a coordinate there restarts the dense coordinates
     * (c(nonunique)d stores (0,0) (0,1) (0,0) (0,1)), so from that level on they are
     * sorted again, and repeats summed. */
    E.unique = true;
    bool repeats_above = false;
    for (int32_t k = 0; k < src->fmt.order; k++) {
        E.sorted_by[k] = src->fmt.lvl2dim[k];
        E.unique &= src->fmt.unique[k] != 0;
        if (repeats_above && src->fmt.kind[k] == SC_LEVEL_DENSE && E.nsorted > k)
            E.nsorted = k;
        repeats_above |= !src->fmt.unique[k];
    }
    st = build(ctx, &E, src->dims, dst, index_type, flags, out, err);
    sc_free(ctx, block);
    return st;
}

sc_status sc_fmt_to_dense(const sc_ctx *ctx, const sc_tensor *src, void *out, sc_error *err)
{
    const sc_format *f = &src->fmt;
    const int32_t N = f->order;
    const size_t vs = sc_dtype_size(src->dtype);
    int64_t total = 1;
    int64_t stride[SC_MAX_ORDER];
    for (int32_t d = N - 1; d >= 0; d--) {
        stride[d] = total;
        if (!sc_mul_ok(total, src->dims[d], &total))
            return sc_fail(err, SC_USER, "format", "dense size overflows");
    }
    const int nt = threads_for(ctx, total > src->nvals ? total : src->nvals);
    /* Zero in parallel chunks: first touch of fresh pages is the cost here. */
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int t = 0; t < nt; t++) {
        size_t lo = (size_t)(total * t / nt) * vs, hi = (size_t)(total * (t + 1) / nt) * vs;
        memset((char *)out + lo, 0, hi - lo);
    }
    const int64_t n = src->nvals;
    bool unique = true;
    for (int32_t k = 0; k < N; k++)
        unique &= f->unique[k] != 0;
    const int64_t cap = max_level_size(src, err);
    if (cap < 0)
        return err->kind;
    /* off[p]: linear dense offset of the prefix ending at position p of the current level. */
    int64_t *off = sc_calloc(ctx, (size_t)cap, sizeof(int64_t), err);
    int64_t *nxt = off ? sc_calloc(ctx, (size_t)cap, sizeof(int64_t), err) : NULL;
    if (!nxt) {
        sc_free(ctx, off);
        return SC_NOMEM;
    }
    const sc_index_type it = src->index_type;
    int64_t P = 1;
    off[0] = 0;
    for (int32_t k = 0; k < N; k++) {
        int64_t count = sc_fmt_level_size(src, k, err);
        const int32_t d = f->lvl2dim[k];
        const int64_t dim = src->dims[d];
        switch ((sc_level_kind)f->kind[k]) {
        case SC_LEVEL_DENSE:
#pragma omp parallel for num_threads(nt) schedule(static)
            for (int64_t q = 0; q < P; q++)
                for (int64_t i = 0; i < dim; i++)
                    nxt[q * dim + i] = off[q] + i * stride[d];
            break;
        case SC_LEVEL_COMPRESSED:
#pragma omp parallel for num_threads(nt) schedule(static)
            for (int64_t q = 0; q < P; q++) {
                int64_t lo = sc_idx_get(src->pos[k], it, q), hi = sc_idx_get(src->pos[k], it, q + 1);
                for (int64_t p = lo; p < hi; p++)
                    nxt[p] = off[q] + sc_idx_get(src->crd[k], it, p) * stride[d];
            }
            break;
        case SC_LEVEL_SINGLETON:
#pragma omp parallel for num_threads(nt) schedule(static)
            for (int64_t p = 0; p < count; p++)
                nxt[p] = off[p] + sc_idx_get(src->crd[k], it, p) * stride[d];
            break;
        default:
            break;
        }
        int64_t *t = off;
        off = nxt;
        nxt = t;
        P = count;
    }
    /* Positions are distinct unless a level is nonunique (then duplicates add up). */
    if (unique) {
        switch (src->dtype) {
#define X(e, T, add)                                                                       \
        case SC_DTYPE_##e: {                                                               \
            T *o = out;                                                                    \
            const T *v = src->vals;                                                        \
            _Pragma("omp parallel for num_threads(nt) schedule(static)")                   \
            for (int64_t p = 0; p < n; p++)                                                \
                o[off[p]] = v[p];                                                          \
            break;                                                                         \
        }
            VAL_TYPES(X)
#undef X
        default: break;
        }
    } else {
        for (int64_t p = 0; p < n; p++)
            val_add(out, off[p], src->vals, p, src->dtype);
    }
    sc_free(ctx, off);
    sc_free(ctx, nxt);
    return SC_OK;
}
