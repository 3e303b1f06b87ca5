/*
 * test_driver.c — the driver's contracts: user errors (expression columns, shapes naming
 * the index and sizes, dtypes, schedules, operands that do not match a kernel), the
 * kernel cache (same key, same kernel), allocation failure injected at every allocation
 * of one compile + run (NOMEM, no leaks under ASan), and four threads compiling and
 * running the same new expressions on one shared compiler; ahead-of-time kernels: a
 * table built here from sc_compile_source (generic SpMV and SpMM), loaded, an exact hit,
 * a sized SpMM served by the generic kernel while its own compiles on a thread, and a
 * table refused for another ISA.
 */
#define _GNU_SOURCE
#include "check.h"
#include "tmpdir.h"
#include "driver/sc_driver.h"
#include "format/sc_format.h"

#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static sc_ctx ctx;
static char root[64];


/* A csr (or other format) matrix with a deterministic pattern and empty rows. */
static void make_matrix(const sc_ctx *c, int64_t m, int64_t n, const char *fmt, sc_dtype dt,
                        sc_index_type it, unsigned seed, sc_tensor *out, double *dense)
{
    double *d = dense;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            unsigned h = (unsigned)(i * 7919 + j * 104729) * 2654435761u + seed * 97u;
            d[i * n + j] = (i % 4 != 2 && (h >> 27) < 10) ? (double)((h >> 8) % 7) - 3.0 + 0.5 : 0.0;
        }
    void *buf = malloc((size_t)(m * n) * 8 + 8);
    for (int64_t i = 0; i < m * n; i++) {
        if (dt == SC_DTYPE_F32)
            ((float *)buf)[i] = (float)d[i];
        else
            ((double *)buf)[i] = d[i];
    }
    sc_format f;
    sc_fmt_parse(fmt, 2, &f, NULL);
    int64_t dims[2] = {m, n};
    sc_error err;
    if (sc_fmt_from_dense(c, 2, dims, buf, dt, &f, it, out, &err) != SC_OK)
        fprintf(stderr, "from_dense: %s\n", err.msg);
    free(buf);
}

static void make_dense(const sc_ctx *c, int64_t n, sc_dtype dt, sc_tensor *out, double *x)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = 0.25 * (double)(i % 5) - 0.5;
    void *buf = malloc((size_t)n * 8 + 8);
    for (int64_t i = 0; i < n; i++) {
        if (dt == SC_DTYPE_F32)
            ((float *)buf)[i] = (float)x[i];
        else
            ((double *)buf)[i] = x[i];
    }
    sc_format f;
    sc_fmt_parse("dense", 1, &f, NULL);
    sc_error err;
    sc_fmt_from_dense(c, 1, &n, buf, dt, &f, SC_INDEX_I32, out, &err);
    free(buf);
}

static sc_compiler *new_compiler(const sc_ctx *c)
{
    sc_jit_config cfg = {NULL, "-O1 -fopenmp", root, "runtime"};
    sc_error err;
    sc_compiler *comp = sc_compiler_new(c, &cfg, &err);
    if (!comp)
        fprintf(stderr, "sc_compiler_new: %s\n", err.msg);
    return comp;
}

