/*
 * jit_impl.h — what the files of csrc/jit share and nobody else sees: the sc_jit object
 * and one entry point per file (config.c, host.c, spawn.c, disk.c, map.c).
 *
 * Invariants: everything before `lock` is written once in sc_jit_new and read-only
 * afterwards (safe to read without the lock); everything after it is guarded by it.
 * Memory comes from jit->ctx; paths passed around are absolute.
 */
#ifndef SC_JIT_IMPL_H
#define SC_JIT_IMPL_H

#include "sc_jit.h"

#include <pthread.h>

#define SC_JIT_STAGE "jit"

typedef struct sc_jit_entry {
    sc_jit_key key;
    sc_jit_fn fn; /* NULL: empty slot */
} sc_jit_entry;

struct sc_jit {
    const sc_ctx *ctx;
    char *cc, *cflags, *cache_dir, *include_dir; /* resolved settings, owned */
    char *cache_err; /* why there is no cache_dir (NULL then): reported by the first
                      * kernel that needs the disk, not by the jit's creation, so that
                      * the built-in kernels run without one */
    char *words;                                  /* storage behind argv's words */
    char *include_flag;                           /* "-I<include_dir>" */
    char **argv;   /* cc words, cflags words, base flags, include_flag (n_fixed) */
    size_t n_cc;   /* argv[0..n_cc) is the compiler */
    size_t n_fixed;
    sc_jit_key config_key; /* flags, runtime header, ISA: everything but `cc --version` */

    pthread_mutex_t lock;
    int have_ident;
    sc_jit_key ident; /* hash of `cc --version` output and exit status */
    sc_jit_entry *map;
    size_t map_cap, map_len; /* cap is 0 or a power of two; len <= cap / 2 */
    void **libs;             /* every dlopen handle, closed in sc_jit_free */
    size_t n_libs, cap_libs;
    sc_jit_counts counts;
};

/* config.c: resolve cfg + environment into jit's settings and argv, create the cache
 * directory and check its owner and mode.  USER / NOMEM errors. */
sc_status sc_jit_configure(sc_jit *jit, const sc_jit_config *cfg, sc_error *err);
/* config.c: the cache directory made again (mkdir -p, 0700) and checked as at
 * configuration, where it was removed while the process ran.  USER / NOMEM errors. */
sc_status sc_jit_remake_cache_dir(const sc_jit *jit, sc_error *err);
/* config.c: "<cache_dir>/<name><suffix>" allocated from jit->ctx (caller frees). */
char *sc_jit_cache_path(const sc_jit *jit, const char *name, const char *suffix,
                        sc_error *err);

/* host.c: jit->config_key from the compiler words and flags, SC_RT_VERSION and the bytes
 * of <include_dir>/scorch_rt.h, and the host ISA.  USER error if the header is missing. */
sc_status sc_jit_fingerprint(sc_jit *jit, sc_error *err);

/* spawn.c: hash of the output and exit status of `<cc words> --version`.  COMPILE error
 * when the compiler cannot be started. */
sc_status sc_jit_identify(const sc_jit *jit, sc_jit_key *out, sc_error *err);
/* spawn.c: compile source into <cache_dir>/<hex>.so (written under a temporary name,
 * then renamed; the directory made again if it was removed).  On compiler failure the
 * source is kept as <cache_dir>/<hex>.c and the compiler's output as <hex>.log. */
sc_status sc_jit_compile(const sc_jit *jit, const char *hex, const char *source,
                         size_t len, sc_error *err);

/* disk.c: 1 if path is a regular file owned by the effective user and not group- or
 * world-writable, 0 if it does not exist, -1 if it exists but must not be loaded. */
int sc_jit_disk_probe(const char *path);
/* disk.c: dlopen(path, RTLD_NOW | RTLD_LOCAL); the caller owns *lib.  RUNTIME error,
 * without dlopen, where path is not an ELF shared object of this process's kind whose
 * program headers and loadable segments lie inside the file (one cut short would raise
 * SIGBUS inside dlopen); else RUNTIME with dlerror's text. */
sc_status sc_jit_disk_open(const char *path, void **lib, sc_error *err);
/* disk.c: *fn = symbol's address in lib; on failure lib is dlclosed and the RUNTIME
 * error carries dlerror's text. */
sc_status sc_jit_disk_symbol(void *lib, const char *path, const char *symbol, sc_jit_fn *fn,
                             sc_error *err);

/* map.c, all with jit->lock held.  find: the entry's function or NULL; no allocation.
 * insert: keep the existing function if key is present, else add fn; *winner is the
 * function now mapped.  keep_lib: remember a handle for sc_jit_free. */
sc_jit_fn sc_jit_map_find(const sc_jit *jit, sc_jit_key key);
sc_status sc_jit_map_insert(sc_jit *jit, sc_jit_key key, sc_jit_fn fn, sc_jit_fn *winner,
                            sc_error *err);
sc_status sc_jit_keep_lib(sc_jit *jit, void *lib, sc_error *err);
/* map.c: release the map and dlclose every kept handle (no lock; sc_jit_free only). */
void sc_jit_map_release(sc_jit *jit);

#endif /* SC_JIT_IMPL_H */
