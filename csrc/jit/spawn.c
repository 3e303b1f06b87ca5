/*
 * spawn.c — running the C compiler: posix_spawnp with an argv array (never a shell),
 * stdin from /dev/null, stdout and stderr into a pipe (`cc --version`) or a temporary
 * file (compiles), then waitpid (where SIGCHLD is ignored and the status lost, a compile
 * is judged by its output).  A compile writes <hex>-XXXXXX.c, builds <hex>-XXXXXX.so
 * and publishes it with rename() as <hex>.so; on failure the source is kept as <hex>.c
 * and the compiler's output as <hex>.log.
 * Every descriptor opened here is close-on-exec, so concurrent spawns from other
 * threads do not inherit it.
 */
#define _GNU_SOURCE
#include "jit_impl.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* How much of the compiler's output goes into an error message. */
#define OUTPUT_EXCERPT 400

static sc_status spawn_failed(const char *cc, int rc, sc_error *err)
{
    if (rc == ENOENT)
        return sc_fail(err, SC_COMPILE, SC_JIT_STAGE,
                       "C compiler '%s' not found; set SCORCH_CC to a C compiler (e.g. gcc)",
                       cc);
    return sc_fail(err, SC_COMPILE, SC_JIT_STAGE,
                   "cannot run C compiler '%s': %s; set SCORCH_CC to a C compiler (e.g. gcc)",
                   cc, strerror(rc));
}