static void test_errors(sc_compiler *comp)
{
    sc_tensor A, B, x;
    double dA[12 * 10], dB[10 * 6], dx[12];
    make_matrix(&ctx, 12, 10, "csr", SC_DTYPE_F64, SC_INDEX_I32, 1, &A, dA);
    make_matrix(&ctx, 10, 6, "dense", SC_DTYPE_F64, SC_INDEX_I32, 2, &B, dB);
    make_dense(&ctx, 12, SC_DTYPE_F64, &x, dx);
    sc_tensor ops[2] = {A, B};
    const sc_kernel *k = NULL;
    sc_error err;

    /* expression errors point at the column */
    CHECK(sc_compile(comp, SC_EXPR_LANG_EINSUM, "ij,j%->ik", 2, ops, NULL, NULL, &k, &err) == SC_USER);
    CHECK(err.pos == 4 && k == NULL);
    CHECK(sc_compile(comp, SC_EXPR_LANG_INDEX, "C(i,k) = A(i,j) * * B(j,k)", 2, ops, NULL, NULL, &k,
                     &err) == SC_USER);
    CHECK(err.pos >= 18 && err.pos <= 20);
    /* shape mismatch names the index, the operands and the sizes */
    sc_tensor bad[2] = {A, x};
    CHECK(sc_compile(comp, SC_EXPR_LANG_EINSUM, "ij,j->i", 2, bad, NULL, NULL, &k, &err) == SC_USER);
    CHECK(strstr(err.msg, "j") && strstr(err.msg, "10") && strstr(err.msg, "12"));
    CHECK(strstr(err.msg, "A") && strstr(err.msg, "B"));
    /* one dtype for all operands */
    sc_tensor mixed[2] = {A, B};
    mixed[1].dtype = SC_DTYPE_F32;
    CHECK(sc_compile(comp, SC_EXPR_LANG_EINSUM, "ij,jk->ik", 2, mixed, NULL, NULL, &k, &err) == SC_USER);
    CHECK(strstr(err.msg, "dtype") != NULL);
    /* an illegal forced schedule gives the reason */
    CHECK(sc_compile(comp, SC_EXPR_LANG_EINSUM, "ij,jk->ik", 2, ops, NULL, "order(i,j,k) parallel(j)",
                     &k, &err) == SC_USER);
    CHECK(strstr(err.msg, "parallel(j) is illegal") != NULL);
    CHECK(sc_compile(comp, SC_EXPR_LANG_EINSUM, "ij,jk->ik", 2, ops, NULL, "order(i,q,k)", &k, &err) ==
          SC_USER);
    CHECK(err.pos == 8 && strstr(err.msg, "unknown index 'q'"));
    /* an output format the assembler cannot build */
    sc_format cd;
    sc_fmt_parse("cd", 2, &cd, NULL);
    CHECK(sc_compile(comp, SC_EXPR_LANG_EINSUM, "ij,jk->ik", 2, ops, &cd, NULL, &k, &err) ==
          SC_UNSUPPORTED);

    /* the cache: the same key gives the same kernel; explain and schedule are there */
    const sc_kernel *k1 = NULL, *k2 = NULL;
    CHECK(sc_compile(comp, SC_EXPR_LANG_EINSUM, "ij,jk->ik", 2, ops, NULL, NULL, &k1, &err) == SC_OK);
    CHECK(sc_compile(comp, SC_EXPR_LANG_INDEX, "out(i,k) = A(i,j) * B(j,k)", 2, ops, NULL, NULL, &k2,
                     &err) == SC_OK);
    CHECK(k1 && k1 == k2);
    if (k1) {
        CHECK(strcmp(sc_kernel_schedule(k1), "order(i,j,k) parallel(i)") == 0);
        CHECK(strstr(sc_kernel_explain(k1), "loop order: i j k") != NULL);
        CHECK(strstr(sc_kernel_explain(k1), "csr") != NULL);
        sc_tensor desc;
        sc_kernel_output(k1, &desc);
        CHECK(desc.fmt.order == 2 && desc.fmt.kind[1] == SC_LEVEL_DENSE && desc.dims[0] == 12 &&
              desc.dims[1] == 6);
        /* operands that do not match the kernel */
        const sc_tensor *wrong[2] = {&B, &B};
        sc_tensor res;
        CHECK(sc_kernel_run(k1, wrong, 1, &res, &err) == SC_USER && strstr(err.msg, "format"));
        sc_tensor A2;
        double dA2[12 * 9];
        make_matrix(&ctx, 12, 9, "csr", SC_DTYPE_F64, SC_INDEX_I32, 1, &A2, dA2);
        const sc_tensor *shp[2] = {&A2, &B};
        CHECK(sc_kernel_run(k1, shp, 1, &res, &err) == SC_USER && strstr(err.msg, "index j"));
        sc_tensor_release(&ctx, &A2);
        const sc_tensor *good[2] = {&A, &B};
        CHECK(sc_kernel_run(k1, good, 1, &res, &err) == SC_OK);
        bool ok = true;
        for (int i = 0; i < 12; i++)
            for (int kk = 0; kk < 6; kk++) {
                double r = 0;
                for (int j = 0; j < 10; j++)
                    r += dA[i * 10 + j] * dB[j * 6 + kk];
                ok &= fabs(((double *)res.vals)[i * 6 + kk] - r) < 1e-12;
            }
        CHECK(ok);
        sc_tensor_release(&ctx, &res);
    }
    sc_tensor_release(&ctx, &A);
    sc_tensor_release(&ctx, &B);
    sc_tensor_release(&ctx, &x);
}

