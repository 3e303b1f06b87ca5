/*
 * test_jit.c — the jit stage against the real C compiler: memory, disk and compile paths
 * of sc_jit_get, the error messages, the unsafe-file check, threads racing on one key,
 * and the content hash.  Runs from csrc/ (runtime/ holds scorch_rt.h); every file goes
 * to a mkdtemp directory that is removed at the end.
 */
#define _GNU_SOURCE
#include "check.h"
#include "tmpdir.h"
#include "jit/sc_jit.h"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef int (*int_fn)(int);

static const char ADD1[] = "#include \"scorch_rt.h\"\nint add1(int x){return x+1;}\n";
static const char BROKEN[] = "#include \"scorch_rt.h\"\nint broken(int x){return x+;}\n";
static const char TWICE[] = "#include \"scorch_rt.h\"\n"
                            "int twice(int x){return SC_RT_VERSION > 0 ? 2*x : -1;}\n";

static sc_ctx ctx;
static char root[64];
static char cache[128];

static sc_jit *make_jit(const char *cc, const char *dir)
{
    sc_jit_config cfg = {cc ? cc : "cc", "-O1", dir, "runtime"};
    sc_error err;
    sc_jit *jit = sc_jit_new(&ctx, &cfg, &err);
    if (!jit)
        fprintf(stderr, "sc_jit_new: %s\n", err.msg);
    return jit;
}

static int_fn get_int_fn(sc_jit *jit, const char *src, const char *sym, sc_status *st,
                         sc_error *err)
{
    sc_jit_fn fn = NULL;
    *st = sc_jit_get(jit, src, strlen(src), sym, &fn, err);
    return (int_fn)fn;
}

static sc_jit_counts counts(sc_jit *jit)
{
    sc_jit_counts c;
    sc_jit_stats(jit, &c);
    return c;
}

/* A fresh jit on the cache that refuses the kernel file on disk: add1 is compiled
 * again, replaces the file, and answers add1(arg).  (The jit that loaded the file must be
 * freed before the file is changed: truncating a mapped library faults its pages.) */
static sc_jit *rebuilt_on_reopening(int arg)
{
    sc_jit *jit = make_jit(NULL, cache);
    CHECK(jit != NULL);
    if (!jit)
        return NULL;
    sc_status st;
    sc_error err;
    int_fn add1 = get_int_fn(jit, ADD1, "add1", &st, &err);
    CHECK(st == SC_OK && add1 && add1(arg) == arg + 1);
    sc_jit_counts c = counts(jit);
    CHECK(c.compiles == 1 && c.disk_hits == 0 && c.disk_refused == 1);
    return jit;
}

/* Path of the one file in dir ending with suffix, or "" (written into out). */
static void find_file(const char *dir, const char *suffix, char *out, size_t cap)
{
    out[0] = '\0';
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    size_t ns = strlen(suffix);
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n > ns && strcmp(e->d_name + n - ns, suffix) == 0)
            snprintf(out, cap, "%s/%s", dir, e->d_name);
    }
    closedir(d);
}


