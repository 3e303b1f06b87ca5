/*
 * module.c — scorch._C, the private extension (csrc/py is the only code that includes
 * Python.h and NumPy): module init and state, and the format functions.  It turns Python arguments (NumPy arrays, tuples) into C structs, validates them
 * with the GIL held, runs the core with the GIL released, and turns sc_error into the
 * Python exception (USER → ValueError, INDEX → IndexError, UNSUPPORTED →
 * NotImplementedError, NOMEM → MemoryError, COMPILE → scorch.CompileError, others →
 * RuntimeError).  Arrays the core allocates become NumPy arrays that own them (no copy).
 *
 * A format crosses as (kinds, unique, lvl2dim): three tuples of ints, one entry per level.
 */
#define SC_PY_INIT_NUMPY
#include "py_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static sc_py_state *get_state(PyObject *module)
{
    return (sc_py_state *)PyModule_GetState(module);
}

sc_py_state *sc_py_state_of(PyObject *module)
{
    return get_state(module);
}

/* Set the Python exception for err; returns NULL for `return raise(...)`. */
PyObject *sc_py_raise(PyObject *module, const sc_error *err)
{
    PyObject *type;
    switch (err->kind) {
    case SC_USER: type = PyExc_ValueError; break;
    case SC_INDEX: type = PyExc_IndexError; break;
    case SC_UNSUPPORTED: type = PyExc_NotImplementedError; break;
    case SC_NOMEM: type = PyExc_MemoryError; break;
    case SC_COMPILE: type = get_state(module)->compile_error; break;
    default: type = PyExc_RuntimeError; break;
    }
    PyErr_SetString(type, err->msg);
    return NULL;
}

PyObject *sc_py_raise_at(PyObject *module, const sc_error *err, const char *source)
{
    size_t len = source ? strlen(source) : 0;
    if (err->pos < 0 || !source || (size_t)err->pos > len)
        return sc_py_raise(module, err);
    sc_py_raise(module, err); /* sets the exception type */
    PyObject *type = PyErr_Occurred();
    char *caret = malloc((size_t)err->pos + 2);
    if (!caret)
        return NULL;
    memset(caret, ' ', (size_t)err->pos);
    caret[err->pos] = '^';
    caret[err->pos + 1] = '\0';
    PyErr_Clear();
    PyErr_Format(type, "%s (at column %lld)\n    %s\n    %s", err->msg, (long long)err->pos,
                 source, caret);
    free(caret);
    return NULL;
}

static void free_capsule(PyObject *cap)
{
    sc_mem_free(PyCapsule_GetPointer(cap, NULL));
}

/* An nd-dimensional array of typenum that owns p (allocated by the core's default ctx,
 * so freed through it: large blocks go back to its reuse list).  On failure p is freed
 * and NULL returned.  New reference. */
static PyObject *owning_array_nd(void *p, int nd, npy_intp *dims, int typenum)
{
    if (!p)
        return PyArray_SimpleNew(nd, dims, typenum);
    PyObject *arr = PyArray_SimpleNewFromData(nd, dims, typenum, p);
    if (!arr) {
        sc_mem_free(p);
        return NULL;
    }
    PyObject *cap = PyCapsule_New(p, NULL, free_capsule);
    if (!cap) {
        sc_mem_free(p);
        Py_DECREF(arr);
        return NULL;
    }
    if (PyArray_SetBaseObject((PyArrayObject *)arr, cap) < 0) { /* steals cap */
        Py_DECREF(arr);
        return NULL;
    }
    return arr;
}

/* An array handed to torch through DLPack: p (allocated by the core's default ctx, so
 * freed through it) with its shape, freed when the torch tensor dies, on whatever
 * thread that happens (sc_mem_free locks). */
typedef struct dl_result {
    sc_dl_managed m;
    int64_t shape[SC_MAX_ORDER];
    int64_t strides[SC_MAX_ORDER];
    int *freed;   /* set while torch's import runs: whether torch let go of it */
} dl_result;

static void dl_result_free(sc_dl_managed *m)
{
    dl_result *r = (dl_result *)m;
    if (r->freed)
        *r->freed = 1;
    sc_mem_free(m->tensor.data);
    free(r);
}