/* Index widths may differ per operand; a dense operand may broadcast a size-1 dimension. */
/* Whether res (20 x 15) is dense a with every row multiplied by r elementwise. */
static bool is_row_scaled(const sc_tensor *res, const double *a, const double *r)
{
    double got[20 * 15];
    sc_error err;
    if (sc_fmt_to_dense(&ctx, res, got, &err) != SC_OK)
        return false;
    bool ok = true;
    for (int i = 0; i < 20 * 15; i++)
        ok &= fabs(got[i] - a[i] * r[i % 15]) < 1e-12;
    return ok;
}

static void test_mixed(sc_compiler *comp)
{
    sc_tensor A, B;
    double dA[20 * 15], dB[15 * 12];
    make_matrix(&ctx, 20, 15, "csr", SC_DTYPE_F64, SC_INDEX_I32, 7, &A, dA);
    make_matrix(&ctx, 15, 12, "dcsr", SC_DTYPE_F64, SC_INDEX_I64, 8, &B, dB);
    sc_tensor ops[2] = {A, B};
    const sc_kernel *k = NULL;
    sc_error err;
    CHECK(sc_compile(comp, SC_EXPR_LANG_EINSUM, "ij,jk->ik", 2, ops, NULL, NULL, &k, &err) == SC_OK);
    if (k) {
        sc_tensor desc;
        sc_kernel_output(k, &desc);
        CHECK(desc.index_type == SC_INDEX_I64);
        const sc_tensor *op[2] = {&A, &B};
        sc_tensor res;
        CHECK(sc_kernel_run(k, op, 2, &res, &err) == SC_OK);
        double got[20 * 12];
        CHECK(sc_fmt_to_dense(&ctx, &res, got, &err) == SC_OK);
        bool ok = true;
        for (int i = 0; i < 20; i++)
            for (int kk = 0; kk < 12; kk++) {
                double r = 0;
                for (int j = 0; j < 15; j++)
                    r += dA[i * 15 + j] * dB[j * 12 + kk];
                ok &= fabs(got[i * 12 + kk] - r) < 1e-12;
            }
        CHECK(ok);
        sc_tensor_release(&ctx, &res);
    }
    /* C(i,j) = A(i,j) * R(i,j) with R of shape (1, 15): a row broadcast over i */
    sc_tensor R;
    double dR[15];
    make_matrix(&ctx, 1, 15, "dense", SC_DTYPE_F64, SC_INDEX_I32, 9, &R, dR);
    for (int j = 0; j < 15; j++) {
        dR[j] = 0.5 + j;
        ((double *)R.vals)[j] = dR[j];
    }
    sc_tensor ops2[2] = {A, R};
    CHECK(sc_compile(comp, SC_EXPR_LANG_INDEX, "C(i,j) = A(i,j) * R(i,j)", 2, ops2, NULL, NULL, &k, &err) ==
          SC_OK);
    if (k) {
        const sc_tensor *op[2] = {&A, &R};
        sc_tensor res;
        CHECK(sc_kernel_run(k, op, 1, &res, &err) == SC_OK);
        CHECK(res.fmt.kind[1] == SC_LEVEL_COMPRESSED);
        /* A's pattern: the output borrows A's index arrays (released with A, not res) */
        CHECK(res.borrowed == 2u && res.pos[1] == A.pos[1] && res.crd[1] == A.crd[1]);
        CHECK(is_row_scaled(&res, dA, dR));
        sc_tensor_release(&ctx, &res);
    }
    /* The same with A in csc and a csr output: the kernel runs on a csr copy of A made
     * for the run, whose arrays the output takes over (owned, not borrowed). */
    sc_tensor Ac;
    double dAc[20 * 15];
    make_matrix(&ctx, 20, 15, "csc", SC_DTYPE_F64, SC_INDEX_I32, 7, &Ac, dAc);
    sc_format csr;
    sc_fmt_parse("csr", 2, &csr, NULL);
    sc_tensor ops3[2] = {Ac, R};
    CHECK(sc_compile(comp, SC_EXPR_LANG_INDEX, "C(i,j) = A(i,j) * R(i,j)", 2, ops3, &csr, NULL, &k, &err) ==
          SC_OK);
    if (k) {
        const sc_tensor *op[2] = {&Ac, &R};
        sc_tensor res;
        CHECK(sc_kernel_run(k, op, 1, &res, &err) == SC_OK);
        CHECK(res.borrowed == 0 && res.crd[1] != Ac.crd[1] && res.pos[1] != NULL);
        CHECK(is_row_scaled(&res, dAc, dR));
        sc_tensor_release(&ctx, &res);
    }
    sc_tensor_release(&ctx, &Ac);
    sc_tensor_release(&ctx, &A);
    sc_tensor_release(&ctx, &B);
    sc_tensor_release(&ctx, &R);
}

