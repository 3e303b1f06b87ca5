/*
 * emit.c — the one C emitter: loop IR → C text with the sc_rt_kernel ABI.
 *
 * The text includes "scorch_rt.h", defines a few static helpers (allocation through
 * env with a size-overflow check, with or without zero fill, coordinate sorts, two-level
 * coordinate bitmaps, the vector types of the C compiler's vector extension (full, half
 * and quarter vectors of the function's width), their lane sums, and moves of a
 * vector's first n lanes) and one exported function.
 * Owned buffers are declared NULL at the top and freed on the single failure path, which
 * also clears out's arrays and copies the message into env->msg.  Scalars are int64_t or
 * the kernel's value type; operand arrays are const restrict pointers; vector loads and
 * stores go through unaligned views.
 */
#include "sc_cg.h"

#include <stdio.h>
#include <string.h>

#define STR(x) #x
#define XSTR(x) STR(x) /* a macro's value as a string literal */

/* The helpers every kernel text starts with, in pieces (ISO C caps a string literal). */
static const char PRELUDE_HEAD[] =
    "#include \"scorch_rt.h\"\n"
    "#include <string.h>\n"
    "#ifdef _OPENMP\n#include <omp.h>\n#endif\n\n"
    "static inline int64_t sc_min(int64_t a, int64_t b) { return a < b ? a : b; }\n"
    "static inline int64_t sc_max(int64_t a, int64_t b) { return a > b ? a : b; }\n";