/* A torch tensor of nd dims that owns p, made through torch's exchange table dl (one call
 * into torch, no NumPy array); NULL with no error set where this route does not apply
 * (no table, a typenum it has no code for here, no p for a nonempty array: p then still
 * the caller's), NULL with an error set on failure (p freed).  The core's dtypes and
 * index widths all have codes, so with a table every array of a result is a tensor
 * (what _tensor._wrap relies on).  New reference. */
static PyObject *owning_tensor_dl(const sc_dl_exchange *dl, void *p, int nd,
                                  const npy_intp *dims, int typenum)
{
    bool is_float = typenum == NPY_FLOAT32 || typenum == NPY_FLOAT64;
    bool is_int = typenum == NPY_INT32 || typenum == NPY_INT64;
    if (!dl || (!is_float && !is_int) || nd > SC_MAX_ORDER)
        return NULL;
    if (!p) {   /* an empty array (the core allocates nothing for it) */
        for (int d = 0; d < nd; d++)
            if (dims[d] != 0)
                return NULL;
        if (!(p = malloc(1)))   /* (sc_mem_free frees a block it did not list by free) */
            return PyErr_NoMemory();
    }
    dl_result *r = calloc(1, sizeof *r);
    if (!r) {
        sc_mem_free(p);
        return PyErr_NoMemory();
    }
    int64_t stride = 1;
    for (int d = nd - 1; d >= 0; d--) {
        r->shape[d] = dims[d];
        r->strides[d] = stride;
        stride *= dims[d];
    }
    uint8_t bits = typenum == NPY_FLOAT32 || typenum == NPY_INT32 ? 32 : 64;
    r->m.version = (sc_dl_version){SC_DL_MAJOR, 0};
    r->m.deleter = dl_result_free;
    r->m.tensor = (sc_dl_tensor){.data = p, .device = {SC_DL_CPU, 0}, .ndim = nd,
                                 .dtype = {is_float ? SC_DL_FLOAT : SC_DL_INT, bits, 1},
                                 .shape = r->shape, .strides = r->strides};
    int freed = 0;
    r->freed = &freed;
    void *py = NULL;
    if (dl->managed_tensor_to_py_object_no_sync(&r->m, &py) < 0 || !py) {
        if (!freed)   /* (torch failed before taking it) */
            dl_result_free(&r->m);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "torch made no tensor of a DLPack result");
        return NULL;
    }
    r->freed = NULL;   /* (r lives as long as py) */
    return py;
}

/* An array of nd dims owning p: a torch tensor through dl where that route applies, else
 * a NumPy array.  On failure p is freed and NULL returned.  New reference. */
static PyObject *owning_result(const sc_dl_exchange *dl, void *p, int nd, npy_intp *dims,
                               int typenum)
{
    PyObject *r = owning_tensor_dl(dl, p, nd, dims, typenum);
    return r || PyErr_Occurred() ? r : owning_array_nd(p, nd, dims, typenum);
}

static PyObject *owning_vector(const sc_dl_exchange *dl, void *p, int64_t n, int typenum)
{
    npy_intp dims[1] = {(npy_intp)n};
    return owning_result(dl, p, 1, dims, typenum);
}

int sc_py_npy_of_dtype(sc_dtype t)
{
    switch (t) {
    case SC_DTYPE_F32: return NPY_FLOAT32;
    case SC_DTYPE_I32: return NPY_INT32;
    case SC_DTYPE_I64: return NPY_INT64;
    default: return NPY_FLOAT64;
    }
}
static int npy_of_index(sc_index_type t) { return t == SC_INDEX_I32 ? NPY_INT32 : NPY_INT64; }

static int dtype_of_npy(int typenum, sc_dtype *out)
{
    switch (typenum) {
    case NPY_FLOAT32: *out = SC_DTYPE_F32; return 0;
    case NPY_FLOAT64: *out = SC_DTYPE_F64; return 0;
    case NPY_INT32: *out = SC_DTYPE_I32; return 0;
    case NPY_INT64: *out = SC_DTYPE_I64; return 0;
    default:
        PyErr_SetString(PyExc_TypeError, "values must be float32, float64, int32 or int64");
        return -1;
    }
}

