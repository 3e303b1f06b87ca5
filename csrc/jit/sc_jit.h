/*
 * sc_jit.h — the jit stage: turns generated C source into a callable function pointer,
 * through a process-wide map, a content-addressed on-disk cache and the system C compiler.
 *
 * In:  kernel C source text (it includes "scorch_rt.h") and the name of its entry symbol.
 * Out: a function pointer into a shared object that stays loaded until sc_jit_free.
 *
 * Key = 128-bit hash of (source, symbol, compiler words + `cc --version` output, flags,
 * SC_RT_VERSION + the bytes of scorch_rt.h, host ISA).  Lookup: in-process map (under a
 * mutex, no syscall, no allocation) → <cache_dir>/<32 hex>.so (loaded only if it is a
 * regular file owned by the effective user and not group/world-writable) → compile with
 * posix_spawnp (no shell), outside the mutex, into a temporary file that is rename()d into
 * place.  Racing compiles of one key are harmless; the map keeps the first entry.
 * All state lives in the sc_jit object; it is safe to share between threads.
 * A warm call costs one hash of the source (about 10 bytes/ns) plus the mutex.
 * The disk cache is never evicted; deleting the directory while no process compiles
 * into it is safe.  A killed compile may leave <hex>-XXXXXX.* temporaries behind.
 */
#ifndef SC_JIT_H
#define SC_JIT_H

#include "../base/sc_base.h"

/* Flags always passed after the optimisation flags (they cannot be overridden), and
 * the library (one word) linked after the source: kernels may call libm. */
#define SC_JIT_BASE_FLAGS "-fPIC -shared"
#define SC_JIT_LINK_FLAGS "-lm"
/* Optimisation flags used when neither the config nor SCORCH_CFLAGS gives any. */
#define SC_JIT_DEFAULT_CFLAGS "-O3 -march=native -fopenmp"

/*
 * Configuration.  A NULL field takes its default, read from the environment once in
 * sc_jit_new (an empty environment variable counts as unset):
 *   cc          SCORCH_CC, else "cc".  Split on whitespace: the first word is the program
 *               (searched in PATH), the others are leading arguments ("ccache gcc").
 *   cflags      SCORCH_CFLAGS, else SC_JIT_DEFAULT_CFLAGS.  Split on whitespace, no
 *               quoting.  SC_JIT_BASE_FLAGS and -I<include_dir> are always added.
 *               A caller's "" means no optimisation flags.
 *   cache_dir   SCORCH_CACHE_DIR, else $XDG_CACHE_HOME/scorch, else $HOME/.cache/scorch.
 *               Created (with missing parents) mode 0700; must be a directory owned by
 *               the effective user and not group/world-writable.
 *   include_dir required: the directory holding scorch_rt.h (passed as -I).
 * Strings are copied; relative directories are resolved against the cwd at sc_jit_new.
 */
typedef struct sc_jit_config {
    const char *cc;
    const char *cflags;
    const char *cache_dir;
    const char *include_dir;
} sc_jit_config;

/* Counters since sc_jit_new.  Each successful sc_jit_get counts once in exactly one of
 * mem_hits, disk_hits, compiles; disk_refused counts cache files found but not used
 * (unsafe owner or mode, or dlopen failed on them), which were then rebuilt. */
typedef struct sc_jit_counts {
    uint64_t mem_hits;
    uint64_t disk_hits;
    uint64_t compiles;
    uint64_t disk_refused;
} sc_jit_counts;

typedef struct sc_jit sc_jit;

/* What sc_jit_get hands out: cast it to the kernel's real type before calling (a cast
 * between function pointer types is ISO C, unlike one from void *). */
typedef void (*sc_jit_fn)(void);

/*
 * Create a jit.  ctx is borrowed and must outlive the jit; cfg may be NULL (all
 * defaults; include_dir is then missing and the call fails).  Creates the cache
 * directory and reads scorch_rt.h and the host ISA; does not run the compiler.
 * Returns NULL with err filled: USER (bad directory, missing scorch_rt.h), NOMEM.
 */
sc_jit *sc_jit_new(const sc_ctx *ctx, const sc_jit_config *cfg, sc_error *err);

