/*
 * driver_internal.h — the compiler and kernel objects shared by the driver's files.
 *
 * A compiler owns its jit and a map of kernels (under one mutex); kernels are created by
 * sc_compile, inserted once per key and freed only by sc_compiler_free.  Everything a
 * kernel holds is ctx memory (never arena memory).
 */
#ifndef SC_DRIVER_INTERNAL_H
#define SC_DRIVER_INTERNAL_H

#include "sc_driver.h"
#include "../lower/sc_lower.h"

#include <pthread.h>
#include <sys/types.h>

#define SC_DRV_MAX_OPS 32

struct sc_kernel {
    sc_compiler *c;
    sc_jit_key key;
    sc_rt_kernel fn;
    int32_t nops, nvars;
    sc_format fmt[SC_DRV_MAX_OPS];       /* operand formats as given */
    sc_dtype dtype;
    sc_index_type itype[SC_DRV_MAX_OPS];
    int32_t var[SC_DRV_MAX_OPS][SC_MAX_ORDER]; /* index variable of each dimension */
    /* every access (index notation may read an operand twice, with other indices): the
     * operand read and the index variable of each of its dimensions */
    int32_t nacc;
    int32_t acc_op[SC_LOWER_MAX_ACCESSES];
    int32_t acc_var[SC_LOWER_MAX_ACCESSES][SC_MAX_ORDER];
    uint32_t bcast[SC_DRV_MAX_OPS];
    const char *opname[SC_DRV_MAX_OPS];  /* point into names */
    const char *varname[32];
    int64_t fixed[32];                   /* extents the kernel is written for (0: any) */
    char *names;                         /* owned */
    uint32_t transpose;
    sc_format tfmt[SC_DRV_MAX_OPS];
    sc_format out_fmt;
    sc_index_type out_itype;
    int32_t out_order;
    int32_t out_var[SC_MAX_ORDER];
    int64_t out_dims[SC_MAX_ORDER]; /* at compile time */
    char *schedule; /* owned */
    char *explain;  /* owned */
    double front_us; /* parse + lower + schedule + IR + codegen, when it was compiled */
    double jit_us;   /* sc_jit_get: the C compiler, or a disk-cache load */
    bool ahead;      /* fn is an ahead-of-time kernel (sc_compiler_load_aot) */
};

/* A kernel compiling on a thread of its own (sc_compile_later). */
struct sc_later {
    sc_compiler *c;
    sc_later *next;        /* the compiler's list (under c->later_mu) */
    sc_kernel *k;          /* the kernel, owned here until it is in the map */
    sc_jit_key k_key;      /* its key */
    char *src;             /* its C source, owned */
    size_t len;
    char sym[48];
    pthread_t thread;
    pid_t pid;             /* the process that started the thread (a fork's child has none) */
    _Atomic int state;     /* LATER_* */
    bool joined;           /* under c->later_mu, as are the fields below */
    const sc_kernel *ready; /* in the compiler's map once a poll saw it compiled */
    sc_jit_fn fn;
    sc_error err;
    double t0;
};

enum { LATER_RUNNING, LATER_COMPILED, LATER_FAILED };

struct sc_compiler {
    sc_ctx ctx;
    sc_jit *jit;
    bool debug;
    int32_t vec_bytes; /* the vector width kernels are written for (see sc_compiler_new) */
    bool gathers;      /* the CPU's gathers are fast (see sc_compiler_new, probe.c) */
    bool convert_once; /* sc_compiler_set_convert_once */
    pthread_mutex_t mu;
    sc_kernel **map; /* open addressing on key.w[0]; NULL = empty */
    size_t cap, count;
    pthread_mutex_t later_mu;   /* the laters' list and hand-over (taken before mu) */
    sc_later *laters;           /* every sc_compile_later thread, joined at free */
    void *aot_lib;              /* dlopen handle of the ahead-of-time kernels, or NULL */
    const sc_aot_kernel *aot;   /* their table, sorted by key */
    size_t naot;
};

/* A monotonic clock, microseconds (compile timings, the gather probe). */
double sc_drv_now_us(void);

/* *fast: whether 8-lane float gathers beat scalar loads on this CPU, timed (probe.c);
 * false where the CPU has no AVX-512VL.  NOMEM when the probe's arrays cannot be had. */
sc_status sc_drv_fast_gathers(const sc_ctx *ctx, bool *fast, sc_error *err);

/* Find the kernel for key (NULL if absent); takes the mutex. */
const sc_kernel *sc_drv_lookup(sc_compiler *c, sc_jit_key key);
/* Insert k unless a kernel with its key exists; returns the kernel in the map (k or
 * the earlier one, in which case k is freed).  NULL with err (NOMEM) when the map
 * cannot grow (k is freed).  Takes the mutex. */
const sc_kernel *sc_drv_insert(sc_compiler *c, sc_kernel *k, sc_error *err);
/* The ahead-of-time kernel for key built from the C text src[0..len), or NULL (no lock:
 * the table is fixed once loaded). */
sc_rt_kernel sc_drv_aot_find(const sc_compiler *c, sc_jit_key key, const char *src, size_t len);
/* Whether the ahead-of-time table has a kernel under key (whatever its C text). */
bool sc_drv_aot_has(const sc_compiler *c, sc_jit_key key);
/* Start compiling k (not in the map) from src on a thread; takes k and src (freed on
 * failure too).  *later: the new sc_later, or the one already compiling k's key. */
sc_status sc_drv_later_start(sc_compiler *c, sc_kernel *k, char *src, size_t len,
                             const char *sym, sc_later **later, sc_error *err);

/* Free a kernel that is not in the map. */
void sc_drv_kernel_free(sc_compiler *c, sc_kernel *k);

#endif