int sc_py_index_of_name(const char *name, sc_index_type *out)
{
    if (!strcmp(name, "int32")) {
        *out = SC_INDEX_I32;
        return 0;
    }
    if (!strcmp(name, "int64")) {
        *out = SC_INDEX_I64;
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "index dtype must be int32 or int64, not %s", name);
    return -1;
}

/* A C-contiguous, aligned 1-D array of the given type (borrowed), or error. */
static PyArrayObject *check_array(PyObject *o, int typenum, const char *what)
{
    if (!PyArray_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be a NumPy array", what);
        return NULL;
    }
    PyArrayObject *a = (PyArrayObject *)o;
    if (PyArray_NDIM(a) != 1 || !PyArray_ISCARRAY_RO(a) || PyArray_TYPE(a) != typenum) {
        PyErr_Format(PyExc_TypeError, "%s must be a contiguous 1-D array of %s", what,
                     typenum == NPY_INT32 ? "int32" : typenum == NPY_INT64 ? "int64"
                     : typenum == NPY_FLOAT32 ? "float32" : "float64");
        return NULL;
    }
    return a;
}

static int parse_dims(PyObject *seq, int32_t order_expected, int64_t *dims, int32_t *order)
{
    PyObject *fast = PySequence_Fast(seq, "shape must be a sequence of ints");
    if (!fast)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (n < 1 || n > SC_MAX_ORDER || (order_expected > 0 && n != order_expected)) {
        PyErr_Format(PyExc_ValueError, "shape has %zd dimensions; expected %s%d", n,
                     order_expected > 0 ? "" : "1..", order_expected > 0 ? (int)order_expected
                                                                         : SC_MAX_ORDER);
        Py_DECREF(fast);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));
        if (v == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
        if (v < 0) {
            PyErr_Format(PyExc_ValueError, "shape has a negative size %lld in dimension %zd",
                         v, i);
            Py_DECREF(fast);
            return -1;
        }
        dims[i] = v;
    }
    *order = (int32_t)n;
    Py_DECREF(fast);
    return 0;
}

/* fmt = (kinds, unique, lvl2dim) */
int sc_py_parse_fmt(PyObject *module, PyObject *fmt, sc_format *f)
{
    PyObject *kinds, *uniq, *l2d;
    if (!PyArg_ParseTuple(fmt, "OOO", &kinds, &uniq, &l2d))
        return -1;
    memset(f, 0, sizeof *f);
    Py_ssize_t n = PySequence_Size(kinds);
    if (n < 1 || n > SC_MAX_ORDER || PySequence_Size(uniq) != n || PySequence_Size(l2d) != n) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "malformed format tuple");
        return -1;
    }
    f->order = (int32_t)n;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = PySequence_GetItem(kinds, i), *b = PySequence_GetItem(uniq, i),
                 *c = PySequence_GetItem(l2d, i);
        long ka = a ? PyLong_AsLong(a) : -1, kb = b ? PyObject_IsTrue(b) : -1,
             kc = c ? PyLong_AsLong(c) : -1;
        Py_XDECREF(a);
        Py_XDECREF(b);
        Py_XDECREF(c);
        if (PyErr_Occurred())
            return -1;
        if (ka < 0 || ka >= SC_LEVEL_COUNT || kb < 0) {
            PyErr_SetString(PyExc_ValueError, "malformed format tuple");
            return -1;
        }
        f->kind[i] = (uint8_t)ka;
        f->unique[i] = (uint8_t)kb;
        f->lvl2dim[i] = (int32_t)kc;
    }
    sc_error err;
    if (sc_fmt_check(f, &err) != SC_OK) {
        sc_py_raise(module, &err);
        return -1;
    }
    return 0;
}