static const char *const PRELUDE[] = {
    /* a loop the C compiler must not vectorize (IR "scalar"): a pragma before it where
     * the compiler has one, an empty asm statement in its body otherwise (gcc < 14 has no
     * per-loop switch; its vectorizer gives up on a loop with an asm statement) */
    "#if defined(__clang__)\n"
    "#define SC_NOVEC _Pragma(\"clang loop vectorize(disable)\")\n#define SC_NOVEC_BODY\n"
    "#elif defined(__GNUC__) && __GNUC__ >= 14\n"
    "#define SC_NOVEC _Pragma(\"GCC novector\")\n#define SC_NOVEC_BODY\n"
    "#else\n"
    "#define SC_NOVEC\n#define SC_NOVEC_BODY __asm__(\"\");\n"
    "#endif\n"
    "static void *sc_k_alloc_raw(sc_rt_env *env, int64_t n, size_t size)\n{\n"
    "    if (n < 0 || (uint64_t)n > (SIZE_MAX - 64) / size)\n        return NULL;\n"
    "    return env->alloc(env->user, n ? (size_t)n * size : size);\n}\n"
    "static void *sc_k_alloc(sc_rt_env *env, int64_t n, size_t size)\n{\n"
    "    void *p = sc_k_alloc_raw(env, n, size);\n"
    "    if (p)\n        memset(p, 0, n ? (size_t)n * size : size);\n    return p;\n}\n"
    "static void sc_k_free(sc_rt_env *env, void *p)\n{\n    if (p)\n        env->free(env->user, p);\n}\n"
    "#define SC_K_SORT(name, T)                                                     \\\n"
    "static void name(T *a, int64_t n)                                              \\\n"
    "{                                                                              \\\n"
    "    while (n > 24) {                                                           \\\n"
    "        T m = a[n / 2], x = a[0], z = a[n - 1];                                \\\n"
    "        T piv = x < m ? (m < z ? m : (x < z ? z : x)) : (x < z ? x : (m < z ? z : m)); \\\n"
    "        int64_t i = 0, j = n - 1;                                              \\\n"
    "        for (;;) {                                                             \\\n"
    "            while (a[i] < piv) i++;                                            \\\n"
    "            while (a[j] > piv) j--;                                            \\\n"
    "            if (i >= j) break;                                                 \\\n"
    "            T t = a[i]; a[i] = a[j]; a[j] = t; i++; j--;                       \\\n"
    "        }                                                                      \\\n"
    "        if (j + 1 < n - j - 1) { name(a, j + 1); a += j + 1; n -= j + 1; }     \\\n"
    "        else { name(a + j + 1, n - j - 1); n = j + 1; }                        \\\n"
    "    }                                                                          \\\n"
    "    for (int64_t i = 1; i < n; i++) {                                          \\\n"
    "        T v = a[i]; int64_t k = i - 1;                                         \\\n"
    "        while (k >= 0 && a[k] > v) { a[k + 1] = a[k]; k--; }                   \\\n"
    "        a[k + 1] = v;                                                          \\\n"
    "    }                                                                          \\\n"
    "}\n"
    "SC_K_SORT(sc_k_sort, int64_t)\n"
    "SC_K_SORT(sc_k_sort32, int32_t)\n",
    /* Two-level coordinate bitmaps (MARK / COLLECT): bit c of b0, bit c / 64 of b1. */
    "static inline int sc_k_mark(uint64_t *restrict b0, uint64_t *restrict b1, int64_t c)\n{\n"
    "    uint64_t bit = (uint64_t)1 << (c & 63);\n"
    "    if (b0[c >> 6] & bit)\n        return 0;\n"
    "    b0[c >> 6] |= bit;\n"
    "    b1[c >> 12] |= (uint64_t)1 << ((c >> 6) & 63);\n"
    "    return 1;\n}\n"
    /* the same without a branch: whether c was new, as 0 or 1 */
    "static inline int64_t sc_k_mark_new(uint64_t *restrict b0, uint64_t *restrict b1, int64_t c)\n{\n"
    "    uint64_t bit = (uint64_t)1 << (c & 63), w = b0[c >> 6];\n"
    "    b0[c >> 6] = w | bit;\n"
    "    b1[c >> 12] |= (uint64_t)1 << ((c >> 6) & 63);\n"
    "    return !(w & bit);\n}\n"
    /* a[0..n) holds every marked coordinate once (in [0, N)): unmark them all and, when
     * sort, order them, by a scan of the summary words they span when that span is short
     * next to n (cost span + n; all of them, with no pass for the span, when they are that
     * few), else by sorting (n log n) and clearing the words they hit. */
    "#define SC_K_COLLECT(name, T, sortfn)                                         \\\n"
    "static void name(T *restrict a, int64_t n, uint64_t *restrict b0, uint64_t *restrict b1, int sort, \\\n"
    "                 int64_t N)                                                   \\\n"
    "{                                                                              \\\n"
    "    if (n <= 0) return;                                                        \\\n"
    "    if (sort && n > 1) {                                                       \\\n"
    "        int64_t s0 = 0, s1 = (N - 1) >> 12;                                    \\\n"
    "        if (s1 > 4 * n) {                                                      \\\n"
    "            T lo = a[0], hi = a[0];                                            \\\n"
    "            for (int64_t i = 1; i < n; i++) {                                  \\\n"
    "                lo = a[i] < lo ? a[i] : lo; hi = a[i] > hi ? a[i] : hi;        \\\n"
    "            }                                                                  \\\n"
    "            s0 = (int64_t)lo >> 12;                                            \\\n"
    "            s1 = (int64_t)hi >> 12;                                            \\\n"
    "        }                                                                      \\\n"
    "        if (s1 - s0 <= 4 * n) {                                                \\\n"
    "            int64_t t = 0;                                                     \\\n"
    "            for (int64_t j = s0; j <= s1; j++) {                               \\\n"
    "                uint64_t x = b1[j];                                            \\\n"
    "                b1[j] = 0;                                                     \\\n"
    "                while (x) {                                                    \\\n"
    "                    int64_t w = j * 64 + __builtin_ctzll(x);                   \\\n"
    "                    uint64_t y = b0[w];                                        \\\n"
    "                    x &= x - 1;                                                \\\n"
    "                    b0[w] = 0;                                                 \\\n"
    "                    while (y) {                                                \\\n"
    "                        a[t++] = (T)(w * 64 + __builtin_ctzll(y));             \\\n"
    "                        y &= y - 1;                                            \\\n"
    "                    }                                                          \\\n"
    "                }                                                              \\\n"
    "            }                                                                  \\\n"
    "            return;                                                            \\\n"
    "        }                                                                      \\\n"
    "        sortfn(a, n);                                                          \\\n"
    "    }                                                                          \\\n"
    "    for (int64_t i = 0; i < n; i++) {                                          \\\n"
    "        b0[a[i] >> 6] = 0;                                                     \\\n"
    "        b1[a[i] >> 12] = 0;                                                    \\\n"
    "    }                                                                          \\\n"
    "}\n"
    "SC_K_COLLECT(sc_k_collect, int64_t, sc_k_sort)\n"
    "SC_K_COLLECT(sc_k_collect32, int32_t, sc_k_sort32)\n",
    /* Byte flags (SCAN): every set flag (value 1) lies in [lo, hi]; write their
     * coordinates ascending into a, clear them, return how many.  Eight flags per word
     * (the buffer has 8 bytes to spare past its last coordinate); a set flag is one bit,
     * the word's lowest set bit / 8 its byte on a little-endian machine (else byte by byte). */
    "#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__\n"
    "#define SC_K_SCAN_WORD(T) \\\n"
    "        for (; w; w &= w - 1) a[t++] = (T)(c + (__builtin_ctzll(w) >> 3));\n"
    "#else\n"
    "#define SC_K_SCAN_WORD(T) \\\n"
    "        for (int b = 0; b < 8; b++) if (((const uint8_t *)&w)[b]) a[t++] = (T)(c + b);\n"
    "#endif\n"
    "#define SC_K_SCAN(name, T)                                                     \\\n"
    "static int64_t name(T *restrict a, uint8_t *restrict f, int64_t lo, int64_t hi) \\\n"
    "{                                                                              \\\n"
    "    int64_t t = 0;                                                             \\\n"
    "    for (int64_t c = lo; c <= hi; c += 8) {                                    \\\n"
    "        uint64_t w;                                                            \\\n"
    "        memcpy(&w, f + c, 8);                                                  \\\n"
    "        if (!w) continue;                                                      \\\n"
    "        memset(f + c, 0, 8);                                                   \\\n"
    "        SC_K_SCAN_WORD(T)                                                      \\\n"
    "    }                                                                          \\\n"
    "    return t;                                                                  \\\n"
    "}\n"
    "SC_K_SCAN(sc_k_scan, int64_t)\n"
    "SC_K_SCAN(sc_k_scan32, int32_t)\n"
    /* SORTSUM: the pairs (c, v)[lo, hi) ordered by c by insertion (stable: equal
     * coordinates keep their order), then equal coordinates merged, their values added
     * in that order; returns the new end. */
    "#define SC_K_SORTSUM(name, T, V)                                               \\\n"
    "static int64_t name(T *restrict c, V *restrict v, int64_t lo, int64_t hi)       \\\n"
    "{                                                                              \\\n"
    "    for (int64_t i = lo + 1; i < hi; i++) {                                    \\\n"
    "        T x = c[i];                                                            \\\n"
    "        V y = v[i];                                                            \\\n"
    "        int64_t j = i;                                                         \\\n"
    "        for (; j > lo && c[j - 1] > x; j--) {                                  \\\n"
    "            c[j] = c[j - 1];                                                   \\\n"
    "            v[j] = v[j - 1];                                                   \\\n"
    "        }                                                                      \\\n"
    "        c[j] = x;                                                              \\\n"
    "        v[j] = y;                                                              \\\n"
    "    }                                                                          \\\n"
    "    int64_t u = lo;                                                            \\\n"
    "    for (int64_t i = lo; i < hi; i++) {                                        \\\n"
    "        if (u > lo && c[u - 1] == c[i]) {                                      \\\n"
    "            v[u - 1] += v[i];                                                  \\\n"
    "        } else {                                                               \\\n"
    "            c[u] = c[i];                                                       \\\n"
    "            v[u] = v[i];                                                       \\\n"
    "            u++;                                                               \\\n"
    "        }                                                                      \\\n"
    "    }                                                                          \\\n"
    "    return u;                                                                  \\\n"
    "}\n"
    "SC_K_SORTSUM(sc_k_sortsum32_f32, int32_t, float)\n"
    "SC_K_SORTSUM(sc_k_sortsum32_f64, int32_t, double)\n"
    "SC_K_SORTSUM(sc_k_sortsum64_f32, int64_t, float)\n"
    "SC_K_SORTSUM(sc_k_sortsum64_f64, int64_t, double)\n"
    "SC_K_SORTSUM(sc_k_sortsum32_i32, int32_t, uint32_t)\n"
    "SC_K_SORTSUM(sc_k_sortsum32_i64, int32_t, uint64_t)\n"
    "SC_K_SORTSUM(sc_k_sortsum64_i32, int64_t, uint32_t)\n"
    "SC_K_SORTSUM(sc_k_sortsum64_i64, int64_t, uint64_t)\n",
    /* SORTSUM with int32 coordinates and 32-bit values (a one-pass SpGEMM's rows of up to
     * 128 products) where AVX-512 (VL) and gcc's vector builtins are there: no branch per
     * entry.  32-bit keys (coordinate << 7 | the entry's place) through a bitonic network
     * of up to 16 vectors of 8, the values gathered by place after them (coordinates of
     * 2^25 - 1 or more: the insertion sort).  Then each run of equal coordinates summed
     * into its last lane by three shifted masked adds (a run of two adds as the insertion
     * sort does; longer ones pairwise), those lanes kept by a compressing store.  The
     * vectors are 32 bytes: a 512-bit instruction anywhere in a kernel lowers the core's
     * clock for the whole call (a few such sorts slowed wiki-Vote's product 7-12 %).
     * Elsewhere the insertion sort. */
    "#if defined(__AVX512F__) && defined(__AVX512VL__) && defined(__GNUC__) && !defined(__clang__)\n"
    "typedef int32_t sc_k_d8 __attribute__((vector_size(32)));\n"
    "typedef uint32_t sc_k_w8 __attribute__((vector_size(32)));\n"
    "typedef float sc_k_s8 __attribute__((vector_size(32)));\n"
    "/* The lanes of v meet those of the permutation, the lanes of mask hi keeping the greater\n"
    " * key (unsigned). */\n"
    "#define SC_K_CX(v, hi, ...)                                                    \\\n"
    "    {                                                                          \\\n"
    "        sc_k_d8 o_ = __builtin_shuffle(v, (sc_k_d8){__VA_ARGS__});             \\\n"
    "        sc_k_d8 t_ = __builtin_ia32_pminud256_mask(v, o_, v, (unsigned char)~(hi)); \\\n"
    "        v = __builtin_ia32_pmaxud256_mask(v, o_, t_, (unsigned char)(hi));     \\\n"
    "    }\n"
    "#define SC_K_REV8 7, 6, 5, 4, 3, 2, 1, 0\n"
    "/* a bitonic vector ascending: lanes 4, 2, 1 apart, the lower keeping the smaller key */\n"
    "static inline sc_k_d8 sc_k_clean8(sc_k_d8 v)\n"
    "{\n"
    "    SC_K_CX(v, 0xf0, 4, 5, 6, 7, 0, 1, 2, 3)\n"
    "    SC_K_CX(v, 0xcc, 2, 3, 0, 1, 6, 7, 4, 5)\n"
    "    SC_K_CX(v, 0xaa, 1, 0, 3, 2, 5, 4, 7, 6)\n"
    "    return v;\n"
    "}\n"
    "/* a vector of 8 keys ascending: sorted runs of 1, 2, 4 merged, each run's lower half\n"
    " * meeting its upper half mirrored (lane i meets i ^ (2s - 1)), then lanes s/2 .. 1 apart */\n"
    "static inline sc_k_d8 sc_k_sort8v(sc_k_d8 v)\n"
    "{\n"
    "    SC_K_CX(v, 0xaa, 1, 0, 3, 2, 5, 4, 7, 6)\n"
    "    SC_K_CX(v, 0xcc, 3, 2, 1, 0, 7, 6, 5, 4)\n"
    "    SC_K_CX(v, 0xaa, 1, 0, 3, 2, 5, 4, 7, 6)\n"
    "    SC_K_CX(v, 0xf0, SC_K_REV8)\n"
    "    SC_K_CX(v, 0xcc, 2, 3, 0, 1, 6, 7, 4, 5)\n"
    "    SC_K_CX(v, 0xaa, 1, 0, 3, 2, 5, 4, 7, 6)\n"
    "    return v;\n"
    "}\n"
    "static inline unsigned char sc_k_first8(int64_t m) /* the mask of min(m, 8) lanes */\n"
    "{\n"
    "    return (unsigned char)(m >= 8 ? 0xff : m <= 0 ? 0 : (1u << m) - 1u);\n"
    "}\n",
    "/* Keys (coordinate << 7 | the entry's place) of the n <= 8R entries c[0..n), lanes past\n"
    " * n all ones, ascending in R vectors of 8 (R = 1, 2, 4, 8 or 16, a constant where\n"
    " * inlined): each vector by the network of 8, then blocks of b = 2 .. R vectors merged:\n"
    " * the block's lower half meets its upper half mirrored, then each vector the ones b/4 ..\n"
    " * 1 on, then lanes 4, 2, 1 apart.  False where a coordinate is SC_K_SORT_MAX or more. */\n"
    "#define SC_K_PLACE 7 /* the bits of a key's place: SC_IR_SORT_VECTOR_MOST entries */\n"
    "#define SC_K_SORT_MAX ((1 << (32 - SC_K_PLACE)) - 1)\n"
    "static inline __attribute__((always_inline)) int sc_k_sortk(sc_k_d8 *k, const int32_t *c,\n"
    "                                                            int64_t n, int R)\n"
    "{\n"
    "    unsigned char big = 0;\n"
    "    for (int r = 0; r < R; r++) {\n"
    "        unsigned char f = sc_k_first8(n - 8 * r);\n"
    "        sc_k_d8 x = __builtin_ia32_loaddqusi256_mask(c + 8 * r, (sc_k_d8){0}, f);\n"
    "        big |= __builtin_ia32_pcmpgtd256_mask(x, (sc_k_d8){0} + (SC_K_SORT_MAX - 1), 0xff);\n"
    "        x = (sc_k_d8)((sc_k_w8)x << SC_K_PLACE) |\n"
    "            ((sc_k_d8){0, 1, 2, 3, 4, 5, 6, 7} + 8 * r);\n"
    "        k[r] = sc_k_sort8v(__builtin_ia32_blendmd_256_mask((sc_k_d8){0} - 1, x, f));\n"
    "    }\n"
    "    if (__builtin_expect(big != 0, 0))\n"
    "        return 0;\n"
    "    for (int b = 2; b <= R; b *= 2) {\n"
    "        for (int s = 0; s < R; s += b)\n"
    "            for (int r = 0; r < b / 2; r++) {\n"
    "                sc_k_d8 *q = &k[s + b - 1 - r], a = k[s + r];\n"
    "                sc_k_d8 w = __builtin_shuffle(*q, (sc_k_d8){SC_K_REV8});\n"
    "                k[s + r] = __builtin_ia32_pminud256_mask(a, w, a, 0xff);\n"
    "                *q = __builtin_shuffle(__builtin_ia32_pmaxud256_mask(a, w, a, 0xff),\n"
    "                                       (sc_k_d8){SC_K_REV8});\n"
    "            }\n"
    "        for (int j = b / 4; j >= 1; j /= 2)\n"
    "            for (int r = 0; r < R; r++)\n"
    "                if (!(r & j)) {\n"
    "                    sc_k_d8 a = k[r];\n"
    "                    k[r] = __builtin_ia32_pminud256_mask(a, k[r + j], a, 0xff);\n"
    "                    k[r + j] = __builtin_ia32_pmaxud256_mask(a, k[r + j], a, 0xff);\n"
    "                }\n"
    "        for (int r = 0; r < R; r++)\n"
    "            k[r] = sc_k_clean8(k[r]);\n"
    "    }\n"
    "    return 1;\n"
    "}\n"
    "/* vs[i] += vs[i - s] where lane i - s holds the same key (ks sorted: then so does every\n"
    " * lane between; the lanes of m are those at least s in): three steps sum each run into\n"
    " * its last lane */\n"
    "#define SC_K_RUNSUM(vs, ks, VT, m, ...)                                        \\\n"
    "    {                                                                          \\\n"
    "        const sc_k_d8 d_ = {__VA_ARGS__};                                      \\\n"
    "        VT s_ = vs + __builtin_shuffle(vs, d_);                                \\\n"
    "        vs = (VT)__builtin_ia32_blendmd_256_mask(                              \\\n"
    "            (sc_k_d8)vs, (sc_k_d8)s_, __builtin_ia32_pcmpeqd256_mask(__builtin_shuffle(ks, d_), ks, m)); \\\n"
    "    }\n",
    "/* SORTSUM of at most 128 entries with int32 coordinates and 32-bit values (VT: 8 of\n"
    " * them; STORE their compressing store; FALLBACK the insertion sort, for coordinates of\n"
    " * SC_K_SORT_MAX or more): the keys sorted (sc_k_sortk), every value gathered by its\n"
    " * key's place before any is stored, then 8 at a time each run of equal coordinates\n"
    " * summed into its last lane (lane 0 first taking the sum carried from the vector before\n"
    " * where its run goes on), that lane kept unless the run goes on past it.  Equal\n"
    " * coordinates add pairwise in the order of their entries. */\n"
    "#define SC_K_SORTSUMV_R(name, V, VT, STORE, FALLBACK)                          \\\n"
    "static inline __attribute__((always_inline)) int64_t name##_r(int32_t *c, V *v, int64_t lo, \\\n"
    "                                                              int64_t n, int R) \\\n"
    "{                                                                              \\\n"
    "    sc_k_d8 k[16];                                                             \\\n"
    "    VT x[16];                                                                  \\\n"
    "    if (!sc_k_sortk(k, c + lo, n, R))                                          \\\n"
    "        return FALLBACK(c, v, lo, lo + n);                                     \\\n"
    "    for (int r = 0; r < R; r++)                                                \\\n"
    "        x[r] = (VT)__builtin_ia32_gather3siv8si((sc_k_d8){0}, (const int *)(v + lo), \\\n"
    "                                                k[r] & ((1 << SC_K_PLACE) - 1),         \\\n"
    "                                                sc_k_first8(n - 8 * r), 4);             \\\n"
    "    int64_t u = lo;                                                            \\\n"
    "    int32_t ck = -1;                                                           \\\n"
    "    V carry = 0;                                                               \\\n"
    "    for (int r = 0; r < R; r++) {                                              \\\n"
    "        sc_k_d8 ks = (sc_k_d8)((sc_k_w8)k[r] >> SC_K_PLACE);                   \\\n"
    "        VT vs = x[r];                                                          \\\n"
    "        if (ks[0] == ck)                                                       \\\n"
    "            vs[0] += carry;                                                    \\\n"
    "        SC_K_RUNSUM(vs, ks, VT, 0xfe, 0, 0, 1, 2, 3, 4, 5, 6)                  \\\n"
    "        SC_K_RUNSUM(vs, ks, VT, 0xfc, 0, 1, 0, 1, 2, 3, 4, 5)                  \\\n"
    "        SC_K_RUNSUM(vs, ks, VT, 0xf0, 0, 1, 2, 3, 0, 1, 2, 3)                  \\\n"
    "        sc_k_d8 nk = __builtin_shuffle(ks, (sc_k_d8){1, 2, 3, 4, 5, 6, 7, 0});  \\\n"
    "        nk[7] = r + 1 < R ? (int32_t)((uint32_t)k[r + 1][0] >> SC_K_PLACE) : 0x7fffffff; \\\n"
    "        unsigned char keep = (unsigned char)(~__builtin_ia32_pcmpeqd256_mask(ks, nk, 0xff) & \\\n"
    "                                             sc_k_first8(n - 8 * r));          \\\n"
    "        __builtin_ia32_compressstoresi256_mask((sc_k_d8 *)(c + u), ks, keep);   \\\n"
    "        STORE(v + u, vs, keep);                                                \\\n"
    "        u += __builtin_popcount(keep);                                         \\\n"
    "        ck = ks[7];                                                            \\\n"
    "        carry = vs[7];                                                         \\\n"
    "    }                                                                          \\\n"
    "    return u;                                                                  \\\n"
    "}\n",
    "#define SC_K_SORTSUMV(name, V, VT, STORE, FALLBACK)                            \\\n"
    "    SC_K_SORTSUMV_R(name, V, VT, STORE, FALLBACK)                              \\\n"
    "static int64_t name(int32_t *restrict c, V *restrict v, int64_t lo, int64_t hi) \\\n"
    "{                                                                              \\\n"
    "    int64_t n = hi - lo;                                                       \\\n"
    "    if (n < 2)                                                                 \\\n"
    "        return hi;                                                             \\\n"
    "    if (n <= 8)                                                                \\\n"
    "        return name##_r(c, v, lo, n, 1);                                       \\\n"
    "    if (n <= 16)                                                               \\\n"
    "        return name##_r(c, v, lo, n, 2);                                       \\\n"
    "    if (n <= 32)                                                               \\\n"
    "        return name##_r(c, v, lo, n, 4);                                       \\\n"
    "    if (n <= 64)                                                               \\\n"
    "        return name##_r(c, v, lo, n, 8);                                       \\\n"
    "    return name##_r(c, v, lo, n, 16);                                          \\\n"
    "}\n"
    "#define SC_K_CSTORE_F32(p, x, m) __builtin_ia32_compressstoresf256_mask((sc_k_s8 *)(p), x, m)\n"
    "#define SC_K_CSTORE_U32(p, x, m) \\\n"
    "    __builtin_ia32_compressstoresi256_mask((sc_k_d8 *)(p), (sc_k_d8)(x), m)\n"
    "SC_K_SORTSUMV(sc_k_sortsumv_32_f32, float, sc_k_s8, SC_K_CSTORE_F32, sc_k_sortsum32_f32)\n"
    "SC_K_SORTSUMV(sc_k_sortsumv_32_i32, uint32_t, sc_k_w8, SC_K_CSTORE_U32, sc_k_sortsum32_i32)\n"
    "#define sc_k_sortsum8_32_f32 sc_k_sortsumv_32_f32\n"
    "#define sc_k_sortsum8_32_i32 sc_k_sortsumv_32_i32\n"
    "#else\n"
    "#define sc_k_sortsum8_32_f32 sc_k_sortsum32_f32\n"
    "#define sc_k_sortsum8_32_i32 sc_k_sortsum32_i32\n"
    "#define sc_k_sortsumv_32_f32 sc_k_sortsum32_f32\n"
    "#define sc_k_sortsumv_32_i32 sc_k_sortsum32_i32\n"
    "#endif\n",
    /* Whether a parallel loop of n iterations doing `work` in all is worth waking the
     * other threads for (a balanced loop); one of n iterations each of work w
     * (sc_ir_for_weighed) also from SC_IR_PAR_MIN iterations. */
    "static inline int sc_k_par_worth(int64_t n, int64_t work)\n{\n"
    "    return n >= 2 && work >= " XSTR(SC_IR_PAR_WORK) ";\n}\n"
    "static inline int sc_k_par_weighed(int64_t n, int64_t w)\n{\n"
    "    return n >= " XSTR(SC_IR_PAR_MIN) " || sc_k_par_worth(n, n * w);\n}\n"
    /* The first row r in [lo, hi] whose rows before it (from lo) weigh at least t/nt of
     * all, row r weighing pos[r + 1] - pos[r] + 1 (so the cumulative weight strictly
     * grows and consecutive threads' ranges tile [lo, hi) exactly). */
    "static inline int64_t sc_k_split32(const int32_t *pos, int64_t lo, int64_t hi, int64_t t, int64_t nt)\n{\n"
    "    int64_t b = pos[lo], tot = (int64_t)pos[hi] - b + (hi - lo);\n"
    "    int64_t want = tot / nt * t + tot % nt * t / nt, a = lo;\n"
    "    while (a < hi) {\n"
    "        int64_t m = a + (hi - a) / 2;\n"
    "        if ((int64_t)pos[m] - b + (m - lo) < want) a = m + 1; else hi = m;\n"
    "    }\n    return a;\n}\n"
    "static inline int64_t sc_k_split64(const int64_t *pos, int64_t lo, int64_t hi, int64_t t, int64_t nt)\n{\n"
    "    int64_t b = pos[lo], tot = pos[hi] - b + (hi - lo);\n"
    "    int64_t want = tot / nt * t + tot % nt * t / nt, a = lo;\n"
    "    while (a < hi) {\n"
    "        int64_t m = a + (hi - a) / 2;\n"
    "        if (pos[m] - b + (m - lo) < want) a = m + 1; else hi = m;\n"
    "    }\n    return a;\n}\n"
    /* The start (end: 1, the end) of this thread's share of positions [lo, hi), moved
     * past a run of equal coordinates it would split (sc_ir_runsplit). */
    "#ifdef _OPENMP\n"
    "#define SC_K_THREADS(t, nt) t += omp_get_thread_num(); nt = omp_get_num_threads();\n"
    "#else\n"
    "#define SC_K_THREADS(t, nt)\n"
    "#endif\n"
    "#define SC_K_RUNSPLIT(name, T)                                                 \\\n"
    "static inline int64_t name(const T *c, int64_t lo, int64_t hi, int end)        \\\n"
    "{                                                                              \\\n"
    "    int64_t t = end, nt = 1;                                                   \\\n"
    "    SC_K_THREADS(t, nt)                                                        \\\n"
    "    int64_t n = hi - lo, p = lo + n / nt * t + n % nt * t / nt;                \\\n"
    "    while (p > lo && p < hi && c[p] == c[p - 1])                               \\\n"
    "        p++;                                                                   \\\n"
    "    return p;                                                                  \\\n"
    "}\n"
    "SC_K_RUNSPLIT(sc_k_runsplit32, int32_t)\n"
    "SC_K_RUNSPLIT(sc_k_runsplit64, int64_t)\n"
    /* The end of the run of crd[lo] in the ordered c[lo, hi) (sc_ir_runend): steps
     * doubling while they land in the run, then halving between the last position
     * in it (a) and the first past it (b). */
    "#define SC_K_RUNEND(name, T)                                                   \\\n"
    "static inline int64_t name(const T *c, int64_t lo, int64_t hi)                 \\\n"
    "{                                                                              \\\n"
    "    T v = c[lo];                                                               \\\n"
    "    int64_t a = lo, b = lo + 1, step = 1;                                      \\\n"
    "    while (b < hi && c[b] == v) {                                              \\\n"
    "        a = b;                                                                 \\\n"
    "        step *= 2;                                                             \\\n"
    "        b = hi - a > step ? a + step : hi;                                     \\\n"
    "    }                                                                          \\\n"
    "    while (b - a > 1) {                                                        \\\n"
    "        int64_t m = a + (b - a) / 2;                                           \\\n"
    "        if (c[m] == v) a = m; else b = m;                                      \\\n"
    "    }                                                                          \\\n"
    "    return b;                                                                  \\\n"
    "}\n"
    "SC_K_RUNEND(sc_k_runend32, int32_t)\n"
    "SC_K_RUNEND(sc_k_runend64, int64_t)\n",
    /* The row of position p from row r on, p < pos[end] (sc_ir_rowof).  With AVX-512 the
     * ends of the next W rows (masked at end) in one compare: those at most p are a
     * prefix, as pos never decreases, so their count is the row's distance from r; where
     * all W are (W or more empty rows: rare), a step a row from there.  Else a step a row.
     * (A loop of compares instead of that tail measured 12 % slower on bcspwr10.) */
    "#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)\n"
    "#define SC_K_ROWOF(name, T, VT, M, W, LOAD, CMP)                               \\\n"
    "static inline int64_t name(const T *pos, int64_t r, int64_t p, int64_t end)    \\\n"
    "{                                                                              \\\n"
    "    typedef VT vt_ __attribute__((vector_size(64)));                           \\\n"
    "    const M all = (M)~(M)0;                                                    \\\n"
    "    M m = end - r >= W ? all : (M)((1u << (end - r)) - 1u);                    \\\n"
    "    vt_ e = LOAD((const VT *)(pos + r + 1), (vt_){0}, m);                      \\\n"
    "    M le = (M)CMP(e, (vt_){0} + (VT)p, 2, m);                                  \\\n"
    "    if (__builtin_expect(le == all, 0)) {                                      \\\n"
    "        r += W;                                                                \\\n"
    "        while (pos[r + 1] <= p)                                                \\\n"
    "            r++;                                                               \\\n"
    "        return r;                                                              \\\n"
    "    }                                                                          \\\n"
    "    return r + __builtin_popcount(le);                                         \\\n"
    "}\n"
    "SC_K_ROWOF(sc_k_rowof32, int32_t, int, unsigned short, 16, __builtin_ia32_loaddqusi512_mask,\n"
    "           __builtin_ia32_cmpd512_mask)\n"
    "SC_K_ROWOF(sc_k_rowof64, int64_t, long long, unsigned char, 8, __builtin_ia32_loaddqudi512_mask,\n"
    "           __builtin_ia32_cmpq512_mask)\n"
    "#else\n"
    "#define SC_K_ROWOF(name, T)                                                    \\\n"
    "static inline int64_t name(const T *pos, int64_t r, int64_t p, int64_t end)    \\\n"
    "{                                                                              \\\n"
    "    (void)end;                                                                 \\\n"
    "    while (pos[r + 1] <= p)                                                    \\\n"
    "        r++;                                                                   \\\n"
    "    return r;                                                                  \\\n"
    "}\n"
    "SC_K_ROWOF(sc_k_rowof32, int32_t)\n"
    "SC_K_ROWOF(sc_k_rowof64, int64_t)\n"
    "#endif\n\n"};