static void test_hash(void)
{
    static const char text[] = "The quick brown fox jumps over the lazy dog, twice over.";
    size_t n = sizeof text - 1;
    sc_jit_hasher h;
    sc_jit_hash_init(&h, 0);
    sc_jit_hash_update(&h, text, n);
    sc_jit_key whole = sc_jit_hash_final(&h);
    for (size_t cut = 0; cut <= n; cut += 7) {
        sc_jit_hash_init(&h, 0);
        sc_jit_hash_update(&h, text, cut);
        sc_jit_hash_update(&h, text + cut, n - cut);
        sc_jit_key k = sc_jit_hash_final(&h);
        CHECK(k.w[0] == whole.w[0] && k.w[1] == whole.w[1]);
    }
    /* Every one-byte change, every length and another seed give another key. */
    int distinct = 1;
    char buf[sizeof text];
    for (size_t i = 0; i < n; i++) {
        memcpy(buf, text, sizeof text);
        buf[i] ^= 1;
        sc_jit_hash_init(&h, 0);
        sc_jit_hash_update(&h, buf, n);
        sc_jit_key k = sc_jit_hash_final(&h);
        distinct &= k.w[0] != whole.w[0] && k.w[1] != whole.w[1];
    }
    for (size_t len = 0; len < n; len++) {
        sc_jit_hash_init(&h, 0);
        sc_jit_hash_update(&h, text, len);
        sc_jit_key k = sc_jit_hash_final(&h);
        distinct &= k.w[0] != whole.w[0] && k.w[1] != whole.w[1];
    }
    sc_jit_hash_init(&h, 1);
    sc_jit_hash_update(&h, text, n);
    sc_jit_key seeded = sc_jit_hash_final(&h);
    distinct &= seeded.w[0] != whole.w[0];
    CHECK(distinct);
    /* Fields keep their boundaries: ("ab","c") differs from ("a","bc"). */
    sc_jit_hash_init(&h, 0);
    sc_jit_hash_field(&h, "ab", 2);
    sc_jit_hash_field(&h, "c", 1);
    sc_jit_key f1 = sc_jit_hash_final(&h);
    sc_jit_hash_init(&h, 0);
    sc_jit_hash_field(&h, "a", 1);
    sc_jit_hash_field(&h, "bc", 2);
    sc_jit_key f2 = sc_jit_hash_final(&h);
    CHECK(f1.w[0] != f2.w[0]);
    char hex[33];
    sc_jit_key k = {{0x0123456789abcdefu, 0xfedcba9876543210u}};
    sc_jit_key_hex(k, hex);
    CHECK(strcmp(hex, "0123456789abcdeffedcba9876543210") == 0);
}

static void test_config(void)
{
    sc_error err;
    sc_jit_config none = {NULL, NULL, cache, NULL};
    CHECK(sc_jit_new(&ctx, &none, &err) == NULL && err.kind == SC_USER);
    CHECK(sc_jit_new(&ctx, NULL, &err) == NULL && err.kind == SC_USER);
    sc_jit_config noheader = {NULL, NULL, cache, "tests"};
    CHECK(sc_jit_new(&ctx, &noheader, &err) == NULL && err.kind == SC_USER &&
          strstr(err.msg, "scorch_rt.h") != NULL);

    /* A cache dir others may write is refused, by the first kernel that needs the disk
     * (the jit itself is made: the built-in kernels need no disk); a lookup finds
     * nothing, and notes are neither read nor written. */
    char open_dir[128];
    snprintf(open_dir, sizeof open_dir, "%s/shared", root);
    CHECK(mkdir(open_dir, 0700) == 0 && chmod(open_dir, 0777) == 0);
    sc_jit_config shared = {NULL, NULL, open_dir, "runtime"};
    sc_jit *sj = sc_jit_new(&ctx, &shared, &err);
    CHECK(sj != NULL && sc_jit_setting(sj, "cache_dir") == NULL);
    if (sj) {
        sc_jit_fn f = NULL;
        const char *src = "int f(void) { return 1; }\n";
        CHECK(sc_jit_cached(sj, src, strlen(src), "f", &f, &err) == SC_OK && f == NULL);
        CHECK(sc_jit_get(sj, src, strlen(src), "f", &f, &err) == SC_USER && f == NULL &&
              strstr(err.msg, "writable") != NULL);
        char buf[8];
        CHECK(!sc_jit_note_write(sj, "note", "1\n"));
        CHECK(sc_jit_note_read(sj, "note", buf, sizeof buf) == -1);
        sc_jit_free(sj);
    }

    /* The environment fills what the config leaves NULL; the dir is made 0700. */
    char env_dir[128];
    snprintf(env_dir, sizeof env_dir, "%s/env/a/b", root);
    setenv("SCORCH_CACHE_DIR", env_dir, 1);
    setenv("SCORCH_CFLAGS", "-O0 -g", 1);
    setenv("SCORCH_CC", "gcc", 1);
    sc_jit_config envcfg = {NULL, NULL, NULL, "runtime"};
    sc_jit *jit = sc_jit_new(&ctx, &envcfg, &err);
    CHECK(jit != NULL);
    if (jit) {
        CHECK(strcmp(sc_jit_setting(jit, "cache_dir"), env_dir) == 0);
        CHECK(strcmp(sc_jit_setting(jit, "cflags"), "-O0 -g") == 0);
        CHECK(strcmp(sc_jit_setting(jit, "cc"), "gcc") == 0);
        CHECK(sc_jit_setting(jit, "include_dir")[0] == '/');
        CHECK(sc_jit_setting(jit, "nope") == NULL);
        struct stat st;
        CHECK(stat(env_dir, &st) == 0 && (st.st_mode & 0777) == 0700);
        sc_jit_free(jit);
    }
    unsetenv("SCORCH_CACHE_DIR");
    unsetenv("SCORCH_CFLAGS");
    unsetenv("SCORCH_CC");
    sc_jit_config defaults = {NULL, NULL, cache, "runtime"};
    jit = sc_jit_new(&ctx, &defaults, &err);
    CHECK(jit && strcmp(sc_jit_setting(jit, "cflags"), SC_JIT_DEFAULT_CFLAGS) == 0 &&
          strcmp(sc_jit_setting(jit, "cc"), "cc") == 0);
    sc_jit_free(jit);
}