/* ---- allocation failure injection ---- */

static atomic_long alloc_count, alloc_fail_at;

static void *failing_alloc(void *user, size_t n)
{
    (void)user;
    long c = atomic_fetch_add(&alloc_count, 1);
    if (c == atomic_load(&alloc_fail_at))
        return NULL;
    return malloc(n ? n : 1);
}

static void failing_free(void *user, void *p)
{
    (void)user;
    free(p);
}

static void test_alloc_failures(void)
{
    sc_ctx fctx = ctx;
    fctx.mem.alloc = failing_alloc;
    fctx.mem.free = failing_free;
    fctx.num_threads = 2;
    double dA[150 * 20], dB[20 * 25];
    int iterations = 0, nomem = 0, other = 0;
    for (long at = 0; at < 10000; at++) {
        atomic_store(&alloc_fail_at, -1);
        sc_tensor A, B;
        make_matrix(&ctx, 150, 20, "csr", SC_DTYPE_F32, SC_INDEX_I32, 3, &A, dA);
        make_matrix(&ctx, 20, 25, "csr", SC_DTYPE_F32, SC_INDEX_I32, 4, &B, dB);
        atomic_store(&alloc_count, 0);
        atomic_store(&alloc_fail_at, at);
        sc_error err;
        sc_status st = SC_OK;
        sc_compiler *comp = NULL;
        {
            sc_jit_config cfg = {NULL, "-O1 -fopenmp", root, "runtime"};
            comp = sc_compiler_new(&fctx, &cfg, &err);
            if (!comp)
                st = err.kind;
        }
        sc_tensor res;
        memset(&res, 0, sizeof res);
        if (comp) {
            sc_tensor ops[2] = {A, B};
            const sc_kernel *k = NULL;
            st = sc_compile(comp, SC_EXPR_LANG_EINSUM, "ij,jk->ik", 2, ops, NULL, NULL, &k, &err);
            if (st == SC_OK) {
                const sc_tensor *op[2] = {&A, &B};
                st = sc_kernel_run(k, op, 2, &res, &err);
                if (st == SC_OK)
                    CHECK(res.nvals > 0 && sc_fmt_validate(&ctx, &res, &err) == SC_OK);
                else
                    CHECK(res.vals == NULL && res.pos[1] == NULL && res.crd[1] == NULL);
            }
        }
        long used = atomic_load(&alloc_count);
        atomic_store(&alloc_fail_at, -1);
        if (st == SC_OK)
            sc_tensor_release(&fctx, &res);
        sc_compiler_free(comp);
        sc_tensor_release(&ctx, &A);
        sc_tensor_release(&ctx, &B);
        iterations++;
        if (st == SC_NOMEM)
            nomem++;
        else if (st != SC_OK) {
            other++;
            fprintf(stderr, "alloc failure at %ld: %s: %s\n", at, sc_status_name(st), err.msg);
        }
        if (at >= used)
            break; /* the whole compile + run succeeded without reaching the failure */
    }
    printf("  alloc failure injection: %d runs, %d NOMEM, %d other\n", iterations, nomem, other);
    CHECK(iterations > 10 && other == 0 && nomem == iterations - 1);
}

