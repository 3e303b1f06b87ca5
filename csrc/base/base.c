/*
 * base.c — context, allocation through the context's hook, error records, checked
 * arithmetic and the name tables generated from the X-macro lists in scorch_rt.h.
 */
#define _DEFAULT_SOURCE /* madvise */
#include "sc_base.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

/*
 * Arrays of at least HUGE_ALLOC bytes (a kernel's dense output, a SpGEMM output reserved
 * at its bound) start on a 2 MiB boundary and are advised to the kernel as huge-page
 * candidates (where transparent huge pages are "madvise", the usual default): their
 * first touch then faults once per 2 MiB instead of once per 4 KiB page, as NumPy does
 * for its large arrays.  A 256 MB SpMM output is 65536 page faults otherwise.
 *
 * Such a block, and any block of at least KEEP_MIN bytes (a SpGEMM's row counts and
 * workspaces, a sparse output's values), once freed, is kept (up to KEEP_BLOCKS blocks,
 * KEEP_BYTES in all) for the next allocation of about its size: a training loop's
 * outputs of the same shape then reuse memory that is already mapped, with no page
 * faults and none of the stalls a huge-page fault can take.  Below HUGE_ALLOC, malloc's
 * own reuse of freed memory is at the mercy of what else the process frees: after a
 * torch.sparse.mm of p2p-Gnutella31, scorch's next SpGEMM of it took 1000 page faults
 * (usroads 1560), ~1 us each on a VM.  The blocks handed out are listed (up to
 * LIVE_MAX) so that a free knows their size; past that they are ordinary allocations.
 */
enum {
    HUGE_ALLOC = 4 << 20,
    HUGE_PAGE = 2 << 20,
    KEEP_MIN = 64 << 10,
    KEEP_BLOCKS = 32,
    LIVE_MAX = 256
};
#define KEEP_BYTES ((size_t)512 << 20)

typedef struct {
    void *p;
    size_t n;
} big_block;

static pthread_mutex_t big_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t big_once = PTHREAD_ONCE_INIT;
static big_block big_live[LIVE_MAX], big_kept[KEEP_BLOCKS];
static int n_live, n_kept;
static size_t kept_bytes;

/* A child forked while another thread held big_lock (a data-loader worker) gets a fresh
 * lock: its only thread must not wait for one that does not exist there. */
static void big_lock_reset(void)
{
    pthread_mutex_init(&big_lock, NULL);
}

static void big_lock_once(void)
{
    pthread_atfork(NULL, NULL, big_lock_reset);
}

/* big_lock, the fork handler registered before its first use (every free takes it). */
static void lock_big(void)
{
    pthread_once(&big_once, big_lock_once);
    pthread_mutex_lock(&big_lock);
}

/* A kept block of n to n + n/4 bytes (the smallest), taken out of the kept list; NULL
 * if none.  Under big_lock. */
static void *take_kept(size_t n, size_t *got)
{
    int best = -1;
    for (int i = 0; i < n_kept; i++)
        if (big_kept[i].n >= n && big_kept[i].n - n <= n / 4 &&
            (best < 0 || big_kept[i].n < big_kept[best].n))
            best = i;
    if (best < 0)
        return NULL;
    void *p = big_kept[best].p;
    *got = big_kept[best].n;
    kept_bytes -= *got;
    big_kept[best] = big_kept[--n_kept];
    return p;
}

/* A listed block of n bytes (KEEP_MIN or more): a kept one, else a fresh one, 2 MiB-aligned
 * huge-page candidate where n is at least HUGE_ALLOC. */
static void *big_alloc(size_t n)
{
    size_t got = n;
    lock_big();
    void *p = n_live < LIVE_MAX ? take_kept(n, &got) : NULL;
    if (p)
        big_live[n_live++] = (big_block){p, got};
    pthread_mutex_unlock(&big_lock);
    if (p)
        return p;
    if (n < HUGE_ALLOC) {
        p = malloc(n);
        if (!p)
            return NULL;
    } else {
        if (posix_memalign(&p, HUGE_PAGE, n) != 0)
            return NULL;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
        madvise(p, n / HUGE_PAGE * HUGE_PAGE, MADV_HUGEPAGE); /* advice: failure is harmless */
#endif
    }
    lock_big();
    if (n_live < LIVE_MAX)
        big_live[n_live++] = (big_block){p, n};
    pthread_mutex_unlock(&big_lock);
    return p;
}

