/*
 * base.c — context, allocation through the context's hook, error records, checked
 * arithmetic and the name tables generated from the X-macro lists in scorch_rt.h.
 */
#define _DEFAULT_SOURCE /* madvise */
#include "sc_base.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

/* Arrays of at least HUGE_ALLOC bytes (a kernel's dense output, a SpGEMM output reserved
 * at its bound) start on a 2 MiB boundary and are advised to the kernel as huge-page
 * candidates (where transparent huge pages are "madvise", the usual default): their
 * first touch then faults once per 2 MiB instead of once per 4 KiB page, as NumPy does
 * for its large arrays.  A 256 MB SpMM output is 65536 page faults otherwise. */
enum { HUGE_ALLOC = 4 << 20, HUGE_PAGE = 2 << 20 };

static void *default_alloc(void *user, size_t n)
{
    (void)user;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (n >= HUGE_ALLOC) {
        void *p = NULL;
        if (posix_memalign(&p, HUGE_PAGE, n) != 0)
            return NULL;
        madvise(p, n / HUGE_PAGE * HUGE_PAGE, MADV_HUGEPAGE); /* advice: failure is harmless */
        return p;
    }
#endif
    return malloc(n);
}

static void default_free(void *user, void *p)
{
    (void)user;
    free(p);
}

void sc_ctx_init(sc_ctx *ctx)
{
    ctx->mem.alloc = default_alloc;
    ctx->mem.free = default_free;
    ctx->mem.user = NULL;
    ctx->num_threads = 0;
}

void *sc_alloc(const sc_ctx *ctx, size_t n, sc_error *err)
{
    void *p = ctx->mem.alloc(ctx->mem.user, n ? n : 1);
    if (!p)
        sc_fail(err, SC_NOMEM, "alloc", "out of memory allocating %zu bytes", n);
    return p;
}

void *sc_calloc(const sc_ctx *ctx, size_t count, size_t size, sc_error *err)
{
    if (size && count > SIZE_MAX / size) {
        sc_fail(err, SC_NOMEM, "alloc", "allocation of %zu x %zu bytes overflows", count, size);
        return NULL;
    }
    void *p = sc_alloc(ctx, count * size, err);
    if (p)
        memset(p, 0, count * size);
    return p;
}

void sc_free(const sc_ctx *ctx, void *p)
{
    if (p)
        ctx->mem.free(ctx->mem.user, p);
}

sc_status sc_fail(sc_error *err, sc_status kind, const char *stage, const char *fmt, ...)
{
    if (err) {
        err->kind = kind;
        err->stage = stage;
        err->pos = -1;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return kind;
}

void sc_error_clear(sc_error *err)
{
    err->kind = SC_OK;
    err->stage = "";
    err->pos = -1;
    err->msg[0] = '\0';
}

bool sc_mul_ok(int64_t a, int64_t b, int64_t *out)
{
    if (a < 0 || b < 0)
        return false;
    if (a != 0 && b > INT64_MAX / a)
        return false;
    *out = a * b;
    return true;
}

bool sc_add_ok(int64_t a, int64_t b, int64_t *out)
{
    if (a < 0 || b < 0 || a > INT64_MAX - b)
        return false;
    *out = a + b;
    return true;
}

static const struct {
    const char *name;
    size_t size;
} dtype_table[] = {
#define SC_X_(e, name, ctype, size) {name, size},
    SC_DTYPES(SC_X_)
#undef SC_X_
};

static const struct {
    const char *name;
    size_t size;
} index_table[] = {
#define SC_X_(e, name, ctype, size) {name, size},
    SC_INDEX_TYPES(SC_X_)
#undef SC_X_
};

static const struct {
    const char *name;
    char letter;
    bool has_pos, has_crd;
} level_table[] = {
#define SC_X_(e, name, letter, has_pos, has_crd) {name, letter, has_pos, has_crd},
    SC_LEVEL_KINDS(SC_X_)
#undef SC_X_
};

static const char *const status_table[] = {
#define SC_X_(e, name) name,
    SC_STATUSES(SC_X_)
#undef SC_X_
};

size_t sc_dtype_size(sc_dtype t) { return dtype_table[t].size; }
const char *sc_dtype_name(sc_dtype t) { return dtype_table[t].name; }
size_t sc_index_size(sc_index_type t) { return index_table[t].size; }
const char *sc_index_name(sc_index_type t) { return index_table[t].name; }
int64_t sc_index_max(sc_index_type t) { return t == SC_INDEX_I32 ? INT32_MAX : INT64_MAX; }
const char *sc_level_name(sc_level_kind k) { return level_table[k].name; }
char sc_level_letter(sc_level_kind k) { return level_table[k].letter; }
bool sc_level_has_pos(sc_level_kind k) { return level_table[k].has_pos; }
bool sc_level_has_crd(sc_level_kind k) { return level_table[k].has_crd; }
const char *sc_status_name(sc_status s) { return status_table[s]; }