/*
 * Moves of the first n lanes of half and quarter vectors, and masked gathers into them
 * (lane l < n: x[c[l]], the others 0; nothing read past c[n - 1]): one instruction each
 * with AVX-512VL, lane by lane elsewhere.  The lowering gathers only for 64-byte vectors
 * (sc_ir_vgather_n): 8 or 4 lanes of 4 bytes, 8, 4 or 2 lanes of 8, 32-bit coordinates
 * (the full 8-byte vectors' first-n-lane loads are vector_helpers').  The integer builtins
 * take and give vectors of signed lanes: cast from ours and back.
 */
static void partial_helpers(sc_cg_buf *b, int32_t bytes)
{
    if (bytes == 64) {
        sc_cg_printf(b, "#ifdef __AVX512VL__\n"
                        "typedef int32_t sc_vi32h __attribute__((vector_size(32)));\n"
                        "typedef int32_t sc_vi32q __attribute__((vector_size(16)));\n"
                        "typedef long long sc_vi64h __attribute__((vector_size(32)));\n"
                        "typedef long long sc_vi64q __attribute__((vector_size(16)));\n");
        /* per vector type: its C element type, the masked load's builtin, the pointer
         * cast and vector type it takes, the cast of its result to ours, the gather's
         * builtin, the coordinates' vector type and masked load, the element size */
        static const struct {
            const char *tag, *ct, *load, *ptr, *vt, *ours, *gather, *idx, *ild;
            int esz;
        } h[8] = {
            {"f32h", "float", "loadups256", "", "sc_vf32h", "", "gather3siv8sf", "sc_vi32h", "loaddqusi256", 4},
            {"f32q", "float", "loadups128", "", "sc_vf32q", "", "gather3siv4sf", "sc_vi32q", "loaddqusi128", 4},
            {"f64h", "double", "loadupd256", "", "sc_vf64h", "", "gather3siv4df", "sc_vi32q", "loaddqusi128", 8},
            {"f64q", "double", "loadupd128", "", "sc_vf64q", "", "gather3siv2df", "sc_vi32q", "loaddqusi128", 8},
            {"u32h", "uint32_t", "loaddqusi256", "(const int *)", "sc_vi32h", "(sc_vu32h)",
             "gather3siv8si", "sc_vi32h", "loaddqusi256", 4},
            {"u32q", "uint32_t", "loaddqusi128", "(const int *)", "sc_vi32q", "(sc_vu32q)",
             "gather3siv4si", "sc_vi32q", "loaddqusi128", 4},
            {"u64h", "uint64_t", "loaddqudi256", "(const long long *)", "sc_vi64h", "(sc_vu64h)",
             "gather3siv4di", "sc_vi32q", "loaddqusi128", 8},
            {"u64q", "uint64_t", "loaddqudi128", "(const long long *)", "sc_vi64q", "(sc_vu64q)",
             "gather3siv2di", "sc_vi32q", "loaddqusi128", 8},
        };
        for (int k = 0; k < 8; k++) {
            sc_cg_printf(b, "static inline sc_v%s sc_vloadn_%s(const %s *p, int64_t n)\n"
                            "{ return %s__builtin_ia32_%s_mask(%sp, (%s){0}, (unsigned char)SC_MASK(n)); }\n",
                         h[k].tag, h[k].tag, h[k].ct, h[k].ours, h[k].load, h[k].ptr, h[k].vt);
            sc_cg_printf(b, "static inline sc_v%s sc_vgathern_%s(const %s *x, const int32_t *c, int64_t n)\n"
                            "{\n    unsigned char k = (unsigned char)SC_MASK(n);\n"
                            "    return %s__builtin_ia32_%s((%s){0}, x, "
                            "__builtin_ia32_%s_mask(c, (%s){0}, k), k, %d);\n}\n",
                         h[k].tag, h[k].tag, h[k].ct, h[k].ours, h[k].gather, h[k].vt, h[k].ild,
                         h[k].idx, h[k].esz);
        }
        /* the full 8-byte vectors: 8 lanes, one gather */
        sc_cg_printf(b, "static inline sc_vf64 sc_vgathern_f64(const double *x, const int32_t *c, int64_t n)\n"
                        "{\n    unsigned char k = (unsigned char)SC_MASK(n);\n"
                        "    return __builtin_ia32_gathersiv8df((sc_vf64){0}, x, "
                        "__builtin_ia32_loaddqusi256_mask(c, (sc_vi32h){0}, k), k, 8);\n}\n"
                        "static inline sc_vu64 sc_vgathern_u64(const uint64_t *x, const int32_t *c, int64_t n)\n"
                        "{\n    unsigned char k = (unsigned char)SC_MASK(n);\n"
                        "    return (sc_vu64)__builtin_ia32_gathersiv8di((sc_vi64){0}, x, "
                        "__builtin_ia32_loaddqusi256_mask(c, (sc_vi32h){0}, k), k, 8);\n}\n"
                        "#else\n"
                        "static inline sc_vf64 sc_vgathern_f64(const double *x, const int32_t *c, int64_t n)\n"
                        "{ sc_vf64 v = {0}; for (int64_t i = 0; i < n; i++) v[i] = x[c[i]]; return v; }\n"
                        "static inline sc_vu64 sc_vgathern_u64(const uint64_t *x, const int32_t *c, int64_t n)\n"
                        "{ sc_vu64 v = {0}; for (int64_t i = 0; i < n; i++) v[i] = x[c[i]]; return v; }\n");
    }
    sc_cg_printf(b, "#define SC_VG(T, S)                                                           \\\n"
                    "static inline sc_v##S sc_vloadn_##S(const T *p, int64_t n)                    \\\n"
                    "{ sc_v##S v = {0}; for (int64_t i = 0; i < n; i++) v[i] = p[i]; return v; }   \\\n"
                    "static inline sc_v##S sc_vgathern_##S(const T *x, const int32_t *c, int64_t n) \\\n"
                    "{ sc_v##S v = {0}; for (int64_t i = 0; i < n; i++) v[i] = x[c[i]]; return v; }\n"
                    "SC_VG(float, f32h)\nSC_VG(float, f32q)\nSC_VG(double, f64h)\nSC_VG(double, f64q)\n"
                    "SC_VG(uint32_t, u32h)\nSC_VG(uint32_t, u32q)\nSC_VG(uint64_t, u64h)\nSC_VG(uint64_t, u64q)\n");
    if (bytes == 64)
        sc_cg_printf(b, "#endif\n");
}

