/*
 * validate.c — check a tensor's arrays against its format: the trust boundary for arrays
 * that come from users (from_components).  Conversions inside the core produce valid
 * tensors and skip this.
 *
 * Per level k with P = number of positions of level k-1 (1 above the root):
 *   dense       no arrays; P * dim positions
 *   compressed  pos has P+1 entries, pos[0] = 0, non-decreasing, pos[P] = crd_len;
 *               crd in [0, dim), increasing within a segment (strictly if unique)
 *   singleton   crd has P entries in [0, dim)
 * Ordering across positions whose prefixes are equal (nonunique levels) is checked with a
 * per-position "same prefix as the previous position" byte array.
 */
#include "sc_format.h"

static sc_status fail_at(sc_error *err, sc_status kind, int32_t k, const char *fmt_msg,
                         long long p, long long v, long long lim)
{
    return sc_fail(err, kind, "format", "level %d: %s (position %lld: %lld, limit %lld)",
                   (int)k, fmt_msg, p, v, lim);
}

static bool any_nonunique(const sc_format *f)
{
    for (int32_t k = 0; k < f->order; k++)
        if (!f->unique[k])
            return true;
    return false;
}

sc_status sc_fmt_check_lengths(const sc_tensor *t, sc_error *err)
{
    const sc_format *f = &t->fmt;
    const sc_index_type it = t->index_type;
    int64_t P = 1;
    int32_t k = 0;
    for (; k < f->order; k++) {
        const int64_t dim = t->dims[f->lvl2dim[k]];
        const void *pos = t->pos[k];
        bool ok;
        switch ((sc_level_kind)f->kind[k]) {
        case SC_LEVEL_DENSE:
            ok = dim >= 0 && sc_mul_ok(P, dim, &P);
            break;
        case SC_LEVEL_COMPRESSED:
            ok = pos && t->pos_len[k] == P + 1 && sc_idx_get(pos, it, 0) == 0 &&
                 sc_idx_get(pos, it, P) == t->crd_len[k] && (t->crd[k] || !t->crd_len[k]);
            P = t->crd_len[k];
            break;
        case SC_LEVEL_SINGLETON:
            ok = t->crd_len[k] == P && (t->crd[k] || !P);
            break;
        default:
            ok = false;
        }
        if (!ok)
            break;
    }
    if (k == f->order && t->nvals == P && (t->vals || !P))
        return SC_OK;
#define REPLACED "(were the tensor's arrays replaced by another thread while this call read them?)"
    if (k < f->order)
        return sc_fail(err, SC_USER, "format",
                       "level %d's arrays disagree in length with the levels above " REPLACED,
                       (int)k);
    return sc_fail(err, SC_USER, "format", "the values disagree in length with the levels "
                   REPLACED);
#undef REPLACED
}

