/*
 * kernels.c — the compiler's Python surface: compile an expression for given operands
 * into a kernel handle (a capsule around a kernel the module's compiler owns for the
 * module's lifetime), run a kernel, and describe it.  The GIL is released while the
 * compiler and the kernels run; only C structs cross into that region.
 */
#include "py_internal.h"

#include <stdlib.h>
#include <string.h>

#define KERNEL_CAPSULE "scorch.kernel"

int sc_py_kernels_init(sc_py_state *st)
{
    sc_ctx_init(&st->ctx);
    st->compiler = NULL;
    st->include_dir = NULL;
    return 0;
}

void sc_py_kernels_free(sc_py_state *st)
{
    if (st->compiler)
        sc_compiler_free(st->compiler);
    st->compiler = NULL;
    free(st->include_dir);
    st->include_dir = NULL;
}

PyObject *sc_py_set_include_dir(PyObject *module, PyObject *args)
{
    const char *dir;
    if (!PyArg_ParseTuple(args, "s", &dir))
        return NULL;
    sc_py_state *st = sc_py_state_of(module);
    if (st->compiler) {
        PyErr_SetString(PyExc_RuntimeError, "the include dir is fixed once a kernel exists");
        return NULL;
    }
    char *copy = strdup(dir);
    if (!copy)
        return PyErr_NoMemory();
    free(st->include_dir);
    st->include_dir = copy;
    Py_RETURN_NONE;
}

static sc_compiler *get_compiler(PyObject *module)
{
    sc_py_state *st = sc_py_state_of(module);
    if (st->compiler)
        return st->compiler;
    if (!st->include_dir) {
        PyErr_SetString(PyExc_RuntimeError, "scorch._C.set_include_dir was not called");
        return NULL;
    }
    sc_jit_config cfg = {NULL, NULL, NULL, st->include_dir};
    sc_error err;
    st->compiler = sc_compiler_new(&st->ctx, &cfg, &err);
    if (!st->compiler)
        sc_py_raise(module, &err);
    return st->compiler;
}

/* ops: a list of (shape, fmt, pos, crd, vals, index) tuples → t[0..n-1]. */
static int parse_ops(PyObject *module, PyObject *ops, sc_tensor *t, Py_ssize_t *n)
{
    if (!PyList_Check(ops)) {
        PyErr_SetString(PyExc_TypeError, "operands must be a list");
        return -1;
    }
    *n = PyList_GET_SIZE(ops);
    if (*n < 1 || *n > SC_PY_MAX_OPERANDS) {
        PyErr_Format(PyExc_ValueError, "expected 1..%d operands, got %zd", SC_PY_MAX_OPERANDS,
                     *n);
        return -1;
    }
    for (Py_ssize_t i = 0; i < *n; i++) {
        PyObject *shape, *fmt, *pos, *crd, *vals;
        const char *index_name;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(ops, i), "OOOOOs", &shape, &fmt, &pos, &crd,
                              &vals, &index_name))
            return -1;
        if (sc_py_parse_tensor(module, shape, fmt, pos, crd, vals, index_name, &t[i]) < 0)
            return -1;
    }
    return 0;
}

/* compile(lang, expr, ops, out_fmt or None, schedule or None) -> kernel capsule */
PyObject *sc_py_compile(PyObject *module, PyObject *args)
{
    int lang;
    const char *expr, *schedule = NULL;
    PyObject *ops, *out_fmt_o;
    if (!PyArg_ParseTuple(args, "isOOz", &lang, &expr, &ops, &out_fmt_o, &schedule))
        return NULL;
    sc_tensor t[SC_PY_MAX_OPERANDS];
    Py_ssize_t n;
    if (parse_ops(module, ops, t, &n) < 0)
        return NULL;
    sc_format out_fmt;
    const sc_format *outp = NULL;
    if (out_fmt_o != Py_None) {
        if (sc_py_parse_fmt(module, out_fmt_o, &out_fmt) < 0)
            return NULL;
        outp = &out_fmt;
    }
    sc_compiler *c = get_compiler(module);
    if (!c)
        return NULL;
    const sc_kernel *k = NULL;
    sc_error err;
    sc_status st;
    Py_BEGIN_ALLOW_THREADS
    st = sc_compile(c, lang ? SC_EXPR_LANG_INDEX : SC_EXPR_LANG_EINSUM, expr, (int32_t)n, t,
                    outp, schedule, &k, &err);
    Py_END_ALLOW_THREADS
    if (st != SC_OK)
        return sc_py_raise_at(module, &err, err.stage && !strcmp(err.stage, "schedule")
                                                  ? schedule : expr);
    return PyCapsule_New((void *)k, KERNEL_CAPSULE, NULL);
}