/* ---- threads sharing one compiler ---- */

typedef struct job {
    sc_compiler *comp;
    int id;
    int ok;
    const sc_kernel *kern[3];
} job;

static void *worker(void *arg)
{
    job *J = arg;
    J->ok = 1;
    static const char *const exprs[3] = {"ij,j->i", "C(i) = 2 * A(i,j) * B(j)", "C(i) = A(i,j) * B(j) * 3"};
    for (int rep = 0; rep < 3; rep++)
        for (int e = 0; e < 3; e++) {
            sc_tensor A, x;
            double dA[40 * 30], dx[30];
            make_matrix(&ctx, 40, 30, "csr", SC_DTYPE_F64, SC_INDEX_I64, 5, &A, dA);
            make_dense(&ctx, 30, SC_DTYPE_F64, &x, dx);
            sc_tensor ops[2] = {A, x};
            const sc_kernel *k = NULL;
            sc_error err;
            sc_status st = sc_compile(J->comp, e == 0 ? SC_EXPR_LANG_EINSUM : SC_EXPR_LANG_INDEX, exprs[e],
                                      2, ops, NULL, NULL, &k, &err);
            if (st != SC_OK) {
                fprintf(stderr, "thread %d: %s\n", J->id, err.msg);
                J->ok = 0;
            } else {
                if (J->kern[e] && J->kern[e] != k)
                    J->ok = 0;
                J->kern[e] = k;
                const sc_tensor *op[2] = {&A, &x};
                sc_tensor res;
                if (sc_kernel_run(k, op, 1, &res, &err) != SC_OK) {
                    J->ok = 0;
                } else {
                    double scale = e == 0 ? 1 : e == 1 ? 2 : 3;
                    for (int i = 0; i < 40; i++) {
                        double r = 0;
                        for (int j = 0; j < 30; j++)
                            r += dA[i * 30 + j] * dx[j];
                        if (fabs(((double *)res.vals)[i] - scale * r) > 1e-12)
                            J->ok = 0;
                    }
                    sc_tensor_release(&ctx, &res);
                }
            }
            sc_tensor_release(&ctx, &A);
            sc_tensor_release(&ctx, &x);
        }
    return NULL;
}

static void test_threads(void)
{
    sc_compiler *comp = new_compiler(&ctx);
    CHECK(comp != NULL);
    if (!comp)
        return;
    job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        memset(&jobs[i], 0, sizeof jobs[i]);
        jobs[i].comp = comp;
        jobs[i].id = i;
        pthread_create(&th[i], NULL, worker, &jobs[i]);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) {
        CHECK(jobs[i].ok);
        for (int e = 0; e < 3; e++)
            CHECK(jobs[i].kern[e] == jobs[0].kern[e]);
    }
    sc_compiler_free(comp);
}

/* ---- ahead-of-time kernels ---- */

static void write_file(const char *path, const char *text, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(text, 1, n, f);
        fclose(f);
    }
}

/* Build <root>/aot/aot.so from the generic kernels of exprs over ops (isa_ok: this host's
 * ISA hash, else a wrong one; text_ok: the hashes of the kernels' C, else wrong ones).
 * Returns false where the compiler could not be run. */