PyObject *sc_py_fmt_tuple(const sc_format *f)
{
    PyObject *k = PyTuple_New(f->order), *u = PyTuple_New(f->order), *l = PyTuple_New(f->order);
    if (!k || !u || !l)
        goto fail;
    for (int32_t i = 0; i < f->order; i++) {
        PyTuple_SET_ITEM(k, i, PyLong_FromLong(f->kind[i]));
        PyTuple_SET_ITEM(u, i, PyBool_FromLong(f->unique[i]));
        PyTuple_SET_ITEM(l, i, PyLong_FromLong(f->lvl2dim[i]));
    }
    if (PyErr_Occurred())
        goto fail;
    return Py_BuildValue("(NNN)", k, u, l);
fail:
    Py_XDECREF(k);
    Py_XDECREF(u);
    Py_XDECREF(l);
    return NULL;
}

/* (pos list, crd list, vals) from a tensor built by the core; takes ownership of t's
 * arrays (released on failure).  New reference. */
PyObject *sc_py_tensor_result(sc_tensor *t, PyObject *const *lent, const sc_dl_exchange *dl)
{
    sc_ctx ctx;
    sc_ctx_init(&ctx);
    int32_t N = t->fmt.order;
    PyObject *pos = PyList_New(N), *crd = PyList_New(N), *vals = NULL;
    if (!pos || !crd)
        goto fail;
    int it = npy_of_index(t->index_type);
    for (int32_t k = 0; k < N; k++) {
        PyObject *p = Py_None, *c = Py_None;
        if ((t->borrowed >> k) & 1u) {
            if (!lent || !lent[2 * k] || !lent[2 * k + 1]) {
                PyErr_SetString(PyExc_SystemError, "a borrowed level without its owner's arrays");
                goto fail;
            }
            p = lent[2 * k];
            c = lent[2 * k + 1];
            Py_INCREF(p);
            Py_INCREF(c);
            PyList_SET_ITEM(pos, k, p);
            PyList_SET_ITEM(crd, k, c);
            continue;
        }
        if (sc_level_has_pos((sc_level_kind)t->fmt.kind[k])) {
            p = owning_vector(dl, t->pos[k], t->pos_len[k], it);
            t->pos[k] = NULL;
            if (!p)
                goto fail;
        } else {
            Py_INCREF(p);
        }
        PyList_SET_ITEM(pos, k, p);
        if (sc_level_has_crd((sc_level_kind)t->fmt.kind[k])) {
            c = owning_vector(dl, t->crd[k], t->crd_len[k], it);
            t->crd[k] = NULL;
            if (!c)
                goto fail;
        } else {
            Py_INCREF(c);
        }
        PyList_SET_ITEM(crd, k, c);
    }
    vals = owning_vector(dl, t->vals, t->nvals, sc_py_npy_of_dtype(t->dtype));
    t->vals = NULL;
    if (!vals)
        goto fail;
    sc_tensor_release(&ctx, t);
    return Py_BuildValue("(NNN)", pos, crd, vals);
fail:
    sc_tensor_release(&ctx, t);
    Py_XDECREF(pos);
    Py_XDECREF(crd);
    Py_XDECREF(vals);
    return NULL;
}

PyObject *sc_py_dense_result(sc_tensor *t, const sc_dl_exchange *dl)
{
    sc_ctx ctx;
    sc_ctx_init(&ctx);
    npy_intp dims[SC_MAX_ORDER];
    int64_t total = 1;
    for (int32_t d = 0; d < t->fmt.order; d++) {
        dims[d] = (npy_intp)t->dims[d];
        total *= t->dims[d];
    }
    if (total != t->nvals) {
        sc_tensor_release(&ctx, t);
        PyErr_SetString(PyExc_RuntimeError, "a dense result has the wrong number of values");
        return NULL;
    }
    PyObject *arr = owning_result(dl, t->vals, t->fmt.order, dims, sc_py_npy_of_dtype(t->dtype));
    t->vals = NULL;
    sc_tensor_release(&ctx, t);
    return arr;
}

/* Fill t from Python (shape, fmt, pos list, crd list, vals, index dtype name).  The
 * arrays are borrowed from the caller's arguments. */