/* Start argv[0] (searched in PATH) with stdout and stderr on out_fd.  0 or an errno. */
static int start(char *const argv[], int out_fd, pid_t *pid)
{
    posix_spawn_file_actions_t fa;
    int rc = posix_spawn_file_actions_init(&fa);
    if (rc)
        return rc;
    rc = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (!rc)
        rc = posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
    if (!rc)
        rc = posix_spawn_file_actions_adddup2(&fa, out_fd, 2);
    if (!rc)
        rc = posix_spawnp(pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    return rc;
}

/* Wait for pid to end: 0 with its wait status, or an errno.  ECHILD (with *status 0, as
 * CPython's subprocess reads it) means the child has ended but its status is lost: with
 * SIGCHLD ignored (SIG_IGN or SA_NOCLDWAIT, as daemons set it) the kernel reaps it itself
 * and waitpid fails once it has ended, as it does where a SIGCHLD handler reaped it
 * first.  The caller then judges the run by what it left behind. */
static int finish(pid_t pid, int *status)
{
    while (waitpid(pid, status, 0) < 0) {
        if (errno == ECHILD)
            *status = 0;
        if (errno != EINTR)
            return errno;
    }
    return 0;
}

/* Whether the compiler left a nonempty regular file at path (where its exit status is
 * lost; sc_jit_disk_open checks the file before it is loaded). */
static bool built(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0;
}

sc_status sc_jit_identify(const sc_jit *jit, sc_jit_key *out, sc_error *err)
{
    char **argv = sc_calloc(jit->ctx, jit->n_cc + 2, sizeof *argv, err);
    if (!argv)
        return err->kind;
    memcpy(argv, jit->argv, jit->n_cc * sizeof *argv);
    argv[jit->n_cc] = "--version";
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        sc_free(jit->ctx, argv);
        return sc_fail(err, SC_INTERNAL, SC_JIT_STAGE, "pipe: %s", strerror(errno));
    }
    pid_t pid;
    int rc = start(argv, fds[1], &pid);
    sc_free(jit->ctx, argv);
    close(fds[1]);
    if (rc) {
        close(fds[0]);
        return spawn_failed(jit->argv[0], rc, err);
    }
    sc_jit_hasher h;
    sc_jit_hash_init(&h, 1);
    char buf[1024];
    for (;;) {
        ssize_t got = read(fds[0], buf, sizeof buf);
        if (got > 0)
            sc_jit_hash_update(&h, buf, (size_t)got);
        else if (got == 0 || errno != EINTR)
            break;
    }
    close(fds[0]);
    int status = 0;
    rc = finish(pid, &status);
    if (rc && rc != ECHILD) /* (status lost: hashed as 0, a working compiler's) */
        return sc_fail(err, SC_INTERNAL, SC_JIT_STAGE, "waitpid: %s", strerror(rc));
    int64_t s = status;
    sc_jit_hash_field(&h, &s, sizeof s);
    *out = sc_jit_hash_final(&h);
    return SC_OK;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Paths of one compile: the .c is created by mkostemps, the others share its name. */
typedef struct paths {
    char *src, *so, *log, *final_so, *kept_c, *kept_log;
} paths;

static void paths_free(const sc_jit *jit, paths *p)
{
    sc_free(jit->ctx, p->src);
    sc_free(jit->ctx, p->so);
    sc_free(jit->ctx, p->log);
    sc_free(jit->ctx, p->final_so);
    sc_free(jit->ctx, p->kept_c);
    sc_free(jit->ctx, p->kept_log);
}

static sc_status paths_make(const sc_jit *jit, const char *hex, paths *p, sc_error *err)
{
    char stem[64];
    snprintf(stem, sizeof stem, "%s-XXXXXX", hex);
    p->src = sc_jit_cache_path(jit, stem, ".c", err);
    p->so = sc_jit_cache_path(jit, stem, ".so", err);
    p->log = sc_jit_cache_path(jit, stem, ".log", err);
    p->final_so = sc_jit_cache_path(jit, hex, ".so", err);
    p->kept_c = sc_jit_cache_path(jit, hex, ".c", err);
    p->kept_log = sc_jit_cache_path(jit, hex, ".log", err);
    if (!p->src || !p->so || !p->log || !p->final_so || !p->kept_c || !p->kept_log)
        return err->kind;
    return SC_OK;
}

/* Write source to a fresh p->src and give p->so and p->log the same random part (the
 * cache directory made again where it was removed while the process ran). */
static sc_status write_source(const sc_jit *jit, const paths *p, const char *source,
                              size_t len, sc_error *err)
{
    size_t stem = strlen(p->src) - 2;
    int fd = mkostemps(p->src, 2, O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
        sc_status st = sc_jit_remake_cache_dir(jit, err);
        if (st != SC_OK)
            return st;
        memcpy(p->src + stem - 6, "XXXXXX", 6);   /* (the template again) */
        fd = mkostemps(p->src, 2, O_CLOEXEC);
    }
    if (fd < 0)
        return sc_fail(err, SC_USER, SC_JIT_STAGE,
                       "cannot create '%s' in the kernel cache: %s (set SCORCH_CACHE_DIR to "
                       "a writable directory)", p->src, strerror(errno));
    memcpy(p->so, p->src, stem);
    memcpy(p->log, p->src, stem);
    int rc = write_all(fd, source, len);
    if (close(fd) != 0 && !rc)
        rc = errno;
    if (rc) {
        unlink(p->src);
        return sc_fail(err, SC_INTERNAL, SC_JIT_STAGE, "cannot write '%s': %s", p->src,
                       strerror(rc));
    }
    return SC_OK;
}

/* Copy one byte of output, or the kept source's file name for the temporary source's
 * path, or nothing for "<cache_dir>/"; returns how many input bytes were consumed. */
static size_t translate(const sc_jit *jit, const paths *p, const char *in, size_t n,
                        char *out, size_t *o, size_t cap)
{
    size_t sl = strlen(p->src), dl = strlen(jit->cache_dir);
    if (n >= sl && memcmp(in, p->src, sl) == 0) {
        for (const char *k = strrchr(p->kept_c, '/') + 1; *k && *o < cap; k++)
            out[(*o)++] = *k;
        return sl;
    }
    if (n > dl && memcmp(in, jit->cache_dir, dl) == 0 && in[dl] == '/')
        return dl + 1;
    out[(*o)++] = *in ? *in : ' ';
    return 1;
}

/* Whether a line of compiler output only dresses a diagnostic: a warning or a note (the
 * -Wpsabi notes of flags without -march=native come by the dozen), the source line and
 * caret under one ("  12 | x = y;", "     |     ^"), gcc's "In function" and "At top
 * level" context. */
static bool dressing(const char *line, size_t n)
{
    if (memmem(line, n, ": warning:", 10) || memmem(line, n, ": note:", 7) ||
        memmem(line, n, ": In function", 13) || memmem(line, n, ": At top level", 14))
        return true;
    size_t k = 0;
    while (k < n && (line[k] == ' ' || (line[k] >= '0' && line[k] <= '9')))
        k++;
    return k < n && line[k] == '|';
}

/* The compiler's output for an error message, written into out (cap bytes): where it
 * reports an error, its lines less the warnings, notes and their source excerpts (which
 * can fill the start of the output and hide a linker's "cannot find -lx"), else its
 * start; paths in the cache dir lose the directory, the temporary source reads as the
 * kept file, "..." marks a cut.  The whole output is read (up to 1 MiB). */
static void excerpt(const sc_jit *jit, const paths *p, int fd, char *out, size_t cap)
{
    struct stat sb;
    size_t total = fstat(fd, &sb) == 0 && sb.st_size > 0 ? (size_t)sb.st_size : 0;
    size_t want = total > (1u << 20) ? 1u << 20 : total;
    sc_error ignored;
    char small[4096], *raw = want > sizeof small ? sc_alloc(jit->ctx, want, &ignored) : NULL;
    size_t size = raw ? want : sizeof small;
    if (!raw)
        raw = small;
    ssize_t got = pread(fd, raw, size, 0);
    size_t n = got > 0 ? (size_t)got : 0, o = 0, room = cap - 4, i = 0;
    const bool errors = memmem(raw, n, "error", 5) != NULL;
    bool cut = total > n;
    while (i < n) {
        const char *nl = memchr(raw + i, '\n', n - i);
        size_t end = nl ? (size_t)(nl - raw) + 1 : n;
        bool take = errors ? !dressing(raw + i, end - i)
                           : !memmem(raw + i, end - i, ": In function", 13);
        if (take && o >= room)
            cut = true;
        else if (take)
            for (size_t j = i; j < end && o < room;)
                j += translate(jit, p, raw + j, end - j, out, &o, room);
        i = end;
    }
    if (raw != small)
        sc_free(jit->ctx, raw);
    while (o > 0 && (out[o - 1] == '\n' || out[o - 1] == ' '))
        o--;
    if (cut || o >= room) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o] = '\0';
}