static bool build_table(sc_compiler *comp, const char *dir, int n, const char *const *exprs,
                        const sc_tensor *const *ops, bool isa_ok, bool text_ok)
{
    char path[256], cmd[2048], table[4096];
    sc_source src[4];
    int len = snprintf(table, sizeof table, "#include \"scorch_rt.h\"\n#include <stddef.h>\n");
    for (int e = 0; e < n; e++) {
        sc_error err;
        CHECK(sc_compile_source(comp, SC_EXPR_LANG_EINSUM, exprs[e], 2, ops[e], NULL, NULL, false, -1,
                                &src[e], &err) == SC_OK);
        snprintf(path, sizeof path, "%s/k%d.c", dir, e);
        write_file(path, src[e].text, src[e].len);
        len += snprintf(table + len, sizeof table - (size_t)len,
                        "int %s(const sc_tensor *const *, sc_tensor *, sc_rt_env *);\n", src[e].symbol);
    }
    /* sorted by key */
    int order[4] = {0, 1, 2, 3};
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++) {
            sc_jit_key x = src[order[a]].key, y = src[order[b]].key;
            if (x.w[0] > y.w[0] || (x.w[0] == y.w[0] && x.w[1] > y.w[1])) {
                int t = order[a];
                order[a] = order[b];
                order[b] = t;
            }
        }
    sc_jit_key isa = sc_jit_host_isa();
    len += snprintf(table + len, sizeof table - (size_t)len,
                    "typedef struct { uint64_t key[2], text[2]; sc_rt_kernel fn; } row;\n"
                    "const uint64_t scorch_aot_isa[2] = {%lluull, %lluull};\n"
                    "const int32_t scorch_aot_version = %d;\nconst size_t scorch_aot_count = %d;\n"
                    "const row scorch_aot_table[] = {\n",
                    (unsigned long long)isa.w[0], (unsigned long long)(isa.w[1] ^ !isa_ok),
                    SC_RT_VERSION, n);
    for (int a = 0; a < n; a++) {
        const sc_source *s = &src[order[a]];
        len += snprintf(table + len, sizeof table - (size_t)len,
                        "{{%lluull, %lluull}, {%lluull, %lluull}, %s},\n", (unsigned long long)s->key.w[0],
                        (unsigned long long)s->key.w[1], (unsigned long long)s->hash.w[0],
                        (unsigned long long)(s->hash.w[1] ^ !text_ok), s->symbol);
    }
    snprintf(table + len, sizeof table - (size_t)len, "};\n");
    snprintf(path, sizeof path, "%s/table.c", dir);
    write_file(path, table, strlen(table));
    for (int e = 0; e < n; e++)
        sc_source_release(comp, &src[e]);
    snprintf(cmd, sizeof cmd, "cc -O1 -march=native -w -fopenmp -fPIC -shared -Iruntime -o %s/aot.so %s/k*.c %s/table.c -lm",
             dir, dir, dir);
    return system(cmd) == 0;
}

typedef struct poller {
    sc_later *l;
    const sc_kernel *k;
    int r;
} poller;

static void *poll_main(void *arg)
{
    poller *p = arg;
    sc_error err;
    p->r = sc_later_poll(p->l, true, &p->k, &err);
    return NULL;
}

