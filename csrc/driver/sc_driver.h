/*
 * sc_driver.h — the compiler driver: one function that runs the pipeline top to bottom
 * (expr → format inference → lower → schedule → ir → codegen → jit), a cache of compiled
 * kernels keyed on everything that shapes the generated code, and running a kernel.
 *
 * In:  an expression (einsum or index notation), operand descriptions (format, dims,
 *      dtype, index width, stored-entry counts for the scheduler's cost model), an output
 *      format (or NULL: inferred) and a schedule text (or NULL: automatic).
 * Out: an sc_kernel (owned by the compiler; valid until sc_compiler_free) that can be run
 *      on any operands matching those descriptions.
 *
 * SCORCH_DEBUG=1 in the environment makes the driver keep each stage's dump (the text is
 * returned by sc_kernel_explain, never printed by the library).
 */
#ifndef SC_DRIVER_H
#define SC_DRIVER_H

#include "../base/sc_base.h"
#include "../jit/sc_jit.h"

typedef struct sc_compiler sc_compiler;
typedef struct sc_kernel sc_kernel;

/* Build a compiler; cfg is passed to sc_jit_new (include_dir required). */
sc_compiler *sc_compiler_new(const sc_ctx *ctx, const sc_jit_config *cfg, sc_error *err);
void sc_compiler_free(sc_compiler *c);
/* Tell the automatic schedule that the caller converts an operand it transposes once and
 * keeps the copy for later runs (as scorch's Python layer does), so that a conversion that
 * buys a parallel loop is charged as a tenth of a pass over the operand (made once, shared
 * by the calls that read it) instead of a sort on every run: a loop order that reads a
 * copy in parallel then wins over one that runs on one thread.  Default false
 * (sc_kernel_run converts on every run). */
void sc_compiler_set_convert_once(sc_compiler *c, bool once);

typedef enum { SC_EXPR_LANG_EINSUM, SC_EXPR_LANG_INDEX } sc_expr_lang;

/*
 * Compile (or find) the kernel for expr over operands described by ops[0..nops-1] (only
 * fmt, dims, dtype, index_type, crd_len/pos_len/nvals are read; no array is touched).
 * out_fmt NULL: inferred.  schedule NULL or "": automatic; else the text form of a
 * schedule, whose directives are checked (USER error with the reason when illegal).
 * Thread-safe; compiles outside any lock.
 */
sc_status sc_compile(sc_compiler *c, sc_expr_lang lang, const char *expr, int32_t nops,
                     const sc_tensor *ops, const sc_format *out_fmt, const char *schedule,
                     const sc_kernel **out, sc_error *err);

/* The same, with sizes: false gives the kernel generic in every size (sc_compile writes
 * a kernel for the sizes of the dense-only indices of small extent: sc_kernel_fixed). */
sc_status sc_compile_sized(sc_compiler *c, sc_expr_lang lang, const char *expr, int32_t nops,
                           const sc_tensor *ops, const sc_format *out_fmt, const char *schedule,
                           bool sizes, const sc_kernel **out, sc_error *err);

/*
 * Run k on operands matching its descriptions (checked: formats, dtypes, index widths,
 * dims).  *out receives the result with arrays allocated through the compiler's ctx
 * allocator (caller owns them: sc_tensor_release).  num_threads <= 0: default.
 */
sc_status sc_kernel_run(const sc_kernel *k, const sc_tensor *const *ops, int num_threads,
                        sc_tensor *out, sc_error *err);

/* The output's format, dims, dtype and index width (arrays NULL). */
void sc_kernel_output(const sc_kernel *k, sc_tensor *desc);

/* Human-readable: canonical expression, operand and output formats, loop order, the
 * schedule in its text form, and the generated C.  Owned by the kernel. */
const char *sc_kernel_explain(const sc_kernel *k);

/* The operand dimensions whose size the kernel was written for (an index that only dense
 * operands read, of a small extent: sc_lower_fix_extents): up to max of them as
 * (op[i], dim[i], size[i]); returns how many there are.  Running it on other sizes is a
 * USER error. */
int32_t sc_kernel_fixed(const sc_kernel *k, int32_t max, int32_t *op, int32_t *dim, int64_t *size);

/* The schedule chosen (text form), owned by the kernel. */
const char *sc_kernel_schedule(const sc_kernel *k);

/* How long producing k took, in microseconds: the compiler's own stages (parse, lower,
 * schedule, IR, codegen) and the JIT (the C compiler, or loading from the disk cache). */
void sc_kernel_times(const sc_kernel *k, double *front_us, double *jit_us);

/* The JIT's counters (memory hits, disk hits, compiles) for this compiler. */
void sc_compiler_jit_stats(sc_compiler *c, sc_jit_counts *out);

#endif /* SC_DRIVER_H */