/* The element types of vectors: each value type's tag (sc_v<tag> names its vectors), C
 * type and bytes; integer values are vectors of C's unsigned types, as their scalars. */
static const struct {
    sc_ir_type type;
    const char *tag, *ct;
    int esz;
} VEC_TYPES[4] = {
    {SC_IR_F32, "f32", "float", 4},
    {SC_IR_F64, "f64", "double", 8},
    {SC_IR_VI32, "u32", "uint32_t", 4},
    {SC_IR_VI64, "u64", "uint64_t", 8},
};

/*
 * The vector helpers, for vectors of `bytes` (fn->vec_bytes: 64 or 32): the full, half and
 * quarter vector types of each value type with their unaligned views; sc_vi32 / sc_vi64,
 * full vectors of signed lanes (shuffle masks, and what the integer builtins take); lane
 * sums by halving (a tree, not a chain of dependent additions); and moves of a vector's
 * first n lanes (1 <= n <= lanes) touching nothing past them: masked moves where the
 * target has them for this width (AVX-512F for 64 bytes; AVX for 32, floats only), lane by
 * lane elsewhere.
 */
static void vector_helpers(sc_cg_buf *b, int32_t bytes)
{
    static const char *const part[3] = {"", "h", "q"};
    sc_cg_printf(b, "/* vectors of %d bytes (the compiler's vector extension) and unaligned views */\n",
                 (int)bytes);
    for (int32_t k = 0; k < 3; k++)
        for (int t = 0; t < 4; t++)
            sc_cg_printf(b, "typedef %s sc_v%s%s __attribute__((vector_size(%d)));\n", VEC_TYPES[t].ct,
                         VEC_TYPES[t].tag, part[k], (int)(bytes >> k));
    for (int32_t k = 0; k < 3; k++)
        for (int t = 0; t < 4; t++)
            sc_cg_printf(b, "typedef %s sc_v%s%su __attribute__((vector_size(%d), aligned(%d), may_alias));\n",
                         VEC_TYPES[t].ct, VEC_TYPES[t].tag, part[k], (int)(bytes >> k), VEC_TYPES[t].esz);
    sc_cg_printf(b, "typedef int32_t sc_vi32 __attribute__((vector_size(%d)));\n"
                    "typedef long long sc_vi64 __attribute__((vector_size(%d)));\n",
                 (int)bytes, (int)bytes);
    for (int t = 0; t < 4; t++) {
        /* halve twice in vectors, then add the quarter's lanes pairwise */
        const char *ct = VEC_TYPES[t].ct, *tag = VEC_TYPES[t].tag;
        int32_t q = bytes / 4 / VEC_TYPES[t].esz;
        sc_cg_printf(b, "static inline %s sc_hsum_%s(sc_v%s v)\n{\n", ct, tag, tag);
        sc_cg_printf(b, "    sc_v%sh h[2];\n    sc_v%sq q[2];\n", tag, tag);
        sc_cg_printf(b, "    memcpy(h, &v, sizeof h);\n    h[0] += h[1];\n");
        sc_cg_printf(b, "    memcpy(q, &h[0], sizeof q);\n    q[0] += q[1];\n");
        const char *qsum = q == 4 ? "(q[0][0] + q[0][2]) + (q[0][1] + q[0][3])"
                                  : q == 2 ? "q[0][0] + q[0][1]" : "q[0][0]";
        sc_cg_printf(b, "    return %s;\n}\n", qsum);
        /* the half and quarter vectors' sums: the same from the second halving on */
        sc_cg_printf(b, "static inline %s sc_hsum_%sh(sc_v%sh v)\n{\n    sc_v%sq q[2];\n"
                        "    memcpy(q, &v, sizeof q);\n    q[0] += q[1];\n    return %s;\n}\n",
                     ct, tag, tag, tag, qsum);
        sc_cg_printf(b, "static inline %s sc_hsum_%sq(sc_v%sq q0)\n{\n    sc_v%sq q[1] = {q0};\n"
                        "    return %s;\n}\n", ct, tag, tag, tag, qsum);
    }
    sc_cg_printf(b, "#define SC_VN(T, S)                                                           \\\n"
                    "static inline sc_v##S sc_vloadn_##S(const T *p, int64_t n)                    \\\n"
                    "{ sc_v##S v = {0}; for (int64_t i = 0; i < n; i++) v[i] = p[i]; return v; }   \\\n"
                    "static inline void sc_vstoren_##S(T *p, sc_v##S v, int64_t n)                 \\\n"
                    "{ for (int64_t i = 0; i < n; i++) p[i] = v[i]; }\n");
    if (bytes == 64) {
        sc_cg_printf(b, "#ifdef __AVX512F__\n"
                        "#define SC_MASK(n) ((1u << (n)) - 1u)\n");
        /* per element type: the masked moves' builtins, the pointer casts they take,
         * the vector type they take and give (the integer ones: signed lanes), and the
         * casts between that and ours */
        static const struct {
            const char *load, *store, *cptr, *ptr, *vt, *to_vt, *from_vt;
        } mv[4] = {
            {"loadups", "storeups", "", "", "sc_vf32", "", ""},
            {"loadupd", "storeupd", "", "", "sc_vf64", "", ""},
            {"loaddqusi", "storedqusi", "(const int *)", "(int *)", "sc_vi32", "(sc_vi32)", "(sc_vu32)"},
            {"loaddqudi", "storedqudi", "(const long long *)", "(long long *)", "sc_vi64", "(sc_vi64)",
             "(sc_vu64)"},
        };
        for (int t = 0; t < 4; t++) {
            const char *tag = VEC_TYPES[t].tag, *ct = VEC_TYPES[t].ct;
            const char *mt = VEC_TYPES[t].esz == 8 ? "unsigned char" : "unsigned short";
            sc_cg_printf(b, "static inline sc_v%s sc_vloadn_%s(const %s *p, int64_t n)\n"
                            "{ return %s__builtin_ia32_%s512_mask(%sp, (%s){0}, (%s)SC_MASK(n)); }\n",
                         tag, tag, ct, mv[t].from_vt, mv[t].load, mv[t].cptr, mv[t].vt, mt);
            sc_cg_printf(b, "static inline void sc_vstoren_%s(%s *p, sc_v%s v, int64_t n)\n"
                            "{ __builtin_ia32_%s512_mask(%sp, %sv, (%s)SC_MASK(n)); }\n",
                         tag, ct, tag, mv[t].store, mv[t].ptr, mv[t].to_vt, mt);
        }
        sc_cg_printf(b, "#else\n"
                        "SC_VN(float, f32)\nSC_VN(double, f64)\nSC_VN(uint32_t, u32)\nSC_VN(uint64_t, u64)\n"
                        "#endif\n");
    } else {
        /* AVX's masked moves take a vector of lane masks (the sign bit of each lane):
         * lane l is moved when l < n */
        sc_cg_printf(b, "#ifdef __AVX__\n"
                        "typedef int32_t sc_vm32 __attribute__((vector_size(32)));\n"
                        "typedef long long sc_vm64 __attribute__((vector_size(32)));\n");
        for (int t = 0; t < 2; t++) {
            const char *tag = VEC_TYPES[t].tag, *ct = VEC_TYPES[t].ct;
            const char *ps = t ? "pd" : "ps", *m = t ? "sc_vm64" : "sc_vm32";
            const char *iota = t ? "{0, 1, 2, 3} < (long long)n" : "{0, 1, 2, 3, 4, 5, 6, 7} < (int32_t)n";
            sc_cg_printf(b, "static inline sc_v%s sc_vloadn_%s(const %s *p, int64_t n)\n"
                            "{ return __builtin_ia32_maskload%s256((const sc_v%s *)p, (%s)%s); }\n",
                         tag, tag, ct, ps, tag, m, iota);
            sc_cg_printf(b, "static inline void sc_vstoren_%s(%s *p, sc_v%s v, int64_t n)\n"
                            "{ __builtin_ia32_maskstore%s256((sc_v%s *)p, (%s)%s, v); }\n",
                         tag, ct, tag, ps, tag, m, iota);
        }
        sc_cg_printf(b, "#else\n"
                        "SC_VN(float, f32)\nSC_VN(double, f64)\n"
                        "#endif\n"
                        "SC_VN(uint32_t, u32)\nSC_VN(uint64_t, u64)\n");
    }
    partial_helpers(b, bytes);
}