static void test_ahead_of_time(void)
{
    /* the gather probe is timed: a key written under one setting must be found */
    setenv("SCORCH_GATHERS", "0", 1);
    char dir[128];
    snprintf(dir, sizeof dir, "%s/aot", root);
    mkdir(dir, 0700);
    sc_tensor A, X, x;
    double dA[40 * 30], dX[30 * 8], dx[30];
    make_matrix(&ctx, 40, 30, "csr", SC_DTYPE_F64, SC_INDEX_I32, 3, &A, dA);
    make_matrix(&ctx, 30, 8, "dense", SC_DTYPE_F64, SC_INDEX_I32, 4, &X, dX);
    make_dense(&ctx, 30, SC_DTYPE_F64, &x, dx);
    sc_tensor spmm[2] = {A, X}, spmv[2] = {A, x};
    static const char *const exprs[2] = {"ij,jk->ik", "ij,j->i"};
    const sc_tensor *ops[2] = {spmm, spmv};
    char path[256];
    snprintf(path, sizeof path, "%s/aot.so", dir);
    sc_error err;
    size_t loaded;
    const char *why;
    sc_compiler *comp = new_compiler(&ctx);
    CHECK(comp && build_table(comp, dir, 2, exprs, ops, true, false));
    sc_compiler_free(comp);
    /* kernels written from other C (another code generator): loaded, never used */
    comp = new_compiler(&ctx);
    const sc_kernel *k = NULL;
    sc_later *later = NULL;
    CHECK(sc_compiler_load_aot(comp, path, &loaded, &why, &err) == SC_OK && loaded == 2);
    CHECK(sc_compile_later(comp, SC_EXPR_LANG_EINSUM, "ij,j->i", 2, spmv, NULL, NULL, true, &k, &later,
                           &err) == SC_OK);
    CHECK(k && !sc_kernel_ahead(k) && later == NULL);
    /* (generic: the K = 8 kernel must not reach the disk cache the tests below share) */
    CHECK(sc_compile_later(comp, SC_EXPR_LANG_EINSUM, "ij,jk->ik", 2, spmm, NULL, NULL, false, &k, &later,
                           &err) == SC_OK);
    CHECK(k && !sc_kernel_ahead(k) && later == NULL);
    CHECK(build_table(comp, dir, 2, exprs, ops, false, true));
    sc_compiler_free(comp);
    /* another ISA: refused, with the reason */
    comp = new_compiler(&ctx);
    CHECK(sc_compiler_load_aot(comp, path, &loaded, &why, &err) == SC_OK);
    CHECK(loaded == 0 && why && strstr(why, "instruction set"));
    sc_compiler_free(comp);
    /* not a table: an error naming the file */
    comp = new_compiler(&ctx);
    CHECK(sc_compiler_load_aot(comp, "/nonexistent/aot.so", &loaded, &why, &err) == SC_RUNTIME);
    CHECK(strstr(err.msg, "/nonexistent/aot.so") != NULL);
    CHECK(build_table(comp, dir, 2, exprs, ops, true, true));
    sc_compiler_free(comp);

    comp = new_compiler(&ctx);
    CHECK(sc_compiler_load_aot(comp, path, &loaded, &why, &err) == SC_OK);
    CHECK(loaded == 2 && why == NULL);
    /* SpMV: the table's kernel itself (nothing written for sizes) */
    CHECK(sc_compile_later(comp, SC_EXPR_LANG_EINSUM, "ij,j->i", 2, spmv, NULL, NULL, true, &k, &later,
                           &err) == SC_OK);
    CHECK(k && sc_kernel_ahead(k) && later == NULL);
    const sc_tensor *run_v[2] = {&A, &x};
    sc_tensor res;
    CHECK(k && sc_kernel_run(k, run_v, 2, &res, &err) == SC_OK);
    if (k) {
        bool ok = true;
        for (int i = 0; i < 40; i++) {
            double r = 0;
            for (int j = 0; j < 30; j++)
                r += dA[i * 30 + j] * dx[j];
            ok &= fabs(((double *)res.vals)[i] - r) < 1e-12;
        }
        CHECK(ok);
        sc_tensor_release(&ctx, &res);
    }
    sc_jit_counts n0;
    sc_compiler_jit_stats(comp, &n0);
    CHECK(n0.compiles == 0);
    /* SpMM with K = 8: the generic kernel now, K = 8's on a thread */
    const sc_kernel *g = NULL, *sized = NULL;
    CHECK(sc_compile_later(comp, SC_EXPR_LANG_EINSUM, "ij,jk->ik", 2, spmm, NULL, NULL, true, &g, &later,
                           &err) == SC_OK);
    CHECK(g && sc_kernel_ahead(g) && later != NULL);
    int32_t fo[4], fd[4];
    int64_t fs[4];
    CHECK(g && sc_kernel_fixed(g, 4, fo, fd, fs) == 0);
    sc_later *again = NULL;
    const sc_kernel *g2 = NULL;
    CHECK(sc_compile_later(comp, SC_EXPR_LANG_EINSUM, "ij,jk->ik", 2, spmm, NULL, NULL, true, &g2, &again,
                           &err) == SC_OK);
    CHECK(g2 == g && again == later); /* one compile per kernel */
    if (later) {
        CHECK(sc_later_poll(later, true, &sized, &err) == 1);
        CHECK(sized && !sc_kernel_ahead(sized) && sc_kernel_fixed(sized, 4, fo, fd, fs) == 1 && fs[0] == 8);
        const sc_kernel *same = NULL;
        CHECK(sc_later_poll(later, false, &same, &err) == 1 && same == sized);
        /* now in the map: a plain compile finds it */
        CHECK(sc_compile(comp, SC_EXPR_LANG_EINSUM, "ij,jk->ik", 2, spmm, NULL, NULL, &same, &err) == SC_OK);
        CHECK(same == sized);
    }
    const sc_tensor *run_m[2] = {&A, &X};
    for (int w = 0; w < 2; w++) {
        const sc_kernel *kk = w ? sized : g;
        if (!kk)
            continue;
        CHECK(sc_kernel_run(kk, run_m, 2, &res, &err) == SC_OK);
        bool ok = true;
        for (int i = 0; i < 40; i++)
            for (int c = 0; c < 8; c++) {
                double r = 0;
                for (int j = 0; j < 30; j++)
                    r += dA[i * 30 + j] * dX[j * 8 + c];
                ok &= fabs(((double *)res.vals)[i * 8 + c] - r) < 1e-12;
            }
        CHECK(ok);
        sc_tensor_release(&ctx, &res);
    }
    /* two threads waiting on one background compile get the same kernel */
    sc_tensor X5;
    double dX5[30 * 5];
    make_matrix(&ctx, 30, 5, "dense", SC_DTYPE_F64, SC_INDEX_I32, 6, &X5, dX5);
    sc_tensor spmm5[2] = {A, X5};
    later = NULL;
    CHECK(sc_compile_later(comp, SC_EXPR_LANG_EINSUM, "ij,jk->ik", 2, spmm5, NULL, NULL, true, &g, &later,
                           &err) == SC_OK);
    CHECK(g && sc_kernel_ahead(g) && later != NULL);
    if (later) {
        poller p[2] = {{later, NULL, 0}, {later, NULL, 0}};
        pthread_t th[2];
        for (int i = 0; i < 2; i++)
            pthread_create(&th[i], NULL, poll_main, &p[i]);
        for (int i = 0; i < 2; i++)
            pthread_join(th[i], NULL);
        CHECK(p[0].r == 1 && p[1].r == 1 && p[0].k && p[0].k == p[1].k && !sc_kernel_ahead(p[0].k));
    }
    sc_tensor_release(&ctx, &X5);
    /* a second table is refused once kernels exist */
    CHECK(sc_compiler_load_aot(comp, path, &loaded, &why, &err) == SC_USER);
    sc_compiler_free(comp);

    /* a compile that fails (no compiler): the poll reports it, the generic kernel stays */
    sc_jit_config cfg = {"/nonexistent/cc", "-O1", root, "runtime"};
    comp = sc_compiler_new(&ctx, &cfg, &err);
    CHECK(comp && sc_compiler_load_aot(comp, path, &loaded, &why, &err) == SC_OK && loaded == 2);
    later = NULL;
    g = NULL;
    sc_tensor wide[2] = {A, X};
    CHECK(comp && sc_compile_later(comp, SC_EXPR_LANG_EINSUM, "ij,jk->ik", 2, wide, NULL, NULL, true, &g,
                                   &later, &err) == SC_OK);
    CHECK(g && sc_kernel_ahead(g));
    /* (a fresh cache dir would have no K = 8 kernel; this one has: found, not compiled) */
    if (later) {
        const sc_kernel *none = NULL;
        int r = sc_later_poll(later, true, &none, &err);
        CHECK(r == 1 || (r == -1 && strstr(err.msg, "not found")));
    }
    sc_compiler_free(comp);
    sc_tensor_release(&ctx, &A);
    sc_tensor_release(&ctx, &X);
    sc_tensor_release(&ctx, &x);
}

int main(void)
{
    sc_ctx_init(&ctx);
    snprintf(root, sizeof root, "/tmp/sc_test_driver_XXXXXX");
    if (!mkdtemp(root))
        return 1;
    sc_compiler *comp = new_compiler(&ctx);
    CHECK(comp != NULL);
    if (comp) {
        test_errors(comp);
        test_mixed(comp);
    }
    sc_compiler_free(comp);
    test_threads();
    test_alloc_failures();
    test_ahead_of_time();
    tmpdir_remove(root);
    return check_report("test_driver");
}