int sc_py_parse_tensor(PyObject *module, PyObject *shape, PyObject *fmt, PyObject *pos,
                       PyObject *crd, PyObject *vals, const char *index_name, sc_tensor *t)
{
    memset(t, 0, sizeof *t);
    if (sc_py_parse_fmt(module, fmt, &t->fmt) < 0)
        return -1;
    int32_t order;
    if (parse_dims(shape, t->fmt.order, t->dims, &order) < 0)
        return -1;
    if (sc_py_index_of_name(index_name, &t->index_type) < 0)
        return -1;
    int it = npy_of_index(t->index_type);
    if (!PyList_Check(pos) || !PyList_Check(crd) || PyList_GET_SIZE(pos) != order ||
        PyList_GET_SIZE(crd) != order) {
        PyErr_SetString(PyExc_ValueError, "pos and crd must be lists with one entry per level");
        return -1;
    }
    for (int32_t k = 0; k < order; k++) {
        sc_level_kind kind = (sc_level_kind)t->fmt.kind[k];
        PyObject *p = PyList_GET_ITEM(pos, k), *c = PyList_GET_ITEM(crd, k);
        if (sc_level_has_pos(kind)) {
            PyArrayObject *a = check_array(p, it, "pos array");
            if (!a)
                return -1;
            t->pos[k] = PyArray_DATA(a);
            t->pos_len[k] = PyArray_DIM(a, 0);
        } else if (p != Py_None) {
            PyErr_Format(PyExc_ValueError, "level %d (%s) has no pos array", (int)k,
                         sc_level_name(kind));
            return -1;
        }
        if (sc_level_has_crd(kind)) {
            PyArrayObject *a = check_array(c, it, "crd array");
            if (!a)
                return -1;
            t->crd[k] = PyArray_DATA(a);
            t->crd_len[k] = PyArray_DIM(a, 0);
        } else if (c != Py_None) {
            PyErr_Format(PyExc_ValueError, "level %d (%s) has no crd array", (int)k,
                         sc_level_name(kind));
            return -1;
        }
    }
    if (!PyArray_Check(vals)) {
        PyErr_SetString(PyExc_TypeError, "values must be a NumPy array");
        return -1;
    }
    if (dtype_of_npy(PyArray_TYPE((PyArrayObject *)vals), &t->dtype) < 0)
        return -1;
    PyArrayObject *v = check_array(vals, sc_py_npy_of_dtype(t->dtype), "values");
    if (!v)
        return -1;
    t->vals = PyArray_DATA(v);
    t->nvals = PyArray_DIM(v, 0);
    return 0;
}

int sc_py_parse_agreeing(PyObject *module, PyObject *shape, PyObject *fmt, PyObject *pos,
                         PyObject *crd, PyObject *vals, const char *index_name, sc_tensor *t)
{
    if (sc_py_parse_tensor(module, shape, fmt, pos, crd, vals, index_name, t) < 0)
        return -1;
    for (int32_t k = 0; k < t->fmt.order; k++) {
        if (t->fmt.kind[k] != SC_LEVEL_DENSE) {
            sc_error err;
            if (sc_fmt_check_lengths(t, &err) != SC_OK) {
                sc_py_raise(module, &err);
                return -1;
            }
            break;
        }
    }
    return 0;
}

static void ctx_for_call(sc_ctx *ctx, int threads)
{
    sc_ctx_init(ctx);
    ctx->num_threads = threads;
}

/* parse_format(spec, order) -> (kinds, unique, lvl2dim) */
static PyObject *py_parse_format(PyObject *module, PyObject *args)
{
    const char *spec;
    int order;
    if (!PyArg_ParseTuple(args, "si", &spec, &order))
        return NULL;
    sc_format f;
    sc_error err;
    if (sc_fmt_parse(spec, order, &f, &err) != SC_OK)
        return sc_py_raise(module, &err);
    return sc_py_fmt_tuple(&f);
}

/* format_info(fmt) -> (levels text, name or None) */
static PyObject *py_format_info(PyObject *module, PyObject *args)
{
    PyObject *fmt;
    if (!PyArg_ParseTuple(args, "O", &fmt))
        return NULL;
    sc_format f;
    if (sc_py_parse_fmt(module, fmt, &f) < 0)
        return NULL;
    char buf[256];
    sc_fmt_levels_text(&f, buf, sizeof buf);
    const char *name = sc_fmt_name(&f);
    return Py_BuildValue("(sz)", buf, name);
}