static void test_paths(void)
{
    sc_error err;
    sc_status st;

    /* Cold: one compile. */
    sc_jit *jit = make_jit(NULL, cache);
    CHECK(jit != NULL);
    if (!jit)
        return;
    int_fn add1 = get_int_fn(jit, ADD1, "add1", &st, &err);
    CHECK(st == SC_OK && add1 != NULL);
    if (add1)
        CHECK(add1(41) == 42);
    sc_jit_counts c = counts(jit);
    CHECK(c.compiles == 1 && c.mem_hits == 0 && c.disk_hits == 0);
    char so[512];
    find_file(cache, ".so", so, sizeof so);
    struct stat sb;
    CHECK(so[0] && stat(so, &sb) == 0 && (sb.st_mode & 077) == 0);

    /* Warm: the same pointer from the process map. */
    int_fn again = get_int_fn(jit, ADD1, "add1", &st, &err);
    CHECK(st == SC_OK && again == add1);
    c = counts(jit);
    CHECK(c.compiles == 1 && c.mem_hits == 1);

    /* Another symbol name is another kernel; a missing one is a RUNTIME error. */
    int_fn none = get_int_fn(jit, ADD1, "no_such_symbol", &st, &err);
    CHECK(st == SC_RUNTIME && none == NULL && strstr(err.msg, "no_such_symbol") != NULL);
    sc_jit_free(jit);

    /* A fresh jit on the same dir loads from disk without compiling. */
    jit = make_jit(NULL, cache);
    CHECK(jit != NULL);
    if (!jit)
        return;
    add1 = get_int_fn(jit, ADD1, "add1", &st, &err);
    CHECK(st == SC_OK && add1 && add1(1) == 2);
    c = counts(jit);
    CHECK(c.compiles == 0 && c.disk_hits == 1 && c.disk_refused == 0);
    sc_jit_free(jit);

    /* A group-writable cache file is not loaded: it is rebuilt and replaced. */
    CHECK(chmod(so, 0770) == 0);
    jit = rebuilt_on_reopening(-1);
    if (!jit)
        return;
    CHECK(stat(so, &sb) == 0 && (sb.st_mode & 077) == 0);

    /* So is a cache file that does not load (here: not an ELF file). */
    sc_jit_free(jit);
    FILE *f = fopen(so, "w");
    CHECK(f && fputs("not a shared object", f) >= 0);
    if (f)
        fclose(f);
    jit = rebuilt_on_reopening(2);
    if (!jit)
        return;

    /* And one cut short (its loadable segments past the end: dlopen would raise SIGBUS). */
    sc_jit_free(jit);
    CHECK(stat(so, &sb) == 0 && truncate(so, sb.st_size / 2) == 0);
    jit = rebuilt_on_reopening(3);
    if (!jit)
        return;
    CHECK(stat(so, &sb) == 0 && sb.st_size > 0);

    /* Compile errors: the compiler's text and where the source was kept. */
    sc_jit_fn fn = NULL;
    st = sc_jit_get(jit, BROKEN, strlen(BROKEN), "broken", &fn, &err);
    CHECK(st == SC_COMPILE && fn == NULL && strcmp(err.stage, "jit") == 0);
    CHECK(strstr(err.msg, "error") != NULL);
    char kept[512];
    find_file(cache, ".c", kept, sizeof kept);
    CHECK(kept[0] && strstr(err.msg, kept) != NULL);
    f = fopen(kept, "r");
    char text[256] = {0};
    CHECK(f && fread(text, 1, sizeof text - 1, f) == strlen(BROKEN));
    CHECK(strcmp(text, BROKEN) == 0);
    if (f)
        fclose(f);
    /* ... and the compiler's whole output, kept beside it and named */
    char log[512];
    find_file(cache, ".log", log, sizeof log);
    CHECK(log[0] && strstr(err.msg, log) != NULL);
    f = fopen(log, "r");
    char out[4096] = {0};
    CHECK(f && fread(out, 1, sizeof out - 1, f) > 0 && strstr(out, "error") != NULL);
    if (f)
        fclose(f);
    if (st != SC_COMPILE)
        fprintf(stderr, "unexpected: %s\n", err.msg);

    /* Warnings ahead of the error (a flag's -Wpsabi notes, say) do not fill the
     * message: its excerpt is the lines that say "error". */
    char loud[2048] = "#include \"scorch_rt.h\"\n";
    for (int k = 0; k < 12; k++)
        strcat(loud, "#warning a warning long enough to fill the excerpt by itself\n");
    strcat(loud, "int loud(int x){return x+;}\n");
    st = sc_jit_get(jit, loud, strlen(loud), "loud", &fn, &err);
    CHECK(st == SC_COMPILE && strstr(err.msg, "error") != NULL &&
          strstr(err.msg, "fill the excerpt") == NULL);
    sc_jit_free(jit);

    /* A linker's message names no "error" itself ("cannot find -l..."): kept too. */
    sc_jit_config nolib = {"cc", "-O1 -lscorch-no-such-library", cache, "runtime"};
    jit = sc_jit_new(&ctx, &nolib, &err);
    CHECK(jit != NULL);
    if (!jit)
        return;
    st = sc_jit_get(jit, ADD1, strlen(ADD1), "add1", &fn, &err);
    CHECK(st == SC_COMPILE && strstr(err.msg, "scorch-no-such-library") != NULL);
    sc_jit_free(jit);
}