typedef struct em {
    sc_cg_buf *out;
    const sc_ir_func *fn;
    sc_error *err;
    sc_status st;
} em;

static void pr(em *m, const char *s)
{
    sc_cg_append(m->out, s, strlen(s));
}

static const char *ctype(sc_ir_type t)
{
    return t == SC_IR_BOOL ? "int" : sc_ir_type_name(t);
}

/* The suffix of a vector type's name: f32, f64, u32 or u64 (vector_helpers' VEC_TYPES),
 * then h or q for a half or quarter vector.  (Vectors are of value types only: the IR
 * builds none of another type, sc_ir_vec_lanes being 0 for it.) */
static const char *vtag(const sc_ir_func *fn, sc_ir_type t, int32_t lanes)
{
    static const char *const tags[4][3] = {{"f32", "f32h", "f32q"}, {"f64", "f64h", "f64q"},
                                           {"u32", "u32h", "u32q"}, {"u64", "u64h", "u64q"}};
    int32_t w = sc_ir_vec_lanes(fn, t), k = lanes == w ? 0 : lanes == w / 2 ? 1 : 2;
    for (int i = 0; i < 4; i++)
        if (VEC_TYPES[i].type == t)
            return tags[i][k];
    return tags[0][k];
}

static void expr(em *m, const sc_ir_expr *e);