/* from_coords(shape, coords[order, nnz] int64, vals, fmt, index, flags, threads);
 * flags: 1 drop zeros, 2 entries already in row-major order. */
static PyObject *py_from_coords(PyObject *module, PyObject *args)
{
    PyObject *shape, *coords_o, *vals_o, *fmt;
    const char *index_name;
    int flags, threads;
    if (!PyArg_ParseTuple(args, "OOOOsii", &shape, &coords_o, &vals_o, &fmt, &index_name,
                          &flags, &threads))
        return NULL;
    sc_format f;
    int64_t dims[SC_MAX_ORDER];
    int32_t order;
    sc_index_type it;
    sc_dtype dt;
    if (sc_py_parse_fmt(module, fmt, &f) < 0 || parse_dims(shape, f.order, dims, &order) < 0 ||
        sc_py_index_of_name(index_name, &it) < 0)
        return NULL;
    if (!PyArray_Check(coords_o) || PyArray_NDIM((PyArrayObject *)coords_o) != 2 ||
        PyArray_TYPE((PyArrayObject *)coords_o) != NPY_INT64 ||
        !PyArray_ISCARRAY_RO((PyArrayObject *)coords_o) ||
        PyArray_DIM((PyArrayObject *)coords_o, 0) != order) {
        PyErr_Format(PyExc_ValueError,
                     "indices must be a contiguous int64 array of shape (%d, nnz)", (int)order);
        return NULL;
    }
    PyArrayObject *coords = (PyArrayObject *)coords_o;
    int64_t nnz = PyArray_DIM(coords, 1);
    if (!PyArray_Check(vals_o) || dtype_of_npy(PyArray_TYPE((PyArrayObject *)vals_o), &dt) < 0)
        return PyErr_Occurred() ? NULL : (PyErr_SetString(PyExc_TypeError, "bad values"), NULL);
    PyArrayObject *vals = check_array(vals_o, sc_py_npy_of_dtype(dt), "values");
    if (!vals)
        return NULL;
    if (PyArray_DIM(vals, 0) != nnz) {
        PyErr_Format(PyExc_ValueError, "values has %lld entries but indices has %lld",
                     (long long)PyArray_DIM(vals, 0), (long long)nnz);
        return NULL;
    }
    sc_ctx ctx;
    ctx_for_call(&ctx, threads);
    sc_tensor out;
    sc_error err;
    sc_status st;
    Py_BEGIN_ALLOW_THREADS
    st = sc_fmt_from_coords(&ctx, order, dims, nnz, PyArray_DATA(coords), nnz,
                            PyArray_DATA(vals), dt, &f, it,
                            flags & (SC_CONV_DROP_ZEROS | SC_CONV_SORTED), &out, &err);
    Py_END_ALLOW_THREADS
    if (st != SC_OK)
        return sc_py_raise(module, &err);
    return sc_py_tensor_result(&out, NULL, sc_py_state_of(module)->dl);
}

/* from_dense(array, fmt, index, threads) */
static PyObject *py_from_dense(PyObject *module, PyObject *args)
{
    PyObject *arr_o, *fmt;
    const char *index_name;
    int threads;
    if (!PyArg_ParseTuple(args, "OOsi", &arr_o, &fmt, &index_name, &threads))
        return NULL;
    sc_format f;
    sc_index_type it;
    sc_dtype dt;
    if (!PyArray_Check(arr_o) || !PyArray_ISCARRAY_RO((PyArrayObject *)arr_o)) {
        PyErr_SetString(PyExc_TypeError, "dense data must be a C-contiguous NumPy array");
        return NULL;
    }
    PyArrayObject *arr = (PyArrayObject *)arr_o;
    if (dtype_of_npy(PyArray_TYPE(arr), &dt) < 0 || sc_py_parse_fmt(module, fmt, &f) < 0 ||
        sc_py_index_of_name(index_name, &it) < 0)
        return NULL;
    int32_t order = PyArray_NDIM(arr);
    if (order != f.order) {
        PyErr_Format(PyExc_ValueError, "format has %d levels but the tensor has %d dimensions",
                     (int)f.order, (int)order);
        return NULL;
    }
    int64_t dims[SC_MAX_ORDER];
    for (int32_t d = 0; d < order; d++)
        dims[d] = PyArray_DIM(arr, d);
    sc_ctx ctx;
    ctx_for_call(&ctx, threads);
    sc_tensor out;
    sc_error err;
    sc_status st;
    Py_BEGIN_ALLOW_THREADS
    st = sc_fmt_from_dense(&ctx, order, dims, PyArray_DATA(arr), dt, &f, it, &out, &err);
    Py_END_ALLOW_THREADS
    if (st != SC_OK)
        return sc_py_raise(module, &err);
    return sc_py_tensor_result(&out, NULL, sc_py_state_of(module)->dl);
}

