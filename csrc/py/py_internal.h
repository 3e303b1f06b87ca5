/*
 * py_internal.h — shared by the files of the extension (csrc/py only): Python and NumPy
 * includes, the module state, and the argument/result helpers module.c defines.
 * A format crosses as (kinds, unique, lvl2dim); a tensor as (shape, fmt, pos list, crd
 * list, values array, index dtype name).
 */
#ifndef SC_PY_INTERNAL_H
#define SC_PY_INTERNAL_H

/* CPython's module slots and NumPy's API table convert between void * and function
 * pointers, which ISO C does not define; both are fine on every platform Python runs on. */
#pragma GCC diagnostic ignored "-Wpedantic"

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL sc_py_ARRAY_API
#ifndef SC_PY_INIT_NUMPY
#define NO_IMPORT_ARRAY
#endif
#include <numpy/arrayobject.h>

#include "../driver/sc_driver.h"
#include "../format/sc_format.h"
#include "dlpack_abi.h"

typedef struct sc_py_state {
    PyObject *compile_error;
    sc_ctx ctx;              /* the compiler's context (malloc/free) */
    sc_compiler *compiler;   /* created on first compile (under the GIL); lives as long as
                                the module */
    char *include_dir;       /* where scorch_rt.h is, set by the Python layer */
    char *aot_path;          /* the ahead-of-time kernels, loaded with the compiler */
    size_t aot_loaded;       /* how many kernels they gave */
    const char *aot_why;     /* why none (static text), or NULL */
    /* What a dense torch operand or result and a remembered kernel's call need, set by
     * the Python layer (set_torch): torch.float32, torch.float64, torch.int32,
     * torch.int64, torch.from_numpy, torch.Tensor, scorch.SparseTensor,
     * torch.is_grad_enabled, torch.get_num_threads, then the attribute names read from a
     * tensor (interned). */
#define SC_PY_TORCH_REFS 20
    PyObject *torch[SC_PY_TORCH_REFS];
    /* torch.Tensor's DLPack exchange table (set_torch), or NULL where torch publishes
     * none: dense torch.Tensor operands are then read through attributes, and result
     * arrays come back as NumPy arrays that torch.from_numpy wraps */
    const sc_dl_exchange *dl;
} sc_py_state;

enum { SC_PY_T_F32, SC_PY_T_F64, SC_PY_T_I32, SC_PY_T_I64, SC_PY_T_FROM_NUMPY,
       SC_PY_T_TENSOR, SC_PY_T_SPARSE, SC_PY_T_IS_GRAD_ENABLED, SC_PY_T_GET_NUM_THREADS,
       SC_PY_T_DTYPE, SC_PY_T_SHAPE, SC_PY_T_DATA_PTR, SC_PY_T_IS_CONTIGUOUS, SC_PY_T_IS_CPU,
       SC_PY_T_IS_NEG, SC_PY_T_REQUIRES_GRAD, SC_PY_T_KERNELS, SC_PY_T_DESC, SC_PY_T_VALUES,
       SC_PY_T_VERSION };

sc_py_state *sc_py_state_of(PyObject *module);
/* Set the Python exception for err; returns NULL. */
PyObject *sc_py_raise(PyObject *module, const sc_error *err);
/* The same, showing source with a caret under err->pos when it is set. */
PyObject *sc_py_raise_at(PyObject *module, const sc_error *err, const char *source);
int sc_py_parse_fmt(PyObject *module, PyObject *fmt, sc_format *f);
PyObject *sc_py_fmt_tuple(const sc_format *f);
int sc_py_index_of_name(const char *name, sc_index_type *out);
int sc_py_npy_of_dtype(sc_dtype t);
/* Borrowed arrays from the arguments into t. */
int sc_py_parse_tensor(PyObject *module, PyObject *shape, PyObject *fmt, PyObject *pos,
                       PyObject *crd, PyObject *vals, const char *index_name, sc_tensor *t);
/* sc_py_parse_tensor, then the arrays' lengths checked against each other
 * (sc_fmt_check_lengths, O(levels)): for arrays validated once that another thread may
 * have been replacing while the caller read them (copy_ of another pattern, .data =). */
int sc_py_parse_agreeing(PyObject *module, PyObject *shape, PyObject *fmt, PyObject *pos,
                         PyObject *crd, PyObject *vals, const char *index_name, sc_tensor *t);
