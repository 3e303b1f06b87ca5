/*
 * host.c — the part of a kernel key fixed for the life of a jit: the compiler words and
 * flags (not the include path: identical headers anywhere share kernels), SC_RT_VERSION
 * and the bytes of scorch_rt.h as the compiler will see them, and the host ISA (machine
 * name, the first "flags" line of /proc/cpuinfo, a few __builtin_cpu_supports bits), so a
 * cache dir shared between machines never hands out code built for another CPU.
 */
#define _GNU_SOURCE
#include "jit_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

static sc_status hash_header(const sc_jit *jit, sc_jit_hasher *h, sc_error *err)
{
    char *path = NULL;
    size_t n = strlen(jit->include_dir) + sizeof "/scorch_rt.h";
    path = sc_alloc(jit->ctx, n, err);
    if (!path)
        return err->kind;
    snprintf(path, n, "%s/scorch_rt.h", jit->include_dir);
    FILE *f = fopen(path, "rbe");
    if (!f) {
        sc_status st = sc_fail(err, SC_USER, SC_JIT_STAGE,
                               "cannot read '%s': %s (the jit's include directory must "
                               "hold scorch_rt.h)",
                               path, strerror(errno));
        sc_free(jit->ctx, path);
        return st;
    }
    sc_free(jit->ctx, path);
    int64_t version = SC_RT_VERSION;
    sc_jit_hash_field(h, &version, sizeof version);
    unsigned char buf[4096];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0)
        sc_jit_hash_update(h, buf, got);
    int bad = ferror(f);
    fclose(f);
    if (bad)
        return sc_fail(err, SC_USER, SC_JIT_STAGE, "error reading scorch_rt.h in '%s'",
                       jit->include_dir);
    return SC_OK;
}

static void hash_isa(sc_jit_hasher *h)
{
    struct utsname u;
    if (uname(&u) == 0)
        sc_jit_hash_field(h, u.machine, strlen(u.machine));
    uint64_t bits = 0;
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    __builtin_cpu_init();
    bits |= (uint64_t)(__builtin_cpu_supports("sse4.2") != 0) << 0;
    bits |= (uint64_t)(__builtin_cpu_supports("avx") != 0) << 1;
    bits |= (uint64_t)(__builtin_cpu_supports("avx2") != 0) << 2;
    bits |= (uint64_t)(__builtin_cpu_supports("fma") != 0) << 3;
    bits |= (uint64_t)(__builtin_cpu_supports("bmi2") != 0) << 4;
    bits |= (uint64_t)(__builtin_cpu_supports("avx512f") != 0) << 5;
#endif
    sc_jit_hash_field(h, &bits, sizeof bits);
    FILE *f = fopen("/proc/cpuinfo", "re");
    if (!f)
        return;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) >= 0) {
        if (strncmp(line, "flags", 5) == 0 || strncmp(line, "Features", 8) == 0) {
            sc_jit_hash_field(h, line, (size_t)n);
            break;
        }
    }
    free(line); /* getline's buffer comes from malloc, not from the ctx */
    fclose(f);
}

sc_jit_key sc_jit_host_isa(void)
{
    sc_jit_hasher h;
    sc_jit_hash_init(&h, 0x15a);
    hash_isa(&h);
    return sc_jit_hash_final(&h);
}

sc_status sc_jit_fingerprint(sc_jit *jit, sc_error *err)
{
    static const char domain[] = "scorch jit key v1";
    sc_jit_hasher h;
    sc_jit_hash_init(&h, 0);
    sc_jit_hash_field(&h, domain, sizeof domain - 1);
    uint64_t n_words = jit->n_fixed - 1; /* the -I flag is left out */
    sc_jit_hash_field(&h, &n_words, sizeof n_words);
    for (size_t i = 0; i + 1 < jit->n_fixed; i++)
        sc_jit_hash_field(&h, jit->argv[i], strlen(jit->argv[i]));
    sc_jit_hash_field(&h, SC_JIT_LINK_FLAGS, strlen(SC_JIT_LINK_FLAGS));
    sc_status st = hash_header(jit, &h, err);
    if (st != SC_OK)
        return st;
    hash_isa(&h);
    jit->config_key = sc_jit_hash_final(&h);
    return SC_OK;
}
