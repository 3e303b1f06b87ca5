/*
 * buf.c — the growable text buffer of codegen (and of the driver's explain text).
 *
 * Capacity doubles with an overflow check; memory comes from the ctx allocator so the
 * text can outlive the compilation arena.  Errors are sticky and reported once, when the
 * text is taken.
 */
#include "sc_cg.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void sc_cg_buf_init(sc_cg_buf *b, const sc_ctx *ctx)
{
    memset(b, 0, sizeof *b);
    b->ctx = ctx;
}

static bool reserve(sc_cg_buf *b, size_t extra)
{
    if (b->st != SC_OK)
        return false;
    if (extra > SIZE_MAX / 4 || b->len > SIZE_MAX / 4 - extra) {
        b->st = SC_NOMEM;
        return false;
    }
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < need)
        cap *= 2;
    char *nd = b->ctx->mem.alloc(b->ctx->mem.user, cap);
    if (!nd) {
        b->st = SC_NOMEM;
        return false;
    }
    if (b->len)
        memcpy(nd, b->data, b->len);
    nd[b->len] = '\0';
    if (b->data)
        b->ctx->mem.free(b->ctx->mem.user, b->data);
    b->data = nd;
    b->cap = cap;
    return true;
}

void sc_cg_append(sc_cg_buf *b, const char *s, size_t n)
{
    if (!reserve(b, n))
        return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void sc_cg_printf(sc_cg_buf *b, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (k < 0)
        return;
    if ((size_t)k < sizeof small) {
        sc_cg_append(b, small, (size_t)k);
        return;
    }
    if (!reserve(b, (size_t)k))
        return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)k + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)k;
}

char *sc_cg_buf_take(sc_cg_buf *b, size_t *len, sc_error *err)
{
    if (b->st == SC_OK && !b->data)
        reserve(b, 0);
    if (b->st != SC_OK) {
        sc_fail(err, SC_NOMEM, "codegen", "out of memory building text");
        sc_cg_buf_release(b);
        return NULL;
    }
    char *d = b->data;
    if (len)
        *len = b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    return d;
}

void sc_cg_buf_release(sc_cg_buf *b)
{
    if (b->data)
        b->ctx->mem.free(b->ctx->mem.user, b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}
