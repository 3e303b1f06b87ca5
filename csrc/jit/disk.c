/*
 * disk.c — the on-disk side of the cache: whether <cache_dir>/<hex>.so may be loaded
 * (a regular file, not a symlink, owned by the effective user, not group/world-writable;
 * the directory itself was checked to be the user's and 0700-like in sc_jit_new, so
 * nobody else can swap the file between this check and dlopen), and loading it; small
 * notes kept beside the kernels under the same checks.
 */
#define _GNU_SOURCE
#include "jit_impl.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
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

/* <cache_dir>/<name><suffix> into path (no allocation: a failed one must not turn the
 * optional note into an error); false where it does not fit. */
static bool note_path(const sc_jit *jit, const char *name, const char *suffix, char *path,
                      size_t cap)
{
    if (!jit->cache_dir)   /* (no usable cache directory: no notes) */
        return false;
    int n = snprintf(path, cap, "%s/%s%s", jit->cache_dir, name, suffix);
    return n > 0 && (size_t)n < cap;
}

int64_t sc_jit_note_read(sc_jit *jit, const char *name, char *buf, size_t cap)
{
    char path[4096];
    if (!jit || !name || !buf || cap == 0)
        return -1;
    int64_t n = -1;
    int fd = note_path(jit, name, "", path, sizeof path) && sc_jit_disk_probe(path) > 0
                 ? open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
                 : -1;
    if (fd >= 0) {
        ssize_t r = read(fd, buf, cap - 1);
        n = r < 0 ? -1 : r;
        close(fd);
    }
    buf[n < 0 ? 0 : n] = '\0';
    return n;
}

bool sc_jit_note_write(sc_jit *jit, const char *name, const char *text)
{
    char tmp[4096], path[4096], suffix[48];
    if (!jit || !name || !text)
        return false;
    snprintf(suffix, sizeof suffix, ".tmp.%ld", (long)getpid());
    if (!note_path(jit, name, suffix, tmp, sizeof tmp) ||
        !note_path(jit, name, "", path, sizeof path))
        return false;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return false;
    size_t n = strlen(text);
    bool ok = write(fd, text, n) == (ssize_t)n;
    ok = close(fd) == 0 && ok;
    ok = ok && rename(tmp, path) == 0;
    if (!ok)
        unlink(tmp);
    return ok;
}