/* sc_vloadn_<tag>(&buf[idx], count): the first count lanes of buf[idx..]. */
static void vloadn(em *m, const char *tag, const char *buf, const sc_ir_expr *idx,
                   const sc_ir_expr *count)
{
    sc_cg_printf(m->out, "sc_vloadn_%s(&%s[", tag, buf);
    expr(m, idx);
    pr(m, "], ");
    expr(m, count);
    pr(m, ")");
}

/* open a mid1 b mid2 c ")": three operands between fixed text. */
static void three(em *m, const char *open, const sc_ir_expr *a, const char *mid1,
                  const sc_ir_expr *b, const char *mid2, const sc_ir_expr *c)
{
    pr(m, open);
    expr(m, a);
    pr(m, mid1);
    expr(m, b);
    pr(m, mid2);
    expr(m, c);
    pr(m, ")");
}

/* v as a C constant of its exact value: INT64_C(v) past int32's range, or always when
 * wide; INT64_MIN, which C cannot write as one literal, as a constant expression. */
static void int64_literal(em *m, int64_t v, bool wide)
{
    if (v == INT64_MIN)
        pr(m, "(-INT64_C(9223372036854775807) - 1)");
    else if (wide || v > INT32_MAX || v < -INT32_MAX)
        sc_cg_printf(m->out, "INT64_C(%lld)", (long long)v);
    else
        sc_cg_printf(m->out, "%lld", (long long)v);
}

static void expr(em *m, const sc_ir_expr *e)
{
    const sc_ir_func *fn = m->fn;
    switch (e->kind) {
    case SC_IR_E_VAR:
        pr(m, fn->vars[e->var].name);
        break;
    case SC_IR_E_INT:
        int64_literal(m, e->ival, false);
        break;
    case SC_IR_E_FLT: {
        if (sc_ir_is_int_value(e->type)) { /* (the unsigned type: the same bits) */
            sc_cg_printf(m->out, "(%s)", ctype(e->type));
            int64_literal(m, e->ival, true);
            break;
        }
        char tmp[64];
        snprintf(tmp, sizeof tmp, "%.17g", e->fval);
        if (!strpbrk(tmp, ".eE"))
            strcat(tmp, ".0");
        sc_cg_printf(m->out, "(%s)%s", ctype(e->type), tmp);
        break;
    }
    case SC_IR_E_LOAD:
        sc_cg_printf(m->out, "%s[", fn->vars[e->var].name);
        expr(m, e->a);
        pr(m, "]");
        break;
    case SC_IR_E_VLOAD:
        if (e->b) {
            vloadn(m, vtag(fn, e->type, e->lanes), fn->vars[e->var].name, e->a, e->b);
            break;
        }
        sc_cg_printf(m->out, "(*(const sc_v%su *)&%s[", vtag(fn, e->type, e->lanes), fn->vars[e->var].name);
        expr(m, e->a);
        pr(m, "])");
        break;
    case SC_IR_E_VGATHER:
        sc_cg_printf(m->out, "sc_vgathern_%s(%s, ", vtag(fn, e->type, e->lanes), fn->vars[e->var].name);
        three(m, "&", e->c, "[", e->a, "], ", e->b);
        break;
    case SC_IR_E_RUNSPLIT:
    case SC_IR_E_RUNEND:
    case SC_IR_E_ROWOF:
        sc_cg_printf(m->out, "sc_k_%s%s(%s, ",
                     e->kind == SC_IR_E_RUNEND ? "runend" : e->kind == SC_IR_E_ROWOF ? "rowof" : "runsplit",
                     fn->vars[e->var].type == SC_IR_I32 ? "32" : "64", fn->vars[e->var].name);
        expr(m, e->a);
        pr(m, ", ");
        expr(m, e->b);
        if (e->kind == SC_IR_E_RUNSPLIT)
            sc_cg_printf(m->out, ", %d", (int)e->ival);
        if (e->kind == SC_IR_E_ROWOF) {
            pr(m, ", ");
            expr(m, e->c);
        }
        pr(m, ")");
        break;
    case SC_IR_E_HSUM:
        sc_cg_printf(m->out, "sc_hsum_%s(", vtag(fn, e->type, e->a->lanes));
        expr(m, e->a);
        pr(m, ")");
        break;
    case SC_IR_E_FOLD:
        sc_cg_printf(m->out, "sc_fold%d_%s(", (int)e->ival, vtag(fn, e->type, e->lanes));
        expr(m, e->a);
        pr(m, ", ");
        expr(m, e->b);
        pr(m, ")");
        break;
    case SC_IR_E_LANE:
        expr(m, e->a);
        sc_cg_printf(m->out, "[%d]", (int)e->ival);
        break;
    case SC_IR_E_SPLAT:
        sc_cg_printf(m->out, "((sc_v%s){0} + ", vtag(fn, e->type, e->lanes));
        expr(m, e->a);
        pr(m, ")");
        break;
    case SC_IR_E_BIN:
        if (e->op == SC_IR_OP_MIN || e->op == SC_IR_OP_MAX) {
            sc_cg_printf(m->out, "sc_%s(", sc_ir_op_symbol(e->op));
            expr(m, e->a);
            pr(m, ", ");
            expr(m, e->b);
            pr(m, ")");
        } else {
            pr(m, "(");
            expr(m, e->a);
            sc_cg_printf(m->out, " %s ", sc_ir_op_symbol(e->op));
            expr(m, e->b);
            pr(m, ")");
        }
        break;
    case SC_IR_E_NEG:
        pr(m, "(-");
        expr(m, e->a);
        pr(m, ")");
        break;
    case SC_IR_E_NOT:
        pr(m, "(!");
        expr(m, e->a);
        pr(m, ")");
        break;
    case SC_IR_E_CAST:
        sc_cg_printf(m->out, "((%s)", ctype(e->type));
        expr(m, e->a);
        pr(m, ")");
        break;
    case SC_IR_E_SELECT:
        three(m, "(", e->a, " ? ", e->b, " : ", e->c);
        break;
    case SC_IR_E_ARG: {
        char who[32];
        if (e->ival < 0)
            snprintf(who, sizeof who, "out");
        else
            snprintf(who, sizeof who, "ops[%d]", (int)e->ival);
        switch (e->arg) {
        case SC_IR_ARG_POS:
        case SC_IR_ARG_CRD:
            sc_cg_printf(m->out, "((const %s *)%s->%s[%d])", ctype(e->type), who,
                         sc_ir_arg_name(e->arg), (int)e->level);
            break;
        case SC_IR_ARG_VALS:
            sc_cg_printf(m->out, "((const %s *)%s->vals)", ctype(e->type), who);
            break;
        case SC_IR_ARG_DIM:
            sc_cg_printf(m->out, "%s->dims[%d]", who, (int)e->level);
            break;
        case SC_IR_ARG_CRD_LEN:
            sc_cg_printf(m->out, "%s->crd_len[%d]", who, (int)e->level);
            break;
        case SC_IR_ARG_THREADS:
            pr(m, "(int64_t)nt_");
            break;
        case SC_IR_ARG_CACHE:
            pr(m, "env->cache_bytes");
            break;
        default:
            break;
        }
        break;
    }
    case SC_IR_E_ALLOC:
        sc_cg_printf(m->out, "((%s *)sc_k_alloc%s(env, ", ctype(e->type), e->uninit ? "_raw" : "");
        expr(m, e->a);
        sc_cg_printf(m->out, ", sizeof(%s)))", ctype(e->type));
        break;
    case SC_IR_E_NONNULL:
        sc_cg_printf(m->out, "(%s != NULL)", fn->vars[e->var].name);
        break;
    default:
        if (m->st == SC_OK)
            m->st = sc_fail(m->err, SC_INTERNAL, "codegen", "unknown expression kind %d",
                            (int)e->kind);
    }
}

/* schedule(dynamic, c) of a parallel loop's chunk of at most s->level iterations, shrunk
 * (to 1) so that each thread gets about four: a few heavy iterations (a batch's matrices,
 * the heads over one mask) are shared, not all taken by the first thread's first chunk. */
static void dynamic_chunks(em *m, const sc_ir_stmt *s)
{
    pr(m, " schedule(dynamic, sc_max(1, sc_min(");
    sc_cg_printf(m->out, "%d, ((", (int)s->level);
    expr(m, s->b);
    pr(m, ") - (");
    expr(m, s->a);
    pr(m, ")) / (4 * nt_))))");
}

static void indent(em *m, int ind)
{
    sc_cg_printf(m->out, "%*s", 4 * ind, "");
}

static void stmt(em *m, const sc_ir_stmt *s, int ind);

/* The rest of an if: "{" already printed; s->body, an else with s->orelse, "}". */
static void then_else(em *m, const sc_ir_stmt *s, int ind)
{
    stmt(m, s->body, ind + 1);
    indent(m, ind);
    if (s->orelse) {
        pr(m, "} else {\n");
        stmt(m, s->orelse, ind + 1);
        indent(m, ind);
    }
    pr(m, "}\n");
}

