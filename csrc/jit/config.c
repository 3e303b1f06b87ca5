/*
 * config.c — the jit's settings: caller's config over environment over defaults, read
 * once.  Splits the compiler and flags into the fixed part of the compiler's argv,
 * creates the cache directory (mkdir -p, mode 0700) and refuses one that another user
 * owns or that others may write.  Directories are stored as absolute, resolved paths.
 */
#define _GNU_SOURCE
#include "jit_impl.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static char *concat(const sc_ctx *ctx, const char *a, const char *b, const char *c,
                    sc_error *err)
{
    size_t na = strlen(a), nb = strlen(b), nc = strlen(c);
    char *s = sc_alloc(ctx, na + nb + nc + 1, err);
    if (!s)
        return NULL;
    memcpy(s, a, na);
    memcpy(s + na, b, nb);
    memcpy(s + na + nb, c, nc + 1);
    return s;
}

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Count the words of s; with out, also NUL-terminate them in place and store them. */
static size_t split(char *s, char **out)
{
    size_t n = 0;
    while (*s) {
        while (is_space(*s))
            s++;
        if (!*s)
            break;
        if (out)
            out[n] = s;
        n++;
        while (*s && !is_space(*s))
            s++;
        if (*s && out)
            *s++ = '\0';
    }
    return n;
}

