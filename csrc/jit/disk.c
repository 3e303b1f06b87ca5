/*
 * disk.c — the on-disk side of the cache: whether <cache_dir>/<hex>.so may be loaded
 * (a regular file, not a symlink, owned by the effective user, not group/world-writable;
 * the directory itself was checked to be the user's and 0700-like in sc_jit_new, so
 * nobody else can swap the file between this check and dlopen), and loading it.
 */
#define _GNU_SOURCE
#include "jit_impl.h"

#include <dlfcn.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(sizeof(sc_jit_fn) == sizeof(void *), "dlsym results must fit a sc_jit_fn");

int sc_jit_disk_probe(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return 0;
    if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)))
        return -1;
    return 1;
}

sc_status sc_jit_disk_open(const char *path, void **lib, sc_error *err)
{
    *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!*lib) {
        const char *e = dlerror();
        return sc_fail(err, SC_RUNTIME, SC_JIT_STAGE, "cannot load kernel: %s", e ? e : path);
    }
    return SC_OK;
}

sc_status sc_jit_disk_symbol(void *lib, const char *path, const char *symbol, sc_jit_fn *fn,
                             sc_error *err)
{
    dlerror();
    void *f = dlsym(lib, symbol);
    const char *e = dlerror();
    if (e || !f) {
        sc_status st = sc_fail(err, SC_RUNTIME, SC_JIT_STAGE,
                               "symbol '%s' not found in kernel %s: %s", symbol, path,
                               e ? e : "it resolves to NULL");
        dlclose(lib);
        return st;
    }
    memcpy(fn, &f, sizeof *fn); /* POSIX: dlsym's void * holds a function address */
    return SC_OK;
}