/* convert(shape, fmt, pos, crd, vals, index, dst_fmt, dst_index, drop_zeros, threads) */
static PyObject *py_convert(PyObject *module, PyObject *args)
{
    PyObject *shape, *fmt, *pos, *crd, *vals, *dfmt;
    const char *index_name, *dindex_name;
    int drop_zeros, threads;
    if (!PyArg_ParseTuple(args, "OOOOOsOspi", &shape, &fmt, &pos, &crd, &vals, &index_name,
                          &dfmt, &dindex_name, &drop_zeros, &threads))
        return NULL;
    sc_tensor src;
    sc_format f;
    sc_index_type it;
    if (sc_py_parse_agreeing(module, shape, fmt, pos, crd, vals, index_name, &src) < 0 ||
        sc_py_parse_fmt(module, dfmt, &f) < 0 || sc_py_index_of_name(dindex_name, &it) < 0)
        return NULL;
    sc_ctx ctx;
    ctx_for_call(&ctx, threads);
    sc_tensor out;
    sc_error err;
    sc_status st;
    Py_BEGIN_ALLOW_THREADS
    st = sc_fmt_convert(&ctx, &src, &f, it, drop_zeros ? SC_CONV_DROP_ZEROS : 0, &out, &err);
    Py_END_ALLOW_THREADS
    if (st != SC_OK)
        return sc_py_raise(module, &err);
    return sc_py_tensor_result(&out, NULL, sc_py_state_of(module)->dl);
}

/* to_dense(shape, fmt, pos, crd, vals, index, out) writes into out (C-contiguous). */
static PyObject *py_to_dense(PyObject *module, PyObject *args)
{
    PyObject *shape, *fmt, *pos, *crd, *vals, *out_o;
    const char *index_name;
    if (!PyArg_ParseTuple(args, "OOOOOsO", &shape, &fmt, &pos, &crd, &vals, &index_name,
                          &out_o))
        return NULL;
    sc_tensor src;
    if (sc_py_parse_agreeing(module, shape, fmt, pos, crd, vals, index_name, &src) < 0)
        return NULL;
    if (!PyArray_Check(out_o) || !PyArray_ISCARRAY((PyArrayObject *)out_o) ||
        PyArray_TYPE((PyArrayObject *)out_o) != sc_py_npy_of_dtype(src.dtype)) {
        PyErr_SetString(PyExc_TypeError, "out must be a writable C-contiguous array of the "
                                         "values' dtype");
        return NULL;
    }
    PyArrayObject *out = (PyArrayObject *)out_o;
    int64_t total = 1;
    for (int32_t d = 0; d < src.fmt.order; d++)
        total *= src.dims[d];
    if (PyArray_SIZE(out) != total) {
        PyErr_SetString(PyExc_ValueError, "out has the wrong size");
        return NULL;
    }
    sc_ctx ctx;
    sc_ctx_init(&ctx);
    sc_error err;
    sc_status st;
    Py_BEGIN_ALLOW_THREADS
    st = sc_fmt_to_dense(&ctx, &src, PyArray_DATA(out), &err);
    Py_END_ALLOW_THREADS
    if (st != SC_OK)
        return sc_py_raise(module, &err);
    Py_RETURN_NONE;
}