/*
 * Free the jit and dlclose every library it loaded: function pointers obtained from it
 * must not be called afterwards.  Accepts NULL.  Not concurrent with sc_jit_get.
 */
void sc_jit_free(sc_jit *jit);

/*
 * *fn = address of `symbol` in the shared object compiled from source[0..len).
 * Thread-safe.  The pointer is valid until sc_jit_free.  The first call of a jit runs
 * `<cc> --version` once to identify the compiler.
 * Errors: COMPILE (compiler missing: "set SCORCH_CC"; compilation failed: the start of
 * the compiler's output and the path where the failing source is kept, <key>.c in the
 * cache dir), RUNTIME (dlopen/dlsym, with dlerror's text), USER (bad arguments),
 * NOMEM, INTERNAL (file-system failures in the cache dir).  *fn is NULL on error.
 */
sc_status sc_jit_get(sc_jit *jit, const char *source, size_t len, const char *symbol,
                     sc_jit_fn *fn, sc_error *err);

/* The same lookup without the compiler: *fn is the function where the process map or the
 * disk cache holds it, else NULL (also where no compiler can be run to identify the disk
 * cache's entries), with SC_OK.  Thread-safe. */
sc_status sc_jit_cached(sc_jit *jit, const char *source, size_t len, const char *symbol,
                        sc_jit_fn *fn, sc_error *err);

/* SC_OK where sc_jit_get could compile a kernel now: the cache directory is usable and
 * the compiler runs (identified once, like sc_jit_get does); else the error sc_jit_get
 * would give for a kernel it has to compile.  Thread-safe. */
sc_status sc_jit_ready(sc_jit *jit, sc_error *err);

/* Copy the counters into *out.  Thread-safe. */
void sc_jit_stats(sc_jit *jit, sc_jit_counts *out);

/* Resolved settings (owned by the jit, valid until sc_jit_free): "cc", "cflags",
 * "cache_dir", "include_dir"; NULL for another name. */
const char *sc_jit_setting(const sc_jit *jit, const char *name);

/*
 * The 128-bit content hash behind the keys, usable for callers' own keys.  Not
 * cryptographic; the same on every run and build for one byte order.  Streaming: the
 * result depends only on the concatenated bytes, not on how updates split them.
 */
typedef struct sc_jit_key {
    uint64_t w[2];
} sc_jit_key;

typedef struct sc_jit_hasher {
    uint64_t v[4];
    uint64_t len;
    unsigned char buf[32];
    size_t nbuf;
} sc_jit_hasher;

void sc_jit_hash_init(sc_jit_hasher *h, uint64_t seed);
void sc_jit_hash_update(sc_jit_hasher *h, const void *data, size_t n);
/* Update with the 8-byte length of data, then data: fields hashed this way can't be
 * confused by moving bytes across a field boundary. */
void sc_jit_hash_field(sc_jit_hasher *h, const void *data, size_t n);
sc_jit_key sc_jit_hash_final(const sc_jit_hasher *h);
/* hex receives 32 lowercase hex digits and a NUL. */
void sc_jit_key_hex(sc_jit_key k, char hex[33]);

/* A hash of this host's ISA (machine name, the CPU's flags line, a few
 * __builtin_cpu_supports bits): code built with -march=native on one host runs on
 * another with the same value.  Part of every jit's key. */
sc_jit_key sc_jit_host_isa(void);

/* A small note kept in the cache directory beside the kernels (the gather probe's
 * outcome): sc_jit_note_read copies at most cap - 1 bytes of <cache_dir>/<name> into buf,
 * NUL-ended, and returns how many, or -1 where there is none or it may not be trusted
 * (the checks of a kernel file: a regular file of this user's, not group/world-writable);
 * sc_jit_note_write publishes text under name at once (a temporary file renamed over it)
 * and returns false where it could not (a read-only cache: the caller goes on without). */
int64_t sc_jit_note_read(sc_jit *jit, const char *name, char *buf, size_t cap);
bool sc_jit_note_write(sc_jit *jit, const char *name, const char *text);

#endif /* SC_JIT_H */
