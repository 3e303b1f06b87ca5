/*
 * scorch_rt.h — the one header shared by the compiler, the generated kernels and the
 * Python extension.  Plain C11, no other scorch includes.
 *
 * It fixes the tables every stage agrees on (value dtypes, index widths, level kinds),
 * the status codes and error record a fallible call fills, and sc_tensor: the level
 * arrays of one sparse tensor as raw pointers.  Memory behind an sc_tensor is never
 * owned by the struct itself: whoever filled it says who frees it.
 */
#ifndef SCORCH_RT_H
#define SCORCH_RT_H

#include <stddef.h>
#include <stdint.h>

#define SC_RT_VERSION 5

/* Most dimensions (= levels) a tensor may have. */
#define SC_MAX_ORDER 8

/* Value dtypes: X(ENUM, name, C type, size).  Integer values compute with wrapping
 * (two's complement) arithmetic, as torch's integer kernels do. */
#define SC_DTYPES(X)                  \
    X(F32, "float32", float, 4)       \
    X(F64, "float64", double, 8)      \
    X(I32, "int32", int32_t, 4)       \
    X(I64, "int64", int64_t, 8)

typedef enum {
#define SC_X_(e, name, ctype, size) SC_DTYPE_##e,
    SC_DTYPES(SC_X_)
#undef SC_X_
    SC_DTYPE_COUNT
} sc_dtype;

/* Index widths for pos and crd arrays: X(ENUM, name, C type, size). */
#define SC_INDEX_TYPES(X)              \
    X(I32, "int32", int32_t, 4)        \
    X(I64, "int64", int64_t, 8)

typedef enum {
#define SC_X_(e, name, ctype, size) SC_INDEX_##e,
    SC_INDEX_TYPES(SC_X_)
#undef SC_X_
    SC_INDEX_COUNT
} sc_index_type;

/*
 * Level kinds: X(ENUM, name, letter, has_pos, has_crd).
 *   dense       every coordinate 0..dim-1 exists under each parent position
 *   compressed  pos[parent]..pos[parent+1] is the segment of stored coordinates crd[]
 *   singleton   exactly one coordinate crd[p] per parent position p
 */
#define SC_LEVEL_KINDS(X)                           \
    X(DENSE, "dense", 'd', 0, 0)                    \
    X(COMPRESSED, "compressed", 'c', 1, 1)          \
    X(SINGLETON, "singleton", 's', 0, 1)

typedef enum {
#define SC_X_(e, name, letter, has_pos, has_crd) SC_LEVEL_##e,
    SC_LEVEL_KINDS(SC_X_)
#undef SC_X_
    SC_LEVEL_COUNT
} sc_level_kind;

/* Status of every fallible call.  X(ENUM, name). */
#define SC_STATUSES(X)   \
    X(OK, "ok")          \
    X(USER, "user")      \
    X(INDEX, "index")    \
    X(UNSUPPORTED, "unsupported") \
    X(INTERNAL, "internal") \
    X(NOMEM, "nomem")    \
    X(COMPILE, "compile") \
    X(RUNTIME, "runtime")

typedef enum {
#define SC_X_(e, name) SC_##e,
    SC_STATUSES(SC_X_)
#undef SC_X_
    SC_STATUS_COUNT
} sc_status;

/* What went wrong, filled by the failing call.  pos is a 0-based column into the
 * expression being compiled, or -1.  stage names the pipeline stage ("format", ...). */
typedef struct sc_error {
    sc_status kind;
    const char *stage;
    int64_t pos;
    char msg[512];
} sc_error;

/*
 * The storage format: one level per dimension.  Level k stores dimension lvl2dim[k].
 * unique[k] = 0 lets a level hold equal coordinates next to each other (COO's top
 * level); every level is ordered (coordinates non-decreasing within a segment).
 */
typedef struct sc_format {
    int32_t order;
    uint8_t kind[SC_MAX_ORDER];
    uint8_t unique[SC_MAX_ORDER];
    int32_t lvl2dim[SC_MAX_ORDER];
} sc_format;

/*
 * One tensor's arrays.  pos[k] (length pos_len[k]) exists for compressed levels, crd[k]
 * (length crd_len[k]) for compressed and singleton levels; other entries are NULL/0.
 * Index arrays all have width index_type; vals has nvals entries of dtype.  Bit k of
 * borrowed: level k's pos and crd are another tensor's (a kernel output that has an
 * operand's pattern shares that operand's index arrays); releasing this tensor leaves
 * them, and they live as long as their owner.
 */
typedef struct sc_tensor {
    sc_format fmt;
    int64_t dims[SC_MAX_ORDER];
    sc_index_type index_type;
    sc_dtype dtype;
    void *pos[SC_MAX_ORDER];
    int64_t pos_len[SC_MAX_ORDER];
    void *crd[SC_MAX_ORDER];
    int64_t crd_len[SC_MAX_ORDER];
    void *vals;
    int64_t nvals;
    uint32_t borrowed;
} sc_tensor;

/*
 * What a generated kernel gets besides its tensors: the allocator for sparse outputs
 * (alloc returns NULL on failure), the thread count to use (<= 0: OpenMP's default),
 * the size of the last-level cache in bytes (kernels prefetch dense rows only from
 * operands larger than it), and room for a message when it fails.
 */
typedef struct sc_rt_env {
    void *(*alloc)(void *user, size_t n);
    void (*free)(void *user, void *p);
    void *user;
    int num_threads;
    int64_t cache_bytes;
    char msg[256];
} sc_rt_env;

/*
 * The one C ABI of every generated kernel:
 *   ops[i]  the operands, in expression order (dense operands are all-dense sc_tensors;
 *           a column-major matrix is "dd" with lvl2dim (1, 0));
 *   out     the result: its fmt, dims, dtype and index_type are set by the caller; the
 *           kernel allocates and fills its arrays through env (dense: vals only).
 * Returns SC_OK, or a status with env->msg filled (NOMEM on allocation failure); on
 * failure every array it allocated has been freed and out's pointers are NULL.
 */
typedef int (*sc_rt_kernel)(const sc_tensor *const *ops, sc_tensor *out, sc_rt_env *env);

#endif /* SCORCH_RT_H */