/* Keep p if it is a listed block that fits in what is kept (the oldest kept blocks make
 * room); true if kept. */
static bool keep_big(void *p)
{
    void *evict[KEEP_BLOCKS];
    int n_evict = 0;
    bool kept = false;
    lock_big();
    for (int i = 0; i < n_live; i++) {
        if (big_live[i].p != p)
            continue;
        size_t n = big_live[i].n;
        big_live[i] = big_live[--n_live];
        if (n <= KEEP_BYTES) {
            while (n_kept > 0 && (n_kept == KEEP_BLOCKS || kept_bytes + n > KEEP_BYTES)) {
                evict[n_evict++] = big_kept[0].p;
                kept_bytes -= big_kept[0].n;
                n_kept--;
                memmove(big_kept, big_kept + 1, (size_t)n_kept * sizeof *big_kept);
            }
            big_kept[n_kept++] = (big_block){p, n};
            kept_bytes += n;
            kept = true;
        }
        break;
    }
    pthread_mutex_unlock(&big_lock);
    for (int i = 0; i < n_evict; i++)
        free(evict[i]);
    return kept;
}

static void *default_alloc(void *user, size_t n)
{
    (void)user;
    return n >= KEEP_MIN ? big_alloc(n) : malloc(n);
}

static void default_free(void *user, void *p)
{
    (void)user;
    if (p && !keep_big(p))
        free(p);
}

void sc_mem_free(void *p)
{
    default_free(NULL, p);
}

/* "32768K" (sysfs's cache size) or a plain byte count as bytes; 0 if it is neither. */
static int64_t parse_bytes(const char *s)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || v <= 0 || v > ((long long)1 << 40))
        return 0;
    int64_t scale = *end == 'K' ? 1 << 10 : *end == 'M' ? 1 << 20 : *end == 'G' ? 1 << 30 : 1;
    if (scale > 1)
        end++;
    while (*end && isspace((unsigned char)*end))   /* (as Python's check: \s*) */
        end++;
    if (*end || v > ((long long)1 << 40) / scale)   /* (at most 2^40 bytes in all) */
        return 0;
    return (int64_t)v * scale;
}

static int64_t cache_bytes_once;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;

static void read_cache_bytes(void)
{
    const char *e = getenv("SCORCH_CACHE_BYTES");
    int64_t n = e && *e ? parse_bytes(e) : 0;
    static const char *const files[] = {"/sys/devices/system/cpu/cpu0/cache/index3/size",
                                        "/sys/devices/system/cpu/cpu0/cache/index2/size"};
    for (size_t k = 0; k < sizeof files / sizeof files[0] && n == 0; k++) {
        FILE *f = fopen(files[k], "re");
        char buf[64];
        if (!f)
            continue;
        if (fgets(buf, sizeof buf, f))
            n = parse_bytes(buf);
        fclose(f);
    }
    cache_bytes_once = n > 0 ? n : (int64_t)32 << 20;
}

int64_t sc_cache_bytes(void)
{
    pthread_once(&cache_once, read_cache_bytes);
    return cache_bytes_once;
}

void sc_ctx_init(sc_ctx *ctx)
{
    ctx->mem.alloc = default_alloc;
    ctx->mem.free = default_free;
    ctx->mem.user = NULL;
    ctx->num_threads = 0;
    ctx->cache_bytes = sc_cache_bytes();
}

void *sc_alloc(const sc_ctx *ctx, size_t n, sc_error *err)
{
    void *p = ctx->mem.alloc(ctx->mem.user, n ? n : 1);
    if (!p)
        sc_fail(err, SC_NOMEM, "alloc", "out of memory allocating %zu bytes", n);
    return p;
}

void *sc_alloc_array(const sc_ctx *ctx, size_t count, size_t size, sc_error *err)
{
    if (size && count > SIZE_MAX / size) {
        sc_fail(err, SC_NOMEM, "alloc", "allocation of %zu x %zu bytes overflows", count, size);
        return NULL;
    }
    return sc_alloc(ctx, count * size, err);
}

void *sc_calloc(const sc_ctx *ctx, size_t count, size_t size, sc_error *err)
{
    void *p = sc_alloc_array(ctx, count, size, err);
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