/* A cache directory removed while the process runs is made again (0700) for the next
 * compile; kernels already loaded keep working. */
static void test_cache_dir_removed(void)
{
    char dir[200], sub[240];
    snprintf(dir, sizeof dir, "%s/removed", root);
    snprintf(sub, sizeof sub, "%s/cache", dir);
    sc_jit *jit = make_jit(NULL, sub);
    CHECK(jit != NULL);
    if (!jit)
        return;
    sc_error err;
    sc_status st;
    int_fn add1 = get_int_fn(jit, ADD1, "add1", &st, &err);
    CHECK(st == SC_OK && add1 && add1(1) == 2);
    tmpdir_remove(dir);
    struct stat sb;
    CHECK(stat(dir, &sb) != 0);
    int_fn twice = get_int_fn(jit, TWICE, "twice", &st, &err);
    CHECK(st == SC_OK && twice && twice(3) == 6);
    if (st != SC_OK)
        fprintf(stderr, "unexpected: %s\n", err.msg);
    CHECK(stat(sub, &sb) == 0 && S_ISDIR(sb.st_mode) && (sb.st_mode & 0777) == 0700);
    CHECK(add1(2) == 3);
    sc_jit_free(jit);
}

/* Flags that build kernels with a sanitizer whose runtime the process lacks: a COMPILE
 * error naming it before anything is compiled (loading such a kernel ends the process). */
static void test_sanitizer_without_its_runtime(void)
{
    sc_jit_config cfg = {"cc", "-O1 -fsanitize=undefined,thread", cache, "runtime"};
    sc_error err;
    sc_jit *jit = sc_jit_new(&ctx, &cfg, &err);
    CHECK(jit != NULL);
    if (!jit)
        return;
    sc_jit_fn fn = NULL;
    sc_status st = sc_jit_get(jit, ADD1, strlen(ADD1), "add1", &fn, &err);
    CHECK(st == SC_COMPILE && fn == NULL && strstr(err.msg, "-fsanitize=thread") != NULL &&
          strstr(err.msg, "cc -print-file-name=libtsan.so") != NULL);
    CHECK(counts(jit).compiles == 0);
    sc_jit_free(jit);
    /* a sanitizer turned off again later in the flags needs no runtime */
    sc_jit_config off = {"cc", "-O1 -fsanitize=thread -fno-sanitize=all", cache, "runtime"};
    jit = sc_jit_new(&ctx, &off, &err);
    CHECK(jit != NULL);
    if (!jit)
        return;
    st = sc_jit_get(jit, ADD1, strlen(ADD1), "add1", &fn, &err);
    CHECK(st == SC_OK && fn != NULL);
    sc_jit_free(jit);
}

