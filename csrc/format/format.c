/*
 * format.c — format descriptors: parsing the text form, structural checks, the
 * canonical text and the named shorthands.
 *
 * Named formats (order N):  dense = d^N,  csf = c^N,  coo = c(nonunique) s(nonunique)^(N-1)
 * (1-D: c(nonunique)),  csr = dc,  csc = dc with order (1,0),  dcsr = cc,  dcsc = cc with
 * order (1,0).  The last four exist only for N = 2.
 */
#include "sc_format.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

void sc_fmt_dense(int32_t order, sc_format *f)
{
    memset(f, 0, sizeof *f);
    f->order = order;
    for (int32_t k = 0; k < order; k++) {
        f->kind[k] = SC_LEVEL_DENSE;
        f->unique[k] = 1;
        f->lvl2dim[k] = k;
    }
}

static bool named(const char *name, int32_t order, sc_format *f)
{
    sc_fmt_dense(order, f);
    if (!strcmp(name, "dense"))
        return true;
    if (!strcmp(name, "csf")) {
        for (int32_t k = 0; k < order; k++)
            f->kind[k] = SC_LEVEL_COMPRESSED;
        return true;
    }
    if (!strcmp(name, "coo")) {
        for (int32_t k = 0; k < order; k++) {
            f->kind[k] = k == 0 ? SC_LEVEL_COMPRESSED : SC_LEVEL_SINGLETON;
            f->unique[k] = 0;
        }
        return true;
    }
    static const struct {
        const char *name;
        uint8_t k0, k1;
        int32_t l0;
    } two_d[] = {
        {"csr", SC_LEVEL_DENSE, SC_LEVEL_COMPRESSED, 0},
        {"csc", SC_LEVEL_DENSE, SC_LEVEL_COMPRESSED, 1},
        {"dcsr", SC_LEVEL_COMPRESSED, SC_LEVEL_COMPRESSED, 0},
        {"dcsc", SC_LEVEL_COMPRESSED, SC_LEVEL_COMPRESSED, 1},
    };
    for (size_t i = 0; i < sizeof two_d / sizeof two_d[0]; i++) {
        if (!strcmp(name, two_d[i].name)) {
            f->kind[0] = two_d[i].k0;
            f->kind[1] = two_d[i].k1;
            f->lvl2dim[0] = two_d[i].l0;
            f->lvl2dim[1] = 1 - two_d[i].l0;
            return true;
        }
    }
    return false;
}

static const char *const named_list[] = {"dense", "csr", "csc", "coo", "dcsr", "dcsc", "csf"};

static sc_status parse_fail(sc_error *err, int64_t col, const char *spec, const char *what)
{
    sc_fail(err, SC_USER, "format",
            "invalid format '%s': %s at column %lld (expected a name: dense, csr, csc, coo, "
            "dcsr, dcsc, csf; or levels d/c/s, e.g. \"dc\" or \"c(nonunique)s\")",
            spec, what, (long long)col);
    err->pos = col;
    return SC_USER;
}

static size_t word_len(const char *s)
{
    size_t n = 0;
    while (isalpha((unsigned char)s[n]))
        n++;
    return n;
}

sc_status sc_fmt_parse(const char *spec, int32_t order, sc_format *out, sc_error *err)
{
    if (order < 1 || order > SC_MAX_ORDER)
        return sc_fail(err, SC_USER, "format", "tensor order %d is outside 1..%d", (int)order,
                       SC_MAX_ORDER);
    for (size_t i = 0; i < sizeof named_list / sizeof named_list[0]; i++) {
        if (strcmp(spec, named_list[i]))
            continue;
        if (!named(spec, order, out))
            break;
        if (order != 2 && strcmp(spec, "dense") && strcmp(spec, "csf") && strcmp(spec, "coo"))
            return sc_fail(err, SC_USER, "format",
                           "format '%s' is for 2-D tensors, got a %d-D tensor (use csf or coo "
                           "for N-D)", spec, (int)order);
        return sc_fmt_check(out, err);
    }

    sc_fmt_dense(order, out);
    int32_t n = 0;
    const char *s = spec;
    while (*s) {
        if (*s == ' ' || *s == ',') {
            s++;
            continue;
        }
        int64_t col = s - spec;
        size_t w = word_len(s);
        uint8_t kind;
        if (w == 0)
            return parse_fail(err, col, spec, "unexpected character");
        if (w == 1 || !strncmp(s, "dense", w) || !strncmp(s, "compressed", w) ||
            !strncmp(s, "singleton", w)) {
            switch (*s) {
            case 'd': kind = SC_LEVEL_DENSE; break;
            case 'c': kind = SC_LEVEL_COMPRESSED; break;
            case 's': kind = SC_LEVEL_SINGLETON; break;
            default: return parse_fail(err, col, spec, "unknown level letter");
            }
            /* a name is whole ("compr" is none): a letter, or the level's full name */
            if (w > 1 && w != strlen(sc_level_name(kind)))
                return parse_fail(err, col, spec, "unknown level name");
        } else if (w > 1) {
            /* A run of letters like "dcc": one level per letter. */
            for (size_t i = 0; i < w; i++)
                if (s[i] != 'd' && s[i] != 'c' && s[i] != 's')
                    return parse_fail(err, col + (int64_t)i, spec, "unknown level letter");
            for (size_t i = 0; i + 1 < w; i++) {
                if (n >= order)
                    return parse_fail(err, col + (int64_t)i, spec, "more levels than dimensions");
                out->kind[n] = s[i] == 'd' ? SC_LEVEL_DENSE
                               : s[i] == 'c' ? SC_LEVEL_COMPRESSED : SC_LEVEL_SINGLETON;
                out->unique[n++] = 1;
            }
            col += (int64_t)w - 1;
            s += w - 1;
            w = 1;
            kind = *s == 'd' ? SC_LEVEL_DENSE : *s == 'c' ? SC_LEVEL_COMPRESSED
                                                          : SC_LEVEL_SINGLETON;
        } else {
            return parse_fail(err, col, spec, "unknown level");
        }
        if (n >= order)
            return parse_fail(err, col, spec, "more levels than dimensions");
        out->kind[n] = kind;
        out->unique[n] = 1;
        s += w;
        if (*s == '(') {
            const char *close = strchr(s, ')');
            if (!close)
                return parse_fail(err, s - spec, spec, "unclosed '('");
            size_t len = (size_t)(close - s - 1);
            if (len == 9 && !strncmp(s + 1, "nonunique", 9))
                out->unique[n] = 0;
            else if (!(len == 6 && !strncmp(s + 1, "unique", 6)))
                return parse_fail(err, s + 1 - spec, spec,
                                  "unknown level property (expected nonunique or unique)");
            if (kind == SC_LEVEL_DENSE && !out->unique[n])
                return parse_fail(err, s + 1 - spec, spec, "a dense level is always unique");
            s = close + 1;
        }
        n++;
    }
    if (n != order)
        return sc_fail(err, SC_USER, "format",
                       "format '%s' has %d levels but the tensor has %d dimensions", spec,
                       (int)n, (int)order);
    return sc_fmt_check(out, err);
}

