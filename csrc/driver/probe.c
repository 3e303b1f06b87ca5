/*
 * probe.c — whether this CPU's gathers are fast, measured once per kernel cache (the
 * outcome is kept there per host ISA: compiler.c).
 *
 * SpMV's float rows can read x through 8-lane gathers (lower/build.c gathered_row) or
 * through four scalar loads a step.  Which wins depends on the CPU more than on the
 * matrix: in a C model of both row loops at 2 threads, f32, the gathers took 0.53-0.57x
 * the scalar loop's time on FEM rows (bcsstk16, bcsstk13) and 0.49-0.55x on power-law
 * rows (wiki-Vote, email-Enron) on an AVX-512 Xeon (2026-11-26), but 1.2-1.5x on an
 * AVX-512 EPYC (2026-11-25).  A table of vendors and models would go stale (microcode
 * mitigations make gathers several times slower on some parts), so the compiler times
 * both loops on a small synthetic row: x of 128 KiB (past L1, in L2) read at 32 Ki random
 * coordinates, best of seven alternating passes each (about 0.3 ms in all), and counts
 * gathers as fast when they take at most 4/5 of the scalar loop's time.
 *
 * The gather loop is compiled for AVX-512VL by a function attribute and runs only where
 * the CPU reports it (so never under valgrind, whose CPU has no AVX-512); the scalar
 * loop is compiled for the baseline target, which has no gather instruction.
 */
#include "driver_internal.h"

#include <stdint.h>

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

enum { PROBE_X = 32 << 10, PROBE_N = 32 << 10, PROBE_PASSES = 7 };

__attribute__((noinline)) static float probe_scalar(const float *x, const int32_t *crd,
                                                    const float *v, int64_t n)
{
    float a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (int64_t p = 0; p + 4 <= n; p += 4) {
        a0 += v[p] * x[crd[p]];
        a1 += v[p + 1] * x[crd[p + 1]];
        a2 += v[p + 2] * x[crd[p + 2]];
        a3 += v[p + 3] * x[crd[p + 3]];
    }
    return (a0 + a1) + (a2 + a3);
}

__attribute__((noinline, target("avx2,fma,avx512f,avx512vl"))) static float
probe_gather(const float *x, const int32_t *crd, const float *v, int64_t n)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (int64_t p = 0; p + 16 <= n; p += 16) {
        __m256i c0 = _mm256_loadu_si256((const __m256i *)(const void *)(crd + p));
        __m256i c1 = _mm256_loadu_si256((const __m256i *)(const void *)(crd + p + 8));
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(v + p), _mm256_i32gather_ps(x, c0, 4), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(v + p + 8), _mm256_i32gather_ps(x, c1, 4), a1);
    }
    float s[8];
    _mm256_storeu_ps(s, _mm256_add_ps(a0, a1));
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

sc_status sc_drv_fast_gathers(const sc_ctx *ctx, bool *fast, sc_error *err)
{
    *fast = false;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512vl"))
        return SC_OK;
    float *x = sc_calloc(ctx, PROBE_X + PROBE_N, sizeof *x, err);
    int32_t *crd = x ? sc_calloc(ctx, PROBE_N, sizeof *crd, err) : NULL;
    if (!crd) {
        sc_free(ctx, x);
        return SC_NOMEM;
    }
    float *v = x + PROBE_X;
    uint32_t r = 12345u;
    for (int64_t i = 0; i < PROBE_X; i++)
        x[i] = (float)(i & 7);
    for (int64_t p = 0; p < PROBE_N; p++) {
        r = r * 1664525u + 1013904223u;
        crd[p] = (int32_t)((r >> 8) % PROBE_X);
        v[p] = 1.0f;
    }
    double best[2] = {1e30, 1e30};
    volatile float sink = 0;
    for (int pass = 0; pass < PROBE_PASSES; pass++)
        for (int k = 0; k < 2; k++) {
            double t = sc_drv_now_us();
            sink += k ? probe_gather(x, crd, v, PROBE_N) : probe_scalar(x, crd, v, PROBE_N);
            t = sc_drv_now_us() - t;
            best[k] = t < best[k] ? t : best[k];
        }
    (void)sink;
    sc_free(ctx, x);
    sc_free(ctx, crd);
    *fast = best[1] * 5 <= best[0] * 4;
    return SC_OK;
}
#else
sc_status sc_drv_fast_gathers(const sc_ctx *ctx, bool *fast, sc_error *err)
{
    (void)ctx;
    (void)err;
    *fast = false;
    return SC_OK;
}
#endif