static void test_missing_compiler(void)
{
    sc_jit *jit = make_jit("scorch-no-such-compiler --flag", cache);
    CHECK(jit != NULL);
    if (!jit)
        return;
    sc_error err;
    sc_jit_fn fn = NULL;
    sc_status st = sc_jit_get(jit, ADD1, strlen(ADD1), "add1", &fn, &err);
    CHECK(st == SC_COMPILE && fn == NULL);
    CHECK(strstr(err.msg, "SCORCH_CC") != NULL &&
          strstr(err.msg, "'scorch-no-such-compiler'") != NULL);
    sc_jit_free(jit);
}

/* An allocator that fails its fail_at-th call (counting from 0). */
typedef struct budget {
    int calls, fail_at;
} budget;

static void *budget_alloc(void *user, size_t n)
{
    budget *b = user;
    return b->calls++ == b->fail_at ? NULL : malloc(n);
}

static void budget_free(void *user, void *p)
{
    (void)user;
    free(p);
}

/* Every allocation of sc_jit_new and a cold sc_jit_get may fail: NOMEM, nothing leaks.
 * A warm sc_jit_get allocates nothing. */
static void test_nomem(void)
{
    static const char src[] = "#include \"scorch_rt.h\"\nint sub1(int x){return x-1;}\n";
    int done = 0;
    for (int k = 0; k < 200 && !done; k++) {
        budget b = {0, k};
        sc_ctx c = {{budget_alloc, budget_free, &b}, 0, 0};
        sc_jit_config cfg = {"cc", "-O1", cache, "runtime"};
        sc_error err;
        sc_jit *jit = sc_jit_new(&c, &cfg, &err);
        sc_status st = jit ? SC_OK : err.kind;
        sc_jit_fn fn = NULL;
        if (jit)
            st = sc_jit_get(jit, src, strlen(src), "sub1", &fn, &err);
        if (st == SC_OK) {
            CHECK(((int_fn)fn)(1) == 0);
            int before = b.calls;
            CHECK(sc_jit_get(jit, src, strlen(src), "sub1", &fn, &err) == SC_OK);
            CHECK(b.calls == before);
            done = b.calls <= k;
        } else {
            CHECK(st == SC_NOMEM && fn == NULL);
        }
        sc_jit_free(jit);
    }
    CHECK(done);
}

typedef struct race {
    sc_jit *jit;
    int result;
    sc_status st;
} race;

static void *race_main(void *arg)
{
    race *r = arg;
    sc_error err;
    sc_jit_fn fn = NULL;
    r->st = sc_jit_get(r->jit, TWICE, strlen(TWICE), "twice", &fn, &err);
    r->result = fn ? ((int_fn)fn)(21) : -1;
    return NULL;
}