static void stmt(em *m, const sc_ir_stmt *s, int ind)
{
    const sc_ir_func *fn = m->fn;
    const sc_ir_var_info *v = s->var >= 0 && s->var < fn->nvars ? &fn->vars[s->var] : NULL;
    if (s->kind == SC_IR_S_BLOCK) {
        for (int32_t i = 0; i < s->n; i++)
            stmt(m, s->items[i], ind);
        return;
    }
    indent(m, ind);
    switch (s->kind) {
    case SC_IR_S_DECL:
        if (v->local_len > 0) {
            sc_cg_printf(m->out, "%s %s[%d];\n", ctype(v->type), v->name, (int)v->local_len);
            break;
        }
        if (v->lanes > 0)
            sc_cg_printf(m->out, "sc_v%s %s = ", vtag(fn, v->type, v->lanes), v->name);
        else if (v->buffer)
            sc_cg_printf(m->out, "%s%s *restrict %s = ", v->readonly ? "const " : "",
                         ctype(v->type), v->name);
        else
            sc_cg_printf(m->out, "%s%s %s = ", v->readonly ? "const " : "", ctype(v->type), v->name);
        expr(m, s->a);
        pr(m, ";\n");
        break;
    case SC_IR_S_ASSIGN:
        sc_cg_printf(m->out, "%s %s ", v->name, s->accumulate ? "+=" : "=");
        expr(m, s->a);
        pr(m, ";\n");
        break;
    case SC_IR_S_STORE:
        if (s->lanes && s->c) { /* p = first n lanes of (value, or p's lanes + value) */
            const char *t = vtag(fn, v->type, s->lanes);
            sc_cg_printf(m->out, "sc_vstoren_%s(&%s[", t, v->name);
            expr(m, s->b);
            pr(m, "], ");
            if (s->accumulate) {
                vloadn(m, t, v->name, s->b, s->c);
                pr(m, " + ");
            }
            expr(m, s->a);
            pr(m, ", ");
            expr(m, s->c);
            pr(m, ");\n");
            break;
        }
        if (s->lanes) {
            sc_cg_printf(m->out, "*(sc_v%su *)&%s[", vtag(fn, v->type, s->lanes), v->name);
            expr(m, s->b);
            sc_cg_printf(m->out, "] %s ", s->accumulate ? "+=" : "=");
            expr(m, s->a);
            pr(m, ";\n");
            break;
        }
        sc_cg_printf(m->out, "%s[", v->name);
        expr(m, s->b);
        sc_cg_printf(m->out, "] %s ", s->accumulate ? "+=" : "=");
        if (!sc_ir_is_value(v->type) && v->type != s->a->type)
            sc_cg_printf(m->out, "(%s)", ctype(v->type));
        expr(m, s->a);
        pr(m, ";\n");
        break;
    case SC_IR_S_FOR:
        if (s->balanced && s->par != SC_IR_SEQ) {
            const char *vn = v->name;
            const char *split = m->fn->vars[s->bal].type == SC_IR_I64 ? "sc_k_split64" : "sc_k_split32";
            if (s->par == SC_IR_PAR_FOR) {
                const char *pn = m->fn->vars[s->bal].name;
                pr(m, "#pragma omp parallel num_threads(nt_) if(sc_k_par_worth((");
                expr(m, s->b);
                pr(m, ") - (");
                expr(m, s->a);
                pr(m, "), ((int64_t)");
                sc_cg_printf(m->out, "%s[", pn);
                expr(m, s->b);
                sc_cg_printf(m->out, "] - %s[", pn);
                expr(m, s->a);
                pr(m, "] + (");
                expr(m, s->b);
                pr(m, ") - (");
                expr(m, s->a);
                pr(m, "))");
                if (s->work) {
                    pr(m, " * (");
                    expr(m, s->work);
                    pr(m, ")");
                }
                pr(m, "))\n");
                indent(m, ind);
            }
            pr(m, "{\n");
            indent(m, ind + 1);
            sc_cg_printf(m->out, "int64_t %s_lo = ", vn);
            expr(m, s->a);
            sc_cg_printf(m->out, ", %s_hi = ", vn);
            expr(m, s->b);
            sc_cg_printf(m->out, ";\n#ifdef _OPENMP\n");
            indent(m, ind + 1);
            sc_cg_printf(m->out, "int64_t %s_t = omp_get_thread_num(), %s_nt = omp_get_num_threads();\n#else\n", vn, vn);
            indent(m, ind + 1);
            sc_cg_printf(m->out, "int64_t %s_t = 0, %s_nt = 1;\n#endif\n", vn, vn);
            indent(m, ind + 1);
            sc_cg_printf(m->out, "int64_t %s_b = %s(%s, %s_lo, %s_hi, %s_t, %s_nt);\n", vn, split,
                         m->fn->vars[s->bal].name, vn, vn, vn, vn);
            indent(m, ind + 1);
            sc_cg_printf(m->out, "int64_t %s_e = %s(%s, %s_lo, %s_hi, %s_t + 1, %s_nt);\n", vn, split,
                         m->fn->vars[s->bal].name, vn, vn, vn, vn);
            indent(m, ind + 1);
            bool runs = s->orelse && s->run_min > 0;
            if (runs) {
                /* a long row alone, a run of short rows at once */
                const char *pn = m->fn->vars[s->bal].name, *en = m->fn->vars[s->run_end].name;
                sc_cg_printf(m->out, "for (%s %s = %s_b; %s < %s_e;) {\n", ctype(v->type), vn, vn, vn, vn);
                indent(m, ind + 2);
                sc_cg_printf(m->out, "if ((int64_t)%s[%s + 1] - %s[%s] >= %d) {\n", pn, vn, pn, vn,
                             (int)s->run_min);
                stmt(m, s->body, ind + 3);
                indent(m, ind + 3);
                sc_cg_printf(m->out, "%s++;\n", vn);
                indent(m, ind + 2);
                pr(m, "} else {\n");
                indent(m, ind + 3);
                sc_cg_printf(m->out, "int64_t %s = %s + 1;\n", en, vn);
                indent(m, ind + 3);
                sc_cg_printf(m->out, "while (%s < %s_e && (int64_t)%s[%s + 1] - %s[%s] < %d)\n", en, vn,
                             pn, en, pn, en, (int)s->run_min);
                indent(m, ind + 4);
                sc_cg_printf(m->out, "%s++;\n", en);
                stmt(m, s->orelse, ind + 3);
                indent(m, ind + 3);
                sc_cg_printf(m->out, "%s = %s;\n", vn, en);
                indent(m, ind + 2);
                pr(m, "}\n");
                indent(m, ind + 1);
                pr(m, "}\n");
            } else if (s->orelse) {
                /* two iterations at a time while two remain (in a range of rows long enough
                 * on average), then the rest one at a time */
                const char *pn = m->fn->vars[s->bal].name;
                sc_cg_printf(m->out, "%s %s = %s_b;\n", ctype(v->type), vn, vn);
                indent(m, ind + 1);
                sc_cg_printf(m->out, "if ((int64_t)%s[%s_e] - %s[%s_b] >= (int64_t)%d * (%s_e - %s_b))\n",
                             pn, vn, pn, vn, (int)s->pair_min, vn, vn);
                indent(m, ind + 2);
                sc_cg_printf(m->out, "for (; %s + 1 < %s_e; %s += 2) {\n", vn, vn, vn);
                stmt(m, s->orelse, ind + 3);
                indent(m, ind + 2);
                pr(m, "}\n");
                indent(m, ind + 1);
                sc_cg_printf(m->out, "for (; %s < %s_e; %s++) {\n", vn, vn, vn);
            } else {
                sc_cg_printf(m->out, "for (%s %s = %s_b; %s < %s_e; %s++) {\n", ctype(v->type), vn,
                             vn, vn, vn, vn);
            }
            if (!runs) {
                stmt(m, s->body, ind + 2);
                indent(m, ind + 1);
                pr(m, "}\n");
            }
            if (s->par == SC_IR_OMP_FOR) {
                indent(m, ind + 1);
                pr(m, "#pragma omp barrier\n");
            }
            indent(m, ind);
            pr(m, "}\n");
            break;
        }
        if (s->par != SC_IR_SEQ) {
            pr(m, s->par == SC_IR_PAR_FOR ? "#pragma omp parallel for num_threads(nt_)"
                                          : "#pragma omp for");
            if (s->par == SC_IR_PAR_FOR && s->work) {
                /* sc_ir_for_weighed: few heavy iterations run in parallel too, in
                 * chunks of about a quarter of a thread's share */
                pr(m, " if(sc_k_par_weighed((");
                expr(m, s->b);
                pr(m, ") - (");
                expr(m, s->a);
                pr(m, "), ");
                expr(m, s->work);
                sc_cg_printf(m->out, "))");
                dynamic_chunks(m, s);
            } else {
                if (s->par == SC_IR_PAR_FOR) {
                    pr(m, " if((");
                    expr(m, s->b);
                    pr(m, ") - (");
                    expr(m, s->a);
                    sc_cg_printf(m->out, ") >= %d)", SC_IR_PAR_MIN);
                }
                if (s->level > 0)
                    dynamic_chunks(m, s);
            }
            pr(m, "\n");
            indent(m, ind);
        }
        if (s->scalar) {
            pr(m, "SC_NOVEC\n");
            indent(m, ind);
        }
        sc_cg_printf(m->out, "for (%s %s = ", ctype(v->type), v->name);
        expr(m, s->a);
        sc_cg_printf(m->out, "; %s < ", v->name);
        expr(m, s->b);
        if (s->c->kind == SC_IR_E_INT && s->c->ival == 1) {
            sc_cg_printf(m->out, "; %s++) {\n", v->name);
        } else {
            sc_cg_printf(m->out, "; %s += ", v->name);
            expr(m, s->c);
            pr(m, ") {\n");
        }
        if (s->scalar) {
            indent(m, ind + 1);
            pr(m, "SC_NOVEC_BODY\n");
        }
        stmt(m, s->body, ind + 1);
        indent(m, ind);
        pr(m, "}\n");
        break;
    case SC_IR_S_WHILE:
        pr(m, "while (");
        expr(m, s->a);
        pr(m, ") {\n");
        stmt(m, s->body, ind + 1);
        indent(m, ind);
        pr(m, "}\n");
        break;
    case SC_IR_S_IF:
        pr(m, "if (");
        expr(m, s->a);
        pr(m, ") {\n");
        then_else(m, s, ind);
        break;
    case SC_IR_S_PARALLEL:
        pr(m, "#pragma omp parallel num_threads(nt_)");
        if (s->a) {
            pr(m, " if(");
            expr(m, s->a);
            pr(m, ")");
        }
        pr(m, "\n");
        indent(m, ind);
        pr(m, "{\n");
        stmt(m, s->body, ind + 1);
        indent(m, ind);
        pr(m, "}\n");
        break;
    case SC_IR_S_BARRIER_OR:
        pr(m, "#pragma omp atomic write\n");
        indent(m, ind);
        sc_cg_printf(m->out, "%s = 1;\n", v->name);
        break;
    case SC_IR_S_REQUIRE:
        pr(m, "if (!");
        expr(m, s->a);
        sc_cg_printf(m->out, ") {\n%*s    st_ = %d;\n%*s    msg_ = \"", 4 * ind, "",
                     (int)s->status, 4 * ind, "");
        for (const char *c = s->text; *c; c++)
            if (*c != '"' && *c != '\\' && *c >= ' ')
                sc_cg_append(m->out, c, 1);
        sc_cg_printf(m->out, "\";\n%*s    goto fail_;\n%*s}\n", 4 * ind, "", 4 * ind, "");
        break;
    case SC_IR_S_FREE:
        sc_cg_printf(m->out, "sc_k_free(env, (void *)%s);\n", v->name);
        if (v->owned) {
            indent(m, ind);
            sc_cg_printf(m->out, "%s = NULL;\n", v->name);
        }
        break;
    case SC_IR_S_SORT:
        sc_cg_printf(m->out, "sc_k_sort(%s, ", v->name);
        expr(m, s->a);
        pr(m, ");\n");
        break;
    case SC_IR_S_MARK:
        if (!s->body) {
            sc_cg_printf(m->out, "%s = sc_k_mark_new(%s, %s, ", fn->vars[s->total].name,
                         fn->vars[s->bits].name, fn->vars[s->summary].name);
            expr(m, s->b);
            pr(m, ");\n");
            break;
        }
        sc_cg_printf(m->out, "if (sc_k_mark(%s, %s, ", fn->vars[s->bits].name, fn->vars[s->summary].name);
        expr(m, s->b);
        pr(m, ")) {\n");
        then_else(m, s, ind);
        break;
    case SC_IR_S_PREFETCH:
        sc_cg_printf(m->out, "__builtin_prefetch(&%s[", v->name);
        expr(m, s->b);
        pr(m, s->accumulate ? "], 1);\n" : "]);\n");
        break;
    case SC_IR_S_COLLECT:
        sc_cg_printf(m->out, "sc_k_collect%s(%s + ", v->type == SC_IR_I32 ? "32" : "", v->name);
        expr(m, s->b);
        pr(m, ", ");
        expr(m, s->a);
        sc_cg_printf(m->out, ", %s, %s, %d, ", fn->vars[s->bits].name, fn->vars[s->summary].name,
                     (int)s->level);
        expr(m, s->c);
        pr(m, ");\n");
        break;
    case SC_IR_S_SORTSUM: {
        const char *t = fn->vars[s->total].name;
        const sc_ir_var_info *vals = &fn->vars[s->vals];
        static const char *const vtags[SC_IR_TYPE_COUNT] = {
            [SC_IR_F32] = "f32", [SC_IR_F64] = "f64", [SC_IR_VI32] = "i32", [SC_IR_VI64] = "i64"};
        bool narrow = vals->type == SC_IR_F32 || vals->type == SC_IR_VI32;
        const char *way = v->type != SC_IR_I32 || !narrow || s->level <= 0 ||
                                  s->level > SC_IR_SORT_VECTOR_MOST
                              ? ""
                          : s->level <= 8 ? "8_"
                                          : "v_";
        sc_cg_printf(m->out, "%s = sc_k_sortsum%s%s_%s(%s, %s, ", t, way,
                     v->type == SC_IR_I32 ? "32" : "64", vtags[vals->type], v->name, vals->name);
        expr(m, s->b);
        sc_cg_printf(m->out, ", %s);\n", t);
        break;
    }
    case SC_IR_S_SCAN:
        sc_cg_printf(m->out, "%s += sc_k_scan%s(%s + ", fn->vars[s->total].name,
                     v->type == SC_IR_I32 ? "32" : "", v->name);
        expr(m, s->b);
        sc_cg_printf(m->out, ", %s, ", fn->vars[s->bits].name);
        expr(m, s->a);
        pr(m, ", ");
        expr(m, s->c);
        pr(m, ");\n");
        break;
    case SC_IR_S_OUT_SET: {
        const char *f = sc_ir_arg_name(s->field);
        if (s->status) {
            if (s->field == SC_IR_ARG_VALS)
                pr(m, "out->nvals = ");
            else
                sc_cg_printf(m->out, "out->%s_len[%d] = ", f, (int)s->level);
        } else if (s->field == SC_IR_ARG_VALS) {
            pr(m, "out->vals = ");
        } else {
            sc_cg_printf(m->out, "out->%s[%d] = ", f, (int)s->level);
        }
        if (!s->status)
            pr(m, "(void *)");
        expr(m, s->a);
        pr(m, ";\n");
        break;
    }
    case SC_IR_S_COMMENT:
        sc_cg_printf(m->out, "/* %s */\n", s->text);
        break;
    default:
        if (m->st == SC_OK)
            m->st = sc_fail(m->err, SC_INTERNAL, "codegen", "unknown statement kind %d",
                            (int)s->kind);
    }
}