/* mkdir -p path with mode 0700 for every directory created. */
static sc_status make_dirs(const sc_jit *jit, const char *path, sc_error *err)
{
    char *p = concat(jit->ctx, path, "", "", err);
    if (!p)
        return err->kind;
    sc_status st = SC_OK;
    for (char *s = p + 1;; s++) {
        char c = *s;
        if (c != '/' && c != '\0')
            continue;
        *s = '\0';
        if (mkdir(p, 0700) != 0 && errno != EEXIST) {
            int e = errno;
            struct stat sb;
            if (stat(p, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
                st = sc_fail(err, SC_USER, SC_JIT_STAGE,
                             "cannot create cache directory '%s': %s (set SCORCH_CACHE_DIR)",
                             p, strerror(e));
                break;
            }
        }
        *s = c;
        if (c == '\0')
            break;
    }
    sc_free(jit->ctx, p);
    return st;
}

/* Absolute resolved copy of dir, allocated from ctx. */
static char *resolve(const sc_ctx *ctx, const char *what, const char *dir, sc_error *err)
{
    char *r = realpath(dir, NULL);
    if (!r) {
        sc_fail(err, SC_USER, SC_JIT_STAGE, "%s '%s': %s", what, dir, strerror(errno));
        return NULL;
    }
    char *s = concat(ctx, r, "", "", err);
    free(r);
    return s;
}

static sc_status check_cache_dir(const char *dir, sc_error *err)
{
    struct stat st;
    if (stat(dir, &st) != 0)
        return sc_fail(err, SC_USER, SC_JIT_STAGE, "cache directory '%s': %s", dir,
                       strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return sc_fail(err, SC_USER, SC_JIT_STAGE, "cache directory '%s' is not a directory",
                       dir);
    if (st.st_uid != geteuid())
        return sc_fail(err, SC_USER, SC_JIT_STAGE,
                       "cache directory '%s' is owned by uid %ld, not by this user; "
                       "set SCORCH_CACHE_DIR to a directory of your own",
                       dir, (long)st.st_uid);
    if (st.st_mode & (S_IWGRP | S_IWOTH))
        return sc_fail(err, SC_USER, SC_JIT_STAGE,
                       "cache directory '%s' is writable by others; chmod 700 it or set "
                       "SCORCH_CACHE_DIR",
                       dir);
    return SC_OK;
}

sc_status sc_jit_remake_cache_dir(const sc_jit *jit, sc_error *err)
{
    sc_status st = make_dirs(jit, jit->cache_dir, err);
    return st == SC_OK ? check_cache_dir(jit->cache_dir, err) : st;
}

static sc_status pick_cache_dir(sc_jit *jit, const sc_jit_config *cfg, sc_error *err)
{
    const char *dir = cfg && cfg->cache_dir ? cfg->cache_dir : env("SCORCH_CACHE_DIR");
    char *made = NULL;
    if (!dir || !*dir) {
        const char *xdg = env("XDG_CACHE_HOME"), *home = env("HOME");
        if (xdg && xdg[0] == '/')
            made = concat(jit->ctx, xdg, "/scorch", "", err);
        else if (home)
            made = concat(jit->ctx, home, "/.cache/scorch", "", err);
        else
            return sc_fail(err, SC_USER, SC_JIT_STAGE,
                           "no cache directory: set SCORCH_CACHE_DIR (HOME is not set)");
        if (!made)
            return err->kind;
        dir = made;
    }
    sc_status st = make_dirs(jit, dir, err);
    if (st == SC_OK) {
        jit->cache_dir = resolve(jit->ctx, "cache directory", dir, err);
        st = jit->cache_dir ? check_cache_dir(jit->cache_dir, err) : err->kind;
    }
    sc_free(jit->ctx, made);
    return st;
}

/* argv = cc words, cflags words, SC_JIT_BASE_FLAGS words, -I<include_dir>. */
static sc_status build_argv(sc_jit *jit, sc_error *err)
{
    char *joined = concat(jit->ctx, jit->cc, " ", jit->cflags, err);
    if (!joined)
        return err->kind;
    jit->words = concat(jit->ctx, joined, " ", SC_JIT_BASE_FLAGS, err);
    sc_free(jit->ctx, joined);
    if (!jit->words)
        return err->kind;
    jit->n_cc = split(jit->cc, NULL);
    if (jit->n_cc == 0)
        return sc_fail(err, SC_USER, SC_JIT_STAGE,
                       "empty C compiler; set SCORCH_CC to a C compiler (e.g. gcc)");
    size_t n = split(jit->words, NULL);
    jit->include_flag = concat(jit->ctx, "-I", jit->include_dir, "", err);
    jit->argv = sc_calloc(jit->ctx, n + 1, sizeof *jit->argv, err);
    if (!jit->include_flag || !jit->argv)
        return err->kind;
    split(jit->words, jit->argv);
    jit->argv[n] = jit->include_flag;
    jit->n_fixed = n + 1;
    return SC_OK;
}

sc_status sc_jit_configure(sc_jit *jit, const sc_jit_config *cfg, sc_error *err)
{
    const sc_ctx *ctx = jit->ctx;
    if (!cfg || !cfg->include_dir || !*cfg->include_dir)
        return sc_fail(err, SC_USER, SC_JIT_STAGE,
                       "no include directory: the jit needs the directory of scorch_rt.h");
    const char *cc = cfg->cc ? cfg->cc : env("SCORCH_CC");
    const char *cflags = cfg->cflags ? cfg->cflags : env("SCORCH_CFLAGS");
    jit->cc = concat(ctx, cc ? cc : "cc", "", "", err);
    jit->cflags = concat(ctx, cflags ? cflags : SC_JIT_DEFAULT_CFLAGS, "", "", err);
    if (!jit->cc || !jit->cflags)
        return err->kind;
    jit->include_dir = resolve(ctx, "include directory", cfg->include_dir, err);
    if (!jit->include_dir)
        return err->kind;
    sc_status st = pick_cache_dir(jit, cfg, err);
    if (st == SC_USER) {   /* (kept for the first kernel that needs the disk) */
        sc_free(ctx, jit->cache_dir);
        jit->cache_dir = NULL;
        jit->cache_err = concat(ctx, err->msg, "", "", err);
        if (!jit->cache_err)
            return err->kind;
        sc_error_clear(err);
        st = SC_OK;
    }
    return st != SC_OK ? st : build_argv(jit, err);
}

char *sc_jit_cache_path(const sc_jit *jit, const char *name, const char *suffix,
                        sc_error *err)
{
    char *dir = concat(jit->ctx, jit->cache_dir, "/", name, err);
    if (!dir)
        return NULL;
    char *path = concat(jit->ctx, dir, suffix, "", err);
    sc_free(jit->ctx, dir);
    return path;
}