/* validate(shape, fmt, pos, crd, vals, index) raises on invalid arrays. */
static PyObject *py_validate(PyObject *module, PyObject *args)
{
    PyObject *shape, *fmt, *pos, *crd, *vals;
    const char *index_name;
    if (!PyArg_ParseTuple(args, "OOOOOs", &shape, &fmt, &pos, &crd, &vals, &index_name))
        return NULL;
    sc_tensor t;
    if (sc_py_parse_tensor(module, shape, fmt, pos, crd, vals, index_name, &t) < 0)
        return NULL;
    sc_ctx ctx;
    sc_ctx_init(&ctx);
    sc_error err;
    sc_status st;
    Py_BEGIN_ALLOW_THREADS
    st = sc_fmt_validate(&ctx, &t, &err);
    Py_END_ALLOW_THREADS
    if (st != SC_OK)
        return sc_py_raise(module, &err);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"parse_format", py_parse_format, METH_VARARGS, "parse_format(spec, order) -> fmt"},
    {"format_info", py_format_info, METH_VARARGS, "format_info(fmt) -> (levels, name)"},
    {"from_coords", py_from_coords, METH_VARARGS, "build a tensor from coordinates"},
    {"from_dense", py_from_dense, METH_VARARGS, "build a tensor from a dense array"},
    {"convert", py_convert, METH_VARARGS, "convert a tensor to another format"},
    {"to_dense", py_to_dense, METH_VARARGS, "write a tensor densely into an array"},
    {"validate", py_validate, METH_VARARGS, "check a tensor's arrays"},
    SC_PY_KERNEL_METHODS
    {NULL, NULL, 0, NULL},
};

static int module_exec(PyObject *module)
{
    if (PyArray_ImportNumPyAPI() < 0)
        return -1;
    sc_py_state *st = get_state(module);
    if (sc_py_kernels_init(st) < 0)
        return -1;
    st->compile_error = PyErr_NewExceptionWithDoc(
        "scorch.CompileError", "The C compiler failed on a generated kernel.",
        PyExc_RuntimeError, NULL);
    if (!st->compile_error)
        return -1;
    if (PyModule_AddObjectRef(module, "CompileError", st->compile_error) < 0)
        return -1;
    if (PyModule_AddIntConstant(module, "MAX_ORDER", SC_MAX_ORDER) < 0 ||
        PyModule_AddIntConstant(module, "RT_VERSION", SC_RT_VERSION) < 0)
        return -1;
    static const char *const level_names[] = {
#define SC_X_(e, name, letter, has_pos, has_crd) name,
        SC_LEVEL_KINDS(SC_X_)
#undef SC_X_
    };
    PyObject *names = PyTuple_New(SC_LEVEL_COUNT);
    if (!names)
        return -1;
    for (int i = 0; i < SC_LEVEL_COUNT; i++)
        PyTuple_SET_ITEM(names, i, PyUnicode_FromString(level_names[i]));
    int rc = PyErr_Occurred() ? -1 : PyModule_AddObjectRef(module, "LEVEL_KINDS", names);
    Py_DECREF(names);
    return rc;
}

static int module_traverse(PyObject *module, visitproc visit, void *arg)
{
    sc_py_state *st = get_state(module);
    Py_VISIT(st->compile_error);
    for (int i = 0; i < SC_PY_TORCH_REFS; i++)
        Py_VISIT(st->torch[i]);
    return 0;
}

static int module_clear(PyObject *module)
{
    sc_py_state *st = get_state(module);
    Py_CLEAR(st->compile_error);
    for (int i = 0; i < SC_PY_TORCH_REFS; i++)
        Py_CLEAR(st->torch[i]);
    return 0;
}

static void module_free(void *module)
{
    module_clear((PyObject *)module);
    sc_py_kernels_free(get_state((PyObject *)module));
}

static PyModuleDef_Slot slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT,
    .m_name = "scorch._C",
    .m_doc = "scorch's C core (private).",
    .m_size = sizeof(sc_py_state),
    .m_methods = methods,
    .m_slots = slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC PyInit__C(void);
PyMODINIT_FUNC PyInit__C(void)
{
    return PyModuleDef_Init(&moduledef);
}