static void test_threads(void)
{
    sc_jit *jit = make_jit(NULL, cache);
    CHECK(jit != NULL);
    if (!jit)
        return;
    race r[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        r[i] = (race){jit, 0, SC_INTERNAL};
        CHECK(pthread_create(&t[i], NULL, race_main, &r[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        CHECK(r[i].st == SC_OK && r[i].result == 42);
    }
    sc_jit_counts c = counts(jit);
    CHECK(c.compiles >= 1 && c.compiles + c.mem_hits + c.disk_hits == 4);
    sc_error err;
    sc_status st;
    int_fn twice = get_int_fn(jit, TWICE, "twice", &st, &err);
    CHECK(st == SC_OK && twice && twice(5) == 10);
    CHECK(counts(jit).mem_hits == c.mem_hits + 1);
    sc_jit_free(jit);
}

/* Notes beside the kernels: none at first, written then read back whole and cut to the
 * buffer, replaced by a second write, refused once group-writable, never through a
 * symlink; a NULL jit or name is refused. */
static void test_notes(void)
{
    sc_jit *jit = make_jit(NULL, cache);
    CHECK(jit != NULL);
    if (!jit)
        return;
    char buf[16], path[600];
    snprintf(path, sizeof path, "%s/note-a", cache);
    CHECK(sc_jit_note_read(jit, "note-a", buf, sizeof buf) == -1 && buf[0] == '\0');
    CHECK(sc_jit_note_write(jit, "note-a", "1\n"));
    CHECK(sc_jit_note_read(jit, "note-a", buf, sizeof buf) == 2 && !strcmp(buf, "1\n"));
    CHECK(sc_jit_note_write(jit, "note-a", "0123456789abcdefXYZ"));
    CHECK(sc_jit_note_read(jit, "note-a", buf, 5) == 4 && !strcmp(buf, "0123"));
    CHECK(chmod(path, 0620) == 0);
    CHECK(sc_jit_note_read(jit, "note-a", buf, sizeof buf) == -1);
    unlink(path);
    char link[600];
    snprintf(link, sizeof link, "%s/note-b", cache);
    CHECK(symlink(path, link) == 0);
    CHECK(sc_jit_note_write(jit, "note-a", "2\n"));
    CHECK(sc_jit_note_read(jit, "note-b", buf, sizeof buf) == -1);
    CHECK(!sc_jit_note_write(NULL, "x", "1") && !sc_jit_note_write(jit, NULL, "1"));
    CHECK(sc_jit_note_read(NULL, "x", buf, sizeof buf) == -1);
    unlink(link);
    sc_jit_free(jit);
}

/* With SIGCHLD ignored the kernel reaps the compiler itself and its exit status is lost
 * (waitpid: ECHILD): the compiler's identity is what it is with the status kept (a kernel
 * compiled before is found on disk), a compile succeeds by the library it writes, and
 * one that writes none is a COMPILE error with the compiler's output. */
static void test_sigchld_ignored(void)
{
    char dir[160];
    snprintf(dir, sizeof dir, "%s/sigchld", root);
    sc_error err;
    sc_status st;
    sc_jit *jit = make_jit(NULL, dir);
    CHECK(jit != NULL);
    if (!jit)
        return;
    int_fn twice = get_int_fn(jit, TWICE, "twice", &st, &err);
    CHECK(st == SC_OK && twice && twice(4) == 8);
    sc_jit_free(jit);

    CHECK(signal(SIGCHLD, SIG_IGN) != SIG_ERR);
    jit = make_jit(NULL, dir);
    CHECK(jit != NULL);
    if (jit) {
        twice = get_int_fn(jit, TWICE, "twice", &st, &err);
        CHECK(st == SC_OK && twice && twice(5) == 10);
        int_fn add1 = get_int_fn(jit, ADD1, "add1", &st, &err);
        CHECK(st == SC_OK && add1 && add1(5) == 6);
        sc_jit_counts c = counts(jit);
        CHECK(c.disk_hits == 1 && c.compiles == 1);
        sc_jit_fn fn = NULL;
        st = sc_jit_get(jit, BROKEN, strlen(BROKEN), "broken", &fn, &err);
        CHECK(st == SC_COMPILE && fn == NULL && strstr(err.msg, "error") != NULL);
        sc_jit_free(jit);
    }
    jit = make_jit("false", dir);
    CHECK(jit != NULL);
    if (jit) {
        sc_jit_fn fn = NULL;
        st = sc_jit_get(jit, ADD1, strlen(ADD1), "add1", &fn, &err);
        CHECK(st == SC_COMPILE && fn == NULL && strstr(err.msg, "no library written") != NULL);
        sc_jit_free(jit);
    }
    CHECK(signal(SIGCHLD, SIG_DFL) != SIG_ERR);
}

int main(void)
{
    sc_ctx_init(&ctx);
    snprintf(root, sizeof root, "/tmp/scorch-test-jit-XXXXXX");
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(cache, sizeof cache, "%s/cache", root);
    test_hash();
    test_config();
    test_paths();
    test_cache_dir_removed();
    test_sanitizer_without_its_runtime();
    test_missing_compiler();
    test_nomem();
    test_threads();
    test_notes();
    test_sigchld_ignored();
    tmpdir_remove(root);
    return check_report("test_jit");
}
