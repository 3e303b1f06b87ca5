/*
 * text.c — the text form of a schedule: parse and print (grammar in sc_sched.h).
 *
 * Parsing resolves index names against the expression and rejects unknown directives,
 * unknown or repeated indices and repeated directives, pointing at the column.  Printing
 * writes the directives in a fixed order (order, parallel, workspace), so
 * print(parse(print(s))) == print(s).
 */
#include "sc_sched.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

static sc_status bad(sc_error *err, int64_t pos, const char *fmt, const char *a, const char *b)
{
    sc_fail(err, SC_USER, "schedule", fmt, a, b);
    if (err)
        err->pos = pos;
    return SC_USER;
}

static void skip(const char *t, size_t *i)
{
    while (t[*i] == ' ' || t[*i] == '\t' || t[*i] == '\n')
        (*i)++;
}

static size_t ident(const char *t, size_t i)
{
    size_t j = i;
    if (isalpha((unsigned char)t[j]) || t[j] == '_')
        for (j++; isalnum((unsigned char)t[j]) || t[j] == '_'; j++)
            ;
    return j - i;
}

sc_status sc_sched_parse(const sc_expr *e, const char *text, sc_sched *out, sc_error *err)
{
    memset(out, 0, sizeof *out);
    out->parallel = -1;
    out->ws_depth = -1;
    if (!text)
        return SC_OK;
    size_t i = 0;
    for (;;) {
        skip(text, &i);
        if (!text[i])
            return SC_OK;
        size_t start = i, n = ident(text, i);
        char word[32];
        if (n == 0 || n >= sizeof word)
            return bad(err, (int64_t)i, "expected a directive (order, parallel, workspace)%s%s", "", "");
        memcpy(word, text + i, n);
        word[n] = '\0';
        i += n;
        skip(text, &i);
        int which = !strcmp(word, "order") ? 0 : !strcmp(word, "parallel") ? 1
                  : !strcmp(word, "workspace") ? 2 : -1;
        if (which < 0)
            return bad(err, (int64_t)start, "unknown directive '%s'%s (known: order, parallel, workspace)", word, "");
        if ((which == 0 && out->norder) || (which == 1 && out->has_parallel) ||
            (which == 2 && out->has_workspace))
            return bad(err, (int64_t)start, "directive '%s' given twice%s", word, "");
        if (text[i] != '(')
            return bad(err, (int64_t)i, "expected '(' after '%s'%s", word, "");
        i++;
        int32_t count = 0;
        for (;;) {
            skip(text, &i);
            if (text[i] == ')' && count == 0 && which == 2) {
                break;
            }
            size_t vs = i, vn = ident(text, i);
            char name[64];
            if (vn == 0 || vn >= sizeof name)
                return bad(err, (int64_t)i, "expected an index name in '%s(...)'%s", word, "");
            memcpy(name, text + i, vn);
            name[vn] = '\0';
            i += vn;
            sc_expr_var v = -1;
            if (which == 1 && !strcmp(name, "none")) {
                v = -1;
            } else {
                v = sc_expr_find_var(e, name);
                if (v < 0)
                    return bad(err, (int64_t)vs, "unknown index '%s' in '%s(...)'", name, word);
            }
            if (which == 0) {
                for (int32_t k = 0; k < out->norder; k++)
                    if (out->order[k] == v)
                        return bad(err, (int64_t)vs, "index '%s' repeated in '%s(...)'", name, word);
                if (out->norder >= SC_LOWER_MAX_VARS)
                    return bad(err, (int64_t)vs, "too many indices in '%s(...)'%s", word, "");
                out->order[out->norder++] = v;
            } else if (which == 1) {
                if (count > 0)
                    return bad(err, (int64_t)vs, "'parallel(...)' takes one index or none%s%s", "", "");
                out->has_parallel = true;
                out->parallel = v;
            } else {
                for (int32_t k = 0; k < out->nworkspace; k++)
                    if (out->workspace[k] == v)
                        return bad(err, (int64_t)vs, "index '%s' repeated in '%s(...)'", name, word);
                if (out->nworkspace >= SC_SCHED_MAX_WS)
                    return bad(err, (int64_t)vs, "too many indices in '%s(...)'%s", word, "");
                out->workspace[out->nworkspace++] = v;
            }
            count++;
            skip(text, &i);
            if (text[i] == ',') {
                i++;
                continue;
            }
            break;
        }
        if (which == 2)
            out->has_workspace = true;
        if (text[i] != ')')
            return bad(err, (int64_t)i, "expected ',' or ')' in '%s(...)'%s", word, "");
        i++;
    }
}

size_t sc_sched_print(const sc_expr *e, const sc_sched *s, char *buf, size_t n)
{
    size_t len = 0;
    if (n)
        buf[0] = '\0';
#define PUT(...)                                                                   \
    do {                                                                           \
        int k_ = snprintf(len < n ? buf + len : NULL, len < n ? n - len : 0, __VA_ARGS__); \
        if (k_ > 0)                                                                \
            len += (size_t)k_;                                                     \
    } while (0)
    if (s->norder) {
        PUT("order(");
        for (int32_t k = 0; k < s->norder; k++)
            PUT("%s%s", k ? "," : "", e->vars[s->order[k]].name);
        PUT(")");
    }
    if (s->parallel >= 0)
        PUT("%sparallel(%s)", len ? " " : "", e->vars[s->parallel].name);
    if (s->nworkspace > 0) {
        PUT("%sworkspace(", len ? " " : "");
        for (int32_t k = 0; k < s->nworkspace; k++)
            PUT("%s%s", k ? "," : "", e->vars[s->workspace[k]].name);
        PUT(")");
    }
#undef PUT
    return len;
}