/* The FOLD steps (see sc_ir_fold) of each vector type: two two-source lane shuffles (the
 * low and the high half of every source block) and one addition.  The masks are
 * constants here, so each shuffle is one permute instruction.  Macros, not functions: a
 * function returning a 64-byte vector draws a psABI warning where AVX-512 is off; the
 * lowering passes variables, so the arguments' repetition costs nothing. */
static void fold_helpers(sc_cg_buf *b, const sc_ir_func *fn)
{
    sc_cg_printf(b, "#if defined(__clang__) || __GNUC__ >= 12\n"
                    "#define SC_K_SHUF(x, y, T, ...) __builtin_shufflevector(x, y, __VA_ARGS__)\n"
                    "#else\n"
                    "#define SC_K_SHUF(x, y, T, ...) __builtin_shuffle(x, y, (T){__VA_ARGS__})\n"
                    "#endif\n");
    for (int t = 0; t < 4; t++) {
        sc_ir_type type = VEC_TYPES[t].type;
        int32_t W = sc_ir_vec_lanes(fn, type);
        const char *tag = VEC_TYPES[t].tag, *it = VEC_TYPES[t].esz == 4 ? "sc_vi32" : "sc_vi64";
        for (int32_t w = W / 2; w >= 0; w = w > 1 ? w / 2 : w - 1) {
            sc_cg_printf(b, "#define sc_fold%d_%s(x, y) (", (int)w, tag);
            for (int32_t half = 0; half < 2; half++) {
                sc_cg_printf(b, "%sSC_K_SHUF(x, y, %s", half ? " + " : "", it);
                for (int32_t l = 0; l < W; l++)
                    sc_cg_printf(b, ", %d", (int)sc_ir_fold_src(fn, type, w, half, l));
                sc_cg_printf(b, ")");
            }
            sc_cg_printf(b, ")\n");
        }
    }
}

sc_status sc_cg_emit(const sc_ctx *ctx, const sc_ir_func *fn, char **src, size_t *len,
                     sc_error *err)
{
    *src = NULL;
    *len = 0;
    sc_cg_buf b;
    sc_cg_buf_init(&b, ctx);
    em m = {&b, fn, err, SC_OK};
    sc_cg_append(&b, PRELUDE_HEAD, strlen(PRELUDE_HEAD));
    vector_helpers(&b, fn->vec_bytes);
    for (size_t i = 0; i < sizeof PRELUDE / sizeof PRELUDE[0]; i++)
        sc_cg_append(&b, PRELUDE[i], strlen(PRELUDE[i]));
    fold_helpers(&b, fn);
    sc_cg_printf(&b, "int %s(const sc_tensor *const *ops, sc_tensor *out, sc_rt_env *env);\n",
                 fn->name);
    sc_cg_printf(&b, "int %s(const sc_tensor *const *ops, sc_tensor *out, sc_rt_env *env)\n{\n",
                 fn->name);
    pr(&m, "    int st_ = 0;\n    const char *msg_ = \"\";\n    (void)ops;\n    (void)msg_;\n");
    pr(&m, "#ifdef _OPENMP\n    int nt_ = env->num_threads > 0 ? env->num_threads : "
           "omp_get_max_threads();\n#else\n    int nt_ = 1;\n#endif\n    (void)nt_;\n");
    for (int32_t i = 0; i < fn->nvars; i++) {
        const sc_ir_var_info *v = &fn->vars[i];
        if (v->owned)
            sc_cg_printf(&b, "    %s *restrict %s = NULL;\n", ctype(v->type), v->name);
    }
    if (fn->body)
        stmt(&m, fn->body, 1);
    pr(&m, "    return 0;\n    goto fail_;\nfail_:\n");
    for (int32_t i = 0; i < fn->nvars; i++) {
        const sc_ir_var_info *v = &fn->vars[i];
        if (v->owned)
            sc_cg_printf(&b, "    sc_k_free(env, (void *)%s);\n", v->name);
    }
    pr(&m, "    out->vals = NULL;\n    out->nvals = 0;\n"
           "    for (int k = 0; k < SC_MAX_ORDER; k++) {\n"
           "        out->pos[k] = out->crd[k] = NULL;\n"
           "        out->pos_len[k] = out->crd_len[k] = 0;\n    }\n"
           "    {\n        size_t i = 0;\n"
           "        for (; msg_[i] && i + 1 < sizeof env->msg; i++)\n"
           "            env->msg[i] = msg_[i];\n        env->msg[i] = '\\0';\n    }\n"
           "    return st_;\n}\n");
    if (m.st != SC_OK) {
        sc_cg_buf_release(&b);
        return m.st;
    }
    *src = sc_cg_buf_take(&b, len, err);
    return *src ? SC_OK : SC_NOMEM;
}