static sc_status run_compiler(const sc_jit *jit, const paths *p, int log_fd, sc_error *err)
{
    size_t n = jit->n_fixed;
    char **argv = sc_calloc(jit->ctx, n + 5, sizeof *argv, err);
    if (!argv)
        return err->kind;
    memcpy(argv, jit->argv, n * sizeof *argv);
    argv[n] = "-o";
    argv[n + 1] = p->so;
    argv[n + 2] = p->src;
    argv[n + 3] = SC_JIT_LINK_FLAGS;
    pid_t pid;
    int rc = start(argv, log_fd, &pid);
    sc_free(jit->ctx, argv);
    if (rc)
        return spawn_failed(jit->argv[0], rc, err);
    int status = 0;
    rc = finish(pid, &status);
    if (rc && rc != ECHILD)
        return sc_fail(err, SC_INTERNAL, SC_JIT_STAGE, "waitpid: %s", strerror(rc));
    const bool lost = rc == ECHILD;
    if (lost ? built(p->so) : WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return SC_OK;
    char out[OUTPUT_EXCERPT + 1];
    excerpt(jit, p, log_fd, out, sizeof out);
    const char *kept = p->kept_c, *log = p->kept_log;
    if (rename(p->src, p->kept_c) != 0)
        kept = "(nowhere: rename failed)";
    if (rename(p->log, p->kept_log) != 0)
        log = "(nowhere: rename failed)";
    char how[96];
    if (lost)
        snprintf(how, sizeof how, "no library written; exit status lost, SIGCHLD ignored?");
    else if (WIFEXITED(status))
        snprintf(how, sizeof how, "exit status %d", WEXITSTATUS(status));
    else
        snprintf(how, sizeof how, "signal %d", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    return sc_fail(err, SC_COMPILE, SC_JIT_STAGE,
                   "C compiler '%s' failed (%s); kernel source kept at %s, the compiler's "
                   "output at %s; output:\n%s", jit->argv[0], how, kept, log, out);
}

/* The sanitizers whose runtime a kernel built with them needs loaded first, and a symbol
 * of that runtime. */
static const char *const runtimes[][3] = {
    {"address", "__asan_init", "libasan.so"}, {"thread", "__tsan_init", "libtsan.so"},
    {"leak", "__lsan_init", "liblsan.so"}, {"memory", "__msan_init", NULL},
    {"hwaddress", "__hwasan_init", "libhwasan.so"},
};
#define N_RUNTIMES (sizeof runtimes / sizeof *runtimes)

/* Which of runtimes[] the flags build kernels with, in the order gcc reads them
 * (-fsanitize=a,b adds, -fno-sanitize=a or =all removes). */
static unsigned sanitizers(const sc_jit *jit)
{
    unsigned on = 0;
    for (size_t w = 0; w < jit->n_fixed; w++) {
        const char *a = jit->argv[w];
        bool add = !strncmp(a, "-fsanitize=", 11), drop = !strncmp(a, "-fno-sanitize=", 14);
        if (!add && !drop)
            continue;
        for (const char *s = a + (add ? 11 : 14); *s;) {
            size_t n = strcspn(s, ",");
            for (size_t r = 0; r < N_RUNTIMES; r++)
                if ((strlen(runtimes[r][0]) == n && !strncmp(s, runtimes[r][0], n)) ||
                    (drop && n == 3 && !strncmp(s, "all", 3)))
                    on = add ? on | 1u << r : on & ~(1u << r);
            s += n + (s[n] == ',');
        }
    }
    return on;
}

/* A sanitizer the flags build kernels with whose runtime this process has not loaded
 * (its index in runtimes[], or -1): loading such a kernel ends the process ("ASan
 * runtime does not come first in initial library list"), so it is refused before the
 * compile. */
static int missing_sanitizer(const sc_jit *jit)
{
    unsigned on = sanitizers(jit);
    for (size_t r = 0; r < N_RUNTIMES; r++)
        if ((on & 1u << r) && !dlsym(RTLD_DEFAULT, runtimes[r][1]))
            return (int)r;
    return -1;
}

sc_status sc_jit_compile(const sc_jit *jit, const char *hex, const char *source,
                         size_t len, sc_error *err)
{
    int san = missing_sanitizer(jit);
    if (san >= 0) {
        char preload[256] = "";
        if (runtimes[san][2])
            snprintf(preload, sizeof preload, ", or start the process with the runtime first "
                     "(LD_PRELOAD=$(%s -print-file-name=%s))", jit->argv[0], runtimes[san][2]);
        return sc_fail(err, SC_COMPILE, SC_JIT_STAGE,
                       "the compiler flags build kernels with -fsanitize=%s, whose runtime "
                       "this process has not loaded (a kernel built so would end it): drop "
                       "it from SCORCH_CFLAGS%s", runtimes[san][0], preload);
    }
    paths p = {0};
    sc_status st = paths_make(jit, hex, &p, err);
    if (st == SC_OK)
        st = write_source(jit, &p, source, len, err);
    if (st != SC_OK) {
        paths_free(jit, &p);
        return st;
    }
    int log_fd = open(p.log, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (log_fd < 0)
        st = sc_fail(err, SC_INTERNAL, SC_JIT_STAGE, "cannot create '%s': %s", p.log,
                     strerror(errno));
    else
        st = run_compiler(jit, &p, log_fd, err);
    struct stat built;
    if (st == SC_OK && (stat(p.so, &built) != 0 || built.st_size == 0))
        /* the compiler said it succeeded and wrote nothing (SCORCH_CC=true): its fault,
         * not the cache's */
        st = sc_fail(err, SC_COMPILE, SC_JIT_STAGE, "the C compiler '%s' exited with status 0 "
                     "but wrote no shared object (set SCORCH_CC to a C compiler such as gcc)",
                     jit->argv[0]);
    if (st == SC_OK && (chmod(p.so, 0700) != 0 || rename(p.so, p.final_so) != 0))
        st = sc_fail(err, SC_INTERNAL, SC_JIT_STAGE, "cannot publish '%s': %s", p.final_so,
                     strerror(errno));
    if (st == SC_OK) {
        unlink(p.kept_c); /* a stale failure of this key, if any */
        unlink(p.kept_log);
    }
    if (log_fd >= 0)
        close(log_fd);
    unlink(p.log);
    unlink(p.so);
    unlink(p.src); /* already renamed to <hex>.c if the compiler failed */
    paths_free(jit, &p);
    return st;
}