sc_status sc_fmt_check(const sc_format *f, sc_error *err)
{
    if (f->order < 1 || f->order > SC_MAX_ORDER)
        return sc_fail(err, SC_USER, "format", "format order %d is outside 1..%d",
                       (int)f->order, SC_MAX_ORDER);
    bool seen[SC_MAX_ORDER] = {false};
    for (int32_t k = 0; k < f->order; k++) {
        int32_t d = f->lvl2dim[k];
        if (d < 0 || d >= f->order || seen[d])
            return sc_fail(err, SC_USER, "format",
                           "level order is not a permutation of 0..%d", (int)f->order - 1);
        seen[d] = true;
        if (f->kind[k] >= SC_LEVEL_COUNT)
            return sc_fail(err, SC_USER, "format", "level %d has an unknown kind", (int)k);
        if (f->kind[k] == SC_LEVEL_DENSE && !f->unique[k])
            return sc_fail(err, SC_USER, "format", "level %d: a dense level is always unique",
                           (int)k);
        if (f->kind[k] == SC_LEVEL_SINGLETON &&
            (k == 0 || f->kind[k - 1] == SC_LEVEL_DENSE))
            return sc_fail(err, SC_USER, "format",
                           "level %d: a singleton level needs a compressed or singleton level "
                           "above it", (int)k);
    }
    return SC_OK;
}

void sc_fmt_levels_text(const sc_format *f, char *buf, size_t n)
{
    size_t at = 0;
    if (n == 0)
        return;
    buf[0] = '\0';
    for (int32_t k = 0; k < f->order; k++) {
        int w = snprintf(buf + at, n - at, "%c%s", sc_level_letter((sc_level_kind)f->kind[k]),
                         f->unique[k] ? "" : "(nonunique)");
        if (w < 0 || (size_t)w >= n - at)
            return;
        at += (size_t)w;
    }
}

const char *sc_fmt_name(const sc_format *f)
{
    for (size_t i = 0; i < sizeof named_list / sizeof named_list[0]; i++) {
        sc_format g;
        if (named(named_list[i], f->order, &g) && !memcmp(&g, f, sizeof g)) {
            bool two_d_only = strcmp(named_list[i], "dense") && strcmp(named_list[i], "csf") &&
                              strcmp(named_list[i], "coo");
            if (!two_d_only || f->order == 2)
                return named_list[i];
        }
    }
    return NULL;
}

int64_t sc_fmt_level_size(const sc_tensor *t, int32_t k, sc_error *err)
{
    int64_t size = 1;
    for (int32_t l = 0; l <= k; l++) {
        switch ((sc_level_kind)t->fmt.kind[l]) {
        case SC_LEVEL_DENSE:
            if (!sc_mul_ok(size, t->dims[t->fmt.lvl2dim[l]], &size)) {
                sc_fail(err, SC_USER, "format",
                        "level %d: the number of positions overflows int64", (int)l);
                return -1;
            }
            break;
        case SC_LEVEL_COMPRESSED:
            size = t->crd_len[l];
            break;
        case SC_LEVEL_SINGLETON:
            break;
        default:
            sc_fail(err, SC_INTERNAL, "format", "level %d has an unknown kind", (int)l);
            return -1;
        }
    }
    return size;
}