sc_status sc_fmt_validate(const sc_ctx *ctx, const sc_tensor *t, sc_error *err)
{
    const sc_format *f = &t->fmt;
    sc_status st = sc_fmt_check(f, err);
    if (st != SC_OK)
        return st;
    if (t->index_type >= SC_INDEX_COUNT || t->dtype >= SC_DTYPE_COUNT)
        return sc_fail(err, SC_USER, "format", "unknown index or value dtype");
    const sc_index_type it = t->index_type;
    for (int32_t d = 0; d < f->order; d++) {
        if (t->dims[d] < 0)
            return sc_fail(err, SC_USER, "format", "dimension %d has negative size %lld",
                           (int)d, (long long)t->dims[d]);
    }

    bool track = any_nonunique(f);
    uint8_t *eq_prev = NULL, *eq_cur = NULL; /* same-prefix flags of levels k-1 and k */
    int64_t P = 1;
    st = SC_OK;
    for (int32_t k = 0; k < f->order && st == SC_OK; k++) {
        const int64_t dim = t->dims[f->lvl2dim[k]];
        const sc_level_kind kind = (sc_level_kind)f->kind[k];
        const bool uniq = f->unique[k];
        int64_t count = 0;
        if (kind != SC_LEVEL_DENSE) {
            if (dim > 0 && dim - 1 > sc_index_max(it)) {
                st = sc_fail(err, SC_USER, "format",
                             "level %d: dimension size %lld does not fit %s indices", (int)k,
                             (long long)dim, sc_index_name(it));
                break;
            }
            if (!t->crd[k] && t->crd_len[k] > 0) {
                st = sc_fail(err, SC_USER, "format", "level %d: missing crd array", (int)k);
                break;
            }
        }
        switch (kind) {
        case SC_LEVEL_DENSE:
            if (!sc_mul_ok(P, dim, &count)) {
                st = sc_fail(err, SC_USER, "format",
                             "level %d: the number of positions overflows int64", (int)k);
            }
            break;
        case SC_LEVEL_COMPRESSED: {
            const void *pos = t->pos[k], *crd = t->crd[k];
            if (!pos || t->pos_len[k] != P + 1) {
                st = sc_fail(err, SC_USER, "format",
                             "level %d: pos array has length %lld, expected %lld", (int)k,
                             (long long)(pos ? t->pos_len[k] : 0), (long long)(P + 1));
                break;
            }
            if (sc_idx_get(pos, it, 0) != 0) {
                st = fail_at(err, SC_USER, k, "pos array must start at 0", 0,
                             sc_idx_get(pos, it, 0), 0);
                break;
            }
            if (sc_idx_get(pos, it, P) != t->crd_len[k]) {
                st = sc_fail(err, SC_USER, "format",
                             "level %d: pos[%lld] = %lld but crd has length %lld", (int)k,
                             (long long)P, (long long)sc_idx_get(pos, it, P),
                             (long long)t->crd_len[k]);
                break;
            }
            count = t->crd_len[k];
            for (int64_t q = 0; q < P; q++) {
                int64_t lo = sc_idx_get(pos, it, q), hi = sc_idx_get(pos, it, q + 1);
                if (hi < lo || hi > count) {
                    st = fail_at(err, SC_USER, k,
                                 hi < lo ? "pos array decreases" : "pos array exceeds crd length",
                                 q + 1, hi, hi < lo ? lo : count);
                    break;
                }
            }
            if (st != SC_OK)
                break;
            if (track) {
                eq_cur = sc_calloc(ctx, (size_t)count, 1, err);
                if (!eq_cur) {
                    st = SC_NOMEM;
                    break;
                }
            }
            for (int64_t q = 0; q < P && st == SC_OK; q++) {
                int64_t lo = sc_idx_get(pos, it, q), hi = sc_idx_get(pos, it, q + 1);
                for (int64_t p = lo; p < hi; p++) {
                    int64_t c = sc_idx_get(crd, it, p);
                    if (c < 0 || c >= dim) {
                        st = fail_at(err, SC_INDEX, k, "coordinate out of range", p, c, dim);
                        break;
                    }
                    bool prev_same_prefix = p > lo || (eq_prev && eq_prev[q] && p > 0);
                    if (p > lo || (eq_prev && eq_prev[q] && p > 0)) {
                        int64_t b = sc_idx_get(crd, it, p - 1);
                        bool same_parent = p > lo;
                        if (c < b || (c == b && uniq && same_parent)) {
                            st = fail_at(err, SC_USER, k,
                                         uniq ? "coordinates not strictly increasing in a segment"
                                              : "coordinates not sorted",
                                         p, c, b);
                            break;
                        }
                        if (eq_cur)
                            eq_cur[p] = prev_same_prefix && c == b;
                    }
                }
            }
            break;
        }
        case SC_LEVEL_SINGLETON: {
            const void *crd = t->crd[k];
            if (t->crd_len[k] != P) {
                st = sc_fail(err, SC_USER, "format",
                             "level %d: crd array has length %lld, expected %lld", (int)k,
                             (long long)t->crd_len[k], (long long)P);
                break;
            }
            count = P;
            if (track) {
                eq_cur = sc_calloc(ctx, (size_t)count, 1, err);
                if (!eq_cur) {
                    st = SC_NOMEM;
                    break;
                }
            }
            for (int64_t p = 0; p < P; p++) {
                int64_t c = sc_idx_get(crd, it, p);
                if (c < 0 || c >= dim) {
                    st = fail_at(err, SC_INDEX, k, "coordinate out of range", p, c, dim);
                    break;
                }
                if (p > 0 && eq_prev && eq_prev[p]) {
                    int64_t b = sc_idx_get(crd, it, p - 1);
                    if (c < b || (c == b && uniq)) {
                        st = fail_at(err, SC_USER, k,
                                     uniq ? "coordinates not sorted or duplicated"
                                          : "coordinates not sorted",
                                     p, c, b);
                        break;
                    }
                    eq_cur[p] = c == b;
                }
            }
            break;
        }
        default:
            st = sc_fail(err, SC_INTERNAL, "format", "level %d has an unknown kind", (int)k);
        }
        if (st != SC_OK)
            break;
        if (track && kind == SC_LEVEL_DENSE) {
            /* Positions under a dense level differ from their predecessor unless dim == 1. */
            eq_cur = sc_calloc(ctx, (size_t)count, 1, err);
            if (!eq_cur) {
                st = SC_NOMEM;
                break;
            }
            if (dim == 1 && eq_prev)
                for (int64_t q = 0; q < P; q++)
                    eq_cur[q] = eq_prev[q];
        }
        sc_free(ctx, eq_prev);
        eq_prev = eq_cur;
        eq_cur = NULL;
        P = count;
    }
    sc_free(ctx, eq_prev);
    sc_free(ctx, eq_cur);
    if (st != SC_OK)
        return st;
    if (t->nvals != P)
        return sc_fail(err, SC_USER, "format", "values has length %lld, expected %lld",
                       (long long)t->nvals, (long long)P);
    if (!t->vals && P > 0)
        return sc_fail(err, SC_USER, "format", "missing values array");
    return SC_OK;
}