/* (pos list, crd list, vals) owning t's arrays (malloc'd); t is emptied.  A level that
 * t borrows (t->borrowed) gets lent[2k] and lent[2k + 1] (borrowed references: the
 * owner's arrays) as its pos and crd instead; lent may be NULL when t borrows none.  The
 * arrays are torch tensors made through dl (torch's DLPack exchange table) where it is
 * given and applies (an array with memory, of a dtype it has a code for), else NumPy
 * arrays. */
PyObject *sc_py_tensor_result(sc_tensor *t, PyObject *const *lent, const sc_dl_exchange *dl);
/* An N-D array (t's dims, C order) owning t's values; t (all-dense, level order = dims)
 * is emptied.  A torch tensor through dl as in sc_py_tensor_result, else NumPy. */
PyObject *sc_py_dense_result(sc_tensor *t, const sc_dl_exchange *dl);

/* kernels.c */
#define SC_PY_MAX_OPERANDS 16

int sc_py_kernels_init(sc_py_state *st);
void sc_py_kernels_free(sc_py_state *st);
PyObject *sc_py_set_include_dir(PyObject *module, PyObject *args);
PyObject *sc_py_compile(PyObject *module, PyObject *args);
PyObject *sc_py_set_aot(PyObject *module, PyObject *args);
PyObject *sc_py_aot_info(PyObject *module, PyObject *args);
PyObject *sc_py_later_poll(PyObject *module, PyObject *args);
PyObject *sc_py_source(PyObject *module, PyObject *args);
PyObject *sc_py_host_isa(PyObject *module, PyObject *args);
PyObject *sc_py_run(PyObject *module, PyObject *args);
PyObject *sc_py_remembered(PyObject *module, PyObject *args);
PyObject *sc_py_prepare(PyObject *module, PyObject *args);
PyObject *sc_py_epoch(PyObject *module, PyObject *noargs);
PyObject *sc_py_new_epoch(PyObject *module, PyObject *noargs);
PyObject *sc_py_set_torch(PyObject *module, PyObject *args);
PyObject *sc_py_kernel_info(PyObject *module, PyObject *args);
PyObject *sc_py_kernel_fixed(PyObject *module, PyObject *args);
PyObject *sc_py_kernel_times(PyObject *module, PyObject *args);
PyObject *sc_py_jit_stats(PyObject *module, PyObject *args);

#define SC_PY_KERNEL_METHODS                                                              \
    {"set_include_dir", sc_py_set_include_dir, METH_VARARGS, "where scorch_rt.h lives"},  \
    {"compile", sc_py_compile, METH_VARARGS, "compile an expression -> kernel handle"},   \
    {"set_aot", sc_py_set_aot, METH_VARARGS, "the ahead-of-time kernels' file"},         \
    {"aot_info", sc_py_aot_info, METH_NOARGS, "(kernels loaded ahead of time, why not)"}, \
    {"later_poll", sc_py_later_poll, METH_VARARGS, "a background compile's kernel"},      \
    {"source", sc_py_source, METH_VARARGS, "(key, symbol, C source) of a kernel"},        \
    {"host_isa", sc_py_host_isa, METH_NOARGS, "this host's ISA hash (hex)"},             \
    {"run", sc_py_run, METH_VARARGS, "run a kernel on operands"},                          \
    {"remembered", sc_py_remembered, METH_VARARGS,                                       \
     "run the kernel a SparseTensor remembers, or None"},                                 \
    {"prepare", sc_py_prepare, METH_VARARGS, "an operand description parsed once"},       \
    {"epoch", sc_py_epoch, METH_NOARGS, "the epoch of prepared operands"},                \
    {"new_epoch", sc_py_new_epoch, METH_NOARGS, "retire every prepared operand"},         \
    {"set_torch", sc_py_set_torch, METH_VARARGS, "the torch objects the extension uses"}, \
    {"kernel_info", sc_py_kernel_info, METH_VARARGS,                                     \
     "(out shape, fmt, dtype, index, schedule, explain)"},                                 \
    {"kernel_fixed", sc_py_kernel_fixed, METH_VARARGS,                                   \
     "((operand, dim, size), ...) the kernel is written for"},                             \
    {"kernel_times", sc_py_kernel_times, METH_VARARGS, "(front-end us, jit us)"},         \
    {"jit_stats", sc_py_jit_stats, METH_NOARGS, "the JIT's counters"},

#endif
