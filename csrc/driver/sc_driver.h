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
#include "../runtime/scorch_rt.h"

typedef struct sc_compiler sc_compiler;
typedef struct sc_kernel sc_kernel;
typedef struct sc_later sc_later;

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
 * Ahead-of-time kernels: a shared object built with scorch (setup.py, tools/aot.py) from
 * sc_compile_source's output for the common products, generic in every size, exporting
 *   const uint64_t scorch_aot_isa[2];          sc_jit_host_isa() of the build host
 *   const int32_t scorch_aot_version;          SC_RT_VERSION
 *   const size_t scorch_aot_count;
 *   const sc_aot_kernel scorch_aot_table[];    sorted by key
 * A kernel whose key is in the table, written from the same C text (a table built by
 * another version of the code generator is not used), runs the table's function: no
 * compiler, no disk.
 */
typedef struct sc_aot_kernel {
    uint64_t key[2];
    uint64_t text[2]; /* sc_source_hash of the C it was built from */
    sc_rt_kernel fn;
} sc_aot_kernel;

/* Load the table at path.  *loaded: how many kernels it gave, 0 where it was built for
 * another ISA or runtime version (why: a static string then, else NULL).  RUNTIME error
 * when the file cannot be loaded or lacks the symbols; USER error when a table is
 * already loaded or a kernel was compiled. */
sc_status sc_compiler_load_aot(sc_compiler *c, const char *path, size_t *loaded,
                               const char **why, sc_error *err);

/* sc_compile_sized, except where the kernel written for the operands' sizes would need
 * the C compiler (in neither the process, the disk cache nor the table) while the table
 * has the kernel generic in every size under the same schedule: *out is then that
 * generic kernel, and *later the asked kernel compiling on a thread of its own (poll it
 * with sc_later_poll).  Otherwise *later is NULL. */
sc_status sc_compile_later(sc_compiler *c, sc_expr_lang lang, const char *expr, int32_t nops,
                           const sc_tensor *ops, const sc_format *out_fmt, const char *schedule,
                           bool sizes, const sc_kernel **out, sc_later **later, sc_error *err);

/* 1 with *k (the kernel, now in the compiler's map) when the compile has finished, 0
 * while it runs (wait: block until it ends), -1 with err when it failed (the compiler's
 * error; also in a fork's child, where the thread does not exist).  Any number of polls;
 * the later is the compiler's and lives until sc_compiler_free. */
int sc_later_poll(sc_later *l, bool wait, const sc_kernel **k, sc_error *err);

/* The generated C of a kernel, its key and symbol (for ahead-of-time builds). */
typedef struct sc_source {
    sc_jit_key key;
    sc_jit_key hash; /* sc_source_hash(text, len) */
    char symbol[48];
    char *text; /* owned: sc_source_release */
    size_t len;
} sc_source;

/* Run the pipeline up to the C source without compiling or keeping anything; gathers:
 * -1 the compiler's setting, 0/1 as given (what a host of the other kind would write). */
sc_status sc_compile_source(sc_compiler *c, sc_expr_lang lang, const char *expr, int32_t nops,
                            const sc_tensor *ops, const sc_format *out_fmt, const char *schedule,
                            bool sizes, int gathers, sc_source *source, sc_error *err);
void sc_source_release(sc_compiler *c, sc_source *source);
/* The hash of a kernel's C text that an ahead-of-time table records. */
sc_jit_key sc_source_hash(const char *text, size_t len);

/* Whether k runs an ahead-of-time kernel. */
bool sc_kernel_ahead(const sc_kernel *k);

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