static const sc_kernel *kernel_of(PyObject *cap)
{
    return PyCapsule_GetPointer(cap, KERNEL_CAPSULE);
}

/* The kernel of a call whose only argument is a kernel capsule, or NULL (error set). */
static const sc_kernel *kernel_arg(PyObject *args)
{
    PyObject *cap;
    if (!PyArg_ParseTuple(args, "O", &cap))
        return NULL;
    return kernel_of(cap);
}

/* A tuple of the first n dims.  New reference. */
static PyObject *dims_tuple(int32_t n, const int64_t *dims)
{
    PyObject *t = PyTuple_New(n);
    if (!t)
        return NULL;
    for (int32_t i = 0; i < n; i++) {
        PyObject *d = PyLong_FromLongLong(dims[i]);
        if (!d) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, d);
    }
    return t;
}

/* run(kernel, ops, threads) -> (shape, (pos, crd, vals)) of the output */
PyObject *sc_py_run(PyObject *module, PyObject *args)
{
    PyObject *cap, *ops;
    int threads;
    if (!PyArg_ParseTuple(args, "OOi", &cap, &ops, &threads))
        return NULL;
    const sc_kernel *k = kernel_of(cap);
    if (!k)
        return NULL;
    sc_tensor t[SC_PY_MAX_OPERANDS];
    const sc_tensor *tp[SC_PY_MAX_OPERANDS];
    Py_ssize_t n;
    if (parse_ops(module, ops, t, &n) < 0)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++)
        tp[i] = &t[i];
    sc_tensor out;
    sc_error err;
    sc_status st;
    Py_BEGIN_ALLOW_THREADS
    st = sc_kernel_run(k, tp, threads, &out, &err);
    Py_END_ALLOW_THREADS
    if (st != SC_OK)
        return sc_py_raise(module, &err);
    PyObject *shape = dims_tuple(out.fmt.order, out.dims);
    if (!shape) {
        sc_ctx ctx;
        sc_ctx_init(&ctx);
        sc_tensor_release(&ctx, &out);
        return NULL;
    }
    PyObject *arrays = sc_py_tensor_result(&out); /* takes out's arrays */
    if (!arrays) {
        Py_DECREF(shape);
        Py_XDECREF(arrays);
        return NULL;
    }
    return Py_BuildValue("(NN)", shape, arrays);
}

/* kernel_info(kernel) -> (shape, fmt, dtype name, index name, schedule, explain) */
PyObject *sc_py_kernel_info(PyObject *module, PyObject *args)
{
    (void)module;
    const sc_kernel *k = kernel_arg(args);
    if (!k)
        return NULL;
    sc_tensor d;
    sc_kernel_output(k, &d);
    PyObject *shape = dims_tuple(d.fmt.order, d.dims);
    if (!shape)
        return NULL;
    PyObject *fmt = sc_py_fmt_tuple(&d.fmt);
    if (!fmt) {
        Py_DECREF(shape);
        Py_XDECREF(fmt);
        return NULL;
    }
    return Py_BuildValue("(NNssss)", shape, fmt, sc_dtype_name(d.dtype),
                         sc_index_name(d.index_type), sc_kernel_schedule(k),
                         sc_kernel_explain(k));
}

/* kernel_times(kernel) -> (front-end microseconds, jit microseconds) */
PyObject *sc_py_kernel_times(PyObject *module, PyObject *args)
{
    (void)module;
    const sc_kernel *k = kernel_arg(args);
    if (!k)
        return NULL;
    double f, j;
    sc_kernel_times(k, &f, &j);
    return Py_BuildValue("(dd)", f, j);
}

/* jit_stats() -> {"mem_hits", "disk_hits", "compiles", "disk_refused"} */
PyObject *sc_py_jit_stats(PyObject *module, PyObject *args)
{
    (void)args;
    sc_compiler *c = get_compiler(module);
    if (!c)
        return NULL;
    sc_jit_counts n;
    sc_compiler_jit_stats(c, &n);
    return Py_BuildValue("{sKsKsKsK}", "mem_hits", (unsigned long long)n.mem_hits,
                         "disk_hits", (unsigned long long)n.disk_hits, "compiles",
                         (unsigned long long)n.compiles, "disk_refused",
                         (unsigned long long)n.disk_refused);
}
